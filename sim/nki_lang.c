/* nki_lang — nki.language (nl.*): allocation, SPMD queries, index helpers,
 * loads and stores, elementwise/activation/reduction calls, matmul and
 * transpose, and the tile operators (+ - * / +=) of the legacy API (see
 * nki_internal.h).  Legacy value-returning calls put their result in a new
 * SBUF tile (matmul and transpose: PSUM) of the promoted or dtype= type. */
#include "nki_internal.h"
#include "nki_mmq.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "kf_alloc.h"

#define PARSE(api, names, a) \
    nki_parse(api, args, nargs, kwnames, names, NKI_NARGS(names), a)

/* ===== allocation ===== */

static PyObject *alloc_common(const char *api, PyObject *shape_obj, PyObject *dtype_obj,
                              PyObject *buffer_obj, PyObject *name_obj, bool fill, float value,
                              bool placed)
{
    nki_ctx *c = nki_cur;
    int64_t shape[SIMC_MAX_DIMS];
    int pdim = 0, nd, dt, mem;
    bool shared;
    const char *name = "";
    nki_tensor *t;

    if (!c)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "called outside a kernel run");
    if (!shape_obj)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "shape is required");
    nd = nki_parse_shape(shape_obj, api, shape, &pdim);
    if (nd < 0)
        return NULL;
    dt = dtype_obj ? nki_dtype_from(dtype_obj, api) : SIM_DT_FLOAT32;
    if (dt < 0)
        return NULL;
    mem = nki_buffer_from(buffer_obj, api, &shared);
    if (mem < 0)
        return NULL;
    if (name_obj && PyUnicode_Check(name_obj))
        name = PyUnicode_AsUTF8(name_obj);
    if (mem == SIM_MEM_HBM && shared && c->grid_ndim > 0 && c->shared_cursor < c->n_shared) {
        /* Every SPMD program allocates the same shared output: reuse it. */
        simc_store *st = c->shared[c->shared_cursor];
        int64_t total = 1;
        for (int d = 0; d < nd; d++)
            total *= shape[d];
        if (st->nelem == total && st->dtype == (sim_dtype)dt) {
            simc_view v;
            int64_t stride = 1;
            memset(&v, 0, sizeof(v));
            v.dtype = (sim_dtype)dt;
            v.ndim = nd;
            for (int d = nd - 1; d >= 0; d--) {
                v.shape[d] = shape[d];
                v.strides[d] = stride;
                stride *= shape[d];
            }
            c->shared_cursor++;
            return (PyObject *)nki_tensor_view(st, &v, -1);
        }
    }
    if (mem != SIM_MEM_HBM && nd > 0 && pdim == 0 && nd == 1) {
        /* a 1-D on-chip shape is (P,) -> (P, 1) */
        shape[1] = 1;
        nd = 2;
    }
    t = nki_tensor_alloc_ex((sim_mem)mem, (sim_dtype)dt, nd, shape, pdim, name, api, placed,
                            nki_buffer_hint(buffer_obj));
    if (!t)
        return NULL;
    if (mem == SIM_MEM_HBM && shared) {
        t->v.st->shared_slot = (int)c->n_shared;
        if (c->n_shared == c->cap_shared) {
            c->cap_shared = c->cap_shared ? c->cap_shared * 2 : 8;
            c->shared = kf_realloc(c->shared, c->cap_shared * sizeof(simc_store *));
        }
        simc_store_ref(t->v.st);
        c->shared[c->n_shared++] = t->v.st;
        c->shared_cursor = c->n_shared;
    }
    if (fill) {
        if (c->numerics || mem == SIM_MEM_HBM) {
            float *buf = nki_scratch(0, simc_view_elems(&t->v));
            int64_t n = simc_view_elems(&t->v);
            for (int64_t i = 0; i < n; i++)
                buf[i] = value;
            simc_scatter(&t->v, buf, NULL);
        }
        sim_insn_set_imm(nki_emit(SIM_OP_MEMSET, mem == SIM_MEM_SBUF ? SIM_ENG_GPSIMD
                                                                      : SIM_ENG_VECTOR,
                                  &t->v, NULL, NULL, NULL),
                         value);
    }
    return (PyObject *)t;
}

static PyObject *nl_ndarray(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = { "shape", "dtype", "buffer", "name", "address",
                                         "*lazy_initialization" };
    PyObject *a[NKI_NARGS(names)];
    (void)m;
    if (PARSE("nl.ndarray", names, a) < 0)
        return NULL;
    /* address= (manual placement) lets a PSUM tensor span banks */
    return alloc_common("nl.ndarray", a[0], a[1], a[2], a[3], false, 0,
                        a[4] && a[4] != Py_None);
}

static PyObject *fill_call(const char *api, float value, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = { "shape", "dtype", "buffer", "name", "*address",
                                         "*lazy_initialization" };
    PyObject *a[NKI_NARGS(names)];
    if (PARSE(api, names, a) < 0)
        return NULL;
    return alloc_common(api, a[0], a[1], a[2], a[3], true, value, false);
}

static PyObject *nl_zeros(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)m;
    return fill_call("nl.zeros", 0.0f, args, nargs, kwnames);
}

static PyObject *nl_ones(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)m;
    return fill_call("nl.ones", 1.0f, args, nargs, kwnames);
}

static PyObject *nl_full(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "shape", "fill_value", "dtype", "buffer", "name",
                                         "*address", "*lazy_initialization" };
    PyObject *a[NKI_NARGS(names)];
    nki_opnd v;
    (void)m;
    if (PARSE("nl.full", names, a) < 0)
        return NULL;
    if (!a[1])
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.full", "fill_value is required");
    if (nki_opnd_from(a[1], "nl.full", "fill_value", &v) < 0)
        return NULL;
    if (v.t)
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.full", "fill_value must be a number");
    return alloc_common("nl.full", a[0], a[2], a[3], a[4], true, v.s, false);
}

/* nl.shared_constant(ndarray, dtype=None): an HBM constant from a host array
 * (read through the buffer protocol: no NumPy dependency). */
static PyObject *nl_shared_constant(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    static const char *const names[] = { "constant", "dtype" };
    PyObject *a[NKI_NARGS(names)];
    Py_buffer view;
    int64_t shape[SIMC_MAX_DIMS];
    int dt = -1;
    char kind;
    nki_tensor *t;
    float *buf;
    int64_t n = 1;
    (void)m;

    if (PARSE("nl.shared_constant", names, a) < 0)
        return NULL;
    if (!a[0] || PyObject_GetBuffer(a[0], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.shared_constant",
                        "the constant must be a NumPy array (a C-contiguous buffer)");
    }
    kind = 'B';
    if (view.format && view.format[0])
        kind = view.format[strlen(view.format) - 1];
    if (view.ndim > SIMC_MAX_DIMS || view.ndim < 1 || !strchr("fdebBhHiIlLqQ?", kind)) {
        PyBuffer_Release(&view);
        return nki_fail(SIM_E_DTYPE, "nl.shared_constant",
                        "array of format '%s' and %d dims is not supported",
                        view.format ? view.format : "?", view.ndim);
    }
    for (int d = 0; d < view.ndim; d++) {
        shape[d] = view.shape[d];
        n *= shape[d];
    }
    if (a[1] && a[1] != Py_None)
        dt = nki_dtype_from(a[1], "nl.shared_constant");
    else
        dt = kind == 'f' || kind == 'd' ? SIM_DT_FLOAT32
           : kind == 'e' ? SIM_DT_FLOAT16
           : kind == '?' ? SIM_DT_BOOL
           : kind == 'b' ? SIM_DT_INT8
           : kind == 'B' ? SIM_DT_UINT8
           : kind == 'h' ? SIM_DT_INT16
           : kind == 'H' ? SIM_DT_UINT16
           : (kind == 'I' || kind == 'L' || kind == 'Q') ? SIM_DT_UINT32 : SIM_DT_INT32;
    if (dt < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    t = nki_tensor_alloc(SIM_MEM_HBM, (sim_dtype)dt, view.ndim, shape, -1, "constant",
                         "nl.shared_constant");
    if (!t) {
        PyBuffer_Release(&view);
        return NULL;
    }
    buf = nki_scratch(0, n);
    for (int64_t i = 0; i < n; i++) {
        const char *p = (const char *)view.buf + i * view.itemsize;
        double x;
        switch (kind) {
        case 'f': { float f; memcpy(&f, p, 4); x = f; break; }
        case 'd': memcpy(&x, p, 8); break;
        case 'e': { uint16_t h; memcpy(&h, p, 2); x = simc_to_f32(SIM_DT_FLOAT16, &h); break; }
        case 'b': x = *(const int8_t *)p; break;
        case 'B': case '?': x = *(const uint8_t *)p; break;
        case 'h': { int16_t v; memcpy(&v, p, 2); x = v; break; }
        case 'H': { uint16_t v; memcpy(&v, p, 2); x = v; break; }
        default:
            if (view.itemsize == 8) { int64_t v; memcpy(&v, p, 8); x = (double)v; }
            else { int32_t v; memcpy(&v, p, 4); x = kind == 'I' ? (double)(uint32_t)v : v; }
            break;
        }
        buf[i] = (float)x;
    }
    PyBuffer_Release(&view);
    simc_scatter(&t->v, buf, NULL);
    return (PyObject *)t;
}

static PyObject *nl_shared_identity_matrix(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                           PyObject *kwnames)
{
    static const char *const names[] = { "n", "dtype" };
    PyObject *a[NKI_NARGS(names)];
    long long n;
    int dt;
    int64_t shape[2];
    nki_tensor *t;
    float *buf;
    (void)m;

    if (PARSE("nl.shared_identity_matrix", names, a) < 0)
        return NULL;
    n = a[0] ? PyLong_AsLongLong(a[0]) : -1;
    if (n < 1 || n > 4096) {
        PyErr_Clear();
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.shared_identity_matrix", "n must be in 1..4096");
    }
    dt = nki_dtype_arg(a[1], SIM_DT_UINT8, "nl.shared_identity_matrix");
    if (dt < 0)
        return NULL;
    shape[0] = shape[1] = n;
    t = nki_tensor_alloc(SIM_MEM_HBM, (sim_dtype)dt, 2, shape, -1, "identity",
                         "nl.shared_identity_matrix");
    if (!t)
        return NULL;
    buf = nki_scratch(0, n * n);
    for (long long i = 0; i < n * n; i++)
        buf[i] = (i / n == i % n) ? 1.0f : 0.0f;
    simc_scatter(&t->v, buf, NULL);
    return (PyObject *)t;
}

/* ===== SPMD and misc ===== */

static int axis_arg(PyObject *o, const char *api)
{
    long v = 0;
    if (o && o != Py_None) {
        v = PyLong_AsLong(o);
        if (PyErr_Occurred() || v < 0 || v > 2) {
            PyErr_Clear();
            nki_fail(SIM_E_BAD_ARGUMENT, api, "axis must be 0, 1 or 2");
            return -1;
        }
    }
    return (int)v;
}

static PyObject *nl_program_id(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = { "axis" };
    PyObject *a[1];
    int ax;
    (void)m;
    if (PARSE("nl.program_id", names, a) < 0 || (ax = axis_arg(a[0], "nl.program_id")) < 0)
        return NULL;
    return PyLong_FromLong(nki_cur ? nki_cur->pid[ax] : 0);
}

static PyObject *nl_num_programs(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = { "axes" };
    PyObject *a[1];
    int ax;
    (void)m;
    if (PARSE("nl.num_programs", names, a) < 0 || (ax = axis_arg(a[0], "nl.num_programs")) < 0)
        return NULL;
    return PyLong_FromLong(nki_cur && ax < nki_cur->grid_ndim ? nki_cur->grid[ax] : 1);
}

static PyObject *nl_program_ndim(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    (void)m;
    (void)args;
    (void)kwnames;
    (void)nargs;
    return PyLong_FromLong(nki_cur ? nki_cur->grid_ndim : 0);
}

/* affine_range / sequential_range / static_range: Python's range (traced
 * loops are unrolled); hint keywords are ignored. */
static PyObject *nl_range(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)m;
    (void)kwnames;
    return PyObject_Vectorcall((PyObject *)&PyRange_Type, args, (size_t)nargs, NULL);
}

