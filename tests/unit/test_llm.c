/* ka_llm, the chat-completions client of the LLM planner (issue 20),
 * against the scripted OpenAI-compatible server of tests/lib/kf_test_llm
 * over real HTTP: the request it sends (model, messages, tools,
 * tool_choice, the max-tokens field, the Bearer key read from its file),
 * replies with tool calls and with plain content, 429 with Retry-After and
 * retry-after-ms honoured, 5xx retried then given up, a quota 429 and a
 * too-long Retry-After not retried, a slow reply cut by the timeout, a
 * dropped connection and a refused one, a reply that is not JSON, a 401
 * whose message echoes the key (redacted), the token budget refusing a call
 * before any request; and the untrusted parts parsed offline: tool-call
 * arguments against a schema, odd replies, Retry-After forms, backoff. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/ka_llm.h"
#include "agent/ka_plan_llm.h"
#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_json.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_llm.h"

#define KEY "sk-test-3f9a1c77b2e84d5e"

static kf_test_llm *srv;
static ka_llm cli;
static cJSON *msgs, *tools;

static void cfg_for(ka_llm_cfg *c, const char *url, const char *key_file)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->url, sizeof(c->url), "%s", url);
    snprintf(c->model, sizeof(c->model), "test-model");
    if (key_file)
        snprintf(c->key_file, sizeof(c->key_file), "%s", key_file);
    snprintf(c->max_tokens_field, sizeof(c->max_tokens_field), "max_completion_tokens");
    c->timeout_ms = 5000;
    c->connect_timeout_ms = 2000;
    c->retries = 2;
    c->backoff_ms = 10;
    c->backoff_max_ms = 50;
    c->max_completion_tokens = 1000;
}

static void setup(void)
{
    ka_llm_cfg c;
    char *dir = kf_test_tmpdir("llm"), *key = kf_asprintf("%s/key", dir);

    kf_test_write_file(key, KEY "\n");
    srv = kf_test_llm_start();
    cfg_for(&c, kf_test_llm_url(srv), key);
    ka_llm_init(&cli, &c, 0);
    msgs = cJSON_CreateArray();
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", "write a kernel");
    cJSON_AddItemToArray(msgs, m);
    static const char tj[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"run\",\"description\":\"compile and run\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"source\":{\"type\":\"string\"}},"
        "\"required\":[\"source\"],\"additionalProperties\":false}}}]";
    tools = NULL;
    kf_json_parse(tj, strlen(tj), 8, &tools, NULL);
    cr_assert_not_null(tools);
    free(key);
    free(dir);
}

static void teardown(void)
{
    ka_llm_release(&cli);
    kf_test_llm_stop(srv);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
}

TestSuite(llm, .init = setup, .fini = teardown, .timeout = 60);

static void push_json(int status, const char *headers, int delay_ms, char *body)
{
    kf_test_llm_push(srv, status, headers, delay_ms, body);
    free(body);
}

Test(llm, tool_call_round_trip_sends_the_protocol_and_the_key)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;
    cJSON *req;
    char *body, *auth;

    push_json(200, NULL, 0, kf_test_llm_tool("call_7", "run", "{\"source\":\"x = 1\"}", 120, 30));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, "auto", &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.n_calls, 1);
    cr_assert_str_eq(r.calls[0].id, "call_7");
    cr_assert_str_eq(r.calls[0].name, "run");
    cr_assert_str_eq(r.calls[0].arguments, "{\"source\":\"x = 1\"}");
    cr_assert_null(r.content);
    cr_assert_str_eq(r.finish_reason, "tool_calls");
    cr_assert_eq(r.prompt_tokens, 120);
    cr_assert_eq(r.completion_tokens, 30);
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(r.http_status, 200);
    cr_assert_str_eq(r.error, "");
    cr_assert_eq(ka_llm_used(&cli), 150);
    /* the message to send back carries the call as the protocol wants it */
    const cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(r.message, "tool_calls"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(r.message, "role")->valuestring, "assistant");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r.message, "content")));
    cr_assert_str_eq(cJSON_GetObjectItem(tc, "id")->valuestring, "call_7");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(tc, "function"), "name")->valuestring, "run");

    cr_assert_eq(kf_test_llm_requests(srv), 1);
    body = kf_test_llm_request(srv, 0);
    auth = kf_test_llm_auth(srv, 0);
    cr_assert_str_eq(auth, "Bearer " KEY);
    cr_assert_eq(kf_json_parse(body, strlen(body), 32, &req, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(cJSON_GetObjectItem(req, "model")->valuestring, "test-model");
    cr_assert_str_eq(cJSON_GetObjectItem(req, "tool_choice")->valuestring, "auto");
    cr_assert_eq(cJSON_GetObjectItem(req, "max_completion_tokens")->valueint, 1000);
    cr_assert(cJSON_Compare(cJSON_GetObjectItem(req, "messages"), msgs, true));
    cr_assert(cJSON_Compare(cJSON_GetObjectItem(req, "tools"), tools, true));
    cr_assert_null(strstr(r.raw, KEY));
    cJSON_Delete(req);
    free(body);
    free(auth);
    ka_llm_reply_release(&r);
}

Test(llm, plain_content_and_no_tools_no_tool_choice)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;
    char *body;

    cli.cfg.key_file[0] = '\0';
    snprintf(cli.cfg.max_tokens_field, sizeof(cli.cfg.max_tokens_field), "max_tokens");
    push_json(200, NULL, 0, kf_test_llm_content("I would tile the free axis by 512.", 10, 9));
    cr_assert_eq(ka_llm_chat(&cli, msgs, NULL, "auto", &r, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(r.content, "I would tile the free axis by 512.");
    cr_assert_eq(r.n_calls, 0);
    cr_assert_str_eq(r.finish_reason, "stop");
    cr_assert_null(cJSON_GetObjectItem(r.message, "tool_calls"));
    body = kf_test_llm_request(srv, 0);
    cr_assert_null(strstr(body, "tool_choice"), "no tools, no tool_choice: %s", body);
    cr_assert_null(strstr(body, "\"tools\""));
    cr_assert_not_null(strstr(body, "\"max_tokens\":1000"), "%s", body);
    cr_assert_null(kf_test_llm_auth(srv, 0), "no key file, no Authorization");
    free(body);
    ka_llm_reply_release(&r);
}

Test(llm, rate_limit_waits_what_retry_after_says)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;

    kf_test_llm_push(srv, 429, "Retry-After: 1", 0, "{\"error\":{\"message\":\"slow down\",\"type\":\"rate_limit\"}}");
    push_json(200, NULL, 0, kf_test_llm_content("ok", 1, 1));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.attempts, 2);
    cr_assert_geq(r.seconds, 0.95, "Retry-After: 1 honoured (backoff alone is 10 ms): %.3f s", r.seconds);
    cr_assert_lt(r.seconds, 5.0);
    cr_assert_eq(kf_test_llm_requests(srv), 2);
    ka_llm_reply_release(&r);

    kf_test_llm_push(srv, 429, "retry-after-ms: 400\nRetry-After: 30", 0, "{}");
    push_json(200, NULL, 0, kf_test_llm_content("ok", 1, 1));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_OK, "%s", e.msg);
    cr_assert_geq(r.seconds, 0.38, "retry-after-ms wins over Retry-After: %.3f s", r.seconds);
    cr_assert_lt(r.seconds, 3.0);
    ka_llm_reply_release(&r);
}

