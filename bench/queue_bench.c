/*
 * queue_bench — benchmarks of the job pipeline (bench/run.sh queue_*).
 *
 *   queue_bench dispatch N      POST → worker holds the lease, p50/p99 over N diag jobs at light load
 *   queue_bench enqueue SECS C  sustained POST /v1/jobs per second over C connections (wrk, C <= 256; or C
 *                               <= 32 libcurl threads with KFB_ENQUEUE_DRIVER=curl)
 *   queue_bench throughput N W  N diag jobs of 0 ms end to end with W workers: jobs/s
 *   queue_bench memory N        Redis used_memory while N jobs go enqueue → lease → ack
 *   queue_bench recovery R      worker SIGKILL → job running again, R rounds, against the lease
 *
 * Environment (set by bench/run.sh): KFB_BUILD (build folder), KFB_PG_DSN (a migrated
 * database), KFB_REDIS_PORT, KFB_DIR (scratch folder for logs and spool).  The driver starts
 * kforge-api, kforge-scheduler and kforge-worker itself and stops them before it exits.
 */
#include "bench/lib/kb_util.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_num.h"
#include "kf_queue.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define QB_MAX_PROCS 16

static const char *qb_build, *qb_dsn, *qb_dir;
static int qb_redis_port;
static char qb_api_url[64], qb_listen[32];
static char *qb_user_token;
/* One worker token per worker id (bench-w<i>): the API binds a worker's
 * reports to its token's worker, so workers cannot share one. */
#define QB_MAX_WORKERS 64
static char *qb_worker_tokens[QB_MAX_WORKERS];
static pid_t qb_procs[QB_MAX_PROCS];
static int qb_nprocs;
static PGconn *qb_pg;

static double qb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void qb_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void qb_die(const char *msg)
{
    fprintf(stderr, "queue_bench: %s\n", msg);
    for (int i = 0; i < qb_nprocs; i++)
        if (qb_procs[i] > 0)
            kill(qb_procs[i], SIGKILL);
    exit(1);
}

static int qb_free_port(void)
{
    /* Ask the kernel for a free port by binding port 0 (closed again at once). */
    FILE *f = popen("/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
                    "print(s.getsockname()[1])'", "r");
    int port = 0;
    if (!f || fscanf(f, "%d", &port) != 1)
        qb_die("cannot find a free port");
    pclose(f);
    return port;
}

/* In a forked child: stdout and stderr to path (O_APPEND or O_TRUNC). */
static void qb_child_output(const char *path, int mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | mode, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
}

/* Start BIN with KFORGE_* settings; env: NULL-terminated "K=V" list. */
static pid_t qb_spawn(const char *bin, const char *arg, const char *const *env, const char *log)
{
    char *path = kf_asprintf("%s/bin/%s", qb_build, bin);
    pid_t pid = fork();

    if (pid < 0)
        qb_die("fork failed");
    if (pid == 0) {
        qb_child_output(log, O_APPEND);
        for (int i = 0; env[i]; i++)
            putenv(kf_strdup(env[i]));
        execl(path, path, arg, (char *)NULL);
        _exit(127);
    }
    free(path);
    if (qb_nprocs < QB_MAX_PROCS)
        qb_procs[qb_nprocs++] = pid;
    return pid;
}

