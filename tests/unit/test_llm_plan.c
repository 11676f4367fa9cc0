/* `kforge tune --planner llm` (issue 20) against the scripted
 * OpenAI-compatible server (tests/lib/kf_test_llm) over real HTTP: a kernel
 * that does not compile is repaired -- through a docs lookup, a candidate
 * with wrong numbers the validator rejects, a hack (NumPy on the inputs) the
 * static check catches and records, a call to an unknown tool and
 * arguments that break the schema (each an answer the model sees), a
 * correct repair -- then restructured (a faster tiling the profile
 * confirms) and handed to the guided planner for its tunables; the
 * transcript replays with no model to the same iterations; an endpoint that
 * is down ends the run with the best validated kernel (or none) and a stop
 * reason, never a hang. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_json.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_llm.h"

/* s with the first `from` replaced by `to` (the test fails when absent). */
static char *replace(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    cr_assert_not_null(at, "'%s' in the kernel", from);
    return kf_asprintf("%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
}

static char *args_source(const char *src, const char *reason)
{
    cJSON *a = cJSON_CreateObject();
    char *t;
    cJSON_AddStringToObject(a, "source", src);
    if (reason)
        cJSON_AddStringToObject(a, "reason", reason);
    t = kf_json_print(a);
    cJSON_Delete(a);
    return t;
}

static void push_tool(kf_test_llm *s, const char *id, const char *name, const char *args)
{
    char *b = kf_test_llm_tool(id, name, args, 900, 300);
    kf_test_llm_push(s, 200, NULL, 0, b);
    free(b);
}

static cJSON *read_json(const char *path)
{
    char *t = kf_test_read_file(path);
    cJSON *j = cJSON_Parse(t);
    cr_assert_not_null(j, "%s is JSON", path);
    free(t);
    return j;
}

static int count_lines(const char *path, const char *needle)
{
    char *t = kf_test_read_file(path);
    int n = 0;
    for (char *l = t; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl)
            *nl = '\0';
        if (*l && (!needle || strstr(l, needle)))
            n++;
        l = nl ? nl + 1 : NULL;
    }
    free(t);
    return n;
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

TestSuite(llm_plan, .timeout = 600);

Test(llm_plan, repairs_restructures_then_tunes_and_replays)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL;
    char *dir = kf_test_tmpdir("llmplan");
    char *add_path = kf_asprintf("%s/kernels/add.py", r);
    char *good = kf_test_read_file(add_path);
    char *broken = replace(good, "op=nl.add)", "op=nl.addd)");
    char *wrong = replace(good, "op=nl.add)", "op=nl.subtract)");
    char *hack = replace(good, "    return out\n", "    return np.asarray(a, dtype=np.float64) + np.asarray(b)\n");
    char *wide0 = replace(good, "\"default\": 512", "\"default\": 2048");
    char *wide = replace(wide0, "TILE_F=512", "TILE_F=2048");
    char *start = kf_asprintf("%s/start.py", dir);
    kf_test_llm *s = kf_test_llm_start();
    char *a;

    kf_test_write_file(start, broken);
    /* repair */
    push_tool(s, "c1", "docs", "{\"query\":\"tensor_tensor\"}");
    a = args_source(wrong, "use subtract");
    push_tool(s, "c2", "propose", a);
    free(a);
    a = args_source(hack, "compute it with numpy");
    push_tool(s, "c2h", "propose", a);
    free(a);
    push_tool(s, "c3", "shell", "{\"cmd\":\"cat /etc/passwd\"}");
    push_tool(s, "c4", "propose", "{\"reason\":\"forgot the source\"}");
    a = args_source(good, "nl.add is the right op");
    push_tool(s, "c5", "propose", a);
    free(a);
    /* restructure: wider tiles, fewer and larger DMAs */
    a = args_source(wide, "TILE_F 2048: fewer, larger DMAs");
    push_tool(s, "c6", "propose", a);
    free(a);
    push_tool(s, "c7", "finish", "{\"reason\":\"done\"}");

    char *cmd = kf_asprintf("cd %s && KFORGE_LLM_URL=%s KFORGE_LLM_MODEL=scripted KFORGE_LLM_RETRIES=0 %s tune %s "
                            "--entry add --reference kernels/add.py --ref-entry add_ref --input a=shape:130x3000:fp32 "
                            "--input b=shape:130x3000:fp32 --planner llm --iterations 4 --seeds 2 --jobs 1 "
                            "--output-dir %s/out 2>&1",
                            r, kf_test_llm_url(s), k, start, dir);
    int rc = kf_test_sh(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_eq(kf_test_llm_requests(s), 8, "%s", out);

    /* the model saw each problem as a tool answer */
    char *req = kf_test_llm_request(s, 2);
    cr_assert_not_null(strstr(req, "\"correct\\\":false"), "the wrong candidate's verdict: %.2000s", req);
    free(req);
    req = kf_test_llm_request(s, 3);
    cr_assert_not_null(strstr(req, "numpy_on_inputs"), "the hack is shown to the model");
    free(req);
    req = kf_test_llm_request(s, 4);
    cr_assert_not_null(strstr(req, "unknown tool 'shell'"), "%.500s", strstr(req, "shell"));
    free(req);
    req = kf_test_llm_request(s, 5);
    cr_assert_not_null(strstr(req, "'source' is required"), "%s", "schema error shown");
    free(req);
    req = kf_test_llm_request(s, 1);
    cr_assert_not_null(strstr(req, "sections"), "the docs answer: %.300s", req);
    free(req);

    char *p = kf_asprintf("%s/out/result.json", dir);
    cJSON *res = read_json(p);
    const cJSON *llm = get(res, "llm");
    cr_assert(cJSON_IsTrue(get(res, "correct")));
    cr_assert_str_eq(get(llm, "stop")->valuestring, "finished");
    cr_assert_str_eq(get(llm, "mode")->valuestring, "restructure");
    cr_assert_not(cJSON_IsTrue(get(get(llm, "start"), "correct")), "the start did not compile");
    const cJSON *hist = get(llm, "history");
    cr_assert_eq(cJSON_GetArraySize(hist), 5, "start + 4 proposals");
    cr_assert_not(cJSON_IsTrue(get(cJSON_GetArrayItem(hist, 1), "correct")), "wrong numbers rejected");
    cr_assert(cJSON_IsTrue(get(cJSON_GetArrayItem(hist, 1), "compiled")));
    /* the hack is caught by the static check and recorded on its iteration */
    const cJSON *hk = get(cJSON_GetArrayItem(hist, 2), "hack");
    cr_assert_not_null(hk, "the numpy hack is recorded");
    cr_assert_str_eq(get(hk, "rule")->valuestring, "numpy_on_inputs");
    cr_assert_not(cJSON_IsTrue(get(cJSON_GetArrayItem(hist, 2), "correct")));
    cr_assert(cJSON_IsTrue(get(cJSON_GetArrayItem(hist, 3), "accepted")));
    cr_assert(cJSON_IsTrue(get(cJSON_GetArrayItem(hist, 4), "accepted")), "the restructure is faster");
    cr_assert_lt(get(cJSON_GetArrayItem(hist, 4), "latency_ns")->valuedouble,
                 get(cJSON_GetArrayItem(hist, 3), "latency_ns")->valuedouble);
    cr_assert_eq(get(get(llm, "llm"), "prompt_tokens")->valueint, 8 * 900);
    /* then the guided planner tuned TILE_F of the model's kernel */
    cr_assert_not_null(get(get(get(res, "best"), "params"), "TILE_F"));
    cr_assert_leq(get(get(res, "best"), "latency_ns")->valuedouble,
                  get(cJSON_GetArrayItem(hist, 4), "latency_ns")->valuedouble);
    free(p);

    p = kf_asprintf("%s/out/transcript.jsonl", dir);
    cr_assert_eq(count_lines(p, NULL), 8, "one record per model turn");
    char *tr = kf_test_read_file(p);
    cr_assert_not_null(strstr(tr, "\"role\":\"system\""));
    free(tr);
    char *it = kf_asprintf("%s/out/iterations.jsonl", dir);
    cr_assert_eq(count_lines(it, "\"phase\":\"llm\""), 5);
    free(it);

    /* replay: the same turns with no model, to the same verdicts */
    free(out);
    free(cmd);
    cmd = kf_asprintf("cd %s && %s tune %s --entry add --reference kernels/add.py --ref-entry add_ref "
                      "--input a=shape:130x3000:fp32 --input b=shape:130x3000:fp32 --planner llm --iterations 4 "
                      "--seeds 2 --jobs 1 --llm-replay %s --output-dir %s/replay 2>&1",
                      r, k, start, p, dir);
    rc = kf_test_sh(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_eq(kf_test_llm_requests(s), 8, "no request in a replay");
    char *p2 = kf_asprintf("%s/replay/result.json", dir);
    cJSON *res2 = read_json(p2);
    const cJSON *h2 = get(get(res2, "llm"), "history");
    cr_assert_eq(cJSON_GetArraySize(h2), 5);
    for (int i = 0; i < 5; i++) {
        cr_assert(cJSON_Compare(get(cJSON_GetArrayItem(hist, i), "correct"), get(cJSON_GetArrayItem(h2, i), "correct"),
                                true));
        const cJSON *l1 = get(cJSON_GetArrayItem(hist, i), "latency_ns"), *l2 = get(cJSON_GetArrayItem(h2, i), "latency_ns");
        cr_assert((!l1 && !l2) || cJSON_Compare(l1, l2, true), "iteration %d's latency: %g then %g", i,
                  l1 ? l1->valuedouble : -1, l2 ? l2->valuedouble : -1);
    }
    cr_assert_str_eq(get(get(res2, "llm"), "stop")->valuestring, "finished");
    cJSON_Delete(res2);
    cJSON_Delete(res);
    free(p2);
    free(p);

    kf_test_llm_stop(s);
    free(out);
    free(cmd);
    free(start);
    free(broken);
    free(wrong);
    free(hack);
    free(wide0);
    free(wide);
    free(good);
    free(add_path);
    free(dir);
    free(k);
    free(r);
}

Test(llm_plan, an_endpoint_that_is_down_ends_the_run_with_the_best_so_far)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL, *dir = kf_test_tmpdir("llmdown");
    char *add_path = kf_asprintf("%s/kernels/add.py", r);
    char *good = kf_test_read_file(add_path);
    char *broken = replace(good, "op=nl.add)", "op=nl.addd)");
    char *start = kf_asprintf("%s/broken.py", dir);
    int port = kf_test_free_port();

    kf_test_write_file(start, broken);
    /* a failing kernel and no model: a clear failure, exit 1 */
    char *cmd = kf_asprintf("cd %s && KFORGE_LLM_URL=http://127.0.0.1:%d/v1 KFORGE_LLM_MODEL=m KFORGE_LLM_RETRIES=1 "
                            "%s tune %s --entry add --reference kernels/add.py --ref-entry add_ref "
                            "--input a=shape:130x300:fp32 --input b=shape:130x300:fp32 --planner llm --jobs 1 "
                            "--output-dir %s/a 2>&1",
                            r, port, k, start, dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 1, "%s", out);
    char *p = kf_asprintf("%s/a/result.json", dir);
    cJSON *res = read_json(p);
    cr_assert_str_eq(get(get(res, "llm"), "stop")->valuestring, "llm_unreachable");
    cr_assert_not(cJSON_IsTrue(get(res, "correct")));
    cJSON_Delete(res);
    free(p);
    free(out);
    free(cmd);

    /* a correct kernel and no model: the run goes on to the guided planner */
    cmd = kf_asprintf("cd %s && KFORGE_LLM_URL=http://127.0.0.1:%d/v1 KFORGE_LLM_MODEL=m KFORGE_LLM_RETRIES=0 "
                      "%s tune kernels/add.py --entry add --reference kernels/add.py --ref-entry add_ref "
                      "--input a=shape:130x300:fp32 --input b=shape:130x300:fp32 --planner llm --iterations 2 "
                      "--jobs 1 --output-dir %s/b 2>&1",
                      r, port, k, dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 0, "%s", out);
    p = kf_asprintf("%s/b/result.json", dir);
    res = read_json(p);
    cr_assert(cJSON_IsTrue(get(res, "correct")));
    cr_assert_str_eq(get(get(res, "llm"), "stop")->valuestring, "llm_unreachable");
    cr_assert_not_null(get(res, "best"));
    cJSON_Delete(res);
    free(p);
    free(out);
    free(cmd);
    free(start);
    free(broken);
    free(good);
    free(add_path);
    free(dir);
    free(k);
    free(r);
}

Test(llm_plan, the_token_budget_ends_the_models_part)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL, *dir = kf_test_tmpdir("llmbudget");
    char *add_path = kf_asprintf("%s/kernels/add.py", r);
    char *good = kf_test_read_file(add_path);
    char *broken = replace(good, "op=nl.add)", "op=nl.addd)");
    char *start = kf_asprintf("%s/broken.py", dir);
    kf_test_llm *s = kf_test_llm_start();
    char *a = args_source(good, "the right op");

    kf_test_write_file(start, broken);
    push_tool(s, "c1", "propose", a);   /* the first prompt is about 2300 tokens (tools, reference, source); the server counts 900 + 300: 1200 used, and the second prompt (about 3000) no longer fits in 4000 */
    push_tool(s, "c2", "finish", "{}");
    char *cmd = kf_asprintf("cd %s && KFORGE_LLM_URL=%s KFORGE_LLM_MODEL=m %s tune %s --entry add "
                            "--reference kernels/add.py --ref-entry add_ref --input a=shape:130x300:fp32 "
                            "--input b=shape:130x300:fp32 --planner llm --llm-tokens 4000 --iterations 2 --jobs 1 "
                            "--output-dir %s/o 2>&1",
                            r, kf_test_llm_url(s), k, start, dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 0, "%s", out);
    cr_assert_eq(kf_test_llm_requests(s), 1, "the second call is refused before any request");
    char *p = kf_asprintf("%s/o/result.json", dir);
    cJSON *res = read_json(p);
    cr_assert_str_eq(get(get(res, "llm"), "stop")->valuestring, "llm_budget");
    cr_assert(cJSON_IsTrue(get(res, "correct")), "the repair made before the budget ran out is kept");
    cr_assert_eq(get(get(get(res, "llm"), "llm"), "budget")->valueint, 4000);
    cJSON_Delete(res);
    kf_test_llm_stop(s);
    free(p);
    free(cmd);
    free(out);
    free(a);
    free(start);
    free(broken);
    free(good);
    free(add_path);
    free(dir);
    free(k);
    free(r);
}

