"""Kernel benchmark: every kernel x backend on synthetic power-law graphs (outside the kernels
package: it drives the kernels, a model, the optimizer and the host calibration).

Used by ``gnnrec-lab bench kernels`` and ``benchmarks/bench_kernels.py``. Each
kernel runs through the public API under a recorder, forward and backward, so
the time is exactly what a training step records. Reported per (kernel, phase,
backend, dim, graph): median seconds and spread (min..max) over repeats
(measured), GB/s achieved on the ideal byte count of
:mod:`gnnrec_lab.kernels.costs`, and ``pct_of_bound`` = 100 * bound / median,
where bound = ideal bytes / measured STREAM-triad bandwidth of this host.

:func:`antagonists` runs CPU-bound processes beside a benchmark, so that backends are compared
side by side under the same load (a shared server), and every row says how many ran.
"""
from __future__ import annotations

import contextlib
import gc
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from gnnrec_lab import kernels as K
from gnnrec_lab.config.bounds import MAX_ANTAGONISTS
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.kernels import available_backends, buffers
from gnnrec_lab.kernels.backends import DglBackend
from gnnrec_lab.kernels.costs import spmm as spmm_cost
from gnnrec_lab.kernels.registry import backend as backend_object
from gnnrec_lab.memory.calibrate import calibration_flags, host_profile
from gnnrec_lab.models.lightgcn import LightGCN
from gnnrec_lab.models.loss import bpr_loss_rows
from gnnrec_lab.models.optim import build_optimizer
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.recorder import Recorder, use_recorder

# name -> (users, items, interactions); nnz of the symmetric adjacency = 2 x interactions
SIZES = {"small": (6_000, 4_000, 50_000), "medium": (30_000, 20_000, 500_000),
         "large": (100_000, 100_000, 3_250_000)}  # ~5M nnz after dedup
KERNELS = ("spmm", "sddmm_dot", "sddmm_mul", "spmm_edge", "gather")
# Per-edge (nnz, D) tensors above this size are skipped (memory of a shared machine).
EDGE_TENSOR_LIMIT = 1.5e9
GATHER_ROWS = 3 * 8192  # one BPR batch of users, positives and negatives


