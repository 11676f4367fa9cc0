/* Unit tests for sim/sim_sandbox: each way an evaluation can go wrong is
 * reported with its reason, and the caller keeps going. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "sim/sim_sandbox.h"

static sim_sandbox_limits limits(unsigned cpu, unsigned mib, unsigned wall_ms)
{
    sim_sandbox_limits l = { .cpu_seconds = cpu, .memory_mib = mib, .wall_ms = wall_ms };
    return l;
}

static kf_code ok_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)err;
    sim_array a;
    float v[6] = { 1, 2, 3, 4, 5, 6 };
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "out%d", *(int *)arg);
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = 2;
    a.shape[0] = 2;
    a.shape[1] = 3;
    a.data = v;
    sim_sandbox_send_array(out, &a, NULL);
    a.ndim = 0;
    snprintf(a.name, sizeof(a.name), "scalar");
    sim_sandbox_send_array(out, &a, NULL);
    printf("hello from the child\n");
    sim_sandbox_send_json(out, "{\"ok\":true}");
    return KF_OK;
}

Test(sim_sandbox, success_passes_arrays_json_and_log_back)
{
    sim_sandbox_limits l = limits(10, 1024, 10000);
    sim_sandbox_result r;
    kf_err e = KF_ERR_INIT;
    int tag = 7;

    cr_assert_eq(sim_sandbox_run(&l, ok_fn, &tag, &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.status, SIM_SB_OK, "%s: %s", sim_sandbox_status_name(r.status), r.reason);
    cr_assert_eq(r.n_arrays, 2);
    cr_assert_str_eq(r.arrays[0].name, "out7");
    cr_assert_eq(r.arrays[0].shape[1], 3);
    cr_assert_eq(((float *)r.arrays[0].data)[5], 6.0f);
    cr_assert_eq(r.arrays[1].ndim, 0);
    cr_assert_eq(((float *)r.arrays[1].data)[0], 1.0f);
    cr_assert_str_eq(r.json, "{\"ok\":true}");
    cr_assert(strstr(r.log, "hello from the child") != NULL, "log: %s", r.log);
    cr_assert_str_eq(r.isolation, "strict");
    cr_assert_eq(r.exit_code, 0);
    sim_sandbox_result_release(&r);
}

static kf_code segv_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)out; (void)err;
    volatile char *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p[0] = 1;
    return KF_OK;
}

Test(sim_sandbox, segfault_is_a_failed_evaluation)
{
    sim_sandbox_limits l = limits(10, 1024, 10000);
    sim_sandbox_result r;
    cr_assert_eq(sim_sandbox_run(&l, segv_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_CRASHED, "%s: %s", sim_sandbox_status_name(r.status), r.reason);
    cr_assert(strstr(r.reason, "SIGSEGV") != NULL, "%s", r.reason);
    sim_sandbox_result_release(&r);

    /* the caller keeps going: the next evaluation works */
    int tag = 1;
    cr_assert_eq(sim_sandbox_run(&l, ok_fn, &tag, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_OK, "%s", r.reason);
    sim_sandbox_result_release(&r);
}

static kf_code spin_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)out; (void)err;
    volatile unsigned long x = 0;
    for (;;)
        x++;
    return KF_OK;
}

Test(sim_sandbox, infinite_loop_hits_the_cpu_limit)
{
    sim_sandbox_limits l = limits(1, 1024, 20000);
    sim_sandbox_result r;
    cr_assert_eq(sim_sandbox_run(&l, spin_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_CPU_LIMIT, "%s: %s", sim_sandbox_status_name(r.status), r.reason);
    cr_assert_str_eq(r.reason, "CPU time limit of 1 s exceeded");
    cr_assert(r.wall_seconds < 10, "took %.1f s", r.wall_seconds);
    sim_sandbox_result_release(&r);
}

static kf_code sleep_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)out; (void)err;
    for (;;)
        pause();
    return KF_OK;
}

Test(sim_sandbox, a_blocked_child_hits_the_wall_clock_limit)
{
    sim_sandbox_limits l = limits(10, 1024, 300);
    sim_sandbox_result r;
    cr_assert_eq(sim_sandbox_run(&l, sleep_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_WALL_LIMIT, "%s: %s", sim_sandbox_status_name(r.status), r.reason);
    cr_assert_str_eq(r.reason, "wall-clock limit of 0.3 s exceeded");
    cr_assert(r.wall_seconds >= 0.3 && r.wall_seconds < 3, "%.2f s", r.wall_seconds);
    sim_sandbox_result_release(&r);
}

static kf_code hog_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)out; (void)err;
    for (;;) {
        char *p = kf_malloc(16u << 20);    /* aborts with "out of memory" when refused */
        memset(p, 1, 16u << 20);
    }
    return KF_OK;
}

