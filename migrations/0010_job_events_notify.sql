-- 0010_job_events_notify: live progress (GET /v1/jobs/{id}/stream, GET
-- /v1/stream; docs/runs.md) without polling.  Every job_events row, whoever
-- writes it (kforge-api or kforge-scheduler, always through db/kf_db.c),
-- sends a notification on channel kf_job_events when its transaction
-- commits; the payload is "<event id> <job id>" (at most 57 bytes, far under
-- PostgreSQL's 8000).  kforge-api's one listening connection
-- (api/api_stream.c) reads the rows of a batch of notifications once and
-- fans them out to its streams.  A notification lost while that connection
-- is down costs nothing: the streams catch up from job_events by id.
CREATE FUNCTION kf_job_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kf_job_events', NEW.id::text || ' ' || NEW.job_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER job_events_notify AFTER INSERT ON job_events
    FOR EACH ROW EXECUTE FUNCTION kf_job_events_notify();

-- The all-jobs stream catches up by id across jobs (job_events' key is
-- (job_id, id), 0003).  A BRIN index serves "id > $1" for ids that grow
-- with the table, at a fraction of a B-tree's cost on every insert.
CREATE INDEX job_events_id_brin ON job_events USING brin (id);
