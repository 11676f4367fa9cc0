/* cli_mcp — the MCP core: one message in, one answer out (see cli_mcp.h). */
#include "cli_mcp.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/ka_docs.h"
#include "agent/ka_eval.h"
#include "agent/ka_lib.h"
#include "agent/ka_schema.h"
#include "cli/cli_http.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_json.h"
#include "kf_libmeta.h"
#include "sim/sim_input.h"

#define MCP_SERVER_VERSION "1.0.0"

enum {
    RPC_PARSE = -32700,
    RPC_INVALID_REQUEST = -32600,
    RPC_NO_METHOD = -32601,
    RPC_BAD_PARAMS = -32602,
    RPC_INTERNAL = -32603,
};

/* ---- tool schemas (published by tools/list and checked on every call) ---------- */

#define DIMS_SCHEMA                                                                          \
    "{\"type\":\"array\",\"minItems\":1,\"maxItems\":8,\"items\":{\"type\":\"integer\","     \
    "\"minimum\":1,\"maximum\":2147483648}}"
#define DTYPE_SCHEMA "{\"type\":\"string\",\"enum\":[\"bf16\",\"fp32\",\"fp16\"]}"
#define KERNEL_PROPS                                                                                        \
    "\"op\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":63,"                                         \
    "\"description\":\"a library op of kforge's kernels/ (library_ops lists the tuned ones): add, softmax, " \
    "rmsnorm, layernorm, matmul, transpose2d, swiglu, flash_attention, avgpool2d, depthwise_conv2d\"},"     \
    "\"shapes\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":16,\"items\":" DIMS_SCHEMA ","              \
    "\"description\":\"with op: one shape per input in order (fewer when the first fix every dim)\"},"      \
    "\"dtype\":{\"type\":\"string\",\"enum\":[\"bf16\",\"fp32\",\"fp16\"],"                                 \
    "\"description\":\"with op: the inputs' dtype (default bf16)\"},"                                      \
    "\"kernel\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000,"                                   \
    "\"description\":\"path of the user's NKI kernel (.py, current or legacy API), instead of op\"},"       \
    "\"entry\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":127,"                                     \
    "\"description\":\"with kernel: the kernel function\"},"                                                \
    "\"inputs\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":16,\"description\":"                        \
    "\"with kernel: one per kernel argument, in order; random normal(0, std) values\",\"items\":"           \
    "{\"type\":\"object\",\"required\":[\"name\",\"shape\",\"dtype\"],\"additionalProperties\":false,"      \
    "\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":63},"                      \
    "\"shape\":" DIMS_SCHEMA ",\"dtype\":" DTYPE_SCHEMA ","                                                 \
    "\"std\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1000000}}}},"                                   \
    "\"kwargs\":{\"type\":\"object\",\"description\":\"keyword arguments of the kernel (tunables); "        \
    "unset ones take the KFORGE block's defaults\"},"                                                      \
    "\"target\":{\"type\":\"string\",\"enum\":[\"trn1\",\"inf2\",\"trn2\",\"trn3\"],"                        \
    "\"description\":\"the NeuronCore generation simulated (default trn2)\"}"
#define ERROR_SCHEMA                                                                              \
    "\"error\":{\"type\":\"object\",\"description\":\"the simulator's error: code, message, file, line\"}"
#define UUID_SCHEMA                                                                                       \
    "{\"type\":\"string\",\"pattern\":\"^[0-9a-fA-F-]{36}$\",\"minLength\":36,\"maxLength\":36,"          \
    "\"description\":\"a job id (UUID)\"}"
#define OBJ_OUT "{\"type\":\"object\"}"

typedef struct mcp_fail {
    char code[48];
    char msg[1024];
} mcp_fail;

typedef cJSON *(*mcp_tool_fn)(const cJSON *args, mcp_fail *f);

typedef struct mcp_tool {
    const char *name, *title, *description, *input, *output;
    mcp_tool_fn fn;
} mcp_tool;

static cJSON *tool_run(const cJSON *a, mcp_fail *f);
static cJSON *tool_profile(const cJSON *a, mcp_fail *f);
static cJSON *tool_validate(const cJSON *a, mcp_fail *f);
static cJSON *tool_docs(const cJSON *a, mcp_fail *f);
static cJSON *tool_submit(const cJSON *a, mcp_fail *f);
static cJSON *tool_status(const cJSON *a, mcp_fail *f);
static cJSON *tool_iterations(const cJSON *a, mcp_fail *f);
static cJSON *tool_compare(const cJSON *a, mcp_fail *f);
static cJSON *tool_library(const cJSON *a, mcp_fail *f);

