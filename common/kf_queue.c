/*
 * kf_queue — the Redis job queue (see kf_queue.h, docs/protocol.md).
 *
 * One hiredis connection per handle.  The connection is made lazily and
 * dropped on any transport error; the next call connects again, so a Redis
 * restart costs the caller one KF_REDIS per handle and nothing else.
 * Scripts are loaded with SCRIPT LOAD after each connect and run with
 * EVALSHA; a NOSCRIPT reply (script cache flushed) loads them again and
 * retries the call once.
 */
#include "kf_queue.h"

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_log.h"
#include "kf_queue_lua.h"
#include "kf_tls.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define KQ_MAX_PAIRS    KF_QUEUE_MAX_PAIRS
#define KQ_PAIR_LEN     (2 * 64 + 2)   /* 'backend:target' + NUL */
/* a script's keys + arguments: the largest is an enqueue of KF_QUEUE_ENQUEUE_MAX jobs */
#define KQ_MAX_ARGS     (KF_QUEUE_ENQUEUE_MAX * 10)
#define KQ_CONNECT_MS   2000
#define KQ_COMMAND_MS   5000

struct kf_queue {
    redisContext *c;                  /* NULL while disconnected */
    kf_tls_relay *tls;                /* rediss://: the relay behind c's socket */
    kf_queue_url  u;                  /* where, and the credentials */
    char          sha[KF_QS__COUNT][41];
};

/* ---- URL parsing ---------------------------------------------------- */

/* The URL as messages show it: everything up to the last '@' (credentials,
 * or what may be credentials in a malformed URL) replaced by "***". */
static void kq_url_shown(const char *url, char *out, size_t cap)
{
    const char *at = url ? strrchr(url, '@') : NULL;

    if (!url)
        snprintf(out, cap, "(null)");
    else if (!at)
        snprintf(out, cap, "%s", url);
    else
        snprintf(out, cap, "%s***%s",
                 strncmp(url, "redis://", 8) == 0 ? "redis://" : strncmp(url, "rediss://", 9) == 0 ? "rediss://" : "",
                 at);
    out[kf_utf8_cut(out, strlen(out))] = '\0';
}

