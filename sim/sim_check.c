#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sim_check.h"
#include "kf_alloc.h"
#include "sim_npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tolerances and comparison ----------------------------------------- */

sim_check_tol sim_check_default_tol(sim_dtype dt)
{
    sim_check_tol t = { 0, 0 };
    switch (dt) {
    case SIM_DT_FLOAT32: t.rtol = t.atol = 1e-4; break;
    case SIM_DT_TFLOAT32: t.rtol = t.atol = 1e-3; break;
    case SIM_DT_FLOAT16: t.rtol = t.atol = 5e-3; break;
    case SIM_DT_BFLOAT16: t.rtol = t.atol = 2e-2; break;
    case SIM_DT_FLOAT8_E4M3: case SIM_DT_FLOAT8_E4M3FN: t.rtol = t.atol = 1.25e-1; break;
    case SIM_DT_FLOAT8_E5M2: t.rtol = t.atol = 2.5e-1; break;
    default: break;   /* integers and bool: exact */
    }
    return t;
}

static uint64_t elems(const sim_array *a)
{
    uint64_t n = 1;
    for (int i = 0; i < a->ndim; i++)
        n *= (uint64_t)a->shape[i];
    return n;
}

void sim_check_format_shape(const sim_array *a, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < a->ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, a->ndim == 1 ? ",)" : ")");
}

