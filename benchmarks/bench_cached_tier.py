"""Real cached tier: sampled-mode training with the embedding table (+ Adam moments) in an
O_DIRECT file, a DRAM cache in front, for each policy -- vs no cache and vs all in DRAM.

For each policy the same seeded run (default: synth-gowalla, MF i.e. 0 layers, batch 1024,
dim 64, a few capped epochs) is trained through ``gnnrec_lab.training.loop`` and reports, all
**measured** on this machine:

* epoch time (median over epochs, min..max), training-thread stall on the slow tier per epoch,
  update time per epoch (the demand policies' write-backs for none/static happen there), hit
  rate, slow-tier bytes read / written per epoch, the oracle I/O thread's busy time;
* whether the final embeddings are bit-identical (``torch.equal``) to the all-DRAM run.

Rows: ``dram`` (no slow tier), ``none`` (no cache: every row of every batch read from the slow
tier with O_DIRECT and written back after the batch; capacity = one batch), ``lru``, ``lfu``,
``static`` (top-degree rows pinned), ``oracle`` (BagPipe look-ahead with a prefetch thread).
Issue 7 targets: cached tier epoch time >= 2x faster than no cache, oracle faster than LRU at
the same cache size, identical embeddings. The script prints what it measures either way.

A **modeled** column prices the same slow-tier traffic (rows read and written, record size)
on Optane App Direct and CXL with the tier model's device profiles (random-row cost), and a
modeled epoch time = measured compute (epoch - stall) + modeled I/O, or max(compute, I/O) for
the oracle whose I/O overlaps compute (assumption: the device's row rate is the only limit).

Noise: other processes share the CPUs; ``--repeats N`` runs every row N times interleaved and
reports the median with the spread, and the oracle's speed-up per repeat (side by side).
``--threads`` (torch intra-op threads, default 1 for every row, the DRAM one included): the
cached tier runs an I/O thread and the sampler runs one; two OpenMP threads on a 2-core
machine where a core is taken stall each other (sparse Adam 60-120 ms a step instead of ~4).

Usage: python benchmarks/bench_cached_tier.py [--dataset synth-gowalla] [--model mf]
       [--cache-size 5%,20%] [--epochs 3] [--steps 40] [--policies none,lru,lfu,static,oracle]
       [--repeats 1] [--threads 1] [--json]
"""
from __future__ import annotations

# first, before torch: gnnrec_lab.util.runtime sets OMP_WAIT_POLICY=PASSIVE, which OpenMP reads only when it
# loads (with torch's spinning default, numba's and torch's thread teams steal each other's cores)
import gnnrec_lab  # noqa: F401

# isort: split
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

import gnnrec_lab.training.loop as train_mod
from gnnrec_lab import RunConfig, run
from gnnrec_lab.cache.cached_rows import make_cached_rows
from gnnrec_lab.cache.slow_tier import IO_THREADS
from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE
from gnnrec_lab.memory import calibrate
from gnnrec_lab.memory.profiles import misses_in_flight
from gnnrec_lab.memory.tiermodel import get_profile

# the memory modes the cached tier is modeled on, each on the device the table declares for it
DEVICES = {name: MEMORY_MODE_TABLE[name].device for name in ("optane_app_direct", "cxl")}


def machine(slow_dir: str) -> dict:
    st = os.statvfs(slow_dir)
    return {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor()
            or platform.machine(), "cpus": os.cpu_count(), "load_average_start": os.getloadavg(),
            "slow_tier_dir": slow_dir, "slow_tier_fs_free_GB": st.f_bavail * st.f_frsize / 1e9,
            "torch_threads": torch.get_num_threads()}


def train_one(config: RunConfig, policy: str, io_threads: int):
    """Train; return (result, final embedding). ``policy`` none/lru/... uses the cached store."""
    got = {}
    real = train_mod.make_row_store

    def make(cfg, model, degrees):
        got["model"] = model
        if policy == "dram":
            return real(cfg, model, degrees)
        return make_cached_rows(cfg, model, degrees, policy=policy, io_threads=io_threads)

    train_mod.make_row_store = make
    try:
        r = run(config)
    finally:
        train_mod.make_row_store = real
    return r, got["model"].embedding.detach().clone()


