"""Negative: eight live 64 KiB-per-partition SBUF tiles (512 KiB) -> SIM_E_SBUF_CAPACITY."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    live = []
    for i in range(8):
        live.append(nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf))  # ERROR
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
