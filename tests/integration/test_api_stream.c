/* Integration tests of live progress (docs/runs.md, "Live progress"):
 * GET /v1/jobs/{id}/stream and GET /v1/stream as Server-Sent Events, fed
 * by PostgreSQL LISTEN/NOTIFY, against a real kforge-api, PostgreSQL and
 * Redis: states and iterations as a worker reports them, resuming with
 * Last-Event-ID or after=, an ended job's replay, heartbeats, who may see
 * what, the stream limit, events written by another process's connection,
 * and a PostgreSQL restart. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <unistd.h>

#include "db/kf_db.h"
#include "kf_buf.h"
#include "kf_queue.h"
#include "test_api_fixture.h"

#define REDIS_DB 11

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB,
             "KFORGE_LOG_LEVEL=info\nKFORGE_SSE_HEARTBEAT_S=1\nKFORGE_MAX_STREAMS=4\nKFORGE_SSE_BUFFER_BYTES=65536");
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(stream, .init = setup, .fini = teardown, .timeout = 120);

/* ---- a Server-Sent Events client over a plain socket ------------------------- */

/* HTTP/1.0, so the body comes unchunked and ends with the connection. */
typedef struct sse {
    int    fd;
    kf_buf in;
    bool   closed;
} sse;

/* rcvbuf > 0: a client that reads slowly (a small receive window, set
 * before the connection is made). */
static void sse_open_rcv(sse *s, const char *path, const char *token, const char *extra_headers, int rcvbuf)
{
    char req[1024];
    int n;

    if (rcvbuf > 0) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port) };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        s->fd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert(setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0);
        cr_assert(connect(s->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "%s", strerror(errno));
    } else {
        s->fd = kf_http_raw_connect(fx.port);
    }
    s->closed = false;
    kf_buf_init(&s->in);
    cr_assert(s->fd >= 0, "connect to the API");
    n = snprintf(req, sizeof(req),
                 "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n%s\r\n",
                 path, token, extra_headers ? extra_headers : "");
    cr_assert(write(s->fd, req, (size_t)n) == n);
}

static void sse_open(sse *s, const char *path, const char *token, const char *extra_headers)
{
    sse_open_rcv(s, path, token, extra_headers, 0);
}

/* Read until `needle` is in what came (true), the server closed, or
 * timeout_ms passed. */
static bool sse_wait(sse *s, const char *needle, int timeout_ms)
{
    long long end = kf_test_now_ms() + timeout_ms;

    while (!strstr(s->in.data, needle) && !s->closed) {
        long long left = end - kf_test_now_ms();
        struct pollfd p = { s->fd, POLLIN, 0 };
        char buf[4096];
        ssize_t n;

        if (left <= 0)
            return false;
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        n = read(s->fd, buf, sizeof(buf));
        if (n <= 0)
            s->closed = true;
        else
            kf_buf_add(&s->in, buf, (size_t)n);
    }
    return strstr(s->in.data, needle) != NULL;
}

/* Read until the server closes (true) or timeout_ms passes. */
static bool sse_wait_closed(sse *s, int timeout_ms)
{
    sse_wait(s, "\x01never\x01", timeout_ms);
    return s->closed;
}

static void sse_close(sse *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    kf_buf_release(&s->in);
}

static long sse_status(const sse *s)
{
    long st = 0;
    if (strncmp(s->in.data, "HTTP/1.", 7) == 0)
        st = strtol(s->in.data + 9, NULL, 10);
    return st;
}

/* The "id:" values of the events received, in order, as "1,2,3". */
static char *sse_ids(const sse *s)
{
    kf_buf out = KF_BUF_INIT;

    for (const char *p = s->in.data; (p = strstr(p, "\nid: ")) != NULL; p += 5) {
        if (out.len)
            kf_buf_addc(&out, ',');
        kf_buf_add(&out, p + 5, strcspn(p + 5, "\n"));
    }
    return kf_buf_detach(&out);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The job's event ids after `after`, in order, from PostgreSQL itself. */
static char *db_ids(const char *job, long long after)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM job_events WHERE job_id = $1 AND "
             "id > %lld",
             after);
    return fx_sql(&fx, sql, job);
}

