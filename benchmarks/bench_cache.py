"""Embedding cache simulator: look-ahead oracle vs Belady vs LRU, and simulator speed.

1. Hit rates on a synth-gowalla trace (matrix-factorisation BPR batches, batch
   1024, one epoch) with a cache of 5% of the embedding rows: every policy, the
   oracle at several look-ahead windows. Issue 7 targets: oracle within 2
   points of Belady and at least 10 points above LRU. Printed as measured by
   the simulator; bytes are modeled (rows x row bytes).
2. Simulation speed of each policy on a trace of >= 10M accesses (several
   epochs of the same batches): median and spread of ``--repeats`` runs after
   a warm-up (numba compilation excluded). Target: < 10 s per policy.

Usage: python benchmarks/bench_cache.py [--dataset synth-gowalla] [--cache 5%] [--accesses 10000000] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numba
import numpy as np

from gnnrec_lab.cache import mf_trace, next_use, parse_capacity, row_bytes, simulate, skew
from gnnrec_lab.cache.simulate import policies_for
from gnnrec_lab.data import load
from gnnrec_lab.graph.bipartite import BipartiteGraph


def machine() -> dict:
    return {"python": platform.python_version(), "numba": numba.__version__, "numpy": np.__version__,
            "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "numba_threads": numba.get_num_threads()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="synth-gowalla")
    ap.add_argument("--cache", default="5%")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--lookaheads", default="1,10,50,200,1000")
    ap.add_argument("--accesses", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    t0 = time.perf_counter()
    ds = load(a.dataset, seed=a.seed)
    g = BipartiteGraph(ds.train, ds.n_users, ds.n_items)
    load_s = time.perf_counter() - t0
    rb = row_bytes(64, "adam")
    out = {"machine": machine(), "dataset": a.dataset, "graph": repr(g), "load_seconds": load_s,
           "row_bytes": rb, "bytes": "modeled", "sim_seconds": "measured"}

    # 1. hit rates at 5%
    t0 = time.perf_counter()
    trace = mf_trace(g, a.batch_size, 1, a.seed)
    out["trace_seconds"] = time.perf_counter() - t0
    cap = parse_capacity(a.cache, trace.n_rows)
    out["trace"] = repr(trace)
    out["skew"] = skew(trace)
    out["capacity_rows"] = cap
    nu = next_use(trace)
    names = ["none", "lru", "lfu", "static", "belady"]
    simulate(trace, "lru", cap, rb, nu)   # warm-up (numba load/compile)
    res = {}
    for pol in policies_for(names, None, g.degree, "degree"):
        res[pol.label] = simulate(trace, pol, cap, rb, nu).as_dict()
    for la in [int(x) for x in a.lookaheads.split(",")]:
        pol = policies_for(["oracle"], la)[0]
        res[pol.label] = simulate(trace, pol, cap, rb, nu).as_dict()
    out["hit_rates"] = res
    bel, lru = res["belady"]["hit_rate"], res["lru"]["hit_rate"]
    orc = res.get("oracle(L=200)", next(v for k, v in res.items() if k.startswith("oracle")))["hit_rate"]
    out["targets"] = {"oracle_L200_minus_belady_points": 100 * (orc - bel),
                      "oracle_L200_minus_lru_points": 100 * (orc - lru),
                      "within_2_points_of_belady": bool(bel - orc <= 0.02),
                      "at_least_10_points_above_lru": bool(orc - lru >= 0.10)}

    # 2. speed on >= accesses
    epochs = max(1, -(-a.accesses // max(trace.n_accesses, 1)))
    t0 = time.perf_counter()
    big = mf_trace(g, a.batch_size, epochs, a.seed)
    out["big_trace"] = repr(big)
    out["big_trace_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    nu_big = next_use(big)
    out["next_use_seconds"] = time.perf_counter() - t0
    cap_big = parse_capacity(a.cache, big.n_rows)
    speed = {}
    for pol in policies_for(["lru", "lfu", "static", "oracle", "belady"], 200, g.degree, "degree"):
        times = [simulate(big, pol, cap_big, rb, nu_big).sim_seconds for _ in range(a.repeats)]
        speed[pol.label] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                            "accesses_per_s": big.n_accesses / statistics.median(times)}
    out["speed"] = speed

    if a.json:
        print(json.dumps(out, indent=1, default=float))
        return 0
    print(f"machine: {out['machine']}")
    print(f"{a.dataset}: {g}  (loaded in {load_s:.1f} s)")
    print(f"{trace}; cache {cap:,} rows ({a.cache}); row {rb} B (dim 64 + Adam state)")
    s = out["skew"]
    print(f"skew (batch-deduplicated accesses): top1% rows {100 * s['top1pct_share']:.1f}%, "
          f"top10% rows {100 * s['top10pct_share']:.1f}%, max rows/batch {s['max_rows_per_batch']:,}")
    print(f"{'policy':<18}{'hit rate':>9}{'stall':>8}{'read GB (modeled)':>19}{'peak rows':>11}{'sim s':>8}")
    for k, r in res.items():
        if r.get("hit_rate") is None:
            continue
        print(f"{k:<18}{100 * r['hit_rate']:>8.2f}%{100 * r['stall_rate']:>7.1f}%{r['read_bytes'] / 1e9:>19.3f}"
              f"{r['peak_occupancy_rows']:>11,}{r['sim_seconds']:>8.3f}")
    t = out["targets"]
    print(f"oracle(L=200) - belady = {t['oracle_L200_minus_belady_points']:+.2f} points "
          f"(target >= -2: {'met' if t['within_2_points_of_belady'] else 'NOT met'}); "
          f"oracle(L=200) - lru = {t['oracle_L200_minus_lru_points']:+.2f} points "
          f"(target >= +10: {'met' if t['at_least_10_points_above_lru'] else 'NOT met'})")
    print(f"\nspeed on {big} (next-use pass {out['next_use_seconds']:.2f} s), {a.repeats} runs:")
    for k, v in speed.items():
        print(f"  {k:<18} median {v['median_s']:.2f} s  (min {v['min_s']:.2f}, max {v['max_s']:.2f})  "
              f"{v['accesses_per_s'] / 1e6:.1f} M accesses/s  "
              f"target < 10 s: {'met' if v['median_s'] < 10 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
