"""Bytes by tensor class, predicted before a run and measured during it.

:func:`footprint` answers "will it fit in DRAM?" from the run configuration and
the dataset's counts alone. Each class's formula (``N = n_users + n_items``
nodes, ``E = 2 * n_train`` directed edges, ``d`` = dim, ``L`` = layers,
``f = 4`` bytes per float32):

``graph``
    adjacency CSR: indptr ``8 (N+1)`` + indices ``4 E`` (int32 while N < 2^31, else 8)
    + ``D^-1/2`` ``4 N`` + node degrees ``8 N``; user->items CSR: ``8 (n_users+1) + 4 n_train``;
    the split interaction arrays ``16 n_interactions`` (int64 pairs).
``embeddings``
    the parameters: ``f N d``; NGCF adds ``L (2 d^2 + 2 d) f`` for W1, W2, b1, b2.
``gradients``
    one dense gradient per parameter (same bytes as ``embeddings``).
``optimizer``
    ``s`` state tensors per parameter: Adam/AdamW/LAMB 2, SGD 1 with momentum (0 without).
``activations``
    node-sized tensors alive at the peak of forward+backward. LightGCN: ``(L + 2)`` layer outputs
    and the running sum, plus 2 backward temporaries: ``(L + 4) f N d``. NGCF: per layer 7
    node tensors kept for backward (A x, side, bi, two GEMM outputs, pre-activation, output) +
    the concatenated output ``(L+1) d`` wide + 2 backward temporaries of that width.
    MF: 2 temporaries of ``f N d``.
``edge_intermediates``
    edge-form NGCF only: the per-edge message ``e_r * e_c`` kept for backward, ``L f E d``.
``buffers``
    one mini-batch (ids ``3 * 8 B``, gathered rows of the output and of layer 0, their grads:
    ``12 f B d_out``) and the evaluation scores ``f * chunk * n_items`` plus the same again for the
    train-item mask / top-k work (chunk = 1024 users, fewer when the dataset has fewer).
``runtime``
    the interpreter with torch, numba and numpy loaded and one numba function compiled,
    measured once in a fresh process and cached (:func:`runtime_baseline_bytes`).

The sum is compared with the measured peak RSS of the run (:func:`measure_peak`).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Optional

from ..errors import UserError

F32 = 4
EVAL_CHUNK_USERS = 1024
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


def _counts(config, counts: Optional[dict]) -> dict:
    if counts is None:
        try:
            from ..data import describe
        except ImportError:
            raise UserError("footprint: dataset counts are needed; pass counts=dict(n_users=..., n_items=..., "
                            "n_train=...) (gnnrec_lab.data.describe is not available)") from None
        counts = describe(config.dataset)
    c = dict(counts)
    for k in ("n_users", "n_items", "n_train"):
        v = c.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if k == "n_train" else 1):
            raise UserError(f"footprint: counts[{k!r}] must be a positive integer, got {v!r}")
    if "n_interactions" not in c:
        c["n_interactions"] = c["n_train"] + int(c.get("n_valid", 0)) + int(c.get("n_test", 0))
    return c


def footprint(config, counts: Optional[dict] = None, runtime_bytes: Optional[int] = None) -> dict:
    """Predicted bytes by tensor class (see the module docstring for every formula).

    ``counts``: ``n_users``, ``n_items``, ``n_train`` and optionally ``n_interactions`` (or
    ``n_valid``/``n_test``); default ``gnnrec_lab.data.describe(config.dataset)``.
    ``runtime_bytes``: the interpreter baseline; default measured once and cached
    (:func:`runtime_baseline_bytes`); pass 0 to leave it out.
    Returns ``{class: bytes}`` over ``TENSOR_CLASSES`` plus ``runtime``; all values are
    modeled (predicted) bytes.
    """
    c = _counts(config, counts)
    nu, ni, nt = c["n_users"], c["n_items"], c["n_train"]
    n = nu + ni
    e = 2 * nt
    d, L = config.dim, config.layers
    idx = 4 if n < 2**31 - 1 else 8
    out = {}
    out["graph"] = (8 * (n + 1) + idx * e + F32 * n + 8 * n
                    + 8 * (nu + 1) + (4 if ni < 2**31 - 1 else 8) * nt
                    + 16 * c["n_interactions"])
    params = F32 * n * d
    if config.model == "ngcf":
        params += L * (2 * d * d + 2 * d) * F32
    out["embeddings"] = params
    out["gradients"] = params
    out["optimizer"] = optimizer_states(config.optimizer, getattr(config, "momentum", 0.9)) * params
    if config.model == "lightgcn":
        out["activations"] = (L + 4) * F32 * n * d
        d_out = d
    elif config.model == "ngcf":
        d_out = (L + 1) * d
        out["activations"] = F32 * n * (7 * L * d + 3 * d_out)
    else:  # mf
        out["activations"] = 2 * F32 * n * d
        d_out = d
    out["edge_intermediates"] = L * F32 * e * d if (config.model == "ngcf" and config.ngcf_form == "edge") else 0
    chunk = min(EVAL_CHUNK_USERS, nu)
    b = min(config.batch_size, max(nt, 1))
    out["buffers"] = 3 * 8 * b + 12 * F32 * b * d_out + 2 * F32 * chunk * ni
    out["runtime"] = runtime_baseline_bytes() if runtime_bytes is None else int(runtime_bytes)
    return {k: int(v) for k, v in out.items()}


def total(fp: dict) -> int:
    """Sum of a footprint dict's byte counts."""
    return int(sum(v for v in fp.values() if isinstance(v, (int, float))))


