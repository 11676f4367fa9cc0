/* api_internal — the worker-only endpoints of docs/protocol.md.
 *
 * Every report is fenced by (job_id, attempt): the job row is locked, a
 * report from an attempt older than the job's current one, or for a job
 * that already ended, is refused with 409 (type stale-attempt) and changes
 * nothing.  Reports are idempotent: a repeat is answered 200 and changes
 * nothing.  The final result goes into job_results exactly once (INSERT ..
 * ON CONFLICT DO NOTHING) in the same transaction as the state change and
 * its event. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the locked job row says. */
typedef struct api_fence {
    char state[16];
    int  attempt;
    bool cancel_requested;
} api_fence;

/* BEGIN, lock the job, fill f.  False after answering (404, 503). */
static bool api_fence_lock(api_req *r, api_fence *f)
{
    const char *params[1] = { r->param };
    PGresult *res;

    if (!kf_uuid_valid(r->param)) {
        api_reply_problem(r, 404, "not-found", "Not found", "no such job (job ids are UUIDs)");
        return false;
    }
    if (!api_req_begin(r))
        return false;
    res = api_req_sql(r, "SELECT state, attempt, cancel_requested FROM jobs WHERE id = $1::uuid FOR UPDATE", 1,
                      params);
    if (!res)
        return false;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_reply_problem(r, 404, "not-found", "Not found", "no job with id %s", r->param);
        return false;
    }
    snprintf(f->state, sizeof(f->state), "%s", PQgetvalue(res, 0, 0));
    f->attempt = atoi(PQgetvalue(res, 0, 1));
    f->cancel_requested = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    PQclear(res);
    return true;
}

/* attempt and lease_token, common to every job report. */
static bool api_report_head(api_req *r, kf_fields *fe, int *attempt, const char **token)
{
    int64_t a = 0;

    kf_fields_int(fe, r->json, "", "attempt", true, 1, 1000000, &a);
    kf_fields_str(fe, r->json, "", "lease_token", true, 1, 128, token);
    *attempt = (int)a;
    return fe->n == 0;
}

static bool api_exec(api_req *r, const char *sql, int n, const char *const *params)
{
    PGresult *res = api_req_sql(r, sql, n, params);
    if (!res)
        return false;
    PQclear(res);
    return true;
}

/* Reply {"id","state","attempt","cancel_requested","changed"}. */
static void api_report_ok(api_req *r, const char *state, int attempt, bool cancel, bool changed)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->param);
    cJSON_AddStringToObject(o, "state", state);
    cJSON_AddNumberToObject(o, "attempt", attempt);
    cJSON_AddBoolToObject(o, "cancel_requested", cancel);
    cJSON_AddBoolToObject(o, "changed", changed);
    api_reply_json(r, 200, o);
    cJSON_Delete(o);
}

void api_h_internal_start(api_req *r)
{
    kf_fields fe;
    int attempt = 0;
    const char *token = NULL, *worker = NULL;
    char att[16];
    const char *params[4];
    api_fence f;

    kf_fields_init(&fe);
    api_report_head(r, &fe, &attempt, &token);
    kf_fields_str(&fe, r->json, "", "worker", true, 1, 128, &worker);
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        return;
    }
    if (!api_fence_lock(r, &f))
        return;
    if (attempt < f.attempt) {
        api_reply_problem(r, 409, "stale-attempt", "Stale attempt or lease",
                          "job %s is on attempt %d; this report is from attempt %d", r->param, f.attempt, attempt);
        return;
    }
    if (kf_job_state_terminal(f.state)) {
        api_reply_problem(r, 409, "stale-attempt", "Stale attempt or lease",
                          "job %s has ended (%s) and takes no more reports", r->param, f.state);
        return;
    }
    if (attempt == f.attempt) {
        api_report_ok(r, f.state, f.attempt, f.cancel_requested, false);
        return;
    }
    snprintf(att, sizeof(att), "%d", attempt);
    params[0] = r->param;
    params[1] = att;
    params[2] = worker;
    params[3] = f.state;
    /* A retry leased before the scheduler's promoter recorded it (the two
     * race): record the requeue here, so every retry has its event.  The
     * row lock makes this and the promoter's conditional update exclusive. */
    if (strcmp(f.state, "retrying") == 0) {
        if (!api_exec(r,
                      "INSERT INTO job_events (job_id, attempt, type, from_state, to_state, detail) "
                      "SELECT id, attempt, 'requeued', 'retrying', 'queued', '{\"by\":\"start\"}'::jsonb "
                      "FROM jobs WHERE id = $1::uuid",
                      1, params))
            return;
        params[3] = "queued";
    }
    if (!api_exec(r,
                  "WITH u AS (UPDATE jobs SET state = 'running', attempt = $2::int, worker_id = $3, "
                  "  started_at = coalesce(started_at, now()), updated_at = now() WHERE id = $1::uuid RETURNING id) "
                  "INSERT INTO job_events (job_id, attempt, type, from_state, to_state, detail) "
                  "SELECT id, $2::int, 'started', $4, 'running', jsonb_build_object('worker', $3::text) FROM u",
                  4, params) ||
        !api_req_commit(r))
        return;
    api_report_ok(r, "running", attempt, f.cancel_requested, true);
}

