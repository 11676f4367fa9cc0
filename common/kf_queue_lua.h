/*
 * kf_queue_lua — the Lua scripts behind every queue transition
 * (docs/protocol.md, "Transitions").  Private to kf_queue.c.
 *
 * Each script is one atomic state change; time always comes from Redis
 * TIME, never from the caller's clock.  Scripts reply with an array whose
 * first element is a status word ("OK", "STALE", ...) so the C side never
 * has to parse error strings.  The strings are static and never freed.
 */
#ifndef KF_QUEUE_LUA_H
#define KF_QUEUE_LUA_H

/*      id            what it does */
#define KF_QUEUE_SCRIPTS(XX)                                              \
    XX(ENQUEUE)       /* create the job hash if absent, add to waiting */  \
    XX(LEASE)         /* pop best waiting id, attempt+1, new token */      \
    XX(RENEW)         /* push the lease expiry; report the cancel flag */  \
    XX(ACK)           /* drop a finished job */                            \
    XX(FAIL)          /* retry with backoff, or dead-letter */             \
    XX(RELEASE)       /* hand a lease back without using an attempt */     \
    XX(REAP)          /* expired leases count as failed attempts */        \
    XX(PROMOTE)       /* due retries back to waiting */                    \
    XX(CANCEL)        /* remove waiting/delayed; flag + publish running */ \
    XX(FORGET)        /* drop a job from every structure */                \
    XX(TRIM_DEAD)     /* retention of the dead-letter set */               \
    XX(HEARTBEAT)     /* worker registry entry with TTL */                 \
    XX(WORKERS_CLEAN) /* registry entries whose heartbeat expired */       \
    XX(LEADER)        /* take or extend the scheduler lock */              \
    XX(RESIGN)        /* give the scheduler lock up */                     \
    XX(EPOCH)         /* Redis-loss marker */                              \
    XX(WORKER_GONE)   /* a worker leaves the registry and its capabilities */ \
    XX(CAPS)          /* live workers / ever offered / waiting per pair */ \
    XX(CAPS_MISSING)  /* pairs with waiting jobs and no live worker */     \
    XX(MIGRATE_WAIT)  /* kf:wait:{target} → kf:wait:{backend}:{target} */ \
    XX(PAIRS)         /* every pair queued or offered, with its state */

typedef enum kf_queue_script {
#define XX(id) KF_QS_##id,
    KF_QUEUE_SCRIPTS(XX)
#undef XX
    KF_QS__COUNT
} kf_queue_script;

/* Source text of script `s` (a static string). */
const char *kf_queue_lua_source(kf_queue_script s);
const char *kf_queue_lua_name(kf_queue_script s);

#endif
