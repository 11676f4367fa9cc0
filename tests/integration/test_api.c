/* Integration tests of kforge-api against real PostgreSQL and Redis:
 * migrations, auth, validation, idempotency, pagination, cancel, the
 * worker endpoints' fencing, and the operational routes. */
#include <dirent.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <unistd.h>

#include "api/api.h"
#include "kf_job.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"

#define REDIS_DB 3

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, "KFORGE_MAX_BODY_BYTES=4096\nKFORGE_MAX_ITERATION_BYTES=2048\nKFORGE_MAX_ITERATIONS=3");
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(api, .init = setup, .fini = teardown, .timeout = 120);

Test(api, migrations_are_recorded_once_and_reapply_is_a_no_op)
{
    char *bin = kf_test_bin("kforge-api");
    char *argv[] = { bin, "migrate", NULL };
    DIR *d = opendir("migrations");
    struct dirent *de;
    long files = 0;

    cr_assert_not_null(d);
    while ((de = readdir(d)))
        files += strstr(de->d_name, ".sql") != NULL;
    closedir(d);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM schema_migrations", NULL), files);
    cr_assert_eq(fx_run(&fx, argv, NULL), 0);
    cr_assert_eq(fx_run(&fx, argv, NULL), 0);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM schema_migrations", NULL), files);
    cr_assert_eq(fx_sql_int(&fx, "SELECT min(version) FROM schema_migrations", NULL), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM information_schema.tables WHERE table_name IN "
                                 "('jobs','job_events','outbox','iterations','api_tokens','idempotency_keys')",
                            NULL),
                 6);
    /* Tokens are stored hashed, never in clear. */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM api_tokens WHERE position(convert_to($1, 'UTF8') in token_hash) > 0",
                            fx.user),
                 0);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM api_tokens WHERE token_hash = sha256(convert_to($1, 'UTF8'))",
                            fx.user),
                 1);
    free(bin);
}

Test(api, missing_or_bad_tokens_get_401_and_wrong_roles_403)
{
    kf_http_resp r;
    char *h;
    cJSON *j;

    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", NULL, NULL, &r), 401);
    h = kf_http_header(&r, "WWW-Authenticate");
    cr_assert(h && strncmp(h, "Bearer", 6) == 0, "WWW-Authenticate: %s", h ? h : "(none)");
    free(h);
    h = kf_http_header(&r, "Content-Type");
    cr_assert_str_eq(h, "application/problem+json");
    free(h);
    j = fx_json(&r);
    cr_assert_eq(cJSON_GetObjectItem(j, "status")->valueint, 401);
    cr_assert_str_eq(fx_str(j, "type"), "urn:kforge:problem:unauthorized");
    cr_assert_str_eq(fx_str(j, "instance"), "/v1/jobs");
    cJSON_Delete(j);
    kf_http_resp_release(&r);

    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", "kf_not_a_real_token", NULL, &r), 401);
    h = kf_http_header(&r, "WWW-Authenticate");
    cr_assert(h && strstr(h, "invalid_token"), "%s", h ? h : "(none)");
    free(h);
    kf_http_resp_release(&r);
    {
        const char *hdr[] = { "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", NULL };
        char *url = kf_asprintf("%s/v1/jobs", fx.base);
        cr_assert_eq(kf_http_request("GET", url, NULL, hdr, NULL, 0, &r), 401);
        kf_http_resp_release(&r);
        free(url);
    }
    /* A revoked token stops working. */
    PQclear(PQexec(fx.pg, "UPDATE api_tokens SET revoked_at = now() WHERE name = 'bob'"));
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", fx.user2, NULL, &r), 401);
    kf_http_resp_release(&r);

    /* Workers only use /v1/internal; users and admins never do. */
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", fx.worker, NULL, &r), 403);
    j = fx_json(&r);
    cr_assert_str_eq(fx_str(j, "type"), "urn:kforge:problem:forbidden");
    cJSON_Delete(j);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.worker, "{\"kind\":\"diag\",\"target\":\"trn2\"}", &r), 403);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.user, "{}", &r), 403);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.admin, "{}", &r), 403);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker, "{}", &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    /* Unknown paths and methods. */
    cr_assert_eq(fx_req(&fx, "GET", "/v2/nothing", fx.user, NULL, &r), 404);
    kf_http_resp_release(&r);
    /* Undecodable bytes in the path never reach the reply. */
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs/%ff%fe%0a", fx.user, NULL, &r), 404);
    cr_assert(kf_utf8_valid(r.body, r.body_len, NULL) && !strchr(r.body, '\n'), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/%c3%28", NULL, NULL, &r), 404);
    cr_assert(kf_utf8_valid(r.body, r.body_len, NULL), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "DELETE", "/v1/jobs", fx.user, NULL, &r), 405);
    h = kf_http_header(&r, "Allow");
    cr_assert(h && strstr(h, "POST") && strstr(h, "GET"), "Allow: %s", h ? h : "(none)");
    free(h);
    kf_http_resp_release(&r);
}

/* An HTTP-level bad request: status, and the field/rule it must name
 * (field NULL: only the status and problem type are checked). */
typedef struct http_case {
    const char *content_type;
    const char *body;
    size_t      len;       /* 0: strlen */
    long        status;
    const char *type;
    const char *field;
    const char *rule;
} http_case;

static const http_case http_cases[] = {
    { "application/json", "{\"kind\":\"diag\"}", 0, 422, "validation", "target", "required" },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"priority\":99}", 0, 422, "validation", "priority", "range" },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"spec\":{\"sleep_ms\":700000}}", 0, 422, "validation", "spec.sleep_ms", "range" },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"surprise\":1}", 0, 422, "validation", "surprise", "unknown" },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"max_attempts\":50}", 0, 422, "validation", "max_attempts", "range" },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"labels\":{\"a\":[]}}", 0, 422, "validation", "labels.a", "type" },
    { "application/json", "{\"kind\":\"optimize\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\"}", 0, 422, "validation", "reference", "required" },
    { "application/json", "{\"kind\":\"validate\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":[4],\"dtype\":\"float32\"}}}", 0, 422, "validation", "reference", "required" },
    { "application/json", "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float64\",\"shapes\":[[1]]}", 0, 422, "validation", "dtype", "enum" },
    { "application/json", "{\"kind\":", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "[1,2]", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"kind\":\"diag\"}", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"tr\xffn2\"}", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\"}\x00", 32, 400, "malformed-body", NULL, NULL },
    /* Accepted and cut by cJSON alone: a leading zero, a raw control character, \u0000. */
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"priority\":05}", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"priority\":-01}", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\",\"labels\":{\"a\":\"x\ny\"}}", 0, 400, "malformed-body", NULL, NULL },
    { "application/json", "{\"kind\":\"diag\",\"target\":\"trn2\\u0000evil\"}", 0, 400, "malformed-body", NULL, NULL },
    { "text/plain", "{\"kind\":\"diag\",\"target\":\"trn2\"}", 0, 415, "unsupported-media-type", NULL, NULL },
    { "application/json; charset=latin1", "{\"kind\":\"diag\",\"target\":\"trn2\"}", 0, 415, "unsupported-media-type", NULL, NULL },
    { NULL, "{\"kind\":\"diag\",\"target\":\"trn2\"}", 0, 415, "unsupported-media-type", NULL, NULL },
};

Test(api, every_bad_request_is_a_4xx_problem_naming_the_field)
{
    char *url = kf_asprintf("%s/v1/jobs", fx.base);
    char *auth = kf_asprintf("Authorization: Bearer %s", fx.user);

    for (size_t i = 0; i < sizeof(http_cases) / sizeof(http_cases[0]); i++) {
        const http_case *c = &http_cases[i];
        char ct[96];
        const char *hdr[3] = { auth, NULL, NULL };
        kf_http_resp r;
        cJSON *j, *errs, *e;
        bool found = c->field == NULL;
        char type[96];

        snprintf(ct, sizeof(ct), "Content-Type: %s", c->content_type ? c->content_type : "");
        if (c->content_type)
            hdr[1] = ct;
        else
            hdr[1] = "Content-Type:";
        cr_assert_eq(kf_http_request("POST", url, NULL, hdr, c->body, c->len ? c->len : strlen(c->body), &r),
                     c->status, "case %zu: %ld %s", i, r.status, r.body);
        j = fx_json(&r);
        snprintf(type, sizeof(type), "urn:kforge:problem:%s", c->type);
        cr_assert_str_eq(fx_str(j, "type"), type, "case %zu", i);
        cr_assert_eq(cJSON_GetObjectItem(j, "status")->valueint, (int)c->status);
        cr_assert_not_null(fx_str(j, "title"));
        cr_assert_not_null(fx_str(j, "detail"));
        errs = cJSON_GetObjectItem(j, "errors");
        cJSON_ArrayForEach(e, errs)
        {
            found = found || (strcmp(fx_str(e, "field"), c->field) == 0 && strcmp(fx_str(e, "rule"), c->rule) == 0);
        }
        cr_assert(found, "case %zu: %s/%s not in %s", i, c->field, c->rule, r.body);
        cJSON_Delete(j);
        kf_http_resp_release(&r);
    }
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 0, "a bad request left a job behind");
    free(url);
    free(auth);
}

Test(api, oversized_bodies_get_413)
{
    size_t n = 8000;
    char *big = kf_malloc(n + 1);
    char *url = kf_asprintf("%s/v1/jobs", fx.base);
    char *auth = kf_asprintf("Authorization: Bearer %s", fx.user);
    const char *hdr[] = { auth, "Content-Type: application/json", NULL };
    const char *chunked[] = { auth, "Content-Type: application/json", "Transfer-Encoding: chunked", NULL };
    kf_http_resp r;
    cJSON *j;

    memset(big, ' ', n);
    memcpy(big, "{\"kind\":\"diag\",\"target\":\"trn2\"}", 31);
    big[n] = '\0';
    cr_assert_eq(kf_http_request("POST", url, NULL, hdr, big, n, &r), 413, "%s", r.body);
    j = fx_json(&r);
    cr_assert_str_eq(fx_str(j, "type"), "urn:kforge:problem:body-too-large");
    cJSON_Delete(j);
    kf_http_resp_release(&r);
    /* Without Content-Length the limit is enforced while reading. */
    cr_assert_eq(kf_http_request("POST", url, NULL, chunked, big, n, &r), 413, "%s", r.body);
    kf_http_resp_release(&r);
    /* Under the limit, whitespace and all, it is fine. */
    cr_assert_eq(kf_http_request("POST", url, NULL, hdr, big, 4000, &r), 202, "%s", r.body);
    kf_http_resp_release(&r);
    free(big);
    free(url);
    free(auth);
}

