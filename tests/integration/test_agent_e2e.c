/* The agent end to end: kforge-api + kforge-scheduler + kforge-worker (sim
 * backend) against real PostgreSQL and Redis.  generate / optimize /
 * profile / validate jobs are submitted over HTTP; their iterations, result
 * and errors are read back from PostgreSQL. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_stack.h"

#define AGENT_E2E_DB 3

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

TestSuite(agent_e2e, .fini = teardown, .timeout = 240);

static const char *KERNEL =
    "import math\\n"
    "import nki\\n"
    "import nki.language as nl\\n"
    "import nki.isa as nisa\\n"
    "\\n"
    "@nki.jit\\n"
    "def double(x, TILE_F=128):\\n"
    "    N, D = x.shape\\n"
    "    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)\\n"
    "    for c in nl.affine_range(math.ceil(D / TILE_F)):\\n"
    "        c0 = c * TILE_F\\n"
    "        w = min(TILE_F, D - c0)\\n"
    "        t = nl.ndarray((N, TILE_F), dtype=x.dtype, buffer=nl.sbuf)\\n"
    "        nisa.dma_copy(dst=t[0:N, 0:w], src=x[0:N, c0:c0 + w])\\n"
    "        o = nl.ndarray((N, TILE_F), dtype=x.dtype, buffer=nl.sbuf)\\n"
    "        nisa.tensor_scalar(dst=o[0:N, 0:w], data=t[0:N, 0:w], op0=nl.multiply, operand0=2.0)\\n"
    "        nisa.dma_copy(dst=out[0:N, c0:c0 + w], src=o[0:N, 0:w])\\n"
    "    return out\\n";

static char *user_body(const char *kind, const char *source, const char *reference, const char *tunables)
{
    return kf_asprintf("{\"kind\":\"%s\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
                       "\"budget\":{\"iterations\":6},\"spec\":{\"source\":\"%s\",\"entry\":\"double\","
                       "%s%s%s\"inputs\":{\"x\":{\"shape\":[128,1000],\"dtype\":\"bfloat16\"}}%s%s}}",
                       kind, source, reference ? "\"reference\":\"" : "", reference ? reference : "",
                       reference ? "\"," : "", tunables ? ",\"tunables\":" : "", tunables ? tunables : "");
}

static char *error_of(const char *id)
{
    return kf_stack_sql_value(&S, "SELECT coalesce(error, '') FROM job_results WHERE job_id = $1::uuid", id);
}

Test(agent_e2e, jobs_through_api_worker_sim_and_postgres)
{
    kf_stack_opts o = { .redis_db = AGENT_E2E_DB, .n_workers = 2, .n_schedulers = 1, .lease_ms = 10000 };
    const char *ref = "import numpy as np\\ndef double(x):\\n    return 2.0 * np.asarray(x, dtype=np.float64)\\n";
    const char *bad_ref = "def double(x):\\n    raise ValueError('no reference today')\\n";
    char *b_gen, *b_opt, *b_prof, *b_val, *b_unknown, *b_badref, *b_syntax, *b_shape;
    char *gen, *opt, *prof, *val, *unknown, *badref, *syntax, *shape, *r, *e;
    char *bad_src;

    kf_stack_start(&S, &o);
    b_gen = kf_asprintf("{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
                        "\"budget\":{\"iterations\":5},\"goal\":{\"fraction_of_bound\":0.99},"
                        "\"spec\":{\"op\":\"softmax\",\"shapes\":[[256,1024]],\"dtype\":\"bfloat16\"}}");
    b_unknown = kf_asprintf("{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
                            "\"spec\":{\"op\":\"conv9d\",\"shapes\":[[8,8]],\"dtype\":\"bfloat16\"}}");
    b_shape = kf_asprintf("{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
                          "\"spec\":{\"op\":\"flash_attention\",\"shapes\":[[256,512]],\"dtype\":\"bfloat16\"}}");
    b_opt = user_body("optimize", KERNEL, ref, "{\"TILE_F\":[128,256,512,1024]}");
    b_prof = user_body("profile", KERNEL, NULL, NULL);
    b_val = user_body("validate", KERNEL, ref, NULL);
    b_badref = user_body("optimize", KERNEL, bad_ref, "{\"TILE_F\":[128,256]}");
    bad_src = kf_asprintf("import nki\\n\\ndef double(x:\\n    return x\\n");
    b_syntax = user_body("profile", bad_src, NULL, NULL);

    gen = kf_stack_submit(&S, b_gen);
    opt = kf_stack_submit(&S, b_opt);
    prof = kf_stack_submit(&S, b_prof);
    val = kf_stack_submit(&S, b_val);
    unknown = kf_stack_submit(&S, b_unknown);
    shape = kf_stack_submit(&S, b_shape);
    badref = kf_stack_submit(&S, b_badref);
    syntax = kf_stack_submit(&S, b_syntax);

    /* generate: a tuned library kernel, each iteration in PostgreSQL */
    cr_assert(kf_stack_wait_state(&S, gen, "succeeded", 180000), "generate is %s; see %s", kf_stack_state(&S, gen), S.dir);
    r = kf_stack_sql_value(&S, "SELECT result::text FROM job_results WHERE job_id = $1::uuid", gen);
    cr_assert(r && strstr(r, "\"fraction_of_bound\"") && strstr(r, "\"best\"") && strstr(r, "def softmax("),
              "generate result: %.400s", r ? r : "(none)");
    free(r);
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid", gen), 5,
                 "five iterations recorded (budget)");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action IS NULL "
                                       "OR (job_id = $1::uuid AND reason IS NULL)", gen), 0);
    cr_assert_geq(kf_stack_sql_long(&S, "SELECT best_iteration FROM jobs WHERE id = $1::uuid", gen), 0,
                  "the API marks the fastest correct iteration");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND correct AND "
                                       "latency_ns < (SELECT latency_ns FROM iterations i JOIN jobs j ON j.id = i.job_id "
                                       "AND i.seq = j.best_iteration WHERE j.id = $1::uuid)", gen), 0);

    /* optimize with tunables */
    cr_assert(kf_stack_wait_state(&S, opt, "succeeded", 120000), "optimize is %s; see %s", kf_stack_state(&S, opt), S.dir);
    r = kf_stack_sql_value(&S, "SELECT result::text FROM job_results WHERE job_id = $1::uuid", opt);
    cr_assert(r && strstr(r, "\"TILE_F\"") && strstr(r, "\"correct\": true"), "optimize result: %.400s", r ? r : "");
    free(r);
    cr_assert_geq(kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND correct", opt), 1);

    /* profile and validate: one evaluation each */
    cr_assert(kf_stack_wait_state(&S, prof, "succeeded", 60000), "profile is %s", kf_stack_state(&S, prof));
    r = kf_stack_sql_value(&S, "SELECT result::text FROM job_results WHERE job_id = $1::uuid", prof);
    cr_assert(r && strstr(r, "\"bounds\"") && strstr(r, "\"latency_ns\""), "profile result: %.300s", r ? r : "");
    free(r);
    cr_assert(kf_stack_wait_state(&S, val, "succeeded", 60000), "validate is %s", kf_stack_state(&S, val));
    r = kf_stack_sql_value(&S, "SELECT result::text FROM job_results WHERE job_id = $1::uuid", val);
    cr_assert(r && strstr(r, "\"correct\": true"), "validate result: %.300s", r ? r : "");
    free(r);

    /* clear, final errors */
    cr_assert(kf_stack_wait_state(&S, unknown, "failed", 60000), "unknown op is %s", kf_stack_state(&S, unknown));
    e = error_of(unknown);
    cr_assert(e && strstr(e, "unknown op \"conv9d\"") && strstr(e, "softmax"), "error: %s", e ? e : "");
    free(e);
    cr_assert(kf_stack_wait_state(&S, shape, "failed", 60000), "unservable shape is %s", kf_stack_state(&S, shape));
    e = error_of(shape);
    cr_assert(e && strstr(e, "cannot serve"), "error: %s", e ? e : "");
    free(e);
    cr_assert(kf_stack_wait_state(&S, badref, "failed", 60000), "bad reference is %s", kf_stack_state(&S, badref));
    e = error_of(badref);
    cr_assert(e && strstr(e, "reference does not run") && strstr(e, "no reference today"), "error: %s", e ? e : "");
    free(e);
    cr_assert(kf_stack_wait_state(&S, syntax, "failed", 60000), "syntax error is %s", kf_stack_state(&S, syntax));
    e = error_of(syntax);
    cr_assert(e && strstr(e, "does not compile") && strstr(e, ":3"), "error names the line: %s", e ? e : "");
    free(e);
    for (char **p = (char *[]){ gen, opt, prof, val, unknown, shape, badref, syntax, NULL }; *p; p++)
        cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", *p), 1, "no retries");

    free(gen); free(opt); free(prof); free(val); free(unknown); free(shape); free(badref); free(syntax);
    free(b_gen); free(b_opt); free(b_prof); free(b_val); free(b_unknown); free(b_shape); free(b_badref);
    free(b_syntax); free(bad_src);
}
