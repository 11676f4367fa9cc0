/* Unit tests for the timing model (sim/sim_timing.h) and target files
 * (sim/sim_target.h), on instruction records built by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/sim_timing_synth.h"
#include "sim/sim_target.h"
#include "sim/sim_timing.h"
#include "tests/lib/kf_test.h"

static sim_target load(const char *name)
{
    sim_target t;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_target_load(name, NULL, &t, &e), KF_OK, "%s", e.msg);
    return t;
}

static double cyc_ns(double cycles, double ghz) { return cycles / ghz; }

static double dur_ns(const sim_timing *tm, size_t i)
{
    return sim_ps_to_ns(tm->t[i].end_ps - tm->t[i].start_ps);
}

static void timing(const sim_record *r, const sim_target *t, sim_timing *tm)
{
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_timing_run(r, t, tm, &e), KF_OK, "%s", e.msg);
}

#define NEAR(a, b, tol) cr_assert(fabs((a) - (b)) <= (tol), "%s = %f, expected %f", #a, (double)(a), (double)(b))

/* ---- targets -------------------------------------------------------------- */

Test(sim_target, every_target_loads_with_its_documented_values)
{
    static const char *names[] = { "trn1", "inf2", "trn2", "trn3" };
    for (size_t i = 0; i < 4; i++) {
        sim_target t = load(names[i]);
        cr_assert_str_eq(t.name, names[i]);
        cr_assert_eq(t.te_rows, 128);
        cr_assert_eq(t.dma_queues, 16);
        cr_assert_eq(t.te_fp32_factor, 4);
        cr_assert_eq(t.min_ii_cycles, 64);
        cr_assert(t.dma_eff_n >= 2);
    }
    sim_target t1 = load("trn1"), t2 = load("trn2");
    NEAR(sim_target_te_peak_flops(&t1) / 1e12, 91.75, 0.01);
    NEAR(sim_target_te_peak_flops(&t2) / 1e12, 78.64, 0.01);
    cr_assert_eq(t1.te_warm_start, 1.0);     /* no throttle documented on NC-v2 */
    cr_assert_eq(t2.te_warm_start, 0.5);     /* S21 */
    cr_assert_eq(t1.sbuf_bytes_per_part, 192 * 1024);
    cr_assert_eq(t2.sbuf_bytes_per_part, 224 * 1024);
    /* efficiency: 4 KiB saturates, smaller chunks are slower, monotone */
    cr_assert_eq(sim_target_dma_efficiency(&t2, 4096), 1.0);
    cr_assert_eq(sim_target_dma_efficiency(&t2, 65536), 1.0);
    cr_assert(sim_target_dma_efficiency(&t2, 2048) < 0.5);
    cr_assert(sim_target_dma_efficiency(&t2, 64) < sim_target_dma_efficiency(&t2, 256));
}