static const mcp_tool mcp_tools[] = {
    { "run", "Run a kernel (compile + numerics)",
      "Compile and run an NKI kernel on kforge's simulator, with numerics, on seeded random inputs of the given "
      "shapes and dtypes (a user kernel file with entry and inputs, or a library op with its shapes). Returns "
      "each output's shape, dtype, NaN/Inf counts and finite min/max/mean, or the simulator's error with its "
      "code, file and line (ok: false). The kernel runs only in kforge's sandbox.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" KERNEL_PROPS
      ",\"seed\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9007199254740991,"
      "\"description\":\"seed of the random inputs (default 1)\"}}}",
      "{\"type\":\"object\",\"required\":[\"ok\"],\"properties\":{\"ok\":{\"type\":\"boolean\"}," ERROR_SCHEMA
      ",\"n_outputs\":{\"type\":\"integer\"},\"outputs\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
      "\"properties\":{\"shape\":{\"type\":\"array\"},\"dtype\":{\"type\":\"string\"},"
      "\"elements\":{\"type\":\"number\"},\"nan\":{\"type\":\"number\"},\"inf\":{\"type\":\"number\"},"
      "\"min\":{\"type\":\"number\"},\"max\":{\"type\":\"number\"},\"mean\":{\"type\":\"number\"}}}},"
      "\"sim_seconds\":{\"type\":\"number\"},\"wall_seconds\":{\"type\":\"number\"}}}",
      tool_run },
    { "profile", "Profile a kernel on the timing model",
      "Simulate an NKI kernel on the deterministic timing model of a NeuronCore (no hardware) and profile it: "
      "latency, the op's floor and bound kind, the compute/DMA bounds, summary figures (engine busy fractions, "
      "DMA efficiency...), ranked findings with the source lines they point at, and the busiest source lines. "
      "The kernel runs only in kforge's sandbox.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" KERNEL_PROPS "}}",
      "{\"type\":\"object\",\"required\":[\"ok\"],\"properties\":{\"ok\":{\"type\":\"boolean\"}," ERROR_SCHEMA
      ",\"latency_ns\":{\"type\":\"number\"},\"floor_ns\":{\"type\":\"number\"},\"bound_kind\":{\"type\":"
      "\"string\"},\"bounds\":{\"type\":\"object\"},\"summary\":{\"type\":\"object\"},\"findings\":{\"type\":"
      "\"array\",\"items\":{\"type\":\"object\"}},\"lines\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},"
      "\"sim_seconds\":{\"type\":\"number\"},\"wall_seconds\":{\"type\":\"number\"}}}",
      tool_profile },
    { "validate", "Validate a kernel against a NumPy reference",
      "Run an NKI kernel with numerics on fresh seeded random inputs (outputs NaN-filled first) and compare "
      "every output in full with a NumPy reference function (in the kernel's file or another), per seed, "
      "with the dtype's tolerances. A library op uses its own reference. pass is true only when every seed and "
      "every output matches. The kernel and the reference run only in kforge's sandbox.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" KERNEL_PROPS
      ",\"reference\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000,"
      "\"description\":\"with kernel: the file of the NumPy reference (default: the kernel's file)\"},"
      "\"ref_entry\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":127,\"description\":\"with kernel: the "
      "reference function (required when it is in the kernel's file; else default: the entry's name)\"},"
      "\"seeds\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":8,\"items\":{\"type\":\"integer\","
      "\"minimum\":0,\"maximum\":9007199254740991},\"description\":\"seeds of the input sets (default [1,2,3])\"},"
      "\"rtol\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
      "\"atol\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1000}}}",
      "{\"type\":\"object\",\"required\":[\"ok\",\"pass\"],\"properties\":{\"ok\":{\"type\":\"boolean\"},"
      "\"pass\":{\"type\":\"boolean\"}," ERROR_SCHEMA ",\"ref_error\":{\"type\":\"string\"},"
      "\"checks\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},\"sim_seconds\":{\"type\":\"number\"},"
      "\"ref_seconds\":{\"type\":\"number\"},\"wall_seconds\":{\"type\":\"number\"}}}",
      tool_validate },
    { "docs", "kforge's NKI and error-code reference",
      "Search kforge's own documentation of the simulated NKI API (docs/sim-nki.md) and of the simulator's "
      "error codes (docs/sim-errors.md), offline. With query: the sections containing every word of it "
      "(case-insensitive), with their text and the lines that contain every word (an error code's table row). With section: that section's text. With neither: the list of "
      "section titles.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
      "\"query\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200,\"description\":\"words to look for, "
      "e.g. an error code like E_PARTITION or an API name like nl.load\"},"
      "\"section\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200,\"description\":\"a section title\"},"
      "\"doc\":{\"type\":\"string\",\"enum\":[\"nki\",\"errors\"],\"description\":\"only this document\"}}}",
      "{\"type\":\"object\",\"required\":[\"sections\"],\"properties\":{\"sections\":{\"type\":\"array\","
      "\"items\":{\"type\":\"object\",\"required\":[\"doc\",\"title\"],\"properties\":{\"doc\":{\"type\":"
      "\"string\"},\"title\":{\"type\":\"string\"},\"level\":{\"type\":\"integer\"},\"text\":{\"type\":\"string\"},"
      "\"truncated\":{\"type\":\"boolean\"},\"matching_lines\":{\"type\":\"array\",\"items\":{\"type\":"
      "\"string\"}}}}},\"matches\":{\"type\":\"integer\"}}}",
      tool_docs },
    { "submit_job", "Submit a job to the kforge service",
      "POST a job document (the JSON `kforge submit` takes: kind, op, shapes, target, budget...) to the kforge "
      "API at KFORGE_API_URL with KFORGE_TOKEN; returns the created job (id, state...).",
      "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"job\"],\"properties\":{"
      "\"job\":{\"type\":\"object\",\"description\":\"the job document (docs/api.md)\"},"
      "\"idempotency_key\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":255}}}",
      OBJ_OUT, tool_submit },
    { "job_status", "A job's state",
      "GET a job from the kforge API: state, attempt, best latency and fraction of the bound, error.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"id\"],\"properties\":{\"id\":"
      UUID_SCHEMA "}}",
      OBJ_OUT, tool_status },
    { "job_iterations", "A job's iterations",
      "A job's iterations in (attempt, seq) order, one page: action, latency, fraction, correct, params, "
      "reason; next_cursor gives the next page.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"id\"],\"properties\":{\"id\":"
      UUID_SCHEMA ",\"attempt\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000},"
      "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":500},"
      "\"cursor\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":512}}}",
      OBJ_OUT, tool_iterations },
    { "compare_jobs", "Compare jobs",
      "Compare 2 to 4 jobs (GET /v1/compare): their best kernels' latency, bounds, params and findings side "
      "by side.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"jobs\"],\"properties\":{\"jobs\":"
      "{\"type\":\"array\",\"minItems\":2,\"maxItems\":4,\"items\":" UUID_SCHEMA "}}}",
      OBJ_OUT, tool_compare },
    { "library_ops", "The service's kernel library",
      "The tuned kernels of the service's library (GET /v1/library), filtered by op, target, dtype, backend; "
      "one page, next_cursor gives the next.",
      "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
      "\"op\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":63},"
      "\"target\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":15},"
      "\"dtype\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":15},"
      "\"backend\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":15},"
      "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":200},"
      "\"cursor\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":512}}}",
      OBJ_OUT, tool_library },
};

