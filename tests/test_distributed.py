"""``gnnrec-lab distributed`` (DistDGL): bad input is refused before a run is recorded in both lanes,
the main lane says how to get DGL, and in the DGL lane (``make test-dgl``) a short two-partition run
goes through the lab's runner (its worker owns the run) and is recorded as a measured ``distdgl``
run whose fetched rows match the source, while a run whose machines share one /dev/shm is caught by
that row check instead of training on wrong rows; Ctrl-C or SIGTERM of the command cancels the run
and leaves no process of it."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnrec_lab import kernels
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.proc import pid_alive

HAVE_DGL = "dgl" in kernels.available_backends()
needs_dgl = pytest.mark.skipif(not HAVE_DGL, reason="dgl is not importable here (the DGL lane: make test-dgl)")
needs_unshare = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0 or shutil.which("unshare") is None,
                                   reason="private /dev/shm per machine needs root and unshare")

TINY = ["--dataset", "synth-tiny", "--layers", "2", "--dim", "16", "--partitions", "2", "--batch-size", "256",
        "--epochs", "1", "--max-steps-per-epoch", "4", "--eval-users", "100"]


def _cli(*args, timeout=400):
    return subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(HAVE_DGL, reason="the DGL lane has DGL")
def test_without_dgl_the_command_says_how_to_get_it():
    before = Store().run_ids()         # the suite's store: earlier tests' runs may be there
    p = _cli("--dataset", "synth-tiny")
    assert p.returncode == 2 and "make dgl" in p.stderr and "Traceback" not in p.stderr
    assert Store().run_ids() == before     # nothing recorded


@pytest.mark.parametrize("args,needle", [
    (["--layers", "2", "--fanouts", "10"], "--fanouts"),
    (["--partitions", "0"], "--partitions"),
    (["--model", "mf"], "--model"),
    (["--ip-config", "/nonexistent/ip.txt"], "--ip-config"),
    (["--fanouts", "10,x"], "--fanouts"),
    (["--target-of", "1", "--target-recall", "0.1"], "--target-of: not with --target-recall"),
    (["--target-fraction", "0.9"], "--target-fraction: only with --target-of"),
    (["--target-of", "1", "--target-fraction", "1.5"], "--target-fraction"),
    (["--target-of", "0"], "--target-of"),
])
def test_bad_input_one_line_exit_2(args, needle):
    p = _cli("--dataset", "synth-tiny", *args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr


def test_explosion_factor_grows_with_depth_and_is_a_share_of_the_graph():
    from gnnrec_lab import data
    from gnnrec_lab.distributed.explosion import explosion_factor
    from gnnrec_lab.graph.bipartite import BipartiteGraph
    ds = data.load("synth-tiny")
    g = BipartiteGraph(ds.train, ds.n_users, ds.n_items)
    f = [explosion_factor(g, d, 16, fanout=3, batches=2) for d in (1, 2, 3)]
    assert all(r["seeds_per_batch"] <= r["input_nodes_per_batch"] <= g.n_nodes for r in f)
    assert f[0]["explosion_factor"] < f[1]["explosion_factor"] <= f[2]["explosion_factor"] <= 1.0


@needs_dgl
@needs_unshare
def test_two_partitions_end_to_end_recorded_as_a_measured_distdgl_run():
    p = _cli(*TINY, "--json")
    assert p.returncode == 0, p.stderr[-4000:]
    r = json.loads(p.stdout)
    run = Store().get_run(r["run_id"])
    assert run["status"] == "finished" and run["measured"] == "measured"
    assert run["result"]["engine"] == "distdgl" and run["info"]["engine"] == "distdgl"
    d = r["distributed"]
    # every trainer fetched every node's row through the store and found the source's value
    assert [c["rows_checked"] for c in d["row_check"]] == [700, 700]
    assert [c["rows_wrong"] for c in d["row_check"]] == [0, 0]
    assert d["batches"] == 2 * 4 and r["steps"] == 4
    assert 0.9 <= d["phase_sum_over_batch"] <= 1.1
    # the lab's glue is timed apart, each part inside the phase that holds it
    glue, med = d["glue_seconds_median"], d["batch_seconds_median"]
    assert set(glue) == {"degree_fetch", "block_csr"} and 0 < d["glue_share_of_batch"] < 1
    assert 0 < glue["block_csr"] <= med["compute"] and 0 < glue["degree_fetch"] <= med["remote_fetch"]
    assert 0.5 <= d["batch_time_share_of_epoch"] <= 1.0
    assert 0 < d["explosion_factor"] <= 1
    # DGL's distributed sampler and the lab's touch about as many nodes for the same batch
    from gnnrec_lab import data
    from gnnrec_lab.distributed.explosion import explosion_factor
    from gnnrec_lab.graph.bipartite import BipartiteGraph
    ds = data.load("synth-tiny")
    lab = explosion_factor(BipartiteGraph(ds.train, ds.n_users, ds.n_items), 2, 128, fanout=10, batches=4)
    assert abs(lab["input_nodes_per_batch"] - d["input_nodes_per_batch"]) <= 0.15 * lab["input_nodes_per_batch"]
    assert d["bytes_between_partitions"]["total"] > 0
    assert np.isfinite(r["best_valid"]["recall@20"]) and np.isfinite(r["test"]["recall@20"])
    ev = Store().evals_frame(r["run_id"])
    assert {"valid", "test"} <= set(ev["split"])
    assert len(Store().steps_frame(r["run_id"])) == 4
    assert not (Store().run_dir(r["run_id"]) / "distdgl" / "parts").exists()   # partitions removed


@needs_dgl
@needs_unshare
def test_the_commands_run_is_a_runner_run_with_its_workers_logs(tmp_path):
    """The command launches the run as the Launch page does: its row holds runner_request's request
    (every flag that is not a RunConfig field among its options), a worker process of its own trained
    it and wrote its logs in the run's folder, and the command printed the stored result."""
    from gnnrec_lab.distributed.engine import TRAIN_FN
    home = tmp_path / "home"
    p = subprocess.Popen([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", *TINY, "--part-method",
                          "random", "--keep-partitions", "--timeout", "600", "--name", "through the runner"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "GNNREC_LAB_HOME": str(home)})
    out, err = p.communicate(timeout=400)
    assert p.returncode == 0, err[-4000:]
    store = Store(home)
    (rid,) = store.run_ids()
    run = store.get_run(rid)
    assert run["status"] == "finished" and run["name"] == "through the runner"
    assert run["pid"] not in (None, p.pid)                  # a worker trained it, not the command
    req = store.run_request(rid)
    assert req["train_fn"] == TRAIN_FN and req["python"] == sys.executable
    assert req["options"] == {"partitions": 2, "cluster": "local", "cores_per_machine": 1, "link_gbit": 10.0,
                              "timeout_s": 600.0, "part_method": "random", "ip_config": "", "isolate": True,
                              "keep_partitions": True, "target_of": None, "target_fraction": None,
                              "target_reference": None}
    folder = store.run_dir(rid)
    assert "partitioned synth-tiny into 2 (random)" in (folder / "stderr.log").read_text()
    assert (folder / "distdgl" / "parts").is_dir()          # --keep-partitions reached the worker
    assert "partitioned synth-tiny into 2 (random)" in err  # the run's events, followed by the command
    assert f"run {rid}: DistDGL, 2 partitions, 4 steps/trainer" in out
    assert f"run {rid}: launched through the runner" in err and "Traceback" not in err


