/* api_http — libmicrohttpd glue: one api_req per request, the route table,
 * dispatch (HEAD runs the GET route; MHD sends no body), problem+json
 * replies and the request counters of /metrics (HEAD counts as GET). */
#include "api.h"
#include "kf_alloc.h"
#include "kf_log.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- the route table ------------------------------------------------------ */

#define R_USERS (API_ROLE_USER | API_ROLE_ADMIN)

const api_route api_routes[] = {
    { "GET", "/healthz", api_h_healthz, API_PUBLIC, 0 },
    { "GET", "/readyz", api_h_readyz, API_PUBLIC, 0 },
    { "GET", "/metrics", api_h_metrics, API_PUBLIC, 0 },
    { "GET", "/v1/openapi.json", api_h_openapi, API_PUBLIC, 0 },
    /* the dashboard (api_ui.c, docs/dashboard.md): its files hold no data */
    { "GET", "/", api_h_ui_redirect, API_PUBLIC, 0 },
    { "GET", "/ui", api_h_ui_redirect, API_PUBLIC, 0 },
    { "GET", "/ui/", api_h_ui_index, API_PUBLIC, 0 },
    { "GET", "/ui/{asset}", api_h_ui_asset, API_PUBLIC, 0 },
    { "POST", "/v1/jobs", api_h_job_create, R_USERS, API_F_JSON | API_F_IDEM },
    { "GET", "/v1/jobs", api_h_job_list, R_USERS, 0 },
    { "GET", "/v1/jobs/{id}", api_h_job_get, R_USERS, 0 },
    { "POST", "/v1/jobs/{id}/cancel", api_h_job_cancel, R_USERS, API_F_JSON_OPT | API_F_IDEM },
    { "POST", "/v1/jobs/{id}/requeue", api_h_job_requeue, API_ROLE_ADMIN, API_F_JSON_OPT | API_F_IDEM },
    { "GET", "/v1/jobs/{id}/events", api_h_job_events, R_USERS, 0 },
    { "GET", "/v1/jobs/{id}/stream", api_h_job_stream, R_USERS, 0 },
    { "GET", "/v1/stream", api_h_stream, R_USERS, 0 },
    /* the runs read side (docs/runs.md) */
    { "GET", "/v1/jobs/{id}/iterations", api_h_job_iterations, R_USERS, 0 },
    { "GET", "/v1/jobs/{id}/iterations/{seq}", api_h_job_iteration, R_USERS, 0 },
    { "GET", "/v1/jobs/{id}/transcript", api_h_job_transcript, R_USERS, 0 },
    { "GET", "/v1/compare", api_h_compare, R_USERS, 0 },
    /* the simulator checked by hardware (api_calib.c, docs/neuron-backend.md) */
    { "GET", "/v1/calibration", api_h_calibration, R_USERS, 0 },
    { "POST", "/v1/internal/jobs/{id}/start", api_h_internal_start, API_ROLE_WORKER, API_F_JSON },
    { "POST", "/v1/internal/jobs/{id}/iterations", api_h_internal_iteration, API_ROLE_WORKER, API_F_JSON },
    { "POST", "/v1/internal/jobs/{id}/result", api_h_internal_result, API_ROLE_WORKER, API_F_JSON },
    { "POST", "/v1/internal/workers/{id}/heartbeat", api_h_internal_heartbeat, API_ROLE_WORKER, API_F_JSON },
    { "GET", "/v1/internal/whoami", api_h_internal_whoami, API_ROLE_WORKER, 0 },
    /* artifacts (api_artifacts.c, docs/runs.md) */
    { "POST", "/v1/internal/jobs/{id}/artifacts", api_h_internal_artifact, API_ROLE_WORKER, API_F_JSON | API_F_LARGE },
    { "GET", "/v1/jobs/{id}/artifacts", api_h_job_artifacts, R_USERS, 0 },
    { "GET", "/v1/artifacts/{sha256}", api_h_artifact_get, R_USERS, 0 },
    /* the kernel library (api_library.c, docs/library.md) */
    { "GET", "/v1/library", api_h_library_list, R_USERS, 0 },
    { "GET", "/v1/library/{entry}", api_h_library_get, R_USERS, 0 },
    { "GET", "/v1/library/{entry}/kernel", api_h_library_kernel, R_USERS, 0 },
    /* batches (api_batches.c, docs/batches.md) */
    { "POST", "/v1/batches", api_h_batch_create, R_USERS, API_F_JSON | API_F_IDEM },
    { "GET", "/v1/batches", api_h_batch_list, R_USERS, 0 },
    { "GET", "/v1/batches/{id}", api_h_batch_get, R_USERS, 0 },
    { "POST", "/v1/batches/{id}/cancel", api_h_batch_cancel, R_USERS, API_F_JSON_OPT | API_F_IDEM },
    { "GET", "/v1/batches/{id}/report", api_h_batch_report, R_USERS, 0 },
    { "GET", "/v1/batches/{id}/stream", api_h_batch_stream, R_USERS, 0 },
    /* the fleet (api_fleet.c, docs/dashboard.md) */
    { "GET", "/v1/workers", api_h_workers, R_USERS, 0 },
    /* who the calling token is (api_auth.c): the dashboard hides admin-only controls */
    { "GET", "/v1/whoami", api_h_whoami, R_USERS, 0 },
};
const int api_n_routes = (int)(sizeof(api_routes) / sizeof(api_routes[0]));
#define API_MAX_ROUTES 64
#define API_UNMATCHED api_n_routes   /* counter row for requests matching no route */

