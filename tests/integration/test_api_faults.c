/* Fault injection for kforge-api: PostgreSQL stopped (503 + Retry-After,
 * never a crash, recovery by itself) and Redis stopped (jobs still
 * accepted into the outbox, /readyz names what is missing).  The services
 * are the harness's own (tests/run.sh) and are restarted by the fixture's
 * teardown even when a test fails. */
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>

#include "test_api_fixture.h"

#define REDIS_DB 4

static api_fx fx;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static const char *as_pg(void)
{
    return geteuid() == 0 ? "runuser -u postgres -- " : "";
}

static bool pg_running(void)
{
    return sh("%s%s/pg_ctl -D %s status >/dev/null 2>&1", as_pg(), kf_test_env("KFORGE_TEST_PG_BIN"),
              kf_test_env("KFORGE_TEST_PG_DIR")) == 0;
}

static void pg_stop(void)
{
    cr_assert_eq(sh("%s%s/pg_ctl -D %s -m fast -w -t 30 stop >/dev/null", as_pg(), kf_test_env("KFORGE_TEST_PG_BIN"),
                    kf_test_env("KFORGE_TEST_PG_DIR")),
                 0, "pg_ctl stop failed");
}

/* The same options tests/lib/services.sh starts it with. */
static void pg_start(void)
{
    const char *dir = kf_test_env("KFORGE_TEST_PG_DIR");
    int rc = sh("%s%s/pg_ctl -D %s -l %s/server.log -w -t 30 -o \"-c listen_addresses=127.0.0.1 -p %s -k %s "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200\" start "
                ">/dev/null",
                as_pg(), kf_test_env("KFORGE_TEST_PG_BIN"), dir, dir, kf_test_env("KFORGE_TEST_PG_PORT"), dir);
    cr_assert_eq(rc, 0, "pg_ctl start failed; see %s/server.log", dir);
}

static bool redis_running(void)
{
    return sh("redis-cli -p %s ping >/dev/null 2>&1", kf_test_env("KFORGE_TEST_REDIS_PORT")) == 0;
}

static void redis_stop(void)
{
    const char *port = kf_test_env("KFORGE_TEST_REDIS_PORT");
    sh("redis-cli -p %s shutdown >/dev/null 2>&1", port);
    for (int i = 0; i < 100 && redis_running(); i++)
        kf_test_sleep_ms(50);
    cr_assert(!redis_running(), "redis did not stop");
}

static void redis_start(void)
{
    cr_assert_eq(sh("redis-server %s/redis.conf", kf_test_env("KFORGE_TEST_REDIS_DIR")), 0);
    for (int i = 0; i < 100 && !redis_running(); i++)
        kf_test_sleep_ms(50);
    cr_assert(redis_running(), "redis did not restart");
}

static void setup(void)
{
    fx_start(&fx, REDIS_DB, NULL);
}

static void teardown(void)
{
    if (!pg_running())
        pg_start();
    if (!redis_running())
        redis_start();
    fx_stop(&fx);
}

TestSuite(faults, .init = setup, .fini = teardown, .timeout = 120);

static void expect_503(kf_http_resp *r, const char *what)
{
    char *ra = kf_http_header(r, "Retry-After");
    char *ct = kf_http_header(r, "Content-Type");
    cr_assert_eq(r->status, 503, "%s: %ld %s", what, r->status, r->body);
    cr_assert(ra && atoi(ra) > 0, "%s: no Retry-After", what);
    cr_assert_str_eq(ct, "application/problem+json");
    cr_assert(strstr(r->body, "\"status\":503"), "%s: %s", what, r->body);
    free(ra);
    free(ct);
}

