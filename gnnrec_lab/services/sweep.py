"""Sweeps: the product of a few config fields, run through the runner, summarised.

>>> from gnnrec_lab.services.sweep import Sweep, expand
>>> points = expand(RunConfig(dataset="synth-tiny"), {"batch_size": [512, 2048], "layers": [1, 2]})
>>> sw = Sweep(points, name="depth-vs-batch")
>>> outcome = sw.run()                 # queues, waits, skips points already finished
>>> print(format_table(outcome.frame()))

Each point is a :class:`~gnnrec_lab.config.run.RunConfig`; it runs as its own worker
subprocess (``Runner``), its results land in the run store tagged with the sweep
id. A sweep is *resumable*: a point whose exact config already finished in the
store is not run again; its stored result is reused.

The summary helpers (:func:`summary_row`, :func:`summary_frame`,
:func:`time_to_reach`) read the dict of a :class:`~gnnrec_lab.training.loop.RunResult`
(``result.to_dict()``, or the JSON the store keeps), so in-process runs
(notebooks, the large-batch benchmark) and stored sweeps are summarised the same
way. Every time in them is measured on this machine; the predicted footprint is
modeled (from tensor shapes), the peak RSS measured.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import signal
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, Iterable, Optional, Sequence, Union

from gnnrec_lab.config.run import MODEL_GRAPHS, TUPLE_FIELDS, RunConfig, mf_layers
from gnnrec_lab.runs.record import StoredResult
from gnnrec_lab.runs.runner import Runner
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.status import RunStatus

RECALL_KEY = "recall@20"
# Fields a sweep may not vary: they are per-run identity, not an experiment axis.
_NOT_SWEPT = ("name",)


# ---------------------------------------------------------------------------
# points
# ---------------------------------------------------------------------------
def expand(base: "RunConfig | dict | None", grid: dict) -> list[RunConfig]:
    """The product of ``grid`` (field -> list of values) over ``base``, as validated configs.

    Order: the last field varies fastest (as in nested loops written in ``grid``'s
    order). A non-list value is a fixed override. Points with ``model='mf'`` get
    ``layers=0`` (MF has no propagation) unless ``layers`` is swept explicitly,
    and identical points are kept once. Raises ConfigError naming the field of the
    first invalid point, before anything runs.
    """
    base_d = (base.to_dict() if isinstance(base, RunConfig) else dict(base or RunConfig().to_dict()))
    known = set(RunConfig().to_dict())
    axes = []
    for key, values in grid.items():
        if key not in known:
            raise UserError(f"sweep: unknown config field {key!r}")
        if key in _NOT_SWEPT and isinstance(values, (list, tuple)) and len(values) > 1:
            raise UserError(f"sweep: {key} cannot be swept; use the sweep's own name")
        # fanouts/topk are tuples themselves: a list of them (from a run file) is an axis
        tuple_axis = key in TUPLE_FIELDS and isinstance(values, list) and bool(values) and all(
            isinstance(v, (list, tuple)) for v in values)
        if isinstance(values, (list, tuple)) and (key not in TUPLE_FIELDS or tuple_axis):
            if not values:
                raise UserError(f"sweep: --{key.replace('_', '-')} has no values")
            axes.append((key, list(values)))
        else:
            base_d[key] = values
    keys = [k for k, _ in axes]
    points, seen = [], set()
    for combo in itertools.product(*(v for _, v in axes)):
        d = dict(base_d, **dict(zip(keys, combo)))
        if not MODEL_GRAPHS.get(d.get("model"), True):   # mf; the others keep what was given, or the default
            d["layers"] = mf_layers("mf", d.get("layers"), "layers" in keys)
        cfg = RunConfig.from_dict(d)
        key = cfg.to_json()
        if key not in seen:
            seen.add(key)
            points.append(cfg)
    return points


def sweep_id(configs: Sequence[RunConfig], name: Optional[str] = None) -> str:
    """A stable id for a set of points: ``name`` if given, else ``sweep-<hash of the configs>``."""
    if name:
        return str(name)
    h = hashlib.sha1("\n".join(sorted(c.to_json() for c in configs)).encode()).hexdigest()[:10]
    return f"sweep-{h}"


def varied_fields(configs: Sequence[RunConfig]) -> list[str]:
    """Config fields whose value differs between ``configs`` (in RunConfig field order)."""
    if not configs:
        return []
    dicts = [c.to_dict() for c in configs]
    return [k for k in dicts[0] if any(repr(d[k]) != repr(dicts[0][k]) for d in dicts[1:])]


# ---------------------------------------------------------------------------
# summarising results (in-process RunResult dicts and stored ones alike)
# ---------------------------------------------------------------------------
def time_to_reach(history: Iterable[dict], target: float, key: str = RECALL_KEY) -> Optional[float]:
    """Training seconds (measured, evaluation excluded) at the first evaluation with ``key >= target``.

    ``history`` is RunResult.history (one dict per validation evaluation with
    ``elapsed_s``). None when no evaluation reached ``target``.
    """
    for h in history or ():
        v = h.get(key)
        if v is not None and v >= target:
            return float(h["elapsed_s"])
    return None


def summary_row(result: dict) -> dict:
    """The headline numbers of one run result dict (``RunResult.to_dict()``).

    Keys: ``steps_per_epoch``, ``epochs``, ``epoch_s`` (mean measured training
    seconds per epoch, evaluation excluded), ``train_s`` (measured training
    seconds), ``valid_recall@20`` (best), ``test_recall@20``, ``test_ndcg@20``,
    ``time_to_target_s`` (None when the target was not set or not reached),
    ``peak_rss_mib`` (measured), ``footprint_mib`` (predicted from shapes: modeled).
    """
    res = StoredResult.from_dict(result)
    epochs = res.epoch_seconds
    fp = res.footprint
    pred = fp.predicted
    best, test = res.best_valid, res.test
    rss = fp.peak_rss
    return {
        "steps_per_epoch": res.info.get("steps_per_epoch"),
        "epochs": res.epochs,
        "epoch_s": (sum(epochs) / len(epochs)) if epochs else None,
        "train_s": res.train_seconds,
        "valid_recall@20": best.get(RECALL_KEY),
        "test_recall@20": test.get(RECALL_KEY),
        "test_ndcg@20": test.get("ndcg@20"),
        "time_to_target_s": res.time_to_target_s,
        "peak_rss_mib": rss / 2**20 if rss else None,
        "footprint_mib": (sum(v for v in pred.values() if isinstance(v, (int, float))) / 2**20) if pred else None,
    }


def summary_frame(results: Sequence[dict], fields: Sequence[str] = ()):
    """One row per result dict: the varied ``fields`` of its config, then :func:`summary_row`."""
    import pandas as pd
    rows = []
    for r in results:
        cfg = StoredResult.from_dict(r).config
        rows.append({**{f: cfg.get(f) for f in fields}, **summary_row(r)})
    return pd.DataFrame(rows)


# Column -> (header, format) for the printed table; units in the headers.
_COLUMNS = {
    "run": ("run", "{}"), "status": ("status", "{}"),
    "steps_per_epoch": ("steps/epoch", "{:,.0f}"), "epochs": ("epochs", "{:.0f}"),
    "epoch_s": ("epoch s", "{:.2f}"), "train_s": ("train s", "{:.1f}"),
    "valid_recall@20": ("valid R@20", "{:.4f}"), "test_recall@20": ("test R@20", "{:.4f}"),
    "test_ndcg@20": ("test NDCG@20", "{:.4f}"), "time_to_target_s": ("to target s", "{:.1f}"),
    "peak_rss_mib": ("peak RSS MiB", "{:,.0f}"), "footprint_mib": ("footprint MiB (modeled)", "{:,.1f}"),
}


def format_table(df, markdown: bool = False) -> str:
    """``df`` (from :func:`summary_frame` / :meth:`SweepOutcome.frame`) as an aligned text or Markdown table."""
    import pandas as pd
    cols = list(df.columns)
    heads = [_COLUMNS.get(c, (c, "{}"))[0] for c in cols]

    def cell(v, c):
        if v is None or (isinstance(v, float) and math.isnan(v)) or (v is pd.NA):
            return "-"
        fmt = _COLUMNS.get(c, (c, "{}"))[1]
        try:
            return fmt.format(v)
        except (ValueError, TypeError):
            return str(v)

    body = [[cell(v, c) for v, c in zip(row, cols)] for row in df.itertuples(index=False)]
    if markdown:
        out = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(heads)] + [line(r) for r in body])


# ---------------------------------------------------------------------------
# running a sweep through the runner
# ---------------------------------------------------------------------------
class PointState(StrEnum):
    """A sweep point that has no run behind it (once it has one, its status is the run's RunStatus)."""

    PENDING = "pending"             # not launched yet
    NOT_STARTED = "not started"     # the sweep was interrupted before it was queued; it never will be


@dataclass
class SweepPoint:
    """One point of a sweep and what became of it."""

    index: int
    config: RunConfig
    run_id: Optional[int] = None
    reused: bool = False            # finished earlier (exact config match): not run again
    status: Union[RunStatus, PointState] = PointState.PENDING
    wall_s: Optional[float] = None  # launch -> end observed by the sweep (measured)
    run_s: Optional[float] = None   # the worker's own started -> finished (measured)
    error: Optional[str] = None
    result: dict = field(default_factory=dict)

    @property
    def overhead_s(self) -> Optional[float]:
        """Seconds the sweep added around the run: queueing aside, process start, imports, store, polling."""
        if self.wall_s is None or self.run_s is None:
            return None
        return max(self.wall_s - self.run_s, 0.0)


@dataclass
class SweepOutcome:
    sweep: str
    points: list
    fields: list
    interrupted: bool = False

    def frame(self):
        """Summary table (pandas): varied fields, run id, status, then :func:`summary_row` columns."""
        import pandas as pd
        rows = []
        for p in self.points:
            cfg = p.config.to_dict()
            rows.append({**{f: cfg[f] for f in self.fields}, "run": p.run_id,
                         "status": p.status + (" (reused)" if p.reused else ""), **summary_row(p.result)})
        return pd.DataFrame(rows)

    def overheads(self) -> list[float]:
        """Measured per-point overheads (s) of the points this sweep ran (one at a time only)."""
        return [p.overhead_s for p in self.points if p.overhead_s is not None]

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(p.status == RunStatus.FINISHED for p in self.points)


class Sweep:
    """Runs ``configs`` through a :class:`~gnnrec_lab.runs.runner.Runner`, skipping finished points.

    ``max_concurrent`` runs at a time (each a worker subprocess). ``name`` is the
    sweep id stored with every run (default: a hash of the points).
    """

    def __init__(self, configs: Sequence[RunConfig], *, name: Optional[str] = None, store=None,
                 max_concurrent: int = 1, poll_s: float = 0.05):
        if not configs:
            raise UserError("sweep: no points to run")
        self.configs = list(configs)
        self.id = sweep_id(self.configs, name)
        self.store = store or Store()
        self.max_concurrent = max_concurrent
        self.poll_s = poll_s
        self.fields = varied_fields(self.configs)

    def check_datasets(self) -> None:
        """Refuse unknown dataset names before anything is queued (DataError names the dataset)."""
        from gnnrec_lab import data
        for name in sorted({(c.dataset, c.data_dir) for c in self.configs}, key=str):
            data.describe(name[0], data_dir=name[1])

    def run(self, on_point: Optional[Callable[[SweepPoint, int], None]] = None,
            timeout: Optional[float] = None) -> SweepOutcome:
        """Queue every unfinished point, wait for all, return the outcome.

        ``on_point(point, total)`` is called once per point as it is settled:
        reused at the start, or when its run ends. ``timeout`` (s) cancels what
        is left after that long. Ctrl-C (KeyboardInterrupt) cancels the queued
        and running points of this sweep, records them as cancelled, and
        re-raises after the outcome is complete.
        """
        self.check_datasets()
        points = [SweepPoint(i, c) for i, c in enumerate(self.configs)]
        total = len(points)
        todo = []
        for p in points:
            rid = self.store.find_finished(p.config.to_json())
            if rid is not None:
                run = self.store.get_run(rid)
                p.run_id, p.reused, p.status, p.result = rid, True, RunStatus.FINISHED, run["result"] or {}
                p.run_s = run["duration_s"]
                if on_point:
                    on_point(p, total)
            else:
                todo.append(p)
        outcome = SweepOutcome(self.id, points, self.fields)
        if not todo:
            return outcome
        runner = Runner(self.store, max_concurrent=self.max_concurrent, poll_s=self.poll_s)
        pending: dict[int, SweepPoint] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        # With one run at a time, a point's wall time counts from when its slot freed
        # (the previous point's end, or the launch): that minus the worker's own
        # duration is what the sweep adds per point. Concurrent points overlap, so
        # their overhead is not attributed.
        serial = self.max_concurrent == 1
        slot_free = time.monotonic()
        first_new = max(self.store.run_ids() or [0]) + 1
        try:
            for p in todo:
                p.run_id = runner.launch(p.config, sweep=self.id)
                pending[p.run_id] = p
                p.status = RunStatus.QUEUED
            while pending:
                runner.poll()
                for rid in sorted(pending):
                    st = self.store.status(rid)
                    if not st.is_terminal:
                        continue
                    now = time.monotonic()
                    p = pending.pop(rid)
                    self._settle(p, st, (now - slot_free) if serial else None)
                    slot_free = now
                    if on_point:
                        on_point(p, total)
                if deadline is not None and time.monotonic() > deadline and pending:
                    self._cancel_rest(runner, pending, on_point, total, reason=f"sweep timeout {timeout} s")
                    outcome.interrupted = True
                    break
                if pending:
                    time.sleep(self.poll_s)
        except KeyboardInterrupt:
            outcome.interrupted = True
            # Ctrl-C may land inside launch(): the run row exists but its id never reached us
            by_id = {p.run_id: p for p in todo if p.run_id is not None}
            for rid in self.store.run_ids():
                if rid >= first_new and rid not in pending and not self.store.status(rid).is_terminal:
                    run = self.store.get_run(rid)
                    if run["sweep"] == self.id:
                        p = by_id.get(rid) or next((q for q in todo if q.run_id is None
                                                    and q.config.to_json()
                                                    == json.dumps(run["config"], sort_keys=True)),
                                                   None)
                        if p is not None:
                            p.run_id = rid
                            pending[rid] = p
            for p in todo:
                if p.run_id is None:
                    p.status, p.error = PointState.NOT_STARTED, "interrupted (Ctrl-C) before it was queued"
            self._cancel_rest(runner, pending, on_point, total, reason="interrupted (Ctrl-C)")
            runner.close()
            raise SweepInterrupted(outcome) from None
        runner.close()
        return outcome

    def _settle(self, p: SweepPoint, status: RunStatus, wall_s: Optional[float]) -> None:
        run = self.store.get_run(p.run_id)
        p.status, p.error, p.result = status, run["error"], run["result"] or {}
        p.run_s, p.wall_s = run["duration_s"], wall_s

    def _cancel_rest(self, runner, pending: dict, on_point, total: int, reason: str) -> None:
        # queued points first (instant), so none of them starts while a running one is stopped;
        # a second Ctrl-C must not leave points queued for the next runner to pick up
        order = sorted(pending, key=lambda rid: self.store.status(rid) is not RunStatus.QUEUED)
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            for rid in order:
                runner.cancel(rid, grace_s=5.0)
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
        for rid in order:
            p = pending.pop(rid)
            run = self.store.get_run(rid)
            p.status, p.error, p.result = run["status"], f"{reason}: {run['error'] or ''}".rstrip(": "), \
                run["result"] or {}
            if on_point:
                on_point(p, total)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :meth:`Sweep.run`; ``outcome`` holds every point, the rest cancelled."""

    def __init__(self, outcome: SweepOutcome):
        super().__init__("sweep interrupted")
        self.outcome = outcome


def progress_line(p: SweepPoint, total: int, fields: Sequence[str]) -> str:
    """One line for a settled point: index, run id, varied fields, status, measured times, metrics."""
    cfg = p.config.to_dict()
    desc = " ".join(f"{f}={cfg[f]}" for f in fields) or "(single point)"
    head = f"[{p.index + 1}/{total}] run {p.run_id} {desc}: "
    if p.reused:
        return head + f"finished earlier, not re-run (exact config match, run {p.run_id})"
    s = summary_row(p.result)
    if p.status != RunStatus.FINISHED:
        why = (p.error or "").strip().splitlines()
        return head + p.status + (f" ({why[-1]})" if why else "")
    bits = [p.status]
    if p.run_s is not None:
        bits.append(f"{p.run_s:.1f} s")
    if s["valid_recall@20"] is not None:
        bits.append(f"valid R@20 {s['valid_recall@20']:.4f}")
    if s["test_recall@20"] is not None:
        bits.append(f"test R@20 {s['test_recall@20']:.4f}")
    if p.overhead_s is not None:
        bits.append(f"sweep overhead {p.overhead_s:.2f} s")
    return head + ", ".join(bits)


# ---------------------------------------------------------------------------
# in-process points (notebooks, benchmarks): same configs, no subprocess
# ---------------------------------------------------------------------------
def run_points(configs: Sequence[RunConfig], progress: bool = False) -> list:
    """Train each config in this process (datasets loaded once per name/seed); returns RunResults.

    For small teaching sweeps where a subprocess per point is not worth it; the
    results are the same objects :func:`gnnrec_lab.run` returns (times measured).
    """
    from gnnrec_lab import data
    from gnnrec_lab.training.loop import train
    loaded: dict = {}
    out = []
    for c in configs:
        key = (c.dataset, c.seed, c.data_dir)
        if key not in loaded:
            loaded[key] = data.load(c.dataset, seed=c.seed, data_dir=c.data_dir, progress=progress)
        out.append(train(c, dataset=loaded[key], progress=progress))
    return out


def breakdown_frame(results: Sequence, fields: Sequence[str] = ()):
    """Per-step kernel breakdowns of several runs stacked, with the varied config ``fields``.

    One row per (run, kernel, phase): the :func:`gnnrec_lab.memory.analysis.breakdown`
    columns (measured seconds, share, bytes, flops, intensity) with ``seconds``,
    ``bytes``, ``random_bytes`` and ``flops`` divided by the run's training steps,
    so runs of different lengths compare per step; plus ``run`` (0-based index),
    ``label`` (the fields as text) and the fields themselves.
    """
    import pandas as pd

    from gnnrec_lab.memory.analysis import breakdown
    frames = []
    for i, r in enumerate(results):
        res = StoredResult.from_dict(r if hasattr(r, "to_dict") else dict(r))
        bd = breakdown(pd.DataFrame(res.kernels))
        steps = max(int(res.steps or 1), 1)
        for col in ("seconds", "bytes", "random_bytes", "flops"):
            bd[col] = bd[col] / steps
        cfg = res.config
        bd.insert(0, "run", i)
        bd.insert(1, "label", " ".join(f"{f}={cfg.get(f)}" for f in fields) or f"run {i}")
        for f in fields:
            bd[f] = cfg.get(f)
        frames.append(bd)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
