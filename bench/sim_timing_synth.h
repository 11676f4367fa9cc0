/*
 * sim_timing_synth — instruction records built by hand, with the shape the
 * functional simulator gives them (sim_core's simc_view_region): used by the
 * timing/profile tests and by the benchmark, so both time the same kernels.
 *
 * syn_* helpers append allocations and instructions to a sim_record;
 * syn_matmul_kernel() builds a whole tiled matmul with the loop structure
 * of the published tutorial steps (neuron-hardware.md §5).
 * Header-only (static functions): include it from one .c file.
 */
#ifndef SIM_TIMING_SYNTH_H
#define SIM_TIMING_SYNTH_H

#include <stdint.h>
#include <string.h>

#include "sim/sim_record.h"

/* An HBM tensor of rows x cols elements, row-major. */
static inline uint32_t syn_hbm(sim_record *r, const char *name, sim_dtype dt, uint64_t rows,
                        uint64_t cols, int is_input, int is_output)
{
    uint32_t id = sim_record_alloc(r, SIM_MEM_HBM, dt, 1, rows * cols * sim_dtype_size(dt), name);
    r->allocs[id].is_input = (uint8_t)is_input;
    r->allocs[id].is_output = (uint8_t)is_output;
    return id;
}

/* An on-chip tile [parts, free] at byte offset `off` in each partition. */
static inline uint32_t syn_tile(sim_record *r, sim_mem mem, const char *name, sim_dtype dt,
                         uint32_t parts, uint64_t free_elems, uint64_t off)
{
    uint32_t id = sim_record_alloc(r, mem, dt, parts, free_elems * sim_dtype_size(dt), name);
    r->allocs[id].sbuf_offset = off;
    return id;
}

/* Region of rows [r0, r0+nr) x cols [c0, c0+nc) of an HBM tensor with
 * `ld` columns. */
static inline sim_region syn_hbm_region(const sim_record *r, uint32_t id, uint64_t ld, uint64_t r0,
                                 uint64_t nr, uint64_t c0, uint64_t nc)
{
    sim_region g;
    unsigned es = sim_dtype_size((sim_dtype)r->allocs[id].dtype);

    memset(&g, 0, sizeof(g));
    g.alloc = id;
    g.mem = SIM_MEM_HBM;
    g.dtype = r->allocs[id].dtype;
    g.part_count = 1;
    g.byte_lo = (r0 * ld + c0) * es;
    g.byte_hi = ((r0 + nr - 1) * ld + c0 + nc) * es;
    g.bytes = nr * nc * es;
    g.elems_per_part = (uint32_t)(nr * nc);
    g.contig_bytes = (uint32_t)((nc == ld ? nr * nc : nc) * es);
    g.inner_stride = (int32_t)es;
    g.descriptors = (uint32_t)(nc == ld ? 1 : nr);
    return g;
}

/* Region of partitions [p0, p0+np) x free elements [f0, f0+nf) of a tile,
 * with innermost stride `stride` elements (1 = contiguous). */
static inline sim_region syn_tile_region(const sim_record *r, uint32_t id, uint32_t p0, uint32_t np,
                                  uint64_t f0, uint64_t nf, unsigned stride)
{
    sim_region g;
    const sim_alloc *a = &r->allocs[id];
    unsigned es = sim_dtype_size((sim_dtype)a->dtype);

    memset(&g, 0, sizeof(g));
    g.alloc = id;
    g.mem = a->mem;
    g.dtype = a->dtype;
    g.part_lo = (uint16_t)p0;
    g.part_count = (uint16_t)np;
    g.byte_lo = f0 * es;
    g.byte_hi = (f0 + (nf - 1) * stride + 1) * es;
    g.bytes = (uint64_t)np * nf * es;
    g.elems_per_part = (uint32_t)nf;
    g.contig_bytes = (uint32_t)((stride == 1 ? nf : 1) * es);
    g.inner_stride = (int32_t)(stride * es);
    g.descriptors = stride == 1 ? np : (uint32_t)(np * nf);
    return g;
}

static inline sim_region syn_tile_all(const sim_record *r, uint32_t id)
{
    const sim_alloc *a = &r->allocs[id];
    return syn_tile_region(r, id, 0, a->partitions,
                           0, a->bytes_per_part / sim_dtype_size((sim_dtype)a->dtype), 1);
}

static inline sim_insn *syn_insn(sim_record *r, sim_opcode op, uint32_t loc)
{
    sim_insn *in = sim_record_append(r);
    in->opcode = (uint16_t)op;
    in->engine = (uint8_t)sim_opcode_engine(op);
    in->loc = loc;
    return in;
}

