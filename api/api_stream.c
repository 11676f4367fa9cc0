/* api_stream — live progress as Server-Sent Events (docs/runs.md, "Live
 * progress"): GET /v1/jobs/{id}/stream and GET /v1/stream, fed by one
 * PostgreSQL LISTEN connection (the hub); and a batch's progress, GET
 * /v1/batches/{id}/stream (docs/batches.md): its jobs' events plus a
 * "batch" roll-up event (counts by state, progress) after each batch of
 * state events, until every job of the batch is finished.
 *
 * How an event reaches a client: kf_db_apply inserts a job_events row; its
 * trigger (migration 0010) notifies channel kf_job_events with "<event id>
 * <job id>" at commit; the hub's thread reads a batch of notifications,
 * fetches those rows once (one statement) and appends each, formatted, to
 * the buffer of every stream that wants it, then resumes the streams'
 * connections.  A stream never holds an HTTP pool thread or a pooled
 * PostgreSQL connection while it waits: its response is a content reader
 * that hands MHD what is buffered and, when nothing is, suspends the
 * connection (MHD_suspend_connection from the reader, as microhttpd.h
 * allows); the hub resumes it when it appends (an event, the heartbeat
 * comment every KFORGE_SSE_HEARTBEAT_S, or the close).  A suspended
 * connection neither times out nor notices a disconnect, so the
 * heartbeat is also what finds clients that went away.
 *
 * Catching up: a stream opened with a position (Last-Event-ID or after=),
 * a job stream opened without one (it starts with the job's history), and
 * every stream after the hub's connection was lost and made again, read
 * job_events by id on the hub's connection, a page at a time while its
 * buffer has room, before taking live rows again; live rows at or below
 * what a job stream has are dropped (a job's events are written in id
 * order, under its row lock), and an all-jobs stream drops ids it sent
 * lately (a small ring), so the switch repeats nothing.
 *
 * Bounds: at most KFORGE_MAX_STREAMS streams (503 with Retry-After beyond);
 * a stream's unsent bytes at most KFORGE_SSE_BUFFER_BYTES: a live client
 * that falls that far behind gets a final comment and the close, and
 * resumes with Last-Event-ID (catching up only fills half the buffer a
 * page at a time, so it never closes a stream).
 *
 * Ownership: the hub owns its thread, its connection and the list of
 * streams; a stream is shared by the list and by MHD's response (a
 * reference each).  MHD's free callback only marks the stream gone (it
 * takes no lock but the stream's own, so it cannot wait on a thread that
 * is inside MHD_resume_connection); the hub's thread unlinks gone streams.
 * Lock order: hub->mu, then a stream's mu; MHD is called (suspend, resume)
 * only with a stream's mu held, and only for a suspended stream, which
 * MHD cannot be freeing.  api_stream_hub_close_all() must run before
 * MHD_stop_daemon (it resumes every suspended stream) and
 * api_stream_hub_free() after it.
 *
 * Failure behaviour: PostgreSQL away stops nothing but the hub's reads:
 * it reconnects with backoff (100 ms doubling to 5 s) and the streams then
 * catch up from job_events; heartbeats go on meanwhile.  A stream whose
 * job disappears is closed.  Nothing here fails a request but the limit. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_log.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define API_STREAM_CHANNEL "kf_job_events"
#define API_STREAM_PAGE 200              /* rows per catch-up statement */
#define API_STREAM_BATCH 1000            /* notifications per fetch statement */
#define API_STREAM_RING 128              /* ids an all-jobs stream remembers */
#define API_STREAM_RETRY_MS 3000         /* the retry: hint sent first */
#define API_STREAM_BACKOFF_MIN_MS 100
#define API_STREAM_BACKOFF_MAX_MS 5000

typedef struct api_stream api_stream;

struct api_stream_hub {
    pthread_mutex_t mu;
    api_stream     *head;             /* every open stream (mu) */
    atomic_int      open;             /* streams MHD has not freed: the limit counts these */
    bool            closing;          /* no new streams (mu) */
    int             max;
    int             hb_s;
    size_t          cap;
    char           *dsn;
    int             wake_fd;          /* eventfd: new stream, room again, stop */
    pthread_t       thread;
    bool            started;
    atomic_bool     stop;
    bool            connected_once;   /* the thread's: a later connect is a reconnect */
};

struct api_stream {
    api_stream            *next, *prev;   /* hub->mu */
    api_stream_hub        *hub;
    struct MHD_Connection *conn;
    atomic_int             refs;

    /* Set at open, read-only after. */
    bool             global;
    bool             batch;               /* a batch's stream: its jobs' events and roll-ups */
    char             job_id[37];          /* the job's, or (batch) the batch's id */
    long long        owner;               /* 0: every job (admin) */
    api_stream_query q;
    char            *labels_json;         /* the label filter as a JSON object (global) */

    /* The hub thread's own. */
    long long  last_id;                   /* highest event id appended */
    long long  ring[API_STREAM_RING];
    int        ring_pos;
    atomic_bool catchup;                  /* reading job_events before live rows */
    bool       rollup_due;                /* batch: a state event went out since the last roll-up */

    /* mu */
    pthread_mutex_t mu;
    kf_buf          buf;
    size_t          off;                  /* bytes of buf already handed to MHD */
    bool            suspended;            /* the reader suspended the connection */
    bool            closing;              /* send what is buffered, then end */
    bool            wants_room;           /* catch-up waits for the buffer to drain */
    bool            gone;                 /* MHD freed the response: unlink and drop */
};

