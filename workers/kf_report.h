/*
 * kf_report — the worker's HTTP client for the API's internal endpoints
 * (docs/protocol.md, "Worker → API"), and the spool that keeps reports the
 * API could not accept yet.
 *
 * kf_report_post() sends one JSON body with the worker token and returns the
 * HTTP status (0 when the request never completed: refused, timed out).
 * kf_report_final() tells whether a status (and the problem type of its
 * body, kf_report_problem()) ends a report's life: 2xx (accepted), 409
 * (stale: a newer attempt or a final state exists), 403 not-lease-holder
 * (the lease is another worker's: no resend can change that), and the
 * other 4xx that no resend could fix (logged) do; 0, 5xx, 408, 429, 401
 * and other 403s (a token or worker id the operator can still fix) do not.
 *
 * kf_report_token_read() reads a worker token file (KFORGE_TOKEN_FILE) and
 * refuses one that others could read: it must be a regular file owned by
 * the worker's user with no group or other permission bits (0600/0400).
 *
 * The spool is a folder of files, one report each ("<ns>-<pid>-<seq>.rpt":
 * the API path on the first line, the JSON body after it), written to a
 * temporary name, fsynced, renamed and the folder fsynced, so a report is
 * either wholly there or absent after a crash.  Flushing sends them in name
 * (= time) order under an exclusive lock on the folder, so two processes
 * of one worker id never send a report twice at once (kforge-worker keeps
 * one folder per worker id: a report can only be resent with the token of
 * the worker that wrote it); a report is removed
 * only once the API gave a final status.  Nothing is ever dropped.
 *
 * Ownership: kf_report / kf_spool handles are released with *_free()
 * (NULL-safe).  A kf_report is used by one thread at a time.
 */
#ifndef KF_REPORT_H
#define KF_REPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "kf_error.h"

typedef struct kf_report kf_report;

kf_report *kf_report_new(const char *api_url, const char *token, int timeout_ms);
void kf_report_free(kf_report *r);
/* path starts with '/'.  errbuf (may be NULL) gets curl's message or the
 * start of an error body. */
long kf_report_post(kf_report *r, const char *path, const char *body, char *errbuf, size_t errlen);
/* GET path; body (may be NULL) gets up to len-1 bytes of the answer. */
long kf_report_get(kf_report *r, const char *path, char *body, size_t len);
/* The problem type slug ("stale-attempt", "not-lease-holder", ...) of the
 * last answer, "" when it was not problem+json.  Owned by r; valid until
 * the next request. */
const char *kf_report_problem(const kf_report *r);
bool kf_report_final(long status, const char *problem);

/* The token in `path` (surrounding white space removed; caller frees), or
 * NULL with err (KF_CONFIG) saying what is wrong and how to fix it:
 * missing, not a regular file, not owned by this user, readable or
 * writable by group or others, empty or not one line. */
char *kf_report_token_read(const char *path, kf_err *err);

typedef struct kf_spool kf_spool;

/* Create the folder (and parents) if needed. */
kf_spool *kf_spool_open(const char *dir, kf_err *err);
void kf_spool_free(kf_spool *s);

/* Store one report; name_out (may be NULL) gets its file name. */
kf_code kf_spool_put(kf_spool *s, const char *path, const char *body, char *name_out, size_t name_len,
                     kf_err *err);

/* Send spooled reports in order until one is not accepted; *pending gets
 * how many are left.  KF_IO only when the folder cannot be read. */
kf_code kf_spool_flush(kf_spool *s, kf_report *r, int *pending, kf_err *err);

/* Send one report now, or spool it so the API sees reports in the order
 * they were made: older spooled reports go first (kf_spool_flush), and
 * while any of them is still pending this one is spooled behind them
 * without being tried.  A report the API gives no final answer
 * (kf_report_final) is spooled too.  Returns the final HTTP status, or -1
 * when the report is in the spool (name_out, if given, gets its file name).
 * Writing the spool is retried every second while it fails, as the disk is
 * the last place a report can live, until give_up(ctx) says stop (NULL:
 * never); the report is then dropped, -1 returned and name_out left "". */
long kf_spool_deliver(kf_spool *s, kf_report *r, const char *path, const char *body, char *name_out,
                      size_t name_len, bool (*give_up)(void *ctx), void *ctx);

/* Whether the report `name` is still waiting; how many are waiting. */
bool kf_spool_has(const kf_spool *s, const char *name);
int kf_spool_count(const kf_spool *s);

#endif
