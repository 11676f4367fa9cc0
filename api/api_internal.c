/* api_internal — the worker-only endpoints of docs/protocol.md.
 *
 * Every job report is bound to the lease the queue granted (api_lease_redis,
 * api_lease_recorded):
 *   - the token's worker: a worker token speaks only for the worker id that
 *     is its name (another id in the path or body is 403 forbidden);
 *   - Redis: the report's (attempt, lease_token, worker) must be the latest
 *     lease the queue granted for the job (kf_queue_grant_get; it may have
 *     ended since, as long as no newer attempt was granted: a finished
 *     attempt's late result is not lost).  Another worker's lease is 403
 *     (type not-lease-holder); an older attempt, an attempt never granted,
 *     a job nobody leased or a wrong token is 409 (type stale-attempt);
 *   - PostgreSQL: the job row is locked; a report from an attempt older
 *     than the job's current one, or for a job that already ended, is 409.
 *     /start records the lease (attempt, worker, SHA-256 of the token).
 * When Redis cannot tell (unreachable, or the job has left it) the lease
 * recorded at /start decides instead; when neither can, the report is 503
 * (Redis unreachable: retry later) or 409 (no such lease), never accepted
 * blindly.  A refused report changes nothing.
 *
 * A result may carry the attempt's provenance (a bounded object of short
 * strings: api_provenance_check), stored in jobs.provenance by the final
 * move itself, and calibration records (result.calibration, checked by
 * api_calib_check), stored in the calibration table by the same
 * transaction when the job succeeds (api_calib_store); a success also offers the job's best kernel to the kernel
 * library in that move (kf_db_apply, db/kf_library.h).  api_report_lease() gives another file's report
 * route (api_artifacts.c) the same lease checks.
 *
 * Reports are idempotent: a repeat is answered 200 and changes nothing.
 * The final result goes into job_results exactly once (INSERT .. ON
 * CONFLICT DO NOTHING) in the same transaction as the state change and its
 * event.  Iteration reports are bounded in size (KFORGE_MAX_ITERATION_BYTES,
 * 413) and in number per attempt (KFORGE_MAX_ITERATIONS, 422). */
#include "api.h"
#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_log.h"
#include "kf_queue.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the locked job row says. */
typedef struct api_fence {
    char state[16];
    int  attempt;
    bool cancel_requested;
    char worker[API_NAME_MAX + 1];   /* worker_id of the recorded lease, or "" */
    char lease_hash[72];             /* "\\x<hex>" of its token's SHA-256, or "" */
} api_fence;

/* BEGIN, lock the job, fill f.  False after answering (404, 503). */
static bool api_fence_lock(api_req *r, api_fence *f)
{
    const char *params[1] = { r->param };
    PGresult *res;
    long att = 0;

    if (!api_req_begin(r))
        return false;
    res = api_req_sql(r,
                      "SELECT state, attempt, cancel_requested, coalesce(worker_id, ''), "
                      "coalesce(lease_token_hash::text, '') FROM jobs WHERE id = $1::uuid FOR UPDATE",
                      1, params);
    if (!res)
        return false;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no job with id %s", r->param);
        return false;
    }
    if (!api_pg_num(r, res, 0, 1, 0, INT_MAX, &att)) {
        PQclear(res);
        return false;
    }
    snprintf(f->state, sizeof(f->state), "%s", PQgetvalue(res, 0, 0));
    f->attempt = (int)att;
    f->cancel_requested = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    snprintf(f->worker, sizeof(f->worker), "%s", PQgetvalue(res, 0, 3));
    snprintf(f->lease_hash, sizeof(f->lease_hash), "%s", PQgetvalue(res, 0, 4));
    PQclear(res);
    return true;
}

/* The lease a report claims to run under. */
typedef struct api_claim {
    int         attempt;
    const char *token;
    const char *worker;              /* the token's worker id */
    char        token_hash[67];      /* api_token_hash_hex(token) */
    int         redis;               /* API_LEASE_* from the queue */
} api_claim;

enum {
    API_LEASE_OK = 1,     /* the queue's latest lease is this one */
    API_LEASE_ABSENT,     /* the job is not in Redis */
    API_LEASE_UNKNOWN,    /* Redis unreachable */
};

static bool api_str_eq_ct(const char *a, const char *b)
{
    size_t n = strlen(a);
    return n == strlen(b) && CRYPTO_memcmp(a, b, n) == 0;
}

static void api_stale(api_req *r, const char *fmt_detail)
{
    api_reply_code(r, KF_STALE, "stale-attempt", "%s", fmt_detail);
}

