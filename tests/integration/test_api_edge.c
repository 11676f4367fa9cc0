/* Integration tests of kforge-api's HTTP edge (issue 13): what a client
 * cannot do to the server or its log with the bytes it sends.  Log lines
 * stay the server's own; query numbers that overflow are 400; HEAD answers
 * every GET route; conflicting framing headers are 400 and close the
 * connection; one address holds a bounded number of connections, and a
 * silent connection is closed; unknown tokens are limited to 429 while
 * valid tokens pass.  Raw sockets where libcurl would not send the bytes. */
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/api.h"
#include "kf_job.h"
#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"

#define REDIS_DB 7

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, "KFORGE_LOG_LEVEL=info\nKFORGE_API_CONNS_PER_IP=6\nKFORGE_API_IDLE_TIMEOUT_S=2");
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(api_edge, .init = setup, .fini = teardown, .timeout = 120);

/* The whole of the API's log once it holds `want` (5 s at most). */
static char *log_with(const char *want)
{
    char *text = kf_test_read_file(fx.log);

    for (int i = 0; i < 100 && !strstr(text, want); i++) {
        free(text);
        kf_test_sleep_ms(50);
        text = kf_test_read_file(fx.log);
    }
    return text;
}

Test(api_edge, no_request_writes_a_log_line_of_its_own)
{
    kf_http_resp r;
    char *text, *line;
    int n = 0;

    /* MHD decodes %0a to a newline, %0d to a carriage return. */
    cr_assert_eq(fx_req(&fx, "GET",
                        "/v1/x%0a2026-01-01T00:00:00.000Z%20level=error%20comp=api%20msg=%22forged%22%0d%1b[2J",
                        fx.user, NULL, &r),
                 404);
    kf_http_resp_release(&r);
    /* A space and a quote cannot add a key=value pair to the request line. */
    cr_assert_eq(fx_req(&fx, "GET", "/v1/y%20status=200%20req=%22x", fx.user, NULL, &r), 404);
    kf_http_resp_release(&r);
    text = log_with("path=/v1/y");
    cr_assert(strstr(text, "path=/v1/x%0A2026-01-01T00:00:00.000Z%20level=error%20comp=api%20msg=%22forged%22%0D%1B[2J "
                           "status=404"),
              "the path is logged percent-encoded: %s", text);
    cr_assert(strstr(text, "path=/v1/y%20status=200%20req=%22x status=404"), "%s", text);
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), n++) {
        cr_assert(strncmp(line, "20", 2) == 0 && strstr(line, " level=") && strstr(line, " comp=api "),
                  "line %d is not the server's: %s", n, line);
        for (const char *p = line; *p; p++)
            cr_assert((unsigned char)*p >= 0x20 && *p != 0x7f, "line %d holds byte 0x%02x: %s", n,
                      (unsigned char)*p, line);
    }
    cr_assert_gt(n, 2);
    free(text);
}

/* Expect `status` and problem type `slug` for GET path (with the user token). */
static void expect_problem(const char *path, long status, const char *slug)
{
    kf_http_resp r;
    cJSON *j;
    char type[96];

    cr_assert_eq(fx_req(&fx, "GET", path, fx.user, NULL, &r), status, "%s: %ld %s", path, r.status, r.body);
    j = fx_json(&r);
    snprintf(type, sizeof(type), "urn:kforge:problem:%s", slug);
    cr_assert_str_eq(fx_str(j, "type"), type, "%s: %s", path, r.body);
    cJSON_Delete(j);
    kf_http_resp_release(&r);
}

Test(api_edge, query_numbers_that_overflow_are_400_never_500)
{
    char *id = fx_submit(&fx, fx.user, NULL);
    char *p;
    kf_http_resp r;
    static const char *const bad_after[] = { "99999999999999999999", "9223372036854775808", "-1", "+5", "%205",
                                             "1e3", "0x10", "", NULL };

    for (int i = 0; bad_after[i]; i++) {
        p = kf_asprintf("/v1/jobs/%s/events?after=%s", id, bad_after[i]);
        expect_problem(p, 400, "bad-query");
        free(p);
    }
    p = kf_asprintf("/v1/jobs/%s/events?after=9223372036854775807", id);
    cr_assert_eq(fx_req(&fx, "GET", p, fx.user, NULL, &r), 200, "the largest bigint is an event id: %s", r.body);
    kf_http_resp_release(&r);
    free(p);
    p = kf_asprintf("/v1/jobs/%s/events?limit=18446744073709551617", id);
    expect_problem(p, 400, "bad-query");
    free(p);
    expect_problem("/v1/jobs?limit=99999999999999999999999", 400, "bad-query");
    expect_problem("/v1/jobs?limit=18446744073709551616", 400, "bad-query");
    /* A cursor whose time is past what PostgreSQL holds. */
    {
        char cur[128];
        api_cursor_make("9223372036854775807", id, cur, sizeof(cur));
        p = kf_asprintf("/v1/jobs?cursor=%s", cur);
        expect_problem(p, 400, "bad-query");
        free(p);
    }
    free(id);
}

