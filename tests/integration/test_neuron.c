/* The neuron backend's contract tests: kforge-api + kforge-scheduler +
 * kforge-worker against real PostgreSQL and Redis, with the test doubles
 * of the device tools (tests/doubles/neuron: kforge-neuron-runner and
 * neuron-explorer, which run the kernel in kforge-sim) first on the
 * worker's PATH.  A neuron job goes compile -> run -> validate -> profile
 * -> artifacts; a compile error arrives as NCC code, file and line; a
 * wedged device ends the attempt as retryable and marks the worker
 * unhealthy (GET /v1/workers) until it recovers; every device profile is
 * paired with the simulator's prediction (a calibration record), which
 * GET /v1/calibration and `kforge calibration` aggregate. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_json.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"
#include "test_cli_fixture.h"
#include <cjson/cJSON.h>
#include <math.h>

#define NEURON_DB 14

static kf_stack S;
static char *doubles;   /* a scratch copy of tests/doubles/neuron: `wedged` goes here */

static void teardown(void)
{
    kf_stack_stop(&S);
    if (doubles) {
        char *w = kf_asprintf("%s/wedged", doubles), *t = kf_asprintf("%s/wedge-on-run", doubles);
        unlink(w);
        unlink(t);
        free(w);
        free(t);
    }
    free(doubles);
    doubles = NULL;
}

TestSuite(neuron, .fini = teardown, .timeout = 300);

