"""In-process tests of the dashboard components (no browser, no server)."""
from __future__ import annotations

import pandas as pd
import panel as pn
import pytest

from gnnrec_lab.config import RunConfig
from gnnrec_lab.dashboard import common
from gnnrec_lab.dashboard.breakdown import BreakdownPage, kernel_phase_ms, kernel_shares
from gnnrec_lab.dashboard.common import Lab, optional
from gnnrec_lab.dashboard.compare import ComparePage, epoch_seconds, runs_table
from gnnrec_lab.dashboard.fake import fake_records, fill_store
from gnnrec_lab.dashboard.launch import EXAMPLE_CONFIG, LaunchPage, config_from_values, modeled_bars
from gnnrec_lab.dashboard.live import LiveMonitor, kernel_ms_per_step, progress_eta
from gnnrec_lab.store import Store

# Panel 1.9 renames widget name/button_type; the lab keeps the spelling panel>=1.4 understands.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    s = Store()
    yield s
    s.close()


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


def test_optional_reports_why():
    obj, why = optional("gnnrec_lab.no_such_module_here")
    assert obj is None and "no_such_module_here" in why
    obj, why = optional("gnnrec_lab.config", "RunConfig")
    assert obj is RunConfig and why is None


# -- live -----------------------------------------------------------------------
def test_progress_eta():
    assert progress_eta(0, 100, 0.0) == (0.0, None)
    pct, eta = progress_eta(25, 100, 10.0)
    assert pct == 25.0 and eta == pytest.approx(30.0)
    assert progress_eta(5, None, 3.0) == (None, None)
    assert progress_eta(120, 100, 10.0)[0] == 100.0


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
    assert pct == 40.0
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
    bars = plot.Bars.I.data
    assert list(bars["hatch"]) == [" ", "/", "/"]
    assert plot.Labels.I.data["label"].tolist() == ["measured", "modeled", "modeled"]


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
    runs = store.runs_frame()
    table = runs_table(runs)
    assert list(table.index) == sorted(ids, reverse=True)
    assert {"model", "layers", "batch_size", "status"} <= set(table.columns)
    es = epoch_seconds(store, runs)
    assert sorted(es["id"]) == sorted(ids)
    first = store.epochs_frame(ids[0])["seconds"].mean()
    assert es.set_index("id").loc[ids[0], "epoch_s"] == pytest.approx(first)


def test_compare_selection_overlays_selected_runs(store):
    ids = fill_store(store, n_runs=3, steps=4)
    page = ComparePage(Lab(store=store, runner=RecordingRunner(store)))
    page.table.selection = [0, 2]
    assert sorted(page.selected) == sorted([ids[2], ids[0]])
    hv_panes = pn.panel(page.overlays()).select(pn.pane.HoloViews)
    labels = {el.label for p in hv_panes for el in p.object}
    assert labels == {f"#{ids[0]}", f"#{ids[2]}"}


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
    from gnnrec_lab.cli import main
    assert main(["dashboard", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