static long long api_stream_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void api_stream_wake(api_stream_hub *h)
{
    uint64_t one = 1;
    ssize_t n = write(h->wake_fd, &one, sizeof(one));
    (void)n;   /* EAGAIN: the counter is already non-zero, the hub wakes anyway */
}

static void api_stream_unref(api_stream *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&s->mu);
    kf_buf_release(&s->buf);
    free(s->labels_json);
    free(s);
}

/* ---- a stream's buffer (s->mu) ------------------------------------------------ */

/* Resume the connection if the reader suspended it (s->mu held). */
static void api_stream_kick(api_stream *s)
{
    if (s->suspended) {
        s->suspended = false;
        MHD_resume_connection(s->conn);
    }
}

/* Append text to a stream; a client already behind by more than cap
 * bytes with this text gets a last comment and the close instead (it
 * resumes with Last-Event-ID).  One event larger than cap still goes to a
 * client that has taken everything before it.  False when the stream
 * takes nothing more. */
static bool api_stream_push_locked(api_stream *s, const char *text, size_t len)
{
    size_t pending = s->buf.len - s->off;

    if (s->closing)
        return false;
    if (pending > 0 && pending + len > s->hub->cap) {
        kf_buf_addf(&s->buf,
                    ": closed: this client fell %zu bytes behind (KFORGE_SSE_BUFFER_BYTES); reconnect with "
                    "Last-Event-ID to resume\n\n",
                    pending);
        s->closing = true;
        api_stream_kick(s);
        return false;
    }
    kf_buf_add(&s->buf, text, len);
    api_stream_kick(s);
    return true;
}

/* End the stream after what is buffered (with an end event for a job). */
static void api_stream_end_locked(api_stream *s, const char *state)
{
    if (s->closing)
        return;
    if (state)
        kf_buf_addf(&s->buf, "event: end\ndata: {\"job_id\":\"%s\",\"state\":\"%s\"}\n\n", s->job_id, state);
    s->closing = true;
    api_stream_kick(s);
}