struct api_server {
    struct MHD_Daemon *d;
    api_server_config  cfg;
    char              *listen, *pg_dsn, *redis_url, *cors;
    api_pg_pool       *pg;
    api_qpool         *q;
    api_caps          *caps;      /* pairs seen offered (api_caps.c) */
    api_batcher       *batch;
    api_stream_hub    *hub;
    atomic_ulong       count[API_MAX_ROUTES + 1][600];
    atomic_ullong      dur_us[API_MAX_ROUTES + 1];
    atomic_ulong       seq;
};

const api_server_config *api_req_config(const api_req *r)
{
    return &r->srv->cfg;
}

api_batcher *api_req_batcher(const api_req *r)
{
    return r->srv->batch;
}

api_qpool *api_req_qpool(const api_req *r)
{
    return r->srv->q;
}

api_caps *api_req_caps(const api_req *r)
{
    return r->srv->caps;
}

api_stream_hub *api_req_stream_hub(const api_req *r)
{
    return r->srv->hub;
}

static long long api_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Match url against a pattern; the first {x} segment goes to param, a
 * second to param2 (may be NULL when the pattern has one). */
static bool api_route_match(const char *pattern, const char *url, char *param, char *param2, size_t cap)
{
    const char *p = pattern, *u = url;
    int nth = 0;

    while (*p && *u) {
        if (*p == '{') {
            const char *pe = strchr(p, '}');
            size_t n = strcspn(u, "/");
            char *dst = nth++ == 0 ? param : param2;
            if (!pe || n == 0 || n >= cap || !dst)
                return false;
            memcpy(dst, u, n);
            dst[n] = '\0';
            p = pe + 1;
            u += n;
            continue;
        }
        if (*p != *u)
            return false;
        p++;
        u++;
    }
    return *p == '\0' && *u == '\0';
}

/* ---- replies ---------------------------------------------------------------- */

void api_reply_json_text(api_req *r, int status, const char *json)
{
    r->status = status;
    r->content_type = "application/json";
    kf_buf_reset(&r->out);
    kf_buf_adds(&r->out, json);
}

void api_reply_json(api_req *r, int status, const cJSON *v)
{
    char *s = kf_json_print(v);
    api_reply_json_text(r, status, s);
    free(s);
}

/* A path (or a method, or a query parameter's name that is not UTF-8) as
 * it may appear in a reply: printable ASCII only, bounded (the text is the
 * client's and may hold anything MHD decoded). */
static void api_safe_path(const char *url, char *out, size_t cap)
{
    size_t n = 0;

    for (const char *p = url ? url : "/"; *p && n + 1 < cap; p++) {
        char ch = '?';
        if (*p > 0x20 && *p < 0x7f)
            ch = *p;
        out[n++] = ch;
    }
    out[n] = '\0';
}

/* A path or method as it goes into a log line: bounded, and every byte
 * that is not printable ASCII, or is a space, '"' or '%', as %XX (the
 * URL's own escape), so a request can neither start a line of its own
 * nor add a key=value pair to the line that records it. */
