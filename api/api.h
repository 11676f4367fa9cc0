/*
 * api — kforge-api's internals shared by its files (not a public library).
 *
 *   api_pg.c        PostgreSQL connection pool and query helpers
 *   api_qpool.c     pool of kf_queue handles (kf_queue is not thread-safe)
 *   api_http.c      libmicrohttpd glue: request context, route table,
 *                   dispatch (HEAD as GET), framing checks, problem+json
 *                   replies, request metrics
 *   api_auth.c      Bearer tokens (SHA-256 hashed), roles, token creation,
 *                   the 429 limit on failed authentications per address,
 *                   /v1/whoami
 *   api_idem.c      Idempotency-Key (draft-ietf-httpapi-idempotency-key-header)
 *   api_jobs.c      /v1/jobs routes
 *   api_runs.c      /v1/jobs/{id}/iterations[/{seq}]: a job's iterations
 *   api_compare.c   /v1/compare: runs side by side
 *   api_batches.c   /v1/batches: many jobs at once, roll-up, cancel, reports
 *   api_internal.c  /v1/internal routes for workers (docs/protocol.md)
 *   api_artifacts.c artifact upload (worker), listing and download (docs/runs.md)
 *   api_library.c   /v1/library: the kernel library registry, and warm starts
 *   api_fleet.c     /v1/workers: live workers and queue depth (dead letters: admin)
 *   api_calib.c     /v1/calibration: the simulator's error against the device,
 *                   and the calibration records of worker results
 *   api_ui.c        /ui/: the team dashboard's embedded files (ui/, tools/embed.c)
 *   api_ops.c       /healthz /readyz /metrics /v1/openapi.json
 *   api_stream.c    live progress: Server-Sent Events fed by PostgreSQL
 *                   LISTEN/NOTIFY (api_stream_query.c: their query)
 *   api_migrate.c   kforge-api migrate
 *   main.c          subcommands
 *
 * Failure behaviour: no request ever crashes the process.  Bad input is a
 * 4xx problem+json naming the field and rule; PostgreSQL unreachable is 503
 * with Retry-After; Redis unreachable never fails a POST (the outbox keeps
 * the job), and a worker report is then checked against the lease recorded
 * in PostgreSQL at its start, or answered 503 when there is none (never
 * accepted unchecked; api_internal.c).  Ownership: an api_req lives from the first callback of a
 * request to MHD's completion callback, which frees it and returns its
 * pooled connections.
 */
#ifndef KF_API_H
#define KF_API_H

#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "kf_artifact.h"
#include "kf_buf.h"
#include "kf_db.h"
#include "kf_error.h"
#include "kf_job.h"
#include "kf_json.h"
#include "kf_queue.h"

/* ---- PostgreSQL pool (api_pg.c) ------------------------------------------ */

typedef struct api_pg_pool api_pg_pool;

/* size connections, opened lazily.  Never fails (connections are made on use). */
api_pg_pool *api_pg_pool_new(const char *dsn, int size);
void api_pg_pool_free(api_pg_pool *p);
/* A connection that answered (reset if it was broken), or NULL with err =
 * KF_UNAVAILABLE when PostgreSQL cannot be reached.  Waits at most
 * wait_ms for a free slot (KF_UNAVAILABLE "pool exhausted" after). */
PGconn *api_pg_acquire(api_pg_pool *p, int wait_ms, kf_err *err);
/* Re-open c (PQreset) and forget what was prepared on it. */
void api_pg_reset(api_pg_pool *p, PGconn *c);
/* Give a connection back; one left inside a transaction is rolled back,
 * one that is broken is closed and reopened on a later acquire. */
void api_pg_release(api_pg_pool *p, PGconn *c);

/* The set of statements (bit per api_stmt id) prepared on a connection
 * the caller holds; cleared whenever the connection is re-opened. */
uint64_t *api_pg_prepared(api_pg_pool *p, PGconn *c);
/* The job moves (kf_db_apply) prepared on that connection, cleared with
 * it; NULL when c is not the pool's. */
kf_db_prepared *api_pg_moves_prepared(api_pg_pool *p, PGconn *c);

/* A named statement prepared once per connection (hot paths: less parsing
 * and planning): db/kf_pg.h's.  id is 0..63 and unique among the API's
 * statements. */
typedef kf_pg_stmt api_stmt;

/* A single connection for the command-line subcommands (kf_pg_connect). */
PGconn *api_pg_connect(const char *dsn, kf_err *err);

/* True when a failed query should be answered 503 (the server is gone,
 * shutting down, or asked us to retry), false for other errors. */
