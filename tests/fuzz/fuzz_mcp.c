/*
 * fuzz_mcp — `kforge mcp`'s message handling (cli_mcp_accept), which reads
 * whatever the MCP client (an LLM agent's host) writes on stdin: JSON-RPC
 * 2.0, one message a line.  The first byte picks whether the session starts
 * initialized (odd: a fixed initialize was answered first); the rest is
 * lines, each one message to the same session, in order.  A tools/call that
 * passes every check is not run (that would start a sandboxed evaluation
 * or an HTTP request), except docs, which only reads two files of docs/.
 *
 * Promises checked, per line:
 *  - the line gets exactly one of: no answer, an answer line, a call to run
 *    (never an answer and a call);
 *  - an answer is valid JSON text (kf_json_parse: RFC 8259, UTF-8) holding
 *    one JSON-RPC 2.0 object: jsonrpc "2.0", an id, exactly one of result
 *    and error, an error with an integer code among the five the server
 *    uses and a string message;
 *  - a line that is not one JSON value is -32700 with id null; a request
 *    (an object with jsonrpc "2.0", an id that is a string or a number and
 *    a string method) gets an answer or a call, carrying its id; a
 *    notification (no id) gets neither;
 *  - before initialize only ping and initialize get a result; initialize
 *    answers 2025-06-18 or 2025-11-25, the one asked for when it is one of
 *    them; tools/list gives every tool with an object inputSchema;
 *  - a call comes only from tools/call after initialize, for a tool that
 *    tools/list lists, with arguments that have every required member, no
 *    member the inputSchema lacks and each member of the schema's type;
 *  - a tools/call result has a text item that is a JSON object; isError
 *    results carry {"error": {"code", "message"}} and no structuredContent.
 */
#include "fuzz.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>

#include "cli/cli_mcp.h"
#include "kf_error.h"
#include "kf_json.h"

static cJSON *tools;   /* tools/list's tools, for the calls' checks */

static const char init_line[] =
    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"}}";

