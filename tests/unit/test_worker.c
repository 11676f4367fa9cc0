/* The worker's pieces without services: the fork runner (success, failure,
 * crash, cancel, a job that ignores cancel, progress frames), the diag
 * backend, and the spool against a small local HTTP endpoint. */
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"
#include "workers/kf_backend.h"
#include "workers/kf_finish.h"
#include "workers/kf_report.h"
#include "workers/kf_jobproc.h"
#include "workers/kf_runner.h"

static kf_job_payload diag_job(int64_t sleep_ms, bool fail, bool crash)
{
    kf_job_payload p;
    memset(&p, 0, sizeof(p));
    p.kind = KF_KIND_DIAG;
    p.diag.sleep_ms = sleep_ms;
    p.diag.fail = fail;
    p.diag.crash = crash;
    p.diag.exit_code = 7;
    return p;
}

static long long stop_after_ms;
static long long started_ms;
static bool stop_after(void *ctx)
{
    (void)ctx;
    return stop_after_ms > 0 && kf_test_now_ms() - started_ms >= stop_after_ms;
}

static int progress_seen;
static void count_progress(void *ctx, const char *json)
{
    (void)ctx;
    cr_assert(strstr(json, "\"seq_hint\"") != NULL, "progress frame arrived whole: %s", json);
    progress_seen++;
}

static kf_run_result run(const kf_backend *b, kf_job_payload *p, long long stop_ms, int grace)
{
    kf_run_result r;
    kf_err e = KF_ERR_INIT;
    kf_runner_hooks h = { NULL, count_progress, stop_after };
    stop_after_ms = stop_ms;
    started_ms = kf_test_now_ms();
    cr_assert_eq(kf_runner_run(b, p, &h, grace, &r, &e), KF_OK, "%s", e.msg);
    return r;
}

Test(runner, diag_succeeds_with_a_result)
{
    const kf_backend *b = kf_backend_find("diag", "diag");
    cr_assert_not_null(b);
    cr_assert_null(kf_backend_find("diag", "optimize"));
    cr_assert_null(kf_backend_find("nope", "diag"));
    kf_job_payload p = diag_job(30, false, false);
    long long t0 = kf_test_now_ms();
    kf_run_result r = run(b, &p, 0, 100);
    cr_assert_eq(r.outcome, KF_RUN_OK, "%s", r.error);
    cr_assert(kf_test_now_ms() - t0 >= 30, "diag slept");
    cr_assert(strstr(r.result_json, "\"slept_ms\":30") != NULL, "%s", r.result_json);
    cr_assert(strstr(r.result_json, "\"pid\":") != NULL);
    cr_assert(strstr(r.result_json, "\"ok\":true") != NULL);
    cr_assert_not(r.stopped);
    kf_run_result_release(&r);
}

Test(runner, diag_failure_is_not_retryable)
{
    kf_job_payload p = diag_job(0, true, false);
    kf_run_result r = run(kf_backend_find("diag", "diag"), &p, 0, 100);
    cr_assert_eq(r.outcome, KF_RUN_FAILED);
    cr_assert_not(r.retryable);
    cr_assert(strstr(r.error, "exit_code 7") != NULL, "%s", r.error);
    kf_run_result_release(&r);
}

Test(runner, a_crash_is_a_failed_attempt_not_a_dead_worker)
{
    kf_job_payload p = diag_job(0, false, true);
    kf_run_result r = run(kf_backend_find("diag", "diag"), &p, 0, 100);
    cr_assert_eq(r.outcome, KF_RUN_CRASHED);
    cr_assert(r.retryable);
    cr_assert(WIFSIGNALED(r.wait_status) && WTERMSIG(r.wait_status) == SIGABRT);
    cr_assert(strstr(r.error, "signal 6") != NULL, "%s", r.error);
    kf_run_result_release(&r);
}

