/* api_calib — the simulator checked by hardware (docs/neuron-backend.md
 * "Calibration", migration 0014): the calibration records a worker's final
 * result carries, checked at the edge and stored with the result, and
 * GET /v1/calibration, the error of the simulator per op and target over
 * every record the caller may see.
 *
 * Writing: api_h_internal_result (api_internal.c) checks result.calibration
 * with api_calib_check before anything else happens (422 naming each bad
 * field) and stores it with api_calib_store in the transaction that records
 * the result; the job's own row gives op, shape, dtype, target and owner.
 * Reading: admins see every record, other tokens the records of their own
 * jobs (the visibility of the jobs themselves).  Bad query input is a 422
 * naming each field; a PostgreSQL failure is answered by api_req_sql.
 * Ownership: every PGresult is cleared and every string freed before a
 * function returns. */
#include "api.h"
#include "kf_alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    API_CALIB_MAX_RECORDS = 64,     /* records in one result (a hybrid job's confirmed candidates) */
    API_CALIB_MAX_LINES = 32,       /* lines of one record */
    API_CALIB_MAX_PARAMS = 4096,    /* bytes of a record's params, printed */
    API_CALIB_PAGE_MAX = 200,
};

#define API_CALIB_WORST       "3"   /* worst records per op and target (SQL text) */
#define API_CALIB_WORST_LINES "10"  /* worst lines in the answer (SQL text) */

#define API_CALIB_NS_MAX 1e15       /* ns: about 11.6 days, far above any kernel */

/* ---- the worker's records ---------------------------------------------------- */

/* A positive, finite time of at most API_CALIB_NS_MAX ns (zero allowed when
 * zero_ok). */
static void api_calib_ns(kf_fields *fe, const cJSON *o, const char *parent, const char *name, bool required,
                         bool zero_ok)
{
    double v = 0;
    char path[96];

    if (!kf_fields_num(fe, o, parent, name, required, 0, API_CALIB_NS_MAX, &v))
        return;
    if (v <= 0 && !zero_ok) {
        kf_field_path(path, sizeof(path), parent, name);
        kf_fields_add(fe, path, "range", "must be a time in ns above 0");
    }
}

static void api_calib_check_engines(kf_fields *fe, const cJSON *eng, const char *parent)
{
    static const char *const names[] = { "tensor", "vector", "scalar", "gpsimd", "dma", NULL };
    static const char *const keys[] = { "device_percent", "sim_percent", NULL };
    char path[96];

    if (kf_fields_refuse_unknown(fe, eng, parent, names) > 0)
        return;
    for (int i = 0; names[i]; i++) {
        const cJSON *e = NULL;
        double v;
        if (!kf_fields_obj(fe, eng, parent, names[i], false, false, &e))
            continue;
        kf_field_path(path, sizeof(path), parent, names[i]);
        if (kf_fields_refuse_unknown(fe, e, path, keys) > 0)
            continue;
        /* a share of the run; 101 leaves room for rounding */
        kf_fields_num(fe, e, path, "device_percent", true, 0, 101, &v);
        kf_fields_num(fe, e, path, "sim_percent", true, 0, 101, &v);
    }
}

static void api_calib_check_lines(kf_fields *fe, const cJSON *lines, const char *parent)
{
    static const char *const keys[] = { "loc", "device_ns", "sim_ns", NULL };
    const cJSON *l;
    int i = 0;

    if (cJSON_GetArraySize(lines) > API_CALIB_MAX_LINES) {
        kf_fields_add(fe, parent, "size", "at most %d lines", API_CALIB_MAX_LINES);
        return;
    }
    cJSON_ArrayForEach(l, lines)
    {
        char path[96];
        const char *loc = NULL;
        kf_field_pathf(path, sizeof(path), "%s[%d]", parent, i++);
        if (!cJSON_IsObject(l)) {
            kf_fields_add(fe, path, "type", "must be an object {loc, device_ns, sim_ns}");
            continue;
        }
        if (kf_fields_refuse_unknown(fe, l, path, keys) > 0)
            continue;
        if (kf_fields_str(fe, l, path, "loc", true, 1, 128, &loc))
            for (const char *q = loc; *q; q++)
                if (*q < 0x20 || *q > 0x7e) {
                    char lp[112];
                    kf_field_path(lp, sizeof(lp), path, "loc");
                    kf_fields_add(fe, lp, "pattern", "printable ASCII only (FILE:LINE)");
                    break;
                }
        api_calib_ns(fe, l, path, "device_ns", true, true);
        api_calib_ns(fe, l, path, "sim_ns", true, true);
    }
}

