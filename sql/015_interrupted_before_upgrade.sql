-- Runs before 014 were not told apart: an unfinished event that has run (or a dead-lettered one
-- whose compensation is not over) counts as interrupted by "run 0", which comes before every
-- run, so its compensation settles its first unfinished step unless a definite answer settled it.
-- In its own transaction: 014's lock on the tables is gone by now.
UPDATE outbox_events SET interrupted_leases = '{0}'
 WHERE status = 'PROCESSING' OR (status = 'PENDING' AND attempts > 0);
UPDATE outbox_events SET interrupted_leases = '{0}'
 WHERE id IN (SELECT original_event_id FROM dead_letter_events WHERE status <> 'PROCESSED');
