/*
 * kf_jobproc — run a job's backend in a fresh process image that never
 * held the worker's secrets.
 *
 * The worker holds its API token, its Redis address and the buffers of
 * every report it sent; a job process that is only fork()ed carries all of
 * that in its memory, and the evaluations it forks carry it further, within
 * reach of a kernel that reads its own memory.  So the worker's job
 * process exec()s the worker binary again (kf_jobproc_init() records which,
 * before anything else runs) as `kforge-worker --job-process`, with an
 * environment reduced to an allowlist (PATH, HOME, locale, OpenBLAS and
 * sanitizer knobs, and the KFORGE_* settings a backend reads: log level,
 * simulator limits and targets, kernels and cache folders, the sandbox
 * mode, the LLM endpoint (URL, model, timeout, retries; its key only as
 * an open descriptor, kf_jobproc_set_llm_key); never KFORGE_LLM_API_KEY_FILE, KFORGE_TOKEN, KFORGE_TOKEN_FILE, KFORGE_REDIS_URL,
 * KFORGE_PG_DSN, KFORGE_BOOTSTRAP_TOKEN or anything else), and the job's
 * payload in a sealed memfd on fd 4.
 *
 * kf_jobproc_wrap() gives a backend whose run() does that exec inside the
 * child kf_runner_run() forked, with TMPDIR set to a private folder the
 * worker made for the job (kf_jobproc_workdir_make(), 0700) and removes
 * after the run whatever became of the job process (a crash, a kill after
 * the cancel grace): kf_jobproc_workdir_remove().  kf_jobproc_main() is the
 * new image's side:
 * it reads the payload, finds the named backend and serves the frame
 * protocol on fd 3 (kf_runner_serve()), so kf_runner's parent sees no
 * difference.
 *
 * Failure: kf_jobproc_init() returns KF_IO when /proc/self/exe cannot be
 * read; the wrapped run() returns KF_IO (retryable) when the exec fails;
 * kf_jobproc_main() exits 2 with a message on stderr for a bad payload.
 */
#ifndef KF_JOBPROC_H
#define KF_JOBPROC_H

#include "kf_backend.h"
#include "kf_error.h"

#define KF_JOBPROC_ARG "--job-process"

/* Record the running binary's path (call first thing in main). */
kf_code kf_jobproc_init(kf_err *err);
/* Or name the worker binary to exec (a program that is not kforge-worker). */
void kf_jobproc_init_exe(const char *path);

/* The wrapper: a backend first, so run() finds the rest from `self`. */
typedef struct kf_jobproc {
    kf_backend backend;
    char       tmpdir[4096];    /* the job process's TMPDIR; "" keeps the worker's */
    char       llm_key_file[4096]; /* "" none; else opened for the job process as descriptor 5 */
} kf_jobproc;

/* `real`, run in a fresh image whose TMPDIR is tmpdir (NULL or "": the
 * worker's).  The wrapper lives in *storage. */
const kf_backend *kf_jobproc_wrap(const kf_backend *real, const char *tmpdir, kf_jobproc *storage);

/* The LLM planner's key (KFORGE_LLM_API_KEY_FILE, the worker's): the
 * wrapped run() opens the file and hands the job process the open
 * descriptor as fd 5 -- never the path, never the key in its environment
 * or payload.  Call after kf_jobproc_wrap. */
void kf_jobproc_set_llm_key(kf_jobproc *storage, const char *key_file);

/* In the job process: the LLM key's descriptor the worker handed it
 * (close-on-exec), or -1. */
int kf_jobproc_llm_key_fd(void);

/* A new 0700 folder <TMPDIR or /tmp>/kforge-job-<id>-XXXXXX for one run. */
kf_code kf_jobproc_workdir_make(const char *job_id, char *out, size_t len, kf_err *err);
/* Remove it and everything in it (symlinks are removed, never followed). */
void kf_jobproc_workdir_remove(const char *dir);

/* The job process: never returns. */
_Noreturn void kf_jobproc_main(void);

/* True when name=value (a KFORGE_* or other environment entry) may reach a
 * job process. */
bool kf_jobproc_env_allowed(const char *entry);

#endif
