/*
 * kf_error — errors as values.
 *
 * Every fallible kforge function returns a kf_code (0 = KF_OK) and, when it
 * fails, fills a caller-owned `kf_err` with the code and a message that tells
 * the user what to do.  The codes are declared once in KF_ERROR_MAP with the
 * HTTP status and problem title the API answers with, so the mapping from an
 * internal failure to a problem+json response lives in one place.
 *
 * Ownership: kf_err is a plain value; it owns no memory and needs no release.
 * Passing NULL for `err` is allowed everywhere: the message is then dropped.
 */
#ifndef KF_ERROR_H
#define KF_ERROR_H

#include <stddef.h>

/*      name               http  title (problem+json "title") */
#define KF_ERROR_MAP(XX)                                                        \
    XX(OK,                  200, "OK")                                          \
    XX(INVALID,             400, "Invalid request")                             \
    XX(UNAUTHORIZED,        401, "Missing or invalid token")                    \
    XX(FORBIDDEN,           403, "Not allowed for this token's role")           \
    XX(NOT_FOUND,           404, "Not found")                                   \
    XX(METHOD,              405, "Method not allowed")                          \
    XX(CONFLICT,            409, "Conflict")                                    \
    XX(STALE,               409, "Stale attempt or lease")                      \
    XX(TOO_LARGE,           413, "Request body too large")                      \
    XX(MEDIA_TYPE,          415, "Unsupported media type")                     \
    XX(UNPROCESSABLE,       422, "Unprocessable request")                       \
    XX(UNAVAILABLE,         503, "Service unavailable")                         \
    XX(IO,                  500, "I/O error")                                   \
    XX(NOMEM,               500, "Out of memory")                               \
    XX(CONFIG,              500, "Bad configuration")                           \
    XX(DB,                  503, "Database error")                              \
    XX(REDIS,               503, "Queue error")                                 \
    XX(TIMEOUT,             504, "Timed out")                                   \
    XX(INTERNAL,            500, "Internal error")

typedef enum kf_code {
#define XX(name, status, title) KF_##name,
    KF_ERROR_MAP(XX)
#undef XX
    KF__CODE_COUNT
} kf_code;

typedef struct kf_err {
    kf_code code;       /* KF_OK when nothing failed */
    char    msg[512];   /* user-facing: what failed and what to do; cut between UTF-8 characters */
} kf_err;

#define KF_ERR_INIT { KF_OK, { 0 } }

/* Set `err` (if not NULL) and return `code`, so callers can write
 * `return kf_err_set(err, KF_INVALID, "field '%s' ...", name);`. */
kf_code kf_err_set(kf_err *err, kf_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix an existing message with context ("loading config: ..."). */
kf_code kf_err_wrap(kf_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void kf_err_clear(kf_err *err);

const char *kf_code_name(kf_code code);   /* "INVALID" */
const char *kf_code_title(kf_code code);  /* "Invalid request" */
int kf_code_http_status(kf_code code);    /* 400 */

#endif
