"""What every dashboard page shares: the lab state, the process-wide store and runner, small helpers.

One :class:`Lab` per browser session holds the run table and the selection (which run the
Live and Breakdown pages show) as ``param`` parameters, which the pages follow (every page's
run list is one :func:`run_selector`); the :class:`~gnnrec_lab.runs.store.Store`
and :class:`~gnnrec_lab.runs.runner.Runner` behind it are one per server process, so
every session reads the same runs and the concurrency limit holds across tabs.

Where a piece of the lab cannot give a page what it needs (no store file, no host
calibration, a run without records), the page shows :func:`not_available` with the reason
instead of failing.
"""
from __future__ import annotations

import threading
from typing import Any, Optional

import pandas as pd
import panel as pn
import param

from gnnrec_lab.config.memory_modes import mode_look
from gnnrec_lab.dashboard.palettes import (  # noqa: F401  (the pages import them from here)
    BAR_COLOR,
    KERNEL_COLORS,
    LOSS_COLOR,
    PHASE_COLORS,
    TENSOR_CLASS_COLORS,
    category_color,
    kernel_color,
    kernel_name,
    metric_color,
    phase_color,
    policy_color,
    policy_marks,
    policy_order,
    run_color,
    size_color,
)
from gnnrec_lab.dashboard.security import launch_policy
from gnnrec_lab.memory.preflight import footprint_error
from gnnrec_lab.memory.tiermodel import LOW, fmt_band, mode_device
from gnnrec_lab.runs.runner import Runner
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus

# One colour rule for every plot: a phase, a kernel, a run, a memory mode (its table's colour:
# config.memory_modes), a cache policy and a metric each keep one colour on every page and for every
# run, and no colour names two of them (:mod:`.palettes`, where every palette lives); hatching
# (never colour) is what marks a bar as modeled.

# How a bar says where its number comes from, on every page: one colour, solid when measured,
# hatched when modeled (HoloViews has no hatch option: :func:`hatch_hook` sets it).
BAR_STYLES = {Provenance.MEASURED: dict(color=BAR_COLOR, hatch_pattern=" "),
              Provenance.MODELED: dict(color=BAR_COLOR, hatch_pattern="/")}
MODELED_NOTE = ("Hatched = **modeled** (device profile, not measured on this machine); solid = **measured**. "
                "Colours name phases, kernels, runs and memory modes, the same on every page.")












def mode_color(config) -> str:
    """The colour of the memory mode of ``config`` (a run row, a config or a mode's name) on every
    chart: its table's (:func:`~gnnrec_lab.config.memory_modes.mode_look`; grey for a mode the table
    does not hold)."""
    return mode_look(config).color


def mode_swatch(config) -> str:
    """The memory mode of ``config`` as a page's text names it (Markdown): a square of its colour, its
    short label and, where that differs, the name ``--memory-mode`` takes."""
    look = mode_look(config)
    name = f" (`{look.name}`)" if look.name != look.short else ""
    return f'<span style="color:{look.color}">■</span> {look.short}{name}'


def tint(color: str, amount: float = 0.5) -> str:
    """``#rrggbb`` mixed ``amount`` of the way towards white: the lighter shade a variant of a
    coloured series takes (a bf16 full graph beside its float32 one)."""
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)




def hv_pane(obj, **kw) -> pn.pane.HoloViews:
    """A HoloViews pane whose axes belong to its own plot.

    Panel links the axes of every HoloViews plot in a page that share a dimension name
    (``linked_axes``): a Breakdown chart in ms kept the range of the slowest run any page had
    drawn since the page opened. Each plot here scales to its own data.
    """
    kw.setdefault("sizing_mode", "stretch_width")
    return pn.pane.HoloViews(obj, linked_axes=False, **kw)


_extensions_loaded: Optional[bool] = None   # None: not yet; else whether BokehJS/Panel's JS went in inline


