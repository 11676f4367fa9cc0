/* Integration tests of batches (issue 16, docs/batches.md) against the real
 * PostgreSQL and Redis: POST /v1/batches from a matrix and from the kernel
 * library, its limits and Idempotency-Key, the roll-up as jobs finish
 * (driven through the worker-facing internal routes), cancel, the list,
 * reports against a crafted baseline, and the batch's event stream.
 * A report's history (states, iterations, provenance) is written with SQL,
 * as the worker reports would leave it, as test_api_runs.c does. */
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <unistd.h>

#include "kf_buf.h"
#include "kf_queue.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"

#define REDIS_DB 15

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, "KFORGE_LOG_LEVEL=info\nKFORGE_MAX_BATCH_JOBS=100\nKFORGE_MAX_OPEN_BATCHES=3\n"
                            "KFORGE_SSE_HEARTBEAT_S=1");
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(batches, .init = setup, .fini = teardown, .timeout = 120);

/* ---- helpers ------------------------------------------------------------------- */

static void sql_exec(const char *sql, const char *a, const char *b)
{
    const char *params[2] = { a, b };
    int n = b ? 2 : (a ? 1 : 0);
    PGresult *r = PQexecParams(fx.pg, sql, n, NULL, params, NULL, NULL, 0);

    cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
}

static long post(const char *path, const char *token, const char *idem, const char *body, kf_http_resp *r)
{
    char *url = kf_asprintf("%s%s", fx.base, path);
    char *auth = kf_asprintf("Authorization: Bearer %s", token);
    char *ik = idem ? kf_asprintf("Idempotency-Key: \"%s\"", idem) : NULL;
    const char *hdr[] = { auth, "Content-Type: application/json", ik, NULL };
    long st = kf_http_request("POST", url, NULL, hdr, body, body ? strlen(body) : 0, r);

    free(url);
    free(auth);
    free(ik);
    return st;
}

/* POST /v1/batches that must be accepted; returns the batch document. */
static cJSON *create(const char *token, const char *body)
{
    kf_http_resp r;
    cJSON *v;
    char *loc;

    cr_assert_eq(post("/v1/batches", token, NULL, body, &r), 202, "%s", r.body);
    v = fx_json(&r);
    loc = kf_http_header(&r, "Location");
    cr_assert_not_null(loc);
    cr_assert(strstr(loc, fx_str(v, "id")), "Location %s names the batch", loc);
    free(loc);
    kf_http_resp_release(&r);
    return v;
}

static char *create_id(const char *token, const char *body)
{
    cJSON *v = create(token, body);
    char *id = kf_strdup(fx_str(v, "id"));
    cJSON_Delete(v);
    return id;
}

/* A 422 (or other status) whose errors name `field` with `rule`. */
static void refused(const char *body, long status, const char *field, const char *rule)
{
    kf_http_resp r;
    cJSON *v;
    const cJSON *e;
    bool found = false;

    cr_assert_eq(post("/v1/batches", fx.user, NULL, body, &r), status, "%s -> %s", body, r.body);
    v = fx_json(&r);
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(v, "errors"))
    {
        if (strcmp(fx_str(e, "field"), field) == 0 && (!rule || strcmp(fx_str(e, "rule"), rule) == 0))
            found = true;
    }
    cr_assert(found, "%s: no error on %s (%s): %s", body, field, rule ? rule : "any", r.body);
    cJSON_Delete(v);
    kf_http_resp_release(&r);
}

static int count_of(const cJSON *batch, const char *state)
{
    return (int)fx_num(cJSON_GetObjectItem(batch, "counts"), state);
}

/* The job of a batch at matrix position seq. */
static char *job_at(const char *batch, int seq)
{
    char sql[200];
    snprintf(sql, sizeof(sql), "SELECT id::text FROM jobs WHERE batch_id = $1::uuid AND (batch_entry->>'seq')::int = %d",
             seq);
    return fx_sql(&fx, sql, batch);
}

/* ---- driving a job as a worker does ------------------------------------------------ */

typedef fx_lease lease;

static lease lease_job(const char *id, const char *target)
{
    return fx_lease_job(&fx, id, target);
}

