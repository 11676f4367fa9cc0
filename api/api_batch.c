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
 * One writer and one courier per process (kforge-api serves one api_server). */
#include "api.h"
#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_log.h"

#include <errno.h>
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
static pthread_mutex_t api_batch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t api_batch_cv = PTHREAD_COND_INITIALIZER;     /* the writer waits on it */
static pthread_cond_t api_courier_cv = PTHREAD_COND_INITIALIZER;   /* the courier waits on it */
static api_new_job *api_batch_head, *api_batch_tail;   /* handed over, not yet taken */
static bool api_batch_running, api_batch_stopping, api_batch_writer_done;
static bool api_batch_writing;  /* the writer is in a statement */
static int api_batch_waiting;   /* jobs handed over, not yet taken */
static bool api_courier_busy;   /* the courier is on a batch */
/* A batch written and answered, on its way to Redis (enq NULL when
 * nothing is to be enqueued), with its 'job created' log lines. */
typedef struct api_enq api_enq;
typedef struct api_written {
    api_enq            *enq;
    kf_buf              lines;
    struct api_written *next;
} api_written;
static api_written *api_courier_head, *api_courier_tail;
static pthread_t api_writer_thread, api_courier_thread;
static api_req *api_writer_w, *api_courier_w;   /* each one's PostgreSQL connection, Redis handle */
static atomic_ulong api_batch_count, api_batch_jobs;
/* Outbox ids delivered to Redis and not yet deleted, "1,2,3" (under api_batch_mu). */
static kf_buf api_batch_delivered = KF_BUF_INIT;

/* The batch's rows, written by the set form of the transition table's
 * CREATE move (db/kf_db.h); the final INSERT maps each job to its outbox
 * row.  Every column comes from the API (created_at included), so nothing
 * is read back.  The columns arrive as one array each in PostgreSQL's
 * binary format (api_batch_arrays): nothing for the server to parse but
 * the four JSON documents per job, where a JSON array of the batch cost it
 * a fifth of its CPU per job.  Two forms: the one for batches with an
 * Idempotency-Key also stores those jobs' answers; the other plans no
 * idempotency join. */
#define API_BATCH_COLUMNS (KF_DB_CREATE_BATCH_PARAMS - 1)   /* $1..$14; $15 the delivered outbox ids */

static const api_stmt api_st_batch_create = {
    3, "kf_job_create_batch_v4", kf_db_sql_create_batch, KF_DB_CREATE_BATCH_PARAMS,
};

static const api_stmt api_st_batch_create_idem = {
    5, "kf_job_create_batch_idem_v4", kf_db_sql_create_batch_idem, KF_DB_CREATE_BATCH_PARAMS,
};

/* Delivered: the outbox rows go.  Losing this commit in a crash only makes
 * the relay enqueue the jobs again, which Redis ignores (enqueue is
 * idempotent and the relay skips jobs no longer queued), so it does not
 * wait for the WAL flush. */
static const api_stmt api_st_batch_sent = {
    4, "kf_outbox_delivered_batch",
    "WITH c AS (SELECT set_config('synchronous_commit', 'off', true)) "
    "DELETE FROM outbox WHERE id = ANY($1::bigint[]) AND EXISTS (SELECT 1 FROM c)",
    1,
};

/* ---- PostgreSQL's binary array format (array_recv) ----------------------------- */

/* Element type OIDs (pg_type.dat; fixed since PostgreSQL 9.4). */
enum { API_OID_INT8 = 20, API_OID_INT4 = 23, API_OID_TEXT = 25, API_OID_UUID = 2950,
       API_OID_TIMESTAMPTZ = 1184, API_OID_JSONB = 3802 };
/* Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01 UTC. */
#define API_PG_EPOCH_US 946684800000000LL

static void api_be32(kf_buf *b, uint32_t v)
{
    unsigned char *x;

    kf_buf_grow(b, 4);
    x = (unsigned char *)b->data + b->len;
    x[0] = (unsigned char)(v >> 24);
    x[1] = (unsigned char)(v >> 16);
    x[2] = (unsigned char)(v >> 8);
    x[3] = (unsigned char)v;
    b->len += 4;
    b->data[b->len] = '\0';   /* kf_buf's invariant */
}

static void api_be64(kf_buf *b, uint64_t v)
{
    api_be32(b, (uint32_t)(v >> 32));
    api_be32(b, (uint32_t)v);
}

