"""The sparse kernels with autograd: SpMM, SDDMM, the aggregation of per-edge messages and the row
gather (each dispatched to the current backend, recorded, its inputs checked)."""
from __future__ import annotations

import torch

from gnnrec_lab.kernels import costs
from gnnrec_lab.kernels.registry import backend as _backend
from gnnrec_lab.kernels.registry import get_backend
from gnnrec_lab.kernels.spans import Span, _apply, _check_features, _check_precision, _elem, _forward_span, _narrow
from gnnrec_lab.util.errors import UserError

SDDMM_OPS = ("dot", "mul")


# -- SpMM --------------------------------------------------------------------
class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, adj, layer, bname, half=False):
        span = _forward_span()
        be = _backend(bname)
        ctx.adj, ctx.layer, ctx.bname, ctx.half = adj, layer, bname, half
        return _SpMM.product(span, be, adj, x, layer, None, bname, half)

    @staticmethod
    def product(span, be, adj, x, layer, phase, bname, half):
        """``W x``; ``half``: x narrowed to bf16 first (recorded ``narrow``), the product reading
        bf16 rows and writing float32. A bfloat16 ``x``: bf16 rows read and written."""
        if x.dtype == torch.bfloat16:
            return span.run("spmm", layer, phase, bname, lambda: costs.spmm(adj, x.shape[1], _elem(x)),
                            be.spmm_fused, adj, x, 1.0, None, None, None, 1.0, x.dtype)
        if not half:
            return span.run("spmm", layer, phase, bname, lambda: costs.spmm(adj, x.shape[1], _elem(x)),
                            be.spmm, adj, x)
        xh = _narrow(span, be, bname, x, layer, phase)
        return span.run("spmm", layer, phase, bname, lambda: costs.spmm(adj, x.shape[1], _elem(xh), out_elem=_elem(x)),
                        be.spmm_fused, adj, xh, 1.0, None, None, None, 1.0, x.dtype)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        adj_t = ctx.adj.transpose()  # itself when symmetric
        be = _backend(ctx.bname)
        gx = _SpMM.product(span, be, adj_t, g.contiguous(), ctx.layer, "backward", ctx.bname, ctx.half)
        return gx, None, None, None, None


def spmm(adj, x: torch.Tensor, *, layer: int = -1, precision: str = "fp32") -> torch.Tensor:
    """``y = W x`` for the weighted CSR ``adj`` (n_rows x n_cols) and ``x`` (n_cols, D).

    Returns (n_rows, D) in x's dtype. Differentiable wrt ``x`` (backward ``W^T g``).
    ``precision="bf16"`` (float32 ``x``, native backend): ``x`` (and in backward ``g``) is rounded
    to bf16 and the product reads those rows, summing and writing float32. A bfloat16 ``x`` (a
    layer of bf16 rows; native backend): read and written in bf16, summed in float32.
    """
    _check_features(adj, "spmm x", x, adj.n_cols, "columns", bf16=True)
    half = _check_precision("spmm", "bf16" if x.dtype == torch.bfloat16 else precision, x, get_backend())
    return _apply(_SpMM, x.contiguous() if x.dtype == torch.bfloat16 else x, adj, layer, get_backend(),
                  half and x.dtype != torch.bfloat16)




# -- SDDMM -------------------------------------------------------------------
class _SDDMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, v, adj, op, layer, bname):
        span = _forward_span()
        be = _backend(bname)
        ctx.adj, ctx.op, ctx.layer, ctx.bname = adj, op, layer, bname
        ctx.save_for_backward(u, v)
        return span.run(f"sddmm_{op}", layer, None, bname, lambda: costs.sddmm(adj, u.shape[1], _elem(u), op),
                        be.sddmm, adj, u, v, op)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        u, v = ctx.saved_tensors
        need_u, need_v = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_u or need_v):
            return None, None, None, None, None, None
        adj, op, be = ctx.adj, ctx.op, _backend(ctx.bname)
        gu, gv = span.run(f"sddmm_{op}", ctx.layer, "backward", ctx.bname,
                          lambda: costs.sddmm_backward(adj, u.shape[1], _elem(u), op, need_u, need_v),
                          be.sddmm_grads, adj, op, g.contiguous(), u, v, need_u, need_v)
        return gu, gv, None, None, None, None


