"""Kernel backends: the raw (non-autograd, unrecorded) operations.

A backend turns tensors into tensors; :mod:`gnnrec_lab.kernels` wraps each
operation in autograd and records it. Per-matrix helpers (load-balanced row
chunks, weights cast to the feature dtype, the transposed structure, torch
sparse tensors) are built once and cached on the :class:`~gnnrec_lab.graph.bipartite.CSR`
object in the private attribute ``_kern``.

Operations (``W`` the weighted CSR, ``r_e``/``c_e`` the row/column of entry e):

* ``spmm(adj, x)``          -> ``W x``                                (n_rows, D)
* ``spmm_edge(adj, m)``     -> ``y[r] = sum_e w_e m[e]``              (n_rows, D)
* ``edge_broadcast(adj, g)``-> ``out[e] = w_e g[r_e]``                (nnz, D)
* ``sddmm(adj, u, v, op)``  -> ``u[r_e].v[c_e]`` (nnz,) or ``u[r_e]*v[c_e]`` (nnz, D)
* ``sddmm_grads(adj, op, g, u, v, need_u, need_v)`` -> (grad_u | None, grad_v | None)
* ``gather(table, idx)``, ``scatter_add(idx, src, n_rows)``
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from gnnrec_lab.kernels import buffers
from gnnrec_lab.kernels import native as nk
from gnnrec_lab.util.recorder import get_recorder


def _aux(adj) -> dict:
    d = adj.__dict__.get("_kern")
    if d is None:
        d = adj.__dict__["_kern"] = {}
    return d


def _np(t: torch.Tensor) -> np.ndarray:
    """A numpy view of ``t``; a bfloat16 tensor as its bits (uint16, what the native kernels widen)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _acc_type(a: np.ndarray):
    """The numpy float type a kernel reading ``a`` sums in (float32 for bf16 bits)."""
    return np.float32 if a.dtype == np.uint16 else a.dtype.type


def _plain(dtype) -> tuple:
    """The trailing arguments of :func:`native.spmm` for a plain product (no fused update)."""
    one = np.dtype(dtype).type(1)
    return (one, None, None, None, one)


class Backend:
    name = "?"

    def spmm_fused(self, adj, x, alpha=1.0, acc=None, init=None, addend=None, beta=1.0, out_dtype=None):
        """``out = alpha * W x`` (in ``out_dtype``, x's by default) plus LightGCN's layer-mean updates (see
        :func:`gnnrec_lab.kernels.native.spmm`): with ``acc``, ``acc[:n] = beta*init[:n] +
        beta*out[:n]`` (or ``acc += beta*out[:n]`` without ``init``); with ``addend``,
        ``out[:n] += beta*addend``. This generic form runs the product and the updates as
        separate torch ops; the native backend fuses them into the product's row loop."""
        out = self.spmm(adj, x)
        if out_dtype is not None and out.dtype != out_dtype:
            out = out.to(out_dtype)
        if alpha != 1.0:
            out.mul_(alpha)
        if acc is not None:
            n = acc.shape[0]
            if init is not None:
                torch.mul(init[:n], beta, out=acc)
            acc.add_(out[:n], alpha=beta)
        if addend is not None:
            out[:addend.shape[0]].add_(addend, alpha=beta)
        return out

    def spmm_rows(self, adj, x, rows, base, gamma, beta):
        """``gamma * base[rows] + beta * (W x)[rows]``: the product read at a subset of its rows, added to
        the running layer mean's rows (see :func:`gnnrec_lab.kernels.native.spmm_rows`). This generic
        form computes the whole product; the native backend only the rows' entries."""
        idx = rows.long()
        return gamma * base[idx] + beta * self.spmm(adj, x)[idx].to(base.dtype)

    def spmm_scatter_rows(self, adj, g, rows, alpha, addend, beta):
        """``alpha * W^T (S^T g) + beta * S^T addend`` for a square ``W``, ``S`` selecting ``rows``
        (``g``'s row i is node ``rows[i]``): the transposed product of a gradient non-zero at
        ``rows`` only (see :func:`gnnrec_lab.kernels.native.spmm_scatter_rows`). This generic form
        scatters ``g`` into a dense table first; the native backend reads only the rows' entries."""
        idx = rows.long()
        full = torch.zeros((adj.n_rows, g.shape[1]), dtype=addend.dtype)
        full[idx] = g.to(addend.dtype)
        out = self.spmm(adj.transpose(), full).mul_(alpha)
        out[idx] += beta * addend
        return out

    def narrow(self, x):
        """``x`` rounded to bfloat16 (torch's conversion: to nearest, ties to even)."""
        return x.detach().to(torch.bfloat16)


