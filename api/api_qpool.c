/* api_qpool — kf_queue handles for the API's threads.
 *
 * kf_queue is one Redis connection and not thread-safe, so each request
 * borrows a handle and gives it back.  Handles are made on demand; at most
 * `keep` idle ones are kept.  When Redis is down, get() returns NULL fast
 * (loopback connects are refused at once) and the caller carries on
 * without the queue. */
#include "api.h"
#include "kf_alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct api_qpool {
    pthread_mutex_t mu;
    char           *url;
    kf_queue      **idle;
    int             n_idle, keep;
};

api_qpool *api_qpool_new(const char *redis_url, int keep)
{
    api_qpool *p = kf_calloc(1, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    p->url = kf_strdup(redis_url);
    p->keep = keep < 1 ? 1 : keep;
    p->idle = kf_calloc((size_t)p->keep, sizeof(kf_queue *));
    return p;
}

void api_qpool_free(api_qpool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_idle; i++)
        kf_queue_free(p->idle[i]);
    free(p->idle);
    free(p->url);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

kf_queue *api_qpool_get(api_qpool *p, kf_err *err)
{
    kf_queue *q = NULL;

    pthread_mutex_lock(&p->mu);
    if (p->n_idle > 0)
        q = p->idle[--p->n_idle];
    pthread_mutex_unlock(&p->mu);
    if (q)
        return q;
    q = kf_queue_connect(p->url, err);
    return q;
}

void api_qpool_put(api_qpool *p, kf_queue *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&p->mu);
    if (p->n_idle < p->keep) {
        p->idle[p->n_idle++] = q;
        q = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    kf_queue_free(q);
}
