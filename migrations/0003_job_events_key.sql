-- 0003_job_events_key: events are only ever read per job, in id order
-- (GET /v1/jobs/{id}/events with after=), so the primary key becomes
-- (job_id, id) and serves that read; the separate (job_id, id) index and the
-- id-only key index, which no query used, go.  One index entry less per
-- event row written.  id still comes from its sequence, so it stays unique.
ALTER TABLE job_events DROP CONSTRAINT job_events_pkey;
ALTER TABLE job_events ADD PRIMARY KEY (job_id, id);
DROP INDEX job_events_job_idx;
