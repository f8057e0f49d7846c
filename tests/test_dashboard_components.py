"""In-process tests of the dashboard components (no browser, no server)."""
from __future__ import annotations

import pandas as pd
import panel as pn
import pytest

from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.dashboard import common
from gnnrec_lab.dashboard.breakdown import BreakdownPage, kernel_phase_ms, kernel_shares
from gnnrec_lab.dashboard.common import Lab, modeled_bars
from gnnrec_lab.dashboard.compare import ComparePage, epoch_seconds, runs_table
from gnnrec_lab.dashboard.fake import fake_records, fill_store
from gnnrec_lab.dashboard.launch import EXAMPLE_CONFIG, LaunchPage, config_from_values
from gnnrec_lab.dashboard.live import (
    LiveMonitor,
    LivePage,
    chart_frame,
    evaluations_ahead,
    kernel_ms_per_step,
    progress_percent,
    stacked_area,
    steady_eta,
)
from gnnrec_lab.runs.store import connect
from gnnrec_lab.services.projection import modeled_runs_frame

# Panel 1.9 renames widget name/button_type; the lab keeps the spelling panel>=1.4 understands.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")


class RecordingRunner:
    """Stands in for the runner where a test checks what the page hands it (no subprocess)."""

    def __init__(self, store):
        self.store, self.launched, self.cancelled = store, [], []

    def launch(self, config):
        self.launched.append(config)
        return self.store.add_run(config, status="queued")

    def status(self, run_id):
        return self.store.status(run_id)

    def cancel(self, run_id):
        self.cancelled.append(run_id)
        return "cancelled"


def texts(viewable) -> str:
    """All Markdown/Alert text inside a rendered component tree."""
    out = []
    for obj in pn.panel(viewable).select(lambda o: isinstance(o, (pn.pane.Markdown, pn.pane.Alert))):
        if obj.visible:
            out.append(str(obj.object))
    return "\n".join(out)


# -- launch ---------------------------------------------------------------------
def test_config_from_values_names_the_field():
    cfg, err = config_from_values({"dataset": "synth-tiny", "model": "lightgcn", "layers": 2})
    assert err is None and cfg.layers == 2
    cfg, err = config_from_values({"model": "lightgcn", "layers": 0})
    assert cfg is None and err.param == "layers"
    cfg, err = config_from_values({"batch_size": -5})
    assert cfg is None and err.param == "batch_size" and "-5" in str(err)


def test_invalid_form_shows_error_next_to_widget_and_disables_launch(store):
    lab = Lab(store=store, runner=RecordingRunner(store))
    page = LaunchPage(lab)
    assert page.button.disabled is False
    page.form.dim = 0
    assert page.button.disabled is True
    assert page.errors["dim"].visible and "dim" in page.errors["dim"].object
    assert not page.errors["layers"].visible
    page.form.dim = 16
    assert page.button.disabled is False and not page.errors["dim"].visible
    page.placement_inputs["embeddings"].value = "tape:/dev/st0"
    assert page.button.disabled is True and page.errors["placement"].visible


def test_form_widgets_are_labelled_in_words_from_the_field_docs(store):
    """Labels come from config.FIELD_DOCS (the words of the CLI's --help), never a field name."""
    from gnnrec_lab.config.run import field_help, field_label
    from gnnrec_lab.dashboard.cache import CachePage
    from gnnrec_lab.dashboard.launch import FORM_FIELDS, LaunchForm
    lab = Lab(store=store, runner=RecordingRunner(store))
    page = LaunchPage(lab)
    assert page.widgets["batch_size"].name == "Batch size (interactions per step)"
    for k in FORM_FIELDS:
        w = page.widgets[k]
        assert w.name == field_label(k), k
        assert w.description == field_help(k, LaunchForm.param[k].default), k    # the tooltip, with the form's default
    assert page.widgets["max_steps_per_epoch"].description.endswith("(default: no cap)")
    cache = CachePage(lab, autostart=False)
    live, breakdown = LivePage(lab), BreakdownPage(lab)
    widgets = (list(page.placement_inputs.values()) + list(cache.w.values()) + [live.selector, breakdown.selector])
    for w in widgets:
        assert "_" not in w.name and w.name[0].isupper(), w.name
    table = ComparePage(lab).table                    # column headers in words, the columns keep their names
    assert set(table.titles) == set(table.value.columns) | {"id"}
    assert table.titles["batch_size"] == "Batch size" and table.titles["memory_mode"] == "Memory mode"
    assert all("_" not in t for t in table.titles.values()), table.titles


def test_launch_hands_the_form_config_to_the_runner(store):
    runner = RecordingRunner(store)
    lab = Lab(store=store, runner=runner)
    page = LaunchPage(lab)
    page.form.param.update(dataset="synth-tiny", layers=1, dim=8, epochs=1, max_steps_per_epoch=3)
    run_id = page.launch()
    assert run_id is not None and lab.run_id == run_id and lab.page == "Live"
    cfg = runner.launched[-1]
    assert (cfg.dataset, cfg.layers, cfg.dim, cfg.epochs, cfg.max_steps_per_epoch) == ("synth-tiny", 1, 8, 1, 3)
    assert store.get_run(run_id)["config"]["dim"] == 8


def test_fresh_install_offers_example_run_only_when_store_is_empty(store):
    runner = RecordingRunner(store)
    lab = Lab(store=store, runner=runner)
    page = LaunchPage(lab)
    assert page.example_button in pn.panel(page.fresh_install()).select(pn.widgets.Button)
    page._on_example(None)
    assert runner.launched[-1] == RunConfig.from_dict(EXAMPLE_CONFIG)
    assert not pn.panel(page.fresh_install()).select(pn.widgets.Button)


def test_missing_store_shows_not_available_note(monkeypatch):
    monkeypatch.setattr(common, "shared_store", lambda: (None, "ModuleNotFoundError: no store"))
    lab = Lab()
    assert lab.store is None and lab.runner is None
    page = LaunchPage(lab)
    assert "not available yet" in texts(page)
    assert page.button.disabled is True
    assert "not available yet" in texts(BreakdownPage(lab).body())
    assert "not available yet" in texts(ComparePage(lab))


# -- live -----------------------------------------------------------------------
def test_progress_percent():
    assert progress_percent(0, 100) == 0.0 and progress_percent(25, 100) == 25.0
    assert progress_percent(5, None) is None and progress_percent(120, 100) == 100.0


def synthetic_timeline(jit_s=90.0, step_s=0.03, spe=20, epochs=5, first_eval_s=3.0, eval_s=2.0):
    """(steps frame as the store holds it, wall time the run ends): a start-up and JIT of ``jit_s``
    before step 1, steps of ``step_s``, an evaluation after every epoch (the first slower), a test one."""
    import numpy as np
    rows, wall = [], jit_s
    for e in range(1, epochs + 1):
        for i in range(spe):
            wall += step_s
            rows.append({"step": (e - 1) * spe + i + 1, "epoch": e, "seconds": step_s * 0.9, "wall": wall})
        wall += first_eval_s if e == 1 else eval_s
    end = wall + eval_s                                   # the test evaluation
    return pd.DataFrame(rows).astype({"step": float, "epoch": float}), end, np.array([r["wall"] for r in rows])


def test_steady_eta_ignores_jit_and_the_first_evaluation():
    tl, end, walls = synthetic_timeline()
    kw = dict(steps_per_epoch=20, epochs=5, eval_every=1)
    for done in (10, 30, 50, 90):
        seen = tl[tl["step"] <= done]
        eta, note = steady_eta(seen, 100, **kw)
        truth = end - walls[done - 1]
        if done < 20:        # no evaluation timed yet: the steps only, and the note says so
            assert eta == pytest.approx((100 - done) * 0.03, rel=0.05) and note.startswith("steps only")
            assert eta < truth
        elif done < 40:      # only the first (slower) evaluation timed: pessimistic, within 1.5x
            assert truth <= eta <= 1.5 * truth, (done, eta, truth)
        else:                # later evaluations known: the first one is left out
            assert eta == pytest.approx(truth, rel=0.02), (done, eta, truth)
    # what the elapsed-time mean said at step 30 (JIT and start-up counted as step time): ~17x off
    elapsed = walls[29]
    assert elapsed / 30 * 70 > 10 * (end - walls[29])
    assert steady_eta(tl.iloc[0:0], 100, **kw)[0] is None
    assert steady_eta(tl.head(5), None)[0] is None


def test_evaluations_ahead_counts_what_the_loop_will_run():
    # the closed form against the loop's own rule: every eval_every-th epoch end and the last one's
    for epochs in (1, 2, 5, 7, 12, 100):
        for k in (1, 2, 3, 5, 200):
            for completed in range(0, epochs + 2):
                want = sum(1 for e in range(completed + 1, epochs + 1) if e % k == 0 or e == epochs)
                assert evaluations_ahead(completed, epochs, k) == want, (completed, epochs, k)
    assert evaluations_ahead(0, 100_000, 100_000) == 1


def test_live_eta_uses_the_recorded_timeline(store):
    tl, end, walls = synthetic_timeline()
    cfg = RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=5)
    rid = store.add_run(cfg, status="running")
    store.record_start(rid, {"steps_per_epoch": 20})
    con = connect(store.path)   # steps with the timeline's own wall times (add_step stamps the time now)
    con.executemany("INSERT INTO steps(run_id, step, epoch, loss, seconds, wall) VALUES (?,?,?,?,?,?)",
                    [(rid, int(r.step), int(r.epoch), 1.0, r.seconds, 1e9 + r.wall) for r in tl.head(50).itertuples()])
    con.close()
    mon = LiveMonitor(lab=Lab(store=store, runner=RecordingRunner(store)), run_id=rid)
    pct, eta = mon.eta()
    assert pct == 50.0 and eta == pytest.approx(end - walls[49], rel=0.25)


