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


class BipartiteGraph:
    """User-item graph built from training interactions.

    Attributes: ``n_users``, ``n_items``, ``n_nodes``, ``adj`` (normalised
    symmetric CSR over all nodes), ``user_items`` (CSR users x items, unweighted,
    for negative sampling and masking train items in evaluation).
    """

    def __init__(self, train: np.ndarray, n_users: int, n_items: int):
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
        self.adj = CSR(indptr, indices, self.n_nodes, self.n_nodes, None, d_inv_sqrt, d_inv_sqrt, symmetric=True)

    @property
    def n_train(self) -> int:
        return self.user_items.nnz

    def item_popularity(self) -> np.ndarray:
        return self.degree[self.n_users:]

    def footprint(self) -> dict:
        """Bytes by part: the propagation adjacency and the user->items index."""
        return {"adjacency": self.adj.footprint(), "user_items": self.user_items.footprint(),
                "degree": int(self.degree.nbytes)}

    def __repr__(self) -> str:
        return (f"BipartiteGraph(users={self.n_users:,}, items={self.n_items:,}, "
                f"interactions={self.n_train:,}, nnz={self.adj.nnz:,})")