static void report(const char *id, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(const char *id, const char *what, const char *fmt, ...)
{
    va_list ap;
    char *body, *path = kf_asprintf("/v1/internal/jobs/%s/%s", id, what);
    kf_http_resp r;
    long st;

    va_start(ap, fmt);
    cr_assert(vasprintf(&body, fmt, ap) >= 0);
    va_end(ap);
    st = fx_req(&fx, "POST", path, fx.worker, body, &r);
    cr_assert_eq(st, 200, "%s %s: %ld %s", what, body, st, r.body);
    kf_http_resp_release(&r);
    free(body);
    free(path);
}

/* Lease, start, one correct iteration of latency lat (floor floor_ns),
 * and the final result. */
static void run_job(const char *id, const char *target, double lat, double floor_ns, const char *state)
{
    lease l = lease_job(id, target);

    report(id, "start", "{\"attempt\":%d,\"lease_token\":\"%s\",\"worker\":\"w1\"}", l.attempt, l.token);
    if (lat > 0)
        report(id, "iterations",
               "{\"attempt\":%d,\"lease_token\":\"%s\",\"seq\":0,\"latency_ns\":%g,\"correct\":true,"
               "\"params\":{},\"profile\":{\"latency_ns\":%g,\"floor_ns\":%g},\"findings\":[],"
               "\"action\":\"tune\",\"reason\":\"r\"}",
               l.attempt, l.token, lat, lat, floor_ns);
    if (strcmp(state, "failed") == 0)
        report(id, "result", "{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"failed\",\"retry\":false,"
                             "\"error\":\"boom\",\"result\":{}}", l.attempt, l.token);
    else
        report(id, "result", "{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{}}",
               l.attempt, l.token);
}

/* A diag batch with one job per target (diag jobs run on backend diag). */
static const char *const DIAG3 =
    "{\"name\":\"diag3\",\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn1\",\"trn2\",\"trn3\"]}}";

/* ---- create ------------------------------------------------------------------------ */

Test(batches, a_matrix_becomes_one_job_per_entry_written_with_its_events_and_queued)
{
    cJSON *b = create(fx.user, "{\"name\":\"retune\",\"template\":{\"kind\":\"generate\",\"budget\":{\"iterations\":4}},"
                               "\"matrix\":{\"op\":[\"rmsnorm\",\"softmax\"],\"shapes\":[[[256,512],[512]],[[128,64]]],"
                               "\"dtype\":[\"bfloat16\"],\"target\":[\"trn2\",\"trn3\"]}}");
    const char *id = fx_str(b, "id");

    cr_assert_eq(fx_num(b, "n_jobs"), 8);
    cr_assert_eq(fx_num(b, "priority"), 2, "a batch runs below interactive work by default");
    cr_assert_str_eq(fx_str(b, "source"), "matrix");
    cr_assert_str_eq(fx_str(b, "state"), "open");
    cr_assert_eq(strlen(fx_str(b, "matrix_hash")), 64);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE batch_id = $1::uuid", id), 8);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE batch_id = $1::uuid AND priority = 2 AND "
                                 "kind = 'generate' AND budget->>'iterations' = '4'", id), 8);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id WHERE "
                                 "j.batch_id = $1::uuid AND e.type = 'created'", id), 8, "a created event per job");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(DISTINCT batch_entry->>'key') FROM jobs WHERE batch_id = $1::uuid", id),
                 8);
    /* The matrix order: the last axis (target) varies fastest. */
    {
        char *k0 = fx_sql(&fx, "SELECT batch_entry->>'key' FROM jobs WHERE batch_id = $1::uuid AND "
                               "(batch_entry->>'seq')::int = 0", id);
        char *k1 = fx_sql(&fx, "SELECT batch_entry->>'key' FROM jobs WHERE batch_id = $1::uuid AND "
                               "(batch_entry->>'seq')::int = 1", id);
        cr_assert_str_eq(k0, "rmsnorm|256x512,512|bfloat16|trn2");
        cr_assert_str_eq(k1, "rmsnorm|256x512,512|bfloat16|trn3");
        free(k0);
        free(k1);
    }
    /* On Redis by the API itself, their outbox rows gone once delivered. */
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:sim:trn2", 4), 4);
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:sim:trn3", 4), 4);
    cr_assert_eq(fx_sql_int_soon(&fx, "SELECT count(*) FROM outbox", NULL, 0), 0);
    cJSON_Delete(b);
}

/* The batch's reply warns once per (target, backend) pair of its cells
 * that no worker has ever offered; the jobs are accepted and wait. */