def sddmm(adj, u: torch.Tensor, v: torch.Tensor, *, op: str = "dot", layer: int = -1) -> torch.Tensor:
    """Per stored entry ``e = (r, c)`` of ``adj``: ``u[r] . v[c]`` (``op="dot"``,
    shape (nnz,)) or ``u[r] * v[c]`` (``op="mul"``, shape (nnz, D)). The CSR's
    weights are not applied. ``u`` is (n_rows, D), ``v`` (n_cols, D), same dtype.
    Differentiable wrt ``u`` and ``v``."""
    if op not in SDDMM_OPS:
        raise UserError(f"sddmm op: got {op!r}, allowed: {', '.join(SDDMM_OPS)}")
    _check_features(adj, "sddmm u", u, adj.n_rows, "rows")
    _check_features(adj, "sddmm v", v, adj.n_cols, "columns")
    if u.shape[1] != v.shape[1] or u.dtype != v.dtype:
        raise ValueError(f"sddmm: u {tuple(u.shape)} {u.dtype} and v {tuple(v.shape)} {v.dtype} must share D and dtype")
    return _apply(_SDDMM, u, v, adj, op, layer, get_backend())


# -- aggregation of per-edge messages ----------------------------------------
class _SpMMEdge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, m, adj, layer, bname):
        span = _forward_span()
        be = _backend(bname)
        ctx.adj, ctx.layer, ctx.bname = adj, layer, bname
        return span.run("spmm_edge", layer, None, bname, lambda: costs.spmm_edge(adj, m.shape[1], _elem(m)),
                        be.spmm_edge, adj, m)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        adj, be = ctx.adj, _backend(ctx.bname)
        gm = span.run("spmm_edge", ctx.layer, "backward", ctx.bname,
                      lambda: costs.edge_broadcast(adj, g.shape[1], _elem(g)), be.edge_broadcast, adj, g.contiguous())
        return gm, None, None, None


def spmm_edge(adj, edge_values: torch.Tensor, *, layer: int = -1) -> torch.Tensor:
    """Aggregate per-edge messages: ``y[r] = sum_{e in row r} w_e * edge_values[e]``.

    ``edge_values`` is (nnz, D) in CSR entry order, ``w_e`` the CSR weight
    (values x row/col scales). Returns (n_rows, D); differentiable wrt ``edge_values``."""
    _check_features(adj, "spmm_edge edge_values", edge_values, adj.nnz, "entries")
    return _apply(_SpMMEdge, edge_values, adj, layer, get_backend())


# -- gather ------------------------------------------------------------------
class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table, idx, layer, bname):
        span = _forward_span()
        be = _backend(bname)
        ctx.n_table, ctx.layer, ctx.bname = table.shape[0], layer, bname
        ctx.save_for_backward(idx)
        return span.run("gather", layer, None, bname,
                        lambda: costs.gather(idx.shape[0], table.shape[1], _elem(table), idx.element_size()),
                        be.gather, table, idx)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        (idx,) = ctx.saved_tensors
        be = _backend(ctx.bname)
        gt = span.run("scatter_add", ctx.layer, "backward", ctx.bname,
                      lambda: costs.scatter_add(idx.shape[0], ctx.n_table, g.shape[1], _elem(g), idx.element_size()),
                      be.scatter_add, idx, g.contiguous(), ctx.n_table)
        return gt, None, None, None


def gather(table: torch.Tensor, idx: torch.Tensor, *, layer: int = -1) -> torch.Tensor:
    """``table[idx]`` for a 2-D ``table`` and 1-D integer ``idx``; backward
    scatter-adds into a dense gradient (recorded as ``scatter_add``)."""
    if table.dim() != 2:
        raise ValueError(f"gather: table must be 2-D, got {tuple(table.shape)}")
    if idx.dim() != 1 or idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"gather: idx must be a 1-D int32/int64 tensor, got {tuple(idx.shape)} {idx.dtype}")
    return _apply(_Gather, table, idx, layer, get_backend())
