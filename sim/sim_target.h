/*
 * sim_target — the hardware a kernel is timed on, read from data files.
 *
 * Each target (trn1, inf2, trn2, trn3, ...) is one JSON file,
 * sim/targets/<name>.json, and adding a target is adding a file.  Every
 * value in a file is an object {"value": number, "source": "..."} whose
 * source names the key in shared/reference/neuron-hardware.md (S7, S10, ...)
 * or says "chosen: <why>"; the loader refuses a value without a source, a
 * value outside its sane range, a missing key and an unknown key, so a typo
 * in a file never silently becomes a default.
 *
 * The field table SIM_TARGET_FIELDS below is the single list of what a
 * target holds: it drives the struct, the loader and the checks.
 *
 * Where files are looked for: the `dir` argument, else KFORGE_SIM_TARGETS
 * (config), else ./sim/targets, else <exe>/../../sim/targets and
 * <exe>/../share/kforge/targets (an installed binary).
 *
 * Ownership: sim_target is a plain value (no heap); copy it freely.
 * Failure: KF_INVALID for a bad target name (the name comes from users),
 * KF_NOT_FOUND when no file has that name, KF_CONFIG for a malformed file,
 * each with a message naming the file and the key.
 */
#ifndef SIM_TARGET_H
#define SIM_TARGET_H

#include <stdbool.h>
#include <stddef.h>

#include "kf_error.h"

/*  section   key                        struct field            min     max */
#define SIM_TARGET_FIELDS(XX)                                                      \
    XX(tensor,   clock_ghz,               te_clock_ghz,           0.1,    10)      \
    XX(tensor,   rows,                    te_rows,                1,      1024)    \
    XX(tensor,   cols,                    te_cols,                1,      1024)    \
    XX(tensor,   moving_min_cycles,       te_moving_min_cycles,   1,      4096)    \
    XX(tensor,   load_stationary_cycles,  te_ls_cycles,           0,      4096)    \
    XX(tensor,   fp32_slowdown,           te_fp32_factor,         1,      16)      \
    XX(tensor,   fp8_slowdown,            te_fp8_factor,          0.125,  4)       \
    XX(tensor,   warmup_start_fraction,   te_warm_start,          0.05,   1)       \
    XX(tensor,   warmup_ramp_us,          te_warm_ramp_us,        0,      1000)    \
    XX(tensor,   warmup_idle_reset_us,    te_warm_idle_us,        0,      1000)    \
    XX(tensor,   result_latency_cycles,   te_latency_cycles,      0,      10000)   \
    XX(vector,   clock_ghz,               ve_clock_ghz,           0.1,    10)      \
    XX(vector,   elems_per_cycle_16bit,   ve_epc16,               1,      4096)    \
    XX(vector,   elems_per_cycle_32bit,   ve_epc32,               1,      4096)    \
    XX(vector,   reciprocal_slowdown,     ve_recip_factor,        1,      64)      \
    XX(scalar,   clock_ghz,               act_clock_ghz,          0.1,    10)      \
    XX(scalar,   elems_per_cycle_16bit,   act_epc16,              1,      4096)    \
    XX(scalar,   elems_per_cycle_32bit,   act_epc32,              1,      4096)    \
    XX(gpsimd,   clock_ghz,               pool_clock_ghz,         0.1,    10)      \
    XX(gpsimd,   elems_per_cycle_16bit,   pool_epc16,             1,      4096)    \
    XX(gpsimd,   elems_per_cycle_32bit,   pool_epc32,             1,      4096)    \
    XX(sync,     clock_ghz,               sp_clock_ghz,           0.1,    10)      \
    XX(sync,     control_cycles,          sp_control_cycles,      1,      100000)  \
    XX(overhead, access_bubble_cycles,    access_bubble_cycles,   0,      10000)   \
    XX(overhead, static_overhead_cycles,  static_overhead_cycles, 0,      10000)   \
    XX(overhead, min_ii_cycles,           min_ii_cycles,          1,      10000)   \
    XX(overhead, stride_penalty_bytes,    stride_penalty_bytes,   1,      4096)    \
    XX(overhead, stride_penalty_factor,   stride_penalty_factor,  1,      16)      \
    XX(sbuf,     partitions,              sbuf_partitions,        1,      1024)    \
    XX(sbuf,     bytes_per_partition,     sbuf_bytes_per_part,    1024,   16777216) \
    XX(psum,     partitions,              psum_partitions,        1,      1024)    \
    XX(psum,     bytes_per_partition,     psum_bytes_per_part,    1024,   16777216) \
    XX(psum,     banks,                   psum_banks,             1,      64)      \
    XX(dma,      engines,                 dma_engines,            1,      256)     \
    XX(dma,      queues,                  dma_queues,             1,      256)     \
    XX(dma,      engine_bytes_per_ns,     dma_engine_bpns,        0.1,    10000)   \
    XX(dma,      aggregate_bytes_per_ns,  dma_aggregate_bpns,     0.1,    100000)  \
    XX(dma,      fixed_cost_ns,           dma_fixed_ns,           0,      100000)  \
    XX(dma,      efficient_chunk_bytes,   dma_efficient_chunk,    1,      1048576) \
    XX(dma,      saturating_chunk_bytes,  dma_saturating_chunk,   1,      1048576) \
    XX(dma,      transpose_hbm_efficiency, dma_transpose_hbm_eff, 0.01,   1)       \
    XX(dma,      transpose_sbuf_efficiency, dma_transpose_sbuf_eff, 0.01, 1)       \
    XX(hbm,      bytes_per_ns,            hbm_bpns,               0.1,    100000)  \
    XX(core,     clock_ghz,               nc_clock_ghz,           0.1,    10)      \
    XX(core,     vector_gpsimd_share_sbuf, conflict_ve_pool_sbuf, 0,      1)      \
    XX(core,     vector_scalar_share_psum, conflict_ve_act_psum,  0,      1)      \
    XX(alloc,    rotating_buffers,        alloc_rotate,           1,      8)

