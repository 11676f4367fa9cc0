/* Unit tests for sim/sim_npy (.npy read/write, codecs) and sim/sim_input
 * (input specs, the documented PRNG).  Interoperability is checked against
 * the real NumPy (Debian's /usr/bin/python3). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "tests/lib/kf_test.h"
#include "sim/sim_input.h"
#include "sim/sim_npy.h"

#define MAXB (1ull << 30)

static void roundtrip(sim_dtype dt, unsigned flags, sim_dtype expect)
{
    uint64_t shape[3] = { 3, 1, 5 };
    unsigned char data[15 * 4];
    kf_buf b = KF_BUF_INIT;
    sim_npy_array a;
    kf_err e = KF_ERR_INIT;

    for (unsigned i = 0; i < 15; i++)
        sim_npy_store_elem(dt, data, i, dt == SIM_DT_BOOL ? (i & 1) : (double)i - 7.0);
    cr_assert_eq(sim_npy_encode(&b, dt, 3, shape, data, flags, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(b.len % 64, (size_t)15 * sim_dtype_size(expect) % 64, "header padded to 64");
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, MAXB, "mem", &a, &e), KF_OK, "%s: %s",
                 sim_dtype_name(dt), e.msg);
    cr_assert_eq(a.dtype, expect, "%s read back as %s", sim_dtype_name(dt), sim_dtype_name(a.dtype));
    cr_assert_eq(a.ndim, 3);
    cr_assert_eq(a.shape[0], 3);
    cr_assert_eq(a.shape[2], 5);
    cr_assert_eq(a.count, 15);
    for (unsigned i = 0; i < 15; i++)
        cr_assert_eq(sim_npy_load_elem(a.dtype, a.data, i), sim_npy_load_elem(dt, data, i),
                     "%s element %u", sim_dtype_name(dt), i);
    sim_npy_array_release(&a);
    kf_buf_release(&b);
}

Test(sim_npy, roundtrip_every_dtype)
{
    roundtrip(SIM_DT_FLOAT32, 0, SIM_DT_FLOAT32);
    roundtrip(SIM_DT_FLOAT16, 0, SIM_DT_FLOAT16);
    roundtrip(SIM_DT_BFLOAT16, 0, SIM_DT_FLOAT32);                  /* widened by default */
    roundtrip(SIM_DT_BFLOAT16, SIM_NPY_KEEP_DTYPE, SIM_DT_BFLOAT16);
    roundtrip(SIM_DT_FLOAT8_E5M2, 0, SIM_DT_FLOAT32);
    roundtrip(SIM_DT_INT8, 0, SIM_DT_INT8);
    roundtrip(SIM_DT_INT16, 0, SIM_DT_INT16);
    roundtrip(SIM_DT_INT32, 0, SIM_DT_INT32);
    roundtrip(SIM_DT_UINT8, 0, SIM_DT_UINT8);
    roundtrip(SIM_DT_UINT16, 0, SIM_DT_UINT16);
    roundtrip(SIM_DT_UINT32, 0, SIM_DT_UINT32);
    roundtrip(SIM_DT_BOOL, 0, SIM_DT_BOOL);
}

Test(sim_npy, scalar_and_one_dim)
{
    uint64_t shape[1] = { 4 };
    float v[4] = { 1, 2, 3, 4 };
    kf_buf b = KF_BUF_INIT;
    sim_npy_array a;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(sim_npy_encode(&b, SIM_DT_FLOAT32, 1, shape, v, 0, &e), KF_OK);
    cr_assert(strstr(b.data + 10, "'shape': (4,)") != NULL, "%s", b.data + 10);
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, MAXB, "mem", &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.ndim, 1);
    sim_npy_array_release(&a);
    kf_buf_reset(&b);
    cr_assert_eq(sim_npy_encode(&b, SIM_DT_FLOAT32, 0, shape, v, 0, &e), KF_OK);
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, MAXB, "mem", &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.ndim, 0);
    cr_assert_eq(a.count, 1);
    cr_assert_eq(((float *)a.data)[0], 1.0f);
    sim_npy_array_release(&a);
    kf_buf_release(&b);
}

