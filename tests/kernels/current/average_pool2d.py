"""2-D average pooling with a square window and stride equal to it, current API.

in_tensor is (C, H, W), C <= 128 on partitions; H and W multiples of
pool_size.  The windows are one 5-D access pattern (.ap) over the SBUF copy
of the image, summed over the two window axes with tensor_reduce.
"""
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def average_pool2d(in_tensor, pool_size=2):
    C, H, W = in_tensor.shape
    k = pool_size
    assert C <= nl.tile_size.pmax and H % k == 0 and W % k == 0
    Ho, Wo = H // k, W // k
    out_tensor = nl.ndarray((C, Ho, Wo), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    img = nl.ndarray((C, H, W), dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=img, src=in_tensor)

    # [c, oh, ow, dh, dw] -> img[c, oh*k + dh, ow*k + dw], strides in elements
    windows = img.ap(pattern=[[H * W, C], [k * W, Ho], [k, Wo], [W, k], [1, k]], offset=0)
    sums = nl.ndarray((C, Ho, Wo), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=sums, op=nl.add, data=windows, axis=(3, 4))
    pooled = nl.ndarray((C, Ho, Wo), dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=pooled, data=sums, op0=nl.multiply, operand0=1.0 / (k * k))
    nisa.dma_copy(dst=out_tensor, src=pooled)
    return out_tensor
