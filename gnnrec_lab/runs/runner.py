"""Launching, watching and cancelling runs as subprocesses.

``Runner(store).launch(config)`` returns a run id at once; the run waits in the
``queued`` state until a slot is free (``max_concurrent``) and then runs as
``[numactl ...] python -m gnnrec_lab.runs.worker RUN_ID`` in its own session, with
stdout/stderr in ``$GNNREC_LAB_HOME/runs/<id>/``. A monitor thread reaps
finished workers, classifies deaths the worker could not record itself
(SIGKILL without a cancel request → ``oom`` when the run's memory cgroup or the kernel log
records an OOM kill, else ``failed`` "killed (SIGKILL)"), keeps the stderr tail of failed
runs and starts the next queued run. Claiming a queued run is one store
transaction, so several runners (a dashboard, a detached supervisor, a CLI
``wait``) can share a store without starting a run twice.

``launch(config, memory_limit_bytes=N)`` runs the worker in its own memory cgroup
(v1, or v2 where only the unified hierarchy has the memory controller)
(``<memory mount>/<our cgroup>/gnnrec-lab/run-<id>-<tag>``) with a
hard limit of N bytes; it joins the cgroup from a one-line ``sh`` wrapper before it
execs, so nothing it allocates escapes the limit. After the worker exits the
cgroup's ``oom_kill`` counter tells a kill by the limit (status ``oom``, "killed
by the memory limit of N bytes (cgroup ...)") from any other death, its peak
charge goes to the run's events, and the cgroup is removed (and the lab's parent
cgroup directory too, once it is empty).

``launch(config, train_fn=..., options=..., python=...)`` trains the run with another callable
than the worker's default, given ``options`` as keyword arguments, in interpreter ``python`` (the
run's request, stored in its row as it is queued): a DistDGL run is one
(:func:`gnnrec_lab.distributed.engine.runner_request` makes its request), so it queues, runs, is
watched and cancelled as a full-graph run is.

``follow(run_id)`` waits for a run in the foreground (``gnnrec-lab distributed``): it shows the
run's events as they come, and Ctrl-C or SIGTERM of the command cancels the run through the runner.

``launch_detached(config)`` is for ``gnnrec-lab run --detach``: it queues the
run and starts a detached supervisor (``python -m gnnrec_lab.runs.runner
--supervise``) that runs queued work until the queue is empty.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Callable, Optional, Sequence

from gnnrec_lab.config.bounds import MAX_SECONDS, integer, number
from gnnrec_lab.config.checks import Interval, Kind, Text, check
from gnnrec_lab.config.run import RunConfig, expect_config
from gnnrec_lab.memory.placement import numa_prefix
from gnnrec_lab.runs.store import FULL_DISK_BYTES, Store
from gnnrec_lab.runs.worker import tail_lines
from gnnrec_lab.util.cgroup import MemoryCgroup, check_limit, limit_reached, memory_limit_of, oom_verdict, write_limit
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.home import no_space_left
from gnnrec_lab.util.proc import pid_alive, proc_start_ticks
from gnnrec_lab.util.signals import SIGNAL_WORDS
from gnnrec_lab.util.status import RunStatus

# a running row with no pid yet is being spawned; after this long its spawner is presumed dead (s)
SPAWN_GRACE_S = 60.0
# after a worker recorded its final status, how long wait() gives it to exit (s)
REAP_GRACE_S = 10.0
# a run cancelled by a signal to the command following it (follow): how long its worker gets to stop
# at a step, and then after SIGTERM (a DistDGL worker stops its machines, up to 10 s each), before SIGKILL
FOLLOW_GRACE_S = 15.0
# What a Runner accepts (gnnrec_lab.config.checks).
RUNNER_CONSTRAINTS: dict[str, list] = {
    "max_concurrent": [Interval(integer, lo=1, hi=None)],
    "pick_up": [Kind(bool, "True or False")],
    "python": [Text("the path of a Python interpreter", strip=True, nul=False)],
    "poll_s": [Interval(number, lo=0, lo_open=True, hi=MAX_SECONDS, unit="s")],
}
# What a run's request to Runner.launch accepts: its training callable, keyword arguments, interpreter.
REQUEST_CONSTRAINTS: dict[str, list] = {
    "train_fn": [None, Text("a training function as 'module:function'", strip=True, nul=False)],
    "options": [None, Kind(dict, "a dict of keyword arguments")],
    "python": [None, Text("the path of a Python interpreter", strip=True, nul=False)],
}


# ---------------------------------------------------------------------------
def recover_dead(store: Store, exclude: Sequence[int] = ()) -> list[int]:
    """Close ``running`` runs whose worker process is gone; returns their ids.

    Such a run becomes ``cancelled`` when a cancel was requested (the escalation
    killed it), else ``failed`` with "worker process disappeared".
    """
    dead = []
    now = time.time()
    for run_id in store.run_ids(RunStatus.RUNNING):
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
            if store.set_status(run_id, RunStatus.CANCELLED, error="cancelled: worker stopped by a signal",
                                only_if=(RunStatus.RUNNING,)):
                dead.append(run_id)
            continue
        run_dir = store.home / "runs" / str(run_id)
        tail = tail_lines(run_dir / "stderr.log") or None
        limit = memory_limit_of(run_dir)
        verdict = oom_verdict(limit, None)
        if limit and limit.get("cgroup"):
            MemoryCgroup(limit["cgroup"], limit["limit_bytes"]).remove(timeout_s=0.5)
        if verdict:
            if store.set_status(run_id, RunStatus.OOM, error=verdict, stderr_tail=tail, only_if=(RunStatus.RUNNING,)):
                dead.append(run_id)
            continue
        error = (f"worker process disappeared (pid {run['pid']} is gone without recording a final status)"
                 + full_disk_note(store.home, tail))
        if store.set_status(run_id, RunStatus.FAILED, error=error, stderr_tail=tail, only_if=(RunStatus.RUNNING,)):
            dead.append(run_id)
    return dead


def full_disk_note(home, tail: Optional[str]) -> str:
    """What a worker that ended without recording its end gets added to its error when the run
    store's ``home`` is full (its stderr ``tail`` says so, or under :data:`FULL_DISK_BYTES` is free
    there); '' otherwise."""
    full = bool(tail) and ("no space left" in tail.lower() or "disk is full" in tail.lower())
    if not full:
        try:
            full = shutil.disk_usage(home).free < FULL_DISK_BYTES
        except OSError:
            return ""
    return (f": the disk is full, {no_space_left(home)}, so the worker could not record its own end; what it "
            f"wrote before is kept") if full else ""


class Runner:
    """Starts queued runs as worker subprocesses, at most ``max_concurrent`` at a time.

    On creation it marks runs whose worker vanished as failed and (with
    ``pick_up=True``) starts queued runs that fit.
    """

    def __init__(self, store: Optional[Store] = None, max_concurrent: int = 1, *, pick_up: bool = True,
                 python: str = sys.executable, poll_s: float = 0.1):
        check(RUNNER_CONSTRAINTS, dict(max_concurrent=max_concurrent, pick_up=pick_up, python=python, poll_s=poll_s))
        self.store = store or Store()
        self.max_concurrent = max_concurrent
        self.pick_up = pick_up
        self.python = python
        self.poll_s = poll_s
        self._procs: dict[int, subprocess.Popen] = {}
        self._cgroups: dict[int, MemoryCgroup] = {}
        self._lock = threading.RLock()
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        recover_dead(self.store)
        if pick_up:
            self.schedule()

    # -- launching ----------------------------------------------------------
    def launch(self, config, sweep: Optional[str] = None, *, memory_limit_bytes=None, train_fn: Optional[str] = None,
               options: Optional[dict] = None, python: Optional[str] = None) -> int:
        """Queue ``config`` and start it when a slot is free; returns the run id at once.

        ``memory_limit_bytes`` (int or a size like ``"2G"``): run the worker in its own
        cgroup v1 memory cgroup with that hard limit; a worker the kernel kills for
        exceeding it ends as ``oom`` ("killed by the memory limit of N bytes (cgroup)").
        Raises UserError at once where no memory cgroup can be created.

        ``train_fn`` (``'module:function'``), ``options`` and ``python``: the worker trains with
        that callable instead of its default, passing ``options`` as keyword arguments, and runs in
        interpreter ``python`` instead of the runner's (a DistDGL run:
        ``launch(config, **distributed.engine.runner_request(config, partitions=2))``).
        """
        expect_config(config, "Runner.launch")
        numa_prefix(config)  # refuse an impossible placement before anything is recorded
        limit = check_limit(memory_limit_bytes)
        check(REQUEST_CONSTRAINTS, dict(train_fn=train_fn, options=options, python=python))
        request = {k: v for k, v in dict(train_fn=train_fn, options=options, python=python).items() if v is not None}
        try:
            json.dumps(request)
        except (TypeError, ValueError) as e:   # before the run is recorded: its worker reads them as JSON
            raise ConfigError("options", f"must be JSON values (numbers, text, lists, dicts), got {options!r} ({e})") \
                from None
        # the request goes in with the queued row: a runner claiming it reads both at once
        run_id = self.store.add_run(config, status=RunStatus.QUEUED, sweep=sweep, request=request)
        # another runner sharing this store could claim the run before the limit file exists
        # (a ~1 ms window); runs launched through one runner or launch_detached are safe
        if limit is not None:
            write_limit(self.store.run_dir(run_id), {"limit_bytes": limit})
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
        run_dir = self.store.run_dir(run_id)
        try:
            config = RunConfig.from_dict(self.store.get_run(run_id, need=("config",))["config"])
            python = self.store.run_request(run_id).get("python") or self.python
            argv = numa_prefix(config) + [python, "-m", "gnnrec_lab.runs.worker", str(run_id)]
            limit = memory_limit_of(run_dir)
            if limit is not None:
                cg = MemoryCgroup.create(f"run-{run_id}-{uuid.uuid4().hex[:8]}", limit["limit_bytes"])
                self._cgroups[run_id] = cg
                write_limit(run_dir, {**limit, "limit_bytes": cg.limit_bytes, "cgroup": str(cg.path),
                                       "cgroup_version": cg.version})
                argv = cg.wrap(argv)
            env = dict(os.environ, GNNREC_LAB_HOME=str(self.store.home), PYTHONUNBUFFERED="1")
            with open(run_dir / "stdout.log", "ab") as out, open(run_dir / "stderr.log", "ab") as err:
                # own session: Ctrl-C in the launching shell does not reach it, and
                # cancel can signal the whole group (numactl execs, so pgid == pid)
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                        start_new_session=True)
        except Exception as e:  # noqa: BLE001 - a run that cannot start is recorded as failed
            msg = str(e) if isinstance(e, UserError) else f"could not start worker: {type(e).__name__}: {e}"
            self.store.set_status(run_id, RunStatus.FAILED, error=msg, only_if=(RunStatus.RUNNING,))
            cg = self._cgroups.pop(run_id, None)
            if cg is not None:
                cg.remove(timeout_s=0.5)
            return
        self._procs[run_id] = proc
        self.store.set_fields(run_id, pid=proc.pid, pid_start=proc_start_ticks(proc.pid))

    # -- watching ------------------------------------------------------------
    def _ensure_monitor(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            if not self._procs and not (self.pick_up and self.store.run_ids(RunStatus.QUEUED)):
                return
            self._thread = threading.Thread(target=self._monitor, name="gnnrec-lab-runner", daemon=True)
            self._thread.start()

    def _monitor(self) -> None:
        while not self._stopping:
            self.poll()
            with self._lock:
                idle = not self._procs and not (self.pick_up and self.store.run_ids(RunStatus.QUEUED))
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
                    self._finalize(run_id, rc, proc.pid)
            recover_dead(self.store, exclude=tuple(self._procs))
            if self.pick_up:
                self.schedule()

    def _finalize(self, run_id: int, rc: int, pid: Optional[int] = None) -> None:
        """Record how a worker that exited with ``rc`` ended, unless it recorded that itself.

        A SIGKILL is ``oom`` only when the run's memory cgroup or the kernel log says the OOM
        killer did it; otherwise it is ``failed`` with "killed (SIGKILL)".
        """
        run_dir = self.store.run_dir(run_id)
        tail = tail_lines(run_dir / "stderr.log") or None
        verdict, cg = None, self._cgroups.pop(run_id, None)
        if cg is not None:
            # read the kernel's counters before the cgroup goes away
            limit = memory_limit_of(run_dir) or {}
            verdict = oom_verdict(limit, rc)
            use = cg.usage()
            write_limit(run_dir, {**limit, "limit_bytes": cg.limit_bytes, "cgroup": str(cg.path),
                                   "cgroup_version": cg.version, "max_usage_bytes": use["max_usage_bytes"],
                                   "failcnt": use["failcnt"], "oom_kills": cg.oom_kills()})
            self.store.add_event(run_id, "memory_limit",
                                 f"cgroup limit {cg.limit_bytes:,} bytes; peak charge {use['max_usage_bytes']:,} "
                                 f"bytes (page cache included; measured); "
                                 f"{'reached the limit' if limit_reached(use) else 'stayed under the limit'}")
            cg.remove()
        run = self.store.get_run(run_id)
        if run["status"].is_terminal:
            if run["status"].is_crash and not run["stderr_tail"] and tail:
                self.store.set_fields(run_id, stderr_tail=tail)
            return
        if verdict:
            status, error = RunStatus.OOM, verdict
        elif cg is not None and rc == 125:
            status, error = RunStatus.FAILED, f"could not put the worker into its memory cgroup {cg.path} (see stderr)"
        elif run["cancel_requested"]:
            status, error = RunStatus.CANCELLED, f"cancelled: worker ended by {_describe_rc(rc)}"
        elif rc == -signal.SIGKILL:
            line = kernel_oom_kill(pid) if pid else None
            if line:
                status, error = RunStatus.OOM, f"out of memory: the kernel's OOM killer killed the worker ({line})"
            else:
                status, error = RunStatus.FAILED, ("killed (SIGKILL): the worker was killed by a signal without a "
                                                   "cancel request; neither its memory cgroup nor the kernel log "
                                                   "records an out-of-memory kill, so it was killed from outside "
                                                   "(kill -9?)")
        elif rc == 0:
            status, error = RunStatus.FAILED, "worker exited without recording a final status"
        else:
            status, error = RunStatus.FAILED, f"worker ended by {_describe_rc(rc)}"
        if status is RunStatus.FAILED:
            error += full_disk_note(self.store.home, tail)
        self.store.set_status(run_id, status, error=error, stderr_tail=tail,
                              only_if=(RunStatus.RUNNING, RunStatus.QUEUED))

    # -- queries and control ------------------------------------------------
    def status(self, run_id: int) -> RunStatus:
        """Current status of ``run_id`` (after reaping any worker that just ended)."""
        self.poll()
        return self.store.status(run_id)

    def wait(self, run_id: int, timeout: Optional[float] = None) -> RunStatus:
        """Block until ``run_id`` ends; returns its final status. Raises TimeoutError after ``timeout`` s.

        For a worker this runner started, it also waits (up to ``REAP_GRACE_S``) for the process
        to exit after recording its status, so its memory cgroup's counters are final.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        reap_by = None
        while True:
            st = self.status(run_id)
            if st.is_terminal:
                if run_id not in self._procs:
                    return st
                reap_by = reap_by or time.monotonic() + REAP_GRACE_S
                if time.monotonic() >= reap_by:
                    return st
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} still {st} after {timeout} s")
            time.sleep(self.poll_s)

    def _wait_terminal(self, run_id: int, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while True:
            if self.status(run_id).is_terminal:
                return True
            proc = self._procs.get(run_id)
            if proc is None:
                run = self.store.get_run(run_id)
                if not pid_alive(run["pid"], run["pid_start"]) and run["pid"] is not None:
                    # a worker we did not start is gone: it was cancelled, say so
                    self.store.set_status(run_id, RunStatus.CANCELLED, error="cancelled: worker stopped by a signal",
                                          only_if=(RunStatus.RUNNING,))
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

    def cancel(self, run_id: int, grace_s: float = 5.0) -> RunStatus:
        """Cancel a run and return its final status.

        Raises the cancel flag (the training loop stops at its next step check);
        after ``grace_s`` seconds sends SIGTERM, after another ``grace_s`` SIGKILL.
        A queued run is cancelled at once; an ended run is left as it is.
        """
        st = self.store.status(run_id)
        if st.is_terminal:
            return st
        if self.store.request_cancel(run_id).is_terminal:
            return self.store.status(run_id)
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self._signal(run_id, sig)
            if self._wait_terminal(run_id, grace_s if sig != signal.SIGKILL else max(grace_s, 5.0)):
                return self.store.status(run_id)
        # the process could not be stopped or observed: record the request honestly
        self.store.set_status(run_id, RunStatus.CANCELLED, error="cancelled: worker did not confirm its end",
                              only_if=(RunStatus.RUNNING,))
        return self.store.status(run_id)

    def follow(self, run_id: int, progress: Optional[Callable[[str], None]] = None,
               grace_s: float = FOLLOW_GRACE_S) -> tuple[RunStatus, Optional[int]]:
        """Wait for ``run_id`` in the foreground, as a command in a terminal does; returns ``(its final
        status, the signal that stopped the wait or None)`` (the command then exits ``128 + signal``).

        ``progress`` gets a line when the run waits in the queue and each event the run records, as
        it comes. Ctrl-C (SIGINT) or SIGTERM of this process cancels the run through :meth:`cancel`
        (its flag, then SIGTERM, then SIGKILL to its worker, ``grace_s`` apart), after an event that
        names the signal: the run ends recorded as cancelled and no worker of it is left. Signals
        that arrive while it is cancelled are noted, never raised, so the cancel completes. In the
        main thread only (elsewhere signals are not this call's); a signal ignored on purpose
        (``nohup``, a background job) stays ignored; the previous handlers are put back.
        """
        say = progress or (lambda _line: None)
        got: list[int] = []

        def note(signum, _frame):
            got.append(signum)
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNAL_WORDS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    previous[sig] = signal.signal(sig, note)
        try:
            seen, told_queued = 0, False
            while not got:
                status = self.status(run_id)
                for number, _kind, message in self.store.events_after(run_id, seen):
                    say(message)
                    seen = number
                if status is RunStatus.QUEUED and not told_queued:
                    told_queued = True
                    running = ", ".join(map(str, self.store.run_ids(RunStatus.RUNNING))) or "none"
                    say(f"run {run_id} is queued: it starts when fewer than {self.max_concurrent} runs of this "
                        f"store are running (running now: {running})")
                if status.is_terminal:
                    return self.wait(run_id), None   # reaps the worker this runner started
                time.sleep(self.poll_s)
            signum = got[0]
            self.store.add_event(run_id, "cancel", f"cancel requested: the command following the run got "
                                                   f"{SIGNAL_WORDS[signum]}")
            say(f"run {run_id}: {SIGNAL_WORDS[signum]}, cancelling the run (its worker gets {grace_s:g} s to stop "
                f"at a step, then SIGTERM)")
            self.cancel(run_id, grace_s=grace_s)
            return self.wait(run_id), signum
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

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


KMSG = "/dev/kmsg"


def kernel_oom_kill(pid: int, kmsg: Optional[str] = None) -> Optional[str]:
    """The kernel log line saying the OOM killer killed process ``pid``, or None (also where
    the log cannot be read: no /dev/kmsg in a container, or not permitted)."""
    import re
    pat = re.compile(rf"(Killed process {int(pid)}\b|oom-kill:.*\bpid={int(pid)}\b)")
    try:
        fd = os.open(kmsg or KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    found = None
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: the ring buffer overwrote what we were reading; go on
                continue
            if not chunk:
                break
            for line in chunk.decode("utf-8", "replace").splitlines():   # /dev/kmsg: one record per read
                msg = line.split(";", 1)[-1].strip()
                if pat.search(msg):
                    found = msg[:200]
    finally:
        os.close(fd)
    return found



def _describe_rc(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


# ---------------------------------------------------------------------------
def launch_detached(config, *, store: Optional[Store] = None, max_concurrent: int = 1,
                    memory_limit_bytes=None) -> int:
    """Queue ``config`` and return its run id; a detached supervisor process runs the queue.

    The supervisor outlives the caller (own session) and exits when no run it
    started is alive and nothing queued fits. ``memory_limit_bytes``: as in
    :meth:`Runner.launch`.
    """
    store = store or Store()
    numa_prefix(config)
    limit = check_limit(memory_limit_bytes)
    run_id = store.add_run(config, status=RunStatus.QUEUED)
    if limit is not None:
        write_limit(store.run_dir(run_id), {"limit_bytes": limit})
    log = open(store.home / "supervisor.log", "ab")
    with log:
        subprocess.Popen([sys.executable, "-m", "gnnrec_lab.runs.runner", "--supervise",
                          "--max-concurrent", str(max_concurrent)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                         env=dict(os.environ, GNNREC_LAB_HOME=str(store.home)))
    return run_id


def supervise(max_concurrent: int = 1, store: Optional[Store] = None) -> int:
    """Run queued work until the queue is drained and every started worker has ended."""
    runner = Runner(store or Store(), max_concurrent=max_concurrent)
    while True:
        runner.poll()
        if not runner.running() and not runner.store.run_ids(RunStatus.QUEUED):
            return 0
        # queued runs waiting on another runner's workers: keep polling until a slot frees
        time.sleep(runner.poll_s * 2)


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m gnnrec_lab.runs.runner")
    p.add_argument("--supervise", action="store_true", required=True)
    p.add_argument("--max-concurrent", type=int, default=1)
    a = p.parse_args(argv)
    return supervise(a.max_concurrent)


if __name__ == "__main__":
    sys.exit(main())
