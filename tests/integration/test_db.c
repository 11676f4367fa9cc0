/* db/kf_db against the harness's real PostgreSQL: each move writes the
 * job row, its event and its outbox row together or not at all, and a
 * move the transition table does not allow (or a stale attempt, or a
 * failed guard) writes nothing. */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "kf_alloc.h"
#include "kf_artifact.h"
#include "kf_db.h"
#include "kf_life.h"
#include "tests/lib/kf_test.h"

static PGconn *pg;
static kf_db_prepared prep;   /* the moves prepared on pg, as the API and the scheduler keep it */

static void setup(void)
{
    kf_err e = KF_ERR_INIT;
    char *dsn = kf_test_fresh_db();
    char *dir = kf_asprintf("%s/migrations", kf_test_env("KFORGE_TEST_ROOT"));
    int applied = 0;

    prep = 0;
    pg = PQconnectdb(dsn);
    cr_assert(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    cr_assert_eq(api_migrate(pg, dir, NULL, &applied, &e), KF_OK, "%s", e.msg);
    free(dir);
    free(dsn);
}

static void teardown(void)
{
    PQfinish(pg);
}

/* cppcheck-suppress unknownMacro */
TestSuite(kf_db, .init = setup, .fini = teardown, .timeout = 60);

/* One value of a one-row query (the test fails otherwise); caller frees. */
static char *q1(const char *sql, const char *id)
{
    const char *p[1] = { id };
    PGresult *r = PQexecParams(pg, sql, id ? 1 : 0, NULL, id ? p : NULL, NULL, NULL, 0);
    char *v;

    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(r));
    cr_assert_eq(PQntuples(r), 1, "%s", sql);
    v = kf_strdup(PQgetisnull(r, 0, 0) ? "<null>" : PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static void q1_eq(const char *sql, const char *id, const char *want)
{
    char *v = q1(sql, id);
    cr_assert_str_eq(v, want, "%s", sql);
    free(v);
}

static void exec_ok(const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

/* A job in state st at attempt att, without events or outbox rows. */
static void job(const char *id, const char *st, int att, bool cancel_requested)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "INSERT INTO jobs (id, kind, state, target, spec, attempt, max_attempts, owner_token_id, "
             "cancel_requested) VALUES ('%s', 'diag', '%s', 'trn2', '{}', %d, 3, 1, %s)",
             id, st, att, cancel_requested ? "true" : "false");
    exec_ok(sql);
}

#define EVENTS "SELECT count(*)::text FROM job_events WHERE job_id = $1::uuid"
#define STATE  "SELECT state FROM jobs WHERE id = $1::uuid"
#define OUTBOX "SELECT coalesce(string_agg(action, ',' ORDER BY id), '') FROM outbox WHERE job_id = $1::uuid"

Test(kf_db, a_move_writes_the_row_and_its_event)
{
    const char *id = "10000000-0000-0000-0000-000000000001";
    kf_db_move m = { .move = KF_MOVE_PROMOTE, .job_id = id, .detail = "{\"by\":\"promoter\"}" };
    kf_db_moved got;
    kf_err e = KF_ERR_INIT;

    job(id, "retrying", 2, false);
    cr_assert_eq(kf_db_apply(pg, &prep, &m, &got, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(got.from, KF_STATE_RETRYING);
    cr_assert_eq(got.to, KF_STATE_QUEUED);
    cr_assert_eq(got.attempt, 2);
    cr_assert_eq(got.outbox_id, 0);
    q1_eq(STATE, id, "queued");
    q1_eq("SELECT concat_ws('|', attempt, type, from_state, to_state, detail->>'by') FROM job_events "
          "WHERE job_id = $1::uuid",
          id, "2|requeued|retrying|queued|promoter");
    q1_eq("SELECT (finished_at IS NULL)::text FROM jobs WHERE id = $1::uuid", id, "true");
}

Test(kf_db, a_move_the_table_does_not_allow_writes_nothing)
{
    const char *id = "10000000-0000-0000-0000-000000000002";
    kf_db_move m = { .move = KF_MOVE_PROMOTE, .job_id = id };
    kf_db_moved got;
    kf_err e = KF_ERR_INIT;
    char *before;

    job(id, "succeeded", 1, false);
    before = q1("SELECT updated_at::text FROM jobs WHERE id = $1::uuid", id);
    cr_assert_eq(kf_db_apply(pg, &prep, &m, &got, &e), KF_CONFLICT);
    cr_assert(strstr(e.msg, "is succeeded") && strstr(e.msg, "{retrying}"), "%s", e.msg);
    cr_assert_eq(got.from, KF_STATE_SUCCEEDED, "the refusal says what the job is");
    cr_assert_eq(got.to, KF_STATE_SUCCEEDED);
    q1_eq(STATE, id, "succeeded");
    q1_eq(EVENTS, id, "0");
    q1_eq("SELECT updated_at::text FROM jobs WHERE id = $1::uuid", id, before);
    free(before);

    /* Narrowing the table's from-states is allowed; widening them is a bug. */
    m.move = KF_MOVE_REQUEUE;
    m.extra_attempts = 1;
    m.from = KF_ST(SUCCEEDED);
    cr_assert_eq(kf_db_apply(pg, &prep, &m, &got, &e), KF_INVALID);
    q1_eq(STATE, id, "succeeded");
    q1_eq(EVENTS, id, "0");
    q1_eq(OUTBOX, id, "");

    m.move = KF_MOVE_PROMOTE;
    m.from = 0;
    m.job_id = "10000000-0000-0000-0000-0000000000ff";
    cr_assert_eq(kf_db_apply(pg, &prep, &m, &got, &e), KF_NOT_FOUND, "%s", e.msg);
    cr_assert_eq(got.from, KF_STATE_NONE);
}

Test(kf_db, a_stale_attempt_is_fenced_off)
{
    const char *id = "10000000-0000-0000-0000-000000000003";
    kf_db_move m = { .move = KF_MOVE_START, .job_id = id, .attempt = 1, .worker_id = "w1",
                     .lease_hash = "\\x00ff", .detail = "{\"worker\":\"w1\"}" };
    kf_err e = KF_ERR_INIT;

    job(id, "running", 2, false);
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_STALE);
    cr_assert(strstr(e.msg, "attempt 2") && strstr(e.msg, "attempt 1"), "%s", e.msg);
    q1_eq(EVENTS, id, "0");
    q1_eq("SELECT coalesce(worker_id, '') FROM jobs WHERE id = $1::uuid", id, "");

    m.attempt = 3;
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    q1_eq("SELECT concat_ws('|', state, attempt, worker_id, encode(lease_token_hash, 'hex'), started_at IS NOT NULL) "
          "FROM jobs WHERE id = $1::uuid",
          id, "running|3|w1|00ff|t");
    q1_eq("SELECT concat_ws('|', attempt, type, from_state, to_state, detail->>'worker') FROM job_events "
          "WHERE job_id = $1::uuid",
          id, "3|started|running|running|w1");
}

Test(kf_db, row_event_and_outbox_are_one_statement)
{
    const char *id = "10000000-0000-0000-0000-000000000004";
    kf_db_move m = { .move = KF_MOVE_RETRY, .job_id = id, .attempt = 1, .error = "boom", .detail = "not json" };
    kf_err e = KF_ERR_INIT;

    /* The event's detail is refused by PostgreSQL: the row must not move. */
    job(id, "running", 1, false);
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_DB, "%s", e.msg);
    cr_assert(strstr(e.msg, "RETRY") && strstr(e.msg, "json"), "%s", e.msg);
    q1_eq("SELECT concat_ws('|', state, coalesce(last_error, '-')) FROM jobs WHERE id = $1::uuid", id, "running|-");
    q1_eq(EVENTS, id, "0");

    /* Inside the caller's transaction, a rollback takes all of it back. */
    m.move = KF_MOVE_CANCEL_ASK;
    m.detail = "{\"reason\":null}";
    exec_ok("BEGIN");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    q1_eq(OUTBOX, id, "cancel");
    exec_ok("ROLLBACK");
    q1_eq(OUTBOX, id, "");
    q1_eq(EVENTS, id, "0");
    q1_eq("SELECT cancel_requested::text FROM jobs WHERE id = $1::uuid", id, "false");

    /* And committed, the row, the event and the outbox row are all there. */
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    q1_eq("SELECT concat_ws('|', state, cancel_requested) FROM jobs WHERE id = $1::uuid", id, "running|t");
    q1_eq("SELECT concat_ws('|', type, from_state, to_state) FROM job_events WHERE job_id = $1::uuid", id,
          "cancel_requested|running|running");
    q1_eq(OUTBOX, id, "cancel");
}

Test(kf_db, cancel_drops_a_pending_enqueue_and_finishes_the_job)
{
    const char *id = "10000000-0000-0000-0000-000000000005";
    kf_db_move m = { .move = KF_MOVE_CANCEL, .job_id = id, .detail = "{\"by_token\":1}" };
    kf_db_moved got;
    kf_err e = KF_ERR_INIT;
    char *oid;

    job(id, "queued", 0, false);
    exec_ok("INSERT INTO outbox (job_id) VALUES ('10000000-0000-0000-0000-000000000005')");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, &got, &e), KF_OK, "%s", e.msg);
    q1_eq(OUTBOX, id, "cancel");
    oid = q1("SELECT id::text FROM outbox WHERE job_id = $1::uuid", id);
    cr_assert_eq(got.outbox_id, atoll(oid));
    free(oid);
    q1_eq("SELECT concat_ws('|', state, finished_at IS NOT NULL) FROM jobs WHERE id = $1::uuid", id,
          "cancelled|t");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, &got, &e), KF_CONFLICT, "a cancelled job is not cancelled again");
    q1_eq(EVENTS, id, "1");
}