static void api_not_holder(api_req *r, int attempt, const char *worker)
{
    /* Literal: the title names the lease, which KF_FORBIDDEN's role title does not. */
    api_reply_problem(r, 403, "not-lease-holder", "Not this worker's lease",
                      "attempt %d of job %s is leased to another worker, not to %s (this token's worker)",
                      attempt, r->param, worker);
}

/* Check the claim against the latest lease Redis granted for the job (no
 * PostgreSQL lock held).  False after answering 403/409; true with
 * c->redis set otherwise. */
static bool api_lease_redis(api_req *r, api_claim *c)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *q = api_qpool_get(api_req_qpool(r), &e);
    kf_queue_grant g;
    bool exists = false;
    char msg[320];

    if (!q || kf_queue_grant_get(q, r->param, &g, &exists, &e) != KF_OK) {
        kf_log_warn("cannot check a report's lease in Redis job=%s err=\"%s\"", r->param, e.msg);
        api_qpool_put(api_req_qpool(r), q);
        c->redis = API_LEASE_UNKNOWN;
        return true;
    }
    api_qpool_put(api_req_qpool(r), q);
    if (!exists) {
        c->redis = API_LEASE_ABSENT;
        return true;
    }
    if (c->attempt < g.attempt) {
        snprintf(msg, sizeof(msg), "attempt %d of job %s is over: the queue has granted attempt %d since",
                 c->attempt, r->param, g.attempt);
        api_stale(r, msg);
        return false;
    }
    if (c->attempt > g.attempt) {
        snprintf(msg, sizeof(msg), "the queue never granted attempt %d of job %s (its latest is attempt %d)",
                 c->attempt, r->param, g.attempt);
        api_stale(r, msg);
        return false;
    }
    if (!g.worker[0] || !g.token[0]) {
        snprintf(msg, sizeof(msg), "attempt %d of job %s holds no lease in the queue (the job is %s); only the "
                 "worker that leases it may report", c->attempt, r->param, g.state);
        api_stale(r, msg);
        return false;
    }
    if (strcmp(g.worker, c->worker) != 0) {
        api_not_holder(r, c->attempt, c->worker);
        return false;
    }
    if (!api_str_eq_ct(g.token, c->token)) {
        snprintf(msg, sizeof(msg), "lease_token does not match the lease the queue granted for attempt %d of job %s",
                 c->attempt, r->param);
        api_stale(r, msg);
        return false;
    }
    c->redis = API_LEASE_OK;
    return true;
}

/* With the job row locked: when Redis could not tell, the lease recorded
 * at /start must be this one.  False after answering. */
static bool api_lease_recorded(api_req *r, const api_claim *c, const api_fence *f)
{
    char msg[320];

    if (c->redis == API_LEASE_OK)
        return true;
    if (c->attempt == f->attempt && f->lease_hash[0] && strcmp(f->worker, c->worker) == 0 &&
        api_str_eq_ct(f->lease_hash, c->token_hash))
        return true;
    if (c->attempt < f->attempt) {
        snprintf(msg, sizeof(msg), "job %s is on attempt %d; this report is from attempt %d", r->param, f->attempt,
                 c->attempt);
        api_stale(r, msg);
    } else if (c->attempt == f->attempt && f->lease_hash[0] && strcmp(f->worker, c->worker) != 0) {
        api_not_holder(r, c->attempt, c->worker);
    } else if (c->attempt == f->attempt && f->lease_hash[0]) {
        snprintf(msg, sizeof(msg), "lease_token does not match the lease recorded for attempt %d of job %s",
                 c->attempt, r->param);
        api_stale(r, msg);
    } else if (c->redis == API_LEASE_UNKNOWN) {
        r->retry_after = 2;
        api_reply_code(r, KF_UNAVAILABLE, "unavailable",
                       "cannot check this report against the queue (Redis is unreachable) and no lease of "
                       "attempt %d is recorded yet; send it again later", c->attempt);
    } else {
        snprintf(msg, sizeof(msg), "job %s is not in the queue (it has ended, was cancelled or is not queued yet) and "
                 "no lease of attempt %d is recorded: nothing to report on", r->param, c->attempt);
        api_stale(r, msg);
    }
    return false;
}

/* attempt, lease_token and worker, common to every job report, and the
 * claim they make.  The optional "worker" field must name the token's
 * worker.  False after answering (404, 422, 403, 409, 503). */
