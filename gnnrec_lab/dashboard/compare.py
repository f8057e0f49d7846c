"""Compare page: every run in one table, curves of the selected ones, and scaling plots.

The table is a Tabulator (header filters, sort, checkbox selection) paged on the
server, so a store with hundreds of runs loads quickly. Its times are the run's
measured parts (``Store.runs_frame``): the mean training step, the training steps (what runs are
compared by), startup and kernel JIT apart, and the whole wall time, to 3 significant digits
(milliseconds as sentences print them); beside the step and training times of a modeled memory mode,
the same times *modeled* on its device (``tiermodel.modeled_seconds``, as ``gnnrec-lab runs`` shows
them). A chooser under the table picks its columns (:data:`DEFAULT_COLUMNS` first) and a button
downloads what it shows as CSV. Selecting rows overlays their loss and validation Recall@20 curves,
each run in its one colour, and draws their time to accuracy (validation Recall@20 against training
time, measured and modeled per memory mode, :func:`time_to_accuracy_chart`). Two scatter plots show
the mean epoch time of every finished run (measured, and modeled for a modeled memory mode)
against batch size and against depth, coloured by memory mode and dataset. "Full graph vs DistDGL"
shows time to target and epoch time by depth for full-graph training on one machine and DistDGL on
P machines (:func:`gnnrec_lab.services.comparison.full_vs_distributed`), the full-graph run's Optane App Direct
and Memory Mode times modeled and hatched.
"""
from __future__ import annotations

import math
import threading
from typing import Optional

import pandas as pd
import panel as pn
import param

from gnnrec_lab.config.memory_modes import DEFAULT_MEMORY_MODE, MEMORY_MODE_TABLE, mode_look
from gnnrec_lab.config.run import FIELD_DOCS, field_label
from gnnrec_lab.dashboard.common import (
    OVERLOADED_LABEL,
    Lab,
    bar_style,
    category_color,
    hatch_hook,
    hv_pane,
    mode_color,
    not_available,
    run_color,
    safe_call,
    status_css,
    tint,
)
from gnnrec_lab.dashboard.downloads import csv_download, shown_rows, table_csv
from gnnrec_lab.dashboard.palettes import ENGINE_COLORS
from gnnrec_lab.memory.tiermodel import fmt_band, modeled_seconds
from gnnrec_lab.runs.store import TEST_METRICS
from gnnrec_lab.services.comparison import best_by_depth, full_vs_distributed, time_to_accuracy
from gnnrec_lab.services.projection import host_calibration
from gnnrec_lab.util.formatting import ms_value, significant
from gnnrec_lab.util.proc import load_cell
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus

# Times measured on this host, each modeled twin beside it (a modeled memory mode's kernels run on
# DRAM here; its twin is tiermodel.modeled_seconds, as `gnnrec-lab runs` shows it). The step is the
# wall step, the kernel time its kernels' part (tiermodel.step_times, every view's).
# The memory mode and the times come first: they are what runs are compared by, and they stay on
# screen where the table is wider than the page.
TABLE_COLUMNS = ["id", "name", "status", "memory_mode", "step_ms", "modeled_step_ms", "kernel_ms", "modeled_kernel_ms",
                 "train_s", "modeled_train_s", "band", "confidence",
                 "dataset", "model", "layers", "dim", "batch_size", "device",
                 "startup_s", "jit_s", "duration_s", "best_valid_recall@20",
                 *[f"test_{m}" for m in TEST_METRICS], "last_step", "load", "created"]
