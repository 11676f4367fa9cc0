#include "sim_sandbox.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_log.h"
#include "kf_num.h"
#include "sim_target.h"

#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <termios.h>
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

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#endif

extern char **environ;

enum {
    SB_RESULT_FD = 3,         /* frames to the parent */
    SB_NOTE_FD = 4,           /* child -> parent: handshake, G's pid, isolation */
    SB_SYNC_FD = 5,           /* parent -> child: the id maps are written */
    SB_POLL_MS = 50,
    SB_HANDSHAKE_MS = 10000,
    SB_EXIT_PIPE = 120,       /* child could not write to the parent */
    SB_EXIT_NOISOLATION = 121,
};

/* The sandbox's own messages in the log start with this, so the parent can
 * tell a set-up failure from the user's output. */
#define SB_TAG "kforge sandbox: "
/* The private writable folder (a tmpfs); /tmp links to it. */
#define SB_WORK "/kforge-work"

struct sim_sandbox_out {
    int fd;
};

/* The simulator's targets folder, resolved by the parent (the child has
 * neither /proc nor the configuration once its environment is scrubbed). */
static char sb_targets[PATH_MAX];

static const char *const sb_status_names[] = {
#define XX(id, name) name,
    SIM_SANDBOX_STATUS_MAP(XX)
#undef XX
};

const char *sim_sandbox_status_name(sim_sandbox_status s)
{
    return (unsigned)s < sizeof(sb_status_names) / sizeof(sb_status_names[0]) ? sb_status_names[s] : "?";
}

