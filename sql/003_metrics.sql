-- Cheap gauges for /metrics: counting unfinished events must not scan the PROCESSED history.
CREATE INDEX outbox_events_unfinished ON outbox_events (status) WHERE status <> 'PROCESSED';
