"""Native CPU kernels (numba), the default backend.

Every row kernel is parallel over *chunks of rows with equal non-zeros* (see
:func:`row_chunks`): a power-law graph has hub rows with thousands of entries,
and splitting by row count would leave one thread working on the hubs while the
others idle. The chunks are many more than the threads (:data:`WORK_CHUNKS_PER_THREAD`)
and handed out *dynamically*: each thread takes the next chunk from a shared atomic
counter (:func:`_next_chunk`) until none is left (the ``prange`` runs one such taker per
chunk: each thread's first taker drains the counter with the others, the rest find it empty;
numba's static split of the ``prange`` itself then decides nothing). A thread the OS deschedules on a
shared machine then holds up one small chunk, not a static 1/threads of the rows (the
others take over the rest). Which thread runs a row never changes what is computed for
it, so results stay bit for bit those of a static split.
Outputs are allocated by the caller (``torch.empty``) and passed as
numpy views, so nothing is allocated inside the loops. ``fastmath`` stays off so
results are reproducible and float64 runs pass ``gradcheck`` (one exception,
:func:`sddmm_dot`, says why).

Optional arguments (per-edge ``values``, ``row_scale``, ``col_scale``, an edge
permutation ``eperm``) may be ``None``; numba prunes those branches at compile
time, so every combination is its own specialised machine code.

Compilation goes to the on-disk cache (``cache=True``): the first process pays
the JIT once, later processes load it. :func:`ensure_compiled` compiles (or
loads) a signature outside of any timed region so kernel records never include
compile time.
"""
from __future__ import annotations

import time

import numba
import numpy as np
from llvmlite import ir
from llvmlite.binding import llvm_version_info
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from gnnrec_lab.util.proc import llc_bytes

JIT = dict(parallel=True, cache=True, fastmath=False, nogil=True)
# Software prefetch distance (entries ahead) for gathered rows: the row loops are latency-bound
# (a few misses in flight per core); prefetching 32 entries ahead halves an L3-resident SpMM
# (200k nodes / 5M nnz, D=64: 4/8/16/32 entries ahead -> 46/48/44/33 ms, none 67-89 ms).
PREFETCH_AHEAD = 32
PREFETCH_MAX_LINES = 16  # at most 1 KiB of a row (D=256 float32)
# the intrinsic's name carries its pointer type: typed pointers (LLVM < 15) mangle it as p0i8
_PREFETCH_INTRINSIC = "llvm.prefetch.p0" if llvm_version_info >= (15,) else "llvm.prefetch.p0i8"


@intrinsic
def _prefetch_row(typingctx, arr, idx):
    """Hint the CPU to load row ``idx`` of the 2-D C-contiguous ``arr`` (``llvm.prefetch``, read,
    keep in all cache levels): up to :data:`PREFETCH_MAX_LINES` 64-byte lines of the row. A hint
    only: never faults, never changes results."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        row = context.cast(builder, args[1], signature.args[1], types.intp)
        strides = cgutils.unpack_tuple(builder, ary.strides)
        start = builder.gep(builder.bitcast(ary.data, ir.IntType(8).as_pointer()), [builder.mul(row, strides[0])])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH_INTRINSIC)
        for k in range(PREFETCH_MAX_LINES):
            off = context.get_constant(types.intp, 64 * k)
            with builder.if_then(builder.icmp_signed("<", off, strides[0]), likely=True):
                builder.call(fn, [builder.gep(start, [off]), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return sig, codegen
# -- bf16 rows (RunConfig.precision "bf16") ----------------------------------------------------
# numba has no bfloat16 type: a bf16 table is a uint16 array of the values' top 16 bits (torch's
# bfloat16 storage). A kernel widens an element on load (a 16-bit shift into a float32's bits) and
# narrows a finished float32 value on store, rounding to nearest even; every sum is float32.
@intrinsic
def _f32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the uint32 ``bits``."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return sig, codegen


@intrinsic
def _bits_from_f32(typingctx, value):
    """The uint32 bit pattern of the float32 ``value``."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return sig, codegen


@njit(inline="always")
def bf16_round(v):
    """The bf16 (uint16 bits) nearest the float32 ``v``, ties to even; NaN stays a (quiet) NaN."""
    b = _bits_from_f32(np.float32(v))
    if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((b >> np.uint32(16)) | np.uint32(0x0040))
    b = b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))
    return np.uint16(b >> np.uint32(16))


def _ld(a, i, j):
    """``a[i, j]``, widened to float32 when ``a`` holds bf16 bits (uint16)."""


@overload(_ld, inline="always")
def _ld_impl(a, i, j):
    if isinstance(a, types.Array) and a.dtype == types.uint16:
        def impl(a, i, j):
            return _f32_from_bits(np.uint32(a[i, j]) << np.uint32(16))
    else:
        def impl(a, i, j):
            return a[i, j]
    return impl


def _acc_dtype(a):
    """The dtype rows of ``a`` are summed in: float32 for bf16 bits, else ``a``'s."""


@overload(_acc_dtype, inline="always")
def _acc_dtype_impl(a):
    if a.dtype == types.uint16:
        return lambda a: np.float32
    dt = a.dtype
    return lambda a: dt


def _acc_get(out, tmp, r, d):
    """Element ``d`` of row ``r``'s sum: ``out[r, d]`` (a float ``out``, summed in place) or
    ``tmp[d]`` (a bf16 ``out``: the row is summed in the float32 scratch row ``tmp`` and narrowed by
    :func:`_row_store` once finished). :func:`_acc_set` writes it."""


