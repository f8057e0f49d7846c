"""The one recorder every timed operation reports to.

A kernel (SpMM, SDDMM, gather, GEMM, optimizer step, ...) calls
:meth:`Recorder.record` with its wall time and the bytes and flops it must
move/do, computed from shapes, nnz and dtypes. The training loop sets the
current ``phase`` and ``step``. Later layers (the store, the tier model, the
breakdown tables) read :attr:`Recorder.records` or :meth:`Recorder.frame`.

Recording costs one small tuple append per call; when ``enabled`` is False
nothing is appended (the benchmark compares the two).

While a ``torch.profiler`` (or ``torch.autograd.profiler``) session is active, every recorded
piece of work also runs inside ``torch.profiler.record_function("gnnrec_lab.<kernel>.<phase>")``
(:func:`profiler_range`), so a trace opened in TensorBoard or Perfetto carries the lab's kernel
names; without a profiler that costs one flag check.
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, fields
from typing import Iterator, Optional

PHASES = ("forward", "backward", "optimizer", "loss", "sampling", "evaluation", "other")
# Access patterns the tier model understands.
PATTERNS = ("stream", "gather", "scatter", "compute")


@dataclass(frozen=True)
class KernelRecord:
    name: str            # e.g. "spmm", "sddmm_dot", "gather", "gemm", "adam"
    phase: str           # one of PHASES
    layer: int           # model layer, -1 when not layer-specific
    step: int            # training step (-1 outside steps)
    ns: int              # wall time in nanoseconds (measured)
    bytes_read: int      # bytes an ideal kernel must read
    bytes_written: int   # bytes an ideal kernel must write
    flops: int           # floating point operations
    pattern: str         # dominant access pattern, one of PATTERNS
    row_bytes: int       # width of one randomly accessed row (gather/scatter), 0 for streams
    random_bytes: int    # of bytes_read+bytes_written, how many are random row accesses
    backend: str         # kernel backend that ran it


RECORD_FIELDS = tuple(f.name for f in fields(KernelRecord))


class Recorder:
    """Collects :class:`KernelRecord` s for one run."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.phase = "other"
        self.step = -1
        self.records: list[KernelRecord] = []
        self.jit_seconds = 0.0  # first-call compilation time, never counted as kernel time

    # -- context -------------------------------------------------------
    @contextlib.contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        prev, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = prev

    # -- recording -----------------------------------------------------
    def record(self, name: str, ns: int, *, bytes_read: int = 0, bytes_written: int = 0,
               flops: int = 0, pattern: str = "stream", row_bytes: int = 0,
               random_bytes: int = 0, layer: int = -1, phase: Optional[str] = None,
               backend: str = "torch") -> None:
        if not self.enabled:
            return
        self.records.append(KernelRecord(
            name, phase or self.phase, int(layer), self.step, int(ns), int(bytes_read),
            int(bytes_written), int(flops), pattern, int(row_bytes), int(random_bytes), backend))

    @contextlib.contextmanager
    def timed(self, name: str, **kw) -> Iterator[None]:
        """Time a block and record it under ``name`` (kw as in :meth:`record`); compilation
        added to ``jit_seconds`` inside the block is not counted."""
        jit0 = self.jit_seconds
        t0 = time.perf_counter_ns()
        try:
            with profiler_range(name, kw.get("phase") or self.phase):
                yield
        finally:
            self.record(name, self.ns_since(t0, jit0), **kw)

    def ns_since(self, t0_ns: int, jit0: float) -> int:
        """Nanoseconds since ``perf_counter_ns()`` read ``t0_ns``, less the compilation time
        added to ``jit_seconds`` since it read ``jit0`` (JIT is never kernel time)."""
        ns = time.perf_counter_ns() - t0_ns
        jit = self.jit_seconds - jit0
        return max(0, ns - int(jit * 1e9)) if jit else ns

    def clear(self) -> None:
        self.records.clear()

    def take(self) -> list[KernelRecord]:
        """Return and forget the records collected so far (used per step by the store)."""
        out, self.records = self.records, []
        return out

    def frame(self, records=None):
        """Records as a pandas DataFrame (one row per call)."""
        import pandas as pd
        recs = self.records if records is None else records
        return pd.DataFrame([tuple(r.__dict__.values()) if hasattr(r, "__dict__") else tuple(r)
                             for r in recs], columns=list(RECORD_FIELDS))


_NO_RANGE = contextlib.nullcontext()


def profiler_active() -> bool:
    """Whether a torch profiler session is recording in this process (False when torch is not
    imported: then none can be)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.autograd._profiler_enabled()


def profiler_range(name: str, phase: str):
    """``torch.profiler.record_function("gnnrec_lab.<name>.<phase>")`` while a profiler is active,
    else a shared no-op context (the recording overhead without a profiler stays one flag check)."""
    if not profiler_active():
        return _NO_RANGE
    import torch
    return torch.profiler.record_function(f"gnnrec_lab.{name}.{phase}")


def store_key(r) -> tuple:
    """How the run store groups one step's kernel records: ``(name, phase, layer, pattern)``
    (``row_bytes`` kept as the widest). The tier model's inputs use the same grouping everywhere."""
    return (r.name, r.phase, int(r.layer), r.pattern)


def sum_records(records, key, into: Optional[dict] = None) -> dict:
    """Sum kernel records by ``key(record)``: ``{key: [calls, ns, bytes_read, bytes_written, flops,
    random_bytes, max row_bytes]}``. Pass ``into`` to keep adding to running totals."""
    agg = {} if into is None else into
    for r in records:
        k = key(r)
        a = agg.get(k)
        if a is None:
            agg[k] = [1, r.ns, r.bytes_read, r.bytes_written, r.flops, r.random_bytes, r.row_bytes]
        else:
            a[0] += 1
            a[1] += r.ns
            a[2] += r.bytes_read
            a[3] += r.bytes_written
            a[4] += r.flops
            a[5] += r.random_bytes
            a[6] = max(a[6], r.row_bytes)
    return agg


_NULL = Recorder(enabled=False)
_current: Recorder = _NULL


def get_recorder() -> Recorder:
    """The recorder kernels report to (a disabled one when none is active)."""
    return _current


@contextlib.contextmanager
def use_recorder(recorder: Recorder) -> Iterator[Recorder]:
    global _current
    prev, _current = _current, recorder
    try:
        yield recorder
    finally:
        _current = prev
