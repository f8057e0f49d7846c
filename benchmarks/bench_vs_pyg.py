"""LightGCN: gnnrec-lab vs PyTorch Geometric, same protocol, side by side in one run.

Protocol (both): embeddings initialised N(0, 0.1) as in the LightGCN paper (PyG's own
default, Xavier, with ``--pyg-init xavier|both``), the same dataset and seeded 8:1:1 split, embedding 64, 3 layers,
Adam lr 1e-3, L2 1e-4, batch 2048, the same seeded BPR batches and negatives
(gnnrec_lab.graph.sampling), validation Recall@20 every epoch with early stopping
(patience 5), test metrics at the best validation epoch, the same full-ranking
metric code. Epoch time = wall time of the training steps (evaluation excluded).

PyG runs in its fastest CPU configuration here: ``torch_geometric.nn.models.LightGCN``
with ``normalize=False`` on a pre-normalised ``torch.sparse_csr`` adjacency (its
``message_and_aggregate`` path -> ``torch.sparse.mm``), not the default
edge-index scatter path that re-normalises every layer.

Usage: python benchmarks/bench_vs_pyg.py [--dataset ml-100k] [--epochs 50] [--json]
"""
from __future__ import annotations

# first, before torch: gnnrec_lab.util.runtime sets OMP_WAIT_POLICY=PASSIVE, which OpenMP reads only when it
# loads (with torch's spinning default, numba's and torch's thread teams steal each other's cores)
import gnnrec_lab  # noqa: F401

# isort: split
import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import torch

from gnnrec_lab import RunConfig, run
from gnnrec_lab.data import load
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.graph.sampling import bpr_batches
from gnnrec_lab.training.evaluate import rank_metrics


def pyg_lightgcn(g: BipartiteGraph, cfg: RunConfig, init: str = "normal", fused_adam: bool = False):
    """PyG's LightGCN on its fastest CPU path (``normalize=False`` on the pre-normalised
    ``torch.sparse_csr`` adjacency), its Adam, and ``step(users, pos, neg)``: one BPR step
    (item ids without the user offset), the loss PyG's ``recommendation_loss`` computes."""
    from torch_geometric.nn.models import LightGCN
    torch.manual_seed(cfg.seed)
    adj = g.adj.to_torch_sparse()
    model = LightGCN(g.n_nodes, cfg.dim, cfg.layers, normalize=False)
    if init == "normal":  # the LightGCN protocol (and gnnrec-lab): N(0, 0.1); PyG's default is Xavier
        torch.nn.init.normal_(model.embedding.weight, std=0.1)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, **({"fused": True} if fused_adam else {}))

    def step(u, p, n):
        u, p, n = (torch.from_numpy(a) for a in (u, p, n))
        p, n = p + g.n_users, n + g.n_users
        emb = model.get_embedding(adj)
        pos = (emb[u] * emb[p]).sum(-1)
        neg = (emb[u] * emb[n]).sum(-1)
        loss = model.recommendation_loss(pos, neg, node_id=torch.cat([u, p, n]), lambda_reg=cfg.l2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return model, adj, step


def run_pyg(ds, cfg: RunConfig, init: str = "normal"):
    rng = np.random.default_rng(cfg.seed)
    g = BipartiteGraph(ds.train, ds.n_users, ds.n_items)
    model, adj, step = pyg_lightgcn(g, cfg, init)
    steps = -(-len(ds.train) // cfg.batch_size)
    best, best_epoch, bad, best_state, epoch_s = -1.0, 0, 0, None, []
    for epoch in range(1, cfg.epochs + 1):
        batches = bpr_batches(g, cfg.batch_size, rng)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(*next(batches))
        epoch_s.append(time.perf_counter() - t0)
        with torch.no_grad():
            emb = model.get_embedding(adj)
        m = rank_metrics(emb[:ds.n_users], emb[ds.n_users:], ds.valid, [ds.train], topk=cfg.topk)
        if m["recall@20"] > best:
            best, best_epoch, bad = m["recall@20"], epoch, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    model.load_state_dict(best_state)
    with torch.no_grad():
        emb = model.get_embedding(adj)
    test = rank_metrics(emb[:ds.n_users], emb[ds.n_users:], ds.test, [ds.train, ds.valid], topk=cfg.topk)
    return {"impl": f"pyg LightGCN (sparse CSR, torch.sparse.mm, {init} init)", "best_epoch": best_epoch,
            "epochs": len(epoch_s), "epoch_s": epoch_s, "test": test}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="ml-100k")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--models", default="lightgcn,ngcf")
    ap.add_argument("--pyg-init", default="normal", help="normal (N(0,0.1), the LightGCN protocol), xavier "
                    "(PyG's default), or both")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cfg = RunConfig(dataset=a.dataset, model="lightgcn", layers=3, dim=64, lr=1e-3, l2=1e-4, batch_size=2048,
                    epochs=a.epochs, patience=5)
    ds = load(cfg.dataset, seed=cfg.seed)
    rows = []
    ours = run(cfg, dataset=ds)
    rows.append({"impl": "gnnrec-lab LightGCN (native kernels)", "best_epoch": ours.best_epoch,
                 "epochs": ours.epochs, "epoch_s": ours.epoch_seconds, "test": ours.test})
    for init in (("normal", "xavier") if a.pyg_init == "both" else (a.pyg_init,)):
        rows.append(run_pyg(ds, cfg, init))
    if "ngcf" in a.models:
        for form in ("edge", "node"):
            r = run(cfg.replace(model="ngcf", ngcf_form=form), dataset=ds)
            rows.append({"impl": f"gnnrec-lab NGCF ({form}-wise)", "best_epoch": r.best_epoch,
                         "epochs": r.epochs, "epoch_s": r.epoch_seconds, "test": r.test})
    machine = f"{platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cpus, torch {torch.__version__}"
    if a.json:
        print(json.dumps({"machine": machine, "dataset": a.dataset, "rows": rows}))
        return
    print(f"dataset {a.dataset}; machine: {machine}; all numbers measured")
    print(f"{'implementation':45s} {'epochs':>6s} {'best':>4s} {'epoch s (median, min-max)':>28s} "
          f"{'test R@20':>9s} {'test N@20':>9s}")
    for r in rows:
        es = r["epoch_s"]
        print(f"{r['impl']:45s} {r['epochs']:6d} {r['best_epoch']:4d} "
              f"{statistics.median(es):10.3f} ({min(es):.3f}-{max(es):.3f}) {'':6s}"
              f"{r['test']['recall@20']:9.4f} {r['test']['ndcg@20']:9.4f}")
    speed = statistics.median(rows[1]["epoch_s"]) / statistics.median(rows[0]["epoch_s"])
    print(f"LightGCN epoch-time speed-up of gnnrec-lab over PyG: {speed:.2f}x (target >= 4x)")


if __name__ == "__main__":
    main()
