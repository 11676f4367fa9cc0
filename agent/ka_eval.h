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
 *                     output does and the output count matches;
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
} ka_eval_req;

kf_code ka_eval_run(const ka_eval_req *req, cJSON **result, kf_err *err);

/* "kernel.py:41" from a path:line location (the base name of the file). */
const char *ka_eval_short_loc(const char *loc);

#endif