kf_code kf_queue_url_parse(const char *url, kf_queue_url *u, kf_err *err)
{
    const char *p, *at, *slash, *colon, *hend;
    char *end, shown[160];
    long port = 6379, db = 0;

    memset(u, 0, sizeof(*u));
    kq_url_shown(url, shown, sizeof(shown));
    if (url && strncmp(url, "rediss://", 9) == 0) {
        u->tls = 1;
        p = url + 9;
    } else if (url && strncmp(url, "redis://", 8) == 0) {
        p = url + 8;
    } else {
        return kf_err_set(err, KF_CONFIG,
                          "Redis URL '%s' must look like redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (rediss:// for TLS)",
                          shown);
    }
    slash = strchr(p, '/');
    at = strchr(p, '@');
    if (at && slash && at > slash)
        at = NULL;
    if (at) {
        const char *sep = memchr(p, ':', (size_t)(at - p));
        if (!sep)
            return kf_err_set(err, KF_CONFIG, "Redis URL '%s': credentials must be [USER]:PASSWORD@", shown);
        if (sep > p)
            u->user = kf_strndup(p, (size_t)(sep - p));
        u->password = kf_strndup(sep + 1, (size_t)(at - sep - 1));
        p = at + 1;
    }
    hend = slash ? slash : p + strlen(p);
    colon = memchr(p, ':', (size_t)(hend - p));
    if (colon) {
        errno = 0;
        port = strtol(colon + 1, &end, 10);
        if (errno || end != hend || colon[1] < '0' || colon[1] > '9' || port < 1 || port > 65535) {
            kf_queue_url_release(u);
            return kf_err_set(err, KF_CONFIG, "Redis URL '%s': port must be 1..65535", shown);
        }
    }
    u->host = kf_strndup(p, (size_t)((colon ? colon : hend) - p));
    if (!*u->host || strspn(u->host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
                         strlen(u->host)) {
        kf_queue_url_release(u);
        return kf_err_set(err, KF_CONFIG, "Redis URL '%s': the host must be a name or an IPv4 address", shown);
    }
    if (slash && slash[1]) {
        errno = 0;
        db = strtol(slash + 1, &end, 10);
        if (errno || *end || slash[1] < '0' || slash[1] > '9' || db < 0 || db > 1000) {
            kf_queue_url_release(u);
            return kf_err_set(err, KF_CONFIG, "Redis URL '%s': the database must be a number 0..1000", shown);
        }
    }
    u->port = (int)port;
    u->db = (int)db;
    return KF_OK;
}

void kf_queue_url_release(kf_queue_url *u)
{
    free(u->host);
    if (u->password)
        explicit_bzero(u->password, strlen(u->password));
    free(u->user);
    free(u->password);
    u->host = u->user = u->password = NULL;
    u->port = u->db = u->tls = 0;
}

/* ---- connection ----------------------------------------------------- */

static void kq_drop(kf_queue *q)
{
    if (q->c) {
        redisFree(q->c);              /* closes the socket: a TLS relay then ends */
        q->c = NULL;
    }
    kf_tls_relay_free(q->tls);
    q->tls = NULL;
}

/* rediss://: a TLS session (kf_tls) whose relayed socket hiredis uses as
 * its connection. */
static redisContext *kq_connect_tls(kf_queue *q, kf_code *rc, kf_err *err)
{
    kf_tls_opts o = { .ca_file = kf_config_str(KF_CFG_REDIS_CA_FILE),
                      .cert_file = kf_config_str(KF_CFG_REDIS_CERT_FILE),
                      .key_file = kf_config_str(KF_CFG_REDIS_KEY_FILE),
                      .timeout_ms = KQ_CONNECT_MS };
    redisContext *c;
    int fd;

    if ((*rc = kf_tls_relay_open(q->u.host, q->u.port, &o, KF_REDIS, &fd, &q->tls, err)) != KF_OK)
        return NULL;
    c = redisConnectFd(fd);
    if (!c || c->err) {
        *rc = kf_err_set(err, KF_REDIS, "cannot use the TLS connection to Redis at %s:%d: %s", q->u.host, q->u.port,
                   c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        else
            close(fd);
        kf_tls_relay_free(q->tls);
        q->tls = NULL;
        return NULL;
    }
    return c;
}

/* A reply that is NULL (transport failure) drops the connection. */
static kf_code kq_transport_err(kf_queue *q, kf_err *err, const char *what)
{
    kf_err_set(err, KF_REDIS, "Redis %s:%d %s failed: %s; is Redis running? (the next call reconnects)",
               q->u.host, q->u.port, what, q->c && q->c->errstr[0] ? q->c->errstr : "no reply");
    kq_drop(q);
    return KF_REDIS;
}

static kf_code kq_simple(kf_queue *q, kf_err *err, const char *what, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(q->c, argc, argv, NULL);
    kf_code rc = KF_OK;

    if (!r)
        return kq_transport_err(q, err, what);
    if (r->type == REDIS_REPLY_ERROR) {
        rc = kf_err_set(err, KF_REDIS, "Redis %s refused: %s", what, r->str);
        kq_drop(q);
    }
    freeReplyObject(r);
    return rc;
}

static kf_code kq_load_script(kf_queue *q, kf_queue_script s, kf_err *err)
{
    const char *argv[3] = { "SCRIPT", "LOAD", kf_queue_lua_source(s) };
    redisReply *r = redisCommandArgv(q->c, 3, argv, NULL);
    kf_code rc = KF_OK;

    if (!r)
        return kq_transport_err(q, err, "SCRIPT LOAD");
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        rc = kf_err_set(err, KF_REDIS, "Redis refused queue script %s: %s", kf_queue_lua_name(s),
                        r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    } else {
        memcpy(q->sha[s], r->str, 40);
        q->sha[s][40] = '\0';
    }
    freeReplyObject(r);
    return rc;
}

static kf_code kq_ensure(kf_queue *q, kf_err *err)
{
    struct timeval ct = { KQ_CONNECT_MS / 1000, (KQ_CONNECT_MS % 1000) * 1000L };
    struct timeval tt = { KQ_COMMAND_MS / 1000, (KQ_COMMAND_MS % 1000) * 1000L };
    kf_code rc;

    if (q->c)
        return KF_OK;
    if (q->u.tls) {
        q->c = kq_connect_tls(q, &rc, err);
        if (!q->c)
            return rc;
    } else {
        q->c = redisConnectWithTimeout(q->u.host, q->u.port, ct);
    }
    if (!q->c)
        return kf_err_set(err, KF_REDIS, "cannot allocate a Redis connection");
    if (q->c->err) {
        kf_err_set(err, KF_REDIS, "cannot connect to Redis at %s:%d: %s; is Redis running?", q->u.host, q->u.port,
                   q->c->errstr);
        kq_drop(q);
        return KF_REDIS;
    }
    redisSetTimeout(q->c, tt);
    if (q->u.password) {
        const char *a[3] = { "AUTH", q->u.user ? q->u.user : q->u.password, q->u.password };
        if ((rc = kq_simple(q, err, "AUTH", q->u.user ? 3 : 2, a)) != KF_OK)
            return rc;
    }
    if (q->u.db != 0) {
        char db[16];
        const char *a[2] = { "SELECT", db };
        snprintf(db, sizeof(db), "%d", q->u.db);
        if ((rc = kq_simple(q, err, "SELECT", 2, a)) != KF_OK)
            return rc;
    }
    for (int s = 0; s < KF_QS__COUNT; s++) {
        if ((rc = kq_load_script(q, (kf_queue_script)s, err)) != KF_OK) {
            kq_drop(q);
            return rc;
        }
    }
    return KF_OK;
}

kf_queue *kf_queue_connect(const char *redis_url, kf_err *err)
{
    kf_queue *q = kf_calloc(1, sizeof(*q));
    kf_err ignored = KF_ERR_INIT;

    if (kf_queue_url_parse(redis_url, &q->u, err) != KF_OK) {
        kf_queue_free(q);
        return NULL;
    }
    /* Unreachable Redis is not an error here: every call reconnects. */
    if (kq_ensure(q, &ignored) != KF_OK)
        kf_log_warn("queue not connected yet err=\"%s\"", ignored.msg);
    return q;
}

void kf_queue_free(kf_queue *q)
{
    if (!q)
        return;
    kq_drop(q);
    kf_queue_url_release(&q->u);
    free(q);
}

/* ---- script calls --------------------------------------------------- */

/* Run script `s` with keys and args; returns the reply (caller frees) whose
 * type is an array starting with a status string, or NULL with err set. */
static redisReply *kq_eval(kf_queue *q, kf_queue_script s, int nkeys, const char *const *keys, int nargs,
                           const char *const *args, kf_err *err)
{
    const char **argv;
    size_t *lens;
    char nk[12];
    int argc = 0;
    redisReply *r = NULL;

    if (nkeys < 0 || nargs < 0 || nkeys + nargs > KQ_MAX_ARGS) {
        kf_err_set(err, KF_INTERNAL, "queue script %s: too many arguments", kf_queue_lua_name(s));
        return NULL;
    }
    argv = kf_calloc((size_t)3 + (size_t)nkeys + (size_t)nargs, sizeof(*argv));
    lens = kf_calloc((size_t)3 + (size_t)nkeys + (size_t)nargs, sizeof(*lens));
    for (int attempt = 0; attempt < 2; attempt++) {
        if (kq_ensure(q, err) != KF_OK)
            goto out;
        snprintf(nk, sizeof(nk), "%d", nkeys);
        argc = 0;
        argv[argc++] = "EVALSHA";
        argv[argc++] = q->sha[s];
        argv[argc++] = nk;
        for (int i = 0; i < nkeys; i++)
            argv[argc++] = keys[i];
        for (int i = 0; i < nargs; i++)
            argv[argc++] = args[i];
        for (int i = 0; i < argc; i++)
            lens[i] = strlen(argv[i]);
        r = redisCommandArgv(q->c, argc, argv, lens);
        if (!r) {
            kq_transport_err(q, err, kf_queue_lua_name(s));
            goto out;
        }
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && attempt == 0) {
            kf_log_info("queue scripts missing in Redis (restarted?); loading them again");
            freeReplyObject(r);
            r = NULL;
            if (kq_load_script(q, s, err) != KF_OK)
                goto out;
            continue;
        }
        break;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        kf_err_set(err, KF_REDIS, "queue script %s failed in Redis: %s", kf_queue_lua_name(s), r->str);
        freeReplyObject(r);
        r = NULL;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING) {
        kf_err_set(err, KF_REDIS, "queue script %s: unexpected reply shape", kf_queue_lua_name(s));
        freeReplyObject(r);
        r = NULL;
    }
out:
    free(argv);
    free(lens);
    return r;
}

static bool kq_status_is(const redisReply *r, const char *word)
{
    return strcmp(r->element[0]->str, word) == 0;
}

static long long kq_int(const redisReply *r, size_t i)
{
    if (i >= r->elements)
        return 0;
    if (r->element[i]->type == REDIS_REPLY_INTEGER)
        return r->element[i]->integer;
    if (r->element[i]->type == REDIS_REPLY_STRING)
        return strtoll(r->element[i]->str, NULL, 10);
    return 0;
}

static char *kq_str(const redisReply *r, size_t i)
{
    if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING)
        return kf_strdup("");
    return kf_strndup(r->element[i]->str, r->element[i]->len);
}

