"""The user-item bipartite graph.

Nodes are users ``0..n_users-1`` followed by items ``n_users..n_users+n_items-1``.
Every training interaction (u, i) becomes two directed edges u->i and i->u, so
the adjacency is symmetric. LightGCN and NGCF propagate with the symmetric
degree normalisation ``A_hat = D^-1/2 A D^-1/2``; that weight is derived from
two per-node vectors (``row_scale[r] * col_scale[c]``) instead of being stored
per edge, which saves ``4 * nnz`` bytes. NGCF's self-loop ``(A_hat + I)`` is
applied by the model as an extra ``+ x`` term rather than stored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


def _index_dtype(n: int):
    return np.int32 if n < 2**31 - 1 else np.int64


@dataclass
class CSR:
    """A compressed-sparse-row matrix with optional degree-derived weights.

    Weight of entry (r, c) stored at position e:
    ``(values[e] if values is not None else 1) * (row_scale[r] if row_scale is not None else 1)
    * (col_scale[c] if col_scale is not None else 1)``.
    """

    indptr: np.ndarray            # int64, n_rows + 1
    indices: np.ndarray           # int32 where it fits
    n_rows: int
    n_cols: int
    values: Optional[np.ndarray] = None     # float32 per edge
    row_scale: Optional[np.ndarray] = None  # float32 per row
    col_scale: Optional[np.ndarray] = None  # float32 per column
    symmetric: bool = False       # True when the weighted matrix equals its transpose
    # a bipartite matrix's first side: rows < sides (users) hold only columns >= sides (items) and
    # the other rows only columns < sides (0: not known to be bipartite)
    sides: int = 0
    # a locality order of a square matrix's nodes (position -> node, see :func:`locality_order`);
    # the kernels then propagate on ``permuted(order)`` and map the rows back (same results up to
    # float summation order)
    order: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    _local: Optional[tuple] = field(default=None, repr=False, compare=False)
    _t: Optional["CSR"] = field(default=None, repr=False, compare=False)
    _t_perm: Optional[np.ndarray] = field(default=None, repr=False, compare=False)

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def index_bytes(self) -> int:
        return int(self.indices.dtype.itemsize)

    def row_ids(self) -> np.ndarray:
        """Row of every stored entry (COO rows), int32/int64 like indices."""
        deg = np.diff(self.indptr)
        return np.repeat(np.arange(self.n_rows, dtype=self.indices.dtype), deg)

    def edge_weights(self) -> np.ndarray:
        """Materialised per-entry weight, float32 (for reference backends and tests)."""
        w = np.ones(self.nnz, dtype=np.float32) if self.values is None else self.values.astype(np.float32, copy=True)
        if self.row_scale is not None:
            w *= self.row_scale[self.row_ids()]
        if self.col_scale is not None:
            w *= self.col_scale[self.indices]
        return w

    def transpose(self) -> "CSR":
        """The transposed matrix (cached). ``transpose_perm()`` maps its entries to ours."""
        if self.symmetric:
            return self
        if self._t is None:
            rows = self.row_ids()
            perm = np.argsort(self.indices, kind="stable")
            counts = np.bincount(self.indices, minlength=self.n_cols)
            indptr = np.zeros(self.n_cols + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            t = CSR(indptr, rows[perm].astype(_index_dtype(self.n_rows)), self.n_cols, self.n_rows,
                    None if self.values is None else self.values[perm],
                    self.col_scale, self.row_scale)
            t._t, t._t_perm = self, np.argsort(perm, kind="stable")
            self._t, self._t_perm = t, perm
        return self._t

    def transpose_perm(self) -> np.ndarray:
        """For entry k of ``transpose()``, the position of the same entry in this matrix."""
        if self.symmetric:
            raise ValueError("a symmetric CSR is its own transpose; its entry permutation is not kept")
        self.transpose()
        return self._t_perm

    def footprint(self) -> int:
        """Bytes held by this matrix's arrays."""
        n = self.indptr.nbytes + self.indices.nbytes
        seen = set()
        for a in (self.values, self.row_scale, self.col_scale):
            if a is not None and id(a) not in seen:  # a symmetric matrix shares one scale array
                seen.add(id(a))
                n += a.nbytes
        return int(n)

    def set_order(self, order: Optional[np.ndarray]) -> None:
        """Attach a locality order (position -> node; None detaches) and build ``permuted(order)``
        now, so the kernels' first propagation does not pay for it (the permuted structure costs
        ``8 (n+1) + index_bytes * nnz`` bytes more). A bipartite matrix (:attr:`sides`) keeps its
        sides: :attr:`order` becomes the given order's users, then its items, each in that
        order's sequence, so the permuted matrix is bipartite too (see ``kernels.native.spmm_sides``)."""
        if order is None:
            self.order, self._local = None, None
            return
        import torch
        order = np.ascontiguousarray(order)
        if order.shape != (self.n_rows,) or self.n_rows != self.n_cols:
            raise ValueError(f"set_order: needs {self.n_rows} positions of a square matrix, got {order.shape}")
        if not np.array_equal(np.sort(order), np.arange(self.n_rows)):
            raise ValueError("set_order: order is not a permutation of the nodes")
        if self.sides:  # a bipartite matrix keeps its sides: the order's users first, then its items
            first = order < self.sides
            order = np.concatenate([order[first], order[~first]])
        inv = inverse_permutation(order)
        self.order = order
        self._local = (self.permuted(order), torch.from_numpy(order.astype(np.int64)), torch.from_numpy(inv))

    def permuted(self, perm: np.ndarray) -> "CSR":
        """``P W P^T`` for a square matrix: row and column ``k`` of the result are node ``perm[k]``
        (each row's columns sorted ascending). The kernels run LightGCN's propagation on this
        form when the CSR carries a locality :attr:`order`; per-edge ``values`` are not supported
        (the lab's adjacency derives its weights from the degree scales)."""
        if self.n_rows != self.n_cols:
            raise ValueError(f"permuted: needs a square matrix, got {self.n_rows}x{self.n_cols}")
        if self.values is not None:
            raise ValueError("permuted: per-edge values are not supported")
        perm = np.asarray(perm)
        if perm.shape != (self.n_rows,):
            raise ValueError(f"permuted: perm must have {self.n_rows} entries, got {perm.shape}")
        from gnnrec_lab.graph import reorder
        inv = inverse_permutation(perm)
        deg = np.diff(self.indptr)[perm]
        indptr = np.zeros(self.n_rows + 1, dtype=np.int64)
        np.cumsum(deg, out=indptr[1:])
        indices = np.empty_like(self.indices)
        reorder.permute_csr(self.indptr, self.indices, perm, inv.astype(self.indices.dtype, copy=False), indptr,
                            indices)
        rs = None if self.row_scale is None else self.row_scale[perm]
        cs = rs if self.col_scale is self.row_scale else (None if self.col_scale is None else self.col_scale[perm])
        sides = self.sides if self.sides and bool((perm[:self.sides] < self.sides).all()) else 0
        return CSR(indptr, indices, self.n_rows, self.n_cols, None, rs, cs, symmetric=self.symmetric, sides=sides)

    def to_torch_sparse(self):
        """A ``torch.sparse_csr_tensor`` with materialised weights (float32)."""
        import torch
        return torch.sparse_csr_tensor(torch.from_numpy(self.indptr.astype(np.int64)),
                                       torch.from_numpy(self.indices.astype(np.int64)),
                                       torch.from_numpy(self.edge_weights()),
                                       size=(self.n_rows, self.n_cols), check_invariants=False)

    def to_scipy(self):
        import scipy.sparse as sp
        return sp.csr_matrix((self.edge_weights(), self.indices, self.indptr), shape=(self.n_rows, self.n_cols))


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """``inv`` with ``inv[perm[k]] = k`` (int64)."""
    inv = np.empty(perm.shape[0], dtype=np.int64)
    inv[perm] = np.arange(perm.shape[0], dtype=np.int64)
    return inv


