/* API gaps valid kernels hit (issue 21): activation functions, keyword
 * forms, mgrid axes and dtype information, each run through sim_run_source
 * and checked against values computed here in C. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_nki.h"

static sim_array mk(const char *name, int64_t d0, int64_t d1)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "%s", name);
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = 2;
    a.shape[0] = d0;
    a.shape[1] = d1;
    a.data = kf_calloc((size_t)(d0 * d1), 4);
    for (int64_t i = 0; i < d0 * d1; i++)   /* -3 .. 3 in steps of 3/32 */
        ((float *)a.data)[i] = (float)(i % 65 - 32) * (3.0f / 32.0f);
    return a;
}

static const float *f32(const sim_array *a)
{
    return (const float *)a->data;
}




/* ===== activation functions ===== */

static double sigm(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static double act_ref(int j, double x)
{
    const double pi = 3.14159265358979323846;
    switch (j) {
    case 0: return x * sigm(1.702 * x);                                       /* gelu_apprx_sigmoid */
    case 1: return sigm(1.702 * x) * (1.0 + 1.702 * x * (1.0 - sigm(1.702 * x)));   /* its dx */
    case 2: return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * pi);
    case 3: return sigm(x) * (1.0 + x * (1.0 - sigm(x)));                     /* silu_dx */
    case 4: return 2.0 / sqrt(pi) * exp(-x * x);                              /* erf_dx */
    default: return x * tanh(log1p(exp(x)));                                  /* mish */
    }
}

#define ACT_NAMES "['gelu_apprx_sigmoid', 'gelu_apprx_sigmoid_dx', 'gelu_dx', 'silu_dx', 'erf_dx', 'mish']"

Test(nki_api, activation_functions_in_both_generations)
{
    /* legacy nl.<name>(x) and current nisa.activation(op=nl.<name>) */
    const char *legacy =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    outs = []\n"
        "    t = nl.load(x)\n"
        "    for name in " ACT_NAMES ":\n"
        "        o = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "        nl.store(o, getattr(nl, name)(t))\n"
        "        outs.append(o)\n"
        "    return tuple(outs)\n";
    const char *current =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    outs = []\n"
        "    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    for name in " ACT_NAMES ":\n"
        "        r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)\n"
        "        nisa.activation(dst=r, op=getattr(nl, name), data=t)\n"
        "        o = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "        nisa.dma_copy(dst=o, src=r)\n"
        "        outs.append(o)\n"
        "    return tuple(outs)\n";
    const char *srcs[2] = { legacy, current };
    sim_array in = mk("x", 4, 65);

    for (int s = 0; s < 2; s++) {
        kt_result r;
        kt_run(&r, srcs[s], "k", &in, 1, 0, 0, true);
        cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
        cr_assert_eq(r.n_out, 6);
        for (int j = 0; j < 6; j++)
            for (int i = 0; i < 4 * 65; i++) {
                double x = f32(&in)[i], want = act_ref(j, x), got = f32(&r.out[j])[i];
                cr_assert(fabs(got - want) <= 1e-5 + 1e-5 * fabs(want),
                          "generation %d function %d at x=%g: %g, want %g", s, j, x, got, want);
            }
        kt_run_done(&r);
    }
    sim_array_release(&in);
}

/* ===== keyword forms and mgrid axes ===== */

