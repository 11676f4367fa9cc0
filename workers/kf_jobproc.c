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
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
    JP_PAYLOAD_FD = 4,
    JP_LLM_KEY_FD = 5,
    JP_MAX_PAYLOAD = 64 << 20,
};

extern char **environ;

static char jp_exe[PATH_MAX];
static int jp_llm_key_fd = -1;   /* the job process's: the LLM key's descriptor, or -1 */

int kf_jobproc_llm_key_fd(void)
{
    return jp_llm_key_fd;
}

kf_code kf_jobproc_init(kf_err *err)
{
    ssize_t n = readlink("/proc/self/exe", jp_exe, sizeof(jp_exe) - 1);
    if (n <= 0)
        return kf_err_set(err, KF_IO, "cannot read /proc/self/exe (%s): the worker needs /proc to start its "
                                      "job processes", strerror(errno));
    jp_exe[n] = '\0';
    return KF_OK;
}

void kf_jobproc_init_exe(const char *path)
{
    snprintf(jp_exe, sizeof(jp_exe), "%s", path ? path : "");
}

kf_code kf_jobproc_workdir_make(const char *job_id, char *out, size_t len, kf_err *err)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(out, len, "%s/kforge-job-%.40s-XXXXXX", tmp && *tmp ? tmp : "/tmp", job_id ? job_id : "");
    if (n < 0 || (size_t)n >= len)
        return kf_err_set(err, KF_INTERNAL, "the job folder's path is too long (TMPDIR=%.100s)", tmp);
    if (!mkdtemp(out))
        return kf_err_set(err, KF_IO, "cannot create a job folder in %s: %s (check TMPDIR)",
                          tmp && *tmp ? tmp : "/tmp", strerror(errno));
    return KF_OK;
}

static int jp_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void kf_jobproc_workdir_remove(const char *dir)
{
    if (dir && *dir && nftw(dir, jp_rm, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        kf_log_warn("could not remove the job folder %s: %s", dir, strerror(errno));
}

bool kf_jobproc_env_allowed(const char *e)
{
    static const char *const exact[] = {
        "PATH=", "HOME=", "LANG=", "TZ=", "TMPDIR=", "USER=", "LOGNAME=", "OMP_NUM_THREADS=",
        "ASAN_OPTIONS=", "UBSAN_OPTIONS=", "LSAN_OPTIONS=",
        /* the settings a backend reads; nothing that grants access */
        "KFORGE_LOG_LEVEL=", "KFORGE_SIM_TARGETS=", "KFORGE_SIM_TIMEOUT_S=", "KFORGE_SIM_MEMORY_MIB=",
        "KFORGE_KERNELS_DIR=", "KFORGE_CACHE_DIR=", "KFORGE_CACHE_MAX_ENTRIES=", "KFORGE_SANDBOX=",
        "KFORGE_SANDBOX_UID=", "KFORGE_SANDBOX_GID=",
        /* the LLM planner's endpoint; its key file never: the key comes as a descriptor */
        "KFORGE_LLM_URL=", "KFORGE_LLM_MODEL=", "KFORGE_LLM_TIMEOUT_S=", "KFORGE_LLM_RETRIES=",
        "KFORGE_LLM_MAX_TOKENS_FIELD=", NULL,
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

/* The payload for the job process's fd 4: the queue's document again,
 * made by its one serializer (kf_job_payload_build); NULL only when a
 * member is not an object, which kf_job_payload_parse never yields. */
static char *jp_payload_json(const kf_job_payload *job)
{
    char *spec = job->spec ? cJSON_PrintUnformatted(job->spec) : NULL;
    char *budget = job->budget ? cJSON_PrintUnformatted(job->budget) : NULL;
    char *goal = job->goal ? cJSON_PrintUnformatted(job->goal) : NULL;
    kf_err err = KF_ERR_INIT;
    char *s = kf_job_payload_build(job->id, kf_job_kind_name(job->kind), job->target, job->backend, spec, budget,
                                   goal, &err);

    free(spec);
    free(budget);
    free(goal);
    return s;
}

/* Runs in the child kf_runner_run() forked, with the pipe on fd 3. */
static kf_code jp_exec(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                       char **result_json, bool *retryable, kf_err *err)
{
    const kf_jobproc *jp = (const kf_jobproc *)self;   /* the backend is its first member */
    char *json = jp_payload_json(job), *tmpdir = NULL;
    char **env;
    size_t n = 0, k = 0, len = json ? strlen(json) : 0;
    char arg0[] = "kforge-worker", arg1[] = KF_JOBPROC_ARG;
    char *argv[] = { arg0, arg1, NULL };
    int fd;

    (void)hooks; (void)result_json;
    *retryable = true;
    if (!json) {
        *retryable = false;
        return kf_err_set(err, KF_INVALID, "job %s: its spec, budget and goal must be JSON objects", job->id);
    }
    if (!jp_exe[0]) {
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
    if (jp->llm_key_file[0]) {
        /* the LLM key reaches the job process as a descriptor, never as a
         * path or in its environment; its LLM client reads it only in a
         * child made per request (ka_llm.h, cfg.key_fd) */
        int kfd = open(jp->llm_key_file, O_RDONLY | O_NOFOLLOW);
        if (kfd < 0)
            return kf_err_set(err, KF_IO, "cannot open the LLM key file %s (KFORGE_LLM_API_KEY_FILE): %s",
                              jp->llm_key_file, strerror(errno));
        if (kfd != JP_LLM_KEY_FD) {
            if (dup2(kfd, JP_LLM_KEY_FD) < 0)
                return kf_err_set(err, KF_IO, "dup2: %s", strerror(errno));
            close(kfd);
        }
    }
    while (environ && environ[n])
        n++;
    env = kf_calloc(n + 2, sizeof(*env));
    for (size_t i = 0; i < n; i++)
        if (kf_jobproc_env_allowed(environ[i]) && !(jp->tmpdir[0] && strncmp(environ[i], "TMPDIR=", 7) == 0))
            env[k++] = environ[i];
    if (jp->tmpdir[0])
        env[k++] = tmpdir = kf_asprintf("TMPDIR=%s", jp->tmpdir);
    execve(jp_exe, argv, env);
    free(env);
    free(tmpdir);
    return kf_err_set(err, KF_IO, "cannot start the job process %s: %s", jp_exe, strerror(errno));
}

const kf_backend *kf_jobproc_wrap(const kf_backend *real, const char *tmpdir, kf_jobproc *storage)
{
    storage->backend.name = real->name;
    storage->backend.kinds = real->kinds;
    storage->backend.run = jp_exec;
    snprintf(storage->tmpdir, sizeof(storage->tmpdir), "%s", tmpdir ? tmpdir : "");
    storage->llm_key_file[0] = '\0';
    return &storage->backend;
}

void kf_jobproc_set_llm_key(kf_jobproc *storage, const char *key_file)
{
    snprintf(storage->llm_key_file, sizeof(storage->llm_key_file), "%s", key_file ? key_file : "");
}

_Noreturn void kf_jobproc_main(void)
{
    kf_err err = KF_ERR_INIT;
    kf_buf b = KF_BUF_INIT;
    kf_job_payload job;
    const kf_backend *backend;
    char chunk[65536];
    ssize_t r;

    /* before anything opens a file: descriptor 5 is the LLM key when the
     * worker handed one (kept out of every later exec) */
    if (fcntl(JP_LLM_KEY_FD, F_SETFD, FD_CLOEXEC) == 0)
        jp_llm_key_fd = JP_LLM_KEY_FD;
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
