"""Negative: a 4 TiB HBM tensor, beyond the simulator's limits -> SIM_E_LIMIT."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    huge = nl.ndarray((1 << 20, 1 << 20), dtype=nl.float32, buffer=nl.shared_hbm)  # ERROR
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=huge[0:128, 0:64], src=t)
    return huge
