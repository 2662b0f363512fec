-- Fewer cycles per event on the engine's hot paths.

-- Wake-up triggers run their function only for rows that can wake a worker: claims (PROCESSING),
-- completions (PROCESSED) and dead ends (DEAD, FAILED) no longer call into PL/pgSQL at all.
DROP TRIGGER outbox_events_notify ON outbox_events;
CREATE TRIGGER outbox_events_notify AFTER INSERT OR UPDATE OF status ON outbox_events
    FOR EACH ROW WHEN (NEW.status = 'PENDING')
    EXECUTE FUNCTION outboxd_notify_due('outbox_events_channel');
DROP TRIGGER dead_letter_events_notify ON dead_letter_events;
CREATE TRIGGER dead_letter_events_notify AFTER INSERT OR UPDATE OF status ON dead_letter_events
    FOR EACH ROW WHEN (NEW.status = 'PENDING')
    EXECUTE FUNCTION outboxd_notify_due('dlq_events_channel');

-- "When is the next retry due?" (asked by every worker that found nothing to claim) reads the
-- first entry of these instead of every pending row of a backlog.
CREATE INDEX outbox_events_retry_due ON outbox_events (next_retry_at)
    WHERE status = 'PENDING' AND next_retry_at IS NOT NULL;
CREATE INDEX dead_letter_events_retry_due ON dead_letter_events (next_retry_at)
    WHERE status = 'PENDING' AND next_retry_at IS NOT NULL;
