/* api_artifacts — the artifact routes of docs/runs.md and docs/protocol.md.
 *
 *   POST /v1/internal/jobs/{id}/artifacts  (worker) one file of an
 *        iteration that became the best so far, or of the final set:
 *        {attempt, lease_token, worker?, seq, name, final?, content_base64}.
 *        Checked against the lease as every report (api_report_lease);
 *        the decoded bytes are bounded by KFORGE_MAX_ARTIFACT_BYTES (413
 *        artifact-too-large), stored through the artifact store (kf_artifact:
 *        PostgreSQL or a folder) and linked in `artifacts` in the job row's
 *        transaction.  Idempotent: the same file again is 200 with
 *        "changed": false; other bytes under a recorded (attempt, seq, name,
 *        final) are 409 conflict.
 *   GET  /v1/jobs/{id}/artifacts           the job's links, oldest first.
 *   GET  /v1/artifacts/{sha256}            the bytes (HEAD too), with ETag,
 *        immutable caching, Range (one range: 206, past the end: 416;
 *        several ranges or a malformed header: the whole content, as RFC
 *        9110 allows), If-Range and If-None-Match (304).
 * A user reads the artifacts of its own jobs only (another's are 404, so
 * neither job ids nor content hashes leak); an admin reads all.
 *
 * Failure behaviour: bad input is 4xx problem+json naming the field;
 * PostgreSQL away is 503; a store that cannot be written or read is 500
 * with the reason in the server log.  Nothing is linked unless stored. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_log.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- helpers ------------------------------------------------------------------ */

/* The value of one base64 digit, or -1. */
static int api_b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Strict base64 (RFC 4648, padded, no white space) into out; false for
 * anything else. */
static bool api_b64_decode(const char *in, size_t n, kf_buf *out)
{
    unsigned char *o;
    size_t k = 0;

    if (n % 4 != 0)
        return false;
    kf_buf_reset(out);
    kf_buf_grow(out, n / 4 * 3);
    o = (unsigned char *)out->data;
    for (size_t i = 0; i < n; i += 4) {
        int a = api_b64_val((unsigned char)in[i]), b = api_b64_val((unsigned char)in[i + 1]);
        int c = in[i + 2] == '=' ? -2 : api_b64_val((unsigned char)in[i + 2]);
        int d = in[i + 3] == '=' ? -2 : api_b64_val((unsigned char)in[i + 3]);
        bool last = i + 4 == n;
        if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2) || ((c == -2 || d == -2) && !last))
            return false;
        o[k++] = (unsigned char)(a << 2 | b >> 4);
        if (c >= 0)
            o[k++] = (unsigned char)((b & 15) << 4 | c >> 2);
        if (d >= 0)
            o[k++] = (unsigned char)((c & 3) << 6 | d);
    }
    out->len = k;
    out->data[k] = '\0';
    return true;
}

/* An artifact name: 1..64 of [A-Za-z0-9_.-], not starting with '.' or '-'
 * (no path, no hidden file; the migration's CHECK says the same). */
static bool api_artifact_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 64 || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

/* The content type a download gets, by the name's extension. */
static const char *api_artifact_type(const char *name)
{
    static const char *const map[][2] = {
        { ".json", "application/json" }, { ".py", "text/x-python; charset=utf-8" },
        { ".txt", "text/plain; charset=utf-8" }, { ".md", "text/markdown; charset=utf-8" },
    };
    size_t n = strlen(name);

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        size_t e = strlen(map[i][0]);
        if (n > e && strcasecmp(name + n - e, map[i][0]) == 0)
            return map[i][1];
    }
    return "application/octet-stream";
}

/* A store failure as an answer: 503 for PostgreSQL away, 500 otherwise. */
static void api_store_fail(api_req *r, const kf_err *e)
{
    if (e->code == KF_UNAVAILABLE) {
        r->pg_failed = true;
        api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                       "the artifact store is unavailable; retry after the number of seconds in Retry-After");
        return;
    }
    kf_log_error("artifact store failed req=%s msg=\"%s\"", r->request_id, e->msg);
    api_reply_code(r, KF_INTERNAL, "internal", "the artifact store failed; the request id is in the server log");
}

