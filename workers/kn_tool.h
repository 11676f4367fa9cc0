/*
 * kn_tool — run one Neuron device tool (the runner, neuron-explorer,
 * neuronx-cc) for the neuron backend, under the limits of a sandboxed
 * evaluation.
 *
 * The device tools cannot run inside sim_sandbox: its seccomp filter
 * refuses execve and fork, and they need /dev/neuron* and the SDK's
 * files.  So each runs as its own process (group) with the same process
 * limits an evaluation gets (docs/neuron-backend.md "Isolation"): a new
 * session and process group, PR_SET_PDEATHSIG, RLIMIT_CPU and the
 * wall-clock limit (the whole group is SIGKILLed at either), RLIMIT_CORE 0,
 * RLIMIT_FSIZE, RLIMIT_NOFILE, every descriptor but stdin (/dev/null),
 * stdout and stderr closed, an environment built from an allowlist (PATH,
 * LANG, HOME and TMPDIR = the job's private folder, the Neuron variables
 * the caller passes; never KFORGE_*), and the job's private folder as the
 * working folder.  The user's kernel is Python that the NKI compile path
 * executes: on a device worker it runs with these limits, not in the
 * namespace sandbox (docs/security.md says what that means).
 *
 * Ownership: the result owns its stdout and stderr text (kn_tool_release).
 * Failure: KF_INTERNAL when the process cannot be started; otherwise
 * KF_OK with the outcome in the result (exit code, signal, time limit).
 */
#ifndef KN_TOOL_H
#define KN_TOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "kf_error.h"

enum { KN_TOOL_MAX_OUTPUT = 4 << 20 };   /* bytes kept of stdout and of stderr each */

typedef struct kn_tool_result {
    int    exit_code;      /* -1 when killed */
    int    signal;         /* the signal that ended it, 0 if none */
    bool   timed_out;      /* the wall-clock or CPU limit ended it */
    bool   cancelled;      /* the cancel hook ended it */
    double seconds;        /* wall-clock */
    char  *out, *err;      /* NUL-terminated, at most KN_TOOL_MAX_OUTPUT bytes each */
} kn_tool_result;

typedef struct kn_tool_opts {
    const char *const *argv;      /* argv[0]: a path or a name looked up on PATH */
    const char *const *env;       /* extra "NAME=value" entries, NULL-terminated, or NULL */
    const char        *cwd;       /* the job's private folder (also HOME and TMPDIR) */
    unsigned           timeout_s; /* wall clock and CPU seconds */
    bool (*cancelled)(void *ctx); /* polled every 100 ms; true kills the tool */
    void              *ctx;
} kn_tool_opts;

kf_code kn_tool_run(const kn_tool_opts *o, kn_tool_result *r, kf_err *err);
void kn_tool_release(kn_tool_result *r);

/* "exit 3", "killed by SIGKILL", "the time limit of 900 s", for messages. */
const char *kn_tool_outcome(const kn_tool_result *r, unsigned timeout_s, char *buf, size_t len);

#endif
