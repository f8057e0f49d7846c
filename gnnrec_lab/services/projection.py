"""A stored run's projection: its kernel records read back from the run store and put through the tier
model, the stored DRAM run a configuration's modeled step starts from, and this host's calibration.

The tier model (:mod:`gnnrec_lab.memory.tiermodel`) and the advice (:mod:`gnnrec_lab.memory.advise`)
compute from records and never read the store; this module is where a stored run meets them, so the
CLI (``whatif``, ``advise``) and every dashboard page project a stored run the same way. Measured
seconds are the run's own; every projected figure is *modeled*.

The run table every view shows is :func:`modeled_runs_frame`: the store's plain
:meth:`~gnnrec_lab.runs.store.Store.runs_frame` with the tier model's columns added here
(:func:`with_modeled`), so the store itself never runs the tier model.

The ``(value, reason)`` functions (:func:`host_calibration`, :func:`run_modeled_step`,
:func:`tier_projection`) never raise: a page shows the reason instead of the chart.
"""
from __future__ import annotations

import statistics
from typing import Optional

import pandas as pd

from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE, memory_mode_of
from gnnrec_lab.memory.calibrate import host_profile
from gnnrec_lab.memory.profiles import load_profiles
from gnnrec_lab.memory.tiermodel import (
    TRAIN_PHASES,
    StepTimes,
    mode_device,
    modeled_seconds,
    placement_assumption,
    run_step_time,
    step_base,
    step_times,
    training_kernel_ns,
)
from gnnrec_lab.models.registry import shape_keys
from gnnrec_lab.runs.record import StoredConfig
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.recorder import KernelRecord
from gnnrec_lab.util.status import RunStatus


def _or_reason(fn, *a, **kw) -> tuple:
    """``(fn(*a, **kw), None)``, or ``(None, reason)`` when it raises."""
    try:
        return fn(*a, **kw), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


# The plain run table's columns with_modeled reads and replaces by the modeled ones.
PROJECTION_INPUTS = ("device_profile", "modeled_s_per_step", "measured_s_per_step", "modeled_regimes",
                     "modeled_calibration_flags", "modeled_base")


def _json(v):
    """A JSON text of the run table (json_extract's object or list), parsed; None where absent or damaged."""
    if not isinstance(v, str):
        return None
    try:
        import json
        return json.loads(v)
    except ValueError:
        return None


def _text(v) -> Optional[str]:
    """A config value of the run table as a string, None where it is missing (None or pandas' NaN)."""
    return v if isinstance(v, str) else None


def kernel_time_by_run(store) -> pd.DataFrame:
    """Per run: ``kernel_ns`` (its training-phase kernels' recorded ns, :data:`TRAIN_PHASES`) and
    ``kernel_steps`` (the steps that recorded kernels, as :meth:`Store.kernel_step_count` counts
    them), indexed by run id: what :func:`~gnnrec_lab.memory.tiermodel.step_times` divides, for every
    run of the table in one query (the store has no public reader of it; read only)."""
    phases = ", ".join("?" * len(TRAIN_PHASES))
    df = store._frame(f"SELECT run_id AS id, SUM(CASE WHEN phase IN ({phases}) THEN ns ELSE 0 END) AS kernel_ns, "
                      f"COUNT(DISTINCT step) AS kernel_steps FROM kernel_steps GROUP BY run_id", TRAIN_PHASES)
    return df.set_index("id")


