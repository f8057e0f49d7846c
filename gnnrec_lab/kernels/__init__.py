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

import contextlib
import functools
import os
import threading
import time
import weakref
from typing import Callable, Iterator

from gnnrec_lab.util.runtime import tune_malloc

MALLOC_TUNED = tune_malloc()   # glibc's thresholds, before numpy and torch allocate (gnnrec_lab.util.runtime says why)

import numpy as np
import torch

from gnnrec_lab.graph.bipartite import CSR, BipartiteGraph
from gnnrec_lab.kernels import buffers, costs, native, topk
from gnnrec_lab.kernels.backends import BACKEND_CLASSES
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.recorder import Recorder, get_recorder, profiler_active, profiler_range, use_recorder

__all__ = ["available_backends", "set_backend", "get_backend", "use_backend", "spmm", "layer_mean", "sddmm", "lincomb",
           "bpr_loss", "sq_norm_rows", "bpr_l2_loss",
           "spmm_edge", "gather", "gemm", "elementwise", "warmup", "Span", "SDDMM_OPS"]

SDDMM_OPS = ("dot", "mul")

_instances: dict = {}
_current = "native"


@functools.lru_cache(maxsize=1)
def _dgl_importable() -> bool:
    os.environ.setdefault("DGLBACKEND", "pytorch")  # else DGL guesses, says so and writes ~/.dgl/config.json
    try:
        import dgl  # noqa: F401
    except Exception:  # a broken DGL install (wrong torch) raises more than ImportError
        return False
    return True


def available_backends() -> list[str]:
    """Backends usable in this environment, the default first."""
    return ["native", "torch"] + (["dgl"] if _dgl_importable() else [])


def _check(name: str) -> str:
    allowed = available_backends()
    if name not in allowed:
        extra = " (dgl is not importable here)" if name == "dgl" else ""
        raise UserError(f"backend: got {name!r}{extra}, allowed: {', '.join(allowed)}")
    return name


def _backend(name: str | None = None):
    name = name or _current
    b = _instances.get(name)
    if b is None:
        b = _instances[name] = BACKEND_CLASSES[name]()
    return b


def set_backend(name: str) -> None:
    """Make ``name`` the backend for later kernel calls (UserError if unavailable)."""
    global _current
    _current = _check(name)


def get_backend() -> str:
    return _current


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
    """Temporarily switch backend (restored on exit)."""
    global _current
    prev = _current
    _current = _check(name)
    try:
        yield name
    finally:
        _current = prev


# -- recording ---------------------------------------------------------------
class Span:
    """Times the pieces of one autograd Function body back to back: the first record starts
    when the body starts, each later one where the previous record's bookkeeping ended. The
    body's own Python (argument conversion, output allocation) is then inside a record, as it
    is inside torch.profiler's event for the Function; the recorder's bookkeeping (``cost()``,
    the record itself) and compilation time are not. Public for code outside the kernels that
    records a piece of work the same way (train's optimizer-step hooks)."""
    __slots__ = ("recorder", "t0", "jit0")

    def __init__(self):
        self.recorder = recorder = get_recorder()
        if recorder.enabled:
            self.jit0 = recorder.jit_seconds
            self.t0 = time.perf_counter_ns()

    def run(self, name, layer, phase, backend_name, cost: Callable[[], dict], fn, *args, profile: bool = True):
        """Run ``fn(*args)``; when recording, record the time since the span's last mark under
        ``name`` with ``cost()``'s bytes and flops, and set the mark after the bookkeeping. Under
        an active torch profiler ``fn`` runs inside ``record_function("gnnrec_lab.<name>.<phase>")``
        (``profile=False``: the caller holds that range itself)."""
        if profile and profiler_active():
            with profiler_range(name, phase or self.recorder.phase):
                out = fn(*args)
        else:
            out = fn(*args)
        recorder = self.recorder
        if recorder.enabled:
            recorder.record(name, recorder.ns_since(self.t0, self.jit0), layer=layer, phase=phase,
                            backend=backend_name, **cost())
            self.jit0 = recorder.jit_seconds
            self.t0 = time.perf_counter_ns()
        return out


