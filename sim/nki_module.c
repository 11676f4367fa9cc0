/* nki_module — the `nki` and legacy `neuronxcc.nki` module objects: dtypes,
 * buffers, par_dim, tile_size, enums, decorators (nki.jit and no-ops), the
 * typing stubs, and their registration in sys.modules (see nki_internal.h).
 *
 * Every module answers an unknown attribute with SIM_E_UNSUPPORTED_API
 * naming the API (PEP 562 module __getattr__), so a kernel that uses
 * something kforge does not implement stops at that line with that name. */
#include "nki_internal.h"

#include <math.h>
#include <string.h>

/* ===== dtypes ===== */

static nki_dtype_obj *dtype_objs[SIM_DT__COUNT];

static PyObject *dtype_repr(PyObject *o)
{
    return PyUnicode_FromString(sim_dtype_name(((nki_dtype_obj *)o)->dt));
}

static Py_hash_t dtype_hash(PyObject *o)
{
    PyObject *s = dtype_repr(o);
    Py_hash_t h;
    if (!s)
        return -1;
    h = PyObject_Hash(s);
    Py_DECREF(s);
    return h;
}

/* The dtype an arbitrary object names, or -1 (no error raised). */
static int dtype_lookup(PyObject *obj)
{
    static const struct {
        const char *alias;
        sim_dtype dt;
    } aliases[] = {
        { "fp32", SIM_DT_FLOAT32 }, { "bf16", SIM_DT_BFLOAT16 }, { "fp16", SIM_DT_FLOAT16 },
        { "half", SIM_DT_FLOAT16 }, { "bool", SIM_DT_BOOL }, { "tf32", SIM_DT_TFLOAT32 },
        { "fp8_e4m3", SIM_DT_FLOAT8_E4M3 }, { "fp8_e5m2", SIM_DT_FLOAT8_E5M2 },
        { "single", SIM_DT_FLOAT32 }, { "float8e4", SIM_DT_FLOAT8_E4M3 },
        { "float8e5", SIM_DT_FLOAT8_E5M2 },
    };
    PyObject *name = NULL;
    const char *s;
    int dt = -1;

    if (Py_TYPE(obj) == &nki_DtypeType)
        return ((nki_dtype_obj *)obj)->dt;
    if (PyUnicode_Check(obj)) {
        name = obj;
        Py_INCREF(name);
    } else if (PyType_Check(obj)) {
        name = PyObject_GetAttrString(obj, "__name__");
    } else {
        name = PyObject_GetAttrString(obj, "name");    /* numpy dtype */
    }
    if (!name || !PyUnicode_Check(name)) {
        PyErr_Clear();
        Py_XDECREF(name);
        return -1;
    }
    s = PyUnicode_AsUTF8(name);
    if (s) {
        dt = sim_dtype_from_name(s);
        for (size_t i = 0; dt < 0 && i < sizeof(aliases) / sizeof(aliases[0]); i++)
            if (strcmp(aliases[i].alias, s) == 0)
                dt = (int)aliases[i].dt;
    }
    PyErr_Clear();
    Py_DECREF(name);
    return dt;
}

static PyObject *dtype_richcompare(PyObject *a, PyObject *b, int op)
{
    int da, db;
    if (op != Py_EQ && op != Py_NE)
        return Py_NewRef(Py_NotImplemented);
    da = dtype_lookup(a);
    db = dtype_lookup(b);
    if (da < 0 || db < 0)
        return PyBool_FromLong(op == Py_NE);
    return PyBool_FromLong((da == db) == (op == Py_EQ));
}

static PyObject *dtype_itemsize(PyObject *o, void *u)
{
    (void)u;
    return PyLong_FromLong((long)sim_dtype_size(((nki_dtype_obj *)o)->dt));
}

/* Largest finite value of a float dtype (fp8 e4m3fn: 448). */
static double dtype_maxval(sim_dtype dt)
{
    switch (dt) {
    case SIM_DT_FLOAT32: case SIM_DT_TFLOAT32: return 3.4028234663852886e38;
    case SIM_DT_BFLOAT16: return 3.3895313892515355e38;
    case SIM_DT_FLOAT16: return 65504.0;
    case SIM_DT_FLOAT8_E4M3: return 240.0;
    case SIM_DT_FLOAT8_E4M3FN: return 448.0;
    case SIM_DT_FLOAT8_E5M2: return 57344.0;
    case SIM_DT_INT32: return 2147483647.0;
    case SIM_DT_UINT32: return 4294967295.0;
    case SIM_DT_INT16: return 32767.0;
    case SIM_DT_UINT16: return 65535.0;
    case SIM_DT_INT8: return 127.0;
    case SIM_DT_UINT8: return 255.0;
    default: return 1.0;
    }
}

static PyObject *dtype_max(PyObject *o, void *u)
{
    sim_dtype dt = ((nki_dtype_obj *)o)->dt;
    (void)u;
    if (simc_dtype_is_float(dt))
        return PyFloat_FromDouble(dtype_maxval(dt));
    return PyLong_FromDouble(dtype_maxval(dt));
}

static PyObject *dtype_min(PyObject *o, void *u)
{
    sim_dtype dt = ((nki_dtype_obj *)o)->dt;
    (void)u;
    if (simc_dtype_is_float(dt))
        return PyFloat_FromDouble(-dtype_maxval(dt));
    if (!simc_dtype_is_signed(dt))
        return PyLong_FromLong(0);
    return PyLong_FromDouble(-dtype_maxval(dt) - 1.0);
}

static PyObject *dtype_name(PyObject *o, void *u)
{
    (void)u;
    return dtype_repr(o);
}

bool nki_dtype_has_numpy(sim_dtype dt)
{
    return dt != SIM_DT_BFLOAT16 && dt != SIM_DT_TFLOAT32 && dt != SIM_DT_FLOAT8_E4M3 && dt != SIM_DT_FLOAT8_E5M2 &&
           dt != SIM_DT_FLOAT8_E4M3FN;
}