static void kq_job_key(char *out, size_t n, const char *id)
{
    snprintf(out, n, "kf:job:%s", id);
}

/* Ids, targets and tokens become parts of key names: keep them printable,
 * short and free of the characters Redis or our key layout care about. */
static kf_code kq_check_name(const char *what, const char *s, kf_err *err)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64)
        return kf_err_set(err, KF_INVALID, "queue: %s must be 1..64 characters", what);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= ' ' || ch >= 0x7f || ch == '{' || ch == '}' || ch == '*')
            return kf_err_set(err, KF_INVALID, "queue: %s '%s' has a character that is not allowed", what, s);
    }
    return KF_OK;
}

/* A target or backend: a name (kq_check_name) without ':', which
 * separates the two in a pair's key. */
static kf_code kq_check_part(const char *what, const char *s, kf_err *err)
{
    kf_code rc = kq_check_name(what, s, err);

    if (rc == KF_OK && strchr(s, ':'))
        return kf_err_set(err, KF_INVALID, "queue: %s '%s' must not contain ':'", what, s);
    return rc;
}

/* The pairs 'backend:target' of caps (every target with every backend),
 * into pairs[] (*n of them), checked. */
static kf_code kq_pairs(const kf_queue_caps *caps, char pairs[][KQ_PAIR_LEN], int *n, kf_err *err)
{
    kf_code rc;

    *n = 0;
    if (!caps || caps->n_targets < 1 || caps->n_backends < 1 ||
        caps->n_targets * caps->n_backends > KQ_MAX_PAIRS)
        return kf_err_set(err, KF_INVALID, "queue: a worker serves 1..%d (target, backend) pairs, not %d x %d",
                          KQ_MAX_PAIRS, caps ? caps->n_targets : 0, caps ? caps->n_backends : 0);
    for (int b = 0; b < caps->n_backends; b++) {
        if ((rc = kq_check_part("backend", caps->backends[b], err)) != KF_OK)
            return rc;
        for (int t = 0; t < caps->n_targets; t++) {
            if ((rc = kq_check_part("target", caps->targets[t], err)) != KF_OK)
                return rc;
            snprintf(pairs[*n], KQ_PAIR_LEN, "%s:%s", caps->backends[b], caps->targets[t]);
            (*n)++;
        }
    }
    return KF_OK;
}

static double kq_random_unit(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = (uint64_t)rand();
    return (double)(v >> 11) / (double)(1ULL << 53);
}