static bool api_report_head(api_req *r, kf_fields *fe, api_claim *c)
{
    int64_t a = 0;
    const char *worker = NULL;

    memset(c, 0, sizeof(*c));
    if (!kf_uuid_valid(r->param)) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no such job (job ids are UUIDs)");
        return false;
    }
    kf_fields_int(fe, r->json, "", "attempt", true, 1, 1000000, &a);
    kf_fields_str(fe, r->json, "", "lease_token", true, 1, 64, &c->token);
    kf_fields_str(fe, r->json, "", "worker", false, 1, API_NAME_MAX, &worker);
    c->attempt = (int)a;
    c->worker = r->who.name;
    if (fe->n)
        return true;   /* the caller adds its own fields, then answers 422 */
    if (worker && strcmp(worker, r->who.name) != 0) {
        /* Literal: a worker-name mismatch, not the role mismatch KF_FORBIDDEN's title names. */
        api_reply_problem(r, 403, "forbidden", "Not allowed for this token's worker",
                          "this token belongs to worker %s and cannot report as %s; give each worker its own "
                          "token (kforge-api token create --role worker --name %s)",
                          r->who.name, worker, worker);
        return false;
    }
    api_token_hash_hex(c->token, c->token_hash);
    return true;
}

/* 422 when fields were wrong, else the Redis half of the lease check.
 * False after answering. */
static bool api_report_checked(api_req *r, const kf_fields *fe, api_claim *c)
{
    if (fe->n) {
        api_reply_fields(r, 422, "validation", fe);
        return false;
    }
    return api_lease_redis(r, c);
}

static bool api_exec(api_req *r, const char *sql, int n, const char *const *params)
{
    PGresult *res = api_req_sql(r, sql, n, params);
    if (!res)
        return false;
    PQclear(res);
    return true;
}

bool api_report_lease(api_req *r, kf_fields *fe, int *attempt)
{
    api_claim c;
    api_fence f;

    if (!api_report_head(r, fe, &c) || !api_report_checked(r, fe, &c))
        return false;
    if (!api_fence_lock(r, &f) || !api_lease_recorded(r, &c, &f))
        return false;
    if (c.attempt < f.attempt || kf_job_state_terminal(f.state)) {
        api_reply_code(r, KF_STALE, "stale-attempt",
                       "job %s is on attempt %d in state %s; this report is refused", r->param, f.attempt, f.state);
        return false;
    }
    *attempt = c.attempt;
    return true;
}

/* The result's provenance: an object of at most the known members, each a
 * string of 1..128 printable ASCII characters; "worker", when given, must
 * be the token's worker (403 otherwise, as for the report's own "worker").
 * *out gets its JSON text (caller frees) or stays NULL when absent.  False
 * after answering 403. */
