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
fixed, as docs/headline_synth.md of 2026-12-02 was measured: ``--dist-rule none --dist-batches 16384``). The
full-graph side also shows the same run's times **modeled** on Optane App Direct and Memory Mode (the tier
model, ``gnnrec_lab.services.comparison.full_vs_distributed``, the numbers the Compare page and notebook 06
show). A link sweep repeats DistDGL at ``--sweep-depth`` over ``--links`` (Gbit/s; 0 = unshaped). The matched
cell runs both sides at ``--matched-batch`` (16384) with ``--lr`` fixed, no rule and no warm-up on either, at every
depth: the epoch-time factor alone, in a table of its own. Every cell runs each of ``--seeds``; the page shows the
median over them with the range (``services.comparison.seed_cells``, the Compare page's numbers too), the time to
90 / 95 / 98% of the best validation Recall@20 at each depth over both engines, what DistDGL's time to target over
the full graph's is made of (epoch time x epochs to target, each side at its best batch size) and the validation
curves of both engines against training seconds (``<img>_curves.png``).

Writes ``--out`` (docs/headline.md): time to target, epoch time and test Recall@20 by depth and
engine, DistDGL's per-batch split (sampling, remote fetch, compute, sync; median, measured), the bytes
its links carried (interface counters, measured), the explosion factor, every batch size tried, the
link sweep, a figure (``--img``, PNG, modeled bars hatched), the date, commit, command and the load.

Every run goes through the CLI in a subprocess and is recorded in the run store
(``$GNNREC_LAB_HOME``), so the Compare page shows the same runs afterwards.

Usage:
  python benchmarks/bench_headline.py                 # synth-gowalla, depths 1-4 (hours; writes docs/headline.md)
  python benchmarks/bench_headline.py --dataset gowalla --depths 1,2,3 --epochs 12 --seeds 2020,2021,2022 \
      --precision fp32 --links 10                     # docs/headline.md as it stands: real Gowalla (about 95 min)
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
    seed_cells,
)

DEFAULT_SEED = 2020   # RunConfig's: runs of this seed keep the names they had before --seeds
SPLIT_WORDS = {"sampling": "sampling", "remote_fetch": "remote fetch", "compute": "compute", "grad_sync": "sync"}


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not out or any(x < 1 for x in out):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return out


def _precisions(text: str) -> list[str]:
    vals = [x.strip() for x in text.split(",") if x.strip()]
    if "fp32" not in vals or not set(vals) <= {"fp32", "bf16"}:
        raise argparse.ArgumentTypeError(f"fp32, or fp32,bf16, got {text!r}")
    return vals


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
    p.add_argument("--matched-batch", type=int, default=16384,
                   help="the matched cell: both sides at this batch size with lr fixed (no rule, no warm-up) at every "
                        "depth (default 16384; 0: not run)")
    p.add_argument("--precision", type=_precisions, default=["fp32", "bf16"],
                   help="the full graph's row storage, comma-separated: fp32 and bf16 (default both): each bf16 cell "
                        "is the full-graph cell again on bf16 rows, measured here and modeled on Optane beside it; "
                        "the target stays the fp32 runs'")
    p.add_argument("--seeds", type=_ints, default=[DEFAULT_SEED],
                   help=f"seeds of every cell (default {DEFAULT_SEED}); each cell shows the median over them and the "
                        "range")
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
                            ("--max-steps-per-epoch", 4), ("--lr", 5e-3), ("--matched-batch", 512)):
            default(flag, value)
    if a.matched_batch < 0:
        p.error(f"--matched-batch: a batch size, or 0 for no matched cell, got {a.matched_batch}")
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


# The matched cell: both sides at one batch size, lr fixed (no large-batch rule, no warm-up) on both.
NO_RULE = {"lr_rule": "none"}


def _variant(matched: bool, seed: int, precision: str = "fp32") -> str:
    return " ".join(x for x in ("matched" if matched else "", "" if precision == "fp32" else precision,
                                "" if seed == DEFAULT_SEED else f"s{seed}") if x)


