/* sim_core and sim_numerics without Python: element conversions (RNE on
 * bf16/fp16/fp8, saturating ints), the uninitialized fill, strided views
 * (gather/scatter, extents, record regions), the PSUM first-write rule,
 * the tile matmul, and checked shape products (sim_array_elems,
 * sim_array_check). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sim/sim_core.h"
#include "sim/sim_numerics.h"
#include "sim/sim_run.h"

static float roundtrip(sim_dtype dt, float x)
{
    uint8_t buf[4];
    simc_from_f32(dt, x, buf);
    return simc_to_f32(dt, buf);
}

Test(sim_core, bf16_rounds_to_nearest_even)
{
    cr_assert_eq(roundtrip(SIM_DT_BFLOAT16, 1.0f + 0x1p-8f), 1.0f);              /* tie -> even */
    cr_assert_eq(roundtrip(SIM_DT_BFLOAT16, 1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f); /* tie -> even */
    cr_assert_eq(roundtrip(SIM_DT_BFLOAT16, 1.0f + 0x1p-8f + 0x1p-16f), 1.0f + 0x1p-7f);
    cr_assert_eq(roundtrip(SIM_DT_BFLOAT16, -3.0f), -3.0f);
    cr_assert(isinf(roundtrip(SIM_DT_BFLOAT16, 3.4e38f)));    /* rounds past the largest bf16 */
    cr_assert(isnan(roundtrip(SIM_DT_BFLOAT16, NAN)));
}

