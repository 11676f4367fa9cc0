#include "sim_sandbox.h"
#include "kf_alloc.h"
#include "kf_buf.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SB_ASAN 1
#endif
#endif
#ifndef SB_ASAN
#define SB_ASAN 0
#endif

#if defined(__x86_64__)
#define SB_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SB_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

enum {
    SB_RESULT_FD = 3,
    SB_POLL_MS = 50,
    SB_EXIT_PIPE = 120,       /* child could not write to the parent */
    SB_EXIT_NOISOLATION = 121,
};

struct sim_sandbox_out {
    int fd;
};

static const char *const sb_status_names[] = {
#define XX(id, name) name,
    SIM_SANDBOX_STATUS_MAP(XX)
#undef XX
};

const char *sim_sandbox_status_name(sim_sandbox_status s)
{
    return (unsigned)s < sizeof(sb_status_names) / sizeof(sb_status_names[0]) ? sb_status_names[s] : "?";
}

/* ---- child side ------------------------------------------------------ */

static void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(SB_EXIT_PIPE);
        c += w;
        n -= (size_t)w;
    }
}

static void send_frame_head(int fd, char type, uint64_t len)
{
    unsigned char h[9];
    h[0] = (unsigned char)type;
    memcpy(h + 1, &len, 8);
    write_all(fd, h, sizeof(h));
}

void sim_sandbox_send_array(sim_sandbox_out *o, const sim_array *a)
{
    uint16_t nl = (uint16_t)strnlen(a->name, sizeof(a->name) - 1);
    uint8_t meta[2] = { (uint8_t)a->dtype, (uint8_t)a->ndim };
    int64_t count = 1;
    for (int i = 0; i < a->ndim; i++)
        count *= a->shape[i];
    uint64_t bytes = (uint64_t)count * sim_dtype_size(a->dtype);
    send_frame_head(o->fd, 'A', 2 + nl + 2 + 8 * (uint64_t)a->ndim + bytes);
    write_all(o->fd, &nl, 2);
    write_all(o->fd, a->name, nl);
    write_all(o->fd, meta, 2);
    write_all(o->fd, a->shape, 8 * (size_t)a->ndim);
    write_all(o->fd, a->data, bytes);
}

void sim_sandbox_send_json(sim_sandbox_out *o, const char *json)
{
    size_t n = strlen(json);
    send_frame_head(o->fd, 'J', n);
    write_all(o->fd, json, n);
}

static int install_seccomp(void)
{
#ifdef SB_AUDIT_ARCH
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SB_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),   /* x32 ABI */
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
#endif
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
#ifdef __NR_fork
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fork, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_vfork, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
#endif
        /* clone3 passes its flags in memory the filter cannot read: ENOSYS
         * makes glibc fall back to clone, whose flags it can */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1),      /* threads yes, processes no */
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = { (unsigned short)(sizeof(f) / sizeof(f[0])), f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
#else
    return -1;
#endif
}

static void set_limit(int res, rlim_t soft, rlim_t hard)
{
    struct rlimit rl = { soft, hard };
    (void)setrlimit(res, &rl);
}

