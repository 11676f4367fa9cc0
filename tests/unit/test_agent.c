/* The agent: constraint expressions, the kernel library index and binding,
 * and the tuning loop on small shapes (goal, stop rules, cache, a faster but
 * wrong candidate that must never become best). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "agent/ka_expr.h"
#include "agent/ka_lib.h"
#include "agent/ka_loop.h"
#include "tests/lib/kf_test.h"

static char kdir[3072];

static void setup(void)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    kf_err err = KF_ERR_INIT;
    snprintf(kdir, sizeof(kdir), "%s/kernels", root && *root ? root : ".");
    setenv("KFORGE_KERNELS_DIR", kdir, 1);
    cr_assert_eq(kf_config_load(&err), KF_OK, "%s", err.msg);
}

TestSuite(agent, .init = setup, .timeout = 300);

/* ---- expressions --------------------------------------------------------- */

static bool env_lookup(void *ctx, const char *name, int len, ka_value *out)
{
    (void)ctx;
    memset(out, 0, sizeof(*out));
    if (len == 1 && name[0] == 'D') {
        out->num = 700;
        return true;
    }
    if (len == 3 && strncmp(name, "ENG", 3) == 0) {
        out->is_str = true;
        out->str = "gpsimd";
        out->str_len = 6;
        return true;
    }
    return false;
}

static double ev(const char *e)
{
    ka_value v;
    kf_err err = KF_ERR_INIT;
    cr_assert_eq(ka_expr_eval(e, env_lookup, NULL, &v, &err), KF_OK, "%s: %s", e, err.msg);
    cr_assert(!v.is_str);
    return v.num;
}

Test(agent, expressions_follow_python)
{
    cr_assert_eq(ev("1 + 2 * 3"), 7);
    cr_assert_eq(ev("(1 + 2) * 3"), 9);
    cr_assert_eq(ev("-7 // 2"), -4);
    cr_assert_eq(ev("-7 % 3"), 2);
    cr_assert_eq(ev("7 / 2"), 3.5);
    cr_assert_eq(ev("(D + 127) // 128"), 6);
    cr_assert_eq(ev("1 < 2 <= 2 < 3"), 1);
    cr_assert_eq(ev("1 < 2 > 3"), 0);
    cr_assert_eq(ev("not 0 and 1 or 0"), 1);
    cr_assert_eq(ev("min(D, 512, 1024) + max(1, 2)"), 514);
    cr_assert_eq(ev("ENG == \"gpsimd\" and ENG != 'vector'"), 1);
    cr_assert_eq(ev("True + False"), 1);
    cr_assert_eq(ev("1 / sqrt(D - 636)"), 0.125);
}

Test(agent, expression_errors_name_the_problem)
{
    ka_value v;
    kf_err err = KF_ERR_INIT;
    cr_assert_eq(ka_expr_eval("D * NOPE", env_lookup, NULL, &v, &err), KF_INVALID);
    cr_assert(strstr(err.msg, "unknown name"), "%s", err.msg);
    cr_assert_eq(ka_expr_eval("D // 0", env_lookup, NULL, &v, &err), KF_INVALID);
    cr_assert(strstr(err.msg, "division by zero"), "%s", err.msg);
    cr_assert_eq(ka_expr_eval("(D + 1", env_lookup, NULL, &v, &err), KF_INVALID);
    cr_assert_eq(ka_expr_eval("D 3", env_lookup, NULL, &v, &err), KF_INVALID);
    cr_assert_eq(ka_expr_eval("ENG < 3", env_lookup, NULL, &v, &err), KF_INVALID);
    cr_assert_eq(ka_expr_eval("pow(2, 3)", env_lookup, NULL, &v, &err), KF_INVALID);
    cr_assert_eq(ka_expr_eval("sqrt(-D)", env_lookup, NULL, &v, &err), KF_INVALID);
}

/* Every recursive path of the evaluator is bounded by one depth counter:
 * 50,000 unary minuses or nots (a constraint a job could carry) and deep
 * parentheses are an ordinary error naming the limit, never a stack
 * overflow; nesting within the limit still evaluates. */
static char *repeat(const char *unit, int n, const char *tail)
{
    kf_buf b;
    kf_buf_init(&b);
    for (int i = 0; i < n; i++)
        kf_buf_adds(&b, unit);
    kf_buf_adds(&b, tail);
    return b.data;
}

static void expect_too_deep(const char *e)
{
    ka_value v;
    kf_err err = KF_ERR_INIT;
    cr_assert_eq(ka_expr_eval(e, env_lookup, NULL, &v, &err), KF_INVALID, "%.40s...", e);
    cr_assert(strstr(err.msg, "more than 64 levels"), "the message names the limit: %s", err.msg);
    cr_assert(strlen(err.msg) < 400, "the message quotes only the start of the expression: %s", err.msg);
}

Test(agent, expression_nesting_is_bounded_on_every_path)
{
    char *e;
    e = repeat("-", 50000, "1");
    expect_too_deep(e);
    free(e);
    e = repeat("not ", 50000, "1");
    expect_too_deep(e);
    free(e);
    e = repeat("(", 50000, "1");
    expect_too_deep(e);
    free(e);
    e = repeat("1 + (", 50000, "1");
    expect_too_deep(e);
    free(e);
    e = repeat("-(not ", 50000, "1");
    expect_too_deep(e);
    free(e);
    e = repeat("min(", 50000, "1");
    expect_too_deep(e);
    free(e);

    /* within the limit: 60 levels of each kind, and mixed */
    e = repeat("-", 60, "D");
    cr_assert_eq(ev(e), 700);
    free(e);
    e = repeat("not ", 61, "0");
    cr_assert_eq(ev(e), 1);
    free(e);
    {
        char *open = repeat("(", 63, "D"), *close = repeat(")", 63, "");
        char *both = kf_asprintf("%s%s + 1", open, close);
        cr_assert_eq(ev(both), 701);
        free(open);
        free(close);
        free(both);
    }
    cr_assert_eq(ev("-(-(max(1, -(-(D)))))"), 700);
    cr_assert_eq(ev("not not (D > 3 and not (D < 2))"), 1);
}

/* ---- library -------------------------------------------------------------- */

Test(agent, library_index_has_every_op_with_its_declarations)
{
    static const char *const ops[] = { "add", "transpose2d", "matmul", "softmax", "rmsnorm", "layernorm", "swiglu",
                                       "flash_attention", "avgpool2d", "depthwise_conv2d", NULL };
    cJSON *index = NULL, *m;
    kf_err err = KF_ERR_INIT;
    cr_assert_eq(ka_lib_index(kdir, &index, &err), KF_OK, "%s", err.msg);
    for (int i = 0; ops[i]; i++) {
        bool found = false;
        cJSON_ArrayForEach(m, index)
        {
            const cJSON *t;
            if (strcmp(cJSON_GetObjectItemCaseSensitive(m, "op")->valuestring, ops[i]) != 0)
                continue;
            found = true;
            cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "reference")), "%s has a reference", ops[i]);
            cr_assert(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "reference_shapes")) > 0);
            cr_assert(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "test_shapes")) > 0);
            cr_assert(cJSON_GetObjectItemCaseSensitive(m, "flops"), "%s declares its FLOPs (its floor counts them)",
                      ops[i]);
            cr_assert(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tunables")) > 0, "%s tunables", ops[i]);
            cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(m, "tunables"))
            {
                cr_assert(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "values")) > 0);
                cr_assert(cJSON_GetObjectItemCaseSensitive(t, "default"), "%s.%s default", ops[i], t->string);
                cr_assert(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "addresses")) > 0,
                          "%s.%s says which findings it addresses", ops[i], t->string);
            }
        }
        cr_assert(found, "op %s in the library", ops[i]);
    }
    cJSON_Delete(index);
}

