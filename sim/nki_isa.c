/* nki_isa — nki.isa (nisa.*): the instruction-level calls, in the current
 * dst-first form and, on the legacy neuronxcc.nki.isa module (or when no
 * dst= is given there), the legacy form that returns a new tile (see
 * nki_internal.h).  Each call checks its operands (buffers, shapes, limits,
 * dtypes), computes in FP32 with numerics on, and appends one instruction. */
#include "nki_internal.h"
#include "nki_mmq.h"

#include <math.h>
#include <string.h>

#define FAILI(...) (nki_fail(__VA_ARGS__), -1)

static bool has_kw(PyObject *kwnames, const char *name)
{
    Py_ssize_t n = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
        if (k && strcmp(k, name) == 0)
            return true;
    }
    return false;
}

/* The legacy (tile-returning) form is used on the legacy module unless the
 * call passes dst=. */
static bool legacy_form(PyObject *m, PyObject *kwnames)
{
    return nki_module_is_legacy(m) && !has_kw(kwnames, "dst");
}

static int want_onchip(const char *api, const char *what, nki_tensor *t)
{
    if (t->v.st->mem == SIM_MEM_HBM)
        return FAILI(SIM_E_WRONG_BUFFER, api, "%s must be in SBUF or PSUM, it is in HBM", what);
    return 0;
}

/* Same partitions and the same elements per partition (free dims may flatten). */
static int same_layout(const char *api, nki_tensor *a, const char *wa, nki_tensor *b, const char *wb)
{
    int64_t pa = nki_view_parts(a), pb = nki_view_parts(b);
    int64_t ea = simc_view_elems(&a->v), eb = simc_view_elems(&b->v);
    if (pa != pb || ea != eb)
        return FAILI(SIM_E_SHAPE_MISMATCH, api,
                     "%s has %lld partitions x %lld elements, %s has %lld x %lld", wa,
                     (long long)pa, (long long)(pa ? ea / pa : 0), wb, (long long)pb,
                     (long long)(pb ? eb / pb : 0));
    return 0;
}

/* A per-partition operand (one element per partition, or a scalar tile)
 * viewed over `like`'s shape. */
static bool pcol_view(const nki_tensor *o, const nki_tensor *like, simc_view *out)
{
    int64_t P = nki_view_parts(o);
    int lp = like->pdim < 0 ? 0 : like->pdim;
    if (simc_view_elems(&o->v) != P)
        return false;
    if (P != 1 && P != nki_view_parts(like))
        return false;
    *out = like->v;
    out->st = o->v.st;
    out->dtype = o->v.dtype;
    out->offset = o->v.offset;
    for (int d = 0; d < out->ndim; d++)
        out->strides[d] = 0;
    if (P > 1)
        out->strides[lp] = o->v.strides[o->pdim < 0 ? 0 : o->pdim];
    return true;
}

/* A scalar-or-per-partition operand's per-partition view over `like`
 * (*pv), or the shape error; 0 or -1. */
static int pcol_check(const char *api, const char *what, const nki_opnd *o, const nki_tensor *like, simc_view *pv)
{
    if (!pcol_view(o->t, like, pv))
        return FAILI(SIM_E_SHAPE_MISMATCH, api,
                     "%s must be a scalar or one value per partition (%lld, 1), it has %lld elements",
                     what, (long long)nki_view_parts(like), (long long)simc_view_elems(&o->t->v));
    return 0;
}

/* Read a scalar-or-per-partition operand over `like` into slot. */
static int read_pcol(const char *api, const char *what, const nki_opnd *o, const nki_tensor *like,
                     int slot, float **vals, simc_view *used)
{
    simc_view pv;
    if (!o->t) {
        *vals = nki_read_opnd(o, like->v.ndim, like->v.shape, slot);
        return 0;
    }
    if (pcol_check(api, what, o, like, &pv))
        return -1;
    *vals = nki_read(&pv, slot);
    if (used)
        *used = o->t->v;
    return 0;
}

/* read_pcol with int64 values (the integer ALU path). */
static int read_pcol_i64(const char *api, const char *what, const nki_opnd *o,
                         const nki_tensor *like, int slot, int64_t **vals, simc_view *used)
{
    simc_view pv;
    if (!o->t) {
        *vals = nki_read_opnd_i64(o, like->v.ndim, like->v.shape, slot);
        return 0;
    }
    if (pcol_check(api, what, o, like, &pv))
        return -1;
    *vals = nki_read_i64(&pv, slot);
    if (used)
        *used = o->t->v;
    return 0;
}

static nki_tensor *legacy_tile(sim_mem mem, sim_dtype dt, const nki_tensor *like, const char *api)
{
    return nki_new_tile(mem, dt, like->v.ndim, like->v.shape, api);
}

/* What an nisa call returns after its core ran with result rc: NULL on error,
 * else the new tile `out` (legacy form) or None (dst= form, out NULL). */
static PyObject *finish(nki_tensor *out, bool legacy, int rc)
{
    if (rc < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    if (legacy)
        return (PyObject *)out;
    Py_XDECREF(out);
    return Py_NewRef(Py_None);
}

static int mask_for(PyObject *mask_obj, nki_tensor *dst, const char *api, uint8_t **mask)
{
    return nki_mask_dense(mask_obj, dst->v.ndim, dst->v.shape, api, mask);
}

/* ===== data movement ===== */

/* oob_mode= of an indirect DMA: error (default, None, 0, "error") or skip
 * (1, "skip"); -1 with the error raised for anything else. */
static int oob_skip(const char *api, PyObject *o)
{
    if (!o || o == Py_None)
        return 0;
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v == 0 || v == 1)
            return (int)v;
        PyErr_Clear();
    } else if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        if (s && (strcmp(s, "error") == 0 || strcmp(s, "skip") == 0))
            return s[0] == 's';
        PyErr_Clear();
    }
    return FAILI(SIM_E_BAD_ARGUMENT, api, "oob_mode must be oob_mode.error or oob_mode.skip");
}

/* nisa.dma_copy with an indirect access on one side (gather: src, scatter:
 * dst) and an SBUF tile on the other. */
static PyObject *indirect_copy(const char *api, PyObject **a)
{
    bool scatter = a[0] && nki_indirect_check(a[0]);
    PyObject *other = scatter ? a[1] : a[0];
    nki_indirect *ia = (nki_indirect *)(scatter ? a[0] : a[1]);
    nki_tensor *tile;
    uint8_t *mask = NULL;
    int skip;

    if (other && nki_indirect_check(other))
        return nki_fail(SIM_E_UNSUPPORTED_API, api, "indirect accesses on both sides of one DMA");
    if (!(tile = nki_as_tensor(other, api, scatter ? "src" : "dst")))
        return NULL;
    if ((skip = oob_skip(api, a[4])) < 0 ||
        nki_mask_dense(a[2], ia->base->v.ndim, ia->base->v.shape, api, &mask) < 0)
        return NULL;
    if (nki_indirect_move(api, ia, tile, scatter, skip == 1, mask) < 0)
        return NULL;
    return Py_NewRef(Py_None);
}

static PyObject *isa_dma_copy(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    static const char *const names[] = { "dst", "src", "mask", "*dst_rmw_op", "oob_mode",
                                         "*dge_mode", "*engine", "*priority", "*name", "*queue" };
    PyObject *a[NKI_NARGS(names)];
    const char *api = "nisa.dma_copy";
    nki_tensor *dst, *src;
    uint8_t *mask = NULL;
    sim_insn *in;
    (void)m;

    if (nki_parse(api, args, nargs, kwnames, names, NKI_NARGS(names), a) < 0)
        return NULL;
    if ((a[0] && nki_indirect_check(a[0])) || (a[1] && nki_indirect_check(a[1])))
        return indirect_copy(api, a);
    dst = nki_as_tensor(a[0], api, "dst");
    src = dst ? nki_as_tensor(a[1], api, "src") : NULL;
    if (!src)
        return NULL;
    if (!nki_module_is_legacy(m) && src->v.st->mem == SIM_MEM_PSUM)
        return nki_fail(SIM_E_WRONG_BUFFER, api, "a DMA cannot read PSUM (copy it to SBUF first)");
    if (dst->v.st->mem == SIM_MEM_PSUM)
        return nki_fail(SIM_E_WRONG_BUFFER, api, "a DMA cannot write PSUM");
    if (simc_view_elems(&dst->v) != simc_view_elems(&src->v))
        return nki_fail(SIM_E_SHAPE_MISMATCH, api, "dst has %lld elements, src %lld",
                        (long long)simc_view_elems(&dst->v), (long long)simc_view_elems(&src->v));
    if (simc_view_elems(&dst->v) > NKI_MAX_OP_ELEMS)
        return nki_fail(SIM_E_LIMIT, api, "one DMA of %lld elements, at most %lld (split it)",
                        (long long)simc_view_elems(&dst->v), (long long)NKI_MAX_OP_ELEMS);
    if (mask_for(a[2], dst, api, &mask) < 0 || nki_check_bounds(dst, mask, api) < 0 ||
        nki_check_bounds(src, NULL, api) < 0)
        return NULL;
    nki_copy_vals(&dst->v, &src->v, mask);
    in = nki_emit(SIM_OP_DMA_COPY, SIM_ENG_DMA, &dst->v, &src->v, NULL, NULL);
    if (a[9] && PyLong_Check(a[9])) {
        long q = PyLong_AsLong(a[9]);
        if (q >= 0 && q < 16) {
            in->queue = (uint16_t)q;
            in->flags |= SIM_F_QUEUE;
        }
        PyErr_Clear();
    }
    if (mask)
        in->flags |= SIM_F_MASKED;
    return Py_NewRef(Py_None);
}

static int copy_core(const char *api, nki_tensor *dst, nki_tensor *src, sim_engine eng,
                     const uint8_t *mask)
{
    sim_insn *in;
    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "src", src) < 0 ||
        same_layout(api, dst, "dst", src, "src") < 0)
        return -1;
    nki_copy_vals(&dst->v, &src->v, mask);
    in = nki_emit(SIM_OP_TENSOR_COPY, eng, &dst->v, &src->v, NULL, NULL);
    if (mask)
        in->flags |= SIM_F_MASKED;
    return 0;
}