void sim_check_format_index(const sim_array *a, uint64_t i, char *buf, size_t len)
{
    uint64_t idx[8] = { 0 };
    size_t o;
    for (int d = a->ndim - 1; d >= 0; d--) {
        uint64_t n = a->shape[d] > 0 ? (uint64_t)a->shape[d] : 1;
        idx[d] = i % n;
        i /= n;
    }
    o = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < a->ndim && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%llu", d ? ", " : "", (unsigned long long)idx[d]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

/* One element of sim_check_compare. */
static void compare_one(sim_check_cmp *c, sim_check_tol tol, uint64_t i, double g, double w,
                        double *worst_excess)
{
    double excess;
    if (isnan(g))
        c->got_nan++;
    else if (isinf(g))
        c->got_inf++;
    if (isnan(w)) {
        excess = isnan(g) ? -1 : INFINITY;
    } else if (isinf(w)) {
        excess = g == w ? -1 : INFINITY;
    } else if (!isfinite(g)) {
        excess = INFINITY;
    } else {
        double d = fabs(g - w);
        if (d > c->max_abs)
            c->max_abs = d;
        if (w != 0 && d / fabs(w) > c->max_rel)
            c->max_rel = d / fabs(w);
        excess = d - (tol.atol + tol.rtol * fabs(w));
    }
    if (excess > 0)
        c->bad++;
    if (excess > *worst_excess) {
        *worst_excess = excess;
        c->worst = i;
        c->worst_got = g;
        c->worst_want = w;
    }
}

void sim_check_compare(const sim_array *got, const sim_array *want, sim_check_tol tol,
                       sim_check_cmp *c)
{
    char gs[96], ws[96], at[96];
    double worst_excess = -INFINITY;
    int same = got->ndim == want->ndim;

    memset(c, 0, sizeof(*c));
    for (int i = 0; same && i < got->ndim; i++)
        same = got->shape[i] == want->shape[i];
    if (!same) {
        sim_check_format_shape(got, gs, sizeof(gs));
        sim_check_format_shape(want, ws, sizeof(ws));
        snprintf(c->msg, sizeof(c->msg), "shape %s differs from the reference's %s", gs, ws);
        return;
    }
    c->count = elems(got);
    if (sim_npy_dtype_is_float(got->dtype) && sim_npy_dtype_is_float(want->dtype)) {
        /* blocks decoded by the bulk codec: every float dtype is exact in
         * float, so the values compared are the element codec's */
        float gb[2048], wb[2048];
        for (uint64_t i0 = 0; i0 < c->count; i0 += 2048) {
            uint64_t n = c->count - i0 < 2048 ? c->count - i0 : 2048;
            sim_npy_load_f32(got->dtype, got->data, i0, gb, n);
            sim_npy_load_f32(want->dtype, want->data, i0, wb, n);
            for (uint64_t k = 0; k < n; k++)
                compare_one(c, tol, i0 + k, gb[k], wb[k], &worst_excess);
        }
    } else {
        for (uint64_t i = 0; i < c->count; i++)
            compare_one(c, tol, i, sim_npy_load_elem(got->dtype, got->data, i),
                        sim_npy_load_elem(want->dtype, want->data, i), &worst_excess);
    }
    c->pass = c->bad == 0;
    sim_check_format_index(got, c->worst, at, sizeof(at));
    if (c->pass) {
        snprintf(c->msg, sizeof(c->msg), "ok: %llu elements within rtol=%g atol=%g (max abs err %.3g)",
                 (unsigned long long)c->count, tol.rtol, tol.atol, c->max_abs);
        return;
    }
    int o = snprintf(c->msg, sizeof(c->msg),
                     "%llu of %llu elements differ (rtol=%g atol=%g); worst at %s: got %.9g, want %.9g",
                     (unsigned long long)c->bad, (unsigned long long)c->count, tol.rtol, tol.atol, at,
                     c->worst_got, c->worst_want);
    if (c->got_nan && o > 0 && (size_t)o < sizeof(c->msg))
        o += snprintf(c->msg + o, sizeof(c->msg) - (size_t)o,
                      "; %llu NaN in the output (elements never written? new memory is NaN-filled)",
                      (unsigned long long)c->got_nan);
    if (c->got_inf && o > 0 && (size_t)o < sizeof(c->msg))
        snprintf(c->msg + o, sizeof(c->msg) - (size_t)o, "; %llu Inf in the output",
                 (unsigned long long)c->got_inf);
}

/* ---- the reference in embedded Python ---------------------------------- */

static const char ref_glue[] =
    "import importlib.util, inspect, json, traceback\n"
    "import numpy as np\n"
    "def _kf_conv(v):\n"
    "    if isinstance(v, list):\n"
    "        return tuple(_kf_conv(x) for x in v)\n"
    "    if isinstance(v, dict):\n"
    "        return {k: _kf_conv(x) for k, x in v.items()}\n"
    "    return v\n"
    "def _kf_ref(path, entry, arrays, kwargs_json, slots):\n"
    "    try:\n"
    "        spec = importlib.util.spec_from_file_location('_kforge_reference', path)\n"
    "        if spec is None:\n"
    "            return ('error', f'{path} is not a Python file')\n"
    "        mod = importlib.util.module_from_spec(spec)\n"
    "        spec.loader.exec_module(mod)\n"
    "        fn = getattr(mod, entry, None)\n"
    "        if not callable(fn):\n"
    "            return ('error', f'{path} defines no function {entry!r}; name it like the '\n"
    "                    f'kernel entry or pass --ref-entry')\n"
    "        kw = _kf_conv(json.loads(kwargs_json)) if kwargs_json else {}\n"
    "        try:\n"
    "            ps = inspect.signature(fn).parameters\n"
    "            if not any(p.kind == p.VAR_KEYWORD for p in ps.values()):\n"
    "                kw = {k: v for k, v in kw.items() if k in ps}\n"
    "        except (TypeError, ValueError):\n"
    "            pass\n"
    "        args = [np.frombuffer(b, dtype=dt).reshape(shape) for b, dt, shape in arrays]\n"
    "        if slots is not None:\n"
    "            it = iter(args)\n"
    "            args = [next(it) if j is None else _kf_conv(json.loads(j)) for j in slots]\n"
    "        res = fn(*args, **kw)\n"
    "        if not isinstance(res, (tuple, list)):\n"
    "            res = (res,)\n"
    "        out = []\n"
    "        for i, r in enumerate(res):\n"
    "            a = np.asarray(r)\n"
    "            if a.dtype.kind in 'biu':\n"
    "                if a.size and (a.min() < -2**31 or a.max() >= 2**31):\n"
    "                    return ('error', f'result {i} has integers outside int32')\n"
    "                out.append((np.ascontiguousarray(a, dtype=np.int32), 'i', a.shape))\n"
    "            elif a.dtype.kind == 'f':\n"
    "                out.append((np.ascontiguousarray(a, dtype=np.float32), 'f', a.shape))\n"
    "            else:\n"
    "                return ('error', f'result {i} has dtype {a.dtype}; return float or int arrays')\n"
    "            if a.ndim > 8:\n"
    "                return ('error', f'result {i} has {a.ndim} dimensions; at most 8')\n"
    "        return ('ok', out)\n"
    "    except BaseException:\n"
    "        tb = traceback.format_exc().strip().splitlines()\n"
    "        return ('error', ' | '.join(tb[-4:])[-900:])\n"
    "def _kf_takes(path, entry, names_json):\n"
    "    try:\n"
    "        spec = importlib.util.spec_from_file_location('_kforge_reference', path)\n"
    "        mod = importlib.util.module_from_spec(spec)\n"
    "        spec.loader.exec_module(mod)\n"
    "        names = json.loads(names_json)\n"
    "        ps = inspect.signature(getattr(mod, entry)).parameters\n"
    "        if any(p.kind == p.VAR_KEYWORD for p in ps.values()):\n"
    "            return bool(names)\n"
    "        return any(k in ps for k in names)\n"
    "    except BaseException:\n"
    "        return True\n";

static PyObject *glue_fn, *takes_fn;

static const char *np_dtype(sim_dtype dt)
{
    switch (dt) {
    case SIM_DT_INT32: return "<i4";
    case SIM_DT_UINT32: return "<u4";
    case SIM_DT_INT16: return "<i2";
    case SIM_DT_UINT16: return "<u2";
    case SIM_DT_INT8: return "i1";
    case SIM_DT_UINT8: return "u1";
    case SIM_DT_BOOL: return "?";
    default: return "<f4";   /* every float dtype reaches NumPy as float32 */
    }
}

static PyObject *input_tuple(const sim_array *a)
{
    uint64_t n = elems(a);
    PyObject *bytes, *shape, *t;
    /* one writable buffer NumPy wraps without a copy (the reference may
     * write to its arguments) */
    if (sim_npy_dtype_is_float(a->dtype) && a->dtype != SIM_DT_FLOAT32) {
        bytes = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(float)));
        if (bytes)
            sim_npy_load_f32(a->dtype, a->data, 0, (float *)(void *)PyByteArray_AS_STRING(bytes), n);
    } else {
        bytes = PyByteArray_FromStringAndSize(a->data, (Py_ssize_t)(n * sim_dtype_size(a->dtype)));
    }
    shape = PyTuple_New(a->ndim);
    for (int i = 0; i < a->ndim; i++)
        PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(a->shape[i]));
    t = Py_BuildValue("(NsN)", bytes, np_dtype(a->dtype), shape);
    return t;
}

