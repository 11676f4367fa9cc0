/* Unit tests for the profiler (sim/sim_profile.h): summary fields, bounds,
 * and each finding produced by a record built to trigger it and absent from
 * a record that does not. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/sim_timing_synth.h"
#include "sim/sim_profile.h"

static sim_target load(const char *name)
{
    sim_target t;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_target_load(name, NULL, &t, &e), KF_OK, "%s", e.msg);
    return t;
}

/* A trn2 record of the synthetic matmul kernel p (bench/sim_timing_synth.h). */
static void mm_record(sim_record *r, syn_mm p)
{
    sim_record_init(r, "trn2");
    syn_matmul_kernel(r, &p, "mm.py");
}

static sim_profile *profile(const sim_record *r, const char *tgt)
{
    sim_target t = load(tgt);
    sim_profile *p = NULL;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_profile_build(r, &t, &p, &e), KF_OK, "%s", e.msg);
    return p;
}

static const sim_finding *finding(const sim_profile *p, sim_finding_kind k)
{
    for (size_t i = 0; i < p->n_findings; i++)
        if (p->findings[i].kind == k)
            return &p->findings[i];
    return NULL;
}

/* The finding names line `line` among its locations. */
static int finding_has_line(const sim_profile *p, const sim_finding *f, uint32_t line)
{
    for (unsigned i = 0; i < f->n_locs; i++)
        if (p->rec->locs[f->locs[i]].line == line)
            return 1;
    return 0;
}

/* loads of `iters` [128, cols] tiles from x (rows distinct unless reload > 1:
 * then the same rows `reload` times), each consumed by a VectorE copy. */
static void load_loop(sim_record *r, unsigned iters, unsigned cols, unsigned reload)
{
    uint32_t ll = sim_record_loc(r, "k.py", 20, "k"), lc = sim_record_loc(r, "k.py", 21, "k");
    uint64_t rows = 128ull * iters / reload;
    uint32_t x = syn_hbm(r, "x", SIM_DT_BFLOAT16, rows, cols, 1, 0);
    uint32_t buf[3], o = syn_tile(r, SIM_MEM_SBUF, "o", SIM_DT_BFLOAT16, 128, cols, 0);
    for (unsigned b = 0; b < 3; b++)
        buf[b] = syn_tile(r, SIM_MEM_SBUF, "xt", SIM_DT_BFLOAT16, 128, cols, (b + 1) * 2ull * cols);
    for (unsigned i = 0; i < iters; i++) {
        uint64_t r0 = (128ull * i) % rows;
        syn_dma(r, syn_tile_all(r, buf[i % 3]), syn_hbm_region(r, x, cols, r0, 128, 0, cols), ll);
        syn_op(r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(r, o), syn_tile_all(r, buf[i % 3]), NULL, lc);
    }
}

Test(sim_profile_findings, small_dma_transfers)
{
    sim_record a, b;
    sim_record_init(&a, "trn2");
    sim_record_init(&b, "trn2");
    load_loop(&a, 64, 64, 1);       /* 128 B per partition */
    load_loop(&b, 64, 2048, 1);     /* 4 KiB per partition */
    sim_profile *pa = profile(&a, "trn2"), *pb = profile(&b, "trn2");
    const sim_finding *f = finding(pa, SIM_FIND_DMA_SMALL);
    cr_assert_not_null(f);
    cr_assert(finding_has_line(pa, f, 20));
    cr_assert(strstr(f->message, "128 B per partition") != NULL, "%s", f->message);
    cr_assert(strstr(f->message, "k.py:20") != NULL, "%s", f->message);
    cr_assert_null(finding(pb, SIM_FIND_DMA_SMALL));
    cr_assert_null(finding(pb, SIM_FIND_HBM_RELOAD));
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

Test(sim_profile_findings, redundant_hbm_loads_name_the_tensor)
{
    sim_record a, b;
    sim_record_init(&a, "trn2");
    sim_record_init(&b, "trn2");
    load_loop(&a, 64, 2048, 8);     /* each row loaded 8 times */
    load_loop(&b, 64, 2048, 1);
    sim_profile *pa = profile(&a, "trn2"), *pb = profile(&b, "trn2");
    const sim_finding *f = finding(pa, SIM_FIND_HBM_RELOAD);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "`x`") != NULL && strstr(f->message, "8.0x") != NULL, "%s",
              f->message);
    cr_assert(finding_has_line(pa, f, 20));
    cr_assert_null(finding(pb, SIM_FIND_HBM_RELOAD));
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

