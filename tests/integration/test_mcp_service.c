/* `kforge mcp`'s service tools against a real kforge-api (Redis and
 * PostgreSQL from the harness): submit_job creates a job the API then
 * serves; job_status, job_iterations, compare_jobs and library_ops return
 * exactly the API's JSON as structuredContent; another user's job is a
 * tool error with the API's code (NOT_FOUND), a missing token UNAUTHORIZED,
 * an unreachable API UNAVAILABLE -- all isError results, never protocol
 * errors, and the server goes on answering. */
#include <cjson/cJSON.h>

#include "test_api_fixture.h"
#include "tests/lib/kf_test_mcp.h"

#define REDIS_DB 10

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, NULL);
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(mcp_service, .init = setup, .fini = teardown, .timeout = 120);

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* The API's JSON for GET path as token. */
static cJSON *api_get(const char *path, const char *token)
{
    kf_http_resp r;
    cJSON *v;

    cr_assert_eq(fx_req(&fx, "GET", path, token, NULL, &r), 200, "%s", r.body);
    v = fx_json(&r);
    kf_http_resp_release(&r);
    return v;
}

/* kforge mcp talking to this API as token (NULL: none). */
static void start(kf_mcp *m, const char *url, const char *token)
{
    char *u = kf_asprintf("KFORGE_API_URL=%s", url), *t = kf_asprintf("KFORGE_TOKEN=%s", token ? token : "");
    const char *const env[] = { u, t, NULL };

    kf_mcp_start(m, env, NULL);
    kf_mcp_handshake(m);
    free(u);
    free(t);
}

static const char *err_code(cJSON *res)
{
    const cJSON *c = get(kf_mcp_tool_error(res), "code");
    return cJSON_IsString(c) ? c->valuestring : "";
}

Test(mcp_service, tools_return_the_apis_json)
{
    kf_mcp m;
    cJSON *res, *want;
    const cJSON *sc;
    char *id_a = fx_submit(&fx, fx.user, NULL), *id_b, *args, *path;

    start(&m, fx.base, fx.user);
    /* submit_job: the API creates the job */
    res = kf_mcp_call_tool(&m, "submit_job", "{\"job\":{\"kind\":\"diag\",\"target\":\"trn2\"},"
                                             "\"idempotency_key\":\"mcp-test-1\"}", 30000);
    cr_assert(cJSON_IsFalse(get(res, "isError")), "%s", cJSON_PrintUnformatted(res));
    sc = get(res, "structuredContent");
    cr_assert(cJSON_IsString(get(sc, "id")));
    id_b = kf_strdup(get(sc, "id")->valuestring);
    cJSON_Delete(res);
    path = kf_asprintf("/v1/jobs/%s", id_b);
    want = api_get(path, fx.user);
    cr_assert_str_eq(fx_str(want, "kind"), "diag", "the job exists in the service");
    cJSON_Delete(want);
    free(path);
    /* the same idempotency key: the same job */
    res = kf_mcp_call_tool(&m, "submit_job", "{\"job\":{\"kind\":\"diag\",\"target\":\"trn2\"},"
                                             "\"idempotency_key\":\"mcp-test-1\"}", 30000);
    cr_assert_str_eq(get(get(res, "structuredContent"), "id")->valuestring, id_b);
    cJSON_Delete(res);

    /* job_status is GET /v1/jobs/ID */
    args = kf_asprintf("{\"id\":\"%s\"}", id_a);
    res = kf_mcp_call_tool(&m, "job_status", args, 30000);
    path = kf_asprintf("/v1/jobs/%s", id_a);
    want = api_get(path, fx.user);
    cr_assert(cJSON_Compare(get(res, "structuredContent"), want, true), "%s", cJSON_PrintUnformatted(res));
    cJSON_Delete(want);
    cJSON_Delete(res);
    free(path);
    /* job_iterations is GET /v1/jobs/ID/iterations with the limit */
    free(args);
    args = kf_asprintf("{\"id\":\"%s\",\"limit\":5}", id_a);
    res = kf_mcp_call_tool(&m, "job_iterations", args, 30000);
    path = kf_asprintf("/v1/jobs/%s/iterations?limit=5", id_a);
    want = api_get(path, fx.user);
    cr_assert(cJSON_IsFalse(get(res, "isError")), "%s", cJSON_PrintUnformatted(res));
    cr_assert(cJSON_Compare(get(res, "structuredContent"), want, true), "%s", cJSON_PrintUnformatted(res));
    cJSON_Delete(want);
    cJSON_Delete(res);
    free(path);
    free(args);
    /* compare_jobs is GET /v1/compare?jobs=A,B (its answer or its refusal, as the API's) */
    args = kf_asprintf("{\"jobs\":[\"%s\",\"%s\"]}", id_a, id_b);
    res = kf_mcp_call_tool(&m, "compare_jobs", args, 30000);
    path = kf_asprintf("/v1/compare?jobs=%s,%s", id_a, id_b);
    {
        kf_http_resp r;
        long st = fx_req(&fx, "GET", path, fx.user, NULL, &r);
        want = fx_json(&r);
        if (st == 200) {
            cr_assert(cJSON_Compare(get(res, "structuredContent"), want, true), "%s", cJSON_PrintUnformatted(res));
        } else {
            cr_assert(cJSON_IsTrue(get(res, "isError")), "status %ld: %s", st, cJSON_PrintUnformatted(res));
            cr_assert(strstr(get(kf_mcp_tool_error(res), "message")->valuestring,
                             fx_str(want, "detail")), "the API's detail: %s", cJSON_PrintUnformatted(res));
        }
        kf_http_resp_release(&r);
    }
    cJSON_Delete(want);
    cJSON_Delete(res);
    free(path);
    free(args);
    /* library_ops is GET /v1/library with its filters */
    res = kf_mcp_call_tool(&m, "library_ops", "{\"op\":\"softmax\",\"limit\":3}", 30000);
    want = api_get("/v1/library?op=softmax&limit=3", fx.user);
    cr_assert(cJSON_IsFalse(get(res, "isError")), "%s", cJSON_PrintUnformatted(res));
    cr_assert(cJSON_Compare(get(res, "structuredContent"), want, true), "%s", cJSON_PrintUnformatted(res));
    cJSON_Delete(want);
    cJSON_Delete(res);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
    free(id_a);
    free(id_b);
}

