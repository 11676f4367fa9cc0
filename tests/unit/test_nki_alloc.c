/* On-chip allocation as the compiler does it (sim_live.h): capacity decided
 * by liveness over the recorded program, placement that does not fragment,
 * PSUM blocks packed into banks, allocation hints honoured, and capacity
 * errors that name the live tiles.  Each valid kernel here was refused by
 * the Python-lifetime first-fit allocator before. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_nki.h"

static sim_array mk(const char *name, int64_t r, int64_t c, unsigned seed)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "%s", name);
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = 2;
    a.shape[0] = r;
    a.shape[1] = c;
    a.data = kf_calloc((size_t)(r * c), 4);
    srand(seed);
    for (int64_t i = 0; i < r * c; i++)
        ((float *)a.data)[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    return a;
}

static const float *f32(const sim_array *a)
{
    return (const float *)a->data;
}

#define HDR "import nki\nimport nki.language as nl\nimport nki.isa as nisa\nimport nki.compiler as ncc\n@nki.jit\n"

Test(nki_alloc, a_tile_rebound_in_a_loop_dies_at_its_last_use)
{
    /* 120 KiB per iteration on trn2 (224 KiB): the next t is created while
     * Python still holds the previous one, which the compiler has freed */
    const char *src = HDR
        "def k(x):\n"
        "    out = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    for i in range(4):\n"
        "        t = nl.ndarray((128, 30720), dtype=nl.float32, buffer=nl.sbuf)\n"
        "        nisa.dma_copy(dst=t[:, 0:512], src=x)\n"
        "        nisa.tensor_scalar(dst=t[:, 512:1024], data=t[:, 0:512], op0=nl.multiply,\n"
        "                           operand0=float(i + 1))\n"
        "        nisa.dma_copy(dst=out[:, i * 512:(i + 1) * 512], src=t[:, 512:1024])\n"
        "    return out\n";
    sim_array x = mk("x", 128, 512, 1);
    kt_result r;
    size_t tiles = 0;

    kt_run(&r, src, "k", &x, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int p = 0; p < 128; p++)
        for (int i = 0; i < 4; i++)
            for (int f = 0; f < 512; f++)
                cr_assert_eq(f32(&r.out[0])[p * 2048 + i * 512 + f], f32(&x)[p * 512 + f] * (float)(i + 1));
    for (size_t a = 0; a < r.rec.n_allocs; a++) {
        const sim_alloc *al = &r.rec.allocs[a];
        if (al->mem != SIM_MEM_SBUF)
            continue;
        /* the liveness the record exposes: three instructions per tile, one place */
        cr_assert(al->live_used);
        cr_assert_eq(al->live_last - al->live_first, 2);
        cr_assert_eq(al->live_offset, 0);
        cr_assert_eq(al->reserve, 122880);
        tiles++;
    }
    cr_assert_eq(tiles, 4);
    kt_run_done(&r);
    sim_array_release(&x);
}

Test(nki_alloc, placement_by_liveness_does_not_fragment)
{
    /* a (96 KiB), b (32 KiB), c (96 KiB) fill trn2's 224 KiB; a and c die,
     * then d (192 KiB) must sit beside b: first fit by creation order left
     * b in the middle (two 96 KiB holes) */
    const char *src = HDR
        "def k(x):\n"
        "    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    a = nl.ndarray((128, 24576), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    b = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    c = nl.ndarray((128, 24576), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=a[:, 0:512], src=x)\n"
        "    nisa.tensor_scalar(dst=b[:, 0:512], data=a[:, 0:512], op0=nl.multiply, operand0=2.0)\n"
        "    nisa.tensor_scalar(dst=c[:, 0:512], data=b[:, 0:512], op0=nl.add, operand0=1.0)\n"
        "    nisa.tensor_tensor(dst=b[:, 512:1024], data1=c[:, 0:512], data2=a[:, 0:512], op=nl.add)\n"
        "    del a, c\n"
        "    d = nl.ndarray((128, 49152), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.tensor_scalar(dst=d[:, 0:512], data=b[:, 512:1024], op0=nl.multiply, operand0=2.0)\n"
        "    nisa.tensor_tensor(dst=b[:, 0:512], data1=d[:, 0:512], data2=b[:, 512:1024], op=nl.add)\n"
        "    nisa.dma_copy(dst=out, src=b[:, 0:512])\n"
        "    return out\n";
    sim_array x = mk("x", 128, 512, 2);
    kt_result r;

    kt_run(&r, src, "k", &x, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int i = 0; i < 128 * 512; i++) {
        float v = f32(&x)[i], b1 = (v * 2.0f + 1.0f) + v;
        cr_assert_eq(f32(&r.out[0])[i], b1 * 2.0f + b1, "element %d", i);
    }
    kt_run_done(&r);
    sim_array_release(&x);
}

