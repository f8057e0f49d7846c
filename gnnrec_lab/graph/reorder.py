"""Node reordering kernels (numba, prepare time): label propagation for the community order and the
structure of ``P A P^T``. :func:`gnnrec_lab.graph.bipartite.locality_order` and
:meth:`~gnnrec_lab.graph.bipartite.CSR.permuted` call them."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

# kernels.native's options (parallel, cached on disk, no fastmath); the graph sits below the kernels
_JIT = dict(parallel=True, cache=True, fastmath=False, nogil=True)


@njit(cache=True, nogil=True)
def _mix(a):
    """A 64-bit integer hash (splitmix64's finaliser): deterministic tie-breaking."""
    z = np.uint64(a) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def label_propagation(indptr, indices, visit, skip, labels, iters, min_changed):
    """Asynchronous label propagation (Raghavan et al. 2007): each node in ``visit`` order takes
    the label most frequent among its neighbours (ties broken by a hash of label and round, the
    current label kept when it ties), updating ``labels`` in place. Nodes with ``skip`` set
    neither vote nor change (hubs, which would merge every community). Stops after ``iters``
    rounds or when fewer than ``min_changed`` labels changed in a round. Serial (in-place
    updates are what make it converge). Returns the rounds run."""
    n = indptr.shape[0] - 1
    cnt = np.zeros(n, dtype=np.int32)
    maxdeg = 0
    for r in range(n):
        maxdeg = max(maxdeg, indptr[r + 1] - indptr[r])
    seen = np.empty(maxdeg, dtype=np.int64)
    rounds = 0
    for it in range(iters):
        rounds += 1
        changed = 0
        for k in range(visit.shape[0]):
            r = visit[k]
            if skip[r]:
                continue
            ns = 0
            for e in range(indptr[r], indptr[r + 1]):
                c = indices[e]
                if skip[c]:
                    continue
                lab = labels[c]
                if cnt[lab] == 0:
                    seen[ns] = lab
                    ns += 1
                cnt[lab] += 1
            if ns == 0:
                continue
            cur = labels[r]
            best = cur
            bestc = cnt[cur]
            besth = _mix(cur * 1000003 + it)
            for j in range(ns):
                lab = seen[j]
                c = cnt[lab]
                if c > bestc:
                    best, bestc, besth = lab, c, _mix(lab * 1000003 + it)
                elif c == bestc and lab != cur and best != cur:
                    h = _mix(lab * 1000003 + it)
                    if h > besth:
                        best, besth = lab, h
            for j in range(ns):
                cnt[seen[j]] = 0
            if best != cur:
                labels[r] = best
                changed += 1
        if changed < min_changed:
            break
    return rounds


@njit(**_JIT)
def permute_csr(indptr, indices, perm, inv, new_indptr, new_indices):
    """The structure of ``P A P^T``: row ``r`` of the result is row ``perm[r]`` of ``A`` with every
    column ``c`` renamed ``inv[c]`` and sorted ascending (``new_indptr`` filled by the caller)."""
    for r in prange(perm.shape[0]):
        src = perm[r]
        lo = indptr[src]
        o = new_indptr[r]
        d = indptr[src + 1] - lo
        for k in range(d):
            new_indices[o + k] = inv[indices[lo + k]]
        new_indices[o:o + d].sort()
    return new_indices
