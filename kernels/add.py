"""kforge library: elementwise add, out = a + b, current NKI API.

a and b are (N, D) in the same dtype.  Rows go on the 128 partitions, the
free dim is cut into TILE_F-wide column tiles (the last one narrower); each
tile is two loads, one VectorE add and one store.  Wider tiles mean fewer,
larger DMAs; narrower ones start compute sooner.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "add",
    "entry": "add",
    "reference": "add_ref",
    "summary": "elementwise a + b over (N, D)",
    "inputs": [{"name": "a", "dims": ["N", "D"]}, {"name": "b", "dims": ["N", "D"]}],
    "supports": ["N >= 1", "D >= 1"],
    "reference_shapes": [[4096, 8192], [4096, 8192]],
    "test_shapes": [[200, 700], [200, 700]],
    "tunables": {
        "TILE_F": {"values": [128, 256, 512, 1024, 2048, 4096, 8192], "default": 512,
                   "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "engine_waits_on_dma": "down",
                                 "buffer_pressure": "down"}}
    },
    "flops": 0,
    "constraints": ["TILE_F <= 8192", "TILE_F < 2 * D or TILE_F == 128",
                    "3 * TILE_F * DTYPE_BYTES * 2 <= SBUF_BYTES"]
}


@nki.jit
def add(a, b, TILE_F=512):
    N, D = a.shape
    assert tuple(b.shape) == (N, D)
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(math.ceil(N / P)):
        r0 = r * P
        nr = min(P, N - r0)
        for c in nl.affine_range(math.ceil(D / TILE_F)):
            c0 = c * TILE_F
            nc = min(TILE_F, D - c0)
            ta = nl.ndarray((P, TILE_F), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((P, TILE_F), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=ta[0:nr, 0:nc], src=a[r0:r0 + nr, c0:c0 + nc])
            nisa.dma_copy(dst=tb[0:nr, 0:nc], src=b[r0:r0 + nr, c0:c0 + nc])
            to = nl.ndarray((P, TILE_F), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=to[0:nr, 0:nc], data1=ta[0:nr, 0:nc], data2=tb[0:nr, 0:nc],
                               op=nl.add)
            nisa.dma_copy(dst=out[r0:r0 + nr, c0:c0 + nc], src=to[0:nr, 0:nc])
    return out


def add_ref(a, b):
    return np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)
