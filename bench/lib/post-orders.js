#!/usr/bin/env node
// Creates exactly N orders through outboxd's public API with C keep-alive connections (the drain
// backlog is made by outboxd itself, with outbox.enabled=false). Node built-ins only.
//   node post-orders.js URL N [C]      e.g. node post-orders.js http://127.0.0.1:9000 20000 8
'use strict';
const http = require('http');

const [url, total, clients = '8'] = process.argv.slice(2);
if (!url || !total) {
  console.error('usage: post-orders.js URL N [CLIENTS]');
  process.exit(2);
}
const target = new URL('/api/orders', url);
const agent = new http.Agent({ keepAlive: true, maxSockets: Number(clients) });
const body = JSON.stringify({ customerId: 'C-1', totalAmount: 99.99, shippingType: 'domestic' });

function post() {
  return new Promise((resolve, reject) => {
    const req = http.request(target, {
      method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 201 ? resolve()
        : reject(new Error(`POST ${target} answered ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function client(counter) {
  while (counter.next < counter.total) {
    counter.next++;
    await post();
  }
}

(async () => {
  const counter = { next: 0, total: Number(total) };
  const started = process.hrtime.bigint();
  await Promise.all(Array.from({ length: Number(clients) }, () => client(counter)));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  agent.destroy();
  console.log(JSON.stringify({ orders: counter.total, seconds, orders_per_s: counter.total / seconds }));
})().catch((e) => {
  console.error(`post-orders: ${e.message}`);
  process.exit(1);
});