Test(api, a_created_job_is_in_postgres_and_redis_with_its_events)
{
    kf_http_resp r;
    char *loc, *path, *id;
    cJSON *j, *evs;

    cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.user,
                        "{\"kind\":\"diag\",\"target\":\"trn2\",\"priority\":7,\"labels\":{\"team\":\"infra\"},"
                        "\"spec\":{\"sleep_ms\":100}}",
                        &r),
                 202, "%s", r.body);
    j = fx_json(&r);
    id = kf_strdup(fx_str(j, "id"));
    loc = kf_http_header(&r, "Location");
    path = kf_asprintf("/v1/jobs/%s", id);
    cr_assert_str_eq(loc, path);
    cr_assert_str_eq(fx_str(j, "state"), "queued");
    cr_assert_str_eq(fx_str(j, "backend"), "diag");
    cr_assert_eq(cJSON_GetObjectItem(j, "priority")->valueint, 7);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "spec"), "sleep_ms")->valueint, 100);
    kf_http_resp_release(&r);

    /* No worker runs in this fixture: the 202 warns that none ever
     * offered (trn2, diag), and GET says why the job waits.  Both are the
     * last member, outside the job's row. */
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "warnings"), 0), "code"),
                     "capability-never-offered", "%s", r.body);
    cJSON_DeleteItemFromObject(j, "warnings");

    /* The API builds the 202's document itself; it is the one GET reads
     * from the row: every key and value, in the same order. */
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200);
    {
        cJSON *g = fx_json(&r), *a, *b;
        cr_assert_str_eq(fx_str(cJSON_GetObjectItem(g, "waiting"), "reason"),
                         "no live worker offers backend 'diag' for target 'trn2' (none ever has)", "%s", r.body);
        cJSON_DeleteItemFromObject(g, "waiting");
        a = j->child;
        b = g->child;
        cr_assert(cJSON_Compare(j, g, true), "POST answered a document GET does not return:\n%s", r.body);
        for (; a && b; a = a->next, b = b->next)
            cr_assert_str_eq(a->string, b->string, "keys in another order");
        cr_assert(!a && !b);
        cr_assert_str_eq(fx_str(g, "id"), id);
        cr_assert_str_eq(fx_str(cJSON_GetObjectItem(g, "labels"), "team"), "infra");
        cJSON_Delete(g);
    }
    cJSON_Delete(j);
    kf_http_resp_release(&r);

    /* Delivered by the fast path: in Redis, and its outbox row is gone. */
    cr_assert_eq(fx_sql_int_soon(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1", id, 0), 0);
    cr_assert_eq(fx_redis_int(&fx, "EXISTS kf:job:%s", id), 1, "job not in Redis");
    cr_assert_eq(fx_redis_int(&fx, "ZCARD kf:wait:diag:%s", "trn2"), 1);

    free(path);
    path = kf_asprintf("/v1/jobs/%s/events", id);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200);
    j = fx_json(&r);
    evs = cJSON_GetObjectItem(j, "events");
    /* One transition so far (none → queued); reaching Redis is not a state change. */
    cr_assert_eq(cJSON_GetArraySize(evs), 1, "%s", r.body);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(evs, 0), "type"), "created");
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(evs, 0), "to_state"), "queued");
    cJSON_Delete(j);
    kf_http_resp_release(&r);

    /* Paging through events with after= and limit=: a cancel adds the second event. */
    {
        char *p2 = kf_asprintf("/v1/jobs/%s/cancel", id);
        long first_id;
        cr_assert_eq(fx_req(&fx, "POST", p2, fx.user, NULL, &r), 200, "%s", r.body);
        kf_http_resp_release(&r);
        free(p2);
        p2 = kf_asprintf("%s?limit=1", path);
        cr_assert_eq(fx_req(&fx, "GET", p2, fx.user, NULL, &r), 200);
        j = fx_json(&r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "events")), 1, "%s", r.body);
        cJSON_Delete(j);
        kf_http_resp_release(&r);
        free(p2);
        cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200);
        j = fx_json(&r);
        first_id = (long)cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "events"), 0), "id")->valuedouble;
        cJSON_Delete(j);
        kf_http_resp_release(&r);
        p2 = kf_asprintf("%s?after=%ld&limit=5", path, first_id);
        cr_assert_eq(fx_req(&fx, "GET", p2, fx.user, NULL, &r), 200);
        j = fx_json(&r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "events")), 1, "%s", r.body);
        cJSON_Delete(j);
        kf_http_resp_release(&r);
        free(p2);
        p2 = kf_asprintf("%s?limit=0", path);
        cr_assert_eq(fx_req(&fx, "GET", p2, fx.user, NULL, &r), 400);
        kf_http_resp_release(&r);
        free(p2);
        p2 = kf_asprintf("%s?after=-1", path);
        cr_assert_eq(fx_req(&fx, "GET", p2, fx.user, NULL, &r), 400);
        kf_http_resp_release(&r);
        free(p2);
    }

    /* Other users see nothing; admins see everything. */
    free(path);
    path = kf_asprintf("/v1/jobs/%s", id);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user2, NULL, &r), 404);
    kf_http_resp_release(&r);
    free(path);
    path = kf_asprintf("/v1/jobs/%s/events", id);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user2, NULL, &r), 404);
    kf_http_resp_release(&r);
    free(path);
    path = kf_asprintf("/v1/jobs/%s/cancel", id);
    cr_assert_eq(fx_req(&fx, "POST", path, fx.user2, NULL, &r), 404);
    kf_http_resp_release(&r);
    free(path);
    path = kf_asprintf("/v1/jobs/%s", id);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.admin, NULL, &r), 200);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", fx.user2, NULL, &r), 200);
    cr_assert(strstr(r.body, id) == NULL);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs/not-a-uuid", fx.user, NULL, &r), 404);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs/00000000-0000-0000-0000-000000000000", fx.user, NULL, &r), 404);
    kf_http_resp_release(&r);
    free(path);
    free(loc);
    free(id);
}

/* ---- idempotency ---------------------------------------------------------- */

static long idem_post(const char *key, const char *body, kf_http_resp *r)
{
    char *url = kf_asprintf("%s/v1/jobs", fx.base);
    char *auth = kf_asprintf("Authorization: Bearer %s", fx.user);
    char *ik = kf_asprintf("Idempotency-Key: \"%s\"", key);
    const char *hdr[] = { auth, "Content-Type: application/json", ik, NULL };
    long st = kf_http_request("POST", url, NULL, hdr, body, strlen(body), r);
    free(url);
    free(auth);
    free(ik);
    return st;
}

Test(api, idempotency_key_replays_refuses_other_bodies_and_in_flight_keys)
{
    const char *body = "{\"kind\":\"diag\",\"target\":\"trn2\"}";
    kf_http_resp a, b;
    char *la, *lb, *rep, *replayed;

    cr_assert_eq(idem_post("k-1", body, &a), 202, "%s", a.body);
    cr_assert_eq(idem_post("k-1", body, &b), 202, "%s", b.body);
    cr_assert_str_eq(a.body, b.body);
    la = kf_http_header(&a, "Location");
    lb = kf_http_header(&b, "Location");
    cr_assert_str_eq(la, lb);
    rep = kf_http_header(&b, "Idempotent-Replayed");
    cr_assert_not_null(rep);
    replayed = kf_strdup(b.body);
    free(la);
    free(lb);
    free(rep);
    kf_http_resp_release(&a);
    kf_http_resp_release(&b);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE idempotency_key = 'k-1'", NULL), 1);
    /* The stored answer is the job as GET reads it, key included, plus the
     * create's warnings (no worker in this fixture), where GET has the
     * waiting reason instead. */
    {
        cJSON *s1 = cJSON_Parse(replayed), *g;
        char *path = kf_asprintf("/v1/jobs/%s", fx_str(s1, "id"));
        cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &a), 200);
        g = fx_json(&a);
        cr_assert_str_eq(fx_str(g, "idempotency_key"), "k-1");
        cr_assert_not_null(cJSON_GetObjectItem(s1, "warnings"), "the replay keeps the answer's warnings");
        cr_assert_not_null(cJSON_GetObjectItem(g, "waiting"));
        cJSON_DeleteItemFromObject(s1, "warnings");
        cJSON_DeleteItemFromObject(g, "waiting");
        cr_assert(cJSON_Compare(s1, g, true), "replayed %s\nGET %s", replayed, a.body);
        cJSON_Delete(s1);
        cJSON_Delete(g);
        kf_http_resp_release(&a);
        free(path);
        free(replayed);
    }

    /* Same key, different body. */
    cr_assert_eq(idem_post("k-1", "{\"kind\":\"diag\",\"target\":\"trn1\"}", &a), 422, "%s", a.body);
    cr_assert(strstr(a.body, "idempotency-key-mismatch"), "%s", a.body);
    kf_http_resp_release(&a);

    /* The key is per token: another user may use it. */
    {
        char *url = kf_asprintf("%s/v1/jobs", fx.base);
        char *auth = kf_asprintf("Authorization: Bearer %s", fx.user2);
        const char *hdr[] = { auth, "Content-Type: application/json", "Idempotency-Key: \"k-1\"", NULL };
        cr_assert_eq(kf_http_request("POST", url, NULL, hdr, body, strlen(body), &a), 202);
        cr_assert(strstr(a.body, "\"replayed\"") == NULL);
        kf_http_resp_release(&a);
        free(url);
        free(auth);
    }
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 2);

    /* A request still in flight with that key: 409.  Make one by hand with
     * the fingerprint the API computes (SHA-256 of method, path, body). */
    {
        unsigned char fp[32];
        unsigned int n = 32;
        char hex[70], *sql;
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(md, EVP_sha256(), NULL);
        EVP_DigestUpdate(md, "POST\n/v1/jobs\n", 14);
        EVP_DigestUpdate(md, body, strlen(body));
        EVP_DigestFinal_ex(md, fp, &n);
        EVP_MD_CTX_free(md);
        for (size_t i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", fp[i]);
        sql = kf_asprintf("INSERT INTO idempotency_keys (owner_token_id, key, fingerprint) SELECT id, 'k-busy', "
                          "'\\x%s'::bytea FROM api_tokens WHERE name = 'alice'",
                          hex);
        PQclear(PQexec(fx.pg, sql));
        free(sql);
    }
    cr_assert_eq(idem_post("k-busy", body, &a), 409, "%s", a.body);
    cr_assert(strstr(a.body, "idempotency-key-in-use"), "%s", a.body);
    la = kf_http_header(&a, "Retry-After");
    cr_assert_not_null(la);
    free(la);
    kf_http_resp_release(&a);
    /* An abandoned in-flight key (its request died) is taken over after a minute. */
    PQclear(PQexec(fx.pg, "UPDATE idempotency_keys SET created_at = now() - interval '2 minutes' WHERE key = 'k-busy'"));
    cr_assert_eq(idem_post("k-busy", body, &a), 202, "%s", a.body);
    kf_http_resp_release(&a);
    /* Expired keys (KFORGE_IDEMPOTENCY_TTL_S) start afresh. */
    PQclear(PQexec(fx.pg, "UPDATE idempotency_keys SET created_at = now() - interval '2 days' WHERE key = 'k-1'"));
    cr_assert_eq(idem_post("k-1", "{\"kind\":\"diag\",\"target\":\"trn1\"}", &a), 202, "%s", a.body);
    kf_http_resp_release(&a);
    /* Malformed keys. */
    {
        char *url = kf_asprintf("%s/v1/jobs", fx.base);
        char *auth = kf_asprintf("Authorization: Bearer %s", fx.user);
        const char *hdr[] = { auth, "Content-Type: application/json", "Idempotency-Key: \"unterminated", NULL };
        const char *bare[] = { auth, "Content-Type: application/json", "Idempotency-Key: k-1", NULL };
        cr_assert_eq(kf_http_request("POST", url, NULL, hdr, body, strlen(body), &a), 400);
        cr_assert(strstr(a.body, "idempotency-key-invalid"), "%s", a.body);
        kf_http_resp_release(&a);
        /* Without quotes the key is refused, not taken as "k-1" (README). */
        cr_assert_eq(kf_http_request("POST", url, NULL, bare, body, strlen(body), &a), 400, "%s", a.body);
        cr_assert(strstr(a.body, "idempotency-key-invalid") && strstr(a.body, "quoted"), "%s", a.body);
        kf_http_resp_release(&a);
        free(url);
        free(auth);
    }
    /* Replayed validation errors are stored too. */
    cr_assert_eq(idem_post("k-bad", "{\"kind\":\"diag\"}", &a), 422);
    cr_assert_eq(idem_post("k-bad", "{\"kind\":\"diag\"}", &b), 422);
    cr_assert_str_eq(a.body, b.body);
    kf_http_resp_release(&a);
    kf_http_resp_release(&b);
}

