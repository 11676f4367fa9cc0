/* api_jobs — the /v1/jobs routes: create, get, list (light or full, filtered), cancel, events.
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
    if (c->jr.kind == KF_KIND_GENERATE) {
        /* warm_start is the API's to set, from the kernel library. */
        if (cJSON_GetObjectItemCaseSensitive(c->jr.spec, "warm_start")) {
            kf_fields_add(&fe, "spec.warm_start", "unknown",
                          "is set by kforge from the kernel library (docs/library.md); leave it out");
            api_reply_fields(r, 422, "validation", &fe);
            api_create_free(c);
            return;
        }
        if (!api_library_warm(r, c->jr.spec, c->jr.target, c->jr.backend)) {
            api_create_free(c);
            return;
        }
        api_req_pg_put(r);
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
    c->doc = api_job_doc(nj);
    {
        /* The answer warns when no worker has ever offered the job's
         * (target, backend); the idempotency record keeps the answer as
         * given, warnings and all. */
        cJSON *warnings = api_caps_warnings(r, &nj->target, &nj->backend, 1);
        if (warnings) {
            char *doc = api_doc_with_member(c->doc, "warnings", warnings);
            free(c->doc);
            c->doc = doc;
            cJSON_Delete(warnings);
        }
    }
    nj->doc = c->doc;
    nj->req = r;
    r->ctx = c;
    r->ctx_free = api_create_free;
    api_req_suspend(r, api_job_create_handoff, api_job_create_done);
}

static const api_stmt api_st_job_get = {
    2, "kf_job_get",
    "SELECT " API_JOB_JSON ", j.state, j.target, j.backend FROM jobs j WHERE j.id = $1::uuid "
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
    if (PQntuples(res) == 0) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", r->param);
    } else {
        /* A queued job no live worker can run says why it waits. */
        cJSON *waiting = strcmp(PQgetvalue(res, 0, 1), "queued") == 0
                             ? api_caps_waiting(r, PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3))
                             : NULL;
        char *doc = api_doc_with_member(PQgetvalue(res, 0, 0), "waiting", waiting);
        api_reply_json_text(r, 200, doc);
        free(doc);
        cJSON_Delete(waiting);
    }
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

void api_page_query(const char *lim_s, const char *cursor, unsigned long long max, unsigned long long *lim,
                    char micros[24], char cur_id[37], kf_fields *fe)
{
    if (lim_s && (!api_parse_uint(lim_s, max, lim) || *lim < 1))
        kf_fields_add(fe, "limit", "range", "must be an integer between 1 and %llu", max);
    if (cursor && !api_cursor_parse(cursor, micros, 24, cur_id))
        kf_fields_add(fe, "cursor", "format", "not a cursor this API returned; pass next_cursor unchanged");
}

void api_page_next(kf_buf *out, const PGresult *res, int lim, api_cursor_kind kind)
{
    kf_buf_adds(out, "],\"next_cursor\":");
    if (PQntuples(res) <= lim || lim < 1) {
        kf_buf_adds(out, "null");
    } else if (kind == API_CURSOR_TIME_ID) {
        char enc[128];
        api_cursor_make(PQgetvalue(res, lim - 1, 1), PQgetvalue(res, lim - 1, 2), enc, sizeof(enc));
        kf_buf_addf(out, "\"%s\"", enc);
    } else if (kind == API_CURSOR_KEY_PAIR) {
        kf_buf_addf(out, "\"%s.%s\"", PQgetvalue(res, lim - 1, 1), PQgetvalue(res, lim - 1, 2));
    } else {
        kf_buf_addf(out, "\"%s\"", PQgetvalue(res, lim - 1, 1));
    }
}