bool sim_sandbox_unconfined(void)
{
    const char *m = kf_config_str(KF_CFG_SANDBOX);
    return m && strcmp(m, "unconfined") == 0;
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

kf_code sim_sandbox_send_array(sim_sandbox_out *o, const sim_array *a, kf_err *err)
{
    uint16_t nl = (uint16_t)strnlen(a->name, sizeof(a->name) - 1);
    uint8_t meta[2] = { (uint8_t)a->dtype, (uint8_t)a->ndim };
    int64_t count = 0;
    kf_code rc = sim_array_check(a, SIM_ARRAY_MAX_BYTES, &count, err);
    if (rc)
        return rc;
    uint64_t bytes = (uint64_t)count * sim_dtype_size(a->dtype);
    send_frame_head(o->fd, 'A', 2 + nl + 2 + 8 * (uint64_t)a->ndim + bytes);
    write_all(o->fd, &nl, 2);
    write_all(o->fd, a->name, nl);
    write_all(o->fd, meta, 2);
    write_all(o->fd, a->shape, 8 * (size_t)a->ndim);
    write_all(o->fd, a->data, bytes);
    return KF_OK;
}

void sim_sandbox_send_json(sim_sandbox_out *o, const char *json)
{
    size_t n = strlen(json);
    send_frame_head(o->fd, 'J', n);
    write_all(o->fd, json, n);
}

/* A set-up step failed: say which, with errno, and what to do, then end the
 * evaluation.  Only async-signal-safe calls after fork. */
static _Noreturn void sb_die(const char *step, const char *hint)
{
    char msg[768];
    int e = errno;
    int n = snprintf(msg, sizeof(msg), SB_TAG "%s failed: %s%s%s\n", step, strerror(e),
                     hint ? "; " : "", hint ? hint : "");
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    _exit(SB_EXIT_NOISOLATION);
}

static const char sb_userns_hint[] =
    "this machine does not let kforge create user namespaces: enable them "
    "(sysctl -w user.max_user_namespaces=15000; sysctl -w kernel.unprivileged_userns_clone=1 "
    "where that knob exists; in Docker run with --security-opt seccomp=unconfined "
    "--security-opt apparmor=unconfined, see docs/security.md) or set KFORGE_SANDBOX=unconfined "
    "to run without isolation (never for other people's kernels)";

static void set_limit(int res, rlim_t soft, rlim_t hard)
{
    struct rlimit rl = { soft, hard };
    (void)setrlimit(res, &rl);
}

/* mkdir -p below the new root (which is ours: a fresh tmpfs). */
static int sb_mkdirs(const char *path)
{
    char p[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof(p))
        return errno = ENAMETOOLONG, -1;
    memcpy(p, path, n + 1);
    for (char *q = p + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return -1;
        *q = '/';
    }
    return mkdir(p, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static unsigned long sb_locked_flags(const char *path)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(path, &sv) < 0)
        return 0;
    if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
    return f;
}

/* An empty folder or file at dst (in the new root) to mount on. */
static int sb_mountpoint(char *dst, bool dir)
{
    char *slash;
    int fd;
    if (dir)
        return sb_mkdirs(dst);
    slash = strrchr(dst, '/');
    *slash = '\0';
    fd = sb_mkdirs(dst);
    *slash = '/';
    if (fd < 0)
        return -1;
    fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* Bind /oldroot<path> at /newroot<path>, read-only unless rw.  A source
 * that does not exist is skipped (0); a path already visible in the new
 * root (inside /usr, say) needs no mount of its own. */
static int sb_bind(const char *path, bool rw)
{
    char src[PATH_MAX], dst[PATH_MAX];
    struct stat st, seen;
    if (snprintf(src, sizeof(src), "/oldroot%s", path) >= (int)sizeof(src) ||
        snprintf(dst, sizeof(dst), "/newroot%s", path) >= (int)sizeof(dst))
        return errno = ENAMETOOLONG, -1;
    if (stat(src, &st) < 0)
        return 0;
    if (lstat(dst, &seen) == 0)
        return 0;
    if (sb_mountpoint(dst, S_ISDIR(st.st_mode)) < 0)
        return -1;
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        return -1;
    if (!rw && mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | sb_locked_flags(dst), NULL) < 0)
        return -1;
    return 0;
}

/* Attach at /newroot<path> the tree `fd` that open_tree() cloned of
 * <path> before G gave up the caller's identity, read-only. */
static int sb_attach(int fd, const char *path)
{
    char dst[PATH_MAX];
    struct stat st, seen;
    if (snprintf(dst, sizeof(dst), "/newroot%s", path) >= (int)sizeof(dst))
        return errno = ENAMETOOLONG, -1;
    if (fstat(fd, &st) < 0)
        return -1;
    if (lstat(dst, &seen) == 0)
        return 0;
    if (sb_mountpoint(dst, S_ISDIR(st.st_mode)) < 0)
        return -1;
    if (syscall(SYS_move_mount, fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return -1;
    return mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | sb_locked_flags(dst), NULL);
}

enum { SB_MAX_TREES = 16 };

typedef struct sb_trees {
    int         fd[SB_MAX_TREES];
    const char *path[SB_MAX_TREES];
    int         n;
} sb_trees;

/* Clone the caller's paths while G still has the caller's identity (so a
 * 0700 job folder of the worker's is no obstacle); missing ones are left out. */
static void sb_clone_trees(const sim_sandbox_limits *lim, sb_trees *t)
{
    t->n = 0;
    for (size_t i = 0; lim->ro_paths && lim->ro_paths[i] && t->n < SB_MAX_TREES - 1; i++) {
        int fd = (int)syscall(SYS_open_tree, AT_FDCWD, lim->ro_paths[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (fd >= 0) {
            t->fd[t->n] = fd;
            t->path[t->n++] = lim->ro_paths[i];
        } else if (errno != ENOENT && errno != ENOTDIR) {
            sb_die("open_tree of a kernel or reference file", "the kernel needs open_tree(2) (Linux 5.2 or later)");
        }
    }
    if (sb_targets[0]) {
        int fd = (int)syscall(SYS_open_tree, AT_FDCWD, sb_targets, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (fd < 0)
            sb_die("open_tree of the simulator's targets folder", NULL);
        t->fd[t->n] = fd;
        t->path[t->n++] = sb_targets;
    }
}

/* The top-level links of a merged /usr (bin -> usr/bin ...), or the
 * folders themselves where /usr is not merged. */
static void sb_top(const char *name)
{
    char src[64], dst[64], target[PATH_MAX];
    struct stat st;
    snprintf(src, sizeof(src), "/oldroot/%s", name);
    snprintf(dst, sizeof(dst), "/newroot/%s", name);
    if (lstat(src, &st) < 0)
        return;
    if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlink(src, target, sizeof(target) - 1);
        if (n <= 0)
            return;
        target[n] = '\0';
        if (symlink(target, dst) < 0)
            sb_die("symlink in the new root", NULL);
    } else if (S_ISDIR(st.st_mode)) {
        char path[64];
        snprintf(path, sizeof(path), "/%s", name);
        if (sb_bind(path, false) < 0)
            sb_die("bind-mounting a system folder", NULL);
    }
}

/* G, as root of its user namespace: a new root with exactly what an
 * evaluation needs, then pivot into it. */
static void sb_build_root(const sb_trees *trees, unsigned work_mib)
{
    static const char *const tops[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32", NULL };
    static const char *const sys_ro[] = {
        "/usr", "/etc/ld.so.cache", "/etc/alternatives", NULL,
    };
    static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", NULL };
    char opts[96], cwd[PATH_MAX], dir[PATH_MAX + 16];
    bool have_cwd = getcwd(cwd, sizeof(cwd)) != NULL && cwd[0] == '/';

    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") < 0)
        sb_die("mounting a tmpfs for the new root", NULL);
    if (mkdir("/tmp/oldroot", 0755) < 0 || mkdir("/tmp/newroot", 0755) < 0)
        sb_die("mkdir in the new root", NULL);
    if (syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot") < 0)
        sb_die("pivot_root", "is / a mount point? (a chroot without one cannot host the sandbox)");
    if (chdir("/") < 0)
        sb_die("chdir /", NULL);
    if (mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") < 0)
        sb_die("mounting the new root", NULL);
    for (int i = 0; tops[i]; i++)
        sb_top(tops[i]);
    for (int i = 0; sys_ro[i]; i++)
        if (sb_bind(sys_ro[i], false) < 0)
            sb_die("bind-mounting a system path read-only", NULL);
    for (int i = 0; devs[i]; i++)
        if (sb_bind(devs[i], true) < 0)
            sb_die("bind-mounting a device node", NULL);
    if (mkdir("/newroot" SB_WORK, 0700) < 0)
        sb_die("mkdir " SB_WORK, NULL);
    snprintf(opts, sizeof(opts), "size=%um,nr_inodes=65536,mode=0700,uid=%d,gid=%d", work_mib,
             SIM_SANDBOX_INNER_ID, SIM_SANDBOX_INNER_ID);
    if (mount("tmpfs", "/newroot" SB_WORK, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        sb_die("mounting the work folder", NULL);
    if (mkdir("/newroot/tmp", 0755) < 0)
        sb_die("mkdir /tmp", NULL);
    for (int i = 0; i < trees->n; i++) {
        if (trees->path[i][0] == '/' && sb_attach(trees->fd[i], trees->path[i]) < 0)
            sb_die("mounting a kernel or reference file read-only", NULL);
        close(trees->fd[i]);
    }
    /* the caller's working folder, as an empty read-only folder (or the one
     * the files above made), so that relative paths to them still work */
    if (have_cwd) {
        snprintf(dir, sizeof(dir), "/newroot%s", cwd);
        have_cwd = sb_mkdirs(dir) == 0;
    }
    if (mount(NULL, "/newroot", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        sb_die("making the new root read-only", NULL);
    /* into the new root; the old one (the machine's) is detached for good */
    if (chdir("/newroot") < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
        sb_die("pivot_root into the new root", NULL);
    if (umount2(".", MNT_DETACH) < 0)
        sb_die("detaching the machine's root", NULL);
    if ((!have_cwd || chdir(cwd) < 0) && chdir(SB_WORK) < 0)
        sb_die("chdir " SB_WORK, NULL);
}

/* Become the inner id (the only one mapped) with no supplementary groups.
 * Id 0 is not mapped in the namespace, so this keeps the namespace's
 * capabilities, which the mounts still need. */
static void sb_become_inner(void)
{
    gid_t id = SIM_SANDBOX_INNER_ID;
    if (setgroups(0, NULL) < 0)
        sb_die("setgroups", NULL);
    if (setresgid(id, id, id) < 0)
        sb_die("setresgid", NULL);
    if (setresuid(id, id, id) < 0)
        sb_die("setresuid", NULL);
}

static void sb_drop_capabilities(void)
{
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];

    for (int c = 0; c <= 63; c++)
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno == EINVAL)
            break;
    (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    memset(d, 0, sizeof(d));
    if (syscall(SYS_capset, &h, d) < 0)
        sb_die("dropping capabilities", NULL);
}

/* The environment user code sees: an allowlist.  The inherited strings are
 * zeroed in place first, so their bytes are not left in this process's
 * memory for a kernel to scan. */
static void sb_scrub_env(void)
{
    static const char *const pass[] = { "OPENBLAS_CORETYPE=", "OPENBLAS_L2_SIZE=", "OPENBLAS_NUM_THREADS=",
                                        "OMP_NUM_THREADS=", NULL };
    char *keep[8];
    int nk = 0;

    for (char **e = environ; e && *e; e++) {
        bool ok = false;
        for (int i = 0; pass[i]; i++)
            ok = ok || strncmp(*e, pass[i], strlen(pass[i])) == 0;
        if (ok && nk < (int)(sizeof(keep) / sizeof(keep[0])))
            keep[nk++] = strdup(*e);
        explicit_bzero(*e, strlen(*e));
    }
    clearenv();
    setenv("PATH", "/usr/bin:/bin", 1);
    setenv("HOME", SB_WORK, 1);
    setenv("TMPDIR", SB_WORK, 1);
    setenv("LANG", "C.UTF-8", 1);
    for (int i = 0; i < nk; i++) {
        char *eq = strchr(keep[i], '=');
        if (keep[i] && eq) {
            *eq = '\0';
            setenv(keep[i], eq + 1, 1);
        }
        free(keep[i]);
    }
    /* An interpreter started before the fork holds its own copy in os.environ. */
    if (Py_IsInitialized()) {
        PyGILState_STATE gs = PyGILState_Ensure();
        PyRun_SimpleString("import os as _o\n"
                           "_o.environ.clear()\n"
                           "_o.environ.update({'PATH': '/usr/bin:/bin', 'HOME': '" SB_WORK "', 'TMPDIR': '" SB_WORK "', "
                           "'LANG': 'C.UTF-8'})\n"
                           "del _o\n");
        PyGILState_Release(gs);
    }
}

static int sb_allow(scmp_filter_ctx f, const char *name)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0;      /* not a call of this architecture */
    return seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 0);
}

/* The allowlist: what CPython, NumPy, OpenBLAS and the simulator call
 * (measured with strace over the kernel corpus), and nothing else.  Built
 * once per process by the parent (libseccomp's compiler is the slow part),
 * exported as BPF, and installed by each child. */
typedef struct sb_bpf {
    struct sock_filter *prog;
    unsigned short      len;
} sb_bpf;

static sb_bpf sb_strict_bpf, sb_unconfined_bpf;

/* Compile f to BPF once (libseccomp writes it to a file descriptor). */
static int sb_export(scmp_filter_ctx f, sb_bpf *out)
{
    int fd = memfd_create("kforge-seccomp", MFD_CLOEXEC);
    off_t len = 0;
    int rc = fd < 0 ? -errno : seccomp_export_bpf(f, fd);
    if (rc == 0 && ((len = lseek(fd, 0, SEEK_END)) <= 0 || len % (off_t)sizeof(struct sock_filter) != 0 ||
                    len / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS))
        rc = -EINVAL;
    if (rc == 0) {
        struct sock_filter *prog = kf_malloc((size_t)len);
        if (pread(fd, prog, (size_t)len, 0) != (ssize_t)len) {
            free(prog);
            rc = -EIO;
        } else {
            out->prog = prog;
            out->len = (unsigned short)(len / (off_t)sizeof(struct sock_filter));
        }
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Child: install a program the parent built (no_new_privs is set). */
static int sb_install(const sb_bpf *b)
{
    struct sock_fprog p = { b->len, b->prog };
    if (!b->prog)
        return errno = ENOSYS, -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p);
}

/* A comparison on a syscall's first argument (libseccomp's SCMP_A0 leaves
 * datum_b to C's zero-initialisation, which clang's -Wextra flags). */
static struct scmp_arg_cmp sb_arg0(enum scmp_compare op, scmp_datum_t a, scmp_datum_t b)
{
    struct scmp_arg_cmp c = { .arg = 0, .op = op, .datum_a = a, .datum_b = b };
    return c;
}

static int sb_seccomp_build(void)
{
    static const char *const allow[] = {
        /* files (the view is read-only but /work) */
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
        "lseek", "close", "close_range", "open", "openat", "openat2", "creat", "stat", "fstat", "lstat",
        "newfstatat", "fstatat64", "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2",
        "readlink", "readlinkat", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat",
        "unlink", "unlinkat", "rename", "renameat", "renameat2", "rmdir", "truncate", "ftruncate",
        "fsync", "fdatasync", "fchmod", "fchmodat", "chmod", "umask", "flock", "fadvise64", "fallocate",
        "dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "fcntl64", "symlink", "symlinkat", "link", "linkat",
        "utimensat", "sendfile", "copy_file_range",
        /* memory */
        "mmap", "mmap2", "munmap", "mprotect", "mremap", "brk", "madvise", "msync", "mincore", "mbind",
        "get_mempolicy", "set_mempolicy", "membarrier",
        /* signals, time, threads, identity */
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend",
        "sigaltstack", "restart_syscall", "futex", "futex_waitv", "set_robust_list", "get_robust_list", "rseq",
        "set_tid_address", "exit", "exit_group", "tgkill", "tkill", "getpid", "gettid", "getppid", "getuid",
        "geteuid", "getgid", "getegid", "getgroups", "getresuid", "getresgid", "getpgrp", "getpgid", "getsid",
        "uname", "sysinfo", "getrusage", "times", "getrlimit", "prlimit64", "ugetrlimit", "sched_getaffinity",
        "sched_yield", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
        "sched_get_priority_min", "clock_gettime", "clock_gettime64", "clock_getres", "clock_nanosleep",
        "nanosleep", "pause", "gettimeofday", "time", "getrandom", "arch_prctl", "getcpu", "capget",
        "poll", "ppoll", "select", "pselect6", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
        "eventfd2", "wait4", "waitid",
        NULL,
    };
    static const unsigned long ioctls[] = { TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIOCLEX, FIONCLEX };
    static const int prctls[] = { PR_SET_NAME, PR_GET_NAME, PR_GET_DUMPABLE, PR_SET_VMA, PR_GET_SECCOMP,
                                   PR_GET_NO_NEW_PRIVS };
    scmp_filter_ctx f = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    int rc = f ? 0 : -ENOMEM;

    for (int i = 0; rc == 0 && allow[i]; i++)
        rc = sb_allow(f, allow[i]);
    /* threads yes, processes no; clone3 hides its flags from the filter */
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                              sb_arg0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    for (size_t i = 0; rc == 0 && i < sizeof(ioctls) / sizeof(ioctls[0]); i++)
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, ioctls[i]));
    for (size_t i = 0; rc == 0 && i < sizeof(prctls) / sizeof(prctls[0]); i++)
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1, sb_arg0(SCMP_CMP_EQ, (scmp_datum_t)prctls[i], 0));
    /* kill: only itself (PID 1 of its namespace) and its own group */
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1, sb_arg0(SCMP_CMP_EQ, 1, 0));
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1, sb_arg0(SCMP_CMP_EQ, 0, 0));
    if (rc == 0)
        rc = sb_export(f, &sb_strict_bpf);
    seccomp_release(f);
    if (rc < 0)
        errno = -rc;
    return rc < 0 ? -1 : 0;
}

/* Filter for the unconfined mode: no network, no new processes. */
static int sb_seccomp_unconfined_build(void)
{
    scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
    int rc = f ? 0 : -ENOMEM;
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1, sb_arg0(SCMP_CMP_NE, AF_UNIX, 0));
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(io_uring_setup), 0);
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fork), 0);
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(vfork), 0);
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (rc == 0)
        rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                              sb_arg0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    if (rc == 0)
        rc = sb_export(f, &sb_unconfined_bpf);
    seccomp_release(f);
    if (rc < 0)
        errno = -rc;
    return rc < 0 ? -1 : 0;
}