bool api_calib_check(const cJSON *result, kf_fields *fe, char **out)
{
    static const char *const keys[] = { "seq", "kernel_sha256", "params", "device_latency_ns", "device_profile_ns",
                                         "sim_ns", "engines", "lines", NULL };
    const cJSON *cal = NULL, *rec;
    int i = 0, before = fe->n;

    *out = NULL;
    if (!kf_fields_obj(fe, result, "result", "calibration", false, true, &cal))
        return fe->n == before;
    if (cJSON_GetArraySize(cal) > API_CALIB_MAX_RECORDS) {
        kf_fields_add(fe, "result.calibration", "size", "at most %d records", API_CALIB_MAX_RECORDS);
        return false;
    }
    cJSON_ArrayForEach(rec, cal)
    {
        char path[64];
        const char *sha = NULL;
        const cJSON *o = NULL, *dp;
        int64_t seq;
        kf_field_pathf(path, sizeof(path), "result.calibration[%d]", i++);
        if (!cJSON_IsObject(rec)) {
            kf_fields_add(fe, path, "type", "must be an object (docs/protocol.md, calibration)");
            continue;
        }
        if (kf_fields_refuse_unknown(fe, rec, path, keys) > 0)
            continue;
        kf_fields_int(fe, rec, path, "seq", true, 0, 1000000, &seq);
        if (kf_fields_str(fe, rec, path, "kernel_sha256", true, 64, 64, &sha) &&
            strspn(sha, "0123456789abcdef") != 64) {
            char sp[96];
            kf_field_path(sp, sizeof(sp), path, "kernel_sha256");
            kf_fields_add(fe, sp, "pattern", "64 lowercase hex digits (SHA-256 of the kernel source)");
        }
        if (kf_fields_obj(fe, rec, path, "params", false, false, &o)) {
            char *p = kf_json_print(o);
            if (strlen(p) > API_CALIB_MAX_PARAMS) {
                char pp[96];
                kf_field_path(pp, sizeof(pp), path, "params");
                kf_fields_add(fe, pp, "size", "at most %d bytes as JSON", API_CALIB_MAX_PARAMS);
            }
            free(p);
        }
        api_calib_ns(fe, rec, path, "device_latency_ns", true, false);
        dp = cJSON_GetObjectItemCaseSensitive(rec, "device_profile_ns");
        if (dp && !cJSON_IsNull(dp))
            api_calib_ns(fe, rec, path, "device_profile_ns", false, true);
        api_calib_ns(fe, rec, path, "sim_ns", true, false);
        o = NULL;
        if (kf_fields_obj(fe, rec, path, "engines", false, false, &o)) {
            char ep[96];
            kf_field_path(ep, sizeof(ep), path, "engines");
            api_calib_check_engines(fe, o, ep);
        }
        o = NULL;
        if (kf_fields_obj(fe, rec, path, "lines", false, true, &o)) {
            char lp[96];
            kf_field_path(lp, sizeof(lp), path, "lines");
            api_calib_check_lines(fe, o, lp);
        }
    }
    if (fe->n != before)
        return false;
    *out = kf_json_print(cal);
    return true;
}

