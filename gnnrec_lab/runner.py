"""Launching, watching and cancelling runs as subprocesses.

``Runner(store).launch(config)`` returns a run id at once; the run waits in the
``queued`` state until a slot is free (``max_concurrent``) and then runs as
``[numactl ...] python -m gnnrec_lab.worker RUN_ID`` in its own session, with
stdout/stderr in ``$GNNREC_LAB_HOME/runs/<id>/``. A monitor thread reaps
finished workers, classifies deaths the worker could not record itself
(SIGKILL without a cancel request → ``oom``), keeps the stderr tail of failed
runs and starts the next queued run. Claiming a queued run is one store
transaction, so several runners (a dashboard, a detached supervisor, a CLI
``wait``) can share a store without starting a run twice.

``launch_detached(config)`` is for ``gnnrec-lab run --detach``: it queues the
run and starts a detached supervisor (``python -m gnnrec_lab.runner
--supervise``) that runs queued work until the queue is empty.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from .errors import UserError
from .store import TERMINAL, Store, _proc_start_ticks, pid_alive
from .worker import tail_lines

NUMA_POLICIES = ("membind", "preferred", "interleave")
SYS_NODE_DIR = Path("/sys/devices/system/node")
# a running row with no pid yet is being spawned; after this long its spawner is presumed dead (s)
SPAWN_GRACE_S = 60.0


# ---------------------------------------------------------------------------
# NUMA: build the numactl prefix (pure) and check it against this machine
# ---------------------------------------------------------------------------
def parse_nodes(text: str) -> list[int]:
    """NUMA node list like ``"0,1"`` or ``"0-2,4"`` → sorted unique node ids."""
    nodes: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi or lo < 0:
                    raise ValueError
                nodes.update(range(lo, hi + 1))
            else:
                n = int(part)
                if n < 0:
                    raise ValueError
                nodes.add(n)
        except ValueError:
            raise UserError(f"placement: bad NUMA node list {text!r} (expected e.g. '0' or '0,1' or '0-2')") from None
    if not nodes:
        raise UserError(f"placement: empty NUMA node list {text!r}")
    return sorted(nodes)


def numa_request(placement: dict) -> Optional[tuple[str, list[int]]]:
    """The one process-wide NUMA policy that ``placement`` asks for, as (policy, nodes), or None.

    numactl sets the policy of the whole run, so every ``numa:`` entry must agree;
    classes placed on ``dram`` or ``file:`` are handled inside the run by the
    placement layer.
    """
    wanted: dict[tuple, list[str]] = {}
    for cls, where in sorted((placement or {}).items()):
        if not str(where).startswith("numa:"):
            continue
        parts = str(where).split(":")
        if len(parts) != 3 or parts[1] not in NUMA_POLICIES:
            raise UserError(f"placement: {cls}: got {where!r}, expected numa:POLICY:NODES with POLICY in "
                            f"{', '.join(NUMA_POLICIES)} (e.g. numa:membind:1)")
        key = (parts[1], tuple(parse_nodes(parts[2])))
        wanted.setdefault(key, []).append(cls)
    if not wanted:
        return None
    if len(wanted) > 1:
        desc = "; ".join(f"{'+'.join(c)} -> numa:{p}:{','.join(map(str, n))}" for (p, n), c in wanted.items())
        raise UserError(f"placement: numactl binds the whole run to one policy, but classes ask for different "
                        f"ones ({desc})")
    (policy, nodes), = wanted
    if policy == "preferred" and len(nodes) != 1:
        raise UserError(f"placement: numa:preferred takes exactly one node, got {','.join(map(str, nodes))}")
    return policy, list(nodes)


def numactl_argv(placement: dict, available_nodes: Sequence[int], numactl: Optional[str] = "numactl",
                 memory_nodes: Optional[Sequence[int]] = None) -> list[str]:
    """The command prefix that applies ``placement``'s NUMA policy: ``[]`` when none is asked for.

    ``available_nodes``: NUMA nodes of this machine; ``memory_nodes``: those with
    memory (None = all); ``numactl``: path of the numactl binary, None when it is
    not installed. Raises UserError when the request cannot be honoured.
    """
    req = numa_request(placement)
    if req is None:
        return []
    policy, nodes = req
    missing = [n for n in nodes if n not in set(available_nodes)]
    if missing:
        have = ",".join(map(str, sorted(available_nodes))) or "none"
        raise UserError(f"placement: NUMA node {missing[0]} does not exist on this machine (nodes: {have})")
    if memory_nodes is not None:
        empty = [n for n in nodes if n not in set(memory_nodes)]
        if empty:
            raise UserError(f"placement: NUMA node {empty[0]} has no memory to {policy} to")
    if not numactl:
        raise UserError("placement asks for a NUMA policy but numactl is not installed "
                        "(apt-get install numactl)")
    return [numactl, f"--{policy}={','.join(map(str, nodes))}"]


def _read_node_list(path: Path) -> Optional[list[int]]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return parse_nodes(text) if text else []


def system_numa_nodes() -> tuple[list[int], Optional[list[int]]]:
    """(NUMA nodes, nodes with memory or None when unknown) from /sys/devices/system/node."""
    nodes = sorted(int(p.name[4:]) for p in SYS_NODE_DIR.glob("node[0-9]*")) if SYS_NODE_DIR.is_dir() else []
    return nodes, _read_node_list(SYS_NODE_DIR / "has_memory")


def numa_prefix(config) -> list[str]:
    """numactl prefix for ``config`` on this machine (checks nodes and the binary)."""
    if numa_request(config.placement) is None:
        return []
    nodes, mem = system_numa_nodes()
    return numactl_argv(config.placement, nodes, shutil.which("numactl"), mem)


# ---------------------------------------------------------------------------
def recover_dead(store: Store, exclude: Sequence[int] = ()) -> list[int]:
    """Close ``running`` runs whose worker process is gone; returns their ids.

    Such a run becomes ``cancelled`` when a cancel was requested (the escalation
    killed it), else ``failed`` with "worker process disappeared".
    """
    dead = []
    now = time.time()
    for run_id in store.run_ids("running"):
        if run_id in exclude:
            continue
        run = store.get_run(run_id)
        if run["pid"] is None:
            if run["started"] and now - run["started"] < SPAWN_GRACE_S:
                continue  # another runner is spawning it right now
        elif pid_alive(run["pid"], run["pid_start"]):
            continue
        if run["cancel_requested"]:
            # a cancel escalated to a signal: the worker could not record its own end
            if store.set_status(run_id, "cancelled", error="cancelled: worker stopped by a signal",
                                only_if=("running",)):
                dead.append(run_id)
            continue
        tail = tail_lines(store.home / "runs" / str(run_id) / "stderr.log") or None
        if store.set_status(run_id, "failed", error="worker process disappeared (pid "
                            f"{run['pid']} is gone without recording a final status)",
                            stderr_tail=tail, only_if=("running",)):
            dead.append(run_id)
    return dead


class Runner:
    """Starts queued runs as worker subprocesses, at most ``max_concurrent`` at a time.

    On creation it marks runs whose worker vanished as failed and (with
    ``pick_up=True``) starts queued runs that fit.
    """

    def __init__(self, store: Optional[Store] = None, max_concurrent: int = 1, *, pick_up: bool = True,
                 python: str = sys.executable, poll_s: float = 0.1):
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise UserError(f"max_concurrent must be an integer >= 1, got {max_concurrent!r}")
        self.store = store or Store()
        self.max_concurrent = max_concurrent
        self.pick_up = pick_up
        self.python = python
        self.poll_s = poll_s
        self._procs: dict[int, subprocess.Popen] = {}
        self._lock = threading.RLock()
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        recover_dead(self.store)
        if pick_up:
            self.schedule()

    # -- launching ----------------------------------------------------------
    def launch(self, config, sweep: Optional[str] = None) -> int:
        """Queue ``config`` and start it when a slot is free; returns the run id at once."""
        numa_prefix(config)  # refuse an impossible placement before anything is recorded
        run_id = self.store.add_run(config, status="queued", sweep=sweep)
        self.schedule()
        return run_id

    def schedule(self) -> list[int]:
        """Start queued runs while slots are free; returns the ids started by this call."""
        started = []
        with self._lock:
            while True:
                run_id = self.store.claim_queued(self.max_concurrent)
                if run_id is None:
                    break
                self._spawn(run_id)
                started.append(run_id)
        self._ensure_monitor()
        return started

    def _spawn(self, run_id: int) -> None:
        from .config import RunConfig
        run_dir = self.store.run_dir(run_id)
        try:
            config = RunConfig.from_dict(self.store.get_run(run_id)["config"])
            argv = numa_prefix(config) + [self.python, "-m", "gnnrec_lab.worker", str(run_id)]
            env = dict(os.environ, GNNREC_LAB_HOME=str(self.store.home), PYTHONUNBUFFERED="1")
            with open(run_dir / "stdout.log", "ab") as out, open(run_dir / "stderr.log", "ab") as err:
                # own session: Ctrl-C in the launching shell does not reach it, and
                # cancel can signal the whole group (numactl execs, so pgid == pid)
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                        start_new_session=True)
        except Exception as e:  # noqa: BLE001 - a run that cannot start is recorded as failed
            msg = str(e) if isinstance(e, UserError) else f"could not start worker: {type(e).__name__}: {e}"
            self.store.set_status(run_id, "failed", error=msg, only_if=("running",))
            return
        self._procs[run_id] = proc
        self.store.set_fields(run_id, pid=proc.pid, pid_start=_proc_start_ticks(proc.pid))

    # -- watching ------------------------------------------------------------
    def _ensure_monitor(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            if not self._procs and not (self.pick_up and self.store.run_ids("queued")):
                return
            self._thread = threading.Thread(target=self._monitor, name="gnnrec-lab-runner", daemon=True)
            self._thread.start()

    def _monitor(self) -> None:
        while not self._stopping:
            self.poll()
            with self._lock:
                idle = not self._procs and not (self.pick_up and self.store.run_ids("queued"))
                if idle:
                    self._thread = None
                    return
            time.sleep(self.poll_s)

    def poll(self) -> None:
        """Reap exited workers, record how they ended, recover vanished foreign ones, start queued runs."""
        with self._lock:
            for run_id, proc in list(self._procs.items()):
                rc = proc.poll()
                if rc is not None:
                    del self._procs[run_id]
                    self._finalize(run_id, rc)
            recover_dead(self.store, exclude=tuple(self._procs))
            if self.pick_up:
                self.schedule()

    def _finalize(self, run_id: int, rc: int) -> None:
        """Record how a worker that exited with ``rc`` ended, unless it recorded that itself."""
        tail = tail_lines(self.store.run_dir(run_id) / "stderr.log") or None
        run = self.store.get_run(run_id)
        if run["status"] in TERMINAL:
            if run["status"] in ("failed", "oom") and not run["stderr_tail"] and tail:
                self.store.set_fields(run_id, stderr_tail=tail)
            return
        if run["cancel_requested"]:
            status, error = "cancelled", f"cancelled: worker ended by {_describe_rc(rc)}"
        elif rc == -signal.SIGKILL:
            status, error = "oom", ("out of memory (presumed): the worker was killed by SIGKILL without a cancel "
                                    "request, which is what the kernel's OOM killer does; check `dmesg`")
        elif rc == 0:
            status, error = "failed", "worker exited without recording a final status"
        else:
            status, error = "failed", f"worker ended by {_describe_rc(rc)}"
        self.store.set_status(run_id, status, error=error, stderr_tail=tail, only_if=("running", "queued"))

    # -- queries and control ------------------------------------------------
    def status(self, run_id: int) -> str:
        """Current status of ``run_id`` (after reaping any worker that just ended)."""
        self.poll()
        return self.store.status(run_id)

    def wait(self, run_id: int, timeout: Optional[float] = None) -> str:
        """Block until ``run_id`` ends; returns its final status. Raises TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.status(run_id)
            if st in TERMINAL:
                return st
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} still {st} after {timeout} s")
            time.sleep(self.poll_s)

    def _wait_terminal(self, run_id: int, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while True:
            if self.status(run_id) in TERMINAL:
                return True
            proc = self._procs.get(run_id)
            if proc is None:
                run = self.store.get_run(run_id)
                if not pid_alive(run["pid"], run["pid_start"]) and run["pid"] is not None:
                    # a worker we did not start is gone: it was cancelled, say so
                    self.store.set_status(run_id, "cancelled", error="cancelled: worker stopped by a signal",
                                          only_if=("running",))
                    return True
            if time.monotonic() >= end:
                return False
            time.sleep(min(self.poll_s, 0.05))

    def _signal(self, run_id: int, sig: int) -> None:
        proc = self._procs.get(run_id)
        if proc is not None:
            pid = proc.pid
        else:
            run = self.store.get_run(run_id)
            pid = run["pid"]
            if not pid_alive(pid, run["pid_start"]):
                return
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def cancel(self, run_id: int, grace_s: float = 5.0) -> str:
        """Cancel a run and return its final status.

        Raises the cancel flag (the training loop stops at its next step check);
        after ``grace_s`` seconds sends SIGTERM, after another ``grace_s`` SIGKILL.
        A queued run is cancelled at once; an ended run is left as it is.
        """
        st = self.store.status(run_id)
        if st in TERMINAL:
            return st
        if self.store.request_cancel(run_id) in TERMINAL:
            return self.store.status(run_id)
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self._signal(run_id, sig)
            if self._wait_terminal(run_id, grace_s if sig != signal.SIGKILL else max(grace_s, 5.0)):
                return self.store.status(run_id)
        # the process could not be stopped or observed: record the request honestly
        self.store.set_status(run_id, "cancelled", error="cancelled: worker did not confirm its end",
                              only_if=("running",))
        return self.store.status(run_id)

    def running(self) -> list[int]:
        """Ids of runs this runner's workers are executing."""
        with self._lock:
            return sorted(self._procs)

    def close(self) -> None:
        """Stop watching (workers keep running in their own sessions)."""
        self._stopping = True
        t = self._thread
        if t is not None:
            t.join(timeout=2)


def _describe_rc(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


# ---------------------------------------------------------------------------
def launch_detached(config, *, store: Optional[Store] = None, max_concurrent: int = 1) -> int:
    """Queue ``config`` and return its run id; a detached supervisor process runs the queue.

    The supervisor outlives the caller (own session) and exits when no run it
    started is alive and nothing queued fits.
    """
    store = store or Store()
    numa_prefix(config)
    run_id = store.add_run(config, status="queued")
    log = open(store.home / "supervisor.log", "ab")
    with log:
        subprocess.Popen([sys.executable, "-m", "gnnrec_lab.runner", "--supervise",
                          "--max-concurrent", str(max_concurrent)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                         env=dict(os.environ, GNNREC_LAB_HOME=str(store.home)))
    return run_id


def supervise(max_concurrent: int = 1, store: Optional[Store] = None) -> int:
    """Run queued work until the queue is drained and every started worker has ended."""
    runner = Runner(store or Store(), max_concurrent=max_concurrent)
    while True:
        runner.poll()
        if not runner.running() and not runner.store.run_ids("queued"):
            return 0
        # queued runs waiting on another runner's workers: keep polling until a slot frees
        time.sleep(runner.poll_s * 2)


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m gnnrec_lab.runner")
    p.add_argument("--supervise", action="store_true", required=True)
    p.add_argument("--max-concurrent", type=int, default=1)
    a = p.parse_args(argv)
    return supervise(a.max_concurrent)


if __name__ == "__main__":
    sys.exit(main())
