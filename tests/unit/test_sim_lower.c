/* Unit tests for the record lowering (sim/sim_lower.h): each rule on a
 * record built by hand, the cases each rule must leave alone, and what the
 * lowering changes in the timing. */
#include <criterion/criterion.h>
#include <string.h>

#include "bench/sim_timing_synth.h"
#include "sim/sim_lower.h"
#include "sim/sim_target.h"
#include "sim/sim_timing.h"

/* The lowered record; when no rule applies, sim_lower_record makes no copy
 * (checked here) and the record stands for itself: a deep copy is returned
 * so every caller can compare and release alike. */
static sim_record lower(const sim_record *r, sim_lower_stats *st)
{
    sim_record out;
    if (sim_lower_record(r, &out, st))
        return out;
    cr_assert_eq(out.n_insns, 0);
    cr_assert_null(out.insns);
    cr_assert_eq(st->fused_copies + st->dead_memsets + st->hoisted + st->column_scalars, 0);
    sim_record_init(&out, r->target);
    for (size_t i = 0; i < r->n_insns; i++)
        *sim_record_append(&out) = r->insns[i];
    for (size_t a = 0; a < r->n_allocs; a++) {
        const sim_alloc *x = &r->allocs[a];
        uint32_t id = sim_record_alloc(&out, (sim_mem)x->mem, (sim_dtype)x->dtype, x->partitions,
                                       x->bytes_per_part, r->strs[x->name]);
        out.allocs[id] = *x;
    }
    return out;
}

static uint64_t total_ps(const sim_record *r)
{
    sim_target t;
    sim_timing tm;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_target_load("trn2", NULL, &t, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_timing_run(r, &t, &tm, &e), KF_OK, "%s", e.msg);
    uint64_t ps = tm.total_ps;
    sim_timing_release(&tm);
    return ps;
}

static sim_insn *memset_imm(sim_record *r, sim_region dst, double v, uint32_t loc)
{
    sim_insn *in = syn_insn(r, SIM_OP_MEMSET, loc);
    in->ndst = 1;
    in->dst[0] = dst;
    in->partitions = dst.part_count;
    in->elems_per_part = dst.elems_per_part;
    sim_insn_set_imm(in, v);
    return in;
}

/* Rule 1: `t[...] = nl.load(x)` is one DMA into t; the copy disappears and
 * the tile's reader waits for the DMA only. */
Test(sim_lower, a_load_copied_whole_into_a_tile_is_one_dma_into_it)
{
    sim_record r, lo;
    sim_lower_stats st;
    sim_record_init(&r, "trn2");
    uint32_t loc = sim_record_loc(&r, "k.py", 3, "k");
    uint32_t x = syn_hbm(&r, "x", SIM_DT_BFLOAT16, 128, 512, 1, 0);
    uint32_t y = syn_hbm(&r, "y", SIM_DT_BFLOAT16, 128, 512, 0, 1);
    uint32_t tmp = syn_tile(&r, SIM_MEM_SBUF, "tmp", SIM_DT_BFLOAT16, 128, 512, 0);
    uint32_t t = syn_tile(&r, SIM_MEM_SBUF, "t", SIM_DT_BFLOAT16, 128, 512, 1024);
    syn_dma(&r, syn_tile_all(&r, tmp), syn_hbm_region(&r, x, 512, 0, 128, 0, 512), loc);
    syn_op(&r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&r, t), syn_tile_all(&r, tmp), NULL, loc);
    syn_dma(&r, syn_hbm_region(&r, y, 512, 0, 128, 0, 512), syn_tile_all(&r, t), loc);

    lo = lower(&r, &st);
    cr_assert_eq(st.fused_copies, 1);
    cr_assert_eq(lo.n_insns, 2);
    cr_assert_eq(lo.insns[0].opcode, SIM_OP_DMA_COPY);
    cr_assert_eq(lo.insns[0].dst[0].alloc, t);
    cr_assert_eq(lo.insns[1].src[0].alloc, t);
    cr_assert(total_ps(&lo) < total_ps(&r));
    sim_record_release(&lo);

    /* a strided (transposing) copy of the loaded tile is real work: it stays */
    sim_record_release(&r);
    sim_record_init(&r, "trn2");
    loc = sim_record_loc(&r, "k.py", 3, "k");
    x = syn_hbm(&r, "x", SIM_DT_BFLOAT16, 128, 512, 1, 0);
    tmp = syn_tile(&r, SIM_MEM_SBUF, "tmp", SIM_DT_BFLOAT16, 128, 512, 0);
    t = syn_tile(&r, SIM_MEM_SBUF, "t", SIM_DT_BFLOAT16, 128, 512, 1024);
    syn_dma(&r, syn_tile_all(&r, tmp), syn_hbm_region(&r, x, 512, 0, 128, 0, 512), loc);
    sim_region strided = syn_tile_region(&r, tmp, 0, 128, 0, 256, 2);
    syn_op(&r, SIM_OP_TENSOR_COPY, -1, syn_tile_region(&r, t, 0, 128, 0, 256, 1), strided, NULL,
           loc);
    lo = lower(&r, &st);
    cr_assert_eq(st.fused_copies, 0);
    cr_assert_eq(lo.n_insns, 2);
    sim_record_release(&lo);

    /* the loaded tile read again elsewhere: both stay */
    sim_record_release(&r);
    sim_record_init(&r, "trn2");
    loc = sim_record_loc(&r, "k.py", 3, "k");
    x = syn_hbm(&r, "x", SIM_DT_BFLOAT16, 128, 512, 1, 0);
    tmp = syn_tile(&r, SIM_MEM_SBUF, "tmp", SIM_DT_BFLOAT16, 128, 512, 0);
    t = syn_tile(&r, SIM_MEM_SBUF, "t", SIM_DT_BFLOAT16, 128, 512, 1024);
    syn_dma(&r, syn_tile_all(&r, tmp), syn_hbm_region(&r, x, 512, 0, 128, 0, 512), loc);
    syn_op(&r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&r, t), syn_tile_all(&r, tmp), NULL, loc);
    syn_op(&r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&r, t), syn_tile_all(&r, tmp), NULL, loc);
    lo = lower(&r, &st);
    cr_assert_eq(st.fused_copies, 0);
    cr_assert_eq(lo.n_insns, r.n_insns);
    sim_record_release(&lo);
    sim_record_release(&r);
}

