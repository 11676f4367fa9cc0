/* The agent's two documents' serializers: ka_iter_json (the iteration
 * report, shape by shape: a candidate that does not compile, a validated new
 * best, an explored one, a one-evaluation kind) and ka_result_json (a tuning
 * run's result). */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ka_iter.h"
#include "agent/ka_result.h"

static char *json_of(const ka_iter *it)
{
    char *txt = ka_iter_json(it);
    cr_assert_not_null(txt);
    return txt;
}

Test(iter, a_candidate_that_does_not_compile)
{
    ka_iter it = { 0 };
    char *txt;

    it.iteration = 1;
    it.source = "def k(): pass\n";
    it.params = cJSON_Parse("{\"TILE\":128}");
    it.compile_cached = -1;
    it.compile_error = cJSON_Parse("{\"code\":\"syntax\",\"message\":\"bad\",\"line\":3}");
    it.action = "reject";
    it.has_correct = true;
    snprintf(it.reason, sizeof(it.reason), "it does not compile: bad");
    it.has_timings = true;
    it.eval_ms = 1.5;
    it.total_ms = 2;
    txt = json_of(&it);
    cr_assert_str_eq(txt, "{\"source\":\"def k(): pass\\n\",\"params\":{\"TILE\":128},\"compile\":{\"ok\":false,"
                          "\"error\":{\"code\":\"syntax\",\"message\":\"bad\",\"line\":3}},\"validation\":{},"
                          "\"profile\":{},\"findings\":[],\"action\":\"reject\",\"correct\":false,"
                          "\"reason\":\"it does not compile: bad\",\"timings\":{\"eval_ms\":1.5,\"validate_ms\":0,"
                          "\"sim_ms\":0,\"overhead_ms\":0,\"total_ms\":2}}");
    free(txt);
    ka_iter_release(&it);
    cr_assert_null(it.params, "released and zeroed");
    ka_iter_release(NULL);
}

Test(iter, a_validated_new_best_and_an_explored_candidate)
{
    ka_iter it = { 0 };
    char *txt;

    it.iteration = 2;
    it.params = cJSON_Parse("{\"TILE\":256}");
    it.compiled = true;
    it.compile_cached = 0;
    it.validation = cJSON_Parse("{\"ok\":true,\"pass\":true,\"checks\":[]}");
    it.verdict = KA_VERDICT_PASS;
    it.profile = cJSON_Parse("{\"latency_ns\":1000,\"floor_ns\":500,\"cached\":false}");
    it.findings = cJSON_Parse("[{\"kind\":\"dma\"}]");
    it.action = "accept";
    it.artifacts = cJSON_Parse("[{\"name\":\"kernel.py\",\"content\":\"x\"}]");
    it.has_latency = it.has_correct = it.correct = true;
    it.latency_ns = 1000;
    snprintf(it.reason, sizeof(it.reason), "faster");
    txt = json_of(&it);
    cr_assert_str_eq(txt, "{\"params\":{\"TILE\":256},\"compile\":{\"ok\":true,\"cached\":false},"
                          "\"validation\":{\"ok\":true,\"pass\":true,\"checks\":[],\"status\":\"pass\"},"
                          "\"profile\":{\"latency_ns\":1000,\"floor_ns\":500,\"cached\":false},"
                          "\"findings\":[{\"kind\":\"dma\"}],\"action\":\"accept\","
                          "\"artifacts\":[{\"name\":\"kernel.py\",\"content\":\"x\"}],\"latency_ns\":1000,"
                          "\"correct\":true,\"reason\":\"faster\"}");
    free(txt);
    ka_iter_release(&it);

    it.compiled = true;
    it.compile_cached = 1;
    it.verdict = KA_VERDICT_SKIPPED;
    it.skip_reason = "not faster than the best";
    it.action = "explore";
    it.has_latency = true;
    it.latency_ns = 2000;
    txt = json_of(&it);
    cr_assert_str_eq(txt, "{\"params\":{},\"compile\":{\"ok\":true,\"cached\":true},"
                          "\"validation\":{\"status\":\"skipped\",\"reason\":\"not faster than the best\"},"
                          "\"profile\":{},\"findings\":[],\"action\":\"explore\",\"latency_ns\":2000,\"reason\":\"\"}",
                     "%s", txt);
    free(txt);
    ka_iter_release(&it);
}

Test(iter, a_one_evaluation_kind_keeps_the_evaluations_own_verdict)
{
    ka_iter it = { 0 };
    char *txt;
    cJSON *doc;

    it.compiled = true;
    it.compile_cached = -1;
    it.validation = cJSON_Parse("{\"ok\":true,\"pass\":false}");
    it.verdict = KA_VERDICT_NONE;
    it.action = "validate";
    it.has_correct = true;
    txt = json_of(&it);
    doc = cJSON_Parse(txt);
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "validation"), "status"), "%s", txt);
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "compile"), "cached"), "%s", txt);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(doc, "correct")));
    cr_assert_null(cJSON_GetObjectItem(doc, "source"));
    cr_assert_null(cJSON_GetObjectItem(doc, "timings"));
    cJSON_Delete(doc);
    free(txt);
    ka_iter_release(&it);
}

