/*
 * kf_life — a job's life, declared once: its states and every transition
 * between them (see docs/lifecycle.md).
 *
 * KF_LIFE_MAP is the one table of transitions.  Each row is one way a job
 * moves: the states it may move from, the state it moves to (or none: the
 * row records a fact, like an iteration, and keeps the state), the event
 * type written to job_events, the Redis queue operation it pairs with, who
 * triggers it, and what else the move writes (flags below).  The
 * PostgreSQL adapter (db/kf_db.h) builds every job-row update and event
 * insert from this table and refuses a move the table does not allow, so a
 * new way for a job to move is a new row here, not new SQL in a caller.
 *
 * Ownership: the table and every string it returns are static; nothing
 * here allocates.  Failure behaviour: kf_life_check() returns KF_CONFLICT
 * (with a message naming the states the move accepts) for a move the table
 * does not allow, KF_INVALID for a move or state out of range; the other
 * functions cannot fail.
 */
#ifndef KF_LIFE_H
#define KF_LIFE_H

#include <stdbool.h>

#include "kf_error.h"

/* A job's states (jobs.state).  NONE is "not yet written": the from-state
 * of creation, and never a row's state. */
typedef enum kf_state {
    KF_STATE_NONE = 0,
    KF_STATE_QUEUED,      /* waiting in Redis (or in the outbox on its way there) */
    KF_STATE_RUNNING,     /* a worker holds a lease */
    KF_STATE_RETRYING,    /* a failed attempt waits in Redis's delayed set */
    KF_STATE_SUCCEEDED,   /* terminal */
    KF_STATE_FAILED,      /* terminal */
    KF_STATE_CANCELLED,   /* terminal */
    KF_STATE_DEAD,        /* terminal until an admin re-queues it */
    KF_STATE__COUNT
} kf_state;

/* A set of states, one bit per kf_state. */
typedef unsigned kf_states;
#define KF_ST(s)        (1u << KF_STATE_##s)
#define KF_STATES_LIVE  (KF_ST(QUEUED) | KF_ST(RUNNING) | KF_ST(RETRYING))

/* The Redis queue operation (common/kf_queue.h) a transition pairs with:
 * the script that makes, or made, the same move in Redis. */
typedef enum kf_life_qop {
    KF_QOP_NONE = 0,   /* PostgreSQL only: Redis already agrees */
    KF_QOP_ENQUEUE,    /* kf_queue_enqueue / _many (API fast path or relay) */
    KF_QOP_LEASE,      /* kf_queue_lease_job */
    KF_QOP_ACK,        /* kf_queue_ack */
    KF_QOP_FAIL,       /* kf_queue_fail: retry or dead letter */
    KF_QOP_REAP,       /* kf_queue_reap: a lease expired */
    KF_QOP_PROMOTE,    /* kf_queue_promote: a retry is due */
    KF_QOP_CANCEL,     /* kf_queue_cancel (API fast path or relay) */
} kf_life_qop;

/* What a move writes besides state, updated_at and its event. */
enum {
    KF_LIFE_KEEP          = 1 << 0,   /* a fact: the state does not change */
    KF_LIFE_FENCED        = 1 << 1,   /* a worker's report: refused if its attempt is older than the row's */
    KF_LIFE_W_ATTEMPT     = 1 << 2,   /* attempt = greatest(attempt, the move's); the event carries the move's */
    KF_LIFE_W_ERROR       = 1 << 3,   /* last_error = the move's error (NULL clears it) */
    KF_LIFE_W_RESULT      = 1 << 4,   /* result = the move's result document */
    KF_LIFE_W_LEASE       = 1 << 5,   /* worker_id, lease_token_hash, started_at (first start only) */
    KF_LIFE_W_REVIVE      = 1 << 6,   /* max_attempts = attempt + extra, cancel_requested = false, finished_at = NULL */
    KF_LIFE_W_CANCEL_ASK  = 1 << 7,   /* cancel_requested = true */
    KF_LIFE_IF_CANCEL_ASK = 1 << 8,   /* only a job whose cancel was asked for */
    KF_LIFE_IF_NO_ENQUEUE = 1 << 9,   /* not a queued job whose enqueue still waits in the outbox */
    KF_LIFE_OUT_ENQUEUE   = 1 << 10,  /* an outbox row: enqueue */
    KF_LIFE_OUT_CANCEL    = 1 << 11,  /* an outbox row: cancel */
    KF_LIFE_OUT_DROP      = 1 << 12,  /* pending outbox enqueue rows go */
    KF_LIFE_EV_ATTEMPT    = 1 << 13,  /* the event carries the move's attempt, the row keeps its own */
    KF_LIFE_W_BEST        = 1 << 14,  /* best_iteration = the fastest correct iteration recorded */
    KF_LIFE_W_PROVENANCE  = 1 << 15,  /* provenance = the move's provenance (NULL keeps it) */
    KF_LIFE_W_LIBRARY     = 1 << 16,  /* the job's best kernel is offered to the library (db/kf_library.h) */
};

