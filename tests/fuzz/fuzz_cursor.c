/*
 * fuzz_cursor — the list query's helpers in kforge-api: the opaque
 * `cursor=` (api_cursor_parse), the numeric parameters such as `limit=`
 * (api_parse_uint) and the request's Content-Type (api_content_type_json).
 * The first byte picks the helper; the rest is the query value or header.
 *
 * Promises checked:
 *  - a cursor is accepted only if api_cursor_make produced it: the time and
 *    id it yields encode back to the very same text, the time is digits
 *    within PostgreSQL's range and the id a UUID;
 *  - a number is accepted only as plain digits whose value is at most max
 *    and prints back to the same digits (leading zeros aside);
 *  - a Content-Type is accepted only if it names application/json (after
 *    optional whitespace).
 */
#include "fuzz.h"

#include <ctype.h>
#include <strings.h>

#include "api.h"
#include "kf_job.h"

static void cursor(const char *s)
{
    char micros[24], id[37], again[160];
    unsigned long long us;

    if (!api_cursor_parse(s, micros, sizeof(micros), id))
        return;
    FUZZ_CHECK(api_parse_uint(micros, ~0ULL, &us) && us <= 253402300799999999ULL, "cursor time %s", micros);
    FUZZ_CHECK(kf_uuid_valid(id), "cursor id %s", id);
    api_cursor_make(micros, id, again, sizeof(again));
    FUZZ_CHECK(strcmp(again, s) == 0, "accepted a cursor make() did not produce: %s (make gives %s)", s, again);
}

static void number(const char *s, unsigned long long max)
{
    unsigned long long v;
    char digits[32];
    const char *p = s;

    if (!api_parse_uint(s, max, &v))
        return;
    FUZZ_CHECK(v <= max, "%llu above max %llu", v, max);
    for (const char *q = s; *q; q++)
        FUZZ_CHECK(isdigit((unsigned char)*q), "accepted non-digit in %s", s);
    while (p[0] == '0' && p[1])
        p++;
    snprintf(digits, sizeof(digits), "%llu", v);
    FUZZ_CHECK(strcmp(digits, p) == 0, "%s read as %llu", s, v);
}

static void content_type(const char *s)
{
    if (!api_content_type_json(s))
        return;
    s += strspn(s, " \t");   /* optional whitespace before a header value */
    FUZZ_CHECK(strncasecmp(s, "application/json", 16) == 0, "accepted Content-Type %s", s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned long long maxes[] = { 0, 1, 200, 1000, 4294967295ULL, 9223372036854775807ULL, ~0ULL };
    char *s;

    if (size < 1)
        return 0;
    s = fuzz_cstr(data + 1, size - 1);
    switch (data[0] % 3) {
    case 0:
        cursor(s);
        break;
    case 1:
        number(s, maxes[(data[0] / 3) % (sizeof(maxes) / sizeof(maxes[0]))]);
        break;
    default:
        content_type(s);
        break;
    }
    free(s);
    return 0;
}