/* .dtype: the NumPy dtype of the same name, so legacy kernels can hand NKI
 * dtypes to NumPy at trace time (np.zeros(..., dtype=nl.float32)).  NumPy
 * is imported only when a kernel asks; bfloat16 and fp8 have no NumPy dtype. */
static PyObject *dtype_numpy(PyObject *o, void *u)
{
    sim_dtype dt = ((nki_dtype_obj *)o)->dt;
    PyObject *np, *r;
    (void)u;
    if (!nki_dtype_has_numpy(dt)) {
        PyErr_Format(PyExc_AttributeError, "%s has no NumPy dtype", sim_dtype_name(dt));
        return NULL;
    }
    np = PyImport_ImportModule("numpy");
    if (!np)
        return NULL;
    r = PyObject_CallMethod(np, "dtype", "s", sim_dtype_name(dt));
    Py_DECREF(np);
    return r;
}

static PyGetSetDef dtype_getset[] = {
    { "dtype", dtype_numpy, NULL, "the NumPy dtype of the same name", NULL },
    { "itemsize", dtype_itemsize, NULL, "bytes per element", NULL },
    { "name", dtype_name, NULL, "dtype name", NULL },
    { "min", dtype_min, NULL, "lowest finite value", NULL },
    { "max", dtype_max, NULL, "largest finite value", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject nki_DtypeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.language.dtype",
    .tp_basicsize = sizeof(nki_dtype_obj),
    .tp_repr = dtype_repr,
    .tp_str = dtype_repr,
    .tp_hash = dtype_hash,
    .tp_richcompare = dtype_richcompare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An NKI element type; compares equal to its name and to NumPy's dtype.",
    .tp_getset = dtype_getset,
};

PyObject *nki_dtype_get(sim_dtype dt)
{
    return (unsigned)dt < SIM_DT__COUNT ? (PyObject *)dtype_objs[dt] : Py_None;
}

int nki_dtype_from(PyObject *obj, const char *api)
{
    int dt = obj ? dtype_lookup(obj) : -1;
    if (dt < 0) {
        PyObject *r = obj ? PyObject_Repr(obj) : NULL;
        const char *s = r ? PyUnicode_AsUTF8(r) : NULL;
        PyErr_Clear();
        nki_fail(SIM_E_DTYPE, api, "unknown dtype %s", s ? s : "?");
        Py_XDECREF(r);
        return -1;
    }
    return dt;
}

/* ===== buffers ===== */

static nki_buffer_obj *buffers[5];   /* sbuf, psum, hbm, shared_hbm, private_hbm */

static PyObject *buffer_repr(PyObject *o)
{
    return PyUnicode_FromString(((nki_buffer_obj *)o)->name);
}

/* auto_alloc(): the compiler's own allocation, i.e. the buffer itself. */
static PyObject *buffer_auto(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    (void)args;
    (void)nargs;
    (void)kwnames;
    Py_INCREF(self);
    return self;
}

/* Tile counts of a mod_alloc parameter (an int or a tuple of ints >= 1)
 * into t; the count of dims, or -1 with the error raised. */
static int hint_tiles(PyObject *o, const char *api, const char *what, int64_t *t)
{
    PyObject *seq;
    Py_ssize_t n;
    if (!o || o == Py_None)
        return 0;
    if (nki_get_int(o, &t[0])) {
        if (t[0] < 1)
            return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s=%lld, tile counts are at least 1", what,
                             (long long)t[0]), -1);
        return 1;
    }
    seq = PySequence_Check(o) ? PySequence_Fast(o, "") : NULL;
    if (!seq) {
        PyErr_Clear();
        return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s must be a tuple of ints", what), -1);
    }
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > SIMC_MAX_DIMS) {
        Py_DECREF(seq);
        return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s has %zd dims, at most %d", what, n,
                         SIMC_MAX_DIMS), -1);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!nki_get_int(PySequence_Fast_GET_ITEM(seq, i), &t[i]) || t[i] < 1) {
            Py_DECREF(seq);
            return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s must be a tuple of ints >= 1", what), -1);
        }
    }
    Py_DECREF(seq);
    return (int)n;
}

static int hint_int(PyObject *o, const char *api, const char *what, int64_t dflt, int64_t *v)
{
    *v = dflt;
    if (!o || o == Py_None)
        return 0;
    if (!nki_get_int(o, v) || *v < 0 || *v > ((int64_t)1 << 40))
        return (nki_fail(SIM_E_BAD_ARGUMENT, api, "%s must be an int >= 0", what), -1);
    return 0;
}

static int tiles_text(char *buf, size_t len, const char *what, const int64_t *t, int n)
{
    int w = snprintf(buf, len, ", %s=(", what);
    for (int i = 0; i < n && w > 0 && (size_t)w < len; i++)
        w += snprintf(buf + w, len - (size_t)w, "%lld%s", (long long)t[i], n == 1 || i + 1 < n ? "," : "");
    if (w > 0 && (size_t)w < len)
        w += snprintf(buf + w, len - (size_t)w, ")");
    return w;
}

/* ncc.sbuf.mod_alloc(base_addr=, base_partition=, num_par_tiles=,
 * num_free_tiles=) and ncc.psum.mod_alloc(base_bank=, base_addr=, ...,
 * num_bank_tiles=): a buffer carrying the hint (nki_hint), which
 * nki_tensor_alloc_ex checks and the liveness placement honours. */
