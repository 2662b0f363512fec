#!/usr/bin/env node
// Writes orders straight into the database, each with its outbox row (outboxd) or its
// graphile-worker job (peer) in the same transaction. PG* variables name the database.
//   node intake.js backlog N [CLIENTS]          peer backlog: N orders + add_job, CLIENTS connections
//   node intake.js wake outboxd|peer N RATE     N orders at RATE/s on one connection; prints one
//                                               JSON line per order: {"orderId", "commitMs"}, the
//                                               wall-clock time (ms, sub-ms precision) at which
//                                               COMMIT was acknowledged
//   node intake.js paced outboxd|peer N RATE CLIENTS
//                                               the same over CLIENTS connections: order i is due
//                                               at start + i / RATE and goes out on connection
//                                               i mod CLIENTS (one behind schedule commits at once)
// The outboxd rows are the ones POST /api/orders writes (persistence/order_repository.cpp); the
// wake-up measure inserts them here so that both systems' commit times are taken the same way.
'use strict';
const { Pool } = require('pg');

const orderSql = {
  outboxd: `INSERT INTO orders (customer_id, total_amount, currency, shipping_type, request_key, request_hash)
            VALUES ('C-1', 99.99, 'USD', 'domestic', NULL, NULL) RETURNING id`,
  peer: `INSERT INTO peer.orders (customer_id, total_amount, currency, shipping_type)
         VALUES ('C-1', 99.99, 'USD', 'domestic') RETURNING id`,
};
const eventSql = `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, idempotency_key)
                  VALUES ('order', $1, 'OrderCreated', $2::jsonb, $3)`;
const jobSql = `SELECT graphile_worker.add_job('process_order', $1::json)`;

function outboxPayloads(id) {
  const pathParams = { orderId: String(id), customerId: 'C-1' };
  return JSON.stringify({
    inventory: { payload: { orderId: id, items: [], shippingType: 'domestic', totalAmount: 99.99 }, pathParams },
    fraudCheck: { payload: { orderId: id, customerId: 'C-1', totalAmount: 99.99 }, pathParams },
    shipping: { payload: { orderId: id, customerId: 'C-1', shippingType: 'domestic', totalAmount: 99.99 }, pathParams },
    billing: { payload: { orderId: id, amount: 99.99, currency: 'USD' }, pathParams },
  });
}

async function createOrder(client, target) {
  await client.query('BEGIN');
  const { rows } = await client.query({ name: `order_${target}`, text: orderSql[target] });
  const id = Number(rows[0].id);
  if (target === 'outboxd') {
    await client.query({ name: 'event', text: eventSql,
                         values: [String(id), outboxPayloads(id), `order:${id}:OrderCreated`] });
  } else {
    await client.query({ name: 'job', text: jobSql, values: [JSON.stringify({
      orderId: id, customerId: 'C-1', totalAmount: 99.99, currency: 'USD', shippingType: 'domestic' })] });
  }
  await client.query('COMMIT');
  return id;
}

// Wall-clock milliseconds with sub-millisecond precision: the monotonic clock anchored on the
// instant Date.now() ticks over (the simulator stamps arrivals with the same system clock).
function makeClock() {
  const t0 = Date.now();
  let t1;
  while ((t1 = Date.now()) === t0) { /* spin to the next millisecond edge */ }
  const hr0 = process.hrtime.bigint();
  return () => t1 + Number(process.hrtime.bigint() - hr0) / 1e6;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function backlog(total, clients) {
  const pool = new Pool({ max: clients });
  let next = 0;
  const started = process.hrtime.bigint();
  await Promise.all(Array.from({ length: clients }, async () => {
    const client = await pool.connect();
    try {
      while (next < total) {
        next++;
        await createOrder(client, 'peer');
      }
    } finally {
      client.release();
    }
  }));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await pool.end();
  console.log(JSON.stringify({ orders: total, seconds, orders_per_s: total / seconds }));
}

async function wake(target, total, rate, clients = 1) {
  const pool = new Pool({ max: clients, application_name: 'bench-intake' });
  const conns = await Promise.all(Array.from({ length: clients }, () => pool.connect()));
  const now = makeClock();
  // one unmeasured order per connection first: prepared statements, warm caches
  await Promise.all(conns.map((client) => createOrder(client, target)));
  const start = now() + 200;
  const lines = [];
  await Promise.all(conns.map(async (client, k) => {
    for (let i = k; i < total; i += clients) {
      await sleep(start + (i * 1000) / rate - now());
      const orderId = await createOrder(client, target);
      lines.push(JSON.stringify({ orderId, commitMs: now() }));
    }
  }));
  conns.forEach((client) => client.release());
  await pool.end();
  process.stdout.write(lines.join('\n') + '\n');
}

const [mode, ...args] = process.argv.slice(2);
const main = mode === 'backlog' ? () => backlog(Number(args[0]), Number(args[1] || 8))
  : mode === 'wake' && ['outboxd', 'peer'].includes(args[0])
    ? () => wake(args[0], Number(args[1]), Number(args[2]))
    : mode === 'paced' && ['outboxd', 'peer'].includes(args[0])
      ? () => wake(args[0], Number(args[1]), Number(args[2]), Number(args[3] || 1))
      : null;
if (!main) {
  console.error('usage: intake.js backlog N [CLIENTS] | intake.js wake|paced outboxd|peer N RATE [CLIENTS]');
  process.exit(2);
}
main().catch((e) => {
  console.error(`intake.js: ${e.stack || e}`);
  process.exit(1);
});
