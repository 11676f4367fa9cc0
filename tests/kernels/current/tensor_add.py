"""Elementwise add of two (M, N) tensors, one (128, 512) tile per SPMD program.

Current API (import nki): dst-first nisa calls on nl.ndarray buffers.  Launch
as tensor_add[ceil(M/128), ceil(N/512)](a, b); ragged edges use min().
"""
import nki
import nki.language as nl
import nki.isa as nisa

TILE_P = 128
TILE_F = 512


@nki.jit
def tensor_add(a_input, b_input):
    assert a_input.shape == b_input.shape
    rows, cols = a_input.shape
    c_output = nl.ndarray((rows, cols), dtype=a_input.dtype, buffer=nl.shared_hbm)

    r0 = nl.program_id(0) * TILE_P
    c0 = nl.program_id(1) * TILE_F
    nr = min(TILE_P, rows - r0)
    nc = min(TILE_F, cols - c0)

    a_tile = nl.ndarray((TILE_P, TILE_F), dtype=a_input.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray((TILE_P, TILE_F), dtype=b_input.dtype, buffer=nl.sbuf)
    c_tile = nl.ndarray((TILE_P, TILE_F), dtype=a_input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile[0:nr, 0:nc], src=a_input[r0:r0 + nr, c0:c0 + nc])
    nisa.dma_copy(dst=b_tile[0:nr, 0:nc], src=b_input[r0:r0 + nr, c0:c0 + nc])
    nisa.tensor_tensor(dst=c_tile[0:nr, 0:nc], data1=a_tile[0:nr, 0:nc],
                       data2=b_tile[0:nr, 0:nc], op=nl.add)
    nisa.dma_copy(dst=c_output[r0:r0 + nr, c0:c0 + nc], src=c_tile[0:nr, 0:nc])
    return c_output