Test(llm, server_errors_are_retried_then_given_up)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;

    kf_test_llm_push(srv, 503, NULL, 0, "{\"error\":{\"message\":\"overloaded\"}}");
    push_json(200, NULL, 0, kf_test_llm_content("ok", 1, 1));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.attempts, 2);
    ka_llm_reply_release(&r);

    for (int i = 0; i < 3; i++)
        kf_test_llm_push(srv, 500, NULL, 0, "{\"error\":{\"message\":\"model crashed\"}}");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_UNAVAILABLE);
    cr_assert_str_eq(r.error, "server_error");
    cr_assert_eq(r.attempts, 3, "the first attempt and 2 retries");
    cr_assert_eq(r.http_status, 500);
    cr_assert_not_null(strstr(e.msg, "HTTP 500: model crashed"), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "after 3 attempts"), "%s", e.msg);
    cr_assert_eq(kf_test_llm_requests(srv), 5);
    cr_assert_eq(ka_llm_used(&cli), 2, "failed calls use no tokens");
    ka_llm_reply_release(&r);
}

Test(llm, quota_and_long_retry_after_are_not_retried)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;

    kf_test_llm_push(srv, 429, NULL, 0,
                     "{\"error\":{\"message\":\"You exceeded your current quota\",\"code\":\"insufficient_quota\"}}");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_UNAVAILABLE);
    cr_assert_str_eq(r.error, "quota");
    cr_assert_eq(r.attempts, 1);
    ka_llm_reply_release(&r);

    kf_test_llm_push(srv, 429, "Retry-After: 3600", 0, "{\"error\":{\"message\":\"come back later\"}}");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_UNAVAILABLE);
    cr_assert_str_eq(r.error, "quota");
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(kf_test_llm_requests(srv), 2);
    ka_llm_reply_release(&r);
}

