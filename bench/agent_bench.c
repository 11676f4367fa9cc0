/* agent_bench — the agent's benchmarks (bench/agent_bench.sh runs them).
 *
 *   agent_bench quality TARGET OP [SCALE]
 *       tune OP at its reference shapes (each dim divided by SCALE, default
 *       1) with the built-in planner; one JSON line: the default setting's
 *       and the best's fraction of the bound, the finding that limits the
 *       best, iterations, evaluations, loop overhead.
 *   agent_bench search TARGET OP SCALE RANDOM_SEEDS
 *       exhaustive search over OP's whole legal space, then the guided
 *       planner and RANDOM_SEEDS random searches (one shared evaluation
 *       cache, so repeated settings cost nothing); one JSON line: the
 *       evaluations each needs to reach 98% of the exhaustive best
 *       (latency <= best / 0.98), the space size.
 * Validation uses one seeded input set per check here (the bench is about
 * time and search; the tests validate on several). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_config.h"
#include "kf_num.h"
#include "agent/ka_lib.h"
#include "agent/ka_loop.h"

static int bind_op(const char *op, const char *target, int scale, ka_problem *pb, ka_space *sp)
{
    cJSON *meta = NULL, *sh, *d;
    char path[4096];
    int64_t shapes[KA_MAX_INPUTS][KA_MAX_DIMS];
    int nd[KA_MAX_INPUTS], n = 0;
    kf_err err = KF_ERR_INIT;

    if (ka_lib_find(NULL, op, &meta, path, sizeof(path), &err) != KF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(meta, "reference_shapes"))
    {
        nd[n] = 0;
        cJSON_ArrayForEach(d, sh)
        {
            int64_t v = (int64_t)d->valuedouble;
            /* scale the big dims only (kernel sizes, head dims, channels stay) */
            shapes[n][nd[n]++] = v >= 512 ? v / scale : v;
        }
        n++;
    }
    if (ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])shapes, nd, n, SIM_DT_BFLOAT16, target, pb, sp,
                    &err) != KF_OK) {
        fprintf(stderr, "%s: %s\n", op, err.msg);
        cJSON_Delete(meta);
        return -1;
    }
    cJSON_Delete(meta);
    return 0;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void shape_text(const ka_problem *pb, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < pb->n_inputs && o + 32 < len; i++) {
        for (int d = 0; d < pb->inputs[i].ndim; d++)
            o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? "x" : (i ? " " : ""), (long long)pb->inputs[i].shape[d]);
    }
}

static int quality(const char *target, const char *op, int scale)
{
    ka_problem pb;
    ka_space sp;
    ka_opts o = { 0 };
    cJSON *res = NULL, *out = cJSON_CreateObject(), *best, *f0;
    kf_err err = KF_ERR_INIT;
    char shp[256];
    char *txt;

    if (bind_op(op, target, scale, &pb, &sp) != 0)
        return 1;
    o.max_iterations = 30;
    o.patience = 8;
    o.n_seeds = 1;
    o.seed = 1;
    if (ka_tune(&pb, &sp, &o, NULL, &res, &err) != KF_OK) {
        fprintf(stderr, "%s: %s\n", op, err.msg);
        return 1;
    }
    shape_text(&pb, shp, sizeof(shp));
    best = cJSON_GetObjectItemCaseSensitive(res, "best");
    f0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(best, "findings"), 0);
    cJSON_AddStringToObject(out, "op", op);
    cJSON_AddStringToObject(out, "target", target);
    cJSON_AddStringToObject(out, "shapes", shp);
    cJSON_AddNumberToObject(out, "default_fraction", num(cJSON_GetObjectItemCaseSensitive(res, "default"), "fraction_of_bound"));
    cJSON_AddNumberToObject(out, "default_us", num(cJSON_GetObjectItemCaseSensitive(res, "default"), "latency_ns") / 1e3);
    cJSON_AddNumberToObject(out, "best_fraction", num(best, "fraction_of_bound"));
    cJSON_AddNumberToObject(out, "best_us", num(best, "latency_ns") / 1e3);
    cJSON_AddStringToObject(out, "bound_kind", cJSON_GetObjectItemCaseSensitive(best, "bound_kind")
                                                   ? cJSON_GetObjectItemCaseSensitive(best, "bound_kind")->valuestring : "");
    cJSON_AddNumberToObject(out, "profiler_fraction",
                            num(cJSON_GetObjectItemCaseSensitive(best, "bounds"), "achieved_fraction"));
    cJSON_AddStringToObject(out, "pipeline_engine",
                            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(best, "bounds"), "pipeline_engine")
                                ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(best, "bounds"), "pipeline_engine")->valuestring : "");
    {
        /* the most of the bound this kernel can reach: its busiest engine's
         * own time against the floor (ka_reach_text says the same in the
         * report) */
        double fl = num(best, "floor_ns"), pipe = num(cJSON_GetObjectItemCaseSensitive(best, "bounds"), "pipeline_ns");
        cJSON_AddNumberToObject(out, "reach_fraction", pipe > fl && fl > 0 ? fl / pipe : 1.0);
    }
    cJSON_AddStringToObject(out, "limiting_finding",
                            f0 ? cJSON_GetObjectItemCaseSensitive(f0, "kind")->valuestring : "none");
    cJSON_AddItemToObject(out, "params", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(best, "params"), true));
    cJSON_AddNumberToObject(out, "iterations", num(res, "iterations"));
    cJSON_AddNumberToObject(out, "evaluations", num(res, "evaluations"));
    cJSON_AddNumberToObject(out, "validations", num(res, "validations"));
    cJSON_AddItemToObject(out, "timings", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(res, "timings"), true));
    cJSON_AddItemToObject(out, "stop", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(res, "stop"), true));
    txt = cJSON_PrintUnformatted(out);
    printf("%s\n", txt);
    fflush(stdout);
    free(txt);
    cJSON_Delete(out);
    cJSON_Delete(res);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    return 0;
}

