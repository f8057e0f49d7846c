"""Compare page: every run in one table, curves of the selected ones, and scaling plots.

The table is a Tabulator (header filters, sort, checkbox selection) paged on the
server, so a store with hundreds of runs loads quickly. Its times are the run's
measured parts (``Store.runs_frame``): training steps (what runs are compared by),
startup and kernel JIT apart, and the whole wall time, rounded to 0.1 s. Selecting rows overlays
their loss and validation Recall@20 curves. Two scatter plots show the mean
epoch time (measured) of every finished run against batch size and against
depth.
"""
from __future__ import annotations

import threading

import pandas as pd
import panel as pn
import param

from ..config import FIELD_DOCS, field_label
from .common import Lab, id_column, not_available, safe_call, status_css

TABLE_COLUMNS = ["id", "name", "status", "measured", "dataset", "model", "layers", "dim", "batch_size",
                 "memory_mode", "train_s", "startup_s", "jit_s", "duration_s", "best_valid_recall@20",
                 "test_recall@20", "last_step", "created"]
# next to the memory mode: the device profile a modeled mode is projected on (None for dram)
TABLE_COLUMNS.insert(TABLE_COLUMNS.index("memory_mode") + 1, "device")
TIME_COLUMNS = ("train_s", "startup_s", "jit_s", "duration_s")
# Column headers in words (the columns keep their names): a config field's label from
# config.FIELD_DOCS without its parenthesis, the rest named here.
TABLE_TITLES = {c: field_label(c).split(" (")[0] for c in TABLE_COLUMNS if c in FIELD_DOCS}
TABLE_TITLES.update({"id": "Run", "status": "Status", "measured": "Time is", "device": "Device (modeled)",
                     "train_s": "Training (s)", "startup_s": "Start-up (s)", "jit_s": "JIT compile (s)",
                     "duration_s": "Duration (s)", "best_valid_recall@20": "Best valid Recall@20",
                     "test_recall@20": "Test Recall@20", "last_step": "Last step", "created": "Created (UTC)"})
MAX_OVERLAY = 12
# Finished runs never change: their mean epoch time is read once per process.
_epoch_cache: dict = {}
_epoch_lock = threading.Lock()


def runs_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs frame reduced to the table's columns (newest first), index = run id."""
    if runs is None or runs.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS).set_index("id")
    idc = id_column(runs)
    df = runs.rename(columns={idc: "id"})
    cols = [c for c in TABLE_COLUMNS if c in df.columns]
    df = df[cols].sort_values("id", ascending=False)
    if "created" in df.columns:
        df["created"] = pd.to_datetime(df["created"], utc=True).dt.strftime("%Y-%m-%d %H:%M")
    for c in TIME_COLUMNS:
        if c in df.columns:
            df[c] = df[c].astype(float).round(1)
    return df.set_index("id")


def epoch_seconds(store, runs: pd.DataFrame) -> pd.DataFrame:
    """Mean measured epoch time (s) of each finished run: ``id, epoch_s`` plus its config columns."""
    if runs is None or runs.empty:
        return pd.DataFrame(columns=["id", "epoch_s"])
    idc = id_column(runs)
    fin = runs[runs["status"] == "finished"] if "status" in runs.columns else runs
    out = []
    for rid in fin[idc].tolist():
        with _epoch_lock:
            key = (id(store), rid)
            if key not in _epoch_cache:
                ep, _ = safe_call(store.epochs_frame, rid)
                _epoch_cache[key] = float(ep["seconds"].mean()) if ep is not None and not ep.empty else None
            val = _epoch_cache[key]
        if val is not None:
            out.append((rid, val))
    es = pd.DataFrame(out, columns=["id", "epoch_s"])
    keep = [c for c in ("model", "dataset", "layers", "dim", "batch_size", "memory_mode") if c in fin.columns]
    return es.merge(fin.rename(columns={idc: "id"})[["id"] + keep], on="id", how="left")