def load_extensions(inline: bool = False) -> None:
    """Load Panel's Tabulator and HoloViews' Bokeh backend (once per process).

    Every page calls it, so a page built alone (a notebook cell, a test) can plot.
    ``inline=True`` is for notebooks: BokehJS and Panel's JavaScript go into the
    notebook's output itself, so its plots and widgets draw on a machine without
    internet (the default points the notebook page at public CDNs, and offline every
    plot stays blank). The served dashboard serves those files itself either way.
    """
    global _extensions_loaded
    if _extensions_loaded is None or (inline and not _extensions_loaded):
        import holoviews as hv
        pn.extension("tabulator", notifications=False, inline=inline)
        hv.extension("bokeh", logo=False, inline=inline)
        # stacked bars of tensor classes (Launch's DRAM use) in their colours, not the default
        # cycle's (which holds the memory modes' and the phases' colours)
        hv.opts.defaults(hv.opts.Bars(cmap=dict(TENSOR_CLASS_COLORS)))
        if inline:
            _display_holoviews_in_panes()
        _extensions_loaded = inline


def _display_holoviews_in_panes() -> None:
    """Show HoloViews objects in this IPython session through a Panel pane.

    HoloViews' own notebook display links Panel's stylesheets (layout, loading
    spinner, theme) from Panel's CDN even when the JavaScript is inline; a pane
    shown in a notebook with ``inline`` set puts them into the output, so nothing
    is fetched from another host."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return
    from holoviews.core.dimension import Dimensioned
    ip.display_formatter.mimebundle_formatter.for_type(
        Dimensioned, lambda obj: pn.panel(obj)._repr_mimebundle_())


def bar_style(kind) -> dict:
    """The style of a bar whose number is ``kind``: measured solid, anything else (modeled,
    predicted) hatched."""
    return BAR_STYLES.get(kind, BAR_STYLES[Provenance.MODELED])


def hatch_hook(kind=None, column: str = "hatch"):
    """A HoloViews hook that hatches bars as :data:`BAR_STYLES` says, so modeled bars look
    different from measured ones even in grey print: every bar as ``kind`` (a chart that is
    modeled throughout), or with no ``kind`` each bar by its ``column`` value (its
    :func:`bar_style` pattern; the column reaches the plot where a hover tool shows the value
    dimensions). The hook sets the pattern on the Bokeh glyph.
    """
    pattern = {"field": column} if kind is None else bar_style(kind)["hatch_pattern"]

    def hook(plot, element):
        glyph = plot.handles.get("glyph")
        if glyph is not None and (kind is not None or column in plot.handles["source"].data):
            glyph.hatch_pattern = pattern
            glyph.hatch_color = "white"
            glyph.hatch_alpha = 0.9
    return hook


#: What marks the bar of the memory mode a run or the form has chosen (a ``chosen`` column).
CHOSEN_MARK = "◀ selected"


def fmt3(v: float) -> str:
    """``v`` to 3 significant digits as a person reads it: ``13.1``, ``0.0437``, ``1,200`` (never ``1.2e+03``)."""
    v = float(v)
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _per_step_ms(df: pd.DataFrame, y: str, ylabel: str) -> tuple[pd.DataFrame, str, str]:
    """A column of seconds (``seconds``, ``*_s``) as ms, the unit every sentence uses: the frame, the
    column drawn and its axis label (``"kernel s per step"`` -> ``"kernel ms per step"``)."""
    if y != "seconds" and not y.endswith("_s"):
        return df, y, ylabel
    label = f" {ylabel} ".replace(" s per ", " ms per ").strip()
    label = label if label != ylabel else f"{ylabel} (ms)"
    return df.assign(ms=df[y].astype(float) * 1e3), "ms", label


def modeled_bars(df: pd.DataFrame, x: str, y: str, ylabel: str):
    """Bars of ``y`` by ``x`` with measured solid and modeled hatched, each bar's value and kind beside it.

    ``df`` needs a ``kind`` column (a :class:`~gnnrec_lab.util.provenance.Provenance`); an optional
    ``band`` column (+- fraction, :func:`~gnnrec_lab.memory.tiermodel.model_band`) goes beside the
    kind of each modeled bar, and ``confidence`` ``low`` says so there; a true ``chosen`` marks the
    selected memory mode's bar (:data:`CHOSEN_MARK`). Seconds are drawn in ms. The bars lie
    horizontally, one row per ``x``, so the names (long device profiles) never overlap.
    """
    import holoviews as hv

    load_extensions()      # a chart built alone (a notebook cell, a test) can plot
    df, y, ylabel = _per_step_ms(df.reset_index(drop=True), y, ylabel)
    bands = df["band"] if "band" in df else [None] * len(df)
    conf = df["confidence"] if "confidence" in df else [None] * len(df)
    chosen = df["chosen"].fillna(False).astype(bool) if "chosen" in df else [False] * len(df)
    unit = " ms" if y == "ms" else ""
    df["label"] = [f"{fmt3(v)}{unit} {k}" + (f" {fmt_band(b)}" if b is not None and b == b else "")
                   + (" LOW" if c == LOW else "") + (f"  {CHOSEN_MARK}" if ch else "")
                   for v, k, b, c, ch in zip(df[y], df["kind"], bands, conf, chosen)]
    df["color"] = [bar_style(k)["color"] for k in df["kind"]]        # one colour: hatching marks the modeled bars
    df["hatch"] = [bar_style(k)["hatch_pattern"] for k in df["kind"]]
    df["line"] = ["black" if ch else "white" for ch in chosen]      # the chosen bar outlined
    top = float(df[y].max()) if len(df) else 1.0
    top = top if top > 0 else 1.0
    longest = max((len(t) for t in df["label"]), default=10)
    room = 1.15 + 0.028 * longest          # the value labels to the right of the longest bar
    title = f"{ylabel}: measured (solid) vs modeled (hatched)"
    bars = hv.Bars(df, x, [y, "kind", "color", "hatch", "line", "label"]).opts(
        color="color", line_color="line", line_width=2, hooks=[hatch_hook(), _value_labels(df, x, y, top * 0.02)],
        responsive=True, height=70 + 34 * max(len(df), 1), invert_axes=True, ylim=(0, top * room), ylabel=ylabel,
        xlabel="", tools=["hover"], show_legend=False,     # (the outline colours are no legend's entries)
        title=title if len(title) <= 60 else f"{ylabel}: measured vs modeled (hatched)")
    return bars


def _value_labels(df: pd.DataFrame, x: str, y: str, pad: float):
    """A HoloViews hook writing each bar's ``label`` just past its end (horizontal bars: HoloViews'
    own Labels turn the values into text on an inverted categorical chart)."""
    def hook(plot, element):
        from bokeh.models import ColumnDataSource
        fig = plot.state
        if fig.select_one({"name": "bar-values"}) is not None:
            return
        src = ColumnDataSource({"x": [float(v) + pad for v in df[y]], "y": [str(v) for v in df[x]],
                                "label": list(df["label"])})
        fig.text(x="x", y="y", text="label", source=src, name="bar-values", text_font_size="9pt",
                 text_align="left", text_baseline="middle", text_color="#333")
    return hook


def not_available(what: str, reason: Optional[str] = None) -> pn.pane.Alert:
    """The note a page shows where a piece of the lab is missing."""
    text = f"**{what}** is not available yet"
    if reason:
        text += f" ({reason})"
    return pn.pane.Alert(text + ".", alert_type="warning", sizing_mode="stretch_width")


def status_css(status) -> str:
    """CSS for a status cell: red and bold for a failed run (:attr:`RunStatus.is_failure`, diverged
    included), as wherever a run's status appears."""
    return "color: #d62728; font-weight: bold" if RunStatus.failure(status) else ""


