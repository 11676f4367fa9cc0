/* The nki face: small kernels from strings through sim_run_source, checking
 * outputs (values, NaN fill, rounding) and the instruction record (opcodes,
 * engines, regions, matmul shape, source lines), in both API generations. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_nki.h"

static sim_array mk(const char *name, sim_dtype dt, int64_t r, int64_t c)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "%s", name);
    a.dtype = dt;
    a.ndim = c > 0 ? 2 : 1;
    a.shape[0] = r;
    a.shape[1] = c;
    a.data = kf_calloc((size_t)(r * (c > 0 ? c : 1)), sim_dtype_size(dt));
    return a;
}

static float *f32(const sim_array *a)
{
    return (float *)a->data;
}

static float bf16_val(const sim_array *a, int64_t i)
{
    uint16_t h = ((const uint16_t *)a->data)[i];
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void fill(sim_array *a, unsigned seed)
{
    int64_t n = sim_array_elems(a);
    srand(seed);
    for (int64_t i = 0; i < n; i++) {
        float v = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
        if (a->dtype == SIM_DT_FLOAT32) {
            f32(a)[i] = v;
        } else {   /* bfloat16: truncate a float with few mantissa bits */
            uint32_t u;
            memcpy(&u, &v, 4);
            ((uint16_t *)a->data)[i] = (uint16_t)(u >> 16);
        }
    }
}




/* Run src's kernel k with numerics on one fp32 input x (rows x cols): its
 * Python asserts are the test, so it must succeed. */
static void run_k_ok(const char *src, int64_t rows, int64_t cols)
{
    sim_array in = mk("x", SIM_DT_FLOAT32, rows, cols);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&in);
}

static size_t count_op(const sim_record *rec, sim_opcode op)
{
    size_t n = 0;
    for (size_t i = 0; i < rec->n_insns; i++)
        n += rec->insns[i].opcode == op;
    return n;
}

static const sim_insn *first_op(const sim_record *rec, sim_opcode op)
{
    for (size_t i = 0; i < rec->n_insns; i++)
        if (rec->insns[i].opcode == op)
            return &rec->insns[i];
    return NULL;
}

static const char *LEGACY_ADD =
    "from neuronxcc import nki\n"
    "import neuronxcc.nki.language as nl\n"
    "@nki.jit\n"
    "def add(a, b):\n"
    "    rows, cols = a.shape\n"
    "    c = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)\n"
    "    i_p = nl.program_id(0) * 128 + nl.arange(128)[:, None]\n"
    "    i_f = nl.program_id(1) * 512 + nl.arange(512)[None, :]\n"
    "    m = (i_p < rows) & (i_f < cols)\n"
    "    x = nl.load(a[i_p, i_f], mask=m)\n"
    "    y = nl.load(b[i_p, i_f], mask=m)\n"
    "    nl.store(c[i_p, i_f], value=x + y, mask=m)\n"
    "    return c\n";

Test(nki, legacy_tensor_add_spmd_masked)
{
    sim_array in[2] = { mk("a", SIM_DT_FLOAT32, 200, 700), mk("b", SIM_DT_FLOAT32, 200, 700) };
    kt_result r;

    fill(&in[0], 1);
    fill(&in[1], 2);
    kt_run(&r, LEGACY_ADD, "add", in, 2, 2, 2, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 1);
    cr_assert_eq(r.out[0].ndim, 2);
    cr_assert_eq(r.out[0].shape[0], 200);
    cr_assert_eq(r.out[0].shape[1], 700);
    for (int64_t i = 0; i < (int64_t)200 * 700; i++)
        cr_assert_float_eq(f32(&r.out[0])[i], f32(&in[0])[i] + f32(&in[1])[i], 0, "element %lld", (long long)i);
    /* 4 programs x (2 loads + add + store) */
    cr_assert_eq(count_op(&r.rec, SIM_OP_DMA_COPY), 12);
    cr_assert_eq(count_op(&r.rec, SIM_OP_TENSOR_TENSOR), 4);
    cr_assert_eq(r.rec.spmd_programs, 4);
    {
        const sim_insn *in0 = first_op(&r.rec, SIM_OP_DMA_COPY);
        const sim_loc *loc = &r.rec.locs[in0->loc];
        cr_assert_str_eq(r.rec.strs[loc->file], "kernel.py");
        cr_assert_eq(loc->line, 10);
        cr_assert_str_eq(r.rec.strs[loc->func], "add");
        cr_assert_eq(in0->engine, SIM_ENG_DMA);
        cr_assert_eq(in0->dst[0].mem, SIM_MEM_SBUF);
        cr_assert_eq(in0->src[0].mem, SIM_MEM_HBM);
        cr_assert_eq(in0->dst[0].part_count, 128);
        cr_assert(in0->flags & SIM_F_MASKED);
    }
    cr_assert_eq(r.rec.insns[r.rec.n_insns - 1].spmd, 3);
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

static const char *CURRENT_ADD =
    "import nki\n"
    "import nki.language as nl\n"
    "import nki.isa as nisa\n"
    "@nki.jit(platform_target='trn2')\n"
    "def add(a, b):\n"
    "    rows, cols = a.shape\n"
    "    c = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)\n"
    "    r0 = nl.program_id(0) * 128\n"
    "    nr = min(128, rows - r0)\n"
    "    x = nl.ndarray((128, cols), dtype=a.dtype, buffer=nl.sbuf)\n"
    "    y = nl.ndarray((128, cols), dtype=b.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=x[0:nr, :], src=a[r0:r0 + nr, :])\n"
    "    nisa.dma_copy(dst=y[0:nr, :], src=b[r0:r0 + nr, :])\n"
    "    nisa.tensor_tensor(dst=x[0:nr, :], data1=x[0:nr, :], data2=y[0:nr, :], op=nl.add)\n"
    "    nisa.dma_copy(dst=c[r0:r0 + nr, :], src=x[0:nr, :])\n"
    "    return c\n";

Test(nki, current_tensor_add_bf16)
{
    sim_array in[2] = { mk("a", SIM_DT_BFLOAT16, 300, 64), mk("b", SIM_DT_BFLOAT16, 300, 64) };
    kt_result r;

    fill(&in[0], 3);
    fill(&in[1], 4);
    kt_run(&r, CURRENT_ADD, "add", in, 2, 3, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.out[0].dtype, SIM_DT_BFLOAT16);
    for (int64_t i = 0; i < (int64_t)300 * 64; i++) {
        float want = bf16_val(&in[0], i) + bf16_val(&in[1], i);
        cr_assert(fabsf(bf16_val(&r.out[0], i) - want) <= fabsf(want) * 0.0079f + 1e-30f,
                  "element %lld: %g vs %g", (long long)i, bf16_val(&r.out[0], i), want);
    }
    {
        const sim_insn *tt = first_op(&r.rec, SIM_OP_TENSOR_TENSOR);
        cr_assert_eq(tt->engine, SIM_ENG_VECTOR);
        cr_assert_eq(tt->nsrc, 2);
        cr_assert_eq(tt->partitions, 128);
        cr_assert_eq(tt->elems_per_part, 64);
        cr_assert_eq(tt->dst[0].byte_hi - tt->dst[0].byte_lo, 128);
        cr_assert_eq(r.rec.locs[tt->loc].line, 14);
    }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

static const char *CURRENT_MM =
    "import nki\n"
    "import nki.language as nl\n"
    "import nki.isa as nisa\n"
    "@nki.jit\n"
    "def mm(lhsT, rhs):\n"
    "    K, M = lhsT.shape\n"
    "    _, N = rhs.shape\n"
    "    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)\n"
    "    for k in nl.affine_range(K // 128):\n"
    "        a = nl.ndarray((128, M), dtype=lhsT.dtype, buffer=nl.sbuf)\n"
    "        b = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)\n"
    "        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])\n"
    "        nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])\n"
    "        nisa.nc_matmul(dst=acc, stationary=a, moving=b)\n"
    "    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    nisa.tensor_copy(dst=res, src=acc)\n"
    "    nisa.dma_copy(dst=out, src=res)\n"
    "    return out\n";

static void ref_mm(const sim_array *a, const sim_array *b, int K, int M, int N, double *c)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)bf16_val(a, (int64_t)k * M + m) * (double)bf16_val(b, (int64_t)k * N + n);
            c[m * N + n] = s;
        }
}

