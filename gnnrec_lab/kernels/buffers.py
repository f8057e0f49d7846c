"""Output buffers for the native kernels.

glibc serves allocations of 32 MiB and more (its largest dynamic mmap threshold) with a
fresh ``mmap`` each time, so every large kernel output is faulted in page by page, 4 KiB
at a time: on a 200k x 64 float32 output that is 12,500 page faults per call, a fifth of
an SpMM's time on this VM. :func:`empty` gives such tensors their own anonymous mapping
with ``MADV_HUGEPAGE`` (transparent huge pages, honoured where the kernel's THP mode is
``always`` or ``madvise``): 2 MiB pages, 512x fewer faults. Smaller tensors come from
``torch.empty``: glibc's heap reuses them once :mod:`gnnrec_lab.kernels` has fixed its mmap and
trim thresholds (:mod:`gnnrec_lab.runtime` says why; with glibc's dynamic defaults blocks of a
few MiB kept being faulted in again), so memory behaviour below the threshold matches the
footprint model's allocator-retention term. The mapping is released when the tensor is freed.
"""
from __future__ import annotations

import mmap

import numpy as np
import torch

HUGE_MIN_BYTES = 32 << 20
_NP = {torch.float32: np.float32, torch.float64: np.float64}
_ADVICE = getattr(mmap, "MADV_HUGEPAGE", None)
_PAGE = mmap.PAGESIZE


def _mapped(shape: tuple, dtype: torch.dtype):
    """A tensor on its own huge-page mapping (zero-filled by the OS), or None when small."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < HUGE_MIN_BYTES or _ADVICE is None or dtype not in _NP:
        return None
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(_ADVICE)
    except OSError:  # THP not configured in this kernel: ordinary pages, same semantics
        pass
    a = np.frombuffer(m, dtype=_NP[dtype])
    # fault the pages in here, from one thread (a zero into every 4 KiB page; a huge page takes the
    # first): faults taken by a parallel kernel's threads at once were measured 10x slower on this
    # VM once memory had been reclaimed (51 MB: 5 ms from one thread, 50 ms from two)
    a.view(np.uint8)[::_PAGE] = 0
    return torch.from_numpy(a.reshape(shape))


def empty(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised tensor; backed by huge pages when it is large (see the module doc)."""
    shape = tuple(int(s) for s in shape)
    t = _mapped(shape, dtype)
    return torch.empty(shape, dtype=dtype) if t is None else t


def zeros(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A zero tensor; a large one is a fresh mapping, already zero (no second pass)."""
    shape = tuple(int(s) for s in shape)
    t = _mapped(shape, dtype)
    return torch.zeros(shape, dtype=dtype) if t is None else t
