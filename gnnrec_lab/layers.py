"""The package's layers: which module may import which.

A module imports modules of its own layer or of a layer below, never above, and the imports form
no cycle (``tests/test_layers.py`` walks every import, those inside functions included, and
imports each module alone in a fresh interpreter). From the bottom:

``util``
    leaf utilities every layer may use: errors, bounds and constraint checks, formatting,
    provenance, status, the process runtime, ``/proc`` facts, the kernel recorder, signals, cgroups,
    the emulated cluster's machines, the lab's home directory, the place syntax of a placement and
    pinning a process to its cores.
``core``
    what a run is (:mod:`~gnnrec_lab.config`) and what it computes on: datasets, the bipartite
    graph, sampling, the kernels.
``models``
    LightGCN and NGCF, the optimizers, evaluation metrics, and the interfaces the loop talks to:
    reporting, and the step an engine plugs into it.
``memory``
    tiers and caches: footprints, device profiles, placement, the tier model and the advice,
    embedding-row caches, the host calibration, pre-flight checks, analysis of kernel records.
    Computes from records and configs; never reads the run store.
``train``
    the training loop and what drives it in-process: profiling, kernel benchmarks.
``runs``
    the run store, and the runner and worker that execute runs as subprocesses.
``services``
    what works on stored runs: a stored run's projection (:mod:`~gnnrec_lab.projection`),
    sweeps, distributed runs, exports to trackers, the full graph vs DistDGL comparison.
``interfaces``
    what a person touches: the CLI and its commands, the dashboard pages, and the package's own
    ``gnnrec_lab.run`` (the package ``__init__`` runs before every module, so it imports only
    ``util``/``core`` modules at its top; ``run`` imports the loop when called).

Imports inside functions are for one reason only: keeping a heavy third-party module
(:data:`HEAVY`) out of the importing module's own import (the CLI's start, the config, the
store). A package module that loads nothing heavy the importer does not already load is imported
at the top.
"""
from __future__ import annotations

# Bottom first. Module names are relative to the package; a package's __init__ goes by the
# package's name ("gnnrec_lab" is the package itself).
LAYERS: dict[str, tuple[str, ...]] = {
    "util": ("errors", "bounds", "checks", "formatting", "provenance", "status", "runtime", "proc", "recorder",
             "signals", "cgroup", "cluster", "home", "places", "layers", "pinning"),
    "core": ("config", "distspec", "data", "data.dataset", "data.readers", "data.registry", "data.split",
             "data.storage", "data.synthetic", "graph", "sampling", "kernels", "kernels.backends", "kernels.buffers",
             "kernels.costs", "kernels.native"),
    "models": ("models", "models.lightgcn", "models.loss", "models.ngcf", "optim", "evaluate", "reporting",
               "step"),
    "memory": ("memory", "memory.advise", "memory.footprint", "memory.placement", "memory.profiles",
               "memory.tiermodel", "memory.topology", "memory.validation", "cache", "cache.aio",
               "cache.cached_rows", "cache.oracle_table", "cache.policies", "cache.simulate", "cache.slow_tier",
               "cache.study", "cache.traces", "rows", "preflight", "calibrate", "analysis"),
    "train": ("train", "profiling", "benchmarking"),
    "runs": ("store", "runner", "worker"),
    "services": ("projection", "sweep", "distributed", "export", "comparison"),
    "interfaces": ("gnnrec_lab", "cli", "commands", "commands.advise", "commands.bench", "commands.cache",
                   "commands.calibrate", "commands.common", "commands.dashboard", "commands.data",
                   "commands.devices", "commands.distributed", "commands.run", "commands.runs", "commands.sweep",
                   "commands.warmup", "commands.whatif", "dashboard", "dashboard.app", "dashboard.breakdown",
                   "dashboard.cache", "dashboard.common", "dashboard.compare", "dashboard.fake", "dashboard.launch",
                   "dashboard.live", "dashboard.security"),
}

# Third-party modules slow enough to import that a module which does not need them at its import
# keeps them out: the reason an import may sit inside a function. torch ~2.7 s, panel ~2.1 s,
# pandas ~1 s, holoviews ~0.6 s, numba ~0.5 s; numpy ~0.25 s, as long as the CLI takes to start
# without it (its parser and the store need none of these).
HEAVY = frozenset({"torch", "numba", "llvmlite", "pandas", "panel", "holoviews", "bokeh", "hvplot", "dgl",
                   "torch_geometric", "mlflow", "numpy"})


def layer_of(module: str) -> int:
    """Index (0 = bottom) of ``module``'s layer; ``module`` relative to the package or absolute.
    Raises KeyError for a module no layer lists."""
    name = module[len("gnnrec_lab."):] if module.startswith("gnnrec_lab.") else module
    for i, mods in enumerate(LAYERS.values()):
        if name in mods:
            return i
    raise KeyError(f"{module}: in no layer of gnnrec_lab.layers.LAYERS")
