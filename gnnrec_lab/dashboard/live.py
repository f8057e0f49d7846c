"""Live page: one run as it trains.

The run trains in its own process (the runner's worker); this page only reads
the store. :meth:`LiveMonitor.poll` asks the store for steps after the last one
seen and pushes them into ``hv.streams.Buffer`` s, which redraw the loss curve
and the per-kernel stacked area without resending old points. A served page
calls ``poll`` once a second (``pn.state.add_periodic_callback``), so a new
step shows within about a second of the worker committing it; a notebook or a
test calls it directly.

Reads per poll are proportional to what is new: the steps after the last one
seen (``Store.latest_steps``) and those steps' kernel rows
(``Store.kernels_frame(since_step=...)``), both in one read transaction so they
cover the same steps. The stacked area plots each recorded step (however many
arrive between two polls); past :data:`MAX_CHART_STEPS` steps it plots the mean of
each run of consecutive steps as a flat segment and says so in its title.

The ETA comes from the steady-state pace (:func:`steady_eta`), not from the
elapsed time (which holds the interpreter start, the kernel JIT and evaluations).
For a run in a modeled memory mode the header shows its modeled step time, the
value of ``tiermodel.run_step_time`` that the run summary, the store and
``whatif`` show.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Optional

import numpy as np
import pandas as pd
import panel as pn
import param

from ..memory.tiermodel import mode_device
from .common import FAILED_STATUSES, Lab, error_note, fmt_bytes, fmt_seconds, not_available, run_options, safe_call

POLL_MS = 1000
ACTIVE = ("queued", "running")
LOSS_COLUMNS = {"step": pd.Series(dtype=float), "loss": pd.Series(dtype=float)}
KERNEL_COLUMNS = {"step": pd.Series(dtype=float), "name": pd.Series(dtype=object),
                  "ms": pd.Series(dtype=float)}
# The kernel chart draws every recorded step up to this many steps, then means of equal runs of steps.
MAX_CHART_STEPS = 2000
# A running run's modeled step time is recomputed at most this often (s; the tier model reads the
# device profiles each time); once the run has ended, at the next poll.
MODELED_EVERY_S = 5.0
# Steps whose pace the ETA looks at (the newest ones).
ETA_WINDOW = 200
_SUM = ("calls", "ns", "bytes_read", "bytes_written", "flops", "random_bytes")


def progress_percent(done: int, total: Optional[int]) -> Optional[float]:
    """Percent of ``total`` steps done (None when the total is unknown). The ETA is
    :func:`steady_eta`'s: the mean time of the steps so far would count the start-up,
    the kernel JIT and the evaluations as step time."""
    if not total or total <= 0:
        return None
    return 100.0 * min(done, total) / total


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
    ahead = sum(1 for e in range(completed + 1, int(epochs) + 1) if e % max(1, int(eval_every)) == 0 or e == epochs)
    ahead += 1   # the test evaluation
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
    keys = ["name", "phase", "layer", "pattern"]
    parts = [d for d in (into, kernels) if d is not None and not d.empty]
    if not parts:
        return pd.DataFrame(columns=keys + list(_SUM) + ["row_bytes"])
    df = pd.concat([d[keys + list(_SUM) + ["row_bytes"]] for d in parts], ignore_index=True)
    agg = {c: "sum" for c in _SUM}
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


@contextlib.contextmanager
def read_snapshot(store):
    """Store reads inside the block see one committed state (one SQLite read transaction).

    The worker commits each step with its kernel rows; without a snapshot a step
    committed between two reads would be counted by one and missed by the other.
    Falls back to plain reads for a store without a SQLite connection.
    """
    con_of = getattr(store, "_con", None)   # store.py offers no public snapshot yet
    con = con_of() if callable(con_of) else None
    if con is None or getattr(con, "in_transaction", True):
        yield
        return
    con.execute("BEGIN")
    try:
        yield
    finally:
        con.execute("COMMIT")   # read-only: nothing to write, ends the snapshot


def stacked_area(data: pd.DataFrame, top: int = 8, max_steps: int = MAX_CHART_STEPS):
    """Stacked areas of ms per step by kernel, one point per recorded step (see :func:`chart_frame`);
    kernels past the ``top`` longest merge into 'other'."""
    import holoviews as hv
    opts = dict(responsive=True, height=300, xlabel="step", ylabel="ms per step (measured)", tools=["hover"])
    ov = dict(title="Kernel time per step (measured, every step)", legend_position="right", responsive=True,
              height=300)
    if data is None or data.empty:
        return hv.Overlay([hv.Area([], "step", "ms")]).opts(hv.opts.Area(**opts), hv.opts.Overlay(**ov))
    order = data.groupby("name")["ms"].sum().sort_values(ascending=False).index
    keep = set(order[:top])
    d = data.assign(name=data["name"].where(data["name"].isin(keep), "other"))
    wide, k = chart_frame(d, max_steps)
    if k > 1:
        ov["title"] = f"Kernel time per step (measured; each flat segment is the mean of {k} steps)"
    cols = [c for c in list(order[:top]) + ["other"] if c in wide.columns]
    areas = hv.Overlay([hv.Area((wide.index.values, wide[c].values), "step", "ms", label=str(c)) for c in cols])
    return hv.Area.stack(areas).opts(hv.opts.Area(**opts), hv.opts.Overlay(**ov))


def _mode_device(memory_mode, device_profile=None):
    dev, _ = safe_call(mode_device, memory_mode, device_profile)
    return dev


def modeled_text(m: "LiveMonitor") -> str:
    """The Live header's memory-mode line: the mode, its device profile and, for a modeled mode,
    the modeled step time so far next to the kernel time measured on DRAM."""
    if m.device is None:
        return f"**memory mode** {m.memory_mode} (measured on this host)"
    head = f"**memory mode** {m.memory_mode} → device profile **{m.device}** (modeled; kernels measured on DRAM)"
    st = m.modeled
    if not st:
        why = f": {m.modeled_reason}" if m.modeled_reason else " after the first step"
        return f"{head} · **modeled step time** –{why}"
    return (f"{head} · **step time {st['modeled_s'] * 1e3:.1f} ms modeled** on {st['device']} "
            f"({st['ratio']:.2f}x the {st['measured_s'] * 1e3:.1f} ms measured on DRAM, {st['steps']} steps; "
            f"placement: {st.get('placement_assumption', '?')})")


def _compiling(store, run_id) -> bool:
    """Whether the run said it is compiling kernels and has not reported the compile's end yet."""
    ev, _ = safe_call(store.events_frame, run_id)
    kinds = [] if ev is None else list(ev["kind"])
    return "compiling" in kinds and "jit" not in kinds