def _settings(a, engine: str, depth: int, batch: int, matched: bool = False, seed: int = DEFAULT_SEED,
              precision: str = "fp32") -> dict:
    """The config values a run reused by ``--resume`` must share with the one asked for."""
    rule = NO_RULE if matched else None
    want = headline_settings(engine, dataset=a.dataset, model=a.model, layers=depth, dim=a.dim, batch_size=batch,
                             epochs=a.epochs, lr=a.lr, target_recall=a.target, eval_users=a.eval_users,
                             max_steps_per_epoch=a.max_steps_per_epoch, cores=a.cores, fanout=a.fanout,
                             dist_rule=(rule or dist_rule(a)) if engine == "distdgl" else None, full_rule=rule,
                             precision=precision)
    return dict(want, seed=seed)


def _run_or_reuse(a, name: str, want: dict, engine: str, machines: tuple, python, args: list,
                  timeout: float) -> dict:
    if a.resume:
        done = stored_run(name, want, engine, machines)
        if done is not None:
            _say(f"{name}: reusing finished run {done['run_id']} (--resume)")
            return done
    return _cli(python, args, timeout)


def full_run(a, depth: int, batch: int, matched: bool = False, seed: int = DEFAULT_SEED,
             precision: str = "fp32") -> dict:
    rule = NO_RULE if matched else LARGE_BATCH_RULE
    name = headline_name("full", a.model, depth, batch, variant=_variant(matched, seed, precision))
    args = ["run", "--dataset", a.dataset, "--model", a.model, "--layers", depth, "--dim", a.dim,
            "--batch-size", batch, "--epochs", a.epochs, "--lr", a.lr, *_rule_args(rule), "--patience", 0,
            "--target-recall", a.target, "--eval-users", a.eval_users, "--cores", a.cores, "--no-progress",
            "--seed", seed, "--name", name, "--precision", precision]
    if a.max_steps_per_epoch:
        args += ["--max-steps-per-epoch", a.max_steps_per_epoch]
    return _run_or_reuse(a, name, _settings(a, "full", depth, batch, matched, seed, precision), "full",
                         (1, a.cores, None),
                         sys.executable, args, a.timeout)


