/*
 * kf_test_http — one HTTP request with libcurl, for tests.
 *
 * kf_http_request() sends METHOD URL with an optional Bearer token, extra
 * header lines ("Name: value") and a body, and fills a kf_http_resp with
 * the status, the raw response header block and the body.  A transport
 * failure (connection refused, timeout) gives status 0 and the curl error
 * text in `error`.  Every request has a 30 s time limit.
 *
 * Ownership: the response owns its strings; release it with
 * kf_http_resp_release() (NULL-safe, leaves it empty).  kf_http_header()
 * returns a heap copy the caller frees.
 */
#ifndef KF_TEST_HTTP_H
#define KF_TEST_HTTP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kf_http_resp {
    long   status;       /* HTTP status; 0 when the request never completed */
    char  *headers;      /* raw header block of the final response */
    char  *body;         /* NUL-terminated (the body may also hold NULs) */
    size_t body_len;
    char   error[256];   /* curl's message when status == 0 */
} kf_http_resp;

/* headers: NULL-terminated array of "Name: value" lines, or NULL.
 * body: NULL for no body; body_len (size_t)-1 means strlen(body).
 * Returns the status (0 on transport failure). */
long kf_http_request(const char *method, const char *url, const char *token, const char *const *headers,
                     const char *body, size_t body_len, kf_http_resp *out);

/* Shorthand: JSON body with Content-Type: application/json (body may be NULL). */
long kf_http_json(const char *method, const char *url, const char *token, const char *body, kf_http_resp *out);

/* Value of the first header `name` (case-insensitive) of the response,
 * trimmed, or NULL.  Caller frees. */
char *kf_http_header(const kf_http_resp *r, const char *name);

void kf_http_resp_release(kf_http_resp *r);

/* Raw HTTP over a socket, for what libcurl will not send (conflicting
 * framing headers, partial requests).  kf_http_raw_connect opens a TCP
 * connection to 127.0.0.1:port (-1 on failure); kf_http_raw_read reads
 * until the server closes or timeout_ms passes and returns what came
 * (caller frees; "" when nothing), *closed telling whether the server
 * closed the connection.  kf_http_raw sends req on a new connection and
 * returns the status of the first response (0 when none came), its whole
 * text in *reply when reply is not NULL (caller frees). */
int kf_http_raw_connect(int port);
char *kf_http_raw_read(int fd, int timeout_ms, bool *closed);
long kf_http_raw(int port, const char *req, size_t len, int timeout_ms, char **reply);

/* GET url until it answers `status` or timeout_ms passes.  True on success. */
bool kf_http_wait_status(const char *url, long status, int timeout_ms);

#endif
