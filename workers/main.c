/*
 * kforge-worker — leases jobs from Redis, runs them through a backend in a
 * child process, reports to the API, and acks (docs/protocol.md).
 *
 * This file parses the command line and the settings and wires the parts
 * of libkfworker.a together (kw_worker.h lists them): the lease thread
 * (kw_lease), the API heartbeat thread (kw_beat), the worker's identity
 * (kw_ident), report delivery (kw_deliver) and the lease loop (kw_loop).
 *
 * Failure behaviour: a bad setting, an unusable token or a machine that
 * cannot build the sandbox → a message saying what to fix, exit 2.  Once
 * running, nothing is fatal (see kw_loop.h).  SIGTERM/SIGINT: stop
 * leasing, let the current job run up to KFORGE_DRAIN_MS, then hand it
 * back (kf_queue_release) and exit 0.
 */
#include "kf_backend.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_jobproc.h"
#include "kf_log.h"
#include "kn_selftest.h"
#include "kw_ident.h"
#include "kw_loop.h"
#include "kw_worker.h"
#include "sim_sandbox.h"
#include "agent/ka_llm.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static kw_worker w;

static void w_on_term(int sig)
{
    (void)sig;
    w.term = 1;
}

static void w_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge-worker [--help | --self-test]\n"
            "\n"
            "Leases kforge jobs for KFORGE_WORKER_TARGETS from Redis, runs each in a child\n"
            "process through its backend (compiled in: ");
    const kf_backend *const *all = kf_backend_all();
    for (int i = 0; all[i]; i++)
        fprintf(out, "%s%s", i ? ", " : "", all[i]->name);
    fprintf(out,
            "), renews the lease every\n"
            "KFORGE_LEASE_MS/3 (at least every second, which is when it sees cancel\n"
            "requests), reports start, iterations and the result to the API at\n"
            "KFORGE_API_URL with the token in KFORGE_TOKEN_FILE (role worker, named after\n"
            "this worker's id; mode 0600), then acks the job.  Reports\n"
            "the API cannot take are kept in KFORGE_SPOOL_DIR and resent; a job crash is a\n"
            "failed attempt (retried with backoff up to the job's max_attempts, then dead).\n"
            "SIGTERM/SIGINT: stop leasing, let the running job finish for up to\n"
            "KFORGE_DRAIN_MS, then hand it back to the queue and exit 0.\n"
            "\n"
            "Each job runs in a fresh `kforge-worker --job-process` image that never saw\n"
            "this worker's token or Redis address; every evaluation of user code runs in\n"
            "the sandbox of docs/security.md (KFORGE_SANDBOX).  The worker refuses to\n"
            "start when this machine cannot build that sandbox, and says what to enable.\n"
            "\n"
            "--self-test runs the neuron backend once on a tiny kernel (compile, run,\n"
            "validate, time, profile, artifacts, versions) and prints a checklist; run it\n"
            "once on a new Trn/Inf worker (docs/neuron-backend.md).  Exit 0 all passed.\n");
    kf_config_print_help(out, KF_USE_WORKER);
}

/* The LLM planner's endpoint (docs/llm.md): none when KFORGE_LLM_URL and
 * KFORGE_LLM_MODEL are empty (planner "llm" jobs then fail here, naming
 * them); otherwise valid, and its key file (when set) a regular file of
 * this user that no one else may read, as the token file. */
static kf_code w_llm(kf_err *err)
{
    ka_llm_cfg lc;
    struct stat st;
    int fd;

    if (!kf_config_str(KF_CFG_LLM_URL)[0] && !kf_config_str(KF_CFG_LLM_MODEL)[0])
        return KF_OK;
    if (ka_llm_cfg_from_env(&lc, err) != KF_OK)
        return err->code;
    if (lc.key_file[0]) {
        fd = open(lc.key_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            return kf_err_set(err, KF_CONFIG, "cannot open KFORGE_LLM_API_KEY_FILE %s: %s", lc.key_file,
                              strerror(errno));
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
            close(fd);
            return kf_err_set(err, KF_CONFIG,
                              "KFORGE_LLM_API_KEY_FILE %s must be a regular file of this user that no one else may "
                              "read (chmod 600)",
                              lc.key_file);
        }
        close(fd);
    }
    w.llm = true;
    snprintf(w.llm_key_file, sizeof(w.llm_key_file), "%s", lc.key_file);
    return KF_OK;
}