Test(batches, the_create_reply_warns_about_pairs_no_worker_ever_offered)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(fx.redis_url, &e);
    const char *trn2 = "trn2", *sim = "sim";
    kf_queue_caps c = { &trn2, 1, &sim, 1 };
    const cJSON *w;
    cJSON *b;

    cr_assert_not_null(q, "%s", e.msg);
    cr_assert_eq(kf_queue_heartbeat(q, "w-sim", "{\"id\":\"w-sim\"}", 60000, &c, &e), KF_OK, "%s", e.msg);
    kf_queue_free(q);

    b = create(fx.user, "{\"template\":{\"kind\":\"generate\",\"backend\":\"neuron\"},\"matrix\":{\"op\":[\"add\",\"mul\"],"
                        "\"shapes\":[[[64,64],[64,64]]],\"dtype\":[\"float32\"],\"target\":[\"trn2\",\"trn3\"]}}");
    w = cJSON_GetObjectItem(b, "warnings");
    cr_assert_eq(cJSON_GetArraySize(w), 2, "one warning per pair, not per cell");
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(w, 0), "code"), "capability-never-offered");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(cJSON_GetArrayItem(w, 0), "capability"), "backend"), "neuron");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(cJSON_GetArrayItem(w, 0), "capability"), "target"), "trn2");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(cJSON_GetArrayItem(w, 1), "capability"), "target"), "trn3");
    cr_assert_eq(fx_num(b, "n_jobs"), 4, "accepted all the same");
    cJSON_Delete(b);
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:neuron:trn2", 2), 2);

    b = create(fx.user, "{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"add\"],"
                        "\"shapes\":[[[64,64],[64,64]]],\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}");
    cr_assert_null(cJSON_GetObjectItem(b, "warnings"), "a worker offered (trn2, sim)");
    cJSON_Delete(b);
}

/* A batch's generate jobs get the kernel library's warm start as single
 * POST /v1/jobs do (docs/library.md), looked up once for the batch. */
Test(batches, generate_jobs_of_a_batch_start_warm_from_the_library)
{
    cJSON *b;
    kf_http_resp r;

    sql_exec("INSERT INTO kernel_library (id, kernel, shape, dtype, target, backend, entry, params, source_sha256, "
             "latency_ns, job_id, attempt, seq, job_finished_at) VALUES ('rmsnorm.e1', 'rmsnorm', "
             "'[[256, 512], [512]]', 'bfloat16', 'trn2', 'sim', 'rmsnorm_kernel', '{\"TILE\": 128}', "
             "repeat('a', 64), 900, gen_random_uuid(), 1, 3, now())",
             NULL, NULL);
    b = create(fx.user, "{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"rmsnorm\"],"
                        "\"shapes\":[[[256,512],[512]],[[128,64],[64]]],\"dtype\":[\"bfloat16\"],"
                        "\"target\":[\"trn2\",\"trn3\"]}}");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE batch_id = $1::uuid AND "
                                 "spec->'warm_start'->>'entry' = 'rmsnorm.e1' AND "
                                 "spec->'warm_start'->'params'->>'TILE' = '128' AND "
                                 "batch_entry->>'key' = 'rmsnorm|256x512,512|bfloat16|trn2'",
                            fx_str(b, "id")),
                 1, "the entry's shape and target start warm");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE batch_id = $1::uuid AND spec ? 'warm_start'",
                            fx_str(b, "id")),
                 1, "other shapes and targets do not");
    cJSON_Delete(b);
    /* A template may not carry one. */
    cr_assert_eq(post("/v1/batches", fx.user, NULL,
                      "{\"template\":{\"kind\":\"generate\",\"warm_start\":{\"entry\":\"x\","
                      "\"params\":{}}},\"matrix\":{\"op\":[\"rmsnorm\"],\"shapes\":[[[256,512],[512]]],"
                      "\"dtype\":[\"bfloat16\"],\"target\":[\"trn2\"]}}",
                      &r),
                 422, "%s", r.body);
    cr_assert(strstr(r.body, "warm_start"), "%s", r.body);
    kf_http_resp_release(&r);
}

Test(batches, the_library_form_makes_every_op_at_its_declared_shapes)
{
    cJSON *b = create(fx.user, "{\"library\":\"all\",\"targets\":[\"trn2\",\"trn3\"]}"), *g;
    const char *id = fx_str(b, "id");
    long ops;
    char *shape;

    ops = fx_sql_int(&fx, "SELECT count(DISTINCT spec->>'op') FROM jobs WHERE batch_id = $1::uuid", id);
    cr_assert_geq(ops, 10, "every template of kernels/ (%ld ops)", ops);
    cr_assert_eq(fx_num(b, "n_jobs"), 2 * ops);
    cr_assert_str_eq(fx_str(b, "source"), "library");
    shape = fx_sql(&fx, "SELECT batch_entry->>'shape' FROM jobs WHERE batch_id = $1::uuid AND spec->>'op' = "
                        "'rmsnorm' AND target = 'trn2'", id);
    cr_assert_str_eq(shape, "4096x8192,8192", "rmsnorm's reference_shapes");
    free(shape);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs WHERE batch_id = $1::uuid AND spec->>'dtype' = "
                                 "'bfloat16'", id), 2 * ops, "bfloat16 when no dtype is given");
    g = fx_get_json(&fx, fx.user, 200, "/v1/batches/%s?limit=3", id);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g, "entries")), 3);
    cJSON_Delete(g);
    cJSON_Delete(b);

    b = create(fx.user, "{\"library\":[\"softmax\",\"matmul\"],\"targets\":[\"trn1\"],\"dtypes\":[\"float32\"]}");
    cr_assert_eq(fx_num(b, "n_jobs"), 2);
    cJSON_Delete(b);
    refused("{\"library\":[\"softmax\",\"no_such_op\"],\"targets\":[\"trn1\"]}", 422, "library[1]", "enum");
    refused("{\"library\":\"some\",\"targets\":[\"trn1\"]}", 422, "library", "enum");
    refused("{\"library\":\"all\"}", 422, "targets", "required");
    refused("{\"library\":\"all\",\"targets\":[\"trn2\"],\"matrix\":{}}", 422, "matrix", "exclusive");
}

