"""Smaller page fixes, in-process: the Cache page's busy state and batch size, the read-only
`panel serve` app, the roofline and `% bound` explained where shown."""
from __future__ import annotations

import threading

import panel as pn
import pytest
from test_dashboard_components import RecordingRunner, _calibrate, texts, tiny_graph

from gnnrec_lab.dashboard.common import Lab

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")


def test_cache_page_says_simulating_while_busy_and_uses_the_cli_batch(store):
    from gnnrec_lab.commands.cli import build_parser
    from gnnrec_lab.dashboard.cache import CachePage
    release = threading.Event()

    def held_graph(name):
        release.wait(30)
        return tiny_graph(name)
    page = CachePage(Lab(store=store, runner=RecordingRunner(store)), graph_loader=held_graph, autostart=False)
    cli = build_parser().parse_args(["cache", "skew", "--dataset", "x"]).batch_size
    assert page.w["batch_size"].value == int(cli) == 1024
    assert "Press Simulate" in texts(page.results)
    page.w["batch_size"].value = 16
    fut = page.start()
    try:
        assert page.button.disabled
        busy = texts(page.results)
        assert "Press Simulate" not in busy and "Simulating " in busy, busy
    finally:
        release.set()
    fut.result(timeout=30)


def test_panel_serve_app_read_only_beyond_loopback(store):
    from gnnrec_lab.dashboard.app import build_app
    from gnnrec_lab.dashboard.serving import ServerSettings, launch_verdict
    why = launch_verdict(ServerSettings(listen=("0.0.0.0",), port=5006, origins=("localhost:5006",),
                                        host="127.0.0.1:5006")).reason
    lab = Lab(store=store, read_only=why)
    assert lab.runner is None
    with pytest.raises(RuntimeError, match="read-only"):
        from gnnrec_lab.config.run import RunConfig
        lab.launch(RunConfig(dataset="synth-tiny"))
    app = build_app(lab)
    side = "\n".join(str(o.object) for o in app.sidebar if hasattr(o, "object"))
    assert "Read-only" in side and "gnnrec-lab dashboard" in side and "every interface" in side
    launch = app.tabs.page("Launch")
    assert launch.button.disabled and "Launching is off here" in texts(launch)


def test_roofline_and_bound_are_explained_where_shown(store):
    import pandas as pd

    from gnnrec_lab.dashboard.breakdown import BreakdownPage
    from gnnrec_lab.dashboard.fake import fill_store
    from gnnrec_lab.memory.analysis import BOUND_NOTE, ROOFLINE_NOTE, format_breakdown
    _calibrate()
    assert "Above 100%" in BOUND_NOTE
    df = pd.DataFrame([dict(kernel="spmm", phase="forward", calls=1, seconds=0.1, share=1.0, bytes=1e9, GBps=10.0,
                            GFLOPs=1.0, intensity=0.1, pct_of_bound=140.0)])
    assert BOUND_NOTE in format_breakdown(df)
    ids = fill_store(store, n_runs=1, steps=4)
    page = BreakdownPage(Lab(store=store, runner=RecordingRunner(store)), run_id=ids[0])
    assert ROOFLINE_NOTE in texts(page.body())


def test_cache_plots_draw_when_no_policy_could_be_simulated():
    """A batch that reads more rows than any cache size holds leaves every curve empty: the plots
    still draw (they raised, and the page span forever), and a render error reaches the page."""
    import holoviews as hv
    import pandas as pd

    from gnnrec_lab.dashboard.cache import bytes_plot, hit_rate_plot, lookahead_plot
    hv.extension("bokeh")
    empty = pd.DataFrame(columns=["policy", "capacity_pct", "hit_rate", "read_MiB", "written_MiB"])
    for plot in (hit_rate_plot(empty), bytes_plot(empty),
                 lookahead_plot(pd.DataFrame(columns=["size", "lookahead", "hit_rate", "belady_hit_rate"]))):
        hv.render(plot)


def test_live_and_breakdown_name_the_placement_their_modeled_times_assume(store):
    from test_dashboard_components import _modeled_run

    from gnnrec_lab.dashboard.breakdown import BreakdownPage
    from gnnrec_lab.dashboard.live import LiveMonitor, LivePage
    _calibrate()
    mid = _modeled_run(store)
    lab = Lab(store=store, runner=RecordingRunner(store))
    page = LivePage(lab)
    page.monitor = LiveMonitor(lab=lab, run_id=mid)
    assert "all tensor classes on the device" in texts(page.header())
    body = texts(BreakdownPage(lab, run_id=mid).body())
    assert body.count("Placement: all tensor classes on the device") == 2   # tier chart and kernel-by-phase chart


@pytest.mark.parametrize("placement", [{}, {"graph": "dram", "embeddings": "dram"}])
def test_launch_and_live_say_what_an_app_direct_run_keeps_in_dram_in_the_same_words(store, placement):
    """Launch said '36.7 MiB in DRAM' of an App Direct run while Live said 'all tensor classes on
    the device': both now say where it runs (this host's DRAM) and what the device model keeps
    in DRAM, from tiermodel.dram_residency."""
    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.dashboard.launch import LaunchPage
    from gnnrec_lab.dashboard.live import LiveMonitor, LivePage
    from gnnrec_lab.memory.tiermodel import INTERPRETER, dram_residency
    _calibrate()
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=16, batch_size=512, epochs=1,
                    memory_mode="optane_app_direct", placement=placement)
    words = dram_residency("optane_app_direct", placement)
    assert "On optane_pmem100_appdirect_6x (modeled)" in words and INTERPRETER in words
    kept = "embeddings, graph and the interpreter" if placement else "no tensor class, only the interpreter"
    assert f"in DRAM there: {kept}" in words
    lab = Lab(store=store, runner=RecordingRunner(store))
    launch = LaunchPage(lab)
    launch.form.set_from(cfg)
    assert words in texts(launch.predictions())
    rid = store.add_run(cfg, status="running")
    store.record_start(rid, {"steps_per_epoch": 2, "footprint_predicted": {"graph": 1000}})
    live = LivePage(lab)
    live.monitor = LiveMonitor(lab=lab, run_id=rid)
    assert words in texts(live.header())
    dram = dram_residency("dram", placement)
    assert "On " not in dram and dram in dram_residency("optane_app_direct", placement)


