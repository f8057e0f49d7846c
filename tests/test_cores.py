"""One machine of C cores (issue 20, item 2): ``gnnrec-lab run --cores C`` pins the training
process to the first C cores it may run on, runs C compute threads, records the cores it ran on
(read from the process after pinning) and gives the process its cores back afterwards."""
from __future__ import annotations

import json
import os
import threading

import pytest
from _cli import run_cli

from gnnrec_lab import RunConfig, run
from gnnrec_lab.runs.store import Store
from gnnrec_lab.training.reporting import Reporter
from gnnrec_lab.util.errors import ConfigError
from gnnrec_lab.util.pinning import allowed_cores, choose_cores, compute_threads, core_list_text, pinned

TINY = dict(dataset="synth-tiny", layers=1, dim=8, batch_size=1024, epochs=1, eval_users=50, patience=0)
needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity calls here")


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))


@needs_affinity
def test_run_with_cores_1_runs_on_one_core_and_records_it(capsys):
    """The run's stored info and its --json carry the affinity the training process had (one core,
    the first it may run on) and one torch and one numba thread; this process gets its cores back."""
    before = os.sched_getaffinity(0)
    args = ["run", *[f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()], "--cores", "1", "--json",
            "--no-progress"]
    rc, out, err = run_cli(args, capsys)
    assert rc == 0, err
    d = json.loads(out)
    host = d["info"]["host"]
    assert d["config"]["cores"] == 1
    assert host["affinity"] == [min(before)]
    assert host["torch_threads"] == 1 and host["numba_threads"] == 1
    stored = Store().get_run(d["run_id"])
    assert stored["info"]["host"]["affinity"] == [min(before)] and stored["config"]["cores"] == 1
    assert stored["host"]["affinity"] == [min(before)]        # the runs row's host: the pinned process
    assert os.sched_getaffinity(0) == before


@needs_affinity
def test_in_process_run_pins_every_thread_and_restores_them():
    """A thread started before the run (a notebook kernel's) is pinned with the rest while the run
    trains and has its own mask back afterwards."""
    seen, go, done = {}, threading.Event(), threading.Event()

    def other():
        seen["tid"] = threading.get_native_id()
        go.set()
        done.wait(60)
    t = threading.Thread(target=other, daemon=True)
    t.start()
    go.wait(10)
    before = os.sched_getaffinity(seen["tid"])

    class Peek(Reporter):
        def on_start(self, config, info):
            seen["during"] = os.sched_getaffinity(seen["tid"])
    r = run(RunConfig(**TINY, cores=1), reporter=Peek())
    done.set()
    assert r.info["host"]["affinity"] == [min(allowed_cores())]
    assert seen["during"] == {min(before)}
    assert os.sched_getaffinity(seen["tid"]) == before
    t.join(10)


@pytest.mark.parametrize("args, words", [
    (["--cores", "0"], "argument --cores: must be an integer from 1"),
    (["--cores", "two"], "argument --cores: must be an integer"),
    (["--cores", "1", "--threads", "2"], "cores: threads (2) must not exceed cores (1)"),
    (["--cores", str(len(allowed_cores()) + 1)], f"--cores {len(allowed_cores()) + 1}: this process may run on"),
])
def test_bad_cores_exit_2_with_one_line_naming_cores(capsys, args, words):
    rc, out, err = run_cli(["run", "--dataset", "synth-tiny", "--epochs", "1", *args], capsys)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and words in err, err
    assert not Store().run_ids(), "a refused run was stored"


def test_choose_cores_takes_the_first_allowed_and_refuses_more():
    have = allowed_cores()
    assert choose_cores(1) == have[:1] and choose_cores(len(have)) == have
    with pytest.raises(ConfigError) as e:
        choose_cores(len(have) + 1)
    assert e.value.param == "cores" and "--cores" in str(e.value)
    assert core_list_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_threads_follow_the_pinned_cores():
    assert compute_threads(RunConfig(cores=2)) == 2
    assert compute_threads(RunConfig(cores=2, threads=1)) == 1
    assert compute_threads(RunConfig()) is None
    with pinned(None) as cores:
        assert cores is None
