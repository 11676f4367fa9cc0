/* kf_db — a job's moves in PostgreSQL, built from the transition table
 * (see kf_db.h). */
#include "kf_db.h"

#include "kf_buf.h"
#include "kf_library.h"
#include "kf_num.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The one place a job's event is written; every statement below uses it. */
#define KF_DB_EVENT_INSERT "INSERT INTO job_events (job_id, attempt, type, from_state, to_state, detail, created_at) "

/* The CREATE row of the table, for a batch of jobs (kf_db.h).  Every
 * column comes from the API (created_at included), so nothing is read
 * back but the outbox ids.  The parameter list and the column names are
 * spelled from KF_DB_CREATE_COLS, the one place that numbers them. */
#define KF_DB_UNNEST_ARG(n, NAME, col, type, oid) ", $" #n "::" type "[]"
#define KF_DB_UNNEST_COL(n, NAME, col, type, oid) ", " #col
#define KF_DB_CREATE_HEAD                                                                                      \
    "WITH input AS (SELECT * FROM unnest($1::uuid[]" KF_DB_CREATE_COLS(KF_DB_UNNEST_ARG) ") "                 \
    "  AS t(id" KF_DB_CREATE_COLS(KF_DB_UNNEST_COL) ")), "                                                     \
    "j AS (INSERT INTO jobs (id, kind, target, backend, priority, spec, budget, goal, labels, max_attempts, "   \
    "  owner_token_id, idempotency_key, created_at, updated_at, batch_id, batch_entry) "                         \
    "  SELECT id, kind, target, backend, priority, spec, budget, goal, labels, max_attempts, owner, ikey, ts, " \
    "  ts, batch, bentry FROM input), "                                                                                       \
    "e AS (" KF_DB_EVENT_INSERT "SELECT id, 0, 'created', NULL, 'queued', '{}'::jsonb, ts FROM input), "        \
    "d AS (DELETE FROM outbox WHERE id = ANY($17::bigint[])) "