/* An artifact of job id, written straight into PostgreSQL (its store and
 * its link), for /v1/artifacts/{sha256}; its SHA-256 hex. */
static const char *edge_artifact(const char *id)
{
    static const char sha[] = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";   /* "foo" */
    const char *p[2] = { sha, id };
    PGresult *r = PQexecParams(fx.pg,
                               "WITH b AS (INSERT INTO artifact_blobs (sha256, size, codec, data) "
                               "VALUES ($1, 3, 'raw', 'foo'::bytea) ON CONFLICT DO NOTHING) "
                               "INSERT INTO artifacts (job_id, attempt, seq, name, sha256, size, content_type) "
                               "VALUES ($2::uuid, 1, 0, 'kernel.py', $1, 3, 'text/x-python; charset=utf-8') "
                               "ON CONFLICT DO NOTHING",
                               2, NULL, p, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(fx.pg));
    PQclear(r);
    return sha;
}

/* A finished batch of the user's (one diag job, cancelled), for
 * /v1/batches/{id}...; its id, in a static buffer. */
static const char *edge_batch(void)
{
    static char id[37];
    kf_http_resp r;
    cJSON *v;
    char *p;

    if (id[0])
        return id;
    cr_assert_eq(fx_req(&fx, "POST", "/v1/batches", fx.user,
                        "{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"inf2\"]}}", &r),
                 202, "%s", r.body);
    v = fx_json(&r);
    snprintf(id, sizeof(id), "%s", fx_str(v, "id"));
    cJSON_Delete(v);
    kf_http_resp_release(&r);
    p = kf_asprintf("/v1/batches/%s/cancel", id);
    cr_assert_eq(fx_req(&fx, "POST", p, fx.user, NULL, &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    free(p);
    return id;
}

/* A shared kernel library entry whose source is job id's artifact, for
 * /v1/library/{entry}...; its id. */
static const char *edge_library(const char *id)
{
    const char *p[2] = { edge_artifact(id), id };
    PGresult *r = PQexecParams(fx.pg,
                               "INSERT INTO kernel_library (id, kernel, shape, dtype, target, backend, entry, params, "
                               "source_sha256, latency_ns, job_id, attempt, seq, job_finished_at) VALUES ('edge.add', "
                               "'add', '[[128, 512], [128, 512]]', 'bfloat16', 'trn2', 'sim', 'add', '{}', $1, 1000, "
                               "$2::uuid, 1, 0, now()) ON CONFLICT DO NOTHING",
                               2, NULL, p, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(fx.pg));
    PQclear(r);
    return "edge.add";
}

/* A GET route's path with {id} filled in ({sha256}: an artifact of job id;
 * {seq} with 0; compare's list with the job twice over another; a batch's
 * routes: a finished batch; {entry}: a library entry). */
static char *route_path(const char *pattern, const char *id, const char *id2)
{
    const char *brace = strchr(pattern, '{');
    /* the dashboard: its redirects (302, test_api_ui) are asked where they lead */
    if (strcmp(pattern, "/") == 0 || strcmp(pattern, "/ui") == 0)
        return kf_strdup("/ui/");
    if (strcmp(pattern, "/ui/{asset}") == 0)
        return kf_strdup("/ui/app.js");
    if (strcmp(pattern, "/v1/compare") == 0)
        return kf_asprintf("/v1/compare?jobs=%s,%s", id, id2);
    if (!brace)
        return kf_strdup(pattern);
    if (strstr(pattern, "{seq}"))
        return kf_asprintf("%.*s%s%s", (int)(brace - pattern), pattern, id, "/iterations/0");
    return kf_asprintf("%.*s%s%s", (int)(brace - pattern), pattern,
                       strstr(pattern, "/v1/internal/workers") ? "w1"
                       : strstr(pattern, "{sha256}")          ? edge_artifact(id)
                       : strstr(pattern, "{entry}")           ? edge_library(id)
                       : strstr(pattern, "/v1/batches/")      ? edge_batch()
                                                               : id,
                       strchr(brace, '}') + 1);
}

/* A stream route under HEAD: the GET's status and Content-Type, no body.
 * A stream has no length, and only a job's or a batch's stream ends by
 * itself (once the job or every job of the batch has ended), so the GET is
 * compared for the stream of the ended job `ended` and of a finished batch,
 * and /v1/stream, which never ends, is asked by HEAD alone. */
static void edge_head_stream(const char *pattern, const char *ended)
{
    char *path = strstr(pattern, "/v1/batches/") ? kf_asprintf("/v1/batches/%s/stream", edge_batch())
                 : strstr(pattern, "{id}")         ? kf_asprintf("/v1/jobs/%s/stream", ended)
                                                   : kf_strdup(pattern);
    char *url = kf_asprintf("%s%s", fx.base, path), *auth = kf_asprintf("Authorization: Bearer %s", fx.admin);
    const char *hdr[2] = { auth, NULL };
    kf_http_resp h;
    char *hct;

    cr_assert_eq(kf_http_request("HEAD", url, NULL, hdr, NULL, 0, &h), 200, "HEAD %s", path);
    cr_assert_eq(h.body_len, 0, "HEAD %s sent a body", path);
    hct = kf_http_header(&h, "Content-Type");
    cr_assert(hct && strncmp(hct, "text/event-stream", 17) == 0, "HEAD %s: Content-Type %s", path, hct ? hct : "-");
    if (strstr(pattern, "{id}")) {
        kf_http_resp g;
        char *gct;
        cr_assert_eq(kf_http_request("GET", url, NULL, hdr, NULL, 0, &g), 200, "GET %s", path);
        cr_assert(strstr(g.body, "event: end"), "GET %s of an ended job or batch ends: %s", path, g.body);
        gct = kf_http_header(&g, "Content-Type");
        cr_assert(gct && strcmp(gct, hct) == 0, "HEAD %s: Content-Type %s vs %s", path, hct, gct ? gct : "-");
        free(gct);
        kf_http_resp_release(&g);
    }
    free(hct);
    kf_http_resp_release(&h);
    free(auth);
    free(url);
    free(path);
}

Test(api_edge, head_answers_every_get_route_as_get_does_without_a_body)
{
    char *id = fx_submit(&fx, fx.user, NULL), *id2 = fx_submit(&fx, fx.user, NULL);
    int gets = 0;
    PGresult *it;

    /* An iteration for GET /v1/jobs/{id}/iterations/{seq}, with a model turn
     * for GET /v1/jobs/{id}/transcript. */
    it = PQexecParams(fx.pg,
                      "INSERT INTO iterations (job_id, attempt, seq, source, llm) VALUES ($1::uuid, 1, 0, 'x', "
                      "'{\"turn\": {\"role\": \"assistant\"}}')",
                      1,
                      NULL, (const char *const[]){ id }, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(it), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(it));
    PQclear(it);
    /* An ended job, whose stream ends after its history. */
    {
        kf_http_resp c;
        char *p = kf_asprintf("/v1/jobs/%s/cancel", id2);
        cr_assert_eq(fx_req(&fx, "POST", p, fx.user, NULL, &c), 200, "%s", c.body);
        kf_http_resp_release(&c);
        free(p);
    }

    for (int i = 0; i < api_n_routes; i++) {
        char *path, *url, *auth;
        const char *hdr[2] = { NULL, NULL };
        kf_http_resp g, h;
        char *gct, *hct, *hcl;

        if (strcmp(api_routes[i].method, "GET") != 0)
            continue;
        gets++;
        if (strstr(api_routes[i].pattern, "stream")) {
            edge_head_stream(api_routes[i].pattern, id2);
            continue;
        }
        path = route_path(api_routes[i].pattern, id, id2);
        url = kf_asprintf("%s%s", fx.base, path);
        /* the admin's token where an admin may read; a worker route, the worker's (w1) */
        auth = kf_asprintf("Authorization: Bearer %s",
                           (api_routes[i].roles & API_ROLE_ADMIN) || api_routes[i].roles == API_PUBLIC ? fx.admin
                                                                                                        : fx.worker);
        hdr[0] = auth;
        kf_http_request("GET", url, NULL, hdr, NULL, 0, &g);
        kf_http_request("HEAD", url, NULL, hdr, NULL, 0, &h);
        cr_assert_eq(g.status, 200, "GET %s: %ld %s", path, g.status, g.body);
        cr_assert_eq(h.status, g.status, "HEAD %s: %ld", path, h.status);
        cr_assert_eq(h.body_len, 0, "HEAD %s sent a body", path);
        gct = kf_http_header(&g, "Content-Type");
        hct = kf_http_header(&h, "Content-Type");
        cr_assert(gct && hct && strcmp(gct, hct) == 0, "HEAD %s: Content-Type %s vs %s", path, hct ? hct : "-",
                  gct ? gct : "-");
        hcl = kf_http_header(&h, "Content-Length");
        cr_assert(hcl && atol(hcl) > 0, "HEAD %s: Content-Length %s", path, hcl ? hcl : "-");
        if (strstr(path, "/v1/jobs/"))   /* the same document, byte for byte */
            cr_assert_eq((size_t)atol(hcl), g.body_len, "HEAD %s: Content-Length %s, GET sent %zu", path, hcl,
                         g.body_len);
        free(gct);
        free(hct);
        free(hcl);
        kf_http_resp_release(&g);
        kf_http_resp_release(&h);
        free(path);
        free(url);
        free(auth);
    }
    cr_assert_geq(gets, 10);
    /* HEAD is checked like GET: a token, the route's roles. */
    {
        kf_http_resp r;
        char *url = kf_asprintf("%s/v1/jobs", fx.base);
        cr_assert_eq(kf_http_request("HEAD", url, NULL, NULL, NULL, 0, &r), 401);
        kf_http_resp_release(&r);
        free(url);
    }
    /* A job that ran no model has an empty transcript, still of its type. */
    {
        kf_http_resp r;
        char *p = kf_asprintf("/v1/jobs/%s/transcript", id2), *ct;
        cr_assert_eq(fx_req(&fx, "GET", p, fx.user, NULL, &r), 200, "%s", r.body);
        cr_assert_eq(r.body_len, 0, "%s", r.body);
        ct = kf_http_header(&r, "Content-Type");
        cr_assert(ct && strcmp(ct, "application/x-ndjson") == 0, "Content-Type %s", ct ? ct : "-");
        free(ct);
        free(p);
        kf_http_resp_release(&r);
    }
    /* Allow names HEAD wherever GET is allowed, and only there. */
    {
        kf_http_resp r;
        char *p = kf_asprintf("/v1/jobs/%s", id), *allow;
        cr_assert_eq(fx_req(&fx, "DELETE", p, fx.user, NULL, &r), 405);
        allow = kf_http_header(&r, "Allow");
        cr_assert_str_eq(allow, "GET, HEAD");
        free(allow);
        kf_http_resp_release(&r);
        cr_assert_eq(fx_req(&fx, "PUT", "/v1/jobs", fx.user, NULL, &r), 405);
        allow = kf_http_header(&r, "Allow");
        cr_assert_str_eq(allow, "POST, GET, HEAD");
        free(allow);
        kf_http_resp_release(&r);
        free(p);
        p = kf_asprintf("/v1/jobs/%s/cancel", id);
        cr_assert_eq(fx_req(&fx, "HEAD", p, fx.user, NULL, &r), 405);
        allow = kf_http_header(&r, "Allow");
        cr_assert_str_eq(allow, "POST");
        free(allow);
        kf_http_resp_release(&r);
        free(p);
    }
    free(id);
    free(id2);
}

/* POST /v1/jobs over a raw socket with the given framing headers. */
static long raw_post(const char *framing, const char *body, char **reply)
{
    char *req = kf_asprintf("POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                            "Content-Type: application/json\r\n%s\r\n%s",
                            fx.user, framing, body);
    long st = kf_http_raw(fx.port, req, strlen(req), 3000, reply);
    free(req);
    return st;
}

Test(api_edge, conflicting_content_length_or_transfer_encoding_is_400_and_closes)
{
    const char *job = "{\"kind\":\"diag\",\"target\":\"trn2\"}";   /* 31 bytes */
    /* What a proxy that reads the other header would take for a second request. */
    const char *smuggled = "GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    char *body = kf_asprintf("%s%s", job, smuggled);
    char *framing, *reply = NULL;
    static const char *const bad[] = {
        "Content-Length: 31\r\nContent-Length: 74\r\n",
        "Content-Length: 74\r\nContent-Length: 31\r\n",
        "Content-Length: 31\r\nContent-Length: x\r\n",
        "Content-Length: 31\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 31\r\n",
        NULL,
    };

    for (int i = 0; bad[i]; i++) {
        long st = raw_post(bad[i], body, &reply);
        cr_assert_eq(st, 400, "case %d: %s", i, reply);
        cr_assert(strstr(reply, "urn:kforge:problem:malformed-request"), "case %d: %s", i, reply);
        cr_assert(strstr(reply, "Connection: close") || strstr(reply, "connection: close"), "case %d: %s", i, reply);
        cr_assert_null(strstr(reply + 12, "HTTP/1.1 "), "case %d: one answer only: %s", i, reply);
        free(reply);
    }
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 0, "no framing case made a job");
    /* The same length twice is one length (RFC 9110 8.6). */
    framing = kf_asprintf("Content-Length: %zu\r\nContent-Length: %zu\r\nConnection: close\r\n", strlen(job),
                          strlen(job));
    cr_assert_eq(raw_post(framing, job, &reply), 202, "%s", reply);
    free(reply);
    free(framing);
    free(body);
}

/* True when the server closes fd (or has closed it) within ms, having sent
 * nothing; the time it took in *took_ms. */
static bool closed_silently(int fd, int ms, long long *took_ms)
{
    long long t0 = kf_test_now_ms();
    bool closed;
    char *got = kf_http_raw_read(fd, ms, &closed);
    bool silent = got[0] == '\0';

    *took_ms = kf_test_now_ms() - t0;
    free(got);
    return closed && silent;
}

Test(api_edge, one_address_holds_a_bounded_number_of_connections_and_silence_is_closed)
{
    int fds[6], extra, fresh;
    long long took;
    const char *get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    bool closed;
    char *got;

    /* KFORGE_API_CONNS_PER_IP=6: six connections are served... */
    for (int i = 0; i < 6; i++) {
        fds[i] = kf_http_raw_connect(fx.port);
        cr_assert_geq(fds[i], 0);
        cr_assert_eq(send(fds[i], get, strlen(get), MSG_NOSIGNAL), (ssize_t)strlen(get));
        got = kf_http_raw_read(fds[i], 300, &closed);
        cr_assert(strncmp(got, "HTTP/1.1 200", 12) == 0, "connection %d: %s", i, got);
        cr_assert_not(closed, "connection %d kept alive", i);
        free(got);
    }
    /* ...the seventh is closed at once, without an answer. */
    extra = kf_http_raw_connect(fx.port);
    cr_assert_geq(extra, 0);
    (void)send(extra, get, strlen(get), MSG_NOSIGNAL);
    cr_assert(closed_silently(extra, 1500, &took), "a seventh connection from 127.0.0.1 was served");
    close(extra);
    /* Two closed, others may come (once the server has seen the close). */
    close(fds[0]);
    close(fds[1]);
    {
        long st = 0;
        for (int i = 0; i < 20 && st != 200; i++) {
            st = kf_http_raw(fx.port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 54, 2000, NULL);
            if (st != 200)
                kf_test_sleep_ms(50);
        }
        cr_assert_eq(st, 200, "no connection served after two closed");
    }
    /* KFORGE_API_IDLE_TIMEOUT_S=2: idle keep-alive connections, and one that
     * stops half-way through its headers, are closed after 2 s of silence. */
    fresh = kf_http_raw_connect(fx.port);
    cr_assert_geq(fresh, 0);
    cr_assert_eq(send(fresh, "GET /healthz HTTP/1.1\r\nHo", 25, MSG_NOSIGNAL), 25);
    cr_assert(closed_silently(fresh, 6000, &took), "a half-sent request was kept open");
    cr_assert(took >= 1000 && took <= 5000, "closed after %lld ms", took);
    close(fresh);
    for (int i = 2; i < 6; i++) {
        cr_assert(closed_silently(fds[i], 6000, &took), "idle connection %d kept open", i);
        close(fds[i]);
    }
}

Test(api_edge, unknown_tokens_are_limited_to_429_and_valid_tokens_never_are)
{
    kf_http_resp r;
    char *ra, *www;
    cJSON *j;

    for (int i = 1; i <= 20; i++) {
        cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", "kf_guess", NULL, &r), 401, "failure %d: %s", i, r.body);
        kf_http_resp_release(&r);
        /* A valid token in between is never slowed. */
        cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", fx.user, NULL, &r), 200);
        kf_http_resp_release(&r);
    }
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", "kf_guess_21", NULL, &r), 429, "%s", r.body);
    j = fx_json(&r);
    cr_assert_str_eq(fx_str(j, "type"), "urn:kforge:problem:rate-limited");
    cr_assert_eq(cJSON_GetObjectItem(j, "status")->valueint, 429);
    cr_assert(strstr(fx_str(j, "detail"), "Retry-After"), "%s", r.body);
    cJSON_Delete(j);
    ra = kf_http_header(&r, "Retry-After");
    cr_assert(ra && atoi(ra) >= 1 && atoi(ra) <= 60, "Retry-After: %s", ra ? ra : "(none)");
    www = kf_http_header(&r, "Content-Type");
    cr_assert_str_eq(www, "application/problem+json");
    free(www);
    free(ra);
    kf_http_resp_release(&r);
    /* No token at all counts the same; a worker's and an admin's valid tokens still pass. */
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", NULL, NULL, &r), 429);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs", fx.admin, NULL, &r), 200);
    kf_http_resp_release(&r);
    cr_assert_eq(fx_req(&fx, "POST", "/v1/internal/workers/w1/heartbeat", fx.worker, "{}", &r), 200, "%s", r.body);
    kf_http_resp_release(&r);
    free(fx_submit(&fx, fx.user, NULL));
    /* Public routes need no token and are not limited. */
    cr_assert_eq(fx_req(&fx, "GET", "/healthz", NULL, NULL, &r), 200);
    kf_http_resp_release(&r);
}

