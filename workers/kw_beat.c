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
#include <string.h>
#include <unistd.h>

/* "targets":[...],"backends":[...] without the braces: the lists the
 * worker leases from (w->caps). */
static void kw_beat_lists(kf_buf *b, const kw_worker *w)
{
    kf_buf_adds(b, "\"targets\":[");
    for (int i = 0; i < w->n_targets; i++)
        kf_buf_addf(b, "%s\"%s\"", i ? "," : "", w->targets[i]);
    kf_buf_adds(b, "],\"backends\":[");
    for (int i = 0; i < w->n_backends; i++)
        kf_buf_addf(b, "%s\"%s\"", i ? "," : "", w->backends[i]);
    kf_buf_adds(b, "]");
}

static const char *kw_beat_sandbox(void)
{
    return sim_sandbox_unconfined() ? "unconfined" : "strict";
}

/* Each backend's health ("" healthy, else why its health check failed):
 * written by the main thread between jobs, read by the registry and
 * heartbeat writers and by the lease loop.  Indexed by backend name; a
 * worker has at most KW_MAX_BACKENDS. */
static pthread_mutex_t kw_health_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[32];
    char why[512];
} kw_health[KW_MAX_BACKENDS];

void kw_beat_set_health(const char *backend, const char *why)
{
    int free_slot = -1;
    pthread_mutex_lock(&kw_health_mu);
    for (int i = 0; i < KW_MAX_BACKENDS; i++) {
        if (strcmp(kw_health[i].name, backend) == 0) {
            snprintf(kw_health[i].why, sizeof(kw_health[i].why), "%s", why ? why : "");
            pthread_mutex_unlock(&kw_health_mu);
            return;
        }
        if (free_slot < 0 && !kw_health[i].name[0])
            free_slot = i;
    }
    if (free_slot >= 0 && why && *why) {
        snprintf(kw_health[free_slot].name, sizeof(kw_health[free_slot].name), "%s", backend);
        snprintf(kw_health[free_slot].why, sizeof(kw_health[free_slot].why), "%s", why);
    }
    pthread_mutex_unlock(&kw_health_mu);
}

/* Why backend is unhealthy into why[len] ("" when healthy); true when healthy. */
static bool kw_beat_health_of(const char *backend, char *why, size_t len)
{
    why[0] = '\0';
    pthread_mutex_lock(&kw_health_mu);
    for (int i = 0; i < KW_MAX_BACKENDS; i++)
        if (strcmp(kw_health[i].name, backend) == 0)
            snprintf(why, len, "%s", kw_health[i].why);
    pthread_mutex_unlock(&kw_health_mu);
    return why[0] == '\0';
}

bool kw_beat_backend_healthy(const char *backend)
{
    char why[512];
    return kw_beat_health_of(backend, why, sizeof(why));
}

int kw_beat_caps(const kw_worker *w, const char **buf, kf_queue_caps *caps)
{
    int n = 0;
    for (int i = 0; i < w->n_backends; i++)
        if (kw_beat_backend_healthy(w->backends[i]))
            buf[n++] = w->backends[i];
    *caps = (kf_queue_caps){ w->targets, w->n_targets, buf, n };
    return n;
}

/* ,"unhealthy":null or "backend: why; ..." (the backends whose jobs the
 * worker does not lease now), ,"unhealthy_backends":{backend: why}. */
static void kw_beat_health(kf_buf *b, const kw_worker *w)
{
    kf_buf sum = KF_BUF_INIT, per = KF_BUF_INIT;
    for (int i = 0; i < w->n_backends; i++) {
        char why[512];
        if (kw_beat_health_of(w->backends[i], why, sizeof(why)))
            continue;
        kf_buf_addf(&sum, "%s%s: %s", sum.len ? "; " : "", w->backends[i], why);
        kf_buf_addf(&per, "%s\"%s\":", per.len ? "," : "", w->backends[i]);
        kf_json_add_str(&per, why);
    }
    kf_buf_adds(b, ",\"unhealthy\":");
    if (sum.len)
        kf_json_add_str(b, sum.data);
    else
        kf_buf_adds(b, "null");
    kf_buf_adds(b, ",\"unhealthy_backends\":{");
    if (per.len)
        kf_buf_add(b, per.data, per.len);
    kf_buf_adds(b, "}");
    kf_buf_release(&sum);
    kf_buf_release(&per);
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
    kw_beat_health(&b, w);
    kf_buf_adds(&b, "}");
    return kf_buf_detach(&b);
}

char *kw_beat_api_body(const kw_worker *w)
{
    kf_buf b = KF_BUF_INIT;

    kf_buf_adds(&b, "{");
    kw_beat_lists(&b, w);
    kf_buf_addf(&b, ",\"host\":\"%s\",\"sandbox\":\"%s\"", w->host, kw_beat_sandbox());
    kw_beat_health(&b, w);
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
