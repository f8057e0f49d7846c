"""Cache page: what an embedding-row cache in front of a slow tier would hit, and what cached runs did.

Three parts:

* **Simulation** (modeled): for a dataset's access trace (plain BPR batches of
  a 0-layer model, or sampled sub-graph batches) :func:`gnnrec_lab.cache.study.run_study`
  (the pipeline of the ``cache`` CLI too) runs every policy at every cache size,
  the look-ahead oracle also at every look-ahead. Plots: hit rate and slow-tier bytes vs cache size per policy, and
  the oracle's hit rate vs look-ahead. Slow-tier bytes are rows x row bytes, so
  they are *modeled*; the skew of the trace (top 1% / 10% share) is counted.
  The simulation runs on a worker thread (:data:`EXECUTOR`); the page shows a
  spinner and swaps the plots in when it is done, so a served page never waits
  on it. Finished simulations are kept per request (:data:`MAX_CACHED`).
* **Finished cached runs** (measured): sampled-mode runs with a cache policy
  store their row store's counters in ``result["info"]["sampled"]["row_store"]``.
* **Live** (measured): while such a run trains, its ``row_fetch`` kernel records
  (one per step) carry the slow-tier bytes read and the rows the step needed;
  the page sums them in SQL every :data:`LIVE_POLL_MS` ms.
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

import pandas as pd
import panel as pn
import param

from gnnrec_lab import cache
from gnnrec_lab.cache.request import SimRequest, parse_cache_sizes, parse_positive_ints
from gnnrec_lab.cache.study import AUTO_CAPACITY, run_study
from gnnrec_lab.config.run import (
    SIMULATED_CACHE_POLICIES,
)
from gnnrec_lab.dashboard.common import (
    Lab,
    error_note,
    not_available,
    policy_color,
    policy_marks,
    policy_order,
    safe_call,
    size_color,
)
from gnnrec_lab.dashboard.forms import dataclass_fields, form_class, form_widgets
from gnnrec_lab.data import list_datasets, load
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.runs.record import RunRecord
from gnnrec_lab.runs.store import parse_json_field
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_bytes, fmt_percent
from gnnrec_lab.util.status import RunStatus

LIVE_POLL_MS = 2000
MAX_CACHED = 16
# One simulation at a time for the whole server: the machine may have two cores.
EXECUTOR = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cache-sim")
_results: "OrderedDict[tuple, SimOutcome]" = OrderedDict()
_results_lock = threading.Lock()


@dataclass
class SimOutcome:
    """A finished simulation: the sweep (one row per policy, size, look-ahead) and the trace's skew."""

    request: SimRequest
    frame: pd.DataFrame
    skew: dict
    trace_info: dict
    row_bytes: int
    trace_seconds: float          # measured: building the trace
    sim_seconds: float            # measured: running every policy
    error: Optional[str] = None
    extra: dict = field(default_factory=dict)


def load_graph(dataset: str):
    """The training graph of ``dataset`` (default split) as a BipartiteGraph."""
    ds = load(dataset)
    return BipartiteGraph(ds.train, ds.n_users, ds.n_items)


def run_simulation(req: SimRequest, graph_loader: Callable = load_graph) -> SimOutcome:
    """Build ``req``'s trace and sweep it (seconds on a worker thread; never on the UI thread).

    User mistakes come back in ``outcome.error`` (one line); the frame is then empty.
    """
    try:
        req.checked()
        rb = cache.row_bytes(req.dim, req.optimizer)
        t0 = time.perf_counter()
        graph = graph_loader(req.dataset)
        load_s = time.perf_counter() - t0
        study = run_study(graph, req.trace, req.batch_size, req.fanouts, req.epochs, req.seed, req.cache_sizes,
                          req.lookaheads, req.policies, rb)
    except UserError as e:
        return SimOutcome(req, pd.DataFrame(), {}, {}, 0, 0.0, 0.0, error=str(e))
    # trace_seconds: loading the graph and building the trace
    return SimOutcome(req, study.frame, study.skew, study.info, rb, load_s + study.trace_seconds, study.sim_seconds)


def simulate_cached(req: SimRequest, graph_loader: Callable = load_graph) -> SimOutcome:
    """:func:`run_simulation`, remembered per request (the newest :data:`MAX_CACHED` ones)."""
    key = (req, graph_loader)
    with _results_lock:
        if key in _results:
            _results.move_to_end(key)
            return _results[key]
    out = run_simulation(req, graph_loader)
    if out.error is None:
        with _results_lock:
            _results[key] = out
            while len(_results) > MAX_CACHED:
                _results.popitem(last=False)
    return out


