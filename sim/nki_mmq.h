/*
 * nki_mmq — a run of matmuls accumulating into one PSUM tile, computed as
 * one GEMM.
 *
 * A tiled matmul issues nc_matmul K/128 times into the same PSUM tile, each
 * a (128 x M) x (128 x N) product added to the tile.  Computed one by one,
 * every product is a small sgemm that reads and writes the whole FP32 tile;
 * queued, the run is one sgemm over the whole contraction, which is where
 * BLAS is fast.  The values are the engine's arithmetic (FP32 products of the
 * operands, summed in FP32) up to the order of the sums, as with one sgemm
 * per instruction.
 *
 * nki_mmq_add copies a call's operands (converted to FP32) when the call is
 * made, so later writes to the SBUF operand tiles change nothing, and marks
 * the PSUM store `pending`.  The queued product is added to the store when
 * anything reads or writes the store's data (sim_core calls
 * simc_settle_hook, which this module installs), when a matmul into another
 * region or without accumulation starts, or when the queue is full; a store
 * freed with work queued drops it (nobody can read it any more).
 *
 * Folding.  Tiled kernels that block the contraction add each run's PSUM
 * tile to an FP32 SBUF accumulator right away (tensor_tensor(acc, acc,
 * psum, add)).  nki_mmq_fold turns that add into acc += A^T B, computed
 * by a task on the numerics pool (simn_task_submit) while the tracer goes
 * on with the kernel: the accumulator's store is marked pending and settling
 * it waits for its tasks.  The PSUM region stays pending too and reads as
 * A^T B: it is computed from the kept operands only if something reads it
 * before it is overwritten by the next run or freed.  Values: the task's
 * sgemm adds the product to the accumulator (beta 1), which is the add of
 * the PSUM tile up to the order of the sums (the same bits where OpenBLAS
 * does not split the contraction, K <= 256 on the kernels in use), and the
 * same for any thread count.  At most NKI_MMQ_JOBS folds are in flight;
 * the tracer runs queued tasks itself when it needs a slot.
 *
 * Ownership: one queue per process, used from the tracer thread only (the
 * numerics pool runs inside the flush, converts large SBUF operands a block
 * of rows per thread inside nki_mmq_add, and runs folded tasks, which read
 * only the operands they own and write only their accumulator).  Buffers
 * grow to the longest run (bounded by NKI_MMQ_MAX_K rows; a folded run by
 * NKI_MMQ_FOLD_FLOATS) and are freed by nki_mmq_reset, which sim_run calls
 * when a run ends.  Failure: an allocation that fails aborts (kf_malloc),
 * like the rest of the numerics.
 */
#ifndef NKI_MMQ_H
#define NKI_MMQ_H

#include <stdbool.h>
#include <stdint.h>

#include "sim_core.h"

/* Contraction rows queued before a flush: 8192 x (128 + 512) floats, 20 MiB. */
#define NKI_MMQ_MAX_K 8192

/* Queue C[M x N] (+)= A^T B into the FP32 PSUM elements of `st` starting at
 * `off` with row stride `ldc`: A is the (K, M) stationary view, B the (K, N)
 * moving view (both read now, as FP32, row-major).  `acc` says whether the
 * product adds to what the elements hold (the first-write rule, decided by
 * the caller for the whole region); a call without it starts a new run. */
void nki_mmq_add(simc_store *st, int64_t off, int64_t ldc, int64_t M, int64_t N, int64_t K,
                 const simc_view *a, const simc_view *b, bool acc);

/* Folds in flight at most, and the largest run folded (operand floats,
 * 4 MiB: larger runs are computed when read, as one GEMM). */
#define NKI_MMQ_JOBS 6
#define NKI_MMQ_FOLD_FLOATS (1 << 20)

/* tensor_tensor(x, x, p, add) where p is exactly the region of the run
 * being queued (which overwrites it) and x is a dense FP32 (m, n) view of
 * an SBUF or HBM store with private data: queues x += A^T B as a task and
 * returns true; the caller closes p's accumulation (as reading it would)
 * and records the instruction.  False (nothing done) in every other case. */
bool nki_mmq_fold(const simc_view *x, const simc_view *p);

/* Folds made since the process started (a test's and a profile's view of
 * whether the asynchronous path was taken). */
uint64_t nki_mmq_folds(void);

/* Computes the queued run now (nothing if the queue is empty). */
void nki_mmq_flush(void);

/* Waits for the folded tasks, drops anything else queued without computing
 * it and frees the buffers. */
void nki_mmq_reset(void);

#endif