#define MCP_N_TOOLS (sizeof(mcp_tools) / sizeof(mcp_tools[0]))

static const mcp_tool *mcp_tool_find(const char *name)
{
    for (size_t i = 0; i < MCP_N_TOOLS; i++)
        if (strcmp(mcp_tools[i].name, name) == 0)
            return &mcp_tools[i];
    return NULL;
}

/* The precision ("%.*s") that quotes at most max bytes of s and cuts it
 * between characters: a message quoting the client's text stays UTF-8. */
static int mcp_prec(const char *s, size_t max)
{
    return (int)kf_utf8_cut(s, strnlen(s, max));
}

/* Cut a formatted text that may have been truncated back to a character's end. */
static void mcp_cut_end(char *s)
{
    s[kf_utf8_cut(s, strlen(s))] = '\0';
}

static void mcp_failf(mcp_fail *f, kf_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void mcp_failf(mcp_fail *f, kf_code code, const char *fmt, ...)
{
    va_list ap;

    snprintf(f->code, sizeof(f->code), "%s", kf_code_name(code));
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
    va_end(ap);
    mcp_cut_end(f->msg);
}

static void mcp_fail_err(mcp_fail *f, const kf_err *e)
{
    mcp_failf(f, e->code ? e->code : KF_INTERNAL, "%s", e->msg[0] ? e->msg : kf_code_title(e->code));
}

/* ---- local tools: the kernel in the sandbox ---------------------------------------- */

static const char *mcp_str(const cJSON *a, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool mcp_dims(const cJSON *arr, int64_t *dims, int *nd)
{
    const cJSON *d;

    *nd = 0;
    cJSON_ArrayForEach(d, arr)
    {
        if (*nd >= KA_MAX_DIMS)
            return false;
        dims[(*nd)++] = (int64_t)d->valuedouble;
    }
    return *nd > 0;
}

/* A regular file's absolute path, or a failure naming the argument. */
static bool mcp_file(const char *what, const char *path, char *out, mcp_fail *f)
{
    struct stat st;

    if (!realpath(path, out)) {
        mcp_failf(f, KF_NOT_FOUND, "%s '%.*s': %s (paths are relative to where kforge mcp runs)", what,
                  mcp_prec(path, 200), path,
                  strerror(errno));
        return false;
    }
    if (stat(out, &st) != 0 || !S_ISREG(st.st_mode)) {
        mcp_failf(f, KF_INVALID, "%s '%.*s' is not a regular file", what, mcp_prec(path, 200), path);
        return false;
    }
    return true;
}

/* The problem a tool call describes (op + shapes, or kernel + entry + inputs)
 * and its kwargs: the KFORGE block's defaults overlaid with the call's. */
static bool mcp_problem(const cJSON *a, ka_problem *pb, char **kwargs, mcp_fail *f)
{
    const char *op = mcp_str(a, "op"), *kernel = mcp_str(a, "kernel"), *target = mcp_str(a, "target");
    const cJSON *user_kw = cJSON_GetObjectItemCaseSensitive(a, "kwargs"), *k;
    ka_space sp;
    cJSON *meta = NULL, *kw = NULL, *tun = NULL;
    kf_err err = KF_ERR_INIT;
    int idx[KA_MAX_TUNABLES] = { 0 };
    bool ok = false;
    char *s;

    memset(pb, 0, sizeof(*pb));
    memset(&sp, 0, sizeof(sp));
    *kwargs = NULL;
    if (!target)
        target = "trn2";
    if ((op != NULL) == (kernel != NULL)) {
        mcp_failf(f, KF_INVALID, "give either op (a library op, with shapes) or kernel (a file, with entry and inputs)");
        return false;
    }
    if (op) {
        static const char *const kernel_only[] = { "entry", "inputs", "reference", "ref_entry" };
        int64_t shapes[KA_MAX_INPUTS][KA_MAX_DIMS];
        int ndims[KA_MAX_INPUTS], n = 0, dt = SIM_DT_BFLOAT16;
        const cJSON *sh;
        char path[PATH_MAX];
        for (size_t i = 0; i < sizeof(kernel_only) / sizeof(kernel_only[0]); i++)
            if (cJSON_GetObjectItemCaseSensitive(a, kernel_only[i])) {
                mcp_failf(f, KF_INVALID, "%s goes with kernel, not with op (a library op has its own)", kernel_only[i]);
                return false;
            }
        if (!cJSON_GetObjectItemCaseSensitive(a, "shapes")) {
            mcp_failf(f, KF_INVALID, "op needs shapes: one per input, e.g. [[4096, 8192]]");
            return false;
        }
        cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(a, "shapes"))
        {
            mcp_dims(sh, shapes[n], &ndims[n]);
            n++;
        }
        if (mcp_str(a, "dtype"))
            dt = sim_input_dtype(mcp_str(a, "dtype"));
        if (ka_lib_find(NULL, op, &meta, path, sizeof(path), &err) != KF_OK ||
            ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])shapes, ndims, n, (sim_dtype)dt, target, pb, &sp,
                        &err) != KF_OK) {
            mcp_fail_err(f, &err);
            goto out;
        }
    } else {
        const char *entry = mcp_str(a, "entry");
        const cJSON *in;
        if (!entry || !cJSON_GetObjectItemCaseSensitive(a, "inputs")) {
            mcp_failf(f, KF_INVALID, "kernel needs entry (the kernel function) and inputs (one per argument)");
            return false;
        }
        if (cJSON_GetObjectItemCaseSensitive(a, "shapes") || cJSON_GetObjectItemCaseSensitive(a, "dtype")) {
            mcp_failf(f, KF_INVALID, "shapes and dtype go with op; a kernel's inputs carry their own");
            return false;
        }
        if (!mcp_file("kernel", kernel, pb->source_path, f))
            return false;
        snprintf(pb->entry, sizeof(pb->entry), "%s", entry);
        snprintf(pb->target, sizeof(pb->target), "%s", target);
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(a, "inputs"))
        {
            ka_input *x = &pb->inputs[pb->n_inputs++];
            const cJSON *std = cJSON_GetObjectItemCaseSensitive(in, "std");
            snprintf(x->name, sizeof(x->name), "%s", mcp_str(in, "name"));
            mcp_dims(cJSON_GetObjectItemCaseSensitive(in, "shape"), x->shape, &x->ndim);
            x->dtype = (sim_dtype)sim_input_dtype(mcp_str(in, "dtype"));
            x->std = std ? std->valuedouble : 1.0;
        }
        if (ka_lib_read_meta(pb->source_path, &meta, &err) != KF_OK && err.code != KF_NOT_FOUND) {
            mcp_fail_err(f, &err);
            goto out;
        }
        tun = cJSON_CreateObject();
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(meta, "tunables"))
            cJSON_AddItemToObject(tun, k->string, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(k, "values"), true));
        if (ka_space_from_tunables(tun, meta, pb, &sp, &err) != KF_OK) {
            mcp_fail_err(f, &err);
            goto out;
        }
    }
    for (int i = 0; i < sp.n; i++)
        idx[i] = sp.t[i].def;
    s = ka_space_kwargs(&sp, idx, pb->fixed_kwargs);
    kw = s ? cJSON_Parse(s) : NULL;
    free(s);
    if (!cJSON_IsObject(kw)) {
        cJSON_Delete(kw);
        kw = cJSON_CreateObject();
    }
    cJSON_ArrayForEach(k, user_kw)
    {
        cJSON_DeleteItemFromObjectCaseSensitive(kw, k->string);
        cJSON_AddItemToObject(kw, k->string, cJSON_Duplicate(k, true));
    }
    *kwargs = cJSON_PrintUnformatted(kw);
    ok = true;
