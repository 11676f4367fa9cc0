"""RMS norm over the last dim: out = x / sqrt(mean(x^2) + eps) * g, current API.

x is (N, D), g is (D,).  g is spread over the 128 partitions once with a
ones-vector matmul on the tensor engine; rows are tiled by 128 with min().
"""
import math

import nki
import nki.language as nl
import nki.isa as nisa


def broadcast_rows(vec, D, P=128):
    """(D,) HBM vector -> (P, D) fp32 SBUF tile with the vector in every
    partition: ones(1, P).T @ vec(1, D), 512 columns per matmul."""
    row = nl.ndarray((1, D), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=vec.reshape((1, D)))
    ones = nl.ndarray((1, P), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    full = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
    for c in nl.affine_range(math.ceil(D / 512)):
        c0 = c * 512
        w = min(512, D - c0)
        ps = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps[0:P, 0:w], stationary=ones, moving=row[0:1, c0:c0 + w])
        nisa.tensor_copy(dst=full[0:P, c0:c0 + w], src=ps[0:P, 0:w])
    return full


@nki.jit
def rmsnorm(x, g, eps=1e-6):
    N, D = x.shape
    assert g.shape[0] == D
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g_all = broadcast_rows(g, D)

    for t in nl.affine_range(math.ceil(N / 128)):
        r0 = t * 128
        nr = min(128, N - r0)
        xt = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[0:nr, 0:D], src=x[r0:r0 + nr, 0:D])

        sq = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[0:nr, 0:D], op=nl.square, data=xt[0:nr, 0:D])
        ssum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=ssum[0:nr, 0:1], op=nl.add, data=sq[0:nr, 0:D], axis=1,
                           keepdims=True)
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[0:nr, 0:1], data=ssum[0:nr, 0:1], op0=nl.multiply,
                           operand0=1.0 / D, op1=nl.add, operand1=eps)
        nisa.activation(dst=rstd[0:nr, 0:1], op=nl.rsqrt, data=rstd[0:nr, 0:1])

        y = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y[0:nr, 0:D], data=xt[0:nr, 0:D], op0=nl.multiply,
                           operand0=rstd[0:nr, 0:1])
        yo = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=yo[0:nr, 0:D], data1=y[0:nr, 0:D], data2=g_all[0:nr, 0:D],
                           op=nl.multiply)
        nisa.dma_copy(dst=out[r0:r0 + nr, 0:D], src=yo[0:nr, 0:D])
    return out
