"""The Launch page in-process: one predicted-memory number against the limit that applies, the
step-time prediction from the fastest stored DRAM run of the shape, and the form's fields."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_dashboard_components import RecordingRunner, _calibrate, texts

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.dashboard.common import OVERLOADED_LABEL, Lab
from gnnrec_lab.dashboard.fake import fake_records
from gnnrec_lab.dashboard.security import LaunchPolicy, set_launch_policy
from gnnrec_lab.util.formatting import fmt_bytes

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
SHAPE = dict(dataset="synth-tiny", model="lightgcn", layers=1, dim=8, batch_size=512)


@pytest.fixture(autouse=True)
def _no_launch_policy_left():
    yield
    set_launch_policy(None)


def page_for(store, **form):
    from gnnrec_lab.dashboard.launch import LaunchPage
    page = LaunchPage(Lab(store=store, runner=RecordingRunner(store)))
    page.form.param.update(**form)
    return page


def all_text(page) -> str:
    """Every visible text of the page: its Markdown and Alerts, the predictions and the error panes."""
    return "\n".join([texts(page), texts(page.predictions())]
                     + [str(e.object) for e in page.errors.values() if e.visible])


def test_memory_is_one_number_against_the_limit_that_applies_drawn_on_scale(store):
    import holoviews as hv
    from bokeh.models import Span

    from gnnrec_lab.dashboard.launch import memory_chart, memory_prediction
    set_launch_policy(LaunchPolicy(memory_limit_bytes=1 << 20))   # 1 MiB: this run cannot fit
    page = page_for(store, **SHAPE)
    cfg = RunConfig(**SHAPE, epochs=page.form.epochs)
    v, why = memory_prediction(cfg)
    assert why is None and not v["fits"] and v["limit_name"] == "run's memory limit" and v["limit_bytes"] == 1 << 20
    assert page.button.disabled
    text = all_text(page)
    # one number: the note and the refusal at the button both give the pre-flight's figure
    note = texts(page.predictions())
    assert f"Predicted **{fmt_bytes(v['dram_bytes'])}** in DRAM" in note and "**exceeds**" in note
    assert "run's memory limit" in note and "fits in this machine's DRAM" not in note
    assert page.errors["form"].visible and fmt_bytes(v["dram_bytes"]) in page.errors["form"].object
    assert "--force" not in text and "form:" not in text        # no CLI advice in the browser
    # the limit is drawn on the chart, inside its y range
    fig = hv.render(memory_chart(v))
    div = {"MiB": 2**20, "GiB": 2**30}[fig.yaxis[0].axis_label]
    spans = fig.select({"type": Span})
    assert [s.location for s in spans] == [pytest.approx(v["limit_bytes"] / div)]
    assert fig.y_range.start == 0 and fig.y_range.end >= v["limit_bytes"] / div
    assert fig.y_range.end >= v["dram_bytes"] / div
    # a limit far above the bar (26 MiB under 17.7 GiB was an invisible line at the axis' foot):
    # the axis fits the bar and the limit is named at the top in words
    from bokeh.models import Text
    far = dict(v, limit_bytes=700 * v["dram_bytes"], fits=True)
    fig = hv.render(memory_chart(far))
    div = {"MiB": 2**20, "GiB": 2**30}[fig.yaxis[0].axis_label]
    assert not fig.select({"type": Span})
    assert v["dram_bytes"] / div <= fig.y_range.end <= 2 * v["dram_bytes"] / div    # the bar fills the chart
    words = " ".join(" ".join(r.data_source.data["text"]) for r in fig.renderers if isinstance(r.glyph, Text))
    assert fmt_bytes(far["limit_bytes"]) in words and "700x the prediction" in words and "far above" in words
    # without a limit, the memory available now applies, and the page says which
    set_launch_policy(None)
    v, _ = memory_prediction(cfg)
    assert v["limit_name"] == "memory available now"


def _dram_run(store, scale: float, load1: float = 0.5, steps: int = 3, **over) -> int:
    rid = store.add_run(RunConfig(**(SHAPE | over), epochs=1), status="running")
    store.record_start(rid, {"steps_per_epoch": steps,
                             "load": {"start": {"load1": load1, "cpus": 2, "steal_pct": None}}})
    rng = np.random.default_rng(1)
    for s in range(1, steps + 1):
        recs = [dataclasses.replace(r, ns=int(r.ns * scale))
                for r in fake_records(s, SHAPE["layers"], SHAPE["dim"], rng)]
        store.add_step(rid, s, 1, 1.0 / s, 0.01, recs)
    store.set_status(rid, "finished")
    return rid


def test_step_time_predicts_from_the_fastest_same_shape_dram_run_and_shows_the_spread(store):
    from gnnrec_lab.memory.calibrate import host_profile
    from gnnrec_lab.services.projection import dram_reference, stored_run_step_time
    _calibrate()
    slow = _dram_run(store, 6.0, load1=5.0)       # the same shape measured under load
    fast = _dram_run(store, 1.0)
    mid = _dram_run(store, 2.0)
    _dram_run(store, 0.1, batch_size=1024)            # another shape: never the reference
    half = _dram_run(store, 0.1, precision="bf16")    # bf16 rows: other work per step, never the reference
    ref = dram_reference(store, RunConfig(**SHAPE), host_profile(measure_if_missing=False))
    assert ref["run_id"] == fast and ref["rule"] == "fastest"
    assert [r["run_id"] for r in ref["runs"]] == [slow, fast, mid]
    assert dram_reference(store, RunConfig(**SHAPE, precision="bf16"), host_profile(measure_if_missing=False))[
        "run_id"] == half
    host = host_profile(measure_if_missing=False)
    times = {r: stored_run_step_time(store, r, host, device="host")["measured_s"] for r in (slow, fast, mid)}
    assert ref["min_s"] == pytest.approx(times[fast]) and ref["max_s"] == pytest.approx(times[slow])
    assert ref["median_s"] == pytest.approx(times[mid])
    page = page_for(store, **SHAPE, memory_mode="optane_app_direct")
    note = texts(page.predictions())
    assert f"run **#{fast}**" in note and "**fastest**" in note and "3 stored DRAM runs" in note
    assert f"#{slow} " in note and OVERLOADED_LABEL in note            # the loaded run is marked
    assert "all tensor classes on the device" in note                  # the placement it assumes
    assert "ms kernel time per step (modeled)" in note
    page.form.placement = {"embeddings": "dram"}
    assert "embeddings kept in DRAM" in texts(page.predictions())


def test_form_has_eval_users_patience_seed_sampled_mode_cache_policy_and_device_profile(store):
    page = page_for(store, **SHAPE)
    for k in ("eval_users", "patience", "seed", "mode", "fanouts", "cache_policy", "cache_size", "device_profile",
              "precision"):
        assert k in page.widgets, k
    assert list(page.widgets["precision"].options) == ["fp32", "bf16"]
    assert "optane_pmem200_appdirect_8x" in page.widgets["device_profile"].options.values()
    assert not page.widgets["device_profile"].visible and not page.widgets["cache_policy"].visible
    page.form.memory_mode = "optane_app_direct"
    assert page.widgets["device_profile"].visible
    page.widgets["device_profile"].value = "optane_pmem200_appdirect_8x"
    page.form.param.update(eval_users=200, patience=2, seed=7, mode="sampled", fanouts="5", cache_policy="oracle",
                           cache_size="10%")
    assert page.widgets["cache_policy"].visible and page.widgets["cache_size"].visible
    assert not page.button.disabled, [e.object for e in page.errors.values() if e.visible]
    rid = page.launch()
    cfg = page.lab.runner.launched[-1]
    assert rid is not None and (cfg.eval_users, cfg.patience, cfg.seed, cfg.mode,
                                cfg.fanouts) == (200, 2, 7, "sampled", (5,))
    assert (cfg.cache_policy, cfg.cache_size, cfg.device_profile) == ("oracle", "10%", "optane_pmem200_appdirect_8x")
    page.form.fanouts = "5,x"
    assert page.button.disabled and page.errors["fanouts"].visible and "fanouts" in page.errors["fanouts"].object


def test_form_refuses_a_batch_larger_than_the_training_set_inline(store):
    from gnnrec_lab.data import describe
    from gnnrec_lab.memory.preflight import batch_size_error
    page = page_for(store, **SHAPE)
    assert not page.button.disabled
    page.form.batch_size = 10_000_000
    assert page.button.disabled and page.errors["batch_size"].visible
    expected = batch_size_error(10_000_000, describe("synth-tiny"), "synth-tiny")
    assert str(expected) in page.errors["batch_size"].object and "10,000,000" in str(expected)
    assert not page.errors["form"].visible
    page.form.batch_size = 512
    assert not page.button.disabled and not page.errors["batch_size"].visible


def test_errors_not_tied_to_a_field_carry_no_form_prefix(store):
    from gnnrec_lab.dashboard.launch import error_text
    from gnnrec_lab.util.errors import ConfigError
    assert error_text(ConfigError("form", "the runner is busy")) == "the runner is busy"
    assert error_text(ConfigError("dim", "must be positive")) == "dim: must be positive"   # a field keeps its name

    class Refusing(RecordingRunner):
        def launch(self, config):
            from gnnrec_lab.util.errors import UserError
            raise UserError("the runner is busy")
    from gnnrec_lab.dashboard.launch import LaunchPage
    page = LaunchPage(Lab(store=store, runner=Refusing(store)))
    page.form.param.update(**SHAPE)
    assert page.launch() is None and page.status_md.object == "Not launched: the runner is busy"


def test_form_launches_a_run_pinned_to_cores_and_refuses_more_than_there_are(store):
    """One 'machine' of C cores from the page, as `gnnrec-lab run --cores C`."""
    import os
    page = page_for(store, **SHAPE)
    assert "cores" in page.widgets and page.form.cores is None          # unpinned unless asked
    page.form.cores = 1
    assert not page.button.disabled, [e.object for e in page.errors.values() if e.visible]
    page.launch()
    assert page.lab.runner.launched[-1].cores == 1
    page.form.cores = len(os.sched_getaffinity(0)) + 1
    page.launch()
    assert len(page.lab.runner.launched) == 1                              # refused, nothing launched
    assert "may run on" in all_text(page)                                  # says how many there are


class RequestRunner:
    """Records what the page hands the runner, the keyword arguments included (no subprocess)."""

    def __init__(self, store):
        self.store, self.calls = store, []

    def launch(self, config, **kw):
        self.calls.append((config, kw))
        return self.store.add_run(config, status="queued")

    def status(self, run_id):
        return self.store.status(run_id)


def test_distdgl_is_an_engine_checked_inline_and_launched_with_its_request(store, monkeypatch):
    """The form launches a DistDGL run through the runner with runner_request's arguments; a field
    DistDGL cannot take is refused under that field, a missing DGL lane at the engine."""
    from pathlib import Path

    from gnnrec_lab.dashboard.launch import LaunchPage
    from gnnrec_lab.distributed import engine
    monkeypatch.setattr(engine, "dgl_available", lambda: False)
    monkeypatch.setattr(engine, "dgl_lane_python", lambda: Path("/opt/lane/bin/python"))
    page = LaunchPage(Lab(store=store, runner=RequestRunner(store)))
    page.form.param.update(**SHAPE, fanouts="10")
    assert not page.engine_widgets["partitions"].visible and not page.button.disabled
    page.engine = "distdgl"
    assert page.engine_widgets["partitions"].visible
    assert page.button.disabled and page.errors["mode"].visible
    assert "a DistDGL run samples each batch's neighbourhood" in page.errors["mode"].object
    assert page.launch() is None and page.lab.runner.calls == []   # nothing queued
    page.form.mode = "sampled"
    page.partitions = 3
    assert not page.button.disabled and not any(e.visible for e in page.errors.values())
    run_id = page.launch()
    assert run_id is not None and "Launched run" in page.message
    config, kw = page.lab.runner.calls[-1]
    assert config.mode == "sampled" and config.dataset == SHAPE["dataset"]
    assert kw["train_fn"] == engine.TRAIN_FN and kw["python"] == "/opt/lane/bin/python"
    assert kw["options"]["partitions"] == 3 and kw["options"]["cluster"] == "local"
    # no DGL anywhere: refused at the engine, naming the lane to build; nothing more is queued
    monkeypatch.setattr(engine, "dgl_lane_python", lambda: None)
    page.partitions = 2
    assert page.button.disabled and "make dgl" in page.errors["engine"].object
    assert page.launch() is None and len(page.lab.runner.calls) == 1
    # the example run stays on this machine whatever the engine says
    page.engine = "lab"
    assert not page.engine_widgets["partitions"].visible and not page.button.disabled


def test_run_name_field_names_the_launched_run_and_refuses_bad_names(store):
    """Launch's name box is RunConfig's ``name`` (the same check as `runs rename`): a bad name is shown
    under the box and Launch stays disabled; a good one is the stored run's name; empty is no name."""
    page = page_for(store, **SHAPE)
    assert page.name_widget.name == "Run name" and page.form.run_name == ""
    for bad, words in (("a\nb", "control character"), ("   ", "only spaces"), ("x" * 201, "201 characters")):
        page.form.run_name = bad
        assert page.button.disabled and page.errors["name"].visible, bad
        assert words in page.errors["name"].object and "name:" in page.errors["name"].object
    page.form.run_name = "baseline · 1 layer"
    assert not page.button.disabled and not page.errors["name"].visible
    rid = page.launch()
    assert page.lab.runner.launched[-1].name == "baseline · 1 layer"
    assert store.get_run(rid)["name"] == "baseline · 1 layer" and "baseline · 1 layer" in page.status_md.object
    page.form.run_name = ""
    page.launch()
    assert page.lab.runner.launched[-1].name is None
    page.form.set_from(RunConfig(**SHAPE, name="again"))
    assert page.form.run_name == "again"