static cJSON *get_json(const char *path)
{
    char *url = kf_asprintf("%s%s", S.api_url, path);
    kf_http_resp r;
    cJSON *j;

    cr_assert_eq(kf_http_request("GET", url, S.user, NULL, NULL, 0, &r), 200, "GET %s: %s", path, r.body);
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

/* Wait for a terminal state; the state, and the job's last error in err. */
static const char *wait_done(const char *id, int timeout_ms, char **err)
{
    static const char *const done[] = { "succeeded", "failed", "dead", "cancelled", NULL };
    long long end = kf_test_now_ms() + timeout_ms;
    const char *st = "";

    while (kf_test_now_ms() < end) {
        st = kf_stack_state(&S, id);
        for (int i = 0; done[i]; i++)
            if (strcmp(st, done[i]) == 0)
                goto out;
        kf_test_sleep_ms(100);
    }
out:
    *err = kf_stack_sql_value(&S, "SELECT coalesce(last_error, '') FROM jobs WHERE id = $1::uuid", id);
    return st;
}

/* The stack with one worker whose PATH finds the doubles (symlinked into a
 * scratch folder, so a test can wedge this copy) and kforge-sim; with
 * real_runner, the device runner first on PATH is tools/kforge-neuron-runner
 * itself, run by Debian's Python with the Neuron SDK stand-ins of
 * tests/doubles/neuron-sdk on PYTHONPATH (the neuron-explorer double stays). */
static void start_with(bool real_runner)
{
    kf_stack_opts o = { .redis_db = NEURON_DB, .n_workers = 0, .n_schedulers = 1, .lease_ms = 10000 };
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *bin = kf_test_bin("kforge-sim"), *bindir = kf_strdup(bin), *path;
    const char *names[] = { "kforge-neuron-runner", "neuron-explorer", NULL };

    kf_stack_start(&S, &o);
    doubles = kf_asprintf("%s/neuron-doubles", S.dir);
    cr_assert_eq(mkdir(doubles, 0700), 0, "%s", doubles);
    for (int i = 0; names[i]; i++) {
        char *src = kf_asprintf("%s/tests/doubles/neuron/%s", root, names[i]);
        char *dst = kf_asprintf("%s/%s", doubles, names[i]);
        cr_assert_eq(symlink(src, dst), 0, "%s", dst);
        free(src);
        free(dst);
    }
    *strrchr(bindir, '/') = '\0';
    if (real_runner) {
        char *wdir = kf_asprintf("%s/real-runner", S.dir), *w = kf_asprintf("%s/kforge-neuron-runner", wdir);
        FILE *f;
        cr_assert_eq(mkdir(wdir, 0700), 0, "%s", wdir);
        f = fopen(w, "w");
        cr_assert_not_null(f, "%s", w);
        fprintf(f, "#!/bin/sh\nPYTHONPATH='%s/tests/doubles/neuron-sdk' exec /usr/bin/python3 "
                   "'%s/tools/kforge-neuron-runner' \"$@\"\n", root, root);
        fclose(f);
        cr_assert_eq(chmod(w, 0755), 0);
        path = kf_asprintf("PATH=%s:%s:%s:/usr/local/bin:/usr/bin:/bin", wdir, doubles, bindir);
        free(w);
        free(wdir);
    } else {
        path = kf_asprintf("PATH=%s:%s:/usr/local/bin:/usr/bin:/bin", doubles, bindir);
    }
    kf_stack_worker(&S, 0, path);
    free(path);
    free(bindir);
    free(bin);
}

static void start(void)
{
    start_with(false);
}

/* A job body for the tensor_add kernel of tests/kernels on 128 x cols
 * float32 inputs, with `source` (NULL: the file as it is) and its NumPy
 * reference. */
static char *job_body_cols(const char *kind, const char *source, int max_attempts, int cols)
{
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *kp = kf_asprintf("%s/tests/kernels/current/tensor_add.py", root);
    char *rp = kf_asprintf("%s/tests/kernels/ref_tensor_add.py", root);
    char *k = source ? kf_strdup(source) : kf_test_read_file(kp), *ref = kf_test_read_file(rp);
    kf_buf b = KF_BUF_INIT;

    kf_buf_addf(&b, "{\"kind\":\"%s\",\"target\":\"trn2\",\"backend\":\"neuron\",\"max_attempts\":%d,\"spec\":{"
                    "\"entry\":\"tensor_add\",\"inputs\":{\"a_input\":{\"shape\":[128,%d],\"dtype\":\"float32\"},"
                    "\"b_input\":{\"shape\":[128,%d],\"dtype\":\"float32\"}},\"source\":",
                kind, max_attempts, cols, cols);
    kf_json_add_str(&b, k);
    if (strcmp(kind, "profile") != 0) {
        kf_buf_adds(&b, ",\"reference\":");
        kf_json_add_str(&b, ref);
    }
    kf_buf_adds(&b, "}}");
    free(k);
    free(ref);
    free(kp);
    free(rp);
    return kf_buf_detach(&b);
}

static char *job_body(const char *kind, const char *source, int max_attempts)
{
    return job_body_cols(kind, source, max_attempts, 512);
}

Test(neuron, a_job_compiles_runs_validates_profiles_and_keeps_its_neff_and_ntff)
{
    char *body, *id, *path;
    cJSON *job, *res, *val, *prof, *prov, *list;
    const cJSON *it, *pct;
    bool neff = false, ntff = false, summary = false, kernel = false;
    int checks = 0;

    start();
    body = job_body("optimize", NULL, 1);
    id = kf_stack_submit(&S, body);
    {
        char *e = NULL;
        const char *st = wait_done(id, 200000, &e);
        cr_assert_str_eq(st, "succeeded", "the neuron job is %s: %s", st, e);
        free(e);
    }
    path = kf_asprintf("/v1/jobs/%s", id);
    job = get_json(path);
    res = cJSON_GetObjectItemCaseSensitive(job, "result");
    cr_assert(cJSON_IsObject(res), "the job has its result");

    /* validated as the simulator path validates: 3 seeds, every element */
    val = cJSON_GetObjectItemCaseSensitive(res, "validation");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass")), "validation passes");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "correct")));
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(val, "checks"))
    {
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "pass")));
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(it, "elements")->valuedouble, 128.0 * 512.0,
                     "every element is compared");
        checks++;
    }
    cr_assert_eq(checks, 3, "one check per seed and output");

    /* the profile document the simulator writes, from the device tools */
    prof = cJSON_GetObjectItemCaseSensitive(res, "profile");
    cr_assert_str_eq(str_of(prof, "source"), "device");
    cr_assert_gt(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(prof, "latency_ns")), 0);
    pct = cJSON_GetObjectItemCaseSensitive(prof, "latency_percentiles_ns");
    cr_assert_leq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(pct, "p0")),
                  cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(pct, "p50")));
    cr_assert_leq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(pct, "p50")),
                  cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(pct, "p99")));
    cr_assert_gt(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
                     cJSON_GetObjectItemCaseSensitive(prof, "summary"), "total_time")), 0,
                 "summary-json's total_time is under the simulator's field name");
    cr_assert_gt(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(prof, "floor_ns")), 0);
    cr_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(prof, "bounds")));

    /* provenance: backend, tools' versions, the NEFF's hash */
    prov = cJSON_GetObjectItemCaseSensitive(job, "provenance");
    cr_assert_str_eq(str_of(prov, "backend"), "neuron");
    cr_assert(strstr(str_of(prov, "compiler"), "neuronx-cc") != NULL, "compiler: %s", str_of(prov, "compiler"));
    cr_assert(str_of(prov, "runtime")[0] && str_of(prov, "driver")[0]);
    cr_assert_eq(strlen(str_of(prov, "neff_sha256")), 64);
    cJSON_Delete(job);
    free(path);

    /* NEFF and NTFF in the artifact store */
    path = kf_asprintf("/v1/jobs/%s/artifacts", id);
    list = get_json(path);
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items"))
    {
        const char *name = str_of(it, "name");
        char *url = kf_asprintf("%s/v1/artifacts/%s", S.api_url, str_of(it, "sha256"));
        kf_http_resp r;
        cr_assert_eq(kf_http_request("GET", url, S.user, NULL, NULL, 0, &r), 200, "%s", r.body);
        if (strcmp(name, "kernel.neff") == 0) {
            neff = true;
            cr_assert_gt(r.body_len, 1024, "a 1024-byte header and the tarball");
            cr_assert_eq(memcmp(r.body, "NEFF", 4), 0, "the NEFF's bytes, unchanged by the upload");
            cr_assert_eq(memcmp(r.body + 1024 + 257, "ustar", 5), 0, "a tarball after the header");
        } else if (strcmp(name, "profile.ntff") == 0) {
            ntff = true;
        } else if (strcmp(name, "summary.json") == 0) {
            cJSON *d = cJSON_Parse(r.body);
            summary = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(d, "total_time"));
            cJSON_Delete(d);
        } else if (strcmp(name, "kernel.py") == 0) {
            kernel = strstr(r.body, "def tensor_add(") != NULL;
        }
        kf_http_resp_release(&r);
        free(url);
    }
    cr_assert(neff && ntff && summary && kernel, "kernel.neff %d profile.ntff %d summary.json %d kernel.py %d", neff,
              ntff, summary, kernel);
    cJSON_Delete(list);
    free(path);
    free(id);
    free(body);
}