static PyObject *isa_tensor_copy(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "src", "engine", "dtype", "*name" };
    static const char *const leg[] = { "src", "dtype", "engine", "mask", "*name" };
    const char *api = "nisa.tensor_copy";
    PyObject *a[5];
    nki_tensor *dst, *src;
    uint8_t *mask = NULL;

    if (legacy_form(m, kwnames)) {
        int dt;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(src = nki_as_tensor(a[0], api, "src")))
            return NULL;
        dt = nki_dtype_arg(a[1], src->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, src, api)))
            return NULL;
        if (mask_for(a[3], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, copy_core(api, dst, src, nki_engine_from(a[2], SIM_ENG_VECTOR), mask));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(src = nki_as_tensor(a[1], api, "src")))
        return NULL;
    return finish(NULL, false, copy_core(api, dst, src, nki_engine_from(a[2], SIM_ENG_VECTOR), NULL));
}

static int memset_core(const char *api, nki_tensor *dst, PyObject *value, sim_engine eng,
                       const uint8_t *mask)
{
    nki_opnd o;
    float *vals;
    if (!value || (!PyFloat_Check(value) && !PyLong_Check(value)))
        return FAILI(SIM_E_BAD_ARGUMENT, api, "value must be a number, got %s",
                     value ? Py_TYPE(value)->tp_name : "nothing");
    if (nki_opnd_from(value, api, "value", &o) < 0 || want_onchip(api, "dst", dst) < 0)
        return -1;
    vals = nki_read_opnd(&o, dst->v.ndim, dst->v.shape, 0);
    nki_write(&dst->v, vals, mask);
    {
        sim_insn *in = nki_emit(SIM_OP_MEMSET, eng, &dst->v, NULL, NULL, NULL);
        if (mask)
            in->flags |= SIM_F_MASKED;
        else
            sim_insn_set_imm(in, PyFloat_Check(value) ? PyFloat_AsDouble(value)
                                                      : PyLong_AsDouble(value));
    }
    return 0;
}

static PyObject *isa_memset(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "value", "engine", "*name" };
    static const char *const leg[] = { "shape", "value", "dtype", "engine", "mask", "*name" };
    const char *api = "nisa.memset";
    PyObject *a[6];
    nki_tensor *dst;

    if (legacy_form(m, kwnames)) {
        int64_t shape[SIMC_MAX_DIMS];
        int nd, dt;
        uint8_t *mask = NULL;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            (nd = nki_parse_shape(a[0] ? a[0] : Py_None, api, shape, NULL)) < 0)
            return NULL;
        dt = nki_dtype_arg(a[2], SIM_DT_FLOAT32, api);
        if (dt < 0 || !(dst = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, nd, shape, api)))
            return NULL;
        if (mask_for(a[4], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, memset_core(api, dst, a[1], nki_engine_from(a[3], SIM_ENG_VECTOR), mask));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")))
        return NULL;
    return finish(NULL, false, memset_core(api, dst, a[1], nki_engine_from(a[2], SIM_ENG_VECTOR), NULL));
}

/* ===== elementwise ===== */

/* Two overlapping ranges of n floats that are not the same range: an
 * elementwise op computed in place would read what it already wrote.
 * Compared as addresses: the ranges may lie in different stores, and C
 * orders pointers only within one object. */
static bool partly_overlaps(const float *x, const float *y, int64_t n)
{
    uintptr_t a = (uintptr_t)x, b = (uintptr_t)y, len = (uintptr_t)n * sizeof(float);
    return a != b && a < b + len && b < a + len;
}

/* tensor_tensor straight on the stores when all three views are dense FP32
 * (the SBUF accumulators and PSUM tiles of tiled kernels): the same
 * arithmetic as the gather/compute/scatter path without its three copies.
 * False (nothing done) when the case does not apply. */
static bool tt_in_place(simn_op op, nki_tensor *dst, nki_tensor *d1, const simc_view *v2,
                        const uint8_t *mask, int64_t n)
{
    float *pd, *p1, *p2;

    if (!nki_cur->numerics || mask || !(pd = simc_view_dense_f32(&dst->v, true)) ||
        !(p1 = simc_view_dense_f32(&d1->v, false)) || !(p2 = simc_view_dense_f32(v2, false)) ||
        partly_overlaps(pd, p1, n) || partly_overlaps(pd, p2, n))
        return false;
    simn_alu_vec(op, p1, p2, 1, pd, n);
    simc_close_dense(&d1->v);
    simc_close_dense(v2);
    simc_close_dense(&dst->v);
    return true;
}

/* The accumulating add of a tiled matmul, acc = acc + psum (either
 * order) with psum the product being queued: handed to nki_mmq as a fold. */
static bool fold_product(simn_op op, const nki_tensor *dst, const nki_tensor *d1,
                         const simc_view *v2, const uint8_t *mask)
{
    const simc_view *x = &dst->v, *p;

    if (!nki_cur->numerics || mask || op != SIMN_OP_ADD)
        return false;
    if (nki_same_view(&d1->v, x))
        p = v2;
    else if (nki_same_view(v2, x))
        p = &d1->v;
    else
        return false;
    if (p->st->mem != SIM_MEM_PSUM || !nki_mmq_fold(x, p))
        return false;
    simc_close_dense(p);
    return true;
}

static int tt_core(const char *api, nki_tensor *dst, nki_tensor *d1, nki_tensor *d2, simn_op op,
                   sim_engine eng, const uint8_t *mask)
{
    float *v1, *v2;
    int64_t n = simc_view_elems(&dst->v);
    sim_insn *in;
    simc_view b2;
    const simc_view *r2 = &d2->v;

    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data1", d1) < 0 ||
        want_onchip(api, "data2", d2) < 0 || same_layout(api, d1, "data1", dst, "dst") < 0)
        return -1;
    if (simc_view_elems(&d2->v) != n) {
        if (!nki_bcast(&d2->v, d1->v.ndim, d1->v.shape, &b2))
            return same_layout(api, d1, "data1", d2, "data2");
        r2 = &b2;
    } else if (same_layout(api, d1, "data1", d2, "data2") < 0) {
        return -1;
    }
    if (d1->v.st->mem == SIM_MEM_PSUM && d2->v.st->mem == SIM_MEM_PSUM)
        return FAILI(SIM_E_WRONG_BUFFER, api, "at most one input of tensor_tensor may be in PSUM");
    if (nki_check_bounds(d1, NULL, api) < 0 || nki_check_bounds(d2, NULL, api) < 0)
        return -1;
    if (!simc_dtype_is_float(dst->v.dtype) && !simc_dtype_is_float(d1->v.dtype) &&
        !simc_dtype_is_float(d2->v.dtype) && simn_op_has_int(op)) {
        int64_t *i1 = nki_read_i64(&d1->v, 1), *i2 = nki_read_i64(r2, 2);
        if (nki_cur->numerics)
            for (int64_t i = 0; i < n; i++)
                if (!simn_alu_i64(op, i1[i], i2[i], &i1[i]))
                    i1[i] = 0;   /* mod by zero */
        nki_write_i64(&dst->v, i1, mask);
    } else if (fold_product(op, dst, d1, r2, mask)) {
        /* queued: acc += A^T B on the numerics pool */
    } else if (!tt_in_place(op, dst, d1, r2, mask, n)) {
        v1 = nki_read(&d1->v, 1);
        v2 = nki_read(r2, 2);
        if (nki_cur->numerics)
            simn_alu_vec(op, v1, v2, 1, v1, n);
        nki_write(&dst->v, v1, mask);
    }
    in = nki_emit(SIM_OP_TENSOR_TENSOR, eng, &dst->v, &d1->v, &d2->v, NULL);
    if (mask)
        in->flags |= SIM_F_MASKED;
    return 0;
}

static PyObject *isa_tensor_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "data1", "data2", "op", "engine", "*name" };
    static const char *const leg[] = { "data1", "data2", "op", "dtype", "mask", "engine", "*name" };
    const char *api = "nisa.tensor_tensor";
    PyObject *a[7];
    nki_tensor *dst, *d1, *d2;
    simn_op op;

    if (legacy_form(m, kwnames)) {
        uint8_t *mask = NULL;
        int dt;
        nki_opnd o1, o2;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(d1 = nki_as_tensor(a[0], api, "data1")) || !(d2 = nki_as_tensor(a[1], api, "data2")))
            return NULL;
        op = nki_op_from(a[2], api, "op", false);
        if (op == SIMN_OP_NONE)
            return NULL;
        o1.t = d1;
        o2.t = d2;
        dt = nki_dtype_arg(a[3], nki_promote(&o1, &o2), api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, d1, api)))
            return NULL;
        if (mask_for(a[4], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, tt_core(api, dst, d1, d2, op, nki_engine_from(a[5], SIM_ENG_VECTOR), mask));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(d1 = nki_as_tensor(a[1], api, "data1")) ||
        !(d2 = nki_as_tensor(a[2], api, "data2")))
        return NULL;
    op = nki_op_from(a[3], api, "op", false);
    if (op == SIMN_OP_NONE)
        return NULL;
    return finish(NULL, false, tt_core(api, dst, d1, d2, op, nki_engine_from(a[4], SIM_ENG_VECTOR), NULL));
}

typedef struct ts_args {
    simn_op op0, op1;
    nki_opnd s0, s1;
    bool rev0, rev1;
} ts_args;

static int ts_parse(const char *api, PyObject *op0, PyObject *o0, PyObject *r0, PyObject *op1,
                    PyObject *o1, PyObject *r1, ts_args *t)
{
    memset(t, 0, sizeof(*t));
    t->op0 = nki_op_from(op0, api, "op0", false);
    if (t->op0 == SIMN_OP_NONE)
        return -1;
    if (!o0)
        return FAILI(SIM_E_BAD_ARGUMENT, api, "operand0 is required");
    if (nki_opnd_from(o0, api, "operand0", &t->s0) < 0)
        return -1;
    t->rev0 = r0 && PyObject_IsTrue(r0) == 1;
    t->op1 = nki_op_from(op1, api, "op1", true);
    if (t->op1 == SIMN_OP_NONE && PyErr_Occurred())
        return -1;
    if (t->op1 != SIMN_OP_NONE) {
        if (!o1)
            return FAILI(SIM_E_BAD_ARGUMENT, api, "operand1 is required with op1");
        if (nki_opnd_from(o1, api, "operand1", &t->s1) < 0)
            return -1;
    }
    t->rev1 = r1 && PyObject_IsTrue(r1) == 1;
    return 0;
}

static float apply_binop(simn_op op, float x, float s, bool rev)
{
    return rev ? simn_alu(op, s, x) : simn_alu(op, x, s);
}