def test_live_monitor_streams_only_new_steps(store):
    import numpy as np
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=8, epochs=2)
    rid = store.add_run(cfg, status="running")
    store.record_start(rid, {"steps_per_epoch": 5})
    rng = np.random.default_rng(0)
    for s in range(1, 4):
        store.add_step(rid, s, 1, 1.0 / s, 0.01, fake_records(s, 2, 8, rng))
    lab = Lab(store=store, runner=RecordingRunner(store))
    mon = LiveMonitor(lab=lab, run_id=rid)
    assert mon.total == 10 and mon.done == 3 and mon.status == "running"
    assert len(mon.loss.data) == 3
    n_kernel_rows = len(mon.kernels.data)
    assert n_kernel_rows > 0 and set(mon.kernels.data["step"]) == {1.0, 2.0, 3.0}
    assert mon.poll() == 0 and len(mon.loss.data) == 3
    store.add_step(rid, 4, 1, 0.2, 0.01, fake_records(4, 2, 8, rng))
    assert mon.poll() == 1
    assert list(mon.loss.data["step"]) == [1.0, 2.0, 3.0, 4.0]
    assert set(mon.kernels.data["step"]) == {1.0, 2.0, 3.0, 4.0}
    pct, _ = mon.eta()
    assert pct == 40.0 and mon.device is None
    assert "DRAM (`dram`) (measured on this host)" in texts(LivePage(lab).header())
    store.add_eval(rid, 1, 4, "valid", {"recall@20": 0.1}, 1.0)
    store.set_status(rid, "finished")
    mon.poll()
    assert mon.status == "finished" and mon.rss_bytes is None


def test_kernel_ms_per_step_sums_per_step():
    df = pd.DataFrame({"step": [1, 1, 1, 2], "name": ["spmm", "spmm", "adam", "spmm"],
                       "ns": [1e6, 2e6, 5e5, 4e6]})
    out = kernel_ms_per_step(df).set_index(["step", "name"])["ms"]
    assert out[(1.0, "spmm")] == pytest.approx(3.0)
    assert out[(1.0, "adam")] == pytest.approx(0.5)
    assert out[(2.0, "spmm")] == pytest.approx(4.0)


# -- breakdown -----------------------------------------------------------------------
def test_kernel_phase_and_shares():
    df = pd.DataFrame({"step": [1, 1, 2, 2], "name": ["spmm", "spmm", "spmm", "adam"],
                       "phase": ["forward", "backward", "forward", "optimizer"],
                       "ns": [2e6, 4e6, 2e6, 2e6]})
    kp = kernel_phase_ms(df).set_index(["name", "phase"])["ms"]
    assert kp[("spmm", "forward")] == pytest.approx(2.0)   # 4 ms over 2 steps
    assert kp[("spmm", "backward")] == pytest.approx(2.0)
    assert kp[("adam", "optimizer")] == pytest.approx(1.0)
    sh = kernel_shares(df).set_index("name")["share"]
    assert sh["spmm"] == pytest.approx(0.8) and sh.sum() == pytest.approx(1.0)


def test_modeled_bars_mark_every_modeled_bar():
    df = pd.DataFrame({"device": ["host", "optane", "cxl"], "seconds": [1.0, 3.0, 2.0],
                       "kind": ["measured", "modeled", "modeled"]})
    plot = modeled_bars(df, "device", "seconds", "s per step")
    bars = plot.data
    assert list(bars["hatch"]) == [" ", "/", "/"]
    # each bar says its value, in ms (the unit every sentence uses), and its kind
    assert bars["label"].tolist() == ["1,000 ms measured", "3,000 ms modeled", "2,000 ms modeled"]
    assert list(bars["ms"]) == [1000.0, 3000.0, 2000.0]


def test_modeled_bars_mark_the_selected_mode_and_lie_flat():
    """Issue 51: the bars had no values, an axis in seconds, overlapping names and no mark for the
    mode chosen. Names now sit one per row (horizontal bars), the chosen mode's bar is outlined and
    labelled."""
    import holoviews as hv

    from gnnrec_lab.dashboard.common import CHOSEN_MARK
    df = pd.DataFrame({"device": ["host", "optane_pmem100_appdirect_6x"], "seconds": [0.0131, 0.0437],
                       "kind": ["measured", "modeled"], "band": [None, 0.05], "chosen": [False, True]})
    plot = modeled_bars(df, "device", "seconds", "kernel s per step")
    assert plot.data["label"].tolist() == ["13.1 ms measured", f"43.7 ms modeled ±5%  {CHOSEN_MARK}"]
    assert list(plot.data["line"]) == ["white", "black"]
    fig = hv.render(plot)
    assert fig.xaxis.axis_label == "kernel ms per step" and "ms" in fig.title.text
    assert not fig.legend or not fig.legend[0].items      # no legend of outline colours ("white", "black")
    assert fig.y_range.factors == ["host", "optane_pmem100_appdirect_6x"] or \
        set(fig.y_range.factors) == {"host", "optane_pmem100_appdirect_6x"}      # names on the vertical axis


def test_breakdown_page_renders_fake_run(store):
    ids = fill_store(store, n_runs=1, steps=4)
    lab = Lab(store=store, runner=RecordingRunner(store))
    page = BreakdownPage(lab)
    assert page.run_id == ids[0]
    body = page.body()
    assert f"Run #{ids[0]}" in texts(body)
    assert body.select(pn.pane.HoloViews) and body.select(pn.pane.Bokeh)


# -- compare --------------------------------------------------------------------------
def test_runs_table_and_epoch_seconds(store):
    ids = fill_store(store, n_runs=3, steps=4, epochs=2)
    runs = modeled_runs_frame(store)
    table = runs_table(runs)
    assert list(table.index) == sorted(ids, reverse=True)
    assert {"model", "layers", "batch_size", "status"} <= set(table.columns)
    es = epoch_seconds(store, runs)
    assert sorted(es["id"]) == sorted(ids)
    first = store.epochs_frame(ids[0])["seconds"].mean()
    assert es.set_index("id").loc[ids[0], "epoch_s"] == pytest.approx(first)


def test_compare_table_shows_every_test_metric_at_20(store):
    """Compare's table carries the five test metrics at K=20 the run stored (RecBole's default set),
    each under its own title, read from the store's one runs frame."""
    ids = fill_store(store, n_runs=1, steps=4)
    values = {"recall@20": 0.21, "mrr@20": 0.33, "ndcg@20": 0.17, "hit@20": 0.64, "precision@20": 0.05}
    store.add_eval(ids[0], 1, 4, "test", dict(values, users=943), 2.5)
    table = runs_table(modeled_runs_frame(store))
    for metric, value in values.items():
        assert table.loc[ids[0], f"test_{metric}"] == pytest.approx(value)
    from gnnrec_lab.dashboard.compare import TABLE_TITLES
    assert TABLE_TITLES["test_mrr@20"] == "Test MRR@20" and TABLE_TITLES["test_precision@20"] == "Test Precision@20"


def test_compare_selection_overlays_selected_runs(store):
    ids = fill_store(store, n_runs=3, steps=4)
    page = ComparePage(Lab(store=store, runner=RecordingRunner(store)))
    page.table.selection = [0, 2]
    assert sorted(page.selected) == sorted([ids[2], ids[0]])
    hv_panes = pn.panel(page.overlays()).select(pn.pane.HoloViews)
    labels = {el.label for p in hv_panes for el in p.object}
    assert labels == {f"#{ids[0]}", f"#{ids[2]}"}


def test_compare_shows_full_graph_against_distdgl_runs(store):
    page = ComparePage(Lab(store=store, runner=RecordingRunner(store)))
    assert "DistDGL appears once" in texts(page.distributed())
    full = store.add_run(RunConfig(dataset="synth-tiny", layers=2), status="running")
    store.record_result(full, {"config": RunConfig(dataset="synth-tiny", layers=2).to_dict(),
                               "epoch_seconds": [2.0, 4.0], "best_valid": {"recall@20": 0.3}, "time_to_target_s": 5.0})
    store.set_status(full, "finished")
    cfg = RunConfig(dataset="synth-tiny", layers=2, mode="sampled", fanouts=(10, 10))
    dist = store.add_run(cfg, status="running")
    store.record_result(dist, {"engine": "distdgl", "config": cfg.to_dict(), "epoch_seconds": [9.0],
                               "best_valid": {"recall@20": 0.29}, "info": {"distributed": {"partitions": 2}},
                               "distributed": {"explosion_factor": 0.4, "batch_seconds_median": {"total": 0.2}}})
    store.set_status(dist, "finished")
    body = pn.panel(page.distributed())
    df = body.select(pn.widgets.Tabulator)[0].value
    assert df.loc[full, "engine"] == "full" and df.loc[full, "epoch_s"] == pytest.approx(3.0)
    assert df.loc[full, "explosion_factor"] == 1.0
    assert df.loc[dist, "engine"] == "distdgl" and df.loc[dist, "explosion_factor"] == 0.4
    assert df.loc[dist, "batch_ms"] == pytest.approx(200.0)
    # the table's target and time to it are the bars' (one per depth from the full-graph run)
    from gnnrec_lab.services.comparison import full_vs_distributed
    bars = full_vs_distributed(store).set_index("id")
    assert df.loc[dist, "target"] == pytest.approx(0.95 * 0.3) == bars.loc[dist, "target"]
    assert df.loc[full, "time_to_target_s"] == bars.loc[full, "time_to_target_s"]
    assert body.select(pn.pane.HoloViews)


# -- app ------------------------------------------------------------------------------
def test_app_builds_launch_first_and_follows_page_requests(store):
    from gnnrec_lab.dashboard.app import build_app
    fill_store(store, n_runs=2, steps=4)
    lab = Lab(store=store, runner=RecordingRunner(store))
    app = build_app(lab)
    tabs = app.tabs
    assert list(tabs.pages) == ["Launch"]          # other pages are built on first view
    lab.page = "Breakdown"
    assert tabs.tabs.active == tabs.names.index("Breakdown") and "Breakdown" in tabs.pages
    assert lab.page == ""


def test_dashboard_command_rejects_bad_port(capsys):
    from gnnrec_lab.commands.cli import main
    with pytest.raises(SystemExit) as e:   # refused by the option's bounded parser, inside argparse
        main(["dashboard", "--port", "70000"])
    assert e.value.code == 2
    assert "--port" in capsys.readouterr().err


# -- cache ------------------------------------------------------------------------------
def tiny_graph(_dataset=None):
    """A seeded 60-user x 80-item graph with a few popular items (stands in for a dataset)."""
    import numpy as np

    from gnnrec_lab.graph.bipartite import BipartiteGraph
    rng = np.random.default_rng(0)
    users = rng.integers(0, 60, 1500)
    items = np.minimum(rng.zipf(1.6, 1500) - 1, 79)
    pairs = np.unique(np.stack([users, items], 1), axis=0)
    return BipartiteGraph(pairs, 60, 80)


