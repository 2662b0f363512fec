-- pgbench script of the peer's intake: the order, and its job queued with graphile-worker's
-- add_job in the same transaction (what bench/peer/intake.js does for the backlog).
BEGIN;
INSERT INTO peer.orders (customer_id, total_amount, currency, shipping_type)
  VALUES ('C-1', 99.99, 'USD', 'domestic') RETURNING id \gset
SELECT graphile_worker.add_job('process_order',
  ('{"orderId": ' || :id || ',"customerId": "C-1","totalAmount": 99.99,"currency": "USD","shippingType": "domestic"}')::json);
COMMIT;
