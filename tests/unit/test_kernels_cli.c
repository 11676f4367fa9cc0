/* The kforge-sim command as a user runs it: outputs written as .npy, the
 * exit status (0 pass, 1 mismatch, 2 kernel error, 3 usage error), --json,
 * .npy inputs, kernels that hang or reach for the network, --arg/--kwargs
 * positional arguments and --path import roots. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "sim/sim_npy.h"
#include "tests/lib/kf_test.h"

typedef struct run_out {
    int  status;      /* exit code, or 128+signal */
    char *out, *err;  /* captured stdout / stderr */
} run_out;

static char *slurp(const char *path)
{
    kf_buf b = KF_BUF_INIT;
    char chunk[4096];
    size_t n;
    FILE *f = fopen(path, "rb");
    if (f) {
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
            kf_buf_add(&b, chunk, n);
        fclose(f);
    }
    return kf_buf_detach(&b);
}

/* Run kforge-sim with the given arguments (NULL-terminated). */
static run_out sim(const char *dir, const char *first, ...)
{
    char *argv[64], *bin = kf_test_bin("kforge-sim");
    char *op = kf_asprintf("%s/stdout", dir), *ep = kf_asprintf("%s/stderr", dir);
    int n = 0, st;
    va_list ap;
    run_out r;
    pid_t pid;

    argv[n++] = bin;
    va_start(ap, first);
    for (const char *a = first; a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = kf_strdup(a);
    va_end(ap);
    argv[n] = NULL;
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int o = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        execv(bin, argv);
        _exit(127);
    }
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = slurp(op);
    r.err = slurp(ep);
    for (int i = 1; i < n; i++)
        free(argv[i]);
    free(bin);
    free(op);
    free(ep);
    return r;
}

static void run_free(run_out *r)
{
    free(r->out);
    free(r->err);
}

static char *kernel_path(const char *rel)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    return kf_asprintf("%s/tests/kernels/%s", root && *root ? root : ".", rel);
}

Test(kforge_sim, run_check_pass_writes_npy_outputs)
{
    char *dir = kf_test_tmpdir("cli"), *k = kernel_path("legacy/tensor_add.py");
    char *ref = kernel_path("ref_tensor_add.py"), *od = kf_asprintf("%s/out", dir);
    run_out r = sim(dir, "run", k, "--entry", "tensor_add", "--target", "trn2", "--grid", "2x2",
                    "--input", "a_input=shape:200x700:fp32:seed=1", "--input", "b_input=shape:200x700:fp32:seed=2",
                    "--check", ref, "--output-dir", od, "--save-inputs", (char *)NULL);
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "PASS") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "(200, 700)") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "instructions:") != NULL && strstr(r.out, "DMA:") != NULL, "%s", r.out);

    /* the output file is the sum of the saved inputs */
    char *po = kf_asprintf("%s/out0.npy", od), *pa = kf_asprintf("%s/inputs/a_input.npy", od);
    char *pb = kf_asprintf("%s/inputs/b_input.npy", od);
    sim_npy_array o, a, b;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_npy_read(po, -1, 1 << 30, &o, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_npy_read(pa, -1, 1 << 30, &a, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_npy_read(pb, -1, 1 << 30, &b, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(o.count, 140000);
    for (uint64_t i = 0; i < o.count; i += 997)
        cr_assert_eq(((float *)o.data)[i], ((float *)a.data)[i] + ((float *)b.data)[i]);
    sim_npy_array_release(&o);
    sim_npy_array_release(&a);
    sim_npy_array_release(&b);
    free(po); free(pa); free(pb);
    run_free(&r);
    free(dir); free(k); free(ref); free(od);
}

Test(kforge_sim, mismatch_exits_1_and_json_tells_why)
{
    char *dir = kf_test_tmpdir("cli"), *k = kernel_path("current/softmax.py");
    char *ref = kernel_path("ref_softmax.py"), *od = kf_asprintf("%s/out", dir);
    run_out r = sim(dir, "run", k, "--entry", "softmax", "--input", "x=shape:200x300:fp32:seed=3",
                    "--check", ref, "--rtol", "0", "--atol", "0", "--output-dir", od, "--json", (char *)NULL);
    cr_assert_eq(r.status, 1, "exit %d\n%s%s", r.status, r.out, r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert_not_null(j, "--json printed no JSON: %s", r.out);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "mismatch");
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "check"), 0);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(c, "pass")));
    cr_assert(cJSON_GetObjectItem(c, "mismatches")->valuedouble > 0);
    cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "outputs"), 0);
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "shape"), 1)->valueint, 300);
    /* the kernels the numerics used (the bench prints them beside NumPy's) */
    cJSON *blas = cJSON_GetObjectItem(j, "blas");
    cr_assert(cJSON_IsString(blas) && blas->valuestring[0], "no blas in %s", r.out);
    cJSON_Delete(j);
    run_free(&r);
    free(dir); free(k); free(ref); free(od);
}

