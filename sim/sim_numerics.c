/* sim_numerics — FP32 element arithmetic and tile matmul (see sim_numerics.h). */
#include "sim_numerics.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int kind;
} simn_ops[] = {
    { "none", 0 },
#define XX(id, name, kind) { name, kind },
    SIMN_OP_MAP(XX)
#undef XX
};

const char *simn_op_name(simn_op op)
{
    return (unsigned)op < SIMN_OP__COUNT ? simn_ops[op].name : "?";
}

int simn_op_kind(simn_op op)
{
    return (unsigned)op < SIMN_OP__COUNT ? simn_ops[op].kind : 0;
}

simn_op simn_op_binary(simn_op op)
{
    switch (op) {
    case SIMN_OP_SUM: case SIMN_OP_MEAN: case SIMN_OP_VAR: return SIMN_OP_ADD;
    case SIMN_OP_MAX: return SIMN_OP_MAXIMUM;
    case SIMN_OP_MIN: return SIMN_OP_MINIMUM;
    case SIMN_OP_PROD: return SIMN_OP_MULTIPLY;
    case SIMN_OP_ALL: return SIMN_OP_LOGICAL_AND;
    default: return simn_op_kind(op) == 2 ? op : SIMN_OP_NONE;
    }
}

float simn_op_identity(simn_op op)
{
    switch (simn_op_binary(op)) {
    case SIMN_OP_MAXIMUM: return -INFINITY;
    case SIMN_OP_MINIMUM: return INFINITY;
    case SIMN_OP_MULTIPLY: case SIMN_OP_LOGICAL_AND: return 1.0f;
    default: return 0.0f;
    }
}

static float b2f(bool x)
{
    return x ? 1.0f : 0.0f;
}

static int32_t as_int(float x)
{
    if (isnan(x))
        return 0;
    if (x >= 2147483647.0f)
        return INT32_MAX;
    if (x <= -2147483648.0f)
        return INT32_MIN;
    return (int32_t)x;
}

float simn_alu(simn_op op, float a, float b)
{
    switch (op) {
    case SIMN_OP_ADD: return a + b;
    case SIMN_OP_SUBTRACT: return a - b;
    case SIMN_OP_MULTIPLY: return a * b;
    case SIMN_OP_DIVIDE: return a / b;
    case SIMN_OP_MAXIMUM: return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    case SIMN_OP_MINIMUM: return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b);
    case SIMN_OP_POWER: return powf(a, b);
    case SIMN_OP_EQUAL: return b2f(a == b);
    case SIMN_OP_NOT_EQUAL: return b2f(a != b);
    case SIMN_OP_LESS: return b2f(a < b);
    case SIMN_OP_LESS_EQUAL: return b2f(a <= b);
    case SIMN_OP_GREATER: return b2f(a > b);
    case SIMN_OP_GREATER_EQUAL: return b2f(a >= b);
    case SIMN_OP_LOGICAL_AND: return b2f((a != 0) && (b != 0));
    case SIMN_OP_LOGICAL_OR: return b2f((a != 0) || (b != 0));
    case SIMN_OP_LOGICAL_XOR: return b2f((a != 0) != (b != 0));
    case SIMN_OP_BITWISE_AND: return (float)(as_int(a) & as_int(b));
    case SIMN_OP_BITWISE_OR: return (float)(as_int(a) | as_int(b));
    case SIMN_OP_BITWISE_XOR: return (float)(as_int(a) ^ as_int(b));
    case SIMN_OP_LEFT_SHIFT: return (float)(int32_t)((uint32_t)as_int(a) << (as_int(b) & 31));
    case SIMN_OP_RIGHT_SHIFT: return (float)(as_int(a) >> (as_int(b) & 31));
    case SIMN_OP_MOD: return fmodf(a, b);
    default: {
        simn_op bin = simn_op_binary(op);
        return bin != SIMN_OP_NONE && bin != op ? simn_alu(bin, a, b) : NAN;
    }
    }
}

bool simn_op_has_int(simn_op op)
{
    int64_t r;
    simn_op bin = simn_op_binary(op);
    return simn_alu_i64(bin != SIMN_OP_NONE ? bin : op, 1, 1, &r);
}

