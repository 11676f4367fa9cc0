/* api_batches — /v1/batches: many jobs at once, their roll-up, their
 * cancel and the report between two batches (docs/batches.md).
 *
 * (Not api_batch.c, which is POST /v1/jobs's group commit.)
 *
 * POST /v1/batches checks and expands the body with common/kf_batchspec
 * (the library form reads the templates' KFORGE blocks through
 * common/kf_libmeta), then writes the batch row and every job in ONE
 * transaction: the batch row, then the jobs through db/kf_db's set form of
 * the CREATE move (kf_db_sql_create_batch: each job's row, its 'created'
 * event and its outbox enqueue row, exactly as POST /v1/jobs writes them),
 * under a per-owner advisory lock so that two requests cannot both pass
 * the open-batches limit.  After the commit the jobs go to Redis the way
 * the group commit sends its batches (kf_queue_enqueue_many, 64 at a time)
 * and their delivered outbox rows are deleted; whatever does not reach
 * Redis then is queued by the scheduler's relay.
 *
 * Progress is not stored: the roll-up counts the batch's jobs
 * (jobs_batch_created_idx).  Cancel applies the lifecycle's CANCEL move
 * (CANCEL_ASK for running jobs) to each unfinished job, a chunk of rows
 * per transaction, so a cancel of 10,000 jobs never holds 10,000 row locks.
 *
 * Failure behaviour: bad bodies and queries are 422/400 naming the field;
 * limits are 422 with rule "limit"; PostgreSQL away is 503 (nothing
 * written); Redis away after the commit is a warning (the relay queues).
 * Ownership: everything allocated here is freed before the handler returns. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_batchspec.h"
#include "kf_config.h"
#include "kf_job.h"
#include "kf_libmeta.h"
#include "kf_log.h"

#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

/* Unfinished jobs cancelled per transaction. */
#define API_BATCH_CANCEL_CHUNK 500
#define API_BATCH_CANCEL_CHUNK_S "500"
/* The report's default threshold (docs/batches.md, "Verdicts"). */
#define API_REPORT_THRESHOLD 0.03

static double api_batches_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const char *api_batches_owner(api_req *r, char buf[24])
{
    if (r->who.role == API_ROLE_ADMIN)
        return NULL;
    snprintf(buf, 24, "%lld", (long long)r->who.token_id);
    return buf;
}

static bool api_batch_id_ok(api_req *r, const char *id)
{
    if (kf_uuid_valid(id))
        return true;
    api_reply_code(r, KF_NOT_FOUND, "not-found", "no such batch (batch ids are UUIDs)");
    return false;
}

/* ---- create ------------------------------------------------------------------------ */

/* The create move's statement in set form, with the batch's columns. */
static const api_stmt api_st_batch_jobs = {
    6, "kf_batch_create_jobs_v1", kf_db_sql_create_batch, KF_DB_CREATE_BATCH_PARAMS,
};

/* What the batch's jobs are, column by column (kf_db_create_col). */
typedef struct api_batch_cols {
    kf_pg_array col[KF_DB_COL__COUNT];
    char      (*ids)[37];
    char      **texts;        /* spec, budget, goal, labels, entry per job (5 each) */
    int         n;
} api_batch_cols;

static void api_batch_cols_release(api_batch_cols *c)
{
    for (int k = 0; k < KF_DB_COL__COUNT; k++)
        kf_pg_array_release(&c->col[k]);
    for (int i = 0; i < c->n * 5; i++)
        free(c->texts[i]);
    free(c->texts);
    free(c->ids);
    memset(c, 0, sizeof(*c));
}

/* Fill the columns; false when the kernel gave no random bytes for an id. */
static bool api_batch_cols_fill(api_req *r, const kf_batchspec *bs, const char *batch_id, api_batch_cols *c)
{
    memset(c, 0, sizeof(*c));
    c->n = bs->n;
    c->ids = kf_calloc((size_t)bs->n, sizeof(*c->ids));
    c->texts = kf_calloc((size_t)bs->n * 5, sizeof(*c->texts));
    for (int k = 0; k < KF_DB_COL__COUNT; k++)
        kf_pg_array_init(&c->col[k], kf_db_create_batch_types[k], k == KF_DB_COL_DELIVERED ? 0 : (size_t)bs->n);
    for (int i = 0; i < bs->n; i++) {
        const kf_job_request *jr = &bs->entries[i].jr;
        char created[40];
        char **t = &c->texts[(size_t)i * 5];
        if (!kf_uuid_v7(c->ids[i]))
            return false;
        t[0] = kf_json_print(jr->spec);
        t[1] = kf_json_print(jr->budget);
        t[2] = kf_json_print(jr->goal);
        t[3] = kf_json_print(jr->labels);
        t[4] = kf_json_print(bs->entries[i].coords);
        kf_pg_array_uuid(&c->col[KF_DB_COL_ID], c->ids[i]);
        kf_pg_array_text(&c->col[KF_DB_COL_KIND], kf_job_kind_name(jr->kind));
        kf_pg_array_text(&c->col[KF_DB_COL_TARGET], jr->target);
        kf_pg_array_text(&c->col[KF_DB_COL_BACKEND], jr->backend);
        kf_pg_array_int4(&c->col[KF_DB_COL_PRIORITY], jr->priority);
        kf_pg_array_jsonb(&c->col[KF_DB_COL_SPEC], t[0]);
        kf_pg_array_jsonb(&c->col[KF_DB_COL_BUDGET], t[1]);
        kf_pg_array_jsonb(&c->col[KF_DB_COL_GOAL], t[2]);
        kf_pg_array_jsonb(&c->col[KF_DB_COL_LABELS], t[3]);
        kf_pg_array_int4(&c->col[KF_DB_COL_MAX_ATTEMPTS], jr->max_attempts);
        kf_pg_array_int8(&c->col[KF_DB_COL_OWNER], r->who.token_id);
        kf_pg_array_null(&c->col[KF_DB_COL_IDEM_KEY]);   /* the key is the batch's, stored on its row */
        /* Each job later than the one before: the batch's order is its
         * jobs' created_at order, which the roll-up pages by. */
        kf_pg_array_timestamptz(&c->col[KF_DB_COL_CREATED_AT], api_job_clock(created));
        kf_pg_array_null(&c->col[KF_DB_COL_DOC]);
        kf_pg_array_uuid(&c->col[KF_DB_COL_BATCH], batch_id);
        kf_pg_array_jsonb(&c->col[KF_DB_COL_BATCH_ENTRY], t[4]);
    }
    for (int k = 0; k < KF_DB_COL__COUNT; k++)
        kf_pg_array_done(&c->col[k]);
    return true;
}

