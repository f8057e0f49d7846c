"""Stand-ins for ``gnnrec_lab.training.loop.train`` used by the runner/worker tests.

The worker imports one of these through ``GNNREC_LAB_TRAIN_FN=_fake_train:NAME``
(tests put this directory on PYTHONPATH). Behaviour knobs come from the
environment so one function serves several tests:
``FAKE_STEPS`` (steps to report, default 5), ``FAKE_SLEEP`` (seconds per step).
"""
from __future__ import annotations

import os
import resource
import signal
import sys
import time

from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.recorder import KernelRecord


class FakeResult:
    def __init__(self, status, steps):
        self.status = status
        self.steps = steps

    def to_dict(self):
        return {"status": self.status, "metrics": {"steps": self.steps},
                "footprint": {"predicted": {"embeddings": 4096}, "measured": {"embeddings": 4100}}}


def _records(step):
    return [KernelRecord("spmm", "forward", layer, step, 1000 + layer, 800, 400, 100, "gather", 256, 600, "native")
            for layer in range(3)] + [KernelRecord("adam", "optimizer", -1, step, 500, 64, 64, 10, "stream", 0, 0,
                                                   "native")]


def finish(config, *, reporter=None, progress=False):
    """Reports FAKE_STEPS steps (checking should_stop each one), two evals, and finishes."""
    steps = int(os.environ.get("FAKE_STEPS", "5"))
    pause = float(os.environ.get("FAKE_SLEEP", "0"))
    reporter.on_start(config, {"host": {"hostname": "fake"}, "footprint": {"graph": 1000, "embeddings": 4096}})
    for step in range(steps):
        if reporter.should_stop():
            reporter.on_event("cancelled", f"stopped at step {step}")
            res = FakeResult("cancelled", step)
            reporter.on_finish(res)
            return res
        reporter.on_step(step, 0, 1.0 / (step + 1), 0.001, _records(step))
        time.sleep(pause)
    reporter.on_epoch(0, 0.01, steps, 0.5)
    reporter.on_eval(0, steps, "valid", {"recall@20": 0.125, "ndcg@20": 0.07}, 0.02)
    reporter.on_eval(0, steps, "test", {"recall@20": 0.11}, 0.03)
    res = FakeResult("finished", steps)
    reporter.on_finish(res)
    return res


def crash(config, *, reporter=None, progress=False):
    for i in range(80):
        print(f"noise line {i}", file=sys.stderr)
    raise RuntimeError("fake training blew up")


def user_mistake(config, *, reporter=None, progress=False):
    raise UserError("dataset: fake.csv line 3: expected 'user item', got 'x'")


def memory_error(config, *, reporter=None, progress=False):
    raise MemoryError("fake allocation of 1 TiB failed")


def rlimit_oom(config, *, reporter=None, progress=False):
    """Caps its own address space 256 MiB above current use, then asks for 2 GiB."""
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * resource.getpagesize()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes + (256 << 20), hard))
    blob = bytearray(2 << 30)  # MemoryError under the cap
    return FakeResult("finished", len(blob))


def sigkill_self(config, *, reporter=None, progress=False):
    """Dies the way the OOM killer kills: SIGKILL, no chance to record anything."""
    reporter.on_step(0, 0, 1.0, 0.001, [])
    os.kill(os.getpid(), signal.SIGKILL)


def stubborn(config, *, reporter=None, progress=False):
    """Never checks should_stop: only SIGTERM ends it."""
    reporter.on_step(0, 0, 1.0, 0.001, [])
    while True:
        time.sleep(0.05)


def deaf(config, *, reporter=None, progress=False):
    """Ignores should_stop and SIGTERM: only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    reporter.on_step(0, 0, 1.0, 0.001, [])
    while True:
        time.sleep(0.05)


class _DivergedResult(FakeResult):
    def __init__(self, steps):
        super().__init__("diverged", steps)
        self.info = {"diverged": "training diverged: loss nan at step 2 (epoch 1); no test metrics. Lower --lr"}


def diverge(config, *, reporter=None, progress=False):
    """Reports a finite loss, then nan, and ends diverged (as train() does)."""
    reporter.on_start(config, {"host": {"hostname": "fake"}})
    reporter.on_step(0, 1, 0.69, 0.001, _records(0))
    reporter.on_step(1, 1, float("nan"), 0.001, _records(1))
    res = _DivergedResult(2)
    reporter.on_event("diverged", res.info["diverged"])
    reporter.on_finish(res)
    return res


def with_options(config, *, reporter=None, progress=False, **options):
    """A run's request's options as keyword arguments (Runner.launch's ``options``); returns a
    result dict, as a DistDGL run does (its status and info the options ``status`` and ``info``)."""
    return {"status": options.get("status", "finished"), "info": options.get("info", {}), "options": options,
            "python": sys.executable}
