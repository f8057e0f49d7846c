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
from typing import Iterator, Optional, Sequence

from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance

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
    backend: str         # kernel backend that ran it ("" when none did: a modeled record)
    # where ``ns`` came from: timed here (MEASURED), or a roofline/tier model's time (MODELED)
    provenance: Provenance = Provenance.MEASURED


RECORD_FIELDS = tuple(f.name for f in fields(KernelRecord))


def records_frame(records, columns: Optional[Sequence[str]] = RECORD_FIELDS, require: Sequence[str] = ()):
    """Kernel records as a pandas DataFrame, one row per record: the one converter every layer uses.

    ``records``: :class:`KernelRecord` objects, named tuples, dicts or plain tuples in
    :data:`RECORD_FIELDS` order; a DataFrame is returned as it is. ``columns``: the frame's columns
    (None: every field the records have, e.g. the ``calls`` of pre-aggregated rows). Raises
    UserError when rows are there but a ``require`` d column is not."""
    import pandas as pd
    if isinstance(records, pd.DataFrame):
        df = records
    else:
        rows = []
        for r in records:
            if isinstance(r, dict):
                rows.append(r)
            elif hasattr(r, "_asdict"):
                rows.append(r._asdict())
            elif isinstance(r, tuple):
                rows.append(dict(zip(RECORD_FIELDS, r)))
            else:
                rows.append({f: getattr(r, f) for f in RECORD_FIELDS if hasattr(r, f)})
        df = pd.DataFrame(rows, columns=None if columns is None else list(columns))
    missing = [c for c in require if c not in df.columns]
    if missing and len(df):
        raise UserError(f"kernel records: missing field {missing[0]!r}")
    return df


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
        """Records as a pandas DataFrame (one row per call, :func:`records_frame`)."""
        return records_frame(self.records if records is None else records)


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


# The fields :func:`store_key` groups by.
STORE_KEY = ("name", "phase", "layer", "pattern")


def store_key(r) -> tuple:
    """How the run store groups one step's kernel records: ``(name, phase, layer, pattern)``
    (:data:`STORE_KEY`; ``row_bytes`` kept as the widest). The tier model's inputs use the same
    grouping everywhere."""
    return (r.name, r.phase, int(r.layer), r.pattern)


@dataclass(slots=True)
class KernelTotals:
    """Kernel records that share a key, summed (:func:`sum_records`): how many ``calls``, their
    ``ns``, bytes and ``flops`` added up, and ``row_bytes`` the widest row any of them accessed.
    The store's ``kernel_steps`` columns, in this order (:data:`TOTAL_FIELDS`)."""
    calls: int = 0
    ns: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    flops: int = 0
    random_bytes: int = 0
    row_bytes: int = 0

    def values(self) -> tuple:
        """The totals in :data:`TOTAL_FIELDS` order."""
        return (self.calls, self.ns, self.bytes_read, self.bytes_written, self.flops, self.random_bytes,
                self.row_bytes)

    def as_dict(self) -> dict:
        return dict(zip(TOTAL_FIELDS, self.values()))


TOTAL_FIELDS = tuple(f.name for f in fields(KernelTotals))
# The totals that add up over records and steps; ``row_bytes`` keeps the widest instead.
SUMMED_FIELDS = tuple(f for f in TOTAL_FIELDS if f != "row_bytes")


def sum_records(records, key, into: Optional[dict] = None) -> dict:
    """Sum kernel records by ``key(record)``: ``{key: KernelTotals}``. Pass ``into`` to keep adding
    to running totals."""
    agg = {} if into is None else into
    for r in records:
        k = key(r)
        t = agg.get(k)
        if t is None:
            t = agg[k] = KernelTotals()
        t.calls += 1
        t.ns += r.ns
        t.bytes_read += r.bytes_read
        t.bytes_written += r.bytes_written
        t.flops += r.flops
        t.random_bytes += r.random_bytes
        if r.row_bytes > t.row_bytes:
            t.row_bytes = r.row_bytes
    return agg


def totals_rows(agg: dict, key_fields: Sequence[str]) -> list[dict]:
    """:func:`sum_records`' totals as one dict per key: the key's parts named by ``key_fields``
    (e.g. :data:`STORE_KEY`), then the :data:`TOTAL_FIELDS`."""
    return [{**dict(zip(key_fields, k)), **t.as_dict()} for k, t in agg.items()]


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
