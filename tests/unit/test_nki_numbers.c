/* Wrong numbers that once came out silently (issue 21): legacy masked
 * assignment, accumulation into a fresh PSUM tile, and SPMD launches with
 * nl.spmd_dim.  Every kernel's output is compared element by element with
 * values computed here in C. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim/nki_mmq.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_nki.h"

#define LHDR                                                                 \
    "from neuronxcc import nki\n"                                            \
    "import neuronxcc.nki.language as nl\n"                                  \
    "import neuronxcc.nki.isa as nisa\n"

static sim_array mk(const char *name, int ndim, int64_t d0, int64_t d1, unsigned seed)
{
    sim_array a;
    int64_t n = d0 * (ndim == 2 ? d1 : 1);
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "%s", name);
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = ndim;
    a.shape[0] = d0;
    a.shape[1] = ndim == 2 ? d1 : 0;
    a.data = kf_calloc((size_t)n, 4);
    srand(seed);
    for (int64_t i = 0; i < n; i++)   /* multiples of 1/8 in [-2, 2): exact in fp32 sums */
        ((float *)a.data)[i] = (float)(rand() % 32 - 16) / 8.0f;
    return a;
}

static const float *f32(const sim_array *a)
{
    return (const float *)a->data;
}




/* ===== 1. legacy masked assignment ===== */

/* dst starts as y; each assignment writes op(x) only where its mask holds. */
static const char MASKED_SRC[] =
    LHDR
    "@nki.jit\n"
    "def k(x, y):\n"
    "    outs = [nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(7)]\n"
    "    i_p, i_f = nl.mgrid[0:8, 0:16]\n"
    "    t = nl.load(x)\n"
    "    d = [nl.load(y) for _ in range(7)]\n"
    "    d[0][i_p, i_f] = nl.exp(t, mask=(i_f < 5))\n"
    "    d[1][...] = nl.add(t, 1.0, mask=(i_p >= 3))\n"
    "    d[2][i_p, i_f] = nl.multiply(t, t, mask=(i_f >= i_p + 3))\n"
    "    d[3][i_p, i_f] = nisa.activation(op=nl.exp, data=t, mask=(i_f < 5))\n"
    "    d[4][i_p, i_f] = nisa.tensor_scalar(t, np.add, 2.0, mask=(i_p < 6) & (i_f >= 8))\n"
    "    d[5][i_p, i_f] = nl.exp(t, mask=False)\n"
    "    d[6][...] = nl.copy(t, mask=False)\n"
    "    for j in range(7):\n"
    "        nl.store(outs[j], d[j])\n"
    "    return tuple(outs)\n";

static bool masked_sel(int j, int p, int f)
{
    switch (j) {
    case 0: case 3: return f < 5;
    case 1: return p >= 3;
    case 2: return f >= p + 3;
    case 4: return p < 6 && f >= 8;
    default: return false;   /* mask=False */
    }
}

static float masked_val(int j, float x)
{
    switch (j) {
    case 0: case 3: return expf(x);
    case 1: return x + 1.0f;
    case 2: return x * x;
    default: return x + 2.0f;
    }
}

