/* nki_exec — helpers every NKI call uses: operands, broadcasting, reading and
 * writing views as FP32, dtype promotion, assignment and instruction
 * emission (see nki_internal.h). */
#include "nki_internal.h"

#include <math.h>
#include <string.h>

#include "kf_alloc.h"

int nki_opnd_from(PyObject *obj, const char *api, const char *what, nki_opnd *o)
{
    o->t = NULL;
    o->s = 0;
    o->s_int = obj && PyLong_Check(obj);
    o->si = 0;
    if (o->s_int) {
        int ovf = 0;
        long long v = PyLong_AsLongLongAndOverflow(obj, &ovf);
        if (ovf || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            o->s_int = false;   /* beyond int64: a float scalar */
        } else {
            o->si = v;
        }
    }
    if (obj && nki_tensor_check(obj)) {
        o->t = (nki_tensor *)obj;
        return 0;
    }
    if (obj && (PyFloat_Check(obj) || PyLong_Check(obj))) {
        o->s = (float)PyFloat_AsDouble(obj);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            nki_fail(SIM_E_BAD_ARGUMENT, api, "%s is not representable as a float", what);
            return -1;
        }
        return 0;
    }
    if (obj && PyNumber_Check(obj) && !PySequence_Check(obj)) {   /* numpy scalars */
        double d = PyFloat_AsDouble(obj);
        if (!PyErr_Occurred()) {
            o->s = (float)d;
            return 0;
        }
        PyErr_Clear();
    }
    nki_fail(SIM_E_BAD_ARGUMENT, api, "%s must be a tensor or a number, got %s", what,
             obj ? Py_TYPE(obj)->tp_name : "nothing");
    return -1;
}

int64_t nki_view_parts(const nki_tensor *t)
{
    if (t->pdim < 0 || t->v.ndim == 0)
        return 1;
    return t->v.shape[t->pdim];
}

bool nki_bcast(const simc_view *in, int nd, const int64_t *shape, simc_view *out)
{
    int off = nd - in->ndim;
    if (off < 0)
        return false;
    *out = *in;
    out->ndim = nd;
    for (int d = nd - 1; d >= 0; d--) {
        int sd = d - off;
        int64_t have = sd >= 0 ? in->shape[sd] : 1;
        if (have == shape[d]) {
            out->shape[d] = have;
            out->strides[d] = sd >= 0 ? in->strides[sd] : 0;
        } else if (have == 1) {
            out->shape[d] = shape[d];
            out->strides[d] = 0;
        } else {
            return false;
        }
    }
    return true;
}

float *nki_read(const simc_view *v, int slot)
{
    float *buf = nki_scratch(slot, simc_view_elems(v));
    if (nki_cur->numerics || v->st->open)
        simc_gather(v, buf);
    return buf;
}

float *nki_read_opnd(const nki_opnd *o, int nd, const int64_t *shape, int slot)
{
    int64_t n = 1;
    simc_view b;
    float *buf;

    for (int d = 0; d < nd; d++)
        n *= shape[d];
    if (o->t) {
        if (nki_bcast(&o->t->v, nd, shape, &b))
            return nki_read(&b, slot);
        return nki_read(&o->t->v, slot);   /* same element count, other shape */
    }
    buf = nki_scratch(slot, n);
    if (nki_cur->numerics)
        for (int64_t i = 0; i < n; i++)
            buf[i] = o->s;
    return buf;
}

bool nki_opnd_is_int(const nki_opnd *o)
{
    return o->t ? !simc_dtype_is_float(o->t->v.dtype) : o->s_int;
}

int64_t *nki_read_i64(const simc_view *v, int slot)
{
    int64_t *buf = (int64_t *)(void *)nki_scratch(slot, 2 * simc_view_elems(v));
    if (nki_cur->numerics || v->st->open)
        simc_gather_i64(v, buf);
    return buf;
}

int64_t *nki_read_opnd_i64(const nki_opnd *o, int nd, const int64_t *shape, int slot)
{
    int64_t n = 1;
    simc_view b;
    int64_t *buf;

    for (int d = 0; d < nd; d++)
        n *= shape[d];
    if (o->t) {
        if (nki_bcast(&o->t->v, nd, shape, &b))
            return nki_read_i64(&b, slot);
        return nki_read_i64(&o->t->v, slot);
    }
    buf = (int64_t *)(void *)nki_scratch(slot, 2 * n);
    if (nki_cur->numerics)
        for (int64_t i = 0; i < n; i++)
            buf[i] = o->si;
    return buf;
}

void nki_write_i64(const simc_view *v, const int64_t *vals, const uint8_t *mask)
{
    nki_store_select(v, mask);
    if (nki_cur->numerics)
        simc_scatter_i64(v, vals, mask);
    else if (v->st->open)
        simc_gather(v, nki_scratch(4, simc_view_elems(v)));
}

