"""Scale: generate synth-xl (5M users, 1M items, 100M interactions) and run
LightGCN training steps on it; compare measured peak RSS with the footprint
the lab predicts (target: peak RSS within 1.3x of the prediction).

Everything here is measured on this machine except the predicted footprint,
which is modeled (gnnrec_lab.memory.footprint).

Usage: python benchmarks/bench_scale_xl.py [--dataset synth-xl] [--steps 2] [--layers 3] [--dim 64]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

from gnnrec_lab import RunConfig, run
from gnnrec_lab.data import load


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="synth-xl")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    ds = load(a.dataset, progress=not a.json)
    t_load = time.perf_counter() - t0
    cfg = RunConfig(dataset=a.dataset, layers=a.layers, dim=a.dim, batch_size=a.batch_size, epochs=1,
                    max_steps_per_epoch=a.steps, eval_users=2000, patience=0)
    r = run(cfg, dataset=ds)
    pred = r.footprint.predicted_total if r.footprint.predicted else float("nan")
    peak = r.footprint.peak_rss
    out = {"dataset": a.dataset, "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
           "prepare_or_load_s": t_load, "steps": r.steps,
           "step_s": r.train_seconds / max(r.steps, 1),
           "predicted_footprint_GiB (modeled)": pred / 2**30, "peak_rss_GiB (measured)": peak / 2**30,
           "ratio_peak_over_predicted": peak / pred, "by_class_GiB (modeled)":
               {k: v / 2**30 for k, v in r.footprint.predicted.items()}}
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:36s} {v:.3f}" if isinstance(v, float) else f"{k:36s} {v}")
        print("target: peak RSS within 1.3x of the predicted footprint:",
              "met" if out["ratio_peak_over_predicted"] <= 1.3 else "NOT met")


if __name__ == "__main__":
    main()
