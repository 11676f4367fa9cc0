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
#include "sim/sim_target.h"
#include "sim/sim_timing.h"
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

/* ---- FP8 perf_mode=double_row ------------------------------------------ */

/* a (256, 128) and b (256, 512) fp32 of small integers (exact in fp8) are
 * cast to fp8 by the DMA into (128, 2, M/N) tiles; one double-row matmul
 * gives a.T @ b.  DT: the operand dtype; MODE: the perf_mode argument. */
#define DOUBLE_ROW_SRC(DT, MODE, ST)                                                          \
    HDR "def k(a, b):\n"                                                                      \
    "    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"              \
    "    st = nl.ndarray(" ST ", dtype=" DT ", buffer=nl.sbuf)\n"                             \
    "    mv = nl.ndarray((128, 2, 512), dtype=" DT ", buffer=nl.sbuf)\n"                      \
    "    nisa.dma_copy(dst=st, src=a.reshape(" ST "))\n"                                      \
    "    nisa.dma_copy(dst=mv, src=b.reshape((128, 2, 512)))\n"                               \
    "    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)\n"                    \
    "    nisa.nc_matmul(dst=acc, stationary=st, moving=mv, perf_mode=" MODE ")\n"             \
    "    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"                    \
    "    nisa.tensor_copy(dst=res, src=acc)\n"                                                \
    "    nisa.dma_copy(dst=out, src=res)\n"                                                   \
    "    return out\n"
#define DR_ST "(128, 2, 128)"
/* The same in the legacy API with its name for the mode, as the public
 * legacy FP8 kernels write it: nc_matmul returns the PSUM tile. */
#define DOUBLE_ROW_LEGACY_SRC                                                                 \
    "from neuronxcc import nki\nimport neuronxcc.nki.language as nl\n"                        \
    "import neuronxcc.nki.isa as nisa\n@nki.jit\n"                                            \
    "def k(a, b):\n"                                                                          \
    "    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"              \
    "    st = nl.load(a.reshape((128, 2, 128)), dtype=nl.float8_e4m3)\n"                      \
    "    mv = nl.load(b.reshape((128, 2, 512)), dtype=nl.float8_e4m3)\n"                      \
    "    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)\n"                      \
    "    acc += nisa.nc_matmul(st, mv, perf_mode='double_row_gen3')\n"                        \
    "    nl.store(out, value=nl.copy(acc))\n"                                                 \
    "    return out\n"

static sim_array small_ints(const char *name, int64_t r, int64_t c, int salt)
{
    sim_array a = mk(r, c);
    snprintf(a.name, sizeof(a.name), "%s", name);
    for (int64_t i = 0; i < r * c; i++)
        ((float *)a.data)[i] = (float)((i * (7 + salt) + salt) % 17 - 8);
    return a;
}

static void run2(kt_result *r, const char *target, const char *src, const sim_array *in)
{
    sim_run_opts o;
    memset(&o, 0, sizeof(o));
    o.target = target;
    o.numerics = true;
    kt_run_opts(r, &o, src, "kernel.py", in, 2);
}

static const sim_insn *find_op(const sim_record *rec, sim_opcode op, size_t nth)
{
    for (size_t i = 0; i < rec->n_insns; i++)
        if (rec->insns[i].opcode == op && nth-- == 0)
            return &rec->insns[i];
    return NULL;
}

Test(nki_rules, double_row_is_exact_and_runs_at_twice_the_rate_on_v3_and_v4)
{
    static const char *const targets[] = { "trn2", "trn3" };
    sim_array in[2] = { small_ints("a", 256, 128, 0), small_ints("b", 256, 512, 3) };
    kt_result r;

    /* the current name, the legacy one (double_row_gen3), its number, and
     * the legacy form of the call */
    static const char *const srcs[] = {
        DOUBLE_ROW_SRC("nl.float8_e4m3", "nisa.matmul_perf_mode.double_row", DR_ST),
        DOUBLE_ROW_SRC("nl.float8_e4m3", "'double_row_gen3'", DR_ST),
        DOUBLE_ROW_SRC("nl.float8_e4m3", "2", DR_ST),
        DOUBLE_ROW_LEGACY_SRC,
    };

    for (int t = 0; t < 8; t++) {
        sim_target tgt;
        kf_err e = KF_ERR_INIT;
        const sim_insn *mm;
        sim_insn plain;
        const char *src = srcs[t % 4];
        run2(&r, targets[t / 4], src, in);
        cr_assert_eq(r.rc, KF_OK, "%s, form %d: %s", targets[t / 4], t % 4, r.err.msg);
        for (int m = 0; m < 128; m++)
            for (int n = 0; n < 512; n++) {
                double s = 0;
                for (int k = 0; k < 256; k++)
                    s += (double)((float *)in[0].data)[k * 128 + m] * ((float *)in[1].data)[k * 512 + n];
                cr_assert_eq(((float *)r.out[0].data)[m * 512 + n], (float)s, "%s (%d,%d)", targets[t / 4], m, n);
            }
        mm = find_op(&r.rec, SIM_OP_MATMUL, 0);
        cr_assert_not_null(mm);
        cr_assert(mm->flags & SIM_F_DOUBLE_ROW);
        cr_assert_eq(mm->mm_k, 128);
        cr_assert_eq(mm->mm_n, 512);
        cr_assert_eq(mm->flops, 2ull * 256 * 128 * 512);
        /* the time of one 128-row fp8 multiply of the same moving size */
        cr_assert_eq(sim_target_load(targets[t / 4], NULL, &tgt, &e), KF_OK, "%s", e.msg);
        plain = *mm;
        plain.flags &= (uint8_t)~SIM_F_DOUBLE_ROW;
        plain.flops = 2ull * 128 * 128 * 512;
        cr_assert_eq(sim_timing_isolated_ps(&tgt, mm, SIM_ENG_TENSOR, 0),
                     sim_timing_isolated_ps(&tgt, &plain, SIM_ENG_TENSOR, 0));
        kt_run_done(&r);
    }
    free(in[0].data);
    free(in[1].data);
}

