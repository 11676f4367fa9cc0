/* Artifacts and provenance end to end: kforge-api + kforge-scheduler +
 * kforge-worker (sim backend) against real PostgreSQL and Redis.  A
 * generate job's best kernels and their profile documents reach the API
 * through the worker's reports; the final set is listed and downloadable
 * by its owner, trace.json is JSON, and the job carries its provenance. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_artifact.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"
#include <cjson/cJSON.h>

#define ARTIFACTS_E2E_DB 9

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

TestSuite(artifacts_e2e, .fini = teardown, .timeout = 240);

static cJSON *get_json(const char *path, const char *tok)
{
    char *url = kf_asprintf("%s%s", S.api_url, path);
    kf_http_resp r;
    cJSON *j;

    cr_assert_eq(kf_http_request("GET", url, tok, NULL, NULL, 0, &r), 200, "GET %s: %s", path, r.body);
    j = cJSON_Parse(r.body);
    cr_assert_not_null(j, "%s", r.body);
    kf_http_resp_release(&r);
    free(url);
    return j;
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

Test(artifacts_e2e, a_generate_job_keeps_its_final_kernel_and_profile_documents)
{
    kf_stack_opts o = { .redis_db = ARTIFACTS_E2E_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    static const char *const want[] = { "kernel.py", "profile.json", "instructions.json", "trace.json" };
    bool seen[4] = { false };
    char *id, *path, *tmpl, *root = kf_strdup(kf_test_env("KFORGE_TEST_ROOT"));
    cJSON *list, *job, *prov;
    const cJSON *it;
    long best_seq;

    kf_stack_start(&S, &o);
    id = kf_stack_submit(&S, "{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
                             "\"budget\":{\"iterations\":4},"
                             "\"spec\":{\"op\":\"softmax\",\"shapes\":[[256,1024]],\"dtype\":\"bfloat16\"}}");
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 180000), "generate is %s; see %s", kf_stack_state(&S, id),
              S.dir);
    best_seq = kf_stack_sql_long(&S, "SELECT best_iteration FROM jobs WHERE id = $1::uuid", id);

    path = kf_asprintf("/v1/jobs/%s/artifacts", id);
    list = get_json(path, S.user);
    cr_assert_geq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(list, "items")), 8,
                  "a best-so-far set and the final set at least");
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items"))
    {
        char *url;
        kf_http_resp r;
        char sha[65];

        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "final")))
            continue;
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(it, "seq")->valueint, best_seq,
                     "the final set is the best iteration's");
        url = kf_asprintf("%s/v1/artifacts/%s", S.api_url, str_of(it, "sha256"));
        cr_assert_eq(kf_http_request("GET", url, S.user, NULL, NULL, 0, &r), 200, "%s", r.body);
        cr_assert_eq((double)r.body_len, cJSON_GetObjectItemCaseSensitive(it, "size")->valuedouble);
        kf_artifact_sha256_hex(r.body, r.body_len, sha);
        cr_assert_str_eq(sha, str_of(it, "sha256"), "the bytes are the ones named");
        for (int k = 0; k < 4; k++) {
            if (strcmp(str_of(it, "name"), want[k]) != 0)
                continue;
            seen[k] = true;
            if (k == 0) {
                cr_assert(strstr(r.body, "def softmax("), "kernel.py is the kernel: %.200s", r.body);
            } else {
                cJSON *doc = cJSON_Parse(r.body);
                cr_assert_not_null(doc, "%s parses as JSON", want[k]);
                if (k == 3)
                    cr_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) &&
                                  cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) > 0,
                              "trace.json has its events");
                cJSON_Delete(doc);
            }
        }
        kf_http_resp_release(&r);
        free(url);
    }
    for (int k = 0; k < 4; k++)
        cr_assert(seen[k], "the final set has %s", want[k]);
    cJSON_Delete(list);
    free(path);

    /* provenance: which worker, simulator, target file and template */
    path = kf_asprintf("/v1/jobs/%s", id);
    job = get_json(path, S.user);
    prov = cJSON_GetObjectItemCaseSensitive(job, "provenance");
    cr_assert_str_eq(str_of(prov, "worker"), "test-w0");
    cr_assert_str_eq(str_of(prov, "backend"), "sim");
    cr_assert(strncmp(str_of(prov, "sim_build"), "src-sha256:", 11) == 0 && strlen(str_of(prov, "sim_build")) == 27,
              "sim_build: %s", str_of(prov, "sim_build"));
    cr_assert(kf_artifact_sha_valid(str_of(prov, "target_hash")), "target_hash: %s", str_of(prov, "target_hash"));
    cr_assert_not_null(root);
    tmpl = kf_asprintf("%s/kernels/softmax.py", root);
    {
        FILE *f = fopen(tmpl, "rb");
        kf_buf b = KF_BUF_INIT;
        char buf[4096], sha[65];
        size_t n;
        cr_assert_not_null(f, "%s", tmpl);
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
            kf_buf_add(&b, buf, n);
        fclose(f);
        kf_artifact_sha256_hex(b.data, b.len, sha);
        cr_assert_str_eq(str_of(prov, "template_hash"), sha, "the hash of the library template the job started from");
        kf_buf_release(&b);
    }
    cJSON_Delete(job);
    free(tmpl);
    free(root);
    free(path);
    free(id);
}
