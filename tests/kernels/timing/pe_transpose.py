"""PE transposes, current API: out = x.T for x (128, F), F a multiple of 128,
one nc_transpose per 128-column block through PSUM.  With fp32 x the PE
array runs at the fp32 rate, a quarter of bf16's (neuron-hardware.md S7).
"""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def transpose_blocks(x):
    P, F = x.shape
    out = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    for j in nl.affine_range(F // 128):
        ps = nl.ndarray((128, P), dtype=x.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=ps, data=xt[0:P, j * 128:(j + 1) * 128])
        o = nl.ndarray((128, P), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nisa.dma_copy(dst=out[j * 128:(j + 1) * 128, 0:P], src=o)
    return out