static void sb_run_fn(sim_sandbox_fn fn, void *arg)
{
    sim_sandbox_out out = { SB_RESULT_FD };
    kf_err err = KF_ERR_INIT;
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

/* Tell the parent how the code is isolated (an 'I' frame, before fn). */
static void sb_note_isolation(const char *what)
{
    size_t n = strlen(what);
    send_frame_head(SB_RESULT_FD, 'I', n);
    write_all(SB_RESULT_FD, what, n);
}

static void sb_common_limits(const sim_sandbox_limits *lim)
{
    set_limit(RLIMIT_CORE, 0, 0);
    if (lim->cpu_seconds)
        set_limit(RLIMIT_CPU, lim->cpu_seconds, (rlim_t)lim->cpu_seconds + 1);
    if (lim->memory_mib && !SB_ASAN)
        set_limit(RLIMIT_AS, (rlim_t)lim->memory_mib << 20, (rlim_t)lim->memory_mib << 20);
}

/* G: PID 1 of the evaluation's namespaces.  `alive` is the read end of a
 * pipe whose write end C holds until it exits. */
static _Noreturn void sb_inner(const sim_sandbox_limits *lim, sim_sandbox_fn fn, void *arg, int alive)
{
    unsigned work_mib = lim->work_mib ? lim->work_mib : SIM_SANDBOX_WORK_MIB;
    unsigned files = lim->max_files ? lim->max_files : SIM_SANDBOX_MAX_FILES;
    unsigned threads = lim->max_threads ? lim->max_threads : SIM_SANDBOX_MAX_THREADS;

    sb_trees trees;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        sb_die("making the mount tree private", NULL);
    sb_clone_trees(lim, &trees);
    sb_become_inner();
    sb_build_root(&trees, work_mib);
    if (sethostname("kforge-sandbox", 14) < 0)
        sb_die("sethostname", NULL);
    sb_drop_capabilities();
    sb_common_limits(lim);
    set_limit(RLIMIT_FSIZE, (rlim_t)work_mib << 20, (rlim_t)work_mib << 20);
    set_limit(RLIMIT_NOFILE, files, files);
    set_limit(RLIMIT_NPROC, threads, threads);
    sb_scrub_env();
    sim_target_pin_dir(sb_targets);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        sb_die("PR_SET_NO_NEW_PRIVS", NULL);
    /* a change of credentials clears the parent-death signal: set it again
     * (the filter below refuses it), then make sure C did not die before */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    {
        struct pollfd pf = { alive, POLLIN, 0 };
        if (poll(&pf, 1, 0) != 0)
            _exit(SB_EXIT_PIPE);
        close(alive);
    }
    if (sb_install(&sb_strict_bpf) < 0)
        sb_die("installing the seccomp filter", "is the kernel built with CONFIG_SECCOMP_FILTER?");
    sb_note_isolation("strict");
    sb_run_fn(fn, arg);
    _exit(0);
}

/* C, outside the new PID namespace: wait for G and leave as it did, so the
 * parent classifies G's end (a signal is re-raised on C itself). */
static _Noreturn void sb_mirror(pid_t g)
{
    int st = 0;
    while (waitpid(g, &st, 0) < 0)
        if (errno != EINTR)
            _exit(SB_EXIT_PIPE);
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        sigset_t one;
        signal(sig, SIG_DFL);
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : SB_EXIT_PIPE);
}

