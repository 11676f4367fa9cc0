-- 0014_calibration: the simulator checked by hardware (issue 18,
-- docs/neuron-backend.md "Calibration").  One row per device profile of a
-- kernel: what the device measured next to what kforge's simulator
-- predicts for the same kernel source, shapes, dtypes and target.
--
-- Written only by the final result report of a job (api_internal.c), in
-- the transaction that records the result, from the result's
-- "calibration" array; the job's own row gives what the worker does not
-- say (op, shape, dtype, target, owner), so a worker reports only its
-- measurements.  Read by GET /v1/calibration (api/api_calib.c).
--
-- op:         the library op of a generate job, else "user.<entry>" (the
--             kernel library's naming, db/kf_library.c);
-- seq:        the iteration of the job the device profiled (1 for a
--             one-evaluation job; each confirmed candidate of a hybrid job);
-- error:      sim_ns / device_latency_ns - 1: positive when the simulator
--             predicts the kernel slower than the device's median latency;
-- engines:    {"tensor": {"device_percent", "sim_percent"}, ...}: each
--             engine's active time, as a percent of the run, on both sides;
-- lines:      the source lines whose time differs most between the device's
--             instruction table and the simulator's per-line times,
--             [{"loc", "device_ns", "sim_ns"}], largest difference first
--             (empty when the device profile gave no instruction table).
CREATE TABLE calibration (
    id                bigserial   PRIMARY KEY,
    job_id            uuid        NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt           int         NOT NULL,
    seq               int         NOT NULL CHECK (seq >= 0),
    owner_token_id    bigint,
    op                text        NOT NULL,
    kernel_sha256     text        NOT NULL CHECK (kernel_sha256 ~ '^[0-9a-f]{64}$'),
    shape             text        NOT NULL,
    dtype             text        NOT NULL,
    target            text        NOT NULL,
    params            jsonb       NOT NULL DEFAULT '{}',
    device_latency_ns double precision NOT NULL CHECK (device_latency_ns > 0 AND device_latency_ns < 'Infinity'),
    device_profile_ns double precision CHECK (device_profile_ns >= 0 AND device_profile_ns < 'Infinity'),
    sim_ns            double precision NOT NULL CHECK (sim_ns > 0 AND sim_ns < 'Infinity'),
    error             double precision GENERATED ALWAYS AS (sim_ns / device_latency_ns - 1) STORED,
    engines           jsonb       NOT NULL DEFAULT '{}',
    lines             jsonb       NOT NULL DEFAULT '[]',
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, attempt, seq)
);
-- GET /v1/calibration: its filters (op, target, since) and its pages (id).
CREATE INDEX calibration_op_target_idx ON calibration (op, target, created_at);
CREATE INDEX calibration_created_idx ON calibration (created_at, id);
CREATE INDEX calibration_owner_idx ON calibration (owner_token_id, id);
