/*
 * batches_bench — POST /v1/batches at size (bench/run.sh batches, issue 16).
 *
 *   batches_bench JOBS K
 *
 * Starts kforge-api on the migrated database KFB_PG_DSN and the Redis on
 * KFB_REDIS_PORT (bench/run.sh's queue services), then measures:
 *
 *  1. interactive dispatch on an idle queue: K diag jobs on trn2, one at a
 *     time, each POST /v1/jobs followed by this program leasing from trn2 as
 *     a worker would (kf_queue_lease_job) once the job is on Redis (polled
 *     every 0.2 ms): POST sent -> lease, p50/p99;
 *  2. the same K interactive jobs from a second thread while one batch of
 *     JOBS generate jobs (100 ops x JOBS/100 shapes, trn2, the default batch
 *     priority) is submitted and then waits on the same queue: the batch's
 *     POST wall time, and the interactive POST -> lease p50/p99 against (1).
 *
 * Every lease must be the interactive job just posted (priority: a batch's
 * jobs wait below interactive work); one that is not fails the run.  The
 * lease is acked at once, so the batch stays queued throughout.
 * Environment: KFB_BUILD, KFB_PG_DSN, KFB_REDIS_PORT, KFB_DIR (bench/run.sh).
 */
#include "bench/lib/kb_util.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_num.h"
#include "kf_queue.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *bb_build, *bb_dsn, *bb_dir;
static int bb_redis_port;
static char bb_api_url[64], bb_redis_url[64];
static char *bb_token;
static pid_t bb_api_pid;

static double bb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bb_sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };
    nanosleep(&ts, NULL);
}

static void bb_die(const char *msg)
{
    fprintf(stderr, "batches_bench: %s\n", msg);
    if (bb_api_pid > 0)
        kill(bb_api_pid, SIGKILL);
    exit(1);
}

static long bb_arg(const char *s, long lo, long hi, const char *what)
{
    kf_err e = KF_ERR_INIT;
    long v;

    if (kf_num_long(s, lo, hi, &v, &e) != KF_OK) {
        fprintf(stderr, "batches_bench: %s: %s\n", what, e.msg);
        exit(2);
    }
    return v;
}

/* A port the kernel just handed out (bind to 0), free again once closed. */
static int bb_free_port(void)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    if (!port)
        bb_die("no free port");
    return port;
}

static char *bb_make_token(void)
{
    char *tok = kb_token_create(bb_build, bb_dsn, "user", "bench-batches");
    if (!tok)
        bb_die("kforge-api token create printed no token");
    return tok;
}

static size_t bb_sink(char *p, size_t s, size_t n, void *ud)
{
    if (ud)
        kf_buf_add(ud, p, s * n);
    return s * n;
}

static long bb_http(CURL *c, const char *method, const char *path, const char *body, kf_buf *out)
{
    struct curl_slist *h = NULL;
    char auth[256], url[256];
    long status = 0;

    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", bb_token);
    snprintf(url, sizeof(url), "%s%s", bb_api_url, path);
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bb_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    return status;
}

static void bb_start_api(void)
{
    char *log = kf_asprintf("%s/api.log", bb_dir), *env[10];
    CURL *c = curl_easy_init();
    int port = bb_free_port();

    snprintf(bb_api_url, sizeof(bb_api_url), "http://127.0.0.1:%d", port);
    snprintf(bb_redis_url, sizeof(bb_redis_url), "redis://127.0.0.1:%d/0", bb_redis_port);
    env[0] = kf_asprintf("KFORGE_PG_DSN=%s", bb_dsn);
    env[1] = kf_asprintf("KFORGE_REDIS_URL=%s", bb_redis_url);
    env[2] = kf_asprintf("KFORGE_API_LISTEN=127.0.0.1:%d", port);
    env[3] = kf_strdup("KFORGE_LOG_LEVEL=info");
    env[4] = kf_strdup("KFORGE_API_CONNS_PER_IP=0");
    env[5] = NULL;
    bb_api_pid = fork();
    if (bb_api_pid == 0) {
        char *bin = kf_asprintf("%s/bin/kforge-api", bb_build);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execle(bin, bin, "serve", (char *)NULL, env);
        _exit(127);
    }
    for (int i = 0; env[i]; i++)
        free(env[i]);
    for (int i = 0; i < 200; i++) {
        if (bb_http(c, "GET", "/healthz", NULL, NULL) == 200)
            break;
        bb_sleep_us(50000);
    }
    curl_easy_cleanup(c);
    free(log);
}