static bool api_provenance_check(api_req *r, kf_fields *fe, char **out)
{
    static const char *const keys[] = { "worker",   "backend", "sim_build", "target_hash", "template_hash", "compiler",
                                        "runtime",  "driver",  "neff_sha256", "neuron_core", "isolation", NULL };
    const cJSON *p = NULL, *w;

    *out = NULL;
    if (!kf_fields_obj(fe, r->json, "", "provenance", false, false, &p))
        return true;
    if (kf_fields_refuse_unknown(fe, p, "provenance", keys) > 0)
        return true;
    for (int i = 0; keys[i]; i++) {
        const char *v = NULL;
        if (!kf_fields_str(fe, p, "provenance", keys[i], false, 1, 128, &v))
            continue;
        for (const char *q = v; *q; q++)
            if (*q < 0x20 || *q > 0x7e) {
                char path[64];
                kf_field_path(path, sizeof(path), "provenance", keys[i]);
                kf_fields_add(fe, path, "pattern", "printable ASCII only");
                break;
            }
    }
    w = cJSON_GetObjectItemCaseSensitive(p, "worker");
    if (cJSON_IsString(w) && strcmp(w->valuestring, r->who.name) != 0) {
        /* Literal: a worker-name mismatch, not the role mismatch KF_FORBIDDEN's title names. */
        api_reply_problem(r, 403, "forbidden", "Not allowed for this token's worker",
                          "provenance.worker names %.*s but this token belongs to worker %s", 128, w->valuestring,
                          r->who.name);
        return false;
    }
    *out = kf_json_print(p);
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
    api_claim c;
    api_fence f;
    kf_db_move mv = { .move = KF_MOVE_START };
    cJSON *detail;
    char *detail_s;
    bool same, ok;

    kf_fields_init(&fe);
    if (!api_report_head(r, &fe, &c) || !api_report_checked(r, &fe, &c))
        return;
    if (!api_fence_lock(r, &f) || !api_lease_recorded(r, &c, &f))
        return;
    if (c.attempt < f.attempt) {
        api_reply_code(r, KF_STALE, "stale-attempt",
                       "job %s is on attempt %d; this report is from attempt %d", r->param, f.attempt, c.attempt);
        return;
    }
    if (kf_job_state_terminal(f.state)) {
        api_reply_code(r, KF_STALE, "stale-attempt",
                       "job %s has ended (%s) and takes no more reports", r->param, f.state);
        return;
    }
    same = c.attempt == f.attempt && f.lease_hash[0] && strcmp(f.worker, c.worker) == 0 &&
           api_str_eq_ct(f.lease_hash, c.token_hash);
    if (same) {
        api_report_ok(r, f.state, f.attempt, f.cancel_requested, false);
        return;
    }
    if (c.attempt == f.attempt && strcmp(f.state, "running") == 0) {
        /* The queue granted this attempt's lease again (a re-delivery after
         * Redis lost a write): the new holder takes over the record. */
        kf_err e = KF_ERR_INIT;
        if (!api_db_ok(r, kf_db_lease_takeover(r->pg, r->param, c.attempt, c.worker, c.token_hash, &e), &e) ||
            !api_req_commit(r))
            return;
        api_report_ok(r, f.state, f.attempt, f.cancel_requested, true);
        return;
    }
    /* A retry leased before the scheduler's promoter recorded it (the two
     * race): record the requeue here, so every retry has its event.  The
     * row lock makes this and the promoter's conditional update exclusive. */
    if (strcmp(f.state, "retrying") == 0) {
        kf_db_move rq = { .move = KF_MOVE_START_REQUEUE, .job_id = r->param, .detail = "{\"by\":\"start\"}" };
        if (!api_move(r, &rq, NULL))
            return;
    }
    detail = cJSON_CreateObject();
    cJSON_AddStringToObject(detail, "worker", c.worker);
    detail_s = kf_json_print(detail);
    cJSON_Delete(detail);
    mv.job_id = r->param;
    mv.attempt = c.attempt;
    mv.worker_id = c.worker;
    mv.lease_hash = c.token_hash;
    mv.detail = detail_s;
    ok = api_move(r, &mv, NULL) && api_req_commit(r);
    free(detail_s);
    if (!ok)
        return;
    api_report_ok(r, "running", c.attempt, f.cancel_requested, true);
}

/* The ITERATION move of a recorded iteration: its event {"seq",
 * "latency_ns", "correct"} (null where the report left a field out), the
 * job's attempt raised to the report's and its best iteration updated.
 * False after answering. */
/* The iteration event's detail: seq, params, latency_ns, correct and
 * fraction_of_bound (the report's profile.floor_ns over its latency; null
 * when either is missing or not positive).  kf_db_apply adds
 * best_so_far_ns. */
static bool api_iteration_event(api_req *r, int attempt, int64_t seq, const double *lat, const bool *correct)
{
    cJSON *o = cJSON_CreateObject();
    kf_db_move mv = { .move = KF_MOVE_ITERATION, .job_id = r->param, .attempt = attempt };
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(r->json, "params");
    const cJSON *floor_ns = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->json, "profile"),
                                                             "floor_ns");
    char *detail;
    bool ok;

    cJSON_AddNumberToObject(o, "seq", (double)seq);
    cJSON_AddItemToObject(o, "params", cJSON_IsObject(params) ? cJSON_Duplicate(params, true) : cJSON_CreateObject());
    if (lat)
        cJSON_AddNumberToObject(o, "latency_ns", *lat);
    else
        cJSON_AddNullToObject(o, "latency_ns");
    if (lat && *lat > 0 && cJSON_IsNumber(floor_ns) && floor_ns->valuedouble > 0)
        cJSON_AddNumberToObject(o, "fraction_of_bound", floor_ns->valuedouble / *lat);
    else
        cJSON_AddNullToObject(o, "fraction_of_bound");
    if (correct)
        cJSON_AddBoolToObject(o, "correct", *correct);
    else
        cJSON_AddNullToObject(o, "correct");
    detail = kf_json_print(o);
    cJSON_Delete(o);
    mv.detail = detail;
    ok = api_move(r, &mv, NULL);
    free(detail);
    return ok;
}

/* A result's event detail: {"error": error or null} and, for a final
 * result, "reported": the state the worker reported.  The caller frees. */
