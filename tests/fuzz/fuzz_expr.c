/*
 * fuzz_expr — a constraint expression (ka_expr_eval), as a user's KFORGE
 * block or a library template writes it ("TILE_F <= D", "not (B > 2)"),
 * over a fixed set of names like those a tuning space provides.
 *
 * Promises checked: no crash and no stack exhaustion at any nesting (the
 * evaluator bounds its depth on every path); a refusal says why (in UTF-8
 * when the expression was UTF-8); evaluating twice gives the same value
 * (or the same refusal).
 */
#include "fuzz.h"

#include <math.h>

#include "ka_expr.h"
#include "kf_json.h"

typedef struct fuzz_name {
    const char *name;
    double      num;
    const char *str;
} fuzz_name;

static const fuzz_name names[] = {
    { "D", 512, NULL },          { "N", 128, NULL },        { "TILE_F", 128, NULL },   { "BUFS", 2, NULL },
    { "DTYPE_BYTES", 2, NULL },  { "SBUF_BYTES", 196608, NULL }, { "PMAX", 128, NULL }, { "ZERO", 0, NULL },
    { "NEG", -3.5, NULL },       { "BIG", 1.7976931348623157e308, NULL },              { "DTYPE", 0, "bf16" },
    { "MODE", 0, "" },
};

static bool lookup(void *ctx, const char *name, int len, ka_value *out)
{
    (void)ctx;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((int)strlen(names[i].name) == len && memcmp(names[i].name, name, (size_t)len) == 0) {
            out->is_str = names[i].str != NULL;
            out->num = names[i].num;
            out->str = names[i].str;
            out->str_len = names[i].str ? (int)strlen(names[i].str) : 0;
            return true;
        }
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *expr = fuzz_cstr(data, size);
    kf_err e = KF_ERR_INIT, e2 = KF_ERR_INIT;
    ka_value v, w;
    kf_code rc, rc2;
    bool ok;

    rc = ka_expr_eval(expr, lookup, NULL, &v, &e);
    rc2 = ka_expr_eval(expr, lookup, NULL, &w, &e2);
    FUZZ_CHECK(rc == rc2, "two evaluations disagree: %d then %d", (int)rc, (int)rc2);
    if (rc != KF_OK) {
        FUZZ_CHECK(e.msg[0] != '\0', "refused without saying why");
        FUZZ_CHECK(!kf_utf8_valid(expr, strlen(expr), NULL) || kf_utf8_valid(e.msg, strlen(e.msg), NULL),
                   "error about a UTF-8 expression not UTF-8: %s", e.msg);
        FUZZ_CHECK(strcmp(e.msg, e2.msg) == 0, "two messages: %s / %s", e.msg, e2.msg);
    } else {
        FUZZ_CHECK(v.is_str == w.is_str, "a value changed type");
        if (!v.is_str)
            FUZZ_CHECK(v.num == w.num || (isnan(v.num) && isnan(w.num)), "%g then %g", v.num, w.num);
        else
            FUZZ_CHECK(v.str_len >= 0 && v.str_len <= (int)size, "a string of %d bytes", v.str_len);
    }
    (void)ka_expr_test(expr, lookup, NULL, &ok, &e);
    free(expr);
    return 0;
}
