/*
 * backend_sim — the `sim` backend: generate, optimize, profile and validate
 * jobs on kforge's NeuronCore simulator, with the tuning loop of agent/.
 *
 *   generate  {op, shapes, dtype} + target: the library template of `op`
 *             (kernels/, KFORGE_KERNELS_DIR) bound to the shapes, tuned by
 *             the built-in planner within the job's budget and goal; with
 *             planner "llm" a language model restructures it first, and
 *             writes an op the library does not have from spec.reference
 *             (docs/llm.md);
 *   optimize  {source, entry, reference, inputs, tunables?}: the user's
 *             kernel tuned over `tunables` (a KFORGE block in the source adds
 *             the findings each tunable addresses and constraints); without
 *             tunables one iteration: validated, profiled and diagnosed, with
 *             findings per source line;
 *   profile   {source, entry, inputs}: one timing-only run, the profile;
 *   validate  {source, entry, reference, inputs}: seeded inputs, full-output
 *             comparison with the reference.
 * The one-evaluation kinds (profile, validate, optimize without tunables)
 * give each evaluation KFORGE_SIM_TIMEOUT_S or what is left of the job's
 * budget.seconds, whichever is less; the tuning loop checks the budget
 * between evaluations.
 * User source and reference are written to a private temporary folder; every
 * run of user code happens in a sandboxed child (ka_eval).  Each iteration
 * goes to hooks->progress; hooks->cancelled() is checked before every
 * evaluation.
 *
 * Every new best's iteration (and a profile's one evaluation) carries its
 * "artifacts" (ka_artifacts: kernel.py, profile.json, instructions.json,
 * trace.json), and the result carries "provenance" {backend, sim_build,
 * target_hash, template_hash}: the simulator's build id (sim_build.h), the
 * SHA-256 of the target file the evaluations loaded and of the kernel source
 * the job started from (the library template, or the user's source).  The
 * worker takes both out of what it relays (docs/protocol.md).
 *
 * Errors that another attempt would not fix are non-retryable with a message
 * naming the problem: unknown op (listing the library), shapes the template
 * cannot serve, a reference that does not run, a source that does not
 * compile (with its line), a kernel that never validates.  A cancel or a
 * failure to start a sandbox is retryable.
 */
#include "kf_backend.h"

#include <errno.h>
#include <openssl/evp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_fs.h"
#include "kf_jobproc.h"
#include "kf_jobprob.h"
#include "kf_json.h"
#include "kf_log.h"
#include "agent/ka_docs.h"
#include "agent/ka_lib.h"
#include "agent/ka_llm.h"
#include "agent/ka_loop.h"
#include "agent/ka_plan_llm.h"
#include "sim/sim_build.h"
#include "sim/sim_input.h"
#include "sim/sim_target.h"

static const char *const sim_kinds[] = { "generate", "optimize", "profile", "validate", NULL };

typedef struct bs_ctx {
    const kf_backend_hooks *hooks;
} bs_ctx;

/* res.provenance: what produced this result (see the header comment); a
 * file that cannot be read leaves its hash out. */
static void bs_provenance(const ka_problem *pb, cJSON *res)
{
    cJSON *p = cJSON_AddObjectToObject(res, "provenance");
    sim_target tgt;
    kf_err e = KF_ERR_INIT;
    char h[65];

    cJSON_AddStringToObject(p, "backend", "sim");
    cJSON_AddStringToObject(p, "sim_build", sim_build_id());
    if (sim_target_load(pb->target, NULL, &tgt, &e) == KF_OK && kf_jobprob_sha256(tgt.path, h))
        cJSON_AddStringToObject(p, "target_hash", h);
    if (kf_jobprob_sha256(pb->source_path, h))
        cJSON_AddStringToObject(p, "template_hash", h);
}

/* The job process's edge: an iteration becomes JSON here, once
 * (ka_iter_json), for the pipe to the worker. */
static void bs_progress(const kf_backend_hooks *hooks, const ka_iter *it)
{
    char *txt;

    if (!hooks->progress)
        return;
    txt = ka_iter_json(it);
    if (txt)
        hooks->progress(hooks->ctx, txt);
    free(txt);
}

static bool bs_cancelled(void *vctx)
{
    bs_ctx *c = vctx;
    return c->hooks->cancelled && c->hooks->cancelled(c->hooks->ctx);
}

static const char *bs_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double bs_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static double bs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The time limit of one evaluation of a profile, validate or untuned
 * optimize job: KFORGE_SIM_TIMEOUT_S, or what `used` seconds leave of the
 * job's budget.seconds when that is less, in whole seconds (the sandbox's
 * unit), rounded down so the budget is never exceeded; 0 when less than a
 * second is left. */
static unsigned bs_eval_limit(const kf_job_payload *job, double used)
{
    double def = (double)kf_config_int(KF_CFG_SIM_TIMEOUT_S), budget = bs_num(job->budget, "seconds");
    double left = budget > 0 ? budget - used : def;

    if (left > def)
        left = def;
    return left < 1 ? 0 : (unsigned)left;
}

