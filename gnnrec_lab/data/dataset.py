"""One loaded dataset: contiguous ids and a train / valid / test cut."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


@dataclass
class Dataset:
    """Interactions of ``n_users`` users with ``n_items`` items, split for training.

    ``train``, ``valid`` and ``test`` are ``(n, 2)`` int32 arrays ``[user, item]`` with
    users in ``0..n_users-1`` and items in ``0..n_items-1``, sorted by user; ``valid``
    may be empty ``(0, 2)``. Large datasets come as read-only memory maps.
    ``user_ids[k]`` / ``item_ids[k]`` give the original id of user / item ``k``
    (None for synthetic data, whose ids are already contiguous). ``meta`` records
    source, format, seed, split, min_rating, counts and generation parameters.
    ``node_order``: a locality order of the training graph's ``n_users + n_items`` nodes
    (:func:`gnnrec_lab.graph.bipartite.locality_order`), cached with the split of large datasets (None
    for small ones); the kernels propagate in that order, results are the same.
    """

    name: str
    n_users: int
    n_items: int
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    user_ids: Optional[np.ndarray] = None
    item_ids: Optional[np.ndarray] = None
    meta: dict = field(default_factory=dict)
    node_order: Optional[np.ndarray] = None

    @property
    def n_train(self) -> int:
        return int(self.train.shape[0])

    @property
    def n_interactions(self) -> int:
        """Interactions over all three parts."""
        return int(self.train.shape[0] + self.valid.shape[0] + self.test.shape[0])

    @property
    def density(self) -> float:
        """Share of the user x item matrix that is filled (all parts)."""
        return self.n_interactions / max(1, self.n_users * self.n_items)

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, users={self.n_users:,}, items={self.n_items:,}, "
                f"train={self.train.shape[0]:,}, valid={self.valid.shape[0]:,}, test={self.test.shape[0]:,})")