static kf_code bind(const char *op, const char *shapes, sim_dtype dt, const char *target, ka_problem *pb, ka_space *sp,
                    kf_err *err)
{
    int64_t sh[KA_MAX_INPUTS][KA_MAX_DIMS];
    int nd[KA_MAX_INPUTS], n = 0;
    cJSON *meta = NULL;
    char path[4096], buf[256];
    kf_code rc;

    snprintf(buf, sizeof(buf), "%s", shapes);
    for (char *s = strtok(buf, " "); s; s = strtok(NULL, " ")) {
        nd[n] = 0;
        for (char *d = s; *d;) {
            sh[n][nd[n]++] = strtoll(d, &d, 10);
            if (*d == 'x')
                d++;
        }
        n++;
    }
    rc = ka_lib_find(kdir, op, &meta, path, sizeof(path), err);
    if (rc == KF_OK)
        rc = ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])sh, nd, n, dt, target, pb, sp, err);
    cJSON_Delete(meta);
    return rc;
}

Test(agent, binding_derives_shapes_and_refuses_what_a_template_cannot_serve)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;

    cr_assert_eq(bind("rmsnorm", "300x700", SIM_DT_BFLOAT16, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(pb.n_inputs, 2);
    cr_assert_eq(pb.inputs[1].ndim, 1);
    cr_assert_eq(pb.inputs[1].shape[0], 700, "g's shape follows from D");
    ka_space_release(&sp);
    ka_problem_release(&pb);

    cr_assert_eq(bind("matmul", "256x128", SIM_DT_BFLOAT16, "trn2", &pb, &sp, &err), KF_INVALID);
    cr_assert(strstr(err.msg, "do not determine dim N"), "%s", err.msg);
    cr_assert_eq(bind("matmul", "256x128 300x512", SIM_DT_BFLOAT16, "trn2", &pb, &sp, &err), KF_INVALID);
    cr_assert(strstr(err.msg, "dim K"), "%s", err.msg);
    cr_assert_eq(bind("flash_attention", "256x512", SIM_DT_BFLOAT16, "trn2", &pb, &sp, &err), KF_UNPROCESSABLE);
    cr_assert(strstr(err.msg, "cannot serve") && strstr(err.msg, "d <= 128"), "%s", err.msg);
    cr_assert_eq(bind("softmax", "8x100000", SIM_DT_FLOAT32, "trn1", &pb, &sp, &err), KF_UNPROCESSABLE, "%s", err.msg);
    cr_assert_eq(bind("conv3d", "8x8", SIM_DT_FLOAT32, "trn2", &pb, &sp, &err), KF_NOT_FOUND);
    cr_assert(strstr(err.msg, "unknown op \"conv3d\"") && strstr(err.msg, "softmax"), "%s", err.msg);
    cr_assert_eq(bind("softmax", "8x8x8", SIM_DT_FLOAT32, "trn2", &pb, &sp, &err), KF_INVALID);
}

/* A library template whose input has no name (or no dims) is refused when
 * it is bound, naming the file, even when the shapes given do not match
 * (issue 22, bug 6: that path dereferenced the missing name). */
Test(agent, binding_refuses_a_template_input_without_a_name)
{
    static const char *const bad[] = {
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"dims\":[\"N\",\"D\"]}]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"a\",\"dims\":[\"N\"]},{\"name\":7,\"dims\":[\"N\",\"D\"]}]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"\",\"dims\":[\"N\"]}]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[\"x\"]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"x\"}]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"x\",\"dims\":[\"N\",null]}]}",
    };
    static const char *const says[] = { "input 1 needs a \"name\"", "input 2 needs a \"name\"",
                                        "input 1 needs a \"name\"", "input 1 needs a \"name\"",
                                        "input x needs \"dims\"", "every dim is a name or a number" };
    const int64_t shapes[2][KA_MAX_DIMS] = { { 128 }, { 128, 64, 3 } };
    const int ndims[2] = { 1, 3 };   /* neither matches the template's dims */

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *meta = cJSON_Parse(bad[i]);
        ka_problem pb;
        ka_space sp;
        kf_err err = KF_ERR_INIT;
        cr_assert_not_null(meta);
        cr_assert_eq(ka_lib_bind(meta, "kernels/t.py", shapes, ndims, i == 1 ? 2 : 1, SIM_DT_FLOAT32, "trn2", &pb,
                                 &sp, &err), KF_INVALID, "%s", bad[i]);
        cr_assert(strstr(err.msg, "kernels/t.py") && strstr(err.msg, says[i]), "%s: %s", bad[i], err.msg);
        ka_space_release(&sp);
        ka_problem_release(&pb);
        cJSON_Delete(meta);
    }
}

/* fuzz_kforge_block: a template may write a dim as a number, and 5e62 was
 * converted to int64_t unchecked (UBSan float-cast-overflow).  Each numeric
 * dim is a whole number of 1 to 2^31 elements. */
Test(agent, binding_refuses_template_dims_out_of_range)
{
    static const char *const bad[] = {
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"a\",\"dims\":[\"M\",\"K\"]},"
        "{\"name\":\"b\",\"dims\":[512111111111111111111111111111111111111111111111111111111111111,\"N\"]}]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"a\",\"dims\":[\"M\",\"K\"]},{\"name\":\"b\",\"dims\":[2.5,\"K\"]}]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"a\",\"dims\":[\"M\",\"K\"]},{\"name\":\"b\",\"dims\":[0,\"K\"]}]}",
        "{\"op\":\"t\",\"entry\":\"t\",\"inputs\":[{\"name\":\"a\",\"dims\":[\"M\",\"K\"]},{\"name\":\"b\",\"dims\":[-1e300,\"K\"]}]}",
    };
    const int64_t shapes[1][KA_MAX_DIMS] = { { 128, 512 } };
    const int ndims[1] = { 2 };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *meta = cJSON_Parse(bad[i]);
        ka_problem pb;
        ka_space sp;
        kf_err err = KF_ERR_INIT;
        cr_assert_not_null(meta);
        cr_assert_eq(ka_lib_bind(meta, "kernels/t.py", shapes, ndims, 1, SIM_DT_FLOAT32, "trn2", &pb, &sp, &err),
                     KF_INVALID, "%s", bad[i]);
        cr_assert(strstr(err.msg, "a dim is a whole number"), "%s: %s", bad[i], err.msg);
        ka_space_release(&sp);
        ka_problem_release(&pb);
        cJSON_Delete(meta);
    }
}

/* A tunable's "addresses" must name the profiler's finding kinds and a
 * direction: a typo would otherwise silently never steer the planner. */
