/* Security: every hostile kernel of tests/security/kernels/, submitted by an
 * ordinary `user` token as a `profile` job and run by a sim worker, gets
 * nothing out of the evaluation sandbox.
 *
 * The stack holds its secrets as a deployment does: kforge-api has the admin
 * token in KFORGE_BOOTSTRAP_TOKEN, the scheduler a cloud key in its
 * environment, the workers their worker token in KFORGE_TOKEN, a shared
 * evaluation cache (KFORGE_CACHE_DIR) and a spool, and inherit a TCP and a
 * Unix listener; token files sit under var/, a secret file the workers' user
 * can read, PostgreSQL trusts its local socket.  One job per attack (and a
 * validate job per attack of SEC_REF_ATTACKS, by its reference, and an
 * optimize job per attack of SEC_WORKER_ATTACKS), all submitted at once to
 * two workers; then, per attack, everything the user
 * can read back (GET /v1/jobs/{id} and its events) and everything recorded
 * for the job (its jobs, job_results, iterations and job_events rows) is
 * checked by sec_check_text, each attack's failures reported on their own.
 * See sec_lib.h. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"
#include "tests/security/sec_lib.h"

#define SEC_DB 6

/* The NumPy reference of a kernel that copies x. */
#define COPY_REFERENCE "import numpy as np\n\n\ndef kernel(x):\n    return np.asarray(x, dtype=np.float64)\n"
#define SEC_N_ATTACKS 64

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

/* cppcheck-suppress unknownMacro */
TestSuite(sec_worker, .fini = teardown, .timeout = 600);

/* A job of `kind` (profile, validate, optimize) on `source`, with a
 * reference or NULL. */
static char *job_body(const char *kind, const char *source, const char *reference)
{
    cJSON *b = cJSON_CreateObject(), *spec, *inputs, *x, *shape;
    char *text;

    cJSON_AddStringToObject(b, "kind", kind);
    cJSON_AddStringToObject(b, "target", "trn2");
    cJSON_AddStringToObject(b, "backend", "sim");
    cJSON_AddNumberToObject(b, "max_attempts", 1);
    spec = cJSON_AddObjectToObject(b, "spec");
    cJSON_AddStringToObject(spec, "source", source);
    cJSON_AddStringToObject(spec, "entry", "kernel");
    if (reference)
        cJSON_AddStringToObject(spec, "reference", reference);
    inputs = cJSON_AddObjectToObject(spec, "inputs");
    x = cJSON_AddObjectToObject(inputs, "x");
    shape = cJSON_AddArrayToObject(x, "shape");
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(128));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(128));
    cJSON_AddStringToObject(x, "dtype", "float32");
    text = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return text;
}

static bool terminal(const char *state)
{
    return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0 ||
           strcmp(state, "dead") == 0;
}

/* What the user reads back over HTTP, then what PostgreSQL keeps. */
static void collect(const char *id, kf_buf *all)
{
    static const char *const paths[] = { "/v1/jobs/%s", "/v1/jobs/%s/events" };
    kf_http_resp r;
    char url[256];
    char *rows;

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        char path[160];
        snprintf(path, sizeof(path), paths[i], id);
        snprintf(url, sizeof(url), "%s%s", S.api_url, path);
        long st = kf_http_json("GET", url, S.user, NULL, &r);
        cr_expect_eq(st, 200, "GET %s answered %ld", path, st);
        kf_buf_addf(all, "GET %s\n", path);
        kf_buf_add(all, r.body, r.body_len);
        kf_buf_addc(all, '\n');
        kf_http_resp_release(&r);
    }
    rows = kf_stack_sql_value(
        &S,
        "SELECT concat_ws(E'\\n', "
        " (SELECT row_to_json(j)::text FROM jobs j WHERE j.id = $1::uuid), "
        " (SELECT string_agg(row_to_json(r)::text, E'\\n') FROM job_results r WHERE r.job_id = $1::uuid), "
        " (SELECT string_agg(row_to_json(i)::text, E'\\n') FROM iterations i WHERE i.job_id = $1::uuid), "
        " (SELECT string_agg(row_to_json(e)::text, E'\\n') FROM job_events e WHERE e.job_id = $1::uuid))",
        id);
    cr_expect_not_null(rows, "no rows for job %s", id);
    if (rows)
        kf_buf_adds(all, rows);
    free(rows);
}

