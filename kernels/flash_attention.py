"""kforge library: single-head attention forward with an online softmax, current NKI API.

q and k are (d, S) (head dim on partitions, d <= 128), v is (S, d); out is
(S, d) = softmax(q.T @ k / sqrt(d)) @ v.  Each 128-row query tile walks the
keys in KV_TILE-wide tiles (one PSUM bank at 512) keeping a running max m,
a running sum l and an unnormalised accumulator; the probabilities are
transposed 128 columns at a time on TensorE for the P @ V matmul.  With
KV_RESIDENT = 1, K and V are loaded into SBUF once instead of once per
query tile.  With P_BF16 = 1 the probabilities are rounded to the input
dtype before the transpose and the P @ V matmul (full-rate TensorE).
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "flash_attention",
    "entry": "flash_attention",
    "reference": "flash_attention_ref",
    "summary": "softmax(q.T k / sqrt(d)) v for q, k (d, S), v (S, d)",
    "inputs": [{"name": "q", "dims": ["d", "S"]}, {"name": "k", "dims": ["d", "S"]},
               {"name": "v", "dims": ["S", "d"]}],
    "supports": ["d >= 1", "d <= 128", "S >= 1", "S <= 65536"],
    "reference_shapes": [[128, 4096], [128, 4096], [4096, 128]],
    "test_shapes": [[64, 300], [64, 300], [300, 64]],
    "tunables": {
        "KV_TILE": {"values": [128, 256, 512], "default": 128,
                    "addresses": {"tensor_underfilled": "up", "dma_small_transfers": "up", "instruction_overhead": "up",
                                  "slow_engine": "up"}},
        "KV_RESIDENT": {"values": [0, 1], "default": 0,
                        "addresses": {"redundant_hbm_loads": "up", "engine_waits_on_dma": "up",
                                      "dma_small_transfers": "up"}},
        "P_BF16": {"values": [0, 1], "default": 0,
                   "addresses": {"fp32_matmul": "up", "slow_engine": "up"}}
    },
    "flops": "4 * S * S * d",
    "constraints": ["KV_TILE == 128 or KV_TILE // 2 < S",
                    "KV_RESIDENT == 0 or 2 * S * DTYPE_BYTES + 4 * d * ((S + 127) // 128) <= SBUF_BYTES // 2"]
}

NEG = -30000.0


@nki.jit
def flash_attention(q, k, v, KV_TILE=128, KV_RESIDENT=0, P_BF16=0):
    d, S = q.shape
    assert tuple(k.shape) == (d, S) and tuple(v.shape) == (S, d) and d <= 128
    P = 128
    scale = 1.0 / (d ** 0.5)
    pdt = q.dtype if P_BF16 else nl.float32
    out = nl.ndarray((S, d), dtype=q.dtype, buffer=nl.shared_hbm)
    nkv = math.ceil(S / KV_TILE)

    if KV_RESIDENT:
        k_all = nl.ndarray((d, S), dtype=k.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_all, src=k)
        v_all = []
        for j in nl.affine_range(math.ceil(S / P)):
            jw = min(P, S - j * P)
            vt = nl.ndarray((P, d), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=vt[0:jw, 0:d], src=v[j * P:j * P + jw, 0:d])
            v_all.append(vt)

    for qi in nl.affine_range(math.ceil(S / P)):
        q0 = qi * P
        qw = min(P, S - q0)
        q_tile = nl.ndarray((d, P), dtype=q.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_tile[0:d, 0:qw], src=q[0:d, q0:q0 + qw])
        m_run = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        l_run = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m_run[0:qw, 0:1], value=NEG)
        nisa.memset(dst=l_run[0:qw, 0:1], value=0.0)
        nisa.memset(dst=acc[0:qw, 0:d], value=0.0)

        for kj in nl.sequential_range(nkv):
            k0 = kj * KV_TILE
            kw = min(KV_TILE, S - k0)
            if KV_RESIDENT:
                k_src = k_all[0:d, k0:k0 + kw]
            else:
                k_tile = nl.ndarray((d, KV_TILE), dtype=k.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=k_tile[0:d, 0:kw], src=k[0:d, k0:k0 + kw])
                k_src = k_tile[0:d, 0:kw]
            s_ps = nl.ndarray((P, KV_TILE), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_ps[0:qw, 0:kw], stationary=q_tile[0:d, 0:qw], moving=k_src)
            s = nl.ndarray((P, KV_TILE), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=s[0:qw, 0:kw], data=s_ps[0:qw, 0:kw], op0=nl.multiply,
                               operand0=scale)
            row_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=row_max[0:qw, 0:1], op=nl.maximum, data=s[0:qw, 0:kw], axis=1,
                               keepdims=True)
            m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=m_new[0:qw, 0:1], data1=m_run[0:qw, 0:1],
                               data2=row_max[0:qw, 0:1], op=nl.maximum)
            neg_m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg_m[0:qw, 0:1], data=m_new[0:qw, 0:1], op0=nl.multiply,
                               operand0=-1.0)
            p = nl.ndarray((P, KV_TILE), dtype=pdt, buffer=nl.sbuf)
            row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=p[0:qw, 0:kw], op=nl.exp, data=s[0:qw, 0:kw],
                                   bias=neg_m[0:qw, 0:1], reduce_op=nl.add,
                                   reduce_res=row_sum[0:qw, 0:1])
            alpha = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=alpha[0:qw, 0:1], op=nl.exp, data=m_run[0:qw, 0:1],
                            bias=neg_m[0:qw, 0:1])
            nisa.tensor_scalar(dst=l_run[0:qw, 0:1], data=l_run[0:qw, 0:1], op0=nl.multiply,
                               operand0=alpha[0:qw, 0:1], op1=nl.add, operand1=row_sum[0:qw, 0:1])

            pv = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
            for j in nl.affine_range(math.ceil(kw / P)):
                j0 = j * P
                jw = min(P, kw - j0)
                pt_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=pt_ps[0:jw, 0:qw], data=p[0:qw, j0:j0 + jw])
                pt = nl.ndarray((P, P), dtype=pdt, buffer=nl.sbuf)
                nisa.tensor_copy(dst=pt[0:jw, 0:qw], src=pt_ps[0:jw, 0:qw])
                if KV_RESIDENT:
                    v_src = v_all[(k0 + j0) // P][0:jw, 0:d]
                else:
                    v_tile = nl.ndarray((P, d), dtype=v.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=v_tile[0:jw, 0:d], src=v[k0 + j0:k0 + j0 + jw, 0:d])
                    v_src = v_tile[0:jw, 0:d]
                nisa.nc_matmul(dst=pv[0:qw, 0:d], stationary=pt[0:jw, 0:qw], moving=v_src)
            nisa.tensor_scalar(dst=acc[0:qw, 0:d], data=acc[0:qw, 0:d], op0=nl.multiply,
                               operand0=alpha[0:qw, 0:1])
            nisa.tensor_tensor(dst=acc[0:qw, 0:d], data1=acc[0:qw, 0:d], data2=pv[0:qw, 0:d],
                               op=nl.add)
            nisa.tensor_copy(dst=m_run[0:qw, 0:1], src=m_new[0:qw, 0:1])

        inv_l = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_l[0:qw, 0:1], data=l_run[0:qw, 0:1])
        o = nl.ndarray((P, d), dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o[0:qw, 0:d], data=acc[0:qw, 0:d], op0=nl.multiply,
                           operand0=inv_l[0:qw, 0:1])
        nisa.dma_copy(dst=out[q0:q0 + qw, 0:d], src=o[0:qw, 0:d])
    return out


def flash_attention_ref(q, k, v):
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    s = q.T @ k / np.sqrt(q.shape[0])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
