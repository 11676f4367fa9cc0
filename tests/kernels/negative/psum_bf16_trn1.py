"""Negative (trn1): a bf16 PSUM matmul result; the NeuronCore-v2 Tensor engine
writes fp32 PSUM only -> SIM_E_DTYPE (rule fp32-psum-output).  The same kernel
runs on trn2 (tests/unit/test_nki_rules.c)."""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    acc = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=t, moving=t)  # ERROR
    res = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
