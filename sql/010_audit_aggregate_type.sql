-- outboxd:no-transaction
-- The audit names the aggregate type beside the id, so that lookups by aggregate cannot mix two
-- types that share ids. Rows written before carry 'order', the only type those versions took
-- orders for; the default stays so that a replica of the previous version, running beside this
-- one during a rolling upgrade, can still write its rows.
ALTER TABLE aggregate_results
    ADD COLUMN IF NOT EXISTS aggregate_type VARCHAR(255) NOT NULL DEFAULT 'order';
-- Lookups by (type, id) in id order, and the previous version's lookups by id alone, both use it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS aggregate_results_by_aggregate_type
    ON aggregate_results (aggregate_id, aggregate_type, id);
DROP INDEX CONCURRENTLY IF EXISTS aggregate_results_by_aggregate;
