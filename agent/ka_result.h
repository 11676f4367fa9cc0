/*
 * ka_result — the result of a tuning run (ka_tune) as a C value, and its one
 * serializer (docs/protocol.md, "Job result").
 *
 * The loop fills a ka_result as it goes: each improving iteration appends a
 * ka_step to the path, each iteration a ka_trace_row, the template's
 * default setting (or the first one evaluated) its ka_setting; at the end
 * the best, the stop reason, the counts, the timings and the Markdown
 * report (written from these fields, not read back out of JSON).
 * ka_result_json makes the document once, for ka_tune's caller: the job
 * process's result frame, `kforge tune`'s result.json, the bench.
 *
 * The evaluator's own documents (the best candidate's bounds, summary and
 * findings; tunable values) stay cJSON, owned here.
 *
 * Ownership: a ka_result owns every pointer it holds (ka_result_release
 * frees them and zeroes it; NULL-safe), except the strings marked
 * borrowed, which must outlive it (static text, or the problem's).
 * Failure behaviour: appends abort on out-of-memory (kf_alloc); the
 * serializer never fails.
 */
#ifndef KA_RESULT_H
#define KA_RESULT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ka_step {          /* "path": an iteration that became the best */
    int    iteration;
    cJSON *params;
    double latency_ns;
    double fraction_of_bound;
    char   reason[400];
} ka_step;

typedef struct ka_trace_row {     /* "trace": one line per iteration */
    int         iteration;
    char        params[512];      /* "name=value ..." */
    double      latency_ns;
    double      best_ns;          /* the best so far (0 before one) */
    bool        cached;
    const char *action;           /* borrowed (static text) */
} ka_trace_row;

typedef struct ka_setting {       /* "default": the template's default setting */
    cJSON *params;
    double latency_ns, floor_ns, fraction_of_bound;
    bool   correct, validated;
} ka_setting;

typedef struct ka_result {
    const char *op, *entry, *target, *planner;   /* borrowed */

    bool        correct;          /* a validated best exists: the members of best are set */
    struct {
        cJSON  *params, *kwargs;
        int     iteration;
        double  latency_ns, floor_ns;
        char    bound_kind[16];
        cJSON  *bounds, *summary, *findings;   /* the evaluator's documents, NULL: absent */
        char   *source;           /* the kernel with the best tunables as defaults */
    } best;

    bool        has_default;
    ka_setting  def;

    ka_step    *path;
    size_t      n_path, cap_path;

    const char *stop_reason;      /* borrowed: goal, budget_iterations, ..., cancelled */
    char        stop_message[256];

    int           iterations, evaluations, pruned, validations, rejected, compile_errors;
    unsigned long cache_hits;
    double        wall_s, eval_s, sim_s;

    char         *report;         /* Markdown */
    ka_trace_row *trace;
    size_t        n_trace, cap_trace;
} ka_result;

/* Append to the path / the trace; the new element is zeroed, owned by r. */
ka_step *ka_result_add_step(ka_result *r);
ka_trace_row *ka_result_add_trace(ka_result *r);

/* The result document (the caller owns it): op, entry, target, planner,
 * correct, best? {params, kwargs, iteration, latency_ns, floor_ns,
 * fraction_of_bound, bound_kind, bounds, summary, findings, validated,
 * source}, latency_ns?, fraction_of_bound?, default?, path, stop {reason,
 * message}, iterations, evaluations, cache_hits, pruned, validations,
 * rejected, compile_errors, timings {wall_s, eval_s, sim_s,
 * loop_overhead_fraction, outside_sim_fraction}, report, trace. */
cJSON *ka_result_json(const ka_result *r);

void ka_setting_release(ka_setting *s);
void ka_result_release(ka_result *r);

#endif