/* After the commit: the jobs on Redis, as the group commit's courier puts
 * them, 64 per script run; once all got there their outbox rows are
 * deleted.  Anything left is the relay's. */
static void api_batch_enqueue(api_req *r, const kf_batchspec *bs, const api_batch_cols *c, PGresult *outbox)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *q = api_qpool_get(api_req_qpool(r), &e);
    kf_pg_array done;
    int sent = 0;

    kf_pg_array_init(&done, KF_PG_INT8, (size_t)bs->n);
    for (int i = 0; q && i < bs->n; i += KF_QUEUE_ENQUEUE_MAX) {
        kf_queue_job qj[KF_QUEUE_ENQUEUE_MAX];
        char *payload[KF_QUEUE_ENQUEUE_MAX] = { 0 };
        int m = bs->n - i < KF_QUEUE_ENQUEUE_MAX ? bs->n - i : KF_QUEUE_ENQUEUE_MAX;
        bool ok = true;

        for (int k = 0; k < m && ok; k++) {
            const kf_job_request *jr = &bs->entries[i + k].jr;
            char *const *t = &c->texts[(size_t)(i + k) * 5];
            payload[k] = kf_job_payload_build(c->ids[i + k], kf_job_kind_name(jr->kind), jr->target, jr->backend,
                                              t[0], t[1], t[2], &e);
            ok = payload[k] != NULL;
            qj[k] = (kf_queue_job){ c->ids[i + k], kf_job_kind_name(jr->kind), jr->target, jr->backend,
                                    jr->priority, 0, jr->max_attempts, payload[k] };
        }
        if (ok && kf_queue_enqueue_many(q, qj, m, NULL, &e) == KF_OK) {
            sent += m;
        } else {
            ok = false;
        }
        for (int k = 0; k < m; k++)
            free(payload[k]);
        if (!ok)
            break;
    }
    api_qpool_put(api_req_qpool(r), q);
    if (sent < bs->n)
        kf_log_warn("batch jobs accepted but not all queued yet; the scheduler's outbox relay will queue them "
                    "sent=%d of=%d msg=\"%s\"", sent, bs->n, e.msg);
    /* Only when every job got there: the statement's rows (job, outbox
     * id) need not come back in the jobs' order, and a row left behind
     * costs the relay a second, idempotent enqueue. */
    if (sent == bs->n) {
        for (int i = 0; i < PQntuples(outbox); i++)
            kf_pg_array_int8(&done, strtoll(PQgetvalue(outbox, i, 1), NULL, 10));
    }
    if (sent == bs->n && kf_pg_array_done(&done)) {
        const char *p[1] = { done.buf.data };
        int len[1] = { (int)done.buf.len }, fmt[1] = { 1 };
        PGresult *d = PQexecParams(r->pg, "DELETE FROM outbox WHERE id = ANY($1::bigint[])", 1, NULL, p, len, fmt, 0);
        if (PQresultStatus(d) != PGRES_COMMAND_OK)
            kf_log_warn("delivered outbox rows stay for the relay msg=\"%s\"", PQresultErrorMessage(d));
        PQclear(d);
    }
    kf_pg_array_release(&done);
}

static char *api_batch_doc(const char *id, const kf_batchspec *bs, const char *hash, const char *created,
                           cJSON *warnings)
{
    cJSON *o = cJSON_CreateObject();
    char *s;

    cJSON_AddStringToObject(o, "id", id);
    if (bs->name)
        cJSON_AddStringToObject(o, "name", bs->name);
    else
        cJSON_AddNullToObject(o, "name");
    cJSON_AddStringToObject(o, "source", bs->library ? "library" : "matrix");
    cJSON_AddNumberToObject(o, "priority", bs->priority);
    cJSON_AddNumberToObject(o, "n_jobs", bs->n);
    cJSON_AddStringToObject(o, "matrix_hash", hash);
    cJSON_AddStringToObject(o, "state", "open");
    cJSON_AddStringToObject(o, "created_at", created);
    if (warnings)
        cJSON_AddItemToObject(o, "warnings", warnings);
    s = kf_json_print(o);
    cJSON_Delete(o);
    return s;
}

/* The capability warnings of the batch's distinct (target, backend)
 * pairs (api_caps_warnings), or NULL. */
static cJSON *api_batch_warnings(api_req *r, const kf_batchspec *bs)
{
    const char *t[KF_QUEUE_MAX_PAIRS], *b[KF_QUEUE_MAX_PAIRS];
    int n = 0;

    for (int i = 0; i < bs->n && n < KF_QUEUE_MAX_PAIRS; i++) {
        const kf_job_request *jr = &bs->entries[i].jr;
        bool dup = false;
        for (int k = 0; k < n && !dup; k++)
            dup = strcmp(t[k], jr->target) == 0 && strcmp(b[k], jr->backend) == 0;
        if (!dup) {
            t[n] = jr->target;
            b[n++] = jr->backend;
        }
    }
    return n ? api_caps_warnings(r, t, b, n) : NULL;
}

/* Each generate job's warm start from the kernel library, as POST
 * /v1/jobs gives one (docs/library.md), in one query for the batch; a
 * template that sets spec.warm_start itself is refused.  False when
 * answered. */