/* Build a .npy image from a raw header text and a payload size. */
static kf_buf image(int major, const char *hdr, size_t payload)
{
    kf_buf b = KF_BUF_INIT;
    size_t hl = strlen(hdr);
    unsigned char pre[12] = { 0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0,
                              (unsigned char)hl, (unsigned char)(hl >> 8), 0, 0 };
    kf_buf_add(&b, pre, major == 1 ? 10 : 12);
    kf_buf_adds(&b, hdr);
    for (size_t i = 0; i < payload; i++)
        kf_buf_addc(&b, 0);
    return b;
}

static void expect_bad(int major, const char *hdr, size_t payload, int want, const char *needle)
{
    kf_buf b = image(major, hdr, payload);
    sim_npy_array a;
    kf_err e = KF_ERR_INIT;
    kf_code rc = sim_npy_parse(b.data, b.len, want, MAXB, "bad.npy", &a, &e);
    cr_assert_neq(rc, KF_OK, "header %s was accepted", hdr);
    cr_assert_null(a.data);
    cr_assert(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
    kf_buf_release(&b);
}

Test(sim_npy, rejects_malformed_headers)
{
    expect_bad(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", 8, -1, "'>f4'");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n", 8, -1, "Fortran");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 7, -1, "payload");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 9, -1, "payload");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }\n", 8, -1, "(N,)");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n", 8, -1, "integer");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627775, 1099511627775), }\n",
               0, -1, "bytes allowed");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999,), }\n", 0, -1,
               "2^40");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }\n", 4, -1,
               "8 dimensions");
    expect_bad(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n", 4, -1,
               "structured");
    expect_bad(1, "{'descr': '<f4', 'descr': '<f4', 'shape': (1,), }\n", 4, -1, "repeated");
    expect_bad(1, "{'descr': '<f4', 'shape': (1,), }\n", 4, -1, "lacks");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } junk\n", 4, -1, "after");
    expect_bad(1, "['descr']\n", 4, -1, "dict");
    expect_bad(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n", 8, -1, "'<c8'");
    expect_bad(1, "{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }\n", 4, -1, "'|f4'");
    expect_bad(1, "{'descr': '|V1', 'fortran_order': False, 'shape': (1,), }\n", 1, -1, "fp8");
    expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", 4, SIM_DT_INT32,
               "floating-point");
}

Test(sim_npy, rejects_bad_preamble_and_values)
{
    sim_npy_array a;
    kf_err e = KF_ERR_INIT;
    kf_buf b = image(4, "{}", 0);
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, MAXB, "v4", &a, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "version 4.0") != NULL, "%s", e.msg);
    kf_buf_release(&b);

    cr_assert_eq(sim_npy_parse("\x93NUMPZ\x01\x00\x10\x00", 10, -1, MAXB, "m", &a, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "magic") != NULL, "%s", e.msg);
    cr_assert_eq(sim_npy_parse("\x93NUMPY\x01\x00\xff\x00{", 11, -1, MAXB, "t", &a, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "truncated") != NULL, "%s", e.msg);
    cr_assert_eq(sim_npy_parse("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12, -1, MAXB, "h", &a, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "header length") != NULL, "%s", e.msg);
    cr_assert_eq(sim_npy_parse("\x93NU", 3, -1, MAXB, "short", &a, &e), KF_INVALID);

    /* bool must be 0/1; int64 must fit int32 */
    b = image(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }\n", 0);
    kf_buf_add(&b, "\x01\x02", 2);
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, MAXB, "b", &a, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "not 0 or 1") != NULL, "%s", e.msg);
    kf_buf_release(&b);
    b = image(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }\n", 0);
    int64_t big = 1ll << 40;
    kf_buf_add(&b, &big, 8);
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, MAXB, "i8", &a, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "does not fit in int32") != NULL, "%s", e.msg);
    kf_buf_release(&b);

    /* the size bound is applied before allocating */
    b = image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1024,), }\n", 4096);
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, 4095, "cap", &a, &e), KF_TOO_LARGE);
    kf_buf_release(&b);
}