# ----------------------------------------------------------------------------
# frames the plots draw
# ----------------------------------------------------------------------------
def size_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, cache size) with hit rate and modeled slow-tier MiB read and written.

    The oracle appears at its largest look-ahead only (the look-ahead plot has the
    rest); sizes too small for a policy (NaN hit rate) are left out.
    """
    cols = ["policy", "capacity_pct", "capacity_rows", "hit_rate", "read_MiB", "written_MiB"]
    if frame is None or frame.empty or "hit_rate" not in frame.columns:
        return pd.DataFrame(columns=cols)
    f = frame[frame["hit_rate"].notna()].copy()
    if "lookahead" in f.columns and f["lookahead"].notna().any():
        top = f["lookahead"].max()
        f = f[f["lookahead"].isna() | (f["lookahead"] == top)]
    f["read_MiB"] = f["read_bytes"].astype(float) / 2**20
    f["written_MiB"] = f["written_bytes"].astype(float) / 2**20
    return f[cols].sort_values(["policy", "capacity_pct"]).reset_index(drop=True)


def lookahead_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Oracle hit rate per (cache size, look-ahead); Belady's per size as ``belady_hit_rate`` (the ceiling)."""
    cols = ["capacity_pct", "size", "lookahead", "hit_rate", "belady_hit_rate"]
    if frame is None or frame.empty or "lookahead" not in frame.columns:
        return pd.DataFrame(columns=cols)
    f = frame[frame["lookahead"].notna() & frame["hit_rate"].notna()].copy()
    if f.empty:
        return pd.DataFrame(columns=cols)
    bel = frame[frame["policy"] == "belady"].set_index("capacity_rows")["hit_rate"]
    f["belady_hit_rate"] = f["capacity_rows"].map(bel).astype(float)
    f["size"] = [f"{p:.3g}% of rows" for p in f["capacity_pct"]]
    f["lookahead"] = f["lookahead"].astype(int)
    return f[cols].sort_values(["capacity_pct", "lookahead"]).reset_index(drop=True)


def skew_text(skew: dict, info: dict) -> str:
    """Markdown line with the trace's skew (counted from the trace, not modeled)."""
    if not skew:
        return ""
    pct = lambda k: fmt_percent(skew[k]) if k in skew and skew[k] == skew[k] else "–"  # noqa: E731
    return (f"**Skew of the trace** (counted): the top 1% of rows take **{pct('top1pct_share')}** of accesses, "
            f"the top 10% take **{pct('top10pct_share')}** (top 0.1%: {pct('top0.1pct_share')}); "
            f"{pct('rows_touched_share')} of the {info.get('table_rows', 0):,} rows are touched at all. "
            f"{info.get('batches', 0):,} batches, {info.get('accesses', 0):,} row accesses, "
            f"up to {info.get('max_rows_per_batch', 0):,} distinct rows per batch ({info.get('trace', '')}).")


def too_small_text(frame: pd.DataFrame, info: dict) -> str:
    """Why no policy (but none) could be simulated at the sizes asked, in words for the chart."""
    biggest, rows = int(info.get("max_rows_per_batch") or 0), int(info.get("table_rows") or 0)
    sizes = sorted({int(c) for c in frame["capacity_rows"].dropna()}) if "capacity_rows" in frame else []
    asked = ", ".join(f"{c:,}" for c in sizes) or "none"
    share = f" ({100 * biggest / rows:.0f}% of the {rows:,} rows)" if rows else ""
    return (f"Nothing to compare: every cache size asked ({asked} rows) is below one batch's {biggest:,} "
            f"distinct rows{share}, which a cache must hold. Use sizes above that, auto, or a smaller batch.")


