"""Transpose the (F1, F2) blocks held in each partition row, current API.

in_tensor is (P, F1*F2), P <= 128; row p holds an F1 x F2 matrix row-major and
the output row p holds its F2 x F1 transpose.  One column copy per element pair.
"""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def transpose2d(in_tensor, F1=4, F2=6):
    P, F = in_tensor.shape
    assert F == F1 * F2, f"free size {F} is not {F1}x{F2}"
    assert P <= nl.tile_size.pmax
    out_tensor = nl.ndarray((P, F), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    src = nl.ndarray((P, F), dtype=in_tensor.dtype, buffer=nl.sbuf)
    dst = nl.ndarray((P, F), dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=in_tensor)
    for a in nl.static_range(F1):
        for b in nl.static_range(F2):
            nisa.tensor_copy(dst=dst[0:P, nl.ds(b * F1 + a, 1)],
                             src=src[0:P, nl.ds(a * F2 + b, 1)])
    nisa.dma_copy(dst=out_tensor, src=dst)
    return out_tensor
