"""Negative: a PSUM tile of 1024 fp32 (4 KiB) per partition, over one 2 KiB bank -> SIM_E_PSUM_TILE."""
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 1024), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 1024), dtype=nl.float32, buffer=nl.psum)  # ERROR
    nl.store(out, value=nl.copy(acc, dtype=x.dtype))
    return out
