"""The synthetic generator: deterministic, exact counts, power-law skew, a learnable community signal."""
from pathlib import Path

import numpy as np
import pytest

from gnnrec_lab.data import describe, load, synthetic
from gnnrec_lab.data.synthetic import SynthParams, canonical_name, generate, parse_synth_name, user_degrees
from gnnrec_lab.util.errors import DataError

P = SynthParams(users=2000, items=3000, interactions=60_000, seed=11)


def _gen(p: SynthParams) -> np.ndarray:
    out = []
    generate(p.resolved(), out.append)
    return np.concatenate(out)


@pytest.fixture(scope="module")
def rows():
    return _gen(P)


def test_same_seed_same_interactions_other_seed_differs(rows):
    again = _gen(P)
    assert np.array_equal(rows, again)
    other = _gen(SynthParams(users=2000, items=3000, interactions=60_000, seed=12))
    assert other.shape == rows.shape            # counts are fixed by the parameters ...
    assert not np.array_equal(other, rows)      # ... the interactions are not


def test_counts_exact_sorted_and_distinct(rows):
    assert rows.dtype == np.int32 and rows.shape == (60_000, 2)
    assert rows[:, 0].min() == 0 and rows[:, 0].max() == P.users - 1
    assert rows[:, 1].min() >= 0 and rows[:, 1].max() <= P.items - 1
    key = rows[:, 0].astype(np.int64) * P.items + rows[:, 1]
    assert np.all(np.diff(key) > 0)            # sorted by (user, item) and no duplicate
    assert np.unique(rows[:, 0]).size == P.users   # every user has interactions


def test_user_degrees_sum_exactly_within_bounds():
    p = SynthParams(users=5000, items=800, interactions=123_457, seed=3).resolved()
    deg = user_degrees(p)
    assert deg.sum() == p.interactions
    assert deg.min() >= p.min_degree and deg.max() <= p.max_degree


