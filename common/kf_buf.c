#include "kf_buf.h"
#include "kf_alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char kf_buf__empty[1];

void kf_buf_init(kf_buf *b)
{
    b->data = kf_buf__empty;
    b->len = 0;
    b->cap = 0;
}

void kf_buf_release(kf_buf *b)
{
    if (b->cap)
        free(b->data);
    kf_buf_init(b);
}

void kf_buf_reset(kf_buf *b)
{
    b->len = 0;
    if (b->cap)
        b->data[0] = '\0';
}

void kf_buf_grow(kf_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    size_t cap;

    if (need <= b->cap)
        return;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    if (b->cap) {
        b->data = kf_realloc(b->data, cap);
    } else {
        b->data = kf_malloc(cap);
        b->data[0] = '\0';
    }
    b->cap = cap;
}

void kf_buf_add(kf_buf *b, const void *p, size_t n)
{
    kf_buf_grow(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void kf_buf_adds(kf_buf *b, const char *s)
{
    kf_buf_add(b, s, strlen(s));
}

void kf_buf_addc(kf_buf *b, char c)
{
    kf_buf_add(b, &c, 1);
}

void kf_buf_addf(kf_buf *b, const char *fmt, ...)
{
    va_list ap;
    size_t room = b->cap ? b->cap - b->len : 0;   /* NUL included */
    int n;

    /* Format once into the room there is; only what does not fit is
     * formatted a second time, after growing. */
    va_start(ap, fmt);
    n = room ? vsnprintf(b->data + b->len, room, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0) {
        if (room)
            b->data[b->len] = '\0';
        return;
    }
    if ((size_t)n >= room) {
        kf_buf_grow(b, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

char *kf_buf_detach(kf_buf *b)
{
    char *p = b->cap ? b->data : kf_strdup("");
    kf_buf_init(b);
    return p;
}

size_t kf_utf8_cut(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = n, need;
    unsigned lead;

    /* Back over at most three continuation bytes to the last lead byte. */
    while (i > 0 && n - i < 3 && (p[i - 1] & 0xc0) == 0x80)
        i--;
    if (i == 0)
        return n;
    lead = p[i - 1];
    if ((lead & 0xe0) == 0xc0)
        need = 2;
    else if ((lead & 0xf0) == 0xe0)
        need = 3;
    else if ((lead & 0xf8) == 0xf0)
        need = 4;
    else
        return n;   /* ASCII, or not UTF-8: nothing to complete */
    return n - (i - 1) < need ? i - 1 : n;
}

void kf_utf8_copy(char *out, size_t cap, const char *s)
{
    size_t n = strnlen(s, cap - 1);

    n = kf_utf8_cut(s, n);
    memcpy(out, s, n);
    out[n] = '\0';
}