typedef struct race_arg {
    long status;
    char body[2048];
} race_arg;

static void *race_post(void *p)
{
    race_arg *a = p;
    kf_http_resp r;
    a->status = idem_post("race", "{\"kind\":\"diag\",\"target\":\"trn3\"}", &r);
    snprintf(a->body, sizeof(a->body), "%s", r.body ? r.body : "");
    kf_http_resp_release(&r);
    return NULL;
}

Test(api, concurrent_requests_with_one_key_make_one_job)
{
    enum { N = 12 };
    pthread_t t[N];
    race_arg a[N];
    int created = 0, conflicts = 0;
    char *first = NULL;

    memset(a, 0, sizeof(a));
    for (int i = 0; i < N; i++)
        pthread_create(&t[i], NULL, race_post, &a[i]);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        if (a[i].status == 202) {
            cJSON *j = cJSON_Parse(a[i].body);
            const char *id = fx_str(j, "id");
            if (!first)
                first = kf_strdup(id);
            cr_assert_str_eq(id, first, "two different jobs for one key");
            cJSON_Delete(j);
            created++;
        } else {
            cr_assert_eq(a[i].status, 409, "%ld %s", a[i].status, a[i].body);
            conflicts++;
        }
    }
    cr_assert_geq(created, 1);
    cr_assert_eq(created + conflicts, N);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 1);
    free(first);
}

/* ---- pagination ----------------------------------------------------------- */

Test(api, pages_cover_every_job_once_newest_first)
{
    enum { N = 23 };
    char *ids[N];
    char *seen[N + 5];
    int nseen = 0;
    char *cursor = NULL;
    int pages = 0;
    kf_http_resp r;

    for (int i = 0; i < N; i++)
        ids[i] = fx_submit(&fx, fx.user, i % 2 ? "{\"kind\":\"diag\",\"target\":\"trn1\"}" : NULL);
    /* Another user's jobs never show up in alice's pages. */
    free(fx_submit(&fx, fx.user2, NULL));
    do {
        char *path = cursor ? kf_asprintf("/v1/jobs?limit=5&cursor=%s", cursor) : kf_strdup("/v1/jobs?limit=5");
        cJSON *j, *jobs, *job, *nc;

        cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200, "%s", r.body);
        j = fx_json(&r);
        jobs = cJSON_GetObjectItem(j, "jobs");
        cr_assert_leq(cJSON_GetArraySize(jobs), 5);
        cJSON_ArrayForEach(job, jobs)
        {
            const char *id = fx_str(job, "id");
            for (int k = 0; k < nseen; k++)
                cr_assert_str_neq(seen[k], id, "job %s twice", id);
            cr_assert_lt(nseen, N, "more jobs than alice has");
            seen[nseen++] = kf_strdup(id);
        }
        free(cursor);
        nc = cJSON_GetObjectItem(j, "next_cursor");
        cursor = cJSON_IsString(nc) ? kf_strdup(nc->valuestring) : NULL;
        cJSON_Delete(j);
        kf_http_resp_release(&r);
        free(path);
        pages++;
    } while (cursor && pages < 20);
    cr_assert_eq(nseen, N);
    cr_assert_eq(pages, 5);
    /* Newest first: the last created is first. */
    cr_assert_str_eq(seen[0], ids[N - 1]);
    cr_assert_str_eq(seen[N - 1], ids[0]);

    /* Filters. */
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs?target=trn1&state=queued&kind=diag&limit=200", fx.user, NULL, &r), 200);
    {
        cJSON *j = fx_json(&r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "jobs")), N / 2);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "next_cursor")));
        cJSON_Delete(j);
    }
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs?limit=200", fx.admin, NULL, &r), 200);
    {
        cJSON *j = fx_json(&r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "jobs")), N + 1);
        cJSON_Delete(j);
    }
    kf_http_resp_release(&r);

    /* Bad parameters name themselves. */
    {
        static const char *const bad[][2] = {
            { "/v1/jobs?limit=0", "limit" },        { "/v1/jobs?limit=201", "limit" },
            { "/v1/jobs?limit=abc", "limit" },      { "/v1/jobs?state=done", "state" },
            { "/v1/jobs?kind=auto", "kind" },       { "/v1/jobs?target=gpu", "target" },
            { "/v1/jobs?cursor=zzzz", "cursor" },   { "/v1/jobs?cursor=MTIzLG5vdC1hLXV1aWQ", "cursor" },
            { "/v1/jobs?sort=asc", "sort" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            cr_assert_eq(fx_req(&fx, "GET", bad[i][0], fx.user, NULL, &r), 400, "%s: %s", bad[i][0], r.body);
            cr_assert(strstr(r.body, bad[i][1]), "%s: %s", bad[i][0], r.body);
            kf_http_resp_release(&r);
        }
    }
    for (int i = 0; i < N; i++) {
        free(ids[i]);
        free(seen[i]);
    }
}

/* ---- cancel and the worker endpoints ----------------------------------------- */

static long report_as(const char *tok, const char *what, const char *id, const char *body, kf_http_resp *r)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/%s", id, what);
    long st = fx_req(&fx, "POST", path, tok, body, r);
    free(path);
    return st;
}

static long report(const char *what, const char *id, const char *body, kf_http_resp *r)
{
    return report_as(fx.worker, what, id, body, r);
}

static long report_s(const char *what, const char *id, const char *body)
{
    kf_http_resp r;
    long st = report(what, id, body, &r);
    kf_http_resp_release(&r);
    return st;
}

/* The same with a printf-made body and the answer's problem type checked
 * (type NULL: not checked). */
