/*
 * sim_timing — the event model; see sim_timing.h for the rules.
 *
 * One pass over the record in program order.  Because every track is in
 * order, an instruction's start is known when it is reached: the maximum of
 * its track's free time and the times its operands become usable.  Operand
 * times come from per-allocation lists of the last writes and reads of
 * byte ranges (with a 128-bit partition mask), pruned as later writes cover
 * them; a pre-pass marks which accesses can matter at all (an input that is
 * never written needs no read history), which keeps the lists short.  DMA
 * data moves on per-engine timelines that allow backfilling gaps, so a
 * prefetch issued after a store can still run before it.
 */
#include "sim_timing.h"

#include "kf_alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const sim_wait_names[] = {
#define XX(id, name, doc) name,
    SIM_WAIT_MAP(XX)
#undef XX
};

const char *sim_wait_name(sim_wait w)
{
    return (unsigned)w < SIM_WAIT__COUNT ? sim_wait_names[w] : "?";
}

const char *sim_timing_track_name(uint32_t track, char *buf, size_t len)
{
    if (track < SIM_TRACK_DMA0)
        return sim_engine_name((sim_engine)track);
    snprintf(buf, len, "dma_q%u", track - SIM_TRACK_DMA0);
    return buf;
}

/* ---- dependency lists ---------------------------------------------------- */

typedef struct dep_ent {
    uint64_t lo, hi;      /* byte range */
    uint64_t pm[2];       /* partitions 0..127 */
    uint64_t t;           /* write: data usable; read: read finished */
    uint32_t idx;         /* instruction */
    uint16_t track;       /* where it ran: an in-order track needs no WAR/WAW wait on itself */
    uint8_t  write;
} dep_ent;

typedef struct alloc_st {
    dep_ent *e;
    uint32_t n, cap;
    uint64_t maxlen;      /* longest byte range ever stored */
    uint32_t last_write;  /* pre-pass: last instruction writing it (UINT32_MAX: none) */
    uint32_t last_read;   /* pre-pass: last instruction reading it */
    uint64_t floor_ps;    /* buffer reuse: previous user of the memory finished */
    uint32_t floor_idx;
    uint64_t last_use_ps; /* latest end of any access */
    uint32_t last_use_idx;
    /* A tensor with block dims (sim_alloc.blocks > 1) is nblk logical tiles
     * of blk_stride bytes per partition, which the compiler places and
     * reuses one by one: buffer reuse is tracked per block. */
    uint32_t nblk;
    uint64_t blk_stride;
    uint64_t *blk_floor_ps, *blk_last_ps;
    uint32_t *blk_floor_idx, *blk_last_idx;
} alloc_st;

/* The blocks [*b0, *b1] of a block tensor that bytes [lo, hi) touch. */
static void blk_range(const alloc_st *a, uint64_t lo, uint64_t hi, uint32_t *b0, uint32_t *b1)
{
    uint64_t x = lo / a->blk_stride, y = hi > lo ? (hi - 1) / a->blk_stride : x;
    *b0 = x < a->nblk ? (uint32_t)x : a->nblk - 1;
    *b1 = y < a->nblk ? (uint32_t)y : a->nblk - 1;
}

/* Instruction i used region r of allocation a until end. */
static void note_use(alloc_st *a, const sim_region *r, uint64_t end, uint32_t i)
{
    if (end >= a->last_use_ps) {
        a->last_use_ps = end;
        a->last_use_idx = i;
    }
    if (a->nblk > 1) {
        uint32_t b0, b1;
        blk_range(a, r->byte_lo, r->byte_hi, &b0, &b1);
        for (uint32_t b = b0; b <= b1; b++)
            if (end >= a->blk_last_ps[b] || a->blk_last_idx[b] == UINT32_MAX) {
                a->blk_last_ps[b] = end;
                a->blk_last_idx[b] = i;
            }
    }
}


static void pmask(const sim_region *r, uint64_t pm[2])
{
    unsigned lo = r->part_lo, n = r->part_count ? r->part_count : 1;
    unsigned hi = lo + n;

    pm[0] = pm[1] = 0;
    if (r->mem == SIM_MEM_HBM) {
        pm[0] = 1;
        return;
    }
    if (hi > 128)
        hi = 128;
    for (unsigned w = 0; w < 2; w++) {
        unsigned a = lo > w * 64 ? lo - w * 64 : 0;
        unsigned b = hi > w * 64 ? hi - w * 64 : 0;
        if (b > 64)
            b = 64;
        if (a >= b)
            continue;
        uint64_t m = (b - a == 64) ? ~0ull : (((1ull << (b - a)) - 1) << a);
        pm[w] = m;
    }
}

static inline int ent_overlaps(const dep_ent *e, uint64_t lo, uint64_t hi, const uint64_t pm[2])
{
    return e->lo < hi && lo < e->hi && ((e->pm[0] & pm[0]) | (e->pm[1] & pm[1]));
}

static inline int ent_covered_by(const dep_ent *e, uint64_t lo, uint64_t hi, const uint64_t pm[2])
{
    return lo <= e->lo && e->hi <= hi && (e->pm[0] & ~pm[0]) == 0 && (e->pm[1] & ~pm[1]) == 0;
}

/* Entries are kept sorted by `lo`; `maxlen` (the longest entry ever
 * stored) bounds how far left of a query an overlapping entry can start,
 * so a query scans only the entries near its range. */
static uint32_t ent_lower(const alloc_st *a, uint64_t lo)
{
    uint32_t l = 0, h = a->n;
    while (l < h) {
        uint32_t mid = l + (h - l) / 2;
        if (a->e[mid].lo < lo)
            l = mid + 1;
        else
            h = mid;
    }
    return l;
}

static inline uint32_t ent_first(const alloc_st *a, uint64_t lo)
{
    return ent_lower(a, lo > a->maxlen ? lo - a->maxlen + 1 : 0);
}

/* Latest time among entries overlapping the range (writes only, or all),
 * skipping entries made on `skip_track`. */
static void ent_query(const alloc_st *a, uint64_t lo, uint64_t hi, const uint64_t pm[2],
                      int writes_only, uint32_t skip_track, uint64_t *t, uint32_t *idx,
                      int *was_write)
{
    for (uint32_t i = ent_first(a, lo); i < a->n && a->e[i].lo < hi; i++) {
        const dep_ent *e = &a->e[i];
        if ((writes_only && !e->write) || e->track == skip_track || !ent_overlaps(e, lo, hi, pm))
            continue;
        if (e->t > *t) {
            *t = e->t;
            *idx = e->idx;
            *was_write = e->write;
        }
    }
}

