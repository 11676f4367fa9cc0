/* Integration tests of `kforge batch` against a real kforge-api (issue 16):
 * submit from a file and from the library, status (plain lines in a pipe)
 * and status --wait following the batch's stream to its end, list, cancel,
 * report in md and csv, usage errors (exit 2) and refusals (exit 1), and
 * the --help text naming what the commands do. */
#include <cjson/cJSON.h>

#include "kf_buf.h"
#include "test_api_fixture.h"
#include "test_cli_fixture.h"

#define REDIS_DB 15

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, "KFORGE_LOG_LEVEL=info\nKFORGE_SSE_HEARTBEAT_S=1");
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(cli_batches, .init = setup, .fini = teardown, .timeout = 120);

#define KF(token, ...) cli_run(fx.base, token, NULL, (const char *const[]){ __VA_ARGS__, NULL })

static const char BATCH[] = "{\"name\":\"nightly\",\"template\":{\"kind\":\"diag\"},"
                            "\"matrix\":{\"target\":[\"trn1\",\"trn2\",\"trn3\"]}}";

/* Write BATCH to a file of the test's own; caller frees the path. */
static char *batch_file(const char *body)
{
    char *dir = kf_test_tmpdir("clib"), *path = kf_asprintf("%s/batch.json", dir);
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f);
    fputs(body, f);
    fclose(f);
    free(dir);
    return path;
}

/* The id in "batch <id> N jobs ..." (caller frees). */
static char *submitted_id(const char *out)
{
    cr_assert(strncmp(out, "batch ", 6) == 0, "%s", out);
    return kf_strndup(out + 6, 36);
}

Test(cli_batches, help_names_every_subcommand_and_bad_usage_exits_2)
{
    static const char *const subs[] = { "submit FILE", "--library all", "status ID", "--wait", "list", "cancel ID",
                                        "report ID", "--baseline", "--format md|csv|json", "Last-Event-ID",
                                        "0.03", "4 --timeout" };
    cli_out r = KF(NULL, "batch", "--help");

    cr_assert_eq(r.status, 0);
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        cr_expect(strstr(r.out, subs[i]), "batch --help names %s:\n%s", subs[i], r.out);
    cli_out_release(&r);
    r = KF(NULL, "--help");
    cr_assert(r.status == 0 && strstr(r.out, "batch submit|status|list|cancel|report"), "%s", r.out);
    cli_out_release(&r);

    r = KF(fx.user, "batch", "frob");
    cr_assert(r.status == 2 && strstr(r.err, "unknown subcommand"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "batch", "status", "nope");
    cr_assert(r.status == 2 && strstr(r.err, "is not a batch id"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "batch", "submit", "--library", "all");
    cr_assert(r.status == 2 && strstr(r.err, "--target"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "batch", "submit", "--library", "all", "--target", "trn2", "--priority", "7");
    cr_assert(r.status == 2 && strstr(r.err, "--priority"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "batch", "report", "0b6c1f3e-0000-4000-8000-000000000001", "--format", "xml");
    cr_assert(r.status == 2 && strstr(r.err, "--format"), "%s", r.err);
    cli_out_release(&r);
    r = KF(fx.user, "batch", "report", "0b6c1f3e-0000-4000-8000-000000000001", "--threshold", "1.5");
    cr_assert(r.status == 2 && strstr(r.err, "--threshold"), "%s", r.err);
    cli_out_release(&r);
}

Test(cli_batches, submit_status_list_cancel_and_report)
{
    char *file = batch_file(BATCH), *id, *bad;
    cli_out r = KF(fx.user, "batch", "submit", file);

    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, " 3 jobs open"), "%s", r.out);
    id = submitted_id(r.out);
    cli_out_release(&r);

    r = KF(fx.user, "batch", "status", id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "(nightly)  open"), "%s", r.out);
    cr_assert(strstr(r.out, "[..............................]   0%  0/3  queued 3"), "%s", r.out);
    cr_assert(!strchr(r.out, '\r'), "plain lines in a pipe: %s", r.out);
    cli_out_release(&r);

    r = KF(fx.user, "batch", "list");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "ID") && strstr(r.out, "SUCCEEDED") && strstr(r.out, id) && strstr(r.out, "nightly"),
              "%s", r.out);
    cli_out_release(&r);
    r = KF(fx.user2, "batch", "list", "--json");
    cr_assert(r.status == 0 && strstr(r.out, "\"items\":[]"), "bob sees none of alice's: %s", r.out);
    cli_out_release(&r);

    r = KF(fx.user, "batch", "cancel", id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "3 cancelled, 0 running asked to stop"), "%s", r.out);
    cr_assert(strstr(r.out, "100%  3/3  cancelled 3"), "%s", r.out);
    cli_out_release(&r);

    r = KF(fx.user, "batch", "report", id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strncmp(r.out, "# Batch report ", 15) == 0, "%s", r.out);
    cr_assert_eq(cli_lines_with(r.out, " | failed |  |"), 3, "each cancelled entry failed: %s", r.out);
    cli_out_release(&r);
    r = KF(fx.user, "batch", "report", id, "--format", "csv");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strncmp(r.out, "op,shape,dtype,target,", 22) == 0, "%s", r.out);
    cr_assert_eq(cli_lines_with(r.out, ",failed,"), 3, "%s", r.out);
    cli_out_release(&r);
    r = KF(fx.user2, "batch", "report", id);
    cr_assert(r.status == 1 && strstr(r.err, "404"), "another user's batch: %s", r.err);
    cli_out_release(&r);

    bad = batch_file("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn9\"]}}");
    r = KF(fx.user, "batch", "submit", bad);
    cr_assert(r.status == 1 && strstr(r.err, "422") && strstr(r.err, "entries[0].target"), "%s", r.err);
    cli_out_release(&r);
    free(bad);
    free(file);
    free(id);
}

