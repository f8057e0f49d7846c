import numpy as np

from gnnrec_lab.graph import CSR, BipartiteGraph


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