/* y = (data op0 s0) op1 s1 into vals (slot 1); returns vals. */
static float *ts_compute(const char *api, nki_tensor *data, const ts_args *t, simc_view *u0,
                         simc_view *u1, int *rc)
{
    float *x, *s0 = NULL, *s1 = NULL;
    int64_t n = simc_view_elems(&data->v);
    *rc = 0;
    x = nki_read(&data->v, 1);
    if (read_pcol(api, "operand0", &t->s0, data, 2, &s0, u0) < 0 ||
        (t->op1 != SIMN_OP_NONE && read_pcol(api, "operand1", &t->s1, data, 3, &s1, u1) < 0)) {
        *rc = -1;
        return NULL;
    }
    if (!nki_cur->numerics)
        return x;
    for (int64_t i = 0; i < n; i++) {
        float y = apply_binop(t->op0, x[i], s0[i], t->rev0);
        if (t->op1 != SIMN_OP_NONE)
            y = apply_binop(t->op1, y, s1[i], t->rev1);
        x[i] = y;
    }
    return x;
}

/* tensor_scalar on integer data with integer operands and integer-capable
 * ops runs on the integer ALU (exact, bit patterns for bitwise ops). */
static bool ts_is_int(const nki_tensor *dst, const nki_tensor *data, const ts_args *t)
{
    return !simc_dtype_is_float(dst->v.dtype) && !simc_dtype_is_float(data->v.dtype) &&
           simn_op_has_int(t->op0) && nki_opnd_is_int(&t->s0) &&
           (t->op1 == SIMN_OP_NONE || (simn_op_has_int(t->op1) && nki_opnd_is_int(&t->s1)));
}

static int64_t ts_i64(simn_op op, int64_t x, int64_t s, bool rev)
{
    int64_t r;
    if (!(rev ? simn_alu_i64(op, s, x, &r) : simn_alu_i64(op, x, s, &r)))
        r = 0;   /* mod by zero */
    return r;
}

static int ts_compute_i64(const char *api, nki_tensor *dst, nki_tensor *data, const ts_args *t,
                          simc_view *u0, simc_view *u1, const uint8_t *mask)
{
    int64_t *x, *s0 = NULL, *s1 = NULL;
    int64_t n = simc_view_elems(&data->v);
    x = nki_read_i64(&data->v, 1);
    if (read_pcol_i64(api, "operand0", &t->s0, data, 2, &s0, u0) < 0 ||
        (t->op1 != SIMN_OP_NONE && read_pcol_i64(api, "operand1", &t->s1, data, 3, &s1, u1) < 0))
        return -1;
    if (nki_cur->numerics)
        for (int64_t i = 0; i < n; i++) {
            int64_t y = ts_i64(t->op0, x[i], s0[i], t->rev0);
            if (t->op1 != SIMN_OP_NONE)
                y = ts_i64(t->op1, y, s1[i], t->rev1);
            x[i] = y;
        }
    nki_write_i64(&dst->v, x, mask);
    return 0;
}

static int ts_core(const char *api, nki_tensor *dst, nki_tensor *data, const ts_args *t,
                   sim_engine eng, const uint8_t *mask)
{
    simc_view u0 = { 0 }, u1 = { 0 };
    float *y;
    int rc;
    sim_insn *in;

    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data", data) < 0 ||
        same_layout(api, data, "data", dst, "dst") < 0 || nki_check_bounds(data, NULL, api) < 0)
        return -1;
    if (ts_is_int(dst, data, t)) {
        if (ts_compute_i64(api, dst, data, t, &u0, &u1, mask) < 0)
            return -1;
    } else {
        y = ts_compute(api, data, t, &u0, &u1, &rc);
        if (rc < 0)
            return -1;
        nki_write(&dst->v, y, mask);
    }
    in = nki_emit(SIM_OP_TENSOR_SCALAR, eng, &dst->v, &data->v, u0.st ? &u0 : NULL,
                  u1.st ? &u1 : NULL);
    if (mask)
        in->flags |= SIM_F_MASKED;
    return 0;
}

static PyObject *isa_tensor_scalar(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "data", "op0", "operand0", "reverse0", "op1",
                                       "operand1", "reverse1", "engine", "dtype", "*name" };
    static const char *const leg[] = { "data", "op0", "operand0", "reverse0", "op1", "operand1",
                                       "reverse1", "dtype", "mask", "engine", "*name" };
    const char *api = "nisa.tensor_scalar";
    PyObject *a[11];
    nki_tensor *dst, *data;
    ts_args t;

    if (legacy_form(m, kwnames)) {
        uint8_t *mask = NULL;
        int dt;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(data = nki_as_tensor(a[0], api, "data")) ||
            ts_parse(api, a[1], a[2], a[3], a[4], a[5], a[6], &t) < 0)
            return NULL;
        dt = nki_dtype_arg(a[7], data->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, data, api)))
            return NULL;
        if (mask_for(a[8], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, ts_core(api, dst, data, &t, nki_engine_from(a[9], SIM_ENG_VECTOR), mask));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(data = nki_as_tensor(a[1], api, "data")) ||
        ts_parse(api, a[2], a[3], a[4], a[5], a[6], a[7], &t) < 0)
        return NULL;
    return finish(NULL, false, ts_core(api, dst, data, &t, nki_engine_from(a[8], SIM_ENG_VECTOR), NULL));
}

static int unary_core(const char *api, nki_tensor *dst, nki_tensor *data, simn_op op,
                      sim_opcode opc, sim_engine eng, const uint8_t *mask)
{
    float *x;
    sim_insn *in;
    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data", data) < 0 ||
        same_layout(api, data, "data", dst, "dst") < 0 || nki_check_bounds(data, NULL, api) < 0)
        return -1;
    x = nki_read(&data->v, 1);
    if (nki_cur->numerics)
        simn_act_vec(op, x, x, simc_view_elems(&data->v));
    nki_write(&dst->v, x, mask);
    in = nki_emit(opc, eng, &dst->v, &data->v, NULL, NULL);
    in->act_func = (uint8_t)op;
    return 0;
}

static PyObject *isa_reciprocal(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "data", "engine", "*name" };
    static const char *const leg[] = { "data", "dtype", "mask", "engine", "*name" };
    const char *api = "nisa.reciprocal";
    PyObject *a[5];
    nki_tensor *dst, *data;

    if (legacy_form(m, kwnames)) {
        uint8_t *mask = NULL;
        int dt;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(data = nki_as_tensor(a[0], api, "data")))
            return NULL;
        dt = nki_dtype_arg(a[1], data->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, data, api)))
            return NULL;
        if (mask_for(a[2], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, unary_core(api, dst, data, SIMN_OP_RECIPROCAL, SIM_OP_RECIPROCAL,
                                            nki_engine_from(a[3], SIM_ENG_VECTOR), mask));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(data = nki_as_tensor(a[1], api, "data")))
        return NULL;
    return finish(NULL, false, unary_core(api, dst, data, SIMN_OP_RECIPROCAL, SIM_OP_RECIPROCAL,
                                         nki_engine_from(a[2], SIM_ENG_VECTOR), NULL));
}

/* ===== reductions ===== */

static int reduce_core(const char *api, nki_tensor *dst, simn_op op, nki_tensor *data,
                       PyObject *axis, bool negate, PyObject *mask_obj)
{
    bool red[SIMC_MAX_DIMS];
    int64_t outn, P;
    float *vals;
    uint8_t *mask = NULL;
    sim_insn *in;

    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data", data) < 0 ||
        nki_check_bounds(data, NULL, api) < 0)
        return -1;
    if (nki_parse_axes(axis, &data->v, data->pdim < 0 ? 0 : data->pdim, red, api) < 0)
        return -1;
    outn = 1;
    for (int d = 0; d < data->v.ndim; d++)
        if (!red[d])
            outn *= data->v.shape[d];
    P = nki_view_parts(data);
    if (simc_view_elems(&dst->v) != outn || nki_view_parts(dst) != P)
        return FAILI(SIM_E_SHAPE_MISMATCH, api,
                     "the reduction leaves %lld partitions x %lld elements, dst has %lld x %lld",
                     (long long)P, (long long)(P ? outn / P : 0), (long long)nki_view_parts(dst),
                     (long long)(nki_view_parts(dst) ? simc_view_elems(&dst->v) / nki_view_parts(dst) : 0));
    vals = nki_scratch(3, outn);
    if (nki_reduce_masked(op, api, data, red, mask_obj, &dst->v, vals, &mask) < 0)
        return -1;
    if (negate && nki_cur->numerics)
        for (int64_t i = 0; i < outn; i++)
            vals[i] = -vals[i];
    nki_write(&dst->v, vals, mask);
    in = nki_emit(SIM_OP_TENSOR_REDUCE, SIM_ENG_VECTOR, &dst->v, &data->v, NULL, NULL);
    if (mask)
        in->flags |= SIM_F_MASKED;
    return 0;
}

static PyObject *isa_tensor_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "op", "data", "axis", "negate", "keepdims",
                                       "*name", "*engine" };
    static const char *const leg[] = { "op", "data", "axis", "dtype", "negate", "keepdims",
                                       "mask", "*name", "*engine" };
    const char *api = "nisa.tensor_reduce";
    PyObject *a[9];
    nki_tensor *dst, *data;
    simn_op op;

    if (legacy_form(m, kwnames)) {
        bool red[SIMC_MAX_DIMS], keep;
        int64_t shape[SIMC_MAX_DIMS];
        int nd = 0, dt;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(data = nki_as_tensor(a[1], api, "data")))
            return NULL;
        op = nki_op_from(a[0], api, "op", false);
        if (op == SIMN_OP_NONE ||
            nki_parse_axes(a[2], &data->v, data->pdim < 0 ? 0 : data->pdim, red, api) < 0)
            return NULL;
        keep = a[5] && PyObject_IsTrue(a[5]) == 1;
        for (int d = 0; d < data->v.ndim; d++) {
            if (!red[d])
                shape[nd++] = data->v.shape[d];
            else if (keep)
                shape[nd++] = 1;
        }
        dt = nki_dtype_arg(a[3], data->v.dtype, api);
        if (dt < 0 || !(dst = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, nd, shape, api)))
            return NULL;
        return finish(dst, true, reduce_core(api, dst, op, data, a[2],
                                             a[4] && PyObject_IsTrue(a[4]) == 1, a[6]));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(data = nki_as_tensor(a[2], api, "data")))
        return NULL;
    op = nki_op_from(a[1], api, "op", false);
    if (op == SIMN_OP_NONE)
        return NULL;
    return finish(NULL, false,
                  reduce_core(api, dst, op, data, a[3], a[4] && PyObject_IsTrue(a[4]) == 1, NULL));
}

