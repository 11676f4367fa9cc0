/* Integration tests of the kernel library registry against real PostgreSQL
 * and Redis (issue 16, docs/library.md): an entry appears when a job
 * succeeds (in the success's transaction), a slower job on the same
 * provenance keeps it, a faster one or a newer provenance replaces it and
 * the history shows every change; filters and paging of GET /v1/library;
 * the kernel download; who reads what; 404s; the warm start a second
 * generate job gets; and the source rebuilt from diffs when the worker kept
 * no kernel.py.  Jobs run through the worker protocol (lease, start,
 * iterations, artifacts, result) as a worker would. */
#include "kf_artifact.h"
#include "kf_queue.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"
#include "workers/kf_upload.h"

#define REDIS_DB 15

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, NULL);
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(api_library, .init = setup, .fini = teardown, .timeout = 120);

/* ---- a job through the worker protocol ----------------------------------------- */

typedef fx_lease lease;

#define PROV_A "{\"backend\":\"sim\",\"sim_build\":\"src-sha256:aaaa\",\"target_hash\":\"t1\",\"template_hash\":\"h1\"}"
#define PROV_B "{\"backend\":\"sim\",\"sim_build\":\"src-sha256:bbbb\",\"target_hash\":\"t1\",\"template_hash\":\"h1\"}"

/* Submit a generate job (spec: the JSON members after "kind") as `tok`,
 * lease it for w1 and report its start. */
static char *leased(const char *tok, const char *spec, lease *l)
{
    char *body = kf_asprintf("{\"kind\":\"generate\",%s}", spec);
    char *id = fx_submit(&fx, tok, body);

    free(body);
    *l = fx_lease_job(&fx, id, NULL);
    fx_start_job(&fx, id, l);
    return id;
}

/* One iteration report: source (or diff) JSON-escaped by the caller's
 * literal, params a JSON object. */
