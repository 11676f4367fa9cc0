/* api_batch — group commit of new jobs.
 *
 * Creating a job costs PostgreSQL three row writes; done one request at a
 * time, most of the cost is per statement (executor start, commit, round
 * trips), not per row.  So POST /v1/jobs does not write its job itself: it
 * suspends its connection and hands the job to this module (api_job_submit).
 * Two threads do the rest, one batch behind the other: the writer takes
 * every job waiting (up to API_BATCH_MAX), writes them all with one
 * statement on its own connection and resumes their connections, whose
 * threads answer; the courier puts the batch on Redis with one script run
 * while the writer writes the next batch (once API_BATCH_OVERLAP jobs
 * wait; fewer wait for the courier).  Jobs that arrive meanwhile wait
 * for the next batch, so batches grow with the load; the HTTP threads never
 * block on a batch, so every request in flight can join one.  A lone job is
 * a batch of one: nothing waits for a timer.  (Measured side by side: the
 * two stages take 11% more jobs per second than one thread doing both, whose
 * batches are twice as large but which leaves CPU idle while it waits;
 * two such threads lose, their batches split without the stages'
 * overlap.)
 *
 * The statement writes what the API hands it and reads nothing back but
 * the outbox ids: the job's document and created_at come from api_jobs.c.
 *
 * Delivered outbox rows are deleted by the next batch's statement (one
 * statement and one commit per batch under load); when no batch comes
 * within API_FLUSH_DELAY_MS, the courier deletes them itself.  Until
 * then, or if the process dies first, the rows stay pending and the relay
 * enqueues the jobs again, which Redis ignores (enqueue is idempotent).
 *
 * Each job's rows are still one transaction (the statement), so a failure
 * writes nothing for any job of the batch, and each answers 503/500.  A
 * client's jobs keep the order it sent them in: each created_at is later
 * than the one before (api_job_clock), and a batch reaches Redis in the
 * order its jobs arrived.
 *
 * The state is an api_batcher owned by the server (api_server_start makes
 * it, api_server_stop stops and frees it): one writer and one courier per
 * server, each with its own pooled PostgreSQL connection while it writes. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_log.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API_BATCH_MAX KF_QUEUE_ENQUEUE_MAX   /* one Redis script run per batch */
/* While the courier is on a batch, the writer starts the next one only
 * when this many jobs wait; fewer wait for the courier to finish, which
 * makes the next batch larger (a statement costs PostgreSQL more than a
 * row).  Side by side, 4 against 0 (always start): 7,945 vs 7,607 POST/s at
 * 16 clients, 9,051 vs 7,510 at 32; 8 did no better than 4. */
#define API_BATCH_OVERLAP 4
/* How long delivered outbox ids wait for the next batch's statement to
 * delete them before the courier deletes them with one of its own.  Far
 * below the relay's 1 s (it leaves younger rows to the API); long enough
 * that at a few requests in flight the next batch carries them, instead
 * of a DELETE and a commit of their own after every batch. */
#define API_FLUSH_DELAY_MS 20

/* A batch written and answered, on its way to Redis (enq NULL when
 * nothing is to be enqueued), with its 'job created' log lines. */
typedef struct api_enq api_enq;
typedef struct api_written {
    api_enq            *enq;
    kf_buf              lines;
    struct api_written *next;
} api_written;

struct api_batcher {
    api_pg_pool    *pg;           /* the server's, borrowed */
    api_qpool      *q;            /* the server's, borrowed */
    pthread_mutex_t mu;
    pthread_cond_t  writer_cv;    /* the writer waits on it */
    pthread_cond_t  courier_cv;   /* the courier waits on it */
    /* Under mu: */
    api_new_job    *head, *tail;  /* handed over, not yet taken */
    int             waiting;      /* how many */
    bool            stopping, writer_done;
    bool            writing;      /* the writer is in a statement */
    bool            courier_busy; /* the courier is on a batch */
    api_written    *done_head, *done_tail;   /* answered, for the courier */
    int64_t        *delivered;    /* outbox ids on Redis whose rows are not deleted yet */
    size_t          n_delivered, cap_delivered;
    /* Set once: */
    pthread_t       writer, courier;
    bool            courier_started, writer_started;
    atomic_ulong    batches, jobs;
};