Test(nki, current_matmul_psum_first_write_then_accumulate)
{
    sim_array in[2] = { mk("lhsT", SIM_DT_BFLOAT16, 256, 64), mk("rhs", SIM_DT_BFLOAT16, 256, 200) };
    double *want = kf_malloc(sizeof(double) * 64 * 200);
    kt_result r;
    size_t nmm = 0;

    fill(&in[0], 5);
    fill(&in[1], 6);
    kt_run(&r, CURRENT_MM, "mm", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    ref_mm(&in[0], &in[1], 256, 64, 200, want);
    for (int64_t i = 0; i < (int64_t)64 * 200; i++)
        cr_assert(fabs(f32(&r.out[0])[i] - want[i]) < 1e-4, "element %lld: %g vs %g", (long long)i,
                  f32(&r.out[0])[i], want[i]);
    for (size_t i = 0; i < r.rec.n_insns; i++) {
        const sim_insn *in0 = &r.rec.insns[i];
        if (in0->opcode != SIM_OP_MATMUL)
            continue;
        cr_assert_eq(in0->engine, SIM_ENG_TENSOR);
        cr_assert_eq(in0->mm_k, 128);
        cr_assert_eq(in0->mm_m, 64);
        cr_assert_eq(in0->mm_n, 200);
        cr_assert_eq(in0->flops, 2ull * 128 * 64 * 200);
        cr_assert_eq(in0->dst[0].mem, SIM_MEM_PSUM);
        /* the first matmul into the fresh PSUM tile overwrites, the next accumulates */
        cr_assert_eq(!!(in0->flags & SIM_F_ACCUMULATE), nmm > 0, "matmul %zu", nmm);
        cr_assert_not(in0->flags & SIM_F_FP32_PE);
        nmm++;
    }
    cr_assert_eq(nmm, 2);
    free(want);
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* tensor_tensor on dense FP32 tiles computes straight on the stores: the
 * result must be the gather/compute/scatter answer when dst is data1, when
 * dst overlaps data1 shifted (every input read before any output lands),
 * and a PSUM input must close its accumulation as a read does. */
static const char *TT_IN_PLACE =
    "import nki\n"
    "import nki.language as nl\n"
    "import nki.isa as nisa\n"
    "@nki.jit\n"
    "def k(a, b):\n"
    "    out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    u = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=t, src=a)\n"
    "    nisa.dma_copy(dst=u, src=b)\n"
    "    nisa.tensor_tensor(dst=t, data1=t, data2=u, op=nl.subtract)\n"
    "    nisa.dma_copy(dst=out[0], src=t)\n"
    "    v = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=v, src=a)\n"
    "    nisa.tensor_tensor(dst=v[32:96, :], data1=v[0:64, :], data2=u[0:64, :], op=nl.add)\n"
    "    nisa.dma_copy(dst=out[1], src=v)\n"
    "    p = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)\n"
    "    nisa.nc_matmul(dst=p, stationary=u, moving=u)\n"
    "    s = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    nisa.memset(dst=s, value=1.0)\n"
    "    nisa.tensor_tensor(dst=s, data1=s, data2=p, op=nl.add)\n"
    "    nisa.nc_matmul(dst=p, stationary=u, moving=u)\n"
    "    w = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    nisa.tensor_copy(dst=w, src=p)\n"
    "    nisa.dma_copy(dst=out[2, 0:64, :], src=s)\n"
    "    nisa.dma_copy(dst=out[3, 0:64, :], src=w)\n"
    "    return out\n";

Test(nki, tensor_tensor_in_place_matches_copies)
{
    sim_array in[2] = { mk("a", SIM_DT_FLOAT32, 128, 64), mk("b", SIM_DT_FLOAT32, 128, 64) };
    const float *a = f32(&in[0]), *b = f32(&in[1]), *o;
    const ptrdiff_t plane = (ptrdiff_t)128 * 64;   /* one of out's four (128, 64) planes */
    kt_result r;

    fill(&in[0], 11);
    fill(&in[1], 12);
    kt_run(&r, TT_IN_PLACE, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    o = f32(&r.out[0]);
    for (int i = 0; i < 128 * 64; i++)
        cr_assert_eq(o[i], a[i] - b[i], "dst is data1, element %d", i);
    o += plane;
    for (int p = 0; p < 128; p++)
        for (int f = 0; f < 64; f++) {
            float want = p >= 32 && p < 96 ? a[(ptrdiff_t)(p - 32) * 64 + f] + b[(ptrdiff_t)(p - 32) * 64 + f]
                                           : a[(ptrdiff_t)p * 64 + f];
            cr_assert_eq(o[(ptrdiff_t)p * 64 + f], want, "shifted overlap, partition %d column %d", p, f);
        }
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) {
            double btb = 0;
            for (int k = 0; k < 128; k++)
                btb += (double)b[(ptrdiff_t)k * 64 + i] * (double)b[(ptrdiff_t)k * 64 + j];
            o = f32(&r.out[0]) + 2 * plane;
            cr_assert(fabs(o[(ptrdiff_t)i * 64 + j] - (1.0 + btb)) < 1e-4, "PSUM input, (%d, %d): %g vs %g",
                      i, j, o[(ptrdiff_t)i * 64 + j], 1.0 + btb);
            o += plane;
            /* the read closed the accumulation: the next matmul overwrites */
            cr_assert(fabs(o[(ptrdiff_t)i * 64 + j] - btb) < 1e-4, "matmul after the read, (%d, %d): %g vs %g",
                      i, j, o[(ptrdiff_t)i * 64 + j], btb);
        }
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

static const char *LEGACY_MM =
    "from neuronxcc import nki\n"
    "import neuronxcc.nki.language as nl\n"
    "import neuronxcc.nki.isa as nisa\n"
    "@nki.jit\n"
    "def mm(lhsT, rhs):\n"
    "    K, M = lhsT.shape\n"
    "    _, N = rhs.shape\n"
    "    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    tiles = nl.ndarray((K // 128, nl.par_dim(128), M), dtype=lhsT.dtype, buffer=nl.sbuf)\n"
    "    i_k, i_m = nl.mgrid[0:128, 0:M]\n"
    "    for k in nl.affine_range(K // 128):\n"
    "        tiles[k, i_k, i_m] = nl.load(lhsT[k * 128 + i_k, i_m])\n"
    "    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)\n"
    "    for k in nl.affine_range(K // 128):\n"
    "        b = nl.load(rhs[k * 128:(k + 1) * 128, 0:N])\n"
    "        acc += nl.matmul(tiles[k, i_k, i_m], b, transpose_x=True)\n"
    "    nl.store(out, value=nl.copy(acc, dtype=nl.float32))\n"
    "    return out\n";

Test(nki, legacy_matmul_block_dims_and_psum_accumulate)
{
    sim_array in[2] = { mk("lhsT", SIM_DT_BFLOAT16, 384, 96), mk("rhs", SIM_DT_BFLOAT16, 384, 128) };
    double *want = kf_malloc(sizeof(double) * 96 * 128);
    kt_result r;

    fill(&in[0], 7);
    fill(&in[1], 8);
    kt_run(&r, LEGACY_MM, "mm", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    ref_mm(&in[0], &in[1], 384, 96, 128, want);
    for (int64_t i = 0; i < (int64_t)96 * 128; i++)
        cr_assert(fabs(f32(&r.out[0])[i] - want[i]) < 1e-4, "element %lld", (long long)i);
    /* acc += nl.matmul(...) is one MATMUL into acc, no extra add; the first
     * overwrites (nl.zeros closed acc's accumulation), the others accumulate */
    cr_assert_eq(count_op(&r.rec, SIM_OP_MATMUL), 3);
    cr_assert_eq(count_op(&r.rec, SIM_OP_TENSOR_TENSOR), 0);
    {
        size_t nmm = 0;
        for (size_t i = 0; i < r.rec.n_insns; i++)
            if (r.rec.insns[i].opcode == SIM_OP_MATMUL) {
                cr_assert_eq(!!(r.rec.insns[i].flags & SIM_F_ACCUMULATE), nmm > 0, "matmul %zu", nmm);
                nmm++;
            }
    }
    free(want);
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

static bool same_region(const sim_region *a, const sim_region *b)
{
    return a->alloc == b->alloc && a->mem == b->mem && a->dtype == b->dtype &&
           a->part_lo == b->part_lo && a->part_count == b->part_count && a->byte_lo == b->byte_lo &&
           a->byte_hi == b->byte_hi && a->bytes == b->bytes &&
           a->elems_per_part == b->elems_per_part && a->contig_bytes == b->contig_bytes &&
           a->inner_stride == b->inner_stride && a->descriptors == b->descriptors;
}

Test(nki, numerics_off_records_the_same)
{
    sim_array in[2] = { mk("lhsT", SIM_DT_BFLOAT16, 256, 64), mk("rhs", SIM_DT_BFLOAT16, 256, 200) };
    kt_result on, off;

    fill(&in[0], 1);
    fill(&in[1], 2);
    kt_run(&on, CURRENT_MM, "mm", in, 2, 0, 0, true);
    kt_run(&off, CURRENT_MM, "mm", in, 2, 0, 0, false);
    cr_assert_eq(on.rc, KF_OK, "%s", on.err.msg);
    cr_assert_eq(off.rc, KF_OK, "%s", off.err.msg);
    cr_assert_eq(on.rec.n_insns, off.rec.n_insns);
    for (size_t i = 0; i < on.rec.n_insns; i++) {
        const sim_insn *a = &on.rec.insns[i], *b = &off.rec.insns[i];
        cr_assert_eq(a->opcode, b->opcode);
        cr_assert_eq(a->flags, b->flags, "insn %zu", i);
        cr_assert_eq(a->flops, b->flops);
        for (int k = 0; k < a->ndst; k++)
            cr_assert(same_region(&a->dst[k], &b->dst[k]), "insn %zu dst %d", i, k);
        for (int k = 0; k < a->nsrc; k++)
            cr_assert(same_region(&a->src[k], &b->src[k]), "insn %zu src %d", i, k);
        cr_assert_eq(a->nsrc, b->nsrc);
        cr_assert_eq(a->ndst, b->ndst);
    }
    /* with numerics off the output is left NaN-filled */
    cr_assert(isnan(f32(&off.out[0])[0]));
    kt_run_done(&on);
    kt_run_done(&off);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

Test(nki, unwritten_output_is_nan_and_ints_are_4)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    a = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    b = nl.ndarray((4, 4), dtype=nl.int32, buffer=nl.shared_hbm)\n"
        "    return a, b\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 4, 4);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 2);
    for (int i = 0; i < 16; i++) {
        cr_assert(isnan(f32(&r.out[0])[i]));
        cr_assert_eq(((int32_t *)r.out[1].data)[i], 4);
    }
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, bf16_store_rounds_to_nearest_even)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)\n"
        "    o = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    nisa.tensor_copy(dst=o, src=t)\n"
        "    nisa.dma_copy(dst=out, src=o)\n"
        "    return out\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 1, 4);
    float *xs = in.data;
    kt_result r;
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even -> 1; 1 + 3*2^-8 ties to
     * 1 + 2^-6 (even); 1 + 2^-8 + 2^-20 is above the tie -> 1 + 2^-7. */
    xs[0] = 1.0f + 0x1p-8f;
    xs[1] = 1.0f + 3 * 0x1p-8f;
    xs[2] = 1.0f + 0x1p-8f + 0x1p-20f;
    xs[3] = -2.5f;
    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(bf16_val(&r.out[0], 0), 1.0f);
    cr_assert_eq(bf16_val(&r.out[0], 1), 1.0f + 0x1p-6f);
    cr_assert_eq(bf16_val(&r.out[0], 2), 1.0f + 0x1p-7f);
    cr_assert_eq(bf16_val(&r.out[0], 3), -2.5f);
    kt_run_done(&r);
    sim_array_release(&in);
}

/* Python-level semantics checked inside a kernel with asserts: dtype
 * comparisons, the >=2-D view rule, HBM int-drop, block dims, .ap, reshape,
 * tile_size, get_nc_version, enums. */
Test(nki, view_rules_and_dtypes)
{
    const char *src =
        "import numpy as np\n"
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "from neuronxcc import nki as lnki\n"
        "import neuronxcc.nki.language as lnl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    assert nl.float32 == np.float32 and np.float32 == nl.float32\n"
        "    assert nl.bfloat16 == 'bfloat16' and nl.float32 != nl.bfloat16\n"
        "    assert x.dtype == nl.float32 and x.dtype == np.dtype(np.float32)\n"
        "    assert lnl.float32 == nl.float32 and nl.float32.itemsize == 4\n"
        "    assert np.zeros((2, 2), dtype=nl.float32).dtype == np.float32\n"
        "    assert np.dtype(nl.int8) == np.int8 and nl.fp32.min < -3e38\n"
        "    assert nl.tile_size.pmax == 128 and nl.tile_size.gemm_moving_fmax == 512\n"
        "    assert nl.tile_size.total_available_sbuf_size == 224 * 1024\n"
        "    assert nisa.get_nc_version() >= nisa.nc_version.gen2\n"
        "    t = nl.ndarray((128, 8, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    assert tuple(t[:, 0, 0].shape) == (128, 1)\n"
        "    assert tuple(t[0, :, :].shape) == (1, 8, 16)\n"
        "    assert tuple(t[:, 3].shape) == (128, 16)\n"
        "    assert tuple(t[..., 2:4].shape) == (128, 8, 2)\n"
        "    assert tuple(t[:, nl.ds(2, 3), -1].shape) == (128, 3)\n"
        "    assert tuple(x[1, 0:4].shape) == (4,)\n"
        "    assert tuple(x[1].shape) == (64,)\n"
        "    b = nl.ndarray((3, nl.par_dim(128), 32), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    assert tuple(b[1].shape) == (128, 32)\n"
        "    assert tuple(t.reshape((128, 128)).shape) == (128, 128)\n"
        "    assert tuple(x.reshape((2, 32, 64)).shape) == (2, 32, 64)\n"
        "    w = t.ap(pattern=[[128, 128], [16, 4], [1, 2]], offset=0)\n"
        "    assert tuple(w.shape) == (128, 4, 2)\n"
        "    g = nl.ndarray((1, 16), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    assert tuple(g.broadcast_to((128, 16)).shape) == (128, 16)\n"
        "    i_p, i_f = nl.mgrid[0:128, 0:16]\n"
        "    assert tuple(t[i_p, 2, i_f].shape) == (128, 16)\n"
        "    g = nl.mgrid[0:128, 0:16]\n"
        "    assert tuple(t[g.p, 2, g.x].shape) == (128, 16) and tuple(g.x.shape) == (1, 16)\n"
        "    ip = nl.arange(128)[:, None]\n"
        "    assert tuple(t[ip, 0, 0].shape) == (128, 1)\n"
        "    assert nisa.engine.vector != nisa.engine.scalar\n"
        "    assert nl.program_ndim() == 0 and nl.num_programs(0) == 1\n"
        "    return x\n";
    run_k_ok(src, 64, 64);
}

Test(nki, legacy_ops_promote_and_reduce)
{
    const char *src =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "import neuronxcc.nki.isa as nisa\n"
        "import numpy as np\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.load(x)\n"
        "    s = nl.sum(t, axis=1)\n"
        "    assert tuple(s.shape) == (128, 1)\n"
        "    m = nl.max(t, axis=[1], keepdims=True)\n"
        "    e = nl.exp(nl.subtract(t, m))\n"
        "    mean = nl.mean(t, axis=1, keepdims=True)\n"
        "    r = nisa.tensor_reduce(np.add, t, axis=1, negate=True, keepdims=True)\n"
        "    res = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    res[:, 0:1] = s\n"
        "    res[:, 1:2] = nl.sum(e, axis=1, keepdims=True)\n"
        "    res[:, 2:3] = mean * 2.0 - 1.0\n"
        "    res[:, 3:4] = r\n"
        "    nl.store(out, value=res)\n"
        "    return out\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 128, 32);
    kt_result r;

    fill(&in, 9);
    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 128; p++) {
        double s = 0, mx = -1e30, se = 0;
        for (int f = 0; f < 32; f++) {
            s += f32(&in)[p * 32 + f];
            mx = fmax(mx, f32(&in)[p * 32 + f]);
        }
        for (int f = 0; f < 32; f++)
            se += exp(f32(&in)[p * 32 + f] - mx);
        cr_assert(fabs(f32(&r.out[0])[p * 4 + 0] - s) < 1e-4);
        cr_assert(fabs(f32(&r.out[0])[p * 4 + 1] - se) < 1e-4);
        cr_assert(fabs(f32(&r.out[0])[p * 4 + 2] - (s / 32 * 2 - 1)) < 1e-4);
        cr_assert(fabs(f32(&r.out[0])[p * 4 + 3] + s) < 1e-4);
    }
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, activation_reduce_registers_and_transpose)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    acc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.activation(dst=y, op=nl.copy, data=t, scale=2.0, reduce_op=nl.add,\n"
        "                    reduce_res=acc, reduce_cmd=nisa.reduce_cmd.reset_reduce)\n"
        "    nisa.activation(dst=y, op=nl.copy, data=t, reduce_op=nl.add, reduce_res=acc,\n"
        "                    reduce_cmd=nisa.reduce_cmd.reduce)\n"
        "    pt = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)\n"
        "    nisa.nc_transpose(dst=pt, data=y)\n"
        "    o = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.tensor_copy(dst=o, src=pt)\n"
        "    nisa.dma_copy(dst=out, src=o)\n"
        "    nisa.dma_copy(dst=s, src=acc)\n"
        "    return out, s\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 128, 64);
    kt_result r;

    fill(&in, 10);
    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 128; p++) {
        double s = 0;
        for (int f = 0; f < 64; f++) {
            s += f32(&in)[p * 64 + f];
            cr_assert_float_eq(f32(&r.out[0])[f * 128 + p], f32(&in)[p * 64 + f], 0);
        }
        cr_assert(fabs(f32(&r.out[1])[p] - 3 * s) < 1e-4, "partition %d: %g vs %g", p,
                  f32(&r.out[1])[p], 3 * s);
    }
    cr_assert_eq(count_op(&r.rec, SIM_OP_PE_TRANSPOSE), 1);
    cr_assert_eq(count_op(&r.rec, SIM_OP_ACTIVATION_REDUCE), 2);
    cr_assert_eq(first_op(&r.rec, SIM_OP_ACTIVATION_REDUCE)->engine, SIM_ENG_SCALAR);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, sbuf_tiles_release_capacity_when_they_die)
{
    /* 100 x 96 KiB per partition: only fits because each tile dies in turn */
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    for i in range(100):\n"
        "        t = nl.ndarray((128, 24576), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    return x\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 2, 2);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.rec.allocs[1].died, 0);   /* died before any instruction */
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, scan_select_transpose_and_view_methods)
{
    const char *src =
        "import numpy as np\n"
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    P, F = x.shape\n"
        "    out = nl.ndarray((P, 4 * F), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    xt = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    ones = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.memset(dst=ones, value=1.0)\n"
        "    r = nl.ndarray((P, 4 * F), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    # cumulative sum: r = (t * 1) + r_prev\n"
        "    nisa.tensor_tensor_scan(dst=r[:, 0:F], data0=ones, data1=t, initial=0.0,\n"
        "                            op0=np.multiply, op1=np.add)\n"
        "    # (t + 2) * t\n"
        "    nisa.scalar_tensor_tensor(dst=r[:, F:2 * F], data=t, op0=nl.add, operand0=2.0,\n"
        "                              op1=nl.multiply, operand1=t)\n"
        "    w = nl.where(t, ones, -1.0)\n"
        "    nisa.tensor_copy(dst=r[:, 2 * F:3 * F], src=w)\n"
        "    h = t.astype(nl.bfloat16)\n"
        "    assert h.dtype == nl.bfloat16\n"
        "    nisa.tensor_copy(dst=r[:, 3 * F:4 * F], src=h)\n"
        "    assert tuple(t.permute((0, 1)).shape) == (P, F)\n"
        "    assert tuple(t.select(1, 2).shape) == (P,)\n"
        "    assert tuple(t.slice(1, 0, F, 2).shape) == (P, (F + 1) // 2)\n"
        "    e = t[:, 0:1].expand_dim(2)\n"
        "    assert tuple(e.shape) == (P, 1, 1)\n"
        "    assert tuple(e.squeeze_dim(2).broadcast(1, 5).shape) == (P, 5)\n"
        "    assert t.view(nl.int32).dtype == nl.int32\n"
        "    nisa.dma_copy(dst=out, src=r)\n"
        "    nisa.dma_transpose(dst=xt, src=x)\n"
        "    return out, xt\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 16, 8);
    kt_result r;

    fill(&in, 11);
    ((float *)in.data)[3] = 0.0f;
    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 16; p++) {
        double cum = 0;
        for (int f = 0; f < 8; f++) {
            float x = f32(&in)[p * 8 + f];
            const float *o = f32(&r.out[0]) + (ptrdiff_t)p * 32;
            cum += x;
            cr_assert(fabs(o[f] - cum) < 1e-5, "scan p=%d f=%d", p, f);
            cr_assert_float_eq(o[8 + f], (x + 2.0f) * x, 1e-6);
            cr_assert_eq(o[16 + f], x != 0.0f ? 1.0f : -1.0f);
            cr_assert(fabsf(o[24 + f] - x) <= fabsf(x) * 0.004f);
            cr_assert_eq(f32(&r.out[1])[f * 16 + p], x);
        }
    }
    cr_assert_eq(count_op(&r.rec, SIM_OP_TENSOR_TENSOR_SCAN), 1);
    cr_assert_eq(count_op(&r.rec, SIM_OP_SCALAR_TENSOR_TENSOR), 1);
    cr_assert_eq(count_op(&r.rec, SIM_OP_DMA_TRANSPOSE), 1);
    cr_assert_eq(count_op(&r.rec, SIM_OP_SELECT), 1);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, psum_tiles_share_banks_but_never_straddle_one)
{
    /* 32 (128, 128) fp32 tiles of 512 B fill the 8 banks of 2 KiB; tiles of
     * 1.5 KiB do not share a bank, so only 8 of them fit. */
    const char *ok =
        "import nki\n"
        "import nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    live = [nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum) for i in range(32)]\n"
        "    return x\n";
    const char *over =
        "import nki\n"
        "import nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    live = [nl.ndarray((128, 384), dtype=nl.float32, buffer=nl.psum) for i in range(9)]\n"
        "    return x\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 2, 2);
    kt_result r;

    kt_run(&r, ok, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    kt_run_done(&r);
    kt_run(&r, over, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.rc, KF_INVALID);
    cr_assert_eq(r.serr.code, SIM_E_PSUM_CAPACITY, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "fragmentation: a tile of 1536 bytes") != NULL, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "13824 of 16384 bytes") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, launchers_decorators_and_constants)
{
    /* A jit kernel launched over a grid from Python (kernel[g0, g1]) runs
     * once per program with the program ids set; decorators are no-ops;
     * shared_identity_matrix and shared_constant make HBM constants. */
    const char *src =
        "import numpy as np\n"
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "from neuronxcc import nki as lnki\n"
        "@nki.jit(mode='trace', platform_target='trn2')\n"
        "def fill(out):\n"
        "    t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.memset(dst=t, value=float(nl.program_id(0) * 10 + nl.program_id(1)))\n"
        "    nisa.dma_copy(dst=out[nl.program_id(0), nl.ds(nl.program_id(1), 1)], src=t)\n"
        "@nki.compiler.skip_middle_end_transformations\n"
        "@lnki.baremetal(save_neff_name='x.neff')\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    out = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    fill[nl.spmd_dim(1, nl.nc(2)), 3](out)\n"
        "    assert nl.program_ndim() == 0\n"
        "    ident = nl.shared_identity_matrix(n=4, dtype=nl.float32)\n"
        "    c = nl.shared_constant(np.arange(6, dtype=np.int32).reshape(2, 3))\n"
        "    assert c.dtype == nl.int32 and tuple(ident.shape) == (4, 4)\n"
        "    return out, ident, c\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 2, 2);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    cr_assert_eq(r.n_out, 3);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            cr_assert_eq(f32(&r.out[0])[i * 3 + j], (float)(i * 10 + j));
            cr_assert_eq(((int32_t *)r.out[2].data)[i * 3 + j], i * 3 + j);
        }
    for (int i = 0; i < 16; i++)
        cr_assert_eq(f32(&r.out[1])[i], i % 5 == 0 ? 1.0f : 0.0f);
    cr_assert_eq(r.rec.insns[r.rec.n_insns - 1].spmd, 5);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, launch_grids_are_bounded)
{
    const char *src = "import nki\n@nki.jit\ndef k(x):\n    return x\n";
    const char *inner =
        "import nki\n"
        "@nki.jit\n"
        "def g(x):\n"
        "    return x\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    return g[1000, 1000](x)\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 2, 2);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 300, 300, false);
    cr_assert_eq(r.serr.code, SIM_E_LIMIT, "%s", r.err.msg);
    kt_run_done(&r);
    kt_run(&r, inner, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_LIMIT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 7);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, dtype_promotion_follows_the_documented_rules)
{
    const char *src =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    i = nl.zeros((4, 4), dtype=nl.int32)\n"
        "    i8 = nl.zeros((4, 4), dtype=nl.int8)\n"
        "    b = nl.zeros((4, 4), dtype=nl.bfloat16)\n"
        "    h = nl.zeros((4, 4), dtype=nl.float16)\n"
        "    assert (i + 2).dtype == nl.int32\n"
        "    assert (i * 0.5).dtype == nl.float32\n"
        "    assert (i8 + i).dtype == nl.int32\n"
        "    assert (b + b).dtype == nl.bfloat16\n"
        "    assert (b + h).dtype == nl.float32\n"
        "    assert (b + i).dtype == nl.bfloat16\n"
        "    assert nl.add(b, h, dtype=nl.bfloat16).dtype == nl.bfloat16\n"
        "    assert nl.exp(b).dtype == nl.bfloat16\n"
        "    assert nl.matmul(b, b, transpose_x=True).dtype == nl.float32\n"
        "    return x\n";
    run_k_ok(src, 2, 2);
}

