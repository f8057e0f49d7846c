"""Predicted footprint vs measured peak RSS (target: within 15%).

For each dataset, one fresh worker process trains a few steps (``max_steps_per_epoch``
small, one epoch, evaluation on) and reports ``gnnrec_lab.memory.footprint`` (modeled,
predicted before the run) next to its measured peak RSS, and the phase (graph build,
training step, evaluation) the model puts the peak in. Each configuration runs
``--repeat`` times (fresh processes) to show the spread.

Usage: python benchmarks/bench_footprint.py [--datasets ml-100k,synth-gowalla,synth-ml10m]
       [--models lightgcn,ngcf] [--steps 3] [--repeat 2] [--json]
"""
import argparse
import json
import platform
import statistics
import subprocess
import sys

_CHILD = r"""
import json, sys
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.training.loop import train
from gnnrec_lab.memory.footprint import footprint_phases, peak_rss_bytes, total
cfg = RunConfig(**json.loads(sys.argv[1]))
res = train(cfg)
pred = res.footprint.predicted
phases = {k: total(v) for k, v in footprint_phases(cfg, counts=res.info["dataset"]).items()}
print(json.dumps({"predicted": pred, "predicted_total": total(pred), "measured_peak_rss": peak_rss_bytes(),
                  "phases": phases, "peak_phase": max(phases, key=phases.get)}))
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="ml-100k,synth-gowalla,synth-ml10m")
    ap.add_argument("--models", default="lightgcn,ngcf")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = []
    for ds in a.datasets.split(","):
        for model in a.models.split(","):
            cfg = dict(dataset=ds, model=model, epochs=1, max_steps_per_epoch=a.steps, patience=0)
            errs, last = [], None
            for _ in range(a.repeat):
                p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], capture_output=True, text=True)
                if p.returncode != 0:
                    last = {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"rc {p.returncode}"}
                    break
                last = json.loads(p.stdout.strip().splitlines()[-1])
                errs.append(last["predicted_total"] / last["measured_peak_rss"] - 1)
            row = {"dataset": ds, "model": model, **(last or {})}
            if errs:
                row.update(error_mean=statistics.mean(errs), error_spread=max(errs) - min(errs), runs=len(errs),
                           within_15pct=all(abs(e) <= 0.15 for e in errs))
            rows.append(row)
    info = {"machine": platform.node(), "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version()}
    if a.json:
        print(json.dumps({"machine": info, "rows": rows}, indent=2))
        return 0
    print(f"footprint: predicted (modeled) vs measured peak RSS on {info}")
    print(f"{'dataset':<16} {'model':<9} {'predicted MiB (modeled)':>24} {'peak RSS MiB (measured)':>24} "
          f"{'error':>8} {'spread':>8}  peak phase (modeled)")
    for r in rows:
        if "error" in r:
            print(f"{r['dataset']:<16} {r['model']:<9} failed: {r['error']}")
            continue
        print(f"{r['dataset']:<16} {r['model']:<9} {r['predicted_total'] / 2**20:>24.1f} "
              f"{r['measured_peak_rss'] / 2**20:>24.1f} {r['error_mean']:>+8.1%} {r['error_spread']:>8.1%}  "
              f"{r.get('peak_phase', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