Test(runner, cancel_stops_a_long_diag_quickly)
{
    kf_job_payload p = diag_job(60000, false, false);
    long long t0 = kf_test_now_ms();
    kf_run_result r = run(kf_backend_find("diag", "diag"), &p, 50, 5000);
    cr_assert(r.stopped);
    cr_assert_eq(r.outcome, KF_RUN_FAILED, "the backend saw cancel and returned: %s", r.error);
    cr_assert(kf_test_now_ms() - t0 < 1000, "stopped at the next check, not after the sleep");
    kf_run_result_release(&r);
}

/* A backend that never looks at cancel and sends progress frames. */
static const char *const stubborn_kinds[] = { "diag", NULL };
static kf_code stubborn_run(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                            char **result_json, bool *retryable, kf_err *err)
{
    (void)self;
    (void)err;
    (void)retryable;
    for (int i = 0; i < 3; i++)
        hooks->progress(hooks->ctx, "{\"seq_hint\":1,\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}");
    if (job->diag.sleep_ms > 0)
        for (;;)
            pause();
    *result_json = kf_strdup("{\"done\":1}");
    return KF_OK;
}
static const kf_backend stubborn = { .name = "stubborn", .kinds = stubborn_kinds, .run = stubborn_run };

Test(runner, progress_frames_reach_the_parent)
{
    kf_job_payload p = diag_job(0, false, false);
    progress_seen = 0;
    kf_run_result r = run(&stubborn, &p, 0, 100);
    cr_assert_eq(r.outcome, KF_RUN_OK);
    cr_assert_str_eq(r.result_json, "{\"done\":1}");
    cr_assert_eq(progress_seen, 3);
    kf_run_result_release(&r);
}

Test(runner, a_job_ignoring_cancel_is_killed_after_the_grace)
{
    kf_job_payload p = diag_job(1, false, false);
    long long t0 = kf_test_now_ms();
    progress_seen = 0;
    /* SIGTERM interrupts pause() but the default action for the stubborn
     * child is the runner's handler, so the child keeps pausing. */
    kf_run_result r = run(&stubborn, &p, 30, 200);
    cr_assert(r.stopped);
    cr_assert_eq(r.outcome, KF_RUN_CRASHED);
    cr_assert(WIFSIGNALED(r.wait_status) && WTERMSIG(r.wait_status) == SIGKILL, "killed after the grace");
    cr_assert(kf_test_now_ms() - t0 < 2000);
    kf_run_result_release(&r);
}

/* ---- spool against a local HTTP endpoint ---------------------------------- */

static int http_status = 503;
static char seen_paths[32][96];
static int n_seen;
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **state)
{
    (void)cls;
    (void)method;
    (void)version;
    (void)data;
    if (*state == NULL) {
        *state = (void *)1;
        return MHD_YES;
    }
    if (*size) {
        *size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&seen_mu);
    if (n_seen < 32)
        snprintf(seen_paths[n_seen++], sizeof(seen_paths[0]), "%s", url);
    int st = http_status;
    pthread_mutex_unlock(&seen_mu);
    struct MHD_Response *r = MHD_create_response_from_buffer(2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)st, r);
    MHD_destroy_response(r);
    return ret;
}

