"""Runner and worker: lifecycle with fake training functions, cancellation, OOM, recovery, numactl, CLI."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gnnrec_lab.commands import cli
from gnnrec_lab.config.places import parse_nodes
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.memory.placement import numa_request, numactl_argv
from gnnrec_lab.runs.runner import Runner, launch_detached
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "_fake_train:finish")
    monkeypatch.delenv("FAKE_STEPS", raising=False)
    monkeypatch.delenv("FAKE_SLEEP", raising=False)
    return Store(tmp_path)


def fake(monkeypatch, name, **env):
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", f"_fake_train:{name}")
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))


def wait_for(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


# -- lifecycle ----------------------------------------------------------------
def test_finished_run(store):
    runner = Runner(store)
    t0 = time.monotonic()
    rid = runner.launch(RunConfig(name="ok"))
    assert time.monotonic() - t0 < 2.0  # launch returns at once
    assert runner.wait(rid, timeout=30) == "finished"
    run = store.get_run(rid)
    assert run["pid"] and run["host"]["hostname"] and run["error"] is None
    assert run["result"]["metrics"] == {"steps": 5}
    assert len(store.steps_frame(rid)) == 5 and len(store.kernels_frame(rid)) == 20  # 3 spmm layers + adam per step
    assert set(store.footprint_frame(rid).kind) == {Provenance.MODELED, Provenance.MEASURED}
    assert (store.home / "runs" / str(rid) / "stderr.log").exists()
    assert (store.home / "runs" / str(rid) / "stdout.log").exists()


def test_worker_records_the_result_once(store, monkeypatch):
    """The store reporter's on_finish writes the result; the worker must not write it again."""
    from gnnrec_lab.runs import worker
    calls = []
    real = Store.record_result
    monkeypatch.setattr(Store, "record_result", lambda self, *a: (calls.append(a[0]), real(self, *a))[1])
    monkeypatch.setattr(worker.signal, "signal", lambda *a: None)   # in-process: leave pytest's handlers
    sys.path.insert(0, TESTS)
    try:
        rid = store.add_run(RunConfig(name="once"))
        assert worker.run_worker(rid, store) == worker.EXIT_OK
    finally:
        sys.path.remove(TESTS)
    assert calls == [rid] and store.status(rid) == "finished"


def test_a_runs_request_names_its_training_function_options_and_interpreter(store, tmp_path):
    """Runner.launch(train_fn=, options=, python=): the worker runs in that interpreter and trains
    with that callable (over GNNREC_LAB_TRAIN_FN), the options as keyword arguments; a result dict
    says how the run ended as a RunResult does."""
    runner = Runner(store)
    python = tmp_path / "python"                 # another interpreter: this one under another name
    python.symlink_to(sys.executable)
    rid = runner.launch(RunConfig(name="req"), train_fn="_fake_train:with_options", options={"partitions": 3},
                        python=str(python))
    assert runner.wait(rid, timeout=30) == "finished"
    res = store.get_run(rid)["result"]
    assert res["options"] == {"partitions": 3} and res["python"] == str(python)
    rid = runner.launch(RunConfig(name="req"), train_fn="_fake_train:with_options",
                        options={"status": "diverged", "info": {"diverged": "loss is nan at step 2"}})
    assert runner.wait(rid, timeout=30) == "diverged"
    assert store.get_run(rid)["error"] == "loss is nan at step 2"
    n = len(store.run_ids())
    for kw, field in [(dict(options=["partitions", 3]), "options"), (dict(options={"f": object()}), "options"),
                      (dict(train_fn=" "), "train_fn"), (dict(python=""), "python")]:
        with pytest.raises(ConfigError) as e:
            runner.launch(RunConfig(name="bad"), **kw)
        assert e.value.param == field
    assert len(store.run_ids()) == n             # refused before anything was recorded
    # the request is part of the queued row (not a file written after it): a runner sharing the
    # store that claims the run at once trains it as asked
    queued = store.add_run(RunConfig(name="req"), request={"train_fn": "_fake_train:with_options",
                                                           "options": {"partitions": 5}})
    assert store.run_request(queued)["options"] == {"partitions": 5} and store.run_request(rid) != {}
    other = Runner(store)
    other.schedule()
    assert other.wait(queued, timeout=30) == "finished"
    assert store.get_run(queued)["result"]["options"] == {"partitions": 5}


