"""kforge library: depthwise 2-D convolution, stride 1, no padding, current NKI API.

x is (C, H, W), w is (C, KH, KW) (one filter per channel); out is
(C, H - KH + 1, W - KW + 1), out[c, y, x] = sum_ij w[c, i, j] * x[c, y + i, x + j].
Channels go on partitions (128 at a time).  ROWS output rows are produced
per step from their ROWS + KH - 1 input rows, loaded in one DMA.  The taps
are spread over three engines:

- TensorE takes all but the last VE_TAPS + POOL_TAPS taps: tap t is a
  matmul whose stationary is diag(w[:, t]) (the identity scaled by the
  per-channel weight) and whose moving operand is the shifted window of
  MM_ROWS rows (up to 512 columns); the taps accumulate in one PSUM bank;
- VectorE takes the next VE_TAPS taps as multiply-adds
  (scalar_tensor_tensor: window * w[:, t] + partial), the first reading the
  PSUM partial, so the evacuation is one of its taps;
- GpSimd takes the last POOL_TAPS taps the same way from VectorE's partial.

With no VectorE/GpSimd tap, EVAC chooses who copies PSUM to the output
tile: ScalarE, VectorE, or the two alternating banks.
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
        "ROWS": {"values": [2, 4, 8, 16, 32], "default": 8,
                 "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "engine_waits_on_dma": "down",
                               "buffer_pressure": "down"}},
        "VE_TAPS": {"values": [0, 1, 2, 3], "default": 1,
                    "addresses": {"slow_engine": "any", "engine_imbalance": "any"}},
        "POOL_TAPS": {"values": [0, 1], "default": 0,
                      "addresses": {"slow_engine": "any", "engine_imbalance": "any"}},
        "BUFS": {"values": [2, 4], "default": 4,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "RESIDENT": {"values": [0, 1], "default": 0,
                     "addresses": {"redundant_hbm_loads": "up", "buffer_pressure": "down"}},
        "EVAC": {"values": ["scalar", "both", "tap"], "default": "tap",
                 "addresses": {"slow_engine": "any", "engine_imbalance": "any"}}
    },
    "flops": 0,
    "constraints": ["ROWS == 2 or ROWS // 2 < H - KH + 1",
                    "VE_TAPS + POOL_TAPS < KH * KW",
                    "POOL_TAPS == 0 or VE_TAPS > 0",
                    "EVAC != 'tap' or VE_TAPS > 0",
                    "RESIDENT * H * W * DTYPE_BYTES + (1 - RESIDENT) * BUFS * (ROWS + KH) * W * DTYPE_BYTES + BUFS * ROWS * W * (DTYPE_BYTES + 4 * min(VE_TAPS, 1)) + 512 * (9 + DTYPE_BYTES) <= SBUF_BYTES - 8192"]
}


@nki.jit
def depthwise_conv2d(x, w, ROWS=8, VE_TAPS=1, POOL_TAPS=0, EVAC="tap", BUFS=4, RESIDENT=0):
    C, H, W = x.shape
    C2, KH, KW = w.shape
    assert C2 == C
    Ho, Wo = H - KH + 1, W - KW + 1
    P = 128
    NT = KH * KW
    NV = min(VE_TAPS, NT - 1)
    NG = min(POOL_TAPS, NT - 1 - NV) if NV > 0 else 0
    NTE = NT - NV - NG
    FMAX = 512                    # fp32 per PSUM bank
    NBK = 1                       # a PSUM tile is one bank
    if Wo <= FMAX:
        MR = 1                    # output rows per bank: a power of two, so banks start rows
        while 2 * MR * Wo <= FMAX and 2 * MR <= ROWS:
            MR *= 2
        PITCH = FMAX // MR
        CW = Wo
    else:
        MR, PITCH, CW = 1, FMAX, FMAX
    GR = MR * NBK if Wo <= FMAX else 1   # output rows per PSUM tile
    out = nl.ndarray((C, Ho, Wo), dtype=x.dtype, buffer=nl.shared_hbm)

    ident = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ident, src=nl.shared_identity_matrix(P, dtype=x.dtype))
    # a ring of PSUM banks, so TensorE runs ahead of the engines draining them
    NPS = 8 // NBK
    pss = [nl.ndarray((P, MR * NBK, PITCH), dtype=nl.float32, buffer=nl.psum) for _ in range(NPS)]
    # BUFS input and output row blocks in flight: loads run ahead, stores behind
    if RESIDENT:
        imgs = [nl.ndarray((P, H, W), dtype=x.dtype, buffer=nl.sbuf)]
    else:
        imgs = [nl.ndarray((P, ROWS + KH - 1, W), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    ress = [nl.ndarray((P, ROWS, Wo), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    accs = [nl.ndarray((P, ROWS, Wo), dtype=nl.float32, buffer=nl.sbuf) for _ in range(BUFS if NV else 0)]
    gi = 0
    for ct in nl.static_range(math.ceil(C / P)):
        c0 = ct * P
        cw = min(P, C - c0)
        wt = nl.ndarray((P, NT), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=wt[0:cw, 0:NT], src=w.reshape((C, NT))[c0:c0 + cw, 0:NT])
        # diag(w[:, t]) for the TensorE taps
        dg = nl.ndarray((P, NTE, P), dtype=x.dtype, buffer=nl.sbuf)
        for t in nl.static_range(NTE):
            nisa.tensor_scalar(dst=dg[0:cw, t, 0:cw], data=ident[0:cw, 0:cw], op0=nl.multiply,
                               operand0=wt[0:cw, t:t + 1])
        for rb in nl.static_range(math.ceil(Ho / ROWS)):
            o0 = rb * ROWS
            rr = min(ROWS, Ho - o0)
            if RESIDENT:
                # the image stays: load only the rows no earlier block loaded
                img = imgs[0]
                ro = o0
                lo = 0 if rb == 0 else o0 + KH - 1
                hi = o0 + rr + KH - 1
                nisa.dma_copy(dst=img[0:cw, lo:hi, 0:W], src=x[c0:c0 + cw, lo:hi, 0:W])
            else:
                img = imgs[rb % BUFS]
                ro = 0
                nisa.dma_copy(dst=img[0:cw, 0:rr + KH - 1, 0:W],
                              src=x[c0:c0 + cw, o0:o0 + rr + KH - 1, 0:W])
            res = ress[rb % BUFS]
            acc = accs[rb % BUFS] if NV else None
            for g in nl.static_range(math.ceil(rr / GR)):
                r0 = g * GR
                gr = min(GR, rr - r0)
                for cb in nl.static_range(math.ceil(Wo / CW)):
                    x0 = cb * CW
                    xw = min(CW, Wo - x0)
                    ps = pss[gi % NPS]
                    gi += 1
                    for b in nl.static_range(math.ceil(gr / MR)):
                        b0 = b * MR
                        br = min(MR, gr - b0)
                        for t in nl.static_range(NTE):
                            i = t // KW
                            j = t % KW
                            nisa.nc_matmul(dst=ps[0:cw, b0:b0 + br, 0:xw], stationary=dg[0:cw, t, 0:cw],
                                           moving=img[0:cw, ro + r0 + b0 + i:ro + r0 + b0 + i + br, x0 + j:x0 + j + xw])
                    # drain the bank: into the output tile, or into the fp32 partial the
                    # VectorE/GpSimd taps finish; EVAC "tap": VectorE's first tap drains it
                    if NV == 0:
                        dst = res[0:cw, r0:r0 + gr, x0:x0 + xw]
                    else:
                        dst = acc[0:cw, r0:r0 + gr, x0:x0 + xw]
                    if EVAC == "tap" and NV > 0:
                        if NV + NG == 1:
                            dst = res[0:cw, r0:r0 + gr, x0:x0 + xw]
                        t = NTE
                        nisa.scalar_tensor_tensor(dst=dst,
                                                  data=img[0:cw, ro + r0 + t // KW:ro + r0 + t // KW + gr,
                                                           x0 + t % KW:x0 + t % KW + xw],
                                                  op0=nl.multiply, operand0=wt[0:cw, t:t + 1],
                                                  op1=nl.add, operand1=ps[0:cw, 0:gr, 0:xw])
                    elif EVAC == "scalar" or (EVAC == "both" and gi % 2 == 1):
                        nisa.activation(dst=dst, op=nl.copy, data=ps[0:cw, 0:gr, 0:xw])
                    else:
                        nisa.tensor_copy(dst=dst, src=ps[0:cw, 0:gr, 0:xw])
            # the remaining taps over the whole row block, one instruction each
            k0 = 1 if EVAC == "tap" and NV > 0 else 0
            for k in nl.static_range(k0, NV + NG):
                t = NTE + k
                i = t // KW
                j = t % KW
                eng = nisa.vector_engine if k < NV else nisa.gpsimd_engine
                dst = res if k == NV + NG - 1 else acc
                nisa.scalar_tensor_tensor(dst=dst[0:cw, 0:rr, 0:Wo], data=img[0:cw, ro + i:ro + i + rr, j:j + Wo],
                                          op0=nl.multiply, operand0=wt[0:cw, t:t + 1],
                                          op1=nl.add, operand1=acc[0:cw, 0:rr, 0:Wo], engine=eng)
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
