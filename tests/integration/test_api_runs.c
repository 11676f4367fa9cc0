/* Integration tests of the runs read side (issue 15, docs/runs.md): the
 * light job list and its filters, a job's iterations (paged, and one whole
 * with its rebuilt source and diff), compare, and migration 0008's views
 * and read-only role.  Jobs are submitted over HTTP; their iterations and
 * the columns a worker would fill are written with SQL, as the worker
 * reports would leave them. */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>

#include "kf_buf.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"

#define REDIS_DB 9

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, NULL);
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(api_runs, .init = setup, .fini = teardown, .timeout = 120);

/* Run SQL with up to 4 text parameters; asserts it succeeded. */
static void sql_exec(const char *sql, int n, const char *a, const char *b, const char *c, const char *d)
{
    const char *params[4] = { a, b, c, d };
    PGresult *r = PQexecParams(fx.pg, sql, n, NULL, params, NULL, NULL, 0);

    cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
}

/* One iteration row: profile carries floor_ns so fraction_of_bound is
 * floor / latency. */
static void iteration(const char *job, int attempt, int seq, const char *source, const char *diff, const char *params,
                      double latency, double floor_ns, bool correct, const char *findings)
{
    const char *p[5] = { job, source, diff, params ? params : "{}", findings };
    PGresult *r;
    char *sql;

    sql = kf_asprintf(
        "INSERT INTO iterations (job_id, attempt, seq, source, source_diff, params, profile, validation, findings, "
        "action, reason, latency_ns, correct) VALUES ($1::uuid, %d, %d, $2, $3, $4::jsonb, "
        "'{\"latency_ns\": %.1f, \"floor_ns\": %.1f, \"bound_kind\": \"io\", \"bounds\": {\"tightest\": \"memory\", "
        "\"achieved_fraction\": 0.5}, \"summary\": {\"total_time\": %g, \"hbm_read_bytes\": %d, \"lines\": 3}, "
        "\"lines\": [{\"loc\": \"k.py:3\"}]}', "
        "'{\"status\": \"pass\", \"pass\": %s, \"checks\": [{\"pass\": %s, \"elements\": 64, \"max_abs_err\": 0.25, "
        "\"message\": \"m\"}]}', coalesce($5::jsonb, '[]'), 'tune', 'why %d', %.1f, %s)",
        attempt, seq, latency, floor_ns, latency * 1e-9, 1000 + seq, correct ? "true" : "false",
        correct ? "true" : "false", seq, latency, correct ? "true" : "false");
    r = PQexecParams(fx.pg, sql, 5, NULL, p, NULL, NULL, 0);
    cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    free(sql);
}

/* A problem answer: status, type slug, and the first error's field. */
static void expect_problem(const char *token, long status, const char *slug, const char *field, const char *path)
{
    kf_http_resp r;
    cJSON *v;
    char type[96];

    cr_assert_eq(fx_req(&fx, "GET", path, token, NULL, &r), status, "GET %s: %s", path, r.body);
    v = fx_json(&r);
    snprintf(type, sizeof(type), "urn:kforge:problem:%s", slug);
    cr_assert_str_eq(fx_str(v, "type"), type, "GET %s: %s", path, r.body);
    if (field) {
        const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "errors"), 0);
        cr_assert_str_eq(fx_str(e, "field"), field, "GET %s: %s", path, r.body);
    }
    cJSON_Delete(v);
    kf_http_resp_release(&r);
}

/* ---- GET /v1/jobs: light shape and filters ------------------------------------- */

static char *job_with(const char *token, const char *labels, const char *spec_sql)
{
    char *body = kf_asprintf("{\"kind\":\"diag\",\"target\":\"trn2\",\"labels\":%s}", labels);
    char *id = fx_submit(&fx, token, body);

    free(body);
    if (spec_sql)
        sql_exec("UPDATE jobs SET spec = $2::jsonb WHERE id = $1::uuid", 2, id, spec_sql, NULL, NULL);
    return id;
}

static int count_jobs(const char *token, const char *query)
{
    cJSON *v = fx_get_json(&fx, token, 200, "/v1/jobs?%s", query);
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(v, "jobs"));
    cJSON_Delete(v);
    return n;
}

