/*
 * sim_lower — see sim_lower.h for the three rules.
 *
 * Two passes over the record: a backward one that finds, for every MEMSET,
 * the next instruction touching its tile, and counts each allocation's
 * writes and reads; a forward one that decides what is dropped, rewrites
 * the fused loads and the readers of hoisted tiles, and copies the rest.
 */
#include "sim_lower.h"

#include "sim_timing.h"

#include "kf_alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct acount {
    uint32_t writes, reads;
} acount;

static int same_place(const sim_region *a, const sim_region *b)
{
    return a->alloc == b->alloc && a->byte_lo == b->byte_lo && a->byte_hi == b->byte_hi &&
           a->part_lo == b->part_lo && a->part_count == b->part_count;
}

/* Same bytes of same-sized allocations, whatever the allocation. */
static int same_shape(const sim_record *r, const sim_region *a, const sim_region *b)
{
    const sim_alloc *x = &r->allocs[a->alloc], *y = &r->allocs[b->alloc];

    return a->mem == b->mem && a->dtype == b->dtype && a->byte_lo == b->byte_lo &&
           a->byte_hi == b->byte_hi && a->part_lo == b->part_lo &&
           a->part_count == b->part_count && a->bytes == b->bytes &&
           x->partitions == y->partitions && x->bytes_per_part == y->bytes_per_part;
}

/* Whether `w` writes every byte of `r` (a dense bounding box covering it). */
static int covers(const sim_region *w, const sim_region *r)
{
    uint64_t parts = w->part_count ? w->part_count : 1;

    return w->alloc == r->alloc && w->part_lo <= r->part_lo &&
           w->part_lo + w->part_count >= r->part_lo + r->part_count && w->byte_lo <= r->byte_lo &&
           w->byte_hi >= r->byte_hi && w->bytes == (w->byte_hi - w->byte_lo) * parts;
}

static int reads_alloc(const sim_insn *in, uint32_t alloc)
{
    for (unsigned k = 0; k < in->nsrc; k++)
        if (in->src[k].alloc == alloc)
            return 1;
    return 0;
}

static int is_accumulating_pe(const sim_insn *in)
{
    return (in->opcode == SIM_OP_MATMUL || in->opcode == SIM_OP_PE_TRANSPOSE) &&
           (in->flags & SIM_F_ACCUMULATE);
}

/* Rule 2: the memset at `in` is overwritten whole by `next` before any read. */
static int dead_memset(const sim_insn *in, const sim_insn *next)
{
    const sim_region *d = &in->dst[0];

    if ((next->flags & SIM_F_MASKED) || is_accumulating_pe(next) || reads_alloc(next, d->alloc))
        return 0;
    for (unsigned k = 0; k < next->ndst; k++)
        if (covers(&next->dst[k], d))
            return 1;
    return 0;
}

/* Each partition's elements are one contiguous run (no stride, no
 * permutation): a copy between two such regions is a plain move. */
static int dense_rows(const sim_region *r)
{
    return (uint64_t)r->contig_bytes >=
           (uint64_t)r->elems_per_part * sim_dtype_size((sim_dtype)r->dtype);
}

/* Rule 1: insns[i] writes a fresh tile that insns[i + 1] copies whole into
 * another on-chip tile, and nothing else touches the fresh tile: the
 * legacy `t[...] = nl.load(...)` and `t[...] = <expression>`.  The producer
 * is a DMA load (into SBUF, as DMA writes) or a Vector/Scalar/GpSimd
 * instruction (they write SBUF or PSUM in any dtype); a TensorE result
 * stays, as TensorE writes PSUM only and copying it out is real work. */
static int write_then_copy(const sim_record *r, const acount *cnt, size_t i)
{
    const sim_insn *l = &r->insns[i], *c;
    const sim_alloc *t;
    int dma = l->opcode == SIM_OP_DMA_COPY && l->engine == SIM_ENG_DMA && l->nsrc == 1 &&
              l->src[0].mem == SIM_MEM_HBM;
    int compute = l->engine == SIM_ENG_VECTOR || l->engine == SIM_ENG_SCALAR ||
                  l->engine == SIM_ENG_GPSIMD;

    if (i + 1 >= r->n_insns || l->ndst != 1 || (!dma && !compute) ||
        l->dst[0].mem == SIM_MEM_HBM)
        return 0;
    t = &r->allocs[l->dst[0].alloc];
    if (t->is_input || t->is_output || cnt[t->id].writes != 1 || cnt[t->id].reads != 1)
        return 0;
    c = &r->insns[i + 1];
    if (c->opcode != SIM_OP_TENSOR_COPY || c->nsrc != 1 || c->ndst != 1 ||
        (c->flags & SIM_F_ACCUMULATE) || !same_place(&c->src[0], &l->dst[0]) ||
        c->dst[0].mem == SIM_MEM_HBM || c->dst[0].part_count != c->src[0].part_count ||
        c->dst[0].elems_per_part != c->src[0].elems_per_part || !dense_rows(&c->src[0]) ||
        !dense_rows(&c->dst[0]))
        return 0;
    return !dma || c->dst[0].mem == SIM_MEM_SBUF;
}