@needs_dgl
@needs_unshare
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_command_cancels_its_run_through_the_runner(sig, tmp_path):
    """Ctrl-C / SIGTERM of `gnnrec-lab distributed` while its run trains: the run is cancelled through
    the runner (an event names the signal, the trainers stop at a step, the worker records the run
    cancelled), the command exits 130 / 143 naming the run, and no process of the run is left."""
    import time
    home = tmp_path / "home"
    p = subprocess.Popen([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", "--dataset", "synth-tiny",
                          "--layers", "2", "--dim", "16", "--partitions", "2", "--batch-size", "256", "--epochs", "500",
                          "--eval-users", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "GNNREC_LAB_HOME": str(home)},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # as from a shell
    try:
        logs = [home / "runs" / "1" / "distdgl" / f"trainer{i}.log" for i in (0, 1)]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None and not all(
                f.exists() and "epoch 1 of 500" in f.read_text(errors="replace") for f in logs):
            time.sleep(0.3)
        assert p.poll() is None, "the run ended before it trained"
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    store = Store(home)
    run = store.get_run(1)
    assert p.returncode == 128 + sig, err[-3000:]
    assert run["status"] == "cancelled", run["error"]
    assert f"gnnrec-lab: error: run 1: {run['error']}" in err and "Traceback" not in err
    words = "SIGINT (Ctrl-C)" if sig == signal.SIGINT else "SIGTERM"
    assert ("cancel", f"cancel requested: the command following the run got {words}") in \
        [(k, m) for _, k, m in store.events_after(1)]
    assert run["pid"] != p.pid and not pid_alive(run["pid"], run["pid_start"])
    assert _procs_mentioning(str(home / "runs" / "1")) == []    # no machine of the run either


@pytest.mark.parametrize("args,needle,flag_check", [
    (["--dataset", "no-such-dataset"], "unknown dataset 'no-such-dataset'", False),
    (["--target-of", "7"], "--target-of: run 7: no such run", False),
    (["--partitions", "3", "--ip-config", "IP"], "--ip-config: 2 machines listed, --partitions is 3", True),
    (["--fanouts", "10"], "--fanouts", True),
])
def test_bad_input_is_refused_before_a_run_is_recorded(args, needle, flag_check, tmp_path):
    """Refused before the runner queues anything, the error naming what is wrong: no run in the store
    afterwards. The flags' own checks come first; in the main lane the missing DGL is refused next."""
    ip = tmp_path / "ip.txt"
    ip.write_text("127.0.0.1 30050\n127.0.0.1 30051\n")
    home = tmp_path / "home"
    p = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", "--dataset", "synth-tiny",
                        *[str(ip) if a == "IP" else a for a in args]], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "GNNREC_LAB_HOME": str(home)})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert (needle if HAVE_DGL or flag_check else "make dgl") in p.stderr, p.stderr
    assert not (home / "lab.sqlite").exists() or Store(home).run_ids() == []


