"""Single-head attention forward with an online (flash) softmax, current API.

q and k are (d, S) (head dim on partitions, d <= 128), v is (S, d); out is
(S, d) = softmax(q.T @ k * scale [+ causal mask]) @ v, S a multiple of 128.
Each 128-row query tile walks the key tiles once with a running max m, a
running denominator l and an unnormalised accumulator; with causal=True the
tiles above the diagonal are skipped and the diagonal tile gets an additive
lower-triangular mask built at trace time with NumPy (nl.shared_constant).
"""
import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

NEG = -30000.0
T = 128


@nki.jit
def flash_fwd(q, k, v, causal=False):
    d, S = q.shape
    assert tuple(k.shape) == (d, S) and tuple(v.shape) == (S, d)
    assert d <= 128 and S % T == 0
    scale = 1.0 / (d ** 0.5)
    out = nl.ndarray((S, d), dtype=q.dtype, buffer=nl.shared_hbm)

    if causal:
        tri = np.where(np.arange(T)[:, None] >= np.arange(T)[None, :], 0.0, NEG)
        tri_hbm = nl.shared_constant(tri.astype(np.float32))
        tri_tile = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tri_tile, src=tri_hbm)

    for qi in nl.affine_range(S // T):
        q_tile = nl.ndarray((d, T), dtype=q.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_tile, src=q[0:d, qi * T:(qi + 1) * T])
        m_run = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
        l_run = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((T, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m_run, value=NEG)
        nisa.memset(dst=l_run, value=0.0)
        nisa.memset(dst=acc, value=0.0)

        n_kv = qi + 1 if causal else S // T
        for kj in nl.sequential_range(n_kv):
            k_tile = nl.ndarray((d, T), dtype=k.dtype, buffer=nl.sbuf)
            v_tile = nl.ndarray((T, d), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=k_tile, src=k[0:d, kj * T:(kj + 1) * T])
            nisa.dma_copy(dst=v_tile, src=v[kj * T:(kj + 1) * T, 0:d])

            s_ps = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_ps, stationary=q_tile, moving=k_tile)        # (T_q, T_k)
            s = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=s, data=s_ps, op0=nl.multiply, operand0=scale)
            if causal and kj == qi:
                nisa.tensor_tensor(dst=s, data1=s, data2=tri_tile, op=nl.add)

            row_max = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=s, axis=1, keepdims=True)
            m_new = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=m_new, data1=m_run, data2=row_max, op=nl.maximum)
            neg_m = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg_m, data=m_new, op0=nl.multiply, operand0=-1.0)

            p = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=p, op=nl.exp, data=s, bias=neg_m)
            row_sum = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=row_sum, op=nl.add, data=p, axis=1, keepdims=True)
            alpha = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=alpha, op=nl.exp, data=m_run, bias=neg_m)

            nisa.tensor_tensor(dst=l_run, data1=l_run, data2=alpha, op=nl.multiply)
            nisa.tensor_tensor(dst=l_run, data1=l_run, data2=row_sum, op=nl.add)

            p_t_ps = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=p_t_ps, data=p)
            p_t = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=p_t, src=p_t_ps)
            pv = nl.ndarray((T, d), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=pv, stationary=p_t, moving=v_tile)             # (T_q, d)

            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.multiply, operand0=alpha)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=pv, op=nl.add)
            nisa.tensor_copy(dst=m_run, src=m_new)

        inv_l = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_l, data=l_run)
        o = nl.ndarray((T, d), dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=acc, op0=nl.multiply, operand0=inv_l)
        nisa.dma_copy(dst=out[qi * T:(qi + 1) * T, 0:d], src=o)
    return out
