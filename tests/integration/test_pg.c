/* db/kf_pg, the PostgreSQL layer the API and the scheduler share, against
 * the harness's real PostgreSQL: binary arrays as the server reads them,
 * statements prepared once per connection, failures told apart (retry
 * later or a bug) with the server's SQLSTATE, and transactions run again
 * when the server says they lost a serialization check or a deadlock. */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_pg.h"
#include "tests/lib/kf_test.h"

static PGconn *pg;
static char *dsn;

static void setup(void)
{
    kf_err e = KF_ERR_INIT;

    dsn = kf_test_fresh_db();
    pg = kf_pg_connect(dsn, "test_pg", &e);
    cr_assert_not_null(pg, "%s", e.msg);
    cr_assert_eq(kf_pg_run(pg, "setup", "CREATE TABLE t (k int PRIMARY KEY, v text)", 0, NULL, &e), KF_OK, "%s",
                 e.msg);
}

static void teardown(void)
{
    PQfinish(pg);
    free(dsn);
}

/* cppcheck-suppress unknownMacro */
TestSuite(kf_pg, .init = setup, .fini = teardown, .timeout = 60);

/* The server's text of `expr` over the binary array a (parameter $1). */
static char *over(const char *expr, kf_pg_array *a)
{
    kf_err e = KF_ERR_INIT;
    const char *params[1] = { a->buf.data };
    int lengths[1] = { (int)a->buf.len }, formats[1] = { 1 };
    char *sql = kf_asprintf("SELECT %s", expr);
    PGresult *r = kf_pg_exec(pg, "array", sql, 1, params, lengths, formats, &e);
    char *v;

    cr_assert_not_null(r, "%s: %s", sql, e.msg);
    v = kf_strdup(PQgetisnull(r, 0, 0) ? "<null>" : PQgetvalue(r, 0, 0));
    PQclear(r);
    free(sql);
    return v;
}

static void over_eq(const char *expr, kf_pg_array *a, const char *want)
{
    char *v = over(expr, a);
    cr_assert_str_eq(v, want, "%s", expr);
    free(v);
}

Test(kf_pg, arrays_of_every_type_reach_the_server_as_built)
{
    kf_pg_array a;

    kf_pg_array_init(&a, KF_PG_TEXT, 0);
    kf_pg_array_text(&a, "héllo, \"world\"");
    kf_pg_array_text(&a, NULL);
    kf_pg_array_text(&a, "");
    cr_assert(kf_pg_array_done(&a));
    over_eq("array_to_string($1::text[], '|', '<null>') || '/' || cardinality($1::text[])", &a,
            "héllo, \"world\"|<null>|/3");
    kf_pg_array_release(&a);

    kf_pg_array_init(&a, KF_PG_INT8, 1);
    kf_pg_array_int8(&a, -9223372036854775807LL - 1);
    kf_pg_array_int8(&a, 42);
    kf_pg_array_done(&a);
    over_eq("$1::bigint[]::text", &a, "{-9223372036854775808,42}");
    kf_pg_array_release(&a);

    kf_pg_array_init(&a, KF_PG_INT4, 1);
    kf_pg_array_int4(&a, -7);
    kf_pg_array_int4(&a, 2147483647);
    kf_pg_array_done(&a);
    over_eq("$1::int[]::text", &a, "{-7,2147483647}");
    kf_pg_array_release(&a);

    kf_pg_array_init(&a, KF_PG_JSONB, 1);
    kf_pg_array_jsonb(&a, "{\"b\": [1, 2], \"a\": null}");
    kf_pg_array_jsonb(&a, NULL);
    kf_pg_array_done(&a);
    over_eq("($1::jsonb[])[1]::text || ' ' || (($1::jsonb[])[2] IS NULL)", &a, "{\"a\": null, \"b\": [1, 2]} true");
    kf_pg_array_release(&a);

    kf_pg_array_init(&a, KF_PG_TIMESTAMPTZ, 1);
    kf_pg_array_timestamptz(&a, 0);
    kf_pg_array_timestamptz(&a, 1780000000123456LL);
    kf_pg_array_done(&a);
    over_eq("$1::timestamptz[]::text", &a, "{\"1970-01-01 00:00:00+00\",\"2026-05-28 20:26:40.123456+00\"}");
    kf_pg_array_release(&a);

    kf_pg_array_init(&a, KF_PG_UUID, 1);
    cr_assert(kf_pg_array_uuid(&a, "0192F3A4-5B6C-7D8E-9FA0-B1C2D3E4F5A6"));
    kf_pg_array_done(&a);
    over_eq("$1::uuid[]::text", &a, "{0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f5a6}");
    kf_pg_array_release(&a);

    kf_pg_array_init(&a, KF_PG_INT8, 0);   /* empty */
    kf_pg_array_done(&a);
    over_eq("cardinality($1::bigint[])", &a, "0");
    kf_pg_array_release(&a);
}