def chart_reasons(out: "SimOutcome") -> dict:
    """``{"sizes": why or None, "lookahead": why or None}``: why the size charts would draw no
    policy but "none" (which never caches) and why the look-ahead chart would be empty."""
    frame = out.frame
    curves = size_curves(frame)
    drawn = set(curves["policy"]) - {"none"}
    small = too_small_text(frame, out.trace_info)
    if not len(frame) and any(str(c).lower() == AUTO_CAPACITY for c in out.request.cache_sizes):
        info = out.trace_info   # auto found no size between one batch and 90% of the table
        biggest, rows = int(info.get("max_rows_per_batch") or 0), int(info.get("table_rows") or 0)
        small = (f"Nothing to compare: one batch reads {biggest:,} distinct rows, {100 * biggest / max(rows, 1):.0f}% "
                 f"of the {rows:,} rows, so no cache size between one batch and 90% of the table is left "
                 f"(auto). Use a smaller batch size or a larger dataset.")
    elif not len(frame):
        small = "No simulation results."
    sizes = None if drawn else small
    if not lookahead_curves(frame).empty:
        la = None
    elif "oracle" not in out.request.policies:
        la = "The look-ahead oracle is not among the policies chosen: add oracle to see it against L."
    else:
        la = small
    return {"sizes": sizes, "lookahead": la}


def auto_text(out: "SimOutcome") -> str:
    """What the ``auto`` cache sizes came to (" Cache sizes (auto): ..."), or '' when none was asked."""
    if not any(str(c).lower() == AUTO_CAPACITY for c in out.request.cache_sizes) or "capacity_rows" not in out.frame:
        return ""
    rows = int(out.trace_info.get("table_rows") or 0)
    sizes = sorted({int(c) for c in out.frame["capacity_rows"].dropna()})
    listed = ", ".join(f"{c:,} ({100 * c / rows:.0f}%)" if rows else f"{c:,}" for c in sizes)
    return (f" Cache sizes (auto): {listed} rows, from just above one batch's "
            f"{int(out.trace_info.get('max_rows_per_batch') or 0):,} distinct rows to 90% of the table.")


def policy_curve(g: pd.DataFrame, x: str, y, policy: str) -> list:
    """A cache policy's line and points in its colour of every page (:func:`~.palettes.policy_color`),
    dash and marker (:func:`~.palettes.policy_marks`): curves that coincide (the oracle at a long
    look-ahead on Belady's ceiling) stay told apart by dash and marker."""
    import holoviews as hv
    color, (dash, marker) = policy_color(policy), policy_marks(policy)
    return [hv.Curve(g, x, y, label=policy).opts(color=color, line_dash=dash, line_width=3 if dash == "dashed" else 2),
            hv.Scatter(g, x, y, label=policy).opts(color=color, marker=marker, size=8 if marker == "x" else 6)]


def _why(why: str, x: float, y: float):
    """A reason drawn in the middle of an empty chart, wrapped to fit it."""
    import textwrap

    import holoviews as hv
    return hv.Text(x, y, "\n".join(textwrap.wrap(why, 60)), fontsize=10)


def hit_rate_plot(curves: pd.DataFrame, why: Optional[str] = None):
    import holoviews as hv
    opts = dict(responsive=True, height=300, xlabel="cache size (% of rows)", ylabel="hit rate (modeled)",
                ylim=(0, 1.02), tools=["hover"], title="Hit rate vs cache size (simulated)",
                legend_position="right")
    groups = dict(list(curves.groupby("policy", sort=False)))
    els = [e for p in policy_order(groups) for e in policy_curve(groups[p], "capacity_pct", "hit_rate", str(p))]
    if why:
        els.append(_why(why, 50, 0.5))
        opts["xlim"] = (0, 100)
    if not els:
        return hv.Overlay([hv.Curve([], "capacity_pct", "hit_rate")]).opts(**opts)   # legend options are an overlay's
    return hv.Overlay(els).opts(**opts)


def bytes_plot(curves: pd.DataFrame, why: Optional[str] = None):
    import holoviews as hv
    opts = dict(responsive=True, height=300, xlabel="cache size (% of rows)",
                ylabel="slow-tier MiB read (modeled)", tools=["hover"], legend_position="right",
                title="Slow-tier MiB read (modeled)")
    groups = dict(list(curves.groupby("policy", sort=False)))
    els = [e for p in policy_order(groups)
           for e in policy_curve(groups[p], "capacity_pct", ["read_MiB", "written_MiB"], str(p))]
    if why:
        top = float(curves["read_MiB"].max()) if len(curves) else 1.0
        els.append(_why(why, 50, top / 2 if top == top and top > 0 else 0.5))
        opts["xlim"] = (0, 100)
    if not els:
        return hv.Overlay([hv.Curve([], "capacity_pct", "read_MiB")]).opts(**opts)   # legend options are an overlay's
    return hv.Overlay(els).opts(**opts)


