"""Kernels: every backend against a scipy reference, gradcheck in float64, the
recorded bytes against hand counts, backend selection errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnrec_lab import kernels
from gnnrec_lab.graph.bipartite import CSR, BipartiteGraph
from gnnrec_lab.kernels import native
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.recorder import Recorder, use_recorder

BACKENDS = kernels.available_backends()


def _bipartite(n_users=9, n_items=7, n=40, seed=0):
    rng = np.random.default_rng(seed)
    tr = np.unique(np.stack([rng.integers(0, n_users, n), rng.integers(0, n_items, n)], 1), axis=0)
    return BipartiteGraph(tr, n_users, n_items).adj


def _rect(seed=1, n_rows=6, n_cols=5, hub=True):
    """Non-symmetric CSR with per-edge values and both scales; row 0 is a hub."""
    rng = np.random.default_rng(seed)
    dense = rng.random((n_rows, n_cols)) < 0.4
    if hub:
        dense[0, :] = True
    dense[2, :] = False  # an empty row
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(dense.sum(1), out=indptr[1:])
    indices = np.nonzero(dense)[1].astype(np.int32)
    return CSR(indptr, indices, n_rows, n_cols, values=rng.random(len(indices)).astype(np.float32) + 0.5,
               row_scale=rng.random(n_rows).astype(np.float32) + 0.5,
               col_scale=rng.random(n_cols).astype(np.float32) + 0.5)


GRAPHS = {"bipartite": _bipartite, "rect": _rect}


def _dense(adj):
    return torch.from_numpy(adj.to_scipy().toarray()).double()


def _entries(adj):
    return adj.row_ids().astype(np.int64), adj.indices.astype(np.int64)


# -- values ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("graph", GRAPHS)
def test_forward_values_match_reference(backend, graph):
    adj = GRAPHS[graph]()
    rows, cols = _entries(adj)
    W = _dense(adj)
    torch.manual_seed(0)
    x = torch.randn(adj.n_cols, 8)
    u = torch.randn(adj.n_rows, 8)
    m = torch.randn(adj.nnz, 8)
    w = torch.from_numpy(adj.edge_weights()).double()
    with kernels.use_backend(backend):
        torch.testing.assert_close(kernels.spmm(adj, x).double(), W @ x.double(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(kernels.sddmm(adj, u, x, op="dot").double(),
                                   (u[rows] * x[cols]).sum(1).double(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(kernels.sddmm(adj, u, x, op="mul"), u[rows] * x[cols], atol=1e-6, rtol=1e-6)
        ref = torch.zeros(adj.n_rows, 8, dtype=torch.float64).index_add_(0, torch.from_numpy(rows),
                                                                           w[:, None] * m.double())
        torch.testing.assert_close(kernels.spmm_edge(adj, m).double(), ref, atol=1e-5, rtol=1e-5)
        idx = torch.tensor([3, 0, 3, 1])
        torch.testing.assert_close(kernels.gather(x, idx), x[idx])


@pytest.mark.parametrize("backend", BACKENDS)
def test_power_law_hub_rows_match_reference(backend):
    """A hub row far bigger than a chunk, many empty rows: load balancing must not lose rows."""
    rng = np.random.default_rng(3)
    n_users, n_items = 300, 50
    users = np.concatenate([np.zeros(50, dtype=np.int64), rng.integers(1, n_users, 300)])
    items = np.concatenate([np.arange(50), rng.zipf(1.6, 300) % n_items])
    adj = BipartiteGraph(np.unique(np.stack([users, items], 1), axis=0), n_users, n_items).adj
    x = torch.randn(adj.n_cols, 5)
    with kernels.use_backend(backend):
        torch.testing.assert_close(kernels.spmm(adj, x).double(), _dense(adj) @ x.double(), atol=1e-5, rtol=1e-5)


def test_work_chunk_count_keeps_chunks_above_the_minimum_and_one_per_thread():
    assert native.work_chunk_count(10**9, 2) == 2 * native.WORK_CHUNKS_PER_THREAD
    assert native.work_chunk_count(10 * native.MIN_CHUNK_NNZ, 2) == 10
    assert native.work_chunk_count(5, 4) == 4


def test_row_chunks_balance_nonzeros():
    indptr = np.array([0, 100, 101, 102, 103, 104, 105, 106, 107, 108], dtype=np.int64)  # row 0 is a hub
    b = native.row_chunks(indptr, 4)
    assert b[0] == 0 and b[-1] == 9 and np.all(np.diff(b) > 0)
    assert b[1] == 1  # the hub row sits alone in the first chunk
    assert np.array_equal(native.row_chunks(np.zeros(1, dtype=np.int64), 4), [0])


# -- gradients ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("graph", GRAPHS)
def test_gradcheck_float64(backend, graph):
    adj = GRAPHS[graph](n_rows=5, n_cols=4) if graph == "rect" else _bipartite(4, 3, 8)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(adj.n_cols, 3, dtype=torch.float64, generator=g, requires_grad=True)
    u = torch.randn(adj.n_rows, 3, dtype=torch.float64, generator=g, requires_grad=True)
    m = torch.randn(adj.nnz, 3, dtype=torch.float64, generator=g, requires_grad=True)
    idx = torch.tensor([1, 0, 1, 2])
    with kernels.use_backend(backend):
        assert torch.autograd.gradcheck(lambda a: kernels.spmm(adj, a), (x,))
        assert torch.autograd.gradcheck(lambda a, b: kernels.sddmm(adj, a, b, op="dot"), (u, x))
        assert torch.autograd.gradcheck(lambda a, b: kernels.sddmm(adj, a, b, op="mul"), (u, x))
        assert torch.autograd.gradcheck(lambda a: kernels.spmm_edge(adj, a), (m,))
        assert torch.autograd.gradcheck(lambda a: kernels.gather(a, idx), (x,))
        assert torch.autograd.gradcheck(lambda a, b: kernels.gemm(a, b), (u, x.t().contiguous()[:, :2]))
        assert torch.autograd.gradcheck(
            lambda a, b: kernels.elementwise("leaky_relu_mul", lambda p, q: F.leaky_relu(p * q, 0.2), a, b),
            (u, torch.randn(u.shape, dtype=torch.float64, generator=g, requires_grad=True)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sddmm_gradient_only_for_inputs_that_need_it(backend):
    adj = _rect()
    u = torch.randn(adj.n_rows, 4, requires_grad=True)
    v = torch.randn(adj.n_cols, 4)
    with kernels.use_backend(backend):
        kernels.sddmm(adj, u, v, op="mul").sum().backward()
    rows, cols = _entries(adj)
    ref = torch.zeros_like(u).index_add_(0, torch.from_numpy(rows), v[cols])
    torch.testing.assert_close(u.grad, ref)
    assert v.grad is None


# -- recording ---------------------------------------------------------------------
def _tiny():
    # 2 users, 2 items, interactions (0,0) (1,1) (1,0): 4 nodes, nnz 6, scales float32
    return BipartiteGraph(np.array([[0, 0], [1, 1], [1, 0]]), 2, 2).adj


def _one(rec, name, phase):
    hits = [r for r in rec.records if r.name == name and r.phase == phase]
    assert len(hits) == 1, rec.records
    return hits[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_spmm_and_sddmm_bytes_match_hand_counts(backend):
    adj = _tiny()
    x = torch.randn(4, 8, requires_grad=True)
    u = torch.randn(4, 8, requires_grad=True)
    rec = Recorder()
    rec.phase = "forward"
    with use_recorder(rec), kernels.use_backend(backend):
        kernels.spmm(adj, x, layer=2).sum().backward()
        kernels.sddmm(adj, u, x, op="dot").sum().backward()
        kernels.sddmm(adj, u, x, op="mul").sum().backward()
    f = _one(rec, "spmm", "forward")
    # indptr 5*8 + indices 6*4 + row_scale 4*4 + col_scale 4*4 + gathered rows 6*8*4
    assert (f.bytes_read, f.bytes_written, f.flops) == (40 + 24 + 16 + 16 + 192, 4 * 8 * 4, 2 * 6 * 8)
    assert (f.pattern, f.row_bytes, f.random_bytes, f.layer, f.backend) == ("gather", 32, 192, 2, backend)
    b = _one(rec, "spmm", "backward")  # symmetric: the same matrix again
    assert (b.bytes_read, b.bytes_written, b.flops, b.layer) == (f.bytes_read, f.bytes_written, f.flops, 2)
    d = _one(rec, "sddmm_dot", "forward")
    # indptr 40 + indices 24 + u rows in order 4*32 + v rows gathered 6*32; one float per entry
    assert (d.bytes_read, d.bytes_written, d.flops, d.random_bytes) == (40 + 24 + 128 + 192, 24, 96, 192)
    m = _one(rec, "sddmm_mul", "forward")
    assert (m.bytes_read, m.bytes_written, m.flops) == (d.bytes_read, 6 * 32, 48)
    db = _one(rec, "sddmm_dot", "backward")
    # grad_u: indptr 40 + indices 24 + g 6*4 + v rows 192; grad_v: indptr 40 + rows 24 + perm 24 + g 24 + u rows 192
    assert (db.bytes_read, db.bytes_written, db.flops) == ((40 + 24 + 24 + 192) + (40 + 24 + 24 + 24 + 192),
                                                          2 * 4 * 32, 4 * 6 * 8)
    mb = _one(rec, "sddmm_mul", "backward")
    assert mb.random_bytes == 192 + (192 + 192)  # v rows; u rows and g rows through the permutation
    assert all(r.ns >= 0 for r in rec.records)


def test_spmm_edge_gather_gemm_elementwise_bytes():
    adj = _tiny()
    rec = Recorder()
    table = torch.randn(4, 8, requires_grad=True)
    with use_recorder(rec):
        msg = torch.randn(6, 8, requires_grad=True)
        kernels.spmm_edge(adj, msg).sum().backward()
        kernels.gather(table, torch.tensor([0, 3, 3])).sum().backward()
        a = torch.randn(3, 8, requires_grad=True)
        w = torch.randn(8, 5, requires_grad=True)
        kernels.elementwise("leaky_relu", F.leaky_relu, kernels.gemm(a, w)).sum().backward()
    e = _one(rec, "spmm_edge", "other")
    # indptr 40 + indices 24 (for col_scale) + scales 32 + messages 6*32 streamed
    assert (e.bytes_read, e.bytes_written, e.pattern, e.random_bytes) == (40 + 24 + 32 + 192, 128, "stream", 0)
    eb = _one(rec, "spmm_edge", "backward")
    assert (eb.bytes_read, eb.bytes_written) == (40 + 24 + 32 + 128, 192)
    g = _one(rec, "gather", "other")
    assert (g.bytes_read, g.bytes_written, g.random_bytes) == (3 * 8 + 3 * 32, 96, 96)
    s = _one(rec, "scatter_add", "backward")
    # idx 24 + incoming rows 96 + read-modify of 3 rows 96; write zeroed 4x8 table 128 + rows 96
    assert (s.bytes_read, s.bytes_written, s.pattern) == (216, 224, "scatter")
    torch.testing.assert_close(table.grad, torch.tensor([1., 0, 0, 2])[:, None].expand(4, 8))
    mm = _one(rec, "gemm", "other")
    assert (mm.bytes_read, mm.bytes_written, mm.flops, mm.pattern) == ((24 + 40) * 4, 60, 240, "compute")
    assert _one(rec, "gemm", "backward").flops == 480
    lr = _one(rec, "leaky_relu", "other")
    assert (lr.bytes_read, lr.bytes_written, lr.flops) == (60, 60, 15)
    assert _one(rec, "leaky_relu", "backward").bytes_written == 60


def test_disabled_recorder_records_nothing_and_warmup_stays_out_of_records():
    adj = _tiny()
    off = Recorder(enabled=False)
    with use_recorder(off):
        kernels.spmm(adj, torch.randn(4, 3, requires_grad=True)).sum().backward()
    assert off.records == []
    rec = Recorder()
    with use_recorder(rec):
        assert kernels.warmup() >= 0.0
    assert rec.records == []


# -- backend selection --------------------------------------------------------------
def test_backend_selection():
    assert kernels.available_backends()[:2] == ["native", "torch"]
    assert kernels.get_backend() == "native"
    with kernels.use_backend("torch"):
        assert kernels.get_backend() == "torch"
    assert kernels.get_backend() == "native"
    with pytest.raises(UserError, match=r"backend: got 'cuda'.*allowed: native, torch"):
        kernels.set_backend("cuda")
    if "dgl" not in kernels.available_backends():
        with pytest.raises(UserError, match="dgl is not importable"):
            kernels.set_backend("dgl")
    with pytest.raises(UserError, match="sddmm op"):
        kernels.sddmm(_tiny(), torch.zeros(4, 2), torch.zeros(4, 2), op="add")
    with pytest.raises(ValueError, match="spmm x"):
        kernels.spmm(_tiny(), torch.zeros(3, 2))


def test_lincomb_gradcheck_and_records():
    from gnnrec_lab import kernels as K
    from gnnrec_lab.util.recorder import Recorder, use_recorder
    a = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: K.lincomb("add", (0.25, 1.0), x, y), (a, b))
    rec = Recorder()
    with use_recorder(rec):
        out = K.lincomb("add", (0.5, 2.0), a, b, layer=1)
        out.sum().backward()
    assert torch.allclose(out, 0.5 * a + 2 * b)
    fwd, bwd = rec.records
    assert (fwd.name, fwd.phase, fwd.layer, fwd.bytes_read, fwd.bytes_written) == ("add", "other", 1, 2 * 120, 120)
    assert bwd.phase == "backward" and bwd.bytes_read == 120 and bwd.bytes_written == 2 * 120


# -- LightGCN's fused layer mean -----------------------------------------------------
def _block_pair(seed=3):
    """Two sampled-style blocks: 3 <- 5 rows and 5 <- 7 rows, destinations a prefix of sources."""
    rng = np.random.default_rng(seed)

    def blk(n_dst, n_src):
        dense = rng.random((n_dst, n_src)) < 0.5
        dense[:, 0] = True
        indptr = np.zeros(n_dst + 1, dtype=np.int64)
        np.cumsum(dense.sum(1), out=indptr[1:])
        return CSR(indptr, np.nonzero(dense)[1].astype(np.int32), n_dst, n_src, None,
                   (rng.random(n_dst) + 0.5).astype(np.float32), (rng.random(n_src) + 0.5).astype(np.float32))
    return [blk(3, 5), blk(5, 7)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_mean_matches_composed_spmm_and_gradchecks(backend):
    adj = _bipartite()
    x = torch.randn(adj.n_cols, 5, dtype=torch.float64, requires_grad=True)
    blocks = _block_pair()
    xb = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    with kernels.use_backend(backend):
        got = kernels.layer_mean([adj] * 3, x, 0.25)
        A = _dense(adj)
        ref, cur = x / 4, x
        for _ in range(3):
            cur = A @ cur
            ref = ref + cur / 4
        assert torch.allclose(got, ref, atol=1e-12)
        w = torch.randn_like(got)
        (gx,) = torch.autograd.grad((got * w).sum(), x)
        (rx,) = torch.autograd.grad((ref * w).sum(), x)
        assert torch.allclose(gx, rx, atol=1e-12)
        assert torch.autograd.gradcheck(lambda t: kernels.layer_mean([adj] * 2, t, 1 / 3), (x,))
        # blocks[-1] first; the mean keeps blocks[0]'s destination rows
        x1 = _dense(blocks[1]) @ xb
        x2 = _dense(blocks[0]) @ x1
        assert torch.allclose(kernels.layer_mean(blocks, xb, 1 / 3), (xb[:3] + x1[:3] + x2) / 3, atol=1e-12)
        assert torch.autograd.gradcheck(lambda t: kernels.layer_mean(blocks, t, 1 / 3), (xb,))


def test_layer_mean_records_one_spmm_per_layer_and_direction_with_the_mean_bytes():
    adj = _tiny()
    x = torch.randn(4, 8, requires_grad=True)
    rec = Recorder()
    rec.phase = "forward"
    with use_recorder(rec):
        kernels.layer_mean([adj] * 3, x, 0.25).sum().backward()
    assert [(r.name, r.phase, r.layer) for r in rec.records] == (
        [("spmm", "forward", k) for k in range(3)] + [("spmm", "backward", k) for k in (2, 1, 0)])
    plain = 40 + 24 + 16 + 16 + 192  # as a plain SpMM (hand count above)
    f, b = rec.records[0], rec.records[3]
    # the mean's stream: forward reads init/acc (4 rows x 32 B) and writes acc; backward reads g
    assert (f.bytes_read, f.bytes_written) == (plain + 128, 128 + 128)
    assert (b.bytes_read, b.bytes_written) == (plain + 128, 128)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("K", [1, 2, 3])
def test_layer_mean_at_rows_is_the_whole_result_read_at_them(backend, K):
    """``rows=``: the last layer only at the batch's rows, the backward's first product only from
    their gradient; the result and the gradient equal the whole propagation's read at the rows
    (rows repeated in the batch counted once, in id order)."""
    adj = _bipartite(40, 30, 300, seed=K)
    x = torch.randn(adj.n_cols, 6, dtype=torch.float64, requires_grad=True)
    ids = (torch.tensor([3, 3, 17, 0]), torch.tensor([45, 60, 45, 41]))
    rows = kernels.batch_rows(adj.n_rows, *ids)
    assert rows[0].tolist() == [0, 3, 17, 41, 45, 60]
    assert rows[1][rows[0]].tolist() == list(range(6)) and int((rows[1] >= 0).sum()) == 6
    with kernels.use_backend(backend):
        rec = Recorder()
        with use_recorder(rec):
            got = kernels.layer_mean([adj] * K, x, 1 / (K + 1), rows=rows)
        whole = kernels.layer_mean([adj] * K, x, 1 / (K + 1))
        assert got.shape == (6, 6)
        assert torch.allclose(got, whole[rows[0]], rtol=1e-13, atol=1e-13)
        w = torch.randn_like(got)
        (gx,) = torch.autograd.grad((got * w).sum(), x)
        (rx,) = torch.autograd.grad((whole[rows[0]] * w).sum(), x)
        assert torch.allclose(gx, rx, rtol=1e-12, atol=1e-13)
        assert torch.autograd.gradcheck(lambda t: kernels.layer_mean([adj] * K, t, 1 / (K + 1), rows=rows), (x,))
    last = [r for r in rec.records if r.name == "spmm"][-1]
    rows_nnz = int(sum(adj.indptr[r + 1] - adj.indptr[r] for r in rows[0].tolist()))
    assert last.layer == K - 1 and last.flops == 2 * rows_nnz * 6 < 2 * adj.nnz * 6 / 2


def test_layer_mean_at_rows_in_bf16_agrees_with_the_whole_bf16_result_and_gathers_only_when_it_pays():
    adj = _bipartite(40, 30, 400)
    x = torch.randn(adj.n_cols, 16, requires_grad=True)
    rows = kernels.batch_rows(adj.n_rows, torch.tensor([1, 5, 9]), torch.tensor([50, 44]))
    whole = kernels.layer_mean([adj] * 3, x, 0.25, "bf16")
    got = kernels.layer_mean([adj] * 3, x, 0.25, "bf16", rows=rows)
    assert got.dtype == torch.float32 and torch.equal(got, whole[rows[0]])  # same sums, same order
    w = torch.randn_like(got)
    (gx,) = torch.autograd.grad((got * w).sum(), x)
    (rx,) = torch.autograd.grad((whole[rows[0]] * w).sum(), x)
    assert gx.dtype == torch.float32 and float((gx - rx).norm() / rx.norm()) < 3 * 2.0 ** -8
    # rows over ROWS_MAX_SHARE of the table: the whole result, then a recorded gather
    many = kernels.batch_rows(adj.n_rows, torch.arange(adj.n_rows - 5))
    rec = Recorder()
    with use_recorder(rec):
        out = kernels.layer_mean([adj] * 3, x, 0.25, "bf16", rows=many)
    assert torch.equal(out, whole[many[0]])
    assert [r.name for r in rec.records][-1] == "gather"
    assert [r.flops for r in rec.records if r.name == "spmm"] == [2 * adj.nnz * 16] * 3


def test_layer_mean_rejects_blocks_that_do_not_chain():
    blocks = _block_pair()
    with pytest.raises(ValueError, match="cannot follow"):
        kernels.layer_mean([blocks[1], blocks[0]], torch.randn(5, 2), 0.5)
    with pytest.raises(ValueError, match="layer_mean x"):
        kernels.layer_mean(blocks, torch.randn(6, 2), 0.5)


# -- fused loss terms --------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_bpr_and_l2_match_torch_reference_and_gradcheck(backend):
    torch.manual_seed(0)
    out = torch.randn(20, 6, dtype=torch.float64, requires_grad=True)
    u = torch.randint(0, 8, (15,))          # repeated rows: gradients of duplicates add up
    p, n = torch.randint(8, 20, (15,)), torch.randint(8, 20, (15,))
    with kernels.use_backend(backend):
        loss = kernels.bpr_loss(out, u, p, n) + kernels.sq_norm_rows(out, torch.cat([u, p, n]), 0.3)
        ou, op, on = out[u], out[p], out[n]
        ref = (F.softplus(-((ou * op).sum(1) - (ou * on).sum(1))).mean()
               + 0.3 * 0.5 * (ou.pow(2).sum() + op.pow(2).sum() + on.pow(2).sum()))
        assert torch.allclose(loss, ref, atol=1e-12)
        (g,) = torch.autograd.grad(2.5 * loss, out)  # an incoming gradient other than 1 is applied
        (gr,) = torch.autograd.grad(2.5 * ref, out)
        assert torch.allclose(g, gr, atol=1e-12)
        assert torch.autograd.gradcheck(
            lambda t: kernels.bpr_loss(t, u, p, n) + kernels.sq_norm_rows(t, u, 0.7), (out,))
        big = torch.full((4, 3), 30.0, dtype=torch.float64)  # softplus past its linear threshold
        i0, i1 = torch.tensor([0]), torch.tensor([1])
        assert torch.allclose(kernels.bpr_loss(big * torch.tensor([[1.], [-1.], [1.], [1.]], dtype=torch.float64),
                                               i0, i1, torch.tensor([2])), torch.tensor(5400.0, dtype=torch.float64))


def test_loss_kernels_give_the_same_bits_on_one_thread_and_on_several():
    """bpr_rows and sq_norm_rows run their gradient rows on threads that each own a range of rows,
    taking the triples in order: repeated rows (a user twice, pos == neg) get their terms in the
    serial order, so 1 and 2 threads agree bit for bit, loss included."""
    import numba
    torch.manual_seed(3)
    be, ref = kernels.registry.backend("native"), kernels.registry.backend("torch")
    for rows, b in ((50, 300), (4000, 300)):  # the L2 term by row counts (many occurrences) or per occurrence
        out = torch.randn(rows, 8)
        u = torch.randint(0, 20, (b,))
        p, n = torch.randint(0, 30, (b,)), torch.randint(0, 30, (b,))
        n[:10] = p[:10]
        got = {}
        before = numba.get_num_threads()
        try:
            for th in (1, 2):
                numba.set_num_threads(th)
                loss, g = be.bpr_rows(out, u, p, n, 20)
                val, g2 = be.sq_norm_rows(out, (u, p, n), 0.3, 20)
                got[th] = (loss, g, val, g2)
        finally:
            numba.set_num_threads(before)
        assert got[1][0] == got[2][0] and got[1][2] == got[2][2]
        assert torch.equal(got[1][1], got[2][1]) and torch.equal(got[1][3], got[2][3])
        ref_loss, ref_g = ref.bpr_rows(out, u, p, n, 20)
        ref_val, ref_g2 = ref.sq_norm_rows(out, (u, p, n), 0.3, 20)
        assert got[2][0] == pytest.approx(ref_loss, rel=1e-5) and torch.allclose(got[2][1], ref_g, atol=1e-6)
        assert got[2][2] == pytest.approx(ref_val, rel=1e-5) and torch.allclose(got[2][3], ref_g2, atol=1e-5)


def _bpr_l2_reference(out, table, u, p, n, coef, off):
    ou, op, on = out[u], out[p + off], out[n + off]
    tu, tp, tn = table[u], table[p + off], table[n + off]
    return (F.softplus(-((ou * op).sum(1) - (ou * on).sum(1))).mean()
            + coef * 0.5 * (tu.pow(2).sum() + tp.pow(2).sum() + tn.pow(2).sum()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ["layer_mean", "other", "same"])
def test_bpr_l2_loss_matches_reference_wherever_the_l2_gradient_goes(backend, source):
    """The L2 gradient takes three routes: left to the layer mean's backward (``out`` comes from
    layer_mean over ``table``), a dense gradient of its own (any other ``out``), or added into the
    BPR gradient (``out`` is ``table``, MF). Each must give the reference gradient."""
    torch.manual_seed(1)
    adj = _tiny()  # 4 x 4, symmetric
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    u, p, n = torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 0, 1]), torch.tensor([1, 1, 0, 0])
    off, coef = 2, 0.4

    def outputs(t, via_kernels):
        if source == "layer_mean":
            return kernels.layer_mean([adj, adj], t, 1 / 3) if via_kernels else \
                (t + kernels.spmm(adj, t) + kernels.spmm(adj, kernels.spmm(adj, t))) / 3
        return t * torch.tensor([1.0, -2.0, 0.5], dtype=t.dtype) if source == "other" else t
    with kernels.use_backend(backend):
        loss, bpr = kernels.bpr_l2_loss(outputs(x, True), x, u, p, n, coef, item_offset=off)
        ref = _bpr_l2_reference(outputs(x, False), x, u, p, n, coef, off)
        assert torch.allclose(loss, ref, atol=1e-12) and not bpr.requires_grad
        (g,) = torch.autograd.grad(1.5 * loss, x)   # an incoming gradient other than 1 is applied
        (gr,) = torch.autograd.grad(1.5 * ref, x)
        assert torch.allclose(g, gr, atol=1e-12)
        assert torch.autograd.gradcheck(
            lambda t: kernels.bpr_l2_loss(outputs(t, True), t, u, p, n, coef, item_offset=off)[0], (x,))


def test_deferred_l2_gradient_is_recorded_in_the_layer_mean_backward():
    adj = _tiny()
    x = torch.randn(4, 8, requires_grad=True)
    u, p, n = torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1, 0])
    rec = Recorder()
    rec.phase = "loss"
    with use_recorder(rec):
        loss, _ = kernels.bpr_l2_loss(kernels.layer_mean([adj], x, 0.5), x, u, p, n, 0.1, item_offset=2)
        loss.backward()
    fwd, bwd = _one(rec, "l2_reg", "loss"), _one(rec, "l2_reg", "backward")
    rows = 6 * 8 * 4
    assert (fwd.bytes_read, fwd.bytes_written) == (6 * 8 + rows, 0)          # the value only
    assert (bwd.bytes_read, bwd.bytes_written) == (6 * 8 + 2 * rows, rows)   # rows read, gradient rows updated
    order = [(r.name, r.phase) for r in rec.records]
    assert order.index(("l2_reg", "backward")) == order.index(("spmm", "backward")) + 1


def test_fused_loss_records_bytes_and_a_backward_handover():
    out = torch.randn(10, 4, requires_grad=True)
    u, p, n = torch.tensor([0, 1, 1]), torch.tensor([5, 6, 7]), torch.tensor([8, 9, 5])
    rec = Recorder()
    rec.phase = "loss"
    with use_recorder(rec):
        kernels.bpr_loss(out, u, p, n).backward()
    f = _one(rec, "bpr_loss", "loss")
    rows = 3 * 3 * 4 * 4   # 9 rows of 16 B
    # 9 int64 indices + rows read + gradient rows read; dense gradient zeroed + gradient rows written
    assert (f.bytes_read, f.bytes_written, f.random_bytes, f.row_bytes) == (9 * 8 + 2 * rows, 10 * 16 + rows,
                                                                            2 * rows, 16)
    b = _one(rec, "bpr_loss", "backward")
    assert (b.bytes_read, b.bytes_written) == (0, 0)  # incoming gradient 1: the gradient is handed over
    with pytest.raises(ValueError, match="differ in length"):
        kernels.bpr_loss(out, u, p, n[:2])


def test_large_outputs_get_their_own_zeroed_mapping_and_small_ones_torchs():
    from gnnrec_lab.kernels import buffers
    big = buffers.zeros((buffers.HUGE_MIN_BYTES // 4 // 64 + 1, 64))
    assert big.dtype == torch.float32 and big.shape[1] == 64 and not big.any()
    assert big.data_ptr() % 4096 == 0  # its own mapping (malloc'd memory starts past a chunk header)
    assert torch.zeros(big.shape).data_ptr() % 4096 != 0  # ... which is how torch's allocation starts
    big[-1, -1] = 2.0
    assert float(big.sum()) == 2.0
    small = buffers.empty((3, 4), torch.float64)
    assert small.shape == (3, 4) and small.dtype == torch.float64


def test_a_released_large_buffer_is_reused_only_once_nothing_refers_to_its_memory(monkeypatch):
    """empty() and zeros() (zeroed) take a released mapping of the same size (no new page faults)
    only after the tensor and every view of it are gone; at most POOL_MAX are kept."""
    import gc

    from gnnrec_lab.kernels import buffers
    assert buffers.POOL_MIN_BYTES <= buffers.HUGE_MIN_BYTES   # every huge-page output is pooled
    monkeypatch.setattr(buffers, "_pool", type(buffers._pool)())
    shape = (buffers.HUGE_MIN_BYTES // 4 // 64 + 1, 64)
    t = buffers.empty(shape)
    ptr = t.data_ptr()
    t.fill_(7.0)
    view = t[:10]
    arr = t[10:20].numpy()
    del t
    gc.collect()
    u = buffers.empty(shape)                        # the views still use the first buffer
    assert u.data_ptr() != ptr and len(buffers._pool) == 0
    u.fill_(1.0)
    assert float(view.sum()) == 7.0 * view.numel() and float(arr.sum()) == 7.0 * arr.size
    del view
    gc.collect()
    assert len(buffers._pool) == 0                  # the numpy array still holds it
    del arr
    gc.collect()
    assert [n for n, _ in buffers._pool] == [u.numel() * 4]
    z = buffers.zeros(shape)                        # zeros: the released one, zeroed
    assert z.data_ptr() == ptr and not z.any() and len(buffers._pool) == 0
    del z
    gc.collect()
    w = buffers.empty(shape)                        # empty: the released one, faulted in already
    assert w.data_ptr() == ptr and len(buffers._pool) == 0
    assert buffers.empty((shape[0] + 1, 64)).data_ptr() != ptr   # another size never takes it
    del u, w
    gc.collect()
    assert len(buffers._pool) <= buffers.POOL_MAX


def test_column_blocked_spmm_and_sddmm_match_the_plain_kernels(monkeypatch):
    adj = _bipartite(n_users=40, n_items=30, n=400, seed=5)
    x = torch.randn(adj.n_cols, 8, dtype=torch.float64, requires_grad=True)
    u = torch.randn(adj.n_rows, 8, dtype=torch.float64, requires_grad=True)
    plain = kernels.spmm(adj, x).detach()
    dots = kernels.sddmm(adj, u, x, op="dot").detach()
    monkeypatch.setattr(native, "COL_BLOCK_BYTES", 1500)  # 70 rows of 64 B = 4480 B -> 3 blocks
    assert native.col_block_count(adj.n_cols, 64) == 3
    assert native.rows_sorted(adj.indptr, adj.indices)
    assert not native.rows_sorted(np.array([0, 2, 4]), np.array([1, 3, 2, 0]))
    pos, bounds = native.col_blocks(adj.indptr, adj.indices, adj.n_cols, 3, 4)
    assert pos.shape == (4, adj.n_rows) and bounds.shape[0] == 3
    assert (pos[0] == adj.indptr[:-1]).all() and (pos[3] == adj.indptr[1:]).all()
    width = -(-adj.n_cols // 3)
    for b in range(3):  # block b of row r holds exactly the row's columns in the block's slice
        for r in range(adj.n_rows):
            cols = adj.indices[pos[b, r]:pos[b + 1, r]]
            assert ((b * width <= cols) & (cols < (b + 1) * width)).all()
    adj.__dict__.pop("_kern", None)
    assert torch.allclose(kernels.spmm(adj, x), plain, atol=1e-12)
    assert torch.allclose(kernels.sddmm(adj, u, x, op="dot"), dots, atol=1e-12)
    assert ("colblocks", "", 3, native.threads()) in adj.__dict__["_kern"]
    assert torch.autograd.gradcheck(lambda t: kernels.layer_mean([adj] * 2, t, 1 / 3), (x,))
    assert torch.autograd.gradcheck(lambda a, b: kernels.sddmm(adj, a, b, op="dot"), (u, x))


def test_prefetch_hint_never_changes_results():
    # rows shorter and longer than the prefetch distance, in both layouts; values through eperm
    rng = np.random.default_rng(7)
    n_rows, n_cols = 50, 300
    lens = rng.integers(0, 3 * native.PREFETCH_AHEAD, n_rows)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    indices = np.concatenate([np.sort(rng.choice(n_cols, k, replace=False)) for k in lens]).astype(np.int32)
    adj = CSR(indptr, indices, n_rows, n_cols, values=rng.random(len(indices)).astype(np.float32))
    x = torch.randn(n_cols, 8, dtype=torch.float64)
    ref = _dense(adj) @ x
    assert torch.allclose(kernels.spmm(adj, x), ref, atol=1e-10)
    u = torch.randn(n_rows, 8, dtype=torch.float64)
    r, c = _entries(adj)
    assert torch.allclose(kernels.sddmm(adj, u, x, op="dot"), (u[r] * x[c]).sum(1), atol=1e-10)


@pytest.mark.parametrize("backend", ["native", "torch"])
def test_layer_mean_in_locality_order_matches_the_unreordered_graph(backend, monkeypatch):
    """A CSR carrying a locality order propagates in that order (rows permuted in and out, each
    way recorded as ``permute``); values and gradients, the deferred L2 gradient included, equal
    the unreordered graph's up to float summation order."""
    from gnnrec_lab.graph.bipartite import locality_order
    from tests._graphs import power_law_graph
    plain = power_law_graph(n_users=300, n_items=200, n_inter=4000, seed=2)
    pairs = np.stack([plain.user_items.row_ids(), plain.user_items.indices], 1).astype(np.int32)
    ordered = BipartiteGraph(pairs, 300, 200, node_order=locality_order(plain.adj, "community"))
    assert ordered.adj.order is not None and not np.array_equal(ordered.adj.order, np.arange(500))
    x0 = torch.randn(500, 8, dtype=torch.float64)
    u, p, n = torch.tensor([0, 5, 299]), torch.tensor([1, 2, 199]), torch.tensor([3, 0, 7])
    outs = []
    for g, limit in ((plain, 0), (ordered, 0), (ordered, 10**9)):
        monkeypatch.setattr(kernels.fused, "LOCALITY_MIN_BYTES", limit)
        x = x0.clone().requires_grad_(True)
        rec = Recorder()
        rec.phase = "forward"
        with kernels.use_backend(backend), use_recorder(rec):
            h = kernels.layer_mean([g.adj] * 3, x, 0.25)
            loss, _ = kernels.bpr_l2_loss(h, x, u, p, n, 0.1, item_offset=300)
            (loss + (h * h).sum()).backward()
        outs.append((h.detach(), x.grad, [(r.name, r.phase) for r in rec.records if r.name == "permute"]))
    (h0, g0, p0), (h1, g1, p1), (h2, g2, p2) = outs
    assert p0 == [] and p2 == []           # no order, or a table below the limit: not reordered
    assert p1 == [("permute", "forward")] * 2 + [("permute", "backward")] * 2
    for h, gr in ((h1, g1), (h2, g2)):
        torch.testing.assert_close(h, h0, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gr, g0, rtol=1e-12, atol=1e-12)