# Column headers in words (the columns keep their names): a config field's label from
# config.FIELD_DOCS without its parenthesis, the rest named here.
TABLE_TITLES = {c: field_label(c).split(" (")[0] for c in TABLE_COLUMNS if c in FIELD_DOCS}
TABLE_TITLES.update({"id": "Run", "status": "Status", "device": "Device (modeled)",
                     "step_ms": "Step ms (measured)", "modeled_step_ms": "Step ms (modeled)",
                     "kernel_ms": "Kernel time ms (measured)", "modeled_kernel_ms": "Kernel time ms (modeled)",
                     "train_s": "Training s (measured)", "modeled_train_s": "Training s (modeled)",
                     "band": "± (modeled: step, training / kernel)", "confidence": "Confidence (modeled)",
                     "startup_s": "Start-up (s)", "jit_s": "JIT compile (s)",
                     "duration_s": "Duration (s)", "best_valid_recall@20": "Best valid Recall@20",
                     "last_step": "Last step", "created": "Created (UTC)",
                     "load": "Load (1-min max / cores)"})
_METRIC_WORDS = {"recall": "Recall", "mrr": "MRR", "ndcg": "NDCG", "hit": "Hit", "precision": "Precision"}
TABLE_TITLES.update({f"test_{m}": "Test " + _METRIC_WORDS[m.split("@")[0]] + "@" + m.split("@")[1]
                     for m in TEST_METRICS})
# The columns the table shows at first (the chooser above it offers every one): identity, the memory
# mode, measured and modeled times with the ± and confidence of the modeled ones, the shape and the
# accuracy, few enough that the page holds them without a horizontal scroll.
DEFAULT_COLUMNS = ["name", "status", "memory_mode", "step_ms", "modeled_step_ms", "kernel_ms", "modeled_kernel_ms",
                   "train_s", "modeled_train_s", "band", "confidence", "dataset", "layers", "best_valid_recall@20"]
# Columns narrower than the share fit_columns gives each (px): a short number under a short header.
NARROW = {"id": 42, "layers": 72, "dim": 55, "batch_size": 70, "last_step": 60}
# the headers a little smaller than the cells: "(measured)" fits a column of a 1400-pixel window
TABLE_CSS = ":host .tabulator .tabulator-col .tabulator-col-title { font-size: 0.8em; }"
# Float columns other than the ms ones (rounded as sentences print them, ms_value) shown to this
# many significant digits.
SIGNIFICANT = 3
MAX_OVERLAY = 12
# Finished runs never change: their mean epoch time is read once per process.
_epoch_cache: dict = {}
_epoch_lock = threading.Lock()


def runs_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs frame reduced to the table's columns (newest first), index = run id."""
    if runs is None or runs.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS).set_index("id")
    df = runs.copy()
    for key in ("step", "modeled_step", "kernel", "modeled_kernel"):   # services.projection's step_times
        if f"{key}_s" in df.columns:   # rounded as every sentence prints them (fmt_ms)
            df[f"{key}_ms"] = [v if v != v else ms_value(v) for v in df[f"{key}_s"].astype(float)]
    if "modeled_step_band" in df.columns:   # tiermodel.model_band, as `gnnrec-lab runs` shows it
        df["band"] = [None if s != s or s is None else f"step {fmt_band(s)} / kernel {fmt_band(k)}"
                      for s, k in zip(df["modeled_step_band"], df["modeled_kernel_band"])]
    if "load_max" in df.columns:   # the machine's load during the run, marked where it exceeded the cores
        df["load"] = [load_cell(m, c, o, OVERLOADED_LABEL) for m, c, o in
                      zip(df["load_max"], df.get("cpus", [None] * len(df)), df.get("overloaded", [None] * len(df)))]
    cols = [c for c in TABLE_COLUMNS if c in df.columns]
    df = df[cols].sort_values("id", ascending=False)
    if "created" in df.columns:
        df["created"] = pd.to_datetime(df["created"], utc=True).dt.strftime("%Y-%m-%d %H:%M")
    for c in df.columns:   # seconds and metrics to SIGNIFICANT digits; the ms columns as fmt_ms prints them
        if c not in ("id", "layers", "dim", "batch_size", "last_step") and not c.endswith("_ms") \
                and pd.api.types.is_float_dtype(df[c]):
            df[c] = [significant(v, SIGNIFICANT) for v in df[c]]
    return df.set_index("id")