/* True when an evaluation's error is one of the sandbox's time limits. */
static bool bs_timed_out(const cJSON *e)
{
    const char *code = bs_str(e, "code");
    return code && (strcmp(code, "wall_limit") == 0 || strcmp(code, "cpu_limit") == 0);
}

static void bs_opts(const kf_job_payload *job, ka_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->max_iterations = (int)bs_num(job->budget, "iterations");
    o->max_seconds = bs_num(job->budget, "seconds");
    o->goal_latency_ns = bs_num(job->goal, "latency_ns");
    o->goal_fraction = bs_num(job->goal, "fraction_of_bound");
    o->planner = KA_PLAN_GUIDED;
    o->artifacts = true;
    /* The seed of `kforge tune` (1): a job's validation inputs are those a
     * user gets locally, and jobs share verdicts through the cache
     * (docs/agent.md). */
    o->seed = 1;
    /* Evaluations side by side as `kforge tune` runs them: up to the CPUs
     * of this process's affinity mask, under the default memory budget
     * (docs/agent.md "Speed"); no job field sets them. */
    o->jobs = 0;
    o->memory_mib = 0;
    /* A generate job's warm start, which the API attached from the kernel
     * library (docs/library.md); the payload parser checked its shape. */
    if (job->kind == KF_KIND_GENERATE) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(job->spec, "warm_start");
        if (cJSON_IsObject(w) && bs_str(w, "entry")) {
            o->warm_entry = bs_str(w, "entry");
            o->warm_params = cJSON_GetObjectItemCaseSensitive(w, "params");
        }
    }
}

/* Why the first iteration failed for good, or NULL when it did not. */
static const char *bs_first_failure(const cJSON *res, char *buf, size_t len)
{
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(res, "path");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "correct")) || cJSON_GetArraySize(path) > 0)
        return NULL;
    snprintf(buf, len, "no candidate passed validation: %s",
             bs_str(cJSON_GetObjectItemCaseSensitive(res, "stop"), "message") ? bs_str(cJSON_GetObjectItemCaseSensitive(res, "stop"), "message") : "");
    return buf;
}

typedef struct bs_first {
    char error[1200];
    bool failed;
} bs_first;

typedef struct bs_relay {
    bs_ctx    c;
    bs_first *first;
    int       n;
} bs_relay;

/* Progress relay that remembers why the first iteration failed. */
static void bs_relay_progress(void *vctx, const ka_iter *it)
{
    bs_relay *r = vctx;
    if (r->n++ == 0) {
        if (!it->compiled) {
            const char *msg = bs_str(it->compile_error, "message");
            snprintf(r->first->error, sizeof(r->first->error), "the kernel does not compile: %s", msg ? msg : "error");
            r->first->failed = true;
        } else if (bs_str(it->validation, "ref_error")) {
            snprintf(r->first->error, sizeof(r->first->error), "the reference does not run: %s",
                     bs_str(it->validation, "ref_error"));
            r->first->failed = true;
        }
    }
    bs_progress(r->c.hooks, it);
}

static bool bs_relay_cancelled(void *vctx)
{
    bs_relay *r = vctx;
    return bs_cancelled(&r->c);
}

/* The tuning loop over sp; llm (or NULL): the LLM planner's part, kept in
 * the result as "llm"; used_s: seconds of budget.seconds already spent. */
