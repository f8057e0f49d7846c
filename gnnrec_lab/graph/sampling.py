"""Mini-batch sampling: BPR triples, k-hop neighbour sub-graphs, and a look-ahead prefetcher.

Everything here is seeded by a ``numpy.random.Generator`` the caller passes in,
so the same seed gives the same batches, negatives and sub-graphs -- which is
what lets a cache oracle know the future: the sampler can run ahead of
training (:class:`Prefetcher`) and the rows the next batches need are known
before they are trained on.

Node ids follow :class:`~gnnrec_lab.graph.bipartite.BipartiteGraph`: users ``0..n_users-1``,
items ``n_users..n_nodes-1``. BPR batches return item ids *without* the offset
(0..n_items-1), as the models index their item table.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Sequence

import numba
import numpy as np

from gnnrec_lab.config.run import SAMPLERS
from gnnrec_lab.graph.bipartite import CSR, BipartiteGraph
from gnnrec_lab.util.errors import UserError

# -- negative sampling -----------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _in_rows(indptr, indices, rows, cols):
    """out[k] = True when cols[k] is stored in row rows[k] (rows' indices sorted ascending)."""
    out = np.empty(rows.shape[0], dtype=np.bool_)
    for k in range(rows.shape[0]):
        lo = indptr[rows[k]]
        hi = indptr[rows[k] + 1]
        c = cols[k]
        while lo < hi:  # binary search in the sorted row
            mid = (lo + hi) >> 1
            if indices[mid] < c:
                lo = mid + 1
            else:
                hi = mid
        out[k] = lo < indptr[rows[k] + 1] and indices[lo] == c
    return out


def sample_negatives(user_items: CSR, users: np.ndarray, rng: np.random.Generator,
                     max_rounds: int = 1000) -> np.ndarray:
    """One uniformly random item *not* in each user's train items.

    ``user_items`` is the users x items CSR with each row's item ids sorted
    ascending (as :class:`BipartiteGraph` builds it). Rejection sampling,
    vectorised over all users at once: draw an item for everyone, re-draw only
    for those that hit a train item. Returns int64 item ids (0..n_items-1),
    one per entry of ``users``. Raises :class:`UserError` when a user has
    interacted with every item (no negative exists).
    """
    users = np.asarray(users, dtype=np.int64)
    n_items = int(user_items.n_cols)
    if users.size == 0:
        return np.empty(0, dtype=np.int64)
    deg = user_items.indptr[users + 1] - user_items.indptr[users]
    if np.any(deg >= n_items):
        bad = int(users[np.argmax(deg >= n_items)])
        raise UserError(f"user {bad} has interacted with all {n_items} items; no negative item exists")
    neg = rng.integers(0, n_items, size=users.shape[0], dtype=np.int64)
    todo = np.flatnonzero(_in_rows(user_items.indptr, user_items.indices, users, neg))
    rounds = 0
    while todo.size:
        rounds += 1
        if rounds > max_rounds:  # only reachable for users owning nearly every item
            raise UserError(f"negative sampling did not converge after {max_rounds} rounds "
                            f"(users with almost all {n_items} items)")
        neg[todo] = rng.integers(0, n_items, size=todo.shape[0], dtype=np.int64)
        again = _in_rows(user_items.indptr, user_items.indices, users[todo], neg[todo])
        todo = todo[again]
    return neg


def train_pairs(graph: BipartiteGraph) -> tuple[np.ndarray, np.ndarray]:
    """All training interactions as (users, items) int64 arrays, sorted by user then item."""
    ui = graph.user_items
    return ui.row_ids().astype(np.int64), ui.indices.astype(np.int64)


def user_uniform_pairs(graph: BipartiteGraph, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (user, positive item) pairs: each user uniformly at random among the users with a train
    item, each positive uniformly at random among that user's train items (int64 arrays)."""
    ui = graph.user_items
    indptr = np.asarray(ui.indptr, dtype=np.int64)
    deg = np.diff(indptr)
    active = np.flatnonzero(deg > 0)
    if active.size == 0:
        raise UserError("no user has a training interaction: nothing to sample")
    users = active[rng.integers(0, active.size, size=int(n))]
    offset = (rng.random(int(n)) * deg[users]).astype(np.int64)
    return users, np.asarray(ui.indices, dtype=np.int64)[indptr[users] + np.minimum(offset, deg[users] - 1)]


def bpr_batches(graph: BipartiteGraph, batch_size: int, rng: np.random.Generator,
                drop_last: bool = False, max_batches: Optional[int] = None, sampler: str = "interactions"
                ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One epoch of BPR triples ``(users, pos_items, neg_items)``, int64 arrays of ``batch_size``.

    An epoch is as many triples as there are training interactions. With ``sampler="interactions"``
    (the default) they are a seeded permutation of the training interactions; with ``"users"``
    (:data:`SAMPLERS`, :func:`user_uniform_pairs`) each draws its user uniformly. Negatives
    for the epoch are drawn up front (one vectorised call), so a batch
    costs a slice. Item ids are 0..n_items-1 (no user offset). The last batch
    is shorter unless ``drop_last``. ``max_batches`` caps the epoch (a run's
    ``max_steps_per_epoch``): negatives are then drawn only for the interactions
    the capped epoch uses (on synth-gowalla, drawing all 818k took ~90 ms before
    the first of 30 batches); an uncapped epoch draws exactly what it did before.
    """
    if int(batch_size) < 1:
        raise UserError(f"batch_size must be a positive integer, got {batch_size}")
    batch_size = int(batch_size)
    if sampler not in SAMPLERS:
        raise UserError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    n = int(graph.user_items.indices.shape[0])
    stop = (n // batch_size) * batch_size if drop_last else n
    if max_batches is not None:
        stop = min(stop, int(max_batches) * batch_size)
    if sampler == "users":
        users, items = user_uniform_pairs(graph, stop, rng)
    else:
        users, items = train_pairs(graph)
        perm = rng.permutation(n)
        users, items = users[perm[:stop]], items[perm[:stop]]
        del perm  # this generator lives for the whole epoch: do not keep 8 B per interaction for it
    negs = sample_negatives(graph.user_items, users, rng)
    for s in range(0, stop, batch_size):
        e = min(s + batch_size, stop)
        yield users[s:e], items[s:e], negs[s:e]


def batch_nodes(graph: BipartiteGraph, users: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Global node ids of a BPR batch (users, then items offset by ``n_users``), concatenated, not deduplicated."""
    off = graph.n_users
    return np.concatenate([np.asarray(users, np.int64), np.asarray(pos, np.int64) + off,
                           np.asarray(neg, np.int64) + off])


# -- k-hop neighbour sampling ----------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _sample_rows(indptr, indices, nodes, fanout, seed):
    """For each node, up to ``fanout`` distinct neighbour positions (all when degree <= fanout).

    Returns (counts per node, flat neighbour global ids). Distinctness by
    rejection against the picks so far: O(fanout^2) per node whatever its
    degree, which keeps hubs (degree in the thousands) cheap.
    """
    np.random.seed(seed)
    n = nodes.shape[0]
    counts = np.empty(n, dtype=np.int64)
    for k in range(n):
        d = indptr[nodes[k] + 1] - indptr[nodes[k]]
        counts[k] = d if d <= fanout else fanout
    total = 0
    for k in range(n):
        total += counts[k]
    out = np.empty(total, dtype=np.int64)
    pos = 0
    picks = np.empty(max(fanout, 1), dtype=np.int64)
    for k in range(n):
        start = indptr[nodes[k]]
        d = indptr[nodes[k] + 1] - start
        if d <= fanout:
            for j in range(d):
                out[pos + j] = indices[start + j]
        else:
            m = 0
            while m < fanout:
                c = np.random.randint(0, d)
                dup = False
                for j in range(m):
                    if picks[j] == c:
                        dup = True
                        break
                if not dup:
                    picks[m] = c
                    m += 1
            for j in range(fanout):
                out[pos + j] = indices[start + picks[j]]
        pos += counts[k]
    return counts, out


@dataclass
class SubGraph:
    """The k-hop sub-graph sampled around a batch's seed nodes.

    ``nodes`` holds global node ids in local-id order; the nodes of hop ``h``
    are the prefix ``nodes[:n_nodes_hop[h]]`` (hop 0 = the distinct seeds).
    ``blocks[h]`` is the message-passing matrix of hop ``h+1``: a CSR with
    ``n_nodes_hop[h]`` rows (destination, local ids) and ``n_nodes_hop[h+1]``
    columns (sources, local ids). A model with ``k`` layers applies
    ``blocks[k-1]`` first and ``blocks[0]`` last, ending on the seeds.
    Edge weights estimate LightGCN's ``D^-1/2 A D^-1/2`` row without bias:
    ``d_dst^-1/2 * d_src^-1/2 * d_dst / k_dst`` with full-graph degrees ``d``
    and ``k_dst`` sampled neighbours (= 1/sqrt(d_dst d_src) when all are kept).
    """

    nodes: np.ndarray                 # int64 global ids, local-id order
    n_nodes_hop: list[int]            # nodes after each hop, hop 0 = seeds
    blocks: list[CSR]                 # blocks[h]: hop h+1 edges, rows = dst (hop h), cols = src (hop h+1)
    seed_index: np.ndarray            # for each input seed, its local id (seeds may repeat)
    build_seconds: float = 0.0        # measured wall time of sample_subgraph

    @property
    def n_seeds(self) -> int:
        return self.n_nodes_hop[0]

    @property
    def edges_per_layer(self) -> list[int]:
        """Sampled edges of each hop (hop 1 first)."""
        return [b.nnz for b in self.blocks]

    @property
    def nodes_per_layer(self) -> list[int]:
        """Distinct nodes after each hop, hop 0 (the seeds) first."""
        return list(self.n_nodes_hop)


def sample_subgraph(graph: BipartiteGraph, seed_nodes: np.ndarray, fanouts: Sequence[int],
                    rng: np.random.Generator) -> SubGraph:
    """Sample ``len(fanouts)`` hops around ``seed_nodes`` (global node ids).

    ``fanouts[0]`` is the first hop from the seeds (as in PyG's
    ``num_neighbors``). Each hop samples, independently and without
    replacement, up to ``fanouts[h]`` neighbours of *every* node reached so far
    (GraphSAGE/DGL semantics: each layer's destination set is the previous
    layer's full node set). A fan-out of ``-1`` keeps all neighbours.
    """
    t0 = time.perf_counter()
    seeds = np.asarray(seed_nodes, dtype=np.int64)
    if seeds.size and (seeds.min() < 0 or seeds.max() >= graph.n_nodes):
        raise UserError(f"seed_nodes must be global node ids in [0, {graph.n_nodes}), "
                        f"got range [{seeds.min()}, {seeds.max()}]")
    nodes, seed_index = np.unique(seeds, return_inverse=True)
    n_hop = [int(nodes.shape[0])]
    blocks: list[CSR] = []
    adj = graph.adj
    deg = graph.degree
    scale = adj.row_scale if adj.row_scale is not None else np.ones(graph.n_nodes, np.float32)
    max_deg = int(deg.max()) if deg.size else 0
    for h, f in enumerate(fanouts):
        f = int(f)
        if f == 0 or f < -1:
            raise UserError(f"fanouts[{h}] must be a positive integer or -1 (all neighbours), got {f}")
        fan = max_deg if f == -1 else f
        counts, nbrs = _sample_rows(adj.indptr, adj.indices, nodes, fan, int(rng.integers(2**31 - 1)))
        # local ids: existing nodes keep theirs, new ones are appended in ascending global id
        uniq, inv = np.unique(nbrs, return_inverse=True)
        order = np.argsort(nodes, kind="stable")
        sorted_nodes = nodes[order]
        pos = np.searchsorted(sorted_nodes, uniq)
        pos_c = np.minimum(pos, sorted_nodes.shape[0] - 1)
        known = sorted_nodes[pos_c] == uniq if sorted_nodes.size else np.zeros(uniq.shape, bool)
        local_of_uniq = np.empty(uniq.shape[0], dtype=np.int64)
        local_of_uniq[known] = order[pos_c[known]]
        new = uniq[~known]
        local_of_uniq[~known] = nodes.shape[0] + np.arange(new.shape[0])
        cols = local_of_uniq[inv]
        n_dst = nodes.shape[0]
        nodes = np.concatenate([nodes, new])
        indptr = np.zeros(n_dst + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        dst_global = nodes[:n_dst]
        k = np.maximum(counts, 1).astype(np.float32)
        row_scale = scale[dst_global] * (deg[dst_global].astype(np.float32) / k)
        blocks.append(CSR(indptr, cols.astype(np.int32 if nodes.shape[0] < 2**31 - 1 else np.int64),
                          n_dst, int(nodes.shape[0]), None,
                          row_scale.astype(np.float32), scale[nodes].astype(np.float32)))
        n_hop.append(int(nodes.shape[0]))
    return SubGraph(nodes, n_hop, blocks, seed_index.astype(np.int64), time.perf_counter() - t0)


def redundancy_factor(batches: Iterable) -> float:
    """Sum over batches of sampled nodes / number of distinct nodes over all batches.

    ``batches`` holds :class:`SubGraph` s or arrays of node ids (one per batch;
    ids within a batch are deduplicated first). 1.0 means no node was sampled
    twice in the epoch; the persistent-memory study blames values far above 1
    for the cost of distributed sub-graph training.
    """
    total = 0
    seen = []
    for b in batches:
        ids = b.nodes if isinstance(b, SubGraph) else np.unique(np.asarray(b))
        total += int(ids.shape[0])
        seen.append(ids)
    if not seen:
        return float("nan")
    distinct = int(np.unique(np.concatenate(seen)).shape[0])
    return total / distinct if distinct else float("nan")


# -- running the sampler ahead of training ------------------------------------------------------

_DONE = object()


class Prefetcher:
    """Runs an iterator (a sampler) in a background thread into a bounded buffer.

    Iterating yields the items in order. :meth:`window` returns the items
    already produced but not yet consumed -- the look-ahead an oracle cache
    uses to know which rows the next batches need (``window(fill=True)`` waits
    for a full buffer first, so that look-ahead does not depend on thread timing). ``depth`` bounds the buffer
    (items); the producer blocks when it is full. An exception raised by the
    producer is re-raised in the consumer. Use as a context manager or call
    :meth:`close` to stop the thread early.
    """

    def __init__(self, source: Iterable, depth: int = 8):
        if int(depth) < 1:
            raise UserError(f"prefetch depth must be a positive integer, got {depth}")
        self.depth = int(depth)
        self._buf: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._closed = False
        self._error: Optional[BaseException] = None
        self.wait_seconds = 0.0   # measured time the consumer spent waiting for the sampler
        self._thread = threading.Thread(target=self._run, args=(iter(source),), daemon=True,
                                        name="gnnrec-prefetch")
        self._thread.start()

    def _run(self, it: Iterator) -> None:
        try:
            for item in it:
                with self._cv:
                    while len(self._buf) >= self.depth and not self._closed:
                        self._cv.wait()
                    if self._closed:
                        return
                    self._buf.append(item)
                    self._cv.notify_all()
        except BaseException as e:  # handed to the consumer
            self._error = e
        with self._cv:
            self._buf.append(_DONE)
            self._cv.notify_all()

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self):
        t0 = time.perf_counter()
        with self._cv:
            while not self._buf:
                self._cv.wait()
            item = self._buf[0]
            if item is _DONE:
                self.wait_seconds += time.perf_counter() - t0
                if self._error is not None:
                    err, self._error = self._error, None
                    raise err
                raise StopIteration
            self._buf.popleft()
            self._cv.notify_all()
        self.wait_seconds += time.perf_counter() - t0
        return item

    def window(self, fill: bool = False) -> list:
        """Items produced and not yet consumed, oldest first (a snapshot).

        With ``fill``, first wait until the buffer is full (``depth`` items) or the producer has
        finished, so the snapshot holds ``depth`` items except at the end of the source, whatever
        the thread timing; the wait counts in :attr:`wait_seconds`.
        """
        t0 = time.perf_counter()
        with self._cv:
            if fill:
                while not (len(self._buf) >= self.depth or (self._buf and self._buf[-1] is _DONE)
                           or self._closed):
                    self._cv.wait()
                self.wait_seconds += time.perf_counter() - t0
            return [x for x in self._buf if x is not _DONE]

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=5)

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