def epoch_seconds(store, runs: pd.DataFrame) -> pd.DataFrame:
    """Mean measured epoch time (s) of each finished run: ``id, epoch_s``, ``modeled_epoch_s`` (a
    modeled memory mode: :func:`~gnnrec_lab.memory.tiermodel.modeled_seconds`, else NaN), its config
    columns and ``group`` ("memory mode · dataset", the scatter plots' legend: the mode's short label,
    :func:`~gnnrec_lab.config.memory_modes.mode_look`; a mode the table does not hold by its raw name)."""
    if runs is None or runs.empty:
        return pd.DataFrame(columns=["id", "epoch_s", "modeled_epoch_s", "group"])
    fin = runs[runs["status"] == RunStatus.FINISHED] if "status" in runs.columns else runs
    out = []
    for rid in fin["id"].tolist():
        with _epoch_lock:
            key = (id(store), rid)
            if key not in _epoch_cache:
                ep, _ = safe_call(store.epochs_frame, rid)
                _epoch_cache[key] = float(ep["seconds"].mean()) if ep is not None and not ep.empty else None
            val = _epoch_cache[key]
        if val is not None:
            out.append((rid, val))
    es = pd.DataFrame(out, columns=["id", "epoch_s"])
    keep = [c for c in ("model", "dataset", "layers", "dim", "batch_size", "memory_mode", "modeled_ratio",
                        "modeled_step_band", "confidence") if c in fin.columns]
    es = es.merge(fin[["id"] + keep], on="id", how="left")
    ratio = es["modeled_ratio"] if "modeled_ratio" in es else pd.Series(float("nan"), index=es.index)
    es["modeled_epoch_s"] = pd.Series([modeled_seconds(e, r) for e, r in zip(es["epoch_s"], ratio)],
                                      index=es.index, dtype=float)
    # an epoch is scaled as the step is: its band is the step's (tiermodel.model_band)
    es["modeled_epoch_band"] = (es["modeled_step_band"].astype(float) if "modeled_step_band" in es
                                else pd.Series(float("nan"), index=es.index))
    es["group"] = [f"{mode_look(m).short} · {d}"
                   for m, d in zip(es.get("memory_mode", pd.Series(None, index=es.index, dtype=object)),
                                   es.get("dataset", pd.Series("?", index=es.index)))]
    return es


def table_height(runs: pd.DataFrame, page_size: int = 20) -> int:
    """Pixels for the run table: its rows (a page of them at most), the headers and the pager."""
    return 240 + 34 * max(1, min(page_size, 0 if runs is None else len(runs)))   # headers wrap: 4 lines


def epoch_scatter(es: pd.DataFrame, x: str, title: str, logx: bool = False):
    """Epoch time against ``x``: measured (circles) and modeled (triangles) points of each ``group``
    (memory mode · dataset) in its memory mode's colour (:func:`~.common.mode_color`; the
    ``memory_mode`` column, none: the default mode's). One dataset per plot keeps one colour per
    group (:meth:`ComparePage.scaling` draws a plot per dataset)."""
    import holoviews as hv
    vdims = ["epoch_s", "group", "modeled_epoch_s"] + [c for c in ("model", "layers", "batch_size", "dim", "id")
                                                       if c in es and c != x]
    opts = dict(size=10, tools=["hover"], logx=logx)
    layers = []
    for g, d in es.groupby("group", sort=True):
        color = mode_color(d["memory_mode"].iloc[0] if "memory_mode" in d else None)
        layers.append(hv.Scatter(d, x, vdims, label=str(g)).opts(marker="circle", color=color, **opts))
        mod = d.dropna(subset=["modeled_epoch_s"])
        if not mod.empty:
            layers.append(hv.Scatter(mod.assign(epoch_s=mod["modeled_epoch_s"]), x, vdims,
                                     label=f"{g} (modeled)").opts(marker="triangle", color=color, **opts))
            if "modeled_epoch_band" in mod:   # the modeled epoch's +- (tiermodel.model_band) as error bars
                eb = mod.assign(epoch_s=mod["modeled_epoch_s"],
                                yerr=mod["modeled_epoch_s"] * mod["modeled_epoch_band"].fillna(0.0))
                layers.append(hv.ErrorBars(eb, x, ["epoch_s", "yerr"], label=f"{g} (modeled)").opts(color=color))
    values = sorted({int(v) for v in es[x].dropna()}) if x in es else []
    return hv.Overlay(layers).opts(title=title, ylabel="epoch time, s", xlabel=x.replace("_", " "),
                                   responsive=True, height=300, legend_position="right",
                                   xticks=axis_ticks(values, logx), xlim=axis_limits(values, logx))


