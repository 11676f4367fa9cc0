/* api_caps — what the fleet can run, as the job routes say it
 * (docs/protocol.md "Routing by capability").
 *
 * A job waits in the Redis set of its (target, backend) pair and only a
 * worker offering that pair leases it, so a job no worker can run is not
 * an error but a wait.  This module says so: the warning of POST /v1/jobs
 * and POST /v1/batches for a pair no worker has ever offered (kf:caps),
 * the `waiting` object of a queued job whose pair has no live worker, and
 * /readyz's list of pairs with waiting jobs and no live worker.  "Live" is
 * what the fleet view uses: a worker whose registry heartbeat has not
 * expired (kf_queue_heartbeat writes both with the same expiry).
 *
 * Cost: one Redis round trip per question (kf_queue_caps_get,
 * kf_queue_caps_missing), none per worker.  kf:caps never shrinks, so a
 * pair once seen offered is remembered here and the create routes stop
 * asking about it (the pairs live in the server's api_caps).  A pair seen
 * never offered is remembered for API_CAPS_ABSENT_MS: a client posting many
 * jobs for a pair no worker has started on yet costs one round trip per
 * interval, not one per job (so the warning can come up to that long after
 * the first such worker started).  Redis away:
 * no warning and no waiting object (the
 * answer is still given; the job itself is safe in PostgreSQL), and
 * /readyz already reports Redis. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API_CAPS_KNOWN   64   /* pairs remembered as offered (4 targets x a few backends) */
#define API_CAPS_MISSING 32   /* pairs /readyz lists */
#define API_CAPS_ABSENT  16   /* pairs remembered as never offered */
#define API_CAPS_ABSENT_MS 1000

struct api_caps {
    pthread_mutex_t mu;
    char            known[API_CAPS_KNOWN][132];
    int             n_known;
    struct {
        char     pair[132];
        uint64_t until_ms;    /* CLOCK_MONOTONIC */
    } absent[API_CAPS_ABSENT];
};

api_caps *api_caps_new(void)
{
    api_caps *c = kf_calloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void api_caps_free(api_caps *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static bool api_caps_is_known(api_caps *c, const char *target, const char *backend)
{
    char pair[132];
    bool found = false;

    snprintf(pair, sizeof(pair), "%s:%s", backend, target);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_known && !found; i++)
        found = strcmp(c->known[i], pair) == 0;
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void api_caps_remember(api_caps *c, const char *target, const char *backend)
{
    if (api_caps_is_known(c, target, backend))
        return;
    pthread_mutex_lock(&c->mu);
    if (c->n_known < API_CAPS_KNOWN)
        snprintf(c->known[c->n_known++], sizeof(c->known[0]), "%s:%s", backend, target);
    pthread_mutex_unlock(&c->mu);
}

static uint64_t api_caps_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* True when the pair was seen never offered less than API_CAPS_ABSENT_MS ago. */
static bool api_caps_is_absent(api_caps *c, const char *target, const char *backend)
{
    char pair[132];
    uint64_t now = api_caps_now_ms();
    bool found = false;

    snprintf(pair, sizeof(pair), "%s:%s", backend, target);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < API_CAPS_ABSENT && !found; i++)
        found = c->absent[i].until_ms > now && strcmp(c->absent[i].pair, pair) == 0;
    pthread_mutex_unlock(&c->mu);
    return found;
}

/* Remembers a pair as never offered, in the slot of the same pair or of the
 * one that expires first. */
static void api_caps_remember_absent(api_caps *c, const char *target, const char *backend)
{
    char pair[132];
    uint64_t now = api_caps_now_ms();
    int slot = 0;

    snprintf(pair, sizeof(pair), "%s:%s", backend, target);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < API_CAPS_ABSENT; i++) {
        if (strcmp(c->absent[i].pair, pair) == 0) {
            slot = i;
            break;
        }
        if (c->absent[i].until_ms < c->absent[slot].until_ms)
            slot = i;
    }
    snprintf(c->absent[slot].pair, sizeof(c->absent[slot].pair), "%s", pair);
    c->absent[slot].until_ms = now + API_CAPS_ABSENT_MS;
    pthread_mutex_unlock(&c->mu);
}

static cJSON *api_caps_pair(const char *target, const char *backend)
{
    cJSON *o = cJSON_CreateObject();

    cJSON_AddStringToObject(o, "target", target);
    cJSON_AddStringToObject(o, "backend", backend);
    return o;
}

