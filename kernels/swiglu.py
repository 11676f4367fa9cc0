"""kforge library: SwiGLU MLP, out = (silu(x @ wg) * (x @ wu)) @ wd, current NKI API.

The activations come transposed, xT (H, T) (hidden dim on partitions, like
matmul's lhsT), wg and wu are (H, F), wd is (F, H); out is (T, H).
Per block of TB tokens:
  1. the gate and up projections are computed transposed, gT = wg.T @ x.T
     (F on partitions), so silu(gT) * uT is already the stationary operand
     of the down projection (no transposes); weight columns stream in
     FW-wide slabs;
  2. out[tokens, h] accumulates over F tiles in PSUM, one 512-column chunk
     of H at a time, each wd tile loaded once per token block.
Larger token blocks reload the weights less often (HBM traffic is
3 * H * F * T / TB elements) but hold more SBUF.
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "swiglu",
    "entry": "swiglu",
    "reference": "swiglu_ref",
    "summary": "SwiGLU MLP: xT (H, T), wg, wu (H, F), wd (F, H) -> (T, H)",
    "inputs": [{"name": "xT", "dims": ["H", "T"]}, {"name": "wg", "dims": ["H", "F"], "std": "1 / sqrt(H)"},
               {"name": "wu", "dims": ["H", "F"], "std": "1 / sqrt(H)"},
               {"name": "wd", "dims": ["F", "H"], "std": "1 / sqrt(F)"}],
    "supports": ["H >= 1", "T >= 1", "F >= 1", "H <= 8192", "F <= 16384"],
    "reference_shapes": [[2048, 2048], [2048, 4096], [2048, 4096], [4096, 2048]],
    "test_shapes": [[200, 150], [200, 300], [200, 300], [300, 200]],
    "tunables": {
        "TB": {"values": [128, 256, 512], "default": 128,
               "addresses": {"redundant_hbm_loads": "up", "tensor_underfilled": "up",
                             "buffer_pressure": "down"}},
        "FW": {"values": [128, 256, 512], "default": 128,
               "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "engine_waits_on_dma": "up",
                             "buffer_pressure": "down"}}
    },
    "constraints": ["TB == 128 or TB // 2 < T", "FW == 128 or FW // 2 < F",
                    "DTYPE_BYTES * (2 * ((H + 127) // 128) * TB + ((F + 127) // 128) * TB + 8 * ((H + 127) // 128) * FW + 2 * 512) <= SBUF_BYTES - 16384"]
}


@nki.jit
def swiglu(xT, wg, wu, wd, TB=128, FW=128):
    H, T = xT.shape
    H2, F = wg.shape
    assert H2 == H and tuple(wu.shape) == (H, F) and tuple(wd.shape) == (F, H)
    P = 128
    NH = math.ceil(H / P)
    NF = math.ceil(F / P)
    HC = 512
    dt = xT.dtype
    out = nl.ndarray((T, H), dtype=dt, buffer=nl.shared_hbm)

    for tb in nl.affine_range(math.ceil(T / TB)):
        t0 = tb * TB
        tw = min(TB, T - t0)
        xs = []
        for h in nl.affine_range(NH):
            hw = min(P, H - h * P)
            xt = nl.ndarray((P, TB), dtype=dt, buffer=nl.sbuf)
            nisa.dma_copy(dst=xt[0:hw, 0:tw], src=xT[h * P:h * P + hw, t0:t0 + tw])
            xs.append(xt)

        # 1. hT[f] = silu(wg[:, f].T @ x.T) * (wu[:, f].T @ x.T), (128 f, tw)
        hts = []
        for fc in nl.affine_range(math.ceil(F / FW)):
            f0 = fc * FW
            fcw = min(FW, F - f0)
            gs = []
            us = []
            for h in nl.affine_range(NH):
                hw = min(P, H - h * P)
                g = nl.ndarray((P, FW), dtype=dt, buffer=nl.sbuf)
                u = nl.ndarray((P, FW), dtype=dt, buffer=nl.sbuf)
                nisa.dma_copy(dst=g[0:hw, 0:fcw], src=wg[h * P:h * P + hw, f0:f0 + fcw])
                nisa.dma_copy(dst=u[0:hw, 0:fcw], src=wu[h * P:h * P + hw, f0:f0 + fcw])
                gs.append(g)
                us.append(u)
            for fs in nl.affine_range(math.ceil(fcw / P)):
                s0 = fs * P
                sw = min(P, fcw - s0)
                gp = nl.ndarray((P, TB), dtype=nl.float32, buffer=nl.psum)
                up = nl.ndarray((P, TB), dtype=nl.float32, buffer=nl.psum)
                for h in nl.affine_range(NH):
                    hw = min(P, H - h * P)
                    nisa.nc_matmul(dst=gp[0:sw, 0:tw], stationary=gs[h][0:hw, s0:s0 + sw],
                                   moving=xs[h][0:hw, 0:tw])
                    nisa.nc_matmul(dst=up[0:sw, 0:tw], stationary=us[h][0:hw, s0:s0 + sw],
                                   moving=xs[h][0:hw, 0:tw])
                sg = nl.ndarray((P, TB), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=sg[0:sw, 0:tw], op=nl.silu, data=gp[0:sw, 0:tw])
                ht = nl.ndarray((P, TB), dtype=dt, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=ht[0:sw, 0:tw], data1=sg[0:sw, 0:tw], data2=up[0:sw, 0:tw],
                                   op=nl.multiply)
                hts.append(ht)

        # 2. out[tokens, hc] = sum_f hT[f].T @ wd[f, hc]
        for hc in nl.affine_range(math.ceil(H / HC)):
            c0 = hc * HC
            cw = min(HC, H - c0)
            accs = []
            for ts in nl.affine_range(math.ceil(tw / P)):
                accs.append(nl.ndarray((P, HC), dtype=nl.float32, buffer=nl.psum))
            for f in nl.affine_range(NF):
                fw = min(P, F - f * P)
                wdt = nl.ndarray((P, HC), dtype=dt, buffer=nl.sbuf)
                nisa.dma_copy(dst=wdt[0:fw, 0:cw], src=wd[f * P:f * P + fw, c0:c0 + cw])
                for ts in nl.affine_range(math.ceil(tw / P)):
                    q0 = ts * P
                    qw = min(P, tw - q0)
                    nisa.nc_matmul(dst=accs[ts][0:qw, 0:cw], stationary=hts[f][0:fw, q0:q0 + qw],
                                   moving=wdt[0:fw, 0:cw])
            for ts in nl.affine_range(math.ceil(tw / P)):
                q0 = ts * P
                qw = min(P, tw - q0)
                o = nl.ndarray((P, HC), dtype=dt, buffer=nl.sbuf)
                nisa.tensor_copy(dst=o[0:qw, 0:cw], src=accs[ts][0:qw, 0:cw])
                nisa.dma_copy(dst=out[t0 + q0:t0 + q0 + qw, c0:c0 + cw], src=o[0:qw, 0:cw])
    return out


def swiglu_ref(xT, wg, wu, wd):
    x = np.asarray(xT, dtype=np.float64).T
    g = x @ np.asarray(wg, dtype=np.float64)
    u = x @ np.asarray(wu, dtype=np.float64)
    h = g / (1.0 + np.exp(-g)) * u
    return h @ np.asarray(wd, dtype=np.float64)