static void qb_stop(pid_t pid)
{
    for (int i = 0; i < qb_nprocs; i++)
        if (qb_procs[i] == pid)
            qb_procs[i] = 0;
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        qb_sleep_ms(25);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void qb_stop_all(void)
{
    for (int i = qb_nprocs - 1; i >= 0; i--)
        if (qb_procs[i] > 0)
            qb_stop(qb_procs[i]);
    qb_nprocs = 0;
}

static char *qb_redis_url(void)
{
    return kf_asprintf("redis://127.0.0.1:%d/0", qb_redis_port);
}

static char *qb_token(const char *role, const char *name)
{
    char *full = kf_asprintf("bench-%s", name), *tok = kb_token_create(qb_build, qb_dsn, role, full);
    free(full);
    if (!tok)
        qb_die("kforge-api token create printed no token");
    return tok;
}

static void qb_env_common(char **env, int *n, int lease_ms)
{
    char *url = qb_redis_url();
    env[(*n)++] = kf_asprintf("KFORGE_PG_DSN=%s", qb_dsn);
    env[(*n)++] = kf_asprintf("KFORGE_REDIS_URL=%s", url);
    env[(*n)++] = kf_asprintf("KFORGE_API_URL=%s", qb_api_url);
    env[(*n)++] = kf_asprintf("KFORGE_LEASE_MS=%d", lease_ms);
    env[(*n)++] = kf_strdup("KFORGE_LOG_LEVEL=info");
    env[(*n)++] = kf_strdup("KFORGE_RETRY_BASE_MS=100");
    free(url);
}

static void qb_env_free(char **env)
{
    for (int i = 0; env[i]; i++)
        free(env[i]);
}

static size_t qb_sink(char *p, size_t s, size_t n, void *ud)
{
    kf_buf *b = ud;
    if (b)
        kf_buf_add(b, p, s * n);
    return s * n;
}

static long qb_http(CURL *c, const char *method, const char *url, const char *body, kf_buf *out)
{
    struct curl_slist *h = NULL;
    char auth[256];
    long status = 0;

    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", qb_user_token);
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, qb_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    return status;
}

/* Per thread: the enqueue clients build bodies at the same time. */
static const char *qb_diag_body(int sleep_ms)
{
    static _Thread_local char body[256];
    snprintf(body, sizeof(body),
             "{\"kind\":\"diag\",\"target\":\"trn2\",\"backend\":\"diag\",\"spec\":{\"sleep_ms\":%d}}", sleep_ms);
    return body;
}

/* POST one diag job; returns its id (caller frees) or NULL. */
static char *qb_submit(CURL *c, int sleep_ms)
{
    char url[128];
    kf_buf out = KF_BUF_INIT;
    char *id = NULL;

    snprintf(url, sizeof(url), "%s/v1/jobs", qb_api_url);
    if (qb_http(c, "POST", url, qb_diag_body(sleep_ms), &out) == 202) {
        cJSON *j = cJSON_Parse(out.data);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "id");
        if (cJSON_IsString(v))
            id = kf_strdup(v->valuestring);
        cJSON_Delete(j);
    }
    kf_buf_release(&out);
    return id;
}

static pid_t qb_api_pid;

static void qb_start_api(void)
{
    char *env[16] = { 0 };
    int n = 0;
    char *log = kf_asprintf("%s/api.log", qb_dir);
    CURL *c = curl_easy_init();
    char url[128];

    qb_env_common(env, &n, 30000);
    env[n++] = kf_asprintf("KFORGE_API_LISTEN=%s", qb_listen);
    /* Every bench client connects from 127.0.0.1 (wrk up to 256 connections):
     * the per-address limit that guards a deployment would cap the bench. */
    env[n++] = kf_strdup("KFORGE_API_CONNS_PER_IP=0");
    /* KFB_API_THREADS / KFB_PG_POOL override kforge-api's defaults for experiments. */
    if (getenv("KFB_API_THREADS"))
        env[n++] = kf_asprintf("KFORGE_API_THREADS=%s", getenv("KFB_API_THREADS"));
    if (getenv("KFB_PG_POOL"))
        env[n++] = kf_asprintf("KFORGE_PG_POOL=%s", getenv("KFB_PG_POOL"));
    qb_api_pid = qb_spawn("kforge-api", "serve", (const char *const *)env, log);
    qb_env_free(env);
    snprintf(url, sizeof(url), "%s/healthz", qb_api_url);
    for (int i = 0; i < 200; i++) {
        if (qb_http(c, "GET", url, NULL, NULL) == 200)
            break;
        qb_sleep_ms(50);
    }
    curl_easy_cleanup(c);
    free(log);
}