Test(sim_target, bad_names_and_files_are_refused_with_the_key)
{
    sim_target t;
    kf_err e = KF_ERR_INIT;
    char dir[] = "/tmp/kf-target-XXXXXX", path[256];

    cr_assert_eq(sim_target_load("../etc/passwd", NULL, &t, &e), KF_INVALID);
    cr_assert_eq(sim_target_load("trn9", NULL, &t, &e), KF_NOT_FOUND);
    cr_assert(strstr(e.msg, "trn9") != NULL);
    cr_assert_not_null(mkdtemp(dir));

    /* a copy of trn2 with one value lacking its source */
    FILE *in = fopen("sim/targets/trn2.json", "r");
    cr_assert_not_null(in);
    static char text[65536];
    size_t n = fread(text, 1, sizeof(text) - 1, in);
    fclose(in);
    text[n] = '\0';
    snprintf(path, sizeof(path), "%s/good.json", dir);
    kf_test_write_file(path, text);
    cr_assert_eq(sim_target_load("good", dir, &t, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(t.name, "good");

    char *src = strstr(text, "\"source\": \"S8: TensorE 2.4 GHz\"");
    cr_assert_not_null(src);
    memcpy(src, "\"sourcX\"", 8);
    snprintf(path, sizeof(path), "%s/nosrc.json", dir);
    kf_test_write_file(path, text);
    cr_assert_eq(sim_target_load("nosrc", dir, &t, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "tensor.clock_ghz") != NULL, "%s", e.msg);

    /* the efficiency table must ascend (5e3 B before 2048 B) */
    memcpy(src, "\"source\"", 8);
    char *tab = strstr(text, "[\n          256,");
    cr_assert_not_null(tab, "trn2.json's chunk_efficiency table");
    memcpy(tab + strlen("[\n          "), "5e3", 3); /* NOLINT(bugprone-not-null-terminated-result): overwrites digits in place */
    snprintf(path, sizeof(path), "%s/badtab.json", dir);
    kf_test_write_file(path, text);
    cr_assert_eq(sim_target_load("badtab", dir, &t, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "chunk_efficiency") != NULL, "%s", e.msg);
    unlink(path);

    snprintf(path, sizeof(path), "%s/unk.json", dir);
    kf_test_write_file(path, "{\"tensor\": {\"clock_gz\": {\"value\": 1, \"source\": \"S7\"}}}");
    cr_assert_eq(sim_target_load("unk", dir, &t, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "tensor.clock_gz") != NULL, "%s", e.msg);
    unlink(path);
    snprintf(path, sizeof(path), "%s/good.json", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/nosrc.json", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- single-instruction cost rules ----------------------------------------- */

typedef struct fixture {
    sim_record r;
    uint32_t a, b, ps, ps2, v1, v2, v3, hbm, out;
    uint32_t loc;
} fixture;

static void fx_init(fixture *f, const char *tgt, sim_dtype dt)
{
    sim_record_init(&f->r, tgt);
    f->loc = sim_record_loc(&f->r, "k.py", 1, "k");
    f->a = syn_tile(&f->r, SIM_MEM_SBUF, "a", dt, 128, 128, 0);
    f->b = syn_tile(&f->r, SIM_MEM_SBUF, "b", dt, 128, 512, 4096);
    f->ps = syn_tile(&f->r, SIM_MEM_PSUM, "ps", SIM_DT_FLOAT32, 128, 512, 0);
    f->ps2 = syn_tile(&f->r, SIM_MEM_PSUM, "ps2", SIM_DT_FLOAT32, 128, 512, 2048);
    f->v1 = syn_tile(&f->r, SIM_MEM_SBUF, "v1", dt, 128, 512, 8192);
    f->v2 = syn_tile(&f->r, SIM_MEM_SBUF, "v2", dt, 128, 512, 16384);
    f->v3 = syn_tile(&f->r, SIM_MEM_SBUF, "v3", dt, 128, 512, 24576);
    f->hbm = syn_hbm(&f->r, "x", dt, 4096, 4096, 1, 0);
    f->out = syn_hbm(&f->r, "y", dt, 4096, 4096, 0, 1);
}

Test(sim_timing_cost, matmul_issue_is_max_n_64_with_loadstationary_hidden_when_streaming)
{
    sim_target t = load("trn1");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_BFLOAT16);
    sim_region st = syn_tile_all(&f.r, f.a), mv = syn_tile_all(&f.r, f.b);
    syn_matmul(&f.r, syn_tile_all(&f.r, f.ps), st, mv, 0, f.loc);                 /* 0: LS exposed */
    syn_matmul(&f.r, syn_tile_all(&f.r, f.ps), st, mv, 1, f.loc);                 /* 1: same stationary */
    syn_matmul(&f.r, syn_tile_all(&f.r, f.ps), syn_tile_region(&f.r, f.b, 0, 128, 0, 128, 1), mv, 1, f.loc); /* 2: new LS hidden */
    syn_matmul(&f.r, syn_tile_all(&f.r, f.ps2), st, syn_tile_region(&f.r, f.b, 0, 128, 0, 32, 1), 0, f.loc); /* 3: N=32 */
    timing(&f.r, &t, &tm);
    NEAR(dur_ns(&tm, 0), cyc_ns(512 + 32, 2.8), 0.01);
    NEAR(dur_ns(&tm, 1), cyc_ns(512, 2.8), 0.01);
    NEAR(dur_ns(&tm, 2), cyc_ns(512, 2.8), 0.01);
    NEAR(dur_ns(&tm, 3), cyc_ns(64, 2.8), 0.01);
    cr_assert_eq(tm.t[1].start_ps, tm.t[0].end_ps);   /* accumulation streams back to back */
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

Test(sim_timing_cost, fp32_matmul_is_four_times_slower)
{
    sim_target t = load("trn1");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_FLOAT32);
    syn_matmul(&f.r, syn_tile_all(&f.r, f.ps), syn_tile_all(&f.r, f.a), syn_tile_all(&f.r, f.b), 0, f.loc);
    syn_matmul(&f.r, syn_tile_all(&f.r, f.ps), syn_tile_all(&f.r, f.a), syn_tile_all(&f.r, f.b), 1, f.loc);
    timing(&f.r, &t, &tm);
    NEAR(dur_ns(&tm, 1), cyc_ns(4 * 512, 2.8), 0.01);
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

Test(sim_timing_cost, tensor_engine_warms_up_on_trn2_but_not_trn1)
{
    sim_target t1 = load("trn1"), t2 = load("trn2");
    fixture f;
    sim_timing a, b;
    fx_init(&f, "trn2", SIM_DT_BFLOAT16);
    for (int i = 0; i < 64; i++)
        syn_matmul(&f.r, syn_tile_all(&f.r, f.ps), syn_tile_all(&f.r, f.a), syn_tile_all(&f.r, f.b), i > 0, f.loc);
    timing(&f.r, &t2, &a);
    timing(&f.r, &t1, &b);
    /* trn2: the first matmul runs at half rate, later ones ramp to full rate */
    NEAR(dur_ns(&a, 0), 2 * cyc_ns(512 + 32, 2.4), 0.01);
    cr_assert(dur_ns(&a, 1) < dur_ns(&a, 0) && dur_ns(&a, 1) > cyc_ns(512, 2.4) * 1.5);
    NEAR(dur_ns(&a, 63), cyc_ns(512, 2.4), 0.01);
    NEAR(dur_ns(&b, 1), cyc_ns(512, 2.8), 0.01);
    sim_timing_release(&a);
    sim_timing_release(&b);
    sim_record_release(&f.r);
}

Test(sim_timing_cost, vector_scalar_stream_costs_follow_inputs_dtype_and_stride)
{
    sim_target t1 = load("trn1"), t2 = load("trn2");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_FLOAT32);
    sim_region v1 = syn_tile_all(&f.r, f.v1), v2 = syn_tile_all(&f.r, f.v2);
    /* all independent, different engines/outputs so none waits */
    syn_op(&f.r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&f.r, f.v3), v1, &v2, f.loc);        /* 0 */
    syn_op(&f.r, SIM_OP_ACTIVATION, -1, syn_tile_region(&f.r, f.b, 0, 128, 0, 512, 1), v1, NULL, f.loc); /* 1 */
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, syn_tile_region(&f.r, f.v3, 0, 128, 0, 256, 1),
           syn_tile_region(&f.r, f.v1, 0, 128, 0, 256, 2), NULL, f.loc);                      /* 2: stride 8 B */
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, syn_tile_region(&f.r, f.v3, 0, 128, 0, 64, 1),
           syn_tile_region(&f.r, f.v1, 0, 128, 0, 64, 8), NULL, f.loc);                       /* 3: stride 32 B */
    syn_op(&f.r, SIM_OP_RECIPROCAL, -1, syn_tile_all(&f.r, f.v3), v1, NULL, f.loc);           /* 4: on VectorE */
    syn_op(&f.r, SIM_OP_RECIPROCAL, SIM_ENG_SCALAR, syn_tile_all(&f.r, f.b), v2, NULL, f.loc); /* 5: on ScalarE */
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, syn_tile_region(&f.r, f.v3, 0, 128, 0, 1, 1),
           syn_tile_region(&f.r, f.v1, 0, 128, 0, 1, 1), NULL, f.loc);                        /* 6: tiny */
    timing(&f.r, &t1, &tm);
    NEAR(dur_ns(&tm, 0), cyc_ns(2 * 512 + 3 * 60, 1.12), 0.01);
    NEAR(dur_ns(&tm, 1), cyc_ns(512 + 2 * 60, 1.4), 0.01);
    NEAR(dur_ns(&tm, 2), cyc_ns(256 + 2 * 60, 1.12), 0.01);          /* 8 B stride: no penalty */
    NEAR(dur_ns(&tm, 3), cyc_ns(2 * 64 + 2 * 60, 1.12), 0.01);       /* 32 B > 16 B: halved */
    NEAR(dur_ns(&tm, 4), cyc_ns(8 * 512 + 2 * 60, 1.12), 0.01);      /* reciprocal 8N on VectorE */
    NEAR(dur_ns(&tm, 5), cyc_ns(512 + 2 * 60, 1.4), 0.01);
    NEAR(dur_ns(&tm, 6), cyc_ns(1 + 2 * 60, 1.12), 0.01);            /* access bubbles dominate */
    sim_timing_release(&tm);
    sim_record_release(&f.r);

    /* an activation costs the same with or without a bias column (S7) */
    fx_init(&f, "trn1", SIM_DT_FLOAT32);
    uint32_t col = syn_tile(&f.r, SIM_MEM_SBUF, "bias", SIM_DT_FLOAT32, 128, 1, 40960);
    sim_region bias = syn_tile_all(&f.r, col);
    syn_op(&f.r, SIM_OP_ACTIVATION, -1, syn_tile_all(&f.r, f.v2), syn_tile_all(&f.r, f.v1), NULL,
           f.loc);
    syn_op(&f.r, SIM_OP_ACTIVATION, -1, syn_tile_all(&f.r, f.v3), syn_tile_all(&f.r, f.v1), &bias,
           f.loc);
    timing(&f.r, &t1, &tm);
    NEAR(dur_ns(&tm, 0), cyc_ns(512 + 2 * 60, 1.4), 0.01);
    NEAR(dur_ns(&tm, 1), dur_ns(&tm, 0), 0.001);
    sim_timing_release(&tm);
    sim_record_release(&f.r);

    /* trn2 VectorE perf mode: 16-bit contiguous SBUF copy at 512 elements/cycle */
    fx_init(&f, "trn2", SIM_DT_BFLOAT16);
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&f.r, f.v3), syn_tile_all(&f.r, f.v1), NULL, f.loc);
    v1 = syn_tile_all(&f.r, f.v1);
    v2 = syn_tile_all(&f.r, f.v2);
    syn_op(&f.r, SIM_OP_TENSOR_TENSOR, -1, syn_tile_all(&f.r, f.b), v1, &v2, f.loc);
    timing(&f.r, &t2, &tm);
    NEAR(dur_ns(&tm, 0), cyc_ns(512 / 4.0 + 2 * 60, 0.96), 0.01);
    NEAR(dur_ns(&tm, 1), cyc_ns(2 * 512 / 2.0 + 3 * 60, 0.96), 0.01);
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

