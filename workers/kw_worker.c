/* kw_worker — shared state, configuration checks, fork lock, drain clock
 * (see kw_worker.h). */
#include "kw_worker.h"

#include "kw_beat.h"
#include "kw_lease.h"
#include "kf_backend.h"
#include "kf_buf.h"
#include "kf_job.h"
#include "kf_log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

long long kw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kw_backoff_next(int ms)
{
    return ms * 2 > KW_BACKOFF_MAX ? KW_BACKOFF_MAX : ms * 2;
}

long long kw_drain_deadline(bool term, long long deadline, long long now, int64_t drain_ms)
{
    if (!term)
        return 0;
    return deadline != 0 ? deadline : now + drain_ms;
}

bool kw_drain_over(kw_worker *w)
{
    long long now;

    if (!w->term)
        return false;
    now = kw_now_ms();
    if (w->drain_deadline_ms == 0) {
        w->drain_deadline_ms = kw_drain_deadline(true, 0, now, w->drain_ms);
        kf_log_info("SIGTERM: no new leases; current job may run %lld ms more", (long long)w->drain_ms);
    }
    return now >= w->drain_deadline_ms;
}

void kw_sleep(kw_worker *w, int ms)
{
    long long end = kw_now_ms() + ms;
    while (!w->term && kw_now_ms() < end) {
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

kf_code kw_worker_parse_targets(kw_worker *w, const char *list, kf_err *err)
{
    const char *p = list ? list : "";

    while (*p) {
        size_t n = strcspn(p, ",");
        bool known = false;
        if (n == 0 || n >= sizeof(w->target_buf[0]) || w->n_targets >= KW_MAX_TARGETS)
            return kf_err_set(err, KF_CONFIG, "KFORGE_WORKER_TARGETS='%s': give 1..%d comma-separated targets",
                              list, KW_MAX_TARGETS);
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

/* The compiled-in backend named by the n bytes at p, or NULL. */
static const kf_backend *kw_backend_named(const char *p, size_t n)
{
    const kf_backend *const *all = kf_backend_all();

    for (int i = 0; all[i]; i++) {
        if (strlen(all[i]->name) == n && strncmp(all[i]->name, p, n) == 0)
            return all[i];
    }
    return NULL;
}

kf_code kw_worker_set_caps(kw_worker *w, const char *list, kf_err *err)
{
    const kf_backend *const *all = kf_backend_all();
    const char *p = list ? list : "";
    kf_buf names = KF_BUF_INIT;

    w->n_backends = 0;
    for (int i = 0; all[i]; i++)
        kf_buf_addf(&names, "%s%s", i ? ", " : "", all[i]->name);
    if (!*p) {   /* every compiled-in backend this machine can run */
        for (int i = 0; all[i] && w->n_backends < KW_MAX_BACKENDS; i++)
            if (kf_backend_available(all[i]))
                w->backends[w->n_backends++] = all[i]->name;
    }
    while (*p) {
        size_t n = strcspn(p, ",");
        const kf_backend *b = kw_backend_named(p, n);
        bool dup = false;
        for (int i = 0; b && i < w->n_backends; i++)
            dup = dup || w->backends[i] == b->name;
        if (!b || dup || w->n_backends >= KW_MAX_BACKENDS) {
            kf_err_set(err, KF_CONFIG, "KFORGE_WORKER_BACKENDS='%s': '%.*s' is %s (compiled in: %s)", list, (int)n, p,
                       !b ? "not a backend of this worker" : "named twice", names.data);
            kf_buf_release(&names);
            return KF_CONFIG;
        }
        if (!kf_backend_available(b)) {
            kf_err_set(err, KF_CONFIG,
                       "KFORGE_WORKER_BACKENDS='%s': backend '%s' cannot run on this machine (for neuron: "
                       "KFORGE_NEURON_RUNNER must name the device runner, docs/neuron-backend.md)",
                       list, b->name);
            kf_buf_release(&names);
            return KF_CONFIG;
        }
        w->backends[w->n_backends++] = b->name;
        p += n;
        if (*p == ',' && !*++p) {
            kf_err_set(err, KF_CONFIG, "KFORGE_WORKER_BACKENDS='%s' ends with a comma", list);
            kf_buf_release(&names);
            return KF_CONFIG;
        }
    }
    kf_buf_release(&names);
    if (w->n_backends * w->n_targets > KF_QUEUE_MAX_PAIRS)
        return kf_err_set(err, KF_CONFIG, "%d targets x %d backends is more than the %d pairs a worker may serve",
                          w->n_targets, w->n_backends, KF_QUEUE_MAX_PAIRS);
    w->caps = (kf_queue_caps){ w->targets, w->n_targets, w->backends, w->n_backends };
    return KF_OK;
}

bool kw_worker_id_valid(const char *id)
{
    if (strlen(id) >= sizeof(((kw_worker *)0)->id))
        return false;
    for (const char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              strchr("_.:-", *c)))
            return false;
    return true;
}

static pthread_mutex_t kw_fork_mu = PTHREAD_MUTEX_INITIALIZER;

void kw_fork_lock(void)
{
    pthread_mutex_lock(&kw_fork_mu);
}

void kw_fork_unlock(void)
{
    pthread_mutex_unlock(&kw_fork_mu);
}

static void kw_fork_child(void)
{
    pthread_mutex_init(&kw_fork_mu, NULL);   /* the child's only thread holds nothing else */
}

void kw_fork_install(void)
{
    pthread_atfork(kw_fork_lock, kw_fork_unlock, kw_fork_child);
}

int kw_cond_wait_ms(kw_worker *w, long long ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

void kw_worker_start_threads(kw_worker *w)
{
    sigset_t block, old;

    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* Signals go to the main thread only. */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    kw_fork_install();
    pthread_create(&w->lease_thr, NULL, kw_lease_thread, w);
    pthread_create(&w->beat_thr, NULL, kw_beat_thread, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void kw_worker_stop_threads(kw_worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->lease_thr, NULL);
    pthread_join(w->beat_thr, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}
