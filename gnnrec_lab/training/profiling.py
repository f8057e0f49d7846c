"""Checks of the recorder against an outside clock: torch.profiler, and the step's wall time.

Two measurements of issue 3 ("kernel recording targets"), both through :func:`gnnrec_lab.training.loop.train`
(the real training loop, observed by a :class:`~gnnrec_lab.training.reporting.Reporter`, never copied):

* :func:`profiler_agreement` - the same steps recorded by our :class:`~gnnrec_lab.util.recorder.Recorder`
  and by ``torch.profiler``; one row per recorded kernel x phase with both totals and their ratio.
  The kernels are ``torch.autograd.Function`` subclasses; the profiler shows each call's forward
  under the class name (``_SpMM``) and its backward node as ``<Class>Backward``. Our records of a
  call cover the Function's body (the kernel, its argument conversion and output allocation) and
  lie *inside* that event, so ours / profiler is at most about 1 and falls short by autograd's
  own per-call bookkeeping. :func:`agreement_by_kernel` sums the rows per kernel.
  The optimizer record is compared with torch's own ``Optimizer.step#<Class>.step`` event.
  Records of plain timed blocks (``bpr_sample``, ``sample_wait``) have no profiler event
  and are listed with ``profiler_s`` NaN; profiler kernel events that no record matched are
  listed with ``ours_s`` NaN (a kernel call that escaped recording).
* :func:`step_overhead` - wall time per step against the sum of that step's records (the share
  of a step spent inside recorded kernels), with the records' phases.
  :func:`unrecorded_gaps` attributes the rest using a profiler trace: the torch ops that ran
  outside every kernel event, by name.

Records are matched to profiler events in call order, per direction (forward/backward): the
n-th recorded call of a kernel is the n-th profiler event of a compatible Function class.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Optional

import pandas as pd
import torch

from gnnrec_lab.training.reporting import Reporter

# recorded kernel name -> the Function class that records it; other names (lincomb's and
# elementwise's caller-chosen names) may match any Function class not listed here
KERNEL_CLASSES = {"spmm": ("_SpMM", "_LayerMean", "_LayerMeanRows"), "sddmm_dot": ("_SDDMM",),
                  "sddmm_mul": ("_SDDMM",), "spmm_edge": ("_SpMMEdge",), "gather": ("_Gather",),
                  "scatter_add": ("_Gather", "_LayerMeanRows"), "gemm": ("_GEMM",), "bpr_loss": ("_RowsLoss",),
                  "l2_reg": ("_RowsLoss", "_LayerMean", "_LayerMeanRows"), "permute": ("_LayerMean",)}
# Functions whose one call records several kernels: _LayerMean (and _LayerMeanRows) records one spmm
# per layer (forward layers ascending, backward descending, then the L2 gradient a loss left to it),
# _RowsLoss bpr_loss then l2_reg; the event's time is shared among them
MULTI_RECORD_CLASSES = {"_LayerMean", "_LayerMeanRows", "_RowsLoss"}
# records of timed blocks that are not autograd Functions (no profiler event of their own)
PLAIN_BLOCKS = {"bpr_sample", "sample_wait", "sample_subgraph", "row_fetch", "row_writeback",
                "sparse_adam"}
OPTIMIZER_EVENT = "Optimizer.step#"
AGREEMENT_COLUMNS = ("kernel", "phase", "profiler_event", "calls", "ours_s", "profiler_s", "ratio")


def function_classes() -> set[str]:
    """Names of the autograd Functions the kernels define (what the profiler shows): the classes
    defined in any module of :mod:`gnnrec_lab.kernels` (its ``__init__`` imports them all)."""
    import sys

    import gnnrec_lab.kernels  # noqa: F401  (loads every kernel module)
    mods = [m for name, m in list(sys.modules.items()) if name.startswith("gnnrec_lab.kernels.") and m is not None]
    return {c.__name__ for mod in mods for c in vars(mod).values()
            if isinstance(c, type) and issubclass(c, torch.autograd.Function) and c is not torch.autograd.Function
            and c.__module__ == mod.__name__}


class _StepWindow(Reporter):
    """Collects the records and wall times of steps ``warmup+1 .. warmup+steps`` (1-based) and,
    if given a profiler, runs it over exactly those steps (started at the end of step ``warmup``)."""

    def __init__(self, warmup: int, steps: int, profiler=None):
        self.warmup, self.steps, self.prof = warmup, steps, profiler
        self.records: list = []          # per kept step: its records
        self.seconds: list = []          # per kept step: train()'s own step time
        self.between: list = []          # per kept step: wall time between consecutive on_step calls
        self.faults: list = []           # per kept step: the process's minor page faults since the last step
        self._last = None
        self._faults = 0
        self.active = False

    def on_step(self, step, epoch, loss, seconds, records):
        import resource
        import time
        now = time.perf_counter()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if self.warmup < step <= self.warmup + self.steps:
            self.records.append(list(records))
            self.seconds.append(seconds)
            self.between.append(now - self._last)
            self.faults.append(faults - self._faults)
        self._faults = faults
        if self.prof is not None and step == self.warmup:
            self.prof.start()
            self.active = True
        if self.prof is not None and step == self.warmup + self.steps:
            self.prof.stop()
            self.active = False
        self._last = time.perf_counter()

    def should_stop(self) -> bool:
        return len(self.records) >= self.steps


def _window_config(config, warmup: int, steps: int):
    """``config`` cut to one epoch of ``warmup + steps`` steps with a cheap evaluation."""
    return dataclasses.replace(config, epochs=1, max_steps_per_epoch=warmup + steps, patience=0,
                               eval_users=min(config.eval_users or 64, 64), target_recall=None)


def _run_window(config, warmup, steps, profiler=None, dataset=None) -> _StepWindow:
    from gnnrec_lab.training.loop import train
    if warmup < 1 or steps < 1:
        raise ValueError(f"warmup and steps must be >= 1, got {warmup} and {steps}")
    win = _StepWindow(warmup, steps, profiler)
    try:
        train(_window_config(config, warmup, steps), reporter=win, dataset=dataset)
    finally:
        if win.active:
            profiler.stop()
    if len(win.records) < steps:
        raise ValueError(f"the run ended after {len(win.records)} measured steps, {steps} asked "
                         f"(fewer training interactions than (warmup + steps) x batch_size?)")
    return win


def _kernel_events(events, classes: set[str]):
    """(direction, class/event name, seconds, event) of the profiler's kernel events, in start order."""
    out = []
    for ev in events:
        name = ev.name
        if name in classes:
            out.append(("forward", name, ev))
        elif name.endswith("Backward") and name[:-len("Backward")] in classes:
            out.append(("backward", name[:-len("Backward")], ev))
        elif name.startswith(OPTIMIZER_EVENT) and name.endswith(".step"):
            out.append(("optimizer", name, ev))
    out.sort(key=lambda t: t[2].time_range.start)
    return [(d, c, ev.time_range.elapsed_us() / 1e6, ev) for d, c, ev in out]