@needs_dgl
@needs_unshare
def test_machines_sharing_dev_shm_are_caught_by_the_row_check():
    """Without a private /dev/shm per machine, DGL maps the other partition's rows under the
    same segment names: rows come back wrong (or out of range) with no error from DGL."""
    p = _cli(*TINY, "--shared-shm")
    assert p.returncode == 1
    store = Store()
    rid = store.run_ids()[-1]
    assert f"gnnrec-lab: error: run {rid}: distributed run failed" in p.stderr and "differ from the source" in p.stderr
    assert "Traceback" not in p.stderr
    run = store.get_run(rid)
    assert run["status"] == "failed" and "differ from the source" in run["error"]
    assert store.run_request(rid)["options"]["isolate"] is False   # --shared-shm reached the worker


def test_ip_config_hosts_and_which_machines_start_here(tmp_path):
    from gnnrec_lab.distributed.network import ip_hosts, is_local, process_env
    from gnnrec_lab.distributed.spec import DistSpec
    ip = tmp_path / "ip_config.txt"
    ip.write_text("192.0.2.5 30050\n\n203.0.113.7 30050\n")   # documentation/private addresses: never contacted
    spec = DistSpec(workdir=str(tmp_path), graph_name="g", partitions=2, dataset="synth-tiny", ip_config=str(ip))
    assert ip_hosts(spec) == ["192.0.2.5", "203.0.113.7"]
    assert is_local("127.0.0.1") and is_local("localhost") and not is_local("203.0.113.7")
    env = process_env(spec, 1, "client")
    assert env["MASTER_ADDR"] == "192.0.2.5" and env["RANK"] == "1" and env["DGL_ROLE"] == "client"
    assert env["DGL_NUM_CLIENT"] == "2" and env["DGL_DIST_MODE"] == "distributed"


def test_spec_takes_run_configs_fields_and_round_trips_through_spec_json(tmp_path):
    """DistSpec's shared fields are RunConfig's (its defaults; every RunConfig field is one, or is
    named as one a DistDGL run does not take), and spec.json reads back as the spec written."""
    import dataclasses

    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.distributed.spec import NOT_DISTRIBUTED, RUN_FIELDS, DistSpec
    from gnnrec_lab.util.errors import ConfigError
    names = [f.name for f in dataclasses.fields(RunConfig)]
    assert sorted(RUN_FIELDS + tuple(NOT_DISTRIBUTED)) == sorted(names) and not set(RUN_FIELDS) & set(NOT_DISTRIBUTED)
    spec = DistSpec(workdir=str(tmp_path), graph_name="g", partitions=2)
    assert spec.run_config() == RunConfig(mode="sampled")
    assert DistSpec.load(spec.save()) == spec
    spec = DistSpec(workdir=str(tmp_path), graph_name="g", partitions=2, dataset="synth-tiny", layers=2,
                    fanouts=[5, 3], topk=[20, 10], dim=16, target_recall=0.1, target_of=3, target_fraction=0.9,
                    target_reference=0.2, ports=[30000, 30001], master_port=30002, cluster="emulated", link_gbit=1.5)
    assert (spec.fanouts, spec.topk) == ((5, 3), (10, 20))    # normalised as RunConfig normalises them
    assert DistSpec.load(spec.save()) == spec
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=16, mode="sampled", fanouts=(5, 3), target_recall=0.1,
                    name="x")
    assert spec.run_config(name="x") == cfg
    assert DistSpec.of(cfg, str(tmp_path), "g", 2).run_config(name="x") == cfg
    with pytest.raises(ConfigError, match="optimizer: a DistDGL run does not take it"):
        DistSpec.of(cfg.replace(optimizer="sgd"), str(tmp_path), "g", 2)


