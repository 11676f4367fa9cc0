/* End to end: kforge-api + kforge-scheduler + kforge-worker as processes
 * against real PostgreSQL and Redis.  Jobs are submitted over HTTP and
 * their history is read back from PostgreSQL. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"

#define E2E_DB 1

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

/* cppcheck-suppress unknownMacro */
TestSuite(e2e, .fini = teardown, .timeout = 90);

static long events(const char *id, const char *type)
{
    char *sql = kf_asprintf("SELECT count(*) FROM job_events WHERE job_id = $1::uuid AND type = '%s'", type);
    long n = kf_stack_sql_long(&S, sql, id);
    free(sql);
    return n;
}

Test(e2e, diag_jobs_succeed_with_their_events_in_postgres)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 2, .n_schedulers = 1 };
    char *ids[6];
    kf_stack_start(&S, &o);

    for (int i = 0; i < 6; i++) {
        char *body = kf_stack_diag_body(50, false, false, 3);
        ids[i] = kf_stack_submit(&S, body);
        free(body);
    }
    for (int i = 0; i < 6; i++)
        cr_assert(kf_stack_wait_state(&S, ids[i], "succeeded", 15000), "job %s is %s; see %s", ids[i],
                  kf_stack_state(&S, ids[i]), S.dir);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(events(ids[i], "started"), 1);
        cr_assert_eq(events(ids[i], "succeeded"), 1);
        cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", ids[i]), 1);
        char *res = kf_stack_sql_value(&S, "SELECT result::text FROM job_results WHERE job_id = $1::uuid", ids[i]);
        cr_assert(res && strstr(res, "\"ok\": true"), "result row: %s", res ? res : "(none)");
        free(res);
        char *worker = kf_stack_sql_value(&S, "SELECT worker_id FROM jobs WHERE id = $1::uuid", ids[i]);
        cr_assert(worker && strncmp(worker, "test-w", 6) == 0, "worker recorded: %s", worker ? worker : "(none)");
        free(worker);
    }
    kf_stack_assert_settled(&S, ids, 6);
    /* both workers registered with the API and in Redis */
    cr_assert(kf_stack_wait_sql(&S, "SELECT count(*) FROM workers", NULL, 2, 5000));
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:workers"), 2);
    for (int i = 0; i < 6; i++)
        free(ids[i]);
}

Test(e2e, failing_and_crashing_diag_jobs)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 1 };
    kf_stack_start(&S, &o);
    char *b1 = kf_stack_diag_body(0, true, false, 3);
    char *b2 = kf_stack_diag_body(0, false, true, 3);
    char *failed = kf_stack_submit(&S, b1);
    char *poison = kf_stack_submit(&S, b2);

    /* a job error is final at once: no retry */
    cr_assert(kf_stack_wait_state(&S, failed, "failed", 15000), "job is %s", kf_stack_state(&S, failed));
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", failed), 1);
    char *err = kf_stack_sql_value(&S, "SELECT error FROM job_results WHERE job_id = $1::uuid", failed);
    cr_assert(err && strstr(err, "failed on request"), "error kept: %s", err ? err : "(none)");
    free(err);

    /* a crash is retried with backoff, then dead after max_attempts; the worker survives */
    cr_assert(kf_stack_wait_state(&S, poison, "dead", 20000), "job is %s; see %s", kf_stack_state(&S, poison),
              S.dir);
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", poison), 3);
    cr_assert_eq(events(poison, "started"), 3);
    cr_assert_eq(events(poison, "retrying"), 2);
    cr_assert_eq(events(poison, "requeued"), 2);
    cr_assert_eq(events(poison, "dead"), 1);
    char *last = kf_stack_sql_value(&S, "SELECT last_error FROM jobs WHERE id = $1::uuid", poison);
    cr_assert(last && strstr(last, "signal 6"), "dead jobs keep their last error: %s", last ? last : "(none)");
    free(last);
    cr_assert_eq(kill(S.workers[0], 0), 0, "the worker outlived the poison job");
    char *ids[2] = { failed, poison };
    kf_stack_assert_settled(&S, ids, 2);
    free(failed);
    free(poison);
    free(b1);
    free(b2);
}

Test(e2e, outbox_relay_queues_jobs_accepted_while_redis_was_down)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 1 };
    kf_stack_start(&S, &o);
    char *body = kf_stack_diag_body(0, false, false, 3);

    kf_stack_redis_stop();
    char *id = NULL;
    long st = kf_stack_submit_status(&S, body, &id);
    long unsent = -1;
    if (st == 202)
        unsent = kf_stack_sql_long(&S, "SELECT count(*) FROM outbox WHERE job_id = $1::uuid", id);
    kf_stack_redis_start();   /* always restart what we stopped before asserting */
    cr_assert_eq(st, 202, "a POST still commits while Redis is down");
    cr_assert_eq(unsent, 1, "the job waits in the outbox");
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 20000), "job is %s after Redis came back; see %s",
              kf_stack_state(&S, id), S.dir);
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM outbox WHERE job_id = $1::uuid", id),
                 0);
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
    free(body);
}

