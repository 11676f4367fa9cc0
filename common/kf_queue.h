/*
 * kf_queue — kforge's job queue in Redis (see docs/protocol.md).
 *
 * Every state change is one Lua script run with EVALSHA (reloaded on
 * NOSCRIPT); time comes from Redis TIME.  A kf_queue is one Redis
 * connection and is NOT thread-safe: use one per thread (the API keeps a
 * small pool).  All calls return KF_OK or an error value; KF_REDIS means
 * Redis is unreachable or failed (the handle reconnects on the next call),
 * KF_STALE means a lease token no longer matches (the lease was lost).
 *
 * Ownership: kf_queue_connect() returns a handle the caller releases with
 * kf_queue_free() (NULL-safe).  Strings in returned structs are owned by
 * the struct and freed by the matching function: kf_queue_lease_free(),
 * kf_queue_info_release(), kf_queue_moved_free().
 *
 * Routing by capability: a job waits in the set of its (target, backend)
 * pair, kf:wait:{backend}:{target} (e.g. kf:wait:neuron:trn2), and a worker
 * leases from, and blocks on the wake-up lists kf:signal:{backend}:{target}
 * of, exactly the pairs it can run (its targets x its backends).  Every
 * transition that puts a job back (release, promote) uses the pair in the
 * job's hash.  Heartbeats record what each worker offers (kf:cap:{pair},
 * kf:caps), which is how the API tells a job no live worker can serve.
 * Targets and backends are names without ':'.
 */
#ifndef KF_QUEUE_H
#define KF_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"

typedef struct kf_queue kf_queue;

/* What the API (or the scheduler's relay) puts on the queue. */
typedef struct kf_queue_job {
    const char *id;            /* UUID text */
    const char *kind;          /* generate|optimize|profile|validate|diag */
    const char *target;        /* trn1|inf2|trn2|trn3 */
    const char *backend;       /* sim|neuron|diag */
    int         priority;      /* 0 (lowest) .. 9 (highest) */
    int         attempt;       /* attempts already made (0 for a new job) */
    int         max_attempts;  /* >= 1 */
    const char *payload;       /* JSON the worker runs (docs/protocol.md) */
} kf_queue_job;

/* A lease handed to a worker. */
typedef struct kf_queue_lease {
    char   *id;
    char   *target;
    char   *kind;
    char   *backend;
    char   *payload;           /* JSON */
    char   *token;             /* fencing token of this lease */
    int     attempt;           /* 1 for the first delivery */
    int     max_attempts;
    int64_t expires_ms;        /* Redis time */
} kf_queue_lease;

/* Outcome of kf_queue_fail(). */
typedef enum kf_queue_fate {
    KF_FATE_RETRYING = 1,      /* back in kf:delayed, due at *due_ms */
    KF_FATE_DEAD,              /* attempts exhausted: in kf:dead */
    KF_FATE_CANCELLED,         /* the job had been cancelled: dropped */
} kf_queue_fate;

/* "retrying", "dead", "cancelled"; "" for anything else. */
const char *kf_queue_fate_name(kf_queue_fate f);

/* Outcome of kf_queue_cancel(). */
typedef enum kf_queue_cancel_result {
    KF_CANCEL_REMOVED = 1,     /* was waiting or delayed: removed, never runs */
    KF_CANCEL_SIGNALLED,       /* was running: flag set, holder notified */
    KF_CANCEL_ABSENT,          /* not in Redis (finished, or not yet relayed) */
} kf_queue_cancel_result;

/* A Redis URL, redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (port 6379 and
 * database 0 by default; HOST a name or an IPv4 address), or rediss://...
 * for TLS (kf_tls: the certificate is verified against
 * KFORGE_REDIS_CA_FILE or the system's CAs, and against HOST; a client
 * certificate from KFORGE_REDIS_CERT_FILE / KFORGE_REDIS_KEY_FILE).  Parsed into heap
 * strings the caller releases with kf_queue_url_release (which zeroes the
 * password); on failure nothing is kept and the KF_CONFIG message shows the
 * URL with everything up to its last '@' as "***", so no password reaches a
 * log. */
typedef struct kf_queue_url {
    char *host;
    int   port;
    char *user;                /* NULL: AUTH with the password only */
    char *password;            /* NULL: no AUTH */
    int   db;
    int   tls;                 /* 1 for rediss:// */
} kf_queue_url;

kf_code kf_queue_url_parse(const char *url, kf_queue_url *u, kf_err *err);
void kf_queue_url_release(kf_queue_url *u);