Test(agent, addresses_name_real_findings_and_directions)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    static const char *const bad[] = {
        "{\"tunables\":{\"TILE_F\":{\"addresses\":{\"dma_smal_transfers\":\"up\"}}}}",
        "{\"tunables\":{\"TILE_F\":{\"addresses\":{\"engine_imbalance\":\"sideways\"}}}}",
        "{\"tunables\":{\"TILE_F\":{\"addresses\":[\"buffer_pressure\"]}}}",
    };
    static const char *const says[] = { "not a finding kind", "must be \"up\"", "must be an object" };
    cJSON *tun = cJSON_Parse("{\"TILE_F\":[128,256]}"), *meta;

    cr_assert_eq(bind("add", "130x300 130x300", SIM_DT_FLOAT32, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    ka_space_release(&sp);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        meta = cJSON_Parse(bad[i]);
        cr_assert_eq(ka_space_from_tunables(tun, meta, &pb, &sp, &err), KF_INVALID, "%s", bad[i]);
        cr_assert(strstr(err.msg, says[i]) && strstr(err.msg, "TILE_F"), "%s", err.msg);
        cJSON_Delete(meta);
    }
    meta = cJSON_Parse("{\"tunables\":{\"TILE_F\":{\"addresses\":{\"engine_imbalance\":\"any\"}}}}");
    cr_assert_eq(ka_space_from_tunables(tun, meta, &pb, &sp, &err), KF_OK, "%s", err.msg);
    ka_space_release(&sp);
    cJSON_Delete(meta);
    cJSON_Delete(tun);
    ka_problem_release(&pb);
}

/* A tunable is passed to the kernel as a keyword argument: its name must
 * be one, whole (fuzz_kforge_block found raw bytes in a name reaching the
 * kwargs JSON; tests/fuzz/corpus/kforge_block/regress-tunable-name-bytes). */
Test(agent, tunable_names_are_keyword_argument_names)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    static const char *const bad[] = {
        "{\"TILE\u00e9\":[1]}", "{\"9TILE\":[1]}", "{\"\":[1]}", "{\"TILE F\":[1]}",
        "{\"T123456789012345678901234567890123456789012345678901234567890123\":[1]}",
    };

    cr_assert_eq(bind("add", "130x300 130x300", SIM_DT_FLOAT32, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    ka_space_release(&sp);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *tun = cJSON_Parse(bad[i]);
        cr_assert_not_null(tun, "%s", bad[i]);
        cr_assert_eq(ka_space_from_tunables(tun, NULL, &pb, &sp, &err), KF_INVALID, "%s", bad[i]);
        cr_assert(strstr(err.msg, "is not a keyword argument name"), "%s: %s", bad[i], err.msg);
        cJSON_Delete(tun);
    }
    {
        cJSON *tun = cJSON_Parse("{\"_tile_F2\":[1,2]}");
        cr_assert_eq(ka_space_from_tunables(tun, NULL, &pb, &sp, &err), KF_OK, "%s", err.msg);
        ka_space_release(&sp);
        cJSON_Delete(tun);
    }
    ka_problem_release(&pb);
}

Test(agent, constraints_prune_settings)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    int idx[KA_MAX_TUNABLES] = { 0 };
    bool ok = true;
    const char *why = NULL;

    cr_assert_eq(bind("add", "128x300 128x300", SIM_DT_FLOAT32, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(sp.n, 1);
    idx[0] = 6; /* TILE_F 8192 >> D */
    cr_assert_eq(ka_space_legal(&sp, idx, &ok, &why, &err), KF_OK);
    cr_assert(!ok && why && strstr(why, "TILE_F"), "%s", why ? why : "");
    idx[0] = 2; /* 512 */
    cr_assert_eq(ka_space_legal(&sp, idx, &ok, &why, &err), KF_OK);
    cr_assert(ok);
    ka_space_release(&sp);
    ka_problem_release(&pb);
}

/* An input whose shape product overflows int64_t (8 dims of 2^31, issue 22
 * bug 7) is refused before any evaluation starts, naming the input: it
 * used to be zero-filled into an empty buffer under the huge shape. */
Test(agent, an_input_shape_that_overflows_is_refused_before_evaluation)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    cJSON *res = NULL;

    cr_assert_eq(bind("add", "128x300 128x300", SIM_DT_FLOAT32, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    pb.inputs[0].ndim = KA_MAX_DIMS;
    for (int d = 0; d < KA_MAX_DIMS; d++)
        pb.inputs[0].shape[d] = (int64_t)1 << 31;
    cr_assert_eq(ka_profile_once(&pb, NULL, 30, &res, &err), KF_TOO_LARGE, "%s", err.msg);
    cr_assert_null(res);
    cr_assert(strstr(err.msg, pb.inputs[0].name) && strstr(err.msg, "bytes"), "%s", err.msg);
    cr_assert_eq(ka_validate_once(&pb, NULL, 1, 1, 30, &res, &err), KF_TOO_LARGE, "%s", err.msg);
    cr_assert_null(res);
    ka_space_release(&sp);
    ka_problem_release(&pb);
}

/* ---- the loop -------------------------------------------------------------- */

static int n_progress;
static cJSON *iters;

/* Each iteration as the worker would receive it: through its serializer. */
static void on_progress(void *ctx, const ka_iter *it)
{
    char *txt = ka_iter_json(it);
    cJSON *doc = cJSON_Parse(txt);

    (void)ctx;
    n_progress++;
    cr_assert(cJSON_IsObject(doc), "an iteration serializes to a JSON object: %s", txt ? txt : "(null)");
    cr_assert_geq(it->iteration, 1, "iterations are numbered from 1");
    if (iters)
        cJSON_AddItemToArray(iters, doc);
    else
        cJSON_Delete(doc);
    free(txt);
}

static cJSON *tune(const char *op, const char *shapes, ka_opts *o)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    ka_hooks h = { NULL, on_progress, NULL, NULL };
    cJSON *res = NULL;
    cr_assert_eq(bind(op, shapes, SIM_DT_BFLOAT16, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(ka_tune(&pb, &sp, o, &h, &res, &err), KF_OK, "%s", err.msg);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    return res;
}

static const char *stop_reason(const cJSON *res)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "stop"), "reason")->valuestring;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "%s is a number", k);
    return v->valuedouble;
}

Test(agent, loop_reaches_its_goal_and_records_each_iteration)
{
    ka_opts o = { 0 };
    cJSON *res, *best, *it;
    o.goal_fraction = 0.3;    /* small shapes pay the fixed DMA costs: 0.36 is the best here */
    o.max_iterations = 30;
    o.seed = 7;
    n_progress = 0;
    iters = cJSON_CreateArray();
    res = tune("matmul", "512x512 512x1024", &o);
    best = cJSON_GetObjectItemCaseSensitive(res, "best");
    cr_assert_str_eq(stop_reason(res), "goal", "%s", cJSON_Print(cJSON_GetObjectItemCaseSensitive(res, "stop")));
    cr_assert_not_null(best);
    cr_assert_geq(num(best, "fraction_of_bound"), 0.3);
    cr_assert(num(best, "latency_ns") < num(cJSON_GetObjectItemCaseSensitive(res, "default"), "latency_ns"),
              "the tuned kernel beats the template's default");
    cr_assert(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(res, "path")) >= 2, "the path shows the moves");
    cr_assert_eq(n_progress, (int)num(res, "iterations"));
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(res, "report")->valuestring, "## Path"));
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(best, "source")->valuestring, "def matmul("));
    /* every iteration carries the protocol's fields */
    cJSON_ArrayForEach(it, iters)
    {
        static const char *const keys[] = { "params", "compile", "validation", "profile", "findings", "action",
                                             "reason", "timings", NULL };
        for (int k = 0; keys[k]; k++)
            cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(it, keys[k]), "iteration field %s", keys[k]);
        /* an accepted candidate was validated, on several seeds */
        if (strcmp(cJSON_GetObjectItemCaseSensitive(it, "action")->valuestring, "accept") == 0) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "validation");
            cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(v, "status")->valuestring, "pass");
            cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "correct")));
        }
    }
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(iters, 0), "source"),
                       "the first iteration keeps the source");
    cJSON_Delete(iters);
    iters = NULL;
    cJSON_Delete(res);
}

