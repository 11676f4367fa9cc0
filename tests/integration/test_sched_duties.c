/* The scheduler's duties (scheduler/ks_sched.h) one by one, against the
 * harness's real Redis and PostgreSQL: the relay delivers old outbox rows
 * and deletes them, reconciliation re-queues what Redis lost (a second
 * pass after a loss finds the jobs whose enqueue was in flight) and records
 * what it finds ended, retention deletes expired idempotency keys, and
 * only one of two schedulers leads. */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "kf_alloc.h"
#include "kf_queue.h"
#include "scheduler/ks_sched.h"
#include "tests/lib/kf_test.h"

#define SCHED_DUTIES_DB 6

static PGconn *pg;
static char *dsn;
static kf_queue *q;
static ks_sched *s;

static void setup(void)
{
    kf_err e = KF_ERR_INIT;
    char *url = kf_test_redis_url(SCHED_DUTIES_DB);
    char *dir = kf_asprintf("%s/migrations", kf_test_env("KFORGE_TEST_ROOT"));
    redisContext *raw = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
    redisReply *r;
    int applied = 0;
    ks_config cfg = { .ttl_ms = 5000, .retry_base_ms = 100, .retry_cap_ms = 1000, .idem_ttl_s = 3600 };

    cr_assert(raw && !raw->err, "cannot reach the test Redis");
    r = redisCommand(raw, "SELECT %d", SCHED_DUTIES_DB);
    freeReplyObject(r);
    r = redisCommand(raw, "FLUSHDB");
    freeReplyObject(r);
    redisFree(raw);
    dsn = kf_test_fresh_db();
    pg = PQconnectdb(dsn);
    cr_assert(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    cr_assert_eq(api_migrate(pg, dir, NULL, &applied, &e), KF_OK, "%s", e.msg);
    q = kf_queue_connect(url, &e);
    cr_assert_not_null(q, "%s", e.msg);
    cfg.dsn = dsn;
    s = ks_new(&cfg, q);
    cr_assert(ks_pg_ok(s));
    free(dir);
    free(url);
}

static void teardown(void)
{
    ks_free(s);
    kf_queue_free(q);
    PQfinish(pg);
    free(dsn);
}

/* cppcheck-suppress unknownMacro */
TestSuite(ks_sched, .init = setup, .fini = teardown, .timeout = 60);

static void exec_ok(const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
}

static char *q1(const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    char *v;

    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(r));
    v = kf_strdup(PQntuples(r) && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "<none>");
    PQclear(r);
    return v;
}

static void q1_eq(const char *sql, const char *want)
{
    char *v = q1(sql);
    cr_assert_str_eq(v, want, "%s", sql);
    free(v);
}

static void job(const char *id, const char *state, int attempt, bool cancel_requested)
{
    char *sql = kf_asprintf("INSERT INTO jobs (id, kind, state, target, backend, spec, attempt, max_attempts, "
                            "owner_token_id, cancel_requested) VALUES ('%s', 'diag', '%s', 'trn2', 'diag', "
                            "'{\"sleep_ms\":0}', %d, 3, 1, %s)",
                            id, state, attempt, cancel_requested ? "true" : "false");
    exec_ok(sql);
    free(sql);
}

static bool in_redis(const char *id, char state[16])
{
    kf_err e = KF_ERR_INIT;
    kf_queue_info info;
    bool exists = false;

    cr_assert_eq(kf_queue_inspect(q, id, &info, &exists, &e), KF_OK, "%s", e.msg);
    if (exists && state)
        snprintf(state, 16, "%s", info.state);
    kf_queue_info_release(&info);
    return exists;
}

