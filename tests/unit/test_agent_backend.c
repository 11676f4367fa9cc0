/* The worker's sim backend driven directly (no services): an optimize job
 * without tunables is one diagnosed iteration with findings per line, a
 * generate job honours its budget and goal, a cancel stops it between
 * evaluations (retryable), spec problems are final errors, and
 * budget.seconds bounds a single profile or validation. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_job.h"
#include "tests/lib/kf_test.h"
#include "workers/kf_backend.h"

static void setup(void)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    char kdir[3072];
    kf_err err = KF_ERR_INIT;
    snprintf(kdir, sizeof(kdir), "%s/kernels", root && *root ? root : ".");
    setenv("KFORGE_KERNELS_DIR", kdir, 1);
    cr_assert_eq(kf_config_load(&err), KF_OK, "%s", err.msg);
}

TestSuite(agent_backend, .init = setup, .timeout = 300);

typedef struct rec {
    int    n;
    cJSON *last;
    int    cancel_after;    /* cancelled() answers true after this many progress calls; -1 never */
} rec;

static void progress(void *ctx, const char *json)
{
    rec *r = ctx;
    r->n++;
    cJSON_Delete(r->last);
    r->last = cJSON_Parse(json);
    cr_assert_not_null(r->last, "iteration JSON parses");
}

static bool cancelled(void *ctx)
{
    rec *r = ctx;
    return r->cancel_after >= 0 && r->n >= r->cancel_after;
}

static kf_code run(const char *payload_json, rec *r, char **result, bool *retryable, kf_err *err)
{
    kf_job_payload p;
    const kf_backend *b;
    kf_backend_hooks h = { r, progress, cancelled };
    kf_err perr = KF_ERR_INIT;
    kf_code rc;
    cr_assert_eq(kf_job_payload_parse(payload_json, &p, &perr), KF_OK, "%s", perr.msg);
    b = kf_backend_find("sim", kf_job_kind_name(p.kind));
    cr_assert_not_null(b, "sim runs %s", kf_job_kind_name(p.kind));
    rc = b->run(b, &p, &h, result, retryable, err);
    kf_job_payload_release(&p);
    return rc;
}

#define ID "\"id\":\"3f1c2d4e-1111-4222-8333-444455556666\""

static const char *SRC =
    "import math\\nimport nki\\nimport nki.language as nl\\nimport nki.isa as nisa\\n\\n"
    "@nki.jit\\ndef scale(x):\\n    N, D = x.shape\\n"
    "    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)\\n"
    "    for c in nl.affine_range(math.ceil(D / 64)):\\n"
    "        w = min(64, D - c * 64)\\n"
    "        t = nl.ndarray((N, 64), dtype=x.dtype, buffer=nl.sbuf)\\n"
    "        nisa.dma_copy(dst=t[0:N, 0:w], src=x[0:N, c * 64:c * 64 + w])\\n"
    "        nisa.tensor_scalar(dst=t[0:N, 0:w], data=t[0:N, 0:w], op0=nl.multiply, operand0=3.0)\\n"
    "        nisa.dma_copy(dst=out[0:N, c * 64:c * 64 + w], src=t[0:N, 0:w])\\n"
    "    return out\\n";

Test(agent_backend, optimize_without_tunables_is_one_diagnosed_iteration)
{
    char *payload = kf_asprintf("{" ID ",\"kind\":\"optimize\",\"target\":\"trn2\",\"backend\":\"sim\",\"budget\":{},"
                                "\"goal\":{},\"spec\":{\"source\":\"%s\",\"entry\":\"scale\","
                                "\"reference\":\"import numpy as np\\ndef scale(x):\\n    return 3.0 * np.asarray(x, np.float64)\\n\","
                                "\"inputs\":{\"x\":{\"shape\":[128,1000],\"dtype\":\"bfloat16\"}}}}", SRC);
    rec r = { 0, NULL, -1 };
    char *result = NULL;
    bool retry = true;
    kf_err err = KF_ERR_INIT;
    cJSON *res, *f;
    cr_assert_eq(run(payload, &r, &result, &retry, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(r.n, 1, "one iteration");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(r.last, "action")->valuestring, "diagnose");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r.last, "correct")));
    res = cJSON_Parse(result);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "correct")), "%s", result);
    f = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "profile"), "findings"), 0);
    cr_assert_not_null(f, "64-column DMAs are diagnosed: %s", result);
    cr_assert(strstr(cJSON_PrintUnformatted(f), "kernel.py:"), "findings name the source lines: %s",
              cJSON_PrintUnformatted(f));
    cJSON_Delete(res);
    cJSON_Delete(r.last);
    free(result);
    free(payload);
}

