/* The kforge-worker daemon's decisions, without a network (kw_*.h): the
 * renewal schedule, backoff and the final report's wait, the drain clock,
 * what happens after a run, the configuration checks and the two
 * heartbeat documents. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "workers/kf_backend.h"
#include "workers/kw_beat.h"
#include "workers/kw_deliver.h"
#include "workers/kw_lease.h"
#include "workers/kw_loop.h"
#include "workers/kw_worker.h"

Test(lease, renewed_every_third_of_the_lease_but_at_least_each_second)
{
    cr_assert_eq(kw_lease_renew_every(30000), 1000, "a long lease still sees a cancel within a second");
    cr_assert_eq(kw_lease_renew_every(3000), 1000);
    cr_assert_eq(kw_lease_renew_every(2400), 800);
    cr_assert_eq(kw_lease_renew_every(600), 200);
}

Test(lease, what_a_renewal_answer_means)
{
    kw_renew_step s = kw_lease_after_renew(KF_OK, 2400);
    cr_assert(!s.lost && !s.failed);
    cr_assert_eq(s.next_in_ms, 800);

    s = kw_lease_after_renew(KF_STALE, 2400);
    cr_assert(s.lost, "STALE: a newer attempt owns the job");
    cr_assert_not(s.failed);

    s = kw_lease_after_renew(KF_REDIS, 30000);
    cr_assert(!s.lost && s.failed, "Redis away is not a lost lease");
    cr_assert_eq(s.next_in_ms, KW_RENEW_RETRY_MS, "retried soon, not after a third of the lease");
}

Test(lease, set_and_drop_reset_the_flags_and_schedule_the_first_renewal)
{
    static kw_worker w;
    kf_queue_lease l = { .id = (char *)"j1", .token = (char *)"t1" };
    bool cancelled, lost;
    long long before = kw_now_ms();

    w.lease_ms = 3000;
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    w.cancel_seen = w.lease_lost = true;
    kw_lease_set(&w, &l);
    cr_assert(w.has_lease);
    cr_assert_str_eq(w.job_id, "j1");
    cr_assert_str_eq(w.job_token, "t1");
    cr_assert(w.next_renew_ms >= before + 1000 && w.next_renew_ms <= kw_now_ms() + 1000);
    cr_assert_not(kw_lease_should_stop(&w, &cancelled, &lost), "a new lease starts clean");
    w.cancel_seen = true;
    cr_assert(kw_lease_should_stop(&w, &cancelled, &lost));
    cr_assert(cancelled && !lost);
    cr_assert_not(kw_lease_lost(&w));
    w.lease_lost = true;
    cr_assert(kw_lease_lost(&w));
    kw_lease_set(&w, NULL);
    cr_assert_not(w.has_lease);
    cr_assert_str_eq(w.job_id, "");
    cr_assert_not(kw_lease_should_stop(&w, NULL, NULL));
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
}

Test(deliver, backoff_doubles_up_to_the_cap)
{
    int ms = KW_BACKOFF_MIN, steps = 0;

    cr_assert_eq(kw_backoff_next(100), 200);
    cr_assert_eq(kw_backoff_next(2000), 4000);
    cr_assert_eq(kw_backoff_next(4000), KW_BACKOFF_MAX);
    cr_assert_eq(kw_backoff_next(KW_BACKOFF_MAX), KW_BACKOFF_MAX);
    while (ms < KW_BACKOFF_MAX && steps < 100) {
        ms = kw_backoff_next(ms);
        steps++;
    }
    cr_assert_eq(steps, 6, "100 ms to 5 s in six doublings, got %d", steps);
}

Test(deliver, a_final_report_is_waited_for_until_the_lease_or_the_drain_ends)
{
    cr_assert_eq(kw_deliver_wait_on(false, false), KW_WAIT_RETRY);
    cr_assert_eq(kw_deliver_wait_on(true, false), KW_WAIT_LEAVE, "lease lost: a newer attempt owns the job");
    cr_assert_eq(kw_deliver_wait_on(false, true), KW_WAIT_LEAVE, "drain over: the spool sends it later");
    cr_assert_eq(kw_deliver_wait_on(true, true), KW_WAIT_LEAVE);
}

Test(drain, the_clock_starts_when_sigterm_is_first_seen)
{
    static kw_worker w;

    cr_assert_eq(kw_drain_deadline(false, 0, 1000, 500), 0);
    cr_assert_eq(kw_drain_deadline(true, 0, 1000, 500), 1500);
    cr_assert_eq(kw_drain_deadline(true, 1500, 9000, 500), 1500, "a set deadline never moves");

    w.drain_ms = 60000;
    cr_assert_not(kw_drain_over(&w), "no SIGTERM: never over");
    cr_assert_eq(w.drain_deadline_ms, 0);
    w.term = 1;
    cr_assert_not(kw_drain_over(&w), "a minute of drain left");
    cr_assert(w.drain_deadline_ms > kw_now_ms() + 50000);
    w.drain_deadline_ms = kw_now_ms() - 1;
    cr_assert(kw_drain_over(&w));

    memset(&w, 0, sizeof(w));
    w.term = 1;
    w.drain_ms = 0;
    cr_assert(kw_drain_over(&w), "KFORGE_DRAIN_MS=0: over at once");
}

Test(drain, sleep_returns_early_on_sigterm)
{
    static kw_worker w;
    long long t0 = kw_now_ms();

    kw_sleep(&w, 60);
    cr_assert(kw_now_ms() - t0 >= 60);
    w.term = 1;
    t0 = kw_now_ms();
    kw_sleep(&w, 5000);
    cr_assert(kw_now_ms() - t0 < 100);
}

Test(loop, what_happens_after_a_run)
{
    /* a lost lease wins over everything: nothing of ours to report */
    cr_assert_eq(kw_loop_after_run(true, true, true, true, KF_RUN_OK), KW_AFTER_ABANDON);
    cr_assert_eq(kw_loop_after_run(true, false, false, false, KF_RUN_OK), KW_AFTER_ABANDON);
    /* stopped: cancel before drain */
    cr_assert_eq(kw_loop_after_run(false, true, true, true, KF_RUN_CRASHED), KW_AFTER_CANCELLED);
    cr_assert_eq(kw_loop_after_run(false, true, false, true, KF_RUN_CRASHED), KW_AFTER_HAND_BACK);
    /* a cancel seen after the job ended on its own does not turn a result into a cancel */
    cr_assert_eq(kw_loop_after_run(false, false, true, false, KF_RUN_OK), KW_AFTER_RESULT);
    cr_assert_eq(kw_loop_after_run(false, false, false, true, KF_RUN_OK), KW_AFTER_RESULT,
                 "SIGTERM but the job finished in time: its result counts");
    cr_assert_eq(kw_loop_after_run(false, false, false, false, KF_RUN_FAILED), KW_AFTER_FAILURE);
    cr_assert_eq(kw_loop_after_run(false, false, false, false, KF_RUN_CRASHED), KW_AFTER_FAILURE);
    /* stopped with neither cancel nor SIGTERM (the lease was lost and found
     * again cannot happen; the runner's own stop): the outcome decides */
    cr_assert_eq(kw_loop_after_run(false, true, false, false, KF_RUN_FAILED), KW_AFTER_FAILURE);
}

