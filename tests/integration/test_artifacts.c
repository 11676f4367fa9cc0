/* Integration tests of artifacts and provenance against real PostgreSQL and
 * Redis (issue 15, docs/runs.md): the worker's upload route (lease checks,
 * limits, idempotency), listing, download (Range, ETag, 304, HEAD),
 * permissions, provenance on results, the PostgreSQL and folder stores
 * behind the API, and retention (kf_artifact_retain and the scheduler). */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kf_artifact.h"
#include "kf_queue.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"
#include "workers/kf_upload.h"

#define REDIS_DB 5

static api_fx fx;
static char *store_dir;   /* the dir suite's KFORGE_ARTIFACT_STORE folder */

static void setup_pg(void)
{
    fx_start(&fx, REDIS_DB, "KFORGE_MAX_ARTIFACT_BYTES=4096\nKFORGE_MAX_BODY_BYTES=65536");
}

static void setup_dir(void)
{
    char *env;

    store_dir = kf_test_tmpdir("artstore");
    env = kf_asprintf("KFORGE_MAX_ARTIFACT_BYTES=4096\nKFORGE_MAX_BODY_BYTES=65536\nKFORGE_ARTIFACT_STORE=dir:%s", store_dir);
    fx_start(&fx, REDIS_DB, env);
    free(env);
}

static void teardown(void)
{
    fx_stop(&fx);
    free(store_dir);
    store_dir = NULL;
}

TestSuite(artifacts, .init = setup_pg, .fini = teardown, .timeout = 120);
TestSuite(artifacts_dir, .init = setup_dir, .fini = teardown, .timeout = 120);

/* ---- helpers ------------------------------------------------------------------ */

typedef fx_lease lease;

/* Submit a diag job as `tok`, lease it for worker w1 and report its start. */
static char *leased_job(const char *tok, lease *l)
{
    char *id = fx_submit(&fx, tok, NULL);

    *l = fx_lease_job(&fx, id, "trn2");
    fx_start_job(&fx, id, l);
    return id;
}

/* POST one artifact as worker token `tok`; the answer in *r (may be NULL). */
static long upload(const char *tok, const char *id, const lease *l, int seq, bool final, const char *name,
                   const char *content, kf_http_resp *r)
{
    cJSON *f = cJSON_CreateObject();
    char *body, *path = kf_asprintf("/v1/internal/jobs/%s/artifacts", id);
    kf_http_resp own;
    long st;

    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "content", content);
    body = kf_upload_artifact_body(l->attempt, l->token, "w1", seq, final, f);
    st = fx_req(&fx, "POST", path, tok, body, r ? r : &own);
    if (!r)
        kf_http_resp_release(&own);
    cJSON_Delete(f);
    free(body);
    free(path);
    return st;
}

static long post_raw(const char *tok, const char *id, const char *body, kf_http_resp *r)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/artifacts", id);
    long st = fx_req(&fx, "POST", path, tok, body, r);
    free(path);
    return st;
}

static void expect_problem(const kf_http_resp *r, const char *slug)
{
    char *want = kf_asprintf("urn:kforge:problem:%s", slug);
    cr_expect(strstr(r->body, want), "want %s: %s", slug, r->body);
    free(want);
}

static long finish(const char *id, const lease *l, const char *extra, kf_http_resp *r)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/result", id);
    char *body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{\"ok\":true}%s}",
                             l->attempt, l->token, extra ? extra : "");
    long st = fx_req(&fx, "POST", path, fx.worker, body, r);
    free(path);
    free(body);
    return st;
}

/* GET with extra header lines (NULL-terminated) and a token. */
static long get_h(const char *path, const char *tok, const char *method, const char *const *headers,
                  kf_http_resp *r)
{
    char *url = kf_asprintf("%s%s", fx.base, path);
    long st = kf_http_request(method, url, tok, headers, NULL, 0, r);
    free(url);
    return st;
}

