/* kforge-worker --self-test against the device-tool doubles
 * (tests/doubles/neuron): every checklist item passes on a healthy
 * "device"; a wedged one fails at the health item with the runtime's
 * message, and the exit status says so. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "tests/lib/kf_test.h"
#include "workers/kf_backend.h"

/* Run the self-test with PATH = the doubles' folder + the build's bin;
 * its output into *out (caller frees); the exit status. */
static int self_test(const char *doubles, char **out)
{
    char *bin = kf_test_bin("kforge-worker"), *bindir = kf_strdup(bin);
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *cmd, line[1024];
    kf_buf b = KF_BUF_INIT;
    FILE *p;
    int st;

    *strrchr(bindir, '/') = '\0';
    cmd = kf_asprintf("env -i PATH=%s:%s:/usr/bin:/bin KFORGE_SIM_TARGETS=%s/sim/targets KFORGE_WORKER_TARGETS=trn2 "
                      "%s --self-test 2>&1",
                      doubles, bindir, root, bin);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    while (fgets(line, sizeof(line), p))
        kf_buf_adds(&b, line);
    st = pclose(p);
    *out = kf_buf_detach(&b);
    free(cmd);
    free(bindir);
    free(bin);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(selftest, passes_on_a_healthy_device_and_fails_at_health_on_a_wedged_one, .timeout = 180)
{
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *dir = kf_test_tmpdir("neuron-st"), *out = NULL, *w;
    const char *names[] = { "kforge-neuron-runner", "neuron-explorer", NULL };
    FILE *f;

    for (int i = 0; names[i]; i++) {
        char *src = kf_asprintf("%s/tests/doubles/neuron/%s", root, names[i]);
        char *dst = kf_asprintf("%s/%s", dir, names[i]);
        cr_assert_eq(symlink(src, dst), 0, "%s", dst);
        free(src);
        free(dst);
    }
    cr_assert_eq(self_test(dir, &out), 0, "%s", out);
    cr_assert(strstr(out, "[ ok ] device outputs equal the NumPy reference (3 seeds, every element): 3 checks"), "%s",
              out);
    cr_assert(strstr(out, "[ ok ] artifacts: kernel.neff"), "%s", out);
    cr_assert(strstr(out, "self-test passed"), "%s", out);
    cr_assert_null(strstr(out, "[FAIL]"), "%s", out);
    free(out);

    w = kf_asprintf("%s/wedged", dir);
    f = fopen(w, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(self_test(dir, &out), 1, "%s", out);
    cr_assert(strstr(out, "[FAIL] device health (runner health)") && strstr(out, "NRT_TIMEOUT"), "%s", out);
    unlink(w);
    free(w);
    free(out);
    free(dir);
}

/* Health is per backend: a wedged device fails only the neuron backend's
 * check; sim and diag (no device) stay healthy on the same machine. */
Test(selftest, a_wedged_device_fails_only_the_neuron_backends_health, .timeout = 60)
{
    const char *root = kf_test_env("KFORGE_TEST_ROOT");
    char *dir = kf_test_tmpdir("neuron-health"), why[600];
    char *src = kf_asprintf("%s/tests/doubles/neuron/kforge-neuron-runner", root);
    char *dst = kf_asprintf("%s/kforge-neuron-runner", dir), *w = kf_asprintf("%s/wedged", dir);
    char *path = kf_asprintf("%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    FILE *f;

    cr_assert_eq(symlink(src, dst), 0, "%s", dst);
    cr_assert_eq(setenv("PATH", path, 1), 0);
    cr_assert(kf_backend_healthy("neuron", why, sizeof(why)), "a healthy device: %s", why);
    cr_assert_str_eq(why, "");
    f = fopen(w, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert(kf_backend_healthy("sim", why, sizeof(why)), "sim has no device: %s", why);
    cr_assert(kf_backend_healthy("diag", why, sizeof(why)), "%s", why);
    cr_assert_not(kf_backend_healthy("neuron", why, sizeof(why)));
    cr_assert(strstr(why, "NRT_TIMEOUT") != NULL, "%s", why);
    unlink(w);
    free(src);
    free(dst);
    free(w);
    free(path);
    free(dir);
}