static void report_iteration(const char *id, const lease *l, int seq, const char *src_member, const char *params,
                             double latency, bool correct)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/iterations", id);
    char *body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"seq\":%d%s%s,\"params\":%s,"
                             "\"compile\":{\"ok\":true},\"profile\":{\"floor_ns\":500},\"latency_ns\":%.1f,"
                             "\"correct\":%s,\"reason\":\"test\"}",
                             l->attempt, l->token, seq, src_member ? "," : "", src_member ? src_member : "", params,
                             latency, correct ? "true" : "false");
    kf_http_resp r;

    cr_assert_eq(fx_req(&fx, "POST", path, fx.worker, body, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    free(path);
    free(body);
}

static void upload_kernel(const char *id, const lease *l, int seq, const char *content)
{
    cJSON *f = cJSON_CreateObject();
    char *path = kf_asprintf("/v1/internal/jobs/%s/artifacts", id), *body;
    kf_http_resp r;

    cJSON_AddStringToObject(f, "name", "kernel.py");
    cJSON_AddStringToObject(f, "content", content);
    body = kf_upload_artifact_body(l->attempt, l->token, "w1", seq, true, f);
    cr_assert_eq(fx_req(&fx, "POST", path, fx.worker, body, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cJSON_Delete(f);
    free(body);
    free(path);
}

static void succeed(const char *id, const lease *l, const char *prov)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/result", id);
    char *body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{\"entry\":"
                             "\"add\"},\"provenance\":%s}",
                             l->attempt, l->token, prov);
    kf_http_resp r;

    cr_assert_eq(fx_req(&fx, "POST", path, fx.worker, body, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    free(path);
    free(body);
}

/* A whole generate job: one correct iteration of `latency` with TILE_F =
 * tile, its kernel.py kept, succeeded with provenance prov. */
static char *run_job(const char *tok, const char *spec, int tile, double latency, const char *prov)
{
    lease l;
    char *id = leased(tok, spec, &l), *params = kf_asprintf("{\"TILE_F\":%d}", tile);
    char *kernel = kf_asprintf("# tuned add\ndef add(a, b, TILE_F=%d):\n    return a + b\n", tile);

    report_iteration(id, &l, 1, "\"source\":\"def add(a, b, TILE_F=512):\\n    return a + b\\n\"", params,
                     latency, true);
    upload_kernel(id, &l, 1, kernel);
    succeed(id, &l, prov);
    free(params);
    free(kernel);
    return id;
}

#define ADD_TRN2 "\"op\":\"add\",\"shapes\":[[200,700],[200,700]],\"dtype\":\"bfloat16\",\"target\":\"trn2\""

/* The only item of GET /v1/library?QUERY as `tok` (asserts there is one);
 * caller deletes the list it returns in *list. */
static const cJSON *only_item(const char *tok, const char *query, cJSON **list)
{
    char *path = kf_asprintf("/v1/library%s", query);
    const cJSON *items;

    *list = fx_get_json(&fx, tok, 200, "%s", path);
    free(path);
    items = cJSON_GetObjectItemCaseSensitive(*list, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 1, "want one entry");
    return cJSON_GetArrayItem(items, 0);
}

/* ---- tests ---------------------------------------------------------------------- */

Test(api_library, an_entry_appears_when_a_job_succeeds_with_its_kernel)
{
    char *job = run_job(fx.user, ADD_TRN2, 1024, 2000, PROV_A);
    cJSON *list, *one;
    const cJSON *it, *hist;
    char *path, sha[65];
    const char *kernel = "# tuned add\ndef add(a, b, TILE_F=1024):\n    return a + b\n";
    kf_http_resp r;

    it = only_item(fx.user2, "", &list);
    cr_assert_str_eq(fx_str(it, "op"), "add");
    cr_assert_str_eq(fx_str(it, "target"), "trn2");
    cr_assert_str_eq(fx_str(it, "dtype"), "bfloat16");
    cr_assert_str_eq(fx_str(it, "backend"), "sim");
    cr_assert_str_eq(fx_str(it, "job_id"), job);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "shared")));
    cr_assert_eq(fx_num(it, "latency_ns"), 2000);
    cr_assert_float_eq(fx_num(it, "fraction_of_bound"), 0.25, 1e-9);
    cr_assert_eq(fx_num(cJSON_GetObjectItemCaseSensitive(it, "params"), "TILE_F"), 1024);
    cr_assert_str_eq(fx_str(cJSON_GetObjectItemCaseSensitive(it, "provenance"), "sim_build"), "src-sha256:aaaa");
    kf_artifact_sha256_hex(kernel, strlen(kernel), sha);
    cr_assert_str_eq(fx_str(it, "source_sha256"), sha, "the worker's kernel.py is the entry's source");
    cr_assert(strncmp(fx_str(it, "id"), "add-trn2-bfloat16-sim-", 22) == 0, "%s", fx_str(it, "id"));

    path = kf_asprintf("/v1/library/%s", fx_str(it, "id"));
    one = fx_get_json(&fx, fx.user, 200, "%s", path);
    hist = cJSON_GetObjectItemCaseSensitive(one, "history");
    cr_assert_eq(cJSON_GetArraySize(hist), 1);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(hist, 0), "reason"), "created");
    free(path);

    /* the kernel: text/x-python, header naming entry, params, latency, provenance, then the source */
    path = kf_asprintf("%s/v1/library/%s/kernel", fx.base, fx_str(it, "id"));
    cr_assert_eq(kf_http_request("GET", path, fx.user, NULL, NULL, 0, &r), 200, "%s", r.body);
    cr_assert(strstr(r.body, "# kforge kernel library entry add-trn2-bfloat16-sim-") == r.body, "%s", r.body);
    cr_assert(strstr(r.body, "# params {\"TILE_F\": 1024}"), "%s", r.body);
    cr_assert(strstr(r.body, "# latency_ns 2000, fraction of bound 0.25"), "%s", r.body);
    cr_assert(strstr(r.body, "src-sha256:aaaa"), "%s", r.body);
    cr_assert(strstr(r.body, job), "%s", r.body);
    cr_assert(strlen(r.body) > strlen(kernel) && strcmp(r.body + strlen(r.body) - strlen(kernel), kernel) == 0,
              "the source follows the header unchanged: %s", r.body);
    kf_http_resp_release(&r);
    free(path);
    /* one offer per success: the job's events and the entry agree */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM kernel_library_history", NULL), 1);
    /* analysts read it with plain SQL */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM kforge_library WHERE kernel = 'add'", NULL), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT has_table_privilege('kforge_reader', 'kforge_library', 'SELECT')::int",
                            NULL),
                 1);
    cJSON_Delete(one);
    cJSON_Delete(list);
    free(job);
}