/* ===== activation ===== */

enum { RC_IDLE = 0, RC_RESET = 1, RC_REDUCE = 2, RC_RESET_REDUCE = 3, RC_LOAD_REDUCE = 4 };

typedef struct act_args {
    simn_op op, reduce_op;
    nki_opnd bias, scale;
    bool has_bias;
    nki_tensor *reduce_res;
    int reduce_cmd;
} act_args;

static int act_parse(const char *api, PyObject *op, PyObject *bias, PyObject *scale,
                     PyObject *rop, PyObject *rres, PyObject *rcmd, bool force_reduce,
                     act_args *t)
{
    memset(t, 0, sizeof(*t));
    t->op = nki_op_from(op, api, "op", false);
    if (t->op == SIMN_OP_NONE)
        return -1;
    if (simn_op_kind(t->op) != 1 && t->op != SIMN_OP_NONE)
        return FAILI(SIM_E_BAD_ARGUMENT, api, "op %s is not an activation function",
                     simn_op_name(t->op));
    t->has_bias = bias && bias != Py_None;
    if (t->has_bias && nki_opnd_from(bias, api, "bias", &t->bias) < 0)
        return -1;
    if (scale && scale != Py_None) {
        if (nki_opnd_from(scale, api, "scale", &t->scale) < 0)
            return -1;
    } else {
        t->scale.s = 1.0f;
    }
    t->reduce_op = nki_op_from(rop, api, "reduce_op", true);
    if (t->reduce_op == SIMN_OP_NONE && PyErr_Occurred())
        return -1;
    if (rres && rres != Py_None) {
        t->reduce_res = nki_as_tensor(rres, api, "reduce_res");
        if (!t->reduce_res)
            return -1;
    }
    t->reduce_cmd = RC_IDLE;
    if (rcmd && PyLong_Check(rcmd))
        t->reduce_cmd = (int)PyLong_AsLong(rcmd);
    else if (force_reduce || t->reduce_op != SIMN_OP_NONE || t->reduce_res)
        t->reduce_cmd = RC_RESET_REDUCE;
    if (force_reduce && !t->reduce_res)
        return FAILI(SIM_E_BAD_ARGUMENT, api, "reduce_res is required");
    if (t->reduce_op == SIMN_OP_NONE)
        t->reduce_op = SIMN_OP_ADD;
    return 0;
}

/* y = op(data * scale + bias) into dst; the reduce registers per partition
 * combine the row reductions of y as reduce_cmd says; reduce_res reads them. */
static int act_core(const char *api, nki_tensor *dst, nki_tensor *data, const act_args *t,
                    sim_opcode opc, const uint8_t *mask)
{
    float *x, *sc = NULL, *bi = NULL;
    simc_view ub = { 0 }, us = { 0 };
    int64_t n = simc_view_elems(&data->v), P = nki_view_parts(data);
    int64_t F = P ? n / P : 0;
    sim_insn *in;
    bool reducing = t->reduce_cmd == RC_REDUCE || t->reduce_cmd == RC_RESET_REDUCE ||
                    t->reduce_cmd == RC_LOAD_REDUCE;
    float *acc = nki_cur->act_acc;
    simn_op bin = simn_op_binary(t->reduce_op);

    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data", data) < 0 ||
        same_layout(api, data, "data", dst, "dst") < 0 || nki_check_bounds(data, NULL, api) < 0)
        return -1;
    if (P > SIMC_PMAX)
        return FAILI(SIM_E_PARTITION_LIMIT, api, "partition dimension %lld > %d", (long long)P, SIMC_PMAX);
    x = nki_read(&data->v, 1);
    if (read_pcol(api, "scale", &t->scale, data, 2, &sc, &us) < 0)
        return -1;
    if (t->has_bias && read_pcol(api, "bias", &t->bias, data, 3, &bi, &ub) < 0)
        return -1;
    if (t->reduce_res && (nki_view_parts(t->reduce_res) != P || simc_view_elems(&t->reduce_res->v) != P))
        return FAILI(SIM_E_SHAPE_MISMATCH, api, "reduce_res must be (%lld, 1), it has %lld elements",
                     (long long)P, (long long)simc_view_elems(&t->reduce_res->v));
    if (nki_cur->numerics) {
        for (int64_t i = 0; i < n; i++)
            x[i] = simn_act(t->op, x[i] * sc[i] + (bi ? bi[i] : 0.0f));
        if (t->reduce_cmd == RC_RESET || t->reduce_cmd == RC_RESET_REDUCE)
            for (int64_t p = 0; p < P; p++)
                acc[p] = simn_op_identity(bin);
        if (reducing)
            for (int64_t p = 0; p < P; p++) {
                float r = acc[p];
                for (int64_t f = 0; f < F; f++)
                    r = simn_alu(bin, r, x[p * F + f]);
                acc[p] = r;
            }
    }
    nki_write(&dst->v, x, mask);
    in = nki_emit(reducing ? SIM_OP_ACTIVATION_REDUCE : opc, SIM_ENG_SCALAR, &dst->v, &data->v,
                  ub.st ? &ub : NULL, us.st ? &us : NULL);
    in->act_func = (uint8_t)t->op;
    if (mask)
        in->flags |= SIM_F_MASKED;
    if (t->reduce_res) {
        if (nki_cur->numerics)
            nki_write(&t->reduce_res->v, acc, NULL);
        else
            nki_write(&t->reduce_res->v, NULL, NULL);
        if (in->ndst < SIM_INSN_MAX_DST)
            simc_view_region(&t->reduce_res->v, &in->dst[in->ndst++]);
    }
    return 0;
}

static PyObject *activation_call(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames, const char *api, bool force_reduce)
{
    static const char *const cur[] = { "dst", "op", "data", "bias", "scale", "reduce_op",
                                       "reduce_res", "reduce_cmd", "*name", "*engine" };
    static const char *const leg[] = { "op", "data", "bias", "scale", "reduce_op", "reduce_res",
                                       "reduce_cmd", "dtype", "mask", "*name", "*engine" };
    PyObject *a[11];
    nki_tensor *dst, *data;
    act_args t;

    if (legacy_form(m, kwnames)) {
        uint8_t *mask = NULL;
        int dt;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(data = nki_as_tensor(a[1], api, "data")) ||
            act_parse(api, a[0], a[2], a[3], a[4], a[5], a[6], force_reduce, &t) < 0)
            return NULL;
        dt = nki_dtype_arg(a[7], data->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, data, api)))
            return NULL;
        if (mask_for(a[8], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, act_core(api, dst, data, &t, SIM_OP_ACTIVATION, mask));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(data = nki_as_tensor(a[2], api, "data")) ||
        act_parse(api, a[1], a[3], a[4], a[5], a[6], a[7], force_reduce, &t) < 0)
        return NULL;
    return finish(NULL, false, act_core(api, dst, data, &t, SIM_OP_ACTIVATION, NULL));
}

static PyObject *isa_activation(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    return activation_call(m, args, nargs, kwnames, "nisa.activation", false);
}

static PyObject *isa_activation_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames)
{
    return activation_call(m, args, nargs, kwnames, "nisa.activation_reduce", true);
}

/* tensor_scalar_reduce: y = data op0 operand0 into dst, and reduce_res =
 * reduce_op over each partition's y. */
static PyObject *isa_tensor_scalar_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "data", "op0", "operand0", "reduce_op",
                                       "reduce_res", "reverse0", "dtype", "mask", "*name",
                                       "*engine" };
    static const char *const leg[] = { "data", "op0", "operand0", "reduce_op", "reduce_res",
                                       "reverse0", "dtype", "mask", "*name", "*engine" };
    const char *api = "nisa.tensor_scalar_reduce";
    PyObject *a[11], *data_o, *op0, *o0, *rop, *rres, *rev, *dto, *mo;
    nki_tensor *dst = NULL, *data, *res;
    ts_args t;
    simn_op rbin;
    simc_view u0 = { 0 };
    float *y, *acc;
    int64_t n, P, F;
    int rc;
    uint8_t *mask = NULL;
    bool legacy = legacy_form(m, kwnames);
    sim_insn *in;

    if (legacy) {
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0)
            return NULL;
        data_o = a[0]; op0 = a[1]; o0 = a[2]; rop = a[3]; rres = a[4]; rev = a[5]; dto = a[6];
        mo = a[7];
    } else {
        if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0)
            return NULL;
        data_o = a[1]; op0 = a[2]; o0 = a[3]; rop = a[4]; rres = a[5]; rev = a[6]; dto = a[7];
        mo = a[8];
    }
    if (!(data = nki_as_tensor(data_o, api, "data")) ||
        ts_parse(api, op0, o0, rev, NULL, NULL, NULL, &t) < 0 ||
        !(res = nki_as_tensor(rres, api, "reduce_res")))
        return NULL;
    rbin = simn_op_binary(nki_op_from(rop, api, "reduce_op", false));
    if (rbin == SIMN_OP_NONE)
        return PyErr_Occurred() ? NULL : nki_fail(SIM_E_BAD_ARGUMENT, api, "reduce_op must be binary");
    if (legacy) {
        int dt = nki_dtype_arg(dto, data->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, data, api)))
            return NULL;
    } else {
        if (!(dst = nki_as_tensor(a[0], api, "dst")))
            return NULL;
        Py_INCREF(dst);
    }
    if (mask_for(mo, dst, api, &mask) < 0 || want_onchip(api, "dst", dst) < 0 ||
        want_onchip(api, "data", data) < 0 || same_layout(api, data, "data", dst, "dst") < 0)
        return finish(dst, legacy, -1);
    n = simc_view_elems(&data->v);
    P = nki_view_parts(data);
    F = P ? n / P : 0;
    if (nki_view_parts(res) != P || simc_view_elems(&res->v) != P)
        return finish(dst, legacy, FAILI(SIM_E_SHAPE_MISMATCH, api, "reduce_res must be (%lld, 1)", (long long)P));
    y = ts_compute(api, data, &t, &u0, NULL, &rc);
    if (rc < 0)
        return finish(dst, legacy, -1);
    acc = nki_scratch(4, P);
    if (nki_cur->numerics)
        for (int64_t p = 0; p < P; p++) {
            float r = simn_op_identity(rbin);
            for (int64_t f = 0; f < F; f++)
                r = simn_alu(rbin, r, y[p * F + f]);
            acc[p] = r;
        }
    nki_write(&dst->v, y, mask);
    nki_write(&res->v, acc, NULL);
    in = nki_emit(SIM_OP_TENSOR_SCALAR_REDUCE, SIM_ENG_VECTOR, &dst->v, &data->v,
                  u0.st ? &u0 : NULL, NULL);
    simc_view_region(&res->v, &in->dst[in->ndst++]);
    return finish(dst, legacy, 0);
}

