/*
 * ka_expr — evaluate the constraint expressions of a kernel template.
 *
 * A template declares its constraints and supported shapes as strings in a
 * small subset of Python expressions over its tunables, its shape dims and a
 * few target figures ("TILE_F <= D", "BUFS * D * DTYPE_BYTES <= SBUF_BYTES"):
 *   numbers, "strings", names, ( ), unary -, * / // %, + -, comparisons
 *   (< <= > >= == !=, chains allowed), not, and, or, min(a, b, ...),
 *   max(a, b, ...), sqrt(a).
 * Numbers are doubles (integers are exact up to 2^53); // and % follow
 * Python (floor).  Strings compare with == and != only.
 *
 * Nesting is bounded: parentheses and calls, each unary minus and each
 * `not` count one level on one counter, and an expression nesting more than
 * 64 levels deep is refused (so no input can run the stack out).
 *
 * Failure: KF_INVALID with a message quoting the expression (its first 80
 * bytes when longer) and where it went wrong (syntax, unknown name, type
 * error, division by zero, nesting too deep).  No heap is kept: the
 * evaluator is re-entrant and allocation-free.
 */
#ifndef KA_EXPR_H
#define KA_EXPR_H

#include <stdbool.h>

#include "kf_error.h"

typedef struct ka_value {
    bool        is_str;
    double      num;
    const char *str;        /* borrowed (from the env or the expression) */
    int         str_len;
} ka_value;

/* Look a name up: true and *out filled when known. */
typedef bool (*ka_expr_lookup)(void *ctx, const char *name, int len, ka_value *out);

/* Evaluate `expr`; *out is its value. */
kf_code ka_expr_eval(const char *expr, ka_expr_lookup lookup, void *ctx, ka_value *out, kf_err *err);

/* Evaluate as a condition: a number is true when non-zero. */
kf_code ka_expr_test(const char *expr, ka_expr_lookup lookup, void *ctx, bool *ok, kf_err *err);

#endif
