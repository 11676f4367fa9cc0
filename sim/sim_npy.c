#include "sim_npy.h"
#include "kf_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- scalar codecs -------------------------------------------------- */

uint16_t sim_npy_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)            /* NaN: keep sign, quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);                  /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float sim_npy_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE-style binary minifloat with `eb` exponent bits and `mb` mantissa bits
 * (the all-ones exponent is Inf/NaN): float16 (5,10), float8_e5m2 (5,2),
 * float8_e4m3 (4,3, max 240, as Trainium's FP8_E4M3). */
static double mini_decode(uint32_t bits, int eb, int mb)
{
    int bias = (1 << (eb - 1)) - 1;
    uint32_t sign = (bits >> (eb + mb)) & 1u;
    uint32_t ex = (bits >> mb) & ((1u << eb) - 1u);
    uint32_t man = bits & ((1u << mb) - 1u);
    double v;

    if (ex == (1u << eb) - 1u)
        v = man ? NAN : INFINITY;
    else if (ex == 0)
        v = ldexp((double)man, 1 - bias - mb);
    else
        v = ldexp((double)(man + (1u << mb)), (int)ex - bias - mb);
    return sign ? -v : v;
}

static uint32_t mini_encode(float f, int eb, int mb)
{
    int bias = (1 << (eb - 1)) - 1;
    uint32_t sign = signbit(f) ? 1u << (eb + mb) : 0u;
    uint32_t exp_all = (1u << eb) - 1u;
    double a = fabs((double)f), q, r, maxv;
    int e;

    if (isnan(f))
        return sign | (exp_all << mb) | (1u << (mb - 1));
    maxv = ldexp((double)((2u << mb) - 1u), (int)exp_all - 1 - bias - mb);
    if (isinf(f))
        return sign | (exp_all << mb);
    if (a == 0.0)
        return sign;
    frexp(a, &e);                                  /* a = m * 2^e, m in [0.5,1) */
    if (e - 1 < 1 - bias)
        q = ldexp(1.0, 1 - bias - mb);             /* subnormal quantum */
    else
        q = ldexp(1.0, e - 1 - mb);
    r = rint(a / q) * q;                           /* exact scaling, RNE */
    if (r > maxv)
        return sign | (exp_all << mb);
    if (r < ldexp(1.0, 1 - bias))
        return sign | (uint32_t)(r / ldexp(1.0, 1 - bias - mb));
    frexp(r, &e);
    return sign | ((uint32_t)(e - 1 + bias) << mb) |
           ((uint32_t)(r / ldexp(1.0, e - 1 - mb)) - (1u << mb));
}

/* float8_e4m3fn (OCP): no infinities, S.1111.111 is NaN, max 448; values
 * that round past 448 become NaN, as ml_dtypes converts them. */
static double e4m3fn_decode(uint32_t bits)
{
    if ((bits & 0x7fu) == 0x7fu)
        return NAN;
    double v = (bits & 0x78u) ? ldexp((double)((bits & 7u) + 8u), (int)((bits >> 3) & 15u) - 7 - 3)
                              : ldexp((double)(bits & 7u), 1 - 7 - 3);
    return (bits & 0x80u) ? -v : v;
}

static uint32_t e4m3fn_encode(float f)
{
    uint32_t sign = signbit(f) ? 0x80u : 0u;
    double a = fabs((double)f);
    if (isnan(f) || a > 464.0)                     /* 464 = 448 + half an ulp (ties go to 448) */
        return sign | 0x7fu;
    if (a >= 248.0)                                /* exponent 8, which IEEE-style e4m3 reserves */
        return sign | (15u << 3) | ((unsigned)rint(a / 32.0) - 8u);
    return mini_encode(f, 4, 3);                   /* same bit patterns below 2^8 */
}

uint16_t sim_npy_f32_to_f16(float f)
{
    return (uint16_t)mini_encode(f, 5, 10);
}

float sim_npy_f16_to_f32(uint16_t h)
{
    return (float)mini_decode(h, 5, 10);
}