/* The batch's rows, written by the set form of the transition table's
 * CREATE move (db/kf_db.h); the final INSERT maps each job to its outbox
 * row.  Every column comes from the API (created_at included), so nothing
 * is read back.  The columns arrive as one array each in PostgreSQL's
 * binary format (api_batch_arrays): nothing for the server to parse but
 * the four JSON documents per job, where a JSON array of the batch cost it
 * a fifth of its CPU per job.  Two forms: the one for batches with an
 * Idempotency-Key also stores those jobs' answers; the other plans no
 * idempotency join. */

static const api_stmt api_st_batch_create = {
    3, "kf_job_create_batch_v6", kf_db_sql_create_batch, KF_DB_CREATE_BATCH_PARAMS,
};

static const api_stmt api_st_batch_create_idem = {
    5, "kf_job_create_batch_idem_v6", kf_db_sql_create_batch_idem, KF_DB_CREATE_BATCH_PARAMS,
};

/* Delivered: the outbox rows go.  Losing this commit in a crash only makes
 * the relay enqueue the jobs again, which Redis ignores (enqueue is
 * idempotent and the relay skips jobs no longer queued), so it does not
 * wait for the WAL flush. */
static const api_stmt api_st_batch_sent = {
    4, "kf_outbox_delivered_batch_v2",
    "WITH c AS (SELECT set_config('synchronous_commit', 'off', true)) "
    "DELETE FROM outbox WHERE id = ANY($1::bigint[]) AND EXISTS (SELECT 1 FROM c)",
    1,
};

/* ---- PostgreSQL ------------------------------------------------------------------ */

/* Run st on a pooled connection; a connection found broken is re-opened
 * and the statement sent once more.  NULL with *status 503 (PostgreSQL
 * away or busy) or 500 (refused: a bug) after logging. */
static PGresult *api_batch_exec(api_batcher *b, const char *who, const api_stmt *st, const char *const *params,
                                const int *lengths, const int *formats, int *status)
{
    kf_err e = KF_ERR_INIT;
    PGconn *c = api_pg_acquire(b->pg, 5000, &e);
    PGresult *res = NULL;

    for (int attempt = 0; c && !res && attempt < 2; attempt++) {
        res = kf_pg_exec_stmt(c, api_pg_prepared(b->pg, c), st, params, lengths, formats, &e);
        if (!res && PQstatus(c) == CONNECTION_BAD)
            api_pg_reset(b->pg, c);   /* the server went away since this connection was last used */
        else
            break;
    }
    api_pg_release(b->pg, c);
    if (!res) {
        *status = e.code == KF_UNAVAILABLE ? 503 : 500;
        if (*status == 503)
            kf_log_warn("postgres unavailable in=%s msg=\"%s\"", who, e.msg);
        else
            kf_log_error("statement failed in=%s msg=\"%s\"", who, e.msg);
    }
    return res;
}

/* The batch's columns, one binary array each, indexed by kf_db_create_col
 * (spec, budget, goal and labels are the API's own printed JSON; the
 * document only for jobs with an Idempotency-Key).  *idem: any has one.
 * False when an id is not a UUID. */