_pending = threading.local()  # the span _apply started for the forward it is about to run


def _apply(fn_cls, *args):
    """``fn_cls.apply(*args)`` with the forward's recording span started before torch's Function
    machinery runs (unpacking the arguments, building the graph node), so the forward's records
    cover the call as torch.profiler's event for it does."""
    _pending.span = Span()
    try:
        return fn_cls.apply(*args)
    finally:
        _pending.span = None


def _forward_span() -> Span:
    """The span :func:`_apply` started for this forward (a new one when called otherwise)."""
    span = getattr(_pending, "span", None)
    _pending.span = None
    return span if span is not None else Span()


def _timed(name, layer, phase, backend_name, cost: Callable[[], dict], fn, *args):
    """Run ``fn(*args)``; when recording, record its time (minus JIT) and ``cost()``."""
    return Span().run(name, layer, phase, backend_name, cost, fn, *args)


def _elem(t: torch.Tensor) -> int:
    return t.element_size()


def _check_features(adj, name: str, t: torch.Tensor, n: int, what: str) -> None:
    if t.dim() != 2 or t.shape[0] != n:
        raise ValueError(f"{name}: expected ({n}, D) rows for the CSR's {what}, got {tuple(t.shape)}")
    if t.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{name}: dtype must be float32 or float64, got {t.dtype}")


# -- SpMM --------------------------------------------------------------------
class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, adj, layer, bname):
        span = _forward_span()
        be = _backend(bname)
        ctx.adj, ctx.layer, ctx.bname = adj, layer, bname
        return span.run("spmm", layer, None, bname, lambda: costs.spmm(adj, x.shape[1], _elem(x)), be.spmm, adj, x)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        adj_t = ctx.adj.transpose()  # itself when symmetric
        be = _backend(ctx.bname)
        gx = span.run("spmm", ctx.layer, "backward", ctx.bname,
                      lambda: costs.spmm(adj_t, g.shape[1], _elem(g)), be.spmm, adj_t, g.contiguous())
        return gx, None, None, None


def spmm(adj, x: torch.Tensor, *, layer: int = -1) -> torch.Tensor:
    """``y = W x`` for the weighted CSR ``adj`` (n_rows x n_cols) and ``x`` (n_cols, D).

    Returns (n_rows, D) in x's dtype. Differentiable wrt ``x`` (backward ``W^T g``).
    """
    _check_features(adj, "spmm x", x, adj.n_cols, "columns")
    return _apply(_SpMM, x, adj, layer, _current)