Test(sim_sandbox, runaway_allocation_hits_the_memory_limit)
{
    sim_sandbox_limits l = limits(30, 256, 30000);
    sim_sandbox_result r;
    cr_assert_eq(sim_sandbox_run(&l, hog_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_MEMORY_LIMIT, "%s: %s (log %s)", sim_sandbox_status_name(r.status),
                 r.reason, r.log);
    cr_assert(strstr(r.reason, "memory limit of 256 MiB exceeded") != NULL, "%s", r.reason);
    sim_sandbox_result_release(&r);
}

static int inherited_fd = -1;

static kf_code net_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)err;
    int port = *(int *)arg;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int e_inet = s < 0 ? errno : 0;
    int s6 = socket(AF_INET6, SOCK_DGRAM, 0);
    int e_inet6 = s6 < 0 ? errno : 0;
    int pair[2];
    int unix_ok = socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0;
    int fd_closed = fcntl(inherited_fd, F_GETFD) < 0 && errno == EBADF;
    int connected = 0;
    if (s >= 0) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        connected = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    }
    char *json = kf_asprintf("{\"e_inet\":%d,\"e_inet6\":%d,\"unix_ok\":%d,\"fd_closed\":%d,\"connected\":%d}",
                             e_inet, e_inet6, unix_ok, fd_closed, connected);
    sim_sandbox_send_json(out, json);
    free(json);
    return KF_OK;
}

Test(sim_sandbox, no_network_and_no_inherited_sockets)
{
    sim_sandbox_limits l = limits(10, 1024, 10000);
    sim_sandbox_result r;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    int ls = socket(AF_INET, SOCK_STREAM, 0), port;

    cr_assert(ls >= 0);
    cr_assert_eq(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(ls, 4), 0);
    getsockname(ls, (struct sockaddr *)&a, &al);
    port = ntohs(a.sin_port);
    inherited_fd = ls;

    cr_assert_eq(sim_sandbox_run(&l, net_fn, &port, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_OK, "%s", r.reason);
    cr_assert(strstr(r.json, "\"e_inet\":1,") != NULL, "socket(AF_INET) must fail with EPERM: %s", r.json);
    cr_assert(strstr(r.json, "\"e_inet6\":1,") != NULL, "%s", r.json);
    cr_assert(strstr(r.json, "\"unix_ok\":0") != NULL, "no socket of any family: %s", r.json);
    cr_assert(strstr(r.json, "\"fd_closed\":1") != NULL, "inherited fds are closed: %s", r.json);
    cr_assert(strstr(r.json, "\"connected\":0") != NULL, "%s", r.json);
    sim_sandbox_result_release(&r);

    /* the parent's network is untouched */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(s >= 0);
    cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    close(s);
    close(ls);
}

static kf_code fail_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)out;
    return kf_err_set(err, KF_INVALID, "kernel.py:3: error SIM_E_PARTITION_LIMIT");
}

static kf_code exit_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)out; (void)err;
    _exit(3);
}

static kf_code flood_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)err;
    sim_array a;
    memset(&a, 0, sizeof(a));
    a.dtype = SIM_DT_UINT8;
    a.ndim = 1;
    a.shape[0] = 1 << 20;
    a.data = kf_calloc(1, 1 << 20);
    sim_sandbox_send_array(out, &a, NULL);
    return KF_OK;
}

Test(sim_sandbox, errors_early_exits_and_oversized_results)
{
    sim_sandbox_limits l = limits(10, 1024, 10000);
    sim_sandbox_result r;

    cr_assert_eq(sim_sandbox_run(&l, fail_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_FAILED);
    cr_assert_eq(r.child_code, KF_INVALID);
    cr_assert_str_eq(r.reason, "kernel.py:3: error SIM_E_PARTITION_LIMIT");
    sim_sandbox_result_release(&r);

    cr_assert_eq(sim_sandbox_run(&l, exit_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_EXITED, "%s", r.reason);
    cr_assert_eq(r.exit_code, 3);
    sim_sandbox_result_release(&r);

    l.max_result_bytes = 4096;
    cr_assert_eq(sim_sandbox_run(&l, flood_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_PROTOCOL, "%s", r.reason);
    cr_assert(strstr(r.reason, "larger than 4096 bytes") != NULL, "%s", r.reason);
    cr_assert_eq(r.n_arrays, 0);
    sim_sandbox_result_release(&r);
}

static kf_code sleep_forever_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)out; (void)err;
    printf("started\n");
    fflush(stdout);
    for (;;)
        pause();
    return KF_OK;
}

static int gone(pid_t pid)
{
    char path[64], buf[256];
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 1;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    int zombie = fgets(buf, sizeof(buf), f) && strstr(buf, ") Z ") != NULL;
    fclose(f);
    return zombie;
}

/* A child of `parent`, from /proc (0 when there is none yet). */
static pid_t child_of(pid_t parent)
{
    char path[96];
    pid_t kid = 0;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)parent, (int)parent);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d", &kid) != 1)
            kid = 0;
        fclose(f);
    }
    return kid;
}

