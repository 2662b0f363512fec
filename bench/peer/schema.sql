-- The peer's business tables, in a schema of their own: the same orders and audit rows outboxd
-- keeps (sql/001_schema.sql), so both systems write the same data. graphile-worker creates its
-- own schema (graphile_worker) when it first starts.
CREATE SCHEMA peer;

CREATE TABLE peer.orders (
    id              BIGSERIAL PRIMARY KEY,
    customer_id     VARCHAR(255)  NOT NULL,
    total_amount    NUMERIC(12,2) NOT NULL CHECK (total_amount > 0),
    currency        CHAR(3)       NOT NULL DEFAULT 'USD',
    shipping_type   VARCHAR(20)   NOT NULL CHECK (shipping_type IN ('domestic', 'international')),
    order_status    VARCHAR(20)   NOT NULL DEFAULT 'PENDING',
    status_reason   TEXT,
    created_at      TIMESTAMPTZ   NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ   NOT NULL DEFAULT now(),
    deleted         BOOLEAN       NOT NULL DEFAULT false
);
CREATE INDEX orders_listing ON peer.orders (order_status, id) WHERE NOT deleted;

CREATE TABLE peer.aggregate_results (
    id               BIGSERIAL PRIMARY KEY,
    event_id         BIGINT       NOT NULL,  -- the graphile-worker job id
    aggregate_id     VARCHAR(255) NOT NULL,
    event_type       VARCHAR(255) NOT NULL,
    destination      VARCHAR(255) NOT NULL,
    fanout_order     INT          NOT NULL,
    attempt          INT          NOT NULL,
    endpoint_url     TEXT         NOT NULL,
    http_method      VARCHAR(10)  NOT NULL,
    idempotency_key  VARCHAR(1024),
    request_payload  JSONB,
    response_status  INT,
    response_payload JSONB,
    response_text    TEXT,
    outcome          VARCHAR(16)  NOT NULL,
    error_message    TEXT,
    duration_ms      INT,
    published_at     TIMESTAMPTZ  NOT NULL DEFAULT now()
);
CREATE INDEX aggregate_results_by_event ON peer.aggregate_results (event_id, destination, id);
CREATE INDEX aggregate_results_by_aggregate ON peer.aggregate_results (aggregate_id, id);
