"""Where did the time go? Kernel breakdowns, roofline points and timelines.

Inputs are kernel records (:class:`~gnnrec_lab.util.recorder.KernelRecord` objects,
tuples/dicts with the same fields, or a DataFrame of them). Times are measured;
bounds are *derived from the measured host calibration*
(:func:`gnnrec_lab.memory.calibrate.host_profile`): a kernel cannot beat
``max(bytes / triad bandwidth, flops / GEMM rate)``, so ``pct_of_bound`` (bound
time / measured time, in %) says how close it came to this machine's roofline.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.recorder import records_frame

BREAKDOWN_COLUMNS = ("kernel", "phase", "calls", "seconds", "share", "bytes", "random_bytes", "flops", "GBps",
                     "GFLOPs", "intensity", "bound_seconds", "pct_of_bound")


# The record fields a frame given to this module must have (records_frame raises UserError, a ValueError).
NEEDS = ("name", "phase", "ns", "bytes_read", "bytes_written", "flops")


def _provenance(r) -> Provenance:
    """A record row's provenance; measured where the records do not say (rows read from the store)."""
    p = getattr(r, "provenance", None)
    return Provenance(p) if isinstance(p, str) else Provenance.MEASURED


def _ceilings(host: Optional[dict]) -> tuple[float, float]:
    """(triad bytes/s, GEMM flop/s) from a host profile; NaN when unknown."""
    if host is None:
        from gnnrec_lab.memory.calibrate import load
        host = load()
    if not host:
        return math.nan, math.nan
    bw = float(host.get("triad_GBps") or math.nan) * 1e9
    peak = float(host.get("gemm_GFLOPs") or math.nan) * 1e9
    return bw, peak


def breakdown(records_or_df, host: Optional[dict] = None) -> pd.DataFrame:
    """One row per (kernel, phase), slowest first.

    Columns: ``calls``; ``seconds`` (measured total); ``share`` of all recorded
    seconds (0..1); ``bytes`` (read + written) and ``random_bytes``; ``flops``;
    ``GBps`` and ``GFLOPs`` achieved; ``intensity`` (flop/byte); ``bound_seconds``,
    the roofline bound ``max(bytes / triad_GBps, flops / gemm_GFLOPs)`` from the
    host calibration (``host``, else the cached one; NaN without either); and
    ``pct_of_bound`` = 100 * bound_seconds / seconds.
    """
    df = records_frame(records_or_df, require=NEEDS)
    if df.empty:
        return pd.DataFrame(columns=list(BREAKDOWN_COLUMNS))
    # pre-aggregated frames (run totals, the store's per-step rows) carry a "calls" column
    df = df.assign(bytes=df["bytes_read"] + df["bytes_written"],
                   random_bytes=df["random_bytes"] if "random_bytes" in df else 0,
                   calls=df["calls"] if "calls" in df else 1)
    g = df.groupby(["name", "phase"], sort=False).agg(calls=("calls", "sum"), ns=("ns", "sum"), bytes=("bytes", "sum"),
                                                      random_bytes=("random_bytes", "sum"), flops=("flops", "sum"))
    g = g.reset_index().rename(columns={"name": "kernel"})
    g["seconds"] = g["ns"] / 1e9
    total = g["seconds"].sum()
    g["share"] = g["seconds"] / total if total > 0 else math.nan
    secs = g["seconds"].where(g["seconds"] > 0)
    g["GBps"] = g["bytes"] / secs / 1e9
    g["GFLOPs"] = g["flops"] / secs / 1e9
    g["intensity"] = g["flops"] / g["bytes"].where(g["bytes"] > 0)
    if host is None:
        from gnnrec_lab.memory.calibrate import load
        host = load()
    bw, peak = _ceilings(host)
    g["bound_seconds"] = pd.concat([g["bytes"] / bw, g["flops"] / peak], axis=1).max(axis=1, skipna=False)
    g["pct_of_bound"] = 100.0 * g["bound_seconds"] / secs
    g = g.sort_values("seconds", ascending=False, kind="stable").reset_index(drop=True)
    out = g[list(BREAKDOWN_COLUMNS)]
    from gnnrec_lab.memory.calibrate import calibration_flags
    # why the calibration every % bound divides by may be off (format_breakdown prints them)
    out.attrs["calibration_flags"] = calibration_flags(host) if host else []
    return out


# What "% bound" and the roofline mean, shown wherever either is (CLI tables, the Breakdown page).
BOUND_NOTE = ("% bound = the kernel's roofline time (its bytes at this host's calibrated DRAM triad bandwidth, or its "
              "flops at the calibrated GEMM rate, whichever is longer) / its measured time. Above 100% the kernel "
              "ran faster than DRAM alone allows: rows it gathers again came from the CPU caches, which the roofline "
              "charges to DRAM")
