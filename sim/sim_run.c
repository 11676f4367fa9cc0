/* sim_run — run one NKI kernel in the embedded CPython (see sim_run.h).
 *
 * The interpreter starts once per process with an isolated configuration
 * (no site, no user environment) plus Debian's dist-packages on sys.path so
 * kernels and references can import NumPy; the `nki` modules are put in
 * sys.modules by nki_modules_install().  Each run compiles the kernel with
 * its real filename (frames then carry the kernel's file:line), executes the
 * module body, binds the inputs as borrowed HBM tensors and calls the entry
 * once per SPMD grid point. */
#include "sim_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "nki_internal.h"
#include "nki_mmq.h"
#include "sim_live.h"
#include "sim_load.h"

/* SPMD programs in one launch (each re-traces the kernel). */
#define SIM_MAX_PROGRAMS 65536

static bool py_ready;
static bool py_failed;

void sim_array_release(sim_array *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof(*a));
}

int64_t sim_array_elems(const sim_array *a)
{
    int64_t n;
    return simc_shape_elems(a->ndim, a->shape, INT64_MAX, &n) ? n : -1;
}

kf_code sim_array_check(const sim_array *a, uint64_t max_bytes, int64_t *elems, kf_err *err)
{
    const char *name = a->name[0] ? a->name : "(unnamed)";
    char shape[8 * 21 + 1] = "";
    unsigned es;
    uint64_t limit;
    int64_t n;

    if ((unsigned)a->dtype >= SIM_DT__COUNT)
        return kf_err_set(err, KF_INVALID, "array '%s' has an unknown dtype (%d)", name, (int)a->dtype);
    if (a->ndim < 0 || a->ndim > SIMC_MAX_DIMS)
        return kf_err_set(err, KF_INVALID, "array '%s' has %d dimensions; give 0 to %d", name, a->ndim,
                          SIMC_MAX_DIMS);
    for (int d = 0, o = 0; d < a->ndim && o < (int)sizeof(shape); d++)
        o += snprintf(shape + o, sizeof(shape) - (size_t)o, "%s%lld", d ? "x" : "", (long long)a->shape[d]);
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] < 0)
            return kf_err_set(err, KF_INVALID, "array '%s' has shape %s; dimensions must be >= 0", name, shape);
    }
    es = sim_dtype_size(a->dtype);
    limit = max_bytes / (es ? es : 1);
    if (!simc_shape_elems(a->ndim, a->shape, limit > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)limit, &n))
        return kf_err_set(err, KF_TOO_LARGE,
                          "array '%s' of shape %s (%s) needs more than the %llu bytes one array may hold; "
                          "use a smaller shape", name, shape[0] ? shape : "scalar", sim_dtype_name(a->dtype),
                          (unsigned long long)max_bytes);
    if (elems)
        *elems = n;
    return KF_OK;
}

static kf_code py_init(kf_err *err)
{
    PyConfig cfg;
    PyStatus st;
    PyObject *path, *p;

    if (py_ready)
        return KF_OK;
    (void)simn_init();   /* without OpenBLAS, matmuls fall back to a C loop */
    if (py_failed)
        return kf_err_set(err, KF_INTERNAL, "the embedded Python interpreter failed to start earlier");
    PyConfig_InitIsolatedConfig(&cfg);
    cfg.site_import = 0;
    cfg.install_signal_handlers = 0;
    cfg.write_bytecode = 0;
    cfg.user_site_directory = 0;
    st = PyConfig_SetString(&cfg, &cfg.program_name, L"kforge-sim");
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st)) {
        py_failed = true;
        return kf_err_set(err, KF_INTERNAL, "starting the embedded Python failed: %s",
                          st.err_msg ? st.err_msg : "unknown error");
    }
    /* Debian's NumPy lives in dist-packages (site is disabled). */
    path = PySys_GetObject("path");
    p = PyUnicode_FromString("/usr/lib/python3/dist-packages");
    if (path && p)
        PyList_Append(path, p);
    Py_XDECREF(p);
    if (nki_modules_install() < 0 || sim_load_init() < 0) {
        PyErr_Print();
        py_failed = true;
        return kf_err_set(err, KF_INTERNAL, "installing the nki modules failed");
    }
    py_ready = true;
    return KF_OK;
}

void sim_run_shutdown(void)
{
    if (py_ready) {
        Py_FinalizeEx();
        py_ready = false;
    }
}

/* ===== errors ===== */

