/* ka_eval — sandboxed candidate evaluations (see ka_eval.h). */
#include "ka_eval.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "sim_check.h"
#include "sim_core.h"
#include "sim_input.h"
#include "sim_npy.h"
#include "sim_profile.h"
#include "sim_run.h"
#include "sim_sandbox.h"
#include "sim_target.h"
#include "sim_trace.h"

enum { KA_EVAL_TOP_LINES = 6 };

static double ka_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One simulator run of the request's kernel: its options (numerics on or
 * off), an empty record and a cleared error. */
static void ka_run_start(const ka_eval_req *r, bool numerics, sim_run_opts *o, sim_record *rec, sim_error *serr)
{
    memset(o, 0, sizeof(*o));
    o->source_path = r->pb->source_path;
    o->entry = r->pb->entry;
    o->target = r->pb->target;
    o->numerics = numerics;
    o->kwargs_json = r->kwargs_json;
    sim_record_init(rec, r->pb->target);
    sim_error_clear(serr);
}

const char *ka_eval_short_loc(const char *loc)
{
    const char *s = loc ? strrchr(loc, '/') : NULL;
    return s ? s + 1 : (loc ? loc : "");
}

static void ka_free_arrays(sim_array *a, size_t n)
{
    if (!a)
        return;
    for (size_t i = 0; i < n; i++)
        sim_array_release(&a[i]);
    free(a);
}

/* A problem input as an array header (no data yet), for sim_array_check. */
static void ka_input_array(const ka_input *in, sim_array *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->name, sizeof(a->name), "%s", in->name);
    a->dtype = in->dtype;
    a->ndim = in->ndim;
    for (int d = 0; d < in->ndim && d < KA_MAX_DIMS; d++)
        a->shape[d] = in->shape[d];
}

/* Inputs: zero-filled (timing: values are never read) or seeded random. */
static kf_code ka_make_inputs(const ka_problem *pb, bool random, uint64_t seed, sim_array **out, kf_err *err)
{
    sim_array *a = kf_calloc((size_t)pb->n_inputs, sizeof(*a));
    for (int i = 0; i < pb->n_inputs; i++) {
        const ka_input *in = &pb->inputs[i];
        int64_t n = 0;
        kf_code rc;
        ka_input_array(in, &a[i]);
        /* checked before anything is allocated: a product that wrapped
         * would leave a small buffer under a huge shape */
        rc = sim_array_check(&a[i], SIM_ARRAY_MAX_BYTES, &n, err);
        if (rc) {
            ka_free_arrays(a, (size_t)pb->n_inputs);
            return rc;
        }
        if (random) {
            sim_random_spec rs;
            sim_npy_array npy;
            uint64_t shp[KA_MAX_DIMS];
            sim_random_spec_default(&rs);
            rs.seed = seed * 1000003ULL + (uint64_t)i * 7919ULL;
            rs.std = in->std > 0 ? in->std : 1.0;
            for (int d = 0; d < in->ndim; d++)
                shp[d] = (uint64_t)in->shape[d];
            memset(&npy, 0, sizeof(npy));
            rc = sim_input_random(in->dtype, in->ndim, shp, &rs, SIM_ARRAY_MAX_BYTES, &npy, err);
            if (rc) {
                ka_free_arrays(a, (size_t)pb->n_inputs);
                return rc;
            }
            a[i].data = npy.data;
        } else {
            a[i].data = kf_calloc((size_t)n, sim_dtype_size(in->dtype));
        }
    }
    *out = a;
    return KF_OK;
}

kf_code ka_eval_inputs(const ka_problem *pb, uint64_t seed, sim_array **out, kf_err *err)
{
    return ka_make_inputs(pb, true, seed, out, err);
}

/* A seed's inputs stored by the caller (ka_eval_req.in_in), checked
 * against the problem's inputs and named as ka_make_inputs names them. */
static kf_code ka_inputs_read(const ka_problem *pb, const char *path, sim_array **out, kf_err *err)
{
    sim_array *a = NULL;
    size_t n = 0;
    kf_code rc = ka_ref_read(path, &a, &n, err);

    *out = NULL;
    if (rc)
        return rc;
    for (size_t i = 0; i < n && i < (size_t)pb->n_inputs; i++) {
        sim_array want;
        ka_input_array(&pb->inputs[i], &want);
        if (a[i].dtype != want.dtype || a[i].ndim != want.ndim ||
            memcmp(a[i].shape, want.shape, sizeof(want.shape[0]) * (size_t)want.ndim) != 0) {
            ka_free_arrays(a, n);
            return kf_err_set(err, KF_INVALID, "the stored inputs %s do not match input %s of the problem", path,
                              want.name);
        }
        memcpy(a[i].name, want.name, sizeof(a[i].name));
    }
    if (n != (size_t)pb->n_inputs) {
        ka_free_arrays(a, n);
        return kf_err_set(err, KF_INVALID, "the stored inputs %s hold %zu arrays, the problem has %d inputs", path, n,
                          pb->n_inputs);
    }
    *out = a;
    return KF_OK;
}

