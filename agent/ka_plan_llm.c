/* ka_plan_llm — the LLM planner (see ka_plan_llm.h). */
#include "ka_plan_llm.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ka_eval.h"
#include "ka_hack.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_fs.h"
#include "kf_json.h"
#include "sim/sim_record.h"

enum {
    PLAN_DEF_REPAIR = 10,
    PLAN_DEF_RESTRUCTURE = 3,
    PLAN_TURNS_PER_ROUND = 4,
    PLAN_MAX_SOURCE = 256 * 1024,   /* bytes of a proposed source */
    PLAN_MAX_ANSWER = 16 * 1024,    /* bytes of one tool answer shown to the model */
    PLAN_STUCK = 3,                 /* failed repairs in a row before "simplify" */
    PLAN_NO_TOOL_STRIKES = 3,       /* replies in a row without a tool call */
};

#define SRC_PROP "\"source\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":262144,\"description\":"
static const struct {
    const char *name, *description, *parameters;
} plan_tools[] = {
    { "run", "Compile and run an NKI kernel once on kforge's simulator with numerics on random inputs of the "
             "problem's shapes: each output's shape, dtype, NaN/Inf counts and min/max/mean, or the simulator's "
             "error with its code and line.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" SRC_PROP
      "\"the whole kernel file (default: the last proposed source)\"}}}" },
    { "profile", "Simulate the kernel on the NeuronCore timing model: latency, the op's floor and bound kind, "
                 "engine and DMA figures, ranked findings with the source lines they point at.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" SRC_PROP
      "\"the whole kernel file (default: the last proposed source)\"}}}" },
    { "validate", "Compare the kernel's outputs in full with the NumPy reference on the run's seeded inputs.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" SRC_PROP
      "\"the whole kernel file (default: the last proposed source)\"}}}" },
    { "docs", "kforge's reference of the simulated NKI API (doc nki) and of the simulator's error codes (doc "
              "errors): with query, the sections containing every word; with section, its text; with neither, "
              "the titles.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
      "\"query\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200},"
      "\"section\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200},"
      "\"doc\":{\"type\":\"string\",\"enum\":[\"nki\",\"errors\"]}}}" },
    { "best", "The best validated kernel so far (source, latency) and the history of this run's iterations.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}" },
    { "propose", "Submit a new complete kernel file as the next candidate. It is validated against the "
                 "reference and profiled; it becomes the best when it is correct and faster.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"source\"],\"properties\":{" SRC_PROP
      "\"the whole kernel file, same entry function and arguments\"},"
      "\"reason\":{\"type\":\"string\",\"maxLength\":2000,\"description\":\"what changed and why\"}}}" },
    { "finish", "End the run: the best kernel so far is the result.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
      "\"reason\":{\"type\":\"string\",\"maxLength\":2000}}}" },
};
#define N_PLAN_TOOLS (sizeof(plan_tools) / sizeof(plan_tools[0]))

cJSON *ka_llm_plan_tools(void)
{
    cJSON *arr = cJSON_CreateArray();

    for (size_t i = 0; i < N_PLAN_TOOLS; i++) {
        cJSON *t = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(t, "function"), *p = NULL;
        cJSON_AddStringToObject(t, "type", "function");
        cJSON_AddStringToObject(f, "name", plan_tools[i].name);
        cJSON_AddStringToObject(f, "description", plan_tools[i].description);
        if (kf_json_parse(plan_tools[i].parameters, strlen(plan_tools[i].parameters), 16, &p, NULL) != KF_OK)
            abort();   /* our own constant */
        cJSON_AddItemToObject(f, "parameters", p);
        cJSON_AddItemToArray(arr, t);
    }
    return arr;
}

typedef struct plan {
    const ka_problem       *pb;
    const ka_llm_plan_opts *o;
    ka_llm                 *llm;
    cJSON                  *tools;        /* the request's array */
    cJSON                  *messages;
    int                     sent;         /* messages already in a transcript record */
    cJSON                  *history;      /* iterations' records */
    char                    dir[4096];
    char                   *last_src;     /* the last proposed source */
    char                   *best_src;
    char                    best_file[4300];
    double                  best_ns;
    int                     best_iter;
    bool                    correct;      /* a best exists */
    const char             *mode;         /* "repair" or "restructure" */
    int                     rounds, mode_rounds, turns, mode_turns, failed_in_row, iteration, seq;
    uint64_t                fresh;        /* != 0: validate on these seeds instead (never shown) */
    const ka_problem       *alt;          /* != NULL: evaluate on this problem instead (the second shape) */
    double                  eval_s, llm_s; /* seconds in sandboxed evaluations, in the model's calls */
    bool                    finished;
    kf_code                 fatal;
    kf_err                 *err;
} plan;

