"""RMS norm over the last dim: out = x / sqrt(mean(x^2) + eps) * g, legacy API.

x is (N, D), g is (D,).  Rows are tiled by 128 and the last tile is masked.
"""
import math

from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def rmsnorm(x, g, eps=1e-6):
    N, D = x.shape
    assert g.shape[0] == D
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)

    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    i_one = nl.arange(1)[:, None]
    g_row = nl.load(g.reshape((1, D))[i_one, i_f])
    g_all = g_row.broadcast_to((128, D))

    for t in nl.affine_range(math.ceil(N / 128)):
        live = (t * 128 + i_p < N)
        xt = nl.load(x[t * 128 + i_p, i_f], mask=live)
        sq = nl.square(xt, mask=live)
        ssum = nl.sum(sq, axis=[1], mask=live)
        ms = nl.multiply(ssum, 1.0 / D)
        rstd = nl.rsqrt(ms + eps)
        y = nl.multiply(xt, rstd, mask=live)
        y[i_p, i_f] = nl.multiply(y, g_all, mask=live)
        nl.store(out[t * 128 + i_p, i_f], value=y, mask=live)
    return out
