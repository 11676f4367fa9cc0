/* ks_sched — the scheduler's duties (ks_sched.h). */
#include "ks_sched.h"

#include "kf_alloc.h"
#include "kf_db.h"
#include "kf_error.h"
#include "kf_job.h"
#include "kf_json.h"
#include "kf_life.h"
#include "kf_log.h"
#include "kf_pg.h"

#include <limits.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KS_BATCH          200     /* rows per Redis call or transaction */
#define KS_RECONCILE_MS   60000
/* After Redis lost data, a second reconcile this long after the first:
 * past the relay's 1 s horizon, so that every job the first pass had to
 * leave (an outbox row covered it, or a transaction held its row) is by
 * then either the relay's (its row older than a second) or uncovered. */
#define KS_SECOND_PASS_MS 3000
#define KS_MIGRATE_BATCH  1000    /* ids moved per script run (keeps each run short for Redis) */
#define KS_RETAIN_MS      10000
#define KS_ARTIFACT_MS    600000
#define KS_ARTIFACT_GRACE 3600    /* seconds an unreferenced content is kept (an upload may be in flight) */
#define KS_TXN_TRIES      3       /* runs of a transaction that lost a deadlock */
#define KS_STR_(x) #x
#define KS_STR(x) KS_STR_(x)

struct ks_sched {
    ks_config   cfg;
    kf_queue   *q;                    /* borrowed */
    PGconn     *pg;
    kf_db_prepared pg_moves;          /* moves prepared on pg; zeroed with it */
    char        token[33];
    bool        leader;
    long long   next_reconcile, next_retain, next_artifacts, next_migrate;
    char        redis_run_id[41];     /* "" until first seen */
    const char *pending_reconcile;    /* why a reconcile is owed, or NULL */
    bool        pending_loss;         /* ... and it is owed because Redis lost data */
    long long   second_pass_at;       /* when the second pass after a loss is due; 0: none owed */
    bool        pg_warned, redis_warned;
};

/* ---- PostgreSQL ---------------------------------------------------------- */

static void ks_pg_drop(ks_sched *s)
{
    if (s->pg) {
        PQfinish(s->pg);
        s->pg = NULL;
    }
    s->pg_moves = 0;
}

bool ks_pg_ok(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;

    if (s->pg && PQstatus(s->pg) == CONNECTION_OK)
        return true;
    ks_pg_drop(s);
    if (!(s->pg = kf_pg_connect(s->cfg.dsn, "kforge-scheduler", &err))) {
        if (!s->pg_warned)
            kf_log_warn("PostgreSQL unreachable; database steps wait (retrying each tick) err=\"%s\"", err.msg);
        s->pg_warned = true;
        return false;
    }
    if (s->pg_warned)
        kf_log_info("PostgreSQL is back");
    s->pg_warned = false;
    return true;
}

/* After a failed statement: log it once per failure, and drop a broken
 * connection (the next tick makes a new one). */
static void ks_pg_failed(ks_sched *s, const kf_err *err)
{
    kf_log_warn("SQL failed err=\"%s\"", err->msg);
    if (s->pg && PQstatus(s->pg) != CONNECTION_OK)
        ks_pg_drop(s);
}

/* Run sql; NULL (logged, a broken connection dropped) on failure. */
static PGresult *ks_sql(ks_sched *s, const char *what, const char *sql, int n, const char *const *params)
{
    kf_err err = KF_ERR_INIT;
    PGresult *r = kf_pg_exec(s->pg, what, sql, n, params, NULL, NULL, &err);

    if (!r)
        ks_pg_failed(s, &err);
    return r;
}

/* A transaction of body (kf_pg_txn: retried on serialization failures and
 * deadlocks); false, logged, on failure. */
static bool ks_txn(ks_sched *s, kf_pg_txn_body body, void *ud)
{
    kf_err err = KF_ERR_INIT;

    if (kf_pg_txn(s->pg, KS_TXN_TRIES, body, ud, &err) == KF_OK)
        return true;
    ks_pg_failed(s, &err);
    return false;
}