out:
    cJSON_Delete(kw);
    cJSON_Delete(tun);
    cJSON_Delete(meta);
    ka_space_release(&sp);
    if (!ok)
        ka_problem_release(pb);
    return ok;
}

/* A run, profile or validate call's evaluation: the problem and kwargs
 * the arguments describe (mcp_problem) and the request around them. */
typedef struct mcp_eval_call {
    ka_problem  pb;
    ka_eval_req req;
    char       *kw;
} mcp_eval_call;

/* Set e up for mode: req points at e's problem and kwargs, no seeds, the
 * dtype's tolerances.  On failure f says why and e holds nothing. */
static bool mcp_eval_setup(const cJSON *a, ka_eval_mode mode, mcp_eval_call *e, mcp_fail *f)
{
    e->kw = NULL;
    if (!mcp_problem(a, &e->pb, &e->kw, f))
        return false;
    memset(&e->req, 0, sizeof(e->req));
    e->req.pb = &e->pb;
    e->req.kwargs_json = e->kw;
    e->req.mode = mode;
    e->req.rtol = e->req.atol = -1;
    return true;
}

static void mcp_eval_release(mcp_eval_call *e)
{
    free(e->kw);
    e->kw = NULL;
    ka_problem_release(&e->pb);
}

/* Evaluate in the sandbox (ka_eval_run) and release e: the result, or NULL
 * with f set. */
static cJSON *mcp_eval_run(mcp_eval_call *e, mcp_fail *f)
{
    cJSON *res = NULL;
    kf_err err = KF_ERR_INIT;

    if (ka_eval_run(&e->req, &res, &err) != KF_OK) {
        mcp_fail_err(f, &err);
        res = NULL;
    }
    mcp_eval_release(e);
    return res;
}

