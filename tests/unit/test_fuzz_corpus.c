/*
 * The fuzz corpus, replayed in every `make test`: each harness in
 * tests/fuzz/ runs over its committed inputs (seeds, and the reproducer of
 * every finding a campaign made, named regress-*) through replay_NAME, in
 * whatever build this is (gcc, ASan+UBSan or not).  A finding that comes
 * back crashes or aborts the replay and fails here with its output.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"

static const char *root(void)
{
    const char *r = kf_test_env_opt("KFORGE_TEST_ROOT");
    return r ? r : ".";
}

static void replay(const char *name)
{
    const char *build = kf_test_env_opt("KFORGE_TEST_BUILD");
    char *bin = kf_asprintf("%s/%s/tests/fuzz/replay_%s", root(), build ? build : "build", name);
    char *corpus = kf_asprintf("%s/tests/fuzz/corpus/%s", root(), name);
    char *tmp = kf_test_tmpdir("fuzz");
    char *out = kf_asprintf("%s/replay_%s.out", tmp, name);
    char *argv[] = { bin, corpus, NULL };
    char *env[] = { NULL };
    char line[4096] = "", text[8192] = "";
    int rc, n = -1;
    FILE *f;

    rc = kf_test_run_cmd(argv, env, out, NULL);
    f = fopen(out, "r");
    cr_assert_not_null(f, "no output from %s", bin);
    while (fgets(line, sizeof(line), f)) {
        size_t have = strlen(text);
        snprintf(text + have, sizeof(text) - have, "%s", line);
        if (sscanf(line, "replayed %d inputs", &n) == 1)
            continue;
    }
    fclose(f);
    cr_assert_eq(rc, 0, "%s over %s exited %d:\n%s", bin, corpus, rc, text);
    cr_assert_geq(n, 3, "%s replayed %d inputs; every harness keeps at least 3 seeds:\n%s", bin, n, text);
    free(bin);
    free(corpus);
    free(out);
    free(tmp);
}

/* Every harness has a corpus folder (and the REPLAY list below names each). */
Test(fuzz_corpus, every_harness_has_a_corpus)
{
    char *dir = kf_asprintf("%s/tests/fuzz", root());
    DIR *d = opendir(dir);
    struct dirent *e;
    int harnesses = 0;

    cr_assert_not_null(d, "cannot open %s", dir);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "fuzz_", 5) == 0 && n > 7 && strcmp(e->d_name + n - 2, ".c") == 0) {
            char *corpus = kf_asprintf("%s/corpus/%.*s", dir, (int)(n - 7), e->d_name + 5);
            struct stat st;
            cr_expect(stat(corpus, &st) == 0 && S_ISDIR(st.st_mode), "%s has no corpus folder %s", e->d_name,
                      corpus);
            free(corpus);
            harnesses++;
        }
    }
    closedir(d);
    cr_assert_geq(harnesses, 10, "only %d harnesses in %s", harnesses, dir);
    free(dir);
}

#define REPLAY(name) \
    Test(fuzz_corpus, name) { replay(#name); }

REPLAY(job_request)
REPLAY(batchspec)
REPLAY(payload)
REPLAY(npy)
REPLAY(input_spec)
REPLAY(cursor)
REPLAY(idem_key)
REPLAY(config)
REPLAY(expr)
REPLAY(kforge_block)
REPLAY(nki_index)
REPLAY(sse_client)
REPLAY(sse_query)
REPLAY(library)
REPLAY(mcp)
REPLAY(llm_args)
