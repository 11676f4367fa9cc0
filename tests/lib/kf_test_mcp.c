/* kf_test_mcp — a test's MCP client over pipes (see kf_test_mcp.h). */
#include "kf_test_mcp.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_test.h"

void kf_mcp_start(kf_mcp *m, const char *const *env, const char *cwd)
{
    char *bin = kf_test_bin("kforge"), *abs = realpath(bin, NULL), *dir = kf_test_tmpdir("mcp");
    int pin[2], pout[2];

    memset(m, 0, sizeof(*m));
    kf_buf_init(&m->pending);
    cr_assert_not_null(abs, "%s exists", bin);
    cr_assert_eq(pipe(pin), 0);
    cr_assert_eq(pipe(pout), 0);
    m->err_path = kf_asprintf("%s/stderr", dir);
    m->pid = fork();
    cr_assert_geq(m->pid, 0);
    if (m->pid == 0) {
        int fe = open(m->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(fe, 2);
        close(pin[1]);
        close(pout[0]);
        for (int i = 0; env && env[i]; i++)
            putenv(kf_strdup(env[i]));
        if (cwd && chdir(cwd) != 0)
            _exit(127);
        alarm(300);
        execl(abs, abs, "mcp", (char *)NULL);
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    m->in = pin[1];
    m->out = pout[0];
    signal(SIGPIPE, SIG_IGN);
    free(dir);
    free(abs);
    free(bin);
}

int kf_mcp_write(kf_mcp *m, const char *data, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = write(m->in, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

char *kf_mcp_read_line(kf_mcp *m, int timeout_ms)
{
    long long end = kf_test_now_ms() + timeout_ms;

    for (;;) {
        char *nl = m->pending.len ? memchr(m->pending.data, '\n', m->pending.len) : NULL;
        char chunk[65536];
        struct pollfd p = { m->out, POLLIN, 0 };
        long long left = end - kf_test_now_ms();
        ssize_t n;
        if (nl) {
            size_t len = (size_t)(nl - m->pending.data);
            char *line = kf_strndup(m->pending.data, len);
            memmove(m->pending.data, nl + 1, m->pending.len - len - 1);
            m->pending.len -= len + 1;
            m->pending.data[m->pending.len] = '\0';
            return line;
        }
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return NULL;
        n = read(m->out, chunk, sizeof(chunk));
        if (n <= 0)
            return NULL;
        kf_buf_add(&m->pending, chunk, (size_t)n);
    }
}

cJSON *kf_mcp_rpc(kf_mcp *m, const char *line, int timeout_ms)
{
    char *ans;
    cJSON *j;

    if (kf_mcp_write(m, line, strlen(line)) != 0 || kf_mcp_write(m, "\n", 1) != 0)
        return NULL;
    ans = kf_mcp_read_line(m, timeout_ms);
    j = ans ? cJSON_Parse(ans) : NULL;
    free(ans);
    return j;
}

void kf_mcp_handshake(kf_mcp *m)
{
    cJSON *r = kf_mcp_rpc(m,
                          "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                          "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"kforge-tests\",\"version\":\"1\"}}}",
                          10000);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(r, "result");

    cr_assert(cJSON_IsObject(res), "initialize answered");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "protocolVersion")->valuestring, "2025-06-18");
    cJSON_Delete(r);
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
    cr_assert_eq(kf_mcp_write(m, note, strlen(note)), 0);
}

cJSON *kf_mcp_call_tool(kf_mcp *m, const char *name, const char *args_json, int timeout_ms)
{
    static int id = 100;
    char *line = kf_asprintf("{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                             "\"arguments\":%s}}", id++, name, args_json);
    cJSON *r = kf_mcp_rpc(m, line, timeout_ms), *res = NULL;

    free(line);
    if (r) {
        res = cJSON_DetachItemFromObjectCaseSensitive(r, "result");
        cJSON_Delete(r);
    }
    return res;
}

int kf_mcp_close(kf_mcp *m, int timeout_ms)
{
    int st = 0;
    long long end = kf_test_now_ms() + timeout_ms;
    pid_t w = 0;

    close(m->in);
    while ((w = waitpid(m->pid, &st, WNOHANG)) == 0 && kf_test_now_ms() < end)
        kf_test_sleep_ms(20);
    if (w == 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, &st, 0);
        st = -1;
    }
    close(m->out);
    kf_buf_release(&m->pending);
    free(m->err_path);
    m->err_path = NULL;
    return st;
}

const cJSON *kf_mcp_tool_error(cJSON *res)
{
    const cJSON *item = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "content"), 0);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "text");
    cJSON *e = cJSON_GetObjectItemCaseSensitive(res, "parsed_error");

    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "isError")), "a tool error");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(res, "structuredContent"), "no structuredContent on an error");
    cr_assert(cJSON_IsString(text));
    if (!e) {
        e = cJSON_Parse(text->valuestring);
        cr_assert(cJSON_IsObject(e), "the text item is JSON: %s", text->valuestring);
        cJSON_AddItemToObject(res, "parsed_error", e);
    }
    e = cJSON_GetObjectItemCaseSensitive(e, "error");
    cr_assert(cJSON_IsObject(e), "the text item is {\"error\": {...}}: %s", text->valuestring);
    return e;
}