static ssize_t api_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    api_stream *s = cls;
    size_t pending, n;
    bool wake = false;

    (void)pos;
    pthread_mutex_lock(&s->mu);
    pending = s->buf.len - s->off;
    if (pending == 0) {
        if (s->closing) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        /* Nothing to send: let go of the thread until the hub appends. */
        s->suspended = true;
        MHD_suspend_connection(s->conn);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    n = pending < max ? pending : max;
    memcpy(out, s->buf.data + s->off, n);
    s->off += n;
    if (s->off == s->buf.len) {
        /* Drained: a big buffer (a catch-up page) is given back. */
        if (s->buf.cap > 65536)
            kf_buf_release(&s->buf);
        else
            kf_buf_reset(&s->buf);
        s->off = 0;
    } else if (s->off >= s->buf.len / 2) {
        memmove(s->buf.data, s->buf.data + s->off, s->buf.len - s->off);
        s->buf.len -= s->off;
        s->buf.data[s->buf.len] = '\0';
        s->off = 0;
    }
    if (s->wants_room && s->buf.len - s->off < s->hub->cap / 2) {
        s->wants_room = false;
        wake = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (wake)
        api_stream_wake(s->hub);
    return (ssize_t)n;
}

/* MHD is done with the response (the connection closed or the stream
 * ended): the hub's thread unlinks the stream on its next pass. */
static void api_stream_free_cb(void *cls)
{
    api_stream *s = cls;
    api_stream_hub *h = s->hub;

    pthread_mutex_lock(&s->mu);
    s->gone = true;
    s->closing = true;
    s->suspended = false;
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_sub(&h->open, 1);
    kf_log_debug("stream closed job=%s", s->global ? "*" : s->job_id);
    api_stream_wake(h);
    api_stream_unref(s);
}

/* Drop the streams MHD freed (hub->mu held). */
static void api_stream_prune_locked(api_stream_hub *h)
{
    api_stream *s = h->head;

    while (s) {
        api_stream *next = s->next;
        bool gone;
        pthread_mutex_lock(&s->mu);
        gone = s->gone;
        pthread_mutex_unlock(&s->mu);
        if (gone) {
            if (s->prev)
                s->prev->next = s->next;
            else
                h->head = s->next;
            if (s->next)
                s->next->prev = s->prev;
            api_stream_unref(s);
        }
        s = next;
    }
}

/* ---- rows into events ------------------------------------------------------------ */

/* The columns every statement below returns, in this order. */
enum { C_ID, C_JOB, C_TYPE, C_TO, C_DATA, C_OWNER, C_KIND, C_LABELS, C_BATCH, C__N };
#define API_STREAM_COLS                                                                                        \
    "e.id, e.job_id::text, e.type, e.to_state, "                                                               \
    "(CASE WHEN e.type = 'iteration' THEN json_build_object('job_id', e.job_id, 'attempt', e.attempt, 'seq', "  \
    "e.detail->'seq', 'params', coalesce(e.detail->'params', '{}'::jsonb), 'latency_ns', e.detail->'latency_ns', " \
    "'fraction_of_bound', e.detail->'fraction_of_bound', 'correct', e.detail->'correct', 'best_so_far_ns', "    \
    "e.detail->'best_so_far_ns', 'at', e.created_at) ELSE json_build_object('job_id', e.job_id, 'type', e.type, " \
    "'from', e.from_state, 'to', e.to_state, 'attempt', e.attempt, 'at', e.created_at) END)::text, "          \
    "j.owner_token_id, j.kind, j.labels::text, coalesce(j.batch_id::text, '')"

typedef struct api_stream_row {
    long long   id;
    const char *job_id, *type, *to, *kind, *labels, *batch;
    long long   owner;
    kf_buf      text;      /* "id: ...\nevent: ...\ndata: ...\n\n" */
    cJSON      *labels_v;  /* parsed on first need */
} api_stream_row;

static bool api_stream_row_read(const PGresult *res, int i, api_stream_row *row)
{
    const char *data;

    if (PQgetisnull(res, i, C_ID))
        return false;
    row->id = strtoll(PQgetvalue(res, i, C_ID), NULL, 10);
    row->job_id = PQgetvalue(res, i, C_JOB);
    row->type = PQgetvalue(res, i, C_TYPE);
    row->to = PQgetvalue(res, i, C_TO);
    row->owner = strtoll(PQgetvalue(res, i, C_OWNER), NULL, 10);
    row->kind = PQgetvalue(res, i, C_KIND);
    row->labels = PQgetvalue(res, i, C_LABELS);
    row->batch = PQgetvalue(res, i, C_BATCH);
    row->labels_v = NULL;
    data = PQgetvalue(res, i, C_DATA);
    kf_buf_init(&row->text);
    kf_buf_addf(&row->text, "id: %lld\nevent: %s\ndata: ", row->id,
                strcmp(row->type, "iteration") == 0 ? "iteration" : "state");
    /* One data: line: JSON text holds no raw line break but as whitespace. */
    for (const char *p = data; *p; p++) {
        char ch = *p;
        if (ch == '\n' || ch == '\r')
            ch = ' ';
        kf_buf_addc(&row->text, ch);
    }
    kf_buf_adds(&row->text, "\n\n");
    return true;
}

static void api_stream_row_free(api_stream_row *row)
{
    kf_buf_release(&row->text);
    cJSON_Delete(row->labels_v);
}

/* A state event that leaves the job final ends its job's stream. */
static bool api_stream_row_final(const api_stream_row *row)
{
    return strcmp(row->type, "iteration") != 0 && row->to[0] && kf_state_terminal(kf_state_parse(row->to));
}

/* The ids an all-jobs stream sent lately (0 never is an event id). */
static bool api_stream_ring_has(const api_stream *s, long long id)
{
    for (int i = 0; i < API_STREAM_RING; i++)
        if (s->ring[i] == id)
            return true;
    return false;
}

static void api_stream_ring_add(api_stream *s, long long id)
{
    s->ring[s->ring_pos] = id;
    s->ring_pos = (s->ring_pos + 1) % API_STREAM_RING;
}

/* Whether an all-jobs (or a batch's) stream may see the row's job. */
static bool api_stream_wants(const api_stream *s, api_stream_row *row)
{
    if (s->batch)
        return strcmp(s->job_id, row->batch) == 0;
    if (s->owner && s->owner != row->owner)
        return false;
    if (s->q.n_labels && !row->labels_v)
        row->labels_v = cJSON_Parse(row->labels);
    return api_stream_query_match(&s->q, row->kind, row->labels_v);
}

/* Give a row to a stream (hub thread; s->mu taken here).  Live rows skip
 * what the stream already has. */
static void api_stream_give(api_stream *s, api_stream_row *row, bool live)
{
    if (s->global || s->batch) {
        if (live && api_stream_ring_has(s, row->id))
            return;
        if (!api_stream_wants(s, row))
            return;
    } else {
        if (strcmp(s->job_id, row->job_id) != 0 || row->id <= s->last_id)
            return;
    }
    pthread_mutex_lock(&s->mu);
    if (api_stream_push_locked(s, row->text.data, row->text.len)) {
        if (row->id > s->last_id)
            s->last_id = row->id;
        if (s->global || s->batch)
            api_stream_ring_add(s, row->id);
        if (s->batch && strcmp(row->type, "iteration") != 0)
            s->rollup_due = true;
        else if (live && api_stream_row_final(row))
            api_stream_end_locked(s, row->to);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- the hub's thread ---------------------------------------------------------------- */

typedef struct api_stream_conn {
    PGconn   *pg;
    int       backoff_ms;
    long long retry_at_ms;
} api_stream_conn;

static void api_stream_mark_catchup(api_stream_hub *h)
{
    pthread_mutex_lock(&h->mu);
    for (api_stream *s = h->head; s; s = s->next)
        atomic_store(&s->catchup, true);
    pthread_mutex_unlock(&h->mu);
}

static void api_stream_disconnect(api_stream_conn *c, const char *why)
{
    if (!c->pg)
        return;
    kf_log_warn("stream hub lost PostgreSQL msg=\"%.*s\"; streams catch up from job_events once it is back",
                (int)strcspn(why, "\n"), why);
    PQfinish(c->pg);
    c->pg = NULL;
    c->backoff_ms = API_STREAM_BACKOFF_MIN_MS;
    c->retry_at_ms = api_stream_now_ms();
}

/* Connect and LISTEN; on success every stream catches up (notifications
 * sent while the hub had no connection are lost, the rows are not). */
static void api_stream_connect(api_stream_hub *h, api_stream_conn *c)
{
    kf_err e = KF_ERR_INIT;
    PGresult *res;

    c->pg = api_pg_connect(h->dsn, &e);
    if (c->pg) {
        res = PQexec(c->pg, "LISTEN " API_STREAM_CHANNEL);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            snprintf(e.msg, sizeof(e.msg), "%s", PQerrorMessage(c->pg));
            PQfinish(c->pg);
            c->pg = NULL;
        }
        PQclear(res);
    }
    if (!c->pg) {
        kf_log_debug("stream hub cannot reach PostgreSQL msg=\"%.*s\" retry_ms=%d", (int)strcspn(e.msg, "\n"),
                     e.msg, c->backoff_ms);
        c->retry_at_ms = api_stream_now_ms() + c->backoff_ms;
        c->backoff_ms = c->backoff_ms * 2 > API_STREAM_BACKOFF_MAX_MS ? API_STREAM_BACKOFF_MAX_MS : c->backoff_ms * 2;
        return;
    }
    PQsetnonblocking(c->pg, 0);
    c->backoff_ms = API_STREAM_BACKOFF_MIN_MS;
    if (h->connected_once)
        kf_log_info("stream hub reconnected to PostgreSQL; streams catch up from job_events");
    h->connected_once = true;
    api_stream_mark_catchup(h);
}

/* A notification's payload "<event id> <job id>", checked: it goes into
 * an array parameter. */
static bool api_stream_payload(const char *p, char *id, size_t idcap, char job[37])
{
    size_t n = strspn(p, "0123456789");

    if (n == 0 || n >= idcap || p[n] != ' ' || !kf_uuid_valid(p + n + 1))
        return false;
    memcpy(id, p, n);
    id[n] = '\0';
    memcpy(job, p + n + 1, 37);
    return true;
}

/* Fetch the rows of a batch of notifications and give each to every
 * stream that takes it live.  False when the connection failed. */
static bool api_stream_fanout(api_stream_hub *h, api_stream_conn *c, kf_buf *ids, kf_buf *jobs)
{
    const char *params[2] = { ids->data, jobs->data };
    PGresult *res = PQexecParams(c->pg,
                                 "SELECT " API_STREAM_COLS " FROM unnest($1::bigint[], $2::uuid[]) n(id, job_id) "
                                 "JOIN job_events e ON e.job_id = n.job_id AND e.id = n.id JOIN jobs j ON "
                                 "j.id = e.job_id ORDER BY e.id",
                                 2, NULL, params, NULL, NULL, 0);

    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        api_stream_disconnect(c, PQerrorMessage(c->pg));
        PQclear(res);
        return false;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        api_stream_row row;
        if (!api_stream_row_read(res, i, &row))
            continue;
        pthread_mutex_lock(&h->mu);
        for (api_stream *s = h->head; s; s = s->next)
            if (!atomic_load(&s->catchup))
                api_stream_give(s, &row, true);
        pthread_mutex_unlock(&h->mu);
        api_stream_row_free(&row);
    }
    PQclear(res);
    return true;
}

/* Read every notification waiting on the connection, in batches, until
 * none is left: libpq also queues the ones that arrive while a statement
 * runs, which poll() then never sees. */
static bool api_stream_notifications_once(api_stream_hub *h, api_stream_conn *c, int *seen);

static bool api_stream_notifications(api_stream_hub *h, api_stream_conn *c)
{
    int seen = 1;

    while (seen > 0) {
        seen = 0;
        if (!api_stream_notifications_once(h, c, &seen))
            return false;
    }
    return true;
}

/* Whether some stream takes rows live (is open and caught up).  When none
 * does, a batch of notifications is only consumed: fetching rows that
 * nobody takes was half of PostgreSQL's CPU per POST /v1/jobs on the
 * enqueue benchmark.  A stream that goes live later has caught up from
 * job_events past them, as after any batch it did not take. */
static bool api_stream_any_live(api_stream_hub *h)
{
    bool live = false;

    pthread_mutex_lock(&h->mu);
    for (api_stream *s = h->head; s && !live; s = s->next)
        live = !atomic_load(&s->catchup);
    pthread_mutex_unlock(&h->mu);
    return live;
}

static bool api_stream_notifications_once(api_stream_hub *h, api_stream_conn *c, int *seen)
{
    kf_buf ids = KF_BUF_INIT, jobs = KF_BUF_INIT;
    int n = 0;
    bool ok = true, live = api_stream_any_live(h);
    PGnotify *nt;

    if (!PQconsumeInput(c->pg)) {
        api_stream_disconnect(c, PQerrorMessage(c->pg));
        return false;
    }
    while (ok && (nt = PQnotifies(c->pg)) != NULL) {
        char id[24], job[37];
        if (live && api_stream_payload(nt->extra, id, sizeof(id), job)) {
            kf_buf_adds(&ids, n ? "," : "{");
            kf_buf_adds(&ids, id);
            kf_buf_adds(&jobs, n ? "," : "{");
            kf_buf_adds(&jobs, job);
            n++;
        }
        PQfreemem(nt);
        (*seen)++;
        if (n == API_STREAM_BATCH) {
            kf_buf_addc(&ids, '}');
            kf_buf_addc(&jobs, '}');
            ok = api_stream_fanout(h, c, &ids, &jobs);
            kf_buf_reset(&ids);
            kf_buf_reset(&jobs);
            n = 0;
        }
    }
    if (ok && n) {
        kf_buf_addc(&ids, '}');
        kf_buf_addc(&jobs, '}');
        ok = api_stream_fanout(h, c, &ids, &jobs);
    }
    kf_buf_release(&ids);
    kf_buf_release(&jobs);
    return ok;
}

/* One catch-up page of one stream: the events after its last id, at most
 * API_STREAM_PAGE and, past the first, no more than half its buffer
 * (what fits is all that is read; the rest waits for room).  False when
 * the connection failed. */
static bool api_stream_catchup_one(api_stream_hub *h, api_stream_conn *c, api_stream *s)
{
    char after[24], owner[24], limit[16], bytes[24];
    PGresult *res;
    int rows, events;
    long long page = 0;
    bool full = false, done;

    snprintf(after, sizeof(after), "%lld", s->last_id);
    snprintf(owner, sizeof(owner), "%lld", s->owner);
    snprintf(limit, sizeof(limit), "%d", API_STREAM_PAGE);
    snprintf(bytes, sizeof(bytes), "%zu", h->cap / 2);
    if (s->batch) {
        const char *p[4] = { after, s->job_id, limit, bytes };
        res = PQexecParams(c->pg,
                           "SELECT " API_STREAM_COLS ", e.page FROM (SELECT e.*, count(*) OVER () AS page, "
                           "sum(pg_column_size(e.detail)) OVER (ORDER BY e.id) - pg_column_size(e.detail) "
                           "AS before FROM (SELECT e.* FROM jobs j JOIN job_events e ON e.job_id = j.id "
                           "WHERE j.batch_id = $2::uuid AND e.id > $1::bigint ORDER BY e.id LIMIT $3::int) e) e "
                           "JOIN jobs j ON j.id = e.job_id WHERE e.before < $4::bigint ORDER BY e.id",
                           4, NULL, p, NULL, NULL, 0);
    } else if (s->global) {
        const char *p[6] = { after, owner, s->q.kind, s->labels_json, limit, bytes };
        res = PQexecParams(c->pg,
                           "SELECT " API_STREAM_COLS ", e.page FROM (SELECT e.*, count(*) OVER () AS page, "
                           "sum(pg_column_size(e.detail)) OVER (ORDER BY e.id) - pg_column_size(e.detail) "
                           "AS before FROM (SELECT e.* FROM job_events e JOIN jobs j ON j.id = e.job_id "
                           "WHERE e.id > $1::bigint AND ($2::bigint = 0 OR j.owner_token_id = $2::bigint) "
                           "AND ($3 = '' OR j.kind = $3) AND j.labels @> $4::jsonb ORDER BY e.id LIMIT $5::int) e) e "
                           "JOIN jobs j ON j.id = e.job_id WHERE e.before < $6::bigint ORDER BY e.id",
                           6, NULL, p, NULL, NULL, 0);
    } else {
        const char *p[4] = { s->job_id, after, limit, bytes };
        /* One statement, one snapshot: the job's state matches its rows. */
        res = PQexecParams(c->pg,
                           "SELECT " API_STREAM_COLS ", e.page, j.state FROM jobs j LEFT JOIN LATERAL (SELECT * "
                           "FROM (SELECT e.*, count(*) OVER () AS page, sum(pg_column_size(e.detail)) OVER "
                           "(ORDER BY e.id) - pg_column_size(e.detail) AS before FROM (SELECT * FROM job_events e "
                           "WHERE e.job_id = j.id AND e.id > $2::bigint ORDER BY e.id LIMIT $3::int) e) e "
                           "WHERE e.before < $4::bigint) e ON true WHERE j.id = $1::uuid ORDER BY e.id",
                           4, NULL, p, NULL, NULL, 0);
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        api_stream_disconnect(c, PQerrorMessage(c->pg));
        PQclear(res);
        return false;
    }
    rows = PQntuples(res);
    /* A job's stream has the LEFT JOIN's one row when no event is left. */
    events = (rows == 1 && PQgetisnull(res, 0, C_ID)) ? 0 : rows;
    if (events > 0)
        page = strtoll(PQgetvalue(res, 0, C__N), NULL, 10);
    for (int i = 0; i < events && !full; i++) {
        api_stream_row row;
        if (!api_stream_row_read(res, i, &row))
            continue;
        pthread_mutex_lock(&s->mu);
        {
            size_t pending = s->buf.len - s->off;
            full = pending > 0 && pending + row.text.len > h->cap / 2;
        }
        if (full)
            s->wants_room = true;
        pthread_mutex_unlock(&s->mu);
        if (!full)
            api_stream_give(s, &row, false);
        api_stream_row_free(&row);
    }
    /* Done when this page held every event left and all of them went. */
    done = !full && events == page && page < API_STREAM_PAGE;
    if (!full && events < page) {
        pthread_mutex_lock(&s->mu);
        s->wants_room = s->buf.len - s->off > 0;
        pthread_mutex_unlock(&s->mu);
    }
    if (!s->global && !s->batch) {
        pthread_mutex_lock(&s->mu);
        if (rows == 0)
            api_stream_end_locked(s, NULL);   /* the job is gone */
        else if (done && kf_state_terminal(kf_state_parse(PQgetvalue(res, 0, C__N + 1))))
            api_stream_end_locked(s, PQgetvalue(res, 0, C__N + 1));
        pthread_mutex_unlock(&s->mu);
    }
    if (done) {
        atomic_store(&s->catchup, false);
        if (s->batch)
            s->rollup_due = true;   /* where the catch-up left the batch */
    }
    PQclear(res);
    return true;
}

/* Catch-up pages for every stream that needs one and has room. */
static void api_stream_catchup(api_stream_hub *h, api_stream_conn *c)
{
    enum { MAX_AT_ONCE = 64 };
    api_stream *todo[MAX_AT_ONCE];
    int n = 0;

    pthread_mutex_lock(&h->mu);
    for (api_stream *s = h->head; s && n < MAX_AT_ONCE; s = s->next) {
        bool room;
        if (!atomic_load(&s->catchup))
            continue;
        pthread_mutex_lock(&s->mu);
        room = !s->closing && !s->wants_room;
        pthread_mutex_unlock(&s->mu);
        if (room) {
            atomic_fetch_add(&s->refs, 1);
            todo[n++] = s;
        }
    }
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < n; i++) {
        if (c->pg && !api_stream_catchup_one(h, c, todo[i]))
            kf_log_debug("stream catch-up stopped: PostgreSQL away");
        api_stream_unref(todo[i]);
    }
    if (n == MAX_AT_ONCE)
        api_stream_wake(h);   /* more are waiting: go round again */
}

