"""Layer norm over the last dim, current API, in two forms:

layernorm       mean and variance with tensor_reduce and tensor_scalar
layernorm_bn    mean and variance with bn_stats (<= 512 elements per call)
                and bn_aggr; centring and scaling in one tensor_scalar

out = (x - mean) / sqrt(var + eps) * gamma + beta; x (N, D), gamma/beta (D,).
"""
import math

import nki
import nki.language as nl
import nki.isa as nisa


def broadcast_rows(vec, D, P=128):
    """(D,) HBM vector -> (P, D) SBUF tile with the vector in every partition:
    the row is loaded once, then one SBUF-to-SBUF DMA repeats it across the
    partitions (the engines only reach their own partitions)."""
    row = nl.ndarray((1, D), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=vec.reshape((1, D)))
    full = nl.ndarray((P, D), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=full, src=row.broadcast(0, P))
    return full


def scale_shift(y, gamma_all, beta_all, out_dtype, nr, D):
    """y * gamma + beta, rows [0, nr)."""
    t = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t[0:nr, 0:D], data1=y[0:nr, 0:D], data2=gamma_all[0:nr, 0:D],
                       op=nl.multiply)
    o = nl.ndarray((128, D), dtype=out_dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=o[0:nr, 0:D], data1=t[0:nr, 0:D], data2=beta_all[0:nr, 0:D],
                       op=nl.add)
    return o


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    gamma_all = broadcast_rows(gamma, D)
    beta_all = broadcast_rows(beta, D)

    for t in nl.affine_range(math.ceil(N / 128)):
        r0 = t * 128
        nr = min(128, N - r0)
        xt = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[0:nr, 0:D], src=x[r0:r0 + nr, 0:D])

        mean = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=mean[0:nr, 0:1], op=nl.add, data=xt[0:nr, 0:D], axis=1,
                           keepdims=True)
        nisa.tensor_scalar(dst=mean[0:nr, 0:1], data=mean[0:nr, 0:1], op0=nl.multiply,
                           operand0=1.0 / D)
        cen = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=cen[0:nr, 0:D], data=xt[0:nr, 0:D], op0=nl.subtract,
                           operand0=mean[0:nr, 0:1])
        sq = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[0:nr, 0:D], op=nl.square, data=cen[0:nr, 0:D])
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=rstd[0:nr, 0:1], op=nl.add, data=sq[0:nr, 0:D], axis=1,
                           keepdims=True)
        nisa.tensor_scalar(dst=rstd[0:nr, 0:1], data=rstd[0:nr, 0:1], op0=nl.multiply,
                           operand0=1.0 / D, op1=nl.add, operand1=eps)
        nisa.activation(dst=rstd[0:nr, 0:1], op=nl.rsqrt, data=rstd[0:nr, 0:1])
        y = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y[0:nr, 0:D], data=cen[0:nr, 0:D], op0=nl.multiply,
                           operand0=rstd[0:nr, 0:1])
        o = scale_shift(y, gamma_all, beta_all, x.dtype, nr, D)
        nisa.dma_copy(dst=out[r0:r0 + nr, 0:D], src=o[0:nr, 0:D])
    return out


@nki.jit
def layernorm_bn(x, gamma, beta, eps=1e-5):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    FMAX = nl.tile_size.bn_stats_fmax
    n_chunks = math.ceil(D / FMAX)
    gamma_all = broadcast_rows(gamma, D)
    beta_all = broadcast_rows(beta, D)

    for t in nl.affine_range(math.ceil(N / 128)):
        r0 = t * 128
        nr = min(128, N - r0)
        xt = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[0:nr, 0:D], src=x[r0:r0 + nr, 0:D])

        stats = nl.ndarray((128, 6 * n_chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(n_chunks):
            c0 = c * FMAX
            w = min(FMAX, D - c0)
            nisa.bn_stats(dst=stats[0:nr, c * 6:(c + 1) * 6], data=xt[0:nr, c0:c0 + w])
        mv = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv[0:nr, 0:2], data=stats[0:nr, 0:6 * n_chunks])
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[0:nr, 0:1], data=mv[0:nr, 1:2], op0=nl.add, operand0=eps)
        nisa.activation(dst=rstd[0:nr, 0:1], op=nl.rsqrt, data=rstd[0:nr, 0:1])
        y = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y[0:nr, 0:D], data=xt[0:nr, 0:D], op0=nl.subtract,
                           operand0=mv[0:nr, 0:1], op1=nl.multiply, operand1=rstd[0:nr, 0:1])
        o = scale_shift(y, gamma_all, beta_all, x.dtype, nr, D)
        nisa.dma_copy(dst=out[r0:r0 + nr, 0:D], src=o[0:nr, 0:D])
    return out
