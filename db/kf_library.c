/* kf_library — a succeeded job's offer to the kernel library (see
 * kf_library.h). */
#include "kf_library.h"

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_diff.h"
#include "kf_log.h"
#include "kf_pg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The job's key and its best iteration (the order of jobs.best_iteration
 * and the kforge_best view), with the kernel.py the worker kept for that
 * iteration (the final set's first).  No row: the job offers nothing. */
static const char kf_lib_candidate[] =
    "SELECT CASE WHEN j.kind = 'generate' THEN j.spec->>'op' ELSE 'user.' || (j.spec->>'entry') END AS kernel, "
    "  kforge_job_shape(j.spec)::text AS shape, "
    "  coalesce(j.spec->>'dtype', (SELECT string_agg(DISTINCT v->>'dtype', '+' ORDER BY v->>'dtype') "
    "    FROM jsonb_each(CASE WHEN jsonb_typeof(j.spec->'inputs') = 'object' THEN j.spec->'inputs' ELSE '{}' END) "
    "    AS e(k, v)), 'unknown') AS dtype, "
    "  j.target, j.backend, CASE WHEN j.kind = 'generate' THEN NULL ELSE j.owner_token_id END AS owner, "
    "  coalesce(j.spec->>'entry', j.result->>'entry', j.spec->>'op') AS entry, "
    "  b.params::text, b.latency_ns, kforge_fraction_of_bound(b.profile, b.latency_ns), b.attempt, b.seq, "
    "  j.provenance::text, coalesce(j.finished_at, now()), "
    "  (SELECT a.sha256 FROM artifacts a WHERE a.job_id = j.id AND a.attempt = b.attempt AND a.seq = b.seq "
    "   AND a.name = 'kernel.py' ORDER BY a.final DESC LIMIT 1) "
    "FROM jobs j JOIN LATERAL (SELECT i.attempt, i.seq, i.params, i.latency_ns, i.profile FROM iterations i "
    "  WHERE i.job_id = j.id AND i.correct AND i.latency_ns > 0 AND i.latency_ns < 'Infinity' "
    "  ORDER BY i.latency_ns, i.attempt DESC, i.seq LIMIT 1) b ON true "
    "WHERE j.id = $1::uuid AND j.state = 'succeeded' AND j.kind IN ('generate', 'optimize') "
    "  AND CASE WHEN j.kind = 'generate' THEN j.spec->>'op' ELSE j.spec->>'entry' END "
    "  ~ '^[A-Za-z_][A-Za-z0-9_]{0,63}$'";

enum { C_KERNEL, C_SHAPE, C_DTYPE, C_TARGET, C_BACKEND, C_OWNER, C_ENTRY, C_PARAMS, C_LAT, C_FRAC, C_ATTEMPT, C_SEQ,
       C_PROV, C_FINISHED, C_SHA };

bool kf_library_id_valid(const char *id)
{
    size_t n = 0;

    if (!id || !*id || *id == '.' || *id == '-')
        return false;
    for (const char *p = id; *p; p++, n++) {
        char ch = *p;
        if (n >= 200 || !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                          ch == '_' || ch == '.' || ch == '-'))
            return false;
    }
    return true;
}

/* The source of iteration seq of the job's attempt, rebuilt as the runs
 * read side does (api_run_source): the last full source at or before seq,
 * then each later row's diff (or the same source when a row has neither).
 * *out NULL when it cannot be rebuilt. */
static kf_code kf_lib_rebuild(PGconn *c, const char *job, const char *attempt, const char *seq, char **out,
                              kf_err *err)
{
    const char *p[3] = { job, attempt, seq };
    PGresult *r = kf_pg_exec(c, "library: read the best iteration's source",
                             "SELECT seq, source, source_diff FROM iterations WHERE job_id = $1::uuid AND "
                             "attempt = $2::int AND seq <= $3::int AND seq >= coalesce((SELECT max(seq) FROM "
                             "iterations WHERE job_id = $1::uuid AND attempt = $2::int AND seq <= $3::int AND "
                             "source IS NOT NULL), 0) ORDER BY seq",
                             3, p, NULL, NULL, err);
    char *cur = NULL;
    int rows;

    *out = NULL;
    if (!r)
        return err->code;
    rows = PQntuples(r);
    for (int i = 0; i < rows; i++) {
        kf_err e = KF_ERR_INIT;
        char *next = NULL;
        if (!PQgetisnull(r, i, 1))
            next = kf_strdup(PQgetvalue(r, i, 1));
        else if (!PQgetisnull(r, i, 2) && cur && kf_diff_apply(cur, PQgetvalue(r, i, 2), &next, &e) != KF_OK)
            kf_log_warn("library: an iteration's source_diff does not apply job=%s attempt=%s seq=%s msg=\"%s\"", job,
                        attempt, PQgetvalue(r, i, 0), e.msg);
        else if (PQgetisnull(r, i, 2) && cur)
            next = kf_strdup(cur);
        free(cur);
        cur = next;
    }
    if (rows == 0 || strcmp(PQgetvalue(r, rows - 1, 0), seq) != 0) {
        free(cur);
        cur = NULL;
    }
    PQclear(r);
    *out = cur;
    return KF_OK;
}

/* "<kernel>-<target>-<dtype>-<backend>-<12 hex of SHA-256(shape, owner)>";
 * '+' of a multi-dtype key reads as '_'. */
