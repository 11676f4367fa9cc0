/* api_stream_query — what a client says to the live-progress routes
 * (docs/runs.md, "Live progress"): where to resume (the Last-Event-ID
 * header or after=) and, for GET /v1/stream, which jobs (kind=,
 * label.KEY=VALUE).  Pure: no I/O, no allocation, every text bounded by
 * the fixed fields of api_stream_query.
 *
 * Ownership: the caller owns the api_stream_query; nothing is kept from
 * the strings passed in (they are copied or only read).
 *
 * Failure behaviour: a value that breaks a rule adds a field error naming
 * the parameter and the rule (kf_fields) and leaves the query as it was;
 * the caller answers 422 with the list.  Unit-tested in
 * tests/unit/test_api_stream.c, fuzzed by tests/fuzz/fuzz_sse_query.c. */
#include "api.h"
#include "kf_job.h"

#include <string.h>

void api_stream_query_init(api_stream_query *q, bool global)
{
    memset(q, 0, sizeof(*q));
    q->global = global;
    q->after = -1;
}

/* An event id: digits only, 0..INT64_MAX (job_events.id is a bigint). */
static bool api_stream_id_parse(const char *s, long long *out)
{
    unsigned long long v = 0;

    if (!api_parse_uint(s, (unsigned long long)INT64_MAX, &v))
        return false;
    *out = (long long)v;
    return true;
}

/* A label name in a filter: 1..API_STREAM_LABEL_KEY_MAX of [A-Za-z0-9_.-]. */
static bool api_stream_label_key_ok(const char *k)
{
    size_t n = strlen(k);

    if (n == 0 || n > API_STREAM_LABEL_KEY_MAX)
        return false;
    for (const char *p = k; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

static void api_stream_query_label(api_stream_query *q, const char *key, const char *value, kf_fields *fe)
{
    char field[96];
    size_t vn = strlen(value);

    /* The field path names the key only once it is known to be printable. */
    if (!api_stream_label_key_ok(key)) {
        kf_fields_add(fe, "label", "pattern",
                      "a label filter is label.KEY=VALUE with KEY 1-%d of [A-Za-z0-9_.-]", API_STREAM_LABEL_KEY_MAX);
        return;
    }
    snprintf(field, sizeof(field), "label.%s", key);
    if (vn > API_STREAM_LABEL_VALUE_MAX || !kf_utf8_valid(value, vn, NULL)) {
        kf_fields_add(fe, field, "length", "a label value is UTF-8 text of at most %d bytes",
                      API_STREAM_LABEL_VALUE_MAX);
        return;
    }
    for (int i = 0; i < q->n_labels; i++) {
        if (strcmp(q->label_key[i], key) == 0) {
            kf_fields_add(fe, field, "duplicate", "give each label at most once");
            return;
        }
    }
    if (q->n_labels == API_STREAM_MAX_LABELS) {
        kf_fields_add(fe, "label", "count", "at most %d label filters", API_STREAM_MAX_LABELS);
        return;
    }
    memcpy(q->label_key[q->n_labels], key, strlen(key) + 1);
    memcpy(q->label_value[q->n_labels], value, vn + 1);
    q->n_labels++;
}

void api_stream_query_arg(api_stream_query *q, const char *key, const char *value, kf_fields *fe)
{
    if (!value)
        value = "";
    if (strcmp(key, "after") == 0) {
        long long id = 0;
        if (q->after_given) {
            kf_fields_add(fe, "after", "duplicate", "give after= at most once");
        } else if (!api_stream_id_parse(value, &id)) {
            kf_fields_add(fe, "after", "range", "must be an event id (an integer from 0 to %lld)",
                          (long long)INT64_MAX);
        } else {
            q->after_given = true;
            if (!q->header_given)
                q->after = id;
        }
        return;
    }
    if (q->global && strcmp(key, "kind") == 0) {
        if (q->kind[0]) {
            kf_fields_add(fe, "kind", "duplicate", "give kind= at most once");
        } else if (kf_job_kind_parse(value) == KF_KIND_NONE) {
            kf_fields_add(fe, "kind", "enum", "must be one of generate, optimize, profile, validate, diag");
        } else {
            memcpy(q->kind, value, strlen(value) + 1);
        }
        return;
    }
    if (q->global && strncmp(key, "label.", 6) == 0) {
        api_stream_query_label(q, key + 6, value, fe);
        return;
    }
    if (kf_utf8_valid(key, strlen(key), NULL) && strlen(key) <= 64)
        kf_fields_add(fe, key, "unknown", "unknown query parameter");
    else
        kf_fields_add(fe, "query", "unknown", "unknown query parameter (its name is not short UTF-8 text)");
}

void api_stream_query_last_id(api_stream_query *q, const char *value, kf_fields *fe)
{
    long long id = 0;

    /* An empty Last-Event-ID is what a browser sends after an id: field
     * that reset it: no position, as if the header were absent. */
    if (!value || !*value)
        return;
    if (!api_stream_id_parse(value, &id)) {
        kf_fields_add(fe, "Last-Event-ID", "range", "must be an event id (an integer from 0 to %lld)",
                      (long long)INT64_MAX);
        return;
    }
    /* The header is newer than the URL's after= (EventSource reconnects
     * with the same URL and the last id it saw). */
    q->header_given = true;
    q->after = id;
}

bool api_stream_query_match(const api_stream_query *q, const char *kind, const cJSON *labels)
{
    if (q->kind[0] && (!kind || strcmp(q->kind, kind) != 0))
        return false;
    for (int i = 0; i < q->n_labels; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, q->label_key[i]);
        if (!cJSON_IsString(v) || strcmp(v->valuestring, q->label_value[i]) != 0)
            return false;
    }
    return true;
}
