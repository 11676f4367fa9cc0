/* api_compare — GET /v1/compare?jobs=A,B[,C,D]: two to four runs side by
 * side (docs/runs.md, "Compare").
 *
 * Each run is read at its best iteration (the fastest correct one, the
 * order of jobs.best_iteration): its latency and fraction of the bound, its
 * params, its profile summary and its findings, the job's provenance, and
 * the best-so-far curve of the attempt that holds it (of the latest attempt
 * when no iteration is correct).  One statement reads every run; the best
 * sources are rebuilt (api_run_source) and diffed against the first run's
 * (kf_diff, bounded).
 *
 * Failure behaviour: a malformed list (not 2 to 4 UUIDs, a repeated id) is
 * a 422 naming the field and rule; an id that does not exist or is another
 * user's is a 404 naming it (the same answer for both, so ids do not leak);
 * a PostgreSQL failure is answered by api_req_sql.  Ownership: the answer
 * is one cJSON tree, freed before the handler returns. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_diff.h"
#include "kf_job.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_COMPARE_MAX 4

/* The columns of the statement below, in order. */
enum {
    C_ID, C_FOUND, C_KIND, C_OP, C_TARGET, C_STATE, C_PROV, C_ATTEMPT, C_SEQ, C_LAT, C_FRAC, C_PARAMS, C_PROFILE,
    C_FINDINGS, C_CURVE,
};

static const char api_compare_sql[] =
    "SELECT q.id::text, j.id IS NOT NULL, j.kind, j.spec->>'op', j.target, j.state, j.provenance::text, b.attempt, "
    "b.seq, b.latency_ns, kforge_fraction_of_bound(b.profile, b.latency_ns), coalesce(b.params, '{}')::text, "
    "coalesce(kforge_profile_summary(b.profile), '{}')::text, "
    "(SELECT coalesce(jsonb_agg(DISTINCT f->>'code'), '[]') FROM jsonb_array_elements("
    "kforge_findings_summary(b.findings)) f WHERE f ? 'code')::text, c.curve::text "
    "FROM unnest($1::uuid[]) WITH ORDINALITY AS q(id, ord) "
    "LEFT JOIN jobs j ON j.id = q.id AND ($2::bigint IS NULL OR j.owner_token_id = $2::bigint) "
    "LEFT JOIN LATERAL (SELECT i.attempt, i.seq, i.latency_ns, i.profile, i.params, i.findings FROM iterations i "
    "WHERE i.job_id = j.id AND i.correct AND i.latency_ns IS NOT NULL "
    "ORDER BY i.latency_ns, i.attempt DESC, i.seq LIMIT 1) b ON true "
    "LEFT JOIN LATERAL (SELECT coalesce(json_agg(json_build_array(w.seq, w.bsf) ORDER BY w.seq), '[]') AS curve "
    "FROM (SELECT seq, min(latency_ns) FILTER (WHERE correct) OVER (ORDER BY seq) AS bsf FROM iterations "
    "WHERE job_id = j.id AND attempt = coalesce(b.attempt, (SELECT max(attempt) FROM iterations "
    "WHERE job_id = j.id))) w) c ON true "
    "ORDER BY q.ord";

/* Split the jobs= list into ids (lower case, 37 bytes each); false after
 * recording what is wrong in fe. */
static bool api_compare_ids(const char *list, char ids[API_COMPARE_MAX][37], int *n, kf_fields *fe)
{
    const char *p = list;

    *n = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        char one[64];
        if (*n == API_COMPARE_MAX) {
            kf_fields_add(fe, "jobs", "count", "compare takes 2 to %d job ids, separated by commas", API_COMPARE_MAX);
            return false;
        }
        snprintf(one, sizeof(one), "%.*s", (int)(len < 40 ? len : 40), p);
        if (len != 36 || !kf_uuid_valid(one)) {
            one[kf_utf8_cut(one, strlen(one))] = '\0';
            kf_fields_add(fe, "jobs", "format", "'%s' is not a job id (a UUID); give 2 to %d ids separated by commas",
                          kf_utf8_valid(one, strlen(one), NULL) ? one : "?", API_COMPARE_MAX);
            return false;
        }
        for (size_t i = 0; i < 36; i++)
            ids[*n][i] = (char)tolower((unsigned char)one[i]);
        ids[*n][36] = '\0';
        for (int k = 0; k < *n; k++)
            if (strcmp(ids[k], ids[*n]) == 0) {
                kf_fields_add(fe, "jobs", "unique", "job %s is listed twice; list each job once", ids[k]);
                return false;
            }
        (*n)++;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    if (*n < 2) {
        kf_fields_add(fe, "jobs", "count", "compare takes 2 to %d job ids, separated by commas", API_COMPARE_MAX);
        return false;
    }
    return true;
}