static void api_log_text(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    for (const char *p = s ? s : ""; *p && n + 4 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        if (c > 0x20 && c < 0x7f && c != '"' && c != '%') {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = '\0';
}

static cJSON *api_problem_new(api_req *r, int status, const char *slug, const char *title, const char *detail)
{
    cJSON *p = cJSON_CreateObject();
    char type[96], inst[256];

    snprintf(type, sizeof(type), "urn:kforge:problem:%s", slug);
    cJSON_AddStringToObject(p, "type", type);
    cJSON_AddStringToObject(p, "title", title);
    cJSON_AddNumberToObject(p, "status", status);
    cJSON_AddStringToObject(p, "detail", detail);
    api_safe_path(r->url, inst, sizeof(inst));
    cJSON_AddStringToObject(p, "instance", inst);
    cJSON_AddStringToObject(p, "request_id", r->request_id);
    return p;
}

static void api_reply_problem_obj(api_req *r, int status, cJSON *p)
{
    char *s = kf_json_print(p);
    r->status = status;
    r->content_type = "application/problem+json";
    kf_buf_reset(&r->out);
    kf_buf_adds(&r->out, s);
    free(s);
    cJSON_Delete(p);
    if (status == 503 && r->retry_after == 0)
        r->retry_after = 2;
}

void api_reply_problem(api_req *r, int status, const char *slug, const char *title, const char *fmt, ...)
{
    char detail[600];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    detail[kf_utf8_cut(detail, strlen(detail))] = '\0';
    api_reply_problem_obj(r, status, api_problem_new(r, status, slug, title, detail));
}

void api_reply_code(api_req *r, kf_code code, const char *slug, const char *fmt, ...)
{
    char detail[600];
    va_list ap;
    int status = kf_code_http_status(code);

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    detail[kf_utf8_cut(detail, strlen(detail))] = '\0';
    api_reply_problem_obj(r, status, api_problem_new(r, status, slug, kf_code_title(code), detail));
}

void api_reply_fields(api_req *r, int status, const char *slug, const kf_fields *fe)
{
    char detail[600];
    cJSON *p, *arr;

    kf_fields_summary(fe, detail, sizeof(detail));
    p = api_problem_new(r, status, slug, kf_code_title(status == 400 ? KF_INVALID : KF_UNPROCESSABLE), detail);
    arr = cJSON_AddArrayToObject(p, "errors");
    for (int i = 0; i < fe->n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "field", fe->e[i].field);
        cJSON_AddStringToObject(e, "rule", fe->e[i].rule);
        cJSON_AddStringToObject(e, "detail", fe->e[i].detail);
        cJSON_AddItemToArray(arr, e);
    }
    api_reply_problem_obj(r, status, p);
}

void api_reply_err(api_req *r, const kf_err *e)
{
    int status = kf_code_http_status(e->code);
    const char *slug = e->code == KF_STALE       ? "stale-attempt"
                       : e->code == KF_CONFLICT  ? "conflict"
                       : e->code == KF_NOT_FOUND ? "not-found"
                       : status == 503           ? "unavailable"
                       : status >= 500           ? "internal"
                                                 : "invalid";
    api_reply_code(r, e->code, slug, "%s", e->msg);
}

/* ---- request helpers ---------------------------------------------------------- */

const char *api_req_header(api_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *api_req_query(api_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

bool api_parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
    unsigned long long v = 0;

    if (!s || !*s)
        return false;
    for (const char *p = s; *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (d > 9 || v > max / 10 || d > max - v * 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

typedef struct api_qcheck {
    const char *const *allowed;
    const char        *prefix;      /* names starting with it are allowed too (NULL: none) */
    kf_fields         *fe;
    bool               once;        /* refuse a name given twice */
    const char        *seen[32];    /* names met so far (MHD's strings), for repeats */
    int                n_seen;
} api_qcheck;

static enum MHD_Result api_query_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    api_qcheck *qc = cls;
    bool known = qc->prefix && strncmp(key, qc->prefix, strlen(qc->prefix)) == 0;
    (void)kind;
    (void)value;
    for (size_t i = 0; !known && qc->allowed[i]; i++)
        known = strcmp(qc->allowed[i], key) == 0;
    if (known && qc->once) {
        char safe[96];
        api_safe_path(key, safe, sizeof(safe));
        for (int i = 0; i < qc->n_seen; i++)
            if (strcmp(qc->seen[i], key) == 0) {
                kf_fields_add(qc->fe, safe, "count", "given more than once; give each query parameter once");
                return MHD_YES;
            }
        if (qc->n_seen < (int)(sizeof(qc->seen) / sizeof(qc->seen[0])))
            qc->seen[qc->n_seen++] = key;
        else
            kf_fields_add(qc->fe, safe, "count", "more than 32 query parameters; give fewer");
        return MHD_YES;
    }
    if (known)
        return MHD_YES;
    if (kf_utf8_valid(key, strlen(key), NULL)) {
        kf_fields_add(qc->fe, key, "unknown", "unknown query parameter");
    } else {
        /* MHD decoded %XX: the name may be any bytes, and the reply is JSON. */
        char safe[96];
        api_safe_path(key, safe, sizeof(safe));
        kf_fields_add(qc->fe, safe, "unknown", "unknown query parameter (its name is not UTF-8; '?' marks the bytes)");
    }
    return MHD_YES;
}

bool api_req_query_known(api_req *r, const char *const *allowed)
{
    kf_fields fe;
    api_qcheck qc = { allowed, NULL, &fe, false, { NULL }, 0 };

    kf_fields_init(&fe);
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, api_query_iter, &qc);
    if (fe.n == 0)
        return true;
    api_reply_fields(r, 400, "bad-query", &fe);
    return false;
}

bool api_req_query_check(api_req *r, const char *const *allowed, const char *prefix, kf_fields *fe)
{
    api_qcheck qc = { allowed, prefix, fe, true, { NULL }, 0 };
    int before = fe->n + fe->dropped;

    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, api_query_iter, &qc);
    return fe->n + fe->dropped == before;
}

PGconn *api_req_pg(api_req *r)
{
    kf_err e = KF_ERR_INIT;

    if (r->pg)
        return r->pg;
    r->pg = api_pg_acquire(r->srv->pg, 5000, &e);
    if (!r->pg) {
        r->pg_failed = true;
        kf_log_warn("postgres unavailable req=%s msg=\"%s\"", r->request_id, e.msg);
        api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                       "the database is unavailable; retry after the number of seconds in Retry-After");
    }
    return r->pg;
}

PGconn *api_req_pg_quiet(api_req *r, kf_err *e)
{
    if (!r->pg)
        r->pg = api_pg_acquire(r->srv->pg, 2000, e);
    return r->pg;
}

void api_req_pg_put(api_req *r)
{
    if (r->pg) {
        api_pg_release(r->srv->pg, r->pg);
        r->pg = NULL;
        r->in_tx = false;
    }
}

void api_req_pg_reset(api_req *r)
{
    if (r->pg)
        api_pg_reset(r->srv->pg, r->pg);
}

/* Run sql (or the prepared statement st) once; see api_req_sql.  With
 * quiet, failures are not answered: *fail_status says 503 or 500. */
static PGresult *api_req_exec(api_req *r, const api_stmt *st, const char *sql, int n, const char *const *params,
                              const int *lengths, const int *formats, bool quiet, int *fail_status)
{
    PGconn *c;

    if (quiet) {
        kf_err e = KF_ERR_INIT;
        c = api_req_pg_quiet(r, &e);
        if (fail_status)
            *fail_status = 503;
    } else {
        c = api_req_pg(r);
    }
    if (!c)
        return NULL;
    for (int attempt = 0;; attempt++) {
        kf_err e = KF_ERR_INIT;
        PGresult *res = st ? kf_pg_exec_stmt(c, api_pg_prepared(r->srv->pg, c), st, params, lengths, formats, &e)
                           : kf_pg_exec(c, "query", sql, n, params, lengths, formats, &e);

        if (res)
            return res;
        if (attempt == 0 && !r->in_tx && PQstatus(c) == CONNECTION_BAD) {
            /* The server went away since this connection was last used. */
            api_req_pg_reset(r);
            if (PQstatus(c) == CONNECTION_OK)
                continue;
        }
        r->pg_failed = true;
        if (e.code == KF_UNAVAILABLE) {
            kf_log_warn("postgres unavailable req=%s msg=\"%s\"", r->request_id, e.msg);
            if (quiet && fail_status)
                *fail_status = 503;
            else
                api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                               "the database is unavailable; retry after the number of seconds in Retry-After");
        } else {
            kf_log_error("query failed req=%s msg=\"%s\"", r->request_id, e.msg);
            if (quiet && fail_status)
                *fail_status = 500;
            else
                api_reply_code(r, KF_INTERNAL, "internal",
                               "a database statement failed; the request id is in the server log");
        }
        return NULL;
    }
}