static void ka_add_error(cJSON *j, const sim_error *serr, kf_code rc, const kf_err *err)
{
    char line[1024];
    cJSON *e = cJSON_AddObjectToObject(j, "error");
    if (serr->code != SIM_E_NONE) {
        sim_error_format(serr, line, sizeof(line));
        cJSON_AddStringToObject(e, "code", sim_error_name(serr->code));
        cJSON_AddStringToObject(e, "file", ka_eval_short_loc(serr->file));
        cJSON_AddNumberToObject(e, "line", serr->line);
        cJSON_AddStringToObject(e, "api", serr->api);
    } else {
        snprintf(line, sizeof(line), "%s", err->msg[0] ? err->msg : kf_code_title(rc));
        cJSON_AddStringToObject(e, "code", "INTERNAL");
    }
    cJSON_AddStringToObject(e, "message", line);
}

static const char *const ka_summary_keys[] = {
    "total_time", "mfu_estimated_percent", "mbu_estimated_percent", "tensor_engine_active_time_percent",
    "vector_engine_active_time_percent", "scalar_engine_active_time_percent",
    "gpsimd_engine_active_time_percent", "dma_active_time_percent", "dma_transfer_count",
    "dma_transfer_average_bytes", "hbm_read_bytes", "hbm_write_bytes", "model_flops", NULL,
};

const char *const *ka_eval_summary_keys(void)
{
    return ka_summary_keys;
}

static void ka_add_profile(cJSON *j, const sim_profile *p, const ka_problem *pb, const sim_target *tgt)
{
    const sim_bounds *b = &p->bounds;
    /* The floor is the op's: its own FLOPs when the template declares them. */
    double compute_ns = pb->op_flops_set ? pb->op_flops / sim_target_te_peak_flops(tgt) * 1e9 : b->compute_ns;
    double floor_ns = compute_ns > b->io_ns ? compute_ns : b->io_ns;
    char *sj = sim_profile_summary_json(p);
    cJSON *full = sj ? cJSON_Parse(sj) : NULL, *sum = cJSON_AddObjectToObject(j, "summary");
    cJSON *bo = cJSON_AddObjectToObject(j, "bounds"), *fa = cJSON_AddArrayToObject(j, "findings");
    cJSON *la = cJSON_AddArrayToObject(j, "lines");
    char loc[512];

    free(sj);
    for (int i = 0; ka_summary_keys[i]; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(full, ka_summary_keys[i]);
        if (v)
            cJSON_AddItemToObject(sum, ka_summary_keys[i], cJSON_Duplicate(v, true));
    }
    cJSON_Delete(full);
    cJSON_AddNumberToObject(j, "latency_ns", p->total_ns);
    cJSON_AddNumberToObject(j, "floor_ns", floor_ns);
    cJSON_AddStringToObject(j, "bound_kind", compute_ns > b->io_ns ? "compute" : "io");
    cJSON_AddNumberToObject(bo, "compute_ns", b->compute_ns);
    cJSON_AddNumberToObject(bo, "op_compute_ns", compute_ns);
    cJSON_AddNumberToObject(bo, "memory_ns", b->memory_ns);
    cJSON_AddNumberToObject(bo, "necessary_io_ns", b->io_ns);
    cJSON_AddNumberToObject(bo, "pipeline_ns", b->pipeline_ns);
    cJSON_AddStringToObject(bo, "pipeline_engine", b->pipeline_engine ? b->pipeline_engine : "");
    cJSON_AddStringToObject(bo, "tightest", b->tightest ? b->tightest : "");
    cJSON_AddNumberToObject(bo, "tightest_ns", b->tightest_ns);
    cJSON_AddNumberToObject(bo, "achieved_fraction", b->achieved_fraction);
    cJSON_AddNumberToObject(bo, "floor_ns", floor_ns);
    cJSON_AddNumberToObject(bo, "fraction_of_floor", p->total_ns > 0 ? floor_ns / p->total_ns : 0);
    for (size_t i = 0; i < p->n_findings; i++) {
        const sim_finding *f = &p->findings[i];
        cJSON *o = cJSON_CreateObject(), *ls = cJSON_AddArrayToObject(o, "lines");
        cJSON_AddStringToObject(o, "kind", sim_finding_name(f->kind));
        cJSON_AddStringToObject(o, "title", sim_finding_title(f->kind));
        cJSON_AddNumberToObject(o, "cost_ns", f->cost_ns);
        cJSON_AddStringToObject(o, "message", f->message);
        for (unsigned k = 0; k < f->n_locs; k++) {
            cJSON *lo = cJSON_CreateObject();
            cJSON_AddStringToObject(lo, "loc", ka_eval_short_loc(sim_profile_loc(p, f->locs[k], loc, sizeof(loc))));
            cJSON_AddNumberToObject(lo, "ns", f->loc_ns[k]);
            cJSON_AddItemToArray(ls, lo);
        }
        cJSON_AddItemToArray(fa, o);
    }
    for (size_t i = 0; i < p->n_lines && i < KA_EVAL_TOP_LINES; i++) {
        const sim_line *l = &p->lines[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "loc", ka_eval_short_loc(sim_profile_loc(p, l->loc, loc, sizeof(loc))));
        cJSON_AddNumberToObject(o, "instructions", (double)l->count);
        cJSON_AddNumberToObject(o, "time_ns", l->time_ns);
        cJSON_AddNumberToObject(o, "stall_ns", l->stall_ns);
        cJSON_AddItemToArray(la, o);
    }
}