static const char *TRACE = "{\"traceEvents\":[{\"name\":\"dma\",\"ph\":\"X\",\"ts\":0,\"dur\":1}],"
                           "\"displayTimeUnit\":\"ns\",\"otherData\":{\"kernel\":\"matmul\"}}";

/* ---- upload -------------------------------------------------------------------------- */

static void upload_checks(void)
{
    lease l, stale = { "not-the-token", 1 };
    char *id = leased_job(fx.user, &l), *big, *sha, *body;
    kf_http_resp r;
    cJSON *j;

    /* lease checks: a wrong token is stale; another worker is not the holder */
    cr_assert_eq(upload(fx.worker, id, &stale, 1, false, "kernel.py", "x = 1\n", &r), 409, "%s", r.body);
    expect_problem(&r, "stale-attempt");
    kf_http_resp_release(&r);
    cr_assert_eq(upload(fx.worker2, id, &l, 1, false, "kernel.py", "x = 1\n", &r), 403, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(upload(fx.user, id, &l, 1, false, "kernel.py", "x = 1\n", &r), 403, "users cannot upload: %s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(upload(fx.worker, "0b7f3ac4-1d4e-4b8e-9a55-9d3c5f0e2a11", &l, 1, false, "kernel.py", "x", &r), 404,
                 "no such job: %s", r.body);
    kf_http_resp_release(&r);

    /* bad input: each field named */
    cr_assert_eq(upload(fx.worker, id, &l, 1, false, "../etc/passwd", "x", &r), 422, "%s", r.body);
    cr_expect(strstr(r.body, "\"name\""), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(upload(fx.worker, id, &l, 1, false, ".hidden", "x", &r), 422, "%s", r.body);
    kf_http_resp_release(&r);
    body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"seq\":1,\"name\":\"a.json\","
                       "\"content_base64\":\"not base64!\"}", l.attempt, l.token);
    cr_assert_eq(post_raw(fx.worker, id, body, &r), 422, "%s", r.body);
    cr_expect(strstr(r.body, "content_base64"), "%s", r.body);
    kf_http_resp_release(&r);
    free(body);
    body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"name\":\"a.json\",\"content_base64\":\"\"}", l.attempt,
                       l.token);
    cr_assert_eq(post_raw(fx.worker, id, body, &r), 422, "a missing seq: %s", r.body);
    cr_expect(strstr(r.body, "\"seq\""), "%s", r.body);
    kf_http_resp_release(&r);
    free(body);
    cr_assert_eq(post_raw(fx.worker, id, "[1]", &r), 400, "%s", r.body);
    kf_http_resp_release(&r);

    /* limits: over KFORGE_MAX_ARTIFACT_BYTES decoded is 413 artifact-too-large,
     * a body over its base64 bound 413 before it is read */
    big = kf_calloc(1, 5001);
    memset(big, 'a', 5000);
    cr_assert_eq(upload(fx.worker, id, &l, 1, false, "trace.json", big, &r), 413, "%s", r.body);
    expect_problem(&r, "artifact-too-large");
    kf_http_resp_release(&r);
    free(big);
    big = kf_calloc(1, 200001);
    memset(big, 'a', 200000);
    cr_assert_eq(upload(fx.worker, id, &l, 1, false, "trace.json", big, &r), 413, "%s", r.body);
    expect_problem(&r, "body-too-large");
    kf_http_resp_release(&r);
    free(big);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifacts", NULL), 0, "nothing refused was linked");

    /* accepted once; the same again changes nothing; other bytes under the same key are 409 */
    cr_assert_eq(upload(fx.worker, id, &l, 1, false, "trace.json", TRACE, &r), 200, "%s", r.body);
    j = fx_json(&r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "changed")), "%s", r.body);
    sha = kf_strdup(fx_str(j, "sha256"));
    cr_assert(kf_artifact_sha_valid(sha), "%s", r.body);
    {
        char want[65];
        kf_artifact_sha256_hex(TRACE, strlen(TRACE), want);
        cr_assert_str_eq(sha, want, "named by the SHA-256 of its bytes");
    }
    cJSON_Delete(j);
    kf_http_resp_release(&r);
    cr_assert_eq(upload(fx.worker, id, &l, 1, false, "trace.json", TRACE, &r), 200, "%s", r.body);
    cr_assert(strstr(r.body, "\"changed\":false"), "a repeat is a no-op: %s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(upload(fx.worker, id, &l, 1, false, "trace.json", "{}", &r), 409, "%s", r.body);
    expect_problem(&r, "conflict");
    kf_http_resp_release(&r);
    /* the final set: another link to the same content, stored once */
    cr_assert_eq(upload(fx.worker, id, &l, 1, true, "trace.json", TRACE, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifacts WHERE sha256 = $1", sha), 2);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifacts WHERE final", NULL), 1);

    /* once the job has ended, no more uploads */
    cr_assert_eq(finish(id, &l, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(upload(fx.worker, id, &l, 2, false, "kernel.py", "x = 2\n", &r), 409, "%s", r.body);
    expect_problem(&r, "stale-attempt");
    kf_http_resp_release(&r);
    free(sha);
    free(id);
}

Test(artifacts, uploads_are_lease_checked_bounded_idempotent_and_compressed)
{
    char *codec, *sha;
    char want[65];

    upload_checks();
    kf_artifact_sha256_hex(TRACE, strlen(TRACE), want);
    sha = kf_strdup(want);
    codec = fx_sql(&fx, "SELECT codec FROM artifact_blobs WHERE sha256 = $1", sha);
    cr_assert(codec, "the content is a row of artifact_blobs");
    /* zlib or raw, whichever is smaller; size is the original's */
    cr_expect_eq(fx_sql_int(&fx, "SELECT size FROM artifact_blobs WHERE sha256 = $1", sha), (long)strlen(TRACE));
    cr_expect_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifact_blobs", NULL), 1, "one content for two links");
    free(codec);
    free(sha);
}

Test(artifacts_dir, uploads_go_to_the_folder_store)
{
    char want[65], *path;
    struct stat st;

    upload_checks();
    kf_artifact_sha256_hex(TRACE, strlen(TRACE), want);
    path = kf_asprintf("%s/%.2s/%.2s/%s", store_dir, want, want + 2, want);
    cr_assert_eq(stat(path, &st), 0, "%s is stored in the folder", path);
    cr_assert_eq(st.st_size, (off_t)strlen(TRACE), "kept raw in the folder");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifact_blobs", NULL), 0, "nothing in PostgreSQL");
    free(path);
}

/* ---- listing and download -------------------------------------------------------------- */

static void download_checks(void)
{
    lease l;
    char *id = leased_job(fx.user, &l), *sha, *path, *lpath, *h;
    char range_hdr[200], inm[96];
    size_t n = strlen(TRACE);
    kf_http_resp r;
    cJSON *j, *items, *it;

    cr_assert_eq(upload(fx.worker, id, &l, 3, false, "trace.json", TRACE, NULL), 200);
    cr_assert_eq(upload(fx.worker, id, &l, 3, false, "kernel.py", "def k():\n    pass\n", NULL), 200);
    cr_assert_eq(upload(fx.worker, id, &l, 3, true, "trace.json", TRACE, NULL), 200);

    /* the list: owner and admin see it; another user gets 404 */
    lpath = kf_asprintf("/v1/jobs/%s/artifacts", id);
    cr_assert_eq(fx_req(&fx, "GET", lpath, fx.user, NULL, &r), 200, "%s", r.body);
    j = fx_json(&r);
    items = cJSON_GetObjectItemCaseSensitive(j, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 3, "%s", r.body);
    it = cJSON_GetArrayItem(items, 0);
    cr_assert_str_eq(fx_str(it, "name"), "kernel.py");
    cr_assert_str_eq(fx_str(it, "content_type"), "text/x-python; charset=utf-8");
    it = cJSON_GetArrayItem(items, 2);
    cr_assert_str_eq(fx_str(it, "name"), "trace.json");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "final")));
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(it, "seq")->valueint, 3);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(it, "attempt")->valueint, 1);
    cr_assert_eq((size_t)cJSON_GetObjectItemCaseSensitive(it, "size")->valuedouble, n);
    cr_assert_str_eq(fx_str(it, "content_type"), "application/json");
    cr_assert_not_null(fx_str(it, "created_at"));
    sha = kf_strdup(fx_str(it, "sha256"));
    cJSON_Delete(j);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", lpath, fx.user2, NULL, &r), 404, "another user's job: %s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", lpath, fx.admin, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", lpath, fx.worker, NULL, &r), 403, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs/not-a-uuid/artifacts", fx.user, NULL, &r), 404);
    kf_http_resp_release(&r);
    free(lpath);
    lpath = kf_asprintf("/v1/jobs/%s/artifacts?x=1", id);
    cr_assert_eq(fx_req(&fx, "GET", lpath, fx.user, NULL, &r), 400, "unknown query parameter: %s", r.body);
    kf_http_resp_release(&r);

    /* the bytes, with their headers */
    path = kf_asprintf("/v1/artifacts/%s", sha);
    cr_assert_eq(get_h(path, fx.user, "GET", NULL, &r), 200, "%s", r.body);
    cr_assert_eq(r.body_len, n);
    cr_assert_eq(memcmp(r.body, TRACE, n), 0);
    h = kf_http_header(&r, "Content-Type");
    cr_assert_str_eq(h, "application/json");
    free(h);
    h = kf_http_header(&r, "ETag");
    snprintf(inm, sizeof(inm), "\"%s\"", sha);
    cr_assert_str_eq(h, inm);
    free(h);
    h = kf_http_header(&r, "Cache-Control");
    cr_assert_str_eq(h, "private, max-age=31536000, immutable");
    free(h);
    h = kf_http_header(&r, "Accept-Ranges");
    cr_assert_str_eq(h, "bytes");
    free(h);
    kf_http_resp_release(&r);

    /* Range: a slice, the tail, an open end; past the end is 416 */
    {
        const char *hd[2] = { range_hdr, NULL };
        snprintf(range_hdr, sizeof(range_hdr), "Range: bytes=2-11");
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 206, "%s", r.body);
        cr_assert_eq(r.body_len, 10);
        cr_assert_eq(memcmp(r.body, TRACE + 2, 10), 0);
        h = kf_http_header(&r, "Content-Range");
        snprintf(inm, sizeof(inm), "bytes 2-11/%zu", n);
        cr_assert_str_eq(h, inm);
        free(h);
        kf_http_resp_release(&r);
        snprintf(range_hdr, sizeof(range_hdr), "Range: bytes=-5");
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 206);
        cr_assert_eq(r.body_len, 5);
        cr_assert_eq(memcmp(r.body, TRACE + n - 5, 5), 0);
        kf_http_resp_release(&r);
        snprintf(range_hdr, sizeof(range_hdr), "Range: bytes=%zu-", n - 3);
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 206);
        cr_assert_eq(r.body_len, 3);
        kf_http_resp_release(&r);
        snprintf(range_hdr, sizeof(range_hdr), "Range: bytes=%zu-", n);
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 416, "%s", r.body);
        h = kf_http_header(&r, "Content-Range");
        snprintf(inm, sizeof(inm), "bytes */%zu", n);
        cr_assert_str_eq(h, inm);
        free(h);
        h = kf_http_header(&r, "Cache-Control");
        cr_assert_str_eq(h, "no-store", "an error is not cached");
        free(h);
        expect_problem(&r, "range-not-satisfiable");
        kf_http_resp_release(&r);
        /* several ranges, or a malformed one: the whole content */
        snprintf(range_hdr, sizeof(range_hdr), "Range: bytes=0-1,4-5");
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 200);
        cr_assert_eq(r.body_len, n);
        kf_http_resp_release(&r);
        snprintf(range_hdr, sizeof(range_hdr), "Range: bytes=9-2");
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 200);
        kf_http_resp_release(&r);
        /* If-Range with another tag: the whole content */
        {
            const char *hd2[3] = { "Range: bytes=0-1", "If-Range: \"0000\"", NULL };
            cr_assert_eq(get_h(path, fx.user, "GET", hd2, &r), 200);
            kf_http_resp_release(&r);
        }
        /* If-None-Match: 304 without a body, for the tag, a weak tag or * */
        snprintf(range_hdr, sizeof(range_hdr), "If-None-Match: \"%.8s\", \"%s\"", "deadbeef", sha);
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 304, "%s", r.body);
        cr_assert_eq(r.body_len, 0);
        h = kf_http_header(&r, "ETag");
        cr_assert_not_null(h);
        free(h);
        kf_http_resp_release(&r);
        snprintf(range_hdr, sizeof(range_hdr), "If-None-Match: W/\"%s\"", sha);
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 304);
        kf_http_resp_release(&r);
        snprintf(range_hdr, sizeof(range_hdr), "If-None-Match: \"other\"");
        cr_assert_eq(get_h(path, fx.user, "GET", hd, &r), 200);
        kf_http_resp_release(&r);
    }
    /* HEAD: the headers, no body */
    cr_assert_eq(get_h(path, fx.user, "HEAD", NULL, &r), 200);
    cr_assert_eq(r.body_len, 0);
    h = kf_http_header(&r, "Content-Length");
    snprintf(inm, sizeof(inm), "%zu", n);
    cr_assert_str_eq(h, inm);
    free(h);
    kf_http_resp_release(&r);

    /* permissions: another user's artifact is 404, an admin reads it */
    cr_assert_eq(get_h(path, fx.user2, "GET", NULL, &r), 404, "%s", r.body);
    cr_assert(!strstr(r.body, "traceEvents"));
    kf_http_resp_release(&r);
    cr_assert_eq(get_h(path, fx.admin, "GET", NULL, &r), 200);
    kf_http_resp_release(&r);
    cr_assert_eq(get_h(path, NULL, "GET", NULL, &r), 401);
    kf_http_resp_release(&r);
    cr_assert_eq(get_h("/v1/artifacts/ABC", fx.user, "GET", NULL, &r), 404);
    kf_http_resp_release(&r);
    cr_assert_eq(get_h("/v1/artifacts/0000000000000000000000000000000000000000000000000000000000000000", fx.user,
                       "GET", NULL, &r), 404);
    kf_http_resp_release(&r);
    free(path);
    free(lpath);
    free(sha);
    free(id);
}