def test_cache_form_parsing_names_the_field():
    from gnnrec_lab.dashboard.cache import SimRequest, parse_cache_sizes, parse_positive_ints
    from gnnrec_lab.util.errors import UserError
    assert parse_cache_sizes(" 5%, 100 ,12.5%") == ["5%", "100", "12.5%"]
    with pytest.raises(UserError, match="cache sizes"):
        parse_cache_sizes("5%,lots")
    with pytest.raises(UserError, match="cache sizes"):
        parse_cache_sizes("")
    assert parse_positive_ints("1, 10,200", "look-aheads") == [1, 10, 200]
    with pytest.raises(UserError, match="look-aheads"):
        parse_positive_ints("1,0", "look-aheads")
    with pytest.raises(UserError, match="batch size"):
        SimRequest(batch_size=0).checked()
    with pytest.raises(UserError, match="policies"):
        SimRequest(policies=("lru", "fifo")).checked()


def test_cache_simulation_curves_and_skew():
    from gnnrec_lab.dashboard.cache import SimRequest, lookahead_curves, run_simulation, size_curves, skew_text
    req = SimRequest(dataset="tiny", batch_size=32, cache_sizes=("30%", "60%", "100%"), lookaheads=(1, 4, 50))
    out = run_simulation(req, tiny_graph)
    assert out.error is None and out.row_bytes == 64 * 4 * 3          # embedding + two Adam moments
    curves = size_curves(out.frame)
    assert set(curves["policy"]) == {"none", "lru", "lfu", "static-degree", "oracle(L=50)", "belady"}
    assert curves["hit_rate"].between(0, 1).all()
    by = curves.set_index(["policy", "capacity_pct"])
    assert by.loc[("none", 100.0), "hit_rate"] == 0.0 and by.loc[("belady", 100.0), "hit_rate"] > 0.5
    for pct in curves.loc[curves["policy"] == "belady", "capacity_pct"]:
        assert by.loc[("belady", pct), "hit_rate"] >= by.loc[("lru", pct), "hit_rate"] - 1e-12
    raw = out.frame.set_index("policy")
    assert (raw["read_bytes"].dropna() == raw["misses"].dropna() * out.row_bytes).all()   # modeled bytes
    la = lookahead_curves(out.frame)
    assert sorted(la["lookahead"].unique()) == [1, 4, 50]
    assert (la["hit_rate"] <= la["belady_hit_rate"] + 1e-12).all()
    text = skew_text(out.skew, out.trace_info)
    assert "top 1% of rows" in text and "top 10%" in text
    assert out.skew["top10pct_share"] > 0.1      # zipf items: the hot 10% take more than their share


def test_cache_simulation_reports_user_mistakes():
    from gnnrec_lab.dashboard.cache import SimRequest, run_simulation
    out = run_simulation(SimRequest(trace="sampled", fanouts=()), tiny_graph)   # caught by the library
    assert out.frame.empty and "fanouts" in out.error


def test_cache_page_simulates_off_the_calling_thread(store):
    import threading

    from gnnrec_lab.dashboard.cache import CachePage
    seen = []

    def slow_graph(name):
        seen.append(threading.current_thread().name)
        return tiny_graph(name)

    page = CachePage(Lab(store=store, runner=RecordingRunner(store)), graph_loader=slow_graph, autostart=False)
    page.w["cache_sizes"].value = "40%,100%"
    page.w["batch_size"].value = 16
    fut = page.start()
    assert page.results.loading is True or fut.done()
    fut.result(timeout=30)
    deadline = __import__("time").monotonic() + 10
    while page.busy and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.01)
    assert seen and seen[0] != threading.current_thread().name
    assert page.results.loading is False and page.outcome.error is None
    assert pn.panel(page.results).select(pn.pane.HoloViews)
    assert "modeled" in texts(page.results)
    page.w["cache_sizes"].value = "5%,huge"
    assert page.start() is None and page.form_error.visible and "cache sizes" in page.form_error.object


def test_the_cache_and_launch_forms_come_from_one_generator_and_their_records(store):
    """Neither page builds a form widget by hand: each widget is the generator's, named and described
    by its option record (SimRequest's, RunConfig's), linked to the form's state both ways."""
    import ast
    import inspect

    from gnnrec_lab.cache.request import SIM_OPTIONS
    from gnnrec_lab.config.run import OPTIONS
    from gnnrec_lab.dashboard import cache as cache_page
    from gnnrec_lab.dashboard import launch as launch_page
    page = cache_page.CachePage(Lab(store=store, runner=RecordingRunner(store)), graph_loader=tiny_graph,
                                autostart=False)
    assert list(page.w) == list(cache_page.FORM_FIELDS)
    for k, w in page.w.items():
        assert w.name == SIM_OPTIONS[k].label and w.description.startswith(SIM_OPTIONS[k].help.split("{")[0]), k
        assert w.css_classes == [f"cache-{k}"]
    page.form.batch_size = 77
    assert page.w["batch_size"].value == 77
    page.w["policies"].value = ["lfu", "lru"]
    assert page.request().policies == ("lru", "lfu") and page.request().batch_size == 77
    lp = launch_page.LaunchPage(Lab(store=store, runner=None))
    assert all(lp.widgets[k].name == OPTIONS[k].label for k in lp.fields)
    for module in (cache_page, launch_page):
        built = [n for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.Call)
                 and "pn.widgets." in ast.unparse(n.func) and not ast.unparse(n.func).endswith("from_param")]
        names = sorted({ast.unparse(n.func) for n in built})
        # the buttons, and the Launch page's placement boxes (one per tensor class, no option record)
        assert set(names) <= {"pn.widgets.Button", "pn.widgets.TextInput"}, (module.__name__, names)
        if module is cache_page:
            assert names == ["pn.widgets.Button"]


def test_cached_runs_table_and_live_stats(store):
    import numpy as np

    from gnnrec_lab.dashboard.cache import CachePage, cached_runs, live_cache_stats
    from gnnrec_lab.util.recorder import KernelRecord
    plain = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8), status="finished")
    cfg = RunConfig(dataset="synth-tiny", layers=1, dim=8, mode="sampled", fanouts=(5,), cache_policy="lru",
                    cache_size="10%")
    rid = store.add_run(cfg, status="running")
    stride = 512
    for s in (1, 2):   # 100 rows needed per step, 30 and 10 read from the slow tier
        rec = KernelRecord("row_fetch", "forward", -1, s, 1_000_000, (30 if s == 1 else 10) * stride,
                           100 * 8 * 4, 0, "gather", stride, 0, "buffered")
        store.add_step(rid, s, 1, 1.0, 0.01, [rec])
    live = live_cache_stats(store, rid, dim=8)
    assert live["steps"] == 2 and live["rows_accessed"] == pytest.approx(200)
    assert live["rows_read"] == pytest.approx(40) and live["read_ratio"] == pytest.approx(0.2)
    assert live_cache_stats(store, plain, dim=8) is None
    page = CachePage(Lab(store=store, runner=RecordingRunner(store)), graph_loader=tiny_graph, autostart=False)
    assert "80.0%" in page.refresh_live()           # lru: 1 - read ratio is the hit rate
    assert "No finished cached runs" in texts(page.runs_pane)
    store.record_result(rid, {"info": {"sampled": {"row_store": {
        "hit_rate": 0.8, "hits": 160, "misses": 40, "fetch_seconds": 0.5, "stall_seconds": 0.25,
        "bytes_read": 40 * stride, "bytes_written": 0, "io_mode": "buffered"}}}})
    store.set_status(rid, "finished")
    df = cached_runs(store)
    assert list(df["id"]) == [rid] and df["hit_rate"].iloc[0] == 0.8 and df["stall_s"].iloc[0] == 0.25
    assert page.refresh_live() == ""                 # the run ended: the table took over
    table = pn.panel(page.runs_pane).select(pn.pane.DataFrame)[0].object
    assert table.loc[rid, "hit rate % (measured)"] == 80.0 and np.isclose(table.loc[rid, "stall s"], 0.25)


def test_live_monitor_reads_only_new_kernel_rows(store):
    import numpy as np

    class Spy:
        """The store, counting how the monitor reads kernels."""
        def __init__(self, inner):
            self.inner, self.calls = inner, []

        def __getattr__(self, name):
            attr = getattr(self.inner, name)
            if name in ("kernels_frame", "kernel_totals_frame"):
                def spy(*a):
                    self.calls.append((name,) + a)
                    return attr(*a)
                return spy
            return attr

    rid = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1), status="running")
    rng = np.random.default_rng(1)
    recs = {s: fake_records(s, 1, 8, rng) for s in range(1, 6)}
    for s in (1, 2):
        store.add_step(rid, s, 1, 1.0, 0.01, recs[s])
    spy = Spy(store)
    mon = LiveMonitor(lab=Lab(store=spy, runner=RecordingRunner(store)), run_id=rid)
    assert spy.calls == [("kernels_frame", rid, 0)]                 # history, once
    for s in (3, 4):
        store.add_step(rid, s, 1, 1.0, 0.01, recs[s])
    assert mon.poll() == 2
    assert spy.calls[1:] == [("kernels_frame", rid, 2)]             # only steps after 2
    for s in (3, 4):                                                # each step as it was recorded
        got = mon.kernels.data[mon.kernels.data["step"] == float(s)].groupby("name")["ms"].sum()
        want = {}
        for r in recs[s]:
            want[r.name] = want.get(r.name, 0.0) + r.ns / 1e6
        assert got.to_dict() == pytest.approx(want)
    assert mon.poll() == 0 and len(spy.calls) == 2                   # nothing new, nothing read
    store.add_step(rid, 5, 1, 1.0, 0.01, recs[5])
    assert mon.poll() == 1 and spy.calls[-1] == ("kernels_frame", rid, 4)


def test_live_kernel_chart_plots_every_recorded_step(store):
    """Steps 2..100 arriving between two polls used to become one mean point at step 100 (a
    straight ramp from step 1); the chart now holds each step's recorded value."""
    import numpy as np

    from gnnrec_lab.util.recorder import KernelRecord
    rid = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1), status="running")
    rng = np.random.default_rng(3)
    ns = {s: int(rng.integers(1_000_000, 9_000_000)) for s in range(1, 101)}

    def recs(s):
        return [KernelRecord("spmm", "forward", 0, s, ns[s], 1, 1, 1, "gather", 32, 1, "native")]
    store.add_step(rid, 1, 1, 1.0, 0.01, recs(1))
    mon = LiveMonitor(lab=Lab(store=store, runner=RecordingRunner(store)), run_id=rid)
    for s in range(2, 101):
        store.add_step(rid, s, 1, 1.0, 0.01, recs(s))
    assert mon.poll() == 99
    area = stacked_area(mon.kernels.data)
    src = area.renderers[0].data_source
    xs = src.data["step"]
    ys = src.data["t0"] - src.data["b0"]                               # the area's top minus its base
    assert list(xs) == [float(s) for s in range(1, 101)]
    assert ys == pytest.approx([ns[s] / 1e6 for s in range(1, 101)])
    assert "every step" in area.title.text
    # past the chart's limit it draws means of equal runs of steps, flat, and says so
    wide, k = chart_frame(mon.kernels.data, max_steps=10)
    assert k == 10 and list(wide.index[:2]) == [1.0, 10.0]
    assert wide["spmm"].iloc[0] == wide["spmm"].iloc[1] == pytest.approx(np.mean([ns[s] for s in range(1, 11)]) / 1e6)
    assert "mean of 10 steps" in stacked_area(mon.kernels.data, max_steps=10).title.text