Test(config, targets)
{
    static kw_worker w;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(kw_worker_parse_targets(&w, "trn1,inf2", &e), KF_OK, "%s", e.msg);
    cr_assert_eq(w.n_targets, 2);
    cr_assert_str_eq(w.targets[0], "trn1");
    cr_assert_str_eq(w.targets[1], "inf2");

    memset(&w, 0, sizeof(w));
    cr_assert_eq(kw_worker_parse_targets(&w, "trn1,gpu", &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "unknown target 'gpu'") != NULL, "%s", e.msg);
    memset(&w, 0, sizeof(w));
    cr_assert_eq(kw_worker_parse_targets(&w, "", &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "empty") != NULL, "%s", e.msg);
    memset(&w, 0, sizeof(w));
    cr_assert_eq(kw_worker_parse_targets(&w, "trn1,,inf2", &e), KF_CONFIG);
    memset(&w, 0, sizeof(w));
    cr_assert_eq(kw_worker_parse_targets(&w, "trn1,trn1,trn1,trn1,trn1,trn1,trn1,trn1,trn1", &e), KF_CONFIG,
                 "more than %d targets", KW_MAX_TARGETS);
}

Test(config, backends)
{
    static kw_worker w;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(kw_worker_parse_targets(&w, "trn1,trn2", &e), KF_OK);
    cr_assert_eq(kw_worker_set_caps(&w, "sim", &e), KF_OK, "%s", e.msg);
    cr_assert_eq(w.n_backends, 1);
    cr_assert_str_eq(w.backends[0], "sim");
    cr_assert_eq(w.caps.n_backends, 1, "it leases (trn1, sim) and (trn2, sim) only");
    cr_assert_eq(w.caps.n_targets, 2);
    cr_assert_eq(kw_worker_set_caps(&w, "diag,sim", &e), KF_OK, "%s", e.msg);
    cr_assert_eq(w.n_backends, 2);
    cr_assert_str_eq(w.backends[0], "diag");
    /* empty: every backend compiled in that this machine can run (here no
     * neuron runner is on PATH, so not neuron) */
    cr_assert_eq(kw_worker_set_caps(&w, "", &e), KF_OK, "%s", e.msg);
    {
        int n = 0;
        for (int i = 0; kf_backend_all()[i]; i++)
            if (kf_backend_available(kf_backend_all()[i]))
                cr_assert_str_eq(w.backends[n++], kf_backend_all()[i]->name);
        cr_assert_eq(w.n_backends, n);
        for (int i = 0; i < w.n_backends; i++)
            cr_assert_str_neq(w.backends[i], "neuron");
    }
    /* named but not runnable here: refused with what to set */
    cr_assert_eq(kw_worker_set_caps(&w, "sim,neuron", &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "'neuron' cannot run on this machine") && strstr(e.msg, "KFORGE_NEURON_RUNNER"), "%s",
              e.msg);
    cr_assert_eq(kw_worker_set_caps(&w, "sim,gpu", &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "'gpu' is not a backend of this worker (compiled in: "), "%s", e.msg);
    cr_assert_eq(kw_worker_set_caps(&w, "sim,sim", &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "named twice"), "%s", e.msg);
    cr_assert_eq(kw_worker_set_caps(&w, "sim,", &e), KF_CONFIG);
    cr_assert_eq(kw_worker_set_caps(&w, ",sim", &e), KF_CONFIG);
}