def with_modeled(runs: pd.DataFrame, kernels: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """The store's run table (:meth:`~gnnrec_lab.runs.store.Store.runs_frame`) with the tier model's
    columns, as every view shows it: ``device`` (after ``backend``: the device profile a modeled memory
    mode is modeled on, :func:`~gnnrec_lab.memory.tiermodel.mode_device`; None for ``dram``), and per
    run its :func:`~gnnrec_lab.memory.tiermodel.step_times`: ``kernel_s`` (measured kernel time per
    step, from ``kernels``, :func:`kernel_time_by_run`; NaN without it) and ``modeled_kernel_s``
    before ``step_s`` (the measured wall step), then ``modeled_ratio`` (the run's stored projection's
    modeled / measured kernel time), ``modeled_step_s`` and ``modeled_train_s`` (the run's median step,
    its outlier steps left out (:func:`~gnnrec_lab.memory.tiermodel.step_base`), modeled on the device,
    and that step times the run's steps; *modeled*; NaN for a DRAM run or one without its projection
    yet), ``outlier_steps`` (the steps left out of that base; NaN without one) and the band's parts
    (``modeled_step_band``, ``modeled_kernel_band``: combined; ``model_step_band``: the device
    model's; ``spread_step_band``: the run's measured spread). The inputs
    (:data:`PROJECTION_INPUTS`) leave the frame; ``runs`` is not changed."""
    df = runs.copy()
    device = [mode_device(_text(m), _text(p)) for m, p in zip(df["memory_mode"], df["device_profile"])]
    df.insert(df.columns.get_loc("backend") + 1, "device", device)
    kernels = kernels if kernels is not None else pd.DataFrame(columns=["kernel_ns", "kernel_steps"])
    times = []
    regimes = df["modeled_regimes"] if "modeled_regimes" in df else [None] * len(df)
    flags = df["modeled_calibration_flags"] if "modeled_calibration_flags" in df else [None] * len(df)
    bases = df["modeled_base"] if "modeled_base" in df else [None] * len(df)
    for rid, train, n, dev, a, b, reg, fl, base in zip(df["id"], df["train_s"], df["n_steps"], device,
                                                       df["modeled_s_per_step"], df["measured_s_per_step"], regimes,
                                                       flags, bases):
        k = kernels.loc[rid] if rid in kernels.index else None
        times.append(step_times(train, n, None if k is None else k["kernel_ns"],
                                None if k is None else k["kernel_steps"],
                                modeled={"modeled_s_per_step": a, "measured_s_per_step": b, "device": dev,
                                         "regimes": _json(reg), "calibration_flags": _json(fl),
                                         "base": _json(base)}, device=dev))
    col = lambda f: pd.Series([f(t) for t in times], index=df.index, dtype=float)  # noqa: E731
    at = df.columns.get_loc("step_s")
    df.insert(at, "modeled_kernel_s", col(lambda t: t.modeled_kernel_s))
    df.insert(at, "kernel_s", col(lambda t: t.kernel_s))
    df["step_s"] = col(lambda t: t.step_s)
    df["modeled_ratio"] = col(lambda t: t.ratio)
    df["modeled_step_s"] = col(lambda t: t.modeled_step_s)
    # the training time as its steps would take at the modeled step (the median's): a stalled step is
    # not modeled as slow-tier time
    df["modeled_train_s"] = pd.Series([t.modeled_step_s * t.steps if t.modeled_step_s is not None and t.steps
                                       else modeled_seconds(tr, t.ratio) for t, tr in zip(times, df["train_s"])],
                                      index=df.index, dtype=float)
    df["outlier_steps"] = col(lambda t: t.outlier_steps)
    # how far to trust them (tiermodel.model_band): +- fraction of the modeled step / training time and
    # of the modeled kernel time, and the confidence (None for a DRAM run)
    df["modeled_step_band"] = col(lambda t: t.band["step"] if t.band else None)
    df["modeled_kernel_band"] = col(lambda t: t.band["kernel"] if t.band else None)
    df["model_step_band"] = col(lambda t: t.band.get("model_step") if t.band else None)      # device model
    df["spread_step_band"] = col(lambda t: t.band.get("spread_step") if t.band else None)    # measured
    df["confidence"] = pd.Series([t.confidence for t in times], index=df.index, dtype=object)
    return df.drop(columns=[c for c in PROJECTION_INPUTS if c in df])


def modeled_runs_frame(store, status: Optional[RunStatus] = None) -> pd.DataFrame:
    """The run table of every view (``gnnrec-lab runs``, the dashboard's pages): the store's
    :meth:`~gnnrec_lab.runs.store.Store.runs_frame` (of ``status``) :func:`with_modeled`, with each
    run's kernel time (:func:`kernel_time_by_run`)."""
    with store.snapshot():
        runs = store.runs_frame() if status is None else store.runs_frame(status=status)
        kernels = kernel_time_by_run(store)
    return with_modeled(runs, kernels)


def run_step_times(store, run_id, host: Optional[dict] = None) -> StepTimes:
    """:func:`~gnnrec_lab.memory.tiermodel.step_times` of one stored run, as the run table has it
    (:func:`modeled_runs_frame`): its steps' seconds, its training kernels, and for a modeled memory
    mode its stored projection (``result.modeled``); a run without one yet (running) is projected
    from its kernels so far (:func:`run_step_time`) when ``host`` (the calibration) is given."""
    with store.snapshot():
        rec = store.run_record(run_id)
        steps = store.steps_frame(run_id)
        totals = store.kernel_totals_frame(run_id)
        ksteps = store.kernel_step_count(run_id)
        fpf = store.footprint_frame(run_id) if host is not None else None
        cfg = rec.config
        dev = mode_device(memory_mode_of(cfg).name, cfg.get("device_profile"))
        modeled = rec.result.modeled or None
        per_step = (store.kernels_frame(run_id) if dev is not None and not modeled and host is not None
                    and totals is not None and len(totals) else None)
    if per_step is not None and len(per_step):
        try:
            modeled = run_step_time(per_step, host, cfg, footprint=predicted_footprint(fpf), steps=ksteps,
                                    step_seconds=steps)
        except (UserError, ValueError, KeyError):   # no projection: the measured parts still show
            modeled = None
    return step_times(float(steps["seconds"].sum()) if len(steps) else None, len(steps),
                      training_kernel_ns(totals), ksteps, modeled=modeled, device=dev)


def predicted_footprint(fpf) -> Optional[dict]:
    """``{tensor class: bytes}`` of a stored run's modeled (predicted) footprint rows, or None."""
    if fpf is None or not len(fpf):
        return None
    pred = fpf[fpf["kind"] == Provenance.MODELED]
    return {r.tensor_class: int(r.bytes) for r in pred.itertuples()} or None


def stored_run_records(store, run_id) -> tuple:
    """``(kernel records per step, steps, predicted footprint by class or None, config)`` of a stored
    run (the config a :class:`~gnnrec_lab.runs.record.StoredConfig`, ``{}`` when damaged): the
    inputs :func:`run_step_time` takes, read the same way by every view, from one committed state of
    the store (a running run's records and its step count agree). The records are the store's
    per-step rows (:meth:`~gnnrec_lab.runs.store.Store.kernels_frame`), their ``attrs["step_seconds"]``
    the steps' wall seconds (``{step: s}``): the projection starts from the run's median step,
    stalled steps left out (:func:`~gnnrec_lab.memory.tiermodel.step_base`)."""
    with store.snapshot():
        run = store.run_record(run_id)
        records = store.kernels_frame(run_id)
        steps = store.kernel_step_count(run_id)
        fpf = store.footprint_frame(run_id)
        wall = store.steps_frame(run_id)
    # a plain {step: seconds} (a frame in attrs would break pandas' concat of the records)
    records.attrs["step_seconds"] = {int(k): float(v) for k, v in zip(wall["step"], wall["seconds"])}
    return records, steps, predicted_footprint(fpf), run.config


def stored_run_step_time(store, run_id, host, *, device: Optional[str] = None,
                         placement: Optional[dict] = None, **kw) -> dict:
    """:func:`run_step_time` of a run in the store (its kernels so far, its config, its footprint)."""
    totals, steps, fp, cfg = stored_run_records(store, run_id)
    if totals is None or len(totals) == 0:
        raise UserError(f"run {run_id} has no kernel records")
    return run_step_time(totals, host, cfg, device=device, placement=placement, footprint=fp, steps=steps, **kw)


def step_time_projection(store, run_id, host, placement: Optional[dict] = None) -> pd.DataFrame:
    """Step time (s) of a stored run measured here and projected onto each slower device profile.

    A frame ``device, seconds, kind, chosen, band, confidence``: one MEASURED row (the run's own training-step
    kernel time on this host's DRAM) and one MODELED row per non-DRAM device profile
    (:func:`run_step_time`, the run's placement, with its band: ``band`` +- fraction and
    ``confidence``, :func:`~gnnrec_lab.memory.tiermodel.model_band`), ``chosen`` marking the device of the run's own
    memory mode. ``placement`` replaces the run's own (the Launch page projects the form's).
    The frame's ``attrs["placement_assumption"]`` names the placement in words.
    Raises UserError when the run has no kernel records or no profile projects.
    """
    records, steps, footprint, cfg = stored_run_records(store, run_id)
    if records is None or records.empty:
        raise UserError(f"run {run_id} has no kernel records")
    own = mode_device(memory_mode_of(cfg).name, cfg.get("device_profile"))
    profiles = load_profiles()
    if not profiles:
        raise UserError("no device profiles")
    rows, measured, reasons = [], None, []
    for name, prof in profiles.items():
        if getattr(prof, "kind", None) in ("dram", "host"):
            continue
        try:
            res = run_step_time(records, host, cfg, device=name, placement=placement, footprint=footprint,
                                steps=steps)
        except (UserError, ValueError, KeyError) as e:  # one profile that cannot project: say which
            reasons.append(f"{name}: {type(e).__name__}: {e}")
            continue
        measured = res["measured_s"]
        rows.append(dict(device=name, seconds=float(res["modeled_s"]), kind=Provenance.MODELED, chosen=name == own,
                         band=res["band"]["kernel"], confidence=res["band"]["confidence"]))
    if measured is None:
        raise UserError("; ".join(reasons) or "no projection")
    rows.insert(0, dict(device="this host (DRAM)", seconds=float(measured), kind=Provenance.MEASURED,
                        chosen=own is None, band=None, confidence=None))
    out = pd.DataFrame(rows)
    out.attrs["placement_assumption"] = placement_assumption(placement if placement is not None
                                                             else StoredConfig.of(cfg).placement)
    return out


# What makes two runs' training steps the same work: a stored DRAM run with these equal measures
# the step another configuration of that shape would take.
SHAPE_KEYS = ("dataset", "model", "layers", "dim", "batch_size", "mode", "backend", "precision")
# How many of the newest same-shape DRAM runs are compared.
REFERENCE_CANDIDATES = 20


def _same_shape(row: dict, config) -> bool:
    keys = SHAPE_KEYS + shape_keys(getattr(config, "model", None))
    want = {k: getattr(config, k, None) for k in keys}
    want["precision"] = want["precision"] or "fp32"   # a config from before the field: fp32
    return all(row.get(k) == want[k] for k in keys)


def dram_reference(store, config, host) -> Optional[dict]:
    """The stored DRAM measurement modeled step times for ``config`` start from, or None.

    Candidates: the newest :data:`REFERENCE_CANDIDATES` finished runs in ``store`` with
    ``config``'s shape (:data:`SHAPE_KEYS`, and the NGCF form), memory mode ``dram`` with every
    tensor class in DRAM, and kernel records. Their measured step times (training kernels per step
    on this host) differ by the load the machine had while they ran; load only ever adds time, so
    the **fastest** is the reference. Returns ``{"run_id", "measured_s", "rule": "fastest",
    "runs": [{"run_id", "measured_s", "load_max", "overloaded"}], "min_s", "median_s", "max_s",
    "kind"}`` (seconds per step; kind MEASURED).
    """
    runs = store.runs_frame(status=RunStatus.FINISHED)
    if runs.empty:
        return None
    rows = [r for r in runs.to_dict("records") if memory_mode_of(r).measured and _same_shape(r, config)]
    out = []
    for r in sorted(rows, key=lambda r: -int(r["id"]))[:REFERENCE_CANDIDATES]:
        placement = store.run_record(int(r["id"])).config.placement
        if any(where != "dram" for where in placement.values()):
            continue   # part of it ran on a file or another node: not a DRAM measurement
        try:
            st = stored_run_step_time(store, int(r["id"]), host, device="host")
        except (ValueError, KeyError):   # UserError (no kernel records) included
            continue
        if st["measured_s"] > 0:
            out.append({"run_id": int(r["id"]), "measured_s": float(st["measured_s"]),
                        "load_max": None if r.get("load_max") != r.get("load_max") else r.get("load_max"),
                        "overloaded": r.get("overloaded") is True})
    if not out:
        return None
    times = [x["measured_s"] for x in out]
    best = min(out, key=lambda x: (x["measured_s"], -x["run_id"]))
    return {"run_id": best["run_id"], "measured_s": best["measured_s"], "rule": "fastest",
            "runs": sorted(out, key=lambda x: x["run_id"]), "min_s": min(times),
            "median_s": statistics.median(times), "max_s": max(times), "kind": Provenance.MEASURED}


def reference_records(store, run_id: int) -> list:
    """A stored run's training kernels as one step of KernelRecords (each kernel's median per step
    over the run's steps, stalled steps left out: :func:`~gnnrec_lab.memory.tiermodel.step_base`,
    measured): the input :func:`~gnnrec_lab.memory.advise.advise` models instead of
    :func:`~gnnrec_lab.memory.advise.step_records`."""
    records, steps, _, cfg = stored_run_records(store, run_id)
    backend = str(cfg.get("backend") or "")
    base = step_base(records, records.attrs.get("step_seconds"), steps=steps)
    recs, n = [], base.per
    for r in base.records.itertuples():
        if r.phase not in TRAIN_PHASES:
            continue
        recs.append(KernelRecord(r.name, r.phase, int(r.layer), 0, int(round(r.ns / n)),
                                 int(round(r.bytes_read / n)), int(round(r.bytes_written / n)),
                                 int(round(r.flops / n)), r.pattern, int(r.row_bytes or 0),
                                 int(round((r.random_bytes or 0) / n)), backend, Provenance.MEASURED))
    return recs


def host_calibration() -> tuple[Optional[dict], Optional[str]]:
    """This host's calibration (measured), never measured on the way (a page must not wait for it):
    ``(host, None)`` or ``(None, reason)``."""
    host, why = _or_reason(host_profile, measure_if_missing=False)
    if host is None:
        return None, f"host calibration: {why}"
    return host, None


def run_modeled_step(store, run_id, device: Optional[str] = None) -> tuple[Optional[dict], Optional[str]]:
    """:func:`stored_run_step_time` of a stored run (the value the run summary, the store and
    ``whatif`` show): ``(dict, None)`` or ``(None, reason)``. ``device`` defaults to the run's mode's."""
    host, why = host_calibration()
    if host is None:
        return None, why
    return _or_reason(stored_run_step_time, store, run_id, host, device=device)


def tier_projection(store, run_id: int,
                    placement: Optional[dict] = None) -> tuple[Optional[pd.DataFrame], Optional[str]]:
    """:func:`step_time_projection` of ``run_id`` (under ``placement``) with this host's calibration:
    ``(frame, None)``, or ``(None, reason)`` the page shows instead of the chart."""
    host, why = host_calibration()
    if host is None:
        return None, why
    return _or_reason(step_time_projection, store, run_id, host, placement=placement)


# The columns of modeled_modes, one row per memory mode.
MODES_COLUMNS = ["memory_mode", "device", "kind", "step_s", "kernel_s", "epoch_s", "train_s", "ratio", "band_step",
                 "band_kernel", "model_step_band", "spread_step_band", "confidence", "placement_assumption",
                 "hit_rate", "reason"]


def dram_run_modes(store, run_id: int, host: dict, modes=None) -> pd.DataFrame:
    """The memory modes of one stored DRAM baseline run: what its training would take in each, from
    the one projection every view uses (:func:`run_step_time` of its per-step records,
    :func:`stored_run_records`), so the Compare page can show them beside the run.

    One row per mode (:data:`MODES_COLUMNS`), in the modes' table order (``modes``: names, default
    every one): ``dram`` *measured* (kind MEASURED; device None), every other mode *modeled* on its
    device (kind MODELED), with the run's placement (its classes placed ``dram`` kept there, the
    others on the device; ``placement_assumption`` says it in words) and, for Memory Mode, its
    predicted footprint. Times, seconds: ``step_s`` (the run's median wall step, outlier steps left
    out: :func:`~gnnrec_lab.memory.tiermodel.step_base`; modeled: times ``ratio``), ``kernel_s`` (the
    same step's training-kernel time), ``epoch_s`` (``step_s`` times the run's steps per epoch) and
    ``train_s`` (times its steps). ``band_step`` / ``band_kernel``: +- fraction of the modeled times,
    the device model's error and the run's measured spread in quadrature (``model_step_band`` and
    ``spread_step_band`` the two parts of ``band_step``; :func:`~gnnrec_lab.memory.tiermodel.model_band`);
    the measured row has no band. ``reason``: why a mode has no numbers (its row kept, NaN times).
    ``attrs``: ``run_id``, ``base`` (the step it starts from: rule, steps, ``outlier_steps``; measured),
    ``steps_per_epoch``, ``steps``.

    Raises UserError when the run is not a DRAM run (a measured memory mode, every tensor class in DRAM
    or on the device, none on a file) or has no kernel records."""
    records, ksteps, footprint, cfg = stored_run_records(store, run_id)
    if not memory_mode_of(cfg).measured:
        raise UserError(f"run {run_id} is in memory mode {memory_mode_of(cfg).name}, not a DRAM baseline")
    if any(str(where).startswith("file:") for where in StoredConfig.of(cfg).placement.values()):
        raise UserError(f"run {run_id} placed tensors on a file: not a DRAM baseline")
    if records is None or records.empty:
        raise UserError(f"run {run_id} has no kernel records")
    with store.snapshot():
        steps = store.steps_frame(run_id)
        epochs = store.epochs_frame(run_id)
    n = len(steps)
    per_epoch = float(epochs["steps"].median()) if len(epochs) and "steps" in epochs else float(n)
    base = step_base(records, records.attrs.get("step_seconds"), steps=ksteps)
    wall = base.step_s

    def times(step_s, kernel_s) -> dict:
        return {"step_s": step_s, "kernel_s": kernel_s,
                "epoch_s": None if step_s is None else step_s * per_epoch,
                "train_s": None if step_s is None else step_s * n}

    rows = []
    for name, mode in MEMORY_MODE_TABLE.items():
        if modes is not None and name not in modes:
            continue
        row = dict.fromkeys(MODES_COLUMNS)
        row.update(memory_mode=name, device=mode.device)
        if mode.measured:
            row.update(kind=Provenance.MEASURED, ratio=1.0, **times(wall, base.kernel_s))
            rows.append(row)
            continue
        row["kind"] = Provenance.MODELED
        try:
            st = run_step_time(records, host, cfg, device=mode.device, footprint=footprint, steps=ksteps)
        except (UserError, ValueError, KeyError) as e:   # one mode that cannot project: say why, keep the rest
            row["reason"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            continue
        t = step_times(None, 0, None, 0, modeled=st, device=mode.device)
        band = t.band or {}
        row.update(ratio=st["ratio"], band_step=band.get("step"), band_kernel=band.get("kernel"),
                   model_step_band=band.get("model_step"), spread_step_band=band.get("spread_step"),
                   confidence=t.confidence, placement_assumption=st["placement_assumption"],
                   hit_rate=st.get("hit_rate"), **times(t.modeled_step_s, t.modeled_kernel_s))
        rows.append(row)
    out = pd.DataFrame(rows, columns=MODES_COLUMNS)
    for c in ("step_s", "kernel_s", "epoch_s", "train_s", "ratio", "band_step", "band_kernel", "model_step_band",
              "spread_step_band", "hit_rate"):
        out[c] = out[c].astype(float)
    out.attrs.update(run_id=int(run_id), base={k: v for k, v in base.to_dict().items()},
                     steps_per_epoch=per_epoch, steps=n)
    return out


def run_modes(store, run_id: int, modes=None) -> tuple[Optional[pd.DataFrame], Optional[str]]:
    """:func:`dram_run_modes` of ``run_id`` with this host's calibration: ``(frame, None)``, or
    ``(None, reason)`` the page shows instead (never raises)."""
    host, why = host_calibration()
    if host is None:
        return None, why
    return _or_reason(dram_run_modes, store, run_id, host, modes=modes)
