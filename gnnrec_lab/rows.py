"""Where sampled-mode training reads and updates embedding rows.

In sampled mini-batch mode a step touches only the rows of its sub-graph: it
*fetches* their layer-0 embeddings, and after backward *updates* them and their
Adam moments (row-sparse Adam). A row store hides where those rows live:

* :class:`DramRows` – the table and moments are ordinary (or file-backed)
  tensors, read and written in place;
* :class:`~gnnrec_lab.cache.cached_rows.CachedRows` – the table lives in a slow tier behind a small DRAM
  cache driven by a policy (LRU, LFU, static, look-ahead oracle).

All stores produce bit-identical training (same rows, same arithmetic).
"""
from __future__ import annotations

import torch

from . import kernels
from .optim import SparseRowAdam
from .recorder import get_recorder


class DramRows:
    """Rows read and updated in place in ``table`` (the model's embedding)."""

    def __init__(self, table: torch.Tensor, lr: float, m: torch.Tensor | None = None,
                 v: torch.Tensor | None = None):
        self.table = table
        self.adam = SparseRowAdam(table, lr=lr, m=m, v=v)

    def lookahead(self, future_rows: list) -> None:
        """Rows (global ids) of the batches produced ahead; a DRAM table needs no hint."""

    def fetch(self, batch: int, rows: torch.Tensor) -> torch.Tensor:
        """Layer-0 rows for ``batch`` as a new (len(rows), D) tensor."""
        with torch.no_grad():
            return kernels.gather(self.table, rows, layer=0)

    def update(self, batch: int, rows: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
        """Row-sparse Adam on the distinct ``rows`` with their gradient."""
        row_bytes = self.table.shape[1] * self.table.element_size()
        n = len(rows)
        with get_recorder().timed("sparse_adam", bytes_read=4 * n * row_bytes, bytes_written=3 * n * row_bytes,
                                  flops=10 * grad.numel(), pattern="gather", row_bytes=row_bytes,
                                  random_bytes=7 * n * row_bytes, backend="torch"):
            self.adam.lr = lr
            self.adam.step(rows, grad)

    def sync(self, keep_future: bool = False) -> None:
        """Make ``table`` hold every update (a cache writes back dirty rows here; ``keep_future``:
        the batches sampled ahead will still be trained)."""

    def stats(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def make_row_store(config, model, degrees):
    """The row store ``config`` asks for: ``cache_policy`` none = :class:`DramRows`, stream = the
    slow tier read every batch, else the slow tier behind a DRAM cache with that policy.
    ``degrees``: the training graph's interactions per node (users, then items), which the
    static policy ranks rows by."""
    from .memory.placement import allocate
    where = config.placement.get("optimizer", "dram")
    shape, dt = tuple(model.embedding.shape), model.embedding.dtype
    if config.cache_policy == "none":
        return DramRows(model.embedding.data, lr=config.effective_lr,
                        m=allocate(shape, dt, where, "optimizer"), v=allocate(shape, dt, where, "optimizer"))
    from .cache.cached_rows import make_cached_rows
    return make_cached_rows(config, model, degrees, policy="none" if config.cache_policy == "stream" else None)


__all__ = ["DramRows", "make_row_store"]
