/* kforge-worker and kforge-scheduler command lines: --help tells the
 * truth (every setting the binary reads), bad settings stop start-up with
 * exit status 2 and a message naming the setting. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"

/* Run BIN ARG with one extra environment entry; returns the exit status
 * and the output (caller frees). */
static int run(const char *bin, const char *arg, const char *env, char **out)
{
    char *path = kf_test_bin(bin);
    char *dir = kf_test_tmpdir("cli");
    char *log = kf_asprintf("%s/out.txt", dir);
    char *argv[3] = { path, arg ? kf_strdup(arg) : NULL, NULL };
    char *envv[2] = { env ? kf_strdup(env) : NULL, NULL };
    int status = 0;
    pid_t pid = kf_test_spawn(argv, envv, log);
    long long end = kf_test_now_ms() + 5000;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (kf_test_now_ms() > end) {
            status = kf_test_stop(pid, SIGKILL, 1000);
            break;
        }
        kf_test_sleep_ms(10);
    }
    FILE *f = fopen(log, "r");
    char buf[16384];
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    *out = kf_strdup(buf);
    free(argv[1]);
    free(envv[0]);
    free(path);
    free(log);
    free(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

Test(cli, worker_help_names_every_setting_it_reads)
{
    char *out;
    cr_assert_eq(run("kforge-worker", "--help", NULL, &out), 0);
    const char *names[] = { "KFORGE_REDIS_URL", "KFORGE_API_URL", "KFORGE_TOKEN_FILE", "KFORGE_LEASE_MS",
                            "KFORGE_HEARTBEAT_MS", "KFORGE_WORKER_TARGETS", "KFORGE_WORKER_ID", "KFORGE_SPOOL_DIR",
                            "KFORGE_DRAIN_MS", "KFORGE_RETRY_BASE_MS", "KFORGE_RETRY_CAP_MS", "diag", NULL };
    for (int i = 0; names[i]; i++)
        cr_assert(strstr(out, names[i]) != NULL, "--help does not mention %s:\n%s", names[i], out);
    cr_assert(strstr(out, "KFORGE_PG_DSN") == NULL, "workers hold no database credentials");
    free(out);
}

Test(cli, worker_refuses_bad_settings)
{
    char *out;
    cr_assert_eq(run("kforge-worker", NULL, "KFORGE_WORKER_ID=a b", &out), 2);
    cr_assert(strstr(out, "KFORGE_WORKER_ID") != NULL, "%s", out);
    free(out);
    cr_assert_eq(run("kforge-worker", NULL, "KFORGE_WORKER_TARGETS=trn2,trn9", &out), 2);
    cr_assert(strstr(out, "trn9") != NULL, "%s", out);
    free(out);
    cr_assert_eq(run("kforge-worker", NULL, "KFORGE_LEASE_MS=5", &out), 2);
    cr_assert(strstr(out, "KFORGE_LEASE_MS") != NULL, "%s", out);
    free(out);
    cr_assert_eq(run("kforge-worker", "--bogus", NULL, &out), 2);
    cr_assert(strstr(out, "usage") != NULL, "%s", out);
    free(out);
}

Test(cli, scheduler_help_and_bad_settings)
{
    char *out;
    cr_assert_eq(run("kforge-scheduler", "--help", NULL, &out), 0);
    const char *names[] = { "KFORGE_PG_DSN", "KFORGE_REDIS_URL", "KFORGE_SCHED_TICK_MS", "KFORGE_LEADER_TTL_MS",
                            "KFORGE_IDEMPOTENCY_TTL_S", "KFORGE_RETRY_BASE_MS", NULL };
    for (int i = 0; names[i]; i++)
        cr_assert(strstr(out, names[i]) != NULL, "--help does not mention %s:\n%s", names[i], out);
    free(out);
    cr_assert_eq(run("kforge-scheduler", NULL, "KFORGE_SCHED_TICK_MS=4000", &out), 2);
    cr_assert(strstr(out, "KFORGE_LEADER_TTL_MS") != NULL, "a tick longer than half the lock TTL is refused: %s",
              out);
    free(out);
    cr_assert_eq(run("kforge-scheduler", NULL, "KFORGE_REDIS_URL=http://x", &out), 2);
    cr_assert(strstr(out, "redis://") != NULL, "%s", out);
    free(out);
}

/* A worker refuses a token file others can read, and one it has no token
 * at all, saying how to fix it. */
Test(cli, worker_refuses_a_readable_token_file)
{
    char *dir = kf_test_tmpdir("tokfile");
    char *path = kf_asprintf("%s/token", dir);
    char *env = kf_asprintf("KFORGE_TOKEN_FILE=%s", path);
    FILE *f = fopen(path, "w");
    char *out;

    cr_assert_not_null(f);
    fputs("kf_0123456789abcdef0123456789abcdef\n", f);
    fclose(f);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_eq(run("kforge-worker", NULL, env, &out), 2);
    cr_assert(strstr(out, "chmod 600") && strstr(out, path), "%s", out);
    free(out);
    cr_assert_eq(run("kforge-worker", NULL, "KFORGE_LOG_LEVEL=info", &out), 2);
    cr_assert(strstr(out, "KFORGE_TOKEN_FILE"), "no token at all: %s", out);
    free(out);
    free(env);
    free(path);
    free(dir);
}

/* KFORGE_TOKEN in the environment still works, with a warning, and leaves
 * the worker's environment at once: /proc/<pid>/environ (what a child
 * would inherit, or another process of the user could read) no longer
 * holds the secret. */
Test(cli, worker_removes_kforge_token_from_its_environment)
{
    static const char secret[] = "kf_5ec2e75ec2e75ec2e75ec2e75ec2e7";
    char *path = kf_test_bin("kforge-worker");
    char *dir = kf_test_tmpdir("tokenv");
    char *log = kf_asprintf("%s/out.txt", dir);
    char *spool = kf_asprintf("KFORGE_SPOOL_DIR=%s/spool", dir);
    char *tok = kf_asprintf("KFORGE_TOKEN=%s", secret);
    char *argv[2] = { path, NULL };
    char *envv[] = { tok, "KFORGE_WORKER_ID=envw", "KFORGE_API_URL=http://127.0.0.1:9",
                     "KFORGE_REDIS_URL=redis://127.0.0.1:9/0", spool, NULL };
    pid_t pid = kf_test_spawn(argv, envv, log);
    char *environ_path = kf_asprintf("/proc/%d/environ", (int)pid);
    char buf[65536];
    size_t n = 0;
    bool warned = false;
    long long end = kf_test_now_ms() + 5000;

    /* It has read its settings once it says it goes on without the API. */
    while (!warned && kf_test_now_ms() < end) {
        FILE *lf = fopen(log, "r");
        n = lf ? fread(buf, 1, sizeof(buf) - 1, lf) : 0;
        buf[n] = '\0';
        if (lf)
            fclose(lf);
        warned = strstr(buf, "going on as envw") != NULL;
        kf_test_sleep_ms(20);
    }
    cr_assert(warned, "the worker did not start: %s", buf);
    cr_assert(strstr(buf, "KFORGE_TOKEN_FILE"), "a warning recommends the file: %s", buf);
    {
        FILE *ef = fopen(environ_path, "r");
        cr_assert_not_null(ef);
        n = fread(buf, 1, sizeof(buf), ef);
        fclose(ef);
        cr_assert(n > 0);
        cr_assert_null(memmem(buf, n, secret, sizeof(secret) - 1), "the token is still in /proc/<pid>/environ");
        cr_assert_not_null(memmem(buf, n, "KFORGE_WORKER_ID=envw", 21), "environ was read");
    }
    kf_test_stop(pid, SIGTERM, 5000);
    free(environ_path);
    free(tok);
    free(spool);
    free(log);
    free(dir);
    free(path);
}
