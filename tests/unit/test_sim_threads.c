/* The simulator's numerics threads (sim_numerics.h): values are
 * bit-identical for any thread count — tile products and vector calls
 * directly, then whole kernels (the optimized matmul and the library
 * softmax) run with 1 and 2 threads and compared byte for byte — and the
 * products are still right (against a double-precision reference). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/nki_mmq.h"
#include "sim/sim_core.h"
#include "sim/sim_input.h"
#include "sim/sim_numerics.h"
#include "sim/sim_run.h"

/* Bit-for-bit equality of float arrays (NaNs included). */
static bool same_bits(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x != y)
            return false;
    }
    return true;
}

static float *rand_floats(size_t n, uint32_t seed)
{
    float *p = malloc(n * sizeof(float));
    uint32_t x = seed * 2654435761u + 1;
    cr_assert(p);
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float)(x >> 8) / 16777216.0f - 0.5f;   /* full 24-bit mantissas */
    }
    return p;
}

/* C = A^T B (+ C) with 1 and with 2 threads, same bits; close to a double reference. */
static void check_matmul(int M, int N, int K, int trans_a, float beta)
{
    float *A = rand_floats((size_t)M * K, 1), *B = rand_floats((size_t)K * N, 2);
    float *C0 = rand_floats((size_t)M * N, 3);
    float *C1 = malloc((size_t)M * N * sizeof(float)), *C2 = malloc((size_t)M * N * sizeof(float));
    int64_t lda = trans_a ? K : M;

    cr_assert(C1 && C2);
    memcpy(C1, C0, (size_t)M * N * sizeof(float));
    memcpy(C2, C0, (size_t)M * N * sizeof(float));
    cr_assert_eq(simn_set_threads(1), 1);
    simn_matmul(M, N, K, A, lda, trans_a, B, N, C1, N, beta);
    cr_assert_eq(simn_set_threads(2), 2, "a second thread could not be started");
    simn_matmul(M, N, K, A, lda, trans_a, B, N, C2, N, beta);
    simn_stop_threads();
    cr_assert(same_bits(C1, C2, (size_t)M * N),
                 "M=%d N=%d K=%d trans_a=%d beta=%g: 1 and 2 threads differ", M, N, K, trans_a,
                 (double)beta);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double want = beta != 0.0f ? C0[m * N + n] : 0.0;
            for (int k = 0; k < K; k++)
                want += (double)(trans_a ? A[m * K + k] : A[k * M + m]) * B[k * N + n];
            cr_assert(fabs(C2[m * N + n] - want) <= 1e-4 * (1.0 + fabs(want)),
                      "C[%d,%d] = %g, want %g", m, n, (double)C2[m * N + n], want);
        }
    free(A);
    free(B);
    free(C0);
    free(C1);
    free(C2);
}

Test(sim_threads, tile_products_same_bits_for_1_and_2_threads)
{
    cr_assert_eq(simn_init(), 0, "OpenBLAS could not be loaded");
    check_matmul(128, 512, 128, 0, 0.0f);
    check_matmul(128, 512, 128, 0, 1.0f);
    check_matmul(128, 384, 96, 1, 1.0f);
    check_matmul(64, 500, 128, 0, 0.0f);   /* a partial column block */
}

