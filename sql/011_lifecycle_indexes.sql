-- outboxd:no-transaction
-- Retention of removed orders walks them oldest removal first; only removed orders are in it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_removed ON orders (updated_at) WHERE deleted;
-- The dead-letter gauges and statistics count FAILED dead letters, by reason, from this index,
-- however many resolved ones the table has kept (PENDING and PROCESSING ones through the due and
-- lease indexes). It holds FAILED rows only, so the claim's walk can never take it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_events_failed
    ON dead_letter_events (reason) WHERE status = 'FAILED';