Test(nki_rules, double_row_rules_name_what_breaks_them)
{
    sim_array in[2] = { small_ints("a", 256, 128, 0), small_ints("b", 256, 512, 3) };
    kt_result r;
    static const char *const v2[] = { "trn1", "inf2" };

    for (int t = 0; t < 2; t++) {
        run2(&r, v2[t], DOUBLE_ROW_SRC("nl.float8_e4m3", "nisa.matmul_perf_mode.double_row", DR_ST), in);
        cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s: %s", v2[t], r.err.msg);
        cr_assert_eq(r.serr.line, 12);
        cr_assert(strstr(r.err.msg, "rule double-row-target") && strstr(r.err.msg, v2[t]), "%s", r.err.msg);
        kt_run_done(&r);
    }
    run2(&r, "trn2", DOUBLE_ROW_SRC("nl.bfloat16", "'double_row'", DR_ST), in);
    cr_assert_eq(r.serr.code, SIM_E_DTYPE, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "bfloat16") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    /* stationary (128, 256): not the (K, 2, M) double-row layout */
    run2(&r, "trn2", DOUBLE_ROW_SRC("nl.float8_e4m3", "1", "(128, 256)"), in);
    cr_assert_eq(r.serr.code, SIM_E_SHAPE_MISMATCH, "%s", r.err.msg);
    kt_run_done(&r);
    run2(&r, "trn2", DOUBLE_ROW_SRC("nl.float8_e4m3", "3", DR_ST), in);
    cr_assert_eq(r.serr.code, SIM_E_UNSUPPORTED_API, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "perf_mode=3 (an unknown mode)") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    run2(&r, "trn2", DOUBLE_ROW_SRC("nl.float8_e4m3", "'quad_row'", DR_ST), in);
    cr_assert_eq(r.serr.code, SIM_E_UNSUPPORTED_API, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "perf_mode='quad_row'") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    /* the legacy name keeps the rules: NeuronCore-v3 or newer */
    run2(&r, "trn1", DOUBLE_ROW_LEGACY_SRC, in);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "rule double-row-target"), "%s", r.err.msg);
    kt_run_done(&r);
    free(in[0].data);
    free(in[1].data);
}

/* ---- indirect DMA --------------------------------------------------------- */

/* data (256, 128) fp32, idx (128, 1) int32: gather rows idx into out. */
static const char *GATHER = HDR
    "def k(data, idx):\n"
    "    out = nl.ndarray((128, 128), dtype=data.dtype, buffer=nl.shared_hbm)\n"
    "    ix = nl.ndarray((128, 1), dtype=idx.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=ix, src=idx)\n"
    "    rows = nl.ndarray((128, 128), dtype=data.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=rows, src=data[ix, :])\n"
    "    nisa.dma_copy(dst=out, src=rows)\n"
    "    return out\n";

static const char *GATHER_SKIP = HDR
    "def k(data, idx):\n"
    "    out = nl.ndarray((128, 128), dtype=data.dtype, buffer=nl.shared_hbm)\n"
    "    ix = nl.ndarray((128, 1), dtype=idx.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=ix, src=idx)\n"
    "    rows = nl.ndarray((128, 128), dtype=data.dtype, buffer=nl.sbuf)\n"
    "    nisa.memset(dst=rows, value=5.0)\n"
    "    nisa.dma_copy(dst=rows, src=data[ix, :], oob_mode=nisa.oob_mode.skip)\n"
    "    nisa.dma_copy(dst=out, src=rows)\n"
    "    return out\n";

static sim_array idx_array(int64_t n, int64_t bad_at, int32_t bad)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "idx");
    a.dtype = SIM_DT_INT32;
    a.ndim = 2;
    a.shape[0] = n;
    a.shape[1] = 1;
    a.data = kf_calloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++)
        ((int32_t *)a.data)[i] = (int32_t)((i * 37 + 11) % 256);
    if (bad_at >= 0)
        ((int32_t *)a.data)[bad_at] = bad;
    return a;
}