static PyObject *nl_ds(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "start", "size" };
    PyObject *a[2], *end, *r;
    (void)m;
    if (PARSE("nl.ds", names, a) < 0)
        return NULL;
    if (!a[0] || !a[1] || !PyIndex_Check(a[0]) || !PyIndex_Check(a[1]))
        return nki_fail(SIM_E_BAD_INDEX, "nl.ds", "start and size must be ints");
    {
        int64_t start, size;
        if (!nki_get_int(a[0], &start) || !nki_get_int(a[1], &size))
            return nki_fail(SIM_E_BAD_INDEX, "nl.ds", "start and size must be 64-bit ints");
        if (start < 0 || size < 1)
            return nki_fail(SIM_E_BAD_INDEX, "nl.ds", "start must be >= 0 and size >= 1, got nl.ds(%lld, %lld)",
                            (long long)start, (long long)size);
    }
    end = PyNumber_Add(a[0], a[1]);
    if (!end)
        return NULL;
    r = PySlice_New(a[0], end, NULL);
    Py_DECREF(end);
    return r;
}

static PyObject *nl_arange(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = { "start", "stop", "step" };
    PyObject *a[3];
    long long lo = 0, hi, st = 1;
    int64_t shape[1], coef[1];
    (void)m;
    if (PARSE("nl.arange", names, a) < 0)
        return NULL;
    if (!a[0])
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.arange", "a size is required");
    if (a[1] && a[1] != Py_None) {
        lo = PyLong_AsLongLong(a[0]);
        hi = PyLong_AsLongLong(a[1]);
    } else {
        hi = PyLong_AsLongLong(a[0]);
    }
    if (a[2] && a[2] != Py_None)
        st = PyLong_AsLongLong(a[2]);
    if (PyErr_Occurred() || st <= 0) {
        PyErr_Clear();
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.arange", "start, stop and step must be ints, step > 0");
    }
    if (hi > lo) {
        /* the span in unsigned arithmetic (hi - lo may pass INT64_MAX); no
         * tensor has more than 2^36 elements, so neither has a longer range */
        uint64_t span = (uint64_t)hi - (uint64_t)lo, size = span / (uint64_t)st + (span % (uint64_t)st != 0);
        if (size > ((uint64_t)1 << 36))
            return nki_fail(SIM_E_LIMIT, "nl.arange", "a range of more than 2^36 values");
        shape[0] = (int64_t)size;
    } else {
        shape[0] = 0;
    }
    coef[0] = st;
    return nki_index_new(1, shape, coef, lo);
}

/* ===== shapes ===== */

static bool bcast_shapes(const nki_opnd *a, const nki_opnd *b, int *nd, int64_t *shape)
{
    const simc_view *va = a->t ? &a->t->v : NULL, *vb = b->t ? &b->t->v : NULL;
    int na = va ? va->ndim : 0, nb = vb ? vb->ndim : 0;
    *nd = na > nb ? na : nb;
    for (int d = 0; d < *nd; d++) {
        int da = d - (*nd - na), db = d - (*nd - nb);
        int64_t sa = da >= 0 ? va->shape[da] : 1, sb = db >= 0 ? vb->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return false;
        shape[d] = sa == 1 ? sb : sa;
    }
    return true;
}

/* Merge o's shape into the broadcast shape (nd, shape); false if it does
 * not broadcast. */
static bool bcast_merge(const nki_opnd *o, int *nd, int64_t *shape)
{
    int64_t out[SIMC_MAX_DIMS] = { 0 };
    const int64_t *os = o->t ? o->t->v.shape : NULL;
    int n = o->t ? o->t->v.ndim : 0, m = n > *nd ? n : *nd;
    for (int d = 0; d < m; d++) {
        int da = d - (m - *nd), db = d - (m - n);
        int64_t sa = da >= 0 ? shape[da] : 1, sb = (db >= 0 && os) ? os[db] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return false;
        out[d] = sa == 1 ? sb : sa;
    }
    memcpy(shape, out, sizeof(int64_t) * (size_t)m);
    *nd = m;
    return true;
}

static PyObject *shape_error(const char *api, const nki_opnd *a, const nki_opnd *b)
{
    char sa[64] = "", sb[64] = "";
    int k = 0;
    for (int d = 0; a->t && d < a->t->v.ndim; d++)
        k += snprintf(sa + k, sizeof(sa) - (size_t)k, d ? "x%lld" : "%lld", (long long)a->t->v.shape[d]);
    k = 0;
    for (int d = 0; b->t && d < b->t->v.ndim; d++)
        k += snprintf(sb + k, sizeof(sb) - (size_t)k, d ? "x%lld" : "%lld", (long long)b->t->v.shape[d]);
    return nki_fail(SIM_E_SHAPE_MISMATCH, api, "operand shapes %s and %s do not broadcast", sa, sb);
}

static int mask_arg(PyObject *mask, int nd, const int64_t *shape, const char *api, uint8_t **m)
{
    return nki_mask_dense(mask, nd, shape, api, m);
}

/* ===== elementwise ===== */

/* Bounds of an index-expression operand: checked under the mask when the
 * operand has the result's shape (elements outside read as NaN otherwise). */
static int opnd_bounds(const nki_opnd *o, const simc_view *out, const uint8_t *mask,
                       const char *api)
{
    if (!o->t || !o->t->oob)
        return 0;
    if (!mask)
        return nki_check_bounds(o->t, NULL, api);
    if (o->t->v.ndim == out->ndim &&
        memcmp(o->t->v.shape, out->shape, sizeof(int64_t) * (size_t)out->ndim) == 0)
        return nki_check_bounds(o->t, mask, api);
    return 0;
}