/* ===== batch norm statistics ===== */

/* mask_obj (legacy mask=) is over the result (P, 6) or over data, the
 * iteration space: then only the selected elements count in each half's
 * statistics and a partition's results are written when it had any. */
static int bn_stats_core(const char *api, nki_tensor *dst, nki_tensor *data, PyObject *mask_obj)
{
    int64_t P = nki_view_parts(data), n = simc_view_elems(&data->v), F = P ? n / P : 0;
    float *x, *out;
    uint8_t *mask = NULL, *imask = NULL;

    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data", data) < 0)
        return -1;
    if (mask_obj && !nki_pred_fits(mask_obj, dst->v.ndim, dst->v.shape) &&
        nki_pred_fits(mask_obj, data->v.ndim, data->v.shape)) {
        if (nki_mask_dense(mask_obj, data->v.ndim, data->v.shape, api, &imask) < 0)
            return -1;
    } else if (nki_mask_dense(mask_obj, dst->v.ndim, dst->v.shape, api, &mask) < 0) {
        return -1;
    }
    if (nki_check_bounds(data, imask, api) < 0)
        return -1;
    if (F > 512)
        return FAILI(SIM_E_SHAPE_MISMATCH, api, "bn_stats takes at most 512 elements per partition, got %lld",
                     (long long)F);
    if (nki_view_parts(dst) != P || simc_view_elems(&dst->v) != P * 6)
        return FAILI(SIM_E_SHAPE_MISMATCH, api, "dst must be (%lld, 6)", (long long)P);
    x = nki_read(&data->v, 1);
    out = nki_scratch(3, P * 6);
    if (imask) {   /* results of partitions with no selected element stay unwritten */
        mask = (uint8_t *)nki_scratch(6, (P * 6 + 3) / 4);
        for (int64_t p = 0; p < P; p++) {
            uint8_t any = memchr(imask + p * F, 1, (size_t)F) != NULL;
            memset(mask + p * 6, any, 6);
        }
    }
    if (nki_cur->numerics)
        for (int64_t p = 0; p < P; p++)
            for (int half = 0; half < 2; half++) {
                double sum = 0, m2 = 0, mean;
                int64_t cnt = 0;
                for (int64_t f = half; f < F; f += 2)
                    if (!imask || imask[p * F + f]) {
                        sum += x[p * F + f];
                        cnt++;
                    }
                mean = cnt ? sum / (double)cnt : 0;
                for (int64_t f = half; f < F; f += 2)
                    if (!imask || imask[p * F + f])
                        m2 += ((double)x[p * F + f] - mean) * ((double)x[p * F + f] - mean);
                float *o3 = out + p * 6 + (int64_t)half * 3;
                o3[0] = (float)cnt;
                o3[1] = (float)mean;
                o3[2] = (float)m2;
            }
    nki_write(&dst->v, out, mask);
    nki_emit(SIM_OP_BN_STATS, SIM_ENG_VECTOR, &dst->v, &data->v, NULL, NULL);
    return 0;
}

static int bn_aggr_core(const char *api, nki_tensor *dst, nki_tensor *data, const uint8_t *mask)
{
    int64_t P = nki_view_parts(data), n = simc_view_elems(&data->v), F = P ? n / P : 0;
    float *x, *out;

    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data", data) < 0 ||
        nki_check_bounds(data, NULL, api) < 0)
        return -1;
    if (F % 3 != 0 || F == 0)
        return FAILI(SIM_E_SHAPE_MISMATCH, api, "data must hold bn_stats groups (a multiple of 3 per partition), got %lld",
                     (long long)F);
    if (nki_view_parts(dst) != P || simc_view_elems(&dst->v) != P * 2)
        return FAILI(SIM_E_SHAPE_MISMATCH, api, "dst must be (%lld, 2)", (long long)P);
    x = nki_read(&data->v, 1);
    out = nki_scratch(3, P * 2);
    if (nki_cur->numerics)
        for (int64_t p = 0; p < P; p++) {
            double cnt = 0, mean = 0, m2 = 0;
            for (int64_t g = 0; g < F; g += 3) {
                double c = x[p * F + g], mu = x[p * F + g + 1], v = x[p * F + g + 2];
                double tot = cnt + c, delta = mu - mean;
                if (c <= 0)
                    continue;
                mean += delta * c / tot;
                m2 += v + delta * delta * cnt * c / tot;
                cnt = tot;
            }
            out[p * 2] = (float)mean;
            out[p * 2 + 1] = (float)(cnt > 0 ? m2 / cnt : 0);
        }
    nki_write(&dst->v, out, mask);
    nki_emit(SIM_OP_BN_AGGR, SIM_ENG_VECTOR, &dst->v, &data->v, NULL, NULL);
    return 0;
}

static PyObject *bn_call(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                         const char *api, bool aggr)
{
    static const char *const cur[] = { "dst", "data", "*name", "*engine" };
    static const char *const leg[] = { "data", "dtype", "mask", "*name", "*engine" };
    PyObject *a[5];
    nki_tensor *dst, *data;

    if (legacy_form(m, kwnames)) {
        int64_t shape[2];
        int dt;
        uint8_t *mask = NULL;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(data = nki_as_tensor(a[0], api, "data")))
            return NULL;
        dt = nki_dtype_arg(a[1], SIM_DT_FLOAT32, api);
        shape[0] = nki_view_parts(data);
        shape[1] = aggr ? 2 : 6;
        if (dt < 0 || !(dst = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, 2, shape, api)))
            return NULL;
        if (!aggr)
            return finish(dst, true, bn_stats_core(api, dst, data, a[2]));
        if (mask_for(a[2], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, bn_aggr_core(api, dst, data, mask));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(data = nki_as_tensor(a[1], api, "data")))
        return NULL;
    return finish(NULL, false,
                  aggr ? bn_aggr_core(api, dst, data, NULL) : bn_stats_core(api, dst, data, NULL));
}

static PyObject *isa_bn_stats(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return bn_call(m, args, nargs, kwnames, "nisa.bn_stats", false);
}

static PyObject *isa_bn_aggr(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return bn_call(m, args, nargs, kwnames, "nisa.bn_aggr", true);
}

/* ===== Tensor engine ===== */

/* perf_mode: the default (None, 0, "none", matmul_perf_mode.none) gives 1
 * contraction row per partition, double_row (1, "double_row",
 * matmul_perf_mode.double_row) gives 2, and so does the legacy name of the
 * same FP8 mode on NeuronCore-v3, "double_row_gen3" (2): the public legacy
 * kernels that pass it hand nc_matmul the (K, 2, M) and (K, 2, N) FP8
 * tiles the double_row docs describe.  Any other value is
 * SIM_E_UNSUPPORTED_API naming it.  -1 with the error raised. */
static int perf_mode_rows(const char *api, PyObject *pm)
{
    char name[48] = "";

    if (!pm || pm == Py_None)
        return 1;
    if (PyLong_Check(pm) && !PyBool_Check(pm)) {
        long v = PyLong_AsLong(pm);
        if (v >= 0 && v <= 2 && !PyErr_Occurred())
            return v == 0 ? 1 : 2;
        PyErr_Clear();
        snprintf(name, sizeof(name), "%ld (an unknown mode)", v);
    } else if (PyUnicode_Check(pm)) {
        const char *s = PyUnicode_AsUTF8(pm);
        if (s && strcmp(s, "none") == 0)
            return 1;
        if (s && (strcmp(s, "double_row") == 0 || strcmp(s, "double_row_gen3") == 0))
            return 2;
        PyErr_Clear();
        snprintf(name, sizeof(name), "'%.32s'", s ? s : "?");
    } else {
        snprintf(name, sizeof(name), "a %.32s", Py_TYPE(pm)->tp_name);
    }
    return FAILI(SIM_E_UNSUPPORTED_API, api,
                 "perf_mode=%s is not simulated (perf_mode none, double_row and its legacy name double_row_gen3 "
                 "are)", name);
}

static bool fp8_dtype(sim_dtype dt)
{
    return dt == SIM_DT_FLOAT8_E4M3 || dt == SIM_DT_FLOAT8_E5M2 || dt == SIM_DT_FLOAT8_E4M3FN;
}

/* The rules of perf_mode=double_row (nki.isa.nc_matmul and
 * matmul_perf_mode docs, neuron-hardware.md): NeuronCore-v3 or newer
 * (trn2, trn3); FP8 operands; stationary (K, 2, M) and moving (K, 2, N)
 * with the pair of rows in the second dimension (K <= 128, M <= 128,
 * N <= 512 as for any matmul); no column tiling (tile_size's column size,
 * when given, stays 128).  -1 with the error raised. */
static int double_row_check(const char *api, const nki_tensor *st, const nki_tensor *mv,
                            PyObject *tile_size)
{
    const nki_tensor *ops[2] = { st, mv };
    static const char *const what[2] = { "stationary", "moving" };

    if (nki_cur->tgt->nc_gen < 3)
        return FAILI(SIM_E_BAD_ARGUMENT, api,
                     "rule double-row-target: perf_mode=double_row needs NeuronCore-v3 or newer "
                     "(trn2, trn3); the target %s is NeuronCore-v%d, drop perf_mode",
                     nki_cur->tgt->name, nki_cur->tgt->nc_gen);
    for (int i = 0; i < 2; i++) {
        const simc_view *v = &ops[i]->v;
        if (!fp8_dtype(v->dtype))
            return FAILI(SIM_E_DTYPE, api,
                         "perf_mode=double_row multiplies FP8 operands (float8_e4m3/e5m2), the %s "
                         "operand is %s", what[i], sim_dtype_name(v->dtype));
        if (v->ndim != 3 || ops[i]->pdim != 0 || v->shape[1] != 2)
            return FAILI(SIM_E_SHAPE_MISMATCH, api,
                         "perf_mode=double_row takes a 3-D %s operand (K, 2, %s) (e.g. [128, 2, %s]), "
                         "it has %d dims%s", what[i], i ? "N" : "M", i ? "512" : "128", v->ndim,
                         v->ndim == 3 ? " and the middle one is not 2" : "");
    }
    if (tile_size && tile_size != Py_None) {
        PyObject *seq = PySequence_Fast(tile_size, "tile_size");
        int64_t col = 128;
        bool ok = seq && PySequence_Fast_GET_SIZE(seq) == 2 &&
                  nki_get_int(PySequence_Fast_GET_ITEM(seq, 1), &col);
        Py_XDECREF(seq);
        PyErr_Clear();
        if (ok && col != 128)
            return FAILI(SIM_E_BAD_ARGUMENT, api,
                         "perf_mode=double_row cannot be combined with column tiling "
                         "(tile_size column %lld, it must be 128)", (long long)col);
    }
    return 0;
}