def test_the_commands_spec_keeps_the_commands_own_defaults():
    """`gnnrec-lab distributed` gives every field its flags set (2 layers, 1 epoch, patience 0),
    whatever RunConfig's defaults, which a DistSpec built in Python takes."""
    from gnnrec_lab.commands import cli
    from gnnrec_lab.commands.distributed import _check, spec_of
    args = cli.build_parser().parse_args(["distributed"])
    _check(args)
    spec = spec_of(args, "/nonexistent/home")
    assert (spec.dataset, spec.model, spec.layers, spec.fanouts, spec.dim, spec.batch_size, spec.epochs, spec.lr,
            spec.l2, spec.seed, spec.eval_every, spec.patience, spec.eval_users, spec.target_recall) == \
        ("synth-gowalla", "lightgcn", 2, (10, 10), 64, 2048, 1, 1e-3, 1e-4, 2020, 1, 0, None, None)
    assert (spec.partitions, spec.cluster, spec.isolate, spec.cores_per_machine, spec.link_gbit, spec.timeout_s,
            spec.ip_config, spec.home) == (2, "local", True, 1, 10.0, 3600.0, "", "/nonexistent/home")
    assert (spec.model_options, spec.backend, spec.topk) == ({"ngcf_form": "edge"}, "native", (10, 20))


@pytest.mark.skipif(HAVE_DGL, reason="the DGL lane has DGL: the run would train")
def test_a_distdgl_run_goes_through_the_runner_and_says_when_the_dgl_lane_is_missing(tmp_path, monkeypatch):
    """runner_request makes Runner.launch's arguments for a DistDGL run: refused at once where
    neither this interpreter nor a built DGL lane has DGL; else the worker dispatches to the
    engine's train, whose error comes back as the run's (here the "lane" is this interpreter,
    which has no DGL)."""
    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.distributed import engine
    from gnnrec_lab.runs.runner import Runner
    from gnnrec_lab.util.errors import ConfigError, UserError
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    monkeypatch.setenv("GNNREC_LAB_TRAIN_FN", "no_such_module:train")   # the run's request names its own
    store = Store(tmp_path)
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=16, mode="sampled", fanouts=(10, 10), epochs=1,
                    max_steps_per_epoch=2, name="distdgl through the runner")
    monkeypatch.setattr(engine, "dgl_lane_python", lambda: None)
    with pytest.raises(UserError, match="make dgl"):
        engine.runner_request(cfg, 2)
    for bad, kw, field in [(cfg.replace(mode="full"), {}, "mode"), (cfg.replace(optimizer="sgd"), {}, "optimizer"),
                           (cfg.replace(batch_size=2), dict(partitions=4), "batch_size"),
                           (cfg, dict(partitions=0), "partitions"), (cfg, dict(link_gbit=-1), "link_gbit")]:
        with pytest.raises(ConfigError) as e:
            engine.runner_request(bad, **kw)
        assert e.value.param == field
    monkeypatch.setattr(engine, "dgl_lane_python", lambda: Path(sys.executable))
    req = engine.runner_request(cfg, 2, part_method="random")
    assert req == {"train_fn": "gnnrec_lab.distributed.engine:train", "python": sys.executable,
                   "options": {"partitions": 2, "cluster": "local", "cores_per_machine": 1, "link_gbit": 10.0,
                               "timeout_s": 3600.0, "part_method": "random", "ip_config": "", "isolate": True,
                               "keep_partitions": False, "target_of": None, "target_fraction": None,
                               "target_reference": None}}
    runner = Runner(store)
    rid = runner.launch(cfg, **req)
    assert runner.wait(rid, timeout=120) == "failed"
    run = store.get_run(rid)
    assert run["error"].startswith("distributed: needs DGL") and "make dgl" in run["error"], run["error"]
    assert "Traceback" not in run["error"] and run["config"]["mode"] == "sampled"


def test_runner_request_takes_every_option_of_the_command_and_checks_it_before_queueing(tmp_path, monkeypatch):
    """Every flag of `gnnrec-lab distributed` that is not a RunConfig field is an option of the run's
    request, checked as it is made (an error naming the option), and reaches the worker's train."""
    import inspect

    from gnnrec_lab.commands import cli
    from gnnrec_lab.commands.distributed import _check, runner_options, spec_of
    from gnnrec_lab.distributed import engine
    from gnnrec_lab.util.errors import DataError, UserError
    monkeypatch.setattr(engine, "check_isolation", lambda isolate: None)   # root and unshare: not this test's
    monkeypatch.setattr(engine, "dgl_available", lambda: False)
    monkeypatch.setattr(engine, "dgl_lane_python", lambda: Path(sys.executable))
    ip = tmp_path / "ip.txt"
    ip.write_text("127.0.0.1 30050\n127.0.0.1 30051\n")
    args = cli.build_parser().parse_args(["distributed", "--dataset", "synth-tiny", "--ip-config", str(ip),
                                          "--shared-shm", "--keep-partitions", "--part-method", "random",
                                          "--timeout", "60"])
    _check(args)
    spec = spec_of(args, "/nonexistent/home")
    spec.target_of, spec.target_fraction, spec.target_reference = 3, 0.5, 0.2
    options = runner_options(args, spec)
    assert set(options) | {"config", "partitions", "reporter", "progress"} == \
        set(inspect.signature(engine.train).parameters) == set(inspect.signature(engine.runner_request).parameters) \
        | {"reporter", "progress"}
    cfg = spec.run_config(name="x")
    req = engine.runner_request(cfg, 2, **options)
    assert req["options"] == {"partitions": 2, "cluster": "local", "cores_per_machine": 1, "link_gbit": 10.0,
                              "timeout_s": 60.0, "part_method": "random", "ip_config": str(ip), "isolate": False,
                              "keep_partitions": True, "target_of": 3, "target_fraction": 0.5,
                              "target_reference": 0.2}
    assert req["python"] == sys.executable and req["train_fn"] == engine.TRAIN_FN
    for kw, err in [(dict(options, ip_config=str(tmp_path / "none.txt")), "ip_config: no such file"),
                    (dict(options, cluster="emulated"), "ip_config: not with cluster emulated"),
                    (dict(options, cluster="emulated", ip_config=""), "isolate: a shared /dev/shm only with "
                                                                       "cluster local"),
                    (dict(options, part_method="spectral"), "part_method: got 'spectral'"),
                    (dict(options, keep_partitions="yes"), "keep_partitions: True or False"),
                    (dict(options, target_fraction=2.0), "target_fraction"),
                    (dict(options, timeout_s=0), "timeout_s")]:
        with pytest.raises(UserError, match=err):
            engine.runner_request(cfg, 2, **kw)
    with pytest.raises(UserError, match="ip_config: 2 machines listed, partitions is 3"):
        engine.runner_request(cfg, 3, **options)
    with pytest.raises(DataError, match="unknown dataset 'nope'"):
        engine.runner_request(cfg.replace(dataset="nope"), 2, **options)


