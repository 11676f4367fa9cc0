/*
 * sim_sandbox — evaluate untrusted work (a user's kernel, a user's NumPy
 * reference) in a child process with limits, and get its results back.
 *
 * sim_sandbox_run() forks.  The child:
 *   - becomes its own process group (and gets SIGKILL if the caller dies:
 *     PR_SET_PDEATHSIG), resets signal handlers to the defaults,
 *     closes every inherited file descriptor except stdin and its two pipes
 *     (so a worker's Redis or HTTP sockets are out of reach);
 *   - gets RLIMIT_CPU = cpu_seconds (soft; hard one second later) and
 *     RLIMIT_AS = memory_mib (not under AddressSanitizer, whose shadow
 *     mappings exceed any address-space limit; the parent's RSS watchdog
 *     below still applies), RLIMIT_CORE = 0;
 *   - loses the network twice over: unshare(CLONE_NEWNET) when permitted
 *     (root or user namespaces: a fresh namespace with only a down loopback),
 *     and always a seccomp filter that makes socket() fail with EPERM for any
 *     family but AF_UNIX and io_uring_setup() fail with EPERM (io_uring can
 *     open sockets).  If neither can be installed the child refuses to run
 *     the function (status FAILED, reason says why).  The same filter stops
 *     new processes (fork, vfork and clone without CLONE_THREAD fail with
 *     EPERM; threads still start), so a kernel cannot fork-bomb the machine
 *     or leave processes behind;
 *   - runs fn(arg, out), which sends arrays and a JSON summary through
 *     sim_sandbox_send_*(), and _exit()s.  Its stdout and stderr go to a pipe
 *     whose last SIM_SANDBOX_LOG_TAIL bytes the parent keeps.
 * The parent polls both pipes and the child's pidfd, kills the whole process
 * group with SIGKILL at the wall-clock limit or when the child's resident
 * memory passes memory_mib (checked every 50 ms), bounds what it accepts
 * (max_result_bytes), validates every frame, then reaps the child and
 * classifies the outcome (sim_sandbox_status) with a reason a user reads:
 * "killed by signal SIGSEGV (Segmentation fault)", "CPU time limit of 2 s
 * exceeded", "memory limit of 256 MiB exceeded", "wall-clock limit of 1.0 s
 * exceeded".  A failed evaluation is a result, not an error: the caller keeps
 * going.
 *
 * Ownership: the result owns its arrays, JSON and log (release with
 * sim_sandbox_result_release, NULL-safe).  Returns KF_OK whenever the child
 * was started (look at res->status); KF_INTERNAL when pipe/fork failed.
 * Not thread-safe with respect to other forks in the same process.
 */
#ifndef SIM_SANDBOX_H
#define SIM_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "kf_error.h"
#include "sim_run.h"

enum {
    SIM_SANDBOX_LOG_TAIL = 16384,
};

typedef struct sim_sandbox_limits {
    unsigned cpu_seconds;        /* 0 = no CPU limit */
    unsigned memory_mib;         /* 0 = no memory limit */
    unsigned wall_ms;            /* 0 = no wall-clock limit */
    bool     allow_network;      /* true skips both network barriers (tests only use false) */
    size_t   max_result_bytes;   /* 0 = 1 GiB */
} sim_sandbox_limits;

#define SIM_SANDBOX_STATUS_MAP(XX)                                                      \
    XX(OK,           "ok")            /* fn returned KF_OK */                           \
    XX(FAILED,       "failed")        /* fn returned an error: reason is its message */ \
    XX(CRASHED,      "crashed")       /* killed by a signal */                          \
    XX(CPU_LIMIT,    "cpu_limit")                                                       \
    XX(MEMORY_LIMIT, "memory_limit")                                                    \
    XX(WALL_LIMIT,   "wall_limit")                                                      \
    XX(EXITED,       "exited")        /* exited without reporting */                    \
    XX(PROTOCOL,     "protocol")      /* sent malformed or oversized results */

typedef enum sim_sandbox_status {
#define XX(id, name) SIM_SB_##id,
    SIM_SANDBOX_STATUS_MAP(XX)
#undef XX
} sim_sandbox_status;

typedef struct sim_sandbox_result {
    sim_sandbox_status status;
    char       reason[1024];     /* "" when OK */
    kf_code    child_code;       /* what fn returned (KF_OK when it did not return) */
    int        term_signal;      /* 0 unless killed by a signal */
    int        exit_code;        /* -1 unless exited */
    sim_array *arrays;           /* sent by the child, in order */
    size_t     n_arrays;
    char      *json;             /* last JSON summary sent, or NULL */
    char      *log;              /* tail of the child's stdout+stderr ("" if none) */
    double     wall_seconds, cpu_seconds;
    long       max_rss_kib;      /* the child's peak resident set */
    char       isolation[32];    /* "netns+seccomp", "seccomp", "netns" or "none" */
} sim_sandbox_result;

const char *sim_sandbox_status_name(sim_sandbox_status s);

/* Child-side channel to the parent. */
typedef struct sim_sandbox_out sim_sandbox_out;

/* Send one array (copied into the pipe; the caller keeps it). */
void sim_sandbox_send_array(sim_sandbox_out *o, const sim_array *a);
/* Send a JSON summary (the last one sent wins). */
void sim_sandbox_send_json(sim_sandbox_out *o, const char *json);

typedef kf_code (*sim_sandbox_fn)(void *arg, sim_sandbox_out *out, kf_err *err);

kf_code sim_sandbox_run(const sim_sandbox_limits *lim, sim_sandbox_fn fn, void *arg,
                        sim_sandbox_result *res, kf_err *err);

void sim_sandbox_result_release(sim_sandbox_result *r);

#endif
