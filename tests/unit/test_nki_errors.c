/* Compile-like errors: one small kernel per simulator error code, each must
 * stop with that code at the marked line with the values in the message;
 * docs/sim-errors.md must list every code. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim/sim_run.h"
#include "tests/lib/kf_test.h"

typedef struct neg_case {
    sim_error_code code;
    int line;               /* expected line, 0 = not checked */
    const char *needle;     /* must appear in the message */
    const char *src;
    int n_inputs;           /* (128, 64) fp32 inputs */
} neg_case;

#define HDR "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n@nki.jit\n"
#define LHDR "from neuronxcc import nki\nimport neuronxcc.nki.language as nl\n" \
             "import neuronxcc.nki.isa as nisa\n@nki.jit\n"

/* A zeroed fp32 input of shape (d0,) or (d0, d1); the caller frees in->data. */
static void fp32_zeros(sim_array *in, int ndim, int64_t d0, int64_t d1)
{
    memset(in, 0, sizeof(*in));
    in->dtype = SIM_DT_FLOAT32;
    in->ndim = ndim;
    in->shape[0] = d0;
    if (ndim == 2)
        in->shape[1] = d1;
    in->data = kf_calloc((size_t)(d0 * (ndim == 2 ? d1 : 1)), 4);
}

/* Run kernel k of src (as file) on target; the record is dropped, the
 * result code, error and outputs are the caller's to check. */
static kf_code run_k(const char *target, const char *src, const char *file, bool numerics,
                     const sim_array *in, size_t n_in, sim_array **out, size_t *n_out,
                     sim_error *se, kf_err *err)
{
    sim_run_opts o;
    sim_record rec;
    kf_code rc;

    memset(&o, 0, sizeof(o));
    o.entry = "k";
    o.target = target;
    o.numerics = numerics;
    sim_record_init(&rec, target);
    rc = sim_run_source(&o, src, file, in, n_in, out, n_out, &rec, se, err);
    sim_record_release(&rec);
    return rc;
}

