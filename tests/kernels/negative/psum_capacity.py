"""Negative: nine live 2 KiB PSUM tiles, over the 8 banks -> SIM_E_PSUM_CAPACITY."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    live = []
    for i in range(9):
        live.append(nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum))  # ERROR
    t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