@needs_dgl
@needs_unshare
def test_a_distdgl_run_through_the_runner_is_recorded_as_the_command_records_one(tmp_path, monkeypatch):
    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.distributed import engine
    from gnnrec_lab.runs.runner import Runner
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    store = Store(tmp_path)
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=16, mode="sampled", fanouts=(10, 10), batch_size=256,
                    epochs=1, max_steps_per_epoch=4, eval_users=100, patience=0, name="distdgl through the runner")
    runner = Runner(store)
    rid = runner.launch(cfg, **engine.runner_request(cfg, 2))
    assert runner.wait(rid, timeout=400) == "finished", store.get_run(rid)["error"]
    run = store.get_run(rid)
    assert run["measured"] == "measured" and run["config"] == cfg.to_dict()
    assert run["result"]["engine"] == "distdgl" and run["info"]["engine"] == "distdgl"
    d = run["result"]["distributed"]
    assert [c["rows_wrong"] for c in d["row_check"]] == [0, 0] and d["batches"] == 2 * 4
    assert run["result"]["steps"] == 4 and len(store.steps_frame(rid)) == 4
    assert not (store.run_dir(rid) / "distdgl" / "parts").exists()


# -- the emulated cluster (--cluster emulated): one network namespace per machine ----------------
needs_netns = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0 or shutil.which("ip") is None
                                 or shutil.which("tc") is None or shutil.which("taskset") is None
                                 or len(os.sched_getaffinity(0)) < 2,
                                 reason="an emulated cluster needs root, ip, tc, taskset and 2 cores")


def _our_namespaces():
    from gnnrec_lab.distributed.cluster import namespaces
    return set(namespaces())


def test_emulated_cluster_refuses_more_cores_than_the_host_has():
    n = len(os.sched_getaffinity(0))
    p = _cli("--dataset", "synth-tiny", "--cluster", "emulated", "--partitions", "2", "--cores-per-machine", str(n))
    if os.geteuid() != 0:
        assert p.returncode == 2 and "needs root" in p.stderr
        return
    assert p.returncode == 2, p.stderr
    assert "--cores-per-machine" in p.stderr and f"this host has {n}" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("args,needle", [
    (["--ip-config", __file__], "--ip-config: not with --cluster emulated"),
    (["--shared-shm"], "--shared-shm: only with --cluster local"),
    (["--link-gbit", "-1"], "--link-gbit"),
    (["--cores-per-machine", "0"], "--cores-per-machine"),
])
def test_emulated_cluster_bad_combinations_exit_2(args, needle):
    p = _cli("--dataset", "synth-tiny", "--cluster", "emulated", "--partitions", "1", *args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="runs as root to reach the tool check")
def test_emulated_cluster_refuses_without_ip_on_path(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}    # an empty folder: no ip, tc or taskset
    p = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", "--dataset", "synth-tiny",
                        "--cluster", "emulated", "--partitions", "1"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 2 and "`ip` (iproute2) is not on PATH" in p.stderr, p.stderr


def test_emulated_cluster_refuses_when_not_root(monkeypatch):
    from gnnrec_lab.distributed import cluster
    from gnnrec_lab.util.errors import UserError
    monkeypatch.setattr(cluster.os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="needs root"):
        cluster.check_possible(1, 1, 10)


