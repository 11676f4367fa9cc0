/*
 * runs_bench — the runs read side at scale (bench/run.sh runs; issue 15).
 *
 *   runs_bench [REQUESTS]   load 100,000 jobs and 2,000,360 iterations into
 *                           the database of KFB_PG_DSN with generate_series,
 *                           start kforge-api on it, then time REQUESTS
 *                           (default 300) of each over HTTP, one keep-alive
 *                           connection, and print p50/p99 against the
 *                           issue's targets:
 *                             a filtered GET /v1/jobs page   (p99 <= 20 ms)
 *                             GET /v1/jobs/{id}/iterations    (p99 <= 20 ms)
 *                             GET /v1/compare of two 200-iteration jobs (p99 <= 50 ms)
 *
 * The data: half the jobs are the benchmark user's, ten ops, labels
 * team (20 values) and run (1,000), a batch per 100 jobs, 16 workers, one
 * job a minute back in time; 20 iterations a job (jobs 1 and 2: 200, for
 * compare) with a realistic profile, validation and findings, one in ten
 * incorrect, the source sent once per job.  The filtered pages rotate over
 * op, label, op + label, worker, batch, a label with created_before (every
 * filter of docs/runs.md) and an op + label that no job has, each shape's
 * p50/p99 printed too; the iteration pages over 500 jobs.
 *
 * Environment (set by bench/run.sh): KFB_BUILD, KFB_PG_DSN (a migrated,
 * empty database), KFB_REDIS_PORT, KFB_DIR (scratch folder for the log).
 * Exit status 1 when a step fails (the message says which); the targets
 * are reported, not enforced.
 */
#include "bench/lib/kb_util.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_num.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *rb_build, *rb_dsn, *rb_dir;
static pid_t rb_api = -1;
static char rb_url[64], rb_token[256];

