/* `kforge-sim profile` end to end: the real binary on a corpus kernel,
 * its screen, its --json document, the three files it writes, and its exit
 * status for usage and kernel errors. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "tests/lib/kf_test.h"

/* Runs a shell command line; returns the exit status, stdout in *out. */
static int sh(const char *cmd, kf_buf *out)
{
    char buf[4096];
    size_t n;
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        kf_buf_add(out, buf, n);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s exists", path);
    kf_buf b = KF_BUF_INIT;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        kf_buf_add(&b, buf, n);
    fclose(f);
    cJSON *j = cJSON_Parse(b.data);
    kf_buf_release(&b);
    cr_assert_not_null(j, "%s is JSON", path);
    return j;
}

#define KERNEL "tests/kernels/current/matmul.py --entry matmul_tiled " \
               "--input lhsT=shape:512x256:bf16 --input rhs=shape:512x1024:bf16"

Test(sim_profile_cli, prints_one_screen_and_writes_three_files)
{
    char *bin = kf_test_bin("kforge-sim"), *dir = kf_test_tmpdir("profile");
    char *cmd = kf_asprintf("%s profile " KERNEL " --target trn1 --output-dir %s/out 2>&1", bin, dir);
    kf_buf out = KF_BUF_INIT;
    cr_assert_eq(sh(cmd, &out), 0, "%s", out.data);
    cr_assert(strstr(out.data, "target trn1") != NULL, "%s", out.data);
    cr_assert(strstr(out.data, "bounds: compute") != NULL, "%s", out.data);
    cr_assert(strstr(out.data, "Input loaded from HBM more than once") != NULL, "%s", out.data);
    cr_assert(strstr(out.data, "matmul.py:") != NULL);

    char *p = kf_asprintf("%s/out/profile.json", dir);
    cJSON *j = read_json(p);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "schema")->valuestring, "kforge-profile/1");
    cr_assert(cJSON_GetArraySize(cJSON_GetObjectItem(j, "findings")) > 0);
    cJSON_Delete(j);
    free(p);
    p = kf_asprintf("%s/out/trace.json", dir);
    j = read_json(p);
    cr_assert(cJSON_GetArraySize(cJSON_GetObjectItem(j, "traceEvents")) > 10);
    cJSON_Delete(j);
    free(p);
    p = kf_asprintf("%s/out/instructions.json", dir);
    j = read_json(p);
    cr_assert(cJSON_GetArraySize(cJSON_GetObjectItem(j, "instructions")) > 10);
    cJSON_Delete(j);
    free(p);
    kf_buf_release(&out);
    free(cmd);
    free(dir);
    free(bin);
}

Test(sim_profile_cli, json_prints_the_profile_document)
{
    char *bin = kf_test_bin("kforge-sim"), *dir = kf_test_tmpdir("profile-json");
    char *cmd = kf_asprintf("%s profile " KERNEL " --json --output-dir %s", bin, dir);
    kf_buf out = KF_BUF_INIT;
    cr_assert_eq(sh(cmd, &out), 0);
    cJSON *j = cJSON_Parse(out.data);
    cr_assert_not_null(j, "%s", out.data);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "target")->valuestring, "trn2");
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "summary"), "total_time")));
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "bounds")));
    cJSON_Delete(j);
    kf_buf_release(&out);
    free(cmd);
    free(dir);
    free(bin);
}