Test(llm, a_slow_reply_is_cut_by_the_timeout)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;
    long long t0 = kf_test_now_ms();

    cli.cfg.timeout_ms = 300;
    cli.cfg.retries = 0;
    push_json(200, NULL, 1500, kf_test_llm_content("too late", 1, 1));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_TIMEOUT);
    cr_assert_str_eq(r.error, "timeout");
    cr_assert_lt(kf_test_now_ms() - t0, 1200, "gave up at the timeout, not the reply");
    cr_assert_eq(r.http_status, 0);
    ka_llm_reply_release(&r);
}

Test(llm, a_dropped_connection_is_retried_a_refused_one_given_up)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;
    ka_llm other;
    ka_llm_cfg c;
    char *url = kf_asprintf("http://127.0.0.1:%d/v1", kf_test_free_port());

    kf_test_llm_push(srv, KF_TEST_LLM_DROP, NULL, 0, NULL);
    push_json(200, NULL, 0, kf_test_llm_content("ok", 1, 1));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.attempts, 2);
    ka_llm_reply_release(&r);

    cfg_for(&c, url, NULL);
    ka_llm_init(&other, &c, 0);
    cr_assert_eq(ka_llm_chat(&other, msgs, tools, NULL, &r, &e), KF_UNAVAILABLE);
    cr_assert_str_eq(r.error, "unreachable");
    cr_assert_eq(r.attempts, 3);
    cr_assert_not_null(strstr(e.msg, "cannot reach"), "%s", e.msg);
    ka_llm_reply_release(&r);
    ka_llm_release(&other);
    free(url);
}

Test(llm, a_reply_that_is_not_json_is_a_bad_reply_not_retried)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;

    kf_test_llm_push(srv, 200, NULL, 0, "{\"choices\": [{\"message\": {\"content\": \"unterminated");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_INVALID);
    cr_assert_str_eq(r.error, "bad_reply");
    cr_assert_eq(r.attempts, 1);
    cr_assert_not_null(r.raw, "the raw body is kept for the transcript");
    cr_assert_not_null(strstr(e.msg, "not JSON"), "%s", e.msg);
    ka_llm_reply_release(&r);

    kf_test_llm_push(srv, 200, NULL, 0, "{\"object\":\"list\",\"data\":[]}");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_INVALID);
    cr_assert_not_null(strstr(e.msg, "not a chat completion"), "%s", e.msg);
    ka_llm_reply_release(&r);
}

Test(llm, a_refusal_echoing_the_key_is_redacted)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;

    kf_test_llm_push(srv, 401, NULL, 0, "{\"error\":{\"message\":\"Incorrect API key provided: " KEY "\"}}");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_UNAUTHORIZED);
    cr_assert_str_eq(r.error, "refused");
    cr_assert_eq(r.attempts, 1);
    cr_assert_null(strstr(e.msg, KEY), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "Incorrect API key provided: ****"), "%s", e.msg);
    cr_assert_null(strstr(r.raw, KEY), "%s", r.raw);
    ka_llm_reply_release(&r);
}

