-- outboxd schema: business rows (orders), the outbox, the dead-letter queue and the result table.
-- Forward-only: never edit an applied migration, add a new numbered file instead.

CREATE TABLE orders (
    id              BIGSERIAL PRIMARY KEY,
    customer_id     VARCHAR(255)  NOT NULL,
    total_amount    NUMERIC(12,2) NOT NULL CHECK (total_amount > 0),
    currency        CHAR(3)       NOT NULL DEFAULT 'USD',
    shipping_type   VARCHAR(20)   NOT NULL CHECK (shipping_type IN ('domestic', 'international')),
    order_status    VARCHAR(20)   NOT NULL DEFAULT 'PENDING'
                    CHECK (order_status IN ('PENDING', 'CONFIRMED', 'SHIPPED', 'DELIVERED', 'FAILED',
                                            'CANCELLING', 'CANCELLED', 'ATTENTION')),
    status_reason   TEXT,
    request_key     VARCHAR(255)  UNIQUE,      -- the client's Idempotency-Key on create
    request_hash    BIGINT,                    -- fingerprint of the create request behind request_key
    created_at      TIMESTAMPTZ   NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ   NOT NULL DEFAULT now(),
    deleted         BOOLEAN       NOT NULL DEFAULT false
);
CREATE INDEX orders_listing ON orders (order_status, id) WHERE NOT deleted;

CREATE TABLE outbox_events (
    id                BIGSERIAL PRIMARY KEY,
    aggregate_type    VARCHAR(255) NOT NULL,
    aggregate_id      VARCHAR(255) NOT NULL,
    event_type        VARCHAR(255) NOT NULL,
    payloads          JSONB        NOT NULL,   -- destination -> {"payload": {...}, "pathParams": {...}}
    status            VARCHAR(20)  NOT NULL DEFAULT 'PENDING'
                      CHECK (status IN ('PENDING', 'PROCESSING', 'PROCESSED', 'DEAD')),
    attempts          INT          NOT NULL DEFAULT 0,
    next_retry_at     TIMESTAMPTZ,
    lease_owner       VARCHAR(255),
    lease_token       BIGINT,
    lease_expires_at  TIMESTAMPTZ,
    last_error        TEXT,
    idempotency_key   VARCHAR(512) NOT NULL UNIQUE,  -- unique for ever, not only while pending
    created_at        TIMESTAMPTZ  NOT NULL DEFAULT now(),
    status_changed_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    processed_at      TIMESTAMPTZ
);
-- Partial indexes keep claiming O(batch) however many PROCESSED rows the table holds.
CREATE INDEX outbox_events_due ON outbox_events (id) WHERE status = 'PENDING';
CREATE INDEX outbox_events_unfinished_by_aggregate ON outbox_events (aggregate_id, id)
    WHERE status IN ('PENDING', 'PROCESSING');
CREATE INDEX outbox_events_leases ON outbox_events (lease_expires_at) WHERE status = 'PROCESSING';
CREATE INDEX outbox_events_processed ON outbox_events (processed_at) WHERE status = 'PROCESSED';
CREATE INDEX outbox_events_by_aggregate ON outbox_events (aggregate_type, aggregate_id, id);

CREATE TABLE dead_letter_events (
    id                BIGSERIAL PRIMARY KEY,
    original_event_id BIGINT       NOT NULL UNIQUE REFERENCES outbox_events (id),
    aggregate_type    VARCHAR(255) NOT NULL,
    aggregate_id      VARCHAR(255) NOT NULL,
    event_type        VARCHAR(255) NOT NULL,
    payloads          JSONB        NOT NULL,
    reason            VARCHAR(32)  NOT NULL
                      CHECK (reason IN ('MAX_RETRIES_EXCEEDED', 'NON_RETRYABLE_ERROR', 'CANCELLATION_FAILED')),
    last_error        TEXT,
    status            VARCHAR(20)  NOT NULL DEFAULT 'PENDING'
                      CHECK (status IN ('PENDING', 'PROCESSING', 'PROCESSED', 'FAILED')),
    attempts          INT          NOT NULL DEFAULT 0,
    next_retry_at     TIMESTAMPTZ,
    lease_owner       VARCHAR(255),
    lease_token       BIGINT,
    lease_expires_at  TIMESTAMPTZ,
    revert_error      TEXT,
    failed_at         TIMESTAMPTZ  NOT NULL DEFAULT now(),
    status_changed_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    resolved_at       TIMESTAMPTZ
);
CREATE INDEX dead_letter_events_due ON dead_letter_events (id) WHERE status = 'PENDING';
CREATE INDEX dead_letter_events_unfinished_by_aggregate ON dead_letter_events (aggregate_id)
    WHERE status IN ('PENDING', 'PROCESSING');
CREATE INDEX dead_letter_events_leases ON dead_letter_events (lease_expires_at) WHERE status = 'PROCESSING';
CREATE INDEX dead_letter_events_by_aggregate ON dead_letter_events (aggregate_id, id);

-- The result table: append-only, one row per HTTP attempt (forward and revert).
CREATE TABLE aggregate_results (
    id               BIGSERIAL PRIMARY KEY,
    event_id         BIGINT       NOT NULL,  -- no FK: audit rows outlive retention of their event
    aggregate_id     VARCHAR(255) NOT NULL,
    event_type       VARCHAR(255) NOT NULL,
    destination      VARCHAR(255) NOT NULL,  -- a revert is '<destination>.revert'
    fanout_order     INT          NOT NULL,
    attempt          INT          NOT NULL,
    endpoint_url     TEXT         NOT NULL,
    http_method      VARCHAR(10)  NOT NULL,
    idempotency_key  VARCHAR(1024),
    request_payload  JSONB,
    response_status  INT,
    response_payload JSONB,
    response_text    TEXT,                   -- first 2 KiB of a body that is not JSON
    outcome          VARCHAR(16)  NOT NULL CHECK (outcome IN ('success', 'retryable', 'non_retryable', 'skipped')),
    error_message    TEXT,
    duration_ms      INT,
    published_at     TIMESTAMPTZ  NOT NULL DEFAULT now()
);
CREATE INDEX aggregate_results_by_event ON aggregate_results (event_id, destination, id);
CREATE INDEX aggregate_results_by_aggregate ON aggregate_results (aggregate_id, id);

-- Wake-ups: a row that is PENDING and due now notifies its channel when committed (insert, or a
-- reset to PENDING). A retry scheduled in the future does not: the processor times that itself.
CREATE FUNCTION outboxd_notify_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'PENDING'
       AND (NEW.next_retry_at IS NULL OR NEW.next_retry_at <= now())
       AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'PENDING') THEN
        PERFORM pg_notify(TG_ARGV[0], NEW.id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_events_notify AFTER INSERT OR UPDATE OF status ON outbox_events
    FOR EACH ROW EXECUTE FUNCTION outboxd_notify_due('outbox_events_channel');
CREATE TRIGGER dead_letter_events_notify AFTER INSERT OR UPDATE OF status ON dead_letter_events
    FOR EACH ROW EXECUTE FUNCTION outboxd_notify_due('dlq_events_channel');

-- ISO-8601 UTC text of a timestamp, as the API shows it.
CREATE FUNCTION outboxd_iso(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;