/* loads into `bufs` buffers feeding a matmul chain each (bufs = 0: load
 * once, then compute only) */
static void mm_loop(sim_record *r, unsigned bufs, unsigned iters, unsigned k, sim_dtype dt,
                    unsigned chain)
{
    uint32_t ll = sim_record_loc(r, "k.py", 30, "k"), lm = sim_record_loc(r, "k.py", 31, "k");
    uint32_t x = syn_hbm(r, "x", dt, 128ull * iters, 512, 1, 0);
    uint32_t w = syn_tile(r, SIM_MEM_SBUF, "w", dt, k, 128, 0);
    uint32_t buf[2] = { 0, 0 }, ps[2] = { 0, 0 };
    unsigned nb = bufs ? bufs : 1;
    for (unsigned b = 0; b < nb; b++)
        buf[b] = syn_tile(r, SIM_MEM_SBUF, "xt", dt, k, 512, 4096 + b * 4096);
    for (unsigned b = 0; b < 2; b++)
        ps[b] = syn_tile(r, SIM_MEM_PSUM, "ps", SIM_DT_FLOAT32, 128, 512, (uint64_t)b * 2048);
    for (unsigned i = 0; i < iters; i++) {
        uint32_t t = buf[i % nb];
        if (bufs || i == 0)
            syn_dma(r, syn_tile_all(r, t), syn_hbm_region(r, x, 512, 128ull * i, k, 0, 512), ll);
        for (unsigned c = 0; c < chain; c++)
            syn_matmul(r, syn_tile_all(r, ps[c % 2]), syn_tile_all(r, w), syn_tile_all(r, t), 0, lm);
    }
}

Test(sim_profile_findings, engine_waiting_on_dma)
{
    sim_record a, b;
    sim_record_init(&a, "trn1");
    sim_record_init(&b, "trn1");
    mm_loop(&a, 1, 64, 128, SIM_DT_BFLOAT16, 4);    /* single buffer: TensorE waits each time */
    mm_loop(&b, 0, 64, 128, SIM_DT_BFLOAT16, 4);    /* data resident */
    sim_profile *pa = profile(&a, "trn1"), *pb = profile(&b, "trn1");
    const sim_finding *f = finding(pa, SIM_FIND_DMA_WAIT);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "tensor engine") != NULL, "%s", f->message);
    cr_assert(finding_has_line(pa, f, 31));
    cr_assert(strstr(f->message, "k.py:30") != NULL, "%s", f->message);   /* the loads */
    cr_assert_null(finding(pb, SIM_FIND_DMA_WAIT));
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

Test(sim_profile_findings, tensor_engine_underfilled_and_fp32)
{
    sim_record a, b, c;
    sim_record_init(&a, "trn1");
    sim_record_init(&b, "trn1");
    sim_record_init(&c, "trn1");
    mm_loop(&a, 0, 256, 32, SIM_DT_BFLOAT16, 4);    /* K = 32 of 128 */
    mm_loop(&b, 0, 256, 128, SIM_DT_BFLOAT16, 4);
    mm_loop(&c, 0, 256, 128, SIM_DT_FLOAT32, 4);
    sim_profile *pa = profile(&a, "trn1"), *pb = profile(&b, "trn1"), *pc = profile(&c, "trn1");
    const sim_finding *f = finding(pa, SIM_FIND_PE_UNDERFILL);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "K=32") != NULL, "%s", f->message);
    cr_assert(finding_has_line(pa, f, 31));
    cr_assert_null(finding(pb, SIM_FIND_PE_UNDERFILL));
    cr_assert_null(finding(pb, SIM_FIND_FP32_MATMUL));
    f = finding(pc, SIM_FIND_FP32_MATMUL);
    cr_assert_not_null(f);
    cr_assert(f->cost_ns > 0.5 * pc->total_ns, "fp32 costs 3/4 of a TensorE-bound run");
    cr_assert_null(finding(pc, SIM_FIND_PE_UNDERFILL));
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_profile_free(pc);
    sim_record_release(&a);
    sim_record_release(&b);
    sim_record_release(&c);
}

