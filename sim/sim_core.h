/*
 * sim_core — the simulator's core: storage, strided views, element
 * conversion and the per-target memory model.  No Python here: the `nki`
 * face (nki_*.c) builds on these.
 *
 * A simc_store is one allocation (an HBM tensor or an on-chip tile).  On-chip
 * storage is laid out partition-major: `partitions` rows of `part_elems`
 * elements, so a view's flat element index f lives in partition
 * f / part_elems.  HBM storage is a flat row-major array (partitions = 1).
 * Stores are reference counted by the views that use them; the last
 * simc_store_unref() releases the data and tells the memory model the tile
 * died.
 *
 * A simc_view addresses elements of a store: elem(i) = data[offset +
 * sum_d i_d * strides[d]] (strides in elements; 0 = broadcast).
 *
 * Conversions round to nearest even when storing bf16/fp16/fp8 and
 * saturate integers; reads convert every dtype to fp32.
 *
 * Ownership and failure: allocation aborts on OOM (kf_alloc); the functions
 * here do not fail — callers validate shapes and bounds first (a shape's
 * element count with simc_shape_elems, which reports overflow).
 */
#ifndef SIM_CORE_H
#define SIM_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim_record.h"

enum { SIMC_MAX_DIMS = 8, SIMC_PMAX = 128, SIMC_PSUM_BANK_BYTES = 2048, SIMC_PSUM_BANKS = 8 };

/* What the functional simulator needs to know about a target. */
typedef struct simc_target {
    const char *name;         /* "trn2" */
    int         nc_gen;       /* NeuronCore generation: 2 (v2), 3, 4 */
    uint32_t    sbuf_bytes;   /* SBUF bytes per partition */
    uint32_t    psum_bytes;   /* PSUM bytes per partition */
} simc_target;

/* NULL when `name` is not trn1|inf2|trn2|trn3. */
const simc_target *simc_target_get(const char *name);

typedef struct simc_store {
    int        refcnt;
    sim_mem    mem;
    sim_dtype  dtype;
    uint32_t   alloc_id;      /* sim_record allocation id */
    int64_t    nelem;         /* total elements */
    int64_t    part_elems;    /* on-chip: elements per partition; HBM: nelem */
    int        partitions;    /* on-chip: partitions; HBM: 1 */
    uint64_t   acct_bytes;    /* bytes per partition charged to SBUF/PSUM */
    uint64_t   acct_off;      /* byte offset chosen by the on-chip allocator */
    uint32_t   blk_bytes;     /* PSUM tensor with block dims: bytes of one block per
                                 partition (each block lies inside one bank); else 0 */
    void      *data;          /* NULL for on-chip tiles when numerics are off */
    bool       borrowed;      /* data belongs to the caller: copy before writing */
    uint8_t   *open;          /* PSUM: per-element "matmul accumulation open" bit */
    int        shared_slot;   /* shared_hbm: index in the run's shared list, -1 otherwise */
    /* Kept by the nki face for legacy `dst[...] = op(..., mask=m)`: `fresh`
     * marks a result tile no instruction has written yet; `sel` (nelem
     * bytes, by flat index) the elements its masked producer wrote, NULL
     * when it wrote all or anything wrote the store since.  Freed here. */
    bool       fresh;
    uint8_t   *sel;
    /* Arithmetic queued on the store's data (nki_mmq's matmul runs): every
     * accessor below settles it first (simc_settle), so nothing outside the
     * queue ever sees the data without it. */
    bool       pending;
    /* The data is allocated but the uninitialized pattern not yet written:
     * simc_settle writes it before anything reads or partly writes the
     * data, and a write of every element clears it instead
     * (simc_settle_overwrite), so a tile that is loaded or computed whole is
     * never filled.  Code that writes data without an accessor settles
     * first (or clears it when it writes every element itself). */
    bool       unfilled;
} simc_store;

/* Settles a store with queued work: installed by the module that queues
 * (nki_mmq); `drop` when the store is being freed and the work can be
 * discarded.  simc_settle is the accessors' check, a no-op when nothing is
 * queued. */
extern void (*simc_settle_hook)(simc_store *s, bool drop);
/* Writes the uninitialized pattern into an unfilled store's data now. */
void simc_store_fill(simc_store *s);
static inline void simc_settle(simc_store *s)
{
    if (s->unfilled)
        simc_store_fill(s);
    if (s->pending && simc_settle_hook)
        simc_settle_hook(s, false);
}
/* simc_settle before a write of every element of s: the pattern is not
 * written (nothing can read it). */
static inline void simc_settle_overwrite(simc_store *s)
{
    s->unfilled = false;
    if (s->pending && simc_settle_hook)
        simc_settle_hook(s, false);
}

typedef struct simc_view {
    simc_store *st;           /* borrowed by the view's owner, which holds a ref */
    sim_dtype   dtype;
    int         ndim;
    int64_t     shape[SIMC_MAX_DIMS];
    int64_t     strides[SIMC_MAX_DIMS];
    int64_t     offset;
} simc_view;

/* Storage: a new store with refcnt 1; with_data allocates its data, which
 * reads as the uninitialized pattern (NaN for floats, 4 for ints, written
 * when first needed: `unfilled`). */
simc_store *simc_store_new(sim_mem mem, sim_dtype dt, int partitions, int64_t part_elems,
                           bool with_data);