def test_each_modeled_number_states_its_assumption_in_advises_words(store):
    """Beside each number of the step-time prediction: its kind and placement as `advise` prints them
    (memory.advise.assumption_text), and for Memory Mode the DRAM's size and the modeled hit rate
    (memory.advise.cache_note) of that very projection."""
    from gnnrec_lab.memory.advise import ALL_IN_DRAM, assumption_text, cache_note, cached_placement
    from gnnrec_lab.memory.calibrate import host_profile
    from gnnrec_lab.memory.profiles import load_profiles
    from gnnrec_lab.memory.tiermodel import ALL_ON_DEVICE, MODE_DEVICES
    from gnnrec_lab.services.projection import stored_run_step_time
    _calibrate()
    ref = _dram_run(store, 1.0)
    store.record_start(ref, {"steps_per_epoch": 3, "footprint_predicted": {"graph": 3 << 30, "embeddings": 1 << 30}})
    page = page_for(store, **SHAPE, memory_mode="optane_memory_mode")
    text = texts(page.predictions())
    mm = MODE_DEVICES["optane_memory_mode"]
    st = stored_run_step_time(store, ref, host_profile(measure_if_missing=False), device=mm)
    cache = load_profiles()[mm].dram_cache_bytes
    line = next(ln for ln in text.splitlines() if ln.startswith(f"- {mm}:"))
    assert "(modeled)" in line and assumption_text("modeled", cached_placement(ALL_ON_DEVICE)) in line
    assert cache_note(cache, st["hit_rate"]) in line and f"hit rate {st['hit_rate']:.3f}" in line
    ad = MODE_DEVICES["optane_app_direct"]
    line = next(ln for ln in text.splitlines() if ln.startswith(f"- {ad}:"))
    assert assumption_text("modeled", ALL_ON_DEVICE) in line and "hit rate" not in line
    line = next(ln for ln in text.splitlines() if ln.startswith("- this host (DRAM):"))
    assert assumption_text("measured", ALL_IN_DRAM) in line
    page.form.placement = {"embeddings": "dram"}
    assert "[modeled; placement: embeddings kept in DRAM" in texts(page.predictions())