/* Rule 4: a Vector/GpSimd tensor_tensor whose one operand holds one element
 * per partition (a (P, 1) tile broadcast along the free axis) is the
 * tensor_scalar the compiler emits with that column as the per-partition
 * scalar operand.  Returns the index of the column operand, or -1. */
static int column_operand(const sim_insn *in)
{
    if (in->opcode != SIM_OP_TENSOR_TENSOR || in->nsrc != 2 || in->ndst != 1 ||
        (in->engine != SIM_ENG_VECTOR && in->engine != SIM_ENG_GPSIMD) ||
        in->dst[0].elems_per_part <= 1)
        return -1;
    for (int k = 1; k >= 0; k--) {
        const sim_region *c = &in->src[k], *t = &in->src[1 - k];
        if (c->elems_per_part == 1 && c->mem != SIM_MEM_HBM &&
            c->part_count == in->dst[0].part_count &&
            t->elems_per_part == in->dst[0].elems_per_part)
            return k;
    }
    return -1;
}

/* Rule 3 candidates: an unmasked memset with a known value, or a load. */
static int hoist_candidate(const sim_insn *in)
{
    if (in->ndst != 1 || (in->flags & SIM_F_MASKED) || in->dst[0].mem == SIM_MEM_HBM)
        return 0;
    if (in->opcode == SIM_OP_MEMSET)
        return in->nsrc == 0 && (in->flags & SIM_F_IMM);
    return in->opcode == SIM_OP_DMA_COPY && in->engine == SIM_ENG_DMA && in->nsrc == 1 &&
           in->src[0].mem == SIM_MEM_HBM;
}

/* Rule 3: `in` (original index i) repeats `prev` (original index j). */
static int repeats(const sim_record *r, const acount *cnt, const uint32_t *last_write,
                   const sim_insn *in, const sim_insn *prev, uint32_t j)
{
    if (in->opcode != prev->opcode || in->engine != prev->engine || in->flags != prev->flags ||
        in->loc != prev->loc || in->nsrc != prev->nsrc || in->ndst != prev->ndst ||
        in->dst[0].alloc == prev->dst[0].alloc || !same_shape(r, &in->dst[0], &prev->dst[0]) ||
        cnt[in->dst[0].alloc].writes != 1 || cnt[prev->dst[0].alloc].writes != 1)
        return 0;
    if (in->opcode == SIM_OP_MEMSET)
        return in->imm == prev->imm;
    /* a load: the same HBM bytes, not written since the first instance */
    return same_place(&in->src[0], &prev->src[0]) && in->src[0].bytes == prev->src[0].bytes &&
           in->src[0].dtype == prev->src[0].dtype &&
           (last_write[in->src[0].alloc] == UINT32_MAX || last_write[in->src[0].alloc] < j);
}

static void copy_tables(const sim_record *in, sim_record *out)
{
    out->allocs = kf_malloc((in->n_allocs ? in->n_allocs : 1) * sizeof(sim_alloc));
    if (in->n_allocs)
        memcpy(out->allocs, in->allocs, in->n_allocs * sizeof(sim_alloc));
    out->n_allocs = out->cap_allocs = in->n_allocs;
    out->locs = kf_malloc((in->n_locs ? in->n_locs : 1) * sizeof(sim_loc));
    if (in->n_locs)
        memcpy(out->locs, in->locs, in->n_locs * sizeof(sim_loc));
    out->n_locs = out->cap_locs = in->n_locs;
    /* sim_record_init interned "" as id 0, as in `in`: the ids carry over */
    for (size_t s = 1; s < in->n_strs; s++)
        (void)sim_record_str(out, in->strs[s]);
    out->spmd_programs = in->spmd_programs;
}

/* The lowered form of insns[i] (before aliasing): rule 1 gives a fused
 * writer the copy's destination, rule 4 makes a column tensor_tensor a
 * tensor_scalar.  Returns whether rule 4 applied. */