/* Apply a move of the transition table (db/kf_db.h) inside a transaction
 * the caller holds: KF_OK, or a refusal (the job moved on, or is gone:
 * KF_CONFLICT, KF_STALE, KF_NOT_FOUND with *out saying what the job is),
 * which the transaction survives and which is returned as KF_OK; a
 * PostgreSQL failure (KF_DB, KF_UNAVAILABLE) is returned in err, ending
 * the transaction.  The connection is never dropped here. */
static kf_code ks_move_tx(ks_sched *s, const kf_db_move *m, kf_db_moved *out, kf_err *err)
{
    kf_code rc = kf_db_apply(s->pg, &s->pg_moves, m, out, err);

    if (rc == KF_INVALID) {
        kf_log_error("job move not in the transition table (a bug) err=\"%s\"", err->msg);
        return KF_OK;   /* nothing was written; the transaction goes on */
    }
    return rc == KF_DB || rc == KF_UNAVAILABLE ? rc : KF_OK;
}

/* Apply a move on its own (no transaction open).  KF_OK: moved; a refusal
 * is KF_CONFLICT, KF_STALE or KF_NOT_FOUND with *out saying what the job
 * is; a PostgreSQL failure is logged and drops a broken connection, as
 * ks_sql does. */
static kf_code ks_move(ks_sched *s, const kf_db_move *m, kf_db_moved *out)
{
    kf_err err = KF_ERR_INIT;
    kf_code rc = kf_db_apply(s->pg, &s->pg_moves, m, out, &err);

    if (rc == KF_INVALID)
        kf_log_error("job move not in the transition table (a bug) err=\"%s\"", err.msg);
    else if (rc == KF_DB || rc == KF_UNAVAILABLE)
        ks_pg_failed(s, &err);
    return rc;
}

/* An event's detail {"error": error, "by": by} (by omitted when NULL);
 * the caller frees it. */
static char *ks_detail(const char *error, const char *by)
{
    cJSON *o = cJSON_CreateObject();
    char *text;

    cJSON_AddStringToObject(o, "error", error);
    if (by)
        cJSON_AddStringToObject(o, "by", by);
    text = kf_json_print(o);
    cJSON_Delete(o);
    return text;
}

/* ---- queue helpers --------------------------------------------------------- */

static bool ks_redis_failed(ks_sched *s, const kf_err *err)
{
    if (!s->redis_warned)
        kf_log_warn("Redis step failed (retrying each tick) err=\"%s\"", err->msg);
    s->redis_warned = true;
    return false;
}

/* Enqueue the job of a PostgreSQL row (columns from `col`: id kind target
 * backend priority attempt max_attempts spec budget goal).  A dead letter
 * left in Redis from an earlier life of the job (an admin re-queue) is
 * dropped first.  *created tells whether Redis lacked it. */
static kf_code ks_enqueue_row(ks_sched *s, PGresult *r, int row, int col, bool *created, kf_err *err)
{
    const char *id = PQgetvalue(r, row, col);
    kf_queue_info info;
    bool exists = false;
    kf_queue_job j;
    char *payload;
    long prio = 0, att = 0, max_att = 0;
    kf_code rc;

    *created = false;
    if ((rc = kf_db_num(r, row, col + 4, INT_MIN, INT_MAX, &prio, err)) != KF_OK ||
        (rc = kf_db_num(r, row, col + 5, 0, INT_MAX, &att, err)) != KF_OK ||
        (rc = kf_db_num(r, row, col + 6, INT_MIN, INT_MAX, &max_att, err)) != KF_OK)
        return rc;
    if ((rc = kf_queue_inspect(s->q, id, &info, &exists, err)) != KF_OK)
        return rc;
    if (exists && strcmp(info.state, "dead") == 0)
        rc = kf_queue_forget(s->q, id, err);
    kf_queue_info_release(&info);
    if (rc != KF_OK)
        return rc;
    payload = kf_job_payload_build(id, PQgetvalue(r, row, col + 1), PQgetvalue(r, row, col + 2),
                                   PQgetvalue(r, row, col + 3), PQgetvalue(r, row, col + 7),
                                   PQgetvalue(r, row, col + 8), PQgetvalue(r, row, col + 9), err);
    if (!payload)
        return err->code ? err->code : KF_INVALID;
    memset(&j, 0, sizeof(j));
    j.id = id;
    j.kind = PQgetvalue(r, row, col + 1);
    j.target = PQgetvalue(r, row, col + 2);
    j.backend = PQgetvalue(r, row, col + 3);
    j.priority = (int)prio;
    j.attempt = (int)att;
    j.max_attempts = (int)max_att;
    j.payload = payload;
    if (j.max_attempts < 1)
        j.max_attempts = 1;
    rc = kf_queue_enqueue(s->q, &j, created, err);
    free(payload);
    return rc;
}