Test(spool, keeps_reports_until_the_api_takes_them_in_order)
{
    int port = kf_test_free_port();
    char *url = kf_asprintf("http://127.0.0.1:%d", port);
    char *dir = kf_test_tmpdir("spool");
    char *sub = kf_asprintf("%s/a/b", dir);
    kf_err e = KF_ERR_INIT;
    kf_spool *s = kf_spool_open(sub, &e);
    kf_report *r = kf_report_new(url, "tok", 2000);
    char n1[128], n2[128];
    int pending = -1;

    cr_assert_not_null(s, "%s", e.msg);
    cr_assert_eq(kf_spool_put(s, "/v1/internal/jobs/x/start", "{\"a\":1}", n1, sizeof(n1), &e), KF_OK);
    cr_assert_eq(kf_spool_put(s, "/v1/internal/jobs/x/result", "{\"a\":2}", n2, sizeof(n2), &e), KF_OK);
    cr_assert_eq(kf_spool_count(s), 2);
    cr_assert(strcmp(n1, n2) < 0, "names sort in write order");

    /* API down: nothing leaves the spool */
    cr_assert_eq(kf_spool_flush(s, r, &pending, &e), KF_OK);
    cr_assert_eq(pending, 2);

    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL,
                                            handler, NULL, MHD_OPTION_END);
    cr_assert_not_null(d);
    http_status = 503;   /* up but failing: still kept */
    cr_assert_eq(kf_spool_flush(s, r, &pending, &e), KF_OK);
    cr_assert_eq(pending, 2);
    cr_assert(kf_spool_has(s, n1) && kf_spool_has(s, n2));

    http_status = 409;   /* stale: a final answer, the report's life ends */
    n_seen = 0;
    cr_assert_eq(kf_spool_flush(s, r, &pending, &e), KF_OK);
    cr_assert_eq(pending, 0);
    cr_assert_eq(n_seen, 2);
    cr_assert_str_eq(seen_paths[0], "/v1/internal/jobs/x/start");
    cr_assert_str_eq(seen_paths[1], "/v1/internal/jobs/x/result");
    cr_assert_not(kf_spool_has(s, n1));
    cr_assert_eq(kf_spool_count(s), 0);

    http_status = 200;
    cr_assert_eq(kf_report_post(r, "/v1/internal/jobs/y/result", "{}", NULL, 0), 200);
    cr_assert(kf_report_final(200, "") && kf_report_final(409, "stale-attempt") && kf_report_final(404, ""));
    cr_assert(!kf_report_final(0, "") && !kf_report_final(503, "") && !kf_report_final(401, "") &&
              !kf_report_final(429, ""));
    /* Another worker's lease never becomes ours: final.  A token the
     * operator can fix (wrong worker id, wrong role): kept. */
    cr_assert(kf_report_final(403, "not-lease-holder"));
    cr_assert(!kf_report_final(403, "forbidden") && !kf_report_final(403, ""));

    MHD_stop_daemon(d);
    kf_report_free(r);
    kf_spool_free(s);
    free(sub);
    free(dir);
    free(url);
}

Test(spool, refuses_an_unusable_folder)
{
    kf_err e = KF_ERR_INIT;
    cr_assert_null(kf_spool_open("", &e));
    cr_assert_eq(e.code, KF_CONFIG);
    if (geteuid() != 0) {
        cr_assert_null(kf_spool_open("/proc/kforge-no-such/spool", &e));
    }
}

/* ---- the job process's environment --------------------------------------- */

Test(jobproc, only_allowlisted_settings_reach_a_job_process)
{
    const char *allowed[] = { "PATH=/usr/bin", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "OPENBLAS_CORETYPE=Haswell",
                              "KFORGE_LOG_LEVEL=debug", "KFORGE_SIM_TIMEOUT_S=5", "KFORGE_SANDBOX=strict",
                              "KFORGE_KERNELS_DIR=/k", "ASAN_OPTIONS=x=1", "KFORGE_LLM_URL=http://127.0.0.1:8000/v1",
                              "KFORGE_LLM_MODEL=m", "KFORGE_LLM_TIMEOUT_S=30", NULL };
    const char *refused[] = { "KFORGE_TOKEN=kf_secret", "KFORGE_TOKEN_FILE=/var/lib/kforge/token",
                              "KFORGE_LLM_API_KEY_FILE=/var/lib/kforge/llm-key",
                              "KFORGE_REDIS_URL=redis://:pw@h/0", "KFORGE_PG_DSN=postgresql://u:pw@h/db",
                              "KFORGE_BOOTSTRAP_TOKEN=kf_admin", "KFORGE_API_URL=http://x", "AWS_SECRET_ACCESS_KEY=x",
                              "LC_", "OPENBLAS_", "PATHX=1", "KFORGE_LOG_LEVELX=1", "LD_PRELOAD=/tmp/x.so",
                              "PYTHONPATH=/tmp", NULL };
    for (int i = 0; allowed[i]; i++)
        cr_assert(kf_jobproc_env_allowed(allowed[i]), "%s should reach the job process", allowed[i]);
    for (int i = 0; refused[i]; i++)
        cr_assert(!kf_jobproc_env_allowed(refused[i]), "%s must not reach the job process", refused[i]);
}