static kf_code bs_tune(const kf_job_payload *job, const kf_backend_hooks *hooks, const ka_problem *pb,
                       const ka_space *sp, const cJSON *llm, double used_s, char **result_json, bool *retryable,
                       kf_err *err)
{
    ka_opts o;
    bs_first first = { "", false };
    bs_relay relay = { { hooks }, &first, 0 };
    ka_hooks kh = { &relay, bs_relay_progress, bs_relay_cancelled, NULL };
    cJSON *res = NULL;
    char buf[1400];
    const char *why;
    kf_code rc;

    bs_opts(job, &o);
    if (o.max_seconds > 0)
        o.max_seconds = o.max_seconds - used_s > 1 ? o.max_seconds - used_s : 1;
    if (*kf_config_str(KF_CFG_CACHE_DIR)) {
        kf_err ce = KF_ERR_INIT;
        o.cache = ka_cache_open(kf_config_str(KF_CFG_CACHE_DIR), kf_config_int(KF_CFG_CACHE_MAX_ENTRIES), &ce);
        if (!o.cache)
            kf_log_warn("evaluation cache unavailable; this job caches in memory only job=%s msg=\"%s\"", job->id,
                        ce.msg);
    }
    rc = ka_tune(pb, sp, &o, &kh, &res, err);
    ka_cache_free(o.cache);
    if (rc) {
        *retryable = rc == KF_INTERNAL;
        return rc;
    }
    if (strcmp(bs_str(cJSON_GetObjectItemCaseSensitive(res, "stop"), "reason") ? bs_str(cJSON_GetObjectItemCaseSensitive(res, "stop"), "reason") : "", "cancelled") == 0) {
        cJSON_Delete(res);
        *retryable = true;
        return kf_err_set(err, KF_UNAVAILABLE, "the job stopped between evaluations (cancelled or lease lost)");
    }
    if (first.failed) {
        cJSON_Delete(res);
        *retryable = false;
        return kf_err_set(err, KF_UNPROCESSABLE, "%s", first.error);
    }
    why = bs_first_failure(res, buf, sizeof(buf));
    if (why) {
        cJSON_Delete(res);
        *retryable = false;
        return kf_err_set(err, KF_UNPROCESSABLE, "%s", why);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(res, "trace");
    if (llm)
        cJSON_AddItemToObject(res, "llm", cJSON_Duplicate(llm, true));
    bs_provenance(pb, res);
    *result_json = cJSON_PrintUnformatted(res);
    cJSON_Delete(res);
    return KF_OK;
}

/* ---- the LLM planner (docs/llm.md) ------------------------------------------------------- */

enum {
    BS_TURN_MAX = 192 * 1024,   /* bytes of one stored transcript turn (see bs_llm_turn) */
    BS_REASON_MAX = 4000,       /* an iteration's reason: the API takes 4096 */
};

static bool bs_wants_llm(const kf_job_payload *job)
{
    const char *pl = bs_str(job->spec, "planner");
    return pl && strcmp(pl, "llm") == 0;
}

typedef struct bs_llm_ctx {
    const kf_backend_hooks *hooks;
} bs_llm_ctx;

static void bs_llm_send(const bs_llm_ctx *c, cJSON *report)
{
    char *txt = kf_json_print(report);
    if (c->hooks->progress)
        c->hooks->progress(c->hooks->ctx, txt);
    free(txt);
}

static void bs_llm_reason(cJSON *report, const char *reason)
{
    size_t n = reason ? strlen(reason) : 0;
    if (n > BS_REASON_MAX)
        n = kf_utf8_cut(reason, BS_REASON_MAX);
    cJSON_AddStringToObject(report, "reason", "");
    if (n) {
        char *cut = kf_strndup(reason, n);
        cJSON_ReplaceItemInObject(report, "reason", cJSON_CreateString(cut));
        free(cut);
    }
}

/* One record of the LLM planner (ka_plan_llm.h) as an iteration report:
 * "action" llm_start / llm_propose / llm_error, the candidate's "source",
 * "compile" {ok, error?}, "validation", "latency_ns", "correct",
 * "findings", and "llm" {mode, accepted, hack?, error?, usage}. */
static void bs_llm_iteration(void *vctx, const cJSON *it)
{
    const bs_llm_ctx *c = vctx;
    cJSON *r = cJSON_CreateObject(), *l;
    const char *action = bs_str(it, "action"), *file = bs_str(it, "source_file");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(it, "error"), *v;
    char act[48];

    snprintf(act, sizeof(act), "llm_%s", action ? action : "step");
    cJSON_AddStringToObject(r, "action", act);
    bs_llm_reason(r, bs_str(it, "reason"));
    if (file) {
        char *src = kf_fs_read_file(file, KF_JOB_MAX_SOURCE_BYTES, NULL);
        if (src)
            cJSON_AddStringToObject(r, "source", src);
        free(src);
    }
    v = cJSON_GetObjectItemCaseSensitive(it, "compiled");
    if (cJSON_IsBool(v) || cJSON_IsObject(err)) {
        cJSON *cmp = cJSON_AddObjectToObject(r, "compile");
        cJSON_AddBoolToObject(cmp, "ok", cJSON_IsTrue(v));
        if (cJSON_IsObject(err))
            cJSON_AddItemToObject(cmp, "error", cJSON_Duplicate(err, true));
    }
    v = cJSON_GetObjectItemCaseSensitive(it, "validation");
    if (cJSON_IsObject(v))
        cJSON_AddItemToObject(r, "validation", cJSON_Duplicate(v, true));
    v = cJSON_GetObjectItemCaseSensitive(it, "latency_ns");
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
        cJSON_AddNumberToObject(r, "latency_ns", v->valuedouble);
    v = cJSON_GetObjectItemCaseSensitive(it, "correct");
    if (cJSON_IsBool(v))
        cJSON_AddBoolToObject(r, "correct", cJSON_IsTrue(v));
    v = cJSON_GetObjectItemCaseSensitive(it, "findings");
    if (cJSON_IsArray(v))
        cJSON_AddItemToObject(r, "findings", cJSON_Duplicate(v, true));
    l = cJSON_AddObjectToObject(r, "llm");
    cJSON_AddStringToObject(l, "mode", bs_str(it, "mode") ? bs_str(it, "mode") : "repair");
    cJSON_AddBoolToObject(l, "accepted", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "accepted")));
    v = cJSON_GetObjectItemCaseSensitive(it, "hack");
    if (cJSON_IsObject(v))
        cJSON_AddItemToObject(l, "hack", cJSON_Duplicate(v, true));
    if (cJSON_IsString(err))
        cJSON_AddStringToObject(l, "error", err->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(it, "usage");
    if (cJSON_IsObject(v))
        cJSON_AddItemToObject(l, "usage", cJSON_Duplicate(v, true));
    bs_llm_send(c, r);
    cJSON_Delete(r);
}