static PyObject *buffer_mod_alloc(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const char *const names[] = { "base_addr", "base_bank", "base_partition",
                                         "num_bank_tiles", "num_par_tiles", "num_free_tiles" };
    nki_buffer_obj *b = (nki_buffer_obj *)self, *r;
    PyObject *a[NKI_NARGS(names)];
    nki_hint h;
    const char *api = b->mem == SIM_MEM_PSUM ? "ncc.psum.mod_alloc" : "ncc.sbuf.mod_alloc";
    int w;

    if (nki_need_run(api) < 0)
        return NULL;
    if (b->mem == SIM_MEM_HBM)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "mod_alloc places SBUF or PSUM tiles, not %s",
                        b->name);
    if (nki_parse(api, args, nargs, kwnames, names, NKI_NARGS(names), a) < 0)
        return NULL;
    memset(&h, 0, sizeof(h));
    h.set = true;
    if (b->mem == SIM_MEM_SBUF && a[1])
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "base_bank is a PSUM parameter");
    if (b->mem == SIM_MEM_SBUF && a[3])
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "num_bank_tiles is a PSUM parameter");
    if (b->mem == SIM_MEM_SBUF && !a[0])
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "base_addr is required");
    if (hint_int(a[0], api, "base_addr", 0, &h.base_addr) < 0 ||
        hint_int(a[1], api, "base_bank", 0, &h.base_bank) < 0 ||
        hint_int(a[2], api, "base_partition", 0, &h.base_partition) < 0)
        return NULL;
    if ((h.n_bank = hint_tiles(a[3], api, "num_bank_tiles", h.bank_tiles)) < 0 ||
        (h.n_par = hint_tiles(a[4], api, "num_par_tiles", h.par_tiles)) < 0 ||
        (h.n_free = hint_tiles(a[5], api, "num_free_tiles", h.free_tiles)) < 0)
        return NULL;
    if (b->mem == SIM_MEM_PSUM)
        w = snprintf(h.text, sizeof(h.text), "%s(base_bank=%lld, base_addr=%lld", api,
                     (long long)h.base_bank, (long long)h.base_addr);
    else
        w = snprintf(h.text, sizeof(h.text), "%s(base_addr=%lld", api, (long long)h.base_addr);
    if (w > 0 && h.base_partition && (size_t)w < sizeof(h.text))
        w += snprintf(h.text + w, sizeof(h.text) - (size_t)w, ", base_partition=%lld",
                      (long long)h.base_partition);
    if (w > 0 && h.n_bank && (size_t)w < sizeof(h.text))
        w += tiles_text(h.text + w, sizeof(h.text) - (size_t)w, "num_bank_tiles", h.bank_tiles, h.n_bank);
    if (w > 0 && h.n_par && (size_t)w < sizeof(h.text))
        w += tiles_text(h.text + w, sizeof(h.text) - (size_t)w, "num_par_tiles", h.par_tiles, h.n_par);
    if (w > 0 && h.n_free && (size_t)w < sizeof(h.text))
        w += tiles_text(h.text + w, sizeof(h.text) - (size_t)w, "num_free_tiles", h.free_tiles, h.n_free);
    if (w > 0 && (size_t)w < sizeof(h.text))
        snprintf(h.text + w, sizeof(h.text) - (size_t)w, ")");
    r = PyObject_New(nki_buffer_obj, &nki_BufferType);
    if (!r)
        return NULL;
    r->mem = b->mem;
    r->shared = b->shared;
    r->name = b->name;
    r->hint = h;
    return (PyObject *)r;
}

/* ncc.sbuf.alloc(func) / ncc.psum.alloc(func): a buffer whose tensor's
 * blocks go where func says (called per block when the tensor is made). */
static PyObject *buffer_func_alloc(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const names[] = { "func" };
    nki_buffer_obj *b = (nki_buffer_obj *)self, *r;
    PyObject *a[NKI_NARGS(names)];
    const char *api = b->mem == SIM_MEM_PSUM ? "ncc.psum.alloc" : "ncc.sbuf.alloc";

    if (nki_need_run(api) < 0)
        return NULL;
    if (b->mem == SIM_MEM_HBM)
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "alloc places SBUF or PSUM tiles, not %s", b->name);
    if (nki_parse(api, args, nargs, kwnames, names, NKI_NARGS(names), a) < 0)
        return NULL;
    if (!a[0] || !PyCallable_Check(a[0]))
        return nki_fail(SIM_E_BAD_ARGUMENT, api, "func must be callable");
    r = PyObject_New(nki_buffer_obj, &nki_BufferType);
    if (!r)
        return NULL;
    r->mem = b->mem;
    r->shared = b->shared;
    r->name = b->name;
    memset(&r->hint, 0, sizeof(r->hint));
    r->hint.set = true;
    Py_INCREF(a[0]);
    r->hint.func = a[0];
    {
        PyObject *nm = PyObject_GetAttrString(a[0], "__name__");
        const char *s = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
        snprintf(r->hint.text, sizeof(r->hint.text), "%s(%.100s)", api, s ? s : "func");
        Py_XDECREF(nm);
        PyErr_Clear();
    }
    return (PyObject *)r;
}

static void buffer_dealloc(PyObject *o)
{
    Py_XDECREF(((nki_buffer_obj *)o)->hint.func);
    Py_TYPE(o)->tp_free(o);
}

static PyMethodDef buffer_methods[] = {
    { "mod_alloc", (PyCFunction)(void (*)(void))buffer_mod_alloc, METH_FASTCALL | METH_KEYWORDS,
      "modulo allocation of the tensor's blocks at fixed addresses" },
    { "alloc", (PyCFunction)(void (*)(void))buffer_func_alloc, METH_FASTCALL | METH_KEYWORDS,
      "blocks placed by an allocation function" },
    { "auto_alloc", (PyCFunction)(void (*)(void))buffer_auto, METH_FASTCALL | METH_KEYWORDS,
      "the compiler's allocation (the buffer itself)" },
    { NULL, NULL, 0, NULL },
};