static inline sim_insn *syn_dma(sim_record *r, sim_region dst, sim_region src, uint32_t loc)
{
    sim_insn *in = syn_insn(r, SIM_OP_DMA_COPY, loc);
    in->nsrc = 1;
    in->ndst = 1;
    in->src[0] = src;
    in->dst[0] = dst;
    in->partitions = dst.mem == SIM_MEM_HBM ? src.part_count : dst.part_count;
    in->elems_per_part = dst.elems_per_part;
    return in;
}

/* dst[M,N] (+)= stat[K,M].T @ mov[K,N] */
static inline sim_insn *syn_matmul(sim_record *r, sim_region dst, sim_region stat, sim_region mov,
                            int accumulate, uint32_t loc)
{
    sim_insn *in = syn_insn(r, SIM_OP_MATMUL, loc);
    in->nsrc = 2;
    in->ndst = 1;
    in->src[0] = stat;
    in->src[1] = mov;
    in->dst[0] = dst;
    in->mm_k = stat.part_count;
    in->mm_m = stat.elems_per_part;
    in->mm_n = mov.elems_per_part;
    in->partitions = in->mm_k;
    in->elems_per_part = in->mm_n;
    in->flops = 2ull * in->mm_k * in->mm_m * in->mm_n;
    if (accumulate)
        in->flags |= SIM_F_ACCUMULATE;
    if (stat.dtype == SIM_DT_FLOAT32 || mov.dtype == SIM_DT_FLOAT32)
        in->flags |= SIM_F_FP32_PE;
    return in;
}

/* A one- or two-input elementwise op on its default engine (or `eng`). */
static inline sim_insn *syn_op(sim_record *r, sim_opcode op, int eng, sim_region dst, sim_region a,
                        const sim_region *b, uint32_t loc)
{
    sim_insn *in = syn_insn(r, op, loc);
    if (eng >= 0)
        in->engine = (uint8_t)eng;
    in->ndst = 1;
    in->dst[0] = dst;
    in->src[0] = a;
    in->nsrc = 1;
    if (b) {
        in->src[1] = *b;
        in->nsrc = 2;
    }
    in->partitions = dst.part_count;
    in->elems_per_part = dst.elems_per_part;
    in->flops = (uint64_t)dst.part_count * dst.elems_per_part;
    return in;
}

/* ---- a whole tiled matmul ------------------------------------------------
 * C[M,N] = A[M,K] @ B[K,N] with A given transposed (lhsT[K,M]), tiles of
 * K=128 (partitions), M=tm (stationary), N=tn (moving).  Structures:
 *   SYN_MM_TILED    for m, n: for k: load lhsT tile, load rhs tile, matmul;
 *                   copy PSUM->SBUF, store              (tutorial "tiled")
 *   SYN_MM_HOIST    for m: load lhsT column once; for n: load rhs column,
 *                   matmuls over k; copy, store         (tutorial "hoist load")
 *   SYN_MM_BLOCKED  for m-block of bm tiles: load lhsT block (one DMA per k
 *                   tile covering bm*tm columns); for n: load rhs column,
 *                   bm x K matmul chains; copies, stores (block free dims)
 *   SYN_MM_RESIDENT like BLOCKED, but rhs for a whole n-block of bn tiles
 *                   stays in SBUF across the m-blocks and loads are one
 *                   large DMA per k row (fully optimised)
 * `bufs` rotates that many SBUF buffers per loaded operand (2 = double
 * buffering); `loc_base` numbers the source lines (+0 lhsT load, +1 rhs
 * load, +2 matmul, +3 copy, +4 store). */
typedef enum syn_mm_kind { SYN_MM_TILED, SYN_MM_HOIST, SYN_MM_BLOCKED, SYN_MM_RESIDENT } syn_mm_kind;

typedef struct syn_mm {
    syn_mm_kind kind;
    uint64_t M, N, K;
    unsigned tm, tn, bm, bn;
    unsigned bufs;
    sim_dtype dt;
} syn_mm;