int sim_npy_dtype_is_float(sim_dtype dt)
{
    switch (dt) {
    case SIM_DT_FLOAT32: case SIM_DT_BFLOAT16: case SIM_DT_FLOAT16: case SIM_DT_TFLOAT32:
    case SIM_DT_FLOAT8_E4M3: case SIM_DT_FLOAT8_E5M2: case SIM_DT_FLOAT8_E4M3FN:
        return 1;
    default:
        return 0;
    }
}

double sim_npy_load_elem(sim_dtype dt, const void *data, uint64_t i)
{
    const unsigned char *p = (const unsigned char *)data + i * sim_dtype_size(dt);
    switch (dt) {
    case SIM_DT_FLOAT32: case SIM_DT_TFLOAT32: { float f; memcpy(&f, p, 4); return f; }
    case SIM_DT_BFLOAT16: { uint16_t h; memcpy(&h, p, 2); return sim_npy_bf16_to_f32(h); }
    case SIM_DT_FLOAT16: { uint16_t h; memcpy(&h, p, 2); return mini_decode(h, 5, 10); }
    case SIM_DT_FLOAT8_E4M3: return mini_decode(*p, 4, 3);
    case SIM_DT_FLOAT8_E5M2: return mini_decode(*p, 5, 2);
    case SIM_DT_FLOAT8_E4M3FN: return e4m3fn_decode(*p);
    case SIM_DT_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case SIM_DT_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case SIM_DT_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case SIM_DT_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case SIM_DT_INT8: return (int8_t)*p;
    case SIM_DT_UINT8: return *p;
    case SIM_DT_BOOL: return *p ? 1.0 : 0.0;
    default: return NAN;
    }
}

static double clampd(double v, double lo, double hi)
{
    if (isnan(v))
        return 0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

void sim_npy_store_elem(sim_dtype dt, void *data, uint64_t i, double v)
{
    unsigned char *p = (unsigned char *)data + i * sim_dtype_size(dt);
    float f = (float)v;
    switch (dt) {
    case SIM_DT_FLOAT32: case SIM_DT_TFLOAT32: memcpy(p, &f, 4); break;
    case SIM_DT_BFLOAT16: { uint16_t h = sim_npy_f32_to_bf16(f); memcpy(p, &h, 2); break; }
    case SIM_DT_FLOAT16: { uint16_t h = (uint16_t)mini_encode(f, 5, 10); memcpy(p, &h, 2); break; }
    case SIM_DT_FLOAT8_E4M3: *p = (unsigned char)mini_encode(f, 4, 3); break;
    case SIM_DT_FLOAT8_E5M2: *p = (unsigned char)mini_encode(f, 5, 2); break;
    case SIM_DT_FLOAT8_E4M3FN: *p = (unsigned char)e4m3fn_encode(f); break;
    case SIM_DT_INT32: { int32_t x = (int32_t)clampd(v, INT32_MIN, INT32_MAX); memcpy(p, &x, 4); break; }
    case SIM_DT_UINT32: { uint32_t x = (uint32_t)clampd(v, 0, UINT32_MAX); memcpy(p, &x, 4); break; }
    case SIM_DT_INT16: { int16_t x = (int16_t)clampd(v, INT16_MIN, INT16_MAX); memcpy(p, &x, 2); break; }
    case SIM_DT_UINT16: { uint16_t x = (uint16_t)clampd(v, 0, UINT16_MAX); memcpy(p, &x, 2); break; }
    case SIM_DT_INT8: *p = (unsigned char)(int8_t)clampd(v, INT8_MIN, INT8_MAX); break;
    case SIM_DT_UINT8: *p = (unsigned char)clampd(v, 0, UINT8_MAX); break;
    case SIM_DT_BOOL: *p = (v != 0.0 && !isnan(v)) ? 1 : 0; break;
    default: break;
    }
}

void sim_npy_load_f32(sim_dtype dt, const void *data, uint64_t i0, float *out, uint64_t n)
{
    if (dt == SIM_DT_FLOAT32 || dt == SIM_DT_TFLOAT32) {
        memcpy(out, (const float *)data + i0, n * sizeof(float));
    } else if (dt == SIM_DT_BFLOAT16) {
        const uint16_t *p = (const uint16_t *)data + i0;
        uint32_t *o = (uint32_t *)(void *)out;   /* float bits: the loop vectorizes */
        for (uint64_t i = 0; i < n; i++)
            o[i] = (uint32_t)p[i] << 16;
    } else {
        for (uint64_t i = 0; i < n; i++)
            out[i] = (float)sim_npy_load_elem(dt, data, i0 + i);
    }
}

void sim_npy_store_f32(sim_dtype dt, void *data, uint64_t i0, const float *in, uint64_t n)
{
    if (dt == SIM_DT_FLOAT32 || dt == SIM_DT_TFLOAT32) {
        memcpy((float *)data + i0, in, n * sizeof(float));
    } else if (dt == SIM_DT_BFLOAT16) {
        uint16_t *p = (uint16_t *)data + i0;
        const uint32_t *x = (const uint32_t *)(const void *)in;
        for (uint64_t i = 0; i < n; i++) {   /* sim_npy_f32_to_bf16 without a branch */
            uint32_t u = x[i];
            uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
            uint32_t quiet = (u >> 16) | 0x0040u;
            p[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
        }
    } else {
        for (uint64_t i = 0; i < n; i++)
            sim_npy_store_elem(dt, data, i0 + i, in[i]);
    }
}

void sim_npy_array_release(sim_npy_array *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof(*a));
}

int sim_npy_count(int ndim, const uint64_t *shape, unsigned itemsize, uint64_t max_bytes,
                  uint64_t *count)
{
    uint64_t n = 1;
    if (ndim < 0 || ndim > SIM_NPY_MAX_DIMS || itemsize == 0)
        return -1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && n > UINT64_MAX / shape[i])
            return -1;
        n *= shape[i];
    }
    if (n > max_bytes / itemsize)
        return -1;
    *count = n;
    return 0;
}

