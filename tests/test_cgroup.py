"""Memory cgroups v1 and v2: which one is used, and v2's files (memory.max, memory.events).

This machine mounts cgroup v1 with the memory controller, plus the unified hierarchy (cgroup2)
at /sys/fs/cgroup/unified with no memory controller in it. The v2 code paths run against a
fake cgroupfs directory (regular files laid out as the kernel does) and, for detection and the
refusal, against the real unified mount.
"""
from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest

from gnnrec_lab.util import cgroup as cg_mod
from gnnrec_lab.util.cgroup import MemoryCgroup, cgroup_usable, cgroup_version, memory_cgroup_root, oom_verdict
from gnnrec_lab.util.errors import UserError

MiB = 2 ** 20
UNIFIED = Path("/sys/fs/cgroup/unified")


def _real_mounts() -> str:
    return Path("/proc/self/mounts").read_text()


@pytest.fixture
def fake_v2(tmp_path, monkeypatch):
    """A cgroup2-only machine whose cgroup (``/lab.slice``) offers and delegates memory."""
    mount = tmp_path / "cgroupfs"
    base = mount / "lab.slice"
    (base / "gnnrec-lab").mkdir(parents=True)
    (mount / "cgroup.procs").write_text("")
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.procs").write_text("1\n")
    (base / "cgroup.controllers").write_text("cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text("memory\n")
    (base / "gnnrec-lab" / "cgroup.procs").write_text("")   # the kernel makes it with the directory
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\ncgroup2 {mount} cgroup2 rw,nosuid,nodev 0 0\n")
    own = tmp_path / "self-cgroup"
    own.write_text("0::/lab.slice\n")
    monkeypatch.setattr(cg_mod, "CGROUP_MOUNTS", mounts)
    monkeypatch.setattr(cg_mod, "CGROUP_SELF", own)
    return base


def test_this_machine_uses_v1_and_sees_the_unified_mount():
    v1, v2 = cg_mod._mounts()
    if v1 is None:
        pytest.skip("no cgroup v1 memory controller here")
    assert cgroup_version() == 1
    if " cgroup2 " in _real_mounts():
        assert v2 is not None and (v2 / "cgroup.controllers").exists()


def test_real_unified_mount_without_memory_is_refused_naming_why(tmp_path, monkeypatch):
    if not (UNIFIED / "cgroup.controllers").exists():
        pytest.skip("no unified hierarchy mounted at /sys/fs/cgroup/unified")
    have = (UNIFIED / "cgroup.controllers").read_text().split()
    if "memory" in have:
        pytest.skip("the unified hierarchy here has the memory controller")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {UNIFIED} cgroup2 rw,nosuid 0 0\n")
    monkeypatch.setattr(cg_mod, "CGROUP_MOUNTS", mounts)
    assert cgroup_version() == 2
    with pytest.raises(UserError) as e:
        memory_cgroup_root()
    msg = str(e.value)
    assert f"cgroup v2 is mounted at {UNIFIED}" in msg and "memory controller is not available" in msg
    assert f"cgroup.controllers: {' '.join(have) or 'none'}" in msg
    assert cgroup_usable() == msg                    # what the dashboard prints at start
    assert not (UNIFIED / "gnnrec-lab").exists()


def test_v2_limit_through_memory_max_and_join(fake_v2):
    root = memory_cgroup_root()
    assert root == fake_v2 / "gnnrec-lab"
    cg = MemoryCgroup.create("run-1-abcd", 64 * MiB)
    assert cg.version == 2 and cg.path == root / "run-1-abcd"
    assert (cg.path / "memory.max").read_text() == str(64 * MiB) and cg.limit_bytes == 64 * MiB
    assert not (cg.path / "memory.limit_in_bytes").exists()
    r = subprocess.run(cg.wrap(["/bin/sh", "-c", "echo joined"]), capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stdout.strip() == "joined"
    assert (cg.path / "cgroup.procs").read_text().strip().isdigit()   # the child wrote its pid first
    # the verdict from memory.events; peak from memory.peak
    rec = {"cgroup": str(cg.path), "limit_bytes": cg.limit_bytes, "cgroup_version": 2}
    (cg.path / "memory.events").write_text("low 0\nhigh 0\nmax 17\noom 1\noom_kill 0\n")
    (cg.path / "memory.peak").write_text(f"{64 * MiB}\n")
    assert oom_verdict(rec, -9) is None and cg.oom_kills() == 0
    assert cg.usage() == {"max_usage_bytes": 64 * MiB, "failcnt": 17, "limit_bytes": 64 * MiB, "kind": "measured"}
    (cg.path / "memory.events").write_text("low 0\nhigh 0\nmax 20\noom 1\noom_kill 1\n")
    v = oom_verdict(rec, -9)
    assert v.startswith(f"out of memory: killed by the memory limit of {64 * MiB:,} bytes (cgroup {cg.path})")
    assert MemoryCgroup(cg.path, 1).version == 2          # told from the directory (older records)


def test_v2_swap_limited_where_the_kernel_has_it(fake_v2, monkeypatch):
    real_mkdir = Path.mkdir

    def mkdir_like_the_kernel(self, *a, **kw):   # the kernel creates the interface files with the directory
        real_mkdir(self, *a, **kw)
        if self.name.startswith("run-"):
            (self / "memory.swap.max").write_text("max\n")
    monkeypatch.setattr(Path, "mkdir", mkdir_like_the_kernel)
    cg = MemoryCgroup.create("run-2-ef01", 32 * MiB)
    assert (cg.path / "memory.swap.max").read_text() == "0"


def test_v2_enables_the_memory_controller_for_children(fake_v2):
    (fake_v2 / "cgroup.subtree_control").write_text("cpu\n")
    memory_cgroup_root()
    assert (fake_v2 / "cgroup.subtree_control").read_text() == "+memory"
    assert (fake_v2 / "gnnrec-lab" / "cgroup.subtree_control").read_text() == "+memory"


@pytest.mark.parametrize("err, words", [
    (errno.EBUSY, "holds processes, and cgroup v2 hands controllers only to children"),
    (errno.EACCES, "Permission denied"),
])
def test_v2_not_delegated_says_why(fake_v2, monkeypatch, err, words):
    (fake_v2 / "cgroup.subtree_control").write_text("cpu\n")
    real_write = Path.write_text

    def write(self, data, *a, **kw):
        if self.name == "cgroup.subtree_control":
            raise OSError(err, __import__("os").strerror(err))
        return real_write(self, data, *a, **kw)
    monkeypatch.setattr(Path, "write_text", write)
    with pytest.raises(UserError) as e:
        memory_cgroup_root()
    assert "cannot enable the memory controller" in str(e.value) and words in str(e.value)
    assert "\n" not in str(e.value)


def test_v2_without_memory_controller(fake_v2):
    (fake_v2 / "cgroup.controllers").write_text("cpu io pids\n")
    with pytest.raises(UserError, match=r"memory controller is not available in .*lab\.slice "
                                        r"\(cgroup\.controllers: cpu io pids\)"):
        memory_cgroup_root()


def test_v1_wins_where_both_are_mounted(fake_v2, tmp_path, monkeypatch):
    v1 = tmp_path / "v1mem"
    v1.mkdir()
    mounts = cg_mod.CGROUP_MOUNTS
    mounts.write_text(mounts.read_text() + f"cgroup {v1} cgroup rw,memory 0 0\n")
    assert cgroup_version() == 1
    assert cg_mod._mounts()[0] == v1