void kf_queue_new_token(char out[33])
{
    unsigned char b[16];
    static const char hex[] = "0123456789abcdef";

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (unsigned char)rand();
    }
    for (size_t i = 0; i < sizeof(b); i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

/* ---- transitions ---------------------------------------------------- */

kf_code kf_queue_enqueue(kf_queue *q, const kf_queue_job *job, bool *created, kf_err *err)
{
    return kf_queue_enqueue_many(q, job, 1, created, err);
}

/* The per-job strings a script call needs: keys and formatted numbers. */
typedef struct kq_enq_strs {
    char jk[96], wk[160], prio[12], att[12], maxa[12];
} kq_enq_strs;

kf_code kf_queue_enqueue_many(kf_queue *q, const kf_queue_job *jobs, int n, bool *created, kf_err *err)
{
    kq_enq_strs *st = NULL;
    const char **keys = NULL, **args = NULL;
    redisReply *r = NULL;
    kf_code rc = KF_OK;

    if (n < 1 || n > KF_QUEUE_ENQUEUE_MAX)
        return kf_err_set(err, KF_INVALID, "queue: enqueue takes 1..%d jobs at once, not %d", KF_QUEUE_ENQUEUE_MAX,
                          n);
    if (created)
        memset(created, 0, (size_t)n * sizeof(*created));
    for (int i = 0; i < n; i++) {
        const kf_queue_job *job = &jobs[i];
        if ((rc = kq_check_name("job id", job->id, err)) != KF_OK ||
            (rc = kq_check_part("target", job->target, err)) != KF_OK ||
            (rc = kq_check_part("backend", job->backend, err)) != KF_OK)
            return rc;
        if (job->priority < 0 || job->priority > 9 || job->max_attempts < 1 || job->attempt < 0)
            return kf_err_set(err, KF_INVALID, "queue: job %s has priority %d, attempt %d, max_attempts %d "
                              "(need 0..9, >= 0, >= 1)", job->id, job->priority, job->attempt, job->max_attempts);
    }
    st = kf_calloc((size_t)n, sizeof(*st));
    keys = kf_calloc((size_t)n * 2, sizeof(*keys));
    args = kf_calloc((size_t)n * 8, sizeof(*args));
    for (size_t i = 0; i < (size_t)n; i++) {
        const kf_queue_job *job = &jobs[i];
        kq_job_key(st[i].jk, sizeof(st[i].jk), job->id);
        snprintf(st[i].wk, sizeof(st[i].wk), "kf:wait:%s:%s", job->backend, job->target);
        snprintf(st[i].prio, sizeof(st[i].prio), "%d", job->priority);
        snprintf(st[i].att, sizeof(st[i].att), "%d", job->attempt);
        snprintf(st[i].maxa, sizeof(st[i].maxa), "%d", job->max_attempts);
        keys[2 * i] = st[i].jk;
        keys[2 * i + 1] = st[i].wk;
        args[8 * i] = job->id;
        args[8 * i + 1] = job->kind ? job->kind : "";
        args[8 * i + 2] = job->target;
        args[8 * i + 3] = job->backend;
        args[8 * i + 4] = st[i].prio;
        args[8 * i + 5] = st[i].att;
        args[8 * i + 6] = st[i].maxa;
        args[8 * i + 7] = job->payload ? job->payload : "{}";
    }
    r = kq_eval(q, KF_QS_ENQUEUE, 2 * n, keys, 8 * n, args, err);
    if (!r) {
        rc = err ? err->code : KF_REDIS;
        goto out;
    }
    if (r->elements != (size_t)n + 1) {
        rc = kf_err_set(err, KF_REDIS, "queue script ENQUEUE: %zu replies for %d jobs", r->elements - 1, n);
        goto out;
    }
    for (int i = 0; created && i < n; i++)
        created[i] = r->element[i + 1]->type == REDIS_REPLY_INTEGER && r->element[i + 1]->integer == 1;
out:
    freeReplyObject(r);
    free(st);
    free(keys);
    free(args);
    return rc;
}

kf_code kf_queue_lease_job(kf_queue *q, const kf_queue_caps *caps, const char *worker_id, int64_t lease_ms,
                           kf_queue_lease *out, bool *got, kf_err *err)
{
    char pairs[KQ_MAX_PAIRS][KQ_PAIR_LEN], wkeys[KQ_MAX_PAIRS][KQ_PAIR_LEN + 8];
    const char *keys[KQ_MAX_PAIRS + 1];
    char lms[24], token[33];
    const char *args[3] = { worker_id, lms, token };
    redisReply *r;
    kf_code rc;
    int np = 0;

    *got = false;
    memset(out, 0, sizeof(*out));
    if ((rc = kq_pairs(caps, pairs, &np, err)) != KF_OK)
        return rc;
    if ((rc = kq_check_name("worker id", worker_id, err)) != KF_OK)
        return rc;
    if (lease_ms < 1)
        return kf_err_set(err, KF_INVALID, "queue: lease must be at least 1 ms");
    keys[0] = "kf:active";
    for (int i = 0; i < np; i++) {
        snprintf(wkeys[i], sizeof(wkeys[i]), "kf:wait:%.129s", pairs[i]);
        keys[i + 1] = wkeys[i];
    }
    snprintf(lms, sizeof(lms), "%lld", (long long)lease_ms);
    kf_queue_new_token(token);
    r = kq_eval(q, KF_QS_LEASE, np + 1, keys, 3, args, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    if (kq_status_is(r, "OK") && r->elements >= 10) {
        out->id = kq_str(r, 1);
        out->target = kq_str(r, 2);
        out->kind = kq_str(r, 3);
        out->backend = kq_str(r, 4);
        out->payload = kq_str(r, 5);
        out->token = kq_str(r, 6);
        out->attempt = (int)kq_int(r, 7);
        out->max_attempts = (int)kq_int(r, 8);
        out->expires_ms = kq_int(r, 9);
        *got = true;
    }
    freeReplyObject(r);
    return KF_OK;
}

void kf_queue_lease_free(kf_queue_lease *l)
{
    if (!l)
        return;
    free(l->id);
    free(l->target);
    free(l->kind);
    free(l->backend);
    free(l->payload);
    free(l->token);
    memset(l, 0, sizeof(*l));
}

/* Common shape of renew/ack/release/fail: job key + id + token. */
static redisReply *kq_fenced(kf_queue *q, kf_queue_script s, const char *id, const char *token, int nextra,
                             const char *const *extra, kf_err *err)
{
    char jk[96];
    const char *keys[2] = { jk, "kf:active" };
    const char *args[8];

    if (kq_check_name("job id", id, err) != KF_OK || !token) {
        if (!token)
            kf_err_set(err, KF_INVALID, "queue: a lease token is required");
        return NULL;
    }
    kq_job_key(jk, sizeof(jk), id);
    args[0] = id;
    args[1] = token;
    for (int i = 0; i < nextra && i < 6; i++)
        args[2 + i] = extra[i];
    return kq_eval(q, s, s == KF_QS_RENEW || s == KF_QS_ACK ? 2 : 1, keys, 2 + nextra, args, err);
}

static kf_code kq_stale(kf_err *err, const char *what, const char *id)
{
    return kf_err_set(err, KF_STALE, "%s of job %s refused: the lease is no longer ours (expired, reaped, "
                      "cancelled or taken by another worker)", what, id);
}

kf_code kf_queue_renew(kf_queue *q, const char *id, const char *token, int64_t lease_ms, bool *cancel,
                       kf_err *err)
{
    char lms[24];
    const char *extra[1] = { lms };
    redisReply *r;
    kf_code rc = KF_OK;

    if (cancel)
        *cancel = false;
    snprintf(lms, sizeof(lms), "%lld", (long long)lease_ms);
    r = kq_fenced(q, KF_QS_RENEW, id, token, 1, extra, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    if (kq_status_is(r, "STALE"))
        rc = kq_stale(err, "renew", id);
    else if (cancel)
        *cancel = kq_int(r, 2) == 1;
    freeReplyObject(r);
    return rc;
}

/* A fenced script with no arguments beyond the token and no result beyond
 * OK/STALE (ack, release): KF_STALE when the lease is no longer ours. */
static kf_code kq_fenced_plain(kf_queue *q, kf_queue_script s, const char *verb, const char *id,
                               const char *token, kf_err *err)
{
    redisReply *r = kq_fenced(q, s, id, token, 0, NULL, err);
    kf_code rc = KF_OK;

    if (!r)
        return err ? err->code : KF_REDIS;
    if (kq_status_is(r, "STALE"))
        rc = kq_stale(err, verb, id);
    freeReplyObject(r);
    return rc;
}

kf_code kf_queue_ack(kf_queue *q, const char *id, const char *token, kf_err *err)
{
    return kq_fenced_plain(q, KF_QS_ACK, "ack", id, token, err);
}

static kf_queue_fate kq_fate(const char *word)
{
    if (strcmp(word, "RETRYING") == 0)
        return KF_FATE_RETRYING;
    if (strcmp(word, "DEAD") == 0)
        return KF_FATE_DEAD;
    return KF_FATE_CANCELLED;
}

kf_code kf_queue_fail(kf_queue *q, const char *id, const char *token, const char *error, bool retryable,
                      int64_t base_ms, int64_t cap_ms, kf_queue_fate *fate, int64_t *due_ms, kf_err *err)
{
    char base[24], cap[24], rnd[32];
    const char *extra[5] = { error ? error : "", retryable ? "1" : "0", base, cap, rnd };
    redisReply *r;
    kf_code rc = KF_OK;

    snprintf(base, sizeof(base), "%lld", (long long)(base_ms < 1 ? 1 : base_ms));
    snprintf(cap, sizeof(cap), "%lld", (long long)(cap_ms < 1 ? 1 : cap_ms));
    snprintf(rnd, sizeof(rnd), "%.6f", kq_random_unit());
    r = kq_fenced(q, KF_QS_FAIL, id, token, 5, extra, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    if (kq_status_is(r, "STALE")) {
        rc = kq_stale(err, "fail", id);
    } else {
        if (fate)
            *fate = kq_fate(r->element[0]->str);
        if (due_ms)
            *due_ms = kq_int(r, 1);
    }
    freeReplyObject(r);
    return rc;
}

kf_code kf_queue_release(kf_queue *q, const char *id, const char *token, kf_err *err)
{
    return kq_fenced_plain(q, KF_QS_RELEASE, "release", id, token, err);
}

/* Run script s with the job's key and its id as the only argument (cancel,
 * forget); *out is the reply to free when KF_OK. */
static kf_code kq_job_eval(kf_queue *q, kf_queue_script s, const char *id, redisReply **out,
                           kf_err *err)
{
    char jk[96];
    const char *keys[1] = { jk };
    const char *args[1] = { id };
    kf_code rc;

    if ((rc = kq_check_name("job id", id, err)) != KF_OK)
        return rc;
    kq_job_key(jk, sizeof(jk), id);
    *out = kq_eval(q, s, 1, keys, 1, args, err);
    if (!*out)
        return err ? err->code : KF_REDIS;
    return KF_OK;
}

kf_code kf_queue_cancel(kf_queue *q, const char *id, kf_queue_cancel_result *res, kf_err *err)
{
    redisReply *r;
    kf_code rc = kq_job_eval(q, KF_QS_CANCEL, id, &r, err);

    if (rc != KF_OK)
        return rc;
    if (res) {
        if (kq_status_is(r, "REMOVED"))
            *res = KF_CANCEL_REMOVED;
        else if (kq_status_is(r, "SIGNALLED"))
            *res = KF_CANCEL_SIGNALLED;
        else
            *res = KF_CANCEL_ABSENT;
    }
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_forget(kf_queue *q, const char *id, kf_err *err)
{
    redisReply *r;
    kf_code rc = kq_job_eval(q, KF_QS_FORGET, id, &r, err);

    if (rc == KF_OK)
        freeReplyObject(r);
    return rc;
}

const char *kf_queue_fate_name(kf_queue_fate f)
{
    switch (f) {
    case KF_FATE_RETRYING:
        return "retrying";
    case KF_FATE_DEAD:
        return "dead";
    case KF_FATE_CANCELLED:
        return "cancelled";
    }
    return "";
}

void kf_queue_moved_free(kf_queue_moved *m, int n)
{
    if (!m)
        return;
    for (int i = 0; i < n; i++)
        free(m[i].id);
    free(m);
}

kf_code kf_queue_reap(kf_queue *q, int limit, int64_t base_ms, int64_t cap_ms, kf_queue_moved **out, int *n,
                      kf_err *err)
{
    char lim[12], base[24], cap[24], seed[24];
    const char *args[4] = { lim, base, cap, seed };
    redisReply *r;
    int count;

    *out = NULL;
    *n = 0;
    snprintf(lim, sizeof(lim), "%d", limit < 1 ? 1 : limit);
    snprintf(base, sizeof(base), "%lld", (long long)(base_ms < 1 ? 1 : base_ms));
    snprintf(cap, sizeof(cap), "%lld", (long long)(cap_ms < 1 ? 1 : cap_ms));
    snprintf(seed, sizeof(seed), "%u", (unsigned)(kq_random_unit() * 2147483646.0) + 1u);
    r = kq_eval(q, KF_QS_REAP, 0, NULL, 4, args, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    count = (int)((r->elements - 1) / 4);
    if (count > 0) {
        *out = kf_calloc((size_t)count, sizeof(**out));
        for (int i = 0; i < count; i++) {
            size_t b = 1 + (size_t)i * 4;
            (*out)[i].id = kq_str(r, b);
            (*out)[i].fate = kq_fate(r->element[b + 1]->type == REDIS_REPLY_STRING ? r->element[b + 1]->str : "");
            (*out)[i].at_ms = kq_int(r, b + 2);
            (*out)[i].attempt = (int)kq_int(r, b + 3);
        }
    }
    *n = count;
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_promote(kf_queue *q, int limit, kf_queue_moved **out, int *n, kf_err *err)
{
    char lim[12];
    const char *args[1] = { lim };
    redisReply *r;
    int count;

    *out = NULL;
    *n = 0;
    snprintf(lim, sizeof(lim), "%d", limit < 1 ? 1 : limit);
    r = kq_eval(q, KF_QS_PROMOTE, 0, NULL, 1, args, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    count = (int)((r->elements - 1) / 2);
    if (count > 0) {
        *out = kf_calloc((size_t)count, sizeof(**out));
        for (int i = 0; i < count; i++) {
            (*out)[i].id = kq_str(r, 1 + (size_t)i * 2);
            (*out)[i].attempt = (int)kq_int(r, 2 + (size_t)i * 2);
        }
    }
    *n = count;
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_trim_dead(kf_queue *q, int64_t older_than_ms, int limit, int *n, kf_err *err)
{
    char age[24], lim[12];
    const char *args[2] = { age, lim };
    redisReply *r;

    if (n)
        *n = 0;
    snprintf(age, sizeof(age), "%lld", (long long)(older_than_ms < 0 ? 0 : older_than_ms));
    snprintf(lim, sizeof(lim), "%d", limit < 1 ? 1 : limit);
    r = kq_eval(q, KF_QS_TRIM_DEAD, 0, NULL, 2, args, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    if (n)
        *n = (int)kq_int(r, 1);
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_heartbeat(kf_queue *q, const char *worker_id, const char *json, int64_t ttl_ms,
                           const kf_queue_caps *caps, kf_err *err)
{
    char wk[96], ttl[24], pairs[KQ_MAX_PAIRS][KQ_PAIR_LEN];
    const char *keys[1] = { wk };
    const char *args[3 + KQ_MAX_PAIRS] = { worker_id, json ? json : "{}", ttl };
    redisReply *r;
    kf_code rc;
    int np = 0;

    if ((rc = kq_check_name("worker id", worker_id, err)) != KF_OK)
        return rc;
    if (caps && (rc = kq_pairs(caps, pairs, &np, err)) != KF_OK)
        return rc;
    for (int i = 0; i < np; i++)
        args[3 + i] = pairs[i];
    snprintf(wk, sizeof(wk), "kf:worker:%s", worker_id);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(ttl_ms < 1 ? 1 : ttl_ms));
    r = kq_eval(q, KF_QS_HEARTBEAT, 1, keys, 3 + np, args, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_worker_gone(kf_queue *q, const char *worker_id, kf_err *err)
{
    char wk[96];
    const char *keys[1] = { wk };
    const char *args[1] = { worker_id };
    redisReply *r;
    kf_code rc;

    if ((rc = kq_check_name("worker id", worker_id, err)) != KF_OK)
        return rc;
    snprintf(wk, sizeof(wk), "kf:worker:%s", worker_id);
    if (!(r = kq_eval(q, KF_QS_WORKER_GONE, 1, keys, 1, args, err)))
        return err ? err->code : KF_REDIS;
    freeReplyObject(r);
    return KF_OK;
}

/* "backend:target" into a cap state's names ("" when it is not a pair). */
static void kq_cap_names(kf_queue_cap_state *c, const char *pair)
{
    const char *colon = strchr(pair, ':');
    size_t nb = colon ? (size_t)(colon - pair) : 0;

    snprintf(c->backend, sizeof(c->backend), "%.*s", (int)(nb < sizeof(c->backend) ? nb : 0), pair);
    snprintf(c->target, sizeof(c->target), "%s", colon ? colon + 1 : "");
}

kf_code kf_queue_caps_get(kf_queue *q, const char *const *targets, const char *const *backends, int n,
                          kf_queue_cap_state *out, kf_err *err)
{
    char pairs[KQ_MAX_PAIRS][KQ_PAIR_LEN];
    const char *args[KQ_MAX_PAIRS];
    redisReply *r;
    kf_code rc;

    if (n < 1 || n > KQ_MAX_PAIRS)
        return kf_err_set(err, KF_INVALID, "queue: ask about 1..%d capabilities at once, not %d", KQ_MAX_PAIRS, n);
    memset(out, 0, (size_t)n * sizeof(*out));
    for (int i = 0; i < n; i++) {
        if ((rc = kq_check_part("target", targets[i], err)) != KF_OK ||
            (rc = kq_check_part("backend", backends[i], err)) != KF_OK)
            return rc;
        snprintf(pairs[i], sizeof(pairs[i]), "%s:%s", backends[i], targets[i]);
        args[i] = pairs[i];
    }
    if (!(r = kq_eval(q, KF_QS_CAPS, 0, NULL, n, args, err)))
        return err ? err->code : KF_REDIS;
    if (r->elements != 1 + 3 * (size_t)n) {
        freeReplyObject(r);
        return kf_err_set(err, KF_REDIS, "queue script CAPS: %zu replies for %d capabilities", r->elements, n);
    }
    for (int i = 0; i < n; i++) {
        size_t b = 1 + 3 * (size_t)i;
        kq_cap_names(&out[i], pairs[i]);
        out[i].live_workers = kq_int(r, b);
        out[i].offered = kq_int(r, b + 1) == 1;
        out[i].waiting = kq_int(r, b + 2);
    }
    freeReplyObject(r);
    return KF_OK;
}

/* The rows of a pairs script: after the status, per pair its name, the
 * live workers offering it (when with_live), offered (0/1) and waiting. */
static kf_code kq_pair_rows(kf_queue *q, kf_queue_script script, bool with_live, int limit, kf_queue_cap_state *out,
                            int *n, kf_err *err)
{
    size_t stride = with_live ? 4 : 3;
    char lim[12];
    const char *args[1] = { lim };
    redisReply *r;

    *n = 0;
    if (limit < 1)
        return KF_OK;
    snprintf(lim, sizeof(lim), "%d", limit);
    if (!(r = kq_eval(q, script, 0, NULL, 1, args, err)))
        return err ? err->code : KF_REDIS;
    for (size_t b = 1; b + stride - 1 < r->elements; b += stride) {
        kf_queue_cap_state *c;
        size_t f = b + 1;
        if (*n >= limit || r->element[b]->type != REDIS_REPLY_STRING || r->element[b]->len >= KQ_PAIR_LEN)
            break;
        c = &out[(*n)++];
        memset(c, 0, sizeof(*c));
        kq_cap_names(c, r->element[b]->str);
        if (with_live)
            c->live_workers = kq_int(r, f++);
        c->offered = kq_int(r, f) == 1;
        c->waiting = kq_int(r, f + 1);
    }
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_caps_missing(kf_queue *q, int limit, kf_queue_cap_state *out, int *n, kf_err *err)
{
    return kq_pair_rows(q, KF_QS_CAPS_MISSING, false, limit, out, n, err);
}

kf_code kf_queue_pairs_list(kf_queue *q, int limit, kf_queue_cap_state *out, int *n, kf_err *err)
{
    return kq_pair_rows(q, KF_QS_PAIRS, true, limit, out, n, err);
}

kf_code kf_queue_migrate_wait(kf_queue *q, int limit, int *moved, kf_err *err)
{
    char lim[12];
    const char *args[1] = { lim };
    redisReply *r;

    *moved = 0;
    snprintf(lim, sizeof(lim), "%d", limit < 1 ? 1 : limit);
    if (!(r = kq_eval(q, KF_QS_MIGRATE_WAIT, 0, NULL, 1, args, err)))
        return err ? err->code : KF_REDIS;
    *moved = (int)kq_int(r, 1);
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_workers_list(kf_queue *q, int limit, kf_queue_worker **out, int *n, kf_err *err)
{
    char stop[16];
    const char *argv[5] = { "ZREVRANGE", "kf:workers", "0", stop, "WITHSCORES" };
    redisReply *r;
    kf_code rc;
    size_t pairs;

    *out = NULL;
    *n = 0;
    if ((rc = kq_ensure(q, err)) != KF_OK)
        return rc;
    snprintf(stop, sizeof(stop), "%d", (limit < 1 ? 1 : limit) - 1);
    r = redisCommandArgv(q->c, 5, argv, NULL);
    if (!r)
        return kq_transport_err(q, err, "ZREVRANGE");
    if (r->type != REDIS_REPLY_ARRAY) {
        rc = kf_err_set(err, KF_REDIS, "Redis ZREVRANGE kf:workers: unexpected reply");
        freeReplyObject(r);
        return rc;
    }
    pairs = r->elements / 2;
    *out = kf_calloc(pairs ? pairs : 1, sizeof(**out));
    /* One GET per member, pipelined: a round trip for all of them. */
    for (size_t i = 0; i < pairs; i++) {
        char key[160];
        snprintf(key, sizeof(key), "kf:worker:%.128s", r->element[2 * i]->str ? r->element[2 * i]->str : "");
        redisAppendCommand(q->c, "GET %s", key);
    }
    for (size_t i = 0; i < pairs; i++) {
        redisReply *d = NULL;
        const redisReply *id = r->element[2 * i], *score = r->element[2 * i + 1];
        if (redisGetReply(q->c, (void **)&d) != REDIS_OK || !d) {
            freeReplyObject(r);
            kf_queue_workers_free(*out, *n);
            *out = NULL;
            *n = 0;
            return kq_transport_err(q, err, "GET kf:worker");
        }
        if (d->type == REDIS_REPLY_STRING && id->type == REDIS_REPLY_STRING && id->str) {
            kf_queue_worker *w = &(*out)[(*n)++];
            w->id = kf_strdup(id->str);
            w->doc = kf_strndup(d->str, d->len);
            w->seen_ms = score->str ? strtoll(score->str, NULL, 10) : 0;
        }
        freeReplyObject(d);
    }
    freeReplyObject(r);
    return KF_OK;
}

void kf_queue_workers_free(kf_queue_worker *w, int n)
{
    if (!w)
        return;
    for (int i = 0; i < n; i++) {
        free(w[i].id);
        free(w[i].doc);
    }
    free(w);
}

kf_code kf_queue_dead_list(kf_queue *q, int limit, kf_queue_moved **out, int *n, kf_err *err)
{
    char stop[16];
    const char *argv[5] = { "ZREVRANGE", "kf:dead", "0", stop, "WITHSCORES" };
    redisReply *r;
    kf_code rc;

    *out = NULL;
    *n = 0;
    if ((rc = kq_ensure(q, err)) != KF_OK)
        return rc;
    snprintf(stop, sizeof(stop), "%d", (limit < 1 ? 1 : limit) - 1);
    r = redisCommandArgv(q->c, 5, argv, NULL);
    if (!r)
        return kq_transport_err(q, err, "ZREVRANGE");
    *out = kf_calloc(r->type == REDIS_REPLY_ARRAY && r->elements ? r->elements / 2 + 1 : 1, sizeof(**out));
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        if (r->element[i]->type != REDIS_REPLY_STRING || !r->element[i + 1]->str)
            continue;
        (*out)[*n].id = kf_strndup(r->element[i]->str, r->element[i]->len);
        (*out)[*n].fate = KF_FATE_DEAD;
        (*out)[*n].at_ms = strtoll(r->element[i + 1]->str, NULL, 10);
        (*n)++;
    }
    freeReplyObject(r);
    return KF_OK;
}

static int kq_strcmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

kf_code kf_queue_targets_list(kf_queue *q, int limit, char ***names, int *n, kf_err *err)
{
    const char *argv[2] = { "SMEMBERS", "kf:targets" };
    redisReply *r;
    kf_code rc;

    *names = NULL;
    *n = 0;
    if ((rc = kq_ensure(q, err)) != KF_OK)
        return rc;
    r = redisCommandArgv(q->c, 2, argv, NULL);
    if (!r)
        return kq_transport_err(q, err, "SMEMBERS");
    *names = kf_calloc(r->type == REDIS_REPLY_ARRAY && r->elements ? r->elements : 1, sizeof(char *));
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && *n < limit; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING && r->element[i]->len <= 64)
            (*names)[(*n)++] = kf_strndup(r->element[i]->str, r->element[i]->len);
    freeReplyObject(r);
    qsort(*names, (size_t)*n, sizeof(char *), kq_strcmp);
    return KF_OK;
}

void kf_queue_targets_free(char **names, int n)
{
    if (!names)
        return;
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

kf_code kf_queue_workers_cleanup(kf_queue *q, int *removed, kf_err *err)
{
    redisReply *r = kq_eval(q, KF_QS_WORKERS_CLEAN, 0, NULL, 0, NULL, err);

    if (removed)
        *removed = 0;
    if (!r)
        return err ? err->code : KF_REDIS;
    if (removed)
        *removed = (int)kq_int(r, 1);
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_leader(kf_queue *q, const char *token, int64_t ttl_ms, bool *leader, kf_err *err)
{
    char ttl[24];
    const char *keys[1] = { "kf:leader" };
    const char *args[2] = { token, ttl };
    redisReply *r;

    *leader = false;
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(ttl_ms < 1 ? 1 : ttl_ms));
    r = kq_eval(q, KF_QS_LEADER, 1, keys, 2, args, err);
    if (!r)
        return err ? err->code : KF_REDIS;
    *leader = kq_int(r, 1) == 1;
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_leader_resign(kf_queue *q, const char *token, kf_err *err)
{
    const char *keys[1] = { "kf:leader" };
    const char *args[1] = { token };
    redisReply *r = kq_eval(q, KF_QS_RESIGN, 1, keys, 1, args, err);

    if (!r)
        return err ? err->code : KF_REDIS;
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_epoch(kf_queue *q, bool *present, kf_err *err)
{
    const char *keys[1] = { "kf:epoch" };
    redisReply *r = kq_eval(q, KF_QS_EPOCH, 1, keys, 0, NULL, err);

    *present = false;
    if (!r)
        return err ? err->code : KF_REDIS;
    *present = kq_int(r, 1) == 1;
    freeReplyObject(r);
    return KF_OK;
}

/* ---- plain reads ---------------------------------------------------- */

/* HMGET of six fields of job `id`'s hash: an array of six replies (the
 * caller frees it), or NULL with *rc and err saying why. */
static redisReply *kq_job_hmget6(kf_queue *q, const char *id, const char *const fields[6], kf_code *rc,
                                 kf_err *err)
{
    char jk[96];
    const char *argv[8] = { "HMGET", jk, fields[0], fields[1], fields[2], fields[3], fields[4], fields[5] };
    redisReply *r;

    if ((*rc = kq_check_name("job id", id, err)) != KF_OK || (*rc = kq_ensure(q, err)) != KF_OK)
        return NULL;
    kq_job_key(jk, sizeof(jk), id);
    r = redisCommandArgv(q->c, 8, argv, NULL);
    if (!r) {
        *rc = kq_transport_err(q, err, "HMGET");
        return NULL;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
        freeReplyObject(r);
        *rc = kf_err_set(err, KF_REDIS, "Redis HMGET of job %s: unexpected reply", id);
        return NULL;
    }
    return r;
}

kf_code kf_queue_inspect(kf_queue *q, const char *id, kf_queue_info *info, bool *exists, kf_err *err)
{
    static const char *const fields[6] = { "state", "attempt", "max_attempts", "cancel", "last_error", "worker" };
    redisReply *r;
    kf_code rc;

    memset(info, 0, sizeof(*info));
    *exists = false;
    if (!(r = kq_job_hmget6(q, id, fields, &rc, err)))
        return rc;
    if (r->element[0]->type == REDIS_REPLY_STRING) {
        *exists = true;
        snprintf(info->state, sizeof(info->state), "%s", r->element[0]->str);
        info->attempt = (int)kq_int(r, 1);
        info->max_attempts = (int)kq_int(r, 2);
        info->cancel = kq_int(r, 3) == 1;
        if (r->element[4]->type == REDIS_REPLY_STRING && r->element[4]->len > 0)
            info->last_error = kq_str(r, 4);
        if (r->element[5]->type == REDIS_REPLY_STRING && r->element[5]->len > 0)
            info->worker = kq_str(r, 5);
    }
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_grant_get(kf_queue *q, const char *id, kf_queue_grant *g, bool *exists, kf_err *err)
{
    static const char *const fields[6] = { "state", "attempt", "granted_token", "granted_worker", "lease_token",
                                           "worker" };
    redisReply *r;
    kf_code rc;

    memset(g, 0, sizeof(*g));
    *exists = false;
    if (!(r = kq_job_hmget6(q, id, fields, &rc, err)))
        return rc;
    if (r->element[0]->type == REDIS_REPLY_STRING) {
        /* A lease granted before granted_* existed still has its live
         * lease_token and worker while it runs. */
        size_t tk = r->element[2]->type == REDIS_REPLY_STRING ? 2 : 4;
        size_t wk = r->element[3]->type == REDIS_REPLY_STRING ? 3 : 5;

        *exists = true;
        snprintf(g->state, sizeof(g->state), "%s", r->element[0]->str);
        g->attempt = (int)kq_int(r, 1);
        g->live = strcmp(g->state, "running") == 0;
        if (r->element[tk]->type == REDIS_REPLY_STRING && (tk == 2 || g->live))
            snprintf(g->token, sizeof(g->token), "%s", r->element[tk]->str);
        if (r->element[wk]->type == REDIS_REPLY_STRING && (wk == 3 || g->live))
            snprintf(g->worker, sizeof(g->worker), "%s", r->element[wk]->str);
    }
    freeReplyObject(r);
    return KF_OK;
}

void kf_queue_info_release(kf_queue_info *info)
{
    if (!info)
        return;
    free(info->last_error);
    free(info->worker);
    info->last_error = NULL;
    info->worker = NULL;
}

static kf_code kq_zcard(kf_queue *q, const char *key, int64_t *n, kf_err *err)
{
    const char *argv[2] = { "ZCARD", key };
    redisReply *r = redisCommandArgv(q->c, 2, argv, NULL);

    if (!r)
        return kq_transport_err(q, err, "ZCARD");
    *n = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    return KF_OK;
}

kf_code kf_queue_stats_get(kf_queue *q, const char *target, kf_queue_stats *st, kf_err *err)
{
    char wk[KQ_PAIR_LEN + 8];
    const char *argv[2] = { "SMEMBERS", "kf:queues" };
    redisReply *r;
    kf_code rc;
    int64_t n = 0;

    memset(st, 0, sizeof(*st));
    if (target && (rc = kq_check_part("target", target, err)) != KF_OK)
        return rc;
    if ((rc = kq_ensure(q, err)) != KF_OK)
        return rc;
    /* Every waiting set is a pair 'backend:target' in kf:queues: sum the
     * pairs of `target` (all of them without one). */
    if (!(r = redisCommandArgv(q->c, 2, argv, NULL)))
        return kq_transport_err(q, err, "SMEMBERS");
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const char *p = r->element[i]->str, *colon;
        if (r->element[i]->type != REDIS_REPLY_STRING || r->element[i]->len >= KQ_PAIR_LEN ||
            !(colon = strchr(p, ':')) || (target && strcmp(colon + 1, target) != 0))
            continue;
        snprintf(wk, sizeof(wk), "kf:wait:%s", p);
        if ((rc = kq_zcard(q, wk, &n, err)) != KF_OK) {
            freeReplyObject(r);
            return rc;
        }
        st->waiting += n;
    }
    freeReplyObject(r);
    if ((rc = kq_zcard(q, "kf:active", &st->active, err)) != KF_OK ||
        (rc = kq_zcard(q, "kf:delayed", &st->delayed, err)) != KF_OK ||
        (rc = kq_zcard(q, "kf:dead", &st->dead, err)) != KF_OK)
        return rc;
    return KF_OK;
}

kf_code kf_queue_ping(kf_queue *q, kf_err *err)
{
    const char *argv[1] = { "PING" };
    kf_code rc = kq_ensure(q, err);

    if (rc != KF_OK)
        return rc;
    return kq_simple(q, err, "PING", 1, argv);
}

kf_code kf_queue_wait(kf_queue *q, const kf_queue_caps *caps, int timeout_ms, bool *woken, kf_err *err)
{
    char pairs[KQ_MAX_PAIRS][KQ_PAIR_LEN], keys[KQ_MAX_PAIRS][KQ_PAIR_LEN + 10];
    const char *argv[KQ_MAX_PAIRS + 2];
    char tmo[24];
    redisReply *r;
    kf_code rc;
    int argc = 0, np = 0;

    *woken = false;
    if ((rc = kq_pairs(caps, pairs, &np, err)) != KF_OK)
        return rc;
    if ((rc = kq_ensure(q, err)) != KF_OK)
        return rc;
    argv[argc++] = "BLPOP";
    for (int i = 0; i < np; i++) {
        snprintf(keys[i], sizeof(keys[i]), "kf:signal:%.129s", pairs[i]);
        argv[argc++] = keys[i];
    }
    if (timeout_ms < 1)
        timeout_ms = 1;
    if (timeout_ms > KQ_COMMAND_MS - 1000)
        timeout_ms = KQ_COMMAND_MS - 1000;
    snprintf(tmo, sizeof(tmo), "%.3f", timeout_ms / 1000.0);
    argv[argc++] = tmo;
    r = redisCommandArgv(q->c, argc, argv, NULL);
    if (!r)
        return kq_transport_err(q, err, "BLPOP");
    if (r->type == REDIS_REPLY_ERROR)
        rc = kf_err_set(err, KF_REDIS, "Redis BLPOP refused: %s", r->str);
    *woken = r->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    return rc;
}

kf_code kf_queue_deaths(kf_queue *q, int limit, kf_queue_moved **out, int *n, kf_err *err)
{
    char lim[12];
    const char *argv[3] = { "LPOP", "kf:deaths", lim };
    redisReply *r;
    kf_code rc;

    *out = NULL;
    *n = 0;
    if ((rc = kq_ensure(q, err)) != KF_OK)
        return rc;
    snprintf(lim, sizeof(lim), "%d", limit < 1 ? 1 : limit);
    r = redisCommandArgv(q->c, 3, argv, NULL);
    if (!r)
        return kq_transport_err(q, err, "LPOP");
    if (r->type == REDIS_REPLY_ERROR) {
        rc = kf_err_set(err, KF_REDIS, "Redis LPOP kf:deaths refused: %s", r->str);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
        *out = kf_calloc(r->elements, sizeof(**out));
        for (size_t i = 0; i < r->elements; i++) {
            (*out)[i].id = kq_str(r, i);
            (*out)[i].fate = KF_FATE_DEAD;
        }
        *n = (int)r->elements;
    }
    freeReplyObject(r);
    return rc;
}

kf_code kf_queue_server_id(kf_queue *q, char out[41], kf_err *err)
{
    const char *argv[2] = { "INFO", "server" };
    redisReply *r;
    const char *p;
    kf_code rc = kq_ensure(q, err);

    out[0] = '\0';
    if (rc != KF_OK)
        return rc;
    r = redisCommandArgv(q->c, 2, argv, NULL);
    if (!r)
        return kq_transport_err(q, err, "INFO");
    if (r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "run_id:")) != NULL) {
        size_t n = strspn(p + 7, "0123456789abcdef");
        snprintf(out, 41, "%.*s", (int)(n > 40 ? 40 : n), p + 7);
    } else {
        rc = kf_err_set(err, KF_REDIS, "Redis INFO server: no run_id in the reply");
    }
    freeReplyObject(r);
    return rc;
}