Test(llm, the_token_budget_is_enforced_before_each_call)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;
    char *body;

    cli.budget_tokens = 400;
    push_json(200, NULL, 0, kf_test_llm_content("first", 250, 100));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_OK, "%s", e.msg);
    body = kf_test_llm_request(srv, 0);
    /* the reply length asked for is what the budget leaves (< 1000) */
    cr_assert_null(strstr(body, "\"max_completion_tokens\":1000"), "%s", body);
    cr_assert_not_null(strstr(body, "\"max_completion_tokens\":3"), "%s", body);
    free(body);
    ka_llm_reply_release(&r);
    cr_assert_eq(ka_llm_used(&cli), 350);
    /* 50 tokens left: the prompt alone is larger, so no request is made */
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_UNPROCESSABLE);
    cr_assert_str_eq(r.error, "budget");
    cr_assert_eq(r.attempts, 0);
    cr_assert_eq(kf_test_llm_requests(srv), 1);
    cr_assert_not_null(strstr(e.msg, "budget is spent: 350 of 400"), "%s", e.msg);
    ka_llm_reply_release(&r);
}

Test(llm, an_unreadable_key_file_is_a_config_error)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;

    snprintf(cli.cfg.key_file, sizeof(cli.cfg.key_file), "/nonexistent/kforge-key");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_CONFIG);
    cr_assert_str_eq(r.error, "config");
    cr_assert_not_null(strstr(e.msg, "KFORGE_LLM_API_KEY_FILE"), "%s", e.msg);
    cr_assert_eq(kf_test_llm_requests(srv), 0);
    ka_llm_reply_release(&r);
}

/* ---- offline: the untrusted parts ----------------------------------------------------- */

static cJSON *schema(void)
{
    static const char s[] = "{\"type\":\"object\",\"required\":[\"source\"],\"additionalProperties\":false,"
                            "\"properties\":{\"source\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":100},"
                            "\"seeds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":8}}}";
    cJSON *j = NULL;
    cr_assert_eq(kf_json_parse(s, strlen(s), 8, &j, NULL), KF_OK);
    return j;
}

static kf_code args(const char *text, const cJSON *sch, char *msg, size_t n)
{
    cJSON *out = NULL;
    kf_err e = KF_ERR_INIT;
    kf_code rc = ka_llm_args_parse(text, strlen(text), sch, &out, &e);

    cr_assert(rc == KF_OK ? out != NULL : out == NULL);
    snprintf(msg, n, "%s", e.msg);
    cJSON_Delete(out);
    return rc;
}

