"""kforge library: layer norm over the last dim, current NKI API.

out = (x - mean) / sqrt(var + eps) * gamma + beta; x (N, D), gamma and beta
(D,).  Per 128-row tile:
  statistics  mean and variance: VectorE bn_stats/bn_aggr over the first
              columns, ScalarE sums of x and x^2 (activation_reduce) over the
              last STATS_ACT of them; rstd, diag(rstd) and -mean * rstd
  x * gamma   y, on VectorE (the first XG_VEC of the columns) and GpSimd (the
              rest); it does not need the statistics
  TensorE     per 512-column chunk, into PSUM:
                diag(rstd) @ y                       = rstd * x * gamma
              + [-mean * rstd, 1]^T @ [gamma; beta]  = beta - mean * rstd * gamma
              the per-row scaling and both per-column vectors in two matmuls
              instead of elementwise passes
  evacuation  PSUM -> SBUF on ScalarE (VectorE has the statistics), into y;
              the store
rstd is rounded to the matmul dtype once and -mean * rstd is formed from the
rounded value, so the two PSUM terms share one scale: the sum is
rstd' * (x * gamma - mean * gamma) + beta.
BUFS: x tiles loaded ahead (loads run BUFS - 1 tiles ahead) and y tiles in
flight.  The stages are software-pipelined: the statistics and x * gamma of
tile s are issued before the matmuls of tile s - 1.
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
    "supports": ["N >= 1", "D >= 2", "7 * D * DTYPE_BYTES + 4096 <= SBUF_BYTES - 8192"],
    "reference_shapes": [[4096, 8192], [8192], [8192]],
    "test_shapes": [[200, 700], [700], [700]],
    "tunables": {
        "BUFS": {"values": [2, 3, 4], "default": 3,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "XG_VEC": {"values": [0, 0.25, 0.375, 0.5, 1], "default": 1,
                   "addresses": {"slow_engine": "up", "instruction_overhead": "down"}},
        "STATS_ACT": {"values": [0, 0.25, 0.375, 0.5], "default": 0,
                      "addresses": {"engine_waits_on_dma": "any", "instruction_overhead": "up"}}
    },
    "flops": 0,
    "constraints": ["(2 * BUFS + 3) * D * DTYPE_BYTES + 4096 <= SBUF_BYTES - 8192"]
}


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
def layernorm(x, gamma, beta, eps=1e-5, BUFS=3, XG_VEC=1, STATS_ACT=0):
    N, D = x.shape
    assert tuple(gamma.shape) == (D,) and tuple(beta.shape) == (D,)
    P = nl.tile_size.pmax
    MM = nl.tile_size.psum_fmax
    FMAX = nl.tile_size.bn_stats_fmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    mdt = x.dtype
    g_all = _spread_rows(gamma, D, P)
    gb = nl.ndarray((2, D), dtype=mdt, buffer=nl.sbuf)            # rows: gamma, beta
    nisa.dma_copy(dst=gb[0:1, 0:D], src=gamma.reshape((1, D)))
    nisa.dma_copy(dst=gb[1:2, 0:D], src=beta.reshape((1, D)))
    ident = nl.ndarray((P, P), dtype=mdt, buffer=nl.sbuf)
    nisa.dma_copy(dst=ident, src=nl.shared_identity_matrix(P, dtype=mdt))
    nst = math.ceil(D / FMAX)
    nch = math.ceil(D / MM)
    hv = min(D, int(D * XG_VEC + 0.5))      # x * gamma columns [0, hv) on VectorE
    xbufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    ybufs = [nl.ndarray((P, D), dtype=mdt, buffer=nl.sbuf) for _ in range(BUFS)]
    diags = [nl.ndarray((P, P), dtype=mdt, buffer=nl.sbuf) for _ in range(2)]
    rows2 = [nl.ndarray((2, P), dtype=mdt, buffer=nl.sbuf) for _ in range(2)]
    scs = [nl.ndarray((P, 3), dtype=mdt, buffer=nl.sbuf) for _ in range(2)]
    for sc in scs:
        nisa.memset(dst=sc[0:P, 2:3], value=1.0)
    nbv = nst - int(nst * STATS_ACT + 0.5)  # bn_stats chunks on VectorE
    dv = min(D, nbv * FMAX)                 # their columns; ScalarE sums the rest
    junk = nl.ndarray((P, max(D - dv, 1)), dtype=x.dtype, buffer=nl.sbuf)
    NPS = 4
    pss = [nl.ndarray((P, MM), dtype=nl.float32, buffer=nl.psum) for _ in range(NPS)]
    pts = [nl.ndarray((2, P), dtype=mdt, buffer=nl.psum) for _ in range(2)]   # transposes keep the dtype
    ntiles = math.ceil(N / P)

    def rows(t):
        return t * P, min(P, N - t * P)

    def stage_load(t):
        r0, nr = rows(t)
        nisa.dma_copy(dst=xbufs[t % BUFS][0:nr, 0:D], src=x[r0:r0 + nr, 0:D])

    def stage_stats(t):
        """mean and variance of tile t; diag(rstd) and [-mean * rstd, 1]"""
        r0, nr = rows(t)
        xt, dg, sc = xbufs[t % BUFS], diags[t % 2], scs[t % 2]
        mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)   # mean, var (or E[x^2])
        if dv > 0:
            stats = nl.ndarray((P, 6 * nbv), dtype=nl.float32, buffer=nl.sbuf)
            for c in nl.affine_range(nbv):
                c0 = c * FMAX
                w = min(FMAX, dv - c0)
                nisa.bn_stats(dst=stats[0:nr, c * 6:(c + 1) * 6], data=xt[0:nr, c0:c0 + w])
            nisa.bn_aggr(dst=mv[0:nr, 0:2], data=stats[0:nr, 0:6 * nbv])
        if dv < D:
            # ScalarE: sum(x) / D and sum(x^2) / D over columns [dv, D)
            s12 = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=junk[0:nr, 0:D - dv], op=nl.copy, data=xt[0:nr, dv:D],
                                   scale=1.0 / D, reduce_op=nl.add, reduce_res=s12[0:nr, 0:1])
            nisa.activation_reduce(dst=junk[0:nr, 0:D - dv], op=nl.square, data=xt[0:nr, dv:D],
                                   scale=1.0 / math.sqrt(D), reduce_op=nl.add,
                                   reduce_res=s12[0:nr, 1:2])
            if dv > 0:
                # bn part -> (mean, E[x^2]) over its columns, weighted by dv / D
                nisa.tensor_scalar(dst=mv[0:nr, 1:2], data=mv[0:nr, 0:1], op0=nl.multiply,
                                   operand0=mv[0:nr, 0:1], op1=nl.add, operand1=mv[0:nr, 1:2])
                nisa.scalar_tensor_tensor(dst=mv[0:nr, 0:2], data=mv[0:nr, 0:2], op0=nl.multiply,
                                          operand0=dv / D, op1=nl.add, operand1=s12[0:nr, 0:2])
            else:
                nisa.tensor_copy(dst=mv[0:nr, 0:2], src=s12[0:nr, 0:2])
            # var = E[x^2] - mean^2
            nisa.tensor_scalar(dst=mv[0:nr, 1:2], data=mv[0:nr, 0:1], op0=nl.multiply,
                               operand0=mv[0:nr, 0:1], op1=nl.subtract, operand1=mv[0:nr, 1:2],
                               reverse1=True)
        # rstd = (max(var, 0) + eps) ^ -0.5, rounded to the matmul dtype
        # (sc column 0); -mean * rstd from the rounded value (column 1);
        # column 2 holds ones
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[0:nr, 0:1], data=mv[0:nr, 1:2], op0=nl.maximum, operand0=0.0,
                           op1=nl.add, operand1=eps)
        nisa.tensor_scalar(dst=sc[0:nr, 0:1], data=rstd[0:nr, 0:1], op0=nl.power, operand0=-0.5)
        nisa.tensor_scalar(dst=sc[0:nr, 1:2], data=mv[0:nr, 0:1], op0=nl.multiply,
                           operand0=sc[0:nr, 0:1], op1=nl.multiply, operand1=-1.0)
        nisa.tensor_scalar(dst=dg[0:nr, 0:nr], data=ident[0:nr, 0:nr], op0=nl.multiply,
                           operand0=sc[0:nr, 0:1])

    def stage_xg(t):
        """y = x * gamma (independent of the statistics)"""
        r0, nr = rows(t)
        xt, y = xbufs[t % BUFS], ybufs[t % BUFS]
        if hv > 0:
            nisa.tensor_tensor(dst=y[0:nr, 0:hv], data1=xt[0:nr, 0:hv], data2=g_all[0:nr, 0:hv],
                               op=nl.multiply, engine=nisa.vector_engine)
        if hv < D:
            nisa.tensor_tensor(dst=y[0:nr, hv:D], data1=xt[0:nr, hv:D], data2=g_all[0:nr, hv:D],
                               op=nl.multiply, engine=nisa.gpsimd_engine)

    def stage_mm(t):
        """out = diag(rstd) @ y + [-mean * rstd, 1]^T @ [gamma; beta] per 512
        columns, evacuated into y's own columns (the matmul was their last
        reader); then the store"""
        r0, nr = rows(t)
        y, dg, sc, r2 = ybufs[t % BUFS], diags[t % 2], scs[t % 2], rows2[t % 2]
        pt = pts[t % 2]
        nisa.nc_transpose(dst=pt[0:2, 0:nr], data=sc[0:nr, 1:3])
        nisa.activation(dst=r2[0:2, 0:nr], op=nl.copy, data=pt[0:2, 0:nr])
        for c in range(nch):
            c0 = c * MM
            w = min(MM, D - c0)
            ps = pss[(t * nch + c) % NPS]
            nisa.nc_matmul(dst=ps[0:nr, 0:w], stationary=dg[0:nr, 0:nr], moving=y[0:nr, c0:c0 + w])
            nisa.nc_matmul(dst=ps[0:nr, 0:w], stationary=r2[0:2, 0:nr], moving=gb[0:2, c0:c0 + w])
            nisa.activation(dst=y[0:nr, c0:c0 + w], op=nl.copy, data=ps[0:nr, 0:w])
        nisa.dma_copy(dst=out[r0:r0 + nr, 0:D], src=y[0:nr, 0:D])

    # Loads run LA = BUFS - 1 tiles ahead and are issued before the stores of
    # the tiles between, so a store waiting for its data does not hold the
    # DMA engines a prefetch could use.  The statistics of tile s are issued
    # before the matmuls of tile s - 1, so each in-order engine queue holds
    # work of two tiles instead of waiting on the previous stage.
    LA = BUFS - 1
    for t in range(min(LA, ntiles)):
        stage_load(t)
    lag = 1
    for s in range(ntiles + lag):
        if s + LA < ntiles:
            stage_load(s + LA)
        if s < ntiles:
            stage_stats(s)
            stage_xg(s)
        if 0 <= s - lag < ntiles:
            stage_mm(s - lag)
    return out


def layernorm_ref(x, gamma, beta, eps=1e-5):
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)
