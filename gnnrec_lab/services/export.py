"""Stored runs into the trackers users already keep: MLflow and TensorBoard.

The run store stays the lab's own record (per-kernel x phase x layer rows with bytes and
access patterns do not fit a metrics tracker); an export copies what a tracker shows next to a
user's other experiments:

* params: every RunConfig field (tuples comma-separated, the placement as JSON);
* metrics: training loss and seconds per epoch (step = epoch), validation metrics per
  evaluation (step = epoch), test metrics, measured seconds per training step (step = step);
  a modeled memory mode's step time under names that start with ``modeled_``;
* MLflow artifacts: ``config.yaml`` (a run file for ``gnnrec-lab run --config``),
  ``kernels.csv`` (the kernel table: name, phase, layer, calls, seconds, bytes; measured),
  ``footprint.csv`` (bytes per tensor class, predicted = modeled / measured),
  ``trace.json`` (the last step's kernels as a Perfetto trace);
* MLflow tags: the run's host, status, store path and id (an exported run is found again by
  them, so exporting twice does not duplicate it).

Metric names: MLflow allows no ``@``, so ``recall@20`` becomes ``valid_recall_at_20``;
TensorBoard keeps it (``valid/recall@20``).
"""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Iterable, Optional

from gnnrec_lab.config.run import RunConfig, save_config_file
from gnnrec_lab.memory.analysis import export_chrome_trace
from gnnrec_lab.runs.record import RunRecord
from gnnrec_lab.services.projection import run_step_times
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus

EXPERIMENT = "gnnrec-lab"
TAG_RUN = "gnnrec_lab.run_id"
TAG_STORE = "gnnrec_lab.runs.store"
# what the store's statuses are in MLflow's run lifecycle
MLFLOW_STATUS = {RunStatus.FINISHED: "FINISHED", RunStatus.FAILED: "FAILED", RunStatus.OOM: "FAILED",
                 RunStatus.DIVERGED: "FAILED", RunStatus.CANCELLED: "KILLED", RunStatus.INTERRUPTED: "KILLED",
                 RunStatus.RUNNING: "RUNNING", RunStatus.QUEUED: "SCHEDULED"}


# ----------------------------------------------------------------------
# what is exported, tracker-neutral
def params_of(config: dict) -> dict:
    """RunConfig fields as strings (tuples comma-separated, mappings as JSON, None as ``None``)."""
    out = {}
    for k, v in config.items():
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = json.dumps(v, sort_keys=True)
        out[k] = str(v)
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def series_of(store, run: dict) -> list[tuple[str, float, int]]:
    """``(name, value, step)`` of stored run ``run`` (as :meth:`Store.get_run` returns it):
    per-epoch loss and seconds, validation metrics per evaluation, test metrics, measured seconds
    per training step, the mean step and kernel time (and modeled: :func:`run_step_times`). Names
    use ``@`` (``valid_recall@20``); :func:`mlflow_name` rewrites them for MLflow."""
    run_id = int(run["id"])
    out = []
    for r in store.epochs_frame(run_id).itertuples():
        out.append(("train_loss", float(r.loss), int(r.epoch)))
        out.append(("epoch_seconds_measured", float(r.seconds), int(r.epoch)))
    for r in store.evals_frame([run_id]).itertuples():
        if "@" in r.metric:                     # metrics, not counts (users)
            out.append((f"{r.split}_{r.metric}", float(r.value), int(r.epoch)))
    for r in store.steps_frame(run_id).itertuples():
        out.append(("step_seconds_measured", float(r.seconds), int(r.step)))
    result = RunRecord.of(run).result
    st = run_step_times(store, run_id)   # the step and kernel time every view shows (tiermodel.step_times)
    for name, v in (("step_seconds_measured_mean", st.step_s), ("kernel_seconds_measured_mean", st.kernel_s),
                    ("modeled_step_seconds", st.modeled_step_s), ("modeled_kernel_seconds", st.modeled_kernel_s)):
        if _finite(v):
            out.append((name, float(v), 0))
    if _finite(result.train_seconds):
        out.append(("train_seconds_measured", float(result.train_seconds), 0))
    return [(n, v, s) for n, v, s in out if math.isfinite(v)]