#define KS_JOB_COLS "j.id, j.kind, j.target, j.backend, j.priority, j.attempt, j.max_attempts, " \
                   "j.spec::text, j.budget::text, j.goal::text"

/* ---- relay ------------------------------------------------------------------ */

/* One relay transaction: lock the oldest pending rows, deliver each to
 * Redis and delete it.  Redis failing midway ends the loop and commits
 * what was delivered.  Run again whole when it loses a deadlock (a
 * repeated enqueue or cancel is a no-op in Redis). */
typedef struct ks_relay_run {
    ks_sched *s;
    int       sent;
} ks_relay_run;

static kf_code ks_relay_body(PGconn *c, void *ud, kf_err *err)
{
    ks_relay_run *run = ud;
    ks_sched *s = run->s;
    kf_err qerr = KF_ERR_INIT;
    PGresult *r;
    kf_code rc = KF_OK;
    int n;

    run->sent = 0;
    r = kf_pg_exec(c, "relay: lock pending outbox rows",
                   "SELECT o.id, o.action, j.state, j.cancel_requested, " KS_JOB_COLS " "
                   "FROM outbox o JOIN jobs j ON j.id = o.job_id "
                   /* Younger rows are the API's own, in flight (delivered, its
                    * delete not yet committed): leave them to it instead of
                    * locking rows its next statement deletes. */
                   "WHERE o.created_at < now() - interval '1 second' "
                   "ORDER BY o.id LIMIT 200 FOR UPDATE OF o, j SKIP LOCKED",
                   0, NULL, NULL, NULL, err);
    if (!r)
        return err->code;
    n = PQntuples(r);
    for (int i = 0; i < n && rc == KF_OK; i++) {
        const char *oid = PQgetvalue(r, i, 0), *action = PQgetvalue(r, i, 1), *state = PQgetvalue(r, i, 2);
        const char *id = PQgetvalue(r, i, 4);
        const char *p[1] = { oid };
        kf_code qrc = KF_OK;
        bool created = false;

        if (strcmp(action, "cancel") == 0) {
            kf_queue_cancel_result cr;
            qrc = kf_queue_cancel(s->q, id, &cr, &qerr);
        } else if (strcmp(state, "queued") == 0) {
            qrc = ks_enqueue_row(s, r, i, 4, &created, &qerr);
            if (qrc == KF_INVALID || qrc == KF_CONFIG) {
                kf_log_error("job cannot be queued (bad stored spec); skipping job=%s err=\"%s\"", id, qerr.msg);
                qrc = KF_OK;
            }
        }
        if (qrc == KF_DB) {
            /* The row is not what this build reads (kf_db_num): keep its outbox row. */
            kf_log_error("job cannot be relayed job=%s err=\"%s\"", id, qerr.msg);
            break;
        }
        if (qrc != KF_OK) {
            ks_redis_failed(s, &qerr);
            break;   /* Redis away: leave the rest unsent; commit what was sent */
        }
        rc = kf_pg_run(c, "relay: delete a delivered outbox row", "DELETE FROM outbox WHERE id = $1::bigint", 1, p,
                       err);
        if (rc == KF_OK) {
            run->sent++;
            if (created)
                kf_log_info("relayed job=%s action=%s", id, action);
        }
    }
    PQclear(r);
    return rc;
}