Test(nki_numbers, legacy_masked_assignment_keeps_the_rest_of_dst)
{
    char *src = kf_malloc(sizeof(MASKED_SRC) + 32);
    sim_array in[2] = { mk("x", 2, 8, 16, 1), mk("y", 2, 8, 16, 2) };
    kt_result r;

    snprintf(src, sizeof(MASKED_SRC) + 32, "import numpy as np\n%s", MASKED_SRC);
    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 7);
    for (int j = 0; j < 7; j++)
        for (int p = 0; p < 8; p++)
            for (int f = 0; f < 16; f++) {
                int i = p * 16 + f;
                float got = f32(&r.out[j])[i], x = f32(&in[0])[i];
                float want = masked_sel(j, p, f) ? masked_val(j, x) : f32(&in[1])[i];
                cr_assert(fabsf(got - want) <= 1e-6f * fabsf(want),
                          "output %d [%d, %d]: %g, want %g", j, p, f, (double)got, (double)want);
            }
    /* with numerics off the record is the same: a mask=False copy stays masked */
    {
        size_t n = r.rec.n_insns;
        kt_result q;
        kt_run(&q, src, "k", in, 2, 0, 0, false);
        cr_assert_eq(q.rc, KF_OK, "%s", q.err.msg);
        cr_assert_eq(q.rec.n_insns, n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(q.rec.insns[i].flags, r.rec.insns[i].flags, "instruction %zu", i);
        kt_run_done(&q);
    }
    kt_run_done(&r);
    free(src);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* Legacy ops that compute their whole result and once ignored mask=:
 * the assignment still writes only the selected elements. */
static const char WHOLE_SRC[] =
    "import numpy as np\n"
    LHDR
    "@nki.jit\n"
    "def k(x, y):\n"
    "    outs = [nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(4)]\n"
    "    o4 = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    i_p, i_f = nl.mgrid[0:8, 0:8]\n"
    "    i_o, i_g = nl.mgrid[0:1, 0:8]\n"
    "    m = (i_f < 3)\n"
    "    t = nl.load(x)\n"
    "    d = [nl.load(y) for _ in range(4)]\n"
    "    d[0][i_p, i_f] = nisa.iota(i_p * 8 + i_f, dtype=nl.float32, mask=m)\n"
    "    d[1][i_p, i_f] = nisa.nc_transpose(t, mask=m)\n"
    "    d[2][i_p, i_f] = nl.transpose(t, mask=m)\n"
    "    d[3][i_p, i_f] = nisa.tensor_tensor_scan(t, t, 0.0, np.multiply, np.add, mask=m)\n"
    "    for j in range(4):\n"
    "        nl.store(outs[j], d[j])\n"
    "    r = nl.load(y[0:1, :])\n"
    "    r[i_o, i_g] = nisa.tensor_partition_reduce(np.add, t, mask=(i_g >= 5))\n"
    "    nl.store(o4, r)\n"
    "    return tuple(outs) + (o4,)\n";

Test(nki_numbers, legacy_whole_result_ops_honour_mask_on_assignment)
{
    sim_array in[2] = { mk("x", 2, 8, 8, 10), mk("y", 2, 8, 8, 11) };
    const float *x = (const float *)in[0].data, *y = (const float *)in[1].data;
    kt_result r;

    kt_run(&r, WHOLE_SRC, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 5);
    for (int p = 0; p < 8; p++) {
        float scan = 0.0f;
        for (int f = 0; f < 8; f++) {
            float want[4] = { (float)(p * 8 + f), x[f * 8 + p], x[f * 8 + p], 0.0f };
            scan = x[p * 8 + f] * scan + x[p * 8 + f];
            want[3] = scan;
            for (int j = 0; j < 4; j++) {
                float w = f < 3 ? want[j] : y[p * 8 + f], got = f32(&r.out[j])[p * 8 + f];
                cr_assert(fabsf(got - w) <= 1e-5f * (1.0f + fabsf(w)), "output %d [%d, %d]: %g, want %g",
                          j, p, f, (double)got, (double)w);
            }
        }
    }
    for (int f = 0; f < 8; f++) {
        float sum = 0.0f, got = f32(&r.out[4])[f];
        for (int p = 0; p < 8; p++)
            sum += x[p * 8 + f];
        cr_assert(fabsf(got - (f >= 5 ? sum : y[f])) < 1e-5f, "partition sum %d: %g", f, (double)got);
    }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* A sliding-window sum in the style of windowed attention: query block qb
 * (8 rows) sums the keys j in (q - W, q] over key blocks of 8; key blocks
 * wholly outside the window pass mask=False, the others cut rows and
 * columns with index masks, the last query block is cut to 5 valid rows
 * (the rest of s keeps its -1 fill), and every masked result is assigned
 * into the running tile s. */
static const char WINDOW_SRC[] =
    LHDR
    "W = 11\n"
    "@nki.jit\n"
    "def k(x):\n"
    "    S = x.shape[1]\n"
    "    out = nl.ndarray((24, 1), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    i_p, i_f = nl.mgrid[0:8, 0:8]\n"
    "    i_q, i_o = nl.mgrid[0:8, 0:1]\n"
    "    for qb in range(3):\n"
    "        rows = 8 if qb < 2 else 5\n"
    "        s = nl.full((8, 1), -1.0, dtype=nl.float32)\n"
    "        s[i_q, i_o] = nl.multiply(s, 0.0, mask=(i_q < rows))\n"
    "        for kb in range(S // 8):\n"
    "            t = nl.load(x[qb * 8:qb * 8 + 8, kb * 8:kb * 8 + 8])\n"
    "            live = kb * 8 <= qb * 8 + 7 and kb * 8 + 7 > qb * 8 - W\n"
    "            m = (kb * 8 + i_f <= qb * 8 + i_p) & (kb * 8 + i_f > qb * 8 + i_p - W) & (i_p < rows)\n"
    "            w = nl.zeros((8, 8), dtype=nl.float32)\n"
    "            w[i_p, i_f] = nl.copy(t, mask=m if live else False)\n"
    "            part = nl.sum(w, axis=1, keepdims=True)\n"
    "            s[i_q, i_o] = nl.add(s, part, mask=(i_q < rows) if live else False)\n"
    "        nl.store(out[qb * 8:qb * 8 + 8, :], s)\n"
    "    return out\n";

Test(nki_numbers, legacy_sliding_window_masks_cut_rows_and_blocks)
{
    sim_array in = mk("x", 2, 24, 24, 3);
    kt_result r;

    kt_run(&r, WINDOW_SRC, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int q = 0; q < 24; q++) {
        float want = 0.0f, got = f32(&r.out[0])[q];
        if (q >= 21) {
            want = -1.0f;   /* rows cut from the last query block keep their fill */
        } else {
            for (int j = 0; j < 24; j++)
                if (j <= q && j > q - 11)
                    want += f32(&in)[q * 24 + j];
        }
        cr_assert(fabsf(got - want) < 1e-5f, "row %d: %g, want %g", q, (double)got, (double)want);
    }
    kt_run_done(&r);
    sim_array_release(&in);
}

/* Sliding-window attention in the legacy API, the shape of the kernel that
 * returned 75% NaN: key blocks outside the window pass mask=False to
 * nc_matmul and affine_select (their scores keep the -9984 fill), the
 * others mask the window's edges, and P @ V accumulates into a fresh PSUM
 * tile whose first live block comes after masked-off ones. */
static const char WINDOW_ATTN_SRC[] =
    LHDR
    "B = 16\n"
    "W = 24\n"
    "def live(qi, kj):\n"
    "    return kj * B <= qi * B + B - 1 and kj * B + B - 1 > qi * B - W\n"
    "@nki.jit\n"
    "def k(q, kk, v):\n"
    "    D, S = q.shape\n"
    "    out = nl.ndarray((S, D), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    i_p, i_f = nl.mgrid[0:B, 0:B]\n"
    "    for qi in range(S // B):\n"
    "        q_t = nl.load(q[:, qi * B:(qi + 1) * B])\n"
    "        s_buf = nl.full((B, S), -9984.0, dtype=nl.float32)\n"
    "        for kj in range(S // B):\n"
    "            k_t = nl.load(kk[:, kj * B:(kj + 1) * B])\n"
    "            qk = nisa.nc_matmul(q_t, k_t, mask=live(qi, kj))\n"
    "            s_buf[i_p, kj * B + i_f] = nisa.affine_select(\n"
    "                pred=(qi * B + i_p - kj * B - i_f >= 0) & (kj * B + i_f - qi * B - i_p + W > 0),\n"
    "                on_true_tile=qk, on_false_value=-9984.0, dtype=nl.float32,\n"
    "                mask=live(qi, kj))\n"
    "        mx = nl.max(s_buf, axis=1, keepdims=True)\n"
    "        p = nl.exp(nl.subtract(s_buf, mx))\n"
    "        ssum = nl.sum(p, axis=1, keepdims=True)\n"
    "        acc = nl.ndarray((B, D), dtype=nl.float32, buffer=nl.psum)\n"
    "        for kj in range(S // B):\n"
    "            p_t = nl.copy(nisa.nc_transpose(p[:, kj * B:(kj + 1) * B]))\n"
    "            v_t = nl.load(v[kj * B:(kj + 1) * B, :])\n"
    "            acc += nisa.nc_matmul(p_t, v_t, mask=live(qi, kj))\n"
    "        nl.store(out[qi * B:(qi + 1) * B, :], nl.divide(nl.copy(acc), ssum))\n"
    "    return out\n";

Test(nki_numbers, legacy_sliding_window_attention_matches_c)
{
    enum { D = 16, S = 64, W = 24 };
    sim_array in[3] = { mk("q", 2, D, S, 12), mk("kk", 2, D, S, 13), mk("v", 2, S, D, 14) };
    const float *q = (const float *)in[0].data, *kk = (const float *)in[1].data;
    const float *v = (const float *)in[2].data;
    kt_result r;

    kt_run(&r, WINDOW_ATTN_SRC, "k", in, 3, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int i = 0; i < S; i++) {
        double sc[S], mx = -INFINITY, sum = 0;
        for (int j = 0; j < S; j++) {
            sc[j] = -INFINITY;
            if (j <= i && j > i - W) {
                sc[j] = 0;
                for (int d = 0; d < D; d++)
                    sc[j] += (double)q[d * S + i] * kk[d * S + j];
                mx = fmax(mx, sc[j]);
            }
        }
        for (int j = 0; j < S; j++)
            sum += isinf(sc[j]) ? 0.0 : exp(sc[j] - mx);
        for (int d = 0; d < D; d++) {
            double want = 0, got = f32(&r.out[0])[i * D + d];
            for (int j = 0; j < S; j++)
                if (!isinf(sc[j]))
                    want += exp(sc[j] - mx) / sum * v[j * D + d];
            cr_assert(fabs(got - want) <= 1e-4 * (1 + fabs(want)), "out[%d, %d] = %g, want %g", i, d,
                      got, want);
        }
    }
    kt_run_done(&r);
    for (int i = 0; i < 3; i++)
        sim_array_release(&in[i]);
}

/* ===== 2. accumulating into a fresh PSUM tile ===== */

/* a (256, 8) and b (256, 16): o = a.T @ b accumulated over two K tiles of
 * 128, in every legacy spelling, into PSUM tiles nothing initialized. */
static const char ACC_SRC[] =
    LHDR
    "@nki.jit\n"
    "def k(a, b):\n"
    "    o = [nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(6)]\n"
    "    acc1 = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
    "    acc2 = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
    "    acc3 = nl.ndarray((2, nl.par_dim(8), 16), dtype=nl.float32, buffer=nl.psum)\n"
    "    acc4 = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
    "    acc5 = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
    "    for kk in nl.affine_range(2):\n"
    "        at = nl.load(a[kk * 128:(kk + 1) * 128, :])\n"
    "        bt = nl.load(b[kk * 128:(kk + 1) * 128, :])\n"
    "        acc1 += nisa.nc_matmul(at, bt)\n"
    "        acc2[...] += nisa.nc_matmul(at, bt)\n"
    "        acc3[0] += nisa.nc_matmul(at, bt)\n"
    "        acc3[1] += nisa.nc_matmul(at, bt, mask=(kk == 0))\n"
    "        acc4 += nl.matmul(at, bt, transpose_x=True)\n"
    "        acc5 += nl.matmul(at, bt, transpose_x=True, mask=False)\n"
    "    nl.store(o[0], nl.copy(acc1))\n"
    "    nl.store(o[1], nl.copy(acc2))\n"
    "    nl.store(o[2], nl.copy(acc3[0]))\n"
    "    nl.store(o[3], nl.copy(acc3[1]))\n"
    "    nl.store(o[4], nl.copy(acc4))\n"
    "    nl.store(o[5], nl.copy(acc5))\n"
    "    return tuple(o)\n";

Test(nki_numbers, legacy_accumulation_into_a_fresh_psum_tile_starts_from_zero)
{
    sim_array in[2] = { mk("a", 2, 256, 8, 4), mk("b", 2, 256, 16, 5) };
    kt_result r;
    size_t nmm = 0, nacc = 0;

    kt_run(&r, ACC_SRC, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 6);
    for (int m = 0; m < 8; m++)
        for (int n = 0; n < 16; n++) {
            float full = 0.0f, half = 0.0f;
            for (int k = 0; k < 256; k++) {
                float p = f32(&in[0])[k * 8 + m] * f32(&in[1])[k * 16 + n];
                full += p;
                if (k < 128)
                    half += p;
            }
            for (int j = 0; j < 5; j++) {
                float want = j == 3 ? half : full, got = f32(&r.out[j])[m * 16 + n];
                cr_assert(fabsf(got - want) < 1e-3f, "output %d [%d, %d]: %g, want %g", j, m, n,
                          (double)got, (double)want);
            }
            /* mask=False: the matmul wrote nothing, acc5 was never written */
            cr_assert(isnan(f32(&r.out[5])[m * 16 + n]));
        }
    /* each spelling is one MATMUL into its accumulator: the first into a
     * fresh tile overwrites, the second accumulates */
    for (size_t i = 0; i < r.rec.n_insns; i++)
        if (r.rec.insns[i].opcode == SIM_OP_MATMUL) {
            nmm++;
            nacc += (r.rec.insns[i].flags & SIM_F_ACCUMULATE) != 0;
        }
    cr_assert_eq(nmm, 12);
    cr_assert_eq(nacc, 4, "%zu accumulating matmuls", nacc);   /* acc1..acc4, second pass */
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* The current API's spelling: nc_matmul(dst=acc) into a fresh nl.ndarray
 * in PSUM, twice, accumulate=None. */
Test(nki_numbers, current_matmul_into_a_fresh_psum_tile_starts_from_zero)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(a, b):\n"
        "    o = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    acc = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
        "    for kk in range(2):\n"
        "        at = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "        bt = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "        nisa.dma_copy(dst=at, src=a[kk * 128:(kk + 1) * 128, :])\n"
        "        nisa.dma_copy(dst=bt, src=b[kk * 128:(kk + 1) * 128, :])\n"
        "        nisa.nc_matmul(dst=acc, stationary=at, moving=bt)\n"
        "    r = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.tensor_copy(dst=r, src=acc)\n"
        "    nisa.dma_copy(dst=o, src=r)\n"
        "    return o\n";
    sim_array in[2] = { mk("a", 2, 256, 8, 6), mk("b", 2, 256, 16, 7) };
    kt_result r;

    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int m = 0; m < 8; m++)
        for (int n = 0; n < 16; n++) {
            float want = 0.0f;
            for (int k = 0; k < 256; k++)
                want += f32(&in[0])[k * 8 + m] * f32(&in[1])[k * 16 + n];
            cr_assert(fabsf(f32(&r.out[0])[m * 16 + n] - want) < 1e-3f, "[%d, %d]", m, n);
        }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* Matmul runs into one PSUM tile are queued and computed as one GEMM
 * (nki_mmq): every read of the tile, a run into another region of the same
 * tensor, an overwrite (accumulate=False) and writes to the SBUF operands
 * between the instructions must see exactly what the instructions one by one
 * would give.  Inputs are multiples of 1/8, so every sum is exact in FP32
 * and the comparison is exact. */
Test(nki_numbers, queued_matmul_runs_read_what_each_instruction_wrote)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(a, b):\n"
        "    o = [nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(5)]\n"
        "    acc = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
        "    two = nl.ndarray((8, 32), dtype=nl.float32, buffer=nl.psum)\n"
        "    at = nl.ndarray((128, 8), dtype=nl.bfloat16, buffer=nl.sbuf)\n"
        "    bt = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    r = [nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf) for _ in range(5)]\n"
        "    for kk in range(4):\n"
        "        nisa.dma_copy(dst=at, src=a[kk * 128:(kk + 1) * 128, :])\n"
        "        nisa.dma_copy(dst=bt, src=b[kk * 128:(kk + 1) * 128, :])\n"
        "        nisa.nc_matmul(dst=acc, stationary=at, moving=bt)\n"
        "        half = two[:, 0:16] if kk % 2 == 0 else two[:, 16:32]\n"
        "        nisa.nc_matmul(dst=half, stationary=at, moving=bt)\n"
        "        if kk == 1:\n"
        "            nisa.tensor_copy(dst=r[0], src=acc)\n"
        "    nisa.tensor_copy(dst=r[1], src=acc)\n"
        "    nisa.tensor_copy(dst=r[2], src=two[:, 0:16])\n"
        "    nisa.tensor_copy(dst=r[3], src=two[:, 16:32])\n"
        "    nisa.nc_matmul(dst=acc, stationary=at, moving=bt, accumulate=False)\n"
        "    nisa.tensor_copy(dst=r[4], src=acc)\n"
        "    for i in range(5):\n"
        "        nisa.dma_copy(dst=o[i], src=r[i])\n"
        "    return tuple(o)\n";
    sim_array in[2] = { mk("a", 2, 512, 8, 8), mk("b", 2, 512, 16, 9) };
    kt_result r;

    /* a's tile is bf16 in SBUF: values that are multiples of 1/8 in
     * [-2, 2) are exact in bf16 too */
    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 5);
    for (int m = 0; m < 8; m++)
        for (int n = 0; n < 16; n++) {
            float chunk[4] = { 0 }, want[5];
            for (int k = 0; k < 512; k++)
                chunk[k / 128] += f32(&in[0])[k * 8 + m] * f32(&in[1])[k * 16 + n];
            want[0] = chunk[0] + chunk[1];                        /* read mid-run */
            want[1] = chunk[2] + chunk[3];   /* reading acc closed its accumulation */
            want[2] = chunk[0] + chunk[2];                        /* two[:, 0:16] */
            want[3] = chunk[1] + chunk[3];                        /* two[:, 16:32] */
            want[4] = chunk[3];                                   /* accumulate=False */
            for (int j = 0; j < 5; j++)
                cr_assert_eq(f32(&r.out[j])[m * 16 + n], want[j], "output %d [%d, %d]: %g, want %g", j,
                             m, n, (double)f32(&r.out[j])[m * 16 + n], (double)want[j]);
        }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* The accumulating add after a matmul run (tensor_tensor(x, x, psum, add))
 * is folded into x += A^T B on the numerics pool (nki_mmq_fold).  Reading
 * the accumulator mid-way, reading the PSUM tile after the add, adding
 * into it again (accumulate=True), overwriting it (a tile reused across
 * iterations), and freeing an accumulator whose add is still queued must
 * all see what the instructions one by one give, with one thread (tasks
 * run at once) and with two (tasks run on the worker).  Exact inputs, so
 * exact comparisons; the fold count proves the folded path ran. */
static void check_folded_adds(int threads)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(a, b):\n"
        "    o = [nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(6)]\n"
        "    at = nl.ndarray((128, 8), dtype=nl.bfloat16, buffer=nl.sbuf)\n"
        "    bt = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    x = [nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf) for _ in range(3)]\n"
        "    for t in x:\n"
        "        nisa.memset(dst=t, value=0.0)\n"
        "    keep = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
        "    for kk in range(4):\n"
        "        nisa.dma_copy(dst=at, src=a[kk * 128:(kk + 1) * 128, :])\n"
        "        nisa.dma_copy(dst=bt, src=b[kk * 128:(kk + 1) * 128, :])\n"
        "        part = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)\n"
        "        nisa.nc_matmul(dst=part, stationary=at, moving=bt)\n"
        "        nisa.tensor_tensor(dst=x[0], data1=x[0], data2=part, op=nl.add)\n"
        "        nisa.nc_matmul(dst=keep, stationary=at, moving=bt)\n"
        "        nisa.tensor_tensor(dst=x[1], data1=keep, data2=x[1], op=nl.add)\n"
        "        tmp = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "        nisa.memset(dst=tmp, value=1.0)\n"
        "        nisa.nc_matmul(dst=part, stationary=at, moving=bt)\n"
        "        nisa.tensor_tensor(dst=tmp, data1=tmp, data2=part, op=nl.add)\n"
        "        if kk == 1:\n"
        "            nisa.tensor_copy(dst=x[2], src=part)\n"
        "            nisa.dma_copy(dst=o[0], src=x[0])\n"
        "    nisa.dma_copy(dst=o[1], src=x[0])\n"
        "    nisa.dma_copy(dst=o[2], src=x[1])\n"
        "    nisa.dma_copy(dst=o[3], src=x[2])\n"
        "    nisa.nc_matmul(dst=keep, stationary=at, moving=bt, accumulate=True)\n"
        "    r = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.tensor_copy(dst=r, src=keep)\n"
        "    nisa.dma_copy(dst=o[4], src=r)\n"
        "    nisa.dma_copy(dst=o[5], src=tmp)\n"
        "    return tuple(o)\n";
    sim_array in[2] = { mk("a", 2, 512, 8, 10), mk("b", 2, 512, 16, 11) };
    sim_run_opts o;
    kt_result r;
    uint64_t folds = nki_mmq_folds();

    memset(&o, 0, sizeof(o));
    o.numerics = true;
    o.threads = threads;
    kt_run_opts(&r, &o, src, "kernel.py", in, 2);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 6);
    cr_assert_eq(nki_mmq_folds() - folds, 12, "%d threads: %llu adds folded, want 12", threads,
                 (unsigned long long)(nki_mmq_folds() - folds));
    for (int m = 0; m < 8; m++)
        for (int n = 0; n < 16; n++) {
            float chunk[4] = { 0 }, want[6];
            for (int k = 0; k < 512; k++)
                chunk[k / 128] += f32(&in[0])[k * 8 + m] * f32(&in[1])[k * 16 + n];
            want[0] = chunk[0] + chunk[1];                          /* x[0] mid-way */
            want[1] = chunk[0] + chunk[1] + chunk[2] + chunk[3];    /* x[0] */
            want[2] = want[1];                                      /* x[1], psum first */
            want[3] = chunk[1];                                     /* part after its add */
            want[4] = 2 * chunk[3];                                 /* keep, added again */
            want[5] = 1 + chunk[3];                                 /* the last tmp */
            for (int j = 0; j < 6; j++)
                cr_assert_eq(f32(&r.out[j])[m * 16 + n], want[j],
                             "%d threads: output %d [%d, %d]: %g, want %g", threads, j, m, n,
                             (double)f32(&r.out[j])[m * 16 + n], (double)want[j]);
        }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