/* ---- header parsing --------------------------------------------------- */

/* File dtypes, including the two that are converted on read. */
typedef enum npy_kind {
    NPY_F4, NPY_F2, NPY_V2, NPY_V1, NPY_F8, NPY_I1, NPY_I2, NPY_I4, NPY_I8,
    NPY_U1, NPY_U2, NPY_U4, NPY_B1, NPY__N
} npy_kind;

static const struct {
    const char *code;      /* descr without the byte-order character */
    unsigned size;
    int sim;               /* native sim dtype, -1 when it must convert */
} npy_kinds[NPY__N] = {
    [NPY_F4] = { "f4", 4, SIM_DT_FLOAT32 },  [NPY_F2] = { "f2", 2, SIM_DT_FLOAT16 },
    [NPY_V2] = { "V2", 2, SIM_DT_BFLOAT16 }, [NPY_V1] = { "V1", 1, -1 },
    [NPY_F8] = { "f8", 8, -1 },               [NPY_I1] = { "i1", 1, SIM_DT_INT8 },
    [NPY_I2] = { "i2", 2, SIM_DT_INT16 },     [NPY_I4] = { "i4", 4, SIM_DT_INT32 },
    [NPY_I8] = { "i8", 8, -1 },               [NPY_U1] = { "u1", 1, SIM_DT_UINT8 },
    [NPY_U2] = { "u2", 2, SIM_DT_UINT16 },    [NPY_U4] = { "u4", 4, SIM_DT_UINT32 },
    [NPY_B1] = { "b1", 1, SIM_DT_BOOL },
};

typedef struct npy_hdr {
    char     descr[16];
    int      have_descr, have_order, have_shape;
    int      fortran;
    int      ndim;
    uint64_t shape[SIM_NPY_MAX_DIMS];
} npy_hdr;

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

static int eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string of printable ASCII, at most cap-1 bytes. */
static int parse_str(cursor *c, char *out, size_t cap)
{
    char q;
    size_t n = 0;
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return -1;
    q = *c->p++;
    while (c->p < c->end && *c->p != q) {
        if (*c->p < 0x20 || *c->p > 0x7e || *c->p == '\\' || n + 1 >= cap)
            return -1;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return -1;
    c->p++;
    out[n] = '\0';
    return 0;
}

static int parse_uint(cursor *c, uint64_t *v)
{
    uint64_t x = 0;
    int digits = 0;
    skip_ws(c);
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (++digits > 13)                 /* < 10^13 ~ 2^43; bounded again below */
            return -1;
        x = x * 10 + (uint64_t)(*c->p++ - '0');
    }
    if (!digits)
        return -1;
    if (x >= (1ull << 40))
        return -1;
    *v = x;
    return 0;
}

