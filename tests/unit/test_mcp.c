/* `kforge mcp` at the protocol level (issue 20): the real binary spawned
 * over pipes and spoken to in JSON-RPC, as an MCP client does -- the
 * initialize lifecycle and version negotiation, tools/list with input and
 * output schemas, a profile of a small library kernel (findings with source
 * lines), run and validate of a user kernel file (a correct one passes, a
 * wrong one fails, one that does not compile is a result with the
 * simulator's error), a docs lookup, every error class (-32700, -32600 for a
 * batch, a wrong jsonrpc, a null id, a request before initialize and an
 * oversized line, -32601, -32602, isError with kforge's codes), no answer to
 * notifications, and a clean exit at stdin's end and on SIGTERM.  Plus the
 * core (cli_mcp_handle) called directly.  No service is needed. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_mcp.h"
#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_json.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_mcp.h"

static const char *const mcp_env[] = { "KFORGE_SIM_TIMEOUT_S=120", NULL };

static char *root(void)
{
    const char *r = getenv("KFORGE_TEST_ROOT");
    return kf_strdup(r && *r ? r : ".");
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* The error code of an answer (0 when it has none). */
static int rpc_code(const cJSON *ans)
{
    const cJSON *c = get(get(ans, "error"), "code");
    return cJSON_IsNumber(c) ? c->valueint : 0;
}

/* A tool result's structuredContent, checked against its text copy. */
static const cJSON *structured(const cJSON *res)
{
    const cJSON *sc = get(res, "structuredContent"), *item = cJSON_GetArrayItem(get(res, "content"), 0);
    cJSON *copy;

    cr_assert(cJSON_IsObject(sc), "structuredContent is an object");
    cr_assert(cJSON_IsString(get(item, "text")) && strcmp(get(item, "type")->valuestring, "text") == 0);
    copy = cJSON_Parse(get(item, "text")->valuestring);
    cr_assert(cJSON_Compare(copy, sc, true), "the text item is the structured content's copy");
    cJSON_Delete(copy);
    return sc;
}

TestSuite(mcp, .timeout = 300);

Test(mcp, lifecycle_and_version_negotiation)
{
    kf_mcp m;
    cJSON *a;

    kf_mcp_start(&m, mcp_env, NULL);
    /* before initialize: ping only */
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}", 5000);
    cr_assert(cJSON_IsObject(get(a, "result")) && strcmp(get(a, "id")->valuestring, "p") == 0);
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", 5000);
    cr_assert_eq(rpc_code(a), -32600, "tools/list before initialize is refused");
    cr_assert(strstr(get(get(a, "error"), "message")->valuestring, "initialize"));
    cr_assert_eq(get(a, "id")->valueint, 2);
    cJSON_Delete(a);
    /* an unknown version gets the latest */
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                       "\"2024-11-05\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}", 5000);
    cr_assert_str_eq(get(get(a, "result"), "protocolVersion")->valuestring, "2025-11-25");
    cr_assert(cJSON_IsObject(get(get(get(a, "result"), "capabilities"), "tools")));
    cr_assert_str_eq(get(get(get(a, "result"), "serverInfo"), "name")->valuestring, "kforge");
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                       "\"2025-06-18\"}}", 5000);
    cr_assert_eq(rpc_code(a), -32600, "a second initialize is refused");
    cJSON_Delete(a);
    /* notifications are never answered: the next answer is the ping's */
    {
        const char *notes = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
                            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                            "{\"requestId\":9}}\n{\"jsonrpc\":\"2.0\",\"method\":\"no/such\"}\n";
        cr_assert_eq(kf_mcp_write(&m, notes, strlen(notes)), 0);
    }
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}", 5000);
    cr_assert_eq(get(a, "id")->valueint, 5, "no answer to notifications");
    cJSON_Delete(a);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0, "exit 0 at stdin's end");

    /* the two versions kforge speaks are echoed */
    kf_mcp_start(&m, mcp_env, NULL);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                       "\"2025-11-25\",\"capabilities\":{}}}", 5000);
    cr_assert_str_eq(get(get(a, "result"), "protocolVersion")->valuestring, "2025-11-25");
    cJSON_Delete(a);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
    kf_mcp_start(&m, mcp_env, NULL);
    kf_mcp_handshake(&m);   /* asserts 2025-06-18 echoed */
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
}

