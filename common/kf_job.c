#include "kf_job.h"
#include "kf_alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static const char *const kf_job_kind_names[] = {
    [KF_KIND_NONE] = "",
    [KF_KIND_GENERATE] = "generate",
    [KF_KIND_OPTIMIZE] = "optimize",
    [KF_KIND_PROFILE] = "profile",
    [KF_KIND_VALIDATE] = "validate",
    [KF_KIND_DIAG] = "diag",
};

const char *const kf_job_targets[] = { "trn1", "inf2", "trn2", "trn3", NULL };
const char *const kf_job_backends[] = { "sim", "neuron", "hybrid", "diag", NULL };
const char *const kf_job_states[] = { "queued", "running", "retrying", "succeeded", "failed", "cancelled", "dead", NULL };
const char *const kf_job_dtypes[] = { "float32", "bfloat16", "float16", "tfloat32", "float8_e4m3", "float8_e5m2",
                                      "float8_e4m3fn", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                                      "bool", NULL };
/* Bytes per element, by position in kf_job_dtypes (tfloat32 is stored in 4). */
static const unsigned char kf_job_dtype_bytes[] = { 4, 2, 2, 4, 1, 1, 1, 1, 1, 2, 2, 4, 4, 1 };
_Static_assert(sizeof(kf_job_dtype_bytes) == sizeof(kf_job_dtypes) / sizeof(kf_job_dtypes[0]) - 1,
               "one size per dtype");
static const char *const kf_job_kind_inputs[] = { "generate", "optimize", "profile", "validate", "diag", "auto", NULL };

/* The kind's own fields, per kind (NULL-terminated). */
static const char *const kf_job_fields_diag[] = { "sleep_ms", "fail", "crash", "exit_code", NULL };
static const char *const kf_job_fields_generate[] = { "op", "shapes", "dtype", "warm_start", "planner", "reference",
                                                      NULL };
static const char *const kf_job_fields_optimize[] = { "source", "entry", "reference", "inputs", "tunables", "planner",
                                                      NULL };
const char *const kf_job_planners[] = { "guided", "llm", NULL };
static const char *const kf_job_fields_profile[] = { "source", "entry", "inputs", NULL };
static const char *const kf_job_fields_validate[] = { "source", "entry", "reference", "inputs", NULL };

static const char *const *kf_job_kind_fields(kf_job_kind k)
{
    switch (k) {
    case KF_KIND_DIAG:
        return kf_job_fields_diag;
    case KF_KIND_GENERATE:
        return kf_job_fields_generate;
    case KF_KIND_OPTIMIZE:
        return kf_job_fields_optimize;
    case KF_KIND_PROFILE:
        return kf_job_fields_profile;
    case KF_KIND_VALIDATE:
        return kf_job_fields_validate;
    case KF_KIND_NONE:
        break;
    }
    return NULL;
}

const char *kf_job_kind_name(kf_job_kind k)
{
    if (k < KF_KIND_NONE || k > KF_KIND_DIAG)
        return "";
    return kf_job_kind_names[k];
}

kf_job_kind kf_job_kind_parse(const char *s)
{
    for (int k = KF_KIND_GENERATE; s && k <= KF_KIND_DIAG; k++)
        if (strcmp(s, kf_job_kind_names[k]) == 0)
            return (kf_job_kind)k;
    return KF_KIND_NONE;
}

static bool kf_str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static bool kf_in_list(const char *const *list, const char *s)
{
    for (size_t i = 0; s && list[i]; i++)
        if (strcmp(list[i], s) == 0)
            return true;
    return false;
}

bool kf_job_state_valid(const char *s)
{
    return kf_in_list(kf_job_states, s);
}

bool kf_job_state_terminal(const char *s)
{
    static const char *const terminal[] = { "succeeded", "failed", "cancelled", "dead", NULL };
    return kf_in_list(terminal, s);
}

bool kf_uuid_v7(char out[37])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    struct timespec ts;
    uint64_t ms;
    unsigned sub;
    int o = 0;

    out[0] = '\0';
    if (getrandom(b + 8, 8, 0) != 8)
        return false;
    clock_gettime(CLOCK_REALTIME, &ts);
    ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    sub = (unsigned)((uint64_t)(ts.tv_nsec % 1000000) * 4096u / 1000000u);   /* 12 bits */
    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(ms >> (40 - 8 * i));
    b[6] = (unsigned char)(0x70 | (sub >> 8));
    b[7] = (unsigned char)(sub & 0xff);
    b[8] = (unsigned char)(0x80 | (b[8] & 0x3f));
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[b[i] >> 4];
        out[o++] = hex[b[i] & 15];
    }
    out[o] = '\0';
    return true;
}