static void ent_record(alloc_st *a, uint64_t lo, uint64_t hi, const uint64_t pm[2], uint64_t t,
                       uint32_t idx, uint32_t track, int write)
{
    dep_ent ne = { lo, hi, { pm[0], pm[1] }, t, idx, (uint16_t)track, (uint8_t)write };
    uint32_t i = ent_lower(a, lo), o = i;

    /* A write supersedes what it covers (it started after them); a read
     * supersedes older covered reads.  Covered entries start in [lo, hi). */
    for (; i < a->n && a->e[i].lo < hi; i++) {
        const dep_ent *e = &a->e[i];
        if (ent_covered_by(e, lo, hi, pm) && (write || (!e->write && e->t <= t)))
            continue;
        a->e[o++] = a->e[i];
    }
    if (o < i) {
        memmove(&a->e[o], &a->e[i], (a->n - i) * sizeof(dep_ent));
        a->n -= i - o;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 4;
        a->e = kf_realloc(a->e, a->cap * sizeof(*a->e));
    }
    i = ent_lower(a, lo);
    memmove(&a->e[i + 1], &a->e[i], (a->n - i) * sizeof(dep_ent));
    a->e[i] = ne;
    a->n++;
    if (hi - lo > a->maxlen)
        a->maxlen = hi - lo;
}

/* ---- buffer reuse (physical SBUF/PSUM cells) ----------------------------- */

/* The memory an on-chip allocation occupies: bytes [lo, hi) of
 * partitions [0, parts) (the allocator places tiles from partition 0). */
enum { SIM_MAX_ROTATE = 8 };   /* = the target field's maximum */

typedef struct phys {
    uint64_t lo, hi;
    uint32_t parts;
    uint32_t idx;         /* dead list: last instruction that used it; live list: alloc id */
    uint64_t t;           /* dead list: when that use ended */
    /* dead list: the last uses of the tiles freed at exactly this place,
     * newest first, for the allocator's buffer rotation */
    uint64_t hist_t[SIM_MAX_ROTATE];
    uint32_t hist_idx[SIM_MAX_ROTATE];
    uint32_t nhist;
} phys;

typedef struct physlist {
    phys  *e;
    size_t n, cap;
} physlist;

static void phys_of(const sim_alloc *a, phys *p)
{
    p->lo = a->sbuf_offset;
    p->hi = a->sbuf_offset + a->bytes_per_part;
    p->parts = a->partitions;
    p->idx = 0;
    p->t = 0;
    p->nhist = 0;
}

static inline int phys_overlap(const phys *x, const phys *y)
{
    return x->lo < y->hi && y->lo < x->hi && x->parts && y->parts;
}

static void phys_push(physlist *l, const phys *p)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->e = kf_realloc(l->e, l->cap * sizeof(phys));
    }
    l->e[l->n++] = *p;
}

/* ---- DMA engine timelines ------------------------------------------------ */

typedef struct ival { uint64_t s, e; } ival;

typedef struct pipe {
    ival    *iv;
    size_t   head, n, cap;   /* live intervals are iv[head .. n) */
    uint64_t busy_ps;
} pipe;

/* Earliest start >= t where [start, start+d) is free; books it. */
static uint64_t pipe_place(pipe *p, uint64_t t, uint64_t d)
{
    size_t lo = p->head, hi = p->n;

    /* first interval ending after t */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->iv[mid].e <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t i = lo;
    uint64_t s = t;
    while (i < p->n && p->iv[i].s < s + d) {
        if (p->iv[i].e > s)
            s = p->iv[i].e;
        i++;
    }
    /* insert [s, s+d) before i, merging with touching neighbours */
    uint64_t e = s + d;
    p->busy_ps += d;
    if (d == 0)
        return s;
    int merge_prev = i > p->head && p->iv[i - 1].e == s;
    int merge_next = i < p->n && p->iv[i].s == e;
    if (merge_prev && merge_next) {
        p->iv[i - 1].e = p->iv[i].e;
        memmove(&p->iv[i], &p->iv[i + 1], (p->n - i - 1) * sizeof(ival));
        p->n--;
    } else if (merge_prev) {
        p->iv[i - 1].e = e;
    } else if (merge_next) {
        p->iv[i].s = s;
    } else {
        if (p->n == p->cap) {
            if (p->head > 0) {
                memmove(p->iv, &p->iv[p->head], (p->n - p->head) * sizeof(ival));
                p->n -= p->head;
                i -= p->head;
                p->head = 0;
            }
            if (p->n == p->cap) {
                p->cap = p->cap ? p->cap * 2 : 64;
                p->iv = kf_realloc(p->iv, p->cap * sizeof(ival));
            }
        }
        memmove(&p->iv[i + 1], &p->iv[i], (p->n - i) * sizeof(ival));
        p->iv[i].s = s;
        p->iv[i].e = e;
        p->n++;
    }
    return s;
}

/* Forget intervals that end before any future transfer can start. */
static void pipe_prune(pipe *p, uint64_t watermark)
{
    while (p->head < p->n && p->iv[p->head].e <= watermark)
        p->head++;
}

/* ---- costs --------------------------------------------------------------- */

typedef struct model {
    const sim_record *rec;
    const sim_target *t;
    alloc_st *as;
    physlist  dead[3];           /* per sim_mem: memory freed tiles used, and until when */
    unsigned  rotate;            /* buffers a re-allocated tile rotates over */
    uint64_t  births;
    int       track_reuse;       /* allocator placed tiles without overlap */
    pipe     *pipes;
    uint32_t  n_pipes, dma_rr, n_queues;
    uint32_t  queue_rr[3], qset_lo[3], qset_n[3];  /* load / store / other queue sets */
    uint64_t *track_free;
    uint8_t  *queue_used;        /* queues any DMA of the record uses */
    uint8_t  *track_used;        /* tracks any instruction of the record uses */
    uint16_t *qof;               /* DMA queue of each instruction */
    uint64_t  port_free;         /* NC-v2 VectorE/GpSimd SBUF port */
    uint32_t  port_idx;
    uint64_t  pport_free;        /* NC-v2 VectorE/ScalarE PSUM port */
    uint32_t  pport_idx;
    /* TensorE state */
    uint64_t  te_warm_start;
    int       te_started;
    sim_region te_prev_stat;
    int       te_have_prev;
    uint64_t  te_prev_mm_ps;
    uint32_t  te_prev_stat_writes;  /* writes seen to the stationary's alloc when loaded */
    uint32_t *alloc_writes;         /* running count of writes per alloc */
} model;

