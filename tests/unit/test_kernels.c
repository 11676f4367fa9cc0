/* The NKI corpus test: every kernel of tests/kernels/corpus.json, in each API
 * generation, runs through the simulator in a sandbox (sim_check_evaluate)
 * on several seeded input sets and must match its NumPy reference in full;
 * every negative kernel must fail with its simulator error code and line.
 * Each case also runs once with numerics off (the timing model's mode),
 * which must trace exactly the instructions of the numerics run.
 *
 * An op or case marked "pending": "reason" in the manifest is reported as
 * skipped with that reason (cr_skip_test), never silently. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "sim/sim_eval.h"
#include "sim/sim_input.h"

static char *root_path(const char *rel)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    return kf_asprintf("%s/%s", root && *root ? root : ".", rel);
}

static cJSON *load_manifest(void)
{
    char *path = root_path("tests/kernels/corpus.json");
    FILE *f = fopen(path, "rb");
    kf_buf b = KF_BUF_INIT;
    char chunk[8192];
    size_t n;
    cJSON *j;

    cr_assert_not_null(f, "cannot open %s", path);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        kf_buf_add(&b, chunk, n);
    fclose(f);
    j = cJSON_Parse(b.data);
    cr_assert_not_null(j, "%s is not valid JSON", path);
    kf_buf_release(&b);
    free(path);
    return j;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Parameters: which op and which generation (or which negative kernel). */
typedef struct corpus_param {
    int op, gen;
} corpus_param;

static size_t count_params(int negative, corpus_param *out)
{
    /* parameter generators run outside a test: read the manifest directly */
    char *path = root_path("tests/kernels/corpus.json");
    FILE *f = fopen(path, "rb");
    kf_buf b = KF_BUF_INIT;
    char chunk[8192];
    size_t n, count = 0;
    cJSON *j, *ops;

    free(path);
    if (!f)
        return 0;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        kf_buf_add(&b, chunk, n);
    fclose(f);
    j = cJSON_Parse(b.data);
    kf_buf_release(&b);
    ops = cJSON_GetObjectItemCaseSensitive(j, negative ? "negative" : "ops");
    for (int i = 0; i < cJSON_GetArraySize(ops); i++) {
        cJSON *op = cJSON_GetArrayItem(ops, i);
        int gens = negative ? 1 : cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(op, "generations"));
        for (int g = 0; g < gens; g++) {
            if (out) {
                out[count].op = i;
                out[count].gen = g;
            }
            count++;
        }
    }
    cJSON_Delete(j);
    return count;
}

static struct criterion_test_params make_params(int negative)
{
    size_t n = count_params(negative, NULL);
    corpus_param *p = cr_malloc(sizeof(*p) * (n ? n : 1));
    count_params(negative, p);
    return cr_make_param_array(corpus_param, p, n, NULL);
}

static sim_sandbox_limits limits(void)
{
    sim_sandbox_limits l = { .cpu_seconds = 300, .memory_mib = 4096, .wall_ms = 300000 };
    return l;
}

static size_t make_inputs(const cJSON *specs, uint64_t seed, sim_array *in, size_t cap)
{
    size_t n = 0;
    for (int i = 0; i < cJSON_GetArraySize(specs) && n < cap; i++) {
        const cJSON *s = cJSON_GetArrayItem(specs, i);
        sim_npy_array a;
        char *name = NULL;
        kf_err e = KF_ERR_INIT;
        cr_assert(cJSON_IsString(s), "input specs are strings");
        cr_assert_eq(sim_input_parse(s->valuestring, seed, 1ull << 32, &name, &a, &e), KF_OK, "%s", e.msg);
        memset(&in[n], 0, sizeof(in[n]));
        snprintf(in[n].name, sizeof(in[n].name), "%s", name);
        in[n].dtype = a.dtype;
        in[n].ndim = a.ndim;
        for (int d = 0; d < a.ndim; d++)
            in[n].shape[d] = (int64_t)a.shape[d];
        in[n].data = a.data;
        free(name);
        n++;
    }
    return n;
}

ParameterizedTestParameters(corpus, kernels)
{
    return make_params(0);
}