Test(mcp, tools_list_publishes_input_and_output_schemas)
{
    static const char *const names[] = { "run", "profile", "validate", "docs", "submit_job",
                                         "job_status", "job_iterations", "compare_jobs", "library_ops" };
    kf_mcp m;
    cJSON *a;
    const cJSON *t, *tools;
    int n = 0;

    kf_mcp_start(&m, mcp_env, NULL);
    kf_mcp_handshake(&m);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{}}", 5000);
    tools = get(get(a, "result"), "tools");
    cr_assert(cJSON_IsArray(tools));
    cr_assert_null(get(get(a, "result"), "nextCursor"), "one page");
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *in = get(t, "inputSchema"), *out = get(t, "outputSchema");
        cr_assert_str_eq(get(t, "name")->valuestring, names[n], "tool %d", n);
        cr_assert(cJSON_IsString(get(t, "description")) && strlen(get(t, "description")->valuestring) > 40);
        cr_assert(cJSON_IsObject(in) && strcmp(get(in, "type")->valuestring, "object") == 0, "%s", names[n]);
        cr_assert(cJSON_IsObject(out) && strcmp(get(out, "type")->valuestring, "object") == 0, "%s", names[n]);
        n++;
    }
    cr_assert_eq(n, 9);
    {
        /* --help names every tool the server lists */
        char *bin = kf_test_bin("kforge"), *cmd = kf_asprintf("%s mcp --help", bin), help[8192];
        FILE *p = popen(cmd, "r");
        size_t len;
        cr_assert_not_null(p);
        len = fread(help, 1, sizeof(help) - 1, p);
        help[len] = '\0';
        cr_assert_eq(pclose(p), 0);
        for (int i = 0; i < n; i++) {
            char *item = kf_asprintf("  %s ", names[i]);
            cr_assert(strstr(help, item), "--help names %s:\n%s", names[i], help);
            free(item);
        }
        free(cmd);
        free(bin);
    }
    cr_assert(cJSON_IsObject(get(get(get(cJSON_GetArrayItem(tools, 1), "inputSchema"), "properties"), "shapes")));
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"cursor\":\"x\"}}", 5000);
    cr_assert_eq(rpc_code(a), -32602, "a cursor the server never gave is invalid params");
    cJSON_Delete(a);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
}

Test(mcp, profiles_a_library_kernel_with_findings_on_source_lines)
{
    kf_mcp m;
    cJSON *res;
    const cJSON *sc, *f;
    char *r = root(), *kdir = kf_asprintf("KFORGE_KERNELS_DIR=%s/kernels", r);
    const char *const env[] = { "KFORGE_SIM_TIMEOUT_S=120", kdir, NULL };

    kf_mcp_start(&m, env, NULL);
    kf_mcp_handshake(&m);
    res = kf_mcp_call_tool(&m, "profile", "{\"op\":\"softmax\",\"shapes\":[[128,512]],\"target\":\"trn2\"}", 120000);
    cr_assert_not_null(res, "profile answered");
    cr_assert(cJSON_IsFalse(get(res, "isError")));
    sc = structured(res);
    cr_assert(cJSON_IsTrue(get(sc, "ok")));
    cr_assert(get(sc, "latency_ns")->valuedouble > 0 && get(sc, "floor_ns")->valuedouble > 0);
    cr_assert(cJSON_IsString(get(sc, "bound_kind")) && cJSON_IsObject(get(sc, "summary")));
    f = cJSON_GetArrayItem(get(sc, "findings"), 0);
    cr_assert(cJSON_IsString(get(f, "kind")) && cJSON_IsString(get(f, "message")), "ranked findings");
    cr_assert(strstr(get(cJSON_GetArrayItem(get(f, "lines"), 0), "loc")->valuestring, "softmax.py:"),
              "a finding points at the kernel's source line");
    cr_assert(strstr(get(cJSON_GetArrayItem(get(sc, "lines"), 0), "loc")->valuestring, "softmax.py:"),
              "busiest lines");
    cJSON_Delete(res);
    /* the library op's own reference validates it */
    res = kf_mcp_call_tool(&m, "validate", "{\"op\":\"softmax\",\"shapes\":[[128,512]],\"seeds\":[7]}", 120000);
    sc = structured(res);
    cr_assert(cJSON_IsTrue(get(sc, "pass")), "softmax passes its reference");
    cr_assert_eq(cJSON_GetArraySize(get(sc, "checks")), 1);
    cJSON_Delete(res);
    /* an op the library does not have: a tool error with kforge's code */
    res = kf_mcp_call_tool(&m, "profile", "{\"op\":\"nosuchop\",\"shapes\":[[128]]}", 30000);
    cr_assert(cJSON_IsTrue(get(res, "isError")));
    cr_assert_str_eq(get(kf_mcp_tool_error(res), "code")->valuestring, "NOT_FOUND");
    cr_assert(strstr(get(kf_mcp_tool_error(res), "message")->valuestring, "softmax"),
              "the message lists the ops");
    cJSON_Delete(res);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
    free(kdir);
    free(r);
}