static void set_err(sim_error *serr, sim_error_code code, const char *file, int line,
                    const char *func, const char *values)
{
    if (serr->code != SIM_E_NONE)
        return;
    serr->code = code;
    snprintf(serr->file, sizeof(serr->file), "%s", file ? file : "");
    serr->line = line;
    snprintf(serr->func, sizeof(serr->func), "%s", func ? func : "");
    snprintf(serr->values, sizeof(serr->values), "%s", values ? values : "");
}

/* The files that are the user's code: the kernel file, and the files under
 * its folder and the import roots (sim_run_opts.paths), as Python names
 * them (the sys.path entry, then the file). */
typedef struct user_files {
    const char *kernel;
    const char *roots[SIM_RUN_MAX_PATHS + 1];
    char       *abs[SIM_RUN_MAX_PATHS + 1];   /* os.path.abspath of each (Python's module paths) */
    size_t      n_roots;
} user_files;

static void user_root_add(user_files *u, const char *root)
{
    PyObject *m = PyImport_ImportModule("os.path");
    PyObject *a = m ? PyObject_CallMethod(m, "abspath", "s", root) : NULL;
    const char *s = a && PyUnicode_Check(a) ? PyUnicode_AsUTF8(a) : NULL;
    u->roots[u->n_roots] = root;
    u->abs[u->n_roots++] = kf_strdup(s ? s : root);
    Py_XDECREF(a);
    Py_XDECREF(m);
    PyErr_Clear();
}

static bool under(const char *fn, const char *root)
{
    size_t l = strlen(root);
    while (l > 1 && root[l - 1] == '/')
        l--;
    return l && strncmp(fn, root, l) == 0 && fn[l] == '/';
}

static bool is_user_file(const user_files *u, const char *fn)
{
    if (!fn)
        return false;
    if (strcmp(fn, u->kernel) == 0)
        return true;
    for (size_t i = 0; i < u->n_roots; i++)
        if (under(fn, u->roots[i]) || under(fn, u->abs[i]))
            return true;
    return false;
}

static bool msg_has_relative_import(const char *values)
{
    return strncmp(values, "ImportError:", 12) == 0 && strstr(values, "relative import") != NULL;
}

/* Turn the pending Python exception into a sim_error (unless an NKI rule
 * error already filled it): the innermost frame of the user's code (the
 * kernel file or a module imported from its folder or an import root)
 * gives the file and line, the exception type and message the values.
 * When that is not the kernel file, the values also say which kernel line
 * led there.  A SyntaxError in an imported user module is SIM_E_SYNTAX at
 * that module's line. */
/* NumPy's "Cannot interpret 'bfloat16' as a data type": a kernel handed an
 * NKI dtype NumPy has no type for to NumPy (np.dtype(nl.bfloat16),
 * np.zeros(..., dtype=nl.bfloat16)).  NumPy replaces whatever the dtype
 * object raises with this TypeError, so it is recognised here and told as
 * the unsupported feature it is; false for any other error. */
static bool numpy_dtype_gap(const char *type_name, const char *msg, char *out, size_t cap)
{
    static const char head[] = "Cannot interpret '", tail[] = "' as a data type";
    const char *name, *end;
    char nm[32];
    int dt;

    if (!msg || strcmp(type_name, "TypeError") != 0 || strncmp(msg, head, sizeof(head) - 1) != 0)
        return false;
    name = msg + sizeof(head) - 1;
    end = strchr(name, '\'');
    if (!end || strcmp(end, tail) != 0 || (size_t)(end - name) >= sizeof(nm))
        return false;
    snprintf(nm, sizeof(nm), "%.*s", (int)(end - name), name);
    dt = sim_dtype_from_name(nm);
    if (dt < 0 || nki_dtype_has_numpy((sim_dtype)dt))
        return false;
    snprintf(out, cap,
             "NumPy cannot use nl.%s as a dtype (np.dtype(nl.%s), dtype=nl.%s in a NumPy call): this NumPy has no "
             "%s type, which comes with the ml_dtypes package the simulator does not ship; pass nl.%s where an NKI "
             "call takes a dtype and use nl.%s.itemsize for its size",
             nm, nm, nm, nm, nm, nm);
    return true;
}