bool kf_uuid_valid(const char *s)
{
    if (!s || strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return false;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
            return false;
        }
    }
    return true;
}

/* ---- per-kind checks ------------------------------------------------------ */

/* Bytes per element of a dtype; 1 for a name that is not one (already
 * refused on its own). */
static uint64_t kf_job_dtype_size(const char *dtype)
{
    for (size_t i = 0; dtype && kf_job_dtypes[i]; i++)
        if (strcmp(kf_job_dtypes[i], dtype) == 0)
            return kf_job_dtype_bytes[i];
    return 1;
}

/* A shape: 1..8 dimensions, each an integer from 1 to KF_JOB_MAX_DIM, and
 * at most KF_JOB_MAX_TENSOR_BYTES in all as elements of elem_bytes each.
 * Each dimension is checked as the double it is (finite, whole, in range)
 * before it becomes an integer, and the product is bounded before each
 * multiplication, so nothing overflows or is undefined.  The tensor's
 * bytes go in *bytes when the shape is valid (true). */
static bool kf_job_check_shape(const cJSON *shape, const char *path, uint64_t elem_bytes, uint64_t *bytes,
                               kf_fields *fe)
{
    const cJSON *d;
    int n = cJSON_GetArraySize(shape), i = 0;
    uint64_t elems = 1;
    bool ok = true, fits = true;

    if (!cJSON_IsArray(shape)) {
        kf_fields_add(fe, path, "type", "must be an array of dimensions, e.g. [128, 512]");
        return false;
    }
    if (n < 1 || n > KF_JOB_MAX_DIMS) {
        kf_fields_add(fe, path, "count", "must have 1 to %d dimensions (got %d)", KF_JOB_MAX_DIMS, n);
        return false;
    }
    cJSON_ArrayForEach(d, shape)
    {
        char p[96];
        double v = cJSON_IsNumber(d) ? d->valuedouble : 0;
        uint64_t dim;

        kf_field_pathf(p, sizeof(p), "%s[%d]", path, i++);
        if (!cJSON_IsNumber(d) || (isfinite(v) && v != trunc(v))) {
            kf_fields_add(fe, p, "type", "a dimension must be an integer");
            ok = false;
            continue;
        }
        if (!isfinite(v) || v < 1 || v > (double)KF_JOB_MAX_DIM) {
            kf_fields_add(fe, p, "range", "a dimension must be between 1 and %lld", (long long)KF_JOB_MAX_DIM);
            ok = false;
            continue;
        }
        dim = (uint64_t)v;
        if (dim > KF_JOB_MAX_TENSOR_BYTES / elem_bytes / elems)
            fits = false;   /* elems * dim * elem_bytes would pass the limit */
        else
            elems *= dim;
    }
    if (ok && !fits)
        kf_fields_add(fe, path, "range",
                      "a tensor holds at most %llu bytes (%llu GiB: elements times the dtype's size); this shape "
                      "holds more",
                      (unsigned long long)KF_JOB_MAX_TENSOR_BYTES, (unsigned long long)(KF_JOB_MAX_TENSOR_BYTES >> 30));
    if (!ok || !fits)
        return false;
    *bytes = elems * elem_bytes;
    return true;
}

/* Add a tensor's bytes to the job's *total; a "range" error at path, once,
 * when the job's tensors hold more than KF_JOB_MAX_TENSOR_BYTES together
 * (*total then stays above the limit; neither sum can overflow). */
static void kf_job_add_bytes(uint64_t *total, uint64_t bytes, const char *path, kf_fields *fe)
{
    if (*total > KF_JOB_MAX_TENSOR_BYTES)
        return;
    if (bytes > KF_JOB_MAX_TENSOR_BYTES - *total) {
        *total = KF_JOB_MAX_TENSOR_BYTES + 1;
        kf_fields_add(fe, path, "range", "a job's tensors hold at most %llu bytes together (%llu GiB); these hold more",
                      (unsigned long long)KF_JOB_MAX_TENSOR_BYTES, (unsigned long long)(KF_JOB_MAX_TENSOR_BYTES >> 30));
        return;
    }
    *total += bytes;
}

