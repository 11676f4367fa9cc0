/* nki_tensor — the tensor type: allocation with the per-target memory
 * checks, views (ints, slices, nl.ds, ellipsis, negative ints, the >=2-D
 * on-chip rule, HBM int-drop, block dims, advanced indexing with index
 * expressions), .reshape, .broadcast_to, .ap and attributes (see
 * nki_internal.h). */
#include "nki_internal.h"

#include <stdio.h>
#include <string.h>

#include "kf_alloc.h"

/* ===== tensors ===== */

static void tensor_dealloc(nki_tensor *t)
{
    simc_store *st = t->v.st;
    if (st && st->refcnt == 1)
        nki_store_release(st);
    simc_store_unref(st);
    free(t->oob_map);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* Elements a view may address: HBM views as many as a tensor holds, on-chip
 * views 128 partitions x 2^20 (engines stream at most 64K elements per
 * partition; broadcasts may repeat more).  Keeps every element count well
 * inside 64 bits and every scratch buffer bounded. */
#define NKI_VIEW_MAX_HBM     ((int64_t)1 << 36)
#define NKI_VIEW_MAX_ONCHIP  ((int64_t)1 << 27)

nki_tensor *nki_tensor_view(simc_store *st, const simc_view *v, int pdim)
{
    nki_tensor *t;
    int64_t n = 1, limit = st->mem == SIM_MEM_HBM ? NKI_VIEW_MAX_HBM : NKI_VIEW_MAX_ONCHIP;

    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] < 0 || __builtin_mul_overflow(n, v->shape[d], &n) || n > limit)
            return (nki_tensor *)nki_fail(SIM_E_LIMIT, "tensor view",
                                          "a view of more than %lld elements of %s",
                                          (long long)limit, st->mem == SIM_MEM_HBM ? "HBM" : "an on-chip tile");
    }
    t = PyObject_New(nki_tensor, &nki_TensorType);
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
    t->oob_map = NULL;
    return t;
}

static const char *mem_name(int mem)
{
    return mem == SIM_MEM_HBM ? "hbm" : mem == SIM_MEM_SBUF ? "sbuf" : "psum";
}

nki_tensor *nki_tensor_alloc(sim_mem mem, sim_dtype dt, int ndim, const int64_t *shape,
                             int pdim, const char *name, const char *api)
{
    return nki_tensor_alloc_ex(mem, dt, ndim, shape, pdim, name, api, false, NULL);
}

static int64_t tiles_product(const int64_t *t, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= t[i];
    return p;
}

/* Where an allocation hint puts a tensor of `nb` block dims, `parts`
 * partitions and `blk` bytes per block and partition: *off and *reserve
 * (bytes per partition from *off).  -1 with SIM_E_BAD_ARGUMENT naming the
 * hint when it does not fit the tensor or the memory. */
/* An int from item i of a sequence; -1 when it is not one. */
static int seq_int(PyObject *seq, Py_ssize_t i, int64_t *v)
{
    return nki_get_int(PySequence_Fast_GET_ITEM(seq, i), v) && *v >= 0 ? 0 : -1;
}

/* alloc(func): call func for every block and take the span of the places it
 * gives.  -1 with the error raised (a Python error in func propagates). */
static int hint_func_place(const nki_hint *h, sim_mem mem, int nb, const int64_t *bshape, int64_t parts,
                           uint64_t blk, uint64_t capacity, const char *api, uint64_t *off,
                           uint64_t *reserve)
{
    int64_t n = 1, idx[SIMC_MAX_DIMS] = { 0 };
    uint64_t lo = UINT64_MAX, hi = 0;
    int want = mem == SIM_MEM_PSUM ? 3 : 2;

    for (int d = 0; d < nb; d++)
        n *= bshape[d];
    if (n > 4096)
        return (nki_fail(SIM_E_LIMIT, api, "%s over %lld blocks, at most 4096", h->text, (long long)n), -1);
    for (int64_t b = 0; b < n; b++) {
        PyObject *t = PyTuple_New(nb), *r, *seq;
        int64_t v[3] = { 0, 0, 0 };
        uint64_t at;
        for (int d = 0; t && d < nb; d++)
            PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(idx[d]));
        r = t ? PyObject_CallFunction(h->func, "OLK", t, (long long)parts, (unsigned long long)blk) : NULL;
        Py_XDECREF(t);
        if (!r)
            return -1;
        seq = PySequence_Check(r) ? PySequence_Fast(r, "") : NULL;
        Py_DECREF(r);
        if (!seq || PySequence_Fast_GET_SIZE(seq) != want || seq_int(seq, 0, &v[0]) < 0 ||
            seq_int(seq, 1, &v[1]) < 0 || (want == 3 && seq_int(seq, 2, &v[2]) < 0)) {
            Py_XDECREF(seq);
            PyErr_Clear();
            return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s must return %s of ints >= 0 for block %lld",
                             h->text, want == 3 ? "(bank, partition, byte)" : "(partition, byte)",
                             (long long)b), -1);
        }
        Py_DECREF(seq);
        /* v: PSUM (bank, partition, byte), SBUF (partition, byte, -) */
        if ((want == 3 ? v[1] : v[0]) + parts > SIMC_PMAX)
            return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s puts block %lld at partition %lld, past %d",
                             h->text, (long long)b, (long long)(want == 3 ? v[1] : v[0]), SIMC_PMAX), -1);
        if (want == 3) {
            if ((uint64_t)v[0] >= capacity / SIMC_PSUM_BANK_BYTES || (uint64_t)v[2] + blk > SIMC_PSUM_BANK_BYTES)
                return (nki_fail(SIM_E_BAD_ARGUMENT, api,
                                 "%s puts block %lld at bank %lld byte %lld: past the %llu banks or "
                                 "its bank's %d bytes", h->text, (long long)b, (long long)v[0],
                                 (long long)v[2], (unsigned long long)(capacity / SIMC_PSUM_BANK_BYTES),
                                 SIMC_PSUM_BANK_BYTES), -1);
            at = (uint64_t)v[0] * SIMC_PSUM_BANK_BYTES + (uint64_t)v[2];
        } else {
            if ((uint64_t)v[1] + blk > capacity)
                return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s puts block %lld at byte %lld, past the %llu "
                                 "bytes of a partition", h->text, (long long)b, (long long)v[1],
                                 (unsigned long long)capacity), -1);
            at = (uint64_t)v[1];
        }
        if (at < lo)
            lo = at;
        if (at + blk > hi)
            hi = at + blk;
        for (int d = nb - 1; d >= 0; d--) {
            if (++idx[d] < bshape[d])
                break;
            idx[d] = 0;
        }
    }
    *off = lo == UINT64_MAX ? 0 : lo;
    *reserve = hi > *off ? hi - *off : blk;
    return 0;
}

