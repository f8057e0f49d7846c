"""How many bytes and flops an ideal kernel must move and do.

Every kernel call is recorded with these numbers, computed from shapes, nnz and
dtypes only -- never from what a particular backend happens to do -- so two
backends running the same call are compared against the same work. The model:

* **Streams are read once.** ``indptr`` (int64, ``(n_rows+1)*8`` B), ``indices``
  (``nnz * index_bytes``), per-edge ``values``, and the degree scales
  ``row_scale`` / ``col_scale`` (each read once in full: ``col_scale`` is a
  4-byte-per-node vector read alongside the feature row of the same column, it
  stays cache resident next to the D-wide rows, so it is counted as one pass).
* **Feature rows reached through an index are random row reads**, one per
  stored entry, with no credit for cache reuse: SpMM reads ``x[c]`` for every
  entry, ``nnz * D * f`` bytes (``f`` the element size), ``row_bytes = D * f``.
  These bytes are also counted in ``random_bytes`` (what the tier model prices
  at random-access bandwidth).
* **Rows walked in order are streams**: SDDMM's ``u[r]`` (read once per row,
  ``n_rows * D * f``), outputs (written once).
* Small scalar indirections (an edge permutation, a scalar per edge fetched
  through it) are counted as reads but not as random rows.
* flops: one multiply-add = 2 flops; SpMM ``2 * nnz * D``; SDDMM dot
  ``2 * nnz * D``, mul ``nnz * D``.

Each function returns the keyword arguments for
:meth:`gnnrec_lab.util.recorder.Recorder.record` (bytes in bytes, flops in
floating point operations).
"""
from __future__ import annotations

from gnnrec_lab.kernels import native as nk
from gnnrec_lab.kernels.backends import _aux
from gnnrec_lab.util.proc import llc_bytes

INDPTR_BYTES = 8
PERM_BYTES = 4  # the native edge permutation is int32 below 2**31 entries


def kernel_cost(read, written, flops, pattern, row_bytes=0, random=0) -> dict:
    """One kernel call's bytes, flops and access pattern, as ``Recorder.record`` takes them."""
    return dict(bytes_read=int(read), bytes_written=int(written), flops=int(flops),
                pattern=pattern, row_bytes=int(row_bytes), random_bytes=int(random))


def weight_bytes(adj) -> int:
    """Bytes of the arrays that define the CSR weights (values, row and column scales)."""
    n = 0
    if adj.values is not None:
        n += adj.values.itemsize * adj.nnz
    if adj.row_scale is not None:
        n += adj.row_scale.itemsize * adj.n_rows
    if adj.col_scale is not None:
        n += adj.col_scale.itemsize * adj.n_cols
    return n


def spmm(adj, dim: int, elem: int, extra_read: int = 0, extra_written: int = 0, out_elem: int | None = None) -> dict:
    """``y = W x``: indptr, indices, weights, one gathered x row per entry; write y.
    ``elem``: bytes per element of x (2 for bf16 rows), ``out_elem`` of y (``elem`` by default).
    ``extra_read``/``extra_written``: bytes of a row-wise update fused into the same
    pass (LightGCN's running layer mean), streamed."""
    nnz = adj.nnz
    gathered = nnz * dim * elem
    out_elem = elem if out_elem is None else out_elem
    read = INDPTR_BYTES * (adj.n_rows + 1) + adj.index_bytes * nnz + weight_bytes(adj) + gathered + extra_read
    return kernel_cost(read, adj.n_rows * dim * out_elem + extra_written, 2 * nnz * dim, "gather", dim * elem,
                       gathered)


def spmm_rows(adj, rows_nnz: int, n_rows: int, dim: int, elem: int, acc_elem: int = 4) -> dict:
    """:func:`spmm` at ``n_rows`` of its rows holding ``rows_nnz`` entries (the last layer at the
    batch's rows): their row pointers, indices and weights, one gathered x row per entry, and the
    running mean's rows read and the result's written (``acc_elem`` bytes per element)."""
    gathered = rows_nnz * dim * elem
    wb = weight_bytes(adj) * rows_nnz // max(adj.nnz, 1)
    read = 2 * INDPTR_BYTES * n_rows + adj.index_bytes * rows_nnz + wb + gathered + n_rows * dim * acc_elem
    return kernel_cost(read, n_rows * dim * acc_elem, 2 * rows_nnz * dim, "gather", dim * elem, gathered)


