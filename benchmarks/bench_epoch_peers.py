"""LightGCN training epoch: gnnrec-lab (fp32 and bf16 rows) vs PyG and DGL, side by side in one run.

Every engine trains the same LightGCN (3 layers, embedding 64, N(0, 0.1) init, BPR + L2 1e-4,
Adam lr 1e-3) on the same dataset and split, on the same seeded BPR batches and negatives
(``gnnrec_lab.graph.sampling.bpr_batches``), at each batch size of ``--batch-sizes``: every
batch size is offered to every engine. A step is timed from drawing its batch to the end of the
optimizer step; the epoch time is ``ceil(train interactions / batch) x`` the median step
(``--steps`` timed steps after ``--warmup``), so a Gowalla epoch at batch 2048 (352 steps) is
not trained whole. ``--rounds`` repeats every engine in alternating order (the load of a shared
VM drifts); each cell is the median of its rounds' medians with their range, and the 1-minute
load average at its start and end.

The peers in their fastest CPU configuration on this machine:

- **PyG**: ``torch_geometric.nn.models.LightGCN`` with ``normalize=False`` on a pre-normalised
  ``torch.sparse_csr`` adjacency (``torch.sparse.mm``), not its default edge-index scatter path;
  torch's fused Adam, as the lab's runs use (``--pyg-adam foreach`` for torch's default).
- **DGL** (DGL lane, ``make dgl``, run as a subprocess of ``.venv-dgl``): each layer is
  ``norm * dgl.ops.copy_u_sum(g, norm * h)``, the symmetric normalisation folded into the rows
  (DGL's fast unweighted kernel; per-edge weights through ``u_mul_e_sum`` are its slow path),
  and torch 2.2.1's Adam (its fused Adam is CUDA-only), the BPR loss as PyG computes it.
- **gnnrec-lab**: ``gnnrec-lab run``'s own step (``profiling.step_overhead``), native kernels,
  ``--precision`` fp32 and bf16.

Usage: python benchmarks/bench_epoch_peers.py [--dataset gowalla] [--batch-sizes 2048,65536]
           [--precision fp32,bf16] [--peers pyg,dgl] [--steps 8] [--warmup 2] [--rounds 3] [--json]
"""
from __future__ import annotations

# first, before torch: gnnrec_lab.util.runtime sets OMP_WAIT_POLICY=PASSIVE (see bench_vs_pyg.py)
import gnnrec_lab  # noqa: F401

# isort: split
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np
import torch

from gnnrec_lab import RunConfig
from gnnrec_lab.data import load
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.graph.sampling import bpr_batches

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # bench_vs_pyg, imported by file or as a script
TARGET = 4.0  # the lab's epoch at least this many times faster than the faster peer's (issue 34)
ROOT = pathlib.Path(__file__).resolve().parents[1]


warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


def config(dataset: str, batch_size: int, precision: str = "fp32") -> RunConfig:
    return RunConfig(dataset=dataset, model="lightgcn", layers=3, dim=64, lr=1e-3, l2=1e-4,
                     batch_size=batch_size, precision=precision)


def timed_steps(step, g: BipartiteGraph, cfg: RunConfig, steps: int, warmup: int) -> list[float]:
    """Seconds of ``steps`` calls of ``step(users, pos, neg)`` after ``warmup``, each from drawing
    its batch (the seeded sampler every engine shares) to the end of its optimizer step; all in
    one epoch (the lab's window is one epoch too)."""
    rng = np.random.default_rng(cfg.seed)
    batches = bpr_batches(g, cfg.batch_size, rng)
    out = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        step(*next(batches))
        if i >= warmup:
            out.append(time.perf_counter() - t0)
    return out


def dgl_lightgcn(g: BipartiteGraph, cfg: RunConfig):
    """LightGCN in DGL's idiom and ``step(users, pos, neg)``; returns ``(forward, step)`` where
    ``forward()`` is the layer mean of every node (for the agreement test)."""
    import dgl
    torch.manual_seed(cfg.seed)
    a = g.adj
    indptr = torch.from_numpy(a.indptr.astype(np.int64))
    indices = torch.from_numpy(a.indices.astype(np.int64))
    graph = dgl.graph(("csr", (indptr, indices, torch.arange(len(indices)))), num_nodes=g.n_nodes)
    graph.create_formats_()  # CSC for the forward product, CSR for its backward: built once, not timed
    deg = torch.from_numpy(np.diff(a.indptr).astype(np.float32))
    norm = torch.where(deg > 0, deg.clamp(min=1).pow(-0.5), torch.zeros_like(deg))[:, None]
    emb = torch.nn.Parameter(torch.empty(g.n_nodes, cfg.dim).normal_(std=0.1))
    opt = torch.optim.Adam([emb], lr=cfg.lr)

    def forward():
        h, acc = emb, emb
        for _ in range(cfg.layers):
            h = dgl.ops.copy_u_sum(graph, h * norm) * norm
            acc = acc + h
        return acc / (cfg.layers + 1)

    def step(u, p, n):
        u, p, n = (torch.from_numpy(x) for x in (u, p, n))
        p, n = p + g.n_users, n + g.n_users
        out = forward()
        pos = (out[u] * out[p]).sum(-1)
        neg = (out[u] * out[n]).sum(-1)
        ids = torch.cat([u, p, n])
        loss = -torch.nn.functional.logsigmoid(pos - neg).mean() + cfg.l2 * emb[ids].norm(p=2).pow(2) / u.numel()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return emb, forward, step


