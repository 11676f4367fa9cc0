/* Wrong numbers that once came out silently (issue 21): SPMD launches with
 * nl.spmd_dim.  Every kernel's output is compared element by element with
 * values computed here in C. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"

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

typedef struct run_result {
    kf_code rc;
    sim_array *out;
    size_t n_out;
    sim_record rec;
    sim_error serr;
    kf_err err;
} run_result;

static void run(run_result *r, const char *src, const sim_array *in, size_t n, bool numerics)
{
    sim_run_opts o;
    memset(&o, 0, sizeof(o));
    memset(r, 0, sizeof(*r));
    o.entry = "k";
    o.target = "trn2";
    o.numerics = numerics;
    sim_record_init(&r->rec, "trn2");
    r->rc = sim_run_source(&o, src, "kernel.py", in, n, &r->out, &r->n_out, &r->rec, &r->serr,
                           &r->err);
}

static void done(run_result *r)
{
    for (size_t i = 0; i < r->n_out; i++)
        sim_array_release(&r->out[i]);
    free(r->out);
    sim_record_release(&r->rec);
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
    run_result r;
    uint32_t max_spmd = 0;

    run(&r, src, &in, 1, true);
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
    done(&r);
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
    run_result r;

    run(&r, src, &in, 1, false);
    cr_assert_eq(r.serr.code, SIM_E_BAD_ARGUMENT, "%s", r.err.msg);
    cr_assert(strstr(r.err.msg, "argument 2") != NULL, "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 9);
    done(&r);
    sim_array_release(&in);
}