Test(neuron, a_wrong_kernel_fails_validation_on_the_device_outputs)
{
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *kp = kf_asprintf("%s/tests/kernels/current/tensor_add.py", root), *src = kf_test_read_file(kp);
    char *op = strstr(src, "op=nl.add)"), *body, *id, *path;
    kf_buf k = KF_BUF_INIT;
    cJSON *job;

    /* a + b becomes a - b: it compiles and runs, the outputs are wrong */
    cr_assert_not_null(op, "tensor_add.py adds with op=nl.add");
    kf_buf_add(&k, src, (size_t)(op - src));
    kf_buf_adds(&k, "op=nl.subtract)");
    kf_buf_adds(&k, op + strlen("op=nl.add)"));
    start();
    body = job_body("validate", k.data, 1);
    id = kf_stack_submit(&S, body);
    {
        char *e = NULL;
        const char *st = wait_done(id, 200000, &e);
        cr_assert_str_eq(st, "succeeded", "the validate job is %s: %s", st, e);
        free(e);
    }
    path = kf_asprintf("/v1/jobs/%s", id);
    job = get_json(path);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "result"),
                                                             "correct")),
              "the device's wrong outputs fail the comparison");
    cJSON_Delete(job);
    free(path);
    free(id);
    free(body);
    kf_buf_release(&k);
    free(src);
    free(kp);
}

