"""How a run ends when it blows up or is stopped (issue 23 classes 2 and 3).

* Divergence: a finite loss that leaves :class:`~gnnrec_lab.training.loop.DivergenceBound` (100x the first
  step's loss for 5 steps in a row, or not finite) ends the run ``diverged``, exit 4, with no test
  metrics, in every way a run is started (in process, the CLI with and without ``--json``, detached).
* Signals: SIGINT / SIGTERM sent at generated moments of a step (most of a step is numba kernels)
  end the run ``interrupted`` / ``cancelled`` between steps, never with a ``SystemError`` from a
  kernel, and the store names the signal.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnrec_lab import RunConfig, run
from gnnrec_lab.training.loop import DivergenceBound
from gnnrec_lab.training.reporting import Reporter

TINY = dict(dataset="synth-tiny", dim=16, layers=2, batch_size=512, lr=5e-3, patience=0)


# -- divergence -------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.01, max_value=10), st.lists(st.floats(min_value=0, max_value=1e15), max_size=60))
def test_divergence_bound_is_five_steps_past_100x_the_first_loss(first, losses):
    """Generated loss curves: the bound fires exactly at the 5th consecutive step above 100x the
    first loss, never before, and never for a curve that keeps coming back under it."""
    b = DivergenceBound()
    assert b.update(first) is None
    run_above, fired_at = 0, None
    for i, loss in enumerate(losses):
        run_above = run_above + 1 if loss > 100 * first else 0
        why = b.update(loss)
        if run_above >= 5:
            fired_at = i
            assert why and "100x" in why and "5 steps" in why
            break
        assert why is None, (first, losses[:i + 1])
    assert (fired_at is not None) == any(
        all(x > 100 * first for x in losses[j:j + 5]) and len(losses[j:j + 5]) == 5 for j in range(len(losses)))


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_loss_diverges_at_once(loss):
    b = DivergenceBound()
    assert b.update(0.69) is None
    assert "not finite" in b.update(loss)


@pytest.mark.parametrize("extra", [{}, {"model": "ngcf"}, {"mode": "sampled", "fanouts": (5, 5)}],
                         ids=["lightgcn", "ngcf", "sampled"])
def test_a_finite_blow_up_is_diverged_not_finished(extra):
    """The issue's case: lr 1e6 takes the loss from 0.693 to ~1e12 and stays finite."""
    r = run(RunConfig(**TINY | {"lr": 1e6, "epochs": 2, "max_steps_per_epoch": 10} | extra))
    assert r.status == "diverged" and r.test == {}, (r.status, r.info.get("diverged"))
    assert "100x the first step's loss" in r.info["diverged"] and "--lr" in r.info["diverged"]


def _cli(*args, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", *args], capture_output=True, text=True,
                          env=e, timeout=300, **kw)


@pytest.mark.slow
def test_cli_json_and_detached_runs_diverge_with_exit_4(tmp_path):
    env = {"GNNREC_LAB_HOME": str(tmp_path)}
    args = ["run", "--dataset", "synth-tiny", "--dim", "16", "--layers", "1", "--lr", "1e6", "--epochs", "2",
            "--max-steps-per-epoch", "10", "--batch-size", "512"]
    p = _cli(*args, "--json", env=env)
    assert p.returncode == 4, p.stderr
    out = json.loads(p.stdout)
    assert out["status"] == "diverged" and out["test"] == {} and "Traceback" not in p.stderr
    p = _cli(*args, "--detach", "--json", env=env)
    assert p.returncode == 0, p.stderr
    rid = json.loads(p.stdout)["run_id"]
    w = _cli("runs", "wait", str(rid), "--timeout", "240", env=env)
    assert w.returncode == 1 and f"run {rid}: diverged" in w.stdout, (w.stdout, w.stderr)
    from gnnrec_lab.runs.store import Store
    store = Store(tmp_path)
    assert [store.status(r) for r in store.run_ids()] == ["diverged", "diverged"]
    assert "100x" in store.get_run(rid)["error"]


# -- signals ----------------------------------------------------------------------------------
class _SignalMidStep(Reporter):
    """After step ``at``, sends ``signum`` to this process from another thread at a random moment
    within the next step (a step is mostly numba kernels: the signal lands inside one)."""

    def __init__(self, signum, at, seed):
        self.signum, self.at, self.rng = signum, at, random.Random(seed)
        self.step_s, self.sent_at_step = None, None

    def on_step(self, step, epoch, loss, seconds, records):
        if step == self.at:
            delay = self.rng.uniform(0, seconds)
            self.sent_at_step = step

            def send():
                time.sleep(delay)
                os.kill(os.getpid(), self.signum)
            threading.Thread(target=send, daemon=True).start()


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "cancelled")],
                         ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("extra", [{"dim": 128, "layers": 3}, {"mode": "sampled", "fanouts": (10, 10), "dim": 64}],
                         ids=["full", "sampled"])
