"""NumPy reference for matmul_double_row: the fp8 inputs arrive as float32
arrays holding the fp8 values; the product is exact in float64."""
import numpy as np


def matmul_double_row(lhsT, rhs):
    return (lhsT.astype(np.float64).T @ rhs.astype(np.float64)).astype(np.float32)
