/*
 * kforge-worker — leases jobs from Redis, runs them through a backend in a
 * child process, reports to the API, and acks (docs/protocol.md).
 *
 * Threads: the main thread leases, runs and reports; a lease thread renews
 * the current lease every LEASE_MS/3 (at least every second, which is also
 * how often it sees a cancel request) and refreshes the Redis registry entry
 * (its own Redis connection, so a long evaluation never loses a healthy
 * lease); a heartbeat thread tells the API the worker is alive.  Each
 * thread has its own Redis / HTTP handle, and does its work holding the
 * fork lock, so the job process is never forked mid-call (see "fork
 * safety").
 *
 * Identity: the worker's token comes from KFORGE_TOKEN_FILE (a private
 * file; KFORGE_TOKEN still works, with a warning, and is blanked and unset
 * at start-up so no child inherits it); its id is the token's name, asked
 * of the API (GET /v1/internal/whoami); its spool is KFORGE_SPOOL_DIR/<id>.
 *
 * Failure behaviour: Redis or the API unreachable → retried with backoff,
 * never fatal.  Reports the API cannot take go to the spool and are resent;
 * a final result is delivered (or left in the spool) before the job is
 * acked, so a result is never lost.  A lease found STALE (expired, reaped,
 * forgotten) stops the job at once: a newer attempt owns it.  SIGTERM/
 * SIGINT: stop leasing, let the current job run up to KFORGE_DRAIN_MS, then
 * hand it back (kf_queue_release) and exit 0.
 */
#include "kf_alloc.h"
#include "kf_backend.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_finish.h"
#include "kf_job.h"
#include "kf_log.h"
#include "kf_queue.h"
#include "kf_report.h"
#include "kf_upload.h"
#include "kf_jobproc.h"
#include "kf_runner.h"
#include "sim_sandbox.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define W_MAX_TARGETS   8
#define W_WAIT_MS       500       /* longest idle block on the wake-up list */
#define W_BACKOFF_MIN   100
#define W_BACKOFF_MAX   5000
#define W_STOP_GRACE_MS 1000      /* job process: SIGTERM, then SIGKILL after this */
#define W_CANCEL_CHECK_MS 1000    /* longest gap between renewals (cancel checks) */
#define W_MAX_REPORT_BYTES ((size_t)512 * 1024)  /* result / iteration JSON; the API's body limit is larger */

typedef struct worker {
    /* configuration */
    char        id[129];
    char        host[128];
    const char *targets[W_MAX_TARGETS];
    char        target_buf[W_MAX_TARGETS][16];
    int         n_targets;
    int64_t     lease_ms, heartbeat_ms, drain_ms, retry_base_ms, retry_cap_ms;
    const char *redis_url, *api_url;
    char       *token;        /* from KFORGE_TOKEN_FILE (or KFORGE_TOKEN); never in the environment */
    long long   started_ms;

    /* main thread's handles */
    kf_queue   *q;
    kf_report  *rep;
    kf_spool   *spool;

    /* shared with the lease thread, under mu */
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    bool        quit;
    bool        has_lease;
    char        job_id[65];
    char        job_token[65];
    long long   next_renew_ms;
    bool        cancel_seen;
    bool        lease_lost;

    /* main thread only */
    long long   drain_deadline_ms;  /* 0 until SIGTERM is noticed */
    int         seq;
    int         attempt;
} worker;

static volatile sig_atomic_t w_term;

static void w_on_term(int sig)
{
    (void)sig;
    w_term = 1;
}

static long long w_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* True once SIGTERM arrived and the drain time is over. */
static bool w_drain_over(worker *w)
{
    if (!w_term)
        return false;
    if (w->drain_deadline_ms == 0) {
        w->drain_deadline_ms = w_now_ms() + w->drain_ms;
        kf_log_info("SIGTERM: no new leases; current job may run %lld ms more", (long long)w->drain_ms);
    }
    return w_now_ms() >= w->drain_deadline_ms;
}