static cJSON *strict(const char *s, size_t n)
{
    cJSON *v = NULL;
    kf_err e = KF_ERR_INIT;

    if (kf_json_parse(s, n, CLI_MCP_MAX_DEPTH, &v, &e) != KF_OK)
        return NULL;
    return v;
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* An answer's checks (see above); the parsed answer (caller deletes). */
static cJSON *check_answer(const char *ans, const cJSON *want_id, bool id_known)
{
    cJSON *a = strict(ans, strlen(ans));
    const cJSON *id, *res, *err, *code;

    FUZZ_CHECK(a != NULL, "the answer is not valid JSON text: %s", ans);
    FUZZ_CHECK(cJSON_IsObject(a), "the answer is not an object: %s", ans);
    FUZZ_CHECK(cJSON_IsString(get(a, "jsonrpc")) && strcmp(get(a, "jsonrpc")->valuestring, "2.0") == 0,
               "no jsonrpc 2.0: %s", ans);
    id = get(a, "id");
    FUZZ_CHECK(id != NULL, "the answer has no id: %s", ans);
    if (id_known)
        FUZZ_CHECK(want_id ? cJSON_Compare(id, want_id, true) : cJSON_IsNull(id), "the answer's id is not the request's: %s",
                   ans);
    res = get(a, "result");
    err = get(a, "error");
    FUZZ_CHECK((res != NULL) != (err != NULL), "not exactly one of result and error: %s", ans);
    if (err) {
        code = get(err, "code");
        FUZZ_CHECK(cJSON_IsNumber(code), "error without a code: %s", ans);
        FUZZ_CHECK(code->valueint == -32700 || code->valueint == -32600 || code->valueint == -32601 ||
                       code->valueint == -32602 || code->valueint == -32603,
                   "error code %d: %s", code->valueint, ans);
        FUZZ_CHECK(cJSON_IsString(get(err, "message")), "error without a message: %s", ans);
    } else {
        FUZZ_CHECK(cJSON_IsObject(res), "a result that is not an object: %s", ans);
    }
    return a;
}

/* A tools/call result (isError or not). */
static void check_call_result(const cJSON *res, const char *ans)
{
    const cJSON *item = cJSON_GetArrayItem(get(res, "content"), 0), *text = get(item, "text");
    const cJSON *is_err = get(res, "isError");
    cJSON *t;

    FUZZ_CHECK(cJSON_IsBool(is_err), "a call result without isError: %s", ans);
    FUZZ_CHECK(cJSON_IsString(text), "a call result without a text item: %s", ans);
    t = strict(text->valuestring, strlen(text->valuestring));
    FUZZ_CHECK(cJSON_IsObject(t), "the text item is not a JSON object: %s", ans);
    if (cJSON_IsTrue(is_err)) {
        const cJSON *e = get(t, "error");
        FUZZ_CHECK(cJSON_IsString(get(e, "code")) && cJSON_IsString(get(e, "message")),
                   "a tool error without code and message: %s", ans);
        FUZZ_CHECK(!get(res, "structuredContent"), "a tool error with structuredContent: %s", ans);
    } else {
        FUZZ_CHECK(cJSON_Compare(get(res, "structuredContent"), t, true), "structuredContent is not its text: %s", ans);
    }
    cJSON_Delete(t);
}

static bool of_type(const cJSON *v, const char *type)
{
    if (strcmp(type, "object") == 0)
        return cJSON_IsObject(v);
    if (strcmp(type, "array") == 0)
        return cJSON_IsArray(v);
    if (strcmp(type, "string") == 0)
        return cJSON_IsString(v);
    if (strcmp(type, "integer") == 0)
        return cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble;
    if (strcmp(type, "number") == 0)
        return cJSON_IsNumber(v);
    return false;
}

/* A call handed back: its tool is listed and its arguments fit the schema's top level. */
static void check_call(const cli_mcp_call *c)
{
    const char *name = cli_mcp_call_tool(c);
    const cJSON *args = cli_mcp_call_args(c), *t = NULL, *sch, *props, *m;

    cJSON_ArrayForEach(t, tools)
        if (strcmp(get(t, "name")->valuestring, name) == 0)
            break;
    FUZZ_CHECK(t != NULL, "a call to '%s', which tools/list does not list", name);
    FUZZ_CHECK(cJSON_IsObject(args), "a call to %s whose arguments are not an object", name);
    sch = get(t, "inputSchema");
    props = get(sch, "properties");
    cJSON_ArrayForEach(m, get(sch, "required"))
        FUZZ_CHECK(get(args, m->valuestring) != NULL, "a call to %s without its required '%s'", name, m->valuestring);
    cJSON_ArrayForEach(m, args)
    {
        const cJSON *ps = get(props, m->string);
        FUZZ_CHECK(ps != NULL, "a call to %s with '%s', which its inputSchema lacks", name, m->string);
        FUZZ_CHECK(of_type(m, get(ps, "type")->valuestring), "a call to %s with '%s' not of type %s", name, m->string,
                   get(ps, "type")->valuestring);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    cli_mcp s;
    cJSON *a;
    char *ans;
    static const char list[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";

    (void)argc;
    (void)argv;
    cli_mcp_init(&s);
    free(cli_mcp_handle(&s, init_line, strlen(init_line)));
    ans = cli_mcp_handle(&s, list, strlen(list));
    a = ans ? cJSON_Parse(ans) : NULL;
    free(ans);
    tools = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(a, "result"), "tools");
    cJSON_Delete(a);
    FUZZ_CHECK(cJSON_GetArraySize(tools) > 0, "tools/list lists no tool");
    return 0;
}

/* One line to session s; *initialized follows the session's state. */
static void one_line(cli_mcp *s, const char *line, size_t n, bool *initialized)
{
    cli_mcp_call *call = NULL;
    char *ans = cli_mcp_accept(s, line, n, &call);
    cJSON *req = strict(line, n), *a = NULL;
    const cJSON *id = get(req, "id"), *method = get(req, "method"), *jv = get(req, "jsonrpc");
    bool obj = cJSON_IsObject(req);
    bool good_id = cJSON_IsString(id) || (cJSON_IsNumber(id) && isfinite(id->valuedouble));
    bool request = obj && good_id && cJSON_IsString(method) && cJSON_IsString(jv) && strcmp(jv->valuestring, "2.0") == 0;
    const char *meth = request ? method->valuestring : "";

    FUZZ_CHECK(!(ans && call), "a message got an answer and a call to run");
    if (!req) {
        FUZZ_CHECK(ans != NULL, "a line that is not JSON went unanswered");
        a = check_answer(ans, NULL, true);
        FUZZ_CHECK(get(get(a, "error"), "code")->valueint == -32700, "a line that is not JSON was not -32700: %s",
                   ans);
    } else if (obj && !id && cJSON_IsString(method) && cJSON_IsString(jv) && strcmp(jv->valuestring, "2.0") == 0) {
        FUZZ_CHECK(!ans && !call, "a notification was answered: %s", ans ? ans : cli_mcp_call_tool(call));
    } else if (request) {
        FUZZ_CHECK(ans || call, "a request went unanswered");
    }
    if (call) {
        FUZZ_CHECK(request && strcmp(meth, "tools/call") == 0 && *initialized,
                   "a call from a message that is not a tools/call after initialize");
        check_call(call);
        if (strcmp(cli_mcp_call_tool(call), "docs") == 0) {
            ans = cli_mcp_call_run(call);   /* reads the two docs files only */
            FUZZ_CHECK(ans != NULL, "a docs call went unanswered");
        } else {
            cli_mcp_call_free(call);
        }
    }
    if (ans && !a) {
        const cJSON *res;
        a = check_answer(ans, good_id ? id : NULL, request);
        res = get(a, "result");
        if (res && request) {
            FUZZ_CHECK(*initialized || strcmp(meth, "ping") == 0 || strcmp(meth, "initialize") == 0,
                       "%s answered before initialize: %s", meth, ans);
            if (strcmp(meth, "initialize") == 0) {
                const cJSON *pv = get(res, "protocolVersion"), *asked = get(get(req, "params"), "protocolVersion");
                FUZZ_CHECK(!*initialized, "a second initialize got a result: %s", ans);
                FUZZ_CHECK(cJSON_IsString(pv) && (strcmp(pv->valuestring, "2025-06-18") == 0 ||
                                                  strcmp(pv->valuestring, "2025-11-25") == 0),
                           "initialize answered version %s", ans);
                if (cJSON_IsString(asked) &&
                    (strcmp(asked->valuestring, "2025-06-18") == 0 || strcmp(asked->valuestring, "2025-11-25") == 0))
                    FUZZ_CHECK(strcmp(pv->valuestring, asked->valuestring) == 0, "a supported version not echoed: %s",
                               ans);
                *initialized = true;
            } else if (strcmp(meth, "tools/list") == 0) {
                const cJSON *t;
                FUZZ_CHECK(cJSON_GetArraySize(get(res, "tools")) == cJSON_GetArraySize(tools), "tools/list changed");
                cJSON_ArrayForEach(t, get(res, "tools"))
                    FUZZ_CHECK(cJSON_IsObject(get(t, "inputSchema")), "a tool without its inputSchema: %s", ans);
            } else if (strcmp(meth, "tools/call") == 0) {
                check_call_result(res, ans);
            }
        }
    }
    cJSON_Delete(a);
    cJSON_Delete(req);
    free(ans);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_mcp s;
    bool initialized = false;
    const char *p, *end;

    if (size < 1)
        return 0;
    cli_mcp_init(&s);
    if (data[0] & 1) {
        free(cli_mcp_handle(&s, init_line, strlen(init_line)));
        initialized = true;
    }
    p = (const char *)data + 1;
    end = (const char *)data + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        one_line(&s, p, n, &initialized);
        p += n + 1;
    }
    return 0;
}