def modeled_io(stats: dict, epochs: int, io_threads: int) -> dict:
    """Modeled seconds per epoch to move this run's slow-tier rows on each device (random rows)."""
    rb = stats["record_bytes"]
    rd, wr = stats["bytes_read"] / rb / epochs, stats["bytes_written"] / rb / epochs
    out = {}
    mlp = misses_in_flight(calibrate.load())     # the latency floor's misses in flight, this host's
    for label, name in DEVICES.items():
        p = get_profile(name)
        ns = rd * p.random_ns_per_row(rb, write=False, threads=io_threads, mlp=mlp) \
            + wr * p.random_ns_per_row(rb, write=True, threads=io_threads, mlp=mlp)
        out[label] = ns / 1e9
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="synth-gowalla")
    ap.add_argument("--model", default="mf", choices=("mf", "lightgcn"))
    ap.add_argument("--layers", type=int, default=None, help="default 0 for mf, 1 for lightgcn")
    ap.add_argument("--fanouts", default="5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--cache-size", default="5%,20%", help="comma list; each must hold the largest batch")
    ap.add_argument("--lookahead", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="steps per epoch (cap)")
    ap.add_argument("--policies", default="none,lru,lfu,static,oracle")
    ap.add_argument("--io-threads", type=int, default=IO_THREADS,
                    help="threads engine only (no O_DIRECT / no Linux AIO); the aio engine keeps AIO_DEPTH in flight")
    ap.add_argument("--dir", default=None, help="directory of the slow-tier file (default $TMPDIR)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads for every row (default 1: the cached tier's I/O thread and the "
                         "sampler need a core; on a 2-core machine two OpenMP threads that lose a core slow "
                         "sparse Adam from ~4 to 60-120 ms a step); 0 = torch's default")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run every row this many times, interleaved (dram, then each size's policies); "
                         "tables give the median over repeats and the min..max of the per-repeat medians")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    layers = a.layers if a.layers is not None else (0 if a.model == "mf" else 1)
    fanouts = tuple(int(x) for x in a.fanouts.split(","))[:max(layers, 1)]
    slow_dir = a.dir or tempfile.gettempdir()
    base = RunConfig(dataset=a.dataset, model=a.model, layers=layers, fanouts=fanouts, dim=a.dim,
                     batch_size=a.batch_size, epochs=a.epochs, max_steps_per_epoch=a.steps, mode="sampled",
                     patience=0, eval_users=500, lookahead=a.lookahead, threads=a.threads or None,
                     placement={"embeddings": f"file:{slow_dir}"})
    out = {"machine": machine(slow_dir), "config": base.to_dict(), "io_threads": a.io_threads,
           "repeats": a.repeats, "kind": "measured (modeled columns labelled)", "results": []}
    say = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    say(f"# cached tier bench: {a.dataset} {a.model} layers={layers} fanouts={fanouts} batch={a.batch_size} "
        f"dim={a.dim} epochs={a.epochs} x {a.steps} steps, slow tier in {slow_dir}, torch threads="
        f"{a.threads or 'default'}, repeats={a.repeats}")
    say(f"# machine: {out['machine']}")
    sizes, policies = a.cache_size.split(","), a.policies.split(",")
    med = statistics.median

    # warm-up, not measured: numba compiles (sampler, slow tier) and first-touch costs would land in
    # the first measured run's first epochs
    warm = base.replace(epochs=1, max_steps_per_epoch=3)
    train_one(warm, "dram", a.io_threads)
    train_one(warm.replace(cache_policy="oracle", cache_size=sizes[-1]), "oracle", a.io_threads)

    dram_runs, runs, e_dram = [], {}, None
    for rep in range(a.repeats):
        t0 = time.perf_counter()
        r_dram, e = train_one(base, "dram", a.io_threads)
        if e_dram is None:
            e_dram = e
        dram_runs.append({"epoch_s_median": med(r_dram.epoch_seconds), "epoch_s": r_dram.epoch_seconds,
                          "wall_s": time.perf_counter() - t0, "identical_to_first_dram": bool(torch.equal(e, e_dram))})
        say(f"  [repeat {rep + 1}] dram  epoch {dram_runs[-1]['epoch_s_median']:7.2f} s  "
            f"epochs {[round(x, 2) for x in r_dram.epoch_seconds]}")
        for cs in sizes:
            for pol in policies:
                cfg = base.replace(cache_policy="lru" if pol == "none" else pol, cache_size=cs)
                la0 = os.getloadavg()[0]
                t0 = time.perf_counter()
                r, e = train_one(cfg, pol, a.io_threads)
                s = r.info["sampled"]["row_store"]
                ep = r.epoch_seconds
                run_ = {"repeat": rep, "epoch_s_median": med(ep), "epoch_s": ep,
                        "stall_s_per_epoch": s["stall_seconds"] / a.epochs,
                        "fetch_s_per_epoch": s["fetch_seconds"] / a.epochs,
                        "update_s_per_epoch": s["update_seconds"] / a.epochs,
                        "identical_to_dram": bool(torch.equal(e, e_dram)), "load_avg_1min_before": la0,
                        "wall_s": time.perf_counter() - t0, "row_store": s}
                runs.setdefault((cs, pol), []).append(run_)
                say(f"  [repeat {rep + 1}] {cs:>5} {pol:<7} epoch {run_['epoch_s_median']:7.2f} s "
                    f"[{min(ep):.2f}..{max(ep):.2f}]  stall {run_['stall_s_per_epoch']:6.2f} s  hit {s['hit_rate']:.3f}"
                    f"  read {s['bytes_read'] / 1e6 / a.epochs:7.1f} MB"
                    f"  written {s['bytes_written'] / 1e6 / a.epochs:7.1f} MB"
                    f"  identical={run_['identical_to_dram']}  (load {la0:.1f})")

    dram = {"policy": "dram", "epoch_s_median": med(x["epoch_s_median"] for x in dram_runs),
            "epoch_s_min": min(x["epoch_s_median"] for x in dram_runs),
            "epoch_s_max": max(x["epoch_s_median"] for x in dram_runs), "runs": dram_runs}
    out["dram"] = dram
    for cs in sizes:
        rows = []
        for pol in policies:
            rs = runs[(cs, pol)]
            s = rs[0]["row_store"]
            meds = [x["epoch_s_median"] for x in rs]
            row = {"cache_size": cs, "policy": pol, "capacity_rows": s["capacity_rows"],
                   "max_batch_rows": s["max_batch_rows"], "epoch_s_median": med(meds), "epoch_s_min": min(meds),
                   "epoch_s_max": max(meds),
                   "stall_s_per_epoch": med(x["stall_s_per_epoch"] for x in rs),
                   "fetch_s_per_epoch": med(x["fetch_s_per_epoch"] for x in rs),
                   "update_s_per_epoch": med(x["update_s_per_epoch"] for x in rs),
                   "hit_rate": med(x["row_store"]["hit_rate"] for x in rs),
                   "read_MB_per_epoch": med(x["row_store"]["bytes_read"] for x in rs) / 1e6 / a.epochs,
                   "written_MB_per_epoch": med(x["row_store"]["bytes_written"] for x in rs) / 1e6 / a.epochs,
                   "io_mode": s["io_mode"], "io_engine": s.get("io_engine"), "record_bytes": s["record_bytes"],
                   "identical_to_dram": all(x["identical_to_dram"] for x in rs), "kind": "measured", "runs": rs}
            io = modeled_io(s, a.epochs, a.io_threads)
            # compute = the measured all-DRAM epoch: epoch minus stall would also count this
            # machine's synchronous write-backs and Python I/O loop, which differ per policy
            compute = dram["epoch_s_median"]
            for dev, secs in io.items():
                row[f"modeled_io_s_{dev}"] = secs
                row[f"modeled_epoch_s_{dev}"] = max(compute, secs) if pol == "oracle" else compute + secs
            rows.append(row)
        by = {x["policy"]: x for x in rows}
        say(f"\n## cache {cs} ({rows[0]['capacity_rows']:,} rows; largest batch {rows[0]['max_batch_rows']:,} rows) "
            f"-- measured on this machine, {rows[0]['io_mode']} ({rows[0]['io_engine']}), "
            f"{a.repeats} repeat(s): median [min..max of per-repeat medians]")
        say(f"{'policy':<8}{'epoch s (median)':>18}{'min..max':>16}{'stall s/ep':>12}{'update s/ep':>12}"
            f"{'hit rate':>10}{'read MB/ep':>12}{'write MB/ep':>12}{'vs none':>9}{'identical':>11}"
            f"{'Optane AD ep s':>16}{'CXL ep s':>10}")
        for x in [dram] + rows:
            if x["policy"] == "dram":
                say(f"{'dram':<8}{x['epoch_s_median']:>18.2f}{x['epoch_s_min']:>7.2f}..{x['epoch_s_max']:<7.2f}"
                    f"{'-':>12}{'-':>12}{'-':>10}{'-':>12}{'-':>12}"
                    f"{by['none']['epoch_s_median'] / x['epoch_s_median'] if 'none' in by else float('nan'):>8.2f}x"
                    f"{'(ref)':>11}")
                continue
            vs = by["none"]["epoch_s_median"] / x["epoch_s_median"] if "none" in by else float("nan")
            say(f"{x['policy']:<8}{x['epoch_s_median']:>18.2f}{x['epoch_s_min']:>7.2f}..{x['epoch_s_max']:<7.2f}"
                f"{x['stall_s_per_epoch']:>12.2f}{x['update_s_per_epoch']:>12.2f}{x['hit_rate']:>10.3f}"
                f"{x['read_MB_per_epoch']:>12.1f}{x['written_MB_per_epoch']:>12.1f}{vs:>8.2f}x"
                f"{str(x['identical_to_dram']):>11}{x['modeled_epoch_s_optane_app_direct']:>16.2f}"
                f"{x['modeled_epoch_s_cxl']:>10.2f}")
        if "oracle" in by:
            o = by["oracle"]
            if o.get("runs") and o["runs"][0]["row_store"].get("io_thread_busy_seconds") is not None:
                busy = med(x["row_store"]["io_thread_busy_seconds"] for x in o["runs"]) / a.epochs
                say(f"oracle I/O thread busy {busy:.2f} s/epoch (the epoch-end sync is not in it), "
                    f"{med(x['row_store']['io_jobs'] for x in o['runs']) / a.epochs:.0f} jobs/epoch")
            for ref, target in (("none", 2.0), ("lru", 1.0)):
                if ref not in by:
                    continue
                per = [n["epoch_s_median"] / x["epoch_s_median"] for n, x in zip(by[ref]["runs"], o["runs"])]
                ratio = by[ref]["epoch_s_median"] / o["epoch_s_median"]
                ok = ratio >= target if ref == "none" else ratio > target
                say(f"oracle vs {ref}: {ratio:.2f}x faster (per repeat {min(per):.2f}..{max(per):.2f}x; target "
                    f"{'>=' if ref == 'none' else '>'} {target:g}x: {'met' if ok else 'NOT met'}"
                    f"{'' if (min(per) >= target if ref == 'none' else min(per) > target) else ', not in every repeat'}"
                    f") -- measured")
            say(f"final embeddings bit-identical to dram in every run: "
                f"{all(x['identical_to_dram'] for x in rows)}. Optane/CXL columns: modeled.")
        out["results"].extend(rows)
    out["machine"]["load_average_end"] = os.getloadavg()
    if a.json:
        print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