static char *api_result_detail(const char *error, const char *reported)
{
    cJSON *o = cJSON_CreateObject();
    char *text;

    if (error)
        cJSON_AddStringToObject(o, "error", error);
    else
        cJSON_AddNullToObject(o, "error");
    if (reported)
        cJSON_AddStringToObject(o, "reported", reported);
    text = kf_json_print(o);
    cJSON_Delete(o);
    return text;
}

#define API_LLM_REPLY_MAX    262144   /* bytes of a stored turn's reply (the worker cuts longer ones) */
#define API_LLM_MESSAGES_MAX 64       /* messages one turn adds */

/* The LLM planner's member of an iteration report (migrations/0016,
 * docs/protocol.md): its shape and bounds checked, its text for the
 * iterations.llm column in *out (NULL when absent). */
static void api_llm_check(kf_fields *fe, const cJSON *body, char **out)
{
    static const char *const modes[] = { "repair", "restructure", "write", NULL };
    static const char *const roles[] = { "system", "user", "assistant", "tool", NULL };
    static const char *const allowed[] = { "mode", "accepted", "hack", "error", "usage", "turn", NULL };
    static const char *const hack_allowed[] = { "rule", "line", "message", NULL };
    static const char *const usage_allowed[] = { "prompt_tokens", "completion_tokens", NULL };
    static const char *const turn_allowed[] = { "turn", "iteration", "mode", "messages", "reply", "error", "usage",
                                                "seconds", "attempts", "messages_omitted", "reply_cut", NULL };
    const cJSON *l = NULL, *h = NULL, *u = NULL, *t = NULL, *msgs = NULL, *m;
    const char *s = NULL;
    int64_t i64 = 0;
    double d = 0;
    bool b = false;
    int k = 0;

    *out = NULL;
    if (!kf_fields_obj(fe, body, "", "llm", false, false, &l))
        return;
    kf_fields_refuse_unknown(fe, l, "llm", allowed);
    kf_fields_enum(fe, l, "llm", "mode", true, modes, &s);
    kf_fields_bool(fe, l, "llm", "accepted", false, &b);
    kf_fields_str(fe, l, "llm", "error", false, 1, 24, &s);
    if (kf_fields_obj(fe, l, "llm", "hack", false, false, &h)) {
        kf_fields_refuse_unknown(fe, h, "llm.hack", hack_allowed);
        if (kf_fields_str(fe, h, "llm.hack", "rule", true, 1, 31, &s) && !kf_ident_valid(s, 31, NULL))
            kf_fields_add(fe, "llm.hack.rule", "pattern", "a rule is a word such as numpy_on_inputs");
        kf_fields_int(fe, h, "llm.hack", "line", false, 0, 10000000, &i64);
        kf_fields_str(fe, h, "llm.hack", "message", true, 1, 1000, &s);
    }
    if (kf_fields_obj(fe, l, "llm", "usage", false, false, &u)) {
        kf_fields_refuse_unknown(fe, u, "llm.usage", usage_allowed);
        kf_fields_int(fe, u, "llm.usage", "prompt_tokens", true, 0, 1000000000000LL, &i64);
        kf_fields_int(fe, u, "llm.usage", "completion_tokens", true, 0, 1000000000000LL, &i64);
    }
    if (kf_fields_obj(fe, l, "llm", "turn", false, false, &t)) {
        const cJSON *reply = cJSON_GetObjectItemCaseSensitive(t, "reply");
        kf_fields_refuse_unknown(fe, t, "llm.turn", turn_allowed);
        kf_fields_int(fe, t, "llm.turn", "turn", true, 0, 1000000, &i64);
        kf_fields_int(fe, t, "llm.turn", "iteration", true, 0, 1000000, &i64);
        kf_fields_enum(fe, t, "llm.turn", "mode", true, modes, &s);
        if (!cJSON_IsNull(reply))
            kf_fields_str(fe, t, "llm.turn", "reply", true, 0, API_LLM_REPLY_MAX, &s);
        kf_fields_str(fe, t, "llm.turn", "error", false, 1, 24, &s);
        kf_fields_num(fe, t, "llm.turn", "seconds", false, 0, 1e7, &d);
        kf_fields_int(fe, t, "llm.turn", "attempts", false, 0, 1000, &i64);
        kf_fields_bool(fe, t, "llm.turn", "messages_omitted", false, &b);
        kf_fields_bool(fe, t, "llm.turn", "reply_cut", false, &b);
        if (kf_fields_obj(fe, t, "llm.turn", "usage", false, false, &u)) {
            kf_fields_refuse_unknown(fe, u, "llm.turn.usage", usage_allowed);
            kf_fields_int(fe, u, "llm.turn.usage", "prompt_tokens", true, 0, 1000000000000LL, &i64);
            kf_fields_int(fe, u, "llm.turn.usage", "completion_tokens", true, 0, 1000000000000LL, &i64);
        }
        if (kf_fields_obj(fe, t, "llm.turn", "messages", false, true, &msgs)) {
            if (cJSON_GetArraySize(msgs) > API_LLM_MESSAGES_MAX)
                kf_fields_add(fe, "llm.turn.messages", "count", "at most %d messages in one turn", API_LLM_MESSAGES_MAX);
            cJSON_ArrayForEach(m, msgs)
            {
                char mp[48];
                snprintf(mp, sizeof(mp), "llm.turn.messages[%d]", k++);
                if (!cJSON_IsObject(m)) {
                    kf_fields_add(fe, mp, "type", "a message is an object");
                    break;
                }
                kf_fields_enum(fe, m, mp, "role", true, roles, &s);
            }
        }
    }
    if (fe->n == 0)
        *out = kf_json_print(l);
}