/* One model turn as an iteration report of its own ("action" llm_turn,
 * "llm" {mode, usage, turn}); a turn is at most BS_TURN_MAX bytes: past
 * that its "messages" are left out ("messages_omitted": they are the
 * prompts this run made, the replies are what a replay needs), and past
 * that again its reply is cut ("reply_cut": such a turn replays as a
 * reply that is not JSON). */
static void bs_llm_turn(void *vctx, const cJSON *turn)
{
    const bs_llm_ctx *c = vctx;
    cJSON *t = cJSON_Duplicate(turn, true), *r = cJSON_CreateObject(), *l;
    char *txt = kf_json_print(t), reason[128];
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(turn, "usage");

    if (strlen(txt) > BS_TURN_MAX) {
        cJSON_DeleteItemFromObjectCaseSensitive(t, "messages");
        cJSON_AddBoolToObject(t, "messages_omitted", true);
        free(txt);
        txt = kf_json_print(t);
    }
    if (strlen(txt) > BS_TURN_MAX) {
        const char *reply = bs_str(t, "reply");
        size_t keep = reply ? kf_utf8_cut(reply, BS_TURN_MAX / 2) : 0;
        char *cut = reply ? kf_strndup(reply, keep) : NULL;
        if (cut) {
            cJSON_ReplaceItemInObject(t, "reply", cJSON_CreateString(cut));
            cJSON_AddBoolToObject(t, "reply_cut", true);
        }
        free(cut);
    }
    free(txt);
    snprintf(reason, sizeof(reason), "model turn %d%s%s", (int)bs_num(turn, "turn"),
             bs_str(turn, "error") ? ": " : "", bs_str(turn, "error") ? bs_str(turn, "error") : "");
    cJSON_AddStringToObject(r, "action", "llm_turn");
    cJSON_AddStringToObject(r, "reason", reason);
    l = cJSON_AddObjectToObject(r, "llm");
    cJSON_AddStringToObject(l, "mode", bs_str(turn, "mode") ? bs_str(turn, "mode") : "repair");
    if (cJSON_IsObject(u))
        cJSON_AddItemToObject(l, "usage", cJSON_Duplicate(u, true));
    cJSON_AddItemToObject(l, "turn", t);
    bs_llm_send(c, r);
    cJSON_Delete(r);
}

/* The docs tool: kforge's docs/sim-nki.md and docs/sim-errors.md (ka_docs.h). */
static cJSON *bs_llm_docs(void *vctx, const cJSON *args, char *msg, size_t n)
{
    kf_err e = KF_ERR_INIT;
    cJSON *r = ka_docs_query(bs_str(args, "query"), bs_str(args, "section"), bs_str(args, "doc"), &e);

    (void)vctx;
    if (!r)
        snprintf(msg, n, "%s", e.msg);
    return r;
}

static bool bs_llm_cancelled(void *vctx)
{
    const bs_llm_ctx *c = vctx;
    return c->hooks->cancelled && c->hooks->cancelled(c->hooks->ctx);
}

/* The model's best as the job's result when there is nothing to tune
 * (its kernel declares no tunables, or no time is left). */
static kf_code bs_llm_only(const ka_problem *pb, const cJSON *lres, char **result_json)
{
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(lres, "best");
    cJSON *res = cJSON_CreateObject(), *b = cJSON_AddObjectToObject(res, "best"), *st;

    cJSON_AddBoolToObject(res, "correct", true);
    cJSON_AddStringToObject(b, "source", bs_str(best, "source"));
    cJSON_AddNumberToObject(b, "latency_ns", bs_num(best, "latency_ns"));
    cJSON_AddNumberToObject(b, "iteration", bs_num(best, "iteration"));
    cJSON_AddNumberToObject(res, "latency_ns", bs_num(best, "latency_ns"));
    st = cJSON_AddObjectToObject(res, "stop");
    cJSON_AddStringToObject(st, "reason", "llm_only");
    cJSON_AddStringToObject(st, "message", "the model's kernel declares no tunables to tune further");
    cJSON_AddItemToObject(res, "llm", cJSON_Duplicate(lres, true));
    bs_provenance(pb, res);
    *result_json = cJSON_PrintUnformatted(res);
    cJSON_Delete(res);
    return KF_OK;
}

/* A generate or optimize job with planner "llm": the model repairs and
 * restructures the starting kernel (pb: the template bound to the shapes,
 * or the user's source), its candidates in dir/llm; then its best kernel
 * goes to the guided planner with the tunables its KFORGE block declares
 * (a generate job's rebound to the shapes; an optimize job's spec.tunables
 * first).  meta: the user source's KFORGE block (optimize) or NULL. */
