"""The tier model against the one slow tier this machine has: file-backed tensors.

In one time window (the machine is shared: every row carries the load average it ran at):

1. ``calibrate --tier file:DIR`` measures the storage under DIR with direct I/O (the miss path of a
   file mapping) and writes a measured ``file`` profile;
2. a DRAM run of the configuration is trained and recorded;
3. the same configuration is trained with the embeddings, the optimizer state, and both placed on
   ``file:DIR`` (``--placement``), in rounds interleaved with DRAM runs;
4. each file configuration's step time is *modeled* by projecting the DRAM run onto the file
   profile (``projection.stored_run_step_time``, the run's placement) twice: with the page cache the
   machine had (what the real runs had) and with no page cache (every access to the storage).

Step time = the training kernels' time per step (what the tier model projects), measured.
Prints a markdown table for docs/tier_model.md and, with --json, one object.

Usage: python benchmarks/bench_file_tier.py [--dir /var/tmp/gnnrec-file-tier] [--dataset ml-100k]
       [--rounds 2] [--epochs 1] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import gnnrec_lab  # noqa: F401  (process-wide runtime settings before torch/numba)
from gnnrec_lab import RunConfig, run
from gnnrec_lab.config.run import TENSOR_CLASSES
from gnnrec_lab.memory import calibrate
from gnnrec_lab.runs.store import Store
from gnnrec_lab.services.projection import stored_run_step_time

CONFIGS = {"embeddings": ("embeddings",), "optimizer state": ("optimizer",), "both": ("embeddings", "optimizer")}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        return "?"


def train(store, cfg) -> tuple[int, float]:
    rid = store.add_run(cfg)
    load = os.getloadavg()[0]
    run(cfg, reporter=store.reporter(rid))
    return rid, load


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp/gnnrec-file-tier")
    ap.add_argument("--dataset", default="ml-100k")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    m = calibrate.measure_file_tier(d)
    host = calibrate.host_profile()
    prof_cached = calibrate.file_tier_profile(m, "file_tier_cached")
    prof_cold = calibrate.file_tier_profile(m, "file_tier_cold", page_cache_bytes=1)
    prof_cold.pop("dram_cache_bytes", None)          # no page cache: every access misses
    paths = [calibrate.save_file_profile(p) for p in (prof_cached, prof_cold)]
    store = Store()
    base = dict(dataset=a.dataset, model="lightgcn", layers=a.layers, dim=a.dim, batch_size=a.batch_size,
                epochs=a.epochs, eval_every=10**6)
    measured = {k: [] for k in ["dram", *CONFIGS]}
    loads = {k: [] for k in measured}
    dram_ids = []
    train(store, RunConfig(**base))       # warm-up (numba's cache, the dataset), not counted
    order = ["dram", *CONFIGS]
    for k in range(a.rounds):
        for label in order[k % len(order):] + order[:k % len(order)]:   # rotated: no row always first
            place = {c: f"file:{d}" for c in CONFIGS.get(label, ())}
            rid, load = train(store, RunConfig(**base, placement=place) if place else RunConfig(**base))
            if label == "dram":
                dram_ids.append(rid)
            measured[label].append(stored_run_step_time(store, rid, host, device="host")["measured_s"])
            loads[label].append(load)
    rows = []
    for label, classes in CONFIGS.items():
        # the projection's placement: the file classes on the device, every other class in DRAM
        place = {c: ("device" if c in classes else "dram") for c in TENSOR_CLASSES}
        mod = {}
        for name in ("file_tier_cached", "file_tier_cold"):
            vals = [stored_run_step_time(store, rid, host, device=name, placement=place,
                                         extra_paths=[str(p) for p in paths]) for rid in dram_ids]
            mod[name] = statistics.median(v["modeled_s"] for v in vals)
            mod[name + "_hit"] = vals[0]["hit_rate"]
        meas = statistics.median(measured[label])
        # each round's file run over the DRAM run of the same round: the load drifts less within a round
        paired = statistics.median(f / g for f, g in zip(measured[label], measured["dram"]))
        modeled_f = mod["file_tier_cached"] / statistics.median(measured["dram"])
        rows.append({"configuration": label, "measured_s": meas, "measured_dram_s": statistics.median(measured["dram"]),
                     "modeled_cached_s": mod["file_tier_cached"], "page_cache_hit": mod["file_tier_cached_hit"],
                     "modeled_cold_s": mod["file_tier_cold"],
                     "error_cached": mod["file_tier_cached"] / meas - 1, "error_cold": mod["file_tier_cold"] / meas - 1,
                     "measured_over_dram_paired": paired, "modeled_over_dram": modeled_f,
                     "error_paired": modeled_f / paired - 1,
                     "load": statistics.median(loads[label]), "kind": "modeled", "measured_kind": "measured"})
    out = {"commit": commit(), "calibration": m, "rows": rows, "load_start": load0,
           "load_end": os.getloadavg()[0], "dram_runs": dram_ids, "measured_all_s": measured, "loads": loads,
           "config": base, "rounds": a.rounds, "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:]))}
    if a.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(f"file tier {d}: seq read {m['seq_read_GBps']:.3f} / write {m['seq_write_GBps']:.3f} GB/s, random 4 KiB "
          f"read {m['rand_read_4k_GBps']:.4f} / write {m['rand_write_4k_GBps']:.4f} / 1:1 "
          f"{m['mixed_1to1_4k_GBps']:.4f} GB/s, latency {m['read_latency_ns'] / 1e3:.1f} us (measured); page cache "
          f"{m['page_cache_bytes'] / 2**30:.1f} GiB; commit {out['commit']}; load {load0:.2f} -> {out['load_end']:.2f}")
    print(f"DRAM step (measured, median of {a.rounds}): {rows[0]['measured_dram_s'] * 1e3:.2f} ms")
    print("| on the file tier | measured step | modeled, page cache as measured | page-cache hit (modeled) | "
          "error | measured / DRAM, paired by round | modeled / DRAM | error | modeled, no page cache | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['configuration']} | {r['measured_s'] * 1e3:.2f} ms | {r['modeled_cached_s'] * 1e3:.2f} ms | "
              f"{r['page_cache_hit']:.3f} | {r['error_cached'] * 100:+.1f}% | {r['measured_over_dram_paired']:.3f} | "
              f"{r['modeled_over_dram']:.3f} | {r['error_paired'] * 100:+.1f}% | {r['modeled_cold_s'] * 1e3:.1f} ms | "
              f"{r['load']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