Test(e2e, cancel_of_a_queued_job_means_it_never_starts)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 0, .n_schedulers = 1 };
    kf_stack_start(&S, &o);
    char *body = kf_stack_diag_body(0, false, false, 3);
    char *id = kf_stack_submit(&S, body);
    char url[160];
    kf_http_resp r;

    snprintf(url, sizeof(url), "%s/v1/jobs/%s/cancel", S.api_url, id);
    cr_assert_eq(kf_http_json("POST", url, S.user, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    kf_stack_worker(&S, 0, NULL);
    kf_test_sleep_ms(800);
    cr_assert_str_eq(kf_stack_state(&S, id), "cancelled");
    cr_assert_eq(events(id, "started"), 0, "a cancelled queued job never starts");
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
    free(body);
}

Test(e2e, cancel_reaches_a_running_job_within_seconds_whatever_the_lease)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 30000 };
    kf_stack_start(&S, &o);
    char *body = kf_stack_diag_body(60000, false, false, 3);
    char *id = kf_stack_submit(&S, body);
    char url[160];
    kf_http_resp r;

    cr_assert(kf_stack_wait_state(&S, id, "running", 10000), "job is %s", kf_stack_state(&S, id));
    snprintf(url, sizeof(url), "%s/v1/jobs/%s/cancel", S.api_url, id);
    long long t0 = kf_test_now_ms();
    cr_assert_eq(kf_http_json("POST", url, S.user, NULL, &r), 202, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert(kf_stack_wait_state(&S, id, "cancelled", 5000), "job is %s 5 s after cancel with a 30 s lease",
              kf_stack_state(&S, id));
    cr_log_info("cancel of a running job took %lld ms", kf_test_now_ms() - t0);
    cr_assert(kf_test_now_ms() - t0 < 3000);
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
    free(body);
}

/* The race behind a flaky re-queue: the scheduler's reconciliation made
 * the job dead in PostgreSQL from Redis's dead letter, an admin re-queued
 * it, and only then did the scheduler read the same death from Redis's
 * deaths list.  Recording that death again must not undo the re-queue.
 * Staged without a scheduler: the worker dead-letters the job, SQL plays
 * the reconciliation, and the scheduler starts after the re-queue. */
Test(e2e, a_requeue_survives_a_death_the_scheduler_reads_late)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 0 };
    kf_stack_start(&S, &o);
    char *body = kf_stack_diag_body(0, false, true, 1);
    char *id = kf_stack_submit(&S, body);
    char url[160], *v;
    kf_http_resp r;
    long long end = kf_test_now_ms() + 15000;

    while (kf_test_now_ms() < end && kf_stack_redis_int(&S, "ZCARD %s", "kf:dead") < 1)
        kf_test_sleep_ms(50);
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:dead"), 1, "the worker dead-letters the job; see %s", S.dir);
    v = kf_stack_sql_value(&S, "UPDATE jobs SET state = 'dead', finished_at = now() WHERE id = $1::uuid RETURNING id",
                           id);
    cr_assert_not_null(v);
    free(v);
    snprintf(url, sizeof(url), "%s/v1/jobs/%s/requeue", S.api_url, id);
    long st = kf_http_json("POST", url, S.admin, NULL, &r);
    cr_assert_eq(st, 202, "requeue answered %ld: %s", st, r.body);
    kf_http_resp_release(&r);
    kf_stack_scheduler(&S, 0);
    end = kf_test_now_ms() + 15000;
    while (kf_test_now_ms() < end && events(id, "started") < 2)
        kf_test_sleep_ms(50);
    cr_assert_eq(events(id, "started"), 2, "the re-queued job ran again; see %s", S.dir);
    cr_assert(kf_stack_wait_state(&S, id, "dead", 15000), "job is %s", kf_stack_state(&S, id));
    free(id);
    free(body);
}

/* The other side of that guard: the API deletes a job's delivered enqueue
 * row a little after the job reaches Redis, and a worker can lease, run
 * and dead-letter the job before that.  Staged without a scheduler: the
 * job runs and dies, its enqueue row is put back as if not yet deleted,
 * and the scheduler starts.  The death must be recorded: the job is
 * running in PostgreSQL, so the row is not a later life. */
Test(e2e, a_death_is_recorded_while_the_delivered_outbox_row_lingers)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 0 };
    kf_stack_start(&S, &o);
    char *body = kf_stack_diag_body(0, false, true, 1);
    char *id = kf_stack_submit(&S, body);
    long long end = kf_test_now_ms() + 15000;
    char *v;

    while (kf_test_now_ms() < end && kf_stack_redis_int(&S, "ZCARD %s", "kf:dead") < 1)
        kf_test_sleep_ms(50);
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:dead"), 1, "the worker dead-letters the job; see %s", S.dir);
    cr_assert_str_eq(kf_stack_state(&S, id), "running");
    v = kf_stack_sql_value(&S, "INSERT INTO outbox (job_id, action) VALUES ($1::uuid, 'enqueue') RETURNING id", id);
    cr_assert_not_null(v);
    free(v);
    kf_stack_scheduler(&S, 0);
    cr_assert(kf_stack_wait_state(&S, id, "dead", 15000), "job is %s; see %s", kf_stack_state(&S, id), S.dir);
    cr_assert_eq(events(id, "dead"), 1);
    free(id);
    free(body);
}

