/*
 * test_cli_fixture — run the `kforge` binary under test against an API,
 * with its stdout and stderr apart.  Included by tests/integration/
 * test_cli*.c only (static functions).
 *
 * Ownership: cli_out's strings are the caller's (cli_out_release).
 */
#ifndef TEST_CLI_FIXTURE_H
#define TEST_CLI_FIXTURE_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"

typedef struct cli_out {
    int   status;     /* exit status; 128 when it did not exit */
    char *out, *err;  /* what it wrote to stdout and stderr */
} cli_out;

/* kforge ARGS (NULL-terminated) with KFORGE_API_URL=url and KFORGE_TOKEN=
 * token (NULL: none), in folder cwd (NULL: the test's); 60 s at most. */
static cli_out cli_run(const char *url, const char *token, const char *cwd, const char *const *args)
{
    char *bin = kf_test_bin("kforge"), *abs = realpath(bin, NULL);
    char *dir = kf_test_tmpdir("cli");
    char *po = kf_asprintf("%s/out", dir), *pe = kf_asprintf("%s/err", dir);
    char *argv[32];
    int n = 0, st = 0;
    pid_t pid;
    cli_out r;

    cr_assert_not_null(abs, "%s exists", bin);
    argv[n++] = abs;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = kf_strdup(args[i]);
    argv[n] = NULL;
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fi = open("/dev/null", O_RDONLY);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        setenv("KFORGE_API_URL", url, 1);
        if (token)
            setenv("KFORGE_TOKEN", token, 1);
        else
            unsetenv("KFORGE_TOKEN");
        if (cwd && chdir(cwd) != 0)
            _exit(127);
        alarm(60);
        execv(argv[0], argv);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    r.out = kf_test_read_file(po);
    r.err = kf_test_read_file(pe);
    for (int i = 1; i < n; i++)
        free(argv[i]);
    free(po);
    free(pe);
    free(dir);
    free(abs);
    free(bin);
    return r;
}

static void cli_out_release(cli_out *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof(*r));
}

/* The number of lines of s that contain needle. */
__attribute__((unused)) static int cli_lines_with(const char *s, const char *needle)
{
    int n = 0;
    for (const char *line = s; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *copy = kf_strndup(line, len);
        n += strstr(copy, needle) != NULL;
        free(copy);
        line = end ? end + 1 : NULL;
    }
    return n;
}

#endif