/* Iterations until the best-so-far latency is <= target_ns; -1 if never. */
static int evals_to(const cJSON *res, double target_ns)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(res, "trace"))
    {
        double b = num(t, "best_ns");
        if (b > 0 && b <= target_ns)
            return (int)num(t, "iteration");
    }
    return -1;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int search(const char *target, const char *op, int scale, int n_random)
{
    ka_problem pb;
    ka_space sp;
    ka_opts o = { 0 };
    ka_cache *cache = ka_cache_new();
    cJSON *ex = NULL, *gd = NULL, *out = cJSON_CreateObject(), *rnd = cJSON_CreateArray();
    kf_err err = KF_ERR_INIT;
    double best, goal;
    int r_evals[64], nr = 0, space;
    char shp[256], *txt;

    if (bind_op(op, target, scale, &pb, &sp) != 0)
        return 1;
    o.cache = cache;
    o.n_seeds = 1;
    o.patience = -1;
    o.max_iterations = 100000;
    o.planner = KA_PLAN_EXHAUSTIVE;
    if (ka_tune(&pb, &sp, &o, NULL, &ex, &err) != KF_OK) {
        fprintf(stderr, "%s: %s\n", op, err.msg);
        return 1;
    }
    best = num(cJSON_GetObjectItemCaseSensitive(ex, "best"), "latency_ns");
    goal = best / 0.98;
    space = (int)num(ex, "iterations");
    o.planner = KA_PLAN_GUIDED;
    o.patience = 0;
    o.max_iterations = 0;
    if (ka_tune(&pb, &sp, &o, NULL, &gd, &err) != KF_OK) {
        fprintf(stderr, "%s: %s\n", op, err.msg);
        return 1;
    }
    for (int s = 0; s < n_random && s < 64; s++) {
        cJSON *rr = NULL;
        o.planner = KA_PLAN_RANDOM;
        o.patience = -1;
        o.max_iterations = 100000;
        o.seed = (uint64_t)s + 1;
        if (ka_tune(&pb, &sp, &o, NULL, &rr, &err) != KF_OK) {
            fprintf(stderr, "%s: %s\n", op, err.msg);
            return 1;
        }
        r_evals[nr] = evals_to(rr, goal);
        if (r_evals[nr] < 0)
            r_evals[nr] = space;
        cJSON_AddItemToArray(rnd, cJSON_CreateNumber(r_evals[nr]));
        nr++;
        cJSON_Delete(rr);
    }
    qsort(r_evals, (size_t)nr, sizeof(int), cmp_int);
    shape_text(&pb, shp, sizeof(shp));
    cJSON_AddStringToObject(out, "op", op);
    cJSON_AddStringToObject(out, "target", target);
    cJSON_AddStringToObject(out, "shapes", shp);
    cJSON_AddNumberToObject(out, "space", space);
    cJSON_AddNumberToObject(out, "pruned", num(ex, "pruned"));
    cJSON_AddNumberToObject(out, "exhaustive_best_us", best / 1e3);
    cJSON_AddNumberToObject(out, "exhaustive_evals", evals_to(ex, goal));
    cJSON_AddNumberToObject(out, "guided_evals", evals_to(gd, goal));
    cJSON_AddNumberToObject(out, "guided_iterations", num(gd, "iterations"));
    cJSON_AddNumberToObject(out, "guided_best_us", num(cJSON_GetObjectItemCaseSensitive(gd, "best"), "latency_ns") / 1e3);
    double median = 0;
    int mid = nr / 2;
    if (nr % 2)
        median = r_evals[mid];
    else if (nr)
        median = (r_evals[mid - 1] + r_evals[mid]) / 2.0;
    cJSON_AddNumberToObject(out, "random_median_evals", median);
    cJSON_AddItemToObject(out, "random_evals", rnd);
    cJSON_AddNumberToObject(out, "simulator_runs", (double)ka_cache_size(cache));
    txt = cJSON_PrintUnformatted(out);
    printf("%s\n", txt);
    fflush(stdout);
    free(txt);
    cJSON_Delete(out);
    cJSON_Delete(ex);
    cJSON_Delete(gd);
    ka_cache_free(cache);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    return 0;
}

/* A numeric argument read whole (kf_num_long), or exit 2 saying which. */
static long ab_arg(const char *s, long lo, long hi, const char *what)
{
    kf_err e = KF_ERR_INIT;
    long v;

    if (kf_num_long(s, lo, hi, &v, &e) != KF_OK) {
        fprintf(stderr, "agent_bench: %s: %s\n", what, e.msg);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    kf_err err = KF_ERR_INIT;
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    if (argc >= 4 && strcmp(argv[1], "quality") == 0)
        return quality(argv[2], argv[3], argc > 4 ? (int)ab_arg(argv[4], 1, 1000, "SCALE") : 1);
    if (argc >= 6 && strcmp(argv[1], "search") == 0)
        return search(argv[2], argv[3], (int)ab_arg(argv[4], 1, 1000, "SCALE"), (int)ab_arg(argv[5], 0, 100000, "RANDOM_SEEDS"));
    fprintf(stderr, "usage: agent_bench quality TARGET OP [SCALE] | search TARGET OP SCALE RANDOM_SEEDS\n");
    return 2;
}
