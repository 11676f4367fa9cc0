/* kf_sse_client — Server-Sent Events stream parser (see kf_sse_client.h). */
#include "kf_sse_client.h"

#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_buf.h"

struct kf_sse_parser {
    size_t        max_line, max_data;
    kf_buf        line;          /* the line being read, without its end */
    kf_buf        data;          /* the event's data, each line followed by "\n" */
    kf_buf        type;          /* the event's `event:` field ("" none) */
    char          id[KF_SSE_MAX_ID + 1];
    long          retry_ms;
    unsigned long comments;
    bool          after_cr;      /* the last byte was a CR: a following LF ends nothing */
    bool          first_line;    /* no line of this stream completed yet (BOM check) */
    bool          failed;        /* a bound was broken; only kf_sse_restart helps */
};

kf_sse_parser *kf_sse_new(size_t max_line, size_t max_data)
{
    kf_sse_parser *p = kf_calloc(1, sizeof(*p));

    p->max_line = max_line ? max_line : KF_SSE_DEF_MAX_LINE;
    p->max_data = max_data ? max_data : KF_SSE_DEF_MAX_DATA;
    kf_buf_init(&p->line);
    kf_buf_init(&p->data);
    kf_buf_init(&p->type);
    p->retry_ms = -1;
    p->first_line = true;
    return p;
}

void kf_sse_free(kf_sse_parser *p)
{
    if (!p)
        return;
    kf_buf_release(&p->line);
    kf_buf_release(&p->data);
    kf_buf_release(&p->type);
    free(p);
}

void kf_sse_restart(kf_sse_parser *p)
{
    kf_buf_reset(&p->line);
    kf_buf_reset(&p->data);
    kf_buf_reset(&p->type);
    p->after_cr = false;
    p->first_line = true;
    p->failed = false;
}

const char *kf_sse_last_id(const kf_sse_parser *p)
{
    return p->id;
}

long kf_sse_retry_ms(const kf_sse_parser *p)
{
    return p->retry_ms;
}

unsigned long kf_sse_comments(const kf_sse_parser *p)
{
    return p->comments;
}

/* The blank line: dispatch the event if it has data, then start anew. */
static kf_code kf_sse_dispatch(kf_sse_parser *p, kf_sse_cb cb, void *ud, kf_err *err)
{
    kf_sse_event ev;
    kf_code rc = KF_OK;

    if (p->data.len > 0) {
        p->data.data[--p->data.len] = '\0';   /* the last line's "\n" */
        ev.type = p->type.len ? p->type.data : "message";
        ev.id = p->id;
        ev.data = p->data.data;
        ev.data_len = p->data.len;
        rc = cb(ud, &ev, err);
    }
    kf_buf_reset(&p->data);
    kf_buf_reset(&p->type);
    return rc;
}

/* One complete line (without its end): a field, a comment or the blank line. */
static kf_code kf_sse_line(kf_sse_parser *p, kf_sse_cb cb, void *ud, kf_err *err)
{
    const char *s = p->line.data, *colon, *val;
    size_t n = p->line.len, name_len, val_len;

    if (p->first_line) {
        p->first_line = false;
        if (n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3;
            n -= 3;
        }
    }
    if (n == 0)
        return kf_sse_dispatch(p, cb, ud, err);
    if (s[0] == ':') {
        p->comments++;
        return KF_OK;
    }
    colon = memchr(s, ':', n);
    name_len = colon ? (size_t)(colon - s) : n;
    val = colon ? colon + 1 : s + n;
    val_len = colon ? n - name_len - 1 : 0;
    if (val_len > 0 && val[0] == ' ') {
        val++;
        val_len--;
    }
    if (name_len == 4 && memcmp(s, "data", 4) == 0) {
        if (p->data.len + val_len + 1 > p->max_data) {
            p->failed = true;
            return kf_err_set(err, KF_TOO_LARGE, "the server sent an event with more than %zu bytes of data; "
                              "this client stops there (is KFORGE_API_URL a kforge-api?)", p->max_data);
        }
        kf_buf_add(&p->data, val, val_len);
        kf_buf_addc(&p->data, '\n');
    } else if (name_len == 5 && memcmp(s, "event", 5) == 0) {
        if (memchr(val, '\0', val_len))
            return KF_OK;   /* a type no C string can name: ignored, as such an id is */
        kf_buf_reset(&p->type);
        kf_buf_add(&p->type, val, val_len);
    } else if (name_len == 2 && memcmp(s, "id", 2) == 0) {
        if (memchr(val, '\0', val_len))
            return KF_OK;   /* the standard ignores such an id */
        if (val_len > KF_SSE_MAX_ID) {
            p->failed = true;
            return kf_err_set(err, KF_TOO_LARGE, "the server sent an event id of %zu bytes; the limit is %d",
                              val_len, KF_SSE_MAX_ID);
        }
        memcpy(p->id, val, val_len);
        p->id[val_len] = '\0';
    } else if (name_len == 5 && memcmp(s, "retry", 5) == 0) {
        long v = 0;
        size_t i;
        for (i = 0; i < val_len && val[i] >= '0' && val[i] <= '9' && v < 100000000L; i++)
            v = v * 10 + (val[i] - '0');
        if (val_len > 0 && i == val_len)
            p->retry_ms = v;
    }
    return KF_OK;
}

kf_code kf_sse_feed(kf_sse_parser *p, const char *buf, size_t n, kf_sse_cb cb, void *ud, kf_err *err)
{
    if (p->failed)
        return kf_err_set(err, KF_INVALID, "the event stream already failed; reconnect (kf_sse_restart)");
    for (size_t i = 0; i < n;) {
        char c = buf[i];
        if (c == '\n' && p->after_cr) {
            p->after_cr = false;
            i++;
            continue;
        }
        p->after_cr = false;
        if (c == '\r' || c == '\n') {
            kf_code rc;
            p->after_cr = c == '\r';
            rc = kf_sse_line(p, cb, ud, err);
            kf_buf_reset(&p->line);
            if (rc != KF_OK)
                return rc;
            i++;
            continue;
        }
        {
            /* the run of bytes up to the next line end, added at once */
            size_t run = i;
            while (run < n && buf[run] != '\r' && buf[run] != '\n')
                run++;
            if (p->line.len + (run - i) > p->max_line) {
                p->failed = true;
                return kf_err_set(err, KF_TOO_LARGE, "the server sent an event-stream line longer than %zu bytes",
                                  p->max_line);
            }
            kf_buf_add(&p->line, buf + i, run - i);
            i = run;
        }
    }
    return KF_OK;
}
