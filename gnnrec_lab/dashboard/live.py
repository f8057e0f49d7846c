"""Live page: one run as it trains.

The run trains in its own process (the runner's worker); this page only reads
the store. :meth:`LiveMonitor.poll` asks the store for steps after the last one
seen and pushes them into ``hv.streams.Buffer`` s, which redraw the loss curve
and the per-kernel stacked area without resending old points. A served page
calls ``poll`` once a second (``pn.state.add_periodic_callback``), so a new
step shows within about a second of the worker committing it; a notebook or a
test calls it directly.

Reads per poll are proportional to what is new: the steps after the last one
seen (``Store.latest_steps``) and the kernel totals over those steps, summed in
SQL (``Store.kernel_totals_frame(since_step=...)``), both in one read
transaction so they cover the same steps. The run's per-step kernel history is
read once, when the run is first shown. When several steps arrive between two
polls, the stacked area gets one point for them (at the newest step: each
kernel's mean ms per step over them).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Optional

import pandas as pd
import panel as pn
import param

from .common import FAILED_STATUSES, Lab, error_note, fmt_bytes, fmt_seconds, not_available, run_options, safe_call

POLL_MS = 1000
ACTIVE = ("queued", "running")
LOSS_COLUMNS = {"step": pd.Series(dtype=float), "loss": pd.Series(dtype=float)}
KERNEL_COLUMNS = {"step": pd.Series(dtype=float), "name": pd.Series(dtype=object),
                  "ms": pd.Series(dtype=float)}


def progress_eta(done: int, total: Optional[int], elapsed_s: float) -> tuple[Optional[float], Optional[float]]:
    """``(percent, eta_s)`` after ``done`` of ``total`` steps in ``elapsed_s`` seconds.

    The ETA assumes the remaining steps take the mean time of the finished
    ones; both are None when unknown (no total, or nothing done yet).
    """
    if not total or total <= 0:
        return None, None
    pct = 100.0 * min(done, total) / total
    if done <= 0 or elapsed_s <= 0:
        return pct, None
    return pct, elapsed_s / done * max(0, total - done)


def kernel_ms_per_step(kernels: pd.DataFrame) -> pd.DataFrame:
    """Long frame ``step, name, ms``: each kernel's summed time (ms) in each step."""
    if kernels is None or kernels.empty:
        return pd.DataFrame(KERNEL_COLUMNS)
    g = kernels.groupby(["step", "name"], as_index=False)["ns"].sum()
    return pd.DataFrame({"step": g["step"].astype(float), "name": g["name"].astype(object),
                         "ms": g["ns"].astype(float) / 1e6})


def kernel_ms_since(totals: pd.DataFrame, step: int, n_steps: int) -> pd.DataFrame:
    """Long frame ``step, name, ms``: each kernel's mean ms per step over the ``n_steps`` newest steps.

    ``totals`` is ``Store.kernel_totals_frame`` over those steps (ns summed per name,
    phase, layer, pattern); every row gets x = ``step`` (the newest of them).
    """
    if totals is None or totals.empty or n_steps <= 0:
        return pd.DataFrame(KERNEL_COLUMNS)
    g = totals.groupby("name", as_index=False)["ns"].sum()
    return pd.DataFrame({"step": float(step), "name": g["name"].astype(object),
                         "ms": g["ns"].astype(float) / 1e6 / n_steps})


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


