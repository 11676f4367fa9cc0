/* Unit tests of the live-progress routes' query (api/api_stream_query.c):
 * positions from Last-Event-ID and after=, the all-jobs stream's filters,
 * and the field errors of bad input. */
#include <criterion/criterion.h>
#include <string.h>

#include "api/api.h"

static api_stream_query q;
static kf_fields fe;

static void parse(bool global, const char *header, const char *const *kv)
{
    api_stream_query_init(&q, global);
    kf_fields_init(&fe);
    api_stream_query_last_id(&q, header, &fe);
    for (int i = 0; kv && kv[i]; i += 2)
        api_stream_query_arg(&q, kv[i], kv[i + 1], &fe);
}

static bool has_error(const char *field, const char *rule)
{
    for (int i = 0; i < fe.n; i++)
        if (strcmp(fe.e[i].field, field) == 0 && strcmp(fe.e[i].rule, rule) == 0)
            return true;
    return false;
}

Test(api_stream_query, positions_come_from_the_header_first_then_after)
{
    parse(false, NULL, NULL);
    cr_assert_eq(fe.n, 0);
    cr_assert_eq(q.after, -1, "no position");
    parse(false, NULL, (const char *const[]){ "after", "42", NULL });
    cr_assert_eq(q.after, 42);
    parse(false, "7", (const char *const[]){ "after", "42", NULL });
    cr_assert_eq(fe.n, 0);
    cr_assert_eq(q.after, 7, "Last-Event-ID wins over after=");
    parse(false, "", (const char *const[]){ "after", "0", NULL });
    cr_assert_eq(q.after, 0, "an empty Last-Event-ID is no header");
    parse(true, "9223372036854775807", NULL);
    cr_assert_eq(q.after, 9223372036854775807LL);
}

Test(api_stream_query, bad_positions_are_field_errors)
{
    static const char *const bad[] = { "-1", "1.5", " 1", "1 ", "0x10", "9223372036854775808", "", "abc", NULL };
    for (int i = 0; bad[i]; i++) {
        parse(true, NULL, (const char *const[]){ "after", bad[i], NULL });
        cr_assert(has_error("after", "range"), "after=%s", bad[i]);
        cr_assert_eq(q.after, -1, "after=%s left a position", bad[i]);
        if (bad[i][0]) {
            parse(true, bad[i], NULL);
            cr_assert(has_error("Last-Event-ID", "range"), "Last-Event-ID: %s", bad[i]);
        }
    }
    parse(false, NULL, (const char *const[]){ "after", "1", "after", "2", NULL });
    cr_assert(has_error("after", "duplicate"));
    parse(false, NULL, (const char *const[]){ "after", NULL, NULL });
    cr_assert(has_error("after", "range"), "after without a value");
}

Test(api_stream_query, filters_belong_to_the_all_jobs_stream)
{
    cJSON *labels = cJSON_Parse("{\"team\":\"x\",\"run\":\"3\"}");

    parse(true, NULL, (const char *const[]){ "kind", "diag", "label.team", "x", "label.a-b.c_D9", "", NULL });
    cr_assert_eq(fe.n, 0, "%s", fe.n ? fe.e[0].detail : "");
    cr_assert_str_eq(q.kind, "diag");
    cr_assert_eq(q.n_labels, 2);
    cr_assert_str_eq(q.label_key[0], "team");
    cr_assert_str_eq(q.label_value[1], "");
    /* Matching: every filter must hold. */
    parse(true, NULL, (const char *const[]){ "kind", "diag", "label.team", "x", NULL });
    cr_assert(api_stream_query_match(&q, "diag", labels));
    cr_assert(!api_stream_query_match(&q, "generate", labels));
    parse(true, NULL, (const char *const[]){ "label.team", "y", NULL });
    cr_assert(!api_stream_query_match(&q, "diag", labels));
    cr_assert(!api_stream_query_match(&q, "diag", NULL));
    parse(true, NULL, NULL);
    cr_assert(api_stream_query_match(&q, "diag", NULL));
    cJSON_Delete(labels);

    /* A job's stream takes after= only. */
    parse(false, NULL, (const char *const[]){ "kind", "diag", "label.team", "x", NULL });
    cr_assert(has_error("kind", "unknown") && has_error("label.team", "unknown"));
}

Test(api_stream_query, bad_filters_are_field_errors)
{
    char longkey[80], longval[300];

    parse(true, NULL, (const char *const[]){ "kind", "nope", NULL });
    cr_assert(has_error("kind", "enum"));
    parse(true, NULL, (const char *const[]){ "kind", "diag", "kind", "diag", NULL });
    cr_assert(has_error("kind", "duplicate"));
    parse(true, NULL, (const char *const[]){ "label.", "x", "label.a b", "x", "label.a/b", "x", NULL });
    cr_assert_eq(fe.n, 3);
    cr_assert(has_error("label", "pattern"));
    memset(longkey, 'k', sizeof(longkey));
    memcpy(longkey, "label.", 6);
    longkey[6 + API_STREAM_LABEL_KEY_MAX + 1] = '\0';
    parse(true, NULL, (const char *const[]){ longkey, "x", NULL });
    cr_assert(has_error("label", "pattern"), "a key of 65 bytes");
    longkey[6 + API_STREAM_LABEL_KEY_MAX] = '\0';
    parse(true, NULL, (const char *const[]){ longkey, "x", NULL });
    cr_assert_eq(fe.n, 0, "a key of 64 bytes");
    memset(longval, 'v', sizeof(longval));
    longval[API_STREAM_LABEL_VALUE_MAX + 1] = '\0';
    parse(true, NULL, (const char *const[]){ "label.t", longval, NULL });
    cr_assert(has_error("label.t", "length"));
    parse(true, NULL, (const char *const[]){ "label.t", "\xff\xfe", NULL });
    cr_assert(has_error("label.t", "length"), "not UTF-8");
    parse(true, NULL, (const char *const[]){ "label.t", "a", "label.t", "b", NULL });
    cr_assert(has_error("label.t", "duplicate"));
    parse(true, NULL,
          (const char *const[]){ "label.a", "1", "label.b", "1", "label.c", "1", "label.d", "1", "label.e", "1",
                                 "label.f", "1", "label.g", "1", "label.h", "1", "label.i", "1", NULL });
    cr_assert(has_error("label", "count"));
    cr_assert_eq(q.n_labels, API_STREAM_MAX_LABELS);
    parse(true, NULL, (const char *const[]){ "state", "queued", "\xff", "x", NULL });
    cr_assert(has_error("state", "unknown") && has_error("query", "unknown"));
}