Test(kforge_sim, kernel_errors_exit_2_with_file_line_and_rule)
{
    char *dir = kf_test_tmpdir("cli"), *k = kernel_path("negative/partition_limit.py");
    char *od = kf_asprintf("%s/out", dir);
    run_out r = sim(dir, "run", k, "--entry", "kernel", "--input", "x=shape:256x64:fp32", "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "partition_limit.py:10:") != NULL, "%s", r.err);
    cr_assert(strstr(r.err, "SIM_E_PARTITION_LIMIT") != NULL, "%s", r.err);
    cr_assert(strstr(r.err, "256 > 128") != NULL, "%s", r.err);
    run_free(&r);
    free(dir); free(k); free(od);
}

static char *write_kernel(const char *dir, const char *name, const char *body)
{
    char *p = kf_asprintf("%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fprintf(f, "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n\n@nki.jit\ndef kernel(x):\n%s", body);
    fclose(f);
    return p;
}

Test(kforge_sim, hanging_and_network_kernels_are_failed_evaluations)
{
    char *dir = kf_test_tmpdir("cli"), *od = kf_asprintf("%s/out", dir);
    char *loop = write_kernel(dir, "loop.py", "    while True:\n        pass\n");
    char *net = write_kernel(dir, "net.py", "    import socket\n    socket.create_connection(('127.0.0.1', 9))\n    return x\n");

    run_out r = sim(dir, "run", loop, "--entry", "kernel", "--input", "x=shape:4x4:fp32", "--timeout", "30",
                    "--cpu", "1", "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "CPU time limit of 1 s exceeded") != NULL, "%s", r.err);
    run_free(&r);

    r = sim(dir, "run", loop, "--entry", "kernel", "--input", "x=shape:4x4:fp32", "--timeout", "1",
            "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "limit") != NULL, "%s", r.err);
    run_free(&r);

    r = sim(dir, "run", net, "--entry", "kernel", "--input", "x=shape:4x4:fp32", "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "Operation not permitted") != NULL, "%s", r.err);
    cr_assert(strstr(r.err, "net.py:9") != NULL, "%s", r.err);
    run_free(&r);
    free(dir); free(od); free(loop); free(net);
}

Test(kforge_sim, npy_inputs_and_usage_errors)
{
    char *dir = kf_test_tmpdir("cli"), *od = kf_asprintf("%s/out", dir);
    char *k = kernel_path("current/transpose2d.py"), *ref = kernel_path("ref_transpose2d.py");
    char *xp = kf_asprintf("%s/x.npy", dir), *spec = kf_asprintf("in_tensor=%s:bf16", xp);
    uint64_t shape[2] = { 16, 24 };
    float v[16 * 24];
    kf_err e = KF_ERR_INIT;

    for (int i = 0; i < 16 * 24; i++)
        v[i] = (float)i / 7.0f;
    cr_assert_eq(sim_npy_write(xp, SIM_DT_FLOAT32, 2, shape, v, 0, &e), KF_OK);
    run_out r = sim(dir, "run", k, "--entry", "transpose2d", "--input", spec, "--kwargs", "{\"F1\": 4, \"F2\": 6}",
                    "--check", ref, "--output-dir", od, "--keep-dtype", (char *)NULL);
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "bfloat16") != NULL, "%s", r.out);
    run_free(&r);
    char *po = kf_asprintf("%s/out0.npy", od);
    sim_npy_array o;
    cr_assert_eq(sim_npy_read(po, -1, 1 << 20, &o, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(o.dtype, SIM_DT_BFLOAT16, "--keep-dtype writes bf16 as <V2");
    sim_npy_array_release(&o);
    free(po);

    static const char *bad[][4] = {
        { "--input", "x=shape:4x4:fp32", NULL, "--entry NAME is required" },
        { "--entry", "kernel", "--grid", "must look like 2x4" },
        { "--entry", "kernel", "--kwargs", "must be a JSON object" },
        { "--entry", "kernel", "--input", "unknown dtype" },
    };
    static const char *bad_val[] = { NULL, "0x2", "[1]", "x=shape:4:quad" };
    for (size_t i = 0; i < 4; i++) {
        if (bad_val[i])
            r = sim(dir, "run", k, bad[i][0], bad[i][1], bad[i][2], bad_val[i], "--output-dir", od, (char *)NULL);
        else
            r = sim(dir, "run", k, bad[i][0], bad[i][1], "--output-dir", od, (char *)NULL);
        cr_assert_eq(r.status, 3, "case %zu: exit %d\n%s", i, r.status, r.err);
        cr_assert(strstr(r.err, bad[i][3]) != NULL, "case %zu: %s", i, r.err);
        run_free(&r);
    }
    r = sim(dir, "frobnicate", (char *)NULL);
    cr_assert_eq(r.status, 3);
    run_free(&r);
    r = sim(dir, "--help", (char *)NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "run ") != NULL && strstr(r.out, "KFORGE_SIM_TIMEOUT_S") != NULL, "%s", r.out);
    run_free(&r);
    free(dir); free(od); free(k); free(ref); free(xp); free(spec);
}

static void put(const char *dir, const char *rel, const char *text)
{
    char *p = kf_asprintf("%s/%s", dir, rel);
    for (char *q = p + strlen(dir) + 1; (q = strchr(q, '/')) != NULL; q++) {
        *q = '\0';
        mkdir(p, 0755);
        *q = '/';
    }
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
    free(p);
}

Test(kforge_sim, arg_gives_scalar_tuple_and_object_arguments_and_kwargs_fill_positionals)
{
    char *dir = kf_test_tmpdir("cli"), *od = kf_asprintf("%s/out", dir);
    put(dir, "k.py", "import nki\nimport nki.language as nl\n\n"
                     "@nki.jit\n"
                     "def scale(x, shape, cfg, factor):\n"
                     "    assert shape == (64, 32), shape\n"
                     "    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
                     "    nl.store(out, nl.load(x) * (cfg.mul * factor) + cfg['add'])\n"
                     "    return out\n");
    put(dir, "ref.py", "def scale(x, shape, cfg, factor):\n"
                       "    assert shape == (64, 32)\n"
                       "    return x * cfg['mul'] * factor + cfg['add']\n");
    char *k = kf_asprintf("%s/k.py", dir), *ref = kf_asprintf("%s/ref.py", dir);

    run_out r = sim(dir, "run", k, "--entry", "scale", "--input", "x=shape:64x32:fp32:seed=4", "--arg", "shape=[64, 32]",
                    "--arg", "cfg={\"mul\": 3, \"add\": 0.5}", "--kwargs", "{\"factor\": 2}", "--check", ref,
                    "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "PASS") != NULL, "%s", r.out);
    run_free(&r);

    /* every argument positional: factor from --arg */
    r = sim(dir, "run", k, "--entry", "scale", "--input", "x=shape:64x32:fp32:seed=4", "--arg", "shape=[64, 32]",
            "--arg", "cfg={\"mul\": 3, \"add\": 0.5}", "--arg", "factor=2", "--check", ref, "--output-dir", od,
            (char *)NULL);
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    run_free(&r);

    /* a parameter given nowhere is named; one --kwargs gives is not claimed missing */
    r = sim(dir, "run", k, "--entry", "scale", "--input", "x=shape:64x32:fp32", "--arg", "shape=[64, 32]",
            "--kwargs", "{\"factor\": 2}", "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "k.py:4: error SIM_E_ARGS") != NULL && strstr(r.err, "scale is missing 'cfg' (") != NULL,
              "%s", r.err);
    cr_assert(strstr(r.err, "'factor'") == NULL, "%s", r.err);
    run_free(&r);

    static const char *bad[][2] = {
        { "shape", "--arg 'shape' must look like NAME=JSON" },
        { "=[1]", "must look like NAME=JSON" },
        { "shape=(64, 32)", "the value is not JSON" },
    };
    for (size_t i = 0; i < 3; i++) {
        r = sim(dir, "run", k, "--entry", "scale", "--arg", bad[i][0], "--output-dir", od, (char *)NULL);
        cr_assert_eq(r.status, 3, "case %zu: exit %d\n%s", i, r.status, r.err);
        cr_assert(strstr(r.err, bad[i][1]) != NULL, "case %zu: %s", i, r.err);
        run_free(&r);
    }
    free(dir); free(od); free(k); free(ref);
}

/* A kernel inside a package under --path: its relative imports work and
 * harness imports load through stubs; the sandbox shows the root read-only
 * and nothing beside it, not even through symbolic links inside it. */
Test(kforge_sim, path_exposes_the_package_root_read_only_and_nothing_else)
{
    char *dir = kf_test_tmpdir("cli"), *od = kf_asprintf("%s/out", dir);
    char *root = kf_asprintf("%s/proj", dir), *secret = kf_asprintf("%s/secret.txt", dir);
    char *lnk_abs = kf_asprintf("%s/proj/pkg/abs_link", dir), *lnk_rel = kf_asprintf("%s/proj/pkg/rel_link", dir);

    char *checks = kf_asprintf("import os\n"
                         "DIR, ROOT, SECRET = '%s', '%s', '%s'\n"
                         "def probe():\n"
                         "    bad = []\n"
                         "    for p in (SECRET, ROOT + '/pkg/abs_link', ROOT + '/pkg/rel_link'):\n"
                         "        try:\n"
                         "            open(p).read()\n"
                         "            bad.append('read ' + p)\n"
                         "        except OSError:\n"
                         "            pass\n"
                         "    if sorted(os.listdir(DIR)) != ['proj']:\n"
                         "        bad.append('saw %%r' %% sorted(os.listdir(DIR)))\n"
                         "    try:\n"
                         "        open(ROOT + '/pkg/planted.py', 'w').write('x = 1')\n"
                         "        bad.append('wrote into the root')\n"
                         "    except OSError:\n"
                         "        pass\n"
                         "    return bad\n",
                         dir, root, secret);
    put(dir, "secret.txt", "the sandbox must not show this\n");
    put(dir, "proj/pkg/__init__.py", "");
    put(dir, "proj/pkg/probe.py", checks);
    put(dir, "proj/pkg/kernels/__init__.py", "");
    put(dir, "proj/pkg/kernels/k.py", "import torch\n"
                                      "from torch_xla.core import xla_model as xm\n"
                                      "import nki\nimport nki.language as nl\n"
                                      "from ..probe import probe\n\n"
                                      "@nki.jit\n"
                                      "def k(x):\n"
                                      "    bad = probe()\n"
                                      "    assert not bad, bad\n"
                                      "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
                                      "    nl.store(out, nl.load(x))\n"
                                      "    return out\n");
    cr_assert_eq(symlink(secret, lnk_abs), 0);
    cr_assert_eq(symlink("../../secret.txt", lnk_rel), 0);
    /* the links and the secret are readable outside the sandbox */
    char *via = slurp(lnk_rel);
    cr_assert(strstr(via, "must not show") != NULL);
    free(via);
    char *k = kf_asprintf("%s/proj/pkg/kernels/k.py", dir);

    run_out r = sim(dir, "run", k, "--entry", "k", "--path", root, "--input", "x=shape:8x8:fp32",
                    "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    run_free(&r);
    struct stat st;
    char *planted = kf_asprintf("%s/proj/pkg/planted.py", dir);
    cr_assert_neq(stat(planted, &st), 0, "the kernel wrote into its import root");
    free(planted);

    /* without --path the sandbox shows the kernel file alone: the package is not there */
    r = sim(dir, "run", k, "--entry", "k", "--input", "x=shape:8x8:fp32", "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "k.py:5") != NULL && strstr(r.err, "relative import") != NULL, "%s", r.err);
    run_free(&r);

    /* --no-stubs: the harness import fails where it is */
    r = sim(dir, "run", k, "--entry", "k", "--path", root, "--no-stubs", "--input", "x=shape:8x8:fp32",
            "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "k.py:1") != NULL && strstr(r.err, "No module named 'torch'") != NULL, "%s", r.err);
    run_free(&r);

    r = sim(dir, "run", k, "--entry", "k", "--path", secret, "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 3, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "is not a folder") != NULL, "%s", r.err);
    run_free(&r);
    free(dir); free(od); free(root); free(secret); free(lnk_abs); free(lnk_rel); free(checks); free(k);
}

Test(kforge_sim, run_help_tells_about_arg_kwargs_path_and_stubs)
{
    char *dir = kf_test_tmpdir("cli");
    run_out r = sim(dir, "run", "--help", (char *)NULL);
    cr_assert_eq(r.status, 0);
    static const char *want[] = { "--arg NAME=JSON", "passed as a tuple", "keys also read as attributes",
                                  "a key may name a positional parameter", "--path DIR", "read-only",
                                  "relative imports", "--no-stubs", "torch, torch_xla", "SIM_E_UNSUPPORTED_API" };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(r.out, want[i]) != NULL, "'%s' not in:\n%s", want[i], r.out);
    run_free(&r);
    free(dir);
}

/* The sandbox mounts the kernel, the reference and the import roots at their
 * real paths: names that reach them through a symlinked folder or through
 * ".." over folders the sandbox does not have must still open (they did
 * not: "cannot open kernel file", for run, --check and profile alike). */
Test(kforge_sim, kernel_and_reference_named_through_a_symlink_or_dotdot_open)
{
    char *dir = kf_test_tmpdir("cli-real"), *k = kernel_path("legacy/tensor_add.py");
    char *kdir = kernel_path(""), *link = kf_asprintf("%s/kernels-link", dir);
    char *a = kf_asprintf("%s/a", dir), *sub = kf_asprintf("%s/a/b", dir), *od = kf_asprintf("%s/out", dir);
    cr_assert_eq(symlink(kdir, link), 0);
    cr_assert(mkdir(a, 0755) == 0 && mkdir(sub, 0755) == 0);
    char *via_link = kf_asprintf("%s/legacy/tensor_add.py", link);
    char *ref_link = kf_asprintf("%s/ref_tensor_add.py", link);
    /* dir/a/b/../../kernels-link/...: ".." over folders only the caller has */
    char *via_dots = kf_asprintf("%s/../../kernels-link/legacy/tensor_add.py", sub);

    run_out r = sim(dir, "run", via_link, "--entry", "tensor_add", "--grid", "2x1",
                    "--input", "a_input=shape:256x512:fp32:seed=1", "--input", "b_input=shape:256x512:fp32:seed=2",
                    "--check", ref_link, "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "PASS") != NULL, "%s", r.out);
    run_free(&r);
    r = sim(dir, "profile", via_dots, "--entry", "tensor_add", "--grid", "2x1",
            "--input", "a_input=shape:256x512:fp32", "--input", "b_input=shape:256x512:fp32",
            "--output-dir", od, (char *)NULL);
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    run_free(&r);
    free(dir); free(k); free(kdir); free(link); free(a); free(sub); free(od);
    free(via_link); free(ref_link); free(via_dots);
}
