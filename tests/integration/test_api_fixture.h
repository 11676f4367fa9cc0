/*
 * test_api_fixture — one kforge-api process per test, on a free port with a
 * fresh database (migrated by `kforge-api migrate`) and its own Redis DB.
 * Included by tests/integration/test_api*.c only (static functions).
 */
#ifndef TEST_API_FIXTURE_H
#define TEST_API_FIXTURE_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <hiredis.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kf_alloc.h"
#include "kf_queue.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"

typedef struct api_fx {
    char   *dsn;
    char   *redis_url;
    int     redis_db;
    int     port;
    char    base[64];
    pid_t   pid;
    char   *dir;
    char   *log;
    char   *admin, *user, *user2, *worker, *worker2;   /* worker tokens: w1, w2 */
    PGconn *pg;
} api_fx;

static char *fx_env(const char *k, const char *v)
{
    return kf_asprintf("%s=%s", k, v);
}

/* Run a kforge-api subcommand to completion; returns its exit status and
 * the last stdout line starting with "kf_" (a token; caller frees) in *last. */
static int fx_run(api_fx *f, char *const argv[], char **last)
{
    char *out = kf_asprintf("%s/cmd.out", f->dir);
    char *env[3] = { fx_env("KFORGE_PG_DSN", f->dsn), fx_env("KFORGE_REDIS_URL", f->redis_url), NULL };
    int st = kf_test_run_cmd(argv, env, out, last);

    free(env[0]);
    free(env[1]);
    free(out);
    return st;
}

static char *fx_token(api_fx *f, const char *role, const char *name)
{
    char *bin = kf_test_bin("kforge-api");
    char *r = kf_strdup(role), *n = kf_strdup(name);
    char *argv[] = { bin, "token", "create", "--role", r, "--name", n, NULL };
    char *tok = NULL;
    int rc = fx_run(f, argv, &tok);

    cr_assert_eq(rc, 0, "token create exited %d", rc);
    cr_assert_not_null(tok, "token create printed no token");
    free(bin);
    free(r);
    free(n);
    return tok;
}

static void fx_flush_redis(api_fx *f)
{
    redisContext *c = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
    redisReply *r;

    cr_assert(c && !c->err, "redis connect");
    r = redisCommand(c, "SELECT %d", f->redis_db);
    freeReplyObject(r);
    r = redisCommand(c, "FLUSHDB");
    freeReplyObject(r);
    redisFree(c);
}

