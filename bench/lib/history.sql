-- The flat-cost history: :history orders that went through OrderCreated successfully, as outboxd
-- leaves them (order CONFIRMED, event PROCESSED, four audit rows with realistic payloads).
-- Run on a freshly migrated database, so ids are 1..:history. Timestamps fall in the last hour,
-- inside the default retention (7d), so the janitor does not delete them during the run.
\set ON_ERROR_STOP on
BEGIN;
INSERT INTO orders (customer_id, total_amount, currency, shipping_type, order_status, created_at, updated_at)
SELECT 'C-' || (g % 1000), 99.99, 'USD', 'domestic', 'CONFIRMED',
       now() - interval '1 hour' + g * interval '1 microsecond',
       now() - interval '1 hour' + g * interval '1 microsecond' + interval '20 ms'
FROM generate_series(1, :history) g;

INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, status, attempts,
                           idempotency_key, created_at, status_changed_at, processed_at)
SELECT 'order', g::text, 'OrderCreated',
       jsonb_build_object(
         'inventory', jsonb_build_object('payload', jsonb_build_object('items', '[]'::jsonb, 'orderId', g,
             'totalAmount', 99.99, 'shippingType', 'domestic'),
           'pathParams', jsonb_build_object('orderId', g::text, 'customerId', 'C-' || (g % 1000))),
         'fraudCheck', jsonb_build_object('payload', jsonb_build_object('orderId', g,
             'customerId', 'C-' || (g % 1000), 'totalAmount', 99.99),
           'pathParams', jsonb_build_object('orderId', g::text, 'customerId', 'C-' || (g % 1000))),
         'shipping', jsonb_build_object('payload', jsonb_build_object('orderId', g,
             'customerId', 'C-' || (g % 1000), 'totalAmount', 99.99, 'shippingType', 'domestic'),
           'pathParams', jsonb_build_object('orderId', g::text, 'customerId', 'C-' || (g % 1000))),
         'billing', jsonb_build_object('payload', jsonb_build_object('amount', 99.99, 'orderId', g,
             'currency', 'USD'),
           'pathParams', jsonb_build_object('orderId', g::text, 'customerId', 'C-' || (g % 1000)))),
       'PROCESSED', 1, 'order:' || g || ':OrderCreated',
       now() - interval '1 hour' + g * interval '1 microsecond',
       now() - interval '1 hour' + g * interval '1 microsecond' + interval '20 ms',
       now() - interval '1 hour' + g * interval '1 microsecond' + interval '20 ms'
FROM generate_series(1, :history) g;

INSERT INTO aggregate_results (event_id, aggregate_id, event_type, destination, fanout_order, attempt,
                               endpoint_url, http_method, idempotency_key, request_payload,
                               response_status, response_payload, outcome, duration_ms, published_at)
SELECT g, g::text, 'OrderCreated', d.destination, d.fanout_order, 1,
       'http://127.0.0.1:9100' || d.path, 'POST', g || ':' || d.destination,
       CASE d.destination
         WHEN 'inventory' THEN jsonb_build_object('items', '[]'::jsonb, 'orderId', g, 'totalAmount', 99.99,
                                                  'shippingType', 'domestic')
         WHEN 'fraudCheck' THEN jsonb_build_object('orderId', g, 'customerId', 'C-' || (g % 1000), 'totalAmount', 99.99)
         WHEN 'shipping' THEN jsonb_build_object('orderId', g, 'customerId', 'C-' || (g % 1000), 'totalAmount', 99.99,
                                                 'shippingType', 'domestic')
         ELSE jsonb_build_object('amount', 99.99, 'orderId', g, 'currency', 'USD')
       END,
       200,
       CASE d.destination
         WHEN 'inventory' THEN jsonb_build_object('items', '[]'::jsonb, 'status', 'reserved', 'orderId', g,
           'expiresAt', 1796093156671 + g, 'warehouse', jsonb_build_object('id', 'WH-NYC-01',
             'name', 'NYC Distribution Center', 'location', jsonb_build_object('city', 'New York',
             'state', 'NY', 'country', 'US')), 'reservedAt', 1796092256671 + g,
           'warehouseId', 'WH-NYC-01', 'shippingType', 'domestic', 'reservationId', 'RES-' || g || '-1796092256671-' || g)
         WHEN 'fraudCheck' THEN jsonb_build_object('checks', jsonb_build_object('cvvCheck', 'passed',
             'velocityCheck', 'passed', 'addressVerification', 'passed'), 'status', 'success',
           'checkId', 'FRAUD-' || g || '-1796092256674-' || g, 'riskLevel', 'low', 'riskScore', 25,
           'timestamp', 1796092256674 + g)
         WHEN 'shipping' THEN jsonb_build_object('cost', jsonb_build_object('amount', 12.50, 'currency', 'USD'),
           'status', 'confirmed', 'carrier', jsonb_build_object('code', 'YAMATO', 'name', 'Yamato Transport',
             'service', 'Express'), 'orderId', g, 'createdAt', 1796092256675 + g, 'customerId', 'C-' || (g % 1000),
           'shipmentId', 'SHIP-DOM-' || g || '-1796092256675-' || g, 'trackingNumber', '9400' || (88966425 + g),
           'shippingAddress', '{}'::jsonb, 'estimatedDelivery', 1796265056675 + g)
         ELSE jsonb_build_object('status', 'success', 'message', 'Payment processed successfully',
           'timestamp', 1796092256677 + g, 'aggregateId', g::text, 'transaction', jsonb_build_object(
             'id', 'TXN-' || g || '-1796092256677-' || g, 'amount', 99.99, 'status', 'completed',
             'currency', 'USD', 'processedAt', 1796092256677 + g))
       END,
       'success', 1,
       now() - interval '1 hour' + g * interval '1 microsecond' + d.fanout_order * interval '2 ms'
FROM generate_series(1, :history) g
CROSS JOIN LATERAL (VALUES ('inventory', 0, '/api/inventory/reserve'), ('fraudCheck', 1, '/api/fraud/check'),
                   ('shipping', 2, '/api/domestic-shipping'), ('billing', 3, '/api/billing'))
           AS d(destination, fanout_order, path);  -- lateral: rows come out in event order
COMMIT;
VACUUM (ANALYZE) orders, outbox_events, aggregate_results;
CHECKPOINT;