void ks_relay(ks_sched *s)
{
    ks_relay_run run = { s, 0 };

    if (ks_txn(s, ks_relay_body, &run) && run.sent)
        s->redis_warned = false;
}

/* ---- reap / promote ----------------------------------------------------------- */

/* A job Redis holds but PostgreSQL says has ended: drop it from Redis. */
static void ks_forget(ks_sched *s, const char *id)
{
    kf_err err = KF_ERR_INIT;
    if (kf_queue_forget(s->q, id, &err) != KF_OK)
        ks_redis_failed(s, &err);
    else
        kf_log_info("job already final in PostgreSQL; dropped from Redis job=%s", id);
}

static void ks_record_reaped(ks_sched *s, const kf_queue_moved *m)
{
    kf_db_move mv = { .job_id = m->id, .attempt = m->attempt,
                      .detail = "{\"error\":\"lease expired\",\"by\":\"reaper\"}" };
    kf_db_moved got;
    kf_code rc;

    if (m->fate == KF_FATE_RETRYING) {
        mv.move = KF_MOVE_REAP_RETRY;
        mv.error = "lease expired: the worker died, hung or lost Redis";
    } else if (m->fate == KF_FATE_DEAD) {
        mv.move = KF_MOVE_REAP_DEAD;
        mv.error = "lease expired on the last attempt: the worker died, hung or lost Redis";
    } else {
        mv.move = KF_MOVE_REAP_CANCEL;
        mv.detail = "{\"by\":\"reaper\"}";
    }
    rc = ks_move(s, &mv, &got);
    if (rc != KF_OK && rc != KF_CONFLICT && rc != KF_NOT_FOUND)
        return;
    kf_log_info("lease expired job=%s attempt=%d fate=%s", m->id, m->attempt, kf_queue_fate_name(m->fate));
    /* PostgreSQL had nothing to move: if the job has ended there (its
     * result arrived but the ack did not), Redis must let it go. */
    if (rc != KF_OK && m->fate != KF_FATE_CANCELLED && kf_state_terminal(got.from) &&
        !(m->fate == KF_FATE_DEAD && got.from == KF_STATE_DEAD))
        ks_forget(s, m->id);
}

void ks_reap(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;
    kf_queue_moved *m = NULL;
    int n = 0;

    if (kf_queue_reap(s->q, KS_BATCH, s->cfg.retry_base_ms, s->cfg.retry_cap_ms, &m, &n, &err) != KF_OK) {
        ks_redis_failed(s, &err);
        return;
    }
    for (int i = 0; i < n && s->pg; i++)
        ks_record_reaped(s, &m[i]);
    kf_queue_moved_free(m, n);
}

/* Jobs a worker dead-lettered (a retryable failure on the last attempt)
 * or the reaper did: state dead in PostgreSQL with Redis's last error.
 * Not for a queued job with an enqueue pending in the outbox: that is a
 * later life (reconciliation recorded this death already and an admin
 * re-queued the job before it was read; the relay, not a worker, starts
 * that life).  A job PostgreSQL has running or retrying is in the life
 * that died, whatever the outbox holds: the API deletes a delivered
 * enqueue row a little after the job reaches Redis, and a worker can
 * lease, run and dead-letter the job before that. */
void ks_deaths(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;
    kf_queue_moved *m = NULL;
    int n = 0;

    if (kf_queue_deaths(s->q, KS_BATCH, &m, &n, &err) != KF_OK) {
        ks_redis_failed(s, &err);
        return;
    }
    for (int i = 0; i < n && s->pg; i++) {
        kf_queue_info info;
        bool exists = false;

        if (kf_queue_inspect(s->q, m[i].id, &info, &exists, &err) != KF_OK) {
            ks_redis_failed(s, &err);
            break;
        }
        if (exists && strcmp(info.state, "dead") == 0) {
            const char *error = info.last_error ? info.last_error : "attempts exhausted";
            char *detail = ks_detail(error, NULL);
            kf_db_move mv = { .move = KF_MOVE_DEATH, .job_id = m[i].id, .attempt = info.attempt,
                              .error = error, .detail = detail };

            if (ks_move(s, &mv, NULL) == KF_OK)
                kf_log_info("job dead: attempts exhausted job=%s attempt=%d", m[i].id, info.attempt);
            free(detail);
        }
        kf_queue_info_release(&info);
    }
    kf_queue_moved_free(m, n);
}