Test(nki_numbers, folded_accumulator_adds_read_what_each_instruction_wrote)
{
    check_folded_adds(1);
    check_folded_adds(2);
}

/* ===== 3. nl.spmd_dim launches every program ===== */

Test(nki_numbers, spmd_dim_launches_the_product_of_its_sizes)
{
    /* kernel[nl.spmd_dim(2, nl.nc(2)), 4]: 4 x 4 programs; each writes its
     * own element with its ids and the grid it sees.  The other spellings
     * of the same grid (spmd_dim(nl.nc(2), 2), nl.nc(2) * 2) fill o2, o3. */
    const char *src =
        LHDR
        "@nki.jit\n"
        "def fill(o):\n"
        "    i = nl.program_id(0)\n"
        "    j = nl.program_id(1)\n"
        "    v = i * 1000 + j * 100 + nl.num_programs(0) * 10 + nl.num_programs(1)\n"
        "    t = nl.full((1, 1), float(v), dtype=nl.float32)\n"
        "    nl.store(o[i, j], t)\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    o = [nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(3)]\n"
        "    fill[nl.spmd_dim(2, nl.nc(2)), 4](o[0])\n"
        "    fill[nl.spmd_dim(nl.nc(2), 2), 4](o[1])\n"
        "    fill[nl.nc(2) * 2, 4](o[2])\n"
        "    return tuple(o)\n";
    sim_array in = mk("x", 2, 1, 1, 8);
    kt_result r;
    uint32_t max_spmd = 0;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 3);
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                cr_assert_eq(f32(&r.out[g])[i * 4 + j], (float)(i * 1000 + j * 100 + 44),
                             "launch %d element [%d, %d] = %g", g, i, j,
                             (double)f32(&r.out[g])[i * 4 + j]);
    for (size_t i = 0; i < r.rec.n_insns; i++)
        if (r.rec.insns[i].spmd > max_spmd)
            max_spmd = r.rec.insns[i].spmd;
    cr_assert_eq(max_spmd, 47);   /* 3 launches of 16 programs, numbered on */
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki_numbers, spmd_dim_rejects_bad_sizes)
{
    const char *src =
        LHDR
        "@nki.jit\n"
        "def fill(o):\n"
        "    pass\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    fill[nl.spmd_dim(2, 0), 4](x)\n"
        "    return x\n";
    sim_array in = mk("x", 2, 1, 1, 9);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "argument 2") != NULL, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 9);
    kt_run_done(&r);
    sim_array_release(&in);
}

