/* kf_test_stack — real kforge processes for pipeline tests (kf_test_stack.h). */
#include "kf_test_stack.h"

#include "kf_alloc.h"
#include "kf_test.h"
#include "kf_test_http.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *st_env(const char *k, const char *v)
{
    return kf_asprintf("%s=%s", k, v);
}

char *kf_stack_log(const kf_stack *s, const char *kind, int i)
{
    return kf_asprintf("%s/%s-%d.log", s->dir, kind, i);
}

/* Run `kforge-api ARGS` to completion; returns the exit status and the last
 * stdout line starting with "kf_" (a token) in *token. */
static int st_api_cmd(kf_stack *s, char *const argv[], char **token)
{
    char *out = kf_asprintf("%s/cmd.out", s->dir);
    char *env[3] = { st_env("KFORGE_PG_DSN", s->dsn), st_env("KFORGE_REDIS_URL", s->redis_url), NULL };
    int status = kf_test_run_cmd(argv, env, out, token);

    free(env[0]);
    free(env[1]);
    free(out);
    return status;
}

static char *st_token(kf_stack *s, const char *role, const char *name)
{
    char *bin = kf_test_bin("kforge-api");
    char *r1 = kf_strdup(role), *r2 = kf_strdup(name);
    char *argv[] = { bin, "token", "create", "--role", r1, "--name", r2, NULL };
    char *tok = NULL;
    int rc = st_api_cmd(s, argv, &tok);

    cr_assert_eq(rc, 0, "kforge-api token create exited %d", rc);
    cr_assert_not_null(tok, "kforge-api token create printed no token");
    free(r1);
    free(r2);
    free(bin);
    return tok;
}

