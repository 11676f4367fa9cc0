/*
 * kf_pg — the PostgreSQL layer kforge-api and kforge-scheduler share:
 * connecting, running a statement (plain or prepared once per
 * connection), telling a failure worth retrying from one that is not,
 * transactions retried on serialization failures and deadlocks, and
 * PostgreSQL's binary array format for parameters that carry many rows.
 *
 * Ownership: nothing here keeps a connection.  The caller owns the
 * PGconn, each returned PGresult (PQclear) and each kf_pg_array
 * (kf_pg_array_release).  A kf_pg_prepared is the caller's per-connection
 * record of which statements are prepared on it; it must be cleared (set
 * to 0) whenever that connection is re-opened.
 *
 * Failure behaviour: every call that talks to the server returns NULL or
 * a kf_code and fills a kf_err whose message names what was being done
 * and the server's own first line, cut on a character boundary.  Codes:
 * KF_UNAVAILABLE when retrying later can succeed (the connection is gone,
 * the server is shutting down or full, or the transaction lost a
 * serialization or deadlock check: kf_pg_transient), KF_DB for every
 * other refusal (a bug or a schema this build does not expect).  Nothing
 * aborts the process.
 */
#ifndef KF_PG_H
#define KF_PG_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kf_buf.h"
#include "kf_error.h"

/* A statement prepared once per connection under `name`.  id (0..63) is
 * its bit in the connection's kf_pg_prepared and must be unique among the
 * statements a process prepares on one connection. */
typedef struct kf_pg_stmt {
    int         id;
    const char *name;
    const char *sql;
    int         nparams;
} kf_pg_stmt;

typedef uint64_t kf_pg_prepared;

/* A connection to dsn (a conninfo string or URI) named application_name
 * app, with TimeZone UTC and a 3 s connect timeout.  NULL with err =
 * KF_UNAVAILABLE saying so and what to check when it cannot be made. */
PGconn *kf_pg_connect(const char *dsn, const char *app, kf_err *err);

/* Whether a failed statement is worth retrying: the connection is lost,
 * the server is shutting down, starting or out of connections, the
 * transaction lost a serialization check or a deadlock, or a lock was not
 * available.  res may be NULL (libpq gave no result). */
bool kf_pg_transient(PGconn *c, const PGresult *res);
/* Whether the failure ended only the transaction (serialization failure
 * 40001 or deadlock 40P01): running it again from BEGIN can succeed. */
bool kf_pg_retry_txn(const PGresult *res);

/* Run sql with n text parameters (lengths and formats as libpq's
 * paramLengths/paramFormats; NULL for all text).  The result on success
 * (PGRES_COMMAND_OK or PGRES_TUPLES_OK); NULL with err set otherwise,
 * `what` naming the step in the message ("relay: lock outbox rows"). */
PGresult *kf_pg_exec(PGconn *c, const char *what, const char *sql, int n, const char *const *params,
                     const int *lengths, const int *formats, kf_err *err);
/* The same with st, prepared on c first if *prep lacks its bit (prep
 * NULL: not prepared, sent as a plain statement). */
PGresult *kf_pg_exec_stmt(PGconn *c, kf_pg_prepared *prep, const kf_pg_stmt *st, const char *const *params,
                          const int *lengths, const int *formats, kf_err *err);
/* kf_pg_exec for statements whose result is not needed. */
kf_code kf_pg_run(PGconn *c, const char *what, const char *sql, int n, const char *const *params, kf_err *err);

/* ROLLBACK when c is inside a transaction (failed or not); quiet. */
void kf_pg_rollback(PGconn *c);

/* BEGIN; body(c, ud, err); COMMIT — run again from BEGIN, up to `tries`
 * times in all, when a statement of it (or the COMMIT) failed with a
 * serialization failure or a deadlock (kf_pg_retry_txn), after a short
 * random pause that grows with each try.  body returns KF_OK to commit;
 * anything else rolls back and is returned as it is.  body must leave a
 * failed statement's PGresult unreachable (cleared) and report through
 * err; it may run more than once, so it must not have effects outside the
 * transaction it would repeat. */
typedef kf_code (*kf_pg_txn_body)(PGconn *c, void *ud, kf_err *err);
kf_code kf_pg_txn(PGconn *c, int tries, kf_pg_txn_body body, void *ud, kf_err *err);

/* ---- PostgreSQL's binary array format (array_recv) ----------------------- */

/* Element types (pg_type.dat OIDs, fixed since PostgreSQL 9.4). */
enum {
    KF_PG_INT8 = 20,
    KF_PG_INT4 = 23,
    KF_PG_TEXT = 25,
    KF_PG_TIMESTAMPTZ = 1184,
    KF_PG_UUID = 2950,
    KF_PG_JSONB = 3802,
};

/* A one-dimensional array of one element type, built element by element
 * and sent as a binary parameter (format 1): data/len after
 * kf_pg_array_done.  Every element is appended whole or not at all. */
typedef struct kf_pg_array {
    kf_buf   buf;       /* header (filled in by kf_pg_array_done), then the elements */
    uint32_t oid;       /* the element type */
    uint32_t n;         /* elements appended */
    bool     has_null;
    bool     bad;       /* an element did not fit its type (kf_pg_array_uuid) */
} kf_pg_array;

void kf_pg_array_init(kf_pg_array *a, uint32_t oid, size_t reserve_elems);
void kf_pg_array_release(kf_pg_array *a);
void kf_pg_array_null(kf_pg_array *a);
/* NULL s appends a NULL element. */
void kf_pg_array_text(kf_pg_array *a, const char *s);
/* json: a JSON text (jsonb's binary form is a version byte and the text). */
void kf_pg_array_jsonb(kf_pg_array *a, const char *json);
void kf_pg_array_int4(kf_pg_array *a, int32_t v);
void kf_pg_array_int8(kf_pg_array *a, int64_t v);
/* Microseconds since 1970-01-01 UTC. */
void kf_pg_array_timestamptz(kf_pg_array *a, int64_t unix_us);
/* A UUID in its 36-character text form (hyphens where RFC 9562 puts
 * them, hex digits of either case); false (and the array marked bad)
 * when id is not one. */
bool kf_pg_array_uuid(kf_pg_array *a, const char *id);
/* Fill in the header; afterwards a->buf.data and a->buf.len are the
 * parameter's bytes and length.  False when an element was bad. */
bool kf_pg_array_done(kf_pg_array *a);

#endif
