/*
 * kforge-scheduler — the queue's caretaker: flags, configuration, signals
 * and the tick loop.  What it does each tick is scheduler/ks_sched.h.
 *
 * SIGTERM/SIGINT: resign the lock and exit 0.  Exit 2: bad arguments or
 * configuration, or Redis's URL is unusable.
 */
#include "kf_artifact.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_log.h"
#include "kf_queue.h"
#include "ks_sched.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t s_term;

static void s_on_term(int sig)
{
    (void)sig;
    s_term = 1;
}

static long long s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_sleep_ms(long long ms)
{
    long long end = s_now_ms() + ms;
    while (!s_term && s_now_ms() < end) {
        long long left = end - s_now_ms();
        struct timespec ts = { 0, (long)(left < 50 ? left : 50) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge-scheduler [--help]\n"
            "\n"
            "Keeps the Redis queue and PostgreSQL in step.  Run one or more; the one holding\n"
            "the Redis lock kf:leader acts and the others stand by, taking over within\n"
            "KFORGE_LEADER_TTL_MS.  Every KFORGE_SCHED_TICK_MS the leader relays unsent\n"
            "outbox rows to Redis, reaps expired leases (a failed attempt: retrying or\n"
            "dead), promotes due retries, and records each move in PostgreSQL.  It\n"
            "re-queues jobs Redis lost (on taking the lead, when the kf:epoch marker is gone\n"
            "or Redis restarted and again 3 s later, and every 60 s), trims dead letters\n"
            "older than KFORGE_IDEMPOTENCY_TTL_S and expired idempotency keys, drops\n"
            "registry entries of vanished workers, and\n"
            "(with KFORGE_ARTIFACT_RETENTION_DAYS > 0, every 10 min) deletes the best-so-far\n"
            "artifacts of jobs finished longer ago, keeping each job's final set.\n"
            "SIGTERM/SIGINT: give the lock up and exit 0.\n");
    kf_config_print_help(out, KF_USE_SCHED);
}

int main(int argc, char **argv)
{
    ks_config cfg;
    ks_sched *s;
    kf_queue *q;
    kf_err err = KF_ERR_INIT;
    struct sigaction sa;
    int64_t tick_ms;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            s_usage(stdout);
            return 0;
        }
        fprintf(stderr, "kforge-scheduler: unknown argument '%s'\n\n", argv[i]);
        s_usage(stderr);
        return 2;
    }
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge-scheduler: %s\n", err.msg);
        return 2;
    }
    if (kf_log_init("scheduler", kf_config_str(KF_CFG_LOG_LEVEL)) != 0) {
        fprintf(stderr, "kforge-scheduler: KFORGE_LOG_LEVEL must be debug, info, warn or error\n");
        return 2;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.dsn = kf_config_str(KF_CFG_PG_DSN);
    cfg.ttl_ms = kf_config_int(KF_CFG_LEADER_TTL_MS);
    cfg.retry_base_ms = kf_config_int(KF_CFG_RETRY_BASE_MS);
    cfg.retry_cap_ms = kf_config_int(KF_CFG_RETRY_CAP_MS);
    cfg.idem_ttl_s = kf_config_int(KF_CFG_IDEMPOTENCY_TTL_S);
    cfg.artifact_days = (int)kf_config_int(KF_CFG_ARTIFACT_RETENTION_DAYS);
    tick_ms = kf_config_int(KF_CFG_SCHED_TICK_MS);
    if (tick_ms * 2 > cfg.ttl_ms) {
        fprintf(stderr, "kforge-scheduler: KFORGE_SCHED_TICK_MS (%lld) must be at most half of "
                        "KFORGE_LEADER_TTL_MS (%lld), or the leader loses its lock between ticks\n",
                (long long)tick_ms, (long long)cfg.ttl_ms);
        return 2;
    }
    q = kf_queue_connect(kf_config_str(KF_CFG_REDIS_URL), &err);
    if (!q) {
        fprintf(stderr, "kforge-scheduler: %s\n", err.msg);
        return 2;
    }
    if (kf_artifact_store_open(kf_config_str(KF_CFG_ARTIFACT_STORE), &cfg.artifacts, &err) != KF_OK) {
        fprintf(stderr, "kforge-scheduler: %s\n", err.msg);
        kf_queue_free(q);
        return 2;
    }
    s = ks_new(&cfg, q);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = s_on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    kf_log_info("scheduler started tick_ms=%lld leader_ttl_ms=%lld", (long long)tick_ms, (long long)cfg.ttl_ms);
    while (!s_term) {
        long long t0 = s_now_ms(), spent;

        ks_tick(s, t0);
        spent = s_now_ms() - t0;
        if (spent < tick_ms)
            s_sleep_ms(tick_ms - spent);
    }
    ks_free(s);
    kf_queue_free(q);
    kf_artifact_store_free(cfg.artifacts);
    kf_log_info("scheduler stopped");
    return 0;
}