/* ---- driving a job as a worker does ------------------------------------------ */

typedef fx_lease lease;

static lease lease_job(const char *id)
{
    return fx_lease_job(&fx, id, "trn2");
}

static long report(const char *id, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static long report(const char *id, const char *what, const char *fmt, ...)
{
    va_list ap;
    char *body, *path = kf_asprintf("/v1/internal/jobs/%s/%s", id, what);
    kf_http_resp r;
    long st;

    va_start(ap, fmt);
    cr_assert(vasprintf(&body, fmt, ap) >= 0);
    va_end(ap);
    st = fx_req(&fx, "POST", path, fx.worker, body, &r);
    cr_assert_eq(st, 200, "%s %s: %ld %s", what, body, st, r.body);
    kf_http_resp_release(&r);
    free(body);
    free(path);
    return st;
}

static void start_job(const char *id, const lease *l)
{
    report(id, "start", "{\"attempt\":%d,\"lease_token\":\"%s\",\"worker\":\"w1\"}", l->attempt, l->token);
}

static void iterate(const char *id, const lease *l, int seq, int tile, double lat, double floor_ns)
{
    report(id, "iterations",
           "{\"attempt\":%d,\"lease_token\":\"%s\",\"seq\":%d,\"latency_ns\":%g,\"correct\":true,"
           "\"params\":{\"TILE\":%d},\"profile\":{\"latency_ns\":%g,\"floor_ns\":%g},\"findings\":[],"
           "\"action\":\"tune\",\"reason\":\"r\"}",
           l->attempt, l->token, seq, lat, tile, lat, floor_ns);
}

static void succeed(const char *id, const lease *l)
{
    report(id, "result", "{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{}}", l->attempt,
           l->token);
}

static char *stream_path(const char *id, const char *query)
{
    return kf_asprintf("/v1/jobs/%s/stream%s", id, query ? query : "");
}

/* ---- the tests ------------------------------------------------------------------ */

Test(stream, a_job_stream_shows_states_and_iterations_live_then_ends)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path = stream_path(id, NULL), *ids, *want;
    sse s;
    lease l;

    sse_open(&s, path, fx.user, NULL);
    cr_assert(sse_wait(&s, "\"to\" : \"queued\"", 5000), "no created event: %s", s.in.data);
    cr_assert_eq(sse_status(&s), 200, "%s", s.in.data);
    cr_assert(strstr(s.in.data, "Content-Type: text/event-stream"), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "\r\n\r\nretry: "), "the retry hint comes first: %s", s.in.data);
    cr_assert(strstr(s.in.data, "event: state\ndata: {\"job_id\" : \""), "%s", s.in.data);

    l = lease_job(id);
    start_job(id, &l);
    cr_assert(sse_wait(&s, "\"type\" : \"started\"", 5000), "no started event: %s", s.in.data);
    iterate(id, &l, 0, 256, 2000, 1000);
    cr_assert(sse_wait(&s, "event: iteration", 5000), "no iteration event: %s", s.in.data);
    iterate(id, &l, 1, 512, 1600, 1000);
    cr_assert(sse_wait(&s, "\"TILE\": 512", 5000), "no second iteration: %s", s.in.data);
    /* The iteration's params, fraction of the bound and best so far. */
    cr_assert(strstr(s.in.data, "\"params\" : {\"TILE\": 256}"), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "\"fraction_of_bound\" : 0.5,"), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "\"fraction_of_bound\" : 0.625,"), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "\"best_so_far_ns\" : 1600"), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "\"seq\" : 1"), "%s", s.in.data);

    succeed(id, &l);
    cr_assert(sse_wait(&s, "event: end\ndata: {\"job_id\":\"", 5000), "no end event: %s", s.in.data);
    cr_assert(strstr(s.in.data, "\"state\":\"succeeded\"}"), "%s", s.in.data);
    cr_assert(sse_wait_closed(&s, 5000), "the stream stays open after the end");
    /* Every event once, in order: exactly the job's rows. */
    ids = sse_ids(&s);
    want = db_ids(id, 0);
    cr_assert_str_eq(ids, want);
    cr_assert_eq(count(s.in.data, "event: iteration"), 2);
    free(ids);
    free(want);
    sse_close(&s);
    free(path);
    free(id);
}