/* ---- issue 22: what a fuzzer found, through the real API ------------------- */

#define OPT_X                                                                                                    \
    "\"kind\":\"optimize\",\"target\":\"trn2\",\"reference\":\"r\",\"source\":\"s\",\"entry\":\"k\",\"inputs\":" \
    "{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}}"

/* A problem body: valid UTF-8 that kforge's strict reader takes as JSON,
 * of type `slug`; the parsed body (caller deletes). */
static cJSON *strict_problem(const kf_http_resp *r, const char *slug)
{
    cJSON *v = NULL;
    kf_err e = KF_ERR_INIT;
    size_t at = 0;
    char type[96];

    cr_assert(kf_utf8_valid(r->body, r->body_len, &at), "the %ld body is not UTF-8 (byte %zu): %s", r->status, at,
              r->body);
    cr_assert_eq(kf_json_parse(r->body, r->body_len, KF_JSON_MAX_DEPTH, &v, &e), KF_OK, "%s: %s", e.msg, r->body);
    snprintf(type, sizeof(type), "urn:kforge:problem:%s", slug);
    cr_assert_str_eq(fx_str(v, "type"), type, "%s", r->body);
    return v;
}

/* Bug 5: names of multi-byte characters where the API cuts them still
 * give a 422 (or 400) body that is UTF-8 and JSON. */