def error_note(message: str) -> pn.pane.Alert:
    return pn.pane.Alert(message, alert_type="danger", sizing_mode="stretch_width")


def safe_call(fn, *a, default=None, **kw):
    """``fn(*a, **kw)``, or ``(default, reason)`` when it raises; returns ``(value, reason|None)``."""
    try:
        return fn(*a, **kw), None
    except Exception as e:
        return default, f"{type(e).__name__}: {e}"


def dram_bytes() -> int:
    """Installed DRAM of this machine in bytes (psutil)."""
    import psutil
    return int(psutil.virtual_memory().total)


# ----------------------------------------------------------------------------
# process-wide store and runner
_lock = threading.Lock()
_shared: dict[str, Any] = {}


def shared_store():
    """The process's :class:`~gnnrec_lab.runs.store.Store` (``(store, None)`` or ``(None, reason)``)."""
    with _lock:
        if "store" not in _shared:
            store, why = safe_call(Store)
            if store is None:
                return None, why
            _shared["store"] = store
        return _shared["store"], None


def shared_runner(store):
    """The process's :class:`~gnnrec_lab.runs.runner.Runner` over ``store`` (one for all sessions)."""
    with _lock:
        key = ("runner", id(store))
        if key not in _shared:
            runner, why = safe_call(Runner, store)
            if runner is None:
                return None, why
            _shared[key] = runner
        return _shared[key], None


