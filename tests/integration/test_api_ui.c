/* The dashboard's routes over HTTP, without a browser: /ui/ and its files
 * (types, CSP, ETag and 304, 404 for an unknown file, the redirects) and
 * GET /v1/workers (a worker registered in Redis, its current job shown
 * only to the job's owner and admins, dead letters only to admins). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_queue.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"

#define REDIS_DB 8

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, NULL);
}

static void teardown(void)
{
    fx_stop(&fx);
}

/* cppcheck-suppress unknownMacro */
TestSuite(api_ui, .init = setup, .fini = teardown, .timeout = 120);

static long get(const char *path, const char *const *headers, kf_http_resp *r)
{
    char *url = kf_asprintf("%s%s", fx.base, path);
    long st = kf_http_request("GET", url, NULL, headers, NULL, 0, r);

    free(url);
    return st;
}

static void expect_header(const kf_http_resp *r, const char *name, const char *has)
{
    char *v = kf_http_header(r, name);

    cr_assert(v && strstr(v, has), "%s: want it to hold '%s', got '%s'", name, has, v ? v : "(none)");
    free(v);
}

Test(api_ui, the_files_are_served_typed_with_a_strict_policy_and_revalidated)
{
    kf_http_resp r = { 0 };
    char *etag, *inm;

    cr_assert_eq(get("/ui/", NULL, &r), 200);
    expect_header(&r, "Content-Type", "text/html");
    expect_header(&r, "Content-Security-Policy", "default-src 'self'");
    expect_header(&r, "Content-Security-Policy", "script-src 'self'");
    expect_header(&r, "X-Content-Type-Options", "nosniff");
    expect_header(&r, "Cache-Control", "no-cache");
    cr_assert(strstr(r.body, "<script type=\"module\" src=\"app.js\">"), "index.html loads app.js");
    {
        char *csp = kf_http_header(&r, "Content-Security-Policy");
        cr_assert(!strstr(csp, "unsafe-inline") && !strstr(csp, "unsafe-eval"), "no inline script or eval: %s", csp);
        free(csp);
    }
    kf_http_resp_release(&r);

    cr_assert_eq(get("/ui/app.js", NULL, &r), 200);
    expect_header(&r, "Content-Type", "text/javascript");
    etag = kf_http_header(&r, "ETag");
    cr_assert(etag && strlen(etag) == 66 && etag[0] == '"', "a strong SHA-256 ETag: %s", etag ? etag : "none");
    kf_http_resp_release(&r);
    inm = kf_asprintf("If-None-Match: %s", etag);
    {
        const char *h[] = { inm, NULL };
        cr_assert_eq(get("/ui/app.js", h, &r), 304);
        cr_assert_eq(r.body_len, 0);
        kf_http_resp_release(&r);
    }
    {
        const char *h[] = { "If-None-Match: \"0000\"", NULL };
        cr_assert_eq(get("/ui/app.js", h, &r), 200, "another tag gets the bytes");
        kf_http_resp_release(&r);
    }
    cr_assert_eq(get("/ui/app.css", NULL, &r), 200);
    expect_header(&r, "Content-Type", "text/css");
    kf_http_resp_release(&r);

    cr_assert_eq(get("/ui/nope.js", NULL, &r), 404);
    expect_header(&r, "Content-Type", "application/problem+json");
    kf_http_resp_release(&r);
    cr_assert_eq(get("/ui/..%2Fapi.h", NULL, &r), 404);
    kf_http_resp_release(&r);

    cr_assert_eq(get("/ui", NULL, &r), 302);
    expect_header(&r, "Location", "/ui/");
    kf_http_resp_release(&r);
    cr_assert_eq(get("/", NULL, &r), 302);
    expect_header(&r, "Location", "/ui/");
    kf_http_resp_release(&r);
    free(inm);
    free(etag);
}

/* Register a worker in Redis as kforge-worker does (kf_queue_heartbeat). */
static void register_worker(const char *id, const char *job)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(fx.redis_url, &e);
    char *doc = kf_asprintf("{\"id\":\"%s\",\"host\":\"h1\",\"pid\":1,\"targets\":[\"trn2\"],\"backends\":[\"sim\"],"
                            "\"job\":%s%s%s,\"started_ms\":1,\"sandbox\":\"strict\"}",
                            id, job ? "\"" : "", job ? job : "null", job ? "\"" : "");

    cr_assert_not_null(q, "%s", e.msg);
    cr_assert_eq(kf_queue_heartbeat(q, id, doc, 60000, &(kf_queue_caps){ (const char *const[]){ "trn2" }, 1, (const char *const[]){ "sim" }, 1 }, &e), KF_OK, "%s", e.msg);
    kf_queue_free(q);
    free(doc);
}

static cJSON *workers(const char *token)
{
    kf_http_resp r = { 0 };
    cJSON *v;

    cr_assert_eq(fx_req(&fx, "GET", "/v1/workers", token, NULL, &r), 200, "%s", r.body);
    v = fx_json(&r);
    kf_http_resp_release(&r);
    return v;
}

