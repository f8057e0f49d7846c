"""Crash consistency: writers killed with SIGKILL at random moments, and what the next open finds.

Each trial starts one writer on a run store, kills it with SIGKILL at a moment drawn uniformly
between its start and its typical end (measured first, unkilled), waits until every process of that
store has ended, then opens the store as a user next would (`gnnrec-lab runs --json`, which marks
runs whose process is gone) and checks:

* ``PRAGMA integrity_check`` says ok (a damaged store counts);
* `runs --json` exits 0 and lists every run in the store;
* every run reads whole: its typed record, steps, kernel rows, epochs, evaluations, footprint;
* no run is left queued or running once no process of the store is alive;
* a finished run is complete: its result holds test metrics, its steps run 1..n and every step
  has its kernel rows (one transaction per step);
* a run finished in an earlier trial is still finished and unchanged (a lost finished run counts).

Writers: ``run`` (`gnnrec-lab run` in the foreground: it writes the store itself), ``detach``
(`gnnrec-lab run --detach`: the runner's supervisor and its worker; the kill hits the worker, the
supervisor or both), ``distributed`` (`gnnrec-lab distributed` in the DGL lane, .venv-dgl; only where
that lane is built). A fresh store every ``--fresh-every`` trials, so kills also land while a store is
being created. Prints the outcome of every kill by the status it left and the problems found (the
target: 0 damaged stores, 0 lost finished runs, 0 runs left running).

    .venv/bin/python benchmarks/bench_crash.py [--kills 200] [--writers run,detach] [--seed 0]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
DATASET = "synth-tiny"
# a small batch: ~75 steps an epoch on synth-tiny, so most of a run's life is spent writing steps
RUN_ARGS = ["--dataset", DATASET, "--epochs", "3", "--layers", "1", "--batch-size", "64", "--eval-every", "1",
            "--no-progress"]
WRITERS = ("run", "detach", "distributed")
SETTLE_S = 180.0   # a killed supervisor's worker finishes on its own: wait this long for it


def writer_argv(writer: str) -> list[str]:
    if writer == "run":
        return [str(VENV_BIN / "gnnrec-lab"), "run", *RUN_ARGS]
    if writer == "detach":
        return [str(VENV_BIN / "gnnrec-lab"), "run", "--detach", *RUN_ARGS]
    if writer == "distributed":
        return [str(ROOT / ".venv-dgl" / "bin" / "gnnrec-lab"), "distributed", "--dataset", DATASET, "--epochs", "2",
                "--layers", "1", "--partitions", "2"]
    raise ValueError(f"writer: one of {', '.join(WRITERS)}, got {writer!r}")


def home_pids(home: Path) -> list[int]:
    """Processes whose environment names this store's home (the writer, its supervisor, its workers)."""
    want = f"GNNREC_LAB_HOME={home}".encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{d}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if want in env and state != b"Z":
            pids.append(int(d))
    return pids