static inline uint64_t cyc_ps(double cycles, double ghz)
{
    return (uint64_t)ceil(cycles * 1000.0 / ghz);
}

static double engine_clock(const sim_target *t, unsigned eng)
{
    switch (eng) {
    case SIM_ENG_TENSOR: return t->te_clock_ghz;
    case SIM_ENG_VECTOR: return t->ve_clock_ghz;
    case SIM_ENG_SCALAR: return t->act_clock_ghz;
    case SIM_ENG_GPSIMD: return t->pool_clock_ghz;
    default:             return t->sp_clock_ghz;
    }
}

/* Delay between an engine writing a result and a dependent reader seeing it. */
static uint64_t result_latency_ps(const sim_target *t, unsigned eng)
{
    switch (eng) {
    case SIM_ENG_TENSOR: return cyc_ps(t->te_latency_cycles, t->te_clock_ghz);
    case SIM_ENG_VECTOR:
    case SIM_ENG_SCALAR:
    case SIM_ENG_GPSIMD: return cyc_ps(t->static_overhead_cycles, engine_clock(t, eng));
    default:             return 0;
    }
}

static int region_small_dtype(const sim_region *r)
{
    return sim_dtype_size((sim_dtype)r->dtype) <= 2;
}

static int region_strided(const sim_target *t, const sim_region *r)
{
    return r->mem != SIM_MEM_HBM && r->inner_stride > (int32_t)t->stride_penalty_bytes;
}

static double region_elem_stride_ok(const sim_region *r)
{
    unsigned sz = sim_dtype_size((sim_dtype)r->dtype);
    return r->inner_stride == 0 || (unsigned)abs(r->inner_stride) <= sz;
}

/* Vector/Scalar/GpSimd streaming cost in cycles of the engine's clock. */
static double stream_cycles(const model *m, const sim_insn *in, sim_cost cost, int work_only)
{
    const sim_target *t = m->t;
    double epc16, epc32, n = (double)in->elems_per_part, cyc;
    int fast = 1, strided = 0;
    /* An activation's scale/bias columns (sources after the data) cost
     * nothing: "activation costs the same with or without scale/bias" (S7). */
    int act = in->opcode == SIM_OP_ACTIVATION || in->opcode == SIM_OP_ACTIVATION_REDUCE;
    unsigned nsrc = act && in->nsrc > 1 ? 1 : in->nsrc;
    unsigned acc = nsrc + in->ndst;

    switch (in->engine) {
    case SIM_ENG_SCALAR: epc16 = t->act_epc16; epc32 = t->act_epc32; break;
    case SIM_ENG_GPSIMD: epc16 = t->pool_epc16; epc32 = t->pool_epc32; break;
    default:             epc16 = t->ve_epc16; epc32 = t->ve_epc32; break;
    }
    for (unsigned i = 0; i < nsrc; i++) {
        const sim_region *r = &in->src[i];
        fast &= region_small_dtype(r) && r->mem == SIM_MEM_SBUF && region_elem_stride_ok(r);
        strided |= region_strided(t, r);
    }
    for (unsigned i = 0; i < in->ndst; i++) {
        const sim_region *r = &in->dst[i];
        fast &= region_small_dtype(r) && r->mem == SIM_MEM_SBUF && region_elem_stride_ok(r);
        strided |= region_strided(t, r);
    }
    /* VectorE's perf mode (S8) covers single-input streams only. */
    if (in->engine == SIM_ENG_VECTOR && cost != SIM_COST_STREAM1)
        fast = 0;
    double per_lane = (fast ? epc16 : epc32) / t->sbuf_partitions;
    if (per_lane <= 0)
        per_lane = 1;
    cyc = n / per_lane;
    if (cost == SIM_COST_STREAM2)
        cyc *= 2;
    if (cost == SIM_COST_SLOWDVE && in->engine == SIM_ENG_VECTOR)
        cyc = n * t->ve_recip_factor;
    if (strided)
        cyc *= t->stride_penalty_factor;
    if (work_only)
        return cyc;
    cyc += t->access_bubble_cycles * (acc ? acc : 1);
    if (cyc < t->min_ii_cycles)
        cyc = t->min_ii_cycles;
    return cyc;
}

static int same_region(const sim_region *a, const sim_region *b)
{
    return a->alloc == b->alloc && a->byte_lo == b->byte_lo && a->byte_hi == b->byte_hi &&
           a->part_lo == b->part_lo && a->part_count == b->part_count;
}

static double matmul_cycles(const sim_target *t, const sim_insn *in, int as_bf16)
{
    double n = in->mm_n ? in->mm_n : (double)in->elems_per_part, f = 1;
    int fp8 = in->nsrc > 1 && (in->src[1].dtype == SIM_DT_FLOAT8_E4M3 ||
                               in->src[1].dtype == SIM_DT_FLOAT8_E5M2);

    if ((in->flags & SIM_F_FP32_PE) && !as_bf16)
        f = t->te_fp32_factor;
    else if (fp8 && !as_bf16)
        f = t->te_fp8_factor;
    return (n > t->te_moving_min_cycles ? n : t->te_moving_min_cycles) * f;
}

uint64_t sim_timing_isolated_ps(const sim_target *tgt, const sim_insn *in, sim_engine engine,
                                int as_bf16)
{
    model m;
    sim_insn copy = *in;
    sim_cost cost = sim_opcode_cost((sim_opcode)in->opcode);

    memset(&m, 0, sizeof(m));
    m.t = tgt;
    copy.engine = (uint8_t)engine;
    if (engine == SIM_ENG_TENSOR)
        return cyc_ps(matmul_cycles(tgt, &copy, as_bf16), tgt->te_clock_ghz);
    if (engine == SIM_ENG_SYNC || engine == SIM_ENG_DMA || cost == SIM_COST_CONTROL)
        return cyc_ps(tgt->min_ii_cycles, engine_clock(tgt, engine));
    return cyc_ps(stream_cycles(&m, &copy, cost, 0), engine_clock(tgt, engine));
}