Test(api_edge, error_bodies_are_utf8_whatever_the_names_cut)
{
    static const char *const chars[] = { "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80" };
    kf_http_resp r;

    for (int c = 0; c < 3; c++) {
        for (int k = 52; k < 100; k += 1) {
            char name[160], body[2400], *p;
            cJSON *v;
            int n = 0;
            size_t len;

            for (int i = 0; i < k; i++)
                name[n++] = (char)('a' + i % 26);
            for (int i = 0; i < 4; i++, n += (int)strlen(chars[c]))
                memcpy(name + n, chars[c], strlen(chars[c]));
            name[n] = '\0';
            /* Several long names: field paths, and the summary in "detail", are cut. */
            len = (size_t)snprintf(body, sizeof(body),
                                   "{" OPT_X ",\"tunables\":{\"%s\":[1]},\"labels\":{\"%s\":\"v\"},\"%s\":1", name,
                                   name, name);
            for (int i = 0; i < 8; i++)
                len += (size_t)snprintf(body + len, sizeof(body) - len, ",\"%d%s\":1", i, name);
            snprintf(body + len, sizeof(body) - len, "}");
            cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.user, body, &r), 422, "%ld %s", r.status, r.body);
            cJSON_Delete(strict_problem(&r, "validation"));
            kf_http_resp_release(&r);
            /* The same name twice in one object. */
            snprintf(body, sizeof(body), "{\"%s\":1,\"%s\":1}", name, name);
            cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.user, body, &r), 400, "%ld %s", r.status, r.body);
            cJSON_Delete(strict_problem(&r, "malformed-body"));
            kf_http_resp_release(&r);
            /* An unknown query parameter of that name, percent-encoded. */
            {
                kf_buf q = KF_BUF_INIT;
                for (const char *s = name; *s; s++)
                    kf_buf_addf(&q, "%%%02X", (unsigned char)*s);
                p = kf_asprintf("/v1/jobs?%s=1", q.data);
                kf_buf_release(&q);
            }
            cr_assert_eq(fx_req(&fx, "GET", p, fx.user, NULL, &r), 400, "%ld %s", r.status, r.body);
            v = strict_problem(&r, "bad-query");
            cJSON_Delete(v);
            kf_http_resp_release(&r);
            free(p);
        }
    }
    /* A query parameter name that is not UTF-8 at all. */
    cr_assert_eq(fx_req(&fx, "GET", "/v1/jobs?%ff%c3=1", fx.user, NULL, &r), 400, "%ld %s", r.status, r.body);
    cJSON_Delete(strict_problem(&r, "bad-query"));
    kf_http_resp_release(&r);
}