Test(sim_timing_cost, dma_fixed_cost_plus_bytes_at_size_efficiency)
{
    sim_target t = load("trn1");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_BFLOAT16);
    uint32_t big = syn_tile(&f.r, SIM_MEM_SBUF, "big", SIM_DT_BFLOAT16, 128, 2048, 32768);
    /* 128 rows x 4 KiB: saturating chunks, spread over all 16 engines */
    syn_dma(&f.r, syn_tile_all(&f.r, big), syn_hbm_region(&f.r, f.hbm, 4096, 0, 128, 0, 2048), f.loc);
    timing(&f.r, &t, &tm);
    double share = 128.0 * 4096 / 16;
    NEAR(dur_ns(&tm, 0), 1300 + share / 17.0, 0.01);
    sim_timing_release(&tm);
    sim_record_release(&f.r);

    /* 128 rows x 256 B: efficiency 0.4 */
    fx_init(&f, "trn1", SIM_DT_BFLOAT16);
    syn_dma(&f.r, syn_tile_all(&f.r, f.a), syn_hbm_region(&f.r, f.hbm, 4096, 0, 128, 0, 128), f.loc);
    timing(&f.r, &t, &tm);
    NEAR(dur_ns(&tm, 0), 1300 + (128.0 * 256 / 16) / (17.0 * 0.4), 0.01);
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

