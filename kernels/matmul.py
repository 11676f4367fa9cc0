"""kforge library: matrix multiply out = lhsT.T @ rhs, current NKI API.

lhsT is (K, M) (the contraction dim K on partitions), rhs is (K, N), out is
(M, N) in lhsT's dtype, accumulated in float32 PSUM.  Tiles are 128 rows by
TN columns.  The output is computed one column block of BN = BLOCK_N * TN
columns at a time: the rhs column block (all of K) is loaded once into one
resident SBUF buffer and every lhsT column group of BM = BLOCK_M * 128 rows
(all of K, double-buffered) streams past it.  Each output row band of the
block is gathered in SBUF and stored with one DMA.  So rhs is read once,
lhsT N / BN times; a DMA moves BN (rhs, out) or BM (lhsT) contiguous
elements per partition row, and the DMA engines only run at full rate from
4 KiB per row (2048 bf16 columns), so wide blocks matter most for the DMA
cost, at the price of SBUF (the constraint).  Every edge (K, M or N not a
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
    "flops": "2 * K * M * N",
    "tunables": {
        "TN": {"values": [128, 256, 512], "default": 512,
               "addresses": {"tensor_underfilled": "up", "dma_small_transfers": "up", "instruction_overhead": "up"}},
        "BLOCK_M": {"values": [1, 2, 4, 8], "default": 1,
                    "addresses": {"dma_small_transfers": "up", "buffer_pressure": "down"}},
        "BLOCK_N": {"values": [1, 2, 4, 8], "default": 1,
                    "addresses": {"redundant_hbm_loads": "up", "dma_small_transfers": "up",
                                  "engine_waits_on_dma": "up", "buffer_pressure": "down"}}
    },
    "constraints": ["DTYPE_BYTES * ((K + 127) // 128 * (BLOCK_N * TN + 2 * BLOCK_M * 128) + 2 * BLOCK_N * TN) <= SBUF_BYTES - 16384",
                    "BLOCK_M == 1 or (BLOCK_M // 2) * 128 < M",
                    "BLOCK_N == 1 or (BLOCK_N // 2) * TN < N",
                    "BLOCK_N * TN <= 2048",
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

    # one resident rhs column block: reloading k-slice k waits only for the
    # previous block's matmuls that read that slice
    b = nl.ndarray((TK, NK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
    for bn in nl.affine_range(math.ceil(N / BN)):
        n0 = bn * BN
        nw = min(BN, N - n0)
        for k in nl.affine_range(NK):
            k0 = k * TK
            kw = min(TK, K - k0)
            nisa.dma_copy(dst=b[0:kw, k, 0:nw], src=rhs[k0:k0 + kw, n0:n0 + nw])
        for bm in nl.affine_range(math.ceil(M / BM)):
            m0 = bm * BM
            mw = min(BM, M - m0)
            a = nl.ndarray((TK, NK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(NK):
                k0 = k * TK
                kw = min(TK, K - k0)
                nisa.dma_copy(dst=a[0:kw, k, 0:mw], src=lhsT[k0:k0 + kw, m0:m0 + mw])
            for tm in nl.affine_range(math.ceil(mw / TM)):
                i0 = tm * TM
                iw = min(TM, mw - i0)
                NT = math.ceil(nw / TN)
                accs = []
                for tn in nl.affine_range(NT):
                    accs.append(nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum))
                # k outer: one stationary lhsT tile serves the row band's
                # NT matmuls, and a freshly loaded rhs slice feeds NT of them
                for k in nl.affine_range(NK):
                    kw = min(TK, K - k * TK)
                    for tn in nl.affine_range(NT):
                        j0 = tn * TN
                        jw = min(TN, nw - j0)
                        nisa.nc_matmul(dst=accs[tn][0:iw, 0:jw],
                                       stationary=a[0:kw, k, i0:i0 + iw],
                                       moving=b[0:kw, k, j0:j0 + jw])
                res = nl.ndarray((TM, BN), dtype=out.dtype, buffer=nl.sbuf)
                for tn in nl.affine_range(NT):
                    j0 = tn * TN
                    jw = min(TN, nw - j0)
                    nisa.tensor_copy(dst=res[0:iw, j0:j0 + jw], src=accs[tn][0:iw, 0:jw])
                nisa.dma_copy(dst=out[m0 + i0:m0 + i0 + iw, n0:n0 + nw], src=res[0:iw, 0:nw])
    return out


def matmul_ref(lhsT, rhs):
    return np.asarray(lhsT, dtype=np.float64).T @ np.asarray(rhs, dtype=np.float64)
