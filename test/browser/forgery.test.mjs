// Cross-site request forgery in a real browser: a page of another origin tries to change an
// outboxd that asks for no token (the worst case: loopback, no auth.tokens).
//   node test/browser/forgery.test.mjs http://127.0.0.1:9000
// test/e2e/ui_browser_test.cpp starts outboxd and creates two CONFIRMED orders, then runs this.
// The attacker's page is served by this script from http://localhost:<another port> (another
// site as the browser sees it) and tries what any web page can: HTML forms (urlencoded, text/plain,
// multipart) auto-submitted, and fetch() without and with a preflight. Afterwards the target
// order is still CONFIRMED and the simulator's knobs are unchanged; the same cancel sent by a
// client that is not a browser page (the control) does cancel the other order, so the route did
// accept a cancel at all.
import { createServer } from 'node:http';
import { apiClient, baseUrl, check, eventually, run, sleep } from './harness.mjs';

const base = baseUrl('forgery.test.mjs');
const api = apiClient(base);

function attackerPage(target, id) {
  const cancel = `${target}/api/orders/${id}/cancel`;
  const form = (name, enctype, field, value) => `
    <iframe name="${name}"></iframe>
    <form id="${name}-form" action="${cancel}" method="POST" enctype="${enctype}" target="${name}">
      <input name="${field}" value='${value}'>
    </form>`;
  return `<!doctype html><html><body>
    ${form('urlencoded', 'application/x-www-form-urlencoded', 'reason', 'forged')}
    ${form('plain', 'text/plain', '{"reason":"forged","x', '"}')}
    ${form('multipart', 'multipart/form-data', 'reason', 'forged')}
    <script>
      const results = {};
      window.attack = async () => {
        for (const name of ['urlencoded', 'plain', 'multipart'])
          document.getElementById(name + '-form').submit();
        const tries = {
          simple: () => fetch('${cancel}', { method: 'POST', mode: 'no-cors',
            headers: { 'Content-Type': 'text/plain' }, body: '{"reason":"forged"}' }),
          json: () => fetch('${cancel}', { method: 'POST',
            headers: { 'Content-Type': 'application/json' }, body: '{"reason":"forged"}' }),
          bearer: () => fetch('${cancel}', { method: 'POST',
            headers: { Authorization: 'Bearer guess' } }),
          knobs: () => fetch('${target}/api/simulator/config', { method: 'PUT',
            headers: { 'Content-Type': 'application/json' },
            body: '{"services":{"billing.charge":{"failureRate":1}}}' }),
          remove: () => fetch('${target}/api/orders/${id}', { method: 'DELETE' }),
        };
        for (const [name, go] of Object.entries(tries)) {
          try {
            const r = await go();
            results[name] = r.type === 'opaque' ? 'sent, answer unreadable' : 'read ' + r.status;
          } catch (e) {
            results[name] = 'blocked: ' + e.message;
          }
        }
        return results;
      };
    </script></body></html>`;
}

await run('forgery', async ({ step, open }) => {
  const { json: list } = await api('GET', '/api/orders?limit=50');
  const confirmed = list.orders.filter((o) => o.status === 'CONFIRMED').map((o) => o.id);
  check(confirmed.length >= 2, `the set-up must create two CONFIRMED orders: ${JSON.stringify(list.orders)}`);
  const [target, control] = confirmed;
  const { json: knobsBefore } = await api('GET', '/api/simulator/config');

  const server = createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(attackerPage(base, target));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const attacker = `http://localhost:${server.address().port}/`;
  try {
    const page = await open();
    let results;
    await step(`a page of ${attacker} submits forms and fetches against order ${target}`, async () => {
      await page.goto(attacker);
      results = await page.evaluate(() => window.attack());
      console.log(`     what the attacker's page saw: ${JSON.stringify(results)}`);
      // The preflighted requests never leave the browser: outboxd answers no preflight for it.
      for (const name of ['json', 'bearer', 'knobs', 'remove'])
        check(results[name].startsWith('blocked'), `${name} was not blocked: ${results[name]}`);
      await sleep(1500); // the forms' navigations land in their frames
    });

    await step('nothing changed: the order is still CONFIRMED and the knobs are as they were', async () => {
      const { json } = await api('GET', `/api/orders/${target}`);
      check(json.order.status === 'CONFIRMED', `order ${target} is ${json.order.status}`);
      const cancels = json.events.filter((e) => e.eventType === 'OrderCancelled');
      check(cancels.length === 0, `order ${target} has a cancel event: ${JSON.stringify(cancels)}`);
      const { json: knobsAfter } = await api('GET', '/api/simulator/config');
      check(JSON.stringify(knobsAfter) === JSON.stringify(knobsBefore), 'the simulator knobs changed');
    });

    await step(`the control: the same cancel from a client that is not a page cancels order ${control}`, async () => {
      const r = await api('POST', `/api/orders/${control}/cancel`, { reason: 'control' });
      check(r.status === 202, `cancel of order ${control} answered ${r.status}: ${r.text}`);
      await eventually(`order ${control} CANCELLED`, async () =>
        (await api('GET', `/api/orders/${control}`)).json.order.status === 'CANCELLED');
    });
  } finally {
    server.close();
  }
});
