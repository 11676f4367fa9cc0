/*
 * fuzz_sse_client — the CLI's Server-Sent Events parser (kf_sse_client),
 * which reads what a server (or anything answering at KFORGE_API_URL)
 * streams to `kforge wait`.  The first byte picks the chunk size (1..32
 * bytes, or the whole input at once) and small bounds on even values; the
 * rest is the stream.
 *
 * Promises checked:
 *  - no event is dispatched with more data than max_data, a type with a
 *    CR or LF, or an id with a CR, LF or NUL or longer than KF_SSE_MAX_ID;
 *  - the events do not depend on how the bytes were cut into chunks: the
 *    chunked feed gives the same events (and the same failure, if any) as
 *    the whole input fed at once;
 *  - once a bound is broken the parser refuses more input until restart,
 *    and after kf_sse_restart it parses again from a clean line.
 */
#include "fuzz.h"

#include "kf_buf.h"
#include "kf_sse_client.h"

typedef struct trace {
    kf_buf log;
    size_t max_data;
} trace;

static kf_code on_event(void *ud, const kf_sse_event *ev, kf_err *err)
{
    trace *t = ud;
    size_t id_len = strlen(ev->id);

    (void)err;
    FUZZ_CHECK(ev->data_len <= t->max_data, "event data of %zu bytes over the bound %zu", ev->data_len, t->max_data);
    FUZZ_CHECK(strpbrk(ev->type, "\r\n") == NULL, "event type with a line end");
    FUZZ_CHECK(*ev->type != '\0', "empty event type");
    FUZZ_CHECK(id_len <= KF_SSE_MAX_ID, "id of %zu bytes", id_len);
    FUZZ_CHECK(strpbrk(ev->id, "\r\n") == NULL, "id with a line end");
    FUZZ_CHECK(memchr(ev->data, '\r', ev->data_len) == NULL, "data with a CR");
    kf_buf_addf(&t->log, "%s|%s|%zu|", ev->type, ev->id, ev->data_len);
    kf_buf_add(&t->log, ev->data, ev->data_len);
    kf_buf_addc(&t->log, '\n');
    return KF_OK;
}

static kf_code run(const char *s, size_t n, size_t step, size_t max_line, size_t max_data, trace *t)
{
    kf_sse_parser *p = kf_sse_new(max_line, max_data);
    kf_code rc = KF_OK;

    t->max_data = max_data ? max_data : KF_SSE_DEF_MAX_DATA;
    for (size_t i = 0; i < n && rc == KF_OK; i += step)
        rc = kf_sse_feed(p, s + i, n - i < step ? n - i : step, on_event, t, NULL);
    if (rc != KF_OK) {
        FUZZ_CHECK(kf_sse_feed(p, "data: x\n\n", 9, on_event, t, NULL) != KF_OK, "a failed parser took more input");
        kf_sse_restart(p);
        FUZZ_CHECK(kf_sse_feed(p, "\ndata: x\n\n", 10, on_event, t, NULL) == KF_OK, "restart did not recover");
    }
    kf_buf_addf(&t->log, "rc=%d last=%s\n", (int)rc, kf_sse_last_id(p));
    kf_sse_free(p);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    trace whole = { KF_BUF_INIT, 0 }, parts = { KF_BUF_INIT, 0 };
    size_t step, max_line, max_data;
    const char *s;

    if (size < 1)
        return 0;
    step = (size_t)(data[0] % 33) + 1;
    max_line = data[0] & 1 ? 0 : 64;
    max_data = data[0] & 1 ? 0 : 256;
    s = (const char *)data + 1;
    run(s, size - 1, size, max_line, max_data, &whole);
    run(s, size - 1, step, max_line, max_data, &parts);
    FUZZ_CHECK(whole.log.len == parts.log.len && memcmp(whole.log.data, parts.log.data, whole.log.len) == 0,
               "chunks of %zu bytes gave other events:\n%s\nthan the whole input:\n%s", step, parts.log.data,
               whole.log.data);
    kf_buf_release(&whole.log);
    kf_buf_release(&parts.log);
    return 0;
}