Test(agent_backend, generate_honours_budget_and_cancel)
{
    const char *body = "{" ID ",\"kind\":\"generate\",\"target\":\"trn1\",\"backend\":\"sim\",\"budget\":{\"iterations\":3},"
                       "\"goal\":{},\"spec\":{\"op\":\"rmsnorm\",\"shapes\":[[200,700]],\"dtype\":\"bfloat16\"}}";
    rec r = { 0, NULL, -1 };
    char *result = NULL;
    bool retry = true;
    kf_err err = KF_ERR_INIT;
    cJSON *res;

    cr_assert_eq(run(body, &r, &result, &retry, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(r.n, 3);
    res = cJSON_Parse(result);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(res, "iterations")->valueint, 3);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "target")->valuestring, "trn1");
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(res, "best"));
    cJSON_Delete(res);
    free(result);
    cJSON_Delete(r.last);

    r.n = 0;
    r.last = NULL;
    r.cancel_after = 1;
    result = NULL;
    cr_assert_eq(run(body, &r, &result, &retry, &err), KF_UNAVAILABLE);
    cr_assert(retry, "a cancel is not the job's fault");
    cr_assert_eq(r.n, 1, "stopped before the second evaluation");
    cr_assert_null(result);
    cJSON_Delete(r.last);
}

Test(agent_backend, spec_problems_are_final)
{
    rec r = { 0, NULL, -1 };
    char *result = NULL;
    bool retry = true;
    kf_err err = KF_ERR_INIT;
    char *bad = kf_asprintf("{" ID ",\"kind\":\"validate\",\"target\":\"trn2\",\"backend\":\"sim\",\"budget\":{},\"goal\":{},"
                            "\"spec\":{\"source\":\"%s\",\"entry\":\"scale\","
                            "\"inputs\":{\"x\":{\"shape\":[128,100],\"dtype\":\"bfloat16\"}}}}", SRC);
    cr_assert_neq(run("{" ID ",\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"budget\":{},\"goal\":{},"
                      "\"spec\":{\"op\":\"softmax\",\"shapes\":[[8,8,8]],\"dtype\":\"bfloat16\"}}",
                      &r, &result, &retry, &err), KF_OK);
    cr_assert(!retry);
    cr_assert(strstr(err.msg, "softmax input x has shape NxD"), "%s", err.msg);
    {
        /* A validate job without a reference never reaches the backend: the
         * payload check (the API's rules) refuses it. */
        kf_job_payload p;
        kf_err perr = KF_ERR_INIT;
        cr_assert_eq(kf_job_payload_parse(bad, &p, &perr), KF_INVALID);
        cr_assert(strstr(perr.msg, "reference"), "%s", perr.msg);
    }
    free(bad);
    cJSON_Delete(r.last);
}

#define SPIN "import nki\\n\\n@nki.jit\\ndef spin(x):\\n    while True:\\n        pass\\n"
#define SPIN_REF "import numpy as np\\ndef spin(x):\\n    return x\\n"

/* budget.seconds bounds one evaluation, not only the tuning loop: a
 * profile or a validation of a kernel that never returns stops at
 * min(KFORGE_SIM_TIMEOUT_S, budget.seconds) with a message that says so,
 * and is not retried (another attempt would spin the same). */
Test(agent_backend, budget_seconds_bounds_a_single_profile_or_validation)
{
    static const char *const kinds[] = { "profile", "validate" };
    kf_err cerr = KF_ERR_INIT;

    for (int k = 0; k < 2; k++) {
        char *payload = kf_asprintf("{" ID ",\"kind\":\"%s\",\"target\":\"trn2\",\"backend\":\"sim\","
                                    "\"budget\":{\"iterations\":1,\"seconds\":2},\"goal\":{},\"spec\":{\"source\":\"" SPIN
                                    "\",\"entry\":\"spin\",%s\"inputs\":{\"x\":{\"shape\":[128,64],\"dtype\":\"float32\"}}}}",
                                    kinds[k], k == 1 ? "\"reference\":\"" SPIN_REF "\"," : "");
        rec r = { 0, NULL, -1 };
        char *result = NULL;
        bool retry = true;
        kf_err err = KF_ERR_INIT;
        long long t0 = kf_test_now_ms(), took;

        cr_assert_eq(run(payload, &r, &result, &retry, &err), KF_UNPROCESSABLE, "%s: %s", kinds[k], err.msg);
        took = kf_test_now_ms() - t0;
        cr_assert(took < 15000, "%s ran %lld ms on a budget of 2 s", kinds[k], took);
        cr_assert(strstr(err.msg, "time limit of 2 s") && strstr(err.msg, "budget.seconds"), "%s: %s", kinds[k],
                  err.msg);
        cr_assert_not(retry);
        cr_assert_null(result);
        cr_assert_eq(r.n, 1, "the iteration is reported");
        cJSON_Delete(r.last);
        free(payload);
    }
    /* KFORGE_SIM_TIMEOUT_S still applies when it is the lower of the two. */
    setenv("KFORGE_SIM_TIMEOUT_S", "1", 1);
    cr_assert_eq(kf_config_load(&cerr), KF_OK, "%s", cerr.msg);
    {
        char *payload = kf_asprintf("{" ID ",\"kind\":\"profile\",\"target\":\"trn2\",\"backend\":\"sim\","
                                    "\"budget\":{\"seconds\":600},\"goal\":{},\"spec\":{\"source\":\"" SPIN
                                    "\",\"entry\":\"spin\",\"inputs\":{\"x\":{\"shape\":[128,64],\"dtype\":\"float32\"}}}}");
        rec r = { 0, NULL, -1 };
        char *result = NULL;
        bool retry = true;
        kf_err err = KF_ERR_INIT;

        cr_assert_eq(run(payload, &r, &result, &retry, &err), KF_UNPROCESSABLE, "%s", err.msg);
        cr_assert(strstr(err.msg, "time limit of 1 s"), "%s", err.msg);
        cJSON_Delete(r.last);
        free(payload);
    }
}