static long report_f(const char *tok, const char *what, const char *id, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static long report_f(const char *tok, const char *what, const char *id, const char *type, const char *fmt, ...)
{
    va_list ap;
    char *body;
    kf_http_resp r;
    long st;

    va_start(ap, fmt);
    cr_assert(vasprintf(&body, fmt, ap) >= 0);
    va_end(ap);
    st = report_as(tok, what, id, body, &r);
    if (type) {
        char *want = kf_asprintf("urn:kforge:problem:%s", type);
        cr_assert(strstr(r.body, want), "%s %s: %ld %s", what, body, st, r.body);
        free(want);
    }
    kf_http_resp_release(&r);
    free(body);
    return st;
}

static char *job_state(const char *id)
{
    return fx_sql(&fx, "SELECT state FROM jobs WHERE id = $1", id);
}

static long cancel(const char *id, kf_http_resp *r)
{
    char *path = kf_asprintf("/v1/jobs/%s/cancel", id);
    long st = fx_req(&fx, "POST", path, fx.user, NULL, r);
    free(path);
    return st;
}

/* A lease of job `id` granted by the real queue to `worker` (the job must
 * be the only one waiting for trn2, or a due retry). */
typedef fx_lease test_lease;

static test_lease lease_as(const char *id, const char *worker)
{
    return fx_lease_job_as(&fx, id, "trn2", worker);
}

/* Settle a lease in Redis as the worker would: fail (retry at once). */
static void lease_fail(const char *id, const test_lease *tl)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(fx.redis_url, &e);
    kf_queue_fate fate = 0;

    cr_assert_eq(kf_queue_fail(q, id, tl->token, "x", true, 1, 1, &fate, NULL, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(fate, KF_FATE_RETRYING);
    kf_queue_free(q);
}

static char *submit_leased(const char *worker, test_lease *tl)
{
    char *id = fx_submit(&fx, fx.user, NULL);
    *tl = lease_as(id, worker);
    return id;
}

Test(api, cancel_in_each_state)
{
    kf_http_resp r;
    char *st;
    test_lease lr, lt, ld;
    char *q = fx_submit(&fx, fx.user, NULL);

    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD kf:wait:diag:%s", "trn2", 1), 1);
    /* queued → cancelled at once, and gone from Redis. */
    cr_assert_eq(cancel(q, &r), 200, "%s", r.body);
    cr_assert(strstr(r.body, "\"cancelled\""), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_redis_int(&fx, "EXISTS kf:job:%s", q), 0);
    cr_assert_eq(fx_redis_int(&fx, "ZCARD kf:wait:diag:%s", "trn2"), 0);
    /* The cancel reached Redis at once: nothing left pending for the relay. */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1", q), 0);
    cr_assert_eq(cancel(q, &r), 409, "%s", r.body);
    kf_http_resp_release(&r);
    /* A late start for a cancelled job is refused. */
    cr_assert_eq(report_s("start", q, "{\"attempt\":1,\"lease_token\":\"t\",\"worker\":\"w1\"}"), 409);

    /* running → cancel_requested, then the worker's failure makes it cancelled. */
    char *run = submit_leased("w1", &lr);
    cr_assert_eq(report_f(fx.worker, "start", run, NULL, "{\"attempt\":1,\"lease_token\":\"%s\",\"worker\":\"w1\"}",
                          lr.token), 200);
    cr_assert_eq(cancel(run, &r), 202, "%s", r.body);
    cr_assert(strstr(r.body, "\"cancel_requested\" : true"), "%s", r.body);
    kf_http_resp_release(&r);
    st = job_state(run);
    cr_assert_str_eq(st, "running");
    free(st);
    cr_assert_eq(cancel(run, &r), 202, "a second cancel is accepted too: %s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(report_f(fx.worker, "result", run, NULL,
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"failed\",\"error\":\"cancelled\","
                          "\"retry\":true}", lr.token), 200);
    st = job_state(run);
    cr_assert_str_eq(st, "cancelled");
    free(st);

    /* retrying → cancelled at once. */
    char *retry = submit_leased("w1", &lt);
    cr_assert_eq(report_f(fx.worker, "start", retry, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", lt.token), 200);
    cr_assert_eq(report_f(fx.worker, "result", retry, NULL,
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"failed\",\"error\":\"x\",\"retry\":true}",
                          lt.token), 200);
    st = job_state(retry);
    cr_assert_str_eq(st, "retrying");
    free(st);
    {
        char *path = kf_asprintf("/v1/jobs/%s/cancel", retry);
        cr_assert_eq(fx_req(&fx, "POST", path, fx.user, "{\"reason\":\"no longer needed\"}", &r), 200, "%s", r.body);
        kf_http_resp_release(&r);
        cr_assert_eq(fx_req(&fx, "POST", path, fx.user, "{\"why\":1}", &r), 422, "%s", r.body);
        kf_http_resp_release(&r);
        free(path);
    }
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'cancelled' "
                                 "AND detail->>'reason' = 'no longer needed'", retry), 1);

    /* finished → 409. */
    char *done = submit_leased("w1", &ld);
    cr_assert_eq(report_f(fx.worker, "start", done, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", ld.token), 200);
    cr_assert_eq(report_f(fx.worker, "result", done, NULL,
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{\"ok\":true}}",
                          ld.token), 200);
    cr_assert_eq(cancel(done, &r), 409, "%s", r.body);
    cr_assert(strstr(r.body, "job-finished"), "%s", r.body);
    kf_http_resp_release(&r);
    free(q);
    free(run);
    free(retry);
    free(done);
}

Test(api, worker_reports_are_fenced_by_attempt_and_idempotent)
{
    kf_http_resp r;
    test_lease a, b;
    char *id = submit_leased("w1", &a);
    char *st, *it1;

    it1 = kf_asprintf("{\"attempt\":1,\"lease_token\":\"%s\",\"seq\":0,\"latency_ns\":5000,\"correct\":true,"
                      "\"params\":{\"TILE\":256},\"findings\":[],\"action\":\"tune\",\"reason\":\"first\"}", a.token);
    {
        char *body = kf_asprintf("{\"attempt\":1,\"lease_token\":\"%s\",\"worker\":\"w1\"}", a.token);
        cr_assert_eq(report("start", id, body, &r), 200, "%s", r.body);
        cr_assert(strstr(r.body, "\"changed\":true"), "%s", r.body);
        kf_http_resp_release(&r);
        cr_assert_eq(report("start", id, body, &r), 200);
        cr_assert(strstr(r.body, "\"changed\":false"), "%s", r.body);
        kf_http_resp_release(&r);
        free(body);
    }
    cr_assert_eq(report_s("iterations", id, it1), 200);
    cr_assert_eq(report_s("iterations", id, it1), 200);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM iterations WHERE job_id = $1", id), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT best_iteration FROM jobs WHERE id = $1", id), 0);
    /* The lease is recorded as a hash, never in clear. */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE id = $1 AND lease_token_hash = "
                                 "sha256(convert_to(worker_id || '', 'UTF8'))", id), 0);

    /* The attempt fails; attempt 2 is leased by w2. */
    lease_fail(id, &a);
    b = lease_as(id, "w2");
    cr_assert_eq(b.attempt, 2);
    cr_assert_eq(report_f(fx.worker2, "start", id, NULL, "{\"attempt\":2,\"lease_token\":\"%s\",\"worker\":\"w2\"}",
                          b.token), 200);
    cr_assert_eq(fx_sql_int(&fx, "SELECT attempt FROM jobs WHERE id = $1", id), 2);
    /* Everything from attempt 1 is now refused and changes nothing. */
    cr_assert_eq(report_f(fx.worker, "iterations", id, "stale-attempt",
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"seq\":1}", a.token), 409);
    cr_assert_eq(report_f(fx.worker, "start", id, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", a.token), 409);
    cr_assert_eq(report_f(fx.worker, "result", id, NULL, "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"succeeded\"}",
                          a.token), 409);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM iterations WHERE job_id = $1", id), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_results WHERE job_id = $1", id), 0);
    st = fx_sql(&fx, "SELECT worker_id FROM jobs WHERE id = $1", id);
    cr_assert_str_eq(st, "w2");
    free(st);

    /* A faster correct iteration of attempt 2 becomes the best. */
    cr_assert_eq(report_f(fx.worker2, "iterations", id, NULL,
                          "{\"attempt\":2,\"lease_token\":\"%s\",\"seq\":3,\"latency_ns\":4000,\"correct\":true}",
                          b.token), 200);
    cr_assert_eq(report_f(fx.worker2, "iterations", id, NULL,
                          "{\"attempt\":2,\"lease_token\":\"%s\",\"seq\":4,\"latency_ns\":100,\"correct\":false}",
                          b.token), 200);
    cr_assert_eq(fx_sql_int(&fx, "SELECT best_iteration FROM jobs WHERE id = $1", id), 3);

    /* The result lands once; a repeat is a 200 no-op; anything else is 409. */
    cr_assert_eq(report_f(fx.worker2, "result", id, NULL,
                          "{\"attempt\":2,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{\"latency_ns\":4000},"
                          "\"worker\":\"w2\"}", b.token), 200);
    {
        char *body = kf_asprintf("{\"attempt\":2,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":"
                                 "{\"latency_ns\":4000}}", b.token);
        cr_assert_eq(report_as(fx.worker2, "result", id, body, &r), 200);
        cr_assert(strstr(r.body, "\"changed\":false"), "%s", r.body);
        kf_http_resp_release(&r);
        free(body);
    }
    cr_assert_eq(report_f(fx.worker2, "result", id, NULL,
                          "{\"attempt\":2,\"lease_token\":\"%s\",\"state\":\"failed\",\"retry\":false}", b.token), 409);
    cr_assert_eq(report_f(fx.worker2, "result", id, NULL,
                          "{\"attempt\":3,\"lease_token\":\"%s\",\"state\":\"succeeded\"}", b.token), 409);
    cr_assert_eq(report_f(fx.worker2, "start", id, NULL, "{\"attempt\":3,\"lease_token\":\"%s\"}", b.token), 409);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_results WHERE job_id = $1", id), 1);
    st = fx_sql(&fx, "SELECT worker_id FROM job_results WHERE job_id = $1", id);
    cr_assert_str_eq(st, "w2");
    free(st);
    st = job_state(id);
    cr_assert_str_eq(st, "succeeded");
    free(st);
    st = fx_sql(&fx, "SELECT result->>'latency_ns' FROM jobs WHERE id = $1", id);
    cr_assert_str_eq(st, "4000");
    free(st);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'succeeded'", id), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'started'", id), 2);

    /* A failure without retry is final too. */
    {
        test_lease fl;
        char *f = submit_leased("w1", &fl);
        cr_assert_eq(report_f(fx.worker, "start", f, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", fl.token), 200);
        cr_assert_eq(report_f(fx.worker, "result", f, NULL,
                              "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"failed\",\"error\":\"boom\","
                              "\"retry\":false}", fl.token), 200);
        st = fx_sql(&fx, "SELECT state || ':' || last_error FROM jobs WHERE id = $1", f);
        cr_assert_str_eq(st, "failed:boom");
        free(st);
        cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_results WHERE job_id = $1 AND state = 'failed'", f), 1);
        free(f);
    }
    /* A retry that a worker leases before the scheduler's promoter marks it
     * queued still gets its requeued event, once. */
    {
        test_lease l1, l2;
        char *rt = submit_leased("w1", &l1);
        cr_assert_eq(report_f(fx.worker, "start", rt, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", l1.token), 200);
        cr_assert_eq(report_f(fx.worker, "result", rt, NULL,
                              "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"failed\",\"error\":\"x\","
                              "\"retry\":true}", l1.token), 200);
        lease_fail(rt, &l1);
        l2 = lease_as(rt, "w1");
        cr_assert_eq(report_f(fx.worker, "start", rt, NULL, "{\"attempt\":2,\"lease_token\":\"%s\"}", l2.token), 200);
        cr_assert_eq(report_f(fx.worker, "start", rt, NULL, "{\"attempt\":2,\"lease_token\":\"%s\"}", l2.token), 200);
        cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'requeued'", rt), 1);
        st = fx_sql(&fx, "SELECT string_agg(type || ':' || coalesce(from_state, '') || '>' || to_state, ',' ORDER BY id) "
                         "FROM job_events WHERE job_id = $1", rt);
        cr_assert_str_eq(st, "created:>queued,started:queued>running,retrying:running>retrying,"
                             "requeued:retrying>queued,started:queued>running");
        free(st);
        free(rt);
    }
    /* Bad reports. */
    cr_assert_eq(report_s("start", id, "{\"lease_token\":\"a\",\"worker\":\"w1\"}"), 422);
    cr_assert_eq(report_s("result", id, "{\"attempt\":2,\"lease_token\":\"b\",\"state\":\"maybe\"}"), 422);
    cr_assert_eq(report_s("start", "00000000-0000-0000-0000-000000000000", "{\"attempt\":1,\"lease_token\":\"a\"}"), 404);
    cr_assert_eq(report_s("start", "nope", "{\"attempt\":1,\"lease_token\":\"a\",\"worker\":\"w1\"}"), 404);
    free(it1);
    free(id);
}

/* Everything PostgreSQL and Redis hold about a job, to check a refused
 * report changed nothing. */
static char *job_snapshot(const char *id)
{
    redisContext *c = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
    redisReply *rr;
    char *pg, *out;
    kf_buf b = KF_BUF_INIT;

    pg = fx_sql(&fx, "SELECT row_to_json(x)::text FROM (SELECT j.state, j.attempt, j.worker_id, j.lease_token_hash, "
                     "j.result, j.last_error, j.best_iteration, j.updated_at, (SELECT count(*) FROM iterations i "
                     "WHERE i.job_id = j.id) AS its, (SELECT count(*) FROM job_results r WHERE r.job_id = j.id) AS res, "
                     "(SELECT count(*) FROM job_events e WHERE e.job_id = j.id) AS evs, (SELECT count(*) FROM workers) "
                     "AS ws FROM jobs j WHERE j.id = $1::uuid) x", id);
    cr_assert(c && !c->err);
    freeReplyObject(redisCommand(c, "SELECT %d", fx.redis_db));
    rr = redisCommand(c, "HMGET kf:job:%s state attempt lease_token worker granted_token granted_worker "
                         "lease_expires_ms cancel last_error released due_ms", id);
    kf_buf_addf(&b, "%s |", pg ? pg : "(none)");
    for (size_t i = 0; rr && i < rr->elements; i++)
        kf_buf_addf(&b, " %s", rr->element[i]->str ? rr->element[i]->str : "-");
    freeReplyObject(rr);
    rr = redisCommand(c, "ZSCORE kf:active %s", id);
    kf_buf_addf(&b, " | active %s", rr && rr->str ? rr->str : "-");
    freeReplyObject(rr);
    redisFree(c);
    free(pg);
    out = kf_buf_detach(&b);
    return out;
}

/* Issue 13: reports that do not match the lease the queue granted are
 * refused (409 stale, 403 not yours) and change nothing, for each endpoint. */
Test(api, forged_reports_are_refused_and_change_nothing)
{
    static const char *const whats[] = { "start", "iterations", "result" };
    /* body tails per endpoint, after attempt and lease_token */
    static const char *const tails[] = { "", ",\"seq\":7,\"latency_ns\":1,\"correct\":true",
                                         ",\"state\":\"succeeded\",\"result\":{\"stolen\":true}" };
    test_lease own, held;
    char *queued = fx_submit(&fx, fx.user, NULL);
    char *before, *after;

    cr_assert_eq(fx_redis_int_soon(&fx, "EXISTS kf:job:%s", queued, 1), 1);
    for (int k = 0; k < 3; k++) {
        before = job_snapshot(queued);
        /* A queued job no worker leased. */
        cr_assert_eq(report_f(fx.worker, whats[k], queued, "stale-attempt",
                              "{\"attempt\":1,\"lease_token\":\"0123456789abcdef0123456789abcdef\"%s}", tails[k]), 409);
        cr_assert_eq(report_f(fx.worker, whats[k], queued, "stale-attempt",
                              "{\"attempt\":1000,\"lease_token\":\"x\"%s}", tails[k]), 409);
        after = job_snapshot(queued);
        cr_assert_str_eq(after, before, "%s changed a queued job:\n%s\n%s", whats[k], before, after);
        free(before);
        free(after);
    }
    /* Lease it to w1 (the only waiting job), started properly. */
    own = lease_as(queued, "w1");
    cr_assert_eq(report_f(fx.worker, "start", queued, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", own.token), 200);
    char *running = queued;
    /* A second job leased by w2, not started. */
    char *other = submit_leased("w2", &held);

    for (int k = 0; k < 3; k++) {
        for (int j = 0; j < 2; j++) {
            const char *id = j ? other : running;
            const char *tok = j ? held.token : own.token;
            before = job_snapshot(id);
            /* A made-up lease token: w1's own job → 409; w2's job → 403. */
            cr_assert_eq(report_f(fx.worker, whats[k], id, j ? "not-lease-holder" : "stale-attempt",
                                  "{\"attempt\":1,\"lease_token\":\"0123456789abcdef0123456789abcdef\"%s}", tails[k]),
                         j ? 403 : 409);
            /* A huge attempt number. */
            cr_assert_eq(report_f(fx.worker, whats[k], id, "stale-attempt",
                                  "{\"attempt\":1000,\"lease_token\":\"%s\"%s}", tok, tails[k]), 409);
            /* Speaking as another worker id. */
            cr_assert_eq(report_f(fx.worker, whats[k], id, "forbidden",
                                  "{\"attempt\":1,\"lease_token\":\"%s\",\"worker\":\"w2\"%s}", held.token, tails[k]),
                         403);
            after = job_snapshot(id);
            cr_assert_str_eq(after, before, "%s changed job %d", whats[k], j);
            free(before);
            free(after);
        }
        /* Another worker's lease, token and all: w1 reporting w2's lease. */
        before = job_snapshot(other);
        cr_assert_eq(report_f(fx.worker, whats[k], other, "not-lease-holder",
                              "{\"attempt\":1,\"lease_token\":\"%s\"%s}", held.token, tails[k]), 403);
        after = job_snapshot(other);
        cr_assert_str_eq(after, before, "%s with another worker's lease changed the job", whats[k]);
        free(before);
        free(after);
    }
    /* Heartbeats: only for the token's own worker id. */
    before = job_snapshot(running);
    {
        kf_http_resp r;
        cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w2/heartbeat", fx.worker, "{}", &r), 403, "%s", r.body);
        cr_assert(strstr(r.body, "urn:kforge:problem:forbidden") && strstr(r.body, "belongs to worker w1"), "%s",
                  r.body);
        kf_http_resp_release(&r);
        cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM workers WHERE id = 'w2'", NULL), 0);
        cr_assert_eq(fx_req(&fx, "GET", "/v1/internal/whoami", fx.worker2, NULL, &r), 200);
        cr_assert(strstr(r.body, "\"worker_id\":\"w2\"") && strstr(r.body, "\"role\":\"worker\""), "%s", r.body);
        kf_http_resp_release(&r);
        cr_assert_eq(fx_req(&fx, "GET", "/v1/internal/whoami", fx.admin, NULL, &r), 403);
        kf_http_resp_release(&r);
    }
    after = job_snapshot(running);
    cr_assert_str_eq(after, before);
    free(before);
    free(after);

    /* The real holders still report fine. */
    cr_assert_eq(report_f(fx.worker2, "start", other, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", held.token), 200);
    cr_assert_eq(report_f(fx.worker, "result", running, NULL,
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{}}", own.token),
                 200);
    free(running);
    free(other);
}

/* A finished attempt whose lease ran out before its result arrived (the
 * worker spooled it): accepted while no newer attempt was granted, refused
 * once one was.  With Redis unable to tell, the lease recorded at start
 * decides. */
Test(api, late_results_of_the_latest_lease_are_kept)
{
    test_lease a, b;
    char *id = submit_leased("w1", &a);
    char *st;

    cr_assert_eq(report_f(fx.worker, "start", id, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", a.token), 200);
    /* What the reaper does when the lease expires. */
    lease_fail(id, &a);
    cr_assert_eq(report_f(fx.worker, "iterations", id, NULL,
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"seq\":1,\"latency_ns\":9,\"correct\":true}", a.token),
                 200);
    /* Once a newer attempt is granted, attempt 1 is stale. */
    b = lease_as(id, "w2");
    cr_assert_eq(report_f(fx.worker, "result", id, "stale-attempt",
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{}}", a.token), 409);
    cr_assert_eq(report_f(fx.worker2, "start", id, NULL, "{\"attempt\":2,\"lease_token\":\"%s\"}", b.token), 200);
    /* The job leaves Redis (Redis lost its data): the recorded lease decides. */
    {
        redisContext *c = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
        freeReplyObject(redisCommand(c, "SELECT %d", fx.redis_db));
        freeReplyObject(redisCommand(c, "DEL kf:job:%s", id));
        redisFree(c);
    }
    cr_assert_eq(report_f(fx.worker2, "result", id, "stale-attempt",
                          "{\"attempt\":2,\"lease_token\":\"0123456789abcdef0123456789abcdef\",\"state\":\"succeeded\"}"),
                 409);
    cr_assert_eq(report_f(fx.worker, "result", id, "not-lease-holder",
                          "{\"attempt\":2,\"lease_token\":\"%s\",\"state\":\"succeeded\"}", b.token), 403);
    cr_assert_eq(report_f(fx.worker2, "result", id, NULL,
                          "{\"attempt\":2,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{\"ok\":1}}", b.token),
                 200);
    st = fx_sql(&fx, "SELECT state || ':' || attempt FROM job_results WHERE job_id = $1", id);
    cr_assert_str_eq(st, "succeeded:2");
    free(st);
    free(id);
}

/* Iteration reports: bounded per body (413) and per attempt (422). */
Test(api, iteration_reports_have_size_and_count_limits)
{
    test_lease a;
    char *id = submit_leased("w1", &a);
    char *big = kf_calloc(1, 3000);

    memset(big, 'x', 2999);
    cr_assert_eq(report_f(fx.worker, "start", id, NULL, "{\"attempt\":1,\"lease_token\":\"%s\"}", a.token), 200);
    cr_assert_eq(report_f(fx.worker, "iterations", id, "iteration-too-large",
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"seq\":1,\"reason\":\"%s\"}", a.token, big), 413);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(report_f(fx.worker, "iterations", id, NULL, "{\"attempt\":1,\"lease_token\":\"%s\",\"seq\":%d}",
                              a.token, i), 200);
    cr_assert_eq(report_f(fx.worker, "iterations", id, "too-many-iterations",
                          "{\"attempt\":1,\"lease_token\":\"%s\",\"seq\":4}", a.token), 422);
    /* A repeat of a recorded one is still the idempotent no-op. */
    cr_assert_eq(report_f(fx.worker, "iterations", id, NULL, "{\"attempt\":1,\"lease_token\":\"%s\",\"seq\":2}", a.token),
                 200);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM iterations WHERE job_id = $1", id), 3);
    free(big);
    free(id);
}

Test(api, admins_requeue_dead_jobs_for_the_relay)
{
    kf_http_resp r;
    char *id = fx_submit(&fx, fx.user, NULL);
    char *path = kf_asprintf("/v1/jobs/%s/requeue", id);
    char *v;

    /* Its first outbox row goes once the job is on Redis. */
    cr_assert_eq(fx_sql_int_soon(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1", id, 0), 0);
    cr_assert_eq(fx_req(&fx, "POST", path, fx.admin, NULL, &r), 409, "a queued job is not dead: %s", r.body);
    cr_assert(strstr(r.body, "job-not-dead"), "%s", r.body);
    kf_http_resp_release(&r);
    /* What the scheduler records when attempts run out. */
    free(fx_sql(&fx, "UPDATE jobs SET state = 'dead', attempt = 3, max_attempts = 3, finished_at = now() "
                     "WHERE id = $1 RETURNING id", id));
    cr_assert_eq(fx_req(&fx, "POST", path, fx.user, NULL, &r), 403);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", path, fx.admin, "{\"extra_attempts\":0}", &r), 422);
    cr_assert(strstr(r.body, "extra_attempts"), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", path, fx.admin, "{\"extra_attempts\":2,\"reason\":\"fixed the host\"}", &r), 202,
                 "%s", r.body);
    cr_assert(strstr(r.body, "\"state\" : \"queued\""), "%s", r.body);
    kf_http_resp_release(&r);
    v = fx_sql(&fx, "SELECT state || ':' || attempt || '/' || max_attempts || ':' || (finished_at IS NULL) "
                    "FROM jobs WHERE id = $1", id);
    cr_assert_str_eq(v, "queued:3/5:true");
    free(v);
    /* The relay (not the API) puts it back on Redis: its new outbox row waits. */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1 AND action = 'enqueue'", id), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'requeued' "
                                 "AND detail->>'reason' = 'fixed the host'", id), 1);
    cr_assert_eq(fx_req(&fx, "POST", path, fx.admin, NULL, &r), 409, "only once: %s", r.body);
    kf_http_resp_release(&r);
    free(path);
    free(id);
}

Test(api, heartbeats_upsert_workers)
{
    kf_http_resp r;
    char *v;

    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker,
                        "{\"targets\":[\"trn1\",\"trn2\"],\"backends\":[\"diag\",\"sim\"],\"host\":\"host-a\"}", &r),
                 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker,
                        "{\"targets\":[\"trn3\"],\"backends\":[\"sim\"],\"host\":\"host-a\"}", &r),
                 200);
    kf_http_resp_release(&r);
    v = fx_sql(&fx, "SELECT array_to_string(targets, ',') FROM workers WHERE id = 'w1'", NULL);
    cr_assert_str_eq(v, "trn3");
    free(v);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker, "{\"targets\":[1]}", &r), 422);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/bad%20id/heartbeat", fx.worker, "{}", &r), 404);
    kf_http_resp_release(&r);
}

Test(api, readyz_names_workers_that_run_user_code_unconfined)
{
    kf_http_resp r;
    char *v;

    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker,
                        "{\"targets\":[\"trn2\"],\"backends\":[\"sim\"],\"sandbox\":\"strict\"}", &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 200, "%s", r.body);
    cr_assert(strstr(r.body, "\"sandbox\":\"strict\"") && !strstr(r.body, "warnings"), "%s", r.body);
    kf_http_resp_release(&r);

    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker,
                        "{\"targets\":[\"trn2\"],\"backends\":[\"sim\"],\"sandbox\":\"unconfined\"}", &r), 200,
                 "%s", r.body);
    kf_http_resp_release(&r);
    v = fx_sql(&fx, "SELECT sandbox FROM workers WHERE id = 'w1'", NULL);
    cr_assert_str_eq(v, "unconfined");
    free(v);
    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 200, "%s", r.body);
    cr_assert(strstr(r.body, "\"sandbox\":\"unconfined\""), "%s", r.body);
    cr_assert(strstr(r.body, "\"unconfined_workers\":[\"w1\"]") && strstr(r.body, "KFORGE_SANDBOX=unconfined"), "%s",
              r.body);
    kf_http_resp_release(&r);

    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker, "{\"sandbox\":\"off\"}", &r), 422);
    kf_http_resp_release(&r);
    /* back to strict: /readyz stops naming it */
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker, "{\"sandbox\":\"strict\"}", &r), 200);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 200, "%s", r.body);
    cr_assert(!strstr(r.body, "unconfined_workers"), "%s", r.body);
    kf_http_resp_release(&r);
}

