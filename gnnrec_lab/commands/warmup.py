"""``gnnrec-lab warmup``: compile the numba kernels into numba's disk cache ahead of the first run.

Every kernel is ``@njit(cache=True)``: the first process that calls one compiles it (about a
minute and a half for all of them on 2 cores) and writes the machine code next to the source
(``gnnrec_lab/kernels/__pycache__/*.nbi|*.nbc``, or under ``$NUMBA_CACHE_DIR`` when set); every
later process loads it in about a second. ``make install`` runs this, so the first run after an
install does not sit at ``steps 0 / ?`` while numba compiles.
"""
from __future__ import annotations

import json
import time


def register(subparsers):
    p = subparsers.add_parser("warmup", help="compile the kernels into numba's disk cache (done by make install)",
                              description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def cache_dir() -> str:
    """Where numba keeps the compiled kernels of this installation."""
    import os

    from numba.core import config
    if config.CACHE_DIR:
        return config.CACHE_DIR
    from gnnrec_lab import kernels
    return os.path.join(os.path.dirname(kernels.__file__), "__pycache__")


def _sampling_warmup() -> None:
    """BPR negative sampling (every run's first step) and k-hop sampling (sampled mode) on a tiny graph."""
    import numpy as np

    from gnnrec_lab.graph.bipartite import BipartiteGraph
    from gnnrec_lab.graph.sampling import batch_nodes, bpr_batches, sample_subgraph
    g = BipartiteGraph(np.array([[0, 0], [1, 1], [1, 0], [2, 2]]), 3, 4)
    rng = np.random.default_rng(0)
    users, pos, neg = next(bpr_batches(g, 2, rng))
    sample_subgraph(g, batch_nodes(g, users, pos, neg), [2, 2], rng)


def run(args) -> int:
    from gnnrec_lab import kernels
    t0 = time.perf_counter()
    kernels.warmup()
    _sampling_warmup()
    out = {"seconds": round(time.perf_counter() - t0, 2), "cache_dir": cache_dir()}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"kernels compiled or loaded in {out['seconds']:.1f} s; numba's disk cache: {out['cache_dir']}")
    return 0