/* An optimize job whose KFORGE block carries a constraint of 50,000 unary
 * minuses (issue 22): the evaluator refuses it like any other bad
 * constraint (here: an unknown name) — a final error naming the nesting
 * limit, not a crash of the evaluation that would be retried. */
static kf_code run_with_constraint(const char *constraint, bool *retry, kf_err *err)
{
    char *payload = kf_asprintf("{" ID ",\"kind\":\"optimize\",\"target\":\"trn2\",\"backend\":\"sim\",\"budget\":{},"
                                "\"goal\":{},\"spec\":{\"source\":\"KFORGE = {\\\"constraints\\\": [\\\"%s\\\"]}\\n%s\","
                                "\"entry\":\"scale\",\"tunables\":{\"T\":[1,2]},"
                                "\"reference\":\"import numpy as np\\ndef scale(x, T=1):\\n    return 3.0 * x\\n\","
                                "\"inputs\":{\"x\":{\"shape\":[128,100],\"dtype\":\"bfloat16\"}}}}",
                                constraint, SRC);
    rec r = { 0, NULL, -1 };
    char *result = NULL;
    kf_code rc = run(payload, &r, &result, retry, err);
    cr_assert_null(result);
    cr_assert_eq(r.n, 0, "refused before any evaluation");
    cJSON_Delete(r.last);
    free(payload);
    return rc;
}

Test(agent_backend, a_deeply_nested_constraint_is_a_final_error)
{
    char *deep = kf_malloc(50000 + 8);
    bool retry = true;
    kf_err err = KF_ERR_INIT, unknown = KF_ERR_INIT;
    kf_code rc_deep, rc_unknown;

    memset(deep, '-', 50000);
    memcpy(deep + 50000, "1 > 0", 6);
    rc_deep = run_with_constraint(deep, &retry, &err);
    cr_assert_neq(rc_deep, KF_OK);
    cr_assert_not(retry, "another attempt would fail the same: %s", err.msg);
    cr_assert(strstr(err.msg, "more than 64 levels") && strstr(err.msg, "constraint"), "%s", err.msg);

    retry = true;
    rc_unknown = run_with_constraint("T <= NOPE", &retry, &unknown);
    cr_assert_not(retry);
    cr_assert(strstr(unknown.msg, "unknown name"), "%s", unknown.msg);
    cr_assert_eq(rc_deep, rc_unknown, "reported like any other bad constraint (%s / %s)", kf_code_name(rc_deep),
                 kf_code_name(rc_unknown));
    free(deep);
}

/* The backend checks shapes itself instead of trusting the API's rules: a
 * payload that skipped them (an old API, a hand-written queue entry) with
 * a dimension of 1e49, a fraction or too many dimensions is a final error
 * naming the shape, and never a conversion of an out-of-range double. */
Test(agent_backend, shapes_are_checked_again_by_the_backend)
{
    static const char *const specs[] = {
        "{\"op\":\"softmax\",\"shapes\":[[1e49,8]],\"dtype\":\"bfloat16\"}",
        "{\"op\":\"softmax\",\"shapes\":[[128,2.5]],\"dtype\":\"bfloat16\"}",
        "{\"op\":\"softmax\",\"shapes\":[[1,1,1,1,1,1,1,1,1]],\"dtype\":\"bfloat16\"}",
        "{\"op\":\"softmax\",\"shapes\":[[0,8]],\"dtype\":\"bfloat16\"}",
    };
    const kf_backend *b = kf_backend_find("sim", "generate");

    cr_assert_not_null(b);
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        rec r = { 0, NULL, -1 };
        kf_backend_hooks h = { &r, progress, cancelled };
        kf_job_payload p;
        char *result = NULL;
        bool retry = true;
        kf_err err = KF_ERR_INIT;

        memset(&p, 0, sizeof(p));
        snprintf(p.id, sizeof(p.id), "3f1c2d4e-1111-4222-8333-444455556666");
        p.kind = KF_KIND_GENERATE;
        snprintf(p.target, sizeof(p.target), "trn2");
        snprintf(p.backend, sizeof(p.backend), "sim");
        p.spec = cJSON_Parse(specs[i]);
        p.budget = cJSON_CreateObject();
        p.goal = cJSON_CreateObject();
        cr_assert_eq(b->run(b, &p, &h, &result, &retry, &err), KF_UNPROCESSABLE, "%s ran", specs[i]);
        cr_expect(!retry, "%s is retried", specs[i]);
        cr_expect(strstr(err.msg, "shapes[0]") != NULL, "%s: %s", specs[i], err.msg);
        cr_expect_null(result);
        kf_job_payload_release(&p);
        cJSON_Delete(r.last);
    }
}