def wait_settled(home: Path, timeout: float = SETTLE_S) -> bool:
    """Wait until no process of ``home`` is alive; whether that happened in time."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not home_pids(home):
            return True
        time.sleep(0.1)
    return False


def start(writer: str, home: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(writer_argv(writer), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def kill(writer: str, proc: subprocess.Popen, home: Path, rng: random.Random) -> str:
    """SIGKILL the writer now; for ``detach``, its worker, its supervisor or both. Says what was hit."""
    if writer != "detach":
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)   # the writer and anything it started (DistDGL's machines)
        proc.wait()
        return "writer"
    proc.wait()   # `run --detach` returns at once; the supervisor and the worker are what write
    pids = home_pids(home)
    if not pids:
        return "nothing (ended before the kill)"
    target = rng.choice(("worker", "supervisor", "both"))
    hit = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        role = "supervisor" if b"--supervise" in cmd else "worker" if b"gnnrec_lab.runs.worker" in cmd else None
        if role and target in (role, "both"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            hit.append(role)
    return "+".join(sorted(hit)) or "nothing (ended before the kill)"


def check(home: Path, finished_before: dict) -> tuple[list[str], dict]:
    """Open the store as a user next would and check it (see the module's docstring). Returns the
    problems found and the finished runs now (id -> their test Recall@20 and step count)."""
    from gnnrec_lab.commands.cli import main as cli
    from gnnrec_lab.runs.store import Store
    problems = []
    old = os.environ.get("GNNREC_LAB_HOME")
    os.environ["GNNREC_LAB_HOME"] = str(home)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli(["runs", "--json"])
    finally:
        if old is None:
            del os.environ["GNNREC_LAB_HOME"]
        else:
            os.environ["GNNREC_LAB_HOME"] = old
    if not (home / "lab.sqlite").exists():
        return ([] if rc == 0 else [f"`runs --json` exit {rc} on a home without a store: {err.getvalue()[-300:]}"]), {}
    if rc != 0:
        return [f"`runs --json` exit {rc}: {err.getvalue().strip()[-300:]}"], {}
    listed = {r["id"] for r in json.loads(out.getvalue())}
    store = Store(home)
    finished = {}
    try:
        ok = store.integrity_check()
        if ok != "ok":
            return [f"damaged store: integrity_check says {ok}"], {}
        ids = store.run_ids()
        if set(ids) != listed:
            problems.append(f"`runs --json` lists {sorted(listed)}, the store holds {sorted(ids)}")
        for rid in ids:
            rec = store.run_record(rid)
            run = store.get_run(rid)
            steps, kernels = store.steps_frame(rid), store.kernels_frame(rid)
            store.epochs_frame(rid), store.evals_frame(rid), store.footprint_frame(rid)
            if run["damaged"]:
                problems.append(f"run {rid}: damaged columns {run['damaged']}")
            if run["status"].is_active:
                problems.append(f"run {rid} left {run['status']} with no process of the store alive (pid {run['pid']})")
            first = int(steps.step.iloc[0]) if len(steps) else 0   # the loop counts steps from 1
            if first not in (0, 1) or list(steps.step) != list(range(first, first + len(steps))):
                problems.append(f"run {rid}: steps are not one run of numbers from 0 or 1 "
                                f"({len(steps)} steps, {first} to {int(steps.step.iloc[-1])})")
            if len(steps) and set(kernels.step) != set(steps.step):
                problems.append(f"run {rid}: {len(set(steps.step) - set(kernels.step))} steps without kernel rows")
            if run["status"] == "finished":
                recall = rec.result.test.get("recall@20")
                if recall is None or not len(steps):
                    problems.append(f"run {rid} finished but incomplete (test recall {recall}, {len(steps)} steps)")
                finished[rid] = (recall, len(steps))
        for rid, was in finished_before.items():
            if finished.get(rid) != was:
                problems.append(f"run {rid} was finished {was}, now {finished.get(rid)} "
                                f"({store.get_run(rid)['status'] if rid in ids else 'missing'})")
    finally:
        store.close()
    return problems, finished


def run_ids(home: Path) -> list[int]:
    return [r for r, _ in statuses(home)]


def statuses(home: Path, ids=None) -> list[tuple[int, str]]:
    """``(run id, status)`` of the runs in ``home``'s store (``ids``: only those); none without a store."""
    from gnnrec_lab.runs.store import Store
    if not (home / "lab.sqlite").exists():
        return []
    s = Store(home)
    try:
        return [(r, str(s.status(r))) for r in (s.run_ids() if ids is None else ids)]
    finally:
        s.close()


def typical_seconds(writer: str, home: Path, env: dict) -> float:
    """One unkilled run of ``writer``: the span to draw kill moments from."""
    t0 = time.monotonic()
    start(writer, home, env).wait()
    wait_settled(home)
    return time.monotonic() - t0


def crash_trials(kills: int, writers=("run", "detach"), seed: int = 0, fresh_every: int = 10, workdir=None,
                 log=print) -> dict:
    """``kills`` SIGKILL trials over ``writers`` (round robin); returns a summary with ``problems``."""
    rng = random.Random(seed)
    workdir = Path(workdir or tempfile.mkdtemp(prefix="gnnrec-lab-crash-"))
    base_env = dict(os.environ, GNNREC_LAB_DATA=os.environ.get("GNNREC_LAB_DATA", str(ROOT / "data")),
                    PYTHONUNBUFFERED="1")
    subprocess.run([str(VENV_BIN / "gnnrec-lab"), "data", "prepare", DATASET], env=base_env, check=True,
                   capture_output=True)
    spans = {}
    for w in writers:
        h = workdir / f"typical-{w}"
        spans[w] = typical_seconds(w, h, dict(base_env, GNNREC_LAB_HOME=str(h)))
        log(f"{w}: an unkilled run takes {spans[w]:.1f} s (kills are drawn from 0 to that)")
    outcomes, problems, hits = Counter(), [], Counter()
    home, finished, t_start = None, {}, time.monotonic()
    for i in range(kills):
        if home is None or i % fresh_every == 0:
            home, finished = workdir / f"home{i}", {}
        writer = writers[i % len(writers)]
        env = dict(base_env, GNNREC_LAB_HOME=str(home))
        before = set(run_ids(home))
        proc = start(writer, home, env)
        delay = rng.uniform(0.0, spans[writer])
        time.sleep(delay)
        hits[kill(writer, proc, home, rng)] += 1
        if not wait_settled(home):
            problems.append(f"kill {i}: processes of {home} still alive {SETTLE_S:.0f} s after the kill")
            for pid in home_pids(home):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            wait_settled(home, 10)
        found, finished = check(home, finished)
        problems += [f"kill {i} ({writer} at {delay:.2f} s): {p}" for p in found]
        new = [r for r in run_ids(home) if r not in before]
        for _rid, status in statuses(home, new):
            outcomes[f"{writer}: {status}"] += 1
        if not new:
            outcomes[f"{writer}: no run recorded (killed before it wrote one)"] += 1
        if (i + 1) % 10 == 0:
            log(f"  {i + 1}/{kills} kills, {len(problems)} problems, {time.monotonic() - t_start:.0f} s")
    return {"kills": kills, "writers": list(writers), "seed": seed, "outcomes": dict(outcomes), "hits": dict(hits),
            "problems": problems, "seconds": time.monotonic() - t_start, "spans_s": spans}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--writers", default="run,detach",
                    help="comma-separated, among run, detach, distributed (DGL lane) (default run,detach)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh-every", type=int, default=10, help="a new store every N kills (default 10)")
    args = ap.parse_args()
    writers = tuple(w.strip() for w in args.writers.split(",") if w.strip())
    for w in writers:
        writer_argv(w)
    if "distributed" in writers and not (ROOT / ".venv-dgl" / "bin" / "python").exists():
        print("bench_crash: the distributed writer needs the DGL lane (make dgl)", file=sys.stderr)
        return 2
    import psutil
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, {psutil.virtual_memory().total / 2**30:.1f} GiB, Python "
          f"{platform.python_version()}, SQLite {__import__('sqlite3').sqlite_version}")
    r = crash_trials(args.kills, writers, args.seed, args.fresh_every)
    print(f"{r['kills']} SIGKILLs over {', '.join(writers)} in {r['seconds']:.0f} s (seed {r['seed']}):")
    for k, v in sorted(r["outcomes"].items()):
        print(f"  {v:4d}  left the run {k}")
    print("  what the kill hit: " + ", ".join(f"{k} {v}" for k, v in sorted(r["hits"].items())))
    damaged = sum("damaged store" in p for p in r["problems"])
    lost = sum("was finished" in p for p in r["problems"])
    running = sum(" left " in p for p in r["problems"])
    print(f"damaged stores: {damaged}; lost finished runs: {lost}; runs left running: {running}; "
          f"problems in all: {len(r['problems'])}")
    for p in r["problems"][:20]:
        print("  " + p)
    return 1 if r["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