PGresult *api_req_sql(api_req *r, const char *sql, int n, const char *const *params)
{
    return api_req_exec(r, NULL, sql, n, params, NULL, NULL, false, NULL);
}

PGresult *api_req_stmt(api_req *r, const api_stmt *st, const char *const *params)
{
    return api_req_exec(r, st, NULL, st->nparams, params, NULL, NULL, false, NULL);
}

PGresult *api_req_stmt_quiet(api_req *r, const api_stmt *st, const char *const *params, int *fail_status)
{
    return api_req_exec(r, st, NULL, st->nparams, params, NULL, NULL, true, fail_status);
}

PGresult *api_req_stmt_bin(api_req *r, const api_stmt *st, const char *const *params, const int *lengths,
                           const int *formats, int *fail_status)
{
    return api_req_exec(r, st, NULL, st->nparams, params, lengths, formats, true, fail_status);
}

bool api_db_ok(api_req *r, kf_code rc, const kf_err *e)
{
    if (rc == KF_OK)
        return true;
    if (rc == KF_UNAVAILABLE) {
        r->pg_failed = true;
        kf_log_warn("postgres unavailable req=%s msg=\"%s\"", r->request_id, e->msg);
        api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                       "the database is unavailable; retry after the number of seconds in Retry-After");
        return false;
    }
    if (rc == KF_DB || rc == KF_INVALID) {
        /* KF_INVALID: this handler asked for a move the table does not
         * have; the server log says which. */
        r->pg_failed = rc == KF_DB;
        kf_log_error("job move failed req=%s msg=\"%s\"", r->request_id, e->msg);
        api_reply_code(r, KF_INTERNAL, "internal",
                       "a database statement failed; the request id is in the server log");
        return false;
    }
    api_reply_err(r, e);
    return false;
}

bool api_pg_num(api_req *r, const PGresult *res, int row, int col, long lo, long hi, long *out)
{
    kf_err e = KF_ERR_INIT;

    if (kf_db_num(res, row, col, lo, hi, out, &e) == KF_OK)
        return true;
    kf_log_error("unexpected result req=%s msg=\"%s\"", r->request_id, e.msg);
    api_reply_code(r, KF_INTERNAL, "internal", "a database statement failed; the request id is in the server log");
    return false;
}

bool api_move(api_req *r, const kf_db_move *m, kf_db_moved *out)
{
    kf_err e = KF_ERR_INIT;
    PGconn *c = api_req_pg(r);

    if (!c)
        return false;
    return api_db_ok(r, kf_db_apply(c, api_pg_moves_prepared(r->srv->pg, c), m, out, &e), &e);
}

bool api_req_begin(api_req *r)
{
    PGresult *res = api_req_sql(r, "BEGIN", 0, NULL);
    if (!res)
        return false;
    PQclear(res);
    r->in_tx = true;
    return true;
}

bool api_req_commit(api_req *r)
{
    PGresult *res = api_req_sql(r, "COMMIT", 0, NULL);
    r->in_tx = false;
    if (!res)
        return false;
    PQclear(res);
    return true;
}

void api_req_rollback(api_req *r)
{
    if (r->pg && r->in_tx) {
        PGresult *res = PQexec(r->pg, "ROLLBACK");
        PQclear(res);
    }
    r->in_tx = false;
}

