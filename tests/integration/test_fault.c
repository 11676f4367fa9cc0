/* Fault injection on the whole pipeline (issue 5): real api, scheduler and
 * worker processes, real Redis and PostgreSQL stopped, flushed and
 * restarted, workers killed, paused and drained.  Every test states the
 * invariant it checks and ends with kf_stack_assert_settled(): each job is
 * terminal (none stuck), has one result row and one terminal event (none
 * duplicated), and left nothing in Redis (finished jobs leave the queue).
 * Short leases (2 s) and scheduler ticks (100 ms) keep it fast; every wait
 * has a deadline. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kf_alloc.h"
#include "kf_queue.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"

#define FAULT_DB 2
#define LEASE_MS 2000

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

/* cppcheck-suppress unknownMacro */
TestSuite(fault, .fini = teardown, .timeout = 120);

static void start(int workers, int schedulers)
{
    kf_stack_opts o = { .redis_db = FAULT_DB, .n_workers = workers, .n_schedulers = schedulers,
                        .lease_ms = LEASE_MS };
    kf_stack_start(&S, &o);
}

static char *submit(int sleep_ms, bool fail, bool crash, int max_attempts)
{
    char *body = kf_stack_diag_body(sleep_ms, fail, crash, max_attempts);
    char *id = kf_stack_submit(&S, body);
    free(body);
    return id;
}

static long started_attempt(const char *id, int attempt)
{
    char *sql = kf_asprintf("SELECT count(*) FROM job_events WHERE job_id = $1::uuid AND type = 'started' "
                            "AND attempt = %d", attempt);
    long n = kf_stack_sql_long(&S, sql, id);
    free(sql);
    return n;
}

static bool wait_started(const char *id, int attempt, int timeout_ms)
{
    long long end = kf_test_now_ms() + timeout_ms;
    do {
        if (started_attempt(id, attempt) >= 1)
            return true;
        kf_test_sleep_ms(10);
    } while (kf_test_now_ms() < end);
    return false;
}

static long count_events(const char *id, const char *type)
{
    char *sql = kf_asprintf("SELECT count(*) FROM job_events WHERE job_id = $1::uuid AND type = '%s'", type);
    long n = kf_stack_sql_long(&S, sql, id);
    free(sql);
    return n;
}

/* Invariant: a worker killed mid-job loses nothing; the job runs again
 * with attempt + 1 within 2x the lease and succeeds once. */
Test(fault, worker_sigkill_mid_job_runs_again_within_two_leases)
{
    start(1, 1);
    char *id = submit(3000, false, false, 3);

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    kill(S.workers[0], SIGKILL);
    waitpid(S.workers[0], NULL, 0);
    long long killed = kf_test_now_ms();
    S.workers[0] = 0;
    kf_stack_worker(&S, 1, NULL);
    cr_assert(wait_started(id, 2, 2 * LEASE_MS), "attempt 2 did not start within 2 leases; see %s", S.dir);
    long long recovery = kf_test_now_ms() - killed;
    cr_log_info("recovery after SIGKILL: %lld ms (lease %d ms)", recovery, LEASE_MS);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 10000), "job is %s", kf_stack_state(&S, id));
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM job_results WHERE job_id = $1::uuid", id), 2);
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: a worker paused past its lease is fenced off: the job runs
 * again elsewhere, and when the paused worker resumes its report and ack
 * are refused; exactly one result row (from the newer attempt). */
Test(fault, worker_sigstop_past_lease_then_sigcont_is_fenced_off)
{
    start(1, 1);
    char *id = submit(1200, false, false, 3);

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    kill(S.workers[0], SIGSTOP);
    kf_stack_worker(&S, 1, NULL);
    bool rerun = wait_started(id, 2, 3 * LEASE_MS);
    bool done = rerun && kf_stack_wait_state(&S, id, "succeeded", 10000);
    kill(S.workers[0], SIGCONT);
    cr_assert(rerun, "attempt 2 did not start while the first worker was stopped; see %s", S.dir);
    cr_assert(done, "job is %s", kf_stack_state(&S, id));
    kf_test_sleep_ms(2000);   /* the resumed worker reports or renews and is refused */
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM job_results WHERE job_id = $1::uuid", id), 2,
                 "the result is the newer attempt's");
    cr_assert_eq(count_events(id, "succeeded"), 1);
    cr_assert_eq(kill(S.workers[0], 0), 0, "the resumed worker carries on");
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: SIGTERM mid-job lets the job finish within the drain time,
 * then the worker exits 0; nothing runs twice. */
