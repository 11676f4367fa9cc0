/* api_runs — the iterations of a job: GET /v1/jobs/{id}/iterations (a page)
 * and GET /v1/jobs/{id}/iterations/{seq} (one, whole, with its source), as
 * docs/runs.md specifies; and the source of an iteration, rebuilt from what
 * the worker sent, which compare (api_compare.c) uses too.
 *
 * The iteration documents are built by PostgreSQL from the row, with the
 * summaries of migration 0008 (kforge_fraction_of_bound,
 * kforge_profile_summary, kforge_validation_summary,
 * kforge_findings_summary), so the API and the analysts' views read a
 * profile the same way.  Failure behaviour: bad query input is a 422 naming
 * each field; a job that does not exist or is another user's is a 404; a
 * PostgreSQL failure is answered by api_req_sql (503 or 500).  A source
 * that cannot be rebuilt (a diff that does not apply to the source before
 * it) is null in the answer and logged, never an error of the request.
 * Ownership: every PGresult is cleared and every string freed before the
 * handler returns. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_diff.h"
#include "kf_job.h"
#include "kf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One iteration row i as a list item; w.bsf is its best_so_far_ns. */
#define API_ITER_ITEM                                                                                          \
    "json_build_object('seq', i.seq, 'attempt', i.attempt, 'action', i.action, 'reason', i.reason, 'params', " \
    "i.params, 'latency_ns', i.latency_ns, 'fraction_of_bound', kforge_fraction_of_bound(i.profile, "           \
    "i.latency_ns), 'correct', i.correct, 'validation', kforge_validation_summary(i.validation), 'findings', "   \
    "kforge_findings_summary(i.findings), 'profile', kforge_profile_summary(i.profile), 'best_so_far_ns', "     \
    "w.bsf, 'created_at', i.created_at, 'llm', i.llm - 'turn', 'llm_turn', (i.llm->'turn'->>'turn')::int)"

/* The same row whole (the source is added by the handler). */
#define API_ITER_FULL                                                                                          \
    "json_build_object('seq', i.seq, 'attempt', i.attempt, 'action', i.action, 'reason', i.reason, 'params', " \
    "i.params, 'latency_ns', i.latency_ns, 'fraction_of_bound', kforge_fraction_of_bound(i.profile, "           \
    "i.latency_ns), 'correct', i.correct, 'validation', i.validation, 'findings', i.findings, 'profile', "      \
    "i.profile, 'best_so_far_ns', w.bsf, 'created_at', i.created_at, 'compile', i.compile, 'timings', "         \
    "i.timings, 'llm', i.llm)"

/* best_so_far_ns: the fastest correct latency of the attempt up to and
 * including each seq (NULL before the first correct one). */
#define API_ITER_BSF "min(latency_ns) FILTER (WHERE correct) OVER (PARTITION BY attempt ORDER BY seq)"

#define API_ITER_PAGE_MAX 500
#define API_ATTEMPT_MAX   1000000   /* far above any job's attempts; bounds the integer */
#define API_SEQ_MAX       1000000   /* the largest seq a worker may report (api_internal.c) */

/* Owner filter parameter: NULL for admins (they see every job). */
static const char *api_runs_owner(const api_req *r, char buf[24])
{
    if (r->who.role == API_ROLE_ADMIN)
        return NULL;
    snprintf(buf, 24, "%lld", (long long)r->who.token_id);
    return buf;
}

/* True when the job exists and the token may see it; false after
 * answering (404, or the PostgreSQL failure). */
static bool api_runs_job_visible(api_req *r, const char *id)
{
    char ob[24];
    const char *params[2] = { id, api_runs_owner(r, ob) };
    PGresult *res;
    bool found;

    if (!kf_uuid_valid(id)) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no such job (job ids are UUIDs)");
        return false;
    }
    res = api_req_sql(r, "SELECT 1 FROM jobs WHERE id = $1::uuid AND ($2::bigint IS NULL OR owner_token_id = $2::bigint)",
                      2, params);
    if (!res)
        return false;
    found = PQntuples(res) == 1;
    PQclear(res);
    if (!found)
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", id);
    return found;
}

