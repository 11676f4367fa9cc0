/* api_library — the kernel library registry's read side (docs/library.md):
 * GET /v1/library (a page of entries), GET /v1/library/{entry} (one, with
 * its history), GET /v1/library/{entry}/kernel (the .py, with a header
 * naming where it comes from); and the warm start a new generate job
 * gets from the entry of its op and shape (api_library_warm).
 *
 * Entries are written only by the success of a job (db/kf_library.h).
 * Who reads what: an entry of a library op (owner_token_id NULL) is
 * shared: every user and admin token reads it; an entry of a user's own
 * kernel (an optimize job) is read by its owner and admins only, and is
 * never a warm start for anyone else.  Workers read none.
 *
 * Failure behaviour: bad query input is a 422 naming each field; an entry
 * that does not exist or that the token may not read is a 404; a
 * PostgreSQL failure is answered by api_req_sql (503 or 500); a kernel
 * whose stored source cannot be read is 503 (store unavailable) or 500.
 * Ownership: every PGresult is cleared and every buffer released before a
 * handler returns. */
#include "api.h"
#include "kf_library.h"
#include "kf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_LIB_PAGE_MAX 200
#define API_LIB_PAGE_DEF 50

/* One kernel_library row l as the API shows it. */
#define API_LIB_ITEM                                                                                         \
    "json_build_object('id', l.id, 'op', l.kernel, 'shape', l.shape::jsonb, 'dtype', l.dtype, 'target', "    \
    "l.target, 'backend', l.backend, 'shared', l.owner_token_id IS NULL, 'entry', l.entry, 'params', "        \
    "l.params, 'latency_ns', l.latency_ns, 'fraction_of_bound', l.fraction_of_bound, 'source_sha256', "       \
    "l.source_sha256, 'job_id', l.job_id, 'attempt', l.attempt, 'iteration', l.seq, 'provenance', "          \
    "l.provenance, 'job_finished_at', l.job_finished_at, 'updated_at', l.updated_at, 'created_at', "          \
    "l.created_at, 'kernel_url', '/v1/library/' || l.id || '/kernel')"

/* Who may read an entry: $n NULL (an admin) reads all, a user the shared
 * ones and their own. */
#define API_LIB_VISIBLE(n) "($" n "::bigint IS NULL OR l.owner_token_id IS NULL OR l.owner_token_id = $" n "::bigint)"

/* Owner parameter: NULL for admins. */
static const char *api_lib_reader(const api_req *r, char buf[24])
{
    if (r->who.role == API_ROLE_ADMIN)
        return NULL;
    snprintf(buf, 24, "%lld", (long long)r->who.token_id);
    return buf;
}

/* ---- GET /v1/library ------------------------------------------------------ */

/* A filter value: an identifier (op, target, dtype, backend are), or a
 * user kernel's "user.<name>" for op. */
static void api_lib_filter(api_req *r, const char *name, bool dotted, kf_fields *fe, const char **out)
{
    const char *v = api_req_query(r, name);

    *out = NULL;
    if (!v)
        return;
    if ((dotted && strncmp(v, "user.", 5) == 0) ? !kf_ident_valid(v + 5, 64, NULL) : !kf_ident_valid(v, 64, NULL)) {
        kf_fields_add(fe, name, "pattern", "must be a name such as \"rmsnorm\" ([A-Za-z_][A-Za-z0-9_]*%s)",
                      dotted ? ", or user.NAME for a user kernel" : "");
        return;
    }
    *out = v;
}

