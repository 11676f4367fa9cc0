"""out = lhsT.T @ rhs, the five stages of the matmul tutorial, legacy API.

lhsT is (K, M) (the left operand delivered transposed: the contraction dim K
goes on partitions), rhs is (K, N), out is (M, N) in lhsT's dtype.
"""
import math

from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def matmul_naive(lhsT, rhs):
    """One tile: K <= 128, M <= 128, N <= 512."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    i_k, i_m = nl.mgrid[0:K, 0:M]
    j_k, j_n = nl.mgrid[0:K, 0:N]
    lhs_tile = nl.load(lhsT[i_k, i_m])
    rhs_tile = nl.load(rhs[j_k, j_n])
    acc = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)   # (M, N) fp32 in PSUM
    res = nl.copy(acc, dtype=out.dtype)

    o_m, o_n = nl.mgrid[0:M, 0:N]
    nl.store(out[o_m, o_n], value=res)
    return out


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Loop over (M/128, N/512) output tiles and K/128 contraction tiles.
    K must be a multiple of 128; ragged M and N edges are masked."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2 and K % 128 == 0
    TM, TN, TK = 128, 512, 128
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    i_k = nl.arange(TK)[:, None]
    i_m = nl.arange(TM)[None, :]
    i_n = nl.arange(TN)[None, :]
    o_m = nl.arange(TM)[:, None]

    for m in nl.affine_range(math.ceil(M / TM)):
        for n in nl.affine_range(math.ceil(N / TN)):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK + i_k, m * TM + i_m], mask=(m * TM + i_m < M))
                b = nl.load(rhs[k * TK + i_k, n * TN + i_n], mask=(n * TN + i_n < N))
                acc += nl.matmul(a, b, transpose_x=True)
            res = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * TM + o_m, n * TN + i_n], value=res,
                     mask=(m * TM + o_m < M) & (n * TN + i_n < N))
    return out


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """As tiled, but each row block of lhsT is loaded once, outside the N loop.
    K, M multiples of 128; N a multiple of 512."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2 and K % 128 == 0 and M % 128 == 0 and N % 512 == 0
    TM, TN, TK = 128, 512, 128
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    i_k, i_m = nl.mgrid[0:TK, 0:TM]
    j_k, j_n = nl.mgrid[0:TK, 0:TN]
    o_m, o_n = nl.mgrid[0:TM, 0:TN]

    for m in nl.affine_range(M // TM):
        lhs_tiles = nl.ndarray((K // TK, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TK):
            lhs_tiles[k, i_k, i_m] = nl.load(lhsT[k * TK + i_k, m * TM + i_m])
        for n in nl.affine_range(N // TN):
            rhs_tiles = nl.ndarray((K // TK, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TK):
                rhs_tiles[k, j_k, j_n] = nl.load(rhs[k * TK + j_k, n * TN + j_n])
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                acc += nl.matmul(lhs_tiles[k, i_k, i_m], rhs_tiles[k, j_k, j_n], transpose_x=True)
            nl.store(out[m * TM + o_m, n * TN + o_n], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def matmul_blocked(lhsT, rhs, BLOCK_M=2, BLOCK_N=2):
    """Blocks of BLOCK_M x BLOCK_N output tiles share their operand loads."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    TM, TN, TK = 128, 512, 128
    BM, BN = TM * BLOCK_M, TN * BLOCK_N
    assert K == K2 and K % TK == 0 and M % BM == 0 and N % BN == 0
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    NK = K // TK

    i_k = nl.arange(TK)[:, None]
    i_bm = nl.arange(BM)[None, :]
    i_bn = nl.arange(BN)[None, :]
    o_m = nl.arange(TM)[:, None]
    o_n = nl.arange(TN)[None, :]

    for bm in nl.affine_range(M // BM):
        lhs_blk = nl.ndarray((NK, nl.par_dim(TK), BM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(NK):
            lhs_blk[k, i_k, i_bm] = nl.load(lhsT[k * TK + i_k, bm * BM + i_bm])
        for bn in nl.affine_range(N // BN):
            rhs_blk = nl.ndarray((NK, nl.par_dim(TK), BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(NK):
                rhs_blk[k, i_k, i_bn] = nl.load(rhs[k * TK + i_k, bn * BN + i_bn])
            for tm in nl.affine_range(BLOCK_M):
                for tn in nl.affine_range(BLOCK_N):
                    acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(NK):
                        acc += nl.matmul(lhs_blk[k, i_k, tm * TM + nl.arange(TM)[None, :]],
                                         rhs_blk[k, i_k, tn * TN + o_n], transpose_x=True)
                    res = nl.copy(acc, dtype=out.dtype)
                    nl.store(out[bm * BM + tm * TM + o_m, bn * BN + tn * TN + o_n], value=res)
    return out


@nki.jit
def matmul_optimized(lhsT, rhs, BLOCK_M=2, BLOCK_N=2, BLOCK_K=2):
    """Blocks over K as well: partial products of each K block are summed in
    PSUM by nc_matmul, and across K blocks in SBUF (fp32) with +=."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    TM, TN, TK = 128, 512, 128
    BM, BN, BK = TM * BLOCK_M, TN * BLOCK_N, TK * BLOCK_K
    assert K == K2 and K % BK == 0 and M % BM == 0 and N % BN == 0
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    i_k = nl.arange(TK)[:, None]
    i_m = nl.arange(TM)[None, :]
    i_n = nl.arange(TN)[None, :]
    o_m = nl.arange(TM)[:, None]

    for bm in nl.affine_range(M // BM):
        for bn in nl.affine_range(N // BN):
            res_tiles = nl.zeros((BLOCK_M, BLOCK_N, nl.par_dim(TM), TN), dtype=nl.float32,
                                 buffer=nl.sbuf)
            for bk in nl.sequential_range(K // BK):
                lhs_blk = nl.ndarray((BLOCK_K, nl.par_dim(TK), BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_blk = nl.ndarray((BLOCK_K, nl.par_dim(TK), BN), dtype=rhs.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(BLOCK_K):
                    row = bk * BK + k * TK + i_k
                    lhs_blk[k, i_k, nl.arange(BM)[None, :]] = nl.load(
                        lhsT[row, bm * BM + nl.arange(BM)[None, :]])
                    rhs_blk[k, i_k, nl.arange(BN)[None, :]] = nl.load(
                        rhs[row, bn * BN + nl.arange(BN)[None, :]])
                for tm in nl.affine_range(BLOCK_M):
                    for tn in nl.affine_range(BLOCK_N):
                        part = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(BLOCK_K):
                            part += nisa.nc_matmul(lhs_blk[k, i_k, tm * TM + i_m],
                                                   rhs_blk[k, i_k, tn * TN + i_n])
                        res_tiles[tm, tn, o_m, i_n] += part
            for tm in nl.affine_range(BLOCK_M):
                for tn in nl.affine_range(BLOCK_N):
                    res = nl.copy(res_tiles[tm, tn, o_m, i_n], dtype=out.dtype)
                    nl.store(out[bm * BM + tm * TM + o_m, bn * BN + tn * TN + i_n], value=res)
    return out