Test(batches, bad_requests_and_limits_are_422_naming_the_field)
{
    char *big;
    kf_buf ops = KF_BUF_INIT;

    refused("{\"template\":{\"kind\":\"generate\"},\"matrix\":{}}", 422, "matrix", "required");
    refused("{\"template\":{\"kind\":\"generate\",\"op\":\"a\"},\"matrix\":{\"op\":[\"b\"],\"shapes\":[[[1]]],"
            "\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}", 422, "template.op", "axis");
    refused("{\"template\":{\"kind\":\"diag\",\"priority\":9},\"matrix\":{\"target\":[\"trn2\"]}}", 422,
            "template.priority", "batch");
    refused("{\"priority\":7,\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn2\"]}}", 422, "priority",
            "batch");
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn2\",\"trn2\"]}}", 422, "matrix.target[1]",
            "unique");
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"op\":[\"a\"],\"target\":[\"trn2\"]}}", 422,
            "template.kind", "axis");
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn9\"]}}", 422, "entries[0].target", "enum");
    refused("{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\"],\"dtype\":[\"float32\"],"
            "\"target\":[\"trn2\"]}}", 422, "entries[0].shapes", "required");
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"colour\":[\"red\"]}}", 422, "matrix.colour", "unknown");

    /* 11 x 10 = 110 jobs > KFORGE_MAX_BATCH_JOBS (100 here): refused before any job is built. */
    kf_buf_adds(&ops, "[");
    for (int i = 0; i < 11; i++)
        kf_buf_addf(&ops, "%s\"op%d\"", i ? "," : "", i);
    kf_buf_adds(&ops, "]");
    big = kf_asprintf("{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":%s,\"shapes\":[[[1]],[[2]],[[3]],"
                      "[[4]],[[5]],[[6]],[[7]],[[8]],[[9]],[[10]]],\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}",
                      ops.data);
    refused(big, 422, "matrix", "limit");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM batches", NULL), 0, "nothing written for refused batches");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 0);
    free(big);
    kf_buf_release(&ops);

    /* KFORGE_MAX_OPEN_BATCHES = 3: a fourth open batch is refused, and
     * accepted once one is cancelled (another user is not counted). */
    {
        char *ids[3];
        kf_http_resp r;
        for (int i = 0; i < 3; i++)
            ids[i] = create_id(fx.user, DIAG3);
        refused(DIAG3, 422, "batches", "limit");
        free(create_id(fx.user2, DIAG3));
        {
            char *path = kf_asprintf("/v1/batches/%s/cancel", ids[0]);
            cr_assert_eq(post(path, fx.user, NULL, NULL, &r), 200, "%s", r.body);
            kf_http_resp_release(&r);
            free(path);
        }
        free(create_id(fx.user, DIAG3));
        for (int i = 0; i < 3; i++)
            free(ids[i]);
    }
}

Test(batches, an_idempotency_key_replays_the_batch_and_refuses_another_body)
{
    kf_http_resp a, b;
    char *rep;

    cr_assert_eq(post("/v1/batches", fx.user, "b-1", DIAG3, &a), 202, "%s", a.body);
    cr_assert_eq(post("/v1/batches", fx.user, "b-1", DIAG3, &b), 202, "%s", b.body);
    cr_assert_str_eq(a.body, b.body);
    rep = kf_http_header(&b, "Idempotent-Replayed");
    cr_assert_not_null(rep, "the second answer is a replay");
    free(rep);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM batches", NULL), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 3);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM batches WHERE idempotency_key = 'b-1'", NULL), 1);
    kf_http_resp_release(&a);
    kf_http_resp_release(&b);
    cr_assert_eq(post("/v1/batches", fx.user, "b-1",
                      "{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn1\"]}}", &a), 422, "%s", a.body);
    kf_http_resp_release(&a);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 3);
}

Test(batches, interactive_jobs_are_leased_before_a_queued_batch)
{
    char *bid = create_id(fx.user, "{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\",\"b\",\"c\",\"d\"],"
                                    "\"shapes\":[[[64,64]]],\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}");
    char *job;
    lease l;

    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:sim:trn2", 4), 4);
    job = fx_submit(&fx, fx.user2, NULL);   /* a notebook's job, priority 5, submitted after */
    l = lease_job(job, "trn2");             /* asserts the first job leased is this one */
    cr_assert_eq(l.attempt, 1);
    free(job);
    free(bid);
}