# -- memory mode and device profile wherever a run appears (issue 12, item 12) ---------------------
def _modeled_run(store, mode="optane_app_direct", steps=4):
    import numpy as np
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=16, batch_size=512, epochs=1, memory_mode=mode)
    rid = store.add_run(cfg, status="running")
    store.record_start(rid, {"steps_per_epoch": steps, "footprint_predicted": {"graph": 2_000_000,
                                                                             "embeddings": 500_000}})
    rng = np.random.default_rng(5)
    for s in range(1, steps + 1):
        store.add_step(rid, s, 1, 1.0 / s, 0.01, fake_records(s, 2, 16, rng))
    return rid


def _calibrate():
    """A fixed host calibration in the test's GNNREC_LAB_HOME (what `gnnrec-lab calibrate` writes)."""
    from gnnrec_lab.kernels import native as nk
    from gnnrec_lab.memory import calibrate
    calibrate.save(dict(copy_GBps=13.8, triad_GBps=12.2, gather64_GBps=1.35, gather256_GBps=1.75, latency_ns=456.0,
                        gemm_GFLOPs=35.7, kind="host", measured=True, measured_at="fixed",
                        cpu=calibrate.cpu_model(), threads=nk.threads()))


def test_run_labels_name_batch_size_memory_mode_and_profile(store):
    from gnnrec_lab.dashboard.common import run_options
    did = store.add_run(RunConfig(dataset="synth-tiny", layers=2, dim=16, batch_size=1024, epochs=1))
    mid = _modeled_run(store, "cxl")
    labels = {v: k for k, v in run_options(modeled_runs_frame(store)).items()}
    assert "b1024" in labels[did] and "d16" in labels[did] and " dram" in labels[did]
    assert "b512" in labels[mid] and "cxl→cxl_type3_ddr5_x8 (modeled)" in labels[mid]
    assert modeled_runs_frame(store).set_index("id").loc[mid, "device"] == "cxl_type3_ddr5_x8"
    table = runs_table(modeled_runs_frame(store))
    assert table.loc[mid, "memory_mode"] == "cxl" and table.loc[mid, "device"] == "cxl_type3_ddr5_x8"


def test_runs_cli_shows_memory_mode_and_device(store, capsys):
    from gnnrec_lab.commands.cli import main
    mid = _modeled_run(store, "optane_memory_mode")
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "memory mode" in out and "Optane MM" in out
    assert main(["runs", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "memory mode" in out and "optane_pmem100_memory_mode" in out
    assert main(["runs", "show", str(mid)]) == 0
    assert "optane_memory_mode (modeled on optane_pmem100_memory_mode)" in capsys.readouterr().out


def test_launch_page_names_the_device_profile_of_a_memory_mode(store):
    page = LaunchPage(Lab(store=store, runner=RecordingRunner(store)))
    assert "dram (measured)" in page.mode_note.object
    page.form.memory_mode = "optane_app_direct"
    assert "optane_pmem100_appdirect_6x" in page.mode_note.object and "modeled" in page.mode_note.object


def test_breakdown_header_says_which_parts_are_modeled(store):
    """The header said `modeled` for a whole modeled-mode run although only its tier chart was."""
    ids = fill_store(store, n_runs=1, steps=4)
    lab = Lab(store=store, runner=RecordingRunner(store))
    head = texts(BreakdownPage(lab, run_id=ids[0]).body())
    assert "■</span> DRAM (`dram`): every time below is measured on this host" in head
    assert f'<span style="color:{MEMORY_MODE_TABLE["dram"].color}">' in head
    mid = _modeled_run(store)
    head = texts(BreakdownPage(lab, run_id=mid).body())
    assert "— running · modeled" not in head
    assert "device profile **optane_pmem100_appdirect_6x**" in head and "measured on this host's DRAM" in head


def test_breakdown_draws_the_runs_device_kernel_by_phase_modeled_and_hatched(store):
    import holoviews as hv

    from gnnrec_lab.dashboard.breakdown import modeled_kernel_phase_ms
    from gnnrec_lab.services.projection import run_modeled_step
    _calibrate()
    mid = _modeled_run(store)
    lab = Lab(store=store, runner=RecordingRunner(store))
    step, why = run_modeled_step(lab.store, mid)
    assert why is None and step["device"] == "optane_pmem100_appdirect_6x"
    page = BreakdownPage(lab, run_id=mid)
    plots = [p.object for p in page.body().select(pn.pane.HoloViews)]
    modeled = [p for p in plots if "modeled on optane_pmem100_appdirect_6x" in (p.opts.get().kwargs.get("title") or "")]
    assert len(modeled) == 1
    measured = [p for p in plots if "Kernel time by phase (measured" in (p.opts.get().kwargs.get("title") or "")]
    assert len(measured) == 1
    bars = modeled[0]
    assert bars.data["ms"].sum() == pytest.approx(step["modeled_s"] * 1e3)
    assert set(map(tuple, bars.data[["name", "phase"]].values)) == \
        set(map(tuple, modeled_kernel_phase_ms(step)[["name", "phase"]].values))
    glyph = hv.render(bars).renderers[0].glyph
    assert glyph.hatch_pattern == "/"
    # a DRAM run gets no modeled kernel chart
    ids = fill_store(store, n_runs=1, steps=2, first=5)
    plots = [p.object for p in BreakdownPage(lab, run_id=ids[0]).body().select(pn.pane.HoloViews)]
    assert not [p for p in plots if "modeled on" in (p.opts.get().kwargs.get("title") or "")]


def test_live_header_shows_mode_profile_and_modeled_step_time(store):
    mid = _modeled_run(store)
    lab = Lab(store=store, runner=RecordingRunner(store))
    page = LivePage(lab)
    page.monitor.run_id = mid
    text = texts(page.header())
    assert "optane_app_direct" in text and "optane_pmem100_appdirect_6x" in text
    assert "host calibration" in text               # no calibration yet: says why there is no value
    _calibrate()
    mon = LiveMonitor(lab=lab, run_id=mid)
    assert mon.modeled and mon.modeled["modeled_s"] > mon.modeled["measured_s"]
    page.monitor = mon
    st = mon.step_times()
    assert st.modeled_kernel_s == pytest.approx(mon.modeled["modeled_s"], rel=1e-12)
    from gnnrec_lab.memory.tiermodel import fmt_band, model_band
    band = model_band(mon.modeled, step_s=st.step_s, kernel_s=st.kernel_s)   # the one band of every view
    assert st.band == band.to_dict()
    assert (f"kernel time {mon.modeled['modeled_s'] * 1e3:.1f} ms {fmt_band(band.kernel)} ({st.ratio:.2f}x, "
            f"modeled)") in texts(page.header())
    assert f"step {st.modeled_step_s * 1e3:.1f} ms {fmt_band(band.step)}" in texts(page.header())
    assert st.text() in texts(page.header())


# -- run times, diverged runs, kernel compilation (issue 12: 5, 3, 11) -------------------------
def test_time_parts_add_up_to_the_duration():
    from gnnrec_lab.runs.store import time_parts
    t = time_parts(100.0, 200.0, {"training_started": 150.0, "jit_s": 40.0}, 30.0)
    assert t == {"duration_s": 100.0, "startup_s": 10.0, "jit_s": 40.0, "train_s": 30.0, "other_s": 20.0}
    assert time_parts(100.0, float("nan"), None, None)["startup_s"] is None   # not at its loop yet


def test_compare_shows_startup_jit_and_training_time_apart_rounded(store):
    """duration_s mixes interpreter start, numba compilation and training: Compare shows the parts."""
    import time
    rid = store.add_run(RunConfig(name="parts"), status="running")
    with store._write() as con:      # the run started 120 s ago: imports and 88 s of compilation since
        con.execute("UPDATE runs SET started=? WHERE id=?", (time.time() - 120, rid))
    rep = store.reporter(rid)
    rep.on_start(RunConfig(), {"jit_s": 88.04321})
    for step, sec in enumerate((0.0123, 0.0456, 0.0789)):
        rep.on_step(step, 1, 0.5, sec, [])
    store.set_status(rid, "finished")
    row = store.runs_frame().set_index("id").loc[rid]
    assert row["train_s"] == pytest.approx(0.1368) and row["jit_s"] == pytest.approx(88.04321)
    assert 31 < row["startup_s"] < 33 and row["other_s"] >= 0
    assert row[["startup_s", "jit_s", "train_s", "other_s"]].sum() == pytest.approx(row["duration_s"], abs=0.2)
    assert store.get_run(rid)["train_s"] == pytest.approx(row["train_s"])
    table = runs_table(modeled_runs_frame(store))
    assert {"train_s", "startup_s", "jit_s", "duration_s"} <= set(table.columns)
    assert table.loc[rid, "jit_s"] == 88.0 and table.loc[rid, "train_s"] == 0.137   # 3 significant digits


def test_a_diverged_run_is_red_in_compare_and_live(store):
    from gnnrec_lab.dashboard.common import status_css
    from gnnrec_lab.dashboard.live import LivePage
    rid = store.add_run(RunConfig(name="nan"), status="running")
    store.set_status(rid, "diverged", error="training diverged: loss nan at step 2 (epoch 1)")
    assert "color" in status_css("diverged") and status_css("finished") == ""
    lab = Lab(store=store, runner=RecordingRunner(store))
    page = ComparePage(lab)
    html = page.table.style.to_html()
    assert "#d62728" in html
    live = LivePage(lab)
    live.monitor.run_id = rid
    text = texts(live.header())
    assert '#d62728">diverged' in text and "Run diverged: training diverged" in text


def test_live_says_compiling_kernels_until_the_compile_ends(store):
    from gnnrec_lab.dashboard.live import LivePage
    rid = store.add_run(RunConfig(name="first run"), status="running")
    store.add_event(rid, "compiling", "compiling kernels: numba has no disk-cached build of them yet")
    live = LivePage(Lab(store=store, runner=RecordingRunner(store)))
    live.monitor.run_id = rid
    assert live.monitor.compiling and "running (compiling kernels)" in texts(live.header())
    store.add_event(rid, "jit", "kernel compilation/warm-up 88.00 s")
    live.monitor.poll()
    assert not live.monitor.compiling and "compiling" not in texts(live.header())


# -- issue 22: pages follow the selected run, axes per run, modeled times, colours -------------------
def _timed_run(store, ms: float, steps: int = 3, status="finished", mode="dram", phases=("forward",),
               evals=True):
    """A run whose every step records ``ms`` of spmm time per phase in ``phases``."""
    from gnnrec_lab.util.recorder import KernelRecord
    rid = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1, memory_mode=mode),
                        status="running")
    store.record_start(rid, {"steps_per_epoch": steps, "footprint_predicted": {"graph": 1000, "embeddings": 2000}})
    for s in range(1, steps + 1):
        store.add_step(rid, s, 1, 1.0 / s, ms / 1e3, [KernelRecord("spmm", ph, 0, s, int(ms * 1e6), 1, 1, 1, "gather",
                                                                   32, 1, "native") for ph in phases])
    if evals:
        store.add_eval(rid, 1, steps, "valid", {"recall@20": 0.1}, 1.0)
    if status != "running":
        store.set_status(rid, status)
    return rid


