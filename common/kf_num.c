/* kf_num — strict number parsing (see kf_num.h). */
#include "kf_num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Long enough to quote a mistyped number, short enough for a one-line message. */
#define KF_NUM_QUOTE 40

kf_code kf_num_long(const char *s, long lo, long hi, long *out, kf_err *err)
{
    char *end = NULL;
    long v;

    if (!s || !*s)
        return kf_err_set(err, KF_INVALID, "an empty value is not a number; write a whole number between %ld and %ld",
                          lo, hi);
    errno = 0;
    v = strtol(s, &end, 10);
    /* strtol skips leading blanks; a number written for us has none. */
    if (errno == ERANGE || end == s || *end || (*s != '-' && (*s < '0' || *s > '9')))
        return kf_err_set(err, KF_INVALID, "'%.*s' is not a whole number; write one between %ld and %ld",
                          KF_NUM_QUOTE, s, lo, hi);
    if (v < lo || v > hi)
        return kf_err_set(err, KF_INVALID, "%ld is out of range; write a whole number between %ld and %ld", v, lo,
                          hi);
    *out = v;
    return KF_OK;
}

kf_code kf_num_u64(const char *s, uint64_t hi, uint64_t *out, kf_err *err)
{
    uint64_t v = 0;

    if (!s || !*s)
        return kf_err_set(err, KF_INVALID, "an empty value is not a number; write a whole number between 0 and %llu",
                          (unsigned long long)hi);
    for (const char *p = s; *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (d > 9)
            return kf_err_set(err, KF_INVALID, "'%.*s' is not a whole number; write one between 0 and %llu",
                              KF_NUM_QUOTE, s, (unsigned long long)hi);
        if (v > hi / 10 || d > hi - v * 10)
            return kf_err_set(err, KF_INVALID, "'%.*s' is out of range; write a whole number between 0 and %llu",
                              KF_NUM_QUOTE, s, (unsigned long long)hi);
        v = v * 10 + d;
    }
    *out = v;
    return KF_OK;
}

kf_code kf_num_double(const char *s, double lo, double hi, double *out, kf_err *err)
{
    char *end = NULL;
    double v;

    if (!s || !*s)
        return kf_err_set(err, KF_INVALID, "an empty value is not a number; write a number between %g and %g", lo, hi);
    errno = 0;
    v = strtod(s, &end);
    /* strtod also reads blanks, "nan", "inf" and hex floats: none is a number a user means. */
    if (errno == ERANGE || end == s || *end || !isfinite(v) || s[strspn(s, "0123456789+-.eE")] != '\0' ||
        *s == '+' || *s == 'e' || *s == 'E')
        return kf_err_set(err, KF_INVALID, "'%.*s' is not a number; write a decimal number between %g and %g",
                          KF_NUM_QUOTE, s, lo, hi);
    if (v < lo || v > hi)
        return kf_err_set(err, KF_INVALID, "%g is out of range; write a number between %g and %g", v, lo, hi);
    *out = v;
    return KF_OK;
}
