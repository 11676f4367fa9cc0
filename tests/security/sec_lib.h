/*
 * sec_lib — shared by the security tests (tests/security/): hostile kernels
 * run through `kforge-sim` (test_sec_sim.c) and through a worker
 * (test_sec_worker.c) must get nothing out of the evaluation sandbox.
 *
 * Each attack is a kernel file tests/security/kernels/NAME.py whose body
 * tries one attack and raises RuntimeError("LEAK:...") when it got something
 * or RuntimeError("DENIED:...") when every attempt failed.  The file has a
 * line "# @@PRELUDE@@" where kernels/_prelude.py goes (helpers, and CONFIG:
 * the pids, paths and ports of the world outside the sandbox, filled in by
 * sec_kernel_source()).
 *
 * A test plants secrets the way a deployment has them (tokens in the
 * environment of the processes that hold them, token files under var/, a
 * secret file the worker's user can read), all random per run, and then
 * checks everything the caller gets back with sec_check_text(): no "LEAK:",
 * no planted secret, a bounded size, and the "DENIED:" marker (so that a
 * kernel that never ran cannot pass).  sec_check_outside() checks the
 * filesystem outside the sandbox: no file the kernels wrote in the decoy
 * folders, kforge's folders or the machine's /tmp.
 *
 * Strings returned are heap-allocated and owned by the caller.
 */
#ifndef SEC_LIB_H
#define SEC_LIB_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define SEC_MAX 16

/* Every attack: X(name), name being the file name of its kernel without
 * ".py".  Grouped: secrets, other processes, network, filesystem, processes
 * and threads, syscalls the seccomp allowlist must deny, identity. */
#define SEC_ATTACKS(X)                                                                       \
    X(env) X(secret_files) X(etc_shadow) X(parent_environ) X(proc_environ_walk)              \
    X(parent_mem) X(self_mem)                                                                \
    X(ptrace) X(kill) X(process_vm_readv) X(pidfd_getfd)                                     \
    X(net_socket) X(unix_socket) X(inherited_fds)                                            \
    X(write_outside) X(symlink_escape) X(huge_file) X(stdout_flood)                          \
    X(threads) X(spawn)                                                                      \
    X(sys_unshare) X(sys_mount) X(sys_setns) X(sys_bpf) X(sys_perf_event_open)               \
    X(sys_keyctl) X(sys_userfaultfd) X(sys_io_uring)                                         \
    X(capabilities) X(identity)

/* The same names as strings, NULL-terminated. */
extern const char *const sec_attacks[];

/* Attacks on kforge-sim alone: output_symlink plants symlinks where the
 * unsandboxed kforge-sim writes its output files and returns normally, so
 * it has no marker; its test checks the file the links point at.
 * import_root_escape runs with --path naming a folder beside the secrets
 * that holds links to them (the test makes them; see its kernel). */
#define SEC_SIM_ATTACKS(X) X(output_symlink) X(import_root_escape)

extern const char *const sec_sim_attacks[];

/* Attacks on the worker alone: source_swap (an optimize job) replaces its
 * own source file in the worker's job folder by a symlink to a secret and
 * returns normally, so it has no marker; its test checks that the job
 * succeeded and that no secret came back. */
#define SEC_WORKER_ATTACKS(X) X(source_swap)

extern const char *const sec_worker_attacks[];

/* The attacks also run as a user's NumPy reference (kforge-sim run --check,
 * a validate job): references are user code too and are evaluated in the
 * same sandbox, or should be. */
#define SEC_REF_ATTACKS(X)                                                                   \
    X(env) X(secret_files) X(parent_environ) X(proc_environ_walk) X(parent_mem) X(self_mem)  \
    X(ptrace) X(pidfd_getfd) X(write_outside) X(capabilities) X(identity)

extern const char *const sec_ref_attacks[];

/* A harmless kernel `kernel(x)` (x: 128x128 float32) that returns a copy of
 * x: the kernel of the jobs whose reference attacks. */
extern const char sec_benign_kernel[];