static int bb_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bb_pct(double *v, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* K interactive jobs, one at a time: POST, then lease as a worker until
 * one comes; its latency in ms into lat[].  The lease must be that job. */
typedef struct bb_run {
    int           k;
    double       *lat;
    atomic_int    done;
    atomic_bool   wrong;
    char          wrong_id[40];
} bb_run;

static void *bb_interactive(void *arg)
{
    bb_run *run = arg;
    CURL *c = curl_easy_init();
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(bb_redis_url, &e);
    const char *targets[1] = { "trn2" };
    redisContext *rc = redisConnect("127.0.0.1", bb_redis_port);

    if (!q)
        bb_die(e.msg);
    if (!rc || rc->err)
        bb_die("cannot connect to Redis");
    for (int i = 0; i < run->k; i++) {
        kf_buf out = KF_BUF_INIT;
        double t0 = bb_now();
        long st = bb_http(c, "POST", "/v1/jobs", "{\"kind\":\"diag\",\"target\":\"trn2\",\"spec\":{\"sleep_ms\":0}}",
                          &out);
        cJSON *j = st == 202 ? cJSON_Parse(out.data) : NULL;
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "id"));
        bool got = false;
        kf_queue_lease l;

        if (!id)
            bb_die("POST /v1/jobs failed");
        /* A worker leases the best job waiting when it asks; ask once the
         * job is on Redis (the API puts it there right after its 202), so
         * what is measured is how soon an interactive job can be leased,
         * and the lease shows whether anything queued outranks it. */
        for (;;) {
            redisReply *x = redisCommand(rc, "EXISTS kf:job:%s", id);
            bool there = x && x->type == REDIS_REPLY_INTEGER && x->integer == 1;
            freeReplyObject(x);
            if (there)
                break;
            bb_sleep_us(200);
        }
        while (!got) {
            if (kf_queue_lease_job(q, &(kf_queue_caps){ targets, 1, (const char *const[]){ "diag", "sim" }, 2 }, "bench-w0", 60000, &l, &got, &e) != KF_OK)
                bb_die(e.msg);
            if (!got)
                bb_sleep_us(200);
        }
        run->lat[i] = (bb_now() - t0) * 1000.0;
        if (strcmp(l.id, id) != 0 && !atomic_exchange(&run->wrong, true))
            snprintf(run->wrong_id, sizeof(run->wrong_id), "%s", l.id);
        if (kf_queue_ack(q, l.id, l.token, &e) != KF_OK)
            bb_die(e.msg);
        kf_queue_lease_free(&l);
        cJSON_Delete(j);
        kf_buf_release(&out);
        atomic_fetch_add(&run->done, 1);
        bb_sleep_us(5000);   /* a notebook's pace, not a flood */
    }
    kf_queue_free(q);
    redisFree(rc);
    curl_easy_cleanup(c);
    return NULL;
}

static char *bb_batch_body(int jobs)
{
    int ops = jobs < 100 ? jobs : 100, shapes = (jobs + ops - 1) / ops;
    kf_buf b = KF_BUF_INIT;

    kf_buf_adds(&b, "{\"name\":\"bench\",\"template\":{\"kind\":\"generate\",\"budget\":{\"iterations\":8}},"
                    "\"matrix\":{\"op\":[");
    for (int i = 0; i < ops; i++)
        kf_buf_addf(&b, "%s\"op%d\"", i ? "," : "", i);
    kf_buf_adds(&b, "],\"shapes\":[");
    for (int i = 0; i < shapes; i++)
        kf_buf_addf(&b, "%s[[%d,%d]]", i ? "," : "", 128 * (i + 1), 64);
    kf_buf_adds(&b, "],\"dtype\":[\"bfloat16\"],\"target\":[\"trn2\"]}}");
    return kf_buf_detach(&b);
}