static void child_main(const sim_sandbox_limits *lim, sim_sandbox_fn fn, void *arg,
                       int res_w, int log_w, int notice_w, pid_t parent)
{
    sim_sandbox_out out = { SB_RESULT_FD };
    kf_err err = KF_ERR_INIT;
    char isolation[32] = "none";
    sigset_t all;
    int hi, devnull;

    setpgid(0, 0);
    /* a caller killed by Ctrl-C or SIGKILL takes its evaluation with it
     * (the child is in its own process group, out of the terminal's reach) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(SB_EXIT_PIPE);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);

    /* fds: 0 </dev/null, 1 and 2 the log pipe, 3 the result pipe, nothing else */
    hi = fcntl(res_w, F_DUPFD, 64);
    int hn = fcntl(notice_w, F_DUPFD, 64);
    int hl = fcntl(log_w, F_DUPFD, 64);
    devnull = open("/dev/null", O_RDONLY);
    if (hi < 0 || hn < 0 || hl < 0 || devnull < 0)
        _exit(SB_EXIT_PIPE);
    dup2(devnull, 0);
    dup2(hl, 1);
    dup2(hl, 2);
    dup2(hi, SB_RESULT_FD);
    dup2(hn, SB_RESULT_FD + 1);
    if (syscall(SYS_close_range, SB_RESULT_FD + 2, ~0u, 0) < 0)
        for (int fd = SB_RESULT_FD + 2; fd < 65536; fd++)
            close(fd);

    set_limit(RLIMIT_CORE, 0, 0);
    if (lim->cpu_seconds)
        set_limit(RLIMIT_CPU, lim->cpu_seconds, (rlim_t)lim->cpu_seconds + 1);
    if (lim->memory_mib && !SB_ASAN)
        set_limit(RLIMIT_AS, (rlim_t)lim->memory_mib << 20, (rlim_t)lim->memory_mib << 20);

    if (!lim->allow_network) {
        int netns = unshare(CLONE_NEWNET) == 0;
        int filt = install_seccomp() == 0;
        snprintf(isolation, sizeof(isolation), "%s",
                 netns && filt ? "netns+seccomp" : filt ? "seccomp" : netns ? "netns" : "none");
        if (!netns && !filt) {
            fprintf(stderr, "kforge sandbox: cannot cut the network off (unshare(CLONE_NEWNET) "
                            "and seccomp both refused); not running untrusted code\n");
            fflush(stderr);
            _exit(SB_EXIT_NOISOLATION);
        }
    }
    write_all(SB_RESULT_FD + 1, isolation, sizeof(isolation));
    close(SB_RESULT_FD + 1);

    kf_code rc = fn(arg, &out, &err);
    if (rc != KF_OK && !err.msg[0])
        snprintf(err.msg, sizeof(err.msg), "%s", kf_code_title(rc));
    uint32_t code = (uint32_t)rc;
    size_t ml = rc == KF_OK ? 0 : strlen(err.msg);
    send_frame_head(SB_RESULT_FD, 'R', 4 + ml);
    write_all(SB_RESULT_FD, &code, 4);
    write_all(SB_RESULT_FD, err.msg, ml);
    fflush(stdout);
    fflush(stderr);
    _exit(0);
}

/* ---- parent side ----------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Read what is available; 1 on EOF, 0 on data or EAGAIN. */
static int drain(int fd, kf_buf *b, size_t cap, int *over)
{
    char tmp[65536];
    for (;;) {
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN ? 0 : 1;
        if (n == 0)
            return 1;
        if (over && b->len + (size_t)n > cap) {
            *over = 1;
            return 1;
        }
        kf_buf_add(b, tmp, (size_t)n);
        if (!over && b->len > 2 * cap) {          /* log: keep the tail */
            memmove(b->data, b->data + b->len - cap, cap);
            b->len = cap;
            b->data[cap] = '\0';
        }
    }
}

