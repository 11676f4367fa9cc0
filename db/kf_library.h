/*
 * kf_library — the kernel library registry's writer (docs/library.md;
 * tables of migration 0013): a succeeded job offers its best kernel to the
 * entry of its key, in the transaction of its success.
 *
 * kf_library_record() is called by kf_db_apply() for a move whose row of
 * the transition table carries KF_LIFE_W_LIBRARY (SUCCEED), right after
 * the move's statement, on the same connection and inside the same
 * transaction, so a job is `succeeded` with its library offer made or not
 * at all.  It reads the job's best iteration (the fastest correct one, as
 * jobs.best_iteration is chosen), takes the kernel's source from the
 * artifact the worker kept for that iteration (kernel.py, the source with
 * the params as the entry's defaults) or, when there is none, rebuilds it
 * from the iterations' source and source_diff (common/kf_diff) and stores
 * it in the artifact store, then lets kforge_library_offer() (the
 * migration's SQL function, the one place that decides) create, replace or
 * keep the entry and write its history.
 *
 * Jobs that offer nothing (KF_OK, *outcome "none"): kinds other than
 * generate and optimize, jobs without a correct timed iteration, and jobs
 * whose source cannot be rebuilt (logged).
 *
 * The offer runs under a SAVEPOINT: a failure that retrying cannot cure
 * (KF_DB, KF_IO of a folder store) rolls back only the offer, is logged,
 * and the job still succeeds: a library that cannot be written never
 * turns a good result into a failed one.  KF_UNAVAILABLE (PostgreSQL away,
 * serialization failure, deadlock) is returned, and the caller's whole
 * transaction must be retried.
 *
 * Ownership: nothing is kept after the call; the caller owns the
 * connection, the store and the transaction.  Not thread-safe beyond
 * libpq's rule (one connection, one thread).
 */
#ifndef KF_LIBRARY_H
#define KF_LIBRARY_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "kf_artifact.h"
#include "kf_error.h"

/* Offer job_id's best kernel to its entry.  c must be inside a
 * transaction.  *outcome (may be NULL) gets a static string: "created",
 * "faster", "provenance", "kept" or "none".  KF_OK or KF_UNAVAILABLE (see
 * above); KF_INVALID for a connection outside a transaction (a bug). */
kf_code kf_library_record(PGconn *c, kf_artifact_store *store, const char *job_id, const char **outcome,
                          kf_err *err);

/* The characters of an entry id: 1..200 of [A-Za-z0-9_.-], not starting
 * with '.' or '-' (a file name as it is). */
bool kf_library_id_valid(const char *id);

#endif
