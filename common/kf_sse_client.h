/*
 * kf_sse_client — an incremental parser of a Server-Sent Events stream
 * (text/event-stream, the WHATWG "event stream interpretation"), for the
 * clients of GET /v1/jobs/{id}/stream.
 *
 * Bytes go in as they arrive, in chunks of any size (a line or a CRLF may
 * be split anywhere); each complete event goes to a callback.  Lines end
 * with LF, CRLF or CR; a UTF-8 BOM opening the stream is skipped; comment
 * lines (": hb") count as heartbeats and dispatch nothing; unknown fields
 * are ignored, and so are an `event:` or `id:` holding a NUL byte (no C
 * string can carry it); `retry:` with digits only sets retry_ms.
 *
 * Bounds: the stream is the server's, so a line longer than max_line bytes,
 * an event whose data exceeds max_data bytes, or an `id:` longer than
 * KF_SSE_MAX_ID bytes (it is sent back as Last-Event-ID) makes kf_sse_feed
 * fail with KF_TOO_LARGE; the parser is then spent until kf_sse_restart.
 *
 * Ownership: the parser is the caller's (kf_sse_new / kf_sse_free, NULL
 * allowed).  The strings of a kf_sse_event belong to the parser and are
 * valid only during the callback.  Failure: errors are values (kf_err);
 * a callback's non-OK code stops the feed and is returned as is.
 */
#ifndef KF_SSE_CLIENT_H
#define KF_SSE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "kf_error.h"

#define KF_SSE_MAX_ID 256              /* bytes of an event id */
#define KF_SSE_DEF_MAX_LINE ((size_t)64 * 1024)
#define KF_SSE_DEF_MAX_DATA ((size_t)1024 * 1024)

typedef struct kf_sse_parser kf_sse_parser;

typedef struct kf_sse_event {
    const char *type;      /* the `event:` field; "message" when none was given */
    const char *id;        /* the last event id in force ("" when none) */
    const char *data;      /* the `data:` lines joined by "\n" (may hold NUL bytes) */
    size_t      data_len;
} kf_sse_event;

/* Called once per dispatched event; return KF_OK to go on. */
typedef kf_code (*kf_sse_cb)(void *ud, const kf_sse_event *ev, kf_err *err);

/* A parser with these bounds (0 picks the KF_SSE_DEF_* default). */
kf_sse_parser *kf_sse_new(size_t max_line, size_t max_data);
void kf_sse_free(kf_sse_parser *p);

/* Parse n more bytes, calling cb for each event they complete. */
kf_code kf_sse_feed(kf_sse_parser *p, const char *buf, size_t n, kf_sse_cb cb, void *ud, kf_err *err);

/* A new connection of the same stream: forget the partial line and event
 * (and an earlier error) but keep the last event id and retry_ms. */
void kf_sse_restart(kf_sse_parser *p);

const char *kf_sse_last_id(const kf_sse_parser *p);   /* "" when none */
long kf_sse_retry_ms(const kf_sse_parser *p);         /* -1 when the server set none */
unsigned long kf_sse_comments(const kf_sse_parser *p); /* comment lines (heartbeats) seen */

#endif