Test(sim_timing_cost, dma_engines_are_shared_between_queues)
{
    sim_target t = load("trn1");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_BFLOAT16);
    uint32_t x = syn_tile(&f.r, SIM_MEM_SBUF, "x", SIM_DT_BFLOAT16, 128, 2048, 32768);
    uint32_t y = syn_tile(&f.r, SIM_MEM_SBUF, "y", SIM_DT_BFLOAT16, 128, 2048, 65536);
    syn_dma(&f.r, syn_tile_all(&f.r, x), syn_hbm_region(&f.r, f.hbm, 4096, 0, 128, 0, 2048), f.loc);
    syn_dma(&f.r, syn_tile_all(&f.r, y), syn_hbm_region(&f.r, f.hbm, 4096, 128, 128, 0, 2048), f.loc);
    timing(&f.r, &t, &tm);
    cr_assert_neq(tm.t[0].track, tm.t[1].track);       /* two queues, both start at once */
    cr_assert_eq(tm.t[0].start_ps, tm.t[1].start_ps);
    double data = 128.0 * 4096 / 16 / 17.0;
    NEAR(dur_ns(&tm, 1), 1300 + 2 * data, 0.01);         /* but the bytes share the engines */
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

/* A TENSOR_COPY on VectorE from src1, then `op2` from src2 on another engine:
 * on trn1 (NeuronCore v2) the second waits for the shared port, on trn2 both
 * start at once. */
