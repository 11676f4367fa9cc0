/*
 * sim_timing_bench — how fast the timing model and the profiler run.
 *
 * Timing-only simulation speed (simulated instructions per second) on
 * synthetic records with the structure of real kernels: the 4096^3 bf16
 * matmul (tiled and fully blocked, neuron-hardware.md §5 steps) and
 * flash-attention forward at sequence 4096 and 16384; then the profile's
 * cost (sim_profile_build + JSON + trace) relative to the timing pass.
 * Then the corpus kernels themselves (tests/kernels/current) through the
 * functional simulator: run time with numerics on and off, the timing
 * model's speed on their records, and the profile's cost as a share of the
 * run (target: at most 20% of the numerics-on run).
 * Each figure is the best of several runs, in CPU time.  Usage:
 * sim_timing_bench [TARGET].
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <string.h>

#include "bench/sim_timing_synth.h"
#include "sim/sim_input.h"
#include "sim/sim_run.h"
#include "sim/sim_profile.h"
#include "sim/sim_trace.h"

/* CPU time of this process: the figures stay meaningful on a shared, busy
 * machine (the timing model and the profiler are single-threaded). */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench(const char *label, const sim_record *r, const sim_target *t)
{
    double best_t = 1e30, best_p = 1e30, best_b = 1e30, sim_ms = 0;
    kf_err e = KF_ERR_INIT;

    for (int rep = 0; rep < 5; rep++) {
        sim_timing tm;
        double t0 = now();
        if (sim_timing_run(r, t, &tm, &e) != KF_OK) {
            fprintf(stderr, "%s: %s\n", label, e.msg);
            return 1;
        }
        double t1 = now();
        sim_ms = sim_ps_to_ns(tm.total_ps) / 1e6;
        sim_timing_release(&tm);
        if (t1 - t0 < best_t)
            best_t = t1 - t0;

        sim_profile *p = NULL;
        t0 = now();
        if (sim_profile_build(r, t, &p, &e) != KF_OK) {
            fprintf(stderr, "%s: %s\n", label, e.msg);
            return 1;
        }
        double tb = now();
        if (tb - t0 < best_b)
            best_b = tb - t0;
        char *js = sim_profile_json(p);
        FILE *devnull = fopen("/dev/null", "w");
        (void)sim_trace_write(p, devnull, &e);
        (void)sim_profile_write_instructions(p, devnull, &e);
        fclose(devnull);
        t1 = now();
        free(js);
        sim_profile_free(p);
        if (t1 - t0 < best_p)
            best_p = t1 - t0;
    }
    printf("%-32s %7zu insns  simulated %8.3f ms  timing %7.2f ms = %5.2f M insns/s  "
           "profile %7.2f ms (%.1fx)  +json+trace+table %7.2f ms\n",
           label, r->n_insns, sim_ms, best_t * 1e3, (double)r->n_insns / best_t / 1e6, best_b * 1e3,
           best_b / best_t, best_p * 1e3);
    return 0;
}

/* Run a corpus kernel; returns seconds, fills rec. */
static double run_real(const char *tn, const char *path, const char *entry, const char *kwargs,
                       const char *const *specs, size_t n, int numerics, sim_record *rec)
{
    sim_array in[4];
    sim_array *outs = NULL;
    size_t n_outs = 0;
    sim_error serr;
    sim_run_opts o;
    kf_err e = KF_ERR_INIT;

    memset(in, 0, sizeof(in));
    sim_record_init(rec, tn);
    for (size_t i = 0; i < n && i < 4; i++) {
        if (sim_input_array(specs[i], 1ull << 32, &in[i], &e) != KF_OK) {
            fprintf(stderr, "%s\n", e.msg);
            return -1;
        }
    }
    memset(&o, 0, sizeof(o));
    o.source_path = path;
    o.entry = entry;
    o.target = tn;
    o.numerics = numerics != 0;
    o.kwargs_json = kwargs;
    double t0 = now();
    kf_code rc = sim_run_kernel(&o, in, n, &outs, &n_outs, rec, &serr, &e);
    double t1 = now();
    for (size_t i = 0; i < n_outs; i++)
        sim_array_release(&outs[i]);
    free(outs);
    for (size_t i = 0; i < n && i < 4; i++)
        sim_array_release(&in[i]);
    if (rc != KF_OK) {
        fprintf(stderr, "%s %s: %s\n", path, entry, e.msg);
        return -1;
    }
    return t1 - t0;
}

