/*
 * kf_test_stack — the whole kforge pipeline as real processes, for the
 * end-to-end, worker, scheduler and fault-injection tests.
 *
 * kf_stack_start() makes a fresh database (kf_test_fresh_db + `kforge-api
 * migrate`), flushes the given Redis DB, creates admin/user tokens and one
 * worker token per worker slot (named after its worker id test-w<i>, given
 * to the worker as a 0600 KFORGE_TOKEN_FILE) with `kforge-api token
 * create`, and starts kforge-api on a free port,
 * `n_schedulers` kforge-scheduler and `n_workers` kforge-worker processes
 * with short timings (lease, tick, heartbeat from the options).  Logs go to
 * files in a scratch folder (named in assertion messages).  Helpers submit
 * jobs over HTTP and read PostgreSQL and Redis directly to check
 * invariants; every wait has a deadline.  kf_stack_stop() ends every
 * process it started (SIGTERM, then SIGKILL) and releases everything.
 */
#ifndef KF_TEST_STACK_H
#define KF_TEST_STACK_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <sys/types.h>

#define KF_STACK_MAX_PROCS 8

typedef struct kf_stack_opts {
    int         redis_db;       /* Redis DB number (flushed at start) */
    int         n_workers;      /* started at once (more with kf_stack_worker) */
    int         n_schedulers;
    int         lease_ms;       /* KFORGE_LEASE_MS, default 2000 */
    int         tick_ms;        /* KFORGE_SCHED_TICK_MS, default 100 */
    int         leader_ttl_ms;  /* KFORGE_LEADER_TTL_MS, default 1000 */
    int         drain_ms;       /* KFORGE_DRAIN_MS, default 5000 */
    int         retry_base_ms;  /* KFORGE_RETRY_BASE_MS, default 100 */
    const char *targets;        /* KFORGE_WORKER_TARGETS, default "trn2" */
    const char *sched_env;      /* one extra "K=V" for schedulers, or NULL */
    const char *api_env;        /* one extra "K=V" for kforge-api, or NULL */
} kf_stack_opts;

typedef struct kf_stack {
    kf_stack_opts o;
    char   *dir;                /* scratch folder: logs, spool */
    char   *dsn;
    char   *redis_url;
    char    api_url[64];
    char    api_listen[32];
    char   *admin, *user;
    char   *worker_token[KF_STACK_MAX_PROCS];  /* slot i's token (worker id test-w<i>), made on first use */
    pid_t   api;
    pid_t   sched[KF_STACK_MAX_PROCS];
    pid_t   workers[KF_STACK_MAX_PROCS];
    PGconn *pg;
} kf_stack;

void kf_stack_start(kf_stack *s, const kf_stack_opts *o);
void kf_stack_stop(kf_stack *s);

/* Start (or restart) worker / scheduler / api slot i; extra_env is one
 * "K=V" entry or NULL (a worker's: several, separated by newlines).
 * Returns the pid. */
pid_t kf_stack_worker(kf_stack *s, int i, const char *extra_env);
/* Slot i's worker token (worker id test-w<i>), made on first use; for a
 * test that plays a worker itself over /v1/internal without starting one. */
const char *kf_stack_worker_token(kf_stack *s, int i);
pid_t kf_stack_scheduler(kf_stack *s, int i);
void kf_stack_api(kf_stack *s);

/* Path of a process's log (caller frees): kind "api", "worker", "sched". */
char *kf_stack_log(const kf_stack *s, const char *kind, int i);

/* POST /v1/jobs with the user token; asserts 202 and returns the id (caller
 * frees).  kf_stack_submit_status returns the HTTP status instead (id may
 * be NULL). */
char *kf_stack_submit(kf_stack *s, const char *body);
long kf_stack_submit_status(kf_stack *s, const char *body, char **id);

/* A diag job body for target trn2. */
char *kf_stack_diag_body(int sleep_ms, bool fail, bool crash, int max_attempts);

/* SQL helpers on the stack's database (reconnect if needed). */
char *kf_stack_sql_value(kf_stack *s, const char *sql, const char *param);  /* NULL if no row; caller frees */
long kf_stack_sql_long(kf_stack *s, const char *sql, const char *param);   /* -1 if no row */

/* Job state in PostgreSQL (static buffer, "" if absent). */
const char *kf_stack_state(kf_stack *s, const char *id);

/* Wait until the job's PostgreSQL state is `state` (true) or timeout_ms. */
bool kf_stack_wait_state(kf_stack *s, const char *id, const char *state, int timeout_ms);

/* Wait until `sql` (one $1 = param) returns a value >= want. */
bool kf_stack_wait_sql(kf_stack *s, const char *sql, const char *param, long want, int timeout_ms);

/* Redis on the stack's DB: integer reply of a command with one argument. */
long long kf_stack_redis_int(kf_stack *s, const char *fmt, const char *arg);
/* Redis command on the stack's DB, reply ignored. */
void kf_stack_redis(kf_stack *s, const char *cmd);

/* The invariants every fault test ends with, for the given jobs: each is in
 * a terminal state, has exactly one result row when it succeeded or failed,
 * exactly one terminal event, and no Redis entry left behind. */
void kf_stack_assert_settled(kf_stack *s, char *const *ids, int n);

/* Stop / start the harness's Redis and PostgreSQL (tests/lib/services.sh). */
void kf_stack_redis_stop(void);
void kf_stack_redis_start(void);
void kf_stack_pg_stop(kf_stack *s);
void kf_stack_pg_start(kf_stack *s);

#endif
