/* Loading real projects' kernels (issue 21) through sim_run_source and
 * sim_run_kernel: scalar, tuple and object positional arguments, kwargs
 * filling positional parameters (and SIM_E_ARGS when they do not),
 * kernels inside a package with relative imports under an import root,
 * stubs for test-harness libraries that fail only when used, and errors
 * raised in an imported module reported at that module's file and line. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "sim/sim_check.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_nki.h"

static sim_array mk(int64_t d0, int64_t d1)
{
    sim_array a;
    memset(&a, 0, sizeof(a));
    snprintf(a.name, sizeof(a.name), "x");
    a.dtype = SIM_DT_FLOAT32;
    a.ndim = 2;
    a.shape[0] = d0;
    a.shape[1] = d1;
    a.data = kf_calloc((size_t)(d0 * d1), 4);
    for (int64_t i = 0; i < d0 * d1; i++)
        ((float *)a.data)[i] = (float)(i % 13) - 6.0f;
    return a;
}


/* The loader's runs compute values: numerics on, whatever o says. */
static void run_opts(kt_result *r, sim_run_opts *o, const char *src, const char *file, const sim_array *in, size_t n)
{
    o->numerics = true;
    kt_run_opts(r, o, src, file, in, n);
}


static void write_file(const char *dir, const char *rel, const char *text)
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

#define HDR "import nki\nimport nki.language as nl\n\n"

/* out = x * (scale * factor) + len(shape): shape a tuple, cfg an object
 * read by key and by attribute, factor a float. */
static const char args_src[] =
    HDR "def k(x, shape, cfg, factor, bias=0.0):\n"
    "    assert isinstance(shape, tuple) and shape == (4, 8), repr(shape)\n"
    "    assert cfg['scale'] == cfg.scale and cfg.inner.deep == (1, 2)\n"
    "    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
    "    t = nl.load(x)\n"
    "    nl.store(out, t * (cfg.scale * factor) + (len(shape) + bias))\n"
    "    return out\n";

static void check_args_out(const kt_result *r, const sim_array *x, float mul, float add)
{
    cr_assert_eq(r->rc, KF_OK, "%s", r->err.msg);
    cr_assert_eq(r->n_out, 1);
    for (int i = 0; i < 32; i++)
        cr_assert_float_eq(((const float *)r->out[0].data)[i], ((const float *)x->data)[i] * mul + add, 1e-5,
                           "element %d", i);
}

Test(nki_load, scalar_tuple_and_object_positional_arguments)
{
    sim_array x = mk(4, 8);
    sim_run_arg args[] = { { "x", NULL }, { "shape", "[4, 8]" }, { "cfg", "{\"scale\": 2, \"inner\": {\"deep\": [1, 2]}}" },
                           { "factor", "1.5" } };
    sim_run_opts o;
    kt_result r;

    memset(&o, 0, sizeof(o));
    o.args = args;
    o.n_args = 4;
    run_opts(&r, &o, args_src, "kernel.py", &x, 1);
    check_args_out(&r, &x, 3.0f, 2.0f);
    kt_run_done(&r);

    /* kwargs fill positional parameters the arguments leave out */
    memset(&o, 0, sizeof(o));
    o.args = args;
    o.n_args = 3;
    o.kwargs_json = "{\"factor\": 0.5, \"bias\": 1}";
    run_opts(&r, &o, args_src, "kernel.py", &x, 1);
    check_args_out(&r, &x, 1.0f, 3.0f);
    kt_run_done(&r);

    /* an array slot without an array is refused before anything runs */
    memset(&o, 0, sizeof(o));
    o.args = args + 1;
    o.n_args = 3;
    run_opts(&r, &o, args_src, "kernel.py", &x, 1);
    cr_assert_eq(r.rc, KF_INVALID);
    cr_assert(strstr(r.err.msg, "0 argument slots take arrays but 1 inputs") != NULL, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&x);
}

