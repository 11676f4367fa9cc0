"""2-D average pooling with a square window and stride equal to it, legacy API.

in_tensor is (C, H, W) with C <= 128 channels on partitions; H and W are
multiples of pool_size.  out is (C, H/pool_size, W/pool_size).
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def average_pool2d(in_tensor, pool_size=2):
    C, H, W = in_tensor.shape
    k = pool_size
    assert C <= nl.tile_size.pmax and H % k == 0 and W % k == 0
    Ho, Wo = H // k, W // k
    out_tensor = nl.ndarray((C, Ho, Wo), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    img = nl.load(in_tensor)                                  # (C, H, W) in SBUF

    # a 5-D view: [c, oh, dh, ow, dw] -> img[c, oh*k + dh, ow*k + dw]
    c_i = nl.arange(C)[:, None, None, None, None]
    oh = nl.arange(Ho)[None, :, None, None, None]
    dh = nl.arange(k)[None, None, :, None, None]
    ow = nl.arange(Wo)[None, None, None, :, None]
    dw = nl.arange(k)[None, None, None, None, :]
    window_sum = nl.sum(img[c_i, oh * k + dh, ow * k + dw], axis=[2, 4])
    pooled = window_sum / (k * k)

    nl.store(out_tensor, value=pooled)
    return out_tensor