static void kf_job_check_inputs(const cJSON *spec, const char *parent, bool required, kf_fields *fe)
{
    static const char *const allowed[] = { "shape", "dtype", NULL };
    const cJSON *inputs = NULL, *in;
    char path[96];
    int n;
    uint64_t total = 0;

    if (!kf_fields_obj(fe, spec, parent, "inputs", required, false, &inputs))
        return;
    kf_field_path(path, sizeof(path), parent, "inputs");
    n = cJSON_GetArraySize(inputs);
    if (n < 1 || n > KF_JOB_MAX_INPUTS) {
        kf_fields_add(fe, path, "count", "must name 1 to %d inputs (got %d)", KF_JOB_MAX_INPUTS, n);
        return;
    }
    cJSON_ArrayForEach(in, inputs)
    {
        char ip[96];
        const char *dtype = NULL;
        const cJSON *shape = NULL;

        kf_field_pathf(ip, sizeof(ip), "%s.%.*s", path, (int)kf_utf8_cut(in->string, strnlen(in->string, 60)),
                       in->string);
        if (!kf_ident_valid(in->string, 64, NULL)) {
            kf_fields_add(fe, ip, "pattern", "an input name must be a Python identifier of at most 64 bytes");
            continue;
        }
        if (!cJSON_IsObject(in)) {
            kf_fields_add(fe, ip, "type", "must be an object {\"shape\": [...], \"dtype\": \"...\"}");
            continue;
        }
        kf_fields_refuse_unknown(fe, in, ip, allowed);
        kf_fields_enum(fe, in, ip, "dtype", true, kf_job_dtypes, &dtype);
        if (kf_fields_obj(fe, in, ip, "shape", true, true, &shape)) {
            char sp[96];
            uint64_t bytes = 0;
            kf_field_pathf(sp, sizeof(sp), "%s.shape", ip);
            if (kf_job_check_shape(shape, sp, kf_job_dtype_size(dtype), &bytes, fe))
                kf_job_add_bytes(&total, bytes, path, fe);
        }
    }
}

/* A generate spec's warm_start, which the API adds from the kernel library
 * (docs/library.md): {"entry": an entry id (1..200 of [A-Za-z0-9_.-]),
 * "params": at most KF_JOB_MAX_TUNABLES identifiers to a number, boolean or
 * string of at most 64 bytes, "latency_ns": a number >= 0}. */
static void kf_job_check_warm(const cJSON *spec, const char *parent, kf_fields *fe)
{
    static const char *const allowed[] = { "entry", "params", "latency_ns", NULL };
    const cJSON *w = NULL, *p = NULL, *v;
    const char *entry = NULL;
    char path[96];
    double lat = 0;

    if (!kf_fields_obj(fe, spec, parent, "warm_start", false, false, &w) || !w)
        return;
    kf_field_path(path, sizeof(path), parent, "warm_start");
    kf_fields_refuse_unknown(fe, w, path, allowed);
    if (kf_fields_str(fe, w, path, "entry", true, 1, 200, &entry)) {
        for (const char *q = entry; *q; q++)
            if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_' ||
                  *q == '.' || *q == '-')) {
                char ep[112];
                kf_field_path(ep, sizeof(ep), path, "entry");
                kf_fields_add(fe, ep, "pattern", "a library entry id is 1 to 200 of [A-Za-z0-9_.-]");
                break;
            }
    }
    kf_fields_num(fe, w, path, "latency_ns", false, 0, 1e300, &lat);
    if (!kf_fields_obj(fe, w, path, "params", true, false, &p) || !p)
        return;
    if (cJSON_GetArraySize(p) > KF_JOB_MAX_TUNABLES) {
        char pp[112];
        kf_field_path(pp, sizeof(pp), path, "params");
        kf_fields_add(fe, pp, "count", "at most %d params", KF_JOB_MAX_TUNABLES);
        return;
    }
    cJSON_ArrayForEach(v, p)
    {
        /* finite: an overflowing number (1e400) reads as inf and would
         * print as null in the payload, which the worker then refuses */
        bool ok = kf_ident_valid(v->string, 64, NULL) &&
                  ((cJSON_IsNumber(v) && isfinite(v->valuedouble)) || cJSON_IsBool(v) ||
                   (cJSON_IsString(v) && strlen(v->valuestring) <= 64));
        if (!ok) {
            char pp[112];
            kf_field_path(pp, sizeof(pp), path, "params");
            kf_fields_add(fe, pp, "type",
                          "each param is an identifier naming a number, boolean or string of at most 64 bytes");
            break;
        }
    }
}