uint64_t sim_timing_work_ps(const sim_target *tgt, const sim_insn *in)
{
    model m;
    sim_cost cost = sim_opcode_cost((sim_opcode)in->opcode);

    if (in->engine != SIM_ENG_VECTOR && in->engine != SIM_ENG_SCALAR &&
        in->engine != SIM_ENG_GPSIMD)
        return 0;
    if (cost == SIM_COST_CONTROL)
        return 0;
    memset(&m, 0, sizeof(m));
    m.t = tgt;
    return cyc_ps(stream_cycles(&m, in, cost, 1), engine_clock(tgt, in->engine));
}

/* TensorE: matmul or PE transpose, returns duration in ps at `start`. */
static uint64_t tensor_ps(model *m, const sim_insn *in, uint64_t start, uint64_t track_free)
{
    const sim_target *t = m->t;
    double f = (in->flags & SIM_F_FP32_PE) ? t->te_fp32_factor : 1, cyc, ls;

    cyc = matmul_cycles(t, in, 0);
    /* LoadStationary: skipped when the same stationary tile is still loaded
     * (same region, not rewritten), hidden under the previous multiply when
     * the engine is streaming back to back, exposed otherwise. */
    ls = t->te_ls_cycles * f;
    if (in->nsrc > 0) {
        const sim_region *st = &in->src[0];
        uint32_t w = st->alloc < m->rec->n_allocs ? m->alloc_writes[st->alloc] : 0;
        int same = m->te_have_prev && same_region(st, &m->te_prev_stat) &&
                   w == m->te_prev_stat_writes;
        int hidden = m->te_have_prev && start == track_free &&
                     m->te_prev_mm_ps >= cyc_ps(ls, t->te_clock_ghz);
        if (same || hidden)
            ls = 0;
        m->te_prev_stat = *st;
        m->te_prev_stat_writes = w;
        m->te_have_prev = 1;
    }
    uint64_t mm_ps = cyc_ps(cyc, t->te_clock_ghz);
    m->te_prev_mm_ps = mm_ps;
    uint64_t d = mm_ps + cyc_ps(ls, t->te_clock_ghz);
    /* Warm-up throttle (S21): rate starts at a fraction of peak and ramps;
     * an idle gap of the reset window brings the cap back. */
    if (t->te_warm_start < 1.0) {
        uint64_t idle_ps = (uint64_t)(t->te_warm_idle_us * 1e6);
        if (!m->te_started || start - track_free >= idle_ps)
            m->te_warm_start = start;
        m->te_started = 1;
        double ramp = t->te_warm_ramp_us * 1e6;
        double x = ramp > 0 ? (double)(start - m->te_warm_start) / ramp : 1.0;
        if (x > 1)
            x = 1;
        double rate = t->te_warm_start + (1.0 - t->te_warm_start) * x;
        d = (uint64_t)ceil((double)d / rate);
    }
    return d;
}

static double region_chunk(const sim_region *r)
{
    if (r->descriptors)
        return (double)r->bytes / r->descriptors;
    if (r->contig_bytes)
        return r->contig_bytes;
    return (double)r->bytes / (r->part_count ? r->part_count : 1);
}

static uint64_t region_descriptors(const sim_region *r)
{
    if (r->descriptors)
        return r->descriptors;
    if (r->contig_bytes)
        return (r->bytes + r->contig_bytes - 1) / r->contig_bytes;
    return r->part_count ? r->part_count : 1;
}

double sim_timing_dma_chunk(const sim_insn *in)
{
    double c = 0;
    if (in->nsrc)
        c = region_chunk(&in->src[0]);
    if (in->ndst) {
        double d = region_chunk(&in->dst[0]);
        if (!in->nsrc || d < c)
            c = d;
    }
    return c;
}

/* DMA: returns end time; *ideal gets fixed + data at full efficiency. */
static uint64_t dma_end(model *m, const sim_insn *in, uint64_t start, uint64_t *ideal)
{
    const sim_target *t = m->t;
    const sim_region *s = in->nsrc ? &in->src[0] : NULL;
    const sim_region *d = in->ndst ? &in->dst[0] : NULL;
    double bytes = 0, chunk = 1e18, eff, bpns = t->dma_engine_bpns;
    uint64_t desc = 1, fixed = (uint64_t)(t->dma_fixed_ns * 1000.0);
    int hbm = 0;

    if (s) {
        bytes = (double)s->bytes;
        chunk = region_chunk(s);
        desc = region_descriptors(s);
        hbm |= s->mem == SIM_MEM_HBM;
    }
    if (d) {
        if ((double)d->bytes > bytes)
            bytes = (double)d->bytes;
        double c = region_chunk(d);
        if (c < chunk)
            chunk = c;
        if (region_descriptors(d) > desc)
            desc = region_descriptors(d);
        hbm |= d->mem == SIM_MEM_HBM;
    }
    if ((in->flags & SIM_F_CAST) && s && d) {
        unsigned ss = sim_dtype_size((sim_dtype)s->dtype), ds = sim_dtype_size((sim_dtype)d->dtype);
        unsigned mn = ss < ds ? ss : ds;
        if (mn)
            bytes = bytes / (ss > ds ? ss : ds) * 4;  /* casts go through FP32 (S13) */
    }
    if (chunk > 1e17)
        chunk = bytes;
    eff = sim_target_dma_efficiency(t, chunk);
    if (in->opcode == SIM_OP_DMA_TRANSPOSE)
        eff *= (s && s->mem == SIM_MEM_HBM) ? t->dma_transpose_hbm_eff : t->dma_transpose_sbuf_eff;
    if (hbm && t->hbm_bpns / m->n_pipes < bpns)
        bpns = t->hbm_bpns / m->n_pipes;
    uint32_t np = m->n_pipes ? m->n_pipes : 1;   /* the target loader guarantees >= 1 */
    uint32_t ne = desc < np ? (uint32_t)desc : np;
    if (ne == 0)
        ne = 1;
    double share = bytes / ne;
    uint64_t share_ps = (uint64_t)ceil(share / (bpns * eff) * 1000.0);
    uint64_t share_ideal = (uint64_t)ceil(share / bpns * 1000.0);
    uint64_t data0 = start + fixed, end = data0;
    for (uint32_t k = 0; k < ne; k++) {
        pipe *p = &m->pipes[(m->dma_rr + k) % np];
        uint64_t s0 = pipe_place(p, data0, share_ps);
        if (s0 + share_ps > end)
            end = s0 + share_ps;
    }
    m->dma_rr = (m->dma_rr + ne) % np;
    *ideal = fixed + share_ideal;
    return end;
}

