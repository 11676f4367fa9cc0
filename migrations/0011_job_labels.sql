-- 0011_job_labels: a page of GET /v1/jobs?label.KEY=VALUE (docs/runs.md) in
-- the list's order, whatever else it filters on.
--
-- Until now a label was matched through the GIN index on jobs.labels (0008).
-- GIN finds a label's jobs but not in created_at order, so the planner had
-- to choose between fetching and sorting every job of the label, or walking
-- another index in order and testing the label row by row, by its guess of
-- how the filters overlap.  On the runs benchmark (bench/run.sh runs,
-- 100,000 jobs) it guessed wrong both ways: op=matmul with a team label
-- that most matmul jobs carry fetched and sorted 5,000 jobs (25 ms), and a
-- rare run label with created_before walked 50,000 jobs in time order
-- (up to 90 ms).
--
-- job_labels holds one row per (job, label) with the job's owner and
-- created_at, written by triggers on jobs (so no writer can forget it), and
-- indexed in the list's keyset order under (key, value),
-- for admins, and under (owner, key, value), for users, who only list their
-- own jobs.  The API reads a label's jobs newest first from here, a bounded
-- number at a time, and checks the other filters on each (api/api_jobs.c).
-- Rows go with their job (ON DELETE CASCADE, which the primary key serves).
CREATE TABLE job_labels (
    job_id         uuid        NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    key            text        NOT NULL,
    value          text        NOT NULL,
    owner_token_id bigint      NOT NULL,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (job_id, key)
);
CREATE INDEX job_labels_list_idx       ON job_labels (key, value, created_at DESC, job_id DESC);
CREATE INDEX job_labels_owner_list_idx ON job_labels (owner_token_id, key, value, created_at DESC, job_id DESC);

-- One statement-level trigger: the API's batch writer inserts many jobs in
-- one statement, and their labels go in with one more.
CREATE FUNCTION kf_job_labels_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_labels (job_id, key, value, owner_token_id, created_at)
    SELECT n.id, l.key, l.value, n.owner_token_id, n.created_at
      FROM new_jobs n, jsonb_each_text(n.labels) l
     WHERE jsonb_typeof(n.labels) = 'object';
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_labels_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION kf_job_labels_insert();

-- kforge never changes a job's labels, owner or created_at once inserted;
-- an operator's UPDATE of them (a fix by hand, a restore) is followed too,
-- so the list can never disagree with the jobs table.
CREATE FUNCTION kf_job_labels_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_labels WHERE job_id = OLD.id;
    INSERT INTO job_labels (job_id, key, value, owner_token_id, created_at)
    SELECT NEW.id, l.key, l.value, NEW.owner_token_id, NEW.created_at
      FROM jsonb_each_text(CASE WHEN jsonb_typeof(NEW.labels) = 'object' THEN NEW.labels ELSE '{}' END) l;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_labels_update AFTER UPDATE OF id, labels, owner_token_id, created_at ON jobs
    FOR EACH ROW EXECUTE FUNCTION kf_job_labels_update();

INSERT INTO job_labels (job_id, key, value, owner_token_id, created_at)
SELECT j.id, l.key, l.value, j.owner_token_id, j.created_at
  FROM jobs j, jsonb_each_text(j.labels) l
 WHERE jsonb_typeof(j.labels) = 'object';

-- The GIN index stays for other label matches (the stream filter, further
-- labels of a list, analysts' queries on the views), without its pending
-- list: with fastupdate, new entries wait unsorted in a list of up to
-- gin_pending_list_limit (4 MB) until a vacuum merges them, and every
-- search reads the whole list (493 pages for one label on the benchmark,
-- against 3 once merged).  A job's few labels go straight into the tree.
ALTER INDEX jobs_labels_idx SET (fastupdate = off);
SELECT gin_clean_pending_list('jobs_labels_idx');

-- Analysts may read it as they read jobs.labels (0008's role).
GRANT SELECT ON job_labels TO kforge_reader;
