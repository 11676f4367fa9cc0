/*
 * sim_sandbox — evaluate untrusted work (a user's kernel, a user's NumPy
 * reference) in a child process that cannot leave its box, and get its
 * results back.  docs/security.md has the threat model; this is the how.
 *
 * sim_sandbox_run() forks a child C, which becomes its own process group
 * (and gets SIGKILL if the caller dies: PR_SET_PDEATHSIG), resets signal
 * handlers, keeps only stdin (/dev/null), its log pipe (stdout and stderr)
 * and its result pipes, then, in the default "strict" mode:
 *   - unshares a user namespace and new mount, PID, network, IPC and UTS
 *     namespaces.  The caller writes the user namespace's maps: one inner id
 *     (SIM_SANDBOX_INNER_ID) maps to the unprivileged KFORGE_SANDBOX_UID/GID
 *     when the caller is root, or to the first subordinate id of the
 *     caller's user (/etc/subuid, /etc/subgid, through newuidmap/newgidmap)
 *     otherwise; never to the caller's own user;
 *   - forks G, PID 1 of the new PID namespace (C waits for it and exits as
 *     it did; the caller watches G's resident memory through its pid).  G
 *     builds a fresh root on a tmpfs: /usr, the /bin /lib... links, a few
 *     /etc files the dynamic loader and OpenBLAS need, /dev/{null,zero,full,
 *     random,urandom}, the simulator's targets folder and the caller's
 *     lim->ro_paths, all read-only; a private writable /kforge-work (HOME
 *     and TMPDIR) on a tmpfs of lim->work_mib; the caller's working folder
 *     as an empty read-only folder to start in (relative paths to ro_paths
 *     keep working); no /proc, no /sys, nothing else of the machine.  It
 *     pivots into it, drops the old root, becomes the inner id with no
 *     supplementary groups, drops every capability (bounding, ambient,
 *     effective, permitted), sets RLIMIT_CORE 0, RLIMIT_CPU, RLIMIT_AS (not
 *     under AddressSanitizer, whose shadow mappings exceed any address-space
 *     limit; the RSS watchdog below still applies), RLIMIT_FSIZE (the work
 *     folder's size), RLIMIT_NOFILE and RLIMIT_NPROC (threads); replaces
 *     the environment with an allowlist (PATH, HOME and TMPDIR=/kforge-work,
 *     LANG, and the OPENBLAS_/OMP_ threading knobs; never KFORGE_*), after
 *     zeroing the inherited environment's bytes; sets PR_SET_NO_NEW_PRIVS
 *     and installs a seccomp allowlist (libseccomp): the file, memory,
 *     time, signal and thread calls CPython, NumPy and the simulator make;
 *     everything else, ptrace, process_vm_*, pidfd_*, kill outside itself,
 *     mount, unshare, setns, bpf, perf_event_open, keyctl, userfaultfd,
 *     io_uring_*, socket, execve, fork and any call added to the kernel
 *     later, fails with EPERM (clone3 with ENOSYS, so glibc falls back to
 *     clone, whose flags the filter reads: threads yes, processes no);
 *   - runs fn(arg, out), which sends arrays and a JSON summary through
 *     sim_sandbox_send_*(), and _exit()s.
 * A step that fails ends the evaluation as SIM_SB_FAILED with a reason that
 * names the step and what to enable (sim_sandbox_probe() runs the same steps
 * once, for a daemon that must refuse to start without them).
 *
 * KFORGE_SANDBOX=unconfined (the only way past a machine that lacks user
 * namespaces) keeps the process limits (rlimits, fd closing, the watchdog)
 * and a best-effort network cut, logs a warning on every evaluation, and
 * reports isolation "unconfined".  Never run other people's kernels so.
 *
 * The parent marks itself non-dumpable (PR_SET_DUMPABLE 0) so that no
 * process of its user can ptrace it or read its memory, polls the pipes
 * and the child's pidfd, kills the whole process group with SIGKILL at the
 * wall-clock limit or when G's resident memory passes memory_mib (checked
 * every 50 ms), bounds what it accepts (max_result_bytes), validates every
 * frame, then reaps the child and classifies the outcome
 * (sim_sandbox_status) with a reason a user reads: "killed by signal SIGSEGV
 * (Segmentation fault)", "CPU time limit of 2 s exceeded", "memory limit of
 * 256 MiB exceeded", "wall-clock limit of 1.0 s exceeded".  A failed
 * evaluation is a result, not an error: the caller keeps going.  The work
 * folder is a tmpfs of the evaluation's own mount namespace: it is gone
 * when the evaluation ends, however it ends.
 *
 * Ownership: the result owns its arrays, JSON and log (release with
 * sim_sandbox_result_release, NULL-safe).  lim->ro_paths is borrowed for
 * the call.  Returns KF_OK whenever the child was started (look at
 * res->status); KF_INTERNAL when pipe/fork failed.  Not thread-safe with
 * respect to other forks in the same process.
 */
