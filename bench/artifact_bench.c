/*
 * artifact_bench — the artifact store's write and read MB/s (db/kf_artifact.h)
 * against a raw COPY of the same bytes into PostgreSQL (issue 15).
 *
 *   artifact_bench DSN DIR [MIB] [REPS]
 *
 * The payload is MIB MiB (default 8) of Chrome trace-event JSON shaped like
 * the simulator's trace.json (what artifacts mostly are), each repetition
 * with one number changed so every put stores a new content.  Measured, in
 * MB/s of the original bytes (1 MB = 10^6 bytes), the median of REPS
 * (default 5):
 *   pg put / get    the default store: SHA-256, zlib level 3, INSERT of the
 *                   compressed bytes as a binary parameter; SELECT + inflate
 *   dir put / get   the folder store at DIR: SHA-256, write, fsync, rename,
 *                   fsync of the folder; pread
 *   COPY in / out   the same bytes, uncompressed, into a bytea column with
 *                   COPY ... FROM STDIN (FORMAT binary), and out with
 *                   COPY (SELECT ...) TO STDOUT (FORMAT binary)
 * plus the compression ratio.  DSN's database must be migrated (`kforge-api
 * migrate`: artifact_blobs comes from 0009); bench_copy is made with the
 * same storage (EXTERNAL: out of line, not compressed again by PostgreSQL)
 * and dropped after, and the blobs written are deleted.
 * Not a test: run by bench/run.sh (make bench) against a PostgreSQL it
 * starts.  Exits 1 with a message when a step fails.
 */
#include <arpa/inet.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kf_artifact.h"
#include "kf_buf.h"

static double ab_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int ab_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double ab_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), ab_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int ab_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "artifact_bench: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return ok;
}

/* Trace-event JSON of about `bytes` bytes; `rep` changes its first event. */
static void ab_payload(kf_buf *b, size_t bytes, int rep)
{
    static const char *const engines[] = { "tensor", "vector", "scalar", "gpsimd", "dma_q0", "dma_q1" };
    static const char *const ops[] = { "matmul", "tensor_tensor", "activation", "iota", "dma_copy", "tensor_copy" };

    kf_buf_reset(b);
    kf_buf_addf(b, "{\"traceEvents\":[{\"name\":\"rep\",\"ph\":\"M\",\"args\":{\"rep\":%d}}", rep);
    for (long i = 0; b->len < bytes; i++) {
        int e = (int)(i % 6);
        kf_buf_addf(b,
                    ",{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"loc\":\"kernel.py:%ld\",\"bytes\":%ld,\"flops\":%ld,\"waits\":\"%s\"}}",
                    ops[e], engines[e], e, (double)i * 0.137, 0.05 + (double)(i % 17) * 0.011, 20 + i % 60,
                    (i % 64) * 2048, (i % 7) * 131072, i % 3 ? "" : "sem:tensor");
    }
    kf_buf_adds(b, "],\"displayTimeUnit\":\"ns\"}");
}

/* COPY bytes into bench_copy (binary format: one row, one bytea field). */
static int ab_copy_in(PGconn *c, const kf_buf *data)
{
    static const char sig[] = "PGCOPY\n\377\r\n";
    char head[19 + 2 + 4];
    uint16_t nf = htons(1);
    uint32_t len = htonl((uint32_t)data->len), zero = 0;
    int16_t end = (int16_t)htons(0xffff);
    PGresult *r = PQexec(c, "COPY bench_copy (data) FROM STDIN WITH (FORMAT binary)");
    int ok;

    if (PQresultStatus(r) != PGRES_COPY_IN) {
        fprintf(stderr, "artifact_bench: COPY: %s", PQerrorMessage(c));
        PQclear(r);
        return 0;
    }
    PQclear(r);
    memcpy(head, sig, 11);
    memcpy(head + 11, &zero, 4);   /* flags */
    memcpy(head + 15, &zero, 4);   /* header extension length */
    memcpy(head + 19, &nf, 2);
    memcpy(head + 21, &len, 4);
    ok = PQputCopyData(c, head, sizeof(head)) == 1 && PQputCopyData(c, data->data, (int)data->len) == 1 &&
         PQputCopyData(c, (const char *)&end, 2) == 1 && PQputCopyEnd(c, NULL) == 1;
    r = PQgetResult(c);
    ok = ok && PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "artifact_bench: COPY: %s", PQerrorMessage(c));
    PQclear(r);
    while ((r = PQgetResult(c)))
        PQclear(r);
    return ok;
}