Test(neuron, a_compile_error_is_reported_with_its_ncc_code_file_and_line)
{
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *kp = kf_asprintf("%s/tests/kernels/current/tensor_add.py", root), *src = kf_test_read_file(kp);
    char *at = strstr(src, "rows, cols = a_input.shape"), *body, *id, *path, *want;
    kf_buf k = KF_BUF_INIT;
    cJSON *job;
    int line = 1;

    cr_assert_not_null(at);
    for (const char *p = src; p < at; p++)
        line += *p == '\n';
    /* the same line, with a complex dtype the compiler refuses (NCC_EVRF004) */
    kf_buf_add(&k, src, (size_t)(at - src));
    kf_buf_adds(&k, "rows, cols = a_input.shape; unused = nl.complex64");
    kf_buf_adds(&k, at + strlen("rows, cols = a_input.shape"));
    start();
    body = job_body("optimize", k.data, 1);
    id = kf_stack_submit(&S, body);
    cr_assert(kf_stack_wait_state(&S, id, "failed", 120000) || strcmp(kf_stack_state(&S, id), "dead") == 0,
              "the job is %s; see %s", kf_stack_state(&S, id), S.dir);
    path = kf_asprintf("/v1/jobs/%s", id);
    job = get_json(path);
    want = kf_asprintf("kernel.py:%d: ", line);
    cr_assert(strstr(str_of(job, "last_error"), "NCC_EVRF004") && strstr(str_of(job, "last_error"), want),
              "the error names the code and %s: %s", want, str_of(job, "last_error"));
    cr_assert(strstr(str_of(job, "last_error"), "does not compile"), "%s", str_of(job, "last_error"));
    cJSON_Delete(job);
    free(want);
    free(path);
    free(id);
    free(body);
    kf_buf_release(&k);
    free(src);
    free(kp);
}

/* The worker's "unhealthy" in GET /v1/workers ("" when healthy or absent). */
static char *worker_unhealthy(void)
{
    cJSON *f = get_json("/v1/workers");
    const cJSON *w;
    char *out = kf_strdup("");
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(f, "workers"))
    {
        if (strcmp(str_of(w, "id"), "test-w0") == 0) {
            free(out);
            out = kf_strdup(str_of(w, "unhealthy"));
        }
    }
    cJSON_Delete(f);
    return out;
}

Test(neuron, a_wedged_device_ends_the_attempt_retryable_and_the_worker_unhealthy_until_it_recovers)
{
    char *body, *id, *wedge, *why = NULL;
    FILE *f;
    bool marked = false;

    start();
    /* the device wedges during the job's first device run */
    wedge = kf_asprintf("%s/wedge-on-run", doubles);
    f = fopen(wedge, "w");
    cr_assert_not_null(f);
    fclose(f);
    body = job_body("profile", NULL, 3);
    id = kf_stack_submit(&S, body);
    /* the first attempt fails as retryable: the job is not dead, it waits */
    cr_assert(kf_stack_wait_sql(&S, "SELECT count(*) FROM jobs WHERE id = $1::uuid AND "
                                    "last_error LIKE '%Neuron device is not%'", id, 1, 60000),
              "the attempt ended on the device's health; see %s", S.dir);
    for (int i = 0; i < 100 && !marked; i++) {
        free(why);
        why = worker_unhealthy();
        marked = strstr(why, "NRT_TIMEOUT") != NULL;
        if (!marked)
            usleep(100000);
    }
    cr_assert(marked, "GET /v1/workers says why the worker is unhealthy: \"%s\"", why);
    /* health is per backend: the same worker goes on with simulator jobs */
    {
        char *nb = job_body("profile", NULL, 1), *at = strstr(nb, "\"backend\":\"neuron\""), *sid;
        kf_buf sb = KF_BUF_INIT;
        cJSON *fleet;
        const cJSON *wk;
        bool per_backend = false;
        cr_assert_not_null(at);
        kf_buf_add(&sb, nb, (size_t)(at - nb));
        kf_buf_adds(&sb, "\"backend\":\"sim\"");
        kf_buf_adds(&sb, at + strlen("\"backend\":\"neuron\""));
        sid = kf_stack_submit(&S, sb.data);
        cr_assert(kf_stack_wait_state(&S, sid, "succeeded", 60000), "the sim job is %s while neuron is unhealthy",
                  kf_stack_state(&S, sid));
        fleet = get_json("/v1/workers");
        cJSON_ArrayForEach(wk, cJSON_GetObjectItemCaseSensitive(fleet, "workers"))
        {
            const cJSON *ub = cJSON_GetObjectItemCaseSensitive(wk, "unhealthy_backends");
            if (strcmp(str_of(wk, "id"), "test-w0") == 0)
                per_backend = strstr(str_of(ub, "neuron"), "NRT_TIMEOUT") != NULL &&
                              cJSON_GetObjectItemCaseSensitive(ub, "sim") == NULL;
        }
        cr_assert(per_backend, "GET /v1/workers names the unhealthy backend, and only it");
        cJSON_Delete(fleet);
        free(sid);
        kf_buf_release(&sb);
        free(nb);
    }
    cr_assert_str_neq(kf_stack_state(&S, id), "dead", "a wedged device does not burn the job");
    cr_assert_str_neq(kf_stack_state(&S, id), "failed", "a wedged device is retryable");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", id), 1,
                 "one attempt only: the unhealthy worker leases nothing more");
    /* the device recovers: the worker sees it within its retry interval */
    free(wedge);
    wedge = kf_asprintf("%s/wedged", doubles);
    cr_assert_eq(unlink(wedge), 0);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 120000), "the job is %s after recovery; see %s",
              kf_stack_state(&S, id), S.dir);
    free(why);
    why = worker_unhealthy();
    cr_assert_str_eq(why, "", "healthy again");
    free(why);
    free(wedge);
    free(id);
    free(body);
}