void api_h_library_list(api_req *r)
{
    static const char *const allowed[] = { "op", "target", "dtype", "backend", "limit", "cursor", NULL };
    const char *lim_s = api_req_query(r, "limit"), *cursor = api_req_query(r, "cursor");
    const char *params[7];
    char ob[24], lim_buf[24];
    unsigned long long v = 0;
    long limit = API_LIB_PAGE_DEF;
    kf_fields fe;
    kf_buf out = KF_BUF_INIT;
    PGresult *res;

    kf_fields_init(&fe);
    api_req_query_check(r, allowed, NULL, &fe);
    api_lib_filter(r, "op", true, &fe, &params[0]);
    api_lib_filter(r, "target", false, &fe, &params[1]);
    api_lib_filter(r, "dtype", false, &fe, &params[2]);
    api_lib_filter(r, "backend", false, &fe, &params[3]);
    if (lim_s) {
        if (!api_parse_uint(lim_s, API_LIB_PAGE_MAX, &v) || v < 1)
            kf_fields_add(&fe, "limit", "range", "must be an integer between 1 and %d", API_LIB_PAGE_MAX);
        limit = (long)v;
    }
    if (cursor && !kf_library_id_valid(cursor))
        kf_fields_add(&fe, "cursor", "format", "not a cursor this API returned; pass next_cursor unchanged");
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        return;
    }
    snprintf(lim_buf, sizeof(lim_buf), "%ld", limit + 1);
    params[4] = cursor;
    params[5] = api_lib_reader(r, ob);
    params[6] = lim_buf;
    res = api_req_sql(r,
                      "SELECT " API_LIB_ITEM "::text, l.id FROM kernel_library l WHERE ($1::text IS NULL OR "
                      "l.kernel = $1) AND ($2::text IS NULL OR l.target = $2) AND ($3::text IS NULL OR "
                      "l.dtype = $3) AND ($4::text IS NULL OR l.backend = $4) AND ($5::text IS NULL OR "
                      "l.id > $5) AND " API_LIB_VISIBLE("6") " ORDER BY l.id LIMIT $7::int",
                      7, params);
    if (!res)
        return;
    kf_buf_adds(&out, "{\"items\":");
    api_page_rows(&out, res, (int)limit, API_CURSOR_KEY);
    kf_buf_addc(&out, '}');
    api_reply_json_text(r, 200, out.data);
    PQclear(res);
    kf_buf_release(&out);
}

/* ---- GET /v1/library/{entry} ---------------------------------------------- */

/* The 404 of an entry the token cannot see, whether absent or not its. */
static void api_lib_not_found(api_req *r)
{
    api_reply_code(r, KF_NOT_FOUND, "not-found",
                   "no library entry %.200s that this token may read (GET /v1/library lists them)", r->param);
}

