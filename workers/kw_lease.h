/*
 * kw_lease — the worker's lease thread (libkfworker.a): it renews the
 * current lease on its own Redis connection, so a long evaluation never
 * loses a healthy lease, and refreshes this worker's Redis registry entry
 * (kw_beat_registry_json) every KFORGE_HEARTBEAT_MS.
 *
 * Schedule (kw_lease_renew_every, kw_lease_after_renew): a lease is renewed
 * every third of KFORGE_LEASE_MS but at least once a second, because the
 * renew reply also carries the cancel flag (a cancel reaches a running job
 * within ~1 s whatever the lease).  A renewal Redis did not answer is
 * retried every KW_RENEW_RETRY_MS; a renewal answered STALE (expired,
 * reaped, forgotten) marks the lease lost: a newer attempt owns the job,
 * which the main thread then stops at once (kw_lease_should_stop).
 *
 * Ownership: the thread reads and writes only the kw_worker fields under
 * mu, and its own Redis handle, which it opens and frees.  kw_lease_set is
 * called by the main thread whenever it takes or drops a lease.
 * Failure behaviour: Redis unreachable → warned once, retried, never
 * fatal; the thread ends only when w->quit is set (kw_worker_stop_threads).
 */
#ifndef KW_LEASE_H
#define KW_LEASE_H

#include "kw_worker.h"

/* How often a held lease of lease_ms is renewed. */
long long kw_lease_renew_every(int64_t lease_ms);

/* What one renewal's answer means. */
typedef struct kw_renew_step {
    bool      lost;         /* KF_STALE: stop renewing; the job must stop */
    bool      failed;       /* Redis did not answer: retry soon */
    long long next_in_ms;   /* when to renew again (not lost) */
} kw_renew_step;
kw_renew_step kw_lease_after_renew(kf_code rc, int64_t lease_ms);

/* The main thread took lease l (NULL: dropped it): clears cancel and lost,
 * schedules the first renewal and wakes the background threads. */
void kw_lease_set(kw_worker *w, const kf_queue_lease *l);

/* Whether the lease thread saw it lost (KF_STALE). */
bool kw_lease_lost(kw_worker *w);

/* Whether the running job must stop: a cancel request or a lost lease
 * (the drain clock is the caller's to add). *cancelled / *lost (may be
 * NULL) get each one. */
bool kw_lease_should_stop(kw_worker *w, bool *cancelled, bool *lost);

/* The thread's body (pthread_create argument: the kw_worker). */
void *kw_lease_thread(void *worker);

#endif
