"""Indirect (tensor-indexed) DMA: gather rows of an HBM tensor by an index
tile, and scatter rows into one.

Current API (import nki): an SBUF int32 tile of one row index per partition
indexes the row dimension of an HBM view given to nisa.dma_copy (gather when
it is the src, scatter when it is the dst).  idx is (K, 1) with K a multiple
of 128; data is (N, D).
"""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def gather_rows(data, idx):
    K = idx.shape[0]
    D = data.shape[1]
    out = nl.ndarray((K, D), dtype=data.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(K // 128):
        r0 = t * 128
        ix = nl.ndarray((128, 1), dtype=idx.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx[r0:r0 + 128, :])
        rows = nl.ndarray((128, D), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=data[ix, :])
        nisa.dma_copy(dst=out[r0:r0 + 128, :], src=rows)
    return out


@nki.jit
def scatter_rows(data, idx, upd):
    """out = data with row idx[k] replaced by upd[k] (a later k wins)."""
    N, D = data.shape
    K = idx.shape[0]
    out = nl.ndarray((N, D), dtype=data.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(N // 128):
        r0 = t * 128
        buf = nl.ndarray((128, D), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=buf, src=data[r0:r0 + 128, :])
        nisa.dma_copy(dst=out[r0:r0 + 128, :], src=buf)
    for t in nl.sequential_range(K // 128):
        r0 = t * 128
        ix = nl.ndarray((128, 1), dtype=idx.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx[r0:r0 + 128, :])
        u = nl.ndarray((128, D), dtype=upd.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=upd[r0:r0 + 128, :])
        nisa.dma_copy(dst=out[ix, :], src=u)
    return out


@nki.jit
def gather_rows_skip(data, idx):
    """gather_rows with oob_mode=skip: a row whose index is outside data keeps
    the zeros memset wrote."""
    K = idx.shape[0]
    D = data.shape[1]
    out = nl.ndarray((K, D), dtype=data.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(K // 128):
        r0 = t * 128
        ix = nl.ndarray((128, 1), dtype=idx.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx[r0:r0 + 128, :])
        rows = nl.ndarray((128, D), dtype=data.dtype, buffer=nl.sbuf)
        nisa.memset(dst=rows, value=0.0)
        nisa.dma_copy(dst=rows, src=data[ix, :], oob_mode=nisa.oob_mode.skip)
        nisa.dma_copy(dst=out[r0:r0 + 128, :], src=rows)
    return out