class ComparePage(pn.viewable.Viewer):
    """Run table + overlays of the selected runs + epoch time vs batch size and depth."""

    lab = param.ClassSelector(class_=Lab)
    selected = param.List(default=[], doc="run ids chosen in the table")

    def __init__(self, lab: Lab, **params):
        super().__init__(lab=lab, **params)
        self.table = pn.widgets.Tabulator(
            runs_table(lab.runs()), selectable="checkbox", pagination="remote", page_size=20,
            header_filters=True, disabled=True, sizing_mode="stretch_width", height=560,
            show_index=True, titles=TABLE_TITLES)
        self.table.style.map(status_css, subset=["status"])   # diverged, failed, oom in red
        self.table.param.watch(self._selection, "selection")
        lab.param.watch(lambda e: self.refresh(), "runs_version")

    def refresh(self):
        self.table.value = runs_table(self.lab.runs())

    def _selection(self, event):
        df = self.table.value
        self.selected = [int(df.index[i]) for i in event.new if i < len(df)][:MAX_OVERLAY]

    @param.depends("selected")
    def overlays(self):
        import holoviews as hv
        store = self.lab.store
        if not self.selected:
            return pn.pane.Markdown("*Select runs in the table (checkboxes) to overlay their curves.*")
        loss = []
        for rid in self.selected:
            st, _ = safe_call(store.steps_frame, rid)
            if st is not None and not st.empty:
                loss.append(hv.Curve(st, "step", "loss", label=f"#{rid}"))
        ev, _ = safe_call(store.evals_frame, self.selected)
        rec = []
        if ev is not None and not ev.empty:
            v = ev[(ev["split"] == "valid") & (ev["metric"].str.lower() == "recall@20")]
            rec = [hv.Curve(g, "epoch", "value", label=f"#{rid}") for rid, g in v.groupby("run_id")]
        opts = dict(responsive=True, height=300, legend_position="right", tools=["hover"])
        plots = []
        plots.append(hv.Overlay(loss).opts(title="Training loss (measured)", **opts) if loss
                     else pn.pane.Markdown("*No steps recorded for the selected runs.*"))
        plots.append(hv.Overlay(rec).opts(title="Validation Recall@20", ylabel="recall@20", **opts) if rec
                     else pn.pane.Markdown("*No validation Recall@20 for the selected runs.*"))
        return pn.Row(*[pn.pane.HoloViews(p, sizing_mode="stretch_width") if not isinstance(p, pn.pane.Markdown)
                        else p for p in plots], sizing_mode="stretch_width")

    @param.depends("lab.runs_version")
    def scaling(self):
        import holoviews as hv
        es = epoch_seconds(self.lab.store, self.lab.runs())
        if es.empty:
            return pn.pane.Markdown("*Epoch time vs batch size and depth appears once runs have finished.*")
        opts = dict(size=9, responsive=True, height=300, tools=["hover"], color="model", cmap="Category10",
                    ylabel="epoch time, s (measured)", legend_position="right")
        vdims = ["epoch_s"] + [c for c in ("model", "layers", "batch_size", "dim", "dataset", "id") if c in es]
        by_batch = hv.Scatter(es, "batch_size", [v for v in vdims if v != "batch_size"]).opts(
            title="Epoch time vs batch size", logx=True, **opts)
        by_depth = hv.Scatter(es, "layers", [v for v in vdims if v != "layers"]).opts(
            title="Epoch time vs depth (layers)", **opts)
        return pn.Row(pn.pane.HoloViews(by_batch, sizing_mode="stretch_width"),
                      pn.pane.HoloViews(by_depth, sizing_mode="stretch_width"), sizing_mode="stretch_width")

    @param.depends("lab.runs_version")
    def distributed(self):
        """Full-graph vs DistDGL runs (``gnnrec-lab distributed``), from
        :func:`gnnrec_lab.distributed.comparison_frame` (the notebook's table too)."""
        import holoviews as hv
        from ..distributed import comparison_frame
        df, err = safe_call(comparison_frame, self.lab.store)
        if df is None or df.empty or not (df["engine"] == "distdgl").any():
            return pn.pane.Markdown("*Full-graph vs DistDGL appears once a `gnnrec-lab distributed` run (the DGL "
                                    "lane, `make dgl`) has finished.*" + (f" ({err})" if err else ""))
        df = df[df["dataset"].isin(df.loc[df["engine"] == "distdgl", "dataset"])]
        cols = ["id", "engine", "dataset", "layers", "batch_size", "epoch_s", "time_to_target_s",
                "best_valid_recall@20", "explosion_factor", "batch_ms"]
        table = pn.widgets.Tabulator(df[cols].set_index("id"), disabled=True, sizing_mode="stretch_width",
                                     height=min(400, 60 + 30 * len(df)))
        opts = dict(size=9, responsive=True, height=300, tools=["hover"], color="engine", cmap="Category10",
                    legend_position="right")
        plot = hv.Scatter(df.dropna(subset=["epoch_s"]), "layers", ["epoch_s", "engine", "batch_size", "id"]).opts(
            title="Epoch time by depth: full-graph vs DistDGL (measured)", ylabel="epoch time, s", **opts)
        return pn.Column("### Full-graph vs DistDGL", table, pn.pane.HoloViews(plot, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")

    def __panel__(self):
        if self.lab.store is None:
            return not_available("Compare (run store)", self.lab.store_reason)
        refresh = pn.widgets.Button(name="Refresh", width=100)
        refresh.on_click(lambda e: self.refresh())
        return pn.Column(pn.Row("## Compare runs", refresh), self.table, self.overlays, self.scaling,
                         self.distributed, sizing_mode="stretch_width")