static int hint_place(const nki_hint *h, sim_mem mem, int nb, int64_t parts, uint64_t blk,
                      uint64_t capacity, const char *api, uint64_t *off, uint64_t *reserve)
{
    int64_t nbank = tiles_product(h->bank_tiles, h->n_bank);
    int64_t npar = tiles_product(h->par_tiles, h->n_par);
    int64_t nfree = tiles_product(h->free_tiles, h->n_free);
    uint64_t span = (uint64_t)nfree * blk;

    if (h->n_bank > nb || h->n_par > nb || h->n_free > nb)
        return (nki_fail(SIM_E_BAD_ARGUMENT, api,
                         "%s gives tiles for %d block dims, the tensor has %d (dims before the "
                         "partition dim)", h->text,
                         h->n_bank > h->n_par ? (h->n_bank > h->n_free ? h->n_bank : h->n_free)
                                              : (h->n_par > h->n_free ? h->n_par : h->n_free),
                         nb), -1);
    int64_t top = h->base_partition + npar * parts;
    if (top > SIMC_PMAX)
        return (nki_fail(SIM_E_BAD_ARGUMENT, api,
                         "%s puts partitions up to %lld, past %d", h->text, (long long)top, SIMC_PMAX), -1);
    if (mem == SIM_MEM_PSUM) {
        uint64_t banks = capacity / SIMC_PSUM_BANK_BYTES;
        if ((uint64_t)h->base_bank + (uint64_t)nbank > banks)
            return (nki_fail(SIM_E_BAD_ARGUMENT, api,
                             "%s uses banks %lld..%lld, PSUM has %llu", h->text,
                             (long long)h->base_bank, (long long)(h->base_bank + nbank - 1),
                             (unsigned long long)banks), -1);
        if ((uint64_t)h->base_addr + span > SIMC_PSUM_BANK_BYTES)
            return (nki_fail(SIM_E_BAD_ARGUMENT, api,
                             "%s puts %lld tiles of %llu bytes from byte %lld of a bank, past its "
                             "%d bytes", h->text, (long long)nfree, (unsigned long long)blk,
                             (long long)h->base_addr, SIMC_PSUM_BANK_BYTES), -1);
        *off = (uint64_t)h->base_bank * SIMC_PSUM_BANK_BYTES + (uint64_t)h->base_addr;
        *reserve = (uint64_t)(nbank - 1) * SIMC_PSUM_BANK_BYTES + span;
        return 0;
    }
    if ((uint64_t)h->base_addr + span > capacity)
        return (nki_fail(SIM_E_BAD_ARGUMENT, api,
                         "%s puts %lld tiles of %llu bytes from byte %lld, past the %llu bytes "
                         "of a partition", h->text, (long long)nfree, (unsigned long long)blk,
                         (long long)h->base_addr, (unsigned long long)capacity), -1);
    *off = (uint64_t)h->base_addr;
    *reserve = span;
    return 0;
}

nki_tensor *nki_tensor_alloc_ex(sim_mem mem, sim_dtype dt, int ndim, const int64_t *shape,
                                int pdim, const char *name, const char *api, bool psum_banks,
                                const nki_hint *hint)
{
    nki_ctx *c = nki_cur;
    simc_store *st;
    simc_view v;
    nki_tensor *t;
    int64_t parts = 1, free_elems = 1, blocks = 1, total = 1;
    unsigned es = sim_dtype_size(dt);
    uint64_t reserve = 0, hint_off = 0, blk_bytes = 0;
    uint8_t place = SIM_PLACE_ANY;

    if (ndim > SIMC_MAX_DIMS)
        return (nki_tensor *)nki_fail(SIM_E_BAD_ARGUMENT, api, "%d dimensions, at most %d",
                                      ndim, SIMC_MAX_DIMS);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return (nki_tensor *)nki_fail(SIM_E_BAD_ARGUMENT, api,
                                          "dimension %d has negative size %lld", d,
                                          (long long)shape[d]);
    }
    /* Checked product (a zero dim counts as one in the bound), so the
     * block and free-element products below cannot overflow either. */
    if (!simc_shape_elems(ndim, shape, NKI_VIEW_MAX_HBM, &total))
        return (nki_tensor *)nki_fail(SIM_E_LIMIT, api, "tensor of more than 2^36 elements");
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
        int64_t part_bytes = free_elems * (int64_t)es;
        if (mem == SIM_MEM_PSUM && part_bytes > SIMC_PSUM_BANK_BYTES && !psum_banks)
            return (nki_tensor *)nki_fail(SIM_E_PSUM_TILE, api,
                                          "PSUM tile of %lld bytes per partition > %d",
                                          (long long)part_bytes, SIMC_PSUM_BANK_BYTES);
        blk_bytes = ((uint64_t)part_bytes + 3) & ~(uint64_t)3;
        free_elems *= blocks;
    }
    /* Capacity first, so an oversized tile fails before any memory is taken. */
    if (mem == SIM_MEM_HBM) {
        uint64_t bytes = (uint64_t)total * es, in_all = c->hbm_bytes + bytes;
        if (in_all > SIM_HBM_LIMIT_BYTES)
            return (nki_tensor *)nki_fail(SIM_E_LIMIT, api,
                                          "HBM tensors of %llu bytes in all exceed the "
                                          "simulator's %llu bytes",
                                          (unsigned long long)in_all,
                                          (unsigned long long)SIM_HBM_LIMIT_BYTES);
        c->hbm_bytes += bytes;
        st = simc_store_new(mem, dt, (int)parts, free_elems, true);
    } else {
        nki_arena *a = mem == SIM_MEM_SBUF ? &c->sbuf : &c->psum;
        uint64_t cap = mem == SIM_MEM_SBUF ? c->tgt->sbuf_bytes : c->tgt->psum_bytes;
        uint64_t off = 0, window = 0;
        const char *mn = mem_name(mem);
        if (blk_bytes == 0)
            blk_bytes = 4;
        if (hint && hint->set) {
            if ((hint->func ? hint_func_place(hint, mem, pdim, shape, parts, blk_bytes, cap, api, &hint_off,
                                              &reserve)
                            : hint_place(hint, mem, pdim, parts, blk_bytes, cap, api, &hint_off, &reserve)) < 0)
                return NULL;
            place = SIM_PLACE_FIXED;
        } else if (mem == SIM_MEM_PSUM && psum_banks) {
            /* a placed multi-bank PSUM tensor: whole banks */
            reserve = (blk_bytes * (uint64_t)blocks + SIMC_PSUM_BANK_BYTES - 1) /
                      SIMC_PSUM_BANK_BYTES * SIMC_PSUM_BANK_BYTES;
            place = SIM_PLACE_BANKS;
        } else if (mem == SIM_MEM_PSUM) {
            /* Blocks of a PSUM tensor pack into banks, none straddling two:
             * as many per bank as fit, whole banks when they need several. */
            uint64_t per_bank = SIMC_PSUM_BANK_BYTES / blk_bytes;
            uint64_t banks = ((uint64_t)blocks + per_bank - 1) / per_bank;
            if (banks > 1) {
                reserve = banks * SIMC_PSUM_BANK_BYTES;
                place = SIM_PLACE_BANKS;
            } else {
                reserve = blk_bytes * (uint64_t)(blocks ? blocks : 1);
                place = SIM_PLACE_IN_BANK;
            }
        } else {
            reserve = blk_bytes * (uint64_t)(blocks ? blocks : 1);
        }
        if (reserve > cap)
            return (nki_tensor *)nki_fail(
                mem == SIM_MEM_SBUF ? SIM_E_SBUF_CAPACITY : SIM_E_PSUM_CAPACITY, api,
                "size: one %s tensor of %llu bytes per partition, capacity %llu",
                mn, (unsigned long long)reserve, (unsigned long long)cap);
        /* The Python-lifetime placement the timing model's buffer rotation
         * reads (sim_record.h); capacity is decided by liveness at the end
         * of the run (sim_live.h). */
        if (place == SIM_PLACE_IN_BANK)
            window = SIMC_PSUM_BANK_BYTES;
        if (nki_arena_alloc(a, reserve, window, &off) < 0) {
            uint64_t held = a->used + reserve;
            return (nki_tensor *)nki_fail(
                SIM_E_LIMIT, api,
                "tiles held by live Python references take %llu bytes per partition of %s, "
                "over %dx its capacity: the simulator's bound; drop tiles you no longer use",
                (unsigned long long)held, mn, NKI_HELD_FACTOR);
        }
        st = simc_store_new(mem, dt, (int)parts, free_elems, c->numerics);
        st->acct_bytes = reserve;
        st->acct_off = off;
        if (mem == SIM_MEM_PSUM && blocks > 1)
            st->blk_bytes = (uint32_t)((uint64_t)(free_elems / blocks) * es);
    }
    st->alloc_id = sim_record_alloc(c->rec, mem, dt, (uint32_t)parts,
                                    mem == SIM_MEM_HBM ? (uint64_t)total * es
                                                       : (uint64_t)free_elems * es,
                                    name);
    if (mem != SIM_MEM_HBM) {
        sim_alloc *ra = &c->rec->allocs[st->alloc_id];
        ra->sbuf_offset = st->acct_off;
        ra->reserve = reserve;
        ra->place = place;
        ra->blocks = blocks > 1 ? (uint32_t)blocks : 1;
        ra->hint_offset = hint_off;
        ra->loc = nki_loc();
        ra->api = sim_record_str(c->rec, api);
    }
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