static PyObject *isa_nc_matmul(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "stationary", "moving", "is_stationary_onezero",
                                       "is_moving_onezero", "is_transpose", "accumulate",
                                       "tile_position", "tile_size", "perf_mode", "*name",
                                       "*mask" };
    static const char *const leg[] = { "stationary", "moving", "is_stationary_onezero",
                                       "is_moving_onezero", "is_transpose", "mask",
                                       "tile_position", "tile_size", "perf_mode", "*name" };
    const char *api = "nisa.nc_matmul";
    PyObject *a[12];
    nki_tensor *dst, *st, *mv;
    int acc = 0, rows;

    if (legacy_form(m, kwnames)) {
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(st = nki_as_tensor(a[0], api, "stationary")) ||
            !(mv = nki_as_tensor(a[1], api, "moving")))
            return NULL;
        if ((rows = perf_mode_rows(api, a[8])) < 0 ||
            (rows == 2 && double_row_check(api, st, mv, a[7]) < 0))
            return NULL;
        return (PyObject *)nki_matmul_tile_rows(api, st, mv, false, a[5], rows);
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(st = nki_as_tensor(a[1], api, "stationary")) ||
        !(mv = nki_as_tensor(a[2], api, "moving")))
        return NULL;
    if ((rows = perf_mode_rows(api, a[9])) < 0 ||
        (rows == 2 && double_row_check(api, st, mv, a[8]) < 0))
        return NULL;
    if (a[6] && a[6] != Py_None)
        acc = PyObject_IsTrue(a[6]) == 1 ? 1 : -1;
    return finish(NULL, false, nki_matmul_rows(api, dst, st, mv, acc, false,
                                               a[5] && PyObject_IsTrue(a[5]) == 1, rows));
}

static PyObject *isa_nc_transpose(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "data", "engine", "*name" };
    static const char *const leg[] = { "data", "engine", "dtype", "mask", "*name" };
    const char *api = "nisa.nc_transpose";
    PyObject *a[5];
    nki_tensor *dst, *data;

    if (legacy_form(m, kwnames)) {
        sim_engine eng;
        int64_t shape[2], P, F;
        int dt;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(data = nki_as_tensor(a[0], api, "data")))
            return NULL;
        P = nki_view_parts(data);
        F = simc_view_elems(&data->v) / (P ? P : 1);
        eng = nki_engine_from(a[1], (P <= 32 && F <= 32 && a[1] && a[1] != Py_None)
                                        ? SIM_ENG_VECTOR : SIM_ENG_TENSOR);
        dt = nki_dtype_arg(a[2], data->v.dtype, api);
        shape[0] = F;
        shape[1] = P;
        if (dt < 0 || !(dst = nki_new_tile(eng == SIM_ENG_TENSOR ? SIM_MEM_PSUM : SIM_MEM_SBUF,
                                           (sim_dtype)dt, 2, shape, api)))
            return NULL;
        if (nki_legacy_mask(a[3], dst, api) < 0)
            return finish(dst, true, -1);
        return finish(dst, true, nki_transpose(api, dst, data, eng));
    }
    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(data = nki_as_tensor(a[1], api, "data")))
        return NULL;
    return finish(NULL, false,
                  nki_transpose(api, dst, data,
                                nki_engine_from(a[2], dst->v.st->mem == SIM_MEM_PSUM ? SIM_ENG_TENSOR
                                                                                     : SIM_ENG_VECTOR)));
}

/* ===== select and iota ===== */

static PyObject *isa_affine_select(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const leg[] = { "pred", "on_true_tile", "on_false_value", "dtype", "mask",
                                       "*name", "*engine" };
    static const char *const cur[] = { "dst", "pattern", "channel_multiplier", "on_true_tile",
                                       "on_false_value", "cmp_op", "offset", "*name",
                                       "*engine" };
    const char *api = "nisa.affine_select";
    PyObject *a[9];
    nki_tensor *dst, *src;
    uint8_t *pred = NULL, *mask = NULL;
    float *x, fv;
    int64_t n;
    bool legacy = legacy_form(m, kwnames);
    PyObject *fvo;

    if (legacy) {
        int dt;
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0 ||
            !(src = nki_as_tensor(a[1], api, "on_true_tile")))
            return NULL;
        dt = nki_dtype_arg(a[3], src->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, src, api)))
            return NULL;
        fvo = a[2];
        if (mask_for(a[4], dst, api, &mask) < 0)
            return finish(dst, true, -1);
        if (!a[0] || a[0] == Py_None)
            return finish(dst, true, FAILI(SIM_E_BAD_ARGUMENT, api, "pred is required"));
        /* mask and pred share the scratch slot: copy the mask out first. */
        if (mask) {
            uint8_t *mc = (uint8_t *)nki_scratch(6, (simc_view_elems(&dst->v) + 3) / 4);
            memcpy(mc, mask, (size_t)simc_view_elems(&dst->v));
            mask = mc;
        }
        if (nki_mask_dense(a[0], dst->v.ndim, dst->v.shape, api, &pred) < 0)
            return finish(dst, true, -1);
    } else {
        int64_t idx[SIMC_MAX_DIMS] = { 0 }, steps[SIMC_MAX_DIMS] = { 0 }, cm = 0, off = 0;
        PyObject *seq;
        Py_ssize_t np;
        simn_op cmp;
        if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
            !(dst = nki_as_tensor(a[0], api, "dst")) ||
            !(src = nki_as_tensor(a[3], api, "on_true_tile")))
            return NULL;
        Py_INCREF(dst);
        fvo = a[4];
        cmp = a[5] && a[5] != Py_None ? nki_op_from(a[5], api, "cmp_op", false) : SIMN_OP_EQUAL;
        if (cmp == SIMN_OP_NONE)
            return finish(dst, false, -1);
        cm = a[2] ? PyLong_AsLongLong(a[2]) : 0;
        off = a[6] && a[6] != Py_None ? PyLong_AsLongLong(a[6]) : 0;
        seq = a[1] ? PySequence_Fast(a[1], "pattern") : NULL;
        if (!seq || PyErr_Occurred()) {
            PyErr_Clear();
            Py_XDECREF(seq);
            return finish(dst, false, FAILI(SIM_E_BAD_ARGUMENT, api, "pattern must be a list of [step, count]"));
        }
        np = PySequence_Fast_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < np && i + 1 < dst->v.ndim; i++) {
            PyObject *pr = PySequence_Fast_GET_ITEM(seq, i);
            PyObject *s0 = PySequence_Check(pr) ? PySequence_GetItem(pr, 0) : NULL;
            steps[i + 1] = s0 ? PyLong_AsLongLong(s0) : 0;
            Py_XDECREF(s0);
        }
        Py_DECREF(seq);
        PyErr_Clear();
        n = simc_view_elems(&dst->v);
        pred = (uint8_t *)nki_scratch(5, (n + 3) / 4);
        for (int64_t i = 0; i < n; i++) {
            __int128 v = off + (__int128)idx[0] * cm;
            for (int d = 1; d < dst->v.ndim; d++)
                v += (__int128)steps[d] * idx[d];
            pred[i] = simn_alu(cmp, (float)(double)v, 0.0f) != 0;
            for (int d = dst->v.ndim - 1; d >= 0; d--) {
                if (++idx[d] < dst->v.shape[d])
                    break;
                idx[d] = 0;
            }
        }
    }
    if (!fvo || (!PyFloat_Check(fvo) && !PyLong_Check(fvo)))
        return finish(dst, legacy, FAILI(SIM_E_BAD_ARGUMENT, api, "on_false_value must be a number"));
    fv = (float)PyFloat_AsDouble(fvo);
    if (want_onchip(api, "dst", dst) < 0 || same_layout(api, src, "on_true_tile", dst, "dst") < 0 ||
        nki_check_bounds(src, NULL, api) < 0)
        return finish(dst, legacy, -1);
    x = nki_read(&src->v, 1);
    n = simc_view_elems(&dst->v);
    if (nki_cur->numerics)
        for (int64_t i = 0; i < n; i++)
            if (!pred[i])
                x[i] = fv;
    nki_write(&dst->v, x, mask);
    nki_emit(SIM_OP_AFFINE_SELECT, SIM_ENG_GPSIMD, &dst->v, &src->v, NULL, NULL);
    return finish(dst, legacy, 0);
}