ORDER_METHODS = ("community", "degree")
# Hubs placed first: the highest-degree nodes, at most this many (8 MiB of rows at D=64, so they
# stay in the last-level cache whatever else is gathered), each with degree >= HUB_DEGREE x mean.
HUB_ROWS = 32768
HUB_DEGREE = 4.0
LPA_ROUNDS = 10


def locality_order(adj: CSR, method: str = "community", seed: int = 0) -> np.ndarray:
    """A node order (position -> node, int32/int64 like the indices) of the square CSR ``adj`` for
    gather locality:

    * ``"degree"``: nodes by degree, descending (hubs first);
    * ``"community"``: the hubs first (see :data:`HUB_ROWS`), then the other nodes grouped by
      the community label propagation finds (hubs excluded from the vote), a community's
      nodes in id order: rows of one community then gather mostly from one short range of
      columns, which stays in cache, and the hubs' rows are shared by all.

    Deterministic for a given ``seed``."""
    if method not in ORDER_METHODS:
        raise ValueError(f"locality_order method: got {method!r}, allowed: {', '.join(ORDER_METHODS)}")
    if adj.n_rows != adj.n_cols:
        raise ValueError(f"locality_order: needs a square matrix, got {adj.n_rows}x{adj.n_cols}")
    n = adj.n_rows
    dt = adj.indices.dtype
    deg = np.diff(adj.indptr)
    by_degree = np.argsort(-deg, kind="stable")
    if method == "degree" or n == 0:
        return by_degree.astype(dt)
    from gnnrec_lab.graph import reorder
    mean = adj.nnz / max(n, 1)
    n_hub = int(min(HUB_ROWS, np.count_nonzero(deg >= HUB_DEGREE * mean)))
    hubs = by_degree[:n_hub]
    skip = np.zeros(n, dtype=np.bool_)
    skip[hubs] = True
    labels = np.arange(n, dtype=np.int64)
    visit = np.random.default_rng(seed).permutation(n).astype(np.int64)
    reorder.label_propagation(adj.indptr, adj.indices, visit, skip, labels, LPA_ROUNDS, max(1, n // 1000))
    del visit
    labels[hubs] = -1
    rest = np.lexsort((np.arange(n), labels))[n_hub:]  # the hubs sort first (-1); the rest by label, then id
    return np.concatenate([hubs, rest]).astype(dt)


class BipartiteGraph:
    """User-item graph built from training interactions.

    Attributes: ``n_users``, ``n_items``, ``n_nodes``, ``adj`` (normalised
    symmetric CSR over all nodes), ``user_items`` (CSR users x items, unweighted,
    for negative sampling and masking train items in evaluation).
    """

    def __init__(self, train: np.ndarray, n_users: int, n_items: int, node_order: Optional[np.ndarray] = None):
        """``node_order``: a locality order of the ``n_users + n_items`` nodes (see
        :func:`locality_order`; a dataset's ``node_order``) attached to ``adj``."""
        train = np.asarray(train)
        if train.ndim != 2 or train.shape[1] != 2:
            raise ValueError(f"train interactions must have shape (n, 2), got {train.shape}")
        self.n_users, self.n_items = int(n_users), int(n_items)
        self.n_nodes = self.n_users + self.n_items
        idx_t = _index_dtype(self.n_nodes)
        # sort keys stay in the input's integer type (int32 for every dataset here): int64
        # copies of both columns cost 16 B per interaction at the build peak for nothing
        u, i = train[:, 0], train[:, 1]
        if u.dtype.kind not in "iu":
            u, i = u.astype(np.int64), i.astype(np.int64)

        # users x items CSR (sorted by user, then item) -- also the user half of adj
        order = np.lexsort((i, u))
        i_sorted = i[order].astype(_index_dtype(self.n_items), copy=False)
        del order
        ucount = np.bincount(u, minlength=self.n_users)   # counts need no sorting
        uptr = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(ucount, out=uptr[1:])
        self.user_items = CSR(uptr, i_sorted, self.n_users, self.n_items)

        icount = np.bincount(i, minlength=self.n_items)
        deg = np.concatenate([ucount, icount]).astype(np.int64)
        indptr = np.zeros(self.n_nodes + 1, dtype=np.int64)
        np.cumsum(deg, out=indptr[1:])
        nnz = int(indptr[-1])
        indices = np.empty(nnz, dtype=idx_t)
        half = int(uptr[-1])
        # item node ids written in place (no int64 temporary of i_sorted + n_users)
        np.add(i_sorted, self.n_users, out=indices[:half], dtype=idx_t)
        order = np.lexsort((u, i))          # items x users, the item half of adj
        indices[half:] = u[order]
        del order
        with np.errstate(divide="ignore"):
            d_inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1)), 0.0).astype(np.float32)
        self.degree = deg
        self.adj = CSR(indptr, indices, self.n_nodes, self.n_nodes, None, d_inv_sqrt, d_inv_sqrt, symmetric=True,
                       sides=self.n_users)
        if node_order is not None:
            self.adj.set_order(node_order)

    @property
    def n_train(self) -> int:
        return self.user_items.nnz

    def item_popularity(self) -> np.ndarray:
        return self.degree[self.n_users:]

    def footprint(self) -> dict:
        """Bytes by part: the propagation adjacency and the user->items index."""
        adj = self.adj.footprint() + (0 if self.adj._local is None else self.adj._local[0].footprint())
        return {"adjacency": adj, "user_items": self.user_items.footprint(),
                "degree": int(self.degree.nbytes)}

    def __repr__(self) -> str:
        return (f"BipartiteGraph(users={self.n_users:,}, items={self.n_items:,}, "
                f"interactions={self.n_train:,}, nnz={self.adj.nnz:,})")
