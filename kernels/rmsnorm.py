"""kforge library: RMS norm over the last dim, current NKI API.

out = x / sqrt(mean(x^2, axis=-1) + eps) * g, x (N, D), g (D,).
g is spread over the 128 partitions once (a ones-vector matmul on TensorE).
Per 128-row tile: mean(x^2) comes from ScalarE (square + sum in one
activation_reduce) or VectorE (bn_stats/bn_aggr: var + mean^2; or squares
and a row sum), per STATS;
x * g runs on G_ENGINE (it does not need the statistics), and the final
per-row scaling runs on SCALE_ENGINE.  Loads, statistics, x * g, scaling and
stores go in COLS-wide column chunks.  BUFS rotating buffer sets let the next
tiles load while one is computed, and with BUFS >= 2 the three stages
(load + statistics, x * g, scale + store) are software-pipelined over
consecutive tiles; MID_BF16 keeps x * g in the input's 16-bit dtype (less
SBUF, faster VectorE) instead of float32.
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
    "test_shapes": [[200, 2100], [2100]],
    "tunables": {
        "BUFS": {"values": [1, 2, 3, 4], "default": 2,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "G_ENGINE": {"values": ["vector", "gpsimd", "split"], "default": "split",
                     "addresses": {"slow_engine": "any", "buffer_pressure": "any"}},
        "SCALE_ENGINE": {"values": ["vector", "gpsimd", "scalar"], "default": "vector",
                         "addresses": {"slow_engine": "any", "buffer_pressure": "any",
                                       "engine_waits_on_dma": "any"}},
        "STATS": {"values": ["scalar", "bn", "vector"], "default": "scalar",
                  "addresses": {"slow_engine": "any", "engine_waits_on_dma": "any"}},
        "MID_BF16": {"values": [0, 1], "default": 0,
                     "addresses": {"buffer_pressure": "up", "slow_engine": "up"}},
        "COLS": {"values": [2048, 4096, 8192], "default": 8192,
                 "addresses": {"engine_waits_on_dma": "down", "buffer_pressure": "down",
                               "dma_small_transfers": "up", "instruction_overhead": "up"}}
    },
    "flops": 0,
    "constraints": ["BUFS * D * (2 * DTYPE_BYTES + 4 - MID_BF16 * (4 - DTYPE_BYTES)) + D * DTYPE_BYTES + (STATS != \"bn\") * min(COLS, D) * DTYPE_BYTES <= SBUF_BYTES - 8192",
                    "COLS < D or COLS == 8192",
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
def rmsnorm(x, g, eps=1e-6, BUFS=2, G_ENGINE="split", SCALE_ENGINE="vector", MID_BF16=0,
            STATS="scalar", COLS=8192):
    N, D = x.shape
    assert tuple(g.shape) == (D,)
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g_all = _spread_rows(g, D, P)
    FMAX = nl.tile_size.bn_stats_fmax
    nch = math.ceil(D / COLS)
    chunks = [(c * COLS, min(COLS, D - c * COLS)) for c in range(nch)]
    nst = 0                      # bn_stats calls per tile (<= FMAX columns each)
    for c0, w in chunks:
        nst += math.ceil(w / FMAX)
    mdt = x.dtype if MID_BF16 else nl.float32
    ntiles = math.ceil(N / P)
    xbufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    mbufs = [nl.ndarray((P, D), dtype=mdt, buffer=nl.sbuf) for _ in range(BUFS)]
    obufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    if STATS != "bn":
        # the squares themselves are not needed, only their row sums: one
        # scratch chunk that only the STATS engine writes
        sq = nl.ndarray((P, min(COLS, D)), dtype=x.dtype, buffer=nl.sbuf)
    eps_t = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=eps_t, value=eps)
    rstds = []                   # rstd of tile t, released after its scaling

    def rows(t):
        return t * P, min(P, N - t * P)

    def stage_stats(t):
        """load tile t chunk by chunk; rstd = 1 / sqrt(mean(x^2) + eps)"""
        r0, nr = rows(t)
        xt = xbufs[t % BUFS]
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        if STATS == "bn":
            # VectorE bn_stats/bn_aggr: mean(x^2) = var + mean^2
            stats = nl.ndarray((P, 6 * nst), dtype=nl.float32, buffer=nl.sbuf)
            k = 0
            for c0, w in chunks:
                nisa.dma_copy(dst=xt[0:nr, c0:c0 + w], src=x[r0:r0 + nr, c0:c0 + w])
                for b0 in range(c0, c0 + w, FMAX):
                    bw = min(FMAX, c0 + w - b0)
                    nisa.bn_stats(dst=stats[0:nr, k * 6:(k + 1) * 6], data=xt[0:nr, b0:b0 + bw])
                    k += 1
            mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.bn_aggr(dst=mv[0:nr, 0:2], data=stats[0:nr, 0:6 * nst])
            ms = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=ms[0:nr, 0:1], data1=mv[0:nr, 0:1], data2=mv[0:nr, 0:1],
                               op=nl.multiply)
            nisa.tensor_tensor(dst=ms[0:nr, 0:1], data1=ms[0:nr, 0:1], data2=mv[0:nr, 1:2],
                               op=nl.add)
            nisa.activation(dst=rstd[0:nr, 0:1], op=nl.rsqrt, data=ms[0:nr, 0:1],
                            bias=eps_t[0:nr, 0:1])
        else:
            # row sums of x^2 per chunk: ScalarE squares and sums in one pass;
            # VectorE squares, then sums
            part = nl.ndarray((P, nch), dtype=nl.float32, buffer=nl.sbuf)
            for c in range(nch):
                c0, w = chunks[c]
                nisa.dma_copy(dst=xt[0:nr, c0:c0 + w], src=x[r0:r0 + nr, c0:c0 + w])
                if STATS == "vector":
                    nisa.tensor_tensor(dst=sq[0:nr, 0:w], data1=xt[0:nr, c0:c0 + w],
                                       data2=xt[0:nr, c0:c0 + w], op=nl.multiply)
                    nisa.tensor_reduce(dst=part[0:nr, c:c + 1], op=nl.add, data=sq[0:nr, 0:w],
                                       axis=1, keepdims=True)
                else:
                    nisa.activation_reduce(dst=sq[0:nr, 0:w], op=nl.square,
                                           data=xt[0:nr, c0:c0 + w], reduce_op=nl.add,
                                           reduce_res=part[0:nr, c:c + 1])
            ss = part
            if nch > 1:
                # the chunks' partial sums, added on the engine that made them
                # (a VectorE instruction here would hold NC-v2's VectorE/GpSimd
                # SBUF port for the load of this tile)
                ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                if STATS == "vector":
                    nisa.tensor_reduce(dst=ss[0:nr, 0:1], op=nl.add, data=part[0:nr, 0:nch],
                                       axis=1, keepdims=True)
                else:
                    junk = nl.ndarray((P, nch), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.activation_reduce(dst=junk[0:nr, 0:nch], op=nl.copy,
                                           data=part[0:nr, 0:nch], reduce_op=nl.add,
                                           reduce_res=ss[0:nr, 0:1])
            # rsqrt(sum / D + eps) in one ScalarE instruction
            nisa.activation(dst=rstd[0:nr, 0:1], op=nl.rsqrt, data=ss[0:nr, 0:1],
                            scale=1.0 / D, bias=eps_t[0:nr, 0:1])
        rstds.append(rstd)

    def stage_gain(t):
        """x * g on G_ENGINE (does not need the statistics)"""
        r0, nr = rows(t)
        xt, xg = xbufs[t % BUFS], mbufs[t % BUFS]
        for c0, w in chunks:
            if G_ENGINE == "split":
                # half the columns on VectorE, half on GpSimd
                h = c0 + w // 2
                if h > c0:
                    nisa.tensor_tensor(dst=xg[0:nr, c0:h], data1=xt[0:nr, c0:h],
                                       data2=g_all[0:nr, c0:h], op=nl.multiply,
                                       engine=nisa.vector_engine)
                nisa.tensor_tensor(dst=xg[0:nr, h:c0 + w], data1=xt[0:nr, h:c0 + w],
                                   data2=g_all[0:nr, h:c0 + w], op=nl.multiply,
                                   engine=nisa.gpsimd_engine)
            else:
                nisa.tensor_tensor(dst=xg[0:nr, c0:c0 + w], data1=xt[0:nr, c0:c0 + w],
                                   data2=g_all[0:nr, c0:c0 + w], op=nl.multiply,
                                   engine=_engine(G_ENGINE))

    def stage_out(t):
        """(x * g) * rstd on SCALE_ENGINE, store chunk by chunk"""
        r0, nr = rows(t)
        xg, yo = mbufs[t % BUFS], obufs[t % BUFS]
        rstd = rstds[t]
        rstds[t] = None
        for c0, w in chunks:
            if SCALE_ENGINE == "scalar":
                nisa.activation(dst=yo[0:nr, c0:c0 + w], op=nl.copy, data=xg[0:nr, c0:c0 + w],
                                scale=rstd[0:nr, 0:1])
            else:
                nisa.tensor_scalar(dst=yo[0:nr, c0:c0 + w], data=xg[0:nr, c0:c0 + w],
                                   op0=nl.multiply, operand0=rstd[0:nr, 0:1],
                                   engine=_engine(SCALE_ENGINE))
            nisa.dma_copy(dst=out[r0:r0 + nr, c0:c0 + w], src=yo[0:nr, c0:c0 + w])

    # Software pipeline (BUFS >= 2): iteration s issues the loads and
    # statistics of tile s, the scaling and stores of tile s - 2 and x * g of
    # tile s - 1, so no engine's in-order queue (nor, on NC-v2, the
    # VectorE/GpSimd SBUF port) waits for an earlier stage of the same tile.
    # With one buffer set the load of tile s would overwrite tile s - 1
    # before x * g read it, so BUFS = 1 runs the stages tile by tile.
    lag = 1 if BUFS >= 2 else 0
    for s in range(ntiles + 2 * lag):
        if s < ntiles:
            stage_stats(s)
        if lag and 0 <= s - 2 < ntiles:
            stage_out(s - 2)
        if 0 <= s - lag < ntiles:
            stage_gain(s - lag)
        if not lag and s < ntiles:
            stage_out(s)
    return out


def rmsnorm_ref(x, g, eps=1e-6):
    x = np.asarray(x, dtype=np.float64)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * np.asarray(g, dtype=np.float64)
