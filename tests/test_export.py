"""`runs export`: stored runs into MLflow (SQLite backend, read back through MLflow's own client)
and TensorBoard (read back through TensorBoard's event reader)."""
from __future__ import annotations

import json

import pytest
from _cli import run_cli as _cli

from gnnrec_lab.commands import cli
from gnnrec_lab.runs.store import Store

RUN = ["run", "--dataset", "synth-tiny", "--layers", "1", "--dim", "8", "--epochs", "2",
       "--max-steps-per-epoch", "2", "--no-progress"]




@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A store with two real runs: one measured (DRAM), one with a modeled memory mode."""
    h = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("GNNREC_LAB_HOME", str(h))
    try:
        for extra in ([], ["--memory-mode", "optane_app_direct", "--name", "modeled one"]):
            assert cli.main(RUN + extra) == 0
    finally:
        mp.undo()
    return h


@pytest.fixture
def store(home, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(home))
    return Store(home)


@pytest.mark.slow      # MLflow creates its SQLite schema through its migrations: ~30 s on 2 cores
def test_mlflow_export_read_back_through_mlflows_client(store, tmp_path, monkeypatch, capsys):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient
    monkeypatch.chdir(tmp_path)                       # MLflow puts a SQLite store's artifacts under ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc, out, err = _cli(["runs", "export", 1, 2, "--to", "mlflow", "--tracking-uri", uri], capsys)
    assert rc == 0, err
    assert "run 1 -> MLflow run" in out and "run 2 -> MLflow run" in out
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("gnnrec-lab")
    by_id = {r.data.tags["gnnrec_lab.run_id"]: r for r in client.search_runs([exp.experiment_id])}
    assert set(by_id) == {"1", "2"}
    for rid, mrun in by_id.items():
        run = store.get_run(int(rid))
        cfg = run["config"]
        # params: every config field
        assert set(mrun.data.params) == set(cfg)
        assert mrun.data.params["dim"] == "8" and mrun.data.params["topk"] == "10,20"
        assert json.loads(mrun.data.params["placement"]) == cfg["placement"]
        # per-epoch loss and validation metrics, by epoch
        loss = client.get_metric_history(mrun.info.run_id, "train_loss")
        epochs = store.epochs_frame(int(rid))
        assert [(m.step, round(m.value, 6)) for m in sorted(loss, key=lambda m: m.step)] == \
            [(int(e.epoch), round(float(e.loss), 6)) for e in epochs.itertuples()]
        ev = store.evals_frame([int(rid)])
        valid = ev[(ev.split == "valid") & (ev.metric == "mrr@20")]
        hist = client.get_metric_history(mrun.info.run_id, "valid_mrr_at_20")
        assert sorted((m.step, round(m.value, 6)) for m in hist) == \
            sorted((int(r.epoch), round(float(r.value), 6)) for r in valid.itertuples())
        assert mrun.data.metrics["test_recall_at_20"] == pytest.approx(run["result"]["test"]["recall@20"])
        steps = client.get_metric_history(mrun.info.run_id, "step_seconds_measured")
        assert len(steps) == len(store.steps_frame(int(rid))) == 4
        # host as tags, status, artifacts
        assert mrun.data.tags["host.hostname"] == run["host"]["hostname"]
        assert mrun.info.status == "FINISHED"
        arts = {a.path for a in client.list_artifacts(mrun.info.run_id)}
        assert {"config.yaml", "kernels.csv", "footprint.csv", "trace.json"} <= arts
        trace = json.loads(open(client.download_artifacts(mrun.info.run_id, "trace.json", str(tmp_path))).read())
        assert any(e.get("name") == "spmm" for e in trace["traceEvents"])
    # the modeled run's modeled step time, under a name that says so; the measured one has none
    assert any(k.startswith("modeled_") for k in by_id["2"].data.metrics)
    assert by_id["2"].data.tags["gnnrec_lab.time"] == "modeled"
    assert not any(k.startswith("modeled_") for k in by_id["1"].data.metrics)
    assert by_id["2"].data.tags["mlflow.runName"] == "modeled one"
    # exporting again finds them and writes nothing new
    rc, out, err = _cli(["runs", "export", 1, "--to", "mlflow", "--tracking-uri", uri], capsys)
    assert rc == 0 and "exported before" in out
    assert len(client.search_runs([exp.experiment_id])) == 2
    # a run exported while it was running is replaced once it has ended
    first = by_id["1"].info.run_id
    client.update_run(first, status="RUNNING")
    rc, out, err = _cli(["runs", "export", 1, "--to", "mlflow", "--tracking-uri", uri], capsys)
    assert rc == 0 and "exported before" not in out, out
    live = client.search_runs([exp.experiment_id])
    assert len(live) == 2 and first not in {r.info.run_id for r in live}
    assert {r.info.status for r in live} == {"FINISHED"}


def test_tensorboard_export_scalars_and_hparams(store, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    rc, out, err = _cli(["runs", "export", 1, "--to", "tensorboard", tmp_path / "tb"], capsys)
    assert rc == 0, err
    acc = EventAccumulator(str(tmp_path / "tb" / "gnnrec-lab-run-1"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "valid/recall@20", "valid/hit@10", "test/precision@20", "step_seconds_measured"} <= tags
    ev = store.evals_frame([1])
    want = ev[(ev.split == "valid") & (ev.metric == "recall@20")]
    got = acc.Scalars("valid/recall@20")
    assert [(s.step, round(s.value, 5)) for s in got] == [(int(r.epoch), round(float(r.value), 5))
                                                          for r in want.itertuples()]
    plugins = acc.PluginTagToContent("hparams")
    assert plugins, "no hparams summary"


@pytest.mark.parametrize("argv, words", [
    (["runs", "export", 1, "--to", "wandb"], "--to: got 'wandb', allowed: mlflow, tensorboard DIR"),
    (["runs", "export", 1, "--to", "tensorboard"], "--to tensorboard needs one directory"),
    (["runs", "export", 1, "--to", "mlflow", "x"], "--to mlflow takes no directory"),
    (["runs", "export", 99, "--to", "tensorboard", "tb"], "run 99: no such run"),
    (["runs", "export", 1, "--to", "tensorboard", "tb", "--tracking-uri", "x"], "--tracking-uri applies to"),
    (["runs", "export", "--to", "mlflow"], "ids"),
])
def test_export_mistakes_are_one_line(store, tmp_path, monkeypatch, capsys, argv, words):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _cli(argv, capsys)
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert words in err, err
    assert not (tmp_path / "tb").exists()
