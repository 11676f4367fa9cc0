"""Indirect (tensor-indexed) DMA: gather rows of an HBM tensor by an index
tile, and scatter rows into one.

Legacy API (neuronxcc.nki): the index tile is an SBUF tile of int32, one row
index per partition, used as the index of the row dimension in nl.load /
nl.store (the NKI docs' "indirect DMA access").  idx is (K, 1) with K a
multiple of 128; data is (N, D).
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def gather_rows(data, idx):
    K = idx.shape[0]
    D = data.shape[1]
    out = nl.ndarray((K, D), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    i_0 = nl.arange(1)[None, :]
    for t in nl.affine_range(K // 128):
        ix = nl.load(idx[t * 128 + i_p, i_0])
        rows = nl.load(data[ix, i_f])
        nl.store(out[t * 128 + i_p, i_f], value=rows)
    return out


@nki.jit
def scatter_rows(data, idx, upd):
    """out = data with row idx[k] replaced by upd[k] (a later k wins)."""
    N, D = data.shape
    K = idx.shape[0]
    out = nl.ndarray((N, D), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    for t in nl.affine_range(N // 128):
        nl.store(out[t * 128 + i_p, i_f], value=nl.load(data[t * 128 + i_p, i_f]))
    for t in nl.sequential_range(K // 128):
        ix = nl.load(idx[t * 128 + i_p, nl.arange(1)[None, :]])
        u = nl.load(upd[t * 128 + i_p, i_f])
        nl.store(out[ix[i_p, 0], i_f], value=u)
    return out


@nki.jit
def gather_rows_ragged(data, idx):
    """gather_rows for any K: the last tile's rows past K are masked off (their
    index tile rows are never loaded, so their indices are not used)."""
    K = idx.shape[0]
    D = data.shape[1]
    out = nl.ndarray((K, D), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]
    for t in nl.affine_range((K + 127) // 128):
        inside = t * 128 + i_p < K
        ix = nl.load(idx[t * 128 + i_p, nl.arange(1)[None, :]], mask=inside)
        rows = nl.load(data[ix, i_f], mask=inside)
        nl.store(out[t * 128 + i_p, i_f], value=rows, mask=inside)
    return out