static void py_error(sim_error *serr, const user_files *u, sim_error_code code)
{
    PyObject *type, *value, *tb;
    char values[512] = "", file[256] = "", func[64] = "", from[300] = "";
    int line = 0;

    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (serr->code == SIM_E_NONE) {
        PyObject *s = value ? PyObject_Str(value) : NULL;
        const char *tn = type ? ((PyTypeObject *)type)->tp_name : "Exception";
        const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
        int kline = 0;
        if (code == SIM_E_PYTHON && numpy_dtype_gap(tn, msg, values, sizeof(values)))
            code = SIM_E_UNSUPPORTED_API;
        else
            snprintf(values, sizeof(values), "%s: %s", tn, msg ? msg : "");
        Py_XDECREF(s);
        PyErr_Clear();
        for (PyTracebackObject *t = (PyTracebackObject *)tb; t; t = t->tb_next) {
            PyCodeObject *co = PyFrame_GetCode(t->tb_frame);
            const char *fn = PyUnicode_AsUTF8(co->co_filename);
            if (is_user_file(u, fn)) {
                const char *nm = PyUnicode_AsUTF8(co->co_name);
                snprintf(file, sizeof(file), "%s", fn);
                line = PyFrame_GetLineNumber(t->tb_frame);
                snprintf(func, sizeof(func), "%s", nm ? nm : "");
                if (strcmp(fn, u->kernel) == 0)
                    kline = line;
            }
            Py_DECREF(co);
        }
        PyErr_Clear();
        if (value && PyErr_GivenExceptionMatches(type, PyExc_SyntaxError)) {
            PyObject *ln = PyObject_GetAttrString(value, "lineno");
            PyObject *fo = PyObject_GetAttrString(value, "filename");
            const char *sf = fo && PyUnicode_Check(fo) ? PyUnicode_AsUTF8(fo) : NULL;
            if (code == SIM_E_SYNTAX || is_user_file(u, sf)) {
                code = SIM_E_SYNTAX;
                snprintf(file, sizeof(file), "%s", code == SIM_E_SYNTAX && sf && is_user_file(u, sf) ? sf : u->kernel);
                line = ln && PyLong_Check(ln) ? (int)PyLong_AsLong(ln) : 0;
            }
            Py_XDECREF(ln);
            Py_XDECREF(fo);
            PyErr_Clear();
        }
        if (msg_has_relative_import(values))
            snprintf(from, sizeof(from), "%s", " (a relative import needs the folder holding the top "
                     "package as an import root: kforge-sim --path DIR)");
        else if (file[0] && strcmp(file, u->kernel) != 0 && kline > 0)
            snprintf(from, sizeof(from), " (reached from %s:%d)", u->kernel, kline);
        if (from[0]) {
            size_t vl = strlen(values);
            snprintf(values + vl, sizeof(values) - vl, "%s", from);
        }
        set_err(serr, code, file[0] ? file : u->kernel, line, func, values);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Drop the modules the kernel imported from its own folder (roots[0] when
 * `own_dir`) and, with their packages, from the import roots, so the next
 * run (another kernel with a helper of the same name) imports its own.
 * Library modules (NumPy, ...) stay: extension modules cannot be imported
 * twice. */
static void forget_kernel_modules(const user_files *u, bool own_dir)
{
    PyObject *mods = PyImport_GetModuleDict(), *keys;

    if (!u->n_roots || !(keys = PyDict_Keys(mods))) {
        PyErr_Clear();
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *m = PyDict_GetItem(mods, k);
        PyObject *file = m && PyModule_Check(m) ? PyObject_GetAttrString(m, "__file__") : NULL;
        const char *f = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
        for (size_t r = 0; f && r < u->n_roots; r++) {
            const char *root = under(f, u->abs[r]) ? u->abs[r] : u->roots[r];
            size_t dl = strlen(root);
            if (!under(f, root))
                continue;
            if (r == 0 && own_dir && strchr(f + dl + 1, '/'))
                continue;
            PyDict_DelItem(mods, k);
            break;
        }
        Py_XDECREF(file);
        PyErr_Clear();
    }
    Py_DECREF(keys);
}

static int set_str(PyObject *dict, const char *key, const char *val)
{
    PyObject *v = PyUnicode_FromString(val);
    int rc = v ? PyDict_SetItemString(dict, key, v) : -1;
    Py_XDECREF(v);
    return rc;
}

static kf_code fail_out(const sim_error *serr, kf_err *err)
{
    char buf[1024];
    sim_error_format(serr, buf, sizeof(buf));
    return kf_err_set(err, KF_INVALID, "%s", buf);
}

/* ===== inputs and outputs ===== */

static PyObject *input_tensor(nki_ctx *c, const sim_array *a)
{
    simc_store *st;
    simc_view v;
    nki_tensor *t;
    int64_t n = sim_array_elems(a), stride = 1;

    if (a->ndim < 0 || a->ndim > SIMC_MAX_DIMS || (unsigned)a->dtype >= SIM_DT__COUNT)
        return NULL;
    st = simc_store_new(SIM_MEM_HBM, a->dtype, 1, n, false);
    st->data = a->data;
    st->borrowed = true;
    st->alloc_id = sim_record_alloc(c->rec, SIM_MEM_HBM, a->dtype, 1,
                                    (uint64_t)n * sim_dtype_size(a->dtype), a->name);
    c->rec->allocs[st->alloc_id].is_input = 1;
    memset(&v, 0, sizeof(v));
    v.dtype = a->dtype;
    v.ndim = a->ndim;
    for (int d = a->ndim - 1; d >= 0; d--) {
        v.shape[d] = a->shape[d];
        v.strides[d] = stride;
        stride *= a->shape[d];
    }
    t = nki_tensor_view(st, &v, -1);
    simc_store_unref(st);
    return (PyObject *)t;
}

static int output_array(nki_ctx *c, PyObject *o, size_t idx, bool steal, sim_array *out)
{
    nki_tensor *t;
    const simc_view *v;
    unsigned es;
    int64_t n, i = 0, ix[SIMC_MAX_DIMS] = { 0 };

    if (!nki_tensor_check(o) || ((nki_tensor *)o)->v.st->mem != SIM_MEM_HBM) {
        char vals[160];
        snprintf(vals, sizeof(vals), "output %zu is %s", idx,
                 nki_tensor_check(o) ? (((nki_tensor *)o)->v.st->mem == SIM_MEM_SBUF
                                            ? "an SBUF tile" : "a PSUM tile")
                                     : Py_TYPE(o)->tp_name);
        set_err(c->serr, SIM_E_OUTPUT, "", 0, "", vals);
        return -1;
    }
    t = (nki_tensor *)o;
    v = &t->v;
    es = sim_dtype_size(v->dtype);
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", c->rec->strs[c->rec->allocs[v->st->alloc_id].name]);
    if (!out->name[0])
        snprintf(out->name, sizeof(out->name), "out%zu", idx);
    out->dtype = v->dtype;
    out->ndim = v->ndim;
    n = simc_view_elems(v);
    for (int d = 0; d < v->ndim; d++)
        out->shape[d] = v->shape[d];
    simc_settle(v->st);
    if (steal && v->offset == 0 && n == v->st->nelem && n > 0 && simc_view_contiguous(v) &&
        !v->st->borrowed && v->st->data) {
        /* The last use of the output's storage: hand it over (no copy, so
         * peak memory stays near the bytes of the HBM tensors). */
        out->data = v->st->data;
        v->st->data = NULL;
        c->rec->allocs[v->st->alloc_id].is_output = 1;
        return 0;
    }
    out->data = kf_malloc((size_t)(n ? n : 1) * es);
    if (simc_view_contiguous(v) && simc_view_in_store(v)) {
        memcpy(out->data, (const uint8_t *)v->st->data + v->offset * es, (size_t)n * es);
        i = n;
    }
    for (; i < n; i++) {
        int64_t f = v->offset;
        for (int d = 0; d < v->ndim; d++)
            f += ix[d] * v->strides[d];
        memcpy((uint8_t *)out->data + i * es, (const uint8_t *)v->st->data + f * es, es);
        for (int d = v->ndim - 1; d >= 0; d--) {
            if (++ix[d] < v->shape[d])
                break;
            ix[d] = 0;
        }
    }
    c->rec->allocs[v->st->alloc_id].is_output = 1;
    return 0;
}

/* True when output i's storage appears in no other output (it can be
 * handed over instead of copied). */
static bool store_once(PyObject *items, Py_ssize_t i)
{
    PyObject *o = PyTuple_GET_ITEM(items, i);
    if (!nki_tensor_check(o))
        return false;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(items); j++) {
        PyObject *p = PyTuple_GET_ITEM(items, j);
        if (j != i && nki_tensor_check(p) && ((nki_tensor *)p)->v.st == ((nki_tensor *)o)->v.st)
            return false;
    }
    return true;
}

/* Check the positional arguments and the keyword arguments together
 * against the entry's signature (SIM_E_ARGS, at the entry's definition):
 * every parameter without a default is given exactly once, positionally or
 * by name in kwargs, and nothing is given that the entry does not take. */
static int check_args(nki_ctx *c, PyObject *func, size_t n_pos, PyObject *kwargs, const char *entry)
{
    PyObject *code = PyObject_GetAttrString(func, "__code__");
    PyObject *defs = PyObject_GetAttrString(func, "__defaults__");
    PyObject *kwdefs = PyObject_GetAttrString(func, "__kwdefaults__");
    PyObject *names = NULL, *o;
    long argc, kwonly = 0, ndef = 0, flags;
    char vals[512] = "";
    int rc = 0, n = 0;

    PyErr_Clear();
    if (!code)
        goto out;
    o = PyObject_GetAttrString(code, "co_argcount");
    argc = o ? PyLong_AsLong(o) : -1;
    Py_XDECREF(o);
    o = PyObject_GetAttrString(code, "co_kwonlyargcount");
    kwonly = o ? PyLong_AsLong(o) : 0;
    Py_XDECREF(o);
    o = PyObject_GetAttrString(code, "co_flags");
    flags = o ? PyLong_AsLong(o) : 0;
    Py_XDECREF(o);
    names = PyObject_GetAttrString(code, "co_varnames");
    PyErr_Clear();
    if (argc < 0 || kwonly < 0 || !names || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) < argc + kwonly)
        goto out;
    if (defs && PyTuple_Check(defs))
        ndef = (long)PyTuple_GET_SIZE(defs);
    if (!(flags & 0x04) && (long)n_pos > argc) {
        snprintf(vals, sizeof(vals), "%s takes %ld positional arguments, %zu given", entry, argc, n_pos);
        goto fail;
    }
    for (long i = 0; i < argc + kwonly; i++) {
        PyObject *nm = PyTuple_GET_ITEM(names, i);
        const char *s = PyUnicode_AsUTF8(nm);
        int in_kw = kwargs ? PyDict_Contains(kwargs, nm) : 0;
        bool has_def = i < argc ? i >= argc - ndef
                                : (kwdefs && PyDict_Check(kwdefs) && PyDict_Contains(kwdefs, nm) == 1);
        if (i < (long)n_pos && in_kw == 1) {
            snprintf(vals, sizeof(vals), "%s's parameter '%s' is given twice: as positional argument %ld "
                     "and in kwargs", entry, s ? s : "?", i + 1);
            goto fail;
        }
        if ((i >= (long)n_pos || i >= argc) && in_kw != 1 && !has_def) {
            int w = snprintf(vals + n, sizeof(vals) - (size_t)n, "%s'%s'", n ? ", " : "", s ? s : "?");
            if (w > 0 && (size_t)n + (size_t)w < sizeof(vals))
                n += w;
        }
    }
    if (n) {
        char miss[512];
        snprintf(miss, sizeof(miss), "%s", vals);
        snprintf(vals, sizeof(vals), "%.60s is missing %.240s (%zu positional arguments given; give the "
                 "others in order with --input/--arg, or by name in kwargs)", entry, miss, n_pos);
        goto fail;
    }
    if (kwargs && !(flags & 0x08)) {
        PyObject *k;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &k, NULL)) {
            bool known = false;
            for (long i = 0; i < argc + kwonly && !known; i++)
                known = PyUnicode_Compare(PyTuple_GET_ITEM(names, i), k) == 0;
            if (!known) {
                const char *s = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
                snprintf(vals, sizeof(vals), "kwargs gives '%s', which %s does not take", s ? s : "?", entry);
                goto fail;
            }
        }
    }
    goto out;
