"""``gnnrec-lab distributed`` (DistDGL): bad input is refused before work starts in both lanes, the
main lane says how to get DGL, and in the DGL lane (``make test-dgl``) a short two-partition run
is recorded as a measured ``distdgl`` run whose fetched rows match the source, while a run whose
machines share one /dev/shm is caught by that row check instead of training on wrong rows."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gnnrec_lab import kernels
from gnnrec_lab.store import Store

HAVE_DGL = "dgl" in kernels.available_backends()
needs_dgl = pytest.mark.skipif(not HAVE_DGL, reason="dgl is not importable here (the DGL lane: make test-dgl)")
needs_unshare = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0 or shutil.which("unshare") is None,
                                   reason="private /dev/shm per machine needs root and unshare")

TINY = ["--dataset", "synth-tiny", "--layers", "2", "--dim", "16", "--partitions", "2", "--batch-size", "256",
        "--epochs", "1", "--max-steps-per-epoch", "4", "--eval-users", "100"]


def _cli(*args, timeout=400):
    return subprocess.run([sys.executable, "-m", "gnnrec_lab.cli", "distributed", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(HAVE_DGL, reason="the DGL lane has DGL")
def test_without_dgl_the_command_says_how_to_get_it():
    p = _cli("--dataset", "synth-tiny")
    assert p.returncode == 2 and "make dgl" in p.stderr and "Traceback" not in p.stderr
    assert Store().run_ids() == []     # nothing recorded


@pytest.mark.parametrize("args,needle", [
    (["--layers", "2", "--fanouts", "10"], "--fanouts"),
    (["--partitions", "0"], "--partitions"),
    (["--model", "mf"], "--model"),
    (["--ip-config", "/nonexistent/ip.txt"], "--ip-config"),
    (["--fanouts", "10,x"], "--fanouts"),
])
def test_bad_input_one_line_exit_2(args, needle):
    p = _cli("--dataset", "synth-tiny", *args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr


def test_explosion_factor_grows_with_depth_and_is_a_share_of_the_graph():
    from gnnrec_lab import data
    from gnnrec_lab.distributed import explosion_factor
    from gnnrec_lab.graph import BipartiteGraph
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
    assert 0.5 <= d["batch_time_share_of_epoch"] <= 1.0
    assert 0 < d["explosion_factor"] <= 1
    # DGL's distributed sampler and the lab's touch about as many nodes for the same batch
    from gnnrec_lab import data
    from gnnrec_lab.distributed import explosion_factor
    from gnnrec_lab.graph import BipartiteGraph
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
def test_machines_sharing_dev_shm_are_caught_by_the_row_check():
    """Without a private /dev/shm per machine, DGL maps the other partition's rows under the
    same segment names: rows come back wrong (or out of range) with no error from DGL."""
    p = _cli(*TINY, "--shared-shm")
    assert p.returncode == 1
    assert "differ from the source" in p.stderr
    store = Store()
    run = store.get_run(store.run_ids()[-1])
    assert run["status"] == "failed" and "differ from the source" in run["error"]


def test_ip_config_hosts_and_which_machines_start_here(tmp_path):
    from gnnrec_lab.distributed import DistSpec, _env, _is_local, ip_hosts
    ip = tmp_path / "ip_config.txt"
    ip.write_text("192.0.2.5 30050\n\n203.0.113.7 30050\n")   # documentation/private addresses: never contacted
    spec = DistSpec(workdir=str(tmp_path), graph_name="g", partitions=2, dataset="synth-tiny", ip_config=str(ip))
    assert ip_hosts(spec) == ["192.0.2.5", "203.0.113.7"]
    assert _is_local("127.0.0.1") and _is_local("localhost") and not _is_local("203.0.113.7")
    env = _env(spec, 1, "client")
    assert env["MASTER_ADDR"] == "192.0.2.5" and env["RANK"] == "1" and env["DGL_ROLE"] == "client"
    assert env["DGL_NUM_CLIENT"] == "2" and env["DGL_DIST_MODE"] == "distributed"
