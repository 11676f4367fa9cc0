"""Layer norm over the last dim, legacy API, in two forms:

layernorm       mean and variance with nl.mean and tile arithmetic
layernorm_bn    mean and variance with nisa.bn_stats / nisa.bn_aggr, and the
                normalisation in one nisa.tensor_scalar

out = (x - mean) / sqrt(var + eps) * gamma + beta; x (N, D), gamma/beta (D,).
"""
import math

import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    i_one = nl.arange(1)[:, None]
    gamma_all = nl.load(gamma.reshape((1, D))[i_one, i_f]).broadcast_to((128, D))
    beta_all = nl.load(beta.reshape((1, D))[i_one, i_f]).broadcast_to((128, D))

    for t in nl.affine_range(math.ceil(N / 128)):
        live = (t * 128 + i_p < N)
        xt = nl.load(x[t * 128 + i_p, i_f], mask=live, dtype=nl.float32)
        mean = nl.mean(xt, axis=1, keepdims=True)
        centered = xt - mean
        var = nl.mean(nl.square(centered), axis=1, keepdims=True)
        rstd = nl.rsqrt(var + eps)
        y = centered * rstd * gamma_all + beta_all
        nl.store(out[t * 128 + i_p, i_f], value=y, mask=live)
    return out


@nki.jit
def layernorm_bn(x, gamma, beta, eps=1e-5):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    FMAX = nl.tile_size.bn_stats_fmax
    n_chunks = math.ceil(D / FMAX)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    i_one = nl.arange(1)[:, None]
    gamma_all = nl.load(gamma.reshape((1, D))[i_one, i_f]).broadcast_to((128, D))
    beta_all = nl.load(beta.reshape((1, D))[i_one, i_f]).broadcast_to((128, D))

    for t in nl.affine_range(math.ceil(N / 128)):
        live = (t * 128 + i_p < N)
        xt = nl.load(x[t * 128 + i_p, i_f], mask=live)
        stats = nl.ndarray((128, 6 * n_chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(n_chunks):
            width = min(FMAX, D - c * FMAX)
            i_c = nl.arange(width)[None, :]
            i_s = nl.arange(6)[None, :]
            stats[i_p, c * 6 + i_s] = nisa.bn_stats(xt[i_p, c * FMAX + i_c], mask=live,
                                                    dtype=nl.float32)
        mv = nisa.bn_aggr(stats, mask=live)                # (128, 2): mean, var
        mean = mv[i_p, 0]
        rstd = nl.rsqrt(mv[i_p, 1] + eps)
        y = nisa.tensor_scalar(xt, op0=np.subtract, operand0=mean,
                               op1=np.multiply, operand1=rstd, dtype=nl.float32)
        y = y * gamma_all + beta_all
        nl.store(out[t * 128 + i_p, i_f], value=y, mask=live)
    return out
