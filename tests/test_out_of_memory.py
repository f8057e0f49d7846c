"""A run larger than a memory limit (issue 4, part 6): the worker runs in a cgroup v1 memory
cgroup; in ``dram`` mode the kernel kills it at the limit and the lab records status ``oom``
(not a crash), while the same run with its large classes file-backed on a disk directory
completes. Skips where no memory cgroup can be created (not root, no v1 memory controller)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.memory.footprint import footprint
from gnnrec_lab.runs.runner import Runner
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util import cgroup as cgroup_mod
from gnnrec_lab.util.cgroup import MemoryCgroup, memory_cgroup_root, memory_limit_of, parse_size
from gnnrec_lab.util.errors import UserError

TESTS = os.path.dirname(os.path.abspath(__file__))
MiB = 2**20


def cgroups_or_skip() -> Path:
    try:
        return memory_cgroup_root()
    except UserError as e:
        pytest.skip(f"no memory cgroup here: {e}")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return Store(tmp_path / "home")


def hog(config, *, reporter=None, progress=False):
    """Fake training function: touches 16 MiB blocks until something stops it."""
    blocks = []
    while len(blocks) < 4096:
        blocks.append(np.ones(16 * MiB, dtype=np.uint8))
    raise AssertionError("allocated 64 GiB without being stopped")


def test_parse_size_and_clear_errors(monkeypatch, tmp_path):
    assert parse_size("2G") == 2 * 2**30 and parse_size("512MiB") == 512 * MiB
    assert parse_size("1.5g") == 3 * 2**29 and parse_size(3 * MiB) == 3 * MiB
    for bad in ("lots", "2X", "-1G", "10"):
        with pytest.raises(UserError, match="memory limit"):
            parse_size(bad)
    mounts = tmp_path / "mounts"
    # a cgroup2 mount without the memory controller (here a directory that is no cgroupfs at all)
    mounts.write_text(f"cgroup2 {tmp_path} cgroup2 rw,nosuid 0 0\n")
    monkeypatch.setattr(cgroup_mod, "CGROUP_MOUNTS", mounts)
    with pytest.raises(UserError, match="cgroup v2 is mounted at .*, but its memory controller is not available"):
        memory_cgroup_root()
    mounts.write_text("proc /proc proc rw 0 0\n")
    with pytest.raises(UserError, match="no cgroup filesystem"):
        Runner(Store(tmp_path / "h"), pick_up=False).launch(RunConfig(), memory_limit_bytes="1G")
    assert Store(tmp_path / "h").run_ids() == []          # refused before anything was recorded


def test_a_kill_by_the_limit_is_recorded_as_oom(store, monkeypatch):
    cgroups_or_skip()
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "test_out_of_memory:hog")
    r = Runner(store)
    rid = r.launch(RunConfig(name="hog"), memory_limit_bytes="160M")
    assert r.wait(rid, timeout=60) == "oom"
    run = store.get_run(rid)
    assert f"killed by the memory limit of {160 * MiB:,} bytes (cgroup" in run["error"]
    cg = memory_limit_of(store.run_dir(rid))["cgroup"]
    assert not Path(cg).exists()                          # removed after the run
    ev = store.events_frame(rid)
    assert "reached the limit" in ev[ev.kind == "memory_limit"].message.iloc[0]


def test_a_run_within_its_limit_finishes(store, monkeypatch):
    cgroups_or_skip()
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "_fake_train:finish")
    r = Runner(store)
    rid = r.launch(RunConfig(name="ok"), memory_limit_bytes="1G")
    assert r.wait(rid, timeout=60) == "finished"
    assert store.get_run(rid)["error"] is None


# A real training run: MF keeps the most of its bytes in the classes that can be file-backed
# (embedding table + Adam moments are 3 of its ~7 N*d tensors), so the gap between the two peaks
# is wide, and it has no propagation: a few seconds on two cores.
REAL = dict(dataset="synth-small", model="mf", layers=0, dim=4096, epochs=1, max_steps_per_epoch=2,
            eval_users=200, patience=0, threads=2)
FILE_CLASSES = ("embeddings", "optimizer", "graph")


@pytest.mark.slow
def test_real_run_over_the_limit_ooms_in_dram_and_completes_file_backed(store, tmp_path, monkeypatch):
    cgroups_or_skip()
    monkeypatch.delenv("GNNREC_LAB_TRAIN_FN", raising=False)  # the real training function
    r = Runner(store)
    # 1. the DRAM run's peak charge (measured by its cgroup) under a limit it never reaches
    probe = r.launch(RunConfig(name="probe", **REAL), memory_limit_bytes="16G")
    assert r.wait(probe, timeout=120) == "finished", store.get_run(probe)["error"]
    r.close()
    peak = memory_limit_of(store.run_dir(probe))["max_usage_bytes"]
    # 2. a limit below that peak by half of what file-backing moves out of anonymous memory
    fp = footprint(RunConfig(**REAL), runtime_bytes=0)
    moved = sum(fp[c] for c in FILE_CLASSES)
    assert moved > 300 * MiB                      # the gap is wide enough to be unambiguous
    limit = peak - moved // 2
    r = Runner(store)
    dram = r.launch(RunConfig(name="dram", **REAL), memory_limit_bytes=limit)
    assert r.wait(dram, timeout=120) == "oom", store.get_run(dram)["error"]
    assert "killed by the memory limit" in store.get_run(dram)["error"]
    # 3. file-backed on the real disk (tmp_path is there): tmpfs pages would be charged as
    # shmem and never reclaimed; page-cache pages of a disk file are written back and dropped
    fdir = tmp_path / "tier"
    fdir.mkdir()
    placed = RunConfig(name="file", placement={c: f"file:{fdir}" for c in FILE_CLASSES}, **REAL)
    filed = r.launch(placed, memory_limit_bytes=limit)
    assert r.wait(filed, timeout=120) == "finished", store.get_run(filed)["error"]
    r.close()


def test_cli_detached_run_with_a_memory_limit(store, monkeypatch, capsys):
    from gnnrec_lab.commands import cli
    assert cli.main(["run", "--memory-limit", "2X", "--detach", "--dataset", "synth-tiny"]) == 2
    assert "--memory-limit: expected a size like 2G" in capsys.readouterr().err
    assert cli.main(["run", "--memory-limit", "2G", "--dataset", "synth-tiny"]) == 2
    assert "--memory-limit needs --detach" in capsys.readouterr().err
    cgroups_or_skip()
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "test_out_of_memory:hog")
    assert cli.main(["run", "--detach", "--json", "--memory-limit", "160M", "--dataset", "synth-tiny"]) == 0
    rid = json.loads(capsys.readouterr().out)["run_id"]
    end = time.monotonic() + 60
    while store.status(rid) not in ("finished", "failed", "cancelled", "oom"):
        assert time.monotonic() < end, "detached run did not end"
        time.sleep(0.1)
    assert store.status(rid) == "oom" and "memory limit of" in store.get_run(rid)["error"]


def test_empty_parent_cgroup_is_removed():
    """After a limited run's cgroup is removed, the lab's parent cgroup directory goes too
    (unless another run's cgroup is still in it)."""
    root = cgroups_or_skip()
    cg = MemoryCgroup.create(f"run-test-{os.getpid()}", 64 * MiB)
    assert cg.path.parent == root and root.is_dir()
    assert cg.remove()
    assert not cg.path.exists()
    assert not root.exists() or any(p.is_dir() for p in root.iterdir())   # others' runs keep it