bool api_pg_error_transient(PGconn *c, const PGresult *res);

/* ---- queue pool (api_qpool.c) -------------------------------------------- */

typedef struct api_qpool api_qpool;
api_qpool *api_qpool_new(const char *redis_url, int keep);
void api_qpool_free(api_qpool *p);
/* A handle, or NULL (err = KF_REDIS) when Redis cannot be reached. */
kf_queue *api_qpool_get(api_qpool *p, kf_err *err);
void api_qpool_put(api_qpool *p, kf_queue *q);

/* ---- roles and principals (api_auth.c) ----------------------------------- */

enum {
    API_ROLE_WORKER = 1 << 0,
    API_ROLE_USER = 1 << 1,
    API_ROLE_ADMIN = 1 << 2,
    API_PUBLIC = 0,          /* route needs no token */
};

#define API_NAME_MAX 128   /* longest token name, and worker id */

typedef struct api_principal {
    int64_t token_id;        /* api_tokens.id; 0 when anonymous */
    int     role;            /* one API_ROLE_* bit */
    char    name[API_NAME_MAX + 1];   /* api_tokens.name: for a worker token, the one
                                       * worker id it may speak for */
} api_principal;

const char *api_role_name(int role);
int api_role_parse(const char *s);   /* 0 when unknown */

/* SHA-256 of a token secret. */
void api_token_hash(const char *secret, unsigned char out[32]);
/* The same as a bytea literal in hex form ("\\x" + 64 hex digits), as
 * PostgreSQL prints a bytea. */
void api_token_hash_hex(const char *secret, char out[67]);
/* A new random secret "kf_<64 hex>" (caller frees). */
char *api_token_new_secret(void);
/* A worker id: 1..API_NAME_MAX of [A-Za-z0-9_.:-].  A worker token's name
 * must be one (token create refuses others). */
bool api_worker_id_valid(const char *id);
/* Insert a token row; returns KF_OK and its id.  A worker token's name
 * must be a valid worker id (KF_INVALID otherwise, saying why). */
kf_code api_token_insert(PGconn *c, const char *secret, const char *name, const char *role, int64_t *id,
                         kf_err *err);
/* Ensure an admin token with this secret exists (KFORGE_BOOTSTRAP_TOKEN). */
kf_code api_token_bootstrap(PGconn *c, const char *secret, kf_err *err);

/* ---- migrations (api_migrate.c) ------------------------------------------ */

/* Apply every not-yet-applied NNNN_name.sql of dir in numeric order, each
 * in its own transaction, recorded in schema_migrations.  Prints one line
 * per migration applied to `out` (may be NULL).  *applied counts them. */
kf_code api_migrate(PGconn *c, const char *dir, FILE *out, int *applied, kf_err *err);
/* How many migrations of dir are not applied (-1: dir unreadable). */
int api_migrations_pending(PGconn *c, const char *dir);
/* The folder migrate uses: KFORGE_MIGRATIONS_DIR, else the source tree's. */
const char *api_migrations_dir(void);

/* ---- server and requests (api_http.c) ------------------------------------ */

typedef struct api_server api_server;
typedef struct api_req api_req;
typedef void (*api_handler)(api_req *r);

enum {
    API_F_JSON = 1 << 0,      /* body required: a JSON object */
    API_F_JSON_OPT = 1 << 1,  /* body optional: when present, a JSON object */
    API_F_IDEM = 1 << 2,      /* honours Idempotency-Key */
    API_F_LARGE = 1 << 3,     /* body bounded by the artifact limit (api_body_limit), not max_body */
};

typedef struct api_route {
    const char *method;
    const char *pattern;      /* "/v1/jobs/{id}/cancel"; {x} matches one segment */
    api_handler handler;
    int         roles;        /* API_ROLE_* bits allowed; API_PUBLIC for none */
    int         flags;        /* API_F_* */
} api_route;

typedef struct api_server_config {
    const char *listen;       /* HOST:PORT */
    int         threads;
    int         conns_per_ip;   /* 0: no limit */
    int         idle_timeout_s;
    long        max_body;
    const char *pg_dsn;
    int         pg_pool;
    const char *redis_url;
    int         idem_ttl_s;
    int         default_max_attempts;
    long        max_iteration_bytes;   /* largest iteration report body */
    int         max_iterations;        /* most iterations one attempt records */
    long        max_artifact_bytes;    /* largest artifact upload (decoded bytes) */
    kf_artifact_store *artifacts;      /* where artifact contents live (borrowed) */
    const char *cors_origins;          /* KFORGE_CORS_ORIGINS: exact origins, comma-separated; "" none */
    int         max_streams;           /* open Server-Sent Event streams at most */
    int         sse_heartbeat_s;       /* a ": hb" comment on every stream this often */
    long        sse_buffer_bytes;      /* unsent bytes a stream may hold */
    long        max_batch_jobs;        /* KFORGE_MAX_BATCH_JOBS; 0: 10000 */
    int         max_open_batches;      /* KFORGE_MAX_OPEN_BATCHES; 0: 20 */
} api_server_config;