/* out (new tile or the dst view) = a op b. */
static PyObject *ew_binary(simn_op op, const char *api, PyObject *x, PyObject *y,
                           PyObject *dtype_obj, PyObject *mask_obj, nki_tensor *into)
{
    nki_opnd a, b;
    int nd, dt;
    int64_t shape[SIMC_MAX_DIMS], n;
    nki_tensor *out;
    uint8_t *mask = NULL;
    float *va, *vb;

    if (nki_opnd_from(x, api, "x", &a) < 0 || nki_opnd_from(y, api, "y", &b) < 0)
        return NULL;
    if (!a.t && !b.t)
        return PyFloat_FromDouble(simn_alu(op, a.s, b.s));
    if (!bcast_shapes(&a, &b, &nd, shape))
        return shape_error(api, &a, &b);
    dt = nki_dtype_arg(dtype_obj, nki_promote(&a, &b), api);
    if (dt < 0)
        return NULL;
    if (into) {
        if (into->v.ndim != nd ||
            memcmp(into->v.shape, shape, sizeof(int64_t) * (size_t)nd) != 0)
            return shape_error(api, &a, &b);   /* t op= v cannot grow t */
        out = into;
        Py_INCREF(out);
    } else {
        out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, nd, shape, api);
        if (!out)
            return NULL;
    }
    if (mask_arg(mask_obj, out->v.ndim, out->v.shape, api, &mask) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (opnd_bounds(&a, &out->v, mask, api) < 0 || opnd_bounds(&b, &out->v, mask, api) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    n = simc_view_elems(&out->v);
    if (!simc_dtype_is_float(out->v.dtype) && nki_opnd_is_int(&a) && nki_opnd_is_int(&b) &&
        simn_op_has_int(op)) {   /* integer ALU: exact (bit patterns for bitwise ops) */
        int64_t *ia = nki_read_opnd_i64(&a, nd, shape, 1);
        int64_t *ib = nki_read_opnd_i64(&b, nd, shape, 2);
        if (nki_cur->numerics)
            for (int64_t i = 0; i < n; i++)
                if (!simn_alu_i64(op, ia[i], ib[i], &ia[i]))
                    ia[i] = 0;   /* mod by zero */
        nki_write_i64(&out->v, ia, mask);
        goto emit;
    }
    va = nki_read_opnd(&a, nd, shape, 1);
    vb = nki_read_opnd(&b, nd, shape, 2);
    if (nki_cur->numerics) {
        simn_alu_vec(op, va, vb, 1, va, n);
        nki_write(&out->v, va, mask);
    } else {
        nki_write(&out->v, va, mask);
    }
emit:
    {
        sim_insn *in = nki_emit(a.t && b.t ? SIM_OP_TENSOR_TENSOR : SIM_OP_TENSOR_SCALAR,
                                SIM_ENG_VECTOR, &out->v, a.t ? &a.t->v : NULL,
                                b.t ? &b.t->v : NULL, NULL);
        if (mask)
            in->flags |= SIM_F_MASKED;
    }
    return (PyObject *)out;
}

static PyObject *ew_unary(simn_op op, const char *api, PyObject *x, PyObject *dtype_obj,
                          PyObject *mask_obj)
{
    nki_opnd a;
    int dt;
    nki_tensor *out;
    uint8_t *mask = NULL;
    float *va;
    int64_t n;

    if (nki_opnd_from(x, api, "x", &a) < 0)
        return NULL;
    if (!a.t)
        return PyFloat_FromDouble(simn_act(op, a.s));
    dt = nki_dtype_arg(dtype_obj, a.t->v.dtype, api);
    if (dt < 0)
        return NULL;
    out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, a.t->v.ndim, a.t->v.shape, api);
    if (!out)
        return NULL;
    if (mask_arg(mask_obj, out->v.ndim, out->v.shape, api, &mask) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (opnd_bounds(&a, &out->v, mask, api) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    n = simc_view_elems(&out->v);
    if (!simc_dtype_is_float(out->v.dtype) && !simc_dtype_is_float(a.t->v.dtype) &&
        (op == SIMN_OP_COPY || op == SIMN_OP_IDENTITY || op == SIMN_OP_NEGATIVE ||
         op == SIMN_OP_ABS)) {   /* integer data stays exact */
        int64_t *ia = nki_read_i64(&a.t->v, 1);
        if (nki_cur->numerics && op != SIMN_OP_COPY && op != SIMN_OP_IDENTITY)
            for (int64_t i = 0; i < n; i++)
                if (op == SIMN_OP_NEGATIVE || ia[i] < 0)
                    ia[i] = (int64_t)(0u - (uint64_t)ia[i]);
        nki_write_i64(&out->v, ia, mask);
    } else {
        va = nki_read(&a.t->v, 1);
        if (nki_cur->numerics)
            simn_act_vec(op, va, va, n);
        nki_write(&out->v, va, mask);
    }
    {
        bool copy = op == SIMN_OP_COPY;
        sim_insn *in = nki_emit(copy ? SIM_OP_TENSOR_COPY : SIM_OP_ACTIVATION,
                                copy ? SIM_ENG_VECTOR : SIM_ENG_SCALAR, &out->v, &a.t->v, NULL,
                                NULL);
        in->act_func = copy ? 0 : (uint8_t)op;
        if (mask)
            in->flags |= SIM_F_MASKED;
    }
    return (PyObject *)out;
}

/* ===== reductions ===== */

int nki_parse_axes(PyObject *axis, const simc_view *v, int pdim, bool *red, const char *api)
{
    PyObject *seq;
    Py_ssize_t n;

    for (int d = 0; d < SIMC_MAX_DIMS; d++)
        red[d] = false;
    if (!axis || axis == Py_None) {
        for (int d = 0; d < v->ndim; d++)
            red[d] = d != pdim;
        return 0;
    }
    if (PyLong_Check(axis))
        seq = PyTuple_Pack(1, axis);
    else
        seq = PySequence_Tuple(axis);
    if (!seq) {
        PyErr_Clear();
        nki_fail(SIM_E_BAD_ARGUMENT, api, "axis must be an int or a list of ints");
        return -1;
    }
    n = PyTuple_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        long d = PyLong_AsLong(PyTuple_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            PyErr_Clear();
            Py_DECREF(seq);
            nki_fail(SIM_E_BAD_ARGUMENT, api, "axis must be an int or a list of ints");
            return -1;
        }
        if (d < 0)
            d += v->ndim;
        if (d < 0 || d >= v->ndim || d == pdim) {
            Py_DECREF(seq);
            nki_fail(SIM_E_BAD_ARGUMENT, api,
                     "axis %ld: reductions run over free axes 1..%d (the partition axis 0 "
                     "cannot be reduced)", d, v->ndim - 1);
            return -1;
        }
        red[d] = true;
    }
    Py_DECREF(seq);
    return 0;
}

/* The masked form of nki_reduce_vals: only input elements imask selects
 * (row-major over in's shape) take part; any[o] says whether group o had
 * one (computed with numerics off too).  mean and var count the selected
 * elements; var uses Welford's update. */
static int64_t reduce_vals_masked(simn_op op, const simc_view *in, const bool *red,
                                  const uint8_t *imask, float *out, uint8_t *any, int slot)
{
    int64_t n = simc_view_elems(in), outn = 1, idx[SIMC_MAX_DIMS] = { 0 };
    simn_op bin = simn_op_binary(op);
    const float *x;
    double *mean = NULL, *m2 = NULL;
    int64_t *cnt;

    for (int d = 0; d < in->ndim; d++)
        if (!red[d])
            outn *= in->shape[d];
    x = nki_read(in, slot);
    cnt = kf_calloc((size_t)(outn ? outn : 1), sizeof(*cnt));
    if (op == SIMN_OP_VAR) {
        mean = kf_calloc((size_t)(outn ? outn : 1), sizeof(*mean));
        m2 = kf_calloc((size_t)(outn ? outn : 1), sizeof(*m2));
    }
    for (int64_t o = 0; o < outn; o++)
        out[o] = simn_op_identity(op);
    for (int64_t i = 0; i < n; i++) {
        int64_t o = 0;
        for (int d = 0; d < in->ndim; d++)
            if (!red[d])
                o = o * in->shape[d] + idx[d];
        if (imask[i]) {
            cnt[o]++;
            if (nki_cur->numerics) {
                if (op == SIMN_OP_VAR) {
                    double dlt = (double)x[i] - mean[o];
                    mean[o] += dlt / (double)cnt[o];
                    m2[o] += dlt * ((double)x[i] - mean[o]);
                } else {
                    out[o] = bin == SIMN_OP_ADD ? out[o] + x[i] : simn_alu(bin, out[o], x[i]);
                }
            }
        }
        for (int d = in->ndim - 1; d >= 0; d--) {
            if (++idx[d] < in->shape[d])
                break;
            idx[d] = 0;
        }
    }
    for (int64_t o = 0; o < outn; o++) {
        any[o] = cnt[o] > 0;
        if (op == SIMN_OP_MEAN && cnt[o])
            out[o] /= (float)cnt[o];
        else if (op == SIMN_OP_VAR)
            out[o] = cnt[o] ? (float)(m2[o] / (double)cnt[o]) : 0.0f;
    }
    free(cnt);
    free(mean);
    free(m2);
    return outn;
}

int nki_reduce_masked(simn_op op, const char *api, nki_tensor *in_t, const bool *red,
                      PyObject *mask_obj, const simc_view *out, float *vals, uint8_t **wmask)
{
    const simc_view *in = &in_t->v;
    uint8_t *imask;

    *wmask = NULL;
    if (!mask_obj || mask_obj == Py_None || nki_pred_fits(mask_obj, out->ndim, out->shape) ||
        !nki_pred_fits(mask_obj, in->ndim, in->shape)) {
        /* a mask over the result (or one that fits nothing: the error) */
        if (nki_mask_dense(mask_obj, out->ndim, out->shape, api, wmask) < 0)
            return -1;
        nki_reduce_vals(op, in, red, vals, 1);
        return 0;
    }
    /* a mask over the iteration space: the input's elements */
    if (nki_mask_dense(mask_obj, in->ndim, in->shape, api, &imask) < 0 ||
        nki_check_bounds(in_t, imask, api) < 0)
        return -1;
    *wmask = (uint8_t *)nki_scratch(6, (simc_view_elems(out) + 3) / 4);
    reduce_vals_masked(op, in, red, imask, vals, *wmask, 1);
    return 0;
}

int64_t nki_reduce_vals(simn_op op, const simc_view *in, const bool *red, float *out, int slot)
{
    simc_view p = *in;
    int k = 0;
    int64_t outn = 1, redn = 1;
    float *buf;
    simn_op bin = simn_op_binary(op);

    /* Permute: kept dims first, reduced dims last; gather is then
     * [outn][redn] row-major. */
    for (int d = 0; d < in->ndim; d++)
        if (!red[d]) {
            p.shape[k] = in->shape[d];
            p.strides[k++] = in->strides[d];
            outn *= in->shape[d];
        }
    for (int d = 0; d < in->ndim; d++)
        if (red[d]) {
            p.shape[k] = in->shape[d];
            p.strides[k++] = in->strides[d];
            redn *= in->shape[d];
        }
    buf = nki_read(&p, slot);
    if (!nki_cur->numerics)
        return outn;
    for (int64_t o = 0; o < outn; o++) {
        const float *x = buf + o * redn;
        float acc = simn_op_identity(op);
        if (op == SIMN_OP_VAR) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < redn; i++)
                mean += x[i];
            mean /= (double)(redn ? redn : 1);
            for (int64_t i = 0; i < redn; i++)
                var += ((double)x[i] - mean) * ((double)x[i] - mean);
            out[o] = (float)(var / (double)(redn ? redn : 1));
            continue;
        }
        if (bin == SIMN_OP_ADD)
            for (int64_t i = 0; i < redn; i++)
                acc += x[i];
        else
            for (int64_t i = 0; i < redn; i++)
                acc = simn_alu(bin, acc, x[i]);
        if (op == SIMN_OP_MEAN)
            acc /= (float)(redn ? redn : 1);
        out[o] = acc;
    }
    return outn;
}

