/* The Python client end to end, issue 15's done-when: a whole stack
 * (kforge-api + kforge-scheduler + a sim kforge-worker, real PostgreSQL
 * and Redis) and clients/python/tests/notebook_e2e.py run against it with
 * Debian's python3 and the client alone: it submits a small generate job
 * after an earlier one, watches it live over SSE, pulls every iteration
 * into a table, downloads the best kernel and its trace, compares the two
 * runs, lists them by label, and checks that another user's token gets 404
 * for all of it.  This test checks the script's exit status and last line,
 * then PostgreSQL against what the script saw. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_stack.h"

#define PYCLIENT_DB 5
#define PYTHON "/usr/bin/python3"

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

/* cppcheck-suppress unknownMacro */
TestSuite(pyclient, .fini = teardown, .timeout = 360);

/* A second user's token, made as `kforge-api token create` makes every
 * token (caller frees). */
static char *other_user_token(void)
{
    char *bin = kf_test_bin("kforge-api");
    char *dsn = kf_asprintf("KFORGE_PG_DSN=%s", S.dsn);
    char *out = kf_asprintf("%s/token-bob.out", S.dir);
    char *argv[] = { bin, "token", "create", "--role", "user", "--name", "bob", NULL };
    char *env[] = { dsn, NULL };
    char *tok = NULL;
    int rc = kf_test_run_cmd(argv, env, out, &tok);

    cr_assert_eq(rc, 0, "kforge-api token create exited %d; see %s", rc, out);
    cr_assert_not_null(tok, "kforge-api token create printed no token; see %s", out);
    free(bin);
    free(dsn);
    free(out);
    return tok;
}

/* The value of " name=" in line, up to the next space (caller frees), or NULL. */
static char *field_of(const char *line, const char *name)
{
    char *key = kf_asprintf(" %s=", name);
    const char *p = strstr(line, key);
    char *v = p ? kf_strndup(p + strlen(key), strcspn(p + strlen(key), " \n")) : NULL;

    free(key);
    return v;
}

Test(pyclient, a_notebook_submits_watches_tables_downloads_and_compares)
{
    kf_stack_opts o = { .redis_db = PYCLIENT_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    char *other, *script, *out, *text, *line, *job, *earlier, *iters;
    char *env[5];
    int rc;

    kf_stack_start(&S, &o);
    other = other_user_token();
    script = kf_asprintf("%s/clients/python/tests/notebook_e2e.py", kf_test_env("KFORGE_TEST_ROOT"));
    out = kf_asprintf("%s/notebook_e2e.out", S.dir);
    env[0] = kf_asprintf("KFORGE_URL=%s", S.api_url);
    env[1] = kf_asprintf("KFORGE_TOKEN=%s", S.user);
    env[2] = kf_asprintf("KFORGE_OTHER_TOKEN=%s", other);
    env[3] = kf_strdup("PYTHONDONTWRITEBYTECODE=1");
    env[4] = NULL;
    {
        char *argv[] = { PYTHON, script, NULL };
        rc = kf_test_run_cmd(argv, env, out, NULL);
    }
    text = kf_test_read_file(out);
    cr_assert_eq(rc, 0, "notebook_e2e.py exited %d (logs in %s):\n%s", rc, S.dir, text);
    line = strstr(text, "notebook_e2e: ok ");
    cr_assert_not_null(line, "no \"notebook_e2e: ok\" line:\n%s", text);

    /* PostgreSQL agrees with what the notebook saw */
    job = field_of(line, "job");
    earlier = field_of(line, "earlier");
    iters = field_of(line, "iterations");
    cr_assert(job && earlier && iters, "the ok line names job, earlier and iterations: %s", line);
    cr_assert_str_eq(kf_stack_state(&S, job), "succeeded");
    cr_assert_str_eq(kf_stack_state(&S, earlier), "succeeded");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid", job), atol(iters),
                 "the notebook's table holds every iteration PostgreSQL kept");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM jobs WHERE labels->>'run' = 'today'", NULL), 1,
                 "the repeated keyed submit made one job");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM jobs", NULL), 2);

    for (int i = 0; env[i]; i++)
        free(env[i]);
    free(job);
    free(earlier);
    free(iters);
    free(text);
    free(out);
    free(script);
    free(other);
}
