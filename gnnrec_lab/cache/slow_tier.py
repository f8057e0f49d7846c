"""The slow tier: a file of embedding rows read and written around the page cache.

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
"""
from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numba
import numpy as np

from gnnrec_lab.cache.aio import AIO_DEPTH, IOCB_PREAD, IOCB_PWRITE, Aio, stage_rows, unstage_rows
from gnnrec_lab.util.errors import UserError

ALIGN = 512
MAX_IO_BYTES = 1 << 20     # one system call moves at most this much
IO_THREADS = 8             # threads engine: system calls in flight; 8 gave ~4.5x the 1-deep rate on this VM's disk
READ_MERGE_BYTES = 16384   # a read may span unwanted rows up to this many bytes: one call instead of two
                           # (this VM's disk: a 16 KiB read costs about a 1 KiB one; 2,885 random rows of
                           # 70k read in 21 ms instead of 32)
STAGE_MAX_BYTES = 64 << 20  # staging buffer per round of system calls


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
    def _aio(self) -> Aio:
        a = getattr(self._local, "aio", None)
        if a is None or not a.ctx.value:
            a = Aio(AIO_DEPTH)
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
                if op & 0xFFFF == IOCB_PREAD:
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
            if np.any(cb[:, 2] & 0xFFFF == IOCB_PWRITE):
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
                    stage_rows(stage, wpos, wsel, wv)
                self._run(cb, stage)
                if rpos.size:
                    unstage_rows(stage, rpos, rdest, out)
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