/* Parse the URL (kf_queue_url_parse: KF_CONFIG and NULL when it is bad) and
 * connect; an unreachable Redis is not an error here, every call reconnects. */
kf_queue *kf_queue_connect(const char *redis_url, kf_err *err);
void kf_queue_free(kf_queue *q);

/* Idempotent: a job already in Redis is left as it is (*created = false). */
kf_code kf_queue_enqueue(kf_queue *q, const kf_queue_job *job, bool *created, kf_err *err);

/* Most jobs kf_queue_enqueue_many() takes at once. */
#define KF_QUEUE_ENQUEUE_MAX 64

/* n jobs (1..KF_QUEUE_ENQUEUE_MAX) in one round trip and one script run,
 * the same as n kf_queue_enqueue() calls in order, but all or nothing: a
 * job that fails validation fails the call before Redis is asked, and a
 * Redis failure leaves every job to be enqueued again (enqueue is
 * idempotent).  created (n entries, may be NULL) says which were new. */
kf_code kf_queue_enqueue_many(kf_queue *q, const kf_queue_job *jobs, int n, bool *created, kf_err *err);

/* Most (target, backend) pairs one worker serves. */
#define KF_QUEUE_MAX_PAIRS 64

/* What a worker runs: every one of its targets with every one of its
 * backends (at most KF_QUEUE_MAX_PAIRS pairs; KF_INVALID otherwise). */
typedef struct kf_queue_caps {
    const char *const *targets;
    int                n_targets;
    const char *const *backends;
    int                n_backends;
} kf_queue_caps;

/* Lease the best waiting job among the pairs of `caps` for `worker_id`,
 * for lease_ms.  *got = false when nothing is waiting there.  (Named
 * kf_queue_lease_job because C does not allow a function and the typedef
 * kf_queue_lease to share a name.) */
kf_code kf_queue_lease_job(kf_queue *q, const kf_queue_caps *caps, const char *worker_id, int64_t lease_ms,
                           kf_queue_lease *out, bool *got, kf_err *err);
/* Free the strings a lease holds (not the struct, which the caller owns)
 * and zero it; NULL-safe.  Not kf_queue_release(), which hands a lease
 * back to the queue. */
void kf_queue_lease_free(kf_queue_lease *l);

/* Extend a lease; KF_STALE if the token is no longer current.  *cancel is
 * set when the job was cancelled meanwhile. */
kf_code kf_queue_renew(kf_queue *q, const char *id, const char *token, int64_t lease_ms,
                       bool *cancel, kf_err *err);

/* The job finished (any final outcome the API has recorded): drop it from
 * Redis.  KF_STALE if the token is no longer current. */
kf_code kf_queue_ack(kf_queue *q, const char *id, const char *token, kf_err *err);

/* The attempt failed with `error`; retry with backoff (base_ms * 2^(attempt-1),
 * jitter, capped at cap_ms) or dead-letter when attempts are exhausted.
 * retryable = false dead-letters at once. */
kf_code kf_queue_fail(kf_queue *q, const char *id, const char *token, const char *error, bool retryable,
                      int64_t base_ms, int64_t cap_ms, kf_queue_fate *fate, int64_t *due_ms, kf_err *err);

/* Give a lease back without counting the attempt as failed (SIGTERM drain):
 * the job returns to the front of its waiting set. */
kf_code kf_queue_release(kf_queue *q, const char *id, const char *token, kf_err *err);

kf_code kf_queue_cancel(kf_queue *q, const char *id, kf_queue_cancel_result *res, kf_err *err);

/* Number of jobs waiting for `target` (any backend; NULL: all targets), active, delayed and dead. */
typedef struct kf_queue_stats {
    int64_t waiting, active, delayed, dead;
} kf_queue_stats;
kf_code kf_queue_stats_get(kf_queue *q, const char *target, kf_queue_stats *st, kf_err *err);

/* PING. */
kf_code kf_queue_ping(kf_queue *q, kf_err *err);

/* ---- Additions for the scheduler, the worker and the tests ----------- */

/* Note on kf_queue_lease.max_attempts: a lease handed back with
 * kf_queue_release() does not use up an attempt, so the value returned is
 * the job's max_attempts plus the number of hand-backs, in the numbering of
 * `attempt`: the attempt fails for good when attempt >= max_attempts. */

/* kf_queue_connect() returns NULL only when the URL is malformed (KF_CONFIG).
 * When Redis is unreachable the handle is still returned and every call
 * tries to connect again (KF_REDIS until Redis answers). */

