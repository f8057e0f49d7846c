"""Where sampled-mode training reads and updates embedding rows.

In sampled mini-batch mode a step touches only the rows of its sub-graph: it
*fetches* their layer-0 embeddings, and after backward *updates* them and their
Adam moments (row-sparse Adam). A row store hides where those rows live:

* :class:`DramRows` – the table and moments are ordinary (or file-backed)
  tensors, read and written in place;
* :class:`~gnnrec_lab.cache.cached_rows.CachedRows` – the table lives in a slow tier behind a small DRAM
  cache driven by a policy (LRU, LFU, static, look-ahead oracle).

Both implement :class:`RowStore`, the one interface training uses. All stores
produce bit-identical training (same rows, same arithmetic).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from gnnrec_lab import kernels
from gnnrec_lab.cache.cached_rows import make_cached_rows
from gnnrec_lab.memory.placement import allocate, place_of
from gnnrec_lab.models.optim import SparseRowAdam
from gnnrec_lab.util.recorder import get_recorder


@runtime_checkable
class RowStore(Protocol):
    """Where sampled-mode training fetches and updates the rows of the embedding table.

    Units and conventions shared by every method: ``batch`` is the training step
    (counted from 0 over the whole run, one per mini-batch, increasing); ``rows``
    is a 1-D CPU int64 tensor of *distinct* global node ids (users ``0..n_users-1``,
    then items offset by ``n_users``): row numbers of the ``(n_nodes, D)`` float32
    table. Per step, training calls :meth:`lookahead`, :meth:`fetch` and
    :meth:`update` in that order with the same ``batch`` and ``rows``; after an
    epoch :meth:`sync`; at the end :meth:`stats` and :meth:`close`.
    """

    def lookahead(self, future_rows: list) -> None:
        """A hint, given before :meth:`fetch` of ``batch``: ``future_rows[j]`` (int64 array of
        node ids) are the rows batch ``batch + 1 + j`` will need (batches the sampler has
        already produced). A store may prefetch them or ignore the hint; it changes no value."""

    def fetch(self, batch: int, rows: torch.Tensor) -> torch.Tensor:
        """The layer-0 embeddings of ``rows`` as a new ``(len(rows), D)`` float32 tensor (not a
        view of the store: the caller makes it require grad), row ``k`` for ``rows[k]``."""

    def update(self, batch: int, rows: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
        """One row-sparse Adam step on ``rows`` (the ``rows`` of :meth:`fetch` for this ``batch``):
        ``grad`` is the ``(len(rows), D)`` float32 gradient of the loss w.r.t. the fetched
        tensor, ``lr`` this step's learning rate (schedule applied). Moments live with the
        rows; the bias correction counts one step per call."""

    def sync(self, keep_future: bool = False) -> None:
        """Make the model's embedding table hold every update so far (before evaluation).
        ``keep_future``: the batches already given to :meth:`lookahead` will still be trained
        (the sampler runs on into the next epoch); otherwise they are forgotten."""

    def stats(self) -> dict:
        """Measured counters as a JSON-able dict (rows, bytes, seconds; empty when the store has
        nothing to report); training stores it under ``info["sampled"]["row_store"]``."""

    def close(self) -> None:
        """Release threads and files. A store that caches rows does not write back updates made
        since the last :meth:`sync`."""


class DramRows:
    """A :class:`RowStore` whose rows are read and updated in place in ``table`` (the model's
    embedding); the Adam moments ``m``, ``v`` are tensors of the same shape."""

    def __init__(self, table: torch.Tensor, lr: float, m: torch.Tensor | None = None,
                 v: torch.Tensor | None = None):
        self.table = table
        self.adam = SparseRowAdam(table, lr=lr, m=m, v=v)

    def lookahead(self, future_rows: list) -> None:
        """A DRAM table needs no hint."""

    def fetch(self, batch: int, rows: torch.Tensor) -> torch.Tensor:
        """A gather from ``table`` (recorded as a kernel)."""
        with torch.no_grad():
            return kernels.gather(self.table, rows, layer=0)

    def update(self, batch: int, rows: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
        """Row-sparse Adam in place on ``table``, ``m`` and ``v``."""
        row_bytes = self.table.shape[1] * self.table.element_size()
        n = len(rows)
        with get_recorder().timed("sparse_adam", bytes_read=4 * n * row_bytes, bytes_written=3 * n * row_bytes,
                                  flops=10 * grad.numel(), pattern="gather", row_bytes=row_bytes,
                                  random_bytes=7 * n * row_bytes, backend="torch"):
            self.adam.lr = lr
            self.adam.step(rows, grad)

    def sync(self, keep_future: bool = False) -> None:
        """Nothing to do: ``table`` is updated in place."""

    def stats(self) -> dict:
        """Nothing measured beyond the recorded kernels."""
        return {}

    def close(self) -> None:
        pass


def make_row_store(config, model, degrees) -> RowStore:
    """The row store ``config`` asks for: ``cache_policy`` none = :class:`DramRows`, stream = the
    slow tier read every batch, else the slow tier behind a DRAM cache with that policy.
    ``degrees``: the training graph's interactions per node (users, then items), which the
    static policy ranks rows by."""
    where = place_of(config, "optimizer")
    shape, dt = tuple(model.embedding.shape), model.embedding.dtype
    if config.cache_policy == "none":
        return DramRows(model.embedding.data, lr=config.effective_lr,
                        m=allocate(shape, dt, where, "optimizer"), v=allocate(shape, dt, where, "optimizer"))
    return make_cached_rows(config, model, degrees, policy="none" if config.cache_policy == "stream" else None)


__all__ = ["DramRows", "RowStore", "make_row_store"]