static void kf_job_check_tunables(const cJSON *spec, const char *parent, kf_fields *fe)
{
    const cJSON *tun = NULL, *t;
    char path[96];
    int n;

    if (!kf_fields_obj(fe, spec, parent, "tunables", false, false, &tun))
        return;
    kf_field_path(path, sizeof(path), parent, "tunables");
    n = cJSON_GetArraySize(tun);
    if (n > KF_JOB_MAX_TUNABLES) {
        kf_fields_add(fe, path, "count", "at most %d tunables (got %d)", KF_JOB_MAX_TUNABLES, n);
        return;
    }
    cJSON_ArrayForEach(t, tun)
    {
        char tp[96];
        const cJSON *v;
        int nv = cJSON_GetArraySize(t), vi = 0;

        kf_field_pathf(tp, sizeof(tp), "%s.%.*s", path, (int)kf_utf8_cut(t->string, strnlen(t->string, 60)),
                       t->string);
        if (!kf_ident_valid(t->string, 64, NULL)) {
            kf_fields_add(fe, tp, "pattern", "a tunable name must be a Python identifier of at most 64 bytes");
            continue;
        }
        if (!cJSON_IsArray(t)) {
            kf_fields_add(fe, tp, "type", "must be an array of candidate values");
            continue;
        }
        if (nv < 1 || nv > KF_JOB_MAX_TUNABLE_VALUES) {
            kf_fields_add(fe, tp, "count", "must list 1 to %d values (got %d)", KF_JOB_MAX_TUNABLE_VALUES, nv);
            continue;
        }
        cJSON_ArrayForEach(v, t)
        {
            bool ok = cJSON_IsNumber(v) || cJSON_IsBool(v) || (cJSON_IsString(v) && strlen(v->valuestring) <= 64);
            if (!ok) {
                kf_fields_add(fe, tp, "type", "values must be numbers, booleans or strings of at most 64 bytes");
                break;
            }
            /* 1e400 reads as infinity, which JSON cannot print: the stored
             * job would hold null, and the worker refuse it. */
            if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {
                char vp[96];
                kf_field_pathf(vp, sizeof(vp), "%s[%d]", tp, vi);
                kf_fields_add(fe, vp, "range", "a number must be finite (at most about 1.8e308 in magnitude)");
                break;
            }
            vi++;
        }
    }
}

static void kf_job_check_source(const cJSON *spec, const char *parent, bool want_reference,
                                bool reference_required, kf_fields *fe)
{
    const char *s = NULL;

    kf_fields_str(fe, spec, parent, "source", true, 1, KF_JOB_MAX_SOURCE_BYTES, &s);
    if (kf_fields_str(fe, spec, parent, "entry", true, 1, 128, &s) && !kf_ident_valid(s, 128, NULL)) {
        char p[96];
        kf_field_path(p, sizeof(p), parent, "entry");
        kf_fields_add(fe, p, "pattern", "must be the name of the kernel function (a Python identifier)");
    }
    if (want_reference)
        kf_fields_str(fe, spec, parent, "reference", reference_required, 1, KF_JOB_MAX_SOURCE_BYTES, &s);
}