Test(api_library, slower_on_the_same_provenance_keeps_faster_or_newer_provenance_replaces)
{
    char *a = run_job(fx.user, ADD_TRN2, 1024, 2000, PROV_A);
    char *slow = run_job(fx.user, ADD_TRN2, 256, 3000, PROV_A);
    char *fast, *newer, *path;
    cJSON *list, *one;
    const cJSON *it, *hist;

    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), a, "a slower job on the same provenance does not replace the entry");
    cr_assert_eq(fx_num(it, "latency_ns"), 2000);
    cJSON_Delete(list);

    /* the worker id is not part of what makes two provenances the same */
    fast = run_job(fx.user2, ADD_TRN2, 2048, 1500,
                   "{\"worker\":\"w1\",\"backend\":\"sim\",\"sim_build\":\"src-sha256:aaaa\",\"target_hash\":\"t1\","
                   "\"template_hash\":\"h1\"}");
    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), fast, "a faster job replaces it");
    cJSON_Delete(list);

    /* a new simulator build: its numbers replace the old ones, slower or not */
    newer = run_job(fx.user, ADD_TRN2, 512, 2500, PROV_B);
    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), newer);
    cr_assert_eq(fx_num(it, "latency_ns"), 2500);
    path = kf_asprintf("/v1/library/%s", fx_str(it, "id"));
    one = fx_get_json(&fx, fx.user, 200, "%s", path);
    hist = cJSON_GetObjectItemCaseSensitive(one, "history");
    cr_assert_eq(cJSON_GetArraySize(hist), 3, "created, faster, provenance; the slower job wrote nothing");
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(hist, 0), "reason"), "created");
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(hist, 1), "reason"), "faster");
    cr_assert_eq(fx_num(cJSON_GetArrayItem(hist, 1), "old_latency_ns"), 2000);
    cr_assert_eq(fx_num(cJSON_GetArrayItem(hist, 1), "new_latency_ns"), 1500);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(hist, 2), "reason"), "provenance");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(hist, 2), "old_provenance"),
                            "sim_build"),
                     "src-sha256:aaaa");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(hist, 2), "new_provenance"),
                            "sim_build"),
                     "src-sha256:bbbb");
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(hist, 2), "old_job_id"), fast);
    cJSON_Delete(one);
    free(path);

    /* on the new provenance, a slower job keeps the entry again */
    free(slow);
    slow = run_job(fx.user, ADD_TRN2, 512, 2600, PROV_B);
    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), newer, "slower on the same (new) provenance: kept");
    cJSON_Delete(list);
    free(a);
    free(slow);
    free(fast);
    free(newer);
}