Test(api_runs, the_list_is_light_and_carries_each_jobs_best)
{
    char *a = job_with(fx.user, "{\"team\":\"llm\"}",
                       "{\"op\":\"softmax\",\"source\":\"def k(): pass\\n\",\"reference\":\"def r(): pass\\n\"}");
    char longerr[600];
    cJSON *v, *item, *best;

    memset(longerr, 'e', sizeof(longerr) - 1);
    longerr[sizeof(longerr) - 1] = '\0';
    sql_exec("UPDATE jobs SET result = '{\"big\": true}', last_error = $2 WHERE id = $1::uuid", 2, a, longerr, NULL,
             NULL);
    iteration(a, 1, 0, "s\n", NULL, "{\"T\":1}", 1000, 500, true, NULL);
    iteration(a, 1, 1, NULL, NULL, "{\"T\":2}", 800, 500, true, NULL);
    iteration(a, 1, 2, NULL, NULL, "{\"T\":4}", 100, 500, false, NULL);

    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs");
    item = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "jobs"), 0);
    cr_assert_str_eq(fx_str(item, "id"), a);
    cr_assert_null(cJSON_GetObjectItem(item, "result"), "the light item has no result");
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(item, "spec"), "source"));
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(item, "spec"), "reference"));
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(item, "spec"), "op"), "softmax");
    cr_assert_eq(strlen(fx_str(item, "last_error")), 200);
    best = cJSON_GetObjectItem(item, "best");
    cr_assert_eq(fx_num(best, "seq"), 1, "the fastest correct iteration, not the faster wrong one");
    cr_assert_eq(fx_num(best, "attempt"), 1);
    cr_assert_float_eq(fx_num(best, "latency_ns"), 800, 1e-9);
    cr_assert_float_eq(fx_num(best, "fraction_of_bound"), 500.0 / 800.0, 1e-9);
    cJSON_Delete(v);

    /* view=full: the old shape, result and source included. */
    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs?view=full");
    item = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "jobs"), 0);
    cr_assert_not_null(cJSON_GetObjectItem(item, "result"));
    cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(item, "spec"), "source"));
    cr_assert_null(cJSON_GetObjectItem(item, "best"));
    cJSON_Delete(v);

    /* A job without a correct iteration has best null. */
    free(a);
    a = job_with(fx.user, "{}", NULL);
    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs?limit=1");
    item = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "jobs"), 0);
    cr_assert_str_eq(fx_str(item, "id"), a);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(item, "best")));
    cJSON_Delete(v);
    free(a);
}

Test(api_runs, the_list_filters_combine_with_and)
{
    char *a = job_with(fx.user, "{\"team\":\"llm\",\"run\":\"n1\"}", "{\"op\":\"softmax\"}");
    char *b = job_with(fx.user, "{\"team\":\"llm\",\"run\":\"n2\"}", "{\"op\":\"matmul\"}");
    char *c = job_with(fx.user, "{\"team\":\"vision\"}", "{\"op\":\"softmax\"}");
    char *other = job_with(fx.user2, "{\"team\":\"llm\"}", "{\"op\":\"softmax\"}");
    char *q;

    sql_exec("INSERT INTO batches (id, owner_token_id, source, template, matrix, matrix_hash, priority, n_jobs) "
             "SELECT '0190a000-0000-7000-8000-000000000001', owner_token_id, 'matrix', '{}', '{}', 'h', 2, 1 FROM jobs "
             "WHERE id = $1::uuid", 1, a, NULL, NULL, NULL);
    sql_exec("UPDATE jobs SET batch_id = '0190a000-0000-7000-8000-000000000001', worker_id = 'w1' WHERE id = $1::uuid",
             1, a, NULL, NULL, NULL);
    sql_exec("UPDATE jobs SET created_at = '2026-01-01T00:00:00Z' WHERE id = $1::uuid", 1, c, NULL, NULL, NULL);

    cr_assert_eq(count_jobs(fx.user, "op=softmax"), 2);
    cr_assert_eq(count_jobs(fx.user, "op=matmul"), 1);
    cr_assert_eq(count_jobs(fx.user, "label.team=llm"), 2, "another user's job is not listed");
    cr_assert_eq(count_jobs(fx.admin, "label.team=llm"), 3, "an admin sees every job");
    cr_assert_eq(count_jobs(fx.user, "label.team=llm&label.run=n2"), 1);
    cr_assert_eq(count_jobs(fx.user, "label.team=llm&op=softmax"), 1);
    cr_assert_eq(count_jobs(fx.user, "label.team=nobody"), 0);
    cr_assert_eq(count_jobs(fx.user, "batch=0190a000-0000-7000-8000-000000000001"), 1);
    cr_assert_eq(count_jobs(fx.user, "worker=w1"), 1);
    cr_assert_eq(count_jobs(fx.user, "worker=w2"), 0);
    cr_assert_eq(count_jobs(fx.user, "created_before=2026-06-01T00:00:00Z"), 1);
    cr_assert_eq(count_jobs(fx.user, "created_after=2026-06-01T00:00:00%2B02:00"), 2);
    cr_assert_eq(count_jobs(fx.user, "created_after=2025-12-31T23:59:59.5Z&created_before=2026-01-01T00:00:00.5Z"), 1);
    /* Exclusive bounds. */
    cr_assert_eq(count_jobs(fx.user, "created_after=2026-01-01T00:00:00Z&op=softmax&label.team=vision"), 0);
    /* Filters page like the plain list. */
    {
        cJSON *v = fx_get_json(&fx, fx.user, 200, "/v1/jobs?label.team=llm&limit=1");
        const char *cur = fx_str(v, "next_cursor");
        cJSON *w;
        cr_assert_not_null(cur);
        q = kf_asprintf("/v1/jobs?label.team=llm&limit=1&cursor=%s", cur);
        w = fx_get_json(&fx, fx.user, 200, "%s", q);
        cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(w, "jobs"), 0), "id"), a);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(w, "next_cursor")));
        cJSON_Delete(v);
        cJSON_Delete(w);
        free(q);
    }
    free(a);
    free(b);
    free(c);
    free(other);
}