static bool api_batch_warm(api_req *r, const kf_batchspec *bs)
{
    kf_job_request **reqs;
    bool ok;

    for (int i = 0; i < bs->n; i++) {
        if (cJSON_GetObjectItemCaseSensitive(bs->entries[i].jr.spec, "warm_start")) {
            kf_fields fe;
            kf_fields_init(&fe);
            kf_fields_add(&fe, "template.warm_start", "unknown",
                          "is set by kforge from the kernel library (docs/library.md); leave it out");
            api_reply_fields(r, 422, "validation", &fe);
            return false;
        }
    }
    reqs = kf_calloc((size_t)bs->n, sizeof(kf_job_request *));
    for (int i = 0; i < bs->n; i++)
        reqs[i] = &bs->entries[i].jr;
    ok = api_library_warm_all(r, reqs, bs->n);
    free(reqs);
    if (ok)
        api_req_pg_put(r);
    return ok;
}

void api_h_batch_create(api_req *r)
{
    const api_server_config *cfg = api_req_config(r);
    kf_batchspec_limits lim = { cfg->max_batch_jobs > 0 ? cfg->max_batch_jobs : 10000, cfg->default_max_attempts,
                                NULL };
    kf_batchspec bs;
    kf_fields fe;
    cJSON *index = NULL;
    char batch_id[37], hash[65], owner[24], limit[24], created[40];
    char *keys = NULL, *tmpl = NULL, *matrix = NULL, *doc = NULL;
    api_batch_cols cols = { 0 };
    PGresult *res = NULL;
    int fail = 0;
    long open = 0, max_open = cfg->max_open_batches > 0 ? cfg->max_open_batches : 20;
    double t0 = api_batches_ms(), t_parsed = 0, t_written = 0;

    kf_fields_init(&fe);
    if (cJSON_GetObjectItemCaseSensitive(r->json, "library")) {
        kf_err e = KF_ERR_INIT;
        if (kf_libmeta_index(NULL, &index, &e) != KF_OK)
            kf_log_warn("kernel library unreadable msg=\"%s\"", e.msg);
        lim.library = index;
    }
    if (!kf_batchspec_parse(r->json, &lim, &bs, &fe)) {
        cJSON_Delete(index);
        api_reply_fields(r, 422, "validation", &fe);
        return;
    }
    cJSON_Delete(index);
    if (!api_batch_warm(r, &bs))
        goto out;
    if (!kf_uuid_v7(batch_id) || !api_batch_cols_fill(r, &bs, batch_id, &cols)) {
        api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                       "the kernel gave no random bytes for an id; retry after the number of seconds in Retry-After");
        goto out;
    }
    t_parsed = api_batches_ms();
    keys = kf_batchspec_keys(&bs);
    kf_artifact_sha256_hex(keys, strlen(keys), hash);
    tmpl = kf_json_print(bs.tmpl);
    matrix = kf_json_print(bs.matrix);
    snprintf(owner, sizeof(owner), "%lld", (long long)r->who.token_id);
    snprintf(limit, sizeof(limit), "%ld", max_open);

    if (!api_req_begin(r))
        goto out;
    {
        /* One creator per owner at a time, so the open count holds until commit. */
        const char *p[1] = { owner };
        res = api_req_sql(r,
                          "SELECT pg_advisory_xact_lock(1801873242, ($1::bigint % 2147483647)::int), (SELECT "
                          "count(*) FROM batches b WHERE b.owner_token_id = $1::bigint AND EXISTS (SELECT 1 FROM jobs "
                          "j WHERE j.batch_id = b.id AND j.state IN ('queued', 'running', 'retrying')))",
                          1, p);
        if (!res)
            goto out;
        open = strtol(PQgetvalue(res, 0, 1), NULL, 10);
        PQclear(res);
        res = NULL;
    }
    if (open >= max_open) {
        kf_fields_add(&fe, "batches", "limit",
                      "you have %ld open batches, the most one token may have (KFORGE_MAX_OPEN_BATCHES = %s); wait "
                      "for one to finish or cancel one (POST /v1/batches/{id}/cancel)", open, limit);
        api_reply_fields(r, 422, "validation", &fe);
        goto out;
    }
    {
        char n[16], prio[8];
        const char *p[10] = { batch_id, owner, bs.name, bs.library ? "library" : "matrix", tmpl, matrix, hash,
                              prio, n, r->idem_active ? r->idem_key : NULL };
        snprintf(n, sizeof(n), "%d", bs.n);
        snprintf(prio, sizeof(prio), "%d", bs.priority);
        res = api_req_sql(r,
                          "INSERT INTO batches (id, owner_token_id, name, source, template, matrix, matrix_hash, "
                          "priority, n_jobs, idempotency_key) VALUES ($1::uuid, $2::bigint, $3, $4, $5::jsonb, "
                          "$6::jsonb, $7, $8::int, $9::int, $10) RETURNING to_json(created_at)#>>'{}'",
                          10, p);
        if (!res)
            goto out;
        snprintf(created, sizeof(created), "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
        res = NULL;
    }
    {
        const char *p[KF_DB_COL__COUNT];
        int len[KF_DB_COL__COUNT], fmt[KF_DB_COL__COUNT];
        for (int k = 0; k < KF_DB_COL__COUNT; k++) {
            p[k] = cols.col[k].buf.data;
            len[k] = (int)cols.col[k].buf.len;
            fmt[k] = 1;
        }
        res = api_req_stmt_bin(r, &api_st_batch_jobs, p, len, fmt, &fail);
        if (!res) {
            if (fail == 503)
                api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                               "the database is unavailable; retry after the number of seconds in Retry-After");
            else
                api_reply_code(r, KF_INTERNAL, "internal",
                               "the batch could not be stored; the request id is in the server log");
            goto out;
        }
    }
    if (!api_req_commit(r))
        goto out;
    t_written = api_batches_ms();
    doc = api_batch_doc(batch_id, &bs, hash, created, api_batch_warnings(r, &bs));
    api_reply_json_text(r, 202, doc);
    snprintf(r->location, sizeof(r->location), "/v1/batches/%s", batch_id);
    api_batch_enqueue(r, &bs, &cols, res);
    kf_log_info("batch created batch=%s jobs=%d source=%s priority=%d by=%lld parse_ms=%.0f write_ms=%.0f "
                "queue_ms=%.0f req=%s", batch_id, bs.n, bs.library ? "library" : "matrix", bs.priority,
                (long long)r->who.token_id, t_parsed - t0, t_written - t_parsed, api_batches_ms() - t_written,
                r->request_id);