static const char *parse_header(const char *s, size_t n, npy_hdr *h)
{
    cursor c = { s, s + n };
    char key[32];

    memset(h, 0, sizeof(*h));
    if (!eat(&c, '{'))
        return "the header is not a Python dict literal";
    for (;;) {
        if (eat(&c, '}'))
            break;
        if (parse_str(&c, key, sizeof(key)) < 0)
            return "a header key is not a short quoted string";
        if (!eat(&c, ':'))
            return "a header key is not followed by ':'";
        if (strcmp(key, "descr") == 0 && !h->have_descr) {
            if (parse_str(&c, h->descr, sizeof(h->descr)) < 0)
                return "'descr' is not a simple dtype string (structured dtypes are not supported)";
            h->have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !h->have_order) {
            skip_ws(&c);
            if ((size_t)(c.end - c.p) >= 4 && memcmp(c.p, "True", 4) == 0) {
                h->fortran = 1;
                c.p += 4;
            } else if ((size_t)(c.end - c.p) >= 5 && memcmp(c.p, "False", 5) == 0) {
                c.p += 5;
            } else {
                return "'fortran_order' is neither True nor False";
            }
            h->have_order = 1;
        } else if (strcmp(key, "shape") == 0 && !h->have_shape) {
            if (!eat(&c, '('))
                return "'shape' is not a tuple";
            int trailing_comma = 0;
            while (!eat(&c, ')')) {
                if (h->ndim == SIM_NPY_MAX_DIMS)
                    return "'shape' has more than 8 dimensions";
                if (parse_uint(&c, &h->shape[h->ndim]) < 0)
                    return "a 'shape' entry is not an integer below 2^40";
                h->ndim++;
                trailing_comma = eat(&c, ',');
                if (!trailing_comma) {
                    if (!eat(&c, ')'))
                        return "'shape' entries are not separated by ','";
                    break;
                }
            }
            if (h->ndim == 1 && !trailing_comma)
                return "'shape' (N) is not a tuple; NumPy writes (N,)";
            h->have_shape = 1;
        } else {
            return "the header has an unknown or repeated key";
        }
        if (eat(&c, ','))
            continue;
        if (eat(&c, '}'))
            break;
        return "header entries are not separated by ','";
    }
    while (c.p < c.end && (*c.p == ' ' || *c.p == '\n' || *c.p == '\0'))
        c.p++;
    if (c.p != c.end)
        return "unexpected text after the header dict";
    if (!h->have_descr || !h->have_order || !h->have_shape)
        return "the header lacks 'descr', 'fortran_order' or 'shape'";
    return NULL;
}

static int descr_kind(const char *d, npy_kind *kind)
{
    char order = d[0];
    if (order != '<' && order != '|' && order != '=')
        return -1;
    for (int k = 0; k < NPY__N; k++)
        if (strcmp(d + 1, npy_kinds[k].code) == 0) {
            if (order == '|' && npy_kinds[k].size > 1 && d[1] != 'V')
                return -1;
            *kind = (npy_kind)k;
            return 0;
        }
    return -1;
}

static double kind_load(npy_kind k, const unsigned char *p)
{
    switch (k) {
    case NPY_F8: { double d; memcpy(&d, p, 8); return d; }
    case NPY_I8: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return sim_npy_load_elem((sim_dtype)npy_kinds[k].sim, p, 0);
    }
}

static int kind_is_float(npy_kind k)
{
    return k == NPY_F4 || k == NPY_F2 || k == NPY_V2 || k == NPY_F8;
}

