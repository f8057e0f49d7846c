"""Trace-driven simulation of an embedding-row cache in front of a slow tier.

For a :class:`~gnnrec_lab.cache.traces.Trace`, a :class:`~gnnrec_lab.cache.policies.Policy`
and a capacity, :func:`simulate` returns hit rate, bytes read from and written
back to the slow tier, prefetch volume and peak occupancy. All byte figures
are *modeled* from row counts (``row_bytes`` per row); only ``sim_seconds``
(the simulator's own run time) is measured.
"""
from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Sequence, Union

import numba
import numpy as np

from gnnrec_lab.cache.policies import INF, Policy, make_policy
from gnnrec_lab.cache.traces import Trace
from gnnrec_lab.config.run import OPTIMIZER_STATES, SIMULATED_CACHE_POLICIES
from gnnrec_lab.util.errors import UserError


@numba.njit(cache=True, nogil=True)
def _next_use_kernel(rows, offsets, n_rows):
    nxt = np.empty(rows.shape[0], dtype=np.int64)
    seen = np.full(n_rows, INF, dtype=np.int64)
    for b in range(offsets.shape[0] - 2, -1, -1):
        for p in range(offsets[b], offsets[b + 1]):
            r = rows[p]
            nxt[p] = seen[r]
            seen[r] = b   # rows are distinct within a batch, so this cannot shadow an access of batch b
    return nxt


def next_use(trace: Trace) -> np.ndarray:
    """For access ``p`` (in batch ``b``), the next batch that uses the same row; ``INF`` if none.

    One backwards pass over the trace, int64, same length as ``trace.rows``.
    """
    return _next_use_kernel(trace.rows, trace.offsets, trace.n_rows)


def row_bytes(dim: int, optimizer: Optional[str] = None, dtype_bytes: int = 4) -> int:
    """Bytes one table row moves: the embedding plus per-row optimizer state.

    ``optimizer``: None/"none" (no state) or a key of ``config.OPTIMIZER_STATES`` (sgd 0,
    adagrad 1, adam/adamw/lamb 2 state vectors).
    """
    states = {None: 0, "none": 0, **OPTIMIZER_STATES}
    if optimizer not in states:
        raise UserError(f"optimizer must be one of {', '.join(str(k) for k in states if k)}, got {optimizer!r}")
    if int(dim) < 1:
        raise UserError(f"dim must be a positive integer, got {dim}")
    return int(dim) * int(dtype_bytes) * (1 + states[optimizer])


_CAP = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")


def parse_capacity(text: Union[str, int, float], n_rows: int) -> int:
    """Cache capacity in rows from ``"N"`` (rows) or ``"P%"`` (of the table's rows, rounded down)."""
    if isinstance(text, (int, np.integer)):
        text = str(int(text))
    m = _CAP.match(str(text))
    if not m:
        raise UserError(f"cache-size must be a number of rows (e.g. 5000) or a percentage of rows "
                        f"(e.g. 5%), got {text!r}")
    value, pct = m.groups()
    if pct:
        p = float(value)
        if not 0 <= p <= 100:
            raise UserError(f"cache-size percentage must be between 0% and 100%, got {text!r}")
        return int(n_rows * p / 100)
    if "." in value:
        raise UserError(f"cache-size in rows must be a whole number, got {text!r} (add % for a percentage)")
    return int(value)


@dataclass
class SimResult:
    """One policy at one capacity. Bytes are modeled (rows x row_bytes); sim_seconds is measured."""
    policy: str
    capacity_rows: int
    capacity_pct: float           # of table rows
    lookahead: Optional[int]      # batches; oracle only
    accesses: int                 # (batch, distinct row) pairs
    hits: int
    hit_rate: float               # hits / accesses
    misses: int                   # rows read from the slow tier
    stall_rate: float             # misses not prefetched / accesses (modeled: prefetch assumed in time)
    read_bytes: int               # modeled bytes read from the slow tier
    written_bytes: int            # modeled bytes written back (evictions + final flush)
    prefetch_bytes: int           # modeled bytes read ahead of use (part of read_bytes)
    peak_occupancy_rows: int
    peak_occupancy_bytes: int
    row_bytes: int
    sim_seconds: float            # measured

    def as_dict(self) -> dict:
        return asdict(self)


