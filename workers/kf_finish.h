/*
 * kf_finish — the worker's decision table for the end of an attempt
 * (libkfworker.a; kforge-worker's w_finish only carries it out).
 *
 * Job: from how the attempt ended and how the API answered its result
 * report, decide what is reported and how the job is settled in Redis:
 *
 *   attempt ended                      report                 then Redis
 *   succeeded                          succeeded, retry:false ack
 *   failed, not retryable              failed, retry:false    ack
 *   failed, retryable, attempts left   failed, retry:true     fail (delayed retry) once the API
 *                                                             took it (2xx); ack otherwise
 *   failed, retryable, last attempt    none                   fail: kf_queue_fail dead-letters it
 *                                                             and the scheduler records `dead`
 *
 * The API's answer to a report (kf_finish_answer_of):
 *   2xx                                taken
 *   404, 409, 403 not-lease-holder     elsewhere: the job ended or is another
 *                                      worker's; nothing of ours to record (ack)
 *   any other >= 400                   refused: the report itself was bad
 *                                      (malformed, too large); a failed,
 *                                      retry:false report replaces it, or
 *                                      PostgreSQL would keep the job running
 *   anything else (1xx, 3xx)           elsewhere
 *
 * Ownership: pure functions; kf_finish_body appends to the caller's buffer
 * and borrows the report's strings.
 * Failure: none; every input has an answer.
 */
#ifndef KF_FINISH_H
#define KF_FINISH_H

#include <stdbool.h>

#include "kf_buf.h"

typedef struct kf_finish_plan {
    bool report;   /* send a result report to the API */
    bool retry;    /* the report asks for another attempt (retry:true) */
} kf_finish_plan;

kf_finish_plan kf_finish_plan_of(bool ok, bool retryable, int attempt, int max_attempts);

typedef enum kf_finish_answer {
    KF_FINISH_TAKEN,       /* 2xx */
    KF_FINISH_ELSEWHERE,   /* 404, 409, 403 not-lease-holder, 1xx/3xx */
    KF_FINISH_REFUSED,     /* any other >= 400: replace the report with a plain failure */
} kf_finish_answer;

/* `problem` is the slug of the answer's problem+json type ("" when none). */
kf_finish_answer kf_finish_answer_of(long status, const char *problem);

typedef enum kf_finish_settle {
    KF_FINISH_ACK,    /* kf_queue_ack: the job leaves the queue */
    KF_FINISH_FAIL,   /* kf_queue_fail: a delayed retry, or a dead letter on the last attempt */
} kf_finish_settle;

/* How to settle the job once the plan's report (if any) got `status` (the
 * final answer's; a refused report's replacement asks for no retry, so
 * pass the plan with retry cleared). */
kf_finish_settle kf_finish_settle_of(kf_finish_plan plan, long status);

/* The result report (docs/protocol.md, "Finish report"), and its one
 * serializer.  result_json is the backend's result, a JSON object's text
 * as the job process sent it (NULL, or any failure: {}); error is plain
 * text, escaped here, sent only for a failure; provenance_json is the
 * result's provenance object's text (kf_upload_take_provenance), sent only
 * for a success.  Strings are borrowed. */
typedef struct kf_finish_report {
    int         attempt;
    const char *lease_token;
    bool        ok;
    const char *result_json;
    const char *error;
    bool        retry;
    const char *worker;
    const char *provenance_json;
} kf_finish_report;

/* {"attempt","lease_token","state","result"[,"error"],"retry","worker"
 *  [,"provenance"]}, appended to b. */
void kf_finish_body(kf_buf *b, const kf_finish_report *r);
#endif