/* ---- POST /v1/internal/jobs/{id}/artifacts ------------------------------------------- */

void api_h_internal_artifact(api_req *r)
{
    const api_server_config *cfg = api_req_config(r);
    kf_fields fe;
    int64_t seq = 0;
    bool final = false, changed = false;
    const char *name = NULL, *b64 = NULL, *ctype;
    kf_buf bytes = KF_BUF_INIT;
    char sha[65], size[24], att[16], seqs[24];
    int attempt = 0;
    PGresult *res = NULL;
    kf_err e = KF_ERR_INIT;
    cJSON *o;

    kf_fields_init(&fe);
    kf_fields_int(&fe, r->json, "", "seq", true, 0, 1000000, &seq);
    if (kf_fields_str(&fe, r->json, "", "name", true, 1, 64, &name) && !api_artifact_name_ok(name))
        kf_fields_add(&fe, "name", "pattern", "1..64 of [A-Za-z0-9_.-], not starting with '.' or '-'");
    kf_fields_bool(&fe, r->json, "", "final", false, &final);
    if (kf_fields_str(&fe, r->json, "", "content_base64", true, 0, (size_t)LONG_MAX, &b64) &&
        !api_b64_decode(b64, strlen(b64), &bytes))
        kf_fields_add(&fe, "content_base64", "format", "standard base64 with padding and no white space");
    if (fe.n == 0 && (long)bytes.len > cfg->max_artifact_bytes) {
        /* Literal: the limit is the artifact's, not KF_TOO_LARGE's body limit. */
        api_reply_problem(r, 413, "artifact-too-large", "Artifact too large",
                          "%s is %zu bytes; the API keeps artifacts of at most %ld bytes (KFORGE_MAX_ARTIFACT_BYTES)",
                          name, bytes.len, cfg->max_artifact_bytes);
        goto out;
    }
    if (!api_report_lease(r, &fe, &attempt))
        goto out;
    snprintf(att, sizeof(att), "%d", attempt);
    snprintf(seqs, sizeof(seqs), "%lld", (long long)seq);
    res = api_req_sql(r,
                      "SELECT sha256 FROM artifacts WHERE job_id = $1::uuid AND attempt = $2::int AND seq = $3::int "
                      "AND name = $4 AND final = $5::bool",
                      5, (const char *const[]){ r->param, att, seqs, name, final ? "t" : "f" });
    if (!res)
        goto out;
    kf_artifact_sha256_hex(bytes.data, bytes.len, sha);
    if (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), sha) != 0) {
        api_reply_code(r, KF_CONFLICT, "conflict",
                       "attempt %d, seq %lld of job %s already kept %s%s with other content; an artifact is "
                       "never replaced",
                       attempt, (long long)seq, r->param, name, final ? " (final)" : "");
        goto out;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        res = NULL;
        if (kf_artifact_put(cfg->artifacts, r->pg, bytes.data, bytes.len, sha, &e) != KF_OK) {
            api_store_fail(r, &e);
            goto out;
        }
        snprintf(size, sizeof(size), "%zu", bytes.len);
        ctype = api_artifact_type(name);
        res = api_req_sql(r,
                          "INSERT INTO artifacts (job_id, attempt, seq, name, final, sha256, size, content_type) "
                          "VALUES ($1::uuid, $2::int, $3::int, $4, $5::bool, $6, $7::bigint, $8)",
                          8, (const char *const[]){ r->param, att, seqs, name, final ? "t" : "f", sha, size, ctype });
        if (!res)
            goto out;
        changed = true;
    }
    if (!api_req_commit(r))
        goto out;
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "sha256", sha);
    cJSON_AddNumberToObject(o, "size", (double)bytes.len);
    cJSON_AddNumberToObject(o, "attempt", attempt);
    cJSON_AddNumberToObject(o, "seq", (double)seq);
    cJSON_AddBoolToObject(o, "final", final);
    cJSON_AddBoolToObject(o, "changed", changed);
    api_reply_json(r, 200, o);
    cJSON_Delete(o);
out:
    PQclear(res);
    kf_buf_release(&bytes);
}

/* ---- GET /v1/jobs/{id}/artifacts -------------------------------------------------- */

