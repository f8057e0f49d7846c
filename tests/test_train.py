"""End-to-end training on tiny data: learning happens, runs are deterministic,
phases are all recorded, bad input is refused before work starts."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from gnnrec_lab import RunConfig, run
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.models import NGCF
from gnnrec_lab.util.errors import ConfigError, UserError

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
    assert {"spmm", "bpr_loss", "l2_reg", "adam", "bpr_sample"} <= names
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


def _recbole_ngcf(model, pairs, n_users, n_items):
    """Dense NGCF as the paper's eq. 7 / RecBole 1.2.1's BiGNNLayer write it:
    ``(L + I) E W1 + b1 + (L E) * E W2 + b2``, LeakyReLU 0.2, L2-normalise, concat."""
    n = n_users + n_items
    a = torch.zeros(n, n)
    a[pairs[:, 0], n_users + pairs[:, 1]] = 1.0
    a = a + a.T
    d = a.sum(1).pow(-0.5)
    d[torch.isinf(d)] = 0
    lap = d[:, None] * a * d[None, :]
    x, outs = model.embedding.detach(), [model.embedding.detach()]
    for k in range(model.layers):
        lx = lap @ x
        h = (lx + x) @ model.W1[k] + model.b1[k] + (lx * x) @ model.W2[k] + model.b2[k]
        x = torch.nn.functional.normalize(torch.nn.functional.leaky_relu(h, 0.2), p=2, dim=1)
        outs.append(x)
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("form", ["edge", "node"])
def test_ngcf_matches_the_paper_and_recbole_layer(form):
    # the bi-interaction term is (L E) * E: no e_i * e_i self-loop term (the lab had one until 2026-12-01)
    rng = np.random.default_rng(1)
    pairs = np.unique(np.stack([rng.integers(0, 12, 60), rng.integers(0, 17, 60)], 1), axis=0)
    g = BipartiteGraph(pairs, 12, 17)
    torch.manual_seed(1)
    m = NGCF(12, 17, dim=8, layers=3, form=form)
    with torch.no_grad():  # non-zero biases so that they are checked too
        for b in list(m.b1) + list(m.b2):
            b.normal_(0, 0.1)
    want = _recbole_ngcf(m, torch.as_tensor(pairs), 12, 17)
    assert torch.allclose(m.propagate(g.adj).detach(), want, atol=1e-5)


def test_ngcf_initialises_like_recbole():
    # RecBole 1.2.1 applies xavier_normal_ to the user and the item table separately
    torch.manual_seed(0)
    m = NGCF(3000, 500, dim=16, layers=1)
    users, items = m.embedding[:3000].detach(), m.embedding[3000:].detach()
    assert abs(users.std().item() / (2 / (3000 + 16)) ** 0.5 - 1) < 0.03
    assert abs(items.std().item() / (2 / (500 + 16)) ** 0.5 - 1) < 0.03
    assert abs(m.W1[0].detach().std().item() / (2 / 32) ** 0.5 - 1) < 0.15
    assert NGCF(30, 50, dim=16, layers=1, init_std=0.1).embedding.detach().std().item() > 0.08


def test_batch_larger_than_train_set_is_refused():
    with pytest.raises(ConfigError) as e:
        run(RunConfig(**TINY | {"batch_size": 10**7}))
    assert e.value.param == "batch_size" and "training interactions" in str(e.value)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


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


@pytest.mark.slow
def test_cli_json_run():
    p = _cli("run", "--dataset", "synth-tiny", "--layers", "1", "--dim", "8", "--epochs", "1",
             "--batch-size", "1024", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["config"]["layers"] == 1 and out["kind"]["kernels"] == "measured"
    assert out["kind"]["footprint"] == {"predicted": "modeled", "measured": "measured"}
    assert out["footprint"]["kind"] == out["kind"]["footprint"] and out["footprint"]["measured"]["peak_rss"] > 0
    assert out["test"]["recall@20"] >= 0 and out["kernels"]


@pytest.mark.slow
def test_cli_run_off_a_terminal_prints_the_test_metrics_once_and_few_bar_fragments(tmp_path):
    """stderr to a pipe (a log file, CI): the bar redraws at most every few seconds, not once a
    step (each redraw there is a carriage-return fragment in the log), and the test metrics are
    printed once (the summary), not by the progress lines too."""
    import os
    p = _cli("run", "--dataset", "synth-tiny", "--layers", "1", "--dim", "8", "--epochs", "2",
             "--batch-size", "64", "--patience", "0", env=dict(os.environ, GNNREC_LAB_HOME=str(tmp_path)))
    assert p.returncode == 0, p.stderr
    steps = int(re.search(r"(\d+) steps/epoch", p.stderr).group(1))
    assert steps >= 50                              # a bar per step would leave >= 100 fragments
    fragments = len(re.findall(r"epoch \d+:\s+\d+%", p.stderr))   # each drawing of the bar
    assert fragments <= 2 * 4, (fragments, p.stderr[-400:])   # 2 epochs: open, close, a redraw per 5 s
    lines = (p.stdout + p.stderr).splitlines()
    metric_lines = [ln for ln in lines if "ndcg@" in ln]
    assert len([ln for ln in metric_lines if "  valid recall" not in ln]) == 1, metric_lines   # one test line
    assert "test metrics (best valid epoch" in p.stdout


def test_progress_bar_redraws_per_interval_off_a_terminal_and_per_step_on_one(monkeypatch):
    import io

    from gnnrec_lab.training import reporting

    class Tty(io.StringIO):
        def isatty(self):
            return True

    class Cfg:
        model, layers, dim, batch_size, dataset, backend = "lightgcn", 1, 8, 64, "x", "numba"

    info = {"steps_per_epoch": 300, "dataset": {"n_users": 1, "n_items": 1, "n_train": 1}}
    counts = {}
    for name, stream in (("pipe", io.StringIO()), ("tty", Tty())):
        monkeypatch.setattr(reporting.sys, "stderr", stream)
        rep = reporting.ProgressReporter()
        rep.on_start(Cfg, info)
        for i in range(300):
            rep.on_step(i, 0, 0.5, 0.001, [])
            if name == "tty":
                rep.bar.last_print_t -= 1.0    # as if each step took a second
        rep.on_epoch(0, 1.0, 300, 0.5)
        counts[name] = len(re.findall(r"epoch 0:\s+\d+%", stream.getvalue()))
    assert reporting.bar_interval(io.StringIO()) == reporting.NON_TTY_INTERVAL_S
    assert reporting.bar_interval(Tty()) < 1
    assert counts["pipe"] <= 3 and counts["tty"] >= 250, counts


def test_non_finite_loss_ends_the_run_as_diverged():
    """A finite but huge lr sends the loss to nan: the run says diverged, with no test metrics."""
    r = run(RunConfig(**TINY | {"lr": 1e308, "epochs": 3}))
    assert r.status == "diverged" and r.epochs == 1 and r.test == {}
    assert "lr" in r.info["diverged"] and "diverged" in r.info["diverged"]


def test_cli_runs_are_stored_and_a_diverged_run_exits_non_zero(tmp_path, monkeypatch, capsys):
    """`gnnrec-lab run` in a terminal records its run (Compare sees it); nan ends it as diverged."""
    from gnnrec_lab.commands import cli
    from gnnrec_lab.runs.store import Store
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    tiny = ["run", "--dataset", "synth-tiny", "--layers", "1", "--dim", "8", "--epochs", "2",
            "--batch-size", "1024", "--max-steps-per-epoch", "2", "--no-progress"]
    assert cli.main(tiny) == 0
    ok = capsys.readouterr()
    assert cli.main(tiny + ["--lr", "1e308"]) == 4
    bad = capsys.readouterr()
    assert "diverged" in bad.err and "--lr" in bad.err and "Traceback" not in bad.err
    assert cli.main(tiny + ["--no-store"]) == 0
    store = Store(tmp_path)
    runs = store.runs_frame()
    assert list(runs.status) == ["finished", "diverged"]
    done, nan = (store.get_run(int(i)) for i in runs.id)
    assert f"stored as run {done['id']}" in ok.out
    assert done["result"]["test"]["recall@20"] >= 0 and len(store.steps_frame(done["id"])) == 4
    assert "diverged" in nan["error"] and nan["result"]["test"] == {}
    capsys.readouterr()
    assert cli.main(["runs", "show", str(done["id"])]) == 0
    assert "kernel JIT" in capsys.readouterr().out


def test_warmup_fills_numbas_disk_cache_and_a_cold_start_says_compiling(monkeypatch, capsys):
    """`gnnrec-lab warmup` (make install runs it) leaves no training kernel to compile; a run that
    finds one uncached says 'compiling kernels' before its long silent warm-up."""
    import pathlib

    from gnnrec_lab import kernels
    from gnnrec_lab.commands import cli
    from gnnrec_lab.training.reporting import Reporter
    assert cli.main(["warmup", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert kernels.uncached_kernels() == []
    assert any(pathlib.Path(out["cache_dir"]).glob("native.spmm-*.nbi"))

    class Events(Reporter):
        def __init__(self):
            self.seen = []

        def on_start(self, config, info):
            self.seen.append("start")

        def on_event(self, kind, message):
            self.seen.append(kind)
    warm = Events()
    run(RunConfig(**TINY | {"epochs": 1, "max_steps_per_epoch": 1}), reporter=warm)
    assert "compiling" not in warm.seen
    monkeypatch.setattr(kernels, "uncached_kernels", lambda: ["spmm"])
    cold = Events()
    run(RunConfig(**TINY | {"epochs": 1, "max_steps_per_epoch": 1}), reporter=cold)
    assert cold.seen.index("compiling") < cold.seen.index("start") < cold.seen.index("jit")


def test_sampled_mode_trains_deterministically_and_reports_redundancy():
    cfg = RunConfig(**TINY | {"mode": "sampled", "fanouts": (5, 5), "epochs": 2})
    a, b = run(cfg), run(cfg)
    assert a.test == b.test
    s = a.info["sampled"]
    assert len(s["redundancy_per_epoch"]) == 2 and all(r > 1 for r in s["redundancy_per_epoch"])
    assert len(s["mean_nodes_per_layer"]) == 3 and s["mean_nodes_per_layer"][0] < s["mean_nodes_per_layer"][-1]
    names = {k["name"] for k in a.kernels}
    assert {"sparse_adam", "sample_subgraph", "spmm"} <= names
    ngcf = run(cfg.replace(model="ngcf", ngcf_form="edge", epochs=1))
    assert np.isfinite(ngcf.test["recall@20"])


def test_sparse_row_adam_matches_torch_sparse_adam():
    from gnnrec_lab.models.optim import SparseRowAdam
    torch.manual_seed(0)
    w = torch.randn(10, 4)
    ref = torch.nn.Parameter(w.clone())
    torch_opt = torch.optim.SparseAdam([ref], lr=0.01)
    mine = SparseRowAdam(w.clone(), lr=0.01)
    for step in range(3):
        rows = torch.tensor([1, 4, 7]) if step % 2 == 0 else torch.tensor([0, 4])
        g = torch.randn(len(rows), 4)
        ref.grad = torch.sparse_coo_tensor(rows[None], g, (10, 4), check_invariants=False)
        torch_opt.step()
        mine.step(rows, g)
    assert torch.allclose(mine.table, ref.detach(), atol=1e-6)
    assert torch.equal(mine.table[2], w[2])  # untouched row unchanged


def test_file_backed_embeddings_match_dram(tmp_path):
    base = RunConfig(**TINY | {"epochs": 1, "max_steps_per_epoch": 3})
    a = run(base)
    b = run(base.replace(placement={"embeddings": f"file:{tmp_path}", "optimizer": f"file:{tmp_path}",
                                    "graph": f"file:{tmp_path}"}))
    assert a.test == b.test and a.best_valid == b.best_valid


def test_run_in_a_modeled_memory_mode_carries_a_labelled_projection(tmp_path, monkeypatch):
    # a fixed host calibration keeps the test deterministic; the projection takes device / platform
    # DRAM ratios, so a slower tier is never modeled faster on any host (tests/test_modeled_step.py)
    from gnnrec_lab.kernels import native as nk
    from gnnrec_lab.memory import calibrate
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    calibrate.save(dict(copy_GBps=30.0, triad_GBps=28.0, gather64_GBps=12.0, gather256_GBps=20.0, latency_ns=90.0,
                        gemm_GFLOPs=150.0, threads=nk.threads(), cpu=calibrate.cpu_model(), measured_at="fixed",
                        kind="host", measured=True))
    assert calibrate.load() is not None
    r = run(RunConfig(**TINY | {"epochs": 1, "max_steps_per_epoch": 2, "memory_mode": "cxl"}))
    m = r.to_dict()["modeled"]
    assert m["kind"] == "modeled" and m["device"] == "cxl_type3_ddr5_x8"
    assert m["modeled_s_per_step"] >= m["measured_s_per_step"] > 0  # a slower tier never predicts faster
    assert all(k["kind"] == "modeled" for k in m["kernels"])
    assert run(RunConfig(**TINY | {"epochs": 1, "max_steps_per_epoch": 1})).modeled == {}  # DRAM: measured only


def test_adam_is_torchs_fused_adam_and_follows_torchs_default_adam():
    """A run's adam is torch.optim.Adam(fused=True) (benchmarks/bench_optimizer.py: as fast as the
    one-pass native Adam it replaced); same updates as torch's default Adam."""
    from gnnrec_lab.models.optim import build_optimizer, fused_cpu_adam
    torch.manual_seed(0)
    w = torch.randn(300, 7)
    a, b = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    ref = torch.optim.Adam([a], lr=1e-2)
    opt = build_optimizer(RunConfig(dataset="synth-tiny", lr=1e-2), [b])
    assert isinstance(opt, torch.optim.Adam) and bool(opt.defaults["fused"]) == fused_cpu_adam()
    for step in range(20):
        g = torch.randn(300, 7) * (step + 1)
        a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        opt.step()
    assert torch.allclose(a, b, atol=1e-6, rtol=1e-5) and not torch.equal(a, w)
    assert torch.allclose(ref.state[a]["exp_avg_sq"], opt.state[b]["exp_avg_sq"], rtol=1e-5)
    assert float(opt.state[b]["step"]) == 20


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_each_optimizer_step_is_one_record_taken_by_torchs_step_hooks(optimizer):
    from gnnrec_lab.models.optim import build_optimizer
    from gnnrec_lab.training.loop import _record_steps
    from gnnrec_lab.util.recorder import Recorder, use_recorder
    cfg = RunConfig(dataset="synth-tiny", optimizer=optimizer)
    p = torch.nn.Parameter(torch.ones(10, 4))
    opt = build_optimizer(cfg, [p])
    _record_steps(opt, cfg)
    rec = Recorder()
    rec.phase = "optimizer"
    with use_recorder(rec):
        for _ in range(2):
            p.grad = torch.ones(10, 4)
            opt.step()
    assert [r.name for r in rec.records] == [optimizer] * 2
    s = 2 if optimizer == "adam" else 1   # state tensors per parameter (sgd: momentum)
    r = rec.records[0]
    assert (r.phase, r.bytes_read, r.bytes_written, r.flops) == ("optimizer", (2 + s) * 160, (1 + s) * 160, 400)
    assert r.backend == "torch" and r.ns > 0
    opt.step()   # outside any recorder: nothing recorded, nothing raised
    assert len(rec.records) == 2


