/* kw_beat — liveness documents and the API heartbeat thread (see kw_beat.h). */
#include "kw_beat.h"

#include "kf_alloc.h"
#include "kf_backend.h"
#include "kf_buf.h"
#include "kf_json.h"
#include "kf_log.h"
#include "sim_sandbox.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* "targets":[...],"backends":[...] without the braces. */
static void kw_beat_lists(kf_buf *b, const kw_worker *w)
{
    const kf_backend *const *all = kf_backend_all();

    kf_buf_adds(b, "\"targets\":[");
    for (int i = 0; i < w->n_targets; i++)
        kf_buf_addf(b, "%s\"%s\"", i ? "," : "", w->targets[i]);
    kf_buf_adds(b, "],\"backends\":[");
    for (int i = 0, n = 0; all[i]; i++)
        if (kf_backend_available(all[i]))
            kf_buf_addf(b, "%s\"%s\"", n++ ? "," : "", all[i]->name);
    kf_buf_adds(b, "]");
}

static const char *kw_beat_sandbox(void)
{
    return sim_sandbox_unconfined() ? "unconfined" : "strict";
}

/* Why this worker leases nothing now ("" when healthy): written by the
 * main thread between jobs, read by the registry and heartbeat writers. */
static pthread_mutex_t kw_health_mu = PTHREAD_MUTEX_INITIALIZER;
static char kw_health_why[512];

void kw_beat_set_unhealthy(const char *why)
{
    pthread_mutex_lock(&kw_health_mu);
    snprintf(kw_health_why, sizeof(kw_health_why), "%s", why ? why : "");
    pthread_mutex_unlock(&kw_health_mu);
}

/* ,"unhealthy":null or the reason this worker leases nothing now. */
static void kw_beat_health(kf_buf *b)
{
    char why[sizeof(kw_health_why)];
    pthread_mutex_lock(&kw_health_mu);
    snprintf(why, sizeof(why), "%s", kw_health_why);
    pthread_mutex_unlock(&kw_health_mu);
    kf_buf_adds(b, ",\"unhealthy\":");
    if (why[0])
        kf_json_add_str(b, why);
    else
        kf_buf_adds(b, "null");
}

char *kw_beat_registry_json(const kw_worker *w, const char *job)
{
    kf_buf b = KF_BUF_INIT;

    kf_buf_addf(&b, "{\"id\":\"%s\",\"host\":\"%s\",\"pid\":%d,", w->id, w->host, (int)getpid());
    kw_beat_lists(&b, w);
    if (job && *job)
        kf_buf_addf(&b, ",\"job\":\"%s\"", job);
    else
        kf_buf_adds(&b, ",\"job\":null");
    kf_buf_addf(&b, ",\"started_ms\":%lld,\"sandbox\":\"%s\"", w->started_ms, kw_beat_sandbox());
    kw_beat_health(&b);
    kf_buf_adds(&b, "}");
    return kf_buf_detach(&b);
}

char *kw_beat_api_body(const kw_worker *w)
{
    kf_buf b = KF_BUF_INIT;

    kf_buf_adds(&b, "{");
    kw_beat_lists(&b, w);
    kf_buf_addf(&b, ",\"host\":\"%s\",\"sandbox\":\"%s\"", w->host, kw_beat_sandbox());
    kw_beat_health(&b);
    kf_buf_adds(&b, "}");
    return kf_buf_detach(&b);
}

void *kw_beat_thread(void *arg)
{
    kw_worker *w = arg;
    kf_report *rep;
    char *path, *body;
    bool warned = false;

    kw_fork_lock();   /* the first job may be forked while this thread starts */
    rep = kf_report_new(w->api_url, w->token, 2000);
    path = kf_asprintf("/v1/internal/workers/%s/heartbeat", w->id);
    body = kw_beat_api_body(w);
    kw_fork_unlock();

    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        char why[256] = "";
        pthread_mutex_unlock(&w->mu);
        kw_fork_lock();
        /* rebuilt each beat: the health it carries changes between jobs */
        free(body);
        body = kw_beat_api_body(w);
        long st = rep ? kf_report_post(rep, path, body, why, sizeof(why)) : 0;
        if (st < 200 || st >= 300) {
            if (!warned)
                kf_log_warn("API heartbeat not accepted (will retry) status=%ld detail=\"%s\"", st, why);
            warned = true;
        } else {
            warned = false;
        }
        kw_fork_unlock();
        pthread_mutex_lock(&w->mu);
        /* The condition variable is also broadcast on every lease change:
         * sleep out the whole interval unless told to quit. */
        {
            long long until = kw_now_ms() + w->heartbeat_ms;
            while (!w->quit && kw_now_ms() < until)
                kw_cond_wait_ms(w, until - kw_now_ms());
        }
    }
    pthread_mutex_unlock(&w->mu);
    kw_fork_lock();
    free(body);
    free(path);
    kf_report_free(rep);
    kw_fork_unlock();
    return NULL;
}
