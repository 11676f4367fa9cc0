/*
 * sim_timing_bench — how fast the timing model and the profiler run.
 *
 * Timing-only simulation speed (simulated instructions per second) on
 * synthetic records with the structure of real kernels: the 4096^3 bf16
 * matmul (tiled and fully blocked, neuron-hardware.md §5 steps) and
 * flash-attention forward at sequence 4096 and 16384; then the profile's
 * cost (sim_profile_build + JSON + trace) relative to the timing pass.
 * Each figure is the best of several runs.  Usage: sim_timing_bench [TARGET].
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/sim_timing_synth.h"
#include "sim/sim_profile.h"
#include "sim/sim_trace.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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
           label, r->n_insns, sim_ms, best_t * 1e3, r->n_insns / best_t / 1e6, best_b * 1e3,
           best_b / best_t, best_p * 1e3);
    return 0;
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
    return rc;
}