def lookahead_plot(la: pd.DataFrame, why: Optional[str] = None):
    import holoviews as hv
    opts = dict(responsive=True, height=300, xlabel="look-ahead L (batches)", ylabel="hit rate (modeled)",
                logx=True, ylim=(0, 1.02), tools=["hover"], legend_position="right",
                title="Look-ahead oracle: hit rate vs L (dotted = Belady ceiling)")
    els = []
    for i, (size, g) in enumerate(la.groupby("size", sort=False)):
        color = size_color(i)        # a size's oracle curve and its Belady ceiling alike
        els.append(hv.Curve(g, "lookahead", "hit_rate", label=size).opts(color=color))
        els.append(hv.Scatter(g, "lookahead", "hit_rate", label=size).opts(size=6, color=color))
        els.append(hv.Curve(g, "lookahead", "belady_hit_rate", label=size).opts(line_dash="dotted", alpha=0.6,
                                                                                 color=color))
    if why:
        els.append(_why(why, 15, 0.5))
        opts["xlim"] = (1, 200)
    if not els:
        return hv.Overlay([hv.Curve([], "lookahead", "hit_rate")]).opts(**opts)   # legend options are an overlay's
    return hv.Overlay(els).opts(**opts)


# ----------------------------------------------------------------------------
# measured: cached runs in the store
# ----------------------------------------------------------------------------
RUN_COLUMNS = ["id", "name", "status", "dataset", "policy", "cache_size", "lookahead", "hit_rate", "hits",
               "misses", "prefetched_rows", "fetch_s", "stall_s", "read_bytes", "written_bytes", "io_mode"]


def cached_runs(store, status: Optional[RunStatus] = None, limit: int = 200) -> pd.DataFrame:
    """Runs with a cache policy (newest first): config, status, and the row store's *measured* counters.

    Counter columns are NaN until the run finishes (they are written with its result).
    """
    import json
    # json_valid first: one damaged row's JSON must not fail the whole query (SQLite raises on it)
    sql = ("SELECT id, name, status, config, CASE WHEN json_valid(result) THEN "
           "json_extract(result, '$.info.sampled.row_store') END AS row_store "
           "FROM runs WHERE json_valid(config) AND json_extract(config, '$.cache_policy') IS NOT NULL "
           "AND json_extract(config, '$.cache_policy') != 'none'")
    params: tuple = ()
    if status is not None:
        sql += " AND status=?"
        params = (status,)
    if hasattr(store, "_frame"):
        # one query instead of parsing every run's result (store.py has no public reader for this yet)
        raw = store._frame(sql + " ORDER BY id DESC LIMIT ?", params + (int(limit),))
        # parse_json_field: a damaged row is skipped, not the table
        recs = [(r.id, r.name, r.status, cfg, json.loads(r.row_store) if r.row_store else {})
                for r in raw.itertuples() for cfg in [parse_json_field(r.config, r.id, "config")[0]] if cfg]
    else:
        recs = []
        for rid in sorted(store.run_ids(status), reverse=True):
            run = store.run_record(rid)
            cfg = run.config
            if cfg.get("cache_policy", "none") == "none":
                continue
            recs.append((rid, run.name, run.status, cfg, run.result.row_store))
            if len(recs) >= limit:
                break
    rows = []
    for rid, name, st, cfg, rs in recs:
        rows.append({"id": int(rid), "name": name, "status": st, "dataset": cfg.get("dataset"),
                     "policy": cfg.get("cache_policy"), "cache_size": cfg.get("cache_size"),
                     "lookahead": cfg.get("lookahead") if cfg.get("cache_policy") == "oracle" else None,
                     "hit_rate": rs.get("hit_rate"), "hits": rs.get("hits"), "misses": rs.get("misses"),
                     "prefetched_rows": rs.get("prefetched_rows"), "fetch_s": rs.get("fetch_seconds"),
                     "stall_s": rs.get("stall_seconds"), "read_bytes": rs.get("bytes_read"),
                     "written_bytes": rs.get("bytes_written"), "io_mode": rs.get("io_mode")})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def live_cache_stats(store, run_id: int, dim: int) -> Optional[dict]:
    """Measured slow-tier traffic of a cached run so far, from its ``row_fetch``/``row_writeback`` records.

    Returns ``{"steps", "rows_accessed", "rows_read", "read_ratio", "bytes_read", "bytes_written",
    "fetch_s"}`` or None when the run has no such records yet. ``read_ratio`` = rows read from
    the slow tier / rows the steps needed; for on-demand policies (lru, lfu, none) it is the miss
    rate, for the oracle and static it also counts prefetched and warm-up reads.
    """
    tot = store.kernel_totals_frame(int(run_id))
    if tot is None or tot.empty:
        return None
    fetch = tot[tot["name"] == "row_fetch"]
    if fetch.empty:
        return None
    wb = tot[tot["name"] == "row_writeback"]
    stride = int(fetch["row_bytes"].max() or 0)
    accessed = float(fetch["bytes_written"].sum()) / (4.0 * int(dim))
    read = float(fetch["bytes_read"].sum()) / stride if stride else float("nan")
    return {"steps": int(fetch["steps"].max()), "rows_accessed": accessed, "rows_read": read,
            "read_ratio": read / accessed if accessed else float("nan"),
            "bytes_read": int(fetch["bytes_read"].sum()),
            "bytes_written": int(wb["bytes_written"].sum()) if not wb.empty else 0,
            "fetch_s": float(fetch["ns"].sum()) / 1e9}