/* Convert the payload of kind k to dtype `to`; ints must fit. */
static kf_code convert_payload(const unsigned char *src, npy_kind k, uint64_t count, sim_dtype to,
                               void *dst, const char *what, kf_err *err)
{
    unsigned sz = npy_kinds[k].size;
    int to_float = sim_npy_dtype_is_float(to);
    double lo = 0, hi = 0;

    if (!to_float) {
        switch (to) {
        case SIM_DT_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
        case SIM_DT_UINT32: lo = 0; hi = UINT32_MAX; break;
        case SIM_DT_INT16: lo = INT16_MIN; hi = INT16_MAX; break;
        case SIM_DT_UINT16: lo = 0; hi = UINT16_MAX; break;
        case SIM_DT_INT8: lo = INT8_MIN; hi = INT8_MAX; break;
        case SIM_DT_UINT8: case SIM_DT_BOOL: lo = 0; hi = UINT8_MAX; break;
        default: break;
        }
        if (kind_is_float(k))
            return kf_err_set(err, KF_INVALID,
                              "%s holds floating-point values but %s was asked for; "
                              "convert it with astype() in NumPy first",
                              what, sim_dtype_name(to));
    }
    for (uint64_t i = 0; i < count; i++) {
        double v = kind_load(k, src + i * sz);
        if (!to_float && (v < lo || v > hi || (to == SIM_DT_BOOL && v > 1)))
            return kf_err_set(err, KF_INVALID,
                              "%s: element %llu = %.17g does not fit in %s",
                              what, (unsigned long long)i, v, sim_dtype_name(to));
        sim_npy_store_elem(to, dst, i, v);
    }
    return KF_OK;
}

kf_code sim_npy_parse(const void *buf, size_t len, int want, uint64_t max_bytes,
                      const char *what, sim_npy_array *out, kf_err *err)
{
    const unsigned char *b = buf;
    size_t pre, hlen;
    npy_hdr h;
    npy_kind kind;
    const char *why;
    uint64_t count, payload;
    sim_dtype to;

    memset(out, 0, sizeof(*out));
    if (!what)
        what = "the .npy data";
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return kf_err_set(err, KF_INVALID, "%s is not a .npy file (no \\x93NUMPY magic)", what);
    if (b[6] == 1 && b[7] == 0) {
        pre = 10;
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if ((b[6] == 2 || b[6] == 3) && b[7] == 0) {
        pre = 12;
        if (len < pre)
            return kf_err_set(err, KF_INVALID, "%s is truncated inside the .npy preamble", what);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    } else {
        return kf_err_set(err, KF_INVALID,
                          "%s has .npy format version %u.%u; kforge reads 1.0, 2.0 and 3.0",
                          what, b[6], b[7]);
    }
    if (hlen == 0 || hlen > SIM_NPY_MAX_HEADER)
        return kf_err_set(err, KF_INVALID, "%s: header length %zu is outside 1..%d bytes",
                          what, hlen, SIM_NPY_MAX_HEADER);
    if (len - pre < hlen)
        return kf_err_set(err, KF_INVALID, "%s is truncated inside its header (%zu of %zu bytes)",
                          what, len - pre, hlen);
    why = parse_header((const char *)b + pre, hlen, &h);
    if (why)
        return kf_err_set(err, KF_INVALID, "%s: bad .npy header: %s", what, why);
    if (h.fortran)
        return kf_err_set(err, KF_INVALID,
                          "%s is in Fortran order; save it with np.save(path, np.ascontiguousarray(a))",
                          what);
    if (descr_kind(h.descr, &kind) < 0)
        return kf_err_set(err, KF_INVALID,
                          "%s has dtype '%s'; kforge reads little-endian f4 f2 f8 V2(bfloat16) "
                          "i1 i2 i4 i8 u1 u2 u4 b1 (convert with astype() first)",
                          what, h.descr);
    if (sim_npy_count(h.ndim, h.shape, npy_kinds[kind].size, max_bytes, &count) < 0)
        return kf_err_set(err, KF_TOO_LARGE,
                          "%s: its shape needs more than the %llu bytes allowed", what,
                          (unsigned long long)max_bytes);
    payload = count * npy_kinds[kind].size;
    if ((uint64_t)(len - pre - hlen) != payload)
        return kf_err_set(err, KF_INVALID,
                          "%s: the payload is %llu bytes but shape x itemsize = %llu bytes",
                          what, (unsigned long long)(len - pre - hlen),
                          (unsigned long long)payload);

    if (want >= 0) {
        if (want >= SIM_DT__COUNT)
            return kf_err_set(err, KF_INVALID, "%s: unknown dtype hint %d", what, want);
        to = (sim_dtype)want;
    } else if (kind == NPY_F8) {
        to = SIM_DT_FLOAT32;
    } else if (kind == NPY_I8) {
        to = SIM_DT_INT32;
    } else if (kind == NPY_V1) {
        return kf_err_set(err, KF_INVALID,
                          "%s holds 1-byte raw values ('V1'); say which fp8 it is, e.g. "
                          "x=%s:float8_e4m3", what, what);
    } else {
        to = (sim_dtype)npy_kinds[kind].sim;
    }

    out->dtype = to;
    out->ndim = h.ndim;
    memcpy(out->shape, h.shape, sizeof(h.shape));
    out->count = count;
    out->data = kf_malloc(count * sim_dtype_size(to) + 1);
    const unsigned char *src = b + pre + hlen;
    kf_code rc = KF_OK;
    if (kind == NPY_V1) {
        if (to != SIM_DT_FLOAT8_E4M3 && to != SIM_DT_FLOAT8_E5M2 && to != SIM_DT_FLOAT8_E4M3FN)
            rc = kf_err_set(err, KF_INVALID, "%s: 1-byte raw values can only be read as fp8", what);
        else
            memcpy(out->data, src, count);
    } else if (npy_kinds[kind].sim == (int)to) {
        memcpy(out->data, src, payload);
        if (to == SIM_DT_BOOL)
            for (uint64_t i = 0; i < count && rc == KF_OK; i++)
                if (src[i] > 1)
                    rc = kf_err_set(err, KF_INVALID, "%s: bool element %llu is %u, not 0 or 1",
                                    what, (unsigned long long)i, src[i]);
    } else if (kind == NPY_V2) {
        rc = to == SIM_DT_FLOAT32 || to == SIM_DT_FLOAT16 ? KF_OK
           : kf_err_set(err, KF_INVALID, "%s: bfloat16 values can only be read as a float dtype", what);
        if (rc == KF_OK)
            rc = convert_payload(src, kind, count, to, out->data, what, err);
    } else {
        rc = convert_payload(src, kind, count, to, out->data, what, err);
    }
    if (rc != KF_OK)
        sim_npy_array_release(out);
    return rc;
}

kf_code sim_npy_read(const char *path, int want, uint64_t max_bytes, sim_npy_array *out,
                     kf_err *err)
{
    struct stat st;
    unsigned char *buf = NULL;
    size_t got = 0;
    kf_code rc;
    int fd;

    memset(out, 0, sizeof(*out));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kf_err_set(err, KF_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kf_err_set(err, KF_IO, "'%s' is not a regular file", path);
    }
    /* header + payload: refuse before allocating anything large */
    if ((uint64_t)st.st_size > max_bytes + 12 + SIM_NPY_MAX_HEADER) {
        close(fd);
        return kf_err_set(err, KF_TOO_LARGE, "'%s' is %lld bytes, over the %llu bytes allowed",
                          path, (long long)st.st_size, (unsigned long long)max_bytes);
    }
    buf = kf_malloc((size_t)st.st_size + 1);
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = kf_err_set(err, KF_IO, "cannot read '%s': %s", path,
                            n < 0 ? strerror(errno) : "file shrank while reading");
            goto out;
        }
        got += (size_t)n;
    }
    rc = sim_npy_parse(buf, got, want, max_bytes, path, out, err);