static redisContext *st_redis(kf_stack *s)
{
    redisContext *c = redisConnect("127.0.0.1", atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
    redisReply *r;

    if (!c || c->err) {
        redisFree(c);
        return NULL;
    }
    r = redisCommand(c, "SELECT %d", s->o.redis_db);
    freeReplyObject(r);
    return c;
}

void kf_stack_redis(kf_stack *s, const char *cmd)
{
    redisContext *c = st_redis(s);
    redisReply *r;

    cr_assert_not_null(c, "cannot reach the test Redis");
    r = redisCommand(c, cmd);
    freeReplyObject(r);
    redisFree(c);
}

long long kf_stack_redis_int(kf_stack *s, const char *fmt, const char *arg)
{
    redisContext *c = st_redis(s);
    redisReply *r;
    long long v = -1;

    if (!c)
        return -1;
    r = redisCommand(c, fmt, arg);
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void st_common_env(kf_stack *s, char **env, int *n)
{
    char v[32];

    env[(*n)++] = st_env("KFORGE_PG_DSN", s->dsn);
    env[(*n)++] = st_env("KFORGE_REDIS_URL", s->redis_url);
    env[(*n)++] = st_env("KFORGE_API_URL", s->api_url);
    snprintf(v, sizeof(v), "%d", s->o.lease_ms);
    env[(*n)++] = st_env("KFORGE_LEASE_MS", v);
    snprintf(v, sizeof(v), "%d", s->o.retry_base_ms);
    env[(*n)++] = st_env("KFORGE_RETRY_BASE_MS", v);
    env[(*n)++] = st_env("KFORGE_RETRY_CAP_MS", "2000");
    env[(*n)++] = st_env("KFORGE_LOG_LEVEL", "info");
}

static void st_free_env(char **env)
{
    for (int i = 0; env[i]; i++)
        free(env[i]);
}

void kf_stack_api(kf_stack *s)
{
    char *bin = kf_test_bin("kforge-api");
    char *argv[] = { bin, "serve", NULL };
    char *env[16] = { 0 };
    char *log = kf_stack_log(s, "api", 0);
    char url[96];
    int n = 0;

    st_common_env(s, env, &n);
    env[n++] = st_env("KFORGE_API_LISTEN", s->api_listen);
    env[n++] = st_env("KFORGE_API_THREADS", "8");
    env[n++] = st_env("KFORGE_PG_POOL", "8");
    if (s->o.api_env)
        env[n++] = kf_strdup(s->o.api_env);
    s->api = kf_test_spawn(argv, env, log);
    st_free_env(env);
    snprintf(url, sizeof(url), "%s/healthz", s->api_url);
    cr_assert(kf_http_wait_status(url, 200, 10000), "kforge-api did not start; see %s", log);
    free(log);
    free(bin);
}

pid_t kf_stack_scheduler(kf_stack *s, int i)
{
    char *bin = kf_test_bin("kforge-scheduler");
    char *argv[] = { bin, NULL };
    char *env[16] = { 0 };
    char *log = kf_stack_log(s, "sched", i);
    char v[32];
    int n = 0;

    st_common_env(s, env, &n);
    snprintf(v, sizeof(v), "%d", s->o.tick_ms);
    env[n++] = st_env("KFORGE_SCHED_TICK_MS", v);
    snprintf(v, sizeof(v), "%d", s->o.leader_ttl_ms);
    env[n++] = st_env("KFORGE_LEADER_TTL_MS", v);
    if (s->o.sched_env)
        env[n++] = kf_strdup(s->o.sched_env);
    s->sched[i] = kf_test_spawn(argv, env, log);
    st_free_env(env);
    free(log);
    free(bin);
    return s->sched[i];
}

const char *kf_stack_worker_token(kf_stack *s, int i)
{
    char v[64];

    snprintf(v, sizeof(v), "test-w%d", i);
    if (!s->worker_token[i])
        s->worker_token[i] = st_token(s, "worker", v);
    return s->worker_token[i];
}

pid_t kf_stack_worker(kf_stack *s, int i, const char *extra_env)
{
    char *bin = kf_test_bin("kforge-worker");
    char *argv[] = { bin, NULL };
    char *env[20] = { 0 };
    char *log = kf_stack_log(s, "worker", i);
    char v[64];
    int n = 0;

    st_common_env(s, env, &n);
    snprintf(v, sizeof(v), "test-w%d", i);
    kf_stack_worker_token(s, i);
    {
        /* One token per worker, in a file only its user can read. */
        char *tf = kf_asprintf("%s/token-%d", s->dir, i);
        int fd = open(tf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        cr_assert_not_null(f, "cannot write %s", tf);
        fprintf(f, "%s\n", s->worker_token[i]);
        fclose(f);
        env[n++] = st_env("KFORGE_TOKEN_FILE", tf);
        free(tf);
    }
    env[n++] = st_env("KFORGE_WORKER_TARGETS", s->o.targets);
    env[n++] = st_env("KFORGE_WORKER_ID", v);
    env[n++] = st_env("KFORGE_HEARTBEAT_MS", "300");
    snprintf(v, sizeof(v), "%d", s->o.drain_ms);
    env[n++] = st_env("KFORGE_DRAIN_MS", v);
    char *spool = kf_asprintf("%s/spool", s->dir);
    env[n++] = st_env("KFORGE_SPOOL_DIR", spool);
    free(spool);
    /* extra_env: one "K=V", or several separated by newlines */
    for (const char *e = extra_env; e && *e && n < 19;) {
        size_t len = strcspn(e, "\n");
        if (len)
            env[n++] = kf_strndup(e, len);
        e += len + (e[len] == '\n');
    }
    s->workers[i] = kf_test_spawn(argv, env, log);
    st_free_env(env);
    free(log);
    free(bin);
    return s->workers[i];
}

void kf_stack_start(kf_stack *s, const kf_stack_opts *o)
{
    char *bin = kf_test_bin("kforge-api");
    char *argv[] = { bin, "migrate", NULL };
    int rc;

    memset(s, 0, sizeof(*s));
    s->o = *o;
    if (!s->o.lease_ms)
        s->o.lease_ms = 2000;
    if (!s->o.tick_ms)
        s->o.tick_ms = 100;
    if (!s->o.leader_ttl_ms)
        s->o.leader_ttl_ms = 1000;
    if (!s->o.drain_ms)
        s->o.drain_ms = 5000;
    if (!s->o.retry_base_ms)
        s->o.retry_base_ms = 100;
    if (!s->o.targets)
        s->o.targets = "trn2";
    s->dir = kf_test_tmpdir("stack");
    s->dsn = kf_test_fresh_db();
    s->redis_url = kf_test_redis_url(s->o.redis_db);
    kf_stack_redis(s, "FLUSHDB");
    rc = st_api_cmd(s, argv, NULL);
    cr_assert_eq(rc, 0, "kforge-api migrate exited %d (see %s/cmd.out)", rc, s->dir);
    s->admin = st_token(s, "admin", "admin");
    s->user = st_token(s, "user", "user");
    snprintf(s->api_listen, sizeof(s->api_listen), "127.0.0.1:%d", kf_test_free_port());
    snprintf(s->api_url, sizeof(s->api_url), "http://%s", s->api_listen);
    kf_stack_api(s);
    for (int i = 0; i < s->o.n_schedulers; i++)
        kf_stack_scheduler(s, i);
    for (int i = 0; i < s->o.n_workers; i++)
        kf_stack_worker(s, i, NULL);
    s->pg = PQconnectdb(s->dsn);
    cr_assert(PQstatus(s->pg) == CONNECTION_OK, "test PostgreSQL: %s", PQerrorMessage(s->pg));
    free(bin);
}

static void st_end(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGCONT);
        kf_test_stop(*pid, SIGTERM, 8000);
        *pid = 0;
    }
}

void kf_stack_stop(kf_stack *s)
{
    for (int i = 0; i < KF_STACK_MAX_PROCS; i++)
        st_end(&s->workers[i]);
    for (int i = 0; i < KF_STACK_MAX_PROCS; i++)
        st_end(&s->sched[i]);
    st_end(&s->api);
    PQfinish(s->pg);
    s->pg = NULL;
    free(s->admin);
    free(s->user);
    for (int i = 0; i < KF_STACK_MAX_PROCS; i++)
        free(s->worker_token[i]);
    free(s->dsn);
    free(s->redis_url);
    free(s->dir);
    memset(s, 0, sizeof(*s));
}

char *kf_stack_diag_body(int sleep_ms, bool fail, bool crash, int max_attempts)
{
    return kf_asprintf("{\"kind\":\"diag\",\"target\":\"trn2\",\"backend\":\"diag\",\"max_attempts\":%d,"
                       "\"spec\":{\"sleep_ms\":%d,\"fail\":%s,\"crash\":%s}}",
                       max_attempts, sleep_ms, fail ? "true" : "false", crash ? "true" : "false");
}

long kf_stack_submit_status(kf_stack *s, const char *body, char **id)
{
    char url[128];
    kf_http_resp r;
    long st;

    if (id)
        *id = NULL;
    snprintf(url, sizeof(url), "%s/v1/jobs", s->api_url);
    st = kf_http_json("POST", url, s->user, body, &r);
    if (st == 202 && id) {
        cJSON *j = cJSON_Parse(r.body);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "id");
        if (cJSON_IsString(v))
            *id = kf_strdup(v->valuestring);
        cJSON_Delete(j);
    }
    kf_http_resp_release(&r);
    return st;
}