static pid_t qb_start_sched(void)
{
    char *env[16] = { 0 };
    int n = 0;
    char *log = kf_asprintf("%s/sched.log", qb_dir);
    qb_env_common(env, &n, 2000);
    env[n++] = kf_strdup("KFORGE_SCHED_TICK_MS=100");
    env[n++] = kf_strdup("KFORGE_LEADER_TTL_MS=1000");
    pid_t pid = qb_spawn("kforge-scheduler", NULL, (const char *const *)env, log);
    qb_env_free(env);
    free(log);
    return pid;
}

static pid_t qb_start_worker(int i, int lease_ms)
{
    char *env[20] = { 0 };
    int n = 0;
    char *log = kf_asprintf("%s/worker-%d.log", qb_dir, i);
    char name[16];

    if (i < 0 || i >= QB_MAX_WORKERS)
        qb_die("too many workers for the benchmark's tokens");
    snprintf(name, sizeof(name), "w%d", i);
    if (!qb_worker_tokens[i])
        qb_worker_tokens[i] = qb_token("worker", name);
    qb_env_common(env, &n, lease_ms);
    env[n++] = kf_asprintf("KFORGE_TOKEN=%s", qb_worker_tokens[i]);
    env[n++] = kf_strdup("KFORGE_WORKER_TARGETS=trn2");
    env[n++] = kf_asprintf("KFORGE_WORKER_ID=bench-w%d", i);
    env[n++] = kf_asprintf("KFORGE_SPOOL_DIR=%s/spool", qb_dir);
    env[n++] = kf_strdup("KFORGE_DRAIN_MS=0");
    pid_t pid = qb_spawn("kforge-worker", NULL, (const char *const *)env, log);
    qb_env_free(env);
    free(log);
    return pid;
}

/* A numeric argument read whole (kf_num_long), or exit 2 saying which. */
static long qb_arg(const char *s, long lo, long hi, const char *what)
{
    kf_err e = KF_ERR_INIT;
    long v;

    if (kf_num_long(s, lo, hi, &v, &e) != KF_OK) {
        fprintf(stderr, "queue_bench: %s: %s\n", what, e.msg);
        exit(2);
    }
    return v;
}

static long qb_sql_long(const char *sql, const char *param)
{
    const char *p[1] = { param };
    PGresult *r = PQexecParams(qb_pg, sql, param ? 1 : 0, NULL, param ? p : NULL, NULL, NULL, 0);
    long v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
        v = qb_arg(PQgetvalue(r, 0, 0), LONG_MIN, LONG_MAX, sql);
    PQclear(r);
    return v;
}

static long long qb_redis_used_memory(void)
{
    redisContext *c = redisConnect("127.0.0.1", qb_redis_port);
    redisReply *r;
    long long v = -1;
    if (!c || c->err)
        return -1;
    r = redisCommand(c, "INFO memory");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "used_memory:");
        if (p)
            v = atoll(p + 12);
    }
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void qb_redis_cmd(const char *cmd)
{
    redisContext *c = redisConnect("127.0.0.1", qb_redis_port);
    if (c && !c->err)
        freeReplyObject(redisCommand(c, cmd));
    redisFree(c);
}

static int qb_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double qb_pct(double *v, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* ---- dispatch latency ---------------------------------------------------------- */

/* Parse "2026-11-30T09:45:07.267Z" (the log's first field) to epoch seconds. */
static double qb_log_time(const char *line)
{
    struct tm tm;
    int ms = 0;
    memset(&tm, 0, sizeof(tm));
    if (sscanf(line, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec, &ms) != 7)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double)timegm(&tm) + ms / 1000.0;
}

