"""Embedding-row cache policies, all behind one interface (:class:`Policy`).

Model shared by every policy (batch granularity):
- Batch ``b`` needs its distinct rows resident while it trains. A row already
  resident from an earlier batch is a *hit*; any other row is a *miss* and is
  read from the slow tier (on demand, or ahead of time by a prefetcher).
- Every row a batch touches gets a gradient update, so it is dirty afterwards
  and is written back to the slow tier when it is evicted (or at the end of the
  trace, when the cache is flushed).
- ``capacity`` bounds the rows resident at once, the batch's own rows
  included, so every caching policy needs ``capacity >= largest batch``. The
  static policy splits it: ``k`` pinned rows plus a staging area for the
  largest batch's unpinned rows (streamed: read before the batch, written back
  after it), with the largest ``k`` that fits. "none" streams every row.

Policies:
- ``none``   -- no cache: every access is read and written back.
- ``lru``    -- evict the least recently used row.
- ``lfu``    -- evict the least frequently used row (counts kept over the
  whole trace, "perfect LFU"; ties go to the least recently used).
- ``static`` -- pin the top rows by a score (node degree, or the trace's own
  access counts when no score is given: an offline oracle of popularity, not
  of order); as many as fit beside the staging area.
- ``oracle`` -- BagPipe's look-ahead rule with a window of ``L`` batches: a row
  fetched for a batch stays while its next use lies within the next ``L``
  batches and is evicted (written back) right after its last use in the
  window; rows the next batches need are prefetched, so its misses do not
  stall training; when the capacity bound bites, it evicts the resident row
  whose next use is farthest. With ``L`` = infinity it is Belady with prefetch.
- ``belady`` -- offline optimal replacement (MIN): on a miss with a full cache,
  evict the row whose next use is farthest in the future. The ceiling on hits.

The kernels are numba-compiled; each runs in O(accesses * log capacity).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numba
import numpy as np

from gnnrec_lab.config.run import SIMULATED_CACHE_POLICIES
from gnnrec_lab.util.errors import UserError

INF = np.int64(2**62)   # "never used again"


# -- a max-heap of (int64 key, int64 row) with lazy deletion ---------------------------------

@numba.njit(cache=True, nogil=True)
def _push(hk, hv, n, key, val):
    i = n
    hk[i] = key
    hv[i] = val
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] >= hk[i]:
            break
        hk[parent], hk[i] = hk[i], hk[parent]
        hv[parent], hv[i] = hv[i], hv[parent]
        i = parent
    return n + 1


@numba.njit(cache=True, nogil=True)
def _pop(hk, hv, n):
    key = hk[0]
    val = hv[0]
    n -= 1
    hk[0] = hk[n]
    hv[0] = hv[n]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        big = left
        if left + 1 < n and hk[left + 1] > hk[left]:
            big = left + 1
        if hk[i] >= hk[big]:
            break
        hk[i], hk[big] = hk[big], hk[i]
        hv[i], hv[big] = hv[big], hv[i]
        i = big
    return key, val, n


# -- kernels -----------------------------------------------------------------------------------

@numba.njit(cache=True, nogil=True)
def _keyed_kernel(rows, offsets, next_use, n_rows, capacity, mode, lookahead):
    """Evict-the-largest-key policies. mode 0: Belady (key = next use),
    1: look-ahead oracle (key = next use, eager eviction past the window),
    2: LFU (key = -(count << 32 | last batch))."""
    n_batches = offsets.shape[0] - 1
    max_b = 0
    for b in range(n_batches):
        max_b = max(max_b, offsets[b + 1] - offsets[b])
    cached = np.zeros(n_rows, dtype=np.bool_)
    inbatch = np.full(n_rows, -1, dtype=np.int64)
    curkey = np.zeros(n_rows, dtype=np.int64)
    freq = np.zeros(n_rows, dtype=np.int64)
    slot_of = np.zeros(n_rows, dtype=np.int64)
    slot_rows = np.zeros(capacity + 1, dtype=np.int64)
    hcap = 2 * capacity + 4 * max_b + 64
    hk = np.empty(hcap, dtype=np.int64)
    hv = np.empty(hcap, dtype=np.int64)
    n = 0
    occ = 0
    hits = 0
    misses = 0
    evictions = 0
    prefetched = 0
    peak = 0
    for b in range(n_batches):
        s = offsets[b]
        e = offsets[b + 1]
        m = 0
        for p in range(s, e):
            r = rows[p]
            inbatch[r] = b
            if cached[r]:
                hits += 1
            else:
                m += 1
        misses += m
        if mode == 1:
            prefetched += m
        if n + (e - s) > hcap:   # too many stale entries: rebuild from the resident rows
            n = 0
            for k in range(occ):
                n = _push(hk, hv, n, curkey[slot_rows[k]], slot_rows[k])
        need = occ + m - capacity
        while need > 0 and n > 0:
            key, r, n = _pop(hk, hv, n)
            if (not cached[r]) or curkey[r] != key or inbatch[r] == b:
                continue  # stale entry, or a row this batch needs (it gets a fresh entry below)
            cached[r] = False
            last = slot_rows[occ - 1]
            slot_rows[slot_of[r]] = last
            slot_of[last] = slot_of[r]
            occ -= 1
            evictions += 1
            need -= 1
        for p in range(s, e):
            r = rows[p]
            if not cached[r]:
                cached[r] = True
                slot_rows[occ] = r
                slot_of[r] = occ
                occ += 1
            if mode == 2:
                freq[r] += 1
                curkey[r] = -((freq[r] << 32) | b)
            else:
                curkey[r] = next_use[p]
            if mode == 1 and next_use[p] > b + lookahead:
                continue  # evicted right after this batch; no heap entry
            n = _push(hk, hv, n, curkey[r], r)
        if occ > peak:
            peak = occ
        if mode == 1:  # BagPipe: write back each row after its last use inside the window
            for p in range(s, e):
                if next_use[p] > b + lookahead:
                    r = rows[p]
                    cached[r] = False
                    last = slot_rows[occ - 1]
                    slot_rows[slot_of[r]] = last
                    slot_of[last] = slot_of[r]
                    occ -= 1
                    evictions += 1
    return np.array([hits, misses, evictions, prefetched, peak, occ], dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _lru_kernel(rows, offsets, n_rows, capacity):
    """LRU at batch granularity. The recency queue is the trace itself: position p is
    the live entry of row rows[p] iff it is that row's latest access, so eviction scans
    positions in order and needs no extra memory."""
    n_batches = offsets.shape[0] - 1
    cached = np.zeros(n_rows, dtype=np.bool_)
    inbatch = np.full(n_rows, -1, dtype=np.int64)
    lastpos = np.full(n_rows, -1, dtype=np.int64)
    h = 0
    occ = 0
    hits = 0
    misses = 0
    evictions = 0
    peak = 0
    for b in range(n_batches):
        s = offsets[b]
        e = offsets[b + 1]
        m = 0
        for p in range(s, e):
            r = rows[p]
            inbatch[r] = b
            if cached[r]:
                hits += 1
            else:
                m += 1
        misses += m
        need = occ + m - capacity
        while need > 0 and h < s:
            r = rows[h]
            if cached[r] and lastpos[r] == h and inbatch[r] != b:
                cached[r] = False
                occ -= 1
                evictions += 1
                need -= 1
            h += 1
        for p in range(s, e):
            r = rows[p]
            lastpos[r] = p
            if not cached[r]:
                cached[r] = True
                occ += 1
        if occ > peak:
            peak = occ
    return np.array([hits, misses, evictions, 0, peak, occ], dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _static_kernel(rows, pinned):
    """Pinned rows are loaded on first use and stay; all others are streamed (read, then written back)."""
    loaded = np.zeros(pinned.shape[0], dtype=np.bool_)
    hits = 0
    misses = 0
    evictions = 0
    occ = 0
    for p in range(rows.shape[0]):
        r = rows[p]
        if pinned[r]:
            if loaded[r]:
                hits += 1
            else:
                loaded[r] = True
                misses += 1
                occ += 1
        else:
            misses += 1
            evictions += 1
    return np.array([hits, misses, evictions, 0, occ, occ], dtype=np.int64)


# -- the interface -----------------------------------------------------------------------------

@dataclass
class Counts:
    """Row counts from one simulation (rows, not bytes)."""
    hits: int
    misses: int           # rows read from the slow tier
    evictions: int        # rows written back before the end of the trace
    prefetched: int       # of the misses, rows fetched ahead of use (no stall)
    peak_occupancy: int   # most rows resident at once
    final_resident: int   # rows resident at the end (flushed: written back)


class Policy:
    """A cache replacement policy. ``run`` simulates it over a trace."""

    name = "policy"
    holds_batch = True    # needs capacity >= largest batch (the batch lives in the cache)

    def run(self, trace, capacity: int, next_use: np.ndarray) -> Counts:
        raise NotImplementedError

    def check_capacity(self, trace, capacity: int) -> None:
        if capacity < 0:
            raise UserError(f"cache-size must be >= 0 rows, got {capacity}")
        if self.holds_batch and capacity < trace.max_batch_rows():
            raise UserError(f"cache-size: {capacity:,} rows cannot hold the largest batch "
                            f"({trace.max_batch_rows():,} distinct rows) that policy {self.name} keeps resident")

    @property
    def label(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoCache(Policy):
    name = "none"
    holds_batch = False

    def run(self, trace, capacity, next_use):
        a = trace.n_accesses
        return Counts(0, a, a, 0, 0, 0)


class LRU(Policy):
    name = "lru"

    def run(self, trace, capacity, next_use):
        self.check_capacity(trace, capacity)
        return Counts(*(int(x) for x in _lru_kernel(trace.rows, trace.offsets, trace.n_rows, int(capacity))))


class LFU(Policy):
    name = "lfu"

    def run(self, trace, capacity, next_use):
        self.check_capacity(trace, capacity)
        c = _keyed_kernel(trace.rows, trace.offsets, next_use, trace.n_rows, int(capacity), 2, 0)
        return Counts(*(int(x) for x in c))


class StaticTop(Policy):
    """Pin the rows with the highest ``scores`` (default: trace access counts).

    Of the ``capacity`` slots, ``k`` hold pinned rows and the rest stage the
    unpinned rows of one batch; ``k`` is the largest with
    ``k + max_b |batch_b minus pinned| <= capacity``.
    """

    name = "static"

    def __init__(self, scores: Optional[np.ndarray] = None, basis: str = ""):
        self.scores = None if scores is None else np.asarray(scores)
        self.basis = basis or ("frequency" if scores is None else "score")

    @property
    def label(self) -> str:
        return f"static-{self.basis}"

    def pinned(self, trace, capacity: int) -> np.ndarray:
        """Boolean mask over table rows of the pinned set."""
        scores = trace.counts() if self.scores is None else self.scores
        if scores.shape[0] != trace.n_rows:
            raise UserError(f"static scores have {scores.shape[0]} entries, the table has {trace.n_rows} rows")
        order = np.argsort(-scores.astype(np.float64), kind="stable")
        rank = np.empty(trace.n_rows, dtype=np.int64)
        rank[order] = np.arange(trace.n_rows)
        row_rank = rank[trace.rows]

        def footprint(k):  # pinned rows + the largest batch's unpinned rows
            c = np.concatenate([[0], np.cumsum(row_rank >= k)])
            staged = c[trace.offsets[1:]] - c[trace.offsets[:-1]]
            return k + (int(staged.max()) if staged.size else 0)

        # footprint(k) is non-decreasing in k (pinning one more row saves at most one staging slot)
        lo, hi = 0, min(int(capacity), trace.n_rows)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if footprint(mid) <= capacity:
                lo = mid
            else:
                hi = mid - 1
        return rank < lo

    def run(self, trace, capacity, next_use):
        self.check_capacity(trace, capacity)
        pinned = self.pinned(trace, capacity)
        c = _static_kernel(trace.rows, pinned)
        if trace.n_batches:
            # peak occupancy: pinned rows loaded by the end of batch b plus batch b's staged rows
            is_pinned = pinned[trace.rows]
            cs = np.concatenate([[0], np.cumsum(~is_pinned)])
            staged = cs[trace.offsets[1:]] - cs[trace.offsets[:-1]]
            pos = np.flatnonzero(is_pinned)
            _, first = np.unique(trace.rows[pos], return_index=True)
            loaded = np.searchsorted(np.sort(pos[first]), trace.offsets[1:], side="left")
            c[4] = int((loaded + staged).max())
        return Counts(*(int(x) for x in c))


class LookAheadOracle(Policy):
    """BagPipe's look-ahead cache with a window of ``lookahead`` batches (None = unbounded)."""

    name = "oracle"

    def __init__(self, lookahead: Optional[int] = 200):
        if lookahead is not None and int(lookahead) < 1:
            raise UserError(f"lookahead must be a positive number of batches, got {lookahead}")
        self.lookahead = None if lookahead is None else int(lookahead)

    @property
    def label(self) -> str:
        return f"oracle(L={'inf' if self.lookahead is None else self.lookahead})"

    def run(self, trace, capacity, next_use):
        self.check_capacity(trace, capacity)
        L = INF if self.lookahead is None else np.int64(self.lookahead)
        c = _keyed_kernel(trace.rows, trace.offsets, next_use, trace.n_rows, int(capacity), 1, L)
        return Counts(*(int(x) for x in c))


class Belady(Policy):
    name = "belady"

    def run(self, trace, capacity, next_use):
        self.check_capacity(trace, capacity)
        c = _keyed_kernel(trace.rows, trace.offsets, next_use, trace.n_rows, int(capacity), 0, 0)
        return Counts(*(int(x) for x in c))


_CLASSES = {c.name: c for c in (NoCache, LRU, LFU, StaticTop, LookAheadOracle, Belady)}
# name -> class, in the order of config.SIMULATED_CACHE_POLICIES (the one list of names)
POLICIES = {name: _CLASSES[name] for name in SIMULATED_CACHE_POLICIES}


def make_policy(name: str, **kw) -> Policy:
    """A policy by name (one of :data:`POLICIES`); ``kw`` go to its constructor."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise UserError(f"unknown cache policy {name!r}, allowed: {', '.join(POLICIES)}") from None
    return cls(**kw)
