-- Lease tokens for claims of outbox and dead-letter rows: every claim gets a new one, and every
-- later update of the row must present it (a worker that lost its lease cannot complete).
CREATE SEQUENCE lease_tokens;