static int qb_dispatch(int n)
{
    CURL *c = curl_easy_init();
    char **ids = kf_calloc((size_t)n, sizeof(char *));
    double *sent = kf_calloc((size_t)n, sizeof(double)), *acc = kf_calloc((size_t)n, sizeof(double));
    double *lat_sent = kf_calloc((size_t)n, sizeof(double)), *lat_acc = kf_calloc((size_t)n, sizeof(double));
    char *log = kf_asprintf("%s/worker-0.log", qb_dir);
    char line[1024];
    int found = 0;
    FILE *f;

    qb_start_api();
    qb_start_sched();
    qb_start_worker(0, 30000);
    qb_sleep_ms(1000);
    for (int i = 0; i < n; i++) {
        sent[i] = qb_now();
        ids[i] = qb_submit(c, 0);
        acc[i] = qb_now();
        if (!ids[i])
            qb_die("POST /v1/jobs failed during the dispatch benchmark");
        /* Light load: the worker is idle when the next job comes.  Each job
         * runs in a freshly exec'd job process (the sandbox), tens of ms
         * even for a diag job, so a fixed gap would queue jobs behind
         * each other and time the backlog, not the dispatch. */
        for (int t = 0; t < 5000; t++) {
            if (qb_sql_long("SELECT count(*) FROM jobs WHERE id = $1::uuid AND state = 'succeeded'", ids[i]) == 1)
                break;
            qb_sleep_ms(2);
        }
        qb_sleep_ms(20);
    }
    for (int t = 0; t < 600 && qb_sql_long("SELECT count(*) FROM jobs WHERE state = 'succeeded'", NULL) < n; t++)
        qb_sleep_ms(100);
    f = fopen(log, "r");
    while (f && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "msg=job leased job=");
        if (!p)
            continue;
        p += strlen("msg=job leased job=");
        for (int i = 0; i < n; i++) {
            if (ids[i] && strncmp(p, ids[i], 36) == 0) {
                double t = qb_log_time(line);
                lat_sent[found] = (t - sent[i]) * 1000.0;
                if (getenv("KFB_VERBOSE") && (t - acc[i]) * 1000.0 > 10)
                    fprintf(stderr, "slow job=%s sent=%.3f acc=%.3f leased=%.3f\n", ids[i], sent[i], acc[i], t);
                lat_acc[found] = (t - acc[i]) * 1000.0;
                if (lat_acc[found] < 0)
                    lat_acc[found] = 0;   /* leased before the 202 reached the client */
                found++;
                break;
            }
        }
    }
    if (f)
        fclose(f);
    qb_stop_all();
    qsort(lat_sent, (size_t)found, sizeof(double), qb_cmp_double);
    qsort(lat_acc, (size_t)found, sizeof(double), qb_cmp_double);
    printf("   %d jobs, %d leases found in the worker log (ms resolution)\n", n, found);
    if (found > 0) {
        printf("   POST sent     -> lease: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", qb_pct(lat_sent, found, 0.5),
               qb_pct(lat_sent, found, 0.99), lat_sent[found - 1]);
        printf("   202 received  -> lease: p50 %.1f ms, p99 %.1f ms (target p99 <= 10 ms)\n",
               qb_pct(lat_acc, found, 0.5), qb_pct(lat_acc, found, 0.99));
    }
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(sent);
    free(acc);
    free(lat_sent);
    free(lat_acc);
    free(log);
    curl_easy_cleanup(c);
    return found == n ? 0 : 1;
}

/* ---- enqueue rate ----------------------------------------------------------------- */

typedef struct qb_enq {
    double until;
    long   ok, bad, last_bad;
} qb_enq;

static void *qb_enqueue_thread(void *arg)
{
    qb_enq *e = arg;
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/jobs", qb_api_url);
    while (qb_now() < e->until) {
        long st = qb_http(c, "POST", url, qb_diag_body(0), NULL);
        if (st == 202) {
            e->ok++;
        } else {
            e->bad++;
            e->last_bad = st;
        }
    }
    curl_easy_cleanup(c);
    return NULL;
}