static void check_port_shared_on_v2_only(sim_opcode op2, bool psum)
{
    sim_target t1 = load("trn1"), t2 = load("trn2");
    fixture f;
    sim_timing a, b;
    fx_init(&f, "trn1", SIM_DT_FLOAT32);
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&f.r, f.v2), syn_tile_all(&f.r, psum ? f.ps : f.v1),
           NULL, f.loc);
    syn_op(&f.r, op2, -1, syn_tile_all(&f.r, f.v3), syn_tile_all(&f.r, psum ? f.ps2 : f.b), NULL, f.loc);
    timing(&f.r, &t1, &a);
    timing(&f.r, &t2, &b);
    cr_assert_eq(a.t[1].start_ps, a.t[0].end_ps);      /* trn1: waits for the port */
    cr_assert_eq(a.t[1].wait, SIM_WAIT_PORT);
    cr_assert_eq(b.t[1].start_ps, 0);                   /* trn2: both at once */
    sim_timing_release(&a);
    sim_timing_release(&b);
    sim_record_release(&f.r);
}

Test(sim_timing_cost, vector_and_gpsimd_share_sbuf_on_nc_v2_only)
{
    check_port_shared_on_v2_only(SIM_OP_IOTA, false);   /* GpSimd waits for the SBUF port */
}

Test(sim_timing_cost, vector_and_scalar_share_psum_on_nc_v2_only)
{
    check_port_shared_on_v2_only(SIM_OP_ACTIVATION, true); /* ScalarE waits for PSUM */
}

Test(sim_timing_cost, dma_casts_move_fp32_and_transposes_are_slower)
{
    sim_target t = load("trn2");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn2", SIM_DT_BFLOAT16);
    uint32_t big = syn_tile(&f.r, SIM_MEM_SBUF, "big", SIM_DT_BFLOAT16, 128, 2048, 32768);
    uint32_t b2 = syn_tile(&f.r, SIM_MEM_SBUF, "b2", SIM_DT_BFLOAT16, 128, 2048, 65536);
    uint32_t b3 = syn_tile(&f.r, SIM_MEM_SBUF, "b3", SIM_DT_BFLOAT16, 128, 2048, 98304);
    syn_dma(&f.r, syn_tile_all(&f.r, big), syn_hbm_region(&f.r, f.hbm, 4096, 0, 128, 0, 2048), f.loc);
    sim_insn *c = syn_dma(&f.r, syn_tile_all(&f.r, b2), syn_hbm_region(&f.r, f.hbm, 4096, 128, 128, 0, 2048), f.loc);
    c->flags |= SIM_F_CAST;
    c->src[0].dtype = SIM_DT_FLOAT32;   /* fp32 in HBM -> bf16 tile: 4 bytes per element move */
    c->src[0].bytes *= 2;
    sim_insn *tr = syn_dma(&f.r, syn_tile_all(&f.r, b3), syn_hbm_region(&f.r, f.hbm, 4096, 256, 128, 0, 2048), f.loc);
    tr->opcode = SIM_OP_DMA_TRANSPOSE;
    timing(&f.r, &t, &tm);
    double bw = 362.0 / 16;                              /* HBM-capped per engine */
    double data = 128.0 * 4096 / 16 / bw;
    NEAR(dur_ns(&tm, 0), 1300 + data, 0.01);
    cr_assert(dur_ns(&tm, 1) >= 1300 + 2 * data - 0.01);  /* twice the bytes (and shares engines) */
    cr_assert(dur_ns(&tm, 2) >= 1300 + data / 0.9 - 0.01);
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

/* ---- dependencies ------------------------------------------------------------ */

Test(sim_timing_deps, raw_war_waw_and_dependent_latency)
{
    sim_target t = load("trn1");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_BFLOAT16);
    sim_region v1 = syn_tile_all(&f.r, f.v1), v2 = syn_tile_all(&f.r, f.v2), v3 = syn_tile_all(&f.r, f.v3);
    syn_dma(&f.r, v1, syn_hbm_region(&f.r, f.hbm, 4096, 0, 128, 0, 512), f.loc);      /* 0 */
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, v2, v1, NULL, f.loc);                        /* 1 RAW on 0 */
    syn_op(&f.r, SIM_OP_ACTIVATION, -1, v3, v2, NULL, f.loc);                         /* 2 RAW on 1 (other engine) */
    syn_dma(&f.r, v2, syn_hbm_region(&f.r, f.hbm, 4096, 128, 128, 0, 512), f.loc);   /* 3 WAR on 2's read */
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, syn_tile_region(&f.r, f.v1, 0, 64, 0, 512, 1),
           syn_tile_region(&f.r, f.v3, 64, 64, 0, 512, 1), NULL, f.loc);              /* 4 RAW on 2 (partitions 64..127) */
    timing(&f.r, &t, &tm);
    cr_assert_eq(tm.t[1].start_ps, tm.t[0].end_ps);
    cr_assert_eq(tm.t[1].wait, SIM_WAIT_RAW);
    cr_assert_eq(tm.t[1].wait_on, 0);
    NEAR(sim_ps_to_ns(tm.t[2].start_ps - tm.t[1].end_ps), cyc_ns(100, 1.12), 0.01);
    cr_assert_eq(tm.t[3].start_ps, tm.t[2].end_ps);
    cr_assert_eq(tm.t[3].wait, SIM_WAIT_WAR);
    cr_assert_eq(tm.t[3].wait_on, 2);
    cr_assert_eq(tm.t[4].wait_on, 2);
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