def test_diverged_run_is_its_own_terminal_status(store, monkeypatch):
    fake(monkeypatch, "diverge")
    runner = Runner(store)
    rid = runner.launch(RunConfig(name="nan"))
    assert runner.wait(rid, timeout=30) == "diverged"
    run = store.get_run(rid)
    assert "diverged" in run["error"] and run["finished"] is not None
    assert "diverged" in set(store.events_frame(rid).kind)


def test_failed_run_keeps_stderr_tail(store, monkeypatch):
    fake(monkeypatch, "crash")
    runner = Runner(store)
    rid = runner.launch(RunConfig())
    assert runner.wait(rid, timeout=30) == "failed"
    run = store.get_run(rid)
    assert "RuntimeError: fake training blew up" in run["error"] and "Traceback" in run["error"]
    tail = run["stderr_tail"].splitlines()
    assert len(tail) <= 50
    assert "noise line 79" in run["stderr_tail"] and "noise line 0\n" not in run["stderr_tail"]


def test_user_error_is_one_line(store, monkeypatch):
    fake(monkeypatch, "user_mistake")
    runner = Runner(store)
    rid = runner.launch(RunConfig())
    assert runner.wait(rid, timeout=30) == "failed"
    assert store.get_run(rid)["error"] == "dataset: fake.csv line 3: expected 'user item', got 'x'"


@pytest.mark.parametrize("fn, needle", [
    ("memory_error", "MemoryError: fake allocation"),
    ("rlimit_oom", "MemoryError"),
])
def test_out_of_memory_is_classified(store, monkeypatch, fn, needle):
    if fn == "rlimit_oom" and not os.path.exists("/proc/self/statm"):
        pytest.skip("needs /proc to size the address-space cap")
    fake(monkeypatch, fn)
    runner = Runner(store)
    rid = runner.launch(RunConfig())
    assert runner.wait(rid, timeout=30) == "oom"
    err = store.get_run(rid)["error"]
    assert needle in err and "memory" in err


def test_sigkill_without_oom_evidence_is_killed_not_oom(store, monkeypatch):
    """A `kill -9` from outside is not an out-of-memory kill: no cgroup or kernel-log evidence."""
    fake(monkeypatch, "sigkill_self")
    runner = Runner(store)
    rid = runner.launch(RunConfig())
    assert runner.wait(rid, timeout=30) == "failed"
    assert store.get_run(rid)["error"].startswith("killed (SIGKILL)")


def test_kernel_log_names_an_oom_kill(tmp_path):
    from gnnrec_lab.runs.runner import kernel_oom_kill
    log = tmp_path / "kmsg"
    log.write_text("6,1,2,-;eth0: link up\n"
                   "3,2,3,-;Out of memory: Killed process 4242 (python) total-vm:9000kB, anon-rss:800kB\n")
    assert "Killed process 4242" in kernel_oom_kill(4242, kmsg=str(log))
    assert kernel_oom_kill(424, kmsg=str(log)) is None            # a prefix of the pid is another process
    assert kernel_oom_kill(4242, kmsg=str(tmp_path / "none")) is None


def test_cancel_cooperative(store, monkeypatch):
    fake(monkeypatch, "finish", FAKE_STEPS=100000, FAKE_SLEEP=0.01)
    runner = Runner(store)
    rid = runner.launch(RunConfig())
    wait_for(lambda: len(store.steps_frame(rid)) >= 3)
    t0 = time.monotonic()
    assert runner.cancel(rid, grace_s=10) == "cancelled"
    assert time.monotonic() - t0 < 5  # stopped by the flag, not by the 10 s escalation
    run = store.get_run(rid)
    assert run["result"]["status"] == "cancelled"
    assert "cancelled" in list(store.events_frame(rid).kind)  # the loop itself saw the flag


@pytest.mark.parametrize("fn, needle", [("stubborn", "SIGTERM"), ("deaf", "SIGKILL")])
def test_cancel_escalates(store, monkeypatch, fn, needle):
    fake(monkeypatch, fn)
    runner = Runner(store)
    rid = runner.launch(RunConfig())
    wait_for(lambda: len(store.steps_frame(rid)) >= 1)
    assert runner.cancel(rid, grace_s=0.5) == "cancelled"
    run = store.get_run(rid)
    assert needle in run["error"]
    assert run["result"] is None


