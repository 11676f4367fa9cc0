/* kn_tool — a Neuron device tool under an evaluation's limits (see kn_tool.h). */
#include "kn_tool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"

enum { KN_FSIZE_MIB = 2048, KN_NOFILE = 1024, KN_ENV_MAX = 48, KN_ARGV_MAX = 256 };

static double kn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The child: limits, descriptors, environment, exec.  Never returns. */
static void kn_child(const kn_tool_opts *o, int out_fd, int err_fd)
{
    char *env[KN_ENV_MAX + 1], *argv[KN_ARGV_MAX + 1];
    int n = 0, na, devnull;
    const char *keep[] = { "PATH", "LANG", "LC_ALL", NULL };
    struct rlimit rl;

    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
    }
    devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(126);
    closefrom(3);
    rl.rlim_cur = rl.rlim_max = o->timeout_s ? o->timeout_s : RLIM_INFINITY;
    setrlimit(RLIMIT_CPU, &rl);
    rl.rlim_cur = rl.rlim_max = 0;
    setrlimit(RLIMIT_CORE, &rl);
    rl.rlim_cur = rl.rlim_max = (rlim_t)KN_FSIZE_MIB << 20;
    setrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = rl.rlim_max = KN_NOFILE;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (o->cwd && chdir(o->cwd) != 0)
        _exit(126);
    for (int i = 0; keep[i]; i++) {
        const char *v = getenv(keep[i]);
        if (v)
            env[n++] = kf_asprintf("%s=%s", keep[i], v);
    }
    if (o->cwd) {
        env[n++] = kf_asprintf("HOME=%s", o->cwd);
        env[n++] = kf_asprintf("TMPDIR=%s", o->cwd);
    }
    for (int i = 0; o->env && o->env[i] && n < KN_ENV_MAX; i++)
        if (strncmp(o->env[i], "KFORGE_", 7) != 0)
            env[n++] = kf_strdup(o->env[i]);
    env[n] = NULL;
    for (na = 0; na < KN_ARGV_MAX && o->argv[na]; na++)
        argv[na] = kf_strdup(o->argv[na]);
    argv[na] = NULL;
    /* execvpe looks argv[0] up on the PATH of this process (the worker's) */
    execvpe(argv[0], argv, env);
    dprintf(2, "cannot run %s: %s\n", o->argv[0], strerror(errno));
    _exit(127);
}

static void kn_drain(int *fd, kf_buf *b)
{
    char chunk[65536];
    ssize_t r = read(*fd, chunk, sizeof(chunk));
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r <= 0) {
        close(*fd);
        *fd = -1;
        return;
    }
    if (b->len < KN_TOOL_MAX_OUTPUT)
        kf_buf_add(b, chunk, (size_t)r < KN_TOOL_MAX_OUTPUT - b->len ? (size_t)r : KN_TOOL_MAX_OUTPUT - b->len);
}

kf_code kn_tool_run(const kn_tool_opts *o, kn_tool_result *r, kf_err *err)
{
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, status = 0;
    kf_buf bo = KF_BUF_INIT, be = KF_BUF_INIT;
    double t0 = kn_now();
    pid_t pid;
    bool killed = false;

    memset(r, 0, sizeof(*r));
    r->exit_code = -1;
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            if (po[i] >= 0)
                close(po[i]);
            if (pe[i] >= 0)
                close(pe[i]);
        }
        return kf_err_set(err, KF_INTERNAL, "cannot start %s: pipe: %s", o->argv[0], strerror(e));
    }
    fflush(NULL);
    pid = fork();
    if (pid == 0)
        kn_child(o, po[1], pe[1]);
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        close(po[0]);
        close(pe[0]);
        return kf_err_set(err, KF_INTERNAL, "cannot start %s: fork: %s", o->argv[0], strerror(errno));
    }
    while (po[0] >= 0 || pe[0] >= 0) {
        struct pollfd pf[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
        int rc = poll(pf, 2, 100);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc > 0) {
            if (po[0] >= 0 && pf[0].revents)
                kn_drain(&po[0], &bo);
            if (pe[0] >= 0 && pf[1].revents)
                kn_drain(&pe[0], &be);
        }
        if (!killed && o->timeout_s && kn_now() - t0 > (double)o->timeout_s) {
            r->timed_out = killed = true;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
        }
        if (!killed && o->cancelled && o->cancelled(o->ctx)) {
            r->cancelled = killed = true;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
        }
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    /* what the tool left running in its group goes with it */
    kill(-pid, SIGKILL);
    if (po[0] >= 0)
        close(po[0]);
    if (pe[0] >= 0)
        close(pe[0]);
    r->seconds = kn_now() - t0;
    if (WIFEXITED(status)) {
        r->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r->signal = WTERMSIG(status);
        if (r->signal == SIGXCPU)
            r->timed_out = true;
    }
    kf_buf_add(&bo, "", 0);
    kf_buf_add(&be, "", 0);
    r->out = kf_buf_detach(&bo);
    r->err = kf_buf_detach(&be);
    return KF_OK;
}

void kn_tool_release(kn_tool_result *r)
{
    if (!r)
        return;
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

const char *kn_tool_outcome(const kn_tool_result *r, unsigned timeout_s, char *buf, size_t len)
{
    if (r->cancelled)
        snprintf(buf, len, "stopped: the job was cancelled or its lease lost");
    else if (r->timed_out)
        snprintf(buf, len, "stopped at the time limit of %u s (KFORGE_NEURON_TIMEOUT_S)", timeout_s);
    else if (r->signal)
        snprintf(buf, len, "killed by signal %d (%s)", r->signal, strsignal(r->signal));
    else
        snprintf(buf, len, "exit %d", r->exit_code);
    return buf;
}
