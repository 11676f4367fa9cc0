/* Unit tests for common/kf_life: the transition table allows exactly the
 * moves a job may make and refuses the rest (no services).  The PostgreSQL
 * side is tests/integration/test_db.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_db.h"
#include "kf_job.h"
#include "kf_life.h"
#include "kf_queue.h"
#include "tests/lib/kf_test.h"

static const kf_state all_states[] = { KF_STATE_NONE,      KF_STATE_QUEUED, KF_STATE_RUNNING,   KF_STATE_RETRYING,
                                       KF_STATE_SUCCEEDED, KF_STATE_FAILED, KF_STATE_CANCELLED, KF_STATE_DEAD };
#define N_STATES ((int)(sizeof(all_states) / sizeof(all_states[0])))

Test(kf_life, state_names_match_the_job_model)
{
    int n = 0;

    for (int i = 0; kf_job_states[i]; i++, n++) {
        kf_state s = kf_state_parse(kf_job_states[i]);
        cr_assert_neq(s, KF_STATE_NONE, "%s is not a kf_state", kf_job_states[i]);
        cr_assert_str_eq(kf_state_name(s), kf_job_states[i]);
        cr_assert_eq(kf_state_terminal(s), kf_job_state_terminal(kf_job_states[i]), "%s", kf_job_states[i]);
    }
    cr_assert_eq(n, KF_STATE__COUNT - 1, "every state but NONE is a job state");
    cr_assert_eq(kf_state_parse("bogus"), KF_STATE_NONE);
    cr_assert_eq(kf_state_parse(NULL), KF_STATE_NONE);
    cr_assert_eq(kf_state_parse(""), KF_STATE_NONE);
    cr_assert_str_eq(kf_state_name(KF_STATE__COUNT), "");
}

Test(kf_life, only_an_admin_requeue_leaves_a_terminal_state)
{
    for (int m = 0; m < KF_MOVE__COUNT; m++) {
        for (int i = 0; i < N_STATES; i++) {
            bool allowed = kf_life_allows((kf_life_move)m, all_states[i]);
            if (!kf_state_terminal(all_states[i]))
                continue;
            if (m == KF_MOVE_REQUEUE && all_states[i] == KF_STATE_DEAD)
                cr_assert(allowed, "REQUEUE must take a dead job back");
            else
                cr_assert(!allowed, "%s must not move a %s job", kf_life_get((kf_life_move)m)->name,
                          kf_state_name(all_states[i]));
        }
    }
}

Test(kf_life, every_row_is_well_formed)
{
    for (int m = 0; m < KF_MOVE__COUNT; m++) {
        const kf_life_def *d = kf_life_get((kf_life_move)m);

        cr_assert_not_null(d);
        cr_assert(d->name && d->event && d->who && d->event[0] && d->who[0], "row %d", m);
        cr_assert_neq(d->from, 0u, "%s moves from no state", d->name);
        if (d->flags & KF_LIFE_KEEP)
            cr_assert_eq(d->to, KF_STATE_NONE, "%s keeps the state and names none", d->name);
        else
            cr_assert_neq(d->to, KF_STATE_NONE, "%s moves to no state", d->name);
        /* Only creation starts from nothing, and it starts from nothing only. */
        cr_assert_eq((d->from & KF_ST(NONE)) != 0, m == KF_MOVE_CREATE, "%s", d->name);
        if (m == KF_MOVE_CREATE)
            cr_assert_eq(d->from, KF_ST(NONE));
        /* A fenced move is a worker's report: it carries an attempt. */
        if (d->flags & KF_LIFE_FENCED)
            cr_assert(d->flags & KF_LIFE_W_ATTEMPT, "%s is fenced but writes no attempt", d->name);
        cr_assert_str_neq(kf_life_qop_name(d->qop), "", "%s", d->name);
    }
    cr_assert_null(kf_life_get(KF_MOVE__COUNT));
    cr_assert_null(kf_life_get((kf_life_move)-1));
}

Test(kf_life, the_table_refuses_illegal_transitions)
{
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(kf_life_check(KF_MOVE_PROMOTE, KF_STATE_QUEUED, &e), KF_CONFLICT);
    cr_assert(strstr(e.msg, "job is queued") && strstr(e.msg, "PROMOTE") && strstr(e.msg, "{retrying}"), "%s",
              e.msg);
    cr_assert_eq(kf_life_check(KF_MOVE_START, KF_STATE_SUCCEEDED, &e), KF_CONFLICT);
    cr_assert_eq(kf_life_check(KF_MOVE_START, KF_STATE_RETRYING, &e), KF_CONFLICT,
                 "a retry is requeued (START_REQUEUE) before it starts");
    cr_assert_eq(kf_life_check(KF_MOVE_CANCEL, KF_STATE_RUNNING, &e), KF_CONFLICT,
                 "a running job's cancel is only asked for (CANCEL_ASK)");
    cr_assert_eq(kf_life_check(KF_MOVE_CANCEL_ASK, KF_STATE_QUEUED, &e), KF_CONFLICT);
    cr_assert_eq(kf_life_check(KF_MOVE_REQUEUE, KF_STATE_FAILED, &e), KF_CONFLICT, "only dead jobs are re-queued");
    cr_assert_eq(kf_life_check(KF_MOVE_REAP_RETRY, KF_STATE_RETRYING, &e), KF_CONFLICT);
    cr_assert_eq(kf_life_check(KF_MOVE_CREATE, KF_STATE_QUEUED, &e), KF_CONFLICT);
    cr_assert(strstr(e.msg, "not yet written"), "%s", e.msg);
    cr_assert_eq(kf_life_check(KF_MOVE_ITERATION, KF_STATE_DEAD, &e), KF_CONFLICT);
    cr_assert_eq(kf_life_check(KF_MOVE__COUNT, KF_STATE_QUEUED, &e), KF_INVALID);
    cr_assert_eq(kf_life_check(KF_MOVE_START, KF_STATE__COUNT, &e), KF_INVALID);
    cr_assert_eq(kf_life_check(KF_MOVE_CREATE, KF_STATE_NONE, &e), KF_OK);
    cr_assert_eq(kf_life_check(KF_MOVE_START, KF_STATE_QUEUED, &e), KF_OK);
    cr_assert_eq(kf_life_check(KF_MOVE_REQUEUE, KF_STATE_DEAD, &e), KF_OK);
    cr_assert_eq(kf_life_check(KF_MOVE_PROMOTE, KF_STATE_RETRYING, NULL), KF_OK);
}