Test(api_library, filters_and_paging)
{
    static const char *const specs[] = {
        ADD_TRN2,
        "\"op\":\"add\",\"shapes\":[[200,700],[200,700]],\"dtype\":\"bfloat16\",\"target\":\"trn1\"",
        "\"op\":\"add\",\"shapes\":[[256,512],[256,512]],\"dtype\":\"float32\",\"target\":\"trn2\"",
        "\"op\":\"softmax\",\"shapes\":[[128,512]],\"dtype\":\"float32\",\"target\":\"trn2\"",
    };
    char *jobs[4], *path, *cursor = NULL;
    cJSON *list;
    const cJSON *it;
    int seen = 0;

    for (int i = 0; i < 4; i++)
        jobs[i] = run_job(fx.user, specs[i], 512, 1000 + i, PROV_A);
    /* limit=1: four pages, each id after the one before, then no cursor */
    do {
        const cJSON *items, *nc;
        path = cursor ? kf_asprintf("/v1/library?limit=1&cursor=%s", cursor) : kf_strdup("/v1/library?limit=1");
        list = fx_get_json(&fx, fx.user, 200, "%s", path);
        items = cJSON_GetObjectItemCaseSensitive(list, "items");
        cr_assert_eq(cJSON_GetArraySize(items), 1);
        if (cursor)
            cr_assert_gt(strcmp(fx_str(cJSON_GetArrayItem(items, 0), "id"), cursor), 0, "keyset order by id");
        free(cursor);
        nc = cJSON_GetObjectItemCaseSensitive(list, "next_cursor");
        cursor = cJSON_IsString(nc) ? kf_strdup(nc->valuestring) : NULL;
        cr_assert(cJSON_IsString(nc) || cJSON_IsNull(nc));
        seen++;
        cJSON_Delete(list);
        free(path);
    } while (cursor && seen < 10);
    cr_assert_eq(seen, 4);

    it = only_item(fx.user, "?op=add&target=trn1", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), jobs[1]);
    cJSON_Delete(list);
    it = only_item(fx.user, "?op=add&dtype=float32", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), jobs[2]);
    cJSON_Delete(list);
    it = only_item(fx.user, "?op=softmax&backend=sim", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), jobs[3]);
    cJSON_Delete(list);
    list = fx_get_json(&fx, fx.user, 200, "/v1/library?op=matmul");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(list, "items")), 0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(list, "next_cursor")));
    cJSON_Delete(list);

    /* bad queries: 422 naming the field */
    {
        static const char *const bad[][2] = {
            { "/v1/library?op=no%20spaces", "op" },  { "/v1/library?limit=0", "limit" },
            { "/v1/library?limit=201", "limit" },    { "/v1/library?cursor=..%2F", "cursor" },
            { "/v1/library?target=a;b", "target" }, { "/v1/library?colour=red", "colour" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            kf_http_resp r;
            cr_assert_eq(fx_req(&fx, "GET", bad[i][0], fx.user, NULL, &r), 422, "%s: %s", bad[i][0], r.body);
            cr_assert(strstr(r.body, bad[i][1]), "%s names %s: %s", bad[i][0], bad[i][1], r.body);
            kf_http_resp_release(&r);
        }
    }
    /* workers read no library */
    {
        kf_http_resp r;
        cr_assert_eq(fx_req(&fx, "GET", "/v1/library", fx.worker, NULL, &r), 403, "%s", r.body);
        kf_http_resp_release(&r);
    }
    for (int i = 0; i < 4; i++)
        free(jobs[i]);
}

Test(api_library, unknown_entries_are_404)
{
    static const char *const paths[] = {
        "/v1/library/add-trn2-bfloat16-sim-000000000000",
        "/v1/library/add-trn2-bfloat16-sim-000000000000/kernel",
        "/v1/library/..",
        "/v1/library/a%20b/kernel",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        kf_http_resp r;
        cr_assert_eq(fx_req(&fx, "GET", paths[i], fx.user, NULL, &r), 404, "%s: %s", paths[i], r.body);
        cr_assert(strstr(r.body, "urn:kforge:problem:not-found"), "%s", r.body);
        kf_http_resp_release(&r);
    }
}