/* A label filter reads the label's jobs newest first, a window of 500 at a
 * time (api/api_jobs.c); matches past a full window come from the query
 * the planner plans, and pages go on across both. */
Test(api_runs, label_filters_find_matches_past_the_label_window, .timeout = 180)
{
    char *a = job_with(fx.user, "{\"team\":\"big\"}", "{\"op\":\"matmul\"}");
    kf_buf seen = KF_BUF_INIT;
    char last[64] = "~";
    int total = 0;

    /* 700 newer softmax jobs of the same label, and 10 of another user's. */
    sql_exec("INSERT INTO jobs (id, kind, state, target, backend, spec, labels, owner_token_id, created_at, "
             "updated_at) SELECT gen_random_uuid(), kind, state, target, backend, '{\"op\":\"softmax\"}', labels, "
             "owner_token_id + CASE WHEN g > 700 THEN 1 ELSE 0 END, created_at + g * interval '1 ms', updated_at "
             "FROM jobs, generate_series(1, 710) g WHERE id = $1::uuid",
             1, a, NULL, NULL, NULL);
    cr_assert_eq(count_jobs(fx.user, "label.team=big&op=matmul"), 1, "the one match lies past the window");
    cr_assert_eq(count_jobs(fx.user, "label.team=big&op=softmax&limit=200"), 200);
    cr_assert_eq(count_jobs(fx.user, "label.team=big&op=add"), 0);
    cr_assert_eq(count_jobs(fx.user, "label.team=big&created_before=2000-01-01T00:00:00Z"), 0);
    /* Pages of 200 through all 701 of the user's, each once, newest first. */
    {
        char *cur = NULL;
        do {
            cJSON *v = cur ? fx_get_json(&fx, fx.user, 200, "/v1/jobs?label.team=big&limit=200&cursor=%s", cur)
                           : fx_get_json(&fx, fx.user, 200, "/v1/jobs?label.team=big&limit=200");
            cJSON *it;
            cJSON_ArrayForEach(it, cJSON_GetObjectItem(v, "jobs")) {
                const char *id = fx_str(it, "id"), *at = fx_str(it, "created_at");
                char key[48];
                snprintf(key, sizeof(key), "|%s|", id);
                cr_assert(!seen.data || !strstr(seen.data, key), "job %s listed twice", id);
                cr_assert(at && strcmp(at, last) <= 0, "newest first: %s after %s", at, last);
                snprintf(last, sizeof(last), "%s", at);
                kf_buf_adds(&seen, key);
                total++;
            }
            free(cur);
            cur = cJSON_IsString(cJSON_GetObjectItem(v, "next_cursor")) ? kf_strdup(fx_str(v, "next_cursor")) : NULL;
            cJSON_Delete(v);
        } while (cur);
    }
    cr_assert_eq(total, 701);
    cr_assert_eq(count_jobs(fx.admin, "label.team=big&limit=200"), 200);
    /* An operator's fix of created_at moves the job in the list too. */
    sql_exec("UPDATE jobs SET created_at = now() + interval '1 day' WHERE id = $1::uuid", 1, a, NULL, NULL, NULL);
    {
        cJSON *v = fx_get_json(&fx, fx.user, 200, "/v1/jobs?label.team=big&limit=1");
        cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "jobs"), 0), "id"), a);
        cJSON_Delete(v);
    }
    kf_buf_release(&seen);
    free(a);
}

