// Drives the web UI against an outboxd whose http.fanout is not the shipped one:
//   node test/browser/fanout.test.mjs http://127.0.0.1:9000
// test/e2e/ui_browser_test.cpp starts outboxd with OrderCreated -> fraudCheck, shipping, inventory
// (no billing), creates one order that is confirmed and one that inventory refuses (so shipping
// is reverted), then runs this. The order cards must draw that pipeline, not the shipped one.
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiClient, baseUrl, check, eventually, run } from './harness.mjs';

const base = baseUrl('fanout.test.mjs');
const api = apiClient(base);
const EXPECTED = [
  { destination: 'fraudCheck', revertible: false },
  { destination: 'shipping', revertible: true },
  { destination: 'inventory', revertible: true },
];

await run('ui-fanout', async ({ step, open, seen }) => {
  await step('GET /api/outbox/fanout describes the configured fan-out', async () => {
    const r = await api('GET', '/api/outbox/fanout');
    check(r.status === 200, `GET /api/outbox/fanout answered ${r.status}`);
    check(JSON.stringify(r.json.eventTypes.OrderCreated) === JSON.stringify(EXPECTED),
      `OrderCreated fan-out: ${JSON.stringify(r.json.eventTypes.OrderCreated)}`);
  });

  const { json: list } = await api('GET', '/api/orders?limit=50');
  const confirmed = list.orders.find((o) => o.status === 'CONFIRMED');
  const failed = list.orders.find((o) => o.status === 'FAILED');
  check(confirmed && failed, `the test set-up must create a CONFIRMED and a FAILED order; orders: ${JSON.stringify(list.orders)}`);

  const page = await open();
  const card = (id) => page.locator(`article.order[data-order-id="${id}"]`);
  const forward = (id) => card(id).locator('.forward .node').evaluateAll((nodes) =>
    nodes.map((n) => ({ step: n.dataset.step, state: n.dataset.state, revertible: n.dataset.revertible === 'true' })));

  await step('the page draws the configured steps in their order, with their revert marks', async () => {
    await page.goto(base + '/', { waitUntil: 'load' });
    await card(confirmed.id).waitFor({ timeout: 15000 });
    const nodes = await eventually('the confirmed order to show every step succeeded', async () => {
      const n = await forward(confirmed.id);
      return n.length === 5 && n.slice(2).every((x) => x.state === 'success') ? n : null;
    });
    const steps = nodes.map((n) => n.step);
    check(JSON.stringify(steps) === JSON.stringify(['order', 'outbox', 'fraudCheck', 'shipping', 'inventory']),
      `forward steps: ${JSON.stringify(steps)}`);
    check(await card(confirmed.id).locator('.node[data-step="billing"]').count() === 0, 'a billing step is drawn');
    const marks = nodes.slice(2).map((n) => ({ destination: n.step, revertible: n.revertible }));
    check(JSON.stringify(marks) === JSON.stringify(EXPECTED), `revert marks: ${JSON.stringify(marks)}`);
  });

  await step('the refused order shows the step that failed and the revert of the one before', async () => {
    const stateOf = async (s) => (await forward(failed.id)).find((n) => n.step === s)?.state;
    await eventually('the failed order to be drawn', async () => (await stateOf('inventory')) === 'failed');
    check(await stateOf('fraudCheck') === 'success', `fraudCheck is ${await stateOf('fraudCheck')}`);
    check(await stateOf('shipping') === 'reverted', `shipping is ${await stateOf('shipping')}`);
    const reverts = await card(failed.id).locator('.revert-row .node').evaluateAll((nodes) =>
      nodes.map((n) => `${n.dataset.step}:${n.dataset.state}`));
    // Newest first: shipping is undone, fraudCheck has nothing to undo, inventory never succeeded.
    check(JSON.stringify(reverts) === JSON.stringify(['shipping.revert:reverted', 'fraudCheck.revert:skipped']),
      `revert row: ${JSON.stringify(reverts)}`);
  });

  await step('screenshot, and no dialog, page error or console error', async () => {
    const shot = join(tmpdir(), `outboxd-ui-fanout-${process.pid}.png`);
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot: ${shot}`);
    check(seen.dialogs.length === 0, `dialogs fired: ${seen.dialogs.join(', ')}`);
    check(seen.pageErrors.length === 0, `page errors: ${seen.pageErrors.join('\n')}`);
    check(seen.consoleErrors.length === 0, `console errors: ${JSON.stringify(seen.consoleErrors)}`);
  });
});
