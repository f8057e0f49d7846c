"""The package's layers are its folders: which sub-package may import which.

Each sub-package of ``gnnrec_lab`` is one layer. A module imports modules of its own folder or of a
folder below it in :data:`LAYERS`, never above, and the imports form no cycle, counting the package
``__init__`` each import runs (``tests/test_layers.py`` walks every import, those inside functions
included, and imports each module alone in a fresh interpreter). From the bottom:

``util``
    leaf utilities every layer may use: errors, formatting, provenance, run status, the process
    runtime, ``/proc`` facts, the kernel recorder, signals, cgroups, the lab's home, pinning.
``config``
    what a run is (:class:`~gnnrec_lab.config.run.RunConfig`), the place syntax of a placement,
    parameter bounds and the constraint checks.
``graph``
    the bipartite graph (CSR, normalisation, locality orders) and neighbour sampling.
``data``
    datasets: the registry, readers, synthetic graphs, splits, the on-disk cache.
``kernels``
    SpMM, SDDMM, gathers and the fused loss terms with autograd, their backends, costs and
    buffers; the top-K ranking kernel; calibration's micro-kernels.
``models``
    LightGCN, NGCF and MF, the BPR loss, the optimizers.
``memory``
    tiers: footprints, device profiles, placement, topology, the tier model and its validation,
    the advice, the host calibration, pre-flight checks, analysis of kernel records. Computes from
    records and configs; never reads the run store.
``cache``
    embedding-row caches: traces, policies, the simulator, the cached slow tier, cached rows.
``training``
    the training loop and what drives it in-process: evaluation, reporting, the step an engine
    plugs into the loop, profiling, kernel benchmarks.
``runs``
    the run store, and the runner and worker that execute runs as subprocesses.
``distributed``
    DistDGL on an emulated (or real) cluster: its spec, its machines, its engine.
``services``
    what works on stored runs: projections onto modeled tiers, sweeps, exports to trackers, the
    full graph vs DistDGL comparison.
``dashboard``
    the Panel pages.
``commands``
    the CLI and its commands.

The package ``__init__`` (``gnnrec_lab.run``, the public names) runs before every module, so it
imports only ``util`` and ``config`` at its top, and the models' declarations
(:data:`INIT_MODULES`: ``models.registry``, which loads no torch), so that a RunConfig built
anywhere takes every model's own options; ``run`` imports the loop when called.

Imports inside functions are for one reason only: keeping a heavy third-party module
(:data:`HEAVY`) out of the importing module's own import (the CLI's start, the config, the
store). A package module that loads nothing heavy the importer does not already load is imported
at the top.
"""
from __future__ import annotations

PACKAGE = "gnnrec_lab"

# Bottom first: one sub-package (folder) of gnnrec_lab per layer.
LAYERS: tuple[str, ...] = ("util", "config", "graph", "data", "kernels", "models", "memory", "cache", "training",
                           "runs", "distributed", "services", "dashboard", "commands")
# What the package __init__ may import at its top (it runs before every module).
INIT_LAYERS = ("util", "config")
# ... and these modules above them (the models package, whose __init__ imports only its registry at its
# top, and the registry: each imports only INIT_LAYERS' modules and loads nothing heavy)
INIT_MODULES = ("gnnrec_lab.models", "gnnrec_lab.models.registry")   # the package __init__ runs registry

# Third-party modules slow enough to import that a module which does not need them at its import
# keeps them out: the reason an import may sit inside a function. torch ~2.7 s, panel ~2.1 s,
# pandas ~1 s, holoviews ~0.6 s, numba ~0.5 s; numpy ~0.25 s, as long as the CLI takes to start
# without it (its parser and the store need none of these).
HEAVY = frozenset({"torch", "numba", "llvmlite", "pandas", "panel", "holoviews", "bokeh", "hvplot", "dgl",
                   "torch_geometric", "mlflow", "numpy"})


def layer_of(module: str) -> int:
    """Index (0 = bottom) of ``module``'s layer: the folder it sits in (``module`` relative to the
    package or absolute). The package itself sits above every folder. Raises KeyError for a module
    outside every folder of :data:`LAYERS`."""
    name = module[len(PACKAGE) + 1:] if module.startswith(PACKAGE + ".") else module
    if name == PACKAGE:
        return len(LAYERS)
    folder = name.split(".")[0]
    if folder not in LAYERS:
        raise KeyError(f"{module}: in no folder of gnnrec_lab.util.layers.LAYERS {LAYERS}")
    return LAYERS.index(folder)
