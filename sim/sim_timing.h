/*
 * sim_timing — the timing model: an instruction record becomes time.
 *
 * Input: a sim_record (sim_record.h) and a sim_target (sim_target.h).
 * Output: for every instruction its start and end, the track it ran on
 * (an engine, or a DMA queue), how long it stalled before it could start
 * and on what, plus per-track totals.  Nothing else is read: the record
 * made with numerics off times exactly like the one made with numerics on.
 *
 * The model (docs/profile.md has the long form):
 *   - Tensor, Vector, Scalar, GpSimd and Sync each run their instructions
 *     in program order; DMA transfers run on queues (the record's queue if
 *     SIM_F_QUEUE, else round-robin), in order within a queue.
 *   - An instruction starts when its track is free, the data it reads is
 *     written (RAW), and what it overwrites is no longer read or written
 *     (WAR/WAW) — regions overlap when they share an allocation, partitions
 *     and bytes — and, for on-chip tiles, when the last user of the memory
 *     the allocator gave it (sim_alloc.sbuf_offset) has finished (buffer
 *     reuse).  HBM writes do not wait for other HBM writes: DMA writes to
 *     disjoint rows of one tensor share a bounding byte range in the record
 *     and are not ordered by the hardware either.
 *   - Costs follow neuron-hardware.md §1c through the target's values:
 *     matmul max(N, 64) cycles per moving tile (x4 fp32), LoadStationary
 *     hidden under the previous multiply unless its stationary changes after
 *     an idle gap, TensorE warm-up throttle where the target has one;
 *     Vector/Scalar/GpSimd max(MIN_II, bubble per access + N * inputs /
 *     elements-per-lane-cycle), halved bandwidth for strides over 16 B,
 *     reciprocal 8x on VectorE, a static overhead before a dependent
 *     instruction sees the result; DMA fixed cost, then the bytes spread
 *     over the DMA engines by descriptor, each engine at its bandwidth times
 *     a per-chunk size efficiency, engines shared by all queues.
 *   - Deterministic: integer picoseconds, fixed tie-breaking.
 *
 * Ownership: sim_timing_run fills a caller-owned sim_timing whose arrays it
 * allocates; sim_timing_release frees them (NULL-safe, idempotent).
 * Failure: KF_INVALID when the record references an allocation or an
 * engine that does not exist (the message names the instruction).
 */
#ifndef SIM_TIMING_H
#define SIM_TIMING_H

#include <stdint.h>

#include "kf_error.h"
#include "sim_record.h"
#include "sim_target.h"

/* What an instruction waited for before it could start. */
#define SIM_WAIT_MAP(XX)                                                       \
    XX(NONE,  "none",  "started as soon as its engine was free")               \
    XX(RAW,   "raw",   "waited for the data it reads to be written")           \
    XX(WAR,   "war",   "waited for earlier reads of the region it overwrites") \
    XX(WAW,   "waw",   "waited for an earlier write of the region it writes")  \
    XX(REUSE, "reuse", "waited for the previous user of its SBUF/PSUM memory") \
    XX(PORT,  "port",  "waited for an NC-v2 shared port (SBUF: Vector/GpSimd; PSUM: Vector/Scalar)")

typedef enum sim_wait {
#define XX(id, name, doc) SIM_WAIT_##id,
    SIM_WAIT_MAP(XX)
#undef XX
    SIM_WAIT__COUNT
} sim_wait;

const char *sim_wait_name(sim_wait w);

/* Tracks: the five compute engines (ids = sim_engine), then DMA queues. */
enum { SIM_TRACK_DMA0 = SIM_ENG_DMA };

typedef struct sim_timed {
    uint64_t start_ps, end_ps;  /* when it ran */
    uint64_t free_ps;           /* when its track was free (start - free = stall) */
    uint64_t ready_ps;          /* when its operands and memory were ready (its waits) */
    uint64_t ideal_ps;          /* DMA: fixed cost + bytes at full bandwidth; else = end - start */
    uint32_t wait_on;           /* instruction it waited for, UINT32_MAX if none */
    uint16_t track;             /* engine id, or SIM_TRACK_DMA0 + queue */
    uint8_t  wait;              /* sim_wait */
    uint8_t  pad_;
} sim_timed;

typedef struct sim_timing {
    sim_timed *t;               /* one per record instruction */
    size_t     n;
    uint32_t   n_tracks;        /* SIM_TRACK_DMA0 + DMA queues */
    uint64_t   total_ps;        /* makespan: last end */
    uint64_t  *track_busy_ps;   /* per track: sum of durations */
    uint64_t  *track_count;     /* per track: instructions */
    uint64_t   dma_engine_busy_max_ps; /* busiest DMA engine's data-moving time */
    uint64_t   sbuf_port_busy_ps; /* NC-v2: VectorE/GpSimd instructions on the shared SBUF port */
    uint64_t   psum_port_busy_ps; /* NC-v2: VectorE/ScalarE instructions on the shared PSUM port */
    uint64_t   dma_active_ps;   /* time at least one DMA was in flight */
    uint64_t   wait_ps[SIM_WAIT__COUNT]; /* stall time by cause, all tracks */
} sim_timing;

kf_code sim_timing_run(const sim_record *rec, const sim_target *tgt, sim_timing *out,
                       kf_err *err);
void sim_timing_release(sim_timing *t);

/* What one instruction would cost alone on `engine` (no waits, warm
 * TensorE, LoadStationary hidden), optionally as if its matmul operands were
 * bf16 (as_bf16): the profiler's what-if estimates (reciprocal on ScalarE
 * instead of VectorE, a GpSimd op on VectorE, an fp32 matmul in bf16). */
uint64_t sim_timing_isolated_ps(const sim_target *tgt, const sim_insn *in, sim_engine engine,
                                int as_bf16);

/* The streaming part of a Vector/Scalar/GpSimd instruction's cost: its
 * duration without the per-access bubbles and the MIN_II floor (0 for other
 * engines).  Duration minus this is fixed per-instruction overhead. */
uint64_t sim_timing_work_ps(const sim_target *tgt, const sim_insn *in);

/* Bytes per descriptor (contiguous chunk) of a DMA, the smaller of its two
 * sides: what the size efficiency is read at. */
double sim_timing_dma_chunk(const sim_insn *in);

/* Time during which at least one instruction was running: of those on
 * `engine`, or of all when engine < 0 (rec may then be NULL).  tm->t[i] is
 * rec->insns[i]'s timing, as sim_timing_run() fills it. */
uint64_t sim_timing_union_ps(const sim_timing *tm, const sim_record *rec, int engine);

/* "tensor", ..., "sync", "dma_q0", "dma_q1", ...; buf is used for queues. */
const char *sim_timing_track_name(uint32_t track, char *buf, size_t len);

static inline double sim_ps_to_ns(uint64_t ps) { return (double)ps / 1000.0; }

#endif
