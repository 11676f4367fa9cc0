/*
 * kforge-scheduler — the queue's caretaker (DESIGN.md §2, docs/protocol.md).
 *
 * One leader at a time: every KFORGE_SCHED_TICK_MS each instance tries to
 * take or extend the Redis lock kf:leader (SET NX PX with a random token,
 * extended by compare-and-pexpire); a standby takes over within one
 * KFORGE_LEADER_TTL_MS of the leader's death.  The leader, each tick:
 *
 *   relay      pending outbox rows → Redis (enqueue / cancel), then deletes them;
 *   reap       expired leases → retrying or dead (a failed attempt) and
 *              the same in PostgreSQL with an event (workers hold no DB
 *              credentials, so the scheduler records what the queue did);
 *   promote    due retries → waiting, PostgreSQL back to queued;
 *   reconcile  (on taking the lead, when Redis lost its data — the kf:epoch
 *              marker is gone —, when Redis restarted — its run_id changed,
 *              and AOF everysec may have lost the last second — and every
 *              60 s) every job PostgreSQL says is
 *              queued/running/retrying but Redis lacks is enqueued again with
 *              its attempt count; Redis dead letters PostgreSQL missed are
 *              recorded;
 *   retain     (every 10 s) dead letters older than KFORGE_IDEMPOTENCY_TTL_S
 *              leave Redis, expired idempotency keys leave PostgreSQL, and
 *              registry entries of workers whose heartbeat expired go;
 *   artifacts  (on taking the lead, then every 10 min, when
 *              KFORGE_ARTIFACT_RETENTION_DAYS > 0) the best-so-far artifact
 *              links of jobs finished longer ago go (the final set stays),
 *              then the contents no link references, untouched for an hour
 *              (db/kf_artifact.h).
 *
 * Every move it records in PostgreSQL is a row of the transition table
 * (common/kf_life.h, docs/lifecycle.md) applied by db/kf_db; it writes no
 * job state or event by hand.  Every PostgreSQL row it acts on is locked
 * (FOR UPDATE SKIP LOCKED) while it talks to Redis, so it never races the
 * API's result handler on the same job.  Failure behaviour: Redis or PostgreSQL down → the step is skipped
 * and tried again next tick; nothing is fatal after start-up.  SIGTERM/
 * SIGINT: resign the lock and exit 0.
 */
#include "kf_alloc.h"
#include "kf_artifact.h"
#include "kf_config.h"
#include "kf_db.h"
#include "kf_error.h"
#include "kf_job.h"
#include "kf_json.h"
#include "kf_life.h"
#include "kf_log.h"
#include "kf_queue.h"

#include <limits.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_BATCH          200
#define S_RECONCILE_MS   60000
#define S_RETAIN_MS      10000
#define S_ARTIFACT_MS    600000
#define S_ARTIFACT_GRACE 3600   /* seconds an unreferenced content is kept (an upload may be in flight) */

typedef struct sched {
    kf_queue   *q;
    PGconn     *pg;
    kf_db_prepared pg_moves;          /* moves prepared on pg; zeroed with it */
    const char *dsn;
    char        token[33];
    bool        leader;
    int64_t     tick_ms, ttl_ms, retry_base_ms, retry_cap_ms, idem_ttl_s;
    long long   next_reconcile, next_retain, next_artifacts;
    kf_artifact_store *artifacts;
    int         artifact_days;        /* KFORGE_ARTIFACT_RETENTION_DAYS; 0: keep */
    char        redis_run_id[41];     /* "" until first seen */
    const char *pending_reconcile;    /* why a reconcile is owed, or NULL */
    bool        pg_warned, redis_warned;
} sched;

static volatile sig_atomic_t s_term;

static void s_on_term(int sig)
{
    (void)sig;
    s_term = 1;
}

