"""The headline: full-graph training on one machine vs DistDGL on two, by depth (issue 20, item 5).

One machine is C cores and its memory. The full-graph side is ``gnnrec-lab run --cores C`` (the training
process pinned to C cores of its own); the DistDGL side is ``gnnrec-lab distributed --cluster emulated
--partitions P --cores-per-machine C`` (P network namespaces, each a server and a trainer on C cores of
its own, behind a tbf-shaped link of ``--link`` Gbit/s). On a 2-core host, C = 1 and P = 2. Both train
``--model`` (LightGCN by default) on ``--dataset`` at each depth of ``--depths`` for ``--epochs`` epochs
with a validation Recall@20 target (``--target``), and each side keeps the batch size it does best with (least
time to target, then least epoch time): the full-graph side tries ``--full-batches`` with the lab's
large-batch rule (Adam, lr scaled by sqrt(batch / 2048), warm-up of half a pass: docs/measurements.md, "Large
batches"); DistDGL tries ``--dist-batches`` with fan-out ``--fanout`` per layer and, by default, the same rule
applied to its SparseAdam and dense Adam each step (``--dist-rule large``; ``--dist-rule none`` keeps ``--lr``
fixed, as docs/headline.md of 2026-12-02 was measured: ``--dist-rule none --dist-batches 16384``). The
full-graph side also shows the same run's times **modeled** on Optane App Direct and Memory Mode (the tier
model, ``gnnrec_lab.services.comparison.full_vs_distributed``, the numbers the Compare page and notebook 06
show). A link sweep repeats DistDGL at ``--sweep-depth`` over ``--links`` (Gbit/s; 0 = unshaped).

Writes ``--out`` (docs/headline.md): time to target, epoch time and test Recall@20 by depth and
engine, DistDGL's per-batch split (sampling, remote fetch, compute, sync; median, measured), the bytes
its links carried (interface counters, measured), the explosion factor, every batch size tried, the
link sweep, a figure (``--img``, PNG, modeled bars hatched), the date, commit, command and the load.

Every run goes through the CLI in a subprocess and is recorded in the run store
(``$GNNREC_LAB_HOME``), so the Compare page shows the same runs afterwards.

Usage:
  python benchmarks/bench_headline.py                 # synth-gowalla, depths 1-4: docs/headline.md (about 2 h)
  python benchmarks/bench_headline.py --quick         # synth-tiny, depths 1-2, a few minutes
  python benchmarks/bench_headline.py --quick --full-only --out /tmp/h.md --img /tmp/h.png
  python benchmarks/bench_headline.py --resume        # after an interruption: finished runs are reused
DistDGL needs the DGL lane (``make dgl``: .venv-dgl) and root (namespaces); ``--full-only`` runs the
full-graph side alone (the page then says DistDGL was not run).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnnrec_lab.distributed.lane import dgl_lane_python  # noqa: E402
from gnnrec_lab.distributed.results import PHASES  # noqa: E402
from gnnrec_lab.memory.tiermodel import fmt_band  # noqa: E402
from gnnrec_lab.services.comparison import (  # noqa: E402
    LARGE_BATCH_RULE,
    TARGET_FRACTION,
    best_by_depth,
    finished_run,
    full_vs_distributed,
    headline_name,
    headline_settings,
)

SPLIT_WORDS = {"sampling": "sampling", "remote_fetch": "remote fetch", "compute": "compute", "grad_sync": "sync"}


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not out or any(x < 1 for x in out):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return out


def _links(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated Gbit/s (0 = unshaped), got {text!r}") from None
    if not out or any(not (x >= 0 and math.isfinite(x)) for x in out):
        raise argparse.ArgumentTypeError(f"link rates must be finite and >= 0 (0 = unshaped), got {text!r}")
    return out


def _positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (v > 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return v
    return parse


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="synth-gowalla")
    p.add_argument("--model", choices=("lightgcn", "ngcf"), default="lightgcn", help="the model (default lightgcn)")
    p.add_argument("--depths", type=_ints, default=[1, 2, 3, 4], help="model depths (default 1,2,3,4)")
    p.add_argument("--epochs", type=_positive(int), default=40, help="epochs per run (default 40)")
    p.add_argument("--target", type=_positive(float), default=0.08,
                   help="validation Recall@20 whose first crossing is the time to target (default 0.08)")
    p.add_argument("--full-batches", type=_ints, default=[16384, 65536],
                   help="full-graph batch sizes tried, with the large-batch rule (default 16384,65536)")
    p.add_argument("--dist-batches", type=_ints, default=[16384, 65536],
                   help="DistDGL global batch sizes tried (default 16384,65536, the full graph's)")
    p.add_argument("--dist-rule", choices=("large", "none"), default="large",
                   help="DistDGL's learning rate: large, the full graph's large-batch rule (sqrt scaling, warm-up "
                        "half a pass) on both its optimizers; none, --lr fixed (default large)")
    p.add_argument("--dim", type=_positive(int), default=64)
    p.add_argument("--lr", type=_positive(float), default=5e-3,
                   help="lr at batch 2048 (full graph: scaled by sqrt; default 5e-3)")
    p.add_argument("--fanout", type=_positive(int), default=10, help="DistDGL neighbours per node per layer")
    p.add_argument("--eval-users", type=_positive(int), default=1000,
                   help="seeded sample ranked for validation (default 1000)")
    p.add_argument("--cores", type=_positive(int), default=1, help="cores of one machine, C (default 1)")
    p.add_argument("--partitions", type=_positive(int), default=2, help="DistDGL machines, P (default 2)")
    p.add_argument("--link", type=float, default=10.0, help="link rate of the by-depth runs, Gbit/s (default 10)")
    p.add_argument("--links", type=_links, default=[1.0, 10.0, 25.0, 0.0],
                   help="the link sweep, Gbit/s, 0 = unshaped (default 1,10,25,0)")
    p.add_argument("--sweep-depth", type=_positive(int), default=1, help="depth of the link sweep (default 1)")
    p.add_argument("--max-steps-per-epoch", type=_positive(int), default=None, help="cap per epoch (quick checks)")
    p.add_argument("--full-only", action="store_true", help="run the full-graph side only (no DGL lane or root)")
    p.add_argument("--resume", action="store_true",
                   help="reuse a finished run of the store with the same name and settings instead of training it "
                        "again (a run of many hours goes on where an interrupted one stopped)")
    p.add_argument("--quick", action="store_true",
                   help="synth-tiny, depths 1,2, 2 epochs, small batches, links 10,0 at depth 1: checks the script")
    p.add_argument("--out", default=str(ROOT / "docs" / "headline.md"))
    p.add_argument("--img", default=str(ROOT / "docs" / "img" / "headline.png"))
    p.add_argument("--timeout", type=_positive(float), default=6 * 3600.0, help="seconds per run (default 6 h)")
    a = p.parse_args(argv)
    if a.quick:
        given = set(argv if argv is not None else sys.argv[1:])

        def default(flag, value):
            if not any(x == flag or x.startswith(flag + "=") for x in given):
                setattr(a, flag[2:].replace("-", "_"), value)
        for flag, value in (("--dataset", "synth-tiny"), ("--depths", [1, 2]), ("--epochs", 2), ("--target", 0.02),
                            ("--full-batches", [1024]), ("--dist-batches", [512]), ("--dim", 16),
                            ("--eval-users", 100), ("--links", [10.0, 0.0]), ("--sweep-depth", 1),
                            ("--max-steps-per-epoch", 4), ("--lr", 5e-3)):
            default(flag, value)
    if a.link < 0 or not math.isfinite(a.link):
        p.error(f"--link: must be finite and >= 0 (0 = unshaped), got {a.link}")
    return a


MODEL_WORDS = {"lightgcn": "LightGCN", "ngcf": "NGCF"}


def _say(*x):
    print(*x, file=sys.stderr, flush=True)


def _cli(python, args: list, timeout: float) -> dict:
    """``python -m gnnrec_lab.commands.cli ARGS --json`` from the repository root: the run's JSON (with run_id)."""
    t0 = time.perf_counter()
    p = subprocess.run([str(python), "-m", "gnnrec_lab.commands.cli", *map(str, args), "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args[:1]))} failed (exit {p.returncode}): {p.stderr.strip()[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["_wall_s"] = time.perf_counter() - t0
    return out


def stored_run(name: str, want: dict, engine: str, machines: tuple) -> dict | None:
    """``--resume``: the newest finished run of the store (``$GNNREC_LAB_HOME``) named ``name`` with the
    settings ``want`` on ``machines`` (:func:`gnnrec_lab.services.comparison.finished_run`), or None."""
    from gnnrec_lab.runs.store import Store
    return finished_run(Store(), name, want, engine, machines)


def dist_rule(a) -> dict:
    """DistDGL's learning-rate rule (``--dist-rule``): the full graph's, or lr fixed."""
    return dict(LARGE_BATCH_RULE) if a.dist_rule == "large" else {"lr_rule": "none"}


def _rule_args(rule: dict) -> list:
    return [x for k, v in rule.items() for x in (f"--{k.replace('_', '-')}", v)]


def _settings(a, engine: str, depth: int, batch: int) -> dict:
    """The config values a run reused by ``--resume`` must share with the one asked for."""
    return headline_settings(engine, dataset=a.dataset, model=a.model, layers=depth, dim=a.dim, batch_size=batch,
                             epochs=a.epochs, lr=a.lr, target_recall=a.target, eval_users=a.eval_users,
                             max_steps_per_epoch=a.max_steps_per_epoch, cores=a.cores, fanout=a.fanout,
                             dist_rule=dist_rule(a) if engine == "distdgl" else None)


def _run_or_reuse(a, name: str, want: dict, engine: str, machines: tuple, python, args: list,
                  timeout: float) -> dict:
    if a.resume:
        done = stored_run(name, want, engine, machines)
        if done is not None:
            _say(f"{name}: reusing finished run {done['run_id']} (--resume)")
            return done
    return _cli(python, args, timeout)


def full_run(a, depth: int, batch: int) -> dict:
    rule = LARGE_BATCH_RULE
    name = headline_name("full", a.model, depth, batch)
    args = ["run", "--dataset", a.dataset, "--model", a.model, "--layers", depth, "--dim", a.dim,
            "--batch-size", batch, "--epochs", a.epochs, "--lr", a.lr, *_rule_args(rule), "--patience", 0,
            "--target-recall", a.target, "--eval-users", a.eval_users, "--cores", a.cores, "--no-progress",
            "--name", name]
    if a.max_steps_per_epoch:
        args += ["--max-steps-per-epoch", a.max_steps_per_epoch]
    return _run_or_reuse(a, name, _settings(a, "full", depth, batch), "full", (1, a.cores, None), sys.executable,
                         args, a.timeout)


def dist_run(a, depth: int, batch: int, link: float) -> dict:
    name = headline_name("distdgl", a.model, depth, batch, link)
    args = ["distributed", "--cluster", "emulated", "--partitions", a.partitions, "--cores-per-machine", a.cores,
            "--link-gbit", link, "--dataset", a.dataset, "--model", a.model, "--layers", depth, "--dim", a.dim,
            "--fanouts", ",".join([str(a.fanout)] * depth), "--batch-size", batch, "--epochs", a.epochs,
            "--lr", a.lr, *_rule_args(dist_rule(a)), "--target-recall", a.target, "--eval-users", a.eval_users,
            "--name", name, "--timeout", a.timeout]
    if a.max_steps_per_epoch:
        args += ["--max-steps-per-epoch", a.max_steps_per_epoch]
    return _run_or_reuse(a, name, _settings(a, "distdgl", depth, batch), "distdgl",
                         (a.partitions, a.cores, float(link)), dgl_lane_python(), args,
                         a.timeout + 300)


def can_run_distdgl() -> str | None:
    """Why DistDGL cannot run here, or None."""
    if dgl_lane_python() is None:
        return "the DGL lane is not built (make dgl)"
    if os.name != "posix" or os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces)"
    return None


def dist_details(result: dict) -> dict:
    """A DistDGL result's per-batch split (ms, median), link bytes (measured) and explosion factor."""
    d = result.get("distributed") or {}
    med = d.get("batch_seconds_median") or {}
    links = (d.get("cluster") or {}).get("link_bytes") or []
    return {**{f"{k}_ms": 1e3 * med[k] for k in PHASES + ("total",) if k in med},
            "link_tx_bytes": sum(x.get("tx_bytes") or 0 for x in links) if links else None,
            "counted_bytes": (d.get("bytes_between_partitions") or {}).get("total"),
            "explosion_factor": d.get("explosion_factor")}


def _fmt(v, spec: str, dash: str = "-") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return dash
    return format(v, spec)


def _gb(b) -> str:
    return "-" if b is None else f"{b / 1e9:.3f} GB" if b >= 1e8 else f"{b / 1e6:.2f} MB"


def _table(header: list, rows: list) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def figure(best, path: Path, title: str) -> None:
    """Time to target and epoch time by depth, one bar per series, modeled bars hatched (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gnnrec_lab.dashboard.compare import ENGINE_COLORS, series_key
    from gnnrec_lab.util.provenance import Provenance
    series = list(dict.fromkeys(best.sort_values("kind")["series"]))
    order = list(ENGINE_COLORS)
    rows = {s: best[best["series"] == s].iloc[0].to_dict() for s in series}
    series.sort(key=lambda s: order.index(series_key(rows[s])) if series_key(rows[s]) in order else len(order))
    depths = sorted(best["layers"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    w = 0.8 / max(1, len(series))
    for ax, col, label in ((axes[0], "time_to_target_s", "time to target, s"), (axes[1], "epoch_s", "epoch time, s")):
        for i, s in enumerate(series):
            g = best[best["series"] == s].set_index("layers")
            ys = [g[col].get(d, float("nan")) for d in depths]
            modeled = rows[s]["kind"] == Provenance.MODELED
            ax.bar([x + (i - (len(series) - 1) / 2) * w for x in range(len(depths))], ys, w,
                   color=ENGINE_COLORS.get(series_key(rows[s]), "#7f7f7f"), hatch="//" if modeled else None,
                   edgecolor="white", label=s)
        ax.set_xticks(range(len(depths)), [f"{int(d)} layer{'s' if d != 1 else ''}" for d in depths])
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_title("time to target (no bar: not reached)")
    axes[1].set_title("epoch time")
    fig.suptitle(title, fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _commit() -> str:
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return c.strip() + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def main(argv=None) -> int:
    a = parse_args(argv)
    why_not = "--full-only" if a.full_only else can_run_distdgl()
    load0, t_all = os.getloadavg(), time.perf_counter()
    started = datetime.datetime.now(datetime.timezone.utc)
    _say(f"headline: {a.dataset}, depths {a.depths}, {a.epochs} epochs, one machine = {a.cores} core(s); "
         f"DistDGL {'on ' + str(a.partitions) + ' machines' if why_not is None else 'not run: ' + why_not}")
    runs, tried, failures = [], [], []
    dist_results: dict = {}
    for depth in a.depths:
        for b in a.full_batches:
            try:
                r = full_run(a, depth, b)
                runs.append(r["run_id"])
                tried.append(("full graph", depth, b, "-", r["run_id"], r.get("time_to_target_s"),
                              r.get("epoch_seconds")))
                _say(f"full L{depth} b{b}: run {r['run_id']}, to target {r.get('time_to_target_s')}")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(f"full graph, {depth} layers, batch {b}: {e}")
                _say(failures[-1])
        if why_not is not None:
            continue
        for b in a.dist_batches:
            try:
                r = dist_run(a, depth, b, a.link)
                runs.append(r["run_id"])
                dist_results[r["run_id"]] = r
                tried.append(("DistDGL", depth, b, f"{a.link:g}", r["run_id"], r.get("time_to_target_s"),
                              r.get("epoch_seconds")))
                _say(f"DistDGL L{depth} b{b}: run {r['run_id']}, to target {r.get('time_to_target_s')}")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(f"DistDGL, {depth} layers, batch {b}: {e}")
                _say(failures[-1])

    from gnnrec_lab.memory.calibrate import host_profile
    from gnnrec_lab.runs.store import Store
    store = Store()
    host = host_profile(measure_if_missing=True, quick=True)
    frame = full_vs_distributed(store, run_ids=runs, host=host, datasets=[a.dataset])
    best = best_by_depth(frame)

    # the link sweep: DistDGL at one depth with its best batch size there
    sweep = []
    if why_not is None:
        at = best[(best["engine"] == "distdgl") & (best["layers"] == a.sweep_depth)]
        b = int(at["batch_size"].iloc[0]) if len(at) else a.dist_batches[0]
        for link in a.links:
            done = next((r for r in dist_results.values() if r["config"]["layers"] == a.sweep_depth
                         and r["config"]["batch_size"] == b and link == a.link), None)
            try:
                r = done or dist_run(a, a.sweep_depth, b, link)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(f"DistDGL link sweep, {link:g} Gbit/s: {e}")
                _say(failures[-1])
                continue
            dist_results[r["run_id"]] = r
            ep = r.get("epoch_seconds") or []
            sweep.append({"link": "unshaped" if not link else f"{link:g} Gbit/s", "run": r["run_id"], "batch": b,
                          "time_to_target_s": r.get("time_to_target_s"),
                          "epoch_s": sum(ep) / len(ep) if ep else None, **dist_details(r)})
            _say(f"link sweep {link:g}: run {r['run_id']}")

    # every run's time to the common target of its depth (the frame's, over every run incl. the sweep)
    if sweep:
        frame = full_vs_distributed(store, run_ids=runs + [s["run"] for s in sweep if s["run"] not in runs],
                                    host=host, datasets=[a.dataset])
        best = best_by_depth(frame[frame["id"].isin(runs)])
    to_target = {int(r["id"]): r["time_to_target_s"] for r in frame.to_dict("records")
                 if r["kind"] == "measured"}
    for s in sweep:
        s["time_to_target_s"] = to_target.get(int(s["run"]))
    tried = [(e, d, b, lk, rid, to_target.get(int(rid)), ep) for e, d, b, lk, rid, _, ep in tried]
    load1 = os.getloadavg()
    wall = time.perf_counter() - t_all
    write_page(a, best, frame, tried, sweep, dist_results, failures, why_not, host, started, load0, load1, wall, argv)
    return 0 if not failures else 1


def write_page(a, best, frame, tried, sweep, dist_results, failures, why_not, host, started, load0, load1, wall,
               argv) -> None:
    from gnnrec_lab.util.provenance import Provenance
    out, img = Path(a.out), Path(a.img)
    cmd = "python benchmarks/bench_headline.py " + " ".join(argv if argv is not None else sys.argv[1:])
    title = (f"{MODEL_WORDS[a.model]} on {a.dataset}: full graph on 1 machine ({a.cores} core) "
             + (f"vs DistDGL on {a.partitions} machines ({a.link:g} Gbit/s)" if why_not is None
                else "(DistDGL not run)")
             + "; hatched = modeled")
    if len(best):
        figure(best, img, title)
    try:
        rel = os.path.relpath(img, out.parent)
    except ValueError:
        rel = str(img)
    L = [f"# Headline: full graph on one machine vs DistDGL on {a.partitions}, by depth", ""]
    L += [f"- date: {started:%Y-%m-%d %H:%M} UTC; commit {_commit()}; wall {wall / 60:.1f} min",
          f"- command: `{cmd.strip()}`",
          f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average "
          f"(1/5/15 min) {'/'.join(f'{x:.1f}' for x in load0)} at the start, {'/'.join(f'{x:.1f}' for x in load1)} "
          f"at the end (measured times include any other work)",
          f"- one machine = {a.cores} core(s) and its memory: full graph `gnnrec-lab run --cores {a.cores}`; DistDGL "
          f"`gnnrec-lab distributed --cluster emulated --partitions {a.partitions} --cores-per-machine {a.cores} "
          f"--link-gbit {a.link:g}` (each machine a network namespace on its own cores, a tbf-shaped link)",
          f"- {MODEL_WORDS[a.model]}, dim {a.dim}, {a.epochs} epochs"
          + (f" of at most {a.max_steps_per_epoch} steps" if a.max_steps_per_epoch else "")
          + f", validation Recall@20 on a seeded sample of {a.eval_users:,} users each epoch (the same users on "
          f"both engines, evaluation time excluded from training time); the target at each depth is "
          f"{TARGET_FRACTION:.0%} of the best validation Recall@20 of the full-graph runs at that depth (column "
          f"'target'; each run's own --target-recall {a.target:g} only where no full-graph run is at that depth)",
          f"- batch sizes tried: full graph {', '.join(map(str, a.full_batches))} with the large-batch rule (Adam, lr "
          f"{a.lr:g} x sqrt(batch / 2048), warm-up half a pass); DistDGL {', '.join(map(str, a.dist_batches))} "
          f"(global, fan-out {a.fanout} per layer, "
          + ("the same large-batch rule on its SparseAdam and dense Adam" if a.dist_rule == "large"
             else f"lr {a.lr:g} fixed") + "); each side's best (least time to target) is shown",
          "- modeled: the full-graph run's times on Optane App Direct (every tensor class on the device) and "
          "Memory Mode (DRAM caching its predicted footprint): the tier model's modeled/measured step-time ratio "
          "for that run times its measured time (`gnnrec_lab.services.comparison.full_vs_distributed`; "
          f"host calibration "
          f"{host.get('measured_at', '?')}). Everything else is measured here.", ""]
    if why_not is not None:
        L += [f"**DistDGL was not run** ({why_not}): the full-graph side only.", ""]
    if failures:
        L += ["**Runs that failed:**", ""] + [f"- {f}" for f in failures] + [""]
    if len(best):
        L += [f"![time to target and epoch time by depth]({rel})", ""]
        dist_by_id = {k: dist_details(v) for k, v in dist_results.items()}
        rows = []
        from gnnrec_lab.dashboard.compare import ENGINE_COLORS, series_key
        order = list(ENGINE_COLORS)   # full graph, App Direct, Memory Mode, DistDGL: the figure's order
        recs = sorted(best.to_dict("records"), key=lambda r: (r["layers"], order.index(series_key(r))
                                                                if series_key(r) in order else len(order)))
        for r in recs:
            d = dist_by_id.get(r["id"], {}) if r["engine"] == "distdgl" else {}
            split = " / ".join(_fmt(d.get(f"{k}_ms"), ".1f") for k in PHASES) if d else "-"
            pm = (f" {fmt_band(r['band'])}" + (" LOW" if r.get("confidence") == "low" else "")
                  if r["kind"] == Provenance.MODELED and r.get("band") == r.get("band") and r.get("band") is not None
                  else "")      # a modeled row's band (tiermodel.model_band), beside each of its times
            rows.append([r["layers"], r["series"], r["batch_size"], _fmt(r["target"], ".4f"),
                         _fmt(r["time_to_target_s"], ".3g", "not reached") + (pm if r["time_to_target_s"] else ""),
                         _fmt(r["epoch_s"], ".3g") + pm,
                         _fmt(r["test_recall@20"], ".4f") if r["kind"] == Provenance.MEASURED else "(same run)",
                         split, _gb(d.get("link_tx_bytes")) if d else "-", _fmt(r["explosion_factor"], ".3f"),
                         r["id"]])
        L += ["## By depth", "", _table(["layers", "series", "batch", "target", "time to target s", "epoch s",
                                         "test Recall@20",
                                         "DistDGL batch ms: " + " / ".join(SPLIT_WORDS[k] for k in PHASES),
                                         "bytes over the links", "explosion factor", "run"], rows), ""]
        L += ["± on a modeled time: the held-out error of the regimes its modeled traffic falls in and the share "
              "of the step outside the kernels, scaled 1:1 with them (docs/tier_model.md); LOW: low confidence.", ""]
        L += ["DistDGL's split is the median per mini-batch over every trainer's batches (measured); bytes over the "
              "links are the sum of what every machine's interface sent during the run (measured, interface "
              "counters); the explosion factor is the nodes a batch's sampled neighbourhood holds over the graph's "
              "(1 for the full graph, which propagates every node every step).", ""]
    L += ["## Every run", "", _table(["engine", "layers", "batch", "link Gbit/s", "run", "time to target s", "epoch s"],
                                     [[e, d, b, lk, rid, _fmt(t, ".3g", "not reached"),
                                       _fmt(sum(ep) / len(ep) if ep else None, ".3g")]
                                      for e, d, b, lk, rid, t, ep in tried]), ""]
    if sweep:
        L += [f"## Link sweep (DistDGL, {a.sweep_depth} layers, batch {sweep[0]['batch']})", "",
              _table(["link", "time to target s", "epoch s", "batch ms (median)", "remote fetch ms", "sync ms",
                      "bytes over the links", "run"],
                     [[s["link"], _fmt(s["time_to_target_s"], ".3g", "not reached"), _fmt(s["epoch_s"], ".3g"),
                       _fmt(s.get("total_ms"), ".1f"), _fmt(s.get("remote_fetch_ms"), ".1f"),
                       _fmt(s.get("grad_sync_ms"), ".1f"), _gb(s.get("link_tx_bytes")), s["run"]] for s in sweep]), ""]
    reasons = frame.attrs.get("reasons") or []
    if reasons:
        L += ["Not modeled: " + "; ".join(f"run {r} on {m}: {w}" for r, m, w in reasons), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L))
    _say(f"wrote {out}" + (f" and {img}" if len(best) else ""))


if __name__ == "__main__":
    sys.exit(main())