/* matmul chains into `nps` rotating PSUM tiles, each drained by a VectorE
 * copy: one tile serialises TensorE behind the copy. */
static void psum_loop(sim_record *r, unsigned nps)
{
    uint32_t lm = sim_record_loc(r, "k.py", 40, "k"), lc = sim_record_loc(r, "k.py", 41, "k");
    uint32_t w = syn_tile(r, SIM_MEM_SBUF, "w", SIM_DT_BFLOAT16, 128, 128, 0);
    uint32_t x = syn_tile(r, SIM_MEM_SBUF, "x", SIM_DT_BFLOAT16, 128, 512, 4096);
    uint32_t o = syn_tile(r, SIM_MEM_SBUF, "o", SIM_DT_FLOAT32, 128, 512, 8192);
    uint32_t ps[2] = { 0, 0 };
    for (unsigned b = 0; b < nps; b++)
        ps[b] = syn_tile(r, SIM_MEM_PSUM, "acc", SIM_DT_FLOAT32, 128, 512, (uint64_t)b * 2048);
    for (unsigned i = 0; i < 64; i++) {
        uint32_t p = ps[i % nps];
        for (unsigned k = 0; k < 8; k++)
            syn_matmul(r, syn_tile_all(r, p), syn_tile_all(r, w), syn_tile_all(r, x), k > 0, lm);
        syn_op(r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(r, o), syn_tile_all(r, p), NULL, lc);
    }
}

Test(sim_profile_findings, psum_pressure_serialises_the_pipeline)
{
    sim_record a, b;
    sim_record_init(&a, "trn1");
    sim_record_init(&b, "trn1");
    psum_loop(&a, 1);
    psum_loop(&b, 2);
    sim_profile *pa = profile(&a, "trn1"), *pb = profile(&b, "trn1");
    const sim_finding *f = finding(pa, SIM_FIND_BUFFER_PRESSURE);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "PSUM") != NULL && strstr(f->message, "`acc`") != NULL, "%s",
              f->message);
    cr_assert(finding_has_line(pa, f, 40));
    cr_assert_null(finding(pb, SIM_FIND_BUFFER_PRESSURE));
    cr_assert(pb->total_ns < pa->total_ns);
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

static void recip_loop(sim_record *r, int on_scalar)
{
    uint32_t l = sim_record_loc(r, "k.py", 50, "k");
    uint32_t x = syn_tile(r, SIM_MEM_SBUF, "x", SIM_DT_FLOAT32, 128, 512, 0);
    uint32_t y = syn_tile(r, SIM_MEM_SBUF, "y", SIM_DT_FLOAT32, 128, 512, 4096);
    for (unsigned i = 0; i < 32; i++)
        syn_op(r, on_scalar ? SIM_OP_ACTIVATION : SIM_OP_RECIPROCAL, -1, syn_tile_all(r, y),
               syn_tile_all(r, x), NULL, l);
}

Test(sim_profile_findings, work_on_a_slow_engine)
{
    sim_record a, b;
    sim_record_init(&a, "trn1");
    sim_record_init(&b, "trn1");
    recip_loop(&a, 0);
    recip_loop(&b, 1);
    sim_profile *pa = profile(&a, "trn1"), *pb = profile(&b, "trn1");
    const sim_finding *f = finding(pa, SIM_FIND_SLOW_ENGINE);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "reciprocal") != NULL, "%s", f->message);
    cr_assert(finding_has_line(pa, f, 50));
    cr_assert(f->cost_ns > 0.5 * pa->total_ns);
    cr_assert_null(finding(pb, SIM_FIND_SLOW_ENGINE));
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

/* GpSimd elementwise work is worth moving to VectorE only as far as
 * VectorE has room: with VectorE busy the whole run, the move would
 * lengthen it as much as it shortens GpSimd, so the finding goes. */