/* Each column's number is its parameter's: $n is KF_DB_COL_NAME + 1. */
#define KF_DB_CHECK_COL(n, NAME, col, type, oid) \
    _Static_assert(KF_DB_COL_##NAME + 1 == (n), "KF_DB_CREATE_COLS numbers its columns in order");
KF_DB_CHECK_COL(1, ID, id, "uuid", KF_PG_UUID)
KF_DB_CREATE_COLS(KF_DB_CHECK_COL)
_Static_assert(KF_DB_COL_DELIVERED + 1 == 17, "the delivered outbox ids are $17");

#define KF_DB_COL_TYPE(n, NAME, col, type, oid) [KF_DB_COL_##NAME] = (oid),
const uint32_t kf_db_create_batch_types[KF_DB_COL__COUNT] = {
    [KF_DB_COL_ID] = KF_PG_UUID,
    KF_DB_CREATE_COLS(KF_DB_COL_TYPE)
    [KF_DB_COL_DELIVERED] = KF_PG_INT8,
};
#define KF_DB_CREATE_TAIL "INSERT INTO outbox (job_id) SELECT id FROM input RETURNING job_id::text, id"

const char kf_db_sql_create_batch[] = KF_DB_CREATE_HEAD KF_DB_CREATE_TAIL;
const char kf_db_sql_create_batch_idem[] =
    KF_DB_CREATE_HEAD
    ", i AS (UPDATE idempotency_keys k SET state = 'done', status = 202, response = input.doc, "
    "  location = '/v1/jobs/' || input.id FROM input "
    "  WHERE input.ikey IS NOT NULL AND k.owner_token_id = input.owner AND k.key = input.ikey) "
    KF_DB_CREATE_TAIL;

_Static_assert(KF_MOVE__COUNT <= 32, "kf_db_prepared holds a bit per move");

/* Parameters of a move's statement, in this order; all are sent as text
 * and cast where used, so a move's statement may leave some unused. */
enum { P_ID, P_FROM, P_TYPE, P_TO, P_ATTEMPT, P_DETAIL, P_ERROR, P_RESULT, P_WORKER, P_LEASE, P_EXTRA, P_PROV, P__N };

/* The statement of move d: lock the row if the move may start from its
 * state, update it, write the event and the outbox row; then report the
 * row as it was before (cur) beside what moved (u), so a refusal can say
 * why. */
static void kf_db_build(const kf_life_def *d, kf_buf *b)
{
    unsigned f = d->flags;

    kf_buf_adds(b, "WITH old AS (SELECT id, state FROM jobs WHERE id = $1::uuid AND state = ANY($2::text[])");
    if (f & KF_LIFE_FENCED)
        kf_buf_adds(b, " AND attempt <= $5::int");
    if (f & KF_LIFE_IF_CANCEL_ASK)
        kf_buf_adds(b, " AND cancel_requested");
    if (f & KF_LIFE_IF_NO_ENQUEUE)
        kf_buf_adds(b, " AND NOT (state = 'queued' AND EXISTS (SELECT 1 FROM outbox o "
                       "WHERE o.job_id = jobs.id AND o.action = 'enqueue'))");
    kf_buf_adds(b, " FOR UPDATE), u AS (UPDATE jobs j SET ");
    kf_buf_adds(b, (f & KF_LIFE_KEEP) ? "state = j.state" : "state = $4");
    kf_buf_adds(b, ", updated_at = now()");
    if (f & KF_LIFE_W_ATTEMPT)
        kf_buf_adds(b, ", attempt = greatest(j.attempt, $5::int)");
    if (f & KF_LIFE_W_ERROR)
        kf_buf_adds(b, ", last_error = $7");
    if (f & KF_LIFE_W_RESULT)
        kf_buf_adds(b, ", result = $8::jsonb");
    if (f & KF_LIFE_W_PROVENANCE)
        kf_buf_adds(b, ", provenance = coalesce($12::jsonb, j.provenance)");
    if (f & KF_LIFE_W_LEASE)
        kf_buf_adds(b, ", worker_id = $9, lease_token_hash = $10::bytea, started_at = coalesce(j.started_at, now())");
    if (f & KF_LIFE_W_REVIVE)
        kf_buf_adds(b, ", max_attempts = j.attempt + $11::int, cancel_requested = false, finished_at = NULL");
    if (f & KF_LIFE_W_CANCEL_ASK)
        kf_buf_adds(b, ", cancel_requested = true");
    if (f & KF_LIFE_W_BEST)
        kf_buf_adds(b, ", best_iteration = coalesce((SELECT i.seq FROM iterations i WHERE i.job_id = $1::uuid "
                       "AND i.correct AND i.latency_ns IS NOT NULL ORDER BY i.latency_ns, i.attempt DESC, i.seq "
                       "LIMIT 1), j.best_iteration)");
    if (!(f & KF_LIFE_KEEP) && kf_state_terminal(d->to))
        kf_buf_adds(b, ", finished_at = now()");
    kf_buf_adds(b, " FROM old WHERE j.id = old.id RETURNING j.id, old.state AS from_state, j.state, j.attempt), "
                   "e AS (" KF_DB_EVENT_INSERT "SELECT id, ");
    kf_buf_adds(b, (f & (KF_LIFE_W_ATTEMPT | KF_LIFE_EV_ATTEMPT)) ? "$5::int" : "attempt");
    /* An iteration's event carries the job's best latency so far (the
     * iteration row is written before the move, in the same transaction). */
    kf_buf_adds(b, (f & KF_LIFE_W_BEST) ? ", $3, from_state, state, $6::jsonb || jsonb_build_object('best_so_far_ns', "
                                          "(SELECT min(i.latency_ns) FROM iterations i WHERE i.job_id = $1::uuid "
                                          "AND i.correct)), now() FROM u)"
                                        : ", $3, from_state, state, $6::jsonb, now() FROM u)");
    if (f & KF_LIFE_OUT_DROP)
        kf_buf_adds(b, ", d AS (DELETE FROM outbox WHERE job_id = $1::uuid AND action = 'enqueue' "
                       "AND EXISTS (SELECT 1 FROM u))");
    if (f & (KF_LIFE_OUT_ENQUEUE | KF_LIFE_OUT_CANCEL))
        kf_buf_addf(b, ", o AS (INSERT INTO outbox (job_id, action) SELECT id, '%s' FROM u RETURNING id)",
                    (f & KF_LIFE_OUT_CANCEL) ? "cancel" : "enqueue");
    kf_buf_addf(b, " SELECT u.from_state, u.state, u.attempt, %s, cur.state, cur.attempt, cur.cancel_requested "
                   "FROM (SELECT 1) one LEFT JOIN u ON true LEFT JOIN jobs cur ON cur.id = $1::uuid",
                (f & (KF_LIFE_OUT_ENQUEUE | KF_LIFE_OUT_CANCEL)) ? "(SELECT id FROM o)" : "NULL::bigint");
}

/* A caller's bug, caught before PostgreSQL is asked. */
static kf_code kf_db_misuse(PGconn *c, const kf_db_move *m, const kf_life_def *d, kf_states from, kf_err *err)
{
    char want[96], have[96];

    if (!m->job_id)
        return kf_err_set(err, KF_INVALID, "move %s without a job id; this is a bug in the caller", d->name);
    if (d->from & KF_ST(NONE))
        return kf_err_set(err, KF_INVALID,
                          "move %s creates jobs and is written by kf_db_sql_create_batch, not kf_db_apply", d->name);
    if (from & ~d->from) {
        kf_states_pg_array(d->from, want, sizeof(want));
        kf_states_pg_array(from, have, sizeof(have));
        return kf_err_set(err, KF_INVALID,
                          "move %s (%s) starts only from %s, not from %s: the transition table (common/kf_life.h) "
                          "does not allow it",
                          d->name, d->event, want, have);
    }
    if ((d->flags & KF_LIFE_W_LEASE) && (!m->worker_id || !m->lease_hash))
        return kf_err_set(err, KF_INVALID, "move %s needs the worker id and the lease token's hash", d->name);
    if ((d->flags & KF_LIFE_W_LIBRARY) && !m->store)
        return kf_err_set(err, KF_INVALID, "move %s needs the artifact store for the kernel library", d->name);
    if ((d->flags & KF_LIFE_W_LIBRARY) && PQtransactionStatus(c) != PQTRANS_INTRANS)
        return kf_err_set(err, KF_INVALID,
                          "move %s offers the job to the kernel library in the same transaction: BEGIN one first",
                          d->name);
    if ((d->flags & KF_LIFE_W_REVIVE) && m->extra_attempts < 1)
        return kf_err_set(err, KF_INVALID, "move %s needs extra_attempts >= 1, got %d", d->name, m->extra_attempts);
    return KF_OK;
}

kf_code kf_db_num(const PGresult *r, int row, int col, long lo, long hi, long *out, kf_err *err)
{
    kf_err e = KF_ERR_INIT;
    const char *name = PQfname(r, col);

    if (PQgetisnull(r, row, col))
        return kf_err_set(err, KF_DB,
                          "column %s of the result is NULL where a number belongs: the database schema is not the "
                          "one this build expects; run kforge-api migrate",
                          name ? name : "?");
    if (kf_num_long(PQgetvalue(r, row, col), lo, hi, out, &e) != KF_OK)
        return kf_err_set(err, KF_DB,
                          "column %s of the result: %s; the database schema is not the one this build expects; "
                          "run kforge-api migrate",
                          name ? name : "?", e.msg);
    return KF_OK;
}

/* Why a move that wrote nothing was refused, from the row as it was. */
static kf_code kf_db_refused(const kf_db_move *m, const kf_life_def *d, const PGresult *r, kf_states from,
                             kf_err *err)
{
    kf_state cur;
    long att = 0;

    if (PQgetisnull(r, 0, 4))
        return kf_err_set(err, KF_NOT_FOUND, "no job with id %s", m->job_id);
    cur = kf_state_parse(PQgetvalue(r, 0, 4));
    if (kf_db_num(r, 0, 5, 0, INT_MAX, &att, err) != KF_OK)
        return KF_DB;
    if (!(from & (1u << cur))) {
        char want[96];
        kf_states_pg_array(from, want, sizeof(want));
        return kf_err_set(err, KF_CONFLICT, "job %s is %s; %s (%s) moves a job only from %s", m->job_id,
                          kf_state_name(cur), d->event, d->name, want);
    }
    if ((d->flags & KF_LIFE_FENCED) && att > m->attempt)
        return kf_err_set(err, KF_STALE, "job %s is on attempt %ld; a report from attempt %d cannot move it (%s)",
                          m->job_id, att, m->attempt, d->name);
    if ((d->flags & KF_LIFE_IF_CANCEL_ASK) && strcmp(PQgetvalue(r, 0, 6), "t") != 0)
        return kf_err_set(err, KF_CONFLICT, "job %s has no cancel asked for; %s does not apply", m->job_id, d->name);
    if ((d->flags & KF_LIFE_IF_NO_ENQUEUE) && cur == KF_STATE_QUEUED)
        return kf_err_set(err, KF_CONFLICT,
                          "job %s is queued with its enqueue still in the outbox (a later life); %s does not apply",
                          m->job_id, d->name);
    return kf_err_set(err, KF_CONFLICT, "job %s changed while %s was applied (it was %s); read it again", m->job_id,
                      d->name, kf_state_name(cur));
}

/* Run move d's statement: prepared (once per connection, then by name)
 * when the caller keeps a prep set, sent whole otherwise. */
static PGresult *kf_db_run(PGconn *c, kf_db_prepared *prep, const kf_life_def *d, kf_life_move mv,
                           const char *const *p, const Oid *types)
{
    kf_buf sql = KF_BUF_INIT;
    char name[64];
    PGresult *r;

    snprintf(name, sizeof(name), "kf_move_%s", d->name);
    if (prep && (*prep & (1u << mv)))
        return PQexecPrepared(c, name, P__N, p, NULL, NULL, 0);
    kf_db_build(d, &sql);
    if (!prep) {
        r = PQexecParams(c, sql.data, P__N, types, p, NULL, NULL, 0);
        kf_buf_release(&sql);
        return r;
    }
    r = PQprepare(c, name, sql.data, P__N, types);
    kf_buf_release(&sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return r;
    PQclear(r);
    *prep |= 1u << mv;
    return PQexecPrepared(c, name, P__N, p, NULL, NULL, 0);
}

kf_code kf_db_apply(PGconn *c, kf_db_prepared *prep, const kf_db_move *m, kf_db_moved *out, kf_err *err)
{
    const kf_life_def *d = kf_life_get(m->move);
    kf_states from;
    char from_s[96], att[16], extra[16];
    const char *p[P__N];
    Oid types[P__N];
    PGresult *r;
    kf_code rc;

    if (!d)
        return kf_err_set(err, KF_INVALID, "no such job move (%d); this is a bug in the caller", (int)m->move);
    from = m->from ? m->from : d->from;
    if ((rc = kf_db_misuse(c, m, d, from, err)) != KF_OK)
        return rc;
    kf_states_pg_array(from, from_s, sizeof(from_s));
    snprintf(att, sizeof(att), "%d", m->attempt);
    snprintf(extra, sizeof(extra), "%d", m->extra_attempts);
    p[P_ID] = m->job_id;
    p[P_FROM] = from_s;
    p[P_TYPE] = d->event;
    p[P_TO] = kf_state_name(d->to);
    p[P_ATTEMPT] = att;
    p[P_DETAIL] = m->detail ? m->detail : "{}";
    p[P_ERROR] = m->error;
    p[P_RESULT] = m->result ? m->result : "{}";
    p[P_WORKER] = m->worker_id;
    p[P_LEASE] = m->lease_hash;
    p[P_EXTRA] = extra;
    p[P_PROV] = m->provenance;
    for (int i = 0; i < P__N; i++)
        types[i] = 25;   /* text: every parameter is cast where it is used */
    r = kf_db_run(c, prep, d, m->move, p, types);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
        int n = (int)strcspn(msg, "\n");
        rc = kf_pg_transient(c, r) ? KF_UNAVAILABLE : KF_DB;
        kf_err_set(err, rc, "%s of job %s: PostgreSQL %s (%.*s)", d->name, m->job_id,
                   rc == KF_UNAVAILABLE ? "is unavailable or the transaction must be retried" : "refused the statement",
                   n > 300 ? 300 : n, msg);
        PQclear(r);
        return rc;
    }
    if (out) {
        long row_att = 0;
        memset(out, 0, sizeof(*out));
        out->from = kf_state_parse(PQgetvalue(r, 0, 4));
        out->to = out->from;
        /* No row (no such job) leaves the attempt 0; kf_db_refused says why. */
        if (!PQgetisnull(r, 0, 5) && kf_db_num(r, 0, 5, 0, INT_MAX, &row_att, err) != KF_OK) {
            PQclear(r);
            return KF_DB;
        }
        out->attempt = (int)row_att;
        out->cancel_requested = strcmp(PQgetvalue(r, 0, 6), "t") == 0;
    }
    if (PQgetisnull(r, 0, 0)) {
        rc = kf_db_refused(m, d, r, from, err);
        PQclear(r);
        return rc;
    }
    if (out) {
        long row_att = 0, outbox = 0;
        out->from = kf_state_parse(PQgetvalue(r, 0, 0));
        out->to = kf_state_parse(PQgetvalue(r, 0, 1));
        if (kf_db_num(r, 0, 2, 0, INT_MAX, &row_att, err) != KF_OK ||
            (!PQgetisnull(r, 0, 3) && kf_db_num(r, 0, 3, 1, LONG_MAX, &outbox, err) != KF_OK)) {
            PQclear(r);
            return KF_DB;
        }
        out->attempt = (int)row_att;
        out->outbox_id = outbox;
    }
    PQclear(r);
    if (d->flags & KF_LIFE_W_LIBRARY)
        return kf_library_record(c, m->store, m->job_id, NULL, err);
    return KF_OK;
}

kf_code kf_db_lease_takeover(PGconn *c, const char *job_id, int attempt, const char *worker_id,
                             const char *lease_hash, kf_err *err)
{
    char att[16];
    const char *p[4] = { job_id, att, worker_id, lease_hash };
    PGresult *r;
    kf_code rc = KF_OK;

    snprintf(att, sizeof(att), "%d", attempt);
    r = PQexecParams(c,
                     "UPDATE jobs SET worker_id = $3, lease_token_hash = $4::bytea, updated_at = now() "
                     "WHERE id = $1::uuid AND state = 'running' AND attempt = $2::int",
                     4, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
        int n = (int)strcspn(msg, "\n");
        rc = kf_pg_transient(c, r) ? KF_UNAVAILABLE : KF_DB;
        kf_err_set(err, rc, "lease takeover of job %s: PostgreSQL %s (%.*s)", job_id,
                   rc == KF_UNAVAILABLE ? "is unavailable or the transaction must be retried" : "refused the statement",
                   n > 300 ? 300 : n, msg);
    } else if (strcmp(PQcmdTuples(r), "1") != 0) {
        rc = kf_err_set(err, KF_CONFLICT, "job %s is not running on attempt %d: its lease cannot be taken over", job_id,
                        attempt);
    }
    PQclear(r);
    return rc;
}