static PyObject *reduce_call(simn_op op, const char *api, PyObject *x, PyObject *axis,
                             PyObject *dtype_obj, PyObject *keepdims, PyObject *mask_obj)
{
    nki_tensor *t, *out;
    bool red[SIMC_MAX_DIMS], keep = keepdims && PyObject_IsTrue(keepdims) == 1;
    int64_t shape[SIMC_MAX_DIMS];
    int nd = 0, dt;
    uint8_t *mask = NULL;
    float *vals;

    t = nki_as_tensor(x, api, "x");
    if (!t)
        return NULL;
    if (!mask_obj && nki_check_bounds(t, NULL, api) < 0)
        return NULL;
    if (nki_parse_axes(axis, &t->v, t->pdim < 0 ? 0 : t->pdim, red, api) < 0)
        return NULL;
    for (int d = 0; d < t->v.ndim; d++) {
        if (!red[d])
            shape[nd++] = t->v.shape[d];
        else if (keep)
            shape[nd++] = 1;
    }
    dt = nki_dtype_arg(dtype_obj, t->v.dtype, api);
    if (dt < 0)
        return NULL;
    out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, nd, shape, api);
    if (!out)
        return NULL;
    vals = nki_scratch(3, simc_view_elems(&out->v));
    if (nki_reduce_masked(op, api, t, red, mask_obj, &out->v, vals, &mask) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    nki_write(&out->v, vals, mask);
    {
        sim_insn *in = nki_emit(SIM_OP_TENSOR_REDUCE, SIM_ENG_VECTOR, &out->v, &t->v, NULL, NULL);
        if (mask)
            in->flags |= SIM_F_MASKED;
    }
    return (PyObject *)out;
}

/* The generated nl.<op> callables: unary (x, dtype, mask), binary (x, y,
 * dtype, mask), reductions (x, axis, dtype, keepdims, mask). */
static PyObject *op_dispatch(simn_op op, int kind, const char *api, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const n1[] = { "x", "dtype", "mask", "*engine", "*name" };
    static const char *const n2[] = { "x", "y", "dtype", "mask", "*engine", "*name" };
    static const char *const n3[] = { "x", "axis", "dtype", "keepdims", "mask", "*name",
                                      "*negate" };
    PyObject *a[7];

    if (kind == 1) {
        if (PARSE(api, n1, a) < 0)
            return NULL;
        return ew_unary(op, api, a[0], a[1], a[2]);
    }
    if (kind == 2) {
        if (PARSE(api, n2, a) < 0)
            return NULL;
        if (!a[0] || !a[1])
            return nki_fail(SIM_E_BAD_ARGUMENT, api, "two operands are required");
        return ew_binary(op, api, a[0], a[1], a[2], a[3], NULL);
    }
    if (PARSE(api, n3, a) < 0)
        return NULL;
    return reduce_call(op, api, a[0], a[1], a[2], a[3], a[4]);
}

#define XX(id, name, kind)                                                                   \
    static PyObject *nl_op_##id(PyObject *m, PyObject *const *args, Py_ssize_t nargs,        \
                                PyObject *kwnames)                                           \
    {                                                                                        \
        (void)m;                                                                             \
        return op_dispatch(SIMN_OP_##id, kind, "nl." name, args, nargs, kwnames);            \
    }
SIMN_OP_MAP(XX)
#undef XX

/* ===== data movement ===== */

/* The tensor argument `what` of nl.load/nl.store, which must live in HBM;
 * NULL with the error raised otherwise. */
static nki_tensor *hbm_tensor(PyObject *o, const char *api, const char *what)
{
    nki_tensor *t = nki_as_tensor(o, api, what);
    if (t && t->v.st->mem != SIM_MEM_HBM) {
        nki_fail(SIM_E_WRONG_BUFFER, api, "%s must be in HBM, it is in %s", what,
                 t->v.st->mem == SIM_MEM_SBUF ? "SBUF" : "PSUM");
        return NULL;
    }
    return t;
}

/* nl.load(x[idx, ...]): a new SBUF tile gathered row by row (indirect DMA). */
static PyObject *indirect_load(nki_indirect *ia, PyObject *mask, PyObject *dtype)
{
    nki_tensor *out;
    uint8_t *m = NULL;
    int dt;

    dt = nki_dtype_arg(dtype, ia->base->v.dtype, "nl.load");
    if (dt < 0)
        return NULL;
    out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, ia->base->v.ndim, ia->base->v.shape, "nl.load");
    if (!out)
        return NULL;
    if (mask_arg(mask, out->v.ndim, out->v.shape, "nl.load", &m) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    nki_store_select(&out->v, m);
    if (nki_indirect_move("nl.load", ia, out, false, false, m) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *nl_load(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "src", "mask", "dtype", "*name" };
    PyObject *a[NKI_NARGS(names)];
    nki_tensor *src, *out;
    uint8_t *mask = NULL;
    int dt;
    (void)m;

    if (PARSE("nl.load", names, a) < 0)
        return NULL;
    if (a[0] && nki_indirect_check(a[0]))
        return indirect_load((nki_indirect *)a[0], a[1], a[2]);
    if (!(src = hbm_tensor(a[0], "nl.load", "src")))
        return NULL;
    dt = nki_dtype_arg(a[2], src->v.dtype, "nl.load");
    if (dt < 0)
        return NULL;
    out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, src->v.ndim, src->v.shape, "nl.load");
    if (!out)
        return NULL;
    if (mask_arg(a[1], out->v.ndim, out->v.shape, "nl.load", &mask) < 0 ||
        nki_check_bounds(src, mask, "nl.load") < 0) {
        Py_DECREF(out);
        return NULL;
    }
    {
        simc_view sv = src->v;
        sim_insn *in;
        if (sv.ndim == 1 && out->v.ndim == 2) {   /* (n,) HBM -> (n, 1) tile */
            sv.ndim = 2;
            sv.shape[1] = 1;
            sv.strides[1] = 1;
        }
        nki_copy_vals(&out->v, &sv, mask);
        in = nki_emit(SIM_OP_DMA_COPY, SIM_ENG_DMA, &out->v, &src->v, NULL, NULL);
        if (mask)
            in->flags |= SIM_F_MASKED;
    }
    return (PyObject *)out;
}

static PyObject *nl_store(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "dst", "value", "mask", "*name" };
    PyObject *a[NKI_NARGS(names)];
    nki_tensor *dst;
    uint8_t *mask = NULL;
    (void)m;

    if (PARSE("nl.store", names, a) < 0)
        return NULL;
    if (!a[1])
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.store", "value is required");
    if (a[0] && nki_indirect_check(a[0])) {      /* nl.store(x[idx, ...], value=tile) */
        nki_tensor *val = nki_as_tensor(a[1], "nl.store", "value");
        const simc_view *bv = &((nki_indirect *)a[0])->base->v;
        if (!val || mask_arg(a[2], bv->ndim, bv->shape, "nl.store", &mask) < 0)
            return NULL;
        if (nki_indirect_move("nl.store", (nki_indirect *)a[0], val, true, false, mask) < 0)
            return NULL;
        return Py_NewRef(Py_None);
    }
    if (!(dst = hbm_tensor(a[0], "nl.store", "dst")))
        return NULL;
    if (mask_arg(a[2], dst->v.ndim, dst->v.shape, "nl.store", &mask) < 0)
        return NULL;
    if (nki_assign(dst, a[1], mask, "nl.store") < 0)
        return NULL;
    return Py_NewRef(Py_None);
}

