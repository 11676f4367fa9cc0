"""Single-head attention forward with an online (flash) softmax, legacy API.

q and k are (d, S) (head dim on partitions, d <= 128), v is (S, d); the
output is (S, d) = softmax(q.T @ k * scale [+ causal mask]) @ v.  S is a
multiple of 128.  Each 128-row query tile walks the key tiles once, keeping a
running max m, a running denominator l and an unnormalised accumulator.
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

NEG = -30000.0


@nki.jit
def flash_fwd(q, k, v, causal=False):
    d, S = q.shape
    assert k.shape == (d, S) and v.shape == (S, d)
    assert d <= 128 and S % 128 == 0
    T = 128
    scale = 1.0 / (d ** 0.5)
    out = nl.ndarray((S, d), dtype=q.dtype, buffer=nl.shared_hbm)

    i_d = nl.arange(d)[:, None]
    i_t = nl.arange(T)[None, :]
    i_p = nl.arange(T)[:, None]
    i_hd = nl.arange(d)[None, :]

    for qi in nl.affine_range(S // T):
        q_tile = nl.load(q[i_d, qi * T + i_t], dtype=nl.float32)
        m_run = nl.full((T, 1), NEG, dtype=nl.float32)
        l_run = nl.zeros((T, 1), dtype=nl.float32)
        acc = nl.zeros((T, d), dtype=nl.float32)

        n_kv = qi + 1 if causal else S // T
        for kj in nl.sequential_range(n_kv):
            k_tile = nl.load(k[i_d, kj * T + i_t], dtype=nl.float32)
            v_tile = nl.load(v[kj * T + i_p, i_hd], dtype=nl.float32)

            s = nl.multiply(nl.matmul(q_tile, k_tile, transpose_x=True), scale)   # (T, T)
            if causal and kj == qi:
                q_pos, k_pos = nl.mgrid[0:T, 0:T]
                s = nisa.affine_select(pred=(q_pos >= k_pos), on_true_tile=s,
                                       on_false_value=NEG, dtype=nl.float32)
            m_new = nl.maximum(m_run, nl.max(s, axis=1, keepdims=True))
            neg_m = nl.multiply(m_new, -1.0)
            # exp(x - m) as one ScalarE activation with a per-row bias
            p = nisa.activation(op=nl.exp, data=s, bias=neg_m)
            alpha = nisa.activation(op=nl.exp, data=m_run, bias=neg_m)
            l_run[...] = l_run * alpha + nl.sum(p, axis=1, keepdims=True)
            p_t = nl.copy(nl.transpose(p))                                         # (T_k, T_q)
            pv = nl.matmul(p_t, v_tile, transpose_x=True)                          # (T_q, d)
            acc[...] = acc * alpha + pv
            m_run[...] = m_new

        o = nl.divide(acc, l_run, dtype=out.dtype)
        nl.store(out[qi * T + i_p, i_hd], value=o)
    return out