Test(mcp, runs_and_validates_a_user_kernel_file)
{
    kf_mcp m;
    cJSON *res;
    const cJSON *sc, *o;
    char *r = root(), *dir = kf_test_tmpdir("mcp-kernels"), *src, *wrong, *p, *args;
    char *kpath = kf_asprintf("%s/tests/kernels/current/tensor_add.py", r);
    char *ref = kf_asprintf("%s/tests/kernels/ref_tensor_add.py", r);
    const char *inputs = "\"entry\":\"tensor_add\",\"inputs\":[{\"name\":\"a_input\",\"shape\":[128,512],\"dtype\":"
                         "\"fp32\"},{\"name\":\"b_input\",\"shape\":[128,512],\"dtype\":\"fp32\"}]";

    /* a wrong kernel (multiply for add) and one that does not compile, in a folder of the test's */
    src = kf_test_read_file(kpath);
    p = strstr(src, "op=nl.add");
    cr_assert_not_null(p);
    wrong = kf_asprintf("%.*sop=nl.multiply%s", (int)(p - src), src, p + 9);
    p = kf_asprintf("%s/wrong.py", dir);
    kf_test_write_file(p, wrong);
    free(p);
    p = kf_asprintf("%s/broken.py", dir);
    kf_test_write_file(p, "import nki\nimport nki.language as nl\n\n@nki.jit\ndef tensor_add(a_input, b_input):\n"
                          "    t = nl.ndarray((256, 512), dtype=a_input.dtype, buffer=nl.sbuf)\n    return t\n");
    free(p);

    kf_mcp_start(&m, mcp_env, dir);
    kf_mcp_handshake(&m);
    args = kf_asprintf("{\"kernel\":\"%s\",%s,\"seed\":5}", kpath, inputs);
    res = kf_mcp_call_tool(&m, "run", args, 120000);
    free(args);
    sc = structured(res);
    cr_assert(cJSON_IsTrue(get(sc, "ok")), "the kernel ran");
    cr_assert_eq(get(sc, "n_outputs")->valueint, 1);
    o = cJSON_GetArrayItem(get(sc, "outputs"), 0);
    cr_assert_eq(get(o, "elements")->valuedouble, 128.0 * 512);
    cr_assert_eq(get(o, "nan")->valuedouble, 0, "every element written");
    cr_assert(get(o, "max")->valuedouble > get(o, "min")->valuedouble);
    cJSON_Delete(res);

    args = kf_asprintf("{\"kernel\":\"%s\",%s,\"reference\":\"%s\",\"seeds\":[1,2]}", kpath, inputs, ref);
    res = kf_mcp_call_tool(&m, "validate", args, 120000);
    free(args);
    sc = structured(res);
    cr_assert(cJSON_IsTrue(get(sc, "pass")), "tensor_add matches its reference");
    cr_assert_eq(cJSON_GetArraySize(get(sc, "checks")), 2, "one check per seed");
    cJSON_Delete(res);

    /* relative paths are the server's working folder's */
    args = kf_asprintf("{\"kernel\":\"wrong.py\",%s,\"reference\":\"%s\"}", inputs, ref);
    res = kf_mcp_call_tool(&m, "validate", args, 120000);
    free(args);
    cr_assert(cJSON_IsFalse(get(res, "isError")), "a wrong kernel is a result, not a tool error");
    sc = structured(res);
    cr_assert(cJSON_IsTrue(get(sc, "ok")) && cJSON_IsFalse(get(sc, "pass")), "the wrong kernel fails validation: %s",
              cJSON_PrintUnformatted(sc));
    cJSON_Delete(res);

    args = kf_asprintf("{\"kernel\":\"broken.py\",%s}", inputs);
    res = kf_mcp_call_tool(&m, "run", args, 120000);
    free(args);
    sc = structured(res);
    cr_assert(cJSON_IsFalse(get(sc, "ok")));
    cr_assert(strstr(get(get(sc, "error"), "code")->valuestring, "PARTITION"), "the simulator's code: %s",
              cJSON_PrintUnformatted(sc));
    cJSON_Delete(res);

    /* a kernel without a reference cannot be validated: a tool error */
    args = kf_asprintf("{\"kernel\":\"%s\",%s}", kpath, inputs);
    res = kf_mcp_call_tool(&m, "validate", args, 30000);
    free(args);
    cr_assert(cJSON_IsTrue(get(res, "isError")));
    cr_assert(strstr(get(kf_mcp_tool_error(res), "message")->valuestring, "reference"));
    cJSON_Delete(res);
    res = kf_mcp_call_tool(&m, "run", "{\"kernel\":\"missing.py\",\"entry\":\"k\",\"inputs\":[{\"name\":\"a\","
                                      "\"shape\":[4],\"dtype\":\"fp32\"}]}", 30000);
    cr_assert(cJSON_IsTrue(get(res, "isError")));
    cr_assert_str_eq(get(kf_mcp_tool_error(res), "code")->valuestring, "NOT_FOUND");
    cJSON_Delete(res);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
    free(src);
    free(wrong);
    free(kpath);
    free(ref);
    free(dir);
    free(r);
}