Test(kf_life, targets_follow_the_table)
{
    cr_assert_eq(kf_life_target(KF_MOVE_RETRY, KF_STATE_RUNNING), KF_STATE_RETRYING);
    cr_assert_eq(kf_life_target(KF_MOVE_ITERATION, KF_STATE_RUNNING), KF_STATE_RUNNING, "a fact keeps the state");
    cr_assert_eq(kf_life_target(KF_MOVE_CANCEL_ASK, KF_STATE_RUNNING), KF_STATE_RUNNING);
    cr_assert_eq(kf_life_target(KF_MOVE_REQUEUE, KF_STATE_DEAD), KF_STATE_QUEUED);
    cr_assert_eq(kf_life_target(KF_MOVE_PROMOTE, KF_STATE_QUEUED), KF_STATE_NONE, "refused: no target");
    cr_assert_eq(kf_life_target(KF_MOVE__COUNT, KF_STATE_QUEUED), KF_STATE_NONE);
}

Test(kf_life, states_as_a_postgresql_array)
{
    char buf[96];

    kf_states_pg_array(KF_STATES_LIVE, buf, sizeof(buf));
    cr_assert_str_eq(buf, "{queued,running,retrying}");
    kf_states_pg_array(KF_ST(DEAD), buf, sizeof(buf));
    cr_assert_str_eq(buf, "{dead}");
    kf_states_pg_array(KF_ST(NONE), buf, sizeof(buf));
    cr_assert_str_eq(buf, "{}");
    kf_states_pg_array(KF_STATES_LIVE, buf, 8);
    cr_assert_eq(strlen(buf), 7u, "cut to the buffer, terminated");
}

Test(kf_life, the_batch_writer_writes_the_create_row)
{
    const kf_life_def *d = kf_life_get(KF_MOVE_CREATE);
    char want[96];

    snprintf(want, sizeof(want), "'%s', NULL, '%s'", d->event, kf_state_name(d->to));
    cr_assert(strstr(kf_db_sql_create_batch, want), "batch SQL lacks %s", want);
    cr_assert(strstr(kf_db_sql_create_batch_idem, want), "batch SQL (idempotent) lacks %s", want);
    cr_assert(d->flags & KF_LIFE_OUT_ENQUEUE);
    cr_assert(strstr(kf_db_sql_create_batch, "INSERT INTO outbox (job_id)"));
}

Test(kf_life, docs_list_every_row_of_the_table)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    char *path = kf_asprintf("%s/docs/lifecycle.md", root ? root : ".");
    char *doc = kf_test_read_file(path);

    for (int m = 0; m < KF_MOVE__COUNT; m++) {
        const kf_life_def *d = kf_life_get((kf_life_move)m);
        char row[128];

        snprintf(row, sizeof(row), "| `%s` | `%s` |", d->name, d->event);
        cr_assert(strstr(doc, row), "docs/lifecycle.md lacks the row %s", row);
    }
    free(doc);
    free(path);
}

Test(kf_life, queue_fate_names)
{
    cr_assert_str_eq(kf_queue_fate_name(KF_FATE_RETRYING), "retrying");
    cr_assert_str_eq(kf_queue_fate_name(KF_FATE_DEAD), "dead");
    cr_assert_str_eq(kf_queue_fate_name(KF_FATE_CANCELLED), "cancelled");
    cr_assert_str_eq(kf_queue_fate_name((kf_queue_fate)0), "");
}

Test(kf_db, a_move_outside_the_table_is_refused_before_postgresql)
{
    kf_err e = KF_ERR_INIT;
    /* No connection: a refusal here must not reach libpq. */
    kf_db_move m = { .move = KF_MOVE_REQUEUE, .job_id = "00000000-0000-0000-0000-000000000001",
                     .from = KF_ST(RUNNING), .extra_attempts = 1 };

    cr_assert_eq(kf_db_apply(NULL, NULL, &m, NULL, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "REQUEUE") && strstr(e.msg, "{dead}") && strstr(e.msg, "{running}"), "%s", e.msg);
    m.from = 0;
    m.extra_attempts = 0;
    cr_assert_eq(kf_db_apply(NULL, NULL, &m, NULL, &e), KF_INVALID, "REQUEUE needs extra attempts");
    m.move = KF_MOVE_CREATE;
    cr_assert_eq(kf_db_apply(NULL, NULL, &m, NULL, &e), KF_INVALID, "creation is the batch statement's");
    m.move = KF_MOVE_START;
    cr_assert_eq(kf_db_apply(NULL, NULL, &m, NULL, &e), KF_INVALID, "START needs the worker and lease");
    m.move = KF_MOVE__COUNT;
    cr_assert_eq(kf_db_apply(NULL, NULL, &m, NULL, &e), KF_INVALID);
    m.move = KF_MOVE_PROMOTE;
    m.job_id = NULL;
    cr_assert_eq(kf_db_apply(NULL, NULL, &m, NULL, &e), KF_INVALID);
}