def dist_run(a, depth: int, batch: int, link: float, matched: bool = False, seed: int = DEFAULT_SEED) -> dict:
    rule = NO_RULE if matched else dist_rule(a)
    name = headline_name("distdgl", a.model, depth, batch, link, variant=_variant(matched, seed))
    args = ["distributed", "--cluster", "emulated", "--partitions", a.partitions, "--cores-per-machine", a.cores,
            "--link-gbit", link, "--dataset", a.dataset, "--model", a.model, "--layers", depth, "--dim", a.dim,
            "--fanouts", ",".join([str(a.fanout)] * depth), "--batch-size", batch, "--epochs", a.epochs,
            "--lr", a.lr, *_rule_args(rule), "--target-recall", a.target, "--eval-users", a.eval_users,
            "--seed", seed, "--name", name, "--timeout", a.timeout]
    if a.max_steps_per_epoch:
        args += ["--max-steps-per-epoch", a.max_steps_per_epoch]
    return _run_or_reuse(a, name, _settings(a, "distdgl", depth, batch, matched, seed), "distdgl",
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


def _spread(row: dict, col: str, spec: str, dash: str = "-") -> str:
    """A cell's value (median over its seeds) and, over more than one seed, its range, with how many
    seeds reached the target where that is the value."""
    v = _fmt(row.get(col), spec, dash)
    n = row.get("seeds") or 1
    lo, hi = row.get(f"{col}_min"), row.get(f"{col}_max")
    if n > 1 and lo is not None and hi is not None and not (isinstance(lo, float) and math.isnan(lo)):
        v += f" ({_fmt(lo, spec)}-{_fmt(hi, spec)})"
    if n > 1 and col == "time_to_target_s":
        v += f", {row.get('reached')}/{n} reached"
    return v


FRACTIONS = (0.90, 0.95, 0.98)   # the targets of the time-to-target table, of the best over both engines


def _same_cell(cells, r: dict):
    """The rows of ``cells`` (seed cells at another target) of the same series, depth and batch size as ``r``."""
    return cells[(cells["series"] == r["series"]) & (cells["layers"] == r["layers"])
                 & (cells["batch_size"] == r["batch_size"])]


def fraction_rows(best, cells_by_fraction: dict) -> list:
    """Per depth and measured series (its best cell at the 95% target): the median time over seeds to
    each of :data:`FRACTIONS` of the best validation Recall@20 at that depth (both engines), with the
    range and how many seeds reached it."""
    rows = []
    for r in best[best["kind"] == "measured"].sort_values(["layers", "engine"], ascending=[True, False]).to_dict(
            "records"):
        out = [r["layers"], r["series"], r["batch_size"]]
        for f in FRACTIONS:
            c = cells_by_fraction.get(f)
            hit = None if c is None or c.empty else _same_cell(c, r)
            out.append("-" if hit is None or hit.empty else _spread(hit.iloc[0].to_dict(), "time_to_target_s",
                                                                     ".3g", "not reached"))
        rows.append(out)
    return rows


def _full_fp32(g):
    """The float32 full-graph rows of ``g`` (a bf16 cell is a variant shown beside them, not the full graph)."""
    fp32 = g["precision"].fillna("fp32") == "fp32" if "precision" in g else True
    return g[(g["engine"] == "full") & fp32]


def dist_over_full(g, col: str):
    """DistDGL's ``col`` over the full graph's in ``g`` (one depth's cells: the first of each engine,
    float32 rows), or None where either is missing, not finite or not positive."""
    f, d = _full_fp32(g), g[g["engine"] == "distdgl"]
    if not (len(f) and len(d)):
        return None
    a, b = f[col].iloc[0], d[col].iloc[0]
    ok = all(x is not None and math.isfinite(x) and x > 0 for x in (a, b))
    return b / a if ok else None


def factor_rows(best, cell) -> list:
    """What DistDGL's time to target over the full graph's is made of, per depth (the 95% target,
    medians over seeds): its epoch time over the full graph's x its epochs to target over the full
    graph's (time / epoch time), with each side's batch size; and the matched cell's epoch ratio (the
    same batch size and lr on both)."""
    m = best[best["kind"] == "measured"]
    matched = {}
    if cell is not None and len(cell):
        c = seed_cells(cell[cell["kind"] == "measured"])
        matched = {depth: dist_over_full(g, "epoch_s") for depth, g in c.groupby("layers")}
    rows = []
    for depth, g in m.groupby("layers", sort=True):
        f, d = _full_fp32(g), g[g["engine"] == "distdgl"]
        if not (len(f) and len(d)):
            continue
        time_ratio, epoch = dist_over_full(g, "time_to_target_s"), dist_over_full(g, "epoch_s")
        rows.append([depth, f["batch_size"].iloc[0], d["batch_size"].iloc[0], _x(time_ratio), _x(epoch),
                     _x(time_ratio / epoch if time_ratio and epoch else None), _x(matched.get(depth))])
    return rows


def bias_lines(a) -> list:
    """What stays biased either way in this setup, whatever the numbers: the page says it next to the
    factor table (issue 32, item 5)."""
    cores = a.partitions * a.cores
    link = "unshaped veth pairs" if not a.link else f"a {a.link:g} Gbit/s tbf-shaped veth link"
    return [
        f"- **For DistDGL:** it has {a.partitions} machines x {a.cores} core(s) = {cores} cores to the full "
        f"graph's {a.cores}; its link is {link} inside one host (no NIC, switch, cross traffic or packet loss: "
        "an idealised network).",
        "- **Against DistDGL:** each machine's core(s) run its graph server and its trainer together (a real "
        "deployment gives the server cores of its own), and the machines share one host's memory bandwidth "
        "and last-level cache, so one machine's traffic slows the other's.",
        "- **For the full graph:** the graph fits in this host's DRAM, which is the case the full graph is "
        "best at; the rows that put its tables on Optane are **modeled** (tier model), not measured.",
        "- **Either way:** one learning-rate rule (sqrt of the batch over 2048, half a pass of warm-up) and the "
        "same batch sizes on both sides; the rule was tuned on the full graph (docs/measurements.md, 'Large "
        "batches') and is given to DistDGL as is, not retuned for it; evaluation is excluded from both "
        "sides' training time; the target is relative to the best either engine reached within "
        f"{a.epochs} epochs, not to the converged accuracy.",
    ]


def distdgl_wins(best, by_fraction: dict) -> list:
    """Where DistDGL does better than the full graph in these runs, per depth (measured best cells,
    medians over seeds): fewer epochs to the 95% target, a higher test Recall@20, a target of
    :data:`FRACTIONS` reached sooner or reached where the full graph never got there. Bullet lines; one
    line saying so where it wins nowhere."""
    out = []
    m = best[best["kind"] == "measured"]
    for depth, g in m.groupby("layers", sort=True):
        f, d = _full_fp32(g), g[g["engine"] == "distdgl"]
        if not (len(f) and len(d)):
            continue
        fr, dr = f.iloc[0].to_dict(), d.iloc[0].to_dict()
        time_ratio, epoch = dist_over_full(g, "time_to_target_s"), dist_over_full(g, "epoch_s")
        if time_ratio and epoch and time_ratio / epoch < 1:
            out.append(f"- {depth} layer(s): DistDGL needs {time_ratio / epoch:.2f}x the full graph's epochs to the "
                       f"95% target (batch {dr['batch_size']} vs {fr['batch_size']}).")
        ft, dt = fr.get("test_recall@20"), dr.get("test_recall@20")
        if ft is not None and dt is not None and math.isfinite(ft) and math.isfinite(dt) and dt > ft:
            out.append(f"- {depth} layer(s): DistDGL's test Recall@20 is higher, {dt:.4f} vs {ft:.4f} "
                       "(medians over seeds).")
        for frac in FRACTIONS:
            c = by_fraction.get(frac)
            if c is None or c.empty:
                continue
            pick = {}
            for side, r in (("full", fr), ("distdgl", dr)):
                hit = _same_cell(c, r)
                t = hit["time_to_target_s"].iloc[0] if len(hit) else None
                pick[side] = t if t is not None and math.isfinite(t) else None
            if pick["distdgl"] is not None and (pick["full"] is None or pick["distdgl"] < pick["full"]):
                out.append(f"- {depth} layer(s): DistDGL reaches {frac:.0%} of the best in {pick['distdgl']:.3g} s, "
                           + ("the full graph never does." if pick["full"] is None
                              else f"the full graph in {pick['full']:.3g} s."))
    return out or ["- In these runs DistDGL is ahead on no depth: not on time or epochs to any of the targets, "
                   "nor on test Recall@20."]


def _band_text(r: dict) -> str:
    """A modeled row's band (tiermodel.model_band) as it follows each of its times, LOW at low
    confidence; "" for a measured row."""
    from gnnrec_lab.util.provenance import Provenance
    if r["kind"] != Provenance.MODELED or r.get("band") is None or r.get("band") != r.get("band"):
        return ""
    return f" {fmt_band(r['band'])}" + (" LOW" if r.get("confidence") == "low" else "")


def precision_rows(best) -> list:
    """Half the bytes: per depth and device (this host's DRAM, measured; each Optane mode, modeled
    with its band), the full graph's epoch time on fp32 rows and on bf16 rows (each its best cell)
    and fp32 / bf16."""
    full = best[best["engine"] == "full"]
    if "precision" not in full or not (full["precision"] == "bf16").any():
        return []
    rows = []
    from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE
    from gnnrec_lab.dashboard.compare import series_mode

    def words(mode) -> str:   # the device a row's time is on, as the table words its memory mode
        if mode is None:
            return "this host's DRAM (measured)"
        return f"{MEMORY_MODE_TABLE[mode].words if mode in MEMORY_MODE_TABLE else mode} (modeled)"
    where = [words(series_mode(r)) for r in full.to_dict("records")]
    full = full.assign(_where=where, _m=full["kind"] != "measured").sort_values(["layers", "_m", "_where"])
    for (depth, device), g in full.groupby(["layers", "_where"], sort=False):
        by = {p: r for p, r in zip(g["precision"].fillna("fp32"), g.to_dict("records"))}
        f, h = by.get("fp32"), by.get("bf16")
        if f is None or h is None:
            continue
        modeled = f["kind"] != "measured"
        rows.append([depth, device, f["batch_size"],
                     _spread(f, "epoch_s", ".3g") + _band_text(f), h["batch_size"],
                     _spread(h, "epoch_s", ".3g") + _band_text(h),
                     _x(f["epoch_s"] / h["epoch_s"] if f["epoch_s"] and h["epoch_s"] else None),
                     _fmt(h.get("test_recall@20"), ".4f") if not modeled else "(same run)"])
    return rows


def _x(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}x"


def curves(store, best, path: Path, title: str) -> bool:
    """Validation Recall@20 against training seconds (evaluation excluded) of each measured series'
    best cell at each depth, every seed's run a line, one panel per depth (PNG). False: no history."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gnnrec_lab.dashboard.compare import series_color
    m = best[best["kind"] == "measured"]
    depths = sorted(m["layers"].unique())
    if not depths:
        return False
    fig, axes = plt.subplots(1, len(depths), figsize=(4.2 * len(depths), 3.6), squeeze=False)
    drawn = False
    for ax, depth in zip(axes[0], depths):
        batches = []     # each series' batch size differs by depth: the panel's title says it, not the legend
        for r in m[m["layers"] == depth].to_dict("records"):
            batches.append(f"{'DistDGL' if r['engine'] == 'distdgl' else 'full graph'} b{r['batch_size']}")
            color = series_color(r)
            for i, rid in enumerate(str(r.get("runs") or r["id"]).split(",")):
                hist = store.run_record(int(rid)).result.history
                pts = [(h["elapsed_s"], h["recall@20"]) for h in hist if "recall@20" in h and "elapsed_s" in h]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, color=color, alpha=0.85, lw=1.2,
                            label=r["series"] if i == 0 else None)
                    drawn = True
        t = m[m["layers"] == depth]["target"].dropna()
        if len(t):
            ax.axhline(float(t.iloc[0]), color="#444", lw=0.8, ls="--",
                       label="target (95% of the best; median over seeds)")
        ax.set_xscale("log")
        ax.set_title(f"{depth} layer{'s' if depth != 1 else ''} ({', '.join(sorted(batches, reverse=True))})",
                     fontsize=9)
        ax.set_xlabel("training s (measured, log)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation Recall@20")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.14, 1, 0.93))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


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

    from gnnrec_lab.dashboard.compare import series_color, series_rank
    from gnnrec_lab.util.provenance import Provenance
    series = list(dict.fromkeys(best.sort_values("kind")["series"]))
    rows = {s: best[best["series"] == s].iloc[0].to_dict() for s in series}
    series.sort(key=lambda s: series_rank(rows[s]))   # full graph, its memory modes, DistDGL
    depths = sorted(best["layers"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    w = 0.8 / max(1, len(series))
    for ax, col, label in ((axes[0], "time_to_target_s", "time to target, s"), (axes[1], "epoch_s", "epoch time, s")):
        for i, s in enumerate(series):
            g = best[best["series"] == s].set_index("layers")
            ys = [float("nan") if g[col].get(d) is None else float(g[col].get(d)) for d in depths]
            modeled = rows[s]["kind"] == Provenance.MODELED
            ax.bar([x + (i - (len(series) - 1) / 2) * w for x in range(len(depths))], ys, w,
                   color=series_color(rows[s]), hatch="//" if modeled else None,
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
    runs, tried, failures, matched = [], [], [], []
    dist_results: dict = {}
    for depth, seed in [(d, sd) for d in a.depths for sd in a.seeds]:
        for b, prec in [(b, p) for p in a.precision for b in a.full_batches]:
            side = "full graph" + ("" if prec == "fp32" else f" {prec}")
            try:
                r = full_run(a, depth, b, seed=seed, precision=prec)
                runs.append(r["run_id"])
                tried.append((side, depth, b, "-", seed, r["run_id"], r.get("time_to_target_s"),
                              r.get("epoch_seconds")))
                _say(f"{side} L{depth} b{b} seed {seed}: run {r['run_id']}, to target {r.get('time_to_target_s')}")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(f"{side}, {depth} layers, batch {b}, seed {seed}: {e}")
                _say(failures[-1])
        if a.matched_batch > 0:
            sides = ["full graph"] + (["DistDGL"] if why_not is None else [])
            for engine in sides:
                try:
                    r = (full_run(a, depth, a.matched_batch, matched=True, seed=seed) if engine == "full graph"
                         else dist_run(a, depth, a.matched_batch, a.link, matched=True, seed=seed))
                    matched.append((engine, depth, r["run_id"]))
                    if engine == "DistDGL":
                        dist_results[r["run_id"]] = r
                    _say(f"matched {engine} L{depth} b{a.matched_batch} seed {seed}: run {r['run_id']}")
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    failures.append(f"matched cell, {engine}, {depth} layers, seed {seed}: {e}")
                    _say(failures[-1])
        if why_not is not None:
            continue
        for b in a.dist_batches:
            try:
                r = dist_run(a, depth, b, a.link, seed=seed)
                runs.append(r["run_id"])
                dist_results[r["run_id"]] = r
                tried.append(("DistDGL", depth, b, f"{a.link:g}", seed, r["run_id"], r.get("time_to_target_s"),
                              r.get("epoch_seconds")))
                _say(f"DistDGL L{depth} b{b} seed {seed}: run {r['run_id']}, to target {r.get('time_to_target_s')}")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(f"DistDGL, {depth} layers, batch {b}, seed {seed}: {e}")
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
                         and r["config"].get("seed", DEFAULT_SEED) == a.seeds[0]
                         and r["config"]["batch_size"] == b and link == a.link), None)
            try:
                r = done or dist_run(a, a.sweep_depth, b, link, seed=a.seeds[0])
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
    tried = [(e, d, b, lk, sd, rid, to_target.get(int(rid)), ep) for e, d, b, lk, sd, rid, _, ep in tried]
    # time to 90 / 98% of the best as well (95%: the frame's); the tier model is not needed for these
    tuned = frame[frame["id"].isin(runs) & (frame["kind"] == "measured")]
    by_fraction = {0.95: seed_cells(tuned)}
    for f in FRACTIONS:
        if f not in by_fraction:
            other = full_vs_distributed(store, run_ids=runs, host=None, datasets=[a.dataset], target_fraction=f)
            by_fraction[f] = seed_cells(other[other["kind"] == "measured"])
    # the matched cell: its own target (the same rule over its full-graph runs), kept out of "By depth"
    cell = (full_vs_distributed(store, run_ids=[rid for _, _, rid in matched], host=host, datasets=[a.dataset])
            if matched else None)
    load1 = os.getloadavg()
    wall = time.perf_counter() - t_all
    write_page(a, best, frame, tried, sweep, dist_results, failures, why_not, host, started, load0, load1, wall, argv,
               cell=cell, by_fraction=by_fraction, store=store)
    return 0 if not failures else 1


def matched_rows(cell) -> list:
    """The matched cell's table: per depth, each engine's measured run (epoch s, time to the cell's
    target, test Recall@20) and DistDGL's epoch and time to target over the full graph's."""
    if cell is None or not len(cell):
        return []
    m = seed_cells(cell[cell["kind"] == "measured"]).sort_values(["layers", "engine"], ascending=[True, False])
    rows = []
    for depth, g in m.groupby("layers", sort=True):
        for r in g.to_dict("records"):
            rows.append([depth, "DistDGL" if r["engine"] == "distdgl" else "full graph", r["batch_size"],
                         _fmt(r["target"], ".4f"), _spread(r, "time_to_target_s", ".3g", "not reached"),
                         _spread(r, "epoch_s", ".3g"), _spread(r, "test_recall@20", ".4f"), r["runs"]])
        rows.append([depth, "DistDGL / full graph", "", "", _x(dist_over_full(g, "time_to_target_s")),
                     _x(dist_over_full(g, "epoch_s")), "", ""])
    return rows


def write_page(a, best, frame, tried, sweep, dist_results, failures, why_not, host, started, load0, load1, wall,
               argv, cell=None, by_fraction=None, store=None) -> None:
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
          + f", validation Recall@20 each epoch and test Recall@20 at the end on a seeded sample of {a.eval_users:,} "
          f"users (the same users on both engines; each seed draws its own sample, a large part of the spread of "
          f"test Recall@20 over seeds; evaluation time excluded from training time); the target at each depth is "
          f"{TARGET_FRACTION:.0%} of the best validation Recall@20 at that depth and seed over the runs of both "
          f"engines (column 'target': the median over seeds; each run's own --target-recall {a.target:g} only "
          f"where no run is at that depth)",
          f"- batch sizes tried: full graph {', '.join(map(str, a.full_batches))} with the large-batch rule (Adam, lr "
          f"{a.lr:g} x sqrt(batch / 2048), warm-up half a pass); DistDGL {', '.join(map(str, a.dist_batches))} "
          f"(global, fan-out {a.fanout} per layer, "
          + ("the same large-batch rule on its SparseAdam and dense Adam" if a.dist_rule == "large"
             else f"lr {a.lr:g} fixed") + "); each side's best (least time to target) is shown",
          "- modeled: the full-graph run's times on Optane App Direct (every tensor class on the device) and "
          "Memory Mode (DRAM caching its predicted footprint): the tier model's modeled/measured step-time ratio "
          "for that run times its measured time (`gnnrec_lab.services.comparison.full_vs_distributed`; "
          f"host calibration "
          f"{host.get('measured_at', '?')})"
          + ("; the bf16 full-graph runs alike, from their own records" if "bf16" in a.precision else "")
          + ". Everything else is measured here.", ""]
    if why_not is not None:
        L += [f"**DistDGL was not run** ({why_not}): the full-graph side only.", ""]
    if failures:
        L += ["**Runs that failed:**", ""] + [f"- {f}" for f in failures] + [""]
    if len(best):
        L += [f"![time to target and epoch time by depth]({rel})", ""]
        dist_by_id = {k: dist_details(v) for k, v in dist_results.items()}
        rows = []
        from gnnrec_lab.dashboard.compare import series_rank
        # full graph, its memory modes, DistDGL: the figure's order
        recs = sorted(best.to_dict("records"), key=lambda r: (r["layers"], series_rank(r)))
        for r in recs:
            d = dist_by_id.get(r["id"], {}) if r["engine"] == "distdgl" else {}
            split = " / ".join(_fmt(d.get(f"{k}_ms"), ".1f") for k in PHASES) if d else "-"
            pm = _band_text(r)      # a modeled row's band, beside each of its times
            rows.append([r["layers"], r["series"], r["batch_size"], _fmt(r["target"], ".4f"),
                         _spread(r, "time_to_target_s", ".3g", "not reached") + (pm if r["time_to_target_s"] else ""),
                         _spread(r, "epoch_s", ".3g") + pm,
                         _spread(r, "test_recall@20", ".4f") if r["kind"] == Provenance.MEASURED else "(same run)",
                         split, _gb(d.get("link_tx_bytes")) if d else "-", _fmt(r["explosion_factor"], ".3f"),
                         r.get("runs") or r["id"]])
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
    L += ["## Every run", "", _table(["engine", "layers", "batch", "link Gbit/s", "seed", "run", "time to target s",
                                      "epoch s"],
                                     [[e, d, b, lk, sd, rid, _fmt(t, ".3g", "not reached"),
                                       _fmt(sum(ep) / len(ep) if ep else None, ".3g")]
                                      for e, d, b, lk, sd, rid, t, ep in tried]), ""]
    if sweep:
        L += [f"## Link sweep (DistDGL, {a.sweep_depth} layers, batch {sweep[0]['batch']})", "",
              _table(["link", "time to target s", "epoch s", "batch ms (median)", "remote fetch ms", "sync ms",
                      "bytes over the links", "run"],
                     [[s["link"], _fmt(s["time_to_target_s"], ".3g", "not reached"), _fmt(s["epoch_s"], ".3g"),
                       _fmt(s.get("total_ms"), ".1f"), _fmt(s.get("remote_fetch_ms"), ".1f"),
                       _fmt(s.get("grad_sync_ms"), ".1f"), _gb(s.get("link_tx_bytes")), s["run"]] for s in sweep]), ""]
    rows = fraction_rows(best, by_fraction or {}) if len(best) else []
    if rows:
        L += ["## Time to 90 / 95 / 98% of the best validation Recall@20", "",
              "Each target is that share of the best validation Recall@20 at the depth over the runs of both engines "
              "(per seed); each series' cell is its best at 95%. Median over "
              f"{len(a.seeds)} seed(s) ({', '.join(map(str, a.seeds))}), the range in brackets, and how many seeds "
              "reached it.", "",
              _table(["layers", "series", "batch"] + [f"to {f:.0%} s" for f in FRACTIONS], rows), ""]
    rows = factor_rows(best, cell) if len(best) else []
    if rows:
        L += ["## What the margin is made of", "",
              "DistDGL's time to the 95% target over the full graph's = its epoch time over the full graph's x its "
              "epochs to target over the full graph's (time to target / epoch time), each side at its own best "
              "batch size (medians over seeds). The matched cell's epoch ratio is the first factor at the same batch "
              "size and learning rate on both sides.", "",
              _table(["layers", "full graph batch", "DistDGL batch", "time to target", "epoch time",
                      "epochs to target", "epoch time, matched cell"], rows), ""]
    if why_not is None and len(best):
        L += ["## What stays biased, and where DistDGL wins", ""] + bias_lines(a) + [""]
        L += ["Where DistDGL does better in these runs (computed from the tables above):", ""]
        L += distdgl_wins(best, by_fraction or {}) + [
            "- By design, each DistDGL machine holds 1/" + str(a.partitions) + " of the graph and its "
            "embedding rows; the full graph needs all of them in one machine's memory (or on a slower tier).", ""]
    if store is not None and len(best):
        cimg = img.with_name(img.stem + "_curves" + img.suffix)
        if curves(store, best, cimg, f"validation Recall@20 against training time: {a.dataset}"):
            try:
                crel = os.path.relpath(cimg, out.parent)
            except ValueError:
                crel = str(cimg)
            L += [f"![validation Recall@20 against training seconds, both engines]({crel})", ""]
    rows = precision_rows(best) if len(best) else []
    if rows:
        L += ["## Half the bytes: the full graph on bf16 rows", "",
              "The full graph again with `--precision bf16` (rows stored in 16 bits, sums and master weights in "
              "float32), each precision at its own best batch size: epoch time measured on this host's DRAM and "
              "**modeled** on each Optane mode from the bf16 run's own kernel records (their bytes are the bf16 "
              "rows'), ± its band. The bf16 runs are timed to the float32 runs' target.", "",
              _table(["layers", "device", "fp32 batch", "fp32 epoch s", "bf16 batch", "bf16 epoch s", "fp32 / bf16",
                      "bf16 test Recall@20"], rows), ""]
    rows = matched_rows(cell)
    if rows:
        L += [f"## The matched cell (both sides at batch {a.matched_batch}, lr {a.lr:g} fixed: no rule, no warm-up)",
              "", "The epoch-time factor alone: the same batch size and learning rate on both sides. Its target is "
              f"{TARGET_FRACTION:.0%} of the best validation Recall@20 of the cell's own runs at each depth.",
              "", _table(["layers", "engine", "batch", "target", "time to target s", "epoch s", "test Recall@20",
                          "run"], rows), ""]
    reasons = frame.attrs.get("reasons") or []
    if reasons:
        L += ["Not modeled: " + "; ".join(f"run {r} on {m}: {w}" for r, m, w in reasons), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L))
    _say(f"wrote {out}" + (f" and {img}" if len(best) else ""))


if __name__ == "__main__":
    sys.exit(main())