/* ---- roll-up, cancel, list --------------------------------------------------------------- */

Test(batches, the_roll_up_counts_move_as_jobs_finish_and_cancel_ends_the_rest)
{
    char *bid = create_id(fx.user, DIAG3), *j0 = job_at(bid, 0), *j1 = job_at(bid, 1), *j2 = job_at(bid, 2);
    cJSON *b, *e;
    char *path = kf_asprintf("/v1/batches/%s/cancel", bid);
    kf_http_resp r;

    b = fx_get_json(&fx, fx.user, 200, "/v1/batches/%s", bid);
    cr_assert_eq(count_of(b, "queued"), 3);
    cr_assert_eq(fx_num(b, "progress"), 0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(b, "started_at")));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "entries")), 3);
    cJSON_Delete(b);

    run_job(j0, "trn1", 2000, 1000, "succeeded");
    b = fx_get_json(&fx, fx.user, 200, "/v1/batches/%s", bid);
    cr_assert_eq(count_of(b, "succeeded"), 1);
    cr_assert_eq(count_of(b, "queued"), 2);
    cr_assert_float_eq(fx_num(b, "progress"), 0.3333, 1e-4);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(b, "started_at")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(b, "finished_at")), "not finished while jobs are open");
    e = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "entries"), 0);
    cr_assert_str_eq(fx_str(e, "job_id"), j0);
    cr_assert_str_eq(fx_str(e, "target"), "trn1");
    cr_assert_str_eq(fx_str(e, "state"), "succeeded");
    cr_assert_eq(fx_num(cJSON_GetObjectItem(e, "best"), "latency_ns"), 2000);
    cr_assert_float_eq(fx_num(cJSON_GetObjectItem(e, "best"), "fraction_of_bound"), 0.5, 1e-9);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "entries"), 1), "best")));
    cJSON_Delete(b);

    run_job(j1, "trn2", 0, 0, "failed");
    /* j2 running when the batch is cancelled: its cancel is asked for. */
    {
        lease l = lease_job(j2, "trn3");
        report(j2, "start", "{\"attempt\":%d,\"lease_token\":\"%s\",\"worker\":\"w1\"}", l.attempt, l.token);
    }
    cr_assert_eq(post(path, fx.user2, NULL, NULL, &r), 404, "another user's batch: %s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(post(path, fx.user, NULL, "{\"reason\":\"done here\"}", &r), 200, "%s", r.body);
    b = fx_json(&r);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_num(b, "cancel_requested"), 1);
    cr_assert_eq(fx_num(b, "cancelled"), 0);
    cJSON_Delete(b);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE job_id = $1::uuid AND type = "
                                 "'cancel_requested' AND detail->>'reason' = 'done here'", j2), 1);
    /* The running job's holder was told through Redis, so its outbox cancel row is gone. */
    cr_assert_eq(fx_sql_int_soon(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1::uuid", j2, 0), 0);
    /* Again: nothing more to do, still 200. */
    cr_assert_eq(post(path, fx.user, NULL, NULL, &r), 200, "%s", r.body);
    b = fx_json(&r);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_num(b, "cancel_requested") + fx_num(b, "cancelled"), 0);
    cr_assert_str_eq(fx_str(b, "state"), "open", "the running job has not stopped yet");
    cJSON_Delete(b);
    free(path);
    free(j0);
    free(j1);
    free(j2);
    free(bid);
}

Test(batches, cancel_moves_every_queued_job_through_the_lifecycle)
{
    char *bid = create_id(fx.user, "{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\",\"b\",\"c\",\"d\","
                                    "\"e\"],\"shapes\":[[[64,64]]],\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}");
    char *path = kf_asprintf("/v1/batches/%s/cancel", bid);
    kf_http_resp r;
    cJSON *b;

    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:sim:trn2", 5), 5);
    cr_assert_eq(post(path, fx.user, NULL, NULL, &r), 200, "%s", r.body);
    b = fx_json(&r);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_num(b, "cancelled"), 5);
    cr_assert_str_eq(fx_str(b, "state"), "finished");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(b, "finished_at")));
    cr_assert_eq(count_of(b, "cancelled"), 5);
    cr_assert_float_eq(fx_num(b, "progress"), 1.0, 1e-9);
    cJSON_Delete(b);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id WHERE "
                                 "j.batch_id = $1::uuid AND e.type = 'cancelled' AND e.detail->>'batch' = j.batch_id::text",
                            bid), 5, "one cancelled event per job, naming the batch");
    cr_assert_eq(fx_redis_int_soon(&fx, "ZCARD %s", "kf:wait:sim:trn2", 0), 0, "the queue let go of them");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM outbox", NULL), 0, "the cancels Redis took leave no outbox row");
    free(path);
    free(bid);
}