static bool same_layout_view(const simc_view *a, const simc_view *b)
{
    if (a->st != b->st || a->offset != b->offset || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d])
            return false;
    return true;
}

/* Per-dimension bounds of the elements mask selects (see nki_oob_map). */
static int check_bounds_map(const nki_tensor *t, const uint8_t *mask, const char *api)
{
    const nki_oob_map *m = t->oob_map;
    int64_t n = simc_view_elems(&t->v), idx[SIMC_MAX_DIMS] = { 0 };

    for (int64_t i = 0; i < n; i++) {
        for (int d = 0; mask[i] && d < m->ndim; d++) {
            int64_t x = m->c[d];
            if (!m->expr[d])
                continue;
            for (int k = 0; k < m->gnd; k++)
                x += m->coef[d][k] * idx[k];   /* inside the checked span: no overflow */
            if (x < 0 || x >= m->size[d]) {
                nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api,
                         "%s (element %lld is selected by the mask: index %lld on dimension %d)",
                         t->oob_msg, (long long)i, (long long)x, d);
                return -1;
            }
        }
        for (int d = t->v.ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->v.shape[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
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
    if (t->oob_map && same_layout_view(&t->oob_map->v, v))
        return check_bounds_map(t, mask, api);
    for (int64_t i = 0; i < n; i++) {
        if (mask[i]) {
            int64_t f = simc_elem_index(v, idx);
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


/* Resolve a slice against a dim of size n; NKI slices must stay in bounds
 * and select at least one element. */
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
    if (*len <= 0) {
        /* A tile or DMA of no elements is no access at all (and a zero
         * dimension would reach the partition arithmetic). */
        nki_fail(SIM_E_BAD_INDEX, api, "the slice selects no elements of dimension %d (size %lld)", dim,
                 (long long)n);
        return -1;
    }
    *start = a;
    *step = st;
    return 0;
}

#define MAX_ITEMS 16

static PyObject *subscript_indirect(nki_tensor *t, PyObject **raw, int nraw, int ti);
static PyObject *dims_tuple(int ndim, const int64_t *v);

/* An index that is neither an int, slice, ellipsis, nl.ds nor an index
 * expression: a tile indexing an on-chip tensor (NeuronCore-v4 tensor
 * indirection) is not simulated (HBM tensors take it: subscript_indirect);
 * anything else is a bad index. */
static PyObject *bad_index(PyObject *it, int d)
{
    if (nki_tensor_check(it))
        return nki_fail(SIM_E_UNSUPPORTED_API, "tensor[...]",
                        "a tile as the index of dimension %d of an on-chip tensor (tensor "
                        "indirection) is not simulated; indirect DMA indexes an HBM tensor", d);
    return nki_fail(SIM_E_BAD_INDEX, "tensor[...]", "index of type %s on dimension %d",
                    Py_TYPE(it)->tp_name, d);
}
/* The tile's shape follows the index expressions actually used: a size-1
 * grid dimension none of them varies along (`ix, iw, iy = nl.mgrid[0:128,
 * 0:1, 0:512]` then `a[ix, iy]`) is not a dimension of the result, which is
 * (128, 512) as on the device.  Removes such dims from r's first gnd dims
 * and from map's grid columns. */
static void drop_unused_grid_dims(PyObject **items, int nitems, int gnd, simc_view *r,
                                  nki_oob_map *map)
{
    bool used[SIMC_MAX_DIMS] = { false };
    int nk = 0, dropped = 0;

    for (int i = 0; i < nitems; i++) {
        const nki_index *e;
        if (!items[i] || Py_TYPE(items[i]) != &nki_IndexType)
            continue;
        e = (const nki_index *)items[i];
        for (int k = 0; k < e->ndim; k++)
            if (e->coef[k] != 0 || (e->axes & (1u << k)))
                used[gnd - e->ndim + k] = true;
    }
    for (int gk = 0; gk < gnd; gk++)
        if (r->shape[gk] != 1)
            used[gk] = true;
    for (int gk = 0; gk < gnd; gk++)
        dropped += !used[gk];
    if (!dropped || dropped == r->ndim)
        return;   /* nothing to drop, or nothing would be left */
    for (int gk = 0; gk < r->ndim; gk++) {
        if (gk < gnd && !used[gk])
            continue;
        r->shape[nk] = r->shape[gk];
        r->strides[nk] = r->strides[gk];
        if (gk < gnd)
            for (int d = 0; d < map->ndim; d++)
                map->coef[d][nk] = map->coef[d][gk];
        nk++;
    }
    r->ndim = nk;
    map->gnd = gnd - dropped;
    for (int d = 0; d < map->ndim; d++)
        for (int k = map->gnd; k < SIMC_MAX_DIMS; k++)
            map->coef[d][k] = 0;
}

static PyObject *subscript_advanced(nki_tensor *t, PyObject **items, int nitems)
{
    const simc_view *v = &t->v;
    simc_view r;
    int gnd = 0;
    int64_t gshape[SIMC_MAX_DIMS];
    int nslices = 0;
    nki_tensor *res;
    char oob[96] = "";
    nki_oob_map map;

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
    memset(&map, 0, sizeof(map));
    map.ndim = v->ndim;
    map.gnd = gnd;
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
            int64_t lo = e->c, hi = lo;
            bool of = false;
            map.expr[d] = true;
            map.size[d] = v->shape[d];
            map.c[d] = e->c;
            for (int k = 0; k < e->ndim; k++) {
                int gk = gnd - e->ndim + k;
                int64_t span, step;
                if (e->shape[k] == 1)
                    continue;
                map.coef[d][gk] = e->coef[k];
                of |= __builtin_mul_overflow(e->coef[k], v->strides[d], &step);
                of |= __builtin_add_overflow(r.strides[gk], step, &r.strides[gk]);
                of |= __builtin_mul_overflow(e->coef[k], e->shape[k] - 1, &span);
                if (span < 0)
                    of |= __builtin_add_overflow(lo, span, &lo);
                else
                    of |= __builtin_add_overflow(hi, span, &hi);
            }
            {
                int64_t off;
                of |= __builtin_mul_overflow(e->c, v->strides[d], &off);
                of |= __builtin_add_overflow(r.offset, off, &r.offset);
            }
            if (of)
                return nki_fail(SIM_E_LIMIT, "tensor[...]",
                                "the index expression on dimension %d overflows 64-bit offsets", d);
            if ((lo < 0 || hi >= v->shape[d]) && !oob[0])
                snprintf(oob, sizeof(oob), "index expression spans [%lld, %lld] on dimension %d of size %lld",
                         (long long)lo, (long long)hi, d, (long long)v->shape[d]);
        } else if (it && nki_get_int(it, &iv)) {
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
            return bad_index(it, d);
        }
    }
    drop_unused_grid_dims(items, nitems, gnd, &r, &map);
    res = nki_tensor_view(v->st, &r, v->st->mem == SIM_MEM_HBM ? -1 : 0);
    if (res && oob[0]) {
        res->oob = true;
        snprintf(res->oob_msg, sizeof(res->oob_msg), "%s", oob);
        if (!t->oob) {   /* indices of a view of an in-bounds view are the map's */
            map.v = res->v;
            res->oob_map = kf_malloc(sizeof(map));
            memcpy(res->oob_map, &map, sizeof(map));
        }
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
    for (int i = 0; i < nraw; i++) {
        if (raw[i] != Py_Ellipsis)
            consuming++;
        if (t->pdim < 0 && nki_tensor_check(raw[i]) && consuming <= v->ndim)
            return subscript_indirect(t, raw, nraw, i);
    }
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
        if (it && nki_get_int(it, &iv)) {
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
            return bad_index(it, d);
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

/* A tuple of ndim ints (.shape, .strides). */
static PyObject *dims_tuple(int ndim, const int64_t *v)
{
    PyObject *tup = PyTuple_New(ndim);
    if (!tup)
        return NULL;
    for (int d = 0; d < ndim; d++)
        PyTuple_SET_ITEM(tup, d, PyLong_FromLongLong(v[d]));
    return tup;
}

static PyObject *tensor_shape(nki_tensor *t, void *u)
{
    (void)u;
    return dims_tuple(t->v.ndim, t->v.shape);
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
    (void)u;
    return dims_tuple(t->v.ndim, t->v.strides);
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
        } else if (!nki_get_int(it, &v)) {
            Py_DECREF(seq);
            nki_fail(SIM_E_BAD_ARGUMENT, api, "shape entry %zd is %s, not an int", i,
                     Py_TYPE(it)->tp_name);
            return -1;
        }
        shape[nd++] = v;
    }
    Py_DECREF(seq);
    {
        /* No tensor or view holds more than NKI_VIEW_MAX_HBM elements, so
         * a larger shape is refused here: every product callers form of
         * these dims (sizes, strides, reshape counts) then stays far inside
         * int64_t.  Negative entries (reshape's -1) are the callers' to
         * check and count as one. */
        int64_t pos[SIMC_MAX_DIMS], total;
        for (int d = 0; d < nd; d++)
            pos[d] = shape[d] < 0 ? 1 : shape[d];
        if (!simc_shape_elems(nd, pos, NKI_VIEW_MAX_HBM, &total)) {
            nki_fail(SIM_E_LIMIT, api, "a shape of more than 2^36 elements");
            return -1;
        }
    }
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
    for (int d = 0; d < nd; d++)
        if (shape[d] < -1 || (shape[d] == -1 && neg >= 0 && neg != d))
            return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.reshape",
                            "dimension %d is %lld (sizes are >= 0, with at most one -1)", d,
                            (long long)shape[d]);
        else if (shape[d] == -1)
            neg = d;
    neg = -1;
    for (int d = 0; d < nd; d++) {
        if (shape[d] == -1 && neg < 0)
            neg = d;
        else
            known *= shape[d];
    }
    if (neg >= 0) {
        shape[neg] = known > 0 ? total / known : 0;
        known *= shape[neg];
    }
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


/* An on-chip tile repeated across partitions (a (1, F) tile broadcast to
 * (P, F)) is a new tile filled by one SBUF-to-SBUF DMA: the compute engines
 * read and write only their own partitions, so the compiler moves the row
 * into the other partitions with a DMA, and it is charged as one
 * (docs/profile.md, "Legacy and current API").  Returns the new tile, NULL
 * with the error raised. */
static PyObject *partition_broadcast(const simc_view *bv, const char *api)
{
    nki_tensor *out = nki_new_tile(SIM_MEM_SBUF, bv->dtype, bv->ndim, bv->shape, api);

    if (!out)
        return NULL;
    nki_write(&out->v, nki_read(bv, 0), NULL);
    nki_emit(SIM_OP_DMA_COPY, SIM_ENG_DMA, &out->v, bv, NULL, NULL);
    return (PyObject *)out;
}

PyObject *nki_broadcast_view(nki_tensor *t, PyObject *shape_obj, const char *api)
{
    int64_t shape[SIMC_MAX_DIMS];
    int nd = nki_parse_shape(shape_obj, api, shape, NULL);
    simc_view r = t->v;
    int off;

    if (nd < 0)
        return NULL;
    for (int d = 0; d < nd; d++)
        if (shape[d] < 0)
            return nki_fail(SIM_E_BAD_ARGUMENT, api, "dimension %d of the shape is negative", d);
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
    if (t->pdim == 0 && off == 0 && t->v.shape[0] == 1 && r.shape[0] > 1)
        return partition_broadcast(&r, api);
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
        return nki_fail(SIM_E_UNSUPPORTED_API, "tensor.ap",
                        "vector_offset (an indirect access pattern) is not simulated; a row "
                        "gather/scatter by DMA works with the index tile as the subscript: "
                        "x[idx_tile, ...]");
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
            !nki_get_int(PySequence_Fast_GET_ITEM(ps, 0), &r.strides[i]) ||
            !nki_get_int(PySequence_Fast_GET_ITEM(ps, 1), &r.shape[i])) {
            PyErr_Clear();
            Py_XDECREF(ps);
            Py_DECREF(seq);
            return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap", "pattern entry %zd must be [step, count]", i);
        }
        Py_DECREF(ps);
        if (r.shape[i] < 0) {
            Py_DECREF(seq);
            return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.ap", "pattern entry %zd has a negative count", i);
        }
    }
    Py_DECREF(seq);
    if (a[1] && a[1] != Py_None && !nki_get_int(a[1], &r.offset))
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

/* NkiTensor.indirect(...): NeuronCore-v4 tensor indirection, where one
 * compute instruction gathers or scatters columns of an on-chip tensor at
 * uint16 offsets read from an SBUF index tensor, one offset list per group
 * of 16 partitions (the NKI "Tensor Indirection" deep dive).  The parts of
 * the NKI reference kforge can read give the concept but not the method's
 * parameters nor the index tensor's layout per partition group, so it is
 * refused by name rather than guessed (docs/sim-nki.md). */
static PyObject *tensor_indirect(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    (void)self;
    (void)args;
    (void)nargs;
    (void)kwnames;
    return nki_fail(SIM_E_UNSUPPORTED_API, "tensor.indirect",
                    "tensor indirection (an on-chip tensor's columns selected by an SBUF index "
                    "tensor, NeuronCore-v4) is not simulated; a row gather/scatter by DMA works "
                    "with the index tile as the subscript of an HBM tensor: x[idx_tile, ...]");
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


/* --- more view methods (current API) and legacy astype --- */

static int dim_arg(nki_tensor *t, PyObject *o, const char *api, int extra)
{
    int64_t d;
    if (!o || !nki_get_int(o, &d)) {
        nki_fail(SIM_E_BAD_ARGUMENT, api, "dim must be an int");
        return -1;
    }
    if (d < 0)
        d += t->v.ndim + extra;
    if (d < 0 || d >= t->v.ndim + extra) {
        nki_fail(SIM_E_BAD_ARGUMENT, api, "dim %lld out of range for %d dims", (long long)d,
                 t->v.ndim);
        return -1;
    }
    return (int)d;
}

static PyObject *view_with(nki_tensor *t, const simc_view *r, int pdim)
{
    nki_tensor *res = nki_tensor_view(t->v.st, r, t->pdim < 0 ? -1 : pdim);
    if (res && t->oob) {
        res->oob = true;
        memcpy(res->oob_msg, t->oob_msg, sizeof(res->oob_msg));
    }
    return (PyObject *)res;
}

/* .permute(dims): reorder the dims (the partition dim must stay first on chip). */
static PyObject *tensor_permute(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs)
{
    const char *api = "tensor.permute";
    PyObject *seq = nargs == 1 && !PyLong_Check(args[0]) ? PySequence_Tuple(args[0]) : NULL;
    simc_view r = t->v;
    bool used[SIMC_MAX_DIMS] = { false };
    Py_ssize_t n;

    if (!seq) {
        PyErr_Clear();
        seq = PyTuple_New(nargs);
        for (Py_ssize_t i = 0; seq && i < nargs; i++) {
            Py_INCREF(args[i]);
            PyTuple_SET_ITEM(seq, i, args[i]);
        }
        if (!seq)
            return NULL;
    }
    n = PyTuple_GET_SIZE(seq);
    if (n != t->v.ndim) {
        Py_DECREF(seq);
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "%zd dims given for a %d-dim tensor", n, t->v.ndim);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t d;
        if (!nki_get_int(PyTuple_GET_ITEM(seq, i), &d) || d < 0 || d >= n || used[d]) {
            Py_DECREF(seq);
            return nki_fail(SIM_E_BAD_ARGUMENT, api, "dims must be a permutation of 0..%zd", n - 1);
        }
        used[d] = true;
        r.shape[i] = t->v.shape[d];
        r.strides[i] = t->v.strides[d];
        if (t->pdim >= 0 && i == 0 && d != t->pdim) {
            Py_DECREF(seq);
            return nki_fail(SIM_E_SHAPE_MISMATCH, api, "the partition dim must stay first");
        }
    }
    Py_DECREF(seq);
    return view_with(t, &r, 0);
}

/* Remove dimension d of a view (.select, .squeeze_dim). */
static void drop_dim(simc_view *r, int d)
{
    for (int k = d; k < r->ndim - 1; k++) {
        r->shape[k] = r->shape[k + 1];
        r->strides[k] = r->strides[k + 1];
    }
    r->ndim--;
}

/* .select(dim, index): drop dim at index. */
static PyObject *tensor_select(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs)
{
    const char *api = "tensor.select";
    simc_view r = t->v;
    int d;
    int64_t i;
    if (nargs != 2 || (d = dim_arg(t, args[0], api, 0)) < 0)
        return nargs != 2 ? nki_fail(SIM_E_BAD_ARGUMENT, api, "select(dim, index)") : NULL;
    if (!nki_get_int(args[1], &i) || i < -t->v.shape[d] || i >= t->v.shape[d])
        return nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api, "index on dim %d of size %lld", d,
                        (long long)t->v.shape[d]);
    if (i < 0)
        i += t->v.shape[d];
    if (t->pdim >= 0 && d == t->pdim)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "the partition dim cannot be selected away");
    r.offset += i * t->v.strides[d];
    drop_dim(&r, d);
    return view_with(t, &r, 0);
}