/* A one-dimensional array of n elements of type oid, lower bound 1; the
 * elements follow, each as its length and bytes. */
static void api_arr_begin(kf_buf *b, uint32_t oid, int n)
{
    api_be32(b, 1);            /* dimensions */
    api_be32(b, 0);            /* has nulls: set by api_arr_text(NULL) */
    api_be32(b, oid);
    api_be32(b, (uint32_t)n);
    api_be32(b, 1);
}

static void api_arr_text(kf_buf *b, const char *s)
{
    size_t n;

    if (!s) {
        b->data[7] = 1;        /* the has-nulls word, big-endian */
        api_be32(b, UINT32_MAX);   /* length -1: NULL */
        return;
    }
    n = strlen(s);
    api_be32(b, (uint32_t)n);
    kf_buf_add(b, s, n);
}

static void api_arr_jsonb(kf_buf *b, const char *json)
{
    size_t n = strlen(json);

    api_be32(b, (uint32_t)n + 1);
    kf_buf_addc(b, 1);         /* jsonb's binary form: version 1, then the text */
    kf_buf_add(b, json, n);
}

static void api_arr_int4(kf_buf *b, int32_t v)
{
    api_be32(b, 4);
    api_be32(b, (uint32_t)v);
}

static void api_arr_int8(kf_buf *b, int64_t v)
{
    api_be32(b, 8);
    api_be64(b, (uint64_t)v);
}

static int api_hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* id is one of ours (kf_uuid_v7: 36 characters, checked again here). */
static bool api_arr_uuid(kf_buf *b, const char *id)
{
    unsigned char raw[16];
    int k = 0;

    for (const char *p = id; *p && k < 32; p++) {
        int v;
        if (*p == '-')
            continue;
        if ((v = api_hexval(*p)) < 0)
            return false;
        if (k % 2 == 0)
            raw[k / 2] = (unsigned char)(v << 4);
        else
            raw[k / 2] |= (unsigned char)v;
        k++;
    }
    if (k != 32)
        return false;
    api_be32(b, 16);
    kf_buf_add(b, raw, 16);
    return true;
}

/* The batch's columns, one binary array each, in the order of
 * API_BATCH_SQL_HEAD's $1..$14 (spec, budget, goal and labels are the
 * API's own printed JSON; the document only for jobs with an
 * Idempotency-Key).  *idem: any has one.  False when an id is not a UUID. */
static bool api_batch_arrays(api_new_job *batch, int n, kf_buf col[API_BATCH_COLUMNS], bool *idem)
{
    static const uint32_t oids[API_BATCH_COLUMNS] = {
        API_OID_UUID,  API_OID_TEXT,  API_OID_TEXT,  API_OID_TEXT, API_OID_INT4,        API_OID_JSONB,
        API_OID_JSONB, API_OID_JSONB, API_OID_JSONB, API_OID_INT4, API_OID_INT8,        API_OID_TEXT,
        API_OID_TIMESTAMPTZ, API_OID_TEXT,
    };

    *idem = false;
    for (int c = 0; c < API_BATCH_COLUMNS; c++) {
        kf_buf_init(&col[c]);
        kf_buf_grow(&col[c], 20 + (size_t)n * 32);   /* room for the fixed-size columns */
        api_arr_begin(&col[c], oids[c], n);
    }
    for (api_new_job *p = batch; p; p = p->next) {
        if (!api_arr_uuid(&col[0], p->id))
            return false;
        api_arr_text(&col[1], p->kind);
        api_arr_text(&col[2], p->target);
        api_arr_text(&col[3], p->backend);
        api_arr_int4(&col[4], p->priority);
        api_arr_jsonb(&col[5], p->spec);
        api_arr_jsonb(&col[6], p->budget);
        api_arr_jsonb(&col[7], p->goal);
        api_arr_jsonb(&col[8], p->labels);
        api_arr_int4(&col[9], p->max_attempts);
        api_arr_int8(&col[10], p->owner);
        api_arr_text(&col[11], p->idem_key);
        api_arr_int8(&col[12], p->created_us - API_PG_EPOCH_US);
        api_arr_text(&col[13], p->idem_key ? p->doc : NULL);
        if (p->idem_key)
            *idem = true;
    }
    return true;
}