Test(nki, iota_select_and_legacy_isa_forms)
{
    const char *src =
        "import numpy as np\n"
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "import neuronxcc.nki.isa as nisa\n"
        "import nki.isa as cisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    out = nl.ndarray((8, 24), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    ip, jf = nl.mgrid[0:8, 0:8]\n"
        "    io = nisa.iota(ip * 8 + jf, dtype=nl.float32)\n"
        "    ones = nisa.memset((8, 8), 1.0, nl.float32)\n"
        "    low = nisa.affine_select(ip >= jf, ones, -1.0)\n"
        "    ts = nisa.tensor_scalar(io, np.subtract, 1.0, reverse0=True, op1=np.multiply, operand1=2.0)\n"
        "    res = nl.ndarray((8, 24), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    res[:, 0:8] = io\n"
        "    res[:, 8:16] = low\n"
        "    cio = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    cisa.iota(dst=cio, pattern=[[1, 8]], offset=3, channel_multiplier=8)\n"
        "    sel = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    cisa.affine_select(dst=sel, pattern=[[-1, 8]], channel_multiplier=1, on_true_tile=ts,\n"
        "                       on_false_value=0.0, cmp_op=nl.greater_equal)\n"
        "    res[:, 16:24] = sel + cio * 0.0\n"
        "    nl.store(out, res)\n"
        "    return out\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 2, 2);
    kt_result r;

    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 8; p++)
        for (int f = 0; f < 8; f++) {
            const float *o = f32(&r.out[0]) + (ptrdiff_t)p * 24;
            float ts = (1.0f - (float)(p * 8 + f)) * 2.0f;
            cr_assert_eq(o[f], (float)(p * 8 + f));
            cr_assert_eq(o[8 + f], p >= f ? 1.0f : -1.0f);
            cr_assert_eq(o[16 + f], p - f >= 0 ? ts : 0.0f, "p=%d f=%d", p, f);
        }
    cr_assert_eq(count_op(&r.rec, SIM_OP_IOTA), 2);
    cr_assert_eq(count_op(&r.rec, SIM_OP_AFFINE_SELECT), 2);
    cr_assert_eq(first_op(&r.rec, SIM_OP_IOTA)->engine, SIM_ENG_GPSIMD);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, kernel_helper_modules_come_from_each_kernels_folder)
{
    const char *kernel =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "from helper import VAL\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.memset(dst=t, value=VAL)\n"
        "    nisa.dma_copy(dst=out, src=t)\n"
        "    return out\n";
    char tmpl[] = "/tmp/kforge-nki-XXXXXX", path[256];
    const char *base = mkdtemp(tmpl);
    sim_array in = mk("x", SIM_DT_FLOAT32, 1, 1);

    cr_assert_not_null(base);
    for (int i = 1; i <= 2; i++) {
        char helper[64];
        snprintf(path, sizeof(path), "%s/k%d", base, i);
        cr_assert_eq(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/k%d/helper.py", base, i);
        snprintf(helper, sizeof(helper), "VAL = %d.0\n", i);
        kf_test_write_file(path, helper);
        snprintf(path, sizeof(path), "%s/k%d/kernel.py", base, i);
        kf_test_write_file(path, kernel);
    }
    for (int i = 1; i <= 2; i++) {
        sim_run_opts o;
        sim_record rec;
        sim_error se;
        kf_err err = KF_ERR_INIT;
        sim_array *out = NULL;
        size_t n_out = 0;

        memset(&o, 0, sizeof(o));
        snprintf(path, sizeof(path), "%s/k%d/kernel.py", base, i);
        o.source_path = path;
        o.entry = "k";
        o.target = "trn2";
        o.numerics = true;
        sim_record_init(&rec, "trn2");
        cr_assert_eq(sim_run_kernel(&o, &in, 1, &out, &n_out, &rec, &se, &err), KF_OK, "%s", err.msg);
        cr_assert_eq(f32(&out[0])[0], (float)i, "run %d read the other kernel's helper", i);
        cr_assert_str_eq(rec.strs[rec.locs[rec.insns[0].loc].file], path);
        sim_array_release(&out[0]);
        free(out);
        sim_record_release(&rec);
    }
    for (int i = 1; i <= 2; i++) {
        snprintf(path, sizeof(path), "%s/k%d/helper.py", base, i);
        unlink(path);
        snprintf(path, sizeof(path), "%s/k%d/kernel.py", base, i);
        unlink(path);
        snprintf(path, sizeof(path), "%s/k%d", base, i);
        rmdir(path);
    }
    rmdir(base);
    sim_array_release(&in);
}

Test(nki, huge_index_grids_and_copies_are_limits_not_crashes)
{
    const char *grid =
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    i, j = nl.mgrid[0:100000, 0:100000]\n"
        "    m = i < j\n"
        "    return x\n";
    const char *copy =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(x):\n"
        "    a = nl.ndarray((4,), dtype=nl.int8, buffer=nl.shared_hbm)\n"
        "    big = a.ap(pattern=[[0, 1 << 15], [0, 1 << 14]], offset=0)\n"
        "    nisa.dma_copy(dst=big, src=big)\n"
        "    return x\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 2, 2);
    kt_result r;

    kt_run(&r, grid, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_LIMIT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 6);
    kt_run_done(&r);
    kt_run(&r, copy, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_LIMIT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 8);
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, predicated_copy_partition_reduce_and_nkiobject)
{
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "class Cfg(nl.NKIObject):\n"
        "    def __init__(self, s):\n"
        "        self.scale = s\n"
        "@nki.jit\n"
        "def k(x, cfg=None):\n"
        "    cfg = cfg or Cfg(2.0)\n"
        "    out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    s = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    r = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.memset(dst=r, value=-1.0)\n"
        "    nisa.tensor_copy_predicated(dst=r, src=t, predicate=t)\n"
        "    p = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.tensor_partition_reduce(dst=p, op=nl.add, data=t)\n"
        "    nisa.tensor_scalar(dst=p, data=p, op0=nl.multiply, operand0=cfg.scale)\n"
        "    nisa.dma_copy(dst=out, src=r)\n"
        "    nisa.dma_copy(dst=s, src=p)\n"
        "    return out, s\n";
    sim_array in = mk("x", SIM_DT_FLOAT32, 8, 8);
    kt_result r;

    fill(&in, 12);
    for (int i = 0; i < 64; i += 3)
        ((float *)in.data)[i] = 0.0f;
    kt_run(&r, src, "k", &in, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int f = 0; f < 8; f++) {
        double col = 0;
        for (int p = 0; p < 8; p++) {
            float x = f32(&in)[p * 8 + f];
            col += x;
            cr_assert_eq(f32(&r.out[0])[p * 8 + f], x != 0.0f ? x : -1.0f);
        }
        cr_assert(fabs(f32(&r.out[1])[f] - 2 * col) < 1e-5);
    }
    kt_run_done(&r);
    sim_array_release(&in);
}

Test(nki, placed_psum_spans_banks_but_each_matmul_stays_in_one)
{
    /* Manual allocation as in the attention tutorial v10: a PSUM tensor placed
     * with address= spans 4 banks, matmuls write one bank each, the
     * accumulate flag is explicit, no_reorder is a context manager. */
    const char *src =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "import nki.compiler as ncc\n"
        "class Mem(nl.NKIObject):\n"
        "    def psum(self, bank, size):\n"
        "        return nl.ndarray((128, size), dtype=nl.float32, buffer=nl.psum, address=(0, bank * 2048))\n"
        "@nki.jit\n"
        "def k(a, b):\n"
        "    out = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    sa = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))\n"
        "    sb = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=sa, src=a)\n"
        "    nisa.dma_copy(dst=sb, src=b)\n"
        "    ps = Mem().psum(0, 4 * 512)\n"
        "    with nl.no_reorder():\n"
        "        for j in range(4):\n"
        "            for rep in range(2):\n"
        "                nisa.nc_matmul(dst=ps[:, nl.ds(j * 512, 512)], stationary=sa,\n"
        "                               moving=sb[:, nl.ds(j * 512, 512)], accumulate=(rep != 0))\n"
        "    with ncc.no_reorder():\n"
        "        res = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)\n"
        "        nisa.tensor_copy(dst=res, src=ps)\n"
        "    nisa.dma_copy(dst=out, src=res)\n"
        "    return out\n";
    const char *straddle =
        "import nki\n"
        "import nki.language as nl\n"
        "import nki.isa as nisa\n"
        "@nki.jit\n"
        "def k(a, b):\n"
        "    sa = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    ps = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum, address=(0, 0))\n"
        "    nisa.nc_matmul(dst=ps[:, 256:768], stationary=sa, moving=sb)\n"
        "    return a\n";
    sim_array in[2] = { mk("a", SIM_DT_FLOAT32, 128, 128), mk("b", SIM_DT_FLOAT32, 128, 2048) };
    kt_result r;

    fill(&in[0], 13);
    fill(&in[1], 14);
    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int m = 0; m < 128; m += 17)
        for (int n = 0; n < 2048; n += 101) {
            double s = 0;
            for (int k = 0; k < 128; k++)
                s += (double)f32(&in[0])[k * 128 + m] * f32(&in[1])[k * 2048 + n];
            cr_assert(fabs(f32(&r.out[0])[m * 2048 + n] - 2 * s) < 1e-3, "m=%d n=%d", m, n);
        }
    cr_assert_eq(count_op(&r.rec, SIM_OP_MATMUL), 8);
    kt_run_done(&r);
    kt_run(&r, straddle, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.serr.code, SIM_E_PSUM_TILE, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 9);
    kt_run_done(&r);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* An input whose shape product overflows int64_t (8 dims of 2^31, issue
 * 22 bug 7) is refused before the simulator makes a store of it, and
 * kernel shapes past the simulator's limit are a LIMIT error, however
 * their dims multiply (no wrap to a small or empty tensor). */
Test(nki, shapes_whose_product_overflows_are_refused)
{
    const char *src = "import nki\n@nki.jit\ndef k(x):\n    return x\n";
    static const char *const shapes[] = { "(4, 2**62)", "(2**40, 2**40, 0)", "(128, 2**57, 2**7)",
                                          "(2**31,) * 8" };
    float one = 1.0f;
    sim_array in;
    kt_result r;

    memset(&in, 0, sizeof(in));
    snprintf(in.name, sizeof(in.name), "x");
    in.dtype = SIM_DT_FLOAT32;
    in.ndim = 8;
    for (int d = 0; d < 8; d++)
        in.shape[d] = (int64_t)1 << 31;
    in.data = &one;   /* what a wrapped product of 0 would have allocated: nothing the shape can use */
    kt_run(&r, src, "k", &in, 1, 0, 0, false);
    cr_assert_eq(r.rc, KF_TOO_LARGE, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "'x'") && strstr(r.err.msg, "bytes"), "%s", r.err.msg);
    cr_assert_null(r.out);
    kt_run_done(&r);

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        static const char *const buffers[] = { "nl.shared_hbm", "nl.sbuf" };
        for (int b = 0; b < 2; b++) {
            char *k = kf_asprintf("import nki\nimport nki.language as nl\n@nki.jit\ndef k(x):\n"
                                  "    t = nl.ndarray(%s, dtype=nl.float32, buffer=%s)\n    return x\n",
                                  shapes[i], buffers[b]);
            sim_array x = mk("x", SIM_DT_FLOAT32, 2, 2);
            kt_run(&r, k, "k", &x, 1, 0, 0, false);
            cr_assert_eq(r.serr.code, SIM_E_LIMIT, "%s in %s: %s", shapes[i], buffers[b], r.err.msg);
            cr_assert_eq(r.serr.line, 5);
            kt_run_done(&r);
            free(k);
            k = kf_asprintf("import nki\nimport nki.language as nl\n@nki.jit\ndef k(x):\n"
                            "    t = nl.ndarray((4, 0), dtype=nl.float32, buffer=nl.shared_hbm).reshape(%s)\n"
                            "    return x\n", shapes[i]);
            kt_run(&r, k, "k", &x, 1, 0, 0, false);
            cr_assert_eq(r.serr.code, SIM_E_LIMIT, "reshape to %s: %s", shapes[i], r.err.msg);
            kt_run_done(&r);
            free(k);
            sim_array_release(&x);
        }
    }
}