static char *write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
    char *p = kf_asprintf("%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(p, mode), 0);
    return p;
}

Test(token_file, only_a_private_file_of_this_user_is_read)
{
    char *dir = kf_test_tmpdir("tok");
    kf_err e = KF_ERR_INIT;
    char *p, *t;

    p = write_file(dir, "ok", "  kf_0123456789abcdef\n", 0600);
    t = kf_report_token_read(p, &e);
    cr_assert_str_eq(t, "kf_0123456789abcdef", "%s", e.msg);
    free(t);
    cr_assert_eq(chmod(p, 0400), 0);
    t = kf_report_token_read(p, &e);
    cr_assert_str_eq(t, "kf_0123456789abcdef", "%s", e.msg);
    free(t);
    /* World- or group-readable: refused, saying how to fix it. */
    cr_assert_eq(chmod(p, 0644), 0);
    cr_assert_null(kf_report_token_read(p, &e));
    cr_assert_eq(e.code, KF_CONFIG);
    cr_assert(strstr(e.msg, "chmod 600") && strstr(e.msg, "0644"), "%s", e.msg);
    cr_assert_eq(chmod(p, 0640), 0);
    cr_assert_null(kf_report_token_read(p, &e));
    cr_assert_eq(chmod(p, 0604), 0);
    cr_assert_null(kf_report_token_read(p, &e));
    /* Owned by someone else (only root can make such a file here). */
    if (geteuid() == 0) {
        cr_assert_eq(chmod(p, 0600), 0);
        cr_assert_eq(chown(p, 65534, 65534), 0);
        cr_assert_null(kf_report_token_read(p, &e));
        cr_assert(strstr(e.msg, "owned by uid 65534") && strstr(e.msg, "chown"), "%s", e.msg);
    }
    free(p);
    /* Empty, two lines, a folder, missing. */
    p = write_file(dir, "empty", "\n", 0600);
    cr_assert_null(kf_report_token_read(p, &e));
    cr_assert(strstr(e.msg, "one token"), "%s", e.msg);
    free(p);
    p = write_file(dir, "two", "kf_a\nkf_b\n", 0600);
    cr_assert_null(kf_report_token_read(p, &e));
    free(p);
    cr_assert_eq(chmod(dir, 0700), 0);
    cr_assert_null(kf_report_token_read(dir, &e));
    cr_assert(strstr(e.msg, "regular file"), "%s", e.msg);
    p = kf_asprintf("%s/none", dir);
    cr_assert_null(kf_report_token_read(p, &e));
    cr_assert(strstr(e.msg, "KFORGE_TOKEN_FILE"), "%s", e.msg);
    free(p);
    free(dir);
}

/* ---- the job process as a fresh image, and its folder ------------------- */

static kf_job_payload exec_job(const char *spec)
{
    kf_job_payload p;
    kf_err e = KF_ERR_INIT;
    char *json = kf_asprintf("{\"id\":\"01a23362-bc26-7a28-874a-1f691bf386b1\",\"kind\":\"diag\",\"target\":\"trn2\","
                             "\"backend\":\"diag\",\"spec\":%s,\"budget\":{\"iterations\":1,\"seconds\":60},"
                             "\"goal\":{\"fraction_of_bound\":0.9}}", spec);
    cr_assert_eq(kf_job_payload_parse(json, &p, &e), KF_OK, "%s", e.msg);
    free(json);
    return p;
}

/* One run through the exec'd job process, in a job folder the test fills
 * with a file and a symlink to a file outside it. */