Test(artifacts, listed_and_downloaded_with_range_etag_and_permissions)
{
    download_checks();
}

Test(artifacts_dir, listed_and_downloaded_from_the_folder_store)
{
    download_checks();
}

/* ---- provenance ------------------------------------------------------------------------ */

Test(artifacts, provenance_is_validated_stored_with_the_result_and_returned)
{
    lease l;
    char *id = leased_job(fx.user, &l), *path = kf_asprintf("/v1/jobs/%s", id), *v;
    char longs[200];
    kf_http_resp r;
    cJSON *j, *p;

    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200);
    cr_assert(strstr(r.body, "\"provenance\" : {}"), "{} until a result: %s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(finish(id, &l, ",\"provenance\":{\"color\":\"red\"}", &r), 422, "%s", r.body);
    cr_expect(strstr(r.body, "provenance.color"), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(finish(id, &l, ",\"provenance\":{\"sim_build\":7}", &r), 422, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(finish(id, &l, ",\"provenance\":[1]", &r), 422, "%s", r.body);
    kf_http_resp_release(&r);
    memset(longs, 'x', 150);
    longs[150] = '\0';
    v = kf_asprintf(",\"provenance\":{\"backend\":\"%s\"}", longs);
    cr_assert_eq(finish(id, &l, v, &r), 422, "a string over 128 characters: %s", r.body);
    kf_http_resp_release(&r);
    free(v);
    cr_assert_eq(finish(id, &l, ",\"provenance\":{\"backend\":\"a\\nb\"}", &r), 422, "control characters: %s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(finish(id, &l, ",\"provenance\":{\"worker\":\"w2\"}", &r), 403, "another worker: %s", r.body);
    kf_http_resp_release(&r);
    v = fx_sql(&fx, "SELECT state FROM jobs WHERE id = $1::uuid", id);
    cr_assert_str_eq(v, "running", "a refused result changes nothing");
    free(v);
    cr_assert_eq(finish(id, &l,
                        ",\"provenance\":{\"worker\":\"w1\",\"backend\":\"sim\",\"sim_build\":\"src-sha256:0123\","
                        "\"target_hash\":\"aa\",\"template_hash\":\"bb\"}",
                        &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200);
    j = fx_json(&r);
    p = cJSON_GetObjectItemCaseSensitive(j, "provenance");
    cr_assert_str_eq(fx_str(p, "worker"), "w1");
    cr_assert_str_eq(fx_str(p, "backend"), "sim");
    cr_assert_str_eq(fx_str(p, "sim_build"), "src-sha256:0123");
    cr_assert_str_eq(fx_str(p, "target_hash"), "aa");
    cr_assert_str_eq(fx_str(p, "template_hash"), "bb");
    cJSON_Delete(j);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user2, NULL, &r), 404);
    kf_http_resp_release(&r);
    free(path);
    free(id);
}