void api_h_internal_iteration(api_req *r)
{
    kf_fields fe;
    api_claim c;
    const api_server_config *cfg = api_req_config(r);
    int64_t seq = 0;
    double lat = 0;
    bool correct = false, has_lat, has_correct;
    const char *source = NULL, *diff = NULL, *action = NULL, *reason = NULL;
    const cJSON *obj = NULL;
    char *js[6] = { NULL }, *llm = NULL;
    static const char *const obj_names[] = { "params", "compile", "validation", "profile", "timings" };
    char att[16], seqs[24], lats[40], maxs[16];
    const char *params[17];
    PGresult *res = NULL;
    api_fence f;
    bool inserted;

    kf_fields_init(&fe);
    if (r->body.len > (size_t)cfg->max_iteration_bytes) {
        /* Literal: the limit is the iteration report's, not KF_TOO_LARGE's body limit. */
        api_reply_problem(r, 413, "iteration-too-large", "Iteration report too large",
                          "this iteration report is %zu bytes; the API records at most %ld per iteration "
                          "(KFORGE_MAX_ITERATION_BYTES): send a diff or trim the profile",
                          r->body.len, cfg->max_iteration_bytes);
        return;
    }
    if (!api_report_head(r, &fe, &c))
        return;
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
    api_llm_check(&fe, r->json, &llm);
    if (!api_report_checked(r, &fe, &c))
        goto out;
    if (!api_fence_lock(r, &f) || !api_lease_recorded(r, &c, &f))
        goto out;
    if (c.attempt < f.attempt || kf_job_state_terminal(f.state)) {
        api_reply_code(r, KF_STALE, "stale-attempt",
                       "job %s is on attempt %d in state %s; this report is refused", r->param, f.attempt, f.state);
        goto out;
    }
    snprintf(att, sizeof(att), "%d", c.attempt);
    snprintf(seqs, sizeof(seqs), "%lld", (long long)seq);
    snprintf(maxs, sizeof(maxs), "%d", cfg->max_iterations);
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
    params[15] = llm;
    /* At most max_iterations rows per attempt (a repeat of a recorded seq
     * is still the idempotent no-op); the row lock makes the count exact. */
    res = api_req_sql(r,
                      "SELECT count(*) >= $4::int AND NOT bool_or(seq = $3::int) IS TRUE FROM iterations "
                      "WHERE job_id = $1::uuid AND attempt = $2::int",
                      4, (const char *const[]){ params[0], params[1], params[2], maxs });
    if (!res)
        goto out;
    if (strcmp(PQgetvalue(res, 0, 0), "t") == 0) {
        /* Literal: the title names the iteration cap, which KF_UNPROCESSABLE's does not. */
        api_reply_problem(r, 422, "too-many-iterations", "Too many iterations",
                          "attempt %d of job %s already recorded %d iterations, the most one attempt may "
                          "(KFORGE_MAX_ITERATIONS); this one is not recorded",
                          c.attempt, r->param, cfg->max_iterations);
        goto out;
    }
    PQclear(res);
    res = api_req_sql(r,
                      "INSERT INTO iterations (job_id, attempt, seq, source, source_diff, params, compile, validation, "
                      "profile, findings, action, reason, timings, latency_ns, correct, llm) VALUES ($1::uuid, "
                      "$2::int, $3::int, $4, $5, $6::jsonb, $7::jsonb, $8::jsonb, $9::jsonb, $10::jsonb, $11, $12, "
                      "$13::jsonb, $14::float8, $15::bool, $16::jsonb) ON CONFLICT (job_id, attempt, seq) DO NOTHING "
                      "RETURNING id",
                      16, params);
    if (!res)
        goto out;
    inserted = PQntuples(res) == 1;
    PQclear(res);
    res = NULL;
    /* The move also makes the fastest correct iteration the job's best. */
    if (inserted && !api_iteration_event(r, c.attempt, seq, has_lat ? &lat : NULL, has_correct ? &correct : NULL))
        goto out;
    if (!api_req_commit(r))
        goto out;
    api_report_ok(r, f.state, c.attempt > f.attempt ? c.attempt : f.attempt, f.cancel_requested, inserted);
out:
    PQclear(res);
    for (int i = 0; i < 6; i++)
        free(js[i]);
    free(llm);
}

