"""Loop-invariant work, current API: out = (x + b) * 0.5 by 128-row tiles.

bias_in_loop reloads the same (128, D) bias rows from HBM and re-makes the
same constant tile in every iteration; bias_hoisted does both once, before
the loop.  The compiler hoists the first into the second, so the two should
time alike (docs/profile.md, "What the compiler removes", rule 3).
"""
import nki
import nki.language as nl
import nki.isa as nisa


def _tile(x, b, out, t, bias, half):
    N, D = x.shape
    xt = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x[t * 128:(t + 1) * 128, 0:D])
    y = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=y, data1=xt, data2=bias, op=nl.add)
    o = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=o, data1=y, data2=half, op=nl.multiply)
    nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, 0:D], src=o)


@nki.jit
def bias_in_loop(x, b):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(N // 128):
        bias = nl.ndarray((128, D), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=bias, src=b)
        half = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=half, value=0.5)
        _tile(x, b, out, t, bias, half)
    return out


@nki.jit
def bias_hoisted(x, b):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    bias = nl.ndarray((128, D), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=bias, src=b)
    half = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=half, value=0.5)
    for t in nl.affine_range(N // 128):
        _tile(x, b, out, t, bias, half)
    return out