static long long s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_sleep_ms(long long ms)
{
    long long end = s_now_ms() + ms;
    while (!s_term && s_now_ms() < end) {
        long long left = end - s_now_ms();
        struct timespec ts = { 0, (long)(left < 50 ? left : 50) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* ---- PostgreSQL ---------------------------------------------------------- */

/* The first line of a libpq message, for one-line logs. */
static const char *s_line(const char *msg, char *buf, size_t n)
{
    size_t len = strcspn(msg ? msg : "", "\n");
    snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), msg ? msg : "");
    return buf;
}

static void s_pg_drop(sched *s)
{
    if (s->pg) {
        PQfinish(s->pg);
        s->pg = NULL;
    }
    s->pg_moves = 0;
}

static bool s_pg_ok(sched *s)
{
    if (s->pg && PQstatus(s->pg) == CONNECTION_OK)
        return true;
    s_pg_drop(s);
    {
        const char *keys[] = { "dbname", "connect_timeout", "application_name", NULL };
        const char *vals[] = { s->dsn, "3", "kforge-scheduler", NULL };
        s->pg = PQconnectdbParams(keys, vals, 1);
    }
    if (PQstatus(s->pg) != CONNECTION_OK) {
        char line[256];
        if (!s->pg_warned)
            kf_log_warn("PostgreSQL unreachable; database steps wait (retrying each tick) err=\"%s\"",
                        s_line(PQerrorMessage(s->pg), line, sizeof(line)));
        s->pg_warned = true;
        s_pg_drop(s);
        return false;
    }
    if (s->pg_warned)
        kf_log_info("PostgreSQL is back");
    s->pg_warned = false;
    return true;
}

/* Run SQL; NULL (connection dropped if broken) on failure. */
static PGresult *s_sql(sched *s, const char *sql, int n, const char *const *params)
{
    PGresult *r = PQexecParams(s->pg, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);

    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return r;
    {
        char line[256];
        kf_log_warn("SQL failed err=\"%s\"", s_line(PQresultErrorMessage(r), line, sizeof(line)));
    }
    PQclear(r);
    if (PQstatus(s->pg) != CONNECTION_OK)
        s_pg_drop(s);
    return NULL;
}

static bool s_exec(sched *s, const char *sql, int n, const char *const *params)
{
    PGresult *r = s_sql(s, sql, n, params);
    PQclear(r);
    return r != NULL;
}

static void s_rollback(sched *s)
{
    if (s->pg && PQtransactionStatus(s->pg) != PQTRANS_IDLE) {
        PGresult *r = PQexec(s->pg, "ROLLBACK");
        PQclear(r);
    }
}

/* Apply a move of the transition table (db/kf_db.h).  KF_OK: moved; a
 * refusal (the job moved on, or is gone) is KF_CONFLICT, KF_STALE or
 * KF_NOT_FOUND with *out saying what the job is; a PostgreSQL failure is
 * logged and drops a broken connection, as s_sql does. */
static kf_code s_move(sched *s, const kf_db_move *m, kf_db_moved *out)
{
    kf_err err = KF_ERR_INIT;
    kf_code rc = kf_db_apply(s->pg, &s->pg_moves, m, out, &err);

    if (rc == KF_INVALID) {
        kf_log_error("job move not in the transition table (a bug) err=\"%s\"", err.msg);
    } else if (rc == KF_DB || rc == KF_UNAVAILABLE) {
        kf_log_warn("SQL failed err=\"%s\"", err.msg);
        if (PQstatus(s->pg) != CONNECTION_OK)
            s_pg_drop(s);
    }
    return rc;
}

/* An event's detail {"error": error, "by": by} (by omitted when NULL);
 * the caller frees it. */
static char *s_detail(const char *error, const char *by)
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

static bool s_redis_failed(sched *s, const kf_err *err)
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
static kf_code s_enqueue_row(sched *s, PGresult *r, int row, int col, bool *created, kf_err *err)
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

#define S_JOB_COLS "j.id, j.kind, j.target, j.backend, j.priority, j.attempt, j.max_attempts, " \
                   "j.spec::text, j.budget::text, j.goal::text"

/* ---- relay ------------------------------------------------------------------ */

static void s_relay(sched *s)
{
    kf_err err = KF_ERR_INIT;
    PGresult *r;
    int n, sent = 0;

    if (!s_exec(s, "BEGIN", 0, NULL))
        return;
    r = s_sql(s,
              "SELECT o.id, o.action, j.state, j.cancel_requested, " S_JOB_COLS " "
              "FROM outbox o JOIN jobs j ON j.id = o.job_id "
              /* Younger rows are the API's own, in flight (delivered, its
               * delete not yet committed): leave them to it instead of
               * locking rows its next statement deletes. */
              "WHERE o.created_at < now() - interval '1 second' "
              "ORDER BY o.id LIMIT 200 FOR UPDATE OF o, j SKIP LOCKED",
              0, NULL);
    if (!r) {
        s_rollback(s);
        return;
    }
    n = PQntuples(r);
    for (int i = 0; i < n; i++) {
        const char *oid = PQgetvalue(r, i, 0), *action = PQgetvalue(r, i, 1), *state = PQgetvalue(r, i, 2);
        const char *id = PQgetvalue(r, i, 4);
        const char *p[1] = { oid };
        kf_code rc = KF_OK;
        bool created = false;

        if (strcmp(action, "cancel") == 0) {
            kf_queue_cancel_result cr;
            rc = kf_queue_cancel(s->q, id, &cr, &err);
        } else if (strcmp(state, "queued") == 0) {
            rc = s_enqueue_row(s, r, i, 4, &created, &err);
            if (rc == KF_INVALID || rc == KF_CONFIG) {
                kf_log_error("job cannot be queued (bad stored spec); skipping job=%s err=\"%s\"", id, err.msg);
                rc = KF_OK;
            }
        }
        if (rc == KF_DB) {
            /* The row is not what this build reads (kf_db_num): keep its outbox row. */
            kf_log_error("job cannot be relayed job=%s err=\"%s\"", id, err.msg);
            break;
        }
        if (rc != KF_OK) {
            s_redis_failed(s, &err);
            break;   /* Redis away: leave the rest unsent; commit what was sent */
        }
        if (!s_exec(s, "DELETE FROM outbox WHERE id = $1::bigint", 1, p))
            break;
        sent++;
        if (created)
            kf_log_info("relayed job=%s action=%s", id, action);
    }
    PQclear(r);
    if (!s->pg || !s_exec(s, "COMMIT", 0, NULL))
        s_rollback(s);
    else if (sent)
        s->redis_warned = false;
}

/* ---- reap / promote ----------------------------------------------------------- */

/* A job Redis holds but PostgreSQL says has ended: drop it from Redis. */
static void s_forget(sched *s, const char *id)
{
    kf_err err = KF_ERR_INIT;
    if (kf_queue_forget(s->q, id, &err) != KF_OK)
        s_redis_failed(s, &err);
    else
        kf_log_info("job already final in PostgreSQL; dropped from Redis job=%s", id);
}

static void s_record_reaped(sched *s, const kf_queue_moved *m)
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
    rc = s_move(s, &mv, &got);
    if (rc != KF_OK && rc != KF_CONFLICT && rc != KF_NOT_FOUND)
        return;
    kf_log_info("lease expired job=%s attempt=%d fate=%s", m->id, m->attempt, kf_queue_fate_name(m->fate));
    /* PostgreSQL had nothing to move: if the job has ended there (its
     * result arrived but the ack did not), Redis must let it go. */
    if (rc != KF_OK && m->fate != KF_FATE_CANCELLED && kf_state_terminal(got.from) &&
        !(m->fate == KF_FATE_DEAD && got.from == KF_STATE_DEAD))
        s_forget(s, m->id);
}

