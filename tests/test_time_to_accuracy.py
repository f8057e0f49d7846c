"""Time to accuracy in Compare (issue 51, item 7): validation Recall@20 against training time, measured
(the run's own evaluations at their elapsed training seconds) and modeled per memory mode (the same
evaluations at the training time times the run's modeled/measured step ratio on the mode's device),
one services function (comparison.time_to_accuracy) the chart draws; and Compare's table as CSV."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import panel as pn
import pytest

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.dashboard.common import Lab, mode_color
from gnnrec_lab.dashboard.compare import (
    DEFAULT_COLUMNS,
    TABLE_TITLES,
    ComparePage,
    runs_table,
    significant,
    time_to_accuracy_chart,
)
from gnnrec_lab.dashboard.fake import fake_records
from gnnrec_lab.memory.tiermodel import MODE_DEVICES
from gnnrec_lab.services.comparison import time_to_accuracy
from gnnrec_lab.services.projection import dram_run_modes, modeled_runs_frame
from gnnrec_lab.util.provenance import Provenance

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")

HOST = dict(copy_GBps=13.8, triad_GBps=12.2, gather64_GBps=1.35, gather256_GBps=1.75, latency_ns=456.0,
            gemm_GFLOPs=35.7, kind="host", measured=True, measured_at="fixed")
# (training seconds elapsed, validation Recall@20) of each evaluation
EVALS = [(1.0, 0.05), (2.5, 0.11), (4.0, 0.16)]


@pytest.fixture
def host(store):
    from gnnrec_lab.kernels import native as nk
    from gnnrec_lab.memory import calibrate
    h = dict(HOST, cpu=calibrate.cpu_model(), threads=nk.threads())
    calibrate.save(h)
    return h


def dram_run(store, layers=2, status="finished", evals=EVALS, memory_mode="dram"):
    cfg = RunConfig(dataset="synth-tiny", layers=layers, dim=16, batch_size=512, epochs=3, cores=1,
                    memory_mode=memory_mode)
    rid = store.add_run(cfg, status="running")
    store.record_start(rid, {"host": {"affinity": [0], "torch_threads": 1, "cpus": 2},
                             "footprint_predicted": {"graph": 2_000_000, "embeddings": 500_000}})
    rng = np.random.default_rng(layers)
    for s in range(1, 5):
        store.add_step(rid, s, 1, 1.0 / s, 0.01, fake_records(s, layers, 16, rng))
    for epoch, (t, r) in enumerate(evals, start=1):
        store.add_eval(rid, epoch, epoch * 2, "valid", {"recall@20": r, "ndcg@20": r / 2}, t)
    store.add_eval(rid, 3, 6, "test", {"recall@20": 0.5}, 9.0)   # a test metric is not a point of the curve
    if status != "running":
        store.set_status(rid, status)
    return rid


def test_measured_points_are_the_runs_evaluations_and_modeled_ones_their_times_scaled(store, host):
    rid, other = dram_run(store), dram_run(store, layers=3, evals=[(0.5, 0.2)])
    df = time_to_accuracy(store, [rid, other], host=host)
    mine = df[df["run_id"] == rid]
    measured = mine[mine["kind"] == Provenance.MEASURED]
    # measured: exactly the stored evaluations, in their order, at their elapsed training seconds
    assert list(measured["train_s"]) == [t for t, _ in EVALS]
    assert list(measured["recall@20"]) == [r for _, r in EVALS]
    assert set(measured["series"]) == {f"DRAM · #{rid} (measured)"} and set(measured["device"]) == {"this host (DRAM)"}
    assert measured["ratio"].isna().all()
    modeled = mine[mine["kind"] == Provenance.MODELED]
    assert set(modeled["memory_mode"]) == set(MODE_DEVICES)   # every modeled memory mode
    # the ratios of the one projection of a DRAM run's memory modes every view shows
    modes = dram_run_modes(store, rid, host).set_index("memory_mode")
    for mode, g in modeled.groupby("memory_mode"):
        ratio = modes.loc[mode, "ratio"]
        assert ratio > 1.0   # a slower tier: a modeled point later than its measured one
        assert g["device"].iloc[0] == MODE_DEVICES[mode] and g["ratio"].iloc[0] == pytest.approx(ratio)
        assert g["band"].iloc[0] == pytest.approx(modes.loc[mode, "band_step"])
        assert list(g["train_s"]) == pytest.approx([t * ratio for t, _ in EVALS])
        assert list(g["recall@20"]) == [r for _, r in EVALS]   # the accuracy is the run's own
        assert g["series"].iloc[0].endswith("(modeled)") and f" · #{rid} (modeled)" in g["series"].iloc[0]
        assert (g["train_s"].to_numpy() > measured["train_s"].to_numpy()).all()
    # the other run's points are its own
    o = df[(df["run_id"] == other) & (df["kind"] == Provenance.MEASURED)]
    assert list(o["train_s"]) == [0.5] and list(o["recall@20"]) == [0.2]


def test_without_calibration_or_while_running_only_measured(store, host):
    rid = dram_run(store)
    assert set(time_to_accuracy(store, [rid])["kind"]) == {Provenance.MEASURED}
    live = dram_run(store, status="running")
    df = time_to_accuracy(store, [live], host=host)
    assert set(df["kind"]) == {Provenance.MEASURED}
    assert any("running" in why for _, _, why in df.attrs["reasons"])
    assert time_to_accuracy(store, [], host=host).empty


def test_a_modeled_mode_run_uses_its_own_ratio_for_its_mode(store, host):
    rid = dram_run(store, memory_mode="cxl")
    df = time_to_accuracy(store, [rid], host=host, own_ratios={rid: 3.0})
    cxl = df[(df["kind"] == Provenance.MODELED) & (df["memory_mode"] == "cxl")]
    assert list(cxl["train_s"]) == pytest.approx([3.0 * t for t, _ in EVALS])
    assert set(df.loc[df["kind"] == Provenance.MODELED, "memory_mode"]) == {"cxl"}   # its own mode only
    assert set(time_to_accuracy(store, [rid], host=host)["kind"]) == {Provenance.MEASURED}   # no ratio: none
    measured = df[df["kind"] == Provenance.MEASURED]
    assert list(measured["train_s"]) == [t for t, _ in EVALS] and set(measured["memory_mode"]) == {"cxl"}


def test_chart_draws_modeled_dashed_in_the_modes_colour(store, host):
    import holoviews as hv
    hv.extension("bokeh")
    rid = dram_run(store)
    df = time_to_accuracy(store, [rid], host=host)
    chart = time_to_accuracy_chart(df)
    curves = [el for el in chart if type(el).__name__ == "Curve"]
    assert {c.label for c in curves} == set(df["series"])
    for c in curves:
        o = c.opts.get().kwargs
        if c.label.endswith("(modeled)"):
            mode = df[df["series"] == c.label]["memory_mode"].iloc[0]
            assert o["line_dash"] == "dashed" and o["color"] == mode_color(mode)
        else:
            assert o["line_dash"] == "solid" and "measured" in c.label
    # the page draws it for the selected runs
    lab = Lab(store=store, runner=None)
    page = ComparePage(lab)
    page.selected = [rid]
    panes = pn.panel(page.accuracy()).select(pn.pane.HoloViews)
    assert any("Time to accuracy" in str(p.object.opts.get().kwargs.get("title", "")) for p in panes)


def test_compare_table_columns_and_csv(store, host):
    ids = [dram_run(store), dram_run(store, layers=3, evals=[(0.5, 0.123456)])]
    page = ComparePage(Lab(store=store, runner=None))
    # the ± and confidence columns are among the default ones; the rest hidden until chosen
    assert {"band", "confidence"} <= set(page.columns.value) and page.columns.value == DEFAULT_COLUMNS
    assert "startup_s" in page.table.hidden_columns and "band" not in page.table.hidden_columns
    page.columns.value = ["status", "train_s", "best_valid_recall@20"]
    assert "band" in page.table.hidden_columns
    back = pd.read_csv(io.StringIO(page.csv()))
    assert list(back.columns) == [TABLE_TITLES["id"], TABLE_TITLES["status"], TABLE_TITLES["train_s"],
                                  TABLE_TITLES["best_valid_recall@20"]]
    table = runs_table(modeled_runs_frame(store))
    assert list(back[TABLE_TITLES["id"]]) == list(table.index) == sorted(ids, reverse=True)
    assert list(back[TABLE_TITLES["train_s"]]) == pytest.approx(list(table["train_s"]))
    assert list(back[TABLE_TITLES["best_valid_recall@20"]]) == [0.123, 0.16]   # 3 significant digits


def test_significant_digits():
    assert significant(0.13681) == 0.137 and significant(1234.5) == 1230.0 and significant(88.04) == 88.0
    assert significant(float("nan")) != significant(float("nan")) and significant(0.0) == 0.0


def test_breakdown_table_downloads_as_it_shows_it(store):
    from gnnrec_lab.dashboard.breakdown import BreakdownPage
    rid = dram_run(store)
    page = BreakdownPage(Lab(store=store, runner=None), run_id=rid)
    body = pn.panel(page.body())
    download = body.select(pn.widgets.FileDownload)
    assert len(download) == 1 and download[0].filename == f"breakdown_run_{rid}.csv"
    table = body.select(pn.widgets.Tabulator)
    assert len(table) == 1
    shown = table[0].value
    back = pd.read_csv(io.StringIO(download[0].callback().getvalue()))
    titles = table[0].titles or {}
    assert list(back.columns) == [titles.get(c, c) for c in shown.columns]
    assert len(back) == len(shown) and len(back) > 0
    for c in shown.columns:
        col = back[titles.get(c, c)]
        if pd.api.types.is_numeric_dtype(shown[c]):
            assert list(col) == pytest.approx(list(shown[c].astype(float)), nan_ok=True), c
        else:
            assert list(col.fillna("").astype(str)) == list(shown[c].fillna("").astype(str)), c
