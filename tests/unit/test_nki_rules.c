/* Rules the hardware enforces on the Tensor engine, per NeuronCore
 * generation: the v2 Tensor engine writes fp32 PSUM only (a bf16 result
 * tile is fine on trn2/trn3), and an engine access starts at partition 0
 * (over 64 partitions), 0 or 64 (33-64) or 0/32/64/96 (up to 32). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_nki.h"

static sim_array mk(int64_t r, int64_t c)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "x");
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = 2;
    a.shape[0] = r;
    a.shape[1] = c;
    a.data = kf_calloc((size_t)(r * c), 4);
    for (int64_t i = 0; i < r * c; i++)
        ((float *)a.data)[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
    return a;
}

static void run_on(kt_result *r, const char *target, const char *src, const sim_array *in)
{
    sim_run_opts o;
    memset(&o, 0, sizeof(o));
    o.target = target;
    o.numerics = true;
    kt_run_opts(r, &o, src, "kernel.py", in, 1);
}

#define HDR "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n@nki.jit\n"

/* x (128, 128) fp32 -> x.T @ x through a PSUM tile of DT */
static const char *BF16_PSUM = HDR
    "def k(x):\n"
    "    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    t = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=t, src=x)\n"
    "    acc = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)\n"
    "    nisa.nc_matmul(dst=acc, stationary=t, moving=t)\n"
    "    res = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    nisa.tensor_copy(dst=res, src=acc)\n"
    "    nisa.dma_copy(dst=out, src=res)\n"
    "    return out\n";

Test(nki_rules, bf16_psum_result_is_a_v2_rule_error_only)
{
    static const char *const bad[] = { "trn1", "inf2" }, *const good[] = { "trn2", "trn3" };
    sim_array x = mk(128, 128);
    kt_result r;

    for (int i = 0; i < 2; i++) {
        run_on(&r, bad[i], BF16_PSUM, &x);
        cr_assert_eq(r.serr.code, SIM_E_DTYPE, "%s: %s", bad[i], r.err.msg);
        cr_assert_eq(r.serr.line, 10);
        cr_assert(strstr(r.err.msg, "rule fp32-psum-output: the NeuronCore-v2 Tensor engine") != NULL, "%s",
                  r.err.msg);
        cr_assert(strstr(r.err.msg, bad[i]) != NULL, "%s", r.err.msg);
        kt_run_done(&r);
    }
    for (int i = 0; i < 2; i++) {
        run_on(&r, good[i], BF16_PSUM, &x);
        cr_assert_eq(r.rc, KF_OK, "%s: %s", good[i], r.err.msg);
        /* x holds bf16-exact values; the bf16 result rounds x.T @ x */
        for (int m = 0; m < 128; m += 9)
            for (int n = 0; n < 128; n += 5) {
                double s = 0;
                for (int k = 0; k < 128; k++)
                    s += (double)((float *)x.data)[k * 128 + m] * ((float *)x.data)[k * 128 + n];
                cr_assert(fabs(((float *)r.out[0].data)[m * 128 + n] - s) <= fabs(s) * 0.008 + 1e-6,
                          "%s (%d,%d): %g vs %g", good[i], m, n, ((float *)r.out[0].data)[m * 128 + n], s);
            }
        kt_run_done(&r);
    }
    sim_array_release(&x);
}

/* a matmul over the partitions [lo, lo+n) of one tile */
static char *window(int lo, int n)
{
    return kf_asprintf(HDR
        "def k(x):\n"
        "    out = nl.ndarray((%d, 64), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)\n"
        "    nisa.nc_matmul(dst=acc[0:%d, :], stationary=t[%d:%d, 0:%d], moving=t[%d:%d, :])\n"
        "    res = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.tensor_copy(dst=res[0:%d, :], src=acc[0:%d, :])\n"
        "    nisa.dma_copy(dst=out, src=res[0:%d, :])\n"
        "    return out\n",
        n, n, lo, lo + n, n, lo, lo + n, n, n, n);
}

Test(nki_rules, matmul_operands_start_where_the_engine_can)
{
    static const struct { int lo, n; bool ok; } cases[] = {
        { 0, 64, true }, { 64, 64, true }, { 96, 32, true }, { 32, 32, true }, { 64, 40, true },
        { 32, 64, false }, { 16, 16, false }, { 8, 32, false }, { 48, 33, false },
    };
    sim_array x = mk(128, 64);
    kt_result r;

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char *src = window(cases[c].lo, cases[c].n);
        int lo = cases[c].lo, n = cases[c].n;
        run_on(&r, "trn2", src, &x);
        if (!cases[c].ok) {
            char want[96];
            cr_assert_eq(r.serr.code, SIM_E_PARTITION_START, "[%d, +%d): %s", lo, n, r.err.msg);
            cr_assert_eq(r.serr.line, 10);
            snprintf(want, sizeof(want), "covers %d partitions from partition %d", n, lo);
            cr_assert(strstr(r.err.msg, want) != NULL, "%s", r.err.msg);
        } else {
            cr_assert_eq(r.rc, KF_OK, "[%d, +%d): %s", lo, n, r.err.msg);
            for (int m = 0; m < n; m++)
                for (int j = 0; j < 64; j++) {
                    double s = 0;
                    for (int k = lo; k < lo + n; k++)
                        s += (double)((float *)x.data)[k * 64 + m] * ((float *)x.data)[k * 64 + j];
                    cr_assert(fabs(((float *)r.out[0].data)[m * 64 + j] - s) < 1e-3);
                }
        }
        kt_run_done(&r);
        free(src);
    }
    sim_array_release(&x);
}
