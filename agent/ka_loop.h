/*
 * ka_loop — the tuning loop: compile -> validate -> profile -> diagnose ->
 * plan -> record, until the goal, the budget, or K iterations without
 * improvement.
 *
 * One iteration evaluates one candidate setting of the tunables:
 *   1. compile + profile: the kernel runs timing-only in a sandboxed child
 *      (ka_eval KA_EVAL_TIMING); a kernel error is a compile failure with
 *      its line.  Results are cached by (SHA-256 of the source, kwargs,
 *      input shapes and dtypes, target): the same candidate is never run
 *      twice (timing is deterministic, so there is no noise to average);
 *   2. validate: a candidate that would become the new best is validated
 *      (KA_EVAL_VALIDATE) on `n_seeds` seeded inputs (seeds derive from
 *      the run's seed, so a verdict is reproducible and is cached like a
 *      timing result, under a key that also holds the reference and the
 *      seeds; the reference's outputs per seed are computed once per run
 *      and the seeds run side by side, docs/agent.md "Speed").  Only a validated candidate
 *      becomes best: a faster but wrong one is rejected and recorded so;
 *   3. diagnose + plan: the built-in planner turns the candidate's findings
 *      into moves of the tunables that declare they address them ("up",
 *      "down", "any" over the tunable's value list), ranked by the
 *      finding's estimated cost; moves the constraints forbid are pruned
 *      without running; when no finding explains the remaining gap to the
 *      bound it tries the neighbours of the best setting, then pairs of
 *      moves.  Exhaustive and random planners exist for comparison (bench);
 *   4. record: one iteration (ka_iter.h: a C value, serialized only at a
 *      process edge by ka_iter_json) to the progress hook; with
 *      opts.artifacts, the iteration of a new best also carries artifacts
 *      (ka_artifacts: kernel.py and the profile documents, one more
 *      sandboxed timing evaluation), which the worker uploads.
 * The bound is the op's floor: max(compute bound, necessary-IO bound) of the
 * profile, which no kernel can beat; "fraction" = floor / latency.
 *
 * Result JSON (owned by the caller; ka_result_json of the ka_result the
 * loop fills, ka_result.h): best kernel (source with the best
 * tunables as the entry's defaults, params, metrics, fraction), default
 * setting's metrics, "warm_start" {entry, params, used, note} when one was
 * given, path of improving iterations, stop reason, counts
 * (evaluations, cache hits, pruned, validations, rejected), a per-iteration
 * trace, timings (loop overhead outside the sandboxed evaluations) and a
 * Markdown report.
 *
 * Failure: KF_INVALID for a bad space, KF_IO for an unreadable source,
 * KF_INTERNAL when a sandbox cannot be started; otherwise KF_OK with the
 * result (a candidate that fails is a recorded iteration, not an error; a
 * cancel from the hook, checked before every evaluation, ends the loop with
 * stop reason "cancelled").
 * When not even the starting setting validates, the result has no "best"
 * and "correct": false.
 */
#ifndef KA_LOOP_H
#define KA_LOOP_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "ka_cache.h"
#include "ka_eval.h"
#include "ka_iter.h"
#include "ka_lib.h"
#include "kf_buf.h"

typedef enum ka_planner {
    KA_PLAN_GUIDED = 0,
    KA_PLAN_EXHAUSTIVE,
    KA_PLAN_RANDOM,
} ka_planner;

const char *ka_planner_name(ka_planner p);
int ka_planner_parse(const char *s);            /* -1 when unknown */


typedef struct ka_opts {
    double     goal_latency_ns;     /* 0: none */
    double     goal_fraction;       /* 0: none */
    int        max_iterations;      /* 0: 40 */
    double     max_seconds;         /* 0: none */
    int        patience;            /* K iterations without improvement; 0: 8; < 0: never */
    ka_planner planner;
    uint64_t   seed;                /* validation seeds and the random planner */
    int        n_seeds;             /* validation input sets; 0: 3 */
    bool       validate_each;       /* validate every candidate, not only new bests */
    bool       artifacts;           /* attach ka_artifacts() to each new best's iteration */
    ka_cache  *cache;               /* NULL: a private one */
    /* Evaluations side by side (docs/agent.md "Speed"): up to `jobs`
     * sandboxed children at once, for a validation's seeds and for the
     * timing-only evaluations the guided planner will ask for next, taken
     * in the serial order (same history, same best).  0: the cores this
     * process may run on (sched_getaffinity); 1: one at a time. */
    int        jobs;
    /* What those concurrent children may hold together, in MiB (0:
     * KA_DEF_MEMORY_MIB): the concurrency is this over the largest
     * resident set a child of the same kind has had in this run (the first
     * one runs alone), at most `jobs`. */
    unsigned   memory_mib;
    /* A warm start (docs/library.md): the params of a kernel library
     * entry for the same op and shape, and its id.  The guided planner
     * starts from them (instead of the template's default and the
     * fixed-cost prior) when every tunable has one of its declared values
     * there and the constraints hold; the first iteration's reason and the
     * report then say "warm start from library entry <id>", the search
     * checks their neighbourhood with half the patience (at least 2: they
     * were already a local optimum of an earlier search) and the default
     * is not evaluated afterwards.  Otherwise the search starts as usual
     * and the result says why the warm start was not used.  Borrowed; NULL:
     * none.  Other planners ignore it. */
    const cJSON *warm_params;
    const char  *warm_entry;
} ka_opts;

