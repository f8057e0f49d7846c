"""Where did the time go? Kernel breakdowns, roofline points and timelines.

Inputs are kernel records (:class:`~gnnrec_lab.recorder.KernelRecord` objects,
tuples/dicts with the same fields, or a DataFrame of them). Times are measured;
bounds are *derived from the measured host calibration*
(:func:`gnnrec_lab.calibrate.host_profile`): a kernel cannot beat
``max(bytes / triad bandwidth, flops / GEMM rate)``, so ``pct_of_bound`` (bound
time / measured time, in %) says how close it came to this machine's roofline.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from .provenance import Provenance
from .recorder import records_frame

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
        from .calibrate import load
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
    bw, peak = _ceilings(host)
    g["bound_seconds"] = pd.concat([g["bytes"] / bw, g["flops"] / peak], axis=1).max(axis=1, skipna=False)
    g["pct_of_bound"] = 100.0 * g["bound_seconds"] / secs
    g = g.sort_values("seconds", ascending=False, kind="stable").reset_index(drop=True)
    return g[list(BREAKDOWN_COLUMNS)]


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


# -- full graph on one machine vs DistDGL on P machines (issue 20) ----------------------------------
# The papers' single machine is an Optane one: the full-graph side of the comparison also shows each
# run's times modeled on these memory modes' devices (tiermodel.MODE_DEVICES; modeled, hatched).
OPTANE_MODES = ("optane_app_direct", "optane_memory_mode")
OPTANE_WORDS = {"optane_app_direct": "Optane App Direct", "optane_memory_mode": "Optane Memory Mode"}
FULL_VS_DIST_COLUMNS = ["id", "engine", "series", "kind", "dataset", "model", "layers", "batch_size", "machines",
                        "cores_per_machine", "link_gbit", "time_to_target_s", "epoch_s", "train_s",
                        "best_valid_recall@20", "test_recall@20", "explosion_factor", "device", "ratio",
                        "placement_assumption"]


def _plural(n, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _machine(engine: str, cfg: dict, info: dict, result: dict) -> tuple:
    """``(machines, cores per machine, link Gbit/s)`` a stored run ran on: a full-graph run is one
    machine of its ``--cores`` (else the cores its process could run on); a DistDGL run is one
    machine per partition, each of its emulated machine's cores (None on a local cluster, where the
    machines share the host's cores), its link rate (0: unshaped; None: not emulated)."""
    if engine != "distdgl":
        aff = (info.get("host") or {}).get("affinity")
        cores = cfg.get("cores") or (len(aff) if aff else (info.get("host") or {}).get("cpus"))
        return 1, cores, None
    dist = info.get("distributed") or (result.get("info") or {}).get("distributed") or {}
    cluster = dist.get("cluster") or {}
    ms = cluster.get("machines") or []
    cores = len(ms[0]["cores"]) if cluster.get("kind") == "emulated" and ms and ms[0].get("cores") else None
    return dist.get("partitions") or len(ms) or None, cores, cluster.get("link_gbit")


def engine_series(engine: str, machines, cores, link_gbit=None, mode: Optional[str] = None) -> str:
    """How a bar series of the comparison is named on every view: the engine, the machines it ran on
    and, for a modeled one, the memory mode (e.g. ``full graph, 1 machine x 1 core (measured)``,
    ``full graph on Optane App Direct (modeled)``, ``DistDGL, 2 machines x 1 core, 10 Gbit/s (measured)``)."""
    if mode is not None:
        return f"full graph on {OPTANE_WORDS.get(mode, mode)} (modeled)"
    where = _plural(machines or 1, "machine") + (f" x {_plural(cores, 'core')}" if cores else "")
    if engine != "distdgl":
        return f"full graph, {where} (measured)"
    link = "" if link_gbit is None else (", unshaped links" if not link_gbit else f", {link_gbit:g} Gbit/s")
    return f"DistDGL, {where}{link} (measured)"


def full_graph_modeled(store, run_id: int, host: dict, modes=OPTANE_MODES, threads: Optional[int] = None) -> dict:
    """A stored full-graph run's training-step time modeled on each of ``modes``' devices
    (:func:`gnnrec_lab.projection.stored_run_step_time`: its kernel records, the run's placement, else
    every tensor class on the device; Memory Mode's DRAM cache over its predicted footprint) with the
    run's ``threads``: ``{mode: {"device", "ratio", "placement_assumption", "kind": MODELED}}``, or
    ``{mode: {"reason": ...}}`` where it cannot be projected. The ratio scales its measured durations
    (:func:`~gnnrec_lab.memory.tiermodel.modeled_seconds`)."""
    from .memory.tiermodel import MODE_DEVICES
    from .projection import stored_run_step_time
    out = {}
    for mode in modes:
        try:
            st = stored_run_step_time(store, run_id, host, device=MODE_DEVICES[mode],
                                      **({"threads": int(threads)} if threads else {}))
        except Exception as e:   # noqa: BLE001 - a view shows why instead of the bar
            out[mode] = {"reason": f"{type(e).__name__}: {e}"}
            continue
        ratio = st.get("ratio")
        out[mode] = {"device": st["device"], "ratio": None if ratio != ratio else ratio,
                     "placement_assumption": st.get("placement_assumption"), "kind": Provenance.MODELED}
    return out


