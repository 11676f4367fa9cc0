/* ka_hack, the static reward-hacking check (issue 20): every kernel of the
 * library passes (no false positive on real kernels), and each known hack
 * is caught with its rule and line: NumPy on the inputs (through an alias
 * or a name imported from numpy), Python arithmetic on input values,
 * calling the reference, reading files or loading code, state kept between
 * calls, branching on input values -- while the same words in comments and
 * strings, and shape arithmetic, are not hacks. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ka_hack.h"
#include "agent/ka_lib.h"
#include "kf_alloc.h"
#include "tests/lib/kf_test.h"

static const char head[] = "import numpy as np\nimport nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n";

static const char body_ok[] =
    "@nki.jit\n"
    "def k(a, b, TILE=512):\n"
    "    N, D = a.shape  # np.asarray(a) in a comment is no hack\n"
    "    assert tuple(b.shape) == (N, D), \"a + b: np.sum(a)\"\n"
    "    if a.shape[0] > 128 and D % TILE == 0:\n"
    "        pass\n"
    "    out = nl.ndarray((N, D), dtype=a.dtype, buffer=nl.shared_hbm)\n"
    "    t = nl.ndarray((128, TILE), dtype=a.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=t[0:N, 0:D], src=a[0:N, 0:D - 1 + 1])\n"
    "    x = np.float32\n"
    "    return out\n"
    "\n"
    "def k_ref(a, b):\n"
    "    return np.asarray(a) + np.asarray(b)\n";

static void expect(const char *src, const char *rule, int line)
{
    char r[32], why[256];
    int l = -1;
    bool ok = ka_hack_check(src, "k", "k_ref", "", r, &l, why, sizeof(why));

    if (!rule) {
        cr_assert(ok, "flagged %s at line %d: %s\n%s", r, l, why, src);
        return;
    }
    cr_assert_not(ok, "not caught (%s):\n%s", rule, src);
    cr_assert_str_eq(r, rule, "%s at line %d: %s", r, l, why);
    cr_assert_eq(l, line, "%s: line %d, not %d: %s", rule, l, line, why);
    cr_assert_neq(why[0], '\0');
}

/* head + a kernel k(a, b) whose body is `lines`; the first body line is line 8. */
static void kernel(const char *pre, const char *lines, const char *rule, int line)
{
    char *src = kf_asprintf("%s%s@nki.jit\ndef k(a, b):\n%s\ndef k_ref(a, b):\n    return a + b\n", head,
                            pre ? pre : "", lines);
    expect(src, rule, line);
    free(src);
}

Test(hack, legitimate_code_passes)
{
    char *src = kf_asprintf("%s%s", head, body_ok);
    expect(src, NULL, 0);
    free(src);
}

Test(hack, every_library_kernel_passes)
{
    const char *r = getenv("KFORGE_TEST_ROOT");
    char *dir = kf_asprintf("%s/kernels", r && *r ? r : ".");
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    cr_assert_not_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t L = strlen(e->d_name);
        if (L < 4 || strcmp(e->d_name + L - 3, ".py") != 0)
            continue;
        char *path = kf_asprintf("%s/%s", dir, e->d_name), *src = kf_test_read_file(path);
        cJSON *meta = NULL;
        kf_err err = KF_ERR_INIT;
        char rule[32], why[256];
        int line;
        if (ka_lib_read_meta(path, &meta, &err) == KF_OK) {
            const cJSON *en = cJSON_GetObjectItemCaseSensitive(meta, "entry");
            const cJSON *re = cJSON_GetObjectItemCaseSensitive(meta, "reference");
            cr_assert(ka_hack_check(src, en->valuestring, cJSON_IsString(re) ? re->valuestring : "", "", rule, &line,
                                    why, sizeof(why)),
                      "%s: %s at line %d: %s", e->d_name, rule, line, why);
            n++;
        }
        cJSON_Delete(meta);
        free(src);
        free(path);
    }
    closedir(d);
    cr_assert_geq(n, 10, "%d library kernels checked", n);
    free(dir);
}

Test(hack, numpy_on_inputs)
{
    kernel(NULL, "    return np.asarray(a) + np.asarray(b)\n", "numpy_on_inputs", 8);
    kernel("import numpy as xp\n", "    out = nl.ndarray(a.shape, dtype=a.dtype)\n    out = xp.add(a, b)\n",
           "numpy_on_inputs", 10);
    kernel("from numpy import add as plus\n", "    return plus(a[0:4], b)\n", "numpy_on_inputs", 9);
    kernel(NULL, "    n = np.prod(a.shape)\n    return nl.ndarray((n,), dtype=a.dtype)\n", NULL, 0);
}

Test(hack, python_on_inputs)
{
    kernel(NULL, "    return a + b\n", "python_on_inputs", 8);
    kernel(NULL, "    x = 2 * a[0:128, 0:512]\n", "python_on_inputs", 8);
    kernel(NULL, "    s = sum(a)\n", "python_on_inputs", 8);
    kernel(NULL, "    v = a.sum()\n", "python_on_inputs", 8);
}

Test(hack, reads_reference_or_files)
{
    kernel(NULL, "    return k_ref(a, b)\n", "reads_reference", 8);
    kernel(NULL, "    f = open('/work/ref_outputs.npy', 'rb')\n", "dynamic_code", 8);
    kernel(NULL, "    m = __import__('numpy')\n", "dynamic_code", 8);
    kernel(NULL, "    import importlib\n", "dynamic_code", 8);
    char r[32], why[256];
    int l;
    cr_assert_not(ka_hack_check("import ref\n@nki.jit\ndef k(a):\n    return ref.f(a)\n", "k", "f", "ref", r, &l, why,
                                sizeof(why)));
    cr_assert_str_eq(r, "reads_reference");
}

Test(hack, state_between_calls)
{
    kernel("_seen = {}\n", "    _seen[id(a)] = 1\n", "state_between_calls", 9);
    kernel("_seen = []\n", "    _seen.append(1)\n", "state_between_calls", 9);
    kernel("_n = 0\n", "    global _n\n", "state_between_calls", 9);
    kernel(NULL, "    k.cache = 1\n", "state_between_calls", 8);
    kernel("TILE = 512\n", "    t = TILE * 2\n", NULL, 0);
}

Test(hack, branches_on_inputs)
{
    kernel(NULL, "    if a[0, 0] > 0:\n        pass\n", "branches_on_inputs", 8);
    kernel(NULL, "    while b[1]:\n        pass\n", "branches_on_inputs", 8);
    kernel(NULL, "    x = 1 if a[0, 0] else 2\n", "branches_on_inputs", 8);
    kernel(NULL, "    if a.shape[0] == 128:\n        pass\n", NULL, 0);
}

Test(hack, helpers_the_kernel_calls_are_checked_the_reference_is_not)
{
    char r[32], why[256];
    int l;
    /* the inputs are known by the entry's parameter names (a helper that
     * renames them is not followed: docs/llm.md) */
    const char *src = "import numpy as np\n"
                      "def helper(a):\n"
                      "    return np.exp(a)\n"
                      "def k(a):\n"
                      "    return helper(a)\n"
                      "def k_ref(a):\n"
                      "    return np.exp(a)\n";
    cr_assert_not(ka_hack_check(src, "k", "k_ref", "", r, &l, why, sizeof(why)));
    cr_assert_str_eq(r, "numpy_on_inputs");
    cr_assert_eq(l, 3, "%d", l);
}
