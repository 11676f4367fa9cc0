"""NumPy reference for every matmul stage: out = lhsT.T @ rhs (in float64)."""
import numpy as np


def _mm(lhsT, rhs):
    return lhsT.astype(np.float64).T @ rhs.astype(np.float64)


def matmul_naive(lhsT, rhs):
    return _mm(lhsT, rhs)


matmul_tiled = matmul_naive
matmul_hoisted = matmul_naive
matmul_blocked = matmul_naive
matmul_optimized = matmul_naive