static double num_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "%s is a number", k);
    return v->valuedouble;
}

static long get_status(const char *path, const char *token)
{
    char *url = kf_asprintf("%s%s", S.api_url, path);
    kf_http_resp r;
    long st = kf_http_request("GET", url, token, NULL, NULL, 0, &r);
    kf_http_resp_release(&r);
    free(url);
    return st;
}

static bool near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-12;
}

/* A succeeded neuron job's one calibration record, checked against the
 * job's own device numbers; its error (sim / device - 1). */
static double check_record(const char *id, const char *shape_part)
{
    char *path = kf_asprintf("/v1/jobs/%s", id), *sql;
    cJSON *job = get_json(path);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(job, "result"), *prof, *rec, *eng, *l;
    double dev, sim, err;
    int lines = 0;

    prof = cJSON_GetObjectItemCaseSensitive(res, "profile");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(res, "calibration")), 1,
                 "one device profile, one calibration record");
    rec = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "calibration"), 0);
    dev = num_of(rec, "device_latency_ns");
    sim = num_of(rec, "sim_ns");
    cr_assert(near(dev, num_of(res, "latency_ns")), "the device's number is the job's median latency");
    cr_assert(near(num_of(rec, "device_profile_ns"), num_of(prof, "profiled_ns")), "and the profile's total_time");
    cr_assert_gt(sim, 0);
    cr_assert_eq(strlen(str_of(rec, "kernel_sha256")), 64);
    cr_assert_eq(num_of(rec, "seq"), 1);
    eng = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rec, "engines"), "vector");
    cr_assert_gt(num_of(eng, "device_percent"), 0, "the add runs on VectorE on both sides");
    cr_assert_gt(num_of(eng, "sim_percent"), 0);
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(rec, "lines"))
    {
        cr_assert(strncmp(str_of(l, "loc"), "kernel.py:", 10) == 0, "a line of the kernel: %s", str_of(l, "loc"));
        cr_assert_geq(num_of(l, "device_ns") + num_of(l, "sim_ns"), 0);
        lines++;
    }
    cr_assert_gt(lines, 0, "the device's instruction table gives per-line times");
    err = sim / dev - 1;
    /* stored with the job's key and the same error */
    sql = kf_asprintf("SELECT count(*) FROM calibration WHERE job_id = $1::uuid AND op = 'user.tensor_add' AND "
                      "target = 'trn2' AND dtype = 'float32' AND shape LIKE '%%%s%%' AND seq = 1 AND "
                      "abs(error - (%.17g)) < 1e-9 AND owner_token_id IS NOT NULL",
                      shape_part, err);
    cr_assert_eq(kf_stack_sql_long(&S, sql, id), 1, "the calibration row of %s", id);
    free(sql);
    cJSON_Delete(job);
    free(path);
    return err;
}

