/* mcp — `kforge mcp`: the stdio loop around cli_mcp_handle (see cli_mcp.h).
 *
 * stdout carries only MCP messages: the protocol writes to a private copy
 * of fd 1, and fd 1 itself is pointed at stderr, so nothing else the
 * process (or a library, or a forked evaluation) prints can reach the
 * client.  Lines are read into one buffer of CLI_MCP_MAX_LINE bytes: a
 * longer line is answered with -32600 and skipped up to its newline, never
 * buffered.  stdin's end, SIGTERM or SIGINT end the loop with status 0. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_mcp.h"
#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_error.h"

static volatile sig_atomic_t mcp_stop;

static void mcp_on_signal(int sig)
{
    (void)sig;
    mcp_stop = 1;
}

static void mcp_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge mcp\n"
            "\n"
            "Serve kforge's tools over the Model Context Protocol on stdio (JSON-RPC 2.0, one message\n"
            "per line; protocol versions 2025-06-18 and 2025-11-25), for Claude Code, Kiro or any MCP\n"
            "client, which starts this command itself.  stdout carries only MCP messages; logs go to\n"
            "stderr.  It ends when stdin closes or on SIGTERM.\n"
            "\n"
            "Tools (docs/mcp.md has their schemas):\n"
            "  run             compile + run a kernel with numerics on seeded random inputs\n"
            "  profile         latency, bounds, ranked findings with source lines, busiest lines\n"
            "  validate        compare a kernel's outputs with a NumPy reference on seeded inputs\n"
            "  docs            sections of docs/sim-nki.md and docs/sim-errors.md (offline)\n"
            "  submit_job      POST a job to the kforge API\n"
            "  job_status      a job's state\n"
            "  job_iterations  a job's iterations\n"
            "  compare_jobs    compare 2 to 4 jobs\n"
            "  library_ops     the service's kernel library\n"
            "run, profile and validate take a library op with its shapes, or a kernel file (paths\n"
            "relative to where kforge mcp runs) with its entry and inputs; the kernel runs only in\n"
            "kforge's sandbox (KFORGE_SIM_TIMEOUT_S, KFORGE_SIM_MEMORY_MIB).  The service tools use\n"
            "KFORGE_API_URL and KFORGE_TOKEN as the other commands do.\n"
            "\n"
            "Example client configuration (Claude Code: claude mcp add kforge -- kforge mcp):\n"
            "  {\"mcpServers\": {\"kforge\": {\"command\": \"kforge\", \"args\": [\"mcp\"]}}}\n"
            "\n"
            "Exit status: 0 at stdin's end or on SIGTERM, 1 when stdout cannot be written, 2 usage.\n");
}

/* Write all of s and a newline to fd. */
static int mcp_write_line(int fd, const char *s)
{
    size_t len = strlen(s) + 1, off = 0;
    char *line = kf_asprintf("%s\n", s);

    while (off < len) {
        ssize_t n = write(fd, line + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(line);
            return -1;
        }
        off += (size_t)n;
    }
    free(line);
    return 0;
}

/* A tools/call whose client sent a progressToken runs in a thread of its
 * own while this one reports notifications/progress on stdout: one at
 * once (progress 0) and one each MCP_PROGRESS_MS after (progress: the
 * seconds so far, increasing), until the call's answer is ready.  The
 * answer comes after the last notification. */
enum { MCP_PROGRESS_MS = 1000, MCP_PROGRESS_POLL_MS = 20 };

typedef struct mcp_job {
    cli_mcp_call   *call;
    char           *reply;
    pthread_mutex_t mu;
    bool            done;
} mcp_job;