Test(stream, resume_with_last_event_id_or_after_loses_and_repeats_nothing)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path, *ids, *want, hdr[64];
    sse s;
    lease l = lease_job(id);
    long long cut;

    start_job(id, &l);
    for (int i = 0; i < 5; i++)
        iterate(id, &l, i, 100 + i, 5000 - i * 100, 1000);
    cut = fx_sql_int(&fx, "SELECT id FROM job_events WHERE job_id = $1 ORDER BY id OFFSET 3 LIMIT 1", id);
    cr_assert(cut > 0);

    /* Live: resume after the fourth event, then the job goes on. */
    path = stream_path(id, NULL);
    snprintf(hdr, sizeof(hdr), "Last-Event-ID: %lld\r\n", cut);
    sse_open(&s, path, fx.user, hdr);
    cr_assert(sse_wait(&s, "\"TILE\": 104", 5000), "%s", s.in.data);
    iterate(id, &l, 5, 105, 4000, 1000);
    succeed(id, &l);
    cr_assert(sse_wait(&s, "event: end", 5000), "%s", s.in.data);
    cr_assert(sse_wait_closed(&s, 5000));
    ids = sse_ids(&s);
    want = db_ids(id, cut);
    cr_assert_str_eq(ids, want, "resumed stream");
    cr_assert(!strstr(s.in.data, "\"TILE\": 100}"), "an event before the position came again: %s", s.in.data);
    free(ids);
    free(want);
    sse_close(&s);
    free(path);

    /* after= does the same; Last-Event-ID wins over it (a browser
     * reconnects with the URL it was given and the last id it saw). */
    path = stream_path(id, "?after=0");
    sse_open(&s, path, fx.user, hdr);
    cr_assert(sse_wait_closed(&s, 5000));
    ids = sse_ids(&s);
    want = db_ids(id, cut);
    cr_assert_str_eq(ids, want, "Last-Event-ID over after=");
    free(ids);
    free(want);
    sse_close(&s);
    free(path);
    {
        char q[48];
        snprintf(q, sizeof(q), "?after=%lld", cut + 1);
        path = stream_path(id, q);
    }
    sse_open(&s, path, fx.user, NULL);
    cr_assert(sse_wait_closed(&s, 5000));
    ids = sse_ids(&s);
    want = db_ids(id, cut + 1);
    cr_assert_str_eq(ids, want, "after=");
    cr_assert(strstr(s.in.data, "event: end"), "%s", s.in.data);
    free(ids);
    free(want);
    sse_close(&s);
    free(path);
    free(id);
}

Test(stream, an_ended_job_replays_its_history_then_ends)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path = stream_path(id, NULL), *ids, *want, hdr[64];
    sse s;
    kf_http_resp r;
    char *cpath = kf_asprintf("/v1/jobs/%s/cancel", id);
    long long last;

    cr_assert_eq(fx_req(&fx, "POST", cpath, fx.user, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    sse_open(&s, path, fx.user, NULL);
    cr_assert(sse_wait_closed(&s, 5000), "an ended job's stream must close: %s", s.in.data);
    cr_assert(strstr(s.in.data, "\"type\" : \"cancelled\""), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "event: end\ndata: {\"job_id\":\""), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "\"state\":\"cancelled\"}"), "%s", s.in.data);
    ids = sse_ids(&s);
    want = db_ids(id, 0);
    cr_assert_str_eq(ids, want);
    free(ids);
    free(want);
    sse_close(&s);

    /* Resumed past its last event: nothing more, but still the end. */
    last = fx_sql_int(&fx, "SELECT max(id) FROM job_events WHERE job_id = $1", id);
    snprintf(hdr, sizeof(hdr), "Last-Event-ID: %lld\r\n", last);
    sse_open(&s, path, fx.user, hdr);
    cr_assert(sse_wait_closed(&s, 5000), "%s", s.in.data);
    cr_assert(!strstr(s.in.data, "\nid: "), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "event: end"), "%s", s.in.data);
    sse_close(&s);
    free(cpath);
    free(path);
    free(id);
}

