"""Loop-invariant work, legacy API: out = (x + b) * 0.5 by 128-row tiles.

bias_in_loop reloads the same (128, D) bias rows and re-makes the same
constant tile in every iteration; bias_hoisted does both once, before the
loop.  The compiler hoists the first into the second, so the two should
time alike (docs/profile.md, "What the compiler removes", rule 3).
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def bias_in_loop(x, b):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    for t in nl.affine_range(N // 128):
        bias = nl.load(b[i_p, i_f])
        half = nl.full((128, D), 0.5, dtype=nl.float32)
        xt = nl.load(x[t * 128 + i_p, i_f])
        nl.store(out[t * 128 + i_p, i_f], value=nl.multiply(nl.add(xt, bias), half))
    return out


@nki.jit
def bias_hoisted(x, b):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    bias = nl.load(b[i_p, i_f])
    half = nl.full((128, D), 0.5, dtype=nl.float32)
    for t in nl.affine_range(N // 128):
        xt = nl.load(x[t * 128 + i_p, i_f])
        nl.store(out[t * 128 + i_p, i_f], value=nl.multiply(nl.add(xt, bias), half))
    return out
