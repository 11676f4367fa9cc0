"""Negative: a matmul whose moving operand covers 64 partitions from partition 32
(an engine access of 33-64 partitions starts at 0 or 64) -> SIM_E_PARTITION_START."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=t[0:64, :], moving=t[32:96, :])  # ERROR
    res = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
