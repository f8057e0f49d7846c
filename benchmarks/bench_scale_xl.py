"""Scale: full-graph LightGCN training steps on a big graph (default synth-xl: 5M users, 1M items,
100M interactions) for each way the lab can propagate it; peak RSS against the predicted footprint.

Variants (``--variants``, default all four) cross the node order with the SpMM kernel:

* order ``ids`` (the dataset's node order dropped) or ``community`` (the locality order cached with
  the split, see gnnrec_lab.graph.bipartite.locality_order; users first, then items);
* kernel ``rows`` (native.spmm row by row: every node row gathers its neighbours, so item rows
  gather users from the whole node table) or ``sides`` (native.spmm_sides, what the lab uses above
  native.SIDES_MIN_BYTES: user rows gather items and scatter into per-thread item accumulators,
  every random access in the item table).

``community+sides`` is what training uses; ``ids+rows`` is the propagation before either.
For each variant it trains ``--steps`` steps through ``gnnrec_lab.training.loop`` and reports, all measured
on this machine: the step time (median and spread over the steps after the first), the
per-kernel breakdown (median seconds per step), and the fraction of two bounds each step reaches:

* naive bound: the step's ideal bytes (kernels.costs; every gathered row from DRAM) / triad;
* cache-aware bound (*modeled*): the same with each SpMM's gathered rows counted once per
  cache-sized panel of rows (costs.spmm_cached, a model of the row kernel), re-reads from cache.

"% of bound" = 100 x bound / measured step. The predicted footprint is modeled
(gnnrec_lab.memory.footprint). ``--ab-rounds`` then runs the propagation (layer mean forward +
backward) of every variant alternately in one process, which spreads the machine's other load over
all of them. The machine's load is printed before and after: numbers taken while other processes
run are noisy.

Usage: python benchmarks/bench_scale_xl.py [--dataset synth-xl] [--steps 3] [--layers 3] [--dim 64]
       [--variants ids+rows,community+rows,ids+sides,community+sides] [--ab-rounds 2] [--json]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import statistics
import time

from gnnrec_lab import RunConfig
from gnnrec_lab.data import load
from gnnrec_lab.memory.calibrate import host_profile
from gnnrec_lab.training.benchmarking import runtime_summary
from gnnrec_lab.training.loop import train
from gnnrec_lab.training.reporting import Reporter

VARIANTS = ("ids+rows", "community+rows", "ids+sides", "community+sides")


@contextlib.contextmanager
def _kernel(variant: str):
    """The SpMM kernel of ``variant``: ``rows`` raises native.SIDES_MIN_BYTES out of reach."""
    from gnnrec_lab.kernels import native
    keep = native.SIDES_MIN_BYTES
    if variant.endswith("+rows"):
        native.SIDES_MIN_BYTES = 1 << 62
    try:
        yield
    finally:
        native.SIDES_MIN_BYTES = keep


class _Steps(Reporter):
    """Each step's seconds and kernel records."""

    def __init__(self):
        self.steps, self.cpu = [], []
        self._c = None

    def on_start(self, config, info):
        self._c = time.process_time()

    def on_step(self, step, epoch, loss, seconds, records):
        c = time.process_time()
        self.steps.append((seconds, records))
        self.cpu.append(c - self._c)  # the process's CPU seconds since the last step ended
        self._c = c


def _spmm_savings(ds, dim: int, cache_bytes=None) -> dict:
    """Bytes the cache-aware model takes off one SpMM (naive minus cache-aware), per variant."""
    from gnnrec_lab.graph.bipartite import BipartiteGraph
    from gnnrec_lab.kernels import costs
    g = BipartiteGraph(ds.train, ds.n_users, ds.n_items, ds.node_order)
    out = {}
    for name, adj in (("ids", g.adj), ("community", None if g.adj._local is None else g.adj._local[0])):
        if adj is None:
            continue
        t0 = time.perf_counter()
        naive = costs.spmm(adj, dim, 4)
        cached = costs.spmm_cached(adj, dim, 4, cache_bytes=cache_bytes)
        out[name] = {"saving": naive["bytes_read"] - cached["bytes_read"],
                     "gathered_naive_GB": naive["random_bytes"] / 1e9,
                     "gathered_cache_aware_GB (modeled)": cached["random_bytes"] / 1e9,
                     "model_s": time.perf_counter() - t0}
    return out