Test(nki_alloc, psum_blocks_pack_into_banks)
{
    /* two (8, 128, 128) fp32 PSUM tensors: 4 blocks of 512 B per bank, 4
     * banks in all (a bank per block took 16); blocks of 1.5 KiB take a
     * bank each and a matmul into block 1 stays inside its bank */
    const char *src = HDR
        "def k(a, b):\n"
        "    out = nl.ndarray((128, 2432), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    sa = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    sb = nl.ndarray((128, 384), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=sa, src=a)\n"
        "    nisa.dma_copy(dst=sb, src=b)\n"
        "    p = nl.ndarray((8, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)\n"
        "    q = nl.ndarray((8, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)\n"
        "    w = nl.ndarray((3, nl.par_dim(128), 384), dtype=nl.float32, buffer=nl.psum)\n"
        "    res = nl.ndarray((128, 2432), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    for i in range(8):\n"
        "        nisa.nc_matmul(dst=p[i], stationary=sa, moving=sb[:, 0:128])\n"
        "        nisa.nc_matmul(dst=q[i], stationary=sb[:, 0:128], moving=sa)\n"
        "    nisa.nc_matmul(dst=w[1], stationary=sa, moving=sb)\n"
        "    for i in range(8):\n"
        "        nisa.tensor_scalar(dst=res[:, i * 128:(i + 1) * 128], data=p[i], op0=nl.multiply,\n"
        "                           operand0=float(i + 1))\n"
        "        nisa.tensor_copy(dst=res[:, 1024 + i * 128:1024 + (i + 1) * 128], src=q[i])\n"
        "    nisa.tensor_copy(dst=res[:, 2048:2432], src=w[1])\n"
        "    nisa.dma_copy(dst=out, src=res)\n"
        "    return out\n";
    sim_array in[2] = { mk("a", 128, 128, 3), mk("b", 128, 384, 4) };
    kt_result r;
    double *ab = kf_calloc((size_t)128 * 384, sizeof(double)), *ba = kf_calloc((size_t)128 * 128, sizeof(double));

    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int m = 0; m < 128; m++)
        for (int n = 0; n < 384; n++)
            for (int k = 0; k < 128; k++) {
                ab[m * 384 + n] += (double)f32(&in[0])[k * 128 + m] * f32(&in[1])[k * 384 + n];
                if (n < 128)
                    ba[m * 128 + n] += (double)f32(&in[1])[k * 384 + m] * f32(&in[0])[k * 128 + n];
            }
    for (int m = 0; m < 128; m++) {
        const float *o = f32(&r.out[0]) + (ptrdiff_t)m * 2432;
        for (int i = 0; i < 8; i++)
            for (int n = 0; n < 128; n++) {
                cr_assert(fabs(o[i * 128 + n] - (i + 1) * ab[m * 384 + n]) < 1e-3 * (i + 1));
                cr_assert(fabs(o[1024 + i * 128 + n] - ba[m * 128 + n]) < 1e-3);
            }
        for (int n = 0; n < 384; n++)
            cr_assert(fabs(o[2048 + n] - ab[m * 384 + n]) < 1e-3);
    }
    for (size_t a = 0; a < r.rec.n_allocs; a++) {
        const sim_alloc *al = &r.rec.allocs[a];
        if (al->mem != SIM_MEM_PSUM)
            continue;
        if (al->bytes_per_part == (uint64_t)8 * 512) {
            cr_assert_eq(al->reserve, (uint64_t)4096);  /* 8 blocks in 2 banks */
            cr_assert_eq(al->place, SIM_PLACE_BANKS);
        } else {
            cr_assert_eq(al->reserve, (uint64_t)3 * 2048); /* a bank per 1.5 KiB block */
        }
        cr_assert_eq(al->live_offset % 2048, 0);
    }
    kt_run_done(&r);
    free(ab);
    free(ba);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

