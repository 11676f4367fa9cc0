"""Negative: reading rows 0..255 of a (128, 64) tensor -> SIM_E_INDEX_OUT_OF_BOUNDS."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    for i in range(2):
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, 0:64])  # ERROR
    nisa.dma_copy(dst=out, src=t)
    return out
