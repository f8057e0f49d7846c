"""One "machine" of C cores: a training process pinned to cores of its own (``--cores C``).

The fair comparison with DistDGL (issue 20): an emulated DistDGL cluster is P machines of C cores
each (``gnnrec-lab distributed --cluster emulated --partitions P --cores-per-machine C``, every
machine's server and trainer pinned with ``taskset``); full-graph training on one machine is the
same C cores. ``RunConfig.cores`` (the ``--cores`` flag) is a **count**: the run takes the first C
cores of those this process may run on (its affinity mask, sorted), pins every thread of the
process to them (``os.sched_setaffinity``: existing threads one by one, since on Linux the call
sets one thread; threads started later inherit the mask) and runs C compute threads in torch and
numba unless ``threads`` says fewer. A count, not a list, because it is what a machine is to the
comparison, and the same number DistDGL's ``--cores-per-machine`` takes; the cores taken are
recorded (the run's ``info.host.affinity``, read back from the process after pinning).

A process that may run on fewer than C cores is refused (:func:`choose_cores`, a ConfigError
naming ``--cores``) before a run is stored (``preflight.check_launch``) and again by the run.
:func:`pinned` restores every thread's mask afterwards (a notebook kernel keeps its cores).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from gnnrec_lab.util.errors import ConfigError


def allowed_cores() -> list[int]:
    """The cores this thread may run on (its affinity mask), sorted; every core where the platform
    has no affinity calls."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def core_list_text(cores) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5`` (taskset's spelling)."""
    cores = sorted(cores)
    out, i = [], 0
    while i < len(cores):
        j = i
        while j + 1 < len(cores) and cores[j + 1] == cores[j] + 1:
            j += 1
        out.append(str(cores[i]) if i == j else f"{cores[i]}-{cores[j]}")
        i = j + 1
    return ",".join(out)


def choose_cores(count: int) -> list[int]:
    """The first ``count`` cores this process may run on; ConfigError (``cores``, naming ``--cores``)
    when it may run on fewer."""
    have = allowed_cores()
    if count > len(have):
        raise ConfigError("cores", f"--cores {count}: this process may run on {len(have)} core"
                                   f"{'s' if len(have) != 1 else ''} ({core_list_text(have)}); give at most "
                                   f"{len(have)}")
    return have[:count]


def _tasks() -> list[int]:
    """Thread ids of this process (Linux ``/proc/self/task``); ``[0]`` (this thread) elsewhere."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return [0]


def _set_mask(cores) -> dict:
    """Every thread of this process on ``cores``; returns each thread's previous mask."""
    before = {}
    for tid in _tasks():
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cores)
        except OSError:   # a thread that ended meanwhile
            continue
    return before


@contextlib.contextmanager
def pinned(count: Optional[int]) -> Iterator[Optional[list]]:
    """Pin this process to its first ``count`` cores for the block; yields the cores (None and
    nothing changed when ``count`` is None). Every thread's mask is restored afterwards; threads
    started inside the block get the mask this thread had before."""
    if count is None or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    cores = choose_cores(int(count))
    own = os.sched_getaffinity(0)
    before = _set_mask(set(cores))
    try:
        yield cores
    finally:
        for tid in _tasks():
            try:
                os.sched_setaffinity(tid, before.get(tid, own))
            except OSError:
                continue


def compute_threads(config) -> Optional[int]:
    """The torch and numba threads a run sets (None: leave them): ``threads`` when given; with an
    embedding cache, one core left to the slow tier's I/O (the I/O thread needs a core of its own:
    with every core in the compute team the two fight, measured: sparse Adam 60-120 ms a step
    instead of ~4 on 2 cores); else one per pinned core (``cores``). Read after pinning, so
    "cores" are the pinned ones."""
    threads = config.threads
    if threads is None and config.mode == "sampled" and config.cache_policy != "none":
        threads = max(1, len(allowed_cores()) - 1)
    if threads is None and getattr(config, "cores", None):
        threads = config.cores
    return threads
