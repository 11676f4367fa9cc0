"""Negative: the file is not valid Python -> SIM_E_SYNTAX."""
import nki
import nki.language as nl


@nki.jit
def kernel(x):
    for i in range(4)  # ERROR
        pass
    return x