def test_concurrency_limit_queues_second_run(store, monkeypatch):
    fake(monkeypatch, "finish", FAKE_STEPS=20, FAKE_SLEEP=0.03)
    runner = Runner(store, max_concurrent=1)
    a = runner.launch(RunConfig(name="a"))
    b = runner.launch(RunConfig(name="b"))
    assert store.status(a) == "running" and store.status(b) == "queued"
    # the monitor thread starts b when a ends, without anyone calling status/wait on b
    wait_for(lambda: store.status(b) in ("running", "finished"), timeout=30)
    assert store.get_run(a)["status"] == "finished"
    assert runner.wait(b, timeout=30) == "finished"
    ra, rb = store.get_run(a), store.get_run(b)
    assert rb["started"] >= ra["finished"]


def test_cancel_queued_run(store, monkeypatch):
    fake(monkeypatch, "finish", FAKE_STEPS=100000, FAKE_SLEEP=0.01)
    runner = Runner(store, max_concurrent=1)
    a = runner.launch(RunConfig())
    b = runner.launch(RunConfig())
    assert runner.cancel(b) == "cancelled"
    assert store.get_run(b)["pid"] is None
    assert runner.cancel(a, grace_s=5) == "cancelled"


def test_fresh_runner_picks_up_queued_and_recovers_dead(store):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = store.add_run(RunConfig(name="gone"))
    store.claim_queued(10)
    store.set_fields(gone, pid=dead.pid)
    alive = store.add_run(RunConfig(name="alive"))
    store.claim_queued(10)
    store.set_fields(alive, pid=os.getpid())  # this test process: alive
    queued = store.add_run(RunConfig(name="queued"))

    runner = Runner(store, max_concurrent=2)
    run = store.get_run(gone)
    assert run["status"] == "failed" and "disappeared" in run["error"]
    assert store.status(alive) == "running"
    store.set_status(alive, "finished")  # frees the slot held by "alive"
    assert runner.wait(queued, timeout=30) == "finished"


def test_numa_launch_refused_before_recording(store):
    nodes = sorted(int(p[4:]) for p in os.listdir("/sys/devices/system/node") if p[4:].isdigit()) \
        if os.path.isdir("/sys/devices/system/node") else []
    cfg = RunConfig(placement={"embeddings": f"numa:membind:{max(nodes, default=0) + 7}"})
    with pytest.raises(UserError, match="placement"):
        Runner(store).launch(cfg)
    assert store.run_ids() == []


def test_launch_detached(store):
    rid = launch_detached(RunConfig(name="bg"), store=store)
    # a runner that starts nothing itself: the detached supervisor must run it
    assert Runner(store, pick_up=False).wait(rid, timeout=30) == "finished"


# -- numactl argv (pure) ----------------------------------------------------------
def test_parse_nodes():
    assert parse_nodes("0") == [0]
    assert parse_nodes("1,0,1") == [0, 1]
    assert parse_nodes("0-2,5") == [0, 1, 2, 5]
    for bad in ("", "a", "2-1", "-1"):
        with pytest.raises(UserError, match="placement"):
            parse_nodes(bad)


def test_numactl_argv():
    assert numactl_argv({}, [0]) == []
    assert numactl_argv({"graph": "dram", "embeddings": "file:/mnt/pmem"}, [0]) == []
    assert numactl_argv({"embeddings": "numa:membind:1"}, [0, 1], "/usr/bin/numactl") == \
        ["/usr/bin/numactl", "--membind=1"]
    assert numactl_argv({"embeddings": "numa:interleave:0,1", "optimizer": "numa:interleave:1,0",
                         "graph": "dram"}, [0, 1]) == ["numactl", "--interleave=0,1"]
    assert numactl_argv({"embeddings": "numa:preferred:2"}, [0, 1, 2], memory_nodes=[0, 2]) == \
        ["numactl", "--preferred=2"]
    assert numa_request({"embeddings": "numa:membind:0-1"}) == ("membind", [0, 1])


@pytest.mark.parametrize("placement, nodes, numactl, mem, msg", [
    ({"embeddings": "numa:membind:3"}, [0, 1], "numactl", None, "node 3 does not exist"),
    ({"embeddings": "numa:membind:1"}, [0, 1], None, None, "numactl is not installed"),
    ({"embeddings": "numa:membind:1"}, [0, 1], "numactl", [0], "node 1 has no memory"),
    ({"embeddings": "numa:preferred:0,1"}, [0, 1], "numactl", None, "exactly one node"),
    ({"embeddings": "numa:membind:0", "graph": "numa:interleave:0,1"}, [0, 1], "numactl", None,
     "different"),
    ({"embeddings": "numa:bind:0"}, [0], "numactl", None, "POLICY"),
    ({"embeddings": "numa:membind"}, [0], "numactl", None, "POLICY"),
])
def test_numactl_argv_refusals(placement, nodes, numactl, mem, msg):
    with pytest.raises(UserError, match=msg):
        numactl_argv(placement, nodes, numactl, mem)