/* Rule 1 for computed values: `acc[...] = acc * a + b` — the last op writes
 * acc; an op whose result is copied only in part keeps its copy. */
Test(sim_lower, an_expression_copied_into_a_tile_writes_it_directly)
{
    sim_record r, lo;
    sim_lower_stats st;
    sim_record_init(&r, "trn2");
    uint32_t loc = sim_record_loc(&r, "k.py", 5, "k");
    uint32_t acc = syn_tile(&r, SIM_MEM_SBUF, "acc", SIM_DT_FLOAT32, 128, 128, 0);
    uint32_t b = syn_tile(&r, SIM_MEM_SBUF, "b", SIM_DT_FLOAT32, 128, 128, 512);
    uint32_t tmp = syn_tile(&r, SIM_MEM_SBUF, "tmp", SIM_DT_FLOAT32, 128, 128, 1024);
    uint32_t part = syn_tile(&r, SIM_MEM_SBUF, "part", SIM_DT_FLOAT32, 128, 128, 1536);
    sim_region rb = syn_tile_all(&r, b);
    syn_op(&r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&r, tmp), syn_tile_all(&r, acc), &rb, loc);
    syn_op(&r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&r, acc), syn_tile_all(&r, tmp), NULL, loc);
    syn_op(&r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&r, part), syn_tile_all(&r, acc), &rb, loc);
    syn_op(&r, SIM_OP_TENSOR_COPY, -1, syn_tile_region(&r, acc, 0, 128, 0, 64, 1),
           syn_tile_region(&r, part, 0, 128, 0, 64, 1), NULL, loc);
    lo = lower(&r, &st);
    cr_assert_eq(st.fused_copies, 1);
    cr_assert_eq(lo.n_insns, 3);
    cr_assert_eq(lo.insns[0].opcode, SIM_OP_TENSOR_TENSOR);
    cr_assert_eq(lo.insns[0].dst[0].alloc, acc);
    cr_assert_eq(lo.insns[2].opcode, SIM_OP_TENSOR_COPY);
    sim_record_release(&lo);
    sim_record_release(&r);
}

/* Rule 2: a PSUM memset whose tile is next written whole by the first
 * (non-accumulating) matmul is dead; before an accumulating matmul, a read,
 * or a partial overwrite it is kept. */