/* The delivered ids as a PostgreSQL array literal, emptying the list; NULL
 * when there are none.  Caller holds api_batch_mu. */
static char *api_batch_take_delivered(void)
{
    char *ids;

    if (api_batch_delivered.len == 0)
        return NULL;
    ids = kf_asprintf("{%s}", api_batch_delivered.data);
    kf_buf_reset(&api_batch_delivered);
    return ids;
}

/* Ids ("{1,2}" or "1,2") back on the list, after a statement that was to
 * delete them failed or with a batch's newly delivered ones. */
static void api_batch_give_back(const char *ids)
{
    size_t n;

    if (!ids)
        return;
    if (*ids == '{')
        ids++;
    n = strlen(ids);
    if (n > 0 && ids[n - 1] == '}')
        n--;
    if (n == 0)
        return;
    pthread_mutex_lock(&api_batch_mu);
    if (api_batch_delivered.len)
        kf_buf_addc(&api_batch_delivered, ',');
    kf_buf_add(&api_batch_delivered, ids, n);
    pthread_mutex_unlock(&api_batch_mu);
}

/* Delete the delivered outbox rows now (no batch is coming to take them). */
static void api_batch_flush(api_req *w)
{
    char *flush;
    const char *params[1];
    int fail = 0;
    PGresult *res;

    pthread_mutex_lock(&api_batch_mu);
    flush = api_batch_take_delivered();
    pthread_mutex_unlock(&api_batch_mu);
    if (!flush)
        return;
    params[0] = flush;
    res = api_req_stmt_quiet(w, &api_st_batch_sent, params, &fail);
    if (!res) {
        kf_log_warn("delivered outbox rows not deleted yet (retried with the next batch; the relay may resend, "
                    "enqueue is idempotent)");
        api_batch_give_back(flush);
    }
    PQclear(res);
    free(flush);
}

/* A committed batch's jobs as Redis takes them, copied out of the
 * requests so that those can be answered (and freed) before the batch
 * goes to Redis. */
struct api_enq {
    int          m;                          /* jobs to enqueue */
    kf_queue_job qj[API_BATCH_MAX];
    char        *payload[API_BATCH_MAX];     /* each job's payload (kf_job_payload_build) */
    char        *names[API_BATCH_MAX];       /* each job's id, kind, target and backend, one block */
    kf_buf       outbox;                     /* their outbox ids, "1,2,3" */
};

static void api_enq_free(api_enq *q)
{
    if (!q)
        return;
    for (int i = 0; i < q->m; i++) {
        free(q->payload[i]);
        free(q->names[i]);
    }
    kf_buf_release(&q->outbox);
    free(q);
}

/* What enqueueing the batch's written jobs (outbox ids by position) needs.
 * NULL when there is nothing to enqueue, or a payload cannot be built:
 * the relay then queues the jobs. */
