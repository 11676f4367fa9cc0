#include "sim_input.h"
#include "kf_alloc.h"
#include "sim_core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sim_rng_seed(sim_rng *g, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        g->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t sim_rng_next(sim_rng *g)
{
    uint64_t *s = g->s;
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double unit(sim_rng *g)
{
    return (double)(sim_rng_next(g) >> 11) * 0x1.0p-53;
}

void sim_random_spec_default(sim_random_spec *r)
{
    memset(r, 0, sizeof(*r));
    r->dist = SIM_DIST_NORMAL;
    r->std = 1.0;
    r->lo = -1.0;
    r->hi = 1.0;
}

static const struct {
    const char *alias;
    sim_dtype dt;
} dtype_aliases[] = {
    { "fp32", SIM_DT_FLOAT32 }, { "f32", SIM_DT_FLOAT32 }, { "bf16", SIM_DT_BFLOAT16 },
    { "fp16", SIM_DT_FLOAT16 }, { "f16", SIM_DT_FLOAT16 }, { "half", SIM_DT_FLOAT16 },
    { "fp8_e4m3", SIM_DT_FLOAT8_E4M3 }, { "fp8_e5m2", SIM_DT_FLOAT8_E5M2 },
    { "fp8_e4m3fn", SIM_DT_FLOAT8_E4M3FN },
    { "bool", SIM_DT_BOOL }, { "tf32", SIM_DT_TFLOAT32 },
};

int sim_input_dtype(const char *s)
{
    for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++)
        if (strcmp(s, dtype_aliases[i].alias) == 0)
            return dtype_aliases[i].dt;
    return sim_dtype_from_name(s);
}

kf_code sim_input_random(sim_dtype dt, int ndim, const uint64_t *shape,
                         const sim_random_spec *r, uint64_t max_bytes, sim_npy_array *out,
                         kf_err *err)
{
    sim_rng g;
    uint64_t count;
    int is_float = sim_npy_dtype_is_float(dt);
    double lo = r->lo, hi = r->hi;

    memset(out, 0, sizeof(*out));
    if ((unsigned)dt >= SIM_DT__COUNT)
        return kf_err_set(err, KF_INVALID, "unknown dtype %d", (int)dt);
    if (sim_npy_count(ndim, shape, sim_dtype_size(dt), max_bytes, &count) < 0)
        return kf_err_set(err, KF_TOO_LARGE,
                          "the shape needs more than the %llu bytes allowed for one input",
                          (unsigned long long)max_bytes);
    if (!is_float) {
        int is_signed = dt == SIM_DT_INT8 || dt == SIM_DT_INT16 || dt == SIM_DT_INT32;
        if (!r->have_lo)
            lo = is_signed ? -8 : 0;
        if (!r->have_hi)
            hi = dt == SIM_DT_BOOL ? 1 : is_signed ? 8 : 16;
        lo = ceil(lo);
        hi = floor(hi);
    }
    if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi))
        return kf_err_set(err, KF_INVALID, "random range lo=%g hi=%g is empty; need lo <= hi", lo, hi);

    out->dtype = dt;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        out->shape[i] = shape[i];
    out->count = count;
    out->data = simc_big_alloc(count * sim_dtype_size(dt) + 1);
    sim_rng_seed(&g, r->seed);

    if (!is_float) {
        double span = hi - lo + 1;
        for (uint64_t i = 0; i < count; i++)
            sim_npy_store_elem(dt, out->data, i, lo + floor(unit(&g) * span));
    } else {
        /* blocks of float32 values, stored with the bulk codec */
        float blk[4096];
        for (uint64_t i0 = 0; i0 < count; i0 += 4096) {
            uint64_t n = count - i0 < 4096 ? count - i0 : 4096;
            if (r->dist == SIM_DIST_UNIFORM) {
                for (uint64_t i = 0; i < n; i++)
                    blk[i] = (float)(lo + (hi - lo) * unit(&g));
            } else {
                for (uint64_t i = 0; i < n; i += 2) {   /* 4096 is even: pairs stay in one block */
                    double u1 = 1.0 - unit(&g), u2 = unit(&g);
                    double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
                    blk[i] = (float)(r->mean + r->std * rad * cos(th));
                    if (i + 1 < n)
                        blk[i + 1] = (float)(r->mean + r->std * rad * sin(th));
                }
            }
            sim_npy_store_f32(dt, out->data, i0, blk, n);
        }
    }
    return KF_OK;
}

static int parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return (errno || end == s || *end || !isfinite(*v)) ? -1 : 0;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    *v = strtoull(s, &end, 10);
    return (errno || *end) ? -1 : 0;
}

static kf_code parse_shape(const char *s, const char *spec, int *ndim, uint64_t *shape, kf_err *err)
{
    char buf[256];
    char *tok, *save = NULL;

    *ndim = 0;
    if (strcmp(s, "scalar") == 0)
        return KF_OK;
    if (strlen(s) >= sizeof(buf) || !*s)
        return kf_err_set(err, KF_INVALID, "input '%s': the shape must look like 4096x512", spec);
    memcpy(buf, s, strlen(s) + 1);
    for (tok = strtok_r(buf, "x", &save); tok; tok = strtok_r(NULL, "x", &save)) {
        uint64_t d;
        if (*ndim == SIM_NPY_MAX_DIMS)
            return kf_err_set(err, KF_INVALID, "input '%s': at most %d dimensions", spec,
                              SIM_NPY_MAX_DIMS);
        if (parse_u64(tok, &d) < 0 || d == 0 || d >= (1ull << 40))
            return kf_err_set(err, KF_INVALID,
                              "input '%s': dimension '%s' must be a positive integer (shape like 4096x512)",
                              spec, tok);
        shape[(*ndim)++] = d;
    }
    if (*ndim == 0)
        return kf_err_set(err, KF_INVALID, "input '%s': the shape must look like 4096x512", spec);
    return KF_OK;
}