Test(llm_plan, nonsense_replies_are_answered_then_the_run_ends)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL, *dir = kf_test_tmpdir("llmnonsense");
    kf_test_llm *s = kf_test_llm_start();
    char *c1 = kf_test_llm_content("I think the kernel is fine.", 10, 10);

    /* correct start: restructure mode; a reply that is not JSON (asked again, told why), then
     * plain text twice: three unusable turns in a row end the model's part */
    kf_test_llm_push(s, 200, NULL, 0, "{\"choices\": [");
    for (int i = 0; i < 2; i++)
        kf_test_llm_push(s, 200, NULL, 0, c1);
    char *cmd = kf_asprintf("cd %s && KFORGE_LLM_URL=%s KFORGE_LLM_MODEL=m %s tune kernels/add.py --entry add "
                            "--reference kernels/add.py --ref-entry add_ref --input a=shape:130x300:fp32 "
                            "--input b=shape:130x300:fp32 --planner llm --iterations 2 --jobs 1 --output-dir %s/o 2>&1",
                            r, kf_test_llm_url(s), k, dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 0, "%s", out);
    cr_assert_eq(kf_test_llm_requests(s), 3);
    char *req = kf_test_llm_request(s, 1);
    cr_assert_not_null(strstr(req, "could not be used (bad_reply)"), "the model is told: %.300s", req);
    free(req);
    req = kf_test_llm_request(s, 2);
    cr_assert_not_null(strstr(req, "Reply with a tool call"), "%.300s", req);
    free(req);
    char *p = kf_asprintf("%s/o/result.json", dir);
    cJSON *res = read_json(p);
    cr_assert_str_eq(get(get(res, "llm"), "stop")->valuestring, "llm_no_tool_calls");
    cr_assert(cJSON_IsTrue(get(res, "correct")), "the starting kernel stays the best and is tuned");
    cJSON_Delete(res);
    char *it = kf_asprintf("%s/o/iterations.jsonl", dir);
    cr_assert_eq(count_lines(it, "\"action\":\"llm_error\""), 1, "the bad reply is a recorded iteration");
    free(it);
    kf_test_llm_stop(s);
    free(p);
    free(cmd);
    free(out);
    free(c1);
    free(dir);
    free(k);
    free(r);
}