Test(sim_npy, converts_f8_and_hints)
{
    sim_npy_array a;
    kf_err e = KF_ERR_INIT;
    double v[3] = { 1.0, 1.0 + 1.0 / 256, -3.5 };
    kf_buf b = image(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }\n", 0);
    kf_buf_add(&b, v, sizeof(v));
    cr_assert_eq(sim_npy_parse(b.data, b.len, -1, MAXB, "f8", &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.dtype, SIM_DT_FLOAT32);
    cr_assert_eq(((float *)a.data)[1], (float)(1.0 + 1.0 / 256));
    sim_npy_array_release(&a);
    cr_assert_eq(sim_npy_parse(b.data, b.len, SIM_DT_BFLOAT16, MAXB, "f8", &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.dtype, SIM_DT_BFLOAT16);
    /* 1 + 2^-8 is a tie between bf16 1.0 and 1.0078125: even mantissa wins */
    cr_assert_eq(((uint16_t *)a.data)[1], 0x3f80);
    cr_assert_eq(((uint16_t *)a.data)[2], 0xc060);
    sim_npy_array_release(&a);
    kf_buf_release(&b);
}

Test(sim_npy, codecs_round_to_nearest_even)
{
    cr_assert_eq(sim_npy_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(sim_npy_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);        /* 1.5 ulp -> up to even */
    cr_assert_eq(sim_npy_f32_to_bf16(INFINITY), 0x7f80);
    cr_assert(isnan(sim_npy_bf16_to_f32(sim_npy_f32_to_bf16(NAN))));
    cr_assert_eq(sim_npy_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(sim_npy_f32_to_f16(65520.0f), 0x7c00);                  /* tie at max -> inf */
    cr_assert_eq(sim_npy_f32_to_f16(65519.0f), 0x7bff);
    cr_assert_eq(sim_npy_f32_to_f16(ldexpf(1, -24)), 0x0001);            /* smallest subnormal */
    cr_assert_eq(sim_npy_f32_to_f16(ldexpf(1, -25)), 0x0000);            /* tie -> even (0) */
    cr_assert_eq(sim_npy_f32_to_f16(ldexpf(3, -25)), 0x0002);            /* tie -> even (2) */
    cr_assert_eq(sim_npy_f32_to_f16(-2.0f), 0xc000);
    cr_assert_eq(sim_npy_f32_to_f16(ldexpf(1, -14)), 0x0400);            /* smallest normal */
    cr_assert_eq(sim_npy_f16_to_f32(0x3555), 0.333251953125f);
    cr_assert(isnan(sim_npy_f16_to_f32(sim_npy_f32_to_f16(NAN))));
    unsigned char p;
    sim_npy_store_elem(SIM_DT_FLOAT8_E4M3, &p, 0, 240.0);
    cr_assert_eq(p, 0x77);
    sim_npy_store_elem(SIM_DT_FLOAT8_E4M3, &p, 0, 1000.0);
    cr_assert_eq(p, 0x78);                                                /* inf */
    sim_npy_store_elem(SIM_DT_FLOAT8_E4M3FN, &p, 0, 448.0);
    cr_assert_eq(p, 0x7e);
    sim_npy_store_elem(SIM_DT_FLOAT8_E4M3FN, &p, 0, 300.0);
    cr_assert_eq(sim_npy_load_elem(SIM_DT_FLOAT8_E4M3FN, &p, 0), 288.0);
    sim_npy_store_elem(SIM_DT_FLOAT8_E4M3FN, &p, 0, 1000.0);
    cr_assert(isnan(sim_npy_load_elem(SIM_DT_FLOAT8_E4M3FN, &p, 0)));
    sim_npy_store_elem(SIM_DT_FLOAT8_E5M2, &p, 0, -1.5);
    cr_assert_eq(sim_npy_load_elem(SIM_DT_FLOAT8_E5M2, &p, 0), -1.5);
    int8_t s8;
    sim_npy_store_elem(SIM_DT_INT8, &s8, 0, 300.0);
    cr_assert_eq(s8, 127);
}

static int py(const char *code)
{
    char *cmd = kf_asprintf("/usr/bin/python3 -c \"%s\"", code);
    int rc = system(cmd);
    free(cmd);
    return rc;
}

Test(sim_npy, interoperates_with_numpy)
{
    char *dir = kf_test_tmpdir("npy");
    char *code, *p1, *p2, *p3;
    sim_npy_array a;
    kf_err e = KF_ERR_INIT;

    /* NumPy writes versions 1.0, 2.0 and 3.0; kforge reads them all */
    code = kf_asprintf("import numpy as np; from numpy.lib import format as f; "
                       "a = (np.arange(24, dtype=np.float32) - 5).reshape(2, 3, 4); "
                       "[f.write_array(open('%s/v%%d.npy' %% v, 'wb'), a, version=(v, 0)) for v in (1, 2, 3)]; "
                       "np.save('%s/i16.npy', np.arange(-3, 3, dtype=np.int16)); "
                       "np.save('%s/f16.npy', np.array([0.1, 65504, -1e-6], dtype=np.float16)); "
                       "np.save('%s/b.npy', np.array([[True, False]]))",
                       dir, dir, dir, dir);
    cr_assert_eq(py(code), 0);
    free(code);
    for (int v = 1; v <= 3; v++) {
        char *p = kf_asprintf("%s/v%d.npy", dir, v);
        cr_assert_eq(sim_npy_read(p, -1, MAXB, &a, &e), KF_OK, "v%d: %s", v, e.msg);
        cr_assert_eq(a.ndim, 3);
        cr_assert_eq(a.shape[1], 3);
        cr_assert_eq(((float *)a.data)[23], 18.0f);
        sim_npy_array_release(&a);
        free(p);
    }
    p1 = kf_asprintf("%s/f16.npy", dir);
    cr_assert_eq(sim_npy_read(p1, -1, MAXB, &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.dtype, SIM_DT_FLOAT16);
    cr_assert_eq(sim_npy_load_elem(a.dtype, a.data, 1), 65504.0);
    cr_assert_eq(((uint16_t *)a.data)[0], sim_npy_f32_to_f16(0.1f), "NumPy and kforge round 0.1 alike");
    cr_assert_eq(((uint16_t *)a.data)[2], sim_npy_f32_to_f16(-1e-6f));
    sim_npy_array_release(&a);
    free(p1);
    p1 = kf_asprintf("%s/b.npy", dir);
    cr_assert_eq(sim_npy_read(p1, -1, MAXB, &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.dtype, SIM_DT_BOOL);
    cr_assert_eq(((unsigned char *)a.data)[0], 1);
    sim_npy_array_release(&a);
    free(p1);

    /* kforge writes, NumPy reads and checks */
    uint64_t shape[2] = { 2, 3 };
    uint16_t bf[6];
    int32_t iv[6];
    for (int i = 0; i < 6; i++) {
        bf[i] = sim_npy_f32_to_bf16((float)i * 0.3f);
        iv[i] = -i * 1000;
    }
    p1 = kf_asprintf("%s/bf.npy", dir);
    p2 = kf_asprintf("%s/bfk.npy", dir);
    p3 = kf_asprintf("%s/iv.npy", dir);
    cr_assert_eq(sim_npy_write(p1, SIM_DT_BFLOAT16, 2, shape, bf, 0, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_npy_write(p2, SIM_DT_BFLOAT16, 2, shape, bf, SIM_NPY_KEEP_DTYPE, &e), KF_OK);
    cr_assert_eq(sim_npy_write(p3, SIM_DT_INT32, 2, shape, iv, 0, &e), KF_OK);
    code = kf_asprintf("import numpy as np; a = np.load('%s'); k = np.load('%s'); i = np.load('%s'); "
                       "assert a.dtype == np.float32 and a.shape == (2, 3), a; "
                       "w = (k.view(np.uint16).astype(np.uint32) << 16).view(np.float32); "
                       "assert (w == a).all() and k.dtype.kind == 'V' and k.dtype.itemsize == 2, k.dtype; "
                       "assert a[1, 2] == np.float32(1.5); "
                       "assert i.dtype == np.int32 and i[1, 2] == -5000",
                       p1, p2, p3);
    cr_assert_eq(py(code), 0, "NumPy rejected kforge's files");
    free(code);
    /* and the bf16 file reads back as bf16 */
    cr_assert_eq(sim_npy_read(p2, -1, MAXB, &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.dtype, SIM_DT_BFLOAT16);
    cr_assert_eq(memcmp(a.data, bf, sizeof(bf)), 0);
    sim_npy_array_release(&a);
    cr_assert_eq(sim_npy_read("/nonexistent/x.npy", -1, MAXB, &a, &e), KF_IO);
    free(p1);
    free(p2);
    free(p3);
    free(dir);
}

Test(sim_input, prng_matches_the_documented_generator)
{
    /* xoshiro256** seeded by splitmix64(1), computed independently */
    sim_rng g;
    sim_rng_seed(&g, 1);
    cr_assert_eq(sim_rng_next(&g), 0xb3f2af6d0fc710c5ull);
    cr_assert_eq(sim_rng_next(&g), 0x853b559647364ceaull);
    cr_assert_eq(sim_rng_next(&g), 0x92f89756082a4514ull);
}

Test(sim_input, random_specs_are_deterministic_and_distributed)
{
    sim_npy_array a, b, c;
    char *n1, *n2, *n3;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(sim_input_parse("w=shape:200x500:float32:seed=7", 0, MAXB, &n1, &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_input_parse("w=shape:200x500:fp32:seed=7", 0, MAXB, &n2, &b, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_input_parse("w=shape:200x500:fp32:seed=6", 1, MAXB, &n3, &c, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(n1, "w");
    cr_assert_eq(memcmp(a.data, b.data, sizeof(float) * 100000), 0, "same seed, same data");
    cr_assert_eq(memcmp(a.data, c.data, sizeof(float) * 100000), 0, "seed offset adds to the seed");
    double s = 0, s2 = 0;
    for (int i = 0; i < 100000; i++) {
        double v = ((float *)a.data)[i];
        s += v;
        s2 += v * v;
    }
    cr_assert(fabs(s / 1e5) < 0.02, "mean %g", s / 1e5);
    cr_assert(fabs(sqrt(s2 / 1e5) - 1) < 0.02, "std %g", sqrt(s2 / 1e5));
    sim_npy_array_release(&a);
    sim_npy_array_release(&b);
    sim_npy_array_release(&c);
    free(n1); free(n2); free(n3);

    cr_assert_eq(sim_input_parse("u=shape:1000:bf16:seed=3:dist=uniform:lo=2:hi=3", 0, MAXB, &n1, &a, &e),
                 KF_OK, "%s", e.msg);
    cr_assert_eq(a.dtype, SIM_DT_BFLOAT16);
    for (int i = 0; i < 1000; i++) {
        double v = sim_npy_load_elem(a.dtype, a.data, (uint64_t)i);
        cr_assert(v >= 2 && v <= 3, "%g", v);
    }
    sim_npy_array_release(&a);
    free(n1);

    cr_assert_eq(sim_input_parse("k=shape:4x4x4:int8:lo=-2:hi=2", 0, MAXB, &n1, &a, &e), KF_OK, "%s", e.msg);
    int seen[5] = { 0 };
    for (int i = 0; i < 64; i++) {
        int v = (int)sim_npy_load_elem(SIM_DT_INT8, a.data, (uint64_t)i);
        cr_assert(v >= -2 && v <= 2, "%d", v);
        seen[v + 2] = 1;
    }
    cr_assert(seen[0] && seen[4], "both ends of the inclusive range occur");
    sim_npy_array_release(&a);
    free(n1);
}

Test(sim_input, reads_files_with_a_dtype_suffix)
{
    char *dir = kf_test_tmpdir("inp");
    char *spec, *name;
    uint64_t shape[1] = { 3 };
    float v[3] = { 1.0f, 1.00390625f, 2.0f };
    sim_npy_array a;
    kf_err e = KF_ERR_INIT;
    char *p = kf_asprintf("%s/x.npy", dir);

    cr_assert_eq(sim_npy_write(p, SIM_DT_FLOAT32, 1, shape, v, 0, &e), KF_OK);
    spec = kf_asprintf("x=%s:bf16", p);
    cr_assert_eq(sim_input_parse(spec, 0, MAXB, &name, &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(a.dtype, SIM_DT_BFLOAT16);
    cr_assert_eq(((uint16_t *)a.data)[1], 0x3f80);
    sim_npy_array_release(&a);
    free(name);
    free(spec);
    free(p);
    free(dir);
}

Test(sim_input, rejects_bad_specs_with_guidance)
{
    static const char *bad[][2] = {
        { "noequals", "NAME=" },
        { "1x=shape:4:bf16", "NAME=" },
        { "x=shape:4x0:bf16", "positive integer" },
        { "x=shape:4xa:bf16", "positive integer" },
        { "x=shape:4", "give a dtype" },
        { "x=shape:4:complex", "unknown dtype" },
        { "x=shape:4:bf16:seed=-1", "bad option" },
        { "x=shape:4:bf16:dist=cauchy", "bad option" },
        { "x=shape:4:bf16:lo=2:hi=1", "empty" },
        { "x=shape:4:bf16:frob=1", "bad option" },
        { "x=shape:1x1x1x1x1x1x1x1x1:bf16", "at most 8" },
        { "x=shape:1099511627775x1099511627775:fp32", "bytes allowed" },
        { "x=/no/such/file.npy", "cannot open" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sim_npy_array a;
        char *name = NULL;
        kf_err e = KF_ERR_INIT;
        cr_assert_neq(sim_input_parse(bad[i][0], 0, MAXB, &name, &a, &e), KF_OK, "%s accepted", bad[i][0]);
        cr_assert_null(name);
        cr_assert(strstr(e.msg, bad[i][1]) != NULL, "'%s': message '%s' lacks '%s'", bad[i][0], e.msg,
                  bad[i][1]);
    }
}

/* The bulk codecs give the per-element codecs' values, bit for bit, on
 * every float dtype (bf16: ties, NaN payloads, infinities, denormals). */
Test(sim_npy, bulk_float_codecs_match_the_element_codecs)
{
    static const sim_dtype dts[] = { SIM_DT_FLOAT32, SIM_DT_BFLOAT16, SIM_DT_FLOAT16, SIM_DT_FLOAT8_E4M3 };
    enum { N = 5000 };
    static float in[N];
    static uint32_t back1[N], back2[N];   /* float bits */
    static unsigned char a[N * 4], b[N * 4];
    uint32_t x = 12345;

    for (int i = 0; i < N; i++) {
        uint32_t u;
        x = x * 1664525u + 1013904223u;
        u = x;
        if (i % 7 == 0)
            u = (u & 0xffff0000u) | 0x8000u;   /* a tie for bf16 */
        if ((u & 0x7fffffffu) > 0x7f800000u)
            u |= 0x00400000u;   /* quiet NaNs (the element codecs pass through double, which quiets them) */
        memcpy(&in[i], &u, 4);
    }
    in[0] = NAN;
    in[1] = -INFINITY;
    in[2] = 1e-40f;
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        memset(a, 0, sizeof(a));
        memset(b, 0, sizeof(b));
        for (int i = 0; i < N; i++)
            sim_npy_store_elem(dts[d], a, (uint64_t)i, in[i]);
        sim_npy_store_f32(dts[d], b, 0, in, N);
        cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "store %s", sim_dtype_name(dts[d]));
        for (int i = 0; i < N; i++) {
            float f = (float)sim_npy_load_elem(dts[d], a, (uint64_t)i);
            memcpy(&back1[i], &f, 4);
        }
        sim_npy_load_f32(dts[d], a, 0, (float *)(void *)back2, N);
        cr_assert_eq(memcmp(back1, back2, sizeof(back1)), 0, "load %s", sim_dtype_name(dts[d]));
    }
}