static kf_code bs_llm(const kf_job_payload *job, const kf_backend_hooks *hooks, ka_problem *pb, ka_space *sp,
                      const cJSON *meta, const char *dir, const int64_t (*shapes)[KA_MAX_DIMS], const int *ndims,
                      int n_shapes, sim_dtype dt, bool write, char **result_json, bool *retryable, kf_err *err)
{
    bs_llm_ctx c = { hooks };
    ka_llm_plan_opts po;
    ka_llm_cfg lc;
    ka_llm cl;
    cJSON *lres = NULL, *meta2 = NULL, *tun = NULL;
    const cJSON *best, *t;
    const char *stop;
    char path[PATH_MAX];
    double t0 = bs_now(), used;
    kf_err e2 = KF_ERR_INIT;
    kf_code rc;

    *retryable = false;
    if (ka_llm_cfg_from_env(&lc, err) != KF_OK)
        return KF_CONFIG;
    lc.key_fd = kf_jobproc_llm_key_fd();
    ka_llm_init(&cl, &lc, (int64_t)bs_num(job->budget, "llm_tokens"));
    memset(&po, 0, sizeof(po));
    po.seed = 1;   /* the seeds of every job and of kforge tune (bs_opts) */
    po.out_dir = dir;
    po.iteration = bs_llm_iteration;
    po.transcript = bs_llm_turn;
    po.docs = bs_llm_docs;
    po.cancelled = bs_llm_cancelled;
    po.max_seconds = bs_num(job->budget, "seconds");
    po.write = write;
    po.ctx = &c;
    rc = ka_llm_plan(pb, &cl, &po, &lres, err);
    ka_llm_release(&cl);
    if (rc) {
        *retryable = rc == KF_INTERNAL;
        return rc;
    }
    stop = bs_str(lres, "stop");
    best = cJSON_GetObjectItemCaseSensitive(lres, "best");
    if (stop && strcmp(stop, "cancelled") == 0) {
        cJSON_Delete(lres);
        *retryable = true;
        return kf_err_set(err, KF_UNAVAILABLE, "the job stopped between model turns (cancelled or lease lost)");
    }
    if (!best) {
        const cJSON *se = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(lres, "start"), "error");
        rc = kf_err_set(err, KF_UNPROCESSABLE,
                        "no candidate passed validation: the LLM planner stopped (%s) after %d proposals%s%s",
                        stop ? stop : "?", (int)bs_num(lres, "rounds"), bs_str(se, "message") ? "; the start: " : "",
                        bs_str(se, "message") ? bs_str(se, "message") : "");
        cJSON_Delete(lres);
        return rc;
    }
    /* the hand-off: the model's best, with the tunables it declares */
    if (!realpath(bs_str(best, "source_file"), path)) {
        rc = kf_err_set(err, KF_IO, "the model's best kernel is gone: %s", strerror(errno));
        *retryable = true;
        goto out;
    }
    used = bs_now() - t0;
    if (ka_lib_read_meta(path, &meta2, &e2) != KF_OK && e2.code != KF_NOT_FOUND) {
        kf_log_info("the model's kernel has a KFORGE block that does not read; its kernel is the result job=%s "
                    "msg=\"%s\"", job->id, e2.msg);
        rc = bs_llm_only(pb, lres, result_json);
        goto out;
    }
    if (bs_num(job->budget, "seconds") > 0 && used >= bs_num(job->budget, "seconds")) {
        rc = bs_llm_only(pb, lres, result_json);
        goto out;
    }
    ka_space_release(sp);
    memset(sp, 0, sizeof(*sp));
    if (job->kind == KF_KIND_GENERATE && meta2) {
        /* a template again: its KFORGE block bound to the job's shapes */
        ka_problem pb2;
        ka_space sp2;
        memset(&pb2, 0, sizeof(pb2));
        memset(&sp2, 0, sizeof(sp2));
        if (ka_lib_bind(meta2, path, shapes, ndims, n_shapes, dt, job->target, &pb2, &sp2, &e2) == KF_OK) {
            ka_problem_release(pb);
            *pb = pb2;
            *sp = sp2;
        } else {
            kf_log_info("the model's kernel does not bind as a template; its declared tunables are used job=%s "
                        "msg=\"%s\"", job->id, e2.msg);
            ka_space_release(&sp2);
            ka_problem_release(&pb2);
        }
    }
    if (sp->n == 0) {
        const cJSON *spec_tun = job->kind == KF_KIND_OPTIMIZE ? cJSON_GetObjectItemCaseSensitive(job->spec, "tunables")
                                                             : NULL;
        snprintf(pb->source_path, sizeof(pb->source_path), "%s", path);
        if (cJSON_GetArraySize(spec_tun) > 0) {
            tun = cJSON_Duplicate(spec_tun, true);
        } else {
            tun = cJSON_CreateObject();
            cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(meta2 ? meta2 : meta, "tunables"))
                cJSON_AddItemToObject(tun, t->string,
                                      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "values"), true));
        }
        if (cJSON_GetArraySize(tun) > 0 && ka_space_from_tunables(tun, meta2, pb, sp, &e2) != KF_OK) {
            kf_log_info("the model's kernel does not take the tunables; its kernel is the result job=%s msg=\"%s\"",
                        job->id, e2.msg);
            ka_space_release(sp);
            memset(sp, 0, sizeof(*sp));
        }
    }
    if (sp->n == 0) {
        rc = bs_llm_only(pb, lres, result_json);
        goto out;
    }
    rc = bs_tune(job, hooks, pb, sp, lres, used, result_json, retryable, err);
