/*
 * kw_worker — the state one kforge-worker process shares between its
 * parts (libkfworker.a): configuration, the main thread's handles, the
 * current lease as the lease thread sees it, and the SIGTERM drain.
 *
 * The daemon is split by job:
 *   kw_worker   this struct, its configuration checks, the fork lock and
 *               the drain clock;
 *   kw_lease    the lease thread: renews the current lease (and so sees
 *               cancel requests and a lost lease) and refreshes the Redis
 *               registry entry;
 *   kw_beat     the API heartbeat thread, and the two heartbeat documents;
 *   kw_ident    who this worker is: its token, its id (asked of the API),
 *               its spool folder;
 *   kw_deliver  sending reports through the spool, and waiting for a
 *               final report to be taken;
 *   kw_loop     running one leased job (start, progress, artifacts, the
 *               finish table of kf_finish.h) and the lease loop.
 * workers/main.c only parses flags and settings and wires these together.
 *
 * Ownership: main owns the kw_worker (one per process, usually static);
 * the fields under "shared" are read and written only under mu; the
 * handles q, rep and spool belong to the main thread (each background
 * thread opens its own).  token is heap memory main wipes and frees.
 * Failure behaviour: the configuration checks return KF_CONFIG with a
 * message saying what to set; nothing here is fatal by itself.
 */
#ifndef KW_WORKER_H
#define KW_WORKER_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"
#include "kf_queue.h"
#include "kf_report.h"

#define KW_MAX_TARGETS    8
#define KW_MAX_BACKENDS   8
#define KW_WAIT_MS        500        /* longest idle block on the wake-up list */
#define KW_HEALTH_RETRY_MS 10000     /* an unhealthy worker checks its device again after this */
#define KW_BACKOFF_MIN    100
#define KW_BACKOFF_MAX    5000
#define KW_STOP_GRACE_MS  1000       /* job process: SIGTERM, then SIGKILL after this */
#define KW_CANCEL_CHECK_MS 1000      /* longest gap between renewals (cancel checks) */
#define KW_RENEW_RETRY_MS 200        /* a renewal that failed (Redis away) is tried again after this */
#define KW_MAX_REPORT_BYTES ((size_t)512 * 1024)  /* result / iteration JSON; the API's body limit is larger */

typedef struct kw_worker {
    /* configuration (set by main before the threads start, then read-only) */
    char        id[129];
    char        host[128];
    const char *targets[KW_MAX_TARGETS];
    char        target_buf[KW_MAX_TARGETS][16];
    int         n_targets;
    const char *backends[KW_MAX_BACKENDS];   /* names of kf_backend_all() (kw_worker_set_caps) */
    int         n_backends;
    kf_queue_caps caps;       /* targets x backends: the pairs it offers (the healthy ones: kw_beat_caps) */
    int64_t     lease_ms, heartbeat_ms, drain_ms, retry_base_ms, retry_cap_ms;
    const char *redis_url, *api_url;
    char       *token;        /* from KFORGE_TOKEN_FILE (or KFORGE_TOKEN); never in the environment */
    bool        llm;          /* KFORGE_LLM_URL and _MODEL set and valid: planner "llm" jobs run here */
    char        llm_key_file[4096]; /* KFORGE_LLM_API_KEY_FILE ("" none): handed to job processes as a descriptor */
    long long   started_ms;

    /* main thread's handles */
    kf_queue   *q;
    kf_report  *rep;
    kf_spool   *spool;

    /* shared with the background threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    bool        quit;
    bool        has_lease;
    char        job_id[65];
    char        job_token[65];
    long long   next_renew_ms;
    bool        cancel_seen;
    bool        lease_lost;

    /* set by main's SIGTERM/SIGINT handler; read by the main thread */
    volatile sig_atomic_t term;

    /* main thread only */
    pthread_t   lease_thr, beat_thr;
    long long   drain_deadline_ms;  /* 0 until SIGTERM is noticed */
    int         seq;
} kw_worker;

/* Start the lease thread (kw_lease.h) and the API heartbeat thread
 * (kw_beat.h) once the configuration, w->q, w->rep and w->spool are set:
 * initialises mu and cv, registers the fork lock's handlers, and keeps
 * SIGTERM/SIGINT for the main thread. */
void kw_worker_start_threads(kw_worker *w);
/* Tell both threads to quit and wait for them; destroys mu and cv. */
void kw_worker_stop_threads(kw_worker *w);

/* CLOCK_MONOTONIC in milliseconds. */
long long kw_now_ms(void);

/* The next wait of an exponential backoff: twice `ms`, at most
 * KW_BACKOFF_MAX (every retry loop of the worker starts at
 * KW_BACKOFF_MIN). */
int kw_backoff_next(int ms);

/* The drain clock.  kw_drain_deadline: the deadline once SIGTERM is seen
 * at `now` (0 while not terminating), kept once set.  kw_drain_over: true
 * once SIGTERM arrived and KFORGE_DRAIN_MS has passed since the main
 * thread first noticed it (which it logs). */
long long kw_drain_deadline(bool term, long long deadline, long long now, int64_t drain_ms);
bool kw_drain_over(kw_worker *w);

/* Sleep ms in 20 ms slices; returns early once SIGTERM arrived. */
void kw_sleep(kw_worker *w, int ms);

/* KFORGE_WORKER_TARGETS: 1..KW_MAX_TARGETS comma-separated known targets
 * (kf_job_targets) into w->targets; KF_CONFIG saying what is wrong. */
kf_code kw_worker_parse_targets(kw_worker *w, const char *list, kf_err *err);

/* After kw_worker_parse_targets: w->backends from KFORGE_WORKER_BACKENDS
 * (`list`: comma-separated names of backends compiled in, kf_backend_all();
 * NULL or empty: every one compiled in) and w->caps, the (target, backend)
 * pairs the worker offers: its targets x its backends (it leases, blocks on
 * and advertises those of its healthy backends, kw_beat_caps).  KF_CONFIG saying what is wrong for a backend
 * not compiled in, a repeated or empty name, or more pairs than the queue
 * takes (KF_QUEUE_MAX_PAIRS). */
kf_code kw_worker_set_caps(kw_worker *w, const char *list, kf_err *err);

/* KFORGE_WORKER_ID: empty (learn it from the token) or 1-128 letters,
 * digits and _ . : - */
bool kw_worker_id_valid(const char *id);

/* The fork lock.  The job runs in a forked process; a fork while another
 * thread is inside the allocator or a library call leaves the child a lock
 * nobody releases.  So the background threads do their network calls (and
 * the allocations around them) holding it, and every fork takes it first
 * (kw_fork_install registers the pthread_atfork handlers): a fork waits for
 * at most one Redis call or one API heartbeat (2 s timeout). */
void kw_fork_lock(void);
void kw_fork_unlock(void);
void kw_fork_install(void);

/* pthread_cond_timedwait on w->cv for ms from now (CLOCK_REALTIME, the
 * condition's clock); w->mu held. Returns its result. */
int kw_cond_wait_ms(kw_worker *w, long long ms);

#endif
