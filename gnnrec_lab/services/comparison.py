"""Full-graph training on one machine vs DistDGL on P machines (issue 20): the numbers every view
of the comparison shows (the Compare page's "Full graph vs DistDGL" section, notebook 06,
``benchmarks/bench_headline.py``).

One machine is C cores and its memory: a full-graph run pinned with ``--cores C`` is one, a DistDGL
run on the emulated cluster (``--partitions P --cores-per-machine C``) is P. Each stored run is a
*measured* row; each full-graph run also gets one *modeled* row per Optane memory mode (the papers'
single machine is an Optane one): its measured durations times the tier model's modeled/measured
training-step ratio of that run on the mode's device (:func:`full_graph_modeled`,
:func:`~gnnrec_lab.memory.tiermodel.modeled_seconds`). A services-layer module: it reads the run
store (through :mod:`~gnnrec_lab.services.projection` for the modeled rows).

The columns of one run, whatever its engine, are defined here once (:func:`comparison_row`,
:data:`COMPARISON_COLUMNS`), as is the target that means the same on every engine
(:func:`common_targets`, and :func:`reference_target` for ``gnnrec-lab distributed --target-of``):
the CLI, ``benchmarks/bench_headline.py``, notebook 06 and the Compare page read them from here.
"""
from __future__ import annotations

import math
import threading
from typing import Optional

import numpy as np
import pandas as pd

from gnnrec_lab.config.memory_modes import DEFAULT_MEMORY_MODE, MEMORY_MODE_TABLE, memory_mode_of, mode_look
from gnnrec_lab.memory.tiermodel import MODE_DEVICES, model_band, modeled_seconds
from gnnrec_lab.runs.record import StoredResult, section
from gnnrec_lab.services.projection import dram_run_modes, stored_run_step_time
from gnnrec_lab.training.step import target_outcome
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus

# The papers' single machine is an Optane one: the full-graph side of the comparison also shows each
# run's times modeled on these memory modes' devices (tiermodel.MODE_DEVICES; modeled, hatched).
OPTANE_MODES = ("optane_app_direct", "optane_memory_mode")
FULL_VS_DIST_COLUMNS = ["id", "engine", "series", "kind", "dataset", "model", "layers", "batch_size", "precision",
                        "machines",
                        "cores_per_machine", "link_gbit", "target", "target_reached", "reference_run",
                        "time_to_target_s", "epoch_s", "train_s",
                        "best_valid_recall@20", "test_recall@20", "explosion_factor", "batch_ms", "memory_mode",
                        "device", "ratio", "placement_assumption", "band", "confidence"]


# --- the columns every view of the comparison shows: one row per run (comparison_frame), the common
# target (common_targets), the reference run of --target-of (reference_target) ------------------------
TARGET_FRACTION = 0.95   # the default target: this share of the full-graph run's best validation Recall@20
# what a full-graph reference run and a run measured against it must share: the same graph, model,
# depth and batch size, and the same seeded evaluation users (seed, eval_users)
REFERENCE_FIELDS = ("dataset", "model", "layers", "batch_size", "seed", "eval_users")
# The full graph vs DistDGL comparison's target: a share of the best validation Recall@20 at that depth
# over both engines (not only the full graph's: a DistDGL run that ends higher sets the bar for both).
TARGET_ENGINES = ("full", "distdgl")
# the same, for a comparison by depth in which each engine keeps the batch size it does best with
DEPTH_FIELDS = tuple(f for f in REFERENCE_FIELDS if f != "batch_size")

COMPARISON_COLUMNS = ["id", "engine", "dataset", "model", "layers", "batch_size", "epoch_s", "time_to_target_s",
                      "best_valid_recall@20", "test_recall@20", "explosion_factor", "batch_ms", "partitions",
                      "reference_run", "common_target", "common_target_reached", "time_to_common_target_s"]


