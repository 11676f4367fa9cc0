/*
 * kf_db — the one PostgreSQL adapter that moves a job (libkfdb.a, linked by
 * kforge-api and kforge-scheduler).
 *
 * kf_db_apply() applies one row of the transition table (common/kf_life.h)
 * to one job as a single statement: it locks the row if its state is one
 * the move accepts (and passes the move's fencing and guards), updates it,
 * inserts the job_events row and the outbox row the move pairs with.  One
 * statement is one transaction on its own, or part of the caller's when
 * the caller has BEGUN one; either the row, the event and the outbox row
 * are all written or none is.  A move the table does not allow is refused,
 * before PostgreSQL is asked when the caller's from-states are outside the
 * table's, by PostgreSQL's row check otherwise.  The job creation of the
 * API's batch writer is the set form of the table's CREATE row:
 * kf_db_sql_create_batch below.  No other code writes job_events, and
 * the one job-row write that is not a move (a lease's takeover) is here
 * too.
 *
 * Ownership: the caller owns the connection and every string in
 * kf_db_move; kf_db_apply() keeps nothing after it returns.  Not
 * thread-safe beyond libpq's rule: one connection, one thread at a time.
 *
 * Failure behaviour (the return value, with *err filled):
 *   KF_OK          moved; *out says from what and to what
 *   KF_INVALID     a bug in the caller: unknown move, from-states the table
 *                  does not allow, a missing required field; nothing sent
 *   KF_NOT_FOUND   no job with that id
 *   KF_CONFLICT    the job's state is not one the move accepts, or a guard
 *                  of the move failed (no cancel asked, an enqueue pending)
 *   KF_STALE       a fenced move's attempt is older than the job's
 *   KF_UNAVAILABLE PostgreSQL unreachable, or a serialization failure or
 *                  deadlock: retry the transaction
 *   KF_DB          any other statement failure (the caller's transaction
 *                  is then aborted)
 * On every failure nothing of the move is written.
 */
#ifndef KF_DB_H
#define KF_DB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"
#include "kf_life.h"

/* One move of one job.  Fields a move's flags do not use are ignored. */
typedef struct kf_db_move {
    kf_life_move move;
    const char  *job_id;          /* UUID text */
    kf_states    from;            /* narrows the table's from-states; 0: the table's */
    int          attempt;         /* KF_LIFE_FENCED / KF_LIFE_W_ATTEMPT: the attempt the move is about */
    const char  *detail;          /* the event's detail, a JSON object; NULL: {} */
    const char  *error;           /* KF_LIFE_W_ERROR: last_error; NULL clears it */
    const char  *result;          /* KF_LIFE_W_RESULT: a JSON document; NULL: {} */
    const char  *worker_id;       /* KF_LIFE_W_LEASE */
    const char  *lease_hash;      /* KF_LIFE_W_LEASE: the lease token's hash, bytea text (\x...) */
    int          extra_attempts;  /* KF_LIFE_W_REVIVE: attempts added to the ones made, >= 1 */
} kf_db_move;

/* What a move did, or (when refused) what the job was. */
typedef struct kf_db_moved {
    kf_state  from;               /* the state before; KF_STATE_NONE when there is no job */
    kf_state  to;                 /* the state after (== from when refused) */
    int       attempt;            /* the job's attempt after */
    bool      cancel_requested;   /* before the move */
    long long outbox_id;          /* the outbox row written; 0 when none */
} kf_db_moved;

/* Which moves' statements are prepared on one connection, a bit per
 * kf_life_move.  The connection's owner keeps it beside the connection and
 * zeroes it whenever the connection is opened again (PQreset included):
 * PostgreSQL forgets prepared statements with the session. */
typedef uint32_t kf_db_prepared;

/* Apply move m; see the header comment for the codes.  out may be NULL.
 * With prep, the move's statement is prepared on c the first time
 * (named "kf_move_<NAME>") and executed prepared after that, which saves
 * PostgreSQL most of its cost (planning); with NULL it is sent whole. */
kf_code kf_db_apply(PGconn *c, kf_db_prepared *prep, const kf_db_move *m, kf_db_moved *out, kf_err *err);

/* Not a move: the queue granted a running job's current attempt again (a
 * re-delivery after Redis lost a write) and the new holder takes over the
 * record.  worker_id and lease_token_hash change; the state, the attempt
 * and the events do not.  KF_CONFLICT when the job is not running on that
 * attempt; KF_UNAVAILABLE and KF_DB as for kf_db_apply. */
kf_code kf_db_lease_takeover(PGconn *c, const char *job_id, int attempt, const char *worker_id,
                             const char *lease_hash, kf_err *err);

/* Whether a failed statement is worth retrying (connection lost, server
 * shutting down or overloaded, serialization failure, deadlock, lock
 * not available).  res may be NULL (libpq gave no result). */
bool kf_db_transient(PGconn *c, const PGresult *res);

/* A whole-number column of a result row, read strictly (kf_num_long):
 * KF_DB when it is NULL or not a number in [lo, hi], which means the
 * database's schema is not the one this build expects. */
kf_code kf_db_num(const PGresult *r, int row, int col, long lo, long hi, long *out, kf_err *err);

/*
 * The set form of the CREATE move, for the API's batch writer (api_batch.c):
 * $1..$14 one array per column (id uuid[], kind, target, backend text[],
 * priority int[], spec, budget, goal, labels jsonb[], max_attempts int[],
 * owner bigint[], idempotency key text[], created_at timestamptz[], the
 * job's document text[]), $15 delivered outbox ids bigint[] to delete.
 * Writes each job, its 'created' event and its outbox enqueue row; returns
 * (job_id, outbox id) per job.  The _idem form also stores the answers of
 * jobs that carry an Idempotency-Key.
 */
#define KF_DB_CREATE_BATCH_PARAMS 15
extern const char kf_db_sql_create_batch[];
extern const char kf_db_sql_create_batch_idem[];

#endif