static _Noreturn void child_main(const sim_sandbox_limits *lim, sim_sandbox_fn fn, void *arg,
                                 int res_w, int log_w, int note_w, int sync_r, pid_t parent, bool strict)
{
    sigset_t all;
    int fds[4] = { res_w, note_w, sync_r, log_w }, hi[4], devnull;

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

    /* fds: 0 </dev/null, 1 and 2 the log pipe, 3 results, 4 notes, 5 sync */
    for (int i = 0; i < 4; i++)
        if ((hi[i] = fcntl(fds[i], F_DUPFD, 64)) < 0)
            _exit(SB_EXIT_PIPE);
    devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0)
        _exit(SB_EXIT_PIPE);
    dup2(devnull, 0);
    dup2(hi[3], 1);
    dup2(hi[3], 2);
    dup2(hi[0], SB_RESULT_FD);
    dup2(hi[1], SB_NOTE_FD);
    dup2(hi[2], SB_SYNC_FD);
    if (syscall(SYS_close_range, SB_SYNC_FD + 1, ~0u, 0) < 0)
        for (int fd = SB_SYNC_FD + 1; fd < 65536; fd++)
            close(fd);

    if (!strict) {
        int netns, filt;
        close(SB_SYNC_FD);
        close(SB_NOTE_FD);
        sb_common_limits(lim);
        netns = unshare(CLONE_NEWNET) == 0;
        filt = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && sb_install(&sb_unconfined_bpf) == 0;
        if (!netns && !filt) {
            fprintf(stderr, SB_TAG "cannot cut the network off (unshare(CLONE_NEWNET) and seccomp both "
                                   "refused); not running untrusted code\n");
            fflush(stderr);
            _exit(SB_EXIT_NOISOLATION);
        }
        sb_note_isolation("unconfined");
        sb_run_fn(fn, arg);
    }

    if (unshare(CLONE_NEWUSER) < 0)
        sb_die("unshare(CLONE_NEWUSER)", sb_userns_hint);
    /* new credentials cleared the parent-death signal */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(SB_EXIT_PIPE);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
        sb_die("unshare(mount, PID, network, IPC, UTS namespaces)", sb_userns_hint);
    /* the parent writes our id maps, then answers */
    {
        char c = 'U';
        ssize_t n;
        write_all(SB_NOTE_FD, &c, 1);
        do
            n = read(SB_SYNC_FD, &c, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1 || c != 'M')
            _exit(SB_EXIT_NOISOLATION);     /* the parent said why */
        close(SB_SYNC_FD);
    }
    /* `alive`: C holds the write end until it exits; G sees C's end as POLLHUP */
    int alive[2];
    if (pipe2(alive, O_CLOEXEC) < 0)
        sb_die("pipe", NULL);
    pid_t g = fork();
    if (g < 0)
        sb_die("fork into the new PID namespace", NULL);
    if (g == 0) {
        close(alive[1]);
        close(SB_NOTE_FD);
        sb_inner(lim, fn, arg, alive[0]);
    }
    close(alive[0]);
    {
        int32_t gp = (int32_t)g;
        write_all(SB_NOTE_FD, &gp, sizeof(gp));
    }
    close(SB_NOTE_FD);
    close(SB_RESULT_FD);
    close(1);
    close(2);
    sb_mirror(g);
}