def axis_ticks(values: list, log: bool) -> list:
    """Ticks at the values the runs have (batch sizes, depths): a log axis' own ticks at 2047.5 or
    crowded between 512 and 4096 read as nothing; at most 8, thinned evenly past that."""
    if not values:
        return []
    step = max(1, math.ceil(len(values) / 8))
    return [(float(v), f"{v:,}") for v in values[::step]]


def axis_limits(values: list, log: bool) -> Optional[tuple]:
    """Room around the runs' values, so a single value sits inside its axis (a factor of 2 either
    side on a log axis, 1 on a linear one)."""
    if not values:
        return None
    lo, hi = min(values), max(values)
    return (lo / 2, hi * 2) if log else (lo - 1, hi + 1)


class ComparePage(pn.viewable.Viewer):
    """Run table + overlays of the selected runs + epoch time vs batch size and depth."""

    lab = param.ClassSelector(class_=Lab)
    selected = param.List(default=[], doc="run ids chosen in the table")

    def __init__(self, lab: Lab, **params):
        super().__init__(lab=lab, **params)
        lab.load_runs()
        self.table = pn.widgets.Tabulator(
            pn.bind(runs_table, lab.param.runs), selectable="checkbox", pagination="remote", page_size=20,
            header_filters=True, disabled=True, sizing_mode="stretch_width",
            height=pn.bind(table_height, lab.param.runs), show_index=True, titles=TABLE_TITLES,
            # the chosen columns share the page's width, their headers wrapped: no horizontal scroll
            layout="fit_columns", widths=dict(NARROW), configuration={"columnDefaults": {"headerWordWrap": True}},
            stylesheets=[TABLE_CSS])
        self.table.style.map(status_css, subset=["status"])   # diverged, failed, oom in red
        self.table.param.watch(self._selection, "selection")
        # which columns the table shows (every one is offered; the index, the run id, always shows)
        self.columns = pn.widgets.MultiChoice(
            name="Columns", options={TABLE_TITLES.get(c, c): c for c in TABLE_COLUMNS if c != "id"},
            value=list(DEFAULT_COLUMNS), sizing_mode="stretch_width", css_classes=["compare-columns"],
            description="the table's columns; the CSV download holds the same ones")
        self.columns.param.watch(self._show_columns, "value")
        self._show_columns()
        # the table as shown (its rows, the chosen columns, headers in words with units) as CSV
        self.download = csv_download(self.csv, "compare_runs.csv", "Download the table (CSV)", "compare-download")

    def _show_columns(self, *_):
        self.table.hidden_columns = [c for c in TABLE_COLUMNS if c != "id" and c not in self.columns.value]

    def csv(self) -> str:
        """The CSV download: the rows the table shows, the chosen columns in the chooser's order."""
        return table_csv(shown_rows(self.table), TABLE_TITLES, self.columns.value)

    def refresh(self):
        """Re-read the run table (the Refresh button): every page that lists runs follows."""
        self.lab.refresh_runs()

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
                loss.append(hv.Curve(st, "step", "loss", label=f"#{rid}").opts(color=run_color(rid)))
        ev, _ = safe_call(store.evals_frame, self.selected)
        recall_curves = []
        if ev is not None and not ev.empty:
            v = ev[(ev["split"] == "valid") & (ev["metric"].str.lower() == "recall@20")]
            recall_curves = [hv.Curve(g, "epoch", "value", label=f"#{rid}").opts(color=run_color(rid))
                             for rid, g in v.groupby("run_id")]
        opts = dict(responsive=True, height=300, legend_position="right", tools=["hover"])
        plots = []
        plots.append(hv.Overlay(loss).opts(title="Training loss (measured)", **opts) if loss
                     else pn.pane.Markdown("*No steps recorded for the selected runs.*"))
        plots.append(hv.Overlay(recall_curves).opts(title="Validation Recall@20", ylabel="recall@20", **opts)
                     if recall_curves
                     else pn.pane.Markdown("*No validation Recall@20 for the selected runs.*"))
        return pn.Row(*[hv_pane(p) if not isinstance(p, pn.pane.Markdown) else p for p in plots],
                      sizing_mode="stretch_width")

    @param.depends("selected")
    def accuracy(self):
        """The time-to-accuracy section of the selected runs (:meth:`time_to_accuracy`)."""
        if not self.selected:
            return pn.Spacer(height=0)
        return pn.Column(*self.time_to_accuracy(), sizing_mode="stretch_width")

    def time_to_accuracy(self) -> list:
        """Validation Recall@20 against training time of the selected runs, measured (solid) and modeled
        on each memory mode (dashed): :func:`gnnrec_lab.services.comparison.time_to_accuracy`."""
        host, why = host_calibration()
        runs = self.lab.runs
        ratios = ({} if runs is None or runs.empty or "modeled_ratio" not in runs else
                  {int(i): float(r) for i, r in zip(runs["id"], runs["modeled_ratio"]) if r == r})
        df, err = safe_call(time_to_accuracy, self.lab.store, self.selected, host=host, own_ratios=ratios)
        if df is None:
            return [not_available("Time to accuracy", err)]
        if df.empty:
            return [pn.pane.Markdown("*Time to accuracy: no validation Recall@20 for the selected runs.*")]
        notes = [TIME_TO_ACCURACY_NOTE]
        if host is None:
            notes.append(f"*No modeled series: {why}.*")
        notes += [f"*run {rid} on {mode}: {reason}*" for rid, mode, reason in df.attrs.get("reasons", [])[:4]]
        return [pn.pane.Markdown("### Time to accuracy\n\n" + "\n\n".join(notes), sizing_mode="stretch_width",
                                 css_classes=["compare-tta-note"]),
                hv_pane(time_to_accuracy_chart(df), css_classes=["compare-time-to-accuracy"])]

    @param.depends("lab.runs")
    def scaling(self):
        es = epoch_seconds(self.lab.store, self.lab.runs)
        if es.empty:
            return pn.pane.Markdown("*Epoch time vs batch size and depth appears once runs have finished.*")
        note = pn.pane.Markdown(
            "Colour: memory mode (the same on every page), one dataset per plot. **●** measured on this host "
            "(a modeled memory mode's kernels run on its DRAM too); **▲** the same epoch modeled on the "
            "mode's device (the run's modeled/measured kernel-time ratio).", sizing_mode="stretch_width")
        # a dataset's runs on plots of their own: a mode keeps its colour, so two datasets on one plot
        # would share it. One above the other, each the page's width: side by side their legends
        # squeezed the plots
        sets = es.groupby(es["dataset"].fillna("?") if "dataset" in es else pd.Series("?", index=es.index))
        plots = []
        for ds, d in sets:
            where = f"{ds}: " if len(sets) > 1 else ""
            plots += [hv_pane(epoch_scatter(d, "batch_size", f"{where}Epoch time vs batch size", logx=True)),
                      hv_pane(epoch_scatter(d, "layers", f"{where}Epoch time vs depth (layers)"))]
        return pn.Column(note, *plots, sizing_mode="stretch_width")

    @param.depends("lab.runs")
    def distributed(self):
        """Full graph on one machine vs DistDGL on P machines (issue 20): time to target and epoch
        time by depth, each series' best run (:func:`gnnrec_lab.services.comparison.full_vs_distributed`, the
        notebook's and ``bench_headline``'s numbers too), the full-graph run's Optane App Direct and
        Memory Mode times modeled and hatched; below, every run of the comparison (measured)."""
        df, note = full_vs_distributed_frame(self.lab.store)   # one read of the runs for bars and table
        if df is None or df.empty or not (df["engine"] == "distdgl").any():
            return pn.pane.Markdown("*Full-graph vs DistDGL appears once a `gnnrec-lab distributed` run (the DGL "
                                    "lane, `make dgl`) has finished.*" + (f" ({note})" if df is None and note else ""))
        measured = df[df["kind"] == Provenance.MEASURED]
        cols = ["id", "engine", "series", "dataset", "layers", "batch_size", "epoch_s", "target", "time_to_target_s",
                "best_valid_recall@20", "explosion_factor", "batch_ms"]
        table = pn.widgets.Tabulator(measured[cols].set_index("id"), disabled=True, sizing_mode="stretch_width",
                                     height=min(400, 60 + 30 * len(measured)))
        return pn.Column("### Full graph vs DistDGL", *full_vs_distributed_view(self.lab.store, frame=(df, note)),
                         pn.pane.Markdown("Every run of the comparison (measured; time to the same target per "
                                          "depth as the bars):"), table,
                         sizing_mode="stretch_width")

    def __panel__(self):
        if self.lab.store is None:
            return not_available("Compare (run store)", self.lab.store_reason)
        refresh = pn.widgets.Button(name="Refresh", width=100)
        refresh.on_click(lambda e: self.refresh())
        # the chooser and the download under the table they act on
        return pn.Column(pn.Row("## Compare runs", refresh), self.table,
                         pn.Row(self.columns, self.download, sizing_mode="stretch_width"),
                         self.overlays, self.accuracy, self.scaling, self.distributed, sizing_mode="stretch_width")


