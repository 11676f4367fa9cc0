/* nki_core — run context, errors, argument parsing, on-chip allocators, the
 * tensor type with its indexing, and the legacy index expressions (see
 * nki_internal.h). */
#include "nki_internal.h"

#include <frameobject.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kf_alloc.h"

nki_ctx *nki_cur;
PyObject *nki_SimError;

/* ===== errors and locations ===== */

static void frame_where(char *file, size_t flen, int *line, char *func, size_t fnlen)
{
    PyFrameObject *f = PyEval_GetFrame();
    PyCodeObject *code;
    const char *s;

    file[0] = 0;
    func[0] = 0;
    *line = 0;
    if (!f)
        return;
    code = PyFrame_GetCode(f);
    *line = PyFrame_GetLineNumber(f);
    s = PyUnicode_AsUTF8(code->co_filename);
    if (s)
        snprintf(file, flen, "%s", s);
    s = PyUnicode_AsUTF8(code->co_name);
    if (s)
        snprintf(func, fnlen, "%s", s);
    Py_DECREF(code);
}

PyObject *nki_fail(sim_error_code code, const char *api, const char *fmt, ...)
{
    sim_error *e = nki_cur ? nki_cur->serr : NULL;
    char values[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(values, sizeof(values), fmt, ap);
    va_end(ap);
    if (e && e->code == SIM_E_NONE) {
        e->code = code;
        frame_where(e->file, sizeof(e->file), &e->line, e->func, sizeof(e->func));
        snprintf(e->api, sizeof(e->api), "%s", api ? api : "");
        snprintf(e->values, sizeof(e->values), "%s", values);
    }
    PyErr_Format(nki_SimError, "SIM_E_%s%s%s: %s (%s)", sim_error_name(code), api ? " in " : "",
                 api ? api : "", sim_error_rule(code), values);
    return NULL;
}

uint32_t nki_loc(void)
{
    PyFrameObject *f = PyEval_GetFrame();
    PyCodeObject *code;
    int line;
    uint32_t id;

    if (!f || !nki_cur)
        return 0;
    code = PyFrame_GetCode(f);
    line = PyFrame_GetLineNumber(f);
    if ((void *)code == nki_cur->loc_code && line == nki_cur->loc_line) {
        Py_DECREF(code);
        return nki_cur->loc_id;
    }
    id = sim_record_loc(nki_cur->rec, PyUnicode_AsUTF8(code->co_filename), (uint32_t)line,
                        PyUnicode_AsUTF8(code->co_name));
    /* The cache compares pointers only; the record holds the strings. */
    nki_cur->loc_code = code;
    nki_cur->loc_line = line;
    nki_cur->loc_id = id;
    Py_DECREF(code);
    return id;
}

sim_insn *nki_insn(sim_opcode op)
{
    sim_insn *in = sim_record_append(nki_cur->rec);
    in->opcode = (uint16_t)op;
    in->engine = (uint8_t)sim_opcode_engine(op);
    in->loc = nki_loc();
    in->spmd = nki_cur->spmd_index;
    return in;
}

float *nki_scratch(int slot, int64_t n)
{
    nki_ctx *c = nki_cur;
    if (n < 1)
        n = 1;
    if ((size_t)n > c->scratch_cap[slot]) {
        free(c->scratch[slot]);
        c->scratch_cap[slot] = (size_t)n;
        c->scratch[slot] = kf_malloc((size_t)n * sizeof(float));
    }
    return c->scratch[slot];
}

int nki_parse(const char *api, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const char *const *names, int n_names, PyObject **out)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int npos = 0;

    for (int i = 0; i < n_names; i++)
        out[i] = NULL;
    for (int i = 0; i < n_names && names[i][0] != '*'; i++)
        npos++;
    if (nargs > npos) {
        nki_fail(SIM_E_BAD_ARGUMENT, api, "%zd positional arguments given, at most %d accepted",
                 nargs, npos);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        int found = -1;
        for (int i = 0; kw && i < n_names; i++) {
            const char *n = names[i][0] == '*' ? names[i] + 1 : names[i];
            if (strcmp(n, kw) == 0) {
                found = i;
                break;
            }
        }
        if (found < 0) {
            nki_fail(SIM_E_UNSUPPORTED_API, api, "keyword argument '%s' is not supported",
                     kw ? kw : "?");
            return -1;
        }
        if (out[found]) {
            nki_fail(SIM_E_BAD_ARGUMENT, api, "argument '%s' given twice", kw);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    return 0;
}

/* ===== on-chip allocators ===== */

static int arena_alloc(nki_arena *a, uint64_t len, uint64_t *off)
{
    uint64_t at = 0;
    size_t i;

    if (a->used + len > a->capacity)
        return -1;
    for (i = 0; i < a->n; i++) {
        if (a->iv[i].off - at >= len)
            break;
        at = a->iv[i].off + a->iv[i].len;
    }
    if (i == a->n && a->capacity - at < len)
        return -1;
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->iv = kf_realloc(a->iv, a->cap * sizeof(*a->iv));
    }
    memmove(&a->iv[i + 1], &a->iv[i], (a->n - i) * sizeof(*a->iv));
    a->iv[i].off = at;
    a->iv[i].len = len;
    a->n++;
    a->used += len;
    if (a->used > a->peak)
        a->peak = a->used;
    *off = at;
    return 0;
}

static void arena_free(nki_arena *a, uint64_t off, uint64_t len)
{
    for (size_t i = 0; i < a->n; i++) {
        if (a->iv[i].off == off && a->iv[i].len == len) {
            memmove(&a->iv[i], &a->iv[i + 1], (a->n - i - 1) * sizeof(*a->iv));
            a->n--;
            a->used -= len;
            return;
        }
    }
}

void nki_store_release(simc_store *st)
{
    if (!nki_cur || !st || st->acct_bytes == 0)
        return;
    if (st->mem == SIM_MEM_SBUF)
        arena_free(&nki_cur->sbuf, st->acct_off, st->acct_bytes);
    else if (st->mem == SIM_MEM_PSUM)
        arena_free(&nki_cur->psum, st->acct_off, st->acct_bytes);
    sim_record_free(nki_cur->rec, st->alloc_id);
    st->acct_bytes = 0;
}

/* ===== tensors ===== */

static void tensor_dealloc(nki_tensor *t)
{
    simc_store *st = t->v.st;
    if (st && st->refcnt == 1)
        nki_store_release(st);
    simc_store_unref(st);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

nki_tensor *nki_tensor_view(simc_store *st, const simc_view *v, int pdim)
{
    nki_tensor *t = PyObject_New(nki_tensor, &nki_TensorType);
    if (!t)
        return NULL;
    t->v = *v;
    t->v.st = st;
    simc_store_ref(st);
    t->pdim = pdim;
    t->oob = false;
    t->mm_result = false;
    t->mm_insn = -1;
    t->oob_msg[0] = 0;
    return t;
}

static const char *mem_name(int mem)
{
    return mem == SIM_MEM_HBM ? "hbm" : mem == SIM_MEM_SBUF ? "sbuf" : "psum";
}

nki_tensor *nki_tensor_alloc(sim_mem mem, sim_dtype dt, int ndim, const int64_t *shape,
                             int pdim, const char *name, const char *api)
{
    nki_ctx *c = nki_cur;
    simc_store *st;
    simc_view v;
    nki_tensor *t;
    int64_t parts = 1, free_elems = 1, blocks = 1, total = 1;
    unsigned es = sim_dtype_size(dt);

    if (ndim > SIMC_MAX_DIMS)
        return (nki_tensor *)nki_fail(SIM_E_BAD_ARGUMENT, api, "%d dimensions, at most %d",
                                      ndim, SIMC_MAX_DIMS);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return (nki_tensor *)nki_fail(SIM_E_BAD_ARGUMENT, api,
                                          "dimension %d has negative size %lld", d,
                                          (long long)shape[d]);
        total *= shape[d];
        if (total > ((int64_t)1 << 36))
            return (nki_tensor *)nki_fail(SIM_E_LIMIT, api, "tensor of more than 2^36 elements");
    }
    if (mem == SIM_MEM_HBM) {
        parts = 1;
        free_elems = total;
        pdim = -1;
    } else {
        if (ndim == 0)
            return (nki_tensor *)nki_fail(SIM_E_BAD_ARGUMENT, api,
                                          "an on-chip tensor needs a partition dimension");
        parts = shape[pdim];
        if (parts > SIMC_PMAX)
            return (nki_tensor *)nki_fail(SIM_E_PARTITION_LIMIT, api,
                                          "partition dimension %lld > %d", (long long)parts,
                                          SIMC_PMAX);
        for (int d = 0; d < ndim; d++) {
            if (d < pdim)
                blocks *= shape[d];
            else if (d > pdim)
                free_elems *= shape[d];
        }
        if (mem == SIM_MEM_PSUM && free_elems * es > SIMC_PSUM_BANK_BYTES)
            return (nki_tensor *)nki_fail(SIM_E_PSUM_TILE, api,
                                          "PSUM tile of %lld bytes per partition > %d",
                                          (long long)(free_elems * es), SIMC_PSUM_BANK_BYTES);
        free_elems *= blocks;
    }
    st = simc_store_new(mem, dt, (int)parts, free_elems, mem == SIM_MEM_HBM || c->numerics);
    if (mem != SIM_MEM_HBM) {
        nki_arena *a = mem == SIM_MEM_SBUF ? &c->sbuf : &c->psum;
        uint64_t bytes = (uint64_t)free_elems * es, off = 0;
        if (mem == SIM_MEM_PSUM)   /* each block takes whole banks */
            bytes = (uint64_t)blocks * SIMC_PSUM_BANK_BYTES;
        else
            bytes = (bytes + 3) & ~(uint64_t)3;
        if (bytes == 0)
            bytes = 4;
        if (arena_alloc(a, bytes, &off) < 0) {
            simc_store_unref(st);
            return (nki_tensor *)nki_fail(
                mem == SIM_MEM_SBUF ? SIM_E_SBUF_CAPACITY : SIM_E_PSUM_CAPACITY, api,
                "%s tile of %llu bytes per partition does not fit: %llu of %llu bytes per "
                "partition are held by live tiles",
                mem_name(mem), (unsigned long long)bytes, (unsigned long long)a->used,
                (unsigned long long)a->capacity);
        }
        st->acct_bytes = bytes;
        st->acct_off = off;
    }
    st->alloc_id = sim_record_alloc(c->rec, mem, dt, (uint32_t)parts,
                                    mem == SIM_MEM_HBM ? (uint64_t)total * es
                                                       : (uint64_t)free_elems * es,
                                    name);
    if (mem != SIM_MEM_HBM)
        c->rec->allocs[st->alloc_id].sbuf_offset = st->acct_off;
    memset(&v, 0, sizeof(v));
    v.dtype = dt;
    v.ndim = ndim;
    {
        /* Physical layout: partition dim outermost, then block dims, then
         * free dims, all row-major. */
        int64_t stride = 1;
        for (int d = ndim - 1; d > pdim; d--) {
            v.strides[d] = stride;
            stride *= shape[d];
        }
        for (int d = pdim - 1; d >= 0; d--) {
            v.strides[d] = stride;
            stride *= shape[d];
        }
        if (pdim >= 0)
            v.strides[pdim] = stride;
        for (int d = 0; d < ndim; d++)
            v.shape[d] = shape[d];
    }
    t = nki_tensor_view(st, &v, pdim);
    simc_store_unref(st);
    return t;
}

nki_tensor *nki_as_tensor(PyObject *obj, const char *api, const char *what)
{
    if (obj && nki_tensor_check(obj))
        return (nki_tensor *)obj;
    return (nki_tensor *)nki_fail(SIM_E_BAD_ARGUMENT, api, "%s must be a tensor, got %s", what,
                                  obj ? Py_TYPE(obj)->tp_name : "nothing");
}

int nki_check_bounds(nki_tensor *t, const uint8_t *mask, const char *api)
{
    const simc_view *v = &t->v;
    int64_t n, idx[SIMC_MAX_DIMS] = { 0 };

    if (!t->oob)
        return 0;
    if (!mask) {
        nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api, "%s", t->oob_msg);
        return -1;
    }
    n = simc_view_elems(v);
    for (int64_t i = 0; i < n; i++) {
        if (mask[i]) {
            int64_t f = v->offset;
            for (int d = 0; d < v->ndim; d++)
                f += idx[d] * v->strides[d];
            if (f < 0 || f >= v->st->nelem) {
                nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api, "%s (element %lld is selected by the mask)",
                         t->oob_msg, (long long)i);
                return -1;
            }
        }
        for (int d = v->ndim - 1; d >= 0; d--) {
            if (++idx[d] < v->shape[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}

/* --- subscripts --- */

static int get_int(PyObject *o, int64_t *out)
{
    if (PyBool_Check(o) || !PyIndex_Check(o))
        return 0;
    *out = PyLong_AsLongLong(o);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* Resolve a slice against a dim of size n; NKI slices must stay in bounds. */
static int get_slice(PyObject *s, int64_t n, int64_t *start, int64_t *step, int64_t *len,
                     const char *api, int dim)
{
    Py_ssize_t a, b, st;
    if (PySlice_Unpack(s, &a, &b, &st) < 0)
        return -1;
    if (st > 0) {
        if (b != PY_SSIZE_T_MAX && b > n) {
            nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api, "slice end %zd > size %lld of dimension %d",
                     b, (long long)n, dim);
            return -1;
        }
        if (a != 0 && a >= 0 && a > n) {
            nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api, "slice start %zd > size %lld of dimension %d",
                     a, (long long)n, dim);
            return -1;
        }
    }
    *len = PySlice_AdjustIndices((Py_ssize_t)n, &a, &b, st);
    *start = a;
    *step = st;
    return 0;
}

#define MAX_ITEMS 16

static PyObject *subscript_advanced(nki_tensor *t, PyObject **items, int nitems)
{
    const simc_view *v = &t->v;
    simc_view r;
    int gnd = 0;
    int64_t gshape[SIMC_MAX_DIMS];
    int nslices = 0;
    nki_tensor *res;
    char oob[96] = "";

    /* Broadcast the grid of every index expression (right-aligned). */
    for (int i = 0; i < nitems; i++) {
        if (Py_TYPE(items[i]) != &nki_IndexType)
            continue;
        nki_index *e = (nki_index *)items[i];
        if (e->ndim > gnd) {
            for (int k = SIMC_MAX_DIMS - 1; k >= e->ndim - gnd && k >= 0; k--)
                gshape[k] = k - (e->ndim - gnd) >= 0 ? gshape[k - (e->ndim - gnd)] : 1;
            for (int k = 0; k < e->ndim - gnd; k++)
                gshape[k] = 1;
            gnd = e->ndim;
        }
        for (int k = 0; k < e->ndim; k++) {
            int gk = gnd - e->ndim + k;
            if (e->shape[k] == 1)
                continue;
            if (gshape[gk] != 1 && gshape[gk] != e->shape[k])
                return nki_fail(SIM_E_SHAPE_MISMATCH, "tensor[...]",
                                "index expressions of sizes %lld and %lld do not broadcast",
                                (long long)gshape[gk], (long long)e->shape[k]);
            gshape[gk] = e->shape[k];
        }
    }
    memset(&r, 0, sizeof(r));
    r.st = v->st;
    r.dtype = v->dtype;
    r.offset = v->offset;
    r.ndim = gnd;
    for (int k = 0; k < gnd; k++)
        r.shape[k] = gshape[k];
    for (int d = 0; d < v->ndim; d++) {
        PyObject *it = d < nitems ? items[d] : NULL;
        int64_t iv;
        if (it && Py_TYPE(it) == &nki_IndexType) {
            nki_index *e = (nki_index *)it;
            int64_t lo = e->c, hi = e->c;
            for (int k = 0; k < e->ndim; k++) {
                int gk = gnd - e->ndim + k;
                int64_t span;
                if (e->shape[k] == 1)
                    continue;
                r.strides[gk] += e->coef[k] * v->strides[d];
                span = e->coef[k] * (e->shape[k] - 1);
                if (span < 0)
                    lo += span;
                else
                    hi += span;
            }
            r.offset += e->c * v->strides[d];
            if ((lo < 0 || hi >= v->shape[d]) && !oob[0])
                snprintf(oob, sizeof(oob), "index expression spans [%lld, %lld] on dimension %d of size %lld",
                         (long long)lo, (long long)hi, d, (long long)v->shape[d]);
        } else if (it && get_int(it, &iv)) {
            if (iv < 0)
                iv += v->shape[d];
            if (iv < 0 || iv >= v->shape[d])
                return nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, "tensor[...]",
                                "index %lld on dimension %d of size %lld", (long long)iv, d,
                                (long long)v->shape[d]);
            r.offset += iv * v->strides[d];
        } else if (!it || PySlice_Check(it)) {
            int64_t start = 0, step = 1, len = v->shape[d];
            if (it && get_slice(it, v->shape[d], &start, &step, &len, "tensor[...]", d) < 0)
                return NULL;
            if (r.ndim >= SIMC_MAX_DIMS)
                return nki_fail(SIM_E_BAD_INDEX, "tensor[...]", "more than %d dimensions",
                                SIMC_MAX_DIMS);
            r.offset += start * v->strides[d];
            r.shape[r.ndim] = len;
            r.strides[r.ndim] = step * v->strides[d];
            r.ndim++;
            nslices++;
        } else {
            return nki_fail(SIM_E_BAD_INDEX, "tensor[...]", "index of type %s on dimension %d",
                            Py_TYPE(it)->tp_name, d);
        }
    }
    res = nki_tensor_view(v->st, &r, v->st->mem == SIM_MEM_HBM ? -1 : 0);
    if (res && oob[0]) {
        res->oob = true;
        snprintf(res->oob_msg, sizeof(res->oob_msg), "%s", oob);
    }
    if (res)
        res->oob = res->oob || t->oob;
    return (PyObject *)res;
}


PyObject *nki_tensor_subscript(PyObject *self, PyObject *key)
{
    nki_tensor *t = (nki_tensor *)self;
    const simc_view *v = &t->v;
    PyObject *raw[MAX_ITEMS], *items[SIMC_MAX_DIMS];
    int nraw = 0, nitems = 0, consuming = 0;
    bool advanced = false;
    simc_view r;
    int kept_pdim = -1, last_free_int = -1;
    bool is_int[SIMC_MAX_DIMS] = { false };

    if (PyTuple_Check(key)) {
        nraw = (int)PyTuple_GET_SIZE(key);
        if (nraw > MAX_ITEMS)
            return nki_fail(SIM_E_BAD_INDEX, "tensor[...]", "%d indices", nraw);
        for (int i = 0; i < nraw; i++)
            raw[i] = PyTuple_GET_ITEM(key, i);
    } else {
        raw[0] = key;
        nraw = 1;
    }
    for (int i = 0; i < nraw; i++)
        if (raw[i] != Py_Ellipsis)
            consuming++;
    if (consuming > v->ndim)
        return nki_fail(SIM_E_BAD_INDEX, "tensor[...]", "%d indices for a %d-dimensional tensor",
                        consuming, v->ndim);
    for (int i = 0; i < nraw; i++) {
        if (raw[i] == Py_Ellipsis) {
            for (int k = 0; k < v->ndim - consuming && nitems < SIMC_MAX_DIMS; k++)
                items[nitems++] = NULL;
            consuming = v->ndim;   /* only the first ellipsis expands */
            continue;
        }
        if (raw[i] == Py_None)
            return nki_fail(SIM_E_BAD_INDEX, "tensor[...]",
                            "None (new axis) is not an index of a tensor");
        if (Py_TYPE(raw[i]) == &nki_IndexType)
            advanced = true;
        items[nitems++] = raw[i];
    }
    if (advanced)
        return subscript_advanced(t, items, nitems);

    memset(&r, 0, sizeof(r));
    r.st = v->st;
    r.dtype = v->dtype;
    r.offset = v->offset;
    for (int d = 0; d < v->ndim; d++) {
        PyObject *it = d < nitems ? items[d] : NULL;
        int64_t iv, start = 0, step = 1, len = v->shape[d];
        if (it && get_int(it, &iv)) {
            if (iv < 0)
                iv += v->shape[d];
            if (iv < 0 || iv >= v->shape[d])
                return nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, "tensor[...]",
                                "index %lld on dimension %d of size %lld", (long long)iv, d,
                                (long long)v->shape[d]);
            is_int[d] = true;
            r.offset += iv * v->strides[d];
            continue;
        }
        if (it && !PySlice_Check(it))
            return nki_fail(SIM_E_BAD_INDEX, "tensor[...]", "index of type %s on dimension %d",
                            Py_TYPE(it)->tp_name, d);
        if (it && get_slice(it, v->shape[d], &start, &step, &len, "tensor[...]", d) < 0)
            return NULL;
        r.offset += start * v->strides[d];
        (void)len;
        (void)step;
    }
    /* Build the kept dims with the view rules. */
    for (int d = 0; d < v->ndim; d++) {
        PyObject *it = d < nitems ? items[d] : NULL;
        int64_t start = 0, step = 1, len = v->shape[d];
        bool keep;
        if (is_int[d]) {
            len = 1;
            step = 1;
            if (t->pdim < 0)
                keep = false;
            else if (d == t->pdim)
                keep = true;
            else {
                keep = false;
                if (d > t->pdim)
                    last_free_int = d;
            }
        } else {
            keep = true;
            if (it)
                (void)get_slice(it, v->shape[d], &start, &step, &len, "tensor[...]", d);
        }
        if (!keep)
            continue;
        if (d == t->pdim)
            kept_pdim = r.ndim;
        r.shape[r.ndim] = len;
        r.strides[r.ndim] = is_int[d] ? v->strides[d] : step * v->strides[d];
        r.ndim++;
    }
    if (t->pdim >= 0 && r.ndim < 2 && last_free_int >= 0) {
        /* On-chip views stay 2-D: keep the last free dim at size 1. */
        r.shape[r.ndim] = 1;
        r.strides[r.ndim] = v->strides[last_free_int];
        r.ndim++;
    }
    {
        nki_tensor *res = nki_tensor_view(v->st, &r, t->pdim >= 0 ? (kept_pdim >= 0 ? kept_pdim : 0) : -1);
        if (res && t->oob) {
            res->oob = true;
            memcpy(res->oob_msg, t->oob_msg, sizeof(res->oob_msg));
        }
        return (PyObject *)res;
    }
}