/* ---- metrics --------------------------------------------------------------------- */

void api_metrics_requests(api_server *s, kf_buf *out)
{
    kf_buf_adds(out, "# HELP kforge_http_requests_total HTTP requests answered, by route and status.\n"
                     "# TYPE kforge_http_requests_total counter\n");
    for (int i = 0; i <= api_n_routes; i++) {
        for (int st = 100; st < 600; st++) {
            unsigned long n = atomic_load(&s->count[i][st]);
            if (!n)
                continue;
            if (i == api_n_routes)
                kf_buf_addf(out, "kforge_http_requests_total{method=\"\",route=\"unmatched\",status=\"%d\"} %lu\n", st, n);
            else
                kf_buf_addf(out, "kforge_http_requests_total{method=\"%s\",route=\"%s\",status=\"%d\"} %lu\n",
                            api_routes[i].method, api_routes[i].pattern, st, n);
        }
    }
    kf_buf_adds(out, "# HELP kforge_http_request_seconds_total Time spent answering, by route.\n"
                     "# TYPE kforge_http_request_seconds_total counter\n");
    for (int i = 0; i < api_n_routes; i++) {
        unsigned long long us = atomic_load(&s->dur_us[i]);
        if (us)
            kf_buf_addf(out, "kforge_http_request_seconds_total{method=\"%s\",route=\"%s\"} %.6f\n",
                        api_routes[i].method, api_routes[i].pattern, (double)us / 1e6);
    }
}

/* ---- CORS ---------------------------------------------------------------------------- */

/* The methods of every route matching url ("GET, HEAD, POST"), for Allow
 * and Access-Control-Allow-Methods. */
static void api_allow_methods(const char *url, char *allow, size_t cap)
{
    allow[0] = '\0';
    for (int i = 0; i < api_n_routes; i++) {
        char tmp[128], tmp2[128];
        if (api_route_match(api_routes[i].pattern, url, tmp, tmp2, sizeof(tmp))) {
            size_t n = strlen(allow);
            bool get = strcmp(api_routes[i].method, MHD_HTTP_METHOD_GET) == 0;
            snprintf(allow + n, cap - n, "%s%s%s", n ? ", " : "", api_routes[i].method, get ? ", HEAD" : "");
        }
    }
}

/* Whether origin is one of the comma-separated exact origins in list. */
static bool api_cors_match(const char *list, const char *origin)
{
    size_t olen = origin ? strlen(origin) : 0;

    if (!list || !*list || olen == 0)
        return false;
    for (const char *p = list; *p;) {
        size_t n;
        p += strspn(p, " ,");
        n = strcspn(p, " ,");
        if (n > 0 && n == olen && memcmp(p, origin, n) == 0)
            return true;
        p += n;
    }
    return false;
}

/* KFORGE_CORS_ORIGINS holds exact origins: scheme://host[:port], nothing
 * after (a browser sends no path, and "*" would open the API to every page). */
static kf_code api_cors_check(const char *list, kf_err *err)
{
    for (const char *p = list ? list : ""; *p;) {
        size_t n, host;
        p += strspn(p, " ,");
        n = strcspn(p, " ,");
        if (n == 0)
            break;
        host = strncmp(p, "https://", 8) == 0 ? 8 : strncmp(p, "http://", 7) == 0 ? 7 : 0;
        if (host == 0 || n == host || n > 255 || memchr(p + host, '/', n - host) || memchr(p + host, '*', n - host))
            return kf_err_set(err, KF_CONFIG,
                              "KFORGE_CORS_ORIGINS: '%.*s' is not an origin; write exact origins as "
                              "scheme://host[:port], comma-separated (https://dash.example.com,http://localhost:3000)",
                              (int)(n > 255 ? 255 : n), p);
        p += n;
    }
    return KF_OK;
}

void api_cors_headers(api_req *r, struct MHD_Response *resp)
{
    const char *origin = api_req_header(r, "Origin");

    if (!api_cors_match(r->srv->cors, origin))
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(resp, "Vary", "Origin");
    if (r->preflight) {
        char allow[64];
        api_allow_methods(r->url, allow, sizeof(allow));
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, Idempotency-Key, Last-Event-ID");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    } else {
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Location, ETag, Retry-After, X-Request-Id");
    }
}

/* An OPTIONS request from an allowed origin to a known path is a CORS
 * preflight: 204 with the route's methods (api_cors_headers).  False for
 * anything else, which goes on as before (405 with Allow, or 404). */
static bool api_cors_preflight(api_req *r)
{
    char allow[64];

    if (strcmp(r->method, MHD_HTTP_METHOD_OPTIONS) != 0 || !api_cors_match(r->srv->cors, api_req_header(r, "Origin")))
        return false;
    api_allow_methods(r->url, allow, sizeof(allow));
    if (!allow[0])
        return false;
    r->preflight = true;
    r->status = 204;
    kf_buf_reset(&r->out);
    return true;
}

/* ---- MHD callbacks ------------------------------------------------------------------ */