def _figures(root):
    from bokeh.models import Plot
    return {(p.title.text if p.title else ""): p for p in root.select({"type": Plot})}


def test_breakdown_axes_rescale_per_run_in_a_page_with_other_plots(store):
    """Panel linked the axes of all HoloViews plots of a page sharing a dimension: after a 1.2 s/step
    run, a 10 ms run's kernel bars kept the 0-1320 ms axis (flat at zero)."""
    from bokeh.document import Document

    from gnnrec_lab.dashboard.live import LivePage
    slow, fast = _timed_run(store, 1200.0), _timed_run(store, 10.0)
    lab = Lab(store=store, runner=RecordingRunner(store))
    lab.run_id = slow
    root = pn.Tabs(("Live", LivePage(lab)), ("Breakdown", BreakdownPage(lab))).get_root(Document())
    bars = [p for t, p in _figures(root).items() if t.startswith("Kernel time by phase")][0]
    assert bars.y_range.end == pytest.approx(1200.0, rel=0.15)
    lab.run_id = fast
    bars = [p for t, p in _figures(root).items() if t.startswith("Kernel time by phase")][0]
    assert bars.y_range.end == pytest.approx(10.0, rel=0.15), bars.y_range.end


def test_phases_and_kernels_keep_their_colours_across_runs(store):
    """The default colour cycle gave 'sampling' whatever colour its place in a run's phase list had."""
    import holoviews as hv

    from gnnrec_lab.dashboard.breakdown import phase_cmap, share_pie
    from gnnrec_lab.dashboard.common import kernel_color, phase_color
    a = _timed_run(store, 5.0, phases=("forward", "sampling"))
    b = _timed_run(store, 5.0, phases=("backward", "loss", "sampling"))
    lab = Lab(store=store, runner=RecordingRunner(store))
    colours = []
    for rid in (a, b):
        plots = [p.object for p in BreakdownPage(lab, run_id=rid).body().select(pn.pane.HoloViews)]
        bars = [p for p in plots if "Kernel time by phase" in (p.opts.get().kwargs.get("title") or "")][0]
        mapper = hv.render(bars).renderers[0].glyph.fill_color.transform
        colours.append(dict(zip(mapper.factors, mapper.palette)))
    assert colours[0]["sampling"] == colours[1]["sampling"] == phase_color("sampling")
    assert len({phase_color(p) for p in ("forward", "backward", "loss", "optimizer", "sampling")}) == 5
    assert phase_cmap(["forward"]) == {"forward": phase_color("forward")}
    pie = share_pie(pd.DataFrame({"name": ["adam", "spmm"], "ns": [1.0, 3.0], "share": [0.25, 0.75]}))
    assert list(pie.renderers[0].data_source.data["color"]) == [kernel_color("adam"), kernel_color("spmm")]


# the kernels a real run of each model records (LightGCN, NGCF, MF; a sampled run adds its own)
RUN_KERNELS = ("spmm", "bpr_loss", "l2_reg", "adam", "bpr_sample", "gemm", "spmm_edge", "sddmm_mul", "add",
               "bias_leaky_relu", "concat", "l2_normalize", "sample_subgraph", "sample_wait", "row_fetch",
               "row_writeback", "gather", "sparse_adam", "sgd")


def test_every_kernel_has_its_own_colour_and_a_phase_suffix_keeps_it():
    """The roofline's "spmm (forward)" had no entry: it got a CRC colour (the backward orange), and
    adam and bpr_loss (via their suffixed names) shared one brown."""
    from gnnrec_lab.dashboard.common import PHASE_COLORS, kernel_color, kernel_name
    colours = [kernel_color(k) for k in RUN_KERNELS]
    assert len(set(colours)) == len(RUN_KERNELS), dict(zip(RUN_KERNELS, colours))
    assert kernel_name("spmm (forward)") == "spmm" and kernel_name("adam") == "adam"
    for k in RUN_KERNELS:
        for ph in PHASE_COLORS:
            assert kernel_color(f"{k} ({ph})") == kernel_color(k)
    unknown = kernel_color("a_kernel_no_table_lists")
    assert unknown not in colours


def test_roofline_colours_equal_the_kernel_charts(store):
    """Breakdown's roofline, its share pie and Live's kernel chart draw each kernel in one colour."""
    import holoviews as hv
    from bokeh.models import GlyphRenderer, Scatter, Wedge

    from gnnrec_lab.dashboard.common import kernel_color
    from gnnrec_lab.util.recorder import KernelRecord
    _calibrate()
    kernels = [("spmm", "forward"), ("spmm", "backward"), ("gemm", "forward"), ("gemm", "backward"),
               ("bpr_loss", "loss"), ("l2_reg", "loss"), ("adam", "optimizer"), ("bpr_sample", "sampling"),
               ("concat", "forward")]
    rid = store.add_run(RunConfig(dataset="synth-tiny", model="ngcf", layers=1, dim=8, epochs=1), status="running")
    store.record_start(rid, {"steps_per_epoch": 2, "footprint_predicted": {"graph": 1000}})
    for s in (1, 2):
        store.add_step(rid, s, 1, 1.0, 0.01, [KernelRecord(k, ph, 0, s, 1_000_000 * (i + 1), 4_000_000, 1_000_000,
                                                           2_000_000 * (i + 1), "gather", 32, 1_000_000, "native")
                                              for i, (k, ph) in enumerate(kernels)])
    store.set_status(rid, "finished")
    lab = Lab(store=store, runner=RecordingRunner(store))
    body = BreakdownPage(lab, run_id=rid).body()
    roof = [p.object for p in body.select(pn.pane.HoloViews)
            if "Roofline" in str(hv.render(p.object).title.text)]
    assert len(roof) == 1
    fig = hv.render(roof[0])
    points = {}
    for r in fig.select({"type": GlyphRenderer}):
        if isinstance(r.glyph, Scatter):
            for name in r.data_source.data["name"]:
                points[name] = r.glyph.fill_color
    assert set(points) == {f"{k} ({ph})" for k, ph in kernels}
    pie = [p.object for p in body.select(pn.pane.Bokeh)
           if p.object is not None and p.object.select({"type": Wedge})]
    wedges = [r for r in pie[0].select({"type": GlyphRenderer}) if isinstance(r.glyph, Wedge)][0].data_source.data
    pie_colours = dict(zip(wedges["name"], wedges["color"]))
    mon = LiveMonitor(lab=lab, run_id=rid)
    area = stacked_area(mon.kernels.data, top=20)
    live_colours = {r.glyph.fill_color: None for r in area.renderers}
    for name, colour in points.items():
        k = name.split(" (")[0]
        assert colour == kernel_color(k) == pie_colours[k], (name, colour, pie_colours)
        assert colour in live_colours
    assert points["spmm (forward)"] == points["spmm (backward)"] != points["adam (optimizer)"]
    assert points["adam (optimizer)"] != points["bpr_loss (loss)"]


def test_hatching_alone_marks_modeled_bars(store):
    """The note said "hatched orange = modeled, solid blue = measured" above modeled charts
    hatched in phase colours: colour no longer says modeled, hatching does."""
    from gnnrec_lab.dashboard.common import MODELED_NOTE
    df = pd.DataFrame({"device": ["host", "optane"], "seconds": [1.0, 3.0], "kind": ["measured", "modeled"]})
    bars = modeled_bars(df, "device", "seconds", "s per step").data
    assert bars["color"].nunique() == 1 and list(bars["hatch"]) == [" ", "/"]
    assert "orange" not in MODELED_NOTE and "blue" not in MODELED_NOTE and "Hatched = **modeled**" in MODELED_NOTE
    _calibrate()
    mid = _modeled_run(store)
    text = texts(BreakdownPage(Lab(store=store, runner=RecordingRunner(store)), run_id=mid).body())
    assert "orange" not in text and "blue" not in text


def test_plot_titles_fit_their_plots(store):
    """A title wider than its plot is clipped: e.g. 'Kernel time by phase, modeled on
    optane_pmem100_appdirect_6x (optane_app_direct; hatched = modeled): 12.3 ms per step, 3.00x DRAM'
    in a half-width plot. Titles stay within what a 600 px plot shows at Bokeh's title font."""
    _calibrate()
    fill_store(store, n_runs=2, steps=4)
    mid = _modeled_run(store)
    store.set_status(mid, "finished")
    lab = Lab(store=store, runner=RecordingRunner(store))
    import holoviews as hv

    from gnnrec_lab.dashboard.live import stacked_area
    titles = [hv.render(obj.object).title.text
              for obj in BreakdownPage(lab, run_id=mid).body().select(pn.pane.HoloViews)]
    page = ComparePage(lab)
    page.table.selection = [0, 1]
    for part in (page.overlays(), page.scaling()):
        titles += [hv.render(obj.object).title.text for obj in pn.panel(part).select(pn.pane.HoloViews)]
    live = LivePage(lab)
    titles += [p.object.title.text for p in (live.loss_pane, live.kernel_pane, live.eval_pane) if p.object]
    many = pd.DataFrame({"step": [float(s) for s in range(1, 3001)], "name": ["spmm"] * 3000, "ms": [1.0] * 3000})
    titles.append(stacked_area(many, max_steps=10).title.text)
    assert len(titles) >= 6 and all(titles), titles
    too_long = [t for t in titles if len(t) > 60]        # ~7 px a character at 12 px bold
    assert not too_long, too_long