/* The largest body a route takes: max_body, or for API_F_LARGE routes
 * (an artifact in base64 inside JSON) 4/3 of max_artifact_bytes plus
 * 64 KiB for the other fields, whichever is larger. */
long api_body_limit(const api_server_config *cfg, int route_flags);

/* Start listening; NULL with err on failure (port in use, bad address). */
api_server *api_server_start(const api_server_config *cfg, kf_err *err);
void api_server_stop(api_server *s);

/* The request, as handlers see it. */
struct api_req {
    api_server        *srv;
    struct MHD_Connection *conn;
    const char        *method;
    const char        *url;           /* path without the query */
    const api_route   *route;
    int                route_index;
    char               param[128];    /* the {x} segment of the route, if any */
    char               param2[128];   /* a second {x} segment ("/v1/jobs/{id}/iterations/{seq}") */
    api_principal      who;
    kf_buf             body;
    cJSON             *json;          /* parsed body (API_F_JSON[_OPT]) or NULL */
    PGconn            *pg;            /* acquired by api_req_pg(), returned at the end */
    bool               pg_failed;     /* a query already failed in this request */
    bool               in_tx;         /* between api_req_begin and commit/rollback */
    char               request_id[20];

    /* The response being built. */
    int                status;
    kf_buf             out;
    const char        *content_type;
    char               location[160];
    int                retry_after;   /* seconds; 0 = no header */
    const char        *www_auth;      /* WWW-Authenticate value or NULL */
    bool               replayed;      /* answered from the idempotency store */
    bool               close;         /* Connection: close (the request's framing is in doubt) */
    /* Download headers (api_artifacts.c); each sent only when set. */
    const char        *cache_control; /* replaces Cache-Control: no-store */
    char               etag[72];
    char               content_range[96];
    bool               accept_ranges;
    bool               preflight;     /* a CORS preflight (OPTIONS) of an allowed origin */
    /* A dashboard page or asset (api_ui.c): sent with this
     * Content-Security-Policy and X-Content-Type-Options: nosniff. */
    const char        *csp;

    /* Idempotency-Key state (api_idem.c). */
    char               idem_key[256];
    unsigned char      idem_fp[32];
    bool               idem_active;   /* we own an in_flight row */
    bool               idem_stored;   /* the handler stored the response itself */

    /* A handler that answers later (api_req_suspend). */
    void             (*handoff)(api_req *r);   /* runs once the connection is suspended */
    void             (*resume)(api_req *r);    /* builds the answer once resumed */
    void              *ctx;                    /* the handler's state until then */
    void             (*ctx_free)(void *ctx);   /* frees ctx if the request ends first */

    /* A streamed answer (api_stream.c): sent instead of out, with status. */
    struct MHD_Response *stream;

    /* Internal to api_http.c. */
    bool               too_large;
    bool               done;
    bool               suspended;
    long long          started_ns;
};

/* For a handler whose answer comes from another thread: once the handler
 * returns, the connection is suspended and handoff(r) runs; from then on
 * any thread may call api_req_resume(r), exactly once, after which the
 * connection's own thread calls resume(r) to build the answer (the usual
 * rollback, idempotency and sending follow).  The HTTP thread does not
 * wait meanwhile.  ctx/ctx_free: the handler's state, freed with the
 * request if it is still set. */
void api_req_suspend(api_req *r, void (*handoff)(api_req *r), void (*resume)(api_req *r));
void api_req_resume(api_req *r);

/* Settings the handlers read. */
const api_server_config *api_req_config(const api_req *r);
api_qpool *api_req_qpool(const api_req *r);

/* CORS (KFORGE_CORS_ORIGINS): when the request's Origin is one of the
 * configured origins, add Access-Control-Allow-Origin, Vary: Origin and the
 * exposed headers to resp (and, for a preflight, the allowed methods and
 * headers and the max-age); nothing for any other origin.  Every response
 * path (api_send, a stream's) calls it. */
void api_cors_headers(api_req *r, struct MHD_Response *resp);