def power_law_graph(n_users: int, n_items: int, n_interactions: int, seed: int = 0,
                    alpha_users: float = 0.8, alpha_items: float = 1.0) -> BipartiteGraph:
    """A user-item graph whose user and item degrees follow Zipf-like laws
    (probability of the rank-k node ~ k^-alpha, ranks shuffled over ids), with
    duplicate interactions removed (so slightly fewer than ``n_interactions``)."""
    rng = np.random.default_rng(seed)

    def zipf_ids(n, alpha, size):
        p = np.arange(1, n + 1, dtype=np.float64) ** -alpha
        ids = rng.choice(n, size=size, p=p / p.sum())
        return rng.permutation(n)[ids]
    u = zipf_ids(n_users, alpha_users, n_interactions)
    i = zipf_ids(n_items, alpha_items, n_interactions)
    key = np.unique(u.astype(np.int64) * n_items + i)
    return BipartiteGraph(np.stack([key // n_items, key % n_items], 1), n_users, n_items)


@dataclass
class Result:
    kernel: str
    phase: str
    backend: str
    dim: int
    graph: str
    nnz: int
    seconds: float        # median, measured
    min_seconds: float
    max_seconds: float
    bytes: int            # ideal bytes (read + written)
    bound_seconds: float  # bytes / measured triad bandwidth
    pct_of_bound: float
    GBps: float
    antagonists: int = 0   # CPU-bound processes running beside the benchmark (see antagonists())
    load_avg: float = float("nan")  # 1-minute load average when the row was measured
    precision: str = "fp32"  # the rows' storage: bf16 rows are read and written as bf16 (backend "native-bf16")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _input(rows: int, dim: int, g, dtype=torch.float32) -> torch.Tensor:
    """A random input allocated as the lab allocates its tables (kernels.buffers: huge pages when
    32 MiB or more), the same tensor for every backend (bfloat16: the same values rounded)."""
    t = buffers.empty((rows, dim), dtype)
    t.copy_(torch.randn(rows, dim, generator=g))
    return t.requires_grad_(True)


# Precisions `bench kernels --precision` times; bf16 rows exist for SpMM on the native backend (a
# bf16 layer's product: bf16 rows gathered and written, float32 sums), reported as backend
# BF16_BACKEND next to the float32 rows.
BENCH_PRECISIONS = ("fp32", "bf16")
BF16_KERNELS = ("spmm",)
BF16_BACKEND = "native-bf16"


def _run_kernel(kernel, adj, dim, table_rows, rng_seed, dtype=torch.float32):
    """One forward + backward of ``kernel`` through the public API (``dtype`` bfloat16: SpMM on bf16 rows)."""
    g = torch.Generator().manual_seed(rng_seed)
    if kernel == "spmm":
        x = _input(adj.n_cols, dim, g, dtype)
        K.spmm(adj, x).backward(torch.ones(adj.n_rows, dim, dtype=dtype))
    elif kernel.startswith("sddmm"):
        u = _input(adj.n_rows, dim, g)
        v = _input(adj.n_cols, dim, g)
        y = K.sddmm(adj, u, v, op=kernel.split("_")[1])
        y.backward(torch.ones_like(y))
    elif kernel == "spmm_edge":
        m = torch.randn(adj.nnz, dim, generator=g, requires_grad=True)
        K.spmm_edge(adj, m).backward(torch.ones(adj.n_rows, dim))
    elif kernel == "gather":
        t = torch.randn(table_rows, dim, generator=g, requires_grad=True)
        idx = torch.randint(0, table_rows, (GATHER_ROWS,), generator=g)
        y = K.gather(t, idx)
        y.backward(torch.ones_like(y))


def _pyg_spmm(adj, dim, repeats, bw):
    """PyG's propagation product: ``torch_geometric.utils.spmm`` on a torch sparse CSR
    adjacency (sum reduce); forward and autograd backward timed with perf_counter."""
    from torch_geometric.utils import spmm as pyg_spmm
    a = adj.to_torch_sparse()
    fw, bw_t = [], []
    for r in range(repeats + 1):
        x = torch.randn(adj.n_cols, dim, requires_grad=True)
        t0 = time.perf_counter()
        y = pyg_spmm(a, x, reduce="sum")
        t1 = time.perf_counter()
        y.backward(torch.ones_like(y))
        t2 = time.perf_counter()
        if r:  # the first repeat is a warm-up
            fw.append(t1 - t0)
            bw_t.append(t2 - t1)
    return fw, bw_t


def run_kernel_bench(sizes=("small", "medium"), dims=(16, 64, 256), backends=None, kernels=KERNELS,
                     repeats: int = 5, host: dict | None = None, include_pyg: bool = True,
                     progress=None, n_antagonists: int = 0, precisions=("fp32",)) -> list[Result]:
    """Benchmark the kernels; returns one :class:`Result` per (graph, dim, kernel, phase, backend).

    ``host`` is the calibration providing ``triad_GBps`` (default: the cached host
    profile, measured quickly if missing). ``progress`` is called with a line per result.
    ``n_antagonists`` CPU-bound processes (:func:`antagonists`) run beside every timed kernel
    of every backend alike; each result records the count and the load average. ``precisions``:
    with ``"bf16"``, SpMM on bf16 rows is also timed on the native backend (rows ``native-bf16``).
    """
    for s in sizes:
        if s not in SIZES:
            raise UserError(f"--sizes: got {s!r}, allowed: {', '.join(SIZES)}")
    for k in kernels:
        if k not in KERNELS:
            raise UserError(f"--kernels: got {k!r}, allowed: {', '.join(KERNELS)}")
    if any(int(d) < 1 for d in dims):
        raise UserError(f"--dims: dimensions must be positive integers, got {list(dims)}")
    backends = list(backends or K.available_backends())
    for b in backends:
        if b not in K.available_backends():
            raise UserError(f"--backends: got {b!r}, allowed: {', '.join(K.available_backends())}")
    if repeats < 1:
        raise UserError(f"--repeats: must be >= 1, got {repeats}")
    for p in precisions:
        if p not in BENCH_PRECISIONS:
            raise UserError(f"--precision: got {p!r}, allowed: {', '.join(BENCH_PRECISIONS)}")
    if "fp32" not in precisions and not set(kernels) & set(BF16_KERNELS):
        raise UserError(f"--precision: bf16 rows exist for {', '.join(BF16_KERNELS)} only; add one to --kernels")
    host = host or host_profile(measure_if_missing=True, quick=True)
    bw = float(host["triad_GBps"]) * 1e9
    K.warmup(torch.float32)
    out: list[Result] = []

    def emit(res):
        res.antagonists = n_antagonists
        out.append(res)
        if progress:
            progress(format_result(res))

    with antagonists(n_antagonists):
        _bench_sizes(sizes, dims, backends, kernels, repeats, bw, include_pyg, emit, tuple(precisions))
    return out


def _time_kernel(kernel, adj, dim, table_rows, repeats, backend, dtype=torch.float32):
    """``{(name, phase): [seconds]}`` and ``{(name, phase): ideal bytes}`` of ``repeats`` recorded
    forward + backward calls of ``kernel`` (after one warm-up) on ``backend``."""
    times: dict = {}
    nbytes: dict = {}
    with K.use_backend(backend):
        for r in range(repeats + 1):
            recorder = Recorder()
            recorder.phase = "forward"
            with use_recorder(recorder):
                _run_kernel(kernel, adj, dim, table_rows, r, dtype)
            if r == 0:
                continue  # warm-up: caches per-matrix helpers, faults pages in
            for k in recorder.records:
                key = (k.name, k.phase)
                times.setdefault(key, []).append(k.ns / 1e9)
                nbytes[key] = k.bytes_read + k.bytes_written
            gc.collect()
    return times, nbytes


def _bench_sizes(sizes, dims, backends, kernels, repeats, bw, include_pyg, emit, precisions=("fp32",)) -> None:
    for size in sizes:
        graph = power_law_graph(*SIZES[size])
        adj = graph.adj
        for dim in dims:
            dim = int(dim)
            for kernel in kernels:
                if kernel in ("sddmm_mul", "spmm_edge") and adj.nnz * dim * 4 > EDGE_TENSOR_LIMIT:
                    continue
                runs = [(b, torch.float32) for b in backends] if "fp32" in precisions else []
                if "bf16" in precisions and kernel in BF16_KERNELS:
                    runs.append(("native", torch.bfloat16))
                for backend, dtype in runs:
                    times, nbytes = _time_kernel(kernel, adj, dim, graph.n_nodes, repeats, backend, dtype)
                    half = dtype == torch.bfloat16
                    for (name, phase), ts in times.items():
                        res = _result(name, phase, BF16_BACKEND if half else backend, dim, size, adj.nnz, ts,
                                      nbytes[(name, phase)], bw)
                        res.precision = "bf16" if half else "fp32"
                        emit(res)
            if "dgl" in backends and "spmm" in kernels:
                emit(_result("spmm", "forward", "dgl-raw", dim, size, adj.nnz, _dgl_raw_spmm(adj, dim, repeats),
                             _spmm_bytes(adj, dim), bw))
            if include_pyg and "spmm" in kernels:
                try:
                    fw, bwd = _pyg_spmm(adj, dim, repeats, bw)
                except ImportError:
                    continue
                c = spmm_cost(adj, dim, 4)
                nb = c["bytes_read"] + c["bytes_written"]
                emit(_result("spmm", "forward", "pyg", dim, size, adj.nnz, fw, nb, bw))
                emit(_result("spmm", "backward", "pyg", dim, size, adj.nnz, bwd, nb, bw))
        del graph, adj
        gc.collect()


def _spmm_bytes(adj, dim: int) -> int:
    c = spmm_cost(adj, dim, 4)
    return c["bytes_read"] + c["bytes_written"]


def _dgl_raw_spmm(adj, dim, repeats):
    """DGL's own ``copy_u_sum`` (unweighted, no normalisation) on the same graph structure the
    ``dgl`` backend uses: the fastest DGL formulation of the product, timed with perf_counter
    (one warm-up), the reference for the backend's normalised SpMM."""
    be = backend_object("dgl")
    g = torch.Generator().manual_seed(0)
    x = _input(adj.n_cols, dim, g).detach()
    ts = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        be.copy_u_sum_raw(adj, x)
        if r:
            ts.append(time.perf_counter() - t0)
        gc.collect()
    return ts


def _result(name, phase, backend, dim, graph, nnz, ts, nbytes, bw) -> Result:
    med = statistics.median(ts)
    bound = nbytes / bw
    return Result(name, phase, backend, dim, graph, nnz, med, min(ts), max(ts), nbytes, bound,
                  100.0 * bound / med if med > 0 else float("nan"), nbytes / med / 1e9 if med > 0 else float("nan"),
                  load_avg=os.getloadavg()[0])


# An antagonist: a CPU-bound loop that ends by itself once its parent is gone (the parent-death
# signal where Linux has it, and a check of its parent pid every few milliseconds elsewhere), so
# none outlives the benchmark even when the benchmark is killed with SIGKILL.
_ANTAGONIST = r"""
import ctypes, os, sys
parent = int(sys.argv[1])
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except (OSError, AttributeError):
    pass
if os.getppid() != parent:
    sys.exit(0)
sys.stdout.write("ready\n")
sys.stdout.flush()
while os.getppid() == parent:
    x = 0
    for i in range(100000):
        x += i
"""


@contextlib.contextmanager
def antagonists(n: int):
    """Run ``n`` CPU-bound processes (each spins one core) for the duration of the ``with`` block;
    yields their pids once every one of them is running. They are always ended when the block is
    left (normally, by an exception, by KeyboardInterrupt or SIGTERM turned into one by the
    caller), and each also ends by itself when this process dies."""
    if not 0 <= int(n) <= MAX_ANTAGONISTS:
        raise UserError(f"--antagonist: got {n}, allowed 0 to {MAX_ANTAGONISTS}")
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(int(n)):
            procs.append(subprocess.Popen([sys.executable, "-S", "-c", _ANTAGONIST, str(os.getpid())],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, close_fds=True))
        for p in procs:  # "ready": past its start-up and spinning; end of file: it died
            if p.stdout.readline().strip() != b"ready":
                raise UserError(f"--antagonist: an antagonist process (pid {p.pid}) did not start")
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
            if p.stdout:
                p.stdout.close()


def format_result(r: Result) -> str:
    return (f"{r.graph:<7} {r.nnz:>10,d} {r.dim:>4d} {r.kernel:<12} {r.phase:<9} {r.backend:<11} "
            f"{r.seconds * 1e3:>10.2f} {r.min_seconds * 1e3:>9.2f}..{r.max_seconds * 1e3:<9.2f} "
            f"{r.GBps:>7.2f} {r.pct_of_bound:>7.1f}% {r.load_avg:>5.1f}")


HEADER = (f"{'graph':<7} {'nnz':>10} {'dim':>4} {'kernel':<12} {'phase':<9} {'backend':<11} "
          f"{'median ms':>10} {'min..max ms':>20} {'GB/s':>7} {'% bound':>8} {'load':>5}")


def antagonist_line(n: int) -> str:
    """The header line saying under what added load the rows below were measured."""
    if not n:
        return "antagonists: none (no CPU-bound process started beside the benchmark; load is the 1-min average)"
    return (f"antagonists: {n} CPU-bound process{'es' if n > 1 else ''} running beside every timed kernel, "
            f"every backend alike, on {os.cpu_count()} cores (load is the 1-min average)")


def runtime_summary() -> str:
    """Cores, thread counts, torch version and load average: what a benchmark's timings depend on."""
    import numba
    return (f"{os.cpu_count()} cores online, numba threads {numba.get_num_threads()}, "
            f"torch threads {torch.get_num_threads()}, torch {torch.__version__}, "
            f"load average {os.getloadavg()[0]:.1f}")


def machine_line(host: dict) -> str:
    """The header line naming the machine and the triad every ``% bound`` divides by; a flagged
    calibration (:func:`~gnnrec_lab.memory.calibrate.calibration_flags`: measured under load, or its
    triad far below the best stored one) says so, since every ``% bound`` is off by as much."""
    flags = calibration_flags(host)
    warn = "".join(f"\nwarning: {why}: every % bound below is relative to it" for why in flags)
    return (f"machine: {platform.node()} {host.get('cpu', '?')}, {runtime_summary()}; "
            f"bound = ideal bytes / triad {host['triad_GBps']:.2f} GB/s (measured {host.get('measured_at', '?')})"
            f"{warn}")


def summary(results: list[Result]) -> list[str]:
    """The headline ratios (reported, not asserted): per graph at D=64 if present."""
    lines = []
    n_ant = max((r.antagonists for r in results), default=0)
    if n_ant:
        lines.append(f"every row measured with {n_ant} CPU-bound antagonist process{'es' if n_ant > 1 else ''} "
                     f"beside it (load {min(r.load_avg for r in results):.1f}..{max(r.load_avg for r in results):.1f})")
    by = {(r.graph, r.dim, r.kernel, r.phase, r.backend): r for r in results}
    for (graph, dim, kernel, phase, backend), r in sorted(by.items()):
        if backend != "native" or phase != "forward":
            continue
        parts = [f"{graph} D={dim} {kernel}: {r.pct_of_bound:.0f}% of bound"]
        back = by.get((graph, dim, kernel, "backward", "native"))
        if back:
            # the ideal-bytes ratio says how far apart the two must be when both are memory-bound
            parts.append(f"backward/forward {back.seconds / r.seconds:.2f}x "
                         f"(ideal bytes {back.bytes / r.bytes:.2f}x)")
        for other in ("torch", "pyg", "dgl", "dgl-raw"):
            o = by.get((graph, dim, kernel, "forward", other))
            if o:
                parts.append(f"{o.seconds / r.seconds:.2f}x faster than {other} (forward)")
        lines.append("; ".join(parts))
        half = by.get((graph, dim, kernel, "forward", BF16_BACKEND))
        if half:
            hb = by.get((graph, dim, kernel, "backward", BF16_BACKEND))
            words = [f"{graph} D={dim} {kernel} bf16 rows: forward {r.seconds / half.seconds:.2f}x the fp32 native "
                     f"kernel (target >= 1.6x: {'met' if r.seconds >= 1.6 * half.seconds else 'NOT met'})"]
            if hb and back:
                words.append(f"backward {back.seconds / hb.seconds:.2f}x")
            raw = by.get((graph, dim, kernel, "forward", "dgl-raw"))
            if raw:
                words.append(f"{raw.seconds / half.seconds:.2f}x DGL's copy_u_sum (fp32)")
            lines.append("; ".join(words))
        d, raw = by.get((graph, dim, kernel, "forward", "dgl")), by.get((graph, dim, kernel, "forward", "dgl-raw"))
        if kernel == "spmm" and d and raw:
            lines.append(f"{graph} D={dim} spmm: dgl backend / DGL's own copy_u_sum = {d.seconds / raw.seconds:.2f}x "
                         f"(target <= 1.3x: {'met' if d.seconds <= 1.3 * raw.seconds else 'NOT met'})")
    return lines


def dgl_note() -> str:
    """Which DGL formulation the ``dgl`` rows measure (or why there are none)."""
    if "dgl" not in available_backends():
        return "dgl: not importable here (the DGL lane is `make dgl`, .venv-dgl), skipped"
    import dgl

    return (f"dgl {dgl.__version__}: spmm = {DglBackend.SPMM_FORMULATION}; "
            f"dgl-raw = dgl.ops.copy_u_sum on the same graph without the normalisation (forward only)")


def pyg_note() -> str:
    try:
        import torch_geometric
    except ImportError:
        return "pyg: torch_geometric not importable, skipped"
    try:
        import torch_sparse  # noqa: F401
        ts = "torch_sparse installed"
    except ImportError:
        ts = "no torch_sparse"
    return (f"pyg {torch_geometric.__version__}: torch_geometric.utils.spmm(reduce='sum') on a torch.sparse_csr "
            f"adjacency ({ts}; for CSR inputs this is torch.sparse.mm)")


def recording_overhead(size: str = "medium", dim: int = 64, layers: int = 3, repeats: int = 10,
                       min_sample_s: float = 0.05) -> dict:
    """Wall seconds of one full LightGCN training step (the model's propagation, the BPR
    loss with L2 on a batch of 2048 triples, backward, the Adam step) with the recorder
    enabled vs disabled (measured).

    Method: ``repeats`` A/B pairs, interleaved, the order alternating per pair (AB, BA, ...)
    so drift and a first-in-pair penalty hit both alike; each sample times ``steps_per_sample``
    back-to-back steps (enough for ``min_sample_s``, so a sub-millisecond step is not lost in
    scheduler noise) with the garbage collector paused. Returns per-step medians and ranges
    and ``overhead_pct`` = 100 * (median over pairs of recorded / unrecorded - 1), with the
    pairs' spread in ``overhead_range_pct`` (min, max) and ``overhead_iqr_pct`` (quartiles)."""
    if size not in SIZES:
        raise UserError(f"--size: got {size!r}, allowed: {', '.join(SIZES)}")
    adj = power_law_graph(*SIZES[size]).adj
    K.warmup(torch.float32)
    torch.manual_seed(0)
    model = LightGCN(adj.n_rows, 0, dim=dim, layers=layers)  # node ids 0..n-1; users/items split irrelevant here
    opt = build_optimizer(RunConfig(lr=1e-3), model.parameters())   # what a run's adam is
    g = torch.Generator().manual_seed(0)
    bu, bp, bn = (torch.randint(0, adj.n_rows, (2048,), generator=g) for _ in range(3))

    def step():
        loss, _ = bpr_loss_rows(model.propagate(adj), model.embedding, bu, bp, bn, 1e-4)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    on, off = Recorder(), Recorder(enabled=False)

    def sample(recorder, n):
        with use_recorder(recorder):
            t0 = time.perf_counter()
            for _ in range(n):
                step()
            dt = time.perf_counter() - t0
        on.clear()
        return dt / n

    sample(on, 2)
    sample(off, 2)  # warm-up: per-matrix helpers cached, pages faulted in
    one = min(sample(off, 1), sample(on, 1))
    n = max(1, min(1000, int(math.ceil(min_sample_s / max(one, 1e-6)))))
    t = {"recorded": [], "unrecorded": []}
    ratios = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeats):
            order = (("recorded", on), ("unrecorded", off)) if r % 2 == 0 else (("unrecorded", off), ("recorded", on))
            got = {label: sample(recorder, n) for label, recorder in order}
            for label, v in got.items():
                t[label].append(v)
            ratios.append(got["recorded"] / got["unrecorded"])
    finally:
        if gc_was:
            gc.enable()
    per_record = _per_record_cost(layers, repeats)
    med = {k: statistics.median(v) for k, v in t.items()}
    pct = sorted(100.0 * (x - 1.0) for x in ratios)
    q = statistics.quantiles(pct, n=4) if len(pct) >= 2 else [pct[0]] * 3
    return {"graph": size, "nnz": adj.nnz, "dim": dim, "layers": layers, "repeats": repeats,
            "steps_per_sample": n, "method": "interleaved A/B pairs, order alternating; median of paired ratios",
            "recorded_s": med["recorded"], "unrecorded_s": med["unrecorded"],
            "recorded_range_s": [min(t["recorded"]), max(t["recorded"])],
            "unrecorded_range_s": [min(t["unrecorded"]), max(t["unrecorded"])],
            "records_per_step": 2 * layers + 4,
            "overhead_pct": statistics.median(pct),
            "overhead_range_pct": [pct[0], pct[-1]], "overhead_iqr_pct": [q[0], q[2]],
            "per_record_s": per_record,
            "derived_overhead_pct": 100.0 * per_record * (2 * layers + 4) / med["unrecorded"]}


def _per_record_cost(layers: int, repeats: int, calls: int = 300) -> float:
    """Seconds recording adds per kernel call (measured): SpMM forward + backward on a 4-node
    graph, where the kernel itself is negligible, recorded vs unrecorded in interleaved blocks of
    ``calls``; median over blocks of the per-record difference. Much less noisy than the step
    difference on a shared machine; ``derived_overhead_pct`` scales it by the step's record count."""
    adj = BipartiteGraph(np.array([[0, 0], [1, 1], [1, 0]]), 2, 2).adj
    x = torch.ones((adj.n_cols, 4), requires_grad=True)
    g = torch.ones((adj.n_rows, 4))
    on, off = Recorder(), Recorder(enabled=False)

    def block(recorder):
        with use_recorder(recorder):
            t0 = time.perf_counter()
            for _ in range(calls):
                K.spmm(adj, x).backward(g)
            dt = time.perf_counter() - t0
        on.clear()
        return dt
    block(on), block(off)
    diffs = []
    for r in range(max(repeats, 5) * 2):
        a, b = (block(on), block(off)) if r % 2 == 0 else tuple(reversed((block(off), block(on))))
        diffs.append((a - b) / (2 * calls))  # two records per forward + backward
    return statistics.median(diffs)