Test(cli_batches, library_submit_and_status_wait_to_the_end)
{
    cli_out r = KF(fx.user, "batch", "submit", "--library", "softmax,rmsnorm", "--target", "trn2", "--target", "trn3",
                   "--name", "lib", "--json");
    cJSON *b;
    char *id, *file, *sql;

    cr_assert_eq(r.status, 0, "%s", r.err);
    b = cJSON_Parse(r.out);
    cr_assert_not_null(b, "%s", r.out);
    cr_assert_eq(cJSON_GetObjectItem(b, "n_jobs")->valueint, 4);
    cr_assert_str_eq(cJSON_GetObjectItem(b, "source")->valuestring, "library");
    id = kf_strdup(cJSON_GetObjectItem(b, "id")->valuestring);
    cJSON_Delete(b);
    cli_out_release(&r);

    /* Every job finished, one failed: --wait sees the end and exits 1. */
    sql = kf_asprintf("UPDATE jobs SET state = CASE WHEN spec->>'op' = 'softmax' AND target = 'trn3' THEN 'failed' "
                      "ELSE 'succeeded' END, finished_at = now() WHERE batch_id = '%s'", id);
    PQclear(PQexec(fx.pg, sql));
    free(sql);
    r = KF(fx.user, "batch", "status", id, "--wait", "--timeout", "30");
    cr_assert_eq(r.status, 1, "not every job succeeded: %s %s", r.out, r.err);
    cr_assert(strstr(r.err, "100%  4/4  succeeded 3  failed 1"), "the roll-up line: %s", r.err);
    cr_assert(strstr(r.out, "finished"), "%s", r.out);
    cli_out_release(&r);
    free(id);

    /* A batch whose jobs all succeed: submit --wait exits 0. */
    file = batch_file("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"inf2\"]}}");
    r = KF(fx.user, "batch", "submit", file);
    cr_assert_eq(r.status, 0, "%s", r.err);
    id = submitted_id(r.out);
    cli_out_release(&r);
    sql = kf_asprintf("UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE batch_id = '%s'", id);
    PQclear(PQexec(fx.pg, sql));
    free(sql);
    r = KF(fx.user, "batch", "status", id, "--wait", "--timeout", "30");
    cr_assert_eq(r.status, 0, "%s %s", r.out, r.err);
    cr_assert(strstr(r.err, "100%  1/1  succeeded 1"), "%s", r.err);
    cli_out_release(&r);
    free(file);
    free(id);
}