/* COPY the row back out; the bytes received. */
static long ab_copy_out(PGconn *c, int id)
{
    char sql[160], *buf = NULL;
    long total = 0;
    int n;
    PGresult *r;

    snprintf(sql, sizeof(sql), "COPY (SELECT data FROM bench_copy WHERE id = %d) TO STDOUT WITH (FORMAT binary)", id);
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COPY_OUT) {
        fprintf(stderr, "artifact_bench: COPY out: %s", PQerrorMessage(c));
        PQclear(r);
        return -1;
    }
    PQclear(r);
    while ((n = PQgetCopyData(c, &buf, 0)) > 0) {
        total += n;
        PQfreemem(buf);
    }
    while ((r = PQgetResult(c)))
        PQclear(r);
    return total;
}

int main(int argc, char **argv)
{
    const char *dsn = argc > 1 ? argv[1] : NULL, *dir = argc > 2 ? argv[2] : NULL;
    long mib = argc > 3 ? strtol(argv[3], NULL, 10) : 8;
    int reps = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 5;
    kf_artifact_store *pg = NULL, *fs = NULL;
    kf_buf data = KF_BUF_INIT, out = KF_BUF_INIT, z = KF_BUF_INIT;
    double t_pg_put[64], t_pg_get[64], t_dir_put[64], t_dir_get[64], t_copy_in[64], t_copy_out[64];
    char sha[65], spec[4200];
    kf_err e = KF_ERR_INIT;
    uint64_t size;
    PGconn *c;
    double mb;

    if (!dsn || !dir || mib < 1 || mib > 1024 || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: artifact_bench DSN DIR [MIB 1..1024] [REPS 1..64]\n");
        return 2;
    }
    c = PQconnectdb(dsn);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "artifact_bench: %s", PQerrorMessage(c));
        return 1;
    }
    if (!ab_exec(c, "CREATE TABLE bench_copy (id serial PRIMARY KEY, data bytea NOT NULL)") ||
        !ab_exec(c, "ALTER TABLE bench_copy ALTER COLUMN data SET STORAGE EXTERNAL"))
        return 1;
    snprintf(spec, sizeof(spec), "dir:%s", dir);
    if (kf_artifact_store_open("pg", &pg, &e) != KF_OK || kf_artifact_store_open(spec, &fs, &e) != KF_OK) {
        fprintf(stderr, "artifact_bench: %s\n", e.msg);
        return 1;
    }
    for (int i = 0; i < reps; i++) {
        double t0;
        ab_payload(&data, (size_t)mib << 20, i);
        t0 = ab_now();
        if (kf_artifact_put(pg, c, data.data, data.len, sha, &e) != KF_OK)
            goto fail;
        t_pg_put[i] = ab_now() - t0;
        kf_buf_reset(&out);
        t0 = ab_now();
        if (kf_artifact_get(pg, c, sha, 0, KF_ARTIFACT_TO_END, &out, &size, &e) != KF_OK || out.len != data.len)
            goto fail;
        t_pg_get[i] = ab_now() - t0;
        t0 = ab_now();
        if (kf_artifact_put(fs, NULL, data.data, data.len, sha, &e) != KF_OK)
            goto fail;
        t_dir_put[i] = ab_now() - t0;
        kf_buf_reset(&out);
        t0 = ab_now();
        if (kf_artifact_get(fs, NULL, sha, 0, KF_ARTIFACT_TO_END, &out, &size, &e) != KF_OK || out.len != data.len)
            goto fail;
        t_dir_get[i] = ab_now() - t0;
        t0 = ab_now();
        if (!ab_copy_in(c, &data))
            return 1;
        t_copy_in[i] = ab_now() - t0;
        t0 = ab_now();
        if (ab_copy_out(c, i + 1) < (long)data.len)
            return 1;
        t_copy_out[i] = ab_now() - t0;
    }
    mb = (double)data.len / 1e6;
    kf_artifact_deflate(data.data, data.len, &z);
    printf("   payload: %.1f MB of trace-event JSON, %d repetitions (median), zlib ratio %.1fx\n", mb, reps,
           z.len ? (double)data.len / (double)z.len : 1.0);
    printf("   pg store  put %7.1f MB/s   get %7.1f MB/s\n", mb / ab_median(t_pg_put, reps),
           mb / ab_median(t_pg_get, reps));
    printf("   dir store put %7.1f MB/s   get %7.1f MB/s\n", mb / ab_median(t_dir_put, reps),
           mb / ab_median(t_dir_get, reps));
    printf("   raw COPY  in  %7.1f MB/s   out %7.1f MB/s\n", mb / ab_median(t_copy_in, reps),
           mb / ab_median(t_copy_out, reps));
    ab_exec(c, "DROP TABLE bench_copy");
    ab_exec(c, "DELETE FROM artifact_blobs");
    kf_artifact_store_free(pg);
    kf_artifact_store_free(fs);
    kf_buf_release(&data);
    kf_buf_release(&out);
    kf_buf_release(&z);
    PQfinish(c);
    return 0;
fail:
    fprintf(stderr, "artifact_bench: %s\n", e.msg);
    return 1;
}