# Validation Recall@20 of LightGCN on ML-100K, epochs 1-60, with the reference protocol (defaults,
# seed 2020, --patience 0; commit 4038f52): the plateau from epoch 23 to 45 ended default runs at
# epoch 28 (patience 5) with 74% of the reference test accuracy.
ML100K_LIGHTGCN_VALID = [
    0.1543, 0.1845, 0.1874, 0.1892, 0.1891, 0.1898, 0.1918, 0.1969, 0.203, 0.2084, 0.2125, 0.2183, 0.2247,
    0.2297, 0.2352, 0.2398, 0.2462, 0.2485, 0.2511, 0.2528, 0.2541, 0.2549, 0.2551, 0.2542, 0.2534, 0.253,
    0.2522, 0.2515, 0.2528, 0.2531, 0.2525, 0.2513, 0.2513, 0.2508, 0.2518, 0.2506, 0.2492, 0.2495, 0.2498,
    0.2525, 0.2516, 0.252, 0.2527, 0.2534, 0.2552, 0.2544, 0.2562, 0.2573, 0.2587, 0.2604, 0.2602, 0.2626,
    0.2644, 0.265, 0.2662, 0.2658, 0.2679, 0.2682, 0.2686, 0.27]


def _stop_epoch(curve, patience, eval_every=1):
    from gnnrec_lab.training.loop import EarlyStopping
    es = EarlyStopping(patience)
    for epoch in range(eval_every, len(curve) + 1, eval_every):
        es.update(epoch, curve[epoch - 1])
        if es.should_stop(epoch):
            return epoch, es.best_epoch
    return None, es.best_epoch