class LiveMonitor(param.Parameterized):
    """Streams of one run read from the store; :meth:`poll` fetches what is new."""

    lab = param.ClassSelector(class_=Lab)
    run_id = param.Parameter(default=None)
    status = param.String(default="none")
    done = param.Integer(default=0, doc="steps finished")
    total = param.Integer(default=None, allow_None=True, doc="steps the run will take")
    elapsed_s = param.Number(default=0.0)
    rss_bytes = param.Integer(default=None, allow_None=True, doc="current RSS of the worker (bytes)")
    evals = param.DataFrame(default=None, allow_None=True)
    error = param.String(default="")
    memory_mode = param.String(default="dram")
    device = param.String(default=None, allow_None=True, doc="device profile a modeled memory mode uses")
    modeled = param.Dict(default=None, allow_None=True,
                         doc="tiermodel.run_step_time over the steps so far (modeled memory modes)")
    modeled_reason = param.String(default="")
    compiling = param.Boolean(default=False, doc="the run is compiling its kernels (numba, no disk cache yet)")

    def __init__(self, **params):
        import holoviews as hv
        super().__init__(**params)
        self.loss = hv.streams.Buffer(pd.DataFrame(LOSS_COLUMNS), length=200_000, index=False)
        self.kernels = hv.streams.Buffer(pd.DataFrame(KERNEL_COLUMNS), length=2_000_000, index=False)
        self.last_step = 0
        self._pid = None
        self._clear_run_state()
        self.poll()

    def _clear_run_state(self):
        self.timeline = pd.DataFrame({"step": [], "epoch": [], "seconds": [], "wall": []})
        self.totals, self.kernel_steps = None, 0          # the tier model's input, as in the store
        self._footprint, self._host, self._cfg, self._info = None, None, {}, {}
        self.modeled, self.modeled_reason = None, ""
        self._modeled_dirty, self._modeled_at = False, float("-inf")

    @param.depends("run_id", watch=True)
    def _reset(self):
        self.last_step, self.done, self.total, self.rss_bytes, self._pid = 0, 0, None, None, None
        self.loss.clear()
        self.kernels.clear()
        self.evals = None
        self._clear_run_state()
        self.poll()

    def poll(self) -> int:
        """Read new steps, kernels, evaluations, status and RSS; return how many steps were new."""
        store = self.lab.store if self.lab is not None else None
        if store is None or self.run_id is None:
            return 0
        rec = self.lab.run(self.run_id)
        if rec is None:
            self.error = f"run {self.run_id} is not in the store"
            return 0
        self.error = rec.get("error") or ""
        self.status = self.lab.status(self.run_id)
        cfg = rec.get("config") or {}
        info = rec.get("info") or {}
        self._cfg, self._info = cfg, info
        self.memory_mode = str(cfg.get("memory_mode") or "dram")
        self.device = _mode_device(self.memory_mode, cfg.get("device_profile"))
        spe = info.get("steps_per_epoch")
        if spe and cfg.get("epochs"):
            self.total = int(spe) * int(cfg["epochs"])
        kf = None
        with read_snapshot(store):
            new, _ = safe_call(store.latest_steps, self.run_id, self.last_step)
            n_new = 0 if new is None else len(new)
            if n_new:                              # the new steps' kernel rows, per step
                kf, _ = safe_call(store.kernels_frame, self.run_id, self.last_step)
        if n_new:
            self.loss.send(pd.DataFrame({"step": new["step"].astype(float), "loss": new["loss"].astype(float)}))
            self.timeline = pd.concat([self.timeline if len(self.timeline) else None,
                                       new[["step", "epoch", "seconds", "wall"]].astype(float)], ignore_index=True)
            if kf is not None and not kf.empty:
                self.kernels.send(kernel_ms_per_step(kf))
                self.totals = kernel_totals(kf, self.totals)
                self.kernel_steps += int(kf["step"].nunique())
                self._modeled_dirty = True
            self.last_step = int(new["step"].max())
            self.done = self.last_step
            ev, _ = safe_call(store.evals_frame, [self.run_id])
            self.evals = ev
        elif self.status not in ACTIVE and self.evals is None:
            ev, _ = safe_call(store.evals_frame, [self.run_id])
            self.evals = ev
        now = time.monotonic()
        if self._modeled_dirty and (self.status not in ACTIVE or now - self._modeled_at >= MODELED_EVERY_S):
            self._modeled_at, self._modeled_dirty = now, False
            self._update_modeled(store)
        self.compiling = self.status == "running" and self.done == 0 and _compiling(store, self.run_id)
        self.elapsed_s = float(rec.get("duration_s") or 0.0)
        self.rss_bytes = self._rss(rec) if self.status == "running" else None
        return n_new

    def _rss(self, rec: dict) -> Optional[int]:
        """Resident set size (bytes) of the run's worker process, measured now with psutil."""
        import psutil
        pid = rec.get("pid")
        if not pid:
            return None
        try:
            return int(psutil.Process(int(pid)).memory_info().rss)
        except (psutil.Error, OSError):
            return None

    def _update_modeled(self, store):
        """The run's modeled step time so far (``tiermodel.run_step_time``), for modeled modes."""
        if self.device is None:
            self.modeled, self.modeled_reason = None, ""
            return
        from .launch import host_calibration
        if self._host is None:
            self._host, why = host_calibration()
            if self._host is None:
                self.modeled_reason = why or "no host calibration"
                return
        if self._footprint is None:
            fp, _ = safe_call(store.footprint_frame, self.run_id)
            if fp is not None and not fp.empty:
                pred = fp[fp["kind"] == "predicted"]
                self._footprint = {r.tensor_class: int(r.bytes) for r in pred.itertuples()} or None
        from ..memory.tiermodel import run_step_time
        res, why = safe_call(run_step_time, self.totals, self._host, self._cfg, footprint=self._footprint,
                             steps=self.kernel_steps)
        self.modeled, self.modeled_reason = res, (why or "")

    def eta(self):
        """``(percent, eta_s)``; the ETA from :func:`steady_eta` (None when unknown)."""
        eta, _ = self.eta_note()
        return progress_percent(self.done, self.total), eta

    def eta_note(self) -> tuple[Optional[float], str]:
        return steady_eta(self.timeline, self.total, steps_per_epoch=self._info.get("steps_per_epoch"),
                          epochs=self._cfg.get("epochs"), eval_every=self._cfg.get("eval_every") or 1)


