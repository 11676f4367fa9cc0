/* api_pg — a fixed-size pool of PostgreSQL connections for kforge-api.
 *
 * Connections are opened on first use and re-opened when libpq reports them
 * broken, so the API recovers by itself after PostgreSQL restarts. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct api_pg_slot {
    PGconn  *c;
    bool     busy;
    uint64_t prepared;   /* bit i: statement i is prepared on c */
    kf_db_prepared moves;   /* the job moves prepared on c (kf_db_apply) */
} api_pg_slot;

struct api_pg_pool {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    char           *dsn;
    int             size;
    api_pg_slot    *slots;
    long long       down_until_ms;  /* after a failed connect, fail fast until then */
};

/* After a failed connect, requests are answered 503 at once for this long
 * instead of each waiting for its own connect attempt to fail. */
#define API_PG_FAIL_FAST_MS 250

static long long api_pg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

PGconn *api_pg_connect(const char *dsn, kf_err *err)
{
    return kf_pg_connect(dsn, "kforge-api", err);
}

api_pg_pool *api_pg_pool_new(const char *dsn, int size)
{
    api_pg_pool *p = kf_calloc(1, sizeof(*p));
    pthread_condattr_t ca;

    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    p->dsn = kf_strdup(dsn);
    p->size = size < 1 ? 1 : size;
    p->slots = kf_calloc((size_t)p->size, sizeof(*p->slots));
    return p;
}

void api_pg_pool_free(api_pg_pool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->size; i++)
        PQfinish(p->slots[i].c);
    free(p->slots);
    free(p->dsn);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

PGconn *api_pg_acquire(api_pg_pool *p, int wait_ms, kf_err *err)
{
    struct timespec dl;
    api_pg_slot *s = NULL;

    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += wait_ms / 1000;
    dl.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&p->mu);
    for (;;) {
        /* Prefer a slot with an open connection. */
        for (int i = 0; i < p->size && !s; i++)
            if (!p->slots[i].busy && p->slots[i].c)
                s = &p->slots[i];
        for (int i = 0; i < p->size && !s; i++)
            if (!p->slots[i].busy)
                s = &p->slots[i];
        if (s)
            break;
        if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) == ETIMEDOUT) {
            pthread_mutex_unlock(&p->mu);
            kf_err_set(err, KF_UNAVAILABLE, "all %d PostgreSQL connections are busy; retry shortly", p->size);
            return NULL;
        }
    }
    s->busy = true;
    pthread_mutex_unlock(&p->mu);

    if (s->c && PQstatus(s->c) != CONNECTION_OK) {
        PQfinish(s->c);
        s->c = NULL;
    }
    if (!s->c) {
        s->prepared = 0;
        s->moves = 0;
    }
    if (!s->c) {
        long long now = api_pg_now_ms();
        bool fast;

        pthread_mutex_lock(&p->mu);
        fast = now < p->down_until_ms;
        pthread_mutex_unlock(&p->mu);
        if (fast)
            kf_err_set(err, KF_UNAVAILABLE, "PostgreSQL was unreachable moments ago; retry shortly");
        else
            s->c = api_pg_connect(p->dsn, err);
        pthread_mutex_lock(&p->mu);
        if (!s->c) {
            if (!fast)
                p->down_until_ms = api_pg_now_ms() + API_PG_FAIL_FAST_MS;
            s->busy = false;
            pthread_cond_signal(&p->cv);
        } else {
            p->down_until_ms = 0;
        }
        pthread_mutex_unlock(&p->mu);
    }
    return s->c;
}

void api_pg_release(api_pg_pool *p, PGconn *c)
{
    if (!c)
        return;
    switch (PQtransactionStatus(c)) {
    case PQTRANS_IDLE:
        break;
    case PQTRANS_INTRANS:
    case PQTRANS_INERROR: {
        PGresult *r = PQexec(c, "ROLLBACK");
        PQclear(r);
        break;
    }
    case PQTRANS_ACTIVE:
    case PQTRANS_UNKNOWN:
        /* Leave it to acquire(): a broken connection is re-opened there. */
        break;
    }
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->size; i++) {
        if (p->slots[i].c == c) {
            p->slots[i].busy = false;
            if (PQtransactionStatus(c) == PQTRANS_ACTIVE) {
                PQfinish(c);
                p->slots[i].c = NULL;
                p->slots[i].prepared = 0;
                p->slots[i].moves = 0;
            }
            break;
        }
    }
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

bool api_pg_error_transient(PGconn *c, const PGresult *res)
{
    return kf_pg_transient(c, res);
}

void api_pg_reset(api_pg_pool *p, PGconn *c)
{
    uint64_t *mask = api_pg_prepared(p, c);
    kf_db_prepared *moves = api_pg_moves_prepared(p, c);

    PQreset(c);
    if (mask)
        *mask = 0;
    if (moves)
        *moves = 0;
}

kf_db_prepared *api_pg_moves_prepared(api_pg_pool *p, PGconn *c)
{
    /* As api_pg_prepared: the slot is the caller's. */
    for (int i = 0; i < p->size; i++)
        if (p->slots[i].c == c)
            return &p->slots[i].moves;
    return NULL;
}

uint64_t *api_pg_prepared(api_pg_pool *p, PGconn *c)
{
    /* The slot is busy (owned by the caller), so no lock is needed. */
    for (int i = 0; i < p->size; i++)
        if (p->slots[i].c == c)
            return &p->slots[i].prepared;
    return NULL;
}