void ks_promote(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;
    kf_queue_moved *m = NULL;
    int n = 0;

    if (kf_queue_promote(s->q, KS_BATCH, &m, &n, &err) != KF_OK) {
        ks_redis_failed(s, &err);
        return;
    }
    for (int i = 0; i < n && s->pg; i++) {
        kf_db_move mv = { .move = KF_MOVE_PROMOTE, .job_id = m[i].id, .detail = "{\"by\":\"promoter\"}" };
        kf_db_moved got;
        kf_code rc = ks_move(s, &mv, &got);

        if ((rc == KF_CONFLICT || rc == KF_NOT_FOUND) && kf_state_terminal(got.from))
            ks_forget(s, m[i].id);
    }
    kf_queue_moved_free(m, n);
}

/* ---- reconcile ------------------------------------------------------------------ */

/* True when every non-terminal job was looked at. */
/* One batch of the scan: up to KS_BATCH non-terminal jobs after `last`
 * that no outbox row covers, locked while Redis is asked about them.
 * Counts are the batch's (a retried batch starts them again). */
typedef struct ks_rec_batch {
    ks_sched *s;
    char      last[40];   /* in: scan after this id; out: the last id seen */
    int       n, requeued, recorded;
    bool      stop;       /* Redis failed: stop the scan */
} ks_rec_batch;

static kf_code ks_reconcile_body(PGconn *c, void *ud, kf_err *err)
{
    ks_rec_batch *b = ud;
    ks_sched *s = b->s;
    const char *p[1] = { b->last };
    kf_err qerr = KF_ERR_INIT;
    kf_code rc = KF_OK;
    PGresult *r;

    b->n = b->requeued = b->recorded = 0;
    b->stop = false;
    r = kf_pg_exec(c, "reconcile: lock a batch of jobs",
                   "SELECT j.state, j.cancel_requested, " KS_JOB_COLS " FROM jobs j "
                   "WHERE j.state IN ('queued','running','retrying') AND j.id > $1::uuid "
                   "AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = j.id) "
                   "ORDER BY j.id LIMIT " KS_STR(KS_BATCH) " FOR UPDATE SKIP LOCKED",
                   1, p, NULL, NULL, err);
    if (!r)
        return err->code;
    b->n = PQntuples(r);
    for (int i = 0; i < b->n && rc == KF_OK && !b->stop; i++) {
        const char *id = PQgetvalue(r, i, 2);
        bool cancel = strcmp(PQgetvalue(r, i, 1), "t") == 0, exists = false, created = false;
        kf_queue_info info;

        if (kf_queue_inspect(s->q, id, &info, &exists, &qerr) != KF_OK) {
            ks_redis_failed(s, &qerr);
            b->stop = true;
            break;
        }
        if (exists && strcmp(info.state, "dead") == 0) {
            const char *error = info.last_error ? info.last_error : "attempts exhausted";
            char *detail = ks_detail(error, "reconcile");
            kf_db_move mv = { .move = KF_MOVE_RECONCILE_DEAD, .job_id = id, .error = error, .detail = detail };

            rc = ks_move_tx(s, &mv, NULL, err);
            free(detail);
            b->recorded++;
        } else if (!exists && cancel) {
            kf_db_move mv = { .move = KF_MOVE_RECONCILE_CANCEL, .job_id = id, .detail = "{\"by\":\"reconcile\"}" };

            rc = ks_move_tx(s, &mv, NULL, err);
            b->recorded++;
        } else if (!exists) {
            kf_code qrc = ks_enqueue_row(s, r, i, 2, &created, &qerr);
            if (qrc == KF_REDIS) {
                ks_redis_failed(s, &qerr);
                b->stop = true;
            } else if (qrc != KF_OK) {
                kf_log_error("job cannot be re-queued (bad stored spec) job=%s err=\"%s\"", id, qerr.msg);
            } else if (created) {
                kf_db_move mv = { .move = KF_MOVE_RECONCILE_REQUEUE, .job_id = id,
                                  .detail = "{\"by\":\"reconcile\",\"reason\":\"missing in Redis\"}" };

                rc = ks_move_tx(s, &mv, NULL, err);
                b->requeued++;
            }
        }
        kf_queue_info_release(&info);
    }
    if (b->n > 0)
        snprintf(b->last, sizeof(b->last), "%s", PQgetvalue(r, b->n - 1, 2));
    PQclear(r);
    return rc;
}