/* six PSUM banks live throughout and an 8-block tensor whose hint rotates it
 * over two banks: 8 banks (the hint ignored: 14) */
static const char *HINTED = HDR
    "def k(a, b):\n"
    "    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    "    sa = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=sa, src=a)\n"
    "    nisa.dma_copy(dst=sb, src=b)\n"
    "    nisa.memset(dst=res, value=0.0)\n"
    "    six = nl.ndarray((6, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)\n"
    "    acc = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32,\n"
    "                     buffer=ncc.psum.mod_alloc(base_bank=BANK, num_bank_tiles=(2,)))\n"
    "    for j in range(6):\n"
    "        nisa.nc_matmul(dst=six[j], stationary=sa, moving=sb)\n"
    "    for i in range(8):\n"
    "        nisa.nc_matmul(dst=acc[i], stationary=sa, moving=sb)\n"
    "        nisa.tensor_tensor(dst=res, data1=res, data2=acc[i], op=nl.add)\n"
    "    for j in range(6):\n"
    "        nisa.tensor_tensor(dst=res, data1=res, data2=six[j], op=nl.add)\n"
    "    nisa.dma_copy(dst=out, src=res)\n"
    "    return out\n";

static char *hinted_with(const char *buffer)
{
    const char *hint = "ncc.psum.mod_alloc(base_bank=BANK, num_bank_tiles=(2,))";
    const char *at = strstr(HINTED, hint);
    return kf_asprintf("%.*s%s%s", (int)(at - HINTED), HINTED, buffer, at + strlen(hint));
}

static char *hinted(const char *bank)
{
    char *buf = kf_asprintf("ncc.psum.mod_alloc(base_bank=%s, num_bank_tiles=(2,))", bank);
    char *src = hinted_with(buf);
    free(buf);
    return src;
}