def test_early_stopping_counts_epochs_since_the_best():
    assert _stop_epoch(ML100K_LIGHTGCN_VALID, 5) == (28, 23)          # the old default: stuck on the plateau
    assert _stop_epoch(ML100K_LIGHTGCN_VALID, RunConfig().patience) == (None, 60)   # the default crosses it
    assert _stop_epoch([0.1, 0.2, 0.2, 0.2, 0.2], 3) == (5, 2)       # a tie is not an improvement
    assert _stop_epoch([0.1, 0.2] + [0.1] * 20, 0) == (None, 2)      # 0: never
    # every 5th epoch evaluated: patience 10 means 10 epochs (2 evaluations), not 10 evaluations
    assert _stop_epoch([0.1] * 4 + [0.3] + [0.2] * 30, 10, eval_every=5) == (15, 5)


def test_training_in_locality_order_matches_the_unreordered_run(monkeypatch):
    """A dataset carrying a node order trains through the reordered propagation (permute records)
    to the same validation history and test metrics as without it, up to float summation order."""
    import dataclasses

    from gnnrec_lab import kernels
    from gnnrec_lab.data import load
    from gnnrec_lab.graph.bipartite import locality_order
    ds = load("synth-tiny")
    order = locality_order(BipartiteGraph(ds.train, ds.n_users, ds.n_items).adj, "community")
    cfg = RunConfig(**TINY | {"epochs": 2})
    a = run(cfg, dataset=ds)
    monkeypatch.setattr(kernels.fused, "LOCALITY_MIN_BYTES", 0)
    b = run(cfg, dataset=dataclasses.replace(ds, node_order=order))
    assert "permute" in {k["name"] for k in b.kernels} and "permute" not in {k["name"] for k in a.kernels}
    assert len(a.history) == len(b.history) > 0
    for ha, hb in zip(a.history, b.history):
        metrics = {k: v for k, v in ha.items() if k not in ("epoch", "step", "elapsed_s")}
        assert metrics and ha["step"] == hb["step"]
        for k, v in metrics.items():
            assert hb[k] == pytest.approx(v, rel=1e-4, abs=1e-4), k
    for part in ("best_valid", "test"):
        for k, v in getattr(a, part).items():
            assert getattr(b, part)[k] == pytest.approx(v, abs=1e-3), (part, k)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_at_the_batch_rows_matches_the_whole_propagation(monkeypatch, precision):
    """A small batch (its rows under ROWS_MAX_SHARE of the nodes) propagates LightGCN's last layer
    at its rows only: the same losses, validation history and test metrics as the whole
    propagation, up to float summation order, and a cheaper last layer in the records."""
    from gnnrec_lab import kernels
    cfg = RunConfig(**TINY | {"batch_size": 64, "epochs": 2, "max_steps_per_epoch": 6, "precision": precision})
    at_rows = run(cfg)
    monkeypatch.setattr(kernels.fused, "ROWS_MAX_SHARE", 0.0)
    whole = run(cfg)

    def forward_flops(r):  # of the 2 layers, the last at the rows' entries only
        return sum(k["flops"] for k in r.kernels if k["name"] == "spmm" and k["phase"] == "forward")
    assert 0 < forward_flops(at_rows) < 0.75 * forward_flops(whole)
    assert len(at_rows.history) == len(whole.history) > 0
    for ha, hb in zip(at_rows.history, whole.history):
        for k, v in ha.items():
            assert hb[k] == pytest.approx(v, rel=1e-4, abs=1e-4) or k == "elapsed_s", k
    for k, v in whole.test.items():
        assert at_rows.test[k] == pytest.approx(v, abs=1e-3), k