static const neg_case cases[] = {
    { SIM_E_PYTHON, 7, "ValueError: N=128",
      HDR "def k(x):\n    N, D = x.shape\n    raise ValueError(f'N={N} is wrong')\n", 1 },
    { SIM_E_SYNTAX, 6, "SyntaxError", HDR "def k(x):\n    for i in range(3)\n        pass\n", 1 },
    { SIM_E_ENTRY, 0, "no function 'k'", HDR "def other(x):\n    return x\n", 1 },
    { SIM_E_ARGS, 4, "k is missing 'y'", HDR "def k(x, y):\n    return x\n", 1 },
    { SIM_E_UNSUPPORTED_API, 7, "nki.isa.nc_stream_shuffle",
      HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    nisa.nc_stream_shuffle(src=t, dst=t, shuffle_mask=[0] * 32)\n    return x\n", 1 },
    { SIM_E_PARTITION_LIMIT, 6, "256 > 128",
      HDR "def k(x):\n    t = nl.ndarray((256, 64), dtype=x.dtype, buffer=nl.sbuf)\n    return x\n", 1 },
    { SIM_E_PARTITION_START, 8, "the moving operand covers 64 partitions from partition 32",
      HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
          "    acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)\n"
          "    nisa.nc_matmul(dst=acc, stationary=t[0:64, :], moving=t[32:96, :])\n    return x\n", 1 },
    { SIM_E_PSUM_TILE, 6, "4096 bytes per partition > 2048",
      LHDR "def k(x):\n    acc = nl.zeros((128, 1024), dtype=nl.float32, buffer=nl.psum)\n    return x\n", 1 },
    { SIM_E_PSUM_CAPACITY, 8, "size: 18432 bytes per partition live at once",
      HDR "def k(x):\n    live = []\n    for i in range(9):\n"
          "        live.append(nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum))\n    return x\n", 1 },
    { SIM_E_SBUF_CAPACITY, 8, "229376",
      HDR "def k(x):\n    live = []\n    for i in range(8):\n"
          "        live.append(nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf))\n    return x\n", 1 },
    { SIM_E_SHAPE_MISMATCH, 8, "128 partitions x 512 elements",
      HDR "def k(x):\n    a = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    b = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)\n    return x\n", 1 },
    { SIM_E_WRONG_BUFFER, 9, "PSUM",
      HDR "def k(x):\n    a = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    b = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
          "    nisa.nc_matmul(dst=r, stationary=a, moving=b)\n    return x\n", 1 },
    { SIM_E_MATMUL_LIMIT, 8, "N=1024",
      LHDR "def k(x):\n    a = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)\n"
           "    b = nl.ndarray((128, 1024), dtype=x.dtype, buffer=nl.sbuf)\n"
           "    r = nisa.nc_matmul(a, b)\n    return x\n", 1 },
    { SIM_E_DTYPE, 9, "int32",
      HDR "def k(x):\n    a = nl.ndarray((128, 128), dtype=nl.int32, buffer=nl.sbuf)\n"
          "    b = nl.ndarray((128, 512), dtype=nl.int32, buffer=nl.sbuf)\n"
          "    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)\n"
          "    nisa.nc_matmul(dst=r, stationary=a, moving=b)\n    return x\n", 1 },
    { SIM_E_INDEX_OUT_OF_BOUNDS, 7, "slice end 256 > size 128",
      HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    nisa.dma_copy(dst=t, src=x[128:256, :])\n    return x\n", 1 },
    { SIM_E_BAD_INDEX, 7, "float",
      HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    u = t[0:128, 0.5]\n    return x\n", 1 },
    { SIM_E_BAD_ARGUMENT, 7, "value must be a number",
      HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)\n"
          "    nisa.memset(dst=t, value='zero')\n    return x\n", 1 },
    { SIM_E_OUTPUT, 0, "an SBUF tile",
      HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)\n    return t\n", 1 },
    { SIM_E_LIMIT, 6, "2^36",
      HDR "def k(x):\n    h = nl.ndarray((1 << 20, 1 << 20), dtype=nl.float32, buffer=nl.shared_hbm)\n"
          "    return h\n", 1 },
};

Test(nki_errors, every_code_has_a_negative_case)
{
    for (int c = SIM_E_PYTHON; c < SIM_E__COUNT; c++) {
        bool found = false;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            found |= cases[i].code == (sim_error_code)c;
        cr_expect(found, "no negative case for SIM_E_%s", sim_error_name((sim_error_code)c));
    }
}

Test(nki_errors, each_rule_stops_the_kernel_with_code_line_and_values)
{
    sim_array in;
    fp32_zeros(&in, 2, 128, 64);
    snprintf(in.name, sizeof(in.name), "x");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const neg_case *nc = &cases[i];
        sim_error se;
        kf_err err = KF_ERR_INIT;
        sim_array *out = NULL;
        size_t n_out = 0;
        kf_code rc = run_k("trn2", nc->src, "neg.py", true, &in, (size_t)nc->n_inputs, &out, &n_out,
                           &se, &err);

        cr_expect_eq(rc, KF_INVALID, "case %zu (SIM_E_%s) ran", i, sim_error_name(nc->code));
        cr_expect_eq(se.code, nc->code, "case %zu: expected SIM_E_%s, got SIM_E_%s: %s", i,
                     sim_error_name(nc->code), sim_error_name(se.code), err.msg);
        if (nc->line)
            cr_expect_eq(se.line, nc->line, "case %zu (SIM_E_%s): line %d, expected %d: %s", i,
                         sim_error_name(nc->code), se.line, nc->line, err.msg);
        cr_expect(strstr(err.msg, nc->needle) != NULL, "case %zu: '%s' not in: %s", i, nc->needle,
                  err.msg);
        cr_expect(strstr(err.msg, sim_error_name(nc->code)) != NULL, "case %zu: %s", i, err.msg);
        cr_expect(strstr(err.msg, sim_error_rule(nc->code)) != NULL, "case %zu: %s", i, err.msg);
        cr_expect_null(out);
    }
    free(in.data);
}

Test(nki_errors, unknown_language_attribute_names_the_api)
{
    const char *src = HDR "def k(x):\n    y = nl.softmax_v9(x)\n    return x\n";
    sim_array in;
    sim_error se;
    kf_err err = KF_ERR_INIT;

    fp32_zeros(&in, 1, 4, 0);
    cr_assert_eq(run_k("trn1", src, "u.py", false, &in, 1, NULL, NULL, &se, &err), KF_INVALID);
    cr_assert_eq(se.code, SIM_E_UNSUPPORTED_API);
    cr_assert_str_eq(se.api, "nki.language.softmax_v9");
    cr_assert_eq(se.line, 6);
    cr_assert_str_eq(se.file, "u.py");
    free(in.data);
}

Test(nki_errors, docs_list_every_code)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    char path[1024], *doc;

    snprintf(path, sizeof(path), "%s/docs/sim-errors.md", root && *root ? root : ".");
    doc = kf_test_read_file(path);
    for (int c = 0; c < SIM_E__COUNT; c++) {
        char name[80];
        snprintf(name, sizeof(name), "SIM_E_%s", sim_error_name((sim_error_code)c));
        cr_expect(strstr(doc, name) != NULL, "%s does not document %s", path, name);
        cr_expect(strstr(doc, sim_error_rule((sim_error_code)c)) != NULL,
                  "%s does not state the rule of %s", path, name);
    }
    free(doc);
}

