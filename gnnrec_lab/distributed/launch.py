"""Starting a run's machines and waiting for them (the launcher, in the run's worker process): each machine
``python -m gnnrec_lab.distributed.engine machine SPEC I`` in a private mount namespace (its own
/dev/shm), in an emulated cluster's network namespace on its cores when there is one; machines on
other hosts are started there. A failing machine stops every other one, and its log tail is the
error (:class:`MachineFailed`)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from gnnrec_lab.distributed.network import ip_hosts, is_local
from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.util.errors import UserError

ENTRY = "gnnrec_lab.distributed.engine"   # `python -m ENTRY machine|server|trainer SPEC I`: one process of a run
PRIVATE_SHM_ENV = "GNNREC_LAB_PRIVATE_SHM"   # set by the launcher on machines it put in `unshare -m`


class MachineFailed(UserError):
    """A machine of the run exited with an error, or the run outlived its timeout: the message says
    which, with every local machine's log tail (the trainer's own error among them), and is what the
    run records as its error (the worker records a UserError's message, not the launcher's traceback)."""


def check_isolation(isolate: bool) -> None:
    """UserError where machines cannot get a private /dev/shm each (``isolate``): no ``unshare``, or
    not root. The launcher checks it, and so does a request before its run is queued."""
    if isolate and shutil.which("unshare") is None:
        raise UserError("distributed: `unshare` (util-linux) is needed to give each machine a private /dev/shm")
    if isolate and os.geteuid() != 0:
        raise UserError("distributed: a private /dev/shm per machine needs root (unshare -m + mount)")


def launch(spec: DistSpec, timeout_s: Optional[float] = None, cluster=None,
           progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Start every machine (server + trainer in a private mount namespace; in ``cluster``'s
    network namespace on its cores when given) and wait for the trainers; returns each trainer's
    report (``trainer<i>.json``). ``progress`` gets the command to run on each machine of another
    host (default: stderr). Raises :class:`MachineFailed` with the failing process's log tail when
    one fails; the machines are stopped however this returns (also on KeyboardInterrupt/SystemExit)."""
    check_isolation(spec.isolate)
    shm_before = _shm_names()
    try:
        return _launch(spec, spec.timeout_s if timeout_s is None else timeout_s, cluster,
                       progress or (lambda line: print(line, file=sys.stderr)))
    finally:
        if not spec.isolate:   # servers killed on a shared /dev/shm leave their segments there
            for name in _shm_names() - shm_before:
                if name.startswith(spec.graph_name) or name.endswith("-kvdata-"):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join("/dev/shm", name))


def _shm_names() -> set:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def _launch(spec: DistSpec, timeout_s: float, cluster, progress: Callable[[str], None]) -> list[dict]:
    """Start the machines whose ip_config host is this one (every one of an emulated ``cluster``);
    the others must be started on their hosts (``python -m gnnrec_lab.distributed.engine machine SPEC I``,
    the work folder shared at the same path); done when every local machine exited 0 and every
    trainer's report is there."""
    procs: dict = {}
    for i, host in enumerate(ip_hosts(spec)):
        if cluster is None and not is_local(host):
            progress(f"machine {i} is {host}: start it there with `GLOO_SOCKET_IFNAME=<its interface on "
                     f"{host}'s network> taskset -c <its cores> .venv-dgl/bin/python -m {ENTRY} machine "
                     f"{spec.path('spec.json')} {i}` (docs/dgl.md)")
            continue
        cmd = [sys.executable, "-m", ENTRY, "machine", str(spec.path("spec.json")), str(i)]
        if spec.isolate:
            cmd = ["unshare", "-m", "--propagation", "private", "--"] + cmd
        # the machine mounts its own /dev/shm only when it is sure to be in a mount namespace of its
        # own; a machine started by hand on a real host has the host's /dev/shm to itself already
        env = {**os.environ, PRIVATE_SHM_ENV: "1"} if spec.isolate else dict(os.environ)
        if cluster is not None:   # exactly a real host's command, in the machine's netns on its cores
            cmd = cluster.command(i, cmd)
            env.update(cluster.env(i))
        log = open(spec.path(f"machine{i}.log"), "wb")
        procs[i] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env),
                    log)
    remote = [i for i in range(spec.partitions) if i not in procs]
    deadline = time.monotonic() + timeout_s
    failed = None
    try:
        while True:
            codes = {i: p.poll() for i, (p, _) in procs.items()}
            bad = [i for i, c in codes.items() if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes.values()) and all(spec.path(f"trainer{i}.json").exists() for i in remote):
                break
            if time.monotonic() > deadline:
                failed = -1
                break
            time.sleep(0.2)
    except BaseException:       # Ctrl-C, SIGTERM (SystemExit): stop the machines before leaving
        failed = -2
        raise
    finally:
        if failed is not None:
            for p, _ in procs.values():
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGTERM)
            for p, _ in procs.values():
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for _, log in procs.values():
            log.close()
    if failed is not None:
        which = "timed out" if failed == -1 else f"machine {failed} exited with {procs[failed][0].returncode}"
        tails = "\n".join(f"--- machine{i}.log ---\n" + log_tail(spec.path(f"machine{i}.log")) for i in procs)
        raise MachineFailed(f"distributed run failed: {which}\n{tails}")
    return [json.loads(spec.path(f"trainer{i}.json").read_text()) for i in range(spec.partitions)]


def log_tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"