@needs_netns
def test_emulated_cluster_links_machines_and_leaves_no_trace():
    """Two namespaces reach each other over the bridge, nothing appears on the host's own
    interfaces, and every namespace is gone after the block (also when it raises)."""
    from gnnrec_lab.distributed.cluster import EmulatedCluster
    host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    with pytest.raises(ZeroDivisionError):
        with EmulatedCluster(2, 1, 1) as c:
            names = {m.namespace for m in c.machines} | {c.bridge_ns}
            assert names <= _our_namespaces()
            assert subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout == host_links
            srv = subprocess.Popen(c.command(1, [sys.executable, "-c",
                                   "import socket; s=socket.socket(); s.bind(('10.251.0.2', 30050)); s.listen(1); "
                                   "c, _ = s.accept(); n = 0\nwhile True:\n d = c.recv(1 << 16)\n n += len(d)\n"
                                   " if not d: break\nprint(n)"]), stdout=subprocess.PIPE, text=True)
            cli = subprocess.run(c.command(0, [sys.executable, "-c",
                                 "import socket, time\nfor _ in range(50):\n try:\n  s = socket.create_connection(("
                                 "'10.251.0.2', 30050)); break\n except OSError: time.sleep(0.1)\n"
                                 "s.sendall(b'x' * 2_000_000); s.close()"]), timeout=60)
            assert cli.returncode == 0 and int(srv.communicate(timeout=60)[0]) == 2_000_000
            sent = c.link_bytes()
            assert sent[0]["tx_bytes"] >= 2_000_000 and sent[1]["rx_bytes"] >= 2_000_000
            raise ZeroDivisionError("a failure inside the block")
    assert not (names & _our_namespaces())


@needs_dgl
@needs_netns
def test_emulated_two_machine_cluster_done_when_command():
    before = _our_namespaces()
    p = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", "--cluster", "emulated",
                        "--partitions", "2", "--cores-per-machine", "1", "--link-gbit", "10", "--dataset", "synth-tiny",
                        "--layers", "2", "--epochs", "1", "--json"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    r = json.loads(p.stdout)
    d = r["distributed"]
    c = d["cluster"]
    addrs = [m["address"] for m in c["machines"]]
    assert c["kind"] == "emulated" and len(set(addrs)) == 2
    assert not any(a.startswith("127.") for a in addrs)
    assert [c["rows_checked"] for c in d["row_check"]] == [700, 700]
    assert [c["rows_wrong"] for c in d["row_check"]] == [0, 0]
    # each trainer ran on its machine's cores only, gloo on its machine's interface
    assert d["trainer_cores"] == [m["cores"] for m in c["machines"]]
    assert not set(d["trainer_cores"][0]) & set(d["trainer_cores"][1])
    assert d["trainer_gloo_interface"] == [m["interface"] for m in c["machines"]]
    # every byte between the machines crossed their links; more than the rows the lab counts
    lb = c["link_bytes"]
    assert all(x["tx_bytes"] > 0 and x["rx_bytes"] > 0 for x in lb)
    assert sum(x["tx_bytes"] for x in lb) >= d["bytes_between_partitions"]["total"] / 2
    assert all(m["link_gbit"] == 10 for m in c["machines"])
    run = Store().get_run(r["run_id"])
    assert run["info"]["distributed"]["cluster"]["kind"] == "emulated"
    assert _our_namespaces() <= before


def _procs_mentioning(text: str) -> list:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                out.append((pid, cmd.replace("\0", " ")))
    return out


