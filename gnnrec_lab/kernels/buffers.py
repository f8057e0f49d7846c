"""Output buffers for the native kernels.

glibc serves allocations of 32 MiB and more (its largest dynamic mmap threshold) with a
fresh ``mmap`` each time, so every large kernel output is faulted in page by page, 4 KiB
at a time: on a 200k x 64 float32 output that is 12,500 page faults per call, a fifth of
an SpMM's time on this VM. :func:`empty` gives such tensors their own anonymous mapping
with ``MADV_HUGEPAGE`` (transparent huge pages, honoured where the kernel's THP mode is
``always`` or ``madvise``): 2 MiB pages, 512x fewer faults. Smaller tensors come from
``torch.empty``: glibc's heap reuses them once :mod:`gnnrec_lab.kernels` has fixed its mmap and
trim thresholds (:mod:`gnnrec_lab.util.runtime` says why; with glibc's dynamic defaults blocks of a
few MiB kept being faulted in again), so memory behaviour below the threshold matches the
footprint model's allocator-retention term.

A huge-page mapping still costs its faults once per allocation (a 1.5 GB synth-xl node table:
0.13-0.15 s each, about ten per LightGCN training step). So when the memory of an :func:`empty`
or :func:`zeros` tensor is released (its storage and every view of it gone), the mapping is kept for reuse: the
next :func:`empty` or :func:`zeros` of exactly that many bytes takes it, already faulted in. At most
:data:`POOL_MAX` mappings are kept (the most recently released), and only ones of at least
:data:`POOL_MIN_BYTES`; :func:`zeros` zeroes one it takes (a fresh mapping is zero-filled by the OS).
"""
from __future__ import annotations

import collections
import mmap
import threading
import weakref

import numpy as np
import torch

HUGE_MIN_BYTES = 32 << 20
# released mappings kept for reuse by the next empty()/zeros() of the same size (see the module doc);
# every huge-page mapping qualifies: a fresh 51 MB output costs 3.3-3.6 ms of faults (a 29 ms SpMM on
# 200k nodes / 5M nnz, D=64), and pooling it made SpMM 1.22x / 1.32x (forward / backward) and SDDMM's
# backward (two such outputs) 1.65x faster, paired rounds against the 256 MiB floor it replaced
# (benchmarks/bench_antagonist_ab.py, docs/measurements.md)
POOL_MAX = 2
POOL_MIN_BYTES = HUGE_MIN_BYTES
_pool: collections.deque = collections.deque()   # (nbytes, mmap), oldest first
_pool_lock = threading.Lock()
_NP = {torch.float32: np.float32, torch.float64: np.float64, torch.bfloat16: np.int16}  # bf16: its bits
_ADVICE = getattr(mmap, "MADV_HUGEPAGE", None)
_PAGE = mmap.PAGESIZE


def _release(nbytes: int, m: mmap.mmap) -> None:
    """Called when the array behind a pooled tensor (:func:`empty` or :func:`zeros`) is gone: keep
    its mapping for reuse."""
    with _pool_lock:
        _pool.append((nbytes, m))
        while len(_pool) > POOL_MAX:
            _pool.popleft()          # unmapped once nothing refers to it


def _reused(nbytes: int):
    with _pool_lock:
        for k, (n, m) in enumerate(_pool):
            if n == nbytes:
                del _pool[k]
                return m
    return None


def _mapped(shape: tuple, dtype: torch.dtype, zero: bool):
    """A tensor on its own huge-page mapping, or None when small: a released mapping of the same
    size when the pool has one (zeroed here when ``zero``), else a new one (zero-filled by the OS)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < HUGE_MIN_BYTES or _ADVICE is None or dtype not in _NP:
        return None
    pooled = nbytes >= POOL_MIN_BYTES
    m = _reused(nbytes) if pooled else None
    reused = m is not None
    if not reused:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            m.madvise(_ADVICE)
        except OSError:  # THP not configured in this kernel: ordinary pages, same semantics
            pass
        # fault the pages in here, from one thread (a zero into every 4 KiB page; a huge page takes
        # the first): faults taken by a parallel kernel's threads at once were measured 10x slower on
        # this VM once memory had been reclaimed (51 MB: 5 ms from one thread, 50 ms from two)
        np.frombuffer(m, dtype=np.uint8)[::_PAGE] = 0
    a = np.frombuffer(m, dtype=_NP[dtype]).reshape(shape)
    if pooled:
        # the tensor's storage holds ``a`` until the tensor and all its views are freed
        weakref.finalize(a, _release, nbytes, m)
        if zero and reused:
            a.fill(0)
    t = torch.from_numpy(a)
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def empty(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised tensor; backed by huge pages when it is large (see the module doc)."""
    shape = tuple(int(s) for s in shape)
    t = _mapped(shape, dtype, zero=False)
    return torch.empty(shape, dtype=dtype) if t is None else t


def zeros(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A zero tensor; a large one is a fresh mapping, already zero (no second pass), or a released
    one zeroed in one pass (1.5 GB: 0.06 s, a fresh mapping's faults 0.13 s or more)."""
    shape = tuple(int(s) for s in shape)
    t = _mapped(shape, dtype, zero=True)
    return torch.zeros(shape, dtype=dtype) if t is None else t