/* POST body to /v1/jobs: 422 naming `field` (with `rule`, and `words` in
 * its detail when not NULL). */
static void expect_422(const char *body, const char *field, const char *rule, const char *words)
{
    kf_http_resp r;
    cJSON *v, *e;
    bool found = false;

    cr_assert_eq(fx_req(&fx, "POST", "/v1/jobs", fx.user, body, &r), 422, "%s: %ld %s", body, r.status, r.body);
    v = strict_problem(&r, "validation");
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(v, "errors"))
    {
        if (strcmp(fx_str(e, "field"), field) == 0 && strcmp(fx_str(e, "rule"), rule) == 0)
            found = !words || strstr(fx_str(e, "detail"), words);
    }
    cr_assert(found, "%s: want %s/%s%s%s: %s", body, field, rule, words ? " saying " : "", words ? words : "", r.body);
    cJSON_Delete(v);
    kf_http_resp_release(&r);
}

/* Bug 3: a dimension of 1e49 is a 422, checked before any conversion. */
Test(api_edge, a_dimension_past_int64_is_422)
{
    expect_422("{\"kind\":\"generate\",\"shapes\":[[1e49]]}", "shapes[0][0]", "range", "2147483648");
    expect_422("{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"add\",\"dtype\":\"float32\",\"shapes\":[[-1e49]]}",
               "shapes[0][0]", "range", NULL);
}