Test(batches, the_list_pages_newest_first_and_is_owner_scoped)
{
    char *ids[3];
    cJSON *p1, *p2, *all;
    const char *cur;

    for (int i = 0; i < 3; i++) {
        ids[i] = create_id(fx.user, DIAG3);
        sql_exec("UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE batch_id = $1::uuid", ids[i], NULL);
    }
    p1 = fx_get_json(&fx, fx.user, 200, "/v1/batches?limit=2");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(p1, "items")), 2);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(p1, "items"), 0), "id"), ids[2]);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(p1, "items"), 1), "id"), ids[1]);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(p1, "items"), 0), "state"), "finished");
    cur = fx_str(p1, "next_cursor");
    cr_assert_not_null(cur);
    p2 = fx_get_json(&fx, fx.user, 200, "/v1/batches?limit=2&cursor=%s", cur);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(p2, "items")), 1);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(p2, "items"), 0), "id"), ids[0]);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(p2, "next_cursor")));
    all = fx_get_json(&fx, fx.user2, 200, "/v1/batches");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(all, "items")), 0, "bob sees none of alice's batches");
    cJSON_Delete(all);
    all = fx_get_json(&fx, fx.admin, 200, "/v1/batches");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(all, "items")), 3, "an admin sees every batch");
    cJSON_Delete(all);
    cJSON_Delete(fx_get_json(&fx, fx.user2, 404, "/v1/batches/%s", ids[0]));
    cJSON_Delete(fx_get_json(&fx, fx.user, 404, "/v1/batches/not-a-uuid"));
    cJSON_Delete(fx_get_json(&fx, fx.user, 400, "/v1/batches?limit=0"));
    cJSON_Delete(fx_get_json(&fx, fx.user, 400, "/v1/batches?cursor=zzz"));
    cJSON_Delete(p1);
    cJSON_Delete(p2);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
}

/* ---- reports ------------------------------------------------------------------------------ */

/* Make the batch's job for op look finished as a worker would have left it. */
static void outcome(const char *batch, const char *op, const char *state, double lat, const char *prov)
{
    char *sql = kf_asprintf("UPDATE jobs SET state = '%s', started_at = now(), finished_at = now(), provenance = "
                            "$2::jsonb WHERE batch_id = $1::uuid AND spec->>'op' = '%s'", state, op);
    sql_exec(sql, batch, prov);
    free(sql);
    if (lat > 0) {
        sql = kf_asprintf("INSERT INTO iterations (job_id, attempt, seq, latency_ns, correct, profile) SELECT id, 1, 0, "
                          "%g, true, '{\"floor_ns\": 100}' FROM jobs WHERE batch_id = $1::uuid AND spec->>'op' = '%s'",
                          lat, op);
        sql_exec(sql, batch, NULL);
        free(sql);
    }
}

static const cJSON *entry(const cJSON *rep, const char *op)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(rep, "entries"))
    {
        if (strcmp(fx_str(e, "op"), op) == 0)
            return e;
    }
    cr_assert_fail("no entry for %s", op);
    return NULL;
}

#define OPS5 "{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"shapes\":[[[64,64]]]," \
             "\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}"
#define OLDP "{\"sim_build\": \"s1\", \"target_hash\": \"t1\", \"worker\": \"w1\"}"
#define NEWP "{\"sim_build\": \"s2\", \"target_hash\": \"t1\", \"worker\": \"w2\"}"