# ----------------------------------------------------------------------
def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "gnnrec-lab" / "runtime_rss.json"


def runtime_baseline_bytes(refresh: bool = False) -> int:
    """Peak RSS (bytes, measured) of a fresh interpreter with torch, numba, numpy and pandas
    imported and one numba function compiled. Measured once per torch/python version and cached
    in ``~/.cache/gnnrec-lab/runtime_rss.json``."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        tv = version("torch")   # metadata only: importing torch here would cost seconds
    except PackageNotFoundError:
        tv = "none"
    key = f"py{sys.version_info[0]}.{sys.version_info[1]}-torch{tv}"
    path = _cache_file()
    if not refresh:
        try:
            cached = json.loads(path.read_text())
            if key in cached:
                return int(cached[key])
        except (OSError, ValueError):
            pass
    res = subprocess.run([sys.executable, "-c", _RUNTIME_SNIPPET], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"could not measure the runtime baseline: {res.stderr.strip()[-300:]}")
    value = int(res.stdout.strip().splitlines()[-1])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cached = {}
        if path.exists():
            try:
                cached = json.loads(path.read_text())
            except ValueError:
                cached = {}
        cached[key] = value
        path.write_text(json.dumps(cached))
    except OSError:
        pass  # an unwritable cache only costs a re-measurement
    return value


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, bytes (measured; Linux ru_maxrss is KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def current_rss_bytes() -> int:
    """Resident set size of this process now, bytes (measured)."""
    try:
        import psutil
        return int(psutil.Process().memory_info().rss)
    except ImportError:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_peak() -> dict:
    """Measured memory of this process: ``peak_rss_bytes``, ``rss_bytes``, ``kind='measured'``."""
    return {"peak_rss_bytes": peak_rss_bytes(), "rss_bytes": current_rss_bytes(), "kind": "measured"}


def compare(predicted: dict, measured_peak_bytes: int) -> dict:
    """Predicted total vs measured peak: bytes of each, and ``error`` = predicted/measured - 1."""
    p = total(predicted)
    return {"predicted_bytes": p, "predicted_kind": "modeled", "measured_peak_bytes": int(measured_peak_bytes),
            "measured_kind": "measured", "error": p / measured_peak_bytes - 1 if measured_peak_bytes else float("nan")}
