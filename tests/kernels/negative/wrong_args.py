"""Negative: the kernel takes two tensors but is given one -> SIM_E_ARGS."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out
