/* ka_result — the tuning run's result value and its serializer (see ka_result.h). */
#include "ka_result.h"

#include "kf_alloc.h"

#include <stdlib.h>
#include <string.h>

ka_step *ka_result_add_step(ka_result *r)
{
    if (r->n_path == r->cap_path) {
        r->cap_path = r->cap_path ? 2 * r->cap_path : 8;
        r->path = kf_realloc(r->path, r->cap_path * sizeof(*r->path));
    }
    memset(&r->path[r->n_path], 0, sizeof(r->path[0]));
    return &r->path[r->n_path++];
}

ka_trace_row *ka_result_add_trace(ka_result *r)
{
    if (r->n_trace == r->cap_trace) {
        r->cap_trace = r->cap_trace ? 2 * r->cap_trace : 16;
        r->trace = kf_realloc(r->trace, r->cap_trace * sizeof(*r->trace));
    }
    memset(&r->trace[r->n_trace], 0, sizeof(r->trace[0]));
    return &r->trace[r->n_trace++];
}

/* A copy of doc added as o[key]; nothing when doc is NULL. */
static void ka_result_add_doc(cJSON *o, const char *key, const cJSON *doc)
{
    if (doc)
        cJSON_AddItemToObject(o, key, cJSON_Duplicate(doc, true));
}

static void ka_result_best(cJSON *res, const ka_result *r)
{
    cJSON *b = cJSON_AddObjectToObject(res, "best");
    double frac = r->best.floor_ns / r->best.latency_ns;

    ka_result_add_doc(b, "params", r->best.params);
    ka_result_add_doc(b, "kwargs", r->best.kwargs);
    cJSON_AddNumberToObject(b, "iteration", r->best.iteration);
    cJSON_AddNumberToObject(b, "latency_ns", r->best.latency_ns);
    cJSON_AddNumberToObject(b, "floor_ns", r->best.floor_ns);
    cJSON_AddNumberToObject(b, "fraction_of_bound", frac);
    cJSON_AddStringToObject(b, "bound_kind", r->best.bound_kind);
    ka_result_add_doc(b, "bounds", r->best.bounds);
    ka_result_add_doc(b, "summary", r->best.summary);
    ka_result_add_doc(b, "findings", r->best.findings);
    cJSON_AddBoolToObject(b, "validated", true);
    cJSON_AddStringToObject(b, "source", r->best.source ? r->best.source : "");
    cJSON_AddNumberToObject(res, "latency_ns", r->best.latency_ns);
    cJSON_AddNumberToObject(res, "fraction_of_bound", frac);
}

cJSON *ka_result_json(const ka_result *r)
{
    cJSON *res = cJSON_CreateObject(), *arr, *st, *tm;

    cJSON_AddStringToObject(res, "op", r->op ? r->op : "");
    cJSON_AddStringToObject(res, "entry", r->entry ? r->entry : "");
    cJSON_AddStringToObject(res, "target", r->target ? r->target : "");
    cJSON_AddStringToObject(res, "planner", r->planner ? r->planner : "");
    cJSON_AddBoolToObject(res, "correct", r->correct);
    if (r->correct)
        ka_result_best(res, r);
    if (r->has_default) {
        cJSON *d = cJSON_AddObjectToObject(res, "default");
        ka_result_add_doc(d, "params", r->def.params);
        cJSON_AddNumberToObject(d, "latency_ns", r->def.latency_ns);
        cJSON_AddNumberToObject(d, "floor_ns", r->def.floor_ns);
        cJSON_AddNumberToObject(d, "fraction_of_bound", r->def.fraction_of_bound);
        cJSON_AddBoolToObject(d, "correct", r->def.correct);
        cJSON_AddBoolToObject(d, "validated", r->def.validated);
    }
    arr = cJSON_AddArrayToObject(res, "path");
    for (size_t i = 0; i < r->n_path; i++) {
        const ka_step *s = &r->path[i];
        cJSON *pe = cJSON_CreateObject();
        cJSON_AddNumberToObject(pe, "iteration", s->iteration);
        ka_result_add_doc(pe, "params", s->params);
        cJSON_AddNumberToObject(pe, "latency_ns", s->latency_ns);
        cJSON_AddNumberToObject(pe, "fraction_of_bound", s->fraction_of_bound);
        cJSON_AddStringToObject(pe, "reason", s->reason);
        cJSON_AddItemToArray(arr, pe);
    }
    st = cJSON_AddObjectToObject(res, "stop");
    cJSON_AddStringToObject(st, "reason", r->stop_reason ? r->stop_reason : "");
    cJSON_AddStringToObject(st, "message", r->stop_message);
    cJSON_AddNumberToObject(res, "iterations", r->iterations);
    cJSON_AddNumberToObject(res, "evaluations", r->evaluations);
    cJSON_AddNumberToObject(res, "cache_hits", (double)r->cache_hits);
    cJSON_AddNumberToObject(res, "pruned", r->pruned);
    cJSON_AddNumberToObject(res, "validations", r->validations);
    cJSON_AddNumberToObject(res, "rejected", r->rejected);
    cJSON_AddNumberToObject(res, "compile_errors", r->compile_errors);
    tm = cJSON_AddObjectToObject(res, "timings");
    cJSON_AddNumberToObject(tm, "wall_s", r->wall_s);
    cJSON_AddNumberToObject(tm, "eval_s", r->eval_s);
    cJSON_AddNumberToObject(tm, "sim_s", r->sim_s);
    cJSON_AddNumberToObject(tm, "loop_overhead_fraction", r->wall_s > 0 ? (r->wall_s - r->eval_s) / r->wall_s : 0);
    cJSON_AddNumberToObject(tm, "outside_sim_fraction", r->wall_s > 0 ? (r->wall_s - r->sim_s) / r->wall_s : 0);
    if (r->report)
        cJSON_AddStringToObject(res, "report", r->report);
    arr = cJSON_AddArrayToObject(res, "trace");
    for (size_t i = 0; i < r->n_trace; i++) {
        const ka_trace_row *tr = &r->trace[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "iteration", tr->iteration);
        cJSON_AddStringToObject(o, "params", tr->params);
        cJSON_AddNumberToObject(o, "latency_ns", tr->latency_ns);
        cJSON_AddNumberToObject(o, "best_ns", tr->best_ns);
        cJSON_AddBoolToObject(o, "cached", tr->cached);
        cJSON_AddStringToObject(o, "action", tr->action ? tr->action : "");
        cJSON_AddItemToArray(arr, o);
    }
    return res;
}

void ka_setting_release(ka_setting *s)
{
    if (!s)
        return;
    cJSON_Delete(s->params);
    memset(s, 0, sizeof(*s));
}

void ka_result_release(ka_result *r)
{
    if (!r)
        return;
    cJSON_Delete(r->best.params);
    cJSON_Delete(r->best.kwargs);
    cJSON_Delete(r->best.bounds);
    cJSON_Delete(r->best.summary);
    cJSON_Delete(r->best.findings);
    free(r->best.source);
    ka_setting_release(&r->def);
    for (size_t i = 0; i < r->n_path; i++)
        cJSON_Delete(r->path[i].params);
    free(r->path);
    free(r->report);
    free(r->trace);
    memset(r, 0, sizeof(*r));
}