class Lab(param.Parameterized):
    """Session state every page reads: the store, the runner, the run table and the chosen run.

    Pass ``store``/``runner`` to drive the pages from a notebook or a test; by
    default the process-wide ones are used. ``read_only`` (a reason) serves the pages without a
    runner: nothing can be launched or cancelled (``panel serve`` where it is not safe: :mod:`.serving`).
    """

    run_id = param.Parameter(default=None, doc="run shown on the Live and Breakdown pages")
    runs = param.DataFrame(default=None, allow_None=True,
                           doc="the run table (services.projection.modeled_runs_frame), read when a page first "
                               "needs it (load_runs) and re-read by refresh_runs; pages follow it")
    page = param.String(default="", doc="page the app should show (Launch, Live, Breakdown, Compare, Cache)")

    def __init__(self, store=None, runner=None, read_only: Optional[str] = None, **params):
        super().__init__(**params)
        load_extensions()
        self.store_reason = self.runner_reason = None
        # read_only: why this server may not launch or cancel runs (the pages say so); no runner then
        self.read_only = read_only
        if store is None:
            store, self.store_reason = shared_store()
        self.store = store
        if read_only:
            runner, self.runner_reason = None, read_only
        elif runner is None and store is not None:
            runner, self.runner_reason = shared_runner(store)
        elif runner is None:
            self.runner_reason = "needs the run store"
        self.runner = runner

    # -- reads that never raise (a page shows the reason instead) -----------
    def refresh_runs(self) -> pd.DataFrame:
        """Re-read the run table into ``runs`` (the one place it is read); every page that shows
        runs follows ``runs``, so a changed table reaches them all. An unchanged table is not
        set again (nothing redraws)."""
        df = None
        if self.store is not None:
            from gnnrec_lab.services.projection import modeled_runs_frame  # the tier model's columns (numpy)
            df, _ = safe_call(lambda: modeled_runs_frame(self.store), default=pd.DataFrame())
        df = df if df is not None else pd.DataFrame()
        if self.runs is None or not df.equals(self.runs):
            self.runs = df
        return self.runs

    def load_runs(self) -> pd.DataFrame:
        """The run table, read now unless a page read it already (the Launch page opens without it)."""
        return self.runs if self.runs is not None else self.refresh_runs()

    @param.depends("run_id", watch=True)
    def _list_chosen_run(self):
        """A run chosen before the table listed it (launched from the CLI) is listed before the
        selectors show it."""
        runs = self.runs
        if self.run_id is not None and runs is not None and self.run_id not in set(runs.get("id", ())):
            self.refresh_runs()

    def run(self, run_id) -> Optional[dict]:
        if self.store is None or run_id is None:
            return None
        run, _ = safe_call(self.store.get_run, run_id)
        if run is None:
            return None
        return dict(run) if not isinstance(run, dict) else run

    def status(self, run_id) -> str:
        """Status of a run: the runner's view when it has one, else the store's."""
        if run_id is None:
            return "none"
        if self.runner is not None:
            st, _ = safe_call(self.runner.status, run_id)
            if st is not None:
                return st.get("status", str(st)) if isinstance(st, dict) else str(st)
        run = self.run(run_id)
        return str(run.get("status", "unknown")) if run else "unknown"

    def launch_error(self, config, include_active: bool = True, own_process: bool = True) -> Optional[UserError]:
        """Why ``config`` may not be launched from the browser now, or None: a ConfigError naming the
        field when one field is the reason (a placement outside the allowed directories), else a
        UserError (the cap on active runs, the footprint).

        The dashboard's launch policy (:mod:`.security`): ``file:`` placements only
        under allowed directories, a cap on active runs; and, for a run the lab's own worker
        trains (``own_process``; not a DistDGL run's machines), the pre-flight footprint check.
        """
        policy = launch_policy()
        err = policy.placement_error(config.placement)
        if err is None and include_active and self.store is not None:
            why = policy.active_error(self.store.status)
            err = UserError(why) if why else None
        if err is None and own_process:
            err = footprint_error(config, memory_limit_bytes=policy.memory_limit_bytes)
        return err

    def launch(self, config, request: Optional[dict] = None) -> Any:
        """Hand ``config`` to the runner (a subprocess runs it); return the new run id. ``request``:
        the runner's arguments for another engine's run (a DistDGL run's
        :func:`~gnnrec_lab.distributed.engine.runner_request`).

        Raises UserError when the launch policy refuses it (see :meth:`launch_error`).
        """
        if self.runner is None:
            raise RuntimeError(f"the runner is not available yet ({self.runner_reason})")
        err = self.launch_error(config, own_process=request is None)
        if err is not None:
            raise err
        policy = launch_policy()
        limit = policy.memory_limit_bytes
        run_id = self.runner.launch(config, **({"memory_limit_bytes": limit} if limit is not None else {}),
                                    **(request or {}))
        policy.record(run_id)
        self.refresh_runs()
        self.run_id = run_id
        return run_id

    def cancel(self, run_id) -> None:
        if self.runner is None:
            raise RuntimeError(f"the runner is not available yet ({self.runner_reason})")
        self.runner.cancel(run_id)
        self.refresh_runs()