def test_cache_aware_spmm_bytes_count_distinct_rows_per_panel():
    """distinct_gathers against a direct count; the cache-aware bytes never exceed the naive ones
    and equal them when the budget is one row."""
    from gnnrec_lab.kernels import costs
    from tests._graphs import power_law_graph
    adj = power_law_graph(n_users=300, n_items=200, n_inter=4000, seed=4).adj
    for budget in (1, 7, 50, 10**6):
        total, panels = native.distinct_gathers(adj.indptr, adj.indices, adj.n_cols, budget)
        want, seen, np_ = 0, set(), 1
        for r in range(adj.n_rows):
            cols = set(adj.indices[adj.indptr[r]:adj.indptr[r + 1]].tolist())
            new = len(cols - seen)
            if seen and len(seen) + new > budget:
                seen, np_ = set(), np_ + 1
                new = len(cols)
            seen |= cols
            want += new
        assert (total, panels) == (want, np_)
    naive = costs.spmm(adj, 16, 4)
    one = costs.spmm_cached(adj, 16, 4, cache_bytes=int(64 / costs.CACHE_SHARE))  # one row fits
    assert one["bytes_read"] == naive["bytes_read"]
    big = costs.spmm_cached(adj, 16, 4, cache_bytes=1 << 30)   # everything fits: each row once
    assert big["random_bytes"] == len(np.unique(adj.indices)) * 64 < naive["random_bytes"]


