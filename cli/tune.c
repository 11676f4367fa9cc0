/* cli_tune — `kforge tune` (see cli_tune.h). */
#include "cli_tune.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_job.h"
#include "kf_json.h"
#include "kf_num.h"
#include "agent/ka_eval.h"
#include "agent/ka_lib.h"
#include "agent/ka_llm.h"
#include "agent/ka_loop.h"
#include "agent/ka_plan_llm.h"
#include "cli/cli_mcp.h"
#include "sim/sim_input.h"

enum { TUNE_OK = 0, TUNE_NO_KERNEL = 1, TUNE_USAGE = 2 };

static void tune_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge tune OP --shape DIMS [--shape DIMS ...] [options]\n"
            "       kforge tune KERNEL.py --entry NAME --reference REF.py --input NAME=shape:DIMS:DTYPE ...\n"
            "                   [--tunables JSON] [options]\n"
            "       kforge tune --list\n"
            "\n"
            "Tune a kernel locally, with no service: the same loop the worker's sim backend runs\n"
            "(compile -> validate -> profile -> diagnose -> plan -> record).  Candidates are explored\n"
            "timing-only on the simulator's deterministic timing model; every candidate that would\n"
            "become the best is first validated against the NumPy reference on the run's seeded inputs.\n"
            "It says on stderr what it is doing from its first second (binding, the first simulation,\n"
            "each validation on full-size inputs), then one progress line per iteration.\n"
            "\n"
            "Library op (kforge's kernels/, see --list):\n"
            "  OP                    add, softmax, rmsnorm, layernorm, matmul, transpose2d, swiglu,\n"
            "                        flash_attention, avgpool2d, depthwise_conv2d\n"
            "  --shape DIMS          one per input in order (4096x8192); fewer when the first shapes\n"
            "                        fix every dim (softmax, rmsnorm: the first is enough)\n"
            "  --dtype T             bf16 (default), fp32, fp16\n"
            "User kernel:\n"
            "  KERNEL.py             NKI source (current or legacy API)\n"
            "  --entry NAME          kernel function (required)\n"
            "  --reference REF.py    NumPy reference (required to validate)\n"
            "  --ref-entry NAME      reference function (default: the entry's name)\n"
            "  --input SPEC          NAME=shape:DIMS:DTYPE[:std=S], one per kernel argument, in order\n"
            "  --tunables JSON       {\"NAME\": [values...]}: keyword args to tune; a KFORGE = {...}\n"
            "                        block in the kernel file adds defaults, findings and constraints\n"
            "  --kwargs JSON         fixed keyword args\n"
            "Common:\n"
            "  --target T            trn1, inf2, trn2 (default), trn3\n"
            "  --planner P           guided (default: profile-guided), exhaustive, random, or llm (a kernel\n"
            "                        file: a language model repairs it, then restructures it from its\n"
            "                        findings, then the guided planner tunes its tunables; docs/llm.md)\n"
            "LLM planner (KFORGE_LLM_URL, KFORGE_LLM_MODEL, KFORGE_LLM_API_KEY_FILE):\n"
            "  --llm-rounds N        repair proposals at most, 1..10 (default 10)\n"
            "  --llm-restructure N   restructure proposals at most, 0..50 (default 3)\n"
            "  --llm-tokens N        token budget of the model's calls, prompt + completion (default none)\n"
            "  --llm-replay FILE     replay a transcript.jsonl instead of asking a model (no endpoint)\n"
            "  --op NAME             with --planner llm, no kernel file: the model writes NAME from\n"
            "                        --reference (its function NAME, or --ref-entry, taking the inputs in\n"
            "                        order) at one --shape per input and --dtype (write mode)\n"
            "  --iterations N        iteration budget, 1..100000 (default 40)\n"
            "  --seconds S           time budget, up to 604800 (default none)\n"
            "  --patience K          stop after K iterations without improvement (default 8; 0 = never)\n"
            "  --goal-fraction F     stop once the best reaches F of the bound (0..1)\n"
            "  --goal-latency-us X   stop once the best runs in X us or less\n"
            "  --seeds N             validation input sets per check, 1..8 (default 3)\n"
            "  --seed N              seed of the validation inputs and the random planner (default 1)\n"
            "  --jobs N              sandboxed evaluations at once, 1..64 (default: the CPUs this process\n"
            "                        may run on): a validation's seeds side by side, and the timing-only\n"
            "                        evaluations the planner asks for next, taken in the serial order\n"
            "                        (same iterations, same best as --jobs 1, which runs one at a time)\n"
            "  --memory-mib M        what those concurrent evaluations may hold together, 64..1048576\n"
            "                        (default 512): the concurrency is M over the largest resident set\n"
            "                        an evaluation of the same kind had in this run (the first runs alone)\n"
            "  --output-dir DIR      where kernel.py, report.md, result.json and iterations.jsonl go\n"
            "                        (default kforge-tune)\n"
            "  --cache DIR           keep timing-only evaluations in DIR and reuse them in later runs\n"
            "                        (default KFORGE_CACHE_DIR; unset: memory only, this run)\n"
            "  --json                print the result JSON on stdout\n"
            "  --quiet               no progress lines\n"
            "\n"
            "Exit status: 0 a correct kernel was found, 1 none passed validation, 2 usage or job error.\n");
}

