"""FP8 matmul in the Tensor engine's double_row performance mode (trn2/trn3).

Current API: stationary (128, 2, M) and moving (128, 2, N) FP8 tiles; one
nc_matmul contracts both rows of every partition (K = 256) into an fp32
PSUM (M, N) tile.  lhsT is (256, M), rhs (256, N): row 2k + r of each goes
to partition k, row slot r, so out = lhsT.T @ rhs.
"""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit(platform_target='trn2')
def matmul_double_row(lhsT, rhs):
    K2, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.ndarray((128, 2, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    mv = nl.ndarray((128, 2, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=lhsT.reshape((128, 2, M)))
    nisa.dma_copy(dst=mv, src=rhs.reshape((128, 2, N)))
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv,
                   perf_mode=nisa.matmul_perf_mode.double_row)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