Test(nki_api, reshape_takes_shape_as_a_keyword)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    o = nl.ndarray((4, 2, 32), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((4, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x.reshape(shape=(4, 64)))\n"
        "    nisa.dma_copy(dst=o, src=t.reshape(shape=[4, 2, 32]))\n"
        "    assert tuple(t.reshape(shape=(4, 2, -1)).shape) == (4, 2, 32)\n"
        "    return o\n";
    const char *bad =
        "import nki\n"
        "import nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    y = x.reshape(newshape=(256,))\n"
        "    return x\n";
    sim_array in = mk("x", 4, 64);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.out[0].ndim, 3);
    cr_assert_eq(r.out[0].shape[2], 32);
    cr_assert(memcmp(r.out[0].data, in.data, (size_t)4 * 64 * 4) == 0);
    kt_run_done(&r);
    kt_run(&r, bad, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 5);
    cr_assert(strstr(r.err.msg, "shape=") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki_api, mgrid_names_four_axes)
{
    /* o[p, z*6 + y*2 + x] = x[p, x*12 + y*4 + z] over a (4, 2, 3, 4) grid */
    const char *src =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    o = nl.ndarray((4, 24), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    g = nl.mgrid[0:4, 0:2, 0:3, 0:4]\n"
        "    t = nl.load(x[g.p, g.x * 12 + g.y * 4 + g.z])\n"
        "    assert tuple(t.shape) == (4, 2, 3, 4)\n"
        "    nl.store(o[g.p, g.z * 6 + g.y * 2 + g.x], t)\n"
        "    return o\n";
    const char *bad =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    g = nl.mgrid[0:4, 0:24]\n"
        "    return nl.load(x[g.p, g.y])\n";
    sim_array in = mk("x", 4, 24);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 4; p++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++)
                    cr_assert_eq(f32(&r.out[0])[p * 24 + c * 6 + b * 2 + a],
                                 f32(&in)[p * 24 + a * 12 + b * 4 + c], "[%d, %d, %d, %d]", p, a, b, c);
    kt_run_done(&r);
    kt_run(&r, bad, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 6);
    cr_assert(strstr(r.err.msg, "2 axes, .y is axis 2") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&in);
}

/* ===== dtype information ===== */

Test(nki_api, finfo_gives_each_float_dtypes_limits)
{
    /* the kernel's asserts are the check: exact powers of two and maxima */
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "want = {\n"
        "    'float32': (32, 2.0 ** -23, 3.4028234663852886e38, 2.0 ** -126),\n"
        "    'bfloat16': (16, 2.0 ** -7, 3.3895313892515355e38, 2.0 ** -126),\n"
        "    'float16': (16, 2.0 ** -10, 65504.0, 2.0 ** -14),\n"
        "    'tfloat32': (32, 2.0 ** -10, (2 - 2.0 ** -10) * 2.0 ** 127, 2.0 ** -126),\n"
        "    'float8_e4m3': (8, 0.125, 240.0, 2.0 ** -6),\n"
        "    'float8_e4m3fn': (8, 0.125, 448.0, 2.0 ** -6),\n"
        "    'float8_e5m2': (8, 0.25, 57344.0, 2.0 ** -14),\n"
        "}\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    for name, (bits, eps, mx, tiny) in want.items():\n"
        "        f = nl.finfo(getattr(nl, name))\n"
        "        got = (f.bits, f.eps, f.max, f.min, f.tiny, f.smallest_normal)\n"
        "        assert got == (bits, eps, mx, -mx, tiny, tiny), (name, got)\n"
        "        assert f.dtype == getattr(nl, name)\n"
        "    t = nl.full((4, 8), nl.finfo(nl.bfloat16).min, dtype=nl.bfloat16)\n"
        "    return x\n";
    const char *bad =
        "import nki\n"
        "import nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    m = nl.finfo(nl.int32).max\n"
        "    return x\n";
    sim_array in = mk("x", 4, 8);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    kt_run_done(&r);
    kt_run(&r, bad, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.serr.code, SIM_E_DTYPE, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 5);
    cr_assert(strstr(r.err.msg, "got int32") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&in);
}

/* ===== legacy masks over an instruction's iteration space ===== */

/* Reductions and bn_stats under a mask over their input (the iteration
 * space) instead of their result: unselected inputs stay out of each
 * result, and rows with none keep dst's values. */
Test(nki_api, legacy_reduction_masks_cover_the_iteration_space)
{
    const char *src =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "import neuronxcc.nki.isa as nisa\n"
        "import numpy as np\n"
        "@nki.jit\n"
        "def k(x, y):\n"
        "    outs = [nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(6)]\n"
        "    bo = nl.ndarray((8, 6), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    i_p, i_f = nl.mgrid[0:8, 0:16]\n"
        "    i_r, i_o = nl.mgrid[0:8, 0:1]\n"
        "    i_s, i_t = nl.mgrid[0:8, 0:6]\n"
        "    m = (i_p < 6) & (i_f < 10)\n"
        "    t = nl.load(x)\n"
        "    d = [nl.load(y[:, 0:1]) for _ in range(6)]\n"
        "    d[0][i_r, i_o] = nl.sum(t, axis=1, keepdims=True, mask=m)\n"
        "    d[1][i_r, i_o] = nl.max(t, axis=1, keepdims=True, mask=m)\n"
        "    d[2][i_r, i_o] = nl.mean(t, axis=1, keepdims=True, mask=m)\n"
        "    d[3][i_r, i_o] = nl.var(t, axis=1, keepdims=True, mask=m)\n"
        "    d[4][i_r, i_o] = nisa.tensor_reduce(np.add, t, axis=1, keepdims=True, mask=m)\n"
        "    d[5][i_r, i_o] = nl.sum(t, axis=1, keepdims=True, mask=(i_r < 4))\n"
        "    for j in range(6):\n"
        "        nl.store(outs[j], d[j])\n"
        "    b = nl.load(y[:, 0:6])\n"
        "    b[i_s, i_t] = nisa.bn_stats(t, mask=m, dtype=nl.float32)\n"
        "    nl.store(bo, b)\n"
        "    return tuple(outs) + (bo,)\n";
    sim_array in[2] = { mk("x", 8, 16), mk("y", 8, 16) };
    const float *x = (const float *)in[0].data, *y = (const float *)in[1].data;
    kt_result r;

    for (int i = 0; i < 8 * 16; i++)   /* make y differ from x */
        ((float *)in[1].data)[i] = 100.0f + (float)i;
    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 7);
    for (int p = 0; p < 8; p++) {
        double sum = 0, mx = -INFINITY, var = 0, full = 0, st[6] = { 0 };
        for (int f = 0; f < 16; f++)
            full += x[p * 16 + f];
        for (int f = 0; f < 10; f++) {
            sum += x[p * 16 + f];
            mx = fmax(mx, x[p * 16 + f]);
        }
        for (int f = 0; f < 10; f++)
            var += (x[p * 16 + f] - sum / 10) * (x[p * 16 + f] - sum / 10);
        for (int h = 0; h < 2; h++) {   /* bn_stats: count, mean, M2 of even / odd columns */
            double s = 0, m2 = 0;
            for (int f = h; f < 10; f += 2)
                s += x[p * 16 + f];
            for (int f = h; f < 10; f += 2)
                m2 += (x[p * 16 + f] - s / 5) * (x[p * 16 + f] - s / 5);
            st[(size_t)h * 3] = 5;
            st[(size_t)h * 3 + 1] = s / 5;
            st[(size_t)h * 3 + 2] = m2;
        }
        {
            double want[6] = { sum, mx, sum / 10, var / 10, sum, full };
            for (int j = 0; j < 6; j++) {
                bool kept = j == 5 ? p >= 4 : p >= 6;
                double w = kept ? y[(size_t)p * 16] : want[j], got = f32(&r.out[j])[p];
                cr_assert(fabs(got - w) <= 1e-5 * (1 + fabs(w)), "output %d row %d: %g, want %g", j,
                          p, got, w);
            }
        }
        for (int c = 0; c < 6; c++) {
            double w = p >= 6 ? y[p * 16 + c] : st[c], got = f32(&r.out[6])[p * 6 + c];
            cr_assert(fabs(got - w) <= 1e-5 * (1 + fabs(w)), "bn_stats [%d, %d]: %g, want %g", p, c,
                      got, w);
        }
    }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

Test(nki_api, view_methods_take_their_parameters_by_name)
{
    /* each keyword form gives the positional form's view */
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    t = nl.ndarray((4, 1, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    pairs = [\n"
        "        (t.view(dtype=nl.int32), t.view(nl.int32)),\n"
        "        (t.squeeze_dim(dim=1), t.squeeze_dim(1)),\n"
        "        (t.expand_dim(dim=2), t.expand_dim(2)),\n"
        "        (t.permute(dims=(0, 2, 1)), t.permute(0, 2, 1)),\n"
        "        (t.select(dim=2, index=3), t.select(2, 3)),\n"
        "        (t.slice(dim=2, start=2, end=6), t.slice(2, 2, 6)),\n"
        "        (t.slice(2, 0, 8, step=2), t.slice(2, 0, 8, 2)),\n"
        "        (t.broadcast(dim=1, size=5), t.broadcast(1, 5)),\n"
        "        (t.broadcast_to(shape=(4, 3, 8)), t.broadcast_to((4, 3, 8))),\n"
        "        (t.astype(dtype=nl.bfloat16), t.astype(nl.bfloat16)),\n"
        "    ]\n"
        "    for i, (a, b) in enumerate(pairs):\n"
        "        assert tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype, (i, a, b)\n"
        "        assert tuple(a.strides) == tuple(b.strides), (i, a.strides, b.strides)\n"
        "    return x\n";
    static const struct {
        const char *call, *needle;
        sim_error_code code;
    } bad[] = {
        { "t.permute(order=(1, 0))", "keyword argument 'order'", SIM_E_UNSUPPORTED_API },
        { "t.view(type=nl.int32)", "keyword argument 'type'", SIM_E_UNSUPPORTED_API },
        { "t.slice(dim=1, start=0)", "argument 'end' is missing", SIM_E_BAD_ARGUMENT },
        { "t.squeeze_dim()", "argument 'dim' is missing", SIM_E_BAD_ARGUMENT },
    };
    sim_array in = mk("x", 4, 8);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    kt_run_done(&r);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char buf[512];
        snprintf(buf, sizeof(buf),
                 "import nki\nimport nki.language as nl\n@nki.jit\ndef k(x):\n"
                 "    t = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
                 "    u = %s\n    return x\n", bad[i].call);
        kt_run(&r, buf, "k", &in, 1, 0, 0, true);
        cr_assert_eq(r.serr.code, bad[i].code, "%s: %s", bad[i].call, r.err.msg);
        cr_assert_eq(r.serr.line, 6, "%s", bad[i].call);
        cr_assert(strstr(r.err.msg, bad[i].needle) != NULL, "%s: %s", bad[i].call, r.err.msg);
        kt_run_done(&r);
    }
    sim_array_release(&in);
}

Test(nki_api, dma_transpose_in_three_and_four_dims)
{
    /* x (120, 2) read as (2, 3, 4, 10) and (6, 4, 10): the 4-D transpose is
     * (3, 1, 2, 0), the 3-D one (2, 1, 0); a 2-D-style dst for a 4-D src
     * and other axes= are refused */
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    s4 = x.reshape((2, 3, 4, 10))\n"
        "    o4 = nl.ndarray((10, 3, 4, 2), dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    nisa.dma_transpose(dst=o4, src=s4, axes=(3, 1, 2, 0))\n"
        "    s3 = x.reshape((6, 4, 10))\n"
        "    t3 = nl.ndarray((6, 4, 10), dtype=x.dtype, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t3, src=s3)\n"
        "    o3 = nl.ndarray((10, 4, 6), dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    nisa.dma_transpose(dst=o3, src=t3)\n"
        "    return o4, o3\n";
    const char *bad =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    o = nl.ndarray((10, 4, 3, 2), dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    nisa.dma_transpose(dst=o, src=x.reshape((2, 3, 4, 10)))\n"
        "    return o\n";
    sim_array x = mk("x", 120, 2);
    kt_result r;

    kt_run(&r, src, "k", &x, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++)
                for (int d = 0; d < 10; d++)
                    cr_assert_eq(f32(&r.out[0])[((d * 3 + b) * 4 + c) * 2 + a],
                                 f32(&x)[((a * 3 + b) * 4 + c) * 10 + d]);
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 10; c++)
                cr_assert_eq(f32(&r.out[1])[(c * 4 + b) * 6 + a], f32(&x)[(a * 4 + b) * 10 + c]);
    kt_run_done(&r);
    kt_run(&r, bad, "k", &x, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_SHAPE_MISMATCH, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "a 4-D src transposes into a (10, 3, 4, 2) dst") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&x);
}

/* Legacy nl.mgrid with more ranges than an index uses: the tile's shape
 * follows the index expressions used (a[ix, iy] is (128, 512), not
 * (128, 1, 512)), so broadcast_to and masks over the whole grid work (the
 * legacy rmsnorm/layernorm pattern). */
Test(nki_api, legacy_mgrid_unused_ranges_are_not_tile_dims)
{
    const char *src =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(a, g):\n"
        "    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    ix, iw, iy = nl.mgrid[0:128, 0:1, 0:512]\n"
        "    t = nl.load(a[ix, iy])\n"
        "    gt = nl.load(g[iw, iy])\n"
        "    assert t.shape == (128, 512), t.shape\n"
        "    assert gt.shape == (1, 512), gt.shape\n"
        "    r = nl.multiply(t, gt.broadcast_to((128, 512)))\n"
        "    nl.store(out[ix, iy], value=r, mask=(iy < 500))\n"
        "    return out\n";
    sim_array in[2] = { mk("a", 128, 512), mk("g", 1, 512) };
    kt_result r;

    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 128; p++)
        for (int f = 0; f < 500; f++) {
            float want = f32(&in[0])[p * 512 + f] * f32(&in[1])[f];
            cr_assert_float_eq(f32(&r.out[0])[p * 512 + f], want, 1e-6f * fabsf(want) + 1e-30f,
                               "[%d, %d]", p, f);
        }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* The legacy layernorm tutorial's two index patterns, run unmodified in
 * spirit: gamma/beta as one row loaded through `nl.arange(1)[:, None]` from
 * a (1, C) reshape and broadcast to 128 partitions; rows masked past the end
 * of x; v1 computes the statistics with nl.mean, v2 with bn_stats over
 * masked free-dim chunks, bn_aggr and a column picked by an int index, then
 * one tensor_scalar with NumPy ops.  Checked against the same layernorm in
 * C (200 rows: the second tile is ragged; 96 columns: the second bn_stats
 * chunk of 64 is masked to 32). */
Test(nki_api, legacy_layernorm_index_patterns_run)
{
    const char *src =
        "import numpy as np\n"
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "import neuronxcc.nki.isa as nisa\n"
        "def rows(g, b, C):\n"
        "    i0 = nl.arange(1)[:, None]\n"
        "    jf = nl.arange(C)[None, :]\n"
        "    gs = nl.load(g.reshape((1, C))[i0, jf])\n"
        "    bs = nl.load(b.reshape((1, C))[i0, jf])\n"
        "    assert tuple(gs.shape) == (1, C), gs.shape\n"
        "    return gs.broadcast_to((128, C)), bs.broadcast_to((128, C))\n"
        "@nki.jit\n"
        "def v1(x, g, b):\n"
        "    R, C = x.shape\n"
        "    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    ip = nl.arange(128)[:, None]\n"
        "    jf = nl.arange(C)[None, :]\n"
        "    gb, bb = rows(g, b, C)\n"
        "    for t in nl.affine_range((R + 127) // 128):\n"
        "        xs = nl.load(x[t * 128 + ip, jf], mask=(t * 128 + ip < R))\n"
        "        mean = nl.mean(xs, axis=1)\n"
        "        var = nl.mean(nl.square(xs), axis=1) - mean * mean\n"
        "        y = (xs - mean) * nl.rsqrt(var + 1e-5)\n"
        "        nl.store(out[t * 128 + ip, jf], value=y * gb + bb, mask=(t * 128 + ip < R))\n"
        "    return out\n"
        "@nki.jit\n"
        "def v2(x, g, b):\n"
        "    R, C = x.shape\n"
        "    F = 64\n"
        "    n = (C + F - 1) // F\n"
        "    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    ip = nl.arange(128)[:, None]\n"
        "    jf = nl.arange(C)[None, :]\n"
        "    i6 = nl.arange(6)[None, :]\n"
        "    iF = nl.arange(F)[None, :]\n"
        "    gb, bb = rows(g, b, C)\n"
        "    for t in nl.affine_range((R + 127) // 128):\n"
        "        xs = nl.load(x[t * 128 + ip, jf], mask=(t * 128 + ip < R))\n"
        "        st = nl.ndarray((128, 6 * n), dtype=np.float32)\n"
        "        for j in nl.affine_range(n):\n"
        "            st[ip, j * 6 + i6] = nisa.bn_stats(xs[ip, j * F + iF],\n"
        "                                               mask=(j * F + iF < C), dtype=np.float32)\n"
        "        mv = nisa.bn_aggr(st[ip, nl.arange(6 * n)[None, :]])\n"
        "        rs = nl.rsqrt(mv[ip, 1] + 1e-5)\n"
        "        y = nisa.tensor_scalar(data=xs, op0=np.subtract, operand0=mv[ip, 0],\n"
        "                               op1=np.multiply, operand1=rs)\n"
        "        nl.store(out[t * 128 + ip, jf], value=y * gb + bb, mask=(t * 128 + ip < R))\n"
        "    return out\n";
    enum { R = 200, C = 96 };
    sim_array in[3] = { mk("x", R, C), mk("g", 1, C), mk("b", 1, C) };
    /* g and b are 1-D vectors, as in the tutorial; b shifted so it differs from g */
    in[1].ndim = in[2].ndim = 1;
    in[1].shape[0] = in[2].shape[0] = C;
    for (int j = 0; j < C; j++)
        ((float *)in[2].data)[j] += 0.5f;
    static const char *const entries[] = { "v1", "v2" };

    for (int e = 0; e < 2; e++) {
        kt_result r;
        kt_run(&r, src, entries[e], in, 3, 0, 0, true);
        cr_assert_eq(r.rc, KF_OK, "%s: %s", entries[e], r.err.msg);
        cr_assert_eq(r.n_out, 1);
        for (int i = 0; i < R; i++) {
            double s = 0, s2 = 0;
            for (int j = 0; j < C; j++) {
                double v = f32(&in[0])[i * C + j];
                s += v;
                s2 += v * v;
            }
            double mean = s / C, var = s2 / C - mean * mean;
            for (int j = 0; j < C; j++) {
                double want = (f32(&in[0])[i * C + j] - mean) / sqrt(var + 1e-5) *
                                  f32(&in[1])[j] + f32(&in[2])[j];
                double got = f32(&r.out[0])[i * C + j];
                cr_assert(fabs(got - want) <= 1e-4 * (1 + fabs(want)), "%s out[%d, %d] = %g, want %g",
                          entries[e], i, j, got, want);
            }
        }
        kt_run_done(&r);
    }
    for (int i = 0; i < 3; i++)
        sim_array_release(&in[i]);
}