/* .slice(dim, start, end, step=1). */
static PyObject *tensor_slice(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs)
{
    const char *api = "tensor.slice";
    simc_view r = t->v;
    int64_t a, b, st = 1, len;
    int d;
    if (nargs < 3 || nargs > 4 || (d = dim_arg(t, args[0], api, 0)) < 0)
        return nargs < 3 || nargs > 4 ? nki_fail(SIM_E_BAD_ARGUMENT, api, "slice(dim, start, end, step=1)") : NULL;
    if (!nki_get_int(args[1], &a) || !nki_get_int(args[2], &b) ||
        (nargs == 4 && !nki_get_int(args[3], &st)) || st <= 0)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "start, end and step must be ints, step > 0");
    if (a < 0 || b > t->v.shape[d] || a > b)
        return nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api, "[%lld, %lld) on dim %d of size %lld",
                        (long long)a, (long long)b, d, (long long)t->v.shape[d]);
    len = (b - a + st - 1) / st;
    r.offset += a * t->v.strides[d];
    r.shape[d] = len;
    r.strides[d] *= st;
    return view_with(t, &r, t->pdim < 0 ? -1 : t->pdim);
}

/* .expand_dim(dim) / .expand_dims(axis): a size-1 dim. */
static PyObject *tensor_expand_dim(nki_tensor *t, PyObject *arg)
{
    const char *api = "tensor.expand_dim";
    simc_view r = t->v;
    int d = dim_arg(t, arg, api, 1);
    if (d < 0)
        return NULL;
    if (r.ndim >= SIMC_MAX_DIMS)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "at most %d dims", SIMC_MAX_DIMS);
    for (int k = r.ndim; k > d; k--) {
        r.shape[k] = r.shape[k - 1];
        r.strides[k] = r.strides[k - 1];
    }
    r.shape[d] = 1;
    r.strides[d] = 0;
    r.ndim++;
    return view_with(t, &r, t->pdim >= 0 && d <= t->pdim ? t->pdim + 1 : t->pdim);
}