bool api_calib_store(api_req *r, const char *job, const char *attempt, const char *records)
{
    const char *params[3] = { job, attempt, records };
    PGresult *res;

    if (!records)
        return true;
    /* op, shape and dtype are named as the kernel library names them
     * (db/kf_library.c), from the job's own row. */
    res = api_req_sql(r,
                      "INSERT INTO calibration (job_id, attempt, seq, owner_token_id, op, kernel_sha256, shape, dtype, "
                      "target, params, device_latency_ns, device_profile_ns, sim_ns, engines, lines) "
                      "SELECT j.id, $2::int, (c->>'seq')::int, j.owner_token_id, "
                      "  CASE WHEN j.kind = 'generate' THEN j.spec->>'op' ELSE 'user.' || coalesce(j.spec->>'entry', "
                      "  'unknown') END, c->>'kernel_sha256', kforge_job_shape(j.spec)::text, "
                      "  coalesce(j.spec->>'dtype', (SELECT string_agg(DISTINCT v->>'dtype', '+' ORDER BY v->>'dtype') "
                      "    FROM jsonb_each(CASE WHEN jsonb_typeof(j.spec->'inputs') = 'object' THEN j.spec->'inputs' "
                      "    ELSE '{}' END) AS e(k, v)), 'unknown'), "
                      "  j.target, coalesce(c->'params', '{}'), (c->>'device_latency_ns')::float8, "
                      "  (c->>'device_profile_ns')::float8, (c->>'sim_ns')::float8, coalesce(c->'engines', '{}'), "
                      "  coalesce(c->'lines', '[]') "
                      "FROM jobs j CROSS JOIN jsonb_array_elements($3::jsonb) c WHERE j.id = $1::uuid "
                      "ON CONFLICT (job_id, attempt, seq) DO NOTHING",
                      3, params);
    if (!res)
        return false;
    PQclear(res);
    return true;
}

/* ---- GET /v1/calibration --------------------------------------------------------- */

/* The records the request reads: $1 op, $2 target, $3 since, $4 owner. */
#define API_CALIB_ROWS                                                                                         \
    "WITH c AS (SELECT * FROM calibration WHERE ($1::text IS NULL OR op = $1) AND ($2::text IS NULL OR "      \
    "target = $2) AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz) AND ($4::bigint IS NULL OR " \
    "owner_token_id = $4::bigint)) "

static const char api_calib_summary_sql[] =
    API_CALIB_ROWS
    "SELECT json_build_object("
    " 'groups', coalesce((SELECT json_agg(g ORDER BY g.op, g.target) FROM ("
    "   SELECT c1.op, c1.target, count(*) AS count, "
    "     percentile_cont(0.5) WITHIN GROUP (ORDER BY abs(c1.error)) AS median_abs_error, "
    "     avg(abs(c1.error)) AS mean_abs_error, avg(c1.error) AS bias, "
    "     (SELECT json_agg(json_build_object('job_id', w.job_id, 'attempt', w.attempt, 'seq', w.seq, 'shape', "
    "        w.shape::json, 'dtype', w.dtype, 'error', w.error, 'device_latency_ns', w.device_latency_ns, "
    "        'sim_ns', w.sim_ns, 'created_at', w.created_at) ORDER BY abs(w.error) DESC, w.id) "
    "      FROM (SELECT * FROM c c2 WHERE c2.op = c1.op AND c2.target = c1.target "
    "            ORDER BY abs(c2.error) DESC, c2.id LIMIT " API_CALIB_WORST ") w) AS worst "
    "   FROM c c1 GROUP BY c1.op, c1.target) g), '[]'::json), "
    " 'worst_lines', coalesce((SELECT json_agg(json_build_object('op', l.op, 'target', l.target, 'job_id', "
    "   l.job_id, 'seq', l.seq, 'loc', l.loc, 'device_ns', l.device_ns, 'sim_ns', l.sim_ns, 'diff_ns', "
    "   l.sim_ns - l.device_ns) ORDER BY abs(l.sim_ns - l.device_ns) DESC, l.id, l.loc) "
    "   FROM (SELECT c.id, c.op, c.target, c.job_id, c.seq, e->>'loc' AS loc, (e->>'device_ns')::float8 AS "
    "         device_ns, (e->>'sim_ns')::float8 AS sim_ns FROM c, jsonb_array_elements(c.lines) e "
    "         ORDER BY abs((e->>'sim_ns')::float8 - (e->>'device_ns')::float8) DESC, c.id, e->>'loc' "
    "         LIMIT " API_CALIB_WORST_LINES ") l), '[]'::json))::text";