Test(neuron, device_profiles_are_calibrated_against_the_simulator_and_get_v1_calibration_aggregates_them)
{
    char *body_a = job_body_cols("profile", NULL, 1, 512), *body_b = job_body_cols("profile", NULL, 1, 256);
    char *ida, *idb, *e = NULL, *path, *newest, *worst_id;
    const char *st, *oldest;
    double ea, eb;
    cJSON *doc, *g, *page;
    const cJSON *items;
    cli_out c;

    start();
    ida = kf_stack_submit(&S, body_a);
    idb = kf_stack_submit(&S, body_b);
    st = wait_done(ida, 200000, &e);
    cr_assert_str_eq(st, "succeeded", "job a: %s: %s", st, e);
    free(e);
    st = wait_done(idb, 200000, &e);
    cr_assert_str_eq(st, "succeeded", "job b: %s: %s", st, e);
    free(e);
    ea = check_record(ida, "512]");
    eb = check_record(idb, "256]");
    /* the worker runs one job at a time: which record came first */
    newest = kf_stack_sql_value(&S, "SELECT job_id::text FROM calibration WHERE $1::text IS NOT NULL "
                                    "ORDER BY id DESC LIMIT 1", ida);
    cr_assert(newest && (strcmp(newest, ida) == 0 || strcmp(newest, idb) == 0));
    oldest = strcmp(newest, ida) == 0 ? idb : ida;

    /* the aggregate over both, computed from the two records */
    doc = get_json("/v1/calibration?op=user.tensor_add&target=trn2");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "groups")), 1);
    g = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "groups"), 0);
    cr_assert_str_eq(str_of(g, "op"), "user.tensor_add");
    cr_assert_str_eq(str_of(g, "target"), "trn2");
    cr_assert_eq(num_of(g, "count"), 2);
    cr_assert(near(num_of(g, "mean_abs_error"), (fabs(ea) + fabs(eb)) / 2), "mean |error| %g vs %g, %g",
              num_of(g, "mean_abs_error"), ea, eb);
    cr_assert(near(num_of(g, "median_abs_error"), (fabs(ea) + fabs(eb)) / 2), "the median of two is their mean");
    cr_assert(near(num_of(g, "bias"), (ea + eb) / 2), "bias %g vs %g, %g", num_of(g, "bias"), ea, eb);
    worst_id = kf_strdup(str_of(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(g, "worst"), 0), "job_id"));
    cr_assert_str_eq(worst_id, fabs(ea) > fabs(eb) ? ida : fabs(eb) > fabs(ea) ? idb : oldest,
                     "the worst case names its job (ties: the older record)");
    cr_assert(near(num_of(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(g, "worst"), 0), "error"),
                   fabs(ea) >= fabs(eb) ? ea : eb), "the worst error");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "worst")), 2);
    cr_assert_gt(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "worst_lines")), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "items")), 2);
    cJSON_Delete(doc);

    /* keyset pages of the records, newest first */
    page = get_json("/v1/calibration?limit=1");
    items = cJSON_GetObjectItemCaseSensitive(page, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 1);
    cr_assert_str_eq(str_of(cJSON_GetArrayItem(items, 0), "job_id"), newest, "the newest record first");
    cr_assert(str_of(page, "next_cursor")[0], "a next page");
    path = kf_asprintf("/v1/calibration?limit=1&cursor=%s", str_of(page, "next_cursor"));
    cJSON_Delete(page);
    page = get_json(path);
    items = cJSON_GetObjectItemCaseSensitive(page, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 1);
    cr_assert_str_eq(str_of(cJSON_GetArrayItem(items, 0), "job_id"), oldest);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(page, "next_cursor")), "the last page");
    cJSON_Delete(page);
    free(path);

    /* filters that match nothing, and the admin's view of the fleet */
    doc = get_json("/v1/calibration?target=trn1");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "groups")), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "items")), 0);
    cJSON_Delete(doc);
    doc = get_json("/v1/calibration?since=2999-01-01T00:00:00Z");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "groups")), 0);
    cJSON_Delete(doc);
    cr_assert_eq(get_status("/v1/calibration?op=user.tensor_add", S.admin), 200);

    /* bad filters are 422 */
    {
        const char *bad[] = { "target=trn9", "since=yesterday", "limit=0", "limit=201", "cursor=abc", "op=no%20op",
                              "colour=red", NULL };
        for (int i = 0; bad[i]; i++) {
            char *p = kf_asprintf("/v1/calibration?%s", bad[i]);
            cr_assert_eq(get_status(p, S.user), 422, "%s", p);
            free(p);
        }
        cr_assert_eq(get_status("/v1/calibration", NULL), 401, "a token is needed");
    }

    /* the CLI against this API */
    {
        const char *args[] = { "calibration", "--op", "user.tensor_add", "--target", "trn2", NULL };
        const char *jargs[] = { "calibration", "--json", NULL };
        const char *bargs[] = { "calibration", "--since", "yesterday", NULL };
        char pct[32];
        c = cli_run(S.api_url, S.user, NULL, args);
        cr_assert_eq(c.status, 0, "%s", c.err);
        cr_assert(strstr(c.out, "user.tensor_add") && strstr(c.out, "trn2") && strstr(c.out, worst_id),
                  "the table names op, target and the worst job: %s", c.out);
        snprintf(pct, sizeof(pct), "%.1f%%", (fabs(ea) + fabs(eb)) / 2 * 100);
        cr_assert(strstr(c.out, pct), "the mean |error| %s is in the table: %s", pct, c.out);
        cr_assert(strstr(c.out, "kernel.py:"), "the worst lines: %s", c.out);
        cli_out_release(&c);
        c = cli_run(S.api_url, S.user, NULL, jargs);
        cr_assert_eq(c.status, 0, "%s", c.err);
        doc = cJSON_Parse(c.out);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "groups")), 1, "%s", c.out);
        cJSON_Delete(doc);
        cli_out_release(&c);
        c = cli_run(S.api_url, S.user, NULL, bargs);
        cr_assert_eq(c.status, 1, "a bad filter is refused: %s", c.err);
        cr_assert(strstr(c.err, "since"), "%s", c.err);
        cli_out_release(&c);
    }
    free(worst_id);
    free(newest);
    free(ida);
    free(idb);
    free(body_a);
    free(body_b);
}