def _ml100k_graph(_name=None):
    from gnnrec_lab.dashboard.cache import load_graph
    from gnnrec_lab.data import list_datasets
    if not any(r.get("name") == "ml-100k" and r.get("prepared") for r in list_datasets()):
        pytest.skip("ml-100k is not prepared here (`make data`)")
    return load_graph("ml-100k")


def test_cache_page_default_view_draws_every_policy_on_ml100k(store):
    """The defaults (5%..40% of rows at batch 1024) were all below one ml-100k batch (1,635 of its
    2,625 rows): 36 simulations, a flat "none" line, an empty look-ahead chart. The default sizes
    (auto) now start above one batch, so every policy is drawn, apart."""
    import holoviews as hv
    import numpy as np

    from gnnrec_lab.config.run import SIMULATED_CACHE_POLICIES
    from gnnrec_lab.dashboard.cache import CachePage, chart_reasons, lookahead_curves, run_simulation, size_curves
    hv.extension("bokeh")
    graph = _ml100k_graph()
    page = CachePage(Lab(store=store, runner=RecordingRunner(store)), graph_loader=lambda _n: graph, autostart=False)
    page.w["dataset"].value = "ml-100k"
    req = page.request()
    assert req.cache_sizes == ("auto",) and req.batch_size == 1024
    out = run_simulation(req, graph_loader=lambda _n: graph)
    assert out.error is None and out.trace_info["max_rows_per_batch"] > 0.5 * out.trace_info["table_rows"]
    curves = size_curves(out.frame)
    drawn = {p.split("(")[0].split("-")[0] for p in curves["policy"]}
    assert drawn == set(SIMULATED_CACHE_POLICIES), drawn
    per = curves.groupby("policy")["hit_rate"]
    assert (per.count() >= 3).all(), per.count()
    assert (curves["capacity_rows"] > out.trace_info["max_rows_per_batch"]).all()
    at = curves.pivot_table(index="capacity_rows", columns="policy", values="hit_rate")
    assert np.all(at.filter(like="belady").values[:, 0] > at["lru"].values)   # policies apart
    assert not lookahead_curves(out.frame).empty
    assert chart_reasons(out) == {"sizes": None, "lookahead": None}
    body = texts(page.render(out))
    assert "Cache sizes (auto)" in body and "Not simulated" not in body


def test_a_cache_chart_with_nothing_to_draw_says_why_on_the_chart(store):
    import holoviews as hv
    from bokeh.models import Text

    from gnnrec_lab.dashboard.cache import CachePage, chart_reasons, run_simulation
    hv.extension("bokeh")
    graph = _ml100k_graph()
    page = CachePage(Lab(store=store, runner=RecordingRunner(store)), graph_loader=lambda _n: graph, autostart=False)
    page.w["dataset"].value = "ml-100k"
    page.w["cache_sizes"].value = "5%,10%,20%,40%"
    out = run_simulation(page.request(), graph_loader=lambda _n: graph)
    why = chart_reasons(out)
    assert why["sizes"] and why["sizes"] == why["lookahead"]
    assert "below one batch's 1,635 distinct rows" in why["sizes"]
    view = page.render(out)
    charts = [hv.render(p.object) for p in view.select(pn.pane.HoloViews)]
    assert len(charts) == 3
    for fig in charts:
        words = " ".join(" ".join(r.data_source.data["text"]) for r in fig.renderers if isinstance(r.glyph, Text))
        assert "Nothing to compare" in words and "1,635" in words, fig.title.text
    page.w["cache_sizes"].value = "auto"
    page.w["policies"].value = ["lru", "lfu"]
    why = chart_reasons(run_simulation(page.request(), graph_loader=lambda _n: graph))
    assert why["sizes"] is None and "oracle is not among the policies" in why["lookahead"]


def test_auto_sizes_on_a_table_one_batch_reads_whole_draw_the_trace_and_say_why(store):
    """synth-tiny at batch 1024: one batch reads nearly every row, so auto finds no size to compare
    policies at; the page still shows the trace's skew and says why on the charts (not an error)."""
    import holoviews as hv

    from gnnrec_lab.cache.study import auto_capacities, make_trace
    from gnnrec_lab.dashboard.cache import CachePage, chart_reasons, run_simulation
    hv.extension("bokeh")
    graph = tiny_graph()
    assert auto_capacities(make_trace(graph, "mf", 1024)) == []
    assert auto_capacities(make_trace(graph, "mf", 4))       # small batches leave room
    page = CachePage(Lab(store=store, runner=RecordingRunner(store)), graph_loader=tiny_graph, autostart=False)
    out = run_simulation(page.request(), graph_loader=tiny_graph)
    assert out.error is None and out.skew
    why = chart_reasons(out)
    assert why["sizes"].startswith("Nothing to compare: one batch reads") and why["lookahead"] == why["sizes"]
    body = texts(page.render(out))
    assert "Skew of the trace" in body and "Simulation not run" not in body
