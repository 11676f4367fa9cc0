/*
 * kw_beat — the worker's liveness documents and its API heartbeat thread
 * (libkfworker.a).
 *
 * Two documents say this worker is alive (docs/protocol.md, "Heartbeats"):
 * the Redis registry entry kw_beat_registry_json (written by the lease
 * thread, kw_lease.h, with a TTL of three heartbeats) and the body of
 * POST /v1/internal/workers/{id}/heartbeat, kw_beat_api_body, which the
 * heartbeat thread sends every KFORGE_HEARTBEAT_MS with a 2 s timeout.
 *
 * Ownership: the serializers return heap strings the caller frees.  The
 * thread owns its own API handle and body.
 * Failure behaviour: an API that does not take the heartbeat is warned
 * about once and retried on the next beat, never fatal; the thread ends
 * when w->quit is set.
 */
#ifndef KW_BEAT_H
#define KW_BEAT_H

#include "kw_worker.h"

/* {"id","host","pid","targets":[...],"backends":[...],"job":string|null,
 *  "started_ms","sandbox":"strict"|"unconfined","unhealthy":string|null,
 *  "unhealthy_backends":{backend: why}}; job "" or NULL: null.
 * "backends" lists the available ones (kf_backend_available); each backend
 * whose health check failed is in "unhealthy_backends" with why, and the
 * worker neither leases nor advertises its pairs (kw_beat_caps) until a
 * recheck passes; "unhealthy" sums them up ("neuron: ..."), null when
 * every backend is healthy. */
char *kw_beat_registry_json(const kw_worker *w, const char *job);

/* {"targets":[...],"backends":[...],"host","sandbox","unhealthy","unhealthy_backends"} */
char *kw_beat_api_body(const kw_worker *w);

/* Set (why non-empty) or clear (why "" or NULL) why `backend` is
 * unhealthy; the next registry entry and heartbeat carry it.  Thread-safe. */
void kw_beat_set_health(const char *backend, const char *why);
/* Whether backend passed its last health check (never checked: true). */
bool kw_beat_backend_healthy(const char *backend);
/* The pairs the worker leases, waits on and advertises now: its targets x
 * its healthy backends, into *caps (backend names in buf, the caller's
 * KW_MAX_BACKENDS entries).  Returns how many backends are healthy. */
int kw_beat_caps(const kw_worker *w, const char **buf, kf_queue_caps *caps);

/* The thread's body (pthread_create argument: the kw_worker). */
void *kw_beat_thread(void *worker);

#endif