Test(fault, sigterm_mid_job_finishes_then_exits)
{
    start(1, 1);
    char *id = submit(800, false, false, 3);

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    int status = kf_test_stop(S.workers[0], SIGTERM, 8000);
    S.workers[0] = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker exit status %d", status);
    cr_assert_str_eq(kf_stack_state(&S, id), "succeeded", "the job finished before the worker left");
    cr_assert_eq(count_events(id, "started"), 1);
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: past the drain deadline the job is handed back without using
 * an attempt (a max_attempts=1 job still succeeds on the next worker), and
 * the worker exits 0. */
Test(fault, sigterm_past_drain_hands_the_job_back)
{
    start(0, 1);
    kf_stack_worker(&S, 0, "KFORGE_DRAIN_MS=200");
    char *id = submit(4000, false, false, 1);

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    long long t0 = kf_test_now_ms();
    int status = kf_test_stop(S.workers[0], SIGTERM, 5000);
    S.workers[0] = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker exit status %d", status);
    cr_assert(kf_test_now_ms() - t0 < 2500, "the worker left soon after the drain time");
    kf_stack_worker(&S, 1, NULL);
    cr_assert(wait_started(id, 2, 3000), "the handed-back job was not picked up again; see %s", S.dir);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 10000), "job is %s", kf_stack_state(&S, id));
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: a Redis restart (AOF on) loses no job and runs none twice to
 * completion; scripts are reloaded after NOSCRIPT. */
Test(fault, redis_restart_with_aof_loses_nothing)
{
    start(2, 1);
    char *ids[6];
    for (int i = 0; i < 6; i++)
        ids[i] = submit(400, false, false, 3);
    cr_assert(wait_started(ids[0], 1, 10000), "nothing started; see %s", S.dir);
    kf_stack_redis_stop();
    kf_test_sleep_ms(500);
    kf_stack_redis_start();
    for (int i = 0; i < 6; i++)
        cr_assert(kf_stack_wait_state(&S, ids[i], "succeeded", 30000), "job %d is %s; see %s", i,
                  kf_stack_state(&S, ids[i]), S.dir);
    kf_stack_assert_settled(&S, ids, 6);
    for (int i = 0; i < 6; i++)
        free(ids[i]);
}

/* Invariant: Redis down for longer than the lease while a job runs: the
 * job still finishes and its result is recorded (PostgreSQL is up); the
 * ack cannot reach Redis, so when Redis returns the reaper finds the
 * expired lease, sees the job has ended in PostgreSQL and drops it: no
 * second run, nothing stuck. */
