"""Sweeps: the product of config values, each point a stored run tagged with the
sweep id, finished points not re-run, Ctrl-C cancelling the rest, one summary
table. Most tests use the fake training functions of ``_fake_train`` (fast); one
runs real tiny training end to end through the CLI."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from gnnrec_lab import RunConfig
from gnnrec_lab.runs.store import Store
from gnnrec_lab.services.sweep import (
    Sweep,
    SweepInterrupted,
    expand,
    format_table,
    progress_line,
    summary_frame,
    summary_row,
    sweep_id,
    time_to_reach,
    varied_fields,
)
from gnnrec_lab.util.errors import ConfigError, DataError, UserError

TESTS = os.path.dirname(os.path.abspath(__file__))
BASE = dict(dataset="synth-tiny", dim=8, epochs=1)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "_fake_train:finish")
    monkeypatch.setenv("FAKE_STEPS", "3")
    monkeypatch.delenv("FAKE_SLEEP", raising=False)
    return tmp_path / "home"


# ---------------------------------------------------------------------------
# points
# ---------------------------------------------------------------------------
def test_expand_is_the_product_in_nested_loop_order():
    pts = expand(RunConfig(**BASE), {"batch_size": [512, 1024], "layers": [1, 2, 3], "lr_rule": "sqrt"})
    assert [(c.batch_size, c.layers) for c in pts] == [(512, 1), (512, 2), (512, 3), (1024, 1), (1024, 2), (1024, 3)]
    assert all(c.lr_rule == "sqrt" and c.dataset == "synth-tiny" for c in pts)
    assert varied_fields(pts) == ["layers", "batch_size"]  # RunConfig field order


def test_expand_from_a_partial_base_keeps_the_default_layers():
    # only an mf point's layers are rewritten; other models keep RunConfig's default
    pts = expand({"dataset": "ml-100k"}, {"dim": [8, 16]})
    assert [(c.dim, c.layers) for c in pts] == [(8, RunConfig().layers), (16, RunConfig().layers)]


def test_expand_collapses_mf_layers_and_duplicates():
    pts = expand(RunConfig(**BASE), {"model": ["lightgcn", "mf"], "dim": [8, 8]})
    assert [(c.model, c.layers) for c in pts] == [("lightgcn", 3), ("mf", 0)]


def test_expand_refuses_bad_points_naming_the_field():
    with pytest.raises(ConfigError) as e:
        expand(RunConfig(**BASE), {"batch_size": [512, -3]})
    assert e.value.param == "batch_size"
    with pytest.raises(UserError, match="no_such_field"):
        expand(RunConfig(**BASE), {"no_such_field": [1, 2]})
    with pytest.raises(UserError, match="no values"):
        expand(RunConfig(**BASE), {"layers": []})


def test_sweep_id_is_stable_and_order_free():
    a = expand(RunConfig(**BASE), {"layers": [1, 2]})
    assert sweep_id(a) == sweep_id(list(reversed(a))) != sweep_id(a[:1])
    assert sweep_id(a, "mine") == "mine"


# ---------------------------------------------------------------------------
# summaries
# ---------------------------------------------------------------------------
HIST = [{"epoch": 1, "elapsed_s": 2.0, "recall@20": 0.05}, {"epoch": 2, "elapsed_s": 4.0, "recall@20": 0.09},
        {"epoch": 3, "elapsed_s": 6.0, "recall@20": 0.08}]


def test_time_to_reach_first_crossing_or_none():
    assert time_to_reach(HIST, 0.05) == 2.0
    assert time_to_reach(HIST, 0.08) == 4.0
    assert time_to_reach(HIST, 0.091) is None
    assert time_to_reach([], 0.01) is None


def test_summary_row_and_table():
    res = {"config": RunConfig(**BASE).to_dict(), "epochs": 3, "epoch_seconds": [1.0, 2.0, 3.0],
           "train_seconds": 6.0, "info": {"steps_per_epoch": 12}, "best_valid": {"recall@20": 0.09},
           "test": {"recall@20": 0.085, "ndcg@20": 0.04}, "time_to_target_s": None,
           "footprint": {"predicted": {"graph": 2**20, "embeddings": 2**21}, "measured_peak_rss": 300 * 2**20}}
    row = summary_row(res)
    assert row["steps_per_epoch"] == 12 and row["epoch_s"] == 2.0 and row["valid_recall@20"] == 0.09
    assert row["footprint_mib"] == 3.0 and row["peak_rss_mib"] == 300.0 and row["time_to_target_s"] is None
    df = summary_frame([res, {}], fields=["batch_size"])
    text = format_table(df)
    assert "steps/epoch" in text and "footprint MiB (modeled)" in text and "0.0900" in text
    assert text.splitlines()[2].split()[0] == "-"  # the empty result shows dashes, not NaN
    md = format_table(df, markdown=True)
    assert md.startswith("| batch_size |") and md.splitlines()[1].startswith("|---")


# ---------------------------------------------------------------------------
# running (fake training: fast)
# ---------------------------------------------------------------------------
def test_sweep_runs_points_tags_them_and_resumes(home):
    store = Store(home)
    pts = expand(RunConfig(**BASE), {"layers": [1, 2], "batch_size": [512, 1024]})
    lines = []
    out = Sweep(pts, name="grid", store=store).run(on_point=lambda p, n: lines.append(progress_line(p, n, ["layers"])))
    assert out.ok and [p.status for p in out.points] == ["finished"] * 4
    assert not any(p.reused for p in out.points) and len(lines) == 4
    runs = store.runs_frame()
    assert len(runs) == 4 and set(runs.sweep) == {"grid"} and set(runs.status) == {"finished"}
    assert all(0 <= o < 30 for o in out.overheads()) and len(out.overheads()) == 4
    # same sweep again: nothing new runs, every point reused from the store
    again = Sweep(pts, name="grid", store=store).run()
    assert all(p.reused for p in again.points) and len(store.runs_frame()) == 4
    assert [p.run_id for p in again.points] == [p.run_id for p in out.points]
    assert "not re-run" in progress_line(again.points[0], 4, ["layers"])
    # one new point: only it runs
    more = expand(RunConfig(**BASE), {"layers": [1, 2, 3], "batch_size": [512, 1024]})
    third = Sweep(more, name="grid", store=store).run()
    assert sum(not p.reused for p in third.points) == 2 and len(store.runs_frame()) == 6


def test_failed_point_is_reported_and_rerun_next_time(home, monkeypatch):
    store = Store(home)
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "_fake_train:user_mistake")
    pts = expand(RunConfig(**BASE), {"layers": [1, 2]})
    out = Sweep(pts, store=store).run()
    assert not out.ok and [p.status for p in out.points] == ["failed", "failed"]
    assert "fake.csv line 3" in progress_line(out.points[0], 2, ["layers"])
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "_fake_train:finish")
    out2 = Sweep(pts, store=store).run()
    assert out2.ok and not any(p.reused for p in out2.points)


def test_unknown_dataset_refused_before_anything_is_queued(home):
    store = Store(home)
    with pytest.raises(DataError):
        Sweep(expand(RunConfig(**BASE), {"dataset": ["synth-tiny", "no-such-data"]}), store=store).run()
    assert store.run_ids() == []


def test_interrupt_cancels_queued_and_running_points(home, monkeypatch):
    store = Store(home)
    monkeypatch.setenv("FAKE_STEPS", "100000")
    monkeypatch.setenv("FAKE_SLEEP", "0.01")
    pts = expand(RunConfig(**BASE), {"layers": [1, 2, 3]})
    calls = {"n": 0}
    real_sleep = time.sleep

    def sleepy(s):  # Ctrl-C arrives while the first point is running
        if threading.current_thread() is not threading.main_thread():
            return real_sleep(s)  # the runner's monitor thread
        calls["n"] += 1
        if calls["n"] > 1 and not calls.get("fired") and store.run_ids("running"):
            calls["fired"] = True
            raise KeyboardInterrupt
        real_sleep(s)

    monkeypatch.setattr("gnnrec_lab.services.sweep.time.sleep", sleepy)
    with pytest.raises(SweepInterrupted) as e:
        Sweep(pts, store=store, poll_s=0.05).run()
    out = e.value.outcome
    assert out.interrupted and [p.status for p in out.points] == ["cancelled"] * 3
    assert store.run_ids("queued") == [] and store.run_ids("running") == []
    assert all("Ctrl-C" in p.error for p in out.points)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------
def _cli(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "sweep", *args], capture_output=True,
                          text=True,
                          timeout=300, env=env or os.environ.copy(), **kw)


def test_cli_sweep_ctrl_c_exits_130_and_leaves_nothing_queued(home):
    env = dict(os.environ, FAKE_STEPS="100000", FAKE_SLEEP="0.01")
    proc = subprocess.Popen([sys.executable, "-m", "gnnrec_lab.commands.cli", "sweep", "--dataset", "synth-tiny",
                             "--layers", "1,2,3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    store = Store(home)
    deadline = time.monotonic() + 60
    while not store.run_ids("running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.run_ids("running"), "the first point never started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in out and "Traceback" not in err
    # Ctrl-C may arrive while later points are still being queued: every point that
    # reached the store is cancelled, none is left queued or running
    statuses = [store.status(r) for r in store.run_ids()]
    assert 1 <= len(statuses) <= 3 and set(statuses) == {"cancelled"}


def test_cli_bad_input_one_line(home):
    r = _cli("--dataset", "synth-tiny", "--layers", "1,x")
    assert r.returncode == 2 and "--layers" in r.stderr and "Traceback" not in r.stderr
    r = _cli("--dataset", "synth-tiny", "--batch-size", "512,-1")
    assert r.returncode == 2 and "--batch-size" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_real_tiny_sweep_summary_and_resume(home):
    env = {k: v for k, v in os.environ.items() if k not in ("GNNREC_LAB_TRAIN_FN",)}
    args = ["--dataset", "synth-tiny", "--dim", "8", "--epochs", "1", "--batch-size", "1024,2048", "--layers", "1",
            "--max-steps-per-epoch", "2", "--eval-users", "100", "--target-recall", "0.001", "--name", "t"]
    r = _cli(*args, env=env)
    assert r.returncode == 0, r.stderr
    assert "[1/2] run 1" in r.stdout and "[2/2] run 2" in r.stdout
    head = next(line for line in r.stdout.splitlines() if "steps/epoch" in line)
    for col in ("epoch s", "valid R@20", "test R@20", "to target s", "peak RSS MiB", "footprint MiB (modeled)"):
        assert col in head
    assert "sweep overhead per point" in r.stdout
    r2 = _cli(*args, "--json", env=env)
    assert r2.returncode == 0, r2.stderr
    d = json.loads(r2.stdout)
    assert [p["reused"] for p in d["points"]] == [True, True] and d["sweep"] == "t"
    assert [row["steps_per_epoch"] for row in d["summary"]] == [2, 2]
    assert all(row["epoch_s"] > 0 and row["valid_recall@20"] is not None for row in d["summary"])
    assert "not re-run" in r2.stderr