Test(sim_threads, vector_calls_same_bits_for_1_and_2_threads)
{
    const int64_t n = 200003;
    float *x = rand_floats((size_t)n, 4), *y = rand_floats((size_t)n, 5);
    float *o1 = malloc((size_t)n * sizeof(float)), *o2 = malloc((size_t)n * sizeof(float));
    static const simn_op unary[] = { SIMN_OP_EXP, SIMN_OP_GELU, SIMN_OP_RSQRT,
                                     SIMN_OP_RECIPROCAL, SIMN_OP_SQUARE, SIMN_OP_COPY };
    static const simn_op binary[] = { SIMN_OP_ADD, SIMN_OP_DIVIDE, SIMN_OP_MAXIMUM,
                                      SIMN_OP_MINIMUM, SIMN_OP_SUBTRACT, SIMN_OP_POWER };

    cr_assert(o1 && o2);
    x[7] = NAN;   /* maximum/minimum propagate NaN */
    y[9] = NAN;
    for (size_t i = 0; i < sizeof(unary) / sizeof(unary[0]); i++) {
        simn_set_threads(1);
        simn_act_vec(unary[i], x, o1, n);
        cr_assert_eq(simn_set_threads(2), 2);
        simn_act_vec(unary[i], x, o2, n);
        cr_assert(same_bits(o1, o2, (size_t)n), "%s", simn_op_name(unary[i]));
        for (int64_t k = 0; k < n; k += k < 16 ? 1 : 997) {   /* bits: rsqrt of a negative is NaN */
            float want = simn_act(unary[i], x[k]);
            cr_assert(same_bits(&o2[k], &want, 1), "%s(%g)", simn_op_name(unary[i]), (double)x[k]);
        }
        simn_set_threads(1);
        simn_alu_vec(binary[i], x, y, 1, o1, n);
        simn_set_threads(2);
        simn_alu_vec(binary[i], x, y, 1, o2, n);
        cr_assert(same_bits(o1, o2, (size_t)n), "%s", simn_op_name(binary[i]));
        simn_alu_vec(binary[i], x, y, 0, o2, n);   /* broadcast operand */
        for (int64_t k = 0; k < n; k += k < 16 ? 1 : 997) {
            float want = simn_alu(binary[i], x[k], y[0]);
            cr_assert(same_bits(&o2[k], &want, 1), "%s", simn_op_name(binary[i]));
        }
    }
    simn_stop_threads();
    cr_assert_eq(simn_threads(), 1);
    free(x);
    free(y);
    free(o1);
    free(o2);
}

Test(sim_threads, default_count_is_the_cpus_available)
{
    int n = simn_default_threads();
    cr_assert(n >= 1 && n <= SIMN_MAX_THREADS);
    cr_assert_eq(simn_set_threads(0), n);
    cr_assert_eq(simn_set_threads(SIMN_MAX_THREADS + 5), SIMN_MAX_THREADS);
    simn_stop_threads();
}

/* Runs entry of path (inputs as --input specs) with `threads` threads; returns its one output. */
static sim_array run_kernel(const char *path, const char *entry, const char *kwargs,
                            const char *const *specs, size_t n, int threads)
{
    sim_array in[2], *outs = NULL, out;
    size_t n_outs = 0;
    sim_record rec;
    sim_error serr;
    sim_run_opts o;
    kf_err e = KF_ERR_INIT;
    char msg[1024];

    memset(in, 0, sizeof(in));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sim_input_array(specs[i], 1ull << 32, &in[i], &e), KF_OK, "%s", e.msg);
    memset(&o, 0, sizeof(o));
    o.source_path = path;
    o.entry = entry;
    o.target = "trn2";
    o.numerics = true;
    o.threads = threads;
    o.kwargs_json = kwargs;
    sim_record_init(&rec, "trn2");
    sim_error_clear(&serr);
    kf_code rc = sim_run_kernel(&o, in, n, &outs, &n_outs, &rec, &serr, &e);
    sim_error_format(&serr, msg, sizeof(msg));
    cr_assert_eq(rc, KF_OK, "%s %s: %s (%s)", path, entry, e.msg, msg);
    cr_assert_eq(n_outs, 1);
    cr_assert_eq(simn_threads(), 1, "the run left its worker threads running");
    out = outs[0];
    free(outs);
    for (size_t i = 0; i < n; i++)
        sim_array_release(&in[i]);
    sim_record_release(&rec);
    return out;
}

static void check_kernel(const char *path, const char *entry, const char *kwargs,
                         const char *const *specs, size_t n)
{
    sim_array a = run_kernel(path, entry, kwargs, specs, n, 1);
    sim_array b = run_kernel(path, entry, kwargs, specs, n, 2);
    size_t bytes = 1, nan = 0;

    cr_assert_eq(a.dtype, b.dtype);
    cr_assert_eq(a.ndim, b.ndim);
    for (int d = 0; d < a.ndim; d++) {
        cr_assert_eq(a.shape[d], b.shape[d]);
        bytes *= (size_t)a.shape[d];
    }
    cr_assert_eq(a.dtype, SIM_DT_BFLOAT16);
    bytes *= 2;
    for (size_t i = 0; i < bytes / 2; i++) {   /* every element computed (none left NaN) */
        uint16_t h;
        memcpy(&h, (const uint8_t *)a.data + 2 * i, 2);
        nan += (h & 0x7fffu) > 0x7f80u;
    }
    cr_assert_eq(nan, 0, "%s: %zu NaN outputs", path, nan);
    cr_assert_eq(memcmp(a.data, b.data, bytes), 0, "%s %s: outputs of 1 and 2 threads differ", path,
                 entry);
    sim_array_release(&a);
    sim_array_release(&b);
}