Test(batches, a_report_gives_each_entry_its_verdict_against_the_previous_batch)
{
    char *b1 = create_id(fx.user, OPS5), *b2, *b3, *ctype;
    cJSON *rep, *sum;
    const cJSON *e;
    kf_http_resp r;
    char *path;

    outcome(b1, "a", "succeeded", 1000, OLDP);
    outcome(b1, "b", "succeeded", 1000, OLDP);
    outcome(b1, "c", "succeeded", 1000, OLDP);
    outcome(b1, "d", "succeeded", 1000, OLDP);
    outcome(b1, "e", "failed", 0, OLDP);
    b2 = create_id(fx.user, OPS5);
    outcome(b2, "a", "succeeded", 900, NEWP);
    outcome(b2, "b", "succeeded", 1010, NEWP);
    outcome(b2, "c", "succeeded", 1200, NEWP);
    outcome(b2, "d", "failed", 0, NEWP);
    outcome(b2, "e", "succeeded", 500, NEWP);

    /* The default baseline: the newest earlier finished batch over the same matrix. */
    rep = fx_get_json(&fx, fx.user, 200, "/v1/batches/%s/report", b2);
    cr_assert_str_eq(fx_str(rep, "baseline"), b1);
    cr_assert_float_eq(fx_num(rep, "threshold"), 0.03, 1e-12);
    cr_assert_str_eq(fx_str(entry(rep, "a"), "verdict"), "improved");
    cr_assert_float_eq(fx_num(entry(rep, "a"), "ratio"), 0.9, 1e-9);
    cr_assert_str_eq(fx_str(entry(rep, "b"), "verdict"), "unchanged");
    cr_assert_str_eq(fx_str(entry(rep, "c"), "verdict"), "regressed");
    cr_assert_str_eq(fx_str(entry(rep, "d"), "verdict"), "failed");
    cr_assert_str_eq(fx_str(entry(rep, "e"), "verdict"), "new", "the baseline's job failed: nothing to compare");
    e = cJSON_GetObjectItem(entry(rep, "a"), "provenance_diff");
    cr_assert_eq(cJSON_GetArraySize(e), 1, "only sim_build differs (worker is not provenance of the number)");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(e, "sim_build"), "old"), "s1");
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(e, "sim_build"), "new"), "s2");
    cr_assert_eq(fx_num(cJSON_GetObjectItem(entry(rep, "a"), "old"), "latency_ns"), 1000);
    cr_assert_eq(fx_num(cJSON_GetObjectItem(entry(rep, "a"), "new"), "latency_ns"), 900);
    sum = cJSON_GetObjectItem(rep, "summary");
    cr_assert_eq(fx_num(sum, "improved") + fx_num(sum, "regressed") + fx_num(sum, "unchanged") + fx_num(sum, "failed") +
                     fx_num(sum, "new"), 5);
    cr_assert_eq(fx_num(sum, "missing"), 0);
    cJSON_Delete(rep);

    /* A wider threshold makes the 20% regression unchanged. */
    rep = fx_get_json(&fx, fx.user, 200, "/v1/batches/%s/report?threshold=0.25", b2);
    cr_assert_str_eq(fx_str(entry(rep, "c"), "verdict"), "unchanged");
    cr_assert_str_eq(fx_str(entry(rep, "a"), "verdict"), "unchanged");
    cJSON_Delete(rep);

    /* The first batch has no baseline: every entry is new (or failed). */
    rep = fx_get_json(&fx, fx.user, 200, "/v1/batches/%s/report", b1);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(rep, "baseline")));
    cr_assert_eq(fx_num(cJSON_GetObjectItem(rep, "summary"), "new"), 4);
    cJSON_Delete(rep);

    /* An explicit baseline over another matrix: entries only there are missing. */
    b3 = create_id(fx.user, "{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\",\"z\"],\"shapes\":"
                            "[[[64,64]]],\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}");
    outcome(b3, "a", "succeeded", 2000, NEWP);
    outcome(b3, "z", "succeeded", 2000, NEWP);
    rep = fx_get_json(&fx, fx.user, 200, "/v1/batches/%s/report?baseline=%s", b2, b3);
    cr_assert_str_eq(fx_str(entry(rep, "z"), "verdict"), "missing");
    cr_assert_str_eq(fx_str(entry(rep, "a"), "verdict"), "improved");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(entry(rep, "a"), "provenance_diff")), 0);
    cr_assert_str_eq(fx_str(entry(rep, "b"), "verdict"), "new");
    cJSON_Delete(rep);

    /* Markdown and CSV. */
    path = kf_asprintf("/v1/batches/%s/report?format=md", b2);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200, "%s", r.body);
    ctype = kf_http_header(&r, "Content-Type");
    cr_assert(strstr(ctype, "text/markdown"), "%s", ctype);
    free(ctype);
    cr_assert(strncmp(r.body, "# Batch report ", 15) == 0, "%s", r.body);
    cr_assert(strstr(r.body, "| a | 64x64 | float32 | trn2 | 1000.0 | 900.0 | 0.9000 | improved | sim_build |"), "%s",
              r.body);
    kf_http_resp_release(&r);
    free(path);
    path = kf_asprintf("/v1/batches/%s/report?format=csv", b2);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200, "%s", r.body);
    ctype = kf_http_header(&r, "Content-Type");
    cr_assert(strstr(ctype, "text/csv"), "%s", ctype);
    free(ctype);
    {
        static const char head[] = "op,shape,dtype,target,old_latency_ns,new_latency_ns,ratio,verdict,new_job,old_job,"
                                   "provenance_changed\r\n";
        cr_assert(strncmp(r.body, head, sizeof(head) - 1) == 0, "%s", r.body);
    }
    {
        int lines = 0;
        for (const char *p = r.body; (p = strstr(p, "\r\n")) != NULL; p += 2)
            lines++;
        cr_assert_eq(lines, 6, "a header and 5 entries: %s", r.body);
    }
    cr_assert(strstr(r.body, "\r\nc,64x64,float32,trn2,1000.0,1200.0,1.2000,regressed,"), "%s", r.body);
    kf_http_resp_release(&r);
    free(path);

    cJSON_Delete(fx_get_json(&fx, fx.user, 400, "/v1/batches/%s/report?threshold=2", b2));
    cJSON_Delete(fx_get_json(&fx, fx.user, 400, "/v1/batches/%s/report?format=xml", b2));
    cJSON_Delete(fx_get_json(&fx, fx.user, 404, "/v1/batches/%s/report?baseline=%s", b2,
                          "00000000-0000-0000-0000-000000000000"));
    cJSON_Delete(fx_get_json(&fx, fx.user2, 404, "/v1/batches/%s/report", b2));
    free(b1);
    free(b2);
    free(b3);
}

