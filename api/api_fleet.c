/* api_fleet — GET /v1/workers: the fleet as the queue sees it, for the
 * dashboard's Fleet view and for anyone watching capacity (docs/dashboard.md).
 *
 * Workers come from the Redis registry (kf_queue_workers_list: every worker
 * whose heartbeat has not expired, with the document it sent: targets,
 * backends, current job, the backends whose health check fails), queue
 * depth per target from kf_queue_stats_get and per (target, backend) pair
 * with its live workers from kf_queue_pairs_list (one round trip).
 * A user sees a worker's current job only when the job is its own (a
 * job id never leaks across users; the worker shows "busy": true), and the
 * dead letters (kf:dead, with each job's row) only with an admin token.
 * Redis away is 503 with Retry-After; PostgreSQL away, 503 as everywhere. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API_FLEET_MAX_WORKERS 500
#define API_FLEET_MAX_TARGETS 256
#define API_FLEET_MAX_DEAD 50
#define API_FLEET_MAX_PAIRS 64

/* ms since 1970 as RFC 3339 UTC with milliseconds (a time Redis gave:
 * never negative; 1970 if it is). */
static void api_ms_time(int64_t ms, char out[40])
{
    time_t s = (time_t)(ms > 0 ? ms / 1000 : 0);
    struct tm tm;
    char day[24];

    gmtime_r(&s, &tm);
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 40, "%s.%03dZ", day, (int)(ms > 0 ? ms % 1000 : 0));
}

/* A string array of doc's member name (strings only), or []. */
static cJSON *api_str_array(const cJSON *doc, const char *name)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(doc, name), *it;
    cJSON *out = cJSON_CreateArray();

    cJSON_ArrayForEach(it, a)
    {
        if (cJSON_IsString(it))
            cJSON_AddItemToArray(out, cJSON_CreateString(it->valuestring));
    }
    return out;
}