Test(nki_load, sim_e_args_counts_kwargs_and_names_what_is_wrong)
{
    static const struct {
        size_t n_args;
        const char *kwargs, *want;
    } cases[] = {
        /* factor given by name: nothing is missing */
        { 3, "{\"factor\": 2}", NULL },
        { 2, "{\"factor\": 2}", "k is missing 'cfg' (2 positional arguments given" },
        { 2, NULL, "k is missing 'cfg', 'factor'" },
        { 4, "{\"shape\": [4, 8]}", "parameter 'shape' is given twice: as positional argument 2 and in kwargs" },
        { 4, "{\"tile\": 2}", "kwargs gives 'tile', which k does not take" },
    };
    sim_array x = mk(4, 8);
    sim_run_arg args[] = { { "x", NULL }, { "shape", "[4, 8]" }, { "cfg", "{\"scale\": 2, \"inner\": {\"deep\": [1, 2]}}" },
                           { "factor", "1" }, { "bias", "0" }, { "extra", "1" } };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sim_run_opts o;
        kt_result r;
        memset(&o, 0, sizeof(o));
        o.args = args;
        o.n_args = cases[i].n_args;
        o.kwargs_json = cases[i].kwargs;
        run_opts(&r, &o, args_src, "kernel.py", &x, 1);
        if (!cases[i].want) {
            cr_assert_eq(r.rc, KF_OK, "case %zu: %s", i, r.err.msg);
        } else {
            cr_assert_eq(r.serr.code, SIM_E_ARGS, "case %zu: %s", i, r.err.msg);
            cr_assert(strstr(r.serr.values, cases[i].want) != NULL, "case %zu: %s", i, r.serr.values);
            cr_assert_str_eq(r.serr.file, "kernel.py", "case %zu: at the entry's definition", i);
            cr_assert_eq(r.serr.line, 4, "case %zu: at the entry's definition", i);
        }
        kt_run_done(&r);
    }
    /* too many positional arguments */
    {
        sim_run_opts o;
        kt_result r;
        memset(&o, 0, sizeof(o));
        o.args = args;
        o.n_args = 6;
        run_opts(&r, &o, args_src, "kernel.py", &x, 1);
        cr_assert_eq(r.serr.code, SIM_E_ARGS);
        cr_assert(strstr(r.serr.values, "k takes 5 positional arguments, 6 given") != NULL, "%s", r.serr.values);
        kt_run_done(&r);
    }
    sim_array_release(&x);
}

Test(nki_load, the_reference_gets_the_same_arguments)
{
    char *dir = kf_test_tmpdir("load");
    sim_array x = mk(4, 8), *refs = NULL;
    size_t n_refs = 0;
    sim_run_arg args[] = { { "x", NULL }, { "shape", "[4, 8]" }, { "cfg", "{\"scale\": 3}" } };
    kf_err e = KF_ERR_INIT;

    write_file(dir, "ref.py", "import numpy as np\n"
                              "def k(x, shape, cfg, factor):\n"
                              "    assert shape == (4, 8)\n"
                              "    return x * cfg['scale'] * factor\n");
    char *ref = kf_asprintf("%s/ref.py", dir);
    cr_assert_eq(sim_check_reference_args(ref, "k", &x, 1, args, 3, "{\"factor\": 2}", &refs, &n_refs, &e), KF_OK,
                 "%s", e.msg);
    cr_assert_eq(n_refs, 1);
    for (int i = 0; i < 32; i++)
        cr_assert_float_eq(((float *)refs[0].data)[i], ((float *)x.data)[i] * 6.0f, 1e-6);
    sim_check_arrays_free(refs, n_refs);
    sim_array_release(&x);
    free(ref);
    free(dir);
}

/* A package: proj/pkg/{__init__,util,broken}.py, proj/pkg/kernels/k.py
 * importing `..util` and torch-family libraries at module level. */
static char *make_project(void)
{
    char *dir = kf_test_tmpdir("load");
    write_file(dir, "proj/pkg/__init__.py", "");
    write_file(dir, "proj/pkg/kernels/__init__.py", "");
    write_file(dir, "proj/pkg/util.py", "def twice(t):\n"
                                        "    return t * 2.0\n"
                                        "\n"
                                        "def fail(why):\n"
                                        "    raise ValueError(why)\n");
    write_file(dir, "proj/pkg/broken.py", "def f(:\n    pass\n");
    write_file(dir, "proj/pkg/kernels/k.py",
               "import numpy as np\n"
               "import torch\n"
               "import torch.nn.functional as F\n"
               "from torch_xla.core import xla_model as xm\n"
               "from transformers import AutoModelForCausalLM\n"
               "import scipy.special\n"
               "import nki\n"
               "import nki.language as nl\n"
               "from ..util import twice, fail\n"
               "\n"
               "DTYPES = {torch.float32: nl.float32}\n"
               "\n"
               "class Reference(torch.nn.Module):\n"
               "    def forward(self, x):\n"
               "        return F.relu(x)\n"
               "\n"
               "@nki.jit\n"
               "def k(x, mode=0):\n"
               "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
               "    t = nl.load(x)\n"
               "    if mode == 1:\n"
               "        fail('the helper refuses')\n"
               "    if mode == 2:\n"
               "        torch.zeros(3)\n"
               "    if mode == 3:\n"
               "        Reference()\n"
               "    if mode == 4:\n"
               "        y = scipy.special.erf + 1\n"
               "    if mode == 5:\n"
               "        from .. import broken\n"
               "    nl.store(out, twice(t))\n"
               "    return out\n");
    return dir;
}

