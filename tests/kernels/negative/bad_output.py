"""Negative: the kernel returns an SBUF tile instead of an HBM tensor -> SIM_E_OUTPUT."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t  # ERROR