def engine_of(result: dict) -> str:
    """``full``, ``sampled`` or ``distdgl``: the engine a stored result was trained with."""
    r = StoredResult.from_dict(result)
    return r.raw.get("engine") or ("full" if r.config.get("mode", "full") == "full" else "sampled")


def reference_target(store, run_id: int, config, fraction: float = TARGET_FRACTION) -> dict:
    """The target ``fraction`` x the best validation Recall@20 of finished full-graph run ``run_id``,
    for a run of ``config`` (a RunConfig): DistSpec's ``target_recall``, ``target_of``,
    ``target_fraction``, ``target_reference``. UserError (naming ``--target-of``) when that run is
    not a finished full-graph run with a validation Recall@20 or differs in a :data:`REFERENCE_FIELDS`."""
    try:
        run = store.run_record(run_id, need=("config", "result"))
    except UserError as e:   # no such run, or a damaged one: named as the flag's
        raise UserError(f"--target-of: {e}") from None
    if run.status is not RunStatus.FINISHED:
        raise UserError(f"--target-of: run {run_id} is {run.status}, not finished")
    if engine_of(run.result) != "full":
        raise UserError(f"--target-of: run {run_id} is a {engine_of(run.result)} run; the target is a share of a "
                        f"full-graph run's best validation Recall@20")
    best = run.result.best_valid.get("recall@20")
    if best is None or not np.isfinite(best) or best <= 0:
        raise UserError(f"--target-of: run {run_id} has no positive best validation Recall@20 ({best})")
    ref = run.config
    for name in REFERENCE_FIELDS:
        if ref.get(name) != getattr(config, name):
            raise UserError(f"--target-of: run {run_id} has {name} {ref.get(name)!r}, this run "
                            f"--{name.replace('_', '-')} {getattr(config, name)!r}: the target must come from "
                            f"a full-graph run of the same {', '.join(REFERENCE_FIELDS)}")
    return {"target_recall": float(fraction) * float(best), "target_of": int(run_id),
            "target_fraction": float(fraction), "target_reference": float(best)}


def comparison_row(result: dict, run_id=None) -> dict:
    """One run (a RunResult's or a DistDGL run's result dict) as a row of :func:`comparison_frame`
    (its common-target columns are the frame's)."""
    r = StoredResult.from_dict(result)
    cfg, dist, ep = r.config, r.distributed, r.epoch_seconds
    engine = engine_of(r)
    batch = section(dist, "batch_seconds_median").get("total")
    return {"id": run_id, "engine": engine, "dataset": cfg.get("dataset"), "model": cfg.get("model"),
            "layers": cfg.get("layers"), "batch_size": cfg.get("batch_size"),
            "precision": cfg.get("precision") or "fp32",
            "epoch_s": float(np.mean(ep)) if ep else None, "time_to_target_s": r.time_to_target_s,
            "best_valid_recall@20": r.best_valid.get("recall@20"),
            "test_recall@20": r.test.get("recall@20"),
            "explosion_factor": dist.get("explosion_factor", 1.0 if engine == "full" else None),
            "batch_ms": None if batch is None else batch * 1e3,
            "partitions": section(r.info, "distributed").get("partitions"),
            "reference_run": None, "common_target": None, "common_target_reached": None,
            "time_to_common_target_s": None}


