"""Stand-in of `nrtpy` (Neuron Runtime Python) for tests without a
NeuronDevice: the surface the device runner uses, as nrtpy's reference
describes it (neuron-runtime/nrtpy: model, tensor, errors, configuration).

- configure(visible_cores) / reset();
- NrtpyTensor.from_numpy(array, name, core_id), .numpy(), .shape, .dtype;
- NrtpyModel.load_from_neff(path, name, core_id): input_tensors_info and
  output_tensors_info ({name: TensorMetadata(shape, size)}; outputs named
  output_0, ...), model(inputs={...}) -> {name: NrtpyTensor},
  benchmark(inputs, outputs, warmup_iter, benchmark_iter, mode) ->
  BenchmarkResult (times in ms, durations_ms per timed iteration);
- NrtError ("NRT Error NAME(CODE): ...") and NrtpyError, both RuntimeError.

The device is kforge-sim.  As libnrt does for fp8, the raw integer type
comes back for low-precision outputs (bf16 as uint16, fp8 as int8).
"""
import os
import tempfile

import numpy as np

import kforge_sdk_double as _d

__version__ = "0.1.0+kforge.double"

_state = {"visible": None, "active": False}


class NrtpyError(RuntimeError):
    pass


class NrtError(RuntimeError):
    pass


def _raise_fault(step):
    f = _d.fault(step)
    if f:
        raise NrtError("NRT Error %s: Failed to %s model" % (f, "load" if step == "load" else "execute"))


def configure(visible_cores=None):
    if _state["active"]:
        raise RuntimeError("the runtime is already active: call nrtpy.reset() first")
    if visible_cores is None:
        return
    if isinstance(visible_cores, int):
        raise TypeError("visible_cores is an iterable of core ids")
    cores = list(visible_cores)
    if any(not isinstance(c, int) for c in cores):
        raise TypeError("core ids are integers")
    if any(c < 0 for c in cores):
        raise ValueError("core ids are not negative")
    _state["visible"] = cores
    os.environ["NEURON_RT_VISIBLE_CORES"] = ",".join(str(c) for c in cores)


def reset():
    _state["active"] = False
    _state["visible"] = None


class TensorMetadata:
    def __init__(self, shape, size):
        self.shape = shape
        self.size = size


class NrtpyTensor:
    def __init__(self, tensor_ref, shape, dtype, name=None):
        self._ref = tensor_ref
        self.shape = tuple(shape) if not isinstance(shape, int) else (shape,)
        self.dtype = np.dtype(dtype)
        self.name = name or ""

    @classmethod
    def from_numpy(cls, array, name=None, core_id=0):
        _state["active"] = True
        a = np.ascontiguousarray(array).copy()
        return cls(a, a.shape, a.dtype, name)

    def write_from_numpy(self, array):
        a = np.ascontiguousarray(array)
        if a.nbytes != self._ref.nbytes:
            raise ValueError("%d bytes into a %d-byte tensor" % (a.nbytes, self._ref.nbytes))
        self._ref = a.copy().view(self._ref.dtype).reshape(self._ref.shape)

    def numpy(self):
        return self._ref.copy()


_DT = {"bfloat16": (2, "V2"), "float8_e4m3": (1, "V1"), "float8_e4m3fn": (1, "V1"), "float8_e5m2": (1, "V1")}


class BenchmarkResult:
    def __init__(self, durations_ms, warmup):
        n = len(durations_ms)
        mean = sum(durations_ms) / n
        self.mean_ms = mean
        self.min_ms = min(durations_ms)
        self.max_ms = max(durations_ms)
        self.std_dev_ms = (sum((d - mean) ** 2 for d in durations_ms) / n) ** 0.5
        self.iterations = n
        self.warmup_iterations = warmup
        self.durations_ms = list(durations_ms)


