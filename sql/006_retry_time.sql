-- Retries bounded by time: when a run first failed (or was first held back by a circuit breaker
-- or a limit). NULL while it never did. A column without a default: no table rewrite.
ALTER TABLE outbox_events ADD COLUMN failing_since TIMESTAMPTZ;
ALTER TABLE dead_letter_events ADD COLUMN failing_since TIMESTAMPTZ;