Test(kf_db, guards_refuse_what_they_guard)
{
    const char *a = "10000000-0000-0000-0000-000000000006", *b = "10000000-0000-0000-0000-000000000007";
    kf_db_move m = { .move = KF_MOVE_REAP_CANCEL, .job_id = a, .attempt = 4 };
    kf_err e = KF_ERR_INIT;

    job(a, "running", 1, false);
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_CONFLICT, "no cancel was asked for");
    cr_assert(strstr(e.msg, "no cancel"), "%s", e.msg);
    exec_ok("UPDATE jobs SET cancel_requested = true WHERE id = '10000000-0000-0000-0000-000000000006'");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    q1_eq("SELECT concat_ws('|', j.state, j.attempt, e.attempt) FROM jobs j JOIN job_events e ON e.job_id = j.id "
          "WHERE j.id = $1::uuid",
          a, "cancelled|1|4");

    job(b, "queued", 1, false);
    exec_ok("INSERT INTO outbox (job_id) VALUES ('10000000-0000-0000-0000-000000000007')");
    m.move = KF_MOVE_DEATH;
    m.job_id = b;
    m.error = "attempts exhausted";
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_CONFLICT, "an enqueue pending is a later life");
    q1_eq(STATE, b, "queued");
    exec_ok("DELETE FROM outbox WHERE job_id = '10000000-0000-0000-0000-000000000007'");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    q1_eq("SELECT concat_ws('|', state, attempt, last_error, finished_at IS NOT NULL) FROM jobs WHERE id = $1::uuid",
          b, "dead|4|attempts exhausted|t");
}