out:
    cJSON_Delete(tun);
    cJSON_Delete(meta2);
    cJSON_Delete(lres);
    return rc;
}

/* Write mode (docs/llm.md): a generate job whose op the library does not
 * have, with its NumPy reference (a function named after the op, taking
 * the inputs in order, one shape each): the model writes the kernel. */
static kf_code bs_write(const kf_job_payload *job, const kf_backend_hooks *hooks, const int64_t (*shapes)[KA_MAX_DIMS],
                        const int *ndims, int n, sim_dtype dt, char **result_json, bool *retryable, kf_err *err)
{
    const char *tmp = getenv("TMPDIR"), *op = bs_str(job->spec, "op");
    char dir[PATH_MAX], ref[PATH_MAX];
    ka_problem pb;
    ka_space sp;
    kf_code rc;

    memset(&pb, 0, sizeof(pb));
    memset(&sp, 0, sizeof(sp));
    snprintf(dir, sizeof(dir), "%s/kforge-llm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        *retryable = true;
        return kf_err_set(err, KF_IO, "cannot create a temporary folder: %s", strerror(errno));
    }
    rc = kf_jobprob_write(dir, "reference.py", bs_str(job->spec, "reference"), ref, sizeof(ref), err);
    if (rc == KF_OK) {
        rc = ka_llm_write_problem(op, ref, op, shapes, ndims, n, dt, job->target, &pb, err);
        if (rc != KF_OK && rc != KF_IO)
            rc = kf_err_set(err, KF_UNPROCESSABLE, "op %s is not in the library, so the model writes it from the "
                                                   "reference: %s", op, err->msg);
    }
    if (rc == KF_OK)
        rc = bs_llm(job, hooks, &pb, &sp, NULL, dir, shapes, ndims, n, dt, true, result_json, retryable, err);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    kf_jobproc_workdir_remove(dir);
    return rc;
}

static kf_code bs_generate(const kf_job_payload *job, const kf_backend_hooks *hooks, char **result_json,
                           bool *retryable, kf_err *err)
{
    const cJSON *spec = job->spec, *sh;
    int64_t shapes[KA_MAX_INPUTS][KA_MAX_DIMS];
    int ndims[KA_MAX_INPUTS], n = 0, dt = sim_input_dtype(bs_str(spec, "dtype"));
    cJSON *meta = NULL;
    char path[PATH_MAX];
    ka_problem pb;
    ka_space sp;
    kf_code rc;

    memset(&pb, 0, sizeof(pb));
    memset(&sp, 0, sizeof(sp));
    *retryable = false;
    if (dt < 0)
        return kf_err_set(err, KF_UNPROCESSABLE, "dtype %s is not supported by the simulator", bs_str(spec, "dtype"));
    cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(spec, "shapes"))
    {
        const cJSON *d;
        if (n >= KA_MAX_INPUTS)
            return kf_err_set(err, KF_UNPROCESSABLE, "more than %d shapes; the simulator backend takes at most %d",
                              KA_MAX_INPUTS, KA_MAX_INPUTS);
        ndims[n] = 0;
        char what[32];
        snprintf(what, sizeof(what), "shapes[%d]", n);
        cJSON_ArrayForEach(d, sh)
        {
            if (kf_jobprob_dim(d, ndims[n], &shapes[n][ndims[n]], what, err) != KF_OK)
                return KF_UNPROCESSABLE;
            ndims[n]++;
        }
        n++;
    }
    rc = ka_lib_find(NULL, bs_str(spec, "op"), &meta, path, sizeof(path), err);
    if (rc == KF_NOT_FOUND && bs_wants_llm(job) && bs_str(spec, "reference")) {
        rc = bs_write(job, hooks, (const int64_t(*)[KA_MAX_DIMS])shapes, ndims, n, (sim_dtype)dt, result_json,
                      retryable, err);
        goto out;
    }
    if (rc == KF_OK)
        rc = ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])shapes, ndims, n, (sim_dtype)dt, job->target, &pb,
                         &sp, err);
    if (rc) {
        if (rc != KF_IO)
            rc = KF_UNPROCESSABLE;
        goto out;
    }
    if (bs_wants_llm(job)) {
        char dir[PATH_MAX];
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/kforge-llm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            *retryable = true;
            rc = kf_err_set(err, KF_IO, "cannot create a temporary folder: %s", strerror(errno));
            goto out;
        }
        rc = bs_llm(job, hooks, &pb, &sp, NULL, dir, (const int64_t(*)[KA_MAX_DIMS])shapes, ndims, n, (sim_dtype)dt,
                    false, result_json, retryable, err);
        kf_jobproc_workdir_remove(dir);
        goto out;
    }
    rc = bs_tune(job, hooks, &pb, &sp, NULL, 0, result_json, retryable, err);
