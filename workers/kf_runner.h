/*
 * kf_runner — run one job through a backend in a child process.
 *
 * kf_runner_run() forks; the child runs backend->run() and sends its
 * progress and its outcome back over a pipe, then exits.  The parent relays
 * progress to hooks->progress, polls hooks->should_stop about every 20 ms
 * and, when it answers true, asks the child to stop (SIGTERM, which the
 * backend sees through its cancelled() hook) and kills it (SIGKILL) if it
 * is still there grace_ms later.  A child that dies without an outcome
 * (abort, segfault, OOM kill, exit) is reported as KF_RUN_CRASHED: a failed
 * attempt, never a dead worker.  The child dies with the worker
 * (PR_SET_PDEATHSIG), writes no core file, and keeps only stdio and its pipe.
 *
 * Ownership: kf_run_result owns result_json; release with
 * kf_run_result_release() (NULL-safe).
 */
#ifndef KF_RUNNER_H
#define KF_RUNNER_H

#include <stdbool.h>

#include "kf_backend.h"

typedef enum kf_run_outcome {
    KF_RUN_OK = 1,      /* result_json holds the backend's result */
    KF_RUN_FAILED,      /* the backend returned an error (see retryable) */
    KF_RUN_CRASHED,     /* the job process died without an outcome */
} kf_run_outcome;

typedef struct kf_run_result {
    kf_run_outcome outcome;
    bool           stopped;      /* should_stop() answered true during the run */
    bool           retryable;    /* FAILED: another attempt could succeed; CRASHED: true */
    char          *result_json;  /* OK: a JSON object (owned) */
    char           error[512];   /* FAILED / CRASHED: what happened */
    int            wait_status;  /* raw waitpid status of the child */
} kf_run_result;

typedef struct kf_runner_hooks {
    void *ctx;
    void (*progress)(void *ctx, const char *iteration_json);  /* may be NULL */
    bool (*should_stop)(void *ctx);                           /* may be NULL */
} kf_runner_hooks;

/* KF_OK with *out filled (whatever the job's outcome); an error only when
 * the child could not be started (fork/pipe failure). */
kf_code kf_runner_run(const kf_backend *backend, const kf_job_payload *job, const kf_runner_hooks *hooks,
                      int grace_ms, kf_run_result *out, kf_err *err);
void kf_run_result_release(kf_run_result *r);

/* The job process's side, for a process that already has the pipe on fd 3
 * (kf_runner_run's child, or an exec'd job process: kf_jobproc.h): run the
 * backend with SIGTERM as its cancel, send its frames, _exit(0). */
_Noreturn void kf_runner_serve(const kf_backend *backend, const kf_job_payload *job);

#endif