/* Whether a stream still needs a catch-up page now. */
static bool api_stream_catchup_pending(api_stream_hub *h)
{
    bool any = false;

    pthread_mutex_lock(&h->mu);
    for (api_stream *s = h->head; s && !any; s = s->next) {
        if (!atomic_load(&s->catchup))
            continue;
        pthread_mutex_lock(&s->mu);
        any = !s->closing && !s->wants_room;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return any;
}

/* The roll-up of one batch stream: an event "batch" with its counts by
 * state and progress (no id: Last-Event-ID stays the last job event's);
 * when no job is left unfinished, the end.  False when the connection
 * failed. */
static bool api_stream_rollup_one(api_stream_conn *c, api_stream *s)
{
    const char *p[1] = { s->job_id };
    PGresult *res = PQexecParams(c->pg,
                                 "SELECT json_build_object('batch_id', $1::uuid, 'n_jobs', count(*), 'counts', "
                                 "json_build_object('queued', count(*) FILTER (WHERE state = 'queued'), 'running', "
                                 "count(*) FILTER (WHERE state = 'running'), 'retrying', count(*) FILTER (WHERE "
                                 "state = 'retrying'), 'succeeded', count(*) FILTER (WHERE state = 'succeeded'), "
                                 "'failed', count(*) FILTER (WHERE state = 'failed'), 'cancelled', count(*) FILTER "
                                 "(WHERE state = 'cancelled'), 'dead', count(*) FILTER (WHERE state = 'dead')), "
                                 "'progress', round((count(*) FILTER (WHERE state IN ('succeeded', 'failed', "
                                 "'cancelled', 'dead')))::numeric / greatest(count(*), 1), 4))::text, count(*) "
                                 "FILTER (WHERE state IN ('queued', 'running', 'retrying')) FROM jobs WHERE "
                                 "batch_id = $1::uuid",
                                 1, NULL, p, NULL, NULL, 0);

    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        api_stream_disconnect(c, PQerrorMessage(c->pg));
        PQclear(res);
        return false;
    }
    pthread_mutex_lock(&s->mu);
    if (!s->closing) {
        kf_buf_addf(&s->buf, "event: batch\ndata: %s\n\n", PQgetvalue(res, 0, 0));
        api_stream_kick(s);
        if (strcmp(PQgetvalue(res, 0, 1), "0") == 0) {
            kf_buf_addf(&s->buf, "event: end\ndata: {\"batch_id\":\"%s\",\"state\":\"finished\"}\n\n", s->job_id);
            s->closing = true;
            api_stream_kick(s);
        }
    }
    pthread_mutex_unlock(&s->mu);
    PQclear(res);
    return true;
}