/* Index expressions cannot wrap either: an nl.arange whose length passes
 * int64_t, and a predicate over 2^90 index points (whose count used to wrap
 * to 0, leaving a mask with no data under its huge shape), are LIMIT
 * errors at their line. */
Test(nki, index_ranges_and_predicates_are_bounded)
{
    static const char *const lines[] = {
        "    i = nl.arange(-2**62, 2**62, 3)\n",
        "    i = nl.arange(2**40)\n",
        "    i = nl.arange(2**30)\n    m = (i[:, None, None] + i[None, :, None] + i[None, None, :]) < 5\n",
    };
    static const int at[] = { 5, 5, 6 };
    sim_array x = mk("x", SIM_DT_FLOAT32, 2, 2);
    kt_result r;

    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        char *k = kf_asprintf("import nki\nimport nki.language as nl\n@nki.jit\ndef k(x):\n%s    return x\n",
                              lines[i]);
        kt_run(&r, k, "k", &x, 1, 0, 0, false);
        cr_assert_eq(r.serr.code, SIM_E_LIMIT, "%s: %s", lines[i], r.err.msg);
        cr_assert_eq(r.serr.line, at[i], "%s: %s", lines[i], r.err.msg);
        kt_run_done(&r);
        free(k);
    }
    sim_array_release(&x);
}
