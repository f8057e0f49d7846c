"""Full-ranking metrics against a brute-force reference."""
import math

import numpy as np
import torch

from gnnrec_lab.training.evaluate import rank_metrics


def brute_force(ue, ie, held, masked, ks):
    n_users = ue.shape[0]
    res = {f"recall@{k}": [] for k in ks} | {f"ndcg@{k}": [] for k in ks}
    for u in range(n_users):
        truth = set(held[held[:, 0] == u, 1].tolist())
        if not truth:
            continue
        known = set()
        for m in masked:
            known |= set(m[m[:, 0] == u, 1].tolist())
        scores = (ue[u] @ ie.T).numpy()
        ranked = [i for i in np.argsort(-scores, kind="stable") if i not in known]
        for k in ks:
            top = ranked[:k]
            hit = [1 if i in truth else 0 for i in top]
            res[f"recall@{k}"].append(sum(hit) / len(truth))
            dcg = sum(h / math.log2(r + 2) for r, h in enumerate(hit))
            idcg = sum(1 / math.log2(r + 2) for r in range(min(len(truth), k)))
            res[f"ndcg@{k}"].append(dcg / idcg)
    return {k: float(np.mean(v)) for k, v in res.items()}


def _random_case(seed, n_users=37, n_items=53, d=8):
    rng = np.random.default_rng(seed)
    ue = torch.from_numpy(rng.normal(size=(n_users, d)).astype(np.float32))
    ie = torch.from_numpy(rng.normal(size=(n_items, d)).astype(np.float32))
    pairs = np.array([(u, i) for u in range(n_users) for i in range(n_items) if rng.random() < 0.2])
    rng.shuffle(pairs)
    n = len(pairs)
    train, valid, test = pairs[: n * 6 // 10], pairs[n * 6 // 10: n * 8 // 10], pairs[n * 8 // 10:]
    return ue, ie, train, valid, test


def test_matches_brute_force_with_masks():
    for seed in range(3):
        ue, ie, train, valid, test = _random_case(seed)
        got = rank_metrics(ue, ie, test, [train, valid], topk=(5, 20), chunk=7)
        ref = brute_force(ue, ie, test, [train, valid], (5, 20))
        for k, v in ref.items():
            assert abs(got[k] - v) < 1e-6, (k, got[k], v)


def test_perfect_and_user_sample():
    # user u's held-out item is the one aligned with its embedding -> recall 1
    ue = torch.eye(4)
    ie = torch.eye(4)
    held = np.array([[0, 0], [1, 1], [2, 2], [3, 3]])
    got = rank_metrics(ue, ie, held, [], topk=(1,))
    assert got["recall@1"] == 1.0 and got["ndcg@1"] == 1.0 and got["users"] == 4
    held_bad = np.array([[0, 1], [1, 2]])
    got = rank_metrics(ue, ie, held_bad, [], topk=(1,), users=np.array([0]))
    assert got["recall@1"] == 0.0 and got["users"] == 1


def test_matches_pyg_linkpred_metrics_with_masked_training_items():
    """An outside oracle: PyG's LinkPred metrics on the top-K that a dense ranking with the training
    (and validation) items masked gives, against the lab's chunked full ranking."""
    import pytest
    pm = pytest.importorskip("torch_geometric.metrics")
    classes = {"recall": pm.LinkPredRecall, "mrr": pm.LinkPredMRR, "ndcg": pm.LinkPredNDCG,
               "hit": pm.LinkPredHitRatio, "precision": pm.LinkPredPrecision}
    ks = (1, 3, 10, 20)
    for seed in range(4):
        ue, ie, train, valid, test = _random_case(seed, n_users=61, n_items=97)
        got = rank_metrics(ue, ie, test, [train, valid], topk=ks, chunk=5)
        scores = ue @ ie.T
        for m in (train, valid):
            scores[torch.from_numpy(m[:, 0]), torch.from_numpy(m[:, 1])] = -torch.inf
        pred = torch.topk(scores, max(ks), dim=1).indices
        truth = torch.from_numpy(test.T.astype(np.int64))
        assert got["users"] == len(np.unique(test[:, 0]))
        for k in ks:
            for name, cls in classes.items():
                metric = cls(k)
                metric.update(pred[:, :k], truth)
                want = float(metric.compute())
                assert abs(got[f"{name}@{k}"] - want) < 1e-5, (seed, name, k, got[f"{name}@{k}"], want)
        # the case is not degenerate: some hits, not all
        assert 0 < got["hit@3"] < 1 and 0 < got["mrr@10"] < got["hit@10"]


def test_metric_keys_are_every_metric_at_every_k():
    ue, ie, train, valid, test = _random_case(0)
    got = rank_metrics(ue, ie, test, [train], topk=(2, 7))
    assert list(got) == ([f"{m}@{k}" for m in ("recall", "mrr", "ndcg", "hit", "precision") for k in (2, 7)]
                         + ["users", "users_all"])
    for key, v in got.items():
        if not key.startswith("users"):
            assert 0 <= v <= 1, key
    # precision@K * K * users = hits = recall numerators: at K=1 hit, precision and mrr agree
    one = rank_metrics(ue, ie, test, [train], topk=(1,))
    assert one["hit@1"] == one["precision@1"] == one["mrr@1"]


def test_a_sampled_evaluation_says_so_wherever_its_metrics_are_formatted():
    from gnnrec_lab.training.evaluate import format_metrics, sample_label
    ue, ie, train, valid, test = _random_case(0)
    full = rank_metrics(ue, ie, test, [train], topk=(10,))
    assert full["users"] == full["users_all"] and sample_label(full) == ""
    assert "sampled" not in format_metrics(full)
    some = rank_metrics(ue, ie, test, [train], topk=(10,), users=np.arange(5))
    assert some["users"] == 5 and some["users_all"] == full["users_all"] > 5
    assert format_metrics(some).endswith(f"(sampled: 5 of {full['users_all']} users)")
    everyone = rank_metrics(ue, ie, test, [train], topk=(10,), users=np.arange(ue.shape[0]))
    assert sample_label(everyone) == ""       # a "sample" holding every user is the full ranking