/* Settings, sandbox probe, targets, token: everything before the network. */
static kf_code w_configure(kf_err *err)
{
    const char *id;

    if (kf_config_load(err) != KF_OK)
        return err->code;
    if (kf_log_init("worker", kf_config_str(KF_CFG_LOG_LEVEL)) != 0)
        return kf_err_set(err, KF_CONFIG, "KFORGE_LOG_LEVEL must be debug, info, warn or error");
    if (gethostname(w.host, sizeof(w.host) - 1) != 0)
        snprintf(w.host, sizeof(w.host), "localhost");
    id = kf_config_str(KF_CFG_WORKER_ID);
    if (!kw_worker_id_valid(id))
        return kf_err_set(err, KF_CONFIG, "KFORGE_WORKER_ID '%s' must be 1-128 letters, digits and _ . : -", id);
    /* user code must not run here unless the machine can hold it */
    if (sim_sandbox_probe(err) != KF_OK) {
        char why[sizeof(err->msg)];
        snprintf(why, sizeof(why), "%s", err->msg);
        return kf_err_set(err, err->code, "refusing to start: %s", why);
    }
    if (kw_worker_parse_targets(&w, kf_config_str(KF_CFG_WORKER_TARGETS), err) != KF_OK ||
        kw_worker_set_caps(&w, kf_config_str(KF_CFG_WORKER_BACKENDS), err) != KF_OK)
        return err->code;
    w.lease_ms = kf_config_int(KF_CFG_LEASE_MS);
    w.heartbeat_ms = kf_config_int(KF_CFG_HEARTBEAT_MS);
    w.drain_ms = kf_config_int(KF_CFG_DRAIN_MS);
    w.retry_base_ms = kf_config_int(KF_CFG_RETRY_BASE_MS);
    w.retry_cap_ms = kf_config_int(KF_CFG_RETRY_CAP_MS);
    w.redis_url = kf_config_str(KF_CFG_REDIS_URL);
    w.api_url = kf_config_str(KF_CFG_API_URL);
    if (w_llm(err) != KF_OK)
        return err->code;
    return kw_ident_token(&w, err);
}

/* --self-test: the neuron backend's first-machine checklist
 * (kn_selftest.h) on the first of KFORGE_WORKER_TARGETS; 0 all passed,
 * 1 an item failed, 2 the configuration or the sandbox is unusable. */
static int w_self_test(void)
{
    kf_err err = KF_ERR_INIT;
    char first[16];
    size_t n;

    if (kf_config_load(&err) != KF_OK || kf_log_init("worker", kf_config_str(KF_CFG_LOG_LEVEL)) != 0 ||
        sim_sandbox_probe(&err) != KF_OK) {
        fprintf(stderr, "kforge-worker --self-test: %s\n", err.msg[0] ? err.msg : "bad KFORGE_LOG_LEVEL");
        return 2;
    }
    n = strcspn(kf_config_str(KF_CFG_WORKER_TARGETS), ",");
    snprintf(first, sizeof(first), "%.*s", (int)(n < sizeof(first) ? n : sizeof(first) - 1),
             kf_config_str(KF_CFG_WORKER_TARGETS));
    return kn_selftest_run(stdout, first[0] ? first : "trn2");
}

static void w_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = w_on_term;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

int main(int argc, char **argv)
{
    kf_err err = KF_ERR_INIT;
    int rc;

    if (argc == 2 && strcmp(argv[1], KF_JOBPROC_ARG) == 0)
        kf_jobproc_main();          /* a job process (kf_jobproc.h): never returns */
    /* nothing of this user may ptrace the worker or read its memory (its token) */
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (kf_jobproc_init(&err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            w_usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--self-test") == 0 && argc == 2)
            return w_self_test();
        fprintf(stderr, "kforge-worker: unknown argument '%s'\n\n", argv[i]);
        w_usage(stderr);
        return 2;
    }
    if (w_configure(&err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    w.q = kf_queue_connect(w.redis_url, &err);
    if (!w.q) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        return 2;
    }
    w.rep = kf_report_new(w.api_url, w.token, 10000);
    if (!w.rep || kw_ident_whoami(&w, kf_config_str(KF_CFG_WORKER_ID), &err) != KF_OK) {
        fprintf(stderr, "kforge-worker: %s\n", w.rep ? err.msg : "cannot set up libcurl");
        kf_report_free(w.rep);
        kf_queue_free(w.q);
        return w.term ? 0 : 2;
    }
    w.spool = kw_ident_spool(&w, &err);
    if (!w.spool) {
        fprintf(stderr, "kforge-worker: %s\n", err.msg);
        kf_report_free(w.rep);
        kf_queue_free(w.q);
        return 2;
    }
    w_signals();
    {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        w.started_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;   /* the registry's started_ms */
    }
    kw_worker_start_threads(&w);
    {
        char backends[256] = "";
        for (int i = 0; i < w.n_backends; i++)
            snprintf(backends + strlen(backends), sizeof(backends) - strlen(backends), "%s%s", i ? "," : "",
                     w.backends[i]);
        kf_log_info("worker started id=%s targets=%s backends=%s lease_ms=%lld api=%s llm=%s", w.id,
                    kf_config_str(KF_CFG_WORKER_TARGETS), backends, (long long)w.lease_ms, w.api_url,
                    w.llm ? kf_config_str(KF_CFG_LLM_MODEL) : "none");
    }
    rc = kw_loop_run(&w);
    kw_worker_stop_threads(&w);

    if (kf_queue_worker_gone(w.q, w.id, &err) != KF_OK)
        kf_log_warn("could not leave the registry (its entry expires by itself) err=\"%s\"", err.msg);
    kf_log_info("worker stopped id=%s", w.id);
    kf_report_free(w.rep);
    kf_spool_free(w.spool);
    kf_queue_free(w.q);
    curl_global_cleanup();
    explicit_bzero(w.token, strlen(w.token));
    free(w.token);
    return rc;
}
