/* kw_loop — run a leased job; the lease loop (see kw_loop.h). */
#include "kw_loop.h"

#include "kf_alloc.h"
#include "kf_backend.h"
#include "kf_buf.h"
#include "kf_finish.h"
#include "kf_job.h"
#include "kf_jobproc.h"
#include "kf_log.h"
#include "kf_upload.h"
#include "kw_deliver.h"
#include "kw_beat.h"
#include "kw_lease.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct kw_job {
    kw_worker            *w;
    const kf_queue_lease *lease;
    cJSON                *arts;       /* the files of the latest new best (kf_upload.h), or NULL */
    int                   arts_seq;   /* the seq of the iteration that carried them */
} kw_job;

kw_after kw_loop_after_run(bool lease_lost, bool stopped, bool cancelled, bool term, kf_run_outcome outcome)
{
    if (lease_lost)
        return KW_AFTER_ABANDON;
    if (stopped && cancelled)
        return KW_AFTER_CANCELLED;
    if (stopped && term)
        return KW_AFTER_HAND_BACK;
    return outcome == KF_RUN_OK ? KW_AFTER_RESULT : KW_AFTER_FAILURE;
}

bool kw_loop_wants_llm(const kf_job_payload *p)
{
    const char *planner = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p->spec, "planner"));
    return (p->kind == KF_KIND_GENERATE || p->kind == KF_KIND_OPTIMIZE) && planner && strcmp(planner, "llm") == 0;
}

bool kw_loop_should_stop(kw_worker *w)
{
    return kw_lease_should_stop(w, NULL, NULL) || kw_drain_over(w);
}

/* Send each file of arts as an artifact report of iteration seq (in order,
 * through the spool like every report). */
static void kw_send_artifacts(kw_worker *w, const kf_queue_lease *l, const cJSON *arts, int seq, bool final)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/artifacts", l->id);
    const cJSON *f;

    cJSON_ArrayForEach(f, arts)
    {
        char *body = kf_upload_artifact_body(l->attempt, l->token, w->id, seq, final, f);
        if (body)
            kw_deliver(w, path, body, NULL, 0);
        free(body);
    }
    free(path);
}

static void kw_progress(void *ctx, const char *iteration_json)
{
    kw_job *j = ctx;
    kw_worker *w = j->w;
    char *path = kf_asprintf("/v1/internal/jobs/%s/iterations", j->lease->id);
    kf_buf body = KF_BUF_INIT;
    cJSON *it = cJSON_Parse(iteration_json), *arts = kf_upload_take_artifacts(it);
    char *text = cJSON_IsObject(it) ? cJSON_PrintUnformatted(it) : NULL;
    const char *p = text;
    bool valid = text && strlen(text) <= KW_MAX_REPORT_BYTES;

    cJSON_Delete(it);
    if (!valid) {
        kf_log_warn("backend sent an iteration that is not a JSON object (or too large); dropped job=%s",
                    j->lease->id);
        cJSON_Delete(arts);
        free(text);
        free(path);
        return;
    }
    while (*p == ' ' || *p == '\n' || *p == '\t')
        p++;
    w->seq++;
    kf_buf_addf(&body, "{\"attempt\":%d,\"lease_token\":\"%s\",\"seq\":%d", j->lease->attempt, j->lease->token,
                w->seq);
    if (*p == '{' && p[1] != '}' && p[1] != '\0')
        kf_buf_addf(&body, ",%s", p + 1);
    else
        kf_buf_adds(&body, "}");
    kw_deliver(w, path, body.data, NULL, 0);
    if (arts) {
        kw_send_artifacts(w, j->lease, arts, w->seq, false);
        cJSON_Delete(j->arts);
        j->arts = arts;
        j->arts_seq = w->seq;
    }
    kf_buf_release(&body);
    free(text);
    free(path);
}

static bool kw_job_should_stop(void *ctx)
{
    kw_job *j = ctx;
    return kw_loop_should_stop(j->w);
}

/* Report the outcome of an attempt, then settle the job in Redis, as the
 * decision table in kf_finish.h says. */
