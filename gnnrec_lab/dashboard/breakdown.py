"""Breakdown page: where one run's time and memory went.

For the chosen run: kernel x phase stacked bars (ms per step, measured), each
kernel's share of step time (pie), a roofline scatter against the calibrated
ceilings of this host, the footprint per tensor class against DRAM, and the
measured DRAM step time next to the step time the tier model projects for
Optane / CXL / remote NUMA — those bars hatched and labelled *modeled*. Phases and kernels
keep their colours of every page (:mod:`.common`); hatching alone marks what is modeled.
A run in a modeled memory mode also gets its kernel x phase bars modeled on its
device (``tiermodel.run_step_time``, hatched) next to the measured DRAM ones; the
header names the memory mode and its device profile, and the device profile's modeled curves
(bandwidth against access size, threads and read/write mix: :func:`device_curve_plots`) close
the page.
"""
from __future__ import annotations

import math
from typing import Optional

import pandas as pd
import panel as pn
import param

from gnnrec_lab.config.memory_modes import memory_mode_of
from gnnrec_lab.dashboard.common import (
    BAR_COLOR,
    MODELED_NOTE,
    Lab,
    bar_style,
    dram_bytes,
    hatch_hook,
    hv_pane,
    kernel_color,
    kernel_name,
    mode_swatch,
    modeled_bars,
    not_available,
    phase_color,
    run_selector,
    safe_call,
)
from gnnrec_lab.dashboard.downloads import csv_download, tabulator_csv
from gnnrec_lab.dashboard.palettes import curve_color
from gnnrec_lab.memory.analysis import BOUND_NOTE, ROOFLINE_NOTE, breakdown, roofline_points
from gnnrec_lab.memory.calibrate import host_profile, load
from gnnrec_lab.memory.profiles import get_profile, misses_in_flight
from gnnrec_lab.memory.tiermodel import LOW, fmt_band, mode_device
from gnnrec_lab.memory.validation import device_curves
from gnnrec_lab.runs.record import RunRecord
from gnnrec_lab.services.projection import host_calibration, run_modeled_step, run_step_times, tier_projection
from gnnrec_lab.util.formatting import fmt_bytes, fmt_ms, fmt_percent, significant
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus


def phase_cmap(phases) -> dict:
    """Each phase's colour of every page (:func:`~.common.phase_color`), as a HoloViews cmap."""
    return {str(p): phase_color(str(p)) for p in phases}


def kernel_phase_ms(kernels: pd.DataFrame) -> pd.DataFrame:
    """Mean ms per step of each (kernel, phase): frame ``name, phase, ms`` sorted by total time."""
    if kernels is None or kernels.empty:
        return pd.DataFrame({"name": [], "phase": [], "ms": []})
    n_steps = max(1, kernels["step"].nunique())
    g = kernels.groupby(["name", "phase"], as_index=False)["ns"].sum()
    g["ms"] = g["ns"] / 1e6 / n_steps
    order = g.groupby("name")["ms"].sum().sort_values(ascending=False).index
    g["name"] = pd.Categorical(g["name"], categories=list(order), ordered=True)
    return g.sort_values(["name", "phase"])[["name", "phase", "ms"]].assign(name=lambda d: d["name"].astype(str))


def modeled_kernel_phase_ms(step: Optional[dict]) -> pd.DataFrame:
    """Frame ``name, phase, ms`` of a modeled step (``tiermodel.run_step_time``'s ``kernels``): each
    (kernel, phase)'s modeled ms per step on the device, ordered like :func:`kernel_phase_ms`."""
    if not step or not step.get("kernels"):
        return pd.DataFrame({"name": [], "phase": [], "ms": []})
    g = pd.DataFrame(step["kernels"])
    g["ms"] = g["modeled_s"] * 1e3
    order = g.groupby("name")["measured_s"].sum().sort_values(ascending=False).index
    g["name"] = pd.Categorical(g["name"], categories=list(order), ordered=True)
    return g.sort_values(["name", "phase"])[["name", "phase", "ms"]].assign(name=lambda d: d["name"].astype(str))


