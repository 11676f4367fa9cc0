"""Trace-overhead benchmark kernel: many tiny NKI calls (current API).

Each iteration issues two instructions on (128, 8) tiles, so the kernel makes
2 * ITERS + 3 NKI calls.  Run with --no-numerics to measure what the timing
model's traces cost: Python tracing plus the simulator's bookkeeping.
"""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def small_ops(x, ITERS=100000):
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.memset(dst=b, value=0.0)
    for i in nl.affine_range(ITERS):
        nisa.tensor_tensor(dst=b, data1=b, data2=a, op=nl.add)
        nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=0.5)
    nisa.dma_copy(dst=out, src=b)
    return out