void api_h_library_get(api_req *r)
{
    const char *params[2];
    char ob[24];
    PGresult *res;

    if (!api_req_query_known(r, (const char *const[]){ NULL }))
        return;
    if (!kf_library_id_valid(r->param)) {
        api_lib_not_found(r);
        return;
    }
    params[0] = r->param;
    params[1] = api_lib_reader(r, ob);
    res = api_req_sql(r,
                      "SELECT (" API_LIB_ITEM "::jsonb || jsonb_build_object('history', coalesce((SELECT "
                      "jsonb_agg(jsonb_build_object('reason', h.reason, 'old_latency_ns', h.old_latency_ns, "
                      "'new_latency_ns', h.new_latency_ns, 'old_params', h.old_params, 'new_params', h.new_params, "
                      "'old_source_sha256', h.old_sha256, 'new_source_sha256', h.new_sha256, 'old_provenance', "
                      "h.old_provenance, 'new_provenance', h.new_provenance, 'old_job_id', h.old_job_id, "
                      "'new_job_id', h.new_job_id, 'at', h.created_at) ORDER BY h.id) FROM kernel_library_history h "
                      "WHERE h.entry_id = l.id), '[]'::jsonb)))::text FROM kernel_library l WHERE l.id = $1 AND "
                      API_LIB_VISIBLE("2"),
                      2, params);
    if (!res)
        return;
    if (PQntuples(res) == 0)
        api_lib_not_found(r);
    else
        api_reply_json_text(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* ---- GET /v1/library/{entry}/kernel --------------------------------------- */

void api_h_library_kernel(api_req *r)
{
    enum { K_ID, K_OP, K_ENTRY, K_TARGET, K_DTYPE, K_BACKEND, K_SHAPE, K_PARAMS, K_LAT, K_FRAC, K_PROV, K_JOB,
           K_ATTEMPT, K_SEQ, K_AT, K_SHA };
    const char *params[2];
    char ob[24];
    PGresult *res;
    PGconn *c;
    kf_buf src = KF_BUF_INIT;
    uint64_t size = 0;
    kf_err e = KF_ERR_INIT;

    if (!api_req_query_known(r, (const char *const[]){ NULL }))
        return;
    if (!kf_library_id_valid(r->param)) {
        api_lib_not_found(r);
        return;
    }
    params[0] = r->param;
    params[1] = api_lib_reader(r, ob);
    res = api_req_sql(r,
                      "SELECT l.id, l.kernel, l.entry, l.target, l.dtype, l.backend, l.shape, l.params::text, "
                      "l.latency_ns, coalesce(round(l.fraction_of_bound::numeric, 4)::text, 'unknown'), "
                      "l.provenance::text, l.job_id, l.attempt, l.seq, to_char(l.updated_at AT TIME ZONE 'UTC', "
                      "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), l.source_sha256 FROM kernel_library l WHERE l.id = $1 AND "
                      API_LIB_VISIBLE("2"),
                      2, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_lib_not_found(r);
        return;
    }
    c = api_req_pg(r);
    if (!c || kf_artifact_get(api_req_config(r)->artifacts, c, PQgetvalue(res, 0, K_SHA), 0, KF_ARTIFACT_TO_END, &src,
                              &size, &e) != KF_OK) {
        if (c) {
            kf_log_error("library kernel source unreadable req=%s entry=%s sha256=%s err=\"%s\"", r->request_id,
                         r->param, PQgetvalue(res, 0, K_SHA), e.msg);
            api_reply_code(r, e.code == KF_UNAVAILABLE ? KF_UNAVAILABLE : KF_INTERNAL,
                           e.code == KF_UNAVAILABLE ? "unavailable" : "internal",
                           "the kernel's source could not be read from the artifact store; the request id is in the "
                           "server log");
        }
        PQclear(res);
        kf_buf_release(&src);
        return;
    }
    kf_buf_reset(&r->out);
    kf_buf_addf(&r->out,
                "# kforge kernel library entry %s\n"
                "# op %s, entry %s, target %s, dtype %s, backend %s\n"
                "# shape %s\n"
                "# params %s (already the entry's defaults when kforge kept the tuned file)\n"
                "# latency_ns %s, fraction of bound %s\n"
                "# provenance %s\n"
                "# from job %s attempt %s iteration %s, recorded %s; source sha256 %s\n"
                "# (header added by GET /v1/library/%s/kernel; the source follows unchanged)\n",
                PQgetvalue(res, 0, K_ID), PQgetvalue(res, 0, K_OP), PQgetvalue(res, 0, K_ENTRY),
                PQgetvalue(res, 0, K_TARGET), PQgetvalue(res, 0, K_DTYPE), PQgetvalue(res, 0, K_BACKEND),
                PQgetvalue(res, 0, K_SHAPE), PQgetvalue(res, 0, K_PARAMS), PQgetvalue(res, 0, K_LAT),
                PQgetvalue(res, 0, K_FRAC), PQgetvalue(res, 0, K_PROV), PQgetvalue(res, 0, K_JOB),
                PQgetvalue(res, 0, K_ATTEMPT), PQgetvalue(res, 0, K_SEQ), PQgetvalue(res, 0, K_AT),
                PQgetvalue(res, 0, K_SHA), PQgetvalue(res, 0, K_ID));
    kf_buf_add(&r->out, src.data, src.len);
    r->content_type = "text/x-python; charset=utf-8";
    r->status = 200;
    PQclear(res);
    kf_buf_release(&src);
}

/* ---- warm start ------------------------------------------------------------- */

bool api_library_warm(api_req *r, cJSON *spec, const char *target, const char *backend)
{
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(spec, "op");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(spec, "dtype");
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(spec, "shapes");
    char *shape_s;
    const char *params[5];
    PGresult *res;

    if (!cJSON_IsString(op) || !cJSON_IsString(dtype) || !cJSON_IsArray(shapes))
        return true;
    shape_s = cJSON_PrintUnformatted(shapes);
    params[0] = op->valuestring;
    params[1] = target;
    params[2] = dtype->valuestring;
    params[3] = backend;
    params[4] = shape_s;
    /* The shape is compared as jsonb prints it (the key stores it so). */
    res = api_req_sql(r,
                      "SELECT json_build_object('entry', id, 'params', params, 'latency_ns', latency_ns)::text "
                      "FROM kernel_library WHERE kernel = $1 AND target = $2 AND dtype = $3 AND backend = $4 AND "
                      "shape = $5::jsonb::text AND owner_token_id IS NULL",
                      5, params);
    free(shape_s);
    if (!res)
        return false;
    if (PQntuples(res) == 1) {
        cJSON *w = cJSON_Parse(PQgetvalue(res, 0, 0));
        if (cJSON_IsObject(w))
            cJSON_AddItemToObject(spec, "warm_start", w);
        else
            cJSON_Delete(w);
    }
    PQclear(res);
    return true;
}

bool api_library_warm_all(api_req *r, kf_job_request *const *reqs, int n)
{
    cJSON *keys = cJSON_CreateArray();
    char *text;
    const char *params[1];
    PGresult *res;
    int asked = 0;

    /* One key per generate job that names an op, dtype and shapes, in
     * order; "i" says which job it is. */
    for (int i = 0; i < n; i++) {
        const kf_job_request *jr = reqs[i];
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(jr->spec, "op");
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(jr->spec, "dtype");
        const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(jr->spec, "shapes");
        cJSON *k;
        if (jr->kind != KF_KIND_GENERATE || !cJSON_IsString(op) || !cJSON_IsString(dtype) || !cJSON_IsArray(shapes))
            continue;
        k = cJSON_CreateObject();
        cJSON_AddNumberToObject(k, "i", i);
        cJSON_AddStringToObject(k, "k", op->valuestring);
        cJSON_AddStringToObject(k, "t", jr->target);
        cJSON_AddStringToObject(k, "d", dtype->valuestring);
        cJSON_AddStringToObject(k, "b", jr->backend);
        cJSON_AddItemToObject(k, "s", cJSON_Duplicate(shapes, true));
        cJSON_AddItemToArray(keys, k);
        asked++;
    }
    if (asked == 0) {
        cJSON_Delete(keys);
        return true;
    }
    text = kf_json_print(keys);
    cJSON_Delete(keys);
    params[0] = text;
    /* As api_library_warm, per key: the shape compared as jsonb prints it. */
    res = api_req_sql(r,
                      "SELECT (k->>'i')::int, json_build_object('entry', l.id, 'params', l.params, 'latency_ns', "
                      "l.latency_ns)::text FROM jsonb_array_elements($1::jsonb) k JOIN kernel_library l ON "
                      "l.kernel = k->>'k' AND l.target = k->>'t' AND l.dtype = k->>'d' AND l.backend = k->>'b' AND "
                      "l.shape = (k->'s')::text AND l.owner_token_id IS NULL",
                      1, params);
    free(text);
    if (!res)
        return false;
    for (int row = 0; row < PQntuples(res); row++) {
        long i = strtol(PQgetvalue(res, row, 0), NULL, 10);
        cJSON *w = cJSON_Parse(PQgetvalue(res, row, 1));
        if (i >= 0 && i < n && cJSON_IsObject(w) && !cJSON_GetObjectItemCaseSensitive(reqs[i]->spec, "warm_start"))
            cJSON_AddItemToObject(reqs[i]->spec, "warm_start", w);
        else
            cJSON_Delete(w);
    }
    PQclear(res);
    return true;
}