Test(sim_lower, a_memset_overwritten_before_any_read_is_dropped)
{
    static const struct {
        int accumulate, read_first, partial;
        size_t dropped;
    } cases[] = { { 0, 0, 0, 1 }, { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0, 1, 0 } };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        sim_record r, lo;
        sim_lower_stats st;
        sim_record_init(&r, "trn2");
        uint32_t loc = sim_record_loc(&r, "k.py", 7, "k");
        uint32_t a = syn_tile(&r, SIM_MEM_SBUF, "a", SIM_DT_BFLOAT16, 128, 128, 0);
        uint32_t b = syn_tile(&r, SIM_MEM_SBUF, "b", SIM_DT_BFLOAT16, 128, 512, 256);
        uint32_t o = syn_tile(&r, SIM_MEM_SBUF, "o", SIM_DT_FLOAT32, 128, 512, 2048);
        uint32_t ps = syn_tile(&r, SIM_MEM_PSUM, "acc", SIM_DT_FLOAT32, 128, 512, 0);
        memset_imm(&r, syn_tile_all(&r, ps), 0.0, loc);
        if (cases[c].read_first)
            syn_op(&r, SIM_OP_TENSOR_COPY, SIM_ENG_SCALAR, syn_tile_all(&r, o), syn_tile_all(&r, ps),
                   NULL, loc);
        sim_region mv = cases[c].partial ? syn_tile_region(&r, b, 0, 128, 0, 256, 1)
                                         : syn_tile_all(&r, b);
        syn_matmul(&r, cases[c].partial ? syn_tile_region(&r, ps, 0, 128, 0, 256, 1)
                                        : syn_tile_all(&r, ps),
                   syn_tile_all(&r, a), mv, cases[c].accumulate, loc);
        lo = lower(&r, &st);
        cr_assert_eq(st.dead_memsets, cases[c].dropped, "case %zu", c);
        cr_assert_eq(lo.n_insns, r.n_insns - cases[c].dropped, "case %zu", c);
        sim_record_release(&lo);
        sim_record_release(&r);
    }
}

/* Rule 3: a constant tile re-made each iteration (same line, same value,
 * never written again) is made once; its readers read the first one. */
Test(sim_lower, a_loop_invariant_constant_is_made_once)
{
    sim_record r, lo;
    sim_lower_stats st;
    sim_record_init(&r, "trn2");
    uint32_t lc = sim_record_loc(&r, "k.py", 10, "k"), lu = sim_record_loc(&r, "k.py", 11, "k");
    uint32_t first = 0;
    uint32_t x = syn_tile(&r, SIM_MEM_SBUF, "x", SIM_DT_FLOAT32, 128, 512, 8192);
    sim_region rx = syn_tile_all(&r, x);
    for (int it = 0; it < 4; it++) {
        uint32_t c = syn_tile(&r, SIM_MEM_SBUF, "ones", SIM_DT_FLOAT32, 128, 512, 0);
        uint32_t o = syn_tile(&r, SIM_MEM_SBUF, "o", SIM_DT_FLOAT32, 128, 512, 4096);
        if (it == 0)
            first = c;
        memset_imm(&r, syn_tile_all(&r, c), 1.0, lc);
        syn_op(&r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&r, o), syn_tile_all(&r, c), &rx, lu);
        sim_record_free(&r, c);
        sim_record_free(&r, o);
    }
    lo = lower(&r, &st);
    cr_assert_eq(st.hoisted, 3);
    cr_assert_eq(lo.n_insns, 5);
    for (size_t i = 1; i < lo.n_insns; i++)
        cr_assert_eq(lo.insns[i].src[0].alloc, first, "reader %zu reads the hoisted tile", i);
    cr_assert(total_ps(&lo) < total_ps(&r));
    /* lifetimes are renumbered to the kept instructions */
    cr_assert_eq(lo.allocs[first].died, 2);
    sim_record_release(&lo);
    sim_record_release(&r);
}

/* Rule 3 is conservative: a different value, a tile written again, another
 * line, or a load whose HBM source was stored to in between stay. */