/* The prologue of a route on one job that takes only ?attempt=N: the query
 * checked (422 naming the field), the job visible to the caller (404).
 * *att_s is the attempt's text or NULL (the latest). */
static bool api_runs_attempt_of_job(api_req *r, const char **att_s)
{
    static const char *const allowed[] = { "attempt", NULL };
    unsigned long long v = 0;
    kf_fields fe;

    *att_s = api_req_query(r, "attempt");
    kf_fields_init(&fe);
    api_req_query_check(r, allowed, NULL, &fe);
    if (*att_s && (!api_parse_uint(*att_s, API_ATTEMPT_MAX, &v) || v < 1))
        kf_fields_add(&fe, "attempt", "range", "must be an integer between 1 and %d", API_ATTEMPT_MAX);
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        return false;
    }
    return api_runs_job_visible(r, r->param);
}

/* ---- the source of an iteration ------------------------------------------------ */

bool api_run_source(api_req *r, const char *job, const char *attempt, const char *seq, char **prev, char **cur)
{
    /* From the last full source before seq (or the attempt's first row)
     * to seq: every row the rebuild of seq and of the one before needs. */
    const char *params[3] = { job, attempt, seq };
    PGresult *res = api_req_sql(r,
                                "SELECT seq, source, source_diff FROM iterations WHERE job_id = $1::uuid AND "
                                "attempt = $2::int AND seq <= $3::int AND seq >= coalesce((SELECT max(seq) FROM "
                                "iterations WHERE job_id = $1::uuid AND attempt = $2::int AND seq < $3::int AND "
                                "source IS NOT NULL), 0) ORDER BY seq",
                                3, params);
    char *p = NULL, *c = NULL;
    int rows;

    if (prev)
        *prev = NULL;
    *cur = NULL;
    if (!res)
        return false;
    rows = PQntuples(res);
    for (int i = 0; i < rows; i++) {
        kf_err e = KF_ERR_INIT;
        free(p);
        p = c;
        c = NULL;
        if (!PQgetisnull(res, i, 1)) {
            c = kf_strdup(PQgetvalue(res, i, 1));
        } else if (!PQgetisnull(res, i, 2)) {
            /* A diff against the iteration before; without that source
             * (none sent, or it could not be rebuilt) this one is unknown. */
            if (p && kf_diff_apply(p, PQgetvalue(res, i, 2), &c, &e) != KF_OK)
                kf_log_warn("an iteration's source_diff does not apply job=%s attempt=%s seq=%s msg=\"%s\" req=%s",
                            job, attempt, PQgetvalue(res, i, 0), e.msg, r->request_id);
        } else if (p) {
            /* Neither: the source did not change (the template with other
             * params). */
            c = kf_strdup(p);
        }
    }
    /* Rows stop at seq: when the last is another, seq does not exist. */
    if (rows == 0 || strcmp(PQgetvalue(res, rows - 1, 0), seq) != 0) {
        free(c);
        c = NULL;
    }
    PQclear(res);
    if (prev && rows > 1 && c)
        *prev = p;
    else
        free(p);
    *cur = c;
    return true;
}

/* ---- GET /v1/jobs/{id}/iterations ------------------------------------------------ */

/* The iterations cursor: "<attempt>.<seq>" of the last item of a page. */
static bool api_iter_cursor_parse(const char *s, char *attempt, char *seq)
{
    const char *dot = strchr(s, '.');
    unsigned long long a = 0, q = 0;
    char buf[24];
    size_t n;

    if (!dot || (n = (size_t)(dot - s)) == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!api_parse_uint(buf, API_ATTEMPT_MAX, &a) || !api_parse_uint(dot + 1, API_SEQ_MAX, &q))
        return false;
    snprintf(attempt, 24, "%llu", a);
    snprintf(seq, 24, "%llu", q);
    return true;
}

