/*
 * ka_eval — one evaluation of a candidate kernel in a sandboxed child.
 *
 * Two modes, each one sim_sandbox_run() whose child runs the user's (or the
 * library's) kernel in the embedded CPython:
 *   KA_EVAL_TIMING    the kernel runs with numerics off (timing-only: the
 *                     record, hence the timing, is the same as with numerics
 *                     on), the record is profiled on the target
 *                     (sim_profile_build) and the child returns latency,
 *                     bounds, the op's floor (max of the compute bound and
 *                     the necessary-IO bound: what no kernel can beat),
 *                     summary figures, ranked findings with their source
 *                     lines, and the busiest lines;
 *   KA_EVAL_VALIDATE  for each seed: seeded random inputs, the kernel with
 *                     numerics on (its outputs are new HBM tensors, which the
 *                     simulator fills with NaN before the run, so an element
 *                     the kernel never writes stays NaN), the NumPy reference
 *                     on the same inputs, and every output compared in full
 *                     (sim_check_compare: dtype tolerances, NaN/Inf counted
 *                     as mismatches).  Passes only when every seed and every
 *                     output does and the output count matches; the first
 *                     seed that fails ends the run (the later ones do not
 *                     run).  With ref_in, a seed's reference outputs are
 *                     read from a file instead of running the reference.
 *   KA_EVAL_RUN       the kernel once with numerics on, on random inputs of
 *                     the first seed (1 when none): compile + numerics with
 *                     no reference (kforge mcp's `run`); each output's shape,
 *                     dtype, NaN/Inf counts and finite min/max/mean.
 * A kernel error (with its code, file and line), a crash or a limit is a
 * result ("ok": false), not a failure of the call.
 *
 * Result (a cJSON object the caller owns and frees):
 *   timing:   {"ok", "error"?, "latency_ns", "floor_ns", "bound_kind",
 *              "bounds", "summary", "findings", "lines", "sim_seconds"},
 *             with `documents` also "documents": {"profile.json",
 *             "instructions.json", "trace.json"}, each the text
 *             `kforge-sim profile --out` writes (sim_profile_json,
 *             sim_profile_write_instructions, sim_trace_write), built in the
 *             child and sent back through the same bounded, validated JSON
 *             frame as the rest: the sandbox gains no channel, no file of
 *             the machine and no write outside its own tmpfs;
 *   validate: {"ok", "error"?, "pass", "ref_error"?, "checks",
 *              "sim_seconds", "ref_seconds"}
 *   run:      {"ok", "error"?, "n_outputs", "outputs": [{"shape", "dtype",
 *              "elements", "nan", "inf", "min"?, "max"?, "mean"?}],
 *              "sim_seconds"}
 * plus "wall_seconds" (the whole sandboxed evaluation, parent side).
 * Failure of the call itself: KF_TOO_LARGE or KF_INVALID when an input's
 * shape is one the simulator cannot hold (sim_array_check, checked before
 * the child starts); KF_INTERNAL when the fork failed.
 */
#ifndef KA_EVAL_H
#define KA_EVAL_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "ka_lib.h"
#include "sim/sim_run.h"

typedef enum ka_eval_mode {
    KA_EVAL_TIMING = 0,
    KA_EVAL_VALIDATE,
    KA_EVAL_RUN,
} ka_eval_mode;

enum { KA_MAX_SEEDS = 8 };

typedef struct ka_eval_req {
    const ka_problem *pb;
    const char       *kwargs_json;      /* tunables + fixed kwargs, or NULL */
    ka_eval_mode      mode;
    uint64_t          seeds[KA_MAX_SEEDS];
    int               n_seeds;
    double            rtol, atol;       /* < 0: the output dtype's default (sim_check.h) */
    unsigned          timeout_s;        /* 0: KFORGE_SIM_TIMEOUT_S */
    unsigned          memory_mib;       /* 0: KFORGE_SIM_MEMORY_MIB */
    bool              documents;        /* timing: add the profile documents */
    /* validate, per seed: a file of the reference's outputs on that seed's
     * inputs (ka_ref_write), read instead of running the reference; NULL:
     * the child runs the reference */
    const char       *ref_in[KA_MAX_SEEDS];
    /* validate, per seed: where to store the reference's outputs when the
     * child ran it and the reference takes none of the names in
     * tunables_json (sim_check_reference_takes): then they are the same
     * for every setting of the tunables, and later validations read them
     * (ref_in) instead of running the reference again.  The result says
     * "ref_stored": the number of seeds stored.  NULL: not stored */
    const char       *ref_out[KA_MAX_SEEDS];
    const char       *tunables_json;    /* JSON array of the tunables' names */
    /* validate, per seed: a file of the kernel's outputs on that seed's
     * inputs (ka_ref_write), produced elsewhere (the neuron backend's
     * device run on ka_eval_inputs); the child reads them instead of
     * running the kernel on the simulator, and compares them with the
     * reference exactly as it compares the simulator's.  NULL: the child
     * runs the kernel */
    const char       *out_in[KA_MAX_SEEDS];
    /* validate, per seed: a file of that seed's inputs (ka_ref_write of
     * ka_eval_inputs), read instead of making them: the caller makes a
     * seed's inputs once for every candidate.  The file must hold exactly
     * the problem's inputs (count, dtypes, shapes), or the validation
     * fails with an error saying so.  NULL: the child makes them */
    const char       *in_in[KA_MAX_SEEDS];
} ka_eval_req;

/* The seeded random inputs a validation child makes for `seed`
 * (KA_EVAL_VALIDATE's, bit for bit), for a backend that runs the kernel
 * outside the simulator; n = pb->n_inputs arrays, freed with
 * sim_check_arrays_free.  No user code runs. */
kf_code ka_eval_inputs(const ka_problem *pb, uint64_t seed, sim_array **out, kf_err *err);

kf_code ka_eval_run(const ka_eval_req *req, cJSON **result, kf_err *err);

/* Several evaluations side by side: up to `jobs` at once (each in a helper
 * process that runs ka_eval_run, so each sandbox is started by a
 * single-threaded process), results[i] for reqs[i].  With stop_at_fail,
 * results are taken in index order and the first one that fails ("pass"
 * false for a validation, "ok" false for a timing evaluation) ends the
 * batch: the later ones are stopped (their process groups killed) or never
 * started, and their results[] stay NULL, so the outcome is the one a
 * serial run that stops at the first failure gives.  jobs <= 1 runs them
 * one after the other in this process.  KF_INTERNAL when a helper cannot
 * be started or sends no result; the caller owns the results (also on
 * failure: the ones that arrived). */
kf_code ka_eval_run_many(const ka_eval_req *reqs, int n, int jobs, bool stop_at_fail, cJSON **results,
                         kf_err *err);

/* A file of reference outputs (the agent's per-run store, private to the
 * process that writes it): arrays with their dtype and shape. */
kf_code ka_ref_write(const char *path, const sim_array *a, size_t n, kf_err *err);
kf_code ka_ref_read(const char *path, sim_array **a, size_t *n, kf_err *err);

/* The neuron-explorer Summary fields a timing result's "summary" keeps
 * (NULL-terminated), for a backend that maps a device profile onto it. */
const char *const *ka_eval_summary_keys(void);

/* "kernel.py:41" from a path:line location (the base name of the file). */
const char *ka_eval_short_loc(const char *loc);

#endif
