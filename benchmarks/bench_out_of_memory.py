"""A training run larger than a memory limit: DRAM vs file-backed large classes (issue 4, part 6).

1. Measures, without a limit, the peak memory of the same run with every class in DRAM
   (peak RSS) and with embeddings, optimizer state and graph file-backed in ``--dir``
   (peak *anonymous* RSS: the file-backed pages are page cache, which the kernel can write
   back and drop under a cgroup limit).
2. Sets a cgroup v1 memory limit halfway between the two measured peaks (or ``--limit``) and
   runs both through the lab's runner: the DRAM run should be killed by the limit and
   recorded as ``oom``; the file-backed run should finish.

Needs root and the cgroup v1 memory controller. ``--dir`` must be on a real disk: tmpfs
(/dev/shm) pages are charged as shmem and cannot be reclaimed, so they count like DRAM.

Usage: python benchmarks/bench_out_of_memory.py [--dataset synth-gowalla] [--model lightgcn]
       [--dim 512] [--layers 1] [--steps 3] [--dir DIR] [--limit SIZE] [--json]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import json, re, sys, threading, time
peaks = {}
def sample():
    while True:
        s = open('/proc/self/status').read()
        for k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            v = int(re.search(k + r':\s+(\d+)', s).group(1)) << 10
            peaks[k] = max(peaks.get(k, 0), v)
        time.sleep(0.002)
threading.Thread(target=sample, daemon=True).start()
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.training.loop import train
res = train(RunConfig(**json.loads(sys.argv[1])))
time.sleep(0.01)
print(json.dumps({"peaks": peaks, "status": res.status, "predicted": res.footprint.predicted}))
"""
FILE_CLASSES = ("embeddings", "optimizer", "graph")


def _measure(cfg: dict) -> dict:
    p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"measuring run failed: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _fs_type(path: str) -> str:
    best, fs = "", "?"
    rp = os.path.realpath(path)
    for line in open("/proc/mounts"):
        parts = line.split()
        mnt = parts[1]
        if (rp == mnt or rp.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fs = mnt, parts[2]
    return fs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="synth-gowalla")
    ap.add_argument("--model", default="lightgcn")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--eval-users", type=int, default=1000)
    ap.add_argument("--dir", default=None, help="directory for file-backed classes (default: a temporary "
                                                  "directory under /var/tmp, on disk)")
    ap.add_argument("--limit", default=None, help="memory limit (e.g. 1.7G); default halfway between the peaks")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.runs.runner import Runner
    from gnnrec_lab.runs.store import Store
    from gnnrec_lab.util.cgroup import memory_cgroup_root, parse_size
    from gnnrec_lab.util.errors import UserError
    try:
        memory_cgroup_root()
    except UserError as e:
        print(f"bench_out_of_memory: skipped: {e}", file=sys.stderr)
        return 0
    work = tempfile.mkdtemp(prefix="gnnrec-oom-", dir=a.dir or "/var/tmp")
    fs = _fs_type(work)
    base = dict(dataset=a.dataset, model=a.model, dim=a.dim, layers=a.layers, epochs=1,
                max_steps_per_epoch=a.steps, eval_users=a.eval_users, patience=0)
    placed = dict(base, placement={c: f"file:{work}" for c in FILE_CLASSES})

    dram_m = _measure(base)
    file_m = _measure(placed)
    dram_peak = dram_m["peaks"]["VmRSS"]
    file_anon = file_m["peaks"]["RssAnon"]
    limit = parse_size(a.limit) if a.limit else (dram_peak + file_anon) // 2

    store = Store(os.path.join(work, "lab-home"))
    runner = Runner(store)
    outcome = {}
    for name, cfg in (("dram", base), ("file-backed", placed)):
        t0 = time.monotonic()
        rid = runner.launch(RunConfig(name=f"oom-bench-{name}", **cfg), memory_limit_bytes=limit)
        status = runner.wait(rid, timeout=1800)
        run = store.get_run(rid)
        ev = store.events_frame(rid)
        charge = ev[ev.kind == "memory_limit"].message.tolist()
        outcome[name] = {"run_id": rid, "status": status, "error": run["error"], "seconds": time.monotonic() - t0,
                         "cgroup": charge[0] if charge else None}
    runner.close()
    info = {"machine": platform.node(), "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "file_dir": work, "file_dir_fs": fs}
    res = {"machine": info, "config": base, "file_classes": FILE_CLASSES,
           "predicted_bytes_modeled": sum(dram_m["predicted"].values()),
           "dram_peak_rss_bytes_measured": dram_peak, "dram_peaks": dram_m["peaks"],
           "file_peak_anon_bytes_measured": file_anon, "file_peaks": file_m["peaks"],
           "limit_bytes": limit, "outcome": outcome}
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    M = 2**20
    print(f"run larger than a memory limit on {info}")
    print(f"config: {base}; file-backed classes: {', '.join(FILE_CLASSES)} in {work} ({fs})")
    if fs in ("tmpfs", "ramfs"):
        print("warning: the file directory is in memory: its pages are charged as shmem and cannot be reclaimed")
    print(f"predicted footprint (modeled): {res['predicted_bytes_modeled'] / M:.0f} MiB")
    print(f"no limit, all in DRAM:   peak RSS {dram_peak / M:.0f} MiB (measured; anon "
          f"{dram_m['peaks']['RssAnon'] / M:.0f} MiB)")
    print(f"no limit, file-backed:   peak RSS {file_m['peaks']['VmRSS'] / M:.0f} MiB, of which anon "
          f"{file_anon / M:.0f} MiB (measured)")
    print(f"limit (cgroup v1): {limit / M:.0f} MiB")
    for name, o in outcome.items():
        print(f"  {name:<12} -> {o['status']:<9} in {o['seconds']:.1f} s  {o['error'] or ''}")
        if o["cgroup"]:
            print(f"  {'':<12}    {o['cgroup']}")
    ok = outcome["dram"]["status"] == "oom" and outcome["file-backed"]["status"] == "finished"
    print("as expected: DRAM run stopped by the limit (oom), file-backed run finished" if ok else
          "NOT as expected (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