Test(kf_db, requeue_revives_a_dead_job)
{
    const char *id = "10000000-0000-0000-0000-000000000008";
    kf_db_move m = { .move = KF_MOVE_REQUEUE, .job_id = id, .extra_attempts = 2, .detail = "{\"extra_attempts\":2}" };
    kf_db_moved got;
    kf_err e = KF_ERR_INIT;

    job(id, "dead", 3, true);
    exec_ok("UPDATE jobs SET finished_at = now() WHERE id = '10000000-0000-0000-0000-000000000008'");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, &got, &e), KF_OK, "%s", e.msg);
    cr_assert_gt(got.outbox_id, 0);
    cr_assert(got.cancel_requested, "what the job was before the move");
    q1_eq("SELECT concat_ws('|', state, attempt, max_attempts, cancel_requested, finished_at IS NULL) FROM jobs "
          "WHERE id = $1::uuid",
          id, "queued|3|5|f|t");
    q1_eq(OUTBOX, id, "enqueue");
    q1_eq("SELECT concat_ws('|', attempt, type, from_state, to_state) FROM job_events WHERE job_id = $1::uuid", id,
          "3|requeued|dead|queued");
}

Test(kf_db, a_final_result_sets_result_and_finished_at)
{
    const char *id = "10000000-0000-0000-0000-000000000009";
    kf_artifact_store *store = NULL;
    kf_err e = KF_ERR_INIT;
    kf_db_move m = { .move = KF_MOVE_SUCCEED, .job_id = id, .attempt = 2, .result = "{\"best\":1}",
                     .detail = "{\"error\":null,\"reported\":\"succeeded\"}",
                     .provenance = "{\"backend\":\"diag\"}" };

    cr_assert_eq(kf_artifact_store_open("pg", &store, &e), KF_OK, "%s", e.msg);
    job(id, "running", 1, false);
    exec_ok("UPDATE jobs SET last_error = 'old' WHERE id = '10000000-0000-0000-0000-000000000009'");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_INVALID, "a success offers to the library: needs the store");
    m.store = store;
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_INVALID, "and the caller's transaction");
    q1_eq("SELECT state FROM jobs WHERE id = $1::uuid", id, "running");
    exec_ok("BEGIN");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    exec_ok("COMMIT");
    kf_artifact_store_free(store);
    q1_eq("SELECT provenance->>'backend' FROM jobs WHERE id = $1::uuid", id, "diag");
    q1_eq("SELECT count(*) FROM kernel_library WHERE job_id = $1::uuid", id, "0");
    q1_eq("SELECT concat_ws('|', state, attempt, result->>'best', last_error IS NULL, finished_at IS NOT NULL) "
          "FROM jobs WHERE id = $1::uuid",
          id, "succeeded|2|1|t|t");
    q1_eq("SELECT concat_ws('|', attempt, type, from_state, to_state, detail->>'reported') FROM job_events "
          "WHERE job_id = $1::uuid",
          id, "2|succeeded|running|succeeded|succeeded");
    m.move = KF_MOVE_ITERATION;
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_CONFLICT, "a finished job records no iteration");
    q1_eq(EVENTS, id, "1");
}