Test(api, readyz_and_the_workers_table_name_unhealthy_backends)
{
    kf_http_resp r;
    cJSON *rd;
    const cJSON *m;
    char *v;

    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker,
                        "{\"targets\":[\"trn2\"],\"backends\":[\"sim\",\"neuron\"],\"unhealthy_backends\":"
                        "{\"neuron\":\"runner health: exit 75: NRT_TIMEOUT\"}}", &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    v = fx_sql(&fx, "SELECT unhealthy->>'neuron' FROM workers WHERE id = 'w1'", NULL);
    cr_assert_str_eq(v, "runner health: exit 75: NRT_TIMEOUT");
    free(v);
    rd = fx_get_json(&fx, NULL, 200, "/readyz");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(rd, "checks"), "worker_health"), "degraded");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(rd, "unhealthy_workers")), 1);
    m = cJSON_GetArrayItem(cJSON_GetObjectItem(rd, "unhealthy_workers"), 0);
    cr_assert_str_eq(fx_str(m, "worker"), "w1");
    cr_assert_str_eq(fx_str(m, "backend"), "neuron");
    cr_assert(strstr(fx_str(m, "reason"), "NRT_TIMEOUT"), "%s", fx_str(m, "reason"));
    cJSON_Delete(rd);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker,
                        "{\"unhealthy_backends\":{\"neuron\":5}}", &r), 422, "%s", r.body);
    kf_http_resp_release(&r);
    /* healthy again (a heartbeat without it means every backend is healthy) */
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker,
                        "{\"targets\":[\"trn2\"],\"backends\":[\"sim\",\"neuron\"]}", &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    rd = fx_get_json(&fx, NULL, 200, "/readyz");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(rd, "checks"), "worker_health"), "ok");
    cr_assert_null(cJSON_GetObjectItem(rd, "unhealthy_workers"));
    cJSON_Delete(rd);
}