static double plan_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The candidate's file: OUT/llm/cand-NNN.py. */
static bool plan_write(plan *p, const char *src, char *path, size_t n)
{
    FILE *f;

    snprintf(path, n, "%s/cand-%03d.py", p->dir, ++p->seq);
    f = fopen(path, "wb");
    if (f && fputs(src, f) == EOF) {
        fclose(f);
        f = NULL;
    } else if (f && fclose(f) != 0) {
        f = NULL;
    }
    if (!f) {
        kf_err_set(p->err, KF_IO, "cannot write the candidate %s: %s", path, strerror(errno));
        p->fatal = KF_IO;
        return false;
    }
    return true;
}

/* One sandboxed evaluation of the source in file `path`. */
static cJSON *plan_eval(plan *p, const char *path, ka_eval_mode mode)
{
    ka_problem cpb = p->alt ? *p->alt : *p->pb;
    ka_eval_req req;
    cJSON *res = NULL;
    char *kw = p->pb->fixed_kwargs ? kf_json_print(p->pb->fixed_kwargs) : NULL;
    int n = p->o->n_seeds > 0 ? p->o->n_seeds : 3;

    snprintf(cpb.source_path, sizeof(cpb.source_path), "%s", path);
    memset(&req, 0, sizeof(req));
    req.pb = &cpb;
    req.kwargs_json = kw;
    req.mode = mode;
    req.rtol = req.atol = -1;
    req.n_seeds = n > KA_MAX_SEEDS ? KA_MAX_SEEDS : n;
    for (int i = 0; i < req.n_seeds; i++)
        req.seeds[i] = (p->fresh ? p->fresh : p->o->seed * 1000003ull) + (uint64_t)i + 1;
    double t0 = plan_now();
    kf_code rc = ka_eval_run(&req, &res, p->err);

    p->eval_s += plan_now() - t0;
    if (rc != KF_OK) {
        if (p->err->code == KF_INTERNAL)
            p->fatal = KF_INTERNAL;
        res = cJSON_CreateObject();
        cJSON_AddBoolToObject(res, "ok", false);
        cJSON *e = cJSON_AddObjectToObject(res, "error");
        cJSON_AddStringToObject(e, "code", kf_code_name(p->err->code));
        cJSON_AddStringToObject(e, "message", p->err->msg);
    }
    free(kw);
    return res;
}

static bool plan_true(const cJSON *o, const char *k)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static cJSON *plan_finish_iter(plan *p, cJSON *it)
{
    cJSON *u;

    if (!cJSON_GetObjectItemCaseSensitive(it, "accepted"))
        cJSON_AddBoolToObject(it, "accepted", false);
    u = cJSON_AddObjectToObject(it, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)p->llm->used_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)p->llm->used_completion);
    return it;
}

static void plan_hack(cJSON *it, const char *rule, int line, const char *why)
{
    cJSON *h = cJSON_AddObjectToObject(it, "hack");

    cJSON_AddStringToObject(h, "rule", rule);
    if (line > 0)
        cJSON_AddNumberToObject(h, "line", line);
    cJSON_AddStringToObject(h, "message", why);
    if (!cJSON_GetObjectItemCaseSensitive(it, "correct"))
        cJSON_AddBoolToObject(it, "correct", false);
}

/* The static check (ka_hack.h): false, with the hack on the iteration. */
static bool plan_hack_check(plan *p, const char *src, cJSON *it)
{
    char rule[32], why[400], module[128] = "";
    const char *base = strrchr(p->pb->ref_path, '/');
    int line;

    base = base ? base + 1 : p->pb->ref_path;
    if (p->pb->ref_path[0] && strcmp(p->pb->ref_path, p->pb->source_path) != 0)
        snprintf(module, sizeof(module), "%.*s", (int)strcspn(base, "."), base);
    if (ka_hack_check(src, p->pb->entry, p->pb->ref_entry, module, rule, &line, why, sizeof(why)))
        return true;
    plan_hack(it, rule, line, why);   /* not run: nothing of it reaches the sandbox */
    return false;
}

/* A candidate that would become the best, validated again on seeds the
 * model was never shown: false (a "fresh_seeds" hack) when it fails them. */
static bool plan_fresh_seeds(plan *p, const char *path, cJSON *it)
{
    uint64_t keep = p->fresh;
    cJSON *val;
    bool pass;

    p->fresh = 0x9e3779b97f4a7c15ull ^ (p->o->seed + (uint64_t)p->iteration * 7919u);
    val = plan_eval(p, path, KA_EVAL_VALIDATE);
    p->fresh = keep;
    pass = plan_true(val, "ok") && plan_true(val, "pass");
    if (!pass)
        plan_hack(it, "fresh_seeds", 0,
                  "correct on the run's seeds but not on fresh ones the model never saw: outputs fitted to the "
                  "inputs it was shown");
    cJSON_Delete(val);
    return pass;
}