static const cJSON *worker_named(const cJSON *doc, const char *id)
{
    const cJSON *w;

    cJSON_ArrayForEach(w, cJSON_GetObjectItem(doc, "workers"))
    {
        if (fx_str(w, "id") && strcmp(fx_str(w, "id"), id) == 0)
            return w;
    }
    return NULL;
}

Test(api_ui, workers_show_jobs_to_their_owners_and_dead_letters_to_admins)
{
    char *job = fx_submit(&fx, fx.user, NULL);
    cJSON *alice, *bob, *admin;
    const cJSON *w, *q;
    kf_http_resp r = { 0 };

    register_worker("w1", job);
    register_worker("w2", NULL);
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:diag:trn2", 1), 1, "the job is waiting for trn2");

    alice = workers(fx.user);
    w = worker_named(alice, "w1");
    cr_assert_not_null(w);
    cr_assert_str_eq(fx_str(w, "job"), job, "the owner sees its job on the worker");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(w, "busy")));
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(w, "targets"), 0)->valuestring, "trn2");
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(w, "backends"), 0)->valuestring, "sim");
    cr_assert_not_null(fx_str(w, "last_heartbeat"));
    w = worker_named(alice, "w2");
    cr_assert(w && cJSON_IsNull(cJSON_GetObjectItem(w, "job")) && cJSON_IsFalse(cJSON_GetObjectItem(w, "busy")));
    q = cJSON_GetArrayItem(cJSON_GetObjectItem(alice, "queues"), 0);
    cr_assert(q && strcmp(fx_str(q, "target"), "trn2") == 0, "a queue row for trn2");
    cr_assert_eq(cJSON_GetObjectItem(q, "waiting")->valueint, 1);
    cr_assert_null(cJSON_GetObjectItem(alice, "dead_letters"), "dead letters are not a user's");
    cr_assert_null(cJSON_GetObjectItem(alice, "dead"));

    bob = workers(fx.user2);
    w = worker_named(bob, "w1");
    cr_assert(w && cJSON_IsNull(cJSON_GetObjectItem(w, "job")), "another user's job id is not shown");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(w, "busy")), "only that the worker is busy");
    {
        char *text = cJSON_PrintUnformatted(bob);
        cr_assert_null(strstr(text, job), "bob's answer never names alice's job");
        free(text);
    }

    /* a dead letter, as kf_queue_fail leaves one: the id in kf:dead */
    cr_assert_eq(fx_redis_int(&fx, "ZADD kf:dead 1764676800000 %s", job), 1);
    admin = workers(fx.admin);
    cr_assert_str_eq(fx_str(worker_named(admin, "w1"), "job"), job);
    cr_assert_eq(cJSON_GetObjectItem(admin, "dead")->valueint, 1);
    {
        const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(admin, "dead_letters"), 0);
        cr_assert(d && strcmp(fx_str(d, "job_id"), job) == 0, "the dead letter names its job");
        cr_assert_str_eq(fx_str(d, "kind"), "diag", "with the job's row");
        cr_assert_str_eq(fx_str(d, "died_at"), "2025-12-02T12:00:00.000Z");
    }

    cr_assert_eq(fx_req(&fx, "GET", "/v1/workers", fx.worker, NULL, &r), 403, "a worker token may not list the fleet");
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/workers?x=1", fx.user, NULL, &r), 400);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/workers", NULL, NULL, &r), 401);
    kf_http_resp_release(&r);

    cJSON_Delete(alice);
    cJSON_Delete(bob);
    cJSON_Delete(admin);
    free(job);
}

/* GET /v1/whoami: what the dashboard asks to know whether to offer the
 * admin-only controls; each user or admin token learns its own name and
 * role, a worker token is refused (it has /v1/internal/whoami). */
Test(api_ui, whoami_names_the_calling_token_and_its_role)
{
    const char *toks[] = { fx.user, fx.user2, fx.admin };
    const char *names[] = { "alice", "bob", "admin" };
    const char *roles[] = { "user", "user", "admin" };
    kf_http_resp r = { 0 };

    for (int i = 0; i < 3; i++) {
        cJSON *me = fx_get_json(&fx, toks[i], 200, "/v1/whoami");

        cr_assert_str_eq(fx_str(me, "name"), names[i]);
        cr_assert_str_eq(fx_str(me, "role"), roles[i]);
        cr_assert_eq(cJSON_GetArraySize(me), 2, "name and role only");
        cJSON_Delete(me);
    }
    cr_assert_eq(fx_req(&fx, "GET", "/v1/whoami", fx.worker, NULL, &r), 403, "a worker token asks /v1/internal/whoami");
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/whoami?x=1", fx.user, NULL, &r), 400, "no query parameters");
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/whoami", NULL, NULL, &r), 401);
    kf_http_resp_release(&r);
}