ROOFLINE_NOTE = ("Roofline: each kernel's measured GFLOP/s against its arithmetic intensity (flop per byte moved); "
                 "the dashed roof is min(GEMM peak, triad bandwidth x intensity) from this host's calibration "
                 "(measured). A point above the roof reused rows from the CPU caches (the roof charges every byte "
                 "to DRAM).")


def _number_or_dash(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def format_breakdown(df: pd.DataFrame) -> str:
    """The breakdown as a text table for the CLI, units in the header."""
    if df.empty:
        return "(no kernel records)"
    head = (f"{'kernel':<14} {'phase':<10} {'calls':>6} {'time s':>9} {'share':>6} {'GB':>8} {'GB/s':>7} "
            f"{'GFLOP/s':>8} {'flop/B':>7} {'% bound':>8}")
    lines = [head, "-" * len(head)]
    for r in df.itertuples(index=False):
        lines.append(f"{r.kernel:<14.14} {r.phase:<10.10} {r.calls:>6d} {r.seconds:>9.4f}"
                     f" {_number_or_dash(100 * r.share, '5.1f')}%"
                     f" {r.bytes / 1e9:>8.3f} {_number_or_dash(r.GBps, '7.2f')} {_number_or_dash(r.GFLOPs, '8.2f')}"
                     f" {_number_or_dash(r.intensity, '7.2f')} {_number_or_dash(r.pct_of_bound, '7.1f')}%")
    lines.append(f"{'total':<14} {'':<10} {int(df['calls'].sum()):>6d} {df['seconds'].sum():>9.4f}")
    lines.append("time: measured; " + BOUND_NOTE)
    for why in df.attrs.get("calibration_flags") or []:
        lines.append(f"warning: {why}: every % bound above is relative to it")
    return "\n".join(lines)


def roofline_points(df, host: Optional[dict] = None) -> list[dict]:
    """Roofline scatter points, one per (kernel, phase): ``name``, ``kernel``, ``phase``,
    ``intensity`` (flop/byte), ``GFLOPs`` and ``GBps`` achieved (measured), ``seconds``,
    and ``roof_GFLOPs`` = min(gemm_GFLOPs, triad_GBps * intensity), the ceiling at
    that intensity (from the host calibration). ``df`` is a :func:`breakdown` or raw records."""
    if not (isinstance(df, pd.DataFrame) and "kernel" in df and "intensity" in df):
        df = breakdown(df, host)
    bw, peak = _ceilings(host)
    out = []
    for r in df.itertuples(index=False):
        ai = r.intensity
        roof = min(peak / 1e9, bw / 1e9 * ai) if ai == ai else math.nan
        out.append({"name": f"{r.kernel} ({r.phase})", "kernel": r.kernel, "phase": r.phase,
                    "intensity": ai, "GFLOPs": r.GFLOPs, "GBps": r.GBps, "seconds": r.seconds,
                    "roof_GFLOPs": roof})
    return out


def export_chrome_trace(records: Iterable, path, step: Optional[int] = None) -> int:
    """Write one step's kernels as Chrome/Perfetto trace JSON (``ph: "X"`` events,
    microseconds) and return the number of kernel events.

    ``step`` defaults to the last step that has records (or all records when none
    has a step). Records hold durations, not start times, so kernels are laid out
    back to back in recorded order, one track per phase; time between kernels
    (Python, the framework) is not shown. ``args`` carry bytes, flops, access
    pattern, layer, backend and the achieved GB/s.
    """
    df = records_frame(records, require=NEEDS)
    if "step" in df and (df["step"] >= 0).any():
        step = int(df.loc[df["step"] >= 0, "step"].max()) if step is None else int(step)
        df = df[df["step"] == step]
    if df.empty:
        raise ValueError(f"no kernel records for step {step}")
    phases = list(dict.fromkeys(df["phase"]))
    tid = {p: i + 1 for i, p in enumerate(phases)}
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"gnnrec-lab step {step}"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": p}} for p, t in tid.items()]
    ts = 0.0
    for r in df.itertuples(index=False):
        dur = r.ns / 1e3
        moved = r.bytes_read + r.bytes_written
        events.append({"name": r.name, "cat": r.phase, "ph": "X", "pid": 1, "tid": tid[r.phase],
                       "ts": round(ts, 3), "dur": round(dur, 3),
                       "args": {"bytes_read": int(r.bytes_read), "bytes_written": int(r.bytes_written),
                                "flops": int(r.flops), "pattern": getattr(r, "pattern", ""),
                                "layer": int(getattr(r, "layer", -1)), "backend": getattr(r, "backend", ""),
                                "GBps": round(moved / r.ns, 3) if r.ns else None,
                                "time": _provenance(r)}})
        ts += dur
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return len(df)
