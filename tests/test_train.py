"""End-to-end training on tiny data: learning happens, runs are deterministic,
phases are all recorded, bad input is refused before work starts."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from gnnrec_lab import RunConfig, run
from gnnrec_lab.errors import ConfigError
from gnnrec_lab.graph import BipartiteGraph
from gnnrec_lab.models import NGCF

TINY = dict(dataset="synth-tiny", dim=16, layers=2, batch_size=512, epochs=4, lr=5e-3, patience=0)


def test_lightgcn_learns_better_than_untrained():
    r0 = run(RunConfig(**TINY | {"epochs": 1, "lr": 1e-9, "max_steps_per_epoch": 1}))
    r = run(RunConfig(**TINY | {"epochs": 8}))
    assert r.status == "finished" and r.epochs == 8
    assert r.best_valid["recall@20"] > r0.best_valid["recall@20"] + 0.02
    assert set(r.test) >= {"recall@10", "recall@20", "ndcg@10", "ndcg@20"}
    phases = {k["phase"] for k in r.kernels}
    assert {"forward", "backward", "loss", "optimizer", "sampling"} <= phases
    names = {k["name"] for k in r.kernels}
    assert {"spmm", "gather", "adam", "bpr_sample"} <= names
    assert r.train_seconds > 0 and len(r.epoch_seconds) == 8
    json.dumps(r.to_dict())  # JSON-able


def test_deterministic_from_seed():
    a = run(RunConfig(**TINY | {"epochs": 2}))
    b = run(RunConfig(**TINY | {"epochs": 2}))
    assert a.best_valid == b.best_valid and a.test == b.test
    c = run(RunConfig(**TINY | {"epochs": 2, "seed": 7}))
    assert c.test != a.test


@pytest.mark.parametrize("model,extra", [("ngcf", {"ngcf_form": "edge"}), ("ngcf", {"ngcf_form": "node"}),
                                         ("mf", {"layers": 0})])
def test_other_models_train(model, extra):
    r = run(RunConfig(**TINY | {"model": model, "epochs": 2} | extra))
    assert r.status == "finished" and np.isfinite(r.test["recall@20"])


def test_ngcf_edge_and_node_forms_agree():
    rng = np.random.default_rng(0)
    pairs = np.unique(np.stack([rng.integers(0, 20, 150), rng.integers(0, 30, 150)], 1), axis=0)
    g = BipartiteGraph(pairs, 20, 30)
    torch.manual_seed(0)
    edge = NGCF(20, 30, dim=8, layers=3, form="edge")
    node = NGCF(20, 30, dim=8, layers=3, form="node")
    node.load_state_dict(edge.state_dict())
    a, b = edge.propagate(g.adj), node.propagate(g.adj)
    assert torch.allclose(a, b, atol=1e-5)
    a.sum().backward()
    b.sum().backward()
    assert torch.allclose(edge.embedding.grad, node.embedding.grad, atol=1e-4)


def test_batch_larger_than_train_set_is_refused():
    with pytest.raises(ConfigError) as e:
        run(RunConfig(**TINY | {"batch_size": 10**7}))
    assert e.value.param == "batch_size" and "training interactions" in str(e.value)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gnnrec_lab.cli", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args,needle", [
    (["run", "--dataset", "no-such-data"], "no-such-data"),
    (["run", "--layers", "0"], "layers"),
    (["run", "--dim", "-1"], "dim"),
    (["run", "--dataset", "synth-tiny", "--batch-size", "99999999"], "batch_size"),
])
def test_cli_bad_input_one_line_exit_2(args, needle):
    p = _cli(*args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_cli_json_run():
    p = _cli("run", "--dataset", "synth-tiny", "--layers", "1", "--dim", "8", "--epochs", "1",
             "--batch-size", "1024", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["config"]["layers"] == 1 and out["kind"] == "measured"
    assert out["test"]["recall@20"] >= 0 and out["kernels"]