/* ---- a whole stack: two batches run by a worker, then the report ----------------------- */

#include "tests/lib/kf_test_stack.h"

#define E2E_DB 14

static kf_stack S;

static void e2e_teardown(void)
{
    kf_stack_stop(&S);
}

TestSuite(cli_batches_e2e, .fini = e2e_teardown, .timeout = 600);

/* Two batches over the same matrix, run to the end by a real worker on the
 * simulator: the second's report takes the first as its baseline and,
 * nothing having changed (the simulator's timing is deterministic), calls
 * every entry unchanged with no provenance difference. */
Test(cli_batches_e2e, a_rerun_with_nothing_changed_reports_every_entry_unchanged)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    static const char body[] = "{\"name\":\"e2e\",\"template\":{\"kind\":\"generate\",\"backend\":\"sim\",\"max_attempts\":1,"
                               "\"budget\":{\"iterations\":2}},\"matrix\":{\"op\":[\"softmax\"],\"shapes\":[[[256,512]],"
                               "[[128,1024]]],\"dtype\":[\"bfloat16\"],\"target\":[\"trn2\"]}}";
    char *file, *first, *second, *path;
    cli_out r;

    kf_stack_start(&S, &o);
    file = kf_asprintf("%s/batch.json", S.dir);
    kf_test_write_file(file, body);
    r = cli_run(S.api_url, S.user, NULL, (const char *const[]){ "batch", "submit", file, "--wait", "--timeout", "400", NULL });
    cr_assert_eq(r.status, 0, "out:\n%s\nerr:\n%s", r.out, r.err);
    cr_assert(strstr(r.err, "100%  2/2  succeeded 2"), "the roll-up lines: %s", r.err);
    first = submitted_id(r.out);
    cli_out_release(&r);
    r = cli_run(S.api_url, S.user, NULL, (const char *const[]){ "batch", "submit", file, "--wait", "--timeout", "400", NULL });
    cr_assert_eq(r.status, 0, "out:\n%s\nerr:\n%s", r.out, r.err);
    second = submitted_id(r.out);
    cli_out_release(&r);

    r = cli_run(S.api_url, S.user, NULL, (const char *const[]){ "batch", "report", second, "--format", "json", NULL });
    cr_assert_eq(r.status, 0, "%s", r.err);
    {
        cJSON *rep = cJSON_Parse(r.out);
        const cJSON *e;
        cr_assert_not_null(rep, "%s", r.out);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "baseline")), first);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "entries")), 2);
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(rep, "entries"))
        {
            cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "verdict")), "unchanged", "%s", r.out);
            cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(e, "provenance_diff")), 0, "%s", r.out);
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "new"), "latency_ns")), "%s", r.out);
        }
        cJSON_Delete(rep);
    }
    cli_out_release(&r);
    path = kf_asprintf("SELECT count(*) FROM jobs WHERE batch_id = '%s' AND provenance->>'sim_build' IS NOT NULL", second);
    cr_assert_eq(kf_stack_sql_long(&S, path, NULL), 2, "the worker recorded each job's provenance");
    free(path);
    free(file);
    free(first);
    free(second);
}

/* Copies kernels/NAME.py into dir with its reference_shapes replaced by
 * shapes (the test's small library: the same templates, shapes a test can
 * run in seconds). */
static void small_template(const char *dir, const char *name, const char *from, const char *shapes)
{
    char *src = kf_asprintf("kernels/%s.py", name), *dst = kf_asprintf("%s/%s.py", dir, name);
    char *text = kf_test_read_file(src), *at;
    kf_buf out = KF_BUF_INIT;

    cr_assert_not_null(text, "read %s", src);
    at = strstr(text, from);
    cr_assert_not_null(at, "%s has %s", src, from);
    kf_buf_add(&out, text, (size_t)(at - text));
    kf_buf_adds(&out, shapes);
    kf_buf_adds(&out, at + strlen(from));
    kf_test_write_file(dst, out.data);
    kf_buf_release(&out);
    free(text);
    free(src);
    free(dst);
}

