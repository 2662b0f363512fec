-- A dead letter written FAILED at once (a cancellation that could not be done, a compensation
-- with nothing it could do) was given a resolved_at although it waits for an operator. Only a
-- PROCESSED dead letter is resolved: the others lose the stamp.
UPDATE dead_letter_events SET resolved_at = NULL
 WHERE status <> 'PROCESSED' AND resolved_at IS NOT NULL;
