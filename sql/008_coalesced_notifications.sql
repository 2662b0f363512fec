-- Intake without the notification lock in its commits. A session that set
-- outboxd.notify_inserts = 'coalesced' (the API's connections) announces the events it inserts
-- itself, one NOTIFY for many commits, so the trigger leaves those inserts alone. Every other
-- writer, and every reset of an event to PENDING, notifies per row as before.
CREATE OR REPLACE FUNCTION outboxd_notify_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND TG_TABLE_NAME = 'outbox_events'
       AND current_setting('outboxd.notify_inserts', true) = 'coalesced' THEN
        RETURN NULL;
    END IF;
    IF NEW.status = 'PENDING'
       AND (NEW.next_retry_at IS NULL OR NEW.next_retry_at <= now())
       AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'PENDING') THEN
        PERFORM pg_notify(TG_ARGV[0], NEW.id::text);
    END IF;
    RETURN NULL;
END $$;