Test(sec_worker, every_attack_through_a_worker_gets_nothing_out)
{
    sec_world w;
    char *boot = sec_marker(), *aws = sec_marker();
    char *api_env = kf_asprintf("KFORGE_BOOTSTRAP_TOKEN=%s", boot);
    char *sched_env = kf_asprintf("AWS_SECRET_ACCESS_KEY=%s", aws);
    kf_stack_opts o = { .redis_db = SEC_DB, .n_workers = 0, .n_schedulers = 1, .lease_ms = 10000,
                        .api_env = api_env, .sched_env = sched_env };
    char *ids[SEC_N_ATTACKS] = { 0 }, *labels[SEC_N_ATTACKS] = { 0 };
    const char *failing[SEC_N_ATTACKS + 1];
    int n = 0, n_failing = 0;
    long long t0, end;

    sec_world_init(&w, "sec-worker");
    kf_stack_start(&S, &o);
    char *spool = kf_asprintf("%s/spool", S.dir);
    sec_add_secret(&w, boot);
    sec_add_secret(&w, aws);
    /* listeners before the workers start: they inherit them */
    sec_listen_tcp(&w);
    sec_listen_unix(&w);
    sec_add_port(&w, atoi(strchr(S.api_listen, ':') + 1));
    sec_add_port(&w, atoi(kf_test_env("KFORGE_TEST_REDIS_PORT")));
    sec_add_port(&w, atoi(kf_test_env("KFORGE_TEST_PG_PORT")));
    char *pg_sock = kf_asprintf("%s/.s.PGSQL.%s", kf_test_env("KFORGE_TEST_PG_DIR"), kf_test_env("KFORGE_TEST_PG_PORT"));
    sec_add_unix_socket(&w, pg_sock);
    /* the workers share an evaluation cache, which a kernel must not poison */
    char *cache = kf_asprintf("%s/cache", w.dir);
    char *worker_env = kf_asprintf("KFORGE_CACHE_DIR=%s", cache);
    sec_add_decoy(&w, cache);
    kf_stack_worker(&S, 0, worker_env);
    kf_stack_worker(&S, 1, worker_env);
    /* each worker has its own token (made as it starts), in a 0600 file */
    sec_plant(&w, S.worker_token[0], S.admin, spool);
    sec_add_secret(&w, S.worker_token[1]);
    sec_add_victim(&w, S.api);
    sec_add_victim(&w, S.sched[0]);
    sec_add_victim(&w, S.workers[0]);
    sec_add_victim(&w, S.workers[1]);

    /* one profile job per attack, then one validate job per attack by reference */
    t0 = kf_test_now_ms();
    for (int i = 0; sec_attacks[i]; i++, n++) {
        cr_assert_lt(n, SEC_N_ATTACKS);
        char *src = sec_kernel_source(&w, sec_attacks[i]);
        char *body = job_body("profile", src, NULL);
        labels[n] = kf_strdup(sec_attacks[i]);
        ids[n] = kf_stack_submit(&S, body);
        free(body);
        free(src);
    }
    for (int i = 0; sec_ref_attacks[i]; i++, n++) {
        cr_assert_lt(n, SEC_N_ATTACKS);
        char *ref = sec_reference_source(&w, sec_ref_attacks[i]);
        char *body = job_body("validate", sec_benign_kernel, ref);
        labels[n] = kf_asprintf("%s (as a reference)", sec_ref_attacks[i]);
        ids[n] = kf_stack_submit(&S, body);
        free(body);
        free(ref);
    }

    /* attacks that need a job of their own kind: they end without a marker */
    int n_marked = n;
    for (int i = 0; sec_worker_attacks[i]; i++, n++) {
        cr_assert_lt(n, SEC_N_ATTACKS);
        char *src = sec_kernel_source(&w, sec_worker_attacks[i]);
        char *body = job_body("optimize", src, COPY_REFERENCE);
        labels[n] = kf_strdup(sec_worker_attacks[i]);
        ids[n] = kf_stack_submit(&S, body);
        free(body);
        free(src);
    }

    /* every job ends (a failed evaluation is a failed job, never a stuck one) */
    end = kf_test_now_ms() + 420000;
    for (int i = 0; i < n; i++) {
        while (!terminal(kf_stack_state(&S, ids[i])) && kf_test_now_ms() < end)
            kf_test_sleep_ms(100);
        cr_expect(terminal(kf_stack_state(&S, ids[i])), "attack %s: job %s is still '%s' after %lld s; see %s",
                  labels[i], ids[i], kf_stack_state(&S, ids[i]), (kf_test_now_ms() - t0) / 1000, S.dir);
    }
    cr_log_info("%d attack jobs ended in %lld ms", n, kf_test_now_ms() - t0);

    for (int i = 0; i < n; i++) {
        kf_buf all = KF_BUF_INIT;
        char where[160];
        collect(ids[i], &all);
        snprintf(where, sizeof(where), "job %s as its user reads it and as PostgreSQL keeps it", ids[i]);
        if (i < n_marked) {
            if (!sec_check_text(&w, labels[i], where, all.data, all.len, 1u << 20))
                failing[n_failing++] = labels[i];
        } else {
            /* no marker: a correct kernel that succeeded is what proves it ran */
            char *correct = kf_stack_sql_value(&S, "SELECT result->>'correct' FROM job_results WHERE job_id = $1::uuid",
                                               ids[i]);
            bool ran = strcmp(kf_stack_state(&S, ids[i]), "succeeded") == 0 && correct && strcmp(correct, "true") == 0;
            cr_expect(ran, "attack %s: job %s is '%s' (correct: %s), not a correct kernel that succeeded: %.600s",
                      labels[i], ids[i], kf_stack_state(&S, ids[i]), correct ? correct : "-", all.data);
            if (!sec_check_leaks(&w, labels[i], where, all.data, all.len, 1u << 20) || !ran)
                failing[n_failing++] = labels[i];
            free(correct);
        }
        kf_buf_release(&all);
    }
    if (!sec_check_outside(&w, "write_outside or symlink_escape"))
        failing[n_failing++] = "(files outside)";
    for (int i = 0; i < 4; i++)
        cr_expect_eq(kill(w.victims[i], 0), 0, "victim %d (api, scheduler, workers) was killed", w.victims[i]);

    if (n_failing) {
        kf_buf list = KF_BUF_INIT;
        for (int i = 0; i < n_failing; i++)
            kf_buf_addf(&list, "%s%s", i ? ", " : "", failing[i]);
        cr_log_error("%d of %d attack jobs failed their checks (the files check counts as one): %s", n_failing, n,
                     list.data);
        kf_buf_release(&list);
    }
    for (int i = 0; i < n; i++) {
        free(ids[i]);
        free(labels[i]);
    }
    free(spool);
    free(pg_sock);
    free(api_env);
    free(worker_env);
    free(sched_env);
    free(cache);
    free(boot);
    free(aws);
    sec_world_release(&w);
}