Test(sim_threads, matmul_kernel_same_bits_for_1_and_2_threads, .timeout = 300)
{
    /* K=256, M=256, N=1024: two K blocks, each 2x2 tiles of 128x512 products */
    static const char *const in[] = { "lhsT=shape:256x256:bf16:seed=1", "rhs=shape:256x1024:bf16:seed=2" };
    check_kernel("tests/kernels/current/matmul.py", "matmul_optimized",
                 "{\"BLOCK_M\": 2, \"BLOCK_N\": 2, \"BLOCK_K\": 2}", in, 2);
}

Test(sim_threads, softmax_kernel_same_bits_for_1_and_2_threads, .timeout = 300)
{
    static const char *const in[] = { "x=shape:256x4096:bf16:seed=1" };
    check_kernel("kernels/softmax.py", "softmax", NULL, in, 1);
}

/* fp16/fp8 values convert through lookup tables filled on first use, and the
 * pool's threads convert large matmul operands (nki_mmq), so the first use
 * can come from two threads at once.  Each parameter is a fresh process
 * (Criterion forks per test) whose first conversion is the 2-thread run of
 * the fp8 double_row matmul (131,072-element moving operand); a table read
 * while another thread fills it shows as outputs unlike the 1-thread run's. */
ParameterizedTestParameters(sim_threads, fp8_tables_first_filled_by_two_threads)
{
    static int rounds[] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    return cr_make_param_array(int, rounds, sizeof(rounds) / sizeof(rounds[0]));
}

ParameterizedTest(int *round, sim_threads, fp8_tables_first_filled_by_two_threads, .timeout = 120)
{
    static const char *const in[] = { "lhsT=shape:256x128:float8_e4m3:seed=5",
                                      "rhs=shape:256x512:float8_e4m3:seed=6" };
    sim_array b = run_kernel("tests/kernels/current/matmul_double_row.py", "matmul_double_row",
                             NULL, in, 2, 2);
    sim_array a = run_kernel("tests/kernels/current/matmul_double_row.py", "matmul_double_row",
                             NULL, in, 2, 1);

    cr_assert_eq(a.dtype, SIM_DT_FLOAT32);
    cr_assert_eq(a.shape[0] * a.shape[1], (int64_t)128 * 512);
    cr_assert(same_bits(a.data, b.data, (size_t)128 * 512),
              "round %d: the 2-thread run differs from the 1-thread run", *round);
    sim_array_release(&a);
    sim_array_release(&b);
}

/* ===== tasks (simn_task_submit) and folded accumulator adds ===== */

/* A task that holds its thread until the test opens it: with it running on
 * the one worker, every other task can only run on the tracer. */
typedef struct gate_task {
    simn_task t;
    atomic_int started, open;
} gate_task;

static void gate_run(simn_task *t)
{
    gate_task *g = (gate_task *)(void *)t;
    atomic_store(&g->started, 1);
    while (!atomic_load(&g->open))
        sched_yield();
}

static void gate_close(gate_task *g)
{
    memset(g, 0, sizeof(*g));
    g->t.fn = gate_run;
    g->t.key = g;
    cr_assert_eq(simn_set_threads(2), 2, "a second thread could not be started");
    simn_task_submit(&g->t);
    while (!atomic_load(&g->started))
        sched_yield();
}

static void gate_open(gate_task *g)
{
    atomic_store(&g->open, 1);
    simn_task_wait(&g->t);
    cr_assert(simn_task_done(&g->t));
}

typedef struct log_task {
    simn_task t;
    int id, *log, *n;
} log_task;