def mode_header(run: dict) -> str:
    """What the Breakdown header says about time: measured here, and (modeled memory modes) which
    memory mode and device profile the modeled charts use."""
    cfg = RunRecord.of(run).config
    m = safe_call(memory_mode_of, cfg)[0]
    dev = None if m is None else mode_device(m.name, cfg.get("device_profile"))
    mode = f"memory mode {mode_swatch(cfg)}"
    if m is None:   # a name the table does not hold (an older or hand-edited store row)
        return f"{mode}: not a memory mode this lab knows; every time below is measured on this host"
    if dev is None:
        return f"{mode}: every time below is measured on this host, except the hatched modeled bars"
    return (f"{mode} → device profile **{dev}**: kernel times are measured on this host's "
            f"DRAM; the hatched charts are **modeled** on {dev}")


def kernel_shares(kernels: pd.DataFrame, top: int = 8) -> pd.DataFrame:
    """Share (0..1) of total kernel time per kernel; the tail past ``top`` is summed as 'other'."""
    if kernels is None or kernels.empty:
        return pd.DataFrame({"name": [], "ns": [], "share": []})
    s = kernels.groupby("name")["ns"].sum().sort_values(ascending=False)
    if len(s) > top:
        s = pd.concat([s.iloc[:top], pd.Series({"other": s.iloc[top:].sum()})])
    return pd.DataFrame({"name": s.index.astype(str), "ns": s.values.astype(float),
                         "share": (s / s.sum()).values.astype(float)})


def share_pie(shares: pd.DataFrame):
    """Bokeh pie of ``kernel_shares`` (HoloViews has no pie element)."""
    from bokeh.models import ColumnDataSource
    from bokeh.plotting import figure
    d = shares.copy()
    ends = (d["share"].cumsum() * 2 * math.pi).tolist()
    d["start"] = [0.0] + ends[:-1]
    d["end"] = ends
    d["color"] = [kernel_color(n) for n in d["name"]]
    d["pct"] = [fmt_percent(s) for s in d["share"]]
    fig = figure(height=320, width=460, title="Share of kernel time (measured)", toolbar_location=None,
                 tools="hover", tooltips="@name: @pct", x_range=(-1.0, 2.6), y_range=(-1.0, 1.0))
    fig.wedge(x=0, y=0, radius=0.8, start_angle="start", end_angle="end", color="color",
              line_color="white", legend_field="name", source=ColumnDataSource(d))
    fig.axis.visible = False
    fig.grid.grid_line_color = None
    fig.legend.location = "top_right"
    return fig


def roofline_frame(kernels: pd.DataFrame) -> tuple[Optional[pd.DataFrame], Optional[dict], Optional[str]]:
    """Points and ceilings for the roofline: ``(points, ceilings, None)`` or ``(None, None, reason)``.

    Uses ``gnnrec_lab.memory.analysis.roofline_points`` and the calibrated host profile
    (``triad_GBps`` and ``gemm_GFLOPs`` ceilings, measured by ``gnnrec-lab calibrate``).
    """
    host, why = safe_call(host_profile, measure_if_missing=False)
    if host is None:
        return None, None, why
    pts, why = safe_call(roofline_points, kernels, host)
    if pts is None:
        return None, None, why
    ceilings = {k: host.get(k) if isinstance(host, dict) else getattr(host, k, None)
                for k in ("triad_GBps", "gemm_GFLOPs")}
    return pd.DataFrame(pts), ceilings, None


#: Roofline marker per phase: the colour is the kernel's (as on every chart), the shape its phase.
PHASE_MARKERS = {"forward": "circle", "backward": "triangle", "loss": "square", "optimizer": "diamond",
                 "sampling": "inverted_triangle", "evaluation": "hex"}


#: What the roofline's colours and markers mean (under the chart).
ROOFLINE_MARKS = ("Colour = kernel (its colour on every chart); marker = phase: ● forward, ▲ backward, ■ loss, "
                  "◆ optimizer, ▼ sampling.")


def roofline_scatter(pts: pd.DataFrame, x: str = "intensity", y: str = "GFLOPs", name: str = "name", roof=None):
    """The roofline's points (``analysis.roofline_points``' columns): one colour per kernel
    (:func:`~.common.kernel_color`, the pie's and Live's) with one legend entry each, one marker
    per phase (:data:`PHASE_MARKERS`), the point's ``"kernel (phase)"`` name in the hover; ``roof``
    (a curve) drawn over them."""
    import holoviews as hv
    kernels = pts["kernel"] if "kernel" in pts else pd.Series([kernel_name(n) for n in pts[name]], index=pts.index)
    phases = pts["phase"] if "phase" in pts else pd.Series([str(n).rsplit(" (", 1)[-1].rstrip(")")
                                                           for n in pts[name]], index=pts.index)
    pts = pts.assign(kernel=kernels.astype(str), marker=[PHASE_MARKERS.get(str(p), "circle_x") for p in phases])
    layers = [hv.Scatter(sub, x, [y, name, "marker"], label=k).opts(
                  color=kernel_color(k), marker="marker", size=11, line_color="black", tools=["hover"])
              for k, sub in pts.groupby("kernel", sort=False)]
    return hv.Overlay(layers + ([roof] if roof is not None else [])).opts(
        hv.opts.Scatter(logx=True, logy=True), hv.opts.Overlay(
            logx=True, logy=True, responsive=True, height=340, legend_position="right",
            xlabel="arithmetic intensity (flop/byte)", ylabel="GFLOP/s (measured)",
            title="Roofline vs this host's calibrated ceilings"))