@needs_dgl
@needs_netns
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_emulated_cluster_stopped_half_way_leaves_nothing(sig, tmp_path):
    import time
    # a store of its own: the killed run's writers never share a store with the rest of the suite
    home = tmp_path / "home"
    runs = home / "runs"
    before_ns, before_runs = _our_namespaces(), set(os.listdir(runs)) if runs.is_dir() else set()
    p = subprocess.Popen([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", "--cluster", "emulated",
                          "--partitions", "2", "--cores-per-machine", "1", "--link-gbit", "1",
                          "--dataset", "synth-tiny",
                          "--layers", "2", "--dim", "16", "--batch-size", "256", "--epochs", "50"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "GNNREC_LAB_HOME": str(home)},
                         # as from a shell: a SIGINT ignored in this process (inherited across exec) would
                         # leave the launcher deaf to Ctrl-C, and the run would train to its end
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    parent_sigint = signal.getsignal(signal.SIGINT)
    try:
        deadline = time.monotonic() + 300
        workdir = None
        # until both trainers are in the training loop (their logs say so; the store is not polled
        # here so the test reads nothing the run is writing)
        while time.monotonic() < deadline and p.poll() is None:
            new = set(os.listdir(runs)) - before_runs if runs.is_dir() else set()
            if new:
                workdir = runs / max(new, key=int) / "distdgl"
                logs = [workdir / f"trainer{i}.log" for i in (0, 1)]
                if all(f.exists() and "epoch 1 of 50" in f.read_text(errors="replace") for f in logs):
                    break
            time.sleep(0.5)
        assert p.poll() is None and workdir is not None, "the run did not get to training"
        assert _our_namespaces() - before_ns
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:     # the test failed before the signal: leave the host clean anyway
            p.kill()
            p.wait()
            from gnnrec_lab.distributed.cluster import EmulatedCluster
            left = EmulatedCluster(2, 1, 1)
            left.created = sorted(_our_namespaces() - before_ns)
            left.teardown()
    assert p.returncode == (130 if sig == signal.SIGINT else 128 + signal.SIGTERM), (
        f"SIGINT in the test process: {parent_sigint}\n" + err[-3000:])
    assert "Traceback" not in err
    assert _our_namespaces() <= before_ns
    assert _procs_mentioning(str(workdir)) == []
    store = Store(home)
    rid = int(workdir.parent.name)
    run = store.get_run(rid)
    assert run["status"] == "cancelled", run["error"]
    words = "SIGTERM" if sig == signal.SIGTERM else "SIGINT (Ctrl-C)"
    assert ("cancel", f"cancel requested: the command following the run got {words}") in \
        [(k, m) for _, k, m in store.events_after(rid)]
    assert not pid_alive(run["pid"], run["pid_start"])     # the run's worker is gone too


@needs_dgl
@needs_unshare
def test_distdgl_and_full_graph_runs_count_epochs_and_steps_alike():
    """Both engines number epochs and steps from 1 and store their evaluations at the same
    (epoch, step), so Compare draws their curves on one axis."""
    common = ["--dataset", "synth-tiny", "--layers", "2", "--dim", "16", "--batch-size", "256", "--epochs", "2",
              "--max-steps-per-epoch", "2", "--eval-users", "100"]
    d = _cli(*common, "--json")
    assert d.returncode == 0, d.stderr[-3000:]
    f = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "run", *common, "--json"], capture_output=True,
                       text=True, timeout=400)
    assert f.returncode == 0, f.stderr[-3000:]
    rd, rf = json.loads(d.stdout), json.loads(f.stdout)
    store = Store()

    def counted(rid):
        ev = store.evals_frame(rid)
        return (list(store.epochs_frame(rid)["epoch"]),
                [tuple(x) for x in store.steps_frame(rid)[["step", "epoch"]].itertuples(index=False)],
                sorted({(int(e), int(s)) for e, s, sp in ev[["epoch", "step", "split"]].itertuples(index=False)
                        if sp == "valid"}))
    assert counted(rd["run_id"]) == counted(rf["run_id"]) == ([1, 2], [(1, 1), (2, 1), (3, 2), (4, 2)],
                                                              [(1, 2), (2, 4)])
    assert [h["epoch"] for h in rd["history"]] == [h["epoch"] for h in rf["history"]] == [1, 2]
    assert rd["best_epoch"] in (1, 2) and rd["epochs"] == rf["epochs"] == 2


@needs_dgl
@needs_netns
def test_emulated_cluster_timed_out_leaves_nothing(tmp_path):
    """--timeout ends the run before the trainers finish: it fails naming the timeout, and the
    machines, their namespaces and links are gone."""
    home = tmp_path / "home"
    before = _our_namespaces()
    p = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "distributed", "--cluster", "emulated",
                        "--partitions", "2", "--cores-per-machine", "1", "--link-gbit", "0", "--dataset", "synth-tiny",
                        "--layers", "2", "--dim", "16", "--batch-size", "256", "--epochs", "50", "--timeout", "3"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "GNNREC_LAB_HOME": str(home)})
    assert p.returncode == 1 and "timed out" in p.stderr, p.stderr[-3000:]
    assert _our_namespaces() <= before
    assert _procs_mentioning(str(home)) == []
    assert Store(home).get_run(1)["status"] == "failed"


SHORT = ["--dataset", "synth-tiny", "--layers", "2", "--dim", "16", "--batch-size", "256",
         "--max-steps-per-epoch", "2", "--eval-users", "100"]