bool simn_alu_i64(simn_op op, int64_t a, int64_t b, int64_t *out)
{
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
    case SIMN_OP_ADD: *out = (int64_t)(ua + ub); return true;
    case SIMN_OP_SUBTRACT: *out = (int64_t)(ua - ub); return true;
    case SIMN_OP_MULTIPLY: *out = (int64_t)(ua * ub); return true;
    case SIMN_OP_MAXIMUM: *out = a > b ? a : b; return true;
    case SIMN_OP_MINIMUM: *out = a < b ? a : b; return true;
    case SIMN_OP_EQUAL: *out = a == b; return true;
    case SIMN_OP_NOT_EQUAL: *out = a != b; return true;
    case SIMN_OP_LESS: *out = a < b; return true;
    case SIMN_OP_LESS_EQUAL: *out = a <= b; return true;
    case SIMN_OP_GREATER: *out = a > b; return true;
    case SIMN_OP_GREATER_EQUAL: *out = a >= b; return true;
    case SIMN_OP_LOGICAL_AND: *out = a && b; return true;
    case SIMN_OP_LOGICAL_OR: *out = a || b; return true;
    case SIMN_OP_LOGICAL_XOR: *out = (a != 0) != (b != 0); return true;
    case SIMN_OP_BITWISE_AND: *out = (int64_t)(ua & ub); return true;
    case SIMN_OP_BITWISE_OR: *out = (int64_t)(ua | ub); return true;
    case SIMN_OP_BITWISE_XOR: *out = (int64_t)(ua ^ ub); return true;
    /* shifts act on the 32-bit register: left shift wraps, right shift is
     * arithmetic on the value (logical for values read from uint32) */
    case SIMN_OP_LEFT_SHIFT: *out = (int64_t)(int32_t)(uint32_t)((uint32_t)ua << (ub & 31)); return true;
    case SIMN_OP_RIGHT_SHIFT: *out = a >> (ub & 31); return true;
    case SIMN_OP_MOD:
        if (b == 0)
            return false;
        *out = (b == -1) ? 0 : a % b;   /* sign of the dividend, like fmodf */
        return true;
    default: {
        simn_op bin = simn_op_binary(op);
        return bin != SIMN_OP_NONE && bin != op && simn_alu_i64(bin, a, b, out);
    }
    }
}

float simn_act(simn_op op, float x)
{
    switch (op) {
    case SIMN_OP_COPY: case SIMN_OP_IDENTITY: return x;
    case SIMN_OP_EXP: return expf(x);
    case SIMN_OP_LOG: return logf(x);
    case SIMN_OP_SQRT: return sqrtf(x);
    case SIMN_OP_RSQRT: return 1.0f / sqrtf(x);
    case SIMN_OP_SQUARE: return x * x;
    case SIMN_OP_ABS: return fabsf(x);
    case SIMN_OP_NEGATIVE: return -x;
    case SIMN_OP_RECIPROCAL: return 1.0f / x;
    case SIMN_OP_TANH: return tanhf(x);
    case SIMN_OP_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case SIMN_OP_RELU: return x > 0 ? x : 0.0f;
    case SIMN_OP_SILU: return x / (1.0f + expf(-x));
    case SIMN_OP_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678f));
    case SIMN_OP_GELU_APPRX_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    case SIMN_OP_SIN: return sinf(x);
    case SIMN_OP_COS: return cosf(x);
    case SIMN_OP_SIGN: return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f;
    case SIMN_OP_ERF: return erff(x);
    case SIMN_OP_SOFTPLUS: return log1pf(expf(x));
    case SIMN_OP_CEIL: return ceilf(x);
    case SIMN_OP_FLOOR: return floorf(x);
    case SIMN_OP_TRUNC: return truncf(x);
    case SIMN_OP_ARCTAN: return atanf(x);
    /* GELU's sigmoid approximation x * sigmoid(1.702 x) and derivatives */
    case SIMN_OP_GELU_APPRX_SIGMOID: return x / (1.0f + expf(-1.702f * x));
    case SIMN_OP_GELU_APPRX_SIGMOID_DX: {
        float s = 1.0f / (1.0f + expf(-1.702f * x));
        return s + 1.702f * x * s * (1.0f - s);
    }
    case SIMN_OP_GELU_DX:   /* Phi(x) + x phi(x) */
        return 0.5f * (1.0f + erff(x * 0.70710678f)) + x * 0.39894228f * expf(-0.5f * x * x);
    case SIMN_OP_SILU_DX: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    case SIMN_OP_ERF_DX: return 1.12837917f * expf(-x * x);   /* 2 / sqrt(pi) */
    case SIMN_OP_MISH: return x * tanhf(log1pf(expf(x)));
    default: return NAN;
    }
}

