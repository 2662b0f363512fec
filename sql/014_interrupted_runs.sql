-- Which run of an event made each call, and which runs ended without a word: a run whose lease
-- expired (its process died, or lost the database) may have been cut off in the middle of a call
-- that the partner applied. A compensation must settle such a step before it reverts the others,
-- and must not settle a step no run ever sent (a run held back by an open circuit sends nothing).
-- A run is known by its lease token: every claim takes a new one, larger than the ones before.
-- Rows of a compensation (its re-sends and reverts) belong to no run of the event: NULL.
ALTER TABLE aggregate_results ADD COLUMN lease_token BIGINT;
ALTER TABLE outbox_events ADD COLUMN interrupted_leases BIGINT[];
-- The step whose settling or revert a failed compensation could not get done ("<destination>" or
-- "<destination>.revert"), for an operator's resolve to settle: it may have left no row (held
-- back past its time budget, or its run cut off), and the newest failed row of the event may be
-- an old failure of its fan-out.
ALTER TABLE dead_letter_events ADD COLUMN failed_step TEXT;
