-- 0009_artifacts: the files a job keeps (kernel.py, profile.json,
-- instructions.json, trace.json for each candidate that became the best
-- so far, and for the final one; docs/runs.md "Artifacts").
--
-- artifacts is the link: which job, attempt and iteration (seq) kept a
-- file under a name, pointing at its content by SHA-256; final marks the
-- set of the job's result.  artifact_blobs holds the contents for the
-- default PostgreSQL store (db/kf_artifact.h), zlib-compressed ('zlib') or
-- raw when compression does not help; a deployment that sets
-- KFORGE_ARTIFACT_STORE=dir:PATH keeps them in a folder instead and this
-- table stays empty.  touched_at is refreshed by every upload of the same
-- content, so retention never deletes a content an upload in flight is
-- about to link.
CREATE TABLE artifact_blobs (
    sha256     text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint NOT NULL CHECK (size >= 0),
    codec      text NOT NULL CHECK (codec IN ('zlib', 'raw')),
    data       bytea NOT NULL,
    touched_at timestamptz NOT NULL DEFAULT now()
);
-- The store compresses (zlib) before it writes: PostgreSQL keeps the bytes
-- out of line as they are rather than try pglz on them again.
ALTER TABLE artifact_blobs ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE artifacts (
    job_id       uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt      int NOT NULL CHECK (attempt >= 1),
    seq          int NOT NULL CHECK (seq >= 0),
    name         text NOT NULL CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$'),
    final        boolean NOT NULL DEFAULT false,
    sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size         bigint NOT NULL CHECK (size >= 0),
    content_type text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, attempt, seq, name, final)
);
-- GET /v1/artifacts/{sha256} finds the jobs that reference a content.
CREATE INDEX artifacts_sha256 ON artifacts (sha256);