static void gpsimd_beside_vector(sim_record *r, unsigned vector_ops)
{
    uint32_t l = sim_record_loc(r, "k.py", 55, "k");
    uint32_t x = syn_tile(r, SIM_MEM_SBUF, "x", SIM_DT_FLOAT32, 128, 2048, 0);
    uint32_t y = syn_tile(r, SIM_MEM_SBUF, "y", SIM_DT_FLOAT32, 128, 2048, 16384);
    uint32_t u = syn_tile(r, SIM_MEM_SBUF, "u", SIM_DT_FLOAT32, 128, 2048, 32768);
    uint32_t v = syn_tile(r, SIM_MEM_SBUF, "v", SIM_DT_FLOAT32, 128, 2048, 49152);
    for (unsigned i = 0; i < 32; i++) {
        sim_region b = syn_tile_all(r, x);
        syn_op(r, SIM_OP_TENSOR_TENSOR, SIM_ENG_GPSIMD, syn_tile_all(r, y), syn_tile_all(r, x), &b, l);
    }
    for (unsigned i = 0; i < vector_ops; i++) {
        sim_region b = syn_tile_all(r, u);
        syn_op(r, SIM_OP_TENSOR_TENSOR, SIM_ENG_VECTOR, syn_tile_all(r, v), syn_tile_all(r, u), &b, l);
    }
}

Test(sim_profile_findings, gpsimd_work_moves_to_vector_engine_only_as_far_as_it_has_room)
{
    sim_record a, b, c;
    sim_record_init(&a, "trn2");
    sim_record_init(&b, "trn2");
    sim_record_init(&c, "trn2");
    gpsimd_beside_vector(&a, 0);
    gpsimd_beside_vector(&b, 64);
    gpsimd_beside_vector(&c, 24);
    sim_profile *pa = profile(&a, "trn2"), *pb = profile(&b, "trn2"), *pc = profile(&c, "trn2");
    double ve = sim_ps_to_ns(pb->tm.track_busy_ps[SIM_ENG_VECTOR]);
    const sim_finding *fa = finding(pa, SIM_FIND_SLOW_ENGINE), *fc = finding(pc, SIM_FIND_SLOW_ENGINE);

    cr_assert_not_null(fa, "VectorE idle: move the GpSimd work");
    cr_assert(strstr(fa->message, "GpSimd") != NULL && strstr(fa->message, "room") == NULL, "%s", fa->message);
    cr_assert(ve >= 0.95 * pb->total_ns, "VectorE sets the pace: %.0f of %.0f ns", ve, pb->total_ns);
    cr_assert_null(finding(pb, SIM_FIND_SLOW_ENGINE), "VectorE has no room: %s",
                   finding(pb, SIM_FIND_SLOW_ENGINE) ? finding(pb, SIM_FIND_SLOW_ENGINE)->message : "");
    cr_assert_not_null(fc, "VectorE has room for part of it");
    cr_assert(strstr(fc->message, "VectorE has room for about") != NULL, "%s", fc->message);
    cr_assert(fc->cost_ns < fa->cost_ns, "%.0f vs %.0f", fc->cost_ns, fa->cost_ns);
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_profile_free(pc);
    sim_record_release(&a);
    sim_record_release(&b);
    sim_record_release(&c);
}

/* On NC-v2 VectorE and ScalarE take turns at PSUM (neuron-hardware.md,
 * "Engine conflicts"): two engines draining PSUM side by side are bound by
 * the port, not by either engine, and the pipeline bound says so; on NC-v3
 * the same work is bound by the busier engine. */