Test(neuron, a_hybrid_job_explores_on_the_simulator_and_confirms_its_best_candidates_on_the_device)
{
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *kp = kf_asprintf("%s/tests/kernels/current/tensor_add.py", root), *src = kf_test_read_file(kp);
    char *at = strstr(src, "def tensor_add(a_input, b_input):"), *body, *id, *path, *sql, *e = NULL;
    kf_buf k = KF_BUF_INIT, b = KF_BUF_INIT;
    const cJSON *res, *conf, *c, *rec, *prov;
    cJSON *job;
    const char *st;
    int n_conf = 0, n_ok = 0;

    /* tensor_add with a tunable the simulator can explore */
    cr_assert_not_null(at);
    kf_buf_add(&k, src, (size_t)(at - src));
    kf_buf_adds(&k, "def tensor_add(a_input, b_input, unroll=1):");
    kf_buf_adds(&k, at + strlen("def tensor_add(a_input, b_input):"));
    body = job_body("optimize", k.data, 1);
    /* backend hybrid, with tunables and a small budget */
    at = strstr(body, "\"backend\":\"neuron\"");
    cr_assert_not_null(at);
    kf_buf_add(&b, body, (size_t)(at - body));
    kf_buf_adds(&b, "\"backend\":\"hybrid\",\"budget\":{\"iterations\":2}");
    kf_buf_add(&b, at + strlen("\"backend\":\"neuron\""), strlen(at + strlen("\"backend\":\"neuron\"")) - 2);
    kf_buf_adds(&b, ",\"tunables\":{\"unroll\":[1,2]}}}");
    start();
    id = kf_stack_submit(&S, b.data);
    st = wait_done(id, 200000, &e);
    cr_assert_str_eq(st, "succeeded", "the hybrid job is %s: %s", st, e);
    free(e);
    path = kf_asprintf("/v1/jobs/%s", id);
    job = get_json(path);
    res = cJSON_GetObjectItemCaseSensitive(job, "result");
    conf = cJSON_GetObjectItemCaseSensitive(res, "confirmed");
    cJSON_ArrayForEach(c, conf)
    {
        n_conf++;
        cr_assert_gt(num_of(c, "sim_latency_ns"), 0, "the simulator's number");
        cr_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(c, "params")));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "correct"))) {
            n_ok++;
            cr_assert_gt(num_of(c, "device_latency_ns"), 0, "the device's number");
            sql = kf_asprintf("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'confirm' AND "
                              "seq = %d AND latency_ns > 0", (int)num_of(c, "seq"));
            cr_assert_eq(kf_stack_sql_long(&S, sql, id), 1, "the device evaluation is iteration %d",
                         (int)num_of(c, "seq"));
            free(sql);
            sql = kf_asprintf("SELECT count(*) FROM calibration WHERE job_id = $1::uuid AND seq = %d AND "
                              "params ? 'unroll'", (int)num_of(c, "seq"));
            cr_assert_eq(kf_stack_sql_long(&S, sql, id), 1, "its calibration record");
            free(sql);
        }
    }
    cr_assert_geq(n_conf, 1, "the best candidates are confirmed");
    cr_assert_eq(n_ok, n_conf, "every candidate passes on the device");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(res, "calibration")), n_ok);
    rec = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "calibration"), 0);
    cr_assert_gt(num_of(rec, "sim_ns"), 0);
    cr_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(res, "device_best")), "the device's best");
    cr_assert_gt(num_of(cJSON_GetObjectItemCaseSensitive(res, "device_best"), "latency_ns"), 0);
    cr_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(res, "path")), "the simulator's search is kept");
    prov = cJSON_GetObjectItemCaseSensitive(job, "provenance");
    cr_assert_str_eq(str_of(prov, "backend"), "hybrid");
    cr_assert(str_of(prov, "sim_build")[0] && strstr(str_of(prov, "compiler"), "neuronx-cc"),
              "both sides' provenance");
    cJSON_Delete(job);
    free(path);
    free(id);
    free(body);
    kf_buf_release(&k);
    kf_buf_release(&b);
    free(src);
    free(kp);
}