/* Redis command on the fixture's DB; returns the integer reply (or -1). */
static long long fx_redis_int(api_fx *f, const char *fmt, const char *arg)
{
    redisContext *c = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
    redisReply *r;
    long long v = -1;

    if (!c || c->err) {
        redisFree(c);
        return -1;
    }
    r = redisCommand(c, "SELECT %d", f->redis_db);
    freeReplyObject(r);
    r = redisCommand(c, fmt, arg);
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* fx_redis_int until it gives `want` (3 s at most): a job answered 202 is
 * put on Redis right after its answer. */
__attribute__((unused)) static long long fx_redis_int_soon(api_fx *f, const char *fmt, const char *arg, long long want)
{
    long long n = fx_redis_int(f, fmt, arg);

    for (int i = 0; i < 300 && n != want; i++) {
        kf_test_sleep_ms(10);
        n = fx_redis_int(f, fmt, arg);
    }
    return n;
}

static void fx_start_api(api_fx *f, const char *extra_env)
{
    char *bin = kf_test_bin("kforge-api");
    char *argv[] = { bin, "serve", NULL };
    char listen[64], url[96];
    char *env[16];
    int n = 0;

    f->port = kf_test_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", f->port);
    snprintf(f->base, sizeof(f->base), "http://127.0.0.1:%d", f->port);
    env[n++] = fx_env("KFORGE_PG_DSN", f->dsn);
    env[n++] = fx_env("KFORGE_REDIS_URL", f->redis_url);
    env[n++] = fx_env("KFORGE_API_LISTEN", listen);
    env[n++] = fx_env("KFORGE_API_THREADS", "4");
    env[n++] = fx_env("KFORGE_PG_POOL", "4");
    if (!extra_env) {
        env[n++] = fx_env("KFORGE_LOG_LEVEL", "info");
    } else {
        /* One "K=V" or several separated by newlines. */
        for (const char *p = extra_env; *p && n < 15;) {
            size_t len = strcspn(p, "\n");
            env[n++] = kf_strndup(p, len);
            p += len + (p[len] == '\n');
        }
    }
    env[n] = NULL;
    f->pid = kf_test_spawn(argv, env, f->log);
    for (int i = 0; i < n; i++)
        free(env[i]);
    snprintf(url, sizeof(url), "%s/healthz", f->base);
    cr_assert(kf_http_wait_status(url, 200, 30000), "kforge-api did not start; see %s", f->log);
    free(bin);
}

static void fx_start(api_fx *f, int redis_db, const char *extra_env)
{
    char *bin = kf_test_bin("kforge-api");
    char *argv[] = { bin, "migrate", NULL };
    int rc;

    memset(f, 0, sizeof(*f));
    f->dir = kf_test_tmpdir("api");
    f->log = kf_asprintf("%s/api.log", f->dir);
    f->dsn = kf_test_fresh_db();
    f->redis_db = redis_db;
    f->redis_url = kf_test_redis_url(redis_db);
    fx_flush_redis(f);
    rc = fx_run(f, argv, NULL);
    cr_assert_eq(rc, 0, "kforge-api migrate exited %d; see %s/cmd.out", rc, f->dir);
    f->admin = fx_token(f, "admin", "admin");
    f->user = fx_token(f, "user", "alice");
    f->user2 = fx_token(f, "user", "bob");
    f->worker = fx_token(f, "worker", "w1");
    f->worker2 = fx_token(f, "worker", "w2");
    f->pg = PQconnectdb(f->dsn);
    cr_assert_eq(PQstatus(f->pg), CONNECTION_OK);
    fx_start_api(f, extra_env);
    free(bin);
}

static void fx_stop(api_fx *f)
{
    if (f->pid > 0) {
        int st = kf_test_stop(f->pid, SIGTERM, 10000);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "kforge-api did not stop cleanly (status %d); see %s", st,
                  f->log);
    }
    PQfinish(f->pg);
    free(f->dsn);
    free(f->redis_url);
    free(f->dir);
    free(f->log);
    free(f->admin);
    free(f->user);
    free(f->user2);
    free(f->worker);
    free(f->worker2);
    memset(f, 0, sizeof(*f));
}

/* JSON request to base+path; body may be NULL. */
static long fx_req(api_fx *f, const char *method, const char *path, const char *token, const char *body,
                   kf_http_resp *out)
{
    char *url = kf_asprintf("%s%s", f->base, path);
    long st = kf_http_json(method, url, token, body, out);
    free(url);
    return st;
}

static cJSON *fx_json(const kf_http_resp *r)
{
    cJSON *v = cJSON_Parse(r->body);
    cr_assert_not_null(v, "response is not JSON: %s", r->body);
    return v;
}

/* GET a path (printf-style) as `token`, assert the status, return the
 * parsed answer (caller deletes). */
__attribute__((unused, format(printf, 4, 5))) static cJSON *fx_get_json(api_fx *f, const char *token, long want,
                                                                         const char *fmt, ...)
{
    char path[1024];
    va_list ap;
    kf_http_resp r;
    cJSON *v;

    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    cr_assert_eq(fx_req(f, "GET", path, token, NULL, &r), want, "GET %s: %s", path, r.body);
    v = fx_json(&r);
    kf_http_resp_release(&r);
    return v;
}

/* A number field of o (asserts that it is one). */
__attribute__((unused)) static double fx_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", k);
    return v->valuedouble;
}

static const char *fx_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* One value from SQL (caller frees), NULL for SQL NULL or no row. */
static char *fx_sql(api_fx *f, const char *sql, const char *arg)
{
    const char *params[1] = { arg };
    PGresult *r = PQexecParams(f->pg, sql, arg ? 1 : 0, NULL, params, NULL, NULL, 0);
    char *v = NULL;

    cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(r));
    if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = kf_strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static long fx_sql_int(api_fx *f, const char *sql, const char *arg)
{
    char *v = fx_sql(f, sql, arg);
    long n = v ? atol(v) : -1;
    free(v);
    return n;
}

