/*
 * sim_live — on-chip capacity as the compiler decides it: by liveness over
 * the recorded program.
 *
 * The compiler does not keep a tile from the Python statement that creates
 * it until the name is dropped: it gives the tile memory from its first
 * instruction to its last, and places tiles so that two that live at the
 * same time never share bytes.  sim_live_plan does the same on a finished
 * sim_record: for every SBUF/PSUM allocation it computes the first and last
 * instruction that touches it (an allocation no instruction touches lives
 * at its creation only), then places all of them per memory and checks the
 * placement fits the target:
 *
 *   - allocation hints (SIM_PLACE_FIXED: ncc.sbuf/psum.mod_alloc) are where
 *     they ask to be; two hinted tiles live at once on the same bytes are a
 *     broken hint;
 *   - the others are placed in liveness order, best fit among the gaps the
 *     live tiles leave (PSUM tiles never straddle a 2 KiB bank, multi-bank
 *     PSUM tensors take whole banks); when that fails although the peak of
 *     live bytes fits, a second placement by decreasing size is tried
 *     (allocations of up to SIM_LIVE_REPLACE_MAX tiles per memory);
 *   - a failure says which: SIZE (the live bytes at the peak exceed the
 *     capacity, whatever the placement) or FRAGMENTATION (they fit, but the
 *     placement rules leave no gap), and names the live tiles.
 *
 * Results go into the record (sim_alloc.live_first/live_last/live_offset)
 * for anyone who wants the compiler's view (the timing model still reads
 * the Python-lifetime placement, sim_alloc.born/died/sbuf_offset).
 *
 * Ownership: works in place on the caller's record; temporary arrays are
 * freed before return.  Failure: -1 with serr filled (SIM_E_SBUF_CAPACITY,
 * SIM_E_PSUM_CAPACITY, or SIM_E_BAD_ARGUMENT for conflicting hints) at the
 * allocating call of the tile that does not fit.
 */
#ifndef SIM_LIVE_H
#define SIM_LIVE_H

#include <stdint.h>

#include "sim_error.h"
#include "sim_record.h"

/* Tiles per memory up to which a failed liveness-order placement is
 * retried by decreasing size (quadratic in the tiles). */
#define SIM_LIVE_REPLACE_MAX 8192

typedef struct sim_live_stats {
    uint64_t peak[3];         /* per sim_mem: most bytes per partition live at once */
    uint32_t peak_at[3];      /* the instruction where that peak is first reached */
    uint64_t extent[3];       /* per sim_mem: highest byte the placement uses */
} sim_live_stats;

/* Liveness and placement of the record's SBUF and PSUM allocations against
 * the given capacities (bytes per partition).  stats may be NULL.
 * 0 when everything fits; -1 with serr filled otherwise. */
int sim_live_plan(sim_record *rec, uint64_t sbuf_capacity, uint64_t psum_capacity,
                  sim_live_stats *stats, sim_error *serr);

#endif