char *kf_stack_submit(kf_stack *s, const char *body)
{
    char *id = NULL;
    long st = kf_stack_submit_status(s, body, &id);
    cr_assert_eq(st, 202, "POST /v1/jobs answered %ld", st);
    cr_assert_not_null(id);
    return id;
}

static PGresult *st_query(kf_stack *s, const char *sql, const char *param)
{
    const char *p[1] = { param };
    PGresult *r;

    if (!s->pg || PQstatus(s->pg) != CONNECTION_OK) {
        PQfinish(s->pg);
        s->pg = PQconnectdb(s->dsn);
    }
    r = PQexecParams(s->pg, sql, param ? 1 : 0, NULL, param ? p : NULL, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        return NULL;
    }
    return r;
}

char *kf_stack_sql_value(kf_stack *s, const char *sql, const char *param)
{
    PGresult *r = st_query(s, sql, param);
    char *v = NULL;

    if (r && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = kf_strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

long kf_stack_sql_long(kf_stack *s, const char *sql, const char *param)
{
    char *v = kf_stack_sql_value(s, sql, param);
    long n = v ? atol(v) : -1;
    free(v);
    return n;
}

const char *kf_stack_state(kf_stack *s, const char *id)
{
    static char state[32];
    char *v = kf_stack_sql_value(s, "SELECT state FROM jobs WHERE id = $1::uuid", id);
    snprintf(state, sizeof(state), "%s", v ? v : "");
    free(v);
    return state;
}

bool kf_stack_wait_state(kf_stack *s, const char *id, const char *state, int timeout_ms)
{
    long long end = kf_test_now_ms() + timeout_ms;
    do {
        if (strcmp(kf_stack_state(s, id), state) == 0)
            return true;
        kf_test_sleep_ms(20);
    } while (kf_test_now_ms() < end);
    return false;
}

bool kf_stack_wait_sql(kf_stack *s, const char *sql, const char *param, long want, int timeout_ms)
{
    long long end = kf_test_now_ms() + timeout_ms;
    do {
        if (kf_stack_sql_long(s, sql, param) >= want)
            return true;
        kf_test_sleep_ms(20);
    } while (kf_test_now_ms() < end);
    return false;
}

void kf_stack_assert_settled(kf_stack *s, char *const *ids, int n)
{
    for (int i = 0; i < n; i++) {
        const char *state = kf_stack_state(s, ids[i]);
        char key[80];
        long results, terminal;

        cr_assert(strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
                      strcmp(state, "cancelled") == 0 || strcmp(state, "dead") == 0,
                  "none stuck: job %s is '%s', not terminal", ids[i], state);
        results = kf_stack_sql_long(s, "SELECT count(*) FROM job_results WHERE job_id = $1::uuid", ids[i]);
        terminal = kf_stack_sql_long(s,
                                     "SELECT count(*) FROM job_events WHERE job_id = $1::uuid AND type IN "
                                     "('succeeded','failed','cancelled','dead')",
                                     ids[i]);
        if (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0)
            cr_assert_eq(results, 1, "none duplicated: job %s (%s) has %ld result rows", ids[i], state, results);
        else
            cr_assert(results <= 1, "job %s has %ld result rows", ids[i], results);
        cr_assert_eq(terminal, 1, "one terminal transition: job %s has %ld terminal events", ids[i], terminal);
        snprintf(key, sizeof(key), "kf:job:%s", ids[i]);
        if (strcmp(state, "dead") != 0) {
            /* PostgreSQL records the outcome before the worker acks (or the
             * reaper drops) the job: give the ack a moment. */
            long long end = kf_test_now_ms() + 5000;
            while (kf_test_now_ms() < end && kf_stack_redis_int(s, "EXISTS %s", key) != 0)
                kf_test_sleep_ms(20);
            cr_assert_eq(kf_stack_redis_int(s, "EXISTS %s", key), 0, "finished job %s left in Redis", ids[i]);
        }
    }
}

static void st_shell(const char *script)
{
    char *cmd = kf_asprintf("cd '%s' && bash -c '. tests/lib/services.sh; %s' >/dev/null 2>&1",
                            kf_test_env_opt("KFORGE_TEST_ROOT") ? kf_test_env_opt("KFORGE_TEST_ROOT") : ".", script);
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "service command failed: %s", cmd);
    free(cmd);
}

void kf_stack_redis_stop(void)
{
    (void)kf_test_env("KFORGE_TEST_REDIS_DIR");
    st_shell("kf_stop_redis_dir \"$KFORGE_TEST_REDIS_DIR\"");
}

void kf_stack_redis_start(void)
{
    (void)kf_test_env("KFORGE_TEST_REDIS_DIR");
    st_shell("kf_start_redis \"$KFORGE_TEST_REDIS_DIR\" \"$KFORGE_TEST_REDIS_PORT\"");
}

void kf_stack_pg_stop(kf_stack *s)
{
    (void)kf_test_env("KFORGE_TEST_PG_DIR");
    PQfinish(s->pg);
    s->pg = NULL;
    st_shell("kf_stop_pg_dir \"$KFORGE_TEST_PG_DIR\"");
}

void kf_stack_pg_start(kf_stack *s)
{
    (void)kf_test_env("KFORGE_TEST_PG_DIR");
    st_shell("kf_start_pg \"$KFORGE_TEST_PG_DIR\" \"$KFORGE_TEST_PG_PORT\"");
    s->pg = PQconnectdb(s->dsn);
}