void api_page_rows(kf_buf *out, const PGresult *res, int lim, api_cursor_kind kind)
{
    int rows = PQntuples(res);

    kf_buf_addc(out, '[');
    for (int i = 0; i < rows && i < lim; i++) {
        if (i)
            kf_buf_addc(out, ',');
        kf_buf_adds(out, PQgetvalue(res, i, 0));
    }
    api_page_next(out, res, lim, kind);
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

bool api_parse_rfc3339(const char *s)
{
    static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    int v[6], lens[6] = { 4, 2, 2, 2, 2, 2 };
    const char seps[6] = { '-', '-', 'T', ':', ':', '\0' };
    const char *p = s;

    for (int i = 0; i < 6; i++) {
        v[i] = 0;
        for (int k = 0; k < lens[i]; k++, p++) {
            if (*p < '0' || *p > '9')
                return false;
            v[i] = v[i] * 10 + (*p - '0');
        }
        if (i < 5) {
            if (*p != seps[i] && !(i == 2 && *p == 't'))
                return false;
            p++;
        }
    }
    if (v[0] < 1 || v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > mdays[v[1] - 1] ||
        (v[1] == 2 && v[2] == 29 && !(v[0] % 4 == 0 && (v[0] % 100 != 0 || v[0] % 400 == 0))) || v[3] > 23 ||
        v[4] > 59 || v[5] > 59)
        return false;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++)
            digits++;
        if (digits < 1 || digits > 9)
            return false;
    }
    if (*p == 'Z' || *p == 'z')
        return p[1] == '\0';
    if (*p != '+' && *p != '-')
        return false;
    p++;
    for (int k = 0; k < 5; k++)
        if (k == 2 ? p[k] != ':' : (p[k] < '0' || p[k] > '9'))
            return false;
    /* PostgreSQL takes offsets up to 15:59. */
    return p[5] == '\0' && (p[0] - '0') * 10 + (p[1] - '0') <= 15 && (p[3] - '0') * 10 + (p[4] - '0') <= 59;
}

/* The light list item of a jobs row j with its best iteration's columns
 * (b): the full document less the kernel texts and the result, with
 * last_error cut, and `best` and `owner` (the creating token's name, for
 * the dashboard's list; one primary-key lookup a row) added (docs/runs.md). */
#define API_JOB_LIGHT_JSON                                                                                       \
    "((" API_JOB_JSON ")::jsonb - 'result' || jsonb_build_object('spec', j.spec - 'source' - 'reference', "      \
    "'owner', (SELECT t.name FROM api_tokens t WHERE t.id = j.owner_token_id), "                                   \
    "'last_error', left(j.last_error, 200), 'best', CASE WHEN b.seq IS NOT NULL THEN jsonb_build_object("          \
    "'attempt', b.attempt, 'seq', b.seq, 'latency_ns', b.latency_ns, 'fraction_of_bound', "                          \
    "kforge_fraction_of_bound(b.profile, b.latency_ns)) END))::text"

/* The filters of GET /v1/jobs (docs/runs.md), checked; each fills one
 * PostgreSQL parameter (two for a label) and one condition. */
typedef struct api_list_q {
    const char *state, *kind, *target, *op, *batch, *after, *before, *worker, *view, *lim_s, *cursor;
    const char *label_key[KF_JOB_MAX_LABELS], *label_val[KF_JOB_MAX_LABELS];
    int         n_labels;
    kf_fields  *fe;
    /* Filled once the query is checked: the owner's token id (NULL for an
     * admin) and the cursor's position (NULL without a cursor). */
    const char *owner, *cur_micros, *cur_id;
} api_list_q;

/* How many of a label's jobs, newest first, the label-driven list reads
 * before it gives the query to the planner (api_h_job_list). */
#define API_LIST_LABEL_WINDOW "500"

static enum MHD_Result api_list_label(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    api_list_q *q = cls;
    const char *name = key + strlen("label.");
    char field[96];

    (void)kind;
    if (strncmp(key, "label.", 6) != 0)
        return MHD_YES;
    snprintf(field, sizeof(field), "label.%.*s", (int)kf_utf8_cut(name, strnlen(name, 64)), name);
    if (!kf_utf8_valid(key, strlen(key), NULL) || !kf_ident_valid(name, 63, ".-/")) {
        kf_fields_add(q->fe, kf_utf8_valid(key, strlen(key), NULL) ? field : "label.?", "pattern",
                      "a label name is 1-63 bytes of [A-Za-z0-9_.-/] starting with a letter or _");
    } else if (!value || strlen(value) > KF_JOB_MAX_LABEL_VALUE || !kf_utf8_valid(value, strlen(value), NULL)) {
        kf_fields_add(q->fe, field, "length", "a label value is UTF-8 text of at most %d bytes", KF_JOB_MAX_LABEL_VALUE);
    } else if (q->n_labels == KF_JOB_MAX_LABELS) {
        kf_fields_add(q->fe, field, "count", "at most %d label filters (a job has at most %d labels)",
                      KF_JOB_MAX_LABELS, KF_JOB_MAX_LABELS);
    } else {
        q->label_key[q->n_labels] = name;
        q->label_val[q->n_labels++] = value;
    }
    return MHD_YES;
}