/* ---- operational routes ----------------------------------------------------- */

Test(api, health_readiness_metrics_and_openapi)
{
    kf_http_resp r;
    cJSON *doc, *paths;
    char *ct;

    free(fx_submit(&fx, fx.user, NULL));
    cr_assert_eq(fx_req(&fx, "GET", "/healthz", NULL, NULL, &r), 200);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 200, "%s", r.body);
    cr_assert(strstr(r.body, "\"postgresql\":\"ok\"") && strstr(r.body, "\"redis\":\"ok\""), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/metrics", NULL, NULL, &r), 200);
    ct = kf_http_header(&r, "Content-Type");
    cr_assert(ct && strncmp(ct, "text/plain", 10) == 0);
    free(ct);
    cr_assert(strstr(r.body, "kforge_http_requests_total{method=\"POST\",route=\"/v1/jobs\",status=\"202\"} 1"), "%s", r.body);
    cr_assert(strstr(r.body, "kforge_jobs{state=\"queued\"} 1"), "%s", r.body);
    cr_assert(strstr(r.body, "kforge_api_job_batch_jobs_total 1\n"), "%s", r.body);
    cr_assert(strstr(r.body, "kforge_queue_jobs{set=\"waiting\"} 1"), "%s", r.body);
    kf_http_resp_release(&r);

    /* The OpenAPI document describes every route of the table. */
    cr_assert_eq(fx_req(&fx, "GET", "/v1/openapi.json", NULL, NULL, &r), 200);
    doc = fx_json(&r);
    cr_assert_str_eq(fx_str(doc, "openapi"), "3.1.0");
    paths = cJSON_GetObjectItem(doc, "paths");
    for (int i = 0; i < api_n_routes; i++) {
        char m[8];
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(paths, api_routes[i].pattern);
        size_t k;
        if (api_route_is_ui(&api_routes[i]))
            continue;   /* the dashboard's files, not the API */
        for (k = 0; k < sizeof(m) - 1 && api_routes[i].method[k]; k++)
            m[k] = (char)(api_routes[i].method[k] - 'A' + 'a');
        m[k] = '\0';
        cr_assert_not_null(p, "openapi.json lacks %s", api_routes[i].pattern);
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(p, m), "openapi.json lacks %s %s", m,
                           api_routes[i].pattern);
    }
    cJSON_Delete(doc);
    kf_http_resp_release(&r);
}

/* ---- the command line ------------------------------------------------------ */

