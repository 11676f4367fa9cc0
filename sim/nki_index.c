/* nki_index — the legacy index machinery: affine index expressions
 * (nl.arange, nl.mgrid with .p/.x, arithmetic with ints and program ids),
 * their comparisons as dense predicates for mask= and affine_select, and
 * predicate logic (& | ^ ~) (see nki_internal.h). */
#include "nki_internal.h"

#include <string.h>

#include "kf_alloc.h"

/* ===== index expressions ===== */

PyObject *nki_index_new(int ndim, const int64_t *shape, const int64_t *coef, int64_t c)
{
    nki_index *e = PyObject_New(nki_index, &nki_IndexType);
    if (!e)
        return NULL;
    e->ndim = ndim;
    e->axes = 0;
    for (int k = 0; k < ndim; k++) {
        if (coef[k] != 0)
            e->axes |= 1u << k;
        e->shape[k] = shape[k];
        e->coef[k] = shape[k] == 1 ? 0 : coef[k];
    }
    e->c = c;
    return (PyObject *)e;
}

static void index_dealloc(PyObject *o)
{
    PyObject_Free(o);
}

/* Combine a and b (index or int) as a*sa + b*sb. */
static PyObject *index_lin(PyObject *a, int64_t sa, PyObject *b, int64_t sb)
{
    int64_t shape[SIMC_MAX_DIMS], coef[SIMC_MAX_DIMS] = { 0 }, c = 0, iv, t;
    int nd = 0;
    PyObject *ops[2] = { a, b };
    int64_t sc[2] = { sa, sb };

    for (int i = 0; i < 2; i++)
        if (Py_TYPE(ops[i]) == &nki_IndexType && ((nki_index *)ops[i])->ndim > nd)
            nd = ((nki_index *)ops[i])->ndim;
    for (int k = 0; k < nd; k++)
        shape[k] = 1;
    for (int i = 0; i < 2; i++) {
        if (Py_TYPE(ops[i]) == &nki_IndexType) {
            nki_index *e = (nki_index *)ops[i];
            for (int k = 0; k < e->ndim; k++) {
                int gk = nd - e->ndim + k;
                if (e->shape[k] == 1)
                    continue;
                if (shape[gk] != 1 && shape[gk] != e->shape[k])
                    return nki_fail(SIM_E_SHAPE_MISMATCH, "index expression",
                                    "sizes %lld and %lld do not broadcast", (long long)shape[gk],
                                    (long long)e->shape[k]);
                shape[gk] = e->shape[k];
                if (__builtin_mul_overflow(sc[i], e->coef[k], &t) ||
                    __builtin_add_overflow(coef[gk], t, &coef[gk]))
                    return nki_fail(SIM_E_LIMIT, "index expression", "coefficients overflow 64 bits");
            }
            if (__builtin_mul_overflow(sc[i], e->c, &t) || __builtin_add_overflow(c, t, &c))
                return nki_fail(SIM_E_LIMIT, "index expression", "offsets overflow 64 bits");
        } else if (nki_get_int(ops[i], &iv)) {
            if (__builtin_mul_overflow(sc[i], iv, &t) || __builtin_add_overflow(c, t, &c))
                return nki_fail(SIM_E_LIMIT, "index expression", "offsets overflow 64 bits");
        } else if (ops[i] == Py_None && sc[i] == 0) {
            continue;   /* the unused operand of a scaling */
        } else {
            return Py_NewRef(Py_NotImplemented);
        }
    }
    {
        PyObject *r = nki_index_new(nd, shape, coef, c);
        for (int i = 0; r && i < 2; i++)
            if (sc[i] != 0 && Py_TYPE(ops[i]) == &nki_IndexType) {
                const nki_index *e = (const nki_index *)ops[i];
                ((nki_index *)r)->axes |= e->axes << (nd - e->ndim);
            }
        return r;
    }
}

static PyObject *index_add(PyObject *a, PyObject *b)
{
    return index_lin(a, 1, b, 1);
}

static PyObject *index_sub(PyObject *a, PyObject *b)
{
    return index_lin(a, 1, b, -1);
}