static cJSON *tool_run(const cJSON *a, mcp_fail *f)
{
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(a, "seed");
    mcp_eval_call e;

    if (!mcp_eval_setup(a, KA_EVAL_RUN, &e, f))
        return NULL;
    e.req.seeds[0] = seed ? (uint64_t)seed->valuedouble : 1;
    e.req.n_seeds = 1;
    return mcp_eval_run(&e, f);
}

static cJSON *tool_profile(const cJSON *a, mcp_fail *f)
{
    mcp_eval_call e;

    if (!mcp_eval_setup(a, KA_EVAL_TIMING, &e, f))
        return NULL;
    return mcp_eval_run(&e, f);
}

static cJSON *tool_validate(const cJSON *a, mcp_fail *f)
{
    const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(a, "seeds"), *s;
    const cJSON *rtol = cJSON_GetObjectItemCaseSensitive(a, "rtol"), *atol = cJSON_GetObjectItemCaseSensitive(a, "atol");
    const char *ref = mcp_str(a, "reference"), *ref_entry = mcp_str(a, "ref_entry");
    mcp_eval_call e;
    ka_problem *pb = &e.pb;

    if (!mcp_eval_setup(a, KA_EVAL_VALIDATE, &e, f))
        return NULL;
    if (!pb->op[0]) {
        if (!ref && !ref_entry) {
            mcp_failf(f, KF_INVALID, "give the NumPy reference: ref_entry (a function in the kernel's file) "
                                     "and/or reference (another file)");
            mcp_eval_release(&e);
            return NULL;
        }
        if (ref) {
            if (!mcp_file("reference", ref, pb->ref_path, f)) {
                mcp_eval_release(&e);
                return NULL;
            }
        } else {
            snprintf(pb->ref_path, sizeof(pb->ref_path), "%s", pb->source_path);
        }
        snprintf(pb->ref_entry, sizeof(pb->ref_entry), "%s", ref_entry ? ref_entry : pb->entry);
    }
    if (seeds) {
        cJSON_ArrayForEach(s, seeds)
            e.req.seeds[e.req.n_seeds++] = (uint64_t)s->valuedouble;
    } else {
        for (e.req.n_seeds = 0; e.req.n_seeds < 3; e.req.n_seeds++)
            e.req.seeds[e.req.n_seeds] = (uint64_t)e.req.n_seeds + 1;
    }
    if (rtol)
        e.req.rtol = rtol->valuedouble;
    if (atol)
        e.req.atol = atol->valuedouble;
    return mcp_eval_run(&e, f);
}

/* ---- docs: agent/ka_docs.h ------------------------------------------------------------ */

static cJSON *tool_docs(const cJSON *a, mcp_fail *f)
{
    kf_err err = KF_ERR_INIT;
    cJSON *res = ka_docs_query(mcp_str(a, "query"), mcp_str(a, "section"), mcp_str(a, "doc"), &err);

    if (!res)
        mcp_fail_err(f, &err);
    return res;
}

/* ---- service tools: the API through cli_http ---------------------------------------- */

/* The API's JSON answer (an object) to one request, or a failure with the
 * problem's code (urn:kforge:problem:not-found -> NOT_FOUND) and detail. */
static cJSON *mcp_api(const char *method, const char *path, const char *body, const char *idem, mcp_fail *f)
{
    cli_resp r = CLI_RESP_INIT;
    cJSON *j = NULL;

    if (cli_http(method, path, body, idem, &r) != 0) {
        mcp_failf(f, KF_UNAVAILABLE, "cannot reach %s: %s (is kforge-api running? set KFORGE_API_URL)",
                  kf_config_str(KF_CFG_API_URL), r.err);
        cli_resp_release(&r);
        return NULL;
    }
    if (r.body.data)
        j = cJSON_Parse(r.body.data);
    if (r.status >= 400) {
        const char *type = mcp_str(j, "type"), *detail = mcp_str(j, "detail"), *title = mcp_str(j, "title");
        const char *slug = type && strrchr(type, ':') ? strrchr(type, ':') + 1 : NULL;
        size_t i = 0;
        if (slug) {
            for (; slug[i] && i + 1 < sizeof(f->code); i++) {
                char c = slug[i];
                if (c == '-')
                    c = '_';
                else if (c >= 'a' && c <= 'z')
                    c = (char)(c - 'a' + 'A');
                f->code[i] = c;
            }
            f->code[kf_utf8_cut(f->code, i)] = '\0';
        } else {
            snprintf(f->code, sizeof(f->code), "HTTP_%ld", r.status);
        }
        snprintf(f->msg, sizeof(f->msg), "%ld %s: %s", r.status, title ? title : "error",
                 detail ? detail : (r.body.data ? r.body.data : ""));
        mcp_cut_end(f->msg);
        cJSON_Delete(j);
        cli_resp_release(&r);
        return NULL;
    }
    cli_resp_release(&r);
    if (cJSON_IsArray(j)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "items", j);
        j = o;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        mcp_failf(f, KF_IO, "the API's answer to %s %s was not a JSON object", method, path);
        return NULL;
    }
    return j;
}