/* A job moved by kf_queue_reap() or kf_queue_promote(). */
typedef struct kf_queue_moved {
    char         *id;
    kf_queue_fate fate;        /* reap: RETRYING, DEAD or CANCELLED; promote: 0 */
    int           attempt;     /* attempts made so far */
    int64_t       at_ms;       /* reap: due time (RETRYING) or time of death */
} kf_queue_moved;
void kf_queue_moved_free(kf_queue_moved *m, int n);

/* Leases whose expiry (Redis time) has passed, at most `limit`: each counts
 * as a failed attempt with error "lease expired" (retry with backoff or
 * dead).  *out (n entries, caller frees with kf_queue_moved_free). */
kf_code kf_queue_reap(kf_queue *q, int limit, int64_t base_ms, int64_t cap_ms, kf_queue_moved **out, int *n,
                      kf_err *err);

/* Jobs dead-lettered since the last call (by kf_queue_fail or the reaper),
 * oldest first, at most `limit`, for the scheduler to record in PostgreSQL
 * (fate KF_FATE_DEAD; attempt and at_ms 0).  Each id is handed out once. */
kf_code kf_queue_deaths(kf_queue *q, int limit, kf_queue_moved **out, int *n, kf_err *err);

/* Delayed retries that are due go back to their waiting set (state queued). */
kf_code kf_queue_promote(kf_queue *q, int limit, kf_queue_moved **out, int *n, kf_err *err);

/* What Redis holds about one job (reconciliation, tests). */
typedef struct kf_queue_info {
    char    state[16];         /* queued|running|retrying|dead */
    int     attempt;
    int     max_attempts;
    bool    cancel;
    char   *last_error;        /* owned; NULL when none */
    char   *worker;            /* owned; NULL when not leased */
} kf_queue_info;
kf_code kf_queue_inspect(kf_queue *q, const char *id, kf_queue_info *info, bool *exists, kf_err *err);
void kf_queue_info_release(kf_queue_info *info);

/* The latest lease the queue granted for a job: its attempt number, and
 * the token and worker of that lease, kept after the lease ends (a late
 * report of a finished attempt can still be matched; a newer lease has a
 * higher attempt).  *exists = false when the job is not in Redis (never
 * queued, finished and acked, cancelled, or Redis lost its data).  token
 * and worker are "" when the job has not been leased at its current
 * attempt (a queued job, a job re-queued by reconciliation).  The API
 * checks every worker report against it (docs/protocol.md). */
typedef struct kf_queue_grant {
    char state[16];            /* queued|running|retrying|dead */
    int  attempt;
    char token[72];            /* lease token of `attempt`, or "" */
    char worker[136];          /* worker id it was granted to, or "" */
    bool live;                 /* the lease is still held (state running) */
} kf_queue_grant;
kf_code kf_queue_grant_get(kf_queue *q, const char *id, kf_queue_grant *g, bool *exists, kf_err *err);

/* Drop a job from Redis whatever its state (its history is final in
 * PostgreSQL).  A worker still holding it finds its lease STALE. */
kf_code kf_queue_forget(kf_queue *q, const char *id, kf_err *err);

/* Remove dead-lettered jobs that died more than older_than_ms ago (at most
 * `limit`); *n = how many. */
kf_code kf_queue_trim_dead(kf_queue *q, int64_t older_than_ms, int limit, int *n, kf_err *err);

/* Worker registry: kf:worker:{id} = json with TTL ttl_ms, kf:workers zset.
 * With caps (NULL: none), each of its pairs gets the worker in
 * kf:cap:{backend}:{target} until the same expiry, and joins kf:caps, the
 * pairs ever offered (never expires).  kf_queue_worker_gone removes the
 * worker from the registry and from every kf:cap set. */
kf_code kf_queue_heartbeat(kf_queue *q, const char *worker_id, const char *json, int64_t ttl_ms,
                           const kf_queue_caps *caps, kf_err *err);
kf_code kf_queue_worker_gone(kf_queue *q, const char *worker_id, kf_err *err);

/* One (target, backend) pair as the queue sees it. */
typedef struct kf_queue_cap_state {
    char    target[65], backend[65];
    int64_t live_workers;      /* workers offering it whose heartbeat has not expired */
    bool    offered;           /* some worker has ever offered it (kf:caps) */
    int64_t waiting;           /* jobs waiting for it */
} kf_queue_cap_state;
/* The state of n (1..KF_QUEUE_MAX_PAIRS) pairs (targets[i], backends[i])
 * into out[0..n-1], in one round trip. */
kf_code kf_queue_caps_get(kf_queue *q, const char *const *targets, const char *const *backends, int n,
                          kf_queue_cap_state *out, kf_err *err);
