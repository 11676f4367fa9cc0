"""kforge library: 2-D transpose, out = x.T, current NKI API.

x is (M, N), out (N, M).  Row tiles of x (128 rows by LOAD_COLS columns) are
loaded, cut into 128 x 128 blocks and transposed on TensorE into PSUM; the
transposed blocks of M_BLOCK consecutive row tiles are gathered in one SBUF
tile so each store writes M_BLOCK * 128 contiguous elements per row of out.
Up to 8 transposes fill one PSUM bank (they keep the input's dtype) and one
copy drains it, on VectorE or, COPY "both", alternately on ScalarE.  BUFS
sets of row tiles rotate, and each step's loads are issued BUFS - 1 steps
ahead in program order, so the in-order DMA queues do not hold them behind
the stores in flight.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "transpose2d",
    "entry": "transpose2d",
    "reference": "transpose2d_ref",
    "summary": "x.T for x (M, N)",
    "inputs": [{"name": "x", "dims": ["M", "N"]}],
    "supports": ["M >= 1", "N >= 1"],
    "reference_shapes": [[4096, 4096]],
    "test_shapes": [[200, 300]],
    "tunables": {
        "LOAD_COLS": {"values": [128, 256, 512, 1024, 2048], "default": 128,
                      "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "engine_waits_on_dma": "down"}},
        "COPY": {"values": ["vector", "both"], "default": "vector",
                 "addresses": {"slow_engine": "any", "engine_imbalance": "any"}},
        "BUFS": {"values": [2, 3], "default": 2,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "M_BLOCK": {"values": [1, 2, 4, 8, 16], "default": 1,
                    "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "buffer_pressure": "down"}}
    },
    "flops": 0,
    "constraints": ["LOAD_COLS == 128 or LOAD_COLS // 2 < N",
                    "M_BLOCK == 1 or (M_BLOCK // 2) * 128 < M",
                    "BUFS * M_BLOCK * LOAD_COLS * DTYPE_BYTES + BUFS * M_BLOCK * 128 * DTYPE_BYTES <= SBUF_BYTES - 8192"]
}


@nki.jit
def transpose2d(x, LOAD_COLS=128, M_BLOCK=1, COPY="vector", BUFS=2):
    M, N = x.shape
    P = 128
    MB = P * M_BLOCK
    TB = 4 if x.dtype == nl.float32 else 8   # 128-column transposes per 2 KiB PSUM bank
    out = nl.ndarray((N, M), dtype=x.dtype, buffer=nl.shared_hbm)

    steps = [(mb * MB, min(MB, M - mb * MB), nb * LOAD_COLS, min(LOAD_COLS, N - nb * LOAD_COLS))
             for mb in range(math.ceil(M / MB)) for nb in range(math.ceil(N / LOAD_COLS))]
    # BUFS sets of M_BLOCK row tiles; a ring of PSUM banks and of output tiles
    rows = [[nl.ndarray((P, LOAD_COLS), dtype=x.dtype, buffer=nl.sbuf) for _ in range(M_BLOCK)]
            for _ in range(BUFS)]
    pss = [nl.ndarray((P, TB * P), dtype=x.dtype, buffer=nl.psum) for _ in range(4)]
    outs = [nl.ndarray((P, MB), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]

    def load(n):
        m0, mw, n0, nw = steps[n]
        for i in range(math.ceil(mw / P)):
            rw = min(P, mw - i * P)
            nisa.dma_copy(dst=rows[n % BUFS][i][0:rw, 0:nw], src=x[m0 + i * P:m0 + i * P + rw, n0:n0 + nw])

    # loads are issued BUFS - 1 steps ahead in program order, so the DMA queues
    # take them before the stores of the steps in flight
    for n in range(min(BUFS - 1, len(steps))):
        load(n)
    gi = 0
    oi = 0
    for n in nl.static_range(len(steps)):
        m0, mw, n0, nw = steps[n]
        nmt = math.ceil(mw / P)
        if n + BUFS - 1 < len(steps):
            load(n + BUFS - 1)
        for j in nl.static_range(math.ceil(nw / P)):
            c0 = j * P
            cw = min(P, nw - c0)
            o = outs[oi % BUFS]
            oi += 1
            for g in nl.static_range(math.ceil(nmt / TB)):
                ps = pss[gi % 4]
                gi += 1
                i0 = g * TB
                ni = min(TB, nmt - i0)
                for ii in nl.static_range(ni):
                    i = i0 + ii
                    rw = min(P, mw - i * P)
                    nisa.nc_transpose(dst=ps[0:cw, ii * P:ii * P + rw], data=rows[n % BUFS][i][0:rw, c0:c0 + cw])
                gw = min(ni * P, mw - i0 * P)
                if COPY == "scalar" or (COPY == "both" and gi % 2 == 0):
                    nisa.activation(dst=o[0:cw, i0 * P:i0 * P + gw], op=nl.copy, data=ps[0:cw, 0:gw])
                else:
                    nisa.tensor_copy(dst=o[0:cw, i0 * P:i0 * P + gw], src=ps[0:cw, 0:gw])
            nisa.dma_copy(dst=out[n0 + c0:n0 + c0 + cw, m0:m0 + mw], src=o[0:cw, 0:mw])
    return out


def transpose2d_ref(x):
    return np.ascontiguousarray(np.asarray(x).T)