Test(mcp, docs_finds_sections_and_error_codes)
{
    kf_mcp m;
    cJSON *res;
    const cJSON *sc, *s;
    char *r = root(), *kdir = kf_asprintf("KFORGE_KERNELS_DIR=%s/kernels", r);
    const char *const env[] = { kdir, NULL };
    bool row = false;

    kf_mcp_start(&m, env, "/");
    kf_mcp_handshake(&m);
    res = kf_mcp_call_tool(&m, "docs", "{}", 10000);
    sc = structured(res);
    cr_assert_geq(cJSON_GetArraySize(get(sc, "sections")), 5, "the list of titles");
    cr_assert_null(get(cJSON_GetArrayItem(get(sc, "sections"), 0), "text"), "titles only");
    cJSON_Delete(res);
    res = kf_mcp_call_tool(&m, "docs", "{\"query\":\"sim_e_partition_limit\",\"doc\":\"errors\"}", 10000);
    sc = structured(res);
    cr_assert_geq(get(sc, "matches")->valueint, 1);
    s = cJSON_GetArrayItem(get(sc, "sections"), 0);
    cr_assert_str_eq(get(s, "doc")->valuestring, "errors");
    cJSON_ArrayForEach(s, get(s, "matching_lines"))
        row = row || (strstr(s->valuestring, "`SIM_E_PARTITION_LIMIT`") && strchr(s->valuestring, '|'));
    cr_assert(row, "the code's table row");
    cJSON_Delete(res);
    res = kf_mcp_call_tool(&m, "docs", "{\"section\":\"memory model\"}", 10000);
    sc = structured(res);
    s = cJSON_GetArrayItem(get(sc, "sections"), 0);
    cr_assert(strstr(get(s, "text")->valuestring, "## Memory model") && strstr(get(s, "text")->valuestring, "PSUM"));
    cJSON_Delete(res);
    res = kf_mcp_call_tool(&m, "docs", "{\"section\":\"no such section\"}", 10000);
    cr_assert(cJSON_IsTrue(get(res, "isError")));
    cJSON_Delete(res);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
    free(kdir);
    free(r);
}