static bool api_batch_arrays(api_new_job *batch, int n, kf_pg_array col[KF_DB_COL__COUNT], bool *idem)
{
    bool ok = true;

    *idem = false;
    for (int c = 0; c < KF_DB_COL__COUNT; c++)
        kf_pg_array_init(&col[c], kf_db_create_batch_types[c], c == KF_DB_COL_DELIVERED ? 0 : (size_t)n);
    for (api_new_job *p = batch; p; p = p->next) {
        kf_pg_array_uuid(&col[KF_DB_COL_ID], p->id);
        kf_pg_array_text(&col[KF_DB_COL_KIND], p->kind);
        kf_pg_array_text(&col[KF_DB_COL_TARGET], p->target);
        kf_pg_array_text(&col[KF_DB_COL_BACKEND], p->backend);
        kf_pg_array_int4(&col[KF_DB_COL_PRIORITY], p->priority);
        kf_pg_array_jsonb(&col[KF_DB_COL_SPEC], p->spec);
        kf_pg_array_jsonb(&col[KF_DB_COL_BUDGET], p->budget);
        kf_pg_array_jsonb(&col[KF_DB_COL_GOAL], p->goal);
        kf_pg_array_jsonb(&col[KF_DB_COL_LABELS], p->labels);
        kf_pg_array_int4(&col[KF_DB_COL_MAX_ATTEMPTS], p->max_attempts);
        kf_pg_array_int8(&col[KF_DB_COL_OWNER], p->owner);
        kf_pg_array_text(&col[KF_DB_COL_IDEM_KEY], p->idem_key);
        kf_pg_array_timestamptz(&col[KF_DB_COL_CREATED_AT], p->created_us);
        kf_pg_array_text(&col[KF_DB_COL_DOC], p->idem_key ? p->doc : NULL);
        kf_pg_array_null(&col[KF_DB_COL_BATCH]);         /* POST /v1/jobs: in no batch */
        kf_pg_array_null(&col[KF_DB_COL_BATCH_ENTRY]);
        if (p->idem_key)
            *idem = true;
    }
    for (int c = 0; c < KF_DB_COL__COUNT; c++)
        if (c != KF_DB_COL_DELIVERED && !kf_pg_array_done(&col[c]))
            ok = false;
    return ok;
}

/* ---- delivered outbox ids ----------------------------------------------------------- */

/* Append n ids to the delivered list.  Caller holds b->mu. */
static void api_delivered_add(api_batcher *b, const int64_t *ids, size_t n)
{
    if (b->n_delivered + n > b->cap_delivered) {
        size_t cap = b->cap_delivered ? b->cap_delivered : 64;
        while (cap < b->n_delivered + n)
            cap *= 2;
        b->delivered = kf_realloc(b->delivered, cap * sizeof(*b->delivered));
        b->cap_delivered = cap;
    }
    memcpy(b->delivered + b->n_delivered, ids, n * sizeof(*ids));
    b->n_delivered += n;
}

/* The delivered ids as a binary bigint[] in *arr, emptying the list;
 * false (arr untouched) when there are none.  Caller holds b->mu. */
static bool api_delivered_take(api_batcher *b, kf_pg_array *arr)
{
    if (b->n_delivered == 0)
        return false;
    kf_pg_array_init(arr, KF_PG_INT8, b->n_delivered);
    for (size_t i = 0; i < b->n_delivered; i++)
        kf_pg_array_int8(arr, b->delivered[i]);
    kf_pg_array_done(arr);
    b->n_delivered = 0;
    return true;
}

/* The ids of arr (built by api_delivered_take) back on the list, after a
 * statement that was to delete them failed. */
static void api_delivered_give_back(api_batcher *b, const int64_t *ids, size_t n)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&b->mu);
    api_delivered_add(b, ids, n);
    pthread_mutex_unlock(&b->mu);
}

/* What a taken list held, to give back on failure. */
typedef struct api_taken {
    bool     any;
    kf_pg_array arr;
    int64_t *ids;
    size_t   n;
} api_taken;

/* Take the delivered list (caller holds b->mu). */
static void api_taken_take(api_batcher *b, api_taken *t)
{
    memset(t, 0, sizeof(*t));
    if (b->n_delivered == 0)
        return;
    t->n = b->n_delivered;
    t->ids = kf_malloc(t->n * sizeof(*t->ids));
    memcpy(t->ids, b->delivered, t->n * sizeof(*t->ids));
    t->any = api_delivered_take(b, &t->arr);
}