static void kf_lib_entry_id(const PGresult *r, char *out, size_t cap)
{
    char hex[65];
    kf_buf k = KF_BUF_INIT;

    kf_buf_addf(&k, "%s\n%s", PQgetvalue(r, 0, C_SHAPE), PQgetisnull(r, 0, C_OWNER) ? "" : PQgetvalue(r, 0, C_OWNER));
    kf_artifact_sha256_hex(k.data, k.len, hex);
    kf_buf_release(&k);
    snprintf(out, cap, "%s-%s-%s-%s-%.12s", PQgetvalue(r, 0, C_KERNEL), PQgetvalue(r, 0, C_TARGET),
             PQgetvalue(r, 0, C_DTYPE), PQgetvalue(r, 0, C_BACKEND), hex);
    for (char *p = out; *p; p++)
        if (*p == '+')
            *p = '_';
}

/* The offer itself, inside the savepoint. */
static kf_code kf_lib_offer(PGconn *c, kf_artifact_store *store, const char *job_id, const char **outcome,
                            kf_err *err)
{
    const char *p[1] = { job_id };
    PGresult *r = kf_pg_exec(c, "library: read the job's best iteration", kf_lib_candidate, 1, p, NULL, NULL, err);
    PGresult *o = NULL;
    char id[256], sha[65];
    char *src = NULL;
    kf_code rc = KF_OK;

    if (!r)
        return err->code;
    if (PQntuples(r) != 1)
        goto out;
    if (!PQgetisnull(r, 0, C_SHA)) {
        snprintf(sha, sizeof(sha), "%s", PQgetvalue(r, 0, C_SHA));
    } else {
        rc = kf_lib_rebuild(c, job_id, PQgetvalue(r, 0, C_ATTEMPT), PQgetvalue(r, 0, C_SEQ), &src, err);
        if (rc != KF_OK)
            goto out;
        if (!src || !*src) {
            kf_log_warn("library: job %s succeeded but the source of its best iteration (attempt %s, seq %s) is not "
                        "known; no library entry offered",
                        job_id, PQgetvalue(r, 0, C_ATTEMPT), PQgetvalue(r, 0, C_SEQ));
            goto out;
        }
        rc = kf_artifact_put(store, c, src, strlen(src), sha, err);
        if (rc != KF_OK)
            goto out;
    }
    kf_lib_entry_id(r, id, sizeof(id));
    if (!kf_library_id_valid(id)) {
        kf_log_warn("library: job %s makes entry id '%s', which is not one of [A-Za-z0-9_.-]; not offered", job_id, id);
        goto out;
    }
    {
        const char *q[17] = {
            id,
            PQgetvalue(r, 0, C_KERNEL),
            PQgetvalue(r, 0, C_SHAPE),
            PQgetvalue(r, 0, C_DTYPE),
            PQgetvalue(r, 0, C_TARGET),
            PQgetvalue(r, 0, C_BACKEND),
            PQgetisnull(r, 0, C_OWNER) ? NULL : PQgetvalue(r, 0, C_OWNER),
            PQgetvalue(r, 0, C_ENTRY),
            PQgetvalue(r, 0, C_PARAMS),
            sha,
            PQgetvalue(r, 0, C_LAT),
            PQgetisnull(r, 0, C_FRAC) ? NULL : PQgetvalue(r, 0, C_FRAC),
            job_id,
            PQgetvalue(r, 0, C_ATTEMPT),
            PQgetvalue(r, 0, C_SEQ),
            PQgetvalue(r, 0, C_PROV),
            PQgetvalue(r, 0, C_FINISHED),
        };
        o = kf_pg_exec(c, "library: offer the job's kernel",
                       "SELECT kforge_library_offer($1, $2, $3, $4, $5, $6, $7::bigint, $8, $9::jsonb, $10, "
                       "$11::float8, $12::float8, $13::uuid, $14::int, $15::int, $16::jsonb, $17::timestamptz)",
                       17, q, NULL, NULL, err);
    }
    if (!o) {
        rc = err->code;
        goto out;
    }
    if (outcome) {
        const char *v = PQgetvalue(o, 0, 0);
        *outcome = strcmp(v, "created") == 0 ? "created"
                   : strcmp(v, "faster") == 0 ? "faster"
                   : strcmp(v, "provenance") == 0 ? "provenance"
                                                  : "kept";
    }
    kf_log_info("library: job %s offered to entry %s: %s (latency_ns=%s)", job_id, id, PQgetvalue(o, 0, 0),
                PQgetvalue(r, 0, C_LAT));
out:
    PQclear(o);
    PQclear(r);
    free(src);
    return rc;
}

kf_code kf_library_record(PGconn *c, kf_artifact_store *store, const char *job_id, const char **outcome,
                          kf_err *err)
{
    kf_err e = KF_ERR_INIT;
    kf_code rc;

    if (outcome)
        *outcome = "none";
    if (PQtransactionStatus(c) != PQTRANS_INTRANS)
        return kf_err_set(err, KF_INVALID,
                          "the library offer of job %s runs inside the success's transaction; this is a bug in the "
                          "caller",
                          job_id);
    if (!store)
        return kf_err_set(err, KF_INVALID, "the library offer of job %s needs the artifact store; this is a bug in "
                                           "the caller",
                          job_id);
    if ((rc = kf_pg_run(c, "library: savepoint", "SAVEPOINT kf_library", 0, NULL, err)) != KF_OK)
        return rc;
    rc = kf_lib_offer(c, store, job_id, outcome, &e);
    if (rc == KF_OK)
        return kf_pg_run(c, "library: release savepoint", "RELEASE SAVEPOINT kf_library", 0, NULL, err);
    if (rc == KF_UNAVAILABLE) {
        *err = e;
        return rc;
    }
    kf_log_warn("library: the offer of job %s failed and was rolled back; the job succeeds all the same: %s", job_id,
                e.msg);
    if (outcome)
        *outcome = "none";
    return kf_pg_run(c, "library: roll back the offer", "ROLLBACK TO SAVEPOINT kf_library", 0, NULL, err);
}
