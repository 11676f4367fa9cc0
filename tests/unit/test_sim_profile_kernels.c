/* The profiler on real NKI kernels run through the functional simulator
 * (sim_run_kernel, timing-only unless stated): calibration of the corpus
 * matmul kernels against the published trn2 measurements
 * (neuron-hardware.md §5), the same profile with numerics on and off, the
 * findings a kernel engineer expects on the tiled matmul, and a profile for
 * every kernel of the corpus (tests/kernels/corpus.json). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_input.h"
#include "sim/sim_profile.h"
#include "sim/sim_run.h"
#include "sim/sim_trace.h"

typedef struct run {
    sim_record   rec;
    sim_profile *prof;
} run;

/* Runs `entry` of `path` with inputs given as kforge-sim --input specs. */
static void run_kernel(run *r, const char *target, const char *path, const char *entry,
                       const char *kwargs, const int grid[3], int numerics,
                       const char *const *specs, size_t n)
{
    sim_array in[8];
    sim_array *outs = NULL;
    size_t n_outs = 0;
    sim_error serr;
    sim_run_opts o;
    sim_target t;
    kf_err e = KF_ERR_INIT;

    cr_assert(n <= 8);
    memset(in, 0, sizeof(in));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sim_input_array(specs[i], 1ull << 32, &in[i], &e), KF_OK, "%s", e.msg);
    memset(&o, 0, sizeof(o));
    o.source_path = path;
    o.entry = entry;
    o.target = target;
    o.numerics = numerics != 0;
    o.kwargs_json = kwargs;
    if (grid)
        memcpy(o.grid, grid, sizeof(o.grid));
    sim_record_init(&r->rec, target);
    sim_error_clear(&serr);
    kf_code rc = sim_run_kernel(&o, in, n, &outs, &n_outs, &r->rec, &serr, &e);
    char msg[1024];
    sim_error_format(&serr, msg, sizeof(msg));
    cr_assert_eq(rc, KF_OK, "%s %s: %s (%s)", path, entry, e.msg, msg);
    for (size_t i = 0; i < n_outs; i++)
        sim_array_release(&outs[i]);
    free(outs);
    for (size_t i = 0; i < n; i++)
        sim_array_release(&in[i]);
    cr_assert_eq(sim_target_load(target, NULL, &t, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_profile_build(&r->rec, &t, &r->prof, &e), KF_OK, "%s", e.msg);
}

static void run_release(run *r)
{
    sim_profile_free(r->prof);
    sim_record_release(&r->rec);
}

static const sim_finding *finding(const sim_profile *p, sim_finding_kind k)
{
    for (size_t i = 0; i < p->n_findings; i++)
        if (p->findings[i].kind == k)
            return &p->findings[i];
    return NULL;
}

static const char *const MM4096[] = { "lhsT=shape:4096x4096:bf16:seed=1",
                                      "rhs=shape:4096x4096:bf16:seed=2" };

/* The corpus matmul kernels at the published shape, timing-only, on trn2:
 * tiled (8,602 us), 4x2 output-tile blocks (2,451 us), 16x2 blocks with the
 * rhs block resident (1,801 us).  Within 25%, in the published order. */
Test(sim_profile_kernels, calibration_trn2_corpus_matmuls)
{
    static const struct {
        const char *entry, *kwargs;
        double published_ms;
    } steps[] = {
        { "matmul_tiled", NULL, 8.602 },
        { "matmul_blocked", "{\"BLOCK_M\": 4, \"BLOCK_N\": 2}", 2.451 },
        { "matmul_blocked", "{\"BLOCK_M\": 16, \"BLOCK_N\": 2}", 1.801 },
    };
    double got[3];
    for (int i = 0; i < 3; i++) {
        run r;
        run_kernel(&r, "trn2", "tests/kernels/current/matmul.py", steps[i].entry, steps[i].kwargs,
                   NULL, 0, MM4096, 2);
        got[i] = r.prof->total_ns / 1e6;
        fprintf(stderr, "%s %s: %.3f ms (published %.3f ms)\n", steps[i].entry,
                    steps[i].kwargs ? steps[i].kwargs : "", got[i], steps[i].published_ms);
        cr_assert(fabs(got[i] / steps[i].published_ms - 1) <= 0.25,
                  "%s %s: %.3f ms vs published %.3f ms", steps[i].entry,
                  steps[i].kwargs ? steps[i].kwargs : "", got[i], steps[i].published_ms);
        run_release(&r);
    }
    cr_assert(got[0] > got[1] && got[1] > got[2]);
}