static int valid_name(const char *s, size_t n)
{
    if (n == 0 || n >= 64 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return 0;
    }
    return 1;
}

kf_code sim_input_parse(const char *spec, uint64_t seed_offset, uint64_t max_bytes, char **name,
                        sim_npy_array *out, kf_err *err)
{
    const char *eq = strchr(spec, '=');
    char *body = NULL, *tok, *save = NULL;
    kf_code rc = KF_OK;

    *name = NULL;
    memset(out, 0, sizeof(*out));
    if (!eq || !valid_name(spec, (size_t)(eq - spec)))
        return kf_err_set(err, KF_INVALID,
                          "input '%s' must be NAME=FILE.npy or NAME=shape:4096x512:bf16:seed=1 "
                          "(NAME a Python identifier)", spec);
    body = kf_strdup(eq + 1);

    if (strncmp(body, "shape:", 6) != 0) {
        /* FILE[:DTYPE] — the dtype suffix only when what follows the last
         * ':' names a dtype, so paths with ':' still work. */
        char *colon = strrchr(body, ':');
        int want = -1;
        if (colon && sim_input_dtype(colon + 1) >= 0) {
            want = sim_input_dtype(colon + 1);
            *colon = '\0';
        }
        rc = sim_npy_read(body, want, max_bytes, out, err);
        if (rc != KF_OK)
            kf_err_wrap(err, "input '%.*s'", (int)(eq - spec), spec);
        goto out;
    }

    int ndim = 0, dt = -1;
    uint64_t shape[SIM_NPY_MAX_DIMS];
    sim_random_spec r;
    sim_random_spec_default(&r);
    int field = 0;
    for (tok = strtok_r(body + 6, ":", &save); tok; tok = strtok_r(NULL, ":", &save), field++) {
        char *v = strchr(tok, '=');
        if (field == 0) {
            rc = parse_shape(tok, spec, &ndim, shape, err);
            if (rc != KF_OK)
                goto out;
            continue;
        }
        if (field == 1 && !v) {
            dt = sim_input_dtype(tok);
            if (dt < 0) {
                rc = kf_err_set(err, KF_INVALID,
                                "input '%s': unknown dtype '%s' (float32, bf16, float16, int8, ...)",
                                spec, tok);
                goto out;
            }
            continue;
        }
        if (!v) {
            rc = kf_err_set(err, KF_INVALID, "input '%s': '%s' is not KEY=VALUE", spec, tok);
            goto out;
        }
        *v++ = '\0';
        double d = 0;
        int bad = 0;
        if (strcmp(tok, "seed") == 0)
            bad = parse_u64(v, &r.seed);
        else if (strcmp(tok, "dist") == 0) {
            if (strcmp(v, "normal") == 0)
                r.dist = SIM_DIST_NORMAL;
            else if (strcmp(v, "uniform") == 0)
                r.dist = SIM_DIST_UNIFORM;
            else
                bad = 1;
        } else if (strcmp(tok, "mean") == 0 && !(bad = parse_double(v, &d)))
            r.mean = d;
        else if (strcmp(tok, "std") == 0 && !(bad = parse_double(v, &d)) && d >= 0)
            r.std = d;
        else if (strcmp(tok, "lo") == 0 && !(bad = parse_double(v, &d))) {
            r.lo = d;
            r.have_lo = 1;
        } else if (strcmp(tok, "hi") == 0 && !(bad = parse_double(v, &d))) {
            r.hi = d;
            r.have_hi = 1;
        } else
            bad = 1;
        if (bad) {
            rc = kf_err_set(err, KF_INVALID,
                            "input '%s': bad option '%s=%s' (seed=N, dist=normal|uniform, "
                            "mean=, std=, lo=, hi=)", spec, tok, v);
            goto out;
        }
    }
    if (dt < 0) {
        rc = kf_err_set(err, KF_INVALID, "input '%s': give a dtype after the shape, e.g. shape:128x512:bf16",
                        spec);
        goto out;
    }
    if ((r.have_lo || r.have_hi) && sim_npy_dtype_is_float((sim_dtype)dt) && r.dist == SIM_DIST_NORMAL &&
        !strstr(eq, "dist=normal"))
        r.dist = SIM_DIST_UNIFORM;   /* lo/hi given: the user means a uniform range */
    r.seed += seed_offset;
    rc = sim_input_random((sim_dtype)dt, ndim, shape, &r, max_bytes, out, err);
    if (rc != KF_OK)
        kf_err_wrap(err, "input '%s'", spec);
out:
    free(body);
    if (rc == KF_OK)
        *name = kf_strndup(spec, (size_t)(eq - spec));
    return rc;
}

kf_code sim_input_array(const char *spec, uint64_t max_bytes, sim_array *out, kf_err *err)
{
    sim_npy_array arr;
    char *name = NULL;
    kf_code rc;

    memset(out, 0, sizeof(*out));
    rc = sim_input_parse(spec, 0, max_bytes, &name, &arr, err);
    if (rc != KF_OK)
        return rc;
    snprintf(out->name, sizeof(out->name), "%s", name);
    free(name);
    out->dtype = arr.dtype;
    out->ndim = arr.ndim;
    for (int d = 0; d < arr.ndim; d++)
        out->shape[d] = (int64_t)arr.shape[d];
    out->data = arr.data;
    return KF_OK;
}
