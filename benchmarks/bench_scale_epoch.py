"""Scale: one full epoch of full-graph LightGCN training on a big graph at a large batch, and the
validation Recall@20 it reaches (default synth-xl: 5M users, 1M items, 80.4M training
interactions; batch 1,048,576, the sqrt learning-rate rule from reference batch 2,048, linear
warm-up over the first tenth of the epoch).

It trains through ``gnnrec_lab.training.loop`` (the propagation the lab uses: community order, side-by-side
SpMM) and reports, all measured on this machine: the epoch's wall time (training steps only and
start to end, which adds loading the split, building the graph, compiling and the evaluation), the
step time (median and spread), the validation Recall@20 / NDCG@20 on a seeded sample of users
(``--eval-users``; ranking all 1M items for every one of 5M users would take hours on 2 cores), and,
on the same users, what ranking items by their training popularity reaches (the baseline a model
has to beat), and the peak RSS against the predicted footprint (*modeled*).

Usage: python benchmarks/bench_scale_epoch.py [--dataset synth-xl] [--batch-size 1048576]
       [--warmup-epochs 0.1] [--eval-users 20000] [--layers 3] [--dim 64] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from gnnrec_lab import RunConfig
from gnnrec_lab.data import load
from gnnrec_lab.training.benchmarking import runtime_summary
from gnnrec_lab.training.loop import _eval_users, train
from gnnrec_lab.training.reporting import Reporter


class _Progress(Reporter):
    """Each step's seconds, printed as it goes (a run of tens of minutes shows it is alive)."""

    def __init__(self, quiet: bool):
        self.steps, self.quiet, self.t0 = [], quiet, time.perf_counter()

    def on_step(self, step, epoch, loss, seconds, records):
        self.steps.append(seconds)
        if not self.quiet:
            print(f"  step {step}: {seconds:.2f} s, loss {loss:.4f}, {time.perf_counter() - self.t0:.0f} s since start",
                  flush=True)

    def on_event(self, kind, message):
        if not self.quiet:
            print(f"  [{kind}] {message}", flush=True)


def popularity_recall(ds, users: np.ndarray, topk=(20,)) -> dict:
    """Validation metrics of ranking items by their number of training interactions (the same
    masking and users as the model's evaluation)."""
    import torch

    from gnnrec_lab.training.evaluate import rank_metrics
    pop = np.bincount(ds.train[:, 1], minlength=ds.n_items).astype(np.float32)
    ue = torch.ones(ds.n_users, 1)
    ie = torch.from_numpy(pop).unsqueeze(1)
    return rank_metrics(ue, ie, ds.valid, [ds.train], topk=topk, users=users)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="synth-xl")
    ap.add_argument("--batch-size", type=int, default=1 << 20)
    ap.add_argument("--warmup-epochs", type=float, default=0.1)
    ap.add_argument("--eval-users", type=int, default=20000)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {"dataset": a.dataset, "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cpus",
           "load_before": runtime_summary()}
    t0 = time.perf_counter()
    ds = load(a.dataset, progress=not a.json)
    cfg = RunConfig(dataset=a.dataset, layers=a.layers, dim=a.dim, batch_size=a.batch_size, epochs=1,
                    lr_rule="sqrt", warmup_epochs=a.warmup_epochs, eval_users=a.eval_users, patience=0)
    rep = _Progress(a.json)
    r = train(cfg, reporter=rep, dataset=ds)
    out["wall_s (start to end)"] = time.perf_counter() - t0
    out["training_s (sum of steps)"] = sum(rep.steps)
    out["steps"] = len(rep.steps)
    out["step_s median (min..max)"] = (statistics.median(rep.steps), min(rep.steps), max(rep.steps))
    out["lr (sqrt rule)"] = cfg.effective_lr
    out["valid (model)"] = r.best_valid
    out["valid (popularity ranking, same users)"] = popularity_recall(ds, _eval_users(cfg, ds))
    fp = r.footprint
    out["peak_rss_GiB (measured)"] = fp.peak_rss / 2**30 if fp.peak_rss else None
    out["predicted_GiB (modeled)"] = fp.predicted_total / 2**30 if fp.predicted else None
    out["load_after"] = runtime_summary()
    if a.json:
        print(json.dumps(out, default=str))
        return
    for k, v in out.items():
        print(f"{k:40s} {v}")
    print(f"target: one full epoch in under 30 minutes: {'met' if out['wall_s (start to end)'] < 1800 else 'NOT met'} "
          f"({out['wall_s (start to end)'] / 60:.1f} min start to end)")


if __name__ == "__main__":
    main()
