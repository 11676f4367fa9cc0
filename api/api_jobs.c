/* api_jobs — the /v1/jobs routes: create, get, list, cancel, events.
 *
 * Job documents are built by PostgreSQL (API_JOB_JSON, json_build_object)
 * from the row, with one exception: the answer to POST /v1/jobs is built
 * here (api_job_doc) from the values the API itself writes, so creating a
 * job costs PostgreSQL no document and no read-back.  It has the keys of
 * API_JOB_JSON in the same order, and the tests check that it equals what
 * GET /v1/jobs/{id} returns. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_log.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Owner filter parameter: NULL for admins (they see every job). */
static const char *api_owner_param(api_req *r, char buf[24])
{
    if (r->who.role == API_ROLE_ADMIN)
        return NULL;
    snprintf(buf, 24, "%lld", (long long)r->who.token_id);
    return buf;
}

static bool api_job_id_ok(api_req *r)
{
    if (kf_uuid_valid(r->param))
        return true;
    api_reply_code(r, KF_NOT_FOUND, "not-found", "no such job (job ids are UUIDs)");
    return false;
}

/* Microseconds of the last created_at handed out: each is later than the
 * one before, so a client's jobs keep the order it sent them in. */
static atomic_llong api_job_clock_last;

/* The creation time of a new job as PostgreSQL's JSON prints a timestamptz
 * in UTC: "2026-11-30T18:31:48.6971+00:00" (fraction without trailing
 * zeros, none when whole).  PostgreSQL reads the same text back. */
int64_t api_job_clock(char out[40])
{
    struct timespec ts;
    long long us, last;
    time_t sec;
    struct tm tm;
    long frac;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    us = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
    last = atomic_load(&api_job_clock_last);
    do {
        if (us <= last)
            us = last + 1;
    } while (!atomic_compare_exchange_weak(&api_job_clock_last, &last, us));
    sec = (time_t)(us / 1000000LL);
    frac = (long)(us % 1000000LL);
    gmtime_r(&sec, &tm);
    n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    if (frac) {
        int digits = 6;
        while (frac % 10 == 0) {
            frac /= 10;
            digits--;
        }
        n += (size_t)snprintf(out + n, 40 - n, ".%0*ld", digits, frac);
    }
    snprintf(out + n, 40 - n, "+00:00");
    return us;
}

/* The document of a job just created (state queued, attempt 0, nothing
 * run yet): API_JOB_JSON's keys, in its order and layout.  Caller frees. */
char *api_job_doc(const api_new_job *nj)
{
    kf_buf b = KF_BUF_INIT;

    /* One allocation: the fixed text is about 500 bytes. */
    kf_buf_grow(&b, 640 + strlen(nj->spec) + strlen(nj->budget) + strlen(nj->goal) + strlen(nj->labels) +
                        strlen(nj->target) + strlen(nj->backend) + (nj->idem_key ? 2 * strlen(nj->idem_key) : 0));
    kf_buf_adds(&b, "{\"id\" : ");
    kf_json_add_str(&b, nj->id);
    kf_buf_adds(&b, ", \"kind\" : ");
    kf_json_add_str(&b, nj->kind);
    kf_buf_adds(&b, ", \"state\" : \"queued\", \"target\" : ");
    kf_json_add_str(&b, nj->target);
    kf_buf_adds(&b, ", \"backend\" : ");
    kf_json_add_str(&b, nj->backend);
    kf_buf_addf(&b, ", \"priority\" : %d, \"spec\" : ", nj->priority);
    kf_buf_adds(&b, nj->spec);
    kf_buf_adds(&b, ", \"budget\" : ");
    kf_buf_adds(&b, nj->budget);
    kf_buf_adds(&b, ", \"goal\" : ");
    kf_buf_adds(&b, nj->goal);
    kf_buf_adds(&b, ", \"labels\" : ");
    kf_buf_adds(&b, nj->labels);
    kf_buf_addf(&b, ", \"attempt\" : 0, \"max_attempts\" : %d, \"cancel_requested\" : false, \"worker_id\" : null, "
                    "\"last_error\" : null, \"best_iteration\" : null, \"result\" : null, \"idempotency_key\" : ",
                nj->max_attempts);
    if (nj->idem_key)
        kf_json_add_str(&b, nj->idem_key);
    else
        kf_buf_adds(&b, "null");
    kf_buf_adds(&b, ", \"created_at\" : \"");
    kf_buf_adds(&b, nj->created_at);
    kf_buf_adds(&b, "\", \"updated_at\" : \"");
    kf_buf_adds(&b, nj->created_at);
    kf_buf_adds(&b, "\", \"started_at\" : null, \"finished_at\" : null, \"provenance\" : {}}");
    return kf_buf_detach(&b);
}