Test(sim_timing_deps, disjoint_partitions_and_bytes_do_not_wait)
{
    sim_target t = load("trn1");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_BFLOAT16);
    syn_dma(&f.r, syn_tile_region(&f.r, f.v1, 0, 64, 0, 512, 1),
            syn_hbm_region(&f.r, f.hbm, 4096, 0, 64, 0, 512), f.loc);                     /* 0 */
    syn_op(&f.r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&f.r, f.v2),
           syn_tile_region(&f.r, f.v1, 64, 64, 0, 512, 1), NULL, f.loc);                   /* 1: other partitions */
    syn_op(&f.r, SIM_OP_ACTIVATION, -1, syn_tile_all(&f.r, f.v3),
           syn_tile_region(&f.r, f.v1, 0, 64, 0, 1, 1), NULL, f.loc);                      /* 2: overlaps 0 */
    timing(&f.r, &t, &tm);
    cr_assert_eq(tm.t[1].start_ps, 0);
    cr_assert_eq(tm.t[2].start_ps, tm.t[0].end_ps);
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

Test(sim_timing_deps, hbm_stores_to_one_tensor_are_not_serialised)
{
    sim_target t = load("trn1");
    fixture f;
    sim_timing tm;
    fx_init(&f, "trn1", SIM_DT_BFLOAT16);
    syn_dma(&f.r, syn_hbm_region(&f.r, f.out, 4096, 0, 128, 0, 512), syn_tile_all(&f.r, f.v1), f.loc);
    syn_dma(&f.r, syn_hbm_region(&f.r, f.out, 4096, 0, 128, 512, 512), syn_tile_all(&f.r, f.v2), f.loc);
    timing(&f.r, &t, &tm);
    cr_assert_eq(tm.t[0].start_ps, 0);
    cr_assert_eq(tm.t[1].start_ps, 0);
    sim_timing_release(&tm);
    sim_record_release(&f.r);
}

Test(sim_timing_deps, a_tile_reusing_freed_memory_waits_for_its_last_user)
{
    sim_target t = load("trn1");
    sim_record r;
    sim_timing tm;
    cr_assert_eq(t.alloc_rotate, 2);
    sim_record_init(&r, "trn1");
    uint32_t loc = sim_record_loc(&r, "k.py", 3, "k");
    uint32_t x = syn_hbm(&r, "x", SIM_DT_BFLOAT16, 1024, 512, 1, 0);
    uint32_t o = syn_tile(&r, SIM_MEM_SBUF, "o", SIM_DT_BFLOAT16, 128, 512, 8192);
    uint32_t tiles[3];
    /* three loop tiles freed and allocated again at offset 0: with two
     * rotating buffers the third waits for the first one's reader */
    for (int i = 0; i < 3; i++) {
        tiles[i] = syn_tile(&r, SIM_MEM_SBUF, "a", SIM_DT_BFLOAT16, 128, 512, 0);
        syn_dma(&r, syn_tile_all(&r, tiles[i]), syn_hbm_region(&r, x, 512, 128ull * i, 128, 0, 512), loc);
        syn_op(&r, SIM_OP_RECIPROCAL, -1, syn_tile_all(&r, o), syn_tile_all(&r, tiles[i]), NULL, loc);
        sim_record_free(&r, tiles[i]);
    }
    /* a tile of another size over the same memory waits for the last user */
    uint32_t big = syn_tile(&r, SIM_MEM_SBUF, "b", SIM_DT_BFLOAT16, 128, 1024, 0);
    syn_dma(&r, syn_tile_all(&r, big), syn_hbm_region(&r, x, 512, 384, 128, 0, 512), loc);
    timing(&r, &t, &tm);
    cr_assert_eq(tm.t[2].start_ps, 0);                  /* second tile: the other buffer */
    cr_assert_eq(tm.t[4].start_ps, tm.t[1].end_ps);     /* third: waits for the first's reader */
    cr_assert_eq(tm.t[4].wait, SIM_WAIT_REUSE);
    cr_assert_eq(tm.t[4].wait_on, 1);
    cr_assert_eq(tm.t[6].start_ps, tm.t[5].end_ps);
    cr_assert_eq(tm.t[6].wait, SIM_WAIT_REUSE);
    sim_timing_release(&tm);

    /* the same record with the big tile placed elsewhere does not wait */
    r.allocs[big].sbuf_offset = 16384;
    timing(&r, &t, &tm);
    cr_assert_eq(tm.t[6].start_ps, 0);
    sim_timing_release(&tm);
    sim_record_release(&r);
}