void simc_store_ref(simc_store *s);
/* Drops one reference; returns true when the store was freed (the caller
 * releases its memory accounting before calling with refcnt 1). */
bool simc_store_unref(simc_store *s);
/* Make a borrowed store's data private (copy) before a write. */
void simc_store_writable(simc_store *s);
void simc_fill_uninit(void *data, sim_dtype dt, int64_t n);
/* Free the buffers freed stores left for reuse (kept per byte size, at
 * most 64 MiB; one run's tracer thread uses them: not thread-safe). */
void simc_pool_drain(void);
/* kf_malloc(n) for a large array (a tensor, an input): from 4 MiB, its
 * memory is marked for transparent huge pages (one fault per 2 MiB
 * instead of per 4 KiB where the system allows them in madvise mode). */
void *simc_big_alloc(size_t n);

/* Elements of a shape, checked before anything allocates or trusts it:
 * true with *n the product when 0 <= ndim <= SIMC_MAX_DIMS, no dimension is
 * negative and the product is at most `limit` (INT64_MAX: only that it
 * fits); false otherwise (*n untouched).  A zero dimension makes the
 * product 0 but counts as 1 in the bound, so an empty shape cannot carry
 * dimensions whose strides would overflow. */
bool simc_shape_elems(int ndim, const int64_t *shape, int64_t limit, int64_t *n);

/* Views. */
int64_t simc_view_elems(const simc_view *v);
bool simc_view_contiguous(const simc_view *v);
/* Lowest and highest flat element index touched (over all elements). */
void simc_view_extent(const simc_view *v, int64_t *lo, int64_t *hi);
/* Flat storage index of the element at idx (no overflow; -1 when negative
 * or beyond int64). */
int64_t simc_elem_index(const simc_view *v, const int64_t *idx);
/* True when every element of v lies inside its storage. */
bool simc_view_in_store(const simc_view *v);
/* True when v addresses every element of its store exactly once. */
bool simc_view_covers_store(const simc_view *v);
/* The FP32 elements of v, in place, when v is FP32 with data and addresses
 * exactly data[offset .. offset + elems) in row-major order: the store is
 * settled first, and made writable (copied if borrowed) when `for_write`;
 * NULL (nothing done) otherwise.  Elementwise code computes on these
 * without a gather/scatter copy; it must close PSUM accumulation itself
 * (simc_close_dense) as a gather or scatter would. */
float *simc_view_dense_f32(const simc_view *v, bool for_write);
/* Close PSUM matmul accumulation over a view simc_view_dense_f32 accepted
 * (no-op for stores without accumulation state). */
void simc_close_dense(const simc_view *v);
/* Fill a record region describing the bytes v touches. */
void simc_view_region(const simc_view *v, sim_region *r);

/* Element conversion: safe from any thread (the numerics pool's workers
 * convert operands too; the fp16/fp8 tables are filled once, under
 * pthread_once, by whichever thread converts first). */
float simc_to_f32(sim_dtype dt, const void *p);
void simc_from_f32(sim_dtype dt, float x, void *p);
bool simc_dtype_is_float(sim_dtype dt);
bool simc_dtype_is_signed(sim_dtype dt);

/* Copy a view's elements, converted to fp32, into out[] in row-major order
 * of the view's shape.  Reading PSUM closes its matmul accumulation (also
 * for a store without data, numerics off).  Elements outside the storage
 * read as NaN. */
void simc_gather(const simc_view *v, float *out);
/* Write in[] (row-major over v's shape) into v, rounding to v's dtype;
 * mask (same layout, may be NULL) selects the elements written.  Writing
 * PSUM closes its matmul accumulation.  No-op for a store without data;
 * elements outside the storage are skipped. */
void simc_scatter(const simc_view *v, const float *in, const uint8_t *mask);
/* Copy src into dst byte for byte when both have the same dtype and shape,
 * live in different SBUF/HBM stores with data and lie inside them; false
 * (nothing done) otherwise, for the caller's FP32 path. */
bool simc_copy_raw(const simc_view *dst, const simc_view *src);

/* Integer data moves and computes exactly, never through fp32 (an int32
 * above 2^24 would lose its low bits): an integer element as int64 (bool
 * 0/1; float dtypes truncate toward zero, NaN reads 0), and an int64 stored
 * into an integer dtype keeps its low bits (two's complement wrap, as the
 * engines' integer ALUs do); into a float dtype it is rounded. */
int64_t simc_to_i64(sim_dtype dt, const void *p);
void simc_from_i64(sim_dtype dt, int64_t x, void *p);
/* simc_gather / simc_scatter for integer data: the same rules (PSUM reads
 * and writes close accumulation, outside elements read 0 and are skipped,
 * no-op without data), values as int64. */
void simc_gather_i64(const simc_view *v, int64_t *out);
void simc_scatter_i64(const simc_view *v, const int64_t *in, const uint8_t *mask);
/* PSUM matmul write: each element overwrites when its accumulation is not
 * open (or accumulate < 0), adds when open (or accumulate > 0), and opens.
 * mask (row-major over v's shape, may be NULL) selects the elements written;
 * the others keep their value and accumulation state. */
void simc_scatter_accum(const simc_view *v, const float *in, int accumulate, const uint8_t *mask,
                        bool *any_accum);

#endif
