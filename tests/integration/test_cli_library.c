/* `kforge library` on a whole stack (api, scheduler, a sim worker; issue
 * 16, docs/library.md): a generate job's success puts its kernel in the
 * library; list (filters, --json), show (history), export (kernels plus
 * manifest.json, sha256 verified, a non-empty folder refused without
 * --force); the exported kernel validates against the op's reference
 * with `kforge-sim run` as the manifest's "check" says; and a second
 * generate of the same op and shape is warm-started from the entry and
 * evaluates fewer candidates. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_artifact.h"
#include "test_cli_fixture.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"

#define LIBRARY_DB 10

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

TestSuite(cli_library, .fini = teardown, .timeout = 600);

#define KF(token, ...) cli_run(S.api_url, token, NULL, (const char *const[]){ __VA_ARGS__, NULL })

/* `kforge submit FILE --wait --json`'s job: the job's id (caller frees). */
static char *run_generate(const char *file)
{
    cli_out r = KF(S.user, "submit", file, "--wait", "--timeout", "400", "--quiet");
    char *id;

    cr_assert_eq(r.status, 0, "out:\n%s\nerr:\n%s", r.out, r.err);
    cli_out_release(&r);
    r = KF(S.user, "jobs", "--op", "softmax", "--limit", "1", "--json");
    {
        cJSON *doc = cJSON_Parse(r.out);
        const cJSON *j = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "jobs"), 0);
        cr_assert_not_null(j, "%s", r.out);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "state")), "succeeded");
        id = kf_strdup(cJSON_GetStringValue(cJSON_GetObjectItem(j, "id")));
        cJSON_Delete(doc);
    }
    cli_out_release(&r);
    return id;
}

/* The job's iterations, as the API lists them (all pages). */
static cJSON *iterations(const char *job)
{
    cli_out r = KF(S.user, "iterations", job, "--all", "--json");
    cJSON *doc = cJSON_Parse(r.out);

    cr_assert(r.status == 0 && doc, "%s %s", r.out, r.err);
    cli_out_release(&r);
    return doc;
}