out:
    PQclear(res);
    api_req_rollback(r);
    api_batch_cols_release(&cols);
    kf_batchspec_release(&bs);
    free(keys);
    free(tmpl);
    free(matrix);
    free(doc);
}

/* ---- roll-up ----------------------------------------------------------------------------- */

/* The batch's summary (one row, one column, JSON text) for batch b. */
#define API_BATCH_SUMMARY                                                                                          \
    "(SELECT json_build_object('id', b.id, 'name', b.name, 'source', b.source, 'priority', b.priority, "          \
    "'n_jobs', b.n_jobs, 'matrix_hash', b.matrix_hash, 'idempotency_key', b.idempotency_key, 'created_at', "       \
    "b.created_at, 'state', CASE WHEN c.live > 0 THEN 'open' ELSE 'finished' END, 'counts', json_build_object("    \
    "'queued', c.queued, 'running', c.running, 'retrying', c.retrying, 'succeeded', c.succeeded, 'failed', "      \
    "c.failed, 'cancelled', c.cancelled, 'dead', c.dead), 'finished', c.done, 'progress', "                         \
    "round(c.done::numeric / greatest(b.n_jobs, 1), 4), 'started_at', c.started_at, 'finished_at', "               \
    "CASE WHEN c.live = 0 THEN c.finished_at END) FROM (SELECT "                                                    \
    "count(*) FILTER (WHERE j.state = 'queued') AS queued, count(*) FILTER (WHERE j.state = 'running') AS running, " \
    "count(*) FILTER (WHERE j.state = 'retrying') AS retrying, count(*) FILTER (WHERE j.state = 'succeeded') AS "   \
    "succeeded, count(*) FILTER (WHERE j.state = 'failed') AS failed, count(*) FILTER (WHERE j.state = "          \
    "'cancelled') AS cancelled, count(*) FILTER (WHERE j.state = 'dead') AS dead, count(*) FILTER (WHERE j.state " \
    "IN ('queued', 'running', 'retrying')) AS live, count(*) FILTER (WHERE j.state IN ('succeeded', 'failed', "    \
    "'cancelled', 'dead')) AS done, min(j.started_at) AS started_at, max(j.finished_at) AS finished_at FROM jobs j " \
    "WHERE j.batch_id = b.id) c)"

/* A job's best iteration, as GET /v1/jobs's light shape has it (bi), and
 * its fraction of the bound. */
#define API_BATCH_BEST API_JOB_BEST_LATERAL("bi")
#define API_BATCH_FOB "kforge_fraction_of_bound(bi.profile, bi.latency_ns)"

void api_h_batch_get(api_req *r)
{
    static const char *const allowed[] = { "limit", "cursor", NULL };
    const char *lim_s = api_req_query(r, "limit"), *cursor = api_req_query(r, "cursor");
    char ob[24], micros[24] = "", cur_id[37] = "", lim_buf[16];
    unsigned long long lim = 100;
    const char *params[5];
    kf_fields fe;
    PGresult *res = NULL;
    kf_buf out = KF_BUF_INIT;

    if (!api_req_query_known(r, allowed) || !api_batch_id_ok(r, r->param))
        return;
    kf_fields_init(&fe);
    api_page_query(lim_s, cursor, 1000, &lim, micros, cur_id, &fe);
    if (fe.n) {
        api_reply_fields(r, 400, "bad-query", &fe);
        return;
    }
    params[0] = r->param;
    params[1] = api_batches_owner(r, ob);
    res = api_req_sql(r, "SELECT " API_BATCH_SUMMARY "::text FROM batches b WHERE b.id = $1::uuid AND ($2::bigint IS "
                         "NULL OR b.owner_token_id = $2::bigint)", 2, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no batch with id %s", r->param);
        return;
    }
    /* The summary, less its closing brace, then the page of entries. */
    kf_buf_adds(&out, PQgetvalue(res, 0, 0));
    PQclear(res);
    out.len--;
    out.data[out.len] = '\0';
    snprintf(lim_buf, sizeof(lim_buf), "%llu", lim + 1);
    params[1] = cursor ? micros : NULL;
    params[2] = cursor ? cur_id : NULL;
    params[3] = lim_buf;
    res = api_req_sql(r,
                      "SELECT json_build_object('job_id', j.id, 'seq', j.batch_entry->'seq', 'key', "
                      "j.batch_entry->'key', 'op', j.batch_entry->'op', 'shape', j.batch_entry->'shape', 'dtype', "
                      "j.batch_entry->'dtype', 'target', j.batch_entry->'target', 'state', j.state, 'attempt', "
                      "j.attempt, 'last_error', left(j.last_error, 200), 'best', CASE WHEN bi.seq IS NOT NULL THEN "
                      "json_build_object('attempt', bi.attempt, 'seq', bi.seq, 'latency_ns', bi.latency_ns, "
                      "'fraction_of_bound', " API_BATCH_FOB ") END)::text, "
                      "(extract(epoch FROM j.created_at) * 1000000)::bigint, j.id FROM jobs j" API_BATCH_BEST
                      " WHERE j.batch_id = $1::uuid AND ($2::bigint IS NULL OR "
                      "(j.created_at, j.id) > ('epoch'::timestamptz + $2::bigint * interval '1 microsecond', "
                      "$3::uuid)) ORDER BY j.created_at, j.id LIMIT $4::int",
                      4, params);
    if (!res)
        goto out;
    kf_buf_adds(&out, ",\"entries\":");
    api_page_rows(&out, res, (int)lim, API_CURSOR_TIME_ID);
    kf_buf_addc(&out, '}');
    api_reply_json_text(r, 200, out.data);
out:
    PQclear(res);
    kf_buf_release(&out);
}

