/*
 * fuzz_llm_args — a tool call's arguments as a language model sends them
 * (ka_llm_args_parse): the text of tool_calls[].function.arguments, parsed
 * strictly and checked against a tool's JSON Schema (ka_schema_check).  The
 * first byte picks the schema: one of the LLM planner's own tools
 * (ka_llm_plan_tools: run, profile, validate, docs, best, propose, finish),
 * a kernel problem with nested arrays, enums and bounds like kforge mcp's
 * run/profile, a job-id pattern, or none; the rest is the text.  The same bytes are also parsed as a whole reply body
 * (ka_llm_reply_parse), the other untrusted text the LLM client reads.
 *
 * Promises checked: no crash; a refusal says why, in UTF-8, and leaves no
 * tree; accepted arguments are an object that satisfies the schema, print
 * as strict JSON that parses back to the same tree and is accepted again;
 * the same input gives the same verdict twice; an accepted reply has at
 * most KA_LLM_MAX_CALLS calls, each with an id, a name that is empty or
 * [A-Za-z0-9_-]{1,64}, and arguments, and an assistant message holding
 * exactly those calls; a refused reply leaves nothing allocated behind.
 */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "ka_llm.h"
#include "ka_plan_llm.h"
#include "ka_schema.h"
#include "kf_json.h"

/* Schemas besides the planner's tools: deeper nesting, enums, a pattern. */
static const char *const extra[] = {
    ("{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
     "\"op\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":63},"
     "\"shapes\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":16,\"items\":{\"type\":\"array\",\"minItems\":1,"
     "\"maxItems\":8,\"items\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":2147483648}}},"
     "\"dtype\":{\"type\":\"string\",\"enum\":[\"bf16\",\"fp32\",\"fp16\"]},"
     "\"inputs\":{\"type\":\"array\",\"maxItems\":16,\"items\":{\"type\":\"object\",\"required\":[\"name\",\"shape\"],"
     "\"additionalProperties\":false,\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":63},"
     "\"shape\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":1}},"
     "\"std\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1000000}}}},"
     "\"kwargs\":{\"type\":\"object\"},\"validate\":{\"type\":\"boolean\"}}}"),
    ("{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\",\"maxLength\":200},"
     "\"job\":{\"type\":\"string\",\"pattern\":\"^[0-9a-fA-F-]{36}$\",\"minLength\":36,\"maxLength\":36}}}"),
};
#define N_EXTRA (sizeof(extra) / sizeof(extra[0]))
enum { MAX_SCHEMAS = 16 };

static cJSON *tools, *extras[N_EXTRA];
static const cJSON *schemas[MAX_SCHEMAS];
static int n_schemas;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const cJSON *t;

    (void)argc, (void)argv;
    tools = ka_llm_plan_tools();
    cJSON_ArrayForEach(t, tools)
    {
        if (n_schemas < MAX_SCHEMAS)
            schemas[n_schemas++] =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "parameters");
    }
    for (size_t i = 0; i < N_EXTRA; i++) {
        if (kf_json_parse(extra[i], strlen(extra[i]), 16, &extras[i], NULL) != KF_OK)
            abort();
        if (n_schemas < MAX_SCHEMAS)
            schemas[n_schemas++] = extras[i];
    }
    return 0;
}

static void check_args(const char *text, size_t len, const cJSON *sch)
{
    cJSON *out = NULL, *out2 = NULL, *back = NULL;
    kf_err e = KF_ERR_INIT, e2 = KF_ERR_INIT;
    kf_code rc = ka_llm_args_parse(text, len, sch, &out, &e);
    kf_code rc2 = ka_llm_args_parse(text, len, sch, &out2, &e2);
    char msg[400];

    FUZZ_CHECK(rc == rc2, "two parses disagree: %d then %d", (int)rc, (int)rc2);
    if (rc != KF_OK) {
        FUZZ_CHECK(out == NULL, "a refusal left a tree");
        FUZZ_CHECK(e.msg[0] != '\0', "refused without saying why");
        FUZZ_CHECK(kf_utf8_valid(e.msg, strlen(e.msg), NULL), "refusal not UTF-8: %s", e.msg);
        FUZZ_CHECK(strcmp(e.msg, e2.msg) == 0, "two refusals differ: %s / %s", e.msg, e2.msg);
        return;
    }
    FUZZ_CHECK(cJSON_IsObject(out), "accepted arguments that are not an object");
    FUZZ_CHECK(!sch || ka_schema_check(sch, out, "", msg, sizeof(msg)), "accepted what the schema refuses: %s", msg);
    FUZZ_CHECK(cJSON_Compare(out, out2, true), "two parses gave different trees");
    char *printed = kf_json_print(out);
    kf_code rc3 = ka_llm_args_parse(printed, strlen(printed), sch, &back, &e);
    FUZZ_CHECK(rc3 == KF_OK, "its own print refused: %s (%s)", e.msg, printed);
    FUZZ_CHECK(cJSON_Compare(out, back, true), "print and parse changed the arguments: %s", printed);
    free(printed);
    cJSON_Delete(back);
    cJSON_Delete(out);
    cJSON_Delete(out2);
}

static void check_reply(const char *text, size_t len)
{
    ka_llm_reply r;
    kf_err e = KF_ERR_INIT;

    memset(&r, 0, sizeof(r));
    if (ka_llm_reply_parse(text, len, &r, &e) != KF_OK) {
        FUZZ_CHECK(e.msg[0] != '\0', "reply refused without saying why");
        FUZZ_CHECK(r.content == NULL && r.n_calls == 0 && r.message == NULL, "a refused reply left something");
        return;
    }
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(r.message, "tool_calls");
    FUZZ_CHECK(r.n_calls >= 0 && r.n_calls <= KA_LLM_MAX_CALLS, "%d calls", r.n_calls);
    FUZZ_CHECK(cJSON_GetArraySize(calls) == r.n_calls, "message holds %d calls, reply %d", cJSON_GetArraySize(calls),
               r.n_calls);
    for (int i = 0; i < r.n_calls; i++) {
        size_t n = strlen(r.calls[i].name);
        FUZZ_CHECK(r.calls[i].id[0] != '\0', "call %d has no id", i);
        FUZZ_CHECK(r.calls[i].arguments != NULL, "call %d has no arguments", i);
        FUZZ_CHECK(n <= 64 && strspn(r.calls[i].name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                      "0123456789_-") == n,
                   "call %d's name is not a tool name: %s", i, r.calls[i].name);
    }
    FUZZ_CHECK(r.prompt_tokens >= 0 && r.completion_tokens >= 0, "negative usage");
    ka_llm_reply_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const cJSON *sch;
    int pick;

    if (!tools)
        LLVMFuzzerInitialize(NULL, NULL);
    if (size == 0)
        return 0;
    pick = data[0] % (n_schemas + 1);
    sch = pick == n_schemas ? NULL : schemas[pick];
    check_args((const char *)data + 1, size - 1, sch);
    check_reply((const char *)data, size);
    return 0;
}
