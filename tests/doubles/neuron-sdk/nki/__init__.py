"""Stand-in of the `nki` package (NKI 0.2+, `import nki`) for tests without a
NeuronDevice: only what the device runner uses, as the NKI documentation
describes it (nki/deep-dives/nki-standalone, nki.execute, and nrtpy's
"Test and debug a NKI kernel end-to-end" tutorial):

- `@nki.jit` kernels called with NumPy arrays are specialized, compiled into
  their own NEFF and executed, returning NumPy results;
- NKI_ARTIFACTS_DIR, read when `nki` is imported, keeps the NEFF as
  kernel.neff in that folder (else it goes to a temporary folder);
- NEURON_PLATFORM_TARGET_OVERRIDE selects the target (default here: trn2);
- with NKI_DEBUG_INFO, kernel_debug_info.json is written next to the NEFF.

Compile: the test doubles' compiler (complex dtypes refused with
NCC_EVRF004, the kernel traced in kforge-sim); a failure raises an exception
whose message is the compiler's log.  Execution: kforge-sim with numerics
(kforge_sdk_double).  The kernel's body is never run by Python here.
"""
import inspect
import os
import shutil
import tempfile

import numpy as np

import kforge_sdk_double as _d

__version__ = "0.6.0+kforge.double"

_ARTIFACTS_DIR = os.environ.get("NKI_ARTIFACTS_DIR")   # resolved at import, as documented


class CompileError(Exception):
    """The compiler refused the kernel; the message is its log."""


def _dtype_name(a):
    if a.dtype.kind == "V":
        return "bfloat16" if a.dtype.itemsize == 2 else "float8_e4m3"
    return a.dtype.name


def _standalone(fn, args):
    target = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or "trn2"
    kernel = inspect.getsourcefile(fn)
    names = list(inspect.signature(fn).parameters)[:len(args)]
    keep = _ARTIFACTS_DIR
    out = keep or tempfile.mkdtemp(prefix="nki-")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for n, a in zip(names, args):
            a = np.asarray(a)
            p = os.path.join(tmp, n + ".npy")
            np.save(p, a)
            spec = "%s=%s" % (n, p)
            if a.dtype.kind == "V" and a.dtype.itemsize == 1:
                spec += ":float8_e4m3"
            files.append(spec)
        rc, log = _d.compile_kernel(kernel, fn.__name__, target, files, os.path.join(tmp, "c"))
        if rc != 0:
            raise CompileError(log.strip())
        dbg = os.path.join(tmp, "c", "kernel_debug_info.json")
        with open(kernel, "rb") as f:
            source = f.read()
        _d.write_neff(os.path.join(out, "kernel.neff"), source, fn.__name__, target,
                      [(n, _dtype_name(np.asarray(a)), np.asarray(a).shape) for n, a in zip(names, args)])
        if os.path.exists(dbg):
            shutil.copyfile(dbg, os.path.join(out, "kernel_debug_info.json"))
        outs, err = _d.run_kernel(kernel, fn.__name__, target, files, os.path.join(tmp, "o"))
        if err:
            raise RuntimeError("NRT Error NRT_EXEC_COMPLETED_WITH_ERR(1004): %s" % err)
        results = [np.load(p, allow_pickle=False) for p in outs]
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    return results[0] if len(results) == 1 else tuple(results)


class _Kernel:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def __call__(self, *args):
        return _standalone(self.fn, args)


def jit(kernel=None, **_options):
    """@nki.jit or @nki.jit(...)."""
    if kernel is None:
        return lambda fn: _Kernel(fn)
    return _Kernel(kernel)


def execute(kernel, *args, **kwargs):
    fn = kernel.fn if isinstance(kernel, _Kernel) else kernel
    return _standalone(fn, args)