void api_h_internal_iteration(api_req *r)
{
    kf_fields fe;
    int attempt = 0;
    int64_t seq = 0;
    double lat = 0;
    bool correct = false, has_lat, has_correct;
    const char *token = NULL, *source = NULL, *diff = NULL, *action = NULL, *reason = NULL;
    const cJSON *obj = NULL;
    char *js[6] = { NULL };
    static const char *const obj_names[] = { "params", "compile", "validation", "profile", "timings" };
    char att[16], seqs[24], lats[40];
    const char *params[16];
    PGresult *res = NULL;
    api_fence f;
    bool inserted;

    kf_fields_init(&fe);
    api_report_head(r, &fe, &attempt, &token);
    kf_fields_int(&fe, r->json, "", "seq", true, 0, 1000000, &seq);
    kf_fields_str(&fe, r->json, "", "source", false, 0, KF_JOB_MAX_SOURCE_BYTES, &source);
    kf_fields_str(&fe, r->json, "", "source_diff", false, 0, KF_JOB_MAX_SOURCE_BYTES, &diff);
    kf_fields_str(&fe, r->json, "", "action", false, 0, 256, &action);
    kf_fields_str(&fe, r->json, "", "reason", false, 0, 4096, &reason);
    has_lat = kf_fields_num(&fe, r->json, "", "latency_ns", false, 0, 1e18, &lat);
    has_correct = kf_fields_bool(&fe, r->json, "", "correct", false, &correct);
    for (int i = 0; i < 5; i++) {
        obj = NULL;
        if (kf_fields_obj(&fe, r->json, "", obj_names[i], false, false, &obj))
            js[i] = kf_json_print(obj);
    }
    obj = NULL;
    if (kf_fields_obj(&fe, r->json, "", "findings", false, true, &obj))
        js[5] = kf_json_print(obj);
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        goto out;
    }
    if (!api_fence_lock(r, &f))
        goto out;
    if (attempt < f.attempt || kf_job_state_terminal(f.state)) {
        api_reply_problem(r, 409, "stale-attempt", "Stale attempt or lease",
                          "job %s is on attempt %d in state %s; this report is refused", r->param, f.attempt, f.state);
        goto out;
    }
    snprintf(att, sizeof(att), "%d", attempt);
    snprintf(seqs, sizeof(seqs), "%lld", (long long)seq);
    snprintf(lats, sizeof(lats), "%.17g", lat);
    params[0] = r->param;
    params[1] = att;
    params[2] = seqs;
    params[3] = source;
    params[4] = diff;
    params[5] = js[0] ? js[0] : "{}";
    params[6] = js[1] ? js[1] : "{}";
    params[7] = js[2] ? js[2] : "{}";
    params[8] = js[3] ? js[3] : "{}";
    params[9] = js[5] ? js[5] : "[]";
    params[10] = action;
    params[11] = reason;
    params[12] = js[4] ? js[4] : "{}";
    params[13] = has_lat ? lats : NULL;
    params[14] = has_correct ? (correct ? "t" : "f") : NULL;
    res = api_req_sql(r,
                      "INSERT INTO iterations (job_id, attempt, seq, source, source_diff, params, compile, validation, "
                      "profile, findings, action, reason, timings, latency_ns, correct) VALUES ($1::uuid, $2::int, "
                      "$3::int, $4, $5, $6::jsonb, $7::jsonb, $8::jsonb, $9::jsonb, $10::jsonb, $11, $12, $13::jsonb, "
                      "$14::float8, $15::bool) ON CONFLICT (job_id, attempt, seq) DO NOTHING RETURNING id",
                      15, params);
    if (!res)
        goto out;
    inserted = PQntuples(res) == 1;
    PQclear(res);
    res = NULL;
    if (inserted) {
        /* The best iteration is the fastest correct one. */
        if (!api_exec(r,
                      "WITH best AS (SELECT seq FROM iterations WHERE job_id = $1::uuid AND correct "
                      "  AND latency_ns IS NOT NULL ORDER BY latency_ns, attempt DESC, seq LIMIT 1) "
                      "UPDATE jobs SET attempt = greatest(attempt, $2::int), updated_at = now(), "
                      "  best_iteration = coalesce((SELECT seq FROM best), best_iteration) WHERE id = $1::uuid",
                      2, params) ||
            !api_exec(r,
                      "INSERT INTO job_events (job_id, attempt, type, from_state, to_state, detail) "
                      "SELECT $1::uuid, $2::int, 'iteration', state, state, jsonb_build_object('seq', $3::int, "
                      "'latency_ns', $4::float8, 'correct', $5::bool) FROM jobs WHERE id = $1::uuid",
                      5, (const char *const[]){ params[0], params[1], params[2], params[13], params[14] }))
            goto out;
    }
    if (!api_req_commit(r))
        goto out;
    api_report_ok(r, f.state, attempt > f.attempt ? attempt : f.attempt, f.cancel_requested, inserted);
