"""Full-ranking evaluation: the lab's against RecBole 1.2.1's full-sort evaluation, side by side.

Per dataset (default ML-100K and synth-gowalla), the same split (the lab's seeded 8:1:1 per user,
written out as RecBole atomic files) and the same model (LightGCN, dim 64, 3 layers, untrained:
ranking costs the same whatever the weights; RecBole's embedding tables are loaded with the lab's
initial ones, so both rank with the same weights and their metrics must agree, which checks that
both did the same work):

* lab: ``gnnrec_lab.training.evaluate.evaluate(model, adj, dataset, "test")``, what a run does after
  training: one propagation without gradients, every test user's scores over all items, the
  user's training and validation items masked, top 20, Recall/MRR/NDCG/Hit/Precision at 10 and 20;
* RecBole: ``Trainer.evaluate(test_data)`` with ``eval_args.mode = full``, the same work (its
  cached propagation dropped before each repeat), run in the RecBole lane's own venv
  (``make recbole``, ``.venv-recbole``: RecBole brings its own numpy/pandas pins, kept out of the
  lab's venv) as a subprocess (``benchmarks/_recbole_eval.py``).

Both sides use every core (torch threads = cores; the lab's numba threads too). Reported: median
seconds over repeats after one warm-up (measured), the ratio RecBole / lab, users ranked, the
metrics of both, the machine and its load average before and after. Target (issue 25): lab >= 5x faster than RecBole.
Nothing is asserted.

Usage: python benchmarks/bench_eval.py [--datasets ml-100k,synth-gowalla] [--repeats 3]
       [--recbole-python .venv-recbole/bin/python] [--json]
"""
from __future__ import annotations

# first, before torch: gnnrec_lab.util.runtime sets OMP_WAIT_POLICY=PASSIVE, which OpenMP reads only when it
# loads (with torch's spinning default, numba's and torch's thread teams steal each other's cores)
import gnnrec_lab  # noqa: F401

# isort: split
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gnnrec_lab import data
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.models.lightgcn import LightGCN
from gnnrec_lab.training.benchmarking import machine_line, runtime_summary
from gnnrec_lab.training.evaluate import evaluate

HERE = Path(__file__).resolve().parent
TARGET = 5.0
DIM, LAYERS = 64, 3


def write_atomic(ds, d: Path, name: str) -> Path:
    """The lab's train/valid/test pairs as RecBole benchmark files ``d/name/name.<split>.inter``
    (ids as tokens, so RecBole ranks exactly the lab's users and items)."""
    out = d / name
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        pairs = np.asarray(getattr(ds, split))
        with open(out / f"{name}.{split}.inter", "w") as f:
            f.write("user_id:token\titem_id:token\n")
            np.savetxt(f, pairs[:, :2], fmt="%d", delimiter="\t")
    return out


def lab_eval(ds, repeats: int, weights: Path) -> dict:
    """Median seconds of the lab's test evaluation (measured) and its metrics; the model's
    embedding table is saved to ``weights`` (users then items, float32) for RecBole's side."""
    from gnnrec_lab import kernels
    kernels.warmup(torch.float32)
    graph = BipartiteGraph(ds.train, ds.n_users, ds.n_items, getattr(ds, "node_order", None))
    torch.manual_seed(2020)
    model = LightGCN(ds.n_users, ds.n_items, dim=DIM, layers=LAYERS)
    model.eval()
    np.save(weights, model.embedding.detach().numpy())
    times, m = [], None
    for r in range(repeats + 1):  # the first is a warm-up (per-matrix helpers, pages)
        t0 = time.perf_counter()
        m = evaluate(model, graph.adj, ds, "test")
        if r:
            times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times), "all_seconds": times, "users": m["users"],
            "metrics": {k: v for k, v in m.items() if "@" in k}}