Test(nki_alloc, psum_mod_alloc_hint_is_honoured)
{
    char *src = hinted("0");
    sim_array in[2] = { mk("a", 128, 128, 5), mk("b", 128, 512, 6) };
    kt_result r;
    bool seen = false;

    kt_run(&r, src, "k", in, 2, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (int m = 0; m < 128; m++)
        for (int n = 0; n < 512; n += 37) {
            double s = 0;
            for (int k = 0; k < 128; k++)
                s += (double)f32(&in[0])[k * 128 + m] * f32(&in[1])[k * 512 + n];
            cr_assert(fabs(f32(&r.out[0])[m * 512 + n] - 14 * s) < 1e-2, "%d,%d", m, n);
        }
    for (size_t a = 0; a < r.rec.n_allocs; a++) {
        const sim_alloc *al = &r.rec.allocs[a];
        if (al->mem == SIM_MEM_PSUM && al->place == SIM_PLACE_FIXED) {
            cr_assert_eq(al->live_offset, 0);
            cr_assert_eq(al->reserve, (uint64_t)2 * 2048);
            seen = true;
        } else if (al->mem == SIM_MEM_PSUM) {
            cr_assert_eq(al->live_offset, (uint64_t)2 * 2048);   /* the six banks the hint leaves */
        }
    }
    cr_assert(seen);
    kt_run_done(&r);
    free(src);
    /* banks 7 and 8: PSUM has 8 */
    src = hinted("7");
    kt_run(&r, src, "k", in, 2, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 15);
    cr_assert(strstr(r.err.msg, "ncc.psum.mod_alloc(base_bank=7, base_addr=0, num_bank_tiles=(2,)) "
                                "uses banks 7..8, PSUM has 8") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    free(src);
    /* banks 2 and 3, where the six automatic banks must go too: a fit of 8
     * banks is impossible around the hint, and the error says why */
    src = hinted("2");
    kt_run(&r, src, "k", in, 2, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_PSUM_CAPACITY, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "fragmentation: a tile of 12288 bytes per partition (whole banks)") != NULL,
              "%s", r.err.msg);
    kt_run_done(&r);
    free(src);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

Test(nki_alloc, psum_alloc_function_places_each_block)
{
    /* the allocation function form of the same rotation over banks 0-1 */
    char *src = hinted_with("ncc.psum.alloc(lambda idx, p, f: (idx[0] % 2, 0, 0))");
    sim_array in[2] = { mk("a", 128, 128, 5), mk("b", 128, 512, 6) };
    kt_result r;
    bool seen = false;

    kt_run(&r, src, "k", in, 2, 0, 0, false);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    for (size_t a = 0; a < r.rec.n_allocs; a++) {
        const sim_alloc *al = &r.rec.allocs[a];
        if (al->mem == SIM_MEM_PSUM && al->place == SIM_PLACE_FIXED) {
            cr_assert_eq(al->live_offset, 0);
            cr_assert_eq(al->reserve, (uint64_t)2 * 2048);
            seen = true;
        }
    }
    cr_assert(seen);
    kt_run_done(&r);
    free(src);
    src = hinted_with("ncc.psum.alloc(lambda idx, p, f: (idx[0] + 3, 0, 0))");
    kt_run(&r, src, "k", in, 2, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "ncc.psum.alloc(<lambda>) puts block 5 at bank 8 byte 0: past the 8 banks") != NULL,
              "%s", r.err.msg);
    kt_run_done(&r);
    free(src);
    sim_array_release(&in[0]);
    sim_array_release(&in[1]);
}

Test(nki_alloc, conflicting_hints_and_sbuf_hints)
{
    const char *clash = HDR
        "def k(x):\n"
        "    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    a = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,\n"
        "                   buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)), name='first')\n"
        "    b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf.mod_alloc(base_addr=4096))\n"
        "    nisa.dma_copy(dst=a[0], src=x)\n"
        "    nisa.dma_copy(dst=b, src=x)\n"
        "    nisa.tensor_tensor(dst=a[1], data1=a[0], data2=b, op=nl.add)\n"
        "    nisa.dma_copy(dst=out, src=a[1])\n"
        "    return out\n";
    const char *past = HDR
        "def k(x):\n"
        "    a = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32,\n"
        "                   buffer=ncc.sbuf.mod_alloc(base_addr=226304, num_free_tiles=(2,)))\n"
        "    return x\n";
    sim_array x = mk("x", 128, 512, 7);
    kt_result r;

    kt_run(&r, clash, "k", &x, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 10);
    cr_assert(strstr(r.err.msg, "puts this SBUF tile at bytes [4096, 6144) of each partition, where the "
                                "hinted tile 'first' from line 8 lives at the same time at [1024, 5120)") != NULL,
              "%s", r.err.msg);
    kt_run_done(&r);
    kt_run(&r, past, "k", &x, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 7);
    cr_assert(strstr(r.err.msg, "ncc.sbuf.mod_alloc(base_addr=226304, num_free_tiles=(2,)) puts 2 tiles of "
                                "2048 bytes from byte 226304, past the 229376 bytes") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&x);
}

Test(nki_alloc, capacity_errors_name_the_live_tiles)
{
    const char *src = HDR
        "def k(x):\n"
        "    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    a = nl.ndarray((128, 32768), dtype=nl.float32, buffer=nl.sbuf, name='big_a')\n"
        "    b = nl.ndarray((128, 32768), dtype=nl.float32, buffer=nl.sbuf, name='big_b')\n"
        "    nisa.dma_copy(dst=a[:, 0:512], src=x)\n"
        "    nisa.tensor_copy(dst=b[:, 0:512], src=a[:, 0:512])\n"
        "    nisa.dma_copy(dst=out, src=b[:, 0:512])\n"
        "    return out\n";
    const char *one = HDR
        "def k(x):\n"
        "    a = nl.ndarray((128, 65536), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    return x\n";
    sim_array x = mk("x", 128, 512, 8);
    kt_result r;

    kt_run(&r, src, "k", &x, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_SBUF_CAPACITY, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 9, "%s", r.err.msg);   /* big_b takes it over */
    cr_assert_str_eq(r.serr.api, "nl.ndarray");
    cr_assert(strstr(r.err.msg, "size: 262144 bytes per partition live at once at line 11, capacity 229376; "
                                "live: 'big_a' 131072 B from line 8 (live since line 10); "
                                "'big_b' 131072 B from line 9 (live since line 11)") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    kt_run(&r, one, "k", &x, 1, 0, 0, false);
    cr_assert_eq(r.serr.code, SIM_E_SBUF_CAPACITY, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 7);
    cr_assert(strstr(r.err.msg, "size: one sbuf tensor of 262144 bytes per partition, capacity 229376") != NULL,
              "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&x);
}
