-- outboxd:no-transaction
-- Retention of resolved dead letters walks them oldest first; built without blocking writes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_events_resolved
    ON dead_letter_events (resolved_at) WHERE status = 'PROCESSED';
