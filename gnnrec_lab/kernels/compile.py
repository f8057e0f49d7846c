"""Compilation outside timed regions: :func:`warmup` compiles (or loads from numba's disk cache)
every kernel a training run calls; :func:`uncached_kernels` says which have no cached build yet."""
from __future__ import annotations

import numpy as np
import torch

from gnnrec_lab.graph.bipartite import CSR, BipartiteGraph
from gnnrec_lab.kernels import native, topk
from gnnrec_lab.kernels.fused import batch_rows, bpr_l2_loss, layer_mean, sq_norm_rows
from gnnrec_lab.kernels.registry import use_backend
from gnnrec_lab.kernels.sparse import gather, sddmm, spmm, spmm_edge
from gnnrec_lab.util.recorder import Recorder, get_recorder, use_recorder


def warmup(dtype: torch.dtype = torch.float32) -> float:
    """Compile (or load from the disk cache) every native kernel for ``dtype`` on a
    tiny graph, so later calls are never slowed by the JIT. Returns the seconds
    spent, also added to the active recorder's ``jit_seconds``."""
    recorder = get_recorder()
    j0 = recorder.jit_seconds
    g = BipartiteGraph(np.array([[0, 0], [1, 1], [1, 0]]), 2, 2)
    adj = g.adj
    x = torch.ones((adj.n_cols, 2), dtype=dtype, requires_grad=True)
    u = torch.ones((adj.n_rows, 2), dtype=dtype, requires_grad=True)
    with use_backend("native"):
        scratch = Recorder(enabled=False)  # keep the warm-up calls out of the caller's records
        with use_recorder(scratch):
            y = spmm(adj, x)
            s = sddmm(adj, u, x, op="dot")
            m = sddmm(adj, u, x, op="mul")
            z = spmm_edge(adj, m)
            r = gather(x, torch.tensor([0, 1, 1]))
            h = layer_mean([adj, adj], x, 1 / 3)  # the fused SpMM's accumulate / addend forms
            at = batch_rows(adj.n_rows, np.array([0, 3]))  # read at half the rows: spmm_rows, spmm_scatter_rows
            hr = layer_mean([adj, adj], x, 1 / 3, rows=at)
            i0, i1 = torch.tensor([0]), torch.tensor([1])
            lt = bpr_l2_loss(h, u, i0, i1, i0, 0.1)[0] + sq_norm_rows(u, i1, 0.1)
            # the full-graph step's loss on those rows: int32 slots into them, the L2 left to their backward
            j0, j1 = torch.tensor([0], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
            lt = lt + bpr_l2_loss(hr, x, i0, i1, i0, 0.1, out_rows=(j0, j1, j0))[0]
            (y.sum() + s.sum() + z.sum() + r.sum() + h.sum() + lt).backward()
            if dtype == torch.float32:  # precision bf16: bf16 rows in, bf16 or float32 rows out
                (spmm(adj, x, precision="bf16").sum() + layer_mean([adj, adj], x, 1 / 3, "bf16").sum()
                 + layer_mean([adj, adj], x, 1 / 3, "bf16", rows=at).sum()).backward()
        # a non-symmetric matrix with per-edge values exercises the other specialisations
        a = CSR(np.array([0, 1, 2], dtype=np.int64), np.array([1, 0], dtype=np.int32), 2, 3,
                values=np.ones(2, dtype=np.float32))
        with use_recorder(scratch):
            spmm(a, torch.ones((3, 2), dtype=dtype, requires_grad=True)).sum().backward()
            # a sampled block: rows a prefix of the columns, degree scales, no per-edge values
            blk = CSR(np.array([0, 1, 2], dtype=np.int64), np.array([1, 2], dtype=np.int32), 2, 3, None,
                      np.ones(2, dtype=np.float32), np.ones(3, dtype=np.float32))
            layer_mean([blk], torch.ones((3, 2), dtype=dtype, requires_grad=True), 0.5).sum().backward()
            if dtype == torch.float32:
                layer_mean([blk], torch.ones((3, 2), dtype=dtype, requires_grad=True), 0.5, "bf16").sum().backward()
        # the evaluation's ranking kernel (called by gnnrec_lab.training.evaluate, not through a backend)
        scratch.jit_seconds += native.ensure_compiled(topk.rank_block,
                                                      topk.rank_block_args(torch.empty(0, dtype=dtype).numpy().dtype))
        recorder.jit_seconds += scratch.jit_seconds
    return recorder.jit_seconds - j0




# The numba kernels a training run compiles (warmup() covers them); calibration's micro-kernels
# (kernels.microbench) and the graph's reordering (graph.reorder) are not among them.
TRAINING_KERNELS = {name: getattr(native, name) for name in (
    "spmm", "spmm_rows", "spmm_scatter_rows", "edge_aggregate", "edge_broadcast", "sddmm_dot", "sddmm_mul", "bpr_rows",
    "sq_norm_rows", "gather_rows", "permute_values", "scatter_add_rows", "bf16_narrow")} | {
    "rank_block": topk.rank_block}


def uncached_kernels() -> list:
    """Training kernels with no usable entry in numba's disk cache (none yet, or compiled from an
    older source): the next warm-up compiles them, ~1.5 min on 2 cores, instead of loading them.
    Reads numba's cache index through its (private) cache object; [] when that is not there."""
    out = []
    for name, kernel in TRAINING_KERNELS.items():
        try:
            if not kernel._cache._cache_file._load_index():
                out.append(name)
        except Exception:  # noqa: BLE001 - another numba version: no answer is better than a wrong one
            pass
    return out
