"""Negative: an indirect DMA gather whose index tile holds a row index past
the end of the tensor (oob_mode=error, the default) -> SIM_E_INDEX_OUT_OF_BOUNDS
at the load, naming the index."""
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(data, idx):
    out = nl.ndarray((128, data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    ix = nl.load(idx)
    rows = nl.load(data[ix, nl.arange(data.shape[1])[None, :]])  # ERROR
    nl.store(out, value=rows)
    return out