def test_power_law_skew(rows):
    pop = np.sort(np.bincount(rows[:, 1], minlength=P.items))[::-1]
    top1 = pop[: P.items // 100].sum() / pop.sum()
    assert top1 > 0.10, f"top 1% of items hold only {top1:.1%} of interactions"   # uniform would be 1%
    deg = np.bincount(rows[:, 0], minlength=P.users)
    assert deg.max() > 8 * deg.mean()
    flat = _gen(SynthParams(users=2000, items=3000, interactions=60_000, seed=11, item_exp=0.0, user_exp=0.0))
    flat_pop = np.sort(np.bincount(flat[:, 1], minlength=P.items))[::-1]
    assert flat_pop[: P.items // 100].sum() / flat_pop.sum() < 0.03   # the exponent is what makes the skew


def test_planted_community_signal(rows):
    p = P.resolved()
    user_c, item_c = synthetic.community_of(p)
    same = (user_c[rows[:, 0]] == item_c[rows[:, 1]]).mean()
    chance = 1 / p.communities
    assert same > 0.6 and same > 5 * chance, (same, chance)


def test_signal_beats_popularity_on_held_out_items(tmp_path):
    """A recommender that knows only the user's co-interacting community beats global popularity."""
    ds = load("synth:users=1500,items=2000,interactions=45000,seed=5", data_dir=tmp_path)
    tr, te = np.asarray(ds.train), np.asarray(ds.test)
    pop = np.bincount(tr[:, 1], minlength=ds.n_items).astype(float)
    # item-item co-occurrence through shared users (user -> item -> user -> item, the paths a
    # 3-layer graph propagation sums over) versus plain global popularity
    import scipy.sparse as sp
    R = sp.csr_matrix((np.ones(len(tr)), (tr[:, 0], tr[:, 1])), shape=(ds.n_users, ds.n_items))
    two_hop = (R @ (R.T @ R)).toarray()
    two_hop[tr[:, 0], tr[:, 1]] = -np.inf
    glob = np.tile(pop, (ds.n_users, 1))
    glob[tr[:, 0], tr[:, 1]] = -np.inf
    truth = sp.csr_matrix((np.ones(len(te)), (te[:, 0], te[:, 1])), shape=R.shape)
    n_test = np.asarray(truth.sum(1)).ravel()

    def recall20(scores):
        top = np.argpartition(-scores, 20, axis=1)[:, :20]
        hits = np.asarray(truth[np.arange(ds.n_users)[:, None], top].sum(1)).ravel()
        ok = n_test > 0
        return float(np.mean(hits[ok] / n_test[ok]))

    r_graph, r_pop = recall20(two_hop), recall20(glob)
    assert r_graph > 1.3 * r_pop, (r_graph, r_pop)


def test_bounded_chunks(monkeypatch):
    monkeypatch.setattr(synthetic, "CHUNK_DRAWS", 5000)
    chunks = []
    generate(P.resolved(), chunks.append)
    assert len(chunks) >= 10
    assert max(c.shape[0] for c in chunks) < 3 * 5000 + P.resolved().max_degree
    rows = np.concatenate(chunks)
    key = rows[:, 0].astype(np.int64) * P.items + rows[:, 1]
    assert rows.shape[0] == P.interactions and np.all(np.diff(key) > 0)


def test_parametric_names():
    p = parse_synth_name("synth:users=5k,items=2_000,interactions=0.1m,seed=3,item_exp=1.2")
    assert (p.users, p.items, p.interactions, p.seed, p.item_exp) == (5000, 2000, 100_000, 3, 1.2)
    assert canonical_name(p) == "synth:users=5000,items=2000,interactions=100000,seed=3,item_exp=1.2"
    assert parse_synth_name(canonical_name(p)) == p
    for bad, words in [("synth:users=10,itms=3", "unknown key 'itms'"),
                       ("synth:users=10,items=20", "missing interactions"),
                       ("synth:users=ten,items=20,interactions=100", "not a number"),
                       ("synth:users=10.5,items=20,interactions=100", "must be an integer"),
                       ("synth:", "give parameters"),
                       ("synth:users", "expected key=value")]:
        with pytest.raises(DataError, match=words):
            parse_synth_name(bad)


@pytest.mark.parametrize("kw, words", [
    (dict(users=100, items=50, interactions=50), "at least users"),
    (dict(users=10, items=20, interactions=1000), "exceed users x max_degree"),
    (dict(users=10, items=20, interactions=100, locality=1.5), "locality"),
    (dict(users=0, items=20, interactions=100), "users must be a positive integer"),
])
def test_invalid_parameters(kw, words):
    with pytest.raises(DataError, match=words):
        SynthParams(**kw).resolved()


def test_presets_described_without_generating(tmp_path):
    want = {"synth-gowalla": (29_858, 40_981, 1_027_370), "synth-amazon-book": (52_643, 91_599, 2_984_108),
            "synth-ml10m": (69_878, 10_677, 10_000_054), "synth-xl": (5_000_000, 1_000_000, 100_000_000)}
    for name, (u, i, n) in want.items():
        d = describe(name, data_dir=tmp_path)
        assert (d["n_users"], d["n_items"], d["n_interactions"], d["prepared"]) == (u, i, n, False)
    assert not any(p.name.startswith("synth") for p in tmp_path.iterdir())


def test_small_graph_of_1k_edges(tmp_path):
    ds = load("synth:users=100,items=100,interactions=1000", data_dir=tmp_path)
    assert (ds.n_users, ds.n_items, ds.n_interactions) == (100, 100, 1000)
    assert ds.user_ids is None and ds.meta["generation"]["shortfall"] == 0


def test_large_splits_cache_a_locality_order_of_the_training_graph(tmp_path, monkeypatch):
    """At ORDER_MIN_NODES nodes and above, the split carries the training graph's locality order
    (computed once, cached, a damaged file rebuilt); below it there is none."""
    from gnnrec_lab.data import registry
    from gnnrec_lab.graph.bipartite import BipartiteGraph, locality_order
    name = "synth:users=300,items=200,interactions=4000"
    assert load(name, data_dir=tmp_path).node_order is None
    monkeypatch.setattr(registry, "ORDER_MIN_NODES", 500)
    ds = load(name, data_dir=tmp_path)
    want = locality_order(BipartiteGraph(ds.train, 300, 200).adj, registry.ORDER_METHOD)
    assert np.array_equal(ds.node_order, want)
    f = Path(ds.meta["node_order"]["file"])
    mtime = f.stat().st_mtime_ns
    assert np.array_equal(load(name, data_dir=tmp_path).node_order, want) and f.stat().st_mtime_ns == mtime
    np.save(f, np.zeros(500, dtype=want.dtype))          # not a permutation: rebuilt on the next load
    assert np.array_equal(load(name, data_dir=tmp_path).node_order, want)
