"""Elementwise add of two (M, N) tensors, one (128, 512) tile per SPMD program.

Legacy API (neuronxcc.nki): launch as tensor_add[ceil(M/128), ceil(N/512)](a, b).
Edges are masked, so M and N need not be multiples of the tile.
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl

TILE_P = 128
TILE_F = 512


@nki.jit
def tensor_add(a_input, b_input):
    assert a_input.shape == b_input.shape
    rows, cols = a_input.shape
    c_output = nl.ndarray((rows, cols), dtype=a_input.dtype, buffer=nl.shared_hbm)

    # which tile this program owns
    row0 = nl.program_id(axis=0) * TILE_P
    col0 = nl.program_id(axis=1) * TILE_F
    i_p = row0 + nl.arange(TILE_P)[:, None]
    i_f = col0 + nl.arange(TILE_F)[None, :]
    inside = (i_p < rows) & (i_f < cols)

    a_tile = nl.load(a_input[i_p, i_f], mask=inside)
    b_tile = nl.load(b_input[i_p, i_f], mask=inside)
    c_tile = a_tile + b_tile
    nl.store(c_output[i_p, i_f], value=c_tile, mask=inside)
    return c_output