def spmm_scatter_rows(adj, rows_nnz: int, n_sel: int, dim: int, elem: int, out_elem: int = 4) -> dict:
    """The transposed product of a table non-zero at ``n_sel`` rows only, as a scatter from their
    ``rows_nnz`` entries: their row pointers, indices and weights, the selected rows read once
    (``elem`` bytes per element) with their addend (``out_elem``), one output row updated per entry
    (read and written, the random traffic) and every output row zeroed first."""
    row = dim * out_elem
    scattered = rows_nnz * row
    wb = weight_bytes(adj) * rows_nnz // max(adj.nnz, 1)
    read = 2 * INDPTR_BYTES * n_sel + adj.index_bytes * rows_nnz + wb + n_sel * dim * (elem + out_elem) + scattered
    return kernel_cost(read, adj.n_cols * row + scattered, 2 * rows_nnz * dim, "gather", row, scattered)


# The share of the last-level cache the cache-aware model lets gathered rows occupy (the rest holds
# the output rows, the index streams and the other thread's panel).
CACHE_SHARE = 0.5


def spmm_cached(adj, dim: int, elem: int, extra_read: int = 0, extra_written: int = 0,
                cache_bytes: int | None = None) -> dict:
    """:func:`spmm`'s bytes with credit for cache reuse (*modeled*): a gathered row comes from DRAM
    once per panel of consecutive rows whose distinct gathered rows fit in
    ``CACHE_SHARE * cache_bytes`` (default: :func:`llc_bytes`), re-reads within a panel come from
    cache (see :func:`~gnnrec_lab.kernels.native.distinct_gathers`). Always <= :func:`spmm`'s
    bytes, so a bound on it is the lower, and with a locality order the meaningful, one. The
    distinct count is one pass over the CSR, cached on it per budget."""
    row = dim * elem
    budget = max(1, int(CACHE_SHARE * (cache_bytes or llc_bytes())) // row)
    aux = _aux(adj)
    key = ("distinct_gathers", budget)
    if key not in aux:
        aux[key] = nk.distinct_gathers(adj.indptr, adj.indices, adj.n_cols, budget)
    distinct = int(aux[key][0])
    c = spmm(adj, dim, elem, extra_read, extra_written)
    saved = (adj.nnz - distinct) * row
    c["bytes_read"] -= saved
    c["random_bytes"] -= saved
    return c


def spmm_edge(adj, dim: int, elem: int) -> dict:
    """``y[r] = sum_e w_e m_e``: per-edge messages streamed in order; indices only
    needed to look up ``col_scale``."""
    nnz = adj.nnz
    read = (INDPTR_BYTES * (adj.n_rows + 1) + (adj.index_bytes * nnz if adj.col_scale is not None else 0)
            + weight_bytes(adj) + nnz * dim * elem)
    return kernel_cost(read, adj.n_rows * dim * elem, 2 * nnz * dim, "stream")


def edge_broadcast(adj, dim: int, elem: int) -> dict:
    """Backward of ``spmm_edge``: ``g_e = w_e * g_y[r_e]``, rows of g_y read in order."""
    nnz = adj.nnz
    read = (INDPTR_BYTES * (adj.n_rows + 1) + (adj.index_bytes * nnz if adj.col_scale is not None else 0)
            + weight_bytes(adj) + adj.n_rows * dim * elem)
    return kernel_cost(read, nnz * dim * elem, nnz * dim, "stream")


def sddmm(adj, dim: int, elem: int, op: str) -> dict:
    """Per entry ``u[r] . v[c]`` (dot) or ``u[r] * v[c]`` (mul): u rows in order,
    v rows gathered, one scalar (dot) or one D-row (mul) written per entry."""
    nnz = adj.nnz
    gathered = nnz * dim * elem
    read = (INDPTR_BYTES * (adj.n_rows + 1) + adj.index_bytes * nnz + adj.n_rows * dim * elem + gathered)
    if op == "dot":
        return kernel_cost(read, nnz * elem, 2 * nnz * dim, "gather", dim * elem, gathered)
    return kernel_cost(read, nnz * dim * elem, nnz * dim, "gather", dim * elem, gathered)


def sddmm_backward(adj, dim: int, elem: int, op: str, need_u: bool, need_v: bool) -> dict:
    """Gradients of :func:`sddmm` wrt u (a pass over rows) and v (a pass over the
    transposed structure, reaching g through an edge permutation)."""
    nnz = adj.nnz
    row = dim * elem
    g_edge = nnz * (elem if op == "dot" else row)  # the incoming per-edge gradient
    read = written = flops = random = 0
    if need_u:
        read += INDPTR_BYTES * (adj.n_rows + 1) + adj.index_bytes * nnz + g_edge + nnz * row
        written += adj.n_rows * row
        flops += 2 * nnz * dim
        random += nnz * row
    if need_v:
        read += INDPTR_BYTES * (adj.n_cols + 1) + adj.index_bytes * nnz + PERM_BYTES * nnz + g_edge + nnz * row
        written += adj.n_cols * row
        flops += 2 * nnz * dim
        # mul: the D-wide gradient rows are reached through the permutation too
        random += nnz * row + (g_edge if op == "mul" else 0)
    return kernel_cost(read, written, flops, "gather", row, random)


def gather(n: int, dim: int, elem: int, idx_bytes: int) -> dict:
    """``table[idx]``: read the index, one random table row per index, write the rows."""
    rows = n * dim * elem
    return kernel_cost(n * idx_bytes + rows, rows, 0, "gather", dim * elem, rows)


def scatter_add(n: int, n_table: int, dim: int, elem: int, idx_bytes: int) -> dict:
    """Backward of gather: zero a dense ``(n_table, D)`` gradient (written once),
    then read-modify-write one random row per index."""
    rows = n * dim * elem
    return kernel_cost(n * idx_bytes + rows + rows, n_table * dim * elem + rows, n * dim, "scatter",
                 dim * elem, 2 * rows)


def bpr_rows(b: int, n_table: int, dim: int, elem: int, idx_bytes: int) -> dict:
    """Fused BPR loss over ``b`` triples with its gradient: read 3b indices and 3b random rows,
    zero the dense ``(n_table, D)`` gradient, read-modify-write 3b random gradient rows;
    ~8 flops per element of a triple (two dots as one, three row updates)."""
    rows = 3 * b * dim * elem
    return kernel_cost(3 * b * idx_bytes + 2 * rows, n_table * dim * elem + rows, 8 * b * dim, "gather",
                 dim * elem, 2 * rows)


def sq_norm_rows(m: int, n_table: int, dim: int, elem: int, idx_bytes: int, part: str = "both") -> dict:
    """Fused L2 term over ``m`` gathered rows (one row per index). ``part``: "both" - the value and
    the gradient in one pass (as :func:`bpr_rows`: zero a dense gradient, read-modify-write a
    gradient row per index); "add" - likewise into a gradient already zeroed (MF: the BPR term's);
    "value" - read the rows only; "grad" - read the rows and read-modify-write a row of an
    existing gradient per index (the layer mean's backward adding the deferred term)."""
    rows = m * dim * elem
    read, written, flops, random = m * idx_bytes + rows, 0, (4 if part in ("both", "add") else 2) * m * dim, rows
    if part != "value":
        read, written, random = read + rows, rows, random + rows
    if part == "both":
        written += n_table * dim * elem
    return kernel_cost(read, written, flops, "gather", dim * elem, random)


def gemm(m: int, k: int, n: int, elem: int) -> dict:
    """``(m,k) @ (k,n)``: both operands read once, the result written once."""
    return kernel_cost((m * k + k * n) * elem, m * n * elem, 2 * m * k * n, "compute")


def gemm_backward(m: int, k: int, n: int, elem: int, need_x: bool, need_w: bool) -> dict:
    """grad_x = g @ w^T (reads g, w; writes m*k) and grad_w = x^T @ g (reads x, g; writes k*n)."""
    read = written = flops = 0
    if need_x:
        read += (m * n + k * n) * elem
        written += m * k * elem
        flops += 2 * m * k * n
    if need_w:
        read += (m * k + m * n) * elem
        written += k * n * elem
        flops += 2 * m * k * n
    return kernel_cost(read, written, flops, "compute")
