"""out = lhsT.T @ rhs, the five stages of the matmul tutorial, current API.

lhsT is (K, M) (contraction dim K on partitions), rhs is (K, N), out (M, N)
in lhsT's dtype.  nc_matmul(dst, stationary, moving) computes
dst[M, N] (+)= stationary[K, M].T @ moving[K, N]; a freshly allocated PSUM
tile is overwritten by its first matmul and accumulated by the next ones.
"""
import math

import nki
import nki.language as nl
import nki.isa as nisa

TM, TN, TK = 128, 512, 128


@nki.jit
def matmul_naive(lhsT, rhs):
    """One tile: K <= 128, M <= 128, N <= 512."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    a = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((K, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    res = nl.ndarray((M, N), dtype=out.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def matmul_tiled(lhsT, rhs):
    """(M/128, N/512) output tiles, K/128 contraction tiles accumulated in
    PSUM.  K must be a multiple of 128; ragged M and N edges use min()."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2 and K % TK == 0
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(math.ceil(M / TM)):
        m0 = m * TM
        mw = min(TM, M - m0)
        for n in nl.affine_range(math.ceil(N / TN)):
            n0 = n * TN
            nw = min(TN, N - n0)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a[0:TK, 0:mw], src=lhsT[k * TK:(k + 1) * TK, m0:m0 + mw])
                nisa.dma_copy(dst=b[0:TK, 0:nw], src=rhs[k * TK:(k + 1) * TK, n0:n0 + nw])
                nisa.nc_matmul(dst=acc[0:mw, 0:nw], stationary=a[0:TK, 0:mw], moving=b[0:TK, 0:nw])
            res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res[0:mw, 0:nw], src=acc[0:mw, 0:nw])
            nisa.dma_copy(dst=out[m0:m0 + mw, n0:n0 + nw], src=res[0:mw, 0:nw])
    return out


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """As tiled, but the K tiles of one lhsT column block are loaded once,
    before the N loop.  K, M multiples of 128, N a multiple of 512."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2 and K % TK == 0 and M % TM == 0 and N % TN == 0
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(M // TM):
        lhs_tiles = []
        for k in nl.affine_range(K // TK):
            t = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            lhs_tiles.append(t)
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=lhs_tiles[k], moving=b)
            res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


@nki.jit
def matmul_blocked(lhsT, rhs, BLOCK_M=2, BLOCK_N=2):
    """Blocks of BLOCK_M x BLOCK_N output tiles share their operand loads;
    each operand block is one wide DMA per K tile."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    BM, BN = TM * BLOCK_M, TN * BLOCK_N
    assert K == K2 and K % TK == 0 and M % BM == 0 and N % BN == 0
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    NK = K // TK

    for bm in nl.affine_range(M // BM):
        lhs_blk = []
        for k in nl.affine_range(NK):
            t = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=lhsT[k * TK:(k + 1) * TK, bm * BM:(bm + 1) * BM])
            lhs_blk.append(t)
        for bn in nl.affine_range(N // BN):
            rhs_blk = []
            for k in nl.affine_range(NK):
                t = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[k * TK:(k + 1) * TK, bn * BN:(bn + 1) * BN])
                rhs_blk.append(t)
            for tm in nl.affine_range(BLOCK_M):
                for tn in nl.affine_range(BLOCK_N):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(NK):
                        nisa.nc_matmul(dst=acc,
                                       stationary=lhs_blk[k][0:TK, tm * TM:(tm + 1) * TM],
                                       moving=rhs_blk[k][0:TK, tn * TN:(tn + 1) * TN])
                    res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res, src=acc)
                    r0 = bm * BM + tm * TM
                    c0 = bn * BN + tn * TN
                    nisa.dma_copy(dst=out[r0:r0 + TM, c0:c0 + TN], src=res)
    return out


@nki.jit
def matmul_optimized(lhsT, rhs, BLOCK_M=2, BLOCK_N=2, BLOCK_K=2):
    """Blocks over K too: each K block's partial products accumulate in PSUM,
    and the K blocks are summed in fp32 SBUF tiles with tensor_tensor."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    BM, BN, BK = TM * BLOCK_M, TN * BLOCK_N, TK * BLOCK_K
    assert K == K2 and K % BK == 0 and M % BM == 0 and N % BN == 0
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for bm in nl.affine_range(M // BM):
        for bn in nl.affine_range(N // BN):
            res_tiles = []
            for tm in nl.affine_range(BLOCK_M):
                row = []
                for tn in nl.affine_range(BLOCK_N):
                    r = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=r, value=0.0)
                    row.append(r)
                res_tiles.append(row)
            for bk in nl.sequential_range(K // BK):
                lhs_blk = []
                rhs_blk = []
                for k in nl.affine_range(BLOCK_K):
                    k0 = bk * BK + k * TK
                    a = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    b = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a, src=lhsT[k0:k0 + TK, bm * BM:(bm + 1) * BM])
                    nisa.dma_copy(dst=b, src=rhs[k0:k0 + TK, bn * BN:(bn + 1) * BN])
                    lhs_blk.append(a)
                    rhs_blk.append(b)
                for tm in nl.affine_range(BLOCK_M):
                    for tn in nl.affine_range(BLOCK_N):
                        part = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(BLOCK_K):
                            nisa.nc_matmul(dst=part,
                                           stationary=lhs_blk[k][0:TK, tm * TM:(tm + 1) * TM],
                                           moving=rhs_blk[k][0:TK, tn * TN:(tn + 1) * TN])
                        nisa.tensor_tensor(dst=res_tiles[tm][tn], data1=res_tiles[tm][tn],
                                           data2=part, op=nl.add)
            for tm in nl.affine_range(BLOCK_M):
                for tn in nl.affine_range(BLOCK_N):
                    res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res, src=res_tiles[tm][tn])
                    r0 = bm * BM + tm * TM
                    c0 = bn * BN + tn * TN
                    nisa.dma_copy(dst=out[r0:r0 + TM, c0:c0 + TN], src=res)
    return out
