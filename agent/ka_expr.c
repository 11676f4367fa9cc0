/* ka_expr — constraint expressions of kernel templates (see ka_expr.h). */
#include "ka_expr.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nesting the evaluator allows: every recursive path (parentheses and
 * function calls, each unary minus, each `not`) counts one level on one
 * counter, so a hostile expression cannot run the stack out however it
 * nests.  Binary operators loop and add no depth of their own; their
 * operands count through the same three paths. */
enum { KA_EXPR_MAX_DEPTH = 64 };

/* Bytes of the expression quoted in an error message. */
enum { KA_EXPR_QUOTE = 80 };

typedef struct kx {
    const char    *src, *p;
    ka_expr_lookup lookup;
    void          *ctx;
    kf_err        *err;
    int            depth;
    bool           failed;
} kx;

/* The message quotes at most KA_EXPR_QUOTE bytes of the expression, cut on
 * a UTF-8 character boundary, so the reason always fits in the message. */
static void kx_fail(kx *x, const char *what)
{
    if (!x->failed) {
        size_t len = strlen(x->src), cut = len;
        if (cut > KA_EXPR_QUOTE) {
            cut = KA_EXPR_QUOTE;
            while (cut > 0 && ((unsigned char)x->src[cut] & 0xC0) == 0x80)
                cut--;
        }
        kf_err_set(x->err, KF_INVALID, "constraint \"%.*s%s\": %s at offset %d", (int)cut, x->src,
                   cut < len ? "..." : "", what, (int)(x->p - x->src));
    }
    x->failed = true;
}

/* One more level of nesting: false (and the evaluation failed) past
 * KA_EXPR_MAX_DEPTH.  Every successful kx_enter is paired with kx_leave. */
static bool kx_enter(kx *x)
{
    if (x->depth >= KA_EXPR_MAX_DEPTH) {
        char what[160];
        snprintf(what, sizeof(what), "nesting more than %d levels deep (parentheses, calls, unary minus and not "
                 "each count one; write the constraint flatter)", KA_EXPR_MAX_DEPTH);
        kx_fail(x, what);
        return false;
    }
    x->depth++;
    return true;
}

static void kx_leave(kx *x)
{
    x->depth--;
}

static void kx_ws(kx *x)
{
    while (*x->p == ' ' || *x->p == '\t' || *x->p == '\n')
        x->p++;
}

/* True (and consumed) when the next token is `tok`; a word token must not
 * run on into an identifier. */
static bool kx_eat(kx *x, const char *tok)
{
    size_t n = strlen(tok);
    kx_ws(x);
    if (strncmp(x->p, tok, n) != 0)
        return false;
    if (isalpha((unsigned char)tok[0]) && (isalnum((unsigned char)x->p[n]) || x->p[n] == '_'))
        return false;
    x->p += n;
    return true;
}

static ka_value kx_num(double v)
{
    ka_value r = { false, v, NULL, 0 };
    return r;
}

static ka_value kx_or(kx *x);

static bool kx_need_num(kx *x, const ka_value *v)
{
    if (v->is_str) {
        kx_fail(x, "a string where a number is needed");
        return false;
    }
    return true;
}

static ka_value kx_call(kx *x, const char *name, int len)
{
    bool is_min = len == 3 && strncmp(name, "min", 3) == 0;
    bool is_max = len == 3 && strncmp(name, "max", 3) == 0;
    bool is_sqrt = len == 4 && strncmp(name, "sqrt", 4) == 0;
    ka_value acc = kx_num(0);
    int n = 0;

    if (is_sqrt) {
        acc = kx_or(x);
        if (x->failed || !kx_need_num(x, &acc))
            return acc;
        if (acc.num < 0)
            kx_fail(x, "sqrt of a negative number");
        else
            acc.num = sqrt(acc.num);
        if (!kx_eat(x, ")"))
            kx_fail(x, "expected ')'");
        return acc;
    }
    if (!is_min && !is_max) {
        kx_fail(x, "unknown function (min, max and sqrt are allowed)");
        return acc;
    }
    if (!kx_eat(x, ")")) {
        do {
            ka_value v = kx_or(x);
            if (x->failed || !kx_need_num(x, &v))
                return acc;
            if (n++ == 0 || (is_min && v.num < acc.num) || (is_max && v.num > acc.num))
                acc = v;
        } while (kx_eat(x, ","));
        if (!kx_eat(x, ")"))
            kx_fail(x, "expected ')'");
    }
    if (n == 0)
        kx_fail(x, "min/max need at least one argument");
    return acc;
}

static ka_value kx_atom(kx *x)
{
    ka_value v = kx_num(0);
    kx_ws(x);
    if (!kx_enter(x))
        return v;
    if (kx_eat(x, "(")) {
        v = kx_or(x);
        if (!kx_eat(x, ")"))
            kx_fail(x, "expected ')'");
    } else if (*x->p == '"' || *x->p == '\'') {
        char q = *x->p++;
        const char *s = x->p;
        while (*x->p && *x->p != q)
            x->p++;
        if (!*x->p) {
            kx_fail(x, "unterminated string");
        } else {
            v.is_str = true;
            v.str = s;
            v.str_len = (int)(x->p - s);
            x->p++;
        }
    } else if (isdigit((unsigned char)*x->p) || *x->p == '.') {
        char *end;
        v.num = strtod(x->p, &end);
        if (end == x->p)
            kx_fail(x, "bad number");
        x->p = end;
    } else if (isalpha((unsigned char)*x->p) || *x->p == '_') {
        const char *s = x->p;
        while (isalnum((unsigned char)*x->p) || *x->p == '_')
            x->p++;
        int len = (int)(x->p - s);
        if (kx_eat(x, "(")) {
            v = kx_call(x, s, len);
        } else if (len == 4 && strncmp(s, "True", 4) == 0) {
            v.num = 1;
        } else if (len == 5 && strncmp(s, "False", 5) == 0) {
            v.num = 0;
        } else if (!x->lookup || !x->lookup(x->ctx, s, len, &v)) {
            x->p = s;
            kx_fail(x, "unknown name");
        }
    } else {
        kx_fail(x, *x->p ? "unexpected character" : "unexpected end");
    }
    kx_leave(x);
    return v;
}

