/*
 * kf_runner — fork, run a backend in the child, relay its frames.
 *
 * Frames on the pipe: one type byte, a 4-byte little-endian length, then
 * that many bytes.  'P' progress (iteration JSON), 'R' result JSON,
 * 'E' error (first byte '1' retryable / '0' not, then the message).
 */
#include "kf_runner.h"

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_MAX_FRAME   (16u << 20)   /* 16 MiB: larger frames end the job */
#define RUN_POLL_MS     20
#define RUN_FD          3             /* the child's end of the pipe */

/* ---- child ---------------------------------------------------------- */

static volatile sig_atomic_t run_child_stop;

static void run_child_on_term(int sig)
{
    (void)sig;
    run_child_stop = 1;
}

static bool run_child_cancelled(void *ctx)
{
    (void)ctx;
    return run_child_stop != 0;
}

static void run_child_frame(char type, const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char hdr[5];
    size_t n = alen + blen;
    const char *parts[2] = { a, b };
    size_t lens[2] = { alen, blen };

    if (n > RUN_MAX_FRAME)
        return;
    hdr[0] = (unsigned char)type;
    for (int i = 0; i < 4; i++)
        hdr[1 + i] = (unsigned char)(n >> (8 * i));
    if (write(RUN_FD, hdr, 5) != 5)
        _exit(3);
    for (int p = 0; p < 2; p++) {
        size_t off = 0;
        while (off < lens[p]) {
            ssize_t w = write(RUN_FD, parts[p] + off, lens[p] - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                _exit(3);
            off += (size_t)w;
        }
    }
}

static void run_child_progress(void *ctx, const char *json)
{
    (void)ctx;
    run_child_frame('P', json, strlen(json), NULL, 0);
}

_Noreturn void kf_runner_serve(const kf_backend *backend, const kf_job_payload *job)
{
    struct sigaction sa;
    struct rlimit nocore = { 0, 0 };
    kf_backend_hooks hooks = { NULL, run_child_progress, run_child_cancelled };
    kf_err err = KF_ERR_INIT;
    char *result = NULL;
    bool retryable = false;
    sigset_t all;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = run_child_on_term;
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL);
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    setrlimit(RLIMIT_CORE, &nocore);

    if (backend->run(backend, job, &hooks, &result, &retryable, &err) == KF_OK) {
        const char *r = result ? result : "{}";
        run_child_frame('R', r, strlen(r), NULL, 0);
    } else {
        run_child_frame('E', retryable ? "1" : "0", 1, err.msg, strlen(err.msg));
    }
    free(result);
    _exit(0);
}

static void run_child_main(const kf_backend *backend, const kf_job_payload *job, int wfd, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(4);
    if (wfd != RUN_FD) {
        dup2(wfd, RUN_FD);
        close(wfd);
    }
    syscall(SYS_close_range, RUN_FD + 1, ~0U, 0);
    kf_runner_serve(backend, job);
}

/* ---- parent --------------------------------------------------------- */

static long long run_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Consume complete frames at the start of buf; returns bytes used. */
static size_t run_parse_frames(kf_buf *buf, const kf_runner_hooks *hooks, kf_run_result *out, bool *bad)
{
    size_t off = 0;

    while (buf->len - off >= 5) {
        const unsigned char *h = (const unsigned char *)buf->data + off;
        uint32_t n = (uint32_t)h[1] | (uint32_t)h[2] << 8 | (uint32_t)h[3] << 16 | (uint32_t)h[4] << 24;
        char *body;

        if (n > RUN_MAX_FRAME) {
            *bad = true;
            return buf->len;
        }
        if (buf->len - off - 5 < n)
            break;
        body = kf_strndup(buf->data + off + 5, n);
        if (h[0] == 'P') {
            if (hooks && hooks->progress)
                hooks->progress(hooks->ctx, body);
        } else if (h[0] == 'R' && out->outcome == 0) {
            out->outcome = KF_RUN_OK;
            out->result_json = body;
            body = NULL;
        } else if (h[0] == 'E' && out->outcome == 0 && n >= 1) {
            out->outcome = KF_RUN_FAILED;
            out->retryable = body[0] == '1';
            snprintf(out->error, sizeof(out->error), "%s", body + 1);
        }
        free(body);
        off += 5 + n;
    }
    return off;
}

kf_code kf_runner_run(const kf_backend *backend, const kf_job_payload *job, const kf_runner_hooks *hooks,
                      int grace_ms, kf_run_result *out, kf_err *err)
{
    int fds[2];
    pid_t pid, parent = getpid();
    kf_buf buf = KF_BUF_INIT;
    bool eof = false, bad = false;
    long long kill_at = 0;
    int status = 0;

    memset(out, 0, sizeof(*out));
    if (pipe2(fds, O_CLOEXEC) != 0)
        return kf_err_set(err, KF_IO, "cannot create a pipe for the job process: %s", strerror(errno));
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kf_err_set(err, KF_IO, "cannot fork the job process: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        run_child_main(backend, job, fds[1], parent);
    }
    close(fds[1]);

    while (!eof) {
        struct pollfd p = { fds[0], POLLIN, 0 };
        int pr = poll(&p, 1, RUN_POLL_MS);

        if (pr > 0) {
            char chunk[65536];
            ssize_t n = read(fds[0], chunk, sizeof(chunk));
            if (n > 0) {
                size_t used;
                kf_buf_add(&buf, chunk, (size_t)n);
                used = run_parse_frames(&buf, hooks, out, &bad);
                if (used > 0) {
                    memmove(buf.data, buf.data + used, buf.len - used);
                    buf.len -= used;
                    buf.data[buf.len] = '\0';
                }
                if (bad) {
                    kf_log_warn("job process sent an oversized frame; killing it pid=%d", (int)pid);
                    kill(pid, SIGKILL);
                    eof = true;
                }
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                eof = true;
            }
        } else if (pr < 0 && errno != EINTR) {
            eof = true;
        }
        if (!out->stopped && hooks && hooks->should_stop && hooks->should_stop(hooks->ctx)) {
            out->stopped = true;
            kill(pid, SIGTERM);
            kill_at = run_now_ms() + (grace_ms > 0 ? grace_ms : 0);
        }
        if (out->stopped && kill_at && run_now_ms() >= kill_at) {
            kill(pid, SIGKILL);
            kill_at = 0;
        }
    }
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    out->wait_status = status;
    if (out->outcome == 0) {
        out->outcome = KF_RUN_CRASHED;
        out->retryable = true;
        if (WIFSIGNALED(status))
            snprintf(out->error, sizeof(out->error), "job process killed by signal %d (%s)", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else
            snprintf(out->error, sizeof(out->error), "job process exited with status %d without a result",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    kf_buf_release(&buf);
    return KF_OK;
}

void kf_run_result_release(kf_run_result *r)
{
    if (!r)
        return;
    free(r->result_json);
    r->result_json = NULL;
}