Test(config, worker_id)
{
    char longid[200];

    cr_assert(kw_worker_id_valid(""), "empty: learnt from the token");
    cr_assert(kw_worker_id_valid("w-1.a_b:c"));
    cr_assert_not(kw_worker_id_valid("w 1"));
    cr_assert_not(kw_worker_id_valid("w/1"));
    cr_assert_not(kw_worker_id_valid("w\"1"));
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    cr_assert_not(kw_worker_id_valid(longid));
    longid[129] = '\0';
    cr_assert_not(kw_worker_id_valid(longid), "129 characters do not fit");
    longid[128] = '\0';
    cr_assert(kw_worker_id_valid(longid), "128 do");
}

static void check_lists(const cJSON *doc)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, "targets");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(doc, "backends");
    cr_assert(cJSON_IsArray(t) && cJSON_GetArraySize(t) == 2);
    cr_assert_str_eq(cJSON_GetArrayItem(t, 1)->valuestring, "trn2");
    cr_assert(cJSON_IsArray(b) && cJSON_GetArraySize(b) >= 1);
    for (int i = 0, n = 0; kf_backend_all()[i]; i++) {
        if (!kf_backend_available(kf_backend_all()[i]))
            continue;
        cr_assert_lt(n, cJSON_GetArraySize(b));
        cr_assert_str_eq(cJSON_GetArrayItem(b, n++)->valuestring, kf_backend_all()[i]->name);
    }
}