/* "&name=value" (value URL-encoded) when the argument is there. */
static void mcp_query_arg(kf_buf *q, const cJSON *a, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, name);

    if (cJSON_IsString(v)) {
        char *e = curl_easy_escape(NULL, v->valuestring, 0);
        kf_buf_addf(q, "%c%s=%s", strchr(q->data, '?') ? '&' : '?', name, e ? e : "");
        curl_free(e);
    } else if (cJSON_IsNumber(v)) {
        kf_buf_addf(q, "%c%s=%lld", strchr(q->data, '?') ? '&' : '?', name, (long long)v->valuedouble);
    }
}

static cJSON *tool_submit(const cJSON *a, mcp_fail *f)
{
    char *body = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(a, "job"));
    cJSON *res = mcp_api("POST", "/v1/jobs", body, mcp_str(a, "idempotency_key"), f);

    free(body);
    return res;
}

static cJSON *tool_status(const cJSON *a, mcp_fail *f)
{
    char *path = kf_asprintf("/v1/jobs/%s", mcp_str(a, "id"));
    cJSON *res = mcp_api("GET", path, NULL, NULL, f);

    free(path);
    return res;
}

static cJSON *tool_iterations(const cJSON *a, mcp_fail *f)
{
    kf_buf q = KF_BUF_INIT;
    cJSON *res;

    kf_buf_addf(&q, "/v1/jobs/%s/iterations", mcp_str(a, "id"));
    mcp_query_arg(&q, a, "attempt");
    mcp_query_arg(&q, a, "limit");
    mcp_query_arg(&q, a, "cursor");
    res = mcp_api("GET", q.data, NULL, NULL, f);
    kf_buf_release(&q);
    return res;
}

static cJSON *tool_compare(const cJSON *a, mcp_fail *f)
{
    kf_buf q = KF_BUF_INIT;
    const cJSON *id;
    cJSON *res;
    int i = 0;

    kf_buf_adds(&q, "/v1/compare?jobs=");
    cJSON_ArrayForEach(id, cJSON_GetObjectItemCaseSensitive(a, "jobs"))
        kf_buf_addf(&q, "%s%s", i++ ? "," : "", id->valuestring);
    res = mcp_api("GET", q.data, NULL, NULL, f);
    kf_buf_release(&q);
    return res;
}

static cJSON *tool_library(const cJSON *a, mcp_fail *f)
{
    kf_buf q = KF_BUF_INIT;
    cJSON *res;

    kf_buf_adds(&q, "/v1/library");
    mcp_query_arg(&q, a, "op");
    mcp_query_arg(&q, a, "target");
    mcp_query_arg(&q, a, "dtype");
    mcp_query_arg(&q, a, "backend");
    mcp_query_arg(&q, a, "limit");
    mcp_query_arg(&q, a, "cursor");
    res = mcp_api("GET", q.data, NULL, NULL, f);
    kf_buf_release(&q);
    return res;
}

/* ---- JSON-RPC ------------------------------------------------------------------------ */

static char *mcp_reply(const cJSON *id, cJSON *result)
{
    cJSON *m = cJSON_CreateObject();
    char *s;

    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    cJSON_AddItemToObject(m, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNull());
    cJSON_AddItemToObject(m, "result", result);
    s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

static char *mcp_error(const cJSON *id, int code, const char *msg, cJSON *data)
{
    cJSON *m = cJSON_CreateObject(), *e;
    char *s;

    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    cJSON_AddItemToObject(m, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNull());
    e = cJSON_AddObjectToObject(m, "error");
    cJSON_AddNumberToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    if (data)
        cJSON_AddItemToObject(e, "data", data);
    s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

char *cli_mcp_oversized(void)
{
    char msg[128];

    snprintf(msg, sizeof(msg), "message longer than %u bytes: refused", CLI_MCP_MAX_LINE);
    return mcp_error(NULL, RPC_INVALID_REQUEST, msg, NULL);
}

void cli_mcp_init(cli_mcp *s)
{
    memset(s, 0, sizeof(*s));
}

static cJSON *mcp_initialize(cli_mcp *s, const char *requested)
{
    cJSON *r = cJSON_CreateObject(), *caps, *info;

    snprintf(s->version, sizeof(s->version), "%s",
             strcmp(requested, "2025-06-18") == 0 || strcmp(requested, "2025-11-25") == 0 ? requested
                                                                                            : CLI_MCP_LATEST);
    s->initialized = true;
    cJSON_AddStringToObject(r, "protocolVersion", s->version);
    caps = cJSON_AddObjectToObject(r, "capabilities");
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(caps, "tools"), "listChanged", false);
    info = cJSON_AddObjectToObject(r, "serverInfo");
    cJSON_AddStringToObject(info, "name", "kforge");
    cJSON_AddStringToObject(info, "title", "kforge: NeuronCore kernel simulator, profiler and tuning service");
    cJSON_AddStringToObject(info, "version", MCP_SERVER_VERSION);
    cJSON_AddStringToObject(r, "instructions",
                            "kforge simulates AWS NeuronCore (NKI) kernels with a timing model. Use run to "
                            "compile and execute a kernel, profile for its latency, bounds and ranked findings "
                            "with source lines, validate to check it against a NumPy reference, docs for the NKI "
                            "API and error codes; submit_job, job_status, job_iterations, compare_jobs and "
                            "library_ops reach the kforge service. Kernel paths are relative to where the server "
                            "runs.");
    return r;
}

static cJSON *mcp_tools_list(void)
{
    cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "tools");

    for (size_t i = 0; i < MCP_N_TOOLS; i++) {
        const mcp_tool *t = &mcp_tools[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "title", t->title);
        cJSON_AddStringToObject(o, "description", t->description);
        cJSON_AddItemToObject(o, "inputSchema", cJSON_Parse(t->input));
        cJSON_AddItemToObject(o, "outputSchema", cJSON_Parse(t->output));
        cJSON_AddItemToArray(arr, o);
    }
    return r;
}