Test(api_runs, bad_list_filters_are_400_naming_the_field)
{
    static const char *const bad[][2] = {
        { "/v1/jobs?label.=x", "label." },
        { "/v1/jobs?label.9team=x", "label.9team" },
        { "/v1/jobs?label.te%20am=x", "label.te am" },
        { "/v1/jobs?op=soft%20max", "op" },
        { "/v1/jobs?batch=nope", "batch" },
        { "/v1/jobs?created_after=2026-02-30T00:00:00Z", "created_after" },
        { "/v1/jobs?created_after=2026-12-02", "created_after" },
        { "/v1/jobs?created_before=2026-12-02T10:00:00", "created_before" },
        { "/v1/jobs?created_before=2026-12-02T24:00:00Z", "created_before" },
        { "/v1/jobs?created_after=2026-12-02T10:00:00%2B16:00", "created_after" },
        { "/v1/jobs?created_before=2026-12-02T10:00:00.1234567890Z", "created_before" },
        { "/v1/jobs?worker=a%20b", "worker" },
        { "/v1/jobs?view=heavy", "view" },
        { "/v1/jobs?op=a&op=b", "op" },
        { "/v1/jobs?label.team=a&label.team=b", "label.team" },
        { "/v1/jobs?labels.team=a", "labels.team" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_problem(fx.user, 400, "bad-query", bad[i][1], bad[i][0]);
    /* Leap days are days. */
    cr_assert_eq(count_jobs(fx.user, "created_after=2024-02-29T00:00:00Z"), 0);
}

/* ---- GET /v1/jobs/{id}/iterations -------------------------------------------------- */

Test(api_runs, iterations_page_in_attempt_seq_order_with_the_running_best)
{
    char *a = job_with(fx.user, "{}", NULL);
    cJSON *v, *items, *it;
    const char *cur;

    iteration(a, 1, 0, "s\n", NULL, "{\"T\":1}", 1000, 500, true, "[{\"kind\":\"dma_small\",\"title\":\"t\","
                                                                   "\"cost_ns\":3,\"message\":\"m\",\"lines\":[1]}]");
    iteration(a, 1, 1, NULL, NULL, "{\"T\":2}", 1200, 500, true, NULL);
    iteration(a, 1, 2, NULL, NULL, "{\"T\":4}", 900, 500, true, NULL);
    iteration(a, 2, 0, "s\n", NULL, "{\"T\":8}", 700, 500, false, NULL);
    iteration(a, 2, 1, NULL, NULL, "{\"T\":8}", 2000, 500, true, NULL);

    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations?limit=2", a);
    items = cJSON_GetObjectItem(v, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 2);
    it = cJSON_GetArrayItem(items, 0);
    cr_assert_eq(fx_num(it, "attempt"), 1);
    cr_assert_eq(fx_num(it, "seq"), 0);
    cr_assert_str_eq(fx_str(it, "action"), "tune");
    cr_assert_str_eq(fx_str(it, "reason"), "why 0");
    cr_assert_eq(fx_num(cJSON_GetObjectItem(it, "params"), "T"), 1);
    cr_assert_float_eq(fx_num(it, "fraction_of_bound"), 0.5, 1e-9);
    cr_assert_float_eq(fx_num(it, "best_so_far_ns"), 1000, 1e-9);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(it, "correct")));
    cr_assert_eq(fx_num(cJSON_GetObjectItem(it, "validation"), "checked"), 64);
    cr_assert_float_eq(fx_num(cJSON_GetObjectItem(it, "validation"), "max_abs_err"), 0.25, 1e-9);
    cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(it, "findings"), 0), "code"), "dma_small");
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(it, "findings"), 0), "lines"));
    cr_assert_float_eq(fx_num(cJSON_GetObjectItem(it, "profile"), "total_time_ns"), 1000, 1e-9);
    cr_assert_str_eq(fx_str(cJSON_GetObjectItem(it, "profile"), "bound"), "io");
    cr_assert_eq(fx_num(cJSON_GetObjectItem(it, "profile"), "hbm_read_bytes"), 1000);
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(it, "profile"), "lines"), "summary fields only");
    cr_assert_not_null(fx_str(it, "created_at"));
    it = cJSON_GetArrayItem(items, 1);
    cr_assert_float_eq(fx_num(it, "best_so_far_ns"), 1000, 1e-9, "a slower iteration keeps the best");
    cur = fx_str(v, "next_cursor");
    cr_assert_not_null(cur);
    {
        cJSON *w = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations?limit=2&cursor=%s", a, cur);
        items = cJSON_GetObjectItem(w, "items");
        cr_assert_eq(cJSON_GetArraySize(items), 2);
        cr_assert_float_eq(fx_num(cJSON_GetArrayItem(items, 0), "best_so_far_ns"), 900, 1e-9);
        it = cJSON_GetArrayItem(items, 1);
        cr_assert_eq(fx_num(it, "attempt"), 2);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(it, "best_so_far_ns")), "a new attempt starts without a best");
        cJSON_Delete(w);
    }
    cJSON_Delete(v);

    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations?attempt=2", a);
    items = cJSON_GetObjectItem(v, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 2);
    cr_assert_float_eq(fx_num(cJSON_GetArrayItem(items, 1), "best_so_far_ns"), 2000, 1e-9);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "next_cursor")));
    cJSON_Delete(v);
    free(a);
}

