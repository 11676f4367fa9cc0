-- 0008_runs_read: what the read side of runs needs (issue 15,
-- docs/runs.md): indexes for the filters of GET /v1/jobs and for each job's
-- best iteration, views for analysts, and the read-only role kforge_reader.
--
-- Indexes.  Every filter of the list reads newest first, so each filter's
-- index ends in (created_at DESC, id DESC), the list's keyset order: a page
-- is an index range scan that stops after `limit` rows.  A user's list
-- always filters by owner, so op, the most used filter, has an index with
-- the owner first (users) and one without (admins); with op alone, a user
-- owning few of an op's jobs would read every job of that op.  Not
-- partial (WHERE spec ? 'op'): the planner cannot estimate `?` and took
-- such an index for far more selective than it is.  Labels are
-- matched by containment (labels @> '{"KEY":"VALUE"}', which the API sends
-- for label.KEY=VALUE; label values are strings) through a GIN index.  The
-- best iteration of a job (fastest correct, the order kf_db_apply uses for
-- best_iteration) is the first entry of iterations_best_idx.
CREATE INDEX jobs_owner_op_created_idx ON jobs (owner_token_id, (spec->>'op'), created_at DESC, id DESC);
CREATE INDEX jobs_op_created_idx     ON jobs ((spec->>'op'), created_at DESC, id DESC);
CREATE INDEX jobs_batch_created_idx  ON jobs (batch_id, created_at DESC, id DESC) WHERE batch_id IS NOT NULL;
CREATE INDEX jobs_worker_created_idx ON jobs (worker_id, created_at DESC, id DESC) WHERE worker_id IS NOT NULL;
CREATE INDEX jobs_labels_idx         ON jobs USING gin (labels jsonb_path_ops);
CREATE INDEX iterations_best_idx     ON iterations (job_id, latency_ns, attempt DESC, seq)
    WHERE correct AND latency_ns IS NOT NULL;

-- How the API and the views read an iteration's profile (docs/runs.md),
-- defined once.  fraction_of_bound: the profile's floor_ns (the larger of
-- the op's compute bound and its necessary-I/O bound, which the worker
-- reports with every profile) over the iteration's latency; NULL when
-- either is missing or not positive.  A profile field that is not a
-- number reads as missing, never as an error.
CREATE FUNCTION kforge_fraction_of_bound(profile jsonb, latency_ns float8) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(profile->'floor_ns') = 'number' AND latency_ns > 0 THEN
               CASE WHEN (profile->>'floor_ns')::numeric > 0 AND (profile->>'floor_ns')::numeric < 1e300
                    THEN (profile->>'floor_ns')::float8 / latency_ns END
           END
$$;

-- The profile summary an iteration list shows: the bound fields and the
-- summary subset of docs/profile.md the worker keeps (absent ones left out).
CREATE FUNCTION kforge_profile_summary(profile jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'total_time_ns', profile->'latency_ns', 'floor_ns', profile->'floor_ns',
               'bound', profile->'bound_kind', 'tightest', profile#>'{bounds,tightest}',
               'achieved_fraction', profile#>'{bounds,achieved_fraction}', 'cached', profile->'cached'))
           || CASE WHEN jsonb_typeof(profile->'summary') = 'object' THEN jsonb_strip_nulls(jsonb_build_object(
               'total_time', profile#>'{summary,total_time}',
               'mfu_estimated_percent', profile#>'{summary,mfu_estimated_percent}',
               'mbu_estimated_percent', profile#>'{summary,mbu_estimated_percent}',
               'tensor_engine_active_time_percent', profile#>'{summary,tensor_engine_active_time_percent}',
               'vector_engine_active_time_percent', profile#>'{summary,vector_engine_active_time_percent}',
               'scalar_engine_active_time_percent', profile#>'{summary,scalar_engine_active_time_percent}',
               'gpsimd_engine_active_time_percent', profile#>'{summary,gpsimd_engine_active_time_percent}',
               'dma_active_time_percent', profile#>'{summary,dma_active_time_percent}',
               'dma_transfer_count', profile#>'{summary,dma_transfer_count}',
               'dma_transfer_average_bytes', profile#>'{summary,dma_transfer_average_bytes}',
               'hbm_read_bytes', profile#>'{summary,hbm_read_bytes}',
               'hbm_write_bytes', profile#>'{summary,hbm_write_bytes}',
               'model_flops', profile#>'{summary,model_flops}')) ELSE '{}' END
$$;

-- The validation summary an iteration list shows: status and pass as the
-- worker reported them, the largest absolute error and the elements
-- checked over every check, the first failing check's message, and the
-- error of a kernel or reference that did not run.
CREATE FUNCTION kforge_validation_summary(v jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'status', v->'status', 'pass', v->'pass',
               'max_abs_err', max(CASE WHEN jsonb_typeof(e->'max_abs_err') = 'number'
                                       THEN (e->>'max_abs_err')::numeric END),
               'checked', sum(CASE WHEN jsonb_typeof(e->'elements') = 'number' THEN (e->>'elements')::numeric END),
               'bad', sum(CASE WHEN jsonb_typeof(e->'bad') = 'number' THEN (e->>'bad')::numeric END),
               'first_failure', (array_agg(e->'message') FILTER (WHERE e->'pass' = 'false'))[1],
               'error', v#>'{error,message}', 'ref_error', v->'ref_error', 'reason', v->'reason'))
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(v->'checks') = 'array' THEN v->'checks' ELSE '[]' END) e
$$;

-- The findings an iteration list shows: each one's code (the simulator's
-- `kind`, or a `code` a worker sends), title, estimated cost and message,
-- without the per-line attribution.
CREATE FUNCTION kforge_findings_summary(f jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'code', coalesce(e->'code', e->'kind'), 'title', e->'title', 'cost_ns', e->'cost_ns',
               'message', e->'message')) ORDER BY n), '[]')
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(f) = 'array' THEN f ELSE '[]' END) WITH ORDINALITY AS x(e, n)
    WHERE jsonb_typeof(e) = 'object'
