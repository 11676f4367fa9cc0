"""Negative: an SBUF tile with 256 partitions -> SIM_E_PARTITION_LIMIT."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((256, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((256, 64), dtype=x.dtype, buffer=nl.sbuf)  # ERROR
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