Test(api_library, a_user_kernel_is_its_owners_and_the_source_is_rebuilt_from_diffs)
{
    const char *spec = "{\"kind\":\"optimize\",\"target\":\"trn2\",\"entry\":\"mykern\","
                       "\"source\":\"def mykern(x, T=1):\\n    return x\\n\","
                       "\"reference\":\"def mykern(x):\\n    return x\\n\","
                       "\"inputs\":{\"x\":{\"shape\":[128,64],\"dtype\":\"float32\"}},\"tunables\":{\"T\":[1,2]}}";
    char *id = fx_submit(&fx, fx.user, spec), *url;
    lease l = fx_lease_job(&fx, id, "trn2");
    kf_err e = KF_ERR_INIT;
    cJSON *list;
    const cJSON *it;
    kf_http_resp r;

    fx_start_job(&fx, id, &l);
    /* seq 1: the whole source; seq 2: a diff against it (the best); no kernel.py kept */
    report_iteration(id, &l, 1, "\"source\":\"def mykern(x, T=1):\\n    return x\\n\"", "{\"T\":1}", 900, true);
    report_iteration(id, &l, 2,
                     "\"source_diff\":\"--- a/kernel.py\\n+++ b/kernel.py\\n@@ -1,2 +1,2 @@\\n-def mykern(x, T=1):\\n"
                     "+def mykern(x, T=2):\\n     return x\\n\"",
                     "{\"T\":2}", 700, true);
    succeed(id, &l, PROV_A);

    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "op"), "user.mykern");
    cr_assert_str_eq(fx_str(it, "dtype"), "float32");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(it, "shared")));
    cr_assert_eq(fx_num(it, "iteration"), 2);
    url = kf_asprintf("%s/v1/library/%s/kernel", fx.base, fx_str(it, "id"));
    cr_assert_eq(kf_http_request("GET", url, fx.user, NULL, NULL, 0, &r), 200, "%s", r.body);
    cr_assert(strstr(r.body, "\ndef mykern(x, T=2):\n    return x\n"), "rebuilt from the diff: %s", r.body);
    kf_http_resp_release(&r);
    /* the rebuilt source is a content no artifact link names: retention
     * (no grace) keeps it because the entry names it */
    {
        kf_artifact_store *st = NULL;
        long links = 0, blobs = 0;
        cr_assert_eq(kf_artifact_store_open("pg", &st, &e), KF_OK, "%s", e.msg);
        cr_assert_eq(kf_artifact_retain(st, fx.pg, 1, 0, &links, &blobs, &e), KF_OK, "%s", e.msg);
        kf_artifact_store_free(st);
        cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifact_blobs b JOIN kernel_library l "
                                     "ON l.source_sha256 = b.sha256", NULL), 1);
        cr_assert_eq(kf_http_request("GET", url, fx.user, NULL, NULL, 0, &r), 200, "%s", r.body);
        kf_http_resp_release(&r);
    }
    /* bob neither lists nor reads alice's kernel; an admin does */
    cr_assert_eq(kf_http_request("GET", url, fx.user2, NULL, NULL, 0, &r), 404, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(kf_http_request("GET", url, fx.admin, NULL, NULL, 0, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cJSON_Delete(list);
    list = fx_get_json(&fx, fx.user2, 200, "/v1/library");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(list, "items")), 0);
    cJSON_Delete(list);
    free(url);
    free(id);
}