/* --- attributes and methods --- */

static PyObject *tensor_shape(nki_tensor *t, void *u)
{
    PyObject *tup = PyTuple_New(t->v.ndim);
    (void)u;
    if (!tup)
        return NULL;
    for (int d = 0; d < t->v.ndim; d++)
        PyTuple_SET_ITEM(tup, d, PyLong_FromLongLong(t->v.shape[d]));
    return tup;
}

static PyObject *tensor_dtype(nki_tensor *t, void *u)
{
    PyObject *d = nki_dtype_get(t->v.dtype);
    (void)u;
    Py_XINCREF(d);
    return d;
}

static PyObject *tensor_ndim(nki_tensor *t, void *u)
{
    (void)u;
    return PyLong_FromLong(t->v.ndim);
}

static PyObject *tensor_size(nki_tensor *t, void *u)
{
    (void)u;
    return PyLong_FromLongLong(simc_view_elems(&t->v));
}

static PyObject *tensor_itemsize(nki_tensor *t, void *u)
{
    (void)u;
    return PyLong_FromLong((long)sim_dtype_size(t->v.dtype));
}

static PyObject *tensor_offset(nki_tensor *t, void *u)
{
    (void)u;
    return PyLong_FromLongLong(t->v.offset);
}

static PyObject *tensor_strides(nki_tensor *t, void *u)
{
    PyObject *tup = PyTuple_New(t->v.ndim);
    (void)u;
    if (!tup)
        return NULL;
    for (int d = 0; d < t->v.ndim; d++)
        PyTuple_SET_ITEM(tup, d, PyLong_FromLongLong(t->v.strides[d]));
    return tup;
}