def device_curve_plots(curves: dict) -> list:
    """HoloViews plots of one profile's modeled curves (``memory.validation.device_curves``):
    random-row bandwidth against access size, bandwidth against threads, and against the write
    share of a read/write mix (local and remote) where the profile has a measured series."""
    import holoviews as hv
    size = pd.DataFrame(curves["access_size"])
    by_size = hv.Overlay([hv.Curve(size, "bytes", col, label=label).opts(logx=True, tools=["hover"],
                                                                         color=curve_color(label))
                          for col, label in (("random_read_GBps", "read"), ("random_write_GBps", "write"),
                                             ("random_write_ntstore_GBps", "write, ntstore")) if col in size])
    thr = pd.DataFrame(curves["threads"])
    by_threads = hv.Overlay([hv.Curve(thr, "threads", col, label=label).opts(tools=["hover"],
                                                                             color=curve_color(label))
                             for col, label in (("read_GBps", "sequential read"), ("write_GBps", "sequential write"),
                                                ("random_read_64B_GBps", "random 64 B rows"),
                                                ("random_read_256B_GBps", "random 256 B rows"))])
    opts = dict(responsive=True, height=260, ylabel="GB/s (modeled)", legend_position="top_right")
    plots = [by_size.opts(title="Random rows against access size (modeled)", xlabel="bytes", **opts),
             by_threads.opts(title="Bandwidth against threads (modeled)", **opts)]
    if curves["mixed"]:
        mix = pd.DataFrame(curves["mixed"])
        by_mix = hv.Overlay([hv.Curve(mix, "write_share", col, label=label).opts(tools=["hover"],
                                                                                 color=curve_color(label))
                             for col, label in (("GBps", "local"), ("remote_GBps", "remote socket")) if col in mix])
        plots.append(by_mix.opts(title=f"Read/write mix, {curves['mixed_threads']} threads (modeled)",
                                 xlabel="write share of the bytes", **opts))
    return plots


def footprint_bars(fp: pd.DataFrame, dram: Optional[float] = None):
    """A Bokeh figure of one horizontal bar per footprint row (``Store.footprint_frame``: a tensor
    class's predicted bytes, modeled and hatched, or a measured size such as peak RSS, solid),
    largest on top, on a log axis in MiB or GiB with each bar's size written beside it: on a
    linear axis the classes of a few MiB were slivers under a 0.5 GiB runtime. ``dram`` (bytes) is
    a red dashed line when within 4x of the largest bar."""
    from bokeh.models import ColumnDataSource, Span
    from bokeh.plotting import figure
    fp = fp[fp["bytes"] > 0]
    big = float(fp["bytes"].max()) if len(fp) else 1.0
    unit, div = ("GiB", 2**30) if big >= 2**30 else ("MiB", 2**20)
    kinds = ["modeled" if k == Provenance.MODELED else str(k) for k in fp["kind"]]
    df = pd.DataFrame({"bar": [f"{c} ({k})" for c, k in zip(fp["tensor_class"], kinds)],
                       "value": fp["bytes"].astype(float).values / div,
                       "size": [fmt_bytes(b) for b in fp["bytes"]],
                       "hatch": [bar_style(k)["hatch_pattern"] for k in fp["kind"]]})
    df = df.sort_values("value", ascending=True, ignore_index=True)      # the largest on top
    lo = float(df["value"].min()) / 3 if len(df) else 0.1
    hi = float(df["value"].max()) * 12 if len(df) else 1.0                 # room for the size labels
    show_dram = dram is not None and len(df) and dram / div <= 4 * float(df["value"].max())
    if show_dram:
        hi = max(hi, dram / div * 1.5)
    df["left"], df["label_x"] = lo, df["value"] * 1.12
    src = ColumnDataSource(df)
    fig = figure(y_range=list(df["bar"]), x_axis_type="log", x_range=(lo, hi), height=max(220, 30 * len(df) + 90),
                 sizing_mode="stretch_width", title="Footprint by tensor class (hatched = modeled)",
                 x_axis_label=f"{unit} (log scale)", tools="hover,save", tooltips="@bar: @size",
                 toolbar_location="right")
    fig.hbar(y="bar", left="left", right="value", height=0.7, source=src, color=BAR_COLOR, line_color="black",
             hatch_pattern="hatch", hatch_color="white", hatch_alpha=0.9)
    fig.text(x="label_x", y="bar", text="size", source=src, text_font_size="9pt", text_baseline="middle",
             text_color="#333")
    if show_dram:
        fig.add_layout(Span(location=dram / div, dimension="height", line_color="red", line_dash="dashed"))
    fig.ygrid.grid_line_color = None
    return fig




