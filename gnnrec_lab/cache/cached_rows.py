"""A real cached tier: embedding rows (+ Adam moments) in a slow-tier file, a DRAM cache in front.

:class:`CachedRows` is the row store sampled-mode training uses when
``cache_policy`` is not ``none`` (see :mod:`gnnrec_lab.cache.rows`): one record per
row holds the embedding and its two Adam moments, so a row moves with one
read; a DRAM cache of ``capacity`` rows sits in front, run by a policy:

* ``lru`` / ``lfu`` / ``static`` (top-degree rows pinned, the rest streamed)
  and ``none`` (every row read and written back every batch) fetch on demand
  on the training thread: misses stall the step (a batch's victims are
  written back and its misses read in one exchange);
* ``oracle`` (BagPipe) -- a background I/O thread reads the rows of the
  batches the sampler has already produced (the look-ahead window) while the
  current batch computes, and writes evicted rows back in the same job. A row
  is evicted right after its last use within the next ``lookahead`` batches
  when the window covers that many batches; under capacity pressure the row
  whose next use is farthest goes first (among rows equally far, e.g. not in
  the visible window: clean rows first, then runs of consecutive dirty rows,
  then least recently used). Batches the sampler produced past the epoch's
  last step (an epoch cap) are not prefetched.

Updates run :class:`~gnnrec_lab.models.optim.SparseRowAdam` on the cached rows (same
tensors shapes, same operations, one global step count), so training is
bit-identical to the DRAM store. :func:`make_cached_rows` builds one for a run:
it writes the model's table to a new :class:`~gnnrec_lab.cache.slow_tier.SlowTier` file.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Optional

import numpy as np
import torch

from gnnrec_lab.cache.policies import INF
from gnnrec_lab.cache.simulate import parse_capacity
from gnnrec_lab.cache.slow_tier import IO_THREADS, SlowTier
from gnnrec_lab.config.run import TIER_CACHE_POLICIES
from gnnrec_lab.memory.placement import place_of
from gnnrec_lab.models.optim import SparseRowAdam
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.recorder import get_recorder, profiler_range

JOB_READ_ROWS = 4096       # oracle: rows one prefetch job reads at most (more batches per job when they fit)


class CachedRows:
    """A :class:`~gnnrec_lab.cache.rows.RowStore` over a :class:`SlowTier` of ``[embedding | m | v]`` records.

    ``capacity`` rows of DRAM cache; ``policy`` one of :data:`~gnnrec_lab.config.run.TIER_CACHE_POLICIES`;
    ``lookahead`` the oracle's window ``L`` in batches; ``scores`` the static
    policy's ranking (node degree; higher is pinned first); ``table`` the
    model's embedding tensor, refreshed from the slow tier by :meth:`sync`;
    ``epoch_steps`` an upper bound on the steps of an epoch (the run's cap): the
    oracle does not prefetch for batches the sampler produced past it (after the
    first :meth:`sync` the exact epoch length is known and used).
    Every batch's distinct rows must fit in the cache (``ConfigError`` on
    ``cache_size`` otherwise).
    """

    def __init__(self, tier: SlowTier, capacity: int, lr: float, policy: str = "oracle", lookahead: int = 200,
                 scores: Optional[np.ndarray] = None, table: Optional[torch.Tensor] = None,
                 info: Optional[dict] = None, betas=(0.9, 0.999), eps: float = 1e-8,
                 epoch_steps: Optional[int] = None):
        if policy not in TIER_CACHE_POLICIES:
            raise ConfigError("cache_policy", f"got {policy!r}, allowed: {', '.join(TIER_CACHE_POLICIES)}")
        if tier.width % 3:
            raise ValueError("slow tier records must hold [embedding | m | v] (width divisible by 3)")
        if int(capacity) < 1:
            raise ConfigError("cache_size", f"must hold at least one row, got {capacity} rows")
        if int(lookahead) < 1:
            raise ConfigError("lookahead", f"must be a positive number of batches, got {lookahead}")
        self.tier, self.policy, self.capacity, self.L = tier, policy, int(capacity), int(lookahead)
        self.table, self.info = table, dict(info or {})
        n, self.dim = tier.n_rows, tier.width // 3
        self.buf = np.zeros((self.capacity, tier.width), dtype=np.float32)
        tb = torch.from_numpy(self.buf)
        d = self.dim
        # the three column blocks are strided views: indexing them yields contiguous (k, D) tensors,
        # exactly the tensors SparseRowAdam sees on a DRAM table, so the arithmetic is the same
        self.emb, self.m, self.v = tb[:, :d], tb[:, d:2 * d], tb[:, 2 * d:]
        self.adam = SparseRowAdam(self.emb, lr=lr, betas=betas, eps=eps, m=self.m, v=self.v)
        self.slot_of = np.full(n, -1, dtype=np.int64)
        self.row_in = np.full(self.capacity, -1, dtype=np.int64)
        self.ready = np.zeros(self.capacity, dtype=bool)      # slot holds its row's data
        self.fresh = np.zeros(self.capacity, dtype=bool)      # read from the tier, not used by a batch yet
        self.dirty = np.zeros(self.capacity, dtype=bool)
        self.last_use = np.full(n, -1, dtype=np.int64)
        self.freq = np.zeros(n, dtype=np.int64)
        self.next_use = np.full(n, INF, dtype=np.int64)       # oracle: next known use (batch id)
        self.inbatch = np.full(n, -1, dtype=np.int64)
        self.rank = None
        self.k_pinned = 0
        if policy == "static":
            if scores is None or len(scores) != n:
                raise ValueError(f"static policy needs one score per row ({n})")
            order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
            self.rank = np.empty(n, dtype=np.int64)
            self.rank[order] = np.arange(n)
            self.k_pinned = self.capacity      # shrinks so that the largest batch's unpinned rows fit
        self.epoch_steps = int(epoch_steps) if epoch_steps else None   # at most this many steps an epoch
        self._epoch_start: Optional[int] = None   # first batch of the current epoch
        self._epoch_len: Optional[int] = None     # steps of an epoch, known after the first sync()
        self.cur = -1                  # batch between fetch() and update(); -1 none
        self.expected = 0              # batch id the next fetch() is expected to carry
        self.future: dict = {}         # oracle: batch id -> distinct rows (known from the window)
        self._nu_rows = np.empty(0, dtype=np.int64)
        self._wb: list = []            # oracle: (rows, data) evicted, waiting to be written back
        self._cv = threading.Condition()
        self._closing = False
        self._io_busy = False
        self._io_error: Optional[BaseException] = None
        # measured counters
        self.hits = self.misses = self.prefetched = self.demand = self.evictions = self.eager_evictions = 0
        self.fetch_seconds = self.stall_seconds = self.update_seconds = 0.0
        self.fetches = 0
        self.io_jobs, self.io_busy_seconds = 0, 0.0     # oracle: prefetch/write-back jobs, their wall time
        self.rows_read = self.wasted = 0
        self.max_batch_rows = 0
        self.peak_occupancy = 0
        self.window_sum = 0
        self.sync_bytes_read = self.sync_bytes_written = 0
        self.sync_seconds = 0.0
        self._rec_read = self._rec_written = 0
        self._io = None
        if policy == "oracle":
            self._io = threading.Thread(target=self._io_loop, name="gnnrec-cache-prefetch", daemon=True)
            self._io.start()

    # -- helpers (call with the lock held) ------------------------------------------------------
    def _n_free(self) -> int:
        return int(np.count_nonzero(self.row_in < 0))

    def _check_fits(self, n_rows: int) -> None:
        self.max_batch_rows = max(self.max_batch_rows, n_rows)
        if n_rows > self.capacity:
            raise ConfigError("cache_size", f"{self.capacity:,} rows cannot hold a batch of {n_rows:,} distinct "
                                            f"rows; use cache_size >= {n_rows} (rows) or a larger share")

    def _take(self, victims: np.ndarray) -> tuple:
        """Drop ``victims`` (resident rows) from the cache; returns (dirty rows, their records) to write."""
        slots = self.slot_of[victims]
        d = self.dirty[slots]
        out = (victims[d], self.buf[slots[d]].copy())
        self.slot_of[victims] = -1
        self.row_in[slots] = -1
        self.wasted += int(np.count_nonzero(self.fresh[slots]))   # prefetched, evicted before any use
        self.ready[slots] = self.fresh[slots] = self.dirty[slots] = False
        self.evictions += int(victims.size)
        return out

    def _place(self, rows: np.ndarray) -> np.ndarray:
        """Reserve free slots for ``rows`` (not ready until their data arrives)."""
        slots = np.flatnonzero(self.row_in < 0)[:rows.size]
        self.slot_of[rows] = slots
        self.row_in[slots] = rows
        self.ready[slots] = False
        self.fresh[slots] = True
        self.dirty[slots] = False
        self.rows_read += int(rows.size)
        self.peak_occupancy = max(self.peak_occupancy, self.capacity - self._n_free())
        return slots

    def _victim_order(self, cand: np.ndarray) -> np.ndarray:
        """``cand`` (resident rows) in eviction order for this policy."""
        if self.policy == "lfu":
            return cand[np.lexsort((cand, self.last_use[cand], self.freq[cand]))]
        if self.policy == "oracle":
            # farthest next use first; among equals (e.g. no known next use) clean rows first (nothing to
            # write back), then least recently used
            dirty = self.dirty[self.slot_of[cand]]
            return cand[np.lexsort((cand, self.last_use[cand], dirty, -self.next_use[cand]))]
        return cand[np.lexsort((cand, self.last_use[cand]))]     # lru (and static's unpinned rows)

    def _oracle_victims(self, cand: np.ndarray, short: int) -> np.ndarray:
        """``short`` of the resident rows ``cand`` to evict for the oracle: farthest next use first.
        Rows whose next use ties with the last one taken (typically: no use in the window) are
        equally good to Belady; among them clean rows go first (nothing to write back), then
        dirty rows in runs of consecutive ids, longest runs first (one write call per run; this
        disk's cost is per call), then least recently used."""
        if short >= cand.size:
            return self._victim_order(cand)
        if short <= 0:
            return cand[:0]
        nu = self.next_use[cand]
        kth = np.partition(nu, cand.size - short)[cand.size - short]   # the short-th farthest next use
        sure = cand[nu > kth]          # all go (no full sort: this runs under the lock per prefetch job)
        tie = cand[nu == kth]
        rest = short - sure.size
        tie = tie[np.lexsort((tie, self.last_use[tie]))]              # least recently used first
        d = self.dirty[self.slot_of[tie]]
        clean = tie[~d]
        if clean.size >= rest:
            return np.concatenate([sure, clean[:rest]])
        return np.concatenate([sure, clean, _prefer_runs(tie[d], rest - clean.size)])

    def _refresh_next_use(self) -> None:
        """next_use from the batches known ahead (the current one included), up to L past the next fetch."""
        self.next_use[self._nu_rows] = INF
        base = self.cur if self.cur >= 0 else self.expected
        ids = sorted(j for j in self.future if j <= base + self.L)
        for j in reversed(ids):
            self.next_use[self.future[j]] = j
        self._nu_rows = np.concatenate([self.future[j] for j in ids]) if ids else np.empty(0, np.int64)

    # -- the row-store interface ----------------------------------------------------------------
    def lookahead(self, future_rows: list) -> None:
        """Rows of the batches already sampled ahead; ``future_rows[j]`` is batch ``next fetch + 1 + j``."""
        if self.policy != "oracle":
            return
        with self._cv:
            self._raise_io_error()
            base = self.expected
            # batches past the epoch's last step are sampled ahead but never trained (an epoch cap)
            start = self._epoch_start if self._epoch_start is not None else base
            length = self._epoch_len or self.epoch_steps
            n = min(len(future_rows), self.L, (start + length - base - 1) if length else self.L)
            self.window_sum += max(n, 0)
            added = False
            for j, rows in enumerate(future_rows[:max(n, 0)]):
                if base + 1 + j in self.future:
                    continue      # known from an earlier step (fetch() checks it against the batch)
                r = np.unique(np.asarray(rows, dtype=np.int64))
                self._check_fits(r.size)
                self.future[base + 1 + j] = r
                added = True
            if added:
                self._refresh_next_use()
                self._cv.notify_all()

    def fetch(self, batch: int, rows: torch.Tensor) -> torch.Tensor:
        """Layer-0 embeddings of ``rows`` (distinct global ids) for ``batch``, as a new (k, D) tensor."""
        with profiler_range("row_fetch", "forward"):   # the record is made inside, after the I/O
            return self._fetch(batch, rows)

    def _fetch(self, batch: int, rows: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        r = rows.numpy().astype(np.int64, copy=False)
        self._check_fits(r.size)
        w0 = self.tier.write_seconds
        with self._cv:
            self._raise_io_error()
            if self._epoch_start is None:
                self._epoch_start = batch
            self.cur, self.expected = batch, batch + 1
            self.inbatch[r] = batch
            slots = self.slot_of[r]
            present = slots >= 0
            fresh = np.zeros(r.size, dtype=bool)
            fresh[present] = self.fresh[slots[present]]
            hits = int(np.count_nonzero(present & ~fresh))
            self.hits += hits
            self.misses += r.size - hits
            self.demand += int(np.count_nonzero(~present))
            if self.policy == "oracle":
                self.prefetched += int(np.count_nonzero(fresh))
                known = self.future.get(batch)
                actual = np.unique(r)
                if known is not None and not np.array_equal(known, actual):
                    self.future.clear()   # a window from a sampler that was stopped early: stale
                self.future[batch] = actual
                self._refresh_next_use()
                self.next_use[r] = batch           # pinned until update()
                self._cv.notify_all()
                ts = time.perf_counter()
                while True:
                    s = self.slot_of[r]
                    if np.all(s >= 0) and np.all(self.ready[s]):
                        break
                    self._raise_io_error()
                    if not self._io.is_alive():
                        raise RuntimeError("cache prefetch thread stopped while a batch waited for rows")
                    self._cv.wait(0.5)
                self.stall_seconds += time.perf_counter() - ts
            else:
                ts = time.perf_counter()
                self._load_sync(r, batch)
                self.stall_seconds += time.perf_counter() - ts
            slots = self.slot_of[r]
            self.fresh[slots] = False
        x = self.emb[torch.from_numpy(slots)]
        self._slots = slots
        wb_s = self.tier.write_seconds - w0 if self.policy != "oracle" else 0.0
        dt = time.perf_counter() - t0
        self.fetch_seconds += dt
        self.fetches += 1
        recorder = get_recorder()
        nread = self.tier.bytes_read - self.sync_bytes_read - self._rec_read
        self._rec_read += nread
        recorder.record("row_fetch", int((dt - wb_s) * 1e9), bytes_read=nread, bytes_written=x.numel() * 4,
                        pattern="gather", row_bytes=self.tier.stride, random_bytes=nread, phase="forward",
                        backend=self.tier.io_mode)
        if wb_s > 0:
            self._record_writeback(wb_s, "forward")
        return x

    def update(self, batch: int, rows: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
        """Row-sparse Adam on ``rows`` in the cache (the tier sees them when they are evicted)."""
        t0 = time.perf_counter()
        r = rows.numpy().astype(np.int64, copy=False)
        slots = self._slots if batch == self.cur else self.slot_of[r]
        n, d = r.size, self.dim
        rb = d * 4
        with get_recorder().timed("sparse_adam", bytes_read=4 * n * rb, bytes_written=3 * n * rb,
                                  flops=10 * grad.numel(), pattern="gather", row_bytes=rb,
                                  random_bytes=7 * n * rb, backend="torch"):
            self.adam.lr = lr
            self.adam.step(torch.from_numpy(slots), grad)
        w0 = self.tier.write_seconds
        with self._cv:
            self.dirty[slots] = True
            self.last_use[r] = batch
            self.freq[r] += 1
            self.cur = -1
            if self.policy == "oracle":
                self.future.pop(batch, None)
                self._refresh_next_use()
                horizon = max(self.future) if self.future else batch
                if horizon >= batch + self.L:     # the window covers L batches: BagPipe's eager eviction
                    done = r[self.next_use[r] > batch + self.L]
                    if done.size:
                        self._wb.append(self._take(done))
                        self.eager_evictions += int(done.size)
                self._cv.notify_all()
            elif self.policy in ("static", "none"):   # streamed rows go back right after their batch
                out = r if self.policy == "none" else r[self.rank[r] >= self.k_pinned]
                if out.size:
                    self.tier.write(*self._take(out))
        self.update_seconds += time.perf_counter() - t0
        wb_s = self.tier.write_seconds - w0 if self.policy != "oracle" else 0.0
        self._record_writeback(wb_s, "optimizer")

    def _record_writeback(self, seconds: float, phase: str) -> None:
        nw = self.tier.bytes_written - self.sync_bytes_written - self._rec_written
        if nw <= 0 and seconds <= 0:
            return
        self._rec_written += nw
        # the oracle writes back on its I/O thread: bytes count, the step does not wait (ns = 0)
        get_recorder().record("row_writeback", int(seconds * 1e9), bytes_read=0, bytes_written=nw,
                              pattern="scatter", row_bytes=self.tier.stride, random_bytes=nw, phase=phase,
                              backend=self.tier.io_mode)

    def _load_sync(self, r: np.ndarray, batch: int) -> None:
        """Demand policies: make ``r`` resident now, evicting (with write-back) on the training thread."""
        dropped = None
        if self.policy == "static":
            # largest k <= current with k + |batch rows ranked >= k| <= capacity (pinning shrinks, never grows)
            rk = np.sort(self.rank[r])
            k = self.k_pinned
            while k > 0 and k + int(r.size - np.searchsorted(rk, k)) > self.capacity:
                k = max(0, min(k - 1, self.capacity - int(r.size - np.searchsorted(rk, k))))
            if k < self.k_pinned:
                self.k_pinned = k
                res = self.row_in[self.row_in >= 0]
                drop = res[(self.rank[res] >= k) & (self.inbatch[res] != batch)]
                if drop.size:
                    dropped = self._take(drop)
        miss = r[self.slot_of[r] < 0]
        short = miss.size - self._n_free()
        out = [dropped] if dropped is not None else []
        if short > 0:
            res = self.row_in[self.row_in >= 0]
            cand = res[self.inbatch[res] != batch]
            if self.policy == "static":
                cand = cand[self.rank[cand] >= self.k_pinned]
            victims = self._victim_order(cand)[:short]
            out.append(self._take(victims))
        if miss.size or out:
            # the victims' write-back and the misses' reads go to the device together
            slots = self._place(miss)
            wrows, wdata = _concat_writes(out)
            self.tier.exchange(wrows, wdata, miss, into=(self.buf, slots))
            self.ready[slots] = True

    # -- the oracle's I/O thread ------------------------------------------------------------------
    def _raise_io_error(self) -> None:
        if self._io_error is not None:
            err, self._io_error = self._io_error, None
            raise err

    def _plan(self):
        """Next I/O job (under the lock): pending write-backs and the rows to read for the earliest
        batches in the window that miss some, up to :data:`JOB_READ_ROWS` rows (more rows in one
        job: more requests in flight and more reads merged)."""
        wb, self._wb = self._wb, []
        base = self.cur if self.cur >= 0 else self.expected
        reads, slots, n = [], [], 0
        for j in sorted(j for j in self.future if base <= j <= base + self.L):
            rows = self.future[j]
            missing = rows[self.slot_of[rows] < 0]
            if missing.size == 0:
                continue
            short = missing.size - self._n_free()
            if short > 0 and reads:
                break            # evicting for a later batch now would pick worse victims than later
            if short > 0:
                res = self.row_in[self.row_in >= 0]
                # rows needed up to batch j (the current batch's rows are pinned at next_use = cur) stay
                ok = self.ready[self.slot_of[res]] & (self.next_use[res] > j)
                victims = self._oracle_victims(res[ok], short)
                if victims.size:
                    wb.append(self._take(victims))
            take = min(missing.size, self._n_free())
            if take:
                reads.append(missing[:take])
                slots.append(self._place(missing[:take]))
                n += take
            if take < missing.size or n >= JOB_READ_ROWS:
                break            # blocked until training frees rows, or the job is large enough
        if reads:
            return wb, np.concatenate(reads), np.concatenate(slots)
        return (wb, None, None) if wb else None

    def _io_loop(self) -> None:
        while True:
            with self._cv:
                job = None
                while not self._closing:
                    job = self._plan()
                    if job is not None:
                        break
                    self._cv.wait()
                if job is None:
                    return
                self._io_busy = True
            wb, rows, slots = job
            t0 = time.perf_counter()
            try:
                # write-backs and reads in flight together (a row in both is read as written), the
                # rows read land in their cache slots
                wrows, wdata = _concat_writes(wb)
                self.tier.exchange(wrows, wdata, rows, into=(self.buf, slots) if rows is not None else None)
            except BaseException as e:   # handed to the training thread
                with self._cv:
                    self._io_error = e
                    self._io_busy = False
                    self._closing = True
                    self._cv.notify_all()
                return
            with self._cv:
                if rows is not None:
                    self.ready[slots] = True
                self._io_busy = False
                self.io_jobs += 1
                self.io_busy_seconds += time.perf_counter() - t0
                self._cv.notify_all()

    def _drain(self) -> None:
        """Wait until the I/O thread has nothing in flight and no write-back pending (lock held)."""
        while self._io is not None and self._io.is_alive() and (self._io_busy or self._wb):
            self._cv.wait(0.5)
        self._raise_io_error()

    # -- epoch end, statistics -----------------------------------------------------------------------
    def sync(self, keep_future: bool = False) -> None:
        """Write every dirty cached row back and copy the slow-tier embeddings into ``table``.

        ``keep_future``: the sampler runs on into the next epoch (its batches already in the
        window will be trained), so the oracle keeps them and may prefetch them while the
        caller evaluates; otherwise the epoch's sampler is closed and what it had produced
        ahead is forgotten."""
        t0 = time.perf_counter()
        with self._cv:
            self._drain()
            if not keep_future:
                # rows the closed sampler had produced ahead will never be trained
                self.future.clear()
                if self._epoch_start is not None:     # every epoch has as many steps as the first
                    self._epoch_len = self._epoch_len or (self.expected - self._epoch_start)
                    self._epoch_start = None
            self._refresh_next_use()
            r0, w0 = self.tier.bytes_read, self.tier.bytes_written
            slots = np.flatnonzero((self.row_in >= 0) & self.dirty & self.ready)
            if slots.size:
                self.tier.write(self.row_in[slots], self.buf[slots])
                self.dirty[slots] = False
            if self.table is not None:
                allrows = self.tier.read_all()
                with torch.no_grad():
                    self.table.copy_(torch.from_numpy(allrows[:, :self.dim]))
            self.sync_bytes_read += self.tier.bytes_read - r0
            self.sync_bytes_written += self.tier.bytes_written - w0
        self.sync_seconds += time.perf_counter() - t0

    def stats(self) -> dict:
        """Measured counters: rows (hits, misses, prefetched, evictions), bytes moved to/from the
        slow tier by training (sync's excluded, reported apart), seconds (fetch, stall = time the
        training thread spent on or waiting for slow-tier I/O), and how the tier was set up."""
        acc = self.hits + self.misses
        t = self.tier
        return {
            "kind": Provenance.MEASURED, "policy": self.policy, "capacity_rows": self.capacity,
            "capacity_pct": 100.0 * self.capacity / t.n_rows, "lookahead": self.L if self.policy == "oracle" else None,
            "mean_window_batches": self.window_sum / max(self.fetches, 1) if self.policy == "oracle" else None,
            "batches": self.fetches, "accesses": acc, "hits": self.hits, "misses": self.misses,
            "hit_rate": self.hits / acc if acc else float("nan"),
            "rows_read": self.rows_read, "prefetch_wasted_rows": self.wasted,
            "prefetched_rows": self.prefetched, "demand_rows": self.demand, "evictions": self.evictions,
            "eager_evictions": self.eager_evictions, "peak_occupancy_rows": self.peak_occupancy,
            "max_batch_rows": self.max_batch_rows,
            "pinned_rows": self.k_pinned if self.policy == "static" else None,
            "fetch_seconds": self.fetch_seconds, "stall_seconds": self.stall_seconds,
            "update_seconds": self.update_seconds,
            "io_jobs": self.io_jobs if self.policy == "oracle" else None,
            "io_thread_busy_seconds": self.io_busy_seconds if self.policy == "oracle" else None,
            "bytes_read": t.bytes_read - self.sync_bytes_read,
            "bytes_written": t.bytes_written - self.sync_bytes_written,
            "sync_bytes_read": self.sync_bytes_read, "sync_bytes_written": self.sync_bytes_written,
            "sync_seconds": self.sync_seconds,
            "io_read_seconds": t.read_seconds, "io_write_seconds": t.write_seconds,
            "io_mode": t.io_mode, "io_engine": t.io_engine, "io_depth": t.io_depth, "io_threads": t.io_threads,
            "read_calls": t.read_calls, "write_calls": t.write_calls,
            "device_bytes_read": t.device_bytes_read, "record_bytes": t.stride,
            "record_payload_bytes": t.row_bytes, **self.info,
        }

    def close(self) -> None:
        """Stop the I/O thread and close the slow-tier file (its data is not written back)."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        if self._io is not None:
            self._io.join(timeout=30)
        self.tier.close()


def _prefer_runs(rows: np.ndarray, k: int) -> np.ndarray:
    """``k`` of ``rows`` (distinct ids, in preference order), taking whole runs of consecutive ids
    first, longest first; ties keep the given order."""
    if k >= rows.size:
        return rows
    pref = np.arange(rows.size)
    srt = np.argsort(rows, kind="stable")
    ids = rows[srt]
    run = np.concatenate([[0], np.cumsum(np.diff(ids) != 1)])
    length = np.bincount(run)[run]
    first_pref = np.minimum.reduceat(pref[srt], np.flatnonzero(np.diff(np.concatenate([[-1], run])) != 0))[run]
    pick = np.lexsort((ids, first_pref, -length))[:k]
    return ids[pick]


def _concat_writes(parts: list) -> tuple:
    """One (rows, records) pair from a list of :meth:`CachedRows._take` results."""
    parts = [p for p in parts if p[0].size]
    if not parts:
        return None, None
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _slow_tier_dir(config) -> tuple:
    where = place_of(config, "embeddings")
    if where.is_file:
        d = where.directory
        if not os.path.isdir(d):
            raise ConfigError("placement", f"embeddings: directory {d!r} of the slow tier does not exist")
        return d, f"file:{d} (placement embeddings)"
    d = tempfile.gettempdir()
    return d, f"{d} ($TMPDIR; no file: placement for embeddings given)"


def make_cached_rows(config, model, degrees: Optional[np.ndarray], policy: Optional[str] = None,
                     io_threads: int = IO_THREADS) -> CachedRows:
    """The cached row store for ``config`` (``cache_policy``, ``cache_size``, ``lookahead``).

    Writes the model's embedding table with zero Adam moments to a new slow-tier
    file (in the ``file:DIR`` placement of ``embeddings``, else ``$TMPDIR``),
    unlinked at once so it disappears however the run ends. ``policy``
    overrides ``config.cache_policy`` (``"none"`` = a store that reads every
    row every batch; benchmarks use it). ``degrees``: interactions per node
    (users, then items) of the training graph, one per table row
    (:attr:`~gnnrec_lab.graph.bipartite.BipartiteGraph.degree`); the static policy pins
    the highest; other policies ignore it (None is fine).
    """
    policy = policy or config.cache_policy
    if policy not in TIER_CACHE_POLICIES:
        raise ConfigError("cache_policy", f"got {policy!r}, allowed: {', '.join(TIER_CACHE_POLICIES)}")
    emb = model.embedding.data
    n, d = emb.shape
    try:
        capacity = parse_capacity(config.cache_size, n)
    except UserError as e:
        raise ConfigError("cache_size", str(e)) from None
    if capacity < 1:
        raise ConfigError("cache_size", f"{config.cache_size} of {n:,} rows is less than one row")
    if capacity > n:  # the cache buffer is allocated at its full size: refuse before allocating
        raise ConfigError("cache_size", f"{capacity:,} rows is more than the embedding table's {n:,} rows; "
                                        f"use at most {n} or a share such as 100%")
    directory, where_note = _slow_tier_dir(config)
    fd, path = tempfile.mkstemp(prefix="gnnrec-slow-tier-", suffix=".bin", dir=directory)
    os.close(fd)
    try:
        init = np.zeros((n, 3 * d), dtype=np.float32)
        init[:, :d] = emb.detach().cpu().numpy()
        tier = SlowTier.create(path, init, io_threads=io_threads)
        del init
    finally:
        os.unlink(path)
    info = {"slow_tier": where_note, "dataset_rows": n}
    return CachedRows(tier, capacity, lr=config.effective_lr, policy=policy, lookahead=config.lookahead,
                      scores=degrees, table=emb, info=info)  # the run's sampler stops at the epoch cap itself