# -- CLI --------------------------------------------------------------------
def test_cli_runs(store, monkeypatch, capsys):
    runner = Runner(store)
    rid = runner.launch(RunConfig(name="clirun", layers=2))
    runner.wait(rid, timeout=30)
    modeled = store.add_run(RunConfig(memory_mode="cxl"))
    store.request_cancel(modeled)

    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "clirun" in out and "0.1100" in out and "modeled" in out and "measured" in out
    assert "damaged" not in out, out          # a queued run has no info yet: not a damaged one
    assert cli.main(["runs", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "best valid R@20" in out and "clirun" in out and "0.1250" in out and "0.1100" in out
    assert "modeled" in out and "measured" in out and "damaged" not in out

    assert cli.main(["runs", "--json", "--status", "finished"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [rid] and rows[0]["test_recall@20"] == pytest.approx(0.11)

    assert cli.main(["runs", "show", str(rid)]) == 0
    out = capsys.readouterr().out
    assert "finished" in out and "recall@20" in out and "predicted" in out

    assert cli.main(["runs", "wait", str(rid)]) == 0
    assert f"run {rid}: finished" in capsys.readouterr().out
    assert cli.main(["runs", "wait", str(modeled)]) == 1
    assert cli.main(["runs", "cancel", str(rid)]) == 0
    assert store.status(rid) == "finished"  # an ended run stays as it ended

    assert cli.main(["runs", "show", "999"]) == 2
    assert "no such run" in capsys.readouterr().err


def test_cli_cancels_run_of_another_process(store, monkeypatch, capsys):
    fake(monkeypatch, "deaf")  # ignores the flag and SIGTERM: exercises the whole escalation
    rid = launch_detached(RunConfig(), store=store)  # its worker belongs to the supervisor process
    wait_for(lambda: len(store.steps_frame(rid)) >= 1)
    assert cli.main(["runs", "cancel", str(rid), "--grace", "0.3"]) == 0
    assert f"run {rid}: cancelled" in capsys.readouterr().out
    run = store.get_run(rid)
    assert run["status"] == "cancelled" and run["cancel_requested"]
    from gnnrec_lab.util.proc import pid_alive
    assert not pid_alive(run["pid"], run["pid_start"])


# -- following a run in the foreground (gnnrec-lab distributed) --------------------------------
FOLLOW = """
import json, signal, sys
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.runs.runner import Runner
runner = Runner(poll_s=0.05)
rid = runner.launch(RunConfig(name="followed"))
print(rid, flush=True)
status, signum = runner.follow(rid, progress=lambda m: print("progress:", m, file=sys.stderr, flush=True),
                               grace_s=float(sys.argv[1]))
print(json.dumps({"status": str(status), "signum": signum,
                  "handlers_back": signal.getsignal(signal.SIGINT) is signal.default_int_handler
                  and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL}), flush=True)
"""


@pytest.mark.parametrize("fn", ["finish", "stubborn"], ids=["at-a-step", "by-sigterm"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_follower_cancels_the_run_and_leaves_no_worker(store, monkeypatch, sig, fn):
    """Ctrl-C or SIGTERM of a process following a run (Runner.follow) cancels it through the runner:
    an event names the signal, the run ends cancelled (at a step where the training checks the flag,
    else by the SIGTERM that follows), its worker is gone, follow returns the signal and puts the
    handlers back."""
    fake(monkeypatch, fn, FAKE_STEPS=100000, FAKE_SLEEP=0.01)
    p = subprocess.Popen([sys.executable, "-c", FOLLOW, "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        rid = int(p.stdout.readline())
        wait_for(lambda: len(store.steps_frame(rid)) >= 1)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert json.loads(out) == {"status": "cancelled", "signum": sig, "handlers_back": True}
    run = store.get_run(rid)
    assert run["status"] == "cancelled" and run["cancel_requested"]
    assert ("SIGTERM" in (run["error"] or "")) == (fn == "stubborn"), run["error"]   # the flag, else the escalation
    words = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}[sig]
    assert ("cancel", f"cancel requested: the command following the run got {words}") in \
        [(k, m) for _, k, m in store.events_after(rid)]
    assert f"run {rid}: {words}, cancelling the run" in err
    from gnnrec_lab.util.proc import pid_alive
    assert not pid_alive(run["pid"], run["pid_start"])


def test_follow_says_a_run_is_queued_shows_its_events_and_returns_its_status(store, monkeypatch):
    fake(monkeypatch, "finish", FAKE_STEPS=20, FAKE_SLEEP=0.02)
    runner = Runner(store, max_concurrent=1)
    a = runner.launch(RunConfig(name="a"))
    b = runner.launch(RunConfig(name="b"))
    store.add_event(b, "note", "an event of b")
    before = signal.getsignal(signal.SIGTERM)
    lines = []
    assert runner.follow(b, progress=lines.append) == (RunStatus.FINISHED, None)
    assert lines[0] == "an event of b"
    assert lines[1] == f"run {b} is queued: it starts when fewer than 1 runs of this store are running (running " \
                       f"now: {a})"
    assert store.status(a) == "finished" and signal.getsignal(signal.SIGTERM) is before
    assert [n for n, _, _ in store.events_after(b)] == [n for n, _, _ in store.events_after(b, 0)]
    assert store.events_after(b, store.events_after(b)[-1][0]) == []


@pytest.mark.slow
def test_real_training_through_worker(store, monkeypatch):
    """The real train() honours the reporter contract the store relies on (one tiny epoch)."""
    monkeypatch.delenv("GNNREC_LAB_TRAIN_FN")
    runner = Runner(store)
    rid = runner.launch(RunConfig(dataset="synth-tiny", dim=8, layers=1, batch_size=512, epochs=1,
                                  max_steps_per_epoch=2, patience=0, eval_users=50))
    status = runner.wait(rid, timeout=120)
    run = store.get_run(rid)
    assert status == "finished", (run["error"], run["stderr_tail"])
    assert len(store.steps_frame(rid)) == 2
    assert {"spmm", "bpr_loss"} <= set(store.kernels_frame(rid).name)
    ev = store.evals_frame(rid)
    assert {"valid", "test"} <= set(ev.split) and "recall@20" in set(ev.metric)
    assert set(store.footprint_frame(rid).kind) == {Provenance.MODELED, Provenance.MEASURED}
    row = store.runs_frame().iloc[0]
    assert row["test_recall@20"] == pytest.approx(ev[(ev.split == "test") & (ev.metric == "recall@20")].value.iloc[-1])


def test_a_detached_run_that_fills_its_home_says_so_and_keeps_its_steps(tmpfs, monkeypatch):
    """A 2 MB GNNREC_LAB_HOME fills while the worker writes steps: the run ends failed with "no space
    left on HOME (N bytes free)", recorded by the worker itself (the store's space reserve takes its
    last write; its stderr.log cannot), the steps written before are kept and the store is sound."""
    home = tmpfs("2m") / "h"
    monkeypatch.setenv("GNNREC_LAB_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    fake(monkeypatch, "finish", FAKE_STEPS=10**7)
    store = Store(home)
    rid = launch_detached(RunConfig(name="fills"), store=store)
    wait_for(lambda: store.status(rid).is_terminal, timeout=120)
    run = store.get_run(rid)
    assert run["status"] == "failed", run
    assert f"no space left on {home} (" in run["error"] and "bytes free)" in run["error"], run["error"]
    assert "worker ended by" not in run["error"], run["error"]   # the worker's own words, not the runner's guess
    steps = store.steps_frame(rid)
    assert len(steps) > 10 and list(steps.step) == list(range(len(steps)))   # every step up to the full disk
    assert store.integrity_check() == "ok"


def test_a_worker_gone_on_a_full_home_is_named_by_the_runner(store, monkeypatch):
    """A worker that could not record its own end on a full disk: the runner's verdict names the disk."""
    import gnnrec_lab.runs.runner as runner_mod
    runner = Runner(store, pick_up=False)
    rid = store.add_run(RunConfig(name="x"), status="running")
    runner._finalize(rid, 1)
    assert store.get_run(rid)["error"] == "worker ended by exit status 1"   # room on the disk: no guess
    rid = store.add_run(RunConfig(name="y"), status="running")
    monkeypatch.setattr(runner_mod, "FULL_DISK_BYTES", 1 << 62)   # every disk reads as full
    runner._finalize(rid, 1)
    err = store.get_run(rid)["error"]
    assert err.startswith(f"worker ended by exit status 1: the disk is full, no space left on {store.home} (")
    assert "bytes free" in err