/* Roll-ups for every batch stream that sent a state event since its last
 * one (at most one statement per stream per pass of the hub). */
static void api_stream_rollups(api_stream_hub *h, api_stream_conn *c)
{
    enum { MAX_AT_ONCE = 64 };
    api_stream *todo[MAX_AT_ONCE];
    int n = 0;

    pthread_mutex_lock(&h->mu);
    for (api_stream *s = h->head; s && n < MAX_AT_ONCE; s = s->next) {
        if (!s->batch || !s->rollup_due || atomic_load(&s->catchup))
            continue;
        s->rollup_due = false;
        atomic_fetch_add(&s->refs, 1);
        todo[n++] = s;
    }
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < n; i++) {
        if (c->pg && !api_stream_rollup_one(c, todo[i]))
            todo[i]->rollup_due = true;   /* again once PostgreSQL is back */
        api_stream_unref(todo[i]);
    }
    if (n == MAX_AT_ONCE)
        api_stream_wake(h);
}

static void api_stream_heartbeat(api_stream_hub *h)
{
    static const char hb[] = ": hb\n\n";

    pthread_mutex_lock(&h->mu);
    for (api_stream *s = h->head; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        /* A stream with bytes still to send is not idle (and one stuck
         * behind a full socket is MHD's idle timeout's to close). */
        if (s->buf.len == s->off)
            api_stream_push_locked(s, hb, sizeof(hb) - 1);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

static void *api_stream_main(void *arg)
{
    api_stream_hub *h = arg;
    api_stream_conn c = { NULL, API_STREAM_BACKOFF_MIN_MS, 0 };
    long long next_hb = api_stream_now_ms() + h->hb_s * 1000LL;

    while (!atomic_load(&h->stop)) {
        struct pollfd fds[2];
        int nfds = 1, timeout;
        long long now = api_stream_now_ms();

        pthread_mutex_lock(&h->mu);
        api_stream_prune_locked(h);
        pthread_mutex_unlock(&h->mu);
        if (!c.pg && now >= c.retry_at_ms)
            api_stream_connect(h, &c);
        if (c.pg && api_stream_catchup_pending(h))
            api_stream_catchup(h, &c);
        if (c.pg)
            api_stream_notifications(h, &c);
        if (c.pg)
            api_stream_rollups(h, &c);
        now = api_stream_now_ms();
        if (now >= next_hb) {
            api_stream_heartbeat(h);
            next_hb = now + h->hb_s * 1000LL;
        }
        timeout = (int)(next_hb - now);
        if (!c.pg && c.retry_at_ms - now < timeout)
            timeout = (int)(c.retry_at_ms - now);
        if (timeout < 0)
            timeout = 0;
        fds[0].fd = h->wake_fd;
        fds[0].events = POLLIN;
        if (c.pg) {
            fds[1].fd = PQsocket(c.pg);
            fds[1].events = POLLIN;
            nfds = 2;
        }
        if (poll(fds, (nfds_t)nfds, timeout) < 0 && errno != EINTR) {
            kf_log_error("stream hub: poll failed (%s)", strerror(errno));
            break;
        }
        if (fds[0].revents & POLLIN) {
            uint64_t v;
            ssize_t rd = read(h->wake_fd, &v, sizeof(v));
            (void)rd;
        }
        if (nfds == 2 && c.pg && (fds[1].revents & (POLLIN | POLLERR | POLLHUP))) {
            api_stream_notifications(h, &c);
            if (c.pg)
                api_stream_rollups(h, &c);
        }
    }
    if (c.pg)
        PQfinish(c.pg);
    return NULL;
}

/* ---- the hub's life ---------------------------------------------------------------- */

api_stream_hub *api_stream_hub_start(const api_server_config *cfg, kf_err *err)
{
    api_stream_hub *h = kf_calloc(1, sizeof(*h));

    pthread_mutex_init(&h->mu, NULL);
    h->max = cfg->max_streams;
    h->hb_s = cfg->sse_heartbeat_s > 0 ? cfg->sse_heartbeat_s : 15;
    h->cap = cfg->sse_buffer_bytes > 0 ? (size_t)cfg->sse_buffer_bytes : 1048576;
    h->dsn = kf_strdup(cfg->pg_dsn);
    h->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->wake_fd < 0) {
        kf_err_set(err, KF_IO, "cannot create the stream hub's eventfd (%s); raise the open-file limit",
                   strerror(errno));
        api_stream_hub_free(h);
        return NULL;
    }
    if (pthread_create(&h->thread, NULL, api_stream_main, h) != 0) {
        kf_err_set(err, KF_IO, "cannot start the stream hub's thread; raise the process or thread limit");
        api_stream_hub_free(h);
        return NULL;
    }
    h->started = true;
    return h;
}

void api_stream_hub_close_all(api_stream_hub *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->closing = true;
    pthread_mutex_unlock(&h->mu);
    if (h->started) {
        atomic_store(&h->stop, true);
        api_stream_wake(h);
        pthread_join(h->thread, NULL);
        h->started = false;
    }
    /* MHD refuses to stop with a suspended connection: resume them all;
     * their readers see closing and end the responses. */
    pthread_mutex_lock(&h->mu);
    for (api_stream *s = h->head; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        s->closing = true;
        api_stream_kick(s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

void api_stream_hub_free(api_stream_hub *h)
{
    if (!h)
        return;
    api_stream_hub_close_all(h);
    /* MHD has stopped: every response is freed, every stream gone. */
    pthread_mutex_lock(&h->mu);
    api_stream_prune_locked(h);
    pthread_mutex_unlock(&h->mu);
    if (h->wake_fd >= 0)
        close(h->wake_fd);
    pthread_mutex_destroy(&h->mu);
    free(h->dsn);
    free(h);
}

/* ---- the routes ---------------------------------------------------------------- */

typedef struct api_stream_args {
    api_stream_query *q;
    kf_fields        *fe;
} api_stream_args;

static enum MHD_Result api_stream_arg_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    api_stream_args *a = cls;

    (void)kind;
    api_stream_query_arg(a->q, key, value, a->fe);
    return MHD_YES;
}

/* The query and Last-Event-ID into q (made by api_stream_query_init);
 * false after answering 422. */
static bool api_stream_parse(api_req *r, api_stream_query *q)
{
    kf_fields fe;
    api_stream_args a = { q, &fe };

    kf_fields_init(&fe);
    api_stream_query_last_id(q, api_req_header(r, "Last-Event-ID"), &fe);
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, api_stream_arg_iter, &a);
    if (fe.n == 0)
        return true;
    api_reply_fields(r, 422, "bad-query", &fe);
    return false;
}

/* Open the stream and make it the answer; 503 beyond KFORGE_MAX_STREAMS. */
static void api_stream_answer(api_req *r, api_stream *s)
{
    api_stream_hub *h = api_req_stream_hub(r);
    struct MHD_Response *resp;
    bool full, closing;

    s->hub = h;
    s->conn = r->conn;
    atomic_init(&s->refs, 2);   /* the hub's list and MHD's response */
    pthread_mutex_init(&s->mu, NULL);
    kf_buf_init(&s->buf);
    kf_buf_addf(&s->buf, "retry: %d\n\n", API_STREAM_RETRY_MS);
    pthread_mutex_lock(&h->mu);
    closing = h->closing;
    full = !closing && atomic_fetch_add(&h->open, 1) >= h->max;
    if (full)
        atomic_fetch_sub(&h->open, 1);
    if (!full && !closing) {
        s->next = h->head;
        if (h->head)
            h->head->prev = s;
        h->head = s;
    }
    pthread_mutex_unlock(&h->mu);
    if (full || closing) {
        pthread_mutex_destroy(&s->mu);
        kf_buf_release(&s->buf);
        free(s->labels_json);
        free(s);
        /* Literal: the title names the stream limit, which KF_UNAVAILABLE's does not. */
        r->retry_after = 5;
        if (closing)
            api_reply_code(r, KF_UNAVAILABLE, "unavailable", "the server is stopping; reconnect in a few seconds");
        else
            api_reply_problem(r, 503, "too-many-streams", "Too many streams",
                              "this server already serves %d streams (KFORGE_MAX_STREAMS); retry after the "
                              "number of seconds in Retry-After, or close a stream you no longer read",
                              h->max);
        return;
    }
    if (atomic_load(&s->catchup))
        api_stream_wake(h);
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, api_stream_read, s, api_stream_free_cb);
    if (!resp) {
        /* MHD never took it: what its free callback would do, by hand. */
        api_stream_free_cb(s);
        api_reply_code(r, KF_NOMEM, "internal", "the stream could not be set up; retry");
        return;
    }
    r->stream = resp;
    r->status = 200;
    r->content_type = "text/event-stream";
    kf_log_debug("stream opened job=%s after=%lld req=%s", s->global ? "*" : s->job_id, s->last_id, r->request_id);
}

static long long api_stream_owner(const api_req *r)
{
    return r->who.role == API_ROLE_ADMIN ? 0 : (long long)r->who.token_id;
}

/* The start of a job's or a batch's stream: the query parsed into q and
 * r->param (a UUID) looked up by sql, whose parameters are the id and the
 * caller's owner filter (0 for an admin); what ("job", "batch") names it
 * in a 404.  The row, for the caller to read and clear, or NULL when
 * answered. */
static PGresult *api_stream_lookup(api_req *r, api_stream_query *q, const char *what, const char *sql)
{
    char owner[24];
    const char *params[2];
    PGresult *res;

    api_stream_query_init(q, false);
    if (!api_stream_parse(r, q))
        return NULL;
    if (!kf_uuid_valid(r->param)) {
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no such %s (%s ids are UUIDs)", what, what);
        return NULL;
    }
    snprintf(owner, sizeof(owner), "%lld", api_stream_owner(r));
    params[0] = r->param;
    params[1] = owner;
    res = api_req_sql(r, sql, 2, params);
    if (!res)
        return NULL;
    if (PQntuples(res) == 0) {
        PQclear(res);
        api_reply_code(r, KF_NOT_FOUND, "not-found", "no %s with id %s", what, r->param);
        return NULL;
    }
    return res;
}

void api_h_job_stream(api_req *r)
{
    api_stream_query q;
    api_stream *s;
    PGresult *res = api_stream_lookup(
        r, &q, "job", "SELECT 1 FROM jobs WHERE id = $1::uuid AND ($2::bigint = 0 OR owner_token_id = $2::bigint)");

    if (!res)
        return;
    PQclear(res);
    s = kf_calloc(1, sizeof(*s));
    memcpy(s->job_id, r->param, 37);
    s->owner = api_stream_owner(r);
    s->q = q;
    /* Without a position the job's stream starts with its whole history. */
    s->last_id = q.after > 0 ? q.after : 0;
    atomic_init(&s->catchup, true);
    api_stream_answer(r, s);
}

void api_h_stream(api_req *r)
{
    api_stream_query q;
    api_stream *s;
    cJSON *lab;

    api_stream_query_init(&q, true);
    if (!api_stream_parse(r, &q))
        return;
    s = kf_calloc(1, sizeof(*s));
    s->global = true;
    s->owner = api_stream_owner(r);
    s->q = q;
    lab = cJSON_CreateObject();
    for (int i = 0; i < q.n_labels; i++)
        cJSON_AddStringToObject(lab, q.label_key[i], q.label_value[i]);
    s->labels_json = kf_json_print(lab);
    cJSON_Delete(lab);
    if (q.after >= 0) {
        s->last_id = q.after;
        atomic_init(&s->catchup, true);
    } else {
        /* From now on: the last id handed out so far is where a catch-up
         * after a lost hub connection would start. */
        PGresult *res = api_req_sql(r,
                                    "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('job_events', "
                                    "'id')), 0)",
                                    0, NULL);
        if (!res) {
            free(s->labels_json);
            free(s);
            return;
        }
        s->last_id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        /* A catch-up from there (nothing, or what committed since), on
         * the hub's thread, which then takes it live: no event between
         * the read above and the stream's first live batch is lost. */
        atomic_init(&s->catchup, true);
    }
    api_stream_answer(r, s);
}

void api_h_batch_stream(api_req *r)
{
    api_stream_query q;
    api_stream *s;
    PGresult *res = api_stream_lookup(
        r, &q, "batch",
        "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('job_events', 'id')), 0) FROM batches WHERE "
        "id = $1::uuid AND ($2::bigint = 0 OR owner_token_id = $2::bigint)");

    if (!res)
        return;
    s = kf_calloc(1, sizeof(*s));
    s->batch = true;
    memcpy(s->job_id, r->param, 37);
    s->owner = api_stream_owner(r);
    s->q = q;
    /* With a position: the batch's events after it, then live ones.
     * Without: from now on.  Either way the hub's thread catches up from
     * there first (so nothing committed meanwhile is lost), then sends a
     * roll-up of where the batch stands and takes events live. */
    s->last_id = q.after >= 0 ? q.after : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    atomic_init(&s->catchup, true);
    PQclear(res);
    api_stream_answer(r, s);
    api_stream_wake(api_req_stream_hub(r));
}