static void *mcp_job_run(void *v)
{
    mcp_job *j = v;
    char *r = cli_mcp_call_run(j->call);

    pthread_mutex_lock(&j->mu);
    j->reply = r;
    j->done = true;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static char *mcp_progress_line(const cJSON *token, double progress, const char *tool, double secs)
{
    cJSON *n = cJSON_CreateObject(), *p = cJSON_AddObjectToObject(n, "params");
    char msg[128], *line;

    cJSON_AddStringToObject(n, "jsonrpc", "2.0");
    cJSON_AddStringToObject(n, "method", "notifications/progress");
    cJSON_AddItemToObject(p, "progressToken", cJSON_Duplicate(token, true));
    cJSON_AddNumberToObject(p, "progress", progress);
    snprintf(msg, sizeof(msg), "%s: %s, %.0f s", tool, progress > 0 ? "running" : "started", secs);
    cJSON_AddStringToObject(p, "message", msg);
    line = cJSON_PrintUnformatted(n);
    cJSON_Delete(n);
    return line;
}

/* -1 when stdout cannot be written (the call is still waited for). */
static int mcp_run_progress(cli_mcp_call *call, int out, char **reply)
{
    mcp_job j = { call, NULL, PTHREAD_MUTEX_INITIALIZER, false };
    cJSON *token = cJSON_Duplicate(cli_mcp_call_progress_token(call), true);
    char tool[80], *line;
    struct timespec t0, now, nap = { 0, MCP_PROGRESS_POLL_MS * 1000000L };
    pthread_t th;
    int rc = 0, sent = 0;
    bool done = false;

    snprintf(tool, sizeof(tool), "%s", cli_mcp_call_tool(call));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    line = mcp_progress_line(token, 0, tool, 0);
    rc = mcp_write_line(out, line);
    free(line);
    if (pthread_create(&th, NULL, mcp_job_run, &j) != 0) {
        *reply = cli_mcp_call_run(call);   /* no thread: the answer alone */
        cJSON_Delete(token);
        return rc;
    }
    while (!done) {
        double secs;
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&j.mu);
        done = j.done;
        pthread_mutex_unlock(&j.mu);
        clock_gettime(CLOCK_MONOTONIC, &now);
        secs = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
        if (!done && rc == 0 && secs * 1000 >= (double)(sent + 1) * MCP_PROGRESS_MS) {
            sent++;
            line = mcp_progress_line(token, sent, tool, secs);
            rc = mcp_write_line(out, line);
            free(line);
        }
    }
    pthread_join(th, NULL);
    pthread_mutex_destroy(&j.mu);
    cJSON_Delete(token);
    *reply = j.reply;
    return rc;
}

/* One complete line: answer it (blank lines are skipped). */
static int mcp_line(cli_mcp *s, int out, char *line, size_t len)
{
    char *reply;
    cli_mcp_call *call = NULL;
    struct timespec t0, t1;

    if (len && line[len - 1] == '\r')
        len--;
    if (strspn(line, " \t\r") >= len)
        return 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    reply = cli_mcp_accept(s, line, len, &call);
    if (call && cli_mcp_call_progress_token(call)) {
        if (mcp_run_progress(call, out, &reply) != 0) {
            free(reply);
            return -1;
        }
    } else if (call) {
        reply = cli_mcp_call_run(call);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "kforge mcp: %s: %s (%.2f s)\n", s->last, reply ? "answered" : "no answer",
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    if (!reply)
        return 0;
    if (mcp_write_line(out, reply) != 0) {
        free(reply);
        return -1;
    }
    free(reply);
    return 0;
}

int cli_mcp_main(int argc, char **argv)
{
    struct sigaction sa;
    kf_err err = KF_ERR_INIT;
    cli_mcp s;
    char *buf;
    size_t len = 0;
    bool skipping = false;
    int out, rc = 0;

    if (argc > 1) {
        bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        mcp_usage(help ? stdout : stderr);
        return help ? 0 : 2;
    }
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge mcp: %s\n", err.msg);
        return 2;
    }
    fflush(stdout);
    out = dup(STDOUT_FILENO);
    if (out < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fprintf(stderr, "kforge mcp: cannot set up stdout: %s\n", strerror(errno));
        return 1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = mcp_on_signal;   /* no SA_RESTART: a blocked read returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    cli_mcp_init(&s);
    buf = kf_malloc(CLI_MCP_MAX_LINE + 1);
    fprintf(stderr, "kforge mcp: ready (MCP over stdio)\n");
    while (!mcp_stop) {
        ssize_t n = read(STDIN_FILENO, buf + len, CLI_MCP_MAX_LINE + 1 - len);
        size_t start = 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;   /* stdin's end (or an error): the client is gone */
        len += (size_t)n;
        for (size_t i = len - (size_t)n; i < len; i++) {
            if (buf[i] != '\n')
                continue;
            if (skipping) {
                skipping = false;
            } else {
                buf[i] = '\0';
                if (mcp_line(&s, out, buf + start, i - start) != 0) {
                    rc = 1;
                    goto end;
                }
            }
            start = i + 1;
        }
        memmove(buf, buf + start, len - start);
        len -= start;
        if (len > CLI_MCP_MAX_LINE) {
            /* a line without its newline fills the buffer: refuse it, drop what came */
            if (!skipping) {
                char *e = cli_mcp_oversized();
                fprintf(stderr, "kforge mcp: a message longer than %u bytes was refused\n", CLI_MCP_MAX_LINE);
                if (mcp_write_line(out, e) != 0) {
                    free(e);
                    rc = 1;
                    goto end;
                }
                free(e);
            }
            skipping = true;
            len = 0;
        }
    }
    if (!skipping && len > 0 && !mcp_stop) {
        buf[len] = '\0';   /* a last message without its newline */
        rc = mcp_line(&s, out, buf, len) != 0;
    }
end:
    fprintf(stderr, "kforge mcp: %s\n", mcp_stop ? "stopped by a signal" : "stdin closed, exiting");
    free(buf);
    close(out);
    curl_global_cleanup();
    return rc;
}