Test(sim_lower, what_is_not_invariant_stays)
{
    sim_record r, lo;
    sim_lower_stats st;
    sim_record_init(&r, "trn2");
    uint32_t l1 = sim_record_loc(&r, "k.py", 20, "k"), l2 = sim_record_loc(&r, "k.py", 21, "k");
    uint32_t lx = sim_record_loc(&r, "k.py", 22, "k"), lw = sim_record_loc(&r, "k.py", 23, "k");
    uint32_t lst = sim_record_loc(&r, "k.py", 24, "k");
    uint32_t x = syn_hbm(&r, "x", SIM_DT_FLOAT32, 128, 512, 1, 1);
    uint32_t w = syn_hbm(&r, "w", SIM_DT_FLOAT32, 128, 512, 1, 0);
    for (int it = 0; it < 3; it++) {
        uint32_t v = syn_tile(&r, SIM_MEM_SBUF, "v", SIM_DT_FLOAT32, 128, 512, 0);
        uint32_t m = syn_tile(&r, SIM_MEM_SBUF, "m", SIM_DT_FLOAT32, 128, 512, 2048);
        uint32_t t = syn_tile(&r, SIM_MEM_SBUF, "t", SIM_DT_FLOAT32, 128, 512, 4096);
        uint32_t u = syn_tile(&r, SIM_MEM_SBUF, "u", SIM_DT_FLOAT32, 128, 512, 6144);
        sim_region ru = syn_tile_all(&r, u);
        memset_imm(&r, syn_tile_all(&r, v), (double)it, l1);   /* the value changes */
        memset_imm(&r, syn_tile_all(&r, m), -3.0e4, l2);       /* m is written again below */
        syn_dma(&r, syn_hbm_region(&r, x, 512, 0, 128, 0, 512), syn_tile_all(&r, m), lst);
        syn_dma(&r, syn_tile_all(&r, t), syn_hbm_region(&r, x, 512, 0, 128, 0, 512), lx);
        syn_dma(&r, ru, syn_hbm_region(&r, w, 512, 0, 128, 0, 512), lw);
        syn_op(&r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&r, m), syn_tile_all(&r, t), &ru, l2);
        syn_op(&r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&r, t), syn_tile_all(&r, v), &ru, l1);
        sim_record_free(&r, v);
        sim_record_free(&r, m);
        sim_record_free(&r, t);
        sim_record_free(&r, u);
    }
    lo = lower(&r, &st);
    /* only the load of w (never written) repeats: loaded once */
    cr_assert_eq(st.hoisted, 2, "hoisted %zu", st.hoisted);
    cr_assert_eq(lo.n_insns, r.n_insns - 2);
    sim_record_release(&lo);
    sim_record_release(&r);
}

/* Rule 4: x * column (a (P, 1) tile) is a tensor_scalar, streaming one
 * input: cheaper than the two-input tensor_tensor it was recorded as. */
Test(sim_lower, a_tensor_tensor_with_a_column_operand_is_a_tensor_scalar)
{
    sim_record r, lo;
    sim_lower_stats st;
    sim_record_init(&r, "trn2");
    uint32_t loc = sim_record_loc(&r, "k.py", 30, "k");
    uint32_t col = syn_tile(&r, SIM_MEM_SBUF, "col", SIM_DT_FLOAT32, 128, 1, 0);
    uint32_t x = syn_tile(&r, SIM_MEM_SBUF, "x", SIM_DT_FLOAT32, 128, 2048, 64);
    uint32_t o = syn_tile(&r, SIM_MEM_SBUF, "o", SIM_DT_FLOAT32, 128, 2048, 16384);
    sim_region rx = syn_tile_all(&r, x);
    /* column first: the record's free size is the column's */
    sim_insn *in = syn_op(&r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&r, o), syn_tile_all(&r, col),
                          &rx, loc);
    in->elems_per_part = 1;
    lo = lower(&r, &st);
    cr_assert_eq(st.column_scalars, 1);
    cr_assert_eq(lo.insns[0].opcode, SIM_OP_TENSOR_SCALAR);
    cr_assert_eq(lo.insns[0].src[0].alloc, x);
    cr_assert_eq(lo.insns[0].src[1].alloc, col);
    cr_assert_eq(lo.insns[0].elems_per_part, 2048);
    sim_record_release(&lo);

    /* two full tiles: a real tensor_tensor */
    sim_record_release(&r);
    sim_record_init(&r, "trn2");
    loc = sim_record_loc(&r, "k.py", 31, "k");
    x = syn_tile(&r, SIM_MEM_SBUF, "x", SIM_DT_FLOAT32, 128, 2048, 0);
    o = syn_tile(&r, SIM_MEM_SBUF, "o", SIM_DT_FLOAT32, 128, 2048, 16384);
    rx = syn_tile_all(&r, x);
    syn_op(&r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&r, o), rx, &rx, loc);
    lo = lower(&r, &st);
    cr_assert_eq(st.column_scalars, 0);
    cr_assert_eq(lo.insns[0].opcode, SIM_OP_TENSOR_TENSOR);
    sim_record_release(&lo);
    sim_record_release(&r);
}