TIME_TO_ACCURACY_NOTE = (
    "Validation Recall@20 of each selected run against its training time (evaluation excluded). "
    "**Solid**: measured on this host. **Dashed**: the same evaluations at the training time **modeled** on a "
    "memory mode's device (the run's modeled/measured step ratio there; the accuracy is the run's own: the "
    "model learns the same on any memory, only the time moves). Colour: memory mode, the same on every page.")


def time_to_accuracy_chart(df: pd.DataFrame):
    """One curve per series of :func:`~gnnrec_lab.services.comparison.time_to_accuracy`'s frame:
    measured solid, in DRAM's colour (its time is this host's DRAM's), modeled dashed in its memory
    mode's colour, each labelled as the frame names it ("Optane AD · #3 (modeled)", "DRAM · #3 (measured)")."""
    import holoviews as hv
    layers = []
    for (_, series), g in df.groupby(["run_id", "series"], sort=False):
        modeled = g["kind"].iloc[0] == Provenance.MODELED
        color = mode_color(g["memory_mode"].iloc[0] if modeled else DEFAULT_MEMORY_MODE.name)   # measured: on DRAM
        d = g[["train_s", "recall@20", "epoch", "run_id", "kind"]]
        layers.append(hv.Curve(d, "train_s", ["recall@20", "epoch", "run_id", "kind"], label=str(series)).opts(
            color=color, line_dash="dashed" if modeled else "solid", line_width=2 if not modeled else 1.5))
        layers.append(hv.Scatter(d, "train_s", ["recall@20", "epoch", "run_id", "kind"], label=str(series)).opts(
            color=color, size=6, marker="triangle" if modeled else "circle"))
    return hv.Overlay(layers).opts(title="Time to accuracy: validation Recall@20 vs training time "
                                         "(solid measured, dashed modeled)",
                                   xlabel="training time, s", ylabel="validation Recall@20", responsive=True,
                                   height=420, legend_position="right", tools=["hover"])