PyTypeObject nki_BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.language.buffer",
    .tp_basicsize = sizeof(nki_buffer_obj),
    .tp_repr = buffer_repr,
    .tp_dealloc = buffer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A memory: sbuf, psum, hbm, shared_hbm, private_hbm.",
    .tp_methods = buffer_methods,
};

PyObject *nki_buffer_singleton(int mem, int shared)
{
    if (mem == SIM_MEM_SBUF)
        return (PyObject *)buffers[0];
    if (mem == SIM_MEM_PSUM)
        return (PyObject *)buffers[1];
    return (PyObject *)buffers[shared ? 3 : 2];
}

const nki_hint *nki_buffer_hint(PyObject *obj)
{
    if (obj && Py_TYPE(obj) == &nki_BufferType && ((nki_buffer_obj *)obj)->hint.set)
        return &((nki_buffer_obj *)obj)->hint;
    return NULL;
}

int nki_buffer_from(PyObject *obj, const char *api, bool *shared)
{
    *shared = false;
    if (!obj || obj == Py_None)
        return SIM_MEM_SBUF;
    if (Py_TYPE(obj) == &nki_BufferType) {
        *shared = ((nki_buffer_obj *)obj)->shared != 0;
        return ((nki_buffer_obj *)obj)->mem;
    }
    nki_fail(SIM_E_BAD_ARGUMENT, api, "buffer must be nl.sbuf, nl.psum or an HBM buffer, got %s",
             Py_TYPE(obj)->tp_name);
    return -1;
}

sim_engine nki_engine_from(PyObject *obj, sim_engine dflt)
{
    long v;
    if (!obj || obj == Py_None || !PyLong_Check(obj))
        return dflt;
    v = PyLong_AsLong(obj);
    if (v < 0 || v >= SIM_ENG_DMA) {
        PyErr_Clear();
        return dflt;
    }
    return (sim_engine)v;
}

/* ===== par_dim ===== */

static PyObject *pardim_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    long long n;
    nki_pardim *p;
    (void)kw;
    if (!PyArg_ParseTuple(args, "L", &n))
        return NULL;
    p = (nki_pardim *)type->tp_alloc(type, 0);
    if (p)
        p->size = n;
    return (PyObject *)p;
}

static PyObject *pardim_index(PyObject *o)
{
    return PyLong_FromLongLong(((nki_pardim *)o)->size);
}

static PyNumberMethods pardim_as_number = { .nb_index = pardim_index, .nb_int = pardim_index };

PyTypeObject nki_ParDimType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.language.par_dim",
    .tp_basicsize = sizeof(nki_pardim),
    .tp_new = pardim_new,
    .tp_as_number = &pardim_as_number,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Marks the partition dimension of a shape with block dimensions.",
};

/* ===== op values ===== */

simn_op nki_op_from(PyObject *obj, const char *api, const char *what, bool none_ok)
{
    static const struct {
        const char *alias;
        simn_op op;
    } aliases[] = {
        { "amax", SIMN_OP_MAX }, { "amin", SIMN_OP_MIN }, { "true_divide", SIMN_OP_DIVIDE },
        { "fmax", SIMN_OP_MAXIMUM }, { "fmin", SIMN_OP_MINIMUM }, { "greater_equal", SIMN_OP_GREATER_EQUAL },
        { "remainder", SIMN_OP_MOD }, { "fmod", SIMN_OP_MOD }, { "absolute", SIMN_OP_ABS },
        { "bypass", SIMN_OP_COPY }, { "arctan", SIMN_OP_ARCTAN }, { "rsqrt", SIMN_OP_RSQRT },
        { "negate", SIMN_OP_NEGATIVE }, { "pow", SIMN_OP_POWER }, { "average", SIMN_OP_MEAN },
    };
    const char *name = NULL;
    PyObject *nobj = NULL;

    if (!obj || obj == Py_None) {
        if (none_ok)
            return SIMN_OP_NONE;
        nki_fail(SIM_E_BAD_ARGUMENT, api, "%s is required", what);
        return SIMN_OP_NONE;
    }
    if (PyCFunction_Check(obj)) {
        name = ((PyCFunctionObject *)obj)->m_ml->ml_name;
    } else if (PyUnicode_Check(obj)) {
        name = PyUnicode_AsUTF8(obj);
    } else {
        nobj = PyObject_GetAttrString(obj, "__name__");
        if (nobj && PyUnicode_Check(nobj))
            name = PyUnicode_AsUTF8(nobj);
        PyErr_Clear();
    }
    if (name) {
        for (int op = 1; op < SIMN_OP__COUNT; op++)
            if (strcmp(simn_op_name((simn_op)op), name) == 0) {
                Py_XDECREF(nobj);
                return (simn_op)op;
            }
        for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
            if (strcmp(aliases[i].alias, name) == 0) {
                Py_XDECREF(nobj);
                return aliases[i].op;
            }
    }
    nki_fail(SIM_E_UNSUPPORTED_API, api, "%s %s is not an operator kforge implements", what,
             name ? name : Py_TYPE(obj)->tp_name);
    Py_XDECREF(nobj);
    return SIMN_OP_NONE;
}

/* ===== decorators and kernels ===== */

typedef struct nki_kernel {
    PyObject_HEAD
    PyObject *func;
    PyObject *grid;     /* tuple for a launcher `kernel[g0, g1]`, NULL otherwise */
} nki_kernel;

static PyTypeObject nki_KernelType;

static void kernel_dealloc(PyObject *o)
{
    nki_kernel *k = (nki_kernel *)o;
    Py_XDECREF(k->func);
    Py_XDECREF(k->grid);
    Py_TYPE(o)->tp_free(o);
}

static PyObject *kernel_new(PyObject *func, PyObject *grid)
{
    nki_kernel *k = PyObject_New(nki_kernel, &nki_KernelType);
    if (!k)
        return NULL;
    Py_INCREF(func);
    k->func = func;
    Py_XINCREF(grid);
    k->grid = grid;
    return (PyObject *)k;
}