Test(fault, redis_down_past_the_lease_while_a_job_finishes)
{
    start(1, 1);
    char *id = submit(1000, false, false, 3);

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    kf_stack_redis_stop();
    bool done = kf_stack_wait_state(&S, id, "succeeded", 5000);
    kf_test_sleep_ms(LEASE_MS + 500);   /* the lease expires while Redis is away */
    kf_stack_redis_start();
    cr_assert(done, "the job did not finish while Redis was down: %s", kf_stack_state(&S, id));
    char key[80];
    snprintf(key, sizeof(key), "kf:job:%s", id);
    long long end = kf_test_now_ms() + 5000;
    while (kf_test_now_ms() < end && kf_stack_redis_int(&S, "EXISTS %s", key) != 0)
        kf_test_sleep_ms(50);
    kf_test_sleep_ms(500);
    cr_assert_eq(count_events(id, "started"), 1, "no second run of a finished job");
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: after Redis loses everything (FLUSHDB), reconciliation puts
 * every job PostgreSQL still calls queued/running back on the queue:
 * none lost, none stuck, at most one result each. */
Test(fault, redis_flush_is_reconciled_from_postgres)
{
    start(1, 1);
    char *ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = submit(500, false, false, 3);
    cr_assert(wait_started(ids[0], 1, 10000), "nothing started; see %s", S.dir);
    kf_stack_redis(&S, "FLUSHDB");
    for (int i = 0; i < 4; i++)
        cr_assert(kf_stack_wait_state(&S, ids[i], "succeeded", 30000), "job %d is %s; see %s", i,
                  kf_stack_state(&S, ids[i]), S.dir);
    long requeued = 0;
    for (int i = 0; i < 4; i++)
        requeued += count_events(ids[i], "requeued");
    cr_assert(requeued >= 3, "reconciliation re-queued the lost jobs (%ld events)", requeued);
    kf_stack_assert_settled(&S, ids, 4);
    for (int i = 0; i < 4; i++)
        free(ids[i]);
}

/* Invariant: with PostgreSQL down a POST gets 503 + Retry-After and leaves
 * nothing in Redis (no queue entry without its row); the API recovers by
 * itself. */
Test(fault, postgres_down_during_enqueue)
{
    start(1, 1);
    kf_stack_pg_stop(&S);
    char url[128];
    kf_http_resp r;
    char *body = kf_stack_diag_body(0, false, false, 3);
    snprintf(url, sizeof(url), "%s/v1/jobs", S.api_url);
    long st = kf_http_json("POST", url, S.user, body, &r);
    char *retry_after = kf_http_header(&r, "Retry-After");
    long long waiting = kf_stack_redis_int(&S, "ZCARD %s", "kf:wait:diag:trn2");
    long long jobs = kf_stack_redis_int(&S, "EXISTS %s", "kf:active");
    kf_http_resp_release(&r);
    kf_stack_pg_start(&S);
    cr_assert_eq(st, 503, "POST with PostgreSQL down answered %ld", st);
    cr_assert_not_null(retry_after, "503 carries Retry-After");
    cr_assert_eq(waiting, 0, "no Redis entry without its PostgreSQL row");
    cr_assert_eq(jobs, 0);
    free(retry_after);

    char *id = NULL;
    long long end = kf_test_now_ms() + 15000;
    while (kf_stack_submit_status(&S, body, &id) != 202 && kf_test_now_ms() < end)
        kf_test_sleep_ms(200);
    cr_assert_not_null(id, "the API did not recover after PostgreSQL returned");
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 15000), "job is %s", kf_stack_state(&S, id));
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
    free(body);
}

/* Reports waiting in the workers' spools (one folder per worker id). */
static int spool_files(void)
{
    char *dir = kf_asprintf("%s/spool", S.dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) {
        char *sub;
        DIR *sd;
        struct dirent *f;
        if (e->d_name[0] == '.')
            continue;
        sub = kf_asprintf("%s/%s", dir, e->d_name);
        sd = opendir(sub);
        while (sd && (f = readdir(sd)) != NULL)
            n += strstr(f->d_name, ".rpt") != NULL && f->d_name[0] != '.';
        if (sd)
            closedir(sd);
        free(sub);
    }
    if (d)
        closedir(d);
    free(dir);
    return n;
}

/* Invariant: a result reported while PostgreSQL is down is kept in the
 * worker's spool (the API answers 503) and delivered once it returns: one
 * result row, from the first and only attempt. */
Test(fault, postgres_down_during_result_report_spools_and_delivers)
{
    start(1, 1);
    /* Long enough that PostgreSQL is surely down before the job ends. */
    char *id = submit(3000, false, false, 3);

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    kf_stack_pg_stop(&S);
    long long end = kf_test_now_ms() + 15000;
    int spooled = 0;
    while (kf_test_now_ms() < end && (spooled = spool_files()) == 0)
        kf_test_sleep_ms(50);
    kf_test_sleep_ms(1000);
    kf_stack_pg_start(&S);
    cr_assert(spooled > 0, "the worker did not spool its result; see %s", S.dir);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 20000), "job is %s; see %s", kf_stack_state(&S, id), S.dir);
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM job_results WHERE job_id = $1::uuid", id), 1,
                 "the worker held its lease while the result waited");
    long long t = kf_test_now_ms() + 5000;
    while (spool_files() > 0 && kf_test_now_ms() < t)
        kf_test_sleep_ms(50);
    cr_assert_eq(spool_files(), 0, "the spool is empty once delivered");
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: with the API process gone (connection refused) the worker
 * finishes the job, keeps the result in its spool, and delivers it once the
 * API is back: the job succeeds on its first attempt. */