/* Sleep ms in slices; returns early once SIGTERM arrived. */
static void w_sleep(int ms)
{
    long long end = w_now_ms() + ms;
    while (!w_term && w_now_ms() < end) {
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* ---- fork safety --------------------------------------------------- */

/* The job runs in a forked process.  A fork while another thread is inside
 * the allocator or a library call leaves the child a lock nobody releases
 * (ASan's allocator has no fork handler, and a sandbox child forked later
 * from the job process then hangs on it).  So the background threads do
 * their work (network calls and the allocations around them) holding
 * w_fork_mu, and every fork takes it first (pthread_atfork): a fork waits
 * for at most one Redis call or one API heartbeat (2 s timeout). */
static pthread_mutex_t w_fork_mu = PTHREAD_MUTEX_INITIALIZER;

static void w_fork_prepare(void)
{
    pthread_mutex_lock(&w_fork_mu);
}

static void w_fork_parent(void)
{
    pthread_mutex_unlock(&w_fork_mu);
}

static void w_fork_child(void)
{
    pthread_mutex_init(&w_fork_mu, NULL);   /* the child's only thread holds nothing else */
}

/* ---- lease thread: renew + Redis registry --------------------------- */

/* A third of the lease, but at least once a second: the renew reply also
 * carries the cancel flag, so a cancel reaches a running job within ~1 s
 * whatever the lease (one script call per second per busy worker). */
static long long w_renew_every(const worker *w)
{
    long long third = w->lease_ms / 3;
    return third < W_CANCEL_CHECK_MS ? third : W_CANCEL_CHECK_MS;
}

static char *w_registry_json(worker *w, const char *job)
{
    kf_buf b = KF_BUF_INIT;
    kf_buf_addf(&b, "{\"id\":\"%s\",\"host\":\"%s\",\"pid\":%d,\"targets\":[", w->id, w->host, (int)getpid());
    for (int i = 0; i < w->n_targets; i++)
        kf_buf_addf(&b, "%s\"%s\"", i ? "," : "", w->targets[i]);
    kf_buf_adds(&b, "],\"backends\":[");
    const kf_backend *const *all = kf_backend_all();
    for (int i = 0; all[i]; i++)
        kf_buf_addf(&b, "%s\"%s\"", i ? "," : "", all[i]->name);
    if (job && *job)
        kf_buf_addf(&b, "],\"job\":\"%s\"", job);
    else
        kf_buf_adds(&b, "],\"job\":null");
    kf_buf_addf(&b, ",\"started_ms\":%lld,\"sandbox\":\"%s\"}", w->started_ms,
                sim_sandbox_unconfined() ? "unconfined" : "strict");
    return kf_buf_detach(&b);
}

static void *w_lease_thread(void *arg)
{
    worker *w = arg;
    kf_err err = KF_ERR_INIT;
    kf_queue *tq;
    long long next_hb = 0;
    bool redis_warned = false, renew_warned = false;

    pthread_mutex_lock(&w_fork_mu);   /* the first job may be forked while this thread starts */
    tq = kf_queue_connect(w->redis_url, &err);
    pthread_mutex_unlock(&w_fork_mu);

    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        long long now = w_now_ms(), wake;

        if (now >= next_hb) {
            char job[65];
            snprintf(job, sizeof(job), "%s", w->has_lease ? w->job_id : "");
            pthread_mutex_unlock(&w->mu);
            pthread_mutex_lock(&w_fork_mu);
            char *json = w_registry_json(w, job);
            if (kf_queue_heartbeat(tq, w->id, json, w->heartbeat_ms * 3, &err) != KF_OK) {
                if (!redis_warned)
                    kf_log_warn("registry heartbeat failed (will retry) err=\"%s\"", err.msg);
                redis_warned = true;
            } else {
                redis_warned = false;
            }
            free(json);
            pthread_mutex_unlock(&w_fork_mu);
            pthread_mutex_lock(&w->mu);
            next_hb = now + w->heartbeat_ms;
        }
        if (w->has_lease && !w->lease_lost && now >= w->next_renew_ms) {
            char id[65], token[65];
            bool cancel = false;
            kf_code rc;

            snprintf(id, sizeof(id), "%s", w->job_id);
            snprintf(token, sizeof(token), "%s", w->job_token);
            pthread_mutex_unlock(&w->mu);
            pthread_mutex_lock(&w_fork_mu);
            rc = kf_queue_renew(tq, id, token, w->lease_ms, &cancel, &err);
            pthread_mutex_unlock(&w_fork_mu);
            pthread_mutex_lock(&w->mu);
            if (w->has_lease && strcmp(token, w->job_token) == 0) {
                if (rc == KF_OK) {
                    w->next_renew_ms = w_now_ms() + w_renew_every(w);
                    if (cancel && !w->cancel_seen) {
                        kf_log_info("job cancelled by request job=%s", id);
                        w->cancel_seen = true;
                    }
                } else if (rc == KF_STALE) {
                    kf_log_warn("lease lost; stopping the job (a newer attempt owns it) job=%s", id);
                    w->lease_lost = true;
                } else {
                    if (!renew_warned)
                        kf_log_warn("lease renewal failed, retrying every 200 ms job=%s err=\"%s\"", id, err.msg);
                    renew_warned = true;
                    w->next_renew_ms = w_now_ms() + 200;
                }
                if (rc == KF_OK && renew_warned) {
                    kf_log_info("lease renewed again job=%s", id);
                    renew_warned = false;
                }
            }
        }
        wake = next_hb;
        if (w->has_lease && !w->lease_lost && w->next_renew_ms < wake)
            wake = w->next_renew_ms;
        now = w_now_ms();
        if (wake > now) {
            struct timespec ts;
            long long ms = wake - now;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += ms / 1000;
            ts.tv_nsec += (ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
    }
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&w_fork_mu);
    kf_queue_free(tq);
    pthread_mutex_unlock(&w_fork_mu);
    return NULL;
}

/* ---- heartbeat thread: tell the API ---------------------------------- */

static void *w_api_heartbeat_thread(void *arg)
{
    worker *w = arg;
    kf_report *rep;
    char *path;
    kf_buf body = KF_BUF_INIT;
    bool warned = false;

    pthread_mutex_lock(&w_fork_mu);   /* the first job may be forked while this thread starts */
    rep = kf_report_new(w->api_url, w->token, 2000);
    path = kf_asprintf("/v1/internal/workers/%s/heartbeat", w->id);

    kf_buf_adds(&body, "{\"targets\":[");
    for (int i = 0; i < w->n_targets; i++)
        kf_buf_addf(&body, "%s\"%s\"", i ? "," : "", w->targets[i]);
    kf_buf_adds(&body, "],\"backends\":[");
    const kf_backend *const *all = kf_backend_all();
    for (int i = 0; all[i]; i++)
        kf_buf_addf(&body, "%s\"%s\"", i ? "," : "", all[i]->name);
    kf_buf_addf(&body, "],\"host\":\"%s\",\"sandbox\":\"%s\"}", w->host,
                sim_sandbox_unconfined() ? "unconfined" : "strict");
    pthread_mutex_unlock(&w_fork_mu);

    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        char why[256] = "";
        pthread_mutex_unlock(&w->mu);
        pthread_mutex_lock(&w_fork_mu);
        long st = rep ? kf_report_post(rep, path, body.data, why, sizeof(why)) : 0;
        if (st < 200 || st >= 300) {
            if (!warned)
                kf_log_warn("API heartbeat not accepted (will retry) status=%ld detail=\"%s\"", st, why);
            warned = true;
        } else {
            warned = false;
        }
        pthread_mutex_unlock(&w_fork_mu);
        pthread_mutex_lock(&w->mu);
        /* The condition variable is also broadcast on every lease change:
         * sleep out the whole interval unless told to quit. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += w->heartbeat_ms / 1000;
        ts.tv_nsec += (w->heartbeat_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!w->quit && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&w_fork_mu);
    kf_buf_release(&body);
    free(path);
    kf_report_free(rep);
    pthread_mutex_unlock(&w_fork_mu);
    return NULL;
}

/* ---- reports ---------------------------------------------------------- */

/* The drain time of a SIGTERM is over: a report that cannot even be
 * spooled is given up. */
static bool w_spool_give_up(void *ctx)
{
    return w_term && w_drain_over(ctx);
}

/* Send one report now or spool it in order (kf_spool_deliver). */
static long w_deliver(worker *w, const char *path, const char *body, char *name_out, size_t name_len)
{
    return kf_spool_deliver(w->spool, w->rep, path, body, name_out, name_len, w_spool_give_up, w);
}

static bool w_lease_lost(worker *w)
{
    pthread_mutex_lock(&w->mu);
    bool lost = w->lease_lost;
    pthread_mutex_unlock(&w->mu);
    return lost;
}

/* Deliver a final report, waiting (with backoff) while the API cannot take
 * it.  Returns the final status, or -1 when it stays in the spool because
 * the lease was lost or the drain time ran out (it will be sent later). */
static long w_deliver_final(worker *w, const char *path, const char *body)
{
    char name[128];
    int backoff = W_BACKOFF_MIN, pending = 0;
    kf_err err = KF_ERR_INIT;
    long st = w_deliver(w, path, body, name, sizeof(name));

    while (st < 0) {
        if (w_lease_lost(w) || w_drain_over(w)) {
            kf_log_warn("result left in the spool for later delivery path=%s file=%s", path, name);
            return -1;
        }
        w_sleep(backoff);
        backoff = backoff * 2 > W_BACKOFF_MAX ? W_BACKOFF_MAX : backoff * 2;
        kf_spool_flush(w->spool, w->rep, &pending, &err);
        if (!kf_spool_has(w->spool, name))
            return 200;
    }
    return st;
}

typedef struct w_job {
    worker               *w;
    const kf_queue_lease *lease;
    cJSON                *arts;       /* the files of the latest new best (kf_upload.h), or NULL */
    int                   arts_seq;   /* the seq of the iteration that carried them */
} w_job;

/* Send each file of arts as an artifact report of iteration seq (in order,
 * through the spool like every report). */
static void w_send_artifacts(worker *w, const kf_queue_lease *l, const cJSON *arts, int seq, bool final)
{
    char *path = kf_asprintf("/v1/internal/jobs/%s/artifacts", l->id);
    const cJSON *f;

    cJSON_ArrayForEach(f, arts)
    {
        char *body = kf_upload_artifact_body(l->attempt, l->token, w->id, seq, final, f);
        if (body)
            w_deliver(w, path, body, NULL, 0);
        free(body);
    }
    free(path);
}

static void w_progress(void *ctx, const char *iteration_json)
{
    w_job *j = ctx;
    worker *w = j->w;
    char *path = kf_asprintf("/v1/internal/jobs/%s/iterations", j->lease->id);
    kf_buf body = KF_BUF_INIT;
    cJSON *it = cJSON_Parse(iteration_json), *arts = kf_upload_take_artifacts(it);
    char *text = cJSON_IsObject(it) ? cJSON_PrintUnformatted(it) : NULL;
    const char *p = text;
    bool valid = text && strlen(text) <= W_MAX_REPORT_BYTES;

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
    w_deliver(w, path, body.data, NULL, 0);
    if (arts) {
        w_send_artifacts(w, j->lease, arts, w->seq, false);
        cJSON_Delete(j->arts);
        j->arts = arts;
        j->arts_seq = w->seq;
    }
    kf_buf_release(&body);
    free(text);
    free(path);
}

static bool w_should_stop(void *ctx)
{
    w_job *j = ctx;
    worker *w = j->w;
    bool stop;

    pthread_mutex_lock(&w->mu);
    stop = w->cancel_seen || w->lease_lost;
    pthread_mutex_unlock(&w->mu);
    return stop || w_drain_over(w);
}

/* Report the outcome of an attempt, then settle the job in Redis, as the
 * decision table in kf_finish.h says. */
static void w_finish(worker *w, const kf_queue_lease *l, bool ok, const char *result_json, const char *prov,
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
        kf_finish_body(&body, l->attempt, l->token, ok, result_json, error, plan.retry, w->id);
        kf_upload_add_provenance(&body, ok ? prov : NULL);
        st = w_deliver_final(w, path, body.data);
        if (st < 0)
            goto out;   /* still in the spool: leave the lease to expire (at-least-once) */
        if (kf_finish_answer_of(st, kf_report_problem(w->rep)) == KF_FINISH_REFUSED) {
            char *e = kf_asprintf("the API refused this attempt's result report (HTTP %ld)", st);
            kf_buf_reset(&body);
            kf_finish_body(&body, l->attempt, l->token, false, NULL, e, false, w->id);
            kf_log_error("%s job=%s", e, l->id);
            plan.retry = false;
            free(e);
            st = w_deliver_final(w, path, body.data);
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

static void w_set_lease(worker *w, const kf_queue_lease *l)
{
    pthread_mutex_lock(&w->mu);
    w->has_lease = l != NULL;
    w->cancel_seen = false;
    w->lease_lost = false;
    if (l) {
        snprintf(w->job_id, sizeof(w->job_id), "%s", l->id);
        snprintf(w->job_token, sizeof(w->job_token), "%s", l->token);
        w->next_renew_ms = w_now_ms() + w_renew_every(w);
    } else {
        w->job_id[0] = w->job_token[0] = '\0';
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void w_run_job(worker *w, const kf_queue_lease *l)
{
    kf_job_payload p;
    kf_err err = KF_ERR_INIT;
    const kf_backend *b = NULL;
    kf_jobproc fresh;
    char workdir[4096] = "";
    kf_run_result res;
    w_job j = { .w = w, .lease = l };
    kf_runner_hooks hooks = { &j, w_progress, w_should_stop };
    char *path = NULL, *body = NULL;
    bool cancelled, lost;
    long st;

    memset(&p, 0, sizeof(p));
    memset(&res, 0, sizeof(res));
    w->seq = 0;
    kf_log_info("job leased job=%s kind=%s target=%s attempt=%d/%d", l->id, l->kind, l->target, l->attempt,
                l->max_attempts);
    w_set_lease(w, l);
    if (kf_job_payload_parse(l->payload, &p, &err) != KF_OK) {
        char *msg = kf_asprintf("invalid job payload: %s", err.msg);
        w_finish(w, l, false, NULL, NULL, msg, false);
        free(msg);
        goto out;
    }
    b = kf_backend_find(l->backend, l->kind);
    if (!b) {
        char *msg = kf_asprintf("worker %s has no backend '%s' for kind '%s'", w->id, l->backend, l->kind);
        w_finish(w, l, false, NULL, NULL, msg, true);
        free(msg);
        goto out;
    }

    path = kf_asprintf("/v1/internal/jobs/%s/start", l->id);
    body = kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"worker\":\"%s\"}", l->attempt, l->token, w->id);
    st = w_deliver(w, path, body, NULL, 0);
    if (st >= 300) {
        /* 409/404: the job is final, cancelled or superseded in PostgreSQL. */
        kf_log_info("API refused the start; dropping the job from the queue job=%s status=%ld", l->id, st);
        if (kf_queue_ack(w->q, l->id, l->token, &err) != KF_OK)
            kf_log_warn("drop failed job=%s err=\"%s\"", l->id, err.msg);
        goto out;
    }

    /* the job process is a fresh image that never held this worker's secrets;
     * its folder is the worker's to make and to remove, however the run ends */
    if (kf_jobproc_workdir_make(l->id, workdir, sizeof(workdir), &err) != KF_OK ||
        kf_runner_run(kf_jobproc_wrap(b, workdir, &fresh), &p, &hooks, W_STOP_GRACE_MS, &res, &err) != KF_OK) {
        /* fork/pipe failure is the machine's problem, not the job's: hand it back. */
        kf_log_error("%s; handing the job back", err.msg);
        kf_queue_release(w->q, l->id, l->token, &err);
        w_sleep(1000);
        goto out;
    }
    pthread_mutex_lock(&w->mu);
    cancelled = w->cancel_seen;
    lost = w->lease_lost;
    pthread_mutex_unlock(&w->mu);

    if (lost) {
        kf_log_warn("job abandoned: lease lost job=%s attempt=%d", l->id, l->attempt);
    } else if (res.stopped && cancelled) {
        /* Reported as a final failure: the API records it as `cancelled`
         * (cancel_requested is set), and the queue drops the job. */
        kf_log_info("job stopped on cancel request job=%s attempt=%d", l->id, l->attempt);
        w_finish(w, l, false, NULL, NULL, "cancelled at the user's request", false);
    } else if (res.stopped && w_term) {
        kf_log_info("drain time over: handing the job back job=%s attempt=%d", l->id, l->attempt);
        if (kf_queue_release(w->q, l->id, l->token, &err) != KF_OK)
            kf_log_warn("hand-back failed; the lease will expire instead job=%s err=\"%s\"", l->id, err.msg);
    } else if (res.outcome == KF_RUN_OK) {
        cJSON *rj = cJSON_Parse(res.result_json);
        char *prov = cJSON_IsObject(rj) ? kf_upload_take_provenance(rj, w->id) : NULL;
        char *text = cJSON_IsObject(rj) ? cJSON_PrintUnformatted(rj) : NULL;
        bool valid = text && strlen(text) <= W_MAX_REPORT_BYTES;
        cJSON_Delete(rj);
        if (valid) {
            /* the latest best's files are the result's: sent again as the final set */
            if (j.arts)
                w_send_artifacts(w, l, j.arts, j.arts_seq, true);
            w_finish(w, l, true, text, prov, NULL, false);
        } else {
            w_finish(w, l, false, NULL, NULL, "the backend's result is not a JSON object of at most 512 KiB", false);
        }
        free(prov);
        free(text);
    } else {
        w_finish(w, l, false, NULL, NULL, res.error, res.retryable);
    }
out:
    cJSON_Delete(j.arts);
    w_set_lease(w, NULL);
    kf_jobproc_workdir_remove(workdir);
    kf_run_result_release(&res);
    kf_job_payload_release(&p);
    free(path);
    free(body);
}

/* ---- main loop -------------------------------------------------------- */

static int w_loop(worker *w)
{
    kf_err err = KF_ERR_INIT;
    int backoff = W_BACKOFF_MIN, pending = 0;
    long long next_flush = 0;
    bool warned = false;

    while (!w_term) {
        kf_queue_lease l;
        bool got = false;

        if (w_now_ms() >= next_flush && kf_spool_count(w->spool) > 0) {
            kf_spool_flush(w->spool, w->rep, &pending, &err);
            next_flush = w_now_ms() + (pending ? 1000 : 0);
        }
        if (kf_queue_lease_job(w->q, w->targets, w->n_targets, w->id, w->lease_ms, &l, &got, &err) != KF_OK) {
            if (!warned)
                kf_log_warn("cannot lease (retrying with backoff) err=\"%s\"", err.msg);
            warned = true;
            w_sleep(backoff);
            backoff = backoff * 2 > W_BACKOFF_MAX ? W_BACKOFF_MAX : backoff * 2;
            continue;
        }
        if (warned)
            kf_log_info("Redis is back; leasing again");
        warned = false;
        backoff = W_BACKOFF_MIN;
        if (!got) {
            bool woken = false;
            if (kf_queue_wait(w->q, w->targets, w->n_targets, W_WAIT_MS, &woken, &err) != KF_OK)
                w_sleep(W_BACKOFF_MIN);
            continue;
        }
        w_run_job(w, &l);
        kf_queue_lease_free(&l);
    }
    return 0;
}

static void w_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge-worker [--help]\n"
            "\n"
            "Leases kforge jobs for KFORGE_WORKER_TARGETS from Redis, runs each in a child\n"
            "process through its backend (compiled in: ");
    const kf_backend *const *all = kf_backend_all();
    for (int i = 0; all[i]; i++)
        fprintf(out, "%s%s", i ? ", " : "", all[i]->name);
    fprintf(out,
            "), renews the lease every\n"
            "KFORGE_LEASE_MS/3 (at least every second, which is when it sees cancel\n"
            "requests), reports start, iterations and the result to the API at\n"
            "KFORGE_API_URL with the token in KFORGE_TOKEN_FILE (role worker, named after\n"
            "this worker's id; mode 0600), then acks the job.  Reports\n"
            "the API cannot take are kept in KFORGE_SPOOL_DIR and resent; a job crash is a\n"
            "failed attempt (retried with backoff up to the job's max_attempts, then dead).\n"
            "SIGTERM/SIGINT: stop leasing, let the running job finish for up to\n"
            "KFORGE_DRAIN_MS, then hand it back to the queue and exit 0.\n"
            "\n"
            "Each job runs in a fresh `kforge-worker --job-process` image that never saw\n"
            "this worker's token or Redis address; every evaluation of user code runs in\n"
            "the sandbox of docs/security.md (KFORGE_SANDBOX).  The worker refuses to\n"
            "start when this machine cannot build that sandbox, and says what to enable.\n");
    kf_config_print_help(out, KF_USE_WORKER);
}

static int w_parse_targets(worker *w, const char *list, kf_err *err)
{
    const char *p = list;

    while (*p) {
        size_t n = strcspn(p, ",");
        bool known = false;
        if (n == 0 || n >= sizeof(w->target_buf[0]) || w->n_targets >= W_MAX_TARGETS)
            return kf_err_set(err, KF_CONFIG, "KFORGE_WORKER_TARGETS='%s': give 1..%d comma-separated targets",
                              list, W_MAX_TARGETS);
        memcpy(w->target_buf[w->n_targets], p, n);
        w->target_buf[w->n_targets][n] = '\0';
        for (int i = 0; kf_job_targets[i]; i++)
            known = known || strcmp(kf_job_targets[i], w->target_buf[w->n_targets]) == 0;
        if (!known)
            return kf_err_set(err, KF_CONFIG, "KFORGE_WORKER_TARGETS: unknown target '%s' (known: trn1, inf2, trn2, trn3)",
                              w->target_buf[w->n_targets]);
        w->targets[w->n_targets] = w->target_buf[w->n_targets];
        w->n_targets++;
        p += n;
        if (*p == ',')
            p++;
    }
    if (w->n_targets == 0)
        return kf_err_set(err, KF_CONFIG, "KFORGE_WORKER_TARGETS is empty");
    return KF_OK;
}

/* ---- start-up: token, identity, spool --------------------------------- */


/* The worker's token, from KFORGE_TOKEN_FILE, or (kept for existing
 * deployments, with a warning) from KFORGE_TOKEN, which is then removed
 * from the environment so no child can inherit it. */
static kf_code w_load_token(worker *w, kf_err *err)
{
    const char *file = kf_config_str(KF_CFG_TOKEN_FILE);
    const char *env = kf_config_str(KF_CFG_TOKEN);
    bool in_env = env && *env;

    if (file && *file) {
        w->token = kf_report_token_read(file, err);
        if (in_env)
            kf_log_warn("both KFORGE_TOKEN_FILE and KFORGE_TOKEN are set: using the file, removing KFORGE_TOKEN "
                        "from the environment");
    } else if (in_env) {
        w->token = kf_strdup(env);
        kf_log_warn("KFORGE_TOKEN in the environment is deprecated: put the token in a file only this user can "
                    "read (chmod 600) and set KFORGE_TOKEN_FILE to it; removed from this worker's environment");
    } else {
        kf_err_set(err, KF_CONFIG, "no token: set KFORGE_TOKEN_FILE to a file (mode 0600) holding a worker token "
                                   "made with `kforge-api token create --role worker --name WORKER_ID`");
    }
    /* KFORGE_TOKEN holds a secret in the environment, which every child
     * inherits and /proc/<pid>/environ shows: blank its bytes, unset it */
    kf_config_scrub(KF_CFG_TOKEN);
    return w->token ? KF_OK : err->code;
}

/* Learn this worker's id from its token (GET /v1/internal/whoami): a worker
 * token speaks only for the worker id that is its name.  KFORGE_WORKER_ID,
 * when set, must be that id.  With the API unreachable, a set
 * KFORGE_WORKER_ID is used as it is (the API refuses reports if it is
 * wrong, and the heartbeat's log says so); without one, the worker waits
 * for the API. */
static kf_code w_identify(worker *w, const char *configured, kf_err *err)
{
    int backoff = W_BACKOFF_MIN;
    bool warned = false;
    char body[1024];

    for (;;) {
        long st = kf_report_get(w->rep, "/v1/internal/whoami", body, sizeof(body));
        if (st == 200) {
            cJSON *j = cJSON_Parse(body);
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "worker_id");
            kf_code rc = KF_OK;

            if (!cJSON_IsString(id) || !*id->valuestring || strlen(id->valuestring) >= sizeof(w->id))
                rc = kf_err_set(err, KF_CONFIG, "the API at %s did not say which worker this token belongs to",
                                w->api_url);
            else if (configured && *configured && strcmp(configured, id->valuestring) != 0)
                rc = kf_err_set(err, KF_CONFIG,
                                "KFORGE_WORKER_ID is %s but this worker's token belongs to worker %s: set "
                                "KFORGE_WORKER_ID=%s (or leave it empty), or give this worker a token of its own "
                                "(kforge-api token create --role worker --name %s)",
                                configured, id->valuestring, id->valuestring, configured);
            else
                snprintf(w->id, sizeof(w->id), "%s", id->valuestring);
            cJSON_Delete(j);
            return rc;
        }
        if (st == 401)
            return kf_err_set(err, KF_CONFIG, "the API at %s does not know this worker's token (revoked, or the "
                                              "wrong file?): make one with `kforge-api token create --role worker "
                                              "--name WORKER_ID`", w->api_url);
        if (st == 403)
            return kf_err_set(err, KF_CONFIG, "this token is not a worker token: make one with `kforge-api token "
                                              "create --role worker --name WORKER_ID`");
        if (configured && *configured) {
            snprintf(w->id, sizeof(w->id), "%s", configured);
            kf_log_warn("cannot ask the API which worker this token belongs to (status=%ld); going on as %s",
                        st, w->id);
            return KF_OK;
        }
        if (!warned)
            kf_log_warn("waiting for the API at %s to learn this worker's id from its token (status=%ld); set "
                        "KFORGE_WORKER_ID to start without it", w->api_url, st);
        warned = true;
        w_sleep(backoff);
        backoff = backoff * 2 > W_BACKOFF_MAX ? W_BACKOFF_MAX : backoff * 2;
        if (w_term)
            return kf_err_set(err, KF_CONFIG, "stopped before the API answered");
    }
}

/* The worker's own spool, KFORGE_SPOOL_DIR/<worker id>: a report is sent
 * again only with the token of the worker that wrote it (another worker's
 * token would be refused). */
static kf_spool *w_spool_open(worker *w, kf_err *err)
{
    const char *root = kf_config_str(KF_CFG_SPOOL_DIR);
    char *dir = kf_asprintf("%s/%s", root && *root ? root : ".", w->id);
    kf_spool *sp = kf_spool_open(dir, err);
    DIR *d = opendir(root && *root ? root : ".");
    struct dirent *e;

    while (d && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] != '.' && n > 4 && strcmp(e->d_name + n - 4, ".rpt") == 0) {
            kf_log_warn("reports spooled by an older kforge-worker wait in %s: move each into the folder of the "
                        "worker that wrote it (%s/<worker id>/) to have them sent", root, root);
            break;
        }
    }
    if (d)
        closedir(d);
    free(dir);
    return sp;
}

int main(int argc, char **argv)
{
    static worker w;
    kf_err err = KF_ERR_INIT;
    pthread_t lease_thr, hb_thr;
    struct sigaction sa;
    sigset_t block, old;
    int rc;

    if (argc == 2 && strcmp(argv[1], KF_JOBPROC_ARG) == 0)
        kf_jobproc_main();          /* a job process (kf_jobproc.h): never returns */
    /* nothing of this user may ptrace the worker or read its memory (its token) */
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (kf_jobproc_init(&err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            w_usage(stdout);
            return 0;
        }
        fprintf(stderr, "kforge-worker: unknown argument '%s'\n\n", argv[i]);
        w_usage(stderr);
        return 2;
    }
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    if (kf_log_init("worker", kf_config_str(KF_CFG_LOG_LEVEL)) != 0) {
        fprintf(stderr, "kforge-worker: KFORGE_LOG_LEVEL must be debug, info, warn or error\n");
        return 2;
    }
    if (gethostname(w.host, sizeof(w.host) - 1) != 0)
        snprintf(w.host, sizeof(w.host), "localhost");
    for (const char *c = kf_config_str(KF_CFG_WORKER_ID); *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              strchr("_.:-", *c)) || strlen(kf_config_str(KF_CFG_WORKER_ID)) >= sizeof(w.id)) {
            fprintf(stderr, "kforge-worker: KFORGE_WORKER_ID '%s' must be 1-128 letters, digits and _ . : -\n",
                    kf_config_str(KF_CFG_WORKER_ID));
            return 2;
        }
    }
    /* user code must not run here unless the machine can hold it */
    if (sim_sandbox_probe(&err) != KF_OK) {
        fprintf(stderr, "kforge-worker: refusing to start: %s\n", err.msg);
        return 2;
    }
    if (w_parse_targets(&w, kf_config_str(KF_CFG_WORKER_TARGETS), &err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    w.lease_ms = kf_config_int(KF_CFG_LEASE_MS);
    w.heartbeat_ms = kf_config_int(KF_CFG_HEARTBEAT_MS);
    w.drain_ms = kf_config_int(KF_CFG_DRAIN_MS);
    w.retry_base_ms = kf_config_int(KF_CFG_RETRY_BASE_MS);
    w.retry_cap_ms = kf_config_int(KF_CFG_RETRY_CAP_MS);
    w.redis_url = kf_config_str(KF_CFG_REDIS_URL);
    w.api_url = kf_config_str(KF_CFG_API_URL);
    if (w_load_token(&w, &err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    w.q = kf_queue_connect(w.redis_url, &err);
    if (!w.q) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    w.rep = kf_report_new(w.api_url, w.token, 10000);
    if (!w.rep || w_identify(&w, kf_config_str(KF_CFG_WORKER_ID), &err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", w.rep ? err.msg : "cannot set up libcurl");
        kf_report_free(w.rep);
        kf_queue_free(w.q);
        return w_term ? 0 : 2;
    }
    w.spool = w_spool_open(&w, &err);
    if (!w.spool) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        kf_report_free(w.rep);
        kf_queue_free(w.q);
        return 2;
    }
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = w_on_term;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    /* Signals go to the main thread only. */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pthread_atfork(w_fork_prepare, w_fork_parent, w_fork_child);
    pthread_create(&lease_thr, NULL, w_lease_thread, &w);
    pthread_create(&hb_thr, NULL, w_api_heartbeat_thread, &w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    kf_log_info("worker started id=%s targets=%s lease_ms=%lld api=%s", w.id,
                kf_config_str(KF_CFG_WORKER_TARGETS), (long long)w.lease_ms, w.api_url);
    rc = w_loop(&w);

    pthread_mutex_lock(&w.mu);
    w.quit = true;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(lease_thr, NULL);
    pthread_join(hb_thr, NULL);
    if (kf_queue_worker_gone(w.q, w.id, &err) != KF_OK)
        kf_log_warn("could not leave the registry (its entry expires by itself) err=\"%s\"", err.msg);
    kf_log_info("worker stopped id=%s", w.id);
    kf_report_free(w.rep);
    kf_spool_free(w.spool);
    kf_queue_free(w.q);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    curl_global_cleanup();
    explicit_bzero(w.token, strlen(w.token));
    free(w.token);
    return rc;
}
