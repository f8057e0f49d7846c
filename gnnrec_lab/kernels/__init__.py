"""Sparse and dense kernels with autograd, each call timed and byte-accounted.

Public API::

    from gnnrec_lab import kernels
    kernels.available_backends()                  # ["native", "torch"] (+ "dgl" if importable)
    kernels.set_backend("torch"); kernels.get_backend()
    with kernels.use_backend("torch"): ...
    y = kernels.spmm(adj, x)                      # W x            (n_rows, D)
    s = kernels.sddmm(adj, u, v, op="dot")        # u[r].v[c]      (nnz,)
    m = kernels.sddmm(adj, u, v, op="mul")        # u[r]*v[c]      (nnz, D)
    y = kernels.spmm_edge(adj, m)                 # sum_e w_e m_e  (n_rows, D)
    rows = kernels.gather(table, idx)             # table[idx]
    z = kernels.gemm(x, w); a = kernels.elementwise("leaky_relu", F.leaky_relu, z)
    h = kernels.layer_mean([adj] * K, x, 1/(K+1)) # LightGCN: mean of x, Wx, ..., W^K x (one autograd node)
    h = kernels.layer_mean([adj] * K, x, 1/(K+1), rows=kernels.batch_rows(n, users, items))  # at those rows
    l = kernels.bpr_loss(out, u, p, n)            # mean BPR over row triples, gradient in the same pass
    r = kernels.sq_norm_rows(e0, idx, coef)       # coef/2 * sum ||e0[idx]||^2 (the L2 term), likewise
    loss, bpr = kernels.bpr_l2_loss(out, e0, u, p, n, coef, item_offset=n_users)  # both, one autograd node

``W`` is the CSR's weighted matrix: ``values`` (or 1) times ``row_scale[r]`` times
``col_scale[c]``. Every call appends one
:class:`~gnnrec_lab.util.recorder.KernelRecord` to the active recorder: the forward
in the recorder's current phase, the backward with ``phase="backward"`` (the
backward of ``gather`` is recorded as ``scatter_add``). Wall time is measured;
bytes and flops are those an ideal kernel must move and do, from
:mod:`gnnrec_lab.kernels.costs` (read that module for the byte model). When the
recorder is disabled nothing is timed or counted. Numba compilation time goes
to ``Recorder.jit_seconds``, never into a record.

Backends: ``native`` (numba, parallel, load-balanced by non-zeros; default),
``torch`` (torch.sparse / index ops) and ``dgl`` (only if ``import dgl`` works).
Features may be float32 or float64; everything is differentiable wrt the dense
inputs (never wrt the graph).
"""
from __future__ import annotations

from gnnrec_lab.util.runtime import tune_malloc

MALLOC_TUNED = tune_malloc()   # glibc's thresholds, before numpy and torch allocate (gnnrec_lab.util.runtime says why)

# The package's public kernels, each from the module that defines it: registry (backends), spans
# (recording), sparse, fused (layer mean and loss terms), dense, compile (warm-up, numba's cache).
from gnnrec_lab.kernels.compile import TRAINING_KERNELS, uncached_kernels, warmup  # noqa: E402
from gnnrec_lab.kernels.dense import elementwise, gemm, lincomb  # noqa: E402
from gnnrec_lab.kernels.fused import batch_rows, bpr_l2_loss, bpr_loss, layer_mean, sq_norm_rows  # noqa: E402
from gnnrec_lab.kernels.registry import (  # noqa: E402
    available_backends,
    dgl_importable,
    get_backend,
    set_backend,
    use_backend,
)
from gnnrec_lab.kernels.spans import Span  # noqa: E402
from gnnrec_lab.kernels.sparse import SDDMM_OPS, gather, sddmm, spmm, spmm_edge  # noqa: E402

__all__ = ["available_backends", "set_backend", "get_backend", "use_backend", "spmm", "layer_mean", "batch_rows",
           "sddmm", "lincomb",
           "bpr_loss", "sq_norm_rows", "bpr_l2_loss",
           "spmm_edge", "gather", "gemm", "elementwise", "warmup", "Span", "SDDMM_OPS",
           "TRAINING_KERNELS", "uncached_kernels", "dgl_importable"]