static enum MHD_Result api_send(api_req *r)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    int status = r->status ? r->status : 500;
    int row = r->route ? r->route_index : API_UNMATCHED;
    long long dur_us = (api_now_ns() - r->started_ns) / 1000;
    kf_log_level lvl = status >= 500 ? KF_LOG_WARN : status >= 400 ? KF_LOG_INFO : KF_LOG_DEBUG;

    r->done = true;
    if (r->stream) {
        /* A stream (api_stream.c): MHD reads it as it goes. */
        resp = r->stream;
        r->stream = NULL;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    } else {
        resp = MHD_create_response_from_buffer(r->out.len, r->out.data, MHD_RESPMEM_MUST_COPY);
        if (!resp)
            return MHD_NO;
        /* An empty body of a declared type (a transcript of a job that ran no
         * model) is still that type; only a reply without content has none. */
        if (r->out.len || (r->content_type && status != 204 && status != 304))
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    r->content_type ? r->content_type : "application/json");
    }
    MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, r->cache_control ? r->cache_control : "no-store");
    if (r->etag[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, r->etag);
    if (r->content_range[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, r->content_range);
    if (r->accept_ranges)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (r->location[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, r->location);
    if (r->csp) {
        MHD_add_response_header(resp, "Content-Security-Policy", r->csp);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    if (r->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (r->www_auth)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, r->www_auth);
    if (r->replayed)
        MHD_add_response_header(resp, "Idempotent-Replayed", "true");
    if (status == 405) {
        char allow[64];
        api_allow_methods(r->url, allow, sizeof(allow));
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    api_cors_headers(r, resp);
    if (r->close)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);

    atomic_fetch_add(&r->srv->count[row][status >= 100 && status < 600 ? status : 500], 1);
    if (row < api_n_routes)
        atomic_fetch_add(&r->srv->dur_us[row], (unsigned long long)dur_us);
    if (lvl >= kf_log__level) {
        char m[40], path[600];
        api_log_text(r->method, m, sizeof(m));
        api_log_text(r->url, path, sizeof(path));
        kf_log(lvl, "request method=%s path=%s status=%d ms=%.1f req=%s", m, path, status, (double)dur_us / 1000.0,
               r->request_id);
    }
    /* The pooled connection is not needed while MHD sends. */
    api_req_pg_put(r);
    return ret;
}

long api_body_limit(const api_server_config *cfg, int route_flags)
{
    long large = cfg->max_artifact_bytes / 3 * 4 + 4 + 65536;

    return (route_flags & API_F_LARGE) && large > cfg->max_body ? large : cfg->max_body;
}

/* Content-Type must be application/json, optionally with charset=utf-8. */
bool api_content_type_json(const char *ct)
{
    const char *semi;
    size_t n;

    if (!ct)
        return false;
    while (*ct == ' ')
        ct++;
    semi = strchr(ct, ';');
    n = semi ? (size_t)(semi - ct) : strlen(ct);
    while (n > 0 && ct[n - 1] == ' ')
        n--;
    if (n != strlen("application/json") || strncasecmp(ct, "application/json", n) != 0)
        return false;
    while (semi) {
        const char *p = semi + 1;
        while (*p == ' ')
            p++;
        if (strncasecmp(p, "charset=", 8) == 0) {
            const char *v = p + 8;
            if (*v == '"')
                v++;
            if (strncasecmp(v, "utf-8", 5) != 0)
                return false;
        }
        semi = strchr(p, ';');
    }
    return true;
}

typedef struct api_framing {
    int                n_length;      /* Content-Length headers */
    bool               bad_length;    /* one is not a number, or two differ */
    bool               chunked;       /* a Transfer-Encoding header */
    unsigned long long length;
} api_framing;

static enum MHD_Result api_framing_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    api_framing *f = cls;
    unsigned long long n = 0;

    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->chunked = true;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (!api_parse_uint(value, ULLONG_MAX, &n) || (f->n_length > 0 && n != f->length))
            f->bad_length = true;
        f->length = n;
        f->n_length++;
    }
    return MHD_YES;
}

/* A body's length must be stated once: libmicrohttpd (0.9.75) reads the
 * first of two different Content-Length headers, and prefers chunked
 * Transfer-Encoding over Content-Length, where a proxy in front may do
 * the opposite; the bytes one reads as the next request, the other reads
 * as this body (request smuggling, RFC 9112 6.3).  False after answering
 * 400; the connection is closed after the answer, its framing unknown. */
static bool api_framing_ok(api_req *r)
{
    api_framing f = { 0, false, false, 0 };

    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, api_framing_iter, &f);
    if (f.bad_length) {
        r->close = true;
        api_reply_code(r, KF_INVALID, "malformed-request",
                       "the request has Content-Length headers that disagree or are not numbers; send one "
                       "Content-Length with the body's size in bytes");
        return false;
    }
    if (f.chunked && f.n_length > 0) {
        r->close = true;
        api_reply_code(r, KF_INVALID, "malformed-request",
                       "the request has both Content-Length and Transfer-Encoding; send one of them");
        return false;
    }
    return true;
}