Test(cli_library, export_validates_with_kforge_sim_and_a_second_run_is_warm_started)
{
    kf_stack_opts o = { .redis_db = LIBRARY_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    char *file, *body, *first, *second, *dir, *entry, *kpath, *mpath, *text, *bin;
    cJSON *doc, *manifest, *it1, *it2;
    const cJSON *k, *check, *a, *w;
    char sha[65];
    cli_out r;

    kf_stack_start(&S, &o);
    file = kf_asprintf("%s/softmax.json", S.dir);
    body = kf_asprintf("{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
                       "\"budget\":{\"iterations\":30},\"spec\":{\"op\":\"softmax\",\"shapes\":[[256,1024]],"
                       "\"dtype\":\"bfloat16\"}}");
    kf_test_write_file(file, body);
    first = run_generate(file);

    /* list: a table, and the API's JSON with the filters */
    r = KF(S.user, "library", "list");
    cr_assert(r.status == 0 && strstr(r.out, "ENTRY") && strstr(r.out, "softmax"), "%s%s", r.out, r.err);
    cli_out_release(&r);
    r = KF(S.user, "library", "list", "--op", "softmax", "--target", "trn2", "--dtype", "bfloat16", "--json");
    doc = cJSON_Parse(r.out);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "items")), 1, "%s", r.out);
    entry = kf_strdup(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "items"), 0),
                                                               "id")));
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "items"), 0),
                                                              "job_id")),
                     first);
    cJSON_Delete(doc);
    cli_out_release(&r);
    r = KF(S.user, "library", "list", "--target", "trn1");
    cr_assert(r.status == 0 && strstr(r.out, "no library entries"), "%s", r.out);
    cli_out_release(&r);

    /* show: the entry and its history */
    r = KF(S.user, "library", "show", entry);
    cr_assert(r.status == 0 && strstr(r.out, "entry softmax-trn2-bfloat16-sim-") && strstr(r.out, "history:") &&
                  strstr(r.out, "created") && strstr(r.out, first),
              "%s%s", r.out, r.err);
    cli_out_release(&r);
    r = KF(S.user, "library", "show", "softmax-trn2-bfloat16-sim-000000000000");
    cr_assert(r.status == 1 && strstr(r.err, "404"), "%d %s", r.status, r.err);
    cli_out_release(&r);
    r = KF(S.user, "library", "show", "../etc");
    cr_assert_eq(r.status, 2, "%s", r.err);
    cli_out_release(&r);

    /* export: the kernel and the manifest, verified */
    dir = kf_asprintf("%s/vendor", S.dir);
    r = KF(S.user, "library", "export", dir);
    cr_assert(r.status == 0 && strstr(r.out, "exported 1 kernel to"), "%s%s", r.out, r.err);
    cli_out_release(&r);
    kpath = kf_asprintf("%s/%s.py", dir, entry);
    mpath = kf_asprintf("%s/manifest.json", dir);
    text = kf_test_read_file(kpath);
    cr_assert(strncmp(text, "# kforge kernel library entry ", 30) == 0 && strstr(text, "def softmax("), "%.300s", text);
    kf_artifact_sha256_hex(text, strlen(text), sha);
    free(text);
    text = kf_test_read_file(mpath);
    manifest = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(manifest);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(manifest, "kernels")), 1);
    k = cJSON_GetArrayItem(cJSON_GetObjectItem(manifest, "kernels"), 0);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(k, "sha256")), sha);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(k, "id")), entry);
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(k, "params")) && cJSON_IsObject(cJSON_GetObjectItem(k, "provenance")));
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(k, "latency_ns")));
    /* a non-empty folder is refused, --force writes over it */
    r = KF(S.user, "library", "export", dir);
    cr_assert(r.status == 2 && strstr(r.err, "not empty"), "%d %s", r.status, r.err);
    cli_out_release(&r);
    r = KF(S.user, "library", "export", dir, "--force", "--quiet");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cli_out_release(&r);

    /* the exported kernel runs in kforge-sim and matches the op's reference */
    check = cJSON_GetObjectItem(k, "check");
    cr_assert(cJSON_IsArray(check), "a library op's manifest record says how to check it");
    bin = kf_test_bin("kforge-sim");
    {
        char *argv[40], *out = kf_asprintf("%s/sim.out", S.dir);
        int n = 0, st;
        argv[n++] = bin;
        cJSON_ArrayForEach(a, check)
        {
            const char *s = cJSON_GetStringValue(a);
            cr_assert(n < 38);
            argv[n++] = strcmp(s, cJSON_GetStringValue(cJSON_GetObjectItem(k, "file"))) == 0
                            ? kf_asprintf("%s/%s", dir, s)
                            : kf_strdup(s);
        }
        argv[n++] = kf_strdup("--output-dir");
        argv[n++] = kf_asprintf("%s/sim-out", S.dir);
        argv[n] = NULL;
        st = kf_test_run_cmd(argv, (char *const[]){ NULL }, out, NULL);
        text = kf_test_read_file(out);
        cr_assert_eq(st, 0, "kforge-sim validates the exported kernel:\n%s", text);
        free(text);
        for (int i = 1; i < n; i++)
            free(argv[i]);
        free(out);
    }

    /* a second generate of the same op and shape starts from the entry */
    second = run_generate(file);
    cr_assert_str_neq(second, first);
    {
        char *path = kf_asprintf("/v1/jobs/%s", second);
        kf_http_resp hr;
        char *url = kf_asprintf("%s%s", S.api_url, path);
        cr_assert_eq(kf_http_json("GET", url, S.user, NULL, &hr), 200);
        doc = cJSON_Parse(hr.body);
        w = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "spec"), "warm_start");
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(w, "entry")), entry, "%s", hr.body);
        cr_assert(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "result"), "report")),
                         "Warm start from library entry"),
                  "the report says so");
        cJSON_Delete(doc);
        kf_http_resp_release(&hr);
        free(url);
        free(path);
    }
    it1 = iterations(first);
    it2 = iterations(second);
    {
        const char *reason = cJSON_GetStringValue(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(it2, "items"), 0), "reason"));
        char *want = kf_asprintf("warm start from library entry %s", entry);
        int n1 = cJSON_GetArraySize(cJSON_GetObjectItem(it1, "items"));
        int n2 = cJSON_GetArraySize(cJSON_GetObjectItem(it2, "items"));
        cr_assert(reason && strstr(reason, want), "first iteration: %s", reason ? reason : "(none)");
        cr_assert_lt(n2, n1, "the warm-started run evaluates fewer candidates (%d) than the first (%d)", n2, n1);
        cr_log_info("softmax 256x1024 bf16 trn2: %d iterations cold, %d warm-started", n1, n2);
        free(want);
    }
    cJSON_Delete(it1);
    cJSON_Delete(it2);
    cJSON_Delete(manifest);
    free(bin);
    free(file);
    free(body);
    free(first);
    free(second);
    free(dir);
    free(entry);
    free(kpath);
    free(mpath);
}
