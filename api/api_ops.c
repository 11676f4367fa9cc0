/* api_ops — operational routes: /healthz, /readyz, /metrics, /v1/openapi.json. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_h_healthz(api_req *r)
{
    api_reply_json_text(r, 200, "{\"status\":\"ok\"}");
}

/* PostgreSQL answers SELECT 1 (without answering the request on failure). */
static bool api_pg_ok(api_req *r, kf_err *e)
{
    PGconn *c = r->pg;
    PGresult *res;
    bool ok;

    (void)e;
    if (!c)
        return false;
    res = PQexec(c, "SELECT 1");
    ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok && PQstatus(c) == CONNECTION_BAD) {
        /* A pooled connection from before a server restart: try a fresh one. */
        PQclear(res);
        api_req_pg_reset(r);
        res = PQexec(c, "SELECT 1");
        ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    }
    if (!ok)
        kf_err_set(e, KF_UNAVAILABLE, "%s", PQerrorMessage(c));
    PQclear(res);
    return ok;
}

/* Live workers (a heartbeat within the last minute) that run user code
 * unconfined: still ready, but said out loud (docs/security.md). */
static void api_readyz_sandbox(api_req *r, cJSON *doc, cJSON *checks)
{
    PGresult *res = PQexec(r->pg, "SELECT id FROM workers WHERE sandbox = 'unconfined' "
                                  "AND last_seen > now() - interval '1 minute' ORDER BY id LIMIT 100");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        cJSON_AddStringToObject(checks, "sandbox", "unknown");
    } else if (PQntuples(res) == 0) {
        cJSON_AddStringToObject(checks, "sandbox", "strict");
    } else {
        cJSON *ids = cJSON_CreateArray();
        char warn[256];
        for (int i = 0; i < PQntuples(res); i++)
            cJSON_AddItemToArray(ids, cJSON_CreateString(PQgetvalue(res, i, 0)));
        cJSON_AddStringToObject(checks, "sandbox", "unconfined");
        snprintf(warn, sizeof(warn), "%d worker(s) run user code without the sandbox "
                 "(KFORGE_SANDBOX=unconfined): never give them other people's kernels", PQntuples(res));
        cJSON_AddItemToArray(cJSON_AddArrayToObject(doc, "warnings"), cJSON_CreateString(warn));
        cJSON_AddItemToObject(doc, "unconfined_workers", ids);
    }
    PQclear(res);
}

/* Live workers (a heartbeat within the last minute) with a backend whose
 * health check fails (workers.unhealthy): still ready, each named with the
 * backend and why; their other backends keep leasing. */
static void api_readyz_health(api_req *r, cJSON *doc, cJSON *checks)
{
    PGresult *res = PQexec(r->pg, "SELECT w.id, u.key, left(u.value, 300) FROM workers w, "
                                  "jsonb_each_text(w.unhealthy) u WHERE w.unhealthy <> '{}'::jsonb "
                                  "AND w.last_seen > now() - interval '1 minute' ORDER BY w.id, u.key LIMIT 100");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        cJSON_AddStringToObject(checks, "worker_health", "unknown");
    } else if (PQntuples(res) == 0) {
        cJSON_AddStringToObject(checks, "worker_health", "ok");
    } else {
        cJSON *arr = cJSON_CreateArray(), *warnings = cJSON_GetObjectItemCaseSensitive(doc, "warnings");
        char warn[256];
        for (int i = 0; i < PQntuples(res); i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "worker", PQgetvalue(res, i, 0));
            cJSON_AddStringToObject(o, "backend", PQgetvalue(res, i, 1));
            cJSON_AddStringToObject(o, "reason", PQgetvalue(res, i, 2));
            cJSON_AddItemToArray(arr, o);
        }
        cJSON_AddStringToObject(checks, "worker_health", "degraded");
        snprintf(warn, sizeof(warn), "%d worker backend(s) failed their health check and lease none of their jobs: "
                 "see unhealthy_workers", PQntuples(res));
        if (!warnings)
            warnings = cJSON_AddArrayToObject(doc, "warnings");
        cJSON_AddItemToArray(warnings, cJSON_CreateString(warn));
        cJSON_AddItemToObject(doc, "unhealthy_workers", arr);
    }
    PQclear(res);
}