out:
    PQclear(res);
    for (int i = 0; i < 6; i++)
        free(js[i]);
}

void api_h_internal_result(api_req *r)
{
    static const char *const states[] = { "succeeded", "failed", NULL };
    kf_fields fe;
    int attempt = 0;
    const char *token = NULL, *state = NULL, *error = NULL, *worker = NULL, *new_state;
    const cJSON *result = NULL;
    bool retry = false;
    char *result_s = NULL, att[16];
    const char *params[6];
    PGresult *res = NULL;
    api_fence f;

    kf_fields_init(&fe);
    api_report_head(r, &fe, &attempt, &token);
    kf_fields_enum(&fe, r->json, "", "state", true, states, &state);
    kf_fields_obj(&fe, r->json, "", "result", false, false, &result);
    kf_fields_str(&fe, r->json, "", "error", false, 0, 8192, &error);
    kf_fields_bool(&fe, r->json, "", "retry", false, &retry);
    kf_fields_str(&fe, r->json, "", "worker", false, 1, 128, &worker);
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        return;
    }
    if (strcmp(state, "succeeded") == 0)
        retry = false;
    if (!api_fence_lock(r, &f))
        return;
    if (attempt < f.attempt) {
        api_reply_problem(r, 409, "stale-attempt", "Stale attempt or lease",
                          "job %s is on attempt %d; this result is from attempt %d", r->param, f.attempt, attempt);
        return;
    }
    snprintf(att, sizeof(att), "%d", attempt);
    params[0] = r->param;
    params[1] = att;
    /* A result already recorded: the same report again is a no-op. */
    res = api_req_sql(r, "SELECT attempt, state FROM job_results WHERE job_id = $1::uuid", 1, params);
    if (!res)
        return;
    if (PQntuples(res) == 1) {
        bool same = atoi(PQgetvalue(res, 0, 0)) == attempt && strcmp(PQgetvalue(res, 0, 1), state) == 0 && !retry;
        PQclear(res);
        if (same)
            api_report_ok(r, f.state, f.attempt, f.cancel_requested, false);
        else
            api_reply_problem(r, 409, "stale-attempt", "Stale attempt or lease",
                              "job %s already has its final result (%s); this report is refused", r->param, f.state);
        return;
    }
    PQclear(res);
    res = NULL;
    if (kf_job_state_terminal(f.state)) {
        api_reply_problem(r, 409, "stale-attempt", "Stale attempt or lease",
                          "job %s has ended (%s) and takes no more reports", r->param, f.state);
        return;
    }
    if (retry && !f.cancel_requested) {
        if (strcmp(f.state, "retrying") == 0 && attempt == f.attempt) {
            api_report_ok(r, f.state, f.attempt, f.cancel_requested, false);
            return;
        }
        params[2] = error;
        params[3] = f.state;
        if (!api_exec(r,
                      "WITH u AS (UPDATE jobs SET state = 'retrying', attempt = greatest(attempt, $2::int), "
                      "  last_error = $3, updated_at = now() WHERE id = $1::uuid RETURNING id) "
                      "INSERT INTO job_events (job_id, attempt, type, from_state, to_state, detail) "
                      "SELECT id, $2::int, 'retrying', $4, 'retrying', jsonb_build_object('error', $3::text) FROM u",
                      4, params) ||
            !api_req_commit(r))
            return;
        api_report_ok(r, "retrying", attempt, false, true);
        return;
    }
    /* Final: succeeded, failed, or cancelled when a cancel was asked for. */
    new_state = strcmp(state, "succeeded") == 0 ? "succeeded" : f.cancel_requested ? "cancelled" : "failed";
    result_s = result ? kf_json_print(result) : kf_strdup("{}");
    params[2] = state;
    params[3] = result_s;
    params[4] = error;
    params[5] = new_state;
    res = api_req_sql(r,
                      "INSERT INTO job_results (job_id, attempt, state, result, error, worker_id) "
                      "SELECT $1::uuid, $2::int, $3, $4::jsonb, $5, coalesce($6, worker_id) FROM jobs "
                      "WHERE id = $1::uuid ON CONFLICT (job_id) DO NOTHING RETURNING 1",
                      6, (const char *const[]){ params[0], params[1], params[2], params[3], params[4], worker });
    if (!res)
        goto out;
    if (PQntuples(res) == 1) {
        const char *p2[7] = { params[0], params[1], params[2], params[3], params[4], params[5], f.state };
        if (!api_exec(r,
                      "WITH u AS (UPDATE jobs SET state = $6, attempt = greatest(attempt, $2::int), result = $4::jsonb, "
                      "  last_error = $5, finished_at = now(), updated_at = now() WHERE id = $1::uuid RETURNING id) "
                      "INSERT INTO job_events (job_id, attempt, type, from_state, to_state, detail) "
                      "SELECT id, $2::int, $6, $7, $6, jsonb_build_object('error', $5::text, 'reported', $3::text) "
                      "FROM u",
                      7, p2))
            goto out;
    }
    if (!api_req_commit(r))
        goto out;
    api_report_ok(r, new_state, attempt > f.attempt ? attempt : f.attempt, f.cancel_requested, true);