Test(kf_db, the_batch_statement_creates_jobs_with_events_and_outbox_rows)
{
    const char *p[KF_DB_CREATE_BATCH_PARAMS] = {
        "{10000000-0000-0000-0000-00000000000a,10000000-0000-0000-0000-00000000000b}",
        "{diag,diag}", "{trn2,trn2}", "{diag,diag}", "{5,5}", "{\"{}\",\"{}\"}", "{\"{}\",\"{}\"}",
        "{\"{}\",\"{}\"}", "{\"{}\",\"{}\"}", "{3,3}", "{1,1}", "{NULL,NULL}",
        "{\"2026-01-01 00:00:00+00\",\"2026-01-01 00:00:01+00\"}", "{\"{}\",\"{}\"}", "{NULL,NULL}", "{NULL,NULL}", "{}",
    };
    PGresult *r = PQexecParams(pg, kf_db_sql_create_batch, KF_DB_CREATE_BATCH_PARAMS, NULL, p, NULL, NULL, 0);

    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_eq(PQntuples(r), 2);
    PQclear(r);
    q1_eq("SELECT string_agg(concat_ws('|', e.attempt, e.type, coalesce(e.from_state, '-'), e.to_state, e.detail, "
          "e.created_at = j.created_at, j.state), ',' ORDER BY j.id) FROM jobs j JOIN job_events e ON e.job_id = j.id",
          NULL, "0|created|-|queued|{}|t|queued,0|created|-|queued|{}|t|queued");
    q1_eq("SELECT string_agg(action, ',') FROM outbox", NULL, "enqueue,enqueue");
}

