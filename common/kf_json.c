#include "kf_json.h"
#include "kf_alloc.h"
#include "kf_buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kf_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < n) {
        unsigned c = p[i];
        size_t need;
        unsigned cp, min;

        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            need = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            need = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            goto bad;
        }
        if (n - i <= need)
            goto bad;
        for (size_t k = 1; k <= need; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                goto bad;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            goto bad;
        i += need + 1;
    }
    return true;
bad:
    if (bad_at)
        *bad_at = i;
    return false;
}

static bool kf_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The length of the JSON number (RFC 8259) at buf[i..len), or 0 when the
 * text there is not one: cJSON hands anything of [0-9+-.eE] to strtod,
 * which takes "01", "1." and "-01" too. */
static size_t kf_json_number_len(const char *buf, size_t len, size_t i)
{
    size_t j = i;

    if (j < len && buf[j] == '-')
        j++;
    if (j >= len || !kf_is_digit(buf[j]))
        return 0;
    if (buf[j] == '0' && j + 1 < len && kf_is_digit(buf[j + 1]))
        return 0;                                   /* a leading zero */
    while (j < len && kf_is_digit(buf[j]))
        j++;
    if (j < len && buf[j] == '.') {
        if (++j >= len || !kf_is_digit(buf[j]))
            return 0;
        while (j < len && kf_is_digit(buf[j]))
            j++;
    }
    if (j < len && (buf[j] == 'e' || buf[j] == 'E')) {
        j++;
        if (j < len && (buf[j] == '+' || buf[j] == '-'))
            j++;
        if (j >= len || !kf_is_digit(buf[j]))
            return 0;
        while (j < len && kf_is_digit(buf[j]))
            j++;
    }
    return j - i;
}

/* What cJSON lets through and kforge refuses, checked in one pass over the
 * text before cJSON sees it: nesting deeper than max_depth (so a hostile
 * document never reaches cJSON's recursive parser), numbers that are not
 * RFC 8259 numbers (leading zeros, "1.", "-"), raw control characters in
 * strings and outside them (cJSON skips any byte below 0x20 as white
 * space, NUL included), and \u0000 (cJSON would cut the string there).  KF_OK, or
 * KF_INVALID in err with the offset. */
static kf_code kf_json_lex_check(const char *buf, size_t len, int max_depth, kf_err *err)
{
    int depth = 0;
    bool in_str = false;

    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (in_str) {
            if ((unsigned char)c < 0x20)
                return kf_err_set(err, KF_INVALID,
                                  "a string holds a raw control character (byte 0x%02x at offset %zu); escape it "
                                  "(\\n, \\t, \\u001f...)",
                                  (unsigned char)c, i);
            if (c == '\\') {
                if (i + 5 < len && buf[i + 1] == 'u' && memcmp(buf + i + 2, "0000", 4) == 0)
                    return kf_err_set(err, KF_INVALID,
                                      "a string holds \\u0000 (at offset %zu); kforge takes no NUL characters", i);
                i++;
            } else if (c == '"') {
                in_str = false;
            }
            continue;
        }
        if ((unsigned char)c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            /* cJSON would skip it as white space; JSON's is only these four */
            return kf_err_set(err, KF_INVALID, "a control character (byte 0x%02x at offset %zu) outside a string",
                              (unsigned char)c, i);
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth)
                return kf_err_set(err, KF_INVALID, "JSON nests deeper than %d levels (at offset %zu)", max_depth, i);
        } else if (c == ']' || c == '}') {
            depth--;
        } else if (c == '-' || kf_is_digit(c)) {
            size_t n = kf_json_number_len(buf, len, i);
            if (n == 0)
                return kf_err_set(err, KF_INVALID,
                                  "malformed number at offset %zu (JSON numbers have no leading zeros, and digits "
                                  "after a '.', 'e' or '-')",
                                  i);
            i += n - 1;
        }
    }
    return KF_OK;
}

