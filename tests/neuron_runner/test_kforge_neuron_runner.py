"""The real device runner, tools/kforge-neuron-runner, against the Neuron SDK
stand-ins of tests/doubles/neuron-sdk (`nki`, `nrtpy`, computing with
kforge-sim) on PYTHONPATH: its argument handling, .npy I/O, dtypes,
percentiles and exit codes (0, 1 kernel, 2 usage, 75 device).

Needs kforge-sim on PATH (make test-python puts $(BUILD)/bin first)."""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUNNER = os.path.join(ROOT, "tools", "kforge-neuron-runner")
SDK = os.path.join(ROOT, "tests", "doubles", "neuron-sdk")
KERNEL = os.path.join(ROOT, "tests", "kernels", "current", "tensor_add.py")


def load_runner():
    loader = importlib.machinery.SourceFileLoader("kforge_neuron_runner", RUNNER)
    spec = importlib.util.spec_from_loader("kforge_neuron_runner", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


R = load_runner()


def read(path):
    with open(path) as f:
        return f.read()


def npy_descr(path):
    with open(path, "rb") as f:
        head = f.read(128).decode("latin1")
    return head.split("'descr': '")[1].split("'")[0]


class RunnerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("kforge-sim"):
            raise unittest.SkipTest("kforge-sim is not on PATH (run through make test-python)")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="runner-test-")
        rng = np.random.default_rng(7)
        self.a = rng.standard_normal((128, 512)).astype(np.float32)
        self.b = rng.standard_normal((128, 512)).astype(np.float32)
        np.save(self.path("a.npy"), self.a)
        np.save(self.path("b.npy"), self.b)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def runner(self, *args, env=None, sdk=True):
        e = {"PATH": os.environ["PATH"], "HOME": self.tmp, "TMPDIR": self.tmp, "XDG_CACHE_HOME": self.path("cache"),
             "NEURON_RT_VISIBLE_CORES": "0"}
        if sdk:
            e["PYTHONPATH"] = SDK
        e.update(env or {})
        return subprocess.run([sys.executable, RUNNER] + list(args), capture_output=True, text=True, env=e,
                              cwd=self.tmp, timeout=300)

    def ins(self, a="a.npy", b="b.npy"):
        return ["--input", "a_input=" + self.path(a), "--input", "b_input=" + self.path(b)]

    def compile(self, kernel=KERNEL, env=None, ins=None):
        return self.runner("compile", "--kernel", kernel, "--entry", "tensor_add", "--target", "trn2",
                           "--out", self.path("neff"), *(ins or self.ins()), env=env)

    def run_neff(self, warmup, iters, env=None, ins=None, core="0"):
        return self.runner("run", "--neff", self.path("neff", "kernel.neff"), "--core", core, "--output-dir",
                           self.path("out"), "--warmup", str(warmup), "--iters", str(iters), *(ins or self.ins()),
                           env=env)

    def test_compile_keeps_the_neff_and_run_writes_outputs_and_percentiles(self):
        c = self.compile(env={"NKI_DEBUG_INFO": "1"})
        self.assertEqual(c.returncode, 0, c.stderr)
        with open(self.path("neff", "kernel.neff"), "rb") as f:
            self.assertEqual(f.read(4), b"NEFF")
        self.assertTrue(os.path.exists(self.path("neff", "kernel_debug_info.json")))
        io = json.loads(read(self.path("neff", "kernel_io.json")))
        self.assertEqual(io["outputs"], [{"dtype": "float32", "shape": [128, 512]}])

        r = self.run_neff(0, 1)
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual(rep["latency_us"], {}, "one run: no timing")
        self.assertEqual((rep["warmup"], rep["iterations"]), (0, 1))
        self.assertEqual(rep["outputs"], [self.path("out", "output0.npy")])
        self.assertEqual(npy_descr(rep["outputs"][0]), "<f4")
        np.testing.assert_array_equal(np.load(rep["outputs"][0]), self.a + self.b)

        r = self.run_neff(3, 9)
        self.assertEqual(r.returncode, 0, r.stderr)
        lat = json.loads(r.stdout)["latency_us"]
        self.assertEqual(sorted(lat), sorted("p%d" % q for q in R.PERCENTILES))
        qs = [lat["p%d" % q] for q in R.PERCENTILES]
        self.assertGreater(qs[0], 0)
        self.assertEqual(qs, sorted(qs), "percentiles rise")
        self.assertLess(qs[-1], qs[0] * 1.04, "the double's spread is 0-3 %")

    def test_bf16_inputs_and_outputs_are_raw_bits(self):
        def bf16(x):
            return (x.view(np.uint32) >> 16).astype(np.uint16)
        np.save(self.path("a16.npy"), bf16(self.a).view("V2"))
        np.save(self.path("b16.npy"), bf16(self.b).view("V2"))
        ins = self.ins("a16.npy", "b16.npy")
        c = self.compile(ins=ins)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertEqual(json.loads(read(self.path("neff", "kernel_io.json")))["outputs"][0]["dtype"], "bfloat16")
        r = self.run_neff(0, 1, ins=ins)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)["outputs"][0]
        self.assertEqual(npy_descr(out), "<V2", "bf16 as '<V2' raw bits, as the contract says")
        got = (np.load(out).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        want = (bf16(self.a).astype(np.uint32) << 16).view(np.float32) + \
            (bf16(self.b).astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)

    def test_a_kernel_that_does_not_compile_exits_1_with_the_compilers_code_and_line(self):
        src = read(KERNEL).replace("rows, cols = a_input.shape", "rows, cols = a_input.shape; z = nl.complex64")
        k = self.path("kernel.py")
        with open(k, "w") as f:
            f.write(src)
        line = src[:src.index("nl.complex64")].count("\n") + 1
        c = self.compile(kernel=k)
        self.assertEqual(c.returncode, 1, c.stderr)
        self.assertIn("NCC_EVRF004", c.stderr)
        self.assertIn('"%s", line %d' % (k, line), c.stderr)
        self.assertFalse(os.path.exists(self.path("neff", "kernel.neff")))

    def test_runtime_errors_exit_1_for_the_kernel_and_75_for_the_device(self):
        self.assertEqual(self.compile().returncode, 0)
        r = self.run_neff(0, 1, env={"NRTPY_DOUBLE_FAULT": "exec:NRT_EXEC_OOB(1006)"})
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("NRT_EXEC_OOB(1006)", r.stderr)
        for f in ("exec:NRT_TIMEOUT(5)", "load:NRT_HW_ERROR(6)", "exec:NRT_EXEC_HW_ERR_NC_UE(1202)"):
            r = self.run_neff(2, 4, env={"NRTPY_DOUBLE_FAULT": f})
            self.assertEqual(r.returncode, 75, f + ": " + r.stderr)
            self.assertIn(f.split(":")[1], r.stderr)
        r = self.runner("run", "--neff", self.path("a.npy"), "--core", "0", "--output-dir", self.path("o"),
                        "--warmup", "0", "--iters", "1", *self.ins())
        self.assertEqual(r.returncode, 75, "not a NEFF: NRT_FAILURE on load: " + r.stderr)

    def test_health_runs_a_tiny_neff_and_says_when_the_core_is_unusable(self):
        h = self.runner("health", "--core", "0")
        self.assertEqual(h.returncode, 0, h.stderr)
        cached = [d for d in os.listdir(self.path("cache", "kforge-neuron-runner-%d" % os.getuid()))]
        self.assertEqual(len(cached), 1, "the health NEFF is cached")
        h = self.runner("health", "--core", "0", env={"NRTPY_DOUBLE_FAULT": "exec:NRT_TIMEOUT(5)"})
        self.assertEqual(h.returncode, 75, h.stderr)
        self.assertIn("NRT_TIMEOUT", h.stderr)
        h = self.runner("health", "--core", "0", sdk=False)
        self.assertEqual(h.returncode, 75, "no SDK: unusable: " + h.stderr)

    def test_versions_come_from_the_installed_packages(self):
        v = self.runner("versions")
        self.assertEqual(v.returncode, 0, v.stderr)
        d = json.loads(v.stdout)
        self.assertIn("neuronx-cc 2.0.0+kforge.double", d["compiler"])
        self.assertIn("nki 0.6.0+kforge.double", d["compiler"])
        self.assertIn("nrtpy 0.1.0+kforge.double", d["runtime"])
        self.assertTrue(d["driver"].startswith("neuron driver "))

    def test_usage_errors_exit_2_and_missing_sdk_or_interpreter_75(self):
        self.assertEqual(self.runner().returncode, 2)
        self.assertEqual(self.runner("run", "--core", "0").returncode, 2)
        self.assertEqual(self.runner("run", "--neff", "x", "--core", "zero", "--output-dir", "o", "--warmup", "0",
                                     "--iters", "1").returncode, 2)
        self.assertEqual(self.compile().returncode, 0)
        r = self.run_neff(0, 1, core="3")
        self.assertEqual(r.returncode, 2, "core 3 is not visible: " + r.stderr)
        r = self.run_neff(0, 1, env={"NEURON_RT_VISIBLE_CORES": "2-5"}, core="3")
        self.assertEqual(r.returncode, 0, "core 3 is visible core 1: " + r.stderr)
        r = self.runner("compile", "--kernel", KERNEL, "--entry", "tensor_add", "--target", "trn2", "--out",
                        self.path("n2"), *self.ins(), sdk=False)
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertIn("import nki", r.stderr)
        r = self.run_neff(0, 1, env={"NEURON_RUNNER_NRTPY_PYTHON": self.path("no-such-python")})
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertIn("NEURON_RUNNER_NRTPY_PYTHON", r.stderr)
        r = self.run_neff(0, 1, env={"NEURON_RUNNER_NRTPY_PYTHON": sys.executable})
        self.assertEqual(r.returncode, 0, "the named interpreter runs the command: " + r.stderr)


class PureTest(unittest.TestCase):
    def test_percentiles_interpolate_between_ranks(self):
        xs = [1.0, 2.0, 3.0, 4.0]
        self.assertEqual(R.percentile(xs, 0), 1.0)
        self.assertEqual(R.percentile(xs, 100), 4.0)
        self.assertAlmostEqual(R.percentile(xs, 50), 2.5)
        self.assertAlmostEqual(R.percentile(xs, 25), 1.75)
        for q in (1, 10, 90, 99):
            self.assertAlmostEqual(R.percentile(xs, q), float(np.percentile(xs, q)))
        lat = R.latency_us([0.002, 0.001])
        self.assertAlmostEqual(lat["p0"], 1.0)
        self.assertAlmostEqual(lat["p100"], 2.0)
        self.assertRaises(ValueError, R.percentile, [], 50)

    def test_npy_writer_and_input_specs(self):
        d = tempfile.mkdtemp()
        try:
            p = os.path.join(d, "x.npy")
            R.npy_write(np, p, np.arange(6, dtype=np.uint16).reshape(2, 3), "bfloat16")
            self.assertEqual(npy_descr(p), "<V2")
            self.assertEqual(np.load(p).shape, (2, 3))
            R.npy_write(np, p, np.arange(4, dtype=np.int8), "float8_e5m2")
            self.assertEqual(npy_descr(p), "|V1")
            self.assertEqual(np.load(p).shape, (4,))
            R.npy_write(np, p, np.arange(4, dtype=np.int32))
            self.assertEqual(npy_descr(p), "<i4")
            np.testing.assert_array_equal(np.load(p), np.arange(4))
            with open(p, "rb") as f:
                self.assertEqual((10 + int.from_bytes(f.read(10)[8:10], "little")) % 64, 0, "64-byte aligned")
        finally:
            shutil.rmtree(d)
        self.assertEqual(R.parse_input("x=/a/b.npy:float8_e4m3"), ("x", "/a/b.npy", "float8_e4m3"))
        self.assertEqual(R.parse_input("x=/a:b.npy"), ("x", "/a:b.npy", None))
        self.assertRaises(R.Usage, R.parse_input, "x")
        self.assertRaises(R.Usage, R.parse_input, "1x=a.npy")
        self.assertEqual(R.nrt_status(RuntimeError("NRT Error NRT_EXEC_OOB(1006): Failed")), ("NRT_EXEC_OOB", 1006))
        self.assertEqual(R.nrt_status(RuntimeError("odd")), (None, None))


if __name__ == "__main__":
    unittest.main()
