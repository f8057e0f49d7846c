"""Per-user random train / valid / test split, seeded, streamed in blocks of users.

Protocol (the one LightGCN/NGCF papers use on Gowalla, Amazon-Book, ML-10M):
every user's interactions are shuffled and cut by the requested fractions, so each
user appears in every part. Per user with ``d`` interactions:

* ``d < 3``: everything stays in train (nothing sensible to hold out);
* otherwise each held-out part with a positive fraction ``f`` gets
  ``max(1, round(d * f))`` items (round half up), train keeps the rest and at
  least one.

Randomness comes from ``numpy.random.default_rng([seed, 7, block])`` where blocks
are fixed ranges of users (about ``BLOCK_ROWS`` interactions each), so a split
depends only on the data, the seed and the fractions.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from gnnrec_lab.data.storage import NpyWriter
from gnnrec_lab.util.errors import DataError

BLOCK_ROWS = 4_000_000
MIN_SPLIT_DEGREE = 3


def check_split(split) -> tuple[float, float, float]:
    """Validate ``(train, valid, test)`` fractions: three non-negative numbers summing to 1, train > 0."""
    try:
        parts = tuple(float(x) for x in split)
    except (TypeError, ValueError):
        raise DataError(f"split must be three fractions (train, valid, test), got {split!r}") from None
    if len(parts) != 3 or any(not (0 <= x <= 1) for x in parts) or parts[0] <= 0:
        raise DataError(f"split must be three fractions in [0, 1] with train > 0, got {split!r}")
    if abs(sum(parts) - 1.0) > 1e-6:
        raise DataError(f"split fractions must sum to 1, got {split!r} (sum {sum(parts):g})")
    return parts


def holdout_counts(deg: np.ndarray, valid: float, test: float) -> tuple[np.ndarray, np.ndarray]:
    """Items per user held out for (valid, test), int64 arrays like ``deg``."""
    deg = deg.astype(np.int64, copy=False)
    big = deg >= MIN_SPLIT_DEGREE

    def part(frac):
        if frac <= 0:
            return np.zeros_like(deg)
        return np.where(big, np.maximum(1, np.floor(deg * frac + 0.5).astype(np.int64)), 0)

    n_valid, n_test = part(valid), part(test)
    # train keeps at least one: take the excess from the larger held-out part
    over = np.maximum(0, n_valid + n_test - (deg - 1))
    from_test = np.where(n_test >= n_valid, np.minimum(over, n_test), 0)
    n_test = n_test - from_test
    n_valid = n_valid - (over - from_test)
    return n_valid, n_test


def user_degrees_of(pairs: np.ndarray, n_users: int) -> np.ndarray:
    """Interactions per user of a user-sorted ``(n, 2)`` array, read in blocks (works on memmaps)."""
    deg = np.zeros(n_users, dtype=np.int64)
    for a in range(0, pairs.shape[0], BLOCK_ROWS):
        deg += np.bincount(np.asarray(pairs[a:a + BLOCK_ROWS, 0]), minlength=n_users)
    return deg


def split_per_user(pairs: np.ndarray, n_users: int, fractions: Sequence[float], seed: int,
                   writers: Sequence[Optional[NpyWriter]],
                   progress: Optional[Callable[[int], None]] = None) -> dict:
    """Split user-sorted, duplicate-free ``pairs`` into ``writers`` (train, valid, test).

    A writer may be None when its fraction is 0. Output rows stay sorted by user
    then by the input order. Returns counts ``{"train", "valid", "test",
    "users_kept_in_train"}`` (users with fewer than 3 interactions). ``progress(n)``
    is called with the rows of each block done.
    """
    _, valid, test = fractions
    deg = user_degrees_of(pairs, n_users)
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    n_valid, n_test = holdout_counts(deg, valid, test)
    # user block boundaries at roughly BLOCK_ROWS interactions
    cuts = np.searchsorted(indptr, np.arange(BLOCK_ROWS, indptr[-1], BLOCK_ROWS), side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [n_users]]))
    counts = [0, 0, 0]
    for b in range(len(bounds) - 1):
        ua, ub = int(bounds[b]), int(bounds[b + 1])
        ra, rb = int(indptr[ua]), int(indptr[ub])
        if ra == rb:
            continue
        rows = np.asarray(pairs[ra:rb])
        rng = np.random.default_rng([seed, 7, b])
        local_user = rows[:, 0].astype(np.int64) - ua
        # shuffle inside each user: sort by (user, random key)
        order = np.argsort(local_user + rng.random(rows.shape[0]))  # ties: probability ~0
        rank = np.empty(rows.shape[0], dtype=np.int64)
        rank[order] = np.arange(rows.shape[0]) - (indptr[ua:ub] - ra)[local_user[order]]
        nt = n_test[ua:ub][local_user]
        nv = n_valid[ua:ub][local_user]
        part = np.where(rank < nt, 2, np.where(rank < nt + nv, 1, 0))
        for k in range(3):
            sel = rows[part == k]
            if sel.shape[0]:
                if writers[k] is None:
                    raise AssertionError("split produced rows for a part with fraction 0")
                writers[k].append(sel)
            counts[k] += int(sel.shape[0])
        if progress is not None:
            progress(rb - ra)
    return {"train": counts[0], "valid": counts[1], "test": counts[2],
            "users_kept_in_train": int(((deg > 0) & (deg < MIN_SPLIT_DEGREE)).sum())}