/* ---- the pass ------------------------------------------------------------ */

static int cmp_died(const void *a, const void *b, void *ctx)
{
    const sim_alloc *al = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (al[x].died != al[y].died)
        return al[x].died < al[y].died ? -1 : 1;
    return x < y ? -1 : (x > y);
}

static kf_code check_record(const sim_record *rec, kf_err *err)
{
    if (rec->n_insns >= UINT32_MAX || rec->n_allocs >= UINT32_MAX)
        return kf_err_set(err, KF_INVALID, "the record holds more than 2^32 instructions or "
                                           "allocations; split the kernel");
    for (size_t a = 0; a < rec->n_allocs; a++)
        if (rec->allocs[a].mem > SIM_MEM_PSUM)
            return kf_err_set(err, KF_INVALID, "allocation %zu has an unknown memory kind %u", a,
                              rec->allocs[a].mem);
    for (size_t i = 0; i < rec->n_insns; i++) {
        const sim_insn *in = &rec->insns[i];
        if (in->engine >= SIM_ENG__COUNT || in->opcode >= SIM_OP__COUNT ||
            in->nsrc > SIM_INSN_MAX_SRC || in->ndst > SIM_INSN_MAX_DST)
            return kf_err_set(err, KF_INVALID,
                              "instruction %zu has an unknown engine/opcode or too many operands",
                              i);
        for (unsigned k = 0; k < in->nsrc; k++)
            if (in->src[k].alloc >= rec->n_allocs || in->src[k].mem > SIM_MEM_PSUM)
                return kf_err_set(err, KF_INVALID,
                                  "instruction %zu reads allocation %u (memory %u), which the "
                                  "record lacks", i, in->src[k].alloc, in->src[k].mem);
        for (unsigned k = 0; k < in->ndst; k++)
            if (in->dst[k].alloc >= rec->n_allocs || in->dst[k].mem > SIM_MEM_PSUM)
                return kf_err_set(err, KF_INVALID,
                                  "instruction %zu writes allocation %u (memory %u), which the "
                                  "record lacks", i, in->dst[k].alloc, in->dst[k].mem);
    }
    return KF_OK;
}

/* Pre-pass: last reader/writer per allocation, and whether the allocator's
 * placement is usable for buffer-reuse tracking (no two live tiles share
 * memory — a record without placement has every tile at offset 0). */
static void prepass(model *m, const uint32_t *by_death)
{
    const sim_record *rec = m->rec;
    size_t nd = 0, na = 0;

    for (size_t a = 0; a < rec->n_allocs; a++) {
        m->as[a].last_write = UINT32_MAX;
        m->as[a].last_read = UINT32_MAX;
        m->as[a].floor_idx = UINT32_MAX;
        m->as[a].last_use_idx = UINT32_MAX;
        const sim_alloc *ra = &rec->allocs[a];
        if (ra->mem != SIM_MEM_HBM && ra->blocks > 1 && ra->bytes_per_part >= ra->blocks) {
            alloc_st *st = &m->as[a];
            st->nblk = ra->blocks;
            st->blk_stride = ra->bytes_per_part / ra->blocks;
            st->blk_floor_ps = kf_calloc(st->nblk, sizeof(uint64_t));
            st->blk_last_ps = kf_calloc(st->nblk, sizeof(uint64_t));
            st->blk_floor_idx = kf_malloc(st->nblk * sizeof(uint32_t));
            st->blk_last_idx = kf_malloc(st->nblk * sizeof(uint32_t));
            for (uint32_t b = 0; b < st->nblk; b++)
                st->blk_floor_idx[b] = st->blk_last_idx[b] = UINT32_MAX;
        }
    }
    for (size_t i = 0; i < rec->n_insns; i++) {
        const sim_insn *in = &rec->insns[i];
        for (unsigned k = 0; k < in->nsrc; k++)
            m->as[in->src[k].alloc].last_read = (uint32_t)i;
        for (unsigned k = 0; k < in->ndst; k++)
            m->as[in->dst[k].alloc].last_write = (uint32_t)i;
    }
    /* Queue assignment depends only on the record: do it here so that the
     * DMA timelines know which queues will ever issue. */
    for (size_t i = 0; i < rec->n_insns; i++) {
        const sim_insn *in = &rec->insns[i];
        uint32_t q;
        if (in->engine != SIM_ENG_DMA) {
            m->track_used[in->engine] = 1;
            continue;
        }
        if (in->flags & SIM_F_QUEUE) {
            q = in->queue % m->n_queues;
        } else {
            /* Like the compiler's input/output/data queue sets (S23 def.json):
             * loads, stores and on-chip copies rotate over disjoint queues,
             * so a store waiting for its data never holds up a prefetch. */
            int to_hbm = in->ndst && in->dst[0].mem == SIM_MEM_HBM;
            int from_hbm = in->nsrc && in->src[0].mem == SIM_MEM_HBM;
            unsigned set = from_hbm && !to_hbm ? 0 : (to_hbm ? 1 : 2);
            q = m->qset_lo[set] + m->queue_rr[set]++ % m->qset_n[set];
        }
        m->qof[i] = (uint16_t)q;
        m->queue_used[q] = 1;
        m->track_used[SIM_TRACK_DMA0 + q] = 1;
    }
    m->track_reuse = 1;
    physlist live[3] = { { NULL, 0, 0 }, { NULL, 0, 0 }, { NULL, 0, 0 } };
    for (size_t i = 0; i <= rec->n_insns && m->track_reuse; i++) {
        while (nd < rec->n_allocs && rec->allocs[by_death[nd]].died <= i) {
            const sim_alloc *a = &rec->allocs[by_death[nd++]];
            physlist *l = &live[a->mem];
            for (size_t k = 0; a->mem != SIM_MEM_HBM && k < l->n; k++)
                if (l->e[k].idx == a->id) {
                    l->e[k] = l->e[--l->n];
                    break;
                }
        }
        while (na < rec->n_allocs && rec->allocs[na].born <= i) {
            const sim_alloc *a = &rec->allocs[na++];
            phys p;
            if (a->mem == SIM_MEM_HBM || a->died <= a->born)
                continue;
            phys_of(a, &p);
            p.idx = a->id;
            for (size_t k = 0; k < live[a->mem].n && m->track_reuse; k++)
                if (phys_overlap(&live[a->mem].e[k], &p))
                    m->track_reuse = 0;
            phys_push(&live[a->mem], &p);
        }
    }
    for (int mem = 0; mem < 3; mem++)
        free(live[mem].e);
}