/* fx_sql_int once it equals want, or its value after 3 s: for what the
 * API does right after it answers (its writer deletes delivered outbox
 * rows after resuming the requests). */
__attribute__((unused)) static long fx_sql_int_soon(api_fx *f, const char *sql, const char *arg, long want)
{
    long n = fx_sql_int(f, sql, arg);

    for (int i = 0; i < 300 && n != want; i++) {
        kf_test_sleep_ms(10);
        n = fx_sql_int(f, sql, arg);
    }
    return n;
}

/* A lease w1 holds on a job. */
typedef struct fx_lease {
    char token[64];
    int  attempt;
} fx_lease;

/* Lease job `id` as `worker` does, offering `target` (NULL: trn1, trn2,
 * trn3 and inf2) on the diag and sim backends, within 3 s, promoting due
 * retries first as the scheduler would; asserts that it is this job that
 * comes (no other was waiting). */
__attribute__((unused)) static fx_lease fx_lease_job_as(api_fx *f, const char *id, const char *target,
                                                        const char *worker)
{
    static const char *const all[4] = { "trn1", "trn2", "trn3", "inf2" };
    const char *one[1] = { target };
    kf_queue_caps caps = { target ? one : all, target ? 1 : 4, (const char *const[]){ "diag", "sim" }, 2 };
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(f->redis_url, &e);
    char key[80];
    fx_lease tl = { "", 0 };

    cr_assert_not_null(q, "%s", e.msg);
    snprintf(key, sizeof(key), "kf:job:%s", id);
    cr_assert_eq(fx_redis_int_soon(f, "EXISTS %s", key, 1), 1, "job %s never reached Redis", id);
    for (int i = 0; i < 300 && !tl.attempt; i++) {
        kf_queue_lease l;
        kf_queue_moved *m = NULL;
        int n = 0;
        bool got = false;

        cr_assert_eq(kf_queue_promote(q, 10, &m, &n, &e), KF_OK, "%s", e.msg);
        kf_queue_moved_free(m, n);
        cr_assert_eq(kf_queue_lease_job(q, &caps, worker, 60000, &l, &got, &e), KF_OK, "%s", e.msg);
        if (got) {
            cr_assert_str_eq(l.id, id, "another job was waiting");
            snprintf(tl.token, sizeof(tl.token), "%s", l.token);
            tl.attempt = l.attempt;
            kf_queue_lease_free(&l);
        } else {
            kf_test_sleep_ms(10);
        }
    }
    kf_queue_free(q);
    cr_assert(tl.attempt > 0, "job %s could not be leased", id);
    return tl;
}

/* fx_lease_job_as for worker w1. */
__attribute__((unused)) static fx_lease fx_lease_job(api_fx *f, const char *id, const char *target)
{
    return fx_lease_job_as(f, id, target, "w1");
}

/* Report the leased job's start as w1 (POST /v1/internal/jobs/{id}/start). */
__attribute__((unused)) static void fx_start_job(api_fx *f, const char *id, const fx_lease *l)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/start", id);
    char *body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\"}", l->attempt, l->token);
    kf_http_resp r;

    cr_assert_eq(fx_req(f, "POST", path, f->worker, body, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    free(path);
    free(body);
}

/* POST a diag job as `token`; returns its id (caller frees). */
__attribute__((unused)) static char *fx_submit(api_fx *f, const char *token, const char *body)
{
    kf_http_resp r;
    cJSON *j;
    char *id;

    cr_assert_eq(fx_req(f, "POST", "/v1/jobs", token, body ? body : "{\"kind\":\"diag\",\"target\":\"trn2\"}", &r), 202,
                 "%s", r.body);
    j = fx_json(&r);
    id = kf_strdup(fx_str(j, "id"));
    cJSON_Delete(j);
    kf_http_resp_release(&r);
    return id;
}

#endif