void api_h_job_iterations(api_req *r)
{
    static const char *const allowed[] = { "limit", "cursor", "attempt", NULL };
    const char *lim_s = api_req_query(r, "limit"), *cursor = api_req_query(r, "cursor");
    const char *att_s = api_req_query(r, "attempt");
    char cur_a[24] = "0", cur_s[24] = "-1", lim_buf[24];
    const char *params[5];
    unsigned long long v = 0;
    long limit = 100;
    kf_fields fe;
    kf_buf out = KF_BUF_INIT;
    PGresult *res;

    kf_fields_init(&fe);
    api_req_query_check(r, allowed, NULL, &fe);
    if (lim_s) {
        if (!api_parse_uint(lim_s, API_ITER_PAGE_MAX, &v) || v < 1)
            kf_fields_add(&fe, "limit", "range", "must be an integer between 1 and %d", API_ITER_PAGE_MAX);
        limit = (long)v;
    }
    if (att_s && (!api_parse_uint(att_s, API_ATTEMPT_MAX, &v) || v < 1))
        kf_fields_add(&fe, "attempt", "range", "must be an integer between 1 and %d", API_ATTEMPT_MAX);
    if (cursor && !api_iter_cursor_parse(cursor, cur_a, cur_s))
        kf_fields_add(&fe, "cursor", "format", "not a cursor this API returned; pass next_cursor unchanged");
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        return;
    }
    if (!api_runs_job_visible(r, r->param))
        return;
    snprintf(lim_buf, sizeof(lim_buf), "%ld", limit + 1);
    params[0] = r->param;
    params[1] = att_s;
    params[2] = cur_a;
    params[3] = cur_s;
    params[4] = lim_buf;
    /* The running best needs every earlier row of the attempt: the window
     * reads the narrow columns of the job's rows (the unique index's
     * order), the page then joins the whole rows of limit + 1 of them. */
    res = api_req_sql(r,
                      "SELECT " API_ITER_ITEM "::text, i.attempt, i.seq FROM (SELECT attempt, seq, " API_ITER_BSF
                      " AS bsf FROM iterations WHERE job_id = $1::uuid AND ($2::int IS NULL OR attempt = $2::int)) w "
                      "JOIN iterations i ON i.job_id = $1::uuid AND i.attempt = w.attempt AND i.seq = w.seq "
                      "WHERE (w.attempt, w.seq) > ($3::int, $4::int) ORDER BY w.attempt, w.seq LIMIT $5::int",
                      5, params);
    if (!res)
        return;
    kf_buf_adds(&out, "{\"items\":");
    api_page_rows(&out, res, (int)limit, API_CURSOR_KEY_PAIR);
    kf_buf_addc(&out, '}');
    api_reply_json_text(r, 200, out.data);
    PQclear(res);
    kf_buf_release(&out);
}

/* ---- GET /v1/jobs/{id}/transcript ------------------------------------------------- */

/* The LLM planner's model turns of one attempt (?attempt=N, default the
 * latest that has any), one JSON object per line in seq order: the
 * transcript.jsonl of kforge tune, so `kforge tune --llm-replay FILE`
 * replays the run from it.  An empty body when the job ran no model. */
void api_h_job_transcript(api_req *r)
{
    const char *att_s;
    const char *params[2];
    kf_buf out = KF_BUF_INIT;
    PGresult *res;

    if (!api_runs_attempt_of_job(r, &att_s))
        return;
    params[0] = r->param;
    params[1] = att_s;
    res = api_req_sql(r,
                      "SELECT (llm->'turn')::text FROM iterations WHERE job_id = $1::uuid AND llm ? 'turn' AND "
                      "attempt = coalesce($2::int, (SELECT max(attempt) FROM iterations WHERE job_id = $1::uuid AND "
                      "llm ? 'turn')) ORDER BY seq",
                      2, params);
    if (!res)
        return;
    kf_buf_adds(&out, "");
    for (int i = 0; i < PQntuples(res); i++) {
        kf_buf_adds(&out, PQgetvalue(res, i, 0));
        kf_buf_addc(&out, '\n');
    }
    api_reply_json_text(r, 200, out.data ? out.data : "");
    r->content_type = "application/x-ndjson";
    PQclear(res);
    kf_buf_release(&out);
}

