"""`make bench`: every benchmark in this folder, one after another, output to the terminal
and to artifacts/bench/<name>.txt. Benchmarks measure and print ratios side by side; they
never fail the build on a missed target (they say "NOT met").

Usage: python benchmarks/run_all.py [--only NAME,...] [--with-xl]
"""
from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
# (script, arguments); the heavy synth-xl runs (about an hour together) only with --with-xl
PLAN = [
    ("bench_kernels.py", ["--sizes", "small,large", "--dims", "64"]),
    ("bench_recording_overhead.py", ["--sizes", "small", "--dims", "64"]),
    ("bench_optimizer.py", []),
    ("bench_profiler_agreement.py", []),
    ("bench_framework_overhead.py", []),
    ("bench_vs_pyg.py", ["--epochs", "50"]),
    ("bench_accuracy.py", []),
    ("bench_eval.py", []),   # needs the RecBole lane (`make recbole`; `make bench` builds it)
    ("bench_cache.py", []),
    ("bench_cached_tier.py", []),
    ("bench_footprint.py", []),
    ("bench_large_batch.py", []),
    ("bench_dashboard_load.py", []),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--with-xl", action="store_true",
                    help="also generate synth-xl and train on it (about an hour, ~20 GB)")
    a = ap.parse_args()
    plan = PLAN + ([("bench_scale_xl.py", []), ("bench_scale_epoch.py", [])] if a.with_xl else [])
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    out_dir = HERE.parent / "artifacts" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for script, args in plan:
        name = script.removesuffix(".py")
        if only and name not in only and script not in only:
            continue
        if not (HERE / script).exists():
            print(f"== {name}: not present, skipped")
            continue
        print(f"== {name} {' '.join(args)}", flush=True)
        t0 = time.perf_counter()
        with open(out_dir / f"{name}.txt", "w") as log:
            p = subprocess.Popen([sys.executable, str(HERE / script), *args], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            for line in p.stdout:
                sys.stdout.write(line)
                log.write(line)
            rc = p.wait()
        print(f"== {name}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print("benchmarks that crashed:", ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
