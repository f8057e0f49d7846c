"""BPR batches, negative sampling, k-hop sub-graphs and the prefetcher."""
import time

import numpy as np
import pytest
from _graphs import power_law_graph

from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.graph.sampling import (
    Prefetcher,
    SubGraph,
    batch_nodes,
    bpr_batches,
    redundancy_factor,
    sample_negatives,
    sample_subgraph,
)
from gnnrec_lab.util.errors import UserError


@pytest.fixture(scope="module")
def graph():
    return power_law_graph()


def train_set(graph):
    ui = graph.user_items
    return set(zip(ui.row_ids().tolist(), ui.indices.tolist()))


def test_negatives_never_in_train_set(graph):
    rng = np.random.default_rng(1)
    users = rng.integers(0, graph.n_users, 20000)
    neg = sample_negatives(graph.user_items, users, rng)
    assert neg.dtype == np.int64 and neg.shape == users.shape
    assert neg.min() >= 0 and neg.max() < graph.n_items
    train = train_set(graph)
    assert not any((u, n) in train for u, n in zip(users.tolist(), neg.tolist()))


def test_negatives_cover_all_non_train_items_uniformly():
    # user 0 owns items 0..7 of 10: negatives must be 8 or 9, about half each
    g = BipartiteGraph(np.array([[0, k] for k in range(8)] + [[1, 0]], np.int32), 2, 10)
    neg = sample_negatives(g.user_items, np.zeros(4000, np.int64), np.random.default_rng(0))
    assert set(np.unique(neg).tolist()) == {8, 9}
    assert abs((neg == 8).mean() - 0.5) < 0.05


def test_user_with_every_item_is_a_clear_error():
    g = BipartiteGraph(np.array([[0, 0], [0, 1]], np.int32), 1, 2)
    with pytest.raises(UserError, match="all 2 items"):
        sample_negatives(g.user_items, np.array([0]), np.random.default_rng(0))