Test(kf_db, prepared_once_per_connection_and_the_same_as_sent_whole)
{
    const char *a = "10000000-0000-0000-0000-0000000000c1", *b = "10000000-0000-0000-0000-0000000000c2";
    kf_db_move m = { .move = KF_MOVE_ITERATION, .job_id = a, .attempt = 1, .detail = "{\"seq\":1}" };
    kf_err e = KF_ERR_INIT;

    job(a, "running", 1, false);
    job(b, "running", 1, false);
    cr_assert_eq(prep, 0u);
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(prep, 1u << KF_MOVE_ITERATION, "the first use prepares the move");
    q1_eq("SELECT count(*)::text FROM pg_prepared_statements WHERE name = 'kf_move_ITERATION'", NULL, "1");
    m.attempt = 2;
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    m.attempt = 1;
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_STALE, "a refusal by the prepared statement");

    /* The same moves sent whole write the same rows. */
    m.job_id = b;
    cr_assert_eq(kf_db_apply(pg, NULL, &m, NULL, &e), KF_OK, "%s", e.msg);
    m.attempt = 2;
    cr_assert_eq(kf_db_apply(pg, NULL, &m, NULL, &e), KF_OK, "%s", e.msg);
    m.attempt = 1;
    cr_assert_eq(kf_db_apply(pg, NULL, &m, NULL, &e), KF_STALE);
    q1_eq("SELECT string_agg(concat_ws('|', attempt, type, from_state, to_state, detail), ',' ORDER BY id) "
          "FROM job_events WHERE job_id = $1::uuid",
          a,
          "1|iteration|running|running|{\"seq\": 1, \"best_so_far_ns\": null},"
          "2|iteration|running|running|{\"seq\": 1, \"best_so_far_ns\": null}");
    q1_eq("SELECT string_agg(concat_ws('|', attempt, type, from_state, to_state, detail), ',' ORDER BY id) "
          "FROM job_events WHERE job_id = $1::uuid",
          b,
          "1|iteration|running|running|{\"seq\": 1, \"best_so_far_ns\": null},"
          "2|iteration|running|running|{\"seq\": 1, \"best_so_far_ns\": null}");
    q1_eq("SELECT attempt::text FROM jobs WHERE id = $1::uuid", b, "2");
}

Test(kf_db, an_iteration_makes_the_fastest_correct_one_the_best)
{
    const char *id = "10000000-0000-0000-0000-0000000000d1";
    kf_db_move m = { .move = KF_MOVE_ITERATION, .job_id = id, .attempt = 2, .detail = "{\"seq\":3}" };
    kf_err e = KF_ERR_INIT;

    job(id, "running", 1, false);
    exec_ok("INSERT INTO iterations (job_id, attempt, seq, latency_ns, correct) VALUES "
            "('10000000-0000-0000-0000-0000000000d1', 1, 1, 50, true), "
            "('10000000-0000-0000-0000-0000000000d1', 1, 2, 10, false), "
            "('10000000-0000-0000-0000-0000000000d1', 2, 3, 40, true), "
            "('10000000-0000-0000-0000-0000000000d1', 2, 4, NULL, true)");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    q1_eq("SELECT concat_ws('|', state, attempt, best_iteration) FROM jobs WHERE id = $1::uuid", id, "running|2|3");
    /* The event carries the best correct latency of every attempt so far. */
    q1_eq("SELECT detail::text FROM job_events WHERE job_id = $1::uuid", id, "{\"seq\": 3, \"best_so_far_ns\": 40}");
    exec_ok("DELETE FROM iterations WHERE job_id = '10000000-0000-0000-0000-0000000000d1'");
    cr_assert_eq(kf_db_apply(pg, &prep, &m, NULL, &e), KF_OK, "%s", e.msg);
    q1_eq("SELECT best_iteration::text FROM jobs WHERE id = $1::uuid", id, "3");
}

Test(kf_db, a_lease_takeover_changes_the_holder_and_nothing_else)
{
    const char *id = "10000000-0000-0000-0000-0000000000e1";
    kf_err e = KF_ERR_INIT;

    job(id, "running", 2, false);
    cr_assert_eq(kf_db_lease_takeover(pg, id, 1, "w2", "\\x0102", &e), KF_CONFLICT, "another attempt");
    cr_assert(strstr(e.msg, "attempt 1"), "%s", e.msg);
    cr_assert_eq(kf_db_lease_takeover(pg, id, 2, "w2", "\\x0102", &e), KF_OK, "%s", e.msg);
    q1_eq("SELECT concat_ws('|', state, attempt, worker_id, encode(lease_token_hash, 'hex')) FROM jobs "
          "WHERE id = $1::uuid",
          id, "running|2|w2|0102");
    q1_eq(EVENTS, id, "0");
    exec_ok("UPDATE jobs SET state = 'succeeded' WHERE id = '10000000-0000-0000-0000-0000000000e1'");
    cr_assert_eq(kf_db_lease_takeover(pg, id, 2, "w3", "\\x0103", &e), KF_CONFLICT, "a finished job");
    q1_eq("SELECT worker_id FROM jobs WHERE id = $1::uuid", id, "w2");
    cr_assert_eq(kf_db_lease_takeover(pg, id, 2, "w3", "\\xzz", &e), KF_DB, "bad bytea: %s", e.msg);
    cr_assert(strstr(e.msg, "hexadecimal"), "%s", e.msg);
}
