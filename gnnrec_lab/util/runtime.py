"""Process-wide runtime settings: the OpenMP wait policy (set when ``gnnrec_lab`` is imported) and
glibc's malloc thresholds (:func:`tune_malloc`, called when the kernels load).

* ``OMP_WAIT_POLICY=PASSIVE``: numba (omp threading layer) and torch each keep an OpenMP team;
  with the default spinning wait policy the two teams (and any other process on a shared
  machine) steal each other's cores and a 0.3 ms SpMM takes 20-40 ms. Passive waiting costs a
  few microseconds per parallel region. Effective only if set before the OpenMP runtime loads
  (before torch is imported: importing gnnrec_lab after torch warns); an explicit user setting wins.
* glibc's malloc: keep freed blocks below 32 MiB in the heap and do not trim its top unless
  1 GiB is free there. With glibc's dynamic defaults the per-step tensors of a few MiB (torch
  asks for 64-byte aligned blocks) kept being unmapped or trimmed and faulted in again, page by
  page: ~1,250 faults a LightGCN step on synth-small (~5 MB, ~1.5 ms of a 9 ms step), ~4,400 on
  synth-gowalla; with these settings 0-3. Tensors of 32 MiB and more still get their own mapping
  (given back when freed); the footprint model already counts the heap's retention. An explicit
  ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the environment wins.

Only the standard library here: this module runs before numpy and torch load.
"""
from __future__ import annotations

import ctypes
import os
import sys

_SET_BY_USER = "OMP_WAIT_POLICY" in os.environ
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if not _SET_BY_USER and "torch" in sys.modules:
    # torch's OpenMP runtime has read the policy already (spinning): say so once, with the fix
    import warnings
    warnings.warn("gnnrec_lab was imported after torch, so OMP_WAIT_POLICY=PASSIVE came too late for torch's "
                  "OpenMP threads: on a shared machine numba's and torch's threads will spin against each other "
                  "(evaluation measured 4x slower). Import gnnrec_lab before torch, or set OMP_WAIT_POLICY in "
                  "the environment", RuntimeWarning, stacklevel=3)

MALLOC_MMAP_THRESHOLD = 32 << 20
MALLOC_TRIM_THRESHOLD = 1 << 30


def tune_malloc() -> bool:
    """Set glibc's mmap and trim thresholds; return whether they were set (False: not glibc, or
    the environment sets them)."""
    if not sys.platform.startswith("linux") or any(
            k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt   # glibc's; other C libraries may not have it
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    m_trim_threshold, m_mmap_threshold = -1, -3   # glibc's malloc.h parameter numbers
    return bool(mallopt(m_mmap_threshold, MALLOC_MMAP_THRESHOLD)) and bool(mallopt(m_trim_threshold,
                                                                                   MALLOC_TRIM_THRESHOLD))
