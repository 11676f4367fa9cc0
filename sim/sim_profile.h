/*
 * sim_profile — why a kernel is slow: summary, bounds, findings, lines.
 *
 * sim_profile_build() lowers a record to what the compiler emits
 * (sim_lower.h), times that (sim_timing.h) on a target and derives
 *   - a summary whose fields carry neuron-explorer's names where the meaning
 *     is the same (total_time in s, mfu/hfu/mbu_estimated_percent,
 *     <engine>_engine_active_time(_percent), dma_transfer_*, hbm_*_bytes,
 *     model_flops, hardware_flops, ...; docs/profile.md lists every field);
 *   - bounds: compute (matmul FLOPs at TensorE peak), memory (bytes moved at
 *     DMA/HBM bandwidth), necessary IO (inputs and outputs once), pipeline
 *     (the busiest engine, or NC-v2's busiest shared access port), and the
 *     achieved fraction of the tightest;
 *   - ranked findings, each with evidence, an estimated cost in time and the
 *     source lines that cause it;
 *   - time and stall per source line, and the instruction table.
 *
 * Ownership: the profile borrows `rec` (it must outlive the profile); when
 * the lowering changes something the profile times and keeps its own
 * lowered copy instead.  It copies the target.  sim_profile_free() releases it (NULL-safe).  JSON
 * strings returned by the *_json functions are heap strings the caller
 * frees.  Failure: whatever sim_timing_run() reports (KF_INVALID for a
 * malformed record); writing functions return KF_IO when the file fails.
 */
#ifndef SIM_PROFILE_H
#define SIM_PROFILE_H

#include <stdio.h>

#include "kf_error.h"
#include "sim_lower.h"
#include "sim_record.h"
#include "sim_target.h"
#include "sim_timing.h"

/* Finding kinds: id, title.  docs/profile.md explains each. */
#define SIM_FINDING_MAP(XX)                                                         \
    XX(DMA_SMALL,       "dma_small_transfers",  "DMA transfers below the efficient size") \
    XX(HBM_RELOAD,      "redundant_hbm_loads",  "Input loaded from HBM more than once")   \
    XX(DMA_WAIT,        "engine_waits_on_dma",  "Engine idle, waiting for DMA")           \
    XX(PE_UNDERFILL,    "tensor_underfilled",   "TensorE tiles under-filled")             \
    XX(FP32_MATMUL,     "fp32_matmul",          "FP32 matmuls run at a quarter of BF16")  \
    XX(BUFFER_PRESSURE, "buffer_pressure",      "Reused buffers serialise the pipeline")  \
    XX(SLOW_ENGINE,     "slow_engine",          "Work on an engine another does faster")   \
    XX(INSN_OVERHEAD,   "instruction_overhead", "Fixed per-instruction cost dominates small instructions") \
    XX(ENGINE_IMBALANCE, "engine_imbalance",    "One engine busy while another that runs the same ops idles")

typedef enum sim_finding_kind {
#define XX(id, name, title) SIM_FIND_##id,
    SIM_FINDING_MAP(XX)
#undef XX
    SIM_FIND__COUNT
} sim_finding_kind;

enum { SIM_FINDING_MAX_LOCS = 8 };

typedef struct sim_finding {
    sim_finding_kind kind;
    double   cost_ns;                   /* estimated time the kernel would save */
    char     message[512];              /* one sentence with the evidence and lines */
    char     evidence[512];             /* JSON object text: the numbers behind it */
    uint32_t locs[SIM_FINDING_MAX_LOCS];/* record loc ids, most costly first */
    double   loc_ns[SIM_FINDING_MAX_LOCS];
    unsigned n_locs;
} sim_finding;

typedef struct sim_line {
    uint32_t loc;                       /* record loc id */
    uint64_t count;                     /* instructions */
    double   time_ns;                   /* sum of durations */
    double   stall_ns;                  /* sum of waits before starting */
    uint64_t dma_bytes;
    uint64_t flops;
    double   engine_ns[SIM_ENG__COUNT]; /* busy time by engine (DMA: all queues) */
    int      engine;                    /* sim_engine with the most busy time */
} sim_line;

typedef struct sim_bounds {
    double compute_ns, memory_ns, io_ns, pipeline_ns;
    const char *pipeline_engine;        /* "tensor", "dma", ..., or NC-v2's shared
                                           "sbuf_port" / "psum_port" (static) */
    const char *tightest;               /* "compute", "memory", "io", "pipeline" (static) */
    double tightest_ns;
    double achieved_fraction;           /* tightest_ns / total */
} sim_bounds;

typedef struct sim_profile {
    const sim_record *rec;              /* what is timed and reported: &lowered, or the
                                           borrowed input when nothing was lowered */
    sim_record  lowered;                /* owned: the input record as the compiler emits it
                                           (sim_lower.h), empty when nothing changed */
    sim_record  scheduled;              /* owned: `lowered` (or the input) in the issue
                                           order of rule 5, when that moved anything */
    sim_lower_stats lower;              /* what the lowering removed */
    sim_target  tgt;
    sim_timing  tm;
    /* summary figures */
    double   total_ns, active_ns, dma_active_ns;
    uint64_t model_flops, matmul_flops, hardware_flops, transpose_flops;
    double   adjusted_hardware_flops;
    uint64_t dma_count, dma_bytes, dma_queues_used;
    uint64_t hbm_read, hbm_write, sbuf_read, sbuf_write, psum_read, psum_write;
    uint64_t psum_to_sbuf_count, psum_to_sbuf_bytes, io_bytes;
    uint64_t matmul_count, activate_count;
    double   activate_ns;
    sim_bounds bounds;
    sim_finding *findings;              /* ranked, most costly first */
    size_t   n_findings;
    sim_line *lines;                    /* by time, most first */
    size_t   n_lines;
} sim_profile;

kf_code sim_profile_build(const sim_record *rec, const sim_target *tgt, sim_profile **out,
                          kf_err *err);
void sim_profile_free(sim_profile *p);

const char *sim_finding_name(sim_finding_kind k);   /* "dma_small_transfers" */
const char *sim_finding_title(sim_finding_kind k);

/* "kernel.py:41" for a record loc id (buf holds the result). */
const char *sim_profile_loc(const sim_profile *p, uint32_t loc, char *buf, size_t len);

/* The summary object alone (neuron-explorer names), as JSON text. */
char *sim_profile_summary_json(const sim_profile *p);
/* Everything but the instruction table: {"schema","target","summary",
 * "bounds","findings","lines"}. */
char *sim_profile_json(const sim_profile *p);
/* The instruction table as JSON {"instructions":[{engine, opcode, start_ns,
 * duration_ns, wait_ns, wait, bytes, flops, nki_source_location}, ...]}. */
kf_code sim_profile_write_instructions(const sim_profile *p, FILE *f, kf_err *err);

/* One screen for people: summary, bounds, top findings with their lines,
 * top lines. */
void sim_profile_print(FILE *f, const sim_profile *p);

#endif