def test_compare_overlays_give_each_run_one_colour(store):
    """Loss and Recall@20 overlays coloured runs by their place in each overlay: a run without
    evaluations shifted every other run's colour in one of the two."""
    from gnnrec_lab.dashboard.common import run_color
    a = _timed_run(store, 5.0, evals=False)
    b = _timed_run(store, 5.0)
    page = ComparePage(Lab(store=store, runner=RecordingRunner(store)))
    page.selected = [a, b]
    seen = {}
    for p in pn.panel(page.overlays()).select(pn.pane.HoloViews):
        for el in p.object:
            seen.setdefault(el.label, set()).add(el.opts.get().kwargs["color"])
    assert seen == {f"#{a}": {run_color(a)}, f"#{b}": {run_color(b) }}
    assert run_color(a) != run_color(b)


def _finished_modeled_run(store, ratio=3.0, mode="cxl"):
    """A finished run in a modeled memory mode with its stored projection (``result.modeled``)."""
    rid = _timed_run(store, 20.0, steps=4, status="running", mode=mode)
    store.add_epoch(rid, 1, 0.5, 4, 0.3)
    store.record_result(rid, {"modeled": {"device": "cxl_type3_ddr5_x8", "kind": "modeled", "memory_mode": mode,
                                          "measured_s_per_step": 0.02, "modeled_s_per_step": 0.02 * ratio}})
    store.set_status(rid, "finished")
    return rid


def test_runs_and_compare_show_modeled_times_beside_the_measured_ones(store, capsys):
    """`runs` and Compare showed a CXL run as "modeled ... train 1m 21s": DRAM seconds under a
    'modeled' label. Now measured and modeled (tiermodel.modeled_seconds) stand side by side."""
    from gnnrec_lab.commands.cli import main
    from gnnrec_lab.memory.tiermodel import modeled_ratio, modeled_seconds
    did = _timed_run(store, 20.0, steps=4)
    store.add_epoch(did, 1, 0.4, 4, 0.3)
    mid = _finished_modeled_run(store, ratio=3.0)
    row = modeled_runs_frame(store).set_index("id")
    assert row.loc[mid, "train_s"] == pytest.approx(0.08) and row.loc[mid, "step_s"] == pytest.approx(0.02)
    assert row.loc[mid, "modeled_ratio"] == pytest.approx(3.0)
    assert row.loc[mid, "modeled_train_s"] == pytest.approx(modeled_seconds(0.08, 3.0)) == pytest.approx(0.24)
    assert row.loc[mid, "modeled_step_s"] == pytest.approx(0.06)
    assert pd.isna(row.loc[did, "modeled_train_s"]) and modeled_ratio(None) is None
    assert main(["runs", "--wide"]) == 0
    out = capsys.readouterr().out
    head, _, *lines = out.splitlines()
    assert "step (measured)" in head and "step (modeled)" in head and "train (modeled)" in head
    assert " time " not in f" {head} ".replace("kernel time (", "kernel (")   # kernel time is named so
    assert "kernel time (measured)" in head and "kernel time (modeled)" in head
    cols = dict(zip(["id"], [None]))
    line = [ln for ln in lines if ln.startswith(str(mid) + " ")][0]
    assert "20.0 ms" in line and "60.0 ms" in line
    dline = [ln for ln in lines if ln.startswith(str(did) + " ")][0]
    assert "20.0 ms" in dline and "60.0 ms" not in dline
    del cols
    table = runs_table(modeled_runs_frame(store))
    assert table.loc[mid, "step_ms"] == 20.0 and table.loc[mid, "modeled_step_ms"] == 60.0
    assert table.loc[mid, "modeled_train_s"] == pytest.approx(0.24)         # to 3 significant digits
    assert "measured" not in table.columns and pd.isna(table.loc[did, "modeled_step_ms"])
    page = ComparePage(Lab(store=store, runner=RecordingRunner(store)))
    assert page.table.titles["modeled_step_ms"] == "Step ms (modeled)"
    es = epoch_seconds(store, modeled_runs_frame(store)).set_index("id")
    assert es.loc[mid, "modeled_epoch_s"] == pytest.approx(1.5) and pd.isna(es.loc[did, "modeled_epoch_s"])
    assert es.loc[mid, "group"] == "CXL · synth-tiny" and es.loc[did, "group"] == "DRAM · synth-tiny"
    plots = [p.object for p in pn.panel(page.scaling()).select(pn.pane.HoloViews)]
    labels = {el.label for p in plots for el in p}
    assert labels == {"CXL · synth-tiny", "CXL · synth-tiny (modeled)", "DRAM · synth-tiny"}
    colors = {el.label: el.opts.get().kwargs["color"] for p in plots for el in p}   # the mode's, measured or not
    assert colors["CXL · synth-tiny"] == colors["CXL · synth-tiny (modeled)"] == MEMORY_MODE_TABLE["cxl"].color
    assert colors["DRAM · synth-tiny"] == MEMORY_MODE_TABLE["dram"].color
    modeled = [el for el in plots[0] if el.label.endswith("(modeled)")][0]
    assert list(modeled.data["epoch_s"]) == [pytest.approx(1.5)]
    assert "modeled" in texts(page.scaling())


def test_live_page_shows_the_selected_run_from_the_moment_it_is_selected(store):
    """A switch to a run without steps kept the previous run's plots, elapsed time and memory mode
    until its first step; now the plots empty at once and say they wait for the first step."""
    old = _timed_run(store, 50.0, steps=5)
    new = _timed_run(store, 5.0, steps=0, status="running", mode="cxl", evals=False)
    lab = Lab(store=store, runner=RecordingRunner(store))
    lab.run_id = old
    page = LivePage(lab)
    shown = lambda: [box.visible for box in page.boxes.values()]     # noqa: E731
    assert shown() == [True, True, True]
    assert f"run** #{old}" in page.status_md.object
    lab.run_id = new
    assert shown() == [False, False, False]
    assert page.loss_pane.object is None and page.kernel_pane.object is None
    assert "waiting for the first step" in page.loss_wait.object and page.loss_wait.visible
    assert "waiting for the first step" in page.kernel_wait.object
    assert f"run** #{new}" in page.status_md.object and "steps** 0 / 0" not in page.status_md.object
    assert "memory mode** " in page.mode_md.object and "CXL (`cxl`) → device profile" in page.mode_md.object
    assert "measured on this host" not in page.mode_md.object
    lab.run_id = old
    assert shown()[0] and len(page.loss_pane.object.renderers[0].data_source.data["x"]) == 5
    later = _timed_run(store, 5.0, steps=1, status="running")     # launched elsewhere: listed at the next poll
    page.tick()
    assert later in page.selector.options.values() and page.selector.value == old


def test_live_page_patches_its_plots_and_reads_the_last_evaluation(store):
    """Each poll rebuilt the header and the plots (a 1 s poll took 7-9 s in training); the last
    validation, written after the last step, was missed, and test metrics never shown."""
    rid = _timed_run(store, 5.0, steps=2, status="running", evals=False)
    lab = Lab(store=store, runner=RecordingRunner(store))
    lab.run_id = rid
    page = LivePage(lab)
    loss_fig, kernel_fig = page.loss_pane.object, page.kernel_pane.object
    header = page._header
    from gnnrec_lab.util.recorder import KernelRecord
    for s in (3, 4):
        store.add_step(rid, s, 1, 0.2, 0.005, [KernelRecord("spmm", "forward", 0, s, 5_000_000, 1, 1, 1, "gather",
                                                            32, 1, "native")])
    page.tick()
    assert page.loss_pane.object is loss_fig and page.kernel_pane.object is kernel_fig and page._header is header
    assert list(loss_fig.renderers[0].data_source.data["x"]) == [1.0, 2.0, 3.0, 4.0]
    assert list(kernel_fig.renderers[0].data_source.data["step"]) == [1.0, 2.0, 3.0, 4.0]
    assert "appear when training ends" in page.test_md.object
    page.tick()                                   # nothing new: nothing changes
    assert page.loss_pane.object is loss_fig
    # the last evaluations come after the last step, then the run ends
    store.add_eval(rid, 1, 4, "valid", {"recall@20": 0.125, "ndcg@20": 0.07, "users": 943}, 2.0)
    store.add_eval(rid, 1, 4, "test", {"recall@20": 0.11, "ndcg@20": 0.06, "users": 943}, 2.5)
    store.set_status(rid, "finished")
    page.tick()
    assert (page.boxes[page.eval_pane].visible
            and list(page.eval_pane.object.renderers[0].data_source.data["m1"]) == [0.125])
    assert "test metrics" in page.test_md.object and "recall@20 **0.1100**" in page.test_md.object
    assert "users" not in page.test_md.object and "status** finished" in page.status_md.object


def test_runs_show_says_the_times_are_measured_and_the_modeled_training_time(store, capsys):
    """`runs show` printed "time  modeled" above seconds measured on DRAM."""
    from gnnrec_lab.commands.cli import main
    mid = _finished_modeled_run(store, ratio=3.0)
    assert main(["runs", "show", str(mid)]) == 0
    out = capsys.readouterr().out
    assert "time       modeled" not in out and "time       measured on this host (DRAM)" in out
    assert "modeled    training 0.2 s on cxl_type3_ddr5_x8 (the 0.1 s measured here x 3.00)" in out


def test_runs_show_flags_a_calibration_under_load(store, capsys):
    """Issue 33: a host calibration measured with the load above the cores is flagged by `runs show`
    (the calibration every modeled number of a running run is projected with), and a projection
    made with it is low confidence there, with the reason."""
    from gnnrec_lab.commands.cli import main
    from gnnrec_lab.kernels import native as nk
    from gnnrec_lab.memory import calibrate
    calibrate.save(dict(copy_GBps=13.8, triad_GBps=12.2, gather64_GBps=1.35, gather256_GBps=1.75, latency_ns=456.0,
                        gemm_GFLOPs=35.7, kind="host", measured=True, measured_at="loaded day", cores_online=2,
                        loadavg={"start": 4.0, "end": 3.0, "max": 4.0}, cpu=calibrate.cpu_model(),
                        threads=nk.threads()))
    mid = _modeled_run(store)          # running, no stored projection: projected now with that calibration
    assert main(["runs", "show", str(mid)]) == 0
    out = capsys.readouterr().out
    assert "warning    host calibration of loaded day was measured under load 4.00 on 2 cores" in out
    assert "confidence LOW" in out and "LOW CONFIDENCE: host calibration of loaded day" in out