static void psum_readers(sim_record *r)
{
    uint32_t l = sim_record_loc(r, "k.py", 57, "k");
    uint32_t p1 = syn_tile(r, SIM_MEM_PSUM, "p1", SIM_DT_FLOAT32, 128, 512, 0);
    uint32_t p2 = syn_tile(r, SIM_MEM_PSUM, "p2", SIM_DT_FLOAT32, 128, 512, 2048);
    uint32_t s1 = syn_tile(r, SIM_MEM_SBUF, "s1", SIM_DT_BFLOAT16, 128, 512, 0);
    uint32_t s2 = syn_tile(r, SIM_MEM_SBUF, "s2", SIM_DT_BFLOAT16, 128, 512, 4096);
    for (unsigned i = 0; i < 32; i++) {
        syn_op(r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(r, s1), syn_tile_all(r, p1), NULL, l);
        syn_op(r, SIM_OP_ACTIVATION, -1, syn_tile_all(r, s2), syn_tile_all(r, p2), NULL, l);
    }
}

Test(sim_profile_bounds, the_shared_psum_port_of_nc_v2_is_a_pipeline_bound)
{
    sim_record a, b;
    sim_record_init(&a, "trn1");
    sim_record_init(&b, "trn2");
    psum_readers(&a);
    psum_readers(&b);
    sim_profile *pa = profile(&a, "trn1"), *pb = profile(&b, "trn2");
    double ve = sim_ps_to_ns(pa->tm.track_busy_ps[SIM_ENG_VECTOR]), act = sim_ps_to_ns(pa->tm.track_busy_ps[SIM_ENG_SCALAR]);

    cr_assert_str_eq(pa->bounds.pipeline_engine, "psum_port");
    cr_assert(fabs(pa->bounds.pipeline_ns - (ve + act)) < 1.0, "port %.1f ns = VectorE %.1f + ScalarE %.1f",
              pa->bounds.pipeline_ns, ve, act);
    cr_assert(pa->bounds.pipeline_ns <= pa->total_ns + 1.0, "a bound: %.1f <= %.1f", pa->bounds.pipeline_ns,
              pa->total_ns);
    cr_assert(pa->bounds.achieved_fraction > 0.95, "the port sets the pace: %.3f", pa->bounds.achieved_fraction);
    cr_assert(strcmp(pb->bounds.pipeline_engine, "vector") == 0 || strcmp(pb->bounds.pipeline_engine, "scalar") == 0,
              "%s", pb->bounds.pipeline_engine);
    cr_assert_eq(pb->tm.psum_port_busy_ps, 0);
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

Test(sim_profile_findings, transposes_on_vector_engine)
{
    sim_record a, b;
    sim_record_init(&a, "trn2");
    sim_record_init(&b, "trn2");
    for (int k = 0; k < 2; k++) {
        sim_record *r = k ? &b : &a;
        uint32_t l = sim_record_loc(r, "k.py", 60, "k");
        uint32_t x = syn_tile(r, SIM_MEM_SBUF, "x", SIM_DT_BFLOAT16, 128, 128, 0);
        uint32_t y = syn_tile(r, k ? SIM_MEM_PSUM : SIM_MEM_SBUF, "y", SIM_DT_BFLOAT16, 128, 128, 4096);
        for (unsigned i = 0; i < 64; i++) {
            sim_insn *in = syn_op(r, k ? SIM_OP_PE_TRANSPOSE : SIM_OP_VE_TRANSPOSE, -1,
                                  syn_tile_all(r, y), syn_tile_all(r, x), NULL, l);
            in->mm_k = 128;
            in->mm_m = 128;
            in->mm_n = 128;
        }
    }
    sim_profile *pa = profile(&a, "trn2"), *pb = profile(&b, "trn2");
    const sim_finding *f = finding(pa, SIM_FIND_SLOW_ENGINE);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "nc_transpose") != NULL, "%s", f->message);
    cr_assert_null(finding(pb, SIM_FIND_SLOW_ENGINE));
    cr_assert(pb->total_ns < pa->total_ns);
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

static void small_ops(sim_record *r, unsigned free_elems, unsigned n)
{
    uint32_t l = sim_record_loc(r, "k.py", 70, "k");
    uint32_t x = syn_tile(r, SIM_MEM_SBUF, "x", SIM_DT_FLOAT32, 128, free_elems, 0);
    uint32_t y = syn_tile(r, SIM_MEM_SBUF, "y", SIM_DT_FLOAT32, 128, free_elems, 65536);
    for (unsigned i = 0; i < n; i++) {
        sim_region b = syn_tile_all(r, y);
        syn_op(r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(r, x), syn_tile_all(r, x), &b, l);
    }
}