/* Bug 2: 1e400 (infinity) is refused with 422 where it stands, not
 * accepted with 202 and then refused by the worker. */
Test(api_edge, numbers_past_a_double_are_422_not_a_job_the_worker_refuses)
{
    expect_422("{" OPT_X ",\"tunables\":{\"T\":[1,1e400]}}", "tunables.T[1]", "range", "finite");
    expect_422("{\"kind\":\"optimize\",\"target\":\"trn2\",\"spec\":{\"reference\":\"r\",\"source\":\"s\",\"entry\":\"k\","
               "\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}},\"tunables\":{\"T\":[-1e400]}}}",
               "spec.tunables.T[0]", "range", NULL);
    expect_422("{\"kind\":\"diag\",\"target\":\"trn2\",\"goal\":{\"latency_ns\":1e400}}", "goal.latency_ns", "type",
               NULL);
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 0, "a refused job was stored");
}

/* The other half of bug 2: what the API accepts at the edges of a double,
 * stored in PostgreSQL (jsonb) and read back as the scheduler's relay
 * does, makes a payload the worker accepts, with the same spec. */
Test(api_edge, a_stored_job_makes_a_payload_the_worker_accepts)
{
    static const char body[] =
        "{" OPT_X ",\"tunables\":{\"A\":[1.7976931348623157e308,-1.7976931348623157e308,5e-324,-0.0,0.1,"
        "9007199254740993,1e-400,0.30000000000000004],\"B\":[true,\"\xf0\x9f\x98\x80\"]},"
        "\"goal\":{\"latency_ns\":1e15}}";
    char *id = fx_submit(&fx, fx.user, body);
    char *spec = fx_sql(&fx, "SELECT spec::text FROM jobs WHERE id = $1", id);
    char *budget = fx_sql(&fx, "SELECT budget::text FROM jobs WHERE id = $1", id);
    char *goal = fx_sql(&fx, "SELECT goal::text FROM jobs WHERE id = $1", id);
    kf_err e = KF_ERR_INIT;
    kf_job_payload p;
    char *payload = kf_job_payload_build(id, "optimize", "trn2", "sim", spec, budget, goal, &e);
    const cJSON *a;

    cr_assert_not_null(payload, "%s", e.msg);
    cr_assert_eq(kf_job_payload_parse(payload, &p, &e), KF_OK, "the worker refuses a job the API stored: %s: %s",
                 payload, e.msg);
    a = cJSON_GetObjectItem(cJSON_GetObjectItem(p.spec, "tunables"), "A");
    cr_assert_eq(cJSON_GetArraySize(a), 8);
    cr_assert(cJSON_GetArrayItem(a, 0)->valuedouble == 1.7976931348623157e308, "%s", spec);
    cr_assert(cJSON_GetArrayItem(a, 2)->valuedouble == 5e-324, "%s", spec);
    cr_assert(cJSON_GetArrayItem(a, 4)->valuedouble == 0.1, "%s", spec);
    cr_assert(cJSON_GetArrayItem(a, 7)->valuedouble == 0.30000000000000004, "%s", spec);
    kf_job_payload_release(&p);
    free(payload);
    free(spec);
    free(budget);
    free(goal);
    free(id);
}