def engine_cell(engine: str, ds, g: BipartiteGraph, cfg: RunConfig, steps: int, warmup: int,
                pyg_adam: str = "fused") -> dict:
    """One engine's timed steps at ``cfg``: ``{"engine", "config", "step_s", "load"}``."""
    load0 = os.getloadavg()[0]
    if engine == "lab":
        from gnnrec_lab.training import profiling as P
        step_s = P.step_overhead(cfg, steps=steps, warmup=warmup, dataset=ds)["step_s"]
        what = f"gnnrec-lab LightGCN, native kernels, {cfg.precision} rows"
    elif engine == "pyg":
        from bench_vs_pyg import pyg_lightgcn
        _, _, step = pyg_lightgcn(g, cfg, "normal", fused_adam=pyg_adam == "fused")
        step_s = timed_steps(step, g, cfg, steps, warmup)
        what = f"PyG LightGCN (sparse CSR, torch.sparse.mm), {pyg_adam} Adam"
    elif engine == "dgl":
        _, _, step = dgl_lightgcn(g, cfg)
        step_s = timed_steps(step, g, cfg, steps, warmup)
        what = "DGL LightGCN (norm * copy_u_sum(g, norm * h)), torch's default Adam"
    else:
        raise SystemExit(f"--engine: got {engine!r}, allowed: lab, pyg, dgl")
    return {"engine": engine, "impl": what, "batch_size": cfg.batch_size, "precision": cfg.precision,
            "step_s": step_s, "load": [load0, os.getloadavg()[0]], "torch": torch.__version__}


