/* ka_iter — the iteration value and its serializer (see ka_iter.h). */
#include "ka_iter.h"

#include <stdlib.h>
#include <string.h>

/* A copy of doc, or an empty object/array when doc is NULL. */
static cJSON *ka_iter_doc(const cJSON *doc, bool array)
{
    if (doc)
        return cJSON_Duplicate(doc, true);
    return array ? cJSON_CreateArray() : cJSON_CreateObject();
}

static const char *ka_verdict_name(ka_verdict v)
{
    switch (v) {
    case KA_VERDICT_PASS:
        return "pass";
    case KA_VERDICT_FAIL:
        return "fail";
    case KA_VERDICT_SKIPPED:
        return "skipped";
    case KA_VERDICT_NONE:
        break;
    }
    return NULL;
}

char *ka_iter_json(const ka_iter *it)
{
    cJSON *o = cJSON_CreateObject(), *c, *v;
    const char *status = ka_verdict_name(it->verdict);
    char *txt;

    if (it->source)
        cJSON_AddStringToObject(o, "source", it->source);
    cJSON_AddItemToObject(o, "params", ka_iter_doc(it->params, false));
    c = cJSON_AddObjectToObject(o, "compile");
    cJSON_AddBoolToObject(c, "ok", it->compiled);
    if (it->compile_error)
        cJSON_AddItemToObject(c, "error", cJSON_Duplicate(it->compile_error, true));
    if (it->compile_cached >= 0)
        cJSON_AddBoolToObject(c, "cached", it->compile_cached != 0);
    v = ka_iter_doc(it->validation, false);
    if (status) {
        cJSON_AddStringToObject(v, "status", status);
        if (it->verdict == KA_VERDICT_SKIPPED && it->skip_reason)
            cJSON_AddStringToObject(v, "reason", it->skip_reason);
    }
    cJSON_AddItemToObject(o, "validation", v);
    cJSON_AddItemToObject(o, "profile", ka_iter_doc(it->profile, false));
    cJSON_AddItemToObject(o, "findings", ka_iter_doc(it->findings, true));
    cJSON_AddStringToObject(o, "action", it->action ? it->action : "");
    if (it->artifacts)
        cJSON_AddItemToObject(o, "artifacts", cJSON_Duplicate(it->artifacts, true));
    if (it->has_latency)
        cJSON_AddNumberToObject(o, "latency_ns", it->latency_ns);
    if (it->has_correct)
        cJSON_AddBoolToObject(o, "correct", it->correct);
    cJSON_AddStringToObject(o, "reason", it->reason);
    if (it->has_timings) {
        cJSON *tm = cJSON_AddObjectToObject(o, "timings");
        cJSON_AddNumberToObject(tm, "eval_ms", it->eval_ms);
        cJSON_AddNumberToObject(tm, "validate_ms", it->validate_ms);
        cJSON_AddNumberToObject(tm, "sim_ms", it->sim_ms);
        cJSON_AddNumberToObject(tm, "overhead_ms", it->overhead_ms);
        cJSON_AddNumberToObject(tm, "total_ms", it->total_ms);
    }
    txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

void ka_iter_release(ka_iter *it)
{
    if (!it)
        return;
    cJSON_Delete(it->params);
    cJSON_Delete(it->compile_error);
    cJSON_Delete(it->validation);
    cJSON_Delete(it->profile);
    cJSON_Delete(it->findings);
    cJSON_Delete(it->artifacts);
    memset(it, 0, sizeof(*it));
}