void simn_alu_vec(simn_op op, const float *a, const float *b, int64_t b_stride, float *out,
                  int64_t n)
{
    switch (op) {
    case SIMN_OP_ADD:
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] + b[i * b_stride];
        return;
    case SIMN_OP_SUBTRACT:
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] - b[i * b_stride];
        return;
    case SIMN_OP_MULTIPLY:
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] * b[i * b_stride];
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            out[i] = simn_alu(op, a[i], b[i * b_stride]);
        return;
    }
}

void simn_act_vec(simn_op op, const float *x, float *out, int64_t n)
{
    if (op == SIMN_OP_EXP) {
        for (int64_t i = 0; i < n; i++)
            out[i] = expf(x[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = simn_act(op, x[i]);
}

/* OpenBLAS is loaded at run time (not linked) so that its core type can be
 * chosen first: its DYNAMIC_ARCH detection falls back to the SSE3
 * "Prescott" kernels on CPUs it does not know by model number (common in
 * VMs), about 6x slower than the AVX2/AVX-512 kernels those CPUs run.  When
 * OPENBLAS_CORETYPE is unset, the core type is picked from the CPU's
 * feature flags; setting it in the environment overrides the choice. */
typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                         const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                         const float, const float *, const blasint, const float *, const blasint,
                         const float, float *, const blasint);
typedef void (*threads_fn)(int);
typedef char *(*corename_fn)(void);

static sgemm_fn blas_sgemm;
static corename_fn blas_corename;
static int blas_state;   /* 0 not tried, 1 loaded, -1 failed */

static void sym_fn(void *h, const char *name, void *fn, size_t size)
{
    void *sym = h ? dlsym(h, name) : NULL;
    if (sym && size == sizeof(sym))
        memcpy(fn, &sym, size);
    else
        memset(fn, 0, size);
}

static const char *cpu_coretype(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;   /* let OpenBLAS decide */
}

int simn_init(void)
{
    static const char *const libs[] = { "libopenblas.so.0", "libopenblasp-r0.3.21.so",
                                        "libopenblas.so" };
    void *h = NULL;
    threads_fn set_threads;
    const char *core;

    if (blas_state)
        return blas_state > 0 ? 0 : -1;
    core = cpu_coretype();
    if (core && !getenv("OPENBLAS_CORETYPE"))
        setenv("OPENBLAS_CORETYPE", core, 0);
    /* One thread from the start: no idle pool spinning next to the tracer. */
    if (!getenv("OPENBLAS_NUM_THREADS"))
        setenv("OPENBLAS_NUM_THREADS", "1", 0);
    for (size_t i = 0; !h && i < sizeof(libs) / sizeof(libs[0]); i++)
        h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    /* POSIX: a function pointer from dlsym is copied, not cast */
    sym_fn(h, "cblas_sgemm", &blas_sgemm, sizeof(blas_sgemm));
    sym_fn(h, "openblas_set_num_threads", &set_threads, sizeof(set_threads));
    sym_fn(h, "openblas_get_corename", &blas_corename, sizeof(blas_corename));
    if (!blas_sgemm) {
        blas_state = -1;
        return -1;
    }
    if (set_threads)
        set_threads(1);
    blas_state = 1;
    return 0;
}

const char *simn_blas_name(void)
{
    if (blas_state <= 0)
        return "none";
    return blas_corename ? blas_corename() : "OpenBLAS";
}

void simn_matmul(int M, int N, int K, const float *A, int64_t lda, int trans_a, const float *B,
                 int64_t ldb, float *C, int64_t ldc, float beta)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || !blas_sgemm) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float acc = beta != 0.0f ? C[m * ldc + n] : 0.0f;
                for (int k = 0; k < K; k++)
                    acc += (trans_a ? A[m * lda + k] : A[k * lda + m]) * B[k * ldb + n];
                C[m * ldc + n] = acc;
            }
        return;
    }
    blas_sgemm(CblasRowMajor, trans_a ? CblasNoTrans : CblasTrans, CblasNoTrans, M, N, K, 1.0f, A,
               (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}
