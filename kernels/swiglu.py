"""kforge library: SwiGLU MLP, out = (silu(x @ wg) * (x @ wu)) @ wd, current NKI API.

The activations come transposed, xT (H, T) (hidden dim on partitions, like
matmul's lhsT), wg and wu are (H, F), wd is (F, H); out is (T, H).
Per block of TB tokens (its xT columns and its hidden activations hT stay in
one SBUF buffer each):
  1. the gate and up projections are computed transposed, gT = wg.T @ x.T
     (F on partitions), so silu(gT) * uT is already the stationary operand
     of the down projection (no transposes); weight columns stream in
     FW-wide slabs holding all of H (double-buffered);
  2. out[tokens, h] accumulates over F tiles in PSUM, HC = 2048 * 128 / TB
     columns of H at a time (the PSUM budget), each wd slab (F tile, HC
     columns) loaded once per token block and each output row band stored
     with one DMA.
Larger token blocks reload the weights less often (HBM traffic is
3 * H * F * T / TB elements) but hold more SBUF; wider slabs make longer
DMA rows (the DMA engines reach full rate at 4 KiB per row).
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
    "flops": "6 * H * T * F",
    "tunables": {
        "TB": {"values": [128, 256, 512, 1024], "default": 128,
               "addresses": {"redundant_hbm_loads": "up", "dma_small_transfers": "up", "tensor_underfilled": "up",
                             "buffer_pressure": "down"}},
        "FW": {"values": [128, 256, 512, 1024], "default": 128,
               "addresses": {"dma_small_transfers": "up", "instruction_overhead": "up", "engine_waits_on_dma": "down",
                             "buffer_pressure": "down"}},
        "X_WHOLE": {"values": [0, 1], "default": 0,
                    "addresses": {"dma_small_transfers": "up", "engine_waits_on_dma": "up",
                                  "buffer_pressure": "up"}}
    },
    "constraints": ["TB == 128 or TB // 2 < T", "FW == 128 or FW // 2 < F",
                    "DTYPE_BYTES * ((H + 127) // 128 * (T * X_WHOLE + TB * (1 - X_WHOLE) + 4 * FW) + (F + 127) // 128 * TB + 4096 + 2 * min(H, 262144 // TB)) + 4096 <= SBUF_BYTES - 16384"]
}

P = 128
PW = 512           # matmul moving free size (one PSUM bank of fp32)


def _load_x(xs, xT, t0, tw, h_lo, h_hi):
    H = xT.shape[0]
    for h in nl.affine_range(h_lo, h_hi):
        hw = min(P, H - h * P)
        nisa.dma_copy(dst=xs[0:hw, h, 0:tw], src=xT[h * P:h * P + hw, t0:t0 + tw])


def _load_gu(gu, wg, wu, f0, fcw):
    """the wg (0) and wu (1) slabs of columns f0:f0+fcw, all of H"""
    H = wg.shape[0]
    for h in nl.affine_range(math.ceil(H / P)):
        hw = min(P, H - h * P)
        nisa.dma_copy(dst=gu[0:hw, 0, h, 0:fcw], src=wg[h * P:h * P + hw, f0:f0 + fcw])
        nisa.dma_copy(dst=gu[0:hw, 1, h, 0:fcw], src=wu[h * P:h * P + hw, f0:f0 + fcw])


def _gate_up(xs, xo, hts, gu, sgs, H, f0, fcw, tw):
    """hT[f0:f0+fcw] = silu(wg[:, f].T @ x.T) * (wu[:, f].T @ x.T) from the
    slabs in gu"""
    NH = math.ceil(H / P)
    for fs in nl.affine_range(math.ceil(fcw / P)):
        s0 = fs * P
        sw = min(P, fcw - s0)
        f = (f0 + s0) // P
        for q in nl.affine_range(math.ceil(tw / PW)):
            q0 = q * PW
            qw = min(PW, tw - q0)
            gp = nl.ndarray((P, PW), dtype=nl.float32, buffer=nl.psum)
            up = nl.ndarray((P, PW), dtype=nl.float32, buffer=nl.psum)
            for h in nl.affine_range(NH):
                hw = min(P, H - h * P)
                nisa.nc_matmul(dst=gp[0:sw, 0:qw], stationary=gu[0:hw, 0, h, s0:s0 + sw],
                               moving=xs[0:hw, h, xo + q0:xo + q0 + qw])
                nisa.nc_matmul(dst=up[0:sw, 0:qw], stationary=gu[0:hw, 1, h, s0:s0 + sw],
                               moving=xs[0:hw, h, xo + q0:xo + q0 + qw])
            sg = sgs[(fs * math.ceil(tw / PW) + q) % 2]
            nisa.activation(dst=sg[0:sw, 0:qw], op=nl.silu, data=gp[0:sw, 0:qw])
            nisa.tensor_tensor(dst=hts[0:sw, f, q0:q0 + qw], data1=sg[0:sw, 0:qw], data2=up[0:sw, 0:qw],
                               op=nl.multiply)


def _down(hts, wdb, obs, wd, out, t0, tw, c0, cw, HC, WG):
    """out[t0:t0+tw, c0:c0+cw] = sum_f hT[f].T @ wd[f, c0:c0+cw]; wd slabs in
    groups of WG F tiles rotate over the two wdb buffers"""
    F = wd.shape[0]
    NF = math.ceil(F / P)
    NTS = math.ceil(tw / P)
    NPC = math.ceil(cw / PW)
    CP = min(PW, HC)
    accs = []
    for ts in nl.affine_range(NTS):
        row = []
        for pc in nl.affine_range(NPC):
            row.append(nl.ndarray((P, CP), dtype=nl.float32, buffer=nl.psum))
        accs.append(row)
    for fg in nl.affine_range(math.ceil(NF / WG)):
        wdt = wdb[fg % 2]
        ng = min(WG, NF - fg * WG)
        for j in nl.affine_range(ng):
            f = fg * WG + j
            fw = min(P, F - f * P)
            nisa.dma_copy(dst=wdt[0:fw, j, 0:cw], src=wd[f * P:f * P + fw, c0:c0 + cw])
        for j in nl.affine_range(ng):
            f = fg * WG + j
            fw = min(P, F - f * P)
            for ts in nl.affine_range(NTS):
                q0 = ts * P
                qw = min(P, tw - q0)
                for pc in nl.affine_range(NPC):
                    p0 = pc * CP
                    pw = min(CP, cw - p0)
                    nisa.nc_matmul(dst=accs[ts][pc][0:qw, 0:pw], stationary=hts[0:fw, f, q0:q0 + qw],
                                   moving=wdt[0:fw, j, p0:p0 + pw])
    for ts in nl.affine_range(NTS):
        q0 = ts * P
        qw = min(P, tw - q0)
        o = obs[ts % 2]
        for pc in nl.affine_range(NPC):
            p0 = pc * CP
            pw = min(CP, cw - p0)
            nisa.tensor_copy(dst=o[0:qw, p0:p0 + pw], src=accs[ts][pc][0:qw, 0:pw])
        nisa.dma_copy(dst=out[t0 + q0:t0 + q0 + qw, c0:c0 + cw], src=o[0:qw, 0:cw])


@nki.jit
def swiglu(xT, wg, wu, wd, TB=128, FW=128, X_WHOLE=0):
    H, T = xT.shape
    H2, F = wg.shape
    assert H2 == H and tuple(wu.shape) == (H, F) and tuple(wd.shape) == (F, H)
    NH = math.ceil(H / P)
    NF = math.ceil(F / P)
    HC = min(H, 2048 * P // TB)     # PSUM: TB / 128 row bands of HC fp32 columns, double-buffered
    WG = max(1, 2048 // HC)         # wd F tiles per load group
    dt = xT.dtype
    out = nl.ndarray((T, H), dtype=dt, buffer=nl.shared_hbm)

    # Every SBUF buffer is placed once here; the weight slabs, the silu and
    # output staging tiles are double-buffered by hand (a load into one
    # waits only for the reads of the use before last).  xT (one block, or
    # all of it with X_WHOLE: one load of full 2*T-byte rows) and hT have one
    # buffer: the next block's xT loads while this block's down projection
    # runs, and its hT writes come after this block's last reads.
    XW = T if X_WHOLE else TB
    xs = nl.ndarray((P, NH, XW), dtype=dt, buffer=nl.sbuf)
    hts = nl.ndarray((P, NF, TB), dtype=dt, buffer=nl.sbuf)
    gus = [nl.ndarray((P, 2, NH, FW), dtype=dt, buffer=nl.sbuf) for _ in range(2)]
    wdb = [nl.ndarray((P, WG, HC), dtype=dt, buffer=nl.sbuf) for _ in range(2)]
    obs = [nl.ndarray((P, HC), dtype=dt, buffer=nl.sbuf) for _ in range(2)]
    sgs = [nl.ndarray((P, PW), dtype=nl.float32, buffer=nl.sbuf) for _ in range(2)]

    NTB = math.ceil(T / TB)
    NFC = math.ceil(F / FW)
    NHC = math.ceil(H / HC)
    _load_x(xs, xT, 0, min(XW, T), 0, NH)
    _load_gu(gus[0], wg, wu, 0, min(FW, F))
    for tb in nl.affine_range(NTB):
        t0 = tb * TB
        tw = min(TB, T - t0)
        for fc in nl.affine_range(NFC):
            f0 = fc * FW
            k = tb * NFC + fc
            # slab k + 1 (of this block or the next) loads while slab k is used
            if fc + 1 < NFC:
                _load_gu(gus[(k + 1) % 2], wg, wu, f0 + FW, min(FW, F - f0 - FW))
            elif tb + 1 < NTB:
                _load_gu(gus[(k + 1) % 2], wg, wu, 0, min(FW, F))
            _gate_up(xs, t0 if X_WHOLE else 0, hts, gus[k % 2], sgs, H, f0, min(FW, F - f0), tw)
        for hc in nl.affine_range(NHC):
            c0 = hc * HC
            _down(hts, wdb, obs, wd, out, t0, tw, c0, min(HC, H - c0), HC, WG)
            if tb + 1 < NTB and not X_WHOLE:
                # the next block's xT, spread over the down projection's
                # chunks so it does not hold up their wd loads
                _load_x(xs, xT, t0 + TB, min(TB, T - t0 - TB), hc * NH // NHC, (hc + 1) * NH // NHC)
    return out


def swiglu_ref(xT, wg, wu, wd):
    x = np.asarray(xT, dtype=np.float64).T
    g = x @ np.asarray(wg, dtype=np.float64)
    u = x @ np.asarray(wu, dtype=np.float64)
    h = g / (1.0 + np.exp(-g)) * u
    return h @ np.asarray(wd, dtype=np.float64)