static void api_taken_release(api_taken *t)
{
    if (t->any)
        kf_pg_array_release(&t->arr);
    free(t->ids);
    memset(t, 0, sizeof(*t));
}

/* Delete the delivered outbox rows now (no batch is coming to take them). */
static void api_batch_flush(api_batcher *b)
{
    api_taken t;
    const char *params[1];
    int lengths[1], formats[1] = { 1 }, status = 0;
    PGresult *res;

    pthread_mutex_lock(&b->mu);
    api_taken_take(b, &t);
    pthread_mutex_unlock(&b->mu);
    if (!t.any)
        return;
    params[0] = t.arr.buf.data;
    lengths[0] = (int)t.arr.buf.len;
    res = api_batch_exec(b, "batch-courier", &api_st_batch_sent, params, lengths, formats, &status);
    if (!res) {
        kf_log_warn("delivered outbox rows not deleted yet (retried with the next batch; the relay may resend, "
                    "enqueue is idempotent)");
        api_delivered_give_back(b, t.ids, t.n);
    }
    PQclear(res);
    api_taken_release(&t);
}

/* ---- Redis ---------------------------------------------------------------------------- */

/* A committed batch's jobs as Redis takes them, copied out of the
 * requests so that those can be answered (and freed) before the batch
 * goes to Redis. */
struct api_enq {
    int          m;                          /* jobs to enqueue */
    kf_queue_job qj[API_BATCH_MAX];
    char        *payload[API_BATCH_MAX];     /* each job's payload (kf_job_payload_build) */
    char        *names[API_BATCH_MAX];       /* each job's id, kind, target and backend, one block */
    int64_t      outbox[API_BATCH_MAX];      /* their outbox ids */
};

static void api_enq_free(api_enq *q)
{
    if (!q)
        return;
    for (int i = 0; i < q->m; i++) {
        free(q->payload[i]);
        free(q->names[i]);
    }
    free(q);
}

/* What enqueueing the batch's written jobs (outbox ids by position) needs.
 * NULL when there is nothing to enqueue, or a payload cannot be built:
 * the relay then queues the jobs. */
static api_enq *api_enq_new(api_new_job *batch, const int64_t *outbox_ids)
{
    api_enq *q = kf_calloc(1, sizeof(*q));
    kf_err e = KF_ERR_INIT;
    int i = 0;

    for (api_new_job *p = batch; p; p = p->next, i++) {
        kf_queue_job *j = &q->qj[q->m];
        size_t li, lk, lt, lb;
        char *names;

        if (p->status != 202)
            continue;
        q->payload[q->m] =
            kf_job_payload_build(p->id, p->kind, p->target, p->backend, p->spec, p->budget, p->goal, &e);
        if (!q->payload[q->m]) {
            kf_log_warn("jobs accepted but not queued yet; the scheduler's outbox relay will queue them msg=\"%s\"",
                        e.msg);
            api_enq_free(q);
            return NULL;
        }
        li = strlen(p->id) + 1;
        lk = strlen(p->kind) + 1;
        lt = strlen(p->target) + 1;
        lb = strlen(p->backend) + 1;
        names = q->names[q->m] = kf_malloc(li + lk + lt + lb);
        j->id = memcpy(names, p->id, li);
        j->kind = memcpy(names + li, p->kind, lk);
        j->target = memcpy(names + li + lk, p->target, lt);
        j->backend = memcpy(names + li + lk + lt, p->backend, lb);
        j->payload = q->payload[q->m];
        j->priority = p->priority;
        j->attempt = 0;
        j->max_attempts = p->max_attempts;
        q->outbox[q->m] = outbox_ids[i];
        q->m++;
    }
    if (q->m == 0) {
        api_enq_free(q);
        return NULL;
    }
    return q;
}