/* .squeeze_dim(dim): drop a size-1 dim. */
static PyObject *tensor_squeeze_dim(nki_tensor *t, PyObject *arg)
{
    const char *api = "tensor.squeeze_dim";
    simc_view r = t->v;
    int d = dim_arg(t, arg, api, 0);
    if (d < 0)
        return NULL;
    if (t->v.shape[d] != 1 || d == t->pdim)
        return nki_fail(SIM_E_SHAPE_MISMATCH, api, "dim %d has size %lld (must be a size-1 free dim)",
                        d, (long long)t->v.shape[d]);
    drop_dim(&r, d);
    return view_with(t, &r, t->pdim > d ? t->pdim - 1 : t->pdim);
}

/* .broadcast(dim, size): a size-1 dim repeated. */
static PyObject *tensor_broadcast(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs)
{
    const char *api = "tensor.broadcast";
    simc_view r = t->v;
    int64_t n;
    int d;
    if (nargs != 2 || (d = dim_arg(t, args[0], api, 0)) < 0)
        return nargs != 2 ? nki_fail(SIM_E_BAD_ARGUMENT, api, "broadcast(dim, size)") : NULL;
    if (!nki_get_int(args[1], &n) || n < 1 || t->v.shape[d] != 1)
        return nki_fail(SIM_E_SHAPE_MISMATCH, api, "only a size-1 dim broadcasts (dim %d has %lld)",
                        d, (long long)t->v.shape[d]);
    r.shape[d] = n;
    r.strides[d] = 0;
    return view_with(t, &r, t->pdim);
}