static PyObject *tensor_buffer(nki_tensor *t, void *u)
{
    PyObject *b = nki_buffer_singleton(t->v.st->mem, t->v.st->shared_slot >= 0);
    (void)u;
    Py_XINCREF(b);
    return b;
}

static PyGetSetDef tensor_getset[] = {
    { "shape", (getter)tensor_shape, NULL, "shape tuple", NULL },
    { "dtype", (getter)tensor_dtype, NULL, "element type", NULL },
    { "ndim", (getter)tensor_ndim, NULL, "number of dims", NULL },
    { "size", (getter)tensor_size, NULL, "number of elements", NULL },
    { "itemsize", (getter)tensor_itemsize, NULL, "bytes per element", NULL },
    { "offset", (getter)tensor_offset, NULL, "element offset in storage", NULL },
    { "strides", (getter)tensor_strides, NULL, "strides in elements", NULL },
    { "buffer", (getter)tensor_buffer, NULL, "memory", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

/* Parse a shape from a tuple/list of ints (or varargs); -1 on error. */

int nki_parse_shape(PyObject *obj, const char *api, int64_t *shape, int *pdim)
{
    PyObject *seq = PySequence_Fast(obj, "shape must be a tuple or list");
    Py_ssize_t n;
    int nd = 0;

    if (!seq) {
        PyErr_Clear();
        nki_fail(SIM_E_BAD_ARGUMENT, api, "shape must be a tuple or list of ints, got %s",
                 Py_TYPE(obj)->tp_name);
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    if (pdim)
        *pdim = 0;
    if (n > SIMC_MAX_DIMS) {
        Py_DECREF(seq);
        nki_fail(SIM_E_BAD_ARGUMENT, api, "%zd dimensions, at most %d", n, SIMC_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        int64_t v;
        if (Py_TYPE(it) == &nki_ParDimType) {
            v = ((nki_pardim *)it)->size;
            if (pdim)
                *pdim = (int)i;
        } else if (!get_int(it, &v)) {
            Py_DECREF(seq);
            nki_fail(SIM_E_BAD_ARGUMENT, api, "shape entry %zd is %s, not an int", i,
                     Py_TYPE(it)->tp_name);
            return -1;
        }
        shape[nd++] = v;
    }
    Py_DECREF(seq);
    return nd;
}

static PyObject *tensor_reshape(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t shape[SIMC_MAX_DIMS], total = 1, known = 1;
    int nd, neg = -1;
    simc_view r = t->v;
    PyObject *tup = NULL;

    if (nargs == 1 && (PyTuple_Check(args[0]) || PyList_Check(args[0]))) {
        nd = nki_parse_shape(args[0], "tensor.reshape", shape, NULL);
    } else {
        tup = PyTuple_New(nargs);
        for (Py_ssize_t i = 0; tup && i < nargs; i++) {
            Py_INCREF(args[i]);
            PyTuple_SET_ITEM(tup, i, args[i]);
        }
        nd = tup ? nki_parse_shape(tup, "tensor.reshape", shape, NULL) : -1;
        Py_XDECREF(tup);
    }
    if (nd < 0)
        return NULL;
    total = simc_view_elems(&t->v);
    for (int d = 0; d < nd; d++) {
        if (shape[d] == -1 && neg < 0)
            neg = d;
        else
            known *= shape[d];
    }
    if (neg >= 0 && known > 0)
        shape[neg] = total / known;
    if (neg >= 0)
        known *= shape[neg];
    if (known != total)
        return nki_fail(SIM_E_SHAPE_MISMATCH, "tensor.reshape",
                        "cannot reshape %lld elements into %lld", (long long)total,
                        (long long)known);
    if (t->pdim >= 0) {
        simc_view free_part = t->v;
        /* On-chip: the partition dim stays first; the free part must be
         * contiguous. */
        if (t->pdim != 0 || nd < 1 || shape[0] != t->v.shape[0])
            return nki_fail(SIM_E_SHAPE_MISMATCH, "tensor.reshape",
                            "an on-chip reshape must keep the partition dimension (%lld) first",
                            (long long)t->v.shape[t->pdim]);
        free_part.ndim = t->v.ndim - 1;
        memmove(free_part.shape, t->v.shape + 1, sizeof(int64_t) * (size_t)free_part.ndim);
        memmove(free_part.strides, t->v.strides + 1, sizeof(int64_t) * (size_t)free_part.ndim);
        if (!simc_view_contiguous(&free_part))
            return nki_fail(SIM_E_SHAPE_MISMATCH, "tensor.reshape",
                            "the free dimensions of the view are not contiguous");
        r.ndim = nd;
        r.shape[0] = shape[0];
        r.strides[0] = t->v.strides[0];
        {
            int64_t s = 1;
            for (int d = nd - 1; d >= 1; d--) {
                r.shape[d] = shape[d];
                r.strides[d] = s;
                s *= shape[d];
            }
        }
        return (PyObject *)nki_tensor_view(t->v.st, &r, 0);
    }
    if (!simc_view_contiguous(&t->v))
        return nki_fail(SIM_E_SHAPE_MISMATCH, "tensor.reshape", "the view is not contiguous");
    r.ndim = nd;
    {
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            r.shape[d] = shape[d];
            r.strides[d] = s;
            s *= shape[d];
        }
    }
    return (PyObject *)nki_tensor_view(t->v.st, &r, -1);
}


PyObject *nki_broadcast_view(nki_tensor *t, PyObject *shape_obj, const char *api)
{
    int64_t shape[SIMC_MAX_DIMS];
    int nd = nki_parse_shape(shape_obj, api, shape, NULL);
    simc_view r = t->v;
    int off;

    if (nd < 0)
        return NULL;
    if (nd < t->v.ndim)
        return nki_fail(SIM_E_SHAPE_MISMATCH, api, "cannot broadcast %d dims to %d", t->v.ndim, nd);
    off = nd - t->v.ndim;
    r.ndim = nd;
    for (int d = nd - 1; d >= 0; d--) {
        int sd = d - off;
        int64_t have = sd >= 0 ? t->v.shape[sd] : 1;
        if (have == shape[d]) {
            r.shape[d] = have;
            r.strides[d] = sd >= 0 ? t->v.strides[sd] : 0;
        } else if (have == 1) {
            r.shape[d] = shape[d];
            r.strides[d] = 0;
        } else {
            return nki_fail(SIM_E_SHAPE_MISMATCH, api,
                            "dimension %d of size %lld cannot broadcast to %lld", d,
                            (long long)have, (long long)shape[d]);
        }
    }
    return (PyObject *)nki_tensor_view(t->v.st, &r, t->pdim >= 0 ? t->pdim + off : -1);
}

static PyObject *tensor_broadcast_to(nki_tensor *t, PyObject *shape)
{
    return nki_broadcast_view(t, shape, "tensor.broadcast_to");
}

static PyObject *tensor_ap(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = { "pattern", "offset", "*scalar_offset",
                                         "*vector_offset", "*indirect_dim", "dtype" };
    PyObject *a[NKI_NARGS(names)];
    PyObject *seq;
    simc_view r = t->v;
    int64_t lo, hi;
    Py_ssize_t n;

    if (nki_parse("tensor.ap", args, nargs, kwnames, names, NKI_NARGS(names), a) < 0)
        return NULL;
    if (a[2] && a[2] != Py_None)
        return nki_fail(SIM_E_UNSUPPORTED_API, "tensor.ap", "scalar_offset (dynamic access patterns)");
    if (a[3] && a[3] != Py_None)
        return nki_fail(SIM_E_UNSUPPORTED_API, "tensor.ap", "vector_offset (indirect access)");
    if (!a[0])
        return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap", "pattern is required");
    seq = PySequence_Fast(a[0], "pattern");
    if (!seq) {
        PyErr_Clear();
        return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap", "pattern must be a list of [step, count]");
    }
    n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > SIMC_MAX_DIMS) {
        Py_DECREF(seq);
        return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap", "pattern has %zd pairs", n);
    }
    r.ndim = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *ps = PySequence_Fast(pair, "pair");
        if (!ps || PySequence_Fast_GET_SIZE(ps) != 2 ||
            !get_int(PySequence_Fast_GET_ITEM(ps, 0), &r.strides[i]) ||
            !get_int(PySequence_Fast_GET_ITEM(ps, 1), &r.shape[i])) {
            PyErr_Clear();
            Py_XDECREF(ps);
            Py_DECREF(seq);
            return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap", "pattern entry %zd must be [step, count]", i);
        }
        Py_DECREF(ps);
    }
    Py_DECREF(seq);
    if (a[1] && a[1] != Py_None && !get_int(a[1], &r.offset))
        return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap", "offset must be an int");
    if (t->pdim >= 0 && r.shape[0] > 1 && r.strides[0] != t->v.st->part_elems)
        return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap",
                        "the partition step is %lld, it must equal the free size %lld",
                        (long long)r.strides[0], (long long)t->v.st->part_elems);
    if (a[5] && a[5] != Py_None) {
        int dt = nki_dtype_from(a[5], "tensor.ap");
        if (dt < 0)
            return NULL;
        if (sim_dtype_size((sim_dtype)dt) != sim_dtype_size(r.dtype))
            return nki_fail(SIM_E_DTYPE, "tensor.ap", "dtype %s has a different size than %s",
                            sim_dtype_name((sim_dtype)dt), sim_dtype_name(r.dtype));
        r.dtype = (sim_dtype)dt;
    }
    simc_view_extent(&r, &lo, &hi);
    if (lo < 0 || hi >= t->v.st->nelem)
        return nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, "tensor.ap",
                        "the pattern reaches elements [%lld, %lld] of a tensor of %lld",
                        (long long)lo, (long long)hi, (long long)t->v.st->nelem);
    return (PyObject *)nki_tensor_view(t->v.st, &r, t->pdim >= 0 ? 0 : -1);
}