/* The done-when, on a library of two templates: `--library all`
 * runs every op, the report lists each; a second run after one template
 * changed reports exactly that op's entries with a changed template_hash
 * (the other op: no provenance difference), against the first run. */
Test(cli_batches_e2e, a_rerun_after_one_template_changed_reports_exactly_that_op)
{
    kf_stack_opts o = { .redis_db = E2E_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    char *dir = kf_test_tmpdir("lib2"), *file, *first, *second, *path;
    static const char body[] = "{\"library\":\"all\",\"targets\":[\"trn2\"],\"budget\":{\"iterations\":2},"
                               "\"max_attempts\":1,\"name\":\"lib2\"}";
    cli_out r;

    small_template(dir, "add", "\"reference_shapes\": [[4096, 8192], [4096, 8192]]",
                   "\"reference_shapes\": [[256, 512], [256, 512]]");
    small_template(dir, "softmax", "\"reference_shapes\": [[4096, 8192]]", "\"reference_shapes\": [[256, 512]]");
    setenv("KFORGE_KERNELS_DIR", dir, 1);   /* the API's library and the worker's templates */
    kf_stack_start(&S, &o);
    file = kf_asprintf("%s/batch.json", S.dir);
    kf_test_write_file(file, body);
    r = cli_run(S.api_url, S.user, NULL, (const char *const[]){ "batch", "submit", file, "--wait", "--timeout", "400", NULL });
    cr_assert_eq(r.status, 0, "out:\n%s\nerr:\n%s", r.out, r.err);
    first = submitted_id(r.out);
    cli_out_release(&r);

    /* A change to softmax's template (its text: a new line), nothing else. */
    path = kf_asprintf("%s/softmax.py", dir);
    {
        char *text = kf_test_read_file(path), *changed = kf_asprintf("%s\n# retuned after a template edit\n", text);
        kf_test_write_file(path, changed);
        free(changed);
        free(text);
    }
    free(path);
    r = cli_run(S.api_url, S.user, NULL, (const char *const[]){ "batch", "submit", file, "--wait", "--timeout", "400", NULL });
    cr_assert_eq(r.status, 0, "out:\n%s\nerr:\n%s", r.out, r.err);
    second = submitted_id(r.out);
    cli_out_release(&r);

    r = cli_run(S.api_url, S.user, NULL, (const char *const[]){ "batch", "report", second, "--format", "json", NULL });
    cr_assert_eq(r.status, 0, "%s", r.err);
    {
        cJSON *rep = cJSON_Parse(r.out);
        const cJSON *e;
        int n_add = 0, n_softmax = 0;
        cr_assert_not_null(rep, "%s", r.out);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "baseline")), first, "%s", r.out);
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(rep, "entries"))
        {
            const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(e, "op"));
            const cJSON *diff = cJSON_GetObjectItem(e, "provenance_diff");
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "new"), "latency_ns")), "%s", r.out);
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "old"), "latency_ns")), "%s", r.out);
            if (strcmp(op, "softmax") == 0) {
                n_softmax++;
                cr_assert_eq(cJSON_GetArraySize(diff), 1, "only the template changed: %s", r.out);
                cr_assert_not_null(cJSON_GetObjectItem(diff, "template_hash"), "%s", r.out);
            } else {
                n_add++;
                cr_assert_str_eq(op, "add", "%s", r.out);
                cr_assert_eq(cJSON_GetArraySize(diff), 0, "add did not change: %s", r.out);
                cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "verdict")), "unchanged", "%s", r.out);
            }
        }
        cr_assert_eq(n_add, 1, "every op of the library is in the report: %s", r.out);
        cr_assert_eq(n_softmax, 1, "%s", r.out);
        cJSON_Delete(rep);
    }
    cli_out_release(&r);
    unsetenv("KFORGE_KERNELS_DIR");
    free(file);
    free(first);
    free(second);
    free(dir);
}