static const char api_calib_page_sql[] =
    API_CALIB_ROWS
    "SELECT json_build_object('id', c.id, 'job_id', c.job_id, 'attempt', c.attempt, 'seq', c.seq, 'op', c.op, "
    "'kernel_sha256', c.kernel_sha256, 'shape', c.shape::json, 'dtype', c.dtype, 'target', c.target, 'params', "
    "c.params, 'device_latency_ns', c.device_latency_ns, 'device_profile_ns', c.device_profile_ns, 'sim_ns', "
    "c.sim_ns, 'error', c.error, 'engines', c.engines, 'lines', c.lines, 'created_at', c.created_at)::text, c.id "
    "FROM c WHERE ($5::bigint IS NULL OR c.id < $5::bigint) ORDER BY c.id DESC LIMIT $6::int";

void api_h_calibration(api_req *r)
{
    static const char *const allowed[] = { "op", "target", "since", "limit", "cursor", NULL };
    const char *op = api_req_query(r, "op"), *target = api_req_query(r, "target");
    const char *since = api_req_query(r, "since"), *lim_s = api_req_query(r, "limit");
    const char *cursor = api_req_query(r, "cursor");
    char owner[24], cur[24], lim[24];
    const char *params[6];
    unsigned long long v = 0;
    long limit = 50;
    kf_fields fe;
    kf_buf out = KF_BUF_INIT;
    PGresult *res = NULL;

    kf_fields_init(&fe);
    api_req_query_check(r, allowed, NULL, &fe);
    if (op && !kf_ident_valid(op, 64, ".-"))
        kf_fields_add(&fe, "op", "pattern", "an op is 1-64 bytes of [A-Za-z0-9_.-] starting with a letter or _ "
                      "(a library op, or user.ENTRY for a user's kernel)");
    if (target) {
        bool ok = false;
        for (int i = 0; kf_job_targets[i]; i++)
            ok = ok || strcmp(kf_job_targets[i], target) == 0;
        if (!ok)
            kf_fields_add(&fe, "target", "enum", "must be one of: trn1, inf2, trn2, trn3");
    }
    if (since && !api_parse_rfc3339(since))
        kf_fields_add(&fe, "since", "format", "an RFC 3339 time such as 2026-12-02T10:00:00Z");
    if (lim_s) {
        if (!api_parse_uint(lim_s, API_CALIB_PAGE_MAX, &v) || v < 1)
            kf_fields_add(&fe, "limit", "range", "must be an integer between 1 and %d", API_CALIB_PAGE_MAX);
        limit = (long)v;
    }
    if (cursor && (!api_parse_uint(cursor, 9223372036854775807ULL, &v) || v < 1))
        kf_fields_add(&fe, "cursor", "format", "not a cursor this API returned; pass next_cursor unchanged");
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        return;
    }
    snprintf(owner, sizeof(owner), "%lld", (long long)r->who.token_id);
    snprintf(cur, sizeof(cur), "%llu", v);
    snprintf(lim, sizeof(lim), "%ld", limit + 1);
    params[0] = op;
    params[1] = target;
    params[2] = since;
    params[3] = r->who.role == API_ROLE_ADMIN ? NULL : owner;
    params[4] = cursor ? cur : NULL;
    params[5] = lim;
    res = api_req_sql(r, api_calib_summary_sql, 4, params);
    if (!res)
        return;
    /* {"groups": [...], "worst_lines": [...] + the page */
    kf_buf_adds(&out, PQgetvalue(res, 0, 0));
    PQclear(res);
    if (out.len < 2 || out.data[out.len - 1] != '}') {
        kf_buf_release(&out);
        api_reply_code(r, KF_INTERNAL, "internal", "the calibration summary could not be read");
        return;
    }
    out.data[--out.len] = '\0';
    res = api_req_sql(r, api_calib_page_sql, 6, params);
    if (!res) {
        kf_buf_release(&out);
        return;
    }
    kf_buf_adds(&out, ",\"items\":");
    api_page_rows(&out, res, (int)limit, API_CURSOR_KEY);
    kf_buf_addc(&out, '}');
    PQclear(res);
    api_reply_json_text(r, 200, out.data);
    kf_buf_release(&out);
}