/* Redis (one script run for the batch), then the delivered outbox ids go
 * on the list for the next statement to delete.  Redis away: the relay
 * queues them all (enqueue is idempotent). */
static void api_enq_send(api_batcher *b, api_enq *q)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *rq = api_qpool_get(b->q, &e);

    if (rq && kf_queue_enqueue_many(rq, q->qj, q->m, NULL, &e) == KF_OK)
        api_delivered_give_back(b, q->outbox, (size_t)q->m);
    else
        kf_log_warn("%d jobs accepted but not queued yet; the scheduler's outbox relay will queue them msg=\"%s\"",
                    q->m, e.msg);
    api_qpool_put(b->q, rq);
}

/* ---- the writer ----------------------------------------------------------------------- */

/* The PostgreSQL step: write the batch (and delete the delivered outbox
 * ids of earlier batches in t).  Sets each job's status; returns the
 * outbox ids by position (caller frees), or NULL when nothing was
 * written (t's ids then go back on the list). */
static int64_t *api_batch_write(api_batcher *b, api_new_job *batch, int n, api_taken *t)
{
    bool idem;
    kf_pg_array col[KF_DB_COL__COUNT];
    const char *params[KF_DB_COL__COUNT];
    int lengths[KF_DB_COL__COUNT], formats[KF_DB_COL__COUNT];
    int64_t *outbox_ids = NULL;
    int fail = 500, i;
    PGresult *res = NULL;

    if (api_batch_arrays(batch, n, col, &idem)) {
        kf_pg_array *del = &col[KF_DB_COL_DELIVERED];

        if (t->any) {
            kf_pg_array_release(del);
            *del = t->arr;
            t->any = false;   /* col owns it now */
        } else {
            kf_pg_array_done(del);   /* empty */
        }
        for (i = 0; i < KF_DB_COL__COUNT; i++) {
            params[i] = col[i].buf.data;
            lengths[i] = (int)col[i].buf.len;
            formats[i] = 1;
        }
        res = api_batch_exec(b, "batch-writer", idem ? &api_st_batch_create_idem : &api_st_batch_create, params,
                             lengths, formats, &fail);
    } else {
        kf_log_error("job batch not written: a job id is not a UUID");
    }
    for (i = 0; i < KF_DB_COL__COUNT; i++)
        kf_pg_array_release(&col[i]);
    if (!res) {
        for (api_new_job *p = batch; p; p = p->next)
            p->status = fail;
        api_delivered_give_back(b, t->ids, t->n);
        return NULL;
    }
    outbox_ids = kf_calloc((size_t)n, sizeof(*outbox_ids));
    i = 0;
    for (api_new_job *p = batch; p; p = p->next, i++) {
        int rows = PQntuples(res);
        p->status = 500;
        /* RETURNING gives the rows in the input's order in practice, which
         * SQL does not promise: the same position is looked at first. */
        for (int k = 0; k < rows; k++) {
            int row = (i + k) % rows;
            if (strcmp(PQgetvalue(res, row, 0), p->id) == 0) {
                long id = 0;
                kf_err e = KF_ERR_INIT;
                if (kf_db_num(res, row, 1, 1, LONG_MAX, &id, &e) == KF_OK) {
                    p->status = 202;
                    outbox_ids[i] = id;
                } else {
                    kf_log_error("job batch: %s", e.msg);
                }
                break;
            }
        }
    }
    kf_log_debug("job batch written n=%d", n);
    atomic_fetch_add(&b->batches, 1);
    atomic_fetch_add(&b->jobs, (unsigned long)n);
    PQclear(res);
    return outbox_ids;
}

/* Right after the commit, in the writer: copy what Redis needs out of the
 * batch (outbox ids by position, NULL when nothing was written), make the
 * log lines, and answer every request (each job's own thread does, once
 * resumed; it may free the job at once, so next is read first).  The
 * answers go before the enqueue: a job is accepted once committed (its
 * outbox row puts it on Redis if this process cannot), and the sooner its
 * client has the answer, the sooner its next request can join a batch. */