Test(llm_offline, tool_arguments_are_checked_against_the_schema)
{
    cJSON *s = schema();
    char m[512];

    cr_assert_eq(args("{\"source\":\"def k(): pass\",\"seeds\":3}", s, m, sizeof(m)), KF_OK, "%s", m);
    cr_assert_eq(args("{\"source\":\"x\"", s, m, sizeof(m)), KF_INVALID);
    cr_assert_not_null(strstr(m, "not valid JSON"), "%s", m);
    cr_assert_eq(args("[\"source\"]", s, m, sizeof(m)), KF_INVALID);
    cr_assert_not_null(strstr(m, "must be a JSON object"), "%s", m);
    cr_assert_eq(args("{\"seeds\":3}", s, m, sizeof(m)), KF_INVALID);
    cr_assert_not_null(strstr(m, "'source' is required"), "%s", m);
    cr_assert_eq(args("{\"source\":\"x\",\"seeds\":99}", s, m, sizeof(m)), KF_INVALID);
    cr_assert_not_null(strstr(m, "seeds: must be between 1 and 8"), "%s", m);
    cr_assert_eq(args("{\"source\":\"x\",\"shell\":\"rm -rf /\"}", s, m, sizeof(m)), KF_INVALID);
    cr_assert_not_null(strstr(m, "unknown property 'shell'"), "%s", m);
    cr_assert_eq(args("{\"source\":\"x\",\"source\":\"y\"}", s, m, sizeof(m)), KF_INVALID, "duplicate members");
    cr_assert_eq(args("{\"source\":\"x\"} trailing", s, m, sizeof(m)), KF_INVALID);
    cr_assert_eq(args("{\"source\":\"\\u0000\"}", s, m, sizeof(m)), KF_INVALID);
    cr_assert_eq(args("{\"source\":\"x\",\"seeds\":1e400}", s, m, sizeof(m)), KF_INVALID, "infinity");
    cr_assert_not_null(strstr(m, "too large"), "%s", m);
    cr_assert_eq(args("  ", NULL, m, sizeof(m)), KF_OK, "no arguments: {}");
    cr_assert_eq(args("  ", s, m, sizeof(m)), KF_INVALID, "{} lacks the required source");
    /* nesting beyond the bound */
    char deep[200] = "{\"a\":";
    size_t dl = strlen(deep);
    memset(deep + dl, '[', 40);
    deep[dl + 40] = '\0';
    cr_assert_eq(args(deep, NULL, m, sizeof(m)), KF_INVALID);
    /* size bound */
    size_t big = KA_LLM_MAX_ARGS + 10;
    char *huge = kf_malloc(big + 1);
    memset(huge, ' ', big);
    huge[0] = '{', huge[big - 1] = '}', huge[big] = '\0';
    cr_assert_eq(args(huge, NULL, m, sizeof(m)), KF_INVALID);
    cr_assert_not_null(strstr(m, "at most"), "%s", m);
    free(huge);
    cJSON_Delete(s);
}

Test(llm_offline, odd_replies)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;
    kf_buf b = KF_BUF_INIT;

    memset(&r, 0, sizeof(r));
    /* arguments sent as an object (some servers do), a bad tool name, no id, no usage */
    const char *odd = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
                      "{\"type\":\"function\",\"function\":{\"name\":\"run\",\"arguments\":{\"source\":\"s\"}}},"
                      "{\"id\":\"c2\",\"function\":{\"name\":\"rm -rf\",\"arguments\":\"{}\"}}]},"
                      "\"finish_reason\":\"tool_calls\"}]}";
    cr_assert_eq(ka_llm_reply_parse(odd, strlen(odd), &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.n_calls, 2);
    cr_assert_str_eq(r.calls[0].id, "call_0");
    cr_assert_str_eq(r.calls[0].arguments, "{\"source\":\"s\"}");
    cr_assert_str_eq(r.calls[1].name, "", "a name outside [a-zA-Z0-9_-]{1,64} is no tool");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r.message,
                                                                                                      "tool_calls"),
                                                                                  1),
                                                               "function"),
                                         "name")
                         ->valuestring,
                     "invalid_tool_name");
    cr_assert(r.usage_estimated);
    ka_llm_reply_release(&r);

    /* more calls than taken: the first KA_LLM_MAX_CALLS, and the message holds only those */
    kf_buf_adds(&b, "{\"choices\":[{\"message\":{\"content\":\"\",\"tool_calls\":[");
    for (int i = 0; i < KA_LLM_MAX_CALLS + 5; i++)
        kf_buf_addf(&b, "%s{\"id\":\"c%d\",\"function\":{\"name\":\"docs\",\"arguments\":\"{}\"}}", i ? "," : "", i);
    kf_buf_adds(&b, "]}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}");
    cr_assert_eq(ka_llm_reply_parse(b.data, b.len, &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.n_calls, KA_LLM_MAX_CALLS);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.message, "tool_calls")), KA_LLM_MAX_CALLS);
    cr_assert_eq(r.prompt_tokens, 5);
    cr_assert_not(r.usage_estimated);
    ka_llm_reply_release(&r);
    kf_buf_release(&b);

    const char *bad[] = {
        "{\"choices\":[]}",
        "{\"choices\":[{\"message\":{\"content\":42}}]}",
        "{\"choices\":[{\"message\":{\"tool_calls\":{}}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"tool_calls\":[{\"id\":\"x\"}]}}]}",
        "\xff\xfe",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&r, 0, sizeof(r));
        cr_assert_eq(ka_llm_reply_parse(bad[i], strlen(bad[i]), &r, &e), KF_INVALID, "%s", bad[i]);
        cr_assert_null(r.content, "nothing is left behind by a refused reply");
        cr_assert_eq(r.n_calls, 0);
        cr_assert_null(r.message);
    }
}

