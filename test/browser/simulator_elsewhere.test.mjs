// The web UI against an outboxd whose simulated partners run in a process of their own
// (simulator.enabled false):
//   node test/browser/simulator_elsewhere.test.mjs http://127.0.0.1:9000
// test/e2e/ui_browser_test.cpp starts such an outboxd, then runs this. The simulator panel says
// where the knobs are instead of loading for ever, its reset button is gone, and the page counts
// itself live: the missing simulator routes are not an error of the page's.
import { baseUrl, check, eventually, run } from './harness.mjs';

const base = baseUrl('simulator_elsewhere.test.mjs');

await run('ui-simulator-elsewhere', async ({ step, open }) => {
  const page = await open();
  await step('the simulator panel says the knobs are in the simulator process', async () => {
    await page.goto(base);
    await eventually('the panel names the other process', async () =>
      (await page.locator('#knobs').textContent()).includes('run in a process of their own'));
    check(await page.locator('#knobs input').count() === 0, 'knob inputs are drawn');
    check(!(await page.locator('#sim-reset').isVisible()), 'the reset button is shown');
  });

  await step('the page is live, not degraded', async () => {
    await eventually('the connection is live', async () =>
      (await page.locator('#connection').textContent()).startsWith('live'));
  });
});