static int kf_json_cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Returns the first duplicated member name in any object of the tree. */
static const char *kf_json_find_duplicate(const cJSON *v)
{
    const cJSON *c;
    const char *dup = NULL;

    if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v), i = 0;
        if (n > 1) {
            const char **names = kf_malloc(sizeof(*names) * (size_t)n);
            cJSON_ArrayForEach(c, v) names[i++] = c->string;
            qsort(names, (size_t)n, sizeof(*names), kf_json_cmp_names);
            for (i = 1; i < n && !dup; i++)
                if (strcmp(names[i - 1], names[i]) == 0)
                    dup = names[i];
            free(names);
            if (dup)
                return dup;
        }
    }
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        cJSON_ArrayForEach(c, v)
        {
            dup = kf_json_find_duplicate(c);
            if (dup)
                return dup;
        }
    }
    return NULL;
}

kf_code kf_json_parse(const char *buf, size_t len, int max_depth, cJSON **out, kf_err *err)
{
    size_t at = 0;
    const char *end = NULL;
    const char *dup;
    cJSON *v;

    *out = NULL;
    if (!kf_utf8_valid(buf, len, &at))
        return kf_err_set(err, KF_INVALID, "body is not valid UTF-8 (first bad byte at offset %zu)", at);
    if (kf_json_lex_check(buf, len, max_depth, err) != KF_OK)
        return KF_INVALID;
    v = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!v) {
        size_t off = (end && end >= buf) ? (size_t)(end - buf) : 0;
        return kf_err_set(err, KF_INVALID, "body is not valid JSON (error near offset %zu)", off);
    }
    while (end && end < buf + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    if (end && end < buf + len) {
        cJSON_Delete(v);
        return kf_err_set(err, KF_INVALID, "body has bytes after the JSON value (at offset %zu)",
                          (size_t)(end - buf));
    }
    dup = kf_json_find_duplicate(v);
    if (dup) {
        kf_err_set(err, KF_INVALID, "member \"%.*s\" appears twice in one object",
                   (int)kf_utf8_cut(dup, strnlen(dup, 64)), dup);
        cJSON_Delete(v);
        return KF_INVALID;
    }
    *out = v;
    return KF_OK;
}

int kf_json_depth(const cJSON *v)
{
    int best = 0;
    const cJSON *c;

    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return 0;
    cJSON_ArrayForEach(c, v)
    {
        int d = kf_json_depth(c);
        if (d > best)
            best = d;
    }
    return best + 1;
}

void kf_json_add_str(kf_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const char *run = s;

    kf_buf_addc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        kf_buf_add(b, run, (size_t)(s - run));
        run = s + 1;
        switch (c) {
        case '"': kf_buf_adds(b, "\\\""); break;
        case '\\': kf_buf_adds(b, "\\\\"); break;
        case '\n': kf_buf_adds(b, "\\n"); break;
        case '\r': kf_buf_adds(b, "\\r"); break;
        case '\t': kf_buf_adds(b, "\\t"); break;
        default: {
            char u[7] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0 };
            kf_buf_adds(b, u);
        }
        }
    }
    kf_buf_add(b, run, (size_t)(s - run));
    kf_buf_addc(b, '"');
}

/* A number in cJSON's notation, but exact: non-finite -> null; integers
 * below 2^53 (the common case: sizes, counts, milliseconds) digit by
 * digit rather than through printf; else %.15g, or %.17g when %.15g does
 * not read back as the same double. */
static void kf_json_add_num(kf_buf *b, double d)
{
    char tmp[32];
    int n;

    if (!isfinite(d)) {
        kf_buf_adds(b, "null");
        return;
    }
    if (d == trunc(d) && fabs(d) < 9007199254740992.0) { /* |d| < 2^53: exact as int64 */
        int64_t v = (int64_t)d;
        uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        char *p = tmp + sizeof(tmp);
        do {
            *--p = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0)
            *--p = '-';
        kf_buf_add(b, p, (size_t)(tmp + sizeof(tmp) - p));
        return;
    }
    n = snprintf(tmp, sizeof(tmp), "%1.15g", d);
    if (strtod(tmp, NULL) != d)
        n = snprintf(tmp, sizeof(tmp), "%1.17g", d);
    kf_buf_add(b, tmp, (size_t)n);
}

