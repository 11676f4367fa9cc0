"""NumPy references for gather_scatter (indirect DMA)."""
import numpy as np


def gather_rows(data, idx):
    return data[idx[:, 0]]


def scatter_rows(data, idx, upd):
    out = data.copy()
    for k in range(idx.shape[0]):   # in order: a later k wins a repeated index
        out[idx[k, 0]] = upd[k]
    return out


def gather_rows_skip(data, idx):
    out = np.zeros((idx.shape[0], data.shape[1]), dtype=data.dtype)
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < data.shape[0])
    out[ok] = data[idx[ok, 0]]
    return out


def gather_rows_ragged(data, idx):
    return data[idx[:, 0]]