void api_h_batch_list(api_req *r)
{
    static const char *const allowed[] = { "limit", "cursor", NULL };
    const char *lim_s = api_req_query(r, "limit"), *cursor = api_req_query(r, "cursor");
    char ob[24], micros[24] = "", cur_id[37] = "", lim_buf[16];
    unsigned long long lim = 50;
    const char *params[4];
    kf_fields fe;
    PGresult *res;
    kf_buf out = KF_BUF_INIT;

    if (!api_req_query_known(r, allowed))
        return;
    kf_fields_init(&fe);
    api_page_query(lim_s, cursor, 200, &lim, micros, cur_id, &fe);
    if (fe.n) {
        api_reply_fields(r, 400, "bad-query", &fe);
        return;
    }
    snprintf(lim_buf, sizeof(lim_buf), "%llu", lim + 1);
    params[0] = api_batches_owner(r, ob);
    params[1] = cursor ? micros : NULL;
    params[2] = cursor ? cur_id : NULL;
    params[3] = lim_buf;
    res = api_req_sql(r,
                      "SELECT " API_BATCH_SUMMARY "::text, (extract(epoch FROM b.created_at) * 1000000)::bigint, b.id "
                      "FROM (SELECT * FROM batches b WHERE ($1::bigint IS NULL OR b.owner_token_id = $1::bigint) AND "
                      "($2::bigint IS NULL OR (b.created_at, b.id) < ('epoch'::timestamptz + $2::bigint * interval "
                      "'1 microsecond', $3::uuid)) ORDER BY b.created_at DESC, b.id DESC LIMIT $4::int) b "
                      "ORDER BY b.created_at DESC, b.id DESC",
                      4, params);
    if (!res)
        return;
    kf_buf_adds(&out, "{\"items\":");
    api_page_rows(&out, res, (int)lim, API_CURSOR_TIME_ID);
    kf_buf_addc(&out, '}');
    api_reply_json_text(r, 200, out.data);
    PQclear(res);
    kf_buf_release(&out);
}

/* ---- cancel --------------------------------------------------------------------------- */

/* Cancel one chunk of the batch's unfinished jobs in one transaction:
 * CANCEL for queued and retrying ones, CANCEL_ASK for running ones whose
 * cancel was not asked yet.  *n the rows moved (0: none left); each moved
 * job's id and its outbox cancel row's id go to ids ("<job> <outbox>\n")
 * for Redis.  False after answering. */
static bool api_batch_cancel_chunk(api_req *r, const char *detail, int *n_cancel, int *n_ask, kf_buf *ids, int *n)
{
    const char *params[1] = { r->param };
    PGresult *res;

    *n = 0;
    if (!api_req_begin(r))
        return false;
    res = api_req_sql(r,
                      "SELECT id::text, state FROM jobs WHERE batch_id = $1::uuid AND (state IN ('queued', "
                      "'retrying') OR (state = 'running' AND NOT cancel_requested)) ORDER BY created_at, id LIMIT "
                      API_BATCH_CANCEL_CHUNK_S " FOR UPDATE",
                      1, params);
    if (!res)
        return false;
    for (int i = 0; i < PQntuples(res); i++) {
        bool running = strcmp(PQgetvalue(res, i, 1), "running") == 0;
        kf_db_move mv = { .move = running ? KF_MOVE_CANCEL_ASK : KF_MOVE_CANCEL, .job_id = PQgetvalue(res, i, 0),
                          .detail = detail };
        kf_db_moved moved;
        if (!api_move(r, &mv, &moved)) {
            PQclear(res);
            return false;
        }
        if (running)
            (*n_ask)++;
        else
            (*n_cancel)++;
        kf_buf_addf(ids, "%s %lld\n", PQgetvalue(res, i, 0), moved.outbox_id);
        (*n)++;
    }
    PQclear(res);
    return api_req_commit(r);
}

/* Redis after the commits, as POST /v1/jobs/{id}/cancel does for one job:
 * a queued job leaves its waiting set, a running one's holder is told;
 * the outbox cancel rows of those Redis took are deleted.  What fails is
 * left to the relay, which sends the same cancels from the outbox. */
static void api_batch_cancel_redis(api_req *r, const kf_buf *ids)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *q = api_qpool_get(api_req_qpool(r), &e);
    const char *p = ids->data;
    kf_pg_array done;
    int failed = 0;

    kf_pg_array_init(&done, KF_PG_INT8, 0);
    while (q && p && *p) {
        const char *nl = strchr(p, '\n');
        char id[37];
        long long outbox = 0;
        kf_queue_cancel_result cr;
        if (!nl || nl - p < 38 || p[36] != ' ')
            break;
        memcpy(id, p, 36);
        id[36] = '\0';
        outbox = strtoll(p + 37, NULL, 10);
        if (kf_queue_cancel(q, id, &cr, &e) != KF_OK)
            failed++;
        else if (outbox > 0)
            kf_pg_array_int8(&done, outbox);
        p = nl + 1;
    }
    api_qpool_put(api_req_qpool(r), q);
    if (!q || failed)
        kf_log_warn("batch cancel recorded but not all sent to the queue yet; the relay will batch=%s msg=\"%s\"",
                    r->param, e.msg);
    if (done.n > 0 && kf_pg_array_done(&done)) {
        const char *pp[1] = { done.buf.data };
        int len[1] = { (int)done.buf.len }, fmt[1] = { 1 };
        PGresult *d = PQexecParams(r->pg, "DELETE FROM outbox WHERE id = ANY($1::bigint[])", 1, NULL, pp, len, fmt, 0);
        if (PQresultStatus(d) != PGRES_COMMAND_OK)
            kf_log_warn("sent outbox cancel rows stay for the relay msg=\"%s\"", PQresultErrorMessage(d));
        PQclear(d);
    }
    kf_pg_array_release(&done);
}

