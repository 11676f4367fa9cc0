/*
 * kf_log — one-line structured logs on stderr.
 *
 * Format: `2026-11-30T09:41:07.123Z level=info comp=api msg="..." k=v ...`,
 * logfmt so that both people and tools read it.  Control bytes in a
 * message (whatever it quotes: a path, a header, an id) are escaped as
 * \n, \r, \t or \xHH and a backslash as \\, so every call writes exactly
 * one line and no input can forge one.  The level is checked
 * before the arguments are evaluated.  Set once at start-up with
 * kf_log_init(); thread-safe (one write(2) per line, or per batch of
 * whole lines with kf_log_add).
 */
#ifndef KF_LOG_H
#define KF_LOG_H

#include "kf_buf.h"

typedef enum kf_log_level {
    KF_LOG_DEBUG = 0,
    KF_LOG_INFO,
    KF_LOG_WARN,
    KF_LOG_ERROR,
} kf_log_level;

extern kf_log_level kf_log__level;

/* comp: "api", "worker", ...; level_name: debug|info|warn|error (NULL = info).
 * Returns -1 and leaves the level unchanged when level_name is unknown. */
int kf_log_init(const char *comp, const char *level_name);

void kf_log__write(kf_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The message is a printf format; append logfmt pairs in the message itself
 * after the text, e.g. kf_log_info("job leased job=%s attempt=%d", id, n). */
#define kf_log(lvl, ...)                                   \
    do {                                                   \
        if ((lvl) >= kf_log__level)                        \
            kf_log__write((lvl), __VA_ARGS__);             \
    } while (0)
#define kf_log_debug(...) kf_log(KF_LOG_DEBUG, __VA_ARGS__)
#define kf_log_info(...)  kf_log(KF_LOG_INFO, __VA_ARGS__)
#define kf_log_warn(...)  kf_log(KF_LOG_WARN, __VA_ARGS__)
#define kf_log_error(...) kf_log(KF_LOG_ERROR, __VA_ARGS__)

/* Many lines in one write(2), for a thread that logs one line per item of
 * a batch: kf_log_add formats the line (nothing below the level) into
 * lines, writing out first what is there when the new line would take it
 * past PIPE_BUF (so no line is split between writers when stderr is a
 * pipe); kf_log_flush writes the rest and empties lines.  The caller owns
 * lines. */
void kf_log_add(kf_buf *lines, kf_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void kf_log_flush(kf_buf *lines);

#endif
