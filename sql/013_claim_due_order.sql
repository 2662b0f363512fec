-- outboxd:no-transaction
-- The claims walk these: the PENDING rows in the order they fall due (those never run, by id,
-- before every retry; then retries and held-back runs by the time they are due), so a walk ends
-- at the first row that is not due yet. Through the due indexes (by id alone) a claim stepped over
-- every event waiting out a retry or an open circuit: during a partner's outage each claim read
-- the whole backlog (20 000 waiting events: 213 ms and 120 000 buffers per claim). With
-- next_retry_at included, a step is an index-only scan, as it was on the due index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_due_order
    ON outbox_events ((coalesce(next_retry_at, '-infinity'::timestamptz)), id)
    INCLUDE (next_retry_at) WHERE status = 'PENDING';
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_events_due_order
    ON dead_letter_events ((coalesce(next_retry_at, '-infinity'::timestamptz)), id)
    INCLUDE (next_retry_at) WHERE status = 'PENDING';
