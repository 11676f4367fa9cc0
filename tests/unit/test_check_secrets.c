/* scripts/check-secrets.sh, the check `make run` makes once its workers are
 * up (issue 13): a worker's environment (and its children's) and the files
 * under var/ must not hold the admin token, and token files must be private.
 * Each rule is shown to fail on a planted leak and to pass without it. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"

#define ADMIN "kf_adm1n0000000000000000000000000000000000000000000000000000000000"

static char *var_dir;
static char *admin_file;

static void setup(void)
{
    char *wt;

    var_dir = kf_test_tmpdir("secrets");
    admin_file = kf_asprintf("%s/admin-token", var_dir);
    kf_test_write_file(admin_file, ADMIN "\n");
    cr_assert_eq(chmod(admin_file, 0600), 0);
    wt = kf_asprintf("%s/worker-tokens", var_dir);
    cr_assert_eq(mkdir(wt, 0700), 0);
    free(wt);
    wt = kf_asprintf("%s/worker-tokens/host-w1", var_dir);
    kf_test_write_file(wt, "kf_w0rker\n");
    cr_assert_eq(chmod(wt, 0600), 0);
    free(wt);
}

static void teardown(void)
{
    free(admin_file);
    free(var_dir);
}

TestSuite(check_secrets, .init = setup, .fini = teardown, .timeout = 60);

/* Run the check on one process; returns its exit status, output in *out. */
static int check(pid_t pid, char **out)
{
    char *script = kf_asprintf("%s/scripts/check-secrets.sh", kf_test_env("KFORGE_TEST_ROOT"));
    char *log = kf_asprintf("%s/check.out", var_dir);
    char pids[16];
    int st;

    snprintf(pids, sizeof(pids), "%d", (int)pid);
    {
        char *argv[] = { "/bin/bash", script, admin_file, var_dir, pids, NULL };
        st = kf_test_run_cmd(argv, NULL, log, NULL);
    }
    *out = kf_test_read_file(log);
    unlink(log);
    free(log);
    free(script);
    return st;
}

static pid_t sleeper(char *const env[])
{
    char *argv[] = { "/bin/sleep", "30", NULL };
    pid_t p = kf_test_spawn(argv, env, NULL);
    kf_test_sleep_ms(100);   /* exec'd: /proc/<pid>/environ is the sleeper's */
    return p;
}

Test(check_secrets, a_clean_worker_passes)
{
    char *env[] = { "KFORGE_TOKEN_FILE=/x/worker-tokens/host-w1", "KFORGE_WORKER_ID=host-w1", NULL };
    pid_t p = sleeper(env);
    char *out;

    cr_assert_eq(check(p, &out), 0, "%s", out);
    free(out);
    kf_test_stop(p, SIGKILL, 2000);
}

Test(check_secrets, the_admin_token_in_a_worker_environment_fails)
{
    char *env[] = { "SOMETHING=" ADMIN, NULL };
    char *env2[] = { "KFORGE_TOKEN=kf_w0rker", NULL };
    pid_t p = sleeper(env), q = sleeper(env2);
    char *out;

    cr_assert_eq(check(p, &out), 1);
    cr_assert(strstr(out, "admin token in its environment"), "%s", out);
    free(out);
    cr_assert_eq(check(q, &out), 1);
    cr_assert(strstr(out, "KFORGE_TOKEN"), "a worker token in the environment: %s", out);
    free(out);
    kf_test_stop(p, SIGKILL, 2000);
    kf_test_stop(q, SIGKILL, 2000);
}

Test(check_secrets, the_admin_token_in_a_file_under_var_fails)
{
    char *env[] = { NULL };
    pid_t p = sleeper(env);
    char *logdir = kf_asprintf("%s/log", var_dir);
    char *logf = kf_asprintf("%s/api.log", logdir);
    char *out;

    cr_assert_eq(mkdir(logdir, 0755), 0);
    kf_test_write_file(logf, "level=info bootstrap token=" ADMIN "\n");
    cr_assert_eq(check(p, &out), 1);
    cr_assert(strstr(out, "api.log holds the admin token"), "%s", out);
    free(out);
    kf_test_write_file(logf, "level=info nothing secret\n");
    cr_assert_eq(check(p, &out), 0, "%s", out);
    free(out);
    kf_test_stop(p, SIGKILL, 2000);
    free(logf);
    free(logdir);
}

Test(check_secrets, readable_token_files_fail)
{
    char *env[] = { NULL };
    pid_t p = sleeper(env);
    char *wt = kf_asprintf("%s/worker-tokens/host-w1", var_dir);
    char *out;

    cr_assert_eq(chmod(wt, 0644), 0);
    cr_assert_eq(check(p, &out), 1);
    cr_assert(strstr(out, "host-w1 is mode 644"), "%s", out);
    free(out);
    cr_assert_eq(chmod(wt, 0600), 0);
    cr_assert_eq(chmod(admin_file, 0644), 0);
    cr_assert_eq(check(p, &out), 1);
    cr_assert(strstr(out, "admin-token is mode 644"), "%s", out);
    free(out);
    kf_test_stop(p, SIGKILL, 2000);
    free(wt);
}