def stacked_area(data: pd.DataFrame, top: int = 8):
    """Stacked areas of ms per step by kernel; kernels past the ``top`` longest merge into 'other'."""
    import holoviews as hv
    opts = dict(responsive=True, height=300, xlabel="step", ylabel="ms per step (measured)", tools=["hover"])
    ov = dict(title="Kernel time per step (measured)", legend_position="right", responsive=True, height=300)
    if data is None or data.empty:
        return hv.Overlay([hv.Area([], "step", "ms")]).opts(hv.opts.Area(**opts), hv.opts.Overlay(**ov))
    order = data.groupby("name")["ms"].sum().sort_values(ascending=False).index
    keep = set(order[:top])
    d = data.assign(name=data["name"].where(data["name"].isin(keep), "other"))
    wide = d.pivot_table(index="step", columns="name", values="ms", aggfunc="sum", fill_value=0.0)
    cols = [c for c in list(order[:top]) + ["other"] if c in wide.columns]
    areas = hv.Overlay([hv.Area((wide.index.values, wide[c].values), "step", "ms", label=str(c)) for c in cols])
    return hv.Area.stack(areas).opts(hv.opts.Area(**opts), hv.opts.Overlay(**ov))


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
    compiling = param.Boolean(default=False, doc="the run is compiling its kernels (numba, no disk cache yet)")

    def __init__(self, **params):
        import holoviews as hv
        super().__init__(**params)
        self.loss = hv.streams.Buffer(pd.DataFrame(LOSS_COLUMNS), length=200_000, index=False)
        self.kernels = hv.streams.Buffer(pd.DataFrame(KERNEL_COLUMNS), length=2_000_000, index=False)
        self.last_step = 0
        self._pid = None
        self.poll()

    @param.depends("run_id", watch=True)
    def _reset(self):
        self.last_step, self.done, self.total, self.rss_bytes, self._pid = 0, 0, None, None, None
        self.loss.clear()
        self.kernels.clear()
        self.evals = None
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
        spe = info.get("steps_per_epoch")
        if spe and cfg.get("epochs"):
            self.total = int(spe) * int(cfg["epochs"])
        ks = None
        with read_snapshot(store):
            new, _ = safe_call(store.latest_steps, self.run_id, self.last_step)
            n_new = 0 if new is None else len(new)
            if n_new and self.last_step <= 0:      # first look at this run: its whole history, per step
                hist, _ = safe_call(store.kernels_frame, self.run_id)
                ks = kernel_ms_per_step(hist)
            elif n_new:                            # only the new steps, summed in SQL
                tot, _ = safe_call(store.kernel_totals_frame, self.run_id, self.last_step)
                ks = kernel_ms_since(tot, int(new["step"].max()), int(new["step"].nunique()))
        if n_new:
            self.loss.send(pd.DataFrame({"step": new["step"].astype(float), "loss": new["loss"].astype(float)}))
            if ks is not None and not ks.empty:
                self.kernels.send(ks)
            self.last_step = int(new["step"].max())
            self.done = self.last_step
            ev, _ = safe_call(store.evals_frame, [self.run_id])
            self.evals = ev
        elif self.status not in ACTIVE and self.evals is None:
            ev, _ = safe_call(store.evals_frame, [self.run_id])
            self.evals = ev
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

    def eta(self):
        return progress_eta(self.done, self.total, self.elapsed_s)


class LivePage(pn.viewable.Viewer):
    """Progress with ETA, loss and validation metrics, kernel time per step, RSS, Cancel."""

    lab = param.ClassSelector(class_=Lab)
    monitor = param.ClassSelector(class_=LiveMonitor)

    def __init__(self, lab: Lab, **params):
        super().__init__(lab=lab, **params)
        self.monitor = LiveMonitor(lab=lab, run_id=self._default_run())
        self.selector = pn.widgets.Select(name="run", options=self._options(), value=self.monitor.run_id,
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
                   "monitor.compiling")
    def header(self):
        m = self.monitor
        pct, eta = m.eta()
        if pct is None:  # unknown total: busy stripes while active, else full or empty
            pct = -1 if m.status in ACTIVE else (100 if m.status == "finished" else 0)
        self.progress.value = int(pct)
        self.cancel_button.disabled = m.status not in ACTIVE
        total = f"{m.total:,}" if m.total else "?"
        rss = fmt_bytes(m.rss_bytes) + " (measured now)" if m.rss_bytes else "–"
        status = (f"{m.status} (compiling kernels)" if m.compiling
                  else f'<span style="color:#d62728">{m.status}</span>' if m.status in FAILED_STATUSES else m.status)
        text = (f"**status** {status} · **steps** {m.done:,} / {total} · "
                f"**elapsed** {fmt_seconds(m.elapsed_s)} · **ETA** {fmt_seconds(eta) if m.status in ACTIVE else '–'}"
                f" · **worker RSS** {rss}")
        parts = [pn.pane.Markdown(text, sizing_mode="stretch_width")]
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