# -- full graph vs DistDGL by depth (issue 20) --------------------------------------------------------
FULL_VS_DIST_NOTE = ("One machine is C cores and its memory: the full graph runs on one (`gnnrec-lab run --cores C`), "
                     "DistDGL on P of them (`gnnrec-lab distributed --cluster emulated --partitions P "
                     "--cores-per-machine C`). Each bar is that series' best run at that depth (the batch size it "
                     "does best with). The papers' single machine is an Optane one: hatched bars are the full-graph "
                     "run's times **modeled** on Optane App Direct (every tensor class on the device) and Memory "
                     "Mode (DRAM as a cache over its predicted footprint), the run's modeled/measured kernel-time "
                     "ratio on that device times its measured time; solid bars are measured here.")


# One colour per engine on every view of the comparison (the notebook's and bench_headline's figures
# too); a series modeled on a memory mode takes the mode's colour (config.memory_modes), a bf16 one
# the lighter shade of its float32 one. Hatching, not colour, marks the modeled ones. The engines'
# colours are in .palettes with every other palette.
ENGINE_SHORT = {"full": "full", "distdgl": "DistDGL"}


def series_mode(row) -> Optional[str]:
    """The memory mode a comparison row is modeled on (its ``memory_mode``; a frame without the
    column: the mode whose device the row names), None for a measured row."""
    if row["kind"] != Provenance.MODELED:
        return None
    mode = row.get("memory_mode")
    if isinstance(mode, str) and mode:
        return mode
    return next((n for n, m in MEMORY_MODE_TABLE.items() if m.device == row["device"]), str(row["device"]))


