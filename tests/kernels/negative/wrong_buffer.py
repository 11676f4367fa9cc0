"""Negative: nc_matmul writing into SBUF instead of PSUM -> SIM_E_WRONG_BUFFER."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(lhsT, rhs):
    out = nl.ndarray((128, 512), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(dst=res, stationary=a, moving=b)  # ERROR
    nisa.dma_copy(dst=out, src=res)
    return out