/* Checks made when the headers arrive, before any body byte is read. */
static void api_first_call(api_req *r)
{
    bool path_known = false;
    const char *cl, *te, *ct;
    /* HEAD is GET without the body (MHD leaves the body out). */
    const char *method = strcmp(r->method, MHD_HTTP_METHOD_HEAD) == 0 ? MHD_HTTP_METHOD_GET : r->method;
    bool has_body;

    if (!api_framing_ok(r) || api_cors_preflight(r))
        return;
    for (int i = 0; i < api_n_routes; i++) {
        char param[128], param2[128];
        if (!api_route_match(api_routes[i].pattern, r->url, param, param2, sizeof(param)))
            continue;
        path_known = true;
        if (strcmp(api_routes[i].method, method) == 0) {
            r->route = &api_routes[i];
            r->route_index = i;
            memcpy(r->param, param, sizeof(param));
            memcpy(r->param2, param2, sizeof(param2));
            break;
        }
    }
    if (!r->route) {
        char path[256], meth[17];
        api_safe_path(r->url, path, sizeof(path));
        api_safe_path(r->method, meth, sizeof(meth));
        if (path_known)
            api_reply_code(r, KF_METHOD, "method-not-allowed",
                           "%s is not allowed on %s; see the Allow header", meth, path);
        else
            api_reply_code(r, KF_NOT_FOUND, "not-found", "no such resource: %s", path);
        return;
    }
    if (r->route->roles != API_PUBLIC && !api_authenticate(r))
        return;

    cl = api_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    te = api_req_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    ct = api_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    has_body = (cl && strcmp(cl, "0") != 0) || te;
    if ((r->route->flags & API_F_JSON) || ((r->route->flags & API_F_JSON_OPT) && has_body)) {
        if (!api_content_type_json(ct)) {
            api_reply_code(r, KF_MEDIA_TYPE, "unsupported-media-type",
                           "send the body as Content-Type: application/json (got %s)", ct ? ct : "none");
            return;
        }
    }
    if (cl) {
        char *end = NULL;
        unsigned long long n = strtoull(cl, &end, 10);
        long limit = api_body_limit(&r->srv->cfg, r->route->flags);
        if (end && *end == '\0' && n > (unsigned long long)limit) {
            api_reply_code(r, KF_TOO_LARGE, "body-too-large", "the body is %llu bytes; the limit is %ld (%s)", n, limit,
                           limit > r->srv->cfg.max_body ? "KFORGE_MAX_ARTIFACT_BYTES, in base64" : "KFORGE_MAX_BODY_BYTES");
            return;
        }
    }
}

/* Parse the body as a JSON object for routes that take one. */
static bool api_parse_body(api_req *r)
{
    kf_err e = KF_ERR_INIT;
    int flags = r->route->flags;

    if (!(flags & (API_F_JSON | API_F_JSON_OPT)))
        return true;
    if (r->body.len == 0) {
        if (flags & API_F_JSON_OPT)
            return true;
        api_reply_code(r, KF_INVALID, "malformed-body", "this request needs a JSON object body");
        return false;
    }
    if (kf_json_parse(r->body.data, r->body.len, KF_JSON_MAX_DEPTH, &r->json, &e) != KF_OK) {
        api_reply_code(r, KF_INVALID, "malformed-body", "%s", e.msg);
        return false;
    }
    if (!cJSON_IsObject(r->json)) {
        api_reply_code(r, KF_INVALID, "malformed-body", "the body must be a JSON object");
        return false;
    }
    return true;
}

/* The end of every request that reached its handler: an answer (500 if
 * the handler gave none), no transaction left open, the idempotency row
 * settled, then the response. */
static enum MHD_Result api_finish(api_req *r)
{
    if (!r->status)
        api_reply_code(r, KF_INTERNAL, "internal", "the handler gave no answer (a bug)");
    api_req_rollback(r);
    if (r->idem_active)
        api_idem_finish(r);
    return api_send(r);
}

void api_req_suspend(api_req *r, void (*handoff)(api_req *r), void (*resume)(api_req *r))
{
    r->handoff = handoff;
    r->resume = resume;
}

void api_req_resume(api_req *r)
{
    MHD_resume_connection(r->conn);
}

static enum MHD_Result api_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    api_server *s = cls;
    api_req *r = *con_cls;

    (void)version;
    if (!r) {
        unsigned long n = atomic_fetch_add(&s->seq, 1);
        r = kf_calloc(1, sizeof(*r));
        r->srv = s;
        r->conn = conn;
        r->method = method;
        r->url = url;
        r->started_ns = api_now_ns();
        kf_buf_init(&r->body);
        kf_buf_init(&r->out);
        snprintf(r->request_id, sizeof(r->request_id), "%08lx%08lx", (unsigned long)(time(NULL) & 0xffffffff),
                 n & 0xffffffff);
        *con_cls = r;
        api_first_call(r);
        if (r->status)
            return api_send(r);
        return MHD_YES;
    }
    if (r->suspended) {
        /* Resumed: the answer of a handler that suspended. */
        r->suspended = false;
        r->resume(r);
        return api_finish(r);
    }
    if (r->done) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!r->too_large) {
            if (r->body.len + *upload_data_size > (size_t)api_body_limit(&s->cfg, r->route ? r->route->flags : 0)) {
                r->too_large = true;
                kf_buf_release(&r->body);
            } else {
                kf_buf_add(&r->body, upload_data, *upload_data_size);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* The whole request is in. */
    if (r->too_large) {
        api_reply_code(r, KF_TOO_LARGE, "body-too-large", "the body exceeds the limit of %ld bytes (%s)",
                       api_body_limit(&s->cfg, r->route->flags),
                       r->route->flags & API_F_LARGE ? "KFORGE_MAX_ARTIFACT_BYTES, in base64" : "KFORGE_MAX_BODY_BYTES");
        return api_send(r);
    }
    if (!api_parse_body(r))
        return api_send(r);
    if ((r->route->flags & API_F_IDEM) && !api_idem_begin(r))
        return api_send(r);
    r->route->handler(r);
    if (r->handoff) {
        void (*handoff)(api_req *) = r->handoff;
        r->handoff = NULL;
        api_req_rollback(r);
        api_req_pg_put(r);   /* no pooled connection is held while suspended */
        r->suspended = true;
        MHD_suspend_connection(conn);
        handoff(r);
        return MHD_YES;
    }
    return api_finish(r);
}

static void api_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    api_req *r = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (!r)
        return;
    api_req_rollback(r);
    api_req_pg_put(r);
    if (r->ctx && r->ctx_free)
        r->ctx_free(r->ctx);
    if (r->stream)
        MHD_destroy_response(r->stream);   /* never queued */
    cJSON_Delete(r->json);
    kf_buf_release(&r->body);
    kf_buf_release(&r->out);
    free(r);
    *con_cls = NULL;
}