# -- LightGCN's layer mean ------------------------------------------------------
class _LayerMean(torch.autograd.Function):
    """``w * (x0[:n] + x1[:n] + ... + xK[:n])`` with ``x_k = A_k x_{k-1}``, as one autograd node.

    Forward: one fused SpMM per layer that also updates the running mean while each
    output row is in L1 (no separate add pass, no per-layer autograd node). The
    propagation is linear, so nothing is saved for backward; the backward is the
    Horner form ``h = A_K^T (w g); h = A_k^T h + w P g`` (``P`` pads ``g`` with zero
    rows), again one fused SpMM per layer. Each SpMM is recorded as ``spmm`` with its
    layer, the accumulator's bytes included.

    A loss on the output that also has an L2 term on the batch's rows of ``x`` (see
    :class:`_RowsLoss`) leaves that term's gradient to this backward: added row by row into
    the gradient of ``x`` (recorded ``l2_reg``), instead of a dense gradient of its own that
    autograd would then add to this one (a zeroed table plus a dense add per step)."""

    @staticmethod
    def forward(ctx, x, blocks, weight, bname):
        span = _forward_span()
        be = _backend(bname)
        ctx.x_ref, ctx.deferred_l2 = weakref.ref(x), None
        ctx.local = local = _locality(blocks, x)
        if local is not None:  # propagate in the locality order: x's rows permuted in, acc's out
            blocks = [local[0]] * len(blocks)
            x = _permute_rows(span, be, bname, x, local[1])
        ctx.blocks, ctx.weight, ctx.bname = blocks, weight, bname
        n_out, D, f = blocks[0].n_rows, x.shape[1], _elem(x)
        acc = buffers.empty((n_out, D), x.dtype)
        cur = x
        for k, blk in enumerate(reversed(blocks)):
            init = x[:n_out] if k == 0 else None
            extra_read = n_out * D * f  # init (first layer) or acc (later layers)
            cur = span.run("spmm", k, None, bname,
                           lambda blk=blk, extra_read=extra_read: costs.spmm(blk, D, f, extra_read=extra_read,
                                                                             extra_written=n_out * D * f),
                           be.spmm_fused, blk, cur, 1.0, acc, init, None, weight)
            if k == 0:
                del x, init  # the permuted copy of x is not needed after the first layer
        del cur
        if local is not None:
            acc = _permute_rows(span, be, bname, acc, local[2])
        return acc

    @staticmethod
    def backward(ctx, g):
        span = Span()
        be, w, blocks = _backend(ctx.bname), ctx.weight, ctx.blocks
        g = g.contiguous()
        if ctx.local is not None:
            g = _permute_rows(span, be, ctx.bname, g, ctx.local[1], "backward")
        n_g, D, f = g.shape[0], g.shape[1], _elem(g)
        h, alpha = g, w
        for k in range(len(blocks) - 1, -1, -1):
            blk_t = blocks[len(blocks) - 1 - k].transpose()  # layer k applied blocks[-1-k]
            h = span.run("spmm", k, "backward", ctx.bname,
                         lambda blk_t=blk_t: costs.spmm(blk_t, D, f, extra_read=n_g * D * f),
                         be.spmm_fused, blk_t, h, alpha, None, None, g, w)
            alpha = 1.0
        if ctx.local is not None:
            del g
            h = _permute_rows(span, be, ctx.bname, h, ctx.local[2], "backward")
        deferred, ctx.deferred_l2 = ctx.deferred_l2, None
        if deferred is not None:
            _RowsLoss.l2_grad_into(span, h, *deferred)
        return h, None, None, None


# Tables up to this size are gathered through column blocks (see native.col_block_count); above
# it a CSR with a locality order is propagated in that order instead.
LOCALITY_MIN_BYTES = 96 << 20


def _locality(blocks, x: torch.Tensor):
    """``(P A P^T, perm, inv)`` when every block is one square CSR that carries a locality order
    (:meth:`~gnnrec_lab.graph.bipartite.CSR.set_order`) and its gathered table exceeds
    :data:`LOCALITY_MIN_BYTES`; else None."""
    a = blocks[0]
    local = getattr(a, "_local", None)
    if local is None or any(b is not a for b in blocks) or x.shape[0] != a.n_cols:
        return None
    if a.n_cols * x.shape[1] * _elem(x) <= LOCALITY_MIN_BYTES:
        return None
    return local


def _permute_rows(span, be, bname, t: torch.Tensor, idx: torch.Tensor, phase=None) -> torch.Tensor:
    """``t[idx]`` recorded as ``permute`` (the locality order's way in and out)."""
    return span.run("permute", -1, phase, bname,
                    lambda: costs.gather(idx.shape[0], t.shape[1], _elem(t), idx.element_size()),
                    be.gather, t, idx)


def layer_mean(blocks, x: torch.Tensor, weight: float) -> torch.Tensor:
    """LightGCN's propagation: ``weight * sum_{k=0..K} x_k[:n]`` where ``x_0 = x`` and
    ``x_k = blocks[K-k] @ x_{k-1}`` (``blocks[-1]`` applied first; each block's rows are a
    prefix of its columns, ``n = blocks[0].n_rows``). Pass the full adjacency K times
    for full-graph training. Differentiable wrt ``x``; each layer's SpMM (forward and
    backward) is recorded as ``spmm``."""
    if not blocks:
        raise ValueError("layer_mean: needs at least one block (a model with 0 layers has no propagation)")
    _check_features(blocks[-1], "layer_mean x", x, blocks[-1].n_cols, "columns")
    for a, b in zip(blocks[1:], blocks[:-1]):  # b is applied right after a
        if b.n_cols != a.n_rows or b.n_rows > a.n_rows:
            raise ValueError(f"layer_mean: block of {b.n_rows}x{b.n_cols} cannot follow one of {a.n_rows}x{a.n_cols}")
    if blocks[0].n_rows > x.shape[0]:
        raise ValueError(f"layer_mean: {blocks[0].n_rows} output rows but x has only {x.shape[0]}")
    return _apply(_LayerMean, x.contiguous(), blocks, float(weight), _current)


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
    return _apply(_SDDMM, u, v, adj, op, layer, _current)


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
    return _apply(_SpMMEdge, edge_values, adj, layer, _current)


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
    return _apply(_Gather, table, idx, layer, _current)


