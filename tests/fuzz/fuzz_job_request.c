/*
 * fuzz_job_request — a POST /v1/jobs body, as kforge-api reads it: the
 * strict JSON reader (kf_json_parse, the API's depth limit), then the job
 * request validator (kf_job_request_parse).
 *
 * Promises checked beyond "no crash, no UB":
 *  - every error text (the reader's message, each field error and the
 *    summary the 422 body carries) is valid UTF-8, so the API's answer is
 *    JSON text a strict client accepts;
 *  - what the validator accepts round-trips: its spec, budget and goal
 *    printed as the API stores them make a queue payload
 *    (kf_job_payload_build) that the worker's parser (kf_job_payload_parse)
 *    accepts with the same spec, so no job is answered 202 and then refused;
 *  - the job document the client gets (api_job_doc) is strict JSON.
 */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "api.h"
#include "kf_job.h"
#include "kf_json.h"

static void check_utf8(const char *what, const char *s)
{
    size_t bad = 0;
    FUZZ_CHECK(kf_utf8_valid(s, strlen(s), &bad), "%s is not UTF-8 at byte %zu: %s", what, bad, s);
}

static void round_trip(const kf_job_request *jr)
{
    static const char id[] = "5bd35d24-a80d-4ced-9c48-7d25c358dfdb";
    char *spec = kf_json_print(jr->spec), *budget = kf_json_print(jr->budget);
    char *goal = kf_json_print(jr->goal), *labels = kf_json_print(jr->labels);
    kf_err e = KF_ERR_INIT;
    kf_job_payload p;
    char *payload, *again, *doc;
    api_new_job nj;
    cJSON *v = NULL;

    payload = kf_job_payload_build(id, kf_job_kind_name(jr->kind), jr->target, jr->backend, spec, budget, goal, &e);
    FUZZ_CHECK(payload != NULL, "the API accepted what it cannot queue: %s", e.msg);
    FUZZ_CHECK(kf_job_payload_parse(payload, &p, &e) == KF_OK, "the worker refuses what the API accepted: %s: %s",
               e.msg, payload);
    again = kf_json_print(p.spec);
    FUZZ_CHECK(strcmp(again, spec) == 0, "the spec changed on the way: %s -> %s", spec, again);
    free(again);
    kf_job_payload_release(&p);
    free(payload);

    memset(&nj, 0, sizeof(nj));
    memcpy(nj.id, id, sizeof(id));
    nj.kind = kf_job_kind_name(jr->kind);
    nj.target = jr->target;
    nj.backend = jr->backend;
    nj.priority = jr->priority;
    nj.max_attempts = jr->max_attempts;
    nj.idem_key = "k-1";
    nj.spec = spec;
    nj.budget = budget;
    nj.goal = goal;
    nj.labels = labels;
    nj.created_at = "2026-12-01T00:00:00.000001+00:00";
    doc = api_job_doc(&nj);
    FUZZ_CHECK(kf_json_parse(doc, strlen(doc), KF_JSON_MAX_DEPTH + 2, &v, &e) == KF_OK,
               "the job document is not strict JSON: %s: %s", e.msg, doc);
    cJSON_Delete(v);
    free(doc);
    free(spec);
    free(budget);
    free(goal);
    free(labels);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kf_err e = KF_ERR_INIT;
    cJSON *body = NULL;
    kf_job_request jr;
    kf_fields fe;
    char summary[1024];

    if (kf_json_parse((const char *)data, size, KF_JSON_MAX_DEPTH, &body, &e) != KF_OK) {
        check_utf8("the JSON reader's error", e.msg);
        return 0;
    }
    kf_fields_init(&fe);
    if (kf_job_request_parse(body, 3, &jr, &fe)) {
        round_trip(&jr);
        kf_job_request_release(&jr);
    } else {
        FUZZ_CHECK(fe.n > 0, "refused without saying why");
        for (int i = 0; i < fe.n; i++) {
            check_utf8("a field path", fe.e[i].field);
            check_utf8("a rule", fe.e[i].rule);
            check_utf8("a field error", fe.e[i].detail);
        }
        kf_fields_summary(&fe, summary, sizeof(summary));
        check_utf8("the summary", summary);
    }
    cJSON_Delete(body);
    return 0;
}