void kf_json_write(kf_buf *b, const cJSON *v)
{
    const cJSON *c;

    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        bool obj = cJSON_IsObject(v);
        kf_buf_addc(b, obj ? '{' : '[');
        cJSON_ArrayForEach(c, v)
        {
            if (c != v->child)
                kf_buf_addc(b, ',');
            if (obj) {
                kf_json_add_str(b, c->string ? c->string : "");
                kf_buf_addc(b, ':');
            }
            kf_json_write(b, c);
        }
        kf_buf_addc(b, obj ? '}' : ']');
    } else if (cJSON_IsString(v)) {
        kf_json_add_str(b, v->valuestring ? v->valuestring : "");
    } else if (cJSON_IsNumber(v)) {
        kf_json_add_num(b, v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        kf_buf_adds(b, "true");
    } else if (cJSON_IsFalse(v)) {
        kf_buf_adds(b, "false");
    } else if (cJSON_IsRaw(v) && v->valuestring) {
        kf_buf_adds(b, v->valuestring);
    } else {
        kf_buf_adds(b, "null");   /* null, and what cJSON itself would not print */
    }
}

char *kf_json_print(const cJSON *v)
{
    kf_buf b = KF_BUF_INIT;

    kf_buf_grow(&b, 64);
    kf_json_write(&b, v);
    return kf_buf_detach(&b);
}

/* ---- field validation ---------------------------------------------------- */

void kf_fields_init(kf_fields *f)
{
    memset(f, 0, sizeof(*f));
}

void kf_fields_add(kf_fields *f, const char *field, const char *rule, const char *fmt, ...)
{
    kf_field_error *e;
    va_list ap;

    if (f->n >= KF_FIELD_ERRORS_MAX) {
        f->dropped++;
        return;
    }
    e = &f->e[f->n++];
    kf_utf8_copy(e->field, sizeof(e->field), field);
    kf_utf8_copy(e->rule, sizeof(e->rule), rule);
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof(e->detail), fmt, ap);
    va_end(ap);
    e->detail[kf_utf8_cut(e->detail, strlen(e->detail))] = '\0';
}