static inline void syn_matmul_kernel(sim_record *r, const syn_mm *p, const char *file)
{
    const uint32_t TK = 128;
    uint32_t L[5];
    uint64_t KT = p->K / TK, MT = p->M / p->tm, NT = p->N / p->tn;
    unsigned es = sim_dtype_size(p->dt), bufs = p->bufs ? p->bufs : 1;
    unsigned bm = p->bm ? p->bm : 1, bn = p->bn ? p->bn : 1;
    uint32_t lhsT = syn_hbm(r, "lhsT", p->dt, p->K, p->M, 1, 0);
    uint32_t rhs = syn_hbm(r, "rhs", p->dt, p->K, p->N, 1, 0);
    uint32_t out = syn_hbm(r, "result", p->dt, p->M, p->N, 0, 1);
    uint64_t sb_off = 0, slot = 0;
    (void)slot;
    uint32_t *abuf, *bbuf, psum[8], obuf[4];

    for (int i = 0; i < 5; i++)
        L[i] = sim_record_loc(r, file, 10 + (uint32_t)i, "matmul");
    /* SBUF buffers: lhsT column (KT tiles x bm*tm) and rhs (KT x bn*tn) per
     * buffer, rotating over `bufs`. */
    if (p->kind == SYN_MM_HOIST)
        bm = bn = 1;
    uint64_t a_free = (p->kind == SYN_MM_TILED) ? p->tm : KT * bm * p->tm;
    uint64_t b_free = (p->kind == SYN_MM_TILED) ? p->tn : KT * bn * p->tn;
    abuf = calloc(bufs, sizeof(*abuf));
    bbuf = calloc(bufs, sizeof(*bbuf));
    for (unsigned b = 0; b < bufs; b++) {
        abuf[b] = syn_tile(r, SIM_MEM_SBUF, "lhsT_tile", p->dt, TK, a_free, sb_off);
        sb_off += a_free * es;
        bbuf[b] = syn_tile(r, SIM_MEM_SBUF, "rhs_tile", p->dt, TK, b_free, sb_off);
        sb_off += b_free * es;
    }
    for (unsigned b = 0; b < 4; b++) {
        obuf[b] = syn_tile(r, SIM_MEM_SBUF, "res_sb", p->dt, p->tm, p->tn, sb_off);
        sb_off += p->tn * es;
    }
    for (unsigned b = 0; b < 8; b++)
        psum[b] = syn_tile(r, SIM_MEM_PSUM, "res_psum", SIM_DT_FLOAT32, p->tm, p->tn,
                           (uint64_t)b * 2048);
    uint64_t ps = 0, os = 0;

#define SYN_FINISH(mi, ni)                                                                \
    do {                                                                                  \
        syn_op(r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(r, obuf[os % 4]),                  \
               syn_tile_all(r, psum[ps % 8]), NULL, L[3]);                                \
        syn_dma(r, syn_hbm_region(r, out, p->N, (mi) * p->tm, p->tm, (ni) * p->tn, p->tn), \
                syn_tile_all(r, obuf[os % 4]), L[4]);                                     \
        os++;                                                                             \
        ps++;                                                                             \
    } while (0)

    if (p->kind == SYN_MM_TILED) {
        for (uint64_t m = 0; m < MT; m++)
            for (uint64_t n = 0; n < NT; n++) {
                for (uint64_t k = 0; k < KT; k++, slot++) {
                    uint32_t a = abuf[slot % bufs], b = bbuf[slot % bufs];
                    syn_dma(r, syn_tile_all(r, a), syn_hbm_region(r, lhsT, p->M, k * TK, TK, m * p->tm, p->tm), L[0]);
                    syn_dma(r, syn_tile_all(r, b), syn_hbm_region(r, rhs, p->N, k * TK, TK, n * p->tn, p->tn), L[1]);
                    syn_matmul(r, syn_tile_all(r, psum[ps % 8]), syn_tile_all(r, a), syn_tile_all(r, b), k > 0, L[2]);
                }
                SYN_FINISH(m, n);
            }
    } else {
        /* HOIST: m-blocks of one tile, n-blocks of one tile, rhs reloaded
         * per (m, n).  BLOCKED: m-blocks of bm, n-blocks of bn, rhs block
         * reloaded per m-block.  RESIDENT: n-block outer and kept in SBUF,
         * lhsT blocks reloaded per n-block. */
        unsigned mb = p->kind == SYN_MM_HOIST ? 1 : bm;
        unsigned nb = p->kind == SYN_MM_HOIST ? 1 : bn;
        int resident = p->kind == SYN_MM_RESIDENT;
        uint64_t outer = resident ? NT / nb : MT / mb, inner = resident ? MT / mb : NT / nb;
        uint64_t sa = 0, sbb = 0;
        for (uint64_t o = 0; o < outer; o++) {
            uint32_t a = 0, b = 0;
            uint64_t m0 = 0, n0 = 0;
            if (resident) {
                n0 = o * nb;
                b = bbuf[sbb++ % bufs];
                for (uint64_t k = 0; k < KT; k++)
                    syn_dma(r, syn_tile_region(r, b, 0, TK, k * nb * p->tn, nb * p->tn, 1),
                            syn_hbm_region(r, rhs, p->N, k * TK, TK, n0 * p->tn, nb * p->tn), L[1]);
            } else {
                m0 = o * mb;
                a = abuf[sa++ % bufs];
                for (uint64_t k = 0; k < KT; k++)
                    syn_dma(r, syn_tile_region(r, a, 0, TK, k * mb * p->tm, mb * p->tm, 1),
                            syn_hbm_region(r, lhsT, p->M, k * TK, TK, m0 * p->tm, mb * p->tm), L[0]);
            }
            for (uint64_t i = 0; i < inner; i++) {
                if (resident) {
                    m0 = i * mb;
                    a = abuf[sa++ % bufs];
                    for (uint64_t k = 0; k < KT; k++)
                        syn_dma(r, syn_tile_region(r, a, 0, TK, k * mb * p->tm, mb * p->tm, 1),
                                syn_hbm_region(r, lhsT, p->M, k * TK, TK, m0 * p->tm, mb * p->tm), L[0]);
                } else {
                    n0 = i * nb;
                    b = bbuf[sbb++ % bufs];
                    for (uint64_t k = 0; k < KT; k++)
                        syn_dma(r, syn_tile_region(r, b, 0, TK, k * nb * p->tn, nb * p->tn, 1),
                                syn_hbm_region(r, rhs, p->N, k * TK, TK, n0 * p->tn, nb * p->tn), L[1]);
                }
                for (unsigned mi = 0; mi < mb; mi++)
                    for (unsigned ni = 0; ni < nb; ni++) {
                        for (uint64_t k = 0; k < KT; k++)
                            syn_matmul(r, syn_tile_all(r, psum[ps % 8]),
                                       syn_tile_region(r, a, 0, TK, (k * mb + mi) * p->tm, p->tm, 1),
                                       syn_tile_region(r, b, 0, TK, (k * nb + ni) * p->tn, p->tn, 1),
                                       k > 0, L[2]);
                        SYN_FINISH(m0 + mi, n0 + ni);
                    }
            }
        }
    }
#undef SYN_FINISH
    free(abuf);
    free(bbuf);
}

