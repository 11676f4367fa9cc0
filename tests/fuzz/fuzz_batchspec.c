/*
 * fuzz_batchspec — a POST /v1/batches body, as kforge-api reads it: the
 * strict JSON reader (kf_json_parse, the API's depth limit), then the batch
 * request's check and expansion (kf_batchspec_parse) with a job limit of
 * 200 and a small fixed library index for the library form.
 *
 * Promises checked beyond "no crash, no UB":
 *  - a refusal says why (at least one field error), keeps nothing, and every
 *    error text is valid UTF-8 (the 422 body is JSON a strict client reads);
 *  - what is accepted holds 1..limit jobs, numbered 0..n-1 in order, with
 *    distinct keys (reports join on them), a batch priority of 0..4 that
 *    every job carries, and the keys' text has one line per job;
 *  - every job round-trips as POST /v1/jobs's do: its queue payload
 *    (kf_job_payload_build) is accepted by the worker's parser with the same
 *    spec, so no batch is answered 202 with a job a worker refuses.
 */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "kf_batchspec.h"
#include "kf_job.h"
#include "kf_json.h"

#define FUZZ_MAX_JOBS 200

static const char fuzz_library[] =
    "[{\"op\":\"add\",\"reference_shapes\":[[64,32],[64,32]]},{\"op\":\"softmax\",\"reference_shapes\":[[128,256]]},"
    "{\"op\":\"noshapes\"},{\"op\":\"bad\",\"reference_shapes\":[[1.5]]},{\"reference_shapes\":[[1]]}]";

static void check_utf8(const char *what, const char *s)
{
    size_t bad = 0;
    FUZZ_CHECK(kf_utf8_valid(s, strlen(s), &bad), "%s is not UTF-8 at byte %zu: %s", what, bad, s);
}

static void round_trip(const kf_job_request *jr)
{
    static const char id[] = "5bd35d24-a80d-4ced-9c48-7d25c358dfdb";
    char *spec = kf_json_print(jr->spec), *budget = kf_json_print(jr->budget), *goal = kf_json_print(jr->goal);
    kf_err e = KF_ERR_INIT;
    kf_job_payload p;
    char *payload, *again;

    payload = kf_job_payload_build(id, kf_job_kind_name(jr->kind), jr->target, jr->backend, spec, budget, goal, &e);
    FUZZ_CHECK(payload != NULL, "a batch job that cannot be queued: %s", e.msg);
    FUZZ_CHECK(kf_job_payload_parse(payload, &p, &e) == KF_OK, "the worker refuses a batch's job: %s: %s", e.msg,
               payload);
    again = kf_json_print(p.spec);
    FUZZ_CHECK(strcmp(again, spec) == 0, "the spec changed on the way: %s -> %s", spec, again);
    free(again);
    kf_job_payload_release(&p);
    free(payload);
    free(spec);
    free(budget);
    free(goal);
}

static void check_accepted(const kf_batchspec *b)
{
    char *keys = kf_batchspec_keys(b);
    int lines = 0;

    FUZZ_CHECK(b->n >= 1 && b->n <= FUZZ_MAX_JOBS, "accepted %d jobs (limit %d)", b->n, FUZZ_MAX_JOBS);
    FUZZ_CHECK(b->priority >= 0 && b->priority <= KF_BATCH_MAX_PRIORITY, "batch priority %d", b->priority);
    FUZZ_CHECK(b->tmpl && b->matrix, "nothing to store as the template or matrix");
    for (const char *p = keys; *p; p++)
        lines += *p == '\n';
    FUZZ_CHECK(lines == b->n, "%d key lines for %d jobs", lines, b->n);
    /* Sorted: equal neighbours would be two jobs a report cannot tell apart. */
    for (const char *p = keys, *nl; (nl = strchr(p, '\n')) && nl[1]; p = nl + 1) {
        const char *q = nl + 1, *nl2 = strchr(q, '\n');
        FUZZ_CHECK(!(nl - p == nl2 - q && memcmp(p, q, (size_t)(nl - p)) == 0), "two entries share a key: %.*s",
                   (int)(nl - p), p);
    }
    free(keys);
    for (int i = 0; i < b->n; i++) {
        const kf_batch_entry *e = &b->entries[i];
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e->coords, "seq");
        FUZZ_CHECK(cJSON_IsNumber(seq) && seq->valueint == i, "entry %d has seq %d", i,
                   cJSON_IsNumber(seq) ? seq->valueint : -1);
        FUZZ_CHECK(e->jr.priority == b->priority, "entry %d runs at %d, the batch at %d", i, e->jr.priority,
                   b->priority);
        check_utf8("a key", e->key);
        round_trip(&e->jr);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kf_err e = KF_ERR_INIT;
    cJSON *body = NULL, *lib = cJSON_Parse(fuzz_library);
    kf_batchspec_limits lim = { FUZZ_MAX_JOBS, 3, lib };
    kf_batchspec b;
    kf_fields fe;
    char summary[1024];

    if (kf_json_parse((const char *)data, size, KF_JSON_MAX_DEPTH, &body, &e) != KF_OK) {
        check_utf8("the JSON reader's error", e.msg);
        cJSON_Delete(lib);
        return 0;
    }
    kf_fields_init(&fe);
    if (kf_batchspec_parse(body, &lim, &b, &fe)) {
        check_accepted(&b);
        kf_batchspec_release(&b);
    } else {
        FUZZ_CHECK(fe.n > 0, "refused without saying why");
        FUZZ_CHECK(b.n == 0 && !b.entries && !b.tmpl && !b.matrix && !b.name, "a refusal kept something");
        for (int i = 0; i < fe.n; i++) {
            check_utf8("a field path", fe.e[i].field);
            check_utf8("a rule", fe.e[i].rule);
            check_utf8("a field error", fe.e[i].detail);
        }
        kf_fields_summary(&fe, summary, sizeof(summary));
        check_utf8("the summary", summary);
    }
    cJSON_Delete(body);
    cJSON_Delete(lib);
    return 0;
}