out:
    close(fd);
    free(buf);
    return rc;
}

/* ---- writing -------------------------------------------------------- */

kf_code sim_npy_encode(kf_buf *out, sim_dtype dt, int ndim, const uint64_t *shape,
                       const void *data, unsigned flags, kf_err *err)
{
    kf_buf h = KF_BUF_INIT;
    const char *descr;
    sim_dtype file_dt = dt;
    uint64_t count;
    size_t pre, total;

    if ((unsigned)dt >= SIM_DT__COUNT)
        return kf_err_set(err, KF_INVALID, "cannot write dtype %d to .npy", (int)dt);
    if (sim_npy_count(ndim, shape, sim_dtype_size(dt), UINT64_MAX / 8, &count) < 0)
        return kf_err_set(err, KF_INVALID, "array shape is too large to write");
    switch (dt) {
    case SIM_DT_FLOAT32: case SIM_DT_TFLOAT32: descr = "<f4"; file_dt = SIM_DT_FLOAT32; break;
    case SIM_DT_FLOAT16: descr = "<f2"; break;
    case SIM_DT_BFLOAT16:
        descr = (flags & SIM_NPY_KEEP_DTYPE) ? "<V2" : "<f4";
        file_dt = (flags & SIM_NPY_KEEP_DTYPE) ? dt : SIM_DT_FLOAT32;
        break;
    case SIM_DT_FLOAT8_E4M3: case SIM_DT_FLOAT8_E5M2: case SIM_DT_FLOAT8_E4M3FN:
        descr = (flags & SIM_NPY_KEEP_DTYPE) ? "|V1" : "<f4";
        file_dt = (flags & SIM_NPY_KEEP_DTYPE) ? dt : SIM_DT_FLOAT32;
        break;
    case SIM_DT_INT32: descr = "<i4"; break;
    case SIM_DT_UINT32: descr = "<u4"; break;
    case SIM_DT_INT16: descr = "<i2"; break;
    case SIM_DT_UINT16: descr = "<u2"; break;
    case SIM_DT_INT8: descr = "|i1"; break;
    case SIM_DT_UINT8: descr = "|u1"; break;
    case SIM_DT_BOOL: descr = "|b1"; break;
    default: return kf_err_set(err, KF_INVALID, "cannot write dtype %s to .npy", sim_dtype_name(dt));
    }

    kf_buf_addf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < ndim; i++)
        kf_buf_addf(&h, "%llu,%s", (unsigned long long)shape[i], i + 1 < ndim ? " " : "");
    kf_buf_adds(&h, "), }");
    pre = h.len + 1 + 10 <= 65535 ? 10 : 12;
    total = (pre + h.len + 1 + 63) / 64 * 64;   /* padded with spaces, ends in '\n' */
    while (pre + h.len + 1 < total)
        kf_buf_addc(&h, ' ');
    kf_buf_addc(&h, '\n');

    size_t hl = h.len;
    unsigned char pre_b[12] = { 0x93, 'N', 'U', 'M', 'P', 'Y', pre == 10 ? 1 : 2, 0,
                                (unsigned char)hl, (unsigned char)(hl >> 8),
                                (unsigned char)(hl >> 16), (unsigned char)(hl >> 24) };
    kf_buf_add(out, pre_b, pre);
    kf_buf_add(out, h.data, h.len);
    kf_buf_release(&h);

    size_t isz = sim_dtype_size(file_dt);
    if (file_dt == dt) {
        kf_buf_add(out, data, count * isz);
    } else {
        kf_buf_grow(out, count * isz);
        unsigned char *dst = (unsigned char *)out->data + out->len;
        if (file_dt == SIM_DT_FLOAT32) {   /* float dtypes widened: blocks through the bulk codec */
            float blk[4096];
            for (uint64_t i0 = 0; i0 < count; i0 += 4096) {
                uint64_t n = count - i0 < 4096 ? count - i0 : 4096;
                sim_npy_load_f32(dt, data, i0, blk, n);
                memcpy(dst + i0 * 4, blk, n * 4);
            }
        } else {
            for (uint64_t i = 0; i < count; i++)
                sim_npy_store_elem(file_dt, dst, i, sim_npy_load_elem(dt, data, i));
        }
        out->len += count * isz;
        out->data[out->len] = '\0';
    }
    return KF_OK;
}

kf_code sim_npy_write(const char *path, sim_dtype dt, int ndim, const uint64_t *shape,
                      const void *data, unsigned flags, kf_err *err)
{
    kf_buf b = KF_BUF_INIT;
    kf_code rc = sim_npy_encode(&b, dt, ndim, shape, data, flags, err);
    FILE *f = NULL;

    if (rc != KF_OK)
        goto out;
    f = fopen(path, "wb");
    if (!f) {
        rc = kf_err_set(err, KF_IO, "cannot create '%s': %s", path, strerror(errno));
        goto out;
    }
    if (fwrite(b.data, 1, b.len, f) != b.len) {
        rc = kf_err_set(err, KF_IO, "cannot write '%s': %s", path, strerror(errno));
        goto out;
    }
    if (fclose(f) != 0) {
        f = NULL;
        rc = kf_err_set(err, KF_IO, "cannot write '%s': %s", path, strerror(errno));
        goto out;
    }
    f = NULL;
out:
    if (f)
        fclose(f);
    kf_buf_release(&b);
    return rc;
}
