/*
 * kf_backend — what a worker runs a job with.
 *
 * A backend declares its name (the job's `backend` field), the job kinds it
 * runs, and a run() function.  The worker calls run() inside a child
 * process it forked for the job (workers/kf_runner.h), so a backend may
 * crash, leak or be killed without harming the worker: a crash is a failed
 * attempt.  run() must call hooks->cancelled() often (at least every
 * ~100 ms of work) and return promptly when it answers true (the job was
 * cancelled, its lease was lost, or the worker is draining).
 *
 * Ownership: *result_json is a heap string (a JSON object) the caller frees.
 * The payload and hooks are borrowed for the duration of the call.
 *
 * Adding a backend: define a `const kf_backend kf_backend_<name>` in its
 * own file under workers/ and list it in workers/kf_backends.c.
 */
#ifndef KF_BACKEND_H
#define KF_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "kf_error.h"
#include "kf_job.h"

typedef struct kf_backend_hooks {
    void *ctx;
    /* Report one iteration: a JSON object with the fields of
     * POST /v1/internal/jobs/{id}/iterations except attempt, lease_token
     * and seq, which the worker adds. */
    void (*progress)(void *ctx, const char *iteration_json);
    /* True when the job must stop now. */
    bool (*cancelled)(void *ctx);
} kf_backend_hooks;

typedef struct kf_backend kf_backend;
struct kf_backend {
    const char *name;               /* "diag", "sim", "neuron" */
    const char *const *kinds;       /* NULL-terminated job kinds it runs */
    /* KF_OK with *result_json set, or an error code with err->msg saying
     * what failed; *retryable tells whether another attempt could succeed
     * (a transient failure) or not (the job itself is wrong). */
    kf_code (*run)(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                   char **result_json, bool *retryable, kf_err *err);
    /* Optional (NULL: always healthy): whether the backend's device can
     * take a job now, with why not in why[len].  The worker calls it in
     * its own process between jobs (never while a job runs) and leases no
     * job of this backend while it is unhealthy; it must finish within about a
     * minute and run no user code. */
    bool (*health)(const kf_backend *self, char *why, size_t len);
    /* Optional (NULL: always): whether this machine has what the backend
     * needs (the neuron backend: its device runner).  A worker offers
     * (advertises, health-checks) only the backends that are available. */
    bool (*available)(const kf_backend *self);
};

/* The backend named `name` that runs `kind`, or NULL. */
const kf_backend *kf_backend_find(const char *name, const char *kind);

/* NULL-terminated list of every backend compiled into this worker. */
const kf_backend *const *kf_backend_all(void);

/* Whether b is available on this machine (its available hook, or true). */
bool kf_backend_available(const kf_backend *b);

/* The health hook of the backend named `name` (one of a worker's own, see
 * kw_worker_set_caps): true when it is healthy, has no hook, or is not
 * available here; else false with why (the hook's message).  The worker
 * checks each of its backends on its own: an unhealthy one stops only its
 * own pairs (kw_beat_caps). */
bool kf_backend_healthy(const char *name, char *why, size_t len);

#endif
