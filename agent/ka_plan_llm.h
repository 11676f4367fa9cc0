/*
 * ka_plan_llm — the LLM planner: a language model (ka_llm) repairs and
 * restructures a user kernel through kforge's own tools; docs/llm.md is
 * the user's guide.
 *
 * The run: the starting source is evaluated first (validate on the run's
 * seeds, then timing-only profile when it passes), as iteration 0.  A
 * failing kernel puts the model in "repair" mode (at most
 * ka_llm_plan_opts.repair_rounds proposals; after three failed ones in a
 * row each tool answer asks it to simplify); a correct one (or once a
 * repair passes) in "restructure" mode (at most restructure_rounds
 * proposals, told the profile's ranked findings with their lines).  The
 * model sees the source, the failure or the findings, and these tools
 * (arguments checked against their JSON Schemas, ka_llm_args_parse):
 *   run {source?}       compile + numerics once (KA_EVAL_RUN)
 *   profile {source?}   the timing model's latency, bounds, findings, lines
 *   validate {source?}  against the NumPy reference on the run's seeds
 *   docs {query?, section?, doc?}   docs/sim-nki.md, docs/sim-errors.md
 *                       (the caller's hook: kforge mcp's docs tool)
 *   best {}             the best kernel so far and the iterations' history
 *   propose {source, reason?}   a new candidate: one iteration
 *   finish {reason?}    the model is done
 * (source defaults to the last proposed one.)  Every candidate (the start
 * too) first passes the static reward-hacking check (ka_hack.h; a caught
 * one is not run and its iteration carries "hack": {"rule", "line",
 * "message"}), is written to a file of the output folder and evaluated
 * only by ka_eval, in the sandbox, like any other; only one that validates
 * can become the best, when it is the first correct one or faster, and
 * only after it also validates on seeds the model was never shown (else
 * the hack "fresh_seeds") and at a second shape it was never shown
 * (ka_llm_second_shape; else the hack "second_shape", its shapes in the
 * iteration's "second_shape").
 *
 * A model that misbehaves never takes the run down: a reply without a tool
 * call, an unknown tool, arguments that break the schema, a source that
 * does not compile are tool answers it sees on its next turn (and count
 * against the turns: 4 per allowed proposal plus 4, in each mode, then the
 * stop reason "turns"); a reply without a tool call gets a nudge, a reply
 * that is not a chat completion or one past the timeout is a recorded
 * iteration ("action": "llm_error") and the model is asked again, told
 * why; three such unusable turns in a row stop it ("llm_no_tool_calls",
 * "llm_bad_reply" or "llm_timeout", the last one's); an endpoint that is
 * down, slow, rate-limited past its retries, or a spent token budget ends
 * the run with the best validated kernel so far and a stop reason
 * ("llm_" + the ka_llm error word).
 *
 * Records: each proposal (and the start) is an iteration handed to the
 * iteration hook as a JSON object {"iteration", "phase": "llm", "mode",
 * "action": "start"|"propose", "reason", "source_file", "compiled"?,
 * "correct", "hack"?, "error"?, "latency_ns"?, "accepted", "usage": {prompt_tokens,
 * completion_tokens}}; each model turn is a transcript record for the
 * transcript hook {"turn", "iteration", "messages": the messages added
 * since the last turn, "reply": the raw body (the key redacted by ka_llm)
 * or null, "error"?, "usage", "seconds", "attempts"}.  A transcript can be
 * replayed with ka_llm_replay (ka_llm.h): the same tool calls re-run
 * against the sandbox with no model.
 *
 * Result (the caller's): {"stop", "mode", "rounds", "turns", "correct",
 * "best": {"source", "source_file", "latency_ns", "iteration"}?,
 * "start": {"correct", "latency_ns"?, "error"?}, "llm": {"calls",
 * "prompt_tokens", "completion_tokens", "budget"}, "seconds", "eval_seconds"
 * (in sandboxed evaluations), "llm_seconds" (in the model's calls, waits
 * and retries included)}: the rest of "seconds" is the loop's own.
 *
 * Failure: KF_IO when the source cannot be read or a candidate cannot be
 * written, KF_INTERNAL when a sandbox cannot be started; everything the
 * model does is a result.
 */
#ifndef KA_PLAN_LLM_H
#define KA_PLAN_LLM_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "ka_lib.h"
#include "ka_llm.h"

typedef struct ka_llm_plan_opts {
    int         repair_rounds;       /* 0: 10 */
    int         restructure_rounds;  /* 0: 3; < 0: none */
    uint64_t    seed;                /* validation seeds derive from it */
    int         n_seeds;             /* 0: 3 */
    const char *out_dir;             /* candidates go to OUT/llm/cand-NNN.py */
    /* The docs tool: the answer to {query?, section?, doc?} (owned by the
     * caller of ka_llm_plan), or NULL with why in msg.  NULL hook: the
     * tool answers that docs are not available. */
    cJSON *(*docs)(void *ctx, const cJSON *args, char *msg, size_t n);
    void  (*iteration)(void *ctx, const cJSON *it);   /* borrowed */
    void  (*transcript)(void *ctx, const cJSON *turn); /* borrowed */
    /* Checked before each model turn (NULL: never): true stops the run
     * with the stop reason "cancelled" (the job was cancelled, its lease
     * lost or the worker drains). */
    bool  (*cancelled)(void *ctx);
    double max_seconds;              /* > 0: no model turn starts after this many seconds ("seconds") */
    /* Write mode: there is no kernel yet (pb->source_path is not read); the
     * model writes one for the op from the reference and the inputs (mode
     * "write", at most repair_rounds proposals shared with the repairs that
     * follow a failing one: the mode becomes "repair"; a correct one moves
     * to "restructure").  The result's "start" is {"written": true}. */
    bool   write;
    void  *ctx;
} ka_llm_plan_opts;

kf_code ka_llm_plan(const ka_problem *pb, ka_llm *llm, const ka_llm_plan_opts *o, cJSON **result, kf_err *err);

/* The second shape a candidate that would become the best is validated
 * at (docs/llm.md, "What is checked"), never shown to the model: each
 * dimension v of every input becomes ka_llm_second_dim(v) -- 1 stays 1; a
 * power of two up to 128 halves (128 -> 64); any other v becomes the
 * largest multiple of g not above 3v/4 and at least g, g being the largest
 * power of two up to 128 that divides v (1000 -> 744, 4096 -> 3072, 96 ->
 * 64 ... ) -- so equal dims stay equal and tile multiples stay multiples. */
int64_t ka_llm_second_dim(int64_t v);
void ka_llm_second_shape(const ka_problem *pb, ka_problem *out);

/* The problem of writing `op` from nothing (write mode): its entry is
 * named op, its reference is ref_entry in ref_path (a NumPy file), and its
 * inputs are the reference function's first n_shapes parameters, in
 * order, each with its shape and dtype.  KF_INVALID when the file has no
 * `def ref_entry(` or the function takes fewer parameters than there are
 * shapes; KF_IO when the file cannot be read. */
kf_code ka_llm_write_problem(const char *op, const char *ref_path, const char *ref_entry,
                             const int64_t (*shapes)[KA_MAX_DIMS], const int *ndims, int n_shapes, sim_dtype dtype,
                             const char *target, ka_problem *pb, kf_err *err);

/* The tools' array as sent to the model (caller frees). */
cJSON *ka_llm_plan_tools(void);

#endif
