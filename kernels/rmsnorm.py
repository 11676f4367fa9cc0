"""kforge library: RMS norm over the last dim, current NKI API.

out = x / sqrt(mean(x^2, axis=-1) + eps) * g, x (N, D), g (D,).
g is spread over the 128 partitions once (a ones-vector matmul on TensorE).
Per 128-row tile: mean(x^2) comes from ScalarE (square + sum in one
activation_reduce) or VectorE (bn_stats/bn_aggr: var + mean^2; or squares
and a row sum), per STATS;
x * g runs meanwhile on G_ENGINE (it does not need the statistics), and the
final per-row scaling runs on SCALE_ENGINE.  BUFS rotating buffer sets let
the next tiles load while one is computed; MID_BF16 keeps x * g in the
input's 16-bit dtype (less SBUF, faster VectorE) instead of float32.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "rmsnorm",
    "entry": "rmsnorm",
    "reference": "rmsnorm_ref",
    "summary": "RMS norm of (N, D) rows scaled by g (D,)",
    "inputs": [{"name": "x", "dims": ["N", "D"]}, {"name": "g", "dims": ["D"]}],
    "supports": ["N >= 1", "D >= 1", "D * (3 * DTYPE_BYTES + 4) <= SBUF_BYTES - 8192"],
    "reference_shapes": [[4096, 8192], [8192]],
    "test_shapes": [[200, 700], [700]],
    "tunables": {
        "BUFS": {"values": [1, 2, 3, 4], "default": 1,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "G_ENGINE": {"values": ["vector", "gpsimd", "split"], "default": "vector",
                     "addresses": {"slow_engine": "any", "buffer_pressure": "any"}},
        "SCALE_ENGINE": {"values": ["vector", "gpsimd", "scalar"], "default": "vector",
                         "addresses": {"slow_engine": "any", "buffer_pressure": "any",
                                       "engine_waits_on_dma": "any"}},
        "STATS": {"values": ["scalar", "bn", "vector"], "default": "scalar",
                  "addresses": {"slow_engine": "any", "engine_waits_on_dma": "any"}},
        "MID_BF16": {"values": [0, 1], "default": 0,
                     "addresses": {"buffer_pressure": "up", "slow_engine": "up"}}
    },
    "constraints": ["BUFS * D * (2 * DTYPE_BYTES + 4 - MID_BF16 * (4 - DTYPE_BYTES)) + D * DTYPE_BYTES <= SBUF_BYTES - 8192",
                    "G_ENGINE != SCALE_ENGINE or BUFS > 1", "G_ENGINE != \"split\" or D >= 2"]
}


def _engine(name):
    return nisa.gpsimd_engine if name == "gpsimd" else nisa.vector_engine


def _spread_rows(vec, D, P):
    """(D,) HBM vector -> (P, D) SBUF tile, in the vector's own dtype (exact:
    the matmul only copies it), holding it in every row."""
    row = nl.ndarray((1, D), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=vec.reshape((1, D)))
    ones = nl.ndarray((1, P), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    full = nl.ndarray((P, D), dtype=vec.dtype, buffer=nl.sbuf)
    F = nl.tile_size.psum_fmax
    for c in nl.affine_range(math.ceil(D / F)):
        c0 = c * F
        w = min(F, D - c0)
        acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc[0:P, 0:w], stationary=ones, moving=row[0:1, c0:c0 + w])
        nisa.tensor_copy(dst=full[0:P, c0:c0 + w], src=acc[0:P, 0:w])
    return full


@nki.jit
def rmsnorm(x, g, eps=1e-6, BUFS=1, G_ENGINE="vector", SCALE_ENGINE="vector", MID_BF16=0,
            STATS="scalar"):
    N, D = x.shape
    assert tuple(g.shape) == (D,)
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g_all = _spread_rows(g, D, P)
    FMAX = nl.tile_size.bn_stats_fmax
    nst = math.ceil(D / FMAX)
    mdt = x.dtype if MID_BF16 else nl.float32
    xbufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    mbufs = [nl.ndarray((P, D), dtype=mdt, buffer=nl.sbuf) for _ in range(BUFS)]
    obufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]

    for t in nl.affine_range(math.ceil(N / P)):
        r0 = t * P
        nr = min(P, N - r0)
        xt = xbufs[t % BUFS]
        xg = mbufs[t % BUFS]
        yo = obufs[t % BUFS]
        nisa.dma_copy(dst=xt[0:nr, 0:D], src=x[r0:r0 + nr, 0:D])

        ms = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        if STATS == "bn":
            # VectorE bn_stats/bn_aggr: mean(x^2) = var + mean^2
            stats = nl.ndarray((P, 6 * nst), dtype=nl.float32, buffer=nl.sbuf)
            for c in nl.affine_range(nst):
                c0 = c * FMAX
                w = min(FMAX, D - c0)
                nisa.bn_stats(dst=stats[0:nr, c * 6:(c + 1) * 6], data=xt[0:nr, c0:c0 + w])
            mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.bn_aggr(dst=mv[0:nr, 0:2], data=stats[0:nr, 0:6 * nst])
            nisa.tensor_tensor(dst=ms[0:nr, 0:1], data1=mv[0:nr, 0:1], data2=mv[0:nr, 0:1],
                               op=nl.multiply)
            nisa.tensor_tensor(dst=ms[0:nr, 0:1], data1=ms[0:nr, 0:1], data2=mv[0:nr, 1:2],
                               op=nl.add)
        elif STATS == "vector":
            # VectorE: squares in the output dtype (into yo), then a row sum
            nisa.tensor_tensor(dst=yo[0:nr, 0:D], data1=xt[0:nr, 0:D], data2=xt[0:nr, 0:D],
                               op=nl.multiply)
            nisa.tensor_reduce(dst=ms[0:nr, 0:1], op=nl.add, data=yo[0:nr, 0:D], axis=1,
                               keepdims=True)
            nisa.tensor_scalar(dst=ms[0:nr, 0:1], data=ms[0:nr, 0:1], op0=nl.multiply,
                               operand0=1.0 / D)
        else:
            # ScalarE squares and sums in one pass (the squares land in yo,
            # overwritten below)
            nisa.activation_reduce(dst=yo[0:nr, 0:D], op=nl.square, data=xt[0:nr, 0:D],
                                   reduce_op=nl.add, reduce_res=ms[0:nr, 0:1])
            nisa.tensor_scalar(dst=ms[0:nr, 0:1], data=ms[0:nr, 0:1], op0=nl.multiply,
                               operand0=1.0 / D)
        if G_ENGINE == "split":
            # half the columns on VectorE, half on GpSimd
            h = D // 2
            nisa.tensor_tensor(dst=xg[0:nr, 0:h], data1=xt[0:nr, 0:h], data2=g_all[0:nr, 0:h],
                               op=nl.multiply, engine=nisa.vector_engine)
            nisa.tensor_tensor(dst=xg[0:nr, h:D], data1=xt[0:nr, h:D], data2=g_all[0:nr, h:D],
                               op=nl.multiply, engine=nisa.gpsimd_engine)
        else:
            nisa.tensor_tensor(dst=xg[0:nr, 0:D], data1=xt[0:nr, 0:D], data2=g_all[0:nr, 0:D],
                               op=nl.multiply, engine=_engine(G_ENGINE))
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[0:nr, 0:1], data=ms[0:nr, 0:1], op0=nl.add, operand0=eps)
        nisa.activation(dst=rstd[0:nr, 0:1], op=nl.rsqrt, data=rstd[0:nr, 0:1])
        if SCALE_ENGINE == "scalar":
            nisa.activation(dst=yo[0:nr, 0:D], op=nl.copy, data=xg[0:nr, 0:D],
                            scale=rstd[0:nr, 0:1])
        else:
            nisa.tensor_scalar(dst=yo[0:nr, 0:D], data=xg[0:nr, 0:D], op0=nl.multiply,
                               operand0=rstd[0:nr, 0:1], engine=_engine(SCALE_ENGINE))
        nisa.dma_copy(dst=out[r0:r0 + nr, 0:D], src=yo[0:nr, 0:D])
    return out


def rmsnorm_ref(x, g, eps=1e-6):
    x = np.asarray(x, dtype=np.float64)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * np.asarray(g, dtype=np.float64)