Test(neuron, the_real_runner_with_the_sdk_stand_ins_takes_a_job_through_compile_run_validate_and_profile)
{
    char *body, *id, *path;
    cJSON *job, *res, *prov, *prof;
    const cJSON *it;
    int checks = 0;

    start_with(true);
    body = job_body("optimize", NULL, 1);
    id = kf_stack_submit(&S, body);
    {
        char *e = NULL;
        const char *st = wait_done(id, 240000, &e);
        cr_assert_str_eq(st, "succeeded", "the neuron job is %s: %s (see %s)", st, e, S.dir);
        free(e);
    }
    path = kf_asprintf("/v1/jobs/%s", id);
    job = get_json(path);
    res = cJSON_GetObjectItemCaseSensitive(job, "result");
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "validation"),
                                                            "checks"))
    {
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "pass")));
        checks++;
    }
    cr_assert_eq(checks, 3, "the device outputs of 3 seeds compared with the reference");
    prof = cJSON_GetObjectItemCaseSensitive(res, "profile");
    cr_assert_gt(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
                     cJSON_GetObjectItemCaseSensitive(prof, "latency_percentiles_ns"), "p50")), 0,
                 "percentiles from nrtpy's benchmark durations");
    prov = cJSON_GetObjectItemCaseSensitive(job, "provenance");
    /* the versions the real runner read from the installed (stand-in) packages */
    cr_assert(strstr(str_of(prov, "compiler"), "nki 0.6.0+kforge.double") != NULL, "compiler: %s",
              str_of(prov, "compiler"));
    cr_assert(strstr(str_of(prov, "runtime"), "nrtpy 0.1.0+kforge.double") != NULL, "runtime: %s",
              str_of(prov, "runtime"));
    cr_assert_eq(strlen(str_of(prov, "neff_sha256")), 64);
    cJSON_Delete(job);
    free(path);
    free(id);
    free(body);
}
