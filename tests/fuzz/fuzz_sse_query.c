/*
 * fuzz_sse_query — what a client says to the live-progress routes
 * (api_stream_query.c): the Last-Event-ID header and the query of GET
 * /v1/jobs/{id}/stream (after=) and GET /v1/stream (after=, kind=,
 * label.KEY=VALUE), as MHD hands them over (decoded: any bytes).
 *
 * Input: byte 0 picks the route (bit 0: /v1/stream) and whether a
 * Last-Event-ID header is sent (bit 1); then the header's value up to the
 * first '\n' (when sent); then the query, pairs split at '&' and at the
 * first '=' of each (a pair without '=' has no value).
 *
 * Promises checked:
 *  - an accepted query's position is digits within 0..INT64_MAX, the
 *    header's when one came, else after='s;
 *  - kind and label filters only on /v1/stream; kind is a job kind; a
 *    label key is 1-64 of [A-Za-z0-9_.-], its value UTF-8 of at most 256
 *    bytes, no key twice, at most API_STREAM_MAX_LABELS;
 *  - a query with a parameter other than these gives a field error;
 *  - every field error's field and detail are UTF-8 (they go into JSON);
 *  - a job whose kind and labels are the filters' passes the filters.
 */
#include "fuzz.h"

#include <stdbool.h>

#include "api.h"
#include "kf_job.h"

static bool digits_equal(const char *s, long long v)
{
    char buf[32];
    const char *p = s;

    while (p[0] == '0' && p[1])
        p++;
    snprintf(buf, sizeof(buf), "%lld", v);
    return strcmp(buf, p) == 0;
}

static bool key_known(const char *k, bool global)
{
    return strcmp(k, "after") == 0 || (global && (strcmp(k, "kind") == 0 || strncmp(k, "label.", 6) == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    api_stream_query q;
    kf_fields fe;
    bool global, header, unknown = false;
    char *in, *p, *hdr = NULL, *after_src = NULL;

    if (size < 1)
        return 0;
    global = data[0] & 1;
    header = data[0] & 2;
    in = fuzz_cstr(data + 1, size - 1);
    p = in;
    api_stream_query_init(&q, global);
    kf_fields_init(&fe);
    if (header) {
        char *nl = strchr(p, '\n');
        hdr = p;
        if (nl) {
            *nl = '\0';
            p = nl + 1;
        } else {
            p += strlen(p);
        }
        api_stream_query_last_id(&q, hdr, &fe);
    }
    while (*p) {
        char *amp = strchr(p, '&'), *eq;
        if (amp)
            *amp = '\0';
        eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        if (!key_known(p, global))
            unknown = true;
        if (strcmp(p, "after") == 0 && !after_src)
            after_src = eq ? eq + 1 : (char *)"";
        api_stream_query_arg(&q, p, eq ? eq + 1 : NULL, &fe);
        if (!amp)
            break;
        p = amp + 1;
    }

    if (unknown)
        FUZZ_CHECK(fe.n > 0, "an unknown parameter was accepted");
    for (int i = 0; i < fe.n; i++) {
        FUZZ_CHECK(kf_utf8_valid(fe.e[i].field, strlen(fe.e[i].field), NULL), "field %s", fe.e[i].field);
        FUZZ_CHECK(kf_utf8_valid(fe.e[i].detail, strlen(fe.e[i].detail), NULL), "detail %s", fe.e[i].detail);
    }
    FUZZ_CHECK(q.after >= -1, "position %lld", q.after);
    /* What a refused query holds is never used: only an accepted one
     * (one after= at most) promises its position. */
    if (fe.n > 0) {
        free(in);
        return 0;
    }
    if (q.header_given) {
        FUZZ_CHECK(hdr && digits_equal(hdr, q.after), "header %s read as %lld", hdr ? hdr : "(none)", q.after);
    } else if (q.after >= 0) {
        FUZZ_CHECK(after_src && digits_equal(after_src, q.after), "after=%s read as %lld",
                   after_src ? after_src : "(none)", q.after);
    }
    if (!global)
        FUZZ_CHECK(q.kind[0] == '\0' && q.n_labels == 0, "filters on a job's stream");
    if (q.kind[0])
        FUZZ_CHECK(kf_job_kind_parse(q.kind) != KF_KIND_NONE, "kind %s", q.kind);
    FUZZ_CHECK(q.n_labels >= 0 && q.n_labels <= API_STREAM_MAX_LABELS, "%d labels", q.n_labels);
    for (int i = 0; i < q.n_labels; i++) {
        size_t kn = strlen(q.label_key[i]), vn = strlen(q.label_value[i]);
        FUZZ_CHECK(kn >= 1 && kn <= API_STREAM_LABEL_KEY_MAX &&
                       strspn(q.label_key[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == kn,
                   "label key %s", q.label_key[i]);
        FUZZ_CHECK(vn <= API_STREAM_LABEL_VALUE_MAX && kf_utf8_valid(q.label_value[i], vn, NULL), "label value %s",
                   q.label_value[i]);
        for (int k = 0; k < i; k++)
            FUZZ_CHECK(strcmp(q.label_key[k], q.label_key[i]) != 0, "label %s twice", q.label_key[i]);
    }
    {
        cJSON *labels = cJSON_CreateObject();
        for (int i = 0; i < q.n_labels; i++)
            cJSON_AddStringToObject(labels, q.label_key[i], q.label_value[i]);
        FUZZ_CHECK(api_stream_query_match(&q, q.kind[0] ? q.kind : "diag", labels), "its own filters refuse a job");
        cJSON_Delete(labels);
    }
    free(in);
    return 0;
}
