/* kforge tune from the command line: a library op tuned locally writes the
 * kernel, report, result and iterations and prints a line per iteration; a
 * user kernel with its own tunables; usage and job errors exit 2. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"

static bool exists(const char *dir, const char *name)
{
    struct stat st;
    char *p = kf_asprintf("%s/%s", dir, name);
    bool ok = stat(p, &st) == 0 && st.st_size > 0;
    free(p);
    return ok;
}

TestSuite(agent_cli, .timeout = 300);

Test(agent_cli, tunes_a_library_op_and_writes_the_results)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL;
    char *dir = kf_asprintf("/tmp/kforge-test-tune-%d", (int)getpid());
    char *cmd = kf_asprintf("cd %s && KFORGE_KERNELS_DIR=%s/kernels %s tune softmax --shape 200x700 "
                            "--dtype bf16 --target trn2 --iterations 3 --output-dir %s 2>&1", r, r, k, dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 0, "%s", out);
    cr_assert(strstr(out, "[  1] baseline") && strstr(out, "[  3]"), "a line per iteration: %s", out);
    /* it says what it does before any long step: first the binding, then the
     * first simulation and the validation, all before iteration 1's line */
    cr_assert(strncmp(out, "kforge tune: softmax on trn2: reading the kernel", 48) == 0, "first line: %s", out);
    cr_assert(strstr(out, "kforge tune: iteration 1: simulating") &&
              strstr(out, "kforge tune: iteration 1: simulating") < strstr(out, "[  1] baseline"), "%s", out);
    cr_assert(strstr(out, "kforge tune: iteration 1: validating") &&
              strstr(out, "kforge tune: iteration 1: validating") < strstr(out, "[  1] baseline"), "%s", out);
    cr_assert(strstr(out, "# kforge tune: softmax on trn2"), "%s", out);
    cr_assert(exists(dir, "kernel.py") && exists(dir, "report.md") && exists(dir, "result.json") &&
              exists(dir, "iterations.jsonl"));
    free(out);
    free(cmd);
    cmd = kf_asprintf("rm -rf %s", dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 0);
    free(out);
    free(cmd);
    free(dir);
    free(r);
    free(k);
}

/* As a user runs it: from their own folder, the library found next to the
 * binary (build/bin/../../kernels, a name through folders the evaluation
 * sandbox does not have; it failed with "cannot open kernel file"). */
Test(agent_cli, tunes_a_library_op_from_any_folder)
{
    char *k = kf_test_bin_abs("kforge"), *out = NULL;
    char *dir = kf_asprintf("/tmp/kforge-test-tune-cwd-%d", (int)getpid());
    char *cmd = kf_asprintf("mkdir -p %s && cd %s && env -u KFORGE_KERNELS_DIR %s tune softmax --shape 128x512 "
                            "--dtype fp32 --target trn2 --iterations 1 2>&1", dir, dir, k);
    cr_assert_eq(kf_test_sh(cmd, &out), 0, "%s", out);
    cr_assert(strstr(out, "[  1] baseline") && !strstr(out, "cannot open"), "%s", out);
    cr_assert(exists(dir, "kforge-tune/kernel.py") && exists(dir, "kforge-tune/result.json"));
    free(out);
    free(cmd);
    cmd = kf_asprintf("rm -rf %s", dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 0);
    free(out);
    free(cmd);
    free(dir);
    free(k);
}

Test(agent_cli, tunes_a_user_kernel_over_its_tunables)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL;
    char *dir = kf_asprintf("/tmp/kforge-test-tune-user-%d", (int)getpid());
    char *cmd = kf_asprintf("cd %s && %s tune kernels/add.py --entry add --reference kernels/add.py "
                            "--ref-entry add_ref --input a=shape:130x300:fp32 --input b=shape:130x300:fp32 "
                            "--tunables '{\"TILE_F\":[128,256]}' --quiet --json --output-dir %s 2>&1",
                            r, k, dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 0, "%s", out);
    {
        cJSON *res = cJSON_Parse(out), *best = cJSON_GetObjectItemCaseSensitive(res, "best");
        cr_assert_not_null(res, "--json prints the result: %s", out);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "correct")));
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(res, "iterations")->valueint, 2, "both values tried");
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(best, "params"), "TILE_F"));
        cJSON_Delete(res);
    }
    free(out);
    free(cmd);
    cmd = kf_asprintf("rm -rf %s", dir);
    kf_test_sh(cmd, &out);
    free(out);
    free(cmd);
    free(dir);
    free(r);
    free(k);
}

Test(agent_cli, usage_and_job_errors)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL, *cmd;
    cmd = kf_asprintf("cd %s && %s tune --help 2>&1", r, k);
    cr_assert_eq(kf_test_sh(cmd, &out), 0);
    cr_assert(strstr(out, "--shape") && strstr(out, "--tunables") && strstr(out, "--planner") &&
              strstr(out, "--output-dir") && strstr(out, "Exit status"), "%s", out);
    free(out);
    free(cmd);
    /* each refused with exit 2 and a message saying what to write */
    {
        static const char *const refused[][2] = {
            { "conv9d --shape 8x8 --output-dir /tmp/kforge-test-none", "unknown op \"conv9d\"" },
            { "softmax", "--shape" },
            { "softmax --shape 8x8 --planner magic", "--planner" },
            /* a library op's search space is its kernel's: --tunables is refused, not ignored */
            { "softmax --shape 8x8 --tunables '{\"TILE\":[1]}'", "--tunables goes with a kernel file" },
            { "softmax --shape 8x8 --tunables '[1]'", "--tunables must be a JSON object" },
        };
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
            cmd = kf_asprintf("cd %s && %s tune %s 2>&1", r, k, refused[i][0]);
            cr_assert_eq(kf_test_sh(cmd, &out), 2, "%s: %s", refused[i][0], out);
            cr_assert(strstr(out, refused[i][1]), "%s: %s", refused[i][0], out);
            free(out);
            free(cmd);
        }
    }
    free(r);
    free(k);
}