void api_h_batch_cancel(api_req *r)
{
    static const char *const allowed[] = { "reason", NULL };
    const char *reason = NULL, *params[2];
    char ob[24];
    kf_fields fe;
    cJSON *d;
    char *detail;
    kf_buf ids = KF_BUF_INIT, out = KF_BUF_INIT;
    int n_cancel = 0, n_ask = 0, n = 0;
    PGresult *res;

    if (!api_batch_id_ok(r, r->param))
        return;
    kf_fields_init(&fe);
    if (r->json) {
        kf_fields_refuse_unknown(&fe, r->json, "", allowed);
        kf_fields_str(&fe, r->json, "", "reason", false, 0, 512, &reason);
        if (fe.n) {
            api_reply_fields(r, 422, "validation", &fe);
            return;
        }
    }
    params[0] = r->param;
    params[1] = api_batches_owner(r, ob);
    res = api_req_sql(r, "SELECT 1 FROM batches WHERE id = $1::uuid AND ($2::bigint IS NULL OR owner_token_id = "
                         "$2::bigint)", 2, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no batch with id %s", r->param);
        return;
    }
    PQclear(res);
    d = cJSON_CreateObject();
    if (reason)
        cJSON_AddStringToObject(d, "reason", reason);
    else
        cJSON_AddNullToObject(d, "reason");
    cJSON_AddNumberToObject(d, "by_token", (double)r->who.token_id);
    cJSON_AddStringToObject(d, "batch", r->param);
    detail = kf_json_print(d);
    cJSON_Delete(d);
    do {
        if (!api_batch_cancel_chunk(r, detail, &n_cancel, &n_ask, &ids, &n))
            goto out;
    } while (n == API_BATCH_CANCEL_CHUNK);
    res = api_req_sql(r, "SELECT " API_BATCH_SUMMARY "::text FROM batches b WHERE b.id = $1::uuid", 1, params);
    if (!res)
        goto out;
    kf_buf_adds(&out, PQgetvalue(res, 0, 0));
    PQclear(res);
    out.len--;
    kf_buf_addf(&out, ",\"cancelled\":%d,\"cancel_requested\":%d}", n_cancel, n_ask);
    api_reply_json_text(r, 200, out.data);
    kf_log_info("batch cancelled batch=%s cancelled=%d asked=%d by=%lld req=%s", r->param, n_cancel, n_ask,
                (long long)r->who.token_id, r->request_id);
    api_batch_cancel_redis(r, &ids);
out:
    free(detail);
    kf_buf_release(&ids);
    kf_buf_release(&out);
}

/* ---- report ---------------------------------------------------------------------------- */

const char *api_report_verdict(bool has_new, const char *new_state, double new_ns, bool has_old, double old_ns,
                               double threshold, double *ratio)
{
    *ratio = NAN;
    if (!has_new)
        return "missing";
    if (!kf_job_state_terminal(new_state))
        return "pending";
    if (strcmp(new_state, "succeeded") != 0 || !(new_ns > 0))
        return "failed";
    if (!has_old || !(old_ns > 0))
        return "new";
    *ratio = new_ns / old_ns;
    if (*ratio < 1.0 - threshold)
        return "improved";
    if (*ratio > 1.0 + threshold)
        return "regressed";
    return "unchanged";
}

/* The provenance fields that differ between two jobs ("worker" names the
 * machine, not what produced the number, and is left out), as
 * {"field": {"old": v, "new": v}}; an empty object when none differs. */
static cJSON *api_report_prov_diff(const char *old_text, const char *new_text)
{
    cJSON *o = cJSON_Parse(old_text ? old_text : "{}"), *n = cJSON_Parse(new_text ? new_text : "{}");
    cJSON *diff = cJSON_CreateObject();
    const cJSON *v;

    for (int pass = 0; pass < 2; pass++) {
        const cJSON *from = pass == 0 ? n : o, *other = pass == 0 ? o : n;
        if (!cJSON_IsObject(from))
            continue;
        cJSON_ArrayForEach(v, from)
        {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(other, v->string);
            if (!v->string || strcmp(v->string, "worker") == 0 || cJSON_GetObjectItemCaseSensitive(diff, v->string))
                continue;
            if (!w || !cJSON_Compare(v, w, true)) {
                cJSON *d = cJSON_CreateObject();
                const cJSON *ov = pass == 0 ? w : v, *nv = pass == 0 ? v : w;
                cJSON_AddItemToObject(d, "old", ov ? cJSON_Duplicate(ov, 1) : cJSON_CreateNull());
                cJSON_AddItemToObject(d, "new", nv ? cJSON_Duplicate(nv, 1) : cJSON_CreateNull());
                cJSON_AddItemToObject(diff, v->string, d);
            }
        }
    }
    cJSON_Delete(o);
    cJSON_Delete(n);
    return diff;
}

static cJSON *api_report_side(const PGresult *res, int row, int col)
{
    cJSON *s;

    if (PQgetisnull(res, row, col))
        return cJSON_CreateNull();
    s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "job_id", PQgetvalue(res, row, col));
    cJSON_AddStringToObject(s, "state", PQgetvalue(res, row, col + 1));
    if (PQgetisnull(res, row, col + 2))
        cJSON_AddNullToObject(s, "latency_ns");
    else
        cJSON_AddNumberToObject(s, "latency_ns", strtod(PQgetvalue(res, row, col + 2), NULL));
    if (PQgetisnull(res, row, col + 3))
        cJSON_AddNullToObject(s, "fraction_of_bound");
    else
        cJSON_AddNumberToObject(s, "fraction_of_bound", strtod(PQgetvalue(res, row, col + 3), NULL));
    return s;
}