static PyObject *index_mul(PyObject *a, PyObject *b)
{
    int64_t k;
    if (Py_TYPE(a) == &nki_IndexType && nki_get_int(b, &k))
        return index_lin(a, k, Py_None, 0);
    if (Py_TYPE(b) == &nki_IndexType && nki_get_int(a, &k))
        return index_lin(b, k, Py_None, 0);
    if (Py_TYPE(a) == &nki_IndexType && Py_TYPE(b) == &nki_IndexType)
        return nki_fail(SIM_E_UNSUPPORTED_API, "index expression",
                        "the product of two index expressions is not affine");
    return Py_NewRef(Py_NotImplemented);
}

static PyObject *index_floordiv(PyObject *a, PyObject *b)
{
    int64_t k;
    nki_index *e = (nki_index *)a;
    if (Py_TYPE(a) != &nki_IndexType || !nki_get_int(b, &k))
        return Py_NewRef(Py_NotImplemented);
    if (k == 0)
        return nki_fail(SIM_E_BAD_ARGUMENT, "index expression", "division by zero");
    for (int i = 0; i < e->ndim; i++)
        if (e->coef[i] % k != 0)
            return nki_fail(SIM_E_UNSUPPORTED_API, "index expression",
                            "dividing an index expression by %lld is not affine", (long long)k);
    {
        int64_t coef[SIMC_MAX_DIMS];
        for (int i = 0; i < e->ndim; i++)
            coef[i] = e->coef[i] / k;
        if (e->c % k != 0)
            return nki_fail(SIM_E_UNSUPPORTED_API, "index expression",
                            "dividing an index expression by %lld is not affine", (long long)k);
        PyObject *r = nki_index_new(e->ndim, e->shape, coef, e->c / k);
        if (r)
            ((nki_index *)r)->axes |= e->axes;
        return r;
    }
}

static PyObject *index_neg(PyObject *a)
{
    return index_lin(a, -1, Py_None, 0);
}

static PyObject *index_pos(PyObject *a)
{
    Py_INCREF(a);
    return a;
}