# -- fused loss terms -------------------------------------------------------------
class _RowsLoss(torch.autograd.Function):
    """Mean BPR over row triples of ``out`` (skipped when ``out`` is None) plus
    ``coef/2 * sum ||table[j]||^2`` over the same rows of ``table`` (skipped when ``table`` is
    None or ``coef`` 0), as ONE autograd node. Users are rows ``u``, items ``p + off`` and
    ``n + off``. Each term's kernel computes its value and its gradient in one pass (records
    ``bpr_loss`` and ``l2_reg``, layers ``layers``); the backward hands the gradients on,
    scaled only when the incoming gradient is not 1 (one record). When ``out`` and ``table``
    are the same tensor (MF) both terms add into one gradient. Returns ``(total, bpr part)``,
    the second not differentiable."""

    @staticmethod
    def forward(ctx, out, table, u, p, n, off, coef, layers, bname):
        span = _forward_span()
        shared = out is not None and out is table
        # out = layer_mean(.., table): its backward adds the L2 gradient (see _LayerMean)
        lm = out.grad_fn if out is not None else None
        ctx.lm = lm if (table is not None and coef and table.requires_grad and isinstance(lm, _LayerMean._backward_cls)
                        and lm.x_ref() is table) else None
        ctx.args = (None if out is None else out.detach(), None if table is None or not coef else table.detach(),
                    u, p, n, off, coef, layers, bname, shared, ctx.lm is not None)
        total, bpr, ctx.grads = _RowsLoss.run(span, *ctx.args)
        ctx.mark_non_differentiable(bpr)
        return total, bpr

    @staticmethod
    def l2_grad_into(span, g, table, u, p, n, off, coef, layer, bname):
        """Add the L2 term's gradient ``coef * table[j]`` into ``g`` row by row (recorded ``l2_reg``,
        backward)."""
        m = u.shape[0] + p.shape[0] + n.shape[0]
        span.run("l2_reg", layer, "backward", bname,
                 lambda: costs.sq_norm_rows(m, table.shape[0], table.shape[1], _elem(table), u.element_size(),
                                            part="grad"),
                 _backend(bname).sq_norm_rows, table, (u, p, n), coef, off, g)

    @staticmethod
    def run(span, out, table, u, p, n, off, coef, layers, bname, shared, deferred, phase=None):
        """``(total, bpr part)`` as 0-d tensors and the gradients ``(d/d out, d/d table)``; with
        ``deferred`` the L2 term's value only (its gradient is left to the layer mean's backward)."""
        be = _backend(bname)
        ref = out if out is not None else table
        total, bpr = torch.zeros((), dtype=ref.dtype), torch.zeros((), dtype=ref.dtype)
        vn = (total.numpy(), bpr.numpy())  # filled in place (no torch op per value)
        g_out = g_tab = None
        if out is not None:
            nt, D, f = out.shape[0], out.shape[1], _elem(out)
            vn[1][()], g_out = span.run("bpr_loss", layers[0], phase, bname,
                                    lambda: costs.bpr_rows(u.shape[0], nt, D, f, u.element_size()),
                                    be.bpr_rows, out, u, p, n, off)
        if table is not None:
            nt, D, f = table.shape[0], table.shape[1], _elem(table)
            m = u.shape[0] + p.shape[0] + n.shape[0]
            part = "value" if deferred else ("add" if shared else "both")
            reg, g = span.run("l2_reg", layers[1], phase, bname,
                              lambda: costs.sq_norm_rows(m, nt, D, f, u.element_size(), part=part),
                              be.sq_norm_rows, table, (u, p, n), coef, off, g_out if shared else None,
                              not deferred)
            vn[0][()] = reg
            g_tab = None if shared else g
        vn[0][()] += vn[1]
        return total, bpr, (g_out, g_tab)

    @staticmethod
    def backward(ctx, g, _g_bpr):
        span = Span()
        out, table, u, p, n, off, coef, layers, bname, _, _ = ctx.args
        # hand the gradients over without keeping a reference (autograd may then adopt them as
        # .grad without a copy); a second backward through a retained graph recomputes them
        grads, ctx.grads = ctx.grads, None
        if grads is None:
            grads = _RowsLoss.run(span, *ctx.args, phase="backward")[2]
        scale = float(g)
        if ctx.lm is not None:  # the L2 gradient, for the layer mean's backward to add (it runs next)
            ctx.lm.deferred_l2 = (table, u, p, n, off, coef * scale, layers[1], bname)
        held = [t for t in grads if t is not None]
        nb = sum(t.numel() * _elem(t) for t in held) if scale != 1.0 else 0  # usually 1: nothing to do
        elem = _elem(held[0]) if held else 4

        def hand_over():
            if scale != 1.0:
                for t in held:
                    t.mul_(scale)
        span.run("bpr_loss" if out is not None else "l2_reg", layers[0] if out is not None else layers[1],
                 "backward", bname, lambda: costs.kernel_cost(nb, nb, nb // elem, "stream"), hand_over)
        return (*grads, None, None, None, None, None, None, None)


def _check_rows(what: str, table: torch.Tensor, *idx: torch.Tensor) -> None:
    if table.dim() != 2 or table.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{what}: table must be a 2-D float32/float64 tensor, got {tuple(table.shape)} {table.dtype}")
    for t in idx:
        if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{what}: row indices must be 1-D int32/int64 tensors, got {tuple(t.shape)} {t.dtype}")
    if any(t.shape != idx[0].shape for t in idx):
        raise ValueError(f"{what}: index tensors differ in length: {[tuple(t.shape) for t in idx]}")


def bpr_l2_loss(out: torch.Tensor, table: torch.Tensor, u_rows, p_rows, n_rows, coef: float, *,
                item_offset: int = 0, layers=(-1, 0)):
    """BPR on ``out`` plus ``coef/2 * sum ||table[j]||^2`` over the batch's rows of ``table`` (the
    LightGCN objective's L2 on the layer-0 embeddings) as one autograd node: users are rows
    ``u_rows``, items ``p_rows + item_offset`` / ``n_rows + item_offset`` of both tables. Returns
    ``(loss, bpr part)`` (the second detached). Records ``bpr_loss`` and ``l2_reg``."""
    _check_rows("bpr_l2_loss", out, u_rows, p_rows, n_rows)
    _check_rows("bpr_l2_loss", table)
    return _apply(_RowsLoss, out, table, u_rows.contiguous(), p_rows.contiguous(), n_rows.contiguous(),
                  int(item_offset), float(coef), tuple(layers), _current)


def bpr_loss(out: torch.Tensor, u_rows, p_rows, n_rows, *, layer: int = -1) -> torch.Tensor:
    """Mean BPR loss ``softplus(-(out[u].out[p] - out[u].out[n]))`` over row triples, with its
    gradient computed in the same pass (no gathered copies, no scatter in backward). Recorded
    as ``bpr_loss`` (random row reads of ``out``, pattern "gather")."""
    _check_rows("bpr_loss", out, u_rows, p_rows, n_rows)
    return _apply(_RowsLoss, out, None, u_rows.contiguous(), p_rows.contiguous(), n_rows.contiguous(), 0, 0.0,
                           (layer, 0), _current)[0]


def sq_norm_rows(table: torch.Tensor, idx, coef: float = 1.0, *, layer: int = 0) -> torch.Tensor:
    """``coef * 0.5 * sum_i ||table[idx[i]]||^2`` (an L2 term on gathered rows, duplicates counted
    each time), gradient in the same pass. Recorded as ``l2_reg``."""
    _check_rows("sq_norm_rows", table, idx)
    empty = idx[:0]
    return _apply(_RowsLoss, None, table, idx.contiguous(), empty, empty, 0, float(coef), (-1, layer), _current)[0]


# -- dense ops (torch, recorded) ----------------------------------------------
class _GEMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, layer):
        span = _forward_span()
        ctx.layer = layer
        ctx.save_for_backward(x, w)
        m, k = x.shape
        return span.run("gemm", layer, None, "torch", lambda: costs.gemm(m, k, w.shape[1], _elem(x)), torch.mm, x, w)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        x, w = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]

        def grads():
            return (g.mm(w.t()) if need_x else None, x.t().mm(g) if need_w else None)
        gx, gw = span.run("gemm", ctx.layer, "backward", "torch",
                          lambda: costs.gemm_backward(x.shape[0], x.shape[1], w.shape[1], _elem(x), need_x, need_w),
                          grads)
        return gx, gw, None