Test(api_runs, iterations_of_anothers_job_are_404_and_bad_queries_422)
{
    char *a = job_with(fx.user, "{}", NULL);
    char *p;

    iteration(a, 1, 0, "s\n", NULL, NULL, 1000, 500, true, NULL);
    p = kf_asprintf("/v1/jobs/%s/iterations", a);
    expect_problem(fx.user2, 404, "not-found", NULL, p);
    cJSON_Delete(fx_get_json(&fx, fx.admin, 200, "%s", p));
    free(p);
    expect_problem(fx.user, 404, "not-found", NULL, "/v1/jobs/0190a000-0000-7000-8000-00000000dead/iterations");
    expect_problem(fx.user, 404, "not-found", NULL, "/v1/jobs/nope/iterations");
    {
        static const char *const bad[][2] = {
            { "limit=0", "limit" },          { "limit=501", "limit" },     { "attempt=0", "attempt" },
            { "attempt=x", "attempt" },      { "cursor=abc", "cursor" },   { "cursor=1.", "cursor" },
            { "cursor=.1", "cursor" },       { "cursor=1.2.3", "cursor" }, { "after=1", "after" },
            { "limit=1&limit=2", "limit" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            p = kf_asprintf("/v1/jobs/%s/iterations?%s", a, bad[i][0]);
            expect_problem(fx.user, 422, "validation", bad[i][1], p);
            free(p);
        }
    }
    free(a);
}

/* ---- GET /v1/jobs/{id}/iterations/{seq} -------------------------------------------- */

Test(api_runs, one_iteration_whole_with_its_source_rebuilt_and_its_diff)
{
    char *a = job_with(fx.user, "{}", NULL);
    cJSON *v;

    iteration(a, 1, 0, "import nki\ndef k(T=1):\n    return T\n", NULL, "{\"T\":1}", 1000, 500, true, NULL);
    /* seq 1: a diff from seq 0; seq 2: nothing sent (the same source). */
    iteration(a, 1, 1, NULL, "--- a\n+++ b\n@@ -3 +3 @@\n-    return T\n+    return T * 2\n", "{\"T\":2}", 900, 500,
              true, NULL);
    iteration(a, 1, 2, NULL, NULL, "{\"T\":4}", 950, 500, true, NULL);
    iteration(a, 2, 1, "other\n", NULL, "{\"T\":8}", 990, 500, true, NULL);

    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations/0?attempt=1", a);
    cr_assert_str_eq(fx_str(v, "source"), "import nki\ndef k(T=1):\n    return T\n");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "source_diff")), "the first has no diff");
    cr_assert_not_null(cJSON_GetObjectItem(v, "compile"));
    cr_assert_not_null(cJSON_GetObjectItem(v, "timings"));
    cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(v, "profile"), "lines"), "the whole profile");
    cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(v, "validation"), "checks"), "the whole validation");
    cJSON_Delete(v);

    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations/1?attempt=1", a);
    cr_assert_str_eq(fx_str(v, "source"), "import nki\ndef k(T=1):\n    return T * 2\n");
    cr_assert_str_eq(fx_str(v, "source_diff"),
                     "--- a/kernel.py (iteration 0)\n+++ b/kernel.py (iteration 1)\n@@ -1,3 +1,3 @@\n import nki\n"
                     " def k(T=1):\n-    return T\n+    return T * 2\n");
    cr_assert_float_eq(fx_num(v, "best_so_far_ns"), 900, 1e-9);
    cJSON_Delete(v);

    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations/2?attempt=1", a);
    cr_assert_str_eq(fx_str(v, "source"), "import nki\ndef k(T=1):\n    return T * 2\n");
    cr_assert_str_eq(fx_str(v, "source_diff"), "", "the same source: an empty diff");
    cr_assert_float_eq(fx_num(v, "best_so_far_ns"), 900, 1e-9);
    cJSON_Delete(v);

    /* Without attempt=: the latest attempt that has the seq. */
    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations/1", a);
    cr_assert_eq(fx_num(v, "attempt"), 2);
    cr_assert_str_eq(fx_str(v, "source"), "other\n");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "source_diff")), "the first of its attempt");
    cJSON_Delete(v);
    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations/2", a);
    cr_assert_eq(fx_num(v, "attempt"), 1);
    cJSON_Delete(v);
    free(a);
}

