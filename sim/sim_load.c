/* sim_load — stubs for test-harness libraries and JSON argument values (see
 * sim_load.h).  The Python half is compiled under the file name
 * "<kforge-stubs>", which the error path skips to find the user's line. */
#include "sim_load.h"

#include <frameobject.h>
#include <stdio.h>
#include <string.h>

#include "nki_internal.h"
#include "sim_run.h"

#define STUB_FILE "<kforge-stubs>"

static PyObject *load_ns;     /* the helpers' globals */

/* _fail(name, how): SIM_E_UNSUPPORTED_API at the innermost frame that is
 * not the stubs' own code. */
static PyObject *stub_fail(PyObject *self, PyObject *args)
{
    const char *name, *how;
    char values[512], root[64];
    PyFrameObject *f = PyEval_GetFrame();
    sim_error *e = nki_cur ? nki_cur->serr : NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "ss", &name, &how))
        return NULL;
    snprintf(root, sizeof(root), "%.*s", (int)strcspn(name, "."), name);
    if (strcmp(name, "torch_neuronx.nki_jit") == 0)
        /* the old SDK's decorator: outputs are arguments the kernel writes
         * and it returns nothing; kforge-sim returns a kernel's outputs */
        snprintf(values, sizeof(values),
                 "%s %s: the old SDK's output-by-argument decorator is not simulated; to run the "
                 "kernel, decorate it with @nki.jit (from neuronxcc import nki), drop the output "
                 "parameter, allocate the output inside with nl.ndarray(shape, dtype=..., "
                 "buffer=nl.shared_hbm) and return it", name, how);
    else
        snprintf(values, sizeof(values),
             "%s %s: %s is a test-harness library kforge-sim does not provide; a stub stands in "
             "for it only so that files importing it load (kforge-sim run --no-stubs makes the "
             "import fail instead)", name, how, root);
    Py_XINCREF(f);
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        const char *fn = PyUnicode_AsUTF8(co->co_filename);
        bool ours = fn && strcmp(fn, STUB_FILE) == 0;
        if (!ours && e && e->code == SIM_E_NONE) {
            const char *func = PyUnicode_AsUTF8(co->co_name);
            e->code = SIM_E_UNSUPPORTED_API;
            snprintf(e->file, sizeof(e->file), "%s", fn ? fn : "");
            e->line = PyFrame_GetLineNumber(f);
            snprintf(e->func, sizeof(e->func), "%s", func ? func : "");
            snprintf(e->api, sizeof(e->api), "%s", name);
            snprintf(e->values, sizeof(e->values), "%s", values);
        }
        Py_DECREF(co);
        if (!ours)
            break;
        PyFrameObject *b = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = b;
    }
    Py_XDECREF(f);
    PyErr_Format(nki_SimError ? nki_SimError : PyExc_RuntimeError, "SIM_E_%s in %s: %s (%s)",
                 sim_error_name(SIM_E_UNSUPPORTED_API), name, sim_error_rule(SIM_E_UNSUPPORTED_API),
                 values);
    return NULL;
}

static PyMethodDef fail_def = { "_fail", stub_fail, METH_VARARGS, NULL };