static api_enq *api_enq_new(api_new_job *batch, char outbox_ids[][24])
{
    api_enq *q = kf_calloc(1, sizeof(*q));
    kf_err e = KF_ERR_INIT;
    int i = 0;

    kf_buf_init(&q->outbox);
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
        if (q->outbox.len)
            kf_buf_addc(&q->outbox, ',');
        kf_buf_adds(&q->outbox, outbox_ids[i]);
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
static void api_enq_send(api_req *r, api_enq *q)
{
    kf_err e = KF_ERR_INIT;
    kf_queue *rq = api_qpool_get(api_req_qpool(r), &e);

    if (rq && kf_queue_enqueue_many(rq, q->qj, q->m, NULL, &e) == KF_OK)
        api_batch_give_back(q->outbox.data);
    else
        kf_log_warn("%d jobs accepted but not queued yet; the scheduler's outbox relay will queue them msg=\"%s\"",
                    q->m, e.msg);
    api_qpool_put(api_req_qpool(r), rq);
}

/* The PostgreSQL step: write the batch (and delete delivered: outbox ids
 * of earlier batches, "{...}" or NULL).  Sets each job's status; returns
 * the outbox ids by position (caller frees), or NULL when nothing was
 * written. */
static char (*api_batch_write(api_req *r, api_new_job *batch, int n, char *delivered))[24]
{
    bool idem;
    kf_buf col[API_BATCH_COLUMNS];
    const char *params[API_BATCH_COLUMNS + 1];
    int lengths[API_BATCH_COLUMNS + 1], formats[API_BATCH_COLUMNS + 1];
    char(*outbox_ids)[24] = NULL;
    int fail = 500, i;
    PGresult *res = NULL;

    if (api_batch_arrays(batch, n, col, &idem)) {
        for (i = 0; i < API_BATCH_COLUMNS; i++) {
            params[i] = col[i].data;
            lengths[i] = (int)col[i].len;
            formats[i] = 1;
        }
        params[i] = delivered ? delivered : "{}";
        lengths[i] = 0;
        formats[i] = 0;
        res = api_req_stmt_bin(r, idem ? &api_st_batch_create_idem : &api_st_batch_create, params, lengths,
                               formats, &fail);
    } else {
        kf_log_error("job batch not written: a job id is not a UUID req=%s", r->request_id);
    }
    for (i = 0; i < API_BATCH_COLUMNS; i++)
        kf_buf_release(&col[i]);
    if (!res) {
        for (api_new_job *p = batch; p; p = p->next)
            p->status = fail;
        api_batch_give_back(delivered);
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
                size_t len = (size_t)PQgetlength(res, row, 1);
                if (len < sizeof(outbox_ids[i])) {
                    p->status = 202;
                    memcpy(outbox_ids[i], PQgetvalue(res, row, 1), len + 1);
                }
                break;
            }
        }
    }
    kf_log_debug("job batch written n=%d req=%s", n, r->request_id);
    atomic_fetch_add(&api_batch_count, 1);
    atomic_fetch_add(&api_batch_jobs, (unsigned long)n);
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
static api_written *api_batch_answer(api_new_job *batch, char ids[][24])
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
 * idle or API_BATCH_OVERLAP of them wait.  Caller holds api_batch_mu. */
static bool api_writer_may_start(void)
{
    return api_batch_head &&
           (!(api_courier_busy || api_courier_head) || api_batch_waiting >= API_BATCH_OVERLAP);
}

/* The writer: batch after batch into PostgreSQL, each passed on to the
 * courier, until stopped with nothing left. */
static void *api_writer_main(void *arg)
{
    api_req *w = arg;

    pthread_mutex_lock(&api_batch_mu);
    for (;;) {
        api_new_job *batch, *last;
        api_written *done;
        char *delivered, (*ids)[24];
        int n;

        while (!api_batch_stopping && !api_writer_may_start())
            pthread_cond_wait(&api_batch_cv, &api_batch_mu);
        if (!api_batch_head)
            break;
        batch = last = api_batch_head;
        for (n = 1; n < API_BATCH_MAX && last->next; n++)
            last = last->next;
        api_batch_waiting -= n;
        api_batch_head = last->next;
        if (!api_batch_head)
            api_batch_tail = NULL;
        last->next = NULL;
        delivered = api_batch_take_delivered();
        api_batch_writing = true;
        pthread_mutex_unlock(&api_batch_mu);

        ids = api_batch_write(w, batch, n, delivered);
        free(delivered);
        api_req_pg_put(w);   /* a broken connection goes back to be reopened */
        done = api_batch_answer(batch, ids);
        free(ids);

        pthread_mutex_lock(&api_batch_mu);
        api_batch_writing = false;
        if (api_courier_tail)
            api_courier_tail->next = done;
        else
            api_courier_head = done;
        api_courier_tail = done;
        pthread_cond_signal(&api_courier_cv);
    }
    api_batch_writer_done = true;
    pthread_cond_signal(&api_courier_cv);
    pthread_mutex_unlock(&api_batch_mu);
    return NULL;
}

/* The courier: each answered batch onto Redis and its log lines out, while
 * the writer writes the next one; last, the delivered outbox rows. */