enum { SIM_TARGET_MAX_EFF = 16 };

typedef struct sim_target {
    char name[16];          /* file name without .json: "trn2" */
    char generation[32];    /* "NeuronCore-v3" */
    char path[512];         /* the file it was read from */
#define XX(sec, key, field, lo, hi) double field;
    SIM_TARGET_FIELDS(XX)
#undef XX
    /* dma.chunk_efficiency: [[chunk bytes, efficiency], ...], ascending;
     * linear in between, flat beyond the ends. */
    unsigned dma_eff_n;
    double   dma_eff_bytes[SIM_TARGET_MAX_EFF];
    double   dma_eff_val[SIM_TARGET_MAX_EFF];
} sim_target;

/* DMA efficiency (0..1] of a transfer whose contiguous chunks per
 * descriptor are `chunk_bytes` long. */
double sim_target_dma_efficiency(const sim_target *t, double chunk_bytes);

/* Load target `name` ([a-z0-9_-], 1..15 characters) from `dir` (NULL: the
 * search order above). */
kf_code sim_target_load(const char *name, const char *dir, sim_target *out, kf_err *err);

/* Load one file (any path); the target's name is the file's base name. */
kf_code sim_target_load_file(const char *path, sim_target *out, kf_err *err);

/* The folder sim_target_load(name, NULL, ...) reads, or NULL if none of the
 * candidates exists.  The string is static (valid until the next call). */
const char *sim_target_default_dir(void);
/* From now on, sim_target_default_dir() answers `dir` (a sandboxed
 * evaluation, which has neither the configuration nor /proc, gets the
 * folder its caller resolved); NULL or "" undoes it. */
void sim_target_pin_dir(const char *dir);

/* Derived figures the timing model and the profiler share. */
double sim_target_te_peak_flops(const sim_target *t);   /* rows*cols*2*clock, FLOP/s (bf16) */
double sim_target_dma_bpns(const sim_target *t);        /* min(aggregate DMA, HBM) bytes/ns */

#endif