Test(ks_sched, the_relay_delivers_old_outbox_rows_and_deletes_them)
{
    const char *old = "20000000-0000-7000-8000-000000000001", *young = "20000000-0000-7000-8000-000000000002";
    char st[16] = "";

    job(old, "queued", 0, false);
    job(young, "queued", 0, false);
    exec_ok("INSERT INTO outbox (job_id, created_at) VALUES ('20000000-0000-7000-8000-000000000001', "
            "now() - interval '5 seconds'), ('20000000-0000-7000-8000-000000000002', now())");
    ks_relay(s);
    cr_assert(in_redis(old, st));
    cr_assert_str_eq(st, "queued");
    cr_assert_not(in_redis(young, NULL), "a row younger than a second is the API's own, in flight");
    q1_eq("SELECT string_agg(job_id::text, ',') FROM outbox", young);
    /* A cancel row for the relayed job takes it out of Redis. */
    exec_ok("INSERT INTO outbox (job_id, action, created_at) VALUES ('20000000-0000-7000-8000-000000000001', "
            "'cancel', now() - interval '5 seconds')");
    ks_relay(s);
    cr_assert_not(in_redis(old, NULL));
    q1_eq("SELECT count(*) FROM outbox WHERE action = 'cancel'", "0");
}

Test(ks_sched, reconcile_requeues_what_redis_lost_and_records_what_ended)
{
    const char *lost = "20000000-0000-7000-8000-000000000011", *cancelled = "20000000-0000-7000-8000-000000000012";
    const char *done = "20000000-0000-7000-8000-000000000013";
    char st[16] = "";

    job(lost, "running", 2, false);
    job(cancelled, "queued", 0, true);
    job(done, "succeeded", 1, false);
    cr_assert(ks_reconcile(s, "test"));
    cr_assert(in_redis(lost, st), "a running job Redis lacks goes back on the queue");
    cr_assert_str_eq(st, "queued");
    q1_eq("SELECT string_agg(type, ',' ORDER BY id) FROM job_events WHERE job_id = "
          "'20000000-0000-7000-8000-000000000011'",
          "requeued");
    q1_eq("SELECT state FROM jobs WHERE id = '20000000-0000-7000-8000-000000000011'", "queued");
    cr_assert_not(in_redis(cancelled, NULL));
    q1_eq("SELECT state FROM jobs WHERE id = '20000000-0000-7000-8000-000000000012'", "cancelled");
    cr_assert_not(in_redis(done, NULL), "an ended job is not reconciled");
    /* Nothing left to fix: a second pass changes nothing. */
    cr_assert(ks_reconcile(s, "again"));
    q1_eq("SELECT count(*) FROM job_events", "2");
}

/* Redis loses its data while the API's enqueue of a job is in flight: the
 * job reached Redis (and is lost with it) but its outbox row is not deleted
 * yet, so the first reconcile leaves the job to the relay; the API then
 * deletes the row as delivered.  The second pass, past the relay's
 * horizon, puts the job back on the queue: it does not wait a minute for
 * the periodic reconcile. */
Test(ks_sched, a_job_whose_enqueue_was_in_flight_when_redis_lost_its_data_is_queued_again)
{
    const char *inflight = "20000000-0000-7000-8000-000000000021", *lost = "20000000-0000-7000-8000-000000000022";
    long long t0 = kf_test_now_ms();
    char st[16] = "";

    job(inflight, "queued", 0, false);
    job(lost, "running", 1, false);
    exec_ok("INSERT INTO outbox (job_id, created_at) VALUES ('20000000-0000-7000-8000-000000000021', now())");
    ks_tick(s, t0);   /* leader; the kf:epoch marker is missing: Redis lost its data */
    cr_assert(ks_is_leader(s));
    cr_assert(in_redis(lost, NULL), "the first pass re-queues what no outbox row covers");
    cr_assert_not(in_redis(inflight, NULL), "a covered job is the relay's (its row is younger than a second)");
    exec_ok("DELETE FROM outbox");   /* the API's courier: delivered */
    ks_tick(s, t0 + 100);
    cr_assert_not(in_redis(inflight, NULL), "no full scan each tick");
    ks_tick(s, t0 + 3000);
    cr_assert(in_redis(inflight, st), "the second pass after the loss queues the job again");
    cr_assert_str_eq(st, "queued");
    q1_eq("SELECT string_agg(job_id::text || ':' || type, ',' ORDER BY id) FROM job_events",
          "20000000-0000-7000-8000-000000000022:requeued,20000000-0000-7000-8000-000000000021:requeued");
    /* Owed once: later ticks record nothing more. */
    ks_tick(s, t0 + 6000);
    q1_eq("SELECT count(*) FROM job_events", "2");
}

