/* ka_iter_json: the iteration report's one serializer (ka_iter.h), shape
 * by shape: a candidate that does not compile, a validated new best, an
 * explored one, and a one-evaluation kind. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/ka_iter.h"

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