$$;

-- The shape a job's kernel ran on: a generate spec's shapes, else each
-- input's shape by name.
CREATE FUNCTION kforge_job_shape(spec jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(spec->'shapes',
                    (SELECT jsonb_object_agg(k.key, k.value->'shape')
                     FROM jsonb_each(CASE WHEN jsonb_typeof(spec->'inputs') = 'object'
                                          THEN spec->'inputs' ELSE '{}' END) k))
$$;

-- Views for analysts (docs/runs.md, "SQL for analysts").

-- Every iteration with its job's context.
CREATE VIEW kforge_iterations AS
SELECT i.job_id, i.attempt, i.seq, j.kind, j.spec->>'op' AS op, kforge_job_shape(j.spec) AS shape, j.target,
       j.backend, j.labels, j.batch_id, j.state AS job_state, i.action, i.reason, i.params, i.latency_ns,
       kforge_fraction_of_bound(i.profile, i.latency_ns) AS fraction_of_bound, i.correct, i.validation,
       i.findings, kforge_profile_summary(i.profile) AS profile_summary, i.profile, i.compile, i.timings,
       i.source, i.source_diff, i.created_at
FROM iterations i JOIN jobs j ON j.id = i.job_id;

-- Each job's best iteration: the fastest correct one (ties: the later
-- attempt, then the lower seq), as jobs.best_iteration is chosen.
CREATE VIEW kforge_best AS
SELECT DISTINCT ON (i.job_id)
       i.job_id, j.kind, j.spec->>'op' AS op, kforge_job_shape(j.spec) AS shape, j.spec->>'dtype' AS dtype,
       j.target, j.backend, j.labels, j.state AS job_state, j.provenance, i.attempt, i.seq, i.params,
       i.latency_ns, kforge_fraction_of_bound(i.profile, i.latency_ns) AS fraction_of_bound,
       j.created_at AS job_created_at, i.created_at
FROM iterations i JOIN jobs j ON j.id = i.job_id
WHERE i.correct AND i.latency_ns IS NOT NULL
ORDER BY i.job_id, i.latency_ns, i.attempt DESC, i.seq;

-- Per op x shape x target: every job's best, oldest job first, with the
-- best latency known for that key up to and including each job (a
-- regression shows as latency_ns above the previous row's best_to_date_ns).
CREATE VIEW kforge_op_history AS
SELECT b.op, b.shape, b.target, b.dtype, b.backend, b.job_id, b.job_created_at, b.attempt, b.seq, b.params,
       b.latency_ns, b.fraction_of_bound, b.provenance,
       min(b.latency_ns) OVER (PARTITION BY b.op, b.shape, b.target ORDER BY b.job_created_at, b.job_id)
           AS best_to_date_ns
FROM kforge_best b;

-- The read-only role.  NOLOGIN: an operator grants it to a login role
-- (GRANT kforge_reader TO alice).  Made once per cluster; a migration run
-- by a role without CREATEROLE stops here and says what to do.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kforge_reader') THEN
        BEGIN
            CREATE ROLE kforge_reader NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;   -- another database's migration made it meanwhile
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'migration 0008 needs the role kforge_reader and % may not create roles',
                    current_user
                    USING HINT = 'as a superuser run: CREATE ROLE kforge_reader NOLOGIN; then migrate again';
        END;
    END IF;
END
$$;

-- What analysts read: the views, and the tables behind them without
-- secrets.  Never api_tokens.token_hash, idempotency_keys (stored answers)
-- or jobs.lease_token_hash: those columns are not granted, so a query that
-- names them (or SELECT *) is refused.
GRANT USAGE ON SCHEMA public TO kforge_reader;
GRANT SELECT ON kforge_iterations, kforge_best, kforge_op_history TO kforge_reader;
GRANT SELECT ON iterations, job_events, job_results, workers TO kforge_reader;
GRANT SELECT (id, kind, state, target, backend, priority, spec, budget, goal, labels, attempt, max_attempts,
              owner_token_id, batch_id, idempotency_key, cancel_requested, worker_id, last_error, best_iteration,
              result, created_at, updated_at, started_at, finished_at, provenance) ON jobs TO kforge_reader;
GRANT SELECT (id, name, role, created_at, revoked_at) ON api_tokens TO kforge_reader;