static int lowered_form(const sim_record *r, size_t i, int fused, sim_insn *y)
{
    int col;

    *y = r->insns[i];
    if (fused) {
        const sim_insn *c = &r->insns[i + 1];
        y->dst[0] = c->dst[0];
        y->flags = (uint8_t)((y->flags & ~SIM_F_CAST) | (c->flags & SIM_F_MASKED));
        if (y->nsrc && y->src[0].dtype != y->dst[0].dtype)
            y->flags |= SIM_F_CAST;
    }
    col = column_operand(y);
    if (col >= 0) {
        sim_region c = y->src[col];
        y->src[col] = y->src[1 - col];
        y->src[1] = c;
        y->opcode = SIM_OP_TENSOR_SCALAR;
        y->elems_per_part = y->dst[0].elems_per_part;
    }
    return col >= 0;
}

enum { L_KEEP = 0, L_FUSED = 1, L_DROP = 2 };

int sim_lower_record(const sim_record *in, sim_record *out, sim_lower_stats *stats)
{
    size_t n = in->n_insns, na = in->n_allocs;
    acount *cnt = kf_calloc(na ? na : 1, sizeof(acount));
    uint32_t *touch = kf_malloc((na ? na : 1) * sizeof(uint32_t));
    uint32_t *next_touch = kf_malloc((n ? n : 1) * sizeof(uint32_t));
    uint32_t *last_write = kf_malloc((na ? na : 1) * sizeof(uint32_t));
    uint32_t *alias = kf_malloc((na ? na : 1) * sizeof(uint32_t));
    uint32_t *at_loc = kf_malloc((in->n_locs ? in->n_locs : 1) * sizeof(uint32_t));
    uint8_t *act = kf_calloc(n ? n : 1, 1);
    sim_lower_stats st = { 0, 0, 0, 0, 0 };
    int changed;

    memset(out, 0, sizeof(*out));
    for (size_t a = 0; a < na; a++) {
        touch[a] = UINT32_MAX;
        last_write[a] = UINT32_MAX;
        alias[a] = (uint32_t)a;
    }
    for (size_t l = 0; l < in->n_locs; l++)
        at_loc[l] = UINT32_MAX;
    for (size_t i = n; i-- > 0;) {
        const sim_insn *x = &in->insns[i];
        next_touch[i] = x->ndst ? touch[x->dst[0].alloc] : UINT32_MAX;
        for (unsigned k = 0; k < x->nsrc; k++) {
            cnt[x->src[k].alloc].reads++;
            touch[x->src[k].alloc] = (uint32_t)i;
        }
        for (unsigned k = 0; k < x->ndst; k++) {
            cnt[x->dst[k].alloc].writes++;
            touch[x->dst[k].alloc] = (uint32_t)i;
        }
    }

    /* decide, without copying */
    for (size_t i = 0; i < n; i++) {
        const sim_insn *x = &in->insns[i];
        sim_insn y;

        if (act[i] == L_DROP)
            continue;
        if (write_then_copy(in, cnt, i)) {
            act[i] = L_FUSED;
            act[i + 1] = L_DROP;
            st.fused_copies++;
        } else if (x->opcode == SIM_OP_MEMSET && x->ndst == 1 && !(x->flags & SIM_F_MASKED) &&
                   x->dst[0].mem != SIM_MEM_HBM && next_touch[i] != UINT32_MAX &&
                   dead_memset(x, &in->insns[next_touch[i]])) {
            act[i] = L_DROP;
            st.dead_memsets++;
            continue;
        }
        st.column_scalars += (size_t)lowered_form(in, i, act[i] == L_FUSED, &y);
        if (hoist_candidate(&y) && y.loc < in->n_locs) {
            uint32_t j = at_loc[y.loc];
            sim_insn prev;
            if (j != UINT32_MAX) {
                (void)lowered_form(in, j, act[j] == L_FUSED, &prev);
                if (repeats(in, cnt, last_write, &y, &prev, j)) {
                    alias[y.dst[0].alloc] = alias[prev.dst[0].alloc];
                    act[i] = L_DROP;
                    st.hoisted++;
                    continue;
                }
            }
            at_loc[y.loc] = (uint32_t)i;
        }
        for (unsigned k = 0; k < y.ndst; k++)
            last_write[y.dst[k].alloc] = (uint32_t)i;
    }
    changed = st.fused_copies || st.dead_memsets || st.hoisted || st.column_scalars;

    /* build the lowered record only when something changed */
    if (changed) {
        uint32_t *newidx = kf_malloc((n + 1) * sizeof(uint32_t));
        sim_record_init(out, in->target);
        copy_tables(in, out);
        out->insns = kf_malloc((n ? n : 1) * sizeof(sim_insn));   /* never more than `in` */
        out->cap_insns = n ? n : 1;
        for (size_t i = 0; i < n; i++) {
            sim_insn *y = &out->insns[out->n_insns];
            newidx[i] = (uint32_t)out->n_insns;
            if (act[i] == L_DROP)
                continue;
            (void)lowered_form(in, i, act[i] == L_FUSED, y);
            for (unsigned k = 0; k < y->nsrc; k++)
                y->src[k].alloc = alias[y->src[k].alloc];
            out->n_insns++;
        }
        newidx[n] = (uint32_t)out->n_insns;
        for (size_t a = 0; a < na; a++) {
            sim_alloc *al = &out->allocs[a];
            al->born = al->born <= n ? newidx[al->born] : (uint32_t)out->n_insns;
            if (al->died != UINT32_MAX)
                al->died = al->died <= n ? newidx[al->died] : (uint32_t)out->n_insns;
        }
        free(newidx);
    }
    if (stats)
        *stats = st;
    free(cnt);
    free(touch);
    free(next_touch);
    free(last_write);
    free(alias);
    free(at_loc);
    free(act);
    return changed;
}