Test(api_runs, a_diff_that_does_not_apply_gives_a_null_source_not_an_error)
{
    char *a = job_with(fx.user, "{}", NULL);
    cJSON *v;

    iteration(a, 1, 0, "x\n", NULL, NULL, 1000, 500, true, NULL);
    iteration(a, 1, 1, NULL, "@@ -1 +1 @@\n-not x\n+y\n", NULL, 1000, 500, true, NULL);
    iteration(a, 1, 2, NULL, NULL, NULL, 1000, 500, true, NULL);
    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations/1", a);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "source")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "source_diff")));
    cJSON_Delete(v);
    v = fx_get_json(&fx, fx.user, 200, "/v1/jobs/%s/iterations/2", a);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "source")), "unknown stays unknown");
    cJSON_Delete(v);
    free(a);
}

Test(api_runs, one_iteration_404s_and_422s)
{
    char *a = job_with(fx.user, "{}", NULL);
    char *p;

    iteration(a, 1, 0, "x\n", NULL, NULL, 1000, 500, true, NULL);
    p = kf_asprintf("/v1/jobs/%s/iterations/0", a);
    expect_problem(fx.user2, 404, "not-found", NULL, p);
    free(p);
    static const char *const missing[] = { "1", "0?attempt=2", "abc", "-1", "99999999999999999999" };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        p = kf_asprintf("/v1/jobs/%s/iterations/%s", a, missing[i]);
        expect_problem(fx.user, 404, "not-found", NULL, p);
        free(p);
    }
    p = kf_asprintf("/v1/jobs/%s/iterations/0?attempt=0", a);
    expect_problem(fx.user, 422, "validation", "attempt", p);
    free(p);
    p = kf_asprintf("/v1/jobs/%s/iterations/0?seq=0", a);
    expect_problem(fx.user, 422, "validation", "seq", p);
    free(p);
    free(a);
}

/* ---- GET /v1/compare ------------------------------------------------------------------ */