def test_live_validation_chart_draws_the_largest_k_with_its_legend_beside_and_whole_epochs(store):
    """Issue 35: ten metric lines under a legend covering them, and epoch ticks at 1.5."""
    from bokeh.models import AdaptiveTicker

    from gnnrec_lab.dashboard.live import chart_metrics
    assert chart_metrics(["hit@10", "hit@20", "ndcg@10", "ndcg@20", "users"]) == ["hit@20", "ndcg@20"]
    assert chart_metrics(["recall@5"]) == ["recall@5"]
    rid = _timed_run(store, 5.0, steps=2, evals=False)
    for e in (1, 2, 3):
        store.add_eval(rid, e, 2, "valid", {f"{m}@{k}": 0.1 * e for m in ("recall", "ndcg", "mrr", "hit", "precision")
                                           for k in (10, 20)}, float(e))
    lab = Lab(store=store, runner=RecordingRunner(store))
    lab.run_id = rid
    page = LivePage(lab)
    fig = page.eval_pane.object
    names = {item.label["value"] for item in fig.legend[0].items}
    assert names == {f"{m}@20" for m in ("recall", "ndcg", "mrr", "hit", "precision")}
    assert fig.legend[0] in fig.right and "@20" in fig.title.text
    ticker = fig.xaxis[0].ticker
    assert isinstance(ticker, AdaptiveTicker) and ticker.min_interval == 1 and ticker.num_minor_ticks == 0
    assert not page.cancel_button.visible             # a finished run: nothing to cancel


def test_breakdown_footprint_bars_read_on_a_log_axis_with_their_sizes_and_kinds_above_bars():
    """Issue 35: 7 of 9 footprint pairs were slivers under a 0.5 GiB bar, and the measured/modeled
    labels of the tier chart sat on the bars' outlines."""
    import holoviews as hv
    from bokeh.models import HBar, LogScale, Span
    from bokeh.models import Text as TextGlyph

    from gnnrec_lab.dashboard.breakdown import footprint_bars
    from gnnrec_lab.util.formatting import fmt_bytes
    hv.extension("bokeh")
    fp = pd.DataFrame({"tensor_class": ["runtime", "graph", "gradients", "peak_rss"],
                       "bytes": [500 * 2**20, 1.7 * 2**20, 650 * 2**10, 535 * 2**20],
                       "kind": ["modeled", "modeled", "modeled", "measured"]})
    fig = footprint_bars(fp, dram=24 * 2**30)
    assert isinstance(fig.x_scale, LogScale) and fig.xaxis[0].axis_label == "MiB (log scale)"
    bars = [r for r in fig.renderers if isinstance(r.glyph, HBar)][0].data_source.data
    assert list(bars["bar"])[-1] == "peak_rss (measured)" and list(bars["bar"])[0] == "gradients (modeled)"
    assert fig.x_range.start < min(bars["value"])
    assert dict(zip(bars["bar"], bars["hatch"]))["peak_rss (measured)"] == " "      # measured: solid
    words = [r for r in fig.renderers if isinstance(r.glyph, TextGlyph)][0].data_source.data["size"]
    assert set(words) == {fmt_bytes(b) for b in fp["bytes"]}
    assert not fig.select({"type": Span})              # 24 GiB of DRAM: far off this scale, said in the text
    assert footprint_bars(fp, dram=1 << 30).select({"type": Span})   # 1 GiB: on the scale, drawn
    df = pd.DataFrame({"device": ["host", "optane"], "seconds": [1.0, 3.0], "kind": ["measured", "modeled"]})
    plot = hv.render(modeled_bars(df, "device", "seconds", "s per step"))
    labels = [r for r in plot.renderers if isinstance(r.glyph, TextGlyph)][0]
    assert labels.glyph.text_align == "left"                                  # past the bar ends
    assert all(x > v * 1e3 for x, v in zip(labels.data_source.data["x"], df["seconds"]))
    assert plot.x_range.end > df["seconds"].max() * 1e3 * 1.1


class _Epochs:
    """A store that knows only each run's epochs (what :func:`epoch_seconds` reads)."""

    def epochs_frame(self, rid):
        return pd.DataFrame({"seconds": [1.0 + rid, 3.0 + rid]})


def _mode_views(mode: str, memory_mode=None) -> dict:
    """How Compare's and Breakdown's helpers show a run in ``mode``: the scatter group and its colour,
    a comparison series modeled on it (colour, tag) and the Breakdown header."""
    import holoviews as hv

    from gnnrec_lab.dashboard.breakdown import mode_header
    from gnnrec_lab.dashboard.compare import epoch_scatter, series_color, series_tag
    runs = pd.DataFrame({"id": [1], "status": ["finished"], "dataset": ["ml-100k"], "batch_size": [512],
                         "layers": [2], "memory_mode": [mode]})
    es = epoch_seconds(_Epochs(), runs)
    point = hv.render(epoch_scatter(es, "batch_size", "t")).renderers[0].glyph
    row = dict(engine="full", kind="modeled", memory_mode=memory_mode or mode, device="somewhere", precision="fp32",
               series="full graph on it (modeled)", machines=1, cores_per_machine=1, link_gbit=None)
    return dict(group=es["group"].iloc[0], color=point.fill_color, series_color=series_color(row),
                tag=series_tag(row), header=mode_header({"config": {"memory_mode": mode}}))


def test_a_memory_mode_added_to_the_table_is_coloured_and_labelled_by_every_view(monkeypatch):
    """Views read a mode's colour and short label from the table: one declared at run time is drawn
    in its colour and named by its label with nothing else changed (no view keeps its own dict)."""
    from gnnrec_lab.config.memory_modes import MemoryMode
    monkeypatch.setitem(MEMORY_MODE_TABLE, "hbm", MemoryMode("hbm", "cxl_type3_ddr5_x8", "split",
                                                             "high-bandwidth memory", "HBM", "#e377c2"))
    seen = _mode_views("hbm")
    assert seen["group"] == "HBM · ml-100k" and seen["color"] == seen["series_color"] == "#e377c2"
    assert seen["tag"] == "HBM 1x1"
    assert '<span style="color:#e377c2">■</span> HBM (`hbm`)' in seen["header"]
    assert "device profile **cxl_type3_ddr5_x8**" in seen["header"]
    for name, m in MEMORY_MODE_TABLE.items():                  # and every declared one likewise
        seen = _mode_views(name)
        assert seen["group"] == f"{m.short} · ml-100k" and seen["color"] == seen["series_color"] == m.color, name


def test_a_memory_mode_the_table_does_not_hold_is_shown_by_its_name_in_grey():
    """A store row from an older lab or edited by hand: Compare's group label raised (memory_mode_of's
    ConfigError) and took the scatter plots down; it shows the raw name in neutral grey."""
    from gnnrec_lab.config.memory_modes import UNKNOWN_MODE_COLOR
    seen = _mode_views("pmem_v0")
    assert seen["group"] == "pmem_v0 · ml-100k" and seen["color"] == seen["series_color"] == UNKNOWN_MODE_COLOR
    assert seen["tag"] == "pmem_v0 1x1"
    assert f'<span style="color:{UNKNOWN_MODE_COLOR}">■</span> pmem_v0:' in seen["header"]
    assert "not a memory mode this lab knows" in seen["header"]


def test_compare_epoch_scatter_ticks_at_the_runs_batch_sizes():
    """Issue 35: Compare's batch-size ticks collided (a log axis' own ticks, 2047.5 for one size)."""
    import holoviews as hv
    from bokeh.models import FixedTicker

    from gnnrec_lab.dashboard.compare import axis_ticks, epoch_scatter
    hv.extension("bokeh")
    sizes = [512, 1024, 2048, 4096, 8192]
    es = pd.DataFrame({"id": range(5), "epoch_s": [1.0, 0.8, 0.6, 0.5, 0.45], "modeled_epoch_s": [None] * 5,
                       "group": ["dram · ml-100k"] * 5, "batch_size": sizes, "layers": [1, 2, 3, 3, 3]})
    fig = hv.render(epoch_scatter(es, "batch_size", "Epoch time vs batch size", logx=True))
    ticker = fig.xaxis[0].ticker
    assert isinstance(ticker, FixedTicker) and list(ticker.ticks) == [float(v) for v in sizes]
    assert fig.xaxis[0].major_label_overrides[2048.0] == "2,048"
    assert fig.x_range.start < 512 and fig.x_range.end > 8192
    one = hv.render(epoch_scatter(es.head(1), "layers", "Epoch time vs depth (layers)"))
    assert list(one.xaxis[0].ticker.ticks) == [1.0] and one.x_range.start < 1 < one.x_range.end
    assert len(axis_ticks(list(range(1, 30)), False)) <= 8


def test_live_sessions_on_one_run_share_one_read_and_one_header(store, monkeypatch):
    """Each open Live page read the store and recomputed the header (the ETA over every step) on
    its own poll: 20 sessions on one run cost 20 reads and ~40 ms of pandas each per second, enough
    to saturate the server's core. Sessions now share the run's feed: one read per poll between
    them, one header text, and each page still draws every step."""
    from gnnrec_lab.dashboard import live
    from gnnrec_lab.util.recorder import KernelRecord

    class Spy:
        def __init__(self, inner):
            self.inner, self.reads = inner, 0

        def __getattr__(self, name):
            attr = getattr(self.inner, name)
            if name != "latest_steps":
                return attr

            def spy(*a):
                self.reads += 1
                return attr(*a)
            return spy

    rid = _timed_run(store, 5.0, steps=2, status="running", evals=False)
    spy = Spy(store)
    made = []
    real = live.header_text
    monkeypatch.setattr(live, "header_text", lambda m: made.append(m) or real(m))
    pages = [LivePage(Lab(store=spy, runner=RecordingRunner(store)), run_id=rid) for _ in range(5)]
    for p in pages:                       # as served: each page's tick within the same second
        p._callback = object()
    assert len({id(p.monitor.feed) for p in pages}) == 1
    for s in (3, 4):
        store.add_step(rid, s, 1, 0.2, 0.005, [KernelRecord("spmm", "forward", 0, s, 5_000_000, 1, 1, 1, "gather",
                                                            32, 1, "native")])
    pages[0].monitor.feed.read_at = float("-inf")    # the last read is old: the first tick reads
    reads, made[:] = spy.reads, []
    for p in pages:
        p.tick()
    assert spy.reads == reads + 1                    # one read for the five sessions
    assert len(made) == 1                            # one header text computed
    for p in pages:
        assert list(p.loss_pane.object.renderers[0].data_source.data["x"]) == [1.0, 2.0, 3.0, 4.0]
        assert "steps** 4 /" in p.status_md.object
    # called by hand (a notebook, a test) a tick reads now
    pages[1]._callback = None
    pages[1].tick()
    assert spy.reads == reads + 2