enum { KA_DEF_ITERATIONS = 40 };   /* ka_opts.max_iterations when 0 */
enum { KA_DEF_MEMORY_MIB = 512 };  /* ka_opts.memory_mib when 0 */
enum { KA_MAX_JOBS = 64 };         /* ka_opts.jobs at most */

/* ka_opts.jobs 0: the CPUs this process may run on (at least 1). */
int ka_default_jobs(void);

typedef struct ka_hooks {
    void *ctx;
    void (*progress)(void *ctx, const ka_iter *iteration);   /* borrowed for the call */
    bool (*cancelled)(void *ctx);
    /* NULL or told what the loop starts before each step that may be long
     * (the first simulation, every validation on full-size inputs). */
    void (*status)(void *ctx, const char *what);
} ka_hooks;

kf_code ka_tune(const ka_problem *pb, const ka_space *sp, const ka_opts *o, const ka_hooks *h, cJSON **result,
                kf_err *err);

/* One-shot helpers for the profile / validate / untuned optimize kinds:
 * an iteration-shaped JSON for the given kwargs (no planner).  timeout_s
 * is the evaluation's CPU and wall-clock limit (0: KFORGE_SIM_TIMEOUT_S);
 * a kernel that reaches it is a result with "ok": false and error code
 * "wall_limit" or "cpu_limit". */
kf_code ka_profile_once(const ka_problem *pb, const char *kwargs_json, unsigned timeout_s, cJSON **result,
                        kf_err *err);
/* The request ka_validate_once runs (its seeds, tolerances and limit),
 * for a caller that fills out_in with outputs computed elsewhere. */
void ka_validate_req(ka_eval_req *r, const ka_problem *pb, const char *kwargs_json, uint64_t seed, int n_seeds,
                     unsigned timeout_s);
kf_code ka_validate_once(const ka_problem *pb, const char *kwargs_json, uint64_t seed, int n_seeds,
                         unsigned timeout_s, cJSON **result, kf_err *err);

/* The files kept for a candidate (docs/runs.md "Artifacts"):
 * [{"name": "kernel.py", "content": source with params as the entry's
 * defaults}, {"name": "profile.json" | "instructions.json" | "trace.json",
 * "content": text}] from one sandboxed timing evaluation with documents
 * (ka_eval.h).  When that evaluation fails (a limit, a crash) only
 * kernel.py is there.  A document over KA_ARTIFACT_MAX_BYTES is left out
 * (the three together, escaped as JSON strings, must fit the job
 * process's 16 MiB frame: workers/kf_runner.c).  KF_INTERNAL when the
 * sandbox cannot start; the caller owns *out. */
enum { KA_ARTIFACT_MAX_BYTES = 4 << 20 };
kf_code ka_artifacts(const ka_problem *pb, const char *kwargs_json, const cJSON *params, unsigned timeout_s,
                     cJSON **out, kf_err *err);
/* One line of the report's "What still limits it" for a profiler finding
 * at setting idx: its kind, cost and message; but when tunables declare
 * that they address the finding and none of them can move the way it
 * advises from idx (already at the end of its list, or every such step
 * breaks a constraint), the message's advice is replaced by what the
 * tunables' state is, so the report never advises what the chosen setting
 * rules out. */
void ka_finding_text(const ka_space *sp, const int *idx, const cJSON *finding, kf_buf *out);

/* The report's "How close it can get" for a timing result (ka_eval.h):
 * whether the op's bound (`floor_ns`, `bound_kind`) is within reach of the
 * kernel as evaluated.  When the busiest engine alone (`bounds.pipeline_ns`,
 * `pipeline_engine`) is busy longer than the bound, the bound is out of
 * reach at that setting: the text names the engine, the most of the bound
 * the kernel can reach (floor / engine time) and how near it is to that,
 * then lists each engine's busy time from the summary; otherwise it says
 * that no engine's own work stands between the kernel and the bound.
 * Appends nothing when the timing has no bound. */
void ka_reach_text(const cJSON *timing, kf_buf *out);

/* The source of `path` with the entry's keyword defaults set to `params`
 * (heap string), so the best kernel runs as is. */
char *ka_specialize_source(const char *path, const char *entry, const cJSON *params);

#endif
