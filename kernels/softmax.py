"""kforge library: row softmax of an (N, D) tensor, current NKI API.

Rows go on the 128 partitions; a whole row stays in SBUF (the max and the
sum need all of it).  The row is loaded, reduced, exponentiated, scaled and
stored in COLS-wide column chunks, so the DMA of one chunk overlaps the
compute of the previous one and stores start before the row is done.
Partial maxima and sums per chunk are combined at the end of each pass.
With BUFS >= 2 the three stages (load + max, exp + sum, normalise + store)
are software-pipelined over consecutive tiles.
With EXP_BF16 = 1 the unnormalised exponentials are kept in the input's
16-bit dtype (half the SBUF traffic; for float32 inputs it has no effect).
"""
import math

import numpy as np

import nki
import nki.language as nl
import nki.isa as nisa

KFORGE = {
    "op": "softmax",
    "entry": "softmax",
    "reference": "softmax_ref",
    "summary": "softmax over the last axis of (N, D)",
    "inputs": [{"name": "x", "dims": ["N", "D"]}],
    "supports": ["N >= 1", "D >= 1", "D * (DTYPE_BYTES + 4) <= SBUF_BYTES // 3"],
    "reference_shapes": [[4096, 8192]],
    "test_shapes": [[200, 700]],
    "tunables": {
        "COLS": {"values": [256, 512, 1024, 2048, 4096, 8192], "default": 4096,
                 "addresses": {"engine_waits_on_dma": "down", "dma_small_transfers": "up", "instruction_overhead": "up",
                               "buffer_pressure": "down"}},
        "EXP_BF16": {"values": [0, 1], "default": 0,
                     "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up",
                                   "slow_engine": "up"}},
        "BUFS": {"values": [1, 2, 3, 4], "default": 2,
                 "addresses": {"buffer_pressure": "up", "engine_waits_on_dma": "up"}},
        "NORM_ENGINE": {"values": ["vector", "gpsimd", "scalar"], "default": "vector",
                        "addresses": {"engine_waits_on_dma": "any", "slow_engine": "any",
                                      "buffer_pressure": "any"}}
    },
    "flops": 0,
    "constraints": ["BUFS * D * (DTYPE_BYTES + 4 - EXP_BF16 * (4 - DTYPE_BYTES)) + 2 * COLS * DTYPE_BYTES <= SBUF_BYTES - 4096",
                    "COLS < 2 * D or COLS == 256"]
}


@nki.jit
def softmax(x, COLS=4096, EXP_BF16=0, NORM_ENGINE="vector", BUFS=2):
    N, D = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    nch = math.ceil(D / COLS)
    edt = x.dtype if EXP_BF16 else nl.float32
    ntiles = math.ceil(N / P)

    # BUFS rotating sets of row buffers: the load of tile t + BUFS can start
    # once tile t's exponentials have read its buffer.
    xbufs = [nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf) for _ in range(BUFS)]
    nbufs = [nl.ndarray((P, D), dtype=edt, buffer=nl.sbuf) for _ in range(BUFS)]
    # per-row -max and 1 / sum of tile t, from the stage that makes them to
    # the stage that uses them (entry t; released after its last use)
    neg_maxes = []
    invs = []

    def rows(t):
        return t * P, min(P, N - t * P)

    def stage_max(t):
        """load tile t chunk by chunk, -max of each row"""
        r0, nr = rows(t)
        xt = xbufs[t % BUFS]
        pmax = nl.ndarray((P, nch), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(nch):
            c0 = c * COLS
            w = min(COLS, D - c0)
            nisa.dma_copy(dst=xt[0:nr, c0:c0 + w], src=x[r0:r0 + nr, c0:c0 + w])
            nisa.tensor_reduce(dst=pmax[0:nr, c:c + 1], op=nl.maximum, data=xt[0:nr, c0:c0 + w],
                               axis=1, keepdims=True)
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[0:nr, 0:1], op=nl.maximum, data=pmax[0:nr, 0:nch], axis=1,
                           negate=True, keepdims=True)
        neg_maxes.append(neg_max)

    def stage_exp(t):
        """exp(x - max) with its row sums on ScalarE, 1 / sum"""
        r0, nr = rows(t)
        xt, num = xbufs[t % BUFS], nbufs[t % BUFS]
        neg_max = neg_maxes[t]
        neg_maxes[t] = None
        psum_ = nl.ndarray((P, nch), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(nch):
            c0 = c * COLS
            w = min(COLS, D - c0)
            nisa.activation_reduce(dst=num[0:nr, c0:c0 + w], op=nl.exp, data=xt[0:nr, c0:c0 + w],
                                   reduce_op=nl.add, reduce_res=psum_[0:nr, c:c + 1],
                                   bias=neg_max[0:nr, 0:1])
        den = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=den[0:nr, 0:1], op=nl.add, data=psum_[0:nr, 0:nch], axis=1,
                           keepdims=True)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv[0:nr, 0:1], data=den[0:nr, 0:1])
        invs.append(inv)

    def stage_out(t):
        """exp * (1 / sum) on NORM_ENGINE, store"""
        r0, nr = rows(t)
        num = nbufs[t % BUFS]
        inv = invs[t]
        invs[t] = None
        for c in nl.affine_range(nch):
            c0 = c * COLS
            w = min(COLS, D - c0)
            prob = nl.ndarray((P, COLS), dtype=x.dtype, buffer=nl.sbuf)
            if NORM_ENGINE == "scalar":
                nisa.activation(dst=prob[0:nr, 0:w], op=nl.copy, data=num[0:nr, c0:c0 + w],
                                scale=inv[0:nr, 0:1])
            else:
                eng = nisa.gpsimd_engine if NORM_ENGINE == "gpsimd" else nisa.vector_engine
                nisa.tensor_scalar(dst=prob[0:nr, 0:w], data=num[0:nr, c0:c0 + w],
                                   op0=nl.multiply, operand0=inv[0:nr, 0:1], engine=eng)
            nisa.dma_copy(dst=out[r0:r0 + nr, c0:c0 + w], src=prob[0:nr, 0:w])

    # Software pipeline (BUFS >= 2): iteration s issues the loads and maxima
    # of tile s, the normalisation of tile s - 2 and the exponentials of tile
    # s - 1, so no engine's in-order queue (nor, on NC-v2, the VectorE/GpSimd
    # SBUF port) waits for an earlier stage of the same tile.  With one
    # buffer set the load of tile s would overwrite tile s - 1 before its
    # exponentials read it, so BUFS = 1 runs the stages tile by tile.
    lag = 1 if BUFS >= 2 else 0
    for s in range(ntiles + 2 * lag):
        if s < ntiles:
            stage_max(s)
        if lag and 0 <= s - 2 < ntiles:
            stage_out(s - 2)
        if 0 <= s - lag < ntiles:
            stage_exp(s - lag)
        if not lag and s < ntiles:
            stage_out(s)
    return out


def softmax_ref(x):
    # float64 math, a block of rows at a time (rows are independent), into a
    # float32 result: the values float64 over the whole array would give, in
    # a fraction of its memory (a 4096x8192 input needed 1 GB of float64
    # temporaries at once).
    x = np.asarray(x)
    out = np.empty(x.shape, dtype=np.float32)
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    res = out.reshape(rows.shape)
    step = max(1, (1 << 20) // max(1, rows.shape[-1]))
    for r in range(0, rows.shape[0], step):
        b = rows[r:r + step].astype(np.float64)
        b -= b.max(axis=-1, keepdims=True)
        np.exp(b, out=b)
        b /= b.sum(axis=-1, keepdims=True)
        res[r:r + step] = b
    return out