/* A POST /v1/jobs between its handler and its answer. */
typedef struct api_create {
    kf_job_request jr;
    api_new_job    nj;
    char          *spec, *budget, *goal, *labels, *doc;
    char           created_at[40];
} api_create;

static void api_create_free(void *p)
{
    api_create *c = p;

    free(c->doc);
    free(c->spec);
    free(c->budget);
    free(c->goal);
    free(c->labels);
    kf_job_request_release(&c->jr);
    free(c);
}

/* Once suspended: to the group commit (or, when it is stopping, straight
 * back with its 503). */
static void api_job_create_handoff(api_req *r)
{
    api_create *c = r->ctx;

    if (!api_job_submit(api_req_batcher(r), &c->nj))
        api_req_resume(r);
}

/* Resumed: the answer, from what the group commit did (the courier has
 * logged each job created). */
static void api_job_create_done(api_req *r)
{
    api_create *c = r->ctx;
    const api_new_job *nj = &c->nj;

    if (nj->status == 202) {
        r->idem_stored = r->idem_active;
        api_reply_json_text(r, 202, c->doc);
        snprintf(r->location, sizeof(r->location), "/v1/jobs/%s", nj->id);
    } else if (nj->status == 503) {
        api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                       "the database is unavailable; retry after the number of seconds in Retry-After");
    } else {
        api_reply_code(r, KF_INTERNAL, "internal",
                       "the job could not be stored; the request id is in the server log");
    }
    r->ctx = NULL;
    api_create_free(c);
}

void api_h_job_create(api_req *r)
{
    kf_fields fe;
    api_create *c = kf_calloc(1, sizeof(*c));
    api_new_job *nj = &c->nj;

    kf_fields_init(&fe);
    if (!kf_job_request_parse(r->json, api_req_config(r)->default_max_attempts, &c->jr, &fe)) {
        api_reply_fields(r, 422, "validation", &fe);
        free(c);
        return;
    }
    if (!kf_uuid_v7(nj->id)) {
        api_create_free(c);
        api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                       "the kernel gave no random bytes for a job id; retry after the number of seconds in "
                       "Retry-After");
        return;
    }
    c->spec = kf_json_print(c->jr.spec);
    c->budget = kf_json_print(c->jr.budget);
    c->goal = kf_json_print(c->jr.goal);
    c->labels = kf_json_print(c->jr.labels);
    nj->kind = kf_job_kind_name(c->jr.kind);
    nj->target = c->jr.target;
    nj->backend = c->jr.backend;
    nj->priority = c->jr.priority;
    nj->max_attempts = c->jr.max_attempts;
    nj->owner = r->who.token_id;
    nj->idem_key = r->idem_active ? r->idem_key : NULL;
    nj->spec = c->spec;
    nj->budget = c->budget;
    nj->goal = c->goal;
    nj->labels = c->labels;
    nj->created_us = api_job_clock(c->created_at);
    nj->created_at = c->created_at;
    nj->doc = c->doc = api_job_doc(nj);
    nj->req = r;
    r->ctx = c;
    r->ctx_free = api_create_free;
    api_req_suspend(r, api_job_create_handoff, api_job_create_done);
}