/* The documents of `kforge-sim profile --out DIR`, as strings under
 * "documents" (ka_eval.h). */
static kf_code ka_add_documents(cJSON *j, const sim_profile *p, kf_err *err)
{
    char *prof = sim_profile_json(p), *trace = NULL, *insns = NULL;
    size_t trace_len = 0, insns_len = 0;
    FILE *tf = open_memstream(&trace, &trace_len), *inf = open_memstream(&insns, &insns_len);
    kf_code rc = KF_OK;
    cJSON *d;

    if (!prof || !tf || !inf) {
        rc = kf_err_set(err, KF_NOMEM, "cannot build the profile documents");
    } else {
        rc = sim_trace_write(p, tf, err);
        if (rc == KF_OK)
            rc = sim_profile_write_instructions(p, inf, err);
    }
    if (tf)
        fclose(tf);
    if (inf)
        fclose(inf);
    if (rc == KF_OK) {
        d = cJSON_AddObjectToObject(j, "documents");
        cJSON_AddStringToObject(d, "profile.json", prof);
        cJSON_AddStringToObject(d, "instructions.json", insns);
        cJSON_AddStringToObject(d, "trace.json", trace);
    }
    free(prof);
    free(trace);
    free(insns);
    return rc;
}

static kf_code ka_child_timing(const ka_eval_req *r, cJSON *j, kf_err *err)
{
    const ka_problem *pb = r->pb;
    sim_run_opts o;
    sim_record rec;
    sim_error serr;
    sim_target tgt;
    sim_array *in = NULL, *outs = NULL;
    size_t n_outs = 0;
    sim_profile *p = NULL;
    double t0 = ka_now();
    kf_code rc;

    ka_run_start(r, false, &o, &rec, &serr);
    rc = sim_target_load(pb->target, NULL, &tgt, err);
    if (rc)
        goto out;
    rc = ka_make_inputs(pb, false, 0, &in, err);
    if (rc)
        goto out;
    rc = sim_run_kernel(&o, in, (size_t)pb->n_inputs, &outs, &n_outs, &rec, &serr, err);
    if (rc) {
        ka_add_error(j, &serr, rc, err);
        cJSON_AddBoolToObject(j, "ok", false);
        rc = KF_OK;
        goto out;
    }
    rc = sim_profile_build(&rec, &tgt, &p, err);
    if (rc)
        goto out;
    cJSON_AddBoolToObject(j, "ok", true);
    cJSON_AddNumberToObject(j, "n_outputs", (double)n_outs);
    ka_add_profile(j, p, pb, &tgt);
    if (r->documents)
        rc = ka_add_documents(j, p, err);
out:
    cJSON_AddNumberToObject(j, "sim_seconds", ka_now() - t0);
    sim_profile_free(p);
    ka_free_arrays(outs, n_outs);
    ka_free_arrays(in, (size_t)pb->n_inputs);
    sim_record_release(&rec);
    return rc;
}

/* One seed's comparisons, appended to checks; false when one fails. */
static bool ka_compare_seed(const ka_eval_req *r, uint64_t seed, const sim_array *outs, size_t n_outs,
                            const sim_array *refs, size_t n_refs, cJSON *checks)
{
    bool pass = true;

    if (n_refs != n_outs) {
        cJSON *c = cJSON_CreateObject();
        char msg[160];
        snprintf(msg, sizeof(msg), "the kernel returned %zu outputs, the reference %zu", n_outs, n_refs);
        cJSON_AddNumberToObject(c, "seed", (double)seed);
        cJSON_AddBoolToObject(c, "pass", false);
        cJSON_AddStringToObject(c, "message", msg);
        cJSON_AddItemToArray(checks, c);
        return false;
    }
    for (size_t k = 0; k < n_outs; k++) {
        sim_check_tol tol = sim_check_default_tol(outs[k].dtype);
        sim_check_cmp cmp;
        cJSON *c = cJSON_CreateObject();
        if (r->rtol >= 0)
            tol.rtol = r->rtol;
        if (r->atol >= 0)
            tol.atol = r->atol;
        sim_check_compare(&outs[k], &refs[k], tol, &cmp);
        cJSON_AddNumberToObject(c, "seed", (double)seed);
        cJSON_AddNumberToObject(c, "output", (double)k);
        cJSON_AddBoolToObject(c, "pass", cmp.pass);
        cJSON_AddNumberToObject(c, "elements", (double)cmp.count);
        cJSON_AddNumberToObject(c, "bad", (double)cmp.bad);
        cJSON_AddNumberToObject(c, "nan", (double)cmp.got_nan);
        cJSON_AddNumberToObject(c, "inf", (double)cmp.got_inf);
        cJSON_AddNumberToObject(c, "max_abs_err", cmp.max_abs);
        cJSON_AddNumberToObject(c, "rtol", tol.rtol);
        cJSON_AddNumberToObject(c, "atol", tol.atol);
        cJSON_AddStringToObject(c, "message", cmp.msg);
        cJSON_AddItemToArray(checks, c);
        pass = pass && cmp.pass;
    }
    return pass;
}