Test(llm_offline, retry_after_forms_and_backoff)
{
    ka_llm c;
    ka_llm_cfg cfg;
    long long now = 1764700000; /* 2025-12-02 18:26:40 UTC */

    cr_assert_eq(ka_llm_retry_after_ms("2", now), 2000);
    cr_assert_eq(ka_llm_retry_after_ms(" 0.5 ", now), 500);
    cr_assert_eq(ka_llm_retry_after_ms("Tue, 02 Dec 2025 18:26:45 GMT", now), 5000);
    cr_assert_eq(ka_llm_retry_after_ms("Tue, 02 Dec 2025 18:00:00 GMT", now), 0, "a date past is now");
    cr_assert_eq(ka_llm_retry_after_ms("soon", now), -1);
    cr_assert_eq(ka_llm_retry_after_ms("-3", now), -1);
    cr_assert_eq(ka_llm_retry_after_ms("5s", now), -1);

    cfg_for(&cfg, "http://127.0.0.1:1/v1", NULL);
    cfg.backoff_ms = 100;
    cfg.backoff_max_ms = 1000;
    ka_llm_init(&c, &cfg, 0);
    bool varied = false;
    unsigned first = ka_llm_backoff_ms(&c, 0);
    for (int i = 0; i < 200; i++) {
        int a = i % 6;
        unsigned w = ka_llm_backoff_ms(&c, a), full = 100u << a;
        if (full > 1000)
            full = 1000;
        cr_assert(w >= full / 2 && w < full, "attempt %d: %u ms not in [%u, %u)", a, w, full / 2, full);
        varied = varied || (a == 0 && w != first);
    }
    cr_assert(varied, "jitter varies the wait");
    ka_llm_release(&c);
}