Test(nki_load, package_kernels_import_relatively_and_stubs_fail_only_when_used)
{
    char *dir = make_project();
    char *root = kf_asprintf("%s/proj", dir), *kfile = kf_asprintf("%s/proj/pkg/kernels/k.py", dir);
    char *util = kf_asprintf("%s/proj/pkg/util.py", dir), *broken = kf_asprintf("%s/proj/pkg/broken.py", dir);
    const char *paths[] = { root, NULL };
    sim_array x = mk(4, 8);
    static const struct {
        int mode, line;
        sim_error_code code;
        const char *file, *api, *want;
    } cases[] = {
        { 1, 5, SIM_E_PYTHON, "util", "", "ValueError: the helper refuses (reached from " },
        { 2, 24, SIM_E_UNSUPPORTED_API, "kernel", "torch.zeros",
          "torch.zeros called: torch is a test-harness library kforge-sim does not provide" },
        { 3, 26, SIM_E_UNSUPPORTED_API, "kernel", "torch.nn.Module", "instantiated" },
        { 4, 28, SIM_E_UNSUPPORTED_API, "kernel", "scipy.special.erf", "used in arithmetic" },
        { 5, 1, SIM_E_SYNTAX, "broken", "", "SyntaxError" },
    };

    for (int pass = 0; pass < 2; pass++) {   /* twice: a second run re-imports the package */
        sim_run_opts o;
        kt_result r;
        memset(&o, 0, sizeof(o));
        o.source_path = kfile;
        o.paths = paths;
        run_opts(&r, &o, NULL, NULL, &x, 1);
        cr_assert_eq(r.rc, KF_OK, "pass %d: %s", pass, r.err.msg);
        for (int i = 0; i < 32; i++)
            cr_assert_float_eq(((float *)r.out[0].data)[i], ((float *)x.data)[i] * 2.0f, 1e-6);
        kt_run_done(&r);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sim_run_opts o;
        kt_result r;
        char kw[32];
        const char *want_file = strcmp(cases[i].file, "util") == 0     ? util
                                : strcmp(cases[i].file, "broken") == 0 ? broken
                                                                       : kfile;
        snprintf(kw, sizeof(kw), "{\"mode\": %d}", cases[i].mode);
        memset(&o, 0, sizeof(o));
        o.source_path = kfile;
        o.paths = paths;
        o.kwargs_json = kw;
        run_opts(&r, &o, NULL, NULL, &x, 1);
        cr_assert_eq(r.serr.code, cases[i].code, "mode %d: %s", cases[i].mode, r.err.msg);
        cr_assert_str_eq(r.serr.file, want_file, "mode %d: %s", cases[i].mode, r.err.msg);
        cr_assert_eq(r.serr.line, cases[i].line, "mode %d: %s", cases[i].mode, r.err.msg);
        cr_assert_str_eq(r.serr.api, cases[i].api, "mode %d", cases[i].mode);
        cr_assert(strstr(r.serr.values, cases[i].want) != NULL, "mode %d: %s", cases[i].mode, r.serr.values);
        kt_run_done(&r);
    }

    /* without the import root the relative import has no package */
    {
        sim_run_opts o;
        kt_result r;
        memset(&o, 0, sizeof(o));
        o.source_path = kfile;
        run_opts(&r, &o, NULL, NULL, &x, 1);
        cr_assert_eq(r.serr.code, SIM_E_PYTHON);
        cr_assert_eq(r.serr.line, 9, "%s", r.err.msg);
        cr_assert(strstr(r.serr.values, "relative import with no known parent package (a relative import "
                                        "needs the folder holding the top package as an import root: "
                                        "kforge-sim --path DIR)") != NULL, "%s", r.serr.values);
        kt_run_done(&r);
    }
    /* without stubs an absent harness library is a plain ImportError at its import */
    {
        sim_run_opts o;
        kt_result r;
        memset(&o, 0, sizeof(o));
        o.source_path = kfile;
        o.paths = paths;
        o.no_stubs = true;
        run_opts(&r, &o, NULL, NULL, &x, 1);
        cr_assert_eq(r.serr.code, SIM_E_PYTHON);
        cr_assert_eq(r.serr.line, 2, "%s", r.err.msg);
        cr_assert(strstr(r.serr.values, "No module named 'torch'") != NULL, "%s", r.serr.values);
        kt_run_done(&r);
    }
    /* and the stubs are gone from the next run that asks for none */
    {
        sim_run_opts o;
        kt_result r;
        memset(&o, 0, sizeof(o));
        o.no_stubs = true;
        run_opts(&r, &o, HDR "import torch\ndef k(x):\n    return x\n", "kernel.py", &x, 1);
        cr_assert_eq(r.serr.code, SIM_E_PYTHON, "%s", r.err.msg);
        cr_assert_eq(r.serr.line, 4);
        kt_run_done(&r);
    }
    sim_array_release(&x);
    free(root); free(kfile); free(util); free(broken); free(dir);
}