def live_text(run: dict, stats: Optional[dict]) -> str:
    cfg = RunRecord.of(run).config
    head = (f"**Run #{run.get('id')}** ({cfg.get('cache_policy')} cache of {cfg.get('cache_size')} rows, "
            f"{cfg.get('dataset')}) is **{run.get('status')}**")
    if stats is None:
        return head + ": no slow-tier records yet."
    est = ""
    if cfg.get("cache_policy") in ("lru", "lfu", "none"):
        est = f" → live hit rate **{fmt_percent(1 - stats['read_ratio'])}**"
    return (head + f" — after {stats['steps']:,} steps (measured): {stats['rows_read']:,.0f} rows read from the "
            f"slow tier for {stats['rows_accessed']:,.0f} rows needed (read ratio {stats['read_ratio']:.3f}{est}); "
            f"{fmt_bytes(stats['bytes_read'])} read, {fmt_bytes(stats['bytes_written'])} written back, "
            f"{stats['fetch_s']:.2f} s in row fetches. The exact hit rate is in the table when it finishes.")


# ----------------------------------------------------------------------------
# the page
# ----------------------------------------------------------------------------
def dataset_choices() -> tuple[list[str], set, Optional[str]]:
    """``(names, prepared names, reason)`` from the data registry (prepared ones first)."""
    rows, why = safe_call(list_datasets, default=[])
    rows = sorted(rows or [], key=lambda r: (not r.get("prepared", False), str(r.get("name"))))
    names = [str(r["name"]) for r in rows if "name" in r]
    return names, {str(r["name"]) for r in rows if r.get("prepared")}, why


def default_dataset(names: list[str], prepared: set = frozenset()) -> str:
    """synth-small, else ml-100k, else synth-tiny (a prepared one first), else the first name."""
    for pool in (prepared, set(names)):
        for n in ("synth-small", "ml-100k", "synth-tiny"):
            if n in pool:
                return n
    return names[0] if names else "synth-small"


# The request's fields the form shows (epochs and seed are the CLI's), made by the dashboard's form
# generator from SimRequest's records.
FORM_FIELDS = {k: v for k, v in dataclass_fields(SimRequest).items() if k not in ("epochs", "seed")}
SimForm = form_class("SimForm", FORM_FIELDS)

# The plot area before any simulation was asked for.
IDLE_TEXT = "*Press Simulate.*"