Test(sim_sandbox, an_evaluation_dies_with_its_caller)
{
    pid_t caller, outer = 0, inner = 0;

    caller = fork();
    cr_assert(caller >= 0);
    if (caller == 0) {
        sim_sandbox_limits l = limits(60, 1024, 60000);
        sim_sandbox_result r;
        sim_sandbox_run(&l, sleep_forever_fn, NULL, &r, NULL);
        _exit(0);
    }
    /* caller -> C (outside the evaluation's PID namespace) -> G (its PID 1) */
    for (int i = 0; i < 250 && inner <= 0; i++) {
        if (outer <= 0)
            outer = child_of(caller);
        if (outer > 0)
            inner = child_of(outer);
        usleep(20000);
    }
    cr_assert(outer > 0 && inner > 0, "the evaluation never started");
    usleep(100000);
    kill(caller, SIGKILL);
    waitpid(caller, NULL, 0);
    int dead = 0;
    for (int i = 0; i < 100 && !(dead = gone(inner) && gone(outer)); i++)
        usleep(20000);
    cr_assert(dead, "evaluation %d/%d outlived its killed caller", (int)outer, (int)inner);
}

static void *thread_main(void *arg)
{
    *(int *)arg = 42;
    return NULL;
}

static kf_code spawn_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)err;
    pid_t p = fork();
    int e_fork = p < 0 ? errno : 0;
    if (p == 0)
        _exit(0);
    int value = 0;
    pthread_t t;
    int thr = pthread_create(&t, NULL, thread_main, &value) == 0 && pthread_join(t, NULL) == 0;
    char *json = kf_asprintf("{\"e_fork\":%d,\"thread\":%d}", e_fork, thr && value == 42);
    sim_sandbox_send_json(out, json);
    free(json);
    return KF_OK;
}

