/* kforge-scheduler on its own: one leader among several, retention (dead
 * letters, idempotency keys, the worker registry) and reconciliation after
 * a Redis restart that lost a write while the kf:epoch marker survived. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_stack.h"

#define SCHED_DB 3

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

/* cppcheck-suppress unknownMacro */
TestSuite(scheduler, .fini = teardown, .timeout = 60);

static int log_count(int i, const char *needle)
{
    char *log = kf_stack_log(&S, "sched", i);
    FILE *f = fopen(log, "r");
    char line[2048];
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    free(log);
    return n;
}

/* Invariant: among several schedulers exactly one leads at a time; when it
 * dies exactly one other takes over. */
Test(scheduler, one_leader_among_three)
{
    kf_stack_opts o = { .redis_db = SCHED_DB, .n_schedulers = 3 };
    int leader = -1, leaders = 0;

    kf_stack_start(&S, &o);
    kf_test_sleep_ms(2500);
    for (int i = 0; i < 3; i++) {
        int n = log_count(i, "became leader");
        cr_assert(n <= 1, "scheduler %d became leader %d times", i, n);
        if (n == 1) {
            leader = i;
            leaders++;
        }
    }
    cr_assert_eq(leaders, 1, "%d leaders; see %s", leaders, S.dir);
    kill(S.sched[leader], SIGKILL);
    waitpid(S.sched[leader], NULL, 0);
    S.sched[leader] = 0;
    kf_test_sleep_ms(2500);
    leaders = 0;
    for (int i = 0; i < 3; i++)
        if (i != leader)
            leaders += log_count(i, "became leader");
    cr_assert_eq(leaders, 1, "exactly one standby took over; see %s", S.dir);
}

/* Invariant: retention removes what is past its time and nothing else:
 * dead letters older than KFORGE_IDEMPOTENCY_TTL_S, expired idempotency
 * keys, registry entries of workers whose heartbeat expired. */
Test(scheduler, retention_trims_only_what_expired)
{
    kf_stack_opts o = { .redis_db = SCHED_DB, .n_schedulers = 0, .sched_env = "KFORGE_IDEMPOTENCY_TTL_S=60" };
    char cmd[256];
    kf_stack_start(&S, &o);

    char *tok = kf_stack_sql_value(&S, "SELECT id::text FROM api_tokens WHERE role = $1", "user");
    cr_assert_not_null(tok);
    char *ins = kf_stack_sql_value(&S,
        "INSERT INTO idempotency_keys (owner_token_id, key, fingerprint, state, created_at) VALUES "
        "($1::bigint, 'old', '\\x00', 'done', now() - interval '2 days'), "
        "($1::bigint, 'new', '\\x00', 'done', now()) RETURNING 1", tok);
    cr_assert_not_null(ins, "inserting idempotency keys failed");
    free(ins);
    free(tok);

    long long now_ms = (long long)time(NULL) * 1000;
    snprintf(cmd, sizeof(cmd), "ZADD kf:dead %lld olddead %lld newdead", now_ms - 120000, now_ms);
    kf_stack_redis(&S, cmd);
    kf_stack_redis(&S, "HSET kf:job:olddead state dead");
    kf_stack_redis(&S, "HSET kf:job:newdead state dead");
    kf_stack_redis(&S, "SET kf:worker:ghost x PX 50");
    kf_stack_redis(&S, "SET kf:worker:alive x PX 60000");
    kf_stack_redis(&S, "ZADD kf:workers 1 ghost 2 alive");
    kf_test_sleep_ms(100);

    kf_stack_scheduler(&S, 0);
    long long end = kf_test_now_ms() + 5000;
    while (kf_test_now_ms() < end && kf_stack_redis_int(&S, "EXISTS %s", "kf:job:olddead") != 0)
        kf_test_sleep_ms(50);
    kf_test_sleep_ms(300);
    cr_assert_eq(kf_stack_redis_int(&S, "EXISTS %s", "kf:job:olddead"), 0, "old dead letter trimmed; see %s",
                 S.dir);
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:dead"), 1);
    cr_assert_eq(kf_stack_redis_int(&S, "EXISTS %s", "kf:job:newdead"), 1, "a recent dead letter stays");
    cr_assert_eq(kf_stack_redis_int(&S, "ZCARD %s", "kf:workers"), 1, "only the vanished worker left the registry");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM idempotency_keys WHERE key = $1", "old"), 0,
                 "expired idempotency key deleted");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM idempotency_keys WHERE key = $1", "new"), 1);
}

/* Invariant: a write Redis lost across a restart (AOF everysec keeps all
 * but the last second; here the loss is simulated) is restored from
 * PostgreSQL at once, even though the kf:epoch marker survived. */
Test(scheduler, redis_restart_triggers_reconciliation)
{
    kf_stack_opts o = { .redis_db = SCHED_DB, .n_schedulers = 1 };
    char cmd[160];
    kf_stack_start(&S, &o);
    char *body = kf_stack_diag_body(0, false, false, 3);
    char *id = kf_stack_submit(&S, body);

    long long end = kf_test_now_ms() + 3000;
    while (kf_test_now_ms() < end && log_count(0, "reconcile") + log_count(0, "became leader") == 0)
        kf_test_sleep_ms(50);
    kf_test_sleep_ms(300);
    snprintf(cmd, sizeof(cmd), "DEL kf:job:%s", id);
    kf_stack_redis(&S, cmd);
    snprintf(cmd, sizeof(cmd), "ZREM kf:wait:diag:trn2 %s", id);
    kf_stack_redis(&S, cmd);
    kf_test_sleep_ms(1200);   /* AOF everysec has the deletion on disk */
    char key[80];
    snprintf(key, sizeof(key), "kf:job:%s", id);
    cr_assert_eq(kf_stack_redis_int(&S, "EXISTS %s", key), 0, "periodic reconciliation is minutes away");
    kf_stack_redis_stop();
    kf_stack_redis_start();
    end = kf_test_now_ms() + 5000;
    while (kf_test_now_ms() < end && kf_stack_redis_int(&S, "EXISTS %s", key) != 1)
        kf_test_sleep_ms(50);
    cr_assert_eq(kf_stack_redis_int(&S, "EXISTS %s", key), 1, "the job is back in Redis; see %s", S.dir);
    /* the log line follows the commit that ends the reconcile pass */
    end = kf_test_now_ms() + 3000;
    while (kf_test_now_ms() < end && log_count(0, "why=redis-restarted") == 0)
        kf_test_sleep_ms(50);
    cr_assert(log_count(0, "why=redis-restarted") >= 1, "reconciled because Redis restarted; see %s", S.dir);
    cr_assert_str_eq(kf_stack_state(&S, id), "queued");
    free(id);
    free(body);
}