static const cJSON *param(const cJSON *it, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "params"), name);
}

/* An op without TensorE work (add declares "flops": 0) starts from the
 * largest tile the constraints allow, and the template's default is still
 * evaluated once the search ends, so `default` and the report compare with
 * it.  A matmul starts from its default. */
Test(agent, ops_without_tensor_work_start_from_the_largest_tiles)
{
    ka_opts o = { 0 };
    cJSON *res, *it, *first;
    bool default_seen = false;
    int n = 0;

    o.max_iterations = 20;
    o.patience = 1;          /* one move from 2048 to 1024 that does not pay, then the default */
    iters = cJSON_CreateArray();
    res = tune("add", "256x2048 256x2048", &o);
    first = cJSON_GetArrayItem(iters, 0);
    cr_assert_eq(param(first, "TILE_F")->valuedouble, 2048, "TILE_F < 2 * D allows 2048 at most");
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(first, "reason")->valuestring, "TILE_F 512 -> 2048"), "%s",
              cJSON_GetObjectItemCaseSensitive(first, "reason")->valuestring);
    cr_assert_str_eq(stop_reason(res), "no_improvement");
    cJSON_ArrayForEach(it, iters)
    {
        n++;
        if (param(it, "TILE_F")->valuedouble == 512) {
            default_seen = true;
            cr_assert_eq(n, cJSON_GetArraySize(iters), "the default comes last, after the search");
            cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(it, "reason")->valuestring, "after the search"));
        }
    }
    cr_assert(default_seen);
    cr_assert_eq(param(cJSON_GetObjectItemCaseSensitive(res, "default"), "TILE_F")->valuedouble, 512);
    cr_assert_eq(param(cJSON_GetObjectItemCaseSensitive(res, "best"), "TILE_F")->valuedouble, 2048);
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(res, "report")->valuestring,
                     "The template's default (`TILE_F=512`)"),
              "the report compares with the default: %s", cJSON_GetObjectItemCaseSensitive(res, "report")->valuestring);
    cJSON_Delete(iters);
    cJSON_Delete(res);

    memset(&o, 0, sizeof(o));
    o.max_iterations = 1;
    iters = cJSON_CreateArray();
    res = tune("matmul", "256x256 256x512", &o);
    first = cJSON_GetArrayItem(iters, 0);
    cr_assert_eq(param(first, "BLOCK_M")->valuedouble, 1, "a matmul starts at the template's default");
    cr_assert_eq(param(first, "BLOCK_N")->valuedouble, 1);
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(first, "reason")->valuestring, "template's default setting"));
    cJSON_Delete(iters);
    iters = NULL;
    cJSON_Delete(res);

    /* exhaustive order starts at the smallest tile; `default` is still the
     * template's once the order reaches it */
    memset(&o, 0, sizeof(o));
    o.planner = KA_PLAN_EXHAUSTIVE;
    o.patience = -1;
    res = tune("add", "256x1024 256x1024", &o);
    cr_assert_eq(param(cJSON_GetObjectItemCaseSensitive(res, "default"), "TILE_F")->valuedouble, 512);
    cJSON_Delete(res);
}

Test(agent, stop_rules)
{
    ka_opts o = { 0 };
    cJSON *res;

    o.max_iterations = 2;
    o.patience = -1;
    res = tune("add", "256x2048 256x2048", &o);
    cr_assert_str_eq(stop_reason(res), "budget_iterations");
    cr_assert_eq(num(res, "iterations"), 2);
    cJSON_Delete(res);

    memset(&o, 0, sizeof(o));
    o.max_seconds = 0.001;
    res = tune("add", "256x2048 256x2048", &o);
    cr_assert_str_eq(stop_reason(res), "budget_seconds");
    cr_assert_eq(num(res, "iterations"), 1);
    cJSON_Delete(res);

    memset(&o, 0, sizeof(o));
    o.patience = 1;
    o.planner = KA_PLAN_EXHAUSTIVE;    /* lexicographic: starts at the smallest tile, improves, then stalls */
    res = tune("add", "256x1024 256x1024", &o);
    cr_assert_str_eq(stop_reason(res), "no_improvement");
    cr_assert_lt(num(res, "iterations"), 7);
    cJSON_Delete(res);

    memset(&o, 0, sizeof(o));
    o.goal_latency_ns = 1e12;          /* met by the first correct kernel */
    res = tune("add", "256x1024 256x1024", &o);
    cr_assert_str_eq(stop_reason(res), "goal");
    cr_assert_eq(num(res, "iterations"), 1);
    cJSON_Delete(res);
}

Test(agent, evaluations_are_cached_by_source_tunables_shape_and_target)
{
    ka_opts o = { 0 };
    cJSON *a, *b, *c;
    o.cache = ka_cache_new();
    o.max_iterations = 6;
    a = tune("add", "256x2048 256x2048", &o);
    cr_assert_gt(num(a, "evaluations"), 0);
    cr_assert_eq(num(a, "cache_hits"), 0);
    cr_assert_gt(num(a, "validations"), 0);
    b = tune("add", "256x2048 256x2048", &o);
    cr_assert_eq(num(b, "evaluations"), 0, "the same candidates come from the cache");
    cr_assert_eq(num(b, "validations"), 0, "and so do their verdicts");
    cr_assert_eq(num(b, "cache_hits"), num(a, "evaluations") + num(a, "validations"));
    cr_assert_eq(num(b, "latency_ns"), num(a, "latency_ns"), "deterministic timing, same best");
    c = tune("add", "256x1024 256x1024", &o);
    cr_assert_gt(num(c, "evaluations"), 0, "another shape is another key");
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    ka_cache_free(o.cache);
}

/* The cache on disk outlives the process's cache: a second cache opened on
 * the same folder (a later run, another worker) answers every evaluation,
 * and a changed kernel source is a different key. */
Test(agent, evaluations_persist_in_the_cache_folder)
{
    char dir[] = "/tmp/kforge-test-cache.XXXXXX";
    ka_opts o = { 0 };
    kf_err e = KF_ERR_INIT;
    cJSON *a, *b;

    cr_assert_not_null(mkdtemp(dir));
    o.max_iterations = 5;
    o.cache = ka_cache_open(dir, 0, &e);
    cr_assert_not_null(o.cache, "%s", e.msg);
    a = tune("add", "256x2048 256x2048", &o);
    cr_assert_gt(num(a, "evaluations"), 0);
    ka_cache_free(o.cache);

    o.cache = ka_cache_open(dir, 0, &e);
    cr_assert_not_null(o.cache, "%s", e.msg);
    b = tune("add", "256x2048 256x2048", &o);
    cr_assert_eq(num(b, "evaluations"), 0, "every evaluation comes from the folder");
    cr_assert_eq(num(b, "validations"), 0, "every verdict too");
    cr_assert_eq(ka_cache_disk_hits(o.cache), (unsigned long)(num(a, "evaluations") + num(a, "validations")));
    cr_assert_eq(num(b, "latency_ns"), num(a, "latency_ns"));
    ka_cache_free(o.cache);
    cJSON_Delete(a);
    cJSON_Delete(b);
    char *cmd = kf_asprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
}