/* Seeds in order; the first seed that fails ends the validation (the
 * verdict is already "wrong"; the later seeds would only cost time).  Per
 * seed the kernel runs first and its inputs are freed before the reference
 * outputs are read from ref_in (or computed, when there is none), so the
 * child holds one input set or one reference at a time besides the
 * outputs. */
static kf_code ka_child_validate(const ka_eval_req *r, sim_sandbox_out *out, cJSON *j, kf_err *err)
{
    const ka_problem *pb = r->pb;
    cJSON *checks = cJSON_AddArrayToObject(j, "checks");
    bool pass = true, ran = true;
    double sim_s = 0, ref_s = 0;
    int stored = 0, read = 0, computed = 0, in_read = 0;
    kf_code rc = KF_OK;

    for (int s = 0; s < r->n_seeds && ran && pass; s++) {
        sim_run_opts o;
        sim_record rec;
        sim_error serr;
        sim_array *in = NULL, *outs = NULL, *refs = NULL;
        size_t n_outs = 0, n_refs = 0;
        kf_err rerr = KF_ERR_INIT;
        bool have_refs = false;
        double t0;

        ka_run_start(r, true, &o, &rec, &serr);
        rc = r->in_in[s] ? ka_inputs_read(pb, r->in_in[s], &in, err) : ka_make_inputs(pb, true, r->seeds[s], &in, err);
        in_read += r->in_in[s] && rc == KF_OK;
        if (rc) {
            sim_record_release(&rec);
            break;
        }
        t0 = ka_now();
        if (r->out_in[s]) {
            kf_err oerr = KF_ERR_INIT;
            /* the outputs of a run elsewhere on these same inputs */
            if (ka_ref_read(r->out_in[s], &outs, &n_outs, &oerr) != KF_OK) {
                sim_record_release(&rec);
                ka_free_arrays(in, (size_t)pb->n_inputs);
                rc = kf_err_set(err, KF_IO, "%s", oerr.msg);
                break;
            }
        } else {
            rc = sim_run_kernel(&o, in, (size_t)pb->n_inputs, &outs, &n_outs, &rec, &serr, err);
        }
        sim_s += ka_now() - t0;
        sim_record_release(&rec);
        if (rc) {
            ka_add_error(j, &serr, rc, err);
            ran = false;
            pass = false;
            rc = KF_OK;
        } else if (r->ref_in[s]) {
            ka_free_arrays(in, (size_t)pb->n_inputs);
            in = NULL;
            t0 = ka_now();
            if (ka_ref_read(r->ref_in[s], &refs, &n_refs, &rerr) != KF_OK) {
                cJSON_AddStringToObject(j, "ref_error", rerr.msg);
                pass = false;
                ran = false;
            } else {
                have_refs = true;
                read++;
            }
            ref_s += ka_now() - t0;
        } else {
            t0 = ka_now();
            computed++;
            if (sim_check_reference(pb->ref_path, pb->ref_entry, in, (size_t)pb->n_inputs, r->kwargs_json, &refs,
                                    &n_refs, &rerr) != KF_OK) {
                cJSON_AddStringToObject(j, "ref_error", rerr.msg);
                pass = false;
                ran = false;
            } else {
                have_refs = true;
            }
            ref_s += ka_now() - t0;
            ka_free_arrays(in, (size_t)pb->n_inputs);
            in = NULL;
            /* sent back for the next candidates, when the reference does
             * not see the tunables (its result is then theirs too) */
            if (have_refs && r->ref_out[s] &&
                !sim_check_reference_takes(pb->ref_path, pb->ref_entry, r->tunables_json)) {
                bool sent = true;
                for (size_t k = 0; k < n_refs && sent; k++) {
                    snprintf(refs[k].name, sizeof(refs[k].name), "ref%d_%zu", s, k);
                    sent = sim_sandbox_send_array(out, &refs[k], &rerr) == KF_OK;
                }
                stored += sent ? 1 : 0;
            }
        }
        if (have_refs)
            pass = ka_compare_seed(r, r->seeds[s], outs, n_outs, refs, n_refs, checks) && pass;
        sim_check_arrays_free(refs, n_refs);
        ka_free_arrays(outs, n_outs);
        ka_free_arrays(in, (size_t)pb->n_inputs);
    }
    cJSON_AddBoolToObject(j, "ok", ran && rc == KF_OK);
    cJSON_AddBoolToObject(j, "pass", pass && ran && rc == KF_OK);
    cJSON_AddNumberToObject(j, "sim_seconds", sim_s);
    cJSON_AddNumberToObject(j, "ref_seconds", ref_s);
    cJSON_AddNumberToObject(j, "ref_sent", stored);
    cJSON_AddNumberToObject(j, "ref_read", read);
    cJSON_AddNumberToObject(j, "inputs_read", in_read);
    cJSON_AddNumberToObject(j, "ref_computed", computed);
    return rc;
}