Test(api_runs, compare_puts_two_runs_side_by_side)
{
    char *a = job_with(fx.user, "{}", "{\"op\":\"softmax\"}");
    char *b = job_with(fx.user, "{}", "{\"op\":\"softmax\"}");
    cJSON *v, *jobs, *ja, *o, *d;

    sql_exec("UPDATE jobs SET provenance = '{\"worker\":\"w1\",\"sim_build\":\"s1\",\"target_hash\":\"t\"}' "
             "WHERE id = $1::uuid", 1, a, NULL, NULL, NULL);
    sql_exec("UPDATE jobs SET provenance = '{\"worker\":\"w2\",\"sim_build\":\"s1\",\"target_hash\":\"t\"}' "
             "WHERE id = $1::uuid", 1, b, NULL, NULL, NULL);
    iteration(a, 1, 0, "def k(T):\n    x = 1\n    return T\n", NULL, "{\"T\":1,\"U\":2}", 1000, 500, true,
              "[{\"kind\":\"dma_small\"},{\"kind\":\"shared\"}]");
    iteration(a, 1, 1, NULL, NULL, "{\"T\":2,\"U\":2}", 1100, 500, true, NULL);
    iteration(b, 1, 0, "def k(T):\n    x = 1\n    return T\n", NULL, "{\"T\":1,\"U\":2}", 1500, 500, true, NULL);
    iteration(b, 1, 1, "def k(T):\n    x = 1\n    return T + 1\n", NULL, "{\"T\":4,\"U\":2}", 800, 500, true,
              "[{\"kind\":\"shared\"},{\"kind\":\"psum_spill\"}]");

    v = fx_get_json(&fx, fx.user, 200, "/v1/compare?jobs=%s,%s", a, b);
    jobs = cJSON_GetObjectItem(v, "jobs");
    cr_assert_eq(cJSON_GetArraySize(jobs), 2);
    ja = cJSON_GetArrayItem(jobs, 0);
    cr_assert_str_eq(fx_str(ja, "id"), a);
    cr_assert_str_eq(fx_str(ja, "op"), "softmax");
    cr_assert_eq(fx_num(cJSON_GetObjectItem(ja, "best"), "seq"), 0);
    cr_assert_float_eq(fx_num(cJSON_GetObjectItem(ja, "best"), "fraction_of_bound"), 0.5, 1e-9);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ja, "curve")), 2);
    cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ja, "curve"), 1), 1)->valuedouble, 1000,
                       1e-9);
    cr_assert_eq(fx_num(cJSON_GetObjectItem(cJSON_GetArrayItem(jobs, 1), "best"), "seq"), 1);

    o = cJSON_GetObjectItem(v, "params_differ");
    cr_assert_eq(cJSON_GetArraySize(o), 1, "only T differs");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "T"), 1)->valueint, 4);
    d = cJSON_GetObjectItem(cJSON_GetObjectItem(v, "profile_deltas"), "total_time_ns");
    cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "delta"), 1)->valuedouble, -200, 1e-9);
    cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "delta"), 0)->valuedouble, 0, 1e-9);
    o = cJSON_GetObjectItem(v, "findings_only");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, a)), 1);
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, a), 0)->valuestring, "dma_small");
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, b), 0)->valuestring, "psum_spill");
    o = cJSON_GetObjectItem(v, "provenance_differ");
    cr_assert_eq(cJSON_GetArraySize(o), 1, "only the worker differs");
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "worker"), 1)->valuestring, "w2");
    o = cJSON_GetObjectItem(v, "source_diff");
    cr_assert_eq(cJSON_GetArraySize(o), 1);
    cr_assert_not_null(strstr(cJSON_GetArrayItem(o, 0)->valuestring, "-    return T\n+    return T + 1\n"), "%s",
                       cJSON_GetArrayItem(o, 0)->valuestring);
    cJSON_Delete(v);
    free(a);
    free(b);
}