Test(mcp, every_error_class)
{
    kf_mcp m;
    cJSON *a;
    size_t big = CLI_MCP_MAX_LINE + 100;
    char *line = kf_malloc(big + 2);

    kf_mcp_start(&m, mcp_env, NULL);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,", 5000);
    cr_assert_eq(rpc_code(a), -32700);
    cr_assert(cJSON_IsNull(get(a, "id")));
    cJSON_Delete(a);
    kf_mcp_handshake(&m);
    a = kf_mcp_rpc(&m, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", 5000);
    cr_assert_eq(rpc_code(a), -32600, "no batching");
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"1.0\",\"id\":2,\"method\":\"ping\"}", 5000);
    cr_assert_eq(rpc_code(a), -32600);
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", 5000);
    cr_assert_eq(rpc_code(a), -32600, "a null id");
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", 5000);
    cr_assert_eq(rpc_code(a), -32600);
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":3}", 5000);
    cr_assert_eq(rpc_code(a), -32600, "no method");
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "42", 5000);
    cr_assert_eq(rpc_code(a), -32600);
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"resources/list\"}", 5000);
    cr_assert_eq(rpc_code(a), -32601);
    cr_assert_eq(get(a, "id")->valueint, 4);
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}", 5000);
    cr_assert_eq(rpc_code(a), -32602, "unknown tool");
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"run\","
                       "\"arguments\":[1]}}", 5000);
    cr_assert_eq(rpc_code(a), -32602, "arguments not an object");
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":[]}", 5000);
    cr_assert_eq(rpc_code(a), -32602);
    cJSON_Delete(a);
    /* arguments that break the schema: tool errors the model can read */
    a = kf_mcp_call_tool(&m, "profile", "{\"op\":\"softmax\",\"shapes\":[[0]]}", 5000);
    cr_assert(cJSON_IsTrue(get(a, "isError")));
    cr_assert_str_eq(get(kf_mcp_tool_error(a), "code")->valuestring, "INVALID");
    cr_assert(strstr(get(kf_mcp_tool_error(a), "message")->valuestring, "shapes[0][0]"),
              "names the field");
    cJSON_Delete(a);
    a = kf_mcp_call_tool(&m, "profile", "{\"op\":\"softmax\",\"shapes\":[[8]],\"bogus\":1}", 5000);
    cr_assert(strstr(get(kf_mcp_tool_error(a), "message")->valuestring, "unknown property 'bogus'"));
    cJSON_Delete(a);
    a = kf_mcp_call_tool(&m, "job_status", "{\"id\":\"../../etc/passwd-xxxxxxxxxxxxxxxxxxxxxxxx\"}", 5000);
    cr_assert(cJSON_IsTrue(get(a, "isError")), "an id that is not a UUID never reaches a URL");
    cJSON_Delete(a);
    a = kf_mcp_call_tool(&m, "run", "{\"op\":\"softmax\",\"kernel\":\"k.py\"}", 5000);
    cr_assert(strstr(get(kf_mcp_tool_error(a), "message")->valuestring, "either op"));
    cJSON_Delete(a);
    /* an oversized line: refused, skipped, and the server goes on */
    memset(line, ' ', big);
    line[0] = '{';
    line[big] = '\n';
    cr_assert_eq(kf_mcp_write(&m, line, big + 1), 0);
    {
        char *ans = kf_mcp_read_line(&m, 10000);
        a = ans ? cJSON_Parse(ans) : NULL;
        free(ans);
    }
    cr_assert_eq(rpc_code(a), -32600, "an oversized line is refused");
    cr_assert(strstr(get(get(a, "error"), "message")->valuestring, "longer than"));
    cJSON_Delete(a);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}", 5000);
    cr_assert_eq(get(a, "id")->valueint, 8, "the next message is answered");
    cJSON_Delete(a);
    cr_assert_eq(kf_mcp_close(&m, 5000), 0);
    free(line);
}