/* The issue 21 checklist of docs/sim-nki.md names, for every bullet, the
 * tests that prove it (`suite::name`): each must be a test of tests/unit,
 * so the checklist cannot point at a renamed or deleted test. */
Test(nki_errors, issue_21_checklist_names_tests_that_exist)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    char path[1024], *doc, *sec, *end, *all = NULL;
    size_t all_len = 0;
    int named = 0;
    DIR *d;
    struct dirent *de;

    root = root && *root ? root : ".";
    snprintf(path, sizeof(path), "%s/docs/sim-nki.md", root);
    doc = kf_test_read_file(path);
    sec = strstr(doc, "\n## Issue 21 checklist");
    cr_assert_not_null(sec, "%s has no issue 21 checklist", path);
    end = strstr(sec + 1, "\n## ");
    if (end)
        *end = '\0';
    /* every test source of tests/unit, concatenated */
    snprintf(path, sizeof(path), "%s/tests/unit", root);
    d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        char file[1400], *text;
        if (n < 3 || strcmp(de->d_name + n - 2, ".c") != 0)
            continue;
        snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
        text = kf_test_read_file(file);
        all = kf_realloc(all, all_len + strlen(text) + 2);
        memcpy(all + all_len, text, strlen(text));
        all_len += strlen(text);
        all[all_len++] = '\n';
        all[all_len] = '\0';
        free(text);
    }
    closedir(d);
    cr_assert_not_null(all);
    for (const char *q = sec; (q = strchr(q, '`')) != NULL;) {
        const char *b = ++q, *c = strchr(b, '`'), *sep;
        char want[256], suite[128];
        if (!c)
            break;
        q = c + 1;
        sep = strstr(b, "::");
        if (!sep || sep > c || (size_t)(c - b) >= sizeof(suite))
            continue;
        bool ident = true;
        for (const char *x = b; x < c; x++)
            if (!(islower((unsigned char)*x) || isdigit((unsigned char)*x) || *x == '_' || *x == ':'))
                ident = false;
        if (!ident)
            continue;
        snprintf(suite, sizeof(suite), "%.*s", (int)(sep - b), b);
        /* Test(suite, name) or ParameterizedTest(param, suite, name) */
        snprintf(want, sizeof(want), "%s, %.*s", suite, (int)(c - sep - 2), sep + 2);
        bool found = false;
        for (const char *h = all; (h = strstr(h, want)) != NULL; h++) {
            char after = h[strlen(want)];
            int at_start = h == all || h[-1] == '(' || h[-1] == ' ';
            if ((after == ')' || after == ',') && at_start) {
                found = true;
                break;
            }
        }
        cr_expect(found, "docs/sim-nki.md names %.*s, which is no test in tests/unit", (int)(c - b), b);
        named++;
    }
    cr_assert_geq(named, 40, "the checklist names %d tests", named);
    free(all);
    free(doc);
}