Test(sim_sandbox, no_new_processes_but_threads_work)
{
    sim_sandbox_limits l = limits(10, 1024, 10000);
    sim_sandbox_result r;
    cr_assert_eq(sim_sandbox_run(&l, spawn_fn, NULL, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_OK, "%s", r.reason);
    cr_assert(strstr(r.json, "\"e_fork\":1,") != NULL, "fork must fail with EPERM: %s", r.json);
    cr_assert(strstr(r.json, "\"thread\":1") != NULL, "threads must still start: %s", r.json);
    sim_sandbox_result_release(&r);
}

/* ---- the box, seen from inside ---------------------------------------- */

static const char secret[] = "kf_test_secret_4b1d9e77c2";

/* errno of a raw system call that must fail (0 if it worked). */
static int sys_errno(long rv)
{
    return rv < 0 ? errno : 0;
}

static kf_code inside_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)err;
    pid_t caller = *(pid_t *)arg;
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    kf_buf b = KF_BUF_INIT;
    char big[65536];
    int fd;
    long wrote = 0;

    memset(d, 0, sizeof(d));
    syscall(SYS_capget, &h, d);
    kf_buf_addf(&b, "{\"uid\":%d,\"pid\":%d,\"caps\":%u,\"nnp\":%d,", (int)getuid(), (int)getpid(),
                d[0].effective | d[0].permitted | d[1].effective | d[1].permitted,
                prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
    kf_buf_addf(&b, "\"env_secret\":%d,\"env_kforge\":%d,", getenv("KFORGE_TEST_SECRET") != NULL,
                getenv("KFORGE_SANDBOX") != NULL);
    kf_buf_addf(&b, "\"proc\":%d,\"shadow\":%d,\"etc_passwd\":%d,", access("/proc/self/status", F_OK) == 0,
                access("/etc/shadow", F_OK) == 0, access("/etc/passwd", F_OK) == 0);
    kf_buf_addf(&b, "\"usr_write\":%d,", open("/usr/kf-sandbox-test", O_WRONLY | O_CREAT, 0600) >= 0);
    kf_buf_addf(&b, "\"tmp_write\":%d,", open("/tmp/kf-sandbox-test", O_WRONLY | O_CREAT, 0600) >= 0);
    kf_buf_addf(&b, "\"e_ptrace\":%d,\"e_kill\":%d,", sys_errno(ptrace(PTRACE_ATTACH, caller, 0, 0)),
                sys_errno(kill(caller, 0)));
    kf_buf_addf(&b, "\"e_pidfd\":%d,\"e_unshare\":%d,\"e_mount\":%d,",
                sys_errno(syscall(SYS_pidfd_open, 1, 0)), sys_errno(syscall(SYS_unshare, CLONE_NEWUSER)),
                sys_errno(syscall(SYS_mount, "none", "/kforge-work", "tmpfs", 0, NULL)));
    kf_buf_addf(&b, "\"e_bpf\":%d,\"e_perf\":%d,\"e_keyctl\":%d,\"e_uffd\":%d,\"e_iouring\":%d,",
                sys_errno(syscall(SYS_bpf, 0, NULL, 0)), sys_errno(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0)),
                sys_errno(syscall(SYS_keyctl, 0, 0, 0, 0, 0)), sys_errno(syscall(SYS_userfaultfd, 0)),
                sys_errno(syscall(SYS_io_uring_setup, 1, NULL)));
    kf_buf_addf(&b, "\"e_vmread\":%d,\"e_setns\":%d,\"e_exec\":%d,",
                sys_errno(syscall(SYS_process_vm_readv, caller, NULL, 0, NULL, 0, 0)),
                sys_errno(syscall(SYS_setns, 0, 0)), sys_errno(syscall(SYS_execve, "/bin/true", NULL, NULL)));
    /* the work folder: writable, private, bounded (RLIMIT_FSIZE, then the tmpfs) */
    memset(big, 'x', sizeof(big));
    signal(SIGXFSZ, SIG_IGN);
    kf_buf_addf(&b, "\"work_leftover\":%d,", access("/kforge-work/fill", F_OK) == 0);
    fd = open("/kforge-work/fill", O_WRONLY | O_CREAT, 0600);
    while (fd >= 0) {
        ssize_t w = write(fd, big, sizeof(big));
        if (w <= 0)
            break;
        wrote += w;
    }
    kf_buf_addf(&b, "\"work_ok\":%d,\"work_mib\":%ld,\"e_full\":%d,", fd >= 0, wrote >> 20, errno);
    /* the caller's environment strings are not left in this memory either */
    {
        int found = 0;
        for (char **e = environ; e && *e; e++)
            found |= strstr(*e, secret) != NULL;
        kf_buf_addf(&b, "\"environ_secret\":%d,", found);
    }
    kf_buf_addf(&b, "\"host\":\"%s\"}", "");
    sim_sandbox_send_json(out, b.data);
    kf_buf_release(&b);
    return KF_OK;
}

static int jint(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(json, pat);
    cr_assert(p, "no %s in %s", key, json);
    return atoi(p + strlen(pat));
}

Test(sim_sandbox, user_code_runs_unprivileged_in_its_own_namespaces)
{
    sim_sandbox_limits l = limits(30, 1024, 30000);
    sim_sandbox_result r;
    pid_t me = getpid();
    char var[128];
    kf_err e = KF_ERR_INIT;

    snprintf(var, sizeof(var), "%s", secret);
    setenv("KFORGE_TEST_SECRET", var, 1);
    l.work_mib = 4;
    cr_assert_eq(sim_sandbox_run(&l, inside_fn, &me, &r, &e), KF_OK, "%s", e.msg);
    unsetenv("KFORGE_TEST_SECRET");
    cr_assert_eq(r.status, SIM_SB_OK, "%s: %s\n%s", sim_sandbox_status_name(r.status), r.reason, r.log);
    const char *j = r.json;
    cr_assert_eq(jint(j, "uid"), SIM_SANDBOX_INNER_ID, "%s", j);
    cr_assert_eq(jint(j, "pid"), 1, "PID 1 of its own namespace: %s", j);
    cr_assert_eq(jint(j, "caps"), 0, "no capabilities: %s", j);
    cr_assert_eq(jint(j, "nnp"), 1, "PR_SET_NO_NEW_PRIVS: %s", j);
    cr_assert_eq(jint(j, "env_secret"), 0, "%s", j);
    cr_assert_eq(jint(j, "env_kforge"), 0, "%s", j);
    cr_assert_eq(jint(j, "environ_secret"), 0, "%s", j);
    cr_assert_eq(jint(j, "proc"), 0, "no /proc: %s", j);
    cr_assert_eq(jint(j, "shadow"), 0, "%s", j);
    cr_assert_eq(jint(j, "etc_passwd"), 0, "only the loader's files of /etc: %s", j);
    cr_assert_eq(jint(j, "usr_write"), 0, "%s", j);
    cr_assert_eq(jint(j, "tmp_write"), 0, "/tmp is read-only: %s", j);
    const char *denied[] = { "e_ptrace", "e_kill", "e_pidfd", "e_unshare", "e_mount", "e_bpf", "e_perf",
                             "e_keyctl", "e_uffd", "e_iouring", "e_vmread", "e_setns", "e_exec", NULL };
    for (int i = 0; denied[i]; i++) {
        int en = jint(j, denied[i]);
        cr_assert(en == EPERM || en == ESRCH, "%s must fail (EPERM, or ESRCH: the caller is out of sight), "
                  "got errno %d: %s", denied[i], en, j);
    }
    cr_assert_eq(jint(j, "work_ok"), 1, "%s", j);
    cr_assert_leq(jint(j, "work_mib"), 4, "the work folder is bounded: %s", j);
    cr_assert(jint(j, "e_full") == EFBIG || jint(j, "e_full") == ENOSPC, "%s", j);
    sim_sandbox_result_release(&r);
}