void kf_job_spec_check(kf_job_kind kind, const cJSON *spec, const char *parent, kf_fields *fe)
{
    int64_t i64 = 0;
    bool b = false;
    const char *s = NULL;
    const cJSON *arr = NULL;

    switch (kind) {
    case KF_KIND_DIAG:
        kf_fields_int(fe, spec, parent, "sleep_ms", false, 0, KF_JOB_MAX_SLEEP_MS, &i64);
        kf_fields_bool(fe, spec, parent, "fail", false, &b);
        kf_fields_bool(fe, spec, parent, "crash", false, &b);
        kf_fields_int(fe, spec, parent, "exit_code", false, 0, 255, &i64);
        break;
    case KF_KIND_GENERATE:
        if (kf_fields_str(fe, spec, parent, "op", true, 1, 64, &s) && !kf_ident_valid(s, 64, NULL)) {
            char p[96];
            kf_field_path(p, sizeof(p), parent, "op");
            kf_fields_add(fe, p, "pattern", "must be an operator name such as \"rmsnorm\" ([A-Za-z_][A-Za-z0-9_]*)");
        }
        kf_fields_enum(fe, spec, parent, "dtype", true, kf_job_dtypes, &s);
        if (kf_fields_obj(fe, spec, parent, "shapes", true, true, &arr)) {
            char p[96];
            const cJSON *sh;
            int n = cJSON_GetArraySize(arr), i = 0;
            uint64_t total = 0, elem = kf_job_dtype_size(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "dtype")));
            kf_field_path(p, sizeof(p), parent, "shapes");
            if (n < 1 || n > KF_JOB_MAX_SHAPES) {
                kf_fields_add(fe, p, "count", "must list 1 to %d shapes (got %d)", KF_JOB_MAX_SHAPES, n);
                break;
            }
            cJSON_ArrayForEach(sh, arr)
            {
                char sp[96];
                uint64_t bytes = 0;
                kf_field_pathf(sp, sizeof(sp), "%s[%d]", p, i++);
                if (kf_job_check_shape(sh, sp, elem, &bytes, fe))
                    kf_job_add_bytes(&total, bytes, p, fe);
            }
        }
        kf_job_check_warm(spec, parent, fe);
        kf_fields_enum(fe, spec, parent, "planner", false, kf_job_planners, &s);
        /* write mode (docs/llm.md): the NumPy reference of an op the
         * library does not have, which only the LLM planner can use */
        if (kf_fields_str(fe, spec, parent, "reference", false, 1, KF_JOB_MAX_SOURCE_BYTES, &s) &&
            !kf_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "planner")), "llm")) {
            char p[96];
            kf_field_path(p, sizeof(p), parent, "reference");
            kf_fields_add(fe, p, "planner",
                          "a generate job's reference is for planner \"llm\", which writes an op the library does not "
                          "have");
        }
        break;
    case KF_KIND_OPTIMIZE:
        kf_job_check_source(spec, parent, true, true, fe);
        kf_job_check_inputs(spec, parent, true, fe);
        kf_job_check_tunables(spec, parent, fe);
        kf_fields_enum(fe, spec, parent, "planner", false, kf_job_planners, &s);
        break;
    case KF_KIND_PROFILE:
        kf_job_check_source(spec, parent, false, false, fe);
        kf_job_check_inputs(spec, parent, true, fe);
        break;
    case KF_KIND_VALIDATE:
        /* Validation compares the kernel's outputs with the reference's:
         * without one there is nothing to check (the worker refuses it). */
        kf_job_check_source(spec, parent, true, true, fe);
        kf_job_check_inputs(spec, parent, true, fe);
        break;
    case KF_KIND_NONE:
        break;
    }
    kf_fields_refuse_unknown(fe, spec, parent, kf_job_kind_fields(kind));
}

/* ---- the request ---------------------------------------------------------- */

/* "auto": the kind implied by the fields given. */
static kf_job_kind kf_job_guess_kind(const cJSON *src)
{
    if (cJSON_GetObjectItemCaseSensitive(src, "op"))
        return KF_KIND_GENERATE;
    if (cJSON_GetObjectItemCaseSensitive(src, "source"))
        return cJSON_GetObjectItemCaseSensitive(src, "reference") ? KF_KIND_OPTIMIZE : KF_KIND_PROFILE;
    if (cJSON_GetObjectItemCaseSensitive(src, "sleep_ms"))
        return KF_KIND_DIAG;
    return KF_KIND_NONE;
}

static cJSON *kf_job_build_spec(kf_job_kind kind, const cJSON *src)
{
    const char *const *names = kf_job_kind_fields(kind);
    cJSON *spec = cJSON_CreateObject();

    if (kind == KF_KIND_DIAG) {
        const cJSON *v;
        v = cJSON_GetObjectItemCaseSensitive(src, "sleep_ms");
        cJSON_AddNumberToObject(spec, "sleep_ms", cJSON_IsNumber(v) ? v->valuedouble : 0);
        cJSON_AddBoolToObject(spec, "fail", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(src, "fail")));
        cJSON_AddBoolToObject(spec, "crash", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(src, "crash")));
        v = cJSON_GetObjectItemCaseSensitive(src, "exit_code");
        cJSON_AddNumberToObject(spec, "exit_code", cJSON_IsNumber(v) ? v->valuedouble : 1);
        return spec;
    }
    for (size_t i = 0; names && names[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, names[i]);
        if (v && !cJSON_IsNull(v))
            cJSON_AddItemToObject(spec, names[i], cJSON_Duplicate(v, 1));
    }
    return spec;
}