Test(nki_errors, unsupported_keywords_and_imports_name_the_api)
{
    static const struct {
        const char *src, *api, *needle;
        int line;
    } cs[] = {
        { HDR "def k(x):\n    t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)\n"
              "    nisa.memset(dst=t, value=0.0, fancy=1)\n    return x\n",
          "nisa.memset", "keyword argument 'fancy'", 7 },
        { "import nki\nfrom nki.isa import nc_find_index8\n@nki.jit\ndef k(x):\n    return x\n",
          "nki.isa.nc_find_index8", "nc_find_index8", 2 },
        { "from neuronxcc import nki\nimport neuronxcc.nki.language as nl\n@nki.jit\n"
          "def k(x):\n    return nl.dropout(x, rate=0.1)\n",
          "nki.language.dropout", "dropout", 5 },
        /* not disguised as a rule: a tile indexing an on-chip tensor is tensor
         * indirection (an HBM tensor indexed by a tile is an indirect DMA) */
        { "from neuronxcc import nki\nimport neuronxcc.nki.language as nl\n@nki.jit\n"
          "def k(x):\n    t = nl.load(x)\n    u = t[t]\n    return x\n",
          "tensor[...]", "(tensor indirection) is not simulated", 6 },
        /* an indirect access pattern */
        { HDR "def k(x):\n    t = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)\n"
              "    v = x.ap([[1, 1]], 0, vector_offset=t)\n    return x\n",
          "tensor.ap", "vector_offset (an indirect access pattern) is not simulated", 7 },
        /* NeuronCore-v4 tensor indirection by the view method: refused by
         * name (its parameters are not in the reference kforge reads) */
        { HDR "def k(x):\n    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
              "    i = nl.ndarray((16, 4), dtype=nl.uint16, buffer=nl.sbuf)\n"
              "    v = t.indirect(i)\n    return x\n",
          "tensor.indirect", "tensor indirection (an on-chip tensor's columns", 8 },
        /* a tensor method kforge lacks is no raw AttributeError */
        { HDR "def k(x):\n    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
              "    v = t.vector_select(0)\n    return x\n",
          "tensor", "tensor.vector_select is not implemented", 7 },
        { HDR "def k(x):\n    a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)\n"
              "    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)\n"
              "    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)\n"
              "    nisa.nc_matmul(dst=r, stationary=a, moving=b,\n"
              "                   perf_mode='quad_row')\n"
              "    return x\n",
          "nisa.nc_matmul", "perf_mode='quad_row' is not simulated", 9 },
    };
    sim_array in;

    fp32_zeros(&in, 1, 4, 0);
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
        sim_error se;
        kf_err err = KF_ERR_INIT;

        cr_expect_eq(run_k("trn2", cs[i].src, "u.py", false, &in, 1, NULL, NULL, &se, &err),
                     KF_INVALID, "case %zu ran", i);
        cr_expect_eq(se.code, SIM_E_UNSUPPORTED_API, "case %zu: %s", i, err.msg);
        cr_expect_str_eq(se.api, cs[i].api, "case %zu: %s", i, err.msg);
        cr_expect(strstr(err.msg, cs[i].needle) != NULL, "case %zu: %s", i, err.msg);
        cr_expect_eq(se.line, cs[i].line, "case %zu: %s", i, err.msg);
    }
    free(in.data);
}

