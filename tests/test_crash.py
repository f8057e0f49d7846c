"""Crash consistency, the short version of benchmarks/bench_crash.py (the 200 kills): writers killed
with SIGKILL at random moments leave a sound store in which every run reads whole, none is left
running and no finished run is lost."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_crash", ROOT / "benchmarks" / "bench_crash.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing(tmp_path):
    bench = _bench()
    r = bench.crash_trials(8, writers=("run", "detach"), seed=7, fresh_every=4, workdir=tmp_path, log=print)
    assert not r["problems"], r["problems"]
    # the kills landed at different moments: the runs they left ended in more than one way
    assert len(r["outcomes"]) >= 2, r["outcomes"]
    print(r["outcomes"], r["hits"])
