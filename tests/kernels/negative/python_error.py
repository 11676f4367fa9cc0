"""Negative: the kernel raises a Python exception -> SIM_E_PYTHON."""
import nki
import nki.language as nl


@nki.jit
def kernel(x):
    N, D = x.shape
    if N % 256 != 0:
        raise ValueError(f"N={N} must be a multiple of 256")  # ERROR
    return x