ParameterizedTest(corpus_param *p, corpus, kernels)
{
    cJSON *m = load_manifest();
    cJSON *op = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "ops"), p->op);
    const char *gen = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(op, "generations"), p->gen)->valuestring;
    const char *entry = jstr(op, "entry"), *pending = jstr(op, "pending");
    const char *target = jstr(m, "target") ? jstr(m, "target") : "trn2";
    const cJSON *seeds_j = cJSON_GetObjectItemCaseSensitive(m, "seeds");
    int seeds = cJSON_IsNumber(seeds_j) ? seeds_j->valueint : 2;
    char *kernel = kf_asprintf("tests/kernels/%s/%s", gen, jstr(op, "kernel"));
    char *kpath = root_path(kernel), *ref = kf_asprintf("tests/kernels/%s", jstr(op, "reference"));
    char *rpath = root_path(ref);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(op, "cases");
    kf_buf fails = KF_BUF_INIT, skips = KF_BUF_INIT;
    int runs = 0, bad = 0;

    if (pending) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s %s: pending: %s", gen, entry, pending);
        cJSON_Delete(m);
        cr_log_warn("SKIPPED %s", msg);
        cr_skip_test("%s", msg);
    }
    for (int c = 0; c < cJSON_GetArraySize(cases); c++) {
        const cJSON *cs = cJSON_GetArrayItem(cases, c);
        const cJSON *grid = cJSON_GetObjectItemCaseSensitive(cs, "grid");
        const cJSON *kw = cJSON_GetObjectItemCaseSensitive(cs, "kwargs");
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(cs, "rtol");
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(cs, "atol");
        char *kwargs = kw ? cJSON_PrintUnformatted(kw) : NULL;
        if (jstr(cs, "pending")) {
            kf_buf_addf(&skips, "case %d pending: %s; ", c, jstr(cs, "pending"));
            free(kwargs);
            continue;
        }
        for (int s = 0; s < seeds; s++) {
            sim_array in[8];
            size_t n_in = make_inputs(cJSON_GetObjectItemCaseSensitive(cs, "inputs"), (uint64_t)s, in, 8);
            sim_eval_spec spec;
            sim_eval ev;
            sim_sandbox_limits lim = limits();
            kf_err e = KF_ERR_INIT;

            memset(&spec, 0, sizeof(spec));
            spec.run.source_path = kpath;
            spec.run.entry = entry;
            spec.run.target = target;
            for (int g = 0; g < cJSON_GetArraySize(grid) && g < 3; g++)
                spec.run.grid[g] = cJSON_GetArrayItem(grid, g)->valueint;
            spec.run.numerics = true;
            spec.run.kwargs_json = kwargs;
            spec.inputs = in;
            spec.n_inputs = n_in;
            spec.ref_path = rpath;
            spec.ref_entry = entry;
            cr_assert_eq(sim_check_evaluate(&lim, &spec, &ev, &e), KF_OK, "%s", e.msg);
            runs++;
            if (!ev.kernel_ok) {
                bad++;
                kf_buf_addf(&fails, "\n  %s case %d seed %d: kernel failed: %s", kernel, c, s,
                            ev.error[0] ? ev.error : ev.sb.reason);
                if (ev.sb.log && ev.sb.log[0] && ev.serr.code == SIM_E_NONE)
                    kf_buf_addf(&fails, "\n    log: %.600s", ev.sb.log);
            } else if (ev.ref_failed) {
                bad++;
                kf_buf_addf(&fails, "\n  %s case %d seed %d: reference failed: %s", kernel, c, s, ev.ref_error);
            } else if (ev.n_outputs != ev.n_refs) {
                bad++;
                kf_buf_addf(&fails, "\n  %s case %d seed %d: %zu outputs, reference gives %zu", kernel, c, s,
                            ev.n_outputs, ev.n_refs);
            } else {
                for (size_t o = 0; o < ev.n_outputs; o++) {
                    sim_check_tol tol = sim_check_default_tol(ev.outputs[o].dtype);
                    sim_check_cmp cmp;
                    if (cJSON_IsNumber(rt))
                        tol.rtol = rt->valuedouble;
                    if (cJSON_IsNumber(at))
                        tol.atol = at->valuedouble;
                    sim_check_compare(&ev.outputs[o], &ev.refs[o], tol, &cmp);
                    if (!cmp.pass) {
                        bad++;
                        kf_buf_addf(&fails, "\n  %s case %d seed %d output %zu: %s", kernel, c, s, o, cmp.msg);
                    }
                }
            }
            if (s == 0 && ev.kernel_ok) {
                /* timing-only mode traces the same instructions, values aside */
                sim_eval tv;
                uint64_t want_insns = ev.insns;
                spec.run.numerics = false;
                spec.ref_path = NULL;
                cr_assert_eq(sim_check_evaluate(&lim, &spec, &tv, &e), KF_OK, "%s", e.msg);
                runs++;
                if (!tv.kernel_ok || tv.insns != want_insns) {
                    bad++;
                    kf_buf_addf(&fails, "\n  %s case %d with numerics off: %s (%llu instructions, %llu with numerics)",
                                kernel, c, tv.kernel_ok ? "instruction counts differ" : tv.error,
                                (unsigned long long)tv.insns, (unsigned long long)want_insns);
                }
                sim_eval_release(&tv);
            }
            sim_eval_release(&ev);
            for (size_t i = 0; i < n_in; i++)
                free(in[i].data);
        }
        free(kwargs);
    }
    if (skips.len)
        cr_log_warn("%s %s: skipped: %s", gen, entry, skips.data);
    cr_expect_eq(bad, 0, "%s %s: %d of %d evaluations failed:%s", gen, entry, bad, runs, fails.data);
    kf_buf_release(&fails);
    kf_buf_release(&skips);
    free(kernel);
    free(kpath);
    free(ref);
    free(rpath);
    cJSON_Delete(m);
}