/* ---- id maps (parent side) ------------------------------------------ */

static int sb_write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ssize_t n;
    if (fd < 0)
        return -1;
    n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* The first id of `who`'s range in /etc/subuid or /etc/subgid, or -1. */
static long sb_subid(const char *file, const char *name, unsigned long id)
{
    FILE *f = fopen(file, "re");
    char line[256], ids[32];
    long found = -1;
    if (!f)
        return -1;
    snprintf(ids, sizeof(ids), "%lu", id);
    while (found < 0 && fgets(line, sizeof(line), f)) {
        /* NAME-or-ID:FIRST:COUNT; a line not of that form grants nothing. */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        long first = 0, count = 0;
        if (!c2)
            continue;
        *c1 = '\0';
        *c2 = '\0';
        c2[1 + strcspn(c2 + 1, "\n")] = '\0';
        if ((strcmp(line, ids) == 0 || (name && strcmp(line, name) == 0)) &&
            kf_num_long(c1 + 1, 0, LONG_MAX, &first, NULL) == KF_OK &&
            kf_num_long(c2 + 1, 1, LONG_MAX, &count, NULL) == KF_OK)
            found = first;
    }
    fclose(f);
    return found;
}

static int sb_spawn_map(const char *tool, pid_t pid, long outer, char *why, size_t whylen)
{
    char p[32], in[32], out[32], name[32], one[] = "1", path[] = "PATH=/usr/bin:/bin:/usr/sbin:/sbin";
    char *argv[] = { name, p, in, out, one, NULL };
    char *envp[] = { path, NULL };
    pid_t t;
    int st = 0, rc;
    snprintf(name, sizeof(name), "%s", tool);
    snprintf(p, sizeof(p), "%d", (int)pid);
    snprintf(in, sizeof(in), "%d", SIM_SANDBOX_INNER_ID);
    snprintf(out, sizeof(out), "%ld", outer);
    rc = posix_spawnp(&t, tool, NULL, NULL, argv, envp);
    if (rc != 0) {
        snprintf(why, whylen, "%s could not be run (%s): install the uidmap package", tool, strerror(rc));
        return -1;
    }
    while (waitpid(t, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(why, whylen, "%s %s %s %s 1 failed: check /etc/subuid and /etc/subgid", tool, p, in, out);
        return -1;
    }
    return 0;
}

/* Map the child's inner id to an unprivileged outer one. */
static int sb_write_maps(pid_t pid, char *why, size_t whylen)
{
    char path[64], line[64];
    if (geteuid() == 0) {
        long uid = kf_config_int(KF_CFG_SANDBOX_UID), gid = kf_config_int(KF_CFG_SANDBOX_GID);
        snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
        snprintf(line, sizeof(line), "%d %ld 1\n", SIM_SANDBOX_INNER_ID, uid);
        if (sb_write_file(path, line) < 0) {
            snprintf(why, whylen, "writing %s failed: %s", path, strerror(errno));
            return -1;
        }
        snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
        snprintf(line, sizeof(line), "%d %ld 1\n", SIM_SANDBOX_INNER_ID, gid);
        if (sb_write_file(path, line) < 0) {
            snprintf(why, whylen, "writing %s failed: %s", path, strerror(errno));
            return -1;
        }
        return 0;
    }
    {
        struct passwd pw, *pwp = NULL;
        char buf[1024];
        const char *name = getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &pwp) == 0 && pwp ? pw.pw_name : NULL;
        long su = sb_subid("/etc/subuid", name, geteuid()), sg = sb_subid("/etc/subgid", name, getegid());
        if (su < 0 || sg < 0) {
            snprintf(why, whylen,
                     "user %s has no subordinate uid/gid range, and user code must not run as that user: "
                     "add one (usermod --add-subuids 200000-265535 --add-subgids 200000-265535 %s), "
                     "run kforge as root, or set KFORGE_SANDBOX=unconfined (never for other people's kernels)",
                     name ? name : "?", name ? name : "USER");
            return -1;
        }
        if (sb_spawn_map("newuidmap", pid, su, why, whylen) < 0 || sb_spawn_map("newgidmap", pid, sg, why, whylen) < 0)
            return -1;
        return 0;
    }
}

