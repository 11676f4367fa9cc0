/*
 * kw_ident — who this worker is (libkfworker.a): its token, its id and its
 * spool folder, settled once at start-up.
 *
 * kw_ident_token: the token from KFORGE_TOKEN_FILE (a private file:
 * kf_report_token_read), or, kept for existing deployments with a warning,
 * from KFORGE_TOKEN, which is then blanked and removed from the
 * environment so no child process inherits it.
 *
 * kw_ident_whoami: the worker id is the name of its token, asked of the API
 * (GET /v1/internal/whoami); a set KFORGE_WORKER_ID must be that name.  With
 * the API unreachable, a set KFORGE_WORKER_ID is used as it is (the API
 * refuses reports if it is wrong); without one, the worker waits for the
 * API with backoff, until SIGTERM.
 *
 * kw_ident_spool: the spool is KFORGE_SPOOL_DIR/<id>: a report is resent
 * only with the token of the worker that wrote it.
 *
 * Ownership: w->token (heap) and w->id are set in the kw_worker; the spool
 * returned is the caller's (kf_spool_free).
 * Failure behaviour: KF_CONFIG with what to do (make a token, fix the
 * file's mode, set KFORGE_WORKER_ID); the caller refuses to start.
 */
#ifndef KW_IDENT_H
#define KW_IDENT_H

#include "kw_worker.h"

kf_code kw_ident_token(kw_worker *w, kf_err *err);
/* Needs w->rep. */
kf_code kw_ident_whoami(kw_worker *w, const char *configured, kf_err *err);
kf_spool *kw_ident_spool(const kw_worker *w, kf_err *err);

#endif