static void bb_report(const char *what, double *lat, int n, double *p50, double *p99)
{
    qsort(lat, (size_t)n, sizeof(double), bb_cmp);
    *p50 = bb_pct(lat, n, 0.5);
    *p99 = bb_pct(lat, n, 0.99);
    printf("   %-44s p50 %6.1f ms  p99 %6.1f ms  max %6.1f ms  (%d jobs)\n", what, *p50, *p99, lat[n - 1], n);
}

int main(int argc, char **argv)
{
    int jobs, k;
    bb_run idle, busy;
    pthread_t th;
    CURL *c;
    char *body;
    kf_buf out = KF_BUF_INIT;
    double t0, t1, i50, i99, b50, b99;
    long st;
    int during;

    if (argc < 3) {
        fprintf(stderr, "usage: batches_bench JOBS K\n");
        return 2;
    }
    jobs = (int)bb_arg(argv[1], 1, 1000000, "JOBS");
    k = (int)bb_arg(argv[2], 10, 100000, "K");
    bb_build = getenv("KFB_BUILD");
    bb_dsn = getenv("KFB_PG_DSN");
    bb_dir = getenv("KFB_DIR");
    if (getenv("KFB_REDIS_PORT"))
        bb_redis_port = (int)bb_arg(getenv("KFB_REDIS_PORT"), 1, 65535, "KFB_REDIS_PORT");
    if (!bb_build || !bb_dsn || !bb_dir || !bb_redis_port)
        bb_die("set KFB_BUILD, KFB_PG_DSN, KFB_DIR and KFB_REDIS_PORT (bench/run.sh does)");
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    bb_token = bb_make_token();
    bb_start_api();
    c = curl_easy_init();

    memset(&idle, 0, sizeof(idle));
    idle.k = k;
    idle.lat = kf_calloc((size_t)k, sizeof(double));
    bb_interactive(&idle);
    if (atomic_load(&idle.wrong))
        bb_die("an idle queue leased another job than the one posted");

    memset(&busy, 0, sizeof(busy));
    busy.k = k;
    busy.lat = kf_calloc((size_t)k, sizeof(double));
    body = bb_batch_body(jobs);
    pthread_create(&th, NULL, bb_interactive, &busy);
    t0 = bb_now();
    st = bb_http(c, "POST", "/v1/batches", body, &out);
    t1 = bb_now();
    during = atomic_load(&busy.done);
    pthread_join(th, NULL);
    if (st != 202) {
        fprintf(stderr, "POST /v1/batches answered %ld: %.500s\n", st, out.data);
        bb_die("the batch was refused");
    }
    {
        cJSON *b = cJSON_Parse(out.data);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(b, "n_jobs");
        printf("   POST /v1/batches, %d generate jobs (one transaction, then queued): %.3f s wall "
               "(target <= 2 s)\n", cJSON_IsNumber(n) ? n->valueint : -1, t1 - t0);
        cJSON_Delete(b);
    }
    printf("   interactive jobs leased while the batch's POST ran: %d\n", during);
    bb_report("idle queue: POST /v1/jobs sent -> lease", idle.lat, k, &i50, &i99);
    bb_report("batch queued: POST /v1/jobs sent -> lease", busy.lat, k, &b50, &b99);
    printf("   p99 above the idle queue's: %+.1f ms (target <= +100 ms); every lease was the interactive job: %s\n",
           b99 - i99, atomic_load(&busy.wrong) ? "NO" : "yes");
    if (atomic_load(&busy.wrong))
        fprintf(stderr, "   a batch job (%s) was leased before an interactive one\n", busy.wrong_id);
    {
        /* Where the POST's time went, as kforge-api logged it. */
        char *log = kf_asprintf("%s/api.log", bb_dir), line[2048];
        FILE *f = fopen(log, "r");
        while (f && fgets(line, sizeof(line), f)) {
            const char *p = strstr(line, "parse_ms="), *q = p ? strstr(p, " req=") : NULL;
            if (strstr(line, "batch created") && p && q)
                printf("   in kforge-api: %.*s\n", (int)(q - p), p);
        }
        if (f)
            fclose(f);
        free(log);
    }
    kill(bb_api_pid, SIGTERM);
    waitpid(bb_api_pid, NULL, 0);
    kf_buf_release(&out);
    free(body);
    free(idle.lat);
    free(busy.lat);
    free(bb_token);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    return atomic_load(&busy.wrong) ? 1 : 0;
}