Test(llm_offline, configuration_from_the_environment)
{
    ka_llm_cfg c;
    kf_err e = KF_ERR_INIT;

    unsetenv("KFORGE_LLM_URL");
    unsetenv("KFORGE_LLM_MODEL");
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    cr_assert_eq(ka_llm_cfg_from_env(&c, &e), KF_CONFIG);
    cr_assert_not_null(strstr(e.msg, "KFORGE_LLM_URL"), "%s", e.msg);

    setenv("KFORGE_LLM_URL", "ftp://models.example/v1", 1);
    setenv("KFORGE_LLM_MODEL", "qwen2.5-coder", 1);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    cr_assert_eq(ka_llm_cfg_from_env(&c, &e), KF_CONFIG);

    setenv("KFORGE_LLM_URL", "http://127.0.0.1:11434/v1", 1);
    setenv("KFORGE_LLM_TIMEOUT_S", "30", 1);
    setenv("KFORGE_LLM_RETRIES", "1", 1);
    setenv("KFORGE_LLM_MAX_TOKENS_FIELD", "max_tokens", 1);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    cr_assert_eq(ka_llm_cfg_from_env(&c, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(c.url, "http://127.0.0.1:11434/v1");
    cr_assert_str_eq(c.model, "qwen2.5-coder");
    cr_assert_str_eq(c.max_tokens_field, "max_tokens");
    cr_assert_eq(c.timeout_ms, 30000);
    cr_assert_eq(c.retries, 1);

    setenv("KFORGE_LLM_MAX_TOKENS_FIELD", "max_output", 1);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    cr_assert_eq(ka_llm_cfg_from_env(&c, &e), KF_CONFIG);
    setenv("KFORGE_LLM_RETRIES", "99", 1);
    cr_assert_eq(kf_config_load(&e), KF_CONFIG, "retries are bounded");
}

/* cfg.key_fd (the worker's job process): each attempt runs in a child that
 * reads the key from the descriptor; the replies, their redaction and the
 * retries are those of the in-process client. */
Test(llm, a_key_handed_as_a_descriptor_goes_through_a_child_per_attempt)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;
    char *auth, *dir = kf_test_tmpdir("llmfd"), *empty = kf_asprintf("%s/empty", dir);
    int fd = open(cli.cfg.key_file, O_RDONLY | O_CLOEXEC);

    cr_assert(fd > 2);
    cli.cfg.key_fd = fd;
    cli.cfg.key_file[0] = '\0';   /* the descriptor is the only way to the key */
    push_json(200, NULL, 0, kf_test_llm_tool("call_1", "run", "{\"source\":\"x = 1\"}", 10, 5));
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, "auto", &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.n_calls, 1);
    cr_assert_eq(ka_llm_used(&cli), 15);
    auth = kf_test_llm_auth(srv, 0);
    cr_assert_str_eq(auth, "Bearer " KEY);
    free(auth);
    ka_llm_reply_release(&r);

    kf_test_llm_push(srv, 503, NULL, 0, "{\"error\":{\"message\":\"busy\"}}");
    kf_test_llm_push(srv, 401, NULL, 0, "{\"error\":{\"message\":\"Incorrect API key provided: " KEY "\"}}");
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_UNAUTHORIZED);
    cr_assert_eq(r.attempts, 2, "the 503 was retried, in a second child");
    cr_assert_str_eq(r.error, "refused");
    cr_assert_null(strstr(e.msg, KEY), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "Incorrect API key provided: ****"), "%s", e.msg);
    cr_assert_null(strstr(r.raw, KEY), "%s", r.raw);
    ka_llm_reply_release(&r);

    /* a descriptor with no key: a config error, no request */
    kf_test_write_file(empty, "\n");
    close(fd);
    fd = open(empty, O_RDONLY | O_CLOEXEC);
    cli.cfg.key_fd = fd;
    cr_assert_eq(ka_llm_chat(&cli, msgs, tools, NULL, &r, &e), KF_CONFIG);
    cr_assert_str_eq(r.error, "config");
    cr_assert_not_null(strstr(e.msg, "empty"), "%s", e.msg);
    cr_assert_eq(kf_test_llm_requests(srv), 3);
    ka_llm_reply_release(&r);
    close(fd);
    free(empty);
    free(dir);
}

/* The second shape's rule (docs/llm.md, "What is checked"). */
Test(llm_offline, the_second_shape_keeps_equal_dims_equal_and_tiles_tiles)
{
    static const long long rule[][2] = { { 1, 1 },       { 2, 1 },       { 128, 64 },    { 64, 32 },
                                         { 1000, 744 },  { 4096, 3072 }, { 8192, 6144 }, { 130, 96 },
                                         { 3000, 2248 }, { 256, 128 },   { 96, 64 },     { 3, 2 } };
    ka_problem pb, alt;

    for (size_t i = 0; i < sizeof(rule) / sizeof(rule[0]); i++)
        cr_assert_eq(ka_llm_second_dim(rule[i][0]), rule[i][1], "%lld -> %lld, not %lld", rule[i][0], rule[i][1],
                     (long long)ka_llm_second_dim(rule[i][0]));
    memset(&pb, 0, sizeof(pb));
    pb.n_inputs = 2;
    pb.inputs[0].ndim = 2;
    pb.inputs[0].shape[0] = 4096;
    pb.inputs[0].shape[1] = 8192;
    pb.inputs[1].ndim = 1;
    pb.inputs[1].shape[0] = 8192;
    ka_llm_second_shape(&pb, &alt);
    cr_assert(alt.inputs[0].shape[0] == 3072 && alt.inputs[0].shape[1] == 6144 && alt.inputs[1].shape[0] == 6144);
}