static void kf_job_check_budget(const cJSON *body, kf_fields *fe, cJSON **out)
{
    static const char *const allowed[] = { "iterations", "seconds", "llm_tokens", NULL };
    const cJSON *b = NULL;
    int64_t iters = 20, secs = 900, tokens = 0;
    bool has_tokens = false;

    if (kf_fields_obj(fe, body, "", "budget", false, false, &b)) {
        kf_fields_refuse_unknown(fe, b, "budget", allowed);
        kf_fields_int(fe, b, "budget", "iterations", false, 1, 10000, &iters);
        kf_fields_int(fe, b, "budget", "seconds", false, 1, 86400, &secs);
        has_tokens = kf_fields_int(fe, b, "budget", "llm_tokens", false, 1, KF_JOB_MAX_LLM_TOKENS, &tokens);
    }
    *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(*out, "iterations", (double)iters);
    cJSON_AddNumberToObject(*out, "seconds", (double)secs);
    if (has_tokens)
        cJSON_AddNumberToObject(*out, "llm_tokens", (double)tokens);
}

static void kf_job_check_goal(const cJSON *body, kf_fields *fe, cJSON **out)
{
    static const char *const allowed[] = { "latency_ns", "fraction_of_bound", NULL };
    const cJSON *g = NULL;
    double lat = 0, frac = 0;
    bool has_lat = false, has_frac = false;

    *out = cJSON_CreateObject();
    if (!kf_fields_obj(fe, body, "", "goal", false, false, &g))
        return;
    kf_fields_refuse_unknown(fe, g, "goal", allowed);
    has_lat = kf_fields_num(fe, g, "goal", "latency_ns", false, 1, 1e15, &lat);
    has_frac = kf_fields_num(fe, g, "goal", "fraction_of_bound", false, 1e-6, 1.0, &frac);
    if (has_lat && has_frac)
        kf_fields_add(fe, "goal", "exclusive", "give either latency_ns or fraction_of_bound, not both");
    else if (has_lat)
        cJSON_AddNumberToObject(*out, "latency_ns", lat);
    else if (has_frac)
        cJSON_AddNumberToObject(*out, "fraction_of_bound", frac);
}

static void kf_job_check_labels(const cJSON *body, kf_fields *fe, cJSON **out)
{
    const cJSON *l = NULL, *c;
    int n;

    *out = cJSON_CreateObject();
    if (!kf_fields_obj(fe, body, "", "labels", false, false, &l))
        return;
    n = cJSON_GetArraySize(l);
    if (n > KF_JOB_MAX_LABELS) {
        kf_fields_add(fe, "labels", "count", "at most %d labels (got %d)", KF_JOB_MAX_LABELS, n);
        return;
    }
    cJSON_ArrayForEach(c, l)
    {
        char p[96];
        kf_field_pathf(p, sizeof(p), "labels.%.*s", (int)kf_utf8_cut(c->string, strnlen(c->string, 60)), c->string);
        if (!kf_ident_valid(c->string, 63, ".-/")) {
            kf_fields_add(fe, p, "pattern", "a label name is 1-63 bytes of [A-Za-z0-9_.-/] starting with a letter or _");
        } else if (!cJSON_IsString(c)) {
            kf_fields_add(fe, p, "type", "a label value must be a string");
        } else if (strlen(c->valuestring) > KF_JOB_MAX_LABEL_VALUE) {
            kf_fields_add(fe, p, "length", "a label value is at most %d bytes", KF_JOB_MAX_LABEL_VALUE);
        } else {
            cJSON_AddStringToObject(*out, c->string, c->valuestring);
        }
    }
}