Test(mcp_service, api_refusals_are_tool_errors_with_the_apis_code)
{
    kf_mcp m;
    cJSON *res, *ping;
    char *id = fx_submit(&fx, fx.user, NULL), *args = kf_asprintf("{\"id\":\"%s\"}", id);
    char *dead = kf_asprintf("http://127.0.0.1:%d", kf_test_free_port());

    start(&m, fx.base, fx.user2);
    res = kf_mcp_call_tool(&m, "job_status", args, 30000);
    cr_assert(cJSON_IsTrue(get(res, "isError")), "another user's job");
    cr_assert_str_eq(err_code(res), "NOT_FOUND", "%s", cJSON_PrintUnformatted(res));
    cJSON_Delete(res);
    res = kf_mcp_call_tool(&m, "submit_job", "{\"job\":{\"kind\":\"nonsense\"}}", 30000);
    cr_assert(cJSON_IsTrue(get(res, "isError")));
    cr_assert_str_eq(err_code(res), "VALIDATION", "the API's problem type: %s", cJSON_PrintUnformatted(res));
    cr_assert(strstr(get(kf_mcp_tool_error(res), "message")->valuestring, "422") &&
              strstr(get(kf_mcp_tool_error(res), "message")->valuestring, "kind: must be one of"),
              "the status and the API's detail: %s", cJSON_PrintUnformatted(res));
    cJSON_Delete(res);
    ping = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}", 5000);
    cr_assert_not_null(get(ping, "result"), "still serving");
    cJSON_Delete(ping);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);

    start(&m, fx.base, NULL);
    res = kf_mcp_call_tool(&m, "job_status", args, 30000);
    cr_assert_str_eq(err_code(res), "UNAUTHORIZED", "%s", cJSON_PrintUnformatted(res));
    cJSON_Delete(res);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);

    start(&m, dead, fx.user);
    res = kf_mcp_call_tool(&m, "job_status", args, 30000);
    cr_assert(cJSON_IsTrue(get(res, "isError")));
    cr_assert_str_eq(err_code(res), "UNAVAILABLE", "%s", cJSON_PrintUnformatted(res));
    cr_assert(strstr(get(kf_mcp_tool_error(res), "message")->valuestring, "cannot reach"));
    cJSON_Delete(res);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
    free(dead);
    free(args);
    free(id);
}
