"""Full-ranking evaluation: Recall, MRR, NDCG, Hit and Precision at every K, known items masked.

For every evaluated user, all items are scored (``u · i``), items the user
interacted with in the masked splits (training, and validation when testing)
are excluded, and the top K are compared with the held-out items. Users are
processed in blocks: torch's GEMM writes a block's scores into one reused buffer, then one numba
kernel (:func:`gnnrec_lab.kernels.topk.rank_block`, parallel over the block's users) masks each
user's known items, keeps the top K in one pass over the row (ties: the lower item id first),
tests them against the held-out items and writes every metric at every K for the user.

Recall@K = |top-K ∩ held-out| / |held-out|;
NDCG@K = DCG@K / IDCG@K with binary relevance and log2(rank + 1) discounts,
IDCG over min(|held-out|, K) items; MRR@K = 1 / rank of the first held-out item in
the top K (0 when none is); Hit@K = 1 when any is; Precision@K = |top-K ∩ held-out| / K.
These are RecBole's default metric set and PyG's ``LinkPred*`` metrics, with the same
definitions (tests/test_evaluate.py checks them against PyG). Users with no held-out items are
skipped; each metric is the mean over evaluated users (a fraction in [0, 1]).
"""
from __future__ import annotations

import numpy as np
import torch

from gnnrec_lab.kernels.topk import rank_block

# the metrics at every K, in RecBole's order (its default metric set)
METRICS = ("recall", "mrr", "ndcg", "hit", "precision")


def format_metrics(metrics: dict) -> str:
    """``recall@10/20 0.1234/0.2345  mrr@10/20 ...``: every metric at every K on one line, grouped
    by metric (what the CLI prints per evaluation and for the test split)."""
    groups: dict = {}
    for key, v in metrics.items():
        if "@" in key and isinstance(v, (int, float)):
            name, k = key.split("@", 1)
            groups.setdefault(name, []).append((k, v))
    line = "  ".join(f"{name}@{'/'.join(k for k, _ in kv)} {'/'.join(f'{v:.4f}' for _, v in kv)}"
                     for name, kv in groups.items())
    label = sample_label(metrics)
    return f"{line}  ({label})" if label else line


def sample_label(metrics: dict) -> str:
    """``'sampled: 500 of 943 users'`` when the metrics were averaged over a sample of the users
    that have held-out items (``users`` < ``users_all``), else ``''``: every view that shows
    metrics says so (they are not the full-ranking numbers over all users)."""
    n, total = metrics.get("users"), metrics.get("users_all")
    if n is None or total is None or int(n) >= int(total):
        return ""
    return f"sampled: {int(n):,} of {int(total):,} users"


def _csr_from_pairs(pairs: np.ndarray, n_users: int):
    pairs = np.asarray(pairs)
    if len(pairs) == 0:
        return np.zeros(n_users + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(pairs[:, 0], kind="stable")
    u, i = pairs[order, 0].astype(np.int64), pairs[order, 1].astype(np.int64)
    ptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n_users), out=ptr[1:])
    return ptr, i


def default_chunk(n_items: int) -> int:
    """Users per scoring block: a block's scores (float32) stay within 8 MiB, so the buffer the
    GEMM writes is still in the last-level cache when the ranking kernel reads it, and at most 1,024."""
    return int(max(1, min(1024, (8 << 20) // (4 * max(n_items, 1)))))


def rank_metrics(user_emb: torch.Tensor, item_emb: torch.Tensor, heldout: np.ndarray,
                 masked: list[np.ndarray], topk=(10, 20), users: np.ndarray | None = None,
                 chunk: int | None = None) -> dict:
    """Recall, MRR, NDCG, Hit and Precision at each K, averaged over evaluated users.

    Args:
        user_emb: (n_users, D) final user representations.
        item_emb: (n_items, D) final item representations.
        heldout: (n, 2) [user, item] pairs to find.
        masked: list of (n, 2) pair arrays whose items are excluded from ranking.
        topk: cut-offs K.
        users: evaluate only these users (a sample); default all with held-out items.
        chunk: users per scoring block (memory: chunk * n_items * 4 bytes); default
            :func:`default_chunk` (a block's scores within 8 MiB, at most 1024 users).
    Returns ``{"recall@K": float, "mrr@K": ..., "ndcg@K": ..., "hit@K": ..., "precision@K": ...,
    "users": int, "users_all": int}`` (metric-major, K ascending within a metric): ``users``
    evaluated, ``users_all`` with held-out items (more than ``users`` when ``users`` is a sample).
    """
    n_users, n_items = user_emb.shape[0], item_emb.shape[0]
    kmax = min(max(topk), n_items)
    h_ptr, h_items = _csr_from_pairs(heldout, n_users)
    masked = [np.asarray(m)[:, :2] for m in masked if len(m)]
    pairs = (masked[0] if len(masked) == 1 else np.concatenate(masked)) if masked else np.zeros((0, 2), np.int64)
    m_ptr, m_items = _csr_from_pairs(pairs, n_users)
    if chunk is None:
        chunk = default_chunk(n_items)
    n_held = np.diff(h_ptr)
    cand = np.nonzero(n_held > 0)[0]
    n_all = len(cand)
    if users is not None:
        cand = np.intersect1d(cand, np.asarray(users, dtype=np.int64))
    ks = np.asarray(topk, dtype=np.int64)
    order = np.argsort(ks, kind="stable")      # the kernel walks the cut-offs in ascending order
    discounts = 1.0 / np.log2(np.arange(2, kmax + 2))
    idcg_cum = np.cumsum(discounts)
    sums = np.zeros(len(METRICS) * len(ks))
    item_t = item_emb.T
    bs = min(chunk, max(len(cand), 1))
    buf = torch.empty((bs, n_items), dtype=torch.promote_types(user_emb.dtype, item_emb.dtype))
    top = np.empty((bs, max(kmax, 1)), dtype=np.int64)
    per_user = np.empty((bs, len(sums)))
    with torch.no_grad():
        for s in range(0, len(cand), chunk):
            ub = cand[s:s + chunk]
            b = len(ub)
            # scores into one reused buffer (a fresh block per call costs page faults on every block)
            torch.matmul(user_emb[torch.from_numpy(ub)], item_t, out=buf[:b])
            rank_block(buf[:b].numpy(), ub, m_ptr, m_items, h_ptr, h_items, kmax, ks[order], discounts,
                       idcg_cum, top, per_user)
            sums += per_user[:b].sum(0)
    n_k = len(ks)
    out = {f"{m}@{ks[j]}": float(sums[mi * n_k + pos]) / max(len(cand), 1)
           for mi, m in enumerate(METRICS) for pos, j in enumerate(order)}
    out = {f"{m}@{k}": out[f"{m}@{k}"] for m in METRICS for k in topk}
    out["users"] = int(len(cand))
    out["users_all"] = int(n_all)
    return out


def evaluate(model, adj, dataset, split: str = "valid", topk=(10, 20), users=None, chunk: int | None = None) -> dict:
    """Propagate once without gradients and rank all items for ``split``'s users."""
    with torch.no_grad():
        out = model.propagate(adj)
    ue, ie = out[:dataset.n_users], out[dataset.n_users:]
    if split == "valid":
        held, masked = dataset.valid, [dataset.train]
    elif split == "test":
        held, masked = dataset.test, [dataset.train, dataset.valid]
    else:
        raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
    return rank_metrics(ue, ie, held, masked, topk=topk, users=users, chunk=chunk)