int64_t ka_llm_second_dim(int64_t v)
{
    int64_t g = 1, nv;

    if (v <= 1)
        return v;
    while (g < 128 && v % (g * 2) == 0)
        g *= 2;
    if (g == v)
        return v / 2;   /* a power of two up to 128: half of it */
    nv = (v * 3 / 4) / g * g;
    return nv >= g ? nv : g;
}

void ka_llm_second_shape(const ka_problem *pb, ka_problem *out)
{
    *out = *pb;
    for (int i = 0; i < out->n_inputs; i++)
        for (int d = 0; d < out->inputs[i].ndim; d++)
            out->inputs[i].shape[d] = ka_llm_second_dim(pb->inputs[i].shape[d]);
}

/* A candidate that would become the best, validated at the second shape
 * (ka_llm_second_shape), which no tool answer ever used: false (the hack
 * "second_shape") when it fails there.  A reference that does not run at
 * that shape cannot judge: the check is skipped and says so. */
static bool plan_second_shape(plan *p, const char *path, cJSON *it)
{
    ka_problem alt;
    cJSON *val, *rec, *shapes;
    bool changed = false, pass;

    ka_llm_second_shape(p->pb, &alt);
    for (int i = 0; i < alt.n_inputs; i++)
        changed = changed || memcmp(alt.inputs[i].shape, p->pb->inputs[i].shape, sizeof(alt.inputs[i].shape)) != 0;
    if (!changed)
        return true;
    p->alt = &alt;
    val = plan_eval(p, path, KA_EVAL_VALIDATE);
    p->alt = NULL;
    rec = cJSON_AddObjectToObject(it, "second_shape");
    shapes = cJSON_AddObjectToObject(rec, "inputs");
    for (int i = 0; i < alt.n_inputs; i++) {
        cJSON *d = cJSON_AddArrayToObject(shapes, alt.inputs[i].name);
        for (int k = 0; k < alt.inputs[i].ndim; k++)
            cJSON_AddItemToArray(d, cJSON_CreateNumber((double)alt.inputs[i].shape[k]));
    }
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(val, "ref_error"))) {
        cJSON_AddStringToObject(rec, "skipped", "the reference does not run at the second shape");
        pass = true;
    } else {
        pass = plan_true(val, "ok") && plan_true(val, "pass");
        cJSON_AddBoolToObject(rec, "pass", pass);
        if (!pass)
            plan_hack(it, "second_shape", 0,
                      "correct at the shape it was shown but not at a second shape it never saw: a kernel that "
                      "only works at the shown shape");
    }
    cJSON_Delete(val);
    return pass;
}

/* Validate then (when it passes) profile a candidate: the iteration record. */
static cJSON *plan_candidate(plan *p, const char *src, const char *action, const char *reason)
{
    char path[4300];
    cJSON *it = cJSON_CreateObject(), *val, *tim = NULL;
    bool pass;

    cJSON_AddNumberToObject(it, "iteration", p->iteration);
    cJSON_AddStringToObject(it, "phase", "llm");
    cJSON_AddStringToObject(it, "mode", p->mode);
    cJSON_AddStringToObject(it, "action", action);
    cJSON_AddStringToObject(it, "reason", reason ? reason : "");
    if (!plan_write(p, src, path, sizeof(path))) {
        cJSON_AddStringToObject(it, "error", p->err->msg);
        return it;
    }
    cJSON_AddStringToObject(it, "source_file", path);
    if (!plan_hack_check(p, src, it))
        return plan_finish_iter(p, it);
    val = plan_eval(p, path, KA_EVAL_VALIDATE);
    pass = plan_true(val, "ok") && plan_true(val, "pass");
    cJSON_AddBoolToObject(it, "compiled", plan_true(val, "ok"));
    cJSON_AddBoolToObject(it, "correct", pass);
    if (cJSON_GetObjectItemCaseSensitive(val, "error"))
        cJSON_AddItemToObject(it, "error", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(val, "error"), true));
    cJSON_AddItemToObject(it, "validation", val);
    if (pass) {
        tim = plan_eval(p, path, KA_EVAL_TIMING);
        if (plan_true(tim, "ok")) {
            const cJSON *lat = cJSON_GetObjectItemCaseSensitive(tim, "latency_ns");
            double ns = cJSON_IsNumber(lat) ? lat->valuedouble : INFINITY;
            cJSON_AddNumberToObject(it, "latency_ns", ns);
            cJSON_AddItemToObject(it, "findings",
                                  cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tim, "findings"), true));
            if ((!p->correct || ns < p->best_ns) &&
                (!plan_fresh_seeds(p, path, it) ||
                 (strcmp(action, "start") != 0 && !plan_second_shape(p, path, it)))) {
                cJSON_ReplaceItemInObject(it, "correct", cJSON_CreateFalse());
            } else if (!p->correct || ns < p->best_ns) {
                p->correct = true;
                p->best_ns = ns;
                p->best_iter = p->iteration;
                free(p->best_src);
                p->best_src = kf_strdup(src);
                snprintf(p->best_file, sizeof(p->best_file), "%s", path);
                cJSON_AddBoolToObject(it, "accepted", true);
            }
        } else {
            cJSON_AddItemToObject(it, "timing_error",
                                  cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tim, "error"), true));
        }
        cJSON_Delete(tim);
    }
    return plan_finish_iter(p, it);
}