# How a selector marks a run whose load average exceeded its cores (``runs_frame``'s ``overloaded``).
OVERLOADED_LABEL = "⚠ load > cores"


def run_label(row: dict) -> str:
    """Short text naming a run in selectors: id, model, dataset, layers, dim, batch size, memory
    mode (with the device profile a modeled mode uses), status, and a mark when the machine's load
    exceeded its cores during the run."""
    cfg = row.get("config") if isinstance(row.get("config"), dict) else row

    def get(key):
        v = row.get(key, cfg.get(key) if isinstance(cfg, dict) else None)
        return None if v is None or v != v else v   # NaN from a frame: unknown
    parts = [f"#{row.get('id', '?')}"]
    for key in ("model", "dataset"):
        if get(key) is not None:
            parts.append(str(get(key)))
    for key, tag in (("layers", "L"), ("dim", "d"), ("batch_size", "b")):
        if get(key) is not None:
            parts.append(f"{tag}{int(get(key))}")
    mode = get("memory_mode")
    if mode is not None:
        dev = get("device")
        if dev is None:
            dev = safe_call(mode_device, mode, get("device_profile"))[0]
        parts.append(str(mode) if dev is None else f"{mode}→{dev} (modeled)")
    if row.get("status"):
        parts.append(f"({row['status']})")
    if row.get("overloaded") is True:   # proc.load_summary: its times include waiting for other work
        parts.append(OVERLOADED_LABEL)
    return " ".join(parts)


def run_options(runs: Optional[pd.DataFrame], limit: int = 200) -> dict:
    """``{label: run_id}`` for the newest ``limit`` runs of a runs frame."""
    if runs is None or runs.empty:
        return {}
    df = runs.sort_values("id", ascending=False).head(limit)
    return {run_label(r): r["id"] for r in df.to_dict("records")}


def run_selector(lab: Lab, run: param.Parameter, default=None, css_class: str = "run-select") -> pn.widgets.Select:
    """The run selector of every page: the newest runs of ``lab.runs`` by label, its value the
    page's run parameter ``run`` (e.g. ``page.param.run_id``).

    The selection is the lab's: choosing a run sets ``lab.run_id``, and ``lab.run_id`` set anywhere
    (a launch, another page) is chosen here. Until a run is chosen the page shows the run it was
    given, else ``default(lab.runs)`` (its own choice, e.g. the newest finished run).
    """
    owner, name = run.owner, run.name
    runs = lab.load_runs()
    if getattr(owner, name) is None:
        setattr(owner, name, lab.run_id if lab.run_id is not None or default is None else default(runs))
    # as wide as the page allows: a fixed 360 px cut "⚠ load > cores" (and the device profile) off the labels
    widget = pn.widgets.Select.from_param(run, name="Run", options=pn.bind(run_options, lab.param.runs),
                                          sizing_mode="stretch_width", min_width=360, max_width=1100,
                                          css_classes=[css_class])
    widget.link(lab, value="run_id", bidirectional=True)
    return widget
