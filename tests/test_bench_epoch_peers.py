"""benchmarks/bench_epoch_peers.py: the peers compute the lab's LightGCN, the table's arithmetic,
its clear errors. Runs in both lanes: the DGL peer's test needs DGL (the DGL lane), the PyG
peer's needs torch_geometric (the main lane)."""
from __future__ import annotations

import importlib.util
import json
import math
import pathlib

import numpy as np
import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_epoch_peers", ROOT / "benchmarks" / "bench_epoch_peers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiny():
    from gnnrec_lab.data import load
    from gnnrec_lab.graph.bipartite import BipartiteGraph
    ds = load("synth-tiny")
    return ds, BipartiteGraph(ds.train, ds.n_users, ds.n_items)


def _reference(g, e0: torch.Tensor, layers: int) -> torch.Tensor:
    """LightGCN's layer mean by the definition: mean of (D^-1/2 A D^-1/2)^k e0, k = 0..layers."""
    a = g.adj.to_scipy()
    h, acc = e0.detach().numpy().astype(np.float64), e0.detach().numpy().astype(np.float64)
    for _ in range(layers):
        h = a @ h
        acc = acc + h
    return torch.from_numpy(acc / (layers + 1))


def test_dgl_peer_computes_lightgcn_and_trains(bench, tiny):
    pytest.importorskip("dgl")
    ds, g = tiny
    cfg = bench.config("synth-tiny", 256)
    emb, forward, step = bench.dgl_lightgcn(g, cfg)
    want = _reference(g, emb, cfg.layers)
    got = forward().detach().double()
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-6), float((got - want).abs().max())
    before = emb.detach().clone()
    times = bench.timed_steps(step, g, cfg, steps=2, warmup=1)
    assert len(times) == 2 and min(times) > 0
    assert not torch.equal(before, emb.detach())  # the optimizer moved the table


def test_pyg_peer_computes_lightgcn(bench, tiny):
    pytest.importorskip("torch_geometric")
    ds, g = tiny
    cfg = bench.config("synth-tiny", 256)
    from bench_vs_pyg import pyg_lightgcn
    model, adj, step = pyg_lightgcn(g, cfg, fused_adam=True)
    with torch.no_grad():
        got = model.get_embedding(adj).double()
    want = _reference(g, model.embedding.weight, cfg.layers)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    loss0 = step(*[np.arange(256) % n for n in (g.n_users, g.n_items, g.n_items)]).item()
    assert math.isfinite(loss0)


def _cell(engine, precision, batch, step_s):
    return {"engine": engine, "impl": engine, "precision": precision, "batch_size": batch, "torch": "x",
            "step_s": step_s, "load": [0.5, 0.7]}


def test_epoch_is_steps_per_epoch_times_median_of_round_medians(bench):
    cells = [_cell("lab", "fp32", 1000, [0.010, 0.012, 0.9]), _cell("lab", "fp32", 1000, [0.020, 0.020, 0.020]),
             _cell("lab", "fp32", 1000, [0.014]), _cell("pyg", "fp32", 1000, [0.07]),
             _cell("dgl", "fp32", 1000, [0.05]), _cell("lab", "bf16", 1000, [0.007])]
    rows = {(r["engine"], r["precision"]): r for r in bench.summarise(cells, n_train=10_500)}
    lab = rows[("lab", "fp32")]
    assert lab["steps_per_epoch"] == 11 and lab["round_step_s"] == [0.012, 0.020, 0.014]
    assert lab["epoch_s"] == pytest.approx(11 * 0.014)
    assert lab["epoch_range_s"] == pytest.approx([11 * 0.012, 11 * 0.020])
    assert lab["load"] == [0.5, 0.7] * 3
    (q,) = bench.ratios(list(rows.values()))
    assert q["faster_peer"] == "dgl" and q["faster_peer_over_lab"] == pytest.approx(0.05 / 0.014)
    assert q["pyg_over_lab"] == pytest.approx(5.0) and q["met"] is False
    assert q["fp32_over_bf16"] == pytest.approx(2.0)


def test_clear_errors(bench, capsys):
    with pytest.raises(SystemExit, match="--batch-sizes: an epoch at batch 4096 has 2 steps on synth-tiny"):
        bench.main(["--dataset", "synth-tiny", "--batch-sizes", "4096", "--peers", "none"])
    with pytest.raises(SystemExit, match="--precision: got 'fp8'"):
        bench.main(["--dataset", "synth-tiny", "--precision", "fp8"])
    with pytest.raises(SystemExit, match="--batch-sizes: comma-separated positive integers"):
        bench.main(["--dataset", "synth-tiny", "--batch-sizes", "0"])


def test_json_run_measures_every_engine(bench, capsys):
    pytest.importorskip("torch_geometric")
    bench.main(["--dataset", "synth-tiny", "--batch-sizes", "512", "--precision", "fp32,bf16", "--peers", "pyg",
                "--steps", "2", "--warmup", "1", "--rounds", "2", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["measured"] and {(r["engine"], r["precision"]) for r in out["rows"]} == {
        ("lab", "fp32"), ("lab", "bf16"), ("pyg", "fp32")}
    for r in out["rows"]:
        assert len(r["round_step_s"]) == 2 and r["step_s"] > 0 and r["steps_per_epoch"] == -(-out["n_train"] // 512)
    assert out["ratios"][0]["faster_peer"] == "pyg"