/* A CSV field: quoted when it holds a comma, a quote or a line break. */
static void api_csv_field(kf_buf *b, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        kf_buf_adds(b, s);
        return;
    }
    kf_buf_addc(b, '"');
    for (; *s; s++) {
        if (*s == '"')
            kf_buf_addc(b, '"');
        kf_buf_addc(b, *s);
    }
    kf_buf_addc(b, '"');
}

/* A Markdown table cell: | and line breaks would end it. */
static void api_md_cell(kf_buf *b, const char *s)
{
    kf_buf_adds(b, " ");
    for (; *s; s++) {
        if (*s == '|')
            kf_buf_adds(b, "\\|");
        else if (*s == '\n' || *s == '\r')
            kf_buf_addc(b, ' ');
        else
            kf_buf_addc(b, *s);
    }
    kf_buf_adds(b, " |");
}

static const char *api_report_str(const cJSON *o, const char *k)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    return s ? s : "";
}

/* "12345.6" or "" for a side's latency. */
static void api_report_ns(const cJSON *side, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(side, "latency_ns");
    if (cJSON_IsNumber(v))
        snprintf(out, cap, "%.1f", v->valuedouble);
    else
        snprintf(out, cap, "%s", "");
}

/* The changed provenance fields' names, comma-separated. */
static void api_report_prov_names(const cJSON *diff, kf_buf *b)
{
    const cJSON *v;
    int i = 0;
    cJSON_ArrayForEach(v, diff)
    {
        if (i++)
            kf_buf_adds(b, ";");
        kf_buf_adds(b, v->string);
    }
}

static void api_report_text(const cJSON *rep, bool csv, kf_buf *b)
{
    const cJSON *e, *entries = cJSON_GetObjectItemCaseSensitive(rep, "entries");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(rep, "summary"), *v;

    if (csv) {
        kf_buf_adds(b, "op,shape,dtype,target,old_latency_ns,new_latency_ns,ratio,verdict,new_job,old_job,"
                       "provenance_changed\r\n");
    } else {
        const cJSON *base = cJSON_GetObjectItemCaseSensitive(rep, "baseline");
        kf_buf_addf(b, "# Batch report %s\n\nBaseline: %s; threshold: %g (a ratio new/old below %g is improved, above "
                       "%g regressed).\n\n",
                    api_report_str(rep, "batch"), cJSON_IsString(base) ? base->valuestring : "none",
                    cJSON_GetObjectItemCaseSensitive(rep, "threshold")->valuedouble,
                    1.0 - cJSON_GetObjectItemCaseSensitive(rep, "threshold")->valuedouble,
                    1.0 + cJSON_GetObjectItemCaseSensitive(rep, "threshold")->valuedouble);
        kf_buf_adds(b, "| verdict | entries |\n|---|---:|\n");
        cJSON_ArrayForEach(v, sum)
            kf_buf_addf(b, "| %s | %d |\n", v->string, v->valueint);
        kf_buf_adds(b, "\n| op | shape | dtype | target | old ns | new ns | ratio | verdict | provenance changed |\n"
                       "|---|---|---|---|---:|---:|---:|---|---|\n");
    }
    cJSON_ArrayForEach(e, entries)
    {
        const cJSON *nw = cJSON_GetObjectItemCaseSensitive(e, "new"), *old = cJSON_GetObjectItemCaseSensitive(e, "old");
        const cJSON *ratio = cJSON_GetObjectItemCaseSensitive(e, "ratio");
        char ons[40], nns[40], rs[32] = "";
        kf_buf prov = KF_BUF_INIT;
        const char *cells[4] = { api_report_str(e, "op"), api_report_str(e, "shape"), api_report_str(e, "dtype"),
                                 api_report_str(e, "target") };
        api_report_ns(old, ons, sizeof(ons));
        api_report_ns(nw, nns, sizeof(nns));
        if (cJSON_IsNumber(ratio))
            snprintf(rs, sizeof(rs), "%.4f", ratio->valuedouble);
        api_report_prov_names(cJSON_GetObjectItemCaseSensitive(e, "provenance_diff"), &prov);
        if (csv) {
            for (int i = 0; i < 4; i++) {
                api_csv_field(b, cells[i]);
                kf_buf_addc(b, ',');
            }
            kf_buf_addf(b, "%s,%s,%s,%s,%s,%s,", ons, nns, rs, api_report_str(e, "verdict"),
                        api_report_str(nw, "job_id"), api_report_str(old, "job_id"));
            api_csv_field(b, prov.len ? prov.data : "");
            kf_buf_adds(b, "\r\n");
        } else {
            kf_buf_adds(b, "|");
            for (int i = 0; i < 4; i++)
                api_md_cell(b, cells[i]);
            api_md_cell(b, ons);
            api_md_cell(b, nns);
            api_md_cell(b, rs);
            api_md_cell(b, api_report_str(e, "verdict"));
            api_md_cell(b, prov.len ? prov.data : "");
            kf_buf_addc(b, '\n');
        }
        kf_buf_release(&prov);
    }
}

/* The side of one batch in the report's join. */
#define API_REPORT_SIDE(p)                                                                                        \
    "SELECT j.batch_entry AS e, j.batch_entry->>'key' AS key, j.id, j.state, j.provenance, bi.latency_ns, "          \
    API_BATCH_FOB " AS fob FROM jobs j" API_BATCH_BEST " WHERE j.batch_id = " p "::uuid"

