"""The ``dgl`` kernel backend (DGL lane, ``make test-dgl``): DGL's fast path is the one taken, it
agrees with the native kernels and gradchecks, and a short training run on it matches native.

Skipped where ``import dgl`` fails (the main lane: DGL 2.1 needs torch <= 2.2.1)."""
import numpy as np
import pytest
import torch

from gnnrec_lab import kernels

if "dgl" not in kernels.available_backends():
    pytest.skip("dgl is not importable here (the DGL lane: make dgl && make test-dgl)", allow_module_level=True)

import dgl  # noqa: E402

from gnnrec_lab import RunConfig, run  # noqa: E402
from gnnrec_lab.graph.bipartite import CSR, BipartiteGraph  # noqa: E402


def _graph(n_users=40, n_items=30, n=300, seed=0):
    rng = np.random.default_rng(seed)
    tr = np.unique(np.stack([rng.integers(0, n_users, n), rng.integers(0, n_items, n)], 1), axis=0)
    return BipartiteGraph(tr, n_users, n_items)


def _calls(monkeypatch):
    seen = []
    for name in ("copy_u_sum", "u_mul_e_sum"):
        orig = getattr(dgl.ops, name)

        def spy(*a, _orig=orig, _name=name, **k):
            seen.append(_name)
            return _orig(*a, **k)
        monkeypatch.setattr(dgl.ops, name, spy)
    return seen


def test_normalised_spmm_takes_dgls_copy_u_sum_fast_path(monkeypatch):
    """The symmetric normalisation is folded into the rows: no (nnz, 1) edge weights (DGL's slow path)."""
    adj = _graph().adj
    seen = _calls(monkeypatch)
    x = torch.randn(adj.n_cols, 8, dtype=torch.float64, requires_grad=True)
    with kernels.use_backend("dgl"):
        y = kernels.spmm(adj, x)
        y.backward(torch.ones_like(y))
        h = kernels.layer_mean([adj] * 2, x, 1 / 3)
        h.sum().backward()
    assert seen and set(seen) == {"copy_u_sum"}
    with kernels.use_backend("native"):
        xn = x.detach().clone().requires_grad_(True)
        yn = kernels.spmm(adj, xn)
        yn.backward(torch.ones_like(yn))
    torch.testing.assert_close(y, yn)


def test_per_edge_values_fall_back_to_u_mul_e_and_stay_right(monkeypatch):
    rng = np.random.default_rng(2)
    dense = rng.random((7, 5)) < 0.5
    indptr = np.concatenate([[0], np.cumsum(dense.sum(1))]).astype(np.int64)
    adj = CSR(indptr, np.nonzero(dense)[1].astype(np.int32), 7, 5, values=rng.random(dense.sum()).astype(np.float32),
              row_scale=rng.random(7).astype(np.float32), col_scale=rng.random(5).astype(np.float32))
    seen = _calls(monkeypatch)
    x = torch.randn(5, 3, dtype=torch.float64)
    with kernels.use_backend("dgl"):
        y = kernels.spmm(adj, x)
    assert seen == ["u_mul_e_sum"]
    torch.testing.assert_close(y, torch.from_numpy(adj.to_scipy().toarray()).double() @ x)


@pytest.mark.parametrize("layers", [1, 3])
def test_dgl_layer_mean_and_sddmm_gradcheck(layers):
    adj = _graph(6, 5, 20).adj
    g = torch.Generator().manual_seed(1)
    x = torch.randn(adj.n_cols, 3, dtype=torch.float64, generator=g, requires_grad=True)
    u = torch.randn(adj.n_rows, 3, dtype=torch.float64, generator=g, requires_grad=True)
    with kernels.use_backend("dgl"):
        assert torch.autograd.gradcheck(lambda a: kernels.layer_mean([adj] * layers, a, 1 / (layers + 1)), (x,))
        assert torch.autograd.gradcheck(lambda a, b: kernels.sddmm(adj, a, b, op="dot"), (u, x))


def test_dgl_agrees_with_native_on_a_power_law_graph():
    from gnnrec_lab.training.benchmarking import power_law_graph
    adj = power_law_graph(3000, 2000, 20000, seed=4).adj
    x = torch.randn(adj.n_cols, 32)
    u = torch.randn(adj.n_rows, 32)
    out = {}
    for b in ("native", "dgl"):
        with kernels.use_backend(b):
            out[b] = (kernels.spmm(adj, x), kernels.sddmm(adj, u, x, op="dot"))
    for a, b in zip(out["native"], out["dgl"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_short_training_on_dgl_matches_native(monkeypatch):
    cfg = dict(dataset="synth-tiny", dim=16, layers=2, batch_size=512, epochs=2, lr=5e-3, patience=0)
    a = run(RunConfig(**cfg))
    seen = _calls(monkeypatch)
    with kernels.use_backend("native"):  # train() selects the run's backend; restored afterwards
        b = run(RunConfig(**cfg | {"backend": "dgl"}))
    assert b.status == "finished" and b.epochs == 2 and "copy_u_sum" in seen
    for key in ("recall@20", "ndcg@20"):
        np.testing.assert_allclose(b.best_valid[key], a.best_valid[key], rtol=0.02, atol=2e-3)
        np.testing.assert_allclose(b.test[key], a.test[key], rtol=0.02, atol=2e-3)


def test_kernel_bench_shows_dgls_own_copy_u_sum_beside_the_backend():
    from gnnrec_lab.training import benchmarking as bench
    res = bench.run_kernel_bench(sizes=("small",), dims=(8,), backends=["native", "dgl"], kernels=("spmm",),
                                 repeats=1, include_pyg=False, host={"triad_GBps": 10.0})
    got = {(r.backend, r.phase) for r in res}
    assert {("native", "forward"), ("dgl", "forward"), ("dgl", "backward"), ("dgl-raw", "forward")} <= got
    assert any("DGL's own copy_u_sum" in line for line in bench.summary(res))
    assert "copy_u_sum" in bench.dgl_note()