Test(nki_load, an_error_in_a_helper_next_to_the_kernel_points_at_the_helper)
{
    char *dir = kf_test_tmpdir("load");
    write_file(dir, "helpers.py", "import nki.language as nl\n"
                                  "\n"
                                  "def tile(x):\n"
                                  "    return nl.ndarray((256, 4), dtype=x.dtype, buffer=nl.sbuf)\n"
                                  "\n"
                                  "def bad():\n"
                                  "    return {}['missing']\n");
    write_file(dir, "kern.py", HDR "import helpers\n"
                               "def k(x, which=0):\n"
                               "    if which:\n"
                               "        helpers.bad()\n"
                               "    helpers.tile(x)\n"
                               "    return x\n");
    char *kfile = kf_asprintf("%s/kern.py", dir), *hfile = kf_asprintf("%s/helpers.py", dir);
    sim_array x = mk(4, 8);
    sim_run_opts o;
    kt_result r;

    memset(&o, 0, sizeof(o));
    o.source_path = kfile;
    run_opts(&r, &o, NULL, NULL, &x, 1);        /* an NKI rule broken in the helper */
    cr_assert_eq(r.serr.code, SIM_E_PARTITION_LIMIT, "%s", r.err.msg);
    cr_assert_str_eq(r.serr.file, hfile);
    cr_assert_eq(r.serr.line, 4);
    kt_run_done(&r);

    memset(&o, 0, sizeof(o));
    o.source_path = kfile;
    o.kwargs_json = "{\"which\": 1}";
    run_opts(&r, &o, NULL, NULL, &x, 1);        /* a Python exception raised in the helper */
    cr_assert_eq(r.serr.code, SIM_E_PYTHON, "%s", r.err.msg);
    cr_assert_str_eq(r.serr.file, hfile);
    cr_assert_eq(r.serr.line, 7);
    cr_assert_str_eq(r.serr.func, "bad");
    cr_assert(strstr(r.serr.values, "KeyError") != NULL, "%s", r.serr.values);
    char *from = kf_asprintf("(reached from %s:7)", kfile);
    cr_assert(strstr(r.serr.values, from) != NULL, "%s", r.serr.values);
    kt_run_done(&r);
    sim_array_release(&x);
    free(from); free(kfile); free(hfile); free(dir);
}

/* loguru is a harness library too: `from loguru import logger` at module
 * level loads, and logging from the kernel fails loudly at its line. */
Test(nki_load, loguru_is_stubbed_and_fails_only_when_used)
{
    const char *src =
        "from loguru import logger\n"
        HDR
        "@nki.jit\n"
        "def k(x, mode=0):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    if mode == 1:\n"
        "        logger.info('tile loaded')\n"
        "    nl.store(out, nl.load(x))\n"
        "    return out\n";
    sim_array x = mk(4, 8);
    kt_result r;
    sim_run_opts o;

    kt_run(&r, src, "k", &x, 1, 0, 0, true);
    cr_assert_eq(r.rc, KF_OK, "%s", r.err.msg);
    kt_run_done(&r);
    memset(&o, 0, sizeof(o));
    o.entry = "k";
    o.kwargs_json = "{\"mode\": 1}";
    o.numerics = true;
    kt_run_opts(&r, &o, src, "kernel.py", &x, 1);
    cr_assert_eq(r.serr.code, SIM_E_UNSUPPORTED_API, "%s", r.err.msg);
    cr_assert_str_eq(r.serr.api, "loguru.logger.info", "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 9, "%s", r.err.msg);
    kt_run_done(&r);
    sim_array_release(&x);
}

/* The old SDK's output-by-argument decorator is not simulated; its error
 * says how to run the kernel. */
Test(nki_load, torch_neuronx_nki_jit_says_how_to_run_the_kernel)
{
    const char *src =
        "import torch_neuronx\n"
        HDR
        "@torch_neuronx.nki_jit\n"
        "def k(x, out):\n"
        "    nl.store(out, nl.load(x))\n";
    sim_array x = mk(4, 8);
    kt_result r;

    kt_run(&r, src, "k", &x, 1, 0, 0, true);
    cr_assert_eq(r.serr.code, SIM_E_UNSUPPORTED_API, "%s", r.err.msg);
    cr_assert_str_eq(r.serr.api, "torch_neuronx.nki_jit", "%s", r.err.msg);
    cr_assert_eq(r.serr.line, 5, "%s", r.err.msg);
    cr_assert(strstr(r.serr.values, "decorate it with @nki.jit") != NULL, "%s", r.serr.values);
    cr_assert(strstr(r.serr.values, "buffer=nl.shared_hbm) and return it") != NULL, "%s",
              r.serr.values);
    kt_run_done(&r);
    sim_array_release(&x);
}