/* One output's figures: shape, dtype, element count, NaN/Inf counts and
 * min/max/mean over the finite elements (what a run shows without a
 * reference: a kernel that leaves elements unwritten shows NaN there). */
static cJSON *ka_output_stats(const sim_array *a)
{
    cJSON *o = cJSON_CreateObject(), *sh = cJSON_AddArrayToObject(o, "shape");
    uint64_t n = 1, nan = 0, inf = 0, fin = 0;
    double mn = 0, mx = 0, sum = 0;

    for (int d = 0; d < a->ndim; d++) {
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)a->shape[d]));
        n *= (uint64_t)a->shape[d];
    }
    for (uint64_t i0 = 0; i0 < n; i0 += 2048) {
        /* float dtypes in blocks through the bulk codec (exact in float) */
        float blk[2048];
        uint64_t m = n - i0 < 2048 ? n - i0 : 2048;
        bool bulk = sim_npy_dtype_is_float(a->dtype);
        if (bulk)
            sim_npy_load_f32(a->dtype, a->data, i0, blk, m);
        for (uint64_t k = 0; k < m; k++) {
            double v = bulk ? blk[k] : sim_npy_load_elem(a->dtype, a->data, i0 + k);
            if (isnan(v)) {
                nan++;
            } else if (isinf(v)) {
                inf++;
            } else {
                mn = fin == 0 || v < mn ? v : mn;
                mx = fin == 0 || v > mx ? v : mx;
                sum += v;
                fin++;
            }
        }
    }
    cJSON_AddStringToObject(o, "dtype", sim_dtype_name(a->dtype));
    cJSON_AddNumberToObject(o, "elements", (double)n);
    cJSON_AddNumberToObject(o, "nan", (double)nan);
    cJSON_AddNumberToObject(o, "inf", (double)inf);
    if (fin) {
        cJSON_AddNumberToObject(o, "min", mn);
        cJSON_AddNumberToObject(o, "max", mx);
        cJSON_AddNumberToObject(o, "mean", sum / (double)fin);
    }
    return o;
}

/* KA_EVAL_RUN: the kernel once with numerics on, on seeded random inputs. */
static kf_code ka_child_run(const ka_eval_req *r, cJSON *j, kf_err *err)
{
    const ka_problem *pb = r->pb;
    sim_run_opts o;
    sim_record rec;
    sim_error serr;
    sim_array *in = NULL, *outs = NULL;
    size_t n_outs = 0;
    double t0 = ka_now();
    kf_code rc;

    ka_run_start(r, true, &o, &rec, &serr);
    rc = ka_make_inputs(pb, true, r->n_seeds > 0 ? r->seeds[0] : 1, &in, err);
    if (rc)
        goto out;
    rc = sim_run_kernel(&o, in, (size_t)pb->n_inputs, &outs, &n_outs, &rec, &serr, err);
    if (rc) {
        ka_add_error(j, &serr, rc, err);
        cJSON_AddBoolToObject(j, "ok", false);
        rc = KF_OK;
        goto out;
    }
    cJSON_AddBoolToObject(j, "ok", true);
    cJSON_AddNumberToObject(j, "n_outputs", (double)n_outs);
    {
        cJSON *arr = cJSON_AddArrayToObject(j, "outputs");
        for (size_t k = 0; k < n_outs; k++)
            cJSON_AddItemToArray(arr, ka_output_stats(&outs[k]));
    }
out:
    cJSON_AddNumberToObject(j, "sim_seconds", ka_now() - t0);
    ka_free_arrays(outs, n_outs);
    ka_free_arrays(in, (size_t)pb->n_inputs);
    sim_record_release(&rec);
    return rc;
}

static kf_code ka_child(void *arg, sim_sandbox_out *out, kf_err *err)
{
    const ka_eval_req *r = arg;
    cJSON *j = cJSON_CreateObject();
    kf_code rc = r->mode == KA_EVAL_TIMING ? ka_child_timing(r, j, err)
                 : r->mode == KA_EVAL_RUN  ? ka_child_run(r, j, err)
                                           : ka_child_validate(r, out, j, err);
    char *text = cJSON_PrintUnformatted(j);
    sim_sandbox_send_json(out, text);
    free(text);
    cJSON_Delete(j);
    return rc;
}

/* ---- the reference store ------------------------------------------------ */

static const char ka_ref_magic[8] = { 'K', 'F', 'R', 'E', 'F', '1', '\n', 0 };

typedef struct ka_ref_head {
    uint32_t dtype, ndim;
    int64_t  shape[8];
    uint64_t bytes;
} ka_ref_head;

