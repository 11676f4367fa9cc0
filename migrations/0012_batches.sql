-- 0012_batches: batches of jobs (POST /v1/batches, docs/batches.md): a job
-- template times a matrix, or every op of kforge's kernel library at its
-- declared shapes, written with all its jobs in one transaction.
--
-- A batch row holds what was asked (the template and the matrix, or the
-- library form), its size and a hash of its matrix: two batches over the
-- same matrix entries (the same ops, shapes, dtypes and targets) have the
-- same matrix_hash whatever the template's other fields, which is how a
-- report finds the previous batch to compare with.  Its progress is not
-- stored: it is counted from its jobs (jobs_batch_created_idx, 0008, and
-- the partial index below), so nothing has to keep a second copy in step
-- with the job lifecycle.
CREATE TABLE batches (
    id              uuid        PRIMARY KEY,
    owner_token_id  bigint      NOT NULL REFERENCES api_tokens(id),
    name            text,
    source          text        NOT NULL CHECK (source IN ('matrix', 'library')),
    template        jsonb       NOT NULL,              -- the job template (library form: the shared fields)
    matrix          jsonb       NOT NULL,              -- the axes as given (library form: ops, targets, dtypes)
    matrix_hash     text        NOT NULL,              -- SHA-256 (hex) of the sorted entry keys
    priority        integer     NOT NULL,
    n_jobs          integer     NOT NULL CHECK (n_jobs >= 1),
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX batches_created_idx       ON batches (created_at DESC, id DESC);
CREATE INDEX batches_owner_created_idx ON batches (owner_token_id, created_at DESC, id DESC);
CREATE INDEX batches_owner_matrix_idx  ON batches (owner_token_id, matrix_hash, created_at DESC);

-- A batch's jobs point at it.  The key is checked only for rows whose
-- batch_id is set (a NULL skips the check), so POST /v1/jobs, which never
-- sets it, pays no lookup; a batch's jobs are inserted in the batch's own
-- transaction right after its row.
ALTER TABLE jobs ADD CONSTRAINT jobs_batch_id_fkey FOREIGN KEY (batch_id) REFERENCES batches(id);

-- A batch job's place in its matrix: {"seq", "key", "op", "shapes",
-- "dtype", "target"} (docs/batches.md).  "key" is the entry's match key
-- (op|shape signature|dtype|target) that reports join two batches on.
-- NULL for jobs outside a batch.
ALTER TABLE jobs ADD COLUMN batch_entry jsonb;

-- Open batches (some job not finished) per owner, for the limit on open
-- batches: only live jobs are in this index, so the count reads a few rows.
CREATE INDEX jobs_batch_live_idx ON jobs (batch_id) WHERE batch_id IS NOT NULL AND state IN ('queued', 'running', 'retrying');