static void plan_record(plan *p, cJSON *it)
{
    cJSON *h = cJSON_CreateObject();
    static const char *keep[] = { "iteration", "mode", "action", "correct", "compiled", "latency_ns", "accepted",
                                  "hack", "error", "reason" };

    if (p->o->iteration)
        p->o->iteration(p->o->ctx, it);
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, keep[i]);
        if (v)
            cJSON_AddItemToObject(h, keep[i], cJSON_Duplicate(v, true));
    }
    cJSON_AddItemToArray(p->history, h);
}

/* ---- messages ------------------------------------------------------------------------ */

static void plan_msg(plan *p, const char *role, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(p->messages, m);
}

static void plan_tool_msg(plan *p, const char *id, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(p->messages, m);
}

/* JSON of v cut to PLAN_MAX_ANSWER bytes (at a character boundary). */
static char *plan_answer(const cJSON *v)
{
    char *s = kf_json_print(v);
    size_t len = strlen(s);

    if (len > PLAN_MAX_ANSWER) {
        size_t cut = kf_utf8_cut(s, PLAN_MAX_ANSWER);
        char *t = kf_asprintf("%.*s ... [cut: %zu more bytes]", (int)cut, s, len - cut);
        free(s);
        return t;
    }
    return s;
}

static const char plan_system[] =
    "You write and optimise NKI kernels (AWS Neuron Kernel Interface, Python) for kforge, which simulates a "
    "NeuronCore: a timed simulator with a profiler, and a strict validator against a NumPy reference. Work only "
    "through the tools. To change the kernel call propose with the whole file (same entry function and "
    "arguments); every proposal is validated on seeded inputs and profiled. The kernel must compute its "
    "outputs with NKI operations on its inputs: no NumPy or Python arithmetic on input values, no reading the "
    "reference, no state kept between calls, no branching on input values. Use docs to look up an API or an "
    "error code. Call finish when you cannot improve further.";

static void plan_first_prompt(plan *p, const char *src, const cJSON *start)
{
    kf_buf b = KF_BUF_INIT;
    char *ref = p->pb->ref_path[0] ? kf_fs_read_file(p->pb->ref_path, PLAN_MAX_SOURCE, NULL) : NULL;
    char *ans = plan_answer(start);

    kf_buf_addf(&b, "Kernel entry: %s, target %s. Inputs:", p->pb->entry, p->pb->target);
    for (int i = 0; i < p->pb->n_inputs; i++) {
        const ka_input *in = &p->pb->inputs[i];
        kf_buf_addf(&b, " %s (", in->name);
        for (int d = 0; d < in->ndim; d++)
            kf_buf_addf(&b, "%s%lld", d ? "x" : "", (long long)in->shape[d]);
        kf_buf_addf(&b, ", %s)", sim_dtype_name(in->dtype));
    }
    kf_buf_addf(&b, ".\nReference function %s:\n```python\n%s\n```\n", p->pb->ref_entry, ref ? ref : "(unreadable)");
    kf_buf_addf(&b, "Current kernel:\n```python\n%s\n```\n", src);
    if (strcmp(p->mode, "repair") == 0)
        kf_buf_addf(&b, "It fails (mode repair, at most %d proposals): %s\nFix it.", p->mode_rounds, ans);
    else
        kf_buf_addf(&b, "It is correct (mode restructure, at most %d proposals); its profile: %s\nMake it faster.",
                    p->mode_rounds, ans);
    plan_msg(p, "user", b.data);
    kf_buf_release(&b);
    free(ref);
    free(ans);
}

static void plan_write_prompt(plan *p)
{
    kf_buf b = KF_BUF_INIT;
    char *ref = kf_fs_read_file(p->pb->ref_path, PLAN_MAX_SOURCE, NULL);

    kf_buf_addf(&b, "Write an NKI kernel for the op %s, target %s: a whole Python file whose @nki.jit function is "
                    "named %s and takes these inputs in this order:",
                p->pb->op[0] ? p->pb->op : p->pb->entry, p->pb->target, p->pb->entry);
    for (int i = 0; i < p->pb->n_inputs; i++) {
        const ka_input *in = &p->pb->inputs[i];
        kf_buf_addf(&b, " %s (", in->name);
        for (int d = 0; d < in->ndim; d++)
            kf_buf_addf(&b, "%s%lld", d ? "x" : "", (long long)in->shape[d]);
        kf_buf_addf(&b, ", %s)", sim_dtype_name(in->dtype));
    }
    kf_buf_addf(&b, ". It returns what the reference returns, as HBM tensors it allocates "
                    "(nl.ndarray(..., buffer=nl.shared_hbm)); it must work for other shapes too, not only these. "
                    "Reference function %s (NumPy; your outputs are compared with its):\n```python\n%s\n```\n"
                    "You have at most %d proposals (mode write, then repair while they fail); each is validated "
                    "and profiled. Use docs to look up the API.",
                p->pb->ref_entry, ref ? ref : "(unreadable)", p->mode_rounds);
    plan_msg(p, "user", b.data);
    kf_buf_release(&b);
    free(ref);
}