Test(sim_profile_kernels, numerics_on_and_off_give_the_same_profile)
{
    static const char *const specs[] = { "lhsT=shape:512x256:bf16:seed=3",
                                         "rhs=shape:512x1024:bf16:seed=4" };
    run on, off;
    run_kernel(&on, "trn2", "tests/kernels/current/matmul.py", "matmul_tiled", NULL, NULL, 1, specs, 2);
    run_kernel(&off, "trn2", "tests/kernels/current/matmul.py", "matmul_tiled", NULL, NULL, 0, specs, 2);
    cr_assert_eq(on.rec.n_insns, off.rec.n_insns);
    cr_assert(on.rec.n_insns > 0);
    char *a = sim_profile_json(on.prof), *b = sim_profile_json(off.prof);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
    run_release(&on);
    run_release(&off);
}

Test(sim_profile_kernels, tiled_matmul_findings_name_the_reloaded_input_and_its_line)
{
    static const char *const specs[] = { "lhsT=shape:1024x1024:bf16:seed=1",
                                         "rhs=shape:1024x1024:bf16:seed=2" };
    run r, b;
    run_kernel(&r, "trn2", "tests/kernels/current/matmul.py", "matmul_tiled", NULL, NULL, 0, specs, 2);
    const sim_finding *f = finding(r.prof, SIM_FIND_HBM_RELOAD);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "`rhs`") != NULL, "%s", f->message);
    cr_assert(strstr(f->message, "matmul.py:") != NULL, "%s", f->message);
    cr_assert_not_null(finding(r.prof, SIM_FIND_DMA_SMALL));
    cr_assert_not_null(finding(r.prof, SIM_FIND_DMA_WAIT));
    cr_assert_str_eq(r.prof->bounds.pipeline_engine, "dma");

    /* the blocked kernel keeps its operand blocks in SBUF: no reload */
    run_kernel(&b, "trn2", "tests/kernels/current/matmul.py", "matmul_blocked",
               "{\"BLOCK_M\": 8, \"BLOCK_N\": 2}", NULL, 0, specs, 2);
    cr_assert_null(finding(b.prof, SIM_FIND_HBM_RELOAD));
    cr_assert(b.prof->total_ns < r.prof->total_ns / 2);
    run_release(&r);
    run_release(&b);
}

/* Profiles one corpus kernel and checks the profile is whole. */
static void profile_corpus_kernel(const char *path, const char *entry, const char *kw,
                                  const int *grid, const char *const *specs, size_t ns)
{
    run r;
    run_kernel(&r, "trn2", path, entry, kw, grid, 0, specs, ns);
    cr_assert(r.prof->total_ns > 0, "%s", path);
    cr_assert(r.prof->n_lines > 0, "%s: lines attributed", path);
    cr_assert(r.prof->bounds.achieved_fraction > 0 && r.prof->bounds.achieved_fraction <= 1.0001,
              "%s: achieved %f", path, r.prof->bounds.achieved_fraction);
    char *summary = sim_profile_summary_json(r.prof);
    cJSON *s = cJSON_Parse(summary);
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(s, "total_time")));
    cJSON_Delete(s);
    free(summary);
    FILE *tf = tmpfile();
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_trace_write(r.prof, tf, &e), KF_OK);
    fclose(tf);
    char *screen = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&screen, &len);
    sim_profile_print(m, r.prof);
    fclose(m);
    fprintf(stderr, "%s\n%s\n", path, screen);
    free(screen);
    run_release(&r);
}

/* Every kernel of the corpus, both API generations (first case of each op),
 * profiles, with lines attributed, bounds, a summary and a trace. */
Test(sim_profile_kernels, every_corpus_kernel_has_a_profile)
{
    FILE *f = fopen("tests/kernels/corpus.json", "r");
    cr_assert_not_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text), *op;
    cr_assert_not_null(root);
    int profiled = 0;
    cJSON_ArrayForEach(op, cJSON_GetObjectItem(root, "ops")) {
        cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(op, "cases"), 0), *it, *gen;
        if (cJSON_GetObjectItem(op, "pending") || !c || cJSON_GetObjectItem(c, "pending"))
            continue;
        const char *specs[8];
        size_t ns = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "inputs"))
            if (ns < 8)
                specs[ns++] = it->valuestring;
        int grid[3] = { 0, 0, 0 }, gi = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "grid"))
            if (gi < 3)
                grid[gi++] = it->valueint;
        char *kw = cJSON_GetObjectItem(c, "kwargs")
                       ? cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "kwargs")) : NULL;
        cJSON_ArrayForEach(gen, cJSON_GetObjectItem(op, "generations")) {
            char path[256];
            snprintf(path, sizeof(path), "tests/kernels/%s/%s", gen->valuestring,
                     cJSON_GetObjectItem(op, "kernel")->valuestring);
            profile_corpus_kernel(path, cJSON_GetObjectItem(op, "entry")->valuestring, kw,
                                  gi ? grid : NULL, specs, ns);
            profiled++;
        }
        free(kw);
    }
    cr_assert(profiled >= 20, "profiled %d corpus kernels (both API generations)", profiled);
    cJSON_Delete(root);
}