static PyObject *nl_load_transpose2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    static const char *const names[] = { "src", "mask", "dtype", "*name" };
    PyObject *a[NKI_NARGS(names)];
    nki_tensor *src, *out;
    int64_t shape[2];
    int dt;
    uint8_t *mask = NULL;
    (void)m;

    if (PARSE("nl.load_transpose2d", names, a) < 0)
        return NULL;
    src = nki_as_tensor(a[0], "nl.load_transpose2d", "src");
    if (!src)
        return NULL;
    if (src->v.st->mem != SIM_MEM_HBM)
        return nki_fail(SIM_E_WRONG_BUFFER, "nl.load_transpose2d", "src must be in HBM");
    if (src->v.ndim != 2)
        return nki_fail(SIM_E_SHAPE_MISMATCH, "nl.load_transpose2d", "src must be 2-D, it has %d dims",
                        src->v.ndim);
    dt = nki_dtype_arg(a[2], src->v.dtype, "nl.load_transpose2d");
    if (dt < 0)
        return NULL;
    shape[0] = src->v.shape[1];
    shape[1] = src->v.shape[0];
    out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, 2, shape, "nl.load_transpose2d");
    if (!out)
        return NULL;
    if (mask_arg(a[1], 2, shape, "nl.load_transpose2d", &mask) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    nki_dma_transpose(out, src, mask);
    return (PyObject *)out;
}

static PyObject *nl_broadcast_to(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = { "src", "shape" };
    PyObject *a[2];
    nki_tensor *t;
    (void)m;
    if (PARSE("nl.broadcast_to", names, a) < 0)
        return NULL;
    t = nki_as_tensor(a[0], "nl.broadcast_to", "src");
    if (!t || !a[1])
        return t ? nki_fail(SIM_E_BAD_ARGUMENT, "nl.broadcast_to", "shape is required") : NULL;
    return nki_broadcast_view(t, a[1], "nl.broadcast_to");
}

/* ===== matmul and transpose ===== */

static bool pe_dtype_ok(sim_dtype dt)
{
    return simc_dtype_is_float(dt);
}

/* An FP32 operand usable by BLAS in place: a 2-D view with contiguous rows. */
static const float *blas_operand(const simc_view *v, int64_t rows, int64_t cols, int64_t *ld)
{
    simc_settle(v->st);
    if (v->dtype != SIM_DT_FLOAT32 || v->ndim != 2 || v->shape[0] != rows || v->shape[1] != cols ||
        (cols > 1 && v->strides[1] != 1) || !simc_view_in_store(v) || v->st->open)
        return NULL;
    *ld = rows > 1 ? v->strides[0] : cols;
    if (*ld < cols)
        return NULL;
    return (const float *)v->st->data + v->offset;
}

/* The common matmul case computed straight into PSUM storage: an FP32 2-D
 * dst whose accumulation state is the same for every element (fresh,
 * closed, or open), so the first-write rule becomes BLAS's beta.  Operands
 * are converted to FP32 once (or used in place when already FP32).  Returns
 * false (nothing done) when the case does not apply. */
static bool matmul_direct(nki_tensor *dst, const simc_view *sv, const simc_view *mv, int64_t M,
                          int64_t N, int64_t K, int accumulate, bool stat_is_mk, bool *any_acc)
{
    const simc_view *dv = &dst->v;
    simc_store *s = dv->st;
    int64_t ldc, lda, ldb;
    const float *A, *B;
    float *C;
    uint8_t first;
    bool acc;

    if (dv->dtype != SIM_DT_FLOAT32 || dv->ndim != 2 || dv->shape[0] != M || dv->shape[1] != N ||
        (N > 1 && dv->strides[1] != 1) || !s->data || !s->open || !simc_view_in_store(dv))
        return false;
    ldc = M > 1 ? dv->strides[0] : N;
    if (ldc < N)
        return false;
    first = s->open[dv->offset];
    if (accumulate == 0)
        for (int64_t m = 0; m < M; m++)
            if (memchr(s->open + dv->offset + m * ldc, first ? 0 : 1, (size_t)N))
                return false;
    acc = accumulate > 0 || (accumulate == 0 && first);
    if (!stat_is_mk) {
        /* the K loop of a tiled matmul: queued, computed as one GEMM */
        nki_mmq_add(s, dv->offset, ldc, M, N, K, sv, mv, acc);
        for (int64_t m = 0; m < M; m++)
            memset(s->open + dv->offset + m * ldc, 1, (size_t)N);
        *any_acc = acc;
        return true;
    }
    A = stat_is_mk ? blas_operand(sv, M, K, &lda) : blas_operand(sv, K, M, &lda);
    if (!A) {
        A = nki_read(sv, 1);
        lda = stat_is_mk ? K : M;
    }
    B = blas_operand(mv, K, N, &ldb);
    if (!B) {
        B = nki_read(mv, 2);
        ldb = N;
    }
    simc_settle(s);   /* work queued on the tile (another region's run) lands first */
    C = (float *)s->data + dv->offset;
    simn_matmul((int)M, (int)N, (int)K, A, lda, stat_is_mk, B, ldb, C, ldc, acc ? 1.0f : 0.0f);
    for (int64_t m = 0; m < M; m++)
        memset(s->open + dv->offset + m * ldc, 1, (size_t)N);
    *any_acc = acc;
    return true;
}

int nki_partition_start(const nki_tensor *t, const char *api, const char *what)
{
    sim_region r;
    unsigned lo, n;
    bool ok;
    if (t->pdim < 0 || t->oob)
        return 0;
    simc_view_region(&t->v, &r);
    lo = r.part_lo;
    n = r.part_count;
    ok = lo == 0 || (n <= 64 && lo == 64) || (n <= 32 && lo % 32 == 0);
    if (ok)
        return 0;
    nki_fail(SIM_E_PARTITION_START, api, "the %s operand covers %u partitions from partition %u", what, n, lo);
    return -1;
}

int nki_matmul(const char *api, nki_tensor *dst, nki_tensor *stat, nki_tensor *mov, int accumulate,
               bool stat_is_mk, bool is_transpose)
{
    return nki_matmul_rows(api, dst, stat, mov, accumulate, stat_is_mk, is_transpose, 1);
}

int nki_matmul_rows(const char *api, nki_tensor *dst, nki_tensor *stat, nki_tensor *mov,
                    int accumulate, bool stat_is_mk, bool is_transpose, int rows)
{
    const simc_view *sv = &stat->v, *mv = &mov->v;
    int64_t K, M, N, Km, Kr;
    float *A, *B, *C;
    bool any_acc = false;
    sim_insn *in;

    if (sv->st->mem != SIM_MEM_SBUF || mv->st->mem != SIM_MEM_SBUF)
        return (nki_fail(SIM_E_WRONG_BUFFER, api, "the %s operand must be in SBUF, it is in %s",
                        sv->st->mem != SIM_MEM_SBUF ? "stationary" : "moving",
                        (sv->st->mem != SIM_MEM_SBUF ? sv : mv)->st->mem == SIM_MEM_HBM ? "HBM" : "PSUM"), -1);
    if (dst->v.st->mem != SIM_MEM_PSUM)
        return (nki_fail(SIM_E_WRONG_BUFFER, api, "the result must be written to PSUM, dst is in %s",
                        dst->v.st->mem == SIM_MEM_HBM ? "HBM" : "SBUF"), -1);
    if (!pe_dtype_ok(sv->dtype) || !pe_dtype_ok(mv->dtype))
        return (nki_fail(SIM_E_DTYPE, api,
                        "the Tensor engine multiplies float operands (fp32/bf16/fp16/fp8), got %s and %s",
                        sim_dtype_name(sv->dtype), sim_dtype_name(mv->dtype)), -1);
    if (nki_check_bounds(stat, NULL, api) < 0 || nki_check_bounds(mov, NULL, api) < 0)
        return -1;
    /* NeuronCore-v2 accumulates and writes matmul results in fp32 only
     * (neuron-hardware.md; PSUM may hold BF16 from NeuronCore-v4, and the
     * reference says nothing against it on v3). */
    if (!is_transpose && nki_cur->tgt->nc_gen <= 2 && dst->v.dtype != SIM_DT_FLOAT32)
        return (nki_fail(SIM_E_DTYPE, api,
                         "rule fp32-psum-output: the NeuronCore-v2 Tensor engine (%s) writes fp32 PSUM "
                         "only, the result tile is %s; make it float32 and cast when copying it out",
                         nki_cur->tgt->name, sim_dtype_name(dst->v.dtype)), -1);
    if ((!stat_is_mk && nki_partition_start(stat, api, "stationary") < 0) ||
        nki_partition_start(mov, api, "moving") < 0 || nki_partition_start(dst, api, "result") < 0)
        return -1;
    if (stat_is_mk) {            /* legacy nl.matmul(x, y): x is (M, K) */
        M = nki_view_parts(stat);
        K = simc_view_elems(sv) / (M ? M : 1);
    } else {
        K = nki_view_parts(stat);
        M = simc_view_elems(sv) / (K ? K * rows : 1);
    }
    Km = nki_view_parts(mov);
    N = simc_view_elems(mv) / (Km ? Km * rows : 1);
    Kr = K * rows;               /* double_row: each partition holds `rows` contraction rows */
    if (Km != K)
        return (nki_fail(SIM_E_SHAPE_MISMATCH, api,
                        "contraction sizes differ: stationary K=%lld, moving K=%lld",
                        (long long)K, (long long)Km), -1);
    if (K > 128 || M > 128 || N > 512)
        return (nki_fail(SIM_E_MATMUL_LIMIT, api, "K=%lld M=%lld N=%lld (limits K<=128, M<=128, N<=512)",
                        (long long)K, (long long)M, (long long)N), -1);
    if (simc_view_elems(&dst->v) != M * N || nki_view_parts(dst) != M)
        return (nki_fail(SIM_E_SHAPE_MISMATCH, api,
                        "dst must be (%lld, %lld) for stationary K=%lld M=%lld and moving N=%lld",
                        (long long)M, (long long)N, (long long)K, (long long)M, (long long)N), -1);
    if (nki_check_bounds(dst, NULL, api) < 0)
        return -1;
    {
        sim_region dr;
        simc_view_region(&dst->v, &dr);
        /* blocks of a PSUM tensor each lie inside one bank (nki_tensor_alloc_ex) */
        uint64_t unit = dst->v.st->blk_bytes ? dst->v.st->blk_bytes : SIMC_PSUM_BANK_BYTES;
        if (dr.byte_hi > dr.byte_lo && dr.byte_lo / unit != (dr.byte_hi - 1) / unit)
            return (nki_fail(SIM_E_PSUM_TILE, api,
                             "the matmul result spans bytes [%llu, %llu) of a partition, across "
                             "a 2048-byte bank boundary",
                             (unsigned long long)dr.byte_lo, (unsigned long long)dr.byte_hi), -1);
    }
    /* rows > 1: the operands are (K, rows, M) and (K, rows, N); read row-major
     * they are (K*rows, M) and (K*rows, N), the contraction over both. */
    if (!nki_cur->numerics || !matmul_direct(dst, sv, mv, M, N, Kr, accumulate, stat_is_mk, &any_acc)) {
        A = nki_read(sv, 1);
        B = nki_read(mv, 2);
        C = nki_scratch(3, M * N);
        if (nki_cur->numerics)
            simn_matmul((int)M, (int)N, (int)Kr, A, stat_is_mk ? K : M, stat_is_mk, B, N, C, N, 0.0f);
        simc_scatter_accum(&dst->v, C, accumulate, NULL, &any_acc);
    }
    in = nki_emit(is_transpose ? SIM_OP_PE_TRANSPOSE : SIM_OP_MATMUL, SIM_ENG_TENSOR, &dst->v, sv,
                  mv, NULL);
    in->mm_k = (uint32_t)K;
    in->mm_m = (uint32_t)M;
    in->mm_n = (uint32_t)N;
    in->partitions = (uint32_t)K;
    in->elems_per_part = (uint64_t)N;
    in->flops = 2ull * (uint64_t)Kr * (uint64_t)M * (uint64_t)N;
    if (rows > 1)
        in->flags |= SIM_F_DOUBLE_ROW;
    if (any_acc)
        in->flags |= SIM_F_ACCUMULATE;
    if (sv->dtype == SIM_DT_FLOAT32 || mv->dtype == SIM_DT_FLOAT32)
        in->flags |= SIM_F_FP32_PE;
    if (is_transpose)
        in->flags |= SIM_F_TRANSPOSE;
    return 0;
}

