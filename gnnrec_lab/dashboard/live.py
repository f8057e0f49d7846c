"""Live page: one run as it trains.

The run trains in its own process (the runner's worker); this page only reads
the store. :meth:`RunFeed.refresh` asks the store for steps after the last one
seen and keeps them, one feed per run for every session watching it (twenty open Live
pages cost one read per poll, and one computation of the header and the chart's points);
:meth:`LiveMonitor.poll` brings one session up to the feed and :meth:`LivePage.refresh` then
patches the page: header text only where it changed, the new points streamed into
the Bokeh figures' ``ColumnDataSource`` s (the loss curve, the per-kernel stacked
area), the validation curves replaced when an evaluation arrives. Nothing is
rebuilt per poll, so a served page's one-second poll
(``pn.state.add_periodic_callback``, :meth:`LivePage.tick`) shows a new step within
about a second of the worker committing it; a notebook or a test calls ``tick``.
Selecting another run empties every plot at once (they say "waiting for the first
step" until it has one) and the header is the new run's from that moment.

Reads per poll are proportional to what is new: the steps after the last one
seen (``Store.latest_steps``) and those steps' kernel rows
(``Store.kernels_frame(since_step=...)``), both in one read transaction so they
cover the same steps. The stacked area plots each recorded step (however many
arrive between two polls); past :data:`MAX_CHART_STEPS` steps it plots the mean of
each run of consecutive steps as a flat segment and says so in its title (then redrawn every
:data:`REDRAW_EVERY_S` seconds while the run trains: every point moves with each step).

The ETA comes from the steady-state pace (:func:`steady_eta`), not from the
elapsed time (which holds the interpreter start, the kernel JIT and evaluations).
For a run in a modeled memory mode the header shows its modeled step time, the
value of ``tiermodel.run_step_time`` that the run summary, the store and
``whatif`` show.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Optional

import numpy as np
import pandas as pd
import panel as pn
import param

from gnnrec_lab.config.memory_modes import DEFAULT_MEMORY_MODE, mode_look
from gnnrec_lab.dashboard.common import (
    LOSS_COLOR,
    Lab,
    kernel_color,
    metric_color,
    mode_color,
    mode_swatch,
    not_available,
    run_selector,
    safe_call,
)
from gnnrec_lab.memory.tiermodel import (
    dram_residency,
    mode_device,
    modeled_ratio,
    run_step_time,
    step_times,
    training_kernel_ns,
)
from gnnrec_lab.runs.record import RunRecord, StoredConfig
from gnnrec_lab.services.projection import host_calibration, predicted_footprint
from gnnrec_lab.util.formatting import fmt_bytes, fmt_duration
from gnnrec_lab.util.recorder import STORE_KEY, SUMMED_FIELDS, TOTAL_FIELDS
from gnnrec_lab.util.status import RunStatus

POLL_MS = 1000
LOSS_COLUMNS = {"step": pd.Series(dtype=float), "loss": pd.Series(dtype=float)}
KERNEL_COLUMNS = {"step": pd.Series(dtype=float), "name": pd.Series(dtype=object),
                  "ms": pd.Series(dtype=float)}
# The kernel chart draws every recorded step up to this many steps, then means of equal runs of steps.
MAX_CHART_STEPS = 2000
# A running run's modeled step time is recomputed at most this often (s; the tier model reads the
# device profiles each time); once the run has ended, at the next poll.
MODELED_EVERY_S = 5.0
# Kernel rows (step, kernel) a run's feed keeps for the chart, the newest ones.
MAX_KERNEL_ROWS = 2_000_000
# A Live page's poll reuses its run's feed when another session read it less than this long ago (s).
FRESH_S = 0.8 * POLL_MS / 1000
# Past MAX_CHART_STEPS steps every point of the kernel chart moves with each new step: it is redrawn
# at most this often (s) while the run trains; the header still follows every poll.
REDRAW_EVERY_S = 5.0
# Steps whose pace the ETA looks at (the newest ones).
ETA_WINDOW = 200


def progress_percent(done: int, total: Optional[int]) -> Optional[float]:
    """Percent of ``total`` steps done (None when the total is unknown). The ETA is
    :func:`steady_eta`'s: the mean time of the steps so far would count the start-up,
    the kernel JIT and the evaluations as step time."""
    if not total or total <= 0:
        return None
    return 100.0 * min(done, total) / total


def evaluations_ahead(completed: int, epochs: int, eval_every: int = 1) -> int:
    """Validations still to come after ``completed`` epochs of ``epochs``: every ``eval_every``-th
    epoch end and the last one's (counted in closed form: a run of 100,000 epochs is polled every
    second by every open Live page)."""
    k = max(1, int(eval_every))
    if completed >= epochs:
        return 0
    n = epochs // k - max(0, completed) // k
    return n + (1 if epochs % k else 0)


def steady_eta(timeline: pd.DataFrame, total: Optional[int], *, steps_per_epoch: Optional[int] = None,
               epochs: Optional[int] = None, eval_every: int = 1,
               window: int = ETA_WINDOW) -> tuple[Optional[float], str]:
    """``(eta_s, note)``: seconds left in a run from its steady-state pace.

    ``timeline``: the run's steps so far (``step, epoch, seconds, wall``, as ``Store.steps_frame``).
    The step pace is the median wall time between consecutive steps of one epoch over the newest
    ``window`` steps, so the interpreter start and the kernel JIT (before the first step) and the
    evaluations (between epochs) never enter it. Each evaluation still ahead (every
    ``eval_every``-th epoch end, the last epoch's, and the test evaluation) costs the median pause
    between two epochs less one step; the first pause is left out once later ones are known (it
    holds the evaluation's own warm-up). Before any evaluation is timed, the ETA counts the steps
    only and ``note`` says so. ``(None, reason)`` when nothing can be said yet.
    """
    if not total or total <= 0 or timeline is None or timeline.empty:
        return None, "no steps yet"
    t = timeline.sort_values("step")
    done = int(t["step"].max())
    left = max(0, int(total) - done)
    recent = t.tail(window + 1)
    gaps = recent["wall"].diff()[recent["epoch"].eq(recent["epoch"].shift())].dropna()
    gaps = gaps[gaps >= 0]
    pace = float(gaps.median()) if len(gaps) else float(recent["seconds"].median())
    eta = left * pace
    if not steps_per_epoch or not epochs:
        return eta, "steps only (epochs unknown)"
    firsts = t.groupby("epoch", sort=True).agg(first=("wall", "min"), last=("wall", "max"))
    pauses = (firsts["first"].shift(-1) - firsts["last"] - pace).dropna().clip(lower=0.0)
    if len(pauses) > 1:
        pauses = pauses.iloc[1:]
    completed = done // int(steps_per_epoch)
    ahead = evaluations_ahead(completed, int(epochs), int(eval_every)) + 1   # + the test evaluation
    if pauses.empty:
        return eta, f"steps only: {ahead} evaluation(s) ahead, not yet timed"
    return eta + ahead * float(pauses.median()), "steady-state pace and evaluation time"


def kernel_ms_per_step(kernels: pd.DataFrame) -> pd.DataFrame:
    """Long frame ``step, name, ms``: each kernel's summed time (ms) in each step."""
    if kernels is None or kernels.empty:
        return pd.DataFrame(KERNEL_COLUMNS)
    g = kernels.groupby(["step", "name"], as_index=False)["ns"].sum()
    return pd.DataFrame({"step": g["step"].astype(float), "name": g["name"].astype(object),
                         "ms": g["ns"].astype(float) / 1e6})


def kernel_totals(kernels: pd.DataFrame, into: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Per-step kernel rows summed per (name, phase, layer, pattern), widest ``row_bytes`` kept
    (``Store.kernel_totals_frame``'s grouping), added to ``into``: the tier model's input."""
    keys = list(STORE_KEY)
    parts = [d for d in (into, kernels) if d is not None and not d.empty]
    if not parts:
        return pd.DataFrame(columns=keys + list(TOTAL_FIELDS))
    df = pd.concat([d[keys + list(TOTAL_FIELDS)] for d in parts], ignore_index=True)
    agg = {c: "sum" for c in SUMMED_FIELDS}
    agg["row_bytes"] = "max"
    return df.groupby(keys, as_index=False, sort=False).agg(agg).sort_values("ns", ascending=False,
                                                                             ignore_index=True)


def chart_frame(data: pd.DataFrame, max_steps: int = MAX_CHART_STEPS) -> tuple[pd.DataFrame, int]:
    """Wide frame (index step, one column per kernel, ms) of what the kernel chart draws, and the
    number of steps each point stands for (1: every recorded step). Past ``max_steps`` steps,
    consecutive steps are averaged in equal runs, each drawn flat over the steps it covers."""
    wide = data.groupby(["step", "name"])["ms"].sum().unstack(fill_value=0.0)
    n = len(wide)
    if n <= max_steps:
        return wide, 1
    k = -(-n // max_steps)
    grp = np.arange(n) // k
    means = wide.groupby(grp).mean()
    lo = wide.index.to_series().groupby(grp).min().values
    hi = wide.index.to_series().groupby(grp).max().values
    flat = pd.concat([means.set_index(pd.Index(lo, name="step")), means.set_index(pd.Index(hi, name="step"))])
    return flat.sort_index(kind="stable"), k


def kernel_columns(data: pd.DataFrame, top: int = 8) -> list:
    """The kernels the chart stacks, longest (total ms) first; past the ``top`` longest: 'other'."""
    if data is None or data.empty:
        return []
    order = list(data.groupby("name")["ms"].sum().sort_values(ascending=False).index)
    return [str(c) for c in order[:top]] + (["other"] if len(order) > top else [])


def stack_frame(data: pd.DataFrame, cols: list, max_steps: int = MAX_CHART_STEPS) -> tuple[dict, int]:
    """Columns of the stacked kernel chart for the kernels ``cols`` (:func:`kernel_columns`):
    ``step``, and per kernel ``i`` its ms (``v{i}``), the area's base (``b{i}``) and top (``t{i}``);
    and the number of steps each point stands for (:func:`chart_frame`)."""
    if data is None or data.empty:
        return {"step": []} | {f"{p}{i}": [] for i in range(len(cols)) for p in "vbt"}, 1
    keep = set(c for c in cols if c != "other")
    d = data.assign(name=data["name"].where(data["name"].isin(keep), "other"))
    wide, k = chart_frame(d, max_steps)
    out, base = {"step": wide.index.values.astype(float)}, np.zeros(len(wide))
    for i, c in enumerate(cols):
        v = wide[c].values.astype(float) if c in wide.columns else np.zeros(len(wide))
        out[f"v{i}"], out[f"b{i}"], out[f"t{i}"] = v, base, base + v
        base = base + v
    return out, k


def kernel_title(k: int) -> str:
    """The kernel chart's title: every step drawn, or each point the mean of ``k`` steps."""
    if k > 1:
        return f"Kernel time per step (measured, mean of {k} steps)"
    return "Kernel time per step (measured, every step)"


def clip_bound(values, k: float = 3.0, min_points: int = 5) -> Optional[float]:
    """The robust upper bound of a chart's values past which points are clipped, or None when none
    needs clipping: the 75th percentile plus ``k`` interquartile ranges (at least twice the median,
    so a steady run's few-percent noise is never clipped). One stalled step then no longer sets the
    axis and flattens every other step; fewer than ``min_points`` values are never clipped."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if len(v) < min_points:
        return None
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    bound = max(q3 + k * (q3 - q1), 2.0 * med)
    return float(bound) if bound > 0 and float(v.max()) > bound else None


#: What the kernel chart's clip markers say in its legend (black: a mark, not a series).
CLIPPED_LABEL = "▲ step above the axis (clipped)"


def modeled_label(memory_mode) -> str:
    """The legend entry of a modeled memory mode's series on the kernel chart (the mode's colour, dashed)."""
    return f"{mode_look(memory_mode).short} (modeled)"


def modeled_series(frame: dict, cols: list, modeled: Optional[dict]) -> Optional[np.ndarray]:
    """The kernel chart's modeled series (ms per step) from its stack columns (:func:`stack_frame`)
    and the projection of the run (``tiermodel.run_step_time``'s dict): each kernel's measured ms
    times that kernel's modeled/measured ratio (the whole step's ratio for 'other' and any kernel
    the projection does not list). None without a projection."""
    overall = modeled_ratio(modeled)      # run_step_time's dict or the stored projection, as every view reads it
    if overall is None:
        return None
    per = {}
    for k in modeled.get("kernels") or ():
        m, d = per.get(k["name"], (0.0, 0.0))
        per[k["name"]] = (m + float(k.get("measured_s") or 0.0), d + float(k.get("modeled_s") or 0.0))
    ratio = {n: (d / m if m > 0 else overall) for n, (m, d) in per.items()}
    out = np.zeros(len(frame["step"]))
    for i, c in enumerate(cols):
        out = out + np.asarray(frame[f"v{i}"], dtype=float) * ratio.get(c, overall)
    return out


def update_kernel_axis(fig, modeled: Optional[np.ndarray] = None) -> tuple[Optional[float], int, float]:
    """Set the kernel chart's y axis from its points: up to the largest stack (and modeled value)
    unless :func:`clip_bound` clips; the clipped steps are marked at the top of the axis. Returns
    ``(bound or None, clipped steps, largest value)``."""
    src = fig.renderers[0].data_source
    tops = [c for c in src.data if c.startswith("t")]
    total = np.asarray(src.data[max(tops, key=lambda c: int(c[1:]))], dtype=float) if tops else np.zeros(0)
    steps = np.asarray(src.data.get("step", []), dtype=float)
    line = fig.select_one({"name": "modeled"})
    if line is not None:
        ys = modeled if modeled is not None and len(modeled) == len(steps) else np.full(len(steps), np.nan)
        line.data_source.data = {"step": steps, "ms": ys}
    paired = modeled is not None and len(modeled) == len(total)
    both = np.concatenate([total, modeled]) if paired else total
    finite = both[np.isfinite(both)]
    top = float(finite.max()) if len(finite) else 1.0
    bound = clip_bound(finite)
    over = np.zeros(len(total), dtype=bool)
    if bound is not None:
        over = total > bound
        if paired:
            over |= np.nan_to_num(np.asarray(modeled, dtype=float)) > bound
    mark = fig.select_one({"name": "clipped"})
    if mark is not None:
        mark.data_source.data = {"step": steps[over], "y": np.full(int(over.sum()), (bound or 0.0) * 1.02)}
        mark.visible = bool(over.any())
    end = (bound * 1.08) if bound is not None else max(top, 1e-6) * 1.08
    if fig.y_range.end != end:
        fig.y_range.end = end
    return bound, int(over.sum()), top


def clip_note(bound: Optional[float], clipped: int, top: float) -> str:
    """What the kernel chart's note says about clipped steps (nothing when none is)."""
    if bound is None or not clipped:
        return ""
    what = "1 step is" if clipped == 1 else f"{clipped:,} steps are"
    return (f"*{what} above the axis (up to {top:,.1f} ms): the axis stops at {bound:,.1f} ms (75th percentile "
            f"+ 3 interquartile ranges) so one stalled step does not flatten the others; each clipped step is "
            f"marked ▲ at the top.*")


def stacked_area(data: pd.DataFrame, top: int = 8, max_steps: int = MAX_CHART_STEPS, memory_mode=None):
    """A Bokeh figure of ms per step by kernel stacked, one point per recorded step (see
    :func:`chart_frame`); kernels past the ``top`` longest merge into 'other'. Each kernel has its
    colour of every page (:func:`~.common.kernel_color`); all areas draw from one
    ``ColumnDataSource`` (:func:`stack_frame`'s columns), which the Live page streams new steps into.
    A ``memory_mode`` (a modeled one) adds a dashed line in the mode's colour for its modeled series
    (:func:`modeled_series`, set by :func:`update_kernel_axis`); steps above :func:`clip_bound` are
    clipped and marked."""
    from bokeh.models import ColumnDataSource, Range1d
    from bokeh.plotting import figure
    cols = kernel_columns(data, top)
    frame, k = stack_frame(data, cols, max_steps)
    src = ColumnDataSource(frame)
    fig = figure(height=300, sizing_mode="stretch_width", title=kernel_title(k), x_axis_label="step",
                 y_axis_label="ms per step (measured)", tools="pan,wheel_zoom,box_zoom,reset,save",
                 toolbar_location="right", y_range=Range1d(0, 1))
    for i, c in enumerate(cols):
        fig.varea(x="step", y1=f"b{i}", y2=f"t{i}", source=src, color=kernel_color(c), alpha=0.85,
                  legend_label=c)
    if memory_mode is not None:
        fig.line("step", "ms", source=ColumnDataSource({"step": [], "ms": []}), name="modeled",
                 color=mode_color(memory_mode), line_dash="dashed", line_width=2,
                 legend_label=modeled_label(memory_mode))
    fig.scatter("step", "y", source=ColumnDataSource({"step": [], "y": []}), name="clipped", marker="triangle",
                size=9, color="black", legend_label=CLIPPED_LABEL, visible=False)
    update_kernel_axis(fig)
    if cols:
        fig.add_layout(fig.legend[0], "right")
        fig.legend[0].label_text_font_size = "9pt"
    return fig


def _mode_device(memory_mode, device_profile=None):
    dev, _ = safe_call(mode_device, memory_mode, device_profile)
    return dev


def modeled_text(m: "LiveMonitor") -> str:
    """The Live header's memory-mode line: the mode, its device profile, the run's step and kernel
    time so far (:meth:`LiveMonitor.step_times`, the value every view shows; modeled on the device
    for a modeled mode) and what stays in DRAM."""
    where = dram_residency(m.memory_mode, StoredConfig.of(m._cfg).placement, m._cfg.get("device_profile"))
    st = m.step_times()
    times = f"**{st.text()}**, {st.steps:,} steps" if st.steps else "step time – until the first step"
    mode = f"**memory mode** {mode_swatch(m.memory_mode)}"
    if m.device is None:
        return f"{mode} (measured on this host) · {times}\n\n{where}"
    head = f"{mode} → device profile **{m.device}** (modeled; kernels measured on DRAM)"
    if st.ratio is None and st.steps:
        why = f": {m.modeled_reason}" if m.modeled_reason else " after the first step"
        times += f" · **modeled** –{why}"
    return f"{head} · {times}\n\n{where}"


def _compiling(store, run_id) -> bool:
    """Whether the run said it is compiling kernels and has not reported the compile's end yet."""
    ev, _ = safe_call(store.events_frame, run_id)
    kinds = [] if ev is None else list(ev["kind"])
    return "compiling" in kinds and "jit" not in kinds


class RunFeed:
    """What every Live page watching one run shares: the run's steps, kernel rows, evaluations,
    status and modeled step time as read from the store, and what is derived from them once per
    read (the header's text, the chart's kernel order and points: :meth:`memo`).

    One feed per store and run (:func:`run_feed`): twenty browser sessions on one run's Live page
    cost one store read and one set of pandas aggregations per poll between them, not twenty;
    each session's :class:`LiveMonitor` only takes the rows it has not drawn yet. A read is
    skipped when the last one is younger than ``max_age`` (:meth:`refresh`)."""

    def __init__(self, store, run_id):
        self.store, self.run_id = store, run_id
        self.lock = threading.RLock()
        self.version = 0                  # bumped by every read; memo entries belong to one version
        self.read_at = float("-inf")
        self._memo: dict = {}
        self.missing = False
        self.last_step = 0
        self.status, self.error, self.total, self.elapsed_s, self.rss_bytes = "none", "", None, 0.0, None
        self.cfg, self.info, self.stored_modeled = {}, {}, None
        self.memory_mode, self.device, self.compiling = DEFAULT_MEMORY_MODE.name, None, False
        self.timeline = pd.DataFrame({"step": [], "epoch": [], "seconds": [], "wall": []})
        self.loss = pd.DataFrame(LOSS_COLUMNS)
        self.kernels = pd.DataFrame(KERNEL_COLUMNS)
        self.totals, self.kernel_steps = None, 0          # the tier model's input, as in the store
        self.footprint, self.host = None, None
        self.modeled, self.modeled_reason = None, ""
        self._modeled_dirty, self._modeled_at = False, float("-inf")
        self.evals, self._evals_status = None, None

    @property
    def active(self) -> bool:
        return RunStatus.active(self.status)

    def memo(self, key, fn, version: Optional[int] = None):
        """``fn()``, computed once per read of the feed (``version``: the read the caller's values
        come from; a caller behind the feed computes its own and keeps nothing)."""
        with self.lock:
            if version is not None and version != self.version:
                return fn()
            if key not in self._memo:
                self._memo[key] = fn()
            return self._memo[key]

    def refresh(self, lab, max_age: float = 0.0) -> None:
        """Read what is new in the store (through ``lab``: its runner knows the live status) unless
        the last read is younger than ``max_age`` seconds."""
        with self.lock:
            now = time.monotonic()
            if now - self.read_at < max_age:
                return
            self.read_at = now
            self.version += 1
            self._memo = {}
            self._read(lab, now)

    def _read(self, lab, now: float) -> None:
        store, rid = self.store, self.run_id
        run = lab.run(rid)
        self.missing = run is None
        if run is None:
            return
        self.error = run.get("error") or ""
        self.status = lab.status(rid)
        rec = RunRecord.of(run)
        self.cfg, self.info = rec.config, rec.info
        self.stored_modeled = rec.result.modeled or None   # a finished run's projection, as stored
        self.memory_mode = str(self.cfg.get("memory_mode") or DEFAULT_MEMORY_MODE.name)
        self.device = _mode_device(self.memory_mode, self.cfg.get("device_profile"))
        spe = self.info.get("steps_per_epoch")
        if spe and self.cfg.get("epochs"):
            self.total = int(spe) * int(self.cfg["epochs"])
        kf = None
        with store.snapshot():   # the new steps and their kernel rows from one committed state
            new, _ = safe_call(store.latest_steps, rid, self.last_step)
            n_new = 0 if new is None else len(new)
            if n_new:                              # the new steps' kernel rows, per step
                kf, _ = safe_call(store.kernels_frame, rid, self.last_step)
        if n_new:
            loss = pd.DataFrame({"step": new["step"].astype(float), "loss": new["loss"].astype(float)})
            self.loss = pd.concat([self.loss if len(self.loss) else None, loss], ignore_index=True)
            self.timeline = pd.concat([self.timeline if len(self.timeline) else None,
                                       new[["step", "epoch", "seconds", "wall"]].astype(float)], ignore_index=True)
            if kf is not None and not kf.empty:
                self.kernels = pd.concat([self.kernels if len(self.kernels) else None, kernel_ms_per_step(kf)],
                                         ignore_index=True).tail(MAX_KERNEL_ROWS)
                self.totals = kernel_totals(kf, self.totals)
                self.kernel_steps += int(kf["step"].nunique())
                self._modeled_dirty = True
            self.last_step = int(new["step"].max())
        # Evaluations come between epochs and after the last step (the last validation and the
        # test evaluation): re-read them with new steps, on every status change (the run ending
        # among them) and until the first read.
        if n_new or self.status != self._evals_status or self.evals is None:
            self._evals_status = self.status
            ev, _ = safe_call(store.evals_frame, [rid])
            if ev is not None and (self.evals is None or len(ev) != len(self.evals)):
                self.evals = ev
        # the first model waits for no pace: also when the host was calibrated after the last read
        first = self.device is not None and self.host is None and self.totals is not None
        if first or self._modeled_dirty and (not self.active or now - self._modeled_at >= MODELED_EVERY_S):
            self._modeled_at, self._modeled_dirty = now, False
            self._update_modeled()
        self.compiling = self.status == RunStatus.RUNNING and self.last_step == 0 and _compiling(store, rid)
        self.elapsed_s = float(run.get("duration_s") or 0.0)
        self.rss_bytes = _rss(run) if self.status == RunStatus.RUNNING else None

    def _update_modeled(self):
        """The run's modeled step time so far (``tiermodel.run_step_time``), for modeled modes."""
        if self.device is None:
            self.modeled, self.modeled_reason = None, ""
            return
        if self.host is None:
            self.host, why = host_calibration()
            if self.host is None:
                self.modeled_reason = why or "no host calibration"
                return
        if self.footprint is None:
            fp, _ = safe_call(self.store.footprint_frame, self.run_id)
            self.footprint = predicted_footprint(fp)
        res, why = safe_call(run_step_time, self.totals, self.host, self.cfg, footprint=self.footprint,
                             steps=self.kernel_steps)
        self.modeled, self.modeled_reason = res, (why or "")


def _rss(run: dict) -> Optional[int]:
    """Resident set size (bytes) of the run's worker process, measured now with psutil."""
    import psutil
    pid = run.get("pid")
    if not pid:
        return None
    try:
        return int(psutil.Process(int(pid)).memory_info().rss)
    except (psutil.Error, OSError):
        return None


# The feeds of the runs open on Live pages, newest use last; past FEEDS_KEPT the oldest is dropped
# (a page still holding it keeps reading it alone).
_FEEDS: "OrderedDict[tuple, RunFeed]" = OrderedDict()
_FEEDS_LOCK = threading.Lock()
FEEDS_KEPT = 16


def run_feed(store, run_id) -> RunFeed:
    """The one :class:`RunFeed` of ``run_id`` in ``store`` (the object: each test's store has its
    own; a served dashboard's sessions share the process's store)."""
    key = (id(store), run_id)
    with _FEEDS_LOCK:
        feed = _FEEDS.get(key)
        if feed is None or feed.store is not store:
            feed = _FEEDS[key] = RunFeed(store, run_id)
        _FEEDS.move_to_end(key)
        while len(_FEEDS) > FEEDS_KEPT:
            _FEEDS.popitem(last=False)
        return feed


class Rows:
    """A monitor's view of one of its feed's growing tables (``data``: every row so far)."""

    def __init__(self, columns: dict):
        self._empty = pd.DataFrame(columns)
        self.data = self._empty

    def clear(self) -> None:
        self.data = self._empty


class LiveMonitor(param.Parameterized):
    """One session's view of one run: its :class:`RunFeed`'s values as of this monitor's last
    :meth:`poll` (``loss`` and ``kernels``: the rows so far, ``.data``)."""

    lab = param.ClassSelector(class_=Lab)
    run_id = param.Parameter(default=None)
    status = param.String(default="none")
    done = param.Integer(default=0, doc="steps finished")
    total = param.Integer(default=None, allow_None=True, doc="steps the run will take")
    elapsed_s = param.Number(default=0.0)
    rss_bytes = param.Integer(default=None, allow_None=True, doc="current RSS of the worker (bytes)")
    evals = param.DataFrame(default=None, allow_None=True)
    error = param.String(default="")
    memory_mode = param.String(default=DEFAULT_MEMORY_MODE.name)
    device = param.String(default=None, allow_None=True, doc="device profile a modeled memory mode uses")
    modeled = param.Dict(default=None, allow_None=True,
                         doc="tiermodel.run_step_time over the steps so far (modeled memory modes)")
    modeled_reason = param.String(default="")
    compiling = param.Boolean(default=False, doc="the run is compiling its kernels (numba, no disk cache yet)")

    def __init__(self, **params):
        super().__init__(**params)
        self.loss = Rows(LOSS_COLUMNS)
        self.kernels = Rows(KERNEL_COLUMNS)
        self.last_step = 0
        self._clear_run_state()
        self.poll()

    def _clear_run_state(self):
        self.feed, self.version, self._rows_seen = None, None, 0
        self.timeline = pd.DataFrame({"step": [], "epoch": [], "seconds": [], "wall": []})
        self.totals, self.kernel_steps = None, 0
        self._cfg, self._info, self._stored_modeled = {}, {}, None
        self.modeled, self.modeled_reason = None, ""

    @param.depends("run_id", watch=True)
    def _reset(self):
        self.last_step, self.done, self.total, self.rss_bytes = 0, 0, None, None
        self.loss.clear()
        self.kernels.clear()
        self.evals = None
        self._clear_run_state()
        self.poll()

    @property
    def active(self) -> bool:
        """The run is queued or running (False with no run, or one that could not be read)."""
        return RunStatus.active(self.status)

    @property
    def failed(self) -> bool:
        """The run failed (:attr:`RunStatus.is_failure`, diverged included)."""
        return RunStatus.failure(self.status)

    def poll(self, max_age: float = 0.0) -> int:
        """Bring the monitor up to its run's feed, which reads new steps, kernels, evaluations,
        status and RSS from the store unless another session read them less than ``max_age``
        seconds ago; return how many steps are new to this monitor."""
        store = self.lab.store if self.lab is not None else None
        if store is None or self.run_id is None:
            return 0
        feed = self.feed if self.feed is not None else run_feed(store, self.run_id)
        self.feed = feed
        feed.refresh(self.lab, max_age)
        with feed.lock:
            if feed.missing:
                self.error = f"run {self.run_id} is not in the store"
                return 0
            self.version = feed.version
            self.error, self.status, self.total = feed.error, feed.status, feed.total
            self._cfg, self._info, self._stored_modeled = feed.cfg, feed.info, feed.stored_modeled
            self.memory_mode, self.device = feed.memory_mode, feed.device
            self.timeline, self.totals, self.kernel_steps = feed.timeline, feed.totals, feed.kernel_steps
            self.loss.data, self.kernels.data = feed.loss, feed.kernels
            if feed.evals is not None and (self.evals is None or len(feed.evals) != len(self.evals)):
                self.evals = feed.evals
            self.modeled, self.modeled_reason = feed.modeled, feed.modeled_reason
            self.last_step = self.done = feed.last_step
            self.compiling, self.elapsed_s, self.rss_bytes = feed.compiling, feed.elapsed_s, feed.rss_bytes
            n_new, self._rows_seen = len(feed.loss) - self._rows_seen, len(feed.loss)
        return n_new

    def shared(self, key, fn):
        """``fn()`` (a function of this monitor's values only) computed once per feed read for every
        session on the run (:meth:`RunFeed.memo`)."""
        if self.feed is None:
            return fn()
        return self.feed.memo(key, fn, self.version)

    def step_times(self):
        """The run's :func:`~gnnrec_lab.memory.tiermodel.step_times` so far: its steps' seconds, its
        training kernels, and the projection (the stored one once the run has it, as every other
        view reads; before that the tier model's over the kernels so far)."""
        modeled = self._stored_modeled or self.modeled
        return step_times(float(self.timeline["seconds"].sum()) if len(self.timeline) else None,
                          len(self.timeline), training_kernel_ns(self.totals), self.kernel_steps,
                          modeled=modeled, device=self.device)

    def eta(self):
        """``(percent, eta_s)``; the ETA from :func:`steady_eta` (None when unknown)."""
        eta, _ = self.eta_note()
        return progress_percent(self.done, self.total), eta

    def eta_note(self) -> tuple[Optional[float], str]:
        return steady_eta(self.timeline, self.total, steps_per_epoch=self._info.get("steps_per_epoch"),
                          epochs=self._cfg.get("epochs"), eval_every=self._cfg.get("eval_every") or 1)

    def metrics(self, split: str) -> pd.DataFrame:
        """The run's ``split`` ('valid' | 'test') metrics so far (``epoch, metric, value``); counts
        such as 'users' are left out (metric names with '@' only)."""
        ev = self.evals
        if ev is None or ev.empty:
            return pd.DataFrame({"epoch": [], "metric": [], "value": []})
        return ev[(ev["split"] == split) & ev["metric"].str.contains("@")][["epoch", "metric", "value"]]


def header_text(m: LiveMonitor) -> str:
    """The Live header's first line: run, status, steps, elapsed, ETA and worker RSS, all of the
    monitor's run (read at its latest poll)."""
    eta, eta_note = m.eta_note()
    total = f"{m.total:,}" if m.total else "?"
    rss = fmt_bytes(m.rss_bytes) + " (measured now)" if m.rss_bytes else "–"
    eta_s = fmt_duration(eta, missing="–") if m.active else '–'
    if m.active and eta is not None and eta_note.startswith("steps only"):
        eta_s = f"≥ {eta_s} ({eta_note})"
    status = (f"{m.status} (compiling kernels)" if m.compiling
              else f'<span style="color:#d62728">{m.status}</span>' if m.failed else m.status)
    return (f"**run** #{m.run_id} · **status** {status} · **steps** {m.done:,} / {total} · "
            f"**elapsed** {fmt_duration(m.elapsed_s, missing='–')} · **ETA** {eta_s} · **worker RSS** {rss}")


def test_text(m: LiveMonitor) -> str:
    """The line with the run's test metrics (measured after training), or when they will appear."""
    t = m.metrics("test")
    if t.empty:
        return ("*Test metrics appear when training ends.*" if m.active
                else "*No test metrics recorded for this run.*")
    last = t.groupby("metric", sort=True)["value"].last()
    return f"**test metrics** ({metrics_kind(m)}): " + " · ".join(f"{k} **{v:.4f}**" for k, v in last.items())


def metrics_kind(m: LiveMonitor) -> str:
    """How the test metrics line names them: after training, or partial for a run that stopped before
    its last step (cancelled, failed, stopped early)."""
    if m.total and m.done < m.total and not m.active:
        return f"measured, partial: stopped at step {m.done:,} of {m.total:,}"
    return "measured, after training"


def default_run(runs: pd.DataFrame):
    """The run the Live page shows until one is chosen: a running one, else the newest."""
    if runs is None or runs.empty:
        return None
    active = (runs[runs["status"].map(RunStatus.active)] if "status" in runs.columns
              else runs.iloc[0:0])
    return (active if not active.empty else runs)["id"].max().item()


class LivePage(pn.viewable.Viewer):
    """Progress with ETA, loss and validation metrics, test metrics, kernel time per step, RSS, Cancel.

    Every pane is built once; a poll patches them (Markdown text, data streamed into the plots'
    ``ColumnDataSource`` s), so a one-second poll stays cheap however long the run. Everything
    shown belongs to the selected run from the moment it is selected: a switch empties the
    plots, which say "waiting for the first step" until the run has one.
    """

    lab = param.ClassSelector(class_=Lab)
    monitor = param.ClassSelector(class_=LiveMonitor)
    run_id = param.Parameter(default=None, doc="the run shown (the run selector's)")

    def __init__(self, lab: Lab, **params):
        super().__init__(lab=lab, **params)
        self.monitor = LiveMonitor(lab=lab)
        self.cancel_button = pn.widgets.Button(name="Cancel run", button_type="danger")
        self.cancel_button.on_click(self._on_cancel)
        self.progress = pn.indicators.Progress(name="progress", value=0, max=100, sizing_mode="stretch_width",
                                               height=24, bar_color="primary")
        md = dict(sizing_mode="stretch_width", margin=(2, 10))
        self.status_md = pn.pane.Markdown("", css_classes=["live-status"], **md)
        self.mode_md = pn.pane.Markdown("", css_classes=["live-mode"], **md)
        self.test_md = pn.pane.Markdown("", css_classes=["live-test"], **md)
        self.error_alert = pn.pane.Alert("", alert_type="danger", visible=False, sizing_mode="stretch_width")
        self._header = pn.Column(self.status_md, self.mode_md, self.test_md, self.error_alert,
                                 sizing_mode="stretch_width")
        wait = dict(sizing_mode="stretch_width", min_height=60, styles={"color": "#666"})
        self.loss_wait = pn.pane.Markdown("", css_classes=["live-loss-wait"], **wait)
        self.kernel_wait = pn.pane.Markdown("", css_classes=["live-kernel-wait"], **wait)
        self.eval_wait = pn.pane.Markdown("", css_classes=["live-eval-wait"], **wait)
        # each figure sits in a box that shows or hides it (a Bokeh pane's own ``visible``
        # follows its figure's)
        self.loss_pane = pn.pane.Bokeh(None, sizing_mode="stretch_width")
        self.kernel_pane = pn.pane.Bokeh(None, sizing_mode="stretch_width")
        self.kernel_note = pn.pane.Markdown("", css_classes=["live-kernel-note"], visible=False,
                                            sizing_mode="stretch_width", margin=(0, 10))
        self.eval_pane = pn.pane.Bokeh(None, sizing_mode="stretch_width")
        self.boxes = {p: pn.Column(p, visible=False, sizing_mode="stretch_width", css_classes=[f"live-{n}-plot"])
                      for p, n in ((self.loss_pane, "loss"), (self.kernel_pane, "kernel"), (self.eval_pane, "eval"))}
        self.boxes[self.kernel_pane].append(self.kernel_note)
        self._charted = ()                 # run id whose data the plots hold (none yet)
        self._last_status = None
        self.selector = run_selector(lab, self.param.run_id, default=default_run, css_class="live-select")
        self.monitor.run_id = self.run_id
        self.refresh()
        self._callback = None
        if pn.state.curdoc is not None:  # a live session (server or notebook), not a bare test
            self._callback = pn.state.add_periodic_callback(self.tick, period=POLL_MS)

    # -- selection ----------------------------------------------------------
    @param.depends("run_id", watch=True)
    def _show_run(self):
        self.monitor.run_id = self.run_id      # resets the monitor and reads the new run
        self.refresh()

    def _on_cancel(self, _event):
        run_id = self.monitor.run_id
        if run_id is None:
            return
        if self.lab.runner is None:
            self.monitor.error = f"cancel: the runner is not available ({self.lab.runner_reason})"
            return
        self.cancel_button.disabled = True

        def cancel():  # Runner.cancel waits out grace periods: never on the UI thread
            try:
                self.lab.runner.cancel(run_id)
            except Exception as e:
                self.monitor.error = f"cancel failed: {e}"

        threading.Thread(target=cancel, name=f"cancel-run-{run_id}", daemon=True).start()

    def tick(self):
        """Periodic callback body: poll the store, then patch the header and the plots."""
        try:
            # served: another session's read of this second serves this one; called by hand: read now
            age = FRESH_S if self._callback is not None else 0.0
            self.monitor.poll(max_age=age)
            self.refresh(max_age=age)
        except Exception as e:  # a bad read must not stop the periodic callback
            self.monitor.error = f"{type(e).__name__}: {e}"
            _set(self.error_alert, "object", f"Live view: {self.monitor.error}")
            _set(self.error_alert, "visible", True)

    # -- patching -------------------------------------------------------------
    def refresh(self, max_age: float = 0.0) -> None:
        """Bring every pane up to the monitor's latest poll, changing only what changed (the run
        list as read by any session less than ``max_age`` seconds ago)."""
        m = self.monitor
        prev, self._last_status = self._last_status, m.status
        # the run list follows runs launched elsewhere (the CLI, another tab): their ids, one cheap read
        ids = _run_ids(self.lab.store, max_age) if self.lab.store is not None else None
        prev_ids, self._run_ids = getattr(self, "_run_ids", ids), ids
        if (prev is not None and prev != m.status) or ids != prev_ids:   # the labels carry the status
            self.lab.refresh_runs()
        self._update_header()
        if self._charted != m.run_id:       # another run: nothing of the previous one stays
            self._charted = m.run_id
            self._loss_rows, self._kernel_rows, self._kernel_cols, self._eval_rows = 0, 0, None, -1
            self._kernel_drawn_at = float("-inf")
            self._kernel_modeled = None
            self._eval_metrics = None
            for pane, box in self.boxes.items():
                _set(box, "visible", False)
                pane.object = None
        self._update_loss()
        self._update_kernels()
        self._update_evals()

    def _update_header(self):
        m = self.monitor
        pct = progress_percent(m.done, m.total)   # the ETA itself is header_text's
        if pct is None:  # unknown total: busy stripes while active, else full or empty
            pct = -1 if m.active else (100 if m.status == RunStatus.FINISHED else 0)
        _set(self.progress, "value", int(pct))
        # a finished run has nothing to cancel: the button goes (a faded one read as "not now")
        _set(self.cancel_button, "visible", m.active)
        _set(self.cancel_button, "disabled", not m.active or self.lab.runner is None)
        if m.run_id is None:
            _set(self.status_md, "object", "*No run selected. Launch one on the Launch page.*")
            _set(self.mode_md, "object", "")
            _set(self.test_md, "object", "")
        else:
            _set(self.status_md, "object", m.shared("header", lambda: header_text(m)))
            _set(self.mode_md, "object", m.shared("modeled", lambda: modeled_text(m)))
            _set(self.test_md, "object", m.shared("test", lambda: test_text(m)))
        failed = bool(m.error) and m.failed
        _set(self.error_alert, "object", f"Run {m.status}: {m.error.splitlines()[-1]}" if failed else "")
        _set(self.error_alert, "visible", failed)

    def _waiting(self, what: str) -> str:
        m = self.monitor
        if m.run_id is None:
            return ""
        if m.active:
            return f"*{what} of run #{m.run_id}: waiting for the first step.*"
        return f"*Run #{m.run_id} recorded no steps ({m.status}).*"

    def _show(self, pane, wait, has: bool, text: str) -> None:
        """``pane``'s box when it has data to draw, else its ``wait`` note saying ``text``."""
        _set(wait, "object", "" if has else text)
        _set(wait, "visible", not has)
        _set(self.boxes[pane], "visible", has)

    def _update_loss(self):
        data = self.monitor.loss.data
        if self.loss_pane.object is None and len(data):
            # drawn with its points from the start: a figure sent empty logs Bokeh's "could not set
            # initial ranges" before its first stream arrives
            self.loss_pane.object = _line_figure("Training loss (BPR, measured)", "step", "loss",
                                                 x=data["step"].values, y=data["loss"].values)
            self._loss_rows = len(data)
        if len(data) > self._loss_rows:
            new = data.iloc[self._loss_rows:]
            _source(self.loss_pane.object).stream({"x": new["step"].values, "y": new["loss"].values})
            self._loss_rows = len(data)
        self._show(self.loss_pane, self.loss_wait, bool(len(data)), self._waiting("Training loss"))

    def _update_kernels(self):
        m = self.monitor
        data = m.kernels.data
        has = bool(len(data))
        redraw_due = time.monotonic() - self._kernel_drawn_at >= REDRAW_EVERY_S
        steps = m.kernel_steps        # the steps with kernel rows so far (the feed counts them as they arrive)
        if len(data) != self._kernel_rows and (steps <= MAX_CHART_STEPS or redraw_due or not m.active):
            cols = m.shared("kernel columns", lambda: kernel_columns(data))
            if self._kernel_cols is not None and set(cols) == set(self._kernel_cols):
                cols = self._kernel_cols        # the same kernels keep their place in the stack
            if cols != self._kernel_cols or self.kernel_pane.object is None:
                # new kernels (at the first steps only): a new figure, stacked as ``cols``
                # (``_kernel_cols`` is None whenever the figure is, so ``cols`` is stacked_area's order)
                self.kernel_pane.object = stacked_area(data, memory_mode=m.memory_mode if m.device else None)
                self._kernel_cols = cols
            elif steps > MAX_CHART_STEPS:   # downsampled: every point is redrawn (every few seconds)
                frame, k = m.shared(("stack", tuple(cols)), lambda: stack_frame(data, cols))
                _source(self.kernel_pane.object).data = frame
                _set(self.kernel_pane.object.title, "text", kernel_title(k))
            else:        # the same kernels: only the new steps' points travel to the browser
                last = float(_source(self.kernel_pane.object).data["step"][-1])
                frame, _ = m.shared(("stream", last, tuple(cols)), lambda: stack_frame(data[data["step"] > last], cols))
                _source(self.kernel_pane.object).stream(frame)
            self._kernel_rows, self._kernel_drawn_at = len(data), time.monotonic()
            self._kernel_modeled = None         # the axis and the modeled series follow the new points
        self._update_kernel_axis()
        self._show(self.kernel_pane, self.kernel_wait, has, self._waiting("Kernel time per step"))

    def _update_kernel_axis(self):
        """The kernel chart's modeled series (a modeled memory mode: the run's projection applied to
        each drawn step) and its axis, clipped above :func:`clip_bound` with the clipped steps marked
        and the note saying so; redone when the points or the projection change."""
        m, fig = self.monitor, self.kernel_pane.object
        if fig is None:
            _set(self.kernel_note, "visible", False)
            return
        # the stored projection once the run has one (every view reads it), else the feed's so far
        stored = m._stored_modeled if m._stored_modeled and m._stored_modeled.get("kernels") else None
        modeled = (stored or m.modeled) if m.device else None
        key = (len(_source(fig).data["step"]), id(modeled))
        if getattr(self, "_kernel_modeled", None) == key:
            return
        self._kernel_modeled = key
        series = modeled_series(_source(fig).data, self._kernel_cols or [], modeled)
        note = clip_note(*update_kernel_axis(fig, series))
        if m.device and series is None:
            why = m.modeled_reason or "after the first steps"
            note = (f"*Modeled series ({modeled_label(m.memory_mode)}): not yet – {why}.* " + note).strip()
        _set(self.kernel_note, "object", note)
        _set(self.kernel_note, "visible", bool(note))

    def _update_evals(self):
        v = self.monitor.metrics("valid")
        if len(v) != self._eval_rows:
            self._eval_rows = len(v)
            v = v[v["metric"].isin(chart_metrics(v["metric"].unique()))]
            if not v.empty:
                wide = v.pivot_table(index="epoch", columns="metric", values="value", aggfunc="last").sort_index()
                metrics = [str(c) for c in wide.columns]
                fig = self.eval_pane.object
                if fig is None or self._eval_metrics != metrics:
                    fig = _metrics_figure(metrics)
                    self._eval_metrics = metrics
                data = {"epoch": wide.index.values.astype(float)}
                data.update({f"m{i}": wide[c].values.astype(float) for i, c in enumerate(wide.columns)})
                _source(fig).data = data
                if self.eval_pane.object is not fig:
                    self.eval_pane.object = fig
        m = self.monitor
        if m.run_id is None:
            wait = ""
        elif m.active:
            wait = f"*Validation metrics of run #{m.run_id} appear after its first evaluation.*"
        else:
            wait = f"*Run #{m.run_id} recorded no validation metrics.*"
        self._show(self.eval_pane, self.eval_wait, not v.empty, wait)

    # -- views ----------------------------------------------------------------
    def header(self):
        """The header panes, up to date (the page patches them on every poll)."""
        self._update_header()
        return self._header

    def __panel__(self):
        if self.lab.store is None:
            return not_available("Live view (run store)", self.lab.store_reason)
        return pn.Column(
            "## Live run", pn.Row(self.selector, self.cancel_button, sizing_mode="stretch_width"), self.progress,
            self._header,
            pn.Row(pn.Column(self.loss_wait, self.boxes[self.loss_pane], sizing_mode="stretch_width"),
                   pn.Column(self.eval_wait, self.boxes[self.eval_pane], sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            pn.Column(self.kernel_wait, self.boxes[self.kernel_pane], sizing_mode="stretch_width"),
            sizing_mode="stretch_width")


_RUN_IDS: dict = {}


def _run_ids(store, max_age: float = 0.0) -> Optional[list]:
    """The store's run ids (the Live selector follows runs launched elsewhere), read at most once
    per ``max_age`` seconds for all sessions on ``store``."""
    now = time.monotonic()
    key = id(store)
    hit = _RUN_IDS.get(key)
    if hit is not None and hit[0] is store and now - hit[1] < max_age:
        return hit[2]
    ids = safe_call(store.run_ids)[0]
    _RUN_IDS.clear()          # one store per process (a test's stores one after another)
    _RUN_IDS[key] = (store, now, ids)
    return ids


def _set(obj, name: str, value) -> None:
    """``obj.name = value`` unless it already is: an unchanged value sends nothing to the browser."""
    if getattr(obj, name) != value:
        setattr(obj, name, value)


def _source(fig):
    """The one ColumnDataSource a Live figure draws from."""
    return fig.renderers[0].data_source


def _line_figure(title: str, x_name: str, y_name: str, *, x=(), y=()):
    """A line of ``(x, y)`` points (more are streamed in), drawn with the ones it starts with."""
    from bokeh.models import ColumnDataSource
    from bokeh.plotting import figure
    fig = figure(height=260, sizing_mode="stretch_width", title=title, x_axis_label=x_name, y_axis_label=y_name,
                 tools="pan,wheel_zoom,box_zoom,reset,hover,save", toolbar_location="right")
    fig.line("x", "y", source=ColumnDataSource({"x": list(x), "y": list(y)}), color=LOSS_COLOR, line_width=1.5)
    return fig


def chart_metrics(metrics) -> list:
    """The validation metrics the chart draws: those at the largest K evaluated (``recall@20``,
    ``ndcg@20``, ...; five lines, not ten that crowd it); the test line and ``runs show`` list all."""
    metrics = [str(m) for m in metrics if "@" in str(m)]
    ks = [m.rsplit("@", 1)[1] for m in metrics]
    top = max((int(k) for k in ks if k.isdigit()), default=None)
    return [m for m, k in zip(metrics, ks) if top is None or k == str(top)]


def _metrics_figure(metrics: list):
    """Validation metrics by epoch, one line and markers per metric (columns ``epoch``, ``m{i}``),
    the legend beside the plot, ticks on whole epochs."""
    from bokeh.models import AdaptiveTicker, ColumnDataSource
    from bokeh.plotting import figure
    src = ColumnDataSource({"epoch": []} | {f"m{i}": [] for i in range(len(metrics))})
    k = metrics[0].rsplit("@", 1)[1] if metrics and "@" in metrics[0] else ""
    fig = figure(height=260, sizing_mode="stretch_width", title=f"Validation metrics{' @' + k if k else ''} (measured)",
                 x_axis_label="epoch", y_axis_label="value", tools="pan,wheel_zoom,box_zoom,reset,hover,save",
                 toolbar_location="right")
    for i, name in enumerate(metrics):
        color = metric_color(i)
        fig.line("epoch", f"m{i}", source=src, color=color, legend_label=name, line_width=1.5)
        fig.scatter("epoch", f"m{i}", source=src, color=color, legend_label=name, size=6)
    fig.xaxis.ticker = AdaptiveTicker(min_interval=1, num_minor_ticks=0)   # epochs are whole numbers
    fig.add_layout(fig.legend[0], "right")
    fig.legend.label_text_font_size = "9pt"
    return fig
