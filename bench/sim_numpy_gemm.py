"""NumPy float32 a @ b throughput on this machine, for the simulator's matmul
benchmark: prints one JSON line {"gflops": ..., "seconds": ..., "blas": ...}."""
import ctypes
import json
import sys
import time

import numpy as np


def blas_info():
    libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.lower() and ".so" in l})
    info = {"libraries": libs}
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_corename.restype = ctypes.c_char_p
            info["openblas_config"] = lib.openblas_get_config().decode()
            info["openblas_core"] = lib.openblas_get_corename().decode()
            break
        except (OSError, AttributeError):
            continue
    return info


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b                                   # warm-up: thread pool, page faults
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"n": n, "seconds": best, "gflops": 2 * n ** 3 / best / 1e9, "blas": blas_info()}))


main()