def full_vs_distributed(store, run_ids=None, host: Optional[dict] = None, modes=OPTANE_MODES,
                        datasets=None) -> pd.DataFrame:
    """**The** full graph vs DistDGL comparison every view shows (the Compare page's section,
    notebook 06, ``benchmarks/bench_headline.py``): finished runs of ``store`` (``run_ids``, else
    every one), one row per bar, :data:`FULL_VS_DIST_COLUMNS`.

    Each full-graph run (mode full, every tensor class in DRAM) gives a *measured* row (its time to
    the Recall@20 target, mean epoch and training seconds as recorded) and, with ``host`` (this
    host's calibration), one *modeled* row per Optane memory mode in ``modes``: the same durations
    times the run's modeled/measured step-time ratio on that device (:func:`full_graph_modeled`,
    :func:`~gnnrec_lab.memory.tiermodel.modeled_seconds`), ``kind`` MODELED. Each DistDGL run gives a
    measured row. ``series`` names engine and machines (:func:`engine_series`); ``machines`` and
    ``cores_per_machine`` say what "one machine" was. ``datasets``: keep only these (default: the
    datasets that have a DistDGL run, or every dataset where none has). The frame's
    ``attrs["reasons"]`` lists projections that failed (run, mode, why)."""
    from .distributed import comparison_row
    from .memory.tiermodel import modeled_seconds
    from .status import RunStatus
    ids = store.run_ids(RunStatus.FINISHED) if run_ids is None else list(run_ids)
    runs, rows, reasons = [], [], []
    for rid in ids:
        run = store.get_run(rid)
        res = run.get("result") or {}
        if not res:
            continue
        row = comparison_row(res, rid)
        cfg = run.get("config") or res.get("config") or {}
        if row["engine"] == "full" and any(w != "dram" for w in (cfg.get("placement") or {}).values()):
            continue   # part of it ran on a file or another node: not one DRAM machine
        if row["engine"] not in ("full", "distdgl"):
            continue
        runs.append((rid, run, res, row, cfg))
    dist_sets = {row["dataset"] for _, _, _, row, _ in runs if row["engine"] == "distdgl"}
    keep = set(datasets) if datasets is not None else (dist_sets or None)
    for rid, run, res, row, cfg in runs:
        if keep is not None and row["dataset"] not in keep:
            continue
        info = run.get("info") or {}
        machines, cores, link = _machine(row["engine"], cfg, info, res)
        base = {k: row.get(k) for k in FULL_VS_DIST_COLUMNS if k in row}
        base.update(machines=machines, cores_per_machine=cores, link_gbit=link, train_s=res.get("train_seconds"),
                    kind=Provenance.MEASURED, device="this host (DRAM)", ratio=None, placement_assumption=None,
                    series=engine_series(row["engine"], machines, cores, link))
        rows.append(base)
        if row["engine"] != "full" or host is None:
            continue
        threads = cfg.get("cores") or cfg.get("threads") or (info.get("host") or {}).get("torch_threads")
        for mode, m in full_graph_modeled(store, rid, host, modes, threads=threads).items():
            if "reason" in m:
                reasons.append((rid, mode, m["reason"]))
                continue
            q = m["ratio"]
            rows.append(dict(base, kind=Provenance.MODELED, device=m["device"], ratio=q,
                             placement_assumption=m["placement_assumption"],
                             series=engine_series("full", machines, cores, mode=mode),
                             **{k: modeled_seconds(base[k], q) for k in ("time_to_target_s", "epoch_s", "train_s")}))
    out = pd.DataFrame(rows, columns=FULL_VS_DIST_COLUMNS)
    out.attrs["reasons"] = reasons
    return out


def best_by_depth(frame: pd.DataFrame, by: str = "time_to_target_s") -> pd.DataFrame:
    """Each series' best run at each depth (and dataset, model): the row with the least ``by``
    (runs that never reached the target come last, then the least epoch time): each engine with
    the batch size it does best with. One row per (dataset, model, series, layers), by depth."""
    if frame.empty:
        return frame.copy()
    keys = ["dataset", "model", "series", "layers"]
    f = frame.assign(_miss=frame[by].isna()).sort_values(["_miss", by, "epoch_s", "id"], na_position="last")
    return f.drop_duplicates(keys).drop(columns="_miss").sort_values(keys[:2] + ["layers", "series"],
                                                                     ignore_index=True)