Test(stream, heartbeats_keep_an_idle_stream_alive)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path = stream_path(id, NULL);
    sse s;

    sse_open(&s, path, fx.user, NULL);
    cr_assert(sse_wait(&s, "\"to\" : \"queued\"", 5000), "%s", s.in.data);
    /* KFORGE_SSE_HEARTBEAT_S=1 in this suite. */
    cr_assert(sse_wait(&s, "\n: hb\n\n", 4000), "no heartbeat: %s", s.in.data);
    kf_buf_reset(&s.in);
    cr_assert(sse_wait(&s, ": hb\n\n", 4000), "no second heartbeat");
    cr_assert(!s.closed);
    sse_close(&s);
    free(path);
    free(id);
}

Test(stream, another_users_job_is_404_and_the_all_jobs_stream_shows_own_jobs_only)
{
    char *mine = fx_submit(&fx, fx.user, NULL), *path = stream_path(mine, NULL), *theirs;
    kf_http_resp r;
    sse a, b, adm;

    cr_assert_eq(fx_req(&fx, "GET", path, fx.user2, NULL, &r), 404, "%s", r.body);
    cr_assert(strstr(r.body, "urn:kforge:problem:not-found"), "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", path, fx.worker, NULL, &r), 403, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", path, NULL, NULL, &r), 401, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs/not-a-uuid/stream", fx.user, NULL, &r), 404, "%s", r.body);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs/00000000-0000-4000-8000-000000000000/stream", fx.user, NULL, &r), 404);
    kf_http_resp_release(&r);

    sse_open(&a, "/v1/stream", fx.user, NULL);
    sse_open(&b, "/v1/stream", fx.user2, NULL);
    sse_open(&adm, "/v1/stream?kind=diag", fx.admin, NULL);
    cr_assert(sse_wait(&a, "retry: ", 5000) && sse_wait(&b, "retry: ", 5000) && sse_wait(&adm, "retry: ", 5000));
    theirs = fx_submit(&fx, fx.user2, NULL);
    free(mine);
    mine = fx_submit(&fx, fx.user, NULL);
    cr_assert(sse_wait(&a, mine, 5000), "own job's event: %s", a.in.data);
    cr_assert(sse_wait(&b, theirs, 5000), "own job's event: %s", b.in.data);
    cr_assert(sse_wait(&adm, mine, 5000) && sse_wait(&adm, theirs, 5000), "admin sees all: %s", adm.in.data);
    /* Heartbeats (1 s) pass: anything of the other user would have come. */
    cr_assert(sse_wait(&a, "\n: hb\n\n", 4000) && sse_wait(&b, "\n: hb\n\n", 4000));
    cr_assert(!strstr(a.in.data, theirs), "user A saw user B's job: %s", a.in.data);
    cr_assert(!strstr(b.in.data, mine), "user B saw user A's job: %s", b.in.data);
    cr_assert(!strstr(a.in.data, "event: end"), "the all-jobs stream has no end");
    sse_close(&a);
    sse_close(&b);
    sse_close(&adm);
    free(theirs);
    free(mine);
    free(path);
}

