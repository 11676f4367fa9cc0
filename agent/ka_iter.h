/*
 * ka_iter — one iteration of a tuning run as a C value, and its one
 * serializer (docs/protocol.md, "Iteration report").
 *
 * The agent builds a ka_iter for every candidate it evaluates (ka_loop's
 * tuning loop, and the one-evaluation kinds of the worker's sim backend)
 * and hands it to its progress hook as it is: inside the process nothing
 * reads an iteration back out of JSON.  JSON is made once, at a process or
 * file edge, by ka_iter_json: the job process's pipe to the worker
 * (workers/kf_runner.c frame 'P'), and `kforge tune --jsonl`.
 *
 * Typed here: what the loop decided and what the worker and the API read
 * (action, reason, latency, correctness, the compile and validation
 * verdicts, timings).  Kept as the evaluator's own documents (ka_eval.h),
 * which the sandboxed child sends and which the API stores as they are:
 * params, the compile error, the validation checks, the profile summary and
 * bounds, findings and the artifacts' files.
 *
 * Ownership: a ka_iter owns every cJSON member it holds (ka_iter_release
 * frees them and zeroes the value; NULL-safe); `source`, `action` and
 * `skip_reason` are borrowed (the caller keeps them alive until the hook
 * returns).  The progress hook borrows the ka_iter for the call.
 * Failure behaviour: ka_iter_json returns NULL only when out of memory
 * (kf_alloc aborts first) — never a half document.
 */
#ifndef KA_ITER_H
#define KA_ITER_H

#include <cjson/cJSON.h>
#include <stdbool.h>

typedef enum ka_verdict {
    KA_VERDICT_NONE = 0,    /* no "status" member: the evaluation's document as it is */
    KA_VERDICT_PASS,        /* "status": "pass" */
    KA_VERDICT_FAIL,        /* "status": "fail" */
    KA_VERDICT_SKIPPED,     /* "status": "skipped", "reason": skip_reason */
} ka_verdict;

typedef struct ka_iter {
    int         iteration;       /* 1-based, within the run; not serialized (the worker numbers its reports) */
    const char *source;          /* borrowed; NULL: absent (only the first iteration carries it) */
    cJSON      *params;          /* {tunable: value}; NULL: {} */

    bool        compiled;        /* "compile": {"ok"} */
    int         compile_cached;  /* "compile": {"cached"}: 1, 0, or -1 when not said */
    cJSON      *compile_error;   /* the evaluation's "error" {code, message, line?, file?}, or NULL */

    cJSON      *validation;      /* the validate evaluation's document, or NULL ({}) */
    ka_verdict  verdict;
    const char *skip_reason;     /* KA_VERDICT_SKIPPED: why it was not validated */

    cJSON      *profile;         /* profile summary and bounds (latency_ns, floor_ns, bound_kind,
                                  * bounds, summary, lines, cached), or NULL ({}) */
    cJSON      *findings;        /* ranked findings array, or NULL ([]) */

    const char *action;          /* baseline, accept, explore, reject; profile, validate, diagnose */
    char        reason[1024];
    bool        has_latency;
    double      latency_ns;
    bool        has_correct;
    bool        correct;
    cJSON      *artifacts;       /* [{name, content}] of a new best, or NULL (absent) */

    bool        has_timings;
    double      eval_ms, validate_ms, sim_ms, overhead_ms, total_ms;
} ka_iter;

/* The iteration's JSON text (heap; caller frees), keys in this order:
 * source?, params, compile, validation, profile, findings, action,
 * artifacts?, latency_ns?, correct?, reason, timings?. */
char *ka_iter_json(const ka_iter *it);

void ka_iter_release(ka_iter *it);

#endif