class NrtpyModel:
    def __init__(self, meta, source, name):
        self._meta, self._source, self.name = meta, source, name
        names = meta["inputs"]
        shapes = meta.get("input_shapes") or [None] * len(names)
        dtypes = meta.get("input_dtypes") or ["float32"] * len(names)
        self._dtypes = dict(zip(names, dtypes))
        self.input_tensors_info = {n: TensorMetadata(s, None) for n, s in zip(names, shapes)}
        self.output_tensors_info = {}

    @classmethod
    def load_from_neff(cls, neff_path, name=None, core_id=0, cc_enabled=False, rank_id=0, world_size=1):
        _state["active"] = True
        visible = _state["visible"]
        if visible is not None and not 0 <= core_id < len(visible):
            raise NrtError("NRT Error NRT_INVALID(2): core_id %d is not among the %d visible cores"
                           % (core_id, len(visible)))
        _raise_fault("load")
        try:
            got = _d.read_neff(str(neff_path))
        except OSError:
            got = None
        if not got:
            raise NrtError("NRT Error NRT_FAILURE(1): Failed to load model")
        meta, source = got
        return cls(meta, source, name or os.path.splitext(os.path.basename(str(neff_path)))[0])

    def _files(self, inputs, tmp):
        names = self._meta["inputs"]
        if sorted(inputs) != sorted(names):
            raise NrtError("NRT Error NRT_INVALID(2): inputs %s, the NEFF takes %s" % (sorted(inputs), names))
        kernel = os.path.join(tmp, "kernel.py")
        with open(kernel, "wb") as f:
            f.write(self._source)
        files = []
        for n in names:
            a = inputs[n].numpy()
            dt = self._dtypes.get(n, "float32")
            if dt in _DT:
                size, void = _DT[dt]
                if a.dtype.itemsize != size:
                    raise NrtError("NRT Error NRT_INVALID(2): input %s holds %d-byte elements, the NEFF's %s "
                                   "takes %d" % (n, a.dtype.itemsize, dt, size))
                a = a.view(void)
            p = os.path.join(tmp, n + ".npy")
            np.save(p, a)
            files.append("%s=%s%s" % (n, p, ":" + dt if size_is_fp8(dt) else ""))
        return kernel, files

    def __call__(self, inputs, outputs=None, save_trace=False, ntff_name=None):
        _raise_fault("exec")
        with tempfile.TemporaryDirectory() as tmp:
            kernel, files = self._files(inputs, tmp)
            outs, err = _d.run_kernel(kernel, self._meta["entry"], self._meta["target"], files,
                                      os.path.join(tmp, "o"))
            if err:
                raise NrtError("NRT Error NRT_EXEC_COMPLETED_WITH_ERR(1004): Failed to execute model: %s" % err)
            result = {}
            for k, p in enumerate(outs):
                a = np.load(p, allow_pickle=False)
                if a.dtype.kind == "V":
                    a = a.view(np.uint16 if a.dtype.itemsize == 2 else np.int8)
                result["output_%d" % k] = NrtpyTensor(a, a.shape, a.dtype, "output_%d" % k)
        self.output_tensors_info = {n: TensorMetadata(list(t.shape), t._ref.nbytes) for n, t in result.items()}
        if outputs is not None:
            for n, t in result.items():
                outputs[n].write_from_numpy(t.numpy())
            return None
        return result

    def benchmark(self, inputs, outputs=None, warmup_iter=5, benchmark_iter=5, mode="device"):
        if mode not in ("device", "host"):
            raise ValueError("mode is 'device' or 'host'")
        if benchmark_iter < 1:
            raise ValueError("benchmark_iter must be at least 1")
        _raise_fault("exec")
        with tempfile.TemporaryDirectory() as tmp:
            kernel, files = self._files(inputs, tmp)
            ms = _d.modelled_ms(kernel, self._meta["entry"], self._meta["target"], files, os.path.join(tmp, "p"),
                                benchmark_iter, benchmark_iter * 7919 + warmup_iter)
        return BenchmarkResult(ms, warmup_iter)


def size_is_fp8(dt):
    return dt.startswith("float8")
