"""Shared part of the Neuron SDK stand-ins (tests/doubles/neuron-sdk: `nki`
and `nrtpy` for PYTHONPATH), which let tests run the real device runner,
tools/kforge-neuron-runner, on a machine without a NeuronDevice.

The "device" is kforge's simulator (`kforge-sim` on PATH).  A NEFF here is the
test doubles' NEFF (tests/doubles/neuron/kforge-neuron-runner: the 1024-byte
header with the documented field names, then a tarball with the top-level
neff.json and sg00/), carrying the kernel's source, so that the
neuron-explorer double profiles it as it profiles the double runner's.

Fault injection for the runner's tests: NRTPY_DOUBLE_FAULT=STEP:NAME(CODE)
(STEP load or exec) makes that step raise nrtpy.NrtError("NRT Error
NAME(CODE): ..."), the documented message form.
"""
import importlib.machinery
import importlib.util
import io
import json
import os
import random
import subprocess
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = 1024


def _double_runner():
    path = os.path.join(HERE, "..", "neuron", "kforge-neuron-runner")
    loader = importlib.machinery.SourceFileLoader("kforge_double_runner", path)
    spec = importlib.util.spec_from_loader("kforge_double_runner", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def fault(step):
    """'NAME(CODE)' when NRTPY_DOUBLE_FAULT injects a fault at this step."""
    f = os.environ.get("NRTPY_DOUBLE_FAULT", "")
    s, _, what = f.partition(":")
    return what if s == step and what else None


def sim(argv, timeout=600):
    return subprocess.run(["kforge-sim"] + argv, capture_output=True, text=True, timeout=timeout)


def write_neff(path, source, entry, target, inputs):
    """inputs: [(name, dtype name, shape)]."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
        add("neff.json", json.dumps({"name": entry, "target": target, "entry": entry,
                                     "inputs": [n for n, _, _ in inputs],
                                     "input_dtypes": [d for _, d, _ in inputs],
                                     "input_shapes": [list(s) for _, _, s in inputs]}).encode())
        add("sg00/def.json", json.dumps({"dma_queues": {"in": [], "out": [], "data": [], "dynamic": []},
                                         "var": {}}).encode())
        add("sg00/kernel.py", source)
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(_double_runner().neff_header(entry, len(data), 1))
        f.write(data)


def read_neff(path):
    """(neff.json, kernel source) or None when the file is not a NEFF."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < HEADER or blob[:4] != b"NEFF":
        return None
    data_size = int.from_bytes(blob[16:24], "little")
    tar = tarfile.open(fileobj=io.BytesIO(blob[HEADER:HEADER + data_size]))
    return json.load(tar.extractfile("neff.json")), tar.extractfile("sg00/kernel.py").read()


def run_kernel(kernel_path, entry, target, input_files, outdir):
    """kforge-sim with numerics: (output .npy paths, None) or (None, message)."""
    specs = []
    for spec in input_files:
        specs += ["--input", spec]
    r = sim(["run", kernel_path, "--entry", entry, "--target", target, "--output-dir", outdir,
             "--keep-dtype", "--json"] + specs)
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        rep = None
    if r.returncode != 0 or not rep:
        return None, (r.stderr.strip().splitlines() or ["execution failed"])[-1]
    return [os.path.join(os.getcwd(), o["file"]) for o in rep.get("outputs", [])], None


def modelled_ms(kernel_path, entry, target, input_files, outdir, n, seed):
    """n execution times in ms: the simulator's modelled time with a seeded 0-3 % spread."""
    specs = []
    for spec in input_files:
        specs += ["--input", spec]
    r = sim(["profile", kernel_path, "--entry", entry, "--target", target, "--output-dir", outdir, "--json"]
            + specs)
    total_s = json.loads(r.stdout)["summary"]["total_time"]
    rng = random.Random(seed)
    return [total_s * 1e3 * (1 + 0.03 * rng.random()) for _ in range(n)]


def compile_kernel(kernel_path, entry, target, input_files, out):
    """The double runner's compile (complex-dtype check, trace in kforge-sim,
    NKI_DEBUG_INFO): (0, "") or (1, the compiler's log)."""
    import contextlib
    runner = _double_runner()
    err = io.StringIO()
    argv = ["--kernel", kernel_path, "--entry", entry, "--target", target, "--out", out]
    for spec in input_files:
        argv += ["--input", spec]
    with contextlib.redirect_stderr(err):
        rc = runner.cmd_compile(argv)
    return rc, err.getvalue()