@pytest.mark.parametrize("ordered", [False, True])
def test_side_by_side_spmm_matches_the_row_by_row_product(monkeypatch, ordered):
    """Above native.SIDES_MIN_BYTES the user-item adjacency is multiplied side by side (users
    gather their items' rows and scatter theirs into per-thread item accumulators): SpMM, LightGCN's
    layer mean (its fused running mean and the backward's added gradient, the deferred L2 term
    included) and NGCF's SpMM equal the row-by-row kernel's results up to float summation order,
    and each product is still recorded as one ``spmm``."""
    from gnnrec_lab.graph.bipartite import locality_order
    from tests._graphs import power_law_graph
    g = power_law_graph(n_users=300, n_items=200, n_inter=4000, seed=5)
    if ordered:
        pairs = np.stack([g.user_items.row_ids(), g.user_items.indices], 1).astype(np.int32)
        g = BipartiteGraph(pairs, 300, 200, node_order=locality_order(g.adj, "community"))
        monkeypatch.setattr(kernels.fused, "LOCALITY_MIN_BYTES", 0)
    x0 = torch.randn(500, 8, dtype=torch.float64)
    u, p, n = torch.tensor([0, 5, 299]), torch.tensor([1, 2, 199]), torch.tensor([3, 0, 7])
    outs = []
    for limit in (10**12, 0):
        monkeypatch.setattr(native, "SIDES_MIN_BYTES", limit)
        for a in (g.adj, g.adj._local[0] if ordered else g.adj):
            a.__dict__.pop("_kern", None)
        x = x0.clone().requires_grad_(True)
        rec = Recorder()
        rec.phase = "forward"
        with kernels.use_backend("native"), use_recorder(rec):
            s = kernels.spmm(g.adj, x0)
            h = kernels.layer_mean([g.adj] * 3, x, 0.25)
            loss, _ = kernels.bpr_l2_loss(h, x, u, p, n, 0.1, item_offset=300)
            (loss + (h * h).sum()).backward()
        used = (g.adj._local[0] if ordered else g.adj).__dict__.get("_kern", {})
        outs.append((s, h.detach(), x.grad, sorted(r.name for r in rec.records if r.name == "spmm"),
                     "sides" in used))
    (s0, h0, g0, n0, side0), (s1, h1, g1, n1, side1) = outs
    assert not side0 and side1                           # the limit decides which kernel runs
    assert n0 == n1 == ["spmm"] * 7                      # 1 + 3 forward + 3 backward
    torch.testing.assert_close(s1, s0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h1, h0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-12)