Test(sim_timing_deps, bad_records_are_refused)
{
    sim_target t = load("trn1");
    sim_record r;
    sim_timing tm;
    kf_err e = KF_ERR_INIT;
    sim_record_init(&r, "trn1");
    uint32_t a = syn_tile(&r, SIM_MEM_SBUF, "a", SIM_DT_BFLOAT16, 128, 512, 0);
    sim_insn *in = syn_op(&r, SIM_OP_TENSOR_COPY, -1, syn_tile_all(&r, a), syn_tile_all(&r, a), NULL, 0);
    in->src[0].alloc = 99;
    cr_assert_eq(sim_timing_run(&r, &t, &tm, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "allocation 99") != NULL, "%s", e.msg);
    sim_timing_release(&tm);
    sim_record_release(&r);
}

/* ---- overlap: double buffering hides DMA, a single buffer serialises ------- */

static void pipeline_record(sim_record *r, unsigned bufs, unsigned iters)
{
    uint32_t loc_load = sim_record_loc(r, "k.py", 10, "k"), loc_mm = sim_record_loc(r, "k.py", 11, "k");
    uint32_t x = syn_hbm(r, "x", SIM_DT_BFLOAT16, 128ull * iters, 2048, 1, 0);
    uint32_t st = syn_tile(r, SIM_MEM_SBUF, "w", SIM_DT_BFLOAT16, 128, 128, 0);
    uint32_t buf[4] = { 0, 0, 0, 0 }, ps[2] = { 0, 0 };
    for (unsigned b = 0; b < bufs; b++)
        buf[b] = syn_tile(r, SIM_MEM_SBUF, "xt", SIM_DT_BFLOAT16, 128, 2048, 256 + b * 4096);
    for (unsigned b = 0; b < 2; b++)
        ps[b] = syn_tile(r, SIM_MEM_PSUM, "ps", SIM_DT_FLOAT32, 128, 512, (uint64_t)b * 2048);
    for (unsigned i = 0; i < iters; i++) {
        uint32_t t = buf[i % bufs];
        syn_dma(r, syn_tile_all(r, t), syn_hbm_region(r, x, 2048, 128ull * i, 128, 0, 2048), loc_load);
        for (unsigned k = 0; k < 32; k++)
            syn_matmul(r, syn_tile_all(r, ps[k % 2]), syn_tile_all(r, st),
                       syn_tile_region(r, t, 0, 128, (uint64_t)(k % 4) * 512, 512, 1), 0, loc_mm);
    }
}

Test(sim_timing_overlap, double_buffering_hides_dma_and_a_single_buffer_serialises)
{
    sim_target t = load("trn1");
    sim_record r1, r2;
    sim_timing a, b;
    const unsigned iters = 64;
    sim_record_init(&r1, "trn1");
    sim_record_init(&r2, "trn1");
    pipeline_record(&r1, 1, iters);
    pipeline_record(&r2, 2, iters);
    timing(&r1, &t, &a);
    timing(&r2, &t, &b);
    double mm = 32 * cyc_ns(512, 2.8);                        /* compute per iteration */
    double dma = 1300 + 128.0 * 4096 / 16 / 17.0;             /* one load alone */
    cr_assert(dma < mm, "the test needs loads shorter than compute");
    double single = sim_ps_to_ns(a.total_ps), dbl = sim_ps_to_ns(b.total_ps);
    /* single buffer: every load waits for the previous iteration's matmuls */
    cr_assert(single >= iters * (mm + dma) * 0.95, "single %f", single);
    /* double buffer: loads hide under compute; only the first is exposed */
    cr_assert(dbl <= iters * mm + 2 * dma, "double %f vs %f", dbl, iters * mm + dma);
    cr_assert(sim_ps_to_ns(b.track_busy_ps[SIM_ENG_TENSOR]) / dbl > 0.9);
    sim_timing_release(&a);
    sim_timing_release(&b);
    sim_record_release(&r1);
    sim_record_release(&r2);
}