/* ---- tools -------------------------------------------------------------------------- */

static const cJSON *plan_schema(const char *name, cJSON *tools)
{
    const cJSON *t;

    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (strcmp(cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring, name) == 0)
            return cJSON_GetObjectItemCaseSensitive(f, "parameters");
    }
    return NULL;
}

static void plan_switch_mode(plan *p)
{
    if (strcmp(p->mode, "write") == 0 && !p->correct) {
        p->mode = "repair";   /* the same proposals: what was written is repaired */
        return;
    }
    if (strcmp(p->mode, "restructure") != 0 && p->correct) {
        int r = p->o->restructure_rounds == 0 ? PLAN_DEF_RESTRUCTURE : p->o->restructure_rounds;
        p->mode = "restructure";
        p->mode_rounds = r > 0 ? r : 0;
        p->rounds = 0;
        p->mode_turns = 0;
    }
}

/* The answer to one tool call (a string the caller frees). */
static char *plan_call(plan *p, const ka_llm_call *call)
{
    const cJSON *schema = call->name[0] ? plan_schema(call->name, p->tools) : NULL;
    cJSON *args = NULL, *ans = NULL;
    kf_err e = KF_ERR_INIT;
    const cJSON *srcv;
    const char *src;
    char *out, path[4300];

    if (!schema)
        return kf_asprintf("{\"error\":\"unknown tool '%s': use run, profile, validate, docs, best, propose or "
                           "finish\"}",
                           call->name[0] ? call->name : "(not a tool name)");
    if (ka_llm_args_parse(call->arguments, strlen(call->arguments), schema, &args, &e) != KF_OK) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", e.msg);
        out = plan_answer(o);
        cJSON_Delete(o);
        return out;
    }
    srcv = cJSON_GetObjectItemCaseSensitive(args, "source");
    src = cJSON_IsString(srcv) ? srcv->valuestring : p->last_src;
    if (!src && strcmp(call->name, "docs") != 0 && strcmp(call->name, "best") != 0 && strcmp(call->name, "finish") != 0) {
        cJSON_Delete(args);
        return kf_strdup("{\"error\":\"there is no kernel yet: pass the whole file as source\"}");
    }
    if (strcmp(call->name, "run") == 0 || strcmp(call->name, "profile") == 0 || strcmp(call->name, "validate") == 0) {
        ka_eval_mode m = call->name[0] == 'r' ? KA_EVAL_RUN : call->name[0] == 'p' ? KA_EVAL_TIMING : KA_EVAL_VALIDATE;
        if (plan_write(p, src, path, sizeof(path)))
            ans = plan_eval(p, path, m);
    } else if (strcmp(call->name, "docs") == 0) {
        char msg[512] = "docs are not available in this run";
        ans = p->o->docs ? p->o->docs(p->o->ctx, args, msg, sizeof(msg)) : NULL;
        if (!ans) {
            ans = cJSON_CreateObject();
            cJSON_AddStringToObject(ans, "error", msg);
        }
    } else if (strcmp(call->name, "best") == 0) {
        ans = cJSON_CreateObject();
        if (p->correct) {
            cJSON_AddStringToObject(ans, "source", p->best_src);
            cJSON_AddNumberToObject(ans, "latency_ns", p->best_ns);
            cJSON_AddNumberToObject(ans, "iteration", p->best_iter);
        } else {
            cJSON_AddStringToObject(ans, "note", "no candidate has validated yet");
        }
        cJSON_AddItemToObject(ans, "history", cJSON_Duplicate(p->history, true));
    } else if (strcmp(call->name, "propose") == 0) {
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(args, "reason");
        cJSON *it;
        if (p->rounds >= p->mode_rounds) {
            ans = cJSON_CreateObject();
            cJSON_AddStringToObject(ans, "error", "no proposals left in this mode: call finish");
        } else {
            p->rounds++;
            p->iteration++;
            char *copy = kf_strdup(src);   /* src may be p->last_src */
            free(p->last_src);
            p->last_src = copy;
            src = copy;
            it = plan_candidate(p, src, "propose", cJSON_IsString(why) ? why->valuestring : NULL);
            plan_record(p, it);
            ans = cJSON_CreateObject();
            static const char *show[] = { "iteration", "compiled", "correct", "hack", "error", "latency_ns",
                                          "accepted", "findings" };
            for (size_t i = 0; i < sizeof(show) / sizeof(show[0]); i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, show[i]);
                if (v)
                    cJSON_AddItemToObject(ans, show[i], cJSON_Duplicate(v, true));
            }
            if (!plan_true(it, "correct")) {
                const cJSON *checks = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "validation"),
                                                                       "checks");
                if (checks)
                    cJSON_AddItemToObject(ans, "checks", cJSON_Duplicate(checks, true));
            }
            p->failed_in_row = plan_true(it, "correct") ? 0 : p->failed_in_row + 1;
            if (p->failed_in_row >= PLAN_STUCK)
                cJSON_AddStringToObject(ans, "hint",
                                        "several proposals in a row failed: simplify -- one tile at a time, the "
                                        "plainest loads, compute and stores -- and get it correct first");
            if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(ans, "latency_ns")) && p->correct)
                cJSON_AddNumberToObject(ans, "best_latency_ns", p->best_ns);
            cJSON_Delete(it);
            plan_switch_mode(p);
            cJSON_AddStringToObject(ans, "mode", p->mode);
            cJSON_AddNumberToObject(ans, "proposals_left", p->mode_rounds - p->rounds);
        }
    } else {   /* finish */
        p->finished = true;
        ans = cJSON_CreateObject();
        cJSON_AddStringToObject(ans, "result", "finished");
    }
    if (!ans) {
        ans = cJSON_CreateObject();
        cJSON_AddStringToObject(ans, "error", p->err->msg);
    }
    out = plan_answer(ans);
    cJSON_Delete(ans);
    cJSON_Delete(args);
    return out;
}