static int run_capture(char *const argv[], char *const env[], char **out)
{
    char *dir = kf_test_tmpdir("cli");
    char *log = kf_asprintf("%s/out", dir);
    FILE *f;
    kf_buf b = KF_BUF_INIT;
    char chunk[4096];
    size_t n;
    int st = 0;
    pid_t pid = kf_test_spawn(argv, env, log);

    waitpid(pid, &st, 0);
    f = fopen(log, "r");
    while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        kf_buf_add(&b, chunk, n);
    if (f)
        fclose(f);
    *out = kf_buf_detach(&b);
    free(log);
    free(dir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

Test(api_cli, help_config_and_bad_usage)
{
    char *bin = kf_test_bin("kforge-api");
    char *out = NULL;
    char *help[] = { bin, "--help", NULL };
    char *md[] = { bin, "config", "--markdown", NULL };
    char *bad[] = { bin, "frobnicate", NULL };
    char *tok_help[] = { bin, "token", "create", "--help", NULL };
    char *tok_bad[] = { bin, "token", "create", "--role", "root", "--name", "x", NULL };
    char *serve_help[] = { bin, "serve", "--help", NULL };
    char *env_bad[] = { "KFORGE_NO_SUCH_SETTING=1", NULL };

    cr_assert_eq(run_capture(help, NULL, &out), 0);
    cr_assert(strstr(out, "token create") && strstr(out, "migrate") && strstr(out, "KFORGE_PG_DSN"), "%s", out);
    free(out);
    cr_assert_eq(run_capture(md, NULL, &out), 0);
    cr_assert(strstr(out, "| `KFORGE_MIGRATIONS_DIR` |") && strstr(out, "| variable | default |"), "%s", out);
    free(out);
    cr_assert_eq(run_capture(bad, NULL, &out), 2);
    free(out);
    cr_assert_eq(run_capture(tok_help, NULL, &out), 0);
    cr_assert(strstr(out, "worker"), "%s", out);
    free(out);
    cr_assert_eq(run_capture(tok_bad, NULL, &out), 2);
    free(out);
    cr_assert_eq(run_capture(serve_help, NULL, &out), 0);
    cr_assert(strstr(out, "--migrate") && strstr(out, "KFORGE_API_THREADS"), "%s", out);
    free(out);
    cr_assert_eq(run_capture(help, env_bad, &out), 0, "--help needs no valid config");
    free(out);
    cr_assert_eq(run_capture(serve_help, env_bad, &out), 2);
    cr_assert(strstr(out, "KFORGE_NO_SUCH_SETTING"), "%s", out);
    free(out);
    free(bin);
}

Test(api_cli, serve_migrate_and_bootstrap_token_on_a_fresh_database, .timeout = 60)
{
    char *bin = kf_test_bin("kforge-api");
    char *dsn = kf_test_fresh_db();
    char *dir = kf_test_tmpdir("boot");
    char *log = kf_asprintf("%s/api.log", dir);
    char *redis = kf_test_redis_url(REDIS_DB);
    int port = kf_test_free_port();
    const char *boot = "kf_bootstrap_secret_for_tests_0123456789";
    char *env[] = { kf_asprintf("KFORGE_PG_DSN=%s", dsn), kf_asprintf("KFORGE_REDIS_URL=%s", redis),
                    kf_asprintf("KFORGE_API_LISTEN=127.0.0.1:%d", port), kf_asprintf("KFORGE_BOOTSTRAP_TOKEN=%s", boot),
                    NULL };
    char *argv[] = { bin, "serve", "--migrate", NULL };
    char *url = kf_asprintf("http://127.0.0.1:%d/healthz", port);
    char *jobs = kf_asprintf("http://127.0.0.1:%d/v1/jobs", port);
    kf_http_resp r;
    pid_t pid = kf_test_spawn(argv, env, log);
    int st;

    cr_assert(kf_http_wait_status(url, 200, 15000), "serve --migrate did not start; see %s", log);
    cr_assert_eq(kf_http_json("GET", jobs, boot, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(kf_http_json("GET", jobs, "kf_wrong", NULL, &r), 401);
    kf_http_resp_release(&r);
    {
        /* the admin token left the environment block once it was bootstrapped
         * (root reads /proc/<pid>/environ even of a non-dumpable process) */
        char path[64], buf[8192];
        snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        cr_assert_gt(n, 0, "cannot read %s", path);
        buf[n] = '\0';
        cr_assert_null(memmem(buf, n, boot, strlen(boot)), "the bootstrap token is still in %s", path);
    }
    st = kf_test_stop(pid, SIGINT, 10000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "SIGINT: status %d", st);

    /* A second start finds the token and the schema in place. */
    pid = kf_test_spawn(argv, env, log);
    cr_assert(kf_http_wait_status(url, 200, 15000));
    cr_assert_eq(kf_http_json("GET", jobs, boot, NULL, &r), 200);
    kf_http_resp_release(&r);
    st = kf_test_stop(pid, SIGTERM, 10000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int i = 0; env[i]; i++)
        free(env[i]);
    free(bin);
    free(dsn);
    free(dir);
    free(log);
    free(redis);
    free(url);
    free(jobs);
}

/* ---- group commit under concurrency ------------------------------------------ */

typedef struct burst_arg {
    int  n_ok;
    char ids[20][37];
    char err[256];
} burst_arg;

static void *burst_post(void *p)
{
    burst_arg *a = p;
    for (int i = 0; i < 20; i++) {
        kf_http_resp r;
        cJSON *j;
        char *loc;
        long st = fx_req(&fx, "POST", "/v1/jobs", fx.user, "{\"kind\":\"diag\",\"target\":\"trn1\"}", &r);
        if (st != 202) {
            snprintf(a->err, sizeof(a->err), "%ld %.200s", st, r.body ? r.body : r.error);
            kf_http_resp_release(&r);
            return NULL;
        }
        j = cJSON_Parse(r.body);
        loc = kf_http_header(&r, "Location");
        snprintf(a->ids[i], sizeof(a->ids[i]), "%s", j ? fx_str(j, "id") : "");
        if (!loc || !strstr(loc, a->ids[i]))
            snprintf(a->err, sizeof(a->err), "Location %s does not name job %s", loc ? loc : "-", a->ids[i]);
        free(loc);
        cJSON_Delete(j);
        kf_http_resp_release(&r);
        a->n_ok++;
    }
    return NULL;
}

Test(api, concurrent_submissions_are_all_written_queued_and_ordered)
{
    enum { T = 12 };
    pthread_t t[T];
    burst_arg *a = kf_calloc(T, sizeof(*a));

    for (int i = 0; i < T; i++)
        pthread_create(&t[i], NULL, burst_post, &a[i]);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < T; i++)
        cr_assert_eq(a[i].n_ok, 20, "thread %d: %s", i, a[i].err);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(DISTINCT id) FROM jobs", NULL), (long)T * 20);
    cr_assert_eq(fx_sql_int_soon(&fx, "SELECT count(*) FROM outbox", NULL, 0), 0,
                 "every job delivered and its outbox row deleted");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE type = 'created'", NULL), (long)T * 20);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events", NULL), (long)T * 20, "one event per job: created");
    cr_assert_eq(fx_redis_int(&fx, "ZCARD kf:wait:diag:%s", "trn1"), (long long)T * 20);
    /* Each client's jobs are created (and queued) in the order it sent them. */
    for (int i = 0; i < T; i++) {
        for (int k = 1; k < 20; k++) {
            char *sql = kf_asprintf("SELECT (SELECT created_at FROM jobs WHERE id = '%s') < "
                                    "(SELECT created_at FROM jobs WHERE id = '%s')::timestamptz",
                                    a[i].ids[k - 1], a[i].ids[k]);
            char *v = fx_sql(&fx, sql, NULL);
            cr_assert_str_eq(v, "t", "thread %d: job %d not after job %d", i, k, k - 1);
            free(v);
            free(sql);
        }
    }
    free(a);
}

Test(api_cli, migrations_apply_in_order_each_in_its_own_transaction, .timeout = 60)
{
    char *bin = kf_test_bin("kforge-api");
    char *dsn = kf_test_fresh_db();
    char *dir = kf_test_tmpdir("mig");
    char *p1 = kf_asprintf("%s/0001_init.sql", dir), *p2 = kf_asprintf("%s/0002_extra.sql", dir);
    char *p10 = kf_asprintf("%s/0010_bad.sql", dir), *pn = kf_asprintf("%s/notes.txt", dir);
    char *env[] = { kf_asprintf("KFORGE_PG_DSN=%s", dsn), kf_asprintf("KFORGE_MIGRATIONS_DIR=%s", dir), NULL };
    char *argv[] = { bin, "migrate", NULL };
    char *out = NULL;
    PGconn *c;
    PGresult *res;

    kf_test_write_file(p1, "CREATE TABLE m_one (id int);");
    kf_test_write_file(p2, "CREATE TABLE m_two (id int); INSERT INTO m_two VALUES (2);");
    /* Applied in numeric order; the failing one stops the run and leaves nothing. */
    kf_test_write_file(p10, "CREATE TABLE m_ten (id int); SELECT 1/0;");
    kf_test_write_file(pn, "not a migration");
    cr_assert_eq(run_capture(argv, env, &out), 1, "a failing migration fails migrate: %s", out);
    cr_assert(strstr(out, "0010_bad.sql") && strstr(out, "division by zero"), "%s", out);
    free(out);
    c = PQconnectdb(dsn);
    res = PQexec(c, "SELECT string_agg(version::text || ':' || name, ',' ORDER BY version) FROM schema_migrations");
    cr_assert_str_eq(PQgetvalue(res, 0, 0), "1:0001_init.sql,2:0002_extra.sql");
    PQclear(res);
    res = PQexec(c, "SELECT to_regclass('m_ten') IS NULL, to_regclass('m_two') IS NOT NULL");
    cr_assert_str_eq(PQgetvalue(res, 0, 0), "t", "the failed migration left nothing behind");
    cr_assert_str_eq(PQgetvalue(res, 0, 1), "t");
    PQclear(res);

    kf_test_write_file(p10, "CREATE TABLE m_ten (id int);");
    cr_assert_eq(run_capture(argv, env, &out), 0, "%s", out);
    cr_assert(strstr(out, "applied 0010_bad.sql") && strstr(out, "1 migration applied"), "%s", out);
    free(out);
    cr_assert_eq(run_capture(argv, env, &out), 0, "%s", out);
    cr_assert(strstr(out, "0 migrations applied"), "%s", out);
    free(out);
    res = PQexec(c, "SELECT count(*) FROM schema_migrations");
    cr_assert_str_eq(PQgetvalue(res, 0, 0), "3");
    PQclear(res);
    PQfinish(c);

    /* Two files with one number are refused before anything runs. */
    {
        char *dup = kf_asprintf("%s/0002_again.sql", dir);
        kf_test_write_file(dup, "SELECT 1;");
        cr_assert_eq(run_capture(argv, env, &out), 1);
        cr_assert(strstr(out, "share number 2"), "%s", out);
        free(out);
        free(dup);
    }
    for (int i = 0; env[i]; i++)
        free(env[i]);
    free(bin);
    free(dsn);
    free(dir);
    free(p1);
    free(p2);
    free(p10);
    free(pn);
}

/* ---- stopping with POSTs in flight --------------------------------------------- */

typedef struct stop_arg {
    const char *base, *token;
    int         n_202, n_other;
    char        ids[400][37];
} stop_arg;

/* POST until the server is gone; records every 202's id. */
static void *stop_post(void *p)
{
    stop_arg *a = p;
    char *url = kf_asprintf("%s/v1/jobs", a->base);
    const char *body = "{\"kind\":\"diag\",\"target\":\"trn3\"}";

    while (a->n_202 < 400) {
        kf_http_resp r;
        long st = kf_http_json("POST", url, a->token, body, &r);
        if (st == 202) {
            cJSON *j = cJSON_Parse(r.body);
            const cJSON *id = cJSON_GetObjectItem(j, "id");
            if (cJSON_IsString(id))
                snprintf(a->ids[a->n_202++], sizeof(a->ids[0]), "%s", id->valuestring);
            cJSON_Delete(j);
        } else {
            a->n_other++;
        }
        kf_http_resp_release(&r);
        if (st == 0)
            break;   /* connection refused: the server has stopped */
    }
    free(url);
    return NULL;
}

Test(api, stopping_with_posts_in_flight_answers_them_and_loses_none)
{
    enum { T = 6 };
    pthread_t t[T];
    stop_arg *a = kf_calloc(T, sizeof(*a));
    int st, total = 0;

    for (int i = 0; i < T; i++) {
        a[i].base = fx.base;
        a[i].token = fx.user;
        pthread_create(&t[i], NULL, stop_post, &a[i]);
    }
    kf_test_sleep_ms(300);
    /* Requests handed to the group commit are written and answered before
     * the server stops (libmicrohttpd aborts on a suspended connection). */
    st = kf_test_stop(fx.pid, SIGTERM, 10000);
    fx.pid = 0;
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "kforge-api under load: status %d; see %s", st, fx.log);
    for (int i = 0; i < T; i++) {
        total += a[i].n_202;
        for (int k = 0; k < a[i].n_202; k++)
            cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE id = $1::uuid", a[i].ids[k]), 1,
                         "job %s was accepted (202) but is not in PostgreSQL", a[i].ids[k]);
    }
    cr_assert_gt(total, 0, "no POST succeeded before the stop");
    free(a);
}

/* The relay's round trip: what the API accepts and stores as jsonb, the
 * scheduler's relay reads back as PostgreSQL prints it and builds the
 * worker's payload from; the worker must take it.  Numbers at the edges of
 * a double (PostgreSQL prints them as long decimals), signed zero, UTF-8
 * and escapes in strings (fuzz_job_request checks the API's own fast
 * path; this is the path through PostgreSQL). */
