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
 * too.  A move with KF_LIFE_W_LIBRARY (SUCCEED) also offers the job's best
 * kernel to the kernel library (db/kf_library.h) in the same transaction,
 * which the caller must have BEGUN (KF_INVALID otherwise); an offer that
 * cannot be written is rolled back alone and logged, never the move.
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

#include "kf_artifact.h"
#include "kf_error.h"
#include "kf_life.h"
#include "kf_pg.h"

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
    const char  *provenance;      /* KF_LIFE_W_PROVENANCE: a JSON object; NULL keeps the row's */
    kf_artifact_store *store;     /* KF_LIFE_W_LIBRARY: where the library keeps kernel sources (borrowed) */
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

/* A whole-number column of a result row, read strictly (kf_num_long):
 * KF_DB when it is NULL or not a number in [lo, hi], which means the
 * database's schema is not the one this build expects. */
kf_code kf_db_num(const PGresult *r, int row, int col, long lo, long hi, long *out, kf_err *err);

/*
 * The set form of the CREATE move, for the API's batch writer (api_batch.c):
 * one parameter per column, each an array with an element per job ($1 the
 * ids, uuid[]), then the outbox ids delivered earlier, to delete
 * (bigint[]).  Writes each job, its 'created' event and its outbox
 * enqueue row; returns (job_id, outbox id) per job.  The _idem form also
 * stores the answers (doc) of jobs that carry an Idempotency-Key.  BATCH
 * and BATCH_ENTRY are NULL for POST /v1/jobs; POST /v1/batches sets them
 * (api/api_batches.c), in the transaction that wrote the batch's row.
 *
 * KF_DB_CREATE_COLS lists the columns after the id, numbered as their
 * parameters ($n), with the name the statement gives them, their SQL
 * element type and its OID (db/kf_pg.h); a caller fills parameter
 * KF_DB_COL_<NAME> with an array of kf_db_create_batch_types[it].
 */
#define KF_DB_CREATE_COLS(X)                                    \
    X(2, KIND, kind, "text", KF_PG_TEXT)                        \
    X(3, TARGET, target, "text", KF_PG_TEXT)                    \
    X(4, BACKEND, backend, "text", KF_PG_TEXT)                  \
    X(5, PRIORITY, priority, "int", KF_PG_INT4)                 \
    X(6, SPEC, spec, "jsonb", KF_PG_JSONB)                      \
    X(7, BUDGET, budget, "jsonb", KF_PG_JSONB)                  \
    X(8, GOAL, goal, "jsonb", KF_PG_JSONB)                      \
    X(9, LABELS, labels, "jsonb", KF_PG_JSONB)                  \
    X(10, MAX_ATTEMPTS, max_attempts, "int", KF_PG_INT4)        \
    X(11, OWNER, owner, "bigint", KF_PG_INT8)                   \
    X(12, IDEM_KEY, ikey, "text", KF_PG_TEXT)                   \
    X(13, CREATED_AT, ts, "timestamptz", KF_PG_TIMESTAMPTZ)     \
    X(14, DOC, doc, "text", KF_PG_TEXT)                         \
    X(15, BATCH, batch, "uuid", KF_PG_UUID)                     \
    X(16, BATCH_ENTRY, bentry, "jsonb", KF_PG_JSONB)

#define KF_DB_COL_ENUM(n, NAME, col, type, oid) KF_DB_COL_##NAME,
typedef enum kf_db_create_col {
    KF_DB_COL_ID,
    KF_DB_CREATE_COLS(KF_DB_COL_ENUM)
    KF_DB_COL_DELIVERED,        /* bigint[]: delivered outbox ids to delete */
    KF_DB_COL__COUNT
} kf_db_create_col;
#undef KF_DB_COL_ENUM
#define KF_DB_CREATE_BATCH_PARAMS KF_DB_COL__COUNT
/* Element type (KF_PG_*) of each parameter. */
extern const uint32_t kf_db_create_batch_types[KF_DB_COL__COUNT];
extern const char kf_db_sql_create_batch[];
extern const char kf_db_sql_create_batch_idem[];

#endif