/* A copy of the library's FILE with its one occurrence of FIND replaced
 * (caller frees the path and removes the file). */
static char *write_variant(const char *file, const char *find, const char *replace, const char *tag)
{
    char *src = kf_asprintf("%s/%s", kdir, file), *text = kf_test_read_file(src), *p = strstr(text, find), *path, *out;

    cr_assert_not_null(p, "%s has %s", src, find);
    *p = '\0';
    out = kf_asprintf("%s%s%s", text, replace, p + strlen(find));
    path = kf_asprintf("/tmp/kforge-test-agent-%s-%d.py", tag, (int)getpid());
    kf_test_write_file(path, out);
    free(out);
    free(text);
    free(src);
    return path;
}

/* Everything a test on a variant holds, released, and the file removed. */
static void variant_done(cJSON *res, cJSON *meta, ka_space *sp, ka_problem *pb, char *path)
{
    cJSON_Delete(res);
    cJSON_Delete(meta);
    ka_space_release(sp);
    ka_problem_release(pb);
    unlink(path);
    free(path);
}

static char *write_skipping_variant(void)
{
    return write_variant("add.py", "for c in nl.affine_range(math.ceil(D / TILE_F)):",
                         "for c in nl.affine_range(math.ceil(D / TILE_F) - (1 if TILE_F == 2048 else 0)):", "skip");
}

/* The floor is the op's, from the FLOPs its template declares: a variant
 * of flash attention that claims to need none has the IO bound as its
 * floor although its kernel does the same matmuls, and the library file's
 * declaration is the kernel's 4 S^2 d. */
Test(agent, the_floor_counts_the_ops_flops_not_the_kernels)
{
    char *path;
    cJSON *meta = NULL, *res = NULL;
    const cJSON *best, *b;
    ka_problem pb;
    ka_space sp;
    ka_opts o = { 0 };
    kf_err err = KF_ERR_INIT;
    int64_t sh[3][KA_MAX_DIMS] = { { 128, 512 }, { 128, 512 }, { 512, 128 } };
    int nd[3] = { 2, 2, 2 };

    cr_assert_eq(bind("flash_attention", "128x1024 128x1024 1024x128", SIM_DT_BFLOAT16, "trn2", &pb, &sp, &err), KF_OK,
                 "%s", err.msg);
    cr_assert(pb.op_flops_set);
    cr_assert_eq(pb.op_flops, 4.0 * 1024 * 1024 * 128);
    ka_space_release(&sp);
    ka_problem_release(&pb);

    path = write_variant("flash_attention.py", "\"flops\": \"4 * S * S * d\"", "\"flops\": 0", "flops");
    cr_assert_eq(ka_lib_read_meta(path, &meta, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])sh, nd, 3, SIM_DT_BFLOAT16, "trn2", &pb, &sp,
                             &err), KF_OK, "%s", err.msg);
    o.max_iterations = 1;
    cr_assert_eq(ka_tune(&pb, &sp, &o, NULL, &res, &err), KF_OK, "%s", err.msg);
    best = cJSON_GetObjectItemCaseSensitive(res, "best");
    b = cJSON_GetObjectItemCaseSensitive(best, "bounds");
    cr_assert_gt(num(b, "compute_ns"), num(b, "necessary_io_ns"), "the kernel's matmuls outweigh its IO");
    cr_assert_eq(num(b, "op_compute_ns"), 0);
    cr_assert_eq(num(best, "floor_ns"), num(b, "necessary_io_ns"));
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(best, "bound_kind")->valuestring, "io");
    variant_done(res, meta, &sp, &pb, path);
}

/* A variant of the add template whose TILE_F=2048 setting skips the last
 * column tile: it is faster (less work), and wrong. */
Test(agent, a_faster_but_wrong_candidate_is_caught_and_never_best)
{
    char *path = write_skipping_variant();
    cJSON *meta = NULL, *res = NULL, *it, *tun;
    ka_problem pb;
    ka_space sp;
    ka_opts o = { 0 };
    ka_hooks h = { NULL, on_progress, NULL, NULL };
    kf_err err = KF_ERR_INIT;
    int64_t sh[2][KA_MAX_DIMS] = { { 256, 8192 }, { 256, 8192 } };
    int nd[2] = { 2, 2 };
    bool seen_wrong = false;

    cr_assert_eq(ka_lib_read_meta(path, &meta, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])sh, nd, 2, SIM_DT_BFLOAT16, "trn2", &pb, &sp,
                             &err), KF_OK, "%s", err.msg);
    o.planner = KA_PLAN_EXHAUSTIVE;
    o.patience = -1;
    o.seed = 3;
    iters = cJSON_CreateArray();
    cr_assert_eq(ka_tune(&pb, &sp, &o, &h, &res, &err), KF_OK, "%s", err.msg);
    tun = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "best"), "params");
    cr_assert_neq(cJSON_GetObjectItemCaseSensitive(tun, "TILE_F")->valueint, 2048, "the wrong variant is not best");
    cr_assert_geq(num(res, "rejected"), 1);
    cJSON_ArrayForEach(it, iters)
    {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(it, "params");
        if (cJSON_GetObjectItemCaseSensitive(p, "TILE_F")->valueint != 2048)
            continue;
        seen_wrong = true;
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(it, "action")->valuestring, "reject");
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(it, "correct")));
        cr_assert(strstr(cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(it, "validation")), "NaN") ||
                  strstr(cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(it, "validation")), "nan"),
                  "the unwritten tile shows as NaN");
    }
    cr_assert(seen_wrong, "the skipping setting was evaluated");
    cJSON_Delete(iters);
    iters = NULL;
    variant_done(res, meta, &sp, &pb, path);
}

/* A verdict is a function of the kernel, its settings, its seeded inputs,
 * the reference and the simulator: a second run over one cache takes every
 * verdict from it (the wrong candidate is still caught, and its iteration
 * says where the verdict came from), and a changed reference file is a new
 * key, so the candidates are validated again. */
static int tune_skipping(const char *path, const char *ref_path, ka_opts *o, cJSON **wrong_it)
{
    cJSON *meta = NULL, *res = NULL, *it;
    ka_problem pb;
    ka_space sp;
    ka_hooks h = { NULL, on_progress, NULL, NULL };
    kf_err err = KF_ERR_INIT;
    int64_t sh[2][KA_MAX_DIMS] = { { 256, 8192 }, { 256, 8192 } };
    int nd[2] = { 2, 2 }, validations;

    cr_assert_eq(ka_lib_read_meta(path, &meta, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])sh, nd, 2, SIM_DT_BFLOAT16, "trn2", &pb, &sp,
                             &err), KF_OK, "%s", err.msg);
    if (ref_path)
        snprintf(pb.ref_path, sizeof(pb.ref_path), "%s", ref_path);
    iters = cJSON_CreateArray();
    cr_assert_eq(ka_tune(&pb, &sp, o, &h, &res, &err), KF_OK, "%s", err.msg);
    cr_assert_geq(num(res, "rejected"), 1, "the wrong candidate is rejected");
    *wrong_it = NULL;
    cJSON_ArrayForEach(it, iters)
    {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(it, "params");
        if (cJSON_GetObjectItemCaseSensitive(p, "TILE_F")->valueint == 2048)
            *wrong_it = cJSON_Duplicate(it, true);
    }
    cr_assert_not_null(*wrong_it, "the skipping setting was evaluated");
    validations = (int)num(res, "validations");
    cJSON_Delete(iters);
    iters = NULL;
    cJSON_Delete(res);
    cJSON_Delete(meta);
    ka_space_release(&sp);
    ka_problem_release(&pb);
    return validations;
}