/* A header of the request or NULL. */
const char *api_req_header(api_req *r, const char *name);
/* A query-string argument or NULL (MHD decodes it). */
const char *api_req_query(api_req *r, const char *name);
/* Record a 400 for each query argument not in allowed; true if all known. */
bool api_req_query_known(api_req *r, const char *const *allowed);
/* Without answering: add to fe each query argument neither in allowed nor
 * starting with prefix (may be NULL; "label." for label.KEY=VALUE), and
 * each given more than once; true when none was added. */
bool api_req_query_check(api_req *r, const char *const *allowed, const char *prefix, kf_fields *fe);

/* The request's PostgreSQL connection, acquired on first use; NULL after
 * answering 503 when PostgreSQL is unreachable. */
PGconn *api_req_pg(api_req *r);
/* Run a statement.  On failure answers the request (503 + Retry-After when
 * PostgreSQL is gone or busy, 500 otherwise) and returns NULL.  A broken
 * connection is re-opened and the statement retried once when no
 * transaction is open. */
PGresult *api_req_sql(api_req *r, const char *sql, int n, const char *const *params);
/* The same with a prepared statement. */
PGresult *api_req_stmt(api_req *r, const api_stmt *st, const char *const *params);
/* The same without answering: NULL with *fail_status 503 (PostgreSQL
 * away or busy) or 500. */
PGresult *api_req_stmt_quiet(api_req *r, const api_stmt *st, const char *const *params, int *fail_status);
/* api_req_stmt_quiet with some parameters in PostgreSQL's binary format
 * (libpq's paramLengths and paramFormats, st->nparams entries each). */
PGresult *api_req_stmt_bin(api_req *r, const api_stmt *st, const char *const *params, const int *lengths,
                           const int *formats, int *fail_status);
/* Move the job by one row of the transition table (kf_db_apply) on the
 * request's connection, inside its transaction if one is open.  False
 * after answering: a PostgreSQL failure as api_req_sql does, a refused
 * move (the table does not allow it from the job's state, or a stale
 * attempt) through the error map (409, 404).  out may be NULL. */
bool api_move(api_req *r, const kf_db_move *m, kf_db_moved *out);
/* True when rc (a kf_db call's) is KF_OK; otherwise answers the request as
 * api_move does and returns false. */
bool api_db_ok(api_req *r, kf_code rc, const kf_err *e);
/* A whole-number column of res read strictly (kf_db_num); false after
 * logging and answering 500 when it is not one in [lo, hi]. */
bool api_pg_num(api_req *r, const PGresult *res, int row, int col, long lo, long hi, long *out);
/* BEGIN / COMMIT / ROLLBACK; false after answering on failure. */
bool api_req_begin(api_req *r);
bool api_req_commit(api_req *r);
void api_req_rollback(api_req *r);

/* The same without answering: NULL with e set when unreachable. */
PGconn *api_req_pg_quiet(api_req *r, kf_err *e);
/* Re-open the request's connection (PQreset; prepared statements forgotten). */
void api_req_pg_reset(api_req *r);
/* Give the request's connection back to the pool now (it is returned at
 * the end of the request anyway). */
void api_req_pg_put(api_req *r);

/* Authenticate the Bearer token and check the route's roles; false after
 * answering 401/403/429/503 (api_auth.c). */
bool api_authenticate(api_req *r);
/* Count one failed authentication from address sa (IPv4 or IPv6; others
 * are not counted) at now_ms (CLOCK_MONOTONIC milliseconds).  True when
 * the address has failed more than 20 times in its current 60 s window:
 * answer 429 with Retry-After *retry_after_s (seconds to the window's end)
 * instead of 401.  Thread-safe; the state is a fixed table (api_auth.c). */
bool api_auth_fail_note(const struct sockaddr *sa, long long now_ms, int *retry_after_s);

/* Replies.  The body strings are copied. */
void api_reply_json_text(api_req *r, int status, const char *json);
void api_reply_json(api_req *r, int status, const cJSON *v);
/* problem+json; `slug` becomes the type "urn:kforge:problem:<slug>".  Only
 * for answers whose status or title no kf_code in KF_ERROR_MAP gives (each
 * call says why); every other answer goes through api_reply_code. */