/* The same algorithm in the legacy and the current API times alike: every
 * corpus pair (tests/kernels/{legacy,current}) at a realistic trn2 shape,
 * timing-only, within 5% — the record lowering (sim/sim_lower.h) charges a
 * legacy `t[...] = nl.load(...)` as one DMA, drops the PSUM `nl.zeros` an
 * accumulation overwrites, and so on; the blocks of a legacy tensor with
 * block dims are reused one by one, as the compiler places them, like the
 * separate tiles of the current API; an engine issues a ready instruction
 * before one still waiting for its operands, as the compiler's scheduler
 * does (rule 5: flash_fwd's statement orders differ).  A pair marked `gap`
 * would be printed, not asserted; none is now.  rmsnorm and layernorm repeat gamma across
 * partitions with one SBUF-to-SBUF DMA in both generations (a legacy
 * `broadcast_to` across partitions records that DMA). */
Test(sim_profile_kernels, legacy_and_current_pairs_time_within_5_percent, .timeout = 300)
{
    static const struct {
        const char *file, *entry, *kwargs;
        const char *in[3];
        int grid[3];
        int gap;
    } pairs[] = {
        { "tensor_add.py", "tensor_add", NULL,
          { "a_input=shape:2048x4096:fp32:seed=1", "b_input=shape:2048x4096:fp32:seed=2" },
          { 16, 8, 1 }, 0 },
        { "transpose2d.py", "transpose2d", "{\"F1\": 32, \"F2\": 64}",
          { "in_tensor=shape:128x2048:fp32:seed=1" }, { 0 }, 0 },
        { "matmul.py", "matmul_tiled", NULL,
          { "lhsT=shape:1024x1024:bf16:seed=1", "rhs=shape:1024x2048:bf16:seed=2" }, { 0 }, 0 },
        { "matmul.py", "matmul_hoisted", NULL,
          { "lhsT=shape:1024x1024:bf16:seed=1", "rhs=shape:1024x2048:bf16:seed=2" }, { 0 }, 0 },
        { "matmul.py", "matmul_blocked", "{\"BLOCK_M\": 4, \"BLOCK_N\": 2}",
          { "lhsT=shape:1024x1024:bf16:seed=1", "rhs=shape:1024x2048:bf16:seed=2" }, { 0 }, 0 },
        { "matmul.py", "matmul_optimized", "{\"BLOCK_M\": 4, \"BLOCK_N\": 2, \"BLOCK_K\": 2}",
          { "lhsT=shape:1024x1024:bf16:seed=1", "rhs=shape:1024x2048:bf16:seed=2" }, { 0 }, 0 },
        { "softmax.py", "softmax", NULL, { "x=shape:4096x2048:fp32:seed=1" }, { 0 }, 0 },
        { "rmsnorm.py", "rmsnorm", NULL,
          { "x=shape:4096x2048:fp32:seed=1", "g=shape:2048:fp32:seed=2" }, { 0 }, 0 },
        { "layernorm.py", "layernorm", NULL,
          { "x=shape:4096x2048:fp32:seed=1", "gamma=shape:2048:fp32:seed=2",
            "beta=shape:2048:fp32:seed=3" }, { 0 }, 0 },
        { "layernorm.py", "layernorm_bn", NULL,
          { "x=shape:4096x2048:fp32:seed=1", "gamma=shape:2048:fp32:seed=2",
            "beta=shape:2048:fp32:seed=3" }, { 0 }, 0 },
        { "average_pool2d.py", "average_pool2d", NULL,
          { "in_tensor=shape:128x128x128:fp32:seed=1" }, { 0 }, 0 },
        { "flash_fwd.py", "flash_fwd", NULL,
          { "q=shape:128x2048:fp32:seed=1", "k=shape:128x2048:fp32:seed=2",
            "v=shape:2048x128:fp32:seed=3" }, { 0 }, 0 },
    };
    int checked = 0;
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        char lp[128], cp[128];
        size_t n = 0;
        run l, c;
        while (n < 3 && pairs[i].in[n])
            n++;
        snprintf(lp, sizeof(lp), "tests/kernels/legacy/%s", pairs[i].file);
        snprintf(cp, sizeof(cp), "tests/kernels/current/%s", pairs[i].file);
        const int *g = pairs[i].grid[0] ? pairs[i].grid : NULL;
        run_kernel(&l, "trn2", lp, pairs[i].entry, pairs[i].kwargs, g, 0, pairs[i].in, n);
        run_kernel(&c, "trn2", cp, pairs[i].entry, pairs[i].kwargs, g, 0, pairs[i].in, n);
        double ratio = l.prof->total_ns / c.prof->total_ns;
        fprintf(stderr, "pair %-16s legacy %9.2f us current %9.2f us  %+5.1f%%%s\n",
                pairs[i].entry, l.prof->total_ns / 1e3, c.prof->total_ns / 1e3,
                (ratio - 1) * 100, pairs[i].gap ? "  (gap, not asserted)" : "");
        if (!pairs[i].gap) {
            cr_assert(fabs(ratio - 1) <= 0.05, "%s: legacy %.2f us vs current %.2f us",
                      pairs[i].entry, l.prof->total_ns / 1e3, c.prof->total_ns / 1e3);
            checked++;
        }
        run_release(&l);
        run_release(&c);
    }
    cr_assert_eq(checked, 12);
}