def mlflow_name(name: str) -> str:
    """A metric name MLflow accepts (letters, digits, ``_ - . / :`` and spaces): ``@`` -> ``_at_``."""
    return name.replace("@", "_at_")


def tags_of(store, run: dict) -> dict:
    rec = RunRecord.of(run)
    cfg = rec.config
    tags = {TAG_RUN: str(run["id"]), TAG_STORE: str(store.path), "gnnrec_lab.util.status": str(run["status"]),
            "gnnrec_lab.time": str(run.get("measured")), "gnnrec_lab.memory_mode": str(cfg.get("memory_mode")),
            "gnnrec_lab.dataset": str(cfg.get("dataset")), "gnnrec_lab.model": str(cfg.get("model"))}
    modeled = rec.result.modeled
    if modeled.get("device"):
        tags["gnnrec_lab.modeled_device"] = str(modeled["device"])
    for k, v in rec.host.items():
        tags[f"host.{k}"] = str(v)
    if run.get("sweep"):
        tags["gnnrec_lab.services.sweep"] = str(run["sweep"])
    return tags


def write_artifacts(store, run: dict, directory: Path) -> list[Path]:
    """``config.yaml``, ``kernels.csv``, ``footprint.csv`` and (when the run has kernel records)
    ``trace.json`` of a stored run, written into ``directory``."""
    run_id = int(run["id"])
    files = []
    try:
        save_config_file(RunConfig.from_dict(run["config"]), directory / "config.yaml")
        files.append(directory / "config.yaml")
    except UserError:
        pass        # a config this version no longer accepts: the params still carry every field
    k = store.kernel_totals_frame(run_id)
    if len(k):
        k = k.assign(seconds=k.ns / 1e9, time=Provenance.MEASURED).drop(columns="ns")
        k.to_csv(directory / "kernels.csv", index=False)
        files.append(directory / "kernels.csv")
    fp = store.footprint_frame(run_id)
    if len(fp):
        fp.assign(kind=fp.kind.map(lambda s: "predicted (modeled)" if s == Provenance.MODELED else s)).to_csv(
            directory / "footprint.csv", index=False)
        files.append(directory / "footprint.csv")
    last = store.kernels_frame(run_id)
    if len(last):
        export_chrome_trace(last[last.step == last.step.max()], directory / "trace.json")
        files.append(directory / "trace.json")
    return files


# ----------------------------------------------------------------------
def _mlflow():
    try:
        import mlflow  # noqa: F401
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError("--to mlflow: needs MLflow (pip install 'gnnrec-lab[tracking]')") from None
    return MlflowClient


