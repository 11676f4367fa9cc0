"""Negative: the manifest asks for an entry this file does not define -> SIM_E_ENTRY."""
import nki
import nki.language as nl


@nki.jit
def kernel(x):
    return x
