// The web UI against an outboxd that requires tokens:
//   node test/browser/token.test.mjs http://127.0.0.1:9000 <read token>
// test/e2e/ui_browser_test.cpp starts outboxd with a read and an admin token and creates one
// order, then runs this. Without a token the page says it needs one; with the read token typed
// into the "Access token" field it shows the order; an admin action is refused with 403 and
// said so; the token lives in this tab's session storage only.
import { baseUrl, check, eventually, run } from './harness.mjs';

const base = baseUrl('token.test.mjs');
const readToken = process.argv[3];
check(readToken, 'usage: node token.test.mjs <baseUrl> <read token>');

await run('ui-token', async ({ step, open }) => {
  const page = await open();
  await step('without a token the page says it needs one', async () => {
    await page.goto(base);
    await eventually('the connection status asks for a token', async () =>
      (await page.locator('#connection').textContent()).includes('needs an access token'));
    check(await page.locator('article.order').count() === 0, 'orders are shown without a token');
  });

  await step('with the read token typed in, the orders appear', async () => {
    await page.fill('#admin-token', readToken);
    await eventually('an order card', async () => (await page.locator('article.order').count()) > 0);
    await eventually('the connection is live', async () =>
      (await page.locator('#connection').textContent()).startsWith('live'));
  });

  await step('an admin action with the read token is refused and said so', async () => {
    await page.click('#sim-reset');
    await eventually('a 403 message', async () =>
      (await page.locator('#messages').textContent()).includes('Not allowed (403)'));
  });

  await step('the token is kept for this tab only', async () => {
    const stored = await page.evaluate(() => ({
      session: sessionStorage.getItem('outboxd.adminToken'), local: JSON.stringify(localStorage),
    }));
    check(stored.session === readToken, `sessionStorage holds ${stored.session}`);
    check(!stored.local.includes(readToken), 'the token is in localStorage');
    const other = await page.context().newPage();
    await other.goto(base);
    check(await other.locator('#admin-token').inputValue() === '', 'a new tab knows the token');
    await other.close();
  });
});
