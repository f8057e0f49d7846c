"""`advise` starts from a stored DRAM measurement of the same shape, names it, and every mode names
the placement it assumes."""
from __future__ import annotations

import json

import pytest
from test_dashboard_components import _calibrate
from test_launch_page import _dram_run

from gnnrec_lab.commands.cli import main
from gnnrec_lab.runs.store import Store

ARGS = ["advise", "--dataset", "synth-tiny", "--model", "lightgcn", "--layers", "1", "--dim", "8",
        "--batch-size", "512", "--dram-gb", "16"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    _calibrate()
    s = Store()
    yield s
    s.close()


@pytest.mark.slow
def test_advise_uses_the_fastest_stored_dram_run_of_the_shape_and_names_it(store, capsys):
    from gnnrec_lab.memory.calibrate import host_profile
    from gnnrec_lab.memory.tiermodel import run_step_time
    from gnnrec_lab.services.projection import stored_run_records, stored_run_step_time
    slow = _dram_run(store, 5.0)
    fast = _dram_run(store, 1.0)
    _dram_run(store, 0.1, dim=16)       # another shape
    assert main(ARGS + ["--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    host = host_profile(measure_if_missing=False)
    measured = stored_run_step_time(store, fast, host, device="host")["measured_s"]
    src = a["step_source"]
    assert src["kind"] == "measured" and src["run_id"] == fast and f"run #{fast}" in src["text"]
    dram = a["modes"]["dram"]
    assert dram["kind"] == "measured" and dram["modeled_kernel_s"] == pytest.approx(measured)
    # advise's DRAM time is the run's kernel time, and is named so (issue 35: it was "the measured
    # step"); issue 51: the kernel time of its median step (tiermodel.step_base), as every projection
    # starts from, not the mean a stalled step moves
    from gnnrec_lab.memory.tiermodel import step_base
    records, nsteps, _, _ = stored_run_records(store, fast)
    kernel_s = step_base(records, records.attrs["step_seconds"], steps=nsteps).kernel_s
    assert dram["modeled_kernel_s"] == pytest.approx(kernel_s, rel=1e-6)   # per-step ns rounded to integers
    assert main(ARGS) == 0
    text = capsys.readouterr().out
    assert f"#{fast} {kernel_s * 1e3:.1f} ms" in text and "(kernel time per step, measured)" in text
    assert "measured step" not in text and "DRAM kernel time per step: measured in run" in text
    # with every class on the device, advise gives the step whatif and the Launch page give
    totals, steps, fp, cfg = stored_run_records(store, fast)
    ad = a["modes"]["optane_app_direct"]
    whatif = run_step_time(totals, host, cfg, device=ad["device"], steps=steps)["modeled_s"]
    assert ad["all_on_device_kernel_s"] == pytest.approx(whatif, rel=1e-6)
    for mode, r in a["modes"].items():
        assert r["placement_assumption"], mode
    assert ad["placement_assumption"] == "the advised split"
    assert "all tensor classes on the device" in a["modes"]["optane_memory_mode"]["placement_assumption"]
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert f"DRAM kernel time per step: measured in run #{fast}" in out and f"#{slow} " in out
    mode_rows = [ln for ln in out.splitlines() if ln.strip().startswith(("dram ", "optane", "cxl", "remote"))]
    assert len(mode_rows) == 5 and all("placement: " in ln for ln in mode_rows)


def test_advise_without_a_stored_run_says_it_is_modeled(store, capsys):
    _dram_run(store, 1.0, dim=16)        # not this shape
    assert main(ARGS + ["--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert a["step_source"]["kind"] == "modeled" and a["step_source"]["run_id"] is None
    assert a["modes"]["dram"]["kind"] == "modeled"
    fast = _dram_run(store, 1.0)
    assert main(ARGS + ["--json", "--ignore-runs"]) == 0
    assert json.loads(capsys.readouterr().out)["step_source"]["kind"] == "modeled"
    assert main(ARGS + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_source"]["run_id"] == fast


def test_whatif_and_the_run_summary_name_their_placement(store, capsys):
    from gnnrec_lab.training.loop import modeled_line
    rid = _dram_run(store, 1.0)
    assert main(["whatif", str(rid), "--device", "cxl_type3_ddr5_x8"]) == 0
    assert "placement: all tensor classes on the device" in capsys.readouterr().out
    assert main(["whatif", str(rid), "--device", "cxl_type3_ddr5_x8", "--placement", "graph=dram"]) == 0
    assert "placement: graph kept in DRAM" in capsys.readouterr().out
    from types import SimpleNamespace

    from gnnrec_lab.config.run import RunConfig
    result = SimpleNamespace(config=RunConfig(dataset="synth-tiny", memory_mode="cxl"), train_seconds=0.08, steps=4,
                             kernels=[{"name": "spmm", "phase": "forward", "ns": 2e7},
                                      {"name": "spmm", "phase": "evaluation", "ns": 9e9}],   # not a step's
                             modeled={"device": "cxl_type3_ddr5_x8", "modeled_s_per_step": 0.01,
                                      "measured_s_per_step": 0.005,
                                      "placement_assumption": "all tensor classes on the device"})
    from gnnrec_lab.memory.tiermodel import fmt_band, model_band
    line = modeled_line(result)
    band = model_band(result.modeled, step_s=0.02, kernel_s=0.005)   # the band every view prints
    assert line.startswith("cxl: step 20.0 ms, kernel time 5.0 ms (measured on this host's DRAM); modeled on "
                           f"cxl_type3_ddr5_x8: step 40.0 ms {fmt_band(band.step)}, kernel time 10.0 ms "
                           f"{fmt_band(band.kernel)} (2.00x, modeled)")
    assert band.confidence == "unvalidated" and "no traffic by regime" in line   # stored without its regimes
    assert line.endswith("placement: all tensor classes on the device")


def test_advise_projects_at_the_configs_own_threads(store):
    """A config of --cores 16 --threads 8 is advised at 8 threads, as its stored run would be
    projected (tiermodel.run_threads): past 4 writers Optane's write bandwidth falls, so the
    host calibration's thread count would give another App Direct step."""
    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.memory.advise import advise, step_records
    from gnnrec_lab.memory.calibrate import host_profile
    from gnnrec_lab.memory.tiermodel import project_step
    host = host_profile(measure_if_missing=False)
    counts = dict(n_users=20_000, n_items=10_000, n_train=400_000)
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=64, batch_size=4096, cores=16, threads=8)
    a = advise(cfg, counts, host, dram_gb=16)
    ad = a["modes"]["optane_app_direct"]
    recs = step_records(cfg, counts, host)
    eight = project_step(recs, host, ad["device"], threads=8)["modeled_s"]
    default = project_step(recs, host, ad["device"])["modeled_s"]
    assert eight != pytest.approx(default)
    assert ad["all_on_device_kernel_s"] == pytest.approx(eight, rel=1e-9)