ParameterizedTestParameters(corpus, negative)
{
    return make_params(1);
}

ParameterizedTest(corpus_param *p, corpus, negative)
{
    cJSON *m = load_manifest();
    cJSON *neg = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "negative"), p->op);
    const char *want = jstr(neg, "expect_error"), *kernel = jstr(neg, "kernel");
    const cJSON *line = cJSON_GetObjectItemCaseSensitive(neg, "expect_line");
    char *rel = kf_asprintf("tests/kernels/%s", kernel), *kpath = root_path(rel);
    sim_array in[8];
    size_t n_in;
    sim_eval_spec spec;
    sim_eval ev;
    sim_sandbox_limits lim = limits();
    kf_err e = KF_ERR_INIT;

    if (jstr(neg, "pending")) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s: pending: %s", kernel, jstr(neg, "pending"));
        cJSON_Delete(m);
        cr_log_warn("SKIPPED %s", msg);
        cr_skip_test("%s", msg);
    }
    if (cJSON_IsNumber(line)) {
        /* the manifest's line is the one the kernel marks with "# ERROR" */
        FILE *f = fopen(kpath, "r");
        char buf[512];
        int ln = 0, marked = 0;
        cr_assert_not_null(f, "cannot open %s", kpath);
        while (fgets(buf, sizeof(buf), f)) {
            ln++;
            if (strstr(buf, "# ERROR"))
                marked = ln;
        }
        fclose(f);
        cr_assert_eq(marked, line->valueint, "%s marks line %d with # ERROR but the manifest says %d",
                     kernel, marked, line->valueint);
    }
    n_in = make_inputs(cJSON_GetObjectItemCaseSensitive(neg, "inputs"), 0, in, 8);
    memset(&spec, 0, sizeof(spec));
    spec.run.source_path = kpath;
    spec.run.entry = jstr(neg, "entry");
    /* a case may name its own target (a rule of one NeuronCore generation) */
    spec.run.target = jstr(neg, "target") ? jstr(neg, "target") : jstr(m, "target") ? jstr(m, "target") : "trn2";
    spec.run.numerics = true;
    spec.inputs = in;
    spec.n_inputs = n_in;
    cr_assert_eq(sim_check_evaluate(&lim, &spec, &ev, &e), KF_OK, "%s", e.msg);
    cr_expect_not(ev.kernel_ok, "%s ran without the expected %s error", kernel, want);
    cr_expect_str_eq(sim_error_name(ev.serr.code), want, "%s: expected SIM_E_%s, got SIM_E_%s (%s)", kernel,
                     want, sim_error_name(ev.serr.code), ev.error[0] ? ev.error : ev.sb.reason);
    if (cJSON_IsNumber(line))
        cr_expect_eq(ev.serr.line, line->valueint, "%s: expected line %d, got %d (%s)", kernel,
                     line->valueint, ev.serr.line, ev.error);
    if (ev.serr.code != SIM_E_NONE)
        cr_expect(ev.error[0] != '\0', "%s: the error has no message", kernel);
    sim_eval_release(&ev);
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    free(rel);
    free(kpath);
    cJSON_Delete(m);
}