/* The workers array; each job id the token may not see is hidden. */
static bool api_fleet_workers(api_req *r, const kf_queue_worker *w, int n, cJSON *out)
{
    cJSON *arr = cJSON_AddArrayToObject(out, "workers");
    kf_buf ids = KF_BUF_INIT;
    PGresult *own = NULL;
    bool admin = r->who.role == API_ROLE_ADMIN;

    /* A user's own jobs among the workers' current ones, in one query. */
    kf_buf_addc(&ids, '{');
    for (int i = 0; i < n; i++) {
        cJSON *doc = NULL;
        kf_err e = KF_ERR_INIT;
        const cJSON *job;
        if (kf_json_parse(w[i].doc, strlen(w[i].doc), 8, &doc, &e) != KF_OK)
            continue;
        job = cJSON_GetObjectItemCaseSensitive(doc, "job");
        if (cJSON_IsString(job) && kf_uuid_valid(job->valuestring))
            kf_buf_addf(&ids, "%s%s", ids.len > 1 ? "," : "", job->valuestring);
        cJSON_Delete(doc);
    }
    kf_buf_addc(&ids, '}');
    if (!admin && ids.len > 2) {
        char tok[24];
        const char *params[2] = { ids.data, tok };
        snprintf(tok, sizeof(tok), "%lld", (long long)r->who.token_id);
        own = api_req_sql(r, "SELECT id::text FROM jobs WHERE id = ANY($1::uuid[]) AND owner_token_id = $2::bigint", 2,
                          params);
        if (!own) {
            kf_buf_release(&ids);
            return false;
        }
    }
    kf_buf_release(&ids);
    for (int i = 0; i < n; i++) {
        cJSON *doc = NULL, *o = cJSON_CreateObject();
        kf_err e = KF_ERR_INIT;
        const cJSON *job, *host, *sandbox;
        bool busy = false, shown = false;
        char at[40];

        if (kf_json_parse(w[i].doc, strlen(w[i].doc), 8, &doc, &e) != KF_OK) {
            kf_log_warn("worker registry document unreadable worker=%s msg=\"%s\"", w[i].id, e.msg);
            doc = cJSON_CreateObject();
        }
        job = cJSON_GetObjectItemCaseSensitive(doc, "job");
        host = cJSON_GetObjectItemCaseSensitive(doc, "host");
        sandbox = cJSON_GetObjectItemCaseSensitive(doc, "sandbox");
        busy = cJSON_IsString(job) && kf_uuid_valid(job->valuestring);
        shown = busy && admin;
        for (int k = 0; busy && !shown && own && k < PQntuples(own); k++)
            shown = strcmp(PQgetvalue(own, k, 0), job->valuestring) == 0;
        api_ms_time(w[i].seen_ms, at);
        cJSON_AddStringToObject(o, "id", w[i].id);
        if (cJSON_IsString(host))
            cJSON_AddStringToObject(o, "host", host->valuestring);
        cJSON_AddItemToObject(o, "targets", api_str_array(doc, "targets"));
        cJSON_AddItemToObject(o, "backends", api_str_array(doc, "backends"));
        cJSON_AddBoolToObject(o, "busy", busy);
        if (shown)
            cJSON_AddStringToObject(o, "job", job->valuestring);
        else
            cJSON_AddNullToObject(o, "job");
        if (cJSON_IsString(sandbox))
            cJSON_AddStringToObject(o, "sandbox", sandbox->valuestring);
        /* why the worker leases nothing now (its device failed a health check) */
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(doc, "unhealthy")))
            cJSON_AddStringToObject(o, "unhealthy", cJSON_GetObjectItemCaseSensitive(doc, "unhealthy")->valuestring);
        else
            cJSON_AddNullToObject(o, "unhealthy");
        /* per backend: the ones whose pairs it neither leases nor advertises now */
        {
            cJSON *per = cJSON_AddObjectToObject(o, "unhealthy_backends");
            const cJSON *u;
            cJSON_ArrayForEach(u, cJSON_GetObjectItemCaseSensitive(doc, "unhealthy_backends"))
            {
                if (cJSON_IsString(u) && u->string)
                    cJSON_AddStringToObject(per, u->string, u->valuestring);
            }
        }
        cJSON_AddStringToObject(o, "last_heartbeat", at);
        cJSON_AddItemToArray(arr, o);
        cJSON_Delete(doc);
    }
    PQclear(own);
    return true;
}

/* Admin: the dead letters Redis holds, each with its job's row. */
static bool api_fleet_dead(api_req *r, const kf_queue_moved *d, int n, cJSON *out)
{
    cJSON *arr = cJSON_AddArrayToObject(out, "dead_letters");
    kf_buf ids = KF_BUF_INIT;
    PGresult *res;
    const char *params[1];

    kf_buf_addc(&ids, '{');
    for (int i = 0; i < n; i++)
        if (kf_uuid_valid(d[i].id))
            kf_buf_addf(&ids, "%s%s", ids.len > 1 ? "," : "", d[i].id);
    kf_buf_addc(&ids, '}');
    params[0] = ids.data;
    res = api_req_sql(r,
                      "SELECT id::text, kind, target, attempt, coalesce(left(last_error, 500), ''), state "
                      "FROM jobs WHERE id = ANY($1::uuid[])",
                      1, params);
    kf_buf_release(&ids);
    if (!res)
        return false;
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        char at[40];
        api_ms_time(d[i].at_ms, at);
        cJSON_AddStringToObject(o, "job_id", d[i].id);
        cJSON_AddStringToObject(o, "died_at", at);
        for (int k = 0; k < PQntuples(res); k++) {
            if (strcmp(PQgetvalue(res, k, 0), d[i].id) != 0)
                continue;
            cJSON_AddStringToObject(o, "kind", PQgetvalue(res, k, 1));
            cJSON_AddStringToObject(o, "target", PQgetvalue(res, k, 2));
            cJSON_AddNumberToObject(o, "attempt", atoi(PQgetvalue(res, k, 3)));
            cJSON_AddStringToObject(o, "last_error", PQgetvalue(res, k, 4));
            cJSON_AddStringToObject(o, "state", PQgetvalue(res, k, 5));
        }
        cJSON_AddItemToArray(arr, o);
    }
    PQclear(res);
    return true;
}