Test(sim_profile_findings, per_instruction_overhead_of_small_instructions)
{
    sim_record a, b;
    sim_record_init(&a, "trn2");
    sim_record_init(&b, "trn2");
    small_ops(&a, 1, 512);       /* [128, 1] ops: all overhead */
    small_ops(&b, 4096, 16);     /* [128, 4096] ops: streaming */
    sim_profile *pa = profile(&a, "trn2"), *pb = profile(&b, "trn2");
    const sim_finding *f = finding(pa, SIM_FIND_INSN_OVERHEAD);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "vector engine") != NULL, "%s", f->message);
    cr_assert(finding_has_line(pa, f, 70));
    cr_assert(f->cost_ns > 0.3 * pa->total_ns);
    cr_assert_null(finding(pb, SIM_FIND_INSN_OVERHEAD));
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

Test(sim_profile_findings, findings_are_ranked_by_cost)
{
    sim_record r;
    mm_record(&r, (syn_mm){ SYN_MM_TILED, 1024, 1024, 1024, 128, 512, 1, 1, 1, SIM_DT_BFLOAT16 });
    sim_profile *pr = profile(&r, "trn2");
    cr_assert(pr->n_findings >= 3);
    for (size_t i = 1; i < pr->n_findings; i++)
        cr_assert(pr->findings[i - 1].cost_ns >= pr->findings[i].cost_ns);
    sim_profile_free(pr);
    sim_record_release(&r);
}

/* ---- summary, bounds, JSON, table, screen ------------------------------------- */

