/*
 * kf_test_mcp — a test's MCP client: `kforge mcp` of the build under test
 * started over pipes, messages written one per line to its stdin and its
 * stdout read line by line (stderr goes to a log file).
 *
 * Failure: the functions assert (Criterion) on what the test cannot go on
 * without (fork, pipes); a missing answer is NULL, not an assertion.
 * Ownership: returned strings and cJSON are the caller's; kf_mcp_close
 * releases the process's pipes and memory.
 */
#ifndef KF_TEST_MCP_H
#define KF_TEST_MCP_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <sys/types.h>

#include "kf_buf.h"

typedef struct kf_mcp {
    pid_t  pid;
    int    in, out;        /* its stdin (we write), its stdout (we read) */
    kf_buf pending;        /* stdout bytes read past the last line returned */
    char  *err_path;       /* its stderr */
} kf_mcp;

/* Start `kforge mcp` with extra environment entries ("K=V", NULL-terminated
 * or NULL) in folder cwd (NULL: the test's). */
void kf_mcp_start(kf_mcp *m, const char *const *env, const char *cwd);

/* Write bytes (a newline is not added). 0, or -1 when the pipe is closed. */
int kf_mcp_write(kf_mcp *m, const char *data, size_t len);

/* The next stdout line (no newline) within timeout_ms, or NULL at EOF or timeout. */
char *kf_mcp_read_line(kf_mcp *m, int timeout_ms);

/* Send one line, read one line and parse it (NULL when no answer / not JSON). */
cJSON *kf_mcp_rpc(kf_mcp *m, const char *line, int timeout_ms);

/* initialize + notifications/initialized; asserts the answer. */
void kf_mcp_handshake(kf_mcp *m);

/* tools/call NAME with ARGS_JSON (id 100+): the result object (owned; NULL on no answer). */
cJSON *kf_mcp_call_tool(kf_mcp *m, const char *name, const char *args_json, int timeout_ms);

/* A tool error's {"code", "message"}: asserts that res is a tools/call
 * result with isError, no structuredContent and a text item holding
 * {"error": {...}}.  The parsed text is kept in res (freed with it). */
const cJSON *kf_mcp_tool_error(cJSON *res);

/* Close its stdin and wait up to timeout_ms: the wait status (SIGKILL after). */
int kf_mcp_close(kf_mcp *m, int timeout_ms);

#endif