Test(api_library, a_second_generate_of_the_same_op_and_shape_gets_a_warm_start)
{
    char *first = run_job(fx.user, ADD_TRN2, 2048, 1200, PROV_A), *second, *other, *path;
    cJSON *job, *list;
    const cJSON *w, *it;
    kf_http_resp r;

    it = only_item(fx.user, "", &list);
    /* another user's generate of the same op and shape starts from the shared entry */
    second = fx_submit(&fx, fx.user2, "{\"kind\":\"generate\"," ADD_TRN2 "}");
    path = kf_asprintf("/v1/jobs/%s", second);
    job = fx_get_json(&fx, fx.user2, 200, "%s", path);
    w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "spec"), "warm_start");
    cr_assert(cJSON_IsObject(w), "warm_start attached: %s", cJSON_PrintUnformatted(job));
    cr_assert_str_eq(fx_str(w, "entry"), fx_str(it, "id"));
    cr_assert_eq(fx_num(cJSON_GetObjectItemCaseSensitive(w, "params"), "TILE_F"), 2048);
    cr_assert_eq(fx_num(w, "latency_ns"), 1200);
    /* and the queue payload the worker reads carries it */
    {
        char key[80];
        redisContext *c = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
        redisReply *rr;
        snprintf(key, sizeof(key), "kf:job:%s", second);
        cr_assert_eq(fx_redis_int_soon(&fx, "EXISTS %s", key, 1), 1);
        freeReplyObject(redisCommand(c, "SELECT %d", fx.redis_db));
        rr = redisCommand(c, "HGET %s payload", key);
        cr_assert(rr && rr->type == REDIS_REPLY_STRING && strstr(rr->str, "\"warm_start\""), "payload: %s",
                  rr && rr->str ? rr->str : "(none)");
        freeReplyObject(rr);
        redisFree(c);
    }
    cJSON_Delete(job);
    free(path);
    /* another shape: no entry, no warm start */
    other = fx_submit(&fx, fx.user2,
                      "{\"kind\":\"generate\",\"op\":\"add\",\"shapes\":[[300,700],[300,700]],\"dtype\":\"bfloat16\","
                      "\"target\":\"trn2\"}");
    path = kf_asprintf("/v1/jobs/%s", other);
    job = fx_get_json(&fx, fx.user2, 200, "%s", path);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "spec"), "warm_start"));
    cJSON_Delete(job);
    free(path);
    /* a client may not set it */
    cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.user,
                        "{\"kind\":\"generate\"," ADD_TRN2 ",\"warm_start\":{\"entry\":\"x\",\"params\":{}}}", &r),
                 422, "%s", r.body);
    cr_assert(strstr(r.body, "warm_start"), "%s", r.body);
    kf_http_resp_release(&r);
    cJSON_Delete(list);
    free(first);
    free(second);
    free(other);
}

Test(api_library, a_tie_keeps_the_entry_and_a_job_without_a_correct_kernel_offers_nothing)
{
    char *a = run_job(fx.user, ADD_TRN2, 1024, 2000, PROV_A), *tie = run_job(fx.user, ADD_TRN2, 512, 2000, PROV_A);
    char *wrong;
    cJSON *list;
    const cJSON *it;
    lease l;

    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), a, "an equal latency is not faster");
    cJSON_Delete(list);
    /* a job whose only iteration is wrong succeeds, and offers nothing */
    wrong = leased(fx.user, "\"op\":\"add\",\"shapes\":[[64,64],[64,64]],\"dtype\":\"bfloat16\",\"target\":\"trn2\"",
                   &l);
    report_iteration(wrong, &l, 1, "\"source\":\"def add(a, b):\\n    return a\\n\"", "{}", 10, false);
    succeed(wrong, &l, PROV_A);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE state = 'succeeded'", NULL), 3);
    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), a);
    cJSON_Delete(list);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM kernel_library_history", NULL), 1);
    /* another provenance that is not newer (the entry's job finished later, as when a result of
     * the old build arrives late) does not replace it, even faster */
    cr_assert_eq(fx_sql_int(&fx, "WITH u AS (UPDATE kernel_library SET job_finished_at = now() + interval '1 hour' "
                                 "RETURNING 1) SELECT count(*) FROM u", NULL),
                 1);
    free(tie);
    tie = run_job(fx.user, ADD_TRN2, 2048, 100, PROV_B);
    it = only_item(fx.user, "", &list);
    cr_assert_str_eq(fx_str(it, "job_id"), a);
    cJSON_Delete(list);
    free(a);
    free(tie);
    free(wrong);
}
