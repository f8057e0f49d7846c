"""Paired A/B of the kernels of two checkouts under the same CPU-bound antagonists.

On a shared machine the load drifts by more than the effect being measured, so two separate
``bench kernels`` runs cannot compare two kernel versions. Here one worker process per checkout
(``PYTHONPATH`` = that tree) builds the same power-law graph and waits; the parent then starts N
antagonists (:func:`gnnrec_lab.training.benchmarking.antagonists`) and asks the workers for one forward +
backward of every kernel in turn, alternating which goes first, so both see the same load.
Reported per kernel and phase: each side's median seconds over the rounds (measured) and the
median of the paired ratios (baseline / this checkout). Nothing is asserted.

Usage: python benchmarks/bench_antagonist_ab.py --baseline-tree /path/to/other/checkout
       [--antagonists 0,1,2] [--rounds 7] [--size large] [--dim 64] [--kernels spmm,sddmm_dot] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from gnnrec_lab.training.benchmarking import antagonists, runtime_summary

HERE = Path(__file__).resolve().parent

WORKER = r"""
import gc, json, sys
import torch
from gnnrec_lab import kernels as K
from gnnrec_lab.training.benchmarking import SIZES, _run_kernel, power_law_graph
from gnnrec_lab.util.recorder import Recorder, use_recorder
size, dim, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
K.warmup(torch.float32)
adj = power_law_graph(*SIZES[size]).adj
def once(seed):
    out = {}
    for name in names:
        rec = Recorder()
        rec.phase = "forward"
        with use_recorder(rec):
            _run_kernel(name, adj, dim, adj.n_rows, seed)
        for k in rec.records:
            out[f"{k.name} {k.phase}"] = k.ns / 1e9
        gc.collect()
    return out
once(0)  # warm-up: per-matrix helpers, pages
print("ready", flush=True)
for line in sys.stdin:
    print(json.dumps(once(int(line))), flush=True)
"""


def _worker(tree: Path, args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.Popen([sys.executable, "-c", WORKER, args.size, str(args.dim), args.kernels], cwd=tree, env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p


def _ask(p: subprocess.Popen, seed: int) -> dict:
    p.stdin.write(f"{seed}\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"worker {p.pid} ended")
    return json.loads(line)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-tree", required=True, help="a checkout of the commit to compare against")
    ap.add_argument("--antagonists", default="0,1,2", help="antagonist counts, comma-separated (default: 0,1,2)")
    ap.add_argument("--rounds", type=int, default=7, help="paired rounds per antagonist count (default: 7)")
    ap.add_argument("--size", default="large")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--kernels", default="spmm,sddmm_dot")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    trees = {"baseline": Path(a.baseline_tree).resolve(), "this": HERE.parent}
    workers = {k: _worker(t, a) for k, t in trees.items()}
    report = {"runtime": runtime_summary(), "trees": {k: str(t) for k, t in trees.items()}, "size": a.size,
              "dim": a.dim, "rows": []}
    try:
        for k, p in workers.items():
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {k} worker did not start")
        for n in [int(x) for x in a.antagonists.split(",")]:
            got = {"baseline": [], "this": []}
            loads = []
            with antagonists(n):
                for r in range(a.rounds):
                    order = ("baseline", "this") if r % 2 == 0 else ("this", "baseline")
                    for side in order:
                        got[side].append(_ask(workers[side], r + 1))
                    loads.append(os.getloadavg()[0])
            for key in got["this"][0]:
                b = [g[key] for g in got["baseline"]]
                t = [g[key] for g in got["this"]]
                row = {"antagonists": n, "kernel": key, "baseline_s": statistics.median(b),
                       "this_s": statistics.median(t), "paired_ratio": statistics.median(x / y for x, y in zip(b, t)),
                       "load_min": min(loads), "load_max": max(loads), "rounds": a.rounds}
                report["rows"].append(row)
                if not a.json:
                    print(f"antagonists {n}  {key:<20} baseline {row['baseline_s'] * 1e3:8.1f} ms  this "
                          f"{row['this_s'] * 1e3:8.1f} ms  baseline/this (median of paired) "
                          f"{row['paired_ratio']:.2f}x  load {row['load_min']:.1f}..{row['load_max']:.1f}", flush=True)
    finally:
        for p in workers.values():
            p.stdin.close()
            p.wait()
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(report["runtime"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