static PyObject *tensor_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(self, name);
    const char *s;
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    s = PyUnicode_AsUTF8(name);
    if (!s || (s[0] == '_' && s[1] == '_'))
        return NULL;
    PyErr_Clear();
    return nki_fail(SIM_E_UNSUPPORTED_API, "tensor", "tensor.%s is not implemented", s);
}

static Py_ssize_t tensor_len(PyObject *self)
{
    nki_tensor *t = (nki_tensor *)self;
    return t->v.ndim ? (Py_ssize_t)t->v.shape[0] : 0;
}

static PyObject *tensor_repr(PyObject *self)
{
    nki_tensor *t = (nki_tensor *)self;
    char buf[200];
    int n = snprintf(buf, sizeof(buf), "<nki tensor %s %s (", mem_name(t->v.st->mem),
                     sim_dtype_name(t->v.dtype));
    for (int d = 0; d < t->v.ndim && n < 180; d++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, d ? ", %lld" : "%lld", (long long)t->v.shape[d]);
    snprintf(buf + n, sizeof(buf) - (size_t)n, ")>");
    return PyUnicode_FromString(buf);
}


static PyMethodDef tensor_methods[] = {
    { "reshape", (PyCFunction)(void (*)(void))tensor_reshape, METH_FASTCALL, "reshape a contiguous view" },
    { "broadcast_to", (PyCFunction)tensor_broadcast_to, METH_O, "broadcast size-1 dims" },
    { "ap", (PyCFunction)(void (*)(void))tensor_ap, METH_FASTCALL | METH_KEYWORDS, "access pattern view" },
    { NULL, NULL, 0, NULL },
};

