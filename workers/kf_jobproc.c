/* kf_jobproc — the job process as a fresh image (see kf_jobproc.h). */
#include "kf_jobproc.h"

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_log.h"
#include "kf_runner.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
    JP_PAYLOAD_FD = 4,
    JP_MAX_PAYLOAD = 64 << 20,
};

extern char **environ;

static char jp_exe[PATH_MAX];

kf_code kf_jobproc_init(kf_err *err)
{
    ssize_t n = readlink("/proc/self/exe", jp_exe, sizeof(jp_exe) - 1);
    if (n <= 0)
        return kf_err_set(err, KF_IO, "cannot read /proc/self/exe (%s): the worker needs /proc to start its "
                                      "job processes", strerror(errno));
    jp_exe[n] = '\0';
    return KF_OK;
}

bool kf_jobproc_env_allowed(const char *e)
{
    static const char *const exact[] = {
        "PATH=", "HOME=", "LANG=", "TZ=", "TMPDIR=", "USER=", "LOGNAME=", "OMP_NUM_THREADS=",
        "ASAN_OPTIONS=", "UBSAN_OPTIONS=", "LSAN_OPTIONS=",
        /* the settings a backend reads; nothing that grants access */
        "KFORGE_LOG_LEVEL=", "KFORGE_SIM_TARGETS=", "KFORGE_SIM_TIMEOUT_S=", "KFORGE_SIM_MEMORY_MIB=",
        "KFORGE_KERNELS_DIR=", "KFORGE_CACHE_DIR=", "KFORGE_CACHE_MAX_ENTRIES=", "KFORGE_SANDBOX=",
        "KFORGE_SANDBOX_UID=", "KFORGE_SANDBOX_GID=", NULL,
    };
    static const char *const prefix[] = { "LC_", "OPENBLAS_", NULL };
    for (int i = 0; exact[i]; i++)
        if (strncmp(e, exact[i], strlen(exact[i])) == 0)
            return true;
    for (int i = 0; prefix[i]; i++)
        if (strncmp(e, prefix[i], strlen(prefix[i])) == 0 && strchr(e, '=') && strncmp(e, "KFORGE_", 7) != 0)
            return true;
    return false;
}

static char *jp_payload_json(const kf_job_payload *job)
{
    cJSON *o = cJSON_CreateObject();
    char *s;
    cJSON_AddStringToObject(o, "id", job->id);
    cJSON_AddStringToObject(o, "kind", kf_job_kind_name(job->kind));
    cJSON_AddStringToObject(o, "target", job->target);
    cJSON_AddStringToObject(o, "backend", job->backend);
    if (job->spec)
        cJSON_AddItemToObject(o, "spec", cJSON_Duplicate(job->spec, true));
    if (job->budget)
        cJSON_AddItemToObject(o, "budget", cJSON_Duplicate(job->budget, true));
    if (job->goal)
        cJSON_AddItemToObject(o, "goal", cJSON_Duplicate(job->goal, true));
    s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* Runs in the child kf_runner_run() forked, with the pipe on fd 3. */
static kf_code jp_exec(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                       char **result_json, bool *retryable, kf_err *err)
{
    char *json = jp_payload_json(job);
    char **env;
    size_t n = 0, k = 0, len = json ? strlen(json) : 0;
    char arg0[] = "kforge-worker", arg1[] = KF_JOBPROC_ARG;
    char *argv[] = { arg0, arg1, NULL };
    int fd;

    (void)self; (void)hooks; (void)result_json;
    *retryable = true;
    if (!json || !jp_exe[0]) {
        free(json);
        return kf_err_set(err, KF_INTERNAL, "the job process cannot start: kf_jobproc_init() was not called");
    }
    fd = memfd_create("kforge-job", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || write(fd, json, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0) {
        free(json);
        return kf_err_set(err, KF_IO, "cannot hand the payload to the job process: %s", strerror(errno));
    }
    free(json);
    (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
    if (fd == JP_PAYLOAD_FD) {
        /* it got the number it needs (fd 3 is the pipe, 4 the first free) */
        if (fcntl(fd, F_SETFD, 0) < 0)
            return kf_err_set(err, KF_IO, "fcntl: %s", strerror(errno));
    } else {
        if (dup2(fd, JP_PAYLOAD_FD) < 0)
            return kf_err_set(err, KF_IO, "dup2: %s", strerror(errno));
        close(fd);
    }
    while (environ && environ[n])
        n++;
    env = kf_calloc(n + 1, sizeof(*env));
    for (size_t i = 0; i < n; i++)
        if (kf_jobproc_env_allowed(environ[i]))
            env[k++] = environ[i];
    execve(jp_exe, argv, env);
    free(env);
    return kf_err_set(err, KF_IO, "cannot start the job process %s: %s", jp_exe, strerror(errno));
}

const kf_backend *kf_jobproc_wrap(const kf_backend *real, kf_backend *storage)
{
    storage->name = real->name;
    storage->kinds = real->kinds;
    storage->run = jp_exec;
    return storage;
}

_Noreturn void kf_jobproc_main(void)
{
    kf_err err = KF_ERR_INIT;
    kf_buf b = KF_BUF_INIT;
    kf_job_payload job;
    const kf_backend *backend;
    char chunk[65536];
    ssize_t r;

    if (kf_config_load(&err) != KF_OK || kf_log_init("job", kf_config_str(KF_CFG_LOG_LEVEL)) != 0) {
        fprintf(stderr, "kforge-worker %s: %s\n", KF_JOBPROC_ARG, err.msg[0] ? err.msg : "bad log level");
        _exit(2);
    }
    while ((r = read(JP_PAYLOAD_FD, chunk, sizeof(chunk))) > 0 && b.len + (size_t)r <= JP_MAX_PAYLOAD)
        kf_buf_add(&b, chunk, (size_t)r);
    close(JP_PAYLOAD_FD);
    if (r != 0 || !b.data || kf_job_payload_parse(b.data, &job, &err) != KF_OK) {
        fprintf(stderr, "kforge-worker %s: no valid payload on fd %d: %s\n", KF_JOBPROC_ARG, JP_PAYLOAD_FD,
                err.msg[0] ? err.msg : "read failed or too large");
        _exit(2);
    }
    kf_buf_release(&b);
    backend = kf_backend_find(job.backend, kf_job_kind_name(job.kind));
    if (!backend) {
        fprintf(stderr, "kforge-worker %s: no backend '%s' for kind '%s'\n", KF_JOBPROC_ARG, job.backend,
                kf_job_kind_name(job.kind));
        _exit(2);
    }
    kf_runner_serve(backend, &job);
}
