/* Integration tests of the calibration records at the API edge (issue 18,
 * docs/neuron-backend.md "Calibration", docs/protocol.md finish report)
 * against real PostgreSQL and Redis: a result whose result.calibration
 * breaks a bound is refused with 422 naming each field and records
 * nothing; a valid one is stored with the job's op, shape, dtype and
 * target in the success's transaction, and GET /v1/calibration shows it
 * to its owner and admins only.  Jobs run through the worker protocol
 * (lease, start, result) as a worker would; the neuron backend's own
 * records are tested end to end in test_neuron. */
#include "kf_queue.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"

#include <math.h>

#define REDIS_DB 6

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, NULL);
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(api_calib, .init = setup, .fini = teardown, .timeout = 120);

typedef fx_lease lease;

/* Submit a generate job as `tok`, lease it for w1 and report its start. */
static char *leased(const char *tok, lease *l)
{
    char *id = fx_submit(&fx, tok, "{\"kind\":\"generate\",\"op\":\"add\",\"shapes\":[[200,700],[200,700]],"
                                   "\"dtype\":\"bfloat16\",\"target\":\"trn2\"}");

    *l = fx_lease_job(&fx, id, NULL);
    fx_start_job(&fx, id, l);
    return id;
}

/* POST the job's succeeded result with result.calibration = calib (JSON);
 * the status, and the answer in *r. */
static long result_with(const char *id, const lease *l, const char *calib, kf_http_resp *r)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/result", id);
    char *body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{"
                             "\"latency_ns\":1000,\"calibration\":%s}}",
                             l->attempt, l->token, calib);
    long st = fx_req(&fx, "POST", path, fx.worker, body, r);
    free(path);
    free(body);
    return st;
}

#define SHA "\"kernel_sha256\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\""

Test(api_calib, a_bad_record_is_refused_naming_each_field_and_a_good_one_is_stored_for_its_owner)
{
    lease l;
    char *id = leased(fx.user, &l);
    kf_http_resp r;
    cJSON *doc, *g;
    const cJSON *it;
    const char *bad[][2] = {
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":1000,\"sim_ns\":-5}]", "result.calibration[0].sim_ns" },
        { "[{\"seq\":1,\"kernel_sha256\":\"XYZ\",\"device_latency_ns\":1000,\"sim_ns\":5}]",
          "result.calibration[0].kernel_sha256" },
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":1e300,\"sim_ns\":5}]", "result.calibration[0].device_latency_ns" },
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":0,\"sim_ns\":5}]", "result.calibration[0].device_latency_ns" },
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":10,\"sim_ns\":5,\"colour\":1}]", "result.calibration[0].colour" },
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":10,\"sim_ns\":5,\"engines\":{\"tensor\":{\"device_percent\":"
          "500,\"sim_percent\":1}}}]",
          "result.calibration[0].engines.tensor.device_percent" },
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":10,\"sim_ns\":5,\"engines\":{\"warp\":{}}}]",
          "result.calibration[0].engines.warp" },
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":10,\"sim_ns\":5,\"lines\":[{\"loc\":\"k\\u00e9.py:3\","
          "\"device_ns\":1,\"sim_ns\":2}]}]",
          "result.calibration[0].lines[0].loc" },
        { "[{\"seq\":1," SHA ",\"device_latency_ns\":10,\"sim_ns\":5,\"lines\":[{\"loc\":\"k.py:3\","
          "\"device_ns\":-1,\"sim_ns\":2}]}]",
          "result.calibration[0].lines[0].device_ns" },
        { "[{\"kernel_sha256\":\"00\",\"device_latency_ns\":10,\"sim_ns\":5}]", "result.calibration[0].seq" },
        { "{\"seq\":1}", "result.calibration" },
        { "[7]", "result.calibration[0]" },
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(result_with(id, &l, bad[i][0], &r), 422, "%s: %s", bad[i][0], r.body);
        cr_assert(strstr(r.body, bad[i][1]), "the 422 names %s: %s", bad[i][1], r.body);
        kf_http_resp_release(&r);
    }
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM calibration WHERE job_id = $1::uuid", id), 0);
    {
        char *st = fx_sql(&fx, "SELECT state FROM jobs WHERE id = $1::uuid", id);
        cr_assert_str_eq(st, "running", "a refused result changes nothing");
        free(st);
    }

    /* a good one: stored with the job's own op, shape, dtype and target */
    cr_assert_eq(result_with(id, &l,
                             "[{\"seq\":4," SHA ",\"params\":{\"TILE\":128},\"device_latency_ns\":1000,"
                             "\"device_profile_ns\":980,\"sim_ns\":1100,\"engines\":{\"vector\":{\"device_percent\":"
                             "50,\"sim_percent\":55}},\"lines\":[{\"loc\":\"kernel.py:9\",\"device_ns\":400,"
                             "\"sim_ns\":250}]}]",
                             &r),
                 200, "%s", r.body);
    kf_http_resp_release(&r);
    doc = fx_get_json(&fx, fx.user, 200, "/v1/calibration");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "groups")), 1);
    g = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "groups"), 0);
    cr_assert_str_eq(fx_str(g, "op"), "add", "a generate job's op");
    cr_assert_str_eq(fx_str(g, "target"), "trn2");
    cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(g, "count")), 1);
    cr_assert(fabs(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(g, "bias")) - 0.1) < 1e-12,
              "error = 1100 / 1000 - 1");
    cr_assert(fabs(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(g, "mean_abs_error")) - 0.1) < 1e-12);
    it = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "items"), 0);
    cr_assert_str_eq(fx_str(it, "job_id"), id);
    cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "seq")), 4);
    cr_assert_str_eq(fx_str(it, "dtype"), "bfloat16");
    cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "device_profile_ns")), 980);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(it, "shape")), 2, "the generate job's shapes");
    it = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "worst_lines"), 0);
    cr_assert_str_eq(fx_str(it, "loc"), "kernel.py:9");
    cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "diff_ns")), -150, "sim - device");
    cJSON_Delete(doc);

    /* another user sees none of it; an admin sees the fleet */
    doc = fx_get_json(&fx, fx.user2, 200, "/v1/calibration");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "groups")), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "items")), 0);
    cJSON_Delete(doc);
    doc = fx_get_json(&fx, fx.admin, 200, "/v1/calibration?op=add&target=trn2");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "items")), 1);
    cJSON_Delete(doc);
    cJSON_Delete(fx_get_json(&fx, fx.worker, 403, "/v1/calibration"));

    /* the same result again is a no-op: one row */
    cr_assert_eq(result_with(id, &l, "[{\"seq\":4," SHA ",\"device_latency_ns\":1000,\"sim_ns\":1100}]", &r), 200,
                 "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM calibration WHERE job_id = $1::uuid", id), 1);
    free(id);
}