Test(sim_timing_overlap, same_record_same_times)
{
    sim_target t = load("trn2");
    sim_record r;
    sim_timing a, b;
    syn_mm p = { SYN_MM_BLOCKED, 1024, 1024, 1024, 128, 512, 4, 2, 3, SIM_DT_BFLOAT16 };
    sim_record_init(&r, "trn2");
    syn_matmul_kernel(&r, &p, "mm.py");
    timing(&r, &t, &a);
    timing(&r, &t, &b);
    cr_assert_eq(a.total_ps, b.total_ps);
    cr_assert_eq(memcmp(a.t, b.t, a.n * sizeof(sim_timed)), 0);
    sim_timing_release(&a);
    sim_timing_release(&b);
    sim_record_release(&r);
}

/* ---- calibration against neuron-hardware.md §5 -------------------------------
 * Synthetic records with the loop and DMA structure of each published matmul
 * step (bench/sim_timing_synth.h documents the structures; 3 rotating SBUF
 * buffers per loaded operand).  Each lands within 25% of the published time,
 * and the steps keep the published order. */

static double calib_ms(const char *tgt, syn_mm p)
{
    sim_target t = load(tgt);
    sim_record r;
    sim_timing tm;
    sim_record_init(&r, tgt);
    syn_matmul_kernel(&r, &p, "matmul.py");
    timing(&r, &t, &tm);
    double ms = sim_ps_to_ns(tm.total_ps) / 1e6;
    sim_timing_release(&tm);
    sim_record_release(&r);
    return ms;
}

/* Each of the n steps within 25% of its published time, and each faster than
 * the one before. */
static void check_steps(const char *tgt, const syn_mm *s, const double *pub, int n)
{
    double got[8];
    cr_assert(n <= 8);
    for (int i = 0; i < n; i++) {
        got[i] = calib_ms(tgt, s[i]);
        cr_assert(fabs(got[i] / pub[i] - 1) <= 0.25, "step %d: %.3f ms vs published %.3f ms", i,
                  got[i], pub[i]);
    }
    for (int i = 1; i < n; i++)
        cr_assert(got[i - 1] > got[i], "step %d (%.3f ms) is not faster than step %d (%.3f ms)", i,
                  got[i], i - 1, got[i - 1]);
}

Test(sim_timing_calibration, trn2_matmul_4096_cubed_steps)
{
    const double pub[3] = { 8.602, 2.451, 1.801 };
    const syn_mm s[3] = {
        { SYN_MM_TILED, 4096, 4096, 4096, 128, 512, 1, 1, 3, SIM_DT_BFLOAT16 },
        { SYN_MM_BLOCKED, 4096, 4096, 4096, 128, 512, 4, 2, 3, SIM_DT_BFLOAT16 },
        { SYN_MM_RESIDENT, 4096, 4096, 4096, 128, 512, 16, 2, 3, SIM_DT_BFLOAT16 },
    };
    check_steps("trn2", s, pub, 3);
}

Test(sim_timing_calibration, trn1_matmul_4096x8192x8192_steps)
{
    const double pub[4] = { 51.80, 42.96, 22.07, 6.97 };
    const syn_mm s[4] = {
        { SYN_MM_TILED, 4096, 8192, 8192, 128, 512, 1, 1, 3, SIM_DT_BFLOAT16 },
        { SYN_MM_HOIST, 4096, 8192, 8192, 128, 512, 1, 1, 3, SIM_DT_BFLOAT16 },
        { SYN_MM_BLOCKED, 4096, 8192, 8192, 128, 512, 2, 2, 3, SIM_DT_BFLOAT16 },
        { SYN_MM_RESIDENT, 4096, 8192, 8192, 128, 512, 16, 2, 3, SIM_DT_BFLOAT16 },
    };
    check_steps("trn1", s, pub, 4);
}
