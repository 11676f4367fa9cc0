/*
 * cli_http — the CLI's HTTP exchanges with kforge-api (libcurl): one
 * request with a JSON answer, one download into a file with its SHA-256,
 * and one connection of a Server-Sent Events stream fed to kf_sse_client.
 *
 * Every request goes to KFORGE_API_URL + path with the Bearer token
 * KFORGE_TOKEN.  curl_global_init is the caller's (main).
 *
 * Failure: the functions return 0 when an HTTP answer came (whatever its
 * status, in r->status) and -1 when none did (r->err says why: refused,
 * timed out, DNS...).  An answer >= 400 has its problem+json in r->body.
 * Ownership: cli_resp's body is the caller's (cli_resp_release).
 */
#ifndef CLI_HTTP_H
#define CLI_HTTP_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "kf_buf.h"
#include "kf_error.h"
#include "kf_sse_client.h"

typedef struct cli_resp {
    long   status;                  /* HTTP status; 0 when no answer */
    kf_buf body;                    /* the answer (for a download: only when status >= 400) */
    char   err[CURL_ERROR_SIZE];    /* why no answer came */
} cli_resp;

#define CLI_RESP_INIT { 0, KF_BUF_INIT, { 0 } }

void cli_resp_release(cli_resp *r);

/* One request; body may be NULL (GET, or an empty POST). */
int cli_http(const char *method, const char *path, const char *body, const char *idem_key, cli_resp *r);

/* GET path into `out`, hashing what it writes: sha256_hex (65 bytes) and
 * *bytes when the answer is 2xx.  At most max_bytes are accepted (more
 * fails with r->err set and -1). */
int cli_http_download(const char *path, FILE *out, long long max_bytes, char *sha256_hex, long long *bytes,
                      cli_resp *r);

/* What one stream connection did. */
typedef struct cli_stream_io {
    kf_sse_parser *parser;
    kf_sse_cb      cb;              /* each event; a non-OK code ends the connection */
    void          *ud;
    long           max_seconds;     /* the connection's own time limit (0 none) */
    long           idle_seconds;    /* no byte for this long: the connection is dropped */
    bool           stop;            /* set by cb: close this connection after the event (e.g. `end`) */
    int            events;          /* out: events this connection dispatched */
    kf_code        rc;              /* out: the parser's or the callback's code */
    kf_err         err;             /* out: its message */
} cli_stream_io;

/* One connection to an event stream (Accept: text/event-stream, and
 * Last-Event-ID when the parser has seen an id).  Returns as cli_http;
 * io->rc is not KF_OK when the parser or the callback stopped it. */
int cli_http_stream(const char *path, cli_stream_io *io, cli_resp *r);

/* How cli_http_follow ended. */
typedef enum cli_follow_end {
    CLI_FOLLOW_ENDED,               /* the callback set io->stop: the stream's end came */
    CLI_FOLLOW_TIMEOUT,             /* `deadline` passed first (nothing printed: the caller says what was left) */
    CLI_FOLLOW_REFUSED,             /* an answer >= 400, a bad stream, or one that keeps closing (printed) */
    CLI_FOLLOW_UNREACHABLE          /* no answer, ten times running (printed) */
} cli_follow_end;

/* Follow an event stream until its end: connections of cli_http_stream,
 * each resumed with Last-Event-ID after a drop, after the server's
 * `retry:` or a pause growing by 0.5 s per fruitless try (at most 30 s);
 * a 503 is a drop.  The caller sets io->parser, cb, ud and idle_seconds;
 * `what` names the stream in messages ("job ID").  Errors go to stderr. */
cli_follow_end cli_http_follow(const char *path, const char *what, time_t deadline, cli_stream_io *io);

/* A problem+json answer as one line on stderr ("kforge: 404 Not found: ..."). */
void cli_print_problem(const cli_resp *r);

/* "kforge: cannot reach URL: why (is kforge-api running? ...)" on stderr. */
void cli_print_unreachable(const cli_resp *r);

#endif