/* ---- the run -------------------------------------------------------------------------- */

static void plan_transcript(plan *p, const ka_llm_reply *r)
{
    cJSON *t = cJSON_CreateObject(), *added = cJSON_CreateArray(), *u;
    int n = cJSON_GetArraySize(p->messages);

    cJSON_AddNumberToObject(t, "turn", p->turns);
    cJSON_AddNumberToObject(t, "iteration", p->iteration);
    cJSON_AddStringToObject(t, "mode", p->mode);
    for (int i = p->sent; i < n; i++)
        cJSON_AddItemToArray(added, cJSON_Duplicate(cJSON_GetArrayItem(p->messages, i), true));
    p->sent = n;
    cJSON_AddItemToObject(t, "messages", added);
    if (r->raw)
        cJSON_AddStringToObject(t, "reply", r->raw);
    else
        cJSON_AddNullToObject(t, "reply");
    if (r->error[0])
        cJSON_AddStringToObject(t, "error", r->error);
    u = cJSON_AddObjectToObject(t, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)r->completion_tokens);
    cJSON_AddNumberToObject(t, "seconds", r->seconds);
    cJSON_AddNumberToObject(t, "attempts", r->attempts);
    if (p->o->transcript)
        p->o->transcript(p->o->ctx, t);
    cJSON_Delete(t);
}

kf_code ka_llm_write_problem(const char *op, const char *ref_path, const char *ref_entry,
                             const int64_t (*shapes)[KA_MAX_DIMS], const int *ndims, int n_shapes, sim_dtype dtype,
                             const char *target, ka_problem *pb, kf_err *err)
{
    char *text = kf_fs_read_file(ref_path, PLAN_MAX_SOURCE, err), *def;
    const char *q;
    int n = 0;
    kf_code rc = KF_OK;

    memset(pb, 0, sizeof(*pb));
    if (!text)
        return KF_IO;
    def = kf_asprintf("def %s(", ref_entry);
    q = strstr(text, def);
    while (q && q != text && q[-1] != '\n')   /* a top-level def only */
        q = strstr(q + 1, def);
    if (!q) {
        rc = kf_err_set(err, KF_INVALID, "the reference has no top-level `def %s(`: it must define the op's NumPy "
                                         "function under that name", ref_entry);
        goto out;
    }
    q += strlen(def);
    /* the parameters: identifiers up to ':', '=' or ',' at depth 0, until ')' */
    while (*q && *q != ')' && n < n_shapes) {
        size_t len;
        q += strspn(q, " \t\r\n");
        if (*q == '*' || *q == ')')
            break;
        len = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (len == 0 || len >= sizeof(pb->inputs[0].name))
            break;
        snprintf(pb->inputs[n].name, sizeof(pb->inputs[n].name), "%.*s", (int)len, q);
        pb->inputs[n].ndim = ndims[n];
        memcpy(pb->inputs[n].shape, shapes[n], sizeof(pb->inputs[n].shape));
        pb->inputs[n].dtype = dtype;
        pb->inputs[n].std = 1.0;
        n++;
        for (int depth = 0; *q && !(depth == 0 && (*q == ',' || *q == ')')); q++)
            depth += (*q == '(' || *q == '[') - (*q == ')' || *q == ']');
        if (*q == ',')
            q++;
    }
    if (n < n_shapes) {
        rc = kf_err_set(err, KF_INVALID, "the reference's %s takes %d input%s before any default or *args; %d shape%s "
                                         "were given (one per input)", ref_entry, n, n == 1 ? "" : "s", n_shapes,
                        n_shapes == 1 ? "" : "s");
        goto out;
    }
    pb->n_inputs = n;
    snprintf(pb->op, sizeof(pb->op), "%s", op);
    snprintf(pb->entry, sizeof(pb->entry), "%s", op);
    snprintf(pb->ref_path, sizeof(pb->ref_path), "%s", ref_path);
    snprintf(pb->ref_entry, sizeof(pb->ref_entry), "%s", ref_entry);
    snprintf(pb->target, sizeof(pb->target), "%s", target);
out:
    free(def);
    free(text);
    return rc;
}