static void api_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    size_t n;

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    kf_log_warn("libmicrohttpd: %s", msg);
}

static kf_code api_parse_listen(const char *listen, struct sockaddr_in *sa, kf_err *err)
{
    const char *colon = strrchr(listen, ':');
    char host[64];
    char *end = NULL;
    long port;

    if (!colon || (size_t)(colon - listen) >= sizeof(host))
        return kf_err_set(err, KF_CONFIG, "KFORGE_API_LISTEN=\"%s\" is not HOST:PORT", listen);
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (!end || *end || port < 0 || port > 65535)
        return kf_err_set(err, KF_CONFIG, "KFORGE_API_LISTEN=\"%s\": the port must be 0..65535", listen);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (strcmp(host, "") == 0 || strcmp(host, "*") == 0)
        sa->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return kf_err_set(err, KF_CONFIG, "KFORGE_API_LISTEN=\"%s\": use an IPv4 address such as 127.0.0.1:8080",
                          listen);
    return KF_OK;
}

api_server *api_server_start(const api_server_config *cfg, kf_err *err)
{
    struct sockaddr_in sa;
    api_server *s;

    if (api_n_routes > API_MAX_ROUTES) {
        kf_err_set(err, KF_INTERNAL, "route table larger than API_MAX_ROUTES");
        return NULL;
    }
    if (api_parse_listen(cfg->listen, &sa, err) != KF_OK || api_cors_check(cfg->cors_origins, err) != KF_OK)
        return NULL;
    s = kf_calloc(1, sizeof(*s));
    s->cfg = *cfg;
    s->listen = kf_strdup(cfg->listen);
    s->pg_dsn = kf_strdup(cfg->pg_dsn);
    s->redis_url = kf_strdup(cfg->redis_url);
    s->cors = kf_strdup(cfg->cors_origins ? cfg->cors_origins : "");
    s->cfg.cors_origins = s->cors;
    s->cfg.listen = s->listen;
    s->cfg.pg_dsn = s->pg_dsn;
    s->cfg.redis_url = s->redis_url;
    s->pg = api_pg_pool_new(cfg->pg_dsn, cfg->pg_pool);
    s->q = api_qpool_new(cfg->redis_url, cfg->threads);
    s->caps = api_caps_new();
    if (!(s->batch = api_batch_start(s->pg, s->q, err))) {
        api_server_stop(s);
        return NULL;
    }
    s->hub = api_stream_hub_start(cfg, err);
    if (!s->hub) {
        api_server_stop(s);
        return NULL;
    }
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                                MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            api_access, s,
                            MHD_OPTION_EXTERNAL_LOGGER, api_mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads,
                            MHD_OPTION_NOTIFY_COMPLETED, api_completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(cfg->idle_timeout_s > 0 ? cfg->idle_timeout_s : 30),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->conns_per_ip,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 * 1024),
                            MHD_OPTION_END);
    if (!s->d) {
        kf_err_set(err, KF_IO, "cannot listen on %s (in use, or not an address of this machine); set KFORGE_API_LISTEN",
                   cfg->listen);
        api_server_stop(s);
        return NULL;
    }
    return s;
}

void api_server_stop(api_server *s)
{
    if (!s)
        return;
    /* Every job handed over is written and its request resumed before
     * MHD stops (it refuses to stop with a suspended connection); what
     * arrives meanwhile gets 503. */
    api_batch_stop(s->batch);
    /* Streams end too: their suspended connections are resumed first. */
    api_stream_hub_close_all(s->hub);
    if (s->d)
        MHD_stop_daemon(s->d);
    api_stream_hub_free(s->hub);
    api_batch_free(s->batch);
    api_qpool_free(s->q);
    api_caps_free(s->caps);
    api_pg_pool_free(s->pg);
    free(s->listen);
    free(s->pg_dsn);
    free(s->redis_url);
    free(s->cors);
    free(s);
}
