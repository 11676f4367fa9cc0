"""Transpose the (F1, F2) blocks held in each partition row.

in_tensor is (P, F1*F2) with P <= 128; row p holds an F1 x F2 matrix in row-major
order.  The output row p holds its transpose (F2 x F1), row-major.
Legacy API: a 3-D index scatter through nl.copy, then a 3-D gather on store.
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def transpose2d(in_tensor, F1=4, F2=6):
    P, F = in_tensor.shape
    assert F == F1 * F2, f"free size {F} is not {F1}x{F2}"
    assert P <= nl.tile_size.pmax
    out_tensor = nl.ndarray((P, F), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    i_row = nl.arange(P)[:, None]
    i_col = nl.arange(F)[None, :]
    src = nl.load(in_tensor[i_row, i_col])

    # dst[p, b, a] = src[p, a*F2 + b]
    dst = nl.ndarray((nl.par_dim(P), F2, F1), dtype=in_tensor.dtype, buffer=nl.sbuf)
    i_p = nl.arange(P)[:, None, None]
    i_b = nl.arange(F2)[None, :, None]
    i_a = nl.arange(F1)[None, None, :]
    dst[i_p, i_b, i_a] = nl.copy(src[i_p, i_a * F2 + i_b])

    nl.store(out_tensor[i_p, i_b * F1 + i_a], value=dst[i_p, i_b, i_a])
    return out_tensor