void api_h_internal_result(api_req *r)
{
    static const char *const states[] = { "succeeded", "failed", NULL };
    kf_fields fe;
    api_claim c;
    const char *state = NULL, *error = NULL, *new_state;
    const cJSON *result = NULL;
    bool retry = false;
    char *result_s = NULL, *detail = NULL, *prov = NULL, *calib = NULL, att[16];
    const char *params[5];
    PGresult *res = NULL;
    api_fence f;

    kf_fields_init(&fe);
    if (!api_report_head(r, &fe, &c))
        return;
    kf_fields_enum(&fe, r->json, "", "state", true, states, &state);
    kf_fields_obj(&fe, r->json, "", "result", false, false, &result);
    kf_fields_str(&fe, r->json, "", "error", false, 0, 8192, &error);
    kf_fields_bool(&fe, r->json, "", "retry", false, &retry);
    api_calib_check(result, &fe, &calib);
    if (!api_provenance_check(r, &fe, &prov))
        goto out;
    if (!api_report_checked(r, &fe, &c))
        goto out;
    if (strcmp(state, "succeeded") == 0)
        retry = false;
    if (!api_fence_lock(r, &f) || !api_lease_recorded(r, &c, &f))
        goto out;
    if (c.attempt < f.attempt) {
        api_reply_code(r, KF_STALE, "stale-attempt",
                       "job %s is on attempt %d; this result is from attempt %d", r->param, f.attempt, c.attempt);
        goto out;
    }
    snprintf(att, sizeof(att), "%d", c.attempt);
    params[0] = r->param;
    params[1] = att;
    /* A result already recorded: the same report again is a no-op. */
    res = api_req_sql(r, "SELECT attempt, state FROM job_results WHERE job_id = $1::uuid", 1, params);
    if (!res)
        goto out;
    if (PQntuples(res) == 1) {
        long done_att = 0;
        bool same;
        if (!api_pg_num(r, res, 0, 0, 0, INT_MAX, &done_att))
            goto out;
        same = done_att == c.attempt && strcmp(PQgetvalue(res, 0, 1), state) == 0 && !retry;
        PQclear(res);
        res = NULL;
        if (same)
            api_report_ok(r, f.state, f.attempt, f.cancel_requested, false);
        else
            api_reply_code(r, KF_STALE, "stale-attempt",
                           "job %s already has its final result (%s); this report is refused", r->param, f.state);
        goto out;
    }
    PQclear(res);
    res = NULL;
    if (kf_job_state_terminal(f.state)) {
        api_reply_code(r, KF_STALE, "stale-attempt",
                       "job %s has ended (%s) and takes no more reports", r->param, f.state);
        goto out;
    }
    if (retry && !f.cancel_requested) {
        if (strcmp(f.state, "retrying") == 0 && c.attempt == f.attempt) {
            api_report_ok(r, f.state, f.attempt, f.cancel_requested, false);
            goto out;
        }
        {
            kf_db_move mv = { .move = KF_MOVE_RETRY, .job_id = r->param, .attempt = c.attempt, .error = error };

            detail = api_result_detail(error, NULL);
            mv.detail = detail;
            if (!api_move(r, &mv, NULL) || !api_req_commit(r))
                goto out;
        }
        api_report_ok(r, "retrying", c.attempt, false, true);
        goto out;
    }
    /* Final: succeeded, failed, or cancelled when a cancel was asked for. */
    new_state = strcmp(state, "succeeded") == 0 ? "succeeded" : f.cancel_requested ? "cancelled" : "failed";
    result_s = result ? kf_json_print(result) : kf_strdup("{}");
    params[2] = state;
    params[3] = result_s;
    params[4] = error;
    res = api_req_sql(r,
                      "INSERT INTO job_results (job_id, attempt, state, result, error, worker_id) "
                      "SELECT $1::uuid, $2::int, $3, $4::jsonb, $5, $6 FROM jobs "
                      "WHERE id = $1::uuid ON CONFLICT (job_id) DO NOTHING RETURNING 1",
                      6, (const char *const[]){ params[0], params[1], params[2], params[3], params[4], c.worker });
    if (!res)
        goto out;
    if (PQntuples(res) == 1) {
        kf_db_move mv = { .move = strcmp(new_state, "succeeded") == 0 ? KF_MOVE_SUCCEED
                                  : strcmp(new_state, "cancelled") == 0 ? KF_MOVE_FINISH_CANCELLED
                                                                         : KF_MOVE_FAIL,
                          .job_id = r->param, .attempt = c.attempt, .error = error, .result = result_s,
                          .provenance = prov, .store = api_req_config(r)->artifacts };

        /* The move writes the provenance and, for a success, offers the
         * job's best kernel to the library (db/kf_library.h), all in this
         * transaction. */
        detail = api_result_detail(error, state);
        mv.detail = detail;
        if (!api_move(r, &mv, NULL))
            goto out;
        if (mv.move == KF_MOVE_SUCCEED && !api_calib_store(r, r->param, att, calib))
            goto out;
    }
    if (!api_req_commit(r))
        goto out;
    api_report_ok(r, new_state, c.attempt > f.attempt ? c.attempt : f.attempt, f.cancel_requested, true);
out:
    PQclear(res);
    free(result_s);
    free(detail);
    free(prov);
    free(calib);
}