Test(sim_profile_cli, usage_and_kernel_errors_have_their_exit_status)
{
    char *bin = kf_test_bin("kforge-sim"), *dir = kf_test_tmpdir("profile-err");
    kf_buf out = KF_BUF_INIT;
    char *cmd = kf_asprintf("%s profile tests/kernels/current/matmul.py 2>&1", bin);
    cr_assert_eq(sh(cmd, &out), 3, "no --entry: %s", out.data);
    free(cmd);
    kf_buf_reset(&out);
    cmd = kf_asprintf("%s profile " KERNEL " --target trn9 --output-dir %s 2>&1", bin, dir);
    cr_assert_eq(sh(cmd, &out), 3);
    cr_assert(strstr(out.data, "trn9") != NULL, "%s", out.data);
    free(cmd);
    kf_buf_reset(&out);
    char *file = kf_asprintf("%s/afile", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    cmd = kf_asprintf("%s profile " KERNEL " --output-dir %s 2>&1", bin, file);
    cr_assert_eq(sh(cmd, &out), 3, "%s", out.data);
    free(cmd);
    kf_buf_reset(&out);
    cmd = kf_asprintf("%s profile tests/kernels/current/matmul.py --entry no_such_kernel "
                      "--input lhsT=shape:128x128:bf16 --output-dir %s 2>&1", bin, dir);
    cr_assert_eq(sh(cmd, &out), 2, "%s", out.data);
    free(cmd);
    cmd = kf_asprintf("%s help profile", bin);
    kf_buf_reset(&out);
    cr_assert_eq(sh(cmd, &out), 0);
    cr_assert(strstr(out.data, "usage: kforge-sim profile") != NULL);
    free(cmd);
    free(file);
    kf_buf_release(&out);
    free(dir);
    free(bin);
}

/* A package kernel under --path whose tile width comes from --arg and whose
 * scale from --kwargs (a positional parameter) profiles; without --path
 * its relative import has nothing to import. */
Test(sim_profile_cli, arg_kwargs_and_path_reach_the_kernel)
{
    char *bin = kf_test_bin("kforge-sim"), *dir = kf_test_tmpdir("profile-pkg");
    char *p = kf_asprintf("mkdir -p %s/root/pkg && touch %s/root/pkg/__init__.py", dir, dir);
    kf_buf out = KF_BUF_INIT;
    cr_assert_eq(sh(p, &out), 0);
    free(p);
    p = kf_asprintf("%s/root/pkg/tiles.py", dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("def width(shape):\n    return shape[1]\n", f);
    fclose(f);
    free(p);
    p = kf_asprintf("%s/root/pkg/k.py", dir);
    f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("import torch\nimport nki\nimport nki.language as nl\nfrom .tiles import width\n\n"
          "@nki.jit\n"
          "def k(x, shape, scale):\n"
          "    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
          "    w = width(shape)\n"
          "    for i in nl.affine_range(x.shape[1] // w):\n"
          "        nl.store(out, nl.load(x[:, i * w:(i + 1) * w]) * scale)\n"
          "    return out\n", f);
    fclose(f);
    char *cmd = kf_asprintf("%s profile %s --entry k --path %s/root --input x=shape:128x2048:fp32 "
                            "--arg 'shape=[128, 512]' --kwargs '{\"scale\": 2}' --json --output-dir %s/out",
                            bin, p, dir, dir);
    cr_assert_eq(sh(cmd, &out), 0, "%s", out.data);
    cJSON *j = cJSON_Parse(out.data);
    cr_assert_not_null(j, "%s", out.data);
    cJSON *s = cJSON_GetObjectItem(j, "summary");
    cr_assert(cJSON_GetObjectItem(s, "total_time")->valuedouble > 0, "%s", out.data);
    cJSON_Delete(j);
    free(cmd);
    kf_buf_release(&out);
    cmd = kf_asprintf("%s profile %s --entry k --input x=shape:128x2048:fp32 --arg 'shape=[128, 512]' "
                      "--kwargs '{\"scale\": 2}' --output-dir %s/out 2>&1", bin, p, dir);
    cr_assert_eq(sh(cmd, &out), 2, "%s", out.data);
    cr_assert(strstr(out.data, "relative import") != NULL, "%s", out.data);
    kf_buf_release(&out);
    free(cmd);
    free(p);
    free(dir);
    free(bin);
}

/* `--grid 2x2` is a rank-2 launch in both commands: nl.program_ndim() is 2
 * (profile once made it 3 by filling the missing size with 1). */
Test(sim_profile_cli, grid_rank_is_the_same_as_run)
{
    char *bin = kf_test_bin("kforge-sim"), *dir = kf_test_tmpdir("profile-grid");
    char *p = kf_asprintf("%s/k.py", dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("import nki\nimport nki.language as nl\n\n"
          "@nki.jit\n"
          "def k(x):\n"
          "    assert nl.program_ndim() == 2, nl.program_ndim()\n"
          "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
          "    nl.store(out, nl.load(x))\n"
          "    return out\n", f);
    fclose(f);
    for (int c = 0; c < 2; c++) {
        kf_buf out = KF_BUF_INIT;
        char *cmd = kf_asprintf("%s %s %s --entry k --input x=shape:128x512:fp32 --grid 2x2 "
                                "--output-dir %s/out%d 2>&1",
                                bin, c ? "profile" : "run", p, dir, c);
        cr_assert_eq(sh(cmd, &out), 0, "%s: %s", c ? "profile" : "run", out.data);
        kf_buf_release(&out);
        free(cmd);
    }
    free(p);
    free(dir);
    free(bin);
}
