"""The fused kernels: LightGCN's layer mean (every layer's SpMM and the mean's update in one autograd
node, propagated in the graph's locality order on large tables) and the loss terms, BPR over row
triples and the L2 term of the rows it touches, each with its gradient computed in the same pass.
The L2 gradient can be deferred into the layer mean's backward, which is why both live here."""
from __future__ import annotations

import weakref

import numpy as np
import torch

from gnnrec_lab.kernels import buffers, costs
from gnnrec_lab.kernels.registry import backend as _backend
from gnnrec_lab.kernels.registry import get_backend
from gnnrec_lab.kernels.spans import Span, _apply, _check_features, _check_precision, _elem, _forward_span, _narrow
from gnnrec_lab.kernels.sparse import gather


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
    autograd would then add to this one (a zeroed table plus a dense add per step).

    ``half`` (precision bf16): ``x`` is narrowed to bf16 once (recorded ``narrow``) and every layer
    is written in bf16, so each SpMM gathers and writes half the bytes; the running mean, its
    layer-0 term and the incoming gradient stay float32, every sum is float32. The backward
    narrows ``g`` once, propagates bf16 Horner terms and writes the last one, the gradient of
    ``x`` (the float32 master weights), in float32."""

    @staticmethod
    def forward(ctx, x, blocks, weight, bname, half=False):
        span = _forward_span()
        be = _backend(bname)
        ctx.x_ref, ctx.deferred_l2 = weakref.ref(x), None
        ctx.local = local = _locality(blocks, x)
        if local is not None:  # propagate in the locality order: x's rows permuted in, acc's out
            blocks = [local[0]] * len(blocks)
            x = _permute_rows(span, be, bname, x, local[1])
        ctx.blocks, ctx.weight, ctx.bname, ctx.half = blocks, weight, bname, half
        n_out, D, f = blocks[0].n_rows, x.shape[1], _elem(x)
        acc = buffers.empty((n_out, D), x.dtype)
        cur = _narrow(span, be, bname, x, 0) if half else x
        fr, dt = _elem(cur), cur.dtype   # the propagated rows' element bytes and dtype
        for k, blk in enumerate(reversed(blocks)):
            init = x[:n_out] if k == 0 else None
            extra_read = n_out * D * f  # init (first layer) or acc (later layers)
            cur = span.run("spmm", k, None, bname,
                           lambda blk=blk, extra_read=extra_read: costs.spmm(blk, D, fr, extra_read=extra_read,
                                                                             extra_written=n_out * D * f),
                           be.spmm_fused, blk, cur, 1.0, acc, init, None, weight, dt)
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
        h, alpha = (_narrow(span, be, ctx.bname, g, len(blocks) - 1, "backward") if ctx.half else g), w
        fr = _elem(h)
        for k in range(len(blocks) - 1, -1, -1):
            blk_t = blocks[len(blocks) - 1 - k].transpose()  # layer k applied blocks[-1-k]
            dt = g.dtype if k == 0 else h.dtype   # the last term is the gradient of x: float32
            h = span.run("spmm", k, "backward", ctx.bname,
                         lambda blk_t=blk_t, dt=dt: costs.spmm(blk_t, D, fr, extra_read=n_g * D * f,
                                                               out_elem=dt.itemsize),
                         be.spmm_fused, blk_t, h, alpha, None, None, g, w, dt)
            alpha = 1.0
        if ctx.local is not None:
            del g
            h = _permute_rows(span, be, ctx.bname, h, ctx.local[2], "backward")
        deferred, ctx.deferred_l2 = ctx.deferred_l2, None
        if deferred is not None:
            _RowsLoss.l2_grad_into(span, h, *deferred)
        return h, None, None, None, None


class _LayerMeanRows(torch.autograd.Function):
    """:class:`_LayerMean` of one square matrix ``A`` applied ``K`` times, read at ``rows`` only:
    ``w * sum_k x_k[rows]``, a ``(len(rows), D)`` result (full-graph training, where the loss reads
    the batch's rows only). Layers 1 .. K-1 are whole (the next layer gathers from every row of
    theirs); the last is computed at ``rows`` (``spmm_rows``: the rows' entries only). The
    gradient of the result is non-zero at ``rows`` only, so the backward's first product is a
    scatter from those rows' entries (``spmm_scatter_rows``) before the whole-table Horner steps
    of :class:`_LayerMean`, each adding the gradient back at ``rows`` (bf16: through a dense copy
    of it, recorded ``scatter_add``, so the sum is rounded once). Each product is recorded as
    ``spmm`` with the bytes it moves; ``half`` as in :class:`_LayerMean`."""

    @staticmethod
    def forward(ctx, x, adj, K, rows, weight, bname, half=False):
        span = _forward_span()
        be = _backend(bname)
        ctx.x_ref, ctx.deferred_l2 = weakref.ref(x), None
        ctx.adj, ctx.K, ctx.rows, ctx.weight, ctx.bname, ctx.half = adj, K, rows, weight, bname, half
        n, D, f, m = adj.n_rows, x.shape[1], _elem(x), rows.shape[0]
        cur = _narrow(span, be, bname, x, 0) if half else x
        fr, dt = _elem(cur), cur.dtype
        acc = buffers.empty((n, D), x.dtype) if K > 1 else None
        for k in range(K - 1):
            cur = span.run("spmm", k, None, bname,
                           lambda: costs.spmm(adj, D, fr, extra_read=n * D * f, extra_written=n * D * f),
                           be.spmm_fused, adj, cur, 1.0, acc, x if k == 0 else None, None, weight, dt)
        base, gamma = (acc, 1.0) if acc is not None else (x, weight)
        ctx.rows_nnz = rows_nnz = int((adj.indptr[rows.numpy() + 1] - adj.indptr[rows.numpy()]).sum())
        return span.run("spmm", K - 1, None, bname, lambda: costs.spmm_rows(adj, rows_nnz, m, D, fr, f),
                        be.spmm_rows, adj, cur, rows, base, gamma, weight)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        be, w, adj, K, rows, bname = _backend(ctx.bname), ctx.weight, ctx.adj, ctx.K, ctx.rows, ctx.bname
        g = g.contiguous()
        adj_t = adj.transpose()
        n, m, D, f = adj.n_rows, g.shape[0], g.shape[1], _elem(g)
        gh = _narrow(span, be, bname, g, K - 1, "backward") if ctx.half else g
        fr = _elem(gh)
        # the last layer's transposed product from the rows' gradient alone, float32 (then narrowed
        # for the bf16 layers below it, as the whole product's output would be)
        h = span.run("spmm", K - 1, "backward", bname,
                     lambda: costs.spmm_scatter_rows(adj, ctx.rows_nnz, m, D, fr, f),
                     be.spmm_scatter_rows, adj, gh, rows, w, g, w)
        if K > 1 and ctx.half:
            h = _narrow(span, be, bname, h, K - 1, "backward")
            g_full = span.run("scatter_add", K - 1, "backward", bname,
                              lambda: costs.kernel_cost(m * D * f, n * D * f, 0, "stream"),
                              _rows_into_zeros, g, rows, n)
        for k in range(K - 2, -1, -1):
            if ctx.half:  # bf16 layers: the gradient's rows added before each row is rounded
                dt = g.dtype if k == 0 else h.dtype
                h = span.run("spmm", k, "backward", bname,
                             lambda dt=dt: costs.spmm(adj_t, D, fr, extra_read=n * D * f, out_elem=dt.itemsize),
                             be.spmm_fused, adj_t, h, 1.0, None, None, g_full, w, dt)
            else:         # float32: the product, then the rows' gradient added at the rows only
                h = span.run("spmm", k, "backward", bname,
                             lambda: costs.spmm(adj_t, D, f, extra_read=m * D * f + m * 8, extra_written=m * D * f),
                             _spmm_add_rows, be, adj_t, h, rows, g, w)
        deferred, ctx.deferred_l2 = ctx.deferred_l2, None
        if deferred is not None:
            _RowsLoss.l2_grad_into(span, h, *deferred)
        return h, None, None, None, None, None, None


def _spmm_add_rows(be, adj, h: torch.Tensor, rows: torch.Tensor, g: torch.Tensor, beta: float) -> torch.Tensor:
    """``W h`` with ``beta * g[i]`` added at row ``rows[i]`` (after the row's sum, as the fused addend is)."""
    out = be.spmm_fused(adj, h)
    out.index_add_(0, rows, g, alpha=beta)
    return out


def _rows_into_zeros(g: torch.Tensor, rows: torch.Tensor, n: int) -> torch.Tensor:
    """A zero ``(n, D)`` table with ``g``'s rows at ``rows`` (distinct)."""
    out = buffers.zeros((n, g.shape[1]), g.dtype)
    out.index_copy_(0, rows.long(), g)
    return out


def batch_rows(n: int, *ids) -> tuple:
    """``(rows, slot)`` for the node ids in ``ids`` (int tensors or arrays, repeats allowed): the
    distinct ids in order (int64 tensor) and ``slot`` (int32, ``n`` long) with ``slot[rows[i]] = i``
    and -1 elsewhere: what :func:`layer_mean` reads at (``rows=``) and the map from node ids to
    rows of its result. One pass over a mark table of ``n``, no sort."""
    mark = np.zeros(n, dtype=np.bool_)
    for t in ids:
        mark[np.asarray(t)] = True
    rows = np.flatnonzero(mark)
    slot = np.full(n, -1, dtype=np.int32)
    slot[rows] = np.arange(rows.shape[0], dtype=np.int32)
    return torch.from_numpy(rows), torch.from_numpy(slot)


# Read at rows (layer_mean's rows=) when they are at most this share of the table's; above it the
# whole last layer is about as cheap and the result is gathered from it.
ROWS_MAX_SHARE = 0.5


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


def layer_mean(blocks, x: torch.Tensor, weight: float, precision: str = "fp32", rows=None) -> torch.Tensor:
    """LightGCN's propagation: ``weight * sum_{k=0..K} x_k[:n]`` where ``x_0 = x`` and
    ``x_k = blocks[K-k] @ x_{k-1}`` (``blocks[-1]`` applied first; each block's rows are a
    prefix of its columns, ``n = blocks[0].n_rows``). Pass the full adjacency K times
    for full-graph training. Differentiable wrt ``x``; each layer's SpMM (forward and
    backward) is recorded as ``spmm``. ``precision="bf16"`` (float32 ``x``, native backend): the
    layers are stored in bf16, sums and the result in float32 (see :class:`_LayerMean`).

    ``rows`` (the ``(rows, slot)`` of :func:`batch_rows`): only those rows of the result, in that
    order. With one square matrix applied K times and rows at most :data:`ROWS_MAX_SHARE` of it
    (and no locality order in play), the last layer is computed at those rows only and the
    backward's first product gathers only their gradient (:class:`_LayerMeanRows`); otherwise
    the whole result is computed and its rows gathered (recorded ``gather``)."""
    if not blocks:
        raise ValueError("layer_mean: needs at least one block (a model with 0 layers has no propagation)")
    _check_features(blocks[-1], "layer_mean x", x, blocks[-1].n_cols, "columns")
    for a, b in zip(blocks[1:], blocks[:-1]):  # b is applied right after a
        if b.n_cols != a.n_rows or b.n_rows > a.n_rows:
            raise ValueError(f"layer_mean: block of {b.n_rows}x{b.n_cols} cannot follow one of {a.n_rows}x{a.n_cols}")
    if blocks[0].n_rows > x.shape[0]:
        raise ValueError(f"layer_mean: {blocks[0].n_rows} output rows but x has only {x.shape[0]}")
    half = _check_precision("layer_mean", precision, x, get_backend())
    if rows is not None:
        idx = rows[0]
        a = blocks[0]
        if (all(b is a for b in blocks) and a.n_rows == a.n_cols == x.shape[0]
                and idx.shape[0] <= ROWS_MAX_SHARE * a.n_rows and _locality(blocks, x) is None):
            return _apply(_LayerMeanRows, x.contiguous(), a, len(blocks), idx, float(weight), get_backend(), half)
        return gather(_apply(_LayerMean, x.contiguous(), blocks, float(weight), get_backend(), half), idx,
                      layer=len(blocks))
    return _apply(_LayerMean, x.contiguous(), blocks, float(weight), get_backend(), half)




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
    def forward(ctx, out, table, u, p, n, off, coef, layers, bname, oidx=None):
        span = _forward_span()
        shared = out is not None and out is table
        # out = layer_mean(.., table): its backward adds the L2 gradient (see _LayerMean)
        lm = out.grad_fn if out is not None else None
        ctx.lm = lm if (table is not None and coef and table.requires_grad
                        and isinstance(lm, (_LayerMean._backward_cls, _LayerMeanRows._backward_cls))
                        and lm.x_ref() is table) else None
        ctx.args = (None if out is None else out.detach(), None if table is None or not coef else table.detach(),
                    u, p, n, off, coef, layers, bname, shared, ctx.lm is not None, oidx)
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
    def run(span, out, table, u, p, n, off, coef, layers, bname, shared, deferred, oidx, phase=None):
        """``(total, bpr part)`` as 0-d tensors and the gradients ``(d/d out, d/d table)``; with
        ``deferred`` the L2 term's value only (its gradient is left to the layer mean's backward).
        ``oidx``: the triples' rows in ``out`` (no offset) when they are not those of ``table``."""
        be = _backend(bname)
        ref = out if out is not None else table
        total, bpr = torch.zeros((), dtype=ref.dtype), torch.zeros((), dtype=ref.dtype)
        vn = (total.numpy(), bpr.numpy())  # filled in place (no torch op per value)
        g_out = g_tab = None
        if out is not None:
            nt, D, f = out.shape[0], out.shape[1], _elem(out)
            ou, op, on, ooff = (u, p, n, off) if oidx is None else (*oidx, 0)
            vn[1][()], g_out = span.run("bpr_loss", layers[0], phase, bname,
                                    lambda: costs.bpr_rows(u.shape[0], nt, D, f, u.element_size()),
                                    be.bpr_rows, out, ou, op, on, ooff)
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
        out, table, u, p, n, off, coef, layers, bname, _, _, _ = ctx.args
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
        return (*grads, None, None, None, None, None, None, None, None)


def _check_rows(what: str, table: torch.Tensor, *idx: torch.Tensor) -> None:
    if table.dim() != 2 or table.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{what}: table must be a 2-D float32/float64 tensor, got {tuple(table.shape)} {table.dtype}")
    for t in idx:
        if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{what}: row indices must be 1-D int32/int64 tensors, got {tuple(t.shape)} {t.dtype}")
    if any(t.shape != idx[0].shape for t in idx):
        raise ValueError(f"{what}: index tensors differ in length: {[tuple(t.shape) for t in idx]}")


def bpr_l2_loss(out: torch.Tensor, table: torch.Tensor, u_rows, p_rows, n_rows, coef: float, *,
                item_offset: int = 0, layers=(-1, 0), out_rows=None):
    """BPR on ``out`` plus ``coef/2 * sum ||table[j]||^2`` over the batch's rows of ``table`` (the
    LightGCN objective's L2 on the layer-0 embeddings) as one autograd node: users are rows
    ``u_rows``, items ``p_rows + item_offset`` / ``n_rows + item_offset`` of both tables. Returns
    ``(loss, bpr part)`` (the second detached). Records ``bpr_loss`` and ``l2_reg``.
    ``out_rows``: ``(u, p, n)`` rows of ``out`` when it holds other rows than ``table`` (the
    result of :func:`layer_mean` read at the batch's rows), no offset added."""
    _check_rows("bpr_l2_loss", out, u_rows, p_rows, n_rows)
    _check_rows("bpr_l2_loss", table)
    if out_rows is not None:
        _check_rows("bpr_l2_loss", out, *out_rows)
        out_rows = tuple(t.contiguous() for t in out_rows)
    return _apply(_RowsLoss, out, table, u_rows.contiguous(), p_rows.contiguous(), n_rows.contiguous(),
                  int(item_offset), float(coef), tuple(layers), get_backend(), out_rows)


def bpr_loss(out: torch.Tensor, u_rows, p_rows, n_rows, *, layer: int = -1) -> torch.Tensor:
    """Mean BPR loss ``softplus(-(out[u].out[p] - out[u].out[n]))`` over row triples, with its
    gradient computed in the same pass (no gathered copies, no scatter in backward). Recorded
    as ``bpr_loss`` (random row reads of ``out``, pattern "gather")."""
    _check_rows("bpr_loss", out, u_rows, p_rows, n_rows)
    return _apply(_RowsLoss, out, None, u_rows.contiguous(), p_rows.contiguous(), n_rows.contiguous(), 0, 0.0,
                           (layer, 0), get_backend())[0]


def sq_norm_rows(table: torch.Tensor, idx, coef: float = 1.0, *, layer: int = 0) -> torch.Tensor:
    """``coef * 0.5 * sum_i ||table[idx[i]]||^2`` (an L2 term on gathered rows, duplicates counted
    each time), gradient in the same pass. Recorded as ``l2_reg``."""
    _check_rows("sq_norm_rows", table, idx)
    empty = idx[:0]
    return _apply(_RowsLoss, None, table, idx.contiguous(), empty, empty, 0, float(coef), (-1, layer), get_backend())[0]
