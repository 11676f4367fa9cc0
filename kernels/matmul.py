"""kforge library: matrix multiply out = lhsT.T @ rhs, current NKI API.

lhsT is (K, M) (the contraction dim K on partitions), rhs is (K, N), out is
(M, N) in lhsT's dtype, accumulated in float32 PSUM.  The output is cut into
blocks of BLOCK_M x BLOCK_N tiles (a tile is 128 rows by TN columns); an
lhsT column block is loaded once per block row and kept in SBUF while every
rhs block of that row streams past it, so larger blocks mean fewer HBM
reloads and larger DMAs, at the price of SBUF.  Every edge (K, M or N not a
multiple of the tile) is handled with narrower slices.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "matmul",
    "entry": "matmul",
    "reference": "matmul_ref",
    "summary": "lhsT.T @ rhs for lhsT (K, M), rhs (K, N)",
    "inputs": [{"name": "lhsT", "dims": ["K", "M"]}, {"name": "rhs", "dims": ["K", "N"]}],
    "supports": ["K >= 1", "M >= 1", "N >= 1", "K <= 32768"],
    "reference_shapes": [[4096, 4096], [4096, 4096]],
    "test_shapes": [[200, 300], [200, 700]],
    "tunables": {
        "TN": {"values": [128, 256, 512], "default": 512,
               "addresses": {"tensor_underfilled": "up", "dma_small_transfers": "up", "instruction_overhead": "up"}},
        "BLOCK_M": {"values": [1, 2, 4, 8], "default": 1,
                    "addresses": {"redundant_hbm_loads": "up", "dma_small_transfers": "up",
                                  "buffer_pressure": "down"}},
        "BLOCK_N": {"values": [1, 2, 4, 8], "default": 1,
                    "addresses": {"redundant_hbm_loads": "up", "dma_small_transfers": "up",
                                  "engine_waits_on_dma": "up", "buffer_pressure": "down"}}
    },
    "constraints": ["2 * ((K + 127) // 128) * (BLOCK_M * 128 + BLOCK_N * TN) * DTYPE_BYTES <= SBUF_BYTES - 16384",
                    "BLOCK_M == 1 or (BLOCK_M // 2) * 128 < M",
                    "BLOCK_N == 1 or (BLOCK_N // 2) * TN < N",
                    "TN == 128 or TN // 2 < N"]
}


@nki.jit
def matmul(lhsT, rhs, TN=512, BLOCK_M=1, BLOCK_N=1):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2
    TK, TM = 128, 128
    BM, BN = TM * BLOCK_M, TN * BLOCK_N
    NK = math.ceil(K / TK)
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for bm in nl.affine_range(math.ceil(M / BM)):
        m0 = bm * BM
        mw = min(BM, M - m0)
        lhs_blk = []
        for k in nl.affine_range(NK):
            k0 = k * TK
            kw = min(TK, K - k0)
            a = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a[0:kw, 0:mw], src=lhsT[k0:k0 + kw, m0:m0 + mw])
            lhs_blk.append(a)
        for bn in nl.affine_range(math.ceil(N / BN)):
            n0 = bn * BN
            nw = min(BN, N - n0)
            rhs_blk = []
            for k in nl.affine_range(NK):
                k0 = k * TK
                kw = min(TK, K - k0)
                b = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b[0:kw, 0:nw], src=rhs[k0:k0 + kw, n0:n0 + nw])
                rhs_blk.append(b)
            for tm in nl.affine_range(math.ceil(mw / TM)):
                i0 = tm * TM
                iw = min(TM, mw - i0)
                for tn in nl.affine_range(math.ceil(nw / TN)):
                    j0 = tn * TN
                    jw = min(TN, nw - j0)
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(NK):
                        kw = min(TK, K - k * TK)
                        nisa.nc_matmul(dst=acc[0:iw, 0:jw],
                                       stationary=lhs_blk[k][0:kw, i0:i0 + iw],
                                       moving=rhs_blk[k][0:kw, j0:j0 + jw])
                    res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res[0:iw, 0:jw], src=acc[0:iw, 0:jw])
                    nisa.dma_copy(dst=out[m0 + i0:m0 + i0 + iw, n0 + j0:n0 + j0 + jw],
                                  src=res[0:iw, 0:jw])
    return out


def matmul_ref(lhsT, rhs):
    return np.asarray(lhsT, dtype=np.float64).T @ np.asarray(rhs, dtype=np.float64)