bool ks_reconcile(ks_sched *s, const char *why)
{
    ks_rec_batch b = { .s = s, .last = "00000000-0000-0000-0000-000000000000" };
    int requeued = 0, recorded = 0, scanned = 0;
    kf_err err = KF_ERR_INIT;

    for (;;) {
        if (!ks_txn(s, ks_reconcile_body, &b))
            return false;
        scanned += b.n;
        requeued += b.requeued;
        recorded += b.recorded;
        if (b.stop)
            return false;
        if (b.n < KS_BATCH)
            break;
        /* A long scan must not outlive the lock: extend it between batches,
         * and stop if another scheduler has taken over. */
        bool still = false;
        if (kf_queue_leader(s->q, s->token, s->cfg.ttl_ms, &still, &err) != KF_OK || !still) {
            kf_log_warn("reconcile stopped: leadership lost or Redis away after %d jobs", scanned);
            s->leader = false;
            return false;
        }
    }
    if (requeued || recorded)
        kf_log_warn("reconciled Redis with PostgreSQL why=%s scanned=%d requeued=%d recorded=%d", why, scanned,
                    requeued, recorded);
    else
        kf_log_debug("reconcile found nothing to fix why=%s scanned=%d", why, scanned);
    return true;
}

/* ---- retention --------------------------------------------------------------------- */

void ks_retain(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;
    char ttl[24];
    const char *p[1] = { ttl };
    int trimmed = 0, gone = 0;

    if (kf_queue_trim_dead(s->q, s->cfg.idem_ttl_s * 1000, 1000, &trimmed, &err) != KF_OK ||
        kf_queue_workers_cleanup(s->q, &gone, &err) != KF_OK) {
        ks_redis_failed(s, &err);
        return;
    }
    if (trimmed || gone)
        kf_log_info("retention dead_trimmed=%d workers_gone=%d", trimmed, gone);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)s->cfg.idem_ttl_s);
    PQclear(ks_sql(s, "retention: expired idempotency keys",
                   "DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $1::int)", 1, p));
}

void ks_retain_artifacts(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;
    long links = 0, blobs = 0;

    if (!s->cfg.artifacts || s->cfg.artifact_days <= 0)
        return;
    if (kf_artifact_retain(s->cfg.artifacts, s->pg, s->cfg.artifact_days, KS_ARTIFACT_GRACE, &links, &blobs, &err) !=
        KF_OK) {
        kf_log_warn("artifact retention failed, tried again later err=\"%s\"", err.msg);
        if (err.code == KF_UNAVAILABLE)
            ks_pg_drop(s);
        return;
    }
    if (links || blobs)
        kf_log_info("artifact retention days=%d links_deleted=%ld contents_deleted=%ld", s->cfg.artifact_days, links,
                    blobs);
}

/* ---- upgrade: waiting sets keyed by target only ------------------------------------- */

bool ks_migrate_wait(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;
    int moved = 0, total = 0;

    do {
        if (kf_queue_migrate_wait(s->q, KS_MIGRATE_BATCH, &moved, &err) != KF_OK) {
            ks_redis_failed(s, &err);
            return false;
        }
        total += moved;
    } while (moved > 0);
    if (total)
        kf_log_warn("moved waiting jobs from the pre-routing queues kf:wait:{target} to kf:wait:{backend}:{target} "
                    "jobs=%d", total);
    return true;
}