Test(mcp, sigterm_ends_it_cleanly_and_stdout_is_only_messages)
{
    kf_mcp m;
    cJSON *a;
    int st;
    char *rest;

    kf_mcp_start(&m, mcp_env, NULL);
    kf_mcp_handshake(&m);
    a = kf_mcp_rpc(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}", 5000);
    cr_assert_not_null(a);
    cJSON_Delete(a);
    kf_test_sleep_ms(100);
    kill(m.pid, SIGTERM);
    rest = kf_mcp_read_line(&m, 5000);
    cr_assert_null(rest, "nothing else on stdout: %s", rest ? rest : "");
    st = kf_mcp_close(&m, 5000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit 0 on SIGTERM (status %d)", st);
}

/* The core without the process: what the loop hands it. */
Test(mcp, core_answers_one_line_at_a_time)
{
    cli_mcp s;
    kf_err err = KF_ERR_INIT;
    char *out;
    cJSON *a;

    cr_assert_eq(kf_config_load(&err), KF_OK);
    cli_mcp_init(&s);
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
    const char *resp = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}";
    const char *init = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                       "\"2025-06-18\"}}GARBAGE";

    out = cli_mcp_handle(&s, note, strlen(note));
    cr_assert_null(out, "a notification gets no answer");
    out = cli_mcp_handle(&s, resp, strlen(resp));
    cr_assert_null(out, "a response from the client gets no answer");
    /* the length is the message's: what follows is not read */
    out = cli_mcp_handle(&s, init, strlen(init) - 7);
    a = cJSON_Parse(out);
    cr_assert_str_eq(get(get(a, "result"), "protocolVersion")->valuestring, "2025-06-18", "%s", out);
    cr_assert(s.initialized);
    cJSON_Delete(a);
    free(out);
    out = cli_mcp_oversized();
    a = cJSON_Parse(out);
    cr_assert_eq(rpc_code(a), -32600);
    cJSON_Delete(a);
    free(out);
}

/* The answer to line through the core, checked to be JSON text as a strict
 * client reads it (kf_json_parse: RFC 8259 in UTF-8) and parsed. */
static cJSON *core_answer(cli_mcp *s, const char *line)
{
    char *out = cli_mcp_handle(s, line, strlen(line));
    cJSON *a = NULL;
    kf_err err = KF_ERR_INIT;

    cr_assert_not_null(out, "answered: %s", line);
    cr_assert_eq(kf_json_parse(out, strlen(out), 64, &a, &err), KF_OK, "the answer is JSON text: %s (%s)", out,
                 err.msg);
    free(out);
    return a;
}

/* fuzz_mcp's findings (tests/fuzz/corpus/mcp/regress-*): a line that is not
 * UTF-8 or has text after its value is -32700, and the client's text quoted
 * in an error is cut between characters. */
