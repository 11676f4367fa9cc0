"""kforge library: 2-D average pooling, window and stride POOL, current NKI API.

x is (C, H, W), out is (C, H // POOL, W // POOL) (trailing rows and columns
that do not fill a window are dropped, as PyTorch's floor mode does).
Channels go on partitions (128 at a time); ROWS output rows are produced per
step: their ROWS * POOL input rows are loaded, the windows are read as one
5-D access pattern and summed with tensor_reduce, and the sums are scaled on
SCALE_ENGINE and stored.  BUFS row blocks are in flight (a ring of tiles), so
loads run ahead of the reduce and stores behind it; each load is issued
BUFS - 1 blocks ahead in program order, so the in-order DMA queues do not
hold it behind the stores of the blocks in flight.
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
        "BUFS": {"values": [2, 3, 4], "default": 2,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "SCALE_ENGINE": {"values": ["vector", "gpsimd", "scalar"], "default": "vector",
                         "addresses": {"slow_engine": "any", "buffer_pressure": "any", "engine_imbalance": "any"}}
    },
    "flops": 0,
    "constraints": ["ROWS == 1 or ROWS // 2 < H // 2",
                    "BUFS * (ROWS * 2 * W * DTYPE_BYTES + ROWS * (W // 2) * (4 + DTYPE_BYTES)) <= SBUF_BYTES - 8192"]
}


@nki.jit
def avgpool2d(x, POOL=2, ROWS=1, SCALE_ENGINE="vector", BUFS=2):
    C, H, W = x.shape
    k = POOL
    Ho, Wo = H // k, W // k
    P = 128
    RK = ROWS * k
    out = nl.ndarray((C, Ho, Wo), dtype=x.dtype, buffer=nl.shared_hbm)
    # rings of BUFS row blocks: loads run BUFS - 1 blocks ahead of the reduce
    imgs = [nl.ndarray((P, RK, W), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    sumss = [nl.ndarray((P, ROWS, Wo), dtype=nl.float32, buffer=nl.sbuf) for _ in range(BUFS)]
    ress = [nl.ndarray((P, ROWS, Wo), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]

    blocks = [(ct * P, min(P, C - ct * P), rb * ROWS, min(ROWS, Ho - rb * ROWS))
              for ct in range(math.ceil(C / P)) for rb in range(math.ceil(Ho / ROWS))]

    def load(n):
        c0, cw, o0, rr = blocks[n]
        nisa.dma_copy(dst=imgs[n % BUFS][0:cw, 0:rr * k, 0:W], src=x[c0:c0 + cw, o0 * k:o0 * k + rr * k, 0:W])

    # loads are issued BUFS - 1 blocks ahead in program order, so the DMA queues
    # take them before the stores of the blocks being reduced
    for n in range(min(BUFS - 1, len(blocks))):
        load(n)
    for n in nl.static_range(len(blocks)):
        c0, cw, o0, rr = blocks[n]
        if n + BUFS - 1 < len(blocks):
            load(n + BUFS - 1)
        img = imgs[n % BUFS]
        # [c, oh, ow, dh, dw] -> img[c, oh*k + dh, ow*k + dw]
        win = img.ap(pattern=[[RK * W, cw], [k * W, rr], [k, Wo], [W, k], [1, k]], offset=0)
        sums = sumss[n % BUFS]
        nisa.tensor_reduce(dst=sums[0:cw, 0:rr, 0:Wo], op=nl.add, data=win, axis=(3, 4))
        res = ress[n % BUFS]
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