/* Each byte of s that is not part of a UTF-8 character becomes '?' (a
 * failure may quote what an API answered or a file name). */
static void mcp_utf8_clean(char *s)
{
    size_t len = strlen(s), off = 0, bad;

    while (off < len && !kf_utf8_valid(s + off, len - off, &bad)) {
        s[off + bad] = '?';
        off += bad + 1;
    }
}

/* A tools/call result: structured content with its text copy, or a tool
 * error (isError) whose text is {"error": {"code", "message"}}. */
static cJSON *mcp_call_result(cJSON *sc, const mcp_fail *f)
{
    cJSON *r = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(r, "content"), *item;
    char *text;

    if (!sc) {
        mcp_fail clean = *f;
        cJSON *e;
        mcp_utf8_clean(clean.code);
        mcp_utf8_clean(clean.msg);
        sc = cJSON_CreateObject();
        e = cJSON_AddObjectToObject(sc, "error");
        cJSON_AddStringToObject(e, "code", clean.code[0] ? clean.code : "INTERNAL");
        cJSON_AddStringToObject(e, "message", clean.msg[0] ? clean.msg : "the tool failed");
        cJSON_AddBoolToObject(r, "isError", true);
    } else {
        cJSON_AddBoolToObject(r, "isError", false);
    }
    text = cJSON_PrintUnformatted(sc);
    item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "type", "text");
    cJSON_AddStringToObject(item, "text", text ? text : "{}");
    cJSON_AddItemToArray(content, item);
    /* a tool error carries its JSON only as text: clients check
     * structuredContent against the tool's outputSchema, which describes
     * the tool's result, not its error */
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "isError")))
        cJSON_Delete(sc);
    else
        cJSON_AddItemToObject(r, "structuredContent", sc);
    free(text);
    return r;
}

struct cli_mcp_call {
    const mcp_tool *tool;
    cJSON *id;      /* the request's id (a copy) */
    cJSON *args;    /* its arguments (a copy; {} when it gave none), valid for the tool's inputSchema */
    cJSON *progress; /* params._meta.progressToken (a copy: string or number), or NULL */
};

/* A tools/call's checks, short of the tool's work: a protocol error, a
 * tool error (arguments that break the inputSchema), or NULL with *call
 * set: the call to run. */
static char *mcp_tools_accept(const cJSON *id, const cJSON *params, cli_mcp_call **call)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(params, "arguments");
    const mcp_tool *t;
    cJSON *sch, *av;
    mcp_fail f;
    char msg[512];
    bool ok;

    if (!cJSON_IsString(name))
        return mcp_error(id, RPC_BAD_PARAMS, "tools/call needs params.name, the tool's name", NULL);
    t = mcp_tool_find(name->valuestring);
    if (!t) {
        snprintf(msg, sizeof(msg), "unknown tool '%.*s' (tools/list lists them)",
                 mcp_prec(name->valuestring, 100), name->valuestring);
        return mcp_error(id, RPC_BAD_PARAMS, msg, NULL);
    }
    if (args && !cJSON_IsObject(args) && !cJSON_IsNull(args))
        return mcp_error(id, RPC_BAD_PARAMS, "params.arguments must be an object", NULL);
    av = cJSON_IsObject(args) ? cJSON_Duplicate(args, true) : cJSON_CreateObject();
    sch = cJSON_Parse(t->input);
    ok = ka_schema_check(sch, av, "", msg, sizeof(msg));
    cJSON_Delete(sch);
    if (!ok) {
        cJSON_Delete(av);
        memset(&f, 0, sizeof(f));
        mcp_cut_end(msg);
        mcp_failf(&f, KF_INVALID, "%s", msg);
        return mcp_reply(id, mcp_call_result(NULL, &f));
    }
    *call = kf_calloc(1, sizeof(**call));
    (*call)->tool = t;
    (*call)->id = cJSON_Duplicate(id, true);
    (*call)->args = av;
    {
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(params, "_meta"),
                                                            "progressToken");
        if (cJSON_IsString(tok) || (cJSON_IsNumber(tok) && isfinite(tok->valuedouble)))
            (*call)->progress = cJSON_Duplicate(tok, true);
    }
    return NULL;
}

const cJSON *cli_mcp_call_progress_token(const cli_mcp_call *c)
{
    return c->progress;
}

const char *cli_mcp_call_tool(const cli_mcp_call *c)
{
    return c->tool->name;
}

const cJSON *cli_mcp_call_args(const cli_mcp_call *c)
{
    return c->args;
}

void cli_mcp_call_free(cli_mcp_call *c)
{
    if (!c)
        return;
    cJSON_Delete(c->id);
    cJSON_Delete(c->args);
    cJSON_Delete(c->progress);
    free(c);
}

char *cli_mcp_call_run(cli_mcp_call *c)
{
    mcp_fail f;
    cJSON *sc;
    char *out;

    memset(&f, 0, sizeof(f));
    sc = c->tool->fn(c->args, &f);
    out = mcp_reply(c->id, mcp_call_result(sc, &f));
    cli_mcp_call_free(c);
    return out;
}