/* ---- rule 5: issue order on an engine ------------------------------------ */

/* Whether a and b touch overlapping bytes of one allocation. */
static int regions_meet(const sim_region *a, const sim_region *b)
{
    return a->alloc == b->alloc && a->byte_lo < b->byte_hi && b->byte_lo < a->byte_hi &&
           a->part_lo < b->part_lo + b->part_count && b->part_lo < a->part_lo + a->part_count;
}

/* Whether running b before a could change what either reads or writes. */
static int conflict(const sim_insn *a, const sim_insn *b)
{
    for (unsigned i = 0; i < a->ndst; i++) {
        for (unsigned k = 0; k < b->nsrc; k++)
            if (regions_meet(&a->dst[i], &b->src[k]))
                return 1;
        for (unsigned k = 0; k < b->ndst; k++)
            if (regions_meet(&a->dst[i], &b->dst[k]))
                return 1;
    }
    for (unsigned i = 0; i < b->ndst; i++)
        for (unsigned k = 0; k < a->nsrc; k++)
            if (regions_meet(&b->dst[i], &a->src[k]))
                return 1;
    return 0;
}

size_t sim_lower_schedule(const sim_record *in, const sim_timing *tm, sim_record *out)
{
    size_t n = in->n_insns, swaps = 0;
    uint8_t *born, *died, *swap;

    memset(out, 0, sizeof(*out));
    if (n < 2 || !tm || tm->n != n)
        return 0;
    /* Allocations made or freed between two instructions: a swap moves a
     * birth before both and a release after both, so lifetimes only grow by
     * one instruction; both at once could make two tiles the allocator put
     * on the same memory live together, so that pins the order. */
    born = kf_calloc(n + 2, 1);
    died = kf_calloc(n + 2, 1);
    swap = kf_calloc(n, 1);
    for (size_t a = 0; a < in->n_allocs; a++) {
        const sim_alloc *al = &in->allocs[a];
        if (al->born <= n)
            born[al->born] = 1;
        if (al->died != UINT32_MAX && al->died <= n)
            died[al->died] = 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const sim_insn *a = &in->insns[i], *b = &in->insns[i + 1];
        const sim_timed *ta = &tm->t[i], *tb = &tm->t[i + 1];
        if (a->engine != b->engine || a->engine == SIM_ENG_DMA || (born[i + 1] && died[i + 1]))
            continue;
        /* the first waited for its operands, the second could have gone first */
        if (ta->ready_ps <= ta->free_ps || tb->ready_ps >= ta->ready_ps || conflict(a, b))
            continue;
        swap[i] = 1;
        swaps++;
        i++;   /* each instruction moves at most one place */
    }
    if (swaps) {
        sim_record_init(out, in->target);
        copy_tables(in, out);
        out->insns = kf_malloc(n * sizeof(sim_insn));
        out->cap_insns = n;
        memcpy(out->insns, in->insns, n * sizeof(sim_insn));
        out->n_insns = n;
        for (size_t i = 0; i + 1 < n; i++)
            if (swap[i]) {
                sim_insn t = out->insns[i];
                out->insns[i] = out->insns[i + 1];
                out->insns[i + 1] = t;
            }
        for (size_t a = 0; a < out->n_allocs; a++) {
            sim_alloc *al = &out->allocs[a];
            if (al->born >= 1 && al->born < n && swap[al->born - 1])
                al->born--;
            if (al->died != UINT32_MAX && al->died >= 1 && al->died < n && swap[al->died - 1])
                al->died++;
        }
    }
    free(born);
    free(died);
    free(swap);
    return swaps;
}
