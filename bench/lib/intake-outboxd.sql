-- pgbench script of the intake baseline: the two-row transaction of POST /api/orders (the order,
-- then its OrderCreated outbox row with the same payloads text and key), so it also fires the
-- outbox NOTIFY trigger. Mirrors persistence/order_repository.cpp and domain/order.cpp.
-- Every ':' inside the JSON text is followed by a space: pgbench reads ':name' as a variable.
BEGIN;
INSERT INTO orders (customer_id, total_amount, currency, shipping_type, request_key, request_hash)
  VALUES ('C-1', 99.99, 'USD', 'domestic', NULL, NULL) RETURNING id \gset
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, idempotency_key)
  VALUES ('order', :id, 'OrderCreated',
    ('{"inventory": {"payload": {"orderId": ' || :id || ',"items": [],"shippingType": "domestic","totalAmount": 99.99},"pathParams": {"orderId": "' || :id || '","customerId": "C-1"}},'
     '"fraudCheck": {"payload": {"orderId": ' || :id || ',"customerId": "C-1","totalAmount": 99.99},"pathParams": {"orderId": "' || :id || '","customerId": "C-1"}},'
     '"shipping": {"payload": {"orderId": ' || :id || ',"customerId": "C-1","shippingType": "domestic","totalAmount": 99.99},"pathParams": {"orderId": "' || :id || '","customerId": "C-1"}},'
     '"billing": {"payload": {"orderId": ' || :id || ',"amount": 99.99,"currency": "USD"},"pathParams": {"orderId": "' || :id || '","customerId": "C-1"}}}')::jsonb,
    concat_ws(chr(58), 'order', :id::text, 'OrderCreated'));  -- 'order:<id>:OrderCreated'; a literal ':O' would read as a pgbench variable
COMMIT;