/* ---- the PostgreSQL store, directly ------------------------------------------------------ */

Test(artifacts, pg_store_compresses_reads_ranges_and_is_idempotent)
{
    kf_artifact_store *s = NULL;
    kf_err e = KF_ERR_INIT;
    kf_buf text = KF_BUF_INIT, out = KF_BUF_INIT;
    char sha[65], sha2[65];
    uint64_t size = 0;
    PGresult *res;

    cr_assert_eq(kf_artifact_store_open("pg", &s, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(kf_artifact_store_kind(s), "pg");
    for (int i = 0; i < 2000; i++)
        kf_buf_addf(&text, "{\"name\":\"dma_copy\",\"ts\":%d,\"dur\":3},", i);
    cr_assert_eq(kf_artifact_put(s, fx.pg, text.data, text.len, sha, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(kf_artifact_put(s, fx.pg, text.data, text.len, sha2, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(sha, sha2);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifact_blobs", NULL), 1);
    res = PQexecParams(fx.pg, "SELECT codec, octet_length(data), size FROM artifact_blobs WHERE sha256 = $1", 1, NULL,
                       (const char *const[]){ sha }, NULL, NULL, 0);
    cr_assert_eq(PQntuples(res), 1);
    cr_assert_str_eq(PQgetvalue(res, 0, 0), "zlib");
    cr_assert_lt(atol(PQgetvalue(res, 0, 1)) * 4, (long)text.len, "JSON shrinks at least 4x");
    cr_assert_eq(atol(PQgetvalue(res, 0, 2)), (long)text.len);
    PQclear(res);
    cr_assert_eq(kf_artifact_get(s, fx.pg, sha, 0, KF_ARTIFACT_TO_END, &out, &size, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(size, text.len);
    cr_assert_eq(out.len, text.len);
    cr_assert_eq(memcmp(out.data, text.data, text.len), 0);
    kf_buf_reset(&out);
    cr_assert_eq(kf_artifact_get(s, fx.pg, sha, 100, 50, &out, &size, &e), KF_OK);
    cr_assert_eq(out.len, 50);
    cr_assert_eq(memcmp(out.data, text.data + 100, 50), 0);
    kf_buf_reset(&out);
    cr_assert_eq(kf_artifact_get(s, fx.pg, sha, text.len + 5, 10, &out, &size, &e), KF_OK);
    cr_assert_eq(out.len, 0, "past the end: nothing");
    memset(sha2, 'a', 64);
    cr_assert_eq(kf_artifact_get(s, fx.pg, sha2, 0, 1, &out, &size, &e), KF_NOT_FOUND);
    cr_assert_eq(kf_artifact_get(s, fx.pg, "../../etc", 0, 1, &out, &size, &e), KF_NOT_FOUND);
    /* a corrupt row is an error, not wrong bytes */
    PQclear(PQexecParams(fx.pg, "UPDATE artifact_blobs SET data = '\\x0102' WHERE sha256 = $1", 1, NULL,
                         (const char *const[]){ sha }, NULL, NULL, 0));
    cr_assert_eq(kf_artifact_get(s, fx.pg, sha, 0, 1, &out, &size, &e), KF_INTERNAL);
    kf_buf_release(&text);
    kf_buf_release(&out);
    kf_artifact_store_free(s);
}

/* ---- retention ------------------------------------------------------------------------------ */

/* Two jobs: `old` finished 10 days ago with best-so-far and final links,
 * `fresh` still running and sharing one content with old's best-so-far. */
static void retention_jobs(char **old, char **fresh)
{
    lease lo, lf;
    kf_http_resp r;

    *old = leased_job(fx.user, &lo);
    *fresh = leased_job(fx.user, &lf);
    cr_assert_eq(upload(fx.worker, *old, &lo, 1, false, "kernel.py", "only old's best\n", NULL), 200);
    cr_assert_eq(upload(fx.worker, *old, &lo, 1, false, "profile.json", "{\"shared\":1}", NULL), 200);
    cr_assert_eq(upload(fx.worker, *old, &lo, 2, false, "kernel.py", "old's final\n", NULL), 200);
    cr_assert_eq(upload(fx.worker, *old, &lo, 2, true, "kernel.py", "old's final\n", NULL), 200);
    cr_assert_eq(upload(fx.worker, *fresh, &lf, 1, false, "profile.json", "{\"shared\":1}", NULL), 200);
    cr_assert_eq(finish(*old, &lo, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    PQclear(PQexecParams(fx.pg, "UPDATE jobs SET finished_at = now() - interval '10 days' WHERE id = $1::uuid", 1, NULL,
                         (const char *const[]){ *old }, NULL, NULL, 0));
}

static void retention_after(const char *old, const char *fresh)
{
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifacts WHERE job_id = $1::uuid", old), 1,
                 "only old's final set is left");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifacts WHERE job_id = $1::uuid AND final", old), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM artifacts WHERE job_id = $1::uuid", fresh), 1,
                 "a running job keeps all");
}

Test(artifacts, retention_keeps_final_sets_and_referenced_contents)
{
    kf_artifact_store *s = NULL;
    kf_err e = KF_ERR_INIT;
    char *old, *fresh, sha[65];
    long links = -1, blobs = -1;
    kf_buf out = KF_BUF_INIT;
    uint64_t size;

    retention_jobs(&old, &fresh);
    cr_assert_eq(kf_artifact_store_open("pg", &s, &e), KF_OK);
    /* 30 days: nothing is old enough */
    cr_assert_eq(kf_artifact_retain(s, fx.pg, 30, 0, &links, &blobs, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(links, 0);
    cr_assert_eq(blobs, 0);
    /* within the grace period an unreferenced content stays */
    cr_assert_eq(kf_artifact_retain(s, fx.pg, 7, 3600, &links, &blobs, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(links, 3, "old's two best-so-far links of seq 1 and its non-final seq 2 link: %ld", links);
    cr_assert_eq(blobs, 0);
    retention_after(old, fresh);
    cr_assert_eq(kf_artifact_retain(s, fx.pg, 7, 0, &links, &blobs, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(links, 0);
    cr_assert_eq(blobs, 1, "only \"only old's best\" had no link left");
    kf_artifact_sha256_hex("{\"shared\":1}", 12, sha);
    cr_assert_eq(kf_artifact_get(s, fx.pg, sha, 0, KF_ARTIFACT_TO_END, &out, &size, &e), KF_OK,
                 "a content another job links stays");
    kf_artifact_sha256_hex("only old's best\n", 16, sha);
    cr_assert_eq(kf_artifact_get(s, fx.pg, sha, 0, KF_ARTIFACT_TO_END, &out, &size, &e), KF_NOT_FOUND);
    kf_buf_release(&out);
    kf_artifact_store_free(s);
    free(old);
    free(fresh);
}

Test(artifacts_dir, retention_removes_unreferenced_files)
{
    kf_artifact_store *s = NULL;
    kf_err e = KF_ERR_INIT;
    char *old, *fresh, *spec = kf_asprintf("dir:%s", store_dir), sha[65], *path;
    long links = -1, blobs = -1;
    struct stat st;

    retention_jobs(&old, &fresh);
    cr_assert_eq(kf_artifact_store_open(spec, &s, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(kf_artifact_store_kind(s), "dir");
    cr_assert_eq(kf_artifact_retain(s, fx.pg, 7, 3600, &links, &blobs, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(links, 3);
    cr_assert_eq(blobs, 0, "files touched within the grace period stay");
    retention_after(old, fresh);
    free(old);
    free(fresh);
    /* a new retention finds no links left to delete: the orphan file is
     * only found through the links a run deletes, so run one on a fresh pair */
    retention_jobs(&old, &fresh);
    cr_assert_eq(kf_artifact_retain(s, fx.pg, 7, 0, &links, &blobs, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(links, 3);
    cr_assert_eq(blobs, 1, "the file only old's best linked went; the shared one stayed");
    kf_artifact_sha256_hex("only old's best\n", 16, sha);
    path = kf_asprintf("%s/%.2s/%.2s/%s", store_dir, sha, sha + 2, sha);
    cr_assert_neq(stat(path, &st), 0, "%s is gone", path);
    free(path);
    kf_artifact_sha256_hex("{\"shared\":1}", 12, sha);
    path = kf_asprintf("%s/%.2s/%.2s/%s", store_dir, sha, sha + 2, sha);
    cr_assert_eq(stat(path, &st), 0, "%s stays", path);
    free(path);
    kf_artifact_store_free(s);
    free(spec);
    free(old);
    free(fresh);
}

Test(artifacts, the_scheduler_applies_the_retention_setting)
{
    char *old, *fresh, *bin = kf_test_bin("kforge-scheduler"), *log = kf_asprintf("%s/sched.log", fx.dir);
    char *argv[] = { bin, NULL };
    char *env[8];
    pid_t pid;
    long left = -1;

    retention_jobs(&old, &fresh);
    env[0] = fx_env("KFORGE_PG_DSN", fx.dsn);
    env[1] = fx_env("KFORGE_REDIS_URL", fx.redis_url);
    env[2] = fx_env("KFORGE_ARTIFACT_RETENTION_DAYS", "7");
    env[3] = fx_env("KFORGE_SCHED_TICK_MS", "100");
    env[4] = fx_env("KFORGE_LEADER_TTL_MS", "1000");
    env[5] = NULL;
    pid = kf_test_spawn(argv, env, log);
    for (int i = 0; i < 200 && left != 1; i++) {
        kf_test_sleep_ms(50);
        left = fx_sql_int(&fx, "SELECT count(*) FROM artifacts WHERE job_id = $1::uuid", old);
    }
    kf_test_stop(pid, SIGTERM, 10000);
    cr_assert_eq(left, 1, "the scheduler kept only old's final set; see %s", log);
    retention_after(old, fresh);
    for (int i = 0; env[i]; i++)
        free(env[i]);
    free(bin);
    free(log);
    free(old);
    free(fresh);
}