Test(beat, the_registry_entry_and_the_api_heartbeat)
{
    static kw_worker w;
    kf_err e = KF_ERR_INIT;
    char *txt;
    cJSON *doc;

    snprintf(w.id, sizeof(w.id), "w-1");
    snprintf(w.host, sizeof(w.host), "h");
    w.started_ms = 1700000000123LL;
    cr_assert_eq(kw_worker_parse_targets(&w, "trn1,trn2", &e), KF_OK);
    cr_assert_eq(kw_worker_set_caps(&w, NULL, &e), KF_OK, "%s", e.msg);
    /* It leases, waits on and advertises its targets x the backends
     * compiled in that it can run. */
    cr_assert_eq(w.caps.n_targets, 2);
    cr_assert_eq(w.caps.targets, (const char *const *)w.targets);
    cr_assert_eq(w.caps.backends, (const char *const *)w.backends);
    for (int i = 0, n = 0; kf_backend_all()[i]; i++) {
        if (!kf_backend_available(kf_backend_all()[i]))
            continue;
        cr_assert_lt(n, w.caps.n_backends);
        cr_assert_str_eq(w.backends[n++], kf_backend_all()[i]->name);
    }

    txt = kw_beat_registry_json(&w, "job-9");
    doc = cJSON_Parse(txt);
    cr_assert_not_null(doc, "%s", txt);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "id")->valuestring, "w-1");
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "job")->valuestring, "job-9");
    cr_assert_eq(cJSON_GetObjectItem(doc, "pid")->valuedouble, (double)getpid());
    cr_assert_eq(cJSON_GetObjectItem(doc, "started_ms")->valuedouble, 1700000000123.0);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "sandbox")));
    check_lists(doc);
    cJSON_Delete(doc);
    free(txt);

    txt = kw_beat_registry_json(&w, "");
    doc = cJSON_Parse(txt);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(doc, "job")), "%s", txt);
    cJSON_Delete(doc);
    free(txt);

    txt = kw_beat_api_body(&w);
    doc = cJSON_Parse(txt);
    cr_assert_not_null(doc, "%s", txt);
    check_lists(doc);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "host")->valuestring, "h");
    cr_assert_null(cJSON_GetObjectItem(doc, "id"), "the API knows the id from the path");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(doc, "unhealthy")), "a healthy worker: %s", txt);
    cr_assert_eq(cJSON_GetArraySize(doc), 6, "%s", txt);
    cJSON_Delete(doc);
    free(txt);

    /* a backend that failed its health check (sim here: neuron needs its
     * runner on PATH to be offered): both documents say why, per backend,
     * and only the healthy backends' pairs are leased */
    kw_beat_set_health("sim", "runner health: exit 75: NRT_TIMEOUT");
    for (int k = 0; k < 2; k++) {
        txt = k ? kw_beat_api_body(&w) : kw_beat_registry_json(&w, "");
        doc = cJSON_Parse(txt);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "unhealthy")),
                         "sim: runner health: exit 75: NRT_TIMEOUT", "%s", txt);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "unhealthy_backends"),
                                                                  "sim")),
                         "runner health: exit 75: NRT_TIMEOUT", "%s", txt);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "unhealthy_backends")), 1, "%s", txt);
        cJSON_Delete(doc);
        free(txt);
    }
    {
        const char *buf[KW_MAX_BACKENDS];
        kf_queue_caps caps;
        int healthy = kw_beat_caps(&w, buf, &caps);
        cr_assert_eq(healthy, w.n_backends - 1, "every backend but sim");
        cr_assert_eq(caps.n_backends, healthy);
        cr_assert_eq(caps.n_targets, w.n_targets);
        for (int i = 0; i < caps.n_backends; i++)
            cr_assert_str_neq(caps.backends[i], "sim");
        cr_assert_not(kw_beat_backend_healthy("sim"));
        cr_assert(kw_beat_backend_healthy("diag"));
    }
    kw_beat_set_health("sim", "");
    txt = kw_beat_registry_json(&w, "");
    doc = cJSON_Parse(txt);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(doc, "unhealthy")), "healthy again: %s", txt);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "unhealthy_backends")), 0, "%s", txt);
    cJSON_Delete(doc);
    free(txt);
    {
        const char *buf[KW_MAX_BACKENDS];
        kf_queue_caps caps;
        cr_assert_eq(kw_beat_caps(&w, buf, &caps), w.n_backends, "all leased again");
    }
}

Test(loop, a_running_job_stops_on_cancel_a_lost_lease_or_the_end_of_the_drain)
{
    static kw_worker w;

    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    w.drain_ms = 60000;
    cr_assert_not(kw_loop_should_stop(&w));
    w.cancel_seen = true;
    cr_assert(kw_loop_should_stop(&w), "cancel");
    w.cancel_seen = false;
    w.lease_lost = true;
    cr_assert(kw_loop_should_stop(&w), "lease lost");
    w.lease_lost = false;
    w.term = 1;
    cr_assert_not(kw_loop_should_stop(&w), "SIGTERM: the job may run out its drain time");
    w.drain_deadline_ms = kw_now_ms() - 1;
    cr_assert(kw_loop_should_stop(&w), "drain over");
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
}