kf_code ka_ref_write(const char *path, const sim_array *a, size_t n, kf_err *err)
{
    char *tmp = kf_asprintf("%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    uint64_t cnt = n;
    bool ok = f != NULL;

    ok = ok && fwrite(ka_ref_magic, sizeof(ka_ref_magic), 1, f) == 1 && fwrite(&cnt, sizeof(cnt), 1, f) == 1;
    for (size_t i = 0; ok && i < n; i++) {
        ka_ref_head h;
        int64_t elems = 0;
        memset(&h, 0, sizeof(h));
        ok = sim_array_check(&a[i], SIM_ARRAY_MAX_BYTES, &elems, NULL) == KF_OK;
        h.dtype = (uint32_t)a[i].dtype;
        h.ndim = (uint32_t)a[i].ndim;
        memcpy(h.shape, a[i].shape, sizeof(h.shape));
        h.bytes = (uint64_t)elems * sim_dtype_size(a[i].dtype);
        ok = ok && fwrite(&h, sizeof(h), 1, f) == 1 && (h.bytes == 0 || fwrite(a[i].data, h.bytes, 1, f) == 1);
    }
    if (f && fclose(f) != 0)
        ok = false;
    if (ok && rename(tmp, path) != 0)
        ok = false;
    if (!ok)
        unlink(tmp);
    free(tmp);
    return ok ? KF_OK : kf_err_set(err, KF_IO, "cannot write the reference outputs to %s", path);
}

kf_code ka_ref_read(const char *path, sim_array **out, size_t *n_out, kf_err *err)
{
    FILE *f = fopen(path, "rb");
    char magic[8];
    uint64_t cnt = 0;
    sim_array *a = NULL;
    bool ok = f != NULL;

    *out = NULL;
    *n_out = 0;
    ok = ok && fread(magic, sizeof(magic), 1, f) == 1 && memcmp(magic, ka_ref_magic, sizeof(magic)) == 0 &&
         fread(&cnt, sizeof(cnt), 1, f) == 1 && cnt <= 4096;
    if (ok)
        a = kf_calloc((size_t)cnt + 1, sizeof(*a));
    for (uint64_t i = 0; ok && i < cnt; i++) {
        ka_ref_head h;
        int64_t elems = 0;
        ok = fread(&h, sizeof(h), 1, f) == 1 && h.ndim <= 8;
        if (!ok)
            break;
        snprintf(a[i].name, sizeof(a[i].name), "ref%d", (int)i);
        a[i].dtype = (sim_dtype)h.dtype;
        a[i].ndim = (int)h.ndim;
        memcpy(a[i].shape, h.shape, sizeof(h.shape));
        ok = sim_array_check(&a[i], SIM_ARRAY_MAX_BYTES, &elems, NULL) == KF_OK &&
             h.bytes == (uint64_t)elems * sim_dtype_size(a[i].dtype);
        if (!ok)
            break;
        /* huge pages where the kernel gives them: a reference is read per
         * candidate and seed, and 4 KiB faults on it were a tenth of a tune */
        a[i].data = simc_big_alloc((size_t)h.bytes + 1);
        ok = h.bytes == 0 || fread(a[i].data, h.bytes, 1, f) == 1;
    }
    if (f)
        fclose(f);
    if (!ok) {
        sim_check_arrays_free(a, (size_t)cnt);
        return kf_err_set(err, KF_IO, "cannot read the stored reference outputs %s", path);
    }
    *out = a;
    *n_out = (size_t)cnt;
    return KF_OK;
}

/* Parent side: the reference outputs a validation child sent back
 * ("ref<seed>_<k>", in order), one file per seed (req->ref_out); the
 * seeds stored go to the result's "ref_stored". */
static void ka_store_refs(const ka_eval_req *req, const sim_sandbox_result *sb, cJSON *j)
{
    cJSON *st = cJSON_AddArrayToObject(j, "ref_stored");
    size_t i = 0;

    while (i < sb->n_arrays) {
        int s = -1;
        size_t k = 0, first = i;
        if (sscanf(sb->arrays[i].name, "ref%d_%zu", &s, &k) != 2 || s < 0 || s >= req->n_seeds || k != 0 ||
            !req->ref_out[s])
            return;
        for (i++; i < sb->n_arrays; i++) {
            int s2 = -1;
            size_t k2 = 0;
            if (sscanf(sb->arrays[i].name, "ref%d_%zu", &s2, &k2) != 2 || s2 != s)
                break;
            if (k2 != i - first)
                return;
        }
        if (ka_ref_write(req->ref_out[s], &sb->arrays[first], i - first, NULL) == KF_OK)
            cJSON_AddItemToArray(st, cJSON_CreateNumber(s));
    }
}

/* path (a buffer of len bytes) replaced by its real path; false when that
 * does not fit. */
static bool ka_real_path(char *path, size_t len)
{
    char *r = sim_sandbox_real_path(path);
    bool fits = strlen(r) < len;
    if (fits)
        memcpy(path, r, strlen(r) + 1);
    free(r);
    return fits;
}

kf_code ka_eval_run(const ka_eval_req *req, cJSON **result, kf_err *err)
{
    sim_sandbox_limits lim;
    sim_sandbox_result sb;
    cJSON *j = NULL;
    kf_code rc;

    *result = NULL;
    memset(&lim, 0, sizeof(lim));
    memset(&sb, 0, sizeof(sb));
    lim.cpu_seconds = req->timeout_s ? req->timeout_s : (unsigned)kf_config_int(KF_CFG_SIM_TIMEOUT_S);
    lim.wall_ms = lim.cpu_seconds * 1000u;
    lim.memory_mib = req->memory_mib ? req->memory_mib : (unsigned)kf_config_int(KF_CFG_SIM_MEMORY_MIB);
    lim.max_result_bytes = 64u << 20;
    /* reference outputs sent back: one seed's exist in the child at once,
     * so they are bounded by its memory limit */
    for (int i = 0; req->mode == KA_EVAL_VALIDATE && i < req->n_seeds; i++)
        if (req->ref_out[i])
            lim.max_result_bytes += (size_t)lim.memory_mib << 20;
    /* all the evaluation may read of the machine: the kernel and its reference */
    const char *files[3 + 3 * KA_MAX_SEEDS] = { req->pb->source_path, req->pb->ref_path[0] ? req->pb->ref_path : NULL };
    size_t nf = files[1] ? 2 : 1;
    for (int i = 0; req->mode == KA_EVAL_VALIDATE && i < req->n_seeds && i < KA_MAX_SEEDS; i++) {
        if (req->ref_in[i])
            files[nf++] = req->ref_in[i];
        if (req->out_in[i])
            files[nf++] = req->out_in[i];
        if (req->in_in[i])
            files[nf++] = req->in_in[i];
    }
    files[nf] = NULL;
    lim.ro_paths = files;
    if (req->mode == KA_EVAL_VALIDATE && !req->pb->ref_path[0])
        return kf_err_set(err, KF_INVALID, "validation needs a NumPy reference");
    /* Inputs too large for the simulator are the caller's error, refused
     * here rather than as a failed evaluation. */
    for (int i = 0; i < req->pb->n_inputs; i++) {
        sim_array a;
        ka_input_array(&req->pb->inputs[i], &a);
        rc = sim_array_check(&a, SIM_ARRAY_MAX_BYTES, NULL, err);
        if (rc)
            return rc;
    }
    /* The child opens the kernel and the reference where the sandbox mounts
     * them: at their real paths (sim_sandbox_real_path). */
    ka_problem real_pb = *req->pb;
    ka_eval_req real_req = *req;
    if (!ka_real_path(real_pb.source_path, sizeof(real_pb.source_path)) ||
        (real_pb.ref_path[0] && !ka_real_path(real_pb.ref_path, sizeof(real_pb.ref_path))))
        return kf_err_set(err, KF_INVALID, "the kernel or reference path is longer than %d bytes once resolved",
                          PATH_MAX - 1);
    real_req.pb = &real_pb;
    rc = sim_sandbox_run(&lim, ka_child, &real_req, &sb, err);
    if (rc)
        return rc;
    if (sb.json)
        j = cJSON_Parse(sb.json);
    if (!j || (sb.status != SIM_SB_OK && !cJSON_GetObjectItemCaseSensitive(j, "error"))) {
        cJSON *e;
        cJSON_Delete(j);
        j = cJSON_CreateObject();
        cJSON_AddBoolToObject(j, "ok", false);
        cJSON_AddBoolToObject(j, "pass", false);
        e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "code", sim_sandbox_status_name(sb.status));
        cJSON_AddStringToObject(e, "message", sb.reason[0] ? sb.reason : "the evaluation sent no result");
    }
    if (req->mode == KA_EVAL_VALIDATE && sb.status == SIM_SB_OK && sb.n_arrays > 0)
        ka_store_refs(req, &sb, j);
    cJSON_AddNumberToObject(j, "wall_seconds", sb.wall_seconds);
    cJSON_AddNumberToObject(j, "max_rss_kib", (double)sb.max_rss_kib);
    cJSON_AddStringToObject(j, "isolation", sb.isolation);
    sim_sandbox_result_release(&sb);
    *result = j;
    return KF_OK;
}

