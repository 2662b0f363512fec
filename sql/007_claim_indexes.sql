-- The claims walk the due indexes (outbox_events_due, dead_letter_events_due) in id order and
-- probe each event's aggregate. Small partial indexes over the same unfinished rows but in
-- another order gave the planner a cheaper-looking alternative whenever statistics were taken
-- while nothing was pending: in a burst it scanned and sorted every pending event at each step of
-- the walk, and every unfinished event again for each probe, so claims ran for seconds and their
-- row locks held up the completions. Without them the only small index over pending rows is the
-- due index, and the probes go through the per-aggregate indexes of the whole tables, whose
-- statistics cannot make them look empty.
DROP INDEX outbox_events_unfinished;
DROP INDEX outbox_events_unfinished_by_aggregate;
DROP INDEX dead_letter_events_unfinished_by_aggregate;

-- The /metrics gauges count PENDING events through outbox_events_due, PROCESSING ones through
-- outbox_events_leases, and DEAD ones through this.
CREATE INDEX outbox_events_dead ON outbox_events (id) WHERE status = 'DEAD';