/* More rules, each with the code, line and a fragment of the values. */
Test(nki_errors, more_rules_have_precise_messages)
{
#define T "    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
#define P "    p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)\n"
    static const neg_case more[] = {
        { SIM_E_WRONG_BUFFER, 7, "src must be in HBM",
          LHDR "def k(x):\n" T "    u = nl.load(t)\n    return x\n", 1 },
        { SIM_E_WRONG_BUFFER, 7, "cannot write PSUM",
          HDR "def k(x):\n" P "    nisa.dma_copy(dst=p, src=x)\n    return x\n", 1 },
        { SIM_E_WRONG_BUFFER, 8, "at most one input",
          HDR "def k(x):\n" P "    q = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)\n"
              "    nisa.tensor_tensor(dst=p, data1=p, data2=q, op=nl.add)\n    return x\n", 1 },
        { SIM_E_SHAPE_MISMATCH, 7, "dst has 4096 elements, src 8192",
          HDR "def k(x):\n    t = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
              "    nisa.dma_copy(dst=t, src=x)\n    return x\n", 1 },
        { SIM_E_SHAPE_MISMATCH, 9, "stationary K=128, moving K=64",
          HDR "def k(x):\n    a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
              "    b = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
              "    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)\n"
              "    nisa.nc_matmul(dst=r, stationary=a, moving=b)\n    return x\n", 1 },
        { SIM_E_BAD_ARGUMENT, 7, "partition axis 0 cannot be reduced",
          LHDR "def k(x):\n" T "    s = nl.sum(t, axis=0)\n    return x\n", 1 },
        { SIM_E_SHAPE_MISMATCH, 7, "not contiguous",
          HDR "def k(x):\n" T "    u = t[:, 0:64:2].reshape((128, 2, 16))\n    return x\n", 1 },
        { SIM_E_BAD_ARGUMENT, 7, "partition step is 1",
          HDR "def k(x):\n" T "    u = t.ap(pattern=[[1, 128], [1, 64]], offset=0)\n    return x\n", 1 },
        { SIM_E_UNSUPPORTED_API, 8, "not affine",
          LHDR "def k(x):\n    i = nl.arange(4)[:, None]\n    j = nl.arange(4)[None, :]\n"
               "    e = i * j\n    return x\n", 1 },
        { SIM_E_SHAPE_MISMATCH, 8, "operand shapes 128x64 and 64x128 do not broadcast",
          LHDR "def k(x):\n" T "    u = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
               "    w = t + u\n    return x\n", 1 },
        { SIM_E_WRONG_BUFFER, 8, "x must be an SBUF tile, it is in PSUM",
          LHDR "def k(x):\n" T "    p = nl.transpose(t[:, 0:64])\n"
               "    r = nl.matmul(p, t[0:64, :])\n    return x\n", 1 },
        { SIM_E_DTYPE, 6, "unknown dtype 'float64'",
          HDR "def k(x):\n    t = nl.ndarray((4, 4), dtype='float64', buffer=nl.sbuf)\n    return x\n", 1 },
        /* NKI dtypes NumPy has no type for (no ml_dtypes): the feature named,
         * not NumPy's TypeError */
        { SIM_E_UNSUPPORTED_API, 7, "NumPy cannot use nl.bfloat16 as a dtype",
          "import numpy as np\n" HDR "def k(x):\n    s = np.dtype(nl.bfloat16).itemsize\n    return x\n", 1 },
        { SIM_E_UNSUPPORTED_API, 7, "use nl.float8_e5m2.itemsize",
          "import numpy as np\n" HDR "def k(x):\n    z = np.zeros((2, 2), dtype=nl.fp8_e5m2)\n    return x\n", 1 },
        /* a dtype NumPy has stays NumPy's; another TypeError stays the kernel's */
        { SIM_E_PYTHON, 7, "TypeError: Cannot interpret '<object object at",
          "import numpy as np\n" HDR "def k(x):\n    z = np.dtype(object())\n    return x\n", 1 },
        /* a column past the end lands inside the tensor's storage (the next
         * row): checked per dimension, not against the storage */
        { SIM_E_INDEX_OUT_OF_BOUNDS, 7, "selected by the mask: index 64 on dimension 1",
          LHDR "def k(x):\n    i_p, i_f = nl.mgrid[0:64, 0:64]\n"
               "    u = nl.load(x[i_p, i_f + 8], mask=(i_f < 60))\n    return x\n", 1 },
        { SIM_E_INDEX_OUT_OF_BOUNDS, 8, "index expression spans [0, 127] on dimension 1 of size 64",
          LHDR "def k(x):\n    i_p = nl.arange(128)[:, None]\n    i_f = nl.arange(128)[None, :]\n"
               "    u = nl.load(x[i_p, i_f])\n    return x\n", 1 },
    };
#undef T
#undef P
    sim_array in;
    fp32_zeros(&in, 2, 128, 64);
    for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
        sim_error se;
        kf_err err = KF_ERR_INIT;

        cr_expect_eq(run_k("trn2", more[i].src, "m.py", true, &in, 1, NULL, NULL, &se, &err),
                     KF_INVALID, "case %zu ran", i);
        cr_expect_eq(se.code, more[i].code, "case %zu: expected SIM_E_%s: %s", i,
                     sim_error_name(more[i].code), err.msg);
        cr_expect_eq(se.line, more[i].line, "case %zu: line %d: %s", i, se.line, err.msg);
        cr_expect(strstr(err.msg, more[i].needle) != NULL, "case %zu: '%s' not in %s", i,
                  more[i].needle, err.msg);
    }
    free(in.data);
}