Test(agent, verdicts_come_from_the_cache_until_the_reference_changes)
{
    char *path = write_skipping_variant();
    char *ref = kf_asprintf("/tmp/kforge-test-agent-ref-%d.py", (int)getpid());
    ka_opts o = { 0 };
    cJSON *w1, *w2, *w3;
    const cJSON *v;

    o.planner = KA_PLAN_EXHAUSTIVE;
    o.patience = -1;
    o.seed = 3;
    o.cache = ka_cache_new();
    cr_assert_gt(tune_skipping(path, NULL, &o, &w1), 0);
    v = cJSON_GetObjectItemCaseSensitive(w1, "validation");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "cached")), "the first verdict ran");

    cr_assert_eq(tune_skipping(path, NULL, &o, &w2), 0, "every verdict of the second run comes from the cache");
    v = cJSON_GetObjectItemCaseSensitive(w2, "validation");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "cached")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(w2, "correct")), "still wrong");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(w2, "action")->valuestring, "reject");
    cr_assert_not_null(strstr(cJSON_GetObjectItemCaseSensitive(w2, "reason")->valuestring, "cached verdict"),
                       "the reason says where the verdict came from: %s",
                       cJSON_GetObjectItemCaseSensitive(w2, "reason")->valuestring);

    /* the same reference function in a file of its own: another reference */
    kf_test_write_file(ref, "import numpy as np\n\n\ndef add_ref(a, b):\n"
                            "    return np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)\n");
    cr_assert_gt(tune_skipping(path, ref, &o, &w3), 0, "a new reference is validated against again");
    v = cJSON_GetObjectItemCaseSensitive(w3, "validation");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "cached")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(w3, "correct")));
    cJSON_Delete(w1);
    cJSON_Delete(w2);
    cJSON_Delete(w3);
    ka_cache_free(o.cache);
    unlink(ref);
    free(ref);
    unlink(path);
    free(path);
}

Test(agent, specialized_source_sets_the_best_defaults)
{
    char path[4096];
    cJSON *p = cJSON_Parse("{\"COLS\": 1024, \"NORM_ENGINE\": \"gpsimd\", \"BUFS\": 3}");
    char *s;
    snprintf(path, sizeof(path), "%s/softmax.py", kdir);
    s = ka_specialize_source(path, "softmax", p);
    cr_assert_not_null(s);
    cr_assert(strstr(s, "def softmax(x, COLS=1024, EXP_BF16=0, NORM_ENGINE=\"gpsimd\", BUFS=3):"), "%.400s",
              strstr(s, "def softmax(") ? strstr(s, "def softmax(") : s);
    free(s);
    cJSON_Delete(p);
}

/* Issue 15: a tunable whose list gives no default starts from the kernel
 * signature's keyword default, not from the first value of the list. */