/* A column holding JSON text, parsed (NULL column: JSON null). */
static cJSON *api_col_json(const PGresult *res, int row, int col)
{
    cJSON *v = PQgetisnull(res, row, col) ? NULL : cJSON_Parse(PQgetvalue(res, row, col));
    return v ? v : cJSON_CreateNull();
}

static cJSON *api_col_num(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? cJSON_CreateNull() : cJSON_CreateNumber(strtod(PQgetvalue(res, row, col), NULL));
}

static cJSON *api_col_str(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? cJSON_CreateNull() : cJSON_CreateString(PQgetvalue(res, row, col));
}

/* For every member name of the objects objs[0..n) (first seen first):
 * differ (may be NULL) gets NAME: [v0, v1, ...] (null where absent) when
 * the values are not all equal. */
static void api_compare_members(cJSON *const *objs, int n, cJSON *differ)
{
    for (int k = 0; k < n; k++) {
        const cJSON *m;
        cJSON_ArrayForEach(m, objs[k])
        {
            cJSON *vals;
            bool same = true, seen = false;
            for (int e = 0; e < k && !seen; e++)
                seen = cJSON_GetObjectItemCaseSensitive(objs[e], m->string) != NULL;
            if (seen || !m->string)
                continue;
            vals = cJSON_CreateArray();
            for (int e = 0; e < n; e++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(objs[e], m->string);
                const cJSON *v0 = cJSON_GetObjectItemCaseSensitive(objs[0], m->string);
                same = same && v && v0 && cJSON_Compare(v, v0, true);
                cJSON_AddItemToArray(vals, v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
            }
            if (same)
                cJSON_Delete(vals);
            else
                cJSON_AddItemToObject(differ, m->string, vals);
        }
    }
}

/* profile_deltas: each numeric summary field, its values and their
 * differences from the first run's (null where either is missing). */
static void api_compare_deltas(cJSON *const *profs, int n, cJSON *deltas)
{
    for (int k = 0; k < n; k++) {
        const cJSON *m;
        cJSON_ArrayForEach(m, profs[k])
        {
            cJSON *o, *vals, *dl;
            const cJSON *v0;
            bool seen = false;
            for (int e = 0; e < k && !seen; e++)
                seen = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(profs[e], m->string));
            if (seen || !cJSON_IsNumber(m))
                continue;
            v0 = cJSON_GetObjectItemCaseSensitive(profs[0], m->string);
            o = cJSON_AddObjectToObject(deltas, m->string);
            vals = cJSON_AddArrayToObject(o, "values");
            dl = cJSON_AddArrayToObject(o, "delta");
            for (int e = 0; e < n; e++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(profs[e], m->string);
                bool num = cJSON_IsNumber(v);
                cJSON_AddItemToArray(vals, num ? cJSON_CreateNumber(v->valuedouble) : cJSON_CreateNull());
                cJSON_AddItemToArray(dl, num && cJSON_IsNumber(v0) ? cJSON_CreateNumber(v->valuedouble - v0->valuedouble)
                                                                   : cJSON_CreateNull());
            }
        }
    }
}

/* findings_only: per run, the codes no other run has. */
static void api_compare_findings(cJSON *const *finds, char ids[API_COMPARE_MAX][37], int n, cJSON *only)
{
    for (int k = 0; k < n; k++) {
        cJSON *mine = cJSON_AddArrayToObject(only, ids[k]);
        const cJSON *f;
        cJSON_ArrayForEach(f, finds[k])
        {
            bool elsewhere = false;
            for (int e = 0; e < n && !elsewhere; e++) {
                const cJSON *g;
                if (e == k)
                    continue;
                cJSON_ArrayForEach(g, finds[e]) elsewhere = elsewhere || cJSON_Compare(f, g, true);
            }
            if (!elsewhere)
                cJSON_AddItemToArray(mine, cJSON_Duplicate(f, true));
        }
    }
}