/* Split s in place at each `sep` into at most `max` parts: the count, or -1
 * when there are more parts or one is empty ("a::b" is a mistake, not "a:b"). */
static int tune_split(char *s, const char *seps, char **parts, int max)
{
    int n = 0;

    for (;;) {
        size_t len = strcspn(s, seps);
        if (len == 0 || n == max)
            return -1;
        parts[n++] = s;
        if (!s[len])
            return n;
        s[len] = '\0';
        s += len + 1;
    }
}

/* DIMS as 4096x8192 (or 4096,8192): each a whole number 1..KF_JOB_MAX_DIM. */
static int tune_parse_dims(const char *s, int64_t *dims, int *nd)
{
    char buf[256], *parts[KA_MAX_DIMS];
    int n;

    *nd = 0;
    if (strlen(s) >= sizeof(buf))
        return -1;
    memcpy(buf, s, strlen(s) + 1);
    n = tune_split(buf, "xX,", parts, KA_MAX_DIMS);
    for (int i = 0; i < n; i++) {
        long v;
        if (kf_num_long(parts[i], 1, KF_JOB_MAX_DIM, &v, NULL) != KF_OK)
            return -1;
        dims[i] = v;
    }
    *nd = n > 0 ? n : 0;
    return n > 0 ? 0 : -1;
}

/* A numeric flag's value, or a message naming the flag and what it takes. */
static bool tune_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    kf_err e = KF_ERR_INIT;

    if (kf_num_long(s, lo, hi, out, &e) == KF_OK)
        return true;
    fprintf(stderr, "kforge tune: --%s: %s\n", flag, e.msg);
    return false;
}

static bool tune_double(const char *flag, const char *s, double lo, double hi, double *out)
{
    kf_err e = KF_ERR_INIT;

    if (kf_num_double(s, lo, hi, out, &e) == KF_OK)
        return true;
    fprintf(stderr, "kforge tune: --%s: %s\n", flag, e.msg);
    return false;
}

/* NAME=shape:DIMS:DTYPE[:std=S] */
static int tune_parse_input(const char *spec, ka_input *in)
{
    const char *eq = strchr(spec, '=');
    char buf[256], *parts[4] = { NULL };
    int np = 0, dt;

    memset(in, 0, sizeof(*in));
    in->std = 1.0;
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof(in->name) || strncmp(eq + 1, "shape:", 6) != 0)
        return -1;
    memcpy(in->name, spec, (size_t)(eq - spec));
    if (strlen(eq + 7) >= sizeof(buf))
        return -1;
    memcpy(buf, eq + 7, strlen(eq + 7) + 1);
    np = tune_split(buf, ":", parts, 4);
    if (np < 2 || tune_parse_dims(parts[0], in->shape, &in->ndim) != 0)
        return -1;
    dt = sim_input_dtype(parts[1]);
    if (dt < 0)
        return -1;
    in->dtype = (sim_dtype)dt;
    for (int i = 2; i < np; i++) {
        if (strncmp(parts[i], "std=", 4) != 0 || kf_num_double(parts[i] + 4, 0, 1e6, &in->std, NULL) != KF_OK)
            return -1;
    }
    return 0;
}

typedef struct tune_ctx {
    bool  quiet;
    int   n;
    FILE *jsonl;
    FILE *transcript;
} tune_ctx;