/* ---- main ----------------------------------------------------------------------------- */

void ks_tick(ks_sched *s, long long now)
{
    kf_err err = KF_ERR_INIT;
    bool leader = false, present = true, restarted = false;
    char run_id[41];

    if (kf_queue_leader(s->q, s->token, s->cfg.ttl_ms, &leader, &err) != KF_OK) {
        ks_redis_failed(s, &err);
        if (s->leader)
            kf_log_warn("cannot reach Redis to keep the leader lock; acting as standby");
        s->leader = false;
        return;
    }
    if (s->redis_warned)
        kf_log_info("Redis is back");
    s->redis_warned = false;
    if (leader != s->leader)
        kf_log_info(leader ? "became leader" : "lost the leader lock; standing by");
    if (leader && !s->leader)
        s->next_reconcile = s->next_artifacts = s->next_migrate = 0;
    s->leader = leader;
    if (!leader)
        return;

    if (kf_queue_epoch(s->q, &present, &err) != KF_OK || kf_queue_server_id(s->q, run_id, &err) != KF_OK) {
        ks_redis_failed(s, &err);
        return;
    }
    if (now >= s->next_migrate) {
        if (!ks_migrate_wait(s))
            return;
        s->next_migrate = now + KS_RECONCILE_MS;
    }
    restarted = s->redis_run_id[0] && strcmp(run_id, s->redis_run_id) != 0;
    snprintf(s->redis_run_id, sizeof(s->redis_run_id), "%s", run_id);
    if (!ks_pg_ok(s))
        return;   /* every step below records in PostgreSQL: wait for it */
    ks_relay(s);
    if (s->pg)
        ks_reap(s);
    if (s->pg)
        ks_deaths(s);
    if (s->pg)
        ks_promote(s);
    if (restarted)
        s->pending_reconcile = "redis-restarted";
    if (!present)
        s->pending_reconcile = "redis-data-lost";
    s->pending_loss = s->pending_loss || restarted || !present;
    if (s->pg && (s->pending_reconcile || now >= s->next_reconcile)) {
        if (ks_reconcile(s, s->pending_reconcile ? s->pending_reconcile
                           : s->next_reconcile == 0 ? "leader-start" : "periodic")) {
            /* Otherwise owed until it completes.  A job whose enqueue was
             * in flight when Redis lost it has an outbox row the API
             * deletes a moment later, as delivered: the first pass leaves
             * it to the relay, so a second one must look again. */
            if (s->pending_loss)
                s->second_pass_at = now + KS_SECOND_PASS_MS;
            s->pending_reconcile = NULL;
            s->pending_loss = false;
        }
        s->next_reconcile = now + KS_RECONCILE_MS;
    }
    if (s->pg && s->second_pass_at && now >= s->second_pass_at && ks_reconcile(s, "after-loss-second-pass"))
        s->second_pass_at = 0;
    if (s->pg && now >= s->next_retain) {
        ks_retain(s);
        s->next_retain = now + KS_RETAIN_MS;
    }
    if (s->pg && s->cfg.artifact_days > 0 && now >= s->next_artifacts) {
        ks_retain_artifacts(s);
        s->next_artifacts = now + KS_ARTIFACT_MS;
    }
}

bool ks_is_leader(const ks_sched *s)
{
    return s->leader;
}

ks_sched *ks_new(const ks_config *cfg, kf_queue *q)
{
    ks_sched *s = kf_calloc(1, sizeof(*s));

    s->cfg = *cfg;
    s->q = q;
    kf_queue_new_token(s->token);
    return s;
}

void ks_free(ks_sched *s)
{
    kf_err err = KF_ERR_INIT;

    if (!s)
        return;
    if (s->leader && kf_queue_leader_resign(s->q, s->token, &err) == KF_OK)
        kf_log_info("resigned the leader lock");
    ks_pg_drop(s);
    free(s);
}