Test(stream, filters_by_kind_and_label_and_resumes_after_an_id)
{
    char *a = fx_submit(&fx, fx.user, "{\"kind\":\"diag\",\"target\":\"trn2\",\"labels\":{\"team\":\"x\"}}");
    char *b = fx_submit(&fx, fx.user, "{\"kind\":\"diag\",\"target\":\"trn2\",\"labels\":{\"team\":\"y\"}}");
    long long before = fx_sql_int(&fx, "SELECT min(id) - 1 FROM job_events WHERE job_id = $1", a);
    char q[96];
    sse s, k;

    /* From a position: the catch-up reads job_events across jobs. */
    snprintf(q, sizeof(q), "/v1/stream?label.team=x&after=%lld", before);
    sse_open(&s, q, fx.user, NULL);
    sse_open(&k, "/v1/stream?kind=generate", fx.user, NULL);
    cr_assert(sse_wait(&s, a, 5000), "%s", s.in.data);
    cr_assert(sse_wait(&k, "retry: ", 5000));
    free(b);
    b = fx_submit(&fx, fx.user, "{\"kind\":\"diag\",\"target\":\"trn2\",\"labels\":{\"team\":\"x\"}}");
    cr_assert(sse_wait(&s, b, 5000), "a live event of a matching job: %s", s.in.data);
    cr_assert(sse_wait(&s, "\n: hb\n\n", 4000) && sse_wait(&k, "\n: hb\n\n", 4000));
    cr_assert_eq(count(s.in.data, "\nid: "), 2, "one created event per matching job: %s", s.in.data);
    cr_assert(!strstr(k.in.data, "\nid: "), "no diag job is of kind generate: %s", k.in.data);
    sse_close(&s);
    sse_close(&k);
    free(a);
    free(b);
}