static api_written *api_batch_answer(api_new_job *batch, const int64_t *ids)
{
    api_written *done = kf_calloc(1, sizeof(*done));
    api_new_job *p, *next;

    kf_buf_init(&done->lines);
    if (ids)
        done->enq = api_enq_new(batch, ids);
    for (p = batch; p; p = next) {
        next = p->next;
        p->next = NULL;
        if (p->status == 202)
            kf_log_add(&done->lines, KF_LOG_INFO, "job created job=%s kind=%s target=%s owner=%lld req=%s", p->id,
                       p->kind, p->target, (long long)p->owner, p->req->request_id);
        api_req_resume(p->req);
    }
    return done;
}

/* Whether the writer may take a batch now: jobs wait, and the courier is
 * idle or API_BATCH_OVERLAP of them wait.  Caller holds b->mu. */
static bool api_writer_may_start(const api_batcher *b)
{
    return b->head && (!(b->courier_busy || b->done_head) || b->waiting >= API_BATCH_OVERLAP);
}

/* The writer: batch after batch into PostgreSQL, each passed on to the
 * courier, until stopped with nothing left. */
static void *api_writer_main(void *arg)
{
    api_batcher *b = arg;

    pthread_mutex_lock(&b->mu);
    for (;;) {
        api_new_job *batch, *last;
        api_written *done;
        api_taken t;
        int64_t *ids;
        int n;

        while (!b->stopping && !api_writer_may_start(b))
            pthread_cond_wait(&b->writer_cv, &b->mu);
        if (!b->head)
            break;
        batch = last = b->head;
        for (n = 1; n < API_BATCH_MAX && last->next; n++)
            last = last->next;
        b->waiting -= n;
        b->head = last->next;
        if (!b->head)
            b->tail = NULL;
        last->next = NULL;
        api_taken_take(b, &t);
        b->writing = true;
        pthread_mutex_unlock(&b->mu);

        ids = api_batch_write(b, batch, n, &t);
        api_taken_release(&t);
        done = api_batch_answer(batch, ids);
        free(ids);

        pthread_mutex_lock(&b->mu);
        b->writing = false;
        if (b->done_tail)
            b->done_tail->next = done;
        else
            b->done_head = done;
        b->done_tail = done;
        pthread_cond_signal(&b->courier_cv);
    }
    b->writer_done = true;
    pthread_cond_signal(&b->courier_cv);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- the courier ---------------------------------------------------------------------- */

/* Each answered batch onto Redis and its log lines out, while the writer
 * writes the next one; last, the delivered outbox rows. */
static void *api_courier_main(void *arg)
{
    api_batcher *b = arg;
    bool flush_due = false;   /* delivered ids may wait; delete them at `due` */
    struct timespec due = { 0, 0 };

    pthread_mutex_lock(&b->mu);
    for (;;) {
        api_written *done;

        while (!b->done_head && !b->writer_done) {
            if (!flush_due) {
                pthread_cond_wait(&b->courier_cv, &b->mu);
                continue;
            }
            if (pthread_cond_clockwait(&b->courier_cv, &b->mu, CLOCK_MONOTONIC, &due) != ETIMEDOUT)
                continue;
            /* No batch came to take them: delete them now (unless one
             * is being written, which took them). */
            flush_due = false;
            if (b->n_delivered && !b->writing) {
                pthread_mutex_unlock(&b->mu);
                api_batch_flush(b);
                pthread_mutex_lock(&b->mu);
            }
        }
        if (!b->done_head)
            break;
        done = b->done_head;
        b->done_head = done->next;
        if (!b->done_head)
            b->done_tail = NULL;
        b->courier_busy = true;
        pthread_mutex_unlock(&b->mu);

        if (done->enq)
            api_enq_send(b, done->enq);
        api_enq_free(done->enq);
        kf_log_flush(&done->lines);
        kf_buf_release(&done->lines);
        free(done);
        /* The delivered ids ride with the next batch's statement; if
         * none comes within API_FLUSH_DELAY_MS, the wait above deletes
         * them with a statement of their own. */
        clock_gettime(CLOCK_MONOTONIC, &due);
        due.tv_nsec += API_FLUSH_DELAY_MS * 1000000L;
        if (due.tv_nsec >= 1000000000L) {
            due.tv_sec++;
            due.tv_nsec -= 1000000000L;
        }
        flush_due = true;
        pthread_mutex_lock(&b->mu);
        b->courier_busy = false;
        pthread_cond_signal(&b->writer_cv);   /* the writer may be waiting for this */
    }
    pthread_mutex_unlock(&b->mu);
    api_batch_flush(b);
    return NULL;
}

/* ---- life ----------------------------------------------------------------------------- */

static void api_batcher_free(api_batcher *b)
{
    pthread_cond_destroy(&b->writer_cv);
    pthread_cond_destroy(&b->courier_cv);
    pthread_mutex_destroy(&b->mu);
    free(b->delivered);
    free(b);
}

api_batcher *api_batch_start(api_pg_pool *pg, api_qpool *q, kf_err *err)
{
    api_batcher *b = kf_calloc(1, sizeof(*b));
    int rc;

    b->pg = pg;
    b->q = q;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->courier_cv, NULL);   /* waited on with CLOCK_MONOTONIC deadlines */
    pthread_cond_init(&b->writer_cv, NULL);
    rc = pthread_create(&b->courier, NULL, api_courier_main, b);
    if (rc == 0) {
        b->courier_started = true;
        rc = pthread_create(&b->writer, NULL, api_writer_main, b);
    }
    if (rc == 0) {
        b->writer_started = true;
        return b;
    }
    if (b->courier_started) {
        pthread_mutex_lock(&b->mu);
        b->writer_done = true;
        pthread_cond_signal(&b->courier_cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->courier, NULL);
    }
    api_batcher_free(b);
    kf_err_set(err, KF_INTERNAL, "cannot start the job writer threads: %s", strerror(rc));
    return NULL;
}