def _half(row) -> bool:
    precision = row.get("precision")
    return isinstance(precision, str) and precision != "fp32"


def series_key(row) -> str:
    """Which series a comparison row is: its memory mode when modeled, else its engine; ``_bf16``
    after it for a full-graph run on bf16 rows."""
    key = series_mode(row) or row["engine"]
    return f"{key}_{row['precision']}" if _half(row) else key


def series_color(row) -> str:
    """A comparison row's colour on every view: its memory mode's when modeled
    (:func:`~.common.mode_color`), else its engine's (:data:`ENGINE_COLORS`); a bf16 series the
    lighter shade of its float32 one."""
    mode = series_mode(row)
    if mode is not None:
        return tint(mode_color(mode)) if _half(row) else mode_color(mode)
    return ENGINE_COLORS.get(series_key(row)) or category_color(row["series"])


def series_rank(row) -> int:
    """Where a comparison row's series stands among the bars of a depth: the full graph measured,
    then its memory modes in the table's order, then DistDGL; each float32 series before its bf16 one."""
    mode, names = series_mode(row), list(MEMORY_MODE_TABLE)
    if mode is not None:
        group = 1 + (names.index(mode) if mode in names else len(names))
    else:
        group = 0 if row["engine"] == "full" else 2 + len(names)
    return 2 * group + _half(row)


def series_tag(row) -> str:
    """A bar's short name under its depth: engine (or memory mode's short label) and machines x
    cores, DistDGL's link."""
    mode = series_mode(row)
    name = mode_look(mode).short if mode is not None else ENGINE_SHORT.get(row["engine"], row["engine"])
    mc = f" {int(row['machines'] or 1)}x{int(row['cores_per_machine'])}" \
        if row["cores_per_machine"] == row["cores_per_machine"] and row["cores_per_machine"] else ""
    link = row.get("link_gbit")
    link = "" if link is None or link != link else (" unshaped" if not link else f" {link:g}G")
    return f"{name}{' bf16' if _half(row) else ''}{mc}{link if mode is None and row['engine'] == 'distdgl' else ''}"