static void kw_finish(kw_worker *w, const kf_queue_lease *l, bool ok, const char *result_json, const char *prov,
                      const char *error, bool retryable)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/result", l->id);
    kf_finish_plan plan = kf_finish_plan_of(ok, retryable, l->attempt, l->max_attempts);
    kf_buf body = KF_BUF_INIT;
    kf_err err = KF_ERR_INIT;
    kf_queue_fate fate = 0;
    int64_t due = 0;
    kf_code rc;
    long st = 0;

    if (plan.report) {
        kf_finish_report rep = { l->attempt, l->token, ok, result_json, error, plan.retry, w->id, prov };
        kf_finish_body(&body, &rep);
        st = kw_deliver_final(w, path, body.data);
        if (st < 0)
            goto out;   /* still in the spool: leave the lease to expire (at-least-once) */
        if (kf_finish_answer_of(st, kf_report_problem(w->rep)) == KF_FINISH_REFUSED) {
            char *e = kf_asprintf("the API refused this attempt's result report (HTTP %ld)", st);
            kf_finish_report refused = { l->attempt, l->token, false, NULL, e, false, w->id, NULL };
            kf_buf_reset(&body);
            kf_finish_body(&body, &refused);
            kf_log_error("%s job=%s", e, l->id);
            plan.retry = false;
            free(e);
            st = kw_deliver_final(w, path, body.data);
            if (st < 0)
                goto out;
        }
    }
    if (kf_finish_settle_of(plan, st) == KF_FINISH_FAIL) {
        rc = kf_queue_fail(w->q, l->id, l->token, error, true, w->retry_base_ms, w->retry_cap_ms, &fate, &due,
                           &err);
        if (rc == KF_OK)
            kf_log_info("job attempt failed job=%s attempt=%d/%d fate=%s error=\"%s\"", l->id, l->attempt,
                        l->max_attempts, kf_queue_fate_name(fate), error);
    } else {
        /* The API holds the final state (or refused the report because the
         * job ended elsewhere): the job leaves the queue. */
        rc = kf_queue_ack(w->q, l->id, l->token, &err);
        if (rc == KF_OK)
            kf_log_info("job finished job=%s attempt=%d state=%s status=%ld error=\"%s\"", l->id, l->attempt,
                        ok ? "succeeded" : "failed", st, ok ? "" : error);
    }
    if (rc == KF_REDIS)
        /* Redis away: the lease will expire and the reaper settles the job
         * (PostgreSQL already has the outcome; a re-run's report is refused). */
        kf_log_warn("could not settle the job in Redis job=%s err=\"%s\"", l->id, err.msg);
    else if (rc == KF_STALE)
        kf_log_warn("job settled elsewhere meanwhile job=%s (%s)", l->id, err.msg);
out:
    kf_buf_release(&body);
    free(path);
}

/* The backend's result: its provenance taken out, checked, reported with
 * the latest best's files sent again as the final set. */
static void kw_finish_result(kw_worker *w, kw_job *j, const char *result_json)
{
    const kf_queue_lease *l = j->lease;
    cJSON *rj = cJSON_Parse(result_json);
    char *prov = cJSON_IsObject(rj) ? kf_upload_take_provenance(rj, w->id) : NULL;
    char *text = cJSON_IsObject(rj) ? cJSON_PrintUnformatted(rj) : NULL;
    bool valid = text && strlen(text) <= KW_MAX_REPORT_BYTES;

    cJSON_Delete(rj);
    if (valid) {
        if (j->arts)
            kw_send_artifacts(w, l, j->arts, j->arts_seq, true);
        kw_finish(w, l, true, text, prov, NULL, false);
    } else {
        kw_finish(w, l, false, NULL, NULL, "the backend's result is not a JSON object of at most 512 KiB", false);
    }
    free(prov);
    free(text);
}

/* Tell the API the attempt starts; false when it refused (the job was
 * dropped from the queue). */
