"""Row softmax of an (N, D) tensor, legacy API.

Rows go on partitions, 128 at a time; the last tile is masked when N is not a
multiple of 128.  D must fit one SBUF row.
"""
import math

from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def softmax(x):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(D)[None, :]

    for t in nl.affine_range(math.ceil(N / 128)):
        live = (t * 128 + i_p < N)
        rows = nl.load(x[t * 128 + i_p, i_f], mask=live, dtype=nl.float32)
        row_max = nl.max(rows, axis=1, keepdims=True, mask=live)
        shifted = nl.subtract(rows, row_max, mask=live)
        num = nl.exp(shifted, mask=live)
        den = nl.sum(num, axis=1, keepdims=True, mask=live)
        prob = nl.divide(num, den, mask=live)
        nl.store(out[t * 128 + i_p, i_f], value=prob, mask=live)
    return out