bool kf_job_request_parse(const cJSON *body, int default_max_attempts, kf_job_request *req, kf_fields *fe)
{
    static const char *const envelope[] = { "kind", "target", "backend", "priority", "budget", "goal",
                                            "labels", "max_attempts", "spec", NULL };
    const char *kind_s = NULL, *target = NULL, *backend = NULL;
    const cJSON *src = body, *spec_obj = NULL;
    const char *spec_parent = "";
    int64_t priority = 5, max_attempts = default_max_attempts;
    kf_job_kind kind = KF_KIND_NONE;
    kf_job_request r;

    memset(req, 0, sizeof(*req));
    memset(&r, 0, sizeof(r));
    if (!cJSON_IsObject(body)) {
        kf_fields_add(fe, "", "type", "the body must be a JSON object");
        return false;
    }
    if (max_attempts < 1)
        max_attempts = 1;
    if (max_attempts > 20)
        max_attempts = 20;

    if (kf_fields_enum(fe, body, "", "kind", true, kf_job_kind_inputs, &kind_s)) {
        kind = kf_job_kind_parse(kind_s);
    }
    if (kf_fields_obj(fe, body, "", "spec", false, false, &spec_obj)) {
        src = spec_obj;
        spec_parent = "spec";
    }
    if (kind_s && strcmp(kind_s, "auto") == 0) {
        kind = kf_job_guess_kind(src);
        if (kind == KF_KIND_NONE)
            kf_fields_add(fe, "kind", "auto",
                          "kind \"auto\" needs op (generate), source (+reference: optimize) or sleep_ms (diag)");
    }
    kf_fields_enum(fe, body, "", "target", true, kf_job_targets, &target);
    if (kf_fields_enum(fe, body, "", "backend", false, kf_job_backends, &backend) && kind != KF_KIND_NONE) {
        bool is_diag = strcmp(backend, "diag") == 0;
        if (is_diag != (kind == KF_KIND_DIAG))
            kf_fields_add(fe, "backend", "enum",
                          kind == KF_KIND_DIAG ? "kind diag runs on backend diag"
                                               : "backend diag only runs kind diag; use sim or neuron");
        else if (strcmp(backend, "hybrid") == 0 && kind != KF_KIND_OPTIMIZE)
            kf_fields_add(fe, "backend", "enum",
                          "backend hybrid runs kind optimize with tunables (explored on the simulator, the best "
                          "confirmed on the device); use sim or neuron");
    }
    if (!backend)
        backend = kind == KF_KIND_DIAG ? "diag" : "sim";
    kf_fields_int(fe, body, "", "priority", false, 0, 9, &priority);
    kf_fields_int(fe, body, "", "max_attempts", false, 1, 20, &max_attempts);

    /* The kind's fields live either in "spec" or at the top level. */
    if (spec_obj) {
        kf_fields_refuse_unknown(fe, body, "", envelope);
    } else if (kind != KF_KIND_NONE) {
        const char *allowed[24];
        size_t n = 0;
        const char *const *kf = kf_job_kind_fields(kind);
        for (size_t i = 0; envelope[i]; i++)
            allowed[n++] = envelope[i];
        for (size_t i = 0; kf && kf[i]; i++)
            allowed[n++] = kf[i];
        allowed[n] = NULL;
        kf_fields_refuse_unknown(fe, body, "", allowed);
    }
    if (kind != KF_KIND_NONE) {
        /* Top-level checks already refused unknown names; the spec check
         * refuses the envelope's names when src is the body, so check a
         * copy without them. */
        if (spec_obj) {
            kf_job_spec_check(kind, src, spec_parent, fe);
        } else {
            cJSON *only = kf_job_build_spec(KF_KIND_NONE, src);
            const char *const *kf = kf_job_kind_fields(kind);
            for (size_t i = 0; kf && kf[i]; i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, kf[i]);
                if (v)
                    cJSON_AddItemToObject(only, kf[i], cJSON_Duplicate(v, 1));
            }
            kf_job_spec_check(kind, only, "", fe);
            cJSON_Delete(only);
        }
    }
    kf_job_check_budget(body, fe, &r.budget);
    /* The LLM planner runs in the sim backend's tuning loop (docs/llm.md). */
    if (backend && strcmp(backend, "sim") != 0 &&
        kf_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "planner")), "llm"))
        kf_fields_add(fe, spec_obj ? "spec.planner" : "planner", "backend",
                      "the LLM planner runs on the sim backend only; use \"backend\": \"sim\"");
    kf_job_check_goal(body, fe, &r.goal);
    kf_job_check_labels(body, fe, &r.labels);

    if (fe->n > 0 || fe->dropped > 0) {
        kf_job_request_release(&r);
        return false;
    }
    r.kind = kind;
    r.target = target;
    r.backend = backend;
    r.priority = (int)priority;
    r.max_attempts = (int)max_attempts;
    r.spec = kf_job_build_spec(kind, src);
    *req = r;
    return true;
}

void kf_job_request_release(kf_job_request *req)
{
    if (!req)
        return;
    cJSON_Delete(req->spec);
    cJSON_Delete(req->budget);
    cJSON_Delete(req->goal);
    cJSON_Delete(req->labels);
    memset(req, 0, sizeof(*req));
}

/* ---- the queue payload ---------------------------------------------------- */