def test_side_by_side_spmm_is_only_for_a_symmetric_one_scale_bipartite_matrix(monkeypatch):
    """A matrix without sides, with per-edge values or with two different scales takes the row
    kernel whatever its size; float32 results agree with float64 ones."""
    from tests._graphs import power_law_graph
    monkeypatch.setattr(native, "SIDES_MIN_BYTES", 0)
    g = power_law_graph(n_users=300, n_items=200, n_inter=4000, seed=6)
    a = g.adj
    x = torch.randn(500, 8, dtype=torch.float64)
    for other in (CSR(a.indptr, a.indices, 500, 500, None, a.row_scale, a.col_scale, symmetric=True),
                  CSR(a.indptr, a.indices, 500, 500, np.ones(a.nnz, np.float32), a.row_scale, a.col_scale,
                      symmetric=True, sides=300),
                  CSR(a.indptr, a.indices, 500, 500, None, a.row_scale, a.col_scale.copy(), symmetric=True,
                      sides=300)):
        with kernels.use_backend("native"):
            r = kernels.spmm(other, x)
        assert "sides" not in other.__dict__.get("_kern", {})
        torch.testing.assert_close(r, kernels.spmm(a, x), rtol=1e-12, atol=1e-12)
    with kernels.use_backend("native"):
        torch.testing.assert_close(kernels.spmm(a, x.float()), kernels.spmm(a, x).float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_blocks", [1, 3])
def test_dynamic_chunks_on_a_skewed_graph_repeat_bit_for_bit_whatever_the_chunks_and_threads(monkeypatch, n_blocks):
    """Chunks are taken from an atomic counter, so which thread runs a row changes with timing: on
    a graph with a few hub rows far above a chunk's share and many empty rows, every SpMM / SDDMM
    forward and backward must cover each row once and give the same bits for 1 chunk per thread
    (fewer chunks than some rows), many, one thread or all, and match a float64 reference."""
    import numba
    rng = np.random.default_rng(11)
    n_users, n_items = 400, 120
    users = np.concatenate([np.repeat([0, 7, 200], n_items), rng.integers(0, n_users, 600)])  # 3 hubs
    items = np.concatenate([np.tile(np.arange(n_items), 3), rng.zipf(1.4, 600) % n_items])
    adj = BipartiteGraph(np.unique(np.stack([users, items], 1), axis=0), n_users, n_items).adj
    assert (np.diff(adj.indptr) == 0).sum() > 50                 # many empty rows
    if n_blocks > 1:   # column blocks: the counter is per block
        monkeypatch.setattr(native, "COL_BLOCK_BYTES", -(-adj.n_cols * 32 // n_blocks))
        assert native.col_block_count(adj.n_cols, 32) == n_blocks
    g = torch.Generator().manual_seed(0)
    x = torch.randn(adj.n_cols, 8, generator=g)
    u = torch.randn(adj.n_rows, 8, generator=g)
    rows, cols = _entries(adj)

    def run():
        adj.__dict__.pop("_kern", None)   # chunk bounds are rebuilt for the setting under test
        xs, us = x.clone().requires_grad_(True), u.clone().requires_grad_(True)
        y = kernels.spmm(adj, xs)
        y.backward(torch.ones_like(y))
        d = kernels.sddmm(adj, us, xs, op="dot")
        d.backward(torch.linspace(-1, 1, d.shape[0]))
        return [t.detach().clone() for t in (y, d, xs.grad, us.grad)]

    with kernels.use_backend("native"):
        ref = run()
        W = _dense(adj)
        torch.testing.assert_close(ref[0].double(), W @ x.double(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ref[1].double(), (u[rows] * x[cols]).sum(1).double(), atol=1e-5, rtol=1e-5)
        monkeypatch.setattr(native, "MIN_CHUNK_NNZ", 1)   # the small graph still gets many chunks
        settings = [(1, native.threads()), (64, native.threads()), (64, 1), (1000, 1)]
        prev = native.WORK_CHUNKS_PER_THREAD
        try:
            for per_thread, th in settings:
                monkeypatch.setattr(native, "WORK_CHUNKS_PER_THREAD", per_thread)
                numba.set_num_threads(th)
                for a, b in zip(run(), ref):
                    assert torch.equal(a, b), (per_thread, th)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
            monkeypatch.setattr(native, "WORK_CHUNKS_PER_THREAD", prev)


# -- precision bf16 ------------------------------------------------------------------------------
# Tolerances (docs/accuracy.md): a bf16 product reads rows rounded to bf16 (relative error <= 2^-9
# per element) and sums in float32 in the same order as the float32 kernel, so it equals the
# float32 kernel on the rounded input bit for bit; a bf16 output is that float32 row rounded to
# nearest even. A K-layer bf16 mean (and its gradient) is within K * 2^-8 (relative Frobenius) of
# the float32 one; measured ~5e-4 at K=3.
def _bf16_bits(t):
    return t.to(torch.bfloat16).view(torch.int16)


def test_bf16_narrowing_rounds_to_nearest_even_like_torch():
    from gnnrec_lab.kernels.registry import backend
    one_ulp = 2.0 ** -7                           # bf16's spacing at 1.0
    ties = [1 + one_ulp / 2, 1 + 3 * one_ulp / 2, -(1 + one_ulp / 2), 1 + one_ulp / 2 + 2 ** -20]
    special = [0.0, -0.0, np.inf, -np.inf, 3.3e38, 1e-40, -1e-45, 65504.0]
    x = torch.tensor([ties + special] * 3, dtype=torch.float32)
    x = torch.cat([x, torch.randn(50, x.shape[1]) * 100], 0)
    got = backend("native").narrow(x)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), _bf16_bits(x))
    assert got[0, 0].item() == 1.0 and got[0, 1].item() == 1 + 2 * one_ulp   # ties to the even neighbour
    assert got[0, 3].item() == 1 + one_ulp                                    # above the tie: up
    nan = backend("native").narrow(torch.tensor([[float("nan"), 1.0]]))
    assert torch.isnan(nan[0, 0].float()) and nan[0, 1].item() == 1.0


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("blocks", [False, True])
def test_bf16_spmm_equals_fp32_on_rounded_rows_bit_for_bit(graph, blocks, monkeypatch):
    from gnnrec_lab.kernels.registry import backend
    if blocks:  # several column blocks even on a tiny graph (float32 outputs only are blocked)
        monkeypatch.setattr(native, "COL_BLOCK_BYTES", 64)
    adj = GRAPHS[graph]()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(adj.n_cols, 19, generator=g)
    xr = x.to(torch.bfloat16).float()
    be = backend("native")
    ref = be.spmm_fused(adj, xr)
    out32 = be.spmm_fused(adj, be.narrow(x), out_dtype=torch.float32)
    assert out32.dtype == torch.float32 and torch.equal(out32, ref)
    # a bf16 output is never blocked: its reference is the unblocked float32 product
    monkeypatch.setattr(native, "COL_BLOCK_BYTES", 12 << 20)
    ref1 = be.spmm_fused(adj, xr)
    monkeypatch.setattr(native, "COL_BLOCK_BYTES", 64 if blocks else 12 << 20)
    out16 = be.spmm_fused(adj, be.narrow(x), out_dtype=torch.bfloat16)
    assert out16.dtype == torch.bfloat16 and torch.equal(out16.view(torch.int16), _bf16_bits(ref1))
    # the fused forms: running mean (float32 acc, init) and the backward's added term
    n = adj.n_rows
    acc, acc_ref = torch.empty(n, 19), torch.empty(n, 19)
    init = torch.randn(n, 19, generator=g)
    be.spmm_fused(adj, be.narrow(x), 0.5, acc, init, None, 0.25, torch.bfloat16)
    monkeypatch.setattr(native, "COL_BLOCK_BYTES", 12 << 20)
    be.spmm_fused(adj, xr, 0.5, acc_ref, init, None, 0.25)
    monkeypatch.setattr(native, "COL_BLOCK_BYTES", 64 if blocks else 12 << 20)
    assert torch.equal(acc, acc_ref)
    add = torch.randn(n, 19, generator=g)
    y = be.spmm_fused(adj, be.narrow(x), 0.5, None, None, add, 0.25, torch.float32)
    assert torch.equal(y, be.spmm_fused(adj, xr, 0.5, None, None, add, 0.25))


def test_bf16_layer_mean_and_spmm_agree_with_fp32_and_give_fp32_gradients():
    adj = _bipartite(40, 30, 400)
    K = 3
    x = torch.randn(adj.n_cols, 16, requires_grad=True)
    gout = torch.randn(adj.n_rows, 16)
    tol = K * 2.0 ** -8
    for fn in (lambda p: kernels.layer_mean([adj] * K, x, 1 / (K + 1), p),
               lambda p: kernels.spmm(adj, x, precision=p)):
        outs, grads = {}, {}
        for p in ("fp32", "bf16"):
            x.grad = None
            outs[p] = fn(p)
            (outs[p] * gout).sum().backward()
            grads[p] = x.grad.clone()
        assert outs["bf16"].dtype == torch.float32 and grads["bf16"].dtype == torch.float32
        rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
        assert 0 < rel(outs["bf16"], outs["fp32"]) < tol
        assert 0 < rel(grads["bf16"], grads["fp32"]) < tol


def test_bf16_records_half_the_gathered_bytes_and_the_narrowing():
    adj = _bipartite(40, 30, 400)
    x = torch.randn(adj.n_cols, 16, requires_grad=True)
    recs = {}
    for p in ("fp32", "bf16"):
        rec = Recorder()
        rec.phase = "forward"
        with use_recorder(rec):
            kernels.layer_mean([adj] * 2, x, 1 / 3, p).sum().backward()
        recs[p] = rec.records
    spmm = {p: [r for r in rs if r.name == "spmm"] for p, rs in recs.items()}
    assert [r.row_bytes for r in spmm["fp32"]] == [64] * 4 and [r.row_bytes for r in spmm["bf16"]] == [32] * 4
    assert all(b.random_bytes * 2 == a.random_bytes for a, b in zip(spmm["fp32"], spmm["bf16"]))
    narrow = [(r.phase, r.bytes_read, r.bytes_written) for r in recs["bf16"] if r.name == "narrow"]
    n = adj.n_cols * 16
    assert narrow == [("forward", 4 * n, 2 * n), ("backward", 4 * adj.n_rows * 16, 2 * adj.n_rows * 16)]
    assert not any(r.name == "narrow" for r in recs["fp32"])


def test_bf16_bad_requests_are_refused_naming_the_precision():
    adj = _bipartite()
    x = torch.randn(adj.n_cols, 4)
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16"):
        kernels.spmm(adj, x, precision="fp16")
    with pytest.raises(ValueError, match="float32 inputs"):
        kernels.layer_mean([adj], x.double(), 0.5, "bf16")
    with kernels.use_backend("torch"), pytest.raises(ValueError, match="native backend only"):
        kernels.spmm(adj, x, precision="bf16")


def test_bf16_rows_through_spmm_stay_bf16_forward_and_backward():
    adj = _bipartite(40, 30, 400)
    x = torch.randn(adj.n_cols, 8).to(torch.bfloat16).requires_grad_(True)
    y = kernels.spmm(adj, x)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y.view(torch.int16), _bf16_bits(kernels.spmm(adj, x.detach().float())))
    g = torch.randn(adj.n_rows, 8).to(torch.bfloat16)
    y.backward(g)
    assert x.grad.dtype == torch.bfloat16
    assert torch.equal(x.grad.view(torch.int16), _bf16_bits(kernels.spmm(adj.transpose(), g.float())))