void sim_check_arrays_free(sim_array *a, size_t n)
{
    if (!a)
        return;
    for (size_t i = 0; i < n; i++)
        free(a[i].data);
    free(a);
}

static kf_code py_error(kf_err *err, const char *what)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *m = s ? PyUnicode_AsUTF8(s) : NULL;
    kf_err_set(err, KF_INTERNAL, "%s: %s", what, m ? m : "unknown Python error");
    PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return KF_INTERNAL;
}

kf_code sim_check_reference(const char *path, const char *entry, const sim_array *inputs,
                            size_t n_inputs, const char *kwargs_json, sim_array **outs,
                            size_t *n_outs, kf_err *err)
{
    return sim_check_reference_args(path, entry, inputs, n_inputs, NULL, 0, kwargs_json, outs, n_outs, err);
}

kf_code sim_check_reference_args(const char *path, const char *entry, const sim_array *inputs,
                                 size_t n_inputs, const sim_run_arg *args, size_t n_args,
                                 const char *kwargs_json, sim_array **outs, size_t *n_outs, kf_err *err)
{
    PyGILState_STATE gs;
    PyObject *list = NULL, *res = NULL, *slots = NULL;
    kf_code rc = KF_OK;

    *outs = NULL;
    *n_outs = 0;
    if (!Py_IsInitialized())
        Py_InitializeEx(0);
    gs = PyGILState_Ensure();
    if (!glue_fn) {
        PyObject *g = PyDict_New();
        PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins());
        PyObject *r = PyRun_String(ref_glue, Py_file_input, g, g);
        if (!r) {
            rc = py_error(err, "cannot start the reference runner (is python3-numpy installed?)");
            Py_DECREF(g);
            goto out;
        }
        Py_DECREF(r);
        glue_fn = PyDict_GetItemString(g, "_kf_ref");
        Py_XINCREF(glue_fn);
        takes_fn = PyDict_GetItemString(g, "_kf_takes");
        Py_XINCREF(takes_fn);
        Py_DECREF(g);
    }
    list = PyList_New((Py_ssize_t)n_inputs);
    for (size_t i = 0; i < n_inputs; i++)
        PyList_SET_ITEM(list, (Py_ssize_t)i, input_tuple(&inputs[i]));
    if (n_args) {
        slots = PyList_New((Py_ssize_t)n_args);
        for (size_t i = 0; slots && i < n_args; i++) {
            PyObject *v = args[i].json ? PyUnicode_FromString(args[i].json) : Py_NewRef(Py_None);
            PyList_SET_ITEM(slots, (Py_ssize_t)i, v ? v : Py_NewRef(Py_None));
        }
    } else {
        slots = Py_NewRef(Py_None);
    }
    res = PyObject_CallFunction(glue_fn, "ssOsO", path, entry, list, kwargs_json ? kwargs_json : "",
                                slots ? slots : Py_None);
    if (!res) {
        rc = py_error(err, "reference");
        goto out;
    }
    const char *status = PyUnicode_AsUTF8(PyTuple_GetItem(res, 0));
    PyObject *payload = PyTuple_GetItem(res, 1);
    if (!status || strcmp(status, "ok") != 0) {
        const char *m = payload ? PyUnicode_AsUTF8(payload) : NULL;
        rc = kf_err_set(err, KF_INVALID, "reference %s:%s failed: %s", path, entry, m ? m : "?");
        PyErr_Clear();
        goto out;
    }
    /* the inputs' buffers are no longer needed: free them before the
     * outputs are copied out (a large reference's peak memory) */
    Py_CLEAR(list);
    Py_ssize_t n = PyList_Size(payload);
    sim_array *a = kf_calloc((size_t)n + 1, sizeof(*a));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GetItem(payload, i);
        PyObject *b = PyTuple_GetItem(t, 0), *shape = PyTuple_GetItem(t, 2);
        const char *kind = PyUnicode_AsUTF8(PyTuple_GetItem(t, 1));
        Py_buffer view;
        snprintf(a[i].name, sizeof(a[i].name), "ref%d", (int)i);
        a[i].dtype = kind && kind[0] == 'i' ? SIM_DT_INT32 : SIM_DT_FLOAT32;
        a[i].ndim = (int)PyTuple_Size(shape);
        for (int d = 0; d < a[i].ndim; d++)
            a[i].shape[d] = PyLong_AsLongLong(PyTuple_GetItem(shape, d));
        /* the array's own (C-contiguous) buffer, copied once */
        if (PyObject_GetBuffer(b, &view, PyBUF_C_CONTIGUOUS) != 0) {
            sim_check_arrays_free(a, (size_t)i);
            rc = py_error(err, "reference result");
            goto out;
        }
        a[i].data = kf_malloc((size_t)view.len + 1);
        memcpy(a[i].data, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    *outs = a;
    *n_outs = (size_t)n;
out:
    Py_XDECREF(list);
    Py_XDECREF(slots);
    Py_XDECREF(res);
    PyGILState_Release(gs);
    return rc;
}


bool sim_check_reference_takes(const char *path, const char *entry, const char *names_json)
{
    PyGILState_STATE gs;
    PyObject *res;
    bool takes = true;

    /* the glue is loaded by a first sim_check_reference() call */
    if (!Py_IsInitialized() || !takes_fn)
        return true;
    gs = PyGILState_Ensure();
    res = PyObject_CallFunction(takes_fn, "sss", path, entry, names_json ? names_json : "[]");
    if (res)
        takes = PyObject_IsTrue(res) != 0;
    else
        PyErr_Clear();
    Py_XDECREF(res);
    PyGILState_Release(gs);
    return takes;
}