void api_h_internal_heartbeat(api_req *r)
{
    kf_fields fe;
    const cJSON *targets = NULL, *backends = NULL, *sick = NULL, *c;
    static const char *const sandboxes[] = { "strict", "unconfined", NULL };
    const char *host = NULL, *sandbox = NULL;
    char *tl = NULL, *bl = NULL, *ul = NULL;
    const char *params[6];
    kf_buf t = KF_BUF_INIT, b = KF_BUF_INIT;

    kf_fields_init(&fe);
    if (!api_worker_id_valid(r->param)) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "a worker id is 1-128 of [A-Za-z0-9_.:-]");
        return;
    }
    if (strcmp(r->param, r->who.name) != 0) {
        /* Literal: a worker-name mismatch, not the role mismatch KF_FORBIDDEN's title names. */
        api_reply_problem(r, 403, "forbidden", "Not allowed for this token's worker",
                          "this token belongs to worker %s and cannot send heartbeats for %s; give each worker its "
                          "own token (kforge-api token create --role worker --name %s) or set KFORGE_WORKER_ID=%s",
                          r->who.name, r->param, r->param, r->who.name);
        return;
    }
    kf_fields_obj(&fe, r->json, "", "targets", false, true, &targets);
    kf_fields_obj(&fe, r->json, "", "backends", false, true, &backends);
    kf_fields_str(&fe, r->json, "", "host", false, 0, 255, &host);
    kf_fields_enum(&fe, r->json, "", "sandbox", false, sandboxes, &sandbox);
    kf_fields_obj(&fe, r->json, "", "unhealthy_backends", false, false, &sick);
    cJSON_ArrayForEach(c, sick)
    {
        if (!kf_ident_valid(c->string, 32, "-") || !cJSON_IsString(c) || strlen(c->valuestring) > 1000) {
            kf_fields_add(&fe, "unhealthy_backends", "type",
                          "must map backend names to why each failed its health check (at most 1000 characters)");
            break;
        }
    }
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
    params[4] = sandbox;
    ul = sick ? kf_json_print(sick) : kf_strdup("{}");
    params[5] = ul;
    if (!api_exec(r,
                  "INSERT INTO workers (id, hostname, targets, backends, sandbox, unhealthy) "
                  "VALUES ($1, $2, $3::text[], $4::text[], $5, $6::jsonb) "
                  "ON CONFLICT (id) DO UPDATE SET hostname = EXCLUDED.hostname, targets = EXCLUDED.targets, "
                  "backends = EXCLUDED.backends, sandbox = EXCLUDED.sandbox, unhealthy = EXCLUDED.unhealthy, "
                  "last_seen = now()",
                  6, params))
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
    free(ul);
}

void api_h_internal_whoami(api_req *r)
{
    cJSON *o = cJSON_CreateObject();

    cJSON_AddStringToObject(o, "role", api_role_name(r->who.role));
    cJSON_AddStringToObject(o, "worker_id", r->who.name);
    cJSON_AddNumberToObject(o, "token_id", (double)r->who.token_id);
    api_reply_json(r, 200, o);
    cJSON_Delete(o);
}