def gemm(x: torch.Tensor, w: torch.Tensor, *, layer: int = -1) -> torch.Tensor:
    """``x @ w`` for 2-D ``x`` (m, k) and ``w`` (k, n) via torch; forward and backward recorded."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"gemm: expected (m,k) @ (k,n), got {tuple(x.shape)} @ {tuple(w.shape)}")
    return _apply(_GEMM, x, w, layer)


def _elementwise_cost(tensors, out) -> dict:
    return costs.kernel_cost(sum(t.numel() * _elem(t) for t in tensors), out.numel() * _elem(out), out.numel(),
                             "stream")


class _Elementwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, fn, layer, *tensors):
        span = _forward_span()
        ctx.name, ctx.layer = name, layer
        ins = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
        held = []

        def run():
            with torch.enable_grad():  # keep fn's own graph for the backward
                held.append(fn(*ins))
            return held[0]
        out = span.run(name, layer, None, "torch", lambda: _elementwise_cost(tensors, held[0]), run)
        ctx.ins, ctx.out = ins, out
        return out.detach()

    @staticmethod
    def backward(ctx, g):
        span = Span()
        ins, out = ctx.ins, ctx.out
        wanted = [t for t in ins if t.requires_grad]
        nbytes = lambda ts: sum(t.numel() * _elem(t) for t in ts)  # noqa: E731
        grads = iter(span.run(ctx.name, ctx.layer, "backward", "torch",
                              lambda: costs.kernel_cost(g.numel() * _elem(g) + nbytes(ins), nbytes(wanted), g.numel(),
                                                "stream"),
                              _grad_retained, out, wanted, g))
        return (None, None, None) + tuple(next(grads) if t.requires_grad else None for t in ins)


def _grad_retained(out, inputs, g):
    # retained: the outer graph may be walked again (retain_graph, gradcheck); the
    # inner graph is freed with ctx when the outer one goes
    return torch.autograd.grad(out, inputs, g, retain_graph=True)


def elementwise(name: str, fn: Callable, *tensors: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """``fn(*tensors)`` (a torch elementwise op such as ``F.leaky_relu``), recorded as
    ``name`` with bytes read = all inputs, bytes written = the output, flops = output
    elements. Differentiable through ``fn``; the backward is recorded too (reads the
    incoming gradient and the inputs, writes one gradient per input that needs one)."""
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError(f"elementwise {name}: pass the input tensors positionally (close over scalars in fn)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _apply(_Elementwise, name, fn, layer, *tensors)
    held = []

    def run():
        held.append(fn(*tensors))
        return held[0]
    return _timed(name, layer, None, "torch", lambda: _elementwise_cost(tensors, held[0]), run)


# -- compilation --------------------------------------------------------------
class _LinComb(torch.autograd.Function):
    """``sum_i c_i t_i`` with a closed-form backward (``c_i g``): saves no tensor and runs no
    inner autograd graph, unlike :func:`elementwise` (layer sums are on every step's path)."""

    @staticmethod
    def forward(ctx, name, layer, coeffs, *tensors):
        span = _forward_span()
        ctx.name, ctx.layer, ctx.coeffs = name, layer, coeffs
        ctx.shape_bytes = tensors[0].numel() * _elem(tensors[0])

        def run():
            out = tensors[0] * coeffs[0] if coeffs[0] != 1 else tensors[0].clone()
            for c, t in zip(coeffs[1:], tensors[1:]):
                out.add_(t, alpha=c)
            return out
        nb = ctx.shape_bytes
        return span.run(name, layer, None, "torch",
                        lambda: costs.kernel_cost(nb * len(tensors), nb, tensors[0].numel() * len(tensors),
                                                  "stream"), run)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        need = ctx.needs_input_grad[3:]
        nb = ctx.shape_bytes
        scaled = sum(1 for c, n in zip(ctx.coeffs, need) if n and c != 1)

        def run():
            return tuple((g if c == 1 else g * c) if n else None for c, n in zip(ctx.coeffs, need))
        grads = span.run(ctx.name, ctx.layer, "backward", "torch",
                         lambda: costs.kernel_cost(nb, nb * scaled, g.numel() * scaled, "stream"), run)
        return (None, None, None) + grads


def lincomb(name: str, coeffs, *tensors: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """``coeffs[0] * tensors[0] + coeffs[1] * tensors[1] + ...`` (same shapes), recorded as
    ``name``: reads every input, writes the output; the backward reads the gradient and writes
    only the gradients that need scaling (unscaled ones are the incoming gradient itself)."""
    if len(coeffs) != len(tensors) or not tensors:
        raise ValueError(f"lincomb {name}: one coefficient per tensor, got {len(coeffs)} and {len(tensors)}")
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ValueError(f"lincomb {name}: shapes differ: {[tuple(t.shape) for t in tensors]}")
    coeffs = tuple(float(c) for c in coeffs)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _apply(_LinComb, name, layer, coeffs, *tensors)
    with torch.no_grad():
        return _LinComb.forward(_Ctx(), name, layer, coeffs, *tensors)


class _Ctx:
    """Stand-in ``ctx`` for calling a Function's forward without autograd."""


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
            i0, i1 = torch.tensor([0]), torch.tensor([1])
            lt = bpr_l2_loss(h, u, i0, i1, i0, 0.1)[0] + sq_norm_rows(u, i1, 0.1)
            (y.sum() + s.sum() + z.sum() + r.sum() + h.sum() + lt).backward()
        # a non-symmetric matrix with per-edge values exercises the other specialisations
        a = CSR(np.array([0, 1, 2], dtype=np.int64), np.array([1, 0], dtype=np.int32), 2, 3,
                values=np.ones(2, dtype=np.float32))
        with use_recorder(scratch):
            spmm(a, torch.ones((3, 2), dtype=dtype, requires_grad=True)).sum().backward()
            # a sampled block: rows a prefix of the columns, degree scales, no per-edge values
            blk = CSR(np.array([0, 1, 2], dtype=np.int64), np.array([1, 2], dtype=np.int32), 2, 3, None,
                      np.ones(2, dtype=np.float32), np.ones(3, dtype=np.float32))
            layer_mean([blk], torch.ones((3, 2), dtype=dtype, requires_grad=True), 0.5).sum().backward()
        # the evaluation's ranking kernel (called by gnnrec_lab.training.evaluate, not through a backend)
        scratch.jit_seconds += native.ensure_compiled(topk.rank_block,
                                                      topk.rank_block_args(torch.empty(0, dtype=dtype).numpy().dtype))
        recorder.jit_seconds += scratch.jit_seconds
    return recorder.jit_seconds - j0


# The numba kernels a training run compiles (warmup() covers them); calibration's micro-kernels
# (kernels.microbench) and the graph's reordering (graph.reorder) are not among them.
TRAINING_KERNELS = {name: getattr(native, name) for name in (
    "spmm", "edge_aggregate", "edge_broadcast", "sddmm_dot", "sddmm_mul", "bpr_rows", "sq_norm_rows", "gather_rows",
    "permute_values", "scatter_add_rows")} | {"rank_block": topk.rank_block}


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