/* ka_result_json: the tuning run's result document, member by member. */

Test(result, a_run_with_a_best_a_default_a_path_and_a_trace)
{
    ka_result r = { 0 };
    ka_step *st;
    ka_trace_row *tr;
    cJSON *doc, *b;
    char *txt;

    r.op = "add";
    r.entry = "add_kernel";
    r.target = "trn2";
    r.planner = "guided";
    r.correct = true;
    r.best.params = cJSON_Parse("{\"TILE_F\":512}");
    r.best.kwargs = cJSON_Parse("{\"TILE_F\":512,\"N\":4}");
    r.best.iteration = 2;
    r.best.latency_ns = 2000;
    r.best.floor_ns = 500;
    snprintf(r.best.bound_kind, sizeof(r.best.bound_kind), "io");
    r.best.bounds = cJSON_Parse("{\"tightest\":\"dma\"}");
    r.best.source = strdup("def add_kernel(TILE_F=512): pass\n");
    r.has_default = true;
    r.def.params = cJSON_Parse("{\"TILE_F\":128}");
    r.def.latency_ns = 4000;
    r.def.fraction_of_bound = 0.125;
    r.def.correct = r.def.validated = true;
    st = ka_result_add_step(&r);
    st->iteration = 1;
    st->params = cJSON_Parse("{\"TILE_F\":128}");
    st->latency_ns = 4000;
    snprintf(st->reason, sizeof(st->reason), "baseline");
    st = ka_result_add_step(&r);
    st->iteration = 2;
    st->params = cJSON_Parse("{\"TILE_F\":512}");
    st->latency_ns = 2000;
    st->fraction_of_bound = 0.25;
    for (int i = 0; i < 40; i++) {   /* past the first growth */
        tr = ka_result_add_trace(&r);
        tr->iteration = i + 1;
        tr->action = i == 1 ? "accept" : "explore";
    }
    r.stop_reason = "no_improvement";
    snprintf(r.stop_message, sizeof(r.stop_message), "8 iterations without improvement");
    r.iterations = 40;
    r.cache_hits = 3;
    r.wall_s = 2;
    r.eval_s = 1.5;
    r.sim_s = 1;
    r.report = strdup("# report\n");

    doc = ka_result_json(&r);
    txt = cJSON_PrintUnformatted(doc);
    b = cJSON_GetObjectItem(doc, "best");
    cr_assert_not_null(b, "%s", txt);
    cr_assert_eq(cJSON_GetObjectItem(b, "fraction_of_bound")->valuedouble, 0.25);
    cr_assert_eq(cJSON_GetObjectItem(doc, "fraction_of_bound")->valuedouble, 0.25);
    cr_assert_eq(cJSON_GetObjectItem(doc, "latency_ns")->valuedouble, 2000);
    cr_assert_str_eq(cJSON_GetObjectItem(b, "source")->valuestring, "def add_kernel(TILE_F=512): pass\n");
    cr_assert_null(cJSON_GetObjectItem(b, "summary"), "an absent evaluator document stays absent: %s", txt);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(b, "validated")));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "path")), 2);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "trace")), 40);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "trace"), 1), "action")->valuestring,
                     "accept");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "stop"), "reason")->valuestring, "no_improvement");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "timings"), "loop_overhead_fraction")->valuedouble, 0.25);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "timings"), "outside_sim_fraction")->valuedouble, 0.5);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "report")->valuestring, "# report\n");
    /* member order: what result.json has always shown */
    cr_assert(strstr(txt, "{\"op\":\"add\",\"entry\":\"add_kernel\",\"target\":\"trn2\",\"planner\":\"guided\","
                          "\"correct\":true,\"best\":{\"params\":{\"TILE_F\":512},\"kwargs\"") == txt, "%s", txt);
    cr_assert(strstr(txt, "\"default\":{\"params\":{\"TILE_F\":128},\"latency_ns\":4000,\"floor_ns\":0,"
                          "\"fraction_of_bound\":0.125,\"correct\":true,\"validated\":true},\"path\":[") != NULL, "%s", txt);
    free(txt);
    cJSON_Delete(doc);
    ka_result_release(&r);
    cr_assert_null(r.path);
    ka_result_release(NULL);
}

Test(result, a_run_without_a_correct_kernel_has_no_best)
{
    ka_result r = { 0 };
    cJSON *doc;

    r.stop_reason = "exhausted";
    doc = ka_result_json(&r);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(doc, "correct")));
    cr_assert_null(cJSON_GetObjectItem(doc, "best"));
    cr_assert_null(cJSON_GetObjectItem(doc, "latency_ns"));
    cr_assert_null(cJSON_GetObjectItem(doc, "default"));
    cr_assert(cJSON_IsArray(cJSON_GetObjectItem(doc, "path")));
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "timings"), "loop_overhead_fraction")->valuedouble, 0);
    cJSON_Delete(doc);
}
