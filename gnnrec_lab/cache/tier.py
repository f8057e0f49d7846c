"""A real cached tier: embedding rows (+ optimizer state) in a file, a DRAM cache in front.

:class:`SlowTier` keeps a ``(n_rows, width)`` float32 table in a file and reads
and writes rows with ``O_DIRECT`` where the file system allows it, so every
read reaches the device instead of the page cache; where it does not
(e.g. tmpfs), it falls back to buffered I/O followed by
``posix_fadvise(DONTNEED)`` and says so in :attr:`SlowTier.io_mode`. Each row
occupies a 512-byte-aligned stride (the ``O_DIRECT`` unit); runs of
consecutive rows are moved with one system call.

:class:`OracleCachedTable` is a DRAM cache of ``capacity`` rows driven by the
look-ahead oracle over a known trace (BagPipe's rule, as in
:mod:`gnnrec_lab.cache.policies`): before batch ``b`` it makes the batch's rows
resident (evicting, with write-back, the resident rows whose next use is
farthest), and after the batch it writes back and drops every row whose next
use lies beyond ``b + lookahead``. Training updates the rows in place in
:attr:`OracleCachedTable.data`; :meth:`flush` writes everything back, so the
file ends bit-identical to an uncached run.

Not built yet: the background prefetch thread that overlaps these fetches
with compute (fetches here are synchronous, on the training thread).
"""
from __future__ import annotations

import mmap
import os
import time
from typing import Optional

import numpy as np

from ..errors import UserError
from .simulate import next_use as _next_use
from .traces import Trace

ALIGN = 512


class SlowTier:
    """A file-backed float32 row table; reads and writes bypass the page cache."""

    def __init__(self, path: str, n_rows: int, width: int, direct: bool = True):
        self.path, self.n_rows, self.width = str(path), int(n_rows), int(width)
        self.row_bytes = self.width * 4
        self.stride = -(-self.row_bytes // ALIGN) * ALIGN
        if not os.path.exists(self.path) or os.path.getsize(self.path) < self.n_rows * self.stride:
            raise UserError(f"slow tier file {self.path} is missing or smaller than {self.n_rows} rows; "
                            "create it with SlowTier.create")
        self.io_mode = "buffered+fadvise"
        flags = os.O_RDWR
        if direct and hasattr(os, "O_DIRECT"):
            try:
                self.fd = os.open(self.path, flags | os.O_DIRECT)
                self.io_mode = "O_DIRECT"
            except OSError:
                self.fd = os.open(self.path, flags)
        else:
            self.fd = os.open(self.path, flags)
        self._buf = mmap.mmap(-1, max(self.stride, mmap.PAGESIZE))   # page-aligned staging buffer
        self.bytes_read = self.bytes_written = 0          # measured: bytes moved by system calls
        self.read_seconds = self.write_seconds = 0.0      # measured wall time

    @classmethod
    def create(cls, path: str, table: np.ndarray, direct: bool = True) -> "SlowTier":
        """Write ``table`` (n_rows x width float32) to ``path`` and open it as a slow tier."""
        table = np.ascontiguousarray(table, dtype=np.float32)
        n, w = table.shape
        stride = -(-w * 4 // ALIGN) * ALIGN
        padded = np.zeros((n, stride // 4), dtype=np.float32)
        padded[:, :w] = table
        with open(path, "wb") as f:
            f.write(padded.tobytes())
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return cls(path, n, w, direct)

    def _ensure(self, nbytes: int) -> memoryview:
        if len(self._buf) < nbytes:
            self._buf.close()
            self._buf = mmap.mmap(-1, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        return memoryview(self._buf)

    @staticmethod
    def _runs(rows: np.ndarray):
        """(start row, length, position in rows) of each run of consecutive ids in sorted ``rows``."""
        if rows.size == 0:
            return []
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [rows.size]])
        return [(int(rows[s]), int(e - s), int(s)) for s, e in zip(starts, ends)]

    def read(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (any order) as a (k, width) float32 array, read from the device."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        srt = rows[order]
        out = np.empty((rows.size, self.width), dtype=np.float32)
        t0 = time.perf_counter()
        sw = self.stride // 4
        for start, length, pos in self._runs(srt):
            nbytes = length * self.stride
            mv = self._ensure(nbytes)
            got = os.preadv(self.fd, [mv[:nbytes]], start * self.stride)
            if got != nbytes:
                raise OSError(f"short read from {self.path}: {got} of {nbytes} bytes")
            block = np.frombuffer(self._buf, dtype=np.float32, count=length * sw).reshape(length, sw)
            out[order[pos:pos + length]] = block[:, :self.width]
            self.bytes_read += nbytes
        if self.io_mode != "O_DIRECT":
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        self.read_seconds += time.perf_counter() - t0
        return out

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Write ``values[k]`` to row ``rows[k]``."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        srt = rows[order]
        vals = np.asarray(values, dtype=np.float32)[order]
        t0 = time.perf_counter()
        sw = self.stride // 4
        for start, length, pos in self._runs(srt):
            nbytes = length * self.stride
            mv = self._ensure(nbytes)
            block = np.frombuffer(self._buf, dtype=np.float32, count=length * sw).reshape(length, sw)
            block[:, :self.width] = vals[pos:pos + length]
            block[:, self.width:] = 0
            got = os.pwritev(self.fd, [mv[:nbytes]], start * self.stride)
            if got != nbytes:
                raise OSError(f"short write to {self.path}: {got} of {nbytes} bytes")
            self.bytes_written += nbytes
        if self.io_mode != "O_DIRECT":
            os.fsync(self.fd)
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        self.write_seconds += time.perf_counter() - t0

    def read_all(self) -> np.ndarray:
        return self.read(np.arange(self.n_rows))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._buf.close()


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