/* Memory p (p->t, p->idx: its last use) is free again. */
static void dead_add(model *m, int mem, phys *p)
{
    physlist *l = &m->dead[mem];
    for (size_t k = 0; k < l->n; k++) {
        phys *e = &l->e[k];
        if (e->lo == p->lo && e->hi == p->hi && e->parts == p->parts) {
            if (p->t >= e->t) {
                e->t = p->t;
                e->idx = p->idx;
            }
            memmove(&e->hist_t[1], &e->hist_t[0], (SIM_MAX_ROTATE - 1) * sizeof(uint64_t));
            memmove(&e->hist_idx[1], &e->hist_idx[0], (SIM_MAX_ROTATE - 1) * sizeof(uint32_t));
            e->hist_t[0] = p->t;
            e->hist_idx[0] = p->idx;
            if (e->nhist < SIM_MAX_ROTATE)
                e->nhist++;
            return;
        }
    }
    p->hist_t[0] = p->t;
    p->hist_idx[0] = p->idx;
    p->nhist = 1;
    phys_push(l, p);
}

static void on_death(model *m, const sim_alloc *a)
{
    const alloc_st *st = &m->as[a->id];
    phys p;

    if (!m->track_reuse || a->mem == SIM_MEM_HBM || st->last_use_idx == UINT32_MAX)
        return;
    phys_of(a, &p);
    if (st->nblk > 1) {
        uint64_t base = p.lo;
        for (uint32_t b = 0; b < st->nblk; b++) {
            if (st->blk_last_idx[b] == UINT32_MAX)
                continue;
            p.lo = base + b * st->blk_stride;
            p.hi = p.lo + st->blk_stride;
            p.t = st->blk_last_ps[b];
            p.idx = st->blk_last_idx[b];
            p.nhist = 0;
            dead_add(m, a->mem, &p);
        }
        return;
    }
    p.t = st->last_use_ps;
    p.idx = st->last_use_idx;
    dead_add(m, a->mem, &p);
}

/* Dead entries whose use ended before every track is free can never delay
 * anything again. */
static void dead_prune(model *m)
{
    uint64_t wm = UINT64_MAX;
    for (uint32_t t = 0; t < SIM_TRACK_DMA0 + m->n_queues; t++)
        if (m->track_used[t] && m->track_free[t] < wm)
            wm = m->track_free[t];
    if (wm == UINT64_MAX)
        return;
    for (int mem = SIM_MEM_SBUF; mem <= SIM_MEM_PSUM; mem++) {
        physlist *l = &m->dead[mem];
        for (size_t k = 0; k < l->n;) {
            if (l->e[k].t <= wm)
                l->e[k] = l->e[--l->n];
            else
                k++;
        }
    }
}

/* When memory p may be written again: the latest end of a use of the freed
 * memory it overlaps (*floor, *floor_idx raised to it). */
static void reuse_floor(const model *m, int mem, const phys *pp, uint64_t *floor, uint32_t *floor_idx)
{
    const physlist *l = &m->dead[mem];
    phys p = *pp;
    for (size_t k = 0; k < l->n; k++) {
        const phys *e = &l->e[k];
        uint64_t t = e->t;
        uint32_t idx = e->idx;
        if (!phys_overlap(e, &p))
            continue;
        /* A tile freed and allocated again at the same place stands for a
         * loop's tile: it rotates over `rotate` buffers, as the compiler
         * allocates them, so it waits for the user `rotate` frees back. */
        if (e->lo == p.lo && e->hi == p.hi && e->parts == p.parts && m->rotate > 1) {
            if (e->nhist < m->rotate)
                continue;
            t = e->hist_t[m->rotate - 1];
            idx = e->hist_idx[m->rotate - 1];
        }
        if (t > *floor) {
            *floor = t;
            *floor_idx = idx;
        }
    }
}

static void on_birth(model *m, const sim_alloc *a)
{
    alloc_st *st = &m->as[a->id];
    phys p;

    if (!m->track_reuse || a->mem == SIM_MEM_HBM)
        return;
    if ((++m->births & 63) == 0)
        dead_prune(m);
    phys_of(a, &p);
    if (st->nblk > 1) {
        uint64_t base = p.lo;
        for (uint32_t b = 0; b < st->nblk; b++) {
            p.lo = base + b * st->blk_stride;
            p.hi = p.lo + st->blk_stride;
            reuse_floor(m, a->mem, &p, &st->blk_floor_ps[b], &st->blk_floor_idx[b]);
        }
        return;
    }
    reuse_floor(m, a->mem, &p, &st->floor_ps, &st->floor_idx);
}

static void model_release(model *m)
{
    if (m->as)
        for (size_t a = 0; a < m->rec->n_allocs; a++) {
            free(m->as[a].e);
            free(m->as[a].blk_floor_ps);
            free(m->as[a].blk_last_ps);
            free(m->as[a].blk_floor_idx);
            free(m->as[a].blk_last_idx);
        }
    free(m->as);
    for (int i = 0; i < 3; i++)
        free(m->dead[i].e);
    free(m->track_used);
    if (m->pipes)
        for (uint32_t i = 0; i < m->n_pipes; i++)
            free(m->pipes[i].iv);
    free(m->pipes);
    free(m->track_free);
    free(m->queue_used);
    free(m->qof);
    free(m->alloc_writes);
}

/* Whether one of the instruction's sources or destinations is in mem (the
 * shared SBUF / PSUM access ports of NeuronCore v2). */
static int touches_mem(const sim_insn *in, sim_mem mem)
{
    for (unsigned k = 0; k < in->nsrc; k++)
        if (in->src[k].mem == mem)
            return 1;
    for (unsigned k = 0; k < in->ndst; k++)
        if (in->dst[k].mem == mem)
            return 1;
    return 0;
}