/* Numbers on the command line are read whole (issue 14): "12x" is not 12,
 * "-1" is not 2^64-1, "8x8x" is not 8x8.  Each is refused with exit 2 and a
 * message naming the flag and what it takes, before anything is run or sent
 * (the API address is a closed port: a number read leniently would fail
 * there instead, with another message). */
Test(agent_cli, numbers_are_refused_unless_whole_and_in_range)
{
    static const struct {
        const char *args, *msg;
    } c[] = {
        { "list --limit 12x", "kforge: --limit: '12x' is not a whole number; write one between 1 and 200" },
        { "list --limit 500", "kforge: --limit: 500 is out of range; write a whole number between 1 and 200" },
        { "submit - --timeout 5m", "kforge: --timeout: '5m' is not a whole number; write one between 1 and 86400" },
        { "tune softmax --shape 8x8 --iterations 12x",
          "kforge tune: --iterations: '12x' is not a whole number; write one between 1 and 100000" },
        { "tune softmax --shape 8x8 --seed -1",
          "kforge tune: --seed: '-1' is not a whole number; write one between 0 and 18446744073709551615" },
        { "tune softmax --shape 8x8 --seeds 9",
          "kforge tune: --seeds: 9 is out of range; write a whole number between 1 and 8" },
        { "tune softmax --shape 8x8 --patience ''",
          "kforge tune: --patience: an empty value is not a number; write a whole number between 0 and 100000" },
        { "tune softmax --shape 8x8 --goal-fraction 0.5s",
          "kforge tune: --goal-fraction: '0.5s' is not a number; write a decimal number between 0 and 1" },
        { "tune softmax --shape 8x8 --seconds inf",
          "kforge tune: --seconds: 'inf' is not a number; write a decimal number between 0 and 604800" },
        { "tune softmax --shape 8x8x", "kforge tune: --shape 8x8x: write the dims as 4096x8192" },
        { "tune softmax --shape 8xx8", "kforge tune: --shape 8xx8: write the dims as 4096x8192" },
        { "tune k.py --entry k --input a=shape:8x8:bf16:std=1x",
          "kforge tune: --input a=shape:8x8:bf16:std=1x: write NAME=shape:4096x8192:bf16[:std=S]" },
        { "tune k.py --entry k --input a=shape:8x8::bf16",
          "kforge tune: --input a=shape:8x8::bf16: write NAME=shape:4096x8192:bf16[:std=S]" },
    };
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge");

    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char *out = NULL;
        char *cmd = kf_asprintf("cd %s && KFORGE_API_URL=http://127.0.0.1:9 KFORGE_TOKEN=t %s %s "
                                "--output-dir /tmp/kforge-test-none </dev/null 2>&1",
                                r, k, c[i].args);
        cr_assert_eq(kf_test_sh(cmd, &out), 2, "%s: %s", c[i].args, out);
        cr_assert(strstr(out, c[i].msg), "%s: wanted \"%s\", got: %s", c[i].args, c[i].msg, out);
        free(out);
        free(cmd);
    }
    free(r);
    free(k);
}

/* A user kernel whose KFORGE block carries a constraint of 50,000 unary
 * minuses (issue 22, bug 1): kforge tune reports the nesting limit and
 * exits 2 like any other bad constraint, instead of dying on the stack. */
Test(agent_cli, a_deeply_nested_constraint_is_a_job_error)
{
    char *r = kf_test_root(), *k = kf_test_bin_abs("kforge"), *out = NULL, *cmd;
    char *src = kf_asprintf("/tmp/kforge-test-deep-%d.py", (int)getpid());
    char *dir = kf_asprintf("/tmp/kforge-test-deep-out-%d", (int)getpid());
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs("KFORGE = {\"constraints\": [\"", f);
    for (int i = 0; i < 50000; i++)
        fputc('-', f);
    fputs("1 > 0\"]}\n", f);
    fclose(f);
    cmd = kf_asprintf("cd %s && cat kernels/add.py >> %s && %s tune %s --entry add --reference kernels/add.py "
                      "--ref-entry add_ref --input a=shape:130x300:fp32 --input b=shape:130x300:fp32 "
                      "--tunables '{\"TILE_F\":[128,256]}' --quiet --output-dir %s 2>&1",
                      r, src, k, src, dir);
    cr_assert_eq(kf_test_sh(cmd, &out), 2, "%s", out);
    cr_assert(strstr(out, "kforge tune: constraint") && strstr(out, "more than 64 levels"), "%s", out);
    free(out);
    free(cmd);
    cmd = kf_asprintf("rm -rf %s %s", src, dir);
    kf_test_sh(cmd, &out);
    free(out);
    free(cmd);
    free(dir);
    free(src);
    free(r);
    free(k);
}