static kf_run_result run_exec(const char *spec, long long stop_ms, char *dir, size_t len, const char *outside)
{
    char *exe = kf_asprintf("%s/%s/bin/kforge-worker", kf_test_env("KFORGE_TEST_ROOT"), kf_test_env("KFORGE_TEST_BUILD"));
    kf_job_payload p = exec_job(spec);
    kf_jobproc jp;
    kf_run_result r;
    kf_err e = KF_ERR_INIT;
    kf_runner_hooks h = { NULL, NULL, stop_after };
    char *f;

    kf_jobproc_init_exe(exe);
    cr_assert_eq(kf_jobproc_workdir_make(p.id, dir, len, &e), KF_OK, "%s", e.msg);
    f = kf_asprintf("%s/kernel.py", dir);
    FILE *fp = fopen(f, "w");
    cr_assert_not_null(fp);
    fputs("x = 1\n", fp);
    fclose(fp);
    free(f);
    f = kf_asprintf("%s/link", dir);
    cr_assert_eq(symlink(outside, f), 0);
    free(f);
    stop_after_ms = stop_ms;
    started_ms = kf_test_now_ms();
    cr_assert_eq(kf_runner_run(kf_jobproc_wrap(kf_backend_find("diag", "diag"), dir, &jp), &p, &h, 100, &r, &e), KF_OK,
                 "%s", e.msg);
    kf_jobproc_workdir_remove(dir);
    kf_job_payload_release(&p);
    free(exe);
    return r;
}

Test(jobproc, the_job_folder_is_gone_after_a_crash_a_kill_or_a_success)
{
    char dir[4096], outside[] = "/tmp/kforge-jobproc-outside-XXXXXX";
    int fd = mkstemp(outside);
    cr_assert(fd >= 0);
    close(fd);

    kf_run_result r = run_exec("{\"crash\":true}", 0, dir, sizeof(dir), outside);
    cr_assert_eq(r.outcome, KF_RUN_CRASHED, "the exec'd diag job crashed: %s", r.error);
    cr_assert_eq(access(dir, F_OK), -1, "%s is gone after a crash", dir);
    kf_run_result_release(&r);

    r = run_exec("{\"sleep_ms\":60000}", 50, dir, sizeof(dir), outside);
    cr_assert(r.stopped);
    cr_assert_eq(access(dir, F_OK), -1, "%s is gone after a stop", dir);
    kf_run_result_release(&r);

    r = run_exec("{\"sleep_ms\":0}", 0, dir, sizeof(dir), outside);
    cr_assert_eq(r.outcome, KF_RUN_OK, "an exec'd diag job succeeds: %s", r.error);
    cr_assert_eq(access(dir, F_OK), -1);
    kf_run_result_release(&r);

    cr_assert_eq(access(outside, F_OK), 0, "a symlink in the folder is removed, never followed");
    unlink(outside);
}

/* The end-of-attempt decision table (kf_finish.h), row by row. */
Test(finish, what_each_outcome_reports_and_how_it_settles)
{
    kf_finish_plan p;

    p = kf_finish_plan_of(true, false, 1, 3);   /* succeeded */
    cr_assert(p.report && !p.retry);
    cr_assert_eq(kf_finish_settle_of(p, 200), KF_FINISH_ACK);
    p = kf_finish_plan_of(true, true, 3, 3);    /* succeeded on the last attempt: retryable means nothing */
    cr_assert(p.report && !p.retry);
    cr_assert_eq(kf_finish_settle_of(p, 200), KF_FINISH_ACK);
    p = kf_finish_plan_of(false, false, 1, 3);  /* failed for good */
    cr_assert(p.report && !p.retry);
    cr_assert_eq(kf_finish_settle_of(p, 200), KF_FINISH_ACK);
    p = kf_finish_plan_of(false, true, 2, 3);   /* retryable with attempts left */
    cr_assert(p.report && p.retry);
    cr_assert_eq(kf_finish_settle_of(p, 200), KF_FINISH_FAIL, "the API took the retry: a delayed retry in Redis");
    cr_assert_eq(kf_finish_settle_of(p, 204), KF_FINISH_FAIL);
    cr_assert_eq(kf_finish_settle_of(p, 409), KF_FINISH_ACK, "the job ended elsewhere: it leaves the queue");
    cr_assert_eq(kf_finish_settle_of(p, 404), KF_FINISH_ACK);
    p = kf_finish_plan_of(false, true, 3, 3);   /* retryable on the last attempt */
    cr_assert(!p.report && !p.retry, "no report: the dead letter is the scheduler's to record");
    cr_assert_eq(kf_finish_settle_of(p, 0), KF_FINISH_FAIL);
    p = kf_finish_plan_of(false, true, 4, 3);   /* an attempt past the budget (max lowered meanwhile) */
    cr_assert(!p.report && !p.retry);
}

