"""NumPy reference for rmsnorm."""
import numpy as np


def rmsnorm(x, g, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g.astype(np.float64)
