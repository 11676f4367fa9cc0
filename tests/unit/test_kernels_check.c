/* Unit tests for sim/sim_check: the output comparison and the NumPy
 * reference runner (run inside a sandbox child, as kforge does). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim/sim_check.h"
#include "sim/sim_npy.h"
#include "sim/sim_sandbox.h"
#include "tests/lib/kf_test.h"

static sim_array mk(sim_dtype dt, int rows, int cols, const double *v)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    a.dtype = dt;
    a.ndim = 2;
    a.shape[0] = rows;
    a.shape[1] = cols;
    a.data = kf_calloc((size_t)rows * (size_t)cols, sim_dtype_size(dt));
    for (int i = 0; i < rows * cols; i++)
        sim_npy_store_elem(dt, a.data, (uint64_t)i, v[i]);
    return a;
}

Test(sim_check, compare_passes_within_tolerance_and_names_the_worst_element)
{
    double w[6] = { 1, 2, 3, 4, 5, 6 };
    double g[6] = { 1, 2, 3, 4.00001, 5, 6 };
    sim_array want = mk(SIM_DT_FLOAT32, 2, 3, w), got = mk(SIM_DT_FLOAT32, 2, 3, g);
    sim_check_cmp c;

    sim_check_compare(&got, &want, sim_check_default_tol(SIM_DT_FLOAT32), &c);
    cr_assert(c.pass, "%s", c.msg);
    cr_assert_eq(c.count, 6);

    ((float *)got.data)[4] = 5.5f;
    sim_check_compare(&got, &want, sim_check_default_tol(SIM_DT_FLOAT32), &c);
    cr_assert_not(c.pass);
    cr_assert_eq(c.bad, 1);
    cr_assert_eq(c.worst, 4);
    cr_assert(strstr(c.msg, "worst at [1, 1]: got 5.5, want 5") != NULL, "%s", c.msg);
    free(want.data);
    free(got.data);
}

Test(sim_check, compare_catches_nan_inf_and_shapes)
{
    double w[4] = { 1, NAN, INFINITY, 0 };
    double g[4] = { 1, NAN, INFINITY, NAN };
    sim_array want = mk(SIM_DT_FLOAT32, 2, 2, w), got = mk(SIM_DT_FLOAT32, 2, 2, g);
    sim_check_cmp c;

    sim_check_compare(&got, &want, sim_check_default_tol(SIM_DT_FLOAT32), &c);
    cr_assert_not(c.pass);
    cr_assert_eq(c.bad, 1, "NaN matches NaN, Inf matches Inf, NaN where 0 is expected fails");
    cr_assert_eq(c.got_nan, 2);
    cr_assert(strstr(c.msg, "NaN in the output") != NULL, "%s", c.msg);

    ((float *)got.data)[2] = -INFINITY;
    ((float *)got.data)[3] = 0;
    sim_check_compare(&got, &want, sim_check_default_tol(SIM_DT_FLOAT32), &c);
    cr_assert_eq(c.bad, 1, "-Inf is not +Inf");

    got.shape[0] = 4;
    got.shape[1] = 1;
    sim_check_compare(&got, &want, sim_check_default_tol(SIM_DT_FLOAT32), &c);
    cr_assert_not(c.pass);
    cr_assert_str_eq(c.msg, "shape (4, 1) differs from the reference's (2, 2)");
    free(want.data);
    free(got.data);
}

Test(sim_check, bf16_outputs_get_the_bf16_tolerance)
{
    double w[2] = { 1.0 / 3.0, -7.123 };
    sim_array want = mk(SIM_DT_FLOAT32, 1, 2, w), got = mk(SIM_DT_BFLOAT16, 1, 2, w);
    sim_check_cmp c;
    sim_check_compare(&got, &want, sim_check_default_tol(SIM_DT_FLOAT32), &c);
    cr_assert_not(c.pass, "bf16 rounding exceeds the fp32 tolerance");
    sim_check_compare(&got, &want, sim_check_default_tol(SIM_DT_BFLOAT16), &c);
    cr_assert(c.pass, "%s", c.msg);
    cr_assert_eq(sim_check_default_tol(SIM_DT_INT32).rtol, 0);
    free(want.data);
    free(got.data);
}

/* The reference runs user code: run it the way kforge does, in a child. */
typedef struct ref_job {
    const char *path, *entry, *kwargs;
    sim_array  *inputs;
    size_t      n;
} ref_job;