/* A counter from the API's /metrics ("name{labels} value" line); -1 if absent. */
static double qb_metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* The API's counts after an enqueue run: POSTs answered 202 (*accepted,
 * when not NULL), and the group commit's statements and jobs (printed). */
static void qb_enqueue_metrics(double *accepted)
{
    double ignored;
    CURL *c = curl_easy_init();
    kf_buf out = KF_BUF_INIT;
    char url[128];

    if (!accepted)
        accepted = &ignored;
    *accepted = -1;
    snprintf(url, sizeof(url), "%s/metrics", qb_api_url);
    if (qb_http(c, "GET", url, NULL, &out) == 200 && out.data) {
        double nb = qb_metric(out.data, "kforge_api_job_batches_total");
        double nj = qb_metric(out.data, "kforge_api_job_batch_jobs_total");
        *accepted = qb_metric(out.data, "kforge_http_requests_total{method=\"POST\",route=\"/v1/jobs\",status=\"202\"}");
        if (nb > 0)
            printf("   group commit: %.0f statements wrote %.0f jobs (%.1f per statement)\n", nb, nj, nj / nb);
    }
    kf_buf_release(&out);
    curl_easy_cleanup(c);
}

/* CPU ticks (user + system, all threads) a live process has used; -1 if unreadable. */
static long qb_proc_ticks(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');   /* the name may hold spaces; fields 3.. follow it */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)(ut + st);
}

/* wrk (HTTP/1.1 keep-alive, epoll, 2 threads) drives C connections for
 * SECS; the API's own 202 count is what counts, so any other answer shows
 * up as a shortfall against wrk's request count.  Returns jobs/s. */