Test(nki_errors, negative_sizes_in_views_are_refused)
{
    static const char *const srcs[] = {
        HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
            "    u = t.ap(pattern=[[64, 2], [1, -3]], offset=0)\n    return x\n",
        HDR "def k(x):\n    u = x.reshape((-2, -4096))\n    return x\n",
        HDR "def k(x):\n    u = x.reshape((-1, -1))\n    return x\n",
        HDR "def k(x):\n    t = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
            "    u = t.broadcast_to((-128, 64))\n    return x\n",
    };
    /* offsets that overflow 64 bits are errors, never wrapped-around views */
    static const char *const huge[] = {
        LHDR "def k(x):\n    i = nl.arange(4)[:, None] * (1 << 62)\n"
             "    u = nl.load(x[i, nl.arange(64)[None, :]])\n    return x\n",
        HDR "def k(x):\n    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
            "    u = t.ap(pattern=[[64, 2], [1 << 62, 4]], offset=0)\n    return x\n",
        HDR "def k(x):\n    t = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
            "    u = t.broadcast_to((128, 1 << 40))\n    return x\n",
        HDR "def k(x):\n    u = x.ap(pattern=[[0, 1 << 32], [0, 1 << 32], [0, 1 << 32]], offset=0)\n"
            "    return x\n",
    };
    sim_array in;

    fp32_zeros(&in, 2, 128, 64);
    for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
        sim_error se;
        kf_err err = KF_ERR_INIT;

        cr_expect_eq(run_k("trn2", srcs[i], "n.py", false, &in, 1, NULL, NULL, &se, &err),
                     KF_INVALID, "case %zu ran", i);
        cr_expect(se.code == SIM_E_BAD_ARGUMENT || se.code == SIM_E_SHAPE_MISMATCH,
                  "case %zu: %s", i, err.msg);
    }
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        sim_error se;
        kf_err err = KF_ERR_INIT;

        cr_expect_eq(run_k("trn2", huge[i], "h.py", true, &in, 1, NULL, NULL, &se, &err),
                     KF_INVALID, "huge case %zu ran", i);
        cr_expect(se.code == SIM_E_LIMIT || se.code == SIM_E_INDEX_OUT_OF_BOUNDS,
                  "huge case %zu: %s", i, err.msg);
    }
    free(in.data);
}

/* Fuzzing found (tests/fuzz/corpus/nki_index/regress-*): a load through
 * empty slices made a tile with no elements per partition, and the region
 * arithmetic divided by zero (SIGFPE: the evaluation died, the job burnt
 * its attempts).  Empty slices and nl.ds without elements are refused. */
Test(nki_errors, empty_slices_and_ds_are_refused)
{
    static const struct {
        const char *src;
        const char *needle;
    } empties[] = {
        { LHDR "def k(x):\n    t = nl.load(x[-1:127, -64:-1048576])\n    return x\n", "selects no elements" },
        { LHDR "def k(x):\n    t = nl.load(x[5:3, :])\n    return x\n", "selects no elements" },
        { LHDR "def k(x):\n    t = nl.load(x[nl.ds(-1, 128), nl.ds(-64, -64)])\n    return x\n",
          "nl.ds(-1, 128)" },
        { LHDR "def k(x):\n    t = nl.load(x[nl.ds(0, 0), :])\n    return x\n", "size >= 1" },
    };
    sim_array in;

    fp32_zeros(&in, 2, 128, 64);
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        sim_error se;
        kf_err err = KF_ERR_INIT;

        cr_expect_eq(run_k("trn2", empties[i].src, "e.py", true, &in, 1, NULL, NULL, &se, &err), KF_INVALID,
                     "case %zu ran", i);
        cr_expect_eq(se.code, SIM_E_BAD_INDEX, "case %zu: %s", i, err.msg);
        cr_expect_eq(se.line, 6, "case %zu: line %d", i, se.line);
        cr_expect(strstr(err.msg, empties[i].needle) != NULL, "case %zu: '%s' not in %s", i, empties[i].needle,
                  err.msg);
    }
    free(in.data);
}

/* fuzz_nki_index: a load whose mask is all false may carry an index
 * expression with any stride, since no element is touched; the record's
 * byte stride overflowed int64_t (UBSan: signed overflow in
 * simc_view_region).  It runs, and the stride saturates. */
Test(nki_errors, a_fully_masked_load_with_a_huge_stride_runs)
{
    static const char *src =
        LHDR "def k(x):\n"
             "    i_p = nl.arange(1)[:, None]\n"
             "    i_f = nl.arange(2)[None, :]\n"
             "    t = nl.load(x[127 * i_f, 4611686018427387904 * (i_f * -1) + 127 * 513 + i_p], mask=(i_p < i_p))\n"
             "    return x\n";
    sim_array in;
    sim_array *out = NULL;
    size_t n_out = 0;
    sim_error se;
    kf_err err = KF_ERR_INIT;

    fp32_zeros(&in, 2, 128, 64);
    cr_assert_eq(run_k("trn2", src, "m.py", true, &in, 1, &out, &n_out, &se, &err), KF_OK, "%s", err.msg);
    for (size_t i = 0; i < n_out; i++)
        sim_array_release(&out[i]);
    free(out);
    free(in.data);
}
