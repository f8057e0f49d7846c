"""The machine's load recorded with each run (start, middle, end) and flagged wherever runs are shown."""
from __future__ import annotations

import json
import os

import pytest

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util import proc

TINY = dict(dataset="synth-tiny", dim=8, layers=1, batch_size=512, epochs=2, max_steps_per_epoch=2, patience=0)


def test_load_sample_reads_the_load_average_and_steal_since_the_previous_sample(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 1.0, 0.5))
    ticks = iter([(100, 10_000), (150, 11_000)])
    monkeypatch.setattr(proc, "cpu_ticks", lambda: next(ticks))
    first = proc.load_sample()
    assert first["load1"] == 2.5 and first["load15"] == 0.5 and first["cpus"] == os.cpu_count()
    assert first["steal_pct"] is None                 # no interval yet
    second = proc.load_sample(first)
    assert second["steal_pct"] == pytest.approx(5.0)  # 50 of 1,000 ticks
    monkeypatch.setattr(proc, "cpu_ticks", lambda: None)   # a kernel without steal: unknown, not 0
    assert proc.load_sample(second)["steal_pct"] is None


def test_load_summary_flags_load_above_the_cores():
    quiet = {p: {"load1": 1.5, "cpus": 2, "steal_pct": None} for p in proc.LOAD_POINTS}
    s = proc.load_summary(quiet)
    assert s["overloaded"] is False and s["max_load1"] == 1.5 and proc.load_warning(s) == ""
    busy = dict(quiet, middle={"load1": 3.2, "cpus": 2, "steal_pct": 4.0})
    s = proc.load_summary(busy)
    assert s["overloaded"] is True and s["max_load1"] == 3.2 and s["max_steal_pct"] == 4.0
    assert "3.2" in proc.load_warning(s) and "2 cores" in proc.load_warning(s)
    assert proc.load_summary(None) is None and proc.load_summary({}) is None


@pytest.fixture
def overloaded_run(tmp_path, monkeypatch):
    """One real (tiny) training run recorded in a store while the load average reads 9 on 2 cores."""
    from gnnrec_lab.training.loop import train
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 8.0, 7.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    store = Store()
    rid = store.add_run(RunConfig(**TINY), status="running")
    train(RunConfig(**TINY), reporter=store.reporter(rid))
    store.set_status(rid, "finished")
    quiet = store.add_run(RunConfig(**TINY), status="finished")   # a run with no samples: not flagged
    return store, rid, quiet


def test_a_run_stores_its_load_at_start_middle_and_end(overloaded_run):
    store, rid, quiet = overloaded_run
    load = store.get_run(rid)["info"]["load"]
    assert set(load) == {"start", "middle", "end"}
    assert all(load[p]["load1"] == 9.0 and load[p]["cpus"] == 2 for p in load)
    assert load["start"]["time"] <= load["middle"]["time"] <= load["end"]["time"]
    df = store.runs_frame().set_index("id")
    assert df.loc[rid, "overloaded"] is True and df.loc[rid, "load_max"] == 9.0
    assert df.loc[quiet, "overloaded"] is None


def test_every_view_flags_the_overloaded_run(overloaded_run, capsys):
    from gnnrec_lab.commands import cli
    from gnnrec_lab.dashboard.common import OVERLOADED_LABEL, run_options
    from gnnrec_lab.services.projection import modeled_runs_frame
    store, rid, quiet = overloaded_run
    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(f"{rid} "))
    assert row.rstrip().endswith("9.0/2 !") and "load average (1 min) above the core count" in out
    assert not next(line for line in out.splitlines() if line.startswith(f"{quiet} ")).rstrip().endswith("!")
    assert cli.main(["runs", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[rid]["overloaded"] is True and rows[rid]["load_max"] == 9.0
    assert cli.main(["runs", "show", str(rid)]) == 0
    out = capsys.readouterr().out
    assert "load       start 9.00, middle 9.00, end 9.00" in out and "exceeded the 2 cores" in out
    assert cli.main(["runs", "show", str(rid), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["load"]["overloaded"] is True
    labels = {v: k for k, v in run_options(modeled_runs_frame(store)).items()}
    assert labels[rid].endswith(OVERLOADED_LABEL) and OVERLOADED_LABEL not in labels[quiet]
    from gnnrec_lab.dashboard.compare import runs_table
    table = runs_table(modeled_runs_frame(store))
    assert table.loc[rid, "load"] == f"9.0/2 {OVERLOADED_LABEL}" and table.loc[quiet, "load"] == "-"


def test_runs_show_prints_counts_as_integers(tmp_path, monkeypatch, capsys):
    from gnnrec_lab.commands import cli
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    store = Store()
    rid = store.add_run(RunConfig(**TINY), status="finished")
    store.add_eval(rid, 1, 4, "test", {"recall@20": 0.1234, "users": 943}, 1.0)
    assert cli.main(["runs", "show", str(rid)]) == 0
    out = capsys.readouterr().out
    assert "users        943  (last)" in out and "943.0000" not in out
    assert "recall@20    0.1234" in out