static bool kw_start(kw_worker *w, const kf_queue_lease *l)
{
    kf_err err = KF_ERR_INIT;
    char *path = kf_asprintf("/v1/internal/jobs/%s/start", l->id);
    char *body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"worker\":\"%s\"}", l->attempt, l->token,
                             w->id);
    long st = kw_deliver(w, path, body, NULL, 0);

    free(path);
    free(body);
    if (st < 300)
        return true;
    /* 409/404: the job is final, cancelled or superseded in PostgreSQL. */
    kf_log_info("API refused the start; dropping the job from the queue job=%s status=%ld", l->id, st);
    if (kf_queue_ack(w->q, l->id, l->token, &err) != KF_OK)
        kf_log_warn("drop failed job=%s err=\"%s\"", l->id, err.msg);
    return false;
}

void kw_loop_run_job(kw_worker *w, const kf_queue_lease *l)
{
    kf_job_payload p;
    kf_err err = KF_ERR_INIT;
    const kf_backend *b = NULL;
    kf_jobproc fresh;
    char workdir[4096] = "";
    kf_run_result res;
    kw_job j = { .w = w, .lease = l };
    kf_runner_hooks hooks = { &j, kw_progress, kw_job_should_stop };
    bool cancelled, lost;
    kf_code rc;

    memset(&p, 0, sizeof(p));
    memset(&res, 0, sizeof(res));
    w->seq = 0;
    kf_log_info("job leased job=%s kind=%s target=%s attempt=%d/%d", l->id, l->kind, l->target, l->attempt,
                l->max_attempts);
    kw_lease_set(w, l);
    if (kf_job_payload_parse(l->payload, &p, &err) != KF_OK) {
        char *msg = kf_asprintf("invalid job payload: %s", err.msg);
        kw_finish(w, l, false, NULL, NULL, msg, false);
        free(msg);
        goto out;
    }
    b = kf_backend_find(l->backend, l->kind);
    if (!b) {
        char *msg = kf_asprintf("worker %s has no backend '%s' for kind '%s'", w->id, l->backend, l->kind);
        kw_finish(w, l, false, NULL, NULL, msg, true);
        free(msg);
        goto out;
    }
    if (!kw_start(w, l))
        goto out;
    if (kw_loop_wants_llm(&p) && !w->llm) {
        /* Not leased elsewhere instead: routing is by (target, backend),
         * and the LLM endpoint is a deployment's setting given to all its
         * workers (docs/llm.md), so a worker without it is misconfigured;
         * the job ends at once with the settings to add, rather than
         * waiting, or bouncing between workers, for one that has them. */
        char *msg = kf_asprintf("worker %s has no LLM endpoint configured: a job with planner \"llm\" needs "
                                "KFORGE_LLM_URL and KFORGE_LLM_MODEL (and KFORGE_LLM_API_KEY_FILE when the endpoint "
                                "wants a key) on the workers that run it (docs/llm.md)",
                                w->id);
        kw_finish(w, l, false, NULL, NULL, msg, false);
        free(msg);
        goto out;
    }

    /* the job process is a fresh image that never held this worker's secrets;
     * its folder is the worker's to make and to remove, however the run ends */
    rc = kf_jobproc_workdir_make(l->id, workdir, sizeof(workdir), &err);
    if (rc == KF_OK) {
        const kf_backend *jb = kf_jobproc_wrap(b, workdir, &fresh);
        /* only a job that asks for the model gets the key's descriptor */
        kf_jobproc_set_llm_key(&fresh, w->llm && kw_loop_wants_llm(&p) ? w->llm_key_file : NULL);
        rc = kf_runner_run(jb, &p, &hooks, KW_STOP_GRACE_MS, &res, &err);
    }
    if (rc != KF_OK) {
        /* fork/pipe failure is the machine's problem, not the job's: hand it back. */
        kf_log_error("%s; handing the job back", err.msg);
        kf_queue_release(w->q, l->id, l->token, &err);
        kw_sleep(w, 1000);
        goto out;
    }
    (void)kw_lease_should_stop(w, &cancelled, &lost);
    switch (kw_loop_after_run(lost, res.stopped, cancelled, w->term, res.outcome)) {
    case KW_AFTER_ABANDON:
        kf_log_warn("job abandoned: lease lost job=%s attempt=%d", l->id, l->attempt);
        break;
    case KW_AFTER_CANCELLED:
        /* Reported as a final failure: the API records it as `cancelled`
         * (cancel_requested is set), and the queue drops the job. */
        kf_log_info("job stopped on cancel request job=%s attempt=%d", l->id, l->attempt);
        kw_finish(w, l, false, NULL, NULL, "cancelled at the user's request", false);
        break;
    case KW_AFTER_HAND_BACK:
        kf_log_info("drain time over: handing the job back job=%s attempt=%d", l->id, l->attempt);
        if (kf_queue_release(w->q, l->id, l->token, &err) != KF_OK)
            kf_log_warn("hand-back failed; the lease will expire instead job=%s err=\"%s\"", l->id, err.msg);
        break;
    case KW_AFTER_RESULT:
        kw_finish_result(w, &j, res.result_json);
        break;
    case KW_AFTER_FAILURE:
        kw_finish(w, l, false, NULL, NULL, res.error, res.retryable);
        break;
    }
out:
    cJSON_Delete(j.arts);
    kw_lease_set(w, NULL);
    kf_jobproc_workdir_remove(workdir);
    kf_run_result_release(&res);
    kf_job_payload_release(&p);
}