#: The Breakdown table's columns: (header with its unit, analysis.breakdown column, scale). Per-step
#: columns divide the run's total by its steps; "whole run" ones are the totals.
TABLE_COLUMNS = (("calls (whole run)", "calls", None), ("time, ms per step", "seconds", "ms/step"),
                 ("time, s (whole run)", "seconds", 1.0), ("share of kernel time, %", "share", 100.0),
                 ("MB moved per step", "bytes", "MB/step"), ("random MB per step", "random_bytes", "MB/step"),
                 ("GFLOP per step", "flops", "G/step"), ("GB/s", "GBps", 1.0), ("GFLOP/s", "GFLOPs", 1.0),
                 ("flop/byte", "intensity", 1.0), ("roofline bound, ms per step", "bound_seconds", "ms/step"),
                 ("% of bound", "pct_of_bound", 1.0))


def breakdown_table(table: pd.DataFrame, steps: int) -> pd.DataFrame:
    """``analysis.breakdown``'s frame as the page shows it: units in the headers, 3 significant
    digits, per-step values in ms (or MB, GFLOP) per step over ``steps`` steps, whole-run totals
    labelled so, a plain row number (no second index)."""
    steps = max(1, int(steps))
    scale = {"ms/step": 1e3 / steps, "MB/step": 1e-6 / steps, "G/step": 1e-9 / steps}
    out = pd.DataFrame({"kernel": table["kernel"].astype(str).values, "phase": table["phase"].astype(str).values})
    for head, col, how in TABLE_COLUMNS:
        if col not in table:
            continue
        v = table[col].astype(float)
        if how is None:
            out[head] = v.round().astype("Int64").values
        else:
            out[head] = [significant(x) for x in v * (scale[how] if isinstance(how, str) else how)]
    return out


def newest_finished(runs: pd.DataFrame):
    """The run the Breakdown page shows until one is chosen: the newest finished, else the newest."""
    if runs is None or runs.empty or "status" not in runs.columns:
        return None
    fin = runs[runs["status"] == RunStatus.FINISHED]
    return (fin if not fin.empty else runs)["id"].max().item()