def depth_bars(frame: pd.DataFrame, y: str, ylabel: str, title: str):
    """Grouped bars of ``y`` by depth, one per series (its :func:`~gnnrec_lab.services.comparison.best_by_depth`
    run), each series in its colour, modeled ones hatched (:data:`~.common.BAR_STYLES`); None when
    no series has a value."""
    import holoviews as hv

    best = best_by_depth(frame, by=y).dropna(subset=[y])
    if best.empty:
        return None
    rows = best.to_dict("records")
    d = best.assign(depth=[f"{int(x)} layer{'s' if int(x) != 1 else ''}" for x in best["layers"]],
                    bar=[series_tag(r) for r in rows], color=[series_color(r) for r in rows],
                    hatch=[bar_style(k)["hatch_pattern"] for k in best["kind"]],
                    _o=[series_rank(r) for r in rows])
    d = d.sort_values(["layers", "_o", "series"]).drop(columns="_o")
    bars = hv.Dimension("bar", values=list(dict.fromkeys(d["bar"])))   # full, its memory modes, DistDGL
    return hv.Bars(d, ["depth", bars], [y, "series", "kind", "batch_size", "id", "color", "hatch"]).opts(
        color="color", hooks=[hatch_hook()], tools=["hover"], responsive=True, height=340, ylabel=ylabel,
        xlabel="", title=title, multi_level=True, xrotation=0, show_legend=False)


def full_vs_distributed_frame(store, run_ids=None):
    """:func:`gnnrec_lab.services.comparison.full_vs_distributed` of ``run_ids`` (default: every finished run)
    with this host's calibration (never measured on the way): ``(frame, note)``, the note naming
    what could not be modeled."""
    host, why = host_calibration()
    df, err = safe_call(full_vs_distributed, store, run_ids, host=host)
    if df is None:
        return None, err
    notes = [] if host is not None else [f"no modeled Optane bars: {why}"]
    notes += [f"run {rid} on {mode}: {reason}" for rid, mode, reason in df.attrs.get("reasons", [])[:4]]
    return df, "; ".join(notes)


def full_vs_distributed_view(store, run_ids=None, frame=None) -> list:
    """The section's parts: the note, a legend of the series, and per dataset the time-to-target
    and epoch-time bars by depth (notebook 06 shows the same objects for its own ``run_ids``).
    ``frame``: :func:`full_vs_distributed_frame`'s ``(frame, note)`` when the caller has it already."""
    df, note = frame if frame is not None else full_vs_distributed_frame(store, run_ids)
    if df is None or df.empty:
        return [pn.pane.Markdown(f"*No finished full-graph or DistDGL runs to compare.* {note or ''}")]
    parts = [pn.pane.Markdown(FULL_VS_DIST_NOTE + (f"\n\n*{note}*" if note else ""), sizing_mode="stretch_width")]
    first = df.drop_duplicates("series").to_dict("records")
    legend = " &nbsp; ".join(f'<span style="color:{series_color(r)}">■</span> <b>{series_tag(r)}</b>: {r["series"]}'
                             for r in sorted(first, key=series_rank))
    parts.append(pn.pane.HTML(legend, sizing_mode="stretch_width"))
    for ds, g in df.groupby("dataset", sort=True):
        plots = [depth_bars(g, "time_to_target_s", "time to target, s", f"{ds}: time to target by depth"),
                 depth_bars(g, "epoch_s", "epoch time, s", f"{ds}: epoch time by depth")]
        missing = g.groupby("series")["time_to_target_s"].apply(lambda v: v.isna().all())
        if plots[0] is None:
            plots[0] = pn.pane.Markdown(f"*{ds}: no run reached its Recall@20 target (set `--target-recall`).*")
        parts.append(pn.Row(*[hv_pane(p) if p is not None and not isinstance(p, pn.pane.Markdown) else p
                              for p in plots if p is not None], sizing_mode="stretch_width"))
        if missing.any() and plots[0] is not None:
            parts.append(pn.pane.Markdown(f"*Target not reached (no bar): {', '.join(missing[missing].index)}.*"))
    return parts