static PyMappingMethods tensor_as_mapping = {
    tensor_len,
    nki_tensor_subscript,
    nki_tensor_ass_subscript,
};

PyTypeObject nki_TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.tensor",
    .tp_basicsize = sizeof(nki_tensor),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_repr = tensor_repr,
    .tp_as_number = &nki_tensor_as_number,
    .tp_as_mapping = &tensor_as_mapping,
    .tp_getattro = tensor_getattro,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An NKI tensor: a view of an HBM tensor or an on-chip tile.",
    .tp_richcompare = nki_tensor_richcompare,
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
};

/* ===== index expressions ===== */

PyObject *nki_index_new(int ndim, const int64_t *shape, const int64_t *coef, int64_t c)
{
    nki_index *e = PyObject_New(nki_index, &nki_IndexType);
    if (!e)
        return NULL;
    e->ndim = ndim;
    for (int k = 0; k < ndim; k++) {
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
    int64_t shape[SIMC_MAX_DIMS], coef[SIMC_MAX_DIMS] = { 0 }, c = 0, iv;
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
                coef[gk] += sc[i] * e->coef[k];
            }
            c += sc[i] * e->c;
        } else if (get_int(ops[i], &iv)) {
            c += sc[i] * iv;
        } else if (ops[i] == Py_None && sc[i] == 0) {
            continue;   /* the unused operand of a scaling */
        } else {
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    return nki_index_new(nd, shape, coef, c);
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
    if (Py_TYPE(a) == &nki_IndexType && get_int(b, &k))
        return index_lin(a, k, Py_None, 0);
    if (Py_TYPE(b) == &nki_IndexType && get_int(a, &k))
        return index_lin(b, k, Py_None, 0);
    if (Py_TYPE(a) == &nki_IndexType && Py_TYPE(b) == &nki_IndexType)
        return nki_fail(SIM_E_UNSUPPORTED_API, "index expression",
                        "the product of two index expressions is not affine");
    Py_RETURN_NOTIMPLEMENTED;
}

