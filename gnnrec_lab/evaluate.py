"""Full-ranking evaluation: Recall, MRR, NDCG, Hit and Precision at every K, known items masked.

For every evaluated user, all items are scored (``u · i``), items the user
interacted with in the masked splits (training, and validation when testing)
are excluded, and the top K are compared with the held-out items. Users are
processed in chunks so memory stays at ``chunk * n_items`` scores.

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
            keeps a block's scores under 256 MiB (at most 1024 users).
    Returns ``{"recall@K": float, "mrr@K": ..., "ndcg@K": ..., "hit@K": ..., "precision@K": ...,
    "users": int, "users_all": int}`` (metric-major, K ascending within a metric): ``users``
    evaluated, ``users_all`` with held-out items (more than ``users`` when ``users`` is a sample).
    """
    n_users, n_items = user_emb.shape[0], item_emb.shape[0]
    kmax = min(max(topk), n_items)
    h_ptr, h_items = _csr_from_pairs(heldout, n_users)
    m_csrs = [_csr_from_pairs(m, n_users) for m in masked]
    if chunk is None:
        chunk = int(max(1, min(1024, (256 << 20) // (4 * max(n_items, 1)))))
    n_held = np.diff(h_ptr)
    cand = np.nonzero(n_held > 0)[0]
    n_all = len(cand)
    if users is not None:
        cand = np.intersect1d(cand, np.asarray(users, dtype=np.int64))
    sums = {f"{m}@{k}": 0.0 for m in METRICS for k in topk}
    discounts = 1.0 / np.log2(np.arange(2, kmax + 2))
    idcg_cum = np.cumsum(discounts)
    with torch.no_grad():
        for s in range(0, len(cand), chunk):
            ub = cand[s:s + chunk]
            scores = user_emb[torch.from_numpy(ub)] @ item_emb.T
            for ptr, items in m_csrs:
                cnt = ptr[ub + 1] - ptr[ub]
                rows = np.repeat(np.arange(len(ub)), cnt)
                cols = np.concatenate([items[ptr[u]:ptr[u + 1]] for u in ub]) if cnt.sum() else np.zeros(0, np.int64)
                scores[torch.from_numpy(rows), torch.from_numpy(cols)] = -torch.inf
            top = torch.topk(scores, kmax, dim=1).indices.numpy()
            del scores
            # hits[r, j]: is the j-th ranked item of user r held out? (keys row*n_items+item)
            cnt = h_ptr[ub + 1] - h_ptr[ub]
            rows = np.repeat(np.arange(len(ub), dtype=np.int64), cnt)
            cols = np.concatenate([h_items[h_ptr[u]:h_ptr[u + 1]] for u in ub])
            top_keys = np.arange(len(ub), dtype=np.int64)[:, None] * n_items + top
            hits = np.isin(top_keys, rows * n_items + cols)
            for k in topk:
                kk = min(k, kmax)
                hk = hits[:, :kk]
                n_hit = hk.sum(1)
                sums[f"recall@{k}"] += float((n_hit / cnt).sum())
                first = np.argmax(hk, axis=1)          # rank - 1 of the first hit (0 when none: masked below)
                sums[f"mrr@{k}"] += float(np.where(n_hit > 0, 1.0 / (first + 1), 0.0).sum())
                dcg = (hk * discounts[:kk]).sum(1)
                idcg = idcg_cum[np.minimum(cnt, kk) - 1]
                sums[f"ndcg@{k}"] += float((dcg / idcg).sum())
                sums[f"hit@{k}"] += float((n_hit > 0).sum())
                sums[f"precision@{k}"] += float(n_hit.sum() / k)
    n = max(len(cand), 1)
    out = {key: v / n for key, v in sums.items()}
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