def test_run_given_a_dataset_name_instead_of_a_dataset_says_what_it_expects():
    with pytest.raises(UserError, match=r"dataset: expected a gnnrec_lab.data.Dataset .*got str 'ml-100k'"):
        run(RunConfig(**TINY), dataset="ml-100k")


@pytest.mark.parametrize("model,extra", [("lightgcn", {}), ("ngcf", {"ngcf_form": "node"})])
def test_bf16_precision_trains_close_to_fp32_with_fp32_master_weights(model, extra):
    """precision bf16 (layers stored in 16 bits, float32 sums, float32 embeddings and optimizer):
    learns, repeats for a seed, and ends near the fp32 run on tiny data (test Recall@20 within 0.05
    absolute: a few dozen test users; the 1% target is measured on ML-100K, docs/accuracy.md)."""
    cfg = RunConfig(**TINY | {"model": model, "epochs": 6} | extra)
    f32 = run(cfg)
    b16 = run(cfg.replace(precision="bf16"))
    again = run(cfg.replace(precision="bf16"))
    assert b16.status == "finished" and b16.test == again.test
    assert b16.test != f32.test                  # the rows really were rounded
    assert abs(b16.test["recall@20"] - f32.test["recall@20"]) < 0.05
    assert {"narrow"} <= {k["name"] for k in b16.kernels} and "narrow" not in {k["name"] for k in f32.kernels}


def test_bf16_precision_is_refused_where_it_does_not_apply():
    with pytest.raises(ConfigError, match="precision.*native backend only"):
        RunConfig(**TINY | {"precision": "bf16", "backend": "torch"})
    with pytest.raises(ConfigError, match="precision.*propagates nothing"):
        RunConfig(**TINY | {"precision": "bf16", "model": "mf", "layers": 0})
    with pytest.raises(ConfigError, match="precision"):
        RunConfig(**TINY | {"precision": "fp16"})