static void api_list_check(api_req *r, api_list_q *q)
{
    static const char *const views[] = { "light", "full", NULL };
    kf_fields *fe = q->fe;
    bool ok;

    if (q->state && !kf_job_state_valid(q->state))
        kf_fields_add(fe, "state", "enum", "must be one of: queued, running, retrying, succeeded, failed, cancelled, dead");
    if (q->kind && kf_job_kind_parse(q->kind) == KF_KIND_NONE)
        kf_fields_add(fe, "kind", "enum", "must be one of: generate, optimize, profile, validate, diag");
    if (q->target) {
        ok = false;
        for (int i = 0; kf_job_targets[i]; i++)
            ok = ok || strcmp(kf_job_targets[i], q->target) == 0;
        if (!ok)
            kf_fields_add(fe, "target", "enum", "must be one of: trn1, inf2, trn2, trn3");
    }
    if (q->op && !kf_ident_valid(q->op, 64, ".-"))
        kf_fields_add(fe, "op", "pattern", "an op name is 1-64 bytes of [A-Za-z0-9_.-] starting with a letter or _");
    if (q->batch && !kf_uuid_valid(q->batch))
        kf_fields_add(fe, "batch", "format", "a batch id is a UUID");
    if (q->after && !api_parse_rfc3339(q->after))
        kf_fields_add(fe, "created_after", "format", "an RFC 3339 time such as 2026-12-02T10:00:00Z");
    if (q->before && !api_parse_rfc3339(q->before))
        kf_fields_add(fe, "created_before", "format", "an RFC 3339 time such as 2026-12-02T10:00:00Z");
    if (q->worker && !api_worker_id_valid(q->worker))
        kf_fields_add(fe, "worker", "pattern", "a worker id is 1-%d bytes of [A-Za-z0-9_.:-]", API_NAME_MAX);
    if (q->view) {
        ok = false;
        for (int i = 0; views[i]; i++)
            ok = ok || strcmp(views[i], q->view) == 0;
        if (!ok)
            kf_fields_add(fe, "view", "enum", "must be light (the default) or full");
    }
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, api_list_label, q);
}

/* Appends to sql the conditions of the list's filters on the jobs row j,
 * labels from the first_label-th on, each value a parameter; the owner,
 * time window and cursor unless by_label (they are the label window's
 * then, api_list_window). */
static void api_list_where(const api_list_q *q, int first_label, bool by_label, kf_buf *sql, const char **params,
                           int *np)
{
    const struct {
        const char *v, *cond;
    } eq[] = {
        { q->state, " AND j.state = $%d" },
        { q->kind, " AND j.kind = $%d" },
        { q->target, " AND j.target = $%d" },
        { q->op, " AND j.spec->>'op' = $%d" },
        { q->batch, " AND j.batch_id = $%d::uuid" },
        { q->worker, " AND j.worker_id = $%d" },
        { by_label ? NULL : q->after, " AND j.created_at > $%d::timestamptz" },
        { by_label ? NULL : q->before, " AND j.created_at < $%d::timestamptz" },
        { by_label ? NULL : q->owner, " AND j.owner_token_id = $%d::bigint" },
    };

    for (size_t i = 0; i < sizeof(eq) / sizeof(eq[0]); i++) {
        if (eq[i].v) {
            params[(*np)++] = eq[i].v;
            kf_buf_addf(sql, eq[i].cond, *np);
        }
    }
    for (int i = first_label; i < q->n_labels; i++) {
        /* Containment, which the GIN index on labels serves; label values
         * are strings, so it is labels->>KEY = VALUE. */
        params[(*np)++] = q->label_key[i];
        params[(*np)++] = q->label_val[i];
        kf_buf_addf(sql, " AND j.labels @> jsonb_build_object($%d::text, $%d::text)", *np - 1, *np);
    }
    if (q->cur_micros && !by_label) {
        params[(*np)++] = q->cur_micros;
        params[(*np)++] = q->cur_id;
        kf_buf_addf(sql,
                    " AND (j.created_at, j.id) < ('epoch'::timestamptz + $%d::bigint * interval '1 microsecond', "
                    "$%d::uuid)",
                    *np - 1, *np);
    }
}

/* Appends the label window: the first label's job_labels rows l (job_id,
 * created_at) in the owner's jobs, time window and cursor, newest first,
 * at most API_LIST_LABEL_WINDOW (migration 0011's indexes serve it). */