Test(kf_pg, a_malformed_uuid_spoils_the_array_before_it_is_sent)
{
    static const char *const bad[] = { "0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f5a", "0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f5a6x",
                                       "0192f3a45b6c-7d8e-9fa0-b1c2d3e4f5a6-", "0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f5g6",
                                       "" };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kf_pg_array a;
        kf_pg_array_init(&a, KF_PG_UUID, 1);
        cr_assert_not(kf_pg_array_uuid(&a, bad[i]), "%s", bad[i]);
        cr_assert_not(kf_pg_array_done(&a), "%s", bad[i]);
        kf_pg_array_release(&a);
    }
}

Test(kf_pg, a_refused_statement_is_a_bug_with_its_sqlstate)
{
    kf_err e = KF_ERR_INIT;

    cr_assert_null(kf_pg_exec(pg, "typo step", "SELEC 1", 0, NULL, NULL, NULL, &e));
    cr_assert_eq(e.code, KF_DB);
    cr_assert(strstr(e.msg, "typo step: PostgreSQL refused the statement") && strstr(e.msg, "[42601]"), "%s", e.msg);
    /* the connection is still good */
    cr_assert_eq(kf_pg_run(pg, "after", "SELECT 1", 0, NULL, &e), KF_OK, "%s", e.msg);
}

Test(kf_pg, a_lost_connection_is_worth_retrying)
{
    kf_err e = KF_ERR_INIT;
    PGconn *other = kf_pg_connect(dsn, "test_pg_killer", &e);
    char pid[16];
    const char *p[1] = { pid };

    cr_assert_not_null(other, "%s", e.msg);
    snprintf(pid, sizeof(pid), "%d", PQbackendPID(pg));
    PQclear(kf_pg_exec(other, "kill", "SELECT pg_terminate_backend($1::int)", 1, p, NULL, NULL, &e));
    PQfinish(other);
    kf_test_sleep_ms(100);
    cr_assert_null(kf_pg_exec(pg, "after kill", "SELECT 1", 0, NULL, NULL, NULL, &e));
    cr_assert_eq(e.code, KF_UNAVAILABLE, "%s", e.msg);
    cr_assert(kf_pg_transient(pg, NULL));
}

Test(kf_pg, a_statement_is_prepared_once_per_connection)
{
    kf_err e = KF_ERR_INIT;
    kf_pg_stmt st = { 5, "test_pg_add", "SELECT $1::int + 1", 1 };
    kf_pg_prepared prep = 0;
    const char *p[1] = { "41" };

    for (int i = 0; i < 3; i++) {
        PGresult *r = kf_pg_exec_stmt(pg, &prep, &st, p, NULL, NULL, &e);
        cr_assert_not_null(r, "%s", e.msg);
        cr_assert_str_eq(PQgetvalue(r, 0, 0), "42");
        PQclear(r);
    }
    cr_assert_eq(prep, 1ULL << 5);
    {
        PGresult *r = kf_pg_exec(pg, "count", "SELECT count(*) FROM pg_prepared_statements WHERE name = 'test_pg_add'", 0,
                                 NULL, NULL, NULL, &e);
        cr_assert_str_eq(PQgetvalue(r, 0, 0), "1");
        PQclear(r);
    }
    /* without a record, the same statement is sent whole */
    {
        PGresult *r = kf_pg_exec_stmt(pg, NULL, &st, p, NULL, NULL, &e);
        cr_assert_str_eq(PQgetvalue(r, 0, 0), "42");
        PQclear(r);
    }
}

