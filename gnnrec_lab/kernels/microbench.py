"""Calibration's micro-kernels (numba): STREAM copy and triad, a random row gather and a pointer
chase. :mod:`gnnrec_lab.memory.calibrate` times them to measure this host's bandwidth and latency;
no training run calls them."""
from __future__ import annotations

from numba import njit, prange

from gnnrec_lab.kernels.native import JIT


@njit(**JIT)
def stream_copy(a, b, bounds):
    """b[:] = a[:] (STREAM copy), parallel over ``bounds`` chunks.

    Each chunk works on slices indexed from 0: an index taken from ``bounds`` may be
    negative as far as numba knows, and the wrap-around test it then emits per access
    keeps LLVM from vectorising the loop (a scalar triad measured 6.5 GB/s where the
    vectorised one moves 31 GB/s on this VM)."""
    for ch in prange(bounds.shape[0] - 1):
        s0 = bounds[ch]
        n = bounds[ch + 1] - s0
        src = a[s0:s0 + n]
        dst = b[s0:s0 + n]
        for i in range(n):
            dst[i] = src[i]


@njit(**JIT)
def stream_triad(a, b, c, s, bounds):
    """a[:] = b[:] + s * c[:] (STREAM triad); chunk slices as in :func:`stream_copy`."""
    for ch in prange(bounds.shape[0] - 1):
        s0 = bounds[ch]
        n = bounds[ch + 1] - s0
        aa = a[s0:s0 + n]
        bb = b[s0:s0 + n]
        cc = c[s0:s0 + n]
        for i in range(n):
            aa[i] = bb[i] + s * cc[i]


@njit(**JIT)
def gather_sum(table, idx, out, bounds):
    """out[ch] = sum over i in chunk ch of table[idx[i]] rows: random row-gather bandwidth."""
    D = table.shape[1]
    for ch in prange(bounds.shape[0] - 1):
        for i in range(bounds[ch], bounds[ch + 1]):
            j = idx[i]
            for d in range(D):
                out[ch, d] += table[j, d]


@njit(cache=True)
def pointer_chase(nxt, steps):
    """Follow ``nxt`` ``steps`` times from 0 (each load depends on the last)."""
    p = 0
    for _ in range(steps):
        p = nxt[p]
    return p
