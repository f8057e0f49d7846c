"""Process identity from ``/proc``: whether a recorded worker pid is still that worker.

A run row keeps its worker's pid and the process start time (clock ticks since boot); a pid
the kernel has since given to another process has another start time, so :func:`pid_alive`
does not mistake it for the run's worker. :func:`host_info` describes the process's host
(the worker's row and a run's info both record it).
"""
from __future__ import annotations

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
    """This process's host: name, pid, CPU, core count, Python, and torch's version and thread
    count once torch is loaded (the worker records it before importing torch; a run's info after)."""
    info = {"hostname": socket.gethostname(), "pid": os.getpid(), "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        info |= {"torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    return info
