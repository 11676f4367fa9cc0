-- 0001_init: jobs, their events, the outbox, iterations, results, tokens,
-- idempotency keys and workers.  Applied by `kforge-api migrate` in one
-- transaction and recorded in schema_migrations.

CREATE TABLE api_tokens (
    id           bigserial PRIMARY KEY,
    name         text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('admin', 'user', 'worker')),
    token_hash   bytea       NOT NULL UNIQUE,          -- SHA-256 of the secret
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);

CREATE TABLE jobs (
    id             uuid        PRIMARY KEY,
    kind           text        NOT NULL,
    state          text        NOT NULL DEFAULT 'queued'
                   CHECK (state IN ('queued', 'running', 'retrying', 'succeeded', 'failed', 'cancelled', 'dead')),
    target         text        NOT NULL,
    backend        text        NOT NULL DEFAULT 'sim',
    priority       integer     NOT NULL DEFAULT 5,
    spec           jsonb       NOT NULL,               -- the validated request, as accepted
    budget         jsonb       NOT NULL DEFAULT '{}',
    goal           jsonb       NOT NULL DEFAULT '{}',
    labels         jsonb       NOT NULL DEFAULT '{}',
    attempt        integer     NOT NULL DEFAULT 0,     -- attempts started (leases taken)
    max_attempts   integer     NOT NULL DEFAULT 3,
    owner_token_id bigint      NOT NULL REFERENCES api_tokens(id),
    batch_id       uuid,
    idempotency_key text,
    cancel_requested boolean   NOT NULL DEFAULT false,
    worker_id      text,
    last_error     text,
    best_iteration integer,
    result         jsonb,                              -- final result summary
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz,
    finished_at    timestamptz
);
CREATE INDEX jobs_created_idx       ON jobs (created_at DESC, id DESC);
CREATE INDEX jobs_owner_created_idx ON jobs (owner_token_id, created_at DESC, id DESC);
CREATE INDEX jobs_state_idx         ON jobs (state) WHERE state IN ('queued', 'running', 'retrying');

-- Every state transition (and other notable facts) of a job, append-only.
CREATE TABLE job_events (
    id         bigserial   PRIMARY KEY,
    job_id     uuid        NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt    integer     NOT NULL DEFAULT 0,
    type       text        NOT NULL,        -- created, enqueued, started, iteration, succeeded, failed, retrying, dead, cancel_requested, cancelled, requeued
    from_state text,
    to_state   text,
    detail     jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_events_job_idx ON job_events (job_id, id);

-- Transactional outbox: a row per job to put on the Redis queue.  Written in
-- the same transaction as the job; the API's fast path or the scheduler's
-- relay sets sent_at once Redis has it.
CREATE TABLE outbox (
    id         bigserial   PRIMARY KEY,
    job_id     uuid        NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    action     text        NOT NULL DEFAULT 'enqueue',   -- enqueue | cancel
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz
);
CREATE INDEX outbox_unsent_idx ON outbox (id) WHERE sent_at IS NULL;

-- One row per agent iteration, fenced by attempt: (job_id, attempt, seq).
CREATE TABLE iterations (
    id          bigserial   PRIMARY KEY,
    job_id      uuid        NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    seq         integer     NOT NULL,
    source      text,                      -- full source or NULL when diff is set
    source_diff text,
    params      jsonb       NOT NULL DEFAULT '{}',
    compile     jsonb       NOT NULL DEFAULT '{}',
    validation  jsonb       NOT NULL DEFAULT '{}',
    profile     jsonb       NOT NULL DEFAULT '{}',
    findings    jsonb       NOT NULL DEFAULT '[]',
    action      text,
    reason      text,
    timings     jsonb       NOT NULL DEFAULT '{}',
    latency_ns  double precision,
    correct     boolean,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, attempt, seq)
);

-- Exactly one final result per job (exactly-once effect of at-least-once delivery).
CREATE TABLE job_results (
    job_id      uuid        PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    state       text        NOT NULL CHECK (state IN ('succeeded', 'failed')),
    result      jsonb       NOT NULL DEFAULT '{}',
    error       text,
    worker_id   text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE idempotency_keys (
    owner_token_id bigint      NOT NULL REFERENCES api_tokens(id),
    key            text        NOT NULL,
    fingerprint    bytea       NOT NULL,          -- SHA-256 of method, path and body
    state          text        NOT NULL DEFAULT 'in_flight' CHECK (state IN ('in_flight', 'done')),
    status         integer,
    response       text,
    location       text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_token_id, key)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

CREATE TABLE workers (
    id          text        PRIMARY KEY,
    hostname    text,
    targets     text[]      NOT NULL DEFAULT '{}',
    backends    text[]      NOT NULL DEFAULT '{}',
    first_seen  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now()
);