Test(sim_sandbox, the_work_folder_is_gone_after_the_evaluation)
{
    /* each evaluation gets a fresh tmpfs: what one left is not there for the next */
    sim_sandbox_limits l = limits(30, 1024, 30000);
    sim_sandbox_result r;
    pid_t me = getpid();
    cr_assert_eq(sim_sandbox_run(&l, inside_fn, &me, &r, NULL), KF_OK);
    sim_sandbox_result_release(&r);
    cr_assert_eq(sim_sandbox_run(&l, inside_fn, &me, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_OK, "%s", r.reason);
    cr_assert_eq(jint(r.json, "work_ok"), 1, "%s", r.json);
    cr_assert_eq(jint(r.json, "work_leftover"), 0, "the first evaluation's file is not there: %s", r.json);
    cr_assert_eq(access("/kforge-work", F_OK), -1, "the work folder never appears on the machine");
    sim_sandbox_result_release(&r);
}

Test(sim_sandbox, the_probe_passes_and_unconfined_says_so)
{
    kf_err e = KF_ERR_INIT;
    sim_sandbox_limits l = limits(10, 1024, 10000);
    sim_sandbox_result r;
    int tag = 1;

    cr_assert_eq(sim_sandbox_probe(&e), KF_OK, "%s", e.msg);
    setenv("KFORGE_SANDBOX", "bogus", 1);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_sandbox_probe(&e), KF_CONFIG);
    cr_assert(strstr(e.msg, "strict") != NULL, "%s", e.msg);
    setenv("KFORGE_SANDBOX", "unconfined", 1);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_sandbox_run(&l, ok_fn, &tag, &r, NULL), KF_OK);
    cr_assert_eq(r.status, SIM_SB_OK, "%s", r.reason);
    cr_assert_str_eq(r.isolation, "unconfined");
    sim_sandbox_result_release(&r);
    unsetenv("KFORGE_SANDBOX");
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
}

/* An array whose shape product overflows int64_t (8 dims of 2^31, issue 22
 * bug 7) used to go out with a wrapped byte count of 0 under its huge
 * shape; the sender now refuses it and says why, and the child goes on. */
static kf_code huge_shape_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg;
    sim_array a;
    float v = 1;
    kf_err e = KF_ERR_INIT;
    kf_code rc;
    char json[700];
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "huge");
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = 8;
    for (int d = 0; d < 8; d++)
        a.shape[d] = (int64_t)1 << 31;
    a.data = &v;
    rc = sim_sandbox_send_array(out, &a, &e);
    snprintf(json, sizeof(json), "{\"rc\":\"%s\",\"says_bytes\":%s}", kf_code_name(rc),
             strstr(e.msg, "'huge'") && strstr(e.msg, "bytes") ? "true" : "false");
    sim_sandbox_send_json(out, json);
    (void)err;
    return KF_OK;
}

Test(sim_sandbox, an_array_whose_shape_overflows_is_not_sent)
{
    sim_sandbox_limits l = limits(10, 1024, 10000);
    sim_sandbox_result r;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(sim_sandbox_run(&l, huge_shape_fn, NULL, &r, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(r.status, SIM_SB_OK, "%s: %s", sim_sandbox_status_name(r.status), r.reason);
    cr_assert_eq(r.n_arrays, 0);
    cr_assert_str_eq(r.json, "{\"rc\":\"TOO_LARGE\",\"says_bytes\":true}");
    sim_sandbox_result_release(&r);
}
