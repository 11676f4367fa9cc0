/*
 * kw_loop — the worker's main thread (libkfworker.a): lease a job, run it
 * in a job process through its backend, relay its progress and artifacts,
 * report the outcome and settle the job in Redis; until SIGTERM.
 *
 * One job (kw_loop_run_job): parse the payload (invalid: a failed,
 * non-retryable result), find the backend (missing: failed, retryable: an
 * other worker may have it), report start (refused: the job ended in
 * PostgreSQL, drop it from the queue), run it (kf_runner.h) with progress
 * relayed as iteration reports and new bests' files as artifact reports,
 * stopping it on a cancel, a lost lease or the end of the drain time; then
 * what happens is kw_loop_after_run's table:
 *
 *   lease lost                      abandon: a newer attempt owns the job
 *   stopped, cancel requested       report failed "cancelled at the user's
 *                                   request" (no retry): the API records
 *                                   `cancelled`
 *   stopped, SIGTERM                hand the job back (kf_queue_release)
 *   backend succeeded               report the result (kf_finish.h)
 *   backend failed or crashed       report the failure (retryable as the
 *                                   runner says)
 *
 * and the report and settle follow kf_finish.h.  A fork or pipe failure is
 * the machine's, not the job's: the job is handed back.
 *
 * The loop (kw_loop_run): flush the spool when reports wait (at most once
 * a second while the API refuses them), lease with backoff while Redis is
 * away, block up to KW_WAIT_MS on the wake-up list when idle, and stop
 * leasing once SIGTERM arrived (the job in hand drains first).
 *
 * Ownership: uses the kw_worker's main-thread handles; a job's payload,
 * workdir and result are freed before kw_loop_run_job returns.
 * Failure behaviour: nothing is fatal; Redis and API failures are retried
 * or left to the lease's expiry as above.
 */
#ifndef KW_LOOP_H
#define KW_LOOP_H

#include "kf_runner.h"
#include "kw_worker.h"

typedef enum kw_after {
    KW_AFTER_ABANDON = 1,   /* lease lost: no report, no settle */
    KW_AFTER_CANCELLED,     /* report a non-retryable failure: cancelled */
    KW_AFTER_HAND_BACK,     /* drain over: kf_queue_release */
    KW_AFTER_RESULT,        /* report the backend's result */
    KW_AFTER_FAILURE,       /* report the backend's failure or crash */
} kw_after;
kw_after kw_loop_after_run(bool lease_lost, bool stopped, bool cancelled, bool term, kf_run_outcome outcome);

/* Whether the running job must stop now: cancel, lost lease, drain over. */
bool kw_loop_should_stop(kw_worker *w);

/* True when the job asks for the LLM planner (a generate or optimize job
 * with spec.planner "llm"): a worker without an LLM endpoint (w->llm)
 * fails it at once, not retryable, naming the settings to add. */
bool kw_loop_wants_llm(const kf_job_payload *p);

/* Run one leased job to its end (see above). */
void kw_loop_run_job(kw_worker *w, const kf_queue_lease *l);

/* Lease and run jobs until SIGTERM (w->term); returns the exit status. */
int kw_loop_run(kw_worker *w);

#endif