/* Whether text looks like one JSON object: "{...}" around optional space. */
static bool kf_job_is_object_text(const char *text)
{
    size_t n;

    while (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r')
        text++;
    n = strlen(text);
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\t' || text[n - 1] == '\r'))
        n--;
    return n >= 2 && text[0] == '{' && text[n - 1] == '}';
}

char *kf_job_payload_build(const char *id, const char *kind, const char *target, const char *backend,
                           const char *spec_json, const char *budget_json, const char *goal_json, kf_err *err)
{
    const char *texts[3] = { spec_json ? spec_json : "{}", budget_json ? budget_json : "{}",
                             goal_json ? goal_json : "{}" };
    static const char *const names[3] = { "spec", "budget", "goal" };
    kf_buf b = KF_BUF_INIT;

    for (int i = 0; i < 3; i++) {
        if (!kf_job_is_object_text(texts[i])) {
            kf_err_set(err, KF_INVALID, "job %s: spec, budget and goal must be JSON objects (%s is not)", id, names[i]);
            return NULL;
        }
    }
    kf_buf_adds(&b, "{\"id\":");
    kf_json_add_str(&b, id);
    kf_buf_adds(&b, ",\"kind\":");
    kf_json_add_str(&b, kind);
    kf_buf_adds(&b, ",\"target\":");
    kf_json_add_str(&b, target);
    kf_buf_adds(&b, ",\"backend\":");
    kf_json_add_str(&b, backend);
    for (int i = 0; i < 3; i++) {
        kf_buf_addf(&b, ",\"%s\":", names[i]);
        kf_buf_adds(&b, texts[i]);
    }
    kf_buf_addc(&b, '}');
    return kf_buf_detach(&b);
}

kf_code kf_job_payload_parse(const char *json, kf_job_payload *out, kf_err *err)
{
    static const char *const allowed[] = { "id", "kind", "target", "backend", "spec", "budget", "goal", NULL };
    cJSON *root = NULL;
    kf_fields fe;
    const char *id = NULL, *kind_s = NULL, *target = NULL, *backend = NULL;
    const cJSON *spec = NULL, *budget = NULL, *goal = NULL;
    kf_code rc;

    memset(out, 0, sizeof(*out));
    kf_fields_init(&fe);
    rc = kf_json_parse(json, strlen(json), KF_JSON_MAX_DEPTH, &root, err);
    if (rc != KF_OK)
        return kf_err_wrap(err, "job payload");
    if (!cJSON_IsObject(root)) {
        rc = kf_err_set(err, KF_INVALID, "job payload must be a JSON object");
        goto out;
    }
    kf_fields_refuse_unknown(&fe, root, "", allowed);
    if (kf_fields_str(&fe, root, "", "id", true, 36, 36, &id) && !kf_uuid_valid(id))
        kf_fields_add(&fe, "id", "format", "must be a UUID");
    kf_fields_enum(&fe, root, "", "kind", true, kf_job_kind_inputs, &kind_s);
    kf_fields_enum(&fe, root, "", "target", true, kf_job_targets, &target);
    kf_fields_enum(&fe, root, "", "backend", true, kf_job_backends, &backend);
    kf_fields_obj(&fe, root, "", "spec", true, false, &spec);
    kf_fields_obj(&fe, root, "", "budget", true, false, &budget);
    kf_fields_obj(&fe, root, "", "goal", true, false, &goal);
    if (kind_s && kf_job_kind_parse(kind_s) == KF_KIND_NONE)
        kf_fields_add(&fe, "kind", "enum", "a queued job has a concrete kind");
    if (fe.n == 0)
        kf_job_spec_check(kf_job_kind_parse(kind_s), spec, "spec", &fe);
    if (fe.n > 0) {
        char sum[400];
        kf_fields_summary(&fe, sum, sizeof(sum));
        rc = kf_err_set(err, KF_INVALID, "job payload: %s", sum);
        goto out;
    }
    snprintf(out->id, sizeof(out->id), "%s", id);
    out->kind = kf_job_kind_parse(kind_s);
    snprintf(out->target, sizeof(out->target), "%s", target);
    snprintf(out->backend, sizeof(out->backend), "%s", backend);
    out->spec = cJSON_Duplicate(spec, 1);
    out->budget = cJSON_Duplicate(budget, 1);
    out->goal = cJSON_Duplicate(goal, 1);
    if (out->kind == KF_KIND_DIAG) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, "sleep_ms");
        out->diag.sleep_ms = cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
        out->diag.fail = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "fail"));
        out->diag.crash = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "crash"));
        v = cJSON_GetObjectItemCaseSensitive(spec, "exit_code");
        out->diag.exit_code = cJSON_IsNumber(v) ? (int)v->valuedouble : 1;
    }
    rc = KF_OK;
out:
    cJSON_Delete(root);
    return rc;
}

void kf_job_payload_release(kf_job_payload *p)
{
    if (!p)
        return;
    cJSON_Delete(p->spec);
    cJSON_Delete(p->budget);
    cJSON_Delete(p->goal);
    memset(p, 0, sizeof(*p));
}