/* .view(dtype): the same bytes as another dtype of the same size. */
static PyObject *tensor_view_dtype(nki_tensor *t, PyObject *arg)
{
    simc_view r = t->v;
    int dt = nki_dtype_from(arg, "tensor.view");
    if (dt < 0)
        return NULL;
    if (sim_dtype_size((sim_dtype)dt) != sim_dtype_size(t->v.dtype))
        return nki_fail(SIM_E_DTYPE, "tensor.view", "%s and %s differ in size",
                        sim_dtype_name((sim_dtype)dt), sim_dtype_name(t->v.dtype));
    r.dtype = (sim_dtype)dt;
    return view_with(t, &r, t->pdim);
}

/* .astype(dtype) (legacy): a new SBUF tile holding the values cast. */
static PyObject *tensor_astype(nki_tensor *t, PyObject *arg)
{
    const char *api = "tensor.astype";
    int dt = nki_dtype_from(arg, api);
    nki_tensor *out;
    if (dt < 0 || nki_need_run(api) < 0)
        return NULL;
    out = nki_new_tile(SIM_MEM_SBUF, (sim_dtype)dt, t->v.ndim, t->v.shape, api);
    if (!out)
        return NULL;
    if (nki_assign(out, (PyObject *)t, NULL, api) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* t.reshape(shape), t.reshape(d0, d1, ...) or t.reshape(shape=shape). */
static PyObject *tensor_reshape_kw(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) {
        PyObject *k0 = PyTuple_GET_ITEM(kwnames, 0);
        if (nargs != 0 || PyTuple_GET_SIZE(kwnames) != 1 || !PyUnicode_Check(k0) ||
            PyUnicode_CompareWithASCIIString(k0, "shape") != 0)
            return nki_fail(SIM_E_BAD_ARGUMENT, "tensor.reshape",
                            "reshape takes the new shape, positionally or as shape=");
        return tensor_reshape(t, args, 1);   /* the keyword's value follows the positionals */
    }
    return tensor_reshape(t, args, nargs);
}

/* Keyword forms of the view methods, with the parameter names of the NKI
 * docs: keywords are matched by nki_parse (an unknown one is
 * SIM_E_UNSUPPORTED_API naming it, never a raw TypeError) and the method
 * runs on the resulting positional arguments, which must leave no gap. */
static PyObject *kw_call(nki_tensor *t, const char *api, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, const char *const *names, int n, int required,
                         PyObject *(*fast)(nki_tensor *, PyObject *const *, Py_ssize_t),
                         PyObject *(*one)(nki_tensor *, PyObject *))
{
    PyObject *a[4];
    Py_ssize_t k = 0;

    if (nki_parse(api, args, nargs, kwnames, names, n, a) < 0)
        return NULL;
    while (k < n && a[k])
        k++;
    for (int i = (int)k; i < n; i++)
        if (a[i] || i < required)
            return nki_fail(SIM_E_BAD_ARGUMENT, api, "argument '%s' is missing", names[k]);
    return one ? one(t, a[0]) : fast(t, a, k);
}

#define KW_ONE(fn, impl, api, name)                                                          \
    static PyObject *fn(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs,              \
                        PyObject *kwnames)                                                   \
    {                                                                                        \
        static const char *const names[] = { name };                                         \
        return kw_call(t, api, args, nargs, kwnames, names, 1, 1, NULL, impl);               \
    }
#define KW_FAST(fn, impl, api, required, ...)                                                \
    static PyObject *fn(nki_tensor *t, PyObject *const *args, Py_ssize_t nargs,              \
                        PyObject *kwnames)                                                   \
    {                                                                                        \
        static const char *const names[] = { __VA_ARGS__ };                                  \
        if (!kwnames || PyTuple_GET_SIZE(kwnames) == 0)                                      \
            return impl(t, args, nargs);                                                     \
        return kw_call(t, api, args, nargs, kwnames, names, NKI_NARGS(names), required,      \
                       impl, NULL);                                                          \
    }
KW_ONE(tensor_broadcast_to_kw, tensor_broadcast_to, "tensor.broadcast_to", "shape")
KW_ONE(tensor_expand_dim_kw, tensor_expand_dim, "tensor.expand_dim", "dim")
KW_ONE(tensor_expand_dims_kw, tensor_expand_dim, "tensor.expand_dims", "axis")
KW_ONE(tensor_squeeze_dim_kw, tensor_squeeze_dim, "tensor.squeeze_dim", "dim")
KW_ONE(tensor_view_kw, tensor_view_dtype, "tensor.view", "dtype")
KW_ONE(tensor_astype_kw, tensor_astype, "tensor.astype", "dtype")
KW_FAST(tensor_permute_kw, tensor_permute, "tensor.permute", 1, "dims")
KW_FAST(tensor_select_kw, tensor_select, "tensor.select", 2, "dim", "index")
KW_FAST(tensor_slice_kw, tensor_slice, "tensor.slice", 3, "dim", "start", "end", "step")
KW_FAST(tensor_broadcast_kw, tensor_broadcast, "tensor.broadcast", 2, "dim", "size")
#undef KW_ONE
#undef KW_FAST

#define KWM(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef tensor_methods[] = {
    { "reshape", (PyCFunction)(void (*)(void))tensor_reshape_kw, METH_FASTCALL | METH_KEYWORDS,
      "reshape a contiguous view" },
    { "broadcast_to", KWM(tensor_broadcast_to_kw), "broadcast size-1 dims" },
    { "ap", (PyCFunction)(void (*)(void))tensor_ap, METH_FASTCALL | METH_KEYWORDS, "access pattern view" },
    { "permute", KWM(tensor_permute_kw), "reorder dims" },
    { "select", KWM(tensor_select_kw), "index one dim away" },
    { "slice", KWM(tensor_slice_kw), "slice one dim" },
    { "expand_dim", KWM(tensor_expand_dim_kw), "insert a size-1 dim" },
    { "expand_dims", KWM(tensor_expand_dims_kw), "insert a size-1 dim" },
    { "squeeze_dim", KWM(tensor_squeeze_dim_kw), "drop a size-1 dim" },
    { "broadcast", KWM(tensor_broadcast_kw), "repeat a size-1 dim" },
    { "view", KWM(tensor_view_kw), "reinterpret as a same-size dtype" },
    { "astype", KWM(tensor_astype_kw), "a new tile cast to dtype" },
    { "indirect", KWM(tensor_indirect), "tensor indirection (refused: not simulated)" },
    { NULL, NULL, 0, NULL },
};
#undef KWM

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


