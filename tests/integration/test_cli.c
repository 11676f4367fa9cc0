/* Integration tests of the `kforge` CLI against a real kforge-api (issue
 * 15), for what the routes of main serve: tables by default and the API's
 * own JSON with --json, the per-command --help, the jobs list's filters,
 * summaries of get and cancel, another user's job being not found (404,
 * exit 1), usage errors (exit 2), an unreachable API (exit 3), and a
 * download that refuses to overwrite a file.  The commands that need the
 * runs routes (wait's stream, iterations, artifacts, compare) are in
 * test_cli_runs.c. */
#include <cjson/cJSON.h>
#include <sys/stat.h>

#include "test_api_fixture.h"
#include "test_cli_fixture.h"

#define REDIS_DB 12

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, NULL);
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 120);

#define KF(token, ...) cli_run(fx.base, token, NULL, (const char *const[]){ __VA_ARGS__, NULL })

/* The JSON of GET path as token, parsed (caller deletes). */
static cJSON *api_get(const char *path, const char *token)
{
    kf_http_resp r;
    cJSON *v;

    cr_assert_eq(fx_req(&fx, "GET", path, token, NULL, &r), 200, "%s", r.body);
    v = fx_json(&r);
    kf_http_resp_release(&r);
    return v;
}

Test(cli, help_tells_each_command_and_bad_usage_exits_2)
{
    static const char *const cmds[] = { "submit", "get", "jobs", "cancel", "events", "wait", "iterations",
                                        "iteration", "compare", "artifact", "diag", "health" };
    cli_out r = KF(NULL, "--help");
    char id[] = "0b6c1f3e-0000-4000-8000-000000000001";

    cr_assert_eq(r.status, 0);
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        cr_expect(strstr(r.out, cmds[i]), "--help names %s:\n%s", cmds[i], r.out);
    cr_assert(strstr(r.out, "4 --timeout passed") && strstr(r.out, "KFORGE_API_URL"), "%s", r.out);
    cli_out_release(&r);
    r = KF(NULL, "iterations", "--help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "usage: kforge iterations ID [--attempt N] [--all]"), "%s", r.out);
    cli_out_release(&r);
    r = KF(NULL, "wait", "--help");
    cr_assert(r.status == 0 && strstr(r.out, "Last-Event-ID") && strstr(r.out, "Exit 0 when the job"), "%s", r.out);
    cli_out_release(&r);
    r = KF(NULL, "artifact", "--help");
    cr_assert(r.status == 0 && strstr(r.out, "--force") && strstr(r.out, "SHA-256"), "%s", r.out);
    cli_out_release(&r);

    r = KF(fx.user, "frobnicate");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unknown command frobnicate"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "get", "not-a-uuid");
    cr_assert(r.status == 2 && strstr(r.err, "is not a job id"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "jobs", "--label", "no equals sign");
    cr_assert(r.status == 2 && strstr(r.err, "write KEY=VALUE"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "iteration", id, "seven");
    cr_assert(r.status == 2 && strstr(r.err, "SEQ seven"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "iteration", id, "1", "--source", "--diff");
    cr_assert(r.status == 2 && strstr(r.err, "not both"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "compare", id);
    cr_assert(r.status == 2 && strstr(r.err, "usage: kforge compare A B"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "jobs", "--limit", "0");
    cr_assert(r.status == 2 && strstr(r.err, "--limit"), "%s", r.err);
    cli_out_release(&r);
}

Test(cli, jobs_print_a_table_and_json_prints_the_apis_answer)
{
    char *a = fx_submit(&fx, fx.user, NULL), *b = fx_submit(&fx, fx.user, NULL);
    cli_out r = KF(fx.user, "jobs");
    cJSON *want, *got;

    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strncmp(r.out, "ID  ", 4) == 0 && strstr(r.out, "STATE") && strstr(r.out, "CREATED"), "%s", r.out);
    cr_assert_eq(cli_lines_with(r.out, a), 1, "%s", r.out);
    cr_assert_eq(cli_lines_with(r.out, b), 1, "%s", r.out);
    cr_assert_eq(cli_lines_with(r.out, "queued  diag  -   trn2"), 2, "%s", r.out);
    cli_out_release(&r);

    r = KF(fx.user, "jobs", "--json");
    cr_assert_eq(r.status, 0, "%s", r.err);
    got = cJSON_Parse(r.out);
    want = api_get("/v1/jobs", fx.user);
    cr_assert(got && cJSON_Compare(cJSON_GetObjectItem(got, "jobs"), cJSON_GetObjectItem(want, "jobs"), true),
              "--json is the API's answer:\n%s", r.out);
    cJSON_Delete(got);
    cJSON_Delete(want);
    cli_out_release(&r);

    /* filters reach the API; a page of one says how to get the next */
    r = KF(fx.user, "list", "--state", "queued", "--kind", "diag", "--target", "trn2", "--limit", "1");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_eq(cli_lines_with(r.out, "queued"), 1, "%s", r.out);
    cr_assert(strstr(r.out, "more: kforge jobs --cursor "), "%s", r.out);
    cli_out_release(&r);
    r = KF(fx.user, "jobs", "--state", "running");
    cr_assert(r.status == 0 && strcmp(r.out, "no jobs\n") == 0, "%s", r.out);
    cli_out_release(&r);
    r = KF(fx.user, "jobs", "--cursor", "not-a-cursor");
    cr_assert_eq(r.status, 1, "a refused query exits 1: %s", r.err);
    cr_assert(strstr(r.err, "kforge: 4"), "the problem on one line: %s", r.err);
    cli_out_release(&r);
    free(a);
    free(b);
}

Test(cli, get_events_and_cancel_for_people_and_machines)
{
    char *id = fx_submit(&fx, fx.user, NULL), *path = kf_asprintf("/v1/jobs/%s", id);
    cli_out r = KF(fx.user, "get", id);
    char *want_line = kf_asprintf("job %s: queued (diag on trn2, attempt 0 of 3)\n", id);
    cJSON *want, *got;

    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, want_line);
    cli_out_release(&r);
    r = KF(fx.user, "get", id, "--json");
    got = cJSON_Parse(r.out);
    want = api_get(path, fx.user);
    cr_assert(got && cJSON_Compare(got, want, true), "--json is the API's job:\n%s", r.out);
    cJSON_Delete(got);
    cJSON_Delete(want);
    cli_out_release(&r);

    r = KF(fx.user, "events", id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strncmp(r.out, "ID  ", 4) == 0 && strstr(r.out, "TYPE") && strstr(r.out, "created") &&
              strstr(r.out, "queued"), "%s", r.out);
    cli_out_release(&r);

    r = KF(fx.user, "cancel", id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "cancelled"), "%s", r.out);
    cli_out_release(&r);
    r = KF(fx.user, "get", id, "--quiet");
    cr_assert(r.status == 0 && r.out[0] == '\0', "--quiet prints nothing: %s", r.out);
    cli_out_release(&r);
    free(want_line);
    free(path);
    free(id);
}

Test(cli, another_users_job_is_not_found)
{
    char *id = fx_submit(&fx, fx.user, NULL);
    static const char *const cmds[] = { "get", "events", "cancel" };

    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cli_out r = KF(fx.user2, cmds[i], id);
        cr_assert_eq(r.status, 1, "%s as another user exited %d", cmds[i], r.status);
        cr_assert(strstr(r.err, "kforge: 404 Not found"), "%s: %s", cmds[i], r.err);
        cr_assert_eq(r.out[0], '\0', "%s printed %s", cmds[i], r.out);
        cli_out_release(&r);
    }
    {
        cli_out r = KF(fx.user2, "jobs");
        cr_assert(r.status == 0 && strcmp(r.out, "no jobs\n") == 0, "bob sees none of alice's jobs: %s", r.out);
        cli_out_release(&r);
        r = KF(fx.admin, "get", id);
        cr_assert_eq(r.status, 0, "an admin sees every job: %s", r.err);
        cli_out_release(&r);
    }
    free(id);
}

Test(cli, an_unreachable_api_exits_3_and_a_bad_token_exits_1)
{
    cli_out r = cli_run("http://127.0.0.1:1", fx.user, NULL, (const char *const[]){ "jobs", NULL });

    cr_assert_eq(r.status, 3);
    cr_assert(strstr(r.err, "cannot reach http://127.0.0.1:1") && strstr(r.err, "KFORGE_API_URL"), "%s", r.err);
    cli_out_release(&r);
    r = KF("kf_not_a_token", "jobs");
    cr_assert(r.status == 1 && strstr(r.err, "kforge: 401"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "health");
    cr_assert(r.status == 0 && strcmp(r.out, "ready\n") == 0, "%s%s", r.out, r.err);
    cli_out_release(&r);
}

Test(cli, a_download_never_overwrites_without_force)
{
    char *id = fx_submit(&fx, fx.user, NULL);
    char *dir = kf_test_tmpdir("cli-dl"), *file = kf_asprintf("%s/kernel.py", dir), *text;
    FILE *f = fopen(file, "w");
    cli_out r;

    cr_assert_not_null(f);
    fputs("mine\n", f);
    fclose(f);
    r = cli_run(fx.base, fx.user, dir, (const char *const[]){ "artifact", "get", id, "kernel.py", NULL });
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "kernel.py exists; add --force"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "artifact", "get", id, "kernel.py", "-o", file);
    cr_assert(r.status == 2 && strstr(r.err, "exists; add --force"), "%s", r.err);
    cli_out_release(&r);
    text = kf_test_read_file(file);
    cr_assert_str_eq(text, "mine\n");
    free(text);
    /* a name that is no plain file name needs -o */
    r = KF(fx.user, "artifact", "get", id, "../kernel.py");
    cr_assert(r.status == 2 && strstr(r.err, "give one with -o FILE"), "%s", r.err);
    cli_out_release(&r);
    free(file);
    free(dir);
    free(id);
}

/* kforge submit shows the API's warnings on stderr: the job is accepted
 * (exit 0, its id on stdout) but no worker has ever offered what it needs. */
Test(cli, submit_says_when_no_worker_ever_offered_the_jobs_backend)
{
    char *dir = kf_test_tmpdir("cli-route"), *file = kf_asprintf("%s/job.json", dir);
    FILE *f = fopen(file, "w");
    cli_out r;

    cr_assert_not_null(f);
    fputs("{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"neuron\",\"op\":\"add\","
          "\"shapes\":[[64,64],[64,64]],\"dtype\":\"float32\"}\n", f);
    fclose(f);
    r = KF(fx.user, "submit", file);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strncmp(r.out, "job ", 4) == 0 && strstr(r.out, " queued"), "%s", r.out);
    cr_assert(strstr(r.err, "kforge: warning: no worker has ever offered backend 'neuron' for target 'trn2'"), "%s",
              r.err);
    cli_out_release(&r);
    free(file);
    free(dir);
}