/* ---- flash-attention forward ----------------------------------------------
 * One head, q/k/v [seq, d] bf16 (d = 128), the blocking of the reference
 * kernel (neuron-hardware.md §5): 128 query rows per tile, 512 keys per KV
 * tile, online softmax.  Per (q tile, kv tile): S = Q K^T (matmul into
 * PSUM), row max (VectorE), exp(S - max) with a row sum (ScalarE
 * activation_reduce), rescale of the running output (VectorE), P^T by four
 * PE transposes, O += P V (four matmuls), then per q tile the final divide
 * and the store.  K^T and V tiles are loaded once per q tile (the kernel's
 * seq_tile loop), Q once. */
static inline void syn_attention_kernel(sim_record *r, uint64_t seq, const char *file)
{
    const unsigned D = 128, BQ = 128, BK = 512;
    uint32_t L[9];
    for (int i = 0; i < 9; i++)
        L[i] = sim_record_loc(r, file, 20 + (uint32_t)i, "flash_fwd");
    uint32_t q = syn_hbm(r, "q", SIM_DT_BFLOAT16, D, seq, 1, 0);    /* q^T [d, seq] */
    uint32_t k = syn_hbm(r, "k", SIM_DT_BFLOAT16, D, seq, 1, 0);    /* k^T [d, seq] */
    uint32_t v = syn_hbm(r, "v", SIM_DT_BFLOAT16, seq, D, 1, 0);
    uint32_t o = syn_hbm(r, "out", SIM_DT_BFLOAT16, seq, D, 0, 1);
    uint32_t qt[2], kt[2], vt[2][4], s_ps[2], p_sb[2], pt_ps[2], pt_sb[2], o_ps[2], acc, mx, sm, ob;
    uint64_t off = 0;
    for (int b = 0; b < 2; b++) {
        qt[b] = syn_tile(r, SIM_MEM_SBUF, "q_tile", SIM_DT_BFLOAT16, D, BQ, off); off += BQ * 2;
        kt[b] = syn_tile(r, SIM_MEM_SBUF, "k_tile", SIM_DT_BFLOAT16, D, BK, off); off += BK * 2;
        for (int j = 0; j < 4; j++) {
            vt[b][j] = syn_tile(r, SIM_MEM_SBUF, "v_tile", SIM_DT_BFLOAT16, 128, D, off);
            off += D * 2;
        }
        p_sb[b] = syn_tile(r, SIM_MEM_SBUF, "p", SIM_DT_BFLOAT16, BQ, BK, off); off += BK * 2;
        pt_sb[b] = syn_tile(r, SIM_MEM_SBUF, "p_t", SIM_DT_BFLOAT16, 128, 4 * BQ, off); off += 4 * BQ * 2;
        s_ps[b] = syn_tile(r, SIM_MEM_PSUM, "s", SIM_DT_FLOAT32, BQ, BK, (uint64_t)b * 2048);
        pt_ps[b] = syn_tile(r, SIM_MEM_PSUM, "p_t_ps", SIM_DT_FLOAT32, 128, 4 * BQ, 4096 + (uint64_t)b * 2048);
        o_ps[b] = syn_tile(r, SIM_MEM_PSUM, "o_ps", SIM_DT_FLOAT32, BQ, D, 8192 + (uint64_t)b * 2048);
    }
    acc = syn_tile(r, SIM_MEM_SBUF, "o_acc", SIM_DT_FLOAT32, BQ, D, off); off += D * 4;
    mx = syn_tile(r, SIM_MEM_SBUF, "m", SIM_DT_FLOAT32, BQ, 1, off); off += 64;
    sm = syn_tile(r, SIM_MEM_SBUF, "l", SIM_DT_FLOAT32, BQ, 1, off); off += 64;
    ob = syn_tile(r, SIM_MEM_SBUF, "o_out", SIM_DT_BFLOAT16, BQ, D, off);
    uint64_t it = 0;
    for (uint64_t qi = 0; qi < seq / BQ; qi++) {
        uint32_t qb = qt[qi % 2];
        syn_dma(r, syn_tile_all(r, qb), syn_hbm_region(r, q, seq, 0, D, qi * BQ, BQ), L[0]);
        for (uint64_t ki = 0; ki < seq / BK; ki++, it++) {
            int b = (int)(it % 2);
            syn_dma(r, syn_tile_all(r, kt[b]), syn_hbm_region(r, k, seq, 0, D, ki * BK, BK), L[1]);
            for (int j = 0; j < 4; j++)
                syn_dma(r, syn_tile_all(r, vt[b][j]), syn_hbm_region(r, v, D, ki * BK + j * 128ull, 128, 0, D), L[1]);
            syn_matmul(r, syn_tile_all(r, s_ps[b]), syn_tile_all(r, qb), syn_tile_all(r, kt[b]), 0, L[2]);
            syn_op(r, SIM_OP_TENSOR_REDUCE, -1, syn_tile_all(r, mx), syn_tile_all(r, s_ps[b]), NULL, L[3]);
            sim_region m = syn_tile_all(r, mx);
            sim_insn *ex = syn_op(r, SIM_OP_ACTIVATION_REDUCE, -1, syn_tile_all(r, p_sb[b]),
                                  syn_tile_all(r, s_ps[b]), &m, L[4]);
            ex->dst[1] = syn_tile_all(r, sm);
            ex->ndst = 2;
            sim_region a = syn_tile_all(r, acc);
            syn_op(r, SIM_OP_TENSOR_SCALAR, -1, a, a, NULL, L[5]);
            for (int j = 0; j < 4; j++) {
                sim_insn *t = syn_insn(r, SIM_OP_PE_TRANSPOSE, L[6]);
                t->nsrc = 1;
                t->ndst = 1;
                t->src[0] = syn_tile_region(r, p_sb[b], 0, BQ, j * 128ull, 128, 1);
                t->dst[0] = syn_tile_region(r, pt_ps[b], 0, 128, j * 128ull, BQ, 1);
                t->mm_k = BQ;
                t->mm_m = 128;
                t->mm_n = 128;
                t->partitions = BQ;
                t->elems_per_part = 128;
            }
            syn_op(r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(r, pt_sb[b]), syn_tile_all(r, pt_ps[b]), NULL, L[6]);
            for (int j = 0; j < 4; j++)
                syn_matmul(r, syn_tile_all(r, o_ps[b]), syn_tile_region(r, pt_sb[b], 0, 128, j * 128ull, BQ, 1),
                           syn_tile_all(r, vt[b][j]), j > 0, L[7]);
            sim_region ops = syn_tile_all(r, o_ps[b]);
            syn_op(r, SIM_OP_TENSOR_TENSOR, -1, a, a, &ops, L[7]);
        }
        sim_region l = syn_tile_all(r, sm);
        syn_op(r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(r, ob), syn_tile_all(r, acc), &l, L[8]);
        syn_dma(r, syn_hbm_region(r, o, D, qi * BQ, BQ, 0, D), syn_tile_all(r, ob), L[8]);
    }
}

#endif