/* ===== indirect (tensor-indexed) DMA access ===== */

/* `x[idx, ...]` on an HBM tensor with an on-chip integer tile idx: row p of
 * the access is row idx[p] of the indexed dimension (NKI docs, nl.load /
 * nl.store "indirect DMA access"; nisa.dma_copy gather/scatter).  Only
 * DMAs take it (nl.load, nl.store, nisa.dma_copy); any other use is a
 * type error naming it, since it is not a tensor. */
static void indirect_dealloc(PyObject *o)
{
    nki_indirect *ia = (nki_indirect *)o;
    Py_XDECREF(ia->base);
    Py_XDECREF(ia->index);
    PyObject_Free(o);
}

static PyObject *indirect_shape(nki_indirect *ia, void *u)
{
    (void)u;
    return dims_tuple(ia->base->v.ndim, ia->base->v.shape);
}

static PyObject *indirect_dtype(nki_indirect *ia, void *u)
{
    PyObject *d = nki_dtype_get(ia->base->v.dtype);
    (void)u;
    Py_XINCREF(d);
    return d;
}

static PyObject *indirect_ndim(nki_indirect *ia, void *u)
{
    (void)u;
    return PyLong_FromLong(ia->base->v.ndim);
}

static PyGetSetDef indirect_getset[] = {
    { "shape", (getter)indirect_shape, NULL, "shape tuple", NULL },
    { "dtype", (getter)indirect_dtype, NULL, "element type", NULL },
    { "ndim", (getter)indirect_ndim, NULL, "number of dims", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject nki_IndirectType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.indirect_access",
    .tp_basicsize = sizeof(nki_indirect),
    .tp_dealloc = indirect_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An HBM access whose rows an on-chip index tile selects (indirect DMA).",
    .tp_getset = indirect_getset,
};

/* Build the indirect access t[raw...] where raw[ti] is the index tile.  The
 * index tile holds one integer per partition; the access's first dim runs
 * over them.  The rest of the subscript is applied as usual to t with the
 * indexed dimension replaced by one of stride 0 (the rows come from the
 * index at run time). */
static PyObject *subscript_indirect(nki_tensor *t, PyObject **raw, int nraw, int ti)
{
    const char *api = "tensor[...]";
    nki_tensor *ix = (nki_tensor *)raw[ti], *tmp, *res;
    simc_view mv = t->v;
    int consuming = 0, d0 = 0, gnd = 2;
    bool advanced = false;
    int64_t P;
    PyObject *key, *rep;
    nki_indirect *ia;

    for (int i = 0; i < nraw; i++) {
        if (raw[i] != Py_Ellipsis)
            consuming++;
        if (i != ti && nki_tensor_check(raw[i]))
            return nki_fail(SIM_E_UNSUPPORTED_API, api,
                            "tensors as the indices of two dimensions (one index tile per access)");
        if (Py_TYPE(raw[i]) == &nki_IndexType) {
            advanced = true;
            if (((nki_index *)raw[i])->ndim > gnd)
                gnd = ((nki_index *)raw[i])->ndim;
        }
    }
    for (int i = 0; i < ti; i++)
        d0 += raw[i] == Py_Ellipsis ? t->v.ndim - consuming : 1;
    if (ix->pdim < 0 || ix->v.st->mem != SIM_MEM_SBUF)
        return nki_fail(SIM_E_WRONG_BUFFER, api,
                        "the index tile of dimension %d must be in SBUF, it is in %s", d0,
                        ix->v.st->mem == SIM_MEM_HBM ? "HBM" : "PSUM");
    if (simc_dtype_is_float(ix->v.dtype))
        return nki_fail(SIM_E_DTYPE, api,
                        "the index tile of dimension %d must hold integers (int32/uint32), it is %s",
                        d0, sim_dtype_name(ix->v.dtype));
    P = nki_view_parts(ix);
    if (simc_view_elems(&ix->v) != P)
        return nki_fail(SIM_E_UNSUPPORTED_API, api,
                        "an index tile of %lld elements over %lld partitions: indirect DMA takes one "
                        "index per partition, a (P, 1) tile", (long long)simc_view_elems(&ix->v),
                        (long long)P);
    mv.shape[d0] = P;
    mv.strides[d0] = 0;
    tmp = nki_tensor_view(mv.st, &mv, -1);
    if (!tmp)
        return NULL;
    if (advanced) {
        int64_t shape[SIMC_MAX_DIMS], coef[SIMC_MAX_DIMS];
        for (int k = 0; k < gnd; k++) {
            shape[k] = k ? 1 : P;
            coef[k] = k ? 0 : 1;
        }
        rep = nki_index_new(gnd, shape, coef, 0);
    } else {
        rep = PySlice_New(NULL, NULL, NULL);
    }
    key = rep ? PyTuple_New(nraw) : NULL;
    if (!key) {
        Py_XDECREF(rep);
        Py_DECREF(tmp);
        return NULL;
    }
    for (int i = 0; i < nraw; i++)
        PyTuple_SET_ITEM(key, i, i == ti ? rep : Py_NewRef(raw[i]));
    res = (nki_tensor *)nki_tensor_subscript((PyObject *)tmp, key);
    Py_DECREF(key);
    Py_DECREF(tmp);
    if (!res)
        return NULL;
    if (res->oob && nki_check_bounds(res, NULL, api) < 0) {
        Py_DECREF(res);
        return NULL;
    }
    if (res->v.ndim < 1 || res->v.shape[0] != P || (P > 1 && res->v.strides[0] != 0)) {
        Py_DECREF(res);
        return nki_fail(SIM_E_UNSUPPORTED_API, api,
                        "the index tile must select the access's first dimension (the partition "
                        "dim of the SBUF side); here it indexes dimension %d", d0);
    }
    res->v.strides[0] = 0;
    ia = PyObject_New(nki_indirect, &nki_IndirectType);
    if (!ia) {
        Py_DECREF(res);
        return NULL;
    }
    ia->base = res;
    ia->index = (nki_tensor *)Py_NewRef((PyObject *)ix);
    ia->row_stride = t->v.strides[d0];
    ia->nrows = t->v.shape[d0];
    ia->dim = d0;
    return (PyObject *)ia;
}

/* Move rows between the indirect access ia (HBM) and the SBUF tile `tile`
 * (gather: tile = ia; scatter: ia = tile), one descriptor per row, and
 * record one DMA_COPY reading the index tile.  skip: oob_mode=skip (rows
 * whose index is out of range are not moved) instead of the default error;
 * mask (row-major over the access, may be NULL): the elements moved. */
int nki_indirect_move(const char *api, nki_indirect *ia, nki_tensor *tile, bool scatter, bool skip,
                      const uint8_t *mask)
{
    const simc_view *b = &ia->base->v;
    int64_t P = b->shape[0], idx[SIMC_PMAX], row_elems, nsel = 0;
    bool moved[SIMC_PMAX], sel[SIMC_PMAX];
    simc_view hv = *b, row = *b;
    sim_region rr, tr;
    sim_region *hr;
    sim_insn *in;

    if (tile->pdim < 0 || tile->v.st->mem != SIM_MEM_SBUF)
        return (nki_fail(SIM_E_WRONG_BUFFER, api,
                         "an indirect DMA moves rows between HBM and an SBUF tile; the %s is in %s",
                         scatter ? "value" : "dst", tile->v.st->mem == SIM_MEM_HBM ? "HBM" : "PSUM"),
                -1);
    if (simc_view_elems(&tile->v) != simc_view_elems(b) || nki_view_parts(tile) != P ||
        tile->v.shape[0] != P)
        return (nki_fail(SIM_E_SHAPE_MISMATCH, api,
                         "the indirect access is %lld rows of %lld elements, the SBUF tile %lld "
                         "partitions of %lld", (long long)P,
                         (long long)(simc_view_elems(b) / (P ? P : 1)), (long long)nki_view_parts(tile),
                         (long long)(simc_view_elems(&tile->v) / (nki_view_parts(tile) ? nki_view_parts(tile) : 1))),
                -1);
    if (P > SIMC_PMAX)
        return (nki_fail(SIM_E_PARTITION_LIMIT, api, "%lld rows > %d", (long long)P, SIMC_PMAX), -1);
    row.shape[0] = 1;
    row_elems = simc_view_elems(&row);
    /* mask= (a compile-time predicate over the access): a row none of whose
     * elements it selects is not moved, and its index is not used */
    for (int64_t p = 0; p < P; p++) {
        sel[p] = !mask || memchr(mask + p * row_elems, 1, (size_t)row_elems) != NULL;
        nsel += sel[p];
    }
    if (nki_cur->numerics) {
        const int64_t *iv = nki_read_i64(&ia->index->v, 6);
        memcpy(idx, iv, (size_t)P * sizeof(*idx));
        for (int64_t p = 0; p < P; p++) {
            moved[p] = sel[p] && idx[p] >= 0 && idx[p] < ia->nrows;
            if (sel[p] && !moved[p] && !skip)
                return (nki_fail(SIM_E_INDEX_OUT_OF_BOUNDS, api,
                                 "index %lld (partition %lld of the index tile) is outside dimension "
                                 "%d of size %lld (oob_mode=error; nisa.dma_copy(..., "
                                 "oob_mode=oob_mode.skip) skips such rows)",
                                 (long long)idx[p], (long long)p, ia->dim, (long long)ia->nrows),
                        -1);
        }
        for (int64_t p = 0; p < P; p++) {
            simc_view hrow = row, trow = tile->v;
            if (!moved[p])
                continue;
            hrow.offset += idx[p] * ia->row_stride;
            trow.offset += p * tile->v.strides[0];
            trow.shape[0] = 1;
            if (scatter)
                nki_copy_vals(&hrow, &trow, mask ? mask + p * row_elems : NULL);
            else
                nki_copy_vals(&trow, &hrow, mask ? mask + p * row_elems : NULL);
        }
    }
    /* The record: the HBM operand spans every row the index could pick;
     * it moves P rows, one descriptor (or a row's chunks) each. */
    hv.shape[0] = ia->nrows;
    hv.strides[0] = ia->row_stride;
    in = nki_emit(SIM_OP_DMA_COPY, SIM_ENG_DMA, scatter ? &hv : &tile->v, scatter ? &tile->v : &hv,
                  &ia->index->v, NULL);
    simc_view_region(&row, &rr);
    simc_view_region(&tile->v, &tr);
    hr = scatter ? &in->dst[0] : &in->src[0];
    if (nsel == 0)
        nsel = 1;   /* mask=False: the instruction is still issued */
    hr->bytes = rr.bytes * (uint64_t)nsel;
    hr->elems_per_part = (uint32_t)((uint64_t)rr.elems_per_part * (uint64_t)nsel);
    hr->contig_bytes = rr.contig_bytes;
    hr->descriptors = (rr.descriptors ? rr.descriptors : 1) * (uint32_t)nsel;
    if (mask)
        in->flags |= SIM_F_MASKED;
    in->partitions = tr.part_count;
    in->elems_per_part = tr.elems_per_part;
    in->flops = (uint64_t)in->partitions * in->elems_per_part;
    return 0;
}
