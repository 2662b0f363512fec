// What the browser tests share: the base URL argument, chromium through playwright-core, step
// reporting, polling checks and a fetch helper for the API.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CHROMIUM = '/usr/bin/chromium';
// Without the background-networking flags chromium keeps dialling out, which this machine's
// closed network refuses; a fresh profile keeps runs independent.
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function check(condition, message) {
  if (!condition) throw new Error(message);
}

// The outboxd base URL from the command line; exits with a usage line when there is none.
export function baseUrl(script) {
  const base = (process.argv[2] || '').replace(/\/$/, '');
  if (!/^https?:\/\//.test(base)) {
    console.error(`usage: node ${script} <baseUrl>`);
    process.exit(2);
  }
  return base;
}

// Polls `fn` until it returns a truthy value; throws with the last value seen at the deadline.
export async function eventually(what, fn, timeout = 20000) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}; last: ${JSON.stringify(last)}`);
    await sleep(150);
  }
}

// A JSON API client for `base`: {status, headers, text, json} (json null when the body is not JSON).
export function apiClient(base) {
  return async function api(method, path, body) {
    const res = await fetch(base + path, {
      method,
      // Every state-changing request says it is JSON, also without a body (outboxd refuses a
      // POST that another site's form could send).
      headers: method === 'GET' ? {} : { 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    return { status: res.status, headers: res.headers, text, json };
  };
}

// Runs the named steps of one test script against a fresh chromium profile: `body` gets
// {step, open}; open() launches the browser and returns a page that records console errors,
// page errors and dialogs. On a failure the page is screenshot to the temporary folder and the exit code is 1.
export async function run(name, body) {
  const profile = mkdtempSync(join(tmpdir(), 'outboxd-ui-chromium-'));
  const seen = { consoleErrors: [], pageErrors: [], dialogs: [], phase: 'load' };
  let context;
  let page;
  let stepName = '';
  const step = async (label, fn) => {
    stepName = label;
    const started = Date.now();
    await fn();
    console.log(`ok   ${label} (${Date.now() - started} ms)`);
  };
  const open = async () => {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, viewport: { width: 1280, height: 900 },
    });
    page = context.pages()[0] || await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') seen.consoleErrors.push({ phase: seen.phase, text: m.text() }); });
    page.on('pageerror', (e) => seen.pageErrors.push(String(e)));
    page.on('dialog', (d) => { seen.dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    return page;
  };
  try {
    await body({ step, open, seen });
  } catch (e) {
    console.log(`FAIL ${stepName}: ${e.stack || e}`);
    if (page) {
      const path = join(tmpdir(), `outboxd-${name}-failure-${process.pid}.png`);
      await page.screenshot({ path, fullPage: true }).then(() => console.log(`failure screenshot: ${path}`), () => {});
    }
    if (seen.consoleErrors.length) console.log(`console errors: ${JSON.stringify(seen.consoleErrors)}`);
    process.exitCode = 1;
  } finally {
    if (context) await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  }
}