Test(faults, postgres_down_is_503_with_retry_after_then_recovers)
{
    kf_http_resp r;
    char *id = fx_submit(&fx, fx.user, NULL);
    char *path = kf_asprintf("/v1/jobs/%s", id);
    long long waiting, t0;

    cr_assert_eq(fx_redis_int_soon(&fx, "EXISTS kf:job:%s", id, 1), 1, "job not in Redis");
    waiting = fx_redis_int(&fx, "ZCARD kf:wait:diag:%s", "trn2");

    pg_stop();
    fx_req(&fx, "GET", path, fx.user, NULL, &r);
    expect_503(&r, "GET job");
    kf_http_resp_release(&r);
    fx_req(&fx, "POST", "/v1/jobs", fx.user, "{\"kind\":\"diag\",\"target\":\"trn2\"}", &r);
    expect_503(&r, "POST job");
    kf_http_resp_release(&r);
    fx_req(&fx, "GET", "/v1/jobs", fx.user, NULL, &r);
    expect_503(&r, "list");
    kf_http_resp_release(&r);
    fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker, "{}", &r);
    expect_503(&r, "heartbeat");
    kf_http_resp_release(&r);
    /* Nothing half-written: no Redis entry without its PostgreSQL row. */
    cr_assert_eq(fx_redis_int(&fx, "ZCARD kf:wait:diag:%s", "trn2"), waiting);

    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 503);
    cr_assert(strstr(r.body, "\"missing\":[\"postgresql\"]"), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/healthz", NULL, NULL, &r), 200);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/metrics", NULL, NULL, &r), 200);
    cr_assert(strstr(r.body, "kforge_dependency_up{dependency=\"postgresql\"} 0"), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(kill(fx.pid, 0), 0, "kforge-api died while PostgreSQL was down");

    pg_start();
    PQreset(fx.pg);
    /* The API notices by itself (at most a Retry-After later), then every
     * pooled connection is re-opened on its next use. */
    t0 = kf_test_now_ms();
    while (fx_req(&fx, "GET", path, fx.user, NULL, &r) == 503 && kf_test_now_ms() - t0 < 5000) {
        kf_http_resp_release(&r);
        kf_test_sleep_ms(50);
    }
    kf_http_resp_release(&r);
    for (int i = 0; i < 12; i++) {
        cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200, "after restart (%d): %s", i, r.body);
        kf_http_resp_release(&r);
    }
    cr_assert_lt(kf_test_now_ms() - t0, 5000);
    free(fx_submit(&fx, fx.user, NULL));
    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 2);
    free(path);
    free(id);
}

Test(faults, redis_down_still_accepts_jobs_into_the_outbox)
{
    kf_http_resp r;
    char *id, *id2, *path;

    redis_stop();
    id = fx_submit(&fx, fx.user, NULL);
    /* Committed in PostgreSQL with its pending outbox row; nothing in Redis. */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1 AND action = 'enqueue'", id), 1);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'created'", id), 1);
    path = kf_asprintf("/v1/jobs/%s", id);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), 200);
    cr_assert(strstr(r.body, "\"queued\""), "%s", r.body);
    kf_http_resp_release(&r);
    free(path);

    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 503);
    cr_assert(strstr(r.body, "\"missing\":[\"redis\"]"), "%s", r.body);
    cr_assert(strstr(r.body, "\"postgresql\":\"ok\""), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/metrics", NULL, NULL, &r), 200);
    cr_assert(strstr(r.body, "kforge_dependency_up{dependency=\"redis\"} 0"), "%s", r.body);
    kf_http_resp_release(&r);

    /* A cancel is recorded; its outbox row waits for the relay. */
    id2 = fx_submit(&fx, fx.user, NULL);
    path = kf_asprintf("/v1/jobs/%s/cancel", id2);
    cr_assert_eq(fx_req(&fx, "POST", path, fx.user, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    free(path);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1 AND action = 'cancel'", id2), 1);
    /* ... and the cancelled job's enqueue row is gone so it is never relayed. */
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1 AND action = 'enqueue'", id2), 0);

    redis_start();
    for (int i = 0; i < 50; i++) {
        long st = fx_req(&fx, "GET", "/readyz", NULL, NULL, &r);
        kf_http_resp_release(&r);
        if (st == 200)
            break;
        kf_test_sleep_ms(100);
    }
    cr_assert_eq(fx_req(&fx, "GET", "/readyz", NULL, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    free(id2);
    id2 = fx_submit(&fx, fx.user, NULL);
    /* Redis is back: the fast path delivers and deletes the outbox row. */
    cr_assert_eq(fx_sql_int_soon(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1", id2, 0), 0);
    cr_assert_eq(fx_redis_int(&fx, "EXISTS kf:job:%s", id2), 1);
    /* The job accepted while Redis was down waits for the scheduler's relay. */
    cr_assert_eq(fx_redis_int(&fx, "EXISTS kf:job:%s", id), 0);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM outbox WHERE job_id = $1", id), 1);
    free(id);
    free(id2);
}