static void rb_die(const char *what, const char *detail)
{
    fprintf(stderr, "runs_bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    if (rb_api > 0)
        kill(rb_api, SIGKILL);
    exit(1);
}

static void rb_sql(PGconn *c, const char *sql)
{
    char why[512];
    if (!kb_sql_ok(c, sql, why, sizeof(why)))
        rb_die(sql, why);
}

/* The bench user's token (kforge-api token create) into rb_token; its id. */
static long rb_make_token(PGconn *c)
{
    char *tok = kb_token_create(rb_build, rb_dsn, "user", "bench-runs");
    long id;

    if (!tok)
        rb_die("kforge-api token create printed no token", NULL);
    snprintf(rb_token, sizeof(rb_token), "%s", tok);
    free(tok);
    id = kb_token_id(c, "bench-runs");
    if (!id)
        rb_die("the bench token's id", PQerrorMessage(c));
    return id;
}

static void rb_load(PGconn *c, long owner)
{
    char *jobs = kf_asprintf(
        "INSERT INTO jobs (id, kind, state, target, backend, spec, labels, owner_token_id, batch_id, worker_id, "
        "created_at, updated_at, started_at, finished_at, attempt, provenance, result) "
        "SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'generate', 'succeeded', "
        "(ARRAY['trn1','inf2','trn2','trn3'])[1 + g %% 4], 'sim', "
        "jsonb_build_object('op', (ARRAY['matmul','softmax','rmsnorm','layernorm','add','swiglu','transpose2d',"
        "'avgpool2d','flash_attention','depthwise_conv2d'])[1 + g %% 10], 'shapes', "
        "jsonb_build_array(jsonb_build_array(128 * (1 + g %% 8), 512)), 'dtype', 'bfloat16'), "
        "jsonb_build_object('team', 't' || (g %% 20), 'run', 'r' || (g %% 1000)), "
        "CASE WHEN g %% 2 = 0 OR g <= 2 THEN %ld ELSE %ld END, "
        "('00000000-0000-4000-9000-' || lpad(to_hex(g / 100), 12, '0'))::uuid, 'w' || (g %% 16), "
        "now() - g * interval '1 minute', now() - g * interval '1 minute', now() - g * interval '1 minute', "
        "now() - g * interval '1 minute' + interval '30 s', 1, "
        "'{\"worker\":\"w1\",\"backend\":\"sim\",\"sim_build\":\"b1\",\"target_hash\":\"h1\",\"template_hash\":\"t1\"}', "
        "jsonb_build_object('latency_ns', 1000 + g %% 5000, 'report', repeat('the agent''s report. ', 400)) "
        "FROM generate_series(1, 100000) g",
        owner, owner + 1000000);
    double t0 = kb_now_ms();

    rb_sql(c, "SET synchronous_commit = off");
    {
        /* The batches the jobs point at (jobs.batch_id is a key, 0012). */
        char *batches = kf_asprintf(
            "INSERT INTO batches (id, owner_token_id, source, template, matrix, matrix_hash, priority, n_jobs) "
            "SELECT ('00000000-0000-4000-9000-' || lpad(to_hex(b), 12, '0'))::uuid, %ld, 'matrix', '{}', '{}', "
            "'bench', 2, 100 FROM generate_series(0, 1000) b", owner);
        rb_sql(c, batches);
        free(batches);
    }
    rb_sql(c, jobs);
    free(jobs);
    rb_sql(c,
           "INSERT INTO iterations (job_id, attempt, seq, source, params, profile, validation, findings, action, reason, "
           "timings, latency_ns, correct, created_at) "
           "SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(j), 12, '0'))::uuid, 1, s, "
           "CASE WHEN s = 0 THEN 'import nki' || chr(10) || repeat('x = nl.load(a[i, j])' || chr(10), 60) END, "
           "jsonb_build_object('TILE_N', 128 << (s % 4), 'BUFS', 1 + s % 3), "
           "'{\"latency_ns\": 2000, \"floor_ns\": 900, \"bound_kind\": \"io\", \"bounds\": {\"compute_ns\": 500, "
           "\"memory_ns\": 900, \"necessary_io_ns\": 900, \"pipeline_ns\": 1500, \"tightest\": \"pipeline\", "
           "\"tightest_ns\": 1500, \"achieved_fraction\": 0.7, \"floor_ns\": 900}, \"summary\": {\"total_time\": 2e-6, "
           "\"mfu_estimated_percent\": 12.5, \"mbu_estimated_percent\": 40.1, \"tensor_engine_active_time_percent\": 30, "
           "\"vector_engine_active_time_percent\": 20, \"scalar_engine_active_time_percent\": 5, "
           "\"gpsimd_engine_active_time_percent\": 0, \"dma_active_time_percent\": 80, \"dma_transfer_count\": 64, "
           "\"dma_transfer_average_bytes\": 4096, \"hbm_read_bytes\": 262144, \"hbm_write_bytes\": 131072, "
           "\"model_flops\": 1048576}, \"cached\": false}', "
           "'{\"ok\": true, \"pass\": true, \"status\": \"pass\", \"checks\": [{\"seed\": 1, \"output\": 0, \"pass\": "
           "true, \"elements\": 65536, \"bad\": 0, \"max_abs_err\": 0.0039, \"rtol\": 0.01, \"atol\": 0.01, "
           "\"message\": \"ok\"}]}', "
           "'[{\"kind\": \"dma_small_transfers\", \"title\": \"Small DMA transfers\", \"cost_ns\": 120, \"message\": "
           "\"64 transfers of 4 KiB\", \"lines\": [{\"loc\": \"k.py:12\", \"ns\": 100}]}]', "
           "'tune', 'the neighbour TILE_N; 1.9 us is not faster than the best (1.8 us)', "
           "'{\"eval_ms\": 120, \"total_ms\": 130}', 1000 + ((j * 7919 + s * 104729) % 5000), (j + s) % 10 <> 0, "
           "now() - j * interval '1 minute' + s * interval '1 s' "
           "FROM generate_series(1, 100000) j CROSS JOIN LATERAL "
           "generate_series(0, CASE WHEN j <= 2 THEN 199 ELSE 19 END) s");
    rb_sql(c, "ANALYZE jobs");
    rb_sql(c, "ANALYZE iterations");
    printf("   loaded 100,000 jobs and 2,000,360 iterations in %.1f s\n", (kb_now_ms() - t0) / 1e3);
}

static void rb_start_api(void)
{
    char *log = kf_asprintf("%s/runs-api.log", rb_dir);
    char *bin = kf_asprintf("%s/bin/kforge-api", rb_build);
    char port[16], listen[48];
    FILE *f = popen("/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
                    "print(s.getsockname()[1])'", "r");

    if (!f || !fgets(port, sizeof(port), f))
        rb_die("no free port", NULL);
    pclose(f);
    port[strcspn(port, "\n")] = '\0';
    snprintf(listen, sizeof(listen), "127.0.0.1:%s", port);
    snprintf(rb_url, sizeof(rb_url), "http://%s", listen);
    rb_api = fork();
    if (rb_api < 0)
        rb_die("fork", NULL);
    if (rb_api == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setenv("KFORGE_PG_DSN", rb_dsn, 1);
        setenv("KFORGE_REDIS_URL", kf_asprintf("redis://127.0.0.1:%s/0", getenv("KFB_REDIS_PORT")), 1);
        setenv("KFORGE_API_LISTEN", listen, 1);
        setenv("KFORGE_API_CONNS_PER_IP", "0", 1);
        setenv("KFORGE_LOG_LEVEL", "warn", 1);
        execl(bin, bin, "serve", (char *)NULL);
        _exit(127);
    }
    free(log);
    free(bin);
}

static size_t rb_sink(char *p, size_t s, size_t n, void *ud)
{
    kf_buf_add(ud, p, s * n);
    return s * n;
}

/* GET path on the keep-alive handle; the status, the body in out. */
static long rb_get(CURL *c, const char *path, kf_buf *out)
{
    char url[512], auth[300];
    struct curl_slist *h = NULL;
    long status = 0;

    snprintf(url, sizeof(url), "%s%s", rb_url, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", rb_token);
    h = curl_slist_append(h, auth);
    kf_buf_reset(out);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, rb_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    return status;
}

static int rb_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef const char *(*rb_path_fn)(int i, char *buf, size_t cap);

/* rb_list_path's shapes, in the order of its i % 6. */
static const char *const rb_list_kinds[] = { "op=",
                                             "label.team=",
                                             "op= & label.team=",
                                             "worker=",
                                             "batch=",
                                             "label.run= & created_before=",
                                             "op= & label.team=, no job has both" };

static const char *rb_list_path(int i, char *buf, size_t cap)
{
    static const char *const ops[] = { "matmul", "softmax", "rmsnorm", "layernorm", "add" };
    switch (i % 7) {
    case 0:
        snprintf(buf, cap, "/v1/jobs?op=%s&limit=50", ops[i % 5]);
        break;
    case 1:
        snprintf(buf, cap, "/v1/jobs?label.team=t%d&limit=50", (i * 2) % 20);
        break;
    case 2:
        snprintf(buf, cap, "/v1/jobs?op=matmul&label.team=t%d&limit=50", (i * 10) % 20);
        break;
    case 3:
        snprintf(buf, cap, "/v1/jobs?worker=w%d&limit=50", (i * 2) % 16);
        break;
    case 4:
        snprintf(buf, cap, "/v1/jobs?batch=00000000-0000-4000-9000-%012x&limit=50", (unsigned)(i % 900));
        break;
    case 5:
        snprintf(buf, cap, "/v1/jobs?label.run=r%d&created_before=2026-12-01T00:00:00Z&limit=50", (i * 2) % 1000);
        break;
    default:
        /* Team t0 and t10 jobs are all matmul (g % 20 and g % 10): an empty
         * page after both filters match thousands of jobs. */
        snprintf(buf, cap, "/v1/jobs?op=%s&label.team=t%d&limit=50", ops[1 + i % 4], (i * 10) % 20);
        break;
    }
    return buf;
}

static const char *rb_iter_path(int i, char *buf, size_t cap)
{
    /* The user's jobs are the even ones; 2 has 200 iterations. */
    unsigned job = i % 5 == 0 ? 2u : (unsigned)(2 * (1 + (i * 97) % 50000));
    snprintf(buf, cap, "/v1/jobs/00000000-0000-4000-8000-%012x/iterations?limit=100", job);
    return buf;
}

static const char *rb_compare_path(int i, char *buf, size_t cap)
{
    (void)i;
    snprintf(buf, cap, "/v1/compare?jobs=00000000-0000-4000-8000-000000000001,00000000-0000-4000-8000-000000000002");
    return buf;
}

static double rb_p99(double *ms, int n)
{
    qsort(ms, (size_t)n, sizeof(double), rb_cmp);
    return ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
}

/* Times n requests of path(i) and prints p50/p99 against target_ms; with
 * kinds > 1, path(i) rotates over kinds shapes of request (i % kinds) and
 * each shape's own p50/p99 follows, labelled by kind_name, so a slow
 * filter is named rather than hidden in the overall tail. */
static void rb_measure(CURL *c, const char *name, rb_path_fn path, int n, double target_ms, int kinds,
                       const char *const *kind_name)
{
    double *ms = kf_calloc((size_t)n, sizeof(double));
    double *by = kf_calloc((size_t)n, sizeof(double));
    kf_buf out = KF_BUF_INIT;
    size_t bytes = 0;
    char p[512];

    for (int i = 0; i < 20; i++)   /* warm the pool's connections and caches */
        rb_get(c, path(i, p, sizeof(p)), &out);
    for (int i = 0; i < n; i++) {
        double t0 = kb_now_ms();
        long st = rb_get(c, path(i, p, sizeof(p)), &out);
        ms[i] = kb_now_ms() - t0;
        if (st != 200)
            rb_die(p, out.data);
        bytes += out.len;
    }
    for (int k = 0; k < kinds && kinds > 1; k++) {
        int m = 0;
        for (int i = k; i < n; i += kinds)
            by[m++] = ms[i];
        if (m) {
            double p99 = rb_p99(by, m);
            printf("     %-36s p50 %6.2f ms  p99 %6.2f ms  (%d requests)\n", kind_name[k], by[m / 2], p99, m);
        }
    }
    {
        double p99 = rb_p99(ms, n);
        printf("   %-34s p50 %6.2f ms  p99 %6.2f ms  (target p99 <= %.0f ms: %s; %zu bytes a page on average)\n",
               name, ms[n / 2], p99, target_ms, p99 <= target_ms ? "met" : "NOT met", bytes / (size_t)n);
    }
    free(ms);
    free(by);
    kf_buf_release(&out);
}

int main(int argc, char **argv)
{
    long n = 300;
    PGconn *pg;
    CURL *c;
    kf_buf out = KF_BUF_INIT;
    long owner;

    rb_build = getenv("KFB_BUILD");
    rb_dsn = getenv("KFB_PG_DSN");
    rb_dir = getenv("KFB_DIR");
    if (!rb_build || !rb_dsn || !rb_dir || !getenv("KFB_REDIS_PORT"))
        rb_die("KFB_BUILD, KFB_PG_DSN, KFB_REDIS_PORT and KFB_DIR must be set (bench/run.sh runs sets them)", NULL);
    if (argc > 1 && kf_num_long(argv[1], 10, 1000000, &n, NULL) != KF_OK)
        rb_die("REQUESTS must be a whole number from 10 to 1000000", argv[1]);
    pg = PQconnectdb(rb_dsn);
    if (PQstatus(pg) != CONNECTION_OK)
        rb_die("cannot reach PostgreSQL", PQerrorMessage(pg));
    owner = rb_make_token(pg);
    rb_load(pg, owner);
    PQfinish(pg);
    rb_start_api();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    c = curl_easy_init();
    for (int i = 0; i < 300 && rb_get(c, "/healthz", &out) != 200; i++)
        usleep(50000);
    rb_measure(c, "GET /v1/jobs, filtered page of 50", rb_list_path, (int)n, 20, 7, rb_list_kinds);
    rb_measure(c, "GET /v1/jobs/{id}/iterations, 100", rb_iter_path, (int)n, 20, 1, NULL);
    rb_measure(c, "GET /v1/compare, 2 x 200 iterations", rb_compare_path, (int)n, 50, 1, NULL);
    curl_easy_cleanup(c);
    kf_buf_release(&out);
    kill(rb_api, SIGTERM);
    waitpid(rb_api, NULL, 0);
    return 0;
}