/* The LLM planner's iterations: one line of iterations.jsonl and of progress. */
static void tune_llm_iteration(void *vctx, const cJSON *it)
{
    tune_ctx *c = vctx;
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(it, "latency_ns");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(it, "error");
    const cJSON *msg = cJSON_IsObject(err) ? cJSON_GetObjectItemCaseSensitive(err, "message") : err;
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(it, "reason");

    if (c->jsonl) {
        char *txt = kf_json_print(it);
        fprintf(c->jsonl, "%s\n", txt);
        free(txt);
    }
    if (c->quiet)
        return;
    fprintf(stderr, "[llm %2d] %-11s %-8s %s%s%9.1f us  %s\n      %.300s\n",
            cJSON_GetObjectItemCaseSensitive(it, "iteration")->valueint,
            cJSON_GetObjectItemCaseSensitive(it, "mode")->valuestring,
            cJSON_GetObjectItemCaseSensitive(it, "action")->valuestring,
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "correct")) ? "correct" : "wrong  ",
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "accepted")) ? " best" : "     ",
            cJSON_IsNumber(lat) ? lat->valuedouble / 1e3 : 0, cJSON_IsString(msg) ? msg->valuestring : "",
            cJSON_IsString(why) ? why->valuestring : "");
}

static void tune_llm_transcript(void *vctx, const cJSON *turn)
{
    tune_ctx *c = vctx;

    if (c->transcript) {
        char *txt = kf_json_print(turn);
        fprintf(c->transcript, "%s\n", txt);
        free(txt);
        fflush(c->transcript);
    }
}

/* The docs tool: kforge mcp's, through its core (one tools/call). */
static cJSON *tune_llm_docs(void *vctx, const cJSON *args, char *msg, size_t n)
{
    cli_mcp s;
    cJSON *req = cJSON_CreateObject(), *params, *ans = NULL, *out = NULL;
    const cJSON *res, *sc;
    char *line, *reply;

    (void)vctx;
    cli_mcp_init(&s);
    s.initialized = true;
    cJSON_AddStringToObject(req, "jsonrpc", "2.0");
    cJSON_AddNumberToObject(req, "id", 1);
    cJSON_AddStringToObject(req, "method", "tools/call");
    params = cJSON_AddObjectToObject(req, "params");
    cJSON_AddStringToObject(params, "name", "docs");
    cJSON_AddItemToObject(params, "arguments", cJSON_Duplicate(args, true));
    line = kf_json_print(req);
    reply = cli_mcp_handle(&s, line, strlen(line));
    if (reply && kf_json_parse(reply, strlen(reply), 64, &ans, NULL) == KF_OK) {
        res = cJSON_GetObjectItemCaseSensitive(ans, "result");
        sc = cJSON_GetObjectItemCaseSensitive(res, "structuredContent");
        if (sc) {
            out = cJSON_Duplicate(sc, true);
        } else {
            const cJSON *item = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "content"), 0);
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "text");
            snprintf(msg, n, "%s", cJSON_IsString(text) ? text->valuestring : "the docs tool failed");
        }
    } else {
        snprintf(msg, n, "the docs tool did not answer");
    }
    cJSON_Delete(ans);
    cJSON_Delete(req);
    free(line);
    free(reply);
    return out;
}

static void tune_progress(void *vctx, const ka_iter *it)
{
    tune_ctx *c = vctx;
    const cJSON *v;
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(it->profile, "floor_ns");
    char params[512] = "";
    size_t o = 0;

    c->n++;
    if (c->jsonl) {
        char *txt = ka_iter_json(it);   /* the --jsonl file is this iteration's one edge */
        fprintf(c->jsonl, "%s\n", txt ? txt : "{}");
        free(txt);
    }
    if (c->quiet)
        return;
    cJSON_ArrayForEach(v, it->params)
    {
        char *val = cJSON_PrintUnformatted(v);
        if (o + 8 < sizeof(params))
            o += (size_t)snprintf(params + o, sizeof(params) - o, "%s%s=%s", o ? " " : "", v->string, val);
        free(val);
    }
    fprintf(stderr, "[%3d] %-8s %9.1f us  %4.2f of bound  %5.1f s  %s\n      %s\n", c->n,
            it->action ? it->action : "?", it->has_latency ? it->latency_ns / 1e3 : 0,
            cJSON_IsNumber(fl) && it->has_latency && it->latency_ns > 0 ? fl->valuedouble / it->latency_ns : 0,
            it->has_timings ? it->total_ms / 1e3 : 0, params, it->reason);
}

/* The loop says what long step it starts (ka_hooks.status). */
static void tune_status(void *vctx, const char *what)
{
    const tune_ctx *c = vctx;

    if (!c->quiet)
        fprintf(stderr, "kforge tune: %s\n", what);
}

