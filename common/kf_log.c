/* kf_log — see kf_log.h.  Every message is formatted whole, then its
 * control bytes are escaped, then it goes out in one write(2). */
#include "kf_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

kf_log_level kf_log__level = KF_LOG_INFO;
static char kf_log_comp[32] = "kforge";
static const char *const kf_log_names[] = { "debug", "info", "warn", "error" };

int kf_log_init(const char *comp, const char *level_name)
{
    if (comp)
        snprintf(kf_log_comp, sizeof(kf_log_comp), "%s", comp);
    if (!level_name || !*level_name)
        return 0;
    for (int i = 0; i < 4; i++) {
        if (strcmp(level_name, kf_log_names[i]) == 0) {
            kf_log__level = (kf_log_level)i;
            return 0;
        }
    }
    return -1;
}

/* The message into out (cap bytes, room for a newline kept): control
 * bytes (U+0000..U+001F, DEL) escaped as \n, \r, \t or \xHH, and a
 * backslash as \\, so that whatever a message quotes (a request's path,
 * a header, a worker's id) stays on its own line and reads back
 * unambiguously.  Returns the length written, without a NUL. */
static size_t kf_log_msg(char *out, size_t cap, const char *fmt, va_list ap)
{
    static const char hex[] = "0123456789abcdef";
    char raw[4096];
    size_t n = 0;

    vsnprintf(raw, sizeof(raw), fmt, ap);
    for (const char *p = raw; *p && n + 5 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != 0x7f && c != '\\') {
            out[n++] = (char)c;
            continue;
        }
        out[n++] = '\\';
        switch (c) {
        case '\n': out[n++] = 'n'; break;
        case '\r': out[n++] = 'r'; break;
        case '\t': out[n++] = 't'; break;
        case '\\': out[n++] = '\\'; break;
        default:
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    return n;
}

/* One line, newline included, into line (cap bytes); returns its length. */
static size_t kf_log_format(char *line, size_t cap, kf_log_level lvl, const char *fmt, va_list ap)
{
    struct timespec ts;
    struct tm tm;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, cap - n, ".%03ldZ level=%s comp=%s pid=%d msg=", ts.tv_nsec / 1000000L,
                          kf_log_names[lvl], kf_log_comp, (int)getpid());
    n += kf_log_msg(line + n, cap - n, fmt, ap);
    line[n++] = '\n';
    return n;
}

void kf_log__write(kf_log_level lvl, const char *fmt, ...)
{
    char line[4096];
    size_t n;
    va_list ap;

    va_start(ap, fmt);
    n = kf_log_format(line, sizeof(line), lvl, fmt, ap);
    va_end(ap);
    (void)!write(STDERR_FILENO, line, n);
}

void kf_log_add(kf_buf *lines, kf_log_level lvl, const char *fmt, ...)
{
    char line[4096];   /* PIPE_BUF on Linux: one write of this much is never split */
    size_t n;
    va_list ap;

    if (lvl < kf_log__level)
        return;
    va_start(ap, fmt);
    n = kf_log_format(line, sizeof(line), lvl, fmt, ap);
    va_end(ap);
    if (lines->len + n > sizeof(line))
        kf_log_flush(lines);
    kf_buf_add(lines, line, n);
}

void kf_log_flush(kf_buf *lines)
{
    if (lines->len)
        (void)!write(STDERR_FILENO, lines->data, lines->len);
    kf_buf_reset(lines);
}