/* Call: a kernel called from inside a kernel (a jit helper) runs inline; a
 * launcher runs the body once per grid point with program ids set and
 * returns the last program's result (outputs live in shared HBM, which all
 * programs share). */
static PyObject *kernel_call(PyObject *o, PyObject *args, PyObject *kw)
{
    nki_kernel *k = (nki_kernel *)o;
    nki_ctx *c = nki_cur;
    PyObject *res = NULL;
    int g[3] = { 1, 1, 1 }, nd;
    int save_pid[3], save_ndim, save_grid[3];
    size_t base;

    if (!k->grid || !c)
        return PyObject_Call(k->func, args, kw);
    nd = (int)PyTuple_GET_SIZE(k->grid);
    for (int i = 0; i < nd; i++) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(k->grid, i));
        if (v < 1) {
            PyErr_Clear();
            return nki_fail(SIM_E_BAD_ARGUMENT, "kernel[grid]", "grid dimension %d is %ld", i, v);
        }
        if (v > 65536 || (long)g[0] * g[1] * g[2] * v > 65536)
            return nki_fail(SIM_E_LIMIT, "kernel[grid]", "an SPMD grid of more than 65536 programs");
        g[i] = (int)v;
    }
    memcpy(save_pid, c->pid, sizeof(save_pid));
    memcpy(save_grid, c->grid, sizeof(save_grid));
    save_ndim = c->grid_ndim;
    base = c->n_shared;   /* programs of this launch share the outputs they allocate */
    c->grid_ndim = nd;
    memcpy(c->grid, g, sizeof(g));
    for (long i = 0; i < (long)g[0] * g[1] * g[2]; i++) {
        c->pid[0] = (int)(i / ((long)g[1] * g[2]));
        c->pid[1] = (int)((i / g[2]) % g[1]);
        c->pid[2] = (int)(i % g[2]);
        c->shared_cursor = base;
        Py_XDECREF(res);
        res = PyObject_Call(k->func, args, kw);
        c->spmd_index++;
        if (!res)
            break;
    }
    memcpy(c->pid, save_pid, sizeof(save_pid));
    memcpy(c->grid, save_grid, sizeof(save_grid));
    c->grid_ndim = save_ndim;
    c->shared_cursor = c->n_shared;
    return res;
}

static PyObject *kernel_getitem(PyObject *o, PyObject *key)
{
    nki_kernel *k = (nki_kernel *)o;
    PyObject *grid, *r;
    Py_ssize_t n;

    grid = PyTuple_Check(key) ? (Py_INCREF(key), key) : PyTuple_Pack(1, key);
    if (!grid)
        return NULL;
    n = PyTuple_GET_SIZE(grid);
    if (n < 1 || n > 3) {
        Py_DECREF(grid);
        return nki_fail(SIM_E_BAD_ARGUMENT, "kernel[grid]", "a launch grid has 1 to 3 dims, got %zd", n);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyLong_Check(PyTuple_GET_ITEM(grid, i))) {
            /* nl.spmd_dim(...) and friends: not implemented. */
            Py_DECREF(grid);
            return nki_fail(SIM_E_BAD_ARGUMENT, "kernel[grid]",
                            "grid entries must be ints or nl.spmd_dim(...)");
        }
    r = kernel_new(k->func, grid);
    Py_DECREF(grid);
    return r;
}

static PyObject *kernel_getattro(PyObject *o, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(o, name);
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    return PyObject_GetAttr(((nki_kernel *)o)->func, name);
}

static PyMappingMethods kernel_as_mapping = { NULL, kernel_getitem, NULL };

static PyTypeObject nki_KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.Kernel",
    .tp_basicsize = sizeof(nki_kernel),
    .tp_dealloc = kernel_dealloc,
    .tp_call = kernel_call,
    .tp_as_mapping = &kernel_as_mapping,
    .tp_getattro = kernel_getattro,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An @nki.jit kernel; kernel[g0, g1](...) launches it over an SPMD grid.",
};

PyObject *nki_kernel_func(PyObject *obj)
{
    while (obj && Py_TYPE(obj) == &nki_KernelType)
        obj = ((nki_kernel *)obj)->func;
    return obj;
}

/* nki.jit(func), nki.jit(**kw)(func), nki.jit(func, **kw). */
static PyObject *mod_jit(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)kwnames;
    if (nargs >= 1 && PyCallable_Check(args[0]))
        return kernel_new(args[0], NULL);
    return PyObject_GetAttrString(m, "jit");
}

static PyObject *identity(PyObject *m, PyObject *arg)
{
    (void)m;
    Py_INCREF(arg);
    return arg;
}

static PyMethodDef identity_def = { "decorator", identity, METH_O, "returns its argument" };

/* Decorators that change nothing in the simulator (baremetal, benchmark,
 * skip_middle_end_transformations, ...): f -> f, and (...) -> decorator. */
static PyObject *mod_noop_decorator(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    (void)m;
    if (nargs == 1 && !kwnames && PyCallable_Check(args[0])) {
        Py_INCREF(args[0]);
        return args[0];
    }
    return PyCFunction_New(&identity_def, NULL);
}

/* Calls that return nothing useful in the simulator (no_reorder(), ...). */
static PyObject *mod_none(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)m;
    (void)args;
    (void)nargs;
    (void)kwnames;
    return Py_NewRef(Py_None);
}

/* Scheduling hints (no_reorder()): a no-op context manager, usable as a
 * `with` block or passed as a value (directives=). */
PyObject *nki_nullcontext(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *ctx, *r;
    (void)m;
    (void)args;
    (void)nargs;
    (void)kwnames;
    ctx = PyImport_ImportModule("contextlib");
    if (!ctx)
        return NULL;
    r = PyObject_CallMethod(ctx, "nullcontext", NULL);
    Py_DECREF(ctx);
    return r;
}