def test_bpr_batches_deterministic_and_cover_the_epoch(graph):
    a = list(bpr_batches(graph, 128, np.random.default_rng(7)))
    b = list(bpr_batches(graph, 128, np.random.default_rng(7)))
    c = list(bpr_batches(graph, 128, np.random.default_rng(8)))
    assert len(a) == -(-graph.n_train // 128)
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            np.testing.assert_array_equal(p, q)
    assert not np.array_equal(a[0][0], c[0][0])
    users = np.concatenate([x[0] for x in a])
    pos = np.concatenate([x[1] for x in a])
    assert all(x[0].dtype == np.int64 for x in a)
    # every interaction exactly once
    got = sorted(zip(users.tolist(), pos.tolist()))
    assert got == sorted(train_set(graph))
    train = train_set(graph)
    neg = np.concatenate([x[2] for x in a])
    assert not any((u, n) in train for u, n in zip(users.tolist(), neg.tolist()))


def test_user_sampler_weighs_every_user_the_same_and_draws_only_train_pairs():
    # user 0 owns 60 of the 80 train interactions, users 1..20 one each: the interaction order gives
    # user 0 three quarters of every epoch, the LightGCN authors' sampler 1/21 of it
    pairs = [[0, k] for k in range(60)] + [[u, 60 + u] for u in range(1, 21)]
    g = BipartiteGraph(np.array(pairs, np.int32), 21, 200)
    train = set(map(tuple, pairs))
    share = {}
    for sampler in ("interactions", "users"):
        rng = np.random.default_rng(3)
        users = []
        for _ in range(200):
            epoch = list(bpr_batches(g, 32, rng, sampler=sampler))
            assert sum(len(b[0]) for b in epoch) == 80        # an epoch is as many triples as interactions
            for u, p, n in epoch:
                assert u.dtype == p.dtype == n.dtype == np.int64
                assert all((a, b) in train for a, b in zip(u.tolist(), p.tolist()))
                assert not any((a, b) in train for a, b in zip(u.tolist(), n.tolist()))
                users.append(u)
        users = np.concatenate(users)
        share[sampler] = (users == 0).mean()
        if sampler == "users":
            counts = np.bincount(users, minlength=21)
            assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()
            pos0 = np.concatenate([p[u == 0] for u, p, _ in bpr_batches(g, 80, np.random.default_rng(5),
                                                                           sampler="users")] or [[]])
            assert set(pos0.tolist()) <= set(range(60))
    assert share["interactions"] == pytest.approx(60 / 80)
    assert share["users"] == pytest.approx(1 / 21, abs=0.01)


def test_user_sampler_is_seeded_skips_users_without_train_items_and_names_bad_samplers(graph):
    a = list(bpr_batches(graph, 128, np.random.default_rng(7), sampler="users"))
    b = list(bpr_batches(graph, 128, np.random.default_rng(7), sampler="users"))
    assert len(a) == -(-graph.n_train // 128)
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            np.testing.assert_array_equal(p, q)
    capped = list(bpr_batches(graph, 128, np.random.default_rng(7), sampler="users", max_batches=2))
    assert [len(x[0]) for x in capped] == [128, 128]
    g = BipartiteGraph(np.array([[0, 0], [2, 1]], np.int32), 3, 5)     # user 1 has no train item
    rng = np.random.default_rng(0)
    users = np.concatenate([x[0] for _ in range(50) for x in bpr_batches(g, 1000, rng, sampler="users")])
    assert set(users.tolist()) == {0, 2}
    with pytest.raises(UserError, match="sampler must be one of interactions, users, got 'edges'"):
        next(bpr_batches(graph, 128, np.random.default_rng(0), sampler="edges"))


def test_bpr_batches_rejects_bad_batch_size(graph):
    with pytest.raises(UserError, match="batch_size"):
        next(bpr_batches(graph, 0, np.random.default_rng(0)))


def _adjacency_set(graph):
    adj = graph.adj
    return set(zip(adj.row_ids().tolist(), adj.indices.tolist()))


def test_subgraph_edges_exist_and_fanout_respected(graph):
    rng = np.random.default_rng(3)
    seeds = np.array([0, 5, 5, graph.n_users + 1, graph.n_users + 3])
    sg = sample_subgraph(graph, seeds, [3, 2], rng)
    assert isinstance(sg, SubGraph)
    edges = _adjacency_set(graph)
    deg = graph.degree
    # the seeds (deduplicated) are the first local ids, and seed_index maps inputs to them
    np.testing.assert_array_equal(sg.nodes[sg.seed_index], seeds)
    assert sg.n_seeds == 4
    assert len(sg.blocks) == 2 and sg.nodes_per_layer[-1] == sg.nodes.shape[0]
    assert len(np.unique(sg.nodes)) == sg.nodes.shape[0]
    for h, (blk, f) in enumerate(zip(sg.blocks, [3, 2])):
        assert blk.n_rows == sg.n_nodes_hop[h] and blk.n_cols == sg.n_nodes_hop[h + 1]
        counts = np.diff(blk.indptr)
        dst = sg.nodes[: blk.n_rows]
        np.testing.assert_array_equal(counts, np.minimum(deg[dst], f))
        rows = blk.row_ids()
        for r, c in zip(rows.tolist(), blk.indices.tolist()):
            assert (int(sg.nodes[r]), int(sg.nodes[c])) in edges
        # no neighbour sampled twice for the same node
        pairs = np.stack([rows, blk.indices.astype(np.int64)], 1)
        assert np.unique(pairs, axis=0).shape[0] == pairs.shape[0]
    assert sg.edges_per_layer == [b.nnz for b in sg.blocks]


def test_full_fanout_reproduces_normalised_adjacency(graph):
    # with every neighbour kept, block 0 rows equal the rows of D^-1/2 A D^-1/2
    seeds = np.array([2, graph.n_users + 4])
    sg = sample_subgraph(graph, seeds, [-1], np.random.default_rng(0))
    blk = sg.blocks[0]
    full = graph.adj.to_scipy()
    local = blk.to_scipy().toarray()
    for r, g_id in enumerate(sg.nodes[:2]):
        dense = np.zeros(graph.n_nodes, np.float32)
        dense[sg.nodes] = local[r]
        np.testing.assert_allclose(dense, full[g_id].toarray().ravel(), rtol=1e-6)


def test_subgraph_deterministic_for_a_seed(graph):
    seeds = np.arange(0, 40)
    a = sample_subgraph(graph, seeds, [4, 4], np.random.default_rng(11))
    b = sample_subgraph(graph, seeds, [4, 4], np.random.default_rng(11))
    np.testing.assert_array_equal(a.nodes, b.nodes)
    for x, y in zip(a.blocks, b.blocks):
        np.testing.assert_array_equal(x.indices, y.indices)


def test_bad_fanout_and_seed(graph):
    with pytest.raises(UserError, match=r"fanouts\[1\]"):
        sample_subgraph(graph, np.array([0]), [2, 0], np.random.default_rng(0))
    with pytest.raises(UserError, match="seed_nodes"):
        sample_subgraph(graph, np.array([graph.n_nodes]), [2], np.random.default_rng(0))


def test_redundancy_factor():
    assert redundancy_factor([np.array([1, 2]), np.array([3, 4])]) == 1.0
    assert redundancy_factor([np.array([1, 2]), np.array([2, 1, 1])]) == 2.0


def test_sampled_batches_redundancy(graph):
    rng = np.random.default_rng(0)   # one epoch of BPR batches, each with its sub-graph, as training samples them
    subs = [sample_subgraph(graph, batch_nodes(graph, u, p, n), [5, 5], rng)
            for u, p, n in bpr_batches(graph, 256, rng)]
    r = redundancy_factor(subs)
    assert r > 1.0  # hubs appear in almost every batch
    assert r == sum(s.nodes.shape[0] for s in subs) / len(np.unique(np.concatenate([s.nodes for s in subs])))


def test_batch_nodes_offsets_items(graph):
    n = batch_nodes(graph, np.array([1]), np.array([2]), np.array([3]))
    np.testing.assert_array_equal(n, [1, graph.n_users + 2, graph.n_users + 3])


def test_prefetcher_order_window_and_bound():
    produced = []

    def gen():
        for k in range(10):
            produced.append(k)
            yield k

    with Prefetcher(gen(), depth=3) as pf:
        deadline = time.time() + 5
        while len(pf.window()) < 3 and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert pf.window() == [0, 1, 2]       # bounded: the producer waits
        assert len(produced) <= 4
        assert list(pf) == list(range(10))


def test_prefetcher_window_fill_waits_for_a_full_buffer_or_the_end():
    """An oracle's look-ahead is the window: with ``fill`` it is ``depth`` items, fewer only when
    the source has ended, however slow the producer (a plain snapshot is whatever is ready)."""
    def slow():
        for k in range(5):
            time.sleep(0.03)
            yield k

    with Prefetcher(slow(), depth=3) as pf:
        assert len(pf.window()) < 3                # a snapshot right away: the producer is behind
        assert pf.window(fill=True) == [0, 1, 2]
        assert pf.wait_seconds > 0.05              # the wait is counted as sampling wait
        assert next(pf) == 0
        assert pf.window(fill=True) == [1, 2, 3]   # refilled after a consume
        assert next(pf) == 1 and next(pf) == 2
        assert pf.window(fill=True) == [3, 4]      # the source ended: fewer than depth, no hang
        assert list(pf) == [3, 4]
        assert pf.window(fill=True) == []


def test_prefetcher_reraises_producer_error():
    def gen():
        yield 1
        raise RuntimeError("sampler broke")

    pf = Prefetcher(gen(), depth=2)
    assert next(pf) == 1
    with pytest.raises(RuntimeError, match="sampler broke"):
        next(pf)


def test_prefetcher_close_stops_thread():
    def forever():
        k = 0
        while True:
            yield k
            k += 1

    pf = Prefetcher(forever(), depth=2)
    next(pf)
    pf.close()
    assert not pf._thread.is_alive()


def test_capped_epoch_is_the_uncapped_epochs_order_and_draws_fewer_negatives(graph):
    full = list(bpr_batches(graph, 128, np.random.default_rng(7)))
    same = list(bpr_batches(graph, 128, np.random.default_rng(7), max_batches=len(full) + 5))
    capped = list(bpr_batches(graph, 128, np.random.default_rng(7), max_batches=3))
    assert len(same) == len(full) and len(capped) == 3
    for x, y in zip(full, same):  # a cap at or past the epoch changes nothing
        for p, q in zip(x, y):
            np.testing.assert_array_equal(p, q)
    for x, y in zip(full[:3], capped):  # same permutation: same users and positives, in order
        np.testing.assert_array_equal(x[0], y[0])
        np.testing.assert_array_equal(x[1], y[1])
    ui = graph.user_items
    for u, _, n in capped:  # negatives still never a training item of their user
        for uu, nn in zip(u, n):
            assert nn not in ui.indices[ui.indptr[uu]:ui.indptr[uu + 1]]