Test(mcp, core_answers_are_json_text_whatever_the_line)
{
    cli_mcp s;
    kf_err err = KF_ERR_INIT;
    cJSON *a;
    char line[600], name[128];
    const char *msg;

    cr_assert_eq(kf_config_load(&err), KF_OK);
    cli_mcp_init(&s);
    /* a member name that is not UTF-8: was answered (with id 1) as if read */
    a = core_answer(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"m\xcf" "ethod\":\"initialize\",\"params\":"
                        "{\"protocolVersion\":\"2025-11-25\"}}");
    cr_assert_eq(rpc_code(a), -32700);
    cr_assert(cJSON_IsNull(get(a, "id")), "a line that is not JSON has no id to echo");
    cr_assert_not(s.initialized);
    cJSON_Delete(a);
    /* text after the value */
    a = core_answer(&s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}GARBAGE");
    cr_assert_eq(rpc_code(a), -32700);
    cr_assert(strstr(get(get(a, "error"), "message")->valuestring, "offset"), "says where");
    cJSON_Delete(a);
    a = core_answer(&s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                        "\"2025-11-25\"}}");
    cr_assert(s.initialized);
    cJSON_Delete(a);
    /* a method of 99 bytes and a 2-byte character: quoted up to 100 bytes */
    memset(name, 'm', 99);
    memcpy(name + 99, "\xc3\xa9", 3);
    snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"%s\"}", name);
    a = core_answer(&s, line);
    cr_assert_eq(rpc_code(a), -32601);
    msg = get(get(a, "error"), "message")->valuestring;
    cr_assert(strlen(msg) == strlen("method not found: ") + 99, "cut before the character: %s", msg);
    cJSON_Delete(a);
    /* the same for an unknown tool's name */
    snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\"}}",
             name);
    a = core_answer(&s, line);
    cr_assert_eq(rpc_code(a), -32602);
    cJSON_Delete(a);
    /* a property name of 63 bytes and a character, quoted up to 64 bytes */
    memset(name, 'a', 63);
    memcpy(name + 63, "\xc3\xa9", 3);
    snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"run\","
             "\"arguments\":{\"kernel\":\"k.py\",\"entry\":\"k\",\"inputs\":[{\"name\":\"a\",\"shape\":[1],"
             "\"dtype\":\"fp32\",\"%s\":1}]}}}", name);
    a = core_answer(&s, line);
    msg = get(kf_mcp_tool_error(cJSON_GetObjectItemCaseSensitive(a, "result")), "message")->valuestring;
    cr_assert(strstr(msg, "inputs[0]: unknown property 'aaaa") && strstr(msg, "aaa'"), "%s", msg);
    cJSON_Delete(a);
}

/* The seam fuzz_mcp uses: cli_mcp_accept checks a tools/call fully and
 * hands it back without running it; cli_mcp_handle is accept + run. */
Test(mcp, accept_hands_back_a_checked_call_without_running_it)
{
    cli_mcp s;
    cli_mcp_call *call = NULL;
    kf_err err = KF_ERR_INIT;
    const char *init = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                       "\"2025-11-25\"}}";
    const char *run = "{\"jsonrpc\":\"2.0\",\"id\":\"r\",\"method\":\"tools/call\",\"params\":{\"name\":\"run\","
                      "\"arguments\":{\"op\":\"softmax\",\"shapes\":[[128,512]],\"seed\":3}}}";
    const char *bad = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"run\","
                      "\"arguments\":{\"op\":\"softmax\",\"shapes\":[[0]]}}}";
    const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}";
    char *out;
    cJSON *a;

    cr_assert_eq(kf_config_load(&err), KF_OK);
    cli_mcp_init(&s);
    out = cli_mcp_accept(&s, run, strlen(run), &call);
    cr_assert_null(call, "no call before initialize");
    a = cJSON_Parse(out);
    cr_assert_eq(rpc_code(a), -32600);
    cJSON_Delete(a);
    free(out);
    free(cli_mcp_handle(&s, init, strlen(init)));
    out = cli_mcp_accept(&s, run, strlen(run), &call);
    cr_assert_null(out, "a valid call is not answered yet");
    cr_assert_not_null(call);
    cr_assert_str_eq(cli_mcp_call_tool(call), "run");
    cr_assert_eq(get(cli_mcp_call_args(call), "seed")->valueint, 3);
    cli_mcp_call_free(call);
    /* arguments that break the schema: answered at once, nothing to run */
    out = cli_mcp_accept(&s, bad, strlen(bad), &call);
    cr_assert_null(call);
    a = cJSON_Parse(out);
    cr_assert_str_eq(get(kf_mcp_tool_error(cJSON_GetObjectItemCaseSensitive(a, "result")), "code")->valuestring, "INVALID");
    cJSON_Delete(a);
    free(out);
    /* anything else: answered, no call */
    out = cli_mcp_accept(&s, ping, strlen(ping), &call);
    cr_assert_null(call);
    cr_assert_not_null(out);
    free(out);
}

/* A server at KFORGE_API_URL that answers one request with a 404 whose
 * body is not UTF-8: the tool error quotes it with '?' for the bad bytes,
 * so the answer stays JSON text. */
