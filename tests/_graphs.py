"""Small skewed user-item graphs for the sampling and cache tests."""
import numpy as np

from gnnrec_lab.graph.bipartite import BipartiteGraph


def power_law_graph(n_users=300, n_items=200, n_inter=3000, seed=0, user_exp=0.6, item_exp=0.9) -> BipartiteGraph:
    """Zipf-like user activity (``user_exp``) and item popularity (``item_exp``), duplicates removed."""
    rng = np.random.default_rng(seed)
    pu = 1.0 / np.arange(1, n_users + 1) ** user_exp
    pi = 1.0 / np.arange(1, n_items + 1) ** item_exp
    u = rng.choice(n_users, n_inter, p=pu / pu.sum())
    i = rng.choice(n_items, n_inter, p=pi / pi.sum())
    pairs = np.unique(np.stack([u, i], 1), axis=0)
    return BipartiteGraph(pairs.astype(np.int32), n_users, n_items)