/* ---- several evaluations side by side ------------------------------------- */

typedef struct ka_helper {
    pid_t  pid;
    int    fd;
    kf_buf buf;
} ka_helper;

static bool ka_eval_failed(const ka_eval_req *r, const cJSON *res)
{
    const char *k = r->mode == KA_EVAL_VALIDATE ? "pass" : "ok";
    return !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, k));
}

/* The helper process: one ka_eval_run, its result (or its error) as JSON
 * text on fd, then _exit. */
static void ka_helper_main(const ka_eval_req *r, int fd)
{
    cJSON *res = NULL;
    kf_err e = KF_ERR_INIT;
    kf_code rc;
    char *text;
    size_t len, off = 0;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rc = ka_eval_run(r, &res, &e);
    if (rc) {
        cJSON_Delete(res);
        res = cJSON_CreateObject();
        cJSON_AddNumberToObject(res, "helper_code", (double)rc);
        cJSON_AddStringToObject(res, "helper_message", e.msg);
    }
    text = cJSON_PrintUnformatted(res);
    len = text ? strlen(text) : 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(1);
        off += (size_t)w;
    }
    _exit(0);
}

static void ka_helper_stop(ka_helper *h)
{
    if (h->pid <= 0)
        return;
    kill(h->pid, SIGKILL);
    while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (h->fd >= 0)
        close(h->fd);
    kf_buf_release(&h->buf);
    h->pid = -1;
    h->fd = -1;
}