fail: {
    /* at the entry's definition (its first decorator's line, as Python counts) */
    PyObject *fn = PyObject_GetAttrString(code, "co_filename");
    PyObject *ln = PyObject_GetAttrString(code, "co_firstlineno");
    const char *file = fn && PyUnicode_Check(fn) ? PyUnicode_AsUTF8(fn) : NULL;
    set_err(c->serr, SIM_E_ARGS, file ? file : "", ln && PyLong_Check(ln) ? (int)PyLong_AsLong(ln) : 0, entry,
            vals);
    Py_XDECREF(fn);
    Py_XDECREF(ln);
    rc = -1;
}
out:
    PyErr_Clear();
    Py_XDECREF(names);
    Py_XDECREF(code);
    Py_XDECREF(defs);
    Py_XDECREF(kwdefs);
    return rc;
}

static PyObject *kwargs_from_json(const char *json)
{
    PyObject *r;
    if (!json || !json[0])
        return PyDict_New();
    r = sim_load_value(json);
    if (r && !PyDict_Check(r)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "kernel keyword arguments must be a JSON object");
        return NULL;
    }
    return r;
}

static void ctx_release(nki_ctx *c)
{
    for (size_t i = 0; i < c->n_shared; i++) {
        simc_store *st = c->shared[i];
        if (st->refcnt == 1)
            nki_store_release(st);
        simc_store_unref(st);
    }
    free(c->shared);
    for (int i = 0; i < 8; i++)
        free(c->scratch[i]);
    free(c->sbuf.iv);
    free(c->psum.iv);
}

