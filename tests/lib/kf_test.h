/*
 * kf_test — helpers shared by kforge's Criterion test binaries.
 *
 * Integration tests run under tests/run.sh, which starts Redis and
 * PostgreSQL and exports their ports (KFORGE_TEST_*).  These helpers read
 * them, make a fresh database per test, spawn kforge binaries as child
 * processes and wait for conditions with a deadline.  Strings returned are
 * heap-allocated and owned by the caller unless stated otherwise.
 */
#ifndef KF_TEST_H
#define KF_TEST_H

#include <stdbool.h>
#include <sys/types.h>

/* Value of an environment variable the harness must have set; fails the
 * test with a clear message when it is missing.  Not owned by the caller. */
const char *kf_test_env(const char *name);

/* Optional environment variable; NULL when unset. */
const char *kf_test_env_opt(const char *name);

/* "redis://127.0.0.1:PORT/DB" for the harness's Redis. Caller frees. */
char *kf_test_redis_url(int db);

/* Create a fresh, empty database owned by role kforge and return its libpq
 * DSN (caller frees).  Names are unique per process and call. */
char *kf_test_fresh_db(void);

/* Path of a built binary, e.g. kf_test_bin("kforge-api"). Caller frees. */
char *kf_test_bin(const char *name);

/* The source tree the tests run in (KFORGE_TEST_ROOT, else "."); caller frees. */
char *kf_test_root(void);

/* kf_test_bin as an absolute path (the test fails when the binary does not
 * exist), for commands run from another folder.  Caller frees. */
char *kf_test_bin_abs(const char *name);

/* Run a shell command line; *out is its standard output (up to 4 MiB; add
 * 2>&1 to the command for its errors too), the caller frees it.  Returns
 * the exit status, or -1 when it did not exit normally. */
int kf_test_sh(const char *cmd, char **out);

/* Start argv[0] with extra environment entries ("K=V", NULL-terminated),
 * stdout/stderr appended to log_path.  Returns the pid. */
pid_t kf_test_spawn(char *const argv[], char *const env[], const char *log_path);

/* Run argv to completion with extra environment entries, its output in
 * out_path (truncated first).  Returns the exit status (128 if it did not
 * exit normally); when token is not NULL, *token is the last output line
 * starting with "kf_" (a token printed by `kforge-api token create`), or
 * NULL (caller frees). */
int kf_test_run_cmd(char *const argv[], char *const env[], const char *out_path, char **token);

/* Send sig and wait up to timeout_ms for the child; SIGKILL after that.
 * Returns the wait status. */
int kf_test_stop(pid_t pid, int sig, int timeout_ms);

/* Milliseconds on CLOCK_MONOTONIC. */
long long kf_test_now_ms(void);

/* Sleep for ms milliseconds. */
void kf_test_sleep_ms(int ms);

/* A free TCP port on 127.0.0.1. */
int kf_test_free_port(void);

/* Scratch folder for this test process (created; caller frees the path). */
char *kf_test_tmpdir(const char *tag);

/* Write text to path (the test fails if it cannot). */
void kf_test_write_file(const char *path, const char *text);

/* The whole of path as a string (caller frees); the test fails if unreadable. */
char *kf_test_read_file(const char *path);

#endif