static void api_list_window(const api_list_q *q, kf_buf *sql, const char **params, int *np)
{
    params[(*np)++] = q->label_key[0];
    params[(*np)++] = q->label_val[0];
    kf_buf_addf(sql, "SELECT l.job_id, l.created_at FROM job_labels l WHERE l.key = $%d AND l.value = $%d", *np - 1,
                *np);
    if (q->owner) {
        params[(*np)++] = q->owner;
        kf_buf_addf(sql, " AND l.owner_token_id = $%d::bigint", *np);
    }
    if (q->after) {
        params[(*np)++] = q->after;
        kf_buf_addf(sql, " AND l.created_at > $%d::timestamptz", *np);
    }
    if (q->before) {
        params[(*np)++] = q->before;
        kf_buf_addf(sql, " AND l.created_at < $%d::timestamptz", *np);
    }
    if (q->cur_micros) {
        params[(*np)++] = q->cur_micros;
        params[(*np)++] = q->cur_id;
        kf_buf_addf(sql,
                    " AND (l.created_at, l.job_id) < ('epoch'::timestamptz + $%d::bigint * interval '1 microsecond', "
                    "$%d::uuid)",
                    *np - 1, *np);
    }
    kf_buf_adds(sql, " ORDER BY l.created_at DESC, l.job_id DESC LIMIT " API_LIST_LABEL_WINDOW);
}

/* The list's SQL into sql (reset first) and params (np set): a page of
 * limit + 1 (lim) jobs rows in the list's order with each row's best
 * iteration.  by_label: the jobs come from the first label's window
 * (api_list_window) and the other filters are checked on each; otherwise
 * the planner picks an index for all the filters at once. */
static void api_list_sql(const api_list_q *q, bool full, bool by_label, const char *lim, kf_buf *sql,
                         const char **params, int *np)
{
    kf_buf_reset(sql);
    *np = 0;
    kf_buf_adds(sql, "SELECT ");
    kf_buf_adds(sql, full ? API_JOB_JSON "::text" : API_JOB_LIGHT_JSON);
    kf_buf_adds(sql, ", (extract(epoch FROM j.created_at) * 1000000)::bigint, j.id, j.state, j.target, j.backend "
                     "FROM ");
    if (by_label) {
        /* Ordered by the window's columns (equal to the job's), so the
         * join keeps the window's order and stops after a page. */
        kf_buf_adds(sql, "(SELECT j.* FROM (");
        api_list_window(q, sql, params, np);
        kf_buf_adds(sql, ") c JOIN jobs j ON j.id = c.job_id WHERE true");
        api_list_where(q, 1, true, sql, params, np);
        params[(*np)++] = lim;
        kf_buf_addf(sql, " ORDER BY c.created_at DESC, c.job_id DESC LIMIT $%d::int) j", *np);
    } else {
        /* An index range scan in the list's order, stopping after limit +
         * 1 rows, or (for filters no such index serves) a bitmap scan and
         * a sort of the matches. */
        kf_buf_adds(sql, "(SELECT * FROM jobs j WHERE true");
        api_list_where(q, 0, false, sql, params, np);
        params[(*np)++] = lim;
        kf_buf_addf(sql, " ORDER BY j.created_at DESC, j.id DESC LIMIT $%d::int) j", *np);
    }
    if (!full)
        kf_buf_adds(sql, API_JOB_BEST_LATERAL("b"));
    kf_buf_adds(sql, " ORDER BY j.created_at DESC, j.id DESC");
}

/* 1 when the label window of q (api_list_window) is full, so matches may
 * lie past it; 0 when it holds every job of the label; -1 when the query
 * failed (answered). */
static int api_list_window_full(api_req *r, const api_list_q *q)
{
    const char *params[8];
    int np = 0, full;
    kf_buf sql = KF_BUF_INIT;
    PGresult *res;

    kf_buf_adds(&sql, "SELECT count(*) = " API_LIST_LABEL_WINDOW " FROM (");
    api_list_window(q, &sql, params, &np);
    kf_buf_adds(&sql, ") c");
    res = api_req_sql(r, sql.data, np, params);
    kf_buf_release(&sql);
    if (!res)
        return -1;
    full = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return full;
}

/* api_page_rows for the list, each queued job with its `waiting` object
 * when no live worker offers its pair (as GET /v1/jobs/{id}): one Redis
 * round trip for the page (api_caps_waiting_page). */