/* A transaction body that writes row k and then, while tries_left says
 * so, makes the server fail it with the given SQLSTATE. */
typedef struct body_run {
    int         k;
    int         runs;
    int         fail_runs;   /* the first fail_runs runs fail */
    const char *errcode;     /* the condition they fail with */
} body_run;

static kf_code body(PGconn *c, void *ud, kf_err *err)
{
    body_run *b = ud;
    char k[16];
    const char *p[1] = { k };
    kf_code rc;

    b->runs++;
    snprintf(k, sizeof(k), "%d", b->k);
    if ((rc = kf_pg_run(c, "insert", "INSERT INTO t (k, v) VALUES ($1::int, 'x')", 1, p, err)) != KF_OK)
        return rc;
    if (b->runs <= b->fail_runs) {
        char *sql = kf_asprintf("DO $$BEGIN RAISE EXCEPTION 'made to fail' USING ERRCODE = '%s'; END$$", b->errcode);
        rc = kf_pg_run(c, "fail", sql, 0, NULL, err);
        free(sql);
        cr_assert_neq(rc, KF_OK);
        return rc;
    }
    return KF_OK;
}

static int rows_with(int k)
{
    kf_err e = KF_ERR_INIT;
    char ks[16];
    const char *p[1] = { ks };
    PGresult *r;
    int n;

    snprintf(ks, sizeof(ks), "%d", k);
    r = kf_pg_exec(pg, "count", "SELECT count(*) FROM t WHERE k = $1::int", 1, p, NULL, NULL, &e);
    cr_assert_not_null(r, "%s", e.msg);
    n = atoi(PQgetvalue(r, 0, 0));
    PQclear(r);
    return n;
}

Test(kf_pg, a_transaction_that_lost_a_serialization_check_or_deadlock_runs_again)
{
    kf_err e = KF_ERR_INIT;
    body_run ser = { .k = 1, .fail_runs = 2, .errcode = "40001" };
    body_run dead = { .k = 2, .fail_runs = 1, .errcode = "40P01" };

    cr_assert_eq(kf_pg_txn(pg, 3, body, &ser, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(ser.runs, 3);
    cr_assert_eq(rows_with(1), 1, "the failed runs were rolled back, the last committed");
    cr_assert_eq(kf_pg_txn(pg, 3, body, &dead, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(dead.runs, 2);
    cr_assert_eq(rows_with(2), 1);
    cr_assert_eq(PQtransactionStatus(pg), PQTRANS_IDLE);
}

Test(kf_pg, a_transaction_gives_up_after_its_tries_and_other_failures_are_not_retried)
{
    kf_err e = KF_ERR_INIT;
    body_run always = { .k = 3, .fail_runs = 100, .errcode = "40001" };
    body_run bug = { .k = 4, .fail_runs = 100, .errcode = "23505" };

    cr_assert_eq(kf_pg_txn(pg, 2, body, &always, &e), KF_UNAVAILABLE);
    cr_assert_eq(always.runs, 2);
    cr_assert(strstr(e.msg, "[40001]"), "%s", e.msg);
    cr_assert_eq(rows_with(3), 0);

    cr_assert_eq(kf_pg_txn(pg, 5, body, &bug, &e), KF_DB);
    cr_assert_eq(bug.runs, 1, "a unique violation is not a race: no second run");
    cr_assert(strstr(e.msg, "[23505]"), "%s", e.msg);
    cr_assert_eq(rows_with(4), 0);
    cr_assert_eq(PQtransactionStatus(pg), PQTRANS_IDLE);
}

Test(kf_pg, an_unreachable_server_says_what_to_check)
{
    kf_err e = KF_ERR_INIT;
    char *bad = kf_asprintf("host=127.0.0.1 port=%d dbname=x", kf_test_free_port());

    cr_assert_null(kf_pg_connect(bad, "test_pg", &e));
    cr_assert_eq(e.code, KF_UNAVAILABLE);
    cr_assert(strstr(e.msg, "KFORGE_PG_DSN"), "%s", e.msg);
    free(bad);
}
