"""kforge library: 2-D transpose, out = x.T, current NKI API.

x is (M, N), out (N, M).  Row tiles of x (128 rows by LOAD_COLS columns) are
loaded, cut into 128 x 128 blocks and transposed on TensorE into PSUM; the
transposed blocks of M_BLOCK consecutive row tiles are gathered in one SBUF
tile so each store writes M_BLOCK * 128 contiguous elements per row of out.
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
        "M_BLOCK": {"values": [1, 2, 4, 8, 16], "default": 1,
                    "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "buffer_pressure": "down"}}
    },
    "flops": 0,
    "constraints": ["LOAD_COLS == 128 or LOAD_COLS // 2 < N",
                    "M_BLOCK == 1 or (M_BLOCK // 2) * 128 < M",
                    "2 * M_BLOCK * LOAD_COLS * DTYPE_BYTES + 2 * M_BLOCK * 128 * DTYPE_BYTES <= SBUF_BYTES - 8192"]
}


@nki.jit
def transpose2d(x, LOAD_COLS=128, M_BLOCK=1):
    M, N = x.shape
    P = 128
    MB = P * M_BLOCK
    out = nl.ndarray((N, M), dtype=x.dtype, buffer=nl.shared_hbm)

    for mb in nl.affine_range(math.ceil(M / MB)):
        m0 = mb * MB
        mw = min(MB, M - m0)
        nmt = math.ceil(mw / P)
        for nb in nl.affine_range(math.ceil(N / LOAD_COLS)):
            n0 = nb * LOAD_COLS
            nw = min(LOAD_COLS, N - n0)
            rows = []
            for i in nl.affine_range(nmt):
                rw = min(P, mw - i * P)
                a = nl.ndarray((P, LOAD_COLS), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a[0:rw, 0:nw], src=x[m0 + i * P:m0 + i * P + rw, n0:n0 + nw])
                rows.append(a)
            for j in nl.affine_range(math.ceil(nw / P)):
                c0 = j * P
                cw = min(P, nw - c0)
                o = nl.ndarray((P, MB), dtype=x.dtype, buffer=nl.sbuf)
                for i in nl.affine_range(nmt):
                    rw = min(P, mw - i * P)
                    ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
                    nisa.nc_transpose(dst=ps[0:cw, 0:rw], data=rows[i][0:rw, c0:c0 + cw])
                    nisa.tensor_copy(dst=o[0:cw, i * P:i * P + rw], src=ps[0:cw, 0:rw])
                nisa.dma_copy(dst=out[n0 + c0:n0 + c0 + cw, m0:m0 + mw], src=o[0:cw, 0:mw])
    return out


def transpose2d_ref(x):
    return np.ascontiguousarray(np.asarray(x).T)