static int bench_real(const char *label, const sim_target *t, const char *path, const char *entry,
                      const char *kwargs, const char *const *specs, size_t n)
{
    sim_record on, off;
    sim_record_init(&on, t->name);
    double s_off = run_real(t->name, path, entry, kwargs, specs, n, 0, &off);
    double s_on = -1;
    kf_err e = KF_ERR_INIT;
    if (s_off >= 0) {
        sim_record_release(&on);
        s_on = run_real(t->name, path, entry, kwargs, specs, n, 1, &on);
    }
    if (s_off < 0 || s_on < 0) {
        sim_record_release(&on);
        sim_record_release(&off);
        return 1;
    }
    sim_profile *p = NULL;
    double t0 = now();
    if (sim_profile_build(&off, t, &p, &e) != KF_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    char *js = sim_profile_json(p);
    FILE *devnull = fopen("/dev/null", "w");
    (void)sim_trace_write(p, devnull, &e);
    (void)sim_profile_write_instructions(p, devnull, &e);
    fclose(devnull);
    double t1 = now();
    free(js);
    printf("%-32s %7zu insns  simulated %8.3f ms  run: numerics on %.2f s, off %.2f s  "
           "profile+files %.3f s = %.1f%% of the numerics-on run (%.1f%% of off)\n",
           label, off.n_insns, p->total_ns / 1e6, s_on, s_off, t1 - t0, 100 * (t1 - t0) / s_on,
           100 * (t1 - t0) / s_off);
    sim_profile_free(p);
    int rc = bench(label, &off, t);
    sim_record_release(&on);
    sim_record_release(&off);
    return rc;
}

int main(int argc, char **argv)
{
    const char *tn = argc > 1 ? argv[1] : "trn2";
    sim_target t;
    kf_err e = KF_ERR_INIT;
    int rc = 0;

    if (sim_target_load(tn, NULL, &t, &e) != KF_OK) {
        fprintf(stderr, "sim_timing_bench: %s\n", e.msg);
        return 1;
    }
    printf("target %s (%s)\n", t.name, t.path);
    static const struct {
        const char *label;
        syn_mm p;
    } mm[] = {
        { "matmul 4096^3 bf16, tiled", { SYN_MM_TILED, 4096, 4096, 4096, 128, 512, 1, 1, 3, SIM_DT_BFLOAT16 } },
        { "matmul 4096^3 bf16, blocked", { SYN_MM_RESIDENT, 4096, 4096, 4096, 128, 512, 16, 2, 3, SIM_DT_BFLOAT16 } },
        { "matmul 16384x4096x4096, tiled", { SYN_MM_TILED, 16384, 4096, 4096, 128, 512, 1, 1, 3, SIM_DT_BFLOAT16 } },
    };
    for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++) {
        sim_record r;
        sim_record_init(&r, tn);
        syn_matmul_kernel(&r, &mm[i].p, "matmul.py");
        rc |= bench(mm[i].label, &r, &t);
        sim_record_release(&r);
    }
    static const uint64_t seqs[] = { 4096, 16384 };
    for (size_t i = 0; i < 2; i++) {
        sim_record r;
        char label[64];
        sim_record_init(&r, tn);
        syn_attention_kernel(&r, seqs[i], "attention.py");
        snprintf(label, sizeof(label), "flash-attention fwd seq %llu", (unsigned long long)seqs[i]);
        rc |= bench(label, &r, &t);
        sim_record_release(&r);
    }
    static const char *const mmspec[2] = { "lhsT=shape:4096x4096:bf16:seed=1",
                                       "rhs=shape:4096x4096:bf16:seed=2" };
    static const char *const faspec[3] = { "q=shape:128x4096:bf16:seed=1", "k=shape:128x4096:bf16:seed=2",
                                       "v=shape:4096x128:bf16:seed=3" };
    rc |= bench_real("corpus matmul_tiled 4096^3", &t, "tests/kernels/current/matmul.py",
                     "matmul_tiled", NULL, mmspec, 2);
    rc |= bench_real("corpus matmul_blocked 16x2 4096^3", &t, "tests/kernels/current/matmul.py",
                     "matmul_blocked", "{\"BLOCK_M\": 16, \"BLOCK_N\": 2}", mmspec, 2);
    rc |= bench_real("corpus flash_fwd seq 4096", &t, "tests/kernels/current/flash_fwd.py",
                     "flash_fwd", NULL, faspec, 3);
    return rc;
}