Test(api_runs, compare_names_unknown_and_foreign_ids_and_refuses_malformed_lists)
{
    char *a = job_with(fx.user, "{}", NULL), *b = job_with(fx.user, "{}", NULL), *c = job_with(fx.user2, "{}", NULL);
    char *p, *body;
    kf_http_resp r;

    /* Runs without iterations compare too: best null, empty curves. */
    cJSON_Delete(fx_get_json(&fx, fx.user, 200, "/v1/compare?jobs=%s,%s", a, b));
    p = kf_asprintf("/v1/compare?jobs=%s,%s", a, c);
    cr_assert_eq(fx_req(&fx, "GET", p, fx.user, NULL, &r), 404);
    cr_assert_not_null(strstr(r.body, c), "the 404 names the foreign id: %s", r.body);
    cr_assert_null(strstr(r.body, a), "%s", r.body);
    kf_http_resp_release(&r);
    cJSON_Delete(fx_get_json(&fx, fx.admin, 200, "%s", p));
    free(p);
    p = kf_asprintf("/v1/compare?jobs=%s,0190a000-0000-7000-8000-00000000dead", a);
    cr_assert_eq(fx_req(&fx, "GET", p, fx.user, NULL, &r), 404);
    cr_assert_not_null(strstr(r.body, "0190a000-0000-7000-8000-00000000dead"), "%s", r.body);
    kf_http_resp_release(&r);
    free(p);

    body = kf_asprintf("%s,%s,%s,%s,%s", a, b, a, b, a);
    {
        char *const bad[][2] = {
            { kf_asprintf("/v1/compare?jobs=%s", a), "jobs" },
            { kf_asprintf("/v1/compare?jobs=%s,%s", a, a), "jobs" },
            { kf_asprintf("/v1/compare?jobs=%s,%s", a, "nope"), "jobs" },
            { kf_asprintf("/v1/compare?jobs=%s,,%s", a, b), "jobs" },
            { kf_asprintf("/v1/compare?jobs=%s,%s,", a, b), "jobs" },
            { kf_asprintf("/v1/compare?jobs=%s", body), "jobs" },
            { kf_asprintf("/v1/compare"), "jobs" },
            { kf_asprintf("/v1/compare?jobs=%s,%s&x=1", a, b), "x" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            expect_problem(fx.user, 422, "validation", bad[i][1], bad[i][0]);
            free(bad[i][0]);
        }
    }
    /* Upper-case ids are the same ids. */
    {
        char up[37];
        for (int i = 0; i < 37; i++)
            up[i] = (char)toupper((unsigned char)a[i]);
        p = kf_asprintf("/v1/compare?jobs=%s,%s", a, up);
        expect_problem(fx.user, 422, "validation", "jobs", p);
        free(p);
    }
    free(body);
    free(a);
    free(b);
    free(c);
}

/* ---- migration 0008: the analysts' views and kforge_reader ------------------------- */

Test(api_runs, kforge_reader_reads_the_views_and_nothing_secret)
{
    char *a = job_with(fx.user, "{\"team\":\"llm\"}", "{\"op\":\"softmax\",\"shapes\":[[128,512]]}");
    char *su = kf_asprintf("host=127.0.0.1 port=%s user=postgres dbname=%s", kf_test_env("KFORGE_TEST_PG_PORT"),
                           strstr(fx.dsn, "dbname=") + 7);
    PGconn *c = PQconnectdb(su);
    static const char *const refused[] = {
        "SELECT token_hash FROM api_tokens",
        "SELECT * FROM api_tokens",
        "SELECT lease_token_hash FROM jobs",
        "SELECT * FROM idempotency_keys",
        "INSERT INTO workers (id) VALUES ('x')",
        "UPDATE jobs SET state = 'failed'",
        "DELETE FROM iterations",
        "CREATE TABLE x (a int)",
    };
    PGresult *r;

    iteration(a, 1, 0, "s\n", NULL, "{\"T\":1}", 1000, 250, true, NULL);
    iteration(a, 1, 1, NULL, NULL, "{\"T\":2}", 500, 250, true, NULL);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    r = PQexec(c, "SET ROLE kforge_reader");
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    r = PQexec(c, "SELECT (SELECT count(*) FROM kforge_iterations), (SELECT seq FROM kforge_best), "
                  "(SELECT fraction_of_bound FROM kforge_best), (SELECT shape::text FROM kforge_op_history), "
                  "(SELECT best_to_date_ns FROM kforge_op_history), (SELECT count(*) FROM iterations), "
                  "(SELECT count(*) FROM job_events), (SELECT count(name) FROM api_tokens), "
                  "(SELECT max(op) FROM kforge_iterations), (SELECT value FROM job_labels WHERE key = 'team')");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "2");
    cr_assert_str_eq(PQgetvalue(r, 0, 1), "1");
    cr_assert_str_eq(PQgetvalue(r, 0, 2), "0.5");
    cr_assert_str_eq(PQgetvalue(r, 0, 3), "[[128, 512]]");
    cr_assert_str_eq(PQgetvalue(r, 0, 4), "500");
    cr_assert_str_eq(PQgetvalue(r, 0, 5), "2");
    cr_assert_str_eq(PQgetvalue(r, 0, 8), "softmax");
    cr_assert_str_eq(PQgetvalue(r, 0, 9), "llm", "job_labels is readable like jobs.labels");
    PQclear(r);
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        r = PQexec(c, refused[i]);
        cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR, "kforge_reader may run: %s", refused[i]);
        cr_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "42501", "%s: %s", refused[i],
                         PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(c);
    free(su);
    free(a);
}