void api_h_compare(api_req *r)
{
    static const char *const allowed[] = { "jobs", NULL };
    const char *list = api_req_query(r, "jobs");
    char ids[API_COMPARE_MAX][37], arr[API_COMPARE_MAX * 38 + 3], ob[24], missing[API_COMPARE_MAX * 38] = "";
    char *src[API_COMPARE_MAX] = { NULL };
    cJSON *params[API_COMPARE_MAX] = { NULL }, *profs[API_COMPARE_MAX] = { NULL }, *finds[API_COMPARE_MAX] = { NULL };
    cJSON *provs[API_COMPARE_MAX] = { NULL };
    const char *qp[2];
    int n = 0, rows;
    kf_fields fe;
    PGresult *res;
    cJSON *doc, *jobs, *sd;

    kf_fields_init(&fe);
    if (api_req_query_check(r, allowed, NULL, &fe)) {
        if (!list)
            kf_fields_add(&fe, "jobs", "required", "give 2 to %d job ids: jobs=A,B", API_COMPARE_MAX);
        else
            api_compare_ids(list, ids, &n, &fe);
    }
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        return;
    }
    snprintf(arr, sizeof(arr), "{");
    for (int k = 0; k < n; k++)
        snprintf(arr + strlen(arr), sizeof(arr) - strlen(arr), "%s%s", k ? "," : "", ids[k]);
    snprintf(arr + strlen(arr), sizeof(arr) - strlen(arr), "}");
    qp[0] = arr;
    qp[1] = r->who.role == API_ROLE_ADMIN ? NULL : ob;
    snprintf(ob, sizeof(ob), "%lld", (long long)r->who.token_id);
    res = api_req_sql(r, api_compare_sql, 2, qp);
    if (!res)
        return;
    rows = PQntuples(res);
    for (int k = 0; k < rows; k++)
        if (strcmp(PQgetvalue(res, k, C_FOUND), "t") != 0)
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s", missing[0] ? ", " : "",
                     PQgetvalue(res, k, C_ID));
    if (missing[0] || rows != n) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", missing[0] ? missing : "(unknown)");
        return;
    }
    doc = cJSON_CreateObject();
    jobs = cJSON_AddArrayToObject(doc, "jobs");
    for (int k = 0; k < n; k++) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "id", api_col_str(res, k, C_ID));
        cJSON_AddItemToObject(j, "kind", api_col_str(res, k, C_KIND));
        cJSON_AddItemToObject(j, "op", api_col_str(res, k, C_OP));
        cJSON_AddItemToObject(j, "target", api_col_str(res, k, C_TARGET));
        cJSON_AddItemToObject(j, "state", api_col_str(res, k, C_STATE));
        if (PQgetisnull(res, k, C_SEQ)) {
            cJSON_AddNullToObject(j, "best");
        } else {
            cJSON *b = cJSON_AddObjectToObject(j, "best");
            cJSON_AddItemToObject(b, "attempt", api_col_num(res, k, C_ATTEMPT));
            cJSON_AddItemToObject(b, "seq", api_col_num(res, k, C_SEQ));
            cJSON_AddItemToObject(b, "latency_ns", api_col_num(res, k, C_LAT));
            cJSON_AddItemToObject(b, "fraction_of_bound", api_col_num(res, k, C_FRAC));
        }
        params[k] = api_col_json(res, k, C_PARAMS);
        profs[k] = api_col_json(res, k, C_PROFILE);
        finds[k] = api_col_json(res, k, C_FINDINGS);
        provs[k] = api_col_json(res, k, C_PROV);
        cJSON_AddItemToObject(j, "params", params[k]);
        cJSON_AddItemToObject(j, "profile", profs[k]);
        cJSON_AddItemToObject(j, "findings", finds[k]);
        cJSON_AddItemToObject(j, "provenance", provs[k]);
        cJSON_AddItemToObject(j, "curve", api_col_json(res, k, C_CURVE));
        cJSON_AddItemToArray(jobs, j);
    }
    /* The best sources, while the rows are at hand. */
    for (int k = 0; k < n; k++) {
        if (PQgetisnull(res, k, C_SEQ))
            continue;
        if (!api_run_source(r, ids[k], PQgetvalue(res, k, C_ATTEMPT), PQgetvalue(res, k, C_SEQ), NULL, &src[k]))
            goto out;
    }
    api_compare_members(params, n, cJSON_AddObjectToObject(doc, "params_differ"));
    api_compare_deltas(profs, n, cJSON_AddObjectToObject(doc, "profile_deltas"));
    api_compare_findings(finds, ids, n, cJSON_AddObjectToObject(doc, "findings_only"));
    api_compare_members(provs, n, cJSON_AddObjectToObject(doc, "provenance_differ"));
    sd = cJSON_AddArrayToObject(doc, "source_diff");
    for (int k = 1; k < n; k++) {
        if (src[0] && src[k]) {
            kf_buf d = KF_BUF_INIT;
            char la[64], lb[64];
            snprintf(la, sizeof(la), "a/%s/kernel.py", ids[0]);
            snprintf(lb, sizeof(lb), "b/%s/kernel.py", ids[k]);
            kf_diff_unified(src[0], src[k], la, lb, &d, NULL);
            cJSON_AddItemToArray(sd, cJSON_CreateString(d.data));
            kf_buf_release(&d);
        } else {
            cJSON_AddItemToArray(sd, cJSON_CreateNull());
        }
    }
    api_reply_json(r, 200, doc);
out:
    PQclear(res);
    cJSON_Delete(doc);
    for (int k = 0; k < n; k++)
        free(src[k]);
}