void api_reply_problem(api_req *r, int status, const char *slug, const char *title, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* 422 (or status) with the field errors listed under "errors". */
void api_reply_fields(api_req *r, int status, const char *slug, const kf_fields *fe);
/* problem+json whose status and title are those KF_ERROR_MAP gives `code`;
 * `slug` names the problem type as in api_reply_problem. */
void api_reply_code(api_req *r, kf_code code, const char *slug, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Answer from an error value (status from KF_ERROR_MAP; 503s get Retry-After). */
void api_reply_err(api_req *r, const kf_err *e);

/* The public JSON form of a jobs row aliased j. */
#define API_JOB_JSON                                                                                      \
    "json_build_object('id', j.id, 'kind', j.kind, 'state', j.state, 'target', j.target, 'backend', "     \
    "j.backend, 'priority', j.priority, 'spec', j.spec, 'budget', j.budget, 'goal', j.goal, 'labels', "    \
    "j.labels, 'attempt', j.attempt, 'max_attempts', j.max_attempts, 'cancel_requested', "                 \
    "j.cancel_requested, 'worker_id', j.worker_id, 'last_error', j.last_error, 'best_iteration', "         \
    "j.best_iteration, 'result', j.result, 'idempotency_key', j.idempotency_key, 'created_at', "           \
    "j.created_at, 'updated_at', j.updated_at, 'started_at', j.started_at, 'finished_at', j.finished_at, "    \
    "'provenance', j.provenance)"

/* A job's best iteration as a lateral join on the jobs row aliased j: the
 * fastest correct one (ties: the later attempt, then the lower seq), with
 * attempt, seq, latency_ns and profile, under `alias`; kforge_fraction_of_bound
 * (migration 0008) turns its profile and latency into the fraction of the
 * bound.  GET /v1/jobs's light shape and a batch's entries both read it. */
#define API_JOB_BEST_LATERAL(alias)                                                                         \
    " LEFT JOIN LATERAL (SELECT i.attempt, i.seq, i.latency_ns, i.profile FROM iterations i "              \
    "WHERE i.job_id = j.id AND i.correct AND i.latency_ns IS NOT NULL "                                     \
    "ORDER BY i.latency_ns, i.attempt DESC, i.seq LIMIT 1) " alias " ON true"

/* ---- group commit of new jobs (api_batch.c) -------------------------------- */

/* One job to create.  The caller fills the inputs, hands it to
 * api_job_submit() and reads the outputs once its request is resumed. */
typedef struct api_new_job {
    /* inputs (borrowed until the request is resumed) */
    char        id[37];
    const char *kind, *target, *backend;
    int         priority, max_attempts;
    int64_t     owner;
    const char *idem_key;       /* NULL without Idempotency-Key */
    const char *spec, *budget, *goal, *labels;   /* JSON texts */
    const char *created_at;     /* ISO 8601 (api_job_clock), also updated_at */
    int64_t     created_us;     /* the same instant, microseconds since 1970 */
    const char *doc;            /* the answer the client gets: api_job_doc, plus any warnings */
    api_req    *req;            /* suspended (api_req_suspend); resumed when done */
    /* outputs */
    int         status;         /* 202, or 503/500 when nothing was written */
    /* internal */
    struct api_new_job *next;
} api_new_job;

/* api_jobs.c: a new job's created_at, later than any handed out before
 * (ISO 8601 UTC, as PostgreSQL prints it in JSON; returned as microseconds
 * since 1970), and its document as GET returns it (caller frees). */
int64_t api_job_clock(char out[40]);
char *api_job_doc(const api_new_job *nj);

/* The group commit (api_batch.c): a writer and a courier thread, owned by
 * the server, which starts it before listening, stops it before MHD (stop
 * writes what was handed over, resumes every request and joins both
 * threads; requests still arriving are refused with 503) and frees it
 * after MHD.  It borrows the server's pools.  NULL with err
 * when a thread cannot be started. */
typedef struct api_batcher api_batcher;
api_batcher *api_batch_start(api_pg_pool *pg, api_qpool *q, kf_err *err);
void api_batch_stop(api_batcher *b);
/* Free it (stopping it first if need be), once nothing can hand it a job:
 * after MHD has stopped.  A job handed to a stopped batcher is refused
 * (api_job_submit), never lost. */
void api_batch_free(api_batcher *b);
/* The server's group commit. */
api_batcher *api_req_batcher(const api_req *r);

/* Hand a job to the writer, from a request already suspended: it writes
 * the job, its outbox row, its created event and (with a key) its stored
 * idempotent response (doc), in one statement together with the jobs
 * waiting with it; after the commit it sets status and resumes nj->req,
 * then puts the jobs on Redis (their outbox rows are deleted once
 * delivered; if Redis is away, the scheduler's relay enqueues them).
 * False (status 503, nothing written, nothing resumed) when the writer is
 * stopping: the caller resumes the request itself. */
bool api_job_submit(api_batcher *b, api_new_job *nj);
/* Batch counters in Prometheus text format. */
void api_batch_metrics(api_batcher *b, kf_buf *out);

/* ---- handlers -------------------------------------------------------------- */

void api_h_job_create(api_req *r);
void api_h_job_get(api_req *r);
void api_h_job_list(api_req *r);
void api_h_job_cancel(api_req *r);
void api_h_job_requeue(api_req *r);
void api_h_job_events(api_req *r);
/* The runs read side (docs/runs.md): api_runs.c, api_compare.c. */
void api_h_job_iterations(api_req *r);
void api_h_job_iteration(api_req *r);
void api_h_job_transcript(api_req *r);
void api_h_compare(api_req *r);
/* api_runs.c: the source of iteration seq of a job's attempt, rebuilt from
 * the worker's reports (a row's source, else its source_diff applied to the
 * source before it, else the source before it unchanged), into *cur, and
 * that of the iteration before it into *prev (prev may be NULL); NULL when
 * unknown.  Caller frees both.  False after answering a PostgreSQL failure. */
bool api_run_source(api_req *r, const char *job, const char *attempt, const char *seq, char **prev, char **cur);
void api_h_internal_start(api_req *r);
void api_h_internal_iteration(api_req *r);
void api_h_internal_result(api_req *r);
void api_h_internal_heartbeat(api_req *r);
void api_h_internal_whoami(api_req *r);
void api_h_internal_artifact(api_req *r);
void api_h_job_artifacts(api_req *r);
/* Batches (api_batches.c, docs/batches.md). */
void api_h_batch_create(api_req *r);
void api_h_batch_list(api_req *r);
void api_h_batch_get(api_req *r);
void api_h_batch_cancel(api_req *r);
void api_h_batch_report(api_req *r);
void api_h_batch_stream(api_req *r);
/* A report entry's verdict (docs/batches.md, "Verdicts"): "missing" (no
 * entry in this batch), "pending" (its job not finished), "failed" (not
 * succeeded, or no correct latency), "new" (no baseline latency), else by
 * the ratio new/old (set in *ratio, NaN otherwise) against threshold:
 * "improved" below 1 - threshold, "regressed" above 1 + threshold,
 * "unchanged" between. */
const char *api_report_verdict(bool has_new, const char *new_state, double new_ns, bool has_old, double old_ns,
                               double threshold, double *ratio);
void api_h_artifact_get(api_req *r);
/* The kernel library (api_library.c, docs/library.md). */
void api_h_library_list(api_req *r);
void api_h_library_get(api_req *r);
void api_h_library_kernel(api_req *r);
/* A generate job's warm start: when the library holds a shared entry for
 * the spec's op, shapes and dtype on target and backend, add
 * "warm_start": {"entry", "params", "latency_ns"} to spec (owned by the
 * caller).  True when done (with or without an entry); false after
 * answering a PostgreSQL failure. */
bool api_library_warm(api_req *r, cJSON *spec, const char *target, const char *backend);
/* The same for the n jobs of a batch in one query: each generate job
 * reqs[i] (spec, target, backend) gets its warm start.  True when done,
 * false after answering a PostgreSQL failure. */
bool api_library_warm_all(api_req *r, kf_job_request *const *reqs, int n);

/* api_internal.c, for a job report handled in another file (an artifact
 * upload): the checks every report makes, in their order (docs/protocol.md:
 * attempt, lease_token and worker of r->json, with the caller's own field
 * errors already in fe answered together as 422; the lease in Redis; the
 * job row locked in a transaction left open for the caller; the recorded
 * lease; the attempt current and the job not ended).  *attempt gets the
 * report's attempt.  False after answering (404, 422, 403, 409, 503). */
bool api_report_lease(api_req *r, kf_fields *fe, int *attempt);
/* GET /v1/whoami (api_auth.c): the calling token's name and role. */
void api_h_whoami(api_req *r);
/* The calibration records of a result (api_calib.c, docs/protocol.md):
 * check result.calibration (absent is fine), adding each bad field to fe
 * as "result.calibration[i]...."; true and *out its JSON text (caller
 * frees; NULL when absent) when it is valid. */
bool api_calib_check(const cJSON *result, kf_fields *fe, char **out);
/* Store the checked records (NULL: none) of job's attempt in the open
 * transaction; false after answering a PostgreSQL failure. */
bool api_calib_store(api_req *r, const char *job, const char *attempt, const char *records);
/* GET /v1/calibration. */
void api_h_calibration(api_req *r);
/* GET /v1/workers (api_fleet.c, docs/dashboard.md). */
void api_h_workers(api_req *r);
void api_h_healthz(api_req *r);
void api_h_readyz(api_req *r);
void api_h_metrics(api_req *r);
void api_h_openapi(api_req *r);

/* The route table (api_http.c) and per-route request counters for /metrics. */
extern const api_route api_routes[];
extern const int api_n_routes;
/* Appends the request counters in Prometheus text format. */
void api_metrics_requests(api_server *s, kf_buf *out);

/* ---- live progress (api_stream.c, api_stream_query.c) ----------------------- */

#define API_STREAM_MAX_LABELS      8
#define API_STREAM_LABEL_KEY_MAX   64
#define API_STREAM_LABEL_VALUE_MAX 256   /* KF_JOB_MAX_LABEL_VALUE */

/* What a client asked a stream for (docs/runs.md, "Live progress"). */
typedef struct api_stream_query {
    bool      global;          /* GET /v1/stream: kind= and label.KEY= are allowed */
    long long after;           /* resume after this event id; -1: no position given */
    bool      after_given;     /* after= was in the query */
    bool      header_given;    /* Last-Event-ID was sent (it wins over after=) */
    char      kind[16];        /* "" : every kind */
    int       n_labels;
    char      label_key[API_STREAM_MAX_LABELS][API_STREAM_LABEL_KEY_MAX + 1];
    char      label_value[API_STREAM_MAX_LABELS][API_STREAM_LABEL_VALUE_MAX + 1];
} api_stream_query;

void api_stream_query_init(api_stream_query *q, bool global);
/* One query argument as MHD decoded it (value NULL: "key" alone); a bad
 * or unknown one is a field error in fe. */
void api_stream_query_arg(api_stream_query *q, const char *key, const char *value, kf_fields *fe);
/* The Last-Event-ID header (NULL or "": none). */
void api_stream_query_last_id(api_stream_query *q, const char *value, kf_fields *fe);
/* Whether a job of this kind and labels (a JSON object; NULL: none)
 * passes the query's filters. */
bool api_stream_query_match(const api_stream_query *q, const char *kind, const cJSON *labels);

/* The hub: one LISTEN connection and thread per server (api_stream.c).
 * close_all before MHD_stop_daemon, free after it. */
typedef struct api_stream_hub api_stream_hub;
api_stream_hub *api_stream_hub_start(const api_server_config *cfg, kf_err *err);
void api_stream_hub_close_all(api_stream_hub *h);
void api_stream_hub_free(api_stream_hub *h);
api_stream_hub *api_req_stream_hub(const api_req *r);
void api_h_job_stream(api_req *r);
void api_h_stream(api_req *r);

/* ---- idempotency (api_idem.c) ---------------------------------------------- */

/* Before the handler: true to run it, false when the request was answered
 * (replay, 409 in flight, 422 mismatch, 400 bad key, 503). */
bool api_idem_begin(api_req *r);
/* After the handler: store the response (or free the key on 5xx). */
void api_idem_finish(api_req *r);

/* ---- small parsers (unit-tested in tests/unit/test_api.c) ------------------ */

/* A decimal number of digits only (no sign, space or exponent) that is at
 * most max, into *out; false for anything else, overflow included, so a
 * query parameter never reaches PostgreSQL out of range. */
bool api_parse_uint(const char *s, unsigned long long max, unsigned long long *out);
/* An RFC 3339 date-time ("2026-12-02T10:00:00Z", "...:00.5+01:00"): a real
 * calendar date, years 0001-9999, up to 9 fraction digits, an offset of at
 * most 15:59 (PostgreSQL's limit); PostgreSQL reads every text it accepts
 * as a timestamptz. */
bool api_parse_rfc3339(const char *s);
/* Content-Type is application/json, with charset utf-8 if any. */
bool api_content_type_json(const char *ct);
/* Idempotency-Key value: an sf-string ("...", quotes required, \" and \\
 * escapes); false when unquoted, malformed, empty or too long for cap. */
bool api_idem_parse_key(const char *h, char *out, size_t cap);
/* The opaque list cursor for (created_at µs, id), and back.  parse fills
 * micros (digits) and id (37 bytes) and refuses anything make() did not produce. */
void api_cursor_make(const char *micros, const char *id, char *out, size_t cap);
/* How a keyset page's cursor is made from the columns after the item's:
 * the opaque (created_at µs, id) of api_cursor_make, column 1 as it is, or
 * columns 1 and 2 joined by '.' (an iteration's "attempt.seq"). */
typedef enum { API_CURSOR_TIME_ID, API_CURSOR_KEY, API_CURSOR_KEY_PAIR } api_cursor_kind;
/* A keyset page of res (up to lim + 1 rows of: the item's JSON text, then
 * its cursor columns) appended to out as `[item,...],"next_cursor":CURSOR`
 * (the first lim items; the cursor of the lim-th when a row beyond it came
 * back, else null).  The caller writes the member name before and the
 * closing brace after.  api_page_next writes only `],"next_cursor":CURSOR`,
 * for a caller that writes the items itself. */
void api_page_rows(kf_buf *out, const PGresult *res, int lim, api_cursor_kind kind);
void api_page_next(kf_buf *out, const PGresult *res, int lim, api_cursor_kind kind);
bool api_cursor_parse(const char *cur, char *micros, size_t mcap, char *id);
/* A keyset page's `limit` (1..max; *lim keeps its default when absent)
 * and `cursor` (micros and id filled, empty when absent) checked; a bad
 * one adds its field error to fe. */
void api_page_query(const char *lim_s, const char *cursor, unsigned long long max, unsigned long long *lim,
                    char micros[24], char cur_id[37], kf_fields *fe);

/* ---- the dashboard (api_ui.c; ui/, embedded by tools/embed.c) ----------- */

/* One file of ui/, as tools/embed.c wrote it into $(BUILD)/gen/ui_assets.c. */
typedef struct api_asset {
    const char          *name;           /* "app.js" */
    const char          *content_type;   /* from the extension */
    const unsigned char *data;           /* size bytes (and a NUL after) */
    long                 size;
    const char          *etag;           /* "\"<sha256 hex>\"" */
} api_asset;
extern const api_asset api_ui_assets[];
extern const int api_n_ui_assets;
/* The asset of that name or NULL. */
const api_asset *api_ui_asset(const char *name);
/* GET / and /ui: 302 to /ui/.  GET /ui/: index.html.  GET /ui/{asset}: one
 * asset, with its ETag (If-None-Match: 304), Cache-Control: no-cache and
 * the dashboard's Content-Security-Policy; an unknown name is 404. */
void api_h_ui_redirect(api_req *r);
void api_h_ui_index(api_req *r);
void api_h_ui_asset(api_req *r);
/* Whether a route is one of the dashboard's above: they serve files, not
 * the API, and api/openapi.json leaves them out (tests check every other
 * route is in it). */
bool api_route_is_ui(const api_route *r);
/* api_artifacts.c: whether an If-None-Match list names etag (or is "*"),
 * comparing weakly (RFC 9110 13.1.2). */
bool api_etag_listed(const char *h, const char *etag);

/* ---- routing by capability (api_caps.c) ------------------------------------ */

/* The pairs this API process has seen offered (kf:caps never shrinks, so
 * the create routes stop asking Redis about them): one per server, owned
 * by it (api_caps_new at start, api_caps_free at stop); thread-safe. */
typedef struct api_caps api_caps;
api_caps *api_caps_new(void);
void api_caps_free(api_caps *c);
api_caps *api_req_caps(const api_req *r);

/* The warnings for the distinct (targets[i], backends[i]) pairs (n of
 * them) no worker has ever offered: an array of {code:
 * "capability-never-offered", message, capability {target, backend}}, or
 * NULL when there is none (or Redis cannot tell; logged).  Caller frees. */
cJSON *api_caps_warnings(api_req *r, const char *const *targets, const char *const *backends, int n);
/* A JSON object's text with `"name" : value` added as its last member (a
 * copy of doc when value is NULL); name is a plain identifier.  Caller
 * frees. */
char *api_doc_with_member(const char *doc, const char *name, const cJSON *value);
/* A queued job's `waiting` object {reason, capability {target, backend},
 * ever_offered} when no live worker offers its pair; NULL when one does
 * (or Redis cannot tell).  Caller frees. */
cJSON *api_caps_waiting(api_req *r, const char *target, const char *backend);
/* The same for a page of jobs: out[i] (NULL or the caller's to free) for
 * jobs i < n whose state[i] is "queued", in one Redis round trip for the
 * page's distinct pairs (at most KF_QUEUE_MAX_PAIRS; the jobs of further
 * pairs, and every job when Redis cannot tell, get NULL). */
void api_caps_waiting_page(api_req *r, int n, const char *const *state, const char *const *targets,
                           const char *const *backends, cJSON **out);
/* /readyz: checks.capabilities ("ok", "missing", "unknown") and, when
 * missing, doc's missing_capabilities [{target, backend, waiting,
 * ever_offered, reason}] and a line in doc's warnings.  Readiness is not
 * changed: the API serves whether or not workers are there. */
void api_caps_readyz(api_req *r, cJSON *doc, cJSON *checks);

/* ---- the embedded OpenAPI document (api_openapi.c) ------------------------ */
extern const char api_openapi_json[];      /* NUL-terminated */

#endif
