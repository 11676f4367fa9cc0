/* kw_lease — lease renewal + Redis registry thread (see kw_lease.h). */
#include "kw_lease.h"

#include "kw_beat.h"
#include "kf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long long kw_lease_renew_every(int64_t lease_ms)
{
    long long third = lease_ms / 3;
    return third < KW_CANCEL_CHECK_MS ? third : KW_CANCEL_CHECK_MS;
}

kw_renew_step kw_lease_after_renew(kf_code rc, int64_t lease_ms)
{
    kw_renew_step s = { false, false, 0 };

    if (rc == KF_OK)
        s.next_in_ms = kw_lease_renew_every(lease_ms);
    else if (rc == KF_STALE)
        s.lost = true;
    else {
        s.failed = true;
        s.next_in_ms = KW_RENEW_RETRY_MS;
    }
    return s;
}

void kw_lease_set(kw_worker *w, const kf_queue_lease *l)
{
    pthread_mutex_lock(&w->mu);
    w->has_lease = l != NULL;
    w->cancel_seen = false;
    w->lease_lost = false;
    if (l) {
        snprintf(w->job_id, sizeof(w->job_id), "%s", l->id);
        snprintf(w->job_token, sizeof(w->job_token), "%s", l->token);
        w->next_renew_ms = kw_now_ms() + kw_lease_renew_every(w->lease_ms);
    } else {
        w->job_id[0] = w->job_token[0] = '\0';
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

bool kw_lease_lost(kw_worker *w)
{
    bool lost;

    (void)kw_lease_should_stop(w, NULL, &lost);
    return lost;
}

bool kw_lease_should_stop(kw_worker *w, bool *cancelled, bool *lost)
{
    bool c, l;

    pthread_mutex_lock(&w->mu);
    c = w->cancel_seen;
    l = w->lease_lost;
    pthread_mutex_unlock(&w->mu);
    if (cancelled)
        *cancelled = c;
    if (lost)
        *lost = l;
    return c || l;
}

/* Refresh the registry entry; w->mu is not held. */
static void kw_lease_registry(kw_worker *w, kf_queue *tq, const char *job, bool *warned)
{
    kf_err err = KF_ERR_INIT;
    const char *healthy[KW_MAX_BACKENDS];
    kf_queue_caps caps;
    char *json;

    kw_fork_lock();
    json = kw_beat_registry_json(w, job);
    /* only the pairs of healthy backends: a wedged device's pairs lapse
     * from kf:cap with this entry's expiry, so its jobs say they wait */
    kw_beat_caps(w, healthy, &caps);
    if (kf_queue_heartbeat(tq, w->id, json, w->heartbeat_ms * 3, caps.n_backends ? &caps : NULL, &err) != KF_OK) {
        if (!*warned)
            kf_log_warn("registry heartbeat failed (will retry) err=\"%s\"", err.msg);
        *warned = true;
    } else {
        *warned = false;
    }
    free(json);
    kw_fork_unlock();
}

/* Renew the current lease; w->mu is held on entry and on return. */
static void kw_lease_renew(kw_worker *w, kf_queue *tq, bool *warned)
{
    kf_err err = KF_ERR_INIT;
    char id[65], token[65];
    bool cancel = false;
    kf_code rc;
    kw_renew_step s;

    snprintf(id, sizeof(id), "%s", w->job_id);
    snprintf(token, sizeof(token), "%s", w->job_token);
    pthread_mutex_unlock(&w->mu);
    kw_fork_lock();
    rc = kf_queue_renew(tq, id, token, w->lease_ms, &cancel, &err);
    kw_fork_unlock();
    pthread_mutex_lock(&w->mu);
    if (!w->has_lease || strcmp(token, w->job_token) != 0)
        return;   /* the job ended meanwhile: the answer is about a lease we no longer hold */
    s = kw_lease_after_renew(rc, w->lease_ms);
    if (s.lost) {
        kf_log_warn("lease lost; stopping the job (a newer attempt owns it) job=%s", id);
        w->lease_lost = true;
        return;
    }
    w->next_renew_ms = kw_now_ms() + s.next_in_ms;
    if (s.failed) {
        if (!*warned)
            kf_log_warn("lease renewal failed, retrying every %d ms job=%s err=\"%s\"", KW_RENEW_RETRY_MS, id,
                        err.msg);
        *warned = true;
        return;
    }
    if (cancel && !w->cancel_seen) {
        kf_log_info("job cancelled by request job=%s", id);
        w->cancel_seen = true;
    }
    if (*warned) {
        kf_log_info("lease renewed again job=%s", id);
        *warned = false;
    }
}

void *kw_lease_thread(void *arg)
{
    kw_worker *w = arg;
    kf_err err = KF_ERR_INIT;
    kf_queue *tq;
    long long next_hb = 0;
    bool redis_warned = false, renew_warned = false;

    kw_fork_lock();   /* the first job may be forked while this thread starts */
    tq = kf_queue_connect(w->redis_url, &err);
    kw_fork_unlock();

    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        long long now = kw_now_ms(), wake;

        if (now >= next_hb) {
            char job[65];
            snprintf(job, sizeof(job), "%s", w->has_lease ? w->job_id : "");
            pthread_mutex_unlock(&w->mu);
            kw_lease_registry(w, tq, job, &redis_warned);
            pthread_mutex_lock(&w->mu);
            next_hb = now + w->heartbeat_ms;
        }
        if (w->has_lease && !w->lease_lost && now >= w->next_renew_ms)
            kw_lease_renew(w, tq, &renew_warned);
        wake = next_hb;
        if (w->has_lease && !w->lease_lost && w->next_renew_ms < wake)
            wake = w->next_renew_ms;
        now = kw_now_ms();
        if (wake > now)
            kw_cond_wait_ms(w, wake - now);
    }
    pthread_mutex_unlock(&w->mu);
    kw_fork_lock();
    kf_queue_free(tq);
    kw_fork_unlock();
    return NULL;
}