/* The pairs that have waiting jobs and no live worker (sorted by
 * 'backend:target'), at most `limit`, into out (caller's, `limit`
 * entries); live_workers is 0 in each.  One round trip; cost grows with
 * the number of pairs ever queued (kf:queues), not with the workers. */
kf_code kf_queue_caps_missing(kf_queue *q, int limit, kf_queue_cap_state *out, int *n, kf_err *err);

/* Every pair ever queued (kf:queues) or offered (kf:caps), sorted by
 * 'backend:target', at most `limit`, into out (caller's, `limit` entries),
 * each with its live workers, whether it was ever offered and its waiting
 * jobs: per-pair queue depth for the fleet view.  One round trip. */
kf_code kf_queue_pairs_list(kf_queue *q, int limit, kf_queue_cap_state *out, int *n, kf_err *err);

/* Upgrade from the waiting sets keyed by target only: move at most `limit`
 * ids from each old kf:wait:{target} to kf:wait:{backend}:{target} (the
 * job's backend, "sim" when its hash has none), keeping their scores and
 * waking the pair's workers; *moved = how many.  Idempotent; the scheduler
 * calls it until it moves nothing, at leadership start and periodically
 * (an API of the old version may still enqueue during a rolling upgrade). */
kf_code kf_queue_migrate_wait(kf_queue *q, int limit, int *moved, kf_err *err);
/* The live registry, for reading (GET /v1/workers): at most `limit`
 * workers, the most recent heartbeat first, each with its registry
 * document (the JSON the worker last sent, as it sent it) and the time of
 * that heartbeat (Redis TIME, ms since 1970).  An entry whose document has
 * expired is left out (the scheduler's cleanup removes it later).  *out
 * (n entries) is freed with kf_queue_workers_free. */
typedef struct kf_queue_worker {
    char   *id;
    char   *doc;
    int64_t seen_ms;
} kf_queue_worker;
kf_code kf_queue_workers_list(kf_queue *q, int limit, kf_queue_worker **out, int *n, kf_err *err);
void kf_queue_workers_free(kf_queue_worker *w, int n);
/* The dead letters Redis still holds (kf:dead, trimmed by
 * kf_queue_trim_dead), newest first, at most `limit`: fate KF_FATE_DEAD,
 * at_ms the time of death, attempt 0 (PostgreSQL has the rest).  Caller
 * frees with kf_queue_moved_free. */
kf_code kf_queue_dead_list(kf_queue *q, int limit, kf_queue_moved **out, int *n, kf_err *err);
/* Every target a job was ever queued for (kf:targets, any backend), sorted; at most
 * `limit` names, each a heap string; free with kf_queue_targets_free. */
kf_code kf_queue_targets_list(kf_queue *q, int limit, char ***names, int *n, kf_err *err);
void kf_queue_targets_free(char **names, int n);
/* Remove kf:workers entries whose heartbeat key expired; *removed = count. */
kf_code kf_queue_workers_cleanup(kf_queue *q, int *removed, kf_err *err);

/* Scheduler leader lock: take kf:leader (SET NX PX) or, if `token` holds
 * it, extend it (compare-and-pexpire).  *leader tells which. */
kf_code kf_queue_leader(kf_queue *q, const char *token, int64_t ttl_ms, bool *leader, kf_err *err);
kf_code kf_queue_leader_resign(kf_queue *q, const char *token, kf_err *err);

/* Redis-loss detector: *present = whether the marker key kf:epoch existed;
 * it is (re)created either way.  Missing means Redis lost its data. */
kf_code kf_queue_epoch(kf_queue *q, bool *present, kf_err *err);

/* Block up to timeout_ms (<= 4000) until a job may be waiting for one of
 * the pairs of `caps` (enqueue, promote and release push a wake-up signal
 * per pair).  *woken tells whether a signal arrived; a spurious wake-up
 * just finds nothing to lease.  Lets idle workers pick a job up within a
 * round trip instead of a polling interval. */
kf_code kf_queue_wait(kf_queue *q, const kf_queue_caps *caps, int timeout_ms, bool *woken, kf_err *err);

/* The Redis server's run_id (40 hex characters + NUL): it changes when
 * Redis restarts, which may have lost up to a second of writes (AOF
 * everysec) even though the kf:epoch marker survived. */
kf_code kf_queue_server_id(kf_queue *q, char out[41], kf_err *err);

/* A fresh random 128-bit token as 32 hex characters + NUL. */
void kf_queue_new_token(char out[33]);

#endif