static void note_wait(uint64_t t, uint32_t idx, sim_wait kind, uint64_t *ready, uint32_t *widx,
                      sim_wait *wkind)
{
    if (t > *ready) {
        *ready = t;
        *widx = idx;
        *wkind = kind;
    }
}

static void time_one(model *m, size_t i, sim_timing *out, uint64_t *dma_watermark)
{
    const sim_record *rec = m->rec;
    const sim_insn *in = &rec->insns[i];
    sim_timed *tm = &out->t[i];
    unsigned eng = in->engine;
    uint32_t track;
    uint64_t ready = 0, start, end, ideal = 0;
    uint32_t widx = UINT32_MAX;
    sim_wait wkind = SIM_WAIT_NONE;
    uint64_t pm[2];

    if (eng == SIM_ENG_DMA) {
        uint32_t q = m->qof[i];
        track = SIM_TRACK_DMA0 + q;
    } else {
        track = eng;
    }
    /* RAW: reads wait for the last overlapping writes. */
    for (unsigned k = 0; k < in->nsrc; k++) {
        const sim_region *r = &in->src[k];
        alloc_st *a = &m->as[r->alloc];
        uint64_t t = 0;
        uint32_t idx = UINT32_MAX;
        int w = 0;
        pmask(r, pm);
        ent_query(a, r->byte_lo, r->byte_hi, pm, 1, UINT32_MAX, &t, &idx, &w);
        note_wait(t, idx, SIM_WAIT_RAW, &ready, &widx, &wkind);
    }
    /* WAR/WAW and buffer reuse: writes wait for what they overwrite. */
    for (unsigned k = 0; k < in->ndst; k++) {
        const sim_region *r = &in->dst[k];
        alloc_st *a = &m->as[r->alloc];
        uint64_t t = 0;
        uint32_t idx = UINT32_MAX;
        int w = 0;
        pmask(r, pm);
        ent_query(a, r->byte_lo, r->byte_hi, pm, 0, track, &t, &idx, &w);
        if (w && r->mem == SIM_MEM_HBM) {
            /* HBM writes are not ordered against HBM writes: look at reads only. */
            t = 0;
            idx = UINT32_MAX;
            w = 0;
            for (uint32_t e = ent_first(a, r->byte_lo); e < a->n && a->e[e].lo < r->byte_hi; e++)
                if (!a->e[e].write && a->e[e].track != track &&
                    ent_overlaps(&a->e[e], r->byte_lo, r->byte_hi, pm) && a->e[e].t > t) {
                    t = a->e[e].t;
                    idx = a->e[e].idx;
                }
        }
        note_wait(t, idx, w ? SIM_WAIT_WAW : SIM_WAIT_WAR, &ready, &widx, &wkind);
        if (a->nblk > 1) {
            uint32_t b0, b1;
            blk_range(a, r->byte_lo, r->byte_hi, &b0, &b1);
            for (uint32_t b = b0; b <= b1; b++)
                note_wait(a->blk_floor_ps[b], a->blk_floor_idx[b], SIM_WAIT_REUSE, &ready, &widx, &wkind);
        } else {
            note_wait(a->floor_ps, a->floor_idx, SIM_WAIT_REUSE, &ready, &widx, &wkind);
        }
    }
    uint64_t tfree = m->track_free[track];
    int port = m->t->conflict_ve_pool_sbuf >= 0.5 &&
               (eng == SIM_ENG_VECTOR || eng == SIM_ENG_GPSIMD);
    port = port && touches_mem(in, SIM_MEM_SBUF);
    if (port)
        note_wait(m->port_free, m->port_idx, SIM_WAIT_PORT, &ready, &widx, &wkind);
    int pport = m->t->conflict_ve_act_psum >= 0.5 &&
                (eng == SIM_ENG_VECTOR || eng == SIM_ENG_SCALAR);
    pport = pport && touches_mem(in, SIM_MEM_PSUM);
    if (pport)
        note_wait(m->pport_free, m->pport_idx, SIM_WAIT_PORT, &ready, &widx, &wkind);
    start = ready > tfree ? ready : tfree;
    if (ready <= tfree) {
        widx = UINT32_MAX;
        wkind = SIM_WAIT_NONE;
    }
    sim_cost cost = sim_opcode_cost((sim_opcode)in->opcode);
    if (eng == SIM_ENG_DMA) {
        end = dma_end(m, in, start, &ideal);
    } else if (eng == SIM_ENG_TENSOR) {
        end = start + tensor_ps(m, in, start, tfree);
    } else if (eng == SIM_ENG_SYNC || cost == SIM_COST_CONTROL) {
        double cyc = eng == SIM_ENG_SYNC ? m->t->sp_control_cycles : m->t->min_ii_cycles;
        end = start + cyc_ps(cyc, engine_clock(m->t, eng));
    } else {
        end = start + cyc_ps(stream_cycles(m, in, cost, 0), engine_clock(m->t, eng));
    }
    if (eng != SIM_ENG_DMA)
        ideal = end - start;
    if (port) {
        m->port_free = end;
        m->port_idx = (uint32_t)i;
        out->sbuf_port_busy_ps += end - start;
    }
    if (pport) {
        m->pport_free = end;
        m->pport_idx = (uint32_t)i;
        out->psum_port_busy_ps += end - start;
    }
    /* Record the accesses that a later instruction can depend on. */
    uint64_t avail = end + result_latency_ps(m->t, eng);
    for (unsigned k = 0; k < in->nsrc; k++) {
        const sim_region *r = &in->src[k];
        alloc_st *a = &m->as[r->alloc];
        if (a->last_write != UINT32_MAX && a->last_write > i) {
            pmask(r, pm);
            ent_record(a, r->byte_lo, r->byte_hi, pm, end, (uint32_t)i, track, 0);
        }
        note_use(a, r, end, (uint32_t)i);
    }
    for (unsigned k = 0; k < in->ndst; k++) {
        const sim_region *r = &in->dst[k];
        alloc_st *a = &m->as[r->alloc];
        int later_read = a->last_read != UINT32_MAX && a->last_read > i;
        int later_write = r->mem != SIM_MEM_HBM && a->last_write > i;
        m->alloc_writes[r->alloc]++;
        if (later_read || later_write) {
            pmask(r, pm);
            ent_record(a, r->byte_lo, r->byte_hi, pm, avail, (uint32_t)i, track, 1);
        }
        note_use(a, r, end, (uint32_t)i);
    }
    m->track_free[track] = end;
    tm->start_ps = start;
    tm->end_ps = end;
    tm->free_ps = tfree;
    tm->ready_ps = ready;
    tm->ideal_ps = ideal;
    tm->wait_on = widx;
    tm->wait = (uint8_t)wkind;
    tm->track = (uint16_t)track;
    out->track_busy_ps[track] += end - start;
    out->track_count[track]++;
    out->wait_ps[wkind] += start - tfree;
    if (end > out->total_ps)
        out->total_ps = end;
    if (eng == SIM_ENG_DMA) {
        uint64_t wm = UINT64_MAX;
        for (uint32_t q = 0; q < m->n_queues; q++)
            if (m->queue_used[q] && m->track_free[SIM_TRACK_DMA0 + q] < wm)
                wm = m->track_free[SIM_TRACK_DMA0 + q];
        /* data of any later transfer starts at least a fixed cost after its
         * queue is free, so nothing can be placed before this */
        if (wm != UINT64_MAX && wm > *dma_watermark) {
            *dma_watermark = wm;
            for (uint32_t p = 0; p < m->n_pipes; p++)
                pipe_prune(&m->pipes[p], wm);
        }
    }
}