void api_batch_stop(api_batcher *b)
{
    bool was;

    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    was = b->stopping;
    b->stopping = true;
    pthread_cond_signal(&b->writer_cv);
    pthread_mutex_unlock(&b->mu);
    if (was)
        return;
    pthread_join(b->writer, NULL);   /* it tells the courier it is done */
    pthread_join(b->courier, NULL);
}

void api_batch_free(api_batcher *b)
{
    if (!b)
        return;
    api_batch_stop(b);
    api_batcher_free(b);
}

bool api_job_submit(api_batcher *b, api_new_job *nj)
{
    nj->next = NULL;
    nj->status = 0;
    pthread_mutex_lock(&b->mu);
    if (b->stopping) {
        pthread_mutex_unlock(&b->mu);
        nj->status = 503;
        return false;
    }
    if (b->tail)
        b->tail->next = nj;
    else
        b->head = nj;
    b->tail = nj;
    b->waiting++;
    if (api_writer_may_start(b))
        pthread_cond_signal(&b->writer_cv);
    pthread_mutex_unlock(&b->mu);
    return true;
}

void api_batch_metrics(api_batcher *b, kf_buf *out)
{
    kf_buf_addf(out,
                "# HELP kforge_api_job_batches_total Statements that wrote new jobs (group commit).\n"
                "# TYPE kforge_api_job_batches_total counter\n"
                "kforge_api_job_batches_total %lu\n"
                "# HELP kforge_api_job_batch_jobs_total Jobs written by those statements (divide for the mean batch).\n"
                "# TYPE kforge_api_job_batch_jobs_total counter\n"
                "kforge_api_job_batch_jobs_total %lu\n",
                atomic_load(&b->batches), atomic_load(&b->jobs));
}
