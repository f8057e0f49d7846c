"""Bytes by tensor class, predicted before a run and measured during it.

:func:`footprint` answers "will it fit in DRAM?" from the run configuration and
the dataset's counts alone. It models the *peak* of the run as the largest of
three phases (:func:`footprint_phases`), because what is alive differs between them:

``build``
    building the graph: the split arrays, the finished graph, and the build's
    temporaries (two lexsort orders of 8 B and one sorted column of 4 B per
    training interaction): ``graph + 20 n_train``.
``train``
    a training step: every class below, with the training activations.
``eval``
    evaluation after the epoch: parameters, gradients and optimizer state are
    still allocated, and so are the epoch's BPR arrays (the epoch generator is
    still referenced) and the last step's output; on top come the no-grad
    propagation, the train-pair masks and the score block; at the test
    evaluation the best state's copy of the parameters exists too.

Symbols: ``N = n_users + n_items`` nodes, ``E = 2 n_train`` directed edges, ``d`` = dim,
``L`` = layers, ``f = 4`` bytes per float32, ``B`` = batch size, ``d_out`` = output width
(``d``; NGCF ``(L+1) d``). Classes (bytes alive in the peak phase):

``graph``
    adjacency CSR: indptr ``8 (N+1)`` + indices ``4 E`` (int32 while N < 2^31, else 8)
    + ``D^-1/2`` ``4 N`` + node degrees ``8 N``; user->items CSR: ``8 (n_users+1) + 4 n_train``;
    the int32 ``[user, item]`` split arrays ``8 n_interactions`` (resident once read, also when
    memory-mapped); edge-form NGCF adds the transposed structure its SDDMM backward caches
    (row ids + int32 entry permutation, ``8 E``). When the build phase is the peak, ``graph``
    also carries its excess over the other phases (so every other class keeps its size).
``embeddings``
    the parameters: ``f N d``; NGCF adds ``L (2 d^2 + 2 d) f`` for W1, W2, b1, b2. Twice
    that in the eval phase (the best state's copy).
``gradients``
    one dense gradient per parameter (same bytes as the parameters).
``optimizer``
    ``s`` state tensors per parameter: Adam/AdamW/LAMB 2, SGD 1 with momentum (0 without).
``activations``
    train phase: node-sized tensors alive at the peak of forward+backward. LightGCN
    (``kernels.layer_mean``, which saves nothing for backward): the current and next layer
    and the running mean in forward; in backward the incoming gradient, two Horner terms and
    the mean itself: ``4 f N d`` whatever L; below glibc's mmap threshold the heap keeps about
    ``(2L + 4) f N d`` after a step (fitted on ml-100k, synth-gowalla, synth-ml10m).
    NGCF: per layer 7 node tensors kept for backward (A x, side, bi, two
    GEMM outputs, pre-activation, output) + the concatenated output + 2 backward temporaries of
    that width: ``f N (7 L d + 3 d_out)``. MF: ``2 f N d``.
    Plus *allocator retention*: glibc serves blocks under its dynamic mmap threshold (at most
    32 MiB on 64-bit) from the heap and keeps them there when freed, so after the first step
    the process holds about one more step's activations than are live. Measured with per-phase
    peak RSS (VmHWM reset between phases): synth-gowalla NGCF keeps ~830 MiB more after step 1
    than before it (571 MiB modeled activations), synth-ml10m LightGCN ~250 MiB (197 MiB
    modeled). Counted (once more the training activations) only when a node tensor ``f N d``
    is under 32 MiB; larger tensors get their own huge-page mapping (:mod:`gnnrec_lab.kernels.buffers`),
    of which up to ``POOL_MAX`` released ones are kept for reuse: ``POOL_MAX f N d`` retained.
    eval phase: the larger of the retained heap and the no-grad propagation's temporaries
    (LightGCN ``3 f N d``; NGCF ``f N (6 d + 2 d_out)``; MF ``f N d``), plus the last
    training step's output ``f N d_out``.
``edge_intermediates``
    edge-form NGCF only: the per-edge message ``e_r * e_c`` (``f E d``). It is not kept for
    backward and the model frees each layer's before the next: ``f E d`` (also in evaluation).
``buffers``
    train: the epoch's BPR arrays (users, positives, negatives, int64: ``24 n_train``) and one
    mini-batch (ids ``3 * 8 B``, gathered rows and their grads ``12 f B d_out``). eval (the
    epoch's BPR arrays are freed by then): the masks (sorting the train pairs by user: order, two int64 columns
    and their int32 gathers, ``28 n_train``, ``16`` per valid/test pair) and the score block
    with its masked/top-k work ``2 f chunk n_items`` (chunk = at most 1024 users and 256 MiB).
``runtime``
    the interpreter with torch, numba and numpy loaded and one numba function compiled,
    measured once in a fresh process and cached (:func:`runtime_baseline_bytes`); plus, when
    numba's disk cache has no build of the training kernels yet (:func:`jit_compile_bytes`),
    what compiling them adds to the peak (LLVM's memory, kept by the allocator).

The model's terms (parameters, output width, activations, the heap it keeps, per-edge messages)
are its byte hooks (:mod:`gnnrec_lab.models.registry`), which hold the formulas above; nothing
here names a model.

The sum is compared with the measured peak RSS of the run (:func:`measure_peak`);
``benchmarks/bench_footprint.py`` prints that comparison. File-backed placement is not
subtracted: the footprint is what the run touches, wherever it lives.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gnnrec_lab.config.bounds import MAX_INTERACTIONS, MAX_ROWS, integer
from gnnrec_lab.config.checks import Interval, Rule, check
from gnnrec_lab.models.registry import F32, Shape, model_spec
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.files import write_atomic
from gnnrec_lab.util.provenance import Provenance, part, parts

# Peak RSS that compiling the training kernels adds to a run (measured: the first ML-100K
# LightGCN run of a fresh environment, numba 0.68.1, empty disk cache, peaked at 648.6 MiB, the
# second, loading the cache, at 507.8 MiB; the prediction without this term was 22% low).
JIT_COMPILE_BYTES = 141 << 20

EVAL_CHUNK_USERS = 1024
GLIBC_MMAP_THRESHOLD_MAX = 32 << 20   # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (bytes)
# What a fresh worker holds before it touches data: interpreter, torch, numba (LLVM) and numpy.
_RUNTIME_SNIPPET = (
    "import resource, torch, numba, numpy, pandas\n"
    "@numba.njit(cache=False)\n"
    "def f(a):\n    return a.sum()\n"
    "f(numpy.ones(4))\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n")


def optimizer_states(optimizer: str, momentum: float = 0.9) -> int:
    """State tensors the optimizer keeps per parameter tensor."""
    if optimizer in ("adam", "adamw", "lamb"):
        return 2
    if optimizer == "sgd":
        return 1 if momentum else 0
    raise UserError(f"optimizer: unknown {optimizer!r}")


COUNT_NAMES = ("n_users", "n_items", "n_train")


def _train_fits_graph(c) -> Optional[str]:
    """A user-item graph holds at most n_users x n_items distinct interactions."""
    if c["n_train"] > c["n_users"] * c["n_items"]:
        return (f"{c['n_train']:,} is more than n_users x n_items ({c['n_users']:,} x {c['n_items']:,}), "
                f"the most distinct interactions there can be")
    return None


# What dataset counts a footprint accepts (gnnrec_lab.config.checks); the first three are required
# (COUNT_NAMES), the others optional. A refusal names the counts' parameter and the count.
COUNT_CONSTRAINTS: dict[str, list] = {
    "n_users": [Interval(integer, lo=1, hi=MAX_ROWS)],
    "n_items": [Interval(integer, lo=1, hi=MAX_ROWS)],
    "n_train": [Interval(integer, lo=0, hi=MAX_INTERACTIONS),
                Rule(_train_fits_graph, dict(n_users=10, n_items=10, n_train=101))],
    "n_valid": [None, Interval(integer, lo=0, hi=MAX_INTERACTIONS)],
    "n_test": [None, Interval(integer, lo=0, hi=MAX_INTERACTIONS)],
    "n_interactions": [None, Interval(integer, lo=0, hi=MAX_INTERACTIONS)],
}


def check_counts(counts: dict, param: str = "counts", strict: bool = False) -> dict:
    """Dataset counts (``n_users``, ``n_items``, ``n_train``; numbers or their text) checked with the
    shared bounded parsers and against each other: a user-item graph holds at most n_users x n_items
    distinct interactions. Returns a copy with the counts as ints; ConfigError names ``param``.
    ``strict``: other keys are refused (what a user typed), else kept (a dataset's description)."""
    if not isinstance(counts, dict):
        raise ConfigError(param, f"expected a dict of {', '.join(COUNT_NAMES)}, got {type(counts).__name__}")
    unknown = sorted(set(counts) - set(COUNT_CONSTRAINTS))
    if unknown and strict:
        raise ConfigError(param, f"unknown count {unknown[0]!r}; expected {', '.join(COUNT_NAMES)}")
    for k in COUNT_NAMES:
        if k not in counts:
            raise ConfigError(param, f"{k} is missing; give {', '.join(f'{n}=N' for n in COUNT_NAMES)}")
    c = check(COUNT_CONSTRAINTS, counts, label=lambda k: f"{param}: {k}", text=True)
    return {k: v for k, v in c.items() if k in counts}


def _counts(config, counts: Optional[dict]) -> dict:
    if counts is None:
        from gnnrec_lab.data import describe
        counts = describe(config.dataset)
    c = check_counts(counts)
    if "n_interactions" not in c:
        c["n_interactions"] = c["n_train"] + int(c.get("n_valid", 0)) + int(c.get("n_test", 0))
    return c


def _numeric(d) -> dict:
    return {str(k): v for k, v in (d or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


@dataclass
class Footprint:
    """A run's bytes, each part with its kind: ``predicted`` by tensor class is *modeled* (from
    shapes, :func:`footprint`); ``measured`` is *measured* on this machine (``peak_rss``: the
    worker's peak resident set; allocated bytes of a class where they were counted).

    The one shape a result's footprint has (:meth:`to_dict`), in ``gnnrec-lab run --json``, the
    run store and every view that reads a stored result (:meth:`from_dict`).
    """
    predicted: dict = part(Provenance.MODELED, default_factory=dict)
    measured: dict = part(Provenance.MEASURED, default_factory=dict)

    @property
    def peak_rss(self) -> Optional[int]:
        """Peak resident set of the run's process in bytes (measured), None when not recorded."""
        return self.measured.get("peak_rss")

    @property
    def predicted_total(self) -> int:
        return int(sum(self.predicted.values()))

    def to_dict(self) -> dict:
        return {"predicted": dict(self.predicted), "measured": dict(self.measured), "kind": parts(self)}

    @classmethod
    def from_dict(cls, d) -> "Footprint":
        """A footprint from :meth:`to_dict`'s shape, or from a result stored before it: numeric
        ``measured_X`` keys (``measured_peak_rss``) are measured ``X``, ``kind_*`` labels are
        dropped, and a flat ``{class: bytes}`` (no ``predicted``/``measured`` part) is measured."""
        if isinstance(d, Footprint):
            return cls(dict(d.predicted), dict(d.measured))
        if not isinstance(d, dict):
            return cls()
        if not any(k in d for k in parts(cls)) and not any(str(k).startswith("measured_") for k in d):
            return cls(measured=_numeric(d))
        measured = _numeric(d.get("measured") if isinstance(d.get("measured"), dict) else {})
        measured.update({k[len("measured_"):]: v for k, v in _numeric(d).items() if k.startswith("measured_")})
        return cls(_numeric(d.get("predicted") if isinstance(d.get("predicted"), dict) else {}), measured)


def footprint_phases(config, counts: Optional[dict] = None, runtime_bytes: Optional[int] = None) -> dict:
    """Predicted live bytes by tensor class in each phase of a run (see the module docstring).

    Returns ``{"build": {...}, "train": {...}, "eval": {...}}``, each ``{class: bytes}`` over
    ``TENSOR_CLASSES`` plus ``runtime``; classes not alive yet in a phase are 0. Modeled bytes.
    """
    c = _counts(config, counts)
    nu, ni, nt = c["n_users"], c["n_items"], c["n_train"]
    n = nu + ni
    e = 2 * nt
    d = config.dim
    # the model's byte hooks (gnnrec_lab.models.registry): parameters, activations, per-edge messages
    spec, s = model_spec(config.model), Shape.of(config, n, e, d)
    idx = 4 if n < 2**31 - 1 else 8
    runtime = runtime_baseline_bytes() + jit_compile_bytes() if runtime_bytes is None else int(runtime_bytes)
    edge_form = spec.edge_messages(config)
    graph = (8 * (n + 1) + idx * e + F32 * n + 8 * n                    # adjacency + D^-1/2 + degrees
             + 8 * (nu + 1) + (4 if ni < 2**31 - 1 else 8) * nt          # user -> items CSR
             + 8 * c["n_interactions"])                                   # int32 [user, item] splits
    if edge_form:
        graph += (idx + 4) * e      # the transposed structure SDDMM's backward caches (row ids + entry perm)
    from gnnrec_lab.kernels.native import col_block_count  # numba and torch: loaded by a prediction, not by the package
    nb = col_block_count(n, d * s.p)
    if nb > 1:                      # the column-block row positions the native SpMM caches
        graph += 8 * (nb + 1) * n
    # a locality order cached with a large split: the order, P A P^T, its scales and the int64 order
    # and inverse the kernels hold; a layer-mean model (LightGCN) then propagates in it (one node
    # tensor more at a time: the permuted input, or the permuted mean before it is mapped back)
    from gnnrec_lab.data.registry import ORDER_MIN_NODES
    from gnnrec_lab.kernels.fused import LOCALITY_MIN_BYTES
    local = (spec.layer_mean and n >= ORDER_MIN_NODES and F32 * n * d > LOCALITY_MIN_BYTES)
    if local:
        graph += idx * n + 8 * (n + 1) + idx * e + F32 * n + 16 * n
    # a table above native.SIDES_MIN_BYTES is multiplied side by side (native.spmm_sides): one
    # item-side accumulator per thread, kept with the adjacency
    from gnnrec_lab.kernels.native import SIDES_MIN_BYTES, threads
    # (float32 products only: bf16 rows are never multiplied side by side)
    parts = threads() * F32 * ni * d if spec.graph and s.p == F32 and F32 * n * d > SIDES_MIN_BYTES else 0
    graph += parts
    params = F32 * spec.parameters(config, s)
    states = optimizer_states(config.optimizer, getattr(config, "momentum", 0.9))
    ndf = F32 * n * d
    d_out = spec.output_width(config)
    act_train, act_eval = spec.activation_bytes(config, s, local)
    # glibc keeps freed blocks below its dynamic mmap threshold (at most 32 MiB on 64-bit) in the
    # heap: once a step has run, the heap holds about one step's node-sized activations on top of
    # what is live (measured: see the module docstring); tensors of 32 MiB or more are mmapped
    # and given back when freed (the model's hook: LightGCN's is fitted)
    heap_step = spec.heap_step_bytes(config, s, act_train)
    # node tensors of kernels.buffers.POOL_MIN_BYTES or more: up to POOL_MAX released mappings are
    # kept for reuse (kernels.buffers)
    from gnnrec_lab.kernels.buffers import POOL_MAX, POOL_MIN_BYTES
    retained = heap_step if ndf < GLIBC_MMAP_THRESHOLD_MAX else (POOL_MAX * ndf if ndf >= POOL_MIN_BYTES else 0)
    # edge form: one layer's per-edge message at a time (freed after aggregation; backward keeps none)
    edge = F32 * e * d if edge_form else 0
    b = min(config.batch_size, max(nt, 1))
    sampler = 24 * nt                           # the epoch's users, positives, negatives (int64)
    batch = 3 * 8 * b + 12 * F32 * b * d_out
    chunk = min(EVAL_CHUNK_USERS, nu, max(1, (256 << 20) // (F32 * max(ni, 1))))
    masks = 28 * nt + 16 * max(c["n_interactions"] - nt, 0)   # sorting the train/valid pairs by user
    scores = 2 * F32 * chunk * ni
    zero = {k: 0 for k in ("graph", "embeddings", "optimizer", "gradients", "activations",
                           "edge_intermediates", "buffers")}
    build = dict(zero, graph=graph + 20 * nt, runtime=runtime)   # two lexsort orders + one sorted column
    train = dict(zero, graph=graph, embeddings=params, gradients=params, optimizer=states * params,
                 activations=act_train + retained, edge_intermediates=edge, buffers=sampler + batch, runtime=runtime)
    ev = dict(train, activations=max(act_eval, retained) + F32 * n * d_out,  # + the last step's output
              edge_intermediates=edge, buffers=masks + scores,   # the epoch's BPR arrays are freed
              embeddings=2 * params)                             # the best state's copy (test evaluation)
    return {"build": build, "train": train, "eval": ev}


def footprint(config, counts: Optional[dict] = None, runtime_bytes: Optional[int] = None) -> dict:
    """Predicted bytes by tensor class at the run's peak (see the module docstring for every formula).

    The peak is the largest of three phases (:func:`footprint_phases`): building the graph,
    a training step, and evaluation. Classes hold what is alive at that peak, except that
    when building the graph is the peak, the classes are those of the larger of the other
    two phases and ``graph`` carries the excess, so that every class keeps its size.

    ``counts``: ``n_users``, ``n_items``, ``n_train`` and optionally ``n_interactions`` (or
    ``n_valid``/``n_test``); default ``gnnrec_lab.data.describe(config.dataset)``.
    ``runtime_bytes``: the interpreter baseline; default measured once and cached
    (:func:`runtime_baseline_bytes`); pass 0 to leave it out.
    Returns ``{class: bytes}`` over ``TENSOR_CLASSES`` plus ``runtime``; all values are
    modeled (predicted) bytes.
    """
    ph = footprint_phases(config, counts, runtime_bytes)
    steady = max((ph["train"], ph["eval"]), key=total)
    out = dict(steady)
    excess = total(ph["build"]) - total(steady)
    if excess > 0:
        out["graph"] += excess
    return {k: int(v) for k, v in out.items()}


def total(fp: dict) -> int:
    """Sum of a footprint dict's byte counts."""
    return int(sum(v for v in fp.values() if isinstance(v, (int, float))))


# ----------------------------------------------------------------------
def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "gnnrec-lab" / "runtime_rss.json"


def jit_compile_bytes() -> int:
    """:data:`JIT_COMPILE_BYTES` when the next run will compile its kernels (numba's disk cache
    has no build of some training kernel: a fresh environment without ``gnnrec-lab warmup``, or
    kernels changed since), else 0. Modeled bytes."""
    from gnnrec_lab.kernels import uncached_kernels
    return JIT_COMPILE_BYTES if uncached_kernels() else 0


def _environment_id() -> str:
    """The environment's path and when it was created: an environment deleted and made again at
    the same path (a fresh clone's ``make``) is another environment."""
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    try:
        return f"{sys.prefix}@{cfg.stat().st_mtime_ns}"
    except OSError:
        return sys.prefix


def runtime_baseline_bytes(refresh: bool = False) -> int:
    """Peak RSS (bytes, measured) of a fresh interpreter with torch, numba, numpy and pandas
    imported and one numba function compiled. Measured once per environment (its path and the
    versions of python and the imported packages) and cached in ``~/.cache/gnnrec-lab/runtime_rss.json``.
    The path is part of the key because two environments with the same versions differ: a fresh
    clone's environment measured 532 MiB where an older one on the same machine measured 412 MiB,
    and the cache, keyed by versions only, had handed one's value to the other (predictions ~90 MiB
    off). An environment made again at the same path counts as new (:func:`_environment_id`)."""
    from importlib.metadata import PackageNotFoundError, version

    def ver(pkg):
        try:
            return version(pkg)   # metadata only: importing torch here would cost seconds
        except PackageNotFoundError:
            return "none"
    key = (f"{_environment_id()}|py{sys.version_info[0]}.{sys.version_info[1]}|"
           + "|".join(f"{p}{ver(p)}" for p in ("torch", "numba", "numpy", "pandas")))
    path = _cache_file()
    if not refresh:
        try:
            cached = json.loads(path.read_text())
            if key in cached:
                return int(cached[key])
        except (OSError, ValueError):
            pass
    # twice, keeping the smaller: the first import after an install also compiles every module's
    # bytecode, which added ~110 MiB of peak RSS on this VM (619 vs 506 MiB)
    values = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", _RUNTIME_SNIPPET], capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise RuntimeError(f"could not measure the runtime baseline: {res.stderr.strip()[-300:]}")
        values.append(int(res.stdout.strip().splitlines()[-1]))
    value = min(values)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cached = {}
        if path.exists():
            try:
                cached = json.loads(path.read_text())
            except ValueError:
                cached = {}
        cached[key] = value
        write_atomic(path, json.dumps(cached))
    except OSError:
        pass  # an unwritable cache only costs a re-measurement
    return value


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, bytes (measured; Linux ru_maxrss is KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def current_rss_bytes() -> int:
    """Resident set size of this process now, bytes (measured)."""
    import psutil
    return int(psutil.Process().memory_info().rss)


def measure_peak() -> dict:
    """Measured memory of this process: ``peak_rss_bytes``, ``rss_bytes``, ``kind`` (MEASURED)."""
    return {"peak_rss_bytes": peak_rss_bytes(), "rss_bytes": current_rss_bytes(), "kind": Provenance.MEASURED}


def compare(predicted: dict, measured_peak_bytes: int) -> dict:
    """Predicted total vs measured peak: bytes of each, and ``error`` = predicted/measured - 1."""
    p = total(predicted)
    return {"predicted_bytes": p, "predicted_kind": Provenance.MODELED,
            "measured_peak_bytes": int(measured_peak_bytes), "measured_kind": Provenance.MEASURED,
            "error": p / measured_peak_bytes - 1 if measured_peak_bytes else float("nan")}