void api_h_readyz(api_req *r)
{
    kf_err pe = KF_ERR_INIT, qe = KF_ERR_INIT;
    bool pg_ok, redis_ok = false;
    kf_queue *q;
    cJSON *checks = cJSON_CreateObject();

    pg_ok = api_req_pg_quiet(r, &pe) && api_pg_ok(r, &pe);
    q = api_qpool_get(api_req_qpool(r), &qe);
    if (q)
        redis_ok = kf_queue_ping(q, &qe) == KF_OK;
    api_qpool_put(api_req_qpool(r), q);
    cJSON_AddStringToObject(checks, "postgresql", pg_ok ? "ok" : "unreachable");
    cJSON_AddStringToObject(checks, "redis", redis_ok ? "ok" : "unreachable");
    if (pg_ok && redis_ok) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", "ready");
        api_readyz_sandbox(r, o, checks);
        api_readyz_health(r, o, checks);
        api_caps_readyz(r, o, checks);
        cJSON_AddItemToObject(o, "checks", checks);
        api_reply_json(r, 200, o);
        cJSON_Delete(o);
        return;
    }
    {
        char detail[128];
        kf_buf body = KF_BUF_INIT;
        cJSON *p;
        char *s;

        snprintf(detail, sizeof(detail), "missing: %s%s%s", pg_ok ? "" : "postgresql",
                 (!pg_ok && !redis_ok) ? ", " : "", redis_ok ? "" : "redis");
        api_reply_code(r, KF_UNAVAILABLE, "not-ready", "%s", detail);
        /* Add the per-dependency checks to the problem document. */
        p = cJSON_Parse(r->out.data);
        if (p) {
            cJSON *missing = cJSON_AddArrayToObject(p, "missing");
            if (!pg_ok)
                cJSON_AddItemToArray(missing, cJSON_CreateString("postgresql"));
            if (!redis_ok)
                cJSON_AddItemToArray(missing, cJSON_CreateString("redis"));
            cJSON_AddItemToObject(p, "checks", checks);
            checks = NULL;
            s = kf_json_print(p);
            kf_buf_adds(&body, s);
            free(s);
            cJSON_Delete(p);
            kf_buf_reset(&r->out);
            kf_buf_add(&r->out, body.data, body.len);
            kf_buf_release(&body);
        }
        cJSON_Delete(checks);
    }
}

void api_h_metrics(api_req *r)
{
    kf_buf out = KF_BUF_INIT;
    kf_err e = KF_ERR_INIT;
    kf_queue *q;
    kf_queue_stats st;
    bool pg_ok = false, redis_ok = false;

    api_metrics_requests(r->srv, &out);
    api_batch_metrics(api_req_batcher(r), &out);
    if (api_req_pg_quiet(r, &e)) {
        PGresult *res = PQexec(r->pg, "SELECT state, count(*) FROM jobs GROUP BY state ORDER BY state");
        if (PQresultStatus(res) == PGRES_TUPLES_OK) {
            pg_ok = true;
            kf_buf_adds(&out, "# HELP kforge_jobs Jobs in PostgreSQL, by state.\n# TYPE kforge_jobs gauge\n");
            for (int i = 0; i < PQntuples(res); i++)
                kf_buf_addf(&out, "kforge_jobs{state=\"%s\"} %s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
        }
        PQclear(res);
    }
    q = api_qpool_get(api_req_qpool(r), &e);
    if (q && kf_queue_stats_get(q, NULL, &st, &e) == KF_OK) {
        redis_ok = true;
        kf_buf_addf(&out,
                    "# HELP kforge_queue_jobs Jobs in the Redis queue, by set.\n# TYPE kforge_queue_jobs gauge\n"
                    "kforge_queue_jobs{set=\"waiting\"} %lld\nkforge_queue_jobs{set=\"active\"} %lld\n"
                    "kforge_queue_jobs{set=\"delayed\"} %lld\nkforge_queue_jobs{set=\"dead\"} %lld\n",
                    (long long)st.waiting, (long long)st.active, (long long)st.delayed, (long long)st.dead);
    }
    api_qpool_put(api_req_qpool(r), q);
    kf_buf_addf(&out,
                "# HELP kforge_dependency_up Whether a dependency answered this scrape.\n"
                "# TYPE kforge_dependency_up gauge\n"
                "kforge_dependency_up{dependency=\"postgresql\"} %d\nkforge_dependency_up{dependency=\"redis\"} %d\n",
                pg_ok, redis_ok);
    api_reply_json_text(r, 200, out.data);
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    kf_buf_release(&out);
}

void api_h_openapi(api_req *r)
{
    api_reply_json_text(r, 200, api_openapi_json);
}
