/* kforge-worker and kforge-scheduler command lines: --help tells the
 * truth (every setting the binary reads), bad settings stop start-up with
 * exit status 2 and a message naming the setting. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    const char *names[] = { "KFORGE_REDIS_URL", "KFORGE_API_URL", "KFORGE_TOKEN", "KFORGE_LEASE_MS",
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