Test(api, what_the_api_stores_the_relay_can_queue_and_the_worker_takes)
{
    static const char *const bodies[] = {
        "{\"kind\":\"optimize\",\"target\":\"trn2\",\"spec\":{\"reference\":\"r\",\"source\":\"s\",\"entry\":\"k\","
        "\"inputs\":{\"x\":{\"shape\":[128,512],\"dtype\":\"bfloat16\"}},"
        "\"tunables\":{\"A\":[1.7976931348623157e308,-1.7976931348623157e308,5e-324,-0.0,0.1,9007199254740993,1e-400],"
        "\"B\":[true,false,\"\",\"\\u00e9\\n\\\"\\\\\\u0001\",\"\xf0\x9f\x98\x80\"]}}}",
        "{\"kind\":\"diag\",\"target\":\"trn2\",\"spec\":{\"sleep_ms\":0},\"budget\":{\"iterations\":10000,"
        "\"seconds\":86400},\"goal\":{\"fraction_of_bound\":1e-6}}",
        "{\"kind\":\"generate\",\"target\":\"inf2\",\"spec\":{\"op\":\"softmax\",\"shapes\":[[2147483648],[1,1,1,1,1,1,1,1]],"
        "\"dtype\":\"float32\"}}",
    };

    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        kf_http_resp r;
        cJSON *j;
        char *id, *kind, *target, *backend, *spec, *budget, *goal, *payload;
        kf_err e = KF_ERR_INIT;
        kf_job_payload p;

        cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.user, bodies[i], &r), 202, "%s: %s", bodies[i], r.body);
        j = fx_json(&r);
        id = kf_strdup(fx_str(j, "id"));
        cJSON_Delete(j);
        kf_http_resp_release(&r);
        kind = fx_sql(&fx, "SELECT kind FROM jobs WHERE id = $1", id);
        target = fx_sql(&fx, "SELECT target FROM jobs WHERE id = $1", id);
        backend = fx_sql(&fx, "SELECT backend FROM jobs WHERE id = $1", id);
        spec = fx_sql(&fx, "SELECT spec::text FROM jobs WHERE id = $1", id);
        budget = fx_sql(&fx, "SELECT budget::text FROM jobs WHERE id = $1", id);
        goal = fx_sql(&fx, "SELECT goal::text FROM jobs WHERE id = $1", id);
        payload = kf_job_payload_build(id, kind, target, backend, spec, budget, goal, &e);
        cr_assert_not_null(payload, "body %zu: %s", i, e.msg);
        cr_assert_eq(kf_job_payload_parse(payload, &p, &e), KF_OK, "the worker refuses what PostgreSQL kept: %s\n%s",
                     e.msg, payload);
        kf_job_payload_release(&p);
        free(payload);
        free(kind);
        free(target);
        free(backend);
        free(spec);
        free(budget);
        free(goal);
        free(id);
    }
}

/* ---- routing by capability ---------------------------------------------------- */

/* A worker's registry heartbeat, as kforge-worker's lease thread sends it. */
static void heartbeat_as(kf_queue *q, const char *id, const char *target, const char *backend)
{
    kf_err e = KF_ERR_INIT;
    kf_queue_caps c = { &target, 1, &backend, 1 };
    char *doc = kf_asprintf("{\"id\":\"%s\",\"targets\":[\"%s\"],\"backends\":[\"%s\"]}", id, target, backend);

    cr_assert_eq(kf_queue_heartbeat(q, id, doc, 60000, &c, &e), KF_OK, "%s", e.msg);
    free(doc);
}

/* POST /v1/jobs, 202; *warnings gets the reply's warnings (NULL if none). */
static char *submit_warned(const char *body, cJSON **warnings)
{
    kf_http_resp r;
    cJSON *j;
    char *id;

    cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.user, body, &r), 202, "%s", r.body);
    j = fx_json(&r);
    id = kf_strdup(fx_str(j, "id"));
    *warnings = cJSON_DetachItemFromObject(j, "warnings");
    cJSON_Delete(j);
    kf_http_resp_release(&r);
    return id;
}

Test(api, a_job_no_live_worker_can_run_waits_with_a_reason_until_one_comes)
{
#define ROUTE_JOB(backend)                                                                                      \
    "{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"" backend "\",\"op\":\"add\","                    \
    "\"shapes\":[[128,512],[128,512]],\"dtype\":\"float32\"}"
    static const char neuron_body[] = ROUTE_JOB("neuron");
    static const char sim_body[] = ROUTE_JOB("sim");
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(fx.redis_url, &e);
    const char *trn2 = "trn2", *sim = "sim", *neuron = "neuron";
    kf_queue_caps sim_caps = { &trn2, 1, &sim, 1 }, neuron_caps = { &trn2, 1, &neuron, 1 };
    kf_queue_lease l;
    bool got = false;
    cJSON *w, *j, *rd;
    const cJSON *m;
    char *nid, *sid, *nid2;

    cr_assert_not_null(q, "%s", e.msg);
    heartbeat_as(q, "w-sim", "trn2", "sim");

    /* Accepted, with a warning: no worker ever offered neuron on trn2. */
    nid = submit_warned(neuron_body, &w);
    cr_assert_not_null(w, "POST warns about a backend no worker has ever offered");
    cr_assert_eq(cJSON_GetArraySize(w), 1);
    m = cJSON_GetArrayItem(w, 0);
    cr_assert_str_eq(fx_str(m, "code"), "capability-never-offered");
    cr_assert(strstr(fx_str(m, "message"), "backend 'neuron' for target 'trn2'"), "%s", fx_str(m, "message"));
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(m, "capability"), "backend"), "neuron");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(m, "capability"), "target"), "trn2");
    cJSON_Delete(w);
    sid = submit_warned(sim_body, &w);
    cr_assert_null(w, "a sim worker has offered (trn2, sim): no warning");
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:neuron:trn2", 1), 1);
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:sim:trn2", 1), 1);

    /* The sim worker takes the sim job (submitted second) and nothing else. */
    cr_assert_eq(kf_queue_lease_job(q, &sim_caps, "w-sim", 60000, &l, &got, &e), KF_OK, "%s", e.msg);
    cr_assert(got);
    cr_assert_str_eq(l.id, sid);
    kf_queue_lease_free(&l);
    cr_assert_eq(kf_queue_lease_job(q, &sim_caps, "w-sim", 60000, &l, &got, &e), KF_OK, "%s", e.msg);
    cr_assert_not(got, "the neuron job is not the sim worker's");

    /* The neuron job stays queued and says why. */
    j = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s", nid);
    cr_assert_str_eq(fx_str(j, "state"), "queued");
    cr_assert_eq(cJSON_GetObjectItem(j, "attempt")->valueint, 0, "no attempt burnt");
    m = cJSON_GetObjectItem(j, "waiting");
    cr_assert_not_null(m, "a queued job with no live worker for its pair has a waiting object");
    cr_assert_str_eq(fx_str(m, "reason"), "no live worker offers backend 'neuron' for target 'trn2' (none ever has)");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(m, "capability"), "backend"), "neuron");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(m, "capability"), "target"), "trn2");
    cJSON_Delete(j);
    j = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s", sid);
    cr_assert_null(cJSON_GetObjectItem(j, "waiting"), "a live worker runs (trn2, sim)");
    cJSON_Delete(j);
    /* the list says it too, per item (one Redis round trip for the page) */
    {
        const cJSON *it;
        int seen = 0;
        j = fx_get_json(&fx, fx.user, 200, "/v1/jobs?state=queued");
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "jobs"))
        {
            if (strcmp(fx_str(it, "id"), nid) == 0) {
                seen++;
                cr_assert_str_eq(fx_str(cJSON_GetObjectItem(it, "waiting"), "reason"),
                                 "no live worker offers backend 'neuron' for target 'trn2' (none ever has)");
            } else if (strcmp(fx_str(it, "id"), sid) == 0) {
                seen++;
                cr_assert_null(cJSON_GetObjectItem(it, "waiting"), "(trn2, sim) has a live worker");
            }
        }
        cr_assert_eq(seen, 2, "both jobs are listed as queued");
        cJSON_Delete(j);
    }
    /* GET /v1/workers: queue depth and live workers per pair */
    {
        const cJSON *it;
        bool neuron_row = false, sim_row = false;
        j = fx_get_json(&fx, fx.user, 200, "/v1/workers");
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "pairs"))
        {
            if (strcmp(fx_str(it, "backend"), "neuron") == 0 && strcmp(fx_str(it, "target"), "trn2") == 0)
                neuron_row = cJSON_GetObjectItem(it, "waiting")->valueint == 1 &&
                             cJSON_GetObjectItem(it, "live_workers")->valueint == 0 &&
                             cJSON_IsFalse(cJSON_GetObjectItem(it, "ever_offered"));
            if (strcmp(fx_str(it, "backend"), "sim") == 0 && strcmp(fx_str(it, "target"), "trn2") == 0)
                sim_row = cJSON_GetObjectItem(it, "waiting")->valueint == 0 &&
                          cJSON_GetObjectItem(it, "live_workers")->valueint == 1;
        }
        cr_assert(neuron_row && sim_row, "per-pair rows: neuron %d sim %d", neuron_row, sim_row);
        cJSON_Delete(j);
    }

    /* /readyz names the missing capability (and stays ready). */
    rd = fx_get_json(&fx, NULL, 200, "/readyz");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(rd, "checks"), "capabilities"), "missing");
    m = cJSON_GetArrayItem(cJSON_GetObjectItem(rd, "missing_capabilities"), 0);
    cr_assert_not_null(m);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(rd, "missing_capabilities")), 1);
    cr_assert_str_eq(fx_str(m, "target"), "trn2");
    cr_assert_str_eq(fx_str(m, "backend"), "neuron");
    cr_assert_eq(cJSON_GetObjectItem(m, "waiting")->valueint, 1);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(m, "ever_offered")));
    cJSON_Delete(rd);

    /* A neuron worker comes: no more warning, no more waiting reason, and
     * it leases the job. */
    heartbeat_as(q, "w-neuron", "trn2", "neuron");
    /* the API remembers a pair seen never offered for 1 s (api_caps.c) */
    usleep(1100 * 1000);
    nid2 = submit_warned(neuron_body, &w);
    cr_assert_null(w, "a worker has offered (trn2, neuron) now");
    j = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s", nid);
    cr_assert_null(cJSON_GetObjectItem(j, "waiting"), "a live worker offers its pair now");
    cJSON_Delete(j);
    rd = fx_get_json(&fx, NULL, 200, "/readyz");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(rd, "checks"), "capabilities"), "ok");
    cr_assert_null(cJSON_GetObjectItem(rd, "missing_capabilities"));
    cJSON_Delete(rd);
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:neuron:trn2", 2), 2);
    cr_assert_eq(kf_queue_lease_job(q, &neuron_caps, "w-neuron", 60000, &l, &got, &e), KF_OK, "%s", e.msg);
    cr_assert(got);
    cr_assert_str_eq(l.id, nid, "the neuron worker takes the job that waited");
    cr_assert_str_eq(l.backend, "neuron");
    cr_assert_eq(l.attempt, 1);
    kf_queue_lease_free(&l);

    /* The neuron worker leaves: the job queued after it waits again, with
     * the reason that one did offer it before. */
    cr_assert_eq(kf_queue_worker_gone(q, "w-neuron", &e), KF_OK, "%s", e.msg);
    j = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s", nid2);
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(j, "waiting"), "reason"),
                     "no live worker offers backend 'neuron' for target 'trn2' (one did before: it stopped, lost "
                     "its heartbeat, or its backend failed a health check)");
    cJSON_Delete(j);
    kf_queue_free(q);
    free(nid);
    free(nid2);
    free(sid);
}