Test(agent, a_tunable_without_a_declared_default_starts_from_the_signatures)
{
    char *dir = kf_test_tmpdir("sigdef"), *path = kf_asprintf("%s/k.py", dir);
    FILE *f = fopen(path, "w");
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    cJSON *tun = cJSON_Parse("{\"TILE_F\":[256,512,1024],\"MODE\":[\"slow\",\"fast\"],\"FLAG\":[false,true],"
                             "\"OTHER\":[1,2],\"BIG\":[64,128]}");

    cr_assert_not_null(f);
    fputs("import nki\n\ndef helper(TILE_F=1024):\n    pass\n\n@nki.jit\ndef k(x, g, TILE_F=512,\n      MODE: str = 'fast',"
          " FLAG=True, OTHER=(1 + 1), BIG=4096):\n    return x\n",
          f);
    fclose(f);
    memset(&pb, 0, sizeof(pb));
    snprintf(pb.source_path, sizeof(pb.source_path), "%s", path);
    snprintf(pb.entry, sizeof(pb.entry), "k");
    cr_assert_eq(ka_space_from_tunables(tun, NULL, &pb, &sp, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(sp.n, 5);
    cr_assert_eq(sp.t[0].def, 1, "TILE_F=512 is the signature's default (index 1), got %d", sp.t[0].def);
    cr_assert_eq(sp.t[1].def, 1, "MODE='fast'");
    cr_assert_eq(sp.t[2].def, 1, "FLAG=True");
    cr_assert_eq(sp.t[3].def, 0, "an expression is no default: the first value");
    cr_assert_eq(sp.t[4].def, 0, "a default outside the list: the first value");
    ka_space_release(&sp);
    cJSON_Delete(tun);
    free(path);
    free(dir);
}

/* Issue 15: the report's remaining findings never advise what the chosen
 * setting rules out (a larger tile when the tile is the largest allowed). */
Test(agent, report_findings_never_advise_what_the_setting_rules_out)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    int idx[KA_MAX_TUNABLES] = { 0 };
    kf_buf b = KF_BUF_INIT;
    cJSON *small = cJSON_Parse("{\"kind\":\"dma_small_transfers\",\"title\":\"Small DMA transfers\",\"cost_ns\":5000,"
                               "\"message\":\"DMAs move 1 KiB chunks; use larger tiles (TILE_F)\"}");
    cJSON *other = cJSON_Parse("{\"kind\":\"slow_engine\",\"title\":\"Slow engine\",\"cost_ns\":1000,"
                               "\"message\":\"reciprocal on VectorE; use ScalarE\"}");

    /* add at D=300: TILE_F < 2*D, so 512 (index 2) is the largest allowed */
    cr_assert_eq(bind("add", "128x300 128x300", SIM_DT_FLOAT32, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    idx[0] = 1;
    ka_finding_text(&sp, idx, small, &b);
    cr_assert_str_eq(b.data, "- **dma_small_transfers** (5.0 us): DMAs move 1 KiB chunks; use larger tiles (TILE_F)\n");
    kf_buf_reset(&b);
    idx[0] = 2;
    ka_finding_text(&sp, idx, small, &b);
    cr_assert_null(strstr(b.data, "use larger tiles"), "%s", b.data);
    cr_assert(strstr(b.data, "Small DMA transfers. The tunables that address it cannot go further (TILE_F=512 is "
                             "already the largest allowed)"), "%s", b.data);
    kf_buf_reset(&b);
    /* a finding no tunable addresses keeps its message */
    ka_finding_text(&sp, idx, other, &b);
    cr_assert_str_eq(b.data, "- **slow_engine** (1.0 us): reciprocal on VectorE; use ScalarE\n");
    kf_buf_release(&b);
    cJSON_Delete(small);
    cJSON_Delete(other);
    ka_space_release(&sp);
    ka_problem_release(&pb);
}

/* Issue 19: where a kernel cannot reach its bound, the report says which
 * engine's own work rules it out and by how much; where no engine does, it
 * says the gap is overlap, not work. */
Test(agent, report_says_which_engine_keeps_the_bound_out_of_reach)
{
    kf_buf b = KF_BUF_INIT;
    cJSON *far = cJSON_Parse(
        "{\"latency_ns\":100000,\"floor_ns\":45000,\"bound_kind\":\"io\","
        "\"bounds\":{\"pipeline_ns\":90000,\"pipeline_engine\":\"tensor\"},"
        "\"summary\":{\"total_time\":1e-4,\"tensor_engine_active_time_percent\":90,"
        "\"vector_engine_active_time_percent\":60,\"scalar_engine_active_time_percent\":0,"
        "\"gpsimd_engine_active_time_percent\":75,\"dma_active_time_percent\":50}}");
    cJSON *near = cJSON_Parse("{\"latency_ns\":100000,\"floor_ns\":80000,\"bound_kind\":\"compute\","
                              "\"bounds\":{\"pipeline_ns\":80500,\"pipeline_engine\":\"dma\"},"
                              "\"summary\":{\"total_time\":1e-4}}");
    cJSON *none = cJSON_Parse("{\"latency_ns\":100000,\"bounds\":{}}");

    ka_reach_text(far, &b);
    cr_assert(strstr(b.data, "The io bound (45.0 us) is out of this kernel's reach at this setting: TensorE alone is "
                             "busy 90.0 us, so however well the engines overlap the kernel reaches at most 0.50 of the "
                             "bound (it runs at 0.90 of that time)."), "%s", b.data);
    cr_assert(strstr(b.data, "- Busy time per engine: TensorE 90.0 us (90%), GpSimd 75.0 us (75%), VectorE 60.0 us "
                             "(60%), DMA in flight 50.0 us (50%).\n"), "busiest first, idle engines left out: %s", b.data);
    kf_buf_reset(&b);
    ka_reach_text(near, &b);
    cr_assert_str_eq(b.data, "- No engine's own work stands between this kernel and the compute bound (80.0 us): the "
                             "busiest, one DMA engine, is busy 80.5 us. The rest of the gap is overlap and "
                             "waiting (the findings below).\n");
    kf_buf_reset(&b);
    ka_reach_text(none, &b);
    cr_assert_eq(b.len, 0, "no bound, nothing said: %s", b.data ? b.data : "");
    kf_buf_release(&b);
    cJSON_Delete(far);
    cJSON_Delete(near);
    cJSON_Delete(none);
}

/* A warm start from a library entry (docs/library.md): a second tune of
 * the same op and shape starting from the first one's best evaluates fewer
 * candidates, finds a kernel as fast, and says it was warm-started, in its
 * first iteration's reason, its result and its report.  Params the
 * template does not declare are not used, and the result says why. */
Test(agent, a_warm_start_from_the_library_evaluates_fewer_candidates)
{
    ka_opts o = { 0 };
    cJSON *cold, *warm, *params, *bad;
    const cJSON *w, *first;
    double cold_iters, warm_iters;

    o.max_iterations = 40;
    o.seed = 3;
    cold = tune("matmul", "512x512 512x1024", &o);
    cold_iters = num(cold, "iterations");
    params = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cold, "best"), "params"),
                             true);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(cold, "warm_start"));

    o.warm_params = params;
    o.warm_entry = "matmul-trn2-bfloat16-sim-0123456789ab";
    iters = cJSON_CreateArray();
    warm = tune("matmul", "512x512 512x1024", &o);
    warm_iters = num(warm, "iterations");
    cr_assert_lt(warm_iters, cold_iters, "warm %g evaluations, cold %g", warm_iters, cold_iters);
    cr_log_info("matmul 512x512x1024 trn2: %g iterations cold, %g warm-started", cold_iters, warm_iters);
    cr_assert_leq(num(cJSON_GetObjectItemCaseSensitive(warm, "best"), "latency_ns"),
                  num(cJSON_GetObjectItemCaseSensitive(cold, "best"), "latency_ns"));
    first = cJSON_GetArrayItem(iters, 0);
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(first, "reason")->valuestring,
                     "warm start from library entry matmul-trn2-bfloat16-sim-0123456789ab"),
              "%s", cJSON_GetObjectItemCaseSensitive(first, "reason")->valuestring);
    cr_assert(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(first, "params"), params, true),
              "the first candidate is the entry's params");
    w = cJSON_GetObjectItemCaseSensitive(warm, "warm_start");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "used")));
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(warm, "report")->valuestring,
                     "Warm start from library entry matmul-trn2-bfloat16-sim-0123456789ab"));
    cJSON_Delete(iters);
    iters = NULL;
    cJSON_Delete(warm);

    /* a value the template does not declare: an ordinary start, and why */
    bad = cJSON_Duplicate(params, true);
    cJSON_ReplaceItemInObject(bad, cJSON_GetArrayItem(bad, 0)->string, cJSON_CreateNumber(7777));
    o.warm_params = bad;
    o.max_iterations = 1;
    warm = tune("matmul", "512x512 512x1024", &o);
    w = cJSON_GetObjectItemCaseSensitive(warm, "warm_start");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(w, "used")));
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(w, "note")->valuestring, "does not declare"), "%s",
              cJSON_GetObjectItemCaseSensitive(w, "note")->valuestring);
    cJSON_Delete(warm);
    cJSON_Delete(bad);
    cJSON_Delete(params);
    cJSON_Delete(cold);
}

/* The fields of an iteration that make the search's history. */
static char *history_of(const cJSON *it)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "validation");
    char *p = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(it, "params")), *out;
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(it, "latency_ns");
    out = kf_asprintf("%s %s %.3f %s %s", p, cJSON_GetObjectItemCaseSensitive(it, "action")->valuestring,
                      cJSON_IsNumber(lat) ? lat->valuedouble : -1.0,
                      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "status")),
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "correct")) ? "correct" : "-");
    free(p);
    return out;
}

/* --jobs runs the timing-only evaluations the planner asks for next and a
 * validation's seeds side by side, but takes them in the serial order: the
 * same iterations, the same best, the same counts as one at a time. */