/* Bug 7: eight dimensions of 2^31 are a 422 that says the limit. */
Test(api_edge, a_shape_past_256_gib_is_422_with_the_limit)
{
    expect_422("{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"add\",\"dtype\":\"float32\",\"shapes\":[[2147483648,"
               "2147483648,2147483648,2147483648,2147483648,2147483648,2147483648,2147483648]]}",
               "shapes[0]", "range", "274877906944");
    expect_422("{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":"
               "[2147483648,128],\"dtype\":\"int8\"},\"y\":{\"shape\":[1],\"dtype\":\"int8\"}}}",
               "inputs", "range", "274877906944");
    cr_assert_eq(fx_sql_int(&fx, "SELECT count(*) FROM jobs", NULL), 0, "a refused job was stored");
}

/* Bug 4: a forged cursor whose time PostgreSQL cannot hold is 400, never 500;
 * the last microsecond of year 9999 and the epoch are pages. */
Test(api_edge, forged_cursors_are_400_up_to_the_times_postgresql_holds)
{
    static const char *const bad[] = { "9999999999999999999", "18446744073709551616", "9223372036854775808",
                                       "9223372036854775807", "253402300800000000",   "-1",
                                       "+1",                  "1e3",                  "",
                                       NULL };
    static const char *const good[] = { "253402300799999999", "0", "1", "1764495667123456", NULL };
    char *id = fx_submit(&fx, fx.user, NULL);
    char cur[128];
    kf_http_resp r;

    for (int i = 0; bad[i]; i++) {
        char *p;
        cJSON *v;

        api_cursor_make(bad[i], id, cur, sizeof(cur));
        p = kf_asprintf("/v1/jobs?cursor=%s", cur);
        cr_assert_eq(fx_req(&fx, "GET", p, fx.user, NULL, &r), 400, "%s: %ld %s", bad[i], r.status, r.body);
        v = strict_problem(&r, "bad-query");
        cr_assert_str_eq(fx_str(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "errors"), 0), "field"), "cursor");
        cJSON_Delete(v);
        kf_http_resp_release(&r);
        free(p);
    }
    for (int i = 0; good[i]; i++) {
        char *p;
        cJSON *v;

        api_cursor_make(good[i], id, cur, sizeof(cur));
        p = kf_asprintf("/v1/jobs?cursor=%s", cur);
        cr_assert_eq(fx_req(&fx, "GET", p, fx.user, NULL, &r), 200, "%s: %ld %s", good[i], r.status, r.body);
        v = fx_json(&r);
        /* Every job is older than year 9999 and none older than 1970. */
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(v, "jobs")), i == 0 ? 1 : 0, "%s: %s", good[i], r.body);
        cJSON_Delete(v);
        kf_http_resp_release(&r);
        free(p);
    }
    free(id);
}