static void s_reap(sched *s)
{
    kf_err err = KF_ERR_INIT;
    kf_queue_moved *m = NULL;
    int n = 0;

    if (kf_queue_reap(s->q, S_BATCH, s->retry_base_ms, s->retry_cap_ms, &m, &n, &err) != KF_OK) {
        s_redis_failed(s, &err);
        return;
    }
    for (int i = 0; i < n && s->pg; i++)
        s_record_reaped(s, &m[i]);
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
static void s_deaths(sched *s)
{
    kf_err err = KF_ERR_INIT;
    kf_queue_moved *m = NULL;
    int n = 0;

    if (kf_queue_deaths(s->q, S_BATCH, &m, &n, &err) != KF_OK) {
        s_redis_failed(s, &err);
        return;
    }
    for (int i = 0; i < n && s->pg; i++) {
        kf_queue_info info;
        bool exists = false;

        if (kf_queue_inspect(s->q, m[i].id, &info, &exists, &err) != KF_OK) {
            s_redis_failed(s, &err);
            break;
        }
        if (exists && strcmp(info.state, "dead") == 0) {
            const char *error = info.last_error ? info.last_error : "attempts exhausted";
            char *detail = s_detail(error, NULL);
            kf_db_move mv = { .move = KF_MOVE_DEATH, .job_id = m[i].id, .attempt = info.attempt,
                              .error = error, .detail = detail };

            if (s_move(s, &mv, NULL) == KF_OK)
                kf_log_info("job dead: attempts exhausted job=%s attempt=%d", m[i].id, info.attempt);
            free(detail);
        }
        kf_queue_info_release(&info);
    }
    kf_queue_moved_free(m, n);
}

static void s_promote(sched *s)
{
    kf_err err = KF_ERR_INIT;
    kf_queue_moved *m = NULL;
    int n = 0;

    if (kf_queue_promote(s->q, S_BATCH, &m, &n, &err) != KF_OK) {
        s_redis_failed(s, &err);
        return;
    }
    for (int i = 0; i < n && s->pg; i++) {
        kf_db_move mv = { .move = KF_MOVE_PROMOTE, .job_id = m[i].id, .detail = "{\"by\":\"promoter\"}" };
        kf_db_moved got;
        kf_code rc = s_move(s, &mv, &got);

        if ((rc == KF_CONFLICT || rc == KF_NOT_FOUND) && kf_state_terminal(got.from))
            s_forget(s, m[i].id);
    }
    kf_queue_moved_free(m, n);
}

/* ---- reconcile ------------------------------------------------------------------ */

/* True when every non-terminal job was looked at. */
static bool s_reconcile(sched *s, const char *why)
{
    char last[40] = "00000000-0000-0000-0000-000000000000";
    int requeued = 0, recorded = 0, scanned = 0;
    kf_err err = KF_ERR_INIT;

    for (;;) {
        const char *p[1] = { last };
        PGresult *r;
        int n;
        bool stop = false;

        if (!s_exec(s, "BEGIN", 0, NULL))
            return false;
        r = s_sql(s,
                  "SELECT j.state, j.cancel_requested, " S_JOB_COLS " FROM jobs j "
                  "WHERE j.state IN ('queued','running','retrying') AND j.id > $1::uuid "
                  "AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = j.id) "
                  "ORDER BY j.id LIMIT 200 FOR UPDATE SKIP LOCKED",
                  1, p);
        if (!r) {
            s_rollback(s);
            return false;
        }
        n = PQntuples(r);
        for (int i = 0; i < n && !stop; i++) {
            const char *id = PQgetvalue(r, i, 2);
            bool cancel = strcmp(PQgetvalue(r, i, 1), "t") == 0, exists = false, created = false;
            kf_queue_info info;

            snprintf(last, sizeof(last), "%s", id);
            scanned++;
            if (kf_queue_inspect(s->q, id, &info, &exists, &err) != KF_OK) {
                s_redis_failed(s, &err);
                stop = true;
                break;
            }
            if (exists && strcmp(info.state, "dead") == 0) {
                const char *error = info.last_error ? info.last_error : "attempts exhausted";
                char *detail = s_detail(error, "reconcile");
                kf_db_move mv = { .move = KF_MOVE_RECONCILE_DEAD, .job_id = id, .error = error, .detail = detail };

                (void)s_move(s, &mv, NULL);
                free(detail);
                recorded++;
            } else if (!exists && cancel) {
                kf_db_move mv = { .move = KF_MOVE_RECONCILE_CANCEL, .job_id = id, .detail = "{\"by\":\"reconcile\"}" };

                (void)s_move(s, &mv, NULL);
                recorded++;
            } else if (!exists) {
                kf_code rc = s_enqueue_row(s, r, i, 2, &created, &err);
                if (rc == KF_REDIS) {
                    s_redis_failed(s, &err);
                    stop = true;
                } else if (rc != KF_OK) {
                    kf_log_error("job cannot be re-queued (bad stored spec) job=%s err=\"%s\"", id, err.msg);
                } else if (created) {
                    kf_db_move mv = { .move = KF_MOVE_RECONCILE_REQUEUE, .job_id = id,
                                      .detail = "{\"by\":\"reconcile\",\"reason\":\"missing in Redis\"}" };

                    (void)s_move(s, &mv, NULL);
                    requeued++;
                }
            }
            kf_queue_info_release(&info);
        }
        PQclear(r);
        if (!s->pg || !s_exec(s, "COMMIT", 0, NULL)) {
            s_rollback(s);
            return false;
        }
        if (stop)
            return false;
        if (n < 200)
            break;
        /* A long scan must not outlive the lock: extend it between batches,
         * and stop if another scheduler has taken over. */
        bool still = false;
        if (kf_queue_leader(s->q, s->token, s->ttl_ms, &still, &err) != KF_OK || !still) {
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

static void s_retain(sched *s)
{
    kf_err err = KF_ERR_INIT;
    char ttl[24];
    const char *p[1] = { ttl };
    int trimmed = 0, gone = 0;

    if (kf_queue_trim_dead(s->q, s->idem_ttl_s * 1000, 1000, &trimmed, &err) != KF_OK ||
        kf_queue_workers_cleanup(s->q, &gone, &err) != KF_OK) {
        s_redis_failed(s, &err);
        return;
    }
    if (trimmed || gone)
        kf_log_info("retention dead_trimmed=%d workers_gone=%d", trimmed, gone);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)s->idem_ttl_s);
    s_exec(s, "DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $1::int)", 1, p);
}

static void s_retain_artifacts(sched *s)
{
    kf_err err = KF_ERR_INIT;
    long links = 0, blobs = 0;

    if (kf_artifact_retain(s->artifacts, s->pg, s->artifact_days, S_ARTIFACT_GRACE, &links, &blobs, &err) != KF_OK) {
        kf_log_warn("artifact retention failed, tried again later err=\"%s\"", err.msg);
        if (err.code == KF_UNAVAILABLE)
            s_pg_drop(s);
        return;
    }
    if (links || blobs)
        kf_log_info("artifact retention days=%d links_deleted=%ld contents_deleted=%ld", s->artifact_days, links, blobs);
}

/* ---- main ----------------------------------------------------------------------------- */

static void s_tick(sched *s)
{
    kf_err err = KF_ERR_INIT;
    bool leader = false, present = true, restarted = false;
    long long now = s_now_ms();
    char run_id[41];

    if (kf_queue_leader(s->q, s->token, s->ttl_ms, &leader, &err) != KF_OK) {
        s_redis_failed(s, &err);
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
        s->next_reconcile = s->next_artifacts = 0;
    s->leader = leader;
    if (!leader)
        return;

    if (kf_queue_epoch(s->q, &present, &err) != KF_OK || kf_queue_server_id(s->q, run_id, &err) != KF_OK) {
        s_redis_failed(s, &err);
        return;
    }
    restarted = s->redis_run_id[0] && strcmp(run_id, s->redis_run_id) != 0;
    snprintf(s->redis_run_id, sizeof(s->redis_run_id), "%s", run_id);
    if (!s_pg_ok(s))
        return;   /* every step below records in PostgreSQL: wait for it */
    s_relay(s);
    if (s->pg)
        s_reap(s);
    if (s->pg)
        s_deaths(s);
    if (s->pg)
        s_promote(s);
    if (restarted)
        s->pending_reconcile = "redis-restarted";
    if (!present)
        s->pending_reconcile = "redis-data-lost";
    if (s->pg && (s->pending_reconcile || now >= s->next_reconcile)) {
        if (s_reconcile(s, s->pending_reconcile ? s->pending_reconcile
                           : s->next_reconcile == 0 ? "leader-start" : "periodic"))
            s->pending_reconcile = NULL;   /* otherwise owed until it completes */
        s->next_reconcile = now + S_RECONCILE_MS;
    }
    if (s->pg && now >= s->next_retain) {
        s_retain(s);
        s->next_retain = now + S_RETAIN_MS;
    }
    if (s->pg && s->artifact_days > 0 && now >= s->next_artifacts) {
        s_retain_artifacts(s);
        s->next_artifacts = now + S_ARTIFACT_MS;
    }
}

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge-scheduler [--help]\n"
            "\n"
            "Keeps the Redis queue and PostgreSQL in step.  Run one or more; the one holding\n"
            "the Redis lock kf:leader acts and the others stand by, taking over within\n"
            "KFORGE_LEADER_TTL_MS.  Every KFORGE_SCHED_TICK_MS the leader relays unsent\n"
            "outbox rows to Redis, reaps expired leases (a failed attempt: retrying or\n"
            "dead), promotes due retries, and records each move in PostgreSQL.  It\n"
            "re-queues jobs Redis lost (on taking the lead, when the kf:epoch marker is gone,\n"
            "when Redis restarted, and every 60 s), trims dead letters older than KFORGE_IDEMPOTENCY_TTL_S and\n"
            "expired idempotency keys, and drops registry entries of vanished workers.\n"
            "SIGTERM/SIGINT: give the lock up and exit 0.\n");
    kf_config_print_help(out, KF_USE_SCHED);
}

int main(int argc, char **argv)
{
    sched s;
    kf_err err = KF_ERR_INIT;
    struct sigaction sa;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            s_usage(stdout);
            return 0;
        }
        fprintf(stderr, "kforge-scheduler: unknown argument '%s'\n\n", argv[i]);
        s_usage(stderr);
        return 2;
    }
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge-scheduler: %s\n", err.msg);
        return 2;
    }
    if (kf_log_init("scheduler", kf_config_str(KF_CFG_LOG_LEVEL)) != 0) {
        fprintf(stderr, "kforge-scheduler: KFORGE_LOG_LEVEL must be debug, info, warn or error\n");
        return 2;
    }
    memset(&s, 0, sizeof(s));
    s.dsn = kf_config_str(KF_CFG_PG_DSN);
    s.tick_ms = kf_config_int(KF_CFG_SCHED_TICK_MS);
    s.ttl_ms = kf_config_int(KF_CFG_LEADER_TTL_MS);
    s.retry_base_ms = kf_config_int(KF_CFG_RETRY_BASE_MS);
    s.retry_cap_ms = kf_config_int(KF_CFG_RETRY_CAP_MS);
    s.idem_ttl_s = kf_config_int(KF_CFG_IDEMPOTENCY_TTL_S);
    s.artifact_days = (int)kf_config_int(KF_CFG_ARTIFACT_RETENTION_DAYS);
    if (s.tick_ms * 2 > s.ttl_ms) {
        fprintf(stderr, "kforge-scheduler: KFORGE_SCHED_TICK_MS (%lld) must be at most half of "
                        "KFORGE_LEADER_TTL_MS (%lld), or the leader loses its lock between ticks\n",
                (long long)s.tick_ms, (long long)s.ttl_ms);
        return 2;
    }
    s.q = kf_queue_connect(kf_config_str(KF_CFG_REDIS_URL), &err);
    if (!s.q) {
        fprintf(stderr, "kforge-scheduler: %s\n", err.msg);
        return 2;
    }
    if (kf_artifact_store_open(kf_config_str(KF_CFG_ARTIFACT_STORE), &s.artifacts, &err) != KF_OK) {
        fprintf(stderr, "kforge-scheduler: %s\n", err.msg);
        kf_queue_free(s.q);
        return 2;
    }
    kf_queue_new_token(s.token);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = s_on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    kf_log_info("scheduler started tick_ms=%lld leader_ttl_ms=%lld", (long long)s.tick_ms, (long long)s.ttl_ms);
    while (!s_term) {
        long long t0 = s_now_ms();
        s_tick(&s);
        long long spent = s_now_ms() - t0;
        if (spent < s.tick_ms)
            s_sleep_ms(s.tick_ms - spent);
    }
    if (s.leader && kf_queue_leader_resign(s.q, s.token, &err) == KF_OK)
        kf_log_info("resigned the leader lock");
    s_pg_drop(&s);
    kf_queue_free(s.q);
    kf_artifact_store_free(s.artifacts);
    kf_log_info("scheduler stopped");
    return 0;
}
