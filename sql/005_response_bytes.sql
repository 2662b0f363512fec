-- Any answer is stored as received: bodies that neither jsonb nor text can hold (invalid UTF-8,
-- NUL bytes, binary) go to response_body as raw bytes, with the answer's content type and whether
-- the client cut the body at its size limit. Nullable columns and a constant default only touch
-- the catalog, so this is instant on a big table.
ALTER TABLE aggregate_results
    ADD COLUMN response_body         BYTEA,
    ADD COLUMN response_content_type TEXT,
    ADD COLUMN response_truncated    BOOLEAN NOT NULL DEFAULT false;

COMMENT ON COLUMN aggregate_results.response_payload IS 'the answer body when jsonb takes it';
COMMENT ON COLUMN aggregate_results.response_text IS
    'the answer body when it is well-formed UTF-8 without NUL but not jsonb';
COMMENT ON COLUMN aggregate_results.response_body IS 'the answer body as bytes, in any other case';