class BreakdownPage(pn.viewable.Viewer):
    """All breakdown plots of one run (``run_id``), read once per selection."""

    lab = param.ClassSelector(class_=Lab)
    run_id = param.Parameter(default=None)

    def __init__(self, lab: Lab, **params):
        super().__init__(lab=lab, **params)
        self.selector = run_selector(lab, self.param.run_id, default=newest_finished, css_class="breakdown-select")

    # -- sections -------------------------------------------------------------
    def _kernel_section(self, kernels: pd.DataFrame):
        import holoviews as hv
        kp = kernel_phase_ms(kernels)
        bars = hv.Bars(kp, ["name", "phase"], "ms").opts(
            stacked=True, responsive=True, height=320, xrotation=30, tools=["hover"], cmap=phase_cmap(kp["phase"]),
            ylabel="ms per step (measured)", xlabel="kernel", title="Kernel time by phase (measured on DRAM)",
            legend_position="right")
        return pn.Row(hv_pane(bars), pn.pane.Bokeh(share_pie(kernel_shares(kernels))), sizing_mode="stretch_width")

    def modeled_kernel_bars(self, step: dict):
        """Kernel x phase stacked bars of the run's step modeled on its memory mode's device (hatched)."""
        import holoviews as hv
        mp = modeled_kernel_phase_ms(step)
        return hv.Bars(mp, ["name", "phase"], "ms").opts(
            stacked=True, responsive=True, height=320, xrotation=30, tools=["hover"],
            hooks=[hatch_hook(Provenance.MODELED)], cmap=phase_cmap(mp["phase"]), ylabel="ms per step (modeled)",
            xlabel="kernel",
            title=f"Kernel time by phase, modeled on {step['device']}", legend_position="right")

    def _modeled_kernel_section(self, run_id, run: dict):
        """Measured DRAM kernel x phase next to the same step modeled on the run's device."""
        cfg = RunRecord.of(run).config
        m = safe_call(memory_mode_of, cfg)[0]
        if m is not None and m.measured:
            return pn.Spacer(height=0)
        step, why = run_modeled_step(self.lab.store, run_id)
        if step is None:
            return not_available("Kernel time by phase on the run's device (memory tier model)", why)
        band = step["band"]
        top = sorted(step["kernels"], key=lambda k: -k["modeled_s"])[:8]
        per = ", ".join(f"{k['name']} {k['phase']} {fmt_ms(k['modeled_s'])} {fmt_band(k.get('band'))}" for k in top)
        low = f" **LOW CONFIDENCE**: {'; '.join(band['reasons'])}." if band["confidence"] == LOW else ""
        return pn.Column(pn.pane.Markdown(
            f"{MODELED_NOTE} Below, the step's kernels modeled on **{step['device']}** ({step['memory_mode']}): "
            f"**{fmt_ms(step['modeled_s'])} {fmt_band(band['kernel'])} kernel time per step (modeled)**, "
            f"{step['ratio']:.2f}x the "
            f"{fmt_ms(step['measured_s'])} measured on DRAM; the measured chart above is the same step on DRAM. "
            f"Placement: {step.get('placement_assumption', '?')}. Per kernel (modeled, ± the held-out error of "
            f"its regimes): {per}.{low}", css_classes=["breakdown-modeled-kernels"]),
            hv_pane(self.modeled_kernel_bars(step)), sizing_mode="stretch_width")

    def _roofline_section(self, kernels: pd.DataFrame):
        import holoviews as hv
        pts, ceil, why = roofline_frame(kernels)
        if pts is None:
            return not_available("Roofline (analysis + calibrated host profile)", why)
        x, y, name = "intensity", "GFLOPs", "name"       # analysis.roofline_points' columns
        if pts.empty:
            return not_available("Roofline", "roofline_points gave no points")
        pts = pts[(pts[x] > 0) & (pts[y] > 0)]
        bw, peak = ceil.get("triad_GBps"), ceil.get("gemm_GFLOPs")
        note = pn.pane.Markdown(f"{ROOFLINE_NOTE} {ROOFLINE_MARKS}", sizing_mode="stretch_width",
                                css_classes=["roofline-note"])
        if not bw or not peak or pts.empty:
            return pn.Column(note, hv_pane(roofline_scatter(pts, x, y, name)), sizing_mode="stretch_width")
        lo = min(pts[x].min(), peak / bw) / 10
        hi = max(pts[x].max(), peak / bw) * 10
        xs = [lo * (hi / lo) ** (i / 50) for i in range(51)]
        roof = hv.Curve((xs, [min(peak, bw * v) for v in xs]), x, y, label="roof").opts(
            color="black", line_dash="dashed")
        return pn.Column(note, hv_pane(roofline_scatter(pts, x, y, name, roof=roof)), sizing_mode="stretch_width")

    def _footprint_section(self, fp: Optional[pd.DataFrame], run: dict):
        if fp is None or fp.empty:
            return pn.pane.Markdown("*No footprint recorded for this run.*")
        dram = dram_bytes()
        peak = RunRecord.of(run).result.footprint.peak_rss
        text = (f"DRAM of this machine: {fmt_bytes(dram)}. Each bar is one tensor class's predicted bytes "
                f"(modeled, hatched) or the worker's peak RSS (measured, solid), its size written beside it; "
                f"the axis is logarithmic, so the small classes show next to the large ones.")
        if peak:
            text += f" Peak RSS of the worker: **{fmt_bytes(peak)}** (measured)."
        return pn.Column(pn.pane.Markdown(text), pn.pane.Bokeh(footprint_bars(fp, dram), sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")

    def _tier_section(self, run_id):
        df, why = tier_projection(self.lab.store, run_id)
        if df is None:
            return not_available("Measured DRAM vs modeled Optane/CXL (memory tier model)", why)
        chosen = df[df["chosen"]] if "chosen" in df.columns else df.iloc[0:0]
        note = f"{MODELED_NOTE} Placement: {df.attrs.get('placement_assumption', '?')}."
        if not chosen.empty and chosen["kind"].iloc[0] == Provenance.MODELED:
            note += (f" This run's memory mode uses **{chosen['device'].iloc[0]}**: "
                     f"{fmt_ms(chosen['seconds'].iloc[0])} {fmt_band(chosen['band'].iloc[0])} kernel time per step "
                     f"(modeled).")
        note += (" Each modeled bar carries ± the held-out error of the regimes its traffic falls in "
                 "(LOW: low confidence).")
        return pn.Column(pn.pane.Markdown(note),
                         hv_pane(modeled_bars(df, "device", "seconds", "kernel s per step")),
                         sizing_mode="stretch_width")

    def _device_section(self, run: dict):
        """The run's device profile as the model sees it (modeled curves; none for a DRAM run)."""
        cfg = RunRecord.of(run).config
        dev = safe_call(mode_device, cfg.get("memory_mode"), cfg.get("device_profile"))[0]
        if dev is None:
            return pn.Spacer(height=0)
        prof, why = safe_call(get_profile, dev)
        if prof is None:
            return not_available(f"Device profile {dev} (devices.yaml)", why)
        curves = device_curves(prof, mlp=misses_in_flight(load()))
        return pn.Card(pn.pane.Markdown(f"**{dev}** ({prof.platform}; baseline {prof.baseline}, conf {prof.conf}): "
                                        "every curve is **modeled** from the profile's published numbers "
                                        "(`gnnrec-lab devices show`, `devices validate`)."),
                       *[hv_pane(p) for p in device_curve_plots(curves)],
                       title=f"Device profile {dev} (modeled)", collapsed=True, sizing_mode="stretch_width")

    def _table_section(self, kernels: pd.DataFrame):
        host = safe_call(host_profile, measure_if_missing=False)[0]
        table, why = safe_call(breakdown, kernels, host=host)
        if table is None:
            return not_available("Breakdown table (analysis)", why)
        steps = int(kernels["step"].nunique()) if "step" in kernels else 1
        tab = pn.widgets.Tabulator(breakdown_table(table, steps), disabled=True, show_index=False,
                                   pagination="local", page_size=15, sizing_mode="stretch_width",
                                   css_classes=["breakdown-table"])
        # the table as it shows it, under its headers (downloads.tabulator_csv); the name is the run's id
        download = csv_download(lambda: tabulator_csv(tab), f"breakdown_run_{int(self.run_id)}.csv",
                                "Download the table (CSV)", "breakdown-download")
        return pn.Card(pn.pane.Markdown(f"Per-step columns are the run's totals over its {steps:,} recorded steps "
                                        f"divided by {steps:,}; \"whole run\" columns are the totals. "
                                        f"{BOUND_NOTE}.", css_classes=["breakdown-table-note"]),
                       tab, download,
                       title="Breakdown table (measured)", collapsed=True, sizing_mode="stretch_width")

    @param.depends("run_id")
    def body(self):
        store = self.lab.store
        if store is None:
            return not_available("Breakdown (run store)", self.lab.store_reason)
        if self.run_id is None:
            return pn.pane.Markdown("*No run selected. Launch one on the Launch page.*")
        run = self.lab.run(self.run_id) or {}
        kernels, why = safe_call(store.kernels_frame, self.run_id)
        fp, _ = safe_call(store.footprint_frame, self.run_id)
        status = run.get("status", "unknown")
        st = run_step_times(store, self.run_id, host=host_calibration()[0])   # as every view shows it
        head = pn.pane.Markdown(f"### Run #{self.run_id} — {status}\n\n{mode_header(run)}\n\n"
                                f"**{st.text()}**", css_classes=["breakdown-step-times"])
        if kernels is None or kernels.empty:
            return pn.Column(head, pn.pane.Markdown(
                f"*No kernel records for run {self.run_id} yet{' (' + why + ')' if why else ''}.*"),
                self._footprint_section(fp, run), sizing_mode="stretch_width")
        return pn.Column(head, self._kernel_section(kernels), self._modeled_kernel_section(self.run_id, run),
                         self._table_section(kernels),
                         self._roofline_section(kernels), self._footprint_section(fp, run),
                         self._tier_section(self.run_id), self._device_section(run), sizing_mode="stretch_width")

    def __panel__(self):
        return pn.Column("## Breakdown", self.selector, self.body, sizing_mode="stretch_width")
