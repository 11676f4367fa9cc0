"""Negative: tensor_tensor on (128, 512) and (128, 256) -> SIM_E_SHAPE_MISMATCH."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray((128, 256), dtype=b.dtype, buffer=nl.sbuf)
    tc = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=nl.add)  # ERROR
    nisa.dma_copy(dst=out, src=tc)
    return out
