#!/usr/bin/env node
// The peer: graphile-worker running the same OrderCreated work outboxd does. Each job makes the
// same 4 sequential keep-alive HTTP calls to the same simulator endpoints, with the same bodies
// and headers, inserts one audit row per call (peer.aggregate_results, committed as it happens,
// like outboxd's aggregate_results), then marks the order CONFIRMED.
//   PG* variables name the database; SIM_URL the simulator; CONCURRENCY the concurrent jobs;
//   POOL_MAX the database connections (default 2 x CONCURRENCY + 2). The connections show as
//   application_name "graphile-worker" in pg_stat_activity.
//   node worker.js --migrate    only install graphile-worker's schema, then exit
'use strict';
const http = require('http');
const { Pool } = require('pg');
const { run, runMigrations } = require('graphile-worker');

if (process.argv[2] === '--migrate') {
  const pgPool = new Pool({ max: 2 });
  runMigrations({ pgPool }).then(() => pgPool.end()).catch((e) => {
    console.error(`worker.js --migrate: ${e.stack || e}`);
    process.exit(1);
  });
  return;
}

const simUrl = process.env.SIM_URL;
const concurrency = Number(process.env.CONCURRENCY || 4);
const poolMax = Number(process.env.POOL_MAX || 2 * concurrency + 2);
if (!simUrl) {
  console.error('worker.js: SIM_URL is not set');
  process.exit(2);
}

// One keep-alive connection per concurrent job (at most), Nagle off as outboxd does.
const agent = new http.Agent({ keepAlive: true, noDelay: true });

function call(path, body, headers) {
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(simUrl + path, {
      method: 'POST', agent, timeout: 5000,
      headers: { ...headers, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'] || '',
                                    text: Buffer.concat(chunks).toString() }));
    });
    req.on('timeout', () => req.destroy(new Error(`${path}: read timeout`)));
    req.on('error', reject);
    req.end(text);
  });
}

const recordSql = `INSERT INTO peer.aggregate_results (event_id, aggregate_id, event_type, destination,
  fanout_order, attempt, endpoint_url, http_method, idempotency_key, request_payload, response_status,
  response_payload, response_text, outcome, error_message, duration_ms)
  VALUES ($1, $2, 'OrderCreated', $3, $4, $5, $6, 'POST', $7, $8::jsonb, $9, $10::jsonb, $11, $12, $13, $14)`;

async function step(helpers, order, fanoutOrder, destination, path, body) {
  const jobId = helpers.job.id;
  const key = `${jobId}:${destination}`;
  const started = process.hrtime.bigint();
  let res;
  let error = null;
  try {
    res = await call(path, body, {
      'Idempotency-Key': key, 'X-Event-Id': String(jobId), 'X-Event-Type': 'OrderCreated',
      'X-Aggregate-Id': String(order.orderId), 'X-Destination': destination,
    });
  } catch (e) {
    error = e.message;
  }
  const duration = Math.round(Number(process.hrtime.bigint() - started) / 1e6);
  const ok = res && res.status >= 200 && res.status < 300;
  const retryable = !res || res.status >= 500 || res.status === 429;
  const json = res && res.type.includes('json');
  await helpers.query({
    name: 'peer_record_attempt', text: recordSql,
    values: [jobId, String(order.orderId), destination, fanoutOrder, helpers.job.attempts,
             simUrl + path, key, JSON.stringify(body), res ? res.status : null,
             json ? res.text : null, res && !json ? res.text.slice(0, 2048) : null,
             ok ? 'success' : retryable ? 'retryable' : 'non_retryable', error, duration],
  });
  if (!ok) throw new Error(`${destination}: ${error || `HTTP ${res.status}`}`); // graphile-worker retries the job
  return JSON.parse(res.text);
}

async function processOrder(order, helpers) {
  const { orderId, customerId, totalAmount, currency, shippingType } = order;
  await step(helpers, order, 0, 'inventory', '/api/inventory/reserve',
             { orderId, items: [], shippingType, totalAmount });
  const fraud = await step(helpers, order, 1, 'fraudCheck', '/api/fraud/check',
                           { orderId, customerId, totalAmount });
  await step(helpers, order, 2, 'shipping',
             shippingType === 'domestic' ? '/api/domestic-shipping' : '/api/international-shipping',
             { orderId, customerId, shippingType, totalAmount });
  await step(helpers, order, 3, 'billing',
             fraud.riskScore < 50 ? '/api/billing' : '/api/high-value-processing',
             { orderId, amount: totalAmount, currency });
  await helpers.query({
    name: 'peer_confirm',
    text: "UPDATE peer.orders SET order_status = 'CONFIRMED', updated_at = now() WHERE id = $1",
    values: [orderId],
  });
}

(async () => {
  // graphile-worker's advice: a pool of concurrency + 2 for the worker; the tasks' queries share it
  // (the default here); the slow-partner measure gives it the same budget as outboxd instead.
  const pgPool = new Pool({ max: poolMax, application_name: 'graphile-worker' });
  pgPool.on('error', (e) => console.error(`worker.js: idle database connection failed: ${e.message}`));
  const runner = await run({
    pgPool,
    concurrency,
    pollInterval: 2000, // graphile-worker's default, and outboxd's outbox.pollInterval
    taskList: { process_order: processOrder },
  });
  await runner.promise;
  await pgPool.end();
})().catch((e) => {
  console.error(`worker.js: ${e.stack || e}`);
  process.exit(1);
});
