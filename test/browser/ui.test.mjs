// Drives the outboxd web UI in Debian's chromium (playwright-core) against a running outboxd.
//   node test/browser/ui.test.mjs http://127.0.0.1:9000
// test/e2e/ui_browser_test.cpp starts outboxd, creates an order whose customer is an XSS string
// and one that fails in billing (so it is compensated), then runs this. Exits non-zero on the
// first failed step; screenshots go to the temporary folder (paths printed).
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiClient, baseUrl, check, eventually, run, sleep } from './harness.mjs';

const base = baseUrl('ui.test.mjs');
const api = apiClient(base);
const XSS = '<img src=x onerror=alert(1)>';
const BIDI = '\u202eNIMDA\u200b x';
const shots = [];

await run('ui', async ({ step, open, seen }) => {
  const { consoleErrors, pageErrors, dialogs } = seen;
  await step('the UI files are served with their types and a strict Content-Security-Policy', async () => {
    const index = await api('GET', '/');
    check(index.status === 200, `GET / answered ${index.status}`);
    check(index.headers.get('content-type').startsWith('text/html'), `GET / content-type ${index.headers.get('content-type')}`);
    check((index.headers.get('content-security-policy') || '').includes("default-src 'self'"),
      `GET / CSP: ${index.headers.get('content-security-policy')}`);
    check(index.headers.get('x-content-type-options') === 'nosniff', 'GET / lacks X-Content-Type-Options: nosniff');
    check(index.headers.get('cache-control') === 'no-cache', `GET / Cache-Control: ${index.headers.get('cache-control')}`);
    const js = await api('GET', '/ui/app.js');
    check(js.status === 200 && js.headers.get('content-type').startsWith('text/javascript'), `GET /ui/app.js: ${js.status} ${js.headers.get('content-type')}`);
    check(!/innerHTML|outerHTML|insertAdjacentHTML|document\.write/.test(js.text), 'app.js inserts HTML somewhere');
    const css = await api('GET', '/ui/style.css');
    check(css.status === 200 && css.headers.get('content-type').startsWith('text/css'), `GET /ui/style.css: ${css.status} ${css.headers.get('content-type')}`);
  });

  const { json: list } = await api('GET', '/api/orders?limit=50');
  const xssOrder = list.orders.find((o) => o.customerId === XSS);
  const failedOrder = list.orders.find((o) => o.status === 'FAILED');
  const bidiOrder = list.orders.find((o) => o.customerId === BIDI);
  check(xssOrder && failedOrder && bidiOrder, `the test set-up must create an XSS order, a FAILED order and one with a bidi override; orders: ${JSON.stringify(list.orders)}`);

  const page = await open();
  const card = (id) => page.locator(`article.order[data-order-id="${id}"]`);
  const badge = (id) => card(id).locator('.order-head .badge');

  await step('the page loads, polls and logs no console errors', async () => {
    await page.goto(base + '/', { waitUntil: 'load' });
    await page.locator('article.order').nth(1).waitFor({ timeout: 15000 });
    await eventually('the connection indicator to say live', async () => (await page.locator('#connection').getAttribute('class')).includes('live'));
    await sleep(2500); // a few polls
    check(pageErrors.length === 0, `page errors: ${pageErrors.join('\n')}`);
    check(consoleErrors.length === 0, `console errors: ${JSON.stringify(consoleErrors)}`);
  });

  await step('an XSS customer is shown literally and runs nothing', async () => {
    const text = await card(xssOrder.id).locator('.customer').textContent();
    check(text === XSS, `customer shown as ${JSON.stringify(text)}`);
    check(await page.locator('#orders img').count() === 0, 'an <img> element appeared in the orders list');
    check(dialogs.length === 0, `dialogs fired: ${dialogs.join(', ')}`);
  });

  await step('invisible format characters are shown as code points, not obeyed', async () => {
    const text = await card(bidiOrder.id).locator('.customer').textContent();
    check(text === '⟨U+202E⟩NIMDA⟨U+200B⟩ x', `customer shown as ${JSON.stringify(text)}`);
  });

  await step('the failed order shows reverted steps and the LIFO revert row', async () => {
    const c = card(failedOrder.id);
    check(await badge(failedOrder.id).textContent() === 'FAILED', 'the failed order has no FAILED badge');
    const forward = await c.locator('.forward .node').evaluateAll((nodes) => nodes.map((n) => n.dataset.step));
    check(JSON.stringify(forward) === JSON.stringify(['order', 'outbox', 'inventory', 'fraudCheck', 'shipping', 'billing']),
      `forward steps are not the shipped fan-out: ${JSON.stringify(forward)}`);
    const stateOf = (step) => c.locator(`.forward .node[data-step="${step}"]`).getAttribute('data-state');
    check(await stateOf('inventory') === 'reverted', `inventory is ${await stateOf('inventory')}`);
    check(await stateOf('fraudCheck') === 'success', `fraudCheck is ${await stateOf('fraudCheck')}`);
    check(await stateOf('shipping') === 'reverted', `shipping is ${await stateOf('shipping')}`);
    check(await stateOf('billing') === 'failed', `billing is ${await stateOf('billing')}`);
    const billingText = await c.locator('.forward .node[data-step="billing"]').textContent();
    check(billingText.includes('HTTP 400'), `billing node says ${billingText}`);
    const inventoryText = await c.locator('.forward .node[data-step="inventory"]').textContent();
    check(/RES-/.test(inventoryText) && /\d+ ms/.test(inventoryText), `inventory node lacks its id or latency: ${inventoryText}`);
    const reverts = await c.locator('.revert-row .node').evaluateAll((nodes) => nodes.map((n) => [n.dataset.step, n.dataset.state]));
    const steps = reverts.map(([s]) => s);
    const ship = steps.indexOf('shipping.revert');
    const inv = steps.indexOf('inventory.revert');
    check(ship >= 0 && inv >= 0 && ship < inv, `revert row is not shipping before inventory: ${JSON.stringify(reverts)}`);
    check(reverts[ship][1] === 'reverted' && reverts[inv][1] === 'reverted', `revert states: ${JSON.stringify(reverts)}`);
  });

  await step('clicking an order opens its audit timeline with request and response JSON', async () => {
    await card(failedOrder.id).locator('.order-id').click();
    const dialog = page.locator('#audit');
    await dialog.locator('details.attempt').first().waitFor();
    const rows = await dialog.locator('details.attempt').evaluateAll((ds) => ds.map((d) => `${d.dataset.destination}:${d.dataset.outcome}`));
    for (const want of ['inventory:success', 'billing:non_retryable', 'shipping.revert:success', 'inventory.revert:success']) {
      check(rows.includes(want), `audit lacks ${want}: ${rows.join(', ')}`);
    }
    const billing = dialog.locator('details.attempt[data-destination="billing"]');
    await billing.locator('summary').click();
    const text = await billing.textContent();
    check(text.includes('POST') && text.includes('HTTP 400') && text.includes('"amount"'), `billing attempt shows ${text}`);
    await page.locator('#audit-close').click();
    check(!(await dialog.evaluate((d) => d.open)), 'the dialog did not close');
  });

  await step('the DLQ lists the dead letter, the stats count the events', async () => {
    const row = page.locator('#dlq tr[data-dlq-id]').filter({ hasText: `#${failedOrder.id}` });
    await row.first().waitFor();
    const text = await row.first().textContent();
    check(text.includes('NON_RETRYABLE_ERROR') && text.includes('PROCESSED'), `DLQ row: ${text}`);
    check(await row.first().locator('button[data-action="redrive"]').isDisabled(), 'a PROCESSED dead letter offers a retry');
    await eventually('stats to count processed events', async () =>
      Number(await page.locator('#stats-outbox [data-key="processed"] .tile-value').textContent()) >= 1);
    check(await page.locator('#stats-orders [data-status="FAILED"]').count() === 1, 'orders stats lack FAILED');
    // Every configured destination shows its circuit; refusals (400) do not open one.
    for (const name of ['inventory', 'fraudCheck', 'shipping', 'billing', 'notifications']) {
      const chip = page.locator(`#stats-destinations [data-destination="${name}"]`);
      check(await chip.count() === 1, `no circuit shown for ${name}`);
      check(await chip.getAttribute('data-circuit') === 'closed', `${name}'s circuit is not closed`);
    }
  });

  let formOrder;
  await step('an order created through the form appears and is confirmed', async () => {
    await page.fill('#f-customerId', 'ui-form-customer');
    await page.fill('#f-totalAmount', '42.50');
    await page.selectOption('#f-shippingType', 'domestic');
    await page.fill('#f-items', 'SKU-1 x2, SKU-2');
    await page.click('#create-form button[type=submit]');
    const created = page.locator('article.order').filter({ has: page.locator('.customer', { hasText: 'ui-form-customer' }) });
    await created.waitFor({ timeout: 10000 });
    formOrder = Number(await created.getAttribute('data-order-id'));
    await eventually('the form order to be CONFIRMED', async () => (await badge(formOrder).textContent()) === 'CONFIRMED');
    const { json } = await api('GET', `/api/orders/${formOrder}`);
    const inventory = json.attempts.find((a) => a.destination === 'inventory');
    check(JSON.stringify(inventory.requestPayload.items) === JSON.stringify([{ sku: 'SKU-1', quantity: 2 }, { sku: 'SKU-2', quantity: 1 }]),
      `items sent: ${JSON.stringify(inventory.requestPayload.items)}`);
  });

  await step('a 422 from the form shows the field messages', async () => {
    seen.phase = '422';
    await page.fill('#f-totalAmount', '-5');
    await page.fill('#f-items', 'SKU-3 xten');
    await page.click('#create-form button[type=submit]');
    const amount = page.locator('[data-error-for="totalAmount"]');
    await eventually('the totalAmount message', async () => (await amount.textContent()).includes('greater than 0'));
    check((await page.locator('[data-error-for="items"]').textContent()).includes('items[0].quantity'), 'no items[0].quantity message');
    check(await page.getAttribute('#f-totalAmount', 'aria-invalid') === 'true', 'totalAmount is not marked invalid');
    seen.phase = 'after-422';
  });

  await step('ship on a CONFIRMED order moves it to SHIPPED', async () => {
    await card(formOrder).locator('button[data-action="ship"]').click();
    await eventually('the SHIPPED badge', async () => (await badge(formOrder).textContent()) === 'SHIPPED');
    const { json } = await api('GET', `/api/orders/${formOrder}`);
    check(json.order.status === 'SHIPPED', `API says ${json.order.status}`);
    await card(formOrder).locator('button[data-action="deliver"]').waitFor();
    await eventually('the SHIPPED notification', async () =>
      (await card(formOrder).locator('.notify-row .node').first().getAttribute('data-state')) === 'success');
  });

  await step('the simulator panel reads the knobs and PUTs a change', async () => {
    const billing = page.locator('[data-knob="billing.charge"]');
    check(await billing.locator('input[name="failureRate"]').inputValue() === '0', 'billing.charge failure rate is not shown as 0');
    check(await billing.locator('input[name="failNext"]').inputValue() === '0', 'billing.charge failNext is not shown as 0');
    const knob = page.locator('[data-knob="highValue.cancel"]');
    await knob.locator('input[name="failureRate"]').fill('25');
    await knob.locator('select[name="failureStatus"]').selectOption('500');
    await knob.locator('input[name="failNext"]').fill('3');
    await knob.locator('input[name="failNext"]').press('Tab');
    await eventually('GET /api/simulator/config to show the change', async () => {
      const k = (await api('GET', '/api/simulator/config')).json.services['highValue.cancel'];
      if (k.failureRate !== 0.25 || k.failureStatus !== 500 || k.failNext !== 3) throw new Error(JSON.stringify(k));
      return true;
    });
    check(await knob.locator('output').first().textContent() === '25%', 'the slider label does not say 25%');
  });

  await step('the consistency panel shows 0 violations', async () => {
    await page.locator('#consistency button[data-action="check"]').click();
    await eventually('a consistency result covering 3 orders', async () => {
      const c = page.locator('#consistency');
      return (await c.getAttribute('data-violations')) === '0' && Number(await c.getAttribute('data-checked')) >= 3;
    });
  });

  await step('polling stops while the tab is hidden and resumes when shown', async () => {
    let requests = 0;
    const count = (r) => { if (r.url().includes('/api/')) requests += 1; };
    page.on('request', count);
    await page.evaluate(() => {
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
      document.dispatchEvent(new Event('visibilitychange'));
    });
    await sleep(800); // a poll already running may finish
    requests = 0;
    await sleep(2500);
    check(requests === 0, `${requests} API requests while hidden`);
    await page.evaluate(() => {
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => false });
      document.dispatchEvent(new Event('visibilitychange'));
    });
    await eventually('polling to resume', async () => requests > 0, 5000);
    page.off('request', count);
  });

  await step('screenshots', async () => {
    const wide = join(tmpdir(), `outboxd-ui-${process.pid}.png`);
    await page.screenshot({ path: wide, fullPage: true });
    shots.push(wide);
    await card(failedOrder.id).locator('.order-id').click();
    await page.locator('#audit details.attempt').first().waitFor();
    const audit = join(tmpdir(), `outboxd-ui-audit-${process.pid}.png`);
    await page.screenshot({ path: audit });
    shots.push(audit);
    await page.locator('#audit-close').click();
    await page.setViewportSize({ width: 420, height: 900 });
    await sleep(300);
    const narrow = join(tmpdir(), `outboxd-ui-narrow-${process.pid}.png`);
    await page.screenshot({ path: narrow, fullPage: true });
    shots.push(narrow);
    await page.setViewportSize({ width: 1280, height: 900 });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `the page scrolls sideways by ${overflow}px at 1280px`);
  });

  await step('reset puts the knobs back to the configuration', async () => {
    await page.click('#sim-reset');
    await eventually('the knobs to be reset', async () => {
      const k = (await api('GET', '/api/simulator/config')).json.services['highValue.cancel'];
      if (k.failureRate !== 0.1 || k.failNext !== 0) throw new Error(JSON.stringify(k));
      return true;
    });
    const knob = page.locator('[data-knob="highValue.cancel"]');
    await eventually('the slider to show 10', async () => (await knob.locator('input[name="failureRate"]').inputValue()) === '10');
  });

  await step('a retried order\'s timeline is fetched whole once, then only its new attempt rows', async () => {
    const asked = []; // afterAttempt of each timeline request of the order (0: none)
    let retried;
    const watch = (r) => {
      const m = r.url().match(/\/api\/orders\/(\d+)(?:\?afterAttempt=(\d+))?$/);
      if (m && Number(m[1]) === retried) asked.push(Number(m[2] || 0));
    };
    await api('PUT', '/api/simulator/config', { services: { 'inventory.reserve': { failureRate: 1, failureStatus: 503 } } });
    retried = (await api('POST', '/api/orders', { customerId: 'ui-retried', totalAmount: 10, shippingType: 'domestic' })).json.id;
    const rows = async () => (await api('GET', `/api/orders/${retried}`)).json.attempts.map((a) => a.id);
    await eventually('three failed calls of the retried order', async () => (await rows()).length >= 3);
    await sleep(1500); // the card has its rows
    page.on('request', watch);
    await card(retried).locator('.order-id').click();
    const dialog = page.locator('#audit');
    const shown = () => dialog.locator('details.attempt').evaluateAll((ds) => ds.map((d) => d.dataset.key));
    await sleep(2500); // polls while the calls fail
    await api('PUT', '/api/simulator/config', { services: { 'inventory.reserve': { failureRate: 0 } } });
    await eventually('the retried order to be CONFIRMED', async () => (await badge(retried).textContent()) === 'CONFIRMED');
    const all = await rows();
    await eventually('the audit dialog to list every row once', async () =>
      JSON.stringify((await shown()).sort()) === JSON.stringify(all.map((id) => `attempt-${id}`).sort()));
    page.off('request', watch);
    await page.locator('#audit-close').click();
    const whole = asked.filter((a) => a === 0).length;
    check(whole <= 2, `the timeline was fetched whole ${whole} times (the dialog's first look, once or twice): ${JSON.stringify(asked)}`);
    check(asked.some((a) => a > 0), `no request asked for the new rows only: ${JSON.stringify(asked)}`);
    check(asked.every((a) => a === 0 || all.includes(a)), `asked after ids that are not rows: ${JSON.stringify(asked)}`);
    const forward = await card(retried).locator('.forward .node[data-step="inventory"]').getAttribute('data-state');
    check(forward === 'success', `the card's inventory step is ${forward}`);
    await api('POST', '/api/simulator/reset');
  });

  await step('no dialog, no page error, no console error but the expected 422', async () => {
    check(dialogs.length === 0, `dialogs fired: ${dialogs.join(', ')}`);
    check(pageErrors.length === 0, `page errors: ${pageErrors.join('\n')}`);
    const unexpected = consoleErrors.filter((e) => !(e.phase === '422' && e.text.includes('422')));
    check(unexpected.length === 0, `console errors: ${JSON.stringify(unexpected)}`);
  });
  console.log(`screenshots: ${shots.join(' ')}`);
});
