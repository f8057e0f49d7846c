"""Evaluation's top-K ranking kernel (numba): full-ranking Recall/NDCG for a block of users in one
pass over their score rows. :mod:`gnnrec_lab.training.evaluate` calls it directly (not through a
backend); :func:`gnnrec_lab.kernels.warmup` compiles it."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from gnnrec_lab.kernels.native import JIT


@njit(**JIT)
def rank_block(scores, users, m_ptr, m_items, h_ptr, h_items, kmax, ks, discounts, idcg_cum, top, out):
    """Full-ranking metrics for one block of users, one row at a time (parallel over rows).

    ``scores[r]`` holds user ``users[r]``'s scores over all items (a reused GEMM buffer, changed
    here: the user's masked items ``m_items[m_ptr[u]:m_ptr[u+1]]`` are set to -inf). The row is
    scanned once in item order keeping its ``kmax`` best in ``top[r]`` (insertion into a sorted
    list; a later item enters only with a strictly higher score than the last kept, so among
    equal scores the lower item id ranks first, -inf ones included). Each ranked item is tested
    against the held-out items ``h_items[h_ptr[u]:h_ptr[u+1]]`` and the metrics at every K of
    ``ks`` are written to ``out[r]``, metric-major (recall, mrr, ndcg, hit, precision), K within a
    metric: recall = hits / |held-out|, mrr = 1 / rank of the first hit, ndcg = DCG / IDCG with
    ``discounts`` and ``idcg_cum`` (cumulative), hit = any, precision = hits / K."""
    n_items = scores.shape[1]
    nk = ks.shape[0]
    ninf = -np.inf
    for r in prange(users.shape[0]):
        u = users[r]
        row = scores[r]
        for j in range(m_ptr[u], m_ptr[u + 1]):
            row[m_items[j]] = ninf
        ti = top[r]
        ts = np.empty(kmax, dtype=scores.dtype)
        n = 0
        thr = ninf
        for i in range(n_items):
            s = row[i]
            if n == kmax:
                if not s > thr:
                    continue
                p = kmax - 1
            else:
                p = n
                n += 1
            while p > 0 and ts[p - 1] < s:   # equal scores stay ahead (lower ids)
                ts[p] = ts[p - 1]
                ti[p] = ti[p - 1]
                p -= 1
            ts[p] = s
            ti[p] = i
            thr = ts[n - 1]
        h0 = h_ptr[u]
        h1 = h_ptr[u + 1]
        cnt = h1 - h0
        n_hit = 0
        first = -1
        dcg = 0.0
        kj = 0
        for j in range(kmax + 1):
            while kj < nk and (j == kmax or j == ks[kj]):   # write every K whose cut-off is j
                kk = min(ks[kj], kmax)
                out[r, kj] = n_hit / cnt
                out[r, nk + kj] = 1.0 / (first + 1) if n_hit > 0 else 0.0
                out[r, 2 * nk + kj] = dcg / idcg_cum[min(cnt, kk) - 1]
                out[r, 3 * nk + kj] = 1.0 if n_hit > 0 else 0.0
                out[r, 4 * nk + kj] = n_hit / ks[kj]
                kj += 1
            if j == kmax:
                break
            item = ti[j]
            for e in range(h0, h1):
                if h_items[e] == item:
                    n_hit += 1
                    if first < 0:
                        first = j
                    dcg += discounts[j]
                    break


def rank_block_args(dtype) -> tuple:
    """Arguments of :func:`rank_block`'s types (scores of numpy ``dtype``) on a one-user, two-item
    case: what ``kernels.warmup`` compiles it for (evaluation passes the same types)."""
    i64 = np.int64
    return (np.zeros((1, 2), dtype=dtype), np.zeros(1, i64), np.zeros(2, i64), np.zeros(0, i64),
            np.array([0, 1], i64), np.zeros(1, i64), 1, np.ones(1, i64), np.ones(1), np.ones(1),
            np.zeros((1, 1), i64), np.zeros((1, 5)))