@pytest.mark.parametrize("seed", range(2))
def test_signal_during_a_kernel_ends_the_run_between_steps(signum, status, extra, seed):
    """Generated moments (2 seeds x 2 signals x 2 modes): the run ends with the signal's status at
    the next step boundary, no exception escapes, and the handlers are put back."""
    before = signal.getsignal(signum)
    rep = _SignalMidStep(signum, at=2 + seed, seed=seed)
    r = run(RunConfig(**TINY | {"epochs": 50} | extra), reporter=rep)
    assert r.status == status, r.status
    assert r.info["stopped"].startswith(f"{status}: stopped by SIG") and "at step" in r.info["stopped"]
    # the signal's thread may be scheduled late on a busy machine: a few steps, never the 50 epochs
    assert rep.sent_at_step <= r.steps and r.epochs < 50 and r.test == {}
    assert signal.getsignal(signum) is before


def _start_foreground(tmp_path, *extra):
    env = dict(os.environ, GNNREC_LAB_HOME=str(tmp_path))
    return subprocess.Popen([sys.executable, "-m", "gnnrec_lab.commands.cli", "run", "--dataset", "synth-tiny",
                             "--dim", "128",
                             "--layers", "3", "--epochs", "1000", "--batch-size", "512", "--no-progress", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_steps(store, n=3, timeout=240):
    t = time.time() + timeout
    while time.time() < t:
        ids = store.run_ids()
        if ids and len(store.steps_frame(ids[-1])) >= n:
            return ids[-1]
        time.sleep(0.1)
    raise AssertionError("the run never reached its steps")


@pytest.mark.slow
@pytest.mark.parametrize("signum, rc, status, words", [
    (signal.SIGINT, 130, "interrupted", "SIGINT"), (signal.SIGTERM, 143, "cancelled", "SIGTERM")],
    ids=["ctrl-c", "sigterm"])
def test_foreground_run_stopped_by_a_signal_records_which(tmp_path, signum, rc, status, words):
    from gnnrec_lab.runs.store import Store
    p = _start_foreground(tmp_path)
    try:
        rid = _wait_steps(Store(tmp_path))
        p.send_signal(signum)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == rc, err
    assert "Traceback" not in err and "SystemError" not in err, err
    run_ = Store(tmp_path).get_run(rid)
    assert run_["status"] == status and words in run_["error"], run_["error"]


@pytest.mark.slow
def test_runs_cancel_with_a_short_grace_is_cancelled_not_failed(tmp_path):
    """A cancel whose SIGTERM arrives inside a kernel (grace 0.3 s, steps of ~0.1 s): cancelled."""
    env = {"GNNREC_LAB_HOME": str(tmp_path)}
    p = _cli("run", "--dataset", "synth-tiny", "--dim", "128", "--layers", "3", "--epochs", "1000",
             "--batch-size", "512", "--detach", "--json", env=env)
    assert p.returncode == 0, p.stderr
    rid = json.loads(p.stdout)["run_id"]
    from gnnrec_lab.runs.store import Store
    store = Store(tmp_path)
    _wait_steps(store)
    c = _cli("runs", "cancel", str(rid), "--grace", "0.3", env=env)
    assert c.returncode == 0 and f"run {rid}: cancelled" in c.stdout, (c.stdout, c.stderr)
    run_ = store.get_run(rid)
    assert run_["status"] == "cancelled" and "SystemError" not in (run_["error"] or "")
    assert "Traceback" not in (run_["stderr_tail"] or "")


def test_an_ignored_signal_stays_ignored():
    """nohup and background jobs ignore SIGINT on purpose: a run keeps it ignored."""
    from gnnrec_lab.util.signals import StopSignals
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopSignals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_child_of_the_suite_takes_sigint_as_a_terminal_would():
    """conftest.py takes back a SIGINT the suite inherited ignored: a child it starts gets Python's
    KeyboardInterrupt handler, so the Ctrl-C tests above interrupt it."""
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    out = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"],
                         capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == "default_int_handler", out


@pytest.mark.slow
def test_a_suite_started_with_sigint_ignored_still_interrupts_its_runs():
    """The suite started as a background job ('make test &': SIGINT ignored, inherited across exec)
    runs the test above and it passes."""
    test = f"{__file__}::test_a_child_of_the_suite_takes_sigint_as_a_terminal_would"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", test],
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
