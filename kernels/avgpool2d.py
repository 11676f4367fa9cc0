"""kforge library: 2-D average pooling, window and stride POOL, current NKI API.

x is (C, H, W), out is (C, H // POOL, W // POOL) (trailing rows and columns
that do not fill a window are dropped, as PyTorch's floor mode does).
Channels go on partitions (128 at a time); ROWS output rows are produced per
step: their ROWS * POOL input rows are loaded, the windows are read as one
5-D access pattern and summed with tensor_reduce, and the sums are scaled on
SCALE_ENGINE and stored.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "avgpool2d",
    "entry": "avgpool2d",
    "reference": "avgpool2d_ref",
    "summary": "average pooling (C, H, W) -> (C, H/2, W/2), 2x2 windows",
    "inputs": [{"name": "x", "dims": ["C", "H", "W"]}],
    "supports": ["C >= 1", "H >= 2", "W >= 2"],
    "reference_shapes": [[128, 256, 512]],
    "test_shapes": [[130, 13, 11]],
    "tunables": {
        "ROWS": {"values": [1, 2, 4, 8, 16, 32, 64], "default": 1,
                 "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "engine_waits_on_dma": "down",
                               "buffer_pressure": "down"}},
        "SCALE_ENGINE": {"values": ["vector", "gpsimd", "scalar"], "default": "vector",
                         "addresses": {"slow_engine": "any", "buffer_pressure": "any", "engine_imbalance": "any"}}
    },
    "flops": 0,
    "constraints": ["ROWS == 1 or ROWS // 2 < H // 2",
                    "2 * ROWS * 2 * W * DTYPE_BYTES + 2 * ROWS * (W // 2) * (4 + DTYPE_BYTES) <= SBUF_BYTES - 8192"]
}


@nki.jit
def avgpool2d(x, POOL=2, ROWS=1, SCALE_ENGINE="vector"):
    C, H, W = x.shape
    k = POOL
    Ho, Wo = H // k, W // k
    P = 128
    RK = ROWS * k
    out = nl.ndarray((C, Ho, Wo), dtype=x.dtype, buffer=nl.shared_hbm)

    for ct in nl.affine_range(math.ceil(C / P)):
        c0 = ct * P
        cw = min(P, C - c0)
        for rb in nl.affine_range(math.ceil(Ho / ROWS)):
            o0 = rb * ROWS
            rr = min(ROWS, Ho - o0)
            img = nl.ndarray((P, RK, W), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=img[0:cw, 0:rr * k, 0:W], src=x[c0:c0 + cw, o0 * k:o0 * k + rr * k, 0:W])
            # [c, oh, ow, dh, dw] -> img[c, oh*k + dh, ow*k + dw]
            win = img.ap(pattern=[[RK * W, cw], [k * W, rr], [k, Wo], [W, k], [1, k]], offset=0)
            sums = nl.ndarray((P, ROWS, Wo), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=sums[0:cw, 0:rr, 0:Wo], op=nl.add, data=win, axis=(3, 4))
            res = nl.ndarray((P, ROWS, Wo), dtype=x.dtype, buffer=nl.sbuf)
            if SCALE_ENGINE == "scalar":
                nisa.activation(dst=res[0:cw, 0:rr, 0:Wo], op=nl.copy, data=sums[0:cw, 0:rr, 0:Wo],
                                scale=1.0 / (k * k))
            else:
                eng = nisa.gpsimd_engine if SCALE_ENGINE == "gpsimd" else nisa.vector_engine
                nisa.tensor_scalar(dst=res[0:cw, 0:rr, 0:Wo], data=sums[0:cw, 0:rr, 0:Wo],
                                   op0=nl.multiply, operand0=1.0 / (k * k), engine=eng)
            nisa.dma_copy(dst=out[c0:c0 + cw, o0:o0 + rr, 0:Wo], src=res[0:cw, 0:rr, 0:Wo])
    return out


def avgpool2d_ref(x, POOL=2):
    x = np.asarray(x, dtype=np.float64)
    C, H, W = x.shape
    k = POOL
    Ho, Wo = H // k, W // k
    return x[:, :Ho * k, :Wo * k].reshape(C, Ho, k, Wo, k).mean(axis=(2, 4))