def simulate(trace: Trace, policy: Union[Policy, str], capacity: Union[int, str],
             row_bytes: int = 256, next_use_arr: Optional[np.ndarray] = None,
             write_back: bool = True) -> SimResult:
    """Run ``policy`` over ``trace`` with a cache of ``capacity`` rows (int, or ``"N"``/``"P%"``).

    ``row_bytes`` is what one row moves (:func:`row_bytes`). Every row a batch
    touches is dirty afterwards; ``write_back=False`` models read-only rows.
    Pass a precomputed ``next_use_arr`` when simulating many policies on one trace.
    """
    if isinstance(policy, str):
        policy = make_policy(policy)
    cap = parse_capacity(capacity, trace.n_rows) if isinstance(capacity, str) else int(capacity)
    if cap < 0:
        raise UserError(f"cache-size must be >= 0 rows, got {cap}")
    if int(row_bytes) < 1:
        raise UserError(f"row_bytes must be a positive integer, got {row_bytes}")
    nu = next_use(trace) if next_use_arr is None else next_use_arr
    t0 = time.perf_counter()
    c = policy.run(trace, cap, nu)
    secs = time.perf_counter() - t0
    a = trace.n_accesses
    written = (c.evictions + c.final_resident) if write_back else 0
    rb = int(row_bytes)
    return SimResult(
        policy=policy.label, capacity_rows=cap,
        capacity_pct=100.0 * cap / trace.n_rows if trace.n_rows else float("nan"),
        lookahead=getattr(policy, "lookahead", None), accesses=a, hits=c.hits,
        hit_rate=c.hits / a if a else float("nan"), misses=c.misses,
        stall_rate=(c.misses - c.prefetched) / a if a else float("nan"),
        read_bytes=c.misses * rb, written_bytes=written * rb, prefetch_bytes=c.prefetched * rb,
        peak_occupancy_rows=c.peak_occupancy, peak_occupancy_bytes=c.peak_occupancy * rb,
        row_bytes=rb, sim_seconds=secs)


def policies_for(names: Sequence[str], lookahead: Optional[int], static_scores=None,
                 static_basis: str = "") -> list[Policy]:
    """Policy objects for ``names``; the oracle gets ``lookahead``, static gets the scores."""
    out = []
    for name in names:
        if name == "oracle":
            out.append(make_policy("oracle", lookahead=lookahead))
        elif name == "static":
            out.append(make_policy("static", scores=static_scores, basis=static_basis))
        else:
            out.append(make_policy(name))
    return out


def sweep_records(trace: Trace, capacities: Iterable[Union[int, str]], lookaheads: Iterable[Optional[int]] = (200,),
                  policies: Sequence[str] = SIMULATED_CACHE_POLICIES, row_bytes: int = 256, static_scores=None,
                  static_basis: str = "") -> list[dict]:
    """Every policy at every capacity (the oracle also at every look-ahead), one dict per run.

    One dict per (policy, capacity[, lookahead]) with the :class:`SimResult`
    fields and ``note``; a capacity too small for a policy that holds whole
    batches gives a dict with NaN hit rate and the reason in ``note``.
    """
    nu = next_use(trace)
    lookaheads = list(lookaheads)
    rows = []
    for capacity in capacities:
        cap = parse_capacity(capacity, trace.n_rows) if isinstance(capacity, str) else int(capacity)
        for name in policies:
            las = lookaheads if name == "oracle" else [None]
            for la in las:
                pol = policies_for([name], la, static_scores, static_basis)[0]
                try:
                    r = simulate(trace, pol, cap, row_bytes, nu).as_dict()
                    r["note"] = ""
                except UserError as e:
                    r = {"policy": pol.label, "capacity_rows": cap,
                         "capacity_pct": 100.0 * cap / trace.n_rows, "lookahead": la,
                         "hit_rate": float("nan"), "note": str(e)}
                rows.append(r)
    return rows


def sweep(trace: Trace, capacities: Iterable[Union[int, str]], lookaheads: Iterable[Optional[int]] = (200,),
          policies: Sequence[str] = SIMULATED_CACHE_POLICIES, row_bytes: int = 256, static_scores=None,
          static_basis: str = ""):
    """:func:`sweep_records` as a pandas DataFrame (one row per policy, capacity[, lookahead])."""
    import pandas as pd

    return pd.DataFrame(sweep_records(trace, capacities, lookaheads, policies, row_bytes, static_scores,
                                      static_basis))