static void *api_courier_main(void *arg)
{
    api_req *w = arg;
    bool flush_due = false;   /* delivered ids may wait; delete them at `due` */
    struct timespec due = { 0, 0 };

    pthread_mutex_lock(&api_batch_mu);
    for (;;) {
        api_written *done;

        while (!api_courier_head && !api_batch_writer_done) {
            if (!flush_due) {
                pthread_cond_wait(&api_courier_cv, &api_batch_mu);
                continue;
            }
            if (pthread_cond_clockwait(&api_courier_cv, &api_batch_mu, CLOCK_MONOTONIC, &due) != ETIMEDOUT)
                continue;
            /* No batch came to take them: delete them now (unless one
             * is being written, which took them). */
            flush_due = false;
            if (api_batch_delivered.len && !api_batch_writing) {
                pthread_mutex_unlock(&api_batch_mu);
                api_batch_flush(w);
                api_req_pg_put(w);
                pthread_mutex_lock(&api_batch_mu);
            }
        }
        if (!api_courier_head)
            break;
        done = api_courier_head;
        api_courier_head = done->next;
        if (!api_courier_head)
            api_courier_tail = NULL;
        api_courier_busy = true;
        pthread_mutex_unlock(&api_batch_mu);

        if (done->enq)
            api_enq_send(w, done->enq);
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
        pthread_mutex_lock(&api_batch_mu);
        api_courier_busy = false;
        pthread_cond_signal(&api_batch_cv);   /* the writer may be waiting for this */
    }
    pthread_mutex_unlock(&api_batch_mu);
    api_batch_flush(w);
    api_req_pg_put(w);
    return NULL;
}

static api_req *api_batch_ctx(api_server *s, const char *name)
{
    api_req *w = kf_calloc(1, sizeof(*w));

    w->srv = s;
    snprintf(w->request_id, sizeof(w->request_id), "%s", name);
    return w;
}

bool api_batch_start(api_server *s, kf_err *err)
{
    int rc;

    api_batch_stopping = false;
    api_batch_writer_done = false;
    api_batch_waiting = 0;
    api_courier_busy = false;
    api_writer_w = api_batch_ctx(s, "batch-writer");
    api_courier_w = api_batch_ctx(s, "batch-courier");
    rc = pthread_create(&api_courier_thread, NULL, api_courier_main, api_courier_w);
    if (rc == 0) {
        rc = pthread_create(&api_writer_thread, NULL, api_writer_main, api_writer_w);
        if (rc != 0) {
            pthread_mutex_lock(&api_batch_mu);
            api_batch_writer_done = true;
            pthread_cond_signal(&api_courier_cv);
            pthread_mutex_unlock(&api_batch_mu);
            pthread_join(api_courier_thread, NULL);
        }
    }
    if (rc != 0) {
        free(api_writer_w);
        free(api_courier_w);
        api_writer_w = api_courier_w = NULL;
        kf_err_set(err, KF_INTERNAL, "cannot start the job writer threads: %s", strerror(rc));
        return false;
    }
    api_batch_running = true;
    return true;
}

void api_batch_stop(void)
{
    if (!api_batch_running)
        return;
    pthread_mutex_lock(&api_batch_mu);
    api_batch_stopping = true;
    pthread_cond_signal(&api_batch_cv);
    pthread_mutex_unlock(&api_batch_mu);
    pthread_join(api_writer_thread, NULL);   /* it tells the courier it is done */
    pthread_join(api_courier_thread, NULL);
    api_batch_running = false;
    free(api_writer_w);
    free(api_courier_w);
    api_writer_w = api_courier_w = NULL;
    kf_buf_release(&api_batch_delivered);
}

bool api_job_submit(api_new_job *nj)
{
    nj->next = NULL;
    nj->status = 0;
    pthread_mutex_lock(&api_batch_mu);
    if (!api_batch_running || api_batch_stopping) {
        pthread_mutex_unlock(&api_batch_mu);
        nj->status = 503;
        return false;
    }
    if (api_batch_tail)
        api_batch_tail->next = nj;
    else
        api_batch_head = nj;
    api_batch_tail = nj;
    api_batch_waiting++;
    if (api_writer_may_start())
        pthread_cond_signal(&api_batch_cv);
    pthread_mutex_unlock(&api_batch_mu);
    return true;
}

void api_batch_metrics(kf_buf *out)
{
    kf_buf_addf(out,
                "# HELP kforge_api_job_batches_total Statements that wrote new jobs (group commit).\n"
                "# TYPE kforge_api_job_batches_total counter\n"
                "kforge_api_job_batches_total %lu\n"
                "# HELP kforge_api_job_batch_jobs_total Jobs written by those statements (divide for the mean batch).\n"
                "# TYPE kforge_api_job_batch_jobs_total counter\n"
                "kforge_api_job_batch_jobs_total %lu\n",
                atomic_load(&api_batch_count), atomic_load(&api_batch_jobs));
}