/* ---- GET /v1/jobs/{id}/iterations/{seq} ------------------------------------------- */

void api_h_job_iteration(api_req *r)
{
    const char *att_s;
    char seq[24], attempt[24], prev_seq[24], label_a[48], label_b[48];
    const char *params[3];
    unsigned long long v = 0;
    PGresult *res = NULL;
    cJSON *doc = NULL;
    char *prev = NULL, *cur = NULL;
    bool have_prev;

    if (!api_runs_attempt_of_job(r, &att_s))
        return;
    if (!api_parse_uint(r->param2, API_SEQ_MAX, &v)) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no iteration %.24s of job %s (a seq is an integer from 0 to %d)",
                       r->param2, r->param, API_SEQ_MAX);
        return;
    }
    snprintf(seq, sizeof(seq), "%llu", v);
    params[0] = r->param;
    params[1] = att_s;
    params[2] = seq;
    /* Without attempt=, the latest attempt that has this seq. */
    res = api_req_sql(r,
                      "SELECT " API_ITER_FULL "::text, i.attempt, (SELECT max(p.seq) FROM iterations p WHERE "
                      "p.job_id = i.job_id AND p.attempt = i.attempt AND p.seq < i.seq) FROM iterations i "
                      "JOIN (SELECT attempt, seq, " API_ITER_BSF " AS bsf FROM iterations WHERE job_id = $1::uuid "
                      "AND attempt = coalesce($2::int, (SELECT max(attempt) FROM iterations WHERE job_id = $1::uuid "
                      "AND seq = $3::int)) AND seq <= $3::int) w ON w.seq = i.seq AND w.attempt = i.attempt "
                      "WHERE i.job_id = $1::uuid AND i.seq = $3::int",
                      3, params);
    if (!res)
        return;
    if (PQntuples(res) == 0) {
        PQclear(res);
        if (att_s)
            api_reply_code(r, KF_NOT_FOUND, "not-found", "job %s has no iteration %s in attempt %s", r->param, seq,
                           att_s);
        else
            api_reply_code(r, KF_NOT_FOUND, "not-found", "job %s has no iteration %s", r->param, seq);
        return;
    }
    doc = cJSON_Parse(PQgetvalue(res, 0, 0));
    snprintf(attempt, sizeof(attempt), "%s", PQgetvalue(res, 0, 1));
    have_prev = !PQgetisnull(res, 0, 2);
    snprintf(prev_seq, sizeof(prev_seq), "%s", have_prev ? PQgetvalue(res, 0, 2) : "");
    PQclear(res);
    if (!doc) {
        api_reply_code(r, KF_INTERNAL, "internal", "the iteration could not be read; the request id is in the server log");
        return;
    }
    if (!api_run_source(r, r->param, attempt, seq, &prev, &cur))
        goto out;
    if (cur)
        cJSON_AddStringToObject(doc, "source", cur);
    else
        cJSON_AddNullToObject(doc, "source");
    if (have_prev && prev && cur) {
        kf_buf d = KF_BUF_INIT;
        snprintf(label_a, sizeof(label_a), "a/kernel.py (iteration %s)", prev_seq);
        snprintf(label_b, sizeof(label_b), "b/kernel.py (iteration %s)", seq);
        kf_diff_unified(prev, cur, label_a, label_b, &d, NULL);
        cJSON_AddStringToObject(doc, "source_diff", d.data);
        kf_buf_release(&d);
    } else {
        cJSON_AddNullToObject(doc, "source_diff");
    }
    api_reply_json(r, 200, doc);
out:
    cJSON_Delete(doc);
    free(prev);
    free(cur);
}