def common_targets(results: list, fraction: float = TARGET_FRACTION, fields=REFERENCE_FIELDS,
                   engines=("full",)) -> list[dict]:
    """For each ``(run_id, result)``: the target that means the same for every engine, ``fraction``
    x the best validation Recall@20 of the best run of ``engines`` (default: the full graph) among
    ``results`` with the same
    ``fields`` (:data:`REFERENCE_FIELDS`; the headline comparison, where each engine keeps its own
    best batch size, leaves ``batch_size`` out: :data:`DEPTH_FIELDS`), and whether and when the
    run's evaluations reached it (:func:`gnnrec_lab.training.loop.target_outcome` over its history: training
    seconds, evaluation excluded, on both engines). ``{}`` where no such full-graph run is among them.
    Only float32 runs set the target: a reduced-precision run (``--precision bf16``) is timed to the
    float32 runs' target, so adding one never moves the bar the others are timed to."""
    results = [(rid, StoredResult.from_dict(res)) for rid, res in results]

    def key(res):
        return tuple(res.config.get(f) for f in fields)
    best: dict = {}
    for rid, res in results:
        v = res.best_valid.get("recall@20")
        if (engine_of(res) in engines and (res.config.get("precision") or "fp32") == "fp32" and v is not None
                and np.isfinite(v) and v > best.get(key(res), (None, -1))[1]):
            best[key(res)] = (rid, float(v))
    out = []
    for _, res in results:
        if key(res) not in best:
            out.append({})
            continue
        rid, ref = best[key(res)]
        out.append(target_outcome(res.history, fraction * ref, "recall@20", of_run=rid,
                                  fraction=fraction, reference=ref))
    return out


