/*
 * kf_config — every KFORGE_* environment variable, declared once.
 *
 * KF_CONFIG_MAP is the single table of settings: name, type, default,
 * bounds, which binaries read it, and what it means.  It drives loading and
 * validation (kf_config_load), each binary's --help, and the README's config
 * table (`kforge-api config --markdown`).  An unknown KFORGE_* variable or a
 * value out of bounds stops start-up with a message naming the variable.
 *
 * Values live in a process-wide table filled by kf_config_load(); the
 * getters return pointers into it that stay valid until exit.
 */
#ifndef KF_CONFIG_H
#define KF_CONFIG_H

#include "kf_error.h"
#include <stdio.h>

/* Which binaries read a setting (bit mask). */
enum {
    KF_USE_API = 1 << 0,
    KF_USE_SCHED = 1 << 1,
    KF_USE_WORKER = 1 << 2,
    KF_USE_CLI = 1 << 3,
    KF_USE_SIM = 1 << 4,
    KF_USE_ALL = 0x1f,
};

/*   id                 type  default                                   min  max         users                          meaning */
#define KF_CONFIG_MAP(XX)                                                                                                  \
    XX(LOG_LEVEL,        STR, "info",                                   0, 0,            KF_USE_ALL,                      \
       "Log level: debug, info, warn or error.")                                                                          \
    XX(API_LISTEN,       STR, "127.0.0.1:8080",                         0, 0,            KF_USE_API,                      \
       "Address and port kforge-api listens on (HOST:PORT).")                                                             \
    XX(API_THREADS,      INT, "0",                                      0, 256,          KF_USE_API,                      \
       "HTTP worker threads in kforge-api; 0: two per CPU core, at least 4.")                                             \
    XX(API_CONNS_PER_IP, INT, "64",                                     0, 1000000,      KF_USE_API,                      \
       "Connections one client address may hold open to kforge-api; more are closed at once. 0: no limit (use 0 behind a proxy: its clients share its address).") \
    XX(API_IDLE_TIMEOUT_S, INT, "30",                                   1, 3600,         KF_USE_API,                      \
       "Seconds a connection to kforge-api may stay silent, mid-request or between requests, before it is closed.") \
    XX(CORS_ORIGINS,     STR, "",                                       0, 0,            KF_USE_API,                      \
       "Comma-separated browser origins (https://dash.example.com[:PORT]) allowed to call the API cross-origin; empty: no CORS headers at all.") \
    XX(MAX_STREAMS,      INT, "1000",                                   1, 100000,       KF_USE_API,                      \
       "Server-Sent Event streams (GET /v1/jobs/{id}/stream, /v1/stream) kforge-api serves at once; more get 503 with Retry-After. Each holds a connection: keep it below the open-file limit, and KFORGE_API_CONNS_PER_IP counts them too.") \
    XX(SSE_HEARTBEAT_S,  INT, "15",                                     1, 300,          KF_USE_API,                      \
       "Seconds between the ': hb' comments on every stream (keeps proxies from closing an idle stream; finds clients that left).") \
    XX(SSE_BUFFER_BYTES, INT, "1048576",                                65536, 67108864, KF_USE_API,                      \
       "Unsent bytes one stream may hold; a client that falls further behind is closed with a comment and resumes with Last-Event-ID.") \
    XX(MAX_BODY_BYTES,   INT, "1048576",                                1024, 67108864,  KF_USE_API,                      \
       "Largest request body kforge-api accepts; larger bodies get 413.")                                                 \
    XX(PG_DSN,           STR, "postgresql://kforge@127.0.0.1:5432/kforge", 0, 0,         KF_USE_API | KF_USE_SCHED,       \
       "libpq connection string of the PostgreSQL database (only api and scheduler hold it).")                            \
    XX(PG_POOL,          INT, "8",                                      1, 256,          KF_USE_API | KF_USE_SCHED,       \
       "PostgreSQL connections kept open by kforge-api.")                                                                 \
    XX(REDIS_URL,        STR, "redis://127.0.0.1:6379/0",               0, 0,            KF_USE_API | KF_USE_SCHED | KF_USE_WORKER, \
       "Redis holding the queue: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (USER: a Redis ACL user), or rediss://... for TLS (the server's certificate is verified; see KFORGE_REDIS_CA_FILE).") \
    XX(REDIS_CA_FILE,    STR, "",                                       0, 0,            KF_USE_API | KF_USE_SCHED | KF_USE_WORKER, \
       "PEM CA bundle that signed a rediss:// server's certificate; empty: the system's CAs.")                           \
    XX(REDIS_CERT_FILE,  STR, "",                                       0, 0,            KF_USE_API | KF_USE_SCHED | KF_USE_WORKER, \
       "PEM client certificate (chain) for a rediss:// server that asks for one (with KFORGE_REDIS_KEY_FILE).")          \
    XX(REDIS_KEY_FILE,   STR, "",                                       0, 0,            KF_USE_API | KF_USE_SCHED | KF_USE_WORKER, \
       "PEM private key of KFORGE_REDIS_CERT_FILE.")                                                                      \
    XX(API_URL,          STR, "http://127.0.0.1:8080",                  0, 0,            KF_USE_WORKER | KF_USE_CLI,      \
       "Base URL of kforge-api, used by workers to report and by the CLI.")                                               \
    XX(TOKEN,            STR, "",                                       0, 0,            KF_USE_WORKER | KF_USE_CLI,      \
       "Bearer token the CLI (role user/admin) sends to the API.  Workers: use KFORGE_TOKEN_FILE (this still works, with a warning, and is removed from the worker's environment).") \
    XX(TOKEN_FILE,       STR, "",                                       0, 0,            KF_USE_WORKER,                   \
       "File holding the worker's token (role worker, named after its worker id); must be mode 0600 or 0400 and owned by the worker's user.") \
    XX(BOOTSTRAP_TOKEN,  STR, "",                                       0, 0,            KF_USE_API,                      \
       "If set, kforge-api ensures an admin token with this value exists at start-up (make run uses it).")                \
    XX(LEASE_MS,         INT, "30000",                                  1000, 86400000,  KF_USE_WORKER | KF_USE_SCHED,    \
       "Lease duration; a worker renews every third of it (at least every second), the reaper takes back leases past it.")                         \
    XX(HEARTBEAT_MS,     INT, "5000",                                   100, 600000,     KF_USE_WORKER,                   \
       "How often a worker refreshes its registry entry in Redis.")                                                       \
    XX(MAX_ITERATION_BYTES, INT, "524288",                              1024, 67108864,  KF_USE_API,                      \
       "Largest iteration report a worker may send (bytes); larger ones get 413 (also bounded by KFORGE_MAX_BODY_BYTES).") \
    XX(MAX_ITERATIONS,   INT, "10000",                                  1, 1000000,      KF_USE_API,                      \
       "Most iterations one attempt of a job may record; more get 422.")                                                  \
    XX(MAX_ATTEMPTS,     INT, "3",                                      1, 100,          KF_USE_API,                      \
       "Default max_attempts of a job (a job may set its own, 1..20).")                                                   \
    XX(RETRY_BASE_MS,    INT, "1000",                                   1, 3600000,      KF_USE_WORKER | KF_USE_SCHED,    \
       "First retry delay; each further attempt doubles it, with jitter.")                                                \
    XX(RETRY_CAP_MS,     INT, "300000",                                 1, 86400000,     KF_USE_WORKER | KF_USE_SCHED,    \
       "Longest retry delay.")                                                                                            \
    XX(WORKER_TARGETS,   STR, "trn1,inf2,trn2,trn3",                    0, 0,            KF_USE_WORKER,                   \
       "Comma-separated targets this worker leases jobs for.")                                                            \
    XX(WORKER_BACKENDS,  STR, "",                                       0, 0,            KF_USE_WORKER,                   \
       "Comma-separated backends this worker leases jobs for, among those compiled in (diag, sim, ...).  Empty: every one compiled in.  It leases exactly its targets x these backends.") \
    XX(WORKER_ID,        STR, "",                                       0, 0,            KF_USE_WORKER,                   \
       "Worker id (registry, leases, reports); must equal its token's name.  Empty: the token's name (asked of the API at start-up).")                                                          \
    XX(SPOOL_DIR,        STR, "var/spool",                              0, 0,            KF_USE_WORKER,                   \
       "Folder where workers keep reports the API has not yet accepted, one subfolder per worker id.")                                               \
    XX(DRAIN_MS,         INT, "30000",                                  0, 3600000,      KF_USE_WORKER,                   \
       "On SIGTERM, how long a worker lets the current job finish before handing it back.")                               \
    XX(SCHED_TICK_MS,    INT, "250",                                    10, 60000,       KF_USE_SCHED,                    \
       "How often the scheduler leader relays the outbox, reaps leases and promotes retries.")                            \
    XX(LEADER_TTL_MS,    INT, "5000",                                   500, 600000,     KF_USE_SCHED,                    \
       "Leader lock TTL; a standby scheduler takes over within this time after the leader dies.")                         \
    XX(SIM_TARGETS,      STR, "",                                       0, 0,            KF_USE_SIM | KF_USE_WORKER,      \
       "Folder of the simulator's target files (<target>.json); empty: sim/targets here or next to the binary.")         \
    XX(SIM_TIMEOUT_S,    INT, "600",                                    1, 86400,        KF_USE_SIM | KF_USE_WORKER,      \
       "Wall-clock limit of one sandboxed kernel evaluation (kforge-sim --timeout; CPU limit likewise).")               \
    XX(SIM_MEMORY_MIB,   INT, "8192",                                   64, 1048576,     KF_USE_SIM | KF_USE_WORKER,      \
       "Memory limit (address space and resident set) of one sandboxed kernel evaluation, MiB.")                       \
    XX(NEURON_RUNNER,    STR, "kforge-neuron-runner",                   0, 0,            KF_USE_WORKER,                   \
       "neuron backend: the device runner (compile, run, health, versions; docs/neuron-backend.md), a path or a name on PATH.") \
    XX(NEURON_EXPLORER,  STR, "neuron-explorer",                        0, 0,            KF_USE_WORKER,                   \
       "neuron backend: the Neuron profiler CLI (capture, view --output-format summary-json), a path or a name on PATH.") \
    XX(NEURON_CC,        STR, "neuronx-cc",                             0, 0,            KF_USE_WORKER,                   \
       "neuron backend: the Neuron compiler the runner compiles with (passed to the runner as NEURON_CC).") \
    XX(NEURON_CORE,      INT, "0",                                      0, 1023,         KF_USE_WORKER,                   \
       "neuron backend: the NeuronCore this worker evaluates on (NEURON_RT_VISIBLE_CORES of every device tool): one device per evaluation.") \
    XX(NEURON_TIMEOUT_S, INT, "900",                                    1, 86400,        KF_USE_WORKER,                   \
       "neuron backend: wall-clock (and CPU) limit of one device tool run (compile, run, capture, view); a device run past it counts as wedged.") \
    XX(NEURON_BENCH_ITERS, INT, "20",                                   3, 100000,       KF_USE_WORKER,                   \
       "neuron backend: timed runs of the latency measurement (after 5 warm-up runs); the result has percentiles over them.") \
    XX(SIM_THREADS,      INT, "0",                                      0, 8,            KF_USE_SIM,                      \
       "Threads of the simulator's numerics (kforge-sim run --threads); 0: the CPUs available. Values do not depend on it.") \
    XX(SANDBOX,          STR, "strict",                                 0, 0,            KF_USE_SIM | KF_USE_WORKER | KF_USE_CLI, \
       "How user code is isolated: strict (namespaces, seccomp allowlist, rlimits; see docs/security.md) or unconfined (limits only, never for other people's kernels).") \
    XX(SANDBOX_UID,      INT, "65534",                                  1, 4294967294L,  KF_USE_SIM | KF_USE_WORKER | KF_USE_CLI, \
       "Unprivileged uid that user code runs as when kforge runs as root (otherwise the user's first subordinate uid).") \
    XX(SANDBOX_GID,      INT, "65534",                                  1, 4294967294L,  KF_USE_SIM | KF_USE_WORKER | KF_USE_CLI, \
       "Unprivileged gid that user code runs as when kforge runs as root (otherwise the user's first subordinate gid).") \
    XX(KERNELS_DIR,      STR, "",                                       0, 0,            KF_USE_API | KF_USE_CLI | KF_USE_WORKER, \
       "Folder of kforge's kernel library (<op>.py templates); empty: kernels/ here or next to the binary.  kforge-api reads it for POST /v1/batches {\"library\": \"all\"}.") \
    XX(MAX_BATCH_JOBS,   INT, "10000",                                  1, 100000,       KF_USE_API,                      \
       "Most jobs one batch (POST /v1/batches) may hold; a larger matrix gets 422 before anything is built.")            \
    XX(MAX_OPEN_BATCHES, INT, "20",                                     1, 100000,       KF_USE_API,                      \
       "Batches one token may have open (some job not finished) at once; one more gets 422.")                            \
    XX(CACHE_DIR,        STR, "",                                       0, 0,            KF_USE_CLI,                      \
       "Folder of the agent's evaluation cache on disk (timing-only results, reused across runs and jobs); empty: memory only, per run.") \
    XX(CACHE_MAX_ENTRIES, INT, "10000",                                 100, 10000000,   KF_USE_CLI,                      \
       "Entries KFORGE_CACHE_DIR keeps; the oldest go first when it is opened with more.")                               \
    XX(LLM_URL,          STR, "",                                       0, 0,            KF_USE_CLI | KF_USE_WORKER,     \
       "Base URL of an OpenAI-compatible chat-completions endpoint for the LLM planner (it POSTs {url}/chat/completions), e.g. http://127.0.0.1:8000/v1; empty: no LLM planner (docs/llm.md).") \
    XX(LLM_MODEL,        STR, "",                                       0, 0,            KF_USE_CLI | KF_USE_WORKER,     \
       "Model name the LLM planner asks the endpoint for (the request's \"model\").")                                   \
    XX(LLM_API_KEY_FILE, STR, "",                                       0, 0,            KF_USE_CLI | KF_USE_WORKER,     \
       "File holding the endpoint's API key, sent as a Bearer token; read for each request, never logged, never in a sandboxed child's environment. Empty: no Authorization header.") \
    XX(LLM_TIMEOUT_S,    INT, "120",                                    1, 3600,         KF_USE_CLI | KF_USE_WORKER,     \
       "Seconds one chat-completions request may take (connecting: at most 10 of them) before it counts as failed and is retried.") \
    XX(LLM_RETRIES,      INT, "4",                                      0, 20,           KF_USE_CLI | KF_USE_WORKER,     \
       "Retries of one chat-completions request after a connection error, 408, 409, 429 or 5xx, with exponential backoff and jitter (Retry-After honoured up to 60 s).") \
    XX(LLM_MAX_TOKENS_FIELD, STR, "max_completion_tokens",              0, 0,            KF_USE_CLI | KF_USE_WORKER,     \
       "Name of the reply-length field the endpoint takes: max_completion_tokens (OpenAI) or max_tokens (Ollama, older servers).") \
    XX(IDEMPOTENCY_TTL_S, INT, "86400",                                 60, 31536000,    KF_USE_API | KF_USE_SCHED,       \
       "How long an Idempotency-Key and its stored response are kept.")                                                  \
    XX(MIGRATIONS_DIR,   STR, "",                                       0, 0,            KF_USE_API,                      \
       "Folder of numbered *.sql migrations; empty means `share/kforge/migrations` beside the binary (`make install`'s layout), else the migrations/ folder of the source tree kforge-api was built from.") \
    XX(ARTIFACT_STORE,   STR, "pg",                                     0, 0,            KF_USE_API | KF_USE_SCHED,       \
       "Where artifact contents live: pg (zlib-compressed in PostgreSQL) or dir:/ABSOLUTE/PATH (one file per SHA-256 in a folder both api and scheduler reach).") \
    XX(MAX_ARTIFACT_BYTES, INT, "16777216",                             1024, 268435456, KF_USE_API,                      \
       "Largest artifact (kernel.py, profile.json, trace.json, ...) a worker may upload, in bytes before base64; larger ones get 413.") \
    XX(ARTIFACT_RETENTION_DAYS, INT, "0",                               0, 36500,        KF_USE_SCHED,                    \
       "Days after a job finishes that its best-so-far artifacts are deleted (the final set stays); 0 keeps them forever.")

typedef enum kf_config_id {
#define XX(id, type, def, min, max, users, doc) KF_CFG_##id,
    KF_CONFIG_MAP(XX)
#undef XX
    KF__CFG_COUNT
} kf_config_id;

/* Read every KFORGE_* variable from the environment, check types and bounds,
 * and refuse unknown KFORGE_* names.  Returns KF_OK or KF_CONFIG with `err`
 * naming the variable. Safe to call again (tests change the environment). */
kf_code kf_config_load(kf_err *err);

const char *kf_config_str(kf_config_id id);
long kf_config_int(kf_config_id id);
const char *kf_config_name(kf_config_id id);  /* "KFORGE_LEASE_MS" */

/* Forget a secret setting once the caller has copied or used it: blank its
 * bytes in the environment block in place (what /proc/<pid>/environ shows
 * and what children inherit) and unset it.  kf_config_str(id) reads ""
 * afterwards. */
void kf_config_scrub(kf_config_id id);

/* Print the settings a binary reads (users mask) for --help. */
void kf_config_print_help(FILE *out, unsigned users);
/* Print the whole table as Markdown (README). */
void kf_config_print_markdown(FILE *out);

#endif