/*
 * The table.  XX(name, event, from, to, queue op, flags, who).
 * `to` is ignored with KF_LIFE_KEEP.  A move to a terminal state also sets
 * finished_at.  Several rows may share an event type: they differ in who
 * makes the move and what it may move from.
 */
#define KF_LIFE_MAP(XX)                                                                                     \
    XX(CREATE, "created", KF_ST(NONE), QUEUED, KF_QOP_ENQUEUE, KF_LIFE_OUT_ENQUEUE,                         \
       "api: POST /v1/jobs (the batch writer), POST /v1/batches")                                           \
    XX(START, "started", KF_ST(QUEUED) | KF_ST(RUNNING), RUNNING, KF_QOP_LEASE,                             \
       KF_LIFE_FENCED | KF_LIFE_W_ATTEMPT | KF_LIFE_W_LEASE, "worker: POST /v1/internal/jobs/{id}/start")   \
    XX(START_REQUEUE, "requeued", KF_ST(RETRYING), QUEUED, KF_QOP_PROMOTE, 0,                               \
       "worker: start of a retry leased before the promoter recorded it")                                   \
    XX(ITERATION, "iteration", KF_STATES_LIVE, NONE, KF_QOP_NONE,                                           \
       KF_LIFE_KEEP | KF_LIFE_FENCED | KF_LIFE_W_ATTEMPT | KF_LIFE_W_BEST,                                  \
       "worker: POST /v1/internal/jobs/{id}/iterations")                                                    \
    XX(RETRY, "retrying", KF_STATES_LIVE, RETRYING, KF_QOP_FAIL,                                            \
       KF_LIFE_FENCED | KF_LIFE_W_ATTEMPT | KF_LIFE_W_ERROR,                                                \
       "worker: POST /v1/internal/jobs/{id}/result, failed with retry")                                     \
    XX(SUCCEED, "succeeded", KF_STATES_LIVE, SUCCEEDED, KF_QOP_ACK,                                         \
       KF_LIFE_FENCED | KF_LIFE_W_ATTEMPT | KF_LIFE_W_ERROR | KF_LIFE_W_RESULT | KF_LIFE_W_PROVENANCE |      \
           KF_LIFE_W_LIBRARY,                                                                               \
       "worker: POST /v1/internal/jobs/{id}/result, succeeded")                                             \
    XX(FAIL, "failed", KF_STATES_LIVE, FAILED, KF_QOP_ACK,                                                  \
       KF_LIFE_FENCED | KF_LIFE_W_ATTEMPT | KF_LIFE_W_ERROR | KF_LIFE_W_RESULT | KF_LIFE_W_PROVENANCE,      \
       "worker: POST /v1/internal/jobs/{id}/result, failed")                                                \
    XX(FINISH_CANCELLED, "cancelled", KF_STATES_LIVE, CANCELLED, KF_QOP_ACK,                                \
       KF_LIFE_FENCED | KF_LIFE_W_ATTEMPT | KF_LIFE_W_ERROR | KF_LIFE_W_RESULT | KF_LIFE_W_PROVENANCE,      \
       "worker: a final result after a cancel was asked for")                                               \
    XX(CANCEL, "cancelled", KF_ST(QUEUED) | KF_ST(RETRYING), CANCELLED, KF_QOP_CANCEL,                      \
       KF_LIFE_OUT_CANCEL | KF_LIFE_OUT_DROP, "user: POST /v1/jobs/{id}/cancel of a job not running")       \
    XX(CANCEL_ASK, "cancel_requested", KF_ST(RUNNING), NONE, KF_QOP_CANCEL,                                 \
       KF_LIFE_KEEP | KF_LIFE_W_CANCEL_ASK | KF_LIFE_OUT_CANCEL,                                            \
       "user: POST /v1/jobs/{id}/cancel of a running job")                                                  \
    XX(REQUEUE, "requeued", KF_ST(DEAD), QUEUED, KF_QOP_ENQUEUE, KF_LIFE_W_REVIVE | KF_LIFE_OUT_ENQUEUE,    \
       "admin: POST /v1/jobs/{id}/requeue")                                                                 \
    XX(REAP_RETRY, "retrying", KF_ST(QUEUED) | KF_ST(RUNNING), RETRYING, KF_QOP_REAP,                       \
       KF_LIFE_W_ATTEMPT | KF_LIFE_W_ERROR, "scheduler: reaper, a lease expired")                           \
    XX(REAP_DEAD, "dead", KF_STATES_LIVE, DEAD, KF_QOP_REAP, KF_LIFE_W_ATTEMPT | KF_LIFE_W_ERROR,           \
       "scheduler: reaper, a lease expired on the last attempt")                                            \
    XX(REAP_CANCEL, "cancelled", KF_STATES_LIVE, CANCELLED, KF_QOP_REAP,                                    \
       KF_LIFE_IF_CANCEL_ASK | KF_LIFE_EV_ATTEMPT,                                                          \
       "scheduler: reaper, the lease of a cancelled job expired")                                           \
    XX(DEATH, "dead", KF_STATES_LIVE, DEAD, KF_QOP_FAIL,                                                    \
       KF_LIFE_W_ATTEMPT | KF_LIFE_W_ERROR | KF_LIFE_IF_NO_ENQUEUE,                                         \
       "scheduler: a worker dead-lettered the job (attempts exhausted)")                                    \
    XX(PROMOTE, "requeued", KF_ST(RETRYING), QUEUED, KF_QOP_PROMOTE, 0,                                     \
       "scheduler: promoter, a retry is due")                                                               \
    XX(RECONCILE_DEAD, "dead", KF_STATES_LIVE, DEAD, KF_QOP_NONE, KF_LIFE_W_ERROR,                          \
       "scheduler: reconcile, Redis holds a dead letter PostgreSQL missed")                                 \
    XX(RECONCILE_CANCEL, "cancelled", KF_STATES_LIVE, CANCELLED, KF_QOP_NONE, 0,                            \
       "scheduler: reconcile, a cancelled job Redis no longer holds")                                       \
    XX(RECONCILE_REQUEUE, "requeued", KF_STATES_LIVE, QUEUED, KF_QOP_ENQUEUE, 0,                            \
       "scheduler: reconcile, a live job Redis lost")

