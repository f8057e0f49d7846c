"""A real cached tier: embedding rows (+ Adam moments) in a file, a DRAM cache in front.

:class:`SlowTier` keeps a ``(n_rows, width)`` float32 table in a file and reads
and writes rows with ``O_DIRECT`` where the file system allows it, so every
read reaches the device instead of the page cache; where it does not
(e.g. tmpfs), it falls back to buffered I/O followed by
``posix_fadvise(DONTNEED)`` and says so in :attr:`SlowTier.io_mode`. Each row
occupies a 512-byte-aligned stride (the ``O_DIRECT`` unit). A request is sorted
and cut into system calls (runs of consecutive rows, and reads that span small
gaps); with ``O_DIRECT`` they go through Linux native AIO, thousands in flight
from one thread, submitted and reaped by numba code that holds no GIL
(``io_engine = "aio"``); otherwise a pool of ``io_threads`` threads issues them.
:meth:`SlowTier.exchange` puts writes and reads in flight together.

:class:`CachedRows` is the row store sampled-mode training uses when
``cache_policy`` is not ``none`` (see :mod:`gnnrec_lab.rows`): one record per
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

Updates run :class:`~gnnrec_lab.optim.SparseRowAdam` on the cached rows (same
tensors shapes, same operations, one global step count), so training is
bit-identical to the DRAM store.

:class:`OracleCachedTable` is the trace-driven (offline) form of the oracle
cache used to check the simulator against real I/O.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numba
import numpy as np
import torch

from ..errors import ConfigError, UserError
from ..optim import SparseRowAdam
from ..recorder import get_recorder
from .simulate import next_use as _next_use
from .simulate import parse_capacity
from .traces import Trace

ALIGN = 512
MAX_IO_BYTES = 1 << 20     # one system call moves at most this much
IO_THREADS = 8             # threads engine: system calls in flight; 8 gave ~4.5x the 1-deep rate on this VM's disk
AIO_DEPTH = 2048           # aio engine: requests in flight per context (a batch's calls at once; this VM's disk:
                           # 128-512 ~2x the rate of 8 threads, 2048 a few % faster epochs than 512)
READ_MERGE_BYTES = 16384   # a read may span unwanted rows up to this many bytes: one call instead of two
                           # (this VM's disk: a 16 KiB read costs about a 1 KiB one; 2,885 random rows of
                           # 70k read in 21 ms instead of 32)
JOB_READ_ROWS = 4096       # oracle: rows one prefetch job reads at most (more batches per job when they fit)
STAGE_MAX_BYTES = 64 << 20  # staging buffer per round of system calls
INF = np.int64(2**62)      # "no known next use"
CACHED_POLICIES = ("none", "lru", "lfu", "static", "oracle")


# -- system calls: Linux native AIO (io_submit) where available, else a thread pool of pread/pwrite --

# io_setup, io_destroy, io_getevents, io_submit
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_PREAD, _IOCB_PWRITE = 0, 1
_EAGAIN, _EINTR = errno.EAGAIN, errno.EINTR
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _syscall = _libc.syscall
    _syscall.restype = ctypes.c_long
    # the same libc functions with fixed integer prototypes, callable from numba code (no GIL):
    # syscall(2) (six integer arguments), __errno_location, memcpy (to read errno)
    _L = ctypes.c_long
    _addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value   # noqa: E731
    _sys6 = ctypes.CFUNCTYPE(_L, _L, _L, _L, _L, _L, _L)(_addr(_libc.syscall))
    _errno_location = ctypes.CFUNCTYPE(_L)(_addr(_libc.__errno_location))
    _memcpy = ctypes.CFUNCTYPE(_L, _L, _L, _L)(_addr(_libc.memcpy))
except (OSError, AttributeError):   # pragma: no cover - not a glibc platform
    _syscall = None


if _syscall is not None:
    @numba.njit(nogil=True)   # not cached: it calls libc at addresses of this process
    def _errno(buf):
        _memcpy(buf.ctypes.data, _errno_location(), 4)
        return buf[0]

    @numba.njit(nogil=True)
    def _aio_loop(nr_submit, nr_getevents, ctx, cb, depth, events, err, ebuf):
        """Submit the iocbs ``cb`` (k x 8 int64) keeping up to ``depth`` in flight and reap them all,
        without the GIL. ``err`` (int64[3]) gets the first failure: (1 io_submit / 2 io_getevents,
        errno, 0) or (3, result, iocb index) for a failed or short transfer. Returns iocbs reaped."""
        k = cb.shape[0]
        ptrs = np.empty(k, np.int64)
        base = cb.ctypes.data
        for i in range(k):
            cb[i, 0] = i                         # aio_data: the iocb's index, to check its result
            ptrs[i] = base + 64 * i
        pbase = ptrs.ctypes.data
        evbase = events.ctypes.data
        sub = 0
        done = 0
        failed = False
        while done < sub or (sub < k and not failed):
            if sub < k and not failed and sub - done < depth:
                n = min(depth - (sub - done), k - sub)
                r = _sys6(nr_submit, ctx, n, pbase + 8 * sub, 0, 0)
                if r < 0:
                    e = _errno(ebuf)
                    if not ((e == _EAGAIN and sub > done) or e == _EINTR):
                        failed = True
                        if err[0] == 0:
                            err[0] = 1
                            err[1] = e
                    r = 0
                sub += r
            if done < sub:
                # all submitted (or giving up): wait for everything; else refill once a quarter completes
                want = sub - done if (sub == k or failed) else min(sub - done, max(1, depth // 4))
                r = _sys6(nr_getevents, ctx, want, depth, evbase, 0)
                if r < 0:
                    e = _errno(ebuf)
                    if e == _EINTR:
                        continue
                    err[0] = 2
                    err[1] = e
                    return done
                for i in range(r):
                    idx = events[i, 0]
                    if events[i, 2] != cb[idx, 4] and err[0] == 0:
                        err[0] = 3
                        err[1] = events[i, 2]
                        err[2] = idx
                done += r
        return done


if _syscall is not None:
    @numba.njit(nogil=True)
    def _aio_round(stage, cb, wpos, wsel, wv, rpos, rdest, out, nr_submit, nr_getevents, ctx, depth,
                   events, err, ebuf):
        """One round of an exchange without the GIL: stage the writes, run every call, move the
        rows read to ``out[rdest]``."""
        if wpos.size:
            _stage_rows(stage, wpos, wsel, wv)
        base = stage.ctypes.data
        for i in range(cb.shape[0]):
            cb[i, 3] += base
        _aio_loop(nr_submit, nr_getevents, ctx, cb, depth, events, err, ebuf)
        if err[0] == 0 and rpos.size:
            _unstage_rows(stage, rpos, rdest, out)


class _Aio:
    """One Linux native AIO context (``io_setup(2)``). :meth:`run_round` submits a table of iocbs (one
    int64[8] row each: the kernel's ``struct iocb``), keeps up to ``depth`` in flight, and waits
    for all, in a numba loop that holds no GIL (a thread that holds it would otherwise delay
    every refill of the queue: 3-5x slower jobs measured beside a busy Python thread)."""

    def __init__(self, depth: int):
        nr = _AIO_SYSCALLS.get(platform.machine())
        if _syscall is None or nr is None or not sys.platform.startswith("linux"):
            raise OSError(errno.ENOSYS, "Linux native AIO is not available on this platform")
        self._setup, self._destroy, self._getevents, self._submit = nr
        self.depth = int(depth)
        self.ctx = ctypes.c_ulong(0)
        if _syscall(ctypes.c_long(self._setup), ctypes.c_long(self.depth), ctypes.byref(self.ctx)) < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"io_setup: {os.strerror(e)}")
        self.events = np.zeros((self.depth, 4), dtype=np.int64)   # struct io_event: data, obj, res, res2
        self._err = np.zeros(3, dtype=np.int64)
        self._ebuf = np.zeros(1, dtype=np.int32)

    def close(self) -> None:
        if self.ctx.value:
            _syscall(ctypes.c_long(self._destroy), self.ctx)   # waits for anything still in flight
            self.ctx = ctypes.c_ulong(0)

    def run_round(self, stage, cb, wpos, wsel, wv, rpos, rdest, out) -> None:
        """:func:`_aio_round` on this context (stage, submit, reap, unstage; no GIL)."""
        self._err[:] = 0
        _aio_round(stage, cb, wpos, wsel, wv, rpos, rdest, out, self._submit, self._getevents, self.ctx.value,
                   self.depth, self.events, self._err, self._ebuf)
        self._check(cb)

    def _check(self, cb: np.ndarray) -> None:
        kind, code, idx = (int(x) for x in self._err)
        if kind == 2:
            self.close()          # io_destroy waits for the requests still in flight
            raise OSError(code, f"io_getevents: {os.strerror(code)}")
        if kind == 1:
            raise OSError(code, f"io_submit: {os.strerror(code)}")
        if kind == 3:
            if code < 0:
                raise OSError(-code, os.strerror(-code))
            raise OSError(errno.EIO, f"short transfer: {code} of {int(cb[idx, 4])} bytes")


@numba.njit(cache=True)   # short: keeping the GIL beats waiting to get it back
def _plan_pieces(srt, gap, cap):
    """Greedy system calls over sorted distinct rows ``srt``: a call extends to the next row while at
    most ``gap`` unwanted rows lie between and it spans at most ``cap`` rows. Returns each call's
    first row and span (rows) and each row's position in the calls' concatenated staging area."""
    n = srt.size
    first = np.empty(max(n, 1), np.int64)
    span = np.empty(max(n, 1), np.int64)
    pos = np.empty(n, np.int64)
    if n == 0:
        return first[:0], span[:0], pos
    k, off, last = 0, 0, srt[0]
    first[0] = srt[0]
    for i in range(n):
        r = srt[i]
        if i > 0:
            if r - last - 1 <= gap and r - first[k] + 1 <= cap:
                last = r
            else:
                span[k] = last - first[k] + 1
                off += span[k]
                k += 1
                first[k] = r
                last = r
        pos[i] = off + r - first[k]
    span[k] = last - first[k] + 1
    return first[:k + 1], span[:k + 1], pos


@numba.njit(cache=True)   # short: keeping the GIL beats waiting to get it back
def _stage_rows(stage, pos, order, vals):
    """stage[pos[i]] = [vals[order[i]] | zero padding]"""
    w = vals.shape[1]
    for i in range(pos.size):
        dst, src = stage[pos[i]], vals[order[i]]
        for c in range(w):
            dst[c] = src[c]
        for c in range(w, dst.size):
            dst[c] = 0.0


@numba.njit(cache=True)   # short: keeping the GIL beats waiting to get it back
def _unstage_rows(stage, pos, order, out):
    """out[order[i]] = stage[pos[i], :width]"""
    w = out.shape[1]
    for i in range(pos.size):
        dst, src = out[order[i]], stage[pos[i]]
        for c in range(w):
            dst[c] = src[c]


@numba.njit(cache=True)
def _exchange_order(wr, rr):
    """Sort an exchange: the writes by row (``ok`` False on a repeated row), and for each row to
    read either the write that holds it (``from_w``: index into the writes, -1 = none) or its place
    among the rows read from the device (``rorder``: positions in ``rr`` sorted by row)."""
    worder = np.argsort(wr, kind="mergesort")
    wsrt = wr[worder]
    ok = True
    for i in range(1, wsrt.size):
        if wsrt[i] == wsrt[i - 1]:
            ok = False
    from_w = np.full(rr.size, -1, np.int64)
    n_disk = 0
    for i in range(rr.size):
        p = np.searchsorted(wsrt, rr[i])
        if p < wsrt.size and wsrt[p] == rr[i]:
            from_w[i] = worder[p]
        else:
            n_disk += 1
    disk = np.empty(n_disk, np.int64)
    k = 0
    for i in range(rr.size):
        if from_w[i] < 0:
            disk[k] = i
            k += 1
    rorder = disk[np.argsort(rr[disk], kind="mergesort")]
    return worder, wsrt, ok, from_w, rorder, rr[rorder]


@numba.njit(cache=True)
def _round_calls(wpart, rpart, gap, cap, fd, stride):
    """The iocbs of one round (writes of ``wpart`` then reads of ``rpart``, both sorted), with
    aio_buf relative to the staging area; and each row's staging row (reads after the writes)."""
    wf, wsp, wpos = _plan_pieces(wpart, 0, cap)
    rf, rsp, rpos = _plan_pieces(rpart, gap, cap)
    nw = 0
    for x in wsp:
        nw += x
    cb = np.zeros((wf.size + rf.size, 8), np.int64)
    off = 0
    for i in range(wf.size):
        cb[i, 2] = 1 | (fd << 32)              # IOCB_CMD_PWRITE, aio_fildes
        cb[i, 3] = off * stride                # aio_buf
        cb[i, 4] = wsp[i] * stride             # aio_nbytes
        cb[i, 5] = wf[i] * stride              # aio_offset
        off += wsp[i]
    for i in range(rf.size):
        j = wf.size + i
        cb[j, 2] = 0 | (fd << 32)              # IOCB_CMD_PREAD
        cb[j, 3] = off * stride
        cb[j, 4] = rsp[i] * stride
        cb[j, 5] = rf[i] * stride
        off += rsp[i]
    return cb, wpos, rpos + nw, wf.size, rf.size, off - nw, off


@numba.njit(cache=True)
def _copy_rows(out, dest, src, sel):
    """out[dest[i]] = src[sel[i]]"""
    for i in range(dest.size):
        out[dest[i]] = src[sel[i]]


class SlowTier:
    """A file-backed float32 row table; reads and writes bypass the page cache.

    Each row occupies a 512-byte-aligned stride (the ``O_DIRECT`` unit). A request is
    sorted and cut into system calls: runs of consecutive rows move with one call, and a
    read also spans up to ``merge_gap`` unwanted rows between two wanted ones (one 16 KiB
    read costs this disk about what a 1 KiB read does). With ``O_DIRECT`` the calls are
    submitted through Linux native AIO, up to :data:`AIO_DEPTH` in flight from one thread
    (``io_engine = "aio"``); otherwise (no ``O_DIRECT``, no AIO) ``io_threads`` threads
    issue ``preadv``/``pwritev`` (``io_engine = "threads"``). Staging copies are numba
    loops and the system calls release the GIL, so the training thread keeps running.

    ``bytes_read`` / ``bytes_written`` count the requested rows' whole strides (padding
    included), ``device_bytes_read`` also the unwanted rows merged reads spanned,
    ``read_calls`` / ``write_calls`` the system I/Os, ``read_seconds`` / ``write_seconds``
    wall time (an :meth:`exchange` splits its time by the share of calls): all measured.
    Safe to call from several threads at once (each thread has its own staging buffer and
    AIO context); the caller must not read a row while another thread writes it.
    """

    def __init__(self, path: str, n_rows: int, width: int, direct: bool = True, io_threads: int = IO_THREADS,
                 engine: str = "auto", merge_gap: Optional[int] = None):
        self.path, self.n_rows, self.width = str(path), int(n_rows), int(width)
        self.row_bytes = self.width * 4
        self.stride = -(-self.row_bytes // ALIGN) * ALIGN
        if not os.path.exists(self.path) or os.path.getsize(self.path) < self.n_rows * self.stride:
            raise UserError(f"slow tier file {self.path} is missing or smaller than {self.n_rows} rows; "
                            "create it with SlowTier.create")
        if engine not in ("auto", "aio", "threads"):
            raise ValueError(f"engine must be auto, aio or threads, got {engine!r}")
        self.io_mode = "buffered+fadvise"
        flags = os.O_RDWR
        self.fd = -1
        if direct and hasattr(os, "O_DIRECT"):
            try:
                self.fd = os.open(self.path, flags | os.O_DIRECT)
                self.io_mode = "O_DIRECT"
            except OSError:
                self.fd = -1
        if self.fd < 0:
            self.fd = os.open(self.path, flags)
        self.io_threads = max(1, int(io_threads))
        self.max_rows_per_io = max(1, MAX_IO_BYTES // self.stride)
        self.merge_gap = max(0, READ_MERGE_BYTES // self.stride - 1) if merge_gap is None else max(0, int(merge_gap))
        self._lock = threading.Lock()
        self._local = threading.local()
        self._aios: list = []
        self.io_engine, self.io_depth = "threads", self.io_threads
        if engine != "threads" and self.io_mode == "O_DIRECT":
            try:
                e64, f32 = np.zeros(0, np.int64), np.zeros((0, self.width), np.float32)
                # probe: a context for this thread; and compile the round now, not in a training step
                self._aio().run_round(np.zeros((0, self.stride // 4), np.float32), np.zeros((0, 8), np.int64),
                                      e64, e64, f32, e64, e64, f32)
                self.io_engine, self.io_depth = "aio", AIO_DEPTH
            except OSError:
                if engine == "aio":
                    raise
        elif engine == "aio":
            raise OSError(errno.EINVAL, "the aio engine needs O_DIRECT (not available for this file)")
        self._pool = ThreadPoolExecutor(self.io_threads, thread_name_prefix="gnnrec-tier-io") \
            if self.io_engine == "threads" and self.io_threads > 1 else None
        self.bytes_read = self.bytes_written = self.device_bytes_read = 0   # measured: bytes moved
        self.read_calls = self.write_calls = 0                              # measured: system I/Os
        self.read_seconds = self.write_seconds = 0.0                        # measured wall time

    @classmethod
    def create(cls, path: str, table: np.ndarray, direct: bool = True, io_threads: int = IO_THREADS,
               **kw) -> "SlowTier":
        """Write ``table`` (n_rows x width float32) to ``path`` and open it as a slow tier."""
        table = np.ascontiguousarray(table, dtype=np.float32)
        n, w = table.shape
        stride = -(-w * 4 // ALIGN) * ALIGN
        chunk = max(1, (64 << 20) // stride)     # write in 64 MiB pieces: no full padded copy in memory
        with open(path, "wb") as f:
            for s in range(0, n, chunk):
                part = table[s:s + chunk]
                padded = np.zeros((part.shape[0], stride // 4), dtype=np.float32)
                padded[:, :w] = part
                f.write(padded.tobytes())
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return cls(path, n, w, direct, io_threads, **kw)

    # -- per-thread resources -----------------------------------------------------------------
    def _aio(self) -> _Aio:
        a = getattr(self._local, "aio", None)
        if a is None or not a.ctx.value:
            a = _Aio(AIO_DEPTH)
            self._local.aio = a
            with self._lock:
                self._aios.append(a)
        return a

    def _stage(self, n_rows: int) -> np.ndarray:
        """This thread's page-aligned staging buffer as an (n_rows, stride/4) float32 array."""
        need = n_rows * self.stride
        raw = getattr(self._local, "raw", None)
        if raw is None or raw.size < need + mmap.PAGESIZE:
            raw = np.zeros(max(need, 1 << 16) * 5 // 4 + mmap.PAGESIZE, dtype=np.uint8)
            self._local.raw = raw
        off = (-raw.ctypes.data) % mmap.PAGESIZE
        return raw[off:off + need].view(np.float32).reshape(n_rows, self.stride // 4)

    # -- one round of system calls (threads engine; the aio engine runs _aio_round) ---------------
    def _run(self, cb: np.ndarray, stage: np.ndarray) -> None:
        if cb.size == 0:
            return
        mv = memoryview(stage.reshape(-1).view(np.uint8))

        def one(rows):
            for op, buf, nb, off in cb[rows][:, 2:6].tolist():
                if op & 0xFFFF == _IOCB_PREAD:
                    got = os.preadv(self.fd, [mv[buf:buf + nb]], off)
                else:
                    got = os.pwritev(self.fd, [mv[buf:buf + nb]], off)
                if got != nb:
                    raise OSError(errno.EIO, f"short transfer on {self.path}: {got} of {nb} bytes")
        k = min(self.io_threads, len(cb))
        if k <= 1 or self._pool is None:
            one(slice(None))
        else:
            list(self._pool.map(one, [slice(i, None, k) for i in range(k)]))
        if self.io_mode != "O_DIRECT":
            if np.any(cb[:, 2] & 0xFFFF == _IOCB_PWRITE):
                os.fsync(self.fd)
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    # -- the interface ------------------------------------------------------------------------
    def read(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (any order, distinct) as a (k, width) float32 array, read from the device."""
        return self.exchange(None, None, rows)

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Write ``values[k]`` to row ``rows[k]`` (distinct rows)."""
        self.exchange(rows, values, None)

    def exchange(self, wrows, values, rrows, into: Optional[tuple] = None) -> Optional[np.ndarray]:
        """Write ``values`` to rows ``wrows`` and read rows ``rrows`` with the calls of both in flight
        together; a row in both is returned from ``values`` (as if written first). Returns the
        (len(rrows), width) rows read, or None when ``rrows`` is None. With ``into=(array, index)``
        row ``rrows[k]`` goes to ``array[index[k]]`` instead (``array``: C-contiguous float32,
        ``width`` columns) and ``array`` is returned. The planning is numba code that keeps the GIL
        (short); the system calls and staging copies run in one numba call without it."""
        t0 = time.perf_counter()
        out = None
        wr = np.empty(0, np.int64) if wrows is None else np.ascontiguousarray(wrows, dtype=np.int64).reshape(-1)
        wv = np.empty((0, self.width), np.float32) if values is None else \
            np.ascontiguousarray(values, dtype=np.float32).reshape(wr.size, self.width)
        rr = np.empty(0, np.int64) if rrows is None else np.ascontiguousarray(rrows, dtype=np.int64).reshape(-1)
        dest = np.arange(rr.size)
        if rrows is not None:
            if into is None:
                out = np.empty((rr.size, self.width), dtype=np.float32)
            else:
                out, dest = into
                dest = np.ascontiguousarray(dest, dtype=np.int64).reshape(-1)
                if out.dtype != np.float32 or out.ndim != 2 or out.shape[1] != self.width \
                        or not out.flags.c_contiguous or dest.size != rr.size:
                    raise ValueError("exchange: into must be a C-contiguous float32 (n, width) array and "
                                     "one index per row read")
        worder, wsrt, distinct, from_w, rorder, rsrt = _exchange_order(wr, rr)
        if not distinct:
            raise ValueError("write: rows must be distinct")
        if rsrt.size < rr.size:                            # rows being written are returned as written
            hit = np.flatnonzero(from_w >= 0)
            _copy_rows(out, dest[hit], wv, from_w[hit])
        rdest_all = dest[rorder]
        # cut into rounds of at most STAGE_MAX_BYTES of staging: writes first, then reads
        cap_rows = max(self.max_rows_per_io, STAGE_MAX_BYTES // self.stride)
        wstep = cap_rows
        rstep = max(1, cap_rows // (self.merge_gap + 1))
        n_rounds = max(-(-wsrt.size // wstep), -(-rsrt.size // rstep))
        wcalls = rcalls = dev_read = 0
        dummy = np.zeros((0, self.width), np.float32)
        for i in range(n_rounds):
            ws = slice(i * wstep, (i + 1) * wstep)
            rs = slice(i * rstep, (i + 1) * rstep)
            cb, wpos, rpos, nwc, nrc, nr, total = _round_calls(wsrt[ws], rsrt[rs], self.merge_gap,
                                                               self.max_rows_per_io, self.fd, self.stride)
            stage = self._stage(total)
            wsel, rdest = worder[ws], rdest_all[rs]
            if self.io_engine == "aio":
                self._aio().run_round(stage, cb, wpos, wsel, wv, rpos, rdest, out if out is not None else dummy)
            else:
                if wpos.size:
                    _stage_rows(stage, wpos, wsel, wv)
                self._run(cb, stage)
                if rpos.size:
                    _unstage_rows(stage, rpos, rdest, out)
            wcalls += nwc
            rcalls += nrc
            dev_read += nr
        dt = time.perf_counter() - t0
        share = wcalls / max(wcalls + rcalls, 1)
        with self._lock:
            self.bytes_written += int(wr.size) * self.stride
            self.bytes_read += int(rsrt.size) * self.stride
            self.device_bytes_read += int(dev_read) * self.stride
            self.write_calls += int(wcalls)
            self.read_calls += int(rcalls)
            self.write_seconds += dt * share
            self.read_seconds += dt * (1 - share)
        return out

    def read_all(self) -> np.ndarray:
        return self.read(np.arange(self.n_rows))

    def close(self) -> None:
        with self._lock:
            for a in self._aios:          # io_destroy waits for requests in flight
                a.close()
            self._aios = []
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


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


# -- the row store sampled-mode training uses ------------------------------------------------------

class CachedRows:
    """Row store (see :mod:`gnnrec_lab.rows`) over a :class:`SlowTier` of ``[embedding | m | v]`` records.

    ``capacity`` rows of DRAM cache; ``policy`` one of :data:`CACHED_POLICIES`;
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
        if policy not in CACHED_POLICIES:
            raise ConfigError("cache_policy", f"got {policy!r}, allowed: {', '.join(CACHED_POLICIES)}")
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
        rec = get_recorder()
        nread = self.tier.bytes_read - self.sync_bytes_read - self._rec_read
        self._rec_read += nread
        rec.record("row_fetch", int((dt - wb_s) * 1e9), bytes_read=nread, bytes_written=x.numel() * 4,
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
            "kind": "measured", "policy": self.policy, "capacity_rows": self.capacity,
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
    where = config.placement.get("embeddings", "dram")
    if where.startswith("file:"):
        d = where[5:]
        if not os.path.isdir(d):
            raise ConfigError("placement", f"embeddings: directory {d!r} of the slow tier does not exist")
        return d, f"file:{d} (placement embeddings)"
    d = tempfile.gettempdir()
    return d, f"{d} ($TMPDIR; no file: placement for embeddings given)"


def _degree_scores(config, n_rows: int) -> np.ndarray:
    """Interaction count of every node (users, then items) in the training split."""
    from ..data import load
    ds = load(config.dataset, seed=config.seed, data_dir=config.data_dir)
    tr = np.asarray(ds.train)
    deg = np.concatenate([np.bincount(tr[:, 0], minlength=ds.n_users),
                          np.bincount(tr[:, 1], minlength=ds.n_items)]).astype(np.float64)
    if deg.size != n_rows:
        raise UserError(f"dataset {config.dataset!r} has {deg.size} nodes, the embedding table {n_rows} rows")
    return deg


def make_cached_rows(config, model, policy: Optional[str] = None, io_threads: int = IO_THREADS,
                     scores: Optional[np.ndarray] = None) -> CachedRows:
    """The cached row store for ``config`` (``cache_policy``, ``cache_size``, ``lookahead``).

    Writes the model's embedding table with zero Adam moments to a new slow-tier
    file (in the ``file:DIR`` placement of ``embeddings``, else ``$TMPDIR``),
    unlinked at once so it disappears however the run ends. ``policy``
    overrides ``config.cache_policy`` (``"none"`` = a store that reads every
    row every batch; benchmarks use it). ``scores`` overrides the static
    policy's node degrees.
    """
    policy = policy or config.cache_policy
    if policy not in CACHED_POLICIES:
        raise ConfigError("cache_policy", f"got {policy!r}, allowed: {', '.join(CACHED_POLICIES)}")
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
    if policy == "static" and scores is None:
        scores = _degree_scores(config, n)
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
                      scores=scores, table=emb, info=info)  # the run's sampler stops at the epoch cap itself