Test(finish, the_apis_answer_to_a_result_report)
{
    cr_assert_eq(kf_finish_answer_of(200, ""), KF_FINISH_TAKEN);
    cr_assert_eq(kf_finish_answer_of(299, ""), KF_FINISH_TAKEN);
    cr_assert_eq(kf_finish_answer_of(404, "not-found"), KF_FINISH_ELSEWHERE);
    cr_assert_eq(kf_finish_answer_of(409, "stale-attempt"), KF_FINISH_ELSEWHERE);
    cr_assert_eq(kf_finish_answer_of(403, "not-lease-holder"), KF_FINISH_ELSEWHERE);
    cr_assert_eq(kf_finish_answer_of(403, "forbidden"), KF_FINISH_REFUSED, "another 403 is the report's fault");
    cr_assert_eq(kf_finish_answer_of(403, NULL), KF_FINISH_REFUSED);
    cr_assert_eq(kf_finish_answer_of(400, "invalid"), KF_FINISH_REFUSED);
    cr_assert_eq(kf_finish_answer_of(413, "body-too-large"), KF_FINISH_REFUSED);
    cr_assert_eq(kf_finish_answer_of(422, "invalid"), KF_FINISH_REFUSED);
    cr_assert_eq(kf_finish_answer_of(500, "internal"), KF_FINISH_REFUSED);
    cr_assert_eq(kf_finish_answer_of(302, ""), KF_FINISH_ELSEWHERE);
}

Test(finish, result_report_bodies)
{
    kf_buf b = KF_BUF_INIT;

    kf_finish_body(&b, &(kf_finish_report){ 2, "tok", true, "{\"latency_ns\":5}", "ignored", false, "w-1", NULL });
    cr_assert_str_eq(b.data, "{\"attempt\":2,\"lease_token\":\"tok\",\"state\":\"succeeded\","
                             "\"result\":{\"latency_ns\":5},\"retry\":false,\"worker\":\"w-1\"}");
    kf_buf_reset(&b);
    kf_finish_body(&b, &(kf_finish_report){ 1, "tok", true, NULL, NULL, false, "w-1", NULL });
    cr_assert_str_eq(b.data, "{\"attempt\":1,\"lease_token\":\"tok\",\"state\":\"succeeded\",\"result\":{},"
                             "\"retry\":false,\"worker\":\"w-1\"}");
    kf_buf_reset(&b);
    kf_finish_body(&b, &(kf_finish_report){ 1, "tok", false, "{\"x\":1}", "bad \"quote\"\n", true, "w-1",
                                           "{\"backend\":\"sim\"}" });
    cr_assert_str_eq(b.data, "{\"attempt\":1,\"lease_token\":\"tok\",\"state\":\"failed\",\"result\":{},"
                             "\"error\":\"bad \\\"quote\\\"\\n\",\"retry\":true,\"worker\":\"w-1\"}");
    kf_buf_reset(&b);
    kf_finish_body(&b, &(kf_finish_report){ 1, "tok", false, NULL, NULL, false, "w-1", NULL });
    cr_assert_str_eq(b.data, "{\"attempt\":1,\"lease_token\":\"tok\",\"state\":\"failed\",\"result\":{},"
                             "\"error\":\"\",\"retry\":false,\"worker\":\"w-1\"}");
    kf_buf_reset(&b);
    /* the provenance goes with a success only, last */
    kf_finish_body(&b, &(kf_finish_report){ 3, "tok", true, "{}", NULL, false, "w-1", "{\"backend\":\"sim\"}" });
    cr_assert_str_eq(b.data, "{\"attempt\":3,\"lease_token\":\"tok\",\"state\":\"succeeded\",\"result\":{},"
                             "\"retry\":false,\"worker\":\"w-1\",\"provenance\":{\"backend\":\"sim\"}}");
    kf_buf_release(&b);
}