Test(mcp, an_api_answer_that_is_not_utf8_is_quoted_as_json_text)
{
    static const char resp[] = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n"
                               "Connection: close\r\n\r\nbad \xff\xfe body\n";
    struct sockaddr_in sa;
    int port = kf_test_free_port(), ls = socket(AF_INET, SOCK_STREAM, 0), one = 1, st;
    kf_err err = KF_ERR_INIT;
    char url[64], req[4096];
    const char *msg;
    cli_mcp s;
    cJSON *a;
    pid_t pid;

    cr_assert_geq(ls, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(listen(ls, 1), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int c = accept(ls, NULL, NULL);
        if (c >= 0 && read(c, req, sizeof(req)) > 0 && write(c, resp, sizeof(resp) - 1) > 0)
            shutdown(c, SHUT_WR);
        _exit(0);
    }
    close(ls);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    setenv("KFORGE_API_URL", url, 1);
    cr_assert_eq(kf_config_load(&err), KF_OK);
    cli_mcp_init(&s);
    cJSON_Delete(core_answer(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                                 "{\"protocolVersion\":\"2025-11-25\"}}"));
    a = core_answer(&s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
                        "\"job_status\",\"arguments\":{\"id\":\"0b6c1f3e-1111-2222-3333-444455556666\"}}}");
    msg = get(kf_mcp_tool_error(cJSON_GetObjectItemCaseSensitive(a, "result")), "message")->valuestring;
    cr_assert(strstr(msg, "404") && strstr(msg, "bad ?? body"), "%s", msg);
    cJSON_Delete(a);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
}

/* notifications/progress: a tools/call with params._meta.progressToken gets
 * one at once (progress 0) and one a second while it runs, then its answer;
 * a call without a token gets none. */
Test(mcp, a_progress_token_gets_progress_notifications_before_the_answer)
{
    kf_mcp m;
    char *r = root(), *kdir = kf_asprintf("KFORGE_KERNELS_DIR=%s/kernels", r), *line;
    const char *const env[] = { "KFORGE_SIM_TIMEOUT_S=120", kdir, NULL };
    static const char call[] =
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"_meta\":{\"progressToken\":\"tok-1\"},"
        "\"name\":\"validate\",\"arguments\":{\"op\":\"softmax\",\"shapes\":[[512,2048]],\"seeds\":[1,2,3]}}}\n";
    int notes = 0;
    double last = -1;
    bool answered = false;

    kf_mcp_start(&m, env, NULL);
    kf_mcp_handshake(&m);
    cr_assert_eq(kf_mcp_write(&m, call, strlen(call)), 0);
    while (!answered && (line = kf_mcp_read_line(&m, 120000)) != NULL) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *p = get(j, "params");
        cr_assert_not_null(j, "%s", line);
        if (cJSON_IsString(get(j, "method"))) {
            cr_assert_str_eq(get(j, "method")->valuestring, "notifications/progress");
            cr_assert_str_eq(get(p, "progressToken")->valuestring, "tok-1");
            cr_assert_gt(get(p, "progress")->valuedouble, last, "progress increases");
            last = get(p, "progress")->valuedouble;
            cr_assert_null(get(j, "id"), "a notification has no id");
            notes++;
        } else {
            cr_assert_eq(get(j, "id")->valueint, 7);
            cr_assert(cJSON_IsObject(get(j, "result")));
            answered = true;
        }
        cJSON_Delete(j);
        free(line);
    }
    cr_assert(answered && notes >= 1, "%d notifications, then the answer", notes);
    /* without a token: the answer alone */
    {
        cJSON *res = kf_mcp_rpc(&m,
                                "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"docs\","
                                "\"arguments\":{\"query\":\"psum\"}}}\n",
                                30000);
        cr_assert_not_null(res);
        cr_assert_eq(get(res, "id")->valueint, 8, "no notification before it");
        cJSON_Delete(res);
    }
    kf_mcp_close(&m, 10000);
    free(kdir);
    free(r);
}