static void api_list_page(api_req *r, kf_buf *out, const PGresult *res, int lim)
{
    int n = PQntuples(res) < lim ? PQntuples(res) : lim;
    const char **st = kf_calloc((size_t)n + 1, sizeof(*st)), **tg = kf_calloc((size_t)n + 1, sizeof(*tg));
    const char **bk = kf_calloc((size_t)n + 1, sizeof(*bk));
    cJSON **waiting = kf_calloc((size_t)n + 1, sizeof(cJSON *));

    for (int i = 0; i < n; i++) {
        st[i] = PQgetvalue(res, i, 3);
        tg[i] = PQgetvalue(res, i, 4);
        bk[i] = PQgetvalue(res, i, 5);
    }
    api_caps_waiting_page(r, n, st, tg, bk, waiting);
    kf_buf_addc(out, '[');
    for (int i = 0; i < n; i++) {
        if (i)
            kf_buf_addc(out, ',');
        if (waiting[i]) {
            char *doc = api_doc_with_member(PQgetvalue(res, i, 0), "waiting", waiting[i]);
            kf_buf_adds(out, doc);
            free(doc);
            cJSON_Delete(waiting[i]);
        } else {
            kf_buf_adds(out, PQgetvalue(res, i, 0));
        }
    }
    api_page_next(out, res, lim, API_CURSOR_TIME_ID);
    free(st);
    free(tg);
    free(bk);
    free(waiting);
}

void api_h_job_list(api_req *r)
{
    static const char *const allowed[] = { "state", "kind", "target", "limit", "cursor", "op", "batch", "created_after",
                                           "created_before", "worker", "view", NULL };
    char micros[24], cur_id[37], ob[24], lim_buf[24];
    const char *params[16 + 2 * KF_JOB_MAX_LABELS];
    int np = 0;
    long limit = 50;
    bool full;
    kf_fields fe;
    api_list_q q = { 0 };
    kf_buf sql = KF_BUF_INIT, out = KF_BUF_INIT;
    PGresult *res = NULL;

    kf_fields_init(&fe);
    q.fe = &fe;
    q.state = api_req_query(r, "state");
    q.kind = api_req_query(r, "kind");
    q.target = api_req_query(r, "target");
    q.op = api_req_query(r, "op");
    q.batch = api_req_query(r, "batch");
    q.after = api_req_query(r, "created_after");
    q.before = api_req_query(r, "created_before");
    q.worker = api_req_query(r, "worker");
    q.view = api_req_query(r, "view");
    q.lim_s = api_req_query(r, "limit");
    q.cursor = api_req_query(r, "cursor");
    if (api_req_query_check(r, allowed, "label.", &fe))
        api_list_check(r, &q);
    if (q.lim_s) {
        unsigned long long v = 0;
        if (!api_parse_uint(q.lim_s, 200, &v) || v < 1)
            kf_fields_add(&fe, "limit", "range", "must be an integer between 1 and 200");
        limit = (long)v;
    }
    if (q.cursor && !api_cursor_parse(q.cursor, micros, sizeof(micros), cur_id))
        kf_fields_add(&fe, "cursor", "format", "not a cursor this API returned; pass next_cursor unchanged");
    if (fe.n) {
        api_reply_fields(r, 400, "bad-query", &fe);
        return;
    }
    full = q.view && strcmp(q.view, "full") == 0;
    snprintf(lim_buf, sizeof(lim_buf), "%ld", limit + 1);
    q.owner = api_owner_param(r, ob) ? ob : NULL;
    if (q.cursor) {
        q.cur_micros = micros;
        q.cur_id = cur_id;
    }
    if (q.n_labels) {
        /* A label's jobs newest first from job_labels, at most
         * API_LIST_LABEL_WINDOW of them; when those hold fewer than a
         * page and the window was full, the matches may go on past it:
         * then the whole query, for the planner to choose. */
        api_list_sql(&q, full, true, lim_buf, &sql, params, &np);
        res = api_req_sql(r, sql.data, np, params);
        if (!res)
            goto out;
        if (PQntuples(res) <= limit) {
            int full_window = api_list_window_full(r, &q);
            if (full_window < 0)
                goto out;
            if (full_window) {
                PQclear(res);
                res = NULL;
            }
        }
    }
    if (!res) {
        api_list_sql(&q, full, false, lim_buf, &sql, params, &np);
        res = api_req_sql(r, sql.data, np, params);
        if (!res)
            goto out;
    }
    kf_buf_adds(&out, "{\"jobs\":");
    api_list_page(r, &out, res, (int)limit);
    kf_buf_addc(&out, '}');
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
