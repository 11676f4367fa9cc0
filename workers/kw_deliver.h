/*
 * kw_deliver — how the worker's main thread sends its reports to the API
 * (libkfworker.a): every report goes through the spool in order
 * (kf_spool_deliver, kf_report.h), and a final result report is waited for.
 *
 * kw_deliver sends one report now or spools it behind older ones.  While a
 * SIGTERM's drain time is over, a report that cannot even be written to the
 * spool is given up (the only way a report is lost: the disk refused it for
 * the whole drain).
 *
 * kw_deliver_final waits for a final result report to be taken, flushing
 * the spool with backoff (KW_BACKOFF_MIN doubling to KW_BACKOFF_MAX), and
 * gives up waiting, leaving the report in the spool for a later flush, as
 * soon as the lease is lost or the drain time is over (kw_deliver_wait_on):
 * the job is then not acked, so its lease expires and the report, sent
 * later, settles it (at-least-once).
 *
 * Ownership: bodies are the caller's; nothing is kept.
 * Failure behaviour: never fatal; the answer says where the report is.
 */
#ifndef KW_DELIVER_H
#define KW_DELIVER_H

#include "kw_worker.h"

/* The final HTTP status, or -1 while the report waits in the spool
 * (name_out, if given, gets its file name). */
long kw_deliver(kw_worker *w, const char *path, const char *body, char *name_out, size_t name_len);

/* Whether a final report still in the spool is worth waiting for. */
typedef enum kw_wait {
    KW_WAIT_RETRY,        /* sleep the backoff, flush, look again */
    KW_WAIT_LEAVE,        /* lease lost or drain over: leave it in the spool */
} kw_wait;
kw_wait kw_deliver_wait_on(bool lease_lost, bool drain_over);

/* The final status (200 once a flush sent it), or -1 when it was left in
 * the spool. */
long kw_deliver_final(kw_worker *w, const char *path, const char *body);

#endif