#ifndef SIM_SANDBOX_H
#define SIM_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "kf_error.h"
#include "sim_run.h"

enum {
    SIM_SANDBOX_LOG_TAIL = 16384,
    SIM_SANDBOX_INNER_ID = 1000,        /* the uid and gid user code sees */
    SIM_SANDBOX_WORK_MIB = 256,         /* default size of /kforge-work */
    SIM_SANDBOX_MAX_FILES = 256,        /* default RLIMIT_NOFILE */
    SIM_SANDBOX_MAX_THREADS = 64,       /* default RLIMIT_NPROC */
};

typedef struct sim_sandbox_limits {
    unsigned cpu_seconds;        /* 0 = no CPU limit */
    unsigned memory_mib;         /* 0 = no memory limit */
    unsigned wall_ms;            /* 0 = no wall-clock limit */
    size_t   max_result_bytes;   /* 0 = 1 GiB */
    unsigned work_mib;           /* size of /kforge-work and RLIMIT_FSIZE; 0 = SIM_SANDBOX_WORK_MIB */
    unsigned max_files;          /* RLIMIT_NOFILE; 0 = SIM_SANDBOX_MAX_FILES */
    unsigned max_threads;        /* RLIMIT_NPROC; 0 = SIM_SANDBOX_MAX_THREADS */
    /* NULL-terminated list of files or folders the evaluation may read, at
     * the same absolute paths (relative ones are resolved against the
     * caller's working folder); missing ones are left out. */
    const char *const *ro_paths;
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
    char       isolation[32];    /* "strict", or "unconfined" (KFORGE_SANDBOX=unconfined) */
} sim_sandbox_result;

const char *sim_sandbox_status_name(sim_sandbox_status s);

/* Child-side channel to the parent. */
typedef struct sim_sandbox_out sim_sandbox_out;

/* Send one array (copied into the pipe; the caller keeps it).  Its shape is
 * checked first (sim_array_check, SIM_ARRAY_MAX_BYTES): an array whose
 * element count overflows or is too large is not sent, and the call returns
 * that error so the child can report it. */
kf_code sim_sandbox_send_array(sim_sandbox_out *o, const sim_array *a, kf_err *err);
/* Send a JSON summary (the last one sent wins). */
void sim_sandbox_send_json(sim_sandbox_out *o, const char *json);

typedef kf_code (*sim_sandbox_fn)(void *arg, sim_sandbox_out *out, kf_err *err);

kf_code sim_sandbox_run(const sim_sandbox_limits *lim, sim_sandbox_fn fn, void *arg,
                        sim_sandbox_result *res, kf_err *err);

void sim_sandbox_result_release(sim_sandbox_result *r);

/* The name a sandboxed child must open for a path its caller lists in
 * lim->ro_paths.  The sandbox mounts each path at its real location
 * (symlinks and ".." resolved), so a name that goes through a folder the
 * sandbox does not have (e.g. build/bin/../../kernels/x.py, or a symlinked
 * folder) does not open inside it.  Returns a malloc'd copy of the real
 * path; of path itself when it is a relative name that needs no resolving
 * (the sandbox starts in the caller's folder), or when it cannot be
 * resolved (the child's open then fails with its usual message); NULL for
 * NULL.  The caller frees it. */
char *sim_sandbox_real_path(const char *path);

/* True when KFORGE_SANDBOX=unconfined (read at each call). */
bool sim_sandbox_unconfined(void);

/* Build the sandbox once with a trivial evaluation and check from inside it
 * that it holds (no capabilities, not the caller's uid, no network, no
 * /proc, NoNewPrivs).  KF_OK when it does, or in unconfined mode (with a
 * warning logged); KF_UNAVAILABLE naming the missing mechanism and how to
 * provide it otherwise.  Daemons call this at start-up and refuse to run. */
kf_code sim_sandbox_probe(kf_err *err);

#endif
