/* The `kforge` CLI over the runs routes of docs/runs.md (issue 15), on a
 * whole stack (api, scheduler, a sim worker): submit --wait follows the
 * event stream with a plain line per iteration, and picks up again after
 * the API restarts (Last-Event-ID, no iteration twice); iterations as a
 * table and as the API's JSON, one iteration's source; artifacts listed and
 * a download verified against its SHA-256 (no overwrite without --force);
 * two runs compared; the jobs list's label/op/time filters; and another
 * user gets 404 (exit 1) on every one of these for a job not theirs.
 *
 * These need the routes built on the runs branches (stream, iterations,
 * artifacts, compare, the jobs list's new filters): they pass once those
 * are merged. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "test_cli_fixture.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"

#define RUNS_DB 13

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

TestSuite(cli_runs, .fini = teardown, .timeout = 420);

#define KF(token, ...) cli_run(S.api_url, token, NULL, (const char *const[]){ __VA_ARGS__, NULL })

/* A generate job's body in a file (caller frees the path). */
static char *job_file(const char *team, int rows, int iterations)
{
    char *path = kf_asprintf("%s/job-%s.json", S.dir, team);
    char *body = kf_asprintf("{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
                             "\"budget\":{\"iterations\":%d},\"labels\":{\"team\":\"%s\"},"
                             "\"spec\":{\"op\":\"softmax\",\"shapes\":[[%d,1024]],\"dtype\":\"bfloat16\"}}",
                             iterations, team, rows);
    kf_test_write_file(path, body);
    free(body);
    return path;
}

/* The id in `kforge submit`'s first line ("job ID queued"); caller frees. */
static char *submitted_id(const char *out)
{
    cr_assert(strncmp(out, "job ", 4) == 0 && strlen(out) > 40, "submit printed: %s", out);
    return kf_strndup(out + 4, 36);
}

/* A token of another user, made with kforge-api (caller frees). */
static char *other_user(void)
{
    char *bin = kf_test_bin("kforge-api"), *tok = NULL, *out = kf_asprintf("%s/bob.out", S.dir);
    char *argv[] = { bin, "token", "create", "--role", "user", "--name", "bob", NULL };
    char *env[] = { kf_asprintf("KFORGE_PG_DSN=%s", S.dsn), kf_asprintf("KFORGE_REDIS_URL=%s", S.redis_url), NULL };

    cr_assert_eq(kf_test_run_cmd(argv, env, out, &tok), 0);
    cr_assert_not_null(tok);
    free(env[0]);
    free(env[1]);
    free(out);
    free(bin);
    return tok;
}