static int64_t iota_clamp(__int128 v)
{
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

static PyObject *isa_iota(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const leg[] = { "expr", "dtype", "mask", "*name", "*engine" };
    static const char *const cur[] = { "dst", "pattern", "offset", "channel_multiplier", "*name",
                                       "*engine" };
    const char *api = "nisa.iota";
    PyObject *a[6];
    nki_tensor *dst;
    int64_t *vals;
    int64_t n;
    bool legacy = legacy_form(m, kwnames);

    if (legacy) {
        nki_index *e;
        int dt;
        int64_t idx[SIMC_MAX_DIMS] = { 0 };
        if (nki_parse(api, args, nargs, kwnames, leg, NKI_NARGS(leg), a) < 0)
            return NULL;
        if (!a[0] || Py_TYPE(a[0]) != &nki_IndexType)
            return nki_fail(SIM_E_BAD_ARGUMENT, api, "expr must be an index expression (nl.arange / nl.mgrid)");
        e = (nki_index *)a[0];
        dt = nki_dtype_arg(a[1], SIM_DT_INT32, api);
        if (dt < 0 || !(dst = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, e->ndim, e->shape, api)))
            return NULL;
        if (nki_legacy_mask(a[2], dst, api) < 0)
            return finish(dst, true, -1);
        n = simc_view_elems(&dst->v);
        vals = (int64_t *)(void *)nki_scratch(1, 2 * n);
        for (int64_t i = 0; i < n; i++) {
            __int128 v = e->c;
            for (int k = 0; k < e->ndim; k++)
                v += (__int128)e->coef[k] * idx[k];
            vals[i] = iota_clamp(v);
            for (int k = e->ndim - 1; k >= 0; k--) {
                if (++idx[k] < e->shape[k])
                    break;
                idx[k] = 0;
            }
        }
    } else {
        int64_t idx[SIMC_MAX_DIMS] = { 0 }, steps[SIMC_MAX_DIMS] = { 0 }, cm, off;
        PyObject *seq;
        if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
            !(dst = nki_as_tensor(a[0], api, "dst")))
            return NULL;
        Py_INCREF(dst);
        off = a[2] && a[2] != Py_None ? PyLong_AsLongLong(a[2]) : 0;
        cm = a[3] && a[3] != Py_None ? PyLong_AsLongLong(a[3]) : 0;
        seq = a[1] ? PySequence_Fast(a[1], "pattern") : NULL;
        if (!seq || PyErr_Occurred()) {
            PyErr_Clear();
            Py_XDECREF(seq);
            return finish(dst, false, FAILI(SIM_E_BAD_ARGUMENT, api, "pattern must be a list of [step, count]"));
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && i + 1 < dst->v.ndim; i++) {
            PyObject *pr = PySequence_Fast_GET_ITEM(seq, i);
            PyObject *s0 = PySequence_Check(pr) ? PySequence_GetItem(pr, 0) : NULL;
            steps[i + 1] = s0 ? PyLong_AsLongLong(s0) : 0;
            Py_XDECREF(s0);
        }
        Py_DECREF(seq);
        PyErr_Clear();
        n = simc_view_elems(&dst->v);
        vals = (int64_t *)(void *)nki_scratch(1, 2 * n);
        for (int64_t i = 0; i < n; i++) {
            __int128 v = off + (__int128)idx[0] * cm;
            for (int d = 1; d < dst->v.ndim; d++)
                v += (__int128)steps[d] * idx[d];
            vals[i] = iota_clamp(v);
            for (int d = dst->v.ndim - 1; d >= 0; d--) {
                if (++idx[d] < dst->v.shape[d])
                    break;
                idx[d] = 0;
            }
        }
    }
    if (want_onchip(api, "dst", dst) < 0)
        return finish(dst, legacy, -1);
    if (simc_dtype_is_float(dst->v.dtype)) {
        float *fv = nki_scratch(2, n);
        for (int64_t i = 0; i < n; i++)
            fv[i] = (float)vals[i];
        nki_write(&dst->v, fv, NULL);
    } else {
        nki_write_i64(&dst->v, vals, NULL);   /* exact: an int32 iota keeps every bit */
    }
    nki_emit(SIM_OP_IOTA, SIM_ENG_GPSIMD, &dst->v, NULL, NULL, NULL);
    return finish(dst, legacy, 0);
}

static PyObject *isa_get_nc_version(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    (void)m;
    (void)args;
    (void)nargs;
    (void)kwnames;
    /* gen2 keeps kernels off paths kforge does not model (dma_transpose). */
    return PyLong_FromLong(2);
}

/* ===== scalar_tensor_tensor, tensor_tensor_scan, dma_transpose ===== */

/* dst = (data op0 operand0) op1 data1, operand0 a scalar or one value per
 * partition. */
static PyObject *isa_scalar_tensor_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "data", "op0", "operand0", "op1", "operand1",
                                       "reverse0", "reverse1", "engine", "*name" };
    static const char *const leg[] = { "data", "op0", "operand0", "op1", "operand1", "reverse0",
                                       "reverse1", "dtype", "mask", "engine", "*name" };
    const char *api = "nisa.scalar_tensor_tensor";
    PyObject *a[11], *data_o, *op0, *o0, *op1, *o1, *r0, *r1, *mo = NULL;
    bool legacy = legacy_form(m, kwnames);
    nki_tensor *dst, *data, *t1;
    ts_args t;
    simc_view u0 = { 0 };
    float *y, *v1;
    int rc;
    int64_t n;
    uint8_t *mask = NULL;
    sim_insn *in;

    if (nki_parse(api, args, nargs, kwnames, legacy ? leg : cur,
                  legacy ? NKI_NARGS(leg) : NKI_NARGS(cur), a) < 0)
        return NULL;
    if (legacy) {
        data_o = a[0]; op0 = a[1]; o0 = a[2]; op1 = a[3]; o1 = a[4]; r0 = a[5]; r1 = a[6];
        mo = a[8];
    } else {
        data_o = a[1]; op0 = a[2]; o0 = a[3]; op1 = a[4]; o1 = a[5]; r0 = a[6]; r1 = a[7];
    }
    if (!(data = nki_as_tensor(data_o, api, "data")) || !(t1 = nki_as_tensor(o1, api, "operand1")) ||
        ts_parse(api, op0, o0, r0, NULL, NULL, NULL, &t) < 0)
        return NULL;
    t.op1 = nki_op_from(op1, api, "op1", false);
    if (t.op1 == SIMN_OP_NONE)
        return NULL;
    if (legacy) {
        int dt = nki_dtype_arg(a[7], data->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, data, api)))
            return NULL;
    } else {
        if (!(dst = nki_as_tensor(a[0], api, "dst")))
            return NULL;
        Py_INCREF(dst);
    }
    if (mask_for(mo, dst, api, &mask) < 0 || want_onchip(api, "dst", dst) < 0 ||
        want_onchip(api, "data", data) < 0 || want_onchip(api, "operand1", t1) < 0 ||
        same_layout(api, data, "data", dst, "dst") < 0 ||
        same_layout(api, data, "data", t1, "operand1") < 0 ||
        nki_check_bounds(data, NULL, api) < 0 || nki_check_bounds(t1, NULL, api) < 0)
        return finish(dst, legacy, -1);
    t.op1 = SIMN_OP_NONE;
    y = ts_compute(api, data, &t, &u0, NULL, &rc);
    if (rc < 0)
        return finish(dst, legacy, -1);
    v1 = nki_read(&t1->v, 3);
    n = simc_view_elems(&data->v);
    if (nki_cur->numerics) {
        simn_op op1v = nki_op_from(op1, api, "op1", false);
        bool rev1 = r1 && PyObject_IsTrue(r1) == 1;
        for (int64_t i = 0; i < n; i++)
            y[i] = apply_binop(op1v, y[i], v1[i], rev1);
    }
    nki_write(&dst->v, y, mask);
    in = nki_emit(SIM_OP_SCALAR_TENSOR_TENSOR, nki_engine_from(legacy ? a[9] : a[8], SIM_ENG_VECTOR),
                  &dst->v, &data->v, &t1->v, u0.st ? &u0 : NULL);
    if (mask)
        in->flags |= SIM_F_MASKED;
    return finish(dst, legacy, 0);
}

/* Per partition, along the free elements: r[i] = (data0[i] op0 r[i-1]) op1
 * data1[i], r[-1] = initial (a scalar or one value per partition). */
static PyObject *isa_tensor_tensor_scan(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "data0", "data1", "initial", "op0", "op1",
                                       "reverse0", "reverse1", "engine", "*name" };
    static const char *const leg[] = { "data0", "data1", "initial", "op0", "op1", "reverse0",
                                       "reverse1", "dtype", "mask", "engine", "*name" };
    const char *api = "nisa.tensor_tensor_scan";
    PyObject *a[11], *d0o, *d1o, *ini, *op0o, *op1o, *r0, *r1;
    bool legacy = legacy_form(m, kwnames), rev0, rev1;
    nki_tensor *dst, *d0, *d1;
    nki_opnd init;
    simn_op op0, op1;
    float *x0, *x1, *iv;
    simc_view ui = { 0 };
    int64_t P, F;
    sim_insn *in;

    if (nki_parse(api, args, nargs, kwnames, legacy ? leg : cur,
                  legacy ? NKI_NARGS(leg) : NKI_NARGS(cur), a) < 0)
        return NULL;
    if (legacy) {
        d0o = a[0]; d1o = a[1]; ini = a[2]; op0o = a[3]; op1o = a[4]; r0 = a[5]; r1 = a[6];
    } else {
        d0o = a[1]; d1o = a[2]; ini = a[3]; op0o = a[4]; op1o = a[5]; r0 = a[6]; r1 = a[7];
    }
    if (!(d0 = nki_as_tensor(d0o, api, "data0")) || !(d1 = nki_as_tensor(d1o, api, "data1")) ||
        !ini || nki_opnd_from(ini, api, "initial", &init) < 0)
        return ini ? NULL : nki_fail(SIM_E_BAD_ARGUMENT, api, "initial is required");
    op0 = nki_op_from(op0o, api, "op0", false);
    op1 = op0 == SIMN_OP_NONE ? SIMN_OP_NONE : nki_op_from(op1o, api, "op1", false);
    if (op1 == SIMN_OP_NONE)
        return NULL;
    rev0 = r0 && PyObject_IsTrue(r0) == 1;
    rev1 = r1 && PyObject_IsTrue(r1) == 1;
    if (legacy) {
        int dt = nki_dtype_arg(a[7], d0->v.dtype, api);
        if (dt < 0 || !(dst = legacy_tile(SIM_MEM_SBUF, (sim_dtype)dt, d0, api)))
            return NULL;
        if (nki_legacy_mask(a[8], dst, api) < 0)
            return finish(dst, true, -1);
    } else {
        if (!(dst = nki_as_tensor(a[0], api, "dst")))
            return NULL;
        Py_INCREF(dst);
    }
    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data0", d0) < 0 ||
        want_onchip(api, "data1", d1) < 0 || same_layout(api, d0, "data0", dst, "dst") < 0 ||
        same_layout(api, d0, "data0", d1, "data1") < 0 || nki_check_bounds(d0, NULL, api) < 0 ||
        nki_check_bounds(d1, NULL, api) < 0)
        return finish(dst, legacy, -1);
    P = nki_view_parts(d0);
    F = P ? simc_view_elems(&d0->v) / P : 0;
    x0 = nki_read(&d0->v, 1);
    x1 = nki_read(&d1->v, 2);
    if (read_pcol(api, "initial", &init, d0, 3, &iv, &ui) < 0)
        return finish(dst, legacy, -1);
    if (nki_cur->numerics)
        for (int64_t p = 0; p < P; p++) {
            float r = iv[p * F];
            for (int64_t f = 0; f < F; f++) {
                r = apply_binop(op0, x0[p * F + f], r, rev0);
                r = apply_binop(op1, r, x1[p * F + f], rev1);
                x0[p * F + f] = r;
            }
        }
    nki_write(&dst->v, x0, NULL);
    in = nki_emit(SIM_OP_TENSOR_TENSOR_SCAN, nki_engine_from(legacy ? a[9] : a[8], SIM_ENG_VECTOR),
                  &dst->v, &d0->v, &d1->v, ui.st ? &ui : NULL);
    (void)in;
    return finish(dst, legacy, 0);
}