static long rss_kib(pid_t pid)
{
    char path[64], buf[128];
    long pages = 0, resident = 0;
    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%ld %ld", &pages, &resident) != 2)
        return 0;
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int parse_frames(const kf_buf *b, sim_sandbox_result *r, int *have_result, char *msg, size_t msgcap)
{
    const unsigned char *p = (const unsigned char *)b->data, *end = p + b->len;
    size_t cap = 0;

    while (p < end) {
        uint64_t len;
        char type;
        if ((size_t)(end - p) < 9)
            return snprintf(msg, msgcap, "truncated frame header"), -1;
        type = (char)p[0];
        memcpy(&len, p + 1, 8);
        p += 9;
        if (len > (uint64_t)(end - p))
            return snprintf(msg, msgcap, "frame of %llu bytes overruns the data", (unsigned long long)len), -1;
        const unsigned char *q = p, *fe = p + len;
        p = fe;
        if (type == 'J') {
            free(r->json);
            r->json = kf_strndup((const char *)q, (size_t)len);
        } else if (type == 'R') {
            uint32_t code;
            if (len < 4)
                return snprintf(msg, msgcap, "short result frame"), -1;
            memcpy(&code, q, 4);
            if (code >= KF__CODE_COUNT)
                return snprintf(msg, msgcap, "unknown result code %u", code), -1;
            r->child_code = (kf_code)code;
            snprintf(r->reason, sizeof(r->reason), "%.*s", (int)(len - 4), (const char *)q + 4);
            *have_result = 1;
        } else if (type == 'A') {
            sim_array a;
            uint16_t nl;
            memset(&a, 0, sizeof(a));
            if (len < 4)
                return snprintf(msg, msgcap, "short array frame"), -1;
            memcpy(&nl, q, 2);
            q += 2;
            if (nl >= sizeof(a.name) || (uint64_t)(fe - q) < (uint64_t)nl + 2)
                return snprintf(msg, msgcap, "bad array name length %u", nl), -1;
            memcpy(a.name, q, nl);
            q += nl;
            a.dtype = (sim_dtype)q[0];
            a.ndim = q[1];
            q += 2;
            if ((unsigned)a.dtype >= SIM_DT__COUNT || a.ndim > 8 ||
                (uint64_t)(fe - q) < 8ull * (uint64_t)a.ndim)
                return snprintf(msg, msgcap, "bad array header"), -1;
            memcpy(a.shape, q, 8 * (size_t)a.ndim);
            q += (size_t)8 * (size_t)a.ndim;
            uint64_t count = 1;
            for (int i = 0; i < a.ndim; i++) {
                if (a.shape[i] < 0 || (a.shape[i] && count > UINT64_MAX / 16 / (uint64_t)a.shape[i]))
                    return snprintf(msg, msgcap, "bad array shape"), -1;
                count *= (uint64_t)a.shape[i];
            }
            if (count * sim_dtype_size(a.dtype) != (uint64_t)(fe - q))
                return snprintf(msg, msgcap, "array '%s' payload size mismatch", a.name), -1;
            a.data = kf_malloc((size_t)(fe - q) + 1);
            memcpy(a.data, q, (size_t)(fe - q));
            if (r->n_arrays == cap) {
                cap = cap ? cap * 2 : 8;
                r->arrays = kf_realloc(r->arrays, cap * sizeof(*r->arrays));
            }
            r->arrays[r->n_arrays++] = a;
        } else {
            return snprintf(msg, msgcap, "unknown frame type 0x%02x", (unsigned char)type), -1;
        }
    }
    return 0;
}

static int mentions_oom(const char *s)
{
    return s && (strstr(s, "out of memory") || strstr(s, "MemoryError") ||
                 strstr(s, "Cannot allocate memory") || strstr(s, "std::bad_alloc"));
}

static void classify(const sim_sandbox_limits *lim, int status, int killed_wall, int killed_mem,
                     int have_result, int proto_bad, const char *proto_msg, sim_sandbox_result *r)
{
    char child_msg[sizeof(r->reason)];
    snprintf(child_msg, sizeof(child_msg), "%s", r->reason);
    r->reason[0] = '\0';
    r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;

    if (killed_wall) {
        r->status = SIM_SB_WALL_LIMIT;
        snprintf(r->reason, sizeof(r->reason), "wall-clock limit of %.1f s exceeded",
                 lim->wall_ms / 1000.0);
    } else if (killed_mem) {
        r->status = SIM_SB_MEMORY_LIMIT;
        snprintf(r->reason, sizeof(r->reason), "memory limit of %u MiB exceeded", lim->memory_mib);
    } else if (proto_bad) {
        r->status = SIM_SB_PROTOCOL;
        snprintf(r->reason, sizeof(r->reason), "the evaluation sent malformed results: %s", proto_msg);
    } else if (r->term_signal) {
        int sig = r->term_signal;
        if (lim->cpu_seconds && (sig == SIGXCPU || (sig == SIGKILL && r->cpu_seconds >= lim->cpu_seconds))) {
            r->status = SIM_SB_CPU_LIMIT;
            snprintf(r->reason, sizeof(r->reason), "CPU time limit of %u s exceeded", lim->cpu_seconds);
        } else if (lim->memory_mib && mentions_oom(r->log)) {
            r->status = SIM_SB_MEMORY_LIMIT;
            snprintf(r->reason, sizeof(r->reason), "memory limit of %u MiB exceeded (killed by SIG%s)",
                     lim->memory_mib, sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
        } else {
            r->status = SIM_SB_CRASHED;
            snprintf(r->reason, sizeof(r->reason), "killed by signal SIG%s (%s)",
                     sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", strsignal(sig));
        }
    } else if (have_result) {
        if (r->child_code == KF_OK) {
            r->status = SIM_SB_OK;
        } else if (lim->memory_mib && mentions_oom(child_msg)) {
            r->status = SIM_SB_MEMORY_LIMIT;
            snprintf(r->reason, sizeof(r->reason), "memory limit of %u MiB exceeded: %.900s",
                     lim->memory_mib, child_msg);
        } else {
            r->status = SIM_SB_FAILED;
            snprintf(r->reason, sizeof(r->reason), "%s", child_msg);
        }
    } else if (r->exit_code == SB_EXIT_NOISOLATION) {
        r->status = SIM_SB_FAILED;
        snprintf(r->reason, sizeof(r->reason),
                 "the sandbox could not cut the network off (no network namespace, no seccomp)");
    } else if (lim->memory_mib && mentions_oom(r->log)) {
        r->status = SIM_SB_MEMORY_LIMIT;
        snprintf(r->reason, sizeof(r->reason), "memory limit of %u MiB exceeded (exit status %d)",
                 lim->memory_mib, r->exit_code);
    } else {
        r->status = SIM_SB_EXITED;
        snprintf(r->reason, sizeof(r->reason), "the evaluation exited with status %d before reporting",
                 r->exit_code);
    }
}

kf_code sim_sandbox_run(const sim_sandbox_limits *lim, sim_sandbox_fn fn, void *arg,
                        sim_sandbox_result *res, kf_err *err)
{
    int res_p[2] = { -1, -1 }, log_p[2] = { -1, -1 }, note_p[2] = { -1, -1 };
    kf_buf rbuf = KF_BUF_INIT, lbuf = KF_BUF_INIT;
    size_t cap = lim->max_result_bytes ? lim->max_result_bytes : (size_t)1 << 30;
    int killed_wall = 0, killed_mem = 0, over = 0, have_result = 0, proto_bad = 0;
    int res_eof = 0, log_eof = 0, exited = 0, status = 0, pidfd = -1;
    char proto_msg[256] = "";
    struct rusage ru;
    double t0 = now_s(), deadline = t0 + lim->wall_ms / 1000.0, next_rss = 0;
    pid_t pid, parent;

    memset(res, 0, sizeof(*res));
    memset(&ru, 0, sizeof(ru));
    res->exit_code = -1;
    snprintf(res->isolation, sizeof(res->isolation), "none");
    if (pipe2(res_p, O_CLOEXEC) < 0 || pipe2(log_p, O_CLOEXEC) < 0 || pipe2(note_p, O_CLOEXEC) < 0) {
        kf_err_set(err, KF_INTERNAL, "sandbox: pipe: %s", strerror(errno));
        goto fail;
    }
    fflush(stdout);
    fflush(stderr);
    parent = getpid();
    pid = fork();
    if (pid < 0) {
        kf_err_set(err, KF_INTERNAL, "sandbox: fork: %s (is the process limit reached?)", strerror(errno));
        goto fail;
    }
    if (pid == 0)
        child_main(lim, fn, arg, res_p[1], log_p[1], note_p[1], parent);   /* never returns */

    close(res_p[1]);
    close(log_p[1]);
    close(note_p[1]);
    setpgid(pid, pid);           /* also done by the child: no race on kill(-pid) */
    fcntl(res_p[0], F_SETFL, O_NONBLOCK);
    fcntl(log_p[0], F_SETFL, O_NONBLOCK);
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

    while (!exited) {
        struct pollfd pf[3];
        int n = 0, ires = -1, ilog = -1, ipid = -1;
        double now = now_s();

        if (lim->wall_ms && now >= deadline && !killed_wall) {
            killed_wall = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
        }
        if (lim->memory_mib && now >= next_rss) {
            next_rss = now + SB_POLL_MS / 1000.0;
            if (!killed_mem && !killed_wall && rss_kib(pid) > (long)lim->memory_mib * 1024) {
                killed_mem = 1;
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
            }
        }
        if (!res_eof) { pf[n].fd = res_p[0]; pf[n].events = POLLIN; ires = n++; }
        if (!log_eof) { pf[n].fd = log_p[0]; pf[n].events = POLLIN; ilog = n++; }
        if (pidfd >= 0) { pf[n].fd = pidfd; pf[n].events = POLLIN; ipid = n++; }
        if (poll(pf, (nfds_t)n, SB_POLL_MS) < 0 && errno != EINTR) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            wait4(pid, &status, 0, &ru);
            break;
        }
        if (ires >= 0 && pf[ires].revents) {
            if (drain(res_p[0], &rbuf, cap, &over))
                res_eof = 1;
            if (over && !proto_bad) {
                proto_bad = 1;
                snprintf(proto_msg, sizeof(proto_msg), "results larger than %zu bytes", cap);
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
            }
        }
        if (ilog >= 0 && pf[ilog].revents && drain(log_p[0], &lbuf, SIM_SANDBOX_LOG_TAIL, NULL))
            log_eof = 1;
        if (ipid < 0 || pf[ipid].revents) {
            siginfo_t si;
            memset(&si, 0, sizeof(si));
            /* peek first: while the child is an unreaped zombie its pid (and
             * so its process group id) cannot be reused, so killing stray
             * grandchildren of the group is safe */
            if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
                kill(-pid, SIGKILL);
                if (wait4(pid, &status, 0, &ru) == pid)
                    exited = 1;
            }
        }
    }
    /* The child is gone; whatever it wrote is in the pipes: take what is
     * left without waiting for writers that might never close. */
    if (!res_eof && !proto_bad)
        drain(res_p[0], &rbuf, cap, &over);
    if (over && !proto_bad) {
        proto_bad = 1;
        snprintf(proto_msg, sizeof(proto_msg), "results larger than %zu bytes", cap);
    }
    if (!log_eof)
        drain(log_p[0], &lbuf, SIM_SANDBOX_LOG_TAIL, NULL);

    {
        char iso[32] = "";
        ssize_t got = read(note_p[0], iso, sizeof(iso));
        if (got == (ssize_t)sizeof(iso) && memchr(iso, '\0', sizeof(iso)))
            snprintf(res->isolation, sizeof(res->isolation), "%s", iso);
    }
    res->wall_seconds = now_s() - t0;
    res->cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    res->max_rss_kib = ru.ru_maxrss;
    if (lbuf.len > SIM_SANDBOX_LOG_TAIL) {
        memmove(lbuf.data, lbuf.data + lbuf.len - SIM_SANDBOX_LOG_TAIL, SIM_SANDBOX_LOG_TAIL);
        lbuf.len = SIM_SANDBOX_LOG_TAIL;
        lbuf.data[lbuf.len] = '\0';
    }
    res->log = kf_strndup(lbuf.data, lbuf.len);
    if (!proto_bad && parse_frames(&rbuf, res, &have_result, proto_msg, sizeof(proto_msg)) < 0)
        proto_bad = 1;
    if (proto_bad) {
        for (size_t i = 0; i < res->n_arrays; i++)
            free(res->arrays[i].data);
        free(res->arrays);
        res->arrays = NULL;
        res->n_arrays = 0;
    }
    classify(lim, status, killed_wall, killed_mem, have_result, proto_bad, proto_msg, res);
    close(res_p[0]);
    close(log_p[0]);
    close(note_p[0]);
    if (pidfd >= 0)
        close(pidfd);
    kf_buf_release(&rbuf);
    kf_buf_release(&lbuf);
    return KF_OK;

fail:
    for (int i = 0; i < 2; i++) {
        if (res_p[i] >= 0) close(res_p[i]);
        if (log_p[i] >= 0) close(log_p[i]);
        if (note_p[i] >= 0) close(note_p[i]);
    }
    return KF_INTERNAL;
}

void sim_sandbox_result_release(sim_sandbox_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_arrays; i++)
        free(r->arrays[i].data);
    free(r->arrays);
    free(r->json);
    free(r->log);
    memset(r, 0, sizeof(*r));
    r->exit_code = -1;
}