/* ===== 4. integer data is computed exactly, never through fp32 ===== */

/* Values above 2^24 with low bits set: fp32 would round 0x40365A13 to
 * 0x40365A00.  Integer ops are two's complement on the bit pattern. */
static sim_array mk_i32(const char *name, uint32_t base, uint32_t step)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "%s", name);
    a.dtype = SIM_DT_INT32;
    a.ndim = 2;
    a.shape[0] = 8;
    a.shape[1] = 16;
    a.data = kf_calloc(128, 4);
    for (uint32_t i = 0; i < 128; i++)
        ((uint32_t *)a.data)[i] = base + i * step;
    return a;
}

/* What output j holds for x, y (uint32 arithmetic = int32 wrap-around). */
static uint32_t int_want(int j, uint32_t x, uint32_t y, int p, int f)
{
    switch (j) {
    case 0: return x;                                     /* tensor_copy */
    case 1: return x | 5u;                                /* bitwise_or scalar */
    case 2: return (uint32_t)((int32_t)x >> 8);           /* right_shift */
    case 3: return x ^ y;                                 /* bitwise_xor tiles */
    case 4: return x & y;                                 /* tensor_tensor and */
    case 5: return (x & 0xFFFF00u) >> 4;                  /* tensor_scalar and, shift */
    case 6: return x + y;                                 /* add wraps */
    case 7: return x;                                     /* copy */
    case 8: return 0x40365A13u + (uint32_t)p * 0x01000001u + (uint32_t)f * 3u;   /* iota */
    default: return (x << 3) - 1u;                        /* left_shift, subtract */
    }
}