static void log_run(simn_task *t)
{
    log_task *l = (log_task *)(void *)t;
    l->log[(*l->n)++] = l->id;
}

Test(sim_threads, tasks_of_one_key_run_in_order_and_waiting_runs_them)
{
    gate_task g;
    int log[4], n = 0;
    static const int key = 0;
    log_task t[3];

    gate_close(&g);
    for (int i = 0; i < 3; i++) {
        t[i] = (log_task){ .t = { .fn = log_run, .key = &key }, .id = i + 1, .log = log, .n = &n };
        simn_task_submit(&t[i].t);
    }
    cr_assert(!simn_task_done(&t[1].t), "a task ran while the only worker was held");
    /* waiting for the second runs the first and the second here, in order,
     * and leaves the third queued */
    simn_task_wait(&t[1].t);
    cr_assert_eq(n, 2);
    cr_assert(log[0] == 1 && log[1] == 2, "ran %d then %d", log[0], log[1]);
    cr_assert(!simn_task_done(&t[2].t));
    cr_assert(simn_task_help(), "the third task was queued and free to run");
    cr_assert(simn_task_done(&t[2].t) && n == 3 && log[2] == 3);
    gate_open(&g);
    simn_stop_threads();

    /* one thread: a task runs before submit returns */
    n = 0;
    simn_set_threads(1);
    simn_task_submit(&t[0].t);
    cr_assert(simn_task_done(&t[0].t) && n == 1);
}

static simc_view view2(simc_store *s, int64_t rows, int64_t cols)
{
    simc_view v;
    memset(&v, 0, sizeof(v));
    v.st = s;
    v.dtype = s->dtype;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.strides[0] = cols;
    v.strides[1] = 1;
    return v;
}

/* A folded x += A^T B is queued on the pool; with the worker held, it can
 * only land if reading x waits for it (running it on the tracer), and the
 * PSUM tile it came from must read as A^T B. */
Test(sim_threads, folded_add_lands_before_the_accumulator_is_read)
{
    enum { K = 4, M = 8, N = 16 };
    gate_task g;
    simc_store *a, *b, *p, *x;
    simc_view va, vb, vp, vx;
    float ha[K * M], hb[K * N], ones[M * N], got[M * N], prod[M * N];

    cr_assert_eq(simn_init(), 0, "OpenBLAS could not be loaded");
    for (int i = 0; i < K * M; i++)
        ha[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K * N; i++)
        hb[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < M * N; i++)
        ones[i] = 1.0f;
    a = simc_store_new(SIM_MEM_SBUF, SIM_DT_FLOAT32, K, M, true);
    b = simc_store_new(SIM_MEM_SBUF, SIM_DT_FLOAT32, K, N, true);
    p = simc_store_new(SIM_MEM_PSUM, SIM_DT_FLOAT32, M, N, true);
    x = simc_store_new(SIM_MEM_SBUF, SIM_DT_FLOAT32, M, N, true);
    va = view2(a, K, M);
    vb = view2(b, K, N);
    vp = view2(p, M, N);
    vx = view2(x, M, N);
    simc_scatter(&va, ha, NULL);
    simc_scatter(&vb, hb, NULL);
    simc_scatter(&vx, ones, NULL);

    gate_close(&g);
    nki_mmq_add(p, 0, N, M, N, K, &va, &vb, false);
    cr_assert(nki_mmq_fold(&vx, &vp), "x += A^T B was not folded");
    cr_assert(x->pending && p->pending);
    simc_gather(&vx, got);
    simc_gather(&vp, prod);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float want = 0.0f;
            for (int k = 0; k < K; k++)
                want += ha[k * M + m] * hb[k * N + n];
            cr_assert_eq(got[m * N + n], 1.0f + want, "x[%d, %d] = %g, want %g", m, n,
                         (double)got[m * N + n], (double)(1.0f + want));
            cr_assert_eq(prod[m * N + n], want, "psum[%d, %d] = %g, want %g", m, n,
                         (double)prod[m * N + n], (double)want);
        }
    gate_open(&g);
    nki_mmq_reset();
    simn_stop_threads();
    simc_store_unref(a);
    simc_store_unref(b);
    simc_store_unref(p);
    simc_store_unref(x);
}
