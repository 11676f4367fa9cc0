#include "kf_error.h"
#include "kf_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int status;
    const char *title;
} kf_codes[] = {
#define XX(name, status, title) { #name, status, title },
    KF_ERROR_MAP(XX)
#undef XX
};

kf_code kf_err_set(kf_err *err, kf_code code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->msg[kf_utf8_cut(err->msg, strlen(err->msg))] = '\0';
    }
    return code;
}

kf_code kf_err_wrap(kf_err *err, const char *fmt, ...)
{
    char prefix[256];
    char old[sizeof(err->msg)];
    va_list ap;

    if (!err)
        return KF_INTERNAL;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    prefix[kf_utf8_cut(prefix, strlen(prefix))] = '\0';
    memcpy(old, err->msg, sizeof(old));
    {
        /* Truncation is acceptable: the end of a long message is the least useful part. */
        size_t n = kf_utf8_cut(prefix, strnlen(prefix, sizeof(err->msg) - 3));
        memcpy(err->msg, prefix, n);
        memcpy(err->msg + n, ": ", 2);
        n += 2;
        size_t rest = sizeof(err->msg) - 1 - n;
        size_t m = kf_utf8_cut(old, strnlen(old, rest));
        memcpy(err->msg + n, old, m);
        err->msg[n + m] = '\0';
    }
    return err->code;
}

void kf_err_clear(kf_err *err)
{
    if (err) {
        err->code = KF_OK;
        err->msg[0] = '\0';
    }
}

const char *kf_code_name(kf_code code)
{
    if ((unsigned)code >= KF__CODE_COUNT)
        return "UNKNOWN";
    return kf_codes[code].name;
}

const char *kf_code_title(kf_code code)
{
    if ((unsigned)code >= KF__CODE_COUNT)
        return "Unknown error";
    return kf_codes[code].title;
}

int kf_code_http_status(kf_code code)
{
    if ((unsigned)code >= KF__CODE_COUNT)
        return 500;
    return kf_codes[code].status;
}
