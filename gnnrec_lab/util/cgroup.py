"""Per-run memory limits: a memory cgroup (v1, or v2's unified hierarchy) around a run's worker.

Where the cgroup v1 memory controller is mounted it is used (``memory.limit_in_bytes``,
``memory.oom_control``); else, where the unified hierarchy (cgroup v2) is mounted, offers the
memory controller and lets this process enable it for a child, ``memory.max`` limits the run
(``memory.swap.max`` 0 keeps swap from extending it) and ``memory.events`` gives the oom verdict.
Where neither works, :func:`memory_cgroup_root` says why in one line.

The runner (:mod:`gnnrec_lab.runs.runner`) creates one :class:`MemoryCgroup` per limited run under
``<memory mount>/<our cgroup>/gnnrec-lab``, starts the worker through :meth:`MemoryCgroup.wrap`
(it joins the cgroup before it execs), and after the worker exits reads the kernel's counters
(:func:`oom_verdict`) and removes the cgroup. The requested limit, then the cgroup used and its
measured peak, are kept in the run directory (:data:`LIMIT_FILE`, :func:`memory_limit_of`).
"""
from __future__ import annotations

import errno
import json
import math
import os
import signal
import time
from pathlib import Path
from typing import Optional, Sequence

from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.files import write_atomic
from gnnrec_lab.util.provenance import Provenance

CGROUP_MOUNTS = Path("/proc/self/mounts")
CGROUP_SELF = Path("/proc/self/cgroup")
CGROUP_DIR_NAME = "gnnrec-lab"
LIMIT_FILE = "memory_limit.json"     # in the run directory: the requested limit, then the cgroup used
_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
               "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}
# joins the cgroup named by $1 from inside the child, then becomes the worker: no window in which
# the worker allocates outside the limit ($$ is the shell, which exec keeps as the worker's pid)
_JOIN_AND_EXEC = 'echo $$ > "$1/cgroup.procs" || exit 125; shift; exec "$@"'