static kf_code ref_child(void *arg, sim_sandbox_out *out, kf_err *err)
{
    ref_job *j = arg;
    sim_array *r = NULL;
    size_t n = 0;
    kf_code rc = sim_check_reference(j->path, j->entry, j->inputs, j->n, j->kwargs, &r, &n, err);
    for (size_t i = 0; i < n; i++)
        sim_sandbox_send_array(out, &r[i], NULL);
    sim_check_arrays_free(r, n);
    return rc;
}

static void run_ref(ref_job *j, sim_sandbox_result *res)
{
    const char *files[] = { j->path, NULL };   /* all it may read of the machine */
    sim_sandbox_limits l = { .cpu_seconds = 60, .memory_mib = 2048, .wall_ms = 60000, .ro_paths = files };
    cr_assert_eq(sim_sandbox_run(&l, ref_child, j, res, NULL), KF_OK);
}

static char *write_file(const char *dir, const char *name, const char *text)
{
    char *p = kf_asprintf("%s/%s", dir, name);
    kf_test_write_file(p, text);
    return p;
}

Test(sim_check, reference_gets_inputs_and_matching_kwargs)
{
    char *dir = kf_test_tmpdir("ref");
    char *path = write_file(dir, "ref.py",
                            "import numpy as np\n"
                            "def f(x, mask, scale=1.0):\n"
                            "    assert x.dtype == np.float32 and mask.dtype == np.int8, (x.dtype, mask.dtype)\n"
                            "    return x * scale, (x > 0).astype(np.int64) + mask\n");
    double xv[4] = { 1.0 / 3.0, -2, 3, 1e-3 }, mv[4] = { 0, 1, 0, 1 };
    sim_array in[2] = { mk(SIM_DT_BFLOAT16, 2, 2, xv), mk(SIM_DT_INT8, 2, 2, mv) };
    ref_job j = { path, "f", "{\"scale\": 2, \"TILE_F\": 512}", in, 2 };
    sim_sandbox_result r;

    run_ref(&j, &r);
    cr_assert_eq(r.status, SIM_SB_OK, "%s\n%s", r.reason, r.log);
    cr_assert_eq(r.n_arrays, 2);
    cr_assert_eq(r.arrays[0].dtype, SIM_DT_FLOAT32);
    /* bf16 input reaches NumPy as the exact same value in float32 */
    cr_assert_eq(((float *)r.arrays[0].data)[0], 2 * sim_npy_bf16_to_f32(sim_npy_f32_to_bf16(1.0f / 3)));
    cr_assert_eq(r.arrays[1].dtype, SIM_DT_INT32);
    cr_assert_eq(((int32_t *)r.arrays[1].data)[1], 1);
    cr_assert_eq(((int32_t *)r.arrays[1].data)[3], 2);
    sim_sandbox_result_release(&r);
    free(in[0].data);
    free(in[1].data);
    free(path);
    free(dir);
}

Test(sim_check, reference_failures_are_reported)
{
    char *dir = kf_test_tmpdir("refbad");
    char *path = write_file(dir, "ref.py", "def f(x):\n    raise RuntimeError('reference is broken')\n");
    double xv[1] = { 1 };
    sim_array in = mk(SIM_DT_FLOAT32, 1, 1, xv);
    ref_job j = { path, "f", NULL, &in, 1 };
    sim_sandbox_result r;

    run_ref(&j, &r);
    cr_assert_eq(r.status, SIM_SB_FAILED);
    cr_assert(strstr(r.reason, "RuntimeError: reference is broken") != NULL, "%s", r.reason);
    sim_sandbox_result_release(&r);

    j.entry = "g";
    run_ref(&j, &r);
    cr_assert_eq(r.status, SIM_SB_FAILED);
    cr_assert(strstr(r.reason, "defines no function 'g'") != NULL, "%s", r.reason);
    sim_sandbox_result_release(&r);
    free(in.data);
    free(path);
    free(dir);
}