class NativeBackend(Backend):
    """numba kernels (:mod:`gnnrec_lab.kernels.native`)."""

    name = "native"

    # -- cached per-matrix helpers --------------------------------------
    @staticmethod
    def _bounds(adj) -> np.ndarray:
        aux, th = _aux(adj), nk.threads()
        b = aux.get(("bounds", th))
        if b is None:
            b = aux[("bounds", th)] = nk.row_chunks(adj.indptr, nk.work_chunk_count(adj.nnz, th))
        return b

    @staticmethod
    def _weights(adj, dtype: np.dtype):
        aux = _aux(adj)
        w = aux.get(("w", dtype))
        if w is None:
            w = aux[("w", dtype)] = tuple(None if a is None else np.ascontiguousarray(a, dtype=dtype)
                                          for a in (adj.values, adj.row_scale, adj.col_scale))
        return w

    @staticmethod
    def _tstruct(adj):
        """Structure of W^T (indptr, row ids, chunk bounds) and, for entry k of it,
        the position ``perm[k]`` of the same entry in ``adj`` (int32)."""
        aux = _aux(adj)
        t = aux.get("tstruct")
        if t is None:
            perm = np.argsort(adj.indices, kind="stable")
            counts = np.bincount(adj.indices, minlength=adj.n_cols)
            t_indptr = np.zeros(adj.n_cols + 1, dtype=np.int64)
            np.cumsum(counts, out=t_indptr[1:])
            rows = adj.row_ids()[perm].astype(adj.indices.dtype, copy=False)
            pdt = np.int32 if adj.nnz < 2**31 - 1 else np.int64
            b = nk.row_chunks(t_indptr, nk.work_chunk_count(adj.nnz, nk.threads()))
            t = aux["tstruct"] = (t_indptr, np.ascontiguousarray(rows), perm.astype(pdt), b)
        return t

    @staticmethod
    def _call(kernel, *args):
        dt = nk.ensure_compiled(kernel, args)
        if dt:
            get_recorder().jit_seconds += dt
        return kernel(*args)

    # -- operations -----------------------------------------------------
    def spmm(self, adj, x):
        return self.spmm_fused(adj, x)

    def spmm_fused(self, adj, x, alpha=1.0, acc=None, init=None, addend=None, beta=1.0, out_dtype=None):
        """As :meth:`Backend.spmm_fused`; ``x`` and ``out_dtype`` may be bfloat16 (bf16 rows: the
        sums in float32, see :func:`native.spmm`). A bfloat16 output is never column-blocked nor
        multiplied side by side (both keep float32 partial sums in the output)."""
        xn = _np(x)
        out_dtype = x.dtype if out_dtype is None else out_dtype
        out = buffers.empty((adj.n_rows, xn.shape[1]), out_dtype)
        on = _np(out)
        f = _acc_type(xn)
        vals, rs, cs = self._weights(adj, np.dtype(f))
        opt = lambda t: None if t is None else _np(t)  # noqa: E731
        tail = (f(alpha), None if acc is None else acc.numpy(), opt(init), opt(addend), f(beta))
        sides = self._sides(adj, x) if x.dtype == out_dtype != torch.bfloat16 else None
        if sides is not None:
            self._call(nk.spmm_sides, adj.indptr, adj.indices, rs, cs, xn, adj.sides, on, *sides, *tail)
            return out
        if out_dtype == torch.bfloat16:
            pos, b2 = None, self._bounds(adj)[None, :]
        else:
            pos, b2 = self._blocked(adj, xn.shape[1] * xn.itemsize)
        self._call(nk.spmm, adj.indptr, pos, adj.indices, vals, None, rs, cs, xn, on, b2, *tail)
        return out

    def spmm_rows(self, adj, x, rows, base, gamma, beta):
        """As :meth:`Backend.spmm_rows`; only the rows' entries are read (:func:`native.spmm_rows`)."""
        xn = _np(x)
        f = _acc_type(xn)
        vals, rs, cs = self._weights(adj, np.dtype(f))
        out = buffers.empty((rows.shape[0], xn.shape[1]), base.dtype)
        rn = _np(rows)
        bounds = nk.rows_chunks(adj.indptr, rn, nk.threads())
        self._call(nk.spmm_rows, adj.indptr, adj.indices, vals, rs, cs, xn, rn, _np(base), f(gamma), f(beta),
                   out.numpy(), bounds)
        return out

    def spmm_scatter_rows(self, adj, g, rows, alpha, addend, beta):
        """As :meth:`Backend.spmm_scatter_rows`; a scatter from the rows' entries of ``adj``, each thread
        owning a range of output rows (:func:`native.spmm_scatter_rows`). ``g`` may be bfloat16; the
        result has ``addend``'s float dtype."""
        gn = _np(g)
        f = _acc_type(gn)
        vals, rs, cs = self._weights(adj, np.dtype(f))
        out = buffers.empty((adj.n_cols, gn.shape[1]), addend.dtype)
        aux, th = _aux(adj), nk.threads()
        parts = aux.get(("parts", th))
        if parts is None:
            parts = aux[("parts", th)] = nk.row_chunks(adj.indptr, th)
        self._call(nk.spmm_scatter_rows, adj.indptr, adj.indices, vals, rs, cs, gn, _np(rows), f(alpha),
                   _np(addend), f(beta), out.numpy(), parts)
        return out

    def narrow(self, x):
        """``x`` (float32) rounded to bfloat16, ties to even (:func:`native.bf16_narrow`)."""
        xn = _np(x)
        out = buffers.empty(tuple(xn.shape), torch.bfloat16)
        self._call(nk.bf16_narrow, xn, _np(out))
        return out

    @staticmethod
    def _sides(adj, x: torch.Tensor):
        """``(part, bounds)`` for :func:`native.spmm_sides` when ``adj`` is a symmetric bipartite
        matrix weighted by one degree scale whose gathered table exceeds
        :data:`native.SIDES_MIN_BYTES`, else None. The parts (one per thread, each as large as
        the item side's table) are kept with the matrix (``aux["sides"]``, one at a time) and
        reused by every product of that width and thread count."""
        if not (adj.sides and adj.symmetric and adj.values is None and adj.row_scale is adj.col_scale
                and adj.n_cols * x.shape[1] * x.element_size() > nk.SIDES_MIN_BYTES):
            return None
        th, aux = nk.threads(), _aux(adj)
        want = (th, x.shape[1], x.dtype)
        lay = aux.get("sides")
        if lay is None or lay[0] != want:
            aux.pop("sides", None)      # released before the new one is taken
            part = buffers.empty((th, adj.n_rows - adj.sides, x.shape[1]), x.dtype)
            lay = aux["sides"] = (want, part, nk.sides_bounds(adj.indptr, adj.sides, th))
        return lay[1].numpy(), lay[2]

    def _blocked(self, adj, row_bytes: int, transposed: bool = False):
        """``(pos, bounds)`` of the column blocks of ``adj`` (or of its transposed structure)
        for gathered rows of ``row_bytes`` (``pos`` None: one block), cached per block count.
        Rows with unsorted columns (sampled blocks) are not blocked."""
        if transposed:
            indptr, indices, _, bounds = self._tstruct(adj)
            n_cols, tag = adj.n_rows, "t"
        else:
            indptr, indices, bounds, n_cols, tag = adj.indptr, adj.indices, self._bounds(adj), adj.n_cols, ""
        nb = nk.col_block_count(n_cols, row_bytes)
        aux = _aux(adj)
        if nb > 1 and aux.get(("rows_sorted", tag)) is None:
            aux[("rows_sorted", tag)] = nk.rows_sorted(indptr, indices)
        if nb == 1 or not aux[("rows_sorted", tag)]:
            return None, bounds[None, :]
        key = ("colblocks", tag, nb, nk.threads())
        lay = aux.get(key)
        if lay is None:
            lay = aux[key] = nk.col_blocks(indptr, indices, n_cols, nb,
                                                 nk.work_chunk_count(len(indices) // nb, nk.threads()))
        return lay

    def spmm_edge(self, adj, m):
        mn = _np(m)
        out = buffers.empty((adj.n_rows, mn.shape[1]), m.dtype)
        vals, rs, cs = self._weights(adj, mn.dtype)
        self._call(nk.edge_aggregate, adj.indptr, adj.indices, vals, rs, cs, mn, None, None, out.numpy(),
                   self._bounds(adj))
        return out

    def edge_broadcast(self, adj, g):
        gn = _np(g)
        out = buffers.empty((adj.nnz, gn.shape[1]), g.dtype)
        vals, rs, cs = self._weights(adj, gn.dtype)
        self._call(nk.edge_broadcast, adj.indptr, adj.indices, vals, rs, cs, gn, out.numpy(), self._bounds(adj))
        return out

    def sddmm(self, adj, u, v, op):
        un, vn = _np(u), _np(v)
        if op == "dot":
            out = buffers.empty((adj.nnz,), u.dtype)
            pos, b2 = self._blocked(adj, vn.shape[1] * vn.itemsize)
            self._call(nk.sddmm_dot, adj.indptr, pos, adj.indices, un, vn, out.numpy(), b2)
        else:
            out = buffers.empty((adj.nnz, un.shape[1]), u.dtype)
            self._call(nk.sddmm_mul, adj.indptr, adj.indices, un, vn, out.numpy(), self._bounds(adj))
        return out

    def sddmm_grads(self, adj, op, g, u, v, need_u, need_v):
        gn, un, vn = _np(g), _np(u), _np(v)
        D = un.shape[1]
        gu = gv = None
        if need_u:
            gu = buffers.empty((adj.n_rows, D), u.dtype)
            if op == "dot":
                pos, b2 = self._blocked(adj, D * vn.itemsize)
                self._call(nk.spmm, adj.indptr, pos, adj.indices, gn, None, None, None, vn, gu.numpy(), b2,
                           *_plain(un.dtype))
            else:
                self._call(nk.edge_aggregate, adj.indptr, adj.indices, None, None, None, gn, None, vn, gu.numpy(),
                           self._bounds(adj))
        if need_v:
            t_indptr, t_rows, perm, tb = self._tstruct(adj)
            gv = buffers.empty((adj.n_cols, D), v.dtype)
            if op == "dot":
                # g put into the transposed order first (one streaming pass, ~7 ms on 5M entries)
                # rather than read through perm inside the gather loop: the dependent random
                # load per edge there cost ~17 ms (grad v 43 -> 26 + 7 ms, 200k nodes, D=64)
                gt = self._call(nk.permute_values, gn, perm, buffers.empty(gn.shape, g.dtype).numpy())
                pos, b2 = self._blocked(adj, D * un.itemsize, transposed=True)
                self._call(nk.spmm, t_indptr, pos, t_rows, gt, None, None, None, un, gv.numpy(), b2,
                           *_plain(un.dtype))
            else:
                self._call(nk.edge_aggregate, t_indptr, t_rows, None, None, None, gn, perm, un, gv.numpy(), tb)
        return gu, gv

    def bpr_rows(self, out, u, p, n, off=0):
        g = buffers.zeros(out.shape, out.dtype)
        loss = self._call(nk.bpr_rows, _np(out), _np(u), _np(p), _np(n), int(off), g.numpy(),
                          nk.row_parts(out.shape[0], nk.threads()))
        return loss, g

    def sq_norm_rows(self, table, rows, coef, off=0, g=None, grad=True):
        """``(coef/2 * sum ||table[j]||^2, gradient)`` over ``rows = (u, p, n)`` index tensors, ``off``
        added to ``p`` and ``n``; the gradient ``coef * table[j]`` is added into ``g`` (a new zeroed
        table when None); ``grad`` False: the value only (gradient None)."""
        if grad and g is None:
            g = buffers.zeros(table.shape, table.dtype)
        tn = _np(table)
        u, p, n = (_np(r) for r in rows)
        val = self._call(nk.sq_norm_rows, tn, u, p, n, int(off), tn.dtype.type(coef), g.numpy() if grad else None,
                         nk.row_parts(tn.shape[0], nk.threads()))
        return val, g

    def gather(self, table, idx):
        tn, ix = _np(table), _np(idx)
        out = buffers.empty((ix.shape[0], tn.shape[1]), table.dtype)
        self._call(nk.gather_rows, tn, ix, out.numpy())
        return out

    def scatter_add(self, idx, src, n_rows):
        sn, ix = _np(src), _np(idx)
        D = sn.shape[1]
        out = buffers.zeros((n_rows, D), src.dtype)
        blocks = np.unique(np.linspace(0, D, min(nk.threads(), max(D, 1)) + 1).astype(np.int64))
        self._call(nk.scatter_add_rows, ix, sn, out.numpy(), blocks)
        return out


class TorchBackend(Backend):
    """torch.sparse CSR products and index ops, for comparison."""

    name = "torch"

    @staticmethod
    def _csr(adj, dtype):
        aux = _aux(adj)
        t = aux.get(("torch_csr", dtype))
        if t is None:
            w = torch.from_numpy(adj.edge_weights()).to(dtype)
            with warnings.catch_warnings():  # "sparse CSR support is in beta": we know
                warnings.simplefilter("ignore", UserWarning)
                t = aux[("torch_csr", dtype)] = torch.sparse_csr_tensor(
                    torch.from_numpy(adj.indptr.astype(np.int64)), torch.from_numpy(adj.indices.astype(np.int64)),
                    w, size=(adj.n_rows, adj.n_cols), check_invariants=False)
        return t

    @staticmethod
    def _coo(adj):
        aux = _aux(adj)
        t = aux.get("torch_coo")
        if t is None:
            t = aux["torch_coo"] = (torch.from_numpy(adj.row_ids().astype(np.int64)),
                                    torch.from_numpy(adj.indices.astype(np.int64)))
        return t

    @staticmethod
    def _w(adj, dtype):
        aux = _aux(adj)
        w = aux.get(("torch_w", dtype))
        if w is None:
            w = aux[("torch_w", dtype)] = torch.from_numpy(adj.edge_weights()).to(dtype)
        return w

    def spmm(self, adj, x):
        return torch.sparse.mm(self._csr(adj, x.dtype), x.detach())

    def spmm_edge(self, adj, m):
        rows, _ = self._coo(adj)
        out = torch.zeros((adj.n_rows, m.shape[1]), dtype=m.dtype)
        return out.index_add_(0, rows, m.detach() * self._w(adj, m.dtype)[:, None])

    def edge_broadcast(self, adj, g):
        rows, _ = self._coo(adj)
        return g.detach().index_select(0, rows) * self._w(adj, g.dtype)[:, None]

    def sddmm(self, adj, u, v, op):
        rows, cols = self._coo(adj)
        prod = u.detach().index_select(0, rows) * v.detach().index_select(0, cols)
        return prod.sum(1) if op == "dot" else prod

    def sddmm_grads(self, adj, op, g, u, v, need_u, need_v):
        rows, cols = self._coo(adj)
        g = g.detach()
        ge = g[:, None] if op == "dot" else g
        gu = gv = None
        if need_u:
            gu = torch.zeros((adj.n_rows, u.shape[1]), dtype=u.dtype).index_add_(
                0, rows, ge * v.detach().index_select(0, cols))
        if need_v:
            gv = torch.zeros((adj.n_cols, v.shape[1]), dtype=v.dtype).index_add_(
                0, cols, ge * u.detach().index_select(0, rows))
        return gu, gv

    def bpr_rows(self, out, u, p, n, off=0):
        o = out.detach()
        u, p, n = u.long(), p.long() + off, n.long() + off
        ou, op, on = o[u], o[p], o[n]
        s = (ou * (op - on)).sum(1)
        loss = float(torch.nn.functional.softplus(-s).mean())
        gs = (-torch.sigmoid(-s) / u.shape[0])[:, None]
        g = torch.zeros_like(o)
        g.index_add_(0, u, gs * (op - on)).index_add_(0, p, gs * ou).index_add_(0, n, -gs * ou)
        return loss, g

    def sq_norm_rows(self, table, rows, coef, off=0, g=None, grad=True):
        t = table.detach()
        idx = torch.cat([rows[0].long()] + [r.long() + off for r in rows[1:]])
        sel = t[idx]
        if grad:
            g = torch.zeros_like(t) if g is None else g
            g.index_add_(0, idx, coef * sel)
        return 0.5 * coef * float(sel.double().pow(2).sum()), g

    def gather(self, table, idx):
        return table.detach().index_select(0, idx.long())

    def scatter_add(self, idx, src, n_rows):
        return torch.zeros((n_rows, src.shape[1]), dtype=src.dtype).index_add_(0, idx.long(), src.detach())


class DglBackend(TorchBackend):
    """DGL's CPU SpMM/SDDMM where DGL covers the operation, torch otherwise.

    SpMM runs on DGL's fast path (:data:`SPMM_FORMULATION`): ``W = diag(row_scale) A
    diag(col_scale)`` is applied as ``row_scale * copy_u_sum(A, col_scale * x)``, the
    symmetric normalisation folded into the input and output rows, so DGL's unweighted
    kernel does the sparse part. Passing the per-edge weights as an (nnz, 1) edge tensor
    to ``u_mul_e_sum`` instead is DGL's slow path (7x slower on a 4.7M-nnz graph); it is
    used only for a CSR with explicit per-edge ``values``. The graph is a one-relation
    bipartite DGL graph (source type = our columns, destination type = our rows) built
    from our CSR as its in-edge (CSC) structure, edge id e = our entry e, so no padding
    and no format conversion.

    Only constructed when ``import dgl`` works (DGL 2.1 needs torch <= 2.2.1: the
    ``make dgl`` lane, ``.venv-dgl``)."""

    name = "dgl"
    SPMM_FORMULATION = ("row_scale * dgl.ops.copy_u_sum(g, col_scale * x) (normalisation folded into "
                        "input and output rows; u_mul_e_sum only for per-edge values)")

    def __init__(self):
        import dgl  # noqa: F401  (ImportError here means: not available)
        self._dgl = dgl

    def _graph(self, adj):
        aux = _aux(adj)
        g = aux.get("dgl_graph")
        if g is None:
            indptr = torch.from_numpy(adj.indptr.astype(np.int64))
            indices = torch.from_numpy(adj.indices.astype(np.int64))
            eids = torch.arange(adj.nnz, dtype=torch.int64)
            # destination r receives from sources c in row r: our CSR is the graph's CSC
            g = aux["dgl_graph"] = self._dgl.heterograph(
                {("col", "e", "row"): ("csc", (indptr, indices, eids))},
                num_nodes_dict={"col": adj.n_cols, "row": adj.n_rows})
        return g

    @staticmethod
    def _scales(adj, dtype):
        """``(row_scale, col_scale, values)`` as torch tensors of ``dtype`` (None where absent)."""
        aux = _aux(adj)
        t = aux.get(("dgl_scales", dtype))
        if t is None:
            t = aux[("dgl_scales", dtype)] = tuple(
                None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(dtype)
                for a in (adj.row_scale, adj.col_scale, adj.values))
        return t

    def spmm(self, adj, x):
        rs, cs, vals = self._scales(adj, x.dtype)
        xs = x.detach()
        if cs is not None:
            xs = xs * cs[:, None]
        g = self._graph(adj)
        if vals is None:
            y = self._dgl.ops.copy_u_sum(g, xs)
        else:
            y = self._dgl.ops.u_mul_e_sum(g, xs, vals[:, None])
        if rs is not None:
            y.mul_(rs[:, None])
        return y

    def sddmm(self, adj, u, v, op):
        # out[e] = u[r_e] (op) v[c_e]: v lives on the sources (our columns), u on the destinations
        out = self._dgl.ops.gsddmm(self._graph(adj), "dot" if op == "dot" else "mul", v.detach(), u.detach(),
                                   lhs_target="u", rhs_target="v")
        return out.reshape(adj.nnz) if op == "dot" else out

    def copy_u_sum_raw(self, adj, x):
        """DGL's own unweighted ``copy_u_sum`` on ``adj``'s structure (no normalisation): the
        reference the benchmark holds this backend's SpMM against."""
        return self._dgl.ops.copy_u_sum(self._graph(adj), x.detach())


BACKEND_CLASSES = {"native": NativeBackend, "torch": TorchBackend, "dgl": DglBackend}