static const char load_py[] =
    "import sys, json, importlib.abc, importlib.machinery, types\n"
    "ROOTS = frozenset(r.strip() for r in ROOTS_TEXT.split(','))\n"
    "enabled = False\n"
    "_stubs = {}\n"
    "def _stub(name):\n"
    "    s = _stubs.get(name)\n"
    "    if s is None:\n"
    "        s = _stubs[name] = Stub(name)\n"
    "    return s\n"
    "class _StubBase:\n"
    "    _kf_name = ''\n"
    "    def __init__(self, *a, **k):\n"
    "        _fail(type(self)._kf_name, 'instantiated (through a class derived from it)')\n"
    "def _op(how):\n"
    "    def f(self, *a, **k):\n"
    "        _fail(object.__getattribute__(self, '_kf_name'), how)\n"
    "    return f\n"
    "class Stub:\n"
    "    __slots__ = ('_kf_name',)\n"
    "    def __init__(self, name):\n"
    "        object.__setattr__(self, '_kf_name', name)\n"
    "    def __getattr__(self, k):\n"
    "        if k.startswith('__') and k.endswith('__'):\n"
    "            raise AttributeError(k)\n"
    "        return _stub(object.__getattribute__(self, '_kf_name') + '.' + k)\n"
    "    def __repr__(self):\n"
    "        return '<kforge-sim stub ' + object.__getattribute__(self, '_kf_name') + '>'\n"
    "    def __mro_entries__(self, bases):\n"
    "        n = object.__getattribute__(self, '_kf_name')\n"
    "        return (type(n.rsplit('.', 1)[-1], (_StubBase,), {'_kf_name': n}),)\n"
    "    __call__ = _op('called')\n"
    "    __setattr__ = _op('assigned to')\n"
    "    __getitem__ = _op('indexed')\n"
    "    __setitem__ = _op('indexed')\n"
    "    __iter__ = _op('iterated')\n"
    "    __len__ = _op('measured (len)')\n"
    "    __bool__ = _op('used as a truth value')\n"
    "    __int__ = __float__ = __index__ = _op('converted to a number')\n"
    "    __enter__ = _op('used as a context manager')\n"
    "    __lt__ = __le__ = __gt__ = __ge__ = _op('compared')\n"
    "for _n in ('add sub mul truediv floordiv mod pow matmul and or xor lshift rshift '\n"
    "           'radd rsub rmul rtruediv rfloordiv rmod rpow rmatmul rand ror rxor neg pos abs invert').split():\n"
    "    setattr(Stub, '__' + _n + '__', _op('used in arithmetic'))\n"
    "class StubModule(types.ModuleType):\n"
    "    def __getattr__(self, k):\n"
    "        if k.startswith('__') and k.endswith('__'):\n"
    "            raise AttributeError(k)\n"
    "        return _stub(self.__name__ + '.' + k)\n"
    "class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
    "    def find_spec(self, fullname, path=None, target=None):\n"
    "        if not enabled or fullname.partition('.')[0] not in ROOTS:\n"
    "            return None\n"
    "        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)\n"
    "    def create_module(self, spec):\n"
    "        m = StubModule(spec.name)\n"
    "        m.__path__ = []\n"
    "        return m\n"
    "    def exec_module(self, module):\n"
    "        pass\n"
    "sys.meta_path.append(Finder())\n"
    "def reset():\n"
    "    global enabled\n"
    "    enabled = False\n"
    "    for k, m in list(sys.modules.items()):\n"
    "        if isinstance(m, StubModule):\n"
    "            del sys.modules[k]\n"
    "    _stubs.clear()\n"
    "class ArgObject(dict):\n"
    "    __slots__ = ()\n"
    "    def __getattr__(self, k):\n"
    "        try:\n"
    "            return self[k]\n"
    "        except KeyError:\n"
    "            raise AttributeError(f'the argument object has no key {k!r} (keys: {list(self)})') from None\n"
    "def _conv(v):\n"
    "    if isinstance(v, list):\n"
    "        return tuple(_conv(x) for x in v)\n"
    "    if isinstance(v, dict):\n"
    "        return ArgObject((k, _conv(x)) for k, x in v.items())\n"
    "    return v\n"
    "def value(text):\n"
    "    return _conv(json.loads(text))\n";

int sim_load_init(void)
{
    PyObject *code, *r, *fail;

    if (load_ns)
        return 0;
    load_ns = PyDict_New();
    if (!load_ns)
        return -1;
    fail = PyCFunction_New(&fail_def, NULL);
    if (!fail || PyDict_SetItemString(load_ns, "_fail", fail) < 0 ||
        PyDict_SetItemString(load_ns, "__builtins__", PyEval_GetBuiltins()) < 0 ||
        PyDict_SetItemString(load_ns, "__name__", PyUnicode_FromString("_kforge_stubs")) < 0) {
        Py_XDECREF(fail);
        Py_CLEAR(load_ns);
        return -1;
    }
    Py_DECREF(fail);
    {
        PyObject *roots = PyUnicode_FromString(SIM_RUN_STUBBED);
        int rc = roots ? PyDict_SetItemString(load_ns, "ROOTS_TEXT", roots) : -1;
        Py_XDECREF(roots);
        if (rc < 0) {
            Py_CLEAR(load_ns);
            return -1;
        }
    }
    code = Py_CompileString(load_py, STUB_FILE, Py_file_input);
    r = code ? PyEval_EvalCode(code, load_ns, load_ns) : NULL;
    Py_XDECREF(code);
    if (!r) {
        Py_CLEAR(load_ns);
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

int sim_load_stubs(bool on)
{
    return load_ns ? PyDict_SetItemString(load_ns, "enabled", on ? Py_True : Py_False) : -1;
}

void sim_load_reset(void)
{
    PyObject *f = load_ns ? PyDict_GetItemString(load_ns, "reset") : NULL;
    PyObject *r = f ? PyObject_CallNoArgs(f) : NULL;
    Py_XDECREF(r);
    PyErr_Clear();
}

PyObject *sim_load_value(const char *json)
{
    PyObject *f = load_ns ? PyDict_GetItemString(load_ns, "value") : NULL;
    if (!f) {
        PyErr_SetString(PyExc_RuntimeError, "the argument loader is not installed");
        return NULL;
    }
    return PyObject_CallFunction(f, "s", json);
}
