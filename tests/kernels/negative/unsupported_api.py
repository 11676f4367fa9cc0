"""Negative: an NKI call kforge does not implement (tier 3) -> SIM_E_UNSUPPORTED_API."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    u = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.nc_stream_shuffle(src=t, dst=u, shuffle_mask=[0] * 32)  # ERROR
    nisa.dma_copy(dst=out, src=u)
    return out