def dgl_cell(dataset: str, batch_size: int, steps: int, warmup: int) -> dict:
    """:func:`engine_cell` for DGL, in the DGL lane's interpreter (DGL needs torch <= 2.2.1)."""
    from gnnrec_lab.distributed.lane import dgl_lane_python
    py = dgl_lane_python()
    if py is None:
        raise SystemExit("--peers dgl: the DGL lane is not built; run `make dgl` (or drop dgl from --peers)")
    cmd = [str(py), str(pathlib.Path(__file__).resolve()), "--engine", "dgl", "--dataset", dataset,
           "--batch-sizes", str(batch_size), "--steps", str(steps), "--warmup", str(warmup)]
    env = {**os.environ, "DGLBACKEND": "pytorch"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"the DGL lane's run failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def summarise(cells: list[dict], n_train: int) -> list[dict]:
    """Cells of the same engine, precision and batch size pooled over rounds: the median of the
    round medians and their range, per step and per epoch (``ceil(n_train / batch)`` steps)."""
    rows: dict = {}
    for c in cells:
        key = (c["engine"], c["precision"], c["batch_size"])
        r = rows.setdefault(key, {k: c[k] for k in ("engine", "impl", "precision", "batch_size", "torch")}
                            | {"round_step_s": [], "load": []})
        r["round_step_s"].append(statistics.median(c["step_s"]))
        r["load"] += c["load"]
    out = []
    for r in rows.values():
        per_epoch = -(-n_train // r["batch_size"])
        med = statistics.median(r["round_step_s"])
        out.append(r | {"steps_per_epoch": per_epoch, "step_s": med, "epoch_s": per_epoch * med,
                        "epoch_range_s": [per_epoch * min(r["round_step_s"]), per_epoch * max(r["round_step_s"])]})
    return out


def ratios(rows: list[dict]) -> list[dict]:
    """Per batch size: each peer's epoch over the lab's fp32 epoch, the faster peer's against the
    target, and the lab's fp32 epoch over its bf16 epoch."""
    out = []
    for b in sorted({r["batch_size"] for r in rows}):
        at = {(r["engine"], r["precision"]): r["epoch_s"] for r in rows if r["batch_size"] == b}
        lab = at.get(("lab", "fp32"))
        peers = {e: s for (e, p), s in at.items() if e != "lab"}
        row = {"batch_size": b}
        if lab and peers:
            row.update({f"{e}_over_lab": s / lab for e, s in peers.items()})
            fastest = min(peers, key=peers.get)
            row.update(faster_peer=fastest, faster_peer_over_lab=peers[fastest] / lab,
                       met=peers[fastest] / lab >= TARGET)
        if lab and ("lab", "bf16") in at:
            row["fp32_over_bf16"] = lab / at[("lab", "bf16")]
        out.append(row)
    return out


def _ints(text: str, name: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{name}: comma-separated positive integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"{name}: comma-separated positive integers, got {text!r}")
    return vals


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="gowalla")
    ap.add_argument("--batch-sizes", default="2048,65536")
    ap.add_argument("--precision", default="fp32,bf16", help="the lab's row storage: fp32, bf16 or both")
    ap.add_argument("--peers", default="pyg,dgl", help="pyg, dgl, both or none")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pyg-adam", default="fused", choices=("fused", "foreach"))
    ap.add_argument("--engine", help=argparse.SUPPRESS)  # one engine's cell as JSON (the DGL lane's subprocess)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    batch_sizes = _ints(a.batch_sizes, "--batch-sizes")
    if min(a.steps, a.rounds) < 1 or a.warmup < 0:
        raise SystemExit("--steps and --rounds: at least 1; --warmup: at least 0")
    precisions = [p for p in a.precision.split(",") if p]
    peers = [p for p in a.peers.split(",") if p and p != "none"]
    for p in precisions:
        if p not in ("fp32", "bf16"):
            raise SystemExit(f"--precision: got {p!r}, allowed: fp32, bf16")
    for p in peers:
        if p not in ("pyg", "dgl"):
            raise SystemExit(f"--peers: got {p!r}, allowed: pyg, dgl (or none)")
    ds = load(a.dataset)
    g = BipartiteGraph(ds.train, ds.n_users, ds.n_items)
    for b in batch_sizes:
        if -(-len(ds.train) // b) < a.warmup + a.steps:
            raise SystemExit(f"--batch-sizes: an epoch at batch {b} has {-(-len(ds.train) // b)} steps on {a.dataset}, "
                             f"fewer than --warmup {a.warmup} + --steps {a.steps} (all timed steps lie in one epoch)")
    if a.engine:
        print(json.dumps(engine_cell(a.engine, ds, g, config(a.dataset, batch_sizes[0]), a.steps, a.warmup)))
        return
    engines = [("lab", p) for p in precisions] + [(p, "fp32") for p in peers]
    cells = []
    for rnd in range(a.rounds):
        for b in batch_sizes:
            for engine, prec in (engines if rnd % 2 == 0 else engines[::-1]):
                if engine == "dgl":
                    c = dgl_cell(a.dataset, b, a.steps, a.warmup)
                else:
                    c = engine_cell(engine, ds, g, config(a.dataset, b, prec), a.steps, a.warmup, a.pyg_adam)
                cells.append(c)
                if not a.json:
                    ms = statistics.median(c["step_s"]) * 1e3
                    print(f"  round {rnd + 1}, batch {b}, {engine} {prec}: step {ms:.1f} ms "
                          f"(load {c['load'][0]:.1f}-{c['load'][1]:.1f})", file=sys.stderr, flush=True)
    from gnnrec_lab.training.benchmarking import runtime_summary
    from gnnrec_lab.util.proc import host_info
    rows = summarise(cells, len(ds.train))
    result = {"dataset": a.dataset, "n_train": len(ds.train), "machine": host_info(), "runtime": runtime_summary(),
              "steps": a.steps, "warmup": a.warmup, "rounds": a.rounds, "rows": rows, "ratios": ratios(rows),
              "measured": True}
    if a.json:
        print(json.dumps(result))
        return
    print(f"LightGCN 3 layers, d64 on {a.dataset} ({len(ds.train):,} train interactions); {result['runtime']}; "
          f"{a.steps} timed steps after {a.warmup} warm-up, {a.rounds} rounds; all numbers measured")
    print(f"{'engine':88s} {'batch':>6s} {'steps':>5s} {'step ms':>8s} {'epoch s (median, range)':>26s} {'load':>9s}")
    for r in rows:
        lo, hi = r["epoch_range_s"]
        print(f"{r['impl'] + ' [torch ' + r['torch'] + ']':88s} {r['batch_size']:6d} {r['steps_per_epoch']:5d} "
              f"{r['step_s'] * 1e3:8.1f} {r['epoch_s']:10.2f} ({lo:.2f}-{hi:.2f}) "
              f"{min(r['load']):4.1f}-{max(r['load']):.1f}")
    for q in result["ratios"]:
        parts = []
        parts += [f"{k.split('_')[0]} / lab fp32 {v:.2f}x" for k, v in q.items() if k.endswith("_over_lab")
                  and not k.startswith("faster")]
        if "faster_peer" in q:
            parts.append(f"faster peer ({q['faster_peer']}) {q['faster_peer_over_lab']:.2f}x: target >= {TARGET:g}x "
                         f"{'met' if q['met'] else 'NOT met'}")
        if "fp32_over_bf16" in q:
            parts.append(f"lab bf16 {q['fp32_over_bf16']:.2f}x its fp32")
        print(f"  batch {q['batch_size']}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