/* A fresh PSUM (M, N) fp32 tile holding stat.T @ mov (legacy results). */
nki_tensor *nki_matmul_tile(const char *api, nki_tensor *stat, nki_tensor *mov, bool stat_is_mk,
                            PyObject *mask_obj)
{
    return nki_matmul_tile_rows(api, stat, mov, stat_is_mk, mask_obj, 1);
}

nki_tensor *nki_matmul_tile_rows(const char *api, nki_tensor *stat, nki_tensor *mov,
                                 bool stat_is_mk, PyObject *mask_obj, int rows)
{
    int64_t shape[2];
    int64_t K, M, N;
    nki_tensor *out;
    uint8_t *mask = NULL;

    if (stat_is_mk) {
        M = nki_view_parts(stat);
        K = simc_view_elems(&stat->v) / (M ? M : 1);
    } else {
        K = nki_view_parts(stat);
        M = simc_view_elems(&stat->v) / (K ? K * rows : 1);
    }
    N = simc_view_elems(&mov->v) / (nki_view_parts(mov) ? nki_view_parts(mov) * rows : 1);
    if (K > 128 || M > 128 || N > 512)
        return (nki_tensor *)nki_fail(SIM_E_MATMUL_LIMIT, api,
                                      "K=%lld M=%lld N=%lld (limits K<=128, M<=128, N<=512)",
                                      (long long)K, (long long)M, (long long)N);
    shape[0] = M;
    shape[1] = N;
    out = nki_new_tile(SIM_MEM_PSUM, SIM_DT_FLOAT32, 2, shape, api);
    if (!out)
        return NULL;
    if (nki_mask_dense(mask_obj, 2, shape, api, &mask) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    nki_store_select(&out->v, mask);   /* before the MATMUL is recorded into it */
    if (nki_matmul_rows(api, out, stat, mov, -1, stat_is_mk, false, rows) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (mask)
        nki_cur->rec->insns[nki_cur->rec->n_insns - 1].flags |= SIM_F_MASKED;
    out->mm_result = true;
    out->mm_insn = (int64_t)nki_cur->rec->n_insns - 1;
    return out;
}

static PyObject *nl_matmul(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "x", "y", "transpose_x", "mask", "*name" };
    PyObject *a[NKI_NARGS(names)];
    nki_tensor *x, *y;
    (void)m;
    if (PARSE("nl.matmul", names, a) < 0)
        return NULL;
    x = nki_as_tensor(a[0], "nl.matmul", "x");
    y = x ? nki_as_tensor(a[1], "nl.matmul", "y") : NULL;
    if (!y)
        return NULL;
    /* TensorE reads SBUF only; nl.matmul takes SBUF tiles (it inserts a
     * transpose of x, not a copy out of PSUM or HBM) */
    for (int i = 0; i < 2; i++) {
        const nki_tensor *o = i ? y : x;
        if (o->v.st->mem != SIM_MEM_SBUF)
            return nki_fail(SIM_E_WRONG_BUFFER, "nl.matmul",
                            "%s must be an SBUF tile, it is in %s (copy it to SBUF first, e.g. "
                            "nl.copy(%s) or nisa.tensor_copy)",
                            i ? "y" : "x", o->v.st->mem == SIM_MEM_PSUM ? "PSUM" : "HBM",
                            i ? "y" : "x");
    }
    return (PyObject *)nki_matmul_tile("nl.matmul", x, y, !(a[2] && PyObject_IsTrue(a[2]) == 1),
                                       a[3]);
}

const int *nki_dma_perm(int ndim)
{
    static const int p2[] = { 1, 0 }, p3[] = { 2, 1, 0 }, p4[] = { 3, 1, 2, 0 };
    return ndim == 2 ? p2 : ndim == 3 ? p3 : ndim == 4 ? p4 : NULL;
}

/* dst = src permuted as nki_dma_perm says, by DMA. */
void nki_dma_transpose(nki_tensor *dst, const nki_tensor *src, const uint8_t *mask)
{
    simc_view tv = src->v;
    const int *perm = nki_dma_perm(src->v.ndim);
    float *vals;

    for (int i = 0; perm && i < src->v.ndim; i++) {
        tv.shape[i] = src->v.shape[perm[i]];
        tv.strides[i] = src->v.strides[perm[i]];
    }
    vals = nki_read(&tv, 0);
    nki_write(&dst->v, vals, mask);
    nki_emit(SIM_OP_DMA_TRANSPOSE, SIM_ENG_DMA, &dst->v, &src->v, NULL, NULL);
}

int nki_transpose(const char *api, nki_tensor *dst, nki_tensor *src, sim_engine eng)
{
    int64_t P = nki_view_parts(src), F = simc_view_elems(&src->v) / (P ? P : 1);
    simc_view tv;
    float *vals, *out;

    if (nki_view_parts(dst) != F || simc_view_elems(&dst->v) != P * F)
        return (nki_fail(SIM_E_SHAPE_MISMATCH, api, "transposing (%lld, %lld) needs a (%lld, %lld) dst",
                        (long long)P, (long long)F, (long long)F, (long long)P), -1);
    if (eng == SIM_ENG_TENSOR && (P > 128 || F > 128))
        return (nki_fail(SIM_E_MATMUL_LIMIT, api, "the Tensor engine transposes at most 128x128, got %lldx%lld",
                        (long long)P, (long long)F), -1);
    if (eng == SIM_ENG_TENSOR && dst->v.st->mem != SIM_MEM_PSUM)
        return (nki_fail(SIM_E_WRONG_BUFFER, api, "a Tensor engine transpose writes PSUM"), -1);
    if (eng == SIM_ENG_VECTOR && (P > 32 || F > 32))
        return (nki_fail(SIM_E_SHAPE_MISMATCH, api, "the Vector engine transposes at most 32x32, got %lldx%lld",
                        (long long)P, (long long)F), -1);
    tv = src->v;
    vals = nki_read(&tv, 1);
    out = nki_scratch(3, P * F);
    if (nki_cur->numerics)
        for (int64_t i = 0; i < P; i++)
            for (int64_t j = 0; j < F; j++)
                out[j * P + i] = vals[i * F + j];
    nki_write(&dst->v, out, NULL);
    {
        sim_insn *in = nki_emit(eng == SIM_ENG_TENSOR ? SIM_OP_PE_TRANSPOSE : SIM_OP_VE_TRANSPOSE,
                                eng, &dst->v, &src->v, NULL, NULL);
        if (eng == SIM_ENG_TENSOR) {
            in->mm_k = (uint32_t)P;
            in->mm_m = (uint32_t)F;
            in->mm_n = (uint32_t)P;
            in->flags |= SIM_F_TRANSPOSE;
            /* fp32 data passes the PE array at the fp32 matmul rate (S7) */
            if (src->v.dtype == SIM_DT_FLOAT32)
                in->flags |= SIM_F_FP32_PE;
            in->flops = 2ull * (uint64_t)P * (uint64_t)P * (uint64_t)F;
        }
    }
    return 0;
}

static PyObject *nl_transpose(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    static const char *const names[] = { "x", "dtype", "mask", "*name" };
    PyObject *a[NKI_NARGS(names)];
    nki_tensor *x, *out;
    int64_t shape[2], P, F;
    int dt;
    (void)m;
    if (PARSE("nl.transpose", names, a) < 0)
        return NULL;
    x = nki_as_tensor(a[0], "nl.transpose", "x");
    if (!x)
        return NULL;
    dt = nki_dtype_arg(a[1], x->v.dtype, "nl.transpose");
    if (dt < 0)
        return NULL;
    P = nki_view_parts(x);
    F = simc_view_elems(&x->v) / (P ? P : 1);
    shape[0] = F;
    shape[1] = P;
    out = nki_new_tile(SIM_MEM_PSUM, (sim_dtype)dt, 2, shape, "nl.transpose");
    if (!out)
        return NULL;
    if (nki_legacy_mask(a[2], out, "nl.transpose") < 0 ||
        nki_transpose("nl.transpose", out, x, SIM_ENG_TENSOR) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* nl.finfo(dtype): a float dtype's limits as the simulator rounds them
 * (bits, eps, max, min, tiny = smallest_normal, dtype), read off the
 * dtype's own conversion for 8- and 16-bit formats. */
static int finfo_small(sim_dtype dt, double *eps, double *max, double *tiny)
{
    unsigned bits = 8 * sim_dtype_size(dt);
    uint32_t half = 1u << (bits - 1), n = 0;
    float *v = nki_scratch(3, (int64_t)half);

    *eps = *max = *tiny = 0.0;
    for (uint32_t i = 1; i < half; i++) {   /* positive patterns grow in value */
        uint8_t b[2] = { (uint8_t)i, (uint8_t)(i >> 8) };
        uint16_t h = (uint16_t)i;
        float x = bits == 8 ? simc_to_f32(dt, b) : simc_to_f32(dt, &h);
        if (!isfinite(x))
            break;
        v[n++] = x;
    }
    for (uint32_t i = 0; i < n && *eps == 0.0; i++)
        if (v[i] > 1.0f)
            *eps = (double)v[i] - 1.0;
    /* the smallest normal: the first value whose step up is value * eps
     * (steps between subnormals are smaller) */
    for (uint32_t i = 0; i + 1 < n && *tiny == 0.0; i++)
        if ((double)v[i + 1] - (double)v[i] == (double)v[i] * *eps)
            *tiny = v[i];
    *max = n ? v[n - 1] : 0.0;
    return *eps > 0.0 && *tiny > 0.0 ? 0 : -1;
}

static PyObject *nl_finfo(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "dtype" };
    PyObject *a[1], *types, *ns, *kw;
    double eps, max, tiny;
    int dt;
    (void)m;
    if (PARSE("nl.finfo", names, a) < 0)
        return NULL;
    if (!a[0])
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.finfo", "finfo takes a dtype");
    dt = nki_dtype_from(a[0], "nl.finfo");
    if (dt < 0)
        return NULL;
    switch ((sim_dtype)dt) {
    case SIM_DT_FLOAT32:
        eps = FLT_EPSILON;
        max = FLT_MAX;
        tiny = FLT_MIN;
        break;
    case SIM_DT_TFLOAT32:   /* fp32's exponent, 10 mantissa bits */
        eps = ldexp(1.0, -10);
        max = ldexp(2.0 - ldexp(1.0, -10), 127);
        tiny = FLT_MIN;
        break;
    case SIM_DT_BFLOAT16:
    case SIM_DT_FLOAT16:
    case SIM_DT_FLOAT8_E4M3:
    case SIM_DT_FLOAT8_E5M2:
    case SIM_DT_FLOAT8_E4M3FN:
        if (finfo_small((sim_dtype)dt, &eps, &max, &tiny) < 0)
            return nki_fail(SIM_E_DTYPE, "nl.finfo", "no limits for %s", sim_dtype_name((sim_dtype)dt));
        break;
    default:
        return nki_fail(SIM_E_DTYPE, "nl.finfo", "finfo takes a float dtype, got %s",
                        sim_dtype_name((sim_dtype)dt));
    }
    types = PyImport_ImportModule("types");
    if (!types)
        return NULL;
    kw = Py_BuildValue("{s:i,s:d,s:d,s:d,s:d,s:d,s:O}", "bits", (int)(8 * sim_dtype_size((sim_dtype)dt)),
                       "eps", eps, "max", max, "min", -max, "tiny", tiny, "smallest_normal", tiny,
                       "dtype", nki_dtype_get((sim_dtype)dt));
    ns = kw ? PyObject_GetAttrString(types, "SimpleNamespace") : NULL;
    Py_DECREF(types);
    if (!ns) {
        Py_XDECREF(kw);
        return NULL;
    }
    {
        PyObject *empty = PyTuple_New(0);
        PyObject *r = empty ? PyObject_Call(ns, empty, kw) : NULL;
        Py_XDECREF(empty);
        Py_DECREF(ns);
        Py_DECREF(kw);
        return r;
    }
}

static PyObject *nl_device_print(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    (void)m;
    (void)args;
    (void)nargs;
    (void)kwnames;
    return Py_NewRef(Py_None);
}

/* nl.where(condition, x, y): x where condition is non-zero, else y (tiles
 * or scalars, broadcast), into a new SBUF tile. */
static PyObject *nl_where(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "condition", "x", "y", "dtype", "mask", "*name" };
    const char *api = "nl.where";
    PyObject *a[NKI_NARGS(names)];
    nki_opnd c, x, y;
    int64_t shape[SIMC_MAX_DIMS], n;
    int nd, dt;
    nki_tensor *out;
    uint8_t *mask = NULL;
    float *vc, *vx, *vy;
    (void)m;

    if (PARSE(api, names, a) < 0)
        return NULL;
    if (!a[0] || !a[1] || !a[2])
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "condition, x and y are required");
    if (nki_opnd_from(a[0], api, "condition", &c) < 0 || nki_opnd_from(a[1], api, "x", &x) < 0 ||
        nki_opnd_from(a[2], api, "y", &y) < 0)
        return NULL;
    if (!c.t)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "condition must be a tile");
    nd = 0;
    if (!bcast_merge(&c, &nd, shape) || !bcast_merge(&x, &nd, shape) || !bcast_merge(&y, &nd, shape))
        return nki_fail(SIM_E_SHAPE_MISMATCH, api, "condition, x and y do not broadcast together");
    dt = nki_dtype_arg(a[3], nki_promote(&x, &y), api);
    if (dt < 0 || !(out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, nd, shape, api)))
        return NULL;
    if (mask_arg(a[4], out->v.ndim, out->v.shape, api, &mask) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    n = simc_view_elems(&out->v);
    vc = nki_read_opnd(&c, nd, shape, 1);
    vx = nki_read_opnd(&x, nd, shape, 2);
    vy = nki_read_opnd(&y, nd, shape, 3);
    if (nki_cur->numerics)
        for (int64_t i = 0; i < n; i++)
            vx[i] = vc[i] != 0.0f ? vx[i] : vy[i];
    nki_write(&out->v, vx, mask);
    nki_emit(SIM_OP_SELECT, SIM_ENG_VECTOR, &out->v, &c.t->v, x.t ? &x.t->v : NULL,
             y.t ? &y.t->v : NULL);
    return (PyObject *)out;
}