/* ---- the stream ---------------------------------------------------------------------------- */

typedef struct sse {
    int    fd;
    kf_buf in;
    bool   closed;
} sse;

static void sse_open(sse *s, const char *path, const char *extra_headers)
{
    char req[1024];
    int n;

    s->fd = kf_http_raw_connect(fx.port);
    s->closed = false;
    kf_buf_init(&s->in);
    cr_assert(s->fd >= 0, "connect to the API");
    n = snprintf(req, sizeof(req),
                 "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n%s\r\n",
                 path, fx.user, extra_headers ? extra_headers : "");
    cr_assert(write(s->fd, req, (size_t)n) == n);
}

static bool sse_wait(sse *s, const char *needle, int timeout_ms)
{
    long long end = kf_test_now_ms() + timeout_ms;

    while (!strstr(s->in.data, needle) && !s->closed) {
        long long left = end - kf_test_now_ms();
        struct pollfd p = { s->fd, POLLIN, 0 };
        char buf[4096];
        ssize_t n;

        if (left <= 0)
            return false;
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        n = read(s->fd, buf, sizeof(buf));
        if (n <= 0)
            s->closed = true;
        else
            kf_buf_add(&s->in, buf, (size_t)n);
    }
    return strstr(s->in.data, needle) != NULL;
}

static void sse_close(sse *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    kf_buf_release(&s->in);
}

/* The last "id:" of what came. */
static long long sse_last_id(const sse *s)
{
    long long last = 0;
    for (const char *p = s->in.data; (p = strstr(p, "\nid: ")) != NULL; p += 5)
        last = strtoll(p + 5, NULL, 10);
    return last;
}

Test(batches, a_batch_stream_shows_job_events_and_roll_ups_and_resumes)
{
    char *bid = create_id(fx.user, "{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn1\",\"trn2\"]}}");
    char *j0 = job_at(bid, 0), *j1 = job_at(bid, 1), *path = kf_asprintf("/v1/batches/%s/stream", bid), hdr[64];
    sse s;
    long long last;

    sse_open(&s, path, NULL);
    cr_assert(sse_wait(&s, "event: batch\ndata: ", 5000), "a roll-up first: %s", s.in.data);
    cr_assert(strstr(s.in.data, "\"queued\" : 2"), "%s", s.in.data);
    run_job(j0, "trn1", 1000, 500, "succeeded");
    cr_assert(sse_wait(&s, "\"to\" : \"succeeded\"", 5000), "the job's events: %s", s.in.data);
    cr_assert(sse_wait(&s, "\"succeeded\" : 1", 5000), "a roll-up after it: %s", s.in.data);
    cr_assert(strstr(s.in.data, j0), "%s", s.in.data);
    last = sse_last_id(&s);
    cr_assert_gt(last, 0);
    sse_close(&s);

    /* While nobody listens the other job finishes; resuming from the last
     * id gives its events, a roll-up, and the end. */
    run_job(j1, "trn2", 1000, 500, "succeeded");
    snprintf(hdr, sizeof(hdr), "Last-Event-ID: %lld\r\n", last);
    sse_open(&s, path, hdr);
    cr_assert(sse_wait(&s, "event: end\ndata: {\"batch_id\":\"", 5000), "the end: %s", s.in.data);
    cr_assert(strstr(s.in.data, j1), "the missed job's events: %s", s.in.data);
    cr_assert(!strstr(s.in.data, j0), "nothing from before the position: %s", s.in.data);
    cr_assert(strstr(s.in.data, "\"succeeded\" : 2"), "%s", s.in.data);
    cr_assert(sse_wait(&s, "\x01never\x01", 3000) == false && s.closed, "the stream closes at the end");
    sse_close(&s);

    /* A finished batch's stream: one roll-up and the end. */
    sse_open(&s, path, NULL);
    cr_assert(sse_wait(&s, "event: end", 5000), "%s", s.in.data);
    sse_close(&s);
    cJSON_Delete(fx_get_json(&fx, fx.user2, 404, "/v1/batches/%s/stream", bid));
    free(path);
    free(j0);
    free(j1);
    free(bid);
}