static int tune_write(const char *dir, const char *name, const char *text)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) {
        fprintf(stderr, "kforge tune: cannot write %s: %s\n", path, strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int tune_list(void)
{
    cJSON *index = NULL, *m;
    kf_err err = KF_ERR_INIT;
    if (ka_lib_index(NULL, &index, &err) != KF_OK) {
        fprintf(stderr, "kforge tune: %s\n", err.msg);
        return TUNE_USAGE;
    }
    cJSON_ArrayForEach(m, index)
    {
        const cJSON *t, *sh;
        printf("%-18s %s\n", cJSON_GetObjectItemCaseSensitive(m, "op")->valuestring,
               cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "summary"))
                   ? cJSON_GetObjectItemCaseSensitive(m, "summary")->valuestring : "");
        printf("%-18s tunables:", "");
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(m, "tunables"))
            printf(" %s", t->string);
        printf("\n%-18s reference shapes:", "");
        cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(m, "reference_shapes"))
        {
            const cJSON *d;
            int k = 0;
            printf(" ");
            cJSON_ArrayForEach(d, sh)
                printf("%s%.0f", k++ ? "x" : "", d->valuedouble);
        }
        printf("\n");
    }
    cJSON_Delete(index);
    return TUNE_OK;
}

/* The LLM planner's result as the run's outcome (no tunables to hand to
 * the guided planner, or no correct kernel): kernel.py, report.md and
 * result.json {"correct", "best"?, "llm"}.  The exit status. */
static int tune_llm_only(const char *out_dir, cJSON *llm_res, bool json)
{
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(llm_res, "best");
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(best, "latency_ns");
    cJSON *res = cJSON_CreateObject();
    kf_buf rep = KF_BUF_INIT;
    char *txt;

    cJSON_AddBoolToObject(res, "correct", best != NULL);
    if (best)
        cJSON_AddItemToObject(res, "best", cJSON_Duplicate(best, true));
    cJSON_AddItemToObject(res, "llm", cJSON_Duplicate(llm_res, true));
    kf_buf_addf(&rep, "# kforge tune, LLM planner\n\nStopped: %s after %d proposals (%d model turns, %.0f + %.0f "
                      "tokens).\n\n",
                cJSON_GetObjectItemCaseSensitive(llm_res, "stop")->valuestring,
                cJSON_GetObjectItemCaseSensitive(llm_res, "rounds")->valueint,
                cJSON_GetObjectItemCaseSensitive(llm_res, "turns")->valueint,
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(llm_res, "llm"), "prompt_tokens")
                    ->valuedouble,
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(llm_res, "llm"), "completion_tokens")
                    ->valuedouble);
    if (best)
        kf_buf_addf(&rep, "Best validated kernel: iteration %d, %.1f us (no tunables to tune further).\n",
                    cJSON_GetObjectItemCaseSensitive(best, "iteration")->valueint,
                    cJSON_IsNumber(lat) ? lat->valuedouble / 1e3 : 0);
    else
        kf_buf_addf(&rep, "No candidate passed validation.\n");
    txt = cJSON_Print(res);
    tune_write(out_dir, "result.json", txt);
    tune_write(out_dir, "report.md", rep.data);
    if (best)
        tune_write(out_dir, "kernel.py", cJSON_GetObjectItemCaseSensitive(best, "source")->valuestring);
    if (json)
        printf("%s\n", txt);
    else
        printf("%s\nwritten: %s/%sreport.md result.json iterations.jsonl transcript.jsonl\n", rep.data, out_dir,
               best ? "kernel.py " : "");
    free(txt);
    kf_buf_release(&rep);
    cJSON_Delete(res);
    return best ? TUNE_OK : TUNE_NO_KERNEL;
}