/* dst = src transposed (2-D) by a DMA; HBM or SBUF on either side. */
static PyObject *isa_dma_transpose(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "src", "axes", "dge_mode", "*name", "*engine" };
    const char *api = "nisa.dma_transpose";
    PyObject *a[6];
    nki_tensor *dst, *src;
    (void)m;

    if (nki_parse(api, args, nargs, kwnames, cur, NKI_NARGS(cur), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(src = nki_as_tensor(a[1], api, "src")))
        return NULL;
    const int *perm = nki_dma_perm(src->v.ndim);
    if (!perm)
        return nki_fail(SIM_E_UNSUPPORTED_API, api, "a %d-D src (2-, 3- and 4-D transpose)", src->v.ndim);
    {
        bool same = dst->v.ndim == src->v.ndim;
        char want[96];
        int w = 0;
        for (int i = 0; same && i < src->v.ndim; i++)
            same = dst->v.shape[i] == src->v.shape[perm[i]];
        for (int i = 0; i < src->v.ndim && w >= 0 && (size_t)w < sizeof(want); i++)
            w += snprintf(want + w, sizeof(want) - (size_t)w, "%s%lld", i ? ", " : "",
                          (long long)src->v.shape[perm[i]]);
        if (!same)
            return nki_fail(SIM_E_SHAPE_MISMATCH, api, "a %d-D src transposes into a (%s) dst", src->v.ndim, want);
    }
    if (simc_view_elems(&src->v) > NKI_MAX_OP_ELEMS)
        return nki_fail(SIM_E_LIMIT, api, "one DMA of %lld elements, at most %lld (split it)",
                        (long long)simc_view_elems(&src->v), (long long)NKI_MAX_OP_ELEMS);
    if (a[2] && a[2] != Py_None) {   /* only the documented permutation of src's rank */
        PyObject *t = PySequence_Check(a[2]) ? PySequence_Tuple(a[2]) : NULL;
        bool ok = t && PyTuple_GET_SIZE(t) == src->v.ndim;
        for (int i = 0; ok && i < src->v.ndim; i++) {
            int64_t ax = -1;
            ok = nki_get_int(PyTuple_GET_ITEM(t, i), &ax) && ax == perm[i];
        }
        Py_XDECREF(t);
        PyErr_Clear();
        if (!ok)
            return nki_fail(SIM_E_UNSUPPORTED_API, api,
                            "axes= other than (1, 0), (2, 1, 0) or (3, 1, 2, 0) for a 2-, 3- or 4-D src");
    }
    if (dst->v.st->mem == SIM_MEM_PSUM || src->v.st->mem == SIM_MEM_PSUM)
        return nki_fail(SIM_E_WRONG_BUFFER, api, "a DMA neither reads nor writes PSUM");
    if (nki_check_bounds(src, NULL, api) < 0 || nki_check_bounds(dst, NULL, api) < 0)
        return NULL;
    nki_dma_transpose(dst, src, NULL);
    return Py_NewRef(Py_None);
}

/* dst = src where predicate is non-zero (dst keeps its values elsewhere). */
static PyObject *isa_tensor_copy_predicated(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                            PyObject *kwnames)
{
    static const char *const names[] = { "dst", "src", "predicate", "reverse_pred", "mask",
                                         "*name", "*engine", "*dtype" };
    const char *api = "nisa.tensor_copy_predicated";
    PyObject *a[NKI_NARGS(names)];
    nki_tensor *dst, *src, *pred;
    float *vs, *vp;
    uint8_t *sel;
    int64_t n;
    bool rev;
    sim_insn *in;
    (void)m;

    if (nki_parse(api, args, nargs, kwnames, names, NKI_NARGS(names), a) < 0 ||
        !(dst = nki_as_tensor(a[0], api, "dst")) || !(src = nki_as_tensor(a[1], api, "src")) ||
        !(pred = nki_as_tensor(a[2], api, "predicate")))
        return NULL;
    if (a[4] && a[4] != Py_None)
        return nki_fail(SIM_E_UNSUPPORTED_API, api, "mask= (use the predicate)");
    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "src", src) < 0 ||
        want_onchip(api, "predicate", pred) < 0 || same_layout(api, src, "src", dst, "dst") < 0 ||
        same_layout(api, pred, "predicate", dst, "dst") < 0 ||
        nki_check_bounds(src, NULL, api) < 0 || nki_check_bounds(pred, NULL, api) < 0)
        return NULL;
    rev = a[3] && PyObject_IsTrue(a[3]) == 1;
    n = simc_view_elems(&dst->v);
    vs = nki_read(&src->v, 1);
    vp = nki_read(&pred->v, 2);
    sel = (uint8_t *)nki_scratch(6, (n + 3) / 4);
    if (nki_cur->numerics)
        for (int64_t i = 0; i < n; i++)
            sel[i] = (vp[i] != 0.0f) != rev;
    nki_write(&dst->v, vs, nki_cur->numerics ? sel : NULL);
    in = nki_emit(SIM_OP_SELECT, SIM_ENG_VECTOR, &dst->v, &src->v, &pred->v, NULL);
    (void)in;
    return Py_NewRef(Py_None);
}

/* Reduce across partitions: data (P, F) -> (1, F) (legacy form returns it). */
static PyObject *isa_tensor_partition_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                             PyObject *kwnames)
{
    static const char *const cur[] = { "dst", "op", "data", "*name", "*engine" };
    static const char *const leg[] = { "op", "data", "dtype", "mask", "*name", "*engine" };
    const char *api = "nisa.tensor_partition_reduce";
    bool legacy = legacy_form(m, kwnames);
    PyObject *a[6];
    nki_tensor *dst, *data;
    simn_op op, bin;
    int64_t P, F;
    float *x, *out;

    if (nki_parse(api, args, nargs, kwnames, legacy ? leg : cur,
                  legacy ? NKI_NARGS(leg) : NKI_NARGS(cur), a) < 0 ||
        !(data = nki_as_tensor(legacy ? a[1] : a[2], api, "data")))
        return NULL;
    op = nki_op_from(legacy ? a[0] : a[1], api, "op", false);
    bin = simn_op_binary(op);
    if (op == SIMN_OP_NONE)
        return NULL;
    if (bin == SIMN_OP_NONE)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "op %s does not combine values", simn_op_name(op));
    P = nki_view_parts(data);
    F = P ? simc_view_elems(&data->v) / P : 0;
    if (legacy) {
        int64_t shape[2] = { 1, F };
        int dt = nki_dtype_arg(a[2], data->v.dtype, api);
        if (dt < 0 || !(dst = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, 2, shape, api)))
            return NULL;
        if (nki_legacy_mask(a[3], dst, api) < 0)
            return finish(dst, true, -1);
    } else {
        if (!(dst = nki_as_tensor(a[0], api, "dst")))
            return NULL;
        Py_INCREF(dst);
    }
    if (want_onchip(api, "dst", dst) < 0 || want_onchip(api, "data", data) < 0 ||
        nki_check_bounds(data, NULL, api) < 0)
        return finish(dst, legacy, -1);
    if (simc_view_elems(&dst->v) != F)
        return finish(dst, legacy, FAILI(SIM_E_SHAPE_MISMATCH, api, "dst must hold %lld elements (1, %lld)",
                                         (long long)F, (long long)F));
    x = nki_read(&data->v, 1);
    out = nki_scratch(3, F);
    if (nki_cur->numerics)
        for (int64_t f = 0; f < F; f++) {
            float r = simn_op_identity(bin);
            for (int64_t p = 0; p < P; p++)
                r = simn_alu(bin, r, x[p * F + f]);
            out[f] = op == SIMN_OP_MEAN && P ? r / (float)P : r;
        }
    nki_write(&dst->v, out, NULL);
    nki_emit(SIM_OP_TENSOR_REDUCE, SIM_ENG_GPSIMD, &dst->v, &data->v, NULL, NULL);
    return finish(dst, legacy, 0);
}

PyMethodDef nki_isa_methods[] = {
    { "dma_copy", FASTKW(isa_dma_copy), "DMA copy between HBM and SBUF" },
    { "tensor_copy", FASTKW(isa_tensor_copy), "on-chip copy" },
    { "memset", FASTKW(isa_memset), "fill with a value" },
    { "tensor_tensor", FASTKW(isa_tensor_tensor), "elementwise op of two tiles" },
    { "tensor_scalar", FASTKW(isa_tensor_scalar), "(data op0 s0) op1 s1" },
    { "tensor_reduce", FASTKW(isa_tensor_reduce), "reduce free axes" },
    { "activation", FASTKW(isa_activation), "op(data * scale + bias) on ScalarE" },
    { "activation_reduce", FASTKW(isa_activation_reduce), "activation with a row reduce" },
    { "tensor_scalar_reduce", FASTKW(isa_tensor_scalar_reduce), "tensor_scalar with a row reduce" },
    { "reciprocal", FASTKW(isa_reciprocal), "1 / x" },
    { "bn_stats", FASTKW(isa_bn_stats), "batch-norm statistics" },
    { "bn_aggr", FASTKW(isa_bn_aggr), "aggregate batch-norm statistics" },
    { "nc_matmul", FASTKW(isa_nc_matmul), "Tensor engine matmul into PSUM" },
    { "nc_transpose", FASTKW(isa_nc_transpose), "transpose on PE or DVE" },
    { "affine_select", FASTKW(isa_affine_select), "select by an affine predicate" },
    { "iota", FASTKW(isa_iota), "affine index values" },
    { "get_nc_version", FASTKW(isa_get_nc_version), "NeuronCore generation" },
    { "scalar_tensor_tensor", FASTKW(isa_scalar_tensor_tensor), "(data op0 s) op1 tensor" },
    { "tensor_tensor_scan", FASTKW(isa_tensor_tensor_scan), "scan along the free axis" },
    { "dma_transpose", FASTKW(isa_dma_transpose), "2- to 4-D transpose by DMA" },
    { "tensor_copy_predicated", FASTKW(isa_tensor_copy_predicated), "copy where a predicate holds" },
    { "tensor_partition_reduce", FASTKW(isa_tensor_partition_reduce), "reduce across partitions" },
    { "__getattr__", nki_mod_getattr, METH_O, "unsupported API" },
    { NULL, NULL, 0, NULL },
};