static double qb_enqueue_wrk(int secs, int clients, long *requests, double *accepted)
{
    char *lua = kf_asprintf("%s/enqueue.lua", qb_dir);
    char *out = kf_asprintf("%s/wrk.out", qb_dir);
    char dur[16], conns[16], url[128];
    FILE *f = fopen(lua, "w");
    pid_t pid;
    int st = 0;
    long ticks0, ticks1;

    if (!f)
        qb_die("cannot write the wrk script");
    fprintf(f, "wrk.method = \"POST\"\nwrk.body = '%s'\n"
               "wrk.headers[\"Content-Type\"] = \"application/json\"\n"
               "wrk.headers[\"Authorization\"] = \"Bearer %s\"\n", qb_diag_body(0), qb_user_token);
    fclose(f);
    snprintf(dur, sizeof(dur), "%ds", secs);
    snprintf(conns, sizeof(conns), "%d", clients);
    snprintf(url, sizeof(url), "%s/v1/jobs", qb_api_url);
    ticks0 = qb_proc_ticks(qb_api_pid);
    pid = fork();
    if (pid < 0)
        qb_die("fork failed");
    if (pid == 0) {
        qb_child_output(out, O_TRUNC);
        execlp("wrk", "wrk", "-t", clients >= 2 ? "2" : "1", "-c", conns, "-d", dur, "-s", lua, url, (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    ticks1 = qb_proc_ticks(qb_api_pid);
    if (ticks0 >= 0 && ticks1 >= ticks0)
        printf("KFB_API_TICKS=%ld\n", ticks1 - ticks0);   /* the API's CPU during wrk's run */
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        qb_die(WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "wrk is not installed (scripts/deps.sh installs it)"
                                                         : "wrk failed; see its output in the bench folder");
    *requests = 0;
    f = fopen(out, "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof(line), f)) {
            long n;
            if (sscanf(line, " %ld requests in", &n) == 1)
                *requests = n;
        }
        fclose(f);
    }
    qb_enqueue_metrics(accepted);
    free(lua);
    free(out);
    return *accepted > 0 ? *accepted / secs : 0;   /* wrk's window is its -d */
}

static int qb_enqueue(int secs, int clients)
{
    pthread_t th[32];
    qb_enq e[32];
    long ok = 0, bad = 0, last_bad = 0;
    double t0;
    const char *driver = getenv("KFB_ENQUEUE_DRIVER");

    if (!driver)
        driver = "wrk";

    if (clients < 1 || clients > (strcmp(driver, "wrk") == 0 ? 256 : 32))
        qb_die("enqueue: 1..256 clients with wrk, 1..32 with the libcurl driver");
    qb_start_api();
    if (strcmp(driver, "wrk") == 0) {
        long requests = 0;
        double accepted = 0, rate = qb_enqueue_wrk(secs, clients, &requests, &accepted);
        qb_stop_all();
        printf("   POST /v1/jobs (wrk, %d connections): %.0f accepted (202) of %ld requests in %d s: %.0f jobs/s\n",
               clients, accepted, requests, secs, rate);
        printf("KFB_ENQUEUE_RATE=%.1f\n", rate);
        return accepted > 0 && accepted >= 0.99 * (double)requests ? 0 : 1;
    }
    if (strcmp(driver, "curl") != 0)
        qb_die("KFB_ENQUEUE_DRIVER is wrk or curl");
    t0 = qb_now();
    for (int i = 0; i < clients; i++) {
        e[i] = (qb_enq){ t0 + secs, 0, 0, 0 };
        pthread_create(&th[i], NULL, qb_enqueue_thread, &e[i]);
    }
    for (int i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        ok += e[i].ok;
        bad += e[i].bad;
        if (e[i].bad)
            last_bad = e[i].last_bad;
    }
    double dt = qb_now() - t0;
    qb_enqueue_metrics(NULL);
    qb_stop_all();
    printf("   POST /v1/jobs (libcurl, %d threads): %ld accepted (202) in %.1f s: %.0f jobs/s (%ld not 202, last status %ld)\n",
           clients, ok, dt, (double)ok / dt, bad, last_bad);
    printf("KFB_ENQUEUE_RATE=%.1f\n", (double)ok / dt);
    return ok > 0 && bad * 100 <= ok ? 0 : 1;
}

/* ---- end-to-end throughput ------------------------------------------------------- */

static int qb_throughput(int n, int workers)
{
    CURL *c = curl_easy_init();
    long long mem0, mem1;
    pid_t w[16];
    double t0, dt;
    long done = 0;

    if (workers < 1 || workers > 16)
        qb_die("throughput: 1..16 workers");
    qb_start_api();
    qb_start_sched();
    for (int i = 0; i < n; i++) {
        char *id = qb_submit(c, 0);
        if (!id)
            qb_die("POST /v1/jobs failed during the throughput benchmark");
        free(id);
    }
    mem0 = qb_redis_used_memory();
    t0 = qb_now();
    for (int i = 0; i < workers; i++)
        w[i] = qb_start_worker(i, 30000);
    while ((done = qb_sql_long("SELECT count(*) FROM jobs WHERE state = 'succeeded'", NULL)) < n &&
           qb_now() - t0 < 600)
        qb_sleep_ms(20);
    dt = qb_now() - t0;
    (void)w;
    mem1 = qb_redis_used_memory();
    qb_stop_all();
    printf("   %ld of %d diag jobs (0 ms) succeeded in %.2f s with %d workers: %.0f jobs/s end to end "
           "(worker start-up included)\n", done, n, dt, workers, (double)done / dt);
    printf("   Redis used_memory with %d jobs waiting: %lld bytes; after all finished: %lld bytes\n", n, mem0, mem1);
    printf("KFB_E2E_RATE=%.1f\n", (double)done / dt);
    curl_easy_cleanup(c);
    return done == n ? 0 : 1;
}

/* ---- Redis memory after many finished jobs -------------------------------------- */

static int qb_memory(int n)
{
    kf_err e = KF_ERR_INIT;
    char *url = qb_redis_url();
    kf_queue *q = kf_queue_connect(url, &e);
    const char *targets[1] = { "trn2" };
    long long base, samples[5];
    int marks[5] = { n / 10, n / 4, n / 2, 3 * n / 4, n }, m = 0;
    double t0 = qb_now();
    char id[40];
    const char *payload = "{\"id\":\"x\",\"kind\":\"diag\",\"target\":\"trn2\",\"backend\":\"diag\","
                          "\"spec\":{\"sleep_ms\":0,\"fail\":false,\"crash\":false,\"exit_code\":0},"
                          "\"budget\":{},\"goal\":{}}";

    if (!q)
        qb_die(e.msg);
    qb_redis_cmd("FLUSHALL");
    base = qb_redis_used_memory();
    for (int i = 1; i <= n; i++) {
        kf_queue_job j = { .id = id, .kind = "diag", .target = "trn2", .backend = "diag", .priority = 5,
                           .attempt = 0, .max_attempts = 3, .payload = payload };
        kf_queue_lease l;
        bool created, got;
        snprintf(id, sizeof(id), "00000000-0000-4000-8000-%012d", i);
        if (kf_queue_enqueue(q, &j, &created, &e) != KF_OK ||
            kf_queue_lease_job(q, &(kf_queue_caps){ targets, 1, (const char *const[]){ "diag", "sim" }, 2 }, "bench", 30000, &l, &got, &e) != KF_OK || !got ||
            kf_queue_ack(q, l.id, l.token, &e) != KF_OK)
            qb_die(e.msg[0] ? e.msg : "lease found nothing");
        kf_queue_lease_free(&l);
        if (m < 5 && i == marks[m])
            samples[m++] = qb_redis_used_memory();
    }
    double dt = qb_now() - t0;
    printf("   %d jobs through enqueue -> lease -> ack (the Lua scripts the pipeline uses) in %.1f s "
           "(%.0f/s on one connection)\n", n, dt, n / dt);
    printf("   Redis used_memory: empty %lld bytes", base);
    for (int i = 0; i < m; i++)
        printf("; after %d: %lld", marks[i], samples[i]);
    printf("\n   growth per finished job: %.3f bytes (bounded: finished jobs leave Redis)\n",
           m ? (double)(samples[m - 1] - samples[0]) / (marks[m - 1] - marks[0]) : 0.0);
    kf_queue_free(q);
    free(url);
    return 0;
}

/* ---- recovery after worker SIGKILL ------------------------------------------------ */

static bool qb_wait_started(const char *id, int attempt, double timeout_s)
{
    char sql[160];
    double end = qb_now() + timeout_s;
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM job_events WHERE job_id = $1::uuid AND type = 'started' "
             "AND attempt = %d", attempt);
    while (qb_now() < end) {
        if (qb_sql_long(sql, id) >= 1)
            return true;
        qb_sleep_ms(5);
    }
    return false;
}

static int qb_recovery(int rounds, int lease_ms)
{
    CURL *c = curl_easy_init();
    double worst = 0, sum = 0;
    int ok = 0;

    qb_start_api();
    qb_start_sched();
    for (int r = 0; r < rounds; r++) {
        pid_t a = qb_start_worker(2 * r, lease_ms), b;
        char *id = qb_submit(c, 2 * lease_ms);
        if (!id || !qb_wait_started(id, 1, 10))
            qb_die("recovery: attempt 1 did not start");
        /* kill at a random point of the renewal cycle */
        qb_sleep_ms(rand() % (lease_ms / 3));
        kill(a, SIGKILL);
        waitpid(a, NULL, 0);
        double killed = qb_now();
        b = qb_start_worker(2 * r + 1, lease_ms);
        if (qb_wait_started(id, 2, 4.0 * lease_ms / 1000.0)) {
            double dt = (qb_now() - killed) * 1000.0;
            sum += dt;
            worst = dt > worst ? dt : worst;
            ok++;
            printf("   round %d: running again after %.0f ms\n", r + 1, dt);
        } else {
            printf("   round %d: not running again within 4 leases\n", r + 1);
        }
        {
            char url[160];
            snprintf(url, sizeof(url), "%s/v1/jobs/%s/cancel", qb_api_url, id);
            qb_http(c, "POST", url, NULL, NULL);   /* b stops it at its next renewal */
        }
        qb_stop(b);
        free(id);
    }
    qb_stop_all();
    printf("   lease %d ms: recovered %d/%d, mean %.0f ms, worst %.0f ms = %.2f x lease (target <= 2)\n", lease_ms,
           ok, rounds, ok ? sum / ok : 0, worst, worst / lease_ms);
    curl_easy_cleanup(c);
    return ok == rounds ? 0 : 1;
}

int main(int argc, char **argv)
{
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: queue_bench dispatch N | enqueue SECS CLIENTS | throughput N WORKERS | "
                        "memory N | recovery ROUNDS LEASE_MS\n");
        return 2;
    }
    qb_build = getenv("KFB_BUILD");
    qb_dsn = getenv("KFB_PG_DSN");
    qb_dir = getenv("KFB_DIR");
    {
        const char *port = getenv("KFB_REDIS_PORT");
        qb_redis_port = port ? (int)qb_arg(port, 1, 65535, "KFB_REDIS_PORT") : 0;
    }
    if (!qb_build || !qb_dsn || !qb_dir || !qb_redis_port)
        qb_die("set KFB_BUILD, KFB_PG_DSN, KFB_DIR and KFB_REDIS_PORT (bench/run.sh does)");
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)getpid());
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(qb_listen, sizeof(qb_listen), "127.0.0.1:%d", qb_free_port());
    snprintf(qb_api_url, sizeof(qb_api_url), "http://%s", qb_listen);
    qb_pg = PQconnectdb(qb_dsn);
    if (PQstatus(qb_pg) != CONNECTION_OK)
        qb_die(PQerrorMessage(qb_pg));
    if (strcmp(argv[1], "memory") != 0) {
        qb_user_token = qb_token("user", "user");
    }
    qb_redis_cmd("FLUSHALL");
    if (strcmp(argv[1], "dispatch") == 0)
        rc = qb_dispatch(argc > 2 ? (int)qb_arg(argv[2], 1, 100000000, "N") : 1000);
    else if (strcmp(argv[1], "enqueue") == 0)
        rc = qb_enqueue(argc > 2 ? (int)qb_arg(argv[2], 1, 86400, "SECS") : 10,
                        argc > 3 ? (int)qb_arg(argv[3], 1, 4096, "CLIENTS") : 4);
    else if (strcmp(argv[1], "throughput") == 0)
        rc = qb_throughput(argc > 2 ? (int)qb_arg(argv[2], 1, 100000000, "N") : 2000,
                           argc > 3 ? (int)qb_arg(argv[3], 1, 4096, "WORKERS") : 4);
    else if (strcmp(argv[1], "memory") == 0)
        rc = qb_memory(argc > 2 ? (int)qb_arg(argv[2], 1, 100000000, "N") : 100000);
    else if (strcmp(argv[1], "recovery") == 0)
        rc = qb_recovery(argc > 2 ? (int)qb_arg(argv[2], 1, 100000, "ROUNDS") : 5,
                         argc > 3 ? (int)qb_arg(argv[3], 1, 100000000, "LEASE_MS") : 2000);
    else
        qb_die("unknown part");
    qb_stop_all();
    PQfinish(qb_pg);
    free(qb_user_token);
    for (int i = 0; i < QB_MAX_WORKERS; i++)
        free(qb_worker_tokens[i]);
    curl_global_cleanup();
    return rc;
}