void api_h_batch_report(api_req *r)
{
    static const char *const allowed[] = { "baseline", "threshold", "format", NULL };
    static const char *const verdicts[] = { "improved", "regressed", "unchanged", "failed", "new", "missing",
                                            "pending", NULL };
    const char *base_q = api_req_query(r, "baseline"), *thr_q = api_req_query(r, "threshold");
    const char *fmt = api_req_query(r, "format");
    const char *params[3];
    char ob[24], baseline[37] = "";
    double threshold = API_REPORT_THRESHOLD;
    kf_fields fe;
    PGresult *res = NULL;
    cJSON *rep = NULL, *entries, *sum;
    int counts[7] = { 0 };

    if (!api_req_query_known(r, allowed) || !api_batch_id_ok(r, r->param))
        return;
    kf_fields_init(&fe);
    if (base_q && !kf_uuid_valid(base_q))
        kf_fields_add(&fe, "baseline", "format", "a batch id is a UUID");
    if (thr_q) {
        char *end = NULL;
        threshold = strtod(thr_q, &end);
        if (!*thr_q || !end || *end || !(threshold >= 0 && threshold < 1))
            kf_fields_add(&fe, "threshold", "range", "must be a number from 0 up to (not including) 1, e.g. 0.03");
    }
    if (fmt && strcmp(fmt, "json") != 0 && strcmp(fmt, "md") != 0 && strcmp(fmt, "csv") != 0)
        kf_fields_add(&fe, "format", "enum", "must be json (the default), md or csv");
    if (fe.n) {
        api_reply_fields(r, 400, "bad-query", &fe);
        return;
    }
    params[0] = r->param;
    params[1] = api_batches_owner(r, ob);
    params[2] = base_q;
    /* The batch, and its baseline: the one asked for (which the caller
     * must be able to see), else the newest earlier finished batch of the
     * same owner over the same matrix. */
    res = api_req_sql(r,
                      "SELECT b.id, CASE WHEN $3::uuid IS NOT NULL THEN (SELECT o.id::text FROM batches o WHERE o.id "
                      "= $3::uuid AND ($2::bigint IS NULL OR o.owner_token_id = $2::bigint)) ELSE (SELECT o.id::text "
                      "FROM batches o WHERE o.owner_token_id = b.owner_token_id AND o.matrix_hash = b.matrix_hash AND "
                      "(o.created_at, o.id) < (b.created_at, b.id) AND NOT EXISTS (SELECT 1 FROM jobs j WHERE "
                      "j.batch_id = o.id AND j.state IN ('queued', 'running', 'retrying')) ORDER BY o.created_at "
                      "DESC, o.id DESC LIMIT 1) END FROM batches b WHERE b.id = $1::uuid AND ($2::bigint IS NULL OR "
                      "b.owner_token_id = $2::bigint)",
                      3, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no batch with id %s", r->param);
        return;
    }
    if (base_q && PQgetisnull(res, 0, 1)) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no baseline batch with id %s", base_q);
        return;
    }
    if (!PQgetisnull(res, 0, 1))
        snprintf(baseline, sizeof(baseline), "%s", PQgetvalue(res, 0, 1));
    PQclear(res);
    params[1] = baseline[0] ? baseline : NULL;
    res = api_req_sql(r,
                      "WITH n AS (" API_REPORT_SIDE("$1") "), o AS (" API_REPORT_SIDE("$2") ") "
                      "SELECT coalesce(n.e, o.e)::text, n.id, n.state, n.latency_ns, n.fob, o.id, o.state, "
                      "o.latency_ns, o.fob, n.provenance::text, o.provenance::text FROM n FULL JOIN o ON o.key = n.key "
                      "ORDER BY (n.e->>'seq')::int NULLS LAST, (o.e->>'seq')::int",
                      2, params);
    if (!res)
        return;
    rep = cJSON_CreateObject();
    cJSON_AddStringToObject(rep, "batch", r->param);
    if (baseline[0])
        cJSON_AddStringToObject(rep, "baseline", baseline);
    else
        cJSON_AddNullToObject(rep, "baseline");
    cJSON_AddNumberToObject(rep, "threshold", threshold);
    sum = cJSON_AddObjectToObject(rep, "summary");
    entries = cJSON_AddArrayToObject(rep, "entries");
    for (int i = 0; i < PQntuples(res); i++) {
        cJSON *coords = cJSON_Parse(PQgetvalue(res, i, 0)), *e = cJSON_CreateObject();
        bool has_new = !PQgetisnull(res, i, 1), has_old = !PQgetisnull(res, i, 5);
        double ratio;
        const char *v = api_report_verdict(has_new, has_new ? PQgetvalue(res, i, 2) : "",
                                           PQgetisnull(res, i, 3) ? 0 : strtod(PQgetvalue(res, i, 3), NULL), has_old,
                                           PQgetisnull(res, i, 7) ? 0 : strtod(PQgetvalue(res, i, 7), NULL),
                                           threshold, &ratio);
        static const char *const keys[] = { "key", "op", "shape", "dtype", "target", NULL };
        for (int k = 0; keys[k]; k++)
            cJSON_AddStringToObject(e, keys[k], api_report_str(coords, keys[k]));
        cJSON_Delete(coords);
        cJSON_AddStringToObject(e, "verdict", v);
        cJSON_AddItemToObject(e, "new", api_report_side(res, i, 1));
        cJSON_AddItemToObject(e, "old", api_report_side(res, i, 5));
        if (isnan(ratio))
            cJSON_AddNullToObject(e, "ratio");
        else
            cJSON_AddNumberToObject(e, "ratio", round(ratio * 1e6) / 1e6);
        if (has_new && has_old)
            cJSON_AddItemToObject(e, "provenance_diff",
                                  api_report_prov_diff(PQgetvalue(res, i, 10), PQgetvalue(res, i, 9)));
        else
            cJSON_AddItemToObject(e, "provenance_diff", cJSON_CreateObject());
        for (int k = 0; verdicts[k]; k++)
            if (strcmp(verdicts[k], v) == 0)
                counts[k]++;
        cJSON_AddItemToArray(entries, e);
    }
    PQclear(res);
    for (int k = 0; verdicts[k]; k++)
        cJSON_AddNumberToObject(sum, verdicts[k], counts[k]);
    if (!fmt || strcmp(fmt, "json") == 0) {
        api_reply_json(r, 200, rep);
    } else {
        bool csv = strcmp(fmt, "csv") == 0;
        api_reply_json_text(r, 200, "");
        api_report_text(rep, csv, &r->out);
        r->content_type = csv ? "text/csv; charset=utf-8" : "text/markdown; charset=utf-8";
    }
    cJSON_Delete(rep);
}
