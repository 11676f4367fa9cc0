/*
 * backend_diag — the `diag` health-check job (docs/protocol.md, "Job kinds").
 *
 * spec {"sleep_ms", "fail", "crash", "exit_code"}: sleep sleep_ms in short
 * slices (checking cancel), then
 *   crash: abort() — the job process dies of SIGABRT; the worker counts a
 *          failed, retryable attempt (so a diag crash job ends `dead` after
 *          max_attempts, which is how operators test poison-job handling);
 *   fail:  a job error that another attempt would not fix (state `failed`),
 *          naming exit_code;
 *   else:  success with {"ok":true,"slept_ms":N,"pid":P}.
 */
#include "kf_backend.h"

#include "kf_alloc.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define DIAG_SLICE_MS 10

static const char *const diag_kinds[] = { "diag", NULL };

static int64_t diag_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static kf_code diag_run(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                        char **result_json, bool *retryable, kf_err *err)
{
    const kf_job_diag *d = &job->diag;
    int64_t start = diag_now_ms(), end = start + d->sleep_ms;

    (void)self;
    *result_json = NULL;
    *retryable = false;
    for (;;) {
        int64_t now = diag_now_ms(), left = end - now;
        if (hooks->cancelled(hooks->ctx)) {
            *retryable = true;
            return kf_err_set(err, KF_UNAVAILABLE, "diag job stopped after %lld ms (cancelled or lease lost)",
                              (long long)(now - start));
        }
        if (left <= 0)
            break;
        struct timespec ts = { 0, (long)(left < DIAG_SLICE_MS ? left : DIAG_SLICE_MS) * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (d->crash)
        abort();
    if (d->fail)
        return kf_err_set(err, KF_UNPROCESSABLE, "diag job failed on request (exit_code %d)", d->exit_code);
    *result_json = kf_asprintf("{\"ok\":true,\"slept_ms\":%lld,\"pid\":%d}", (long long)d->sleep_ms,
                               (int)getpid());
    return KF_OK;
}

const kf_backend kf_backend_diag = {
    .name = "diag",
    .kinds = diag_kinds,
    .run = diag_run,
};
