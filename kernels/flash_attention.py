"""kforge library: single-head attention forward with an online softmax, current NKI API.

q and k are (d, S) (head dim on partitions, d <= 128), v is (S, d); out is
(S, d) = softmax(q.T @ k / sqrt(d)) @ v.

Work items are (query tile of 128 rows, chunk of KV_TILE keys), walked query
tile by query tile.  Each item goes through seven stages on four engines:

  A  TensorE   s = q.T @ k, 512 keys (one PSUM bank) per matmul; q is
               scaled by 1/sqrt(d) once per query tile (GpSimd), so s is
               the softmax's logits
  B  VectorE   -(row max) of each bank straight from PSUM, then one min
               over them and the previous bias: the running bias b = -max
  C  ScalarE   alpha = exp(b_new - b_old); p = exp(s + b_new) from PSUM into
               SBUF in the input dtype (bf16: full-rate TensorE)
  D  TensorE   p transposed 128 keys at a time into PSUM (bf16, 1024 keys
               per bank)
  E  Vector/ScalarE  the transposed blocks copied to SBUF: EVAC_VECTOR
               sixteenths of them by VectorE, the rest by ScalarE
  F  TensorE   [acc | l] of the chunk = p.T @ [v | 1]: V carries a column of
               ones, so the same matmul sums the (rounded) probabilities
  G  acc = acc * alpha + chunk result: one VectorE scalar_tensor_tensor from
               PSUM, or with ACC_POOL = 1 a ScalarE copy out of PSUM and the
               fold on GpSimd (idle otherwise)

The stages are software-pipelined: step t issues A-C of item t, D-E of item
t-1 and F-G of item t-2, so no in-order engine waits on another engine's
work for the same item.  Every stage writes the next buffer of its own ring,
allocated once (PSUM: five score banks, two transposed banks and the chunk
results, within the 8 banks), so a stage waits only for the true readers of
that buffer; the pipeline runs on across query tiles.  A query tile ends
with out = acc / l (GpSimd) and its store.

With KV_RESIDENT = 1, K and V (with its ones column) are loaded into SBUF
once; otherwise each item loads its chunk of K and V (HBM traffic grows
with the number of query tiles).

Where the time goes (trn2, reference shapes, best setting): VectorE and
ScalarE each run about 180 us of the 199 us: every score is read from PSUM
twice (row max on VectorE, exp on ScalarE, one bank = 512 fp32 per
instruction) and every probability once more (the transposed copy), and
TensorE does 1.5x the op's FLOPs (the transposes).  See docs/agent.md.
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
        "KV_TILE": {"values": [512, 1024, 2048], "default": 512,
                    "addresses": {"tensor_underfilled": "up", "instruction_overhead": "up",
                                  "dma_small_transfers": "up"}},
        "KV_RESIDENT": {"values": [0, 1], "default": 0,
                        "addresses": {"redundant_hbm_loads": "up", "engine_waits_on_dma": "up",
                                      "dma_small_transfers": "up"}},
        "EVAC_VECTOR": {"values": [0, 4, 8, 12, 13, 14, 16], "default": 8,
                        "addresses": {"instruction_overhead": "down", "buffer_pressure": "up"}},
        "ACC_POOL": {"values": [0, 1], "default": 0,
                     "addresses": {"engine_imbalance": "up", "instruction_overhead": "up"}}
    },
    "flops": "4 * S * S * d",
    "constraints": ["KV_TILE == 512 or KV_TILE // 2 < S",
                    "KV_RESIDENT == 0 or (S + ((S + 127) // 128) * (d + 1)) * DTYPE_BYTES <= SBUF_BYTES // 2"]
}


@nki.jit
def flash_attention(q, k, v, KV_TILE=512, KV_RESIDENT=0, EVAC_VECTOR=8, ACC_POOL=0):
    d, S = q.shape
    assert tuple(k.shape) == (d, S) and tuple(v.shape) == (S, d) and d <= 128
    P = 128
    MM = 512                       # keys per score matmul: one PSUM bank of fp32
    scale = 1.0 / (d ** 0.5)
    pdt = q.dtype
    pbytes = 4 if pdt == nl.float32 else 2
    TB = min(KV_TILE, 2048 // pbytes)   # keys per transposed PSUM tile: one bank
    dv = d + 1
    out = nl.ndarray((S, d), dtype=q.dtype, buffer=nl.shared_hbm)
    nq = math.ceil(S / P)
    nkv = math.ceil(S / KV_TILE)
    nsub = KV_TILE // MM

    # Buffer rings, allocated once: every stage of the pipeline writes the
    # next buffer of its ring, so it waits only for the true readers of that
    # buffer, and PSUM stays within its 8 banks.
    def ring(count, shape, dtype, buffer):
        return [nl.ndarray(shape, dtype=dtype, buffer=buffer) for _ in range(count)]

    s_ring = ring(5, (P, MM), nl.float32, nl.psum)
    ptp_ring = ring(4096 // (TB * pbytes), (P, TB), pdt, nl.psum)
    pv_ring = ring(2, (P, dv), nl.float32, nl.psum)
    p_ring = ring(3, (P, KV_TILE), pdt, nl.sbuf)
    pt_ring = ring(3, (P, KV_TILE), pdt, nl.sbuf)
    # column 0: the running bias b = -(max so far) of the previous item,
    # columns 1..nsub: -(row max) of each 512-key part of this item; the last
    # item of a query tile keeps its own b_new in column nsub + 1
    mx_ring = ring(3, (P, nsub + 2), nl.float32, nl.sbuf)
    al_ring = ring(4, (P, 1), nl.float32, nl.sbuf)
    acc_ring = ring(3, (P, dv), nl.float32, nl.sbuf)
    pvs_ring = ring(2 if ACC_POOL else 0, (P, dv), nl.float32, nl.sbuf)
    o_ring = ring(2, (P, d), out.dtype, nl.sbuf)
    qraw_ring = ring(2, (d, P), q.dtype, nl.sbuf)
    q_ring = ring(3, (d, P), q.dtype, nl.sbuf)
    if not KV_RESIDENT:
        k_ring = ring(3, (d, KV_TILE), k.dtype, nl.sbuf)
        v_ring = ring(3, (P, (KV_TILE // P) * dv), v.dtype, nl.sbuf)
        for vt in v_ring:
            nisa.memset(dst=vt, value=1.0, engine=nisa.gpsimd_engine)
    cnt = {"s": 0, "ptp": 0, "pv": 0, "p": 0, "pt": 0, "mx": 0, "al": 0,
           "acc": 0, "pvs": 0, "o": 0, "q": 0, "qraw": 0, "k": 0, "v": 0}

    def take(name, rg):
        t = rg[cnt[name] % len(rg)]
        cnt[name] += 1
        return t

    items = [(qi, kj) for qi in range(nq) for kj in range(nkv)]
    n = len(items)
    st = {}      # per item: tiles between stages
    qt = {}      # per query tile: q tile, running bias, accumulator

    def load_q(qi):
        # q arrives pre-scaled by 1/sqrt(d), so the scores are the softmax's
        # logits and the row max is the bias as is
        q0 = qi * P
        qw = min(P, S - q0)
        q_raw = take("qraw", qraw_ring)
        nisa.dma_copy(dst=q_raw[0:d, 0:qw], src=q[0:d, q0:q0 + qw])
        q_tile = take("q", q_ring)
        nisa.tensor_scalar(dst=q_tile[0:d, 0:qw], data=q_raw[0:d, 0:qw], op0=nl.multiply,
                           operand0=scale, engine=nisa.gpsimd_engine)
        qt[qi] = {"q": q_tile, "qw": qw}

    load_q(0)
    if nq > 1:
        load_q(1)

    if KV_RESIDENT:
        nb_all = math.ceil(S / P)
        k_all = nl.ndarray((d, S), dtype=k.dtype, buffer=nl.sbuf)
        v_all = nl.ndarray((P, nb_all * dv), dtype=v.dtype, buffer=nl.sbuf)
        for c in range(nkv):
            c0 = c * KV_TILE
            cw = min(KV_TILE, S - c0)
            nisa.dma_copy(dst=k_all[0:d, c0:c0 + cw], src=k[0:d, c0:c0 + cw])
            for j in range(c0 // P, math.ceil((c0 + cw) / P)):
                jw = min(P, S - j * P)
                nisa.dma_copy(dst=v_all[0:jw, j * dv:j * dv + d], src=v[j * P:j * P + jw, 0:d])
                nisa.memset(dst=v_all[0:P, j * dv + d:j * dv + dv], value=1.0,
                            engine=nisa.gpsimd_engine)

    def stage_abc(t):
        qi, kj = items[t]
        if kj == 0:
            if qi not in qt:
                load_q(qi)
            if qi + 1 < nq and qi + 1 not in qt:
                load_q(qi + 1)
        qw = qt[qi]["qw"]
        q_tile = qt[qi]["q"]
        k0 = kj * KV_TILE
        kw = min(KV_TILE, S - k0)
        item = {"qi": qi, "kj": kj, "qw": qw, "k0": k0, "kw": kw}
        if KV_RESIDENT:
            k_src = k_all
            koff = k0
        else:
            k_src = take("k", k_ring)
            nisa.dma_copy(dst=k_src[0:d, 0:kw], src=k[0:d, k0:k0 + kw])
            koff = 0
            v_c = take("v", v_ring)
            for j in range(math.ceil(kw / P)):
                jw = min(P, kw - j * P)
                nisa.dma_copy(dst=v_c[0:jw, j * dv:j * dv + d],
                              src=v[k0 + j * P:k0 + j * P + jw, 0:d])
            item["v"] = v_c
        # A: scores into PSUM, one bank per 512 keys
        ns = math.ceil(kw / MM)
        subs = []
        for m in range(ns):
            m0 = m * MM
            mw = min(MM, kw - m0)
            s_ps = take("s", s_ring)
            nisa.nc_matmul(dst=s_ps[0:qw, 0:mw], stationary=q_tile[0:d, 0:qw],
                           moving=k_src[0:d, koff + m0:koff + m0 + mw])
            subs.append((s_ps, m0, mw))
        # B: row max and the running bias b = -scale * max
        mx = take("mx", mx_ring)
        for m, (s_ps, m0, mw) in enumerate(subs):
            nisa.tensor_reduce(dst=mx[0:qw, m + 1:m + 2], op=nl.maximum, data=s_ps[0:qw, 0:mw],
                               axis=1, negate=True, keepdims=True)
        # b_new = min(b_old, -row maxes), written where the next item of this
        # query tile finds its b_old: column 0 of the next tile of the ring
        if kj < nkv - 1:
            b_new = mx_ring[cnt["mx"] % len(mx_ring)][0:qw, 0:1]
        else:
            b_new = mx[0:qw, nsub + 1:nsub + 2]
        lo = 1 if kj == 0 else 0
        if ns + 1 - lo > 1 or kj < nkv - 1:
            nisa.tensor_reduce(dst=b_new, op=nl.minimum, data=mx[0:qw, lo:ns + 1], axis=1,
                               keepdims=True)
        else:
            b_new = mx[0:qw, 1:2]
        if kj > 0:
            b_old = mx[0:qw, 0:1]
            # C: alpha = exp(b_new - b_old) rescales what came before
            alpha = take("al", al_ring)
            nisa.activation(dst=alpha[0:qw, 0:1], op=nl.exp, data=b_old, scale=-1.0,
                            bias=b_new)
            item["alpha"] = alpha
        # C: probabilities, rounded to the input dtype
        p = take("p", p_ring)
        for s_ps, m0, mw in subs:
            nisa.activation(dst=p[0:qw, m0:m0 + mw], op=nl.exp, data=s_ps[0:qw, 0:mw],
                            bias=b_new)
        item["p"] = p
        st[t] = item

    def stage_de(t):
        it = st[t]
        qw, kw, p = it["qw"], it["kw"], it["p"]
        nb = math.ceil(kw / P)
        pt = take("pt", pt_ring)
        full = qw == P and kw == nb * P
        bpt = TB // P                       # blocks per transposed PSUM tile
        nv = (EVAC_VECTOR * nb) // 16       # blocks VectorE evacuates, ScalarE the rest
        for u in range(math.ceil(nb / bpt)):
            ptp = take("ptp", ptp_ring)
            b0 = u * bpt
            b1 = min(nb, b0 + bpt)
            for j in range(b0, b1):
                jw = min(P, kw - j * P)
                nisa.nc_transpose(dst=ptp[0:jw, (j - b0) * P:(j - b0) * P + qw],
                                  data=p[0:qw, j * P:j * P + jw])
            if full:
                segs = [(b0, min(b1, max(b0, nv)), True), (max(b0, min(b1, nv)), b1, False)]
                for s0, s1, on_vec in segs:
                    if s1 <= s0:
                        continue
                    dst = pt[0:P, s0 * P:s1 * P]
                    src = ptp[0:P, (s0 - b0) * P:(s1 - b0) * P]
                    if on_vec:
                        nisa.tensor_copy(dst=dst, src=src)
                    else:
                        nisa.activation(dst=dst, op=nl.copy, data=src)
            else:
                for j in range(b0, b1):
                    jw = min(P, kw - j * P)
                    dst = pt[0:jw, j * P:j * P + qw]
                    src = ptp[0:jw, (j - b0) * P:(j - b0) * P + qw]
                    if j < nv:
                        nisa.tensor_copy(dst=dst, src=src)
                    else:
                        nisa.activation(dst=dst, op=nl.copy, data=src)
        it["pt"] = pt
        del it["p"]

    def stage_fg(t):
        it = st.pop(t)
        qi, kj, qw, k0, kw, pt = it["qi"], it["kj"], it["qw"], it["k0"], it["kw"], it["pt"]
        nb = math.ceil(kw / P)
        # F: [acc | l] of this chunk
        pv = take("pv", pv_ring)
        for j in range(nb):
            jw = min(P, kw - j * P)
            if KV_RESIDENT:
                vb = (k0 + j * P) // P
                v_src = v_all[0:jw, vb * dv:vb * dv + dv]
            else:
                v_src = it["v"][0:jw, j * dv:j * dv + dv]
            nisa.nc_matmul(dst=pv[0:qw, 0:dv], stationary=pt[0:jw, j * P:j * P + qw],
                           moving=v_src)
        # G: fold into the running accumulator: VectorE straight from PSUM, or
        # (ACC_POOL) ScalarE copies the chunk's result out and GpSimd folds it
        acc = take("acc", acc_ring)
        if ACC_POOL:
            pvs = acc if kj == 0 else take("pvs", pvs_ring)
            nisa.activation(dst=pvs[0:qw, 0:dv], op=nl.copy, data=pv[0:qw, 0:dv])
        else:
            pvs = pv
        if kj == 0:
            if not ACC_POOL:
                nisa.tensor_copy(dst=acc[0:qw, 0:dv], src=pv[0:qw, 0:dv])
        else:
            acc_old = qt[qi]["acc"]
            nisa.scalar_tensor_tensor(dst=acc[0:qw, 0:dv], data=acc_old[0:qw, 0:dv],
                                      op0=nl.multiply, operand0=it["alpha"][0:qw, 0:1],
                                      op1=nl.add, operand1=pvs[0:qw, 0:dv],
                                      engine=nisa.gpsimd_engine if ACC_POOL else nisa.vector_engine)
        qt[qi]["acc"] = acc
        if kj == nkv - 1:
            o = take("o", o_ring)
            nisa.tensor_scalar(dst=o[0:qw, 0:d], data=acc[0:qw, 0:d], op0=nl.divide,
                               operand0=acc[0:qw, d:dv], engine=nisa.gpsimd_engine)
            q0 = qi * P
            nisa.dma_copy(dst=out[q0:q0 + qw, 0:d], src=o[0:qw, 0:d])
            del qt[qi]

    for t in range(n + 2):
        if t < n:
            stage_abc(t)
        if 0 <= t - 1 < n:
            stage_de(t - 1)
        if 0 <= t - 2 < n:
            stage_fg(t - 2)
    return out


def flash_attention_ref(q, k, v):
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    s = q.T @ k / np.sqrt(q.shape[0])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