def _compatible(record_name: str, cls: str) -> bool:
    want = KERNEL_CLASSES.get(record_name)
    return cls in want if want is not None else all(cls not in v for v in KERNEL_CLASSES.values())


def _same_call(prev, r, direction: str) -> bool:
    """Whether record ``r`` continues ``prev``'s call of a multi-record Function."""
    if r.phase != prev.phase:
        return False
    if r.name == "l2_reg":
        return prev.name == ("bpr_loss" if direction == "forward" else "spmm")
    step = 1 if direction == "forward" else -1
    return r.name == prev.name == "spmm" and r.layer == prev.layer + step


def match_records(records, events, classes: Optional[set] = None, optimizer: Optional[str] = None):
    """Pair kernel records with profiler events in call order.

    Returns ``(pairs, unmatched_events)``: ``pairs`` holds ``(record, event_label, profiler_seconds)``
    for every record (label None and seconds NaN for a record with no event), ``unmatched_events``
    ``(event_label, seconds)`` for kernel events no record claimed."""
    classes = function_classes() if classes is None else classes
    evs = _kernel_events(events, classes)
    queues = {d: [e for e in evs if e[0] == d] for d in ("forward", "backward", "optimizer")}
    pos = {d: 0 for d in queues}
    pairs = []
    records = list(records)
    i = 0
    while i < len(records):
        r = records[i]
        if r.phase == "optimizer":
            d = "optimizer" if optimizer is None or r.name == optimizer else None
        elif r.name in PLAIN_BLOCKS:
            d = None
        else:
            d = "backward" if r.phase == "backward" else "forward"
        q = queues.get(d)
        if q is not None and pos[d] < len(q) and (d == "optimizer" or _compatible(r.name, q[pos[d]][1])):
            _, cls, sec, _ = q[pos[d]]
            pos[d] += 1
            label = cls if d == "optimizer" else (cls + ("Backward" if d == "backward" else ""))
            group = [r]
            if cls in MULTI_RECORD_CLASSES:
                while i + len(group) < len(records) and _same_call(group[-1], records[i + len(group)], d):
                    group.append(records[i + len(group)])
            ns = sum(g.ns for g in group)
            for g in group:  # the event's time shared in proportion to each record's own
                pairs.append((g, label, sec * (g.ns / ns if ns else 1 / len(group))))
            i += len(group)
        else:
            pairs.append((r, None, math.nan))
            i += 1
    unmatched = []
    for d, q in queues.items():
        for _, cls, sec, _ in q[pos[d]:]:
            unmatched.append((cls if d != "backward" else cls + "Backward", sec))
    return pairs, unmatched