/* A record with nothing to lower is not copied: the caller times it as it is. */
Test(sim_lower, a_record_without_the_patterns_is_not_copied)
{
    sim_record r, lo;
    sim_lower_stats st;
    syn_mm p = { SYN_MM_TILED, 512, 1024, 512, 128, 512, 1, 1, 2, SIM_DT_BFLOAT16 };
    sim_record_init(&r, "trn2");
    syn_matmul_kernel(&r, &p, "mm.py");
    cr_assert(r.n_insns > 0);
    cr_assert_eq(sim_lower_record(&r, &lo, &st), 0);
    cr_assert_eq(lo.n_insns, 0);
    cr_assert_null(lo.insns);
    cr_assert_eq(st.fused_copies + st.dead_memsets + st.hoisted + st.column_scalars, 0);
    sim_record_release(&lo);
    sim_record_release(&r);
}

/* Rule 5: a VectorE copy waiting for a DMA load and, next in the record, an
 * independent VectorE copy whose operand is ready: the engine issues the
 * ready one first (the compiler's ASAP scheduler), which shortens the run.
 * Not swapped: the second depends on the first, the two are on different
 * engines, or a tile is both made and freed between them. */
static size_t schedule_case(int variant, uint64_t *before, uint64_t *after, sim_record *out)
{
    sim_record r;
    sim_target t;
    sim_timing tm;
    kf_err e = KF_ERR_INIT;
    sim_record_init(&r, "trn2");
    uint32_t loc = sim_record_loc(&r, "k.py", 3, "k");
    uint32_t x = syn_hbm(&r, "x", SIM_DT_FLOAT32, 128, 2048, 1, 0);
    uint32_t a = syn_tile(&r, SIM_MEM_SBUF, "a", SIM_DT_FLOAT32, 128, 2048, 0);
    uint32_t b = syn_tile(&r, SIM_MEM_SBUF, "b", SIM_DT_FLOAT32, 128, 2048, 8192);
    uint32_t c = syn_tile(&r, SIM_MEM_SBUF, "c", SIM_DT_FLOAT32, 128, 2048, 16384);
    uint32_t d = syn_tile(&r, SIM_MEM_SBUF, "d", SIM_DT_FLOAT32, 128, 2048, 24576);
    syn_dma(&r, syn_tile_all(&r, a), syn_hbm_region(&r, x, 2048, 0, 128, 0, 2048), loc);
    syn_op(&r, SIM_OP_TENSOR_COPY, SIM_ENG_VECTOR, syn_tile_all(&r, c), syn_tile_all(&r, a), NULL,
           loc);
    syn_op(&r, SIM_OP_TENSOR_COPY, variant == 2 ? SIM_ENG_SCALAR : SIM_ENG_VECTOR,
           syn_tile_all(&r, d), syn_tile_all(&r, variant == 1 ? c : b), NULL, loc);
    if (variant == 3) {   /* a tile made and one freed between the two */
        uint32_t m = syn_tile(&r, SIM_MEM_SBUF, "m", SIM_DT_FLOAT32, 128, 16, 32768);
        uint32_t f = syn_tile(&r, SIM_MEM_SBUF, "f", SIM_DT_FLOAT32, 128, 16, 40960);
        r.allocs[m].born = 2;
        r.allocs[f].born = 0;
        r.allocs[f].died = 2;
    }
    cr_assert_eq(sim_target_load("trn2", NULL, &t, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(sim_timing_run(&r, &t, &tm, &e), KF_OK, "%s", e.msg);
    *before = tm.total_ps;
    size_t swaps = sim_lower_schedule(&r, &tm, out);
    sim_timing_release(&tm);
    *after = swaps ? total_ps(out) : *before;
    if (swaps) {   /* the copy keeps everything but the order */
        cr_assert_eq(out->n_insns, r.n_insns);
        cr_assert_eq(out->n_allocs, r.n_allocs);
    }
    sim_record_release(&r);
    return swaps;
}

Test(sim_lower, a_ready_instruction_issues_before_one_that_waits)
{
    sim_record out;
    uint64_t before, after;

    cr_assert_eq(schedule_case(0, &before, &after, &out), 1);
    cr_assert_eq(out.insns[1].dst[0].alloc, 4, "the ready copy (into d) goes first");
    cr_assert_eq(out.insns[2].dst[0].alloc, 3);
    cr_assert(after < before, "%llu ps vs %llu ps", (unsigned long long)after,
              (unsigned long long)before);
    sim_record_release(&out);
    for (int v = 1; v <= 3; v++) {
        cr_assert_eq(schedule_case(v, &before, &after, &out), 0, "variant %d", v);
        cr_assert_eq(out.n_insns, 0);
        sim_record_release(&out);
    }
}
