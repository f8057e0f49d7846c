"""Process identity from ``/proc``: whether a recorded worker pid is still that worker.

A run row keeps its worker's pid and the process start time (clock ticks since boot); a pid
the kernel has since given to another process has another start time, so :func:`pid_alive`
does not mistake it for the run's worker. :func:`host_info` describes the process's host
(the worker's row and a run's info both record it).
"""
from __future__ import annotations

import glob
import os
import platform
import socket
import sys
from typing import Optional


def _stat_fields(pid: int) -> list:
    """Fields of ``/proc/PID/stat`` after the command name (state first); raises OSError."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def proc_start_ticks(pid: int) -> Optional[int]:
    """Start time of process ``pid`` in clock ticks since boot (Linux), None when unknown."""
    try:
        return int(_stat_fields(pid)[19])
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: Optional[int], start_ticks: Optional[int] = None) -> bool:
    """Whether ``pid`` is a live (not zombie) process, and the same one that started at ``start_ticks``."""
    if not pid:
        return False
    try:
        rest = _stat_fields(pid)
        if rest[0] in (b"Z", b"X"):
            return False
        return start_ticks is None or int(rest[19]) == int(start_ticks)
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:  # no /proc (not Linux): existence only
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def host_info() -> dict:
    """This process's host: name, pid, CPU, core count, the cores this process may run on now
    (``affinity``, read from the process: a run pinned with ``--cores`` records its pinned cores),
    Python, and torch's version and thread count once torch is loaded, numba's thread count once
    numba is (the worker records it before importing torch; a run's info after, pinned)."""
    info = {"hostname": socket.gethostname(), "pid": os.getpid(), "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        info["affinity"] = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        info |= {"torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    numba = sys.modules.get("numba")
    if numba is not None and hasattr(numba, "get_num_threads"):
        info["numba_threads"] = numba.get_num_threads()
    return info


# ---------------------------------------------------------------------------
# how busy the machine was while a run was timed
# ---------------------------------------------------------------------------
# The points of a run at which the load is sampled (train.py: before the first step, after the
# middle step, after the last).
LOAD_POINTS = ("start", "middle", "end")


def cpu_ticks() -> Optional[tuple]:
    """``(steal, total)`` clock ticks of all CPUs since boot (``/proc/stat``'s ``cpu`` line), or None
    where the kernel does not report steal time (not Linux, or a kernel older than 2.6.11)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    try:
        vals = [int(x) for x in fields[1:9]]   # user nice system idle iowait irq softirq steal (guest is in user)
    except ValueError:
        return None
    return vals[7], sum(vals)


def load_sample(previous: Optional[dict] = None) -> dict:
    """The machine's load now (measured): ``time`` (Unix s), ``load1``/``load5``/``load15`` (the
    kernel's 1, 5 and 15 minute load averages: runnable tasks, this run's threads included),
    ``cpus`` (cores), and ``steal_pct``: the share (%) of CPU time the hypervisor gave to other
    guests since ``previous`` (None at the first sample or where the kernel does not report steal)."""
    import time
    try:
        l1, l5, l15 = os.getloadavg()
    except OSError:   # not available on this platform
        l1 = l5 = l15 = None
    ticks = cpu_ticks()
    out = {"time": time.time(), "load1": l1, "load5": l5, "load15": l15, "cpus": os.cpu_count(),
           "steal_ticks": ticks[0] if ticks else None, "total_ticks": ticks[1] if ticks else None,
           "steal_pct": None}
    if previous and ticks and previous.get("total_ticks") is not None:
        d_total = ticks[1] - previous["total_ticks"]
        if d_total > 0:
            out["steal_pct"] = 100.0 * (ticks[0] - previous["steal_ticks"]) / d_total
    return out


def load_summary(load: Optional[dict]) -> Optional[dict]:
    """What the stored samples of one run (``{point: load_sample()}``) say, or None when it has none:
    ``max_load1``, ``cpus``, ``max_steal_pct`` (None when unknown), ``points`` sampled, and
    ``overloaded``: the 1-minute load average exceeded the core count at some sample, so the run's
    measured times (and every modeled time projected from them) include waiting for other work."""
    if not isinstance(load, dict):
        return None
    samples = [load[p] for p in LOAD_POINTS if isinstance(load.get(p), dict) and load[p].get("load1") is not None]
    if not samples:
        return None
    cpus = max((s.get("cpus") or 0) for s in samples) or None
    top = max(float(s["load1"]) for s in samples)
    steal = [float(s["steal_pct"]) for s in samples if s.get("steal_pct") is not None]
    return {"max_load1": top, "cpus": cpus, "max_steal_pct": max(steal) if steal else None,
            "points": [p for p in LOAD_POINTS if isinstance(load.get(p), dict)],
            "overloaded": bool(cpus and top > cpus)}


def load_cell(load_max, cpus, overloaded, mark: str = "!") -> str:
    """A run's load in a table cell: its highest 1-minute load average over its cores ("3.1/2"),
    ``mark`` appended when that exceeded them; "-" when the run has no samples."""
    if load_max is None or load_max != load_max:
        return "-"
    cell = f"{float(load_max):.1f}/{int(cpus)}" if cpus and cpus == cpus else f"{float(load_max):.1f}"
    return cell + (f" {mark}" if overloaded is True else "")


def load_warning(summary: Optional[dict]) -> str:
    """The one line every view shows for an overloaded run ('' when it was not)."""
    if not summary or not summary.get("overloaded"):
        return ""
    return (f"load average {summary['max_load1']:.1f} exceeded the {summary['cpus']} cores during this run: "
            f"its measured times (and the modeled times projected from them) include waiting for other work")


def llc_bytes() -> int:
    """This host's last-level cache (the largest cache sysfs lists for cpu0); 32 MiB if unknown."""
    best = 0
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(f"{d}/size") as fh:
                txt = fh.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:].upper(), 1)
        digits = txt[:-1] if txt[-1:].isalpha() else txt
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or (32 << 20)