/* Value of e at dense grid point (row-major flat i over shape). */
static PyObject *pred_from_compare(PyObject *a, PyObject *b, int op)
{
    int64_t iv;
    PyObject *diff;
    nki_index *e;
    nki_pred *p;
    int64_t n = 1, idx[SIMC_MAX_DIMS] = { 0 };

    if (!(Py_TYPE(a) == &nki_IndexType || nki_get_int(a, &iv)) ||
        !(Py_TYPE(b) == &nki_IndexType || nki_get_int(b, &iv)))
        return Py_NewRef(Py_NotImplemented);
    diff = index_lin(a, 1, b, -1);
    if (!diff || Py_TYPE(diff) != &nki_IndexType)
        return diff;
    e = (nki_index *)diff;
    p = PyObject_New(nki_pred, &nki_PredType);
    if (!p) {
        Py_DECREF(diff);
        return NULL;
    }
    p->ndim = e->ndim;
    p->data = NULL;
    for (int k = 0; k < e->ndim; k++)
        p->shape[k] = e->shape[k];
    if (!simc_shape_elems(e->ndim, e->shape, NKI_MAX_OP_ELEMS, &n)) {
        Py_DECREF(p);
        Py_DECREF(diff);
        return nki_fail(SIM_E_LIMIT, "index comparison", "a predicate over more than %lld index points",
                        (long long)NKI_MAX_OP_ELEMS);
    }
    p->data = kf_malloc((size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        __int128 v = e->c;   /* exact: kernels' coefficients are unbounded */
        bool r;
        for (int k = 0; k < e->ndim; k++)
            v += (__int128)e->coef[k] * idx[k];
        switch (op) {
        case Py_LT: r = v < 0; break;
        case Py_LE: r = v <= 0; break;
        case Py_GT: r = v > 0; break;
        case Py_GE: r = v >= 0; break;
        case Py_EQ: r = v == 0; break;
        default: r = v != 0; break;
        }
        p->data[i] = r;
        for (int k = e->ndim - 1; k >= 0; k--) {
            if (++idx[k] < e->shape[k])
                break;
            idx[k] = 0;
        }
    }
    Py_DECREF(diff);
    return (PyObject *)p;
}

static PyObject *index_subscript(PyObject *self, PyObject *key)
{
    nki_index *e = (nki_index *)self;
    int64_t shape[SIMC_MAX_DIMS], coef[SIMC_MAX_DIMS];
    int nd = 0, src = 0;
    Py_ssize_t n = PyTuple_Check(key) ? PyTuple_GET_SIZE(key) : 1;

    if (n > SIMC_MAX_DIMS)
        return nki_fail(SIM_E_BAD_INDEX, "nl.arange(...)[...]", "%zd placements", n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_Check(key) ? PyTuple_GET_ITEM(key, i) : key;
        if (it == Py_None) {
            shape[nd] = 1;
            coef[nd++] = 0;
        } else if (PySlice_Check(it) && src < e->ndim) {
            Py_ssize_t a, b, st;
            if (PySlice_Unpack(it, &a, &b, &st) < 0)
                return NULL;
            if (a != 0 || b != PY_SSIZE_T_MAX || st != 1)
                return nki_fail(SIM_E_BAD_INDEX, "nl.arange(...)[...]",
                                "only ':' and None place an index expression");
            shape[nd] = e->shape[src];
            coef[nd++] = e->coef[src++];
        } else {
            return nki_fail(SIM_E_BAD_INDEX, "nl.arange(...)[...]",
                            "place an index with ':' and None, e.g. [:, None]");
        }
    }
    if (src != e->ndim)
        return nki_fail(SIM_E_BAD_INDEX, "nl.arange(...)[...]",
                        "the placement must use each of the %d axes once", e->ndim);
    {
        PyObject *r = nki_index_new(nd, shape, coef, e->c);
        if (r)   /* every placed axis, ':' or None, is a dim the kernel asked for */
            ((nki_index *)r)->axes = (1u << nd) - 1u;
        return r;
    }
}

static PyObject *index_shape(nki_index *e, void *u)
{
    PyObject *t = PyTuple_New(e->ndim);
    (void)u;
    for (int k = 0; t && k < e->ndim; k++)
        PyTuple_SET_ITEM(t, k, PyLong_FromLongLong(e->shape[k]));
    return t;
}

static PyGetSetDef index_getset[] = {
    { "shape", (getter)index_shape, NULL, "grid shape", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyNumberMethods index_as_number = {
    .nb_add = index_add,
    .nb_subtract = index_sub,
    .nb_multiply = index_mul,
    .nb_floor_divide = index_floordiv,
    .nb_negative = index_neg,
    .nb_positive = index_pos,
};

static PyMappingMethods index_as_mapping = { NULL, index_subscript, NULL };

PyTypeObject nki_IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.language.IndexExpr",
    .tp_basicsize = sizeof(nki_index),
    .tp_dealloc = index_dealloc,
    .tp_as_number = &index_as_number,
    .tp_as_mapping = &index_as_mapping,
    .tp_richcompare = pred_from_compare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An affine index expression over a grid (nl.arange, nl.mgrid).",
    .tp_getset = index_getset,
};

/* --- predicates --- */

static void pred_dealloc(PyObject *o)
{
    free(((nki_pred *)o)->data);
    PyObject_Free(o);
}

static PyObject *pred_new_like(int nd, const int64_t *shape, int64_t *n)
{
    nki_pred *p = PyObject_New(nki_pred, &nki_PredType);
    if (!p)
        return NULL;
    p->ndim = nd;
    p->data = NULL;
    for (int k = 0; k < nd; k++)
        p->shape[k] = shape[k];
    if (!simc_shape_elems(nd, shape, NKI_MAX_OP_ELEMS, n)) {
        Py_DECREF(p);
        return nki_fail(SIM_E_LIMIT, "mask", "a predicate over more than %lld index points",
                        (long long)NKI_MAX_OP_ELEMS);
    }
    p->data = kf_malloc((size_t)(*n ? *n : 1));
    return (PyObject *)p;
}

/* A predicate's shape seen by an operation of nd dims: an mgrid with more
 * ranges than the index uses gives predicates with size-1 dims the tile does
 * not have (the tile follows the index expressions used, nki_tensor.c), so
 * size-1 dims are dropped, leftmost first, until the ranks agree.  Row-major
 * data is unchanged by dropping size-1 dims.  Returns the rank. */
static int pred_shape_for(const nki_pred *p, int nd, int64_t *out)
{
    int drop = p->ndim > nd ? p->ndim - nd : 0, n = 0;
    for (int k = 0; k < p->ndim; k++) {
        if (drop > 0 && p->shape[k] == 1) {
            drop--;
            continue;
        }
        out[n++] = p->shape[k];
    }
    return n;
}

bool nki_pred_fits(PyObject *mask, int nd, const int64_t *shape)
{
    const nki_pred *p = (const nki_pred *)mask;
    int64_t ps[SIMC_MAX_DIMS];
    int pnd;
    if (!mask || Py_TYPE(mask) != &nki_PredType)
        return false;
    pnd = pred_shape_for(p, nd, ps);
    if (pnd > nd)
        return false;
    for (int k = 0; k < pnd; k++)
        if (ps[k] != 1 && ps[k] != shape[nd - pnd + k])
            return false;
    return true;
}

int nki_mask_dense(PyObject *obj, int ndim, const int64_t *shape, const char *api,
                   uint8_t **mask)
{
    nki_pred *p;
    int64_t n = 1, idx[SIMC_MAX_DIMS] = { 0 }, pshape[SIMC_MAX_DIMS];
    int pnd;
    uint8_t *m;

    *mask = NULL;
    if (ndim < 0 || ndim > SIMC_MAX_DIMS) {
        nki_fail(SIM_E_BAD_ARGUMENT, api, "a mask over %d dims, at most %d", ndim, SIMC_MAX_DIMS);
        return -1;
    }
    if (!obj || obj == Py_None || obj == Py_True)
        return 0;
    if (!simc_shape_elems(ndim, shape, NKI_MAX_OP_ELEMS, &n)) {
        nki_fail(SIM_E_LIMIT, api, "a mask over more than %lld elements", (long long)NKI_MAX_OP_ELEMS);
        return -1;
    }
    m = (uint8_t *)nki_scratch(5, (n + 3) / 4);
    if (obj == Py_False) {
        memset(m, 0, (size_t)n);
        *mask = m;
        return 0;
    }
    if (Py_TYPE(obj) != &nki_PredType) {
        nki_fail(SIM_E_BAD_ARGUMENT, api, "mask must be a comparison of index expressions, got %s",
                 Py_TYPE(obj)->tp_name);
        return -1;
    }
    p = (nki_pred *)obj;
    pnd = pred_shape_for(p, ndim, pshape);
    if (pnd > ndim) {
        nki_fail(SIM_E_SHAPE_MISMATCH, api, "mask has %d dims, the operation %d", p->ndim, ndim);
        return -1;
    }
    for (int k = 0; k < pnd; k++) {
        int64_t ps = pshape[k], os = shape[ndim - pnd + k];
        if (ps != 1 && ps != os) {
            nki_fail(SIM_E_SHAPE_MISMATCH, api, "mask dimension %d has size %lld, the operation %lld",
                     k, (long long)ps, (long long)os);
            return -1;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t f = 0;
        for (int k = 0; k < pnd; k++) {
            int64_t ps = pshape[k];
            f = f * ps + (ps == 1 ? 0 : idx[ndim - pnd + k]);
        }
        m[i] = p->data[f];
        for (int k = ndim - 1; k >= 0; k--) {
            if (++idx[k] < shape[k])
                break;
            idx[k] = 0;
        }
    }
    *mask = m;
    return 0;
}

static PyObject *pred_binop(PyObject *a, PyObject *b, int op)
{
    nki_pred *pa, *pb, *r;
    int nd;
    int64_t shape[SIMC_MAX_DIMS], n;
    uint8_t *ma, *mb;

    if (Py_TYPE(a) != &nki_PredType || Py_TYPE(b) != &nki_PredType) {
        /* Python bools combine as constants. */
        PyObject *p = Py_TYPE(a) == &nki_PredType ? a : b;
        PyObject *o = p == a ? b : a;
        if (Py_TYPE(p) != &nki_PredType || !PyBool_Check(o))
            return Py_NewRef(Py_NotImplemented);
        if ((op == 0 && o == Py_True) || (op == 1 && o == Py_False)) {
            Py_INCREF(p);
            return p;
        }
        pa = (nki_pred *)p;
        r = (nki_pred *)pred_new_like(pa->ndim, pa->shape, &n);
        if (r)
            memset(r->data, op == 1 ? 1 : 0, (size_t)n);
        if (r && op == 2)
            for (int64_t i = 0; i < n; i++)
                r->data[i] = pa->data[i] ^ (o == Py_True);
        return (PyObject *)r;
    }
    pa = (nki_pred *)a;
    pb = (nki_pred *)b;
    nd = pa->ndim > pb->ndim ? pa->ndim : pb->ndim;
    for (int k = 0; k < nd; k++) {
        int ka = k - (nd - pa->ndim), kb = k - (nd - pb->ndim);
        int64_t sa = ka >= 0 ? pa->shape[ka] : 1, sb = kb >= 0 ? pb->shape[kb] : 1;
        if (sa != 1 && sb != 1 && sa != sb)
            return nki_fail(SIM_E_SHAPE_MISMATCH, "mask", "sizes %lld and %lld do not broadcast",
                            (long long)sa, (long long)sb);
        shape[k] = sa > sb ? sa : sb;
    }
    if (nki_mask_dense(a, nd, shape, "mask", &ma) < 0)
        return NULL;
    r = (nki_pred *)pred_new_like(nd, shape, &n);
    if (!r)
        return NULL;
    if (ma)
        memcpy(r->data, ma, (size_t)n);
    else
        memset(r->data, 1, (size_t)n);
    if (nki_mask_dense(b, nd, shape, "mask", &mb) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        uint8_t bv = mb ? mb[i] : 1;   /* no dense mask: everything selected */
        r->data[i] = op == 0 ? (r->data[i] && bv) : op == 1 ? (r->data[i] || bv)
                                                            : (r->data[i] != bv);
    }
    return (PyObject *)r;
}

static PyObject *pred_and(PyObject *a, PyObject *b)
{
    return pred_binop(a, b, 0);
}

static PyObject *pred_or(PyObject *a, PyObject *b)
{
    return pred_binop(a, b, 1);
}

static PyObject *pred_xor(PyObject *a, PyObject *b)
{
    return pred_binop(a, b, 2);
}

static PyObject *pred_invert(PyObject *a)
{
    nki_pred *p = (nki_pred *)a, *r;
    int64_t n;
    r = (nki_pred *)pred_new_like(p->ndim, p->shape, &n);
    for (int64_t i = 0; r && i < n; i++)
        r->data[i] = !p->data[i];
    return (PyObject *)r;
}

static PyNumberMethods pred_as_number = {
    .nb_and = pred_and,
    .nb_or = pred_or,
    .nb_xor = pred_xor,
    .nb_invert = pred_invert,
};

PyTypeObject nki_PredType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.language.Predicate",
    .tp_basicsize = sizeof(nki_pred),
    .tp_dealloc = pred_dealloc,
    .tp_as_number = &pred_as_number,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A comparison of index expressions (mask=, affine_select).",
};

/* --- mgrid --- */

typedef struct {
    PyObject_HEAD
    PyObject *items;   /* tuple of index expressions */
} nki_mgrid_result;

static void mgrid_result_dealloc(PyObject *o)
{
    Py_XDECREF(((nki_mgrid_result *)o)->items);
    PyObject_Free(o);
}

static Py_ssize_t mgrid_result_len(PyObject *o)
{
    return PyTuple_GET_SIZE(((nki_mgrid_result *)o)->items);
}

static PyObject *mgrid_result_item(PyObject *o, Py_ssize_t i)
{
    PyObject *items = ((nki_mgrid_result *)o)->items;
    if (i < 0 || i >= PyTuple_GET_SIZE(items)) {
        PyErr_SetString(PyExc_IndexError, "mgrid axis out of range");
        return NULL;
    }
    Py_INCREF(PyTuple_GET_ITEM(items, i));
    return PyTuple_GET_ITEM(items, i);
}

/* .p .x .y .z: the index of axis 0 (partitions), 1, 2, 3 (free axes). */
static PyObject *mgrid_result_axis(PyObject *o, Py_ssize_t axis)
{
    static const char names[] = "pxyz";
    Py_ssize_t n = PyTuple_GET_SIZE(((nki_mgrid_result *)o)->items);
    if (axis >= n)
        return nki_fail(SIM_E_BAD_ARGUMENT, "nl.mgrid",
                        "the grid has %zd axes, .%c is axis %zd", n, names[axis], axis);
    return mgrid_result_item(o, axis);
}

static PyObject *mgrid_result_p(PyObject *o, void *u)
{
    (void)u;
    return mgrid_result_axis(o, 0);
}

static PyObject *mgrid_result_x(PyObject *o, void *u)
{
    (void)u;
    return mgrid_result_axis(o, 1);
}

static PyObject *mgrid_result_y(PyObject *o, void *u)
{
    (void)u;
    return mgrid_result_axis(o, 2);
}

static PyObject *mgrid_result_z(PyObject *o, void *u)
{
    (void)u;
    return mgrid_result_axis(o, 3);
}

static PyGetSetDef mgrid_result_getset[] = {
    { "p", mgrid_result_p, NULL, "partition axis index (axis 0)", NULL },
    { "x", mgrid_result_x, NULL, "first free axis index (axis 1)", NULL },
    { "y", mgrid_result_y, NULL, "second free axis index (axis 2)", NULL },
    { "z", mgrid_result_z, NULL, "third free axis index (axis 3)", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PySequenceMethods mgrid_result_as_seq = {
    .sq_length = mgrid_result_len,
    .sq_item = mgrid_result_item,
};

PyTypeObject nki_MgridResultType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.language.MgridResult",
    .tp_basicsize = sizeof(nki_mgrid_result),
    .tp_dealloc = mgrid_result_dealloc,
    .tp_as_sequence = &mgrid_result_as_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = mgrid_result_getset,
};

static PyObject *mgrid_subscript(PyObject *self, PyObject *key)
{
    Py_ssize_t n = PyTuple_Check(key) ? PyTuple_GET_SIZE(key) : 1;
    nki_mgrid_result *r;
    PyObject *items;

    (void)self;
    if (n < 1 || n > SIMC_MAX_DIMS)
        return nki_fail(SIM_E_BAD_INDEX, "nl.mgrid", "%zd axes", n);
    items = PyTuple_New(n);
    if (!items)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_Check(key) ? PyTuple_GET_ITEM(key, i) : key;
        Py_ssize_t a, b, st, len;
        int64_t shape[SIMC_MAX_DIMS], coef[SIMC_MAX_DIMS] = { 0 };
        if (!PySlice_Check(it) || PySlice_Unpack(it, &a, &b, &st) < 0 || b == PY_SSIZE_T_MAX) {
            PyErr_Clear();
            Py_DECREF(items);
            return nki_fail(SIM_E_BAD_INDEX, "nl.mgrid", "each axis must be a slice start:stop");
        }
        len = st > 0 ? (b > a ? (b - a + st - 1) / st : 0) : 0;
        for (Py_ssize_t k = 0; k < n; k++)
            shape[k] = 1;
        shape[i] = len;
        coef[i] = st;
        PyTuple_SET_ITEM(items, i, nki_index_new((int)n, shape, coef, a));
    }
    r = PyObject_New(nki_mgrid_result, &nki_MgridResultType);
    if (!r) {
        Py_DECREF(items);
        return NULL;
    }
    r->items = items;
    return (PyObject *)r;
}

static PyMappingMethods mgrid_as_mapping = { NULL, mgrid_subscript, NULL };

PyTypeObject nki_MgridType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.language.mgrid_type",
    .tp_basicsize = sizeof(PyObject),
    .tp_as_mapping = &mgrid_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

