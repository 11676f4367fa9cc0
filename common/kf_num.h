/*
 * kf_num — strict number parsing for flags, files and environment values.
 *
 * Job: turn a whole string into a number or refuse it.  Unlike atoi/atof,
 * which read "12x" as 12 and "x" as 0, these accept only the complete
 * decimal text of a number inside the caller's range: no leading blanks or
 * signs on unsigned values, no trailing bytes, no overflow, no NaN or
 * infinity.  Every caller of atoi/atol/atof/strtok outside the tests uses
 * these instead (issue 14).
 *
 * Failure: KF_INVALID with a message that quotes the text and states what
 * would be accepted ("'12x' is not a whole number; write one between 1 and
 * 200"); callers prefix it with the flag or field it came from.  *out is
 * written only on success.
 *
 * Ownership: pure functions; nothing is allocated.
 */
#ifndef KF_NUM_H
#define KF_NUM_H

#include <stdint.h>

#include "kf_error.h"

/* A whole number in [lo, hi] ("-3", "200"). */
kf_code kf_num_long(const char *s, long lo, long hi, long *out, kf_err *err);
/* A whole non-negative number in [0, hi] (digits only). */
kf_code kf_num_u64(const char *s, uint64_t hi, uint64_t *out, kf_err *err);
/* A finite decimal number in [lo, hi] ("0.5", "1e-3"). */
kf_code kf_num_double(const char *s, double lo, double hi, double *out, kf_err *err);

#endif
