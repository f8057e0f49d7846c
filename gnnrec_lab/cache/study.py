"""A cache study: a training access trace, the policies simulated over it, one frame.

The one pipeline behind ``gnnrec-lab cache`` and the dashboard's Cache page:
:func:`make_trace` turns a training graph into the rows each mini-batch touches
(plain BPR batches of a 0-layer model, or sampled sub-graph batches), and
:func:`run_study` sweeps the policies over it at each cache size (the oracle at
each look-ahead), with the static policy ranking rows by the graph's degrees.
Hit rates and row counts come from the simulator; bytes are *modeled* (rows x
row bytes); the seconds are measured.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Sequence, Union

from gnnrec_lab.cache.simulate import sweep_records
from gnnrec_lab.cache.traces import Trace, mf_trace, sampled_trace, skew
from gnnrec_lab.config.run import CACHE_TRACE_KINDS
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.util.errors import UserError


def make_trace(graph: BipartiteGraph, kind: str, batch_size: int, fanouts: Sequence[int] = (),
               epochs: int = 1, seed: int = 0) -> Trace:
    """The access trace of ``kind`` (one of :data:`~gnnrec_lab.config.run.CACHE_TRACE_KINDS`) over
    ``graph``; ``fanouts`` (first hop first) apply to ``"sampled"`` only."""
    if kind == "mf":
        return mf_trace(graph, batch_size, epochs, seed)
    if kind == "sampled":
        return sampled_trace(graph, batch_size, list(fanouts), epochs, seed)
    raise UserError(f"trace: must be one of {', '.join(CACHE_TRACE_KINDS)}, got {kind!r}")


#: A cache size that :func:`auto_capacities` chooses from the trace (the Cache page's default).
AUTO_CAPACITY = "auto"


def auto_capacities(trace: Trace, n: int = 4, top: float = 0.9) -> list[int]:
    """``n`` cache sizes (rows) that every policy can be simulated at and that tell them apart:
    geometrically spaced from just above the largest batch's distinct rows (a policy that keeps a
    batch resident needs that many) to ``top`` of the table. Fewer when that range is narrow; none
    when even the largest batch leaves no room below ``top`` of the table (a small table read almost
    whole by one batch: nothing to compare, which the Cache page's charts say)."""
    rows, biggest = int(trace.n_rows), int(trace.max_batch_rows())
    lo, hi = math.ceil(biggest * 1.05), int(rows * top)
    if lo > hi:
        return []
    if n <= 1 or lo == hi:
        return [hi]
    return sorted({int(round(lo * (hi / lo) ** (i / (n - 1)))) for i in range(n)})


def trace_info(trace: Trace) -> dict:
    """What the trace is, in counts: source, batches, accesses, table rows, largest batch."""
    return {"trace": trace.source, "batches": trace.n_batches, "accesses": trace.n_accesses,
            "table_rows": trace.n_rows, "max_rows_per_batch": trace.max_batch_rows()}


@dataclass
class CacheStudy:
    """A finished study: ``records`` has one dict per (policy, size[, look-ahead]) with the
    :class:`~gnnrec_lab.cache.simulate.SimResult` fields and ``note`` (why a size was too small
    for a policy; its hit rate is then NaN); :attr:`frame` is the same as a DataFrame."""

    trace: Trace
    records: list
    skew: dict
    info: dict                   # trace_info(trace)
    row_bytes: int
    trace_seconds: float         # measured: building the trace
    sim_seconds: float           # measured: running every policy

    @cached_property
    def frame(self):
        import pandas as pd
        return pd.DataFrame(self.records)


def run_study(graph: BipartiteGraph, kind: str, batch_size: int, fanouts: Sequence[int], epochs: int, seed: int,
              capacities: Sequence[Union[int, str]], lookaheads: Sequence[Optional[int]], policies: Sequence[str],
              row_bytes: int) -> CacheStudy:
    """Build the trace (:func:`make_trace`) and simulate every policy in ``policies`` at every
    capacity (rows, ``"P%"`` of the table's rows, or :data:`AUTO_CAPACITY`: :func:`auto_capacities`),
    the oracle also at every look-ahead."""
    t0 = time.perf_counter()
    trace = make_trace(graph, kind, batch_size, fanouts, epochs, seed)
    if any(str(c).strip().lower() == AUTO_CAPACITY for c in capacities):
        auto = auto_capacities(trace)
        capacities = [c for c in capacities if str(c).strip().lower() != AUTO_CAPACITY] + auto
    t1 = time.perf_counter()
    records = sweep_records(trace, list(capacities), list(lookaheads), list(policies), row_bytes=row_bytes,
                            static_scores=getattr(graph, "degree", None), static_basis="degree")
    t2 = time.perf_counter()
    return CacheStudy(trace, records, skew(trace), trace_info(trace), row_bytes, t1 - t0, t2 - t1)
