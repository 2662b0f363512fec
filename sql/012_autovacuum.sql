-- Vacuum the churning tables after a small share of their rows changed, not PostgreSQL's default
-- 20 %: every state change of an event or dead letter leaves a dead row version (status is in
-- the partial indexes, so no update is HOT), and on a table of millions 20 % is a long wait
-- during which the claim's index walk steps over the dead entries. The audit only grows and is
-- pruned by retention, so its inserts trigger a vacuum too (visibility map for index-only scans).
-- Changing these settings takes a lock that does not block reads or writes.
ALTER TABLE outbox_events SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE dead_letter_events SET (autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_threshold = 200);
ALTER TABLE orders SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE aggregate_results SET (autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_insert_scale_factor = 0.05);
