"""Embedding-row access traces: which rows of the embedding table each mini-batch touches.

A trace is the sequence of batches in training order; batch ``b`` needs the
distinct rows ``rows[offsets[b]:offsets[b+1]]`` resident while it trains (a
row read twice inside one batch is fetched once). Row ids are global node ids
(users first, items offset by ``n_users``), i.e. rows of the one embedding
table LightGCN/MF keep for all nodes.

Two sources:
- sampled sub-graph mini-batches (a k-layer GNN touches every node of the
  batch's k-hop sub-graph);
- plain BPR batches for a 0-layer model (matrix factorisation touches the
  batch's users, positive and negative items).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np

from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.graph.sampling import batch_nodes, bpr_batches, redundancy_factor, sample_subgraph
from gnnrec_lab.util.errors import UserError


@dataclass
class Trace:
    """Flat row ids (int64, distinct within each batch) and batch offsets (int64, n_batches+1)."""

    rows: np.ndarray
    offsets: np.ndarray
    n_rows: int                   # rows in the embedding table
    source: str = ""              # how it was made, e.g. "mf" or "lightgcn fanouts=10,10"
    stats: dict = field(default_factory=dict)   # sampling stats (redundancy, nodes/edges per layer, seconds)

    def __post_init__(self):
        self.rows = np.ascontiguousarray(self.rows, dtype=np.int64)
        self.offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        if self.offsets.ndim != 1 or self.offsets.size < 1 or self.offsets[0] != 0 \
                or self.offsets[-1] != self.rows.size or np.any(np.diff(self.offsets) < 0):
            raise ValueError("offsets must start at 0, be non-decreasing and end at len(rows)")
        if self.rows.size and (self.rows.min() < 0 or self.rows.max() >= self.n_rows):
            raise ValueError(f"row ids must lie in [0, {self.n_rows})")

    @classmethod
    def from_batches(cls, batches: Iterable[np.ndarray], n_rows: int, source: str = "",
                     stats: Optional[dict] = None) -> "Trace":
        """Build from one array of row ids per batch; duplicates inside a batch are dropped."""
        parts = [np.unique(np.asarray(b, dtype=np.int64)) for b in batches]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([p.size for p in parts], out=offsets[1:])
        rows = np.concatenate(parts) if parts else np.empty(0, np.int64)
        return cls(rows, offsets, int(n_rows), source, dict(stats or {}))

    @property
    def n_batches(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def n_accesses(self) -> int:
        return int(self.rows.size)

    def batch(self, b: int) -> np.ndarray:
        return self.rows[self.offsets[b]:self.offsets[b + 1]]

    def batch_sizes(self) -> np.ndarray:
        """Distinct rows per batch (int64)."""
        return np.diff(self.offsets)

    def max_batch_rows(self) -> int:
        return int(self.batch_sizes().max()) if self.n_batches else 0

    def counts(self) -> np.ndarray:
        """Accesses per table row (int64, length n_rows)."""
        return np.bincount(self.rows, minlength=self.n_rows)

    def __repr__(self) -> str:
        return (f"Trace({self.source or 'trace'}: {self.n_batches:,} batches, {self.n_accesses:,} accesses, "
                f"{self.n_rows:,} table rows)")


def _check_common(batch_size, epochs):
    if int(batch_size) < 1:
        raise UserError(f"batch-size must be a positive integer, got {batch_size}")
    if int(epochs) < 1:
        raise UserError(f"epochs must be a positive integer, got {epochs}")


def mf_trace(graph: BipartiteGraph, batch_size: int, epochs: int = 1, seed: int = 0) -> Trace:
    """Rows a 0-layer model (matrix factorisation) touches: each BPR batch's users, positives, negatives."""
    _check_common(batch_size, epochs)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(int(epochs)):
        for u, p, n in bpr_batches(graph, batch_size, rng):
            batches.append(batch_nodes(graph, u, p, n))
    return Trace.from_batches(batches, graph.n_nodes, "mf")


def sampled_trace(graph: BipartiteGraph, batch_size: int, fanouts: Sequence[int], epochs: int = 1,
                  seed: int = 0) -> Trace:
    """Rows a ``len(fanouts)``-layer GNN touches per sampled sub-graph mini-batch.

    ``stats`` records the epoch-average redundancy factor, mean distinct nodes
    and sampled edges per hop, and the measured sub-graph build seconds.
    """
    _check_common(batch_size, epochs)
    if not len(fanouts):
        raise UserError("fanouts must name at least one layer (use model mf for 0 layers)")
    rng = np.random.default_rng(seed)
    batches, redund, nodes_hop, edges_hop, secs = [], [], [], [], 0.0
    for _ in range(int(epochs)):
        epoch_nodes = []
        for u, p, n in bpr_batches(graph, batch_size, rng):
            sg = sample_subgraph(graph, batch_nodes(graph, u, p, n), fanouts, rng)
            batches.append(sg.nodes)
            epoch_nodes.append(sg.nodes)
            nodes_hop.append(sg.nodes_per_layer)
            edges_hop.append(sg.edges_per_layer)
            secs += sg.build_seconds
        redund.append(redundancy_factor(epoch_nodes))
    stats = {"redundancy_factor": float(np.mean(redund)),
             "mean_nodes_per_hop": np.mean(np.array(nodes_hop, float), axis=0).tolist(),
             "mean_edges_per_hop": np.mean(np.array(edges_hop, float), axis=0).tolist(),
             "subgraph_build_seconds_measured": secs}
    fan = ",".join(str(int(f)) for f in fanouts)
    return Trace.from_batches(batches, graph.n_nodes, f"sampled fanouts={fan}", stats)


def skew(trace: Trace, fractions: Sequence[float] = (0.001, 0.01, 0.1)) -> dict:
    """Share of accesses taken by the most-accessed fraction of table rows.

    Keys ``top0.1pct_share``, ``top1pct_share``, ``top10pct_share`` (0..1) for
    the default fractions, plus ``rows_touched_share`` (rows accessed at least
    once / table rows), ``accesses``, ``batches``, ``mean_rows_per_batch`` and
    ``max_rows_per_batch``. Fractions are of the whole table (``n_rows``), the
    convention of BagPipe's "1% of rows take >90% of accesses".
    """
    counts = np.sort(trace.counts())[::-1]
    total = counts.sum()
    out = {}
    for f in fractions:
        k = max(1, int(round(f * trace.n_rows)))
        pct = f * 100
        label = f"top{pct:g}pct_share"
        out[label] = float(counts[:k].sum() / total) if total else float("nan")
    out["rows_touched_share"] = float((counts > 0).sum() / trace.n_rows) if trace.n_rows else float("nan")
    out["accesses"] = int(total)
    out["batches"] = trace.n_batches
    sizes = trace.batch_sizes()
    out["mean_rows_per_batch"] = float(sizes.mean()) if sizes.size else 0.0
    out["max_rows_per_batch"] = int(sizes.max()) if sizes.size else 0
    return out