char *cli_mcp_handle(cli_mcp *s, const char *line, size_t len)
{
    cli_mcp_call *call = NULL;
    char *out = cli_mcp_accept(s, line, len, &call);

    return call ? cli_mcp_call_run(call) : out;
}

char *cli_mcp_accept(cli_mcp *s, const char *line, size_t len, cli_mcp_call **call)
{
    cJSON *m = NULL;
    const cJSON *id, *method, *params, *jv;
    const char *meth;
    char *out = NULL, msg[256];
    kf_err perr = KF_ERR_INIT;

    *call = NULL;
    snprintf(s->last, sizeof(s->last), "message");
    /* strict: cJSON alone takes invalid UTF-8 (echoed back, the answer would
     * not be JSON text) and text after the value */
    if (kf_json_parse(line, len, CLI_MCP_MAX_DEPTH, &m, &perr) != KF_OK) {
        char *why = kf_asprintf("parse error: the line is not JSON: %s", perr.msg);
        out = mcp_error(NULL, RPC_PARSE, why, NULL);
        free(why);
        return out;
    }
    if (cJSON_IsArray(m)) {
        cJSON_Delete(m);
        return mcp_error(NULL, RPC_INVALID_REQUEST, "batches are not supported: send one message per line", NULL);
    }
    if (!cJSON_IsObject(m)) {
        cJSON_Delete(m);
        return mcp_error(NULL, RPC_INVALID_REQUEST, "a message is a JSON object", NULL);
    }
    id = cJSON_GetObjectItemCaseSensitive(m, "id");
    method = cJSON_GetObjectItemCaseSensitive(m, "method");
    params = cJSON_GetObjectItemCaseSensitive(m, "params");
    jv = cJSON_GetObjectItemCaseSensitive(m, "jsonrpc");
    if (id && !cJSON_IsString(id) && !(cJSON_IsNumber(id) && isfinite(id->valuedouble))) {
        out = mcp_error(NULL, RPC_INVALID_REQUEST, "id must be a string or a number", NULL);
        goto done;
    }
    if (!cJSON_IsString(jv) || strcmp(jv->valuestring, "2.0") != 0) {
        out = mcp_error(id, RPC_INVALID_REQUEST, "jsonrpc must be \"2.0\"", NULL);
        goto done;
    }
    if (!method) {
        /* a response (result or error) from the client: nothing to answer */
        if (id && (cJSON_GetObjectItemCaseSensitive(m, "result") || cJSON_GetObjectItemCaseSensitive(m, "error")))
            goto done;
        out = mcp_error(id, RPC_INVALID_REQUEST, "a request needs a method", NULL);
        goto done;
    }
    if (!cJSON_IsString(method)) {
        out = id ? mcp_error(id, RPC_INVALID_REQUEST, "method must be a string", NULL) : NULL;
        goto done;
    }
    meth = method->valuestring;
    {
        const cJSON *tn = cJSON_GetObjectItemCaseSensitive(params, "name");
        snprintf(s->last, sizeof(s->last), "%.*s%s%.*s", mcp_prec(meth, 40), meth, cJSON_IsString(tn) ? " " : "",
                 cJSON_IsString(tn) ? mcp_prec(tn->valuestring, 32) : 0, cJSON_IsString(tn) ? tn->valuestring : "");
    }
    if (!id)
        goto done;   /* a notification (initialized, cancelled, ...): never answered */
    if (params && !cJSON_IsObject(params)) {
        out = mcp_error(id, RPC_BAD_PARAMS, "params must be an object", NULL);
        goto done;
    }
    if (strcmp(meth, "ping") == 0) {
        out = mcp_reply(id, cJSON_CreateObject());
    } else if (strcmp(meth, "initialize") == 0) {
        const cJSON *pv = cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
        if (s->initialized)
            out = mcp_error(id, RPC_INVALID_REQUEST, "already initialized", NULL);
        else if (!cJSON_IsString(pv))
            out = mcp_error(id, RPC_BAD_PARAMS, "initialize needs params.protocolVersion (a string)", NULL);
        else
            out = mcp_reply(id, mcp_initialize(s, pv->valuestring));
    } else if (!s->initialized) {
        snprintf(msg, sizeof(msg), "not initialized: send initialize before %.*s", mcp_prec(meth, 64), meth);
        out = mcp_error(id, RPC_INVALID_REQUEST, msg, NULL);
    } else if (strcmp(meth, "tools/list") == 0) {
        if (cJSON_GetObjectItemCaseSensitive(params, "cursor"))
            out = mcp_error(id, RPC_BAD_PARAMS, "invalid cursor: the tool list has one page", NULL);
        else
            out = mcp_reply(id, mcp_tools_list());
    } else if (strcmp(meth, "tools/call") == 0) {
        if (!params)
            out = mcp_error(id, RPC_BAD_PARAMS, "tools/call needs params {name, arguments}", NULL);
        else
            out = mcp_tools_accept(id, params, call);
    } else {
        snprintf(msg, sizeof(msg), "method not found: %.*s", mcp_prec(meth, 100), meth);
        out = mcp_error(id, RPC_NO_METHOD, msg, NULL);
    }
done:
    cJSON_Delete(m);
    return out;
}
