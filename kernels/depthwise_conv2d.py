"""kforge library: depthwise 2-D convolution, stride 1, no padding, current NKI API.

x is (C, H, W), w is (C, KH, KW) (one filter per channel); out is
(C, H - KH + 1, W - KW + 1), out[c, y, x] = sum_ij w[c, i, j] * x[c, y + i, x + j].
Channels go on partitions (128 at a time) and the filter taps become
per-partition scalars.  ROWS output rows are produced per step from their
ROWS + KH - 1 input rows: each tap is one multiply-by-scalar of a shifted
window and one add into a float32 accumulator.  TAP_SPLIT = 1 sends every
other tap to GpSimd with its own accumulator (the two are summed at the end),
so two engines share the work.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "depthwise_conv2d",
    "entry": "depthwise_conv2d",
    "reference": "depthwise_conv2d_ref",
    "summary": "depthwise conv (C, H, W) * (C, KH, KW), stride 1, valid",
    "inputs": [{"name": "x", "dims": ["C", "H", "W"]}, {"name": "w", "dims": ["C", "KH", "KW"]}],
    "supports": ["C >= 1", "KH >= 1", "KW >= 1", "H >= KH", "W >= KW", "KH * KW <= 64"],
    "reference_shapes": [[128, 128, 256], [128, 3, 3]],
    "test_shapes": [[130, 11, 13], [130, 3, 3]],
    "tunables": {
        "ROWS": {"values": [1, 2, 4, 8, 16, 32], "default": 1,
                 "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "engine_waits_on_dma": "down",
                               "buffer_pressure": "down"}},
        "TAP_SPLIT": {"values": [0, 1], "default": 0,
                      "addresses": {"slow_engine": "any", "engine_waits_on_dma": "any", "engine_imbalance": "any"}}
    },
    "flops": 0,
    "constraints": ["ROWS == 1 or ROWS // 2 < H - KH + 1",
                    "2 * (ROWS + KH) * W * DTYPE_BYTES + 2 * ROWS * W * (12 + DTYPE_BYTES) <= SBUF_BYTES - 8192"]
}


@nki.jit
def depthwise_conv2d(x, w, ROWS=1, TAP_SPLIT=0):
    C, H, W = x.shape
    C2, KH, KW = w.shape
    assert C2 == C
    Ho, Wo = H - KH + 1, W - KW + 1
    P = 128
    NT = KH * KW
    out = nl.ndarray((C, Ho, Wo), dtype=x.dtype, buffer=nl.shared_hbm)

    for ct in nl.affine_range(math.ceil(C / P)):
        c0 = ct * P
        cw = min(P, C - c0)
        wt = nl.ndarray((P, NT), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=wt[0:cw, 0:NT], src=w.reshape((C, NT))[c0:c0 + cw, 0:NT])
        for rb in nl.affine_range(math.ceil(Ho / ROWS)):
            o0 = rb * ROWS
            rr = min(ROWS, Ho - o0)
            img = nl.ndarray((P, ROWS + KH - 1, W), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=img[0:cw, 0:rr + KH - 1, 0:W],
                          src=x[c0:c0 + cw, o0:o0 + rr + KH - 1, 0:W])
            accs = [nl.ndarray((P, ROWS, Wo), dtype=nl.float32, buffer=nl.sbuf)]
            if TAP_SPLIT:
                accs.append(nl.ndarray((P, ROWS, Wo), dtype=nl.float32, buffer=nl.sbuf))
            engs = [nisa.vector_engine, nisa.gpsimd_engine]
            for t in nl.static_range(NT):
                i = t // KW
                j = t % KW
                a = t % 2 if TAP_SPLIT else 0
                win = img[0:cw, i:i + rr, j:j + Wo]
                if t < len(accs):
                    nisa.tensor_scalar(dst=accs[a][0:cw, 0:rr, 0:Wo], data=win, op0=nl.multiply,
                                       operand0=wt[0:cw, t:t + 1], engine=engs[a])
                else:
                    tmp = nl.ndarray((P, ROWS, Wo), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_scalar(dst=tmp[0:cw, 0:rr, 0:Wo], data=win, op0=nl.multiply,
                                       operand0=wt[0:cw, t:t + 1], engine=engs[a])
                    nisa.tensor_tensor(dst=accs[a][0:cw, 0:rr, 0:Wo], data1=accs[a][0:cw, 0:rr, 0:Wo],
                                       data2=tmp[0:cw, 0:rr, 0:Wo], op=nl.add, engine=engs[a])
            res = nl.ndarray((P, ROWS, Wo), dtype=x.dtype, buffer=nl.sbuf)
            if len(accs) > 1 and NT > 1:
                nisa.tensor_tensor(dst=res[0:cw, 0:rr, 0:Wo], data1=accs[0][0:cw, 0:rr, 0:Wo],
                                   data2=accs[1][0:cw, 0:rr, 0:Wo], op=nl.add)
            else:
                nisa.tensor_copy(dst=res[0:cw, 0:rr, 0:Wo], src=accs[0][0:cw, 0:rr, 0:Wo])
            nisa.dma_copy(dst=out[c0:c0 + cw, o0:o0 + rr, 0:Wo], src=res[0:cw, 0:rr, 0:Wo])
    return out


def depthwise_conv2d_ref(x, w):
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    C, H, W = x.shape
    _, KH, KW = w.shape
    Ho, Wo = H - KH + 1, W - KW + 1
    out = np.zeros((C, Ho, Wo))
    for i in range(KH):
        for j in range(KW):
            out += w[:, i, j][:, None, None] * x[:, i:i + Ho, j:j + Wo]
    return out
