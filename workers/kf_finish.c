/* kf_finish — the worker's end-of-attempt decision table (see kf_finish.h). */
#include "kf_finish.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

kf_finish_plan kf_finish_plan_of(bool ok, bool retryable, int attempt, int max_attempts)
{
    kf_finish_plan p;

    p.retry = !ok && retryable && attempt < max_attempts;
    /* A retryable failure on the last attempt is not reported: the queue
     * dead-letters it and the scheduler records `dead`, as for a lease
     * that expired. */
    p.report = ok || !retryable || p.retry;
    return p;
}

kf_finish_answer kf_finish_answer_of(long status, const char *problem)
{
    if (status >= 200 && status < 300)
        return KF_FINISH_TAKEN;
    if (status == 404 || status == 409 || (status == 403 && problem && strcmp(problem, "not-lease-holder") == 0))
        return KF_FINISH_ELSEWHERE;
    return status >= 400 ? KF_FINISH_REFUSED : KF_FINISH_ELSEWHERE;
}

kf_finish_settle kf_finish_settle_of(kf_finish_plan plan, long status)
{
    if (!plan.report || (plan.retry && status >= 200 && status < 300))
        return KF_FINISH_FAIL;
    return KF_FINISH_ACK;
}

void kf_finish_body(kf_buf *b, const kf_finish_report *r)
{
    kf_buf_addf(b, "{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"%s\",\"result\":%s", r->attempt,
                r->lease_token, r->ok ? "succeeded" : "failed", r->ok && r->result_json ? r->result_json : "{}");
    if (!r->ok) {
        cJSON *v = cJSON_CreateString(r->error ? r->error : "");
        char *e = cJSON_PrintUnformatted(v);
        kf_buf_addf(b, ",\"error\":%s", e ? e : "\"\"");
        free(e);
        cJSON_Delete(v);
    }
    kf_buf_addf(b, ",\"retry\":%s,\"worker\":\"%s\"", r->retry ? "true" : "false", r->worker);
    if (r->ok && r->provenance_json)
        kf_buf_addf(b, ",\"provenance\":%s", r->provenance_json);
    kf_buf_addc(b, '}');
}