Test(agent, jobs_give_the_same_history_and_best_as_serial)
{
    cJSON *res[2], *hist[2];
    for (int k = 0; k < 2; k++) {
        ka_opts o = { 0 };
        o.max_iterations = 10;
        o.seed = 5;
        o.jobs = k + 1;
        o.memory_mib = 4096;
        iters = cJSON_CreateArray();
        res[k] = tune("softmax", "256x1024", &o);
        hist[k] = iters;
        iters = NULL;
    }
    cr_assert_eq(cJSON_GetArraySize(hist[0]), cJSON_GetArraySize(hist[1]), "as many iterations");
    cr_assert_geq(cJSON_GetArraySize(hist[0]), 3);
    for (int i = 0; i < cJSON_GetArraySize(hist[0]); i++) {
        char *a = history_of(cJSON_GetArrayItem(hist[0], i)), *b = history_of(cJSON_GetArrayItem(hist[1], i));
        cr_assert_str_eq(a, b, "iteration %d", i + 1);
        free(a);
        free(b);
    }
    {
        char *a = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res[0], "best"), "params"));
        char *b = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res[1], "best"), "params"));
        cr_assert_str_eq(a, b, "same best");
        free(a);
        free(b);
    }
    cr_assert_eq(num(res[0], "latency_ns"), num(res[1], "latency_ns"));
    cr_assert_eq(num(res[0], "evaluations"), num(res[1], "evaluations"), "evaluations count what the search used");
    cr_assert_eq(num(res[0], "validations"), num(res[1], "validations"));
    /* the loop's own time is what it did not spend waiting for evaluations:
     * evaluations run side by side overlap, so their walls must not be
     * summed (that made the overhead negative) */
    for (int k = 0; k < 2; k++) {
        const cJSON *tm = cJSON_GetObjectItemCaseSensitive(res[k], "timings");
        double wall = num(tm, "wall_s"), eval = num(tm, "eval_s");
        cr_assert(eval > 0 && eval <= wall, "jobs %d: %g s in evaluations of %g s", k + 1, eval, wall);
        cr_assert_geq(num(tm, "loop_overhead_fraction"), 0.0);
    }
    for (int k = 0; k < 2; k++) {
        cJSON_Delete(hist[k]);
        cJSON_Delete(res[k]);
    }
}

/* The reference does not depend on the candidate: each seed's reference
 * outputs are computed by the first validation and read by the others.
 * The inputs do not either: each seed's are made once, before the first
 * validation, and every validation reads them. */
Test(agent, the_reference_runs_once_per_seed)
{
    ka_opts o = { 0 };
    cJSON *res, *it;
    double computed = 0, read = 0, in_read = 0;
    o.max_iterations = 10;
    o.seed = 5;
    o.jobs = 2;
    iters = cJSON_CreateArray();
    res = tune("softmax", "256x1024", &o);
    cr_assert_geq(num(res, "validations"), 2, "a search with several new bests");
    cJSON_ArrayForEach(it, iters)
    {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "validation");
        if (!cJSON_GetObjectItemCaseSensitive(v, "ref_computed"))
            continue;
        cr_assert_eq(num(v, "seeds_run"), 3, "three seeds per validation");
        computed += num(v, "ref_computed");
        read += num(v, "ref_read");
        in_read += num(v, "inputs_read");
    }
    cr_assert_eq(computed, 3, "the reference ran once per seed");
    cr_assert_eq(read, 3 * (num(res, "validations") - 1), "the later validations read it");
    cr_assert_eq(in_read, 3 * num(res, "validations"), "every validation read the stored inputs");
    cJSON_Delete(iters);
    iters = NULL;
    cJSON_Delete(res);
}

/* Stored inputs are the problem's or nothing: a file holding another
 * shape fails the validation with an error naming the input, and one
 * holding the problem's own inputs validates as the child's would. */
Test(agent, stored_inputs_must_be_the_problems)
{
    ka_problem pb;
    ka_space sp;
    kf_err err = KF_ERR_INIT;
    ka_eval_req req;
    cJSON *res = NULL;
    sim_array *in = NULL;
    char path[] = "/tmp/kforge-test-inputs-XXXXXX";
    int fd = mkstemp(path);
    int idx[KA_MAX_TUNABLES] = { 0 };
    char *kwargs;

    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(bind("softmax", "256x1024", SIM_DT_BFLOAT16, "trn2", &pb, &sp, &err), KF_OK, "%s", err.msg);
    for (int i = 0; i < sp.n; i++)
        idx[i] = sp.t[i].def;
    kwargs = ka_space_kwargs(&sp, idx, pb.fixed_kwargs);
    memset(&req, 0, sizeof(req));
    req.pb = &pb;
    req.kwargs_json = kwargs;
    req.mode = KA_EVAL_VALIDATE;
    req.rtol = req.atol = -1;
    req.n_seeds = 1;
    req.seeds[0] = 11;
    req.in_in[0] = path;

    /* the problem's own inputs */
    cr_assert_eq(ka_eval_inputs(&pb, 11, &in, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(ka_ref_write(path, in, (size_t)pb.n_inputs, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(ka_eval_run(&req, &res, &err), KF_OK, "%s", err.msg);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "pass")), "%s", cJSON_PrintUnformatted(res));
    cr_assert_eq(num(res, "inputs_read"), 1);
    cJSON_Delete(res);

    /* another shape */
    in[0].shape[1] = 512;
    cr_assert_eq(ka_ref_write(path, in, (size_t)pb.n_inputs, &err), KF_OK, "%s", err.msg);
    in[0].shape[1] = 1024;
    cr_assert_eq(ka_eval_run(&req, &res, &err), KF_OK, "%s", err.msg);
    cr_assert(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "ok")), "%s", cJSON_PrintUnformatted(res));
    {
        char *txt = cJSON_PrintUnformatted(res);
        cr_assert(strstr(txt, "do not match input"), "%s", txt);
        free(txt);
    }
    cJSON_Delete(res);
    for (int i = 0; i < pb.n_inputs; i++)
        sim_array_release(&in[i]);
    free(in);
    unlink(path);
    free(kwargs);
    ka_space_release(&sp);
    ka_problem_release(&pb);
}

/* A candidate that fails its first seed stops there, serial or not: the
 * verdict names that seed only. */
Test(agent, a_candidate_that_fails_its_first_seed_runs_no_other)
{
    char *path = write_skipping_variant();
    int64_t sh[2][KA_MAX_DIMS] = { { 256, 8192 }, { 256, 8192 } };
    int nd[2] = { 2, 2 };

    for (int jobs = 1; jobs <= 2; jobs++) {
        cJSON *meta = NULL, *res = NULL, *it;
        ka_problem pb;
        ka_space sp;
        ka_opts o = { 0 };
        ka_hooks h = { NULL, on_progress, NULL, NULL };
        kf_err err = KF_ERR_INIT;
        bool seen_wrong = false;

        cr_assert_eq(ka_lib_read_meta(path, &meta, &err), KF_OK, "%s", err.msg);
        cr_assert_eq(ka_lib_bind(meta, path, (const int64_t(*)[KA_MAX_DIMS])sh, nd, 2, SIM_DT_BFLOAT16, "trn2", &pb,
                                 &sp, &err), KF_OK, "%s", err.msg);
        o.planner = KA_PLAN_EXHAUSTIVE;
        o.patience = -1;
        o.seed = 3;
        o.jobs = jobs;
        iters = cJSON_CreateArray();
        cr_assert_eq(ka_tune(&pb, &sp, &o, &h, &res, &err), KF_OK, "%s", err.msg);
        cJSON_ArrayForEach(it, iters)
        {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "validation"), *c;
            double seed = -1;
            if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "params"), "TILE_F")->valueint !=
                2048)
                continue;
            seen_wrong = true;
            cr_assert_eq(num(v, "seeds_run"), 1, "jobs %d: no seed after the failing first one", jobs);
            cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(v, "checks"))
            {
                if (seed < 0)
                    seed = num(c, "seed");
                cr_assert_eq(num(c, "seed"), seed, "every check is the first seed's");
            }
        }
        cr_assert(seen_wrong, "the skipping setting was evaluated");
        cJSON_Delete(iters);
        iters = NULL;
        cJSON_Delete(res);
        cJSON_Delete(meta);
        ka_space_release(&sp);
        ka_problem_release(&pb);
    }
    unlink(path);
    free(path);
}