cJSON *api_caps_warnings(api_req *r, const char *const *targets, const char *const *backends, int n)
{
    const char *qt[KF_QUEUE_MAX_PAIRS], *qb[KF_QUEUE_MAX_PAIRS];
    kf_queue_cap_state st[KF_QUEUE_MAX_PAIRS];
    bool ask[KF_QUEUE_MAX_PAIRS];
    const char *at[KF_QUEUE_MAX_PAIRS], *ab[KF_QUEUE_MAX_PAIRS];
    cJSON *out = NULL;
    kf_err e = KF_ERR_INIT;
    kf_queue *q;
    int nq = 0, na = 0;

    /* The distinct pairs not yet known to have been offered. */
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int k = 0; k < nq && !dup; k++)
            dup = strcmp(qt[k], targets[i]) == 0 && strcmp(qb[k], backends[i]) == 0;
        if (dup || api_caps_is_known(api_req_caps(r), targets[i], backends[i]))
            continue;
        if (nq == KF_QUEUE_MAX_PAIRS)
            break;
        qt[nq] = targets[i];
        qb[nq] = backends[i];
        ask[nq] = !api_caps_is_absent(api_req_caps(r), targets[i], backends[i]);
        memset(&st[nq], 0, sizeof(st[nq]));
        if (ask[nq]) {
            at[na] = targets[i];
            ab[na++] = backends[i];
        }
        nq++;
    }
    if (nq == 0)
        return NULL;
    if (na > 0) {
        kf_queue_cap_state got[KF_QUEUE_MAX_PAIRS];
        q = api_qpool_get(api_req_qpool(r), &e);
        if (!q || kf_queue_caps_get(q, at, ab, na, got, &e) != KF_OK) {
            kf_log_warn("cannot tell whether a worker offers what was asked (no warning given) err=\"%s\" req=%s",
                        e.msg, r->request_id);
            api_qpool_put(api_req_qpool(r), q);
            return NULL;
        }
        api_qpool_put(api_req_qpool(r), q);
        for (int k = 0, j = 0; k < nq; k++)
            if (ask[k])
                st[k] = got[j++];
    }
    for (int k = 0; k < nq; k++) {
        cJSON *w;
        char msg[320];
        if (st[k].offered) {
            api_caps_remember(api_req_caps(r), qt[k], qb[k]);
            continue;
        }
        if (ask[k])
            api_caps_remember_absent(api_req_caps(r), qt[k], qb[k]);
        if (!out)
            out = cJSON_CreateArray();
        w = cJSON_CreateObject();
        snprintf(msg, sizeof(msg),
                 "no worker has ever offered backend '%s' for target '%s': the job is accepted and stays queued "
                 "until a worker that runs it starts (KFORGE_WORKER_TARGETS, and a worker built with that backend)",
                 qb[k], qt[k]);
        cJSON_AddStringToObject(w, "code", "capability-never-offered");
        cJSON_AddStringToObject(w, "message", msg);
        cJSON_AddItemToObject(w, "capability", api_caps_pair(qt[k], qb[k]));
        cJSON_AddItemToArray(out, w);
    }
    return out;
}

char *api_doc_with_member(const char *doc, const char *name, const cJSON *value)
{
    kf_buf b = KF_BUF_INIT;
    size_t n = strlen(doc);
    char *w;

    while (n > 0 && doc[n - 1] != '}')
        n--;
    if (n == 0 || !value)
        return kf_strdup(doc);
    w = kf_json_print(value);
    kf_buf_add(&b, doc, n - 1);
    kf_buf_addf(&b, ", \"%s\" : ", name);
    kf_buf_adds(&b, w);
    kf_buf_adds(&b, "}");
    free(w);
    return kf_buf_detach(&b);
}

/* The waiting object of a pair's state, or NULL when a live worker offers it. */
static cJSON *api_caps_waiting_of(api_req *r, const kf_queue_cap_state *st)
{
    cJSON *o;
    char reason[320];

    if (st->offered)
        api_caps_remember(api_req_caps(r), st->target, st->backend);
    if (st->live_workers > 0)
        return NULL;
    snprintf(reason, sizeof(reason), "no live worker offers backend '%s' for target '%s'%s", st->backend, st->target,
             st->offered ? " (one did before: it stopped, lost its heartbeat, or its backend failed a health check)"
                         : " (none ever has)");
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "reason", reason);
    cJSON_AddItemToObject(o, "capability", api_caps_pair(st->target, st->backend));
    cJSON_AddBoolToObject(o, "ever_offered", st->offered);
    return o;
}