Test(sim_profile_summary, fields_and_bounds_of_a_blocked_matmul)
{
    sim_record r;
    mm_record(&r, (syn_mm){ SYN_MM_RESIDENT, 2048, 2048, 2048, 128, 512, 16, 2, 3, SIM_DT_BFLOAT16 });
    sim_profile *pr = profile(&r, "trn2");
    char *js = sim_profile_summary_json(pr);
    cJSON *s = cJSON_Parse(js);
    cr_assert_not_null(s);
    static const char *keys[] = {
        "total_time", "total_active_time", "mfu_estimated_percent", "hfu_estimated_percent",
        "mbu_estimated_percent", "tensor_engine_active_time_percent",
        "vector_engine_instruction_count", "matmul_instruction_count", "dma_transfer_count",
        "dma_transfer_total_bytes", "dma_transfer_average_bytes", "hbm_read_bytes",
        "hbm_write_bytes", "sbuf_read_bytes", "psum_write_bytes", "model_flops", "hardware_flops",
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(s, keys[i])), "missing %s", keys[i]);
    double T = cJSON_GetObjectItem(s, "total_time")->valuedouble;
    cr_assert(fabs(T - pr->total_ns * 1e-9) < 1e-12);
    double flops = 2.0 * 2048 * 2048 * 2048;
    /* model_flops: every instruction's useful FLOPs (matmuls + the PSUM copies) */
    cr_assert(cJSON_GetObjectItem(s, "model_flops")->valuedouble >= flops);
    cr_assert_eq(cJSON_GetObjectItem(s, "hardware_flops")->valuedouble, flops);
    cr_assert_eq(cJSON_GetObjectItem(s, "matmul_instruction_count")->valuedouble, 16 * 16 * 4);
    cr_assert_eq(cJSON_GetObjectItem(s, "tensor_engine_instruction_count")->valuedouble, 16 * 16 * 4);
    double mfu = cJSON_GetObjectItem(s, "mfu_estimated_percent")->valuedouble;
    cr_assert(fabs(mfu - 100.0 * flops / (78.6432e12 * T)) < 0.01);
    cr_assert(mfu > 70, "blocked matmul mfu %f", mfu);
    double n = cJSON_GetObjectItem(s, "dma_transfer_count")->valuedouble;
    double tb = cJSON_GetObjectItem(s, "dma_transfer_total_bytes")->valuedouble;
    cr_assert(fabs(cJSON_GetObjectItem(s, "dma_transfer_average_bytes")->valuedouble - tb / n) < 1e-6);
    /* result written once: 2048^2 bf16 */
    cr_assert_eq(cJSON_GetObjectItem(s, "hbm_write_bytes")->valuedouble, 2048.0 * 2048 * 2);
    /* bounds: compute at peak, io = inputs + output once */

    cr_assert(fabs(pr->bounds.compute_ns - flops / 78.6432e12 * 1e9) < 1.0);
    cr_assert(fabs(pr->bounds.io_ns - 3.0 * 2048 * 2048 * 2 / 362.0) < 1.0);
    cr_assert_str_eq(pr->bounds.pipeline_engine, "tensor");
    cr_assert(pr->bounds.achieved_fraction > 0.7 && pr->bounds.achieved_fraction <= 1.0);
    cJSON_Delete(s);
    free(js);

    char *full = sim_profile_json(pr);
    cJSON *j = cJSON_Parse(full);
    cr_assert_not_null(j);
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "bounds")));
    cr_assert(cJSON_IsArray(cJSON_GetObjectItem(j, "findings")));
    cJSON *lines = cJSON_GetObjectItem(j, "lines");
    cr_assert(cJSON_GetArraySize(lines) == 5);   /* loads x2, matmul, copy, store */
    int found = 0;
    cJSON *l0;
    cJSON_ArrayForEach(l0, lines)
        if (strcmp(cJSON_GetObjectItem(l0, "nki_source_location")->valuestring, "mm.py:12") == 0) {
            found = 1;
            cr_assert_eq(cJSON_GetObjectItem(l0, "instructions")->valuedouble, 16 * 16 * 4);
            cr_assert(cJSON_GetObjectItem(l0, "time_ns")->valuedouble >= pr->bounds.compute_ns - 1);
        }
    cr_assert(found, "the matmul line is attributed");
    cJSON_Delete(j);
    free(full);

    FILE *f = tmpfile();
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_profile_write_instructions(pr, f, &e), KF_OK);
    long len = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)len + 1);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = '\0';
    fclose(f);
    cJSON *it = cJSON_Parse(buf);
    cr_assert_not_null(it);
    cJSON *arr = cJSON_GetObjectItem(it, "instructions");
    cr_assert_eq((size_t)cJSON_GetArraySize(arr), r.n_insns);
    cJSON *i0 = cJSON_GetArrayItem(arr, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(i0, "engine")->valuestring, "dma");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(i0, "nki_source_location")));
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(i0, "duration_ns")));
    cJSON_Delete(it);
    free(buf);

    char *screen = NULL;
    size_t slen = 0;
    FILE *m = open_memstream(&screen, &slen);
    sim_profile_print(m, pr);
    fclose(m);
    cr_assert(strstr(screen, "bounds: compute") != NULL);
    cr_assert(strstr(screen, "tightest") != NULL);
    int nl = 0;
    for (char *c = screen; *c; c++)
        nl += *c == '\n';
    cr_assert(nl <= 40, "one screen: %d lines", nl);
    free(screen);
    sim_profile_free(pr);
    sim_record_release(&r);
}

Test(sim_profile_summary, same_record_same_profile)
{
    sim_record r;
    mm_record(&r, (syn_mm){ SYN_MM_BLOCKED, 1024, 1024, 1024, 128, 512, 2, 2, 2, SIM_DT_BFLOAT16 });
    sim_profile *a = profile(&r, "trn2"), *b = profile(&r, "trn2");
    char *ja = sim_profile_json(a), *jb = sim_profile_json(b);
    cr_assert_str_eq(ja, jb);
    free(ja);
    free(jb);
    sim_profile_free(a);
    sim_profile_free(b);
    sim_record_release(&r);
}

/* 64 independent tensor_tensor ops on [128, 512] fp32 tiles; every
 * `gpsimd_every`-th goes to GpSimd (0: all on VectorE). */