/* ===== tile operators ===== */

static PyObject *tile_binop(simn_op op, const char *api, PyObject *a, PyObject *b)
{
    if (!nki_tensor_check(a) && !nki_tensor_check(b))
        return Py_NewRef(Py_NotImplemented);
    if (nki_need_run(api) < 0)
        return NULL;
    if ((!nki_tensor_check(a) && !PyNumber_Check(a)) || (!nki_tensor_check(b) && !PyNumber_Check(b)))
        return Py_NewRef(Py_NotImplemented);
    return ew_binary(op, api, a, b, NULL, NULL, NULL);
}

static PyObject *t_add(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_ADD, "tile +", a, b); }
static PyObject *t_sub(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_SUBTRACT, "tile -", a, b); }
static PyObject *t_mul(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_MULTIPLY, "tile *", a, b); }
static PyObject *t_div(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_DIVIDE, "tile /", a, b); }
static PyObject *t_pow(PyObject *a, PyObject *b, PyObject *c)
{
    (void)c;
    return tile_binop(SIMN_OP_POWER, "tile **", a, b);
}
static PyObject *t_mod(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_MOD, "tile %", a, b); }
static PyObject *t_and(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_BITWISE_AND, "tile &", a, b); }
static PyObject *t_or(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_BITWISE_OR, "tile |", a, b); }
static PyObject *t_xor(PyObject *a, PyObject *b) { return tile_binop(SIMN_OP_BITWISE_XOR, "tile ^", a, b); }

static PyObject *t_neg(PyObject *a)
{
    PyObject *m1 = PyFloat_FromDouble(-1.0), *r;
    if (!m1)
        return NULL;
    r = ew_binary(SIMN_OP_MULTIPLY, "tile -", a, m1, NULL, NULL, NULL);
    Py_DECREF(m1);
    return r;
}

/* t op= v writes in place into t's view (read-modify-write).  A legacy
 * matmul result added into a PSUM tile becomes an accumulating matmul: the
 * MATMUL instruction that produced it is retargeted at t. */