class LivePage(pn.viewable.Viewer):
    """Progress with ETA, loss and validation metrics, kernel time per step, RSS, Cancel."""

    lab = param.ClassSelector(class_=Lab)
    monitor = param.ClassSelector(class_=LiveMonitor)

    def __init__(self, lab: Lab, **params):
        super().__init__(lab=lab, **params)
        self.monitor = LiveMonitor(lab=lab, run_id=self._default_run())
        self.selector = pn.widgets.Select(name="Run", options=self._options(), value=self.monitor.run_id,
                                          width=360)
        self.selector.param.watch(lambda e: setattr(self.lab, "run_id", e.new), "value")
        self.lab.param.watch(self._lab_run_changed, "run_id")
        self.lab.param.watch(lambda e: self._refresh_options(), "runs_version")
        self.monitor.param.watch(lambda e: self._refresh_options(), "status")
        self.cancel_button = pn.widgets.Button(name="Cancel run", button_type="danger")
        self.cancel_button.on_click(self._on_cancel)
        self.progress = pn.indicators.Progress(name="progress", value=0, max=100, sizing_mode="stretch_width",
                                               height=24, bar_color="primary")
        self._callback = None
        if pn.state.curdoc is not None:  # a live session (server or notebook), not a bare test
            self._callback = pn.state.add_periodic_callback(self.tick, period=POLL_MS)

    # -- selection ----------------------------------------------------------
    def _options(self) -> dict:
        return run_options(self.lab.runs())

    def _refresh_options(self):
        self.selector.options = self._options()
        if self.lab.run_id is not None:
            self.selector.value = self.lab.run_id

    def _default_run(self):
        """The lab's chosen run, else a running one, else the newest."""
        if self.lab.run_id is not None:
            return self.lab.run_id
        runs = self.lab.runs()
        if runs.empty:
            return None
        idc = "id" if "id" in runs.columns else "run_id"
        active = runs[runs["status"].isin(ACTIVE)] if "status" in runs.columns else runs.iloc[0:0]
        return (active if not active.empty else runs)[idc].max().item()

    def _lab_run_changed(self, event):
        if event.new not in self.selector.options.values():
            self.selector.options = self._options()
        self.selector.value = event.new
        self.monitor.run_id = event.new

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
        """Periodic callback body: poll the store and update the progress bar."""
        try:
            self.monitor.poll()
        except Exception as e:  # a bad read must not stop the periodic callback
            self.monitor.error = f"{type(e).__name__}: {e}"

    # -- views ----------------------------------------------------------------
    @param.depends("monitor.done", "monitor.total", "monitor.status", "monitor.rss_bytes", "monitor.error",
                   "monitor.modeled", "monitor.compiling")
    def header(self):
        m = self.monitor
        pct, eta = m.eta()
        if pct is None:  # unknown total: busy stripes while active, else full or empty
            pct = -1 if m.status in ACTIVE else (100 if m.status == "finished" else 0)
        self.progress.value = int(pct)
        self.cancel_button.disabled = m.status not in ACTIVE or self.lab.runner is None
        total = f"{m.total:,}" if m.total else "?"
        rss = fmt_bytes(m.rss_bytes) + " (measured now)" if m.rss_bytes else "–"
        _, eta_note = m.eta_note()
        eta_s = fmt_seconds(eta) if m.status in ACTIVE else '–'
        if m.status in ACTIVE and eta is not None and eta_note.startswith("steps only"):
            eta_s = f"≥ {eta_s} ({eta_note})"
        status = (f"{m.status} (compiling kernels)" if m.compiling
                  else f'<span style="color:#d62728">{m.status}</span>' if m.status in FAILED_STATUSES else m.status)
        text = (f"**status** {status} · **steps** {m.done:,} / {total} · "
                f"**elapsed** {fmt_seconds(m.elapsed_s)} · **ETA** {eta_s}"
                f" · **worker RSS** {rss}")
        parts = [pn.pane.Markdown(text, sizing_mode="stretch_width"),
                 pn.pane.Markdown(modeled_text(m), sizing_mode="stretch_width")]
        if m.error and m.status in FAILED_STATUSES:
            parts.append(error_note(f"Run {m.status}: {m.error.splitlines()[-1] if m.error else ''}"))
        return pn.Column(*parts, sizing_mode="stretch_width")

    # The curves are redrawn from the accumulated buffers when new steps arrive. (Streaming
    # them through hv.DynamicMap left the browser spinning in Bokeh's layout as soon as
    # another tab drew a new plot in the same session, so each redraw is a fresh pane.)
    @param.depends("monitor.done")
    def loss_plot(self):
        import holoviews as hv
        curve = hv.Curve(self.monitor.loss.data, "step", "loss").opts(
            responsive=True, height=260, title="Training loss (BPR, measured)", tools=["hover"])
        return pn.pane.HoloViews(curve, sizing_mode="stretch_width")

    @param.depends("monitor.done")
    def kernel_plot(self):
        return pn.pane.HoloViews(stacked_area(self.monitor.kernels.data), sizing_mode="stretch_width")

    @param.depends("monitor.evals")
    def eval_plot(self):
        import holoviews as hv
        ev = self.monitor.evals
        if ev is None or ev.empty:
            return pn.pane.Markdown("*Validation metrics appear after the first evaluation.*")
        v = ev[(ev["split"] == "valid") & ev["metric"].str.contains("@")]  # metrics, not counts
        if v.empty:
            return pn.pane.Markdown("*No validation metrics yet.*")
        curves = [hv.Curve(g, "epoch", "value", label=str(metric)).opts(tools=["hover"])
                  * hv.Scatter(g, "epoch", "value", label=str(metric)).opts(size=6)
                  for metric, g in v.groupby("metric")]
        curves = [el for ov in curves for el in ov]
        plot = hv.Overlay(curves).opts(responsive=True, height=260, title="Validation metrics", ylabel="value",
                                       legend_position="right")
        return pn.pane.HoloViews(plot, sizing_mode="stretch_width")

    def __panel__(self):
        if self.lab.store is None:
            return not_available("Live view (run store)", self.lab.store_reason)
        return pn.Column(
            "## Live run", pn.Row(self.selector, self.cancel_button), self.progress, self.header,
            pn.Row(self.loss_plot, self.eval_plot, sizing_mode="stretch_width"),
            self.kernel_plot,
            sizing_mode="stretch_width")