static void check_ints(const kt_result *r, const sim_array *in, int n_out)
{
    cr_assert_eq(r->rc, KF_OK, "%s", r->err.msg);
    cr_assert_eq((int)r->n_out, n_out);
    for (int j = 0; j < n_out; j++) {
        cr_assert_eq(r->out[j].dtype, SIM_DT_INT32, "output %d", j);
        for (int i = 0; i < 128; i++) {
            uint32_t got = ((const uint32_t *)r->out[j].data)[i];
            uint32_t want = int_want(j, ((const uint32_t *)in[0].data)[i],
                                     ((const uint32_t *)in[1].data)[i], i / 16, i % 16);
            cr_assert_eq(got, want, "output %d [%d, %d]: 0x%08X, want 0x%08X", j, i / 16,
                         i % 16, got, want);
        }
    }
}

Test(nki_numbers, legacy_int32_ops_keep_every_bit)
{
    const char *src =
        "import numpy as np\n"
        LHDR
        "@nki.jit\n"
        "def k(x, y):\n"
        "    outs = [nl.ndarray((8, 16), dtype=nl.int32, buffer=nl.shared_hbm) for _ in range(10)]\n"
        "    t = nl.load(x)\n"
        "    u = nl.load(y)\n"
        "    i_p, i_f = nl.mgrid[0:8, 0:16]\n"
        "    r = [nisa.tensor_copy(t),\n"
        "         nl.bitwise_or(t, 5),\n"
        "         nl.right_shift(t, 8),\n"
        "         nl.bitwise_xor(t, u),\n"
        "         nisa.tensor_tensor(t, u, op=nl.bitwise_and),\n"
        "         nisa.tensor_scalar(t, nl.bitwise_and, 0xFFFF00, op1=nl.right_shift, operand1=4),\n"
        "         nl.add(t, u),\n"
        "         nl.copy(t),\n"
        "         nisa.iota(0x40365A13 + i_p * 0x01000001 + i_f * 3, dtype=nl.int32),\n"
        "         nl.subtract(nl.left_shift(t, 3), 1)]\n"
        "    for j in range(10):\n"
        "        nl.store(outs[j], r[j])\n"
        "    return tuple(outs)\n";
    sim_array in[2] = { mk_i32("x", 0x40365A13u, 0x10101u), mk_i32("y", 0x7F00FF11u, 0x3007u) };
    kt_result r;

    kt_run(&r, src, "k", in, 2, 0, 0, true);
    check_ints(&r, in, 10);
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

Test(nki_numbers, current_int32_ops_keep_every_bit)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x, y):\n"
        "    outs = [nl.ndarray((8, 16), dtype=nl.int32, buffer=nl.shared_hbm) for _ in range(9)]\n"
        "    t = nl.ndarray((8, 16), dtype=nl.int32, buffer=nl.sbuf)\n"
        "    u = nl.ndarray((8, 16), dtype=nl.int32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    nisa.dma_copy(dst=u, src=y)\n"
        "    r = [nl.ndarray((8, 16), dtype=nl.int32, buffer=nl.sbuf) for _ in range(9)]\n"
        "    nisa.tensor_copy(dst=r[0], src=t)\n"
        "    nisa.tensor_scalar(dst=r[1], data=t, op0=nl.bitwise_or, operand0=5)\n"
        "    nisa.tensor_scalar(dst=r[2], data=t, op0=nl.right_shift, operand0=8)\n"
        "    nisa.tensor_tensor(dst=r[3], data1=t, data2=u, op=nl.bitwise_xor)\n"
        "    nisa.tensor_tensor(dst=r[4], data1=t, data2=u, op=nl.bitwise_and)\n"
        "    nisa.tensor_scalar(dst=r[5], data=t, op0=nl.bitwise_and, operand0=0xFFFF00,\n"
        "                       op1=nl.right_shift, operand1=4)\n"
        "    nisa.tensor_tensor(dst=r[6], data1=t, data2=u, op=nl.add)\n"
        "    nisa.tensor_copy(dst=r[7], src=t[0:8, 0:16])\n"
        "    nisa.iota(dst=r[8], pattern=[[3, 16]], offset=0x40365A13, channel_multiplier=0x01000001)\n"
        "    for j in range(9):\n"
        "        nisa.dma_copy(dst=outs[j], src=r[j])\n"
        "    return tuple(outs)\n";
    sim_array in[2] = { mk_i32("x", 0x40365A13u, 0x10101u), mk_i32("y", 0x7F00FF11u, 0x3007u) };
    kt_result r;

    kt_run(&r, src, "k", in, 2, 0, 0, true);
    check_ints(&r, in, 9);
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}