@overload(_acc_get, inline="always")
def _acc_get_impl(out, tmp, r, d):
    if out.dtype == types.uint16:
        return lambda out, tmp, r, d: tmp[d]
    return lambda out, tmp, r, d: out[r, d]


def _acc_set(out, tmp, r, d, v):
    """Set element ``d`` of row ``r``'s sum (see :func:`_acc_get`)."""


@overload(_acc_set, inline="always")
def _acc_set_impl(out, tmp, r, d, v):
    if out.dtype == types.uint16:
        def impl(out, tmp, r, d, v):
            tmp[d] = v
    else:
        def impl(out, tmp, r, d, v):
            out[r, d] = v
    return impl


def _scratch(out, D):
    """A float32 scratch row of ``D`` for a bf16 ``out`` (empty for a float one)."""


@overload(_scratch, inline="always")
def _scratch_impl(out, D):
    if out.dtype == types.uint16:
        return lambda out, D: np.empty(D, dtype=np.float32)
    dt = out.dtype
    return lambda out, D: np.empty(0, dtype=dt)


def _row_store(out, r, tmp):
    """Narrow the finished float32 scratch row ``tmp`` into row ``r`` of a bf16 ``out`` (a float
    ``out`` was summed in place: nothing to do)."""


@overload(_row_store, inline="always")
def _row_store_impl(out, r, tmp):
    if out.dtype == types.uint16:
        def impl(out, r, tmp):
            for d in range(tmp.shape[0]):
                out[r, d] = bf16_round(tmp[d])
    else:
        def impl(out, r, tmp):
            pass
    return impl


@njit(**JIT)
def bf16_narrow(x, out):
    """out = x rounded to bf16 (uint16 bits), ties to even: a float32 table's propagated copy."""
    for i in prange(x.shape[0]):
        for d in range(x.shape[1]):
            out[i, d] = bf16_round(x[i, d])
    return out


# Chunks per thread of a static split (the calibration's streams, where every chunk costs the same).
CHUNKS_PER_THREAD = 4
# Chunks per thread of the dynamically scheduled row kernels: a descheduled thread strands at most
# one chunk (1/64 of a thread's share), and 128 atomic increments per call cost nothing next to
# milliseconds of rows.
WORK_CHUNKS_PER_THREAD = 64
# ... but no chunk below this many entries: on a small graph (a 1 ms SpMM) more chunks than that are
# only atomics and prange iterations. Measured only under load (small graph, 100k nnz, load 7-8,
# paired rounds against the static split of 8): 128 chunks 0.88-0.94x, 24 chunks 0.72-0.92x, within
# that load's noise; the floor keeps the per-chunk work well above the counter's cost either way.
MIN_CHUNK_NNZ = 4096