kf_code ka_eval_run_many(const ka_eval_req *reqs, int n, int jobs, bool stop_at_fail, cJSON **results,
                         kf_err *err)
{
    ka_helper *h;
    int next = 0, running = 0, limit = n;
    kf_code rc = KF_OK;

    for (int i = 0; i < n; i++)
        results[i] = NULL;
    if (jobs > KA_MAX_SEEDS * 8)
        jobs = KA_MAX_SEEDS * 8;
    if (jobs <= 1 || n <= 1) {
        for (int i = 0; i < n; i++) {
            rc = ka_eval_run(&reqs[i], &results[i], err);
            if (rc || (stop_at_fail && ka_eval_failed(&reqs[i], results[i])))
                return rc;
        }
        return KF_OK;
    }
    h = kf_calloc((size_t)n, sizeof(*h));
    for (int i = 0; i < n; i++) {
        h[i].pid = -1;
        h[i].fd = -1;
        kf_buf_init(&h[i].buf);
    }
    for (;;) {
        struct pollfd pf[KA_MAX_SEEDS * 8];
        int who[KA_MAX_SEEDS * 8], np = 0;

        while (rc == KF_OK && running < jobs && next < limit) {
            int p[2];
            if (pipe2(p, O_CLOEXEC) != 0) {
                rc = kf_err_set(err, KF_INTERNAL, "cannot start an evaluation: pipe: %s", strerror(errno));
                break;
            }
            fflush(NULL);
            h[next].pid = fork();
            if (h[next].pid == 0) {
                close(p[0]);
                ka_helper_main(&reqs[next], p[1]);
            }
            close(p[1]);
            if (h[next].pid < 0) {
                close(p[0]);
                rc = kf_err_set(err, KF_INTERNAL, "cannot start an evaluation: fork: %s", strerror(errno));
                break;
            }
            h[next].fd = p[0];
            next++;
            running++;
        }
        if (rc || running == 0)
            break;
        for (int i = 0; i < next && np < (int)(sizeof(pf) / sizeof(pf[0])); i++) {
            if (h[i].fd < 0)
                continue;
            pf[np].fd = h[i].fd;
            pf[np].events = POLLIN;
            pf[np].revents = 0;
            who[np++] = i;
        }
        if (poll(pf, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            rc = kf_err_set(err, KF_INTERNAL, "waiting for evaluations: %s", strerror(errno));
            break;
        }
        for (int k = 0; k < np && rc == KF_OK; k++) {
            int i = who[k];
            char chunk[65536];
            ssize_t r;
            if (!pf[k].revents)
                continue;
            r = read(h[i].fd, chunk, sizeof(chunk));
            if (r < 0 && errno == EINTR)
                continue;
            if (r > 0) {
                kf_buf_add(&h[i].buf, chunk, (size_t)r);
                continue;
            }
            /* EOF: the helper is done */
            close(h[i].fd);
            h[i].fd = -1;
            while (waitpid(h[i].pid, NULL, 0) < 0 && errno == EINTR) {
            }
            h[i].pid = -1;
            running--;
            results[i] = h[i].buf.len ? cJSON_ParseWithLength(h[i].buf.data, h[i].buf.len) : NULL;
            kf_buf_release(&h[i].buf);
            if (!results[i]) {
                rc = kf_err_set(err, KF_INTERNAL, "an evaluation helper sent no result");
            } else if (cJSON_GetObjectItemCaseSensitive(results[i], "helper_code")) {
                const cJSON *m = cJSON_GetObjectItemCaseSensitive(results[i], "helper_message");
                rc = kf_err_set(err, (kf_code)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(results[i],
                                                                                                  "helper_code")),
                                "%s", cJSON_IsString(m) ? m->valuestring : "evaluation failed");
            } else if (stop_at_fail && i < limit && ka_eval_failed(&reqs[i], results[i])) {
                /* what a serial run would never have started */
                limit = i + 1;
                for (int j = i + 1; j < next; j++)
                    if (h[j].pid > 0) {
                        ka_helper_stop(&h[j]);
                        running--;
                    }
            }
        }
        if (rc)
            break;
    }
    for (int i = 0; i < n; i++) {
        if (h[i].pid > 0)
            ka_helper_stop(&h[i]);
        kf_buf_release(&h[i].buf);
        if (i >= limit) {
            cJSON_Delete(results[i]);
            results[i] = NULL;
        }
    }
    free(h);
    return rc;
}