void nki_copy_vals(const simc_view *dst, const simc_view *src, const uint8_t *mask)
{
    if (nki_cur->numerics && !mask && simc_copy_raw(dst, src)) {
        nki_store_select(dst, NULL);
        return;
    }
    if (!simc_dtype_is_float(dst->dtype) && !simc_dtype_is_float(src->dtype))
        nki_write_i64(dst, nki_read_i64(src, 0), mask);
    else
        nki_write(dst, nki_read(src, 0), mask);
}

/* Step idx (row-major) to the next element of shape. */
static void next_index(int nd, const int64_t *shape, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d])
            return;
        idx[d] = 0;
    }
}

void nki_store_select(const simc_view *v, const uint8_t *mask)
{
    simc_store *st = v->st;
    int64_t n = simc_view_elems(v), idx[SIMC_MAX_DIMS] = { 0 };

    if (!st->fresh || !mask || st->nelem <= 0)
        return;
    if (!st->sel)
        st->sel = kf_calloc((size_t)st->nelem, 1);
    for (int64_t i = 0; i < n; i++) {
        int64_t f = simc_elem_index(v, idx);
        if (mask[i] && f >= 0 && f < st->nelem)
            st->sel[f] = 1;
        next_index(v->ndim, v->shape, idx);
    }
}

int nki_legacy_mask(PyObject *mask_obj, nki_tensor *tile, const char *api)
{
    uint8_t *mask;
    if (nki_mask_dense(mask_obj, tile->v.ndim, tile->v.shape, api, &mask) < 0)
        return -1;
    nki_store_select(&tile->v, mask);
    return 0;
}

void nki_store_written(simc_store *st)
{
    if (st->fresh) {
        st->fresh = false;
    } else if (st->sel) {
        free(st->sel);
        st->sel = NULL;
    }
}

const uint8_t *nki_sel_mask(const simc_view *sv, const uint8_t *mask, int slot)
{
    const simc_store *st = sv->st;
    int64_t n = simc_view_elems(sv), idx[SIMC_MAX_DIMS] = { 0 };
    uint8_t *m;

    if (!st->sel)
        return mask;
    m = (uint8_t *)nki_scratch(slot, (n + 3) / 4);
    for (int64_t i = 0; i < n; i++) {
        int64_t f = simc_elem_index(sv, idx);
        m[i] = (uint8_t)(f >= 0 && f < st->nelem && st->sel[f] && (!mask || mask[i]));
        next_index(sv->ndim, sv->shape, idx);
    }
    return m;
}

void nki_write(const simc_view *v, const float *vals, const uint8_t *mask)
{
    nki_store_select(v, mask);
    if (nki_cur->numerics)
        simc_scatter(v, vals, mask);
    else if (v->st->open)
        simc_gather(v, nki_scratch(4, simc_view_elems(v)));   /* a write closes PSUM
                                                                  accumulation like a read */
}

sim_insn *nki_emit(sim_opcode op, sim_engine eng, const simc_view *dst, const simc_view *s0,
                   const simc_view *s1, const simc_view *s2)
{
    sim_insn *in = nki_insn(op);
    const simc_view *src[3] = { s0, s1, s2 };
    const sim_region *base = NULL;

    in->engine = (uint8_t)eng;
    if (dst) {
        nki_store_written(dst->st);
        simc_view_region(dst, &in->dst[0]);
        in->ndst = 1;
    }
    for (int i = 0; i < 3; i++)
        if (src[i] && src[i]->st)
            simc_view_region(src[i], &in->src[in->nsrc++]);
    for (int i = 0; i < in->nsrc && !base; i++)
        if (in->src[i].mem != SIM_MEM_HBM)
            base = &in->src[i];
    if (!base && in->ndst)
        base = &in->dst[0];
    if (!base && in->nsrc)
        base = &in->src[0];
    if (base) {
        in->partitions = base->part_count;
        in->elems_per_part = base->elems_per_part;
    }
    in->flops = (uint64_t)in->partitions * in->elems_per_part;
    if (in->ndst && in->nsrc && in->dst[0].dtype != in->src[0].dtype)
        in->flags |= SIM_F_CAST;
    nki_cur->calls++;
    return in;
}

static nki_tensor *mark_fresh(nki_tensor *t)
{
    if (t)
        t->v.st->fresh = true;
    return t;
}

nki_tensor *nki_new_tile(sim_mem mem, sim_dtype dt, int nd, const int64_t *shape, const char *api)
{
    int64_t s2[SIMC_MAX_DIMS];
    if (nd == 1) {    /* on-chip tiles are at least 2-D */
        s2[0] = shape[0];
        s2[1] = 1;
        return mark_fresh(nki_tensor_alloc(mem, dt, 2, s2, 0, "", api));
    }
    if (nd == 0) {
        s2[0] = 1;
        s2[1] = 1;
        return mark_fresh(nki_tensor_alloc(mem, dt, 2, s2, 0, "", api));
    }
    return mark_fresh(nki_tensor_alloc(mem, dt, nd, shape, 0, "", api));
}