def work_chunk_count(nnz: int, threads: int) -> int:
    """Chunks the dynamically scheduled kernels split ``nnz`` entries into for ``threads`` threads:
    :data:`WORK_CHUNKS_PER_THREAD` per thread, fewer when chunks would fall below
    :data:`MIN_CHUNK_NNZ` entries, never fewer than ``threads``."""
    return int(max(threads, min(WORK_CHUNKS_PER_THREAD * threads, nnz // MIN_CHUNK_NNZ)))


@intrinsic
def _next_chunk(typingctx, counter, slot):
    """Atomically ``counter[slot] += 1`` and return the value before (the next chunk to take).
    Monotonic ordering is enough: the chunks' results are published by the parallel region's
    closing barrier, not through the counter."""
    sig = types.int64(counter, slot)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [idx])
        return builder.atomic_rmw("add", ptr, ir.Constant(ir.IntType(64), 1), "monotonic")
    return sig, codegen


def row_chunks(indptr: np.ndarray, n_chunks: int) -> np.ndarray:
    """Row boundaries (int64, ascending, first 0, last n_rows) of at most ``n_chunks``
    chunks holding about ``nnz / n_chunks`` entries each (a row is never split)."""
    n_rows = indptr.shape[0] - 1
    nnz = int(indptr[-1])
    if n_rows == 0:
        return np.zeros(1, dtype=np.int64)
    targets = np.linspace(0, nnz, n_chunks + 1)
    b = np.searchsorted(indptr, targets, side="left").astype(np.int64)
    b[0], b[-1] = 0, n_rows
    return np.unique(np.clip(b, 0, n_rows))


@njit(inline="always")
def _edge_weight(values, eperm, col_scale, e, c, one):
    w = one
    if values is not None:
        if eperm is not None:
            w = w * values[eperm[e]]
        else:
            w = w * values[e]
    if col_scale is not None:
        w = w * col_scale[c]
    return w


@njit(inline="always")
def _block_range(indptr, pos, b, r, chunk_end):
    """Row ``r``'s entries in column block ``b`` (``lo``, ``hi``) and the bound below which
    the entry ``PREFETCH_AHEAD`` further on may be prefetched: in a plain CSR (``pos`` None)
    entries run on across the chunk's rows, in a block the row's range is all there is."""
    if pos is None:
        lo = indptr[r]
        hi = indptr[r + 1]
        lim = indptr[chunk_end]
    else:
        lo = pos[b, r]
        hi = pos[b + 1, r]
        lim = hi
    return lo, hi, lim - PREFETCH_AHEAD


@njit(**JIT)
def spmm(indptr, pos, indices, values, eperm, row_scale, col_scale, x, out, bounds,
         alpha, acc, init, addend, beta):
    """out[r] = alpha * row_scale[r] * sum_e values[eperm[e]] * col_scale[c_e] * x[c_e],
    optionally fused with a per-row update while the row is hot in L1:

    * ``acc`` given (LightGCN's layer mean): for r < len(acc),
      ``acc[r] = (beta * init[r] if init is not None else acc[r]) + beta * out[r]``;
    * ``addend`` given (the mean's backward): for r < len(addend), ``out[r] += beta * addend[r]``.

    *Column blocks*: with ``pos`` given (``(nb+1, n_rows)``, see :func:`col_blocks`), row r's
    entries whose column falls in block b are ``pos[b, r] .. pos[b+1, r]`` of the CSR (rows
    hold sorted columns). Blocks run one after another, each pass gathering only from its
    slice of ``x``, which then stays in the last-level cache; ``bounds[b]`` are block b's
    nnz-balanced row chunks. ``pos`` None: one block, the plain CSR.

    Edges are taken four at a time, ``out[r] += (w0 x0 + w1 x1) + (w2 x2 + w3 x3)``:
    one load/store of the output row per four edges instead of per edge, and four
    independent products per add chain (1.5x on cache-resident graphs). The order of
    the sum is fixed by the CSR and the blocking, so results repeat bit for bit.

    *bf16*: ``x`` may hold bf16 bits (uint16, widened on load) and so may ``out`` (each row summed
    in a float32 scratch row, then rounded to nearest even; one column block only: the partial
    sums of several blocks would need a float32 row each). Weights, ``alpha``/``beta`` and the
    sums are float32 then; ``acc`` stays float32."""
    D = x.shape[1]
    nb = bounds.shape[0]
    one = _acc_dtype(out)(1)
    taken = np.zeros(nb, dtype=np.int64)
    for b in range(nb):
        bd = bounds[b]
        n_ch = bd.shape[0] - 1
        for _w in prange(n_ch):
            tmp = _scratch(out, D)
            ch = _next_chunk(taken, b)
            while ch < n_ch:
                for r in range(bd[ch], bd[ch + 1]):
                    if b == 0:
                        for d in range(D):
                            _acc_set(out, tmp, r, d, 0)
                    e, end, lim = _block_range(indptr, pos, b, r, bd[ch + 1])
                    while e + 4 <= end:
                        for k in range(4):
                            if e + k < lim:
                                _prefetch_row(x, indices[e + k + PREFETCH_AHEAD])
                        c0 = indices[e]
                        c1 = indices[e + 1]
                        c2 = indices[e + 2]
                        c3 = indices[e + 3]
                        w0 = _edge_weight(values, eperm, col_scale, e, c0, one)
                        w1 = _edge_weight(values, eperm, col_scale, e + 1, c1, one)
                        w2 = _edge_weight(values, eperm, col_scale, e + 2, c2, one)
                        w3 = _edge_weight(values, eperm, col_scale, e + 3, c3, one)
                        for d in range(D):
                            _acc_set(out, tmp, r, d, _acc_get(out, tmp, r, d)
                                     + ((w0 * _ld(x, c0, d) + w1 * _ld(x, c1, d))
                                        + (w2 * _ld(x, c2, d) + w3 * _ld(x, c3, d))))
                        e += 4
                    while e < end:
                        if e < lim:
                            _prefetch_row(x, indices[e + PREFETCH_AHEAD])
                        c = indices[e]
                        w = _edge_weight(values, eperm, col_scale, e, c, one)
                        for d in range(D):
                            _acc_set(out, tmp, r, d, _acc_get(out, tmp, r, d) + w * _ld(x, c, d))
                        e += 1
                    if b == nb - 1:
                        _finish_row(out, tmp, r, D, alpha, row_scale, acc, init, addend, beta, one)
                        _row_store(out, r, tmp)
                ch = _next_chunk(taken, b)
    return out


@njit(**JIT)
def spmm_rows(indptr, indices, values, row_scale, col_scale, x, rows, base, gamma, beta, out, bounds):
    """``out[i] = gamma * base[r] + beta * row_scale[r] * sum_e w_e x[c_e]`` for ``r = rows[i]``: the product
    at a subset of its rows, added to the running layer mean's rows (LightGCN's last layer, which
    the loss reads only at the batch's rows). ``x`` may hold bf16 bits (uint16, widened on load);
    the sums, ``base`` and ``out`` are float32 (or ``x``'s float type). Entries four at a time
    and in CSR order, as in :func:`spmm`, so a row's sum is the unblocked product's bit for bit.
    ``bounds``: chunks of ``rows`` balanced by their entries (:func:`rows_chunks`), taken by the
    threads as they finish (popular items' rows are long)."""
    D = x.shape[1]
    one = _acc_dtype(out)(1)
    taken = np.zeros(1, dtype=np.int64)
    n_ch = bounds.shape[0] - 1
    for _w in prange(n_ch):
        tmp = np.empty(D, dtype=out.dtype)
        ch = _next_chunk(taken, 0)
        while ch < n_ch:
            for i in range(bounds[ch], bounds[ch + 1]):
                r = rows[i]
                for d in range(D):
                    tmp[d] = 0
                e = indptr[r]
                end = indptr[r + 1]
                lim = end - PREFETCH_AHEAD
                while e + 4 <= end:
                    for k in range(4):
                        if e + k < lim:
                            _prefetch_row(x, indices[e + k + PREFETCH_AHEAD])
                    c0 = indices[e]
                    c1 = indices[e + 1]
                    c2 = indices[e + 2]
                    c3 = indices[e + 3]
                    w0 = _edge_weight(values, None, col_scale, e, c0, one)
                    w1 = _edge_weight(values, None, col_scale, e + 1, c1, one)
                    w2 = _edge_weight(values, None, col_scale, e + 2, c2, one)
                    w3 = _edge_weight(values, None, col_scale, e + 3, c3, one)
                    for d in range(D):
                        tmp[d] = tmp[d] + ((w0 * _ld(x, c0, d) + w1 * _ld(x, c1, d))
                                           + (w2 * _ld(x, c2, d) + w3 * _ld(x, c3, d)))
                    e += 4
                while e < end:
                    c = indices[e]
                    w = _edge_weight(values, None, col_scale, e, c, one)
                    for d in range(D):
                        tmp[d] = tmp[d] + w * _ld(x, c, d)
                    e += 1
                s = one
                if row_scale is not None:
                    s = row_scale[r]
                for d in range(D):
                    out[i, d] = gamma * base[r, d] + beta * (tmp[d] * s)
            ch = _next_chunk(taken, 0)
    return out


def rows_chunks(indptr, rows, threads: int) -> np.ndarray:
    """Chunk bounds over ``rows`` (positions into it), :func:`work_chunk_count` chunks of about
    equal entries of ``indptr`` each."""
    deg = indptr[rows + 1] - indptr[rows]
    cum = np.concatenate([[0], np.cumsum(deg)])
    n_chunks = work_chunk_count(int(cum[-1]), threads)
    b = np.searchsorted(cum, np.linspace(0, cum[-1], n_chunks + 1), side="left").astype(np.int64)
    b[0], b[-1] = 0, rows.shape[0]
    return np.unique(np.clip(b, 0, rows.shape[0]))


@njit(**JIT)
def spmm_scatter_rows(indptr, indices, values, row_scale, col_scale, g, rows, alpha, addend, beta, out, parts):
    """``out = alpha * W^T (S^T g) + beta * S^T addend`` where ``S`` selects ``rows`` (``g``'s row i
    belongs to node ``rows[i]``): the transposed product of a gradient that is non-zero at the
    batch's rows only, as a scatter from those rows' entries of ``W`` (``out[c_e] += w_e g[i]``),
    so its cost is their entries, not the matrix's (the backward of :func:`spmm_rows`). Thread
    ``t`` owns the output rows ``parts[t] .. parts[t+1]``: it zeroes them and takes the entries
    that land there (no two threads write a row). ``g`` may hold bf16 bits; ``out`` and
    ``addend`` float."""
    D = g.shape[1]
    one = _acc_dtype(out)(1)
    for t in prange(parts.shape[0] - 1):
        lo = parts[t]
        hi = parts[t + 1]
        for r in range(lo, hi):
            for d in range(D):
                out[r, d] = 0
        for i in range(rows.shape[0]):
            r = rows[i]
            rs = alpha
            if row_scale is not None:
                rs = rs * row_scale[r]
            if lo <= r < hi:
                for d in range(D):
                    out[r, d] += beta * addend[i, d]
            end = indptr[r + 1]
            for e in range(indptr[r], end):
                if e + PREFETCH_AHEAD < end:
                    ca = indices[e + PREFETCH_AHEAD]
                    if lo <= ca < hi:
                        _prefetch_row(out, ca)
                c = indices[e]
                if lo <= c < hi:
                    w = rs * _edge_weight(values, None, col_scale, e, c, one)
                    for d in range(D):
                        out[c, d] += w * _ld(g, i, d)
    return out


@njit(inline="always")
def _finish_row(out, tmp, r, D, alpha, row_scale, acc, init, addend, beta, one):
    """Row ``r``'s last touches on its sum (see :func:`_acc_get`): the scale, then the fused
    update of the running mean (``acc``) or the added term (``addend``)."""
    s = alpha
    if row_scale is not None:
        s = s * row_scale[r]
    if s != one:
        for d in range(D):
            _acc_set(out, tmp, r, d, _acc_get(out, tmp, r, d) * s)
    if acc is not None:
        if r < acc.shape[0]:
            if init is not None:
                for d in range(D):
                    acc[r, d] = beta * _ld(init, r, d) + beta * _acc_get(out, tmp, r, d)
            else:
                for d in range(D):
                    acc[r, d] += beta * _acc_get(out, tmp, r, d)
    if addend is not None:
        if r < addend.shape[0]:
            for d in range(D):
                _acc_set(out, tmp, r, d, _acc_get(out, tmp, r, d) + beta * _ld(addend, r, d))


# Column blocking: an x slice of 3/8 of the last-level cache stays there together with the
# output and index streams (measured with a 32 MiB L3 on a 200k-node / 5M-nnz graph, D=64: 4 blocks
# of 12 MiB 55 ms, 8 of 6 MiB 57 ms, 16 of 3 MiB 71 ms, unblocked 100 ms). The slice scales with
# the cache this host reports: with a 480 MiB L3 the same graph's 51 MiB x fits whole, and blocking
# it in 12 MiB slices cost time (forward 36.7 ms blocked vs 25.8 ms unblocked, 2026-12-04).
COL_BLOCK_SHARE = 3 / 8
MIN_COL_BLOCK_BYTES = 12 << 20


def col_block_bytes(cache_bytes: int) -> int:
    """The column block's x slice for a last-level cache of ``cache_bytes``."""
    return max(MIN_COL_BLOCK_BYTES, int(COL_BLOCK_SHARE * cache_bytes))


COL_BLOCK_BYTES = col_block_bytes(llc_bytes())
MAX_COL_BLOCKS = 8  # beyond this the per-block row positions (8 B per row per block) cost more than they save


def col_block_count(n_cols: int, row_bytes: int) -> int:
    """How many column blocks :func:`spmm` uses for an ``x`` of ``n_cols`` rows of
    ``row_bytes``: 1 when x fits in one block or is too large to block usefully."""
    nb = -(-n_cols * row_bytes // COL_BLOCK_BYTES)
    return nb if 1 < nb <= MAX_COL_BLOCKS else 1


def col_blocks(indptr, indices, n_cols: int, nb: int, n_chunks: int):
    """Column-block boundaries of a CSR whose rows hold sorted columns:
    ``(pos (nb+1, n_rows), bounds (nb, n_chunks'+1))`` for :func:`spmm` /
    :func:`sddmm_dot`; blocks of equal column width; no entry is copied."""
    n_rows = indptr.shape[0] - 1
    width = -(-n_cols // nb)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr))
    counts = np.bincount(rows * nb + indices // width, minlength=n_rows * nb).reshape(n_rows, nb)
    pos = np.empty((nb + 1, n_rows), dtype=np.int64)
    pos[0] = indptr[:-1]
    np.cumsum(counts.T, axis=0, out=pos[1:])
    pos[1:] += indptr[:-1]
    chunks = []
    for k in range(nb):
        ip = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(counts[:, k], out=ip[1:])
        chunks.append(row_chunks(ip, n_chunks))
    w = max(len(c) for c in chunks)
    bounds = np.array([np.concatenate([c, np.full(w - len(c), c[-1])]) for c in chunks], dtype=np.int64)
    return pos, bounds


# Above this table size (where column blocks stop, see col_block_count) a symmetric bipartite
# matrix is multiplied side by side (spmm_sides): the random accesses then fall in the smaller
# side's table only.
# (a fixed size, not scaled with the cache: on a 480 MiB-L3 VM synth-xl ran faster side by side,
# community order 16.67 vs 20.96 s per step, docs/scale.md)
SIDES_MIN_BYTES = MAX_COL_BLOCKS * MIN_COL_BLOCK_BYTES
# spmm_sides prefetches two rows per entry (gathered and scattered), so it looks half as far ahead
# (synth-xl, community order, plain product: 8 ahead 1.28 s, 16: 1.43, 32: 1.40, none: 1.49)
SIDES_PREFETCH_AHEAD = 8


@njit(**JIT)
def spmm_sides(indptr, indices, row_scale, col_scale, x, n_first, out, part, bounds,
               alpha, acc, init, addend, beta):
    """:func:`spmm` for a symmetric bipartite matrix whose first ``n_first`` rows (users) hold
    only columns ``>= n_first`` (items) and whose weights are ``row_scale[r] * col_scale[c]``
    with ``row_scale`` = ``col_scale`` (the normalised adjacency), in one pass over the first
    side's rows only:

    * a user row gathers its items' rows of ``x`` (``out[u] = sum_c col_scale[c] x[c]``);
    * the same entry scatters the user's row into its item's row of ``part[t]``, part ``t``'s
      private accumulator (``part[t, c - n_first] += col_scale[u] x[u]``), so the item half
      ``W[items, users] x[users]`` needs no pass over the item rows: the users' rows of ``x``
      are read in order, once, and every random access (gather and scatter) falls in the item
      side's rows, the smaller table, whose hot rows stay in cache;
    * then each item row sums the parts (``part[0] + part[1] + ...``, in that order).

    ``bounds``: ``len(part) + 1`` boundaries of nnz-balanced user-row ranges, one per part
    (``part`` is scratch of shape ``(n_parts, n_rows - n_first, D)``, zeroed here). Every row
    ends as in :func:`spmm` (``alpha``, the row scale, ``acc``/``init``/``addend``/``beta``
    through the same per-row update). The order of every sum is fixed by the CSR and the parts,
    so results repeat bit for bit for a given part count; they equal :func:`spmm`'s up to
    float summation order."""
    D = x.shape[1]
    n_second = part.shape[1]
    one = np.ones(1, dtype=out.dtype)[0]
    for t in prange(part.shape[0]):
        acc_t = part[t]
        for i in range(n_second):
            for d in range(D):
                acc_t[i, d] = 0
        lim = indptr[bounds[t + 1]] - SIDES_PREFETCH_AHEAD
        for u in range(bounds[t], bounds[t + 1]):
            su = one if col_scale is None else col_scale[u]
            for d in range(D):
                out[u, d] = 0
            e = indptr[u]
            end = indptr[u + 1]
            while e + 2 <= end:  # two edges at a time (four: 1.3x slower, the scatter's stores pile up)
                if e + 1 < lim:  # both rows an entry ahead touches: the gathered one and the scattered one
                    for k in range(2):
                        cp = indices[e + k + SIDES_PREFETCH_AHEAD]
                        _prefetch_row(x, cp)
                        _prefetch_row(acc_t, cp - n_first)
                c0 = indices[e]
                c1 = indices[e + 1]
                w0 = _edge_weight(None, None, col_scale, e, c0, one)
                w1 = _edge_weight(None, None, col_scale, e + 1, c1, one)
                i0 = c0 - n_first
                i1 = c1 - n_first
                for d in range(D):
                    xu = su * x[u, d]
                    out[u, d] += w0 * x[c0, d] + w1 * x[c1, d]
                    acc_t[i0, d] += xu
                    acc_t[i1, d] += xu
                e += 2
            while e < end:
                c = indices[e]
                w = _edge_weight(None, None, col_scale, e, c, one)
                i = c - n_first
                for d in range(D):
                    out[u, d] += w * x[c, d]
                    acc_t[i, d] += su * x[u, d]
                e += 1
            _finish_row(out, None, u, D, alpha, row_scale, acc, init, addend, beta, one)
    for i in prange(n_second):
        r = n_first + i
        for d in range(D):
            v = part[0, i, d]
            for t in range(1, part.shape[0]):
                v += part[t, i, d]
            out[r, d] = v
        _finish_row(out, None, r, D, alpha, row_scale, acc, init, addend, beta, one)
    return out


def sides_bounds(indptr, n_first: int, n_parts: int) -> np.ndarray:
    """``n_parts + 1`` boundaries (int64, first 0, last ``n_first``) of user-row ranges holding
    about equal shares of the first side's entries, for :func:`spmm_sides`."""
    ip = indptr[: n_first + 1]
    b = np.searchsorted(ip, np.linspace(0, int(ip[-1]), n_parts + 1), side="left").astype(np.int64)
    b[0], b[-1] = 0, n_first
    return np.maximum.accumulate(np.clip(b, 0, n_first))


def rows_sorted(indptr, indices) -> bool:
    """Whether every CSR row lists its columns in ascending order (what column blocks need)."""
    if indices.shape[0] < 2:
        return True
    asc = indices[1:] >= indices[:-1]
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < indices.shape[0])]
    asc[starts - 1] = True  # a row may start below where the previous one ended
    return bool(asc.all())


@njit(**JIT)
def edge_aggregate(indptr, indices, values, row_scale, col_scale, ev, eperm, xg, out, bounds):
    """out[r] = row_scale[r] * sum_e values[e] * col_scale[c_e] * ev[eperm[e]] (* xg[c_e]).

    With ``xg`` None this aggregates per-edge messages (``spmm_edge``); with ``xg``
    given it is the backward of ``sddmm(op="mul")`` (sum of g_e * v[c_e])."""
    D = ev.shape[1]
    one = np.ones(1, dtype=out.dtype)[0]
    taken = np.zeros(1, dtype=np.int64)
    n_ch = bounds.shape[0] - 1
    for _w in prange(n_ch):
        ch = _next_chunk(taken, 0)
        while ch < n_ch:
            for r in range(bounds[ch], bounds[ch + 1]):
                for d in range(D):
                    out[r, d] = 0
                for e in range(indptr[r], indptr[r + 1]):
                    w = one
                    if values is not None:
                        w = w * values[e]
                    if col_scale is not None:
                        w = w * col_scale[indices[e]]
                    k = e
                    if eperm is not None:
                        k = eperm[e]
                    if xg is not None:
                        c = indices[e]
                        for d in range(D):
                            out[r, d] += w * ev[k, d] * xg[c, d]
                    else:
                        for d in range(D):
                            out[r, d] += w * ev[k, d]
                if row_scale is not None:
                    s = row_scale[r]
                    for d in range(D):
                        out[r, d] *= s
            ch = _next_chunk(taken, 0)
    return out


@njit(**JIT)
def edge_broadcast(indptr, indices, values, row_scale, col_scale, g, out, bounds):
    """out[e] = w_e * g[r_e]: the backward of ``spmm_edge`` (w_e the CSR weight)."""
    D = g.shape[1]
    one = np.ones(1, dtype=out.dtype)[0]
    taken = np.zeros(1, dtype=np.int64)
    n_ch = bounds.shape[0] - 1
    for _w in prange(n_ch):
        ch = _next_chunk(taken, 0)
        while ch < n_ch:
            for r in range(bounds[ch], bounds[ch + 1]):
                rs = one
                if row_scale is not None:
                    rs = rs * row_scale[r]
                for e in range(indptr[r], indptr[r + 1]):
                    w = rs
                    if values is not None:
                        w = w * values[e]
                    if col_scale is not None:
                        w = w * col_scale[indices[e]]
                    for d in range(D):
                        out[e, d] = w * g[r, d]
            ch = _next_chunk(taken, 0)
    return out


@njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def sddmm_dot(indptr, pos, indices, u, v, out, bounds):
    """out[e] = u[r_e] . v[c_e] for every stored entry e (column blocks as in :func:`spmm`).

    The one kernel allowed to reassociate (fastmath ``reassoc``/``nsz`` only): without
    it the dot product is one serial chain of dependent adds that LLVM may not
    vectorise (4-6x slower than the SpMM moving the same bytes). The summation
    order is still fixed by the machine code, so results repeat run to run."""
    D = u.shape[1]
    zero = np.zeros(1, dtype=out.dtype)[0]
    taken = np.zeros(bounds.shape[0], dtype=np.int64)
    for b in range(bounds.shape[0]):
        bd = bounds[b]
        n_ch = bd.shape[0] - 1
        for _w in prange(n_ch):
            ch = _next_chunk(taken, b)
            while ch < n_ch:
                for r in range(bd[ch], bd[ch + 1]):
                    lo, hi, lim = _block_range(indptr, pos, b, r, bd[ch + 1])
                    for e in range(lo, hi):
                        if e < lim:
                            _prefetch_row(v, indices[e + PREFETCH_AHEAD])
                        c = indices[e]
                        acc = zero
                        for d in range(D):
                            acc += u[r, d] * v[c, d]
                        out[e] = acc
                ch = _next_chunk(taken, b)
    return out


@njit(**JIT)
def sddmm_mul(indptr, indices, u, v, out, bounds):
    """out[e] = u[r_e] * v[c_e] (elementwise, D wide) for every stored entry e."""
    D = u.shape[1]
    taken = np.zeros(1, dtype=np.int64)
    n_ch = bounds.shape[0] - 1
    for _w in prange(n_ch):
        ch = _next_chunk(taken, 0)
        while ch < n_ch:
            for r in range(bounds[ch], bounds[ch + 1]):
                for e in range(indptr[r], indptr[r + 1]):
                    c = indices[e]
                    for d in range(D):
                        out[e, d] = u[r, d] * v[c, d]
            ch = _next_chunk(taken, 0)
    return out


BPR_PREFETCH_AHEAD = 8  # triples ahead whose rows bpr_rows prefetches


@njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def bpr_rows(out, u, p, n, off, gout, parts):
    """Mean BPR loss ``softplus(-(out[u].out[p+off] - out[u].out[n+off]))`` over the triples, and
    its gradient added into ``gout`` (zeroed by the caller), each row read once per use. ``off``
    is added to the item indices (items follow the users in a node table).

    Two parallel passes: the triples' scores and gradient scales (each triple on its own), then
    the gradient rows, thread ``t`` owning the rows ``parts[t] .. parts[t+1]`` and taking the
    triples in order (rows repeat in a batch: no two threads add into one row, and each row
    receives its terms in the serial order). The loss is summed in triple order. The dot is
    reassociated (vectorised); softplus and the sigmoid are taken in float64 (torch's
    threshold: softplus(x) = x for x > 20)."""
    B = u.shape[0]
    D = out.shape[1]
    zero = np.zeros(1, dtype=out.dtype)[0]
    inv = 1.0 / B
    terms = np.empty(B, dtype=np.float64)
    scale = np.empty(B, dtype=out.dtype)
    for i in prange(B):
        if i + BPR_PREFETCH_AHEAD < B:  # the triples' rows are random: load those ahead while this one sums
            k = i + BPR_PREFETCH_AHEAD
            _prefetch_row(out, u[k])
            _prefetch_row(out, p[k] + off)
            _prefetch_row(out, n[k] + off)
        a, b, c = u[i], p[i] + off, n[i] + off
        s = zero
        for d in range(D):
            s += out[a, d] * (out[b, d] - out[c, d])
        x = -float(s)
        terms[i] = x if x > 20.0 else np.log1p(np.exp(x))
        scale[i] = out.dtype.type(-inv / (1.0 + np.exp(-x)))  # d loss / d s = -sigmoid(x) / B
    for t in prange(parts.shape[0] - 1):
        lo = parts[t]
        hi = parts[t + 1]
        for i in range(B):
            if i + BPR_PREFETCH_AHEAD < B:
                k = i + BPR_PREFETCH_AHEAD
                ka, kb, kc = u[k], p[k] + off, n[k] + off
                if lo <= ka < hi:
                    _prefetch_row(gout, ka)
                    _prefetch_row(out, kb)
                    _prefetch_row(out, kc)
                if lo <= kb < hi or lo <= kc < hi:
                    _prefetch_row(out, ka)
                    _prefetch_row(gout, kb)
                    _prefetch_row(gout, kc)
            a, b, c = u[i], p[i] + off, n[i] + off
            gs = scale[i]
            if lo <= a < hi:
                for d in range(D):
                    gout[a, d] += gs * (out[b, d] - out[c, d])
            if lo <= b < hi:
                for d in range(D):
                    gout[b, d] += gs * out[a, d]
            if lo <= c < hi:
                for d in range(D):
                    gout[c, d] -= gs * out[a, d]
    total = 0.0
    for i in range(B):
        total += terms[i]
    return total * inv


@njit(inline="always")
def _sq_norm_part(table, idx, off, coef, g, parts):
    D = table.shape[1]
    zero = np.zeros(1, dtype=table.dtype)[0]
    m = idx.shape[0]
    sq = np.empty(m, dtype=np.float64)
    for i in prange(m):
        j = idx[i] + off
        s = zero
        for d in range(D):
            v = table[j, d]
            s += v * v
        sq[i] = float(s)
    if g is not None:
        for t in prange(parts.shape[0] - 1):
            lo = parts[t]
            hi = parts[t + 1]
            for i in range(m):
                j = idx[i] + off
                if lo <= j < hi:
                    for d in range(D):
                        g[j, d] += coef * table[j, d]
    total = 0.0
    for i in range(m):
        total += sq[i]
    return total


@njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def sq_norm_rows(table, u, p, n, off, coef, g, parts):
    """``coef * 0.5 * sum ||table[j]||^2`` over the rows ``j`` in ``u``, ``p + off`` and ``n + off``
    (a BPR batch's user and item rows; pass empty ``p``/``n`` for one index list), and its gradient
    ``coef * table[j]`` added into ``g`` per occurrence (``g`` None: the value only).

    Parallel. Few occurrences against the table's rows: as :func:`bpr_rows`, the squares each on
    its own, the gradient by owned row ranges (``parts``), the sum in index order. Occurrences at
    least a quarter of the rows (a large batch): each row once, in row order, with its count
    ``k`` (``k * ||t||^2``, gradient ``k coef t``): a streaming pass instead of random ones."""
    rows = table.shape[0]
    m = u.shape[0] + p.shape[0] + n.shape[0]
    if 4 * m < rows:
        total = (_sq_norm_part(table, u, 0, coef, g, parts) + _sq_norm_part(table, p, off, coef, g, parts)
                 + _sq_norm_part(table, n, off, coef, g, parts))
        return 0.5 * float(coef) * total
    D = table.shape[1]
    zero = np.zeros(1, dtype=table.dtype)[0]
    cnt = np.zeros(rows, dtype=np.int32)
    for i in range(u.shape[0]):
        cnt[u[i]] += 1
    for i in range(p.shape[0]):
        cnt[p[i] + off] += 1
    for i in range(n.shape[0]):
        cnt[n[i] + off] += 1
    sq = np.zeros(rows, dtype=np.float64)
    for j in prange(rows):
        k = cnt[j]
        if k:
            s = zero
            for d in range(D):
                v = table[j, d]
                s += v * v
            sq[j] = k * float(s)
            if g is not None:
                c = coef * k
                for d in range(D):
                    g[j, d] += c * table[j, d]
    total = 0.0
    for j in range(rows):
        total += sq[j]
    return 0.5 * float(coef) * total


def row_parts(n_rows: int, threads: int) -> np.ndarray:
    """``threads`` equal ranges of ``n_rows`` rows, as bounds (the row owners of :func:`bpr_rows`)."""
    return np.linspace(0, n_rows, max(1, threads) + 1).astype(np.int64)


@njit(**JIT)
def gather_rows(table, idx, out):
    """out[i] = table[idx[i]]."""
    D = table.shape[1]
    for i in prange(idx.shape[0]):
        j = idx[i]
        for d in range(D):
            out[i, d] = table[j, d]
    return out


@njit(**JIT)
def permute_values(src, perm, out):
    """out[k] = src[perm[k]] for a 1-D array (per-edge scalars into another entry order)."""
    for k in prange(out.shape[0]):
        out[k] = src[perm[k]]
    return out


@njit(**JIT)
def scatter_add_rows(idx, src, out, col_blocks):
    """out[idx[i]] += src[i]; ``out`` must be zeroed by the caller.

    Parallel over column blocks rather than rows: duplicate indices then never
    race (each thread owns disjoint columns) and no atomics are needed. The block
    is sliced so the inner loop runs from 0 (see :func:`stream_copy` on why)."""
    n = idx.shape[0]
    for b in prange(col_blocks.shape[0] - 1):
        d0 = col_blocks[b]
        w = col_blocks[b + 1] - d0
        for i in range(n):
            o = out[idx[i], d0:d0 + w]
            x = src[i, d0:d0 + w]
            for d in range(w):
                o[d] += x[d]
    return out


@njit(cache=True, nogil=True)
def distinct_gathers(indptr, indices, n_cols, budget):
    """Rows of ``x`` an SpMM over this CSR must bring from DRAM when whatever it gathered stays in
    cache for as long as it fits: rows are taken in order into panels, a panel closing when its
    distinct gathered columns would exceed ``budget``; each panel's distinct columns count once
    (the first touch), every re-read within the panel is a cache hit. Returns
    ``(distinct rows summed over panels, panels)``."""
    n = indptr.shape[0] - 1
    mark = np.full(n_cols, -1, dtype=np.int64)
    panel = 0
    in_panel = 0
    total = 0
    for r in range(n):
        lo = indptr[r]
        hi = indptr[r + 1]
        new = 0
        for e in range(lo, hi):
            if mark[indices[e]] != panel:
                new += 1
        if in_panel > 0 and in_panel + new > budget:
            panel += 1
            in_panel = 0
            new = 0
            for e in range(lo, hi):
                if mark[indices[e]] != panel:
                    new += 1
        for e in range(lo, hi):
            mark[indices[e]] = panel
        in_panel += new
        total += new
    return total, panel + 1


# -- compilation outside timed regions ---------------------------------------
_compiled: set = set()


def _key(kernel, args) -> tuple:
    return (kernel.py_func.__name__,) + tuple(
        (a.dtype.char, a.ndim, a.flags.c_contiguous, a.flags.writeable) if isinstance(a, np.ndarray)
        else type(a) for a in args)


def ensure_compiled(kernel, args) -> float:
    """Compile (or load from the disk cache) ``kernel`` for the types of ``args``
    unless already done in this process. Returns the seconds spent (0.0 if nothing)."""
    k = _key(kernel, args)
    if k in _compiled:
        return 0.0
    t0 = time.perf_counter()
    kernel.compile(tuple(numba.typeof(a) for a in args))
    _compiled.add(k)
    return time.perf_counter() - t0


def threads() -> int:
    return int(numba.get_num_threads())