/* The package of a kernel file under an import root: its folders there,
 * dotted ("" when it is under none, or directly in the root). */
static void kernel_package(const char *filename, const char *const *paths, size_t n, char *pkg, size_t len)
{
    char *kf = realpath(filename, NULL);
    pkg[0] = 0;
    for (size_t i = 0; kf && i < n && !pkg[0]; i++) {
        char *rp = realpath(paths[i], NULL);
        size_t rl = rp ? strlen(rp) : 0;
        if (rp && strncmp(kf, rp, rl) == 0 && kf[rl] == '/') {
            const char *rel = kf + rl + 1, *last = strrchr(rel, '/');
            if (last && (size_t)(last - rel) < len) {
                memcpy(pkg, rel, (size_t)(last - rel));
                pkg[last - rel] = 0;
                for (char *q = pkg; *q; q++)
                    if (*q == '/')
                        *q = '.';
            }
        }
        free(rp);
    }
    free(kf);
}

kf_code sim_run_source(const sim_run_opts *o, const char *source, const char *filename,
                       const sim_array *inputs, size_t n_inputs, sim_array **outputs,
                       size_t *n_outputs, sim_record *rec, sim_error *serr, kf_err *err)
{
    const simc_target *tgt;
    nki_ctx ctx;
    PyObject *code = NULL, *globals = NULL, *args = NULL, *kwargs = NULL, *res = NULL;
    PyObject *entry, *func, *items = NULL, *sys_path = NULL, *dir = NULL;
    PyObject *roots[SIM_RUN_MAX_PATHS] = { NULL };
    size_t n_roots = 0, next_in = 0, n_pos;
    user_files uf;
    char pkg[256] = "";
    kf_code rc = KF_OK;
    sim_error local_serr;
    int g[3] = { 1, 1, 1 }, gnd = 0;
    sim_array *outs = NULL;
    size_t nouts = 0;

    if (!serr)
        serr = &local_serr;
    sim_error_clear(serr);
    if (outputs)
        *outputs = NULL;
    if (n_outputs)
        *n_outputs = 0;
    if (!o || !source || !filename || !o->entry || !rec || (n_inputs && !inputs) || (o->n_args && !o->args))
        return kf_err_set(err, KF_INVALID, "sim_run: missing kernel, entry or record");
    n_pos = o->n_args ? o->n_args : n_inputs;
    for (size_t i = 0; i < o->n_args; i++)
        next_in += !o->args[i].json;
    if (o->n_args && next_in != n_inputs)
        return kf_err_set(err, KF_INVALID, "sim_run: %zu argument slots take arrays but %zu inputs were given",
                          next_in, n_inputs);
    next_in = 0;
    memset(&uf, 0, sizeof(uf));
    uf.kernel = filename;
    while (o->paths && o->paths[n_roots]) {
        if (n_roots == SIM_RUN_MAX_PATHS)
            return kf_err_set(err, KF_INVALID, "at most %d import paths", SIM_RUN_MAX_PATHS);
        n_roots++;
    }
    tgt = simc_target_get(o->target ? o->target : "trn2");
    if (!tgt)
        return kf_err_set(err, KF_INVALID, "unknown target '%s' (use trn1, inf2, trn2 or trn3)",
                          o->target);
    rc = py_init(err);
    if (rc != KF_OK)
        return rc;
    for (int i = 0; i < 3 && o->grid[i] > 0; i++) {
        g[i] = o->grid[i];
        gnd = i + 1;
    }
    if ((int64_t)g[0] * g[1] * g[2] > SIM_MAX_PROGRAMS) {
        char vals[128];
        snprintf(vals, sizeof(vals), "an SPMD grid of %lld programs, at most %d",
                 (long long)g[0] * g[1] * g[2], SIM_MAX_PROGRAMS);
        set_err(serr, SIM_E_LIMIT, filename, 0, o->entry, vals);
        return fail_out(serr, err);
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.rec = rec;
    ctx.serr = serr;
    ctx.tgt = tgt;
    ctx.numerics = o->numerics;
    if (o->numerics)
        (void)simn_set_threads(o->threads);
    ctx.sbuf.capacity = (uint64_t)tgt->sbuf_bytes * NKI_HELD_FACTOR;
    ctx.psum.capacity = (uint64_t)tgt->psum_bytes * NKI_HELD_FACTOR;
    ctx.grid_ndim = gnd;
    memcpy(ctx.grid, g, sizeof(g));
    rec->spmd_programs = (uint32_t)(g[0] * g[1] * g[2]);
    if (!rec->target[0])
        snprintf(rec->target, sizeof(rec->target), "%s", tgt->name);
    nki_cur = &ctx;
    if (nki_modules_configure(tgt) < 0) {
        PyErr_Clear();
        rc = kf_err_set(err, KF_INTERNAL, "configuring the nki modules failed");
        goto out;
    }

    /* The kernel's folder on sys.path for its own helper modules, then the
     * import roots before it; a kernel under a root is a module of the
     * package its folders name (relative imports). */
    {
        const char *slash = strrchr(filename, '/');
        sys_path = PySys_GetObject("path");
        Py_XINCREF(sys_path);
        dir = PyUnicode_FromStringAndSize(filename, slash ? slash - filename : 0);
        if (sys_path && dir && slash)
            PyList_Insert(sys_path, 0, dir);
        if (slash && PyUnicode_AsUTF8(dir))
            user_root_add(&uf, PyUnicode_AsUTF8(dir));
        for (size_t i = n_roots; i-- > 0;) {
            roots[i] = PyUnicode_FromString(o->paths[i]);
            if (sys_path && roots[i])
                PyList_Insert(sys_path, 0, roots[i]);
            user_root_add(&uf, o->paths[i]);
        }
        PyErr_Clear();
        kernel_package(filename, o->paths, n_roots, pkg, sizeof(pkg));
    }
    if (sim_load_stubs(!o->no_stubs) < 0)
        PyErr_Clear();
    code = Py_CompileString(source, filename, Py_file_input);
    if (!code) {
        py_error(serr, &uf, SIM_E_SYNTAX);
        rc = fail_out(serr, err);
        goto out;
    }
    globals = PyDict_New();
    if (!globals || set_str(globals, "__name__", "__kernel__") < 0 ||
        set_str(globals, "__file__", filename) < 0 || (pkg[0] && set_str(globals, "__package__", pkg) < 0) ||
        PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) < 0) {
        PyErr_Clear();
        rc = kf_err_set(err, KF_INTERNAL, "setting up the kernel module failed");
        goto out;
    }
    res = PyEval_EvalCode(code, globals, globals);
    if (!res) {
        py_error(serr, &uf, SIM_E_PYTHON);
        rc = fail_out(serr, err);
        goto out;
    }
    Py_CLEAR(res);
    entry = PyDict_GetItemString(globals, o->entry);
    func = nki_kernel_func(entry);
    if (!func || !PyCallable_Check(func)) {
        char vals[160];
        snprintf(vals, sizeof(vals), "no function '%s' in %s", o->entry, filename);
        set_err(serr, SIM_E_ENTRY, filename, 0, "", vals);
        rc = fail_out(serr, err);
        goto out;
    }
    kwargs = kwargs_from_json(o->kwargs_json);
    if (!kwargs) {
        py_error(serr, &uf, SIM_E_ARGS);
        rc = fail_out(serr, err);
        goto out;
    }
    if (check_args(&ctx, func, n_pos, kwargs, o->entry) < 0) {
        rc = fail_out(serr, err);
        goto out;
    }
    args = PyTuple_New((Py_ssize_t)n_pos);
    for (size_t i = 0; args && i < n_pos; i++) {
        PyObject *t;
        const char *json = o->n_args ? o->args[i].json : NULL;
        if (json) {
            t = sim_load_value(json);
            if (!t) {
                char vals[300];
                PyErr_Clear();
                snprintf(vals, sizeof(vals), "argument %zu ('%s') is not a JSON value: %.200s", i + 1,
                         o->args[i].name ? o->args[i].name : "", json);
                set_err(serr, SIM_E_ARGS, "", 0, o->entry, vals);
                rc = fail_out(serr, err);
                goto out;
            }
            PyTuple_SET_ITEM(args, (Py_ssize_t)i, t);
            continue;
        }
        /* The shape is checked before the store trusts its element count. */
        rc = sim_array_check(&inputs[next_in], SIM_ARRAY_MAX_BYTES, NULL, err);
        if (rc)
            goto out;
        t = input_tensor(&ctx, &inputs[next_in]);
        if (!t) {
            rc = kf_err_set(err, KF_INVALID, "input %zu has a bad dtype or rank", next_in);
            goto out;
        }
        next_in++;
        PyTuple_SET_ITEM(args, (Py_ssize_t)i, t);
    }
    if (!args) {
        py_error(serr, &uf, SIM_E_ARGS);
        rc = fail_out(serr, err);
        goto out;
    }
    for (long i = 0; i < (long)g[0] * g[1] * g[2]; i++) {
        ctx.pid[0] = (int)(i / ((long)g[1] * g[2]));
        ctx.pid[1] = (int)((i / g[2]) % g[1]);
        ctx.pid[2] = (int)(i % g[2]);
        ctx.spmd_index = (uint32_t)i;
        ctx.shared_cursor = 0;
        Py_XDECREF(res);
        res = PyObject_Call(func, args, kwargs);
        if (!res) {
            py_error(serr, &uf, SIM_E_PYTHON);
            rc = fail_out(serr, err);
            goto out;
        }
    }
    if (serr->code != SIM_E_NONE) {
        /* A broken NeuronCore rule is a compile error even when the kernel
         * caught the exception that reported it. */
        rc = fail_out(serr, err);
        goto out;
    }
    /* Capacity as the compiler decides it: by liveness over the program. */
    if (sim_live_plan(rec, tgt->sbuf_bytes, tgt->psum_bytes, NULL, serr) < 0) {
        rc = fail_out(serr, err);
        goto out;
    }
    if (!res || res == Py_None) {
        set_err(serr, SIM_E_OUTPUT, filename, 0, o->entry, "the kernel returned nothing");
        rc = fail_out(serr, err);
        goto out;
    }
    items = (PyTuple_Check(res) || PyList_Check(res)) ? PySequence_Tuple(res) : PyTuple_Pack(1, res);
    if (!items) {
        PyErr_Clear();
        rc = kf_err_set(err, KF_INTERNAL, "reading the kernel's outputs failed");
        goto out;
    }
    nouts = (size_t)PyTuple_GET_SIZE(items);
    outs = kf_calloc(nouts ? nouts : 1, sizeof(*outs));
    for (size_t i = 0; i < nouts; i++)
        if (output_array(&ctx, PyTuple_GET_ITEM(items, (Py_ssize_t)i), i,
                         store_once(items, (Py_ssize_t)i), &outs[i]) < 0) {
            snprintf(serr->file, sizeof(serr->file), "%s", filename);
            rc = fail_out(serr, err);
            goto out;
        }
    if (outputs) {
        *outputs = outs;
        outs = NULL;
    }
    if (n_outputs)
        *n_outputs = nouts;
out:
    if (outs)
        for (size_t i = 0; i < nouts; i++)
            sim_array_release(&outs[i]);
    free(outs);
    for (size_t i = 0; i < n_roots; i++)
        if (roots[i] && sys_path && PyList_Check(sys_path) && PyList_GET_SIZE(sys_path) > 0 &&
            PyList_GET_ITEM(sys_path, 0) == roots[i])
            PySequence_DelItem(sys_path, 0);
    if (dir && sys_path && PyList_Check(sys_path) && PyList_GET_SIZE(sys_path) > 0 &&
        PyList_GET_ITEM(sys_path, 0) == dir)
        PySequence_DelItem(sys_path, 0);
    forget_kernel_modules(&uf, dir && PyUnicode_GET_LENGTH(dir) > 0);
    sim_load_reset();
    for (size_t i = 0; i < uf.n_roots; i++)
        free(uf.abs[i]);
    for (size_t i = 0; i < n_roots; i++)
        Py_XDECREF(roots[i]);
    Py_XDECREF(dir);
    Py_XDECREF(sys_path);
    Py_XDECREF(items);
    Py_XDECREF(res);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    if (globals)
        PyDict_Clear(globals);
    Py_XDECREF(globals);
    Py_XDECREF(code);
    PyErr_Clear();
    PyGC_Collect();
    PyErr_Clear();
    ctx_release(&ctx);
    nki_mmq_reset();
    simc_pool_drain();
    simn_stop_threads();   /* no thread outlives the run (the caller may fork next) */
    nki_cur = NULL;
    return rc;
}

kf_code sim_run_kernel(const sim_run_opts *o, const sim_array *inputs, size_t n_inputs,
                       sim_array **outputs, size_t *n_outputs, sim_record *rec, sim_error *serr,
                       kf_err *err)
{
    FILE *f;
    char *src;
    long len;
    kf_code rc;

    if (!o || !o->source_path)
        return kf_err_set(err, KF_INVALID, "sim_run: no kernel file given");
    f = fopen(o->source_path, "rb");
    if (!f)
        return kf_err_set(err, KF_IO, "cannot open kernel file %s: check the path", o->source_path);
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || len > (16L << 20) ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return kf_err_set(err, KF_INVALID, "kernel file %s is unreadable or larger than 16 MiB",
                          o->source_path);
    }
    src = kf_malloc((size_t)len + 1);
    if (fread(src, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(src);
        return kf_err_set(err, KF_IO, "reading kernel file %s failed", o->source_path);
    }
    fclose(f);
    src[len] = 0;
    rc = sim_run_source(o, src, o->source_path, inputs, n_inputs, outputs, n_outputs, rec, serr,
                        err);
    free(src);
    return rc;
}