def parse_size(text, what: str = "memory limit") -> int:
    """Bytes in ``text``: an integer or a number with a binary unit (``2G``, ``512MiB``, ``1.5g``).

    Units are powers of 1024 (K, M, G, T, with or without ``B``/``iB``). Raises UserError
    naming ``what`` for anything else or a size under 1 MiB.
    """
    if isinstance(text, bool):
        raise UserError(f"{what}: expected a size like 2G or 512M, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip().lower().replace(" ", "")
        num = s.rstrip("kmgtib")
        unit = s[len(num):]
        try:
            number = float(num)
            if not math.isfinite(number) or number > 2**64:
                raise ValueError
            value = int(number * _SIZE_UNITS[unit])
        except (ValueError, KeyError):
            raise UserError(f"{what}: expected a size like 2G or 512M, got {text!r}") from None
    if value < 2**20:
        raise UserError(f"{what}: must be at least 1 MiB, got {value} bytes")
    return value


def _mounts() -> tuple[Optional[Path], Optional[Path]]:
    """``(v1 memory controller mount, cgroup2 mount)`` from :data:`CGROUP_MOUNTS` (None: absent)."""
    try:
        mounts = CGROUP_MOUNTS.read_text().splitlines()
    except OSError as e:
        raise UserError(f"memory limit: cannot read {CGROUP_MOUNTS} ({e.strerror})") from None
    v1 = v2 = None
    for line in mounts:
        parts = line.split()
        if len(parts) < 4:
            continue
        where = Path(parts[1].replace("\\040", " "))
        if parts[2] == "cgroup2":
            v2 = v2 or where
        elif parts[2] == "cgroup" and "memory" in parts[3].split(","):
            v1 = where
    return v1, v2


def _own_cgroup(v2: bool) -> str:
    """This process's cgroup path: the v1 memory controller's line, or v2's ``0::`` line."""
    own = ""
    try:
        for line in CGROUP_SELF.read_text().splitlines():
            hid, controllers, path = line.split(":", 2)
            if (v2 and hid == "0" and controllers == "") or (not v2 and "memory" in controllers.split(",")):
                own = path
    except (OSError, ValueError):
        pass
    return own


def cgroup_version() -> int:
    """1 or 2: the cgroup version :func:`memory_cgroup_root` uses here (v1 where its memory
    controller is mounted, else v2 where the unified hierarchy is). Raises UserError when neither."""
    v1, v2 = _mounts()
    if v1 is not None:
        return 1
    if v2 is not None:
        return 2
    raise UserError("memory limit: no cgroup filesystem is mounted (needs the cgroup v1 memory controller "
                    "or the cgroup v2 unified hierarchy, e.g. mount -t cgroup2 none /sys/fs/cgroup)")


def _words(path: Path) -> list:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _v2_root(mount: Path) -> Path:
    """``<cgroup2 mount>/<our cgroup>/gnnrec-lab`` with the memory controller enabled for its
    children; raises UserError saying what is missing (controller bound to v1, not delegated,
    cgroup v2's rule that a cgroup holding processes cannot hand controllers to children)."""
    base = mount / _own_cgroup(v2=True).lstrip("/")
    if not (base / "cgroup.procs").exists():
        base = mount
    have = _words(base / "cgroup.controllers")
    if "memory" not in have:
        raise UserError(f"memory limit: cgroup v2 is mounted at {mount}, but its memory controller is not "
                        f"available in {base} (cgroup.controllers: {' '.join(have) or 'none'}); it is bound to "
                        f"cgroup v1 elsewhere or not delegated to this cgroup")
    root = base / CGROUP_DIR_NAME
    for parent in (base, root):
        if parent is root:
            try:
                root.mkdir(exist_ok=True)
            except OSError as e:
                who = "" if os.geteuid() == 0 else " (not delegated to this user)"
                raise UserError(f"memory limit: cannot create the cgroup {root}: {e.strerror}{who}") from None
        ctl = parent / "cgroup.subtree_control"
        if "memory" in _words(ctl):
            continue
        try:
            ctl.write_text("+memory")
        except OSError as e:
            if e.errno == errno.EBUSY:
                why = (f"{parent} holds processes, and cgroup v2 hands controllers only to children of "
                       f"cgroups without processes; start the lab in a delegated cgroup of its own "
                       f"(systemd-run --user --scope -p Delegate=yes ...)")
            else:
                why = f"{e.strerror}" + ("" if os.geteuid() == 0 else " (not delegated to this user)")
            if parent is root:
                _remove_empty_root(root)
            raise UserError(f"memory limit: cannot enable the memory controller in {ctl}: {why}") from None
    if not os.access(root / "cgroup.procs", os.W_OK):
        raise UserError(f"memory limit: cgroup {root} is not writable"
                        + ("" if os.geteuid() == 0 else " (not delegated to this user)"))
    return root


def memory_cgroup_root() -> Path:
    """Directory under which the lab creates per-run memory cgroups.

    cgroup v1: ``<memory controller mount>/<this process's memory cgroup>/gnnrec-lab``; cgroup v2
    (no v1 memory controller mounted): ``<cgroup2 mount>/<this process's cgroup>/gnnrec-lab``, so
    any limit already set above this process still applies to its runs. Raises UserError naming
    the reason where no memory cgroup can be created here (no cgroup filesystem, v2 without its
    memory controller or not delegated, not root / not writable).
    """
    mount, v2 = _mounts()
    if mount is None:
        if v2 is None:
            cgroup_version()        # raises the "no cgroup filesystem" error
        return _v2_root(v2)
    own = _own_cgroup(v2=False)
    base = mount / own.lstrip("/")
    if not (base / "cgroup.procs").exists():
        base = mount  # our own cgroup is not visible in this mount (another namespace): use the top
    root = base / CGROUP_DIR_NAME
    try:
        root.mkdir(exist_ok=True)
    except OSError as e:
        who = "" if os.geteuid() == 0 else " (creating cgroups needs root)"
        raise UserError(f"memory limit: cannot create the cgroup {root}: {e.strerror}{who}") from None
    if not os.access(root / "cgroup.procs", os.W_OK):
        raise UserError(f"memory limit: cgroup {root} is not writable"
                        + ("" if os.geteuid() == 0 else " (needs root)"))
    return root


def cgroup_usable() -> Optional[str]:
    """None when per-run memory cgroups can be created here, else why not (one line)."""
    try:
        root = memory_cgroup_root()
    except UserError as e:
        return str(e)
    _remove_empty_root(root)
    return None


def _remove_empty_root(root: Path) -> None:
    """Remove the lab's parent cgroup directory when no run's cgroup is left in it."""
    try:
        root.rmdir()  # cgroupfs refuses while a child cgroup exists: then it stays
    except OSError:
        pass


class MemoryCgroup:
    """One memory cgroup (v1 or v2) with a hard limit, holding one run's worker.

    Usage: ``cg = MemoryCgroup.create("run-7-ab12", 2 << 30)``; start the worker
    with ``cg.wrap(argv)``; after it exits read :meth:`oom_kills` / :meth:`usage`
    and :meth:`remove` it. ``version`` is told from the directory when not given
    (v2 cgroups have ``memory.max``).
    """

    def __init__(self, path, limit_bytes: int, version: Optional[int] = None):
        self.path = Path(path)
        self.limit_bytes = int(limit_bytes)
        self.version = version if version is not None else (2 if (self.path / "memory.max").exists() else 1)

    @classmethod
    def create(cls, name: str, limit_bytes: int, root: Optional[Path] = None,
               version: Optional[int] = None) -> "MemoryCgroup":
        """Create cgroup ``name`` with a hard limit: v1 ``memory.limit_in_bytes`` (and the
        memory+swap limit, where the kernel has one, set to the same so swap cannot extend it);
        v2 ``memory.max`` (and ``memory.swap.max`` 0, where it exists, for the same reason).
        ``version``: of ``root`` (default: what :func:`cgroup_version` finds)."""
        if version is None:
            version = cgroup_version()
        for attempt in range(3):
            base = memory_cgroup_root() if root is None else Path(root)
            path = base / name
            try:
                path.mkdir()
                break
            except FileNotFoundError:
                # another runner removed the empty parent between our mkdir calls: make it again
                if root is not None or attempt == 2:
                    raise UserError(f"memory limit: cannot create the cgroup {path}: parent vanished") from None
            except OSError as e:
                raise UserError(f"memory limit: cannot create the cgroup {path}: {e.strerror}") from None
        cg = cls(path, limit_bytes, version)
        limit_file = "memory.max" if version == 2 else "memory.limit_in_bytes"
        try:
            (path / limit_file).write_text(str(int(limit_bytes)))
            if version == 1 and (path / "memory.memsw.limit_in_bytes").exists():
                (path / "memory.memsw.limit_in_bytes").write_text(str(int(limit_bytes)))
            if version == 2 and (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
            # the kernel rounds down to pages: keep what it actually enforces
            cg.limit_bytes = int((path / limit_file).read_text())
        except OSError as e:
            cg.remove()
            raise UserError(f"memory limit: cannot set {limit_bytes} bytes on {path}: {e.strerror}") from None
        return cg

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed so the process joins this cgroup before it execs (race-free)."""
        return ["/bin/sh", "-c", _JOIN_AND_EXEC, "gnnrec-lab-cgroup", str(self.path), *argv]

    def _read(self, name: str) -> Optional[str]:
        try:
            return (self.path / name).read_text()
        except OSError:
            return None

    def _counter(self, name: str, key: str) -> Optional[int]:
        """``key``'s value in a flat-keyed file (``oom_kill 1`` lines), None when unknown."""
        for line in (self._read(name) or "").splitlines():
            k, _, v = line.partition(" ")
            if k == key and v.strip().isdigit():
                return int(v)
        return None

    def oom_kills(self) -> Optional[int]:
        """Processes the kernel OOM killer has killed in this cgroup (None when unknown): v1
        ``memory.oom_control``, v2 ``memory.events`` (``oom_kill``)."""
        return self._counter("memory.events" if self.version == 2 else "memory.oom_control", "oom_kill")

    def usage(self) -> dict:
        """Measured: ``max_usage_bytes`` (peak charge, page cache included) and ``failcnt``
        (times the limit was hit), as the kernel counts them; -1 where unreadable. On v2 they
        are ``memory.peak`` (kernels 5.19+) and ``memory.events``' ``max`` count."""
        def num(name):
            t = self._read(name)
            return int(t) if t and t.strip().lstrip("-").isdigit() else -1
        if self.version == 2:
            hits = self._counter("memory.events", "max")
            return {"max_usage_bytes": num("memory.peak"), "failcnt": -1 if hits is None else hits,
                    "limit_bytes": self.limit_bytes, "kind": Provenance.MEASURED}
        return {"max_usage_bytes": num("memory.max_usage_in_bytes"), "failcnt": num("memory.failcnt"),
                "limit_bytes": self.limit_bytes, "kind": Provenance.MEASURED}

    def remove(self, timeout_s: float = 5.0) -> bool:
        """Remove the cgroup (waits up to ``timeout_s`` for exiting tasks to leave). Returns success."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() >= end:
                    return False
                time.sleep(0.05)
        if self.path.parent.name == CGROUP_DIR_NAME:
            _remove_empty_root(self.path.parent)
        return True


def memory_limit_of(run_dir: Path) -> Optional[dict]:
    """The memory-limit record of a run directory, or None: ``limit_bytes``; ``cgroup`` once
    started; after the worker ended ``max_usage_bytes`` (peak charge, page cache included),
    ``failcnt`` and ``oom_kills`` as the kernel counted them (measured)."""
    try:
        return json.loads((Path(run_dir) / LIMIT_FILE).read_text())
    except (OSError, ValueError):
        return None


def oom_verdict(limit: Optional[dict], rc: Optional[int]) -> Optional[str]:
    """The 'oom' error message when a run's cgroup says its worker was killed by the limit."""
    if not limit or not limit.get("cgroup"):
        return None
    cg = MemoryCgroup(limit["cgroup"], limit["limit_bytes"], limit.get("cgroup_version"))
    kills = cg.oom_kills()
    use = cg.usage()
    killed = (kills or 0) > 0 or (kills is None and rc == -signal.SIGKILL and use["failcnt"] > 0)
    if not killed:
        return None
    peak = f"; peak charge {use['max_usage_bytes']:,} bytes (measured)" if use["max_usage_bytes"] >= 0 else ""
    return (f"out of memory: killed by the memory limit of {cg.limit_bytes:,} bytes (cgroup {cg.path}){peak}; "
            f"raise --memory-limit or place large classes on file:DIR")


def limit_reached(use: dict) -> bool:
    # memory.failcnt stays 0 on some kernels even when the limit was hit; a peak charge at the
    # limit says the same thing (the kernel reclaimed or killed to stay under it)
    return use["failcnt"] > 0 or use["max_usage_bytes"] >= use["limit_bytes"]


def check_limit(memory_limit_bytes) -> Optional[int]:
    """Parsed limit in bytes (None for no limit); raises UserError where cgroups cannot be used."""
    if memory_limit_bytes is None:
        return None
    limit = parse_size(memory_limit_bytes)
    memory_cgroup_root()
    return limit


def write_limit(run_dir: Path, limit: dict) -> None:
    write_atomic(Path(run_dir) / LIMIT_FILE, json.dumps(limit))