out:
    PQclear(res);
    free(result_s);
}

static bool api_worker_id_valid(const char *id)
{
    size_t n = strlen(id);

    if (n == 0 || n > 128)
        return false;
    for (const char *p = id; *p; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_.-:", *p)))
            return false;
    }
    return true;
}

void api_h_internal_heartbeat(api_req *r)
{
    kf_fields fe;
    const cJSON *targets = NULL, *backends = NULL, *c;
    const char *host = NULL;
    char *tl = NULL, *bl = NULL;
    const char *params[4];
    kf_buf t = KF_BUF_INIT, b = KF_BUF_INIT;

    kf_fields_init(&fe);
    if (!api_worker_id_valid(r->param)) {
        api_reply_problem(r, 404, "not-found", "Not found", "a worker id is 1-128 of [A-Za-z0-9_.:-]");
        return;
    }
    kf_fields_obj(&fe, r->json, "", "targets", false, true, &targets);
    kf_fields_obj(&fe, r->json, "", "backends", false, true, &backends);
    kf_fields_str(&fe, r->json, "", "host", false, 0, 255, &host);
    kf_buf_addc(&t, '{');
    kf_buf_addc(&b, '{');
    cJSON_ArrayForEach(c, targets)
    {
        if (!cJSON_IsString(c) || !kf_ident_valid(c->valuestring, 32, "-")) {
            kf_fields_add(&fe, "targets", "type", "must be an array of target names");
            break;
        }
        kf_buf_addf(&t, "%s%s", t.len > 1 ? "," : "", c->valuestring);
    }
    cJSON_ArrayForEach(c, backends)
    {
        if (!cJSON_IsString(c) || !kf_ident_valid(c->valuestring, 32, "-")) {
            kf_fields_add(&fe, "backends", "type", "must be an array of backend names");
            break;
        }
        kf_buf_addf(&b, "%s%s", b.len > 1 ? "," : "", c->valuestring);
    }
    kf_buf_addc(&t, '}');
    kf_buf_addc(&b, '}');
    tl = kf_buf_detach(&t);
    bl = kf_buf_detach(&b);
    if (fe.n) {
        api_reply_fields(r, 422, "validation", &fe);
        goto out;
    }
    params[0] = r->param;
    params[1] = host;
    params[2] = tl;
    params[3] = bl;
    if (!api_exec(r,
                  "INSERT INTO workers (id, hostname, targets, backends) VALUES ($1, $2, $3::text[], $4::text[]) "
                  "ON CONFLICT (id) DO UPDATE SET hostname = EXCLUDED.hostname, targets = EXCLUDED.targets, "
                  "backends = EXCLUDED.backends, last_seen = now()",
                  4, params))
        goto out;
    {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", r->param);
        cJSON_AddBoolToObject(o, "ok", 1);
        api_reply_json(r, 200, o);
        cJSON_Delete(o);
    }
out:
    free(tl);
    free(bl);
}