out:
    cJSON_Delete(meta);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    return rc;
}

/* The job's folder and what the run left in it (the LLM planner's
 * candidates too). */
static void bs_rmdir(const char *dir)
{
    kf_jobproc_workdir_remove(dir);
}

static kf_code bs_user(const kf_job_payload *job, const kf_backend_hooks *hooks, char **result_json, bool *retryable,
                       kf_err *err)
{
    char tmpl[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    ka_problem pb;
    ka_space sp;
    cJSON *meta = NULL, *tun;
    kf_code rc;

    memset(&pb, 0, sizeof(pb));
    memset(&sp, 0, sizeof(sp));
    *retryable = false;
    snprintf(tmpl, sizeof(tmpl), "%s/kforge-job-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmpl)) {
        *retryable = true;
        return kf_err_set(err, KF_IO, "cannot create a temporary folder: %s", strerror(errno));
    }
    rc = kf_jobprob_user(job, tmpl, "sim", &pb, err);
    if (rc)
        goto out;
    if (bs_wants_llm(job)) {
        kf_err e2 = KF_ERR_INIT;
        if (ka_lib_meta_from_text(bs_str(job->spec, "source"), "the source", &meta, &e2) != KF_OK &&
            e2.code != KF_NOT_FOUND) {
            rc = kf_err_set(err, KF_UNPROCESSABLE, "%s", e2.msg);
            goto out;
        }
        rc = bs_llm(job, hooks, &pb, &sp, meta, tmpl, NULL, NULL, 0, SIM_DT_BFLOAT16, false, result_json, retryable,
                    err);
        goto out;
    }
    if (job->kind == KF_KIND_PROFILE || job->kind == KF_KIND_VALIDATE ||
        (job->kind == KF_KIND_OPTIMIZE && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(job->spec, "tunables")) == 0)) {
        /* one evaluation: profile and/or validate */
        cJSON *out = cJSON_CreateObject(), *prof = NULL, *val = NULL;
        ka_iter it;
        bool want_prof = job->kind != KF_KIND_VALIDATE, want_val = job->kind != KF_KIND_PROFILE;
        double t0 = bs_now();   /* the evaluations of this job share budget.seconds */
        unsigned lim_prof = bs_eval_limit(job, 0), lim_val = 0;
        memset(&it, 0, sizeof(it));
        if (want_val && !pb.ref_path[0]) {
            cJSON_Delete(out);
            rc = kf_err_set(err, KF_UNPROCESSABLE, "validate needs a NumPy reference (spec.reference)");
            goto out;
        }
        if (hooks->cancelled && hooks->cancelled(hooks->ctx)) {
            cJSON_Delete(out);
            *retryable = true;
            rc = kf_err_set(err, KF_UNAVAILABLE, "the job stopped before its evaluation (cancelled or lease lost)");
            goto out;
        }
        /* budget.seconds bounds the evaluations too, not only the tuning loop. */
        rc = want_prof ? ka_profile_once(&pb, NULL, lim_prof, &prof, err) : KF_OK;
        if (rc == KF_OK && want_val && (!prof || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(prof, "ok")))) {
            lim_val = bs_eval_limit(job, want_prof ? bs_now() - t0 : 0);
            if (lim_val == 0)
                rc = kf_err_set(err, KF_UNPROCESSABLE,
                                "the profile used the time budget (budget.seconds = %.0f); no time was left to "
                                "validate; raise budget.seconds",
                                bs_num(job->budget, "seconds"));
            else
                rc = ka_validate_once(&pb, NULL, 1, 3, lim_val, &val, err);
        }
        if (rc) {
            *retryable = rc == KF_INTERNAL;
            cJSON_Delete(out);
            cJSON_Delete(prof);
            cJSON_Delete(val);
            goto out;
        }
        {
            const cJSON *perr = prof ? cJSON_GetObjectItemCaseSensitive(prof, "error") : NULL;
            const cJSON *verr = val ? cJSON_GetObjectItemCaseSensitive(val, "error") : NULL;
            const cJSON *e = perr ? perr : verr;
            const cJSON *findings = prof ? cJSON_GetObjectItemCaseSensitive(prof, "findings") : NULL;
            it.iteration = 1;
            it.compiled = e == NULL;
            it.compile_cached = -1;
            it.compile_error = e ? cJSON_Duplicate(e, true) : NULL;
            it.source = bs_str(job->spec, "source");
            it.validation = val ? cJSON_Duplicate(val, true) : NULL;
            it.verdict = KA_VERDICT_NONE;   /* the evaluation's own "pass" says it */
            it.profile = prof && !perr ? cJSON_Duplicate(prof, true) : NULL;
            it.findings = findings ? cJSON_Duplicate(findings, true) : NULL;
            it.action = job->kind == KF_KIND_PROFILE ? "profile" : job->kind == KF_KIND_VALIDATE ? "validate" : "diagnose";
            snprintf(it.reason, sizeof(it.reason), "%s", e && bs_timed_out(e) ? "the evaluation reached its time limit"
                                                         : e ? "the kernel does not compile or run"
                                                             : "one evaluation: no tunables to search");
            it.has_latency = prof && !perr;
            it.latency_ns = it.has_latency ? bs_num(prof, "latency_ns") : 0;
            it.has_correct = val && !e;
            it.correct = it.has_correct && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass"));
            if (prof && !e && (!val || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass")))) {
                /* the one evaluated candidate is the best and the final one */
                cJSON *arts = NULL, *none = cJSON_CreateObject();
                rc = ka_artifacts(&pb, NULL, none, bs_eval_limit(job, bs_now() - t0), &arts, err);
                cJSON_Delete(none);
                if (rc) {
                    *retryable = rc == KF_INTERNAL;
                    cJSON_Delete(out);
                    ka_iter_release(&it);
                    cJSON_Delete(prof);
                    cJSON_Delete(val);
                    goto out;
                }
                it.artifacts = arts;
            }
            bs_progress(hooks, &it);
            ka_iter_release(&it);
            if (e && bs_timed_out(e)) {
                rc = kf_err_set(err, KF_UNPROCESSABLE,
                                "the %s stopped at its time limit of %u s (budget.seconds, or KFORGE_SIM_TIMEOUT_S "
                                "when lower): %s; raise budget.seconds or make the kernel faster",
                                perr ? "profile" : "validation", perr ? lim_prof : lim_val, bs_str(e, "message"));
            } else if (e) {
                rc = kf_err_set(err, KF_UNPROCESSABLE, "the kernel does not compile: %s", bs_str(e, "message"));
            } else if (val && bs_str(val, "ref_error")) {
                rc = kf_err_set(err, KF_UNPROCESSABLE, "the reference does not run: %s", bs_str(val, "ref_error"));
            } else {
                if (prof)
                    cJSON_AddItemToObject(out, "profile", cJSON_Duplicate(prof, true));
                if (val) {
                    cJSON_AddItemToObject(out, "validation", cJSON_Duplicate(val, true));
                    cJSON_AddBoolToObject(out, "correct", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass")));
                }
                if (prof) {
                    cJSON_AddNumberToObject(out, "latency_ns", bs_num(prof, "latency_ns"));
                    cJSON_AddNumberToObject(out, "fraction_of_bound",
                                            bs_num(prof, "latency_ns") > 0 ? bs_num(prof, "floor_ns") / bs_num(prof, "latency_ns") : 0);
                }
                bs_provenance(&pb, out);
                *result_json = cJSON_PrintUnformatted(out);
            }
        }
        cJSON_Delete(out);
        cJSON_Delete(prof);
        cJSON_Delete(val);
        goto out;
    }
    tun = cJSON_GetObjectItemCaseSensitive(job->spec, "tunables");
    {
        kf_err e2 = KF_ERR_INIT;
        if (ka_lib_meta_from_text(bs_str(job->spec, "source"), "the source", &meta, &e2) != KF_OK && e2.code != KF_NOT_FOUND) {
            rc = kf_err_set(err, KF_UNPROCESSABLE, "%s", e2.msg);
            goto out;
        }
    }
    rc = ka_space_from_tunables(tun, meta, &pb, &sp, err);
    if (rc) {
        rc = KF_UNPROCESSABLE;
        goto out;
    }
    rc = bs_tune(job, hooks, &pb, &sp, NULL, 0, result_json, retryable, err);
out:
    cJSON_Delete(meta);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    bs_rmdir(tmpl);
    return rc;
}

static kf_code sim_run(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                       char **result_json, bool *retryable, kf_err *err)
{
    (void)self;
    *result_json = NULL;
    *retryable = false;
    switch (job->kind) {
    case KF_KIND_GENERATE:
        return bs_generate(job, hooks, result_json, retryable, err);
    case KF_KIND_OPTIMIZE:
    case KF_KIND_PROFILE:
    case KF_KIND_VALIDATE:
        return bs_user(job, hooks, result_json, retryable, err);
    default:
        return kf_err_set(err, KF_UNPROCESSABLE, "the sim backend does not run %s jobs", kf_job_kind_name(job->kind));
    }
}

const kf_backend kf_backend_sim = {
    .name = "sim",
    .kinds = sim_kinds,
    .run = sim_run,
};