void api_h_workers(api_req *r)
{
    static const char *const allowed[] = { NULL };
    kf_err e = KF_ERR_INIT;
    kf_queue *q;
    kf_queue_worker *w = NULL;
    kf_queue_moved *dead = NULL;
    char **targets = NULL;
    int nw = 0, nt = 0, nd = 0;
    kf_queue_stats all, *per = NULL;
    kf_queue_cap_state pairs[API_FLEET_MAX_PAIRS];
    int np = 0;
    cJSON *out = NULL, *qs;
    bool admin = r->who.role == API_ROLE_ADMIN;

    if (!api_req_query_known(r, allowed))
        return;
    if (!(q = api_qpool_get(api_req_qpool(r), &e))) {
        api_reply_err(r, &e);
        return;
    }
    if (kf_queue_workers_list(q, API_FLEET_MAX_WORKERS, &w, &nw, &e) != KF_OK ||
        kf_queue_targets_list(q, API_FLEET_MAX_TARGETS, &targets, &nt, &e) != KF_OK ||
        kf_queue_stats_get(q, NULL, &all, &e) != KF_OK ||
        kf_queue_pairs_list(q, API_FLEET_MAX_PAIRS, pairs, &np, &e) != KF_OK ||
        (admin && kf_queue_dead_list(q, API_FLEET_MAX_DEAD, &dead, &nd, &e) != KF_OK))
        goto redis_failed;
    per = kf_calloc(nt ? (size_t)nt : 1, sizeof(*per));
    for (int i = 0; i < nt; i++)
        if (kf_queue_stats_get(q, targets[i], &per[i], &e) != KF_OK)
            goto redis_failed;
    api_qpool_put(api_req_qpool(r), q);
    q = NULL;

    out = cJSON_CreateObject();
    if (!api_fleet_workers(r, w, nw, out))
        goto done;
    qs = cJSON_AddArrayToObject(out, "queues");
    for (int i = 0; i < nt; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "target", targets[i]);
        cJSON_AddNumberToObject(o, "waiting", (double)per[i].waiting);
        cJSON_AddItemToArray(qs, o);
    }
    qs = cJSON_AddArrayToObject(out, "pairs");
    for (int i = 0; i < np; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "target", pairs[i].target);
        cJSON_AddStringToObject(o, "backend", pairs[i].backend);
        cJSON_AddNumberToObject(o, "waiting", (double)pairs[i].waiting);
        cJSON_AddNumberToObject(o, "live_workers", (double)pairs[i].live_workers);
        cJSON_AddBoolToObject(o, "ever_offered", pairs[i].offered);
        cJSON_AddItemToArray(qs, o);
    }
    cJSON_AddNumberToObject(out, "waiting", (double)all.waiting);
    cJSON_AddNumberToObject(out, "active", (double)all.active);
    cJSON_AddNumberToObject(out, "delayed", (double)all.delayed);
    if (admin) {
        cJSON_AddNumberToObject(out, "dead", (double)all.dead);
        if (!api_fleet_dead(r, dead, nd, out))
            goto done;
    }
    api_reply_json(r, 200, out);
    goto done;

redis_failed:
    api_qpool_put(api_req_qpool(r), q);
    q = NULL;
    api_reply_err(r, &e);
done:
    cJSON_Delete(out);
    free(per);
    kf_queue_workers_free(w, nw);
    kf_queue_targets_free(targets, nt);
    kf_queue_moved_free(dead, nd);
}