int kw_loop_run(kw_worker *w)
{
    kf_err err = KF_ERR_INIT;
    int backoff = KW_BACKOFF_MIN, pending = 0;
    long long next_flush = 0, next_health = 0;
    bool warned = false;
    const char *healthy[KW_MAX_BACKENDS];
    kf_queue_caps caps;

    while (!w->term) {
        kf_queue_lease l;
        bool got = false;

        if (kw_now_ms() >= next_flush && kf_spool_count(w->spool) > 0) {
            kf_spool_flush(w->spool, w->rep, &pending, &err);
            next_flush = kw_now_ms() + (pending ? 1000 : 0);
        }
        /* device health, between jobs, per backend: after each job, and
         * every KW_HEALTH_RETRY_MS while one fails (its pairs are neither
         * leased nor advertised meanwhile; the others go on) */
        if (kw_now_ms() >= next_health) {
            bool all = true;
            for (int i = 0; i < w->n_backends; i++) {
                char why[512];
                bool ok = kf_backend_healthy(w->backends[i], why, sizeof(why));
                bool was = kw_beat_backend_healthy(w->backends[i]);
                if (!ok && was)
                    kf_log_warn("backend unhealthy; leasing none of its jobs until it recovers backend=%s why=\"%s\"",
                                w->backends[i], why);
                else if (ok && !was)
                    kf_log_info("backend healthy again; leasing its jobs backend=%s", w->backends[i]);
                kw_beat_set_health(w->backends[i], ok ? "" : why);
                all = all && ok;
            }
            next_health = all ? LLONG_MAX : kw_now_ms() + KW_HEALTH_RETRY_MS;
        }
        if (kw_beat_caps(w, healthy, &caps) == 0) {
            kw_sleep(w, KW_WAIT_MS);
            continue;
        }
        if (kf_queue_lease_job(w->q, &caps, w->id, w->lease_ms, &l, &got, &err) != KF_OK) {
            if (!warned)
                kf_log_warn("cannot lease (retrying with backoff) err=\"%s\"", err.msg);
            warned = true;
            kw_sleep(w, backoff);
            backoff = kw_backoff_next(backoff);
            continue;
        }
        if (warned)
            kf_log_info("Redis is back; leasing again");
        warned = false;
        backoff = KW_BACKOFF_MIN;
        if (!got) {
            bool woken = false;
            if (kf_queue_wait(w->q, &caps, KW_WAIT_MS, &woken, &err) != KF_OK)
                kw_sleep(w, KW_BACKOFF_MIN);
            continue;
        }
        kw_loop_run_job(w, &l);
        kf_queue_lease_free(&l);
        next_health = 0;
    }
    return 0;
}