/* kf_spool_deliver keeps the order reports were made in: while older ones
 * wait in the spool a new one queues behind them, and once the API is back
 * they go first and the new one after them. */
Test(spool, deliver_sends_now_or_queues_behind_older_reports)
{
    int port = kf_test_free_port();
    char *url = kf_asprintf("http://127.0.0.1:%d", port);
    char *dir = kf_test_tmpdir("spool-deliver");
    kf_err e = KF_ERR_INIT;
    kf_spool *s = kf_spool_open(dir, &e);
    kf_report *r = kf_report_new(url, "tok", 2000);
    struct MHD_Daemon *d;
    char name[128];

    cr_assert_not_null(s, "%s", e.msg);
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL, handler, NULL,
                         MHD_OPTION_END);
    cr_assert_not_null(d);

    /* The API takes it: sent now, nothing spooled. */
    http_status = 200;
    n_seen = 0;
    cr_assert_eq(kf_spool_deliver(s, r, "/v1/internal/jobs/a/start", "{}", name, sizeof(name), NULL, NULL), 200);
    cr_assert_eq(n_seen, 1);
    cr_assert_str_eq(name, "");
    cr_assert_eq(kf_spool_count(s), 0);

    /* The API fails: spooled.  The next report is not tried before the
     * first: it queues behind it (the API sees one try, for the first). */
    http_status = 503;
    n_seen = 0;
    cr_assert_eq(kf_spool_deliver(s, r, "/v1/internal/jobs/b/start", "{}", name, sizeof(name), NULL, NULL), -1);
    cr_assert(kf_spool_has(s, name));
    cr_assert_eq(kf_spool_deliver(s, r, "/v1/internal/jobs/b/iterations", "{}", name, sizeof(name), NULL, NULL),
                 -1);
    cr_assert(kf_spool_has(s, name));
    cr_assert_eq(kf_spool_count(s), 2);
    cr_assert_eq(n_seen, 2, "one try for the first report on each call, none for the second");
    cr_assert_str_eq(seen_paths[0], "/v1/internal/jobs/b/start");
    cr_assert_str_eq(seen_paths[1], "/v1/internal/jobs/b/start");

    /* Back: the spooled ones go first, in order, then the new one. */
    http_status = 200;
    n_seen = 0;
    cr_assert_eq(kf_spool_deliver(s, r, "/v1/internal/jobs/b/result", "{}", name, sizeof(name), NULL, NULL), 200);
    cr_assert_eq(n_seen, 3);
    cr_assert_str_eq(seen_paths[0], "/v1/internal/jobs/b/start");
    cr_assert_str_eq(seen_paths[1], "/v1/internal/jobs/b/iterations");
    cr_assert_str_eq(seen_paths[2], "/v1/internal/jobs/b/result");
    cr_assert_eq(kf_spool_count(s), 0);

    /* A final refusal is not spooled: it is the caller's to handle. */
    http_status = 409;
    cr_assert_eq(kf_spool_deliver(s, r, "/v1/internal/jobs/c/result", "{}", NULL, 0, NULL, NULL), 409);
    cr_assert_eq(kf_spool_count(s), 0);

    MHD_stop_daemon(d);
    kf_report_free(r);
    kf_spool_free(s);
    free(dir);
    free(url);
}
