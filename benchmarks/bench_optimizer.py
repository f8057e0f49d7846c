"""The Adam step of a LightGCN run: torch.optim.Adam(fused=True) (torch's fused CPU Adam, what a
run's ``adam`` is) against torch's default Adam (foreach), side by side in one process. Up to
commit dd33c9a it also ran the lab's own one-pass native FusedAdam: within the noise of the fused
Adam on ML-100K and synth-gowalla (docs/measurements.md), so it was dropped for torch's.

Per dataset the parameter is the embedding table a full-graph LightGCN trains ((users + items) x
dim, float32) with a dense gradient, as in a full-graph step. Each repeat runs every optimizer's
``step()`` + ``zero_grad()`` (set_to_none, as the training loop does) once, in a rotating order
(so drift and other load hit all alike). Printed: the median and interquartile range of the
per-call seconds, and the paired ratio to the fused Adam (median over repeats of other / fused in
the same repeat) with a 95% bootstrap interval of that median: an interval that holds 1 is a
difference within the noise. The load average before and after is printed with it. The
optimizers must agree: after the timed steps each parameter is compared with the fused Adam's.

Usage: python benchmarks/bench_optimizer.py [--datasets ml-100k,synth-gowalla] [--dim 64] [--repeats 200] [--json]
"""
from __future__ import annotations

# first, before torch: gnnrec_lab.util.runtime sets OMP_WAIT_POLICY=PASSIVE, which OpenMP reads only when it
# loads (with torch's spinning default, numba's and torch's thread teams steal each other's cores)
import gnnrec_lab  # noqa: F401

# isort: split
import argparse
import json
import os
import random
import statistics
import sys
import time

import torch

from gnnrec_lab.data import describe

REFERENCE = "torch Adam(fused=True)"
MAKERS = {
    REFERENCE: lambda p, lr: torch.optim.Adam([p], lr=lr, fused=True),
    "torch Adam (default, foreach)": lambda p, lr: torch.optim.Adam([p], lr=lr),
}


def loadavg() -> float:
    return float(open("/proc/loadavg").read().split()[0])


def bench(n_rows: int, dim: int, repeats: int, lr: float = 1e-3, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    init = torch.randn(n_rows, dim, generator=g) * 0.1
    grads = [torch.randn(n_rows, dim, generator=g) * 1e-2 for _ in range(4)]
    params, opts = {}, {}
    for name, make in MAKERS.items():
        p = torch.nn.Parameter(init.clone())
        params[name], opts[name] = p, make(p, lr)
    names = list(MAKERS)
    times = {n: [] for n in names}
    for r in range(repeats + 5):          # 5 untimed warm-up rounds (allocation of the moments)
        order = names[r % len(names):] + names[:r % len(names)]
        grad = grads[r % len(grads)]
        for n in order:
            p, opt = params[n], opts[n]
            p.grad = grad.clone()             # autograd allocates a fresh gradient each step too
            t0 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            if r >= 5:
                times[n].append(dt)
    ref = params[names[0]].detach()
    rng = random.Random(seed)
    out = {}
    for n in names:
        ts = sorted(times[n])
        q1, q3 = ts[len(ts) // 4], ts[3 * len(ts) // 4]
        ratios = [a / b for a, b in zip(times[n], times[names[0]])]
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
        out[n] = {"median_s": statistics.median(ts), "q1_s": q1, "q3_s": q3,
                  "paired_ratio": statistics.median(ratios), "ratio_ci95": (boot[50], boot[1949]),
                  "max_abs_diff_vs_reference": float((params[n].detach() - ref).abs().max())}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="ml-100k,synth-gowalla")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
              "dim": a.dim, "repeats": a.repeats, "load_before": loadavg(), "datasets": {}}
    for ds in [d.strip() for d in a.datasets.split(",") if d.strip()]:
        info = describe(ds)
        rows = int(info["n_users"]) + int(info["n_items"])
        report["datasets"][ds] = {"rows": rows, "results": bench(rows, a.dim, a.repeats)}
    report["load_after"] = loadavg()
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"torch {report['torch']}, {report['threads']} threads, {report['cpus']} cpus; load average "
          f"{report['load_before']:.2f} before, {report['load_after']:.2f} after (measured)")
    for ds, d in report["datasets"].items():
        print(f"\n{ds}: table {d['rows']:,} x {a.dim} float32 ({d['rows'] * a.dim * 4 / 2**20:.1f} MiB), "
              f"step + zero_grad, {a.repeats} interleaved repeats")
        for n, r in d["results"].items():
            lo, hi = r["ratio_ci95"]
            verdict = ("reference" if n == REFERENCE else "within noise" if lo <= 1 <= hi
                       else "slower" if lo > 1 else "faster")
            print(f"  {n:<30} median {r['median_s'] * 1e3:8.3f} ms (IQR {r['q1_s'] * 1e3:.3f}-{r['q3_s'] * 1e3:.3f})  "
                  f"x{r['paired_ratio']:.2f} of fused [95% {lo:.2f}-{hi:.2f}: {verdict}]  "
                  f"max |diff| {r['max_abs_diff_vs_reference']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