def comparison_frame(store=None, run_ids=None, results=(), target_fraction: float = TARGET_FRACTION):
    """Finished runs, full-graph and DistDGL side by side (one row per run, all measured):
    ``engine`` (``full``, ``sampled`` or ``distdgl``), mean epoch seconds, time to the run's own
    Recall@20 target, best validation and test Recall@20, the neighbourhood-explosion factor (input
    nodes per batch / graph nodes; 1 for full-graph training, which propagates every node every
    step) and DistDGL's median batch time; and the common target (:func:`common_targets`):
    ``target_fraction`` of the best full-graph run's validation Recall@20 at the same depth and
    batch size (``reference_run``), reached or not, and the training seconds to it. Rows come from
    ``store`` (``run_ids`` or every finished run) and from ``results`` (result dicts not in a store)."""
    pairs = [(None, r) for r in results]
    if store is not None:
        for rid in (store.run_ids(RunStatus.FINISHED) if run_ids is None else list(run_ids)):
            res = store.get_run(rid).get("result")
            if res:
                pairs.append((rid, res))
    rows = []
    for (rid, res), t in zip(pairs, common_targets(pairs, target_fraction)):
        row = comparison_row(res, rid)
        if t:
            row.update(reference_run=t["of_run"], common_target=t["value"], common_target_reached=t["reached"],
                       time_to_common_target_s=t["time_s"])
        rows.append(row)
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def _plural(n, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def machine_of(engine: str, cfg: dict, info: dict, result: dict) -> tuple:
    """``(machines, cores per machine, link Gbit/s)`` a stored run ran on: a full-graph run is one
    machine of its ``--cores`` (else the cores its process could run on); a DistDGL run is one
    machine per partition, each of its emulated machine's cores (None on a local cluster, where the
    machines share the host's cores), its link rate (0: unshaped; None: not emulated)."""
    if engine != "distdgl":
        host = section(info, "host")
        aff = host.get("affinity")
        cores = cfg.get("cores") or (len(aff) if aff else host.get("cpus"))
        return 1, cores, None
    dist = section(info, "distributed") or section(StoredResult.from_dict(result).info, "distributed")
    cluster = section(dist, "cluster")
    ms = cluster.get("machines") or []
    cores = len(ms[0]["cores"]) if cluster.get("kind") == "emulated" and ms and ms[0].get("cores") else None
    return dist.get("partitions") or len(ms) or None, cores, cluster.get("link_gbit")


def engine_series(engine: str, machines, cores, link_gbit=None, mode: Optional[str] = None,
                  precision: Optional[str] = None) -> str:
    """How a bar series of the comparison is named on every view: the engine, the machines it ran on
    and, for a modeled one, the memory mode (e.g. ``full graph, 1 machine x 1 core (measured)``,
    ``full graph on Optane App Direct (modeled)``, ``DistDGL, 2 machines x 1 core, 10 Gbit/s (measured)``);
    a full graph of ``precision`` other than fp32 says it (``full graph bf16 on Optane App Direct (modeled)``)."""
    full = "full graph" + (f" {precision}" if precision and precision != "fp32" else "")
    if mode is not None:
        return f"{full} on {MEMORY_MODE_TABLE[mode].words if mode in MEMORY_MODE_TABLE else mode} (modeled)"
    where = _plural(machines or 1, "machine") + (f" x {_plural(cores, 'core')}" if cores else "")
    if engine != "distdgl":
        return f"{full}, {where} (measured)"
    link = "" if link_gbit is None else (", unshaped links" if not link_gbit else f", {link_gbit:g} Gbit/s")
    return f"DistDGL, {where}{link} (measured)"


_MODELED_CACHE: dict = {}
_MODELED_LOCK = threading.Lock()


def full_graph_modeled(store, run_id: int, host: dict, modes=OPTANE_MODES) -> dict:
    """A stored full-graph run's training-step time modeled on each of ``modes``' devices
    (:func:`gnnrec_lab.services.projection.stored_run_step_time`: its kernel records, the run's placement, else
    every tensor class on the device; Memory Mode's DRAM cache over its predicted footprint) with the
    run's own threads (:func:`~gnnrec_lab.memory.tiermodel.run_threads`, as every other view):
    ``{mode: {"device", "ratio", "placement_assumption", "band" (+- fraction of every modeled duration:
    the step's, :func:`~gnnrec_lab.memory.tiermodel.model_band`), "confidence", "kind": MODELED}}``, or
    ``{mode: {"reason": ...}}`` where it cannot be projected. The ratio scales its measured durations
    (:func:`~gnnrec_lab.memory.tiermodel.modeled_seconds`). Only finished runs are passed here
    (:func:`full_vs_distributed`): each projection is kept for the process's life."""
    out = {}
    for mode in modes:
        # a finished run's records never change: its projection is computed once per calibration
        key = (str(getattr(store, "home", id(store))), int(run_id), mode, host.get("measured_at"),
               host.get("triad_GBps"))
        with _MODELED_LOCK:
            if key in _MODELED_CACHE:
                out[mode] = _MODELED_CACHE[key]
                continue
        try:
            st = stored_run_step_time(store, run_id, host, device=MODE_DEVICES[mode])
        except Exception as e:   # noqa: BLE001 - a view shows why instead of the bar
            out[mode] = {"reason": f"{type(e).__name__}: {e}"}
            continue
        ratio = st.get("ratio")
        steps = store.steps_frame(run_id)
        step_s = float(steps["seconds"].sum()) / len(steps) if len(steps) else None
        # the durations are scaled as the step is: theirs is the step's band (tiermodel.model_band)
        band = model_band(st, step_s=step_s, kernel_s=st.get("measured_s"))
        out[mode] = {"device": st["device"], "ratio": None if ratio != ratio else ratio,
                     "placement_assumption": st.get("placement_assumption"), "kind": Provenance.MODELED,
                     "band": band.step, "confidence": band.confidence}
        with _MODELED_LOCK:
            _MODELED_CACHE[key] = out[mode]
    return out


def full_vs_distributed(store, run_ids=None, host: Optional[dict] = None, modes=OPTANE_MODES,
                        datasets=None, target_fraction: Optional[float] = TARGET_FRACTION,
                        target_engines=TARGET_ENGINES) -> pd.DataFrame:
    """**The** full graph vs DistDGL comparison every view shows (the Compare page's section,
    notebook 06, ``benchmarks/bench_headline.py``): finished runs of ``store`` (``run_ids``, else
    every one), one row per bar, :data:`FULL_VS_DIST_COLUMNS`.

    Each full-graph run (mode full, every tensor class in DRAM) gives a *measured* row (its time to
    the Recall@20 target, mean epoch and training seconds as recorded) and, with ``host`` (this
    host's calibration), one *modeled* row per Optane memory mode in ``modes``: the same durations
    times the run's modeled/measured step-time ratio on that device (:func:`full_graph_modeled`,
    :func:`~gnnrec_lab.memory.tiermodel.modeled_seconds`), ``kind`` MODELED, ``memory_mode`` the mode
    (None on a measured row: views colour and label a modeled row by it). Each DistDGL run gives a
    measured row. ``series`` names engine and machines (:func:`engine_series`); ``machines`` and
    ``cores_per_machine`` say what "one machine" was. ``datasets``: keep only these (default: the
    datasets that have a DistDGL run, or every dataset where none has). The frame's
    ``attrs["reasons"]`` lists projections that failed (run, mode, why).

    Time to target means the same on every row: ``target`` is ``target_fraction`` of the best
    validation Recall@20 of the runs among them at the same depth (dataset, model, layers, seed, eval
    users: :data:`DEPTH_FIELDS`), whichever engine reached it (``target_engines``, default both:
    :data:`TARGET_ENGINES`; ``reference_run``), and
    ``time_to_target_s`` the training seconds each run took to reach it (evaluation excluded, the
    same seeded users; None with ``target_reached`` False when it did not). Without such a run
    at that depth, or with ``target_fraction=None``, it is the run's own ``--target-recall``'s."""
    ids = store.run_ids(RunStatus.FINISHED) if run_ids is None else list(run_ids)
    runs, rows, reasons = [], [], []
    for rid in ids:
        run = store.run_record(rid)
        res = run.result
        if not res.raw:
            continue
        row = comparison_row(res, rid)
        cfg = run.config or res.config
        if row["engine"] == "full" and any(w != "dram" for w in cfg.placement.values()):
            continue   # part of it ran on a file or another node: not one DRAM machine
        if row["engine"] not in ("full", "distdgl"):
            continue
        runs.append((rid, run, res, row, cfg))
    targets = (common_targets([(rid, res) for rid, _, res, _, _ in runs], target_fraction, fields=DEPTH_FIELDS,
                              engines=target_engines)
               if target_fraction is not None else [{}] * len(runs))
    for (_, _, res, row, _), t in zip(runs, targets):
        if t:
            row.update(target=t["value"], target_reached=t["reached"], reference_run=t["of_run"],
                       time_to_target_s=t["time_s"])
        else:
            row.update(target=res.target.get("value"), target_reached=res.target.get("reached"), reference_run=None)
    dist_sets = {row["dataset"] for _, _, _, row, _ in runs if row["engine"] == "distdgl"}
    keep = set(datasets) if datasets is not None else (dist_sets or None)
    for rid, run, res, row, cfg in runs:
        if keep is not None and row["dataset"] not in keep:
            continue
        machines, cores, link = machine_of(row["engine"], cfg, run.info, res)
        base = {k: row.get(k) for k in FULL_VS_DIST_COLUMNS if k in row}
        base.update(machines=machines, cores_per_machine=cores, link_gbit=link, train_s=res.train_seconds,
                    kind=Provenance.MEASURED, memory_mode=None, device="this host (DRAM)", ratio=None,
                    placement_assumption=None,
                    series=engine_series(row["engine"], machines, cores, link, precision=row["precision"]))
        rows.append(base)
        if row["engine"] != "full" or host is None:
            continue
        for mode, m in full_graph_modeled(store, rid, host, modes).items():
            if "reason" in m:
                reasons.append((rid, mode, m["reason"]))
                continue
            q = m["ratio"]
            rows.append(dict(base, kind=Provenance.MODELED, memory_mode=mode, device=m["device"], ratio=q,
                             placement_assumption=m["placement_assumption"], band=m["band"],
                             confidence=m["confidence"],
                             series=engine_series("full", machines, cores, mode=mode, precision=row["precision"]),
                             **{k: modeled_seconds(base[k], q) for k in ("time_to_target_s", "epoch_s", "train_s")}))
    out = pd.DataFrame(rows, columns=FULL_VS_DIST_COLUMNS)
    out.attrs["reasons"] = reasons
    return out


#: the columns a cell shows as medians over its seeds; ``target`` too: each seed has its own (a share of
#: that seed's best at the depth), so the cell's run's target differed between cells of one depth
SEED_COLUMNS = ("time_to_target_s", "epoch_s", "train_s", "best_valid_recall@20", "test_recall@20", "target")


def _median_seed(g: pd.DataFrame, by: str) -> dict:
    """One cell's row over its seeds: the run of the median ``by`` (a seed that never reached the
    target counts as the slowest; the lower middle of an even count), each of :data:`SEED_COLUMNS`
    as its median over the seeds that have it, with ``_min`` / ``_max``; ``seeds`` (how many) and
    ``reached`` (how many reached the target); ``runs``, every run id of the cell."""
    order = g.assign(_k=g[by].fillna(np.inf)).sort_values(["_k", "id"])
    row = order.iloc[(len(order) - 1) // 2].drop(labels="_k").to_dict()
    for c in SEED_COLUMNS:
        if c not in g:
            continue
        v = pd.to_numeric(g[c], errors="coerce").dropna()
        row[f"{c}_min"], row[f"{c}_max"] = (float(v.min()), float(v.max())) if len(v) else (None, None)
        if c != by:
            row[c] = float(v.median()) if len(v) else float("nan")
    med = float(np.median(order["_k"].to_numpy(dtype=float)))   # inf: most seeds did not reach it
    row[by] = float("nan") if not np.isfinite(med) else float(med)   # NaN: not reached (as a run's row)
    row["seeds"] = int(len(g))
    row["reached"] = int(g[by].notna().sum())
    row["runs"] = ",".join(str(int(i)) for i in sorted(g["id"]))
    return row


def seed_cells(frame: pd.DataFrame, by: str = "time_to_target_s") -> pd.DataFrame:
    """One row per cell (dataset, model, series, layers, batch size) over its seeds
    (:func:`_median_seed`: medians with their range). A cell of one seed is that run's row."""
    if frame.empty:
        return frame.copy()
    keys = ["dataset", "model", "series", "layers", "batch_size"]
    rows = [_median_seed(g, by) for _, g in frame.groupby(keys, sort=False, dropna=False)]
    return pd.DataFrame(rows)


def best_by_depth(frame: pd.DataFrame, by: str = "time_to_target_s") -> pd.DataFrame:
    """Each series' best cell at each depth (and dataset, model): over the seeds of each batch size
    (:func:`seed_cells`: median with its range), the batch size with the least median ``by`` (cells
    that never reached the target come last, then the least epoch time): each engine with the batch
    size it does best with. One row per (dataset, model, series, layers), by depth."""
    if frame.empty:
        return frame.copy()
    cells = seed_cells(frame, by)
    keys = ["dataset", "model", "series", "layers"]
    f = cells.assign(_miss=cells[by].isna()).sort_values(["_miss", by, "epoch_s", "id"], na_position="last")
    return f.drop_duplicates(keys).drop(columns="_miss").sort_values(keys[:2] + ["layers", "series"],
                                                                     ignore_index=True)


# --- the headline experiment's runs: named and reused the same way by benchmarks/bench_headline.py and
# notebook 06, so the notebook at its full settings reads the runs the benchmark stored ---------------

#: the lab's large-batch rule (docs/measurements.md, "Large batches"): Adam, lr x sqrt(batch / 2048),
#: warm-up of half a pass; the full-graph side of the headline trains with it
LARGE_BATCH_RULE = {"lr_rule": "sqrt", "ref_batch_size": 2048, "warmup_epochs": 0.5}


def headline_name(engine: str, model: str, layers: int, batch_size: int, link_gbit: Optional[float] = None,
                  variant: str = "") -> str:
    """A headline run's name (``headline full L2 b65536``, ``headline distdgl ngcf L3 b16384 10G``): the
    model appears for every model but LightGCN, the link rate for DistDGL only; ``variant`` (e.g.
    ``matched``: the cell where both sides train alike) last."""
    tag = "" if model == "lightgcn" else f" {model}"
    end = f" {variant}" if variant else ""
    if engine == "distdgl":
        return f"headline distdgl{tag} L{layers} b{batch_size} {float(link_gbit or 0):g}G{end}"
    return f"headline full{tag} L{layers} b{batch_size}{end}"


def headline_settings(engine: str, *, dataset: str, model: str, layers: int, dim: int, batch_size: int,
                      epochs: int, lr: float, target_recall: float, eval_users: int,
                      max_steps_per_epoch: Optional[int] = None, cores: Optional[int] = None,
                      fanout: Optional[int] = None, dist_rule: Optional[dict] = None,
                      full_rule: Optional[dict] = None, precision: str = "fp32") -> dict:
    """The config values a stored headline run must share with the one asked for to be reused: the
    training settings, plus the large-batch rule and ``cores`` (full graph) or sampled mode, fan-outs
    and ``dist_rule`` (DistDGL: its learning-rate fields; None takes a run of either rule); ``full_rule``:
    the full graph's learning-rate fields when not the large-batch rule; ``precision``: the full graph's rows."""
    want = {"dataset": dataset, "model": model, "layers": layers, "dim": dim, "batch_size": batch_size,
            "epochs": epochs, "lr": lr, "target_recall": target_recall, "eval_users": eval_users,
            "max_steps_per_epoch": max_steps_per_epoch}
    if engine == "distdgl":
        return dict(want, mode="sampled", fanouts=[fanout] * layers, **(dist_rule or {}))
    return dict(want, cores=cores, precision=precision, **(LARGE_BATCH_RULE if full_rule is None else full_rule))


# what a config stored before its field existed ran with
_STORED_DEFAULTS = {"precision": "fp32"}


def finished_run(store, name: str, want: dict, engine: str, machines: tuple) -> Optional[dict]:
    """The newest finished run of ``store`` named ``name`` whose config has every value of ``want``
    and that ran on ``machines`` (``(machines, cores per machine, link Gbit/s)``, as
    :func:`machine_of` reads it), as the CLI's ``--json`` gives it (its result, ``run_id`` and
    ``reused=True``), or None."""
    for rid in sorted(store.run_ids(RunStatus.FINISHED, name=name), reverse=True):
        run = store.run_record(rid)
        res = run.result
        cfg = run.config or res.config
        if not res.raw or not all(_same(cfg.get(k, _STORED_DEFAULTS.get(k)), v) for k, v in want.items()):
            continue
        if all(_same(got, asked) for got, asked in zip(machine_of(engine, cfg, run.info, res), machines)):
            return dict(res.raw, run_id=rid, reused=True)
    return None


def _same(stored, given) -> bool:
    if isinstance(given, float) or isinstance(stored, float):
        return stored is not None and given is not None and math.isclose(float(stored), float(given), rel_tol=1e-9)
    if isinstance(given, (list, tuple)):
        return list(stored or []) == list(given)
    return stored == given


# --- time to accuracy (the Compare page's chart): validation Recall@20 against training time --------
TIME_TO_ACCURACY_COLUMNS = ["run_id", "series", "kind", "memory_mode", "device", "ratio", "band", "epoch", "step",
                            "train_s", "recall@20"]


def time_to_accuracy(store, run_ids, host: Optional[dict] = None, modes=None, metric: str = "recall@20",
                     own_ratios: Optional[dict] = None) -> pd.DataFrame:
    """Validation ``metric`` (Recall@20) against training time for runs ``run_ids``: **the** data of
    the Compare page's time-to-accuracy chart, one row per evaluation per series,
    :data:`TIME_TO_ACCURACY_COLUMNS`.

    * one *measured* series per run: its own validation evaluations (the store's ``evals`` rows,
      split ``valid``) at the training seconds elapsed when each was taken (``elapsed_s``: the
      training steps' time, evaluation excluded), as measured on this host (``memory_mode`` the
      run's, ``device`` "this host (DRAM)": a modeled memory mode's kernels run on DRAM here too);
    * with ``host`` (this host's calibration), for an ended DRAM run one *modeled* series per memory
      mode of ``modes`` (default: every modeled mode): the same evaluations at the training time
      scaled by the run's modeled/measured step ratio on that mode's device, from the projection of
      the run's memory modes every view shows
      (:func:`~gnnrec_lab.services.projection.dram_run_modes`), with its step ``band`` (+- fraction);
      for a run in a modeled memory mode, its own mode's series at the ratio the run table carries
      (``own_ratios``: ``{run id: modeled_ratio}``, every view's). The accuracy is the run's own: the
      model learns the same on any memory, only the time moves.

    ``attrs["reasons"]`` lists what could not be modeled (run, mode, why)."""
    wanted = None if modes is None else set(modes)
    own_ratios = own_ratios or {}
    ids = [int(r) for r in run_ids]
    ev = store.evals_frame(ids) if ids else pd.DataFrame(columns=["run_id", "split", "metric"])
    if len(ev):
        ev = ev[(ev["split"] == "valid") & (ev["metric"].str.lower() == metric.lower())]
    rows, reasons = [], []

    def series(rid, points, mode, device, ratio, band):
        name = f"{mode_look(mode).short} · #{rid} (modeled)"    # colour = memory mode, as on every chart
        return [dict(run_id=rid, series=name, kind=Provenance.MODELED, memory_mode=mode,
                     device=device, ratio=float(ratio), band=band, epoch=ep, step=st,
                     train_s=modeled_seconds(t, ratio), **{"recall@20": v}) for ep, st, t, v in points]

    for rid in ids:
        e = ev[ev["run_id"] == rid].sort_values(["elapsed_s", "step"], kind="stable") if len(ev) else ev
        if e.empty:
            continue
        rec = store.run_record(rid)
        own = rec.config.get("memory_mode")
        points = [(int(p.epoch), int(p.step), float(p.elapsed_s), float(p.value)) for p in e.itertuples()]
        name = f"{DEFAULT_MEMORY_MODE.short} · #{rid} (measured)"          # measured on this host's DRAM
        rows += [dict(run_id=rid, series=name, kind=Provenance.MEASURED, memory_mode=own,
                      device="this host (DRAM)", ratio=None, band=None, epoch=ep, step=st, train_s=t,
                      **{"recall@20": v}) for ep, st, t, v in points]
        if host is None:
            continue
        if rec.status is None or not rec.status.is_terminal:   # its records are not all in yet
            reasons.append((rid, "every modeled mode", f"run {rid} is {rec.status}: modeled once it has ended"))
            continue
        if not memory_mode_of(rec.config).measured:   # a modeled memory mode: its own, at the table's ratio
            ratio = own_ratios.get(rid)
            if ratio is None or ratio != ratio:
                reasons.append((rid, own, "no modeled step ratio stored yet"))
            elif wanted is None or own in wanted:
                rows += series(rid, points, own, MODE_DEVICES.get(own), ratio, None)
            continue
        try:
            frame = dram_run_modes(store, rid, host)
        except Exception as e:   # noqa: BLE001 - the chart shows why instead of the series
            reasons.append((rid, "every modeled mode", f"{type(e).__name__}: {e}"))
            continue
        for m in frame.to_dict("records"):
            if m["kind"] != Provenance.MODELED or (wanted is not None and m["memory_mode"] not in wanted):
                continue
            if m["ratio"] != m["ratio"]:
                reasons.append((rid, m["memory_mode"], m.get("reason") or "no modeled step ratio"))
                continue
            band = m["band_step"] if m["band_step"] == m["band_step"] else None
            rows += series(rid, points, m["memory_mode"], m["device"], m["ratio"], band)
    out = pd.DataFrame(rows, columns=TIME_TO_ACCURACY_COLUMNS)
    out.attrs["reasons"] = reasons
    return out