/* nki.simulate(kernel) / simulate_kernel(kernel, *args): run inline. */
static PyObject *mod_simulate_kernel(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    (void)m;
    if (nargs < 1)
        return nki_fail(SIM_E_BAD_ARGUMENT, "nki.simulate_kernel", "a kernel is required");
    return PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), kwnames);
}

PyObject *nki_unsupported(const char *module, const char *name)
{
    char api[64];
    snprintf(api, sizeof(api), "%s.%s", module, name);
    return nki_fail(SIM_E_UNSUPPORTED_API, api, "%s is not implemented by kforge's simulator", api);
}

/* PEP 562 module __getattr__: anything not defined is an unsupported API. */
PyObject *nki_mod_getattr(PyObject *m, PyObject *name)
{
    const char *mn = PyModule_GetName(m), *s = PyUnicode_AsUTF8(name);
    if (!mn || !s)
        return NULL;
    if (s[0] == '_' && s[1] == '_') {
        PyErr_Format(PyExc_AttributeError, "module '%s' has no attribute '%s'", mn, s);
        return NULL;
    }
    return nki_unsupported(mn, s);
}

/* ===== nki.typing ===== */

static PyObject *typing_getitem(PyObject *self, PyObject *key)
{
    (void)key;
    Py_INCREF(self);
    return self;
}

static PyMappingMethods typing_as_mapping = { NULL, typing_getitem, NULL };

static PyTypeObject nki_TypingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nki.typing.tensor",
    .tp_basicsize = sizeof(PyObject),
    .tp_as_mapping = &typing_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Annotation stub: nt.tensor[shape, dtype] evaluates to itself.",
};

/* ===== module definitions ===== */

typedef struct mod_state {
    int legacy;
} mod_state;

bool nki_module_is_legacy(PyObject *module)
{
    mod_state *st = module && PyModule_Check(module) ? PyModule_GetState(module) : NULL;
    return st && st->legacy;
}

static PyMethodDef nki_top_methods[] = {
    { "jit", FASTKW(mod_jit), "compile a kernel (the simulator traces it)" },
    { "baremetal", FASTKW(mod_noop_decorator), "no-op in the simulator" },
    { "benchmark", FASTKW(mod_noop_decorator), "no-op in the simulator" },
    { "profile", FASTKW(mod_noop_decorator), "no-op in the simulator" },
    { "trace", FASTKW(mod_noop_decorator), "no-op in the simulator" },
    { "simulate", FASTKW(mod_noop_decorator), "runs the kernel as is" },
    { "simulate_kernel", FASTKW(mod_simulate_kernel), "runs the kernel inline" },
    { "__getattr__", nki_mod_getattr, METH_O, "unsupported API" },
    { NULL, NULL, 0, NULL },
};

static PyMethodDef nki_compiler_methods[] = {
    { "skip_middle_end_transformations", FASTKW(mod_noop_decorator), "no-op" },
    { "enable_stack_allocator", FASTKW(mod_noop_decorator), "no-op" },
    { "multi_buffer", FASTKW(mod_noop_decorator), "no-op" },
    { "force_auto_alloc", FASTKW(mod_noop_decorator), "no-op" },
    { "no_reorder", FASTKW(nki_nullcontext), "scheduling hint (a no-op context manager)" },
    { "tile_position", FASTKW(mod_none), "scheduling hint (ignored)" },
    { "__getattr__", nki_mod_getattr, METH_O, "unsupported API" },
    { NULL, NULL, 0, NULL },
};

static PyMethodDef nki_plain_methods[] = {
    { "__getattr__", nki_mod_getattr, METH_O, "unsupported API" },
    { NULL, NULL, 0, NULL },
};

#define MODDEF(var, name, methods)                                                               \
    static PyModuleDef var = { PyModuleDef_HEAD_INIT, name, NULL, sizeof(mod_state), methods,    \
                               NULL, NULL, NULL, NULL }
MODDEF(def_nki, "nki", nki_top_methods);
MODDEF(def_lang, "nki.language", nki_language_methods);
MODDEF(def_isa, "nki.isa", nki_isa_methods);
MODDEF(def_compiler, "nki.compiler", nki_compiler_methods);
MODDEF(def_typing, "nki.typing", nki_plain_methods);
MODDEF(def_ns, "nki.namespace", nki_plain_methods);
MODDEF(def_lnki, "neuronxcc.nki", nki_top_methods);
MODDEF(def_lisa, "neuronxcc.nki.isa", nki_isa_methods);
MODDEF(def_ncc, "neuronxcc", nki_plain_methods);

static PyObject *tile_size_mod;

static int add_obj(PyObject *m, const char *name, PyObject *o)
{
    if (!o)
        return -1;
    if (PyModule_AddObject(m, name, o) < 0) {
        Py_DECREF(o);
        return -1;
    }
    return 0;
}

static int add_ref(PyObject *m, const char *name, PyObject *o)
{
    Py_XINCREF(o);
    return add_obj(m, name, o);
}