Test(fault, api_down_during_a_job_result_is_spooled_and_delivered)
{
    start(1, 1);
    /* Long enough that the API is surely gone before the job ends, even
     * when seeing the start takes a while on a loaded machine. */
    char *id = submit(3000, false, false, 3);

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    int status = kf_test_stop(S.api, SIGKILL, 5000);
    (void)status;
    S.api = 0;
    long long end = kf_test_now_ms() + 15000;
    int spooled = 0;
    while (kf_test_now_ms() < end && (spooled = spool_files()) == 0)
        kf_test_sleep_ms(50);
    kf_stack_api(&S);
    cr_assert(spooled > 0, "the worker did not spool its result; see %s", S.dir);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 20000), "job is %s; see %s", kf_stack_state(&S, id), S.dir);
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM job_results WHERE job_id = $1::uuid", id), 1);
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: a queued job cancelled while Redis is down never runs: the
 * cancel commits in PostgreSQL (its Redis half waits in the outbox), and
 * once Redis is back either the scheduler's relay removes the job, or a
 * worker that leased it first is refused at start (409) and drops it. */
static void cancel_while_redis_down(bool with_scheduler)
{
    start(0, with_scheduler ? 1 : 0);
    char *id = submit(0, false, false, 3);
    char url[160], key[80];
    kf_http_resp r;

    kf_stack_redis_stop();
    snprintf(url, sizeof(url), "%s/v1/jobs/%s/cancel", S.api_url, id);
    long st = kf_http_json("POST", url, S.user, NULL, &r);
    kf_http_resp_release(&r);
    kf_stack_redis_start();
    if (with_scheduler)
        kf_test_sleep_ms(500);   /* the relay goes first */
    kf_stack_worker(&S, 0, NULL);
    cr_assert_eq(st, 200, "cancel of a queued job answered %ld", st);
    snprintf(key, sizeof(key), "kf:job:%s", id);
    long long end = kf_test_now_ms() + 5000;
    while (kf_test_now_ms() < end && kf_stack_redis_int(&S, "EXISTS %s", key) != 0)
        kf_test_sleep_ms(50);
    kf_test_sleep_ms(300);
    cr_assert_eq(count_events(id, "started"), 0, "a cancelled job never starts");
    cr_assert_str_eq(kf_stack_state(&S, id), "cancelled");
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

Test(fault, cancel_while_redis_is_down_relay_removes_the_job)
{
    cancel_while_redis_down(true);
}

Test(fault, cancel_while_redis_is_down_worker_drops_the_job_at_start)
{
    cancel_while_redis_down(false);
}

/* Invariant: the same job delivered to two workers at once (a duplicate
 * injected into Redis) produces one result row and one terminal event. */
Test(fault, same_job_delivered_twice_has_one_result)
{
    start(1, 1);
    kf_err e = KF_ERR_INIT;
    char *url = kf_test_redis_url(FAULT_DB);
    kf_queue *q = kf_queue_connect(url, &e);
    char *id = submit(400, false, false, 3);
    char *payload;

    cr_assert(wait_started(id, 1, 10000), "attempt 1 never started; see %s", S.dir);
    /* Inject: drop the job from Redis and enqueue a fresh copy, as a lost
     * ack plus a re-delivery would; a second worker takes it at once. */
    payload = kf_asprintf("{\"id\":\"%s\",\"kind\":\"diag\",\"target\":\"trn2\",\"backend\":\"diag\","
                          "\"spec\":{\"sleep_ms\":400,\"fail\":false,\"crash\":false,\"exit_code\":0},"
                          "\"budget\":{},\"goal\":{}}",
                          id);
    kf_queue_job j = { .id = id, .kind = "diag", .target = "trn2", .backend = "diag", .priority = 5,
                       .attempt = 0, .max_attempts = 3, .payload = payload };
    bool created = false;
    cr_assert_eq(kf_queue_forget(q, id, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(kf_queue_enqueue(q, &j, &created, &e), KF_OK, "%s", e.msg);
    cr_assert(created);
    kf_stack_worker(&S, 1, NULL);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 10000), "job is %s", kf_stack_state(&S, id));
    kf_test_sleep_ms(1500);   /* let the second delivery report too */
    cr_assert_eq(count_events(id, "succeeded"), 1);
    kf_stack_assert_settled(&S, &id, 1);
    kf_queue_free(q);
    free(payload);
    free(url);
    free(id);
}

/* Invariant: a poison job (crashes its process every time) ends dead after
 * max_attempts, counting crashes; the workers survive; no result row. */
Test(fault, poison_job_ends_dead_and_workers_survive)
{
    start(2, 1);
    char *id = submit(0, false, true, 3);

    cr_assert(kf_stack_wait_state(&S, id, "dead", 20000), "job is %s; see %s", kf_stack_state(&S, id), S.dir);
    cr_assert_eq(count_events(id, "started"), 3, "exactly max_attempts deliveries");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM job_results WHERE job_id = $1::uuid", id), 0);
    cr_assert_eq(kill(S.workers[0], 0), 0);
    cr_assert_eq(kill(S.workers[1], 0), 0);
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:dead"), 1, "kept in the dead letters");
    kf_stack_assert_settled(&S, &id, 1);
    free(id);
}

/* Invariant: cancel racing completion ends each job in exactly one
 * terminal state (succeeded if the result won, cancelled otherwise), with
 * one terminal event and no Redis leftovers; a long job stops promptly. */
Test(fault, cancel_racing_completion)
{
    start(2, 1);
    char *ids[7];
    int delays[6] = { 0, 100, 180, 200, 220, 300 };
    char url[160];
    kf_http_resp r;

    for (int i = 0; i < 6; i++) {
        ids[i] = submit(200, false, false, 3);
        cr_assert(wait_started(ids[i], 1, 10000), "job %d never started; see %s", i, S.dir);
        kf_test_sleep_ms(delays[i]);
        snprintf(url, sizeof(url), "%s/v1/jobs/%s/cancel", S.api_url, ids[i]);
        long st = kf_http_json("POST", url, S.user, NULL, &r);
        cr_assert(st == 202 || st == 200 || st == 409, "cancel answered %ld: %s", st, r.body);
        kf_http_resp_release(&r);
    }
    ids[6] = submit(60000, false, false, 3);
    cr_assert(wait_started(ids[6], 1, 10000));
    snprintf(url, sizeof(url), "%s/v1/jobs/%s/cancel", S.api_url, ids[6]);
    cr_assert_eq(kf_http_json("POST", url, S.user, NULL, &r), 202);
    kf_http_resp_release(&r);
    cr_assert(kf_stack_wait_state(&S, ids[6], "cancelled", 3000), "a running job stops at its next check: %s",
              kf_stack_state(&S, ids[6]));
    for (int i = 0; i < 6; i++) {
        long long end = kf_test_now_ms() + 10000;
        while (kf_test_now_ms() < end && strcmp(kf_stack_state(&S, ids[i]), "succeeded") != 0 &&
               strcmp(kf_stack_state(&S, ids[i]), "cancelled") != 0)
            kf_test_sleep_ms(20);
    }
    kf_test_sleep_ms(500);
    kf_stack_assert_settled(&S, ids, 7);
    for (int i = 0; i < 7; i++)
        free(ids[i]);
}

/* Invariant: when the scheduler leader dies, the standby takes the lock
 * within one lock TTL (+ one tick) and does the leader's work: a job that
 * needs a promoter and a death recorder still ends dead. */
Test(fault, scheduler_leader_killed_standby_takes_over)
{
    start(1, 2);
    long long end = kf_test_now_ms() + 5000;
    int which = -1;

    while (which < 0 && kf_test_now_ms() < end) {
        for (int i = 0; i < 2 && which < 0; i++) {
            char *log = kf_stack_log(&S, "sched", i);
            FILE *f = fopen(log, "r");
            char line[1024];
            while (f && fgets(line, sizeof(line), f))
                if (strstr(line, "became leader"))
                    which = i;
            if (f)
                fclose(f);
            free(log);
        }
        kf_test_sleep_ms(50);
    }
    cr_assert(which >= 0, "no scheduler became leader; see %s", S.dir);
    kill(S.sched[which], SIGKILL);
    waitpid(S.sched[which], NULL, 0);
    S.sched[which] = 0;
    long long killed = kf_test_now_ms();

    char *id = submit(0, false, true, 2);
    char *log = kf_stack_log(&S, "sched", 1 - which);
    bool took = false;
    while (!took && kf_test_now_ms() - killed < 1000 + 700) {   /* TTL + ticks + scheduling slack */
        FILE *f = fopen(log, "r");
        char line[1024];
        while (f && fgets(line, sizeof(line), f))
            took = took || strstr(line, "became leader") != NULL;
        if (f)
            fclose(f);
        kf_test_sleep_ms(20);
    }
    cr_log_info("standby took over %lld ms after the leader died", kf_test_now_ms() - killed);
    cr_assert(took, "the standby did not take over within one TTL; see %s", log);
    cr_assert(kf_stack_wait_state(&S, id, "dead", 15000), "job is %s", kf_stack_state(&S, id));
    kf_stack_assert_settled(&S, &id, 1);
    free(log);
    free(id);
}
