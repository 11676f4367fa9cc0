"""Negative (trn1): perf_mode=double_row needs NeuronCore-v3 or newer; on
trn1 (NeuronCore-v2) -> SIM_E_BAD_ARGUMENT (rule double-row-target) naming the
target.  The same kernel runs on trn2 (tests/kernels/current/matmul_double_row.py)."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(lhsT, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.ndarray((128, 2, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
    mv = nl.ndarray((128, 2, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=lhsT.reshape((128, 2, 128)))
    nisa.dma_copy(dst=mv, src=rhs.reshape((128, 2, 512)))
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv, perf_mode=nisa.matmul_perf_mode.double_row)  # ERROR
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
