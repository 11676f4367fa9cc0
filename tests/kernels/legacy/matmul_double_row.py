"""FP8 matmul in the Tensor engine's double_row performance mode (trn2/trn3).

Legacy API: nisa.nc_matmul(stationary, moving, perf_mode=...) returns the
fp32 PSUM (M, N) tile; stationary (128, 2, M) and moving (128, 2, N) FP8
tiles contract both rows of every partition (K = 256).  lhsT is (256, M),
rhs (256, N): row 2k + r of each goes to partition k, row slot r, so
out = lhsT.T @ rhs.
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def matmul_double_row(lhsT, rhs):
    K2, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.load(lhsT.reshape((128, 2, M)))
    mv = nl.load(rhs.reshape((128, 2, N)))
    acc = nisa.nc_matmul(st, mv, perf_mode=nisa.matmul_perf_mode.double_row)
    nl.store(out, value=nl.copy(acc, dtype=nl.float32))
    return out
