"""Negative: memset with a string value -> SIM_E_BAD_ARGUMENT."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value="zero")  # ERROR
    nisa.dma_copy(dst=out, src=t)
    return out