/* Loop-invariant work the compiler hoists is charged once: a kernel that
 * reloads the same bias rows and re-makes the same constant in each of its
 * 16 iterations times like the one that does both before the loop, in both
 * API generations, and the literal record (no lowering) is slower. */
Test(sim_profile_kernels, loop_invariant_loads_and_constants_are_charged_once)
{
    static const char *const specs[] = { "x=shape:2048x1024:fp32:seed=1",
                                         "b=shape:128x1024:fp32:seed=2" };
    static const char *const files[] = { "tests/kernels/timing/hoist_current.py",
                                         "tests/kernels/timing/hoist_legacy.py" };
    for (int g = 0; g < 2; g++) {
        run in, out;
        sim_target t;
        sim_timing raw;
        kf_err e = KF_ERR_INIT;
        run_kernel(&in, "trn2", files[g], "bias_in_loop", NULL, NULL, 0, specs, 2);
        run_kernel(&out, "trn2", files[g], "bias_hoisted", NULL, NULL, 0, specs, 2);
        fprintf(stderr, "%s: in loop %.2f us (%zu hoisted), hoisted by hand %.2f us\n", files[g],
                in.prof->total_ns / 1e3, in.prof->lower.hoisted, out.prof->total_ns / 1e3);
        cr_assert_eq(in.prof->lower.hoisted, (size_t)30, "%s: %zu", files[g], in.prof->lower.hoisted);
        cr_assert_eq(out.prof->lower.hoisted, 0);
        cr_assert(fabs(in.prof->total_ns / out.prof->total_ns - 1) <= 0.01, "%s: %.2f vs %.2f us",
                  files[g], in.prof->total_ns / 1e3, out.prof->total_ns / 1e3);
        cr_assert_eq(sim_target_load("trn2", NULL, &t, &e), KF_OK, "%s", e.msg);
        cr_assert_eq(sim_timing_run(&in.rec, &t, &raw, &e), KF_OK, "%s", e.msg);
        cr_assert(sim_ps_to_ns(raw.total_ps) > in.prof->total_ns * 1.05,
                  "%s: the literal record %.2f us", files[g], sim_ps_to_ns(raw.total_ps) / 1e3);
        sim_timing_release(&raw);
        run_release(&in);
        run_release(&out);
    }
}

/* A PE transpose of fp32 data runs at the fp32 rate, a quarter of bf16's
 * (S7; the attention tutorial downcasts before transposing for this). */
Test(sim_profile_kernels, fp32_pe_transposes_run_at_the_fp32_rate)
{
    static const char *const f32[] = { "x=shape:128x4096:fp32:seed=1" };
    static const char *const b16[] = { "x=shape:128x4096:bf16:seed=1" };
    run a, b;
    run_kernel(&a, "trn2", "tests/kernels/timing/pe_transpose.py", "transpose_blocks", NULL, NULL,
               0, f32, 1);
    run_kernel(&b, "trn2", "tests/kernels/timing/pe_transpose.py", "transpose_blocks", NULL, NULL,
               0, b16, 1);
    double ta = sim_ps_to_ns(a.prof->tm.track_busy_ps[SIM_ENG_TENSOR]);
    double tb = sim_ps_to_ns(b.prof->tm.track_busy_ps[SIM_ENG_TENSOR]);
    fprintf(stderr, "PE transposes: fp32 %.2f us, bf16 %.2f us on TensorE\n", ta / 1e3, tb / 1e3);
    cr_assert(ta > 3.0 * tb && ta < 4.5 * tb, "fp32 %.1f ns vs bf16 %.1f ns", ta, tb);
    run_release(&a);
    run_release(&b);
}
