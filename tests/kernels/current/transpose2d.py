"""Transpose the (F1, F2) blocks held in each partition row, current API.

in_tensor is (P, F1*F2), P <= 128; row p holds an F1 x F2 matrix row-major and
the output row p holds its F2 x F1 transpose: one strided tensor_copy through
access patterns (.ap), as the legacy kernel does with one indexed nl.copy.
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
    # one strided copy: dst viewed as [p, b, a] (contiguous), src read as
    # [p, b, a] -> src[p, a*F2 + b] (strides in elements)
    nisa.tensor_copy(dst=dst.ap(pattern=[[F, P], [F1, F2], [1, F1]], offset=0),
                     src=src.ap(pattern=[[F, P], [1, F2], [F2, F1]], offset=0))
    nisa.dma_copy(dst=out_tensor, src=dst)
    return out_tensor