/* The outside world one run of the attacks is checked against. */
typedef struct sec_world {
    char  *dir;                     /* scratch folder (planted files, decoys) */
    char  *secrets[SEC_MAX];        /* values that must never come back */
    int    n_secrets;
    int    victims[SEC_MAX];        /* pids of processes outside the sandbox */
    int    n_victims;
    int    ports[SEC_MAX];          /* TCP ports on 127.0.0.1 that answer */
    int    n_ports;
    char  *unix_sockets[SEC_MAX];   /* listening Unix socket paths */
    int    n_unix;
    char  *secret_files[SEC_MAX];   /* planted secret files */
    int    n_secret_files;
    char  *decoy_dirs[SEC_MAX];     /* folders a kernel must not write */
    int    n_decoys;
    char  *tmp_name;                /* the file write_outside makes in /tmp */
    char  *output_dir;              /* kforge-sim's --output-dir, or NULL */
    char  *target_file;             /* a file outside that must keep its content */
    int    listen_fds[SEC_MAX];     /* sockets sec_listen_* opened */
    int    n_listen;
} sec_world;

/* "KFSECRET-" + 32 random hex digits (the kernels recognize this shape). */
char *sec_marker(void);

/* A fresh world: a scratch folder, the tmp name, no secrets yet. */
void sec_world_init(sec_world *w, const char *tag);
/* Closes the listeners and removes what the kernels may have left in /tmp. */
void sec_world_release(sec_world *w);

/* Remember a value that must never come back (copied). */
void sec_add_secret(sec_world *w, const char *value);
void sec_add_victim(sec_world *w, pid_t pid);
void sec_add_port(sec_world *w, int port);

/* Plant, under dir: var/worker-token and var/admin-token (mode 0600, the
 * given tokens), secret.txt (0644, a fresh marker), and the decoy folders
 * decoy-kernels and decoy-bin (plus extra_decoy when not NULL, e.g. the
 * worker's spool).  Every value goes into the secrets. */
void sec_plant(sec_world *w, const char *worker_token, const char *admin_token, const char *extra_decoy);

/* A Unix socket path outside (e.g. PostgreSQL's) a kernel must not reach. */
void sec_add_unix_socket(sec_world *w, const char *path);

/* Add a folder (created if missing) a kernel must not write. */
void sec_add_decoy(sec_world *w, const char *path);

/* A TCP listener on 127.0.0.1 and a Unix listener in dir, both added to
 * the world: reaching them from the sandbox is a way out. */
void sec_listen_tcp(sec_world *w);
void sec_listen_unix(sec_world *w);

/* The source of attack `name`: its kernel with the prelude and CONFIG.
 * sec_reference_source() makes it a NumPy reference: `kernel(x)` without
 * @nki.jit. */
char *sec_kernel_source(const sec_world *w, const char *name);
char *sec_reference_source(const sec_world *w, const char *name);

/* Checks (cr_expect: every failure is reported, the test goes on) that the
 * len bytes at text (binary-safe), which the caller got back from attack
 * `name` through `where`, hold no "LEAK:", no secret of w, are at most
 * max_bytes, and hold the "DENIED:" marker.  True when every check passed.
 * sec_check_leaks() is the same without the marker. */
bool sec_check_text(const sec_world *w, const char *name, const char *where, const char *text, size_t len,
                    size_t max_bytes);
bool sec_check_leaks(const sec_world *w, const char *name, const char *where, const char *text, size_t len,
                     size_t max_bytes);

/* Checks that no kernel left a file outside the sandbox: nothing named
 * "sectest-*" in the decoy folders, in kforge's kernels/ and binaries
 * folders, no /tmp/<tmp_name>, and target_file keeps its content.  Removes
 * what it finds. */
bool sec_check_outside(const sec_world *w, const char *name);

/* Run argv in cwd with extra environment entries, stdout and stderr to
 * files; SIGCONT then SIGKILL after timeout_ms.  Returns the wait status,
 * or -1 on a timeout. */
int sec_run(char *const argv[], char *const env[], const char *cwd, const char *out_path, const char *err_path,
            int timeout_ms);

/* A secret's value shortened for messages ("KFSECRET-0123…"). */
const char *sec_short(const char *secret, char buf[24]);

#endif