static PyObject *index_floordiv(PyObject *a, PyObject *b)
{
    int64_t k;
    nki_index *e = (nki_index *)a;
    if (Py_TYPE(a) != &nki_IndexType || !get_int(b, &k))
        Py_RETURN_NOTIMPLEMENTED;
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
        return nki_index_new(e->ndim, e->shape, coef, e->c / k);
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

    if (!(Py_TYPE(a) == &nki_IndexType || get_int(a, &iv)) ||
        !(Py_TYPE(b) == &nki_IndexType || get_int(b, &iv)))
        Py_RETURN_NOTIMPLEMENTED;
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
    for (int k = 0; k < e->ndim; k++) {
        p->shape[k] = e->shape[k];
        n *= e->shape[k];
    }
    p->data = kf_malloc((size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        int64_t v = e->c;
        bool r;
        for (int k = 0; k < e->ndim; k++)
            v += e->coef[k] * idx[k];
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
    return nki_index_new(nd, shape, coef, e->c);
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
    *n = 1;
    for (int k = 0; k < nd; k++) {
        p->shape[k] = shape[k];
        *n *= shape[k];
    }
    p->data = kf_malloc((size_t)(*n ? *n : 1));
    return (PyObject *)p;
}

int nki_mask_dense(PyObject *obj, int ndim, const int64_t *shape, const char *api,
                   uint8_t **mask)
{
    nki_pred *p;
    int64_t n = 1, idx[SIMC_MAX_DIMS] = { 0 };
    uint8_t *m;

    *mask = NULL;
    if (!obj || obj == Py_None || obj == Py_True)
        return 0;
    for (int k = 0; k < ndim; k++)
        n *= shape[k];
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
    if (p->ndim > ndim) {
        nki_fail(SIM_E_SHAPE_MISMATCH, api, "mask has %d dims, the operation %d", p->ndim, ndim);
        return -1;
    }
    for (int k = 0; k < p->ndim; k++) {
        int64_t ps = p->shape[k], os = shape[ndim - p->ndim + k];
        if (ps != 1 && ps != os) {
            nki_fail(SIM_E_SHAPE_MISMATCH, api, "mask dimension %d has size %lld, the operation %lld",
                     k, (long long)ps, (long long)os);
            return -1;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t f = 0;
        for (int k = 0; k < p->ndim; k++) {
            int64_t ps = p->shape[k];
            f = f * ps + (ps == 1 ? 0 : idx[ndim - p->ndim + k]);
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
            Py_RETURN_NOTIMPLEMENTED;
        if ((op == 0 && o == Py_True) || (op == 1 && o == Py_False)) {
            Py_INCREF(p);
            return p;
        }
        pa = (nki_pred *)p;
        r = (nki_pred *)pred_new_like(pa->ndim, pa->shape, &n);
        if (r)
            memset(r->data, op == 1 ? 1 : (op == 0 ? 0 : 0), (size_t)n);
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
    memcpy(r->data, ma, (size_t)n);
    if (nki_mask_dense(b, nd, shape, "mask", &mb) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        r->data[i] = op == 0 ? (r->data[i] && mb[i]) : op == 1 ? (r->data[i] || mb[i])
                                                               : (r->data[i] != mb[i]);
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

static PyObject *mgrid_result_p(PyObject *o, void *u)
{
    (void)u;
    return mgrid_result_item(o, 0);
}

static PyObject *mgrid_result_x(PyObject *o, void *u)
{
    (void)u;
    return mgrid_result_item(o, 1);
}

static PyGetSetDef mgrid_result_getset[] = {
    { "p", mgrid_result_p, NULL, "partition axis index", NULL },
    { "x", mgrid_result_x, NULL, "first free axis index", NULL },
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