def propagation_ab(ds, a, variants) -> dict:
    """Every variant's graph in one process, LightGCN's propagation (layer mean forward + backward)
    run alternately ``--ab-rounds`` times each: wall and process-CPU seconds per variant.
    Alternating spreads the machine's other load over all of them, which separate runs do not."""
    import torch

    from gnnrec_lab import kernels
    from gnnrec_lab.graph.bipartite import BipartiteGraph
    by_order = {}
    for v in variants:
        order = v.split("+")[0]
        if order not in by_order:
            by_order[order] = BipartiteGraph(ds.train, ds.n_users, ds.n_items,
                                             ds.node_order if order == "community" else None).adj
    kernels.warmup()
    x = torch.randn(ds.n_users + ds.n_items, a.dim, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    out = {k: {"wall_s": [], "cpu_s": []} for k in variants}
    for r in range(a.ab_rounds + 1):
        for k in variants:
            adj = by_order[k.split("+")[0]]
            x.grad = None
            with _kernel(k):
                t, c = time.perf_counter(), time.process_time()
                h = kernels.layer_mean([adj] * a.layers, x, 1 / (a.layers + 1))
                h.backward(torch.ones_like(h))
                wall, cpu = time.perf_counter() - t, time.process_time() - c
            if r:  # round 0 warms up (first touch of the outputs)
                out[k]["wall_s"].append(wall)
                out[k]["cpu_s"].append(cpu)
            del h
    return out


def run_variant(ds, variant: str, a) -> dict:
    if variant.startswith("ids+"):
        ds = dataclasses.replace(ds, node_order=None)
    elif ds.node_order is None:
        raise SystemExit(f"{a.dataset}: no locality order cached (below registry.ORDER_MIN_NODES nodes)")
    cfg = RunConfig(dataset=a.dataset, layers=a.layers, dim=a.dim, batch_size=a.batch_size, epochs=1,
                    max_steps_per_epoch=a.steps, eval_users=2000, patience=0)
    rep = _Steps()
    with _kernel(variant):
        r = train(cfg, reporter=rep, dataset=ds)
    later = rep.steps[1:] or rep.steps  # the first step pays first-touch page faults
    secs = [s for s, _ in later]
    cpu = rep.cpu[1:] or rep.cpu
    per = {}
    for _, recs in later:
        step = {}
        for k in recs:
            key = f"{k.name}/{k.phase}"
            step[key] = step.get(key, 0.0) + k.ns / 1e9
        for key, v in step.items():
            per.setdefault(key, []).append(v)
    nbytes = statistics.median(sum(k.bytes_read + k.bytes_written for k in recs) for _, recs in later)
    n_spmm = statistics.median(sum(1 for k in recs if k.name == "spmm") for _, recs in later)
    pred = r.footprint.predicted_total if r.footprint.predicted else float("nan")
    peak = r.footprint.peak_rss
    return {"variant": variant, "steps": r.steps, "step_s": statistics.median(secs), "step_s_min": min(secs),
            "step_s_max": max(secs), "step_cpu_s": statistics.median(cpu),
            "breakdown_s_per_step": {k: statistics.median(v) for k, v in sorted(per.items())},
            "step_bytes": nbytes, "spmm_per_step": n_spmm,
            "predicted_footprint_GiB (modeled)": pred / 2**30, "peak_rss_GiB (measured)": peak / 2**30,
            "ratio_peak_over_predicted": peak / pred, "valid": r.best_valid}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="synth-xl")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--ab-rounds", type=int, default=2, help="alternating propagation rounds (0: skip)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"--variants: unknown {bad}, allowed: {', '.join(VARIANTS)}")
    host = host_profile()
    triad = float(host["triad_GBps"]) * 1e9
    out = {"dataset": a.dataset, "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cpus",
           "load_before": runtime_summary(), "triad_GBps (measured)": host["triad_GBps"]}
    t0 = time.perf_counter()
    ds = load(a.dataset, progress=not a.json)
    out["prepare_or_load_s"] = time.perf_counter() - t0
    out["nodes"], out["train_interactions"] = ds.n_users + ds.n_items, ds.n_train
    savings = _spmm_savings(ds, a.dim)
    gc.collect()
    out["cache_model"] = savings
    results = []
    for v in variants:
        res = run_variant(ds, v, a)
        b = res["step_bytes"]
        saved = res["spmm_per_step"] * savings.get(v.split("+")[0], {}).get("saving", 0)
        res["naive_bound_s"] = b / triad
        res["cache_aware_bound_s (modeled)"] = (b - saved) / triad
        res["pct_of_naive_bound"] = 100 * res["naive_bound_s"] / res["step_s"]
        res["pct_of_cache_aware_bound"] = 100 * res["cache_aware_bound_s (modeled)"] / res["step_s"]
        results.append(res)
        gc.collect()
    out["variants"] = results
    if a.ab_rounds > 0 and len(variants) > 1:
        out["propagation_ab"] = propagation_ab(ds, a, variants)
    out["load_after"] = runtime_summary()
    if a.json:
        print(json.dumps(out, default=str))
        return
    for k, v in out.items():
        if k not in ("variants", "cache_model", "propagation_ab"):
            print(f"{k:28s} {v:.3f}" if isinstance(v, float) else f"{k:28s} {v}")
    for v, m in savings.items():
        print(f"cache model [{v}]: gathered per SpMM {m['gathered_naive_GB']:.2f} GB naive, "
              f"{m['gathered_cache_aware_GB (modeled)']:.2f} GB cache-aware (modeled)")
    for r in results:
        print(f"\n[{r['variant']}] step {r['step_s']:.2f} s (min {r['step_s_min']:.2f}, max {r['step_s_max']:.2f}, "
              f"{r['steps']} steps, first excluded; process CPU {r['step_cpu_s']:.2f} s per step)")
        print(f"  naive bound {r['naive_bound_s']:.2f} s = {r['pct_of_naive_bound']:.0f}% ; cache-aware bound "
              f"{r['cache_aware_bound_s (modeled)']:.2f} s (modeled) = {r['pct_of_cache_aware_bound']:.0f}%")
        for k, s in r["breakdown_s_per_step"].items():
            print(f"  {k:28s} {s:8.3f} s")
        print(f"  peak RSS {r['peak_rss_GiB (measured)']:.2f} GiB vs predicted "
              f"{r['predicted_footprint_GiB (modeled)']:.2f}"
              f" GiB (modeled): {r['ratio_peak_over_predicted']:.2f}x, target <= 1.3x "
              f"{'met' if r['ratio_peak_over_predicted'] <= 1.3 else 'NOT met'}")
    base = results[0]
    for r in results[1:]:
        print(f"\nspeedup {base['variant']} -> {r['variant']}: {base['step_s'] / r['step_s']:.2f}x (median steps, "
              f"separate runs)")
    ab = out.get("propagation_ab")
    if ab:
        print(f"propagation fwd+bwd, alternating ({a.ab_rounds} rounds each, {a.layers} layers, D={a.dim}):")
        for k, v in ab.items():
            print(f"  {k:16s} wall median {statistics.median(v['wall_s']):.2f} s (min {min(v['wall_s']):.2f}, max "
                  f"{max(v['wall_s']):.2f}); CPU median {statistics.median(v['cpu_s']):.2f} s")
        b = variants[0]
        for k in variants[1:]:
            print(f"  speedup {b} -> {k}: "
                  f"{statistics.median(ab[b]['wall_s']) / statistics.median(ab[k]['wall_s']):.2f}x"
                  f" wall, {statistics.median(ab[b]['cpu_s']) / statistics.median(ab[k]['cpu_s']):.2f}x CPU")
    if a.dataset == "synth-xl":
        best = min(r["step_s"] for r in results)
        print(f"target: synth-xl step <= 15 s: {'met' if best <= 15 else 'NOT met'} ({best:.2f} s)")


if __name__ == "__main__":
    main()