static ka_value kx_unary(kx *x)
{
    if (kx_eat(x, "-")) {
        ka_value v = kx_num(0);
        if (!kx_enter(x))
            return v;
        v = kx_unary(x);
        kx_leave(x);
        if (!x->failed && kx_need_num(x, &v))
            v.num = -v.num;
        return v;
    }
    return kx_atom(x);
}

static ka_value kx_term(kx *x)
{
    ka_value a = kx_unary(x);
    for (;;) {
        int op;
        if (x->failed)
            return a;
        if (kx_eat(x, "//"))
            op = 'f';
        else if (kx_eat(x, "*"))
            op = '*';
        else if (kx_eat(x, "/"))
            op = '/';
        else if (kx_eat(x, "%"))
            op = '%';
        else
            return a;
        ka_value b = kx_unary(x);
        if (x->failed || !kx_need_num(x, &a) || !kx_need_num(x, &b))
            return a;
        if (op != '*' && b.num == 0) {
            kx_fail(x, "division by zero");
            return a;
        }
        switch (op) {
        case '*': a.num *= b.num; break;
        case '/': a.num /= b.num; break;
        case 'f': a.num = floor(a.num / b.num); break;
        default: a.num = a.num - b.num * floor(a.num / b.num); break;
        }
    }
}

static ka_value kx_sum(kx *x)
{
    ka_value a = kx_term(x);
    for (;;) {
        int op;
        if (x->failed)
            return a;
        if (kx_eat(x, "+"))
            op = '+';
        else if (kx_eat(x, "-"))
            op = '-';
        else
            return a;
        ka_value b = kx_term(x);
        if (x->failed || !kx_need_num(x, &a) || !kx_need_num(x, &b))
            return a;
        a.num = op == '+' ? a.num + b.num : a.num - b.num;
    }
}

static int kx_cmp_op(kx *x)
{
    if (kx_eat(x, "<="))
        return 'l';
    if (kx_eat(x, ">="))
        return 'g';
    if (kx_eat(x, "=="))
        return '=';
    if (kx_eat(x, "!="))
        return '!';
    if (kx_eat(x, "<"))
        return '<';
    if (kx_eat(x, ">"))
        return '>';
    return 0;
}

static ka_value kx_cmp(kx *x)
{
    ka_value a = kx_sum(x);
    bool all = true, any = false;
    int op;
    while (!x->failed && (op = kx_cmp_op(x)) != 0) {
        ka_value b = kx_sum(x);
        bool r;
        if (x->failed)
            return a;
        any = true;
        if (a.is_str || b.is_str) {
            if (op != '=' && op != '!') {
                kx_fail(x, "strings compare only with == and !=");
                return a;
            }
            bool eq = a.is_str && b.is_str && a.str_len == b.str_len && memcmp(a.str, b.str, (size_t)a.str_len) == 0;
            r = op == '=' ? eq : !eq;
        } else {
            switch (op) {
            case 'l': r = a.num <= b.num; break;
            case 'g': r = a.num >= b.num; break;
            case '=': r = a.num == b.num; break;
            case '!': r = a.num != b.num; break;
            case '<': r = a.num < b.num; break;
            default: r = a.num > b.num; break;
            }
        }
        all = all && r;
        a = b;
    }
    return any ? kx_num(all ? 1 : 0) : a;
}

static bool kx_truth(const ka_value *v)
{
    return v->is_str ? v->str_len > 0 : v->num != 0;
}

static ka_value kx_not(kx *x)
{
    if (kx_eat(x, "not")) {
        ka_value v;
        if (!kx_enter(x))
            return kx_num(0);
        v = kx_not(x);
        kx_leave(x);
        return kx_num(kx_truth(&v) ? 0 : 1);
    }
    return kx_cmp(x);
}

static ka_value kx_and(kx *x)
{
    ka_value a = kx_not(x);
    while (!x->failed && kx_eat(x, "and")) {
        ka_value b = kx_not(x);
        a = kx_num(kx_truth(&a) && kx_truth(&b) ? 1 : 0);
    }
    return a;
}

static ka_value kx_or(kx *x)
{
    ka_value a = kx_and(x);
    while (!x->failed && kx_eat(x, "or")) {
        ka_value b = kx_and(x);
        a = kx_num(kx_truth(&a) || kx_truth(&b) ? 1 : 0);
    }
    return a;
}

kf_code ka_expr_eval(const char *expr, ka_expr_lookup lookup, void *ctx, ka_value *out, kf_err *err)
{
    kx x = { expr, expr, lookup, ctx, err, 0, false };
    ka_value v;

    *out = kx_num(0);
    if (!expr)
        return kf_err_set(err, KF_INVALID, "empty constraint");
    v = kx_or(&x);
    kx_ws(&x);
    if (!x.failed && *x.p)
        kx_fail(&x, "unexpected text after the expression");
    if (x.failed)
        return KF_INVALID;
    *out = v;
    return KF_OK;
}

kf_code ka_expr_test(const char *expr, ka_expr_lookup lookup, void *ctx, bool *ok, kf_err *err)
{
    ka_value v;
    kf_code rc = ka_expr_eval(expr, lookup, ctx, &v, err);
    if (rc == KF_OK)
        *ok = kx_truth(&v);
    return rc;
}