Test(stream, bad_positions_and_filters_are_422_naming_the_field)
{
    static const struct {
        const char *path, *header, *field;
    } cases[] = {
        { "/v1/stream?after=abc", NULL, "\"field\":\"after\"" },
        { "/v1/stream?after=-1", NULL, "\"field\":\"after\"" },
        { "/v1/stream?after=99999999999999999999", NULL, "\"field\":\"after\"" },
        { "/v1/stream?after=1&after=2", NULL, "\"rule\":\"duplicate\"" },
        { "/v1/stream", "Last-Event-ID: 12x", "\"field\":\"Last-Event-ID\"" },
        { "/v1/stream?kind=nope", NULL, "\"field\":\"kind\"" },
        { "/v1/stream?label.=x", NULL, "\"field\":\"label\"" },
        { "/v1/stream?label.a%20b=x", NULL, "\"field\":\"label\"" },
        { "/v1/stream?label.team=a&label.team=b", NULL, "\"rule\":\"duplicate\"" },
        { "/v1/stream?state=queued", NULL, "\"field\":\"state\"" },
        { "/v1/jobs/00000000-0000-4000-8000-000000000000/stream?kind=diag", NULL, "\"field\":\"kind\"" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *url = kf_asprintf("%s%s", fx.base, cases[i].path);
        const char *hdrs[2] = { cases[i].header, NULL };
        kf_http_resp r;
        long st = kf_http_request("GET", url, fx.user, hdrs, NULL, 0, &r);
        cr_expect_eq(st, 422, "%s: %ld %s", cases[i].path, st, r.body);
        cr_expect(strstr(r.body, cases[i].field), "%s: %s", cases[i].path, r.body);
        cr_expect(strstr(r.body, "urn:kforge:problem:bad-query"), "%s: %s", cases[i].path, r.body);
        kf_http_resp_release(&r);
        free(url);
    }
}

Test(stream, streams_beyond_the_limit_get_503_and_a_closed_one_frees_its_place)
{
    sse s[4];
    kf_http_resp r;
    char *ra;

    /* KFORGE_MAX_STREAMS=4 in this suite. */
    for (int i = 0; i < 4; i++) {
        sse_open(&s[i], "/v1/stream", fx.user, NULL);
        cr_assert(sse_wait(&s[i], "retry: ", 5000), "stream %d: %s", i, s[i].in.data);
    }
    cr_assert_eq(fx_req(&fx, "GET", "/v1/stream", fx.user, NULL, &r), 503, "%s", r.body);
    cr_assert(strstr(r.body, "urn:kforge:problem:too-many-streams"), "%s", r.body);
    ra = kf_http_header(&r, "Retry-After");
    cr_assert(ra && atoi(ra) > 0, "Retry-After: %s", ra ? ra : "(none)");
    free(ra);
    kf_http_resp_release(&r);
    /* A client that leaves is noticed at the next heartbeat (1 s here). */
    sse_close(&s[0]);
    {
        bool ok = false;
        for (int i = 0; i < 50 && !ok; i++) {
            sse t;
            sse_open(&t, "/v1/stream", fx.user, NULL);
            ok = sse_wait(&t, "retry: ", 2000);
            sse_close(&t);
            if (!ok)
                kf_test_sleep_ms(200);
        }
        cr_assert(ok, "the place of a closed stream never came free");
    }
    for (int i = 1; i < 4; i++)
        sse_close(&s[i]);
}

Test(stream, a_client_that_falls_behind_is_closed_and_resumes_without_loss)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path = stream_path(id, NULL), *ids, *want, *big, hdr[64];
    const char *lastid;
    lease l = lease_job(id);
    sse s, t;
    long long last = 0;

    start_job(id, &l);
    /* Never read while 80 events of 100 KB each are written: the socket
     * buffers fill (a sender's grows to 4 MiB), then the stream's 64 KiB
     * (KFORGE_SSE_BUFFER_BYTES). */
    sse_open_rcv(&s, path, fx.user, NULL, 4096);
    kf_test_sleep_ms(300);
    big = kf_calloc(1, 100001);
    memset(big, 'x', 100000);
    for (int i = 0; i < 80; i++)
        report(id, "iterations",
               "{\"attempt\":%d,\"lease_token\":\"%s\",\"seq\":%d,\"latency_ns\":%d,\"correct\":true,"
               "\"params\":{\"TILE\":%d,\"pad\":\"%s\"}}",
               l.attempt, l.token, i, 5000 - i, i, big);
    free(big);
    cr_assert(sse_wait_closed(&s, 20000), "the slow client was not closed (%zu bytes came)", s.in.len);
    cr_assert(strstr(s.in.data, "\n: closed: this client fell "), "no final comment (%zu bytes came)", s.in.len);
    cr_assert(!strstr(s.in.data, "event: end"));
    /* The last complete event it got is where it resumes. */
    *strstr(s.in.data, "\n: closed: this client fell ") = '\0';
    lastid = s.in.data;
    for (const char *p = s.in.data; (p = strstr(p, "\nid: ")) != NULL; p += 5)
        lastid = p + 5;
    cr_assert(lastid != s.in.data, "no event came before the close");
    last = strtoll(lastid, NULL, 10);
    ids = sse_ids(&s);
    want = db_ids(id, 0);
    cr_assert(strncmp(want, ids, strlen(ids)) == 0, "what came is the start of the job's events: %s", ids);
    cr_assert(strlen(ids) < strlen(want), "the slow client got everything: %s", ids);
    free(ids);
    free(want);
    sse_close(&s);

    snprintf(hdr, sizeof(hdr), "Last-Event-ID: %lld\r\n", last);
    sse_open(&t, path, fx.user, hdr);
    succeed(id, &l);
    cr_assert(sse_wait_closed(&t, 20000), "the resumed stream did not end: %zu bytes came", t.in.len);
    ids = sse_ids(&t);
    want = db_ids(id, last);
    cr_assert_str_eq(ids, want, "resumed after the close: got %s, want %s", ids, want);
    free(ids);
    free(want);
    sse_close(&t);
    free(path);
    free(id);
}

/* A move written by another process's connection (the scheduler's, say):
 * kf_db_apply on the test's own connection. */