def recbole_eval(python: str, d: Path, name: str, n_users: int, repeats: int) -> dict:
    """RecBole's side in its own interpreter; a dict with ``error`` when it could not run."""
    cmd = [python, str(HERE / "_recbole_eval.py"), str(d), name, "--weights", str(d / f"{name}.weights.npy"),
           "--n-users", str(n_users),
           "--dim", str(DIM), "--layers", str(LAYERS),
           "--repeats", str(repeats), "--threads", str(os.cpu_count())]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the lab's in RecBole's lane
    p = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: " + (p.stderr.strip().splitlines() or ["(no output)"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="ml-100k,synth-gowalla",
                    help="comma-separated dataset names (default: ml-100k,synth-gowalla)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats per side after one warm-up (default: 3)")
    ap.add_argument("--recbole-python", default=str(HERE.parent / ".venv-recbole" / "bin" / "python"),
                    help="the RecBole lane's interpreter (default: .venv-recbole/bin/python; `make recbole`)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats: must be at least 1, got {a.repeats}")
    if not os.access(a.recbole_python, os.X_OK):
        print(f"--recbole-python: {a.recbole_python} is not an executable interpreter; build the RecBole lane "
              f"with `make recbole`", file=sys.stderr)
        return 2
    from gnnrec_lab.memory.calibrate import host_profile
    report = {"machine": machine_line(host_profile(measure_if_missing=True, quick=True)),
              "load_before": os.getloadavg(), "model": f"LightGCN dim {DIM}, {LAYERS} layers, untrained",
              "target": f"lab >= {TARGET:g}x faster than RecBole", "rows": []}
    if not a.json:
        print(report["machine"])
        print(f"model: {report['model']}; test split, all test users, train+valid items masked, K = 10, 20; "
              f"median of {a.repeats} after a warm-up (measured)")
    with tempfile.TemporaryDirectory(prefix="gnnrec-bench-eval-") as tmp:
        for name in [s.strip() for s in a.datasets.split(",") if s.strip()]:
            ds = data.load(name, progress=not a.json)
            # RecBole reads a name it ships an example of (ml-100k) from its own package: a name of our own
            rb_name = f"lab-{name}"
            write_atomic(ds, Path(tmp), rb_name)
            lab = lab_eval(ds, a.repeats, Path(tmp) / f"{rb_name}.weights.npy")
            rb = recbole_eval(a.recbole_python, Path(tmp), rb_name, ds.n_users, a.repeats)
            row = {"dataset": name, "n_users": ds.n_users, "n_items": ds.n_items, "lab": lab, "recbole": rb,
                   "load": os.getloadavg()[0],
                   "ratio": rb["seconds"] / lab["seconds"] if "seconds" in rb else None}
            report["rows"].append(row)
            if not a.json:
                print(_line(row))
    report["load_after"] = os.getloadavg()
    report["runtime"] = runtime_summary()
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"load average before {report['load_before'][0]:.1f}, after {report['load_after'][0]:.1f} "
              f"(1 min); {report['runtime']}")
    return 0


def _line(row: dict) -> str:
    lab, rb = row["lab"], row["recbole"]
    head = (f"{row['dataset']:<14} {row['n_users']:>7,} users x {row['n_items']:>7,} items: "
            f"lab {lab['seconds'] * 1e3:9.1f} ms ({lab['users']:,} users, recall@20 {lab['metrics']['recall@20']:.4f})")
    if "error" in rb:
        return head + f"; RecBole did not run: {rb['error']}"
    ratio = row["ratio"]
    return (head + f"; RecBole {rb['seconds'] * 1e3:9.1f} ms ({rb.get('users') or '?'} users, recall@20 "
            f"{rb['metrics'].get('recall@20', float('nan')):.4f}); RecBole / lab = {ratio:.1f}x "
            f"(target >= {TARGET:g}x: {'met' if ratio >= TARGET else 'NOT met'}; load {row['load']:.1f})")


if __name__ == "__main__":
    sys.exit(main())