/* An admin re-queues a dead job (POST /v1/jobs/{id}/requeue): the relay
 * drops the dead letter from Redis and queues the job again, which runs
 * once more with the next attempt number. */
Test(e2e, an_admin_requeue_of_a_dead_job_runs_it_again)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 1 };
    kf_stack_start(&S, &o);
    char *body = kf_stack_diag_body(0, false, true, 1);
    char *id = kf_stack_submit(&S, body);
    char url[160];
    kf_http_resp r;

    cr_assert(kf_stack_wait_state(&S, id, "dead", 15000), "job is %s; see %s", kf_stack_state(&S, id), S.dir);
    snprintf(url, sizeof(url), "%s/v1/jobs/%s/requeue", S.api_url, id);
    long st = kf_http_json("POST", url, S.admin, "{\"extra_attempts\":1}", &r);
    cr_assert_eq(st, 202, "requeue answered %ld: %s", st, r.body);
    kf_http_resp_release(&r);
    long long end = kf_test_now_ms() + 15000;
    while (kf_test_now_ms() < end && events(id, "started") < 2)
        kf_test_sleep_ms(50);
    cr_assert_eq(events(id, "started"), 2, "the re-queued job ran again; see %s", S.dir);
    cr_assert(kf_stack_wait_state(&S, id, "dead", 15000), "job is %s", kf_stack_state(&S, id));
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", id), 2);
    cr_assert_eq(events(id, "dead"), 2, "one death per life");
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:dead"), 1, "one dead letter, not two");
    free(id);
    free(body);
}

/* GET url (token may be NULL) answered 200, parsed. */
static cJSON *get_json(const char *path, const char *token)
{
    char url[256];
    kf_http_resp r;
    cJSON *v;

    snprintf(url, sizeof(url), "%s%s", S.api_url, path);
    cr_assert_eq(kf_http_json("GET", url, token, NULL, &r), 200, "GET %s: %s", path, r.body ? r.body : r.error);
    v = cJSON_Parse(r.body);
    cr_assert_not_null(v, "%s", r.body);
    kf_http_resp_release(&r);
    return v;
}

/* Routing by capability with the real processes: a worker built with the
 * diag and sim backends runs the diag job and never leases the neuron one,
 * which stays queued (no attempt used) and says why. */
Test(e2e, a_worker_never_leases_a_job_of_a_backend_it_does_not_run)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 1 };
    char *diag, *neuron;
    cJSON *j, *rd;
    const cJSON *w, *m;

    kf_stack_start(&S, &o);
    neuron = kf_stack_submit(&S, "{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"neuron\",\"op\":\"add\","
                                 "\"shapes\":[[64,64],[64,64]],\"dtype\":\"float32\"}");
    diag = kf_stack_submit(&S, "{\"kind\":\"diag\",\"target\":\"trn2\",\"spec\":{\"sleep_ms\":10}}");
    cr_assert(kf_stack_wait_state(&S, diag, "succeeded", 15000), "job %s is %s; see %s", diag,
              kf_stack_state(&S, diag), S.dir);
    kf_test_sleep_ms(1500);   /* the worker idles past a few lease polls and wake-ups */
    cr_assert_str_eq(kf_stack_state(&S, neuron), "queued");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", neuron), 0,
                 "no attempt was spent on a worker without the backend");
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:wait:neuron:trn2"), 1);
    /* The worker's heartbeat offered exactly its targets x backends. */
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:cap:sim:trn2"), 1);
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:cap:diag:trn2"), 1);
    cr_assert_eq(kf_stack_redis_int(&S, "SISMEMBER kf:caps %s", "neuron:trn2"), 0);

    {
        char *path = kf_asprintf("/v1/jobs/%s", neuron);
        j = get_json(path, S.user);
        free(path);
    }
    w = cJSON_GetObjectItem(j, "waiting");
    cr_assert_not_null(w);
    cr_assert_str_eq(cJSON_GetObjectItem(w, "reason")->valuestring,
                     "no live worker offers backend 'neuron' for target 'trn2' (none ever has)");
    cJSON_Delete(j);
    rd = get_json("/readyz", NULL);
    m = cJSON_GetArrayItem(cJSON_GetObjectItem(rd, "missing_capabilities"), 0);
    cr_assert_not_null(m, "/readyz names the missing capability");
    cr_assert_str_eq(cJSON_GetObjectItem(m, "backend")->valuestring, "neuron");
    cr_assert_str_eq(cJSON_GetObjectItem(m, "target")->valuestring, "trn2");
    cJSON_Delete(rd);
    free(diag);
    free(neuron);
}
