import numpy as np

from gnnrec_lab.graph.bipartite import CSR, BipartiteGraph


def test_normalised_adjacency_matches_dense():
    rng = np.random.default_rng(0)
    n_u, n_i = 7, 9
    pairs = np.unique(np.stack([rng.integers(0, n_u, 40), rng.integers(0, n_i, 40)], 1), axis=0)
    g = BipartiteGraph(pairs, n_u, n_i)
    A = np.zeros((n_u + n_i, n_u + n_i))
    for u, i in pairs:
        A[u, n_u + i] = A[n_u + i, u] = 1
    d = A.sum(1)
    dinv = np.where(d > 0, 1 / np.sqrt(np.maximum(d, 1)), 0)
    ref = dinv[:, None] * A * dinv[None, :]
    assert np.allclose(g.adj.to_scipy().toarray(), ref, atol=1e-6)
    assert g.adj.indices.dtype == np.int32 and g.adj.symmetric
    assert g.adj.values is None  # weights derived from degrees, not stored per edge
    fp = g.footprint()["adjacency"]
    assert fp == (n_u + n_i + 1) * 8 + 2 * len(pairs) * 4 + (n_u + n_i) * 4  # one shared d^-1/2 array
    ui = g.user_items.to_scipy().toarray()
    assert ui.sum() == len(pairs) and all(ui[u, i] == 1 for u, i in pairs)


def test_transpose_of_rectangular_csr():
    rng = np.random.default_rng(1)
    dense = (rng.random((5, 8)) < 0.4) * rng.random((5, 8)).astype(np.float32)
    rows, cols = np.nonzero(dense)
    indptr = np.zeros(6, np.int64)
    np.cumsum(np.bincount(rows, minlength=5), out=indptr[1:])
    m = CSR(indptr, cols.astype(np.int32), 5, 8, dense[rows, cols].astype(np.float32),
            row_scale=rng.random(5).astype(np.float32), col_scale=rng.random(8).astype(np.float32))
    t = m.transpose()
    assert np.allclose(t.to_scipy().toarray(), m.to_scipy().toarray().T)
    perm = m.transpose_perm()
    assert np.array_equal(m.values[perm], t.values)


# -- locality order ----------------------------------------------------------
def _skewed_graph(seed=0):
    from tests._graphs import power_law_graph
    return power_law_graph(n_users=400, n_items=300, n_inter=5000, seed=seed)


def test_locality_order_is_a_deterministic_permutation_with_hubs_first():
    import pytest

    from gnnrec_lab.graph.bipartite import locality_order
    adj = _skewed_graph().adj
    deg = np.diff(adj.indptr)
    for method in ("community", "degree"):
        o = locality_order(adj, method)
        assert np.array_equal(np.sort(o), np.arange(adj.n_rows))
        assert np.array_equal(o, locality_order(adj, method))
        assert deg[o[0]] == deg.max()
    with pytest.raises(ValueError, match="method"):
        locality_order(adj, "rcm")


def test_community_order_groups_planted_communities():
    """Two disjoint halves (no edge between them): label propagation never mixes them, so
    after the hubs each half's nodes are contiguous in the order."""
    from gnnrec_lab.graph.bipartite import locality_order
    rng = np.random.default_rng(3)
    u = rng.integers(0, 100, 2000)
    i = rng.integers(0, 50, 2000) + 50 * (u >= 50)        # users 0-49 -> items 0-49, 50-99 -> 50-99
    pairs = np.unique(np.stack([u, i], 1), axis=0).astype(np.int32)
    g = BipartiteGraph(pairs, 100, 100)
    o = locality_order(g.adj, "community")
    half = np.where(o < 100, o >= 50, (o - 100) >= 50).astype(int)   # which half each position holds
    assert np.count_nonzero(np.diff(half)) == 1


def test_permuted_csr_is_p_a_pt():
    import pytest
    adj = _skewed_graph().adj
    perm = np.random.default_rng(1).permutation(adj.n_rows)
    p = adj.permuted(perm)
    dense = adj.to_scipy().toarray()
    np.testing.assert_allclose(p.to_scipy().toarray(), dense[np.ix_(perm, perm)], rtol=1e-6)
    assert all(np.all(np.diff(p.indices[p.indptr[r]:p.indptr[r + 1]]) > 0) for r in range(p.n_rows))
    with pytest.raises(ValueError, match="permutation"):
        adj.set_order(np.zeros(adj.n_rows, dtype=np.int64))
    g = BipartiteGraph(np.array([[0, 0], [1, 1]]), 2, 2, node_order=np.array([3, 2, 1, 0]))
    assert g.adj._local[0].n_rows == 4 and g.footprint()["adjacency"] > 2 * g.adj.footprint() - 64


def test_a_bipartite_order_keeps_users_first_and_the_permuted_matrix_stays_bipartite():
    """set_order on the user-item adjacency takes the order's users, then its items (each in the
    order's sequence), so P A P^T is bipartite with the same sides (what native.spmm_sides needs);
    an order that mixes the sides in a plain permutation loses the mark."""
    from gnnrec_lab.graph.bipartite import locality_order
    g = _skewed_graph()
    assert g.adj.sides == g.n_users
    o = locality_order(g.adj, "community")
    assert (o[:g.n_users] >= g.n_users).any()          # the community order mixes the sides
    g.adj.set_order(o)
    kept = g.adj.order
    assert np.array_equal(kept[:g.n_users], o[o < g.n_users]) and np.array_equal(kept[g.n_users:], o[o >= g.n_users])
    p = g.adj._local[0]
    assert p.sides == g.n_users
    rows = p.row_ids()
    assert np.all((rows < p.sides) == (p.indices >= p.sides))   # users hold items only, items users only
    assert g.adj.permuted(o).sides == 0