Test(cli_runs, a_person_follows_reads_downloads_and_compares_runs)
{
    kf_stack_opts o = { .redis_db = RUNS_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    char *fa, *fb, *a, *b, *dl, *text, *bob;
    cli_out r;
    cJSON *doc;

    kf_stack_start(&S, &o);
    fa = job_file("alpha", 256, 4);
    fb = job_file("beta", 512, 3);

    /* submit --wait in a pipe: plain lines, then the summary; exit 0 */
    r = KF(S.user, "submit", fa, "--wait", "--timeout", "300");
    cr_assert_eq(r.status, 0, "out:\n%s\nerr:\n%s", r.out, r.err);
    a = submitted_id(r.out);
    cr_assert(strstr(r.out, ": succeeded (generate softmax on trn2"), "%s", r.out);
    cr_assert(strstr(r.err, "-> running"), "state lines: %s", r.err);
    for (int seq = 1; seq <= 4; seq++) {
        char *line = kf_asprintf("iteration %d (attempt 1): ", seq);
        cr_expect_eq(cli_lines_with(r.err, line), 1, "%s once in:\n%s", line, r.err);
        free(line);
    }
    cli_out_release(&r);
    r = KF(S.user, "submit", fb, "--wait", "--quiet");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cli_out_release(&r);
    r = KF(S.user, "jobs", "--label", "team=beta", "--json");
    doc = cJSON_Parse(r.out);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "jobs")), 1, "%s", r.out);
    b = kf_strdup(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "jobs"), 0),
                                                           "id")));
    cJSON_Delete(doc);
    cli_out_release(&r);

    /* an ended job's stream: its history, then end; --json is the job */
    r = KF(S.user, "wait", a, "--json");
    doc = cJSON_Parse(r.out);
    cr_assert(r.status == 0 && doc && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "state")), "succeeded") == 0,
              "%s %s", r.out, r.err);
    cJSON_Delete(doc);
    cli_out_release(&r);

    /* iterations: a table, the API's JSON, every page with --all */
    r = KF(S.user, "iterations", a);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strncmp(r.out, "SEQ  ATTEMPT  ACTION", 20) == 0, "%s", r.out);
    cli_out_release(&r);
    r = KF(S.user, "iterations", a, "--all", "--limit", "1", "--json");
    doc = cJSON_Parse(r.out);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "items")), 4, "%s", r.out);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(doc, "next_cursor")));
    cJSON_Delete(doc);
    cli_out_release(&r);
    r = KF(S.user, "iteration", a, "1", "--source");
    cr_assert(r.status == 0 && strstr(r.out, "seq          1") && strstr(r.out, "def softmax("), "%s%s", r.out, r.err);
    cli_out_release(&r);

    /* artifacts: listed, downloaded and verified, never overwritten silently */
    r = KF(S.user, "artifact", "list", a);
    cr_assert(r.status == 0 && strstr(r.out, "kernel.py") && strstr(r.out, "final"), "%s%s", r.out, r.err);
    cli_out_release(&r);
    dl = kf_asprintf("%s/best.py", S.dir);
    r = KF(S.user, "artifact", "get", a, "kernel.py", "-o", dl);
    cr_assert(r.status == 0 && strstr(r.err, "verified"), "%s", r.err);
    cli_out_release(&r);
    text = kf_test_read_file(dl);
    cr_assert(strstr(text, "def softmax("), "%.200s", text);
    free(text);
    r = KF(S.user, "artifact", "get", a, "kernel.py", "-o", dl);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cli_out_release(&r);
    r = KF(S.user, "artifact", "get", a, "kernel.py", "-o", dl, "--force");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cli_out_release(&r);
    r = KF(S.user, "artifact", "get", a, "no-such.json", "-o", dl, "--force");
    cr_assert(r.status == 1 && strstr(r.err, "no final artifact named no-such.json"), "%s", r.err);
    cli_out_release(&r);

    /* compare: the sections for people, the API's JSON for machines */
    r = KF(S.user, "compare", a, b, "--diff");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "Params that differ:") && strstr(r.out, "Profile (deltas against the first job):") &&
              strstr(r.out, "Findings only in one:") && strstr(r.out, "Provenance differences:") &&
              strstr(r.out, "Source diff, job 2 against job 1:"), "%s", r.out);
    cli_out_release(&r);
    r = KF(S.user, "compare", a, b, "--json");
    doc = cJSON_Parse(r.out);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "jobs")), 2, "%s", r.out);
    cJSON_Delete(doc);
    cli_out_release(&r);

    /* the list's filters */
    r = KF(S.user, "jobs", "--op", "softmax", "--since", "2000-01-01T00:00:00Z");
    cr_assert(r.status == 0 && cli_lines_with(r.out, a) == 1 && cli_lines_with(r.out, b) == 1, "%s%s", r.out, r.err);
    cli_out_release(&r);
    r = KF(S.user, "jobs", "--until", "2000-01-01T00:00:00Z", "--label", "team=alpha");
    cr_assert(r.status == 0 && strcmp(r.out, "no jobs\n") == 0, "%s%s", r.out, r.err);
    cli_out_release(&r);

    /* another user: 404 and exit 1 everywhere */
    bob = other_user();
    {
        const char *const *cmds[] = {
            (const char *const[]){ "iterations", a, NULL },
            (const char *const[]){ "iteration", a, "1", NULL },
            (const char *const[]){ "artifact", "list", a, NULL },
            (const char *const[]){ "wait", a, "--timeout", "30", NULL },
            (const char *const[]){ "compare", a, b, NULL },
        };
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
            r = cli_run(S.api_url, bob, NULL, cmds[i]);
            cr_expect(r.status == 1 && strstr(r.err, "404"), "%s as bob: %d %s", cmds[i][0], r.status, r.err);
            cli_out_release(&r);
        }
        r = cli_run(S.api_url, bob, S.dir, (const char *const[]){ "artifact", "get", a, "kernel.py", NULL });
        cr_expect(r.status == 1 && strstr(r.err, "404"), "%s", r.err);
        cli_out_release(&r);
    }
    free(bob);
    free(dl);
    free(a);
    free(b);
    free(fa);
    free(fb);
}

Test(cli_runs, wait_resumes_after_the_api_restarts_without_repeating_iterations)
{
    kf_stack_opts o = { .redis_db = RUNS_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    char *file, *id, *log, *text, *bin, *abs, *url, *tok;
    int st = 0;
    pid_t pid;

    kf_stack_start(&S, &o);
    file = job_file("gamma", 1024, 12);
    {
        cli_out r = KF(S.user, "submit", file);
        cr_assert_eq(r.status, 0, "%s", r.err);
        id = submitted_id(r.out);
        cli_out_release(&r);
    }
    bin = kf_test_bin("kforge");
    abs = realpath(bin, NULL);
    url = kf_asprintf("KFORGE_API_URL=%s", S.api_url);
    tok = kf_asprintf("KFORGE_TOKEN=%s", S.user);
    log = kf_asprintf("%s/wait.log", S.dir);
    {
        char *argv[] = { abs, "wait", id, "--timeout", "300", NULL };
        char *env[] = { url, tok, NULL };
        pid = kf_test_spawn(argv, env, log);
    }
    /* the spawned child opens its log itself: wait for it to exist */
    for (int i = 0; i < 100 && access(log, F_OK) != 0; i++)
        kf_test_sleep_ms(50);
    /* the first iteration shows, then the API goes away and comes back */
    for (int i = 0; i < 1200; i++) {
        text = kf_test_read_file(log);
        bool seen = strstr(text, "iteration 1 (attempt 1)") != NULL;
        free(text);
        if (seen)
            break;
        kf_test_sleep_ms(100);
    }
    kf_test_stop(S.api, SIGTERM, 10000);
    kf_test_sleep_ms(1500);
    kf_stack_api(&S);
    waitpid(pid, &st, 0);
    text = kf_test_read_file(log);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "kforge wait exited %d:\n%s", st, text);
    cr_assert(strstr(text, ": succeeded (generate softmax"), "%s", text);
    for (int seq = 1; seq <= 12; seq++) {
        char *line = kf_asprintf("iteration %d (attempt 1): ", seq);
        cr_expect_leq(cli_lines_with(text, line), 1, "%s at most once:\n%s", line, text);
        free(line);
    }
    free(text);
    free(log);
    free(tok);
    free(url);
    free(abs);
    free(bin);
    free(file);
    free(id);
}