int cli_tune_main(int argc, char **argv)
{
    enum {
        O_SHAPE = 256, O_DTYPE, O_TARGET, O_ENTRY, O_REF, O_REF_ENTRY, O_INPUT, O_TUN, O_KWARGS, O_PLANNER,
        O_ITER, O_SECS, O_PATIENCE, O_GOALF, O_GOALL, O_SEEDS, O_SEED, O_OUT, O_JSON, O_QUIET, O_LIST, O_HELP,
        O_CACHE, O_JOBS, O_MEMORY, O_LLM_ROUNDS, O_LLM_RESTR, O_LLM_TOKENS, O_LLM_REPLAY, O_OP,
    };
    static const struct option opts[] = {
        { "shape", required_argument, NULL, O_SHAPE },       { "dtype", required_argument, NULL, O_DTYPE },
        { "target", required_argument, NULL, O_TARGET },     { "entry", required_argument, NULL, O_ENTRY },
        { "reference", required_argument, NULL, O_REF },     { "ref-entry", required_argument, NULL, O_REF_ENTRY },
        { "input", required_argument, NULL, O_INPUT },       { "tunables", required_argument, NULL, O_TUN },
        { "kwargs", required_argument, NULL, O_KWARGS },     { "planner", required_argument, NULL, O_PLANNER },
        { "iterations", required_argument, NULL, O_ITER },   { "seconds", required_argument, NULL, O_SECS },
        { "patience", required_argument, NULL, O_PATIENCE }, { "goal-fraction", required_argument, NULL, O_GOALF },
        { "goal-latency-us", required_argument, NULL, O_GOALL }, { "seeds", required_argument, NULL, O_SEEDS },
        { "seed", required_argument, NULL, O_SEED },         { "output-dir", required_argument, NULL, O_OUT },
        { "json", no_argument, NULL, O_JSON },               { "quiet", no_argument, NULL, O_QUIET },
        { "list", no_argument, NULL, O_LIST },               { "help", no_argument, NULL, O_HELP },
        { "cache", required_argument, NULL, O_CACHE },       { "jobs", required_argument, NULL, O_JOBS },
        { "memory-mib", required_argument, NULL, O_MEMORY },
        { "llm-rounds", required_argument, NULL, O_LLM_ROUNDS }, { "llm-restructure", required_argument, NULL, O_LLM_RESTR },
        { "llm-tokens", required_argument, NULL, O_LLM_TOKENS }, { "llm-replay", required_argument, NULL, O_LLM_REPLAY },
        { "op", required_argument, NULL, O_OP },
        { NULL, 0, NULL, 0 },
    };
    int64_t shapes[KA_MAX_INPUTS][KA_MAX_DIMS];
    int ndims[KA_MAX_INPUTS], n_shapes = 0, c, rc_exit = TUNE_USAGE, dt = SIM_DT_BFLOAT16;
    const char *target = "trn2", *entry = NULL, *ref = NULL, *ref_entry = NULL, *tun_s = NULL, *kw_s = NULL;
    const char *out_dir = "kforge-tune", *what, *cache_dir = NULL;
    bool json = false, llm = false;
    long llm_rounds = 10, llm_restructure = 3, llm_tokens = 0;
    const char *llm_replay = NULL, *write_op = NULL;
    cJSON *llm_res = NULL;
    ka_problem pb;
    ka_space sp;
    ka_opts o;
    ka_hooks hooks;
    tune_ctx ctx;
    cJSON *meta = NULL, *result = NULL, *tun = NULL;
    kf_err err = KF_ERR_INIT;
    long l;
    char path[PATH_MAX];

    memset(&pb, 0, sizeof(pb));
    memset(&sp, 0, sizeof(sp));
    memset(&o, 0, sizeof(o));
    memset(&ctx, 0, sizeof(ctx));
    o.seed = 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_SHAPE:
            if (n_shapes >= KA_MAX_INPUTS || tune_parse_dims(optarg, shapes[n_shapes], &ndims[n_shapes]) != 0) {
                fprintf(stderr, "kforge tune: --shape %s: write the dims as 4096x8192\n", optarg);
                return TUNE_USAGE;
            }
            n_shapes++;
            break;
        case O_DTYPE:
            dt = sim_input_dtype(optarg);
            if (dt < 0) {
                fprintf(stderr, "kforge tune: --dtype %s: use bf16, fp32 or fp16\n", optarg);
                return TUNE_USAGE;
            }
            break;
        case O_TARGET: target = optarg; break;
        case O_ENTRY: entry = optarg; break;
        case O_REF: ref = optarg; break;
        case O_REF_ENTRY: ref_entry = optarg; break;
        case O_INPUT:
            if (pb.n_inputs >= KA_MAX_INPUTS || tune_parse_input(optarg, &pb.inputs[pb.n_inputs]) != 0) {
                fprintf(stderr, "kforge tune: --input %s: write NAME=shape:4096x8192:bf16[:std=S]\n", optarg);
                return TUNE_USAGE;
            }
            pb.n_inputs++;
            break;
        case O_TUN: tun_s = optarg; break;
        case O_KWARGS: kw_s = optarg; break;
        case O_PLANNER:
            if (strcmp(optarg, "llm") == 0) {
                llm = true;   /* then the guided planner tunes what the model wrote */
                o.planner = KA_PLAN_GUIDED;
                break;
            }
            if (ka_planner_parse(optarg) < 0) {
                fprintf(stderr, "kforge tune: --planner %s: use guided, exhaustive, random or llm\n", optarg);
                return TUNE_USAGE;
            }
            o.planner = (ka_planner)ka_planner_parse(optarg);
            break;
        case O_LLM_ROUNDS:
            if (!tune_long("llm-rounds", optarg, 1, 10, &llm_rounds))
                return TUNE_USAGE;
            break;
        case O_LLM_RESTR:
            if (!tune_long("llm-restructure", optarg, 0, 50, &llm_restructure))
                return TUNE_USAGE;
            break;
        case O_LLM_TOKENS:
            if (!tune_long("llm-tokens", optarg, 1, 1000000000L, &llm_tokens))
                return TUNE_USAGE;
            break;
        case O_LLM_REPLAY: llm_replay = optarg; break;
        case O_OP: write_op = optarg; break;
        case O_ITER:
            if (!tune_long("iterations", optarg, 1, 100000, &l))
                return TUNE_USAGE;
            o.max_iterations = (int)l;
            break;
        case O_SECS:
            if (!tune_double("seconds", optarg, 0, 604800, &o.max_seconds))
                return TUNE_USAGE;
            break;
        case O_PATIENCE:
            if (!tune_long("patience", optarg, 0, 100000, &l))
                return TUNE_USAGE;
            o.patience = l == 0 ? -1 : (int)l;
            break;
        case O_GOALF:
            if (!tune_double("goal-fraction", optarg, 0, 1, &o.goal_fraction))
                return TUNE_USAGE;
            break;
        case O_GOALL:
            if (!tune_double("goal-latency-us", optarg, 0, 1e12, &o.goal_latency_ns))
                return TUNE_USAGE;
            o.goal_latency_ns *= 1e3;
            break;
        case O_SEEDS:
            if (!tune_long("seeds", optarg, 1, KA_MAX_SEEDS, &l))
                return TUNE_USAGE;
            o.n_seeds = (int)l;
            break;
        case O_SEED: {
            kf_err e = KF_ERR_INIT;
            if (kf_num_u64(optarg, UINT64_MAX, &o.seed, &e) != KF_OK) {
                fprintf(stderr, "kforge tune: --seed: %s\n", e.msg);
                return TUNE_USAGE;
            }
            break;
        }
        case O_JOBS:
            if (!tune_long("jobs", optarg, 1, KA_MAX_JOBS, &l))
                return TUNE_USAGE;
            o.jobs = (int)l;
            break;
        case O_MEMORY:
            if (!tune_long("memory-mib", optarg, 64, 1048576, &l))
                return TUNE_USAGE;
            o.memory_mib = (unsigned)l;
            break;
        case O_OUT: out_dir = optarg; break;
        case O_CACHE: cache_dir = optarg; break;
        case O_JSON: json = true; break;
        case O_QUIET: ctx.quiet = true; break;
        case O_LIST: rc_exit = -1; break;
        case O_HELP:
        case 'h': tune_usage(stdout); return TUNE_OK;
        default: tune_usage(stderr); return TUNE_USAGE;
        }
    }
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge tune: %s\n", err.msg);
        return TUNE_USAGE;
    }
    if (rc_exit == -1)
        return tune_list();
    if (!llm && (llm_replay || llm_tokens)) {
        fprintf(stderr, "kforge tune: --llm-replay and --llm-tokens go with --planner llm\n");
        return TUNE_USAGE;
    }
    rc_exit = TUNE_USAGE;
    if (write_op && (!llm || optind != argc || !ref || n_shapes == 0)) {
        fprintf(stderr, "kforge tune: --op NAME writes an op from nothing: it takes --planner llm, --reference "
                        "REF.py and one --shape per input, and no kernel file\n");
        return TUNE_USAGE;
    }
    if (!write_op && optind != argc - 1) {
        tune_usage(stderr);
        return TUNE_USAGE;
    }
    what = write_op ? write_op : argv[optind];
    /* a first line at once: binding and the first simulation of a large
     * shape can take a while before any iteration is reported */
    if (!ctx.quiet)
        fprintf(stderr, "kforge tune: %s on %s: reading the kernel, its tunables and constraints\n", what, target);
    if (tun_s) {
        tun = cJSON_Parse(tun_s);
        if (!cJSON_IsObject(tun)) {
            fprintf(stderr, "kforge tune: --tunables must be a JSON object {\"NAME\": [values...]}\n");
            goto out;
        }
    }
    if (write_op) {
        char rp[PATH_MAX];
        if (!realpath(ref, rp)) {
            fprintf(stderr, "kforge tune: %s: %s\n", ref, strerror(errno));
            goto out;
        }
        if (ka_llm_write_problem(write_op, rp, ref_entry ? ref_entry : write_op,
                                 (const int64_t(*)[KA_MAX_DIMS])shapes, ndims, n_shapes, (sim_dtype)dt, target, &pb,
                                 &err) != KF_OK) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            goto out;
        }
    } else if (strstr(what, ".py") || strchr(what, '/')) {
        if (!entry || pb.n_inputs == 0) {
            fprintf(stderr, "kforge tune: a kernel file needs --entry and one --input per argument\n");
            goto out;
        }
        if (!realpath(what, pb.source_path)) {
            fprintf(stderr, "kforge tune: %s: %s\n", what, strerror(errno));
            goto out;
        }
        snprintf(pb.entry, sizeof(pb.entry), "%s", entry);
        if (ref) {
            if (!realpath(ref, pb.ref_path)) {
                fprintf(stderr, "kforge tune: %s: %s\n", ref, strerror(errno));
                goto out;
            }
            snprintf(pb.ref_entry, sizeof(pb.ref_entry), "%s", ref_entry ? ref_entry : entry);
        } else {
            fprintf(stderr, "kforge tune: --reference REF.py is required: candidates are validated against it\n");
            goto out;
        }
        snprintf(pb.target, sizeof(pb.target), "%s", target);
        if (ka_lib_read_meta(pb.source_path, &meta, &err) != KF_OK && err.code != KF_NOT_FOUND) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            goto out;
        }
        if (tun) {
            /* --tunables, parsed above */
        } else if (meta && cJSON_GetObjectItemCaseSensitive(meta, "tunables")) {
            const cJSON *t;
            tun = cJSON_CreateObject();
            cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(meta, "tunables"))
                cJSON_AddItemToObject(tun, t->string, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "values"), true));
        } else {
            tun = cJSON_CreateObject();
        }
        if (ka_space_from_tunables(tun, meta, &pb, &sp, &err) != KF_OK) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            goto out;
        }
    } else {
        if (llm) {
            fprintf(stderr, "kforge tune: --planner llm takes a kernel file (KERNEL.py --entry ... --reference ...)\n");
            goto out;
        }
        if (n_shapes == 0) {
            fprintf(stderr, "kforge tune: give the op's shapes with --shape DIMS (kforge tune --list)\n");
            goto out;
        }
        if (tun) {
            fprintf(stderr, "kforge tune: --tunables goes with a kernel file or --op; a library op searches the "
                            "tunables its kernel declares (kforge tune --list)\n");
            goto out;
        }
        if (ka_lib_find(NULL, what, &meta, path, sizeof(path), &err) != KF_OK ||
            ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])shapes, ndims, n_shapes, (sim_dtype)dt, target, &pb,
                        &sp, &err) != KF_OK) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            goto out;
        }
    }
    if (kw_s) {
        pb.fixed_kwargs = cJSON_Parse(kw_s);
        if (!cJSON_IsObject(pb.fixed_kwargs)) {
            fprintf(stderr, "kforge tune: --kwargs must be a JSON object\n");
            goto out;
        }
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kforge tune: cannot create %s: %s\n", out_dir, strerror(errno));
        goto out;
    }
    if (!cache_dir)
        cache_dir = kf_config_str(KF_CFG_CACHE_DIR);
    if (cache_dir && *cache_dir) {
        o.cache = ka_cache_open(cache_dir, kf_config_int(KF_CFG_CACHE_MAX_ENTRIES), &err);
        if (!o.cache) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            goto out;
        }
    }
    snprintf(path, sizeof(path), "%s/iterations.jsonl", out_dir);
    ctx.jsonl = fopen(path, "w");
    hooks.ctx = &ctx;
    hooks.progress = tune_progress;
    hooks.cancelled = NULL;
    hooks.status = tune_status;
    if (llm) {
        ka_llm cl;
        ka_llm_cfg lc;
        ka_llm_plan_opts po;
        const cJSON *best;
        kf_code lrc;

        memset(&lc, 0, sizeof(lc));
        if (llm_replay) {
            snprintf(lc.model, sizeof(lc.model), "replay");
        } else if (ka_llm_cfg_from_env(&lc, &err) != KF_OK) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            goto out;
        }
        ka_llm_init(&cl, &lc, llm_tokens);
        if (llm_replay && ka_llm_replay_load(&cl, llm_replay, &err) != KF_OK) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            ka_llm_release(&cl);
            goto out;
        }
        snprintf(path, sizeof(path), "%s/transcript.jsonl", out_dir);
        ctx.transcript = fopen(path, "w");
        memset(&po, 0, sizeof(po));
        po.repair_rounds = (int)llm_rounds;
        po.restructure_rounds = llm_restructure == 0 ? -1 : (int)llm_restructure;
        po.seed = o.seed;
        po.n_seeds = o.n_seeds;
        po.out_dir = out_dir;
        po.write = write_op != NULL;
        po.docs = tune_llm_docs;
        po.iteration = tune_llm_iteration;
        po.transcript = tune_llm_transcript;
        po.ctx = &ctx;
        if (!ctx.quiet)
            fprintf(stderr, "kforge tune: LLM planner (%s%s), up to %ld repair and %ld restructure proposals; "
                            "transcript in %s\n", llm_replay ? "replay of " : "model ", llm_replay ? llm_replay : lc.model,
                    llm_rounds, llm_restructure, path);
        lrc = ka_llm_plan(&pb, &cl, &po, &llm_res, &err);
        ka_llm_release(&cl);
        if (lrc != KF_OK) {
            fprintf(stderr, "kforge tune: %s\n", err.msg);
            goto out;
        }
        best = cJSON_GetObjectItemCaseSensitive(llm_res, "best");
        if (!ctx.quiet)
            fprintf(stderr, "kforge tune: the LLM planner stopped (%s)%s\n",
                    cJSON_GetObjectItemCaseSensitive(llm_res, "stop")->valuestring,
                    best ? "; its best kernel goes to the guided planner" : " with no correct kernel");
        if (!best || (sp.n == 0 && !write_op)) {
            rc_exit = tune_llm_only(out_dir, llm_res, json);
            goto out;
        }
        /* hand the model's best to the guided planner, with the tunables its KFORGE block declares */
        if (!realpath(cJSON_GetObjectItemCaseSensitive(best, "source_file")->valuestring, pb.source_path)) {
            fprintf(stderr, "kforge tune: %s\n", strerror(errno));
            goto out;
        }
        cJSON_Delete(meta);
        meta = NULL;
        if (ka_lib_read_meta(pb.source_path, &meta, &err) != KF_OK && err.code != KF_NOT_FOUND) {
            rc_exit = tune_llm_only(out_dir, llm_res, json);
            goto out;
        }
        if (!tun_s) {
            const cJSON *t;
            cJSON_Delete(tun);
            tun = cJSON_CreateObject();
            cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(meta, "tunables"))
                cJSON_AddItemToObject(tun, t->string, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "values"), true));
        }
        ka_space_release(&sp);
        memset(&sp, 0, sizeof(sp));
        if (ka_space_from_tunables(tun, meta, &pb, &sp, &err) != KF_OK || sp.n == 0) {
            if (!ctx.quiet)
                fprintf(stderr, "kforge tune: the model's kernel has no tunables to tune%s%s\n", err.msg[0] ? ": " : "",
                        err.msg);
            rc_exit = tune_llm_only(out_dir, llm_res, json);
            goto out;
        }
    }
    if (!ctx.quiet)
        fprintf(stderr, "kforge tune: %d tunable%s, %s planner, up to %d iterations; one line per iteration below, "
                        "results in %s/\n", sp.n, sp.n == 1 ? "" : "s", ka_planner_name(o.planner),
                o.max_iterations > 0 ? o.max_iterations : KA_DEF_ITERATIONS, out_dir);
    if (ka_tune(&pb, &sp, &o, &hooks, &result, &err) != KF_OK) {
        fprintf(stderr, "kforge tune: %s\n", err.msg);
        goto out;
    }
    if (llm_res)
        cJSON_AddItemToObject(result, "llm", cJSON_Duplicate(llm_res, true));
    {
        char *txt = cJSON_Print(result);
        const cJSON *best = cJSON_GetObjectItemCaseSensitive(result, "best");
        const cJSON *report = cJSON_GetObjectItemCaseSensitive(result, "report");
        tune_write(out_dir, "result.json", txt);
        tune_write(out_dir, "report.md", cJSON_IsString(report) ? report->valuestring : "");
        if (best)
            tune_write(out_dir, "kernel.py", cJSON_GetObjectItemCaseSensitive(best, "source")->valuestring);
        if (json)
            printf("%s\n", txt);
        else if (cJSON_IsString(report))
            printf("%s\nwritten: %s/kernel.py %s/report.md %s/result.json %s/iterations.jsonl\n", report->valuestring,
                   out_dir, out_dir, out_dir, out_dir);
        free(txt);
        rc_exit = best ? TUNE_OK : TUNE_NO_KERNEL;
    }
out:
    if (ctx.jsonl)
        fclose(ctx.jsonl);
    if (ctx.transcript)
        fclose(ctx.transcript);
    cJSON_Delete(llm_res);
    cJSON_Delete(result);
    cJSON_Delete(meta);
    cJSON_Delete(tun);
    ka_cache_free(o.cache);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    return rc_exit;
}
