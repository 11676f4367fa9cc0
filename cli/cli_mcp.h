/*
 * cli_mcp — `kforge mcp`: kforge's tools over the Model Context Protocol
 * (JSON-RPC 2.0, one message per line, stdio transport), for Claude Code,
 * Kiro or any MCP client.  docs/mcp.md is the user's guide.
 *
 * The core, cli_mcp_handle(), takes one line (one message) and returns the
 * one line to answer, or NULL when nothing is to be sent (a notification,
 * or a response from the client); it never reads or writes stdio, so it is
 * unit-testable.  cli_mcp_main() (cli/mcp.c) is the stdio loop around it.
 * It is two steps: cli_mcp_accept() does every check of a message (the
 * protocol, the tool's name, the arguments against the tool's inputSchema)
 * and answers it, or hands back the tools/call to run; cli_mcp_call_run()
 * does the tool's work (a sandboxed evaluation, an API request, a docs
 * lookup) and answers.  Nothing of the first step starts a process or
 * opens a connection, so tests/fuzz/fuzz_mcp.c drives it with any input.
 *
 * Protocol: `initialize` first (the client's protocolVersion echoed when it
 * is 2025-06-18 or 2025-11-25, else the latest, 2025-11-25); before it only
 * `ping` is answered, anything else is -32600.  Then `tools/list` (every
 * tool with inputSchema and outputSchema, JSON Schema 2020-12, one page)
 * and `tools/call` (structuredContent plus its serialized copy as a text
 * item).  Errors: -32700 a line that is not JSON (RFC 8259 text in UTF-8,
 * one value, nesting at most CLI_MCP_MAX_DEPTH, no \u0000), -32600 not a request
 * (a batch array, a wrong jsonrpc, a null or non-scalar id, no method, a
 * line longer than CLI_MCP_MAX_LINE), -32601 an unknown method, -32602 bad
 * params (unknown tool, arguments not an object, a cursor).  Arguments
 * that break a tool's schema, unknown ops, unreadable files, API refusals
 * and an unreachable API are tool errors: a result with isError true whose
 * text item is {"error": {"code", "message"}} with kforge's code
 * (kf_code_name, or the API problem's) and message (no structuredContent:
 * clients check that against the outputSchema, which is the result's).  A kernel that fails to
 * compile or run is not a tool error: it is the tool's result ("ok": false
 * with the simulator's error code, file and line).
 *
 * Tools: run, profile, validate (the user's kernel or a library op, always
 * in the sandbox through ka_eval; nothing of the user's runs in this
 * process), docs (sections of docs/sim-nki.md and docs/sim-errors.md),
 * and submit_job, job_status, job_iterations, compare_jobs, library_ops
 * (the API through cli_http: KFORGE_API_URL, KFORGE_TOKEN).
 *
 * Ownership: the returned line is the caller's (free).  The session
 * (cli_mcp) holds no heap; a cli_mcp_call is the caller's until
 * cli_mcp_call_run or cli_mcp_call_free.  Needs kf_config_load() and curl_global_init()
 * done by the caller.
 */
#ifndef CLI_MCP_H
#define CLI_MCP_H

#include <stdbool.h>
#include <stddef.h>

#define CLI_MCP_MAX_LINE (4u << 20)            /* bytes of one message, newline excluded */
#define CLI_MCP_MAX_DEPTH 64                   /* nesting of one message */
#define CLI_MCP_LATEST "2025-11-25"

typedef struct cli_mcp {
    bool initialized;                          /* `initialize` was answered */
    char version[16];                          /* the negotiated protocol version */
    char last[80];                             /* the last message's method (tool), for the log */
} cli_mcp;

void cli_mcp_init(cli_mcp *s);

/* One message (line without its newline, len bytes, need not be
 * NUL-terminated); the answer line (no newline) or NULL. */
char *cli_mcp_handle(cli_mcp *s, const char *line, size_t len);

/* A tools/call that passed every check: its tool and arguments. */
typedef struct cli_mcp_call cli_mcp_call;

/* cli_mcp_handle's first step: the answer line or NULL, as cli_mcp_handle,
 * except that a tools/call whose arguments pass the tool's inputSchema is
 * not run: NULL is returned and *call is the call (else *call is NULL). */
char *cli_mcp_accept(cli_mcp *s, const char *line, size_t len, cli_mcp_call **call);

/* The call's tool name and its arguments (an object; owned by the call). */
const char *cli_mcp_call_tool(const cli_mcp_call *c);
const struct cJSON *cli_mcp_call_args(const cli_mcp_call *c);
/* The request's params._meta.progressToken (a string or a number), or
 * NULL when the client sent none: then no progress is reported. */
const struct cJSON *cli_mcp_call_progress_token(const cli_mcp_call *c);

/* Do the call's work and return its answer line (a result, or a tool error
 * with isError); c is freed. */
char *cli_mcp_call_run(cli_mcp_call *c);

/* Drop a call without running it (NULL: nothing). */
void cli_mcp_call_free(cli_mcp_call *c);

/* The answer to a line longer than CLI_MCP_MAX_LINE (-32600, id null). */
char *cli_mcp_oversized(void);

/* `kforge mcp [--help]`: the stdio loop; exit status 0 at stdin's end or
 * SIGTERM/SIGINT, 2 on usage errors. */
int cli_mcp_main(int argc, char **argv);

#endif