@needs_dgl
@needs_unshare
def test_distdgl_early_stops_and_says_its_target_was_not_reached_through_the_shared_loop():
    """train.py's loop runs DistDGL's trainers: patience ends the run (every trainer leaves
    together), every epoch is evaluated with training time only, a missed target says so."""
    from gnnrec_lab.training.loop import EarlyStopping
    p = _cli(*SHORT, "--epochs", "6", "--patience", "1", "--lr", "1e-9", "--target-recall", "1.0", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    hist = r["history"]
    assert [h["epoch"] for h in hist] == list(range(1, r["epochs"] + 1))          # every epoch evaluated
    assert [h["elapsed_s"] for h in hist] == pytest.approx(list(np.cumsum(r["epoch_seconds"])))
    # an lr of 1e-9 leaves the model where it started: no new best, so patience 1 stops it early,
    # where train.py's rule says
    stopper = EarlyStopping(1)
    stops = [h["epoch"] for h in hist if not stopper.update(h["epoch"], h["recall@20"])
             and stopper.should_stop(h["epoch"])]
    assert stops == [r["epochs"]] and r["epochs"] < 6 and r["best_epoch"] == stopper.best_epoch
    assert r["target"]["reached"] is False and r["time_to_target_s"] is None and r["target"]["value"] == 1.0
    store = Store()
    run = store.get_run(r["run_id"])
    assert run["status"] == "finished" and run["result"]["target"] == r["target"]
    ev = store.events_frame(r["run_id"])
    assert "early_stop" in set(ev["kind"])
    assert any("not reached" in m for k, m in ev[["kind", "message"]].itertuples(index=False) if k == "target")
    assert list(store.epochs_frame(r["run_id"])["epoch"]) == list(range(1, r["epochs"] + 1))


@needs_dgl
@needs_unshare
def test_distdgl_target_of_a_full_graph_run():
    """--target-of: the target is a share of a full-graph run's best validation Recall@20 at the
    same depth and batch size, evaluated on the same seeded users; reached or not is said."""
    from gnnrec_lab.training.step import target_line
    f = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "run", *SHORT, "--epochs", "1", "--json"],
                       capture_output=True, text=True, timeout=400)
    assert f.returncode == 0, f.stderr[-3000:]
    rf = json.loads(f.stdout)
    ref = rf["best_valid"]["recall@20"]
    bad = _cli(*SHORT, "--epochs", "1", "--layers", "1", "--target-of", str(rf["run_id"]))
    assert bad.returncode == 2 and "--target-of" in bad.stderr and "--layers 1" in bad.stderr, bad.stderr
    store = Store()
    n_runs = len(store.run_ids())
    d = _cli(*SHORT, "--epochs", "1", "--target-of", str(rf["run_id"]), "--target-fraction", "0.01")
    assert d.returncode == 0, d.stderr[-3000:]
    rid = store.run_ids()[n_runs]
    r = store.get_run(rid)["result"]
    t = r["target"]
    assert (t["of_run"], t["fraction"], t["reference"]) == (rf["run_id"], 0.01, ref)
    assert t["value"] == pytest.approx(0.01 * ref) and t["reached"] and t["epoch"] == 1
    assert r["time_to_target_s"] == t["time_s"] == r["history"][0]["elapsed_s"]
    assert f"target: {target_line(t)}" in d.stdout and "1% of run" in d.stdout
    # the same seeded users ranked on both sides
    assert r["history"][0]["users"] == rf["history"][0]["users"] and r["test"]["users"] == rf["test"]["users"]


@needs_dgl
def test_a_distdgl_run_killed_at_random_moments_leaves_a_failed_row_not_a_running_one(tmp_path):
    """benchmarks/bench_crash.py's check on the DistDGL writer (the command was found recording no pid,
    so a killed run read as running for a minute): every kill leaves a sound store, no run running."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_crash", os.path.join(os.path.dirname(__file__), "..",
                                                                             "benchmarks", "bench_crash.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.crash_trials(3, writers=("distributed",), seed=3, workdir=tmp_path, log=print)
    assert not r["problems"], r["problems"]


@needs_dgl
@needs_netns
def test_the_large_batch_rule_and_warm_up_reach_both_of_distdgls_optimizers():
    """`distributed --lr-rule sqrt --warmup-epochs 1` on the emulated cluster: every trainer's
    SparseAdam (the embedding table) and dense Adam run the loop's learning rate of each step, warmed
    up from lr x sqrt(256/64) / 4 over the first epoch's 4 steps to lr x sqrt(256/64)."""
    before = _our_namespaces()
    p = _cli(*[a for a in TINY if a not in ("--epochs", "1")], "--epochs", "2", "--cluster", "emulated",
             "--lr", "1e-3", "--lr-rule", "sqrt", "--ref-batch-size", "64", "--warmup-epochs", "1",
             "--model", "ngcf", "--json")
    assert p.returncode == 0, p.stderr[-4000:]
    r = json.loads(p.stdout)
    peak = 1e-3 * (256 / 64) ** 0.5
    for lr in r["distributed"]["lr"]:
        assert lr["steps"] == 8
        assert lr["first"] == pytest.approx(peak / 4) and lr["max"] == pytest.approx(peak)
        assert lr["last_sparse"] == pytest.approx(peak) and lr["last_dense"] == pytest.approx(peak)
    assert r["config"]["lr_rule"] == "sqrt" and r["config"]["warmup_epochs"] == 1
    assert _our_namespaces() == before
    # without the rule the trainers keep lr as given
    p = _cli(*TINY, "--lr", "1e-3", "--json")
    assert p.returncode == 0, p.stderr[-4000:]
    assert all(lr["first"] == lr["max"] == lr["last_sparse"] == pytest.approx(1e-3)
               for lr in json.loads(p.stdout)["distributed"]["lr"])
