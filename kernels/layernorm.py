"""kforge library: layer norm over the last dim, current NKI API.

out = (x - mean) / sqrt(var + eps) * gamma + beta; x (N, D), gamma and beta
(D,).  gamma and beta are spread over the 128 partitions once (ones-vector
matmuls on TensorE).  Per 128-row tile:
  statistics  STATS = "bn": VectorE bn_stats/bn_aggr (<= 512 columns a call);
              STATS = "scalar": ScalarE row sums of x and of x^2
  normalise   NORM_ENGINE = "scalar": one activation (x * rstd - mean * rstd);
              otherwise one tensor_scalar (x - mean) * rstd on that engine
  gamma, beta G_ENGINE / B_ENGINE: VectorE, GpSimd, or half the columns each
BUFS rotating buffer sets overlap the loads of the next tiles with compute;
MID_BF16 keeps the intermediate in the input's 16-bit dtype; SKEW = 1
software-pipelines the three stages (statistics, normalisation, gamma/beta
and store) over consecutive tiles.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "layernorm",
    "entry": "layernorm",
    "reference": "layernorm_ref",
    "summary": "layer norm of (N, D) rows with gamma, beta (D,)",
    "inputs": [{"name": "x", "dims": ["N", "D"]}, {"name": "gamma", "dims": ["D"]},
               {"name": "beta", "dims": ["D"]}],
    "supports": ["N >= 1", "D >= 2", "D * (4 * DTYPE_BYTES + 4) <= SBUF_BYTES - 8192"],
    "reference_shapes": [[4096, 8192], [8192], [8192]],
    "test_shapes": [[200, 700], [700], [700]],
    "tunables": {
        "BUFS": {"values": [1, 2, 3, 4], "default": 1,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "STATS": {"values": ["bn", "scalar"], "default": "bn",
                  "addresses": {"slow_engine": "any", "engine_waits_on_dma": "any"}},
        "NORM_ENGINE": {"values": ["vector", "gpsimd", "scalar"], "default": "vector",
                        "addresses": {"slow_engine": "any", "buffer_pressure": "any"}},
        "G_ENGINE": {"values": ["vector", "gpsimd", "split"], "default": "vector",
                     "addresses": {"slow_engine": "any", "buffer_pressure": "any"}},
        "B_ENGINE": {"values": ["vector", "gpsimd", "split"], "default": "vector",
                     "addresses": {"slow_engine": "any", "buffer_pressure": "any"}},
        "MID_BF16": {"values": [0, 1], "default": 0,
                     "addresses": {"buffer_pressure": "up", "slow_engine": "up"}},
        "SKEW": {"values": [0, 1], "default": 0,
                 "addresses": {"slow_engine": "up", "engine_waits_on_dma": "up",
                               "buffer_pressure": "up"}}
    },
    "constraints": ["BUFS * D * (2 * DTYPE_BYTES + 4 - MID_BF16 * (4 - DTYPE_BYTES)) + 2 * D * DTYPE_BYTES <= SBUF_BYTES - 8192",
                    "SKEW == 0 or BUFS >= 3"]
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


def _rowwise(engine, dst, a, b, op, nr, D):
    """dst = a op b over rows [0, nr) on an engine, or half the columns each."""
    if engine == "split":
        h = D // 2
        nisa.tensor_tensor(dst=dst[0:nr, 0:h], data1=a[0:nr, 0:h], data2=b[0:nr, 0:h], op=op,
                           engine=nisa.vector_engine)
        nisa.tensor_tensor(dst=dst[0:nr, h:D], data1=a[0:nr, h:D], data2=b[0:nr, h:D], op=op,
                           engine=nisa.gpsimd_engine)
    else:
        nisa.tensor_tensor(dst=dst[0:nr, 0:D], data1=a[0:nr, 0:D], data2=b[0:nr, 0:D], op=op,
                           engine=_engine(engine))


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5, BUFS=1, STATS="bn", NORM_ENGINE="vector",
              G_ENGINE="vector", B_ENGINE="vector", MID_BF16=0, SKEW=0):
    N, D = x.shape
    assert tuple(gamma.shape) == (D,) and tuple(beta.shape) == (D,)
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g_all = _spread_rows(gamma, D, P)
    b_all = _spread_rows(beta, D, P)
    FMAX = nl.tile_size.bn_stats_fmax
    nst = math.ceil(D / FMAX)
    mdt = x.dtype if MID_BF16 else nl.float32
    xbufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    mbufs = [nl.ndarray((P, D), dtype=mdt, buffer=nl.sbuf) for _ in range(BUFS)]
    obufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    mvs = [nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf) for _ in range(BUFS)]   # mean, var
    rstds = [nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf) for _ in range(BUFS)]
    ntiles = math.ceil(N / P)

    def rows(t):
        return t * P, min(P, N - t * P)

    def stage_stats(t):
        """load tile t, mean and variance, rstd"""
        r0, nr = rows(t)
        xt, yo, mv, rstd = xbufs[t % BUFS], obufs[t % BUFS], mvs[t % BUFS], rstds[t % BUFS]
        nisa.dma_copy(dst=xt[0:nr, 0:D], src=x[r0:r0 + nr, 0:D])
        if STATS == "bn":
            stats = nl.ndarray((P, 6 * nst), dtype=nl.float32, buffer=nl.sbuf)
            for c in nl.affine_range(nst):
                c0 = c * FMAX
                w = min(FMAX, D - c0)
                nisa.bn_stats(dst=stats[0:nr, c * 6:(c + 1) * 6], data=xt[0:nr, c0:c0 + w])
            nisa.bn_aggr(dst=mv[0:nr, 0:2], data=stats[0:nr, 0:6 * nst])
        else:
            s12 = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=yo[0:nr, 0:D], op=nl.copy, data=xt[0:nr, 0:D],
                                   reduce_op=nl.add, reduce_res=s12[0:nr, 0:1])
            nisa.activation_reduce(dst=yo[0:nr, 0:D], op=nl.square, data=xt[0:nr, 0:D],
                                   reduce_op=nl.add, reduce_res=s12[0:nr, 1:2])
            nisa.tensor_scalar(dst=mv[0:nr, 0:2], data=s12[0:nr, 0:2], op0=nl.multiply,
                               operand0=1.0 / D)
            m2 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=m2[0:nr, 0:1], data1=mv[0:nr, 0:1], data2=mv[0:nr, 0:1],
                               op=nl.multiply)
            nisa.tensor_tensor(dst=mv[0:nr, 1:2], data1=mv[0:nr, 1:2], data2=m2[0:nr, 0:1],
                               op=nl.subtract)
        nisa.tensor_scalar(dst=rstd[0:nr, 0:1], data=mv[0:nr, 1:2], op0=nl.add, operand0=eps)
        nisa.activation(dst=rstd[0:nr, 0:1], op=nl.rsqrt, data=rstd[0:nr, 0:1])

    def stage_norm(t):
        """y = (x - mean) * rstd"""
        r0, nr = rows(t)
        xt, y, mv, rstd = xbufs[t % BUFS], mbufs[t % BUFS], mvs[t % BUFS], rstds[t % BUFS]
        if NORM_ENGINE == "scalar":
            nmr = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)     # -mean * rstd
            nisa.tensor_scalar(dst=nmr[0:nr, 0:1], data=mv[0:nr, 0:1], op0=nl.multiply,
                               operand0=rstd[0:nr, 0:1], op1=nl.multiply, operand1=-1.0)
            nisa.activation(dst=y[0:nr, 0:D], op=nl.copy, data=xt[0:nr, 0:D],
                            scale=rstd[0:nr, 0:1], bias=nmr[0:nr, 0:1])
        else:
            nisa.tensor_scalar(dst=y[0:nr, 0:D], data=xt[0:nr, 0:D], op0=nl.subtract,
                               operand0=mv[0:nr, 0:1], op1=nl.multiply, operand1=rstd[0:nr, 0:1],
                               engine=_engine(NORM_ENGINE))

    def stage_out(t):
        """* gamma + beta, store"""
        r0, nr = rows(t)
        y, yo = mbufs[t % BUFS], obufs[t % BUFS]
        _rowwise(G_ENGINE, y, y, g_all, nl.multiply, nr, D)
        _rowwise(B_ENGINE, yo, y, b_all, nl.add, nr, D)
        nisa.dma_copy(dst=out[r0:r0 + nr, 0:D], src=yo[0:nr, 0:D])

    # SKEW = 1 software-pipelines the three stages over consecutive tiles, so
    # each engine's in-order queue holds work of different tiles (statistics
    # of tile s, normalisation of s - 1, gamma/beta of s - 2) instead of
    # waiting for the previous stage of the same tile.
    lag = 1 if SKEW else 0
    for s in range(ntiles + 2 * lag):
        if s < ntiles:
            stage_stats(s)
        if 0 <= s - lag < ntiles:
            stage_norm(s - lag)
        if 0 <= s - 2 * lag < ntiles:
            stage_out(s - 2 * lag)
    return out


def layernorm_ref(x, gamma, beta, eps=1e-5):
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)