/* A namespace module with int attributes (enums). */
static PyObject *make_ns(const char *name, const char *const *keys, const long *vals, int n)
{
    PyObject *m = PyModule_Create(&def_ns);
    if (!m)
        return NULL;
    if (PyObject_SetAttrString(m, "__name__", PyUnicode_FromString(name)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (PyModule_AddIntConstant(m, keys[i], vals[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}

static int set_name(PyObject *m, const char *name)
{
    PyObject *s = PyUnicode_FromString(name);
    int r = s ? PyObject_SetAttrString(m, "__name__", s) : -1;
    Py_XDECREF(s);
    return r;
}

static int fill_language(PyObject *m)
{
    static const char *const ts_keys[] = { "pmax", "gemm_stationary_fmax", "gemm_moving_fmax",
                                           "psum_fmax", "bn_stats_fmax", "psum_bank_fmax",
                                           "psum_num_banks", "total_available_sbuf_size",
                                           "bn_aggr_fmax" };
    static const long ts_vals[] = { 128, 128, 512, 512, 512, 512, 8, 192L * 1024, 512 };
    static const char *const bufnames[] = { "sbuf", "psum", "hbm", "shared_hbm", "private_hbm" };
    PyObject *ts;

    for (int i = 0; i < SIM_DT__COUNT; i++)
        if (add_ref(m, sim_dtype_name((sim_dtype)i), (PyObject *)dtype_objs[i]) < 0)
            return -1;
    if (add_ref(m, "bool", (PyObject *)dtype_objs[SIM_DT_BOOL]) < 0 ||
        add_ref(m, "fp32", (PyObject *)dtype_objs[SIM_DT_FLOAT32]) < 0 ||
        add_ref(m, "bf16", (PyObject *)dtype_objs[SIM_DT_BFLOAT16]) < 0 ||
        add_ref(m, "fp16", (PyObject *)dtype_objs[SIM_DT_FLOAT16]) < 0 ||
        add_ref(m, "tf32", (PyObject *)dtype_objs[SIM_DT_TFLOAT32]) < 0 ||
        add_ref(m, "fp8_e4m3", (PyObject *)dtype_objs[SIM_DT_FLOAT8_E4M3]) < 0 ||
        add_ref(m, "fp8_e5m2", (PyObject *)dtype_objs[SIM_DT_FLOAT8_E5M2]) < 0)
        return -1;
    for (int i = 0; i < 5; i++)
        if (add_ref(m, bufnames[i], (PyObject *)buffers[i]) < 0)
            return -1;
    if (add_ref(m, "par_dim", (PyObject *)&nki_ParDimType) < 0 ||
        add_obj(m, "mgrid", PyObject_New(PyObject, &nki_MgridType)) < 0)
        return -1;
    /* nl.NKIObject: the base class kernels derive their config classes from. */
    if (add_obj(m, "NKIObject",
                PyObject_CallFunction((PyObject *)&PyType_Type, "s(O){ss}", "NKIObject",
                                      (PyObject *)&PyBaseObject_Type, "__module__",
                                      "nki.language")) < 0)
        return -1;
    ts = make_ns("nki.language.tile_size", ts_keys, ts_vals,
                 (int)(sizeof(ts_vals) / sizeof(ts_vals[0])));
    if (!ts)
        return -1;
    tile_size_mod = ts;
    return add_ref(m, "tile_size", ts);
}

static int fill_isa(PyObject *m, int legacy)
{
    static const char *const eng_keys[] = { "tensor", "vector", "scalar", "gpsimd", "sync",
                                            "activation", "pool", "unknown", "any" };
    static const long eng_vals[] = { SIM_ENG_TENSOR, SIM_ENG_VECTOR, SIM_ENG_SCALAR,
                                     SIM_ENG_GPSIMD, SIM_ENG_SYNC, SIM_ENG_SCALAR,
                                     SIM_ENG_GPSIMD, -1, -1 };
    static const char *const rc_keys[] = { "idle", "reset", "reduce", "reset_reduce",
                                           "load_reduce" };
    static const long rc_vals[] = { 0, 1, 2, 3, 4 };
    static const char *const ver_keys[] = { "gen2", "gen3", "gen4" };
    static const long ver_vals[] = { 2, 3, 4 };
    static const char *const oob_keys[] = { "error", "skip" };
    static const long oob_vals[] = { 0, 1 };
    static const char *const dge_keys[] = { "none", "swdge", "hwdge", "unknown" };
    static const long dge_vals[] = { 0, 1, 2, 3 };
    static const char *const perf_keys[] = { "none", "double_row", "double_row_gen3" };
    static const long perf_vals[] = { 0, 1, 2 };
    mod_state *st = PyModule_GetState(m);

    st->legacy = legacy;
    if (add_obj(m, "engine", make_ns("nki.isa.engine", eng_keys, eng_vals, 9)) < 0 ||
        add_obj(m, "reduce_cmd", make_ns("nki.isa.reduce_cmd", rc_keys, rc_vals, 5)) < 0 ||
        add_obj(m, "nc_version", make_ns("nki.isa.nc_version", ver_keys, ver_vals, 3)) < 0 ||
        add_obj(m, "oob_mode", make_ns("nki.isa.oob_mode", oob_keys, oob_vals, 2)) < 0 ||
        add_obj(m, "dge_mode", make_ns("nki.isa.dge_mode", dge_keys, dge_vals, 4)) < 0 ||
        add_obj(m, "matmul_perf_mode",
                make_ns("nki.isa.matmul_perf_mode", perf_keys, perf_vals, 3)) < 0 ||
        add_obj(m, "dma_engine", make_ns("nki.isa.dma_engine", NULL, NULL, 0)) < 0 ||
        PyModule_AddIntConstant(m, "tensor_engine", SIM_ENG_TENSOR) < 0 ||
        PyModule_AddIntConstant(m, "vector_engine", SIM_ENG_VECTOR) < 0 ||
        PyModule_AddIntConstant(m, "scalar_engine", SIM_ENG_SCALAR) < 0 ||
        PyModule_AddIntConstant(m, "gpsimd_engine", SIM_ENG_GPSIMD) < 0 ||
        PyModule_AddIntConstant(m, "unknown_engine", -1) < 0)
        return -1;
    /* nki.isa.constants re-exports the enums (nki-library imports them there). */
    return add_ref(m, "constants", m);
}

static int put_module(PyObject *sysmods, const char *name, PyObject *m)
{
    return PyDict_SetItemString(sysmods, name, m);
}

int nki_modules_install(void)
{
    static const char *const bufnames[] = { "sbuf", "psum", "hbm", "shared_hbm", "private_hbm" };
    static const int bufmem[] = { SIM_MEM_SBUF, SIM_MEM_PSUM, SIM_MEM_HBM, SIM_MEM_HBM, SIM_MEM_HBM };
    PyObject *sysmods = PyImport_GetModuleDict();
    PyObject *nki = NULL, *lang = NULL, *isa = NULL, *comp = NULL, *typing = NULL;
    PyObject *lnki = NULL, *lisa = NULL, *ncc = NULL, *tt = NULL, *path = NULL;
    int rc = -1;

    PyTypeObject *types[] = { &nki_TensorType, &nki_IndexType, &nki_PredType, &nki_MgridType,
                              &nki_MgridResultType, &nki_DtypeType, &nki_BufferType,
                              &nki_ParDimType, &nki_KernelType, &nki_TypingType,
                              &nki_IndirectType };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0)
            return -1;
    nki_SimError = PyErr_NewExceptionWithDoc("nki.SimError",
                                             "A NeuronCore rule was broken (see the message).",
                                             PyExc_Exception, NULL);
    if (!nki_SimError)
        return -1;
    for (int i = 0; i < SIM_DT__COUNT; i++) {
        dtype_objs[i] = PyObject_New(nki_dtype_obj, &nki_DtypeType);
        if (!dtype_objs[i])
            return -1;
        dtype_objs[i]->dt = (sim_dtype)i;
    }
    for (int i = 0; i < 5; i++) {
        buffers[i] = PyObject_New(nki_buffer_obj, &nki_BufferType);
        if (!buffers[i])
            return -1;
        buffers[i]->mem = bufmem[i];
        buffers[i]->shared = i == 3;
        buffers[i]->name = bufnames[i];
        memset(&buffers[i]->hint, 0, sizeof(buffers[i]->hint));
    }
    nki = PyModule_Create(&def_nki);
    lang = PyModule_Create(&def_lang);
    isa = PyModule_Create(&def_isa);
    comp = PyModule_Create(&def_compiler);
    typing = PyModule_Create(&def_typing);
    lnki = PyModule_Create(&def_lnki);
    lisa = PyModule_Create(&def_lisa);
    ncc = PyModule_Create(&def_ncc);
    if (!nki || !lang || !isa || !comp || !typing || !lnki || !lisa || !ncc)
        goto out;
    if (fill_language(lang) < 0 || fill_isa(isa, 0) < 0 || fill_isa(lisa, 1) < 0)
        goto out;
    if (add_ref(comp, "sbuf", (PyObject *)buffers[0]) < 0 ||
        add_ref(comp, "psum", (PyObject *)buffers[1]) < 0)
        goto out;
    tt = PyObject_New(PyObject, &nki_TypingType);
    if (!tt || add_ref(typing, "tensor", tt) < 0 || add_ref(typing, "mutable_tensor", tt) < 0 ||
        add_ref(typing, "scalar", tt) < 0)
        goto out;
    /* Packages: a __path__ makes `import nki.language` resolve submodules
     * (all of them are already in sys.modules). */
    path = PyList_New(0);
    if (!path || PyObject_SetAttrString(nki, "__path__", path) < 0 ||
        PyObject_SetAttrString(lnki, "__path__", path) < 0 ||
        PyObject_SetAttrString(ncc, "__path__", path) < 0)
        goto out;
    if (add_ref(nki, "language", lang) < 0 || add_ref(nki, "isa", isa) < 0 ||
        add_ref(nki, "compiler", comp) < 0 || add_ref(nki, "typing", typing) < 0 ||
        add_ref(nki, "SimError", nki_SimError) < 0 || add_ref(lnki, "language", lang) < 0 ||
        add_ref(lnki, "isa", lisa) < 0 || add_ref(lnki, "compiler", comp) < 0 ||
        add_ref(lnki, "typing", typing) < 0 || add_ref(lnki, "SimError", nki_SimError) < 0 ||
        add_ref(ncc, "nki", lnki) < 0)
        goto out;
    if (put_module(sysmods, "nki", nki) < 0 || put_module(sysmods, "nki.language", lang) < 0 ||
        put_module(sysmods, "nki.isa", isa) < 0 ||
        put_module(sysmods, "nki.isa.constants", isa) < 0 ||
        put_module(sysmods, "nki.compiler", comp) < 0 ||
        put_module(sysmods, "nki.typing", typing) < 0 ||
        put_module(sysmods, "neuronxcc", ncc) < 0 ||
        put_module(sysmods, "neuronxcc.nki", lnki) < 0 ||
        put_module(sysmods, "neuronxcc.nki.language", lang) < 0 ||
        put_module(sysmods, "neuronxcc.nki.isa", lisa) < 0 ||
        put_module(sysmods, "neuronxcc.nki.compiler", comp) < 0 ||
        put_module(sysmods, "neuronxcc.nki.typing", typing) < 0)
        goto out;
    if (set_name(isa, "nki.isa") < 0 || set_name(lisa, "neuronxcc.nki.isa") < 0)
        goto out;
    rc = 0;
out:
    Py_XDECREF(nki);
    Py_XDECREF(lang);
    Py_XDECREF(isa);
    Py_XDECREF(comp);
    Py_XDECREF(typing);
    Py_XDECREF(lnki);
    Py_XDECREF(lisa);
    Py_XDECREF(ncc);
    Py_XDECREF(tt);
    Py_XDECREF(path);
    return rc;
}

int nki_modules_configure(const simc_target *tgt)
{
    PyObject *v;
    int rc;
    if (!tile_size_mod)
        return -1;
    v = PyLong_FromUnsignedLong(tgt->sbuf_bytes);
    if (!v)
        return -1;
    rc = PyObject_SetAttrString(tile_size_mod, "total_available_sbuf_size", v);
    Py_DECREF(v);
    return rc;
}