def agreement_table(pairs, unmatched, steps: int = 1) -> pd.DataFrame:
    """Per kernel x phase: ``calls`` and seconds per step, ours (``ours_s``) and the profiler's
    (``profiler_s``), ``ratio`` = ours / profiler (NaN where one side has no time)."""
    rows: dict = {}
    for r, label, sec in pairs:
        key = (r.name, r.phase, label or "(none)")
        a = rows.setdefault(key, [0, 0.0, 0.0])
        a[0] += 1
        a[1] += r.ns / 1e9
        a[2] += sec
    for label, sec in unmatched:
        key = ("(unrecorded)", "-", label)
        a = rows.setdefault(key, [0, math.nan, 0.0])
        a[0] += 1
        a[2] += sec
    df = pd.DataFrame([(k[0], k[1], k[2], c / steps, o / steps, p / steps) for k, (c, o, p) in rows.items()],
                      columns=list(AGREEMENT_COLUMNS[:-1]))
    df["ratio"] = df["ours_s"] / df["profiler_s"].where(df["profiler_s"] > 0)
    return df.sort_values("ours_s", ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def _profiler():
    from torch.profiler import ProfilerActivity, profile
    return profile(activities=[ProfilerActivity.CPU], record_shapes=False, with_stack=False)


def profiler_agreement(config, *, steps: int = 5, warmup: int = 2, dataset=None) -> pd.DataFrame:
    """Train ``warmup + steps`` full-graph steps of ``config`` (one epoch, cheap evaluation) with
    ``torch.profiler`` running over the last ``steps``; compare its per-kernel totals with the
    records of the same steps. Returns :func:`agreement_table` (per step); ``attrs["steps"]``,
    ``attrs["step_seconds"]`` (median wall per step, under the profiler) are set."""
    prof = _profiler()
    win = _run_window(config, warmup, steps, profiler=prof, dataset=dataset)
    records = [r for step in win.records for r in step]
    pairs, unmatched = match_records(records, prof.events(), optimizer=config.optimizer)
    df = agreement_table(pairs, unmatched, steps)
    df.attrs.update(steps=steps, step_seconds=statistics.median(win.seconds))
    return df


def step_overhead(config, *, steps: int = 10, warmup: int = 3, dataset=None) -> dict:
    """Wall time per step vs the recorded kernel time of the same step, for ``steps`` steps after
    ``warmup`` (no profiler). Returns per-step lists ``step_s`` (train()'s own step time, sampling
    through optimizer), ``loop_s`` (between consecutive steps' ends: adds the loop's bookkeeping),
    ``recorded_s``, ``page_faults`` (the process's minor faults from one step's end to the next);
    ``inside_share`` (median of recorded / step); ``phases``: median recorded
    seconds per phase; ``kernels``: median recorded seconds per (kernel, phase)."""
    win = _run_window(config, warmup, steps, dataset=dataset)
    rec_s = [sum(r.ns for r in step) / 1e9 for step in win.records]
    phases: dict = {}
    kern: dict = {}
    for i, step in enumerate(win.records):
        for r in step:
            phases.setdefault(r.phase, [0.0] * steps)[i] += r.ns / 1e9
            kern.setdefault((r.name, r.phase), [0.0] * steps)[i] += r.ns / 1e9
    return {"steps": steps, "warmup": warmup, "step_s": win.seconds, "loop_s": win.between, "recorded_s": rec_s,
            "page_faults": win.faults,
            "inside_share": statistics.median(r / s for r, s in zip(rec_s, win.seconds)),
            "phases": {p: statistics.median(v) for p, v in phases.items()},
            "kernels": {k: statistics.median(v) for k, v in kern.items()}}


def unrecorded_gaps(config, *, steps: int = 3, warmup: int = 2, dataset=None, top: int = 10) -> pd.DataFrame:
    """Candidates for the unrecorded part of a step, by the profiler: each outermost profiler event
    (a torch op, an autograd engine wrapper, ``Optimizer.zero_grad``...) with the time of the kernel
    events inside it taken out, summed by name per step, largest first. Columns ``event``,
    ``calls``, ``seconds``. Ops inside recorded timed blocks that are not Functions (the BPR loss
    arithmetic) appear too although their time is recorded; plain Python between ops is invisible
    to the profiler."""
    prof = _profiler()
    _run_window(config, warmup, steps, profiler=prof, dataset=dataset)
    classes = function_classes()
    kernel_names = classes | {c + "Backward" for c in classes}

    def is_kernel(ev):
        return ev.name in kernel_names or (ev.name.startswith(OPTIMIZER_EVENT) and ev.name.endswith(".step"))

    def kernel_time(ev):  # seconds of the outermost kernel events below ev
        return sum(c.time_range.elapsed_us() / 1e6 if is_kernel(c) else kernel_time(c) for c in ev.cpu_children)

    tot: dict = {}
    for ev in prof.events():
        p = ev.cpu_parent
        if is_kernel(ev) or (p is not None and not p.name.startswith("ProfilerStep")):
            continue
        a = tot.setdefault(ev.name, [0, 0.0])
        a[0] += 1
        a[1] += ev.time_range.elapsed_us() / 1e6 - kernel_time(ev)
    df = pd.DataFrame([(k, c / steps, s / steps) for k, (c, s) in tot.items()], columns=["event", "calls", "seconds"])
    return df.sort_values("seconds", ascending=False).head(top).reset_index(drop=True)


def agreement_by_kernel(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`agreement_table` rows summed per kernel over its phases (the per-kernel totals of the
    issue's target): ``kernel``, ``ours_s``, ``profiler_s``, ``ratio``; rows without a profiler
    event (timed blocks) or without a record are left out."""
    paired = df[(df["ratio"] == df["ratio"]) & (df["profiler_event"] != "(none)")]
    out = paired.groupby("kernel", sort=False)[["ours_s", "profiler_s"]].sum().reset_index()
    out["ratio"] = out["ours_s"] / out["profiler_s"]
    return out.sort_values("profiler_s", ascending=False).reset_index(drop=True)


def agreement_verdict(df: pd.DataFrame, tolerance: float = 0.10) -> pd.Series:
    """Per row: "met" when ``|ratio - 1| <= tolerance``, "NOT met" otherwise, "-" without a ratio."""
    return df["ratio"].map(lambda r: "-" if not (r == r) else ("met" if abs(r - 1) <= tolerance else "NOT met"))
