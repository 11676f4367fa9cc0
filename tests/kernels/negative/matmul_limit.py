"""Negative: a matmul with a moving free size of 1024 > 512 -> SIM_E_MATMUL_LIMIT."""
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(lhsT, rhs):
    out = nl.ndarray((128, 1024), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    a = nl.load(lhsT)
    b = nl.load(rhs)
    res = nisa.nc_matmul(a, b)  # ERROR
    nl.store(out, value=nl.copy(res, dtype=out.dtype))
    return out
