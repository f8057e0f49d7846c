"""Linux native AIO (``io_setup``/``io_submit``/``io_getevents``) for the slow tier, without the GIL.

:class:`Aio` is one AIO context: it submits a table of ``struct iocb`` rows, keeps up to
:data:`AIO_DEPTH` in flight from one thread, and reaps them, in numba code that holds no
GIL (the libc ``syscall`` is called through fixed integer prototypes). :func:`stage_rows` /
:func:`unstage_rows` copy rows into and out of the page-aligned staging area the calls
read and write; :class:`~gnnrec_lab.cache.slow_tier.SlowTier` uses them for both its
engines. Where AIO is not available (not Linux/glibc, or no ``O_DIRECT``) :class:`Aio`
raises ``OSError`` and the slow tier falls back to a thread pool.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys

import numba
import numpy as np

AIO_DEPTH = 2048           # aio engine: requests in flight per context (a batch's calls at once; this VM's disk:
                           # 128-512 ~2x the rate of 8 threads, 2048 a few % faster epochs than 512)

# -- system calls: Linux native AIO (io_submit) where available --

# io_setup, io_destroy, io_getevents, io_submit
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
IOCB_PREAD, IOCB_PWRITE = 0, 1    # iocb aio_lio_opcode
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
            stage_rows(stage, wpos, wsel, wv)
        base = stage.ctypes.data
        for i in range(cb.shape[0]):
            cb[i, 3] += base
        _aio_loop(nr_submit, nr_getevents, ctx, cb, depth, events, err, ebuf)
        if err[0] == 0 and rpos.size:
            unstage_rows(stage, rpos, rdest, out)


class Aio:
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
def stage_rows(stage, pos, order, vals):
    """stage[pos[i]] = [vals[order[i]] | zero padding]"""
    w = vals.shape[1]
    for i in range(pos.size):
        dst, src = stage[pos[i]], vals[order[i]]
        for c in range(w):
            dst[c] = src[c]
        for c in range(w, dst.size):
            dst[c] = 0.0


@numba.njit(cache=True)   # short: keeping the GIL beats waiting to get it back
def unstage_rows(stage, pos, order, out):
    """out[order[i]] = stage[pos[i], :width]"""
    w = out.shape[1]
    for i in range(pos.size):
        dst, src = out[order[i]], stage[pos[i]]
        for c in range(w):
            dst[c] = src[c]