void kf_fields_summary(const kf_fields *f, char *out, size_t cap)
{
    size_t used = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    for (int i = 0; i < f->n && used + 1 < cap; i++) {
        int w = snprintf(out + used, cap - used, "%s%s: %s", i ? "; " : "", f->e[i].field, f->e[i].detail);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (f->dropped && used + 1 < cap)
        snprintf(out + used, cap - used, "; and %d more", f->dropped);
    out[kf_utf8_cut(out, strlen(out))] = '\0';   /* the last one may have been cut */
}

void kf_field_pathf(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;

    if (cap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    out[kf_utf8_cut(out, strlen(out))] = '\0';
}

/* Appends s at out[used], truncating to cap - 1 bytes in all (between
 * characters); the new length. */
static size_t kf_path_append(char *out, size_t cap, size_t used, const char *s)
{
    size_t n = strlen(s);

    if (n > cap - 1 - used)
        n = kf_utf8_cut(s, cap - 1 - used);
    memcpy(out + used, s, n);
    out[used + n] = '\0';
    return used + n;
}

/* Called for every field looked up, error or not, so it copies rather
 * than formats. */
void kf_field_path(char *out, size_t cap, const char *parent, const char *name)
{
    size_t used = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    if (parent && *parent) {
        used = kf_path_append(out, cap, used, parent);
        used = kf_path_append(out, cap, used, ".");
    }
    kf_path_append(out, cap, used, name);
}

int kf_fields_refuse_unknown(kf_fields *f, const cJSON *obj, const char *parent, const char *const *allowed)
{
    const cJSON *c;
    int found = 0;

    cJSON_ArrayForEach(c, obj)
    {
        bool ok = false;
        for (size_t i = 0; allowed && allowed[i]; i++) {
            if (strcmp(allowed[i], c->string) == 0) {
                ok = true;
                break;
            }
        }
        if (!ok) {
            char path[96];
            kf_field_path(path, sizeof(path), parent, c->string);
            kf_fields_add(f, path, "unknown", "unknown field; remove it (see /v1/openapi.json for the fields)");
            found++;
        }
    }
    return found;
}

/* Looks up a member; records "required" when absent and required. */
static const cJSON *kf_fields_lookup(kf_fields *f, const cJSON *obj, const char *parent, const char *name,
                                     bool required, char *path, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

    kf_field_path(path, cap, parent, name);
    if ((!v || cJSON_IsNull(v)) && required)
        kf_fields_add(f, path, "required", "this field is required");
    if (cJSON_IsNull(v))
        return NULL;
    return v;
}

bool kf_fields_int(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   int64_t min, int64_t max, int64_t *out)
{
    char path[96];
    const cJSON *v = kf_fields_lookup(f, obj, parent, name, required, path, sizeof(path));
    double d;

    if (!v)
        return false;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != trunc(v->valuedouble)) {
        kf_fields_add(f, path, "type", "must be an integer");
        return false;
    }
    d = v->valuedouble;
    if (d < (double)min || d > (double)max) {
        kf_fields_add(f, path, "range", "must be between %lld and %lld", (long long)min, (long long)max);
        return false;
    }
    *out = (int64_t)d;
    return true;
}

bool kf_fields_num(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   double min, double max, double *out)
{
    char path[96];
    const cJSON *v = kf_fields_lookup(f, obj, parent, name, required, path, sizeof(path));

    if (!v)
        return false;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        kf_fields_add(f, path, "type", "must be a number");
        return false;
    }
    if (v->valuedouble < min || v->valuedouble > max) {
        kf_fields_add(f, path, "range", "must be between %g and %g", min, max);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

bool kf_fields_bool(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                    bool *out)
{
    char path[96];
    const cJSON *v = kf_fields_lookup(f, obj, parent, name, required, path, sizeof(path));

    if (!v)
        return false;
    if (!cJSON_IsBool(v)) {
        kf_fields_add(f, path, "type", "must be true or false");
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

bool kf_fields_str(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   size_t min_len, size_t max_len, const char **out)
{
    char path[96];
    const cJSON *v = kf_fields_lookup(f, obj, parent, name, required, path, sizeof(path));
    size_t n;

    if (!v)
        return false;
    if (!cJSON_IsString(v)) {
        kf_fields_add(f, path, "type", "must be a string");
        return false;
    }
    n = strlen(v->valuestring);
    if (n < min_len || n > max_len) {
        kf_fields_add(f, path, "length", "must be %zu to %zu bytes long (got %zu)", min_len, max_len, n);
        return false;
    }
    *out = v->valuestring;
    return true;
}

bool kf_fields_enum(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                    const char *const *values, const char **out)
{
    char path[96], list[160];
    const cJSON *v = kf_fields_lookup(f, obj, parent, name, required, path, sizeof(path));
    size_t used = 0;

    if (!v)
        return false;
    if (!cJSON_IsString(v)) {
        kf_fields_add(f, path, "type", "must be a string");
        return false;
    }
    for (size_t i = 0; values[i]; i++) {
        if (strcmp(values[i], v->valuestring) == 0) {
            *out = values[i];
            return true;
        }
    }
    list[0] = '\0';   /* the allowed values, for the error only */
    for (size_t i = 0; values[i]; i++) {
        if (used + 1 < sizeof(list)) {
            int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", values[i]);
            if (w > 0)
                used += (size_t)w;
        }
    }
    kf_fields_add(f, path, "enum", "must be one of: %s", list);
    return false;
}

bool kf_fields_obj(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   bool want_array, const cJSON **out)
{
    char path[96];
    const cJSON *v = kf_fields_lookup(f, obj, parent, name, required, path, sizeof(path));

    if (!v)
        return false;
    if (want_array ? !cJSON_IsArray(v) : !cJSON_IsObject(v)) {
        kf_fields_add(f, path, "type", want_array ? "must be an array" : "must be an object");
        return false;
    }
    *out = v;
    return true;
}

bool kf_ident_valid(const char *s, size_t max_len, const char *extra)
{
    size_t n = strlen(s);

    if (n == 0 || n > max_len)
        return false;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
            continue;
        if (extra && strchr(extra, c))
            continue;
        return false;
    }
    return true;
}