def export_mlflow(store, run_ids: Iterable[int], tracking_uri: Optional[str] = None,
                  experiment: str = EXPERIMENT) -> list[dict]:
    """Export stored runs to MLflow (``tracking_uri``, e.g. ``sqlite:///mlflow.db``; default:
    MLflow's own, ``$MLFLOW_TRACKING_URI``). Returns ``[{"run_id", "mlflow_run_id", "new"}]``;
    a run exported before from the same store is found by its tags and not exported again, unless
    it was exported while it was still queued or running and has ended since (then the old copy
    is deleted and the ended run exported)."""
    from mlflow.entities import Metric, Param, RunTag

    client_cls = _mlflow()
    runs = [store.get_run(int(r)) for r in run_ids]       # unknown ids refused before anything is written
    try:
        client = client_cls(tracking_uri=tracking_uri) if tracking_uri else client_cls()
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
    except Exception as e:  # noqa: BLE001 - MLflow raises many types for a bad URI or an unreachable server
        raise UserError(f"--tracking-uri {tracking_uri or '(MLflow default)'}: {str(e).splitlines()[0]}") from None
    out = []
    for run in runs:
        found = client.search_runs([exp_id], filter_string=f"tags.`{TAG_RUN}` = '{run['id']}' and "
                                                           f"tags.`{TAG_STORE}` = '{store.path}'")
        if found and found[0].info.status in ("RUNNING", "SCHEDULED") \
                and MLFLOW_STATUS.get(run["status"]) not in ("RUNNING", "SCHEDULED"):
            client.delete_run(found[0].info.run_id)   # exported while it ran: replaced by the finished run
            found = []
        if found:
            out.append({"run_id": run["id"], "mlflow_run_id": found[0].info.run_id, "new": False})
            continue
        cfg = RunRecord.of(run).config
        start_ms = int((run.get("started") or run.get("created") or 0) * 1000)
        tags = tags_of(store, run)
        mrun = client.create_run(exp_id, start_time=start_ms,
                                 run_name=cfg.get("name") or f"gnnrec-lab run {run['id']}", tags=tags)
        rid = mrun.info.run_id
        params = [Param(k, v[:6000]) for k, v in params_of(cfg).items()]
        metrics = [Metric(mlflow_name(n), v, start_ms, s) for n, v, s in series_of(store, run)]
        # MLflow takes at most 100 params and 1000 metrics per batch
        client.log_batch(rid, params=params[:100], tags=[RunTag(k, v) for k, v in tags.items()])
        for j in range(100, len(params), 100):
            client.log_batch(rid, params=params[j:j + 100])
        for j in range(0, len(metrics), 1000):
            client.log_batch(rid, metrics=metrics[j:j + 1000])
        with tempfile.TemporaryDirectory() as d:
            for f in write_artifacts(store, run, Path(d)):
                client.log_artifact(rid, str(f))
        status = MLFLOW_STATUS.get(run["status"], "FAILED")
        if status not in ("RUNNING", "SCHEDULED"):
            end = run.get("finished")
            client.set_terminated(rid, status=status, end_time=int(end * 1000) if end else None)
        out.append({"run_id": run["id"], "mlflow_run_id": rid, "new": True})
    return out


# ----------------------------------------------------------------------
def export_tensorboard(store, run_ids: Iterable[int], logdir) -> list[dict]:
    """Write stored runs as TensorBoard event files, one directory per run
    (``<logdir>/gnnrec-lab-run-<id>``): the series of :func:`series_of` as scalars
    (``valid/recall@20``, ``train/loss``, ...) and the config as hparams with the test metrics.
    Returns ``[{"run_id", "dir"}]``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams
    except ImportError:
        raise UserError("--to tensorboard: needs TensorBoard (pip install 'gnnrec-lab[tracking]')") from None
    runs = [store.get_run(int(r)) for r in run_ids]
    root = Path(logdir).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--to tensorboard: cannot create {root}: {e.strerror}") from None
    out = []
    for run in runs:
        d = root / f"gnnrec-lab-run-{run['id']}"
        w = SummaryWriter(log_dir=str(d))
        try:
            wall = run.get("started") or run.get("created")
            test = {}
            for name, v, step in series_of(store, run):
                split, _, metric = name.partition("_")
                tag = f"{split}/{metric}" if split in ("train", "valid", "test") else name
                w.add_scalar(tag, v, global_step=step, walltime=wall)
                if split == "test" and "@" in metric:
                    test[f"test/{metric}"] = v
            cfg = RunRecord.of(run).config
            # numbers stay numbers (TensorBoard's hparams table sorts and filters them); the rest as text
            text = params_of(cfg)
            hp = {k: v if isinstance(v, (int, float, str, bool)) else text[k] for k, v in cfg.items()}
            for summary in hparams(hp, test):
                w.file_writer.add_summary(summary)
        finally:
            w.close()
        out.append({"run_id": run["id"], "dir": str(d)})
    return out