def test_runs_list_fits_120_columns_and_wide_lists_the_rest(store, capsys):
    """Issue 51: `gnnrec-lab runs` lines were ~330 characters. The list fits 120 by default (long
    names and datasets cut with "…"); `--wide` lists every column."""
    from gnnrec_lab.commands.cli import main
    _timed_run(store, 20.0, steps=4)
    named = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1,
                                    name="a run with a rather long name that a user typed into the launch form"))
    store.record_start(named, {"steps_per_epoch": 4})
    mid = _finished_modeled_run(store, ratio=3.0, mode="optane_memory_mode")
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert max(len(ln) for ln in out.splitlines()) <= 120, max(out.splitlines(), key=len)
    head = out.splitlines()[0]
    assert "step (measured)" in head and "step (modeled)" in head and "memory mode" in head
    line = [ln for ln in out.splitlines() if ln.startswith(f"{mid} ")][0]
    assert "Optane MM" in line and "20.0 ms" in line and "60.0 ms" in line
    assert "a run with" in out and "…" in out and "--wide" in out
    assert main(["runs", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert max(len(ln) for ln in wide.splitlines()) > 120
    assert "kernel time (modeled)" in wide and "optane_pmem100_memory_mode" in wide
    assert "a run with a rather long name" in wide
    assert "optane_memory_mode" in wide


def test_fit_table_cuts_text_then_leaves_columns_out():
    from gnnrec_lab.commands.runs import NARROW, fit_table
    headers = [h for h, _ in NARROW]
    row = ["12", "n" * 60, "finished", "d" * 40, "lightgcn", "3", "4096", "Optane AD", "13.1 ms",
           "43.7 ms ±15%", "0.1234", "3.7 !"]
    rows, heads, dropped = fit_table([row], headers, width=120)
    widths = [max(len(h), len(r)) for h, r in zip(heads, rows[0])]
    assert sum(widths) + 2 * (len(heads) - 1) <= 120 and not dropped
    assert rows[0][heads.index("name")].endswith("…") and rows[0][heads.index("memory mode")] == "Optane AD"
    rows, heads, dropped = fit_table([row], headers, width=80)     # cutting alone cannot reach 80
    assert dropped and dropped[0] == "test R@20" and "id" in heads and "step (modeled)" in heads
    assert sum(max(len(h), len(r)) for h, r in zip(heads, rows[0])) + 2 * (len(heads) - 1) <= 80


# -- issue 51: colours with one meaning, readable charts ---------------------------------------

def test_every_palette_colour_has_one_meaning():
    """A phase, a kernel, a run, a memory mode, a cache policy... never share a colour (forward and
    spmm were both blue, run #1 and a mode both orange)."""
    from gnnrec_lab.dashboard.common import kernel_color, phase_color, run_color  # what the pages draw with
    from gnnrec_lab.dashboard.palettes import check_palettes
    assert check_palettes() == []
    modes = {m.color for m in MEMORY_MODE_TABLE.values()}
    assert phase_color("forward") != kernel_color("spmm") and phase_color("loss") != kernel_color("bpr_loss")
    assert phase_color("optimizer") != kernel_color("adam")
    assert not {run_color(i) for i in range(10)} & modes
    assert not {kernel_color(k) for k in RUN_KERNELS} & (modes | {phase_color(p) for p in common.PHASE_COLORS})


def test_clip_bound_ignores_one_stalled_step_and_clips_nothing_steady():
    from gnnrec_lab.dashboard.live import clip_bound
    steady = [13.0 + 0.1 * (i % 7) for i in range(200)]
    assert clip_bound(steady) is None                         # nothing to clip: the axis is the data's
    bound = clip_bound(steady + [280.0])
    assert bound is not None and 13.6 < bound < 40, bound      # one 280 ms stall does not set the axis
    assert clip_bound([1.0, 300.0]) is None                   # too few points to call one an outlier
    assert clip_bound([10.0] * 50 + [25.0]) == pytest.approx(20.0)   # flat steps: twice the median


def test_live_kernel_chart_clips_an_outlier_marks_it_and_says_so(store):
    """Issue 51: one 280 ms step set the kernel chart's axis to 300 ms and flattened 199 steps."""
    from gnnrec_lab.dashboard.live import CLIPPED_LABEL
    from gnnrec_lab.util.recorder import KernelRecord
    rid = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1), status="running")
    store.record_start(rid, {"steps_per_epoch": 60})
    for s in range(1, 61):
        ms = 280.0 if s == 30 else 13.0 + 0.2 * (s % 5)
        store.add_step(rid, s, 1, 1.0, ms / 1e3, [KernelRecord("spmm", "forward", 0, s, int(ms * 1e6), 1, 1, 1,
                                                               "gather", 32, 1, "native")])
    store.set_status(rid, "finished")
    page = LivePage(Lab(store=store, runner=RecordingRunner(store)))
    page.run_id = rid
    fig = page.kernel_pane.object
    assert fig.y_range.end < 50, fig.y_range.end
    mark = fig.select_one({"name": "clipped"})
    assert mark.visible and list(mark.data_source.data["step"]) == [30.0]
    assert all(y <= fig.y_range.end for y in mark.data_source.data["y"])
    assert CLIPPED_LABEL in [item.label.value for item in fig.legend[0].items]
    note = page.kernel_note.object
    assert page.kernel_note.visible and "1 step is above the axis (up to 280.0 ms)" in note


def test_live_draws_the_modeled_series_of_a_modeled_mode(store):
    """Issue 51: a run in a modeled memory mode showed no modeled series on Live."""
    _calibrate()
    mid = _modeled_run(store, "cxl", steps=6)
    store.set_status(mid, "finished")
    page = LivePage(Lab(store=store, runner=RecordingRunner(store)))
    page.run_id = mid
    fig = page.kernel_pane.object
    line = fig.select_one({"name": "modeled"})
    assert line is not None and line.glyph.line_dash in ("dashed", [6])      # modeled: dashed, not a colour
    assert line.glyph.line_color == MEMORY_MODE_TABLE["cxl"].color
    ys = list(line.data_source.data["ms"])
    src = fig.renderers[0].data_source.data
    tops = src[max((c for c in src if c.startswith("t")), key=lambda c: int(c[1:]))]
    assert len(ys) == len(tops) and all(y == y for y in ys)
    ratio = page.monitor.modeled["modeled_s"] / page.monitor.modeled["measured_s"]
    assert sum(ys) == pytest.approx(sum(tops) * ratio, rel=1e-6)      # the run's projection, step by step
    assert "CXL (modeled)" in [item.label.value for item in fig.legend[0].items]


def test_test_metrics_of_a_stopped_run_are_named_partial(store):
    """Issue 51: a cancelled run showed "test metrics (measured, after training)" for a model stopped
    at step 313 of 1,760."""
    from gnnrec_lab.dashboard.live import test_text
    rid = _timed_run(store, 5.0, steps=3, status="running")
    store.record_start(rid, {"steps_per_epoch": 10})
    store.add_eval(rid, 1, 3, "test", {"recall@20": 0.11}, 2.0)
    store.set_status(rid, "cancelled")
    mon = LiveMonitor(lab=Lab(store=store, runner=RecordingRunner(store)), run_id=rid)
    assert "test metrics** (measured, partial: stopped at step 3 of 10)" in test_text(mon)
    done = _timed_run(store, 5.0, steps=3, status="running")
    store.add_eval(done, 1, 3, "test", {"recall@20": 0.11}, 2.0)
    store.set_status(done, "finished")
    mon = LiveMonitor(lab=Lab(store=store, runner=RecordingRunner(store)), run_id=done)
    assert "(measured, after training)" in test_text(mon)


def test_breakdown_table_reads_with_units_and_three_digits():
    """Issue 51: `seconds 0.896906`, `pct_of_bound 264.946735`, the index printed twice, whole-run
    totals under charts in ms per step."""
    from gnnrec_lab.dashboard.breakdown import breakdown_table
    from gnnrec_lab.util.formatting import significant as sig3
    assert sig3(0.896906) == 0.897 and sig3(264.946735) == 265 and sig3(123456.0) == 123000
    table = pd.DataFrame({"kernel": ["spmm"], "phase": ["forward"], "calls": [200], "seconds": [0.896906],
                          "share": [0.61234], "bytes": [4.2e9], "random_bytes": [1.1e9], "flops": [3e9],
                          "GBps": [4.6829], "GFLOPs": [3.3449], "intensity": [0.7142857],
                          "bound_seconds": [2.37634], "pct_of_bound": [264.946735]})
    out = breakdown_table(table, steps=200)
    row = out.iloc[0]
    assert row["time, ms per step"] == 4.48 and row["time, s (whole run)"] == 0.897
    assert row["share of kernel time, %"] == 61.2 and row["% of bound"] == 265
    assert row["MB moved per step"] == 21 and row["calls (whole run)"] == 200
    assert "seconds" not in out.columns and "index" not in out.columns and list(out.columns[:2]) == ["kernel", "phase"]


def test_cache_curves_that_coincide_stay_told_apart():
    """Issue 51: on Cache, belady was drawn exactly under oracle(L=200). The ceiling is now drawn
    last, dashed, with its own marker, in its policy's colour on every chart."""
    from gnnrec_lab.dashboard.cache import bytes_plot, hit_rate_plot
    from gnnrec_lab.dashboard.palettes import policy_color
    common.load_extensions()
    same = [0.2, 0.5, 0.9]
    curves = pd.DataFrame({"policy": ["belady"] * 3 + ["oracle(L=200)"] * 3 + ["static-degree"] * 3,
                           "capacity_pct": [10, 50, 90] * 3, "hit_rate": same * 2 + [0.1, 0.3, 0.8],
                           "read_MiB": [3.0, 2.0, 1.0] * 3, "written_MiB": [1.0] * 9})
    for plot in (hit_rate_plot(curves), bytes_plot(curves)):
        els = list(plot)
        assert els[-1].label == "belady" and els[-2].label == "belady"            # on top
        style = {(type(e).__name__, e.label): e.opts.get().kwargs for e in els}
        assert style[("Curve", "belady")]["line_dash"] == "dashed" != style[("Curve", "oracle(L=200)")]["line_dash"]
        assert style[("Scatter", "belady")]["marker"] != style[("Scatter", "oracle(L=200)")]["marker"]
        assert style[("Curve", "static-degree")]["color"] == policy_color("static")
        assert len({style[("Curve", p)]["color"] for p in ("belady", "oracle(L=200)", "static-degree")}) == 3