Test(nki_rules, indirect_gather_is_one_dma_of_a_descriptor_per_row)
{
    sim_array in[2] = { mk(256, 128), idx_array(128, -1, 0) };
    kt_result r;
    const sim_insn *g;

    snprintf(in[0].name, sizeof(in[0].name), "data");
    run2(&r, "trn2", GATHER, in);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int64_t p = 0; p < 128; p++)
        for (int64_t f = 0; f < 128; f++)
            cr_assert_eq(((float *)r.out[0].data)[p * 128 + f],
                         ((float *)in[0].data)[(int64_t)((int32_t *)in[1].data)[p] * 128 + f], "row %d",
                         (int)p);
    cr_assert_eq(r.rec.n_insns, 3);
    g = &r.rec.insns[1];
    cr_assert_eq(g->opcode, SIM_OP_DMA_COPY);
    cr_assert_eq(g->nsrc, 2, "the gather reads the index tile too");
    cr_assert_eq(g->src[1].mem, SIM_MEM_SBUF);
    cr_assert_eq(g->src[1].alloc, r.rec.insns[0].dst[0].alloc);
    cr_assert_eq(g->src[0].mem, SIM_MEM_HBM);
    cr_assert_eq(g->src[0].descriptors, 128);
    cr_assert_eq(g->src[0].bytes, (uint64_t)128 * 512);
    cr_assert_eq(g->src[0].byte_hi - g->src[0].byte_lo, (uint64_t)256 * 512, "the whole indexed dimension");
    cr_assert_eq(g->partitions, 128);
    cr_assert_eq(g->elems_per_part, 128);
    cr_assert(fabs(sim_timing_dma_chunk(g) - 512.0) < 1e-9, "one 512-byte row per descriptor");
    kt_run_done(&r);
    free(in[0].data);
    free(in[1].data);
}

Test(nki_rules, indirect_index_out_of_range_is_named_or_skipped)
{
    sim_array in[2] = { mk(256, 128), idx_array(128, 77, 256) };
    kt_result r;

    snprintf(in[0].name, sizeof(in[0].name), "data");
    run2(&r, "trn2", GATHER, in);
    cr_assert_eq(r.serr.code, SIM_E_INDEX_OUT_OF_BOUNDS, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 10);
    cr_assert(strstr(r.err.msg, "index 256 (partition 77") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    ((int32_t *)in[1].data)[77] = -1;
    run2(&r, "trn2", GATHER, in);
    cr_assert_eq(r.serr.code, SIM_E_INDEX_OUT_OF_BOUNDS, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "index -1 (partition 77") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    /* oob_mode=skip: row 77 keeps the memset value */
    run2(&r, "trn2", GATHER_SKIP, in);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 128; p++)
        for (int f = 0; f < 128; f++)
            cr_assert_eq(((float *)r.out[0].data)[p * 128 + f],
                         p == 77 ? 5.0f : ((float *)in[0].data)[((int32_t *)in[1].data)[p] * 128 + f]);
    kt_run_done(&r);
    free(in[0].data);
    free(in[1].data);
}

/* legacy mask= on an indirect load: rows 72.. are neither moved nor
 * checked (their indices are out of range) and are not descriptors */
static const char *GATHER_MASKED =
    "from neuronxcc import nki\nimport neuronxcc.nki.language as nl\n@nki.jit\n"
    "def k(data, idx):\n"
    "    out = nl.ndarray((128, 128), dtype=data.dtype, buffer=nl.shared_hbm)\n"
    "    i_p = nl.arange(128)[:, None]\n"
    "    ix = nl.load(idx)\n"
    "    rows = nl.load(data[ix, nl.arange(128)[None, :]], mask=(i_p < 72))\n"
    "    nl.store(out[i_p, nl.arange(128)[None, :]], value=rows, mask=(i_p < 72))\n"
    "    return out\n";

Test(nki_rules, indirect_mask_leaves_rows_out)
{
    sim_array in[2] = { mk(256, 128), idx_array(128, -1, 0) };
    kt_result r;
    const sim_insn *g;

    snprintf(in[0].name, sizeof(in[0].name), "data");
    for (int64_t p = 72; p < 128; p++)
        ((int32_t *)in[1].data)[p] = 100000;
    run2(&r, "trn2", GATHER_MASKED, in);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int64_t p = 0; p < 72; p++)
        cr_assert_eq(((float *)r.out[0].data)[p * 128 + 5],
                     ((float *)in[0].data)[(int64_t)((int32_t *)in[1].data)[p] * 128 + 5]);
    g = find_op(&r.rec, SIM_OP_DMA_COPY, 1);
    cr_assert_not_null(g);
    cr_assert_eq(g->nsrc, 2);
    cr_assert_eq(g->src[0].descriptors, 72);
    cr_assert_eq(g->src[0].bytes, (uint64_t)72 * 512);
    cr_assert(g->flags & SIM_F_MASKED);
    kt_run_done(&r);
    free(in[0].data);
    free(in[1].data);
}