static int cmp_ival(const void *a, const void *b)
{
    const ival *x = a, *y = b;
    if (x->s != y->s)
        return x->s < y->s ? -1 : 1;
    return x->e < y->e ? -1 : (x->e > y->e);
}

uint64_t sim_timing_union_ps(const sim_timing *tm, const sim_record *rec, int engine)
{
    size_t n = 0;
    ival *v;
    uint64_t total = 0, cs, ce;

    for (size_t i = 0; i < tm->n; i++)
        n += engine < 0 || rec->insns[i].engine == engine;
    if (!n)
        return 0;
    v = kf_malloc(n * sizeof(*v));
    n = 0;
    for (size_t i = 0; i < tm->n; i++)
        if (engine < 0 || rec->insns[i].engine == engine) {
            v[n].s = tm->t[i].start_ps;
            v[n++].e = tm->t[i].end_ps;
        }
    qsort(v, n, sizeof(*v), cmp_ival);
    cs = v[0].s;
    ce = v[0].e;
    for (size_t i = 1; i < n; i++) {
        if (v[i].s > ce) {
            total += ce - cs;
            cs = v[i].s;
            ce = v[i].e;
        } else if (v[i].e > ce) {
            ce = v[i].e;
        }
    }
    total += ce - cs;
    free(v);
    return total;
}

kf_code sim_timing_run(const sim_record *rec, const sim_target *tgt, sim_timing *out, kf_err *err)
{
    model m;
    uint32_t *by_death = NULL;
    kf_code rc;
    size_t nd = 0, na = 0;
    uint64_t wm = 0;

    memset(out, 0, sizeof(*out));
    memset(&m, 0, sizeof(m));
    rc = check_record(rec, err);
    if (rc)
        return rc;
    m.rec = rec;
    m.t = tgt;
    m.n_queues = (uint32_t)tgt->dma_queues;
    m.n_pipes = (uint32_t)tgt->dma_engines;
    m.rotate = (unsigned)tgt->alloc_rotate;
    m.as = kf_calloc(rec->n_allocs ? rec->n_allocs : 1, sizeof(alloc_st));
    m.alloc_writes = kf_calloc(rec->n_allocs ? rec->n_allocs : 1, sizeof(uint32_t));
    m.pipes = kf_calloc(m.n_pipes, sizeof(pipe));
    if (m.n_queues >= 4) {
        m.qset_n[0] = m.n_queues / 2;
        m.qset_n[1] = m.n_queues / 4;
        m.qset_lo[1] = m.qset_n[0];
        m.qset_lo[2] = m.qset_n[0] + m.qset_n[1];
        m.qset_n[2] = m.n_queues - m.qset_lo[2];
    } else {
        m.qset_n[0] = m.qset_n[1] = m.qset_n[2] = m.n_queues;
    }
    m.queue_used = kf_calloc(m.n_queues, 1);
    out->n_tracks = SIM_TRACK_DMA0 + m.n_queues;
    out->n = rec->n_insns;
    out->t = kf_calloc(rec->n_insns ? rec->n_insns : 1, sizeof(sim_timed));
    out->track_busy_ps = kf_calloc(out->n_tracks, sizeof(uint64_t));
    out->track_count = kf_calloc(out->n_tracks, sizeof(uint64_t));
    m.track_free = kf_calloc(out->n_tracks, sizeof(uint64_t));
    m.track_used = kf_calloc(out->n_tracks, 1);
    m.qof = kf_calloc(rec->n_insns ? rec->n_insns : 1, sizeof(uint16_t));
    by_death = kf_malloc((rec->n_allocs ? rec->n_allocs : 1) * sizeof(uint32_t));
    for (size_t a = 0; a < rec->n_allocs; a++)
        by_death[a] = (uint32_t)a;
    qsort_r(by_death, rec->n_allocs, sizeof(uint32_t), cmp_died, rec->allocs);
    prepass(&m, by_death);

    for (size_t i = 0; i < rec->n_insns; i++) {
        while (nd < rec->n_allocs && rec->allocs[by_death[nd]].died <= i)
            on_death(&m, &rec->allocs[by_death[nd++]]);
        while (na < rec->n_allocs && rec->allocs[na].born <= i)
            on_birth(&m, &rec->allocs[na++]);
        time_one(&m, i, out, &wm);
    }
    for (uint32_t p = 0; p < m.n_pipes; p++)
        if (m.pipes[p].busy_ps > out->dma_engine_busy_max_ps)
            out->dma_engine_busy_max_ps = m.pipes[p].busy_ps;
    out->dma_active_ps = sim_timing_union_ps(out, rec, SIM_ENG_DMA);
    free(by_death);
    model_release(&m);
    return KF_OK;
}

void sim_timing_release(sim_timing *t)
{
    if (!t)
        return;
    free(t->t);
    free(t->track_busy_ps);
    free(t->track_count);
    memset(t, 0, sizeof(*t));
}