void api_h_job_artifacts(api_req *r)
{
    char ob[24];
    const char *params[2] = { r->param, NULL };
    PGresult *res;

    if (!api_req_query_known(r, (const char *const[]){ NULL }))
        return;
    if (!kf_uuid_valid(r->param)) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no such job (job ids are UUIDs)");
        return;
    }
    if (r->who.role != API_ROLE_ADMIN) {
        snprintf(ob, sizeof(ob), "%lld", (long long)r->who.token_id);
        params[1] = ob;
    }
    res = api_req_sql(r,
                      "SELECT json_build_object('items', coalesce((SELECT json_agg(json_build_object('name', a.name, "
                      "'sha256', a.sha256, 'size', a.size, 'content_type', a.content_type, 'attempt', a.attempt, "
                      "'seq', a.seq, 'final', a.final, 'created_at', a.created_at) ORDER BY a.attempt, a.seq, a.final, "
                      "a.name) FROM artifacts a WHERE a.job_id = j.id), '[]'::json))::text "
                      "FROM jobs j WHERE j.id = $1::uuid AND ($2::bigint IS NULL OR j.owner_token_id = $2::bigint)",
                      2, params);
    if (!res)
        return;
    if (PQntuples(res) == 0)
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", r->param);
    else
        api_reply_json_text(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* ---- GET /v1/artifacts/{sha256} ------------------------------------------------------ */

/* Whether an If-None-Match list names etag (or is "*"); weak tags compare
 * equal too (RFC 9110 13.1.2 uses the weak comparison).  api_ui.c uses it too. */
bool api_etag_listed(const char *h, const char *etag)
{
    size_t n = strlen(etag);

    for (const char *p = h; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return true;
        if (strncmp(p, "W/", 2) == 0)
            p += 2;
        if (strncmp(p, etag, n) == 0 && (p[n] == '\0' || p[n] == ',' || p[n] == ' ' || p[n] == '\t'))
            return true;
        p += strcspn(p, ",");
    }
    return false;
}

typedef enum { API_RANGE_NONE, API_RANGE_OK, API_RANGE_UNSATISFIABLE } api_range_kind;

/* One "bytes=a-b", "bytes=a-" or "bytes=-n" range of a content of `size`
 * bytes (RFC 9110 14.1.2).  NONE for a header to ignore (malformed,
 * several ranges, another unit); UNSATISFIABLE when it starts past the end
 * or asks for the last 0 bytes. */
static api_range_kind api_range_parse(const char *h, uint64_t size, uint64_t *first, uint64_t *last)
{
    unsigned long long a = 0, b = 0;
    const char *dash;
    char lo[24], hi[24];
    size_t nlo;

    if (strncmp(h, "bytes=", 6) != 0 || strchr(h, ','))
        return API_RANGE_NONE;
    h += 6;
    dash = strchr(h, '-');
    if (!dash || (size_t)(dash - h) >= sizeof(lo) || strlen(dash + 1) >= sizeof(hi))
        return API_RANGE_NONE;
    nlo = (size_t)(dash - h);
    memcpy(lo, h, nlo);
    lo[nlo] = '\0';
    snprintf(hi, sizeof(hi), "%s", dash + 1);
    if (nlo == 0) {
        if (!api_parse_uint(hi, ULLONG_MAX, &b))
            return API_RANGE_NONE;
        if (b == 0 || size == 0)
            return API_RANGE_UNSATISFIABLE;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return API_RANGE_OK;
    }
    if (!api_parse_uint(lo, ULLONG_MAX, &a) || (hi[0] && !api_parse_uint(hi, ULLONG_MAX, &b)) || (hi[0] && b < a))
        return API_RANGE_NONE;
    if (a >= size)
        return API_RANGE_UNSATISFIABLE;
    *first = a;
    *last = !hi[0] || b >= size ? size - 1 : b;
    return API_RANGE_OK;
}

/* The headers of an answer that carries (or, 304, stands for) the bytes. */
static void api_download_headers(api_req *r, const char *etag)
{
    snprintf(r->etag, sizeof(r->etag), "%s", etag);
    r->cache_control = "private, max-age=31536000, immutable";
    r->accept_ranges = true;
}

void api_h_artifact_get(api_req *r)
{
    const api_server_config *cfg = api_req_config(r);
    char ob[24], etag[72];
    const char *params[2] = { r->param, NULL }, *inm, *range, *if_range;
    PGresult *res;
    PGconn *c;
    long size = 0;
    uint64_t first = 0, last = 0, got = 0;
    api_range_kind rk = API_RANGE_NONE;
    kf_err e = KF_ERR_INIT;

    if (!api_req_query_known(r, (const char *const[]){ NULL }))
        return;
    if (!kf_artifact_sha_valid(r->param)) {
        api_reply_code(r, KF_NOT_FOUND, "not-found",
                       "no such artifact (artifacts are named by the 64 lower-case hex digits of their SHA-256)");
        return;
    }
    if (r->who.role != API_ROLE_ADMIN) {
        snprintf(ob, sizeof(ob), "%lld", (long long)r->who.token_id);
        params[1] = ob;
    }
    res = api_req_sql(r,
                      "SELECT a.size, a.content_type FROM artifacts a JOIN jobs j ON j.id = a.job_id "
                      "WHERE a.sha256 = $1 AND ($2::bigint IS NULL OR j.owner_token_id = $2::bigint) LIMIT 1",
                      2, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no artifact %s among the jobs this token may read", r->param);
        return;
    }
    if (!api_pg_num(r, res, 0, 0, 0, LONG_MAX, &size)) {
        PQclear(res);
        return;
    }
    r->content_type = strcmp(PQgetvalue(res, 0, 1), "application/json") == 0 ? "application/json"
                      : strncmp(PQgetvalue(res, 0, 1), "text/x-python", 13) == 0 ? "text/x-python; charset=utf-8"
                      : strncmp(PQgetvalue(res, 0, 1), "text/plain", 10) == 0    ? "text/plain; charset=utf-8"
                      : strncmp(PQgetvalue(res, 0, 1), "text/markdown", 13) == 0 ? "text/markdown; charset=utf-8"
                                                                                  : "application/octet-stream";
    PQclear(res);
    snprintf(etag, sizeof(etag), "\"%.64s\"", r->param);
    inm = api_req_header(r, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm && api_etag_listed(inm, etag)) {
        api_download_headers(r, etag);
        r->status = 304;
        kf_buf_reset(&r->out);
        return;
    }
    range = api_req_header(r, MHD_HTTP_HEADER_RANGE);
    if_range = api_req_header(r, MHD_HTTP_HEADER_IF_RANGE);
    if (range && (!if_range || strcmp(if_range, etag) == 0))
        rk = api_range_parse(range, (uint64_t)size, &first, &last);
    if (rk == API_RANGE_UNSATISFIABLE) {
        snprintf(r->content_range, sizeof(r->content_range), "bytes */%ld", size);
        /* Literal: no kf_code maps to 416. */
        api_reply_problem(r, 416, "range-not-satisfiable", "Range not satisfiable",
                          "%s asks for bytes past the end of this artifact of %ld bytes", range, size);
        return;
    }
    c = api_req_pg(r);
    if (!c)
        return;
    kf_buf_reset(&r->out);
    if (rk == API_RANGE_NONE) {
        first = 0;
        last = size > 0 ? (uint64_t)size - 1 : 0;
    }
    if (kf_artifact_get(cfg->artifacts, c, r->param, first, size > 0 ? last - first + 1 : 0, &r->out, &got, &e) !=
        KF_OK) {
        kf_buf_reset(&r->out);
        api_store_fail(r, &e);
        return;
    }
    if (got != (uint64_t)size) {
        kf_buf_reset(&r->out);
        kf_log_error("artifact size differs from its link req=%s sha256=%s stored=%llu linked=%ld", r->request_id,
                     r->param, (unsigned long long)got, size);
        api_reply_code(r, KF_INTERNAL, "internal", "the stored artifact does not match its record; the request id is "
                                                   "in the server log");
        return;
    }
    api_download_headers(r, etag);
    if (rk == API_RANGE_OK) {
        snprintf(r->content_range, sizeof(r->content_range), "bytes %llu-%llu/%ld", (unsigned long long)first,
                 (unsigned long long)last, size);
        r->status = 206;
    } else {
        r->status = 200;
    }
}
