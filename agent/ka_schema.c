/* ka_schema — the JSON Schema subset of kforge's tool schemas (see ka_schema.h). */
#include "ka_schema.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kf_buf.h"

/* The precision ("%.*s") that quotes at most max bytes of s and cuts it
 * between characters: a message quoting the caller's text stays UTF-8. */
static int schema_prec(const char *s, size_t max)
{
    return (int)kf_utf8_cut(s, strnlen(s, max));
}

/* Cut a formatted text that may have been truncated back to a character's end. */
static void schema_cut_end(char *s)
{
    s[kf_utf8_cut(s, strlen(s))] = '\0';
}

static bool ka_schema_is_type(const cJSON *v, const char *t)
{
    if (strcmp(t, "object") == 0)
        return cJSON_IsObject(v);
    if (strcmp(t, "array") == 0)
        return cJSON_IsArray(v);
    if (strcmp(t, "string") == 0)
        return cJSON_IsString(v);
    if (strcmp(t, "boolean") == 0)
        return cJSON_IsBool(v);
    if (strcmp(t, "number") == 0)
        return cJSON_IsNumber(v) && isfinite(v->valuedouble);
    if (strcmp(t, "integer") == 0)
        return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble;
    return false;
}

bool ka_schema_check(const cJSON *sch, const cJSON *v, const char *where, char *msg, size_t n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sch, "type"), *k, *e;
    const char *w = *where ? where : "arguments";

    if (cJSON_IsString(t) && !ka_schema_is_type(v, t->valuestring)) {
        snprintf(msg, n, "%s: must be %s %s", w, strchr("aeiou", t->valuestring[0]) ? "an" : "a", t->valuestring);
        return false;
    }
    e = cJSON_GetObjectItemCaseSensitive(sch, "enum");
    if (cJSON_IsArray(e)) {
        bool hit = false;
        kf_buf opts = KF_BUF_INIT;
        cJSON_ArrayForEach(k, e)
        {
            hit = hit || cJSON_Compare(k, v, true);
            kf_buf_addf(&opts, "%s%s", opts.len ? ", " : "", cJSON_IsString(k) ? k->valuestring : "?");
        }
        if (!hit)
            snprintf(msg, n, "%s: must be one of %s", w, opts.data);
        kf_buf_release(&opts);
        if (!hit)
            return false;
    }
    if (cJSON_IsNumber(v)) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(sch, "minimum");
        const cJSON *hi = cJSON_GetObjectItemCaseSensitive(sch, "maximum");
        if ((lo && v->valuedouble < lo->valuedouble) || (hi && v->valuedouble > hi->valuedouble)) {
            snprintf(msg, n, "%s: must be between %.17g and %.17g", w, lo ? lo->valuedouble : -INFINITY,
                     hi ? hi->valuedouble : INFINITY);
            return false;
        }
    }
    if (cJSON_IsString(v)) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(sch, "minLength");
        const cJSON *hi = cJSON_GetObjectItemCaseSensitive(sch, "maxLength");
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sch, "pattern");
        size_t len = strlen(v->valuestring);
        if ((lo && (double)len < lo->valuedouble) || (hi && (double)len > hi->valuedouble)) {
            snprintf(msg, n, "%s: must have %g to %g characters", w, lo ? lo->valuedouble : 0,
                     hi ? hi->valuedouble : 1e9);
            return false;
        }
        /* the only pattern used: a UUID's characters */
        if (pat && strspn(v->valuestring, "0123456789abcdefABCDEF-") != len) {
            snprintf(msg, n, "%s: '%.*s' is not a job id (a UUID like 0b6c1f3e-...)", w, schema_prec(v->valuestring, 64),
                     v->valuestring);
            return false;
        }
    }
    if (cJSON_IsArray(v)) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(sch, "minItems");
        const cJSON *hi = cJSON_GetObjectItemCaseSensitive(sch, "maxItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(sch, "items");
        int len = cJSON_GetArraySize(v), i = 0;
        if ((lo && len < lo->valuedouble) || (hi && len > hi->valuedouble)) {
            snprintf(msg, n, "%s: must have %g to %g items", w, lo ? lo->valuedouble : 0, hi ? hi->valuedouble : 1e9);
            return false;
        }
        if (items) {
            cJSON_ArrayForEach(k, v)
            {
                char sub[256];
                snprintf(sub, sizeof(sub), "%s[%d]", w, i++);
                schema_cut_end(sub);
                if (!ka_schema_check(items, k, sub, msg, n))
                    return false;
            }
        }
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(sch, "required"))
        {
            if (!cJSON_GetObjectItemCaseSensitive(v, k->valuestring)) {
                snprintf(msg, n, "%s: '%s' is required", w, k->valuestring);
                return false;
            }
        }
        cJSON_ArrayForEach(k, v)
        {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, k->string) : NULL;
            char sub[256];
            if (!ps && cJSON_IsFalse(addl)) {
                snprintf(msg, n, "%s: unknown property '%.*s'", w, schema_prec(k->string, 64), k->string);
                return false;
            }
            snprintf(sub, sizeof(sub), "%s%s%s", *where ? where : "", *where ? "." : "", k->string);
            schema_cut_end(sub);
            if (ps && !ka_schema_check(ps, k, sub, msg, n))
                return false;
        }
    }
    return true;
}