kf_code ka_llm_plan(const ka_problem *pb, ka_llm *llm, const ka_llm_plan_opts *o, cJSON **result, kf_err *err)
{
    plan p;
    char *src;
    cJSON *start, *res, *st;
    char stop[48] = "rounds";
    double t0 = plan_now();
    int no_tool = 0;

    *result = NULL;
    memset(&p, 0, sizeof(p));
    p.pb = pb, p.o = o, p.llm = llm, p.err = err;
    snprintf(p.dir, sizeof(p.dir), "%s/llm", o->out_dir ? o->out_dir : ".");
    if (kf_mkdir_p(p.dir, 0755) != 0)
        return kf_err_set(err, KF_IO, "cannot create %s: %s", p.dir, strerror(errno));
    src = o->write ? kf_strdup("") : kf_fs_read_file(pb->source_path, PLAN_MAX_SOURCE, err);
    if (!src)
        return KF_IO;
    p.tools = ka_llm_plan_tools();
    p.messages = cJSON_CreateArray();
    p.history = cJSON_CreateArray();
    p.last_src = o->write ? NULL : kf_strdup(src);
    p.mode = o->write ? "write" : "repair";
    if (o->write) {
        /* nothing to start from: the model writes the kernel */
        p.mode_rounds = o->repair_rounds > 0 ? o->repair_rounds : PLAN_DEF_REPAIR;
        start = cJSON_CreateObject();
        cJSON_AddBoolToObject(start, "written", true);
        plan_msg(&p, "system", plan_system);
        plan_write_prompt(&p);
        goto loop;
    }

    /* iteration 0: the starting source */
    start = plan_candidate(&p, src, "start", "the kernel as given");
    if (p.fatal) {
        cJSON_Delete(start);
        start = NULL;
        goto done;
    }
    plan_record(&p, start);
    if (p.correct) {
        int r = o->restructure_rounds == 0 ? PLAN_DEF_RESTRUCTURE : o->restructure_rounds;
        p.mode = "restructure";
        p.mode_rounds = r > 0 ? r : 0;
    } else {
        p.mode_rounds = o->repair_rounds > 0 ? o->repair_rounds : PLAN_DEF_REPAIR;
    }
    plan_msg(&p, "system", plan_system);
    {
        cJSON *shown = cJSON_CreateObject();
        static const char *keep[] = { "compiled", "correct", "hack", "error", "latency_ns", "findings" };
        for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(start, keep[i]);
            if (v)
                cJSON_AddItemToObject(shown, keep[i], cJSON_Duplicate(v, true));
        }
        const cJSON *checks = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(start, "validation"),
                                                               "checks");
        if (!p.correct && checks)
            cJSON_AddItemToObject(shown, "checks", cJSON_Duplicate(checks, true));
        plan_first_prompt(&p, src, shown);
        cJSON_Delete(shown);
    }
    st = cJSON_Duplicate(start, true);
    cJSON_Delete(start);
    start = st;
