/*
 * ks_sched — the scheduler's duties (what kforge-scheduler does each
 * tick), as a library so that each can be tested against the real Redis
 * and PostgreSQL of the test harness.  DESIGN.md §2, docs/protocol.md,
 * docs/lifecycle.md.
 *
 * One leader at a time: every tick each instance tries to take or extend
 * the Redis lock kf:leader (SET NX PX with a random token, extended by
 * compare-and-pexpire); a standby takes over within one leader TTL of the
 * leader's death.  The leader, each tick:
 *
 *   relay      pending outbox rows → Redis (enqueue / cancel), then deletes them;
 *   reap       expired leases → retrying or dead (a failed attempt) and
 *              the same in PostgreSQL with an event (workers hold no DB
 *              credentials, so the scheduler records what the queue did);
 *   deaths     jobs dead-lettered by workers → dead in PostgreSQL;
 *   promote    due retries → waiting, PostgreSQL back to queued;
 *   reconcile  (on taking the lead, when Redis lost its data — the kf:epoch
 *              marker is gone —, when Redis restarted — its run_id changed,
 *              and AOF everysec may have lost the last second — and every
 *              60 s) every job PostgreSQL says is queued/running/retrying
 *              but Redis lacks is enqueued again with its attempt count;
 *              Redis dead letters PostgreSQL missed are recorded.  A job
 *              with a pending outbox row is the relay's and is left out;
 *              so, after a loss, a second pass 3 s later finds the jobs
 *              whose enqueue was in flight (delivered before the loss, its
 *              row deleted by the API after the first pass);
 *   retain     (every 10 s) dead letters older than the idempotency TTL
 *              leave Redis, expired idempotency keys leave PostgreSQL, and
 *              registry entries of workers whose heartbeat expired go;
 *   artifacts  (on taking the lead, then every 10 min, when the retention
 *              in days is > 0) the best-so-far artifact links of jobs
 *              finished longer ago go (the final set stays), then the
 *              contents no link references, untouched for an hour
 *              (db/kf_artifact.h).
 *
 * Every move it records in PostgreSQL is a row of the transition table
 * (common/kf_life.h) applied by db/kf_db; it writes no job state or event
 * by hand.  Every PostgreSQL row it acts on is locked (FOR UPDATE SKIP
 * LOCKED) while it talks to Redis, so it never races the API's result
 * handler on the same job; those transactions run again whole when they
 * lose a deadlock or serialization check (kf_pg_txn), which is safe
 * because what they ask of Redis is idempotent.
 *
 * Ownership: a ks_sched owns its PostgreSQL connection (made on first use,
 * re-made after a failure) and borrows the kf_queue and the artifact store
 * it is given, which must outlive it.  Failure behaviour: Redis or PostgreSQL down → the step
 * is logged once, skipped and tried again next tick; nothing is fatal.
 */
#ifndef KS_SCHED_H
#define KS_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "kf_artifact.h"
#include "kf_queue.h"

typedef struct ks_config {
    const char *dsn;            /* PostgreSQL (KFORGE_PG_DSN); borrowed */
    int64_t     ttl_ms;         /* leader lock TTL (KFORGE_LEADER_TTL_MS) */
    int64_t     retry_base_ms;  /* backoff of a reaped attempt (KFORGE_RETRY_BASE_MS) */
    int64_t     retry_cap_ms;   /* (KFORGE_RETRY_CAP_MS) */
    int64_t     idem_ttl_s;     /* idempotency keys and dead letters kept (KFORGE_IDEMPOTENCY_TTL_S) */
    int         artifact_days;  /* KFORGE_ARTIFACT_RETENTION_DAYS; 0: keep every artifact */
    kf_artifact_store *artifacts;   /* where artifact contents live (KFORGE_ARTIFACT_STORE); borrowed */
} ks_config;

typedef struct ks_sched ks_sched;

/* A scheduler with a fresh random leader token; it is no leader yet. */
ks_sched *ks_new(const ks_config *cfg, kf_queue *q);
/* Give the leader lock up if held, close PostgreSQL, free. */
void ks_free(ks_sched *s);

/* One tick at now_ms (CLOCK_MONOTONIC milliseconds): take or keep the
 * lock, and as leader do each duty that is due. */
void ks_tick(ks_sched *s, long long now_ms);
bool ks_is_leader(const ks_sched *s);

/* The duties one by one (ks_tick runs them; tests call them directly).
 * Each needs ks_pg_ok first; ks_reconcile is true when every non-terminal
 * job was looked at. */
bool ks_pg_ok(ks_sched *s);
void ks_relay(ks_sched *s);
void ks_reap(ks_sched *s);
void ks_deaths(ks_sched *s);
void ks_promote(ks_sched *s);
bool ks_reconcile(ks_sched *s, const char *why);
void ks_retain(ks_sched *s);
void ks_retain_artifacts(ks_sched *s);
/* Upgrade: move every job still in a waiting set keyed by target only
 * (kf:wait:{target}, before routing by capability) to its (target,
 * backend) set, in batches (kf_queue_migrate_wait).  Needs Redis only;
 * ks_tick runs it at leadership start and then every minute (an API of
 * the old version may still enqueue during a rolling upgrade).  False when
 * Redis failed (logged). */
bool ks_migrate_wait(ks_sched *s);

#endif
