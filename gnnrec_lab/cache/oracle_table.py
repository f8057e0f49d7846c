"""The trace-driven (offline) form of the look-ahead oracle cache over a real slow tier.

:class:`OracleCachedTable` runs BagPipe's rule over a known :class:`~gnnrec_lab.cache.traces.Trace`
with real reads and write-backs of a :class:`~gnnrec_lab.cache.slow_tier.SlowTier`; it checks
the simulator (:mod:`gnnrec_lab.cache.simulate`) against real I/O.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from gnnrec_lab.cache.simulate import next_use as _next_use
from gnnrec_lab.cache.slow_tier import SlowTier
from gnnrec_lab.cache.traces import Trace
from gnnrec_lab.util.errors import UserError


class OracleCachedTable:
    """DRAM cache of ``capacity`` rows over a :class:`SlowTier`, driven by BagPipe's look-ahead rule.

    Use per batch ``b`` of ``trace``: ``idx = t.fetch(b)`` (slots of the
    batch's rows, in ``trace.batch(b)`` order), update ``t.data[idx]`` in
    place, then ``t.release(b)``; finally ``t.flush()``.
    """

    def __init__(self, tier: SlowTier, capacity: int, trace: Trace, lookahead: Optional[int] = 200):
        if trace.n_rows != tier.n_rows:
            raise UserError(f"trace has {trace.n_rows} rows, the slow tier {tier.n_rows}")
        if capacity < trace.max_batch_rows():
            raise UserError(f"cache-size: {capacity:,} rows cannot hold the largest batch "
                            f"({trace.max_batch_rows():,} distinct rows)")
        if lookahead is not None and lookahead < 1:
            raise UserError(f"lookahead must be a positive number of batches, got {lookahead}")
        self.tier, self.trace, self.capacity = tier, trace, int(capacity)
        self.lookahead = lookahead
        self.next_use = _next_use(trace)
        self.data = np.zeros((self.capacity, tier.width), dtype=np.float32)
        self.slot_of = np.full(tier.n_rows, -1, dtype=np.int64)
        self.row_in = np.full(self.capacity, -1, dtype=np.int64)   # row held by each slot
        self.key = np.zeros(tier.n_rows, dtype=np.int64)           # next use of each resident row
        self.free = list(range(self.capacity - 1, -1, -1))
        self.hits = self.misses = self.evictions = 0
        self.fetch_seconds = 0.0    # measured: time in fetch() (evict + read), i.e. training stall

    def _evict(self, rows: np.ndarray) -> None:
        if rows.size == 0:
            return
        slots = self.slot_of[rows]
        self.tier.write(rows, self.data[slots])
        self.slot_of[rows] = -1
        self.row_in[slots] = -1
        self.free.extend(slots.tolist())
        self.evictions += int(rows.size)

    def fetch(self, b: int) -> np.ndarray:
        """Make batch ``b``'s rows resident; returns their slots (int64) in trace order."""
        t0 = time.perf_counter()
        rows = self.trace.batch(b)
        miss = rows[self.slot_of[rows] < 0]
        self.hits += int(rows.size - miss.size)
        self.misses += int(miss.size)
        need = miss.size - len(self.free)
        if need > 0:  # evict the resident rows (outside this batch) whose next use is farthest
            resident = self.row_in[self.row_in >= 0]
            resident = resident[~np.isin(resident, rows)]
            far = resident[np.argsort(-self.key[resident], kind="stable")[:need]]
            self._evict(far)
        if miss.size:
            slots = np.array([self.free.pop() for _ in range(miss.size)], dtype=np.int64)
            self.data[slots] = self.tier.read(miss)
            self.slot_of[miss] = slots
            self.row_in[slots] = miss
        s, e = self.trace.offsets[b], self.trace.offsets[b + 1]
        self.key[rows] = self.next_use[s:e]
        self.fetch_seconds += time.perf_counter() - t0
        return self.slot_of[rows]

    def release(self, b: int) -> None:
        """After batch ``b``: write back and drop rows not needed within the look-ahead window."""
        if self.lookahead is None:
            return
        rows = self.trace.batch(b)
        s, e = self.trace.offsets[b], self.trace.offsets[b + 1]
        self._evict(rows[self.next_use[s:e] > b + self.lookahead])

    def flush(self) -> None:
        """Write every resident row back to the slow tier."""
        self._evict(self.row_in[self.row_in >= 0])