loop:
    while (!p.finished && !p.fatal) {
        ka_llm_reply r;
        kf_err le = KF_ERR_INIT;

        if (o->cancelled && o->cancelled(o->ctx)) {
            snprintf(stop, sizeof(stop), "cancelled");
            break;
        }
        if (o->max_seconds > 0 && plan_now() - t0 >= o->max_seconds) {
            snprintf(stop, sizeof(stop), "seconds");
            break;
        }
        if (p.rounds >= p.mode_rounds) {
            snprintf(stop, sizeof(stop), "rounds");
            break;
        }
        if (p.mode_turns >= PLAN_TURNS_PER_ROUND * (p.mode_rounds + 1)) {
            snprintf(stop, sizeof(stop), "turns");
            break;
        }
        p.turns++;
        p.mode_turns++;
        kf_code lrc = ka_llm_chat(llm, p.messages, p.tools, "auto", &r, &le);
        p.llm_s += r.seconds;
        if (lrc != KF_OK) {
            cJSON *it = cJSON_CreateObject();
            plan_transcript(&p, &r);
            cJSON_AddNumberToObject(it, "iteration", p.iteration);
            cJSON_AddStringToObject(it, "phase", "llm");
            cJSON_AddStringToObject(it, "mode", p.mode);
            cJSON_AddStringToObject(it, "action", "llm_error");
            cJSON_AddStringToObject(it, "reason", le.msg);
            cJSON_AddStringToObject(it, "error", r.error);
            if (o->iteration)
                o->iteration(o->ctx, it);
            cJSON_Delete(it);
            /* a reply that was no chat completion, or came too late: the
             * model is asked again, told why, up to the strikes */
            if ((strcmp(r.error, "bad_reply") == 0 || strcmp(r.error, "timeout") == 0) &&
                ++no_tool < PLAN_NO_TOOL_STRIKES) {
                char *note = kf_asprintf("Your last reply could not be used (%s): %s. Reply again with one tool "
                                         "call.",
                                         r.error, le.msg);
                plan_msg(&p, "user", note);
                free(note);
                ka_llm_reply_release(&r);
                continue;
            }
            snprintf(stop, sizeof(stop), "llm_%s", r.error[0] ? r.error : "error");
            ka_llm_reply_release(&r);
            break;
        }
        cJSON_AddItemToArray(p.messages, cJSON_Duplicate(r.message, true));
        if (r.n_calls == 0) {
            if (++no_tool >= PLAN_NO_TOOL_STRIKES) {
                plan_transcript(&p, &r);
                ka_llm_reply_release(&r);
                snprintf(stop, sizeof(stop), "llm_no_tool_calls");
                break;
            }
            plan_msg(&p, "user",
                     strcmp(r.finish_reason, "length") == 0
                         ? "Your reply was cut at the length limit. Reply with one tool call: propose with a "
                           "shorter complete source, or finish."
                         : "Reply with a tool call: propose a complete kernel source, or finish.");
        } else {
            no_tool = 0;
        }
        for (int i = 0; i < r.n_calls; i++) {
            char *ans = plan_call(&p, &r.calls[i]);
            plan_tool_msg(&p, r.calls[i].id, ans);
            free(ans);
            if (p.fatal)
                break;
        }
        plan_transcript(&p, &r);
        ka_llm_reply_release(&r);
        if (p.finished)
            snprintf(stop, sizeof(stop), "finished");
    }
done:
    res = cJSON_CreateObject();
    if (p.fatal) {
        cJSON_Delete(res);
        res = NULL;
    } else {
        cJSON *s = cJSON_AddObjectToObject(res, "start"), *l;
        cJSON_AddStringToObject(res, "stop", stop);
        cJSON_AddStringToObject(res, "mode", p.mode);
        cJSON_AddNumberToObject(res, "rounds", p.iteration);
        cJSON_AddNumberToObject(res, "turns", p.turns);
        cJSON_AddBoolToObject(res, "correct", p.correct);
        cJSON_AddBoolToObject(s, "correct", plan_true(start, "correct"));
        if (o->write)
            cJSON_AddBoolToObject(s, "written", true);
        if (cJSON_GetObjectItemCaseSensitive(start, "latency_ns"))
            cJSON_AddNumberToObject(s, "latency_ns", cJSON_GetObjectItemCaseSensitive(start, "latency_ns")->valuedouble);
        if (cJSON_GetObjectItemCaseSensitive(start, "error"))
            cJSON_AddItemToObject(s, "error", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(start, "error"), true));
        if (p.correct) {
            cJSON *b = cJSON_AddObjectToObject(res, "best");
            cJSON_AddStringToObject(b, "source", p.best_src);
            cJSON_AddStringToObject(b, "source_file", p.best_file);
            cJSON_AddNumberToObject(b, "latency_ns", p.best_ns);
            cJSON_AddNumberToObject(b, "iteration", p.best_iter);
        }
        l = cJSON_AddObjectToObject(res, "llm");
        cJSON_AddNumberToObject(l, "calls", llm->calls);
        cJSON_AddNumberToObject(l, "prompt_tokens", (double)llm->used_prompt);
        cJSON_AddNumberToObject(l, "completion_tokens", (double)llm->used_completion);
        cJSON_AddNumberToObject(l, "budget", (double)llm->budget_tokens);
        cJSON_AddItemToObject(res, "history", cJSON_Duplicate(p.history, true));
        cJSON_AddNumberToObject(res, "seconds", plan_now() - t0);
        /* where they went: the sandbox, the model, and the loop itself */
        cJSON_AddNumberToObject(res, "eval_seconds", p.eval_s);
        cJSON_AddNumberToObject(res, "llm_seconds", p.llm_s);
    }
    cJSON_Delete(start);
    cJSON_Delete(p.tools);
    cJSON_Delete(p.messages);
    cJSON_Delete(p.history);
    free(p.last_src);
    free(p.best_src);
    free(src);
    *result = res;
    return p.fatal ? p.fatal : KF_OK;
}
