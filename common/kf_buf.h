/*
 * kf_buf — a growable byte buffer that is always NUL-terminated.
 *
 * Embed it by value (`kf_buf b = KF_BUF_INIT;`), append, read `b.data` /
 * `b.len`, and kf_buf_release() when done.  After release the buffer is
 * empty and may be reused.  kf_buf_detach() hands the heap string to the
 * caller, who then frees it.  Appends cannot fail (kf_alloc aborts on OOM).
 */
#ifndef KF_BUF_H
#define KF_BUF_H

#include <stddef.h>

typedef struct kf_buf {
    char  *data;   /* NUL-terminated; "" (static) when empty */
    size_t len;    /* bytes used, excluding the NUL */
    size_t cap;    /* bytes allocated; 0 while data points at "" */
} kf_buf;

extern char kf_buf__empty[];
#define KF_BUF_INIT { kf_buf__empty, 0, 0 }

void kf_buf_init(kf_buf *b);
void kf_buf_release(kf_buf *b);
void kf_buf_reset(kf_buf *b);            /* len = 0, keeps capacity */
void kf_buf_grow(kf_buf *b, size_t extra);
void kf_buf_add(kf_buf *b, const void *p, size_t n);
void kf_buf_adds(kf_buf *b, const char *s);
void kf_buf_addc(kf_buf *b, char c);
void kf_buf_addf(kf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *kf_buf_detach(kf_buf *b);          /* caller frees; b is reset */

/* Where to cut text so that it ends between characters: n, less the bytes
 * of a last character that starts before n but does not end by n (0 to 3
 * bytes).  s[0..n) is the start of UTF-8 text (the start of a longer text,
 * perhaps); nothing past n is read.  Every place that bounds a text by
 * bytes (a "%.*s" precision, a fixed buffer, a truncated snprintf) cuts
 * there, so that what it writes stays valid UTF-8 and valid JSON text. */
size_t kf_utf8_cut(const char *s, size_t n);

/* Copy s into out[0..cap) cut by kf_utf8_cut, NUL-terminated (cap > 0). */
void kf_utf8_copy(char *out, size_t cap, const char *s);

#endif