Test(stream, events_written_on_another_connection_reach_the_stream)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path = stream_path(id, NULL), *ids, *want;
    kf_db_move mv = { .move = KF_MOVE_CANCEL, .job_id = id };
    kf_err e = KF_ERR_INIT;
    sse s;

    sse_open(&s, path, fx.user, NULL);
    cr_assert(sse_wait(&s, "queued", 5000), "%s", s.in.data);
    cr_assert_eq(kf_db_apply(fx.pg, NULL, &mv, NULL, &e), KF_OK, "%s", e.msg);
    cr_assert(sse_wait(&s, "event: end", 5000), "%s", s.in.data);
    cr_assert(strstr(s.in.data, "\"state\":\"cancelled\""), "%s", s.in.data);
    ids = sse_ids(&s);
    want = db_ids(id, 0);
    cr_assert_str_eq(ids, want);
    free(ids);
    free(want);
    sse_close(&s);
    free(path);
    free(id);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static const char *as_pg(void)
{
    return geteuid() == 0 ? "runuser -u postgres -- " : "";
}

/* The same options tests/lib/services.sh starts it with. */
static void pg_restart(void)
{
    const char *dir = kf_test_env("KFORGE_TEST_PG_DIR");
    cr_assert_eq(sh("%s%s/pg_ctl -D %s -m fast -w -t 30 stop >/dev/null", as_pg(), kf_test_env("KFORGE_TEST_PG_BIN"),
                    dir),
                 0, "pg_ctl stop failed");
    cr_assert_eq(sh("%s%s/pg_ctl -D %s -l %s/server.log -w -t 30 -o \"-c listen_addresses=127.0.0.1 -p %s -k %s "
                    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200\" start "
                    ">/dev/null",
                    as_pg(), kf_test_env("KFORGE_TEST_PG_BIN"), dir, dir, kf_test_env("KFORGE_TEST_PG_PORT"), dir),
                 0, "pg_ctl start failed; see %s/server.log", dir);
}

Test(stream, a_postgresql_restart_loses_no_event)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path = stream_path(id, NULL), *ids, *want;
    lease l = lease_job(id);
    kf_db_move mv = { .move = KF_MOVE_CANCEL_ASK, .job_id = id };
    kf_err e = KF_ERR_INIT;
    sse s;

    start_job(id, &l);
    iterate(id, &l, 0, 1, 3000, 1000);
    sse_open(&s, path, fx.user, NULL);
    cr_assert(sse_wait(&s, "event: iteration", 5000), "%s", s.in.data);
    pg_restart();
    /* Written at once, on a new connection, before the API's hub is back
     * (it retries with backoff): no notification reaches it. */
    PQfinish(fx.pg);
    fx.pg = PQconnectdb(fx.dsn);
    cr_assert_eq(PQstatus(fx.pg), CONNECTION_OK);
    cr_assert_eq(kf_db_apply(fx.pg, NULL, &mv, NULL, &e), KF_OK, "%s", e.msg);
    cr_assert(sse_wait(&s, "cancel_requested", 15000), "the event written during the outage: %s", s.in.data);
    /* And live again afterwards (the API's pool has reconnected too). */
    for (int i = 0; i < 100; i++) {
        kf_http_resp r;
        char *jp = kf_asprintf("/v1/jobs/%s", id);
        long st = fx_req(&fx, "GET", jp, fx.user, NULL, &r);
        free(jp);
        kf_http_resp_release(&r);
        if (st == 200)
            break;
        kf_test_sleep_ms(100);
    }
    iterate(id, &l, 1, 2, 2500, 1000);
    cr_assert(sse_wait(&s, "\"TILE\": 2}", 10000), "%s", s.in.data);
    succeed(id, &l);
    cr_assert(sse_wait_closed(&s, 10000), "%s", s.in.data);
    ids = sse_ids(&s);
    want = db_ids(id, 0);
    cr_assert_str_eq(ids, want, "every event once across the restart");
    free(ids);
    free(want);
    sse_close(&s);
    free(path);
    free(id);
}
