-- 0013_library: the kernel library registry (issue 16, docs/library.md):
-- the best known kernel per (kernel, shape, dtype, target, backend), and
-- every change of an entry.
--
-- Independent of the batches of 0012: nothing here reads or writes them.
--
-- An entry is written only by db/kf_library.c, from the transaction that
-- moves a generate or optimize job to `succeeded` (kf_db_apply, the
-- SUCCEED row of common/kf_life.h), through kforge_library_offer() below,
-- which decides in one place whether the job's best iteration replaces
-- the entry.  The kernel's source is content in the artifact store
-- (source_sha256; artifact retention keeps every content an entry or its
-- history names).
--
-- kernel:   the library op of a generate job ("rmsnorm"), or "user.<entry>"
--           for an optimize job's own kernel;
-- shape:    kforge_job_shape(spec) as jsonb prints it (canonical: the same
--           shapes always print the same);
-- owner_token_id: NULL for library ops (shared with every user); the
--           job's owner for a user kernel (visible to its owner and admins
--           only, and part of the key, so two users' kernels never meet).
-- id:       "<kernel>-<target>-<dtype>-<backend>-<12 hex>", the hex from the
--           SHA-256 of the shape and the owner: readable, stable, and a
--           file name as it is.
CREATE TABLE kernel_library (
    id                text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_.-]{1,200}$'),
    kernel            text        NOT NULL,
    shape             text        NOT NULL,
    dtype             text        NOT NULL,
    target            text        NOT NULL,
    backend           text        NOT NULL,
    owner_token_id    bigint      REFERENCES api_tokens(id),
    entry             text        NOT NULL,          -- the kernel function's name
    params            jsonb       NOT NULL DEFAULT '{}',
    source_sha256     text        NOT NULL CHECK (source_sha256 ~ '^[0-9a-f]{64}$'),
    latency_ns        double precision NOT NULL CHECK (latency_ns > 0),
    fraction_of_bound double precision,
    job_id            uuid        NOT NULL,          -- no FK: an entry outlives a deleted job
    attempt           int         NOT NULL,
    seq               int         NOT NULL,
    provenance        jsonb       NOT NULL DEFAULT '{}',
    job_finished_at   timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now()
);
-- The list's filters, each in the list's order (id).
CREATE INDEX kernel_library_kernel_idx ON kernel_library (kernel, id);
CREATE INDEX kernel_library_target_idx ON kernel_library (target, id);
-- Artifact retention keeps every content an entry names (db/kf_artifact.c).
CREATE INDEX kernel_library_sha_idx ON kernel_library (source_sha256);
-- The warm start's lookup (api/api_library.c) by the full key.
CREATE UNIQUE INDEX kernel_library_key_idx
    ON kernel_library (kernel, target, dtype, backend, shape, coalesce(owner_token_id, 0));

-- Every change of an entry, append-only: why ('created', 'faster',
-- 'provenance'), the values before (NULL for 'created') and after.
CREATE TABLE kernel_library_history (
    id             bigserial   PRIMARY KEY,
    entry_id       text        NOT NULL REFERENCES kernel_library(id) ON DELETE CASCADE,
    reason         text        NOT NULL CHECK (reason IN ('created', 'faster', 'provenance')),
    old_latency_ns double precision,
    new_latency_ns double precision NOT NULL,
    old_params     jsonb,
    new_params     jsonb       NOT NULL,
    old_sha256     text,
    new_sha256     text        NOT NULL,
    old_provenance jsonb,
    new_provenance jsonb       NOT NULL,
    old_job_id     uuid,
    new_job_id     uuid        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX kernel_library_history_entry_idx ON kernel_library_history (entry_id, id);

-- What of a provenance decides the numbers: every member but "worker"
-- (two workers of the same build measure the same).  Two provenances are
-- the same when these are equal (jsonb equality: same members, same
-- values; a member absent on one side and present on the other differs).
CREATE FUNCTION kforge_provenance_key(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(p) = 'object' THEN p - 'worker' ELSE '{}'::jsonb END
$$;

-- Offer a job's best kernel to its entry; the one place that decides.
-- Returns what happened: 'created', 'faster', 'provenance' (the entry
-- changed; a history row says so) or 'kept' (nothing written):
--   same provenance (kforge_provenance_key equal): replaced when strictly
--     faster;
--   different provenance: replaced when the offering job finished later
--     than the entry's job (newer numbers from another simulator build,
--     target file, template or compiler invalidate the old ones, faster
--     or not).
CREATE FUNCTION kforge_library_offer(p_id text, p_kernel text, p_shape text, p_dtype text, p_target text,
                                     p_backend text, p_owner bigint, p_entry text, p_params jsonb, p_sha text,
                                     p_latency float8, p_fraction float8, p_job uuid, p_attempt int, p_seq int,
                                     p_prov jsonb, p_finished timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    cur kernel_library%ROWTYPE;
    why text;
BEGIN
    INSERT INTO kernel_library (id, kernel, shape, dtype, target, backend, owner_token_id, entry, params,
                                source_sha256, latency_ns, fraction_of_bound, job_id, attempt, seq, provenance,
                                job_finished_at)
    VALUES (p_id, p_kernel, p_shape, p_dtype, p_target, p_backend, p_owner, p_entry, p_params, p_sha, p_latency,
            p_fraction, p_job, p_attempt, p_seq, p_prov, p_finished)
    ON CONFLICT (id) DO NOTHING;
    IF FOUND THEN
        INSERT INTO kernel_library_history (entry_id, reason, new_latency_ns, new_params, new_sha256,
                                            new_provenance, new_job_id)
        VALUES (p_id, 'created', p_latency, p_params, p_sha, p_prov, p_job);
        RETURN 'created';
    END IF;
    SELECT * INTO cur FROM kernel_library WHERE id = p_id FOR UPDATE;
    IF cur.job_id = p_job THEN
        RETURN 'kept';
    END IF;
    IF kforge_provenance_key(cur.provenance) = kforge_provenance_key(p_prov) THEN
        IF p_latency < cur.latency_ns THEN
            why := 'faster';
        END IF;
    ELSIF p_finished > cur.job_finished_at THEN
        why := 'provenance';
    END IF;
    IF why IS NULL THEN
        RETURN 'kept';
    END IF;
    UPDATE kernel_library SET entry = p_entry, params = p_params, source_sha256 = p_sha, latency_ns = p_latency,
           fraction_of_bound = p_fraction, job_id = p_job, attempt = p_attempt, seq = p_seq, provenance = p_prov,
           job_finished_at = p_finished, updated_at = now()
     WHERE id = p_id;
    INSERT INTO kernel_library_history (entry_id, reason, old_latency_ns, new_latency_ns, old_params, new_params,
                                        old_sha256, new_sha256, old_provenance, new_provenance, old_job_id,
                                        new_job_id)
    VALUES (p_id, why, cur.latency_ns, p_latency, cur.params, p_params, cur.source_sha256, p_sha, cur.provenance,
            p_prov, cur.job_id, p_job);
    RETURN why;
END
$$;

-- For analysts: every entry with its kernel's key spelled out.
CREATE VIEW kforge_library AS
SELECT id, kernel, shape::jsonb AS shape, dtype, target, backend, owner_token_id, entry, params, latency_ns,
       fraction_of_bound, provenance, job_id, attempt, seq, source_sha256, job_finished_at, updated_at, created_at
FROM kernel_library;

-- Analysts (the kforge_reader role of 0008) read the library and its
-- history with plain SQL.
GRANT SELECT ON kforge_library, kernel_library_history TO kforge_reader;
