/*
 * fuzz_payload — a queue payload as a worker reads it (kf_job_payload_parse):
 * the text a leased job carries from Redis, which a compromised API or a
 * hand-edited queue could have written.
 *
 * Promises checked: no crash or UB; a refusal says why (in UTF-8 when
 * the input was UTF-8); what is
 * accepted has a known kind, a UUID id and a spec object, and building the
 * payload again from what was parsed gives one the parser accepts too.
 */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "kf_job.h"
#include "kf_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    kf_err e = KF_ERR_INIT;
    kf_job_payload p;
    size_t bad = 0;

    if (kf_job_payload_parse(text, &p, &e) != KF_OK) {
        FUZZ_CHECK(e.msg[0] != '\0', "refused without saying why");
        FUZZ_CHECK(!kf_utf8_valid(text, strlen(text), NULL) || kf_utf8_valid(e.msg, strlen(e.msg), &bad),
                   "error about UTF-8 input not UTF-8 at %zu: %s", bad, e.msg);
    } else {
        char *spec = kf_json_print(p.spec), *budget = kf_json_print(p.budget), *goal = kf_json_print(p.goal);
        char *again;
        kf_job_payload q;

        FUZZ_CHECK(p.kind != KF_KIND_NONE, "accepted without a kind");
        FUZZ_CHECK(kf_uuid_valid(p.id), "accepted id %s", p.id);
        FUZZ_CHECK(cJSON_IsObject(p.spec), "accepted a spec that is not an object");
        again = kf_job_payload_build(p.id, kf_job_kind_name(p.kind), p.target, p.backend, spec, budget, goal, &e);
        FUZZ_CHECK(again != NULL, "cannot rebuild an accepted payload: %s", e.msg);
        FUZZ_CHECK(kf_job_payload_parse(again, &q, &e) == KF_OK, "the rebuilt payload is refused: %s: %s", e.msg,
                   again);
        kf_job_payload_release(&q);
        free(again);
        free(spec);
        free(budget);
        free(goal);
        kf_job_payload_release(&p);
    }
    free(text);
    return 0;
}