Test(sim_core, fp16_and_fp8_round_to_nearest_even)
{
    cr_assert_eq(roundtrip(SIM_DT_FLOAT16, 1.0f + 0x1p-11f), 1.0f);              /* tie -> even */
    cr_assert_eq(roundtrip(SIM_DT_FLOAT16, 1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
    cr_assert_eq(roundtrip(SIM_DT_FLOAT16, 65504.0f), 65504.0f);
    cr_assert(isinf(roundtrip(SIM_DT_FLOAT16, 70000.0f)));
    cr_assert_eq(roundtrip(SIM_DT_FLOAT16, 0x1p-24f), 0x1p-24f);                 /* smallest subnormal */
    cr_assert_eq(roundtrip(SIM_DT_FLOAT8_E4M3, 1.0625f), 1.0f);                  /* 1 + 2^-4: tie -> even */
    cr_assert_eq(roundtrip(SIM_DT_FLOAT8_E4M3, 1.1875f), 1.25f);                 /* 1 + 3*2^-4: tie -> even */
    cr_assert_eq(roundtrip(SIM_DT_FLOAT8_E5M2, 1.125f), 1.0f);
    cr_assert_eq(roundtrip(SIM_DT_FLOAT8_E4M3FN, 448.0f), 448.0f);               /* fn: no inf, max 448 */
    cr_assert_eq(roundtrip(SIM_DT_FLOAT8_E5M2, -0.5f), -0.5f);
}

Test(sim_core, ints_saturate_and_round)
{
    cr_assert_eq(roundtrip(SIM_DT_INT8, 300.0f), 127.0f);
    cr_assert_eq(roundtrip(SIM_DT_INT8, -300.0f), -128.0f);
    cr_assert_eq(roundtrip(SIM_DT_UINT8, -5.0f), 0.0f);
    cr_assert_eq(roundtrip(SIM_DT_INT32, 2.5f), 2.0f);
    cr_assert_eq(roundtrip(SIM_DT_INT16, 3.5f), 4.0f);
    cr_assert_eq(roundtrip(SIM_DT_UINT16, NAN), 0.0f);
}

Test(sim_core, new_memory_is_nan_or_4)
{
    simc_store *f = simc_store_new(SIM_MEM_SBUF, SIM_DT_BFLOAT16, 4, 3, true);
    simc_store *i = simc_store_new(SIM_MEM_HBM, SIM_DT_INT32, 1, 5, true);
    /* the pattern is written when first needed: settling, as every
     * accessor does before it touches the data */
    cr_assert(f->unfilled && i->unfilled);
    simc_settle(f);
    simc_settle(i);
    cr_assert(!f->unfilled && !i->unfilled);
    for (int k = 0; k < 12; k++)
        cr_assert(isnan(simc_to_f32(SIM_DT_BFLOAT16, (uint16_t *)f->data + k)));
    for (int k = 0; k < 5; k++)
        cr_assert_eq(((int32_t *)i->data)[k], 4);
    cr_assert_null(f->open);
    simc_store_unref(f);
    simc_store_unref(i);
}

static simc_view view2(simc_store *s, int64_t off, int64_t r, int64_t c, int64_t sr, int64_t sc)
{
    simc_view v;
    memset(&v, 0, sizeof(v));
    v.st = s;
    v.dtype = s->dtype;
    v.ndim = 2;
    v.offset = off;
    v.shape[0] = r;
    v.shape[1] = c;
    v.strides[0] = sr;
    v.strides[1] = sc;
    return v;
}

/* A fresh store's data is filled with the pattern only when it is read or
 * partly written (recycled buffers hold old values: poisoned here); a
 * write of every element, by scatter or by a same-dtype copy, skips the
 * fill and reads back exactly what was written. */
Test(sim_core, fresh_stores_are_filled_only_when_partly_written)
{
    simc_store *s[4], *src = simc_store_new(SIM_MEM_HBM, SIM_DT_FLOAT32, 1, 12, true);
    simc_view whole_src = view2(src, 0, 4, 3, 3, 1), half_src = view2(src, 0, 2, 3, 3, 1);
    float in[12], out[12];

    for (int k = 0; k < 12; k++)
        in[k] = (float)k + 0.5f;
    simc_scatter(&whole_src, in, NULL);
    for (int j = 0; j < 4; j++) {
        s[j] = simc_store_new(SIM_MEM_SBUF, SIM_DT_FLOAT32, 4, 3, true);
        for (int k = 0; k < 12; k++)
            ((float *)s[j]->data)[k] = -7.0f;   /* what a recycled buffer held */
    }
    {
        simc_view w0 = view2(s[0], 0, 4, 3, 3, 1), h1 = view2(s[1], 0, 2, 3, 3, 1);
        simc_view w2 = view2(s[2], 0, 4, 3, 3, 1), h3 = view2(s[3], 3, 2, 3, 3, 1);
        simc_scatter(&w0, in, NULL);
        simc_scatter(&h1, in, NULL);
        cr_assert(simc_copy_raw(&w2, &whole_src));
        cr_assert(simc_copy_raw(&h3, &half_src));
    }
    for (int j = 0; j < 4; j++) {
        simc_view all = view2(s[j], 0, 4, 3, 3, 1);
        int lo = j == 3 ? 3 : 0, hi = j % 2 ? lo + 6 : 12;   /* the elements written */
        simc_gather(&all, out);
        for (int k = 0; k < 12; k++) {
            if (k >= lo && k < hi)
                cr_assert_eq(out[k], in[k - lo], "store %d [%d] = %g", j, k, (double)out[k]);
            else
                cr_assert(isnan(out[k]), "store %d [%d] = %g, want NaN", j, k, (double)out[k]);
        }
        simc_store_unref(s[j]);
    }
    simc_store_unref(src);
}

Test(sim_core, strided_views_gather_scatter_and_regions)
{
    /* an SBUF tile of 8 partitions x 16 fp32 */
    simc_store *s = simc_store_new(SIM_MEM_SBUF, SIM_DT_FLOAT32, 8, 16, true);
    simc_view all = view2(s, 0, 8, 16, 16, 1), sub = view2(s, 2 * 16 + 4, 3, 5, 16, 2);
    float in[128], out[15];
    sim_region r;

    for (int k = 0; k < 128; k++)
        in[k] = (float)k;
    simc_scatter(&all, in, NULL);
    simc_gather(&sub, out);
    for (int p = 0; p < 3; p++)
        for (int f = 0; f < 5; f++)
            cr_assert_eq(out[p * 5 + f], (float)((2 + p) * 16 + 4 + 2 * f));
    simc_view_region(&sub, &r);
    cr_assert_eq(r.mem, SIM_MEM_SBUF);
    cr_assert_eq(r.part_lo, 2);
    cr_assert_eq(r.part_count, 3);
    cr_assert_eq(r.byte_lo, 16);
    cr_assert_eq(r.byte_hi, 16 + 4 * 8 + 4);
    cr_assert_eq(r.elems_per_part, 5);
    cr_assert_eq(r.bytes, 60);
    cr_assert_eq(r.inner_stride, 8);
    cr_assert_eq(r.contig_bytes, 4);
    cr_assert_not(simc_view_contiguous(&sub));
    cr_assert(simc_view_contiguous(&all));
    simc_store_unref(s);
}

Test(sim_core, views_outside_storage_read_nan_and_skip_writes)
{
    simc_store *s = simc_store_new(SIM_MEM_HBM, SIM_DT_FLOAT32, 1, 10, true);
    simc_view v = view2(s, 6, 2, 3, 3, 1);   /* flat 6..8 and 9..11: 10, 11 are outside */
    float in[6] = { 1, 2, 3, 4, 5, 6 }, out[6];

    cr_assert_not(simc_view_in_store(&v));
    simc_scatter(&v, in, NULL);
    simc_gather(&v, out);
    cr_assert_eq(out[0], 1);
    cr_assert_eq(out[3], 4);
    cr_assert(isnan(out[4]) && isnan(out[5]));
    simc_store_unref(s);
}

Test(sim_core, psum_first_write_overwrites_then_accumulates_until_read)
{
    simc_store *p = simc_store_new(SIM_MEM_PSUM, SIM_DT_FLOAT32, 2, 2, true);
    simc_view v = view2(p, 0, 2, 2, 2, 1);
    float one[4] = { 1, 1, 1, 1 }, out[4];
    bool acc;

    simc_scatter_accum(&v, one, 0, NULL, &acc);     /* fresh: NaN is overwritten */
    cr_assert_not(acc);
    simc_scatter_accum(&v, one, 0, NULL, &acc);     /* open: accumulates */
    cr_assert(acc);
    simc_gather(&v, out);                     /* a read closes the group */
    cr_assert_eq(out[3], 2.0f);
    simc_scatter_accum(&v, one, 0, NULL, &acc);
    cr_assert_not(acc);
    simc_gather(&v, out);
    cr_assert_eq(out[0], 1.0f);
    simc_store_unref(p);
}

Test(sim_core, psum_masked_matmul_write_leaves_the_rest)
{
    simc_store *p = simc_store_new(SIM_MEM_PSUM, SIM_DT_FLOAT32, 2, 2, true);
    simc_view v = view2(p, 0, 2, 2, 2, 1);
    float one[4] = { 1, 1, 1, 1 }, out[4];
    uint8_t m[4] = { 1, 0, 0, 1 }, none[4] = { 0, 0, 0, 0 };
    bool acc;

    simc_scatter_accum(&v, one, 0, none, &acc);   /* writes nothing, opens nothing */
    cr_assert_not(acc);
    simc_scatter_accum(&v, one, 0, m, &acc);      /* [0] and [3] overwritten */
    cr_assert_not(acc);
    simc_scatter_accum(&v, one, 0, NULL, &acc);   /* [0], [3] add; [1], [2] take 1 */
    cr_assert(acc);
    simc_gather(&v, out);
    cr_assert_eq(out[0], 2.0f);
    cr_assert_eq(out[1], 1.0f);
    cr_assert_eq(out[2], 1.0f);
    cr_assert_eq(out[3], 2.0f);
    simc_store_unref(p);
}

Test(sim_numerics, matmul_alu_and_activations)
{
    /* A (K=2, M=2) stationary, B (K=2, N=3) moving: C = A^T B */
    float A[4] = { 1, 2, 3, 4 }, B[6] = { 1, 0, 2, 0, 1, 3 }, C[6];
    simn_init();
    simn_matmul(2, 3, 2, A, 2, 0, B, 3, C, 3, 0.0f);
    cr_assert_eq(C[0], 1);
    cr_assert_eq(C[1], 3);
    cr_assert_eq(C[2], 11);
    cr_assert_eq(C[3], 2);
    cr_assert_eq(C[5], 16);
    simn_matmul(2, 3, 2, A, 2, 0, B, 3, C, 3, 1.0f);
    cr_assert_eq(C[5], 32);
    cr_assert_eq(simn_alu(SIMN_OP_SUBTRACT, 5, 3), 2);
    cr_assert_eq(simn_alu(SIMN_OP_MAX, 5, 7), 7);       /* a reduction used as ALU: maximum */
    cr_assert(isnan(simn_alu(SIMN_OP_MAXIMUM, NAN, 1)));
    cr_assert_float_eq(simn_act(SIMN_OP_RSQRT, 4.0f), 0.5f, 1e-7);
    cr_assert_float_eq(simn_act(SIMN_OP_SIGMOID, 0.0f), 0.5f, 1e-7);
    cr_assert_eq(simn_op_identity(SIMN_OP_MAX), -INFINITY);
    cr_assert_eq(simn_op_binary(SIMN_OP_SUM), SIMN_OP_ADD);
    cr_assert_str_eq(simn_op_name(SIMN_OP_GELU_APPRX_TANH), "gelu_apprx_tanh");
}

/* Shapes of up to 8 dims of 2^31 multiply past int64_t; the product used to
 * wrap to 0, leaving an empty buffer under a huge tensor (issue 22, bug 7).
 * The checked product reports the overflow; sim_array_check refuses the
 * shape (and any shape past its byte limit) with a message. */
Test(sim_core, shape_products_are_checked)
{
    int64_t wide[8], n = -7;
    sim_array a;
    kf_err err = KF_ERR_INIT;

    for (int d = 0; d < 8; d++)
        wide[d] = (int64_t)1 << 31;
    cr_assert_not(simc_shape_elems(8, wide, INT64_MAX, &n));
    cr_assert_eq(n, -7, "untouched on failure");
    cr_assert(simc_shape_elems(2, wide, INT64_MAX, &n));
    cr_assert_eq(n, (int64_t)1 << 62);
    cr_assert_not(simc_shape_elems(2, wide, ((int64_t)1 << 62) - 1, &n), "past the limit");
    cr_assert(simc_shape_elems(0, wide, 1, &n) && n == 1, "a scalar has one element");
    {
        int64_t empty[3] = { 0, (int64_t)1 << 40, (int64_t)1 << 40 }, neg[2] = { 4, -1 };
        cr_assert_not(simc_shape_elems(3, empty, INT64_MAX, &n), "a zero dim does not hide an overflow");
        empty[1] = empty[2] = 1 << 20;
        cr_assert(simc_shape_elems(3, empty, INT64_MAX, &n) && n == 0);
        cr_assert_not(simc_shape_elems(2, neg, INT64_MAX, &n));
        cr_assert_not(simc_shape_elems(9, wide, INT64_MAX, &n), "at most 8 dims");
    }

    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "x");
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = 8;
    memcpy(a.shape, wide, sizeof(wide));
    cr_assert_eq(sim_array_elems(&a), -1, "no wrap to 0");
    cr_assert_eq(sim_array_check(&a, SIM_ARRAY_MAX_BYTES, &n, &err), KF_TOO_LARGE);
    cr_assert(strstr(err.msg, "'x'") && strstr(err.msg, "2147483648x2147483648") && strstr(err.msg, "bytes"),
              "%s", err.msg);

    a.ndim = 2;
    a.shape[0] = 1 << 20;
    a.shape[1] = 1 << 13;   /* 2^33 fp32 elements: 32 GiB, past the 16 GiB an array may hold */
    cr_assert_eq(sim_array_elems(&a), (int64_t)1 << 33);
    cr_assert_eq(sim_array_check(&a, SIM_ARRAY_MAX_BYTES, &n, &err), KF_TOO_LARGE);
    a.shape[1] = 512;
    cr_assert_eq(sim_array_check(&a, SIM_ARRAY_MAX_BYTES, &n, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(n, (int64_t)1 << 29);
    a.shape[1] = -3;
    cr_assert_eq(sim_array_elems(&a), -1);
    cr_assert_eq(sim_array_check(&a, SIM_ARRAY_MAX_BYTES, &n, &err), KF_INVALID);
    cr_assert(strstr(err.msg, ">= 0"), "%s", err.msg);
    a.shape[1] = 4;
    a.ndim = 9;
    cr_assert_eq(sim_array_elems(&a), -1);
    cr_assert_eq(sim_array_check(&a, SIM_ARRAY_MAX_BYTES, &n, &err), KF_INVALID);
}