Test(ks_sched, retention_deletes_expired_idempotency_keys_only)
{
    exec_ok("INSERT INTO api_tokens (id, name, role, token_hash) VALUES (1, 'u', 'user', '\\x01')");
    exec_ok("INSERT INTO idempotency_keys (owner_token_id, key, fingerprint, created_at) VALUES "
            "(1, 'old', '\\x00', now() - interval '2 hours'), (1, 'new', '\\x00', now())");
    ks_retain(s);
    q1_eq("SELECT string_agg(key, ',') FROM idempotency_keys", "new");
}

Test(ks_sched, one_of_two_schedulers_leads_and_the_other_takes_over_when_it_resigns)
{
    ks_config cfg = { .dsn = dsn, .ttl_ms = 5000, .retry_base_ms = 100, .retry_cap_ms = 1000, .idem_ttl_s = 3600 };
    ks_sched *other = ks_new(&cfg, q);

    ks_tick(s, kf_test_now_ms());
    ks_tick(other, kf_test_now_ms());
    cr_assert(ks_is_leader(s));
    cr_assert_not(ks_is_leader(other));
    ks_free(s);   /* resigns */
    s = NULL;
    ks_tick(other, kf_test_now_ms());
    cr_assert(ks_is_leader(other));
    s = other;
}

static long long redis_int(redisContext *raw, const char *cmd)
{
    redisReply *r = redisCommand(raw, cmd);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

/* Upgrade: the jobs a previous version left in kf:wait:{target} are moved
 * to their (target, backend) set when a scheduler becomes leader, all of
 * them (more than one batch), before any worker of the new version could
 * miss them. */
Test(ks_sched, a_new_leader_moves_the_previous_versions_waiting_jobs_to_their_pairs)
{
    enum { N = 1500 };
    redisContext *raw = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
    const char *trn2 = "trn2", *neuron = "neuron";
    kf_queue_caps c = { &trn2, 1, &neuron, 1 };
    kf_queue_lease l;
    kf_err e = KF_ERR_INIT;
    bool got = false;

    cr_assert(raw && !raw->err);
    freeReplyObject(redisCommand(raw, "SELECT %d", SCHED_DUTIES_DB));
    for (int i = 0; i < N; i++) {
        if (i % 2 == 0)
            redisAppendCommand(raw, "HSET kf:job:old-%d kind generate target trn2 backend neuron priority 5 attempt 0 "
                                    "max_attempts 3 state queued payload {}", i);
        else
            redisAppendCommand(raw, "HSET kf:job:old-%d kind generate target trn2 priority 5 attempt 0 "
                                    "max_attempts 3 state queued payload {}", i);
        redisAppendCommand(raw, "ZADD kf:wait:trn2 %d old-%d", 50000000 + i, i);
    }
    for (int i = 0; i < 2 * N; i++) {
        redisReply *r = NULL;
        cr_assert_eq(redisGetReply(raw, (void **)&r), REDIS_OK);
        freeReplyObject(r);
    }
    freeReplyObject(redisCommand(raw, "SADD kf:targets trn2"));

    ks_tick(s, kf_test_now_ms());
    cr_assert(ks_is_leader(s));
    cr_assert_eq(redis_int(raw, "EXISTS kf:wait:trn2"), 0, "nothing left in the old set");
    cr_assert_eq(redis_int(raw, "ZCARD kf:wait:neuron:trn2"), N / 2);
    cr_assert_eq(redis_int(raw, "ZCARD kf:wait:sim:trn2"), N / 2, "no backend recorded: the simulator");
    cr_assert_eq(kf_queue_lease_job(q, &c, "w-n", 60000, &l, &got, &e), KF_OK, "%s", e.msg);
    cr_assert(got);
    cr_assert_str_eq(l.id, "old-0", "the oldest first, as before the upgrade");
    kf_queue_lease_free(&l);
    redisFree(raw);
}
