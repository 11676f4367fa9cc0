/*
 * sim_lower — the record as the compiler would emit it.
 *
 * The functional simulator records what the kernel's Python asked for, one
 * instruction per NKI call.  For a few patterns the Neuron compiler emits
 * less than that, and timing the literal record would charge for work the
 * device never does; the same algorithm written in the legacy and the
 * current API would then time apart.  sim_lower_record() rewrites a record
 * into the program the compiler keeps, with four conservative rules
 * (docs/profile.md, "What the compiler removes"):
 *
 *   1. write into a copy: an instruction writing a fresh tile that nothing
 *      else touches, immediately copied whole (same partitions and element
 *      count, one contiguous run per partition on both sides: a move, not
 *      a transpose or a strided gather) into another on-chip tile — the legacy `t[...] = nl.load(...)`
 *      and `t[...] = <expression>` — writes the copy's destination itself;
 *      the copy is dropped.  The writer is a DMA load (into SBUF) or a
 *      Vector/Scalar/GpSimd instruction; a TensorE result is not, as
 *      TensorE writes PSUM only.
 *   2. dead memset: a MEMSET whose region is entirely overwritten by the
 *      next instruction touching its tile, which does not read the tile and
 *      is neither masked nor an accumulating matmul — e.g. a PSUM
 *      `nl.zeros` that only feeds the first write of an accumulation — is
 *      dropped.
 *   3. loop-invariant repeat: an unmasked MEMSET with a known value, or a
 *      DMA load from HBM, that repeats an earlier instruction of the same
 *      source line (same opcode, engine, flags, value, HBM source region,
 *      destination shape), where each of the two destination tiles is
 *      written by that one instruction only and, for a load, nothing wrote
 *      the HBM source in between, is the instruction the compiler hoists
 *      out of the loop: it is dropped and its tile's readers read the
 *      first instance's tile.
 *
 *   4. column operand: a Vector/GpSimd tensor_tensor whose one operand is
 *      a (P, 1) column broadcast along the free axis is the tensor_scalar
 *      the compiler emits (the column is its per-partition scalar operand):
 *      one input streamed, not two.
 *
 * Everything else is kept as it is, in order.  Allocation lifetimes (born,
 * died) are renumbered to the kept instructions.
 *
 * A fifth rule is about order, and needs times: sim_lower_schedule().
 *
 *   5. issue order on an engine: the compiler's scheduler, not the
 *      kernel's statement order, decides the order in which an engine runs
 *      its instructions; its default heuristic picks, among the ready
 *      instructions, the one that can start first (NKI
 *      `nki.compiler.SchedulingHeuristic.ASAP`; the scheduling APIs exist to
 *      constrain that reordering).  sim_lower_schedule() applies it one
 *      step at a time: two adjacent instructions of the record on the same
 *      compute engine (not DMA queues), with no allocation made or freed
 *      between them and no overlapping access where either writes, swap
 *      when the first had to wait for its operands and the second was ready
 *      earlier, by the times of a first timing pass (`tm`, of `in`).  Each
 *      instruction moves at most one place, so this is a bounded
 *      approximation of the list scheduler; the caller times the result.
 *
 * Returns 1 when a rule applied: `out` is then a new record the caller
 * releases with sim_record_release().  Returns 0 when nothing applies (no
 * copy is made: time `in` itself); `out` is then zeroed, and releasing it is
 * harmless.  `in` is never changed; `stats` (may be NULL) gets the counts.
 * Cannot fail (allocation aborts on OOM).  Cost: two passes over `in` and,
 * only when something changed, one copy of it.
 */
#ifndef SIM_LOWER_H
#define SIM_LOWER_H

#include <stddef.h>

#include "sim_record.h"

typedef struct sim_lower_stats {
    size_t fused_copies;        /* rule 1: copies folded into their writer */
    size_t dead_memsets;        /* rule 2 */
    size_t hoisted;             /* rule 3 */
    size_t column_scalars;      /* rule 4: tensor_tensor with a (P, 1) operand */
    size_t reordered;           /* rule 5: instructions issued before their predecessor */
} sim_lower_stats;

int sim_lower_record(const sim_record *in, sim_record *out, sim_lower_stats *stats);

struct sim_timing;
/* Rule 5 on `in`, timed (in its order) by `tm`.  Returns the number of
 * swaps; when it is not 0, `out` is a new record (release it with
 * sim_record_release()); otherwise `out` is zeroed.  `in` is not changed.
 * Cannot fail (allocation aborts on OOM).  Cost: one pass and one copy. */
size_t sim_lower_schedule(const sim_record *in, const struct sim_timing *tm, sim_record *out);

#endif