typedef enum kf_life_move {
#define XX(name, event, from, to, qop, flags, who) KF_MOVE_##name,
    KF_LIFE_MAP(XX)
#undef XX
    KF_MOVE__COUNT
} kf_life_move;

/* One row of the table. */
typedef struct kf_life_def {
    const char  *name;    /* "REAP_RETRY" */
    const char  *event;   /* job_events.type */
    kf_states    from;    /* states the move accepts */
    kf_state     to;      /* KF_STATE_NONE with KF_LIFE_KEEP */
    kf_life_qop  qop;
    unsigned     flags;   /* KF_LIFE_* */
    const char  *who;     /* who triggers it, for logs and docs */
} kf_life_def;

/* The row of move m; NULL when m is out of range. */
const kf_life_def *kf_life_get(kf_life_move m);

/* "queued"; "" for KF_STATE_NONE or out of range. */
const char *kf_state_name(kf_state s);
/* KF_STATE_NONE when s is NULL or not a state name. */
kf_state kf_state_parse(const char *s);
/* succeeded, failed, cancelled, dead. */
bool kf_state_terminal(kf_state s);

/* "enqueue", "lease", ... ("none" for KF_QOP_NONE). */
const char *kf_life_qop_name(kf_life_qop q);

/* Whether move m may start from state `from`. */
bool kf_life_allows(kf_life_move m, kf_state from);

/* The state move m leaves a job in when it starts from `from` (`from`
 * itself for a fact); KF_STATE_NONE when the table does not allow it. */
kf_state kf_life_target(kf_life_move m, kf_state from);

/* KF_OK when the table allows move m from `from`; otherwise KF_CONFLICT
 * with "job is <from>; <event> (<name>) moves a job only from <states>". */
kf_code kf_life_check(kf_life_move m, kf_state from, kf_err *err);

/* The states of set s as a PostgreSQL array literal, "{queued,running}",
 * into out (n bytes; 80 always suffice). */
void kf_states_pg_array(kf_states s, char *out, unsigned n);

#endif