static PyObject *tile_inplace(simn_op op, const char *api, PyObject *a, PyObject *b)
{
    nki_tensor *t;
    if (!nki_tensor_check(a))
        return Py_NewRef(Py_NotImplemented);
    if (nki_need_run(api) < 0)
        return NULL;
    t = (nki_tensor *)a;
    if (op == SIMN_OP_ADD && nki_tensor_check(b) && ((nki_tensor *)b)->mm_result &&
        t->v.st->mem == SIM_MEM_PSUM) {
        nki_tensor *r = (nki_tensor *)b;
        sim_record *rec = nki_cur->rec;
        const uint8_t *sel;
        float *vb;
        bool any_acc = false;
        int64_t n = simc_view_elems(&t->v);
        if (simc_view_elems(&r->v) != n || t->v.shape[t->pdim < 0 ? 0 : t->pdim] != r->v.shape[0])
            return nki_fail(SIM_E_SHAPE_MISMATCH, api,
                            "accumulating a (%lld, %lld) matmul result into a tile of %lld elements",
                            (long long)r->v.shape[0], (long long)r->v.shape[1], (long long)n);
        if (nki_check_bounds(t, NULL, api) < 0)
            return NULL;
        /* The product goes into acc as a matmul into acc would, under the
         * PSUM first-write rule: it overwrites elements whose accumulation
         * is not open (a fresh tile, or one read or written by another
         * instruction since its last matmul) and adds to open ones.  Only
         * the elements a masked matmul computed are written. */
        sel = nki_sel_mask(&r->v, NULL, 7);
        vb = nki_read(&r->v, 2);
        simc_scatter_accum(&t->v, vb, 0, sel, &any_acc);
        /* Retarget only when the MATMUL is the last instruction (nothing read
         * its result tile meanwhile): `acc += nl.matmul(...)`. */
        if (r->mm_insn >= 0 && (size_t)r->mm_insn + 1 == rec->n_insns &&
            rec->insns[r->mm_insn].dst[0].alloc == r->v.st->alloc_id) {
            sim_insn *in = &rec->insns[r->mm_insn];
            nki_store_written(t->v.st);
            simc_view_region(&t->v, &in->dst[0]);
            if (any_acc)
                in->flags |= SIM_F_ACCUMULATE;
            else
                in->flags = (uint8_t)(in->flags & ~SIM_F_ACCUMULATE);
        } else {
            nki_emit(SIM_OP_TENSOR_TENSOR, SIM_ENG_VECTOR, &t->v, &t->v, &r->v, NULL);
        }
        Py_INCREF(a);
        return a;
    }
    if (!nki_tensor_check(b) && !PyNumber_Check(b))
        return Py_NewRef(Py_NotImplemented);
    return ew_binary(op, api, a, b, NULL, NULL, t);
}

static PyObject *t_iadd(PyObject *a, PyObject *b) { return tile_inplace(SIMN_OP_ADD, "tile +=", a, b); }
static PyObject *t_isub(PyObject *a, PyObject *b) { return tile_inplace(SIMN_OP_SUBTRACT, "tile -=", a, b); }
static PyObject *t_imul(PyObject *a, PyObject *b) { return tile_inplace(SIMN_OP_MULTIPLY, "tile *=", a, b); }
static PyObject *t_idiv(PyObject *a, PyObject *b) { return tile_inplace(SIMN_OP_DIVIDE, "tile /=", a, b); }

PyNumberMethods nki_tensor_as_number = {
    .nb_add = t_add,
    .nb_subtract = t_sub,
    .nb_multiply = t_mul,
    .nb_true_divide = t_div,
    .nb_remainder = t_mod,
    .nb_power = t_pow,
    .nb_negative = t_neg,
    .nb_and = t_and,
    .nb_or = t_or,
    .nb_xor = t_xor,
    .nb_inplace_add = t_iadd,
    .nb_inplace_subtract = t_isub,
    .nb_inplace_multiply = t_imul,
    .nb_inplace_true_divide = t_idiv,
};

PyObject *nki_tensor_richcompare(PyObject *a, PyObject *b, int op)
{
    static const simn_op map[] = { SIMN_OP_LESS, SIMN_OP_LESS_EQUAL, SIMN_OP_EQUAL,
                                   SIMN_OP_NOT_EQUAL, SIMN_OP_GREATER, SIMN_OP_GREATER_EQUAL };
    if ((op == Py_EQ || op == Py_NE) && (!nki_tensor_check(a) || !nki_tensor_check(b)) &&
        !PyNumber_Check(nki_tensor_check(a) ? b : a))
        return Py_NewRef(Py_NotImplemented);
    return tile_binop(map[op], "tile comparison", a, b);
}

/* t[idx] = value: copy (with cast and broadcast) into the indexed view. */
int nki_tensor_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    PyObject *view;
    int rc;

    if (nki_need_run("tensor[...] =") < 0)
        return -1;
    if (!value) {
        nki_fail(SIM_E_BAD_ARGUMENT, "tensor[...]", "tensor elements cannot be deleted");
        return -1;
    }
    view = nki_tensor_subscript(self, key);
    if (!view)
        return -1;
    rc = nki_assign((nki_tensor *)view, value, NULL, "tensor[...] =");
    Py_DECREF(view);
    return rc;
}

/* nl.nc(n) and nl.spmd_dim(a, b, ...): a launch dimension of a * b * ...
 * programs whose sub-dimensions say how they spread over NeuronCores
 * (`spmd_dim(nl.nc(2), 2)` and `spmd_dim(2, nl.nc(2))` are 4 programs on 2
 * cores, `nl.nc(2) * 2` the same).  One simulated core runs every program,
 * so nl.nc(n) is n and a spmd_dim the product (program ids are the same). */
static PyObject *nl_nc(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = { "n" };
    PyObject *a[1];
    int64_t n;
    (void)m;
    if (PARSE("nl.nc", names, a) < 0)
        return NULL;
    if (!a[0] || !nki_get_int(a[0], &n) || n < 1)
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.nc", "the core count must be a positive int");
    return PyLong_FromLongLong(n);
}

static PyObject *nl_spmd_dim(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    int64_t n = 1, v;
    (void)m;
    if (nki_need_run("nl.spmd_dim") < 0)
        return NULL;
    if (kwnames && PyTuple_GET_SIZE(kwnames))
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.spmd_dim", "spmd_dim takes positional sizes");
    if (nargs < 1)
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.spmd_dim", "spmd_dim needs at least one size");
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!nki_get_int(args[i], &v) || v < 1)
            return nki_fail(SIM_E_BAD_ARGUMENT, "nl.spmd_dim",
                            "sizes must be positive ints or nl.nc(n), argument %d is not",
                            (int)i + 1);
        if (v > INT32_MAX / n)
            return nki_fail(SIM_E_LIMIT, "nl.spmd_dim", "a launch dimension of more than %d programs",
                            INT32_MAX);
        n *= v;
    }
    return PyLong_FromLongLong(n);
}

/* ===== method table ===== */

PyMethodDef nki_language_methods[] = {
    { "ndarray", FASTKW(nl_ndarray), "allocate a tensor (uninitialized: NaN / 4)" },
    { "zeros", FASTKW(nl_zeros), "allocate a zero-filled tensor" },
    { "ones", FASTKW(nl_ones), "allocate a one-filled tensor" },
    { "full", FASTKW(nl_full), "allocate a filled tensor" },
    { "shared_constant", FASTKW(nl_shared_constant), "HBM constant from a host array" },
    { "shared_identity_matrix", FASTKW(nl_shared_identity_matrix), "HBM identity matrix" },
    { "program_id", FASTKW(nl_program_id), "SPMD program index along an axis" },
    { "num_programs", FASTKW(nl_num_programs), "SPMD grid size along an axis" },
    { "program_ndim", FASTKW(nl_program_ndim), "SPMD grid dims" },
    { "affine_range", FASTKW(nl_range), "range()" },
    { "sequential_range", FASTKW(nl_range), "range()" },
    { "static_range", FASTKW(nl_range), "range()" },
    { "ds", FASTKW(nl_ds), "slice(start, start + size)" },
    { "arange", FASTKW(nl_arange), "index expression 0..n-1" },
    { "load", FASTKW(nl_load), "HBM -> new SBUF tile" },
    { "store", FASTKW(nl_store), "tile -> HBM" },
    { "load_transpose2d", FASTKW(nl_load_transpose2d), "HBM [a, b] -> SBUF [b, a]" },
    { "broadcast_to", FASTKW(nl_broadcast_to), "broadcast size-1 dims (a view)" },
    { "matmul", FASTKW(nl_matmul), "x @ y (or x.T @ y) into a new PSUM tile" },
    { "transpose", FASTKW(nl_transpose), "transpose into a new PSUM tile" },
    { "device_print", FASTKW(nl_device_print), "ignored by the simulator" },
    { "finfo", FASTKW(nl_finfo), "a float dtype's limits (bits, eps, max, min, tiny)" },
    { "where", FASTKW(nl_where), "select x or y by a condition tile" },
    { "no_reorder", FASTKW(nki_nullcontext), "scheduling hint (a no-op context manager)" },
    { "nc", FASTKW(nl_nc), "a NeuronCore count for spmd_dim" },
    { "spmd_dim", FASTKW(nl_spmd_dim), "a launch dimension spread over cores" },
#define XX(id, name, kind) { name, FASTKW(nl_op_##id), "nl." name },
    SIMN_OP_MAP(XX)
#undef XX
    { "__getattr__", nki_mod_getattr, METH_O, "unsupported API" },
    { NULL, NULL, 0, NULL },
};