int nki_dtype_arg(PyObject *obj, sim_dtype dflt, const char *api)
{
    if (!obj || obj == Py_None)
        return (int)dflt;
    return nki_dtype_from(obj, api);
}

static int dtype_rank(sim_dtype dt)
{
    switch (dt) {
    case SIM_DT_BOOL: return 0;
    case SIM_DT_UINT8: case SIM_DT_INT8: return 1;
    case SIM_DT_UINT16: case SIM_DT_INT16: return 2;
    case SIM_DT_UINT32: case SIM_DT_INT32: return 3;
    default: return 4;
    }
}

sim_dtype nki_promote(const nki_opnd *a, const nki_opnd *b)
{
    sim_dtype da = a->t ? a->t->v.dtype : a->s_int ? SIM_DT_INT32 : SIM_DT_FLOAT32;
    sim_dtype db = b->t ? b->t->v.dtype : b->s_int ? SIM_DT_INT32 : SIM_DT_FLOAT32;
    bool fa = simc_dtype_is_float(da), fb = simc_dtype_is_float(db);

    if (da == db)
        return da;
    if (fa && !fb)
        return da;
    if (fb && !fa)
        return db;
    if (fa && fb)
        return SIM_DT_FLOAT32;
    return dtype_rank(da) >= dtype_rank(db) ? da : db;
}

bool nki_same_view(const simc_view *a, const simc_view *b)
{
    if (a->st != b->st || a->offset != b->offset || a->ndim != b->ndim || a->dtype != b->dtype)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d]))
            return false;
    return true;
}

int nki_assign(nki_tensor *dst, PyObject *src, const uint8_t *mask, const char *api)
{
    const simc_view *dv = &dst->v;
    int64_t n = simc_view_elems(dv);
    nki_opnd o;
    float *vals;
    simc_view b;
    const simc_view *sv = NULL;
    sim_opcode op;
    sim_engine eng;

    if (nki_opnd_from(src, api, "the assigned value", &o) < 0)
        return -1;
    if (n > NKI_MAX_OP_ELEMS) {
        nki_fail(SIM_E_LIMIT, api, "one copy of %lld elements, at most %lld (split it)",
                 (long long)n, (long long)NKI_MAX_OP_ELEMS);
        return -1;
    }
    if (o.t) {
        if (nki_same_view(&o.t->v, dv))
            return 0;   /* t[idx] += v wrote in place already */
        if (nki_bcast(&o.t->v, dv->ndim, dv->shape, &b))
            sv = &b;
        else if (simc_view_elems(&o.t->v) == n)
            sv = &o.t->v;
        else {
            char ds[64] = "", ss[64] = "";
            int k = 0;
            for (int d = 0; d < dv->ndim; d++)
                k += snprintf(ds + k, sizeof(ds) - (size_t)k, d ? "x%lld" : "%lld", (long long)dv->shape[d]);
            k = 0;
            for (int d = 0; d < o.t->v.ndim; d++)
                k += snprintf(ss + k, sizeof(ss) - (size_t)k, d ? "x%lld" : "%lld", (long long)o.t->v.shape[d]);
            nki_fail(SIM_E_SHAPE_MISMATCH, api, "cannot assign a %s tile to a %s view", ss, ds);
            return -1;
        }
        if (nki_check_bounds(o.t, NULL, api) < 0)
            return -1;
    }
    if (sv)   /* `dst[...] = op(..., mask=m)`: only what the op wrote */
        mask = nki_sel_mask(sv, mask, 7);
    if (nki_check_bounds(dst, mask, api) < 0)
        return -1;
    if (!sv) {
        op = SIM_OP_MEMSET;
        eng = SIM_ENG_VECTOR;
    } else if (dv->st->mem == SIM_MEM_HBM || sv->st->mem == SIM_MEM_HBM) {
        op = SIM_OP_DMA_COPY;
        eng = SIM_ENG_DMA;
    } else {
        op = SIM_OP_TENSOR_COPY;
        eng = sv->st->mem == SIM_MEM_PSUM ? SIM_ENG_SCALAR : SIM_ENG_VECTOR;
    }
    if (sv) {
        nki_copy_vals(dv, sv, mask);
    } else if (o.s_int && !simc_dtype_is_float(dv->dtype)) {
        nki_write_i64(dv, nki_read_opnd_i64(&o, dv->ndim, dv->shape, 0), mask);
    } else {
        vals = nki_read_opnd(&o, dv->ndim, dv->shape, 0);
        nki_write(dv, vals, mask);
    }
    {
        sim_insn *in = nki_emit(op, eng, dv, sv, NULL, NULL);
        if (mask)
            in->flags |= SIM_F_MASKED;
    }
    return 0;
}