static const api_stmt api_st_job_get = {
    2, "kf_job_get",
    "SELECT " API_JOB_JSON " FROM jobs j WHERE j.id = $1::uuid "
    "AND ($2::bigint IS NULL OR j.owner_token_id = $2::bigint)",
    2,
};

void api_h_job_get(api_req *r)
{
    char ob[24];
    const char *params[2];
    PGresult *res;

    if (!api_req_query_known(r, (const char *const[]){ NULL }) || !api_job_id_ok(r))
        return;
    params[0] = r->param;
    params[1] = api_owner_param(r, ob);
    res = api_req_stmt(r, &api_st_job_get, params);
    if (!res)
        return;
    if (PQntuples(res) == 0)
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", r->param);
    else
        api_reply_json_text(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* ---- list with keyset pagination ----------------------------------------------- */

static const char api_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static void api_b64url_encode(const char *in, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[o++] = api_b64[(v >> 18) & 63];
        out[o++] = api_b64[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = api_b64[(v >> 6) & 63];
        if (i + 2 < n)
            out[o++] = api_b64[v & 63];
    }
    out[o] = '\0';
}

static bool api_b64url_decode(const char *in, char *out, size_t cap)
{
    size_t n = strlen(in), o = 0;
    unsigned v = 0;
    int bits = 0;

    for (size_t i = 0; i < n; i++) {
        const char *p = strchr(api_b64, in[i]);
        if (!p || !in[i])
            return false;
        v = (v << 6) | (unsigned)(p - api_b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o + 1 >= cap || ((v >> bits) & 0xff) == 0)
                return false;
            out[o++] = (char)((v >> bits) & 0xff);
        }
    }
    /* Canonical only, as api_b64url_encode writes it: no lone sixth of a
     * byte, and the bits past the last byte are zero. */
    if (bits >= 6 || (v & ((1u << bits) - 1)) != 0)
        return false;
    out[o] = '\0';
    return true;
}

void api_cursor_make(const char *micros, const char *id, char *out, size_t cap)
{
    char raw[80];
    snprintf(raw, sizeof(raw), "%s,%s", micros, id);
    api_b64url_encode(raw, strlen(raw), out, cap);
}

#define API_CURSOR_MAX_US 253402300799999999ULL   /* 9999-12-31T23:59:59.999999Z */

/* Cursor = base64url("<created_at in µs since the epoch>,<uuid>"). */
bool api_cursor_parse(const char *cur, char *micros, size_t mcap, char *id)
{
    char raw[96];
    char *comma;
    size_t n;
    unsigned long long us = 0;

    if (strlen(cur) > 120 || !api_b64url_decode(cur, raw, sizeof(raw)))
        return false;
    comma = strchr(raw, ',');
    if (!comma)
        return false;
    n = (size_t)(comma - raw);
    if (n == 0 || n >= mcap)
        return false;
    memcpy(micros, raw, n);
    micros[n] = '\0';
    /* Before year 10000: PostgreSQL's timestamps end in year 294276, and
     * a bigint of microseconds past that is a 500, not a page. */
    if (!api_parse_uint(micros, API_CURSOR_MAX_US, &us))
        return false;
    if (!kf_uuid_valid(comma + 1))
        return false;
    memcpy(id, comma + 1, 37);
    return true;
}

void api_h_job_list(api_req *r)
{
    static const char *const allowed[] = { "state", "kind", "target", "limit", "cursor", NULL };
    static const char *const kinds[] = { "generate", "optimize", "profile", "validate", "diag", NULL };
    const char *state = api_req_query(r, "state"), *kind = api_req_query(r, "kind");
    const char *target = api_req_query(r, "target"), *lim_s = api_req_query(r, "limit");
    const char *cursor = api_req_query(r, "cursor");
    char micros[24], cur_id[37], ob[24], lim_buf[24];
    const char *params[8];
    int np = 0;
    long limit = 50;
    kf_fields fe;
    kf_buf sql = KF_BUF_INIT, out = KF_BUF_INIT;
    PGresult *res = NULL;
    int rows;

    if (!api_req_query_known(r, allowed))
        return;
    kf_fields_init(&fe);
    if (state && !kf_job_state_valid(state))
        kf_fields_add(&fe, "state", "enum", "must be one of: queued, running, retrying, succeeded, failed, cancelled, dead");
    if (kind && kf_job_kind_parse(kind) == KF_KIND_NONE)
        kf_fields_add(&fe, "kind", "enum", "must be one of: generate, optimize, profile, validate, diag");
    (void)kinds;
    if (target) {
        bool ok = false;
        for (int i = 0; kf_job_targets[i]; i++)
            ok = ok || strcmp(kf_job_targets[i], target) == 0;
        if (!ok)
            kf_fields_add(&fe, "target", "enum", "must be one of: trn1, inf2, trn2, trn3");
    }
    if (lim_s) {
        unsigned long long v = 0;
        if (!api_parse_uint(lim_s, 200, &v) || v < 1)
            kf_fields_add(&fe, "limit", "range", "must be an integer between 1 and 200");
        limit = (long)v;
    }
    if (cursor && !api_cursor_parse(cursor, micros, sizeof(micros), cur_id))
        kf_fields_add(&fe, "cursor", "format", "not a cursor this API returned; pass next_cursor unchanged");
    if (fe.n) {
        api_reply_fields(r, 400, "bad-query", &fe);
        return;
    }

    kf_buf_adds(&sql, "SELECT " API_JOB_JSON "::text, (extract(epoch FROM j.created_at) * 1000000)::bigint, j.id "
                      "FROM jobs j WHERE true");
    if (state) {
        params[np++] = state;
        kf_buf_addf(&sql, " AND j.state = $%d", np);
    }
    if (kind) {
        params[np++] = kind;
        kf_buf_addf(&sql, " AND j.kind = $%d", np);
    }
    if (target) {
        params[np++] = target;
        kf_buf_addf(&sql, " AND j.target = $%d", np);
    }
    if (api_owner_param(r, ob)) {
        params[np++] = ob;
        kf_buf_addf(&sql, " AND j.owner_token_id = $%d::bigint", np);
    }
    if (cursor) {
        params[np++] = micros;
        params[np++] = cur_id;
        kf_buf_addf(&sql,
                    " AND (j.created_at, j.id) < ('epoch'::timestamptz + $%d::bigint * interval '1 microsecond', "
                    "$%d::uuid)",
                    np - 1, np);
    }
    snprintf(lim_buf, sizeof(lim_buf), "%ld", limit + 1);
    params[np++] = lim_buf;
    kf_buf_addf(&sql, " ORDER BY j.created_at DESC, j.id DESC LIMIT $%d::int", np);
    res = api_req_sql(r, sql.data, np, params);
    if (!res)
        goto out;
    rows = PQntuples(res);
    kf_buf_adds(&out, "{\"jobs\":[");
    for (int i = 0; i < rows && i < limit; i++) {
        if (i)
            kf_buf_addc(&out, ',');
        kf_buf_adds(&out, PQgetvalue(res, i, 0));
    }
    kf_buf_adds(&out, "],\"next_cursor\":");
    if (rows > limit) {
        char enc[128];
        int last = (int)limit - 1;
        api_cursor_make(PQgetvalue(res, last, 1), PQgetvalue(res, last, 2), enc, sizeof(enc));
        kf_buf_addf(&out, "\"%s\"}", enc);
    } else {
        kf_buf_adds(&out, "null}");
    }
    api_reply_json_text(r, 200, out.data);
out:
    PQclear(res);
    kf_buf_release(&sql);
    kf_buf_release(&out);
}

/* ---- cancel -------------------------------------------------------------------- */

/* An event detail for a user's or an admin's move: {"reason": reason or
 * null, "by_token": the token's id} and, when extra > 0,
 * "extra_attempts".  The caller frees it. */
static char *api_by_token_detail(const api_req *r, const char *reason, int extra)
{
    cJSON *o = cJSON_CreateObject();
    char *text;

    if (reason)
        cJSON_AddStringToObject(o, "reason", reason);
    else
        cJSON_AddNullToObject(o, "reason");
    cJSON_AddNumberToObject(o, "by_token", (double)r->who.token_id);
    if (extra > 0)
        cJSON_AddNumberToObject(o, "extra_attempts", extra);
    text = kf_json_print(o);
    cJSON_Delete(o);
    return text;
}

/* The job's document as the request's transaction sees it (after a move);
 * NULL after answering. */
static PGresult *api_job_doc_locked(api_req *r)
{
    const char *params[1] = { r->param };

    return api_req_sql(r, "SELECT " API_JOB_JSON "::text FROM jobs j WHERE j.id = $1::uuid", 1, params);
}

void api_h_job_cancel(api_req *r)
{
    static const char *const allowed[] = { "reason", NULL };
    char ob[24];
    const char *reason = NULL, *params[2];
    const char *state;
    char *detail = NULL;
    char outbox_id[24] = "";
    kf_fields fe;
    PGresult *res = NULL;
    kf_db_move mv = { .move = KF_MOVE_CANCEL };
    kf_db_moved moved;
    bool was_running;

    if (!api_job_id_ok(r))
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
    params[1] = api_owner_param(r, ob);
    if (!api_req_begin(r))
        return;
    res = api_req_sql(r,
                      "SELECT state, cancel_requested FROM jobs WHERE id = $1::uuid "
                      "AND ($2::bigint IS NULL OR owner_token_id = $2::bigint) FOR UPDATE",
                      2, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", r->param);
        goto out;
    }
    state = PQgetvalue(res, 0, 0);
    if (kf_job_state_terminal(state)) {
        api_reply_code(r, KF_CONFLICT, "job-finished", "job %s is already %s and cannot be cancelled", r->param,
                       state);
        goto out;
    }
    was_running = strcmp(state, "running") == 0;
    PQclear(res);
    res = NULL;
    detail = api_by_token_detail(r, reason, 0);
    mv.move = was_running ? KF_MOVE_CANCEL_ASK : KF_MOVE_CANCEL;
    mv.job_id = r->param;
    mv.detail = detail;
    if (!api_move(r, &mv, &moved))
        goto out;
    res = api_job_doc_locked(r);
    if (!res || !api_req_commit(r))
        goto out;
    snprintf(outbox_id, sizeof(outbox_id), "%lld", moved.outbox_id);
    api_reply_json_text(r, was_running ? 202 : 200, PQgetvalue(res, 0, 0));

    /* Tell Redis after the commit; if it is down the relay sends the
     * cancel later, and a stale lease is fenced off at the worker's start. */
    {
        kf_err e = KF_ERR_INIT;
        kf_queue *q = api_qpool_get(api_req_qpool(r), &e);
        kf_queue_cancel_result cr;
        if (q && kf_queue_cancel(q, r->param, &cr, &e) == KF_OK) {
            const char *p1[1] = { outbox_id };
            PGresult *u = PQexecParams(r->pg, "DELETE FROM outbox WHERE id = $1::bigint", 1, NULL, p1,
                                       NULL, NULL, 0);
            PQclear(u);
        } else {
            kf_log_warn("cancel recorded but not yet sent to the queue job=%s msg=\"%s\"", r->param, e.msg);
        }
        api_qpool_put(api_req_qpool(r), q);
    }
out:
    PQclear(res);
    free(detail);
    api_req_rollback(r);
}

/* ---- requeue (admin) -------------------------------------------------------------- */

/* A dead job goes back to queued with more attempts; the scheduler's relay
 * puts it on Redis (it drops the dead letter first, docs/protocol.md), so
 * there is no fast path here: Redis may still hold the job's hash. */
void api_h_job_requeue(api_req *r)
{
    static const char *const allowed[] = { "extra_attempts", "reason", NULL };
    int64_t extra = 1;
    const char *reason = NULL, *params[1];
    char *detail = NULL;
    kf_fields fe;
    PGresult *res = NULL;
    kf_db_move mv = { .move = KF_MOVE_REQUEUE };

    if (!api_job_id_ok(r))
        return;
    kf_fields_init(&fe);
    if (r->json) {
        kf_fields_refuse_unknown(&fe, r->json, "", allowed);
        kf_fields_int(&fe, r->json, "", "extra_attempts", false, 1, 20, &extra);
        kf_fields_str(&fe, r->json, "", "reason", false, 0, 512, &reason);
        if (fe.n) {
            api_reply_fields(r, 422, "validation", &fe);
            return;
        }
    }
    params[0] = r->param;
    if (!api_req_begin(r))
        return;
    res = api_req_sql(r, "SELECT state FROM jobs WHERE id = $1::uuid FOR UPDATE", 1, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", r->param);
        goto out;
    }
    if (strcmp(PQgetvalue(res, 0, 0), "dead") != 0) {
        api_reply_code(r, KF_CONFLICT, "job-not-dead", "job %s is %s; only dead jobs are re-queued", r->param,
                       PQgetvalue(res, 0, 0));
        goto out;
    }
    PQclear(res);
    res = NULL;
    detail = api_by_token_detail(r, reason, (int)extra);
    mv.job_id = r->param;
    mv.extra_attempts = (int)extra;
    mv.detail = detail;
    if (!api_move(r, &mv, NULL))
        goto out;
    res = api_job_doc_locked(r);
    if (!res || !api_req_commit(r))
        goto out;
    api_reply_json_text(r, 202, PQgetvalue(res, 0, 0));
    kf_log_info("dead job re-queued job=%s extra_attempts=%lld by=%lld req=%s", r->param, (long long)extra,
                (long long)r->who.token_id, r->request_id);
out:
    PQclear(res);
    free(detail);
    api_req_rollback(r);
}

/* ---- events -------------------------------------------------------------------- */

void api_h_job_events(api_req *r)
{
    static const char *const allowed[] = { "after", "limit", NULL };
    const char *after = api_req_query(r, "after"), *lim = api_req_query(r, "limit");
    const char *params[4];
    char ob[24];
    unsigned long long v = 0;
    kf_fields fe;
    PGresult *res;

    if (!api_req_query_known(r, allowed) || !api_job_id_ok(r))
        return;
    kf_fields_init(&fe);
    if (after && !api_parse_uint(after, INT64_MAX, &v))
        kf_fields_add(&fe, "after", "range", "must be an event id (an integer from 0 to %lld)", (long long)INT64_MAX);
    if (lim && (!api_parse_uint(lim, 1000, &v) || v < 1))
        kf_fields_add(&fe, "limit", "range", "must be an integer between 1 and 1000");
    if (fe.n) {
        api_reply_fields(r, 400, "bad-query", &fe);
        return;
    }
    params[0] = r->param;
    params[1] = api_owner_param(r, ob);
    params[2] = after ? after : "0";
    params[3] = lim ? lim : "1000";
    res = api_req_sql(r,
                      "SELECT json_build_object('job_id', j.id, 'events', coalesce((SELECT json_agg(ev ORDER BY ev.id) "
                      "FROM (SELECT id, type, attempt, from_state, to_state, detail, created_at FROM job_events "
                      "WHERE job_id = j.id AND id > $3::bigint ORDER BY id LIMIT $4::int) ev), '[]'::json))::text "
                      "FROM jobs j WHERE j.id = $1::uuid AND ($2::bigint IS NULL OR j.owner_token_id = $2::bigint)",
                      4, params);
    if (!res)
        return;
    if (PQntuples(res) == 0)
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", r->param);
    else
        api_reply_json_text(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
}