/* Read exactly n bytes from fd within ms; 0 on success. */
static int sb_read_timed(int fd, void *p, size_t n, int ms)
{
    char *c = p;
    while (n) {
        struct pollfd pf = { fd, POLLIN, 0 };
        int pr = poll(&pf, 1, ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return -1;
        ssize_t r = read(fd, c, n);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
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
        } else if (type == 'I') {
            snprintf(r->isolation, sizeof(r->isolation), "%.*s",
                     (int)(len < sizeof(r->isolation) ? len : sizeof(r->isolation) - 1), (const char *)q);
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

/* The sandbox's own message about a set-up step, from the log. */
static const char *setup_message(const char *log, char *buf, size_t len)
{
    const char *m = log ? strstr(log, SB_TAG) : NULL;
    size_t n;
    if (!m)
        return NULL;
    m += strlen(SB_TAG);
    n = strcspn(m, "\n");
    snprintf(buf, len, "%.*s", (int)n, m);
    return buf;
}

static void classify(const sim_sandbox_limits *lim, int status, int killed_wall, int killed_mem,
                     int have_result, int proto_bad, const char *proto_msg, const char *setup_msg,
                     sim_sandbox_result *r)
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
        char buf[768];
        const char *m = setup_msg && setup_msg[0] ? setup_msg : setup_message(r->log, buf, sizeof(buf));
        r->status = SIM_SB_FAILED;
        snprintf(r->reason, sizeof(r->reason), "the sandbox could not be set up, so the code was not run: %s",
                 m ? m : "a set-up step failed (see the log)");
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

static int shorter_first(const void *a, const void *b)
{
    size_t la = strlen(*(char *const *)a), lb = strlen(*(char *const *)b);
    return la < lb ? -1 : la > lb;
}

/* Absolute, symlink-free copies of the caller's read-only paths (the child
 * binds them at these paths); missing ones are dropped.  Shorter paths come
 * first: a folder is bound before the files under it, which it then shows
 * (bound the other way round, the file's mount point would hide the rest of
 * the folder). */
char *sim_sandbox_real_path(const char *path)
{
    char *r, cwd[PATH_MAX], joined[2 * PATH_MAX];
    if (!path)
        return NULL;
    r = realpath(path, NULL);
    if (!r)
        return kf_strdup(path);
    /* a plain relative name keeps working (and keeps messages short) */
    if (path[0] != '/' && getcwd(cwd, sizeof(cwd)) &&
        (size_t)snprintf(joined, sizeof(joined), "%s/%s", cwd, path) < sizeof(joined) && strcmp(joined, r) == 0) {
        free(r);
        return kf_strdup(path);
    }
    return r;
}

static char **resolve_paths(const char *const *in)
{
    size_t n = 0, k = 0;
    char **out;
    while (in && in[n])
        n++;
    out = kf_calloc(n + 1, sizeof(*out));
    for (size_t i = 0; i < n; i++) {
        char *r = realpath(in[i], NULL);
        if (r)
            out[k++] = r;
    }
    qsort(out, k, sizeof(*out), shorter_first);
    return out;
}

static void free_paths(char **p)
{
    for (size_t i = 0; p && p[i]; i++)
        free(p[i]);
    free(p);
}

kf_code sim_sandbox_run(const sim_sandbox_limits *lim_in, sim_sandbox_fn fn, void *arg,
                        sim_sandbox_result *res, kf_err *err)
{
    int res_p[2] = { -1, -1 }, log_p[2] = { -1, -1 }, note_p[2] = { -1, -1 }, sync_p[2] = { -1, -1 };
    bool strict = !sim_sandbox_unconfined();
    char setup_msg[768] = "";
    char **ro = resolve_paths(lim_in->ro_paths);
    sim_sandbox_limits limv = *lim_in;
    const sim_sandbox_limits *lim = &limv;
    pid_t watch;
    kf_buf rbuf = KF_BUF_INIT, lbuf = KF_BUF_INIT;
    size_t cap = lim->max_result_bytes ? lim->max_result_bytes : (size_t)1 << 30;
    int killed_wall = 0, killed_mem = 0, over = 0, have_result = 0, proto_bad = 0;
    int res_eof = 0, log_eof = 0, exited = 0, status = 0, pidfd = -1;
    char proto_msg[256] = "";
    struct rusage ru;
    double t0 = now_s(), deadline = t0 + lim->wall_ms / 1000.0, next_rss = 0;
    pid_t pid, parent;
    static bool undumpable;

    limv.ro_paths = (const char *const *)ro;
    {
        const char *t = sim_target_default_dir();
        char *abs = t ? realpath(t, NULL) : NULL;
        snprintf(sb_targets, sizeof(sb_targets), "%s", abs ? abs : "");
        free(abs);
    }
    if (!undumpable) {
        /* nothing of this process's user may ptrace it or read its memory */
        (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        undumpable = true;
    }
    if ((strict && !sb_strict_bpf.prog && sb_seccomp_build() < 0) ||
        (!strict && !sb_unconfined_bpf.prog && sb_seccomp_unconfined_build() < 0)) {
        kf_err_set(err, KF_INTERNAL, "sandbox: building the seccomp filter failed: %s", strerror(errno));
        free_paths(ro);
        return KF_INTERNAL;
    }
    if (!strict)
        kf_log_warn("KFORGE_SANDBOX=unconfined: running user code without namespaces or the seccomp "
                    "allowlist; never do this with other people's kernels");
    memset(res, 0, sizeof(*res));
    memset(&ru, 0, sizeof(ru));
    res->exit_code = -1;
    snprintf(res->isolation, sizeof(res->isolation), "none");
    if (pipe2(res_p, O_CLOEXEC) < 0 || pipe2(log_p, O_CLOEXEC) < 0 || pipe2(note_p, O_CLOEXEC) < 0 ||
        pipe2(sync_p, O_CLOEXEC) < 0) {
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
        child_main(lim, fn, arg, res_p[1], log_p[1], note_p[1], sync_p[0], parent, strict);   /* never returns */

    close(res_p[1]);
    close(log_p[1]);
    close(note_p[1]);
    close(sync_p[0]);
    setpgid(pid, pid);           /* also done by the child: no race on kill(-pid) */
    watch = pid;
    if (strict) {
        /* the child has its user namespace: map its inner id, then learn
         * the pid of G (PID 1 inside), whose memory the watchdog reads */
        char c = 0;
        int32_t g = 0;
        if (sb_read_timed(note_p[0], &c, 1, SB_HANDSHAKE_MS) == 0 && c == 'U') {
            char ok = 'M';
            if (sb_write_maps(pid, setup_msg, sizeof(setup_msg)) < 0)
                ok = 'F';
            (void)!write(sync_p[1], &ok, 1);
            if (ok == 'M' && sb_read_timed(note_p[0], &g, sizeof(g), SB_HANDSHAKE_MS) == 0 && g > 0)
                watch = (pid_t)g;
        }
    }
    close(sync_p[1]);
    sync_p[1] = -1;
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
            if (!killed_mem && !killed_wall && rss_kib(watch) > (long)lim->memory_mib * 1024) {
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
    classify(lim, status, killed_wall, killed_mem, have_result, proto_bad, proto_msg, setup_msg, res);
    close(res_p[0]);
    close(log_p[0]);
    close(note_p[0]);
    if (pidfd >= 0)
        close(pidfd);
    kf_buf_release(&rbuf);
    kf_buf_release(&lbuf);
    free_paths(ro);
    return KF_OK;

fail:
    for (int i = 0; i < 2; i++) {
        if (res_p[i] >= 0) close(res_p[i]);
        if (log_p[i] >= 0) close(log_p[i]);
        if (note_p[i] >= 0) close(note_p[i]);
        if (sync_p[i] >= 0) close(sync_p[i]);
    }
    free_paths(ro);
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

/* ---- probe ----------------------------------------------------------- */

/* Inside the box: what a kernel could reach, as a short text; "" when the
 * box holds. */
static kf_code sb_probe_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    const uid_t *caller = arg;
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    char what[512] = "";
    size_t n = 0;

    memset(d, 0, sizeof(d));
    if (getuid() == *caller && *caller != (uid_t)SIM_SANDBOX_INNER_ID)
        n += (size_t)snprintf(what + n, sizeof(what) - n, "runs as the caller's uid; ");
    if (syscall(SYS_capget, &h, d) != 0 || d[0].effective || d[1].effective || d[0].permitted || d[1].permitted)
        n += (size_t)snprintf(what + n, sizeof(what) - n, "has capabilities; ");
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
        n += (size_t)snprintf(what + n, sizeof(what) - n, "may gain privileges; ");
    if (access("/proc/self", F_OK) == 0)
        n += (size_t)snprintf(what + n, sizeof(what) - n, "sees /proc; ");
    {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s >= 0) {
            close(s);
            n += (size_t)snprintf(what + n, sizeof(what) - n, "may open sockets; ");
        }
    }
    if (getpid() != 1 && n < sizeof(what))
        snprintf(what + n, sizeof(what) - n, "shares the machine's PID namespace; ");
    sim_sandbox_send_json(out, what[0] ? what : "{}");
    (void)err;
    return KF_OK;
}

kf_code sim_sandbox_probe(kf_err *err)
{
    sim_sandbox_limits lim;
    sim_sandbox_result r;
    uid_t me = getuid();
    kf_code rc = KF_OK;

    if (sim_sandbox_unconfined()) {
        kf_log_warn("KFORGE_SANDBOX=unconfined: user code will run without namespaces, without the seccomp "
                    "allowlist and with this process's identity; never do this with other people's kernels");
        return KF_OK;
    }
    {
        const char *m = kf_config_str(KF_CFG_SANDBOX);
        if (m && strcmp(m, "strict") != 0)
            return kf_err_set(err, KF_CONFIG, "KFORGE_SANDBOX=\"%s\": use strict (the default) or unconfined", m);
    }
    memset(&lim, 0, sizeof(lim));
    lim.cpu_seconds = 10;
    lim.wall_ms = 10000;
    lim.work_mib = 1;
    if (sim_sandbox_run(&lim, sb_probe_fn, &me, &r, err) != KF_OK)
        return err ? err->code : KF_INTERNAL;
    if (r.status != SIM_SB_OK)
        rc = kf_err_set(err, KF_UNAVAILABLE, "%s", r.reason);
    else if (!r.json || strcmp(r.json, "{}") != 0)
        rc = kf_err_set(err, KF_UNAVAILABLE, "the sandbox does not hold on this machine: user code %s",
                        r.json ? r.json : "did not report");
    sim_sandbox_result_release(&r);
    return rc;
}