static void elementwise_loop(sim_record *r, unsigned gpsimd_every, unsigned load_cols)
{
    uint32_t l = sim_record_loc(r, "k.py", 70, "k"), ll = sim_record_loc(r, "k.py", 69, "k");
    uint32_t x = syn_tile(r, SIM_MEM_SBUF, "x", SIM_DT_FLOAT32, 128, 512, 0);
    uint32_t y = syn_tile(r, SIM_MEM_SBUF, "y", SIM_DT_FLOAT32, 128, 512, 4096);
    uint32_t h = load_cols ? syn_hbm(r, "h", SIM_DT_FLOAT32, 128ull * 64, load_cols, 1, 0) : 0;
    for (unsigned i = 0; i < 64; i++) {
        uint32_t o = syn_tile(r, SIM_MEM_SBUF, "o", SIM_DT_FLOAT32, 128, 512, 8192 + 2048ull * (i % 8));
        sim_region b = syn_tile_all(r, y);
        int eng = gpsimd_every && i % gpsimd_every == 0 ? SIM_ENG_GPSIMD : SIM_ENG_VECTOR;
        if (load_cols && i % 4 == 0) {    /* an unrelated load the ops do not wait for */
            uint32_t t = syn_tile(r, SIM_MEM_SBUF, "t", SIM_DT_FLOAT32, 128, load_cols, 65536);
            syn_dma(r, syn_tile_all(r, t), syn_hbm_region(r, h, load_cols, 128ull * i, 128, 0, load_cols), ll);
        }
        syn_op(r, SIM_OP_TENSOR_TENSOR, eng, syn_tile_all(r, o), syn_tile_all(r, x), &b, l);
    }
}

Test(sim_profile_findings, one_engine_busy_while_the_other_idles)
{
    sim_record a, b;
    sim_record_init(&a, "trn2");
    sim_record_init(&b, "trn2");
    elementwise_loop(&a, 0, 0);     /* all on VectorE, GpSimd idle */
    elementwise_loop(&b, 2, 0);     /* split between the two */
    sim_profile *pa = profile(&a, "trn2"), *pb = profile(&b, "trn2");
    const sim_finding *f = finding(pa, SIM_FIND_ENGINE_IMBALANCE);
    cr_assert_not_null(f);
    cr_assert(strstr(f->message, "gpsimd_engine") != NULL, "%s", f->message);
    cr_assert(finding_has_line(pa, f, 70));
    /* the balance point: GpSimd is slower, so less than half moves */
    cr_assert(f->cost_ns > 0.1 * pa->total_ns && f->cost_ns < 0.5 * pa->total_ns, "%.0f of %.0f", f->cost_ns,
              pa->total_ns);
    cr_assert(pb->total_ns < pa->total_ns, "splitting is faster: %.0f vs %.0f", pb->total_ns, pa->total_ns);
    cr_assert(pa->total_ns - f->cost_ns < pb->total_ns * 1.15 && pa->total_ns - f->cost_ns > pb->total_ns * 0.6,
              "the estimate (%.0f) is near the split's time (%.0f)", pa->total_ns - f->cost_ns, pb->total_ns);
    cr_assert_null(finding(pb, SIM_FIND_ENGINE_IMBALANCE));
    sim_profile_free(pa);
    sim_profile_free(pb);
    sim_record_release(&a);
    sim_record_release(&b);
}

/* The same VectorE work under loads that take longer: the DMA sets the
 * pace, so balancing the engines would not shorten the run. */
Test(sim_profile_findings, no_imbalance_when_the_dma_sets_the_pace)
{
    sim_record a;
    sim_record_init(&a, "trn2");
    elementwise_loop(&a, 0, 2048);
    sim_profile *pa = profile(&a, "trn2");
    double vec = (double)pa->tm.track_busy_ps[SIM_ENG_VECTOR] / 1e3;
    cr_assert(vec > 0.5 * pa->total_ns, "VectorE is busy most of the run: %.0f of %.0f ns", vec, pa->total_ns);
    cr_assert(pa->bounds.memory_ns > vec, "the loads take longer: %.0f vs %.0f ns", pa->bounds.memory_ns, vec);
    cr_assert_null(finding(pa, SIM_FIND_ENGINE_IMBALANCE));
    sim_profile_free(pa);
    sim_record_release(&a);
}