cJSON *api_caps_waiting(api_req *r, const char *target, const char *backend)
{
    kf_queue_cap_state st;
    kf_err e = KF_ERR_INIT;
    kf_queue *q = api_qpool_get(api_req_qpool(r), &e);

    if (!q || kf_queue_caps_get(q, &target, &backend, 1, &st, &e) != KF_OK) {
        api_qpool_put(api_req_qpool(r), q);
        return NULL;
    }
    api_qpool_put(api_req_qpool(r), q);
    return api_caps_waiting_of(r, &st);
}

void api_caps_waiting_page(api_req *r, int n, const char *const *state, const char *const *targets,
                           const char *const *backends, cJSON **out)
{
    const char *qt[KF_QUEUE_MAX_PAIRS], *qb[KF_QUEUE_MAX_PAIRS];
    kf_queue_cap_state st[KF_QUEUE_MAX_PAIRS];
    kf_err e = KF_ERR_INIT;
    kf_queue *q;
    int nq = 0;

    for (int i = 0; i < n; i++) {
        bool dup = false;
        out[i] = NULL;
        if (strcmp(state[i], "queued") != 0)
            continue;
        for (int k = 0; k < nq && !dup; k++)
            dup = strcmp(qt[k], targets[i]) == 0 && strcmp(qb[k], backends[i]) == 0;
        if (!dup && nq < KF_QUEUE_MAX_PAIRS) {
            qt[nq] = targets[i];
            qb[nq++] = backends[i];
        }
    }
    if (nq == 0)
        return;
    q = api_qpool_get(api_req_qpool(r), &e);
    if (!q || kf_queue_caps_get(q, qt, qb, nq, st, &e) != KF_OK) {
        api_qpool_put(api_req_qpool(r), q);
        return;
    }
    api_qpool_put(api_req_qpool(r), q);
    for (int i = 0; i < n; i++) {
        if (strcmp(state[i], "queued") != 0)
            continue;
        for (int k = 0; k < nq; k++)
            if (strcmp(qt[k], targets[i]) == 0 && strcmp(qb[k], backends[i]) == 0) {
                out[i] = api_caps_waiting_of(r, &st[k]);
                break;
            }
    }
}

void api_caps_readyz(api_req *r, cJSON *doc, cJSON *checks)
{
    kf_queue_cap_state st[API_CAPS_MISSING];
    kf_err e = KF_ERR_INIT;
    kf_queue *q = api_qpool_get(api_req_qpool(r), &e);
    cJSON *arr, *warnings;
    long long jobs = 0;
    int n = 0;

    if (!q || kf_queue_caps_missing(q, API_CAPS_MISSING, st, &n, &e) != KF_OK) {
        api_qpool_put(api_req_qpool(r), q);
        cJSON_AddStringToObject(checks, "capabilities", "unknown");
        return;
    }
    api_qpool_put(api_req_qpool(r), q);
    if (n == 0) {
        cJSON_AddStringToObject(checks, "capabilities", "ok");
        return;
    }
    cJSON_AddStringToObject(checks, "capabilities", "missing");
    arr = cJSON_AddArrayToObject(doc, "missing_capabilities");
    for (int i = 0; i < n; i++) {
        cJSON *o = api_caps_pair(st[i].target, st[i].backend);
        char reason[400];
        snprintf(reason, sizeof(reason), "%lld job(s) wait for backend '%.64s' on target '%.64s' and no live worker "
                 "offers it%s", (long long)st[i].waiting, st[i].backend, st[i].target,
                 st[i].offered ? "" : " (none ever has)");
        cJSON_AddNumberToObject(o, "waiting", (double)st[i].waiting);
        cJSON_AddBoolToObject(o, "ever_offered", st[i].offered);
        cJSON_AddStringToObject(o, "reason", reason);
        cJSON_AddItemToArray(arr, o);
        jobs += st[i].waiting;
    }
    warnings = cJSON_GetObjectItemCaseSensitive(doc, "warnings");
    if (!warnings)
        warnings = cJSON_AddArrayToObject(doc, "warnings");
    {
        char w[256];
        snprintf(w, sizeof(w), "%lld queued job(s) wait for %d (target, backend) pair(s) no live worker offers: "
                 "see missing_capabilities", jobs, n);
        cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
    }
}