class CachePage(pn.viewable.Viewer):
    """Simulated hit rate and slow-tier bytes per policy; measured counters of cached runs."""

    lab = param.ClassSelector(class_=Lab)
    outcome = param.Parameter(default=None, doc="the SimOutcome shown")
    busy = param.Boolean(default=False)

    def __init__(self, lab: Lab, graph_loader: Callable = load_graph, autostart: Optional[bool] = None,
                 **params):
        super().__init__(lab=lab, **params)
        self.graph_loader = graph_loader
        names, prepared, _ = dataset_choices()
        first = default_dataset(names, prepared)
        self.form = SimForm(dataset=first)
        overrides = {"trace": {"options": {"BPR batches (MF, 0 layers)": "mf", "sampled sub-graphs": "sampled"}}}
        if names:
            overrides["dataset"] = {"type": pn.widgets.Select, "options": names}
        self.w = form_widgets(self.form, FORM_FIELDS, overrides, prefix="cache", width=240)
        self.button = pn.widgets.Button(name="Simulate", button_type="primary", css_classes=["cache-simulate"])
        self.button.on_click(lambda _e: self.start())
        self.form_error = pn.pane.Markdown("", styles={"color": "#c62828"}, visible=False, width=240)
        self.status_md = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.results = pn.Column(pn.pane.Markdown(IDLE_TEXT), sizing_mode="stretch_width",
                                 min_height=300, css_classes=["cache-results"])
        self.runs_pane = pn.Column(sizing_mode="stretch_width")
        self.live_md = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._future = None
        self._doc = pn.state.curdoc
        self._live_cb = None
        self.refresh_runs()
        served = self._doc is not None and self._doc.session_context is not None
        if served:
            self._live_cb = pn.state.add_periodic_callback(self.refresh_live, period=LIVE_POLL_MS)
        # a served page simulates its default at once, unless that would first generate or
        # download the dataset (then the person chooses and presses Simulate)
        if autostart is None:
            autostart = served and first in prepared
        if autostart:
            self.start()

    # -- simulation -------------------------------------------------------------
    def request(self) -> SimRequest:
        """The form as a checked SimRequest (UserError names the field)."""
        f = self.form
        req = SimRequest(
            dataset=str(f.dataset or "").strip(), trace=f.trace, batch_size=f.batch_size, dim=f.dim,
            optimizer=f.optimizer,
            fanouts=tuple(parse_positive_ints(f.fanouts, "fan-outs")) if f.trace == "sampled" else SimRequest.fanouts,
            cache_sizes=tuple(parse_cache_sizes(f.cache_sizes)),
            lookaheads=tuple(parse_positive_ints(f.lookaheads, "look-aheads")),
            policies=tuple(p for p in SIMULATED_CACHE_POLICIES if p in (f.policies or [])))
        return req.checked()

    def start(self):
        """Check the form and simulate on the worker thread; returns the Future (None on a form error)."""
        try:
            req = self.request()
        except UserError as e:
            self.form_error.object, self.form_error.visible = f"⚠ {e}", True
            return None
        self.form_error.visible = False
        self.busy = True
        self.button.disabled = True
        self.results.loading = True
        self.status_md.object = f"Simulating {req.dataset} ({req.trace} trace)…"
        # what the plot area says matches the button: no "Press Simulate" while it is disabled
        self.results.objects = [pn.pane.Markdown(f"*Simulating {req.dataset}: the plots appear here when it "
                                                 f"ends.*", css_classes=["cache-pending"])]
        fut = EXECUTOR.submit(simulate_cached, req, self.graph_loader)
        self._future = fut
        doc = self._doc

        def done(f):
            if doc is not None and doc.session_context is not None:
                def show():
                    from panel.io.state import set_curdoc
                    with set_curdoc(doc):
                        self._show(f)
                doc.add_next_tick_callback(show)   # bokeh models change on the session's thread only
            else:
                self._show(f)
        fut.add_done_callback(done)
        return fut

    def _show(self, fut) -> None:
        try:
            out = fut.result()
        except Exception as e:  # a bug in the simulator must not leave the spinner on forever
            out = SimOutcome(SimRequest(), pd.DataFrame(), {}, {}, 0, 0.0, 0.0, error=f"{type(e).__name__}: {e}")
        if fut is not self._future:
            return  # a newer request replaced this one
        self.outcome = out
        try:
            view = self.render(out)
        except Exception as e:  # a plot that cannot be drawn must not leave the spinner on forever
            out.error = f"{type(e).__name__}: {e}"
            view = error_note(f"Simulation results could not be drawn: {out.error}")
        self.results.objects = [view]
        self.results.loading = False
        self.button.disabled = False
        self.busy = False
        self.status_md.object = "" if out.error else (
            f"{out.request.dataset}: trace built in {out.trace_seconds:.2f} s, {len(out.frame)} simulations in "
            f"{out.sim_seconds:.2f} s (measured, on a worker thread).")

    def render(self, out: SimOutcome):
        """The plots of one outcome (or its error)."""
        if out.error:
            return error_note(f"Simulation not run: {out.error}")
        curves = size_curves(out.frame)
        la = lookahead_curves(out.frame)
        why = chart_reasons(out)
        notes = (out.frame[out.frame["note"].fillna("") != ""] if "note" in out.frame.columns
                 else out.frame.iloc[0:0])
        parts = [pn.pane.Markdown(skew_text(out.skew, out.trace_info), sizing_mode="stretch_width"),
                 pn.pane.Markdown(
                     f"All hit rates and slow-tier bytes below are **modeled** by the trace simulator "
                     f"(rows x {out.row_bytes} B per row: embedding + {out.request.optimizer} state), "
                     f"not measured on a device. Oracle curves use its largest look-ahead "
                     f"(L={max(out.request.lookaheads)}).{auto_text(out)}", sizing_mode="stretch_width"),
                 # one above the other: side by side their legends left each plot a third of its width
                 pn.pane.HoloViews(hit_rate_plot(curves, why["sizes"]), sizing_mode="stretch_width"),
                 pn.pane.HoloViews(bytes_plot(curves, why["sizes"]), sizing_mode="stretch_width"),
                 pn.pane.HoloViews(lookahead_plot(la, why["lookahead"]), sizing_mode="stretch_width")]
        if not notes.empty:
            skipped = sorted({f"{r.policy} at {r.capacity_pct:.3g}%" for r in notes.itertuples()})
            parts.append(pn.pane.Markdown(
                f"*Not simulated (cache smaller than the largest batch, {out.trace_info.get('max_rows_per_batch', 0):,}"
                f" rows): {', '.join(skipped)}.*", sizing_mode="stretch_width"))
        return pn.Column(*parts, sizing_mode="stretch_width")

    # -- measured runs ----------------------------------------------------------------
    @param.depends("lab.runs", watch=True)
    def refresh_runs(self) -> None:
        store = self.lab.store
        if store is None:
            self.runs_pane.objects = [not_available("Cached runs (run store)", self.lab.store_reason)]
            return
        df, why = safe_call(cached_runs, store, default=None)
        if df is None:
            self.runs_pane.objects = [error_note(f"Could not read cached runs: {why}")]
            return
        done = df[df["hit_rate"].notna()]
        if done.empty:
            self.runs_pane.objects = [pn.pane.Markdown(
                "*No finished cached runs yet: launch a run with `mode sampled` and a `cache_policy` "
                "(e.g. `gnnrec-lab run --mode sampled --cache-policy oracle`); its measured hit rate, "
                "fetch and stall time appear here.*", sizing_mode="stretch_width")]
            return
        show = done.assign(hit_rate=(done["hit_rate"] * 100).round(1),
                           read=done["read_bytes"].map(lambda b: fmt_bytes(b) if b == b and b is not None else "–"),
                           written=done["written_bytes"].map(
                               lambda b: fmt_bytes(b) if b == b and b is not None else "–"))
        show = show.drop(columns=["read_bytes", "written_bytes"]).rename(
            columns={"hit_rate": "hit rate % (measured)", "fetch_s": "fetch s", "stall_s": "stall s"})
        self.runs_pane.objects = [pn.pane.DataFrame(show.set_index("id"), sizing_mode="stretch_width",
                                                    float_format="{:.3f}".format, css_classes=["cache-runs"])]

    def refresh_live(self) -> Optional[str]:
        """Update the live line from the newest running cached run; returns its text ('' when none)."""
        store = self.lab.store
        if store is None:
            return ""
        try:
            running = cached_runs(store, status=RunStatus.RUNNING, limit=1)
            if running.empty:
                if self.live_md.object:      # a run just ended: its counters are in the table now
                    self.live_md.object = ""
                    self.refresh_runs()
                return ""
            rid = int(running["id"].iloc[0])
            run = self.lab.run(rid) or {"id": rid}
            run.setdefault("id", rid)
            stats = live_cache_stats(store, rid, int(RunRecord.of(run).config.get("dim") or 64))
            text = live_text(run, stats)
        except Exception as e:  # a bad read must not stop the periodic callback
            text = f"Live cache stats unavailable: {type(e).__name__}: {e}"
        self.live_md.object = text
        return text

    def __panel__(self):
        form = pn.Column("### Simulate", *self.w.values(), self.form_error, self.button, width=270)
        return pn.Column(
            "## Embedding cache",
            pn.Row(form, pn.Column(self.status_md, self.results, sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            "### Cached runs (measured)", self.live_md, self.runs_pane,
            sizing_mode="stretch_width")
