"""Pre-flight: refuse a run that cannot start before anything is allocated or queued.

:func:`check_launch` is the one check the CLI (``run``, in the foreground and
with ``--detach``) and the dashboard's Launch button call before a run exists:
the dataset is known, NUMA placements name nodes this machine has, ``file:``
directories exist, a row-count ``cache_size`` fits the embedding table, the
device profile exists, the ``cores`` to pin to are there, and the predicted footprint of what stays in DRAM
(modeled, :func:`gnnrec_lab.memory.footprint`) fits the memory available now
(or the run's memory limit). Classes placed on ``file:DIR`` are not counted
against DRAM. Every refusal is a :class:`~gnnrec_lab.util.errors.UserError` naming
the parameter; only the footprint refusal can be overridden (``--force``).
"""
from __future__ import annotations

import os
from typing import Optional

from gnnrec_lab.memory.footprint import footprint
from gnnrec_lab.memory.placement import file_placed, numa_prefix
from gnnrec_lab.memory.profiles import load_profiles
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.formatting import fmt_bytes
from gnnrec_lab.util.pinning import choose_cores
from gnnrec_lab.util.provenance import Provenance

# which setting drives each tensor class's size (named in the refusal)
DRIVERS = {"embeddings": "dim", "optimizer": "dim/optimizer", "gradients": "dim", "activations": "dim/layers",
           "edge_intermediates": "dim/ngcf_form", "buffers": "batch_size", "graph": "dataset",
           "runtime": "interpreter"}


def available_bytes() -> int:
    """Memory available to a new process now (bytes, measured: psutil ``available``)."""
    import psutil
    return int(psutil.virtual_memory().available)


def dram_footprint(config, counts: dict) -> tuple[int, dict]:
    """(bytes that stay in DRAM, predicted footprint by class); modeled, interpreter left out."""
    fp = footprint(config, counts=counts, runtime_bytes=0)
    off = set(file_placed(config.placement))
    return sum(v for k, v in fp.items() if k not in off), fp


def batch_size_error(batch_size: int, counts: dict, dataset: str) -> Optional[ConfigError]:
    """Why ``batch_size`` cannot train ``dataset`` (a batch larger than its training interactions),
    or None. The one check the run itself (with exact counts), the CLI's pre-flight and the Launch
    form make; where the split is not cached yet (``n_train_exact`` false) only a batch larger than
    every interaction is refused before the run, the run refuses the rest."""
    n_train = counts.get("n_train")
    exact = counts.get("n_train_exact", True)
    bound = n_train if exact else counts.get("n_interactions")
    if bound is None or batch_size <= bound:
        return None
    what = "training interactions" if exact else "interactions (the training split holds about 80% of them)"
    return ConfigError("batch_size", f"must be at most the number of {what} ({bound:,}) of {dataset!r}, "
                                     f"got {batch_size:,}")


def memory_verdict(config, counts: dict, *, memory_limit_bytes: Optional[int] = None,
                   available: Optional[int] = None) -> dict:
    """The one predicted-memory number of a launch and the limit it is held against.

    ``dram_bytes``: predicted bytes that stay in DRAM (modeled; interpreter and ``file:`` classes
    left out, :func:`dram_footprint`); ``footprint``: predicted bytes by class; ``limit_bytes`` and
    ``limit_name``: the smaller of the memory available now (measured) and the run's memory limit;
    ``fits``; ``largest``: the biggest class and the setting that drives it. The CLI's refusal and
    the Launch page's chart both show these numbers.
    """
    dram, fp = dram_footprint(config, counts)
    avail = available_bytes() if available is None else int(available)
    where = "memory available now"
    if memory_limit_bytes is not None and memory_limit_bytes < avail:
        avail, where = int(memory_limit_bytes), "run's memory limit"
    big = max((k for k in fp if k != "runtime"), key=lambda k: fp[k])
    return {"dram_bytes": int(dram), "footprint": fp, "limit_bytes": int(avail), "limit_name": where,
            "fits": dram <= avail, "largest": big, "largest_bytes": int(fp[big]),
            "driver": DRIVERS.get(big, big), "kind": Provenance.MODELED}


def memory_refusal(v: dict) -> str:
    """The refusal of a launch whose predicted DRAM bytes exceed the limit (:func:`memory_verdict`)."""
    return (f"footprint: predicted {fmt_bytes(v['dram_bytes'])} in DRAM (modeled; largest: {v['largest']} "
            f"{fmt_bytes(v['largest_bytes'])}, set by {v['driver']}) exceeds the {fmt_bytes(v['limit_bytes'])} of "
            f"{v['limit_name']}; lower it or place classes on file:DIR")


def check_launch(config, *, force: bool = False, memory_limit_bytes: Optional[int] = None,
                 available: Optional[int] = None, cli: bool = True) -> Optional[int]:
    """Raise UserError (naming the parameter) when ``config`` cannot run here; return the
    predicted DRAM bytes (modeled) when the footprint could be predicted. ``cli``: the footprint
    refusal names the CLI's ``--force`` (the dashboard has no such override)."""
    from gnnrec_lab.data import describe
    from gnnrec_lab.data.registry import no_paper_protocol
    try:
        counts = describe(config.dataset, data_dir=config.data_dir)
    except UserError as e:
        msg = str(e)
        raise (ConfigError("dataset", msg) if not msg.startswith(("dataset", "data_dir")) else UserError(msg)) from e
    err = batch_size_error(config.batch_size, counts, config.dataset)
    if err is not None:
        raise err
    if config.protocol == "paper" and not counts.get("given_valid"):
        raise ConfigError("protocol", no_paper_protocol(config.dataset))
    if not counts.get("prepared", True):
        # the run will build the dataset: its directory must take files
        import tempfile

        from gnnrec_lab.data.registry import _root
        root = _root(config.data_dir)
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=root))
        except OSError as e:
            raise ConfigError("data_dir", f"{root} is not writable ({e.strerror}); {config.dataset} is not "
                                          f"prepared there yet") from None
    if config.cores is not None:   # more cores than this process may run on: refused before a run exists
        choose_cores(config.cores)
    numa_prefix(config)  # absent node, mixed policies, no numactl: refused the same way on every path
    for cls, d in sorted(file_placed(config.placement).items()):
        if not os.path.isdir(d):
            raise ConfigError("placement", f"{cls}: {d!r} is not an existing directory")
        if not os.access(d, os.W_OK):
            raise ConfigError("placement", f"{cls}: directory {d!r} is not writable")
    rows = counts["n_users"] + counts["n_items"]
    cs = str(config.cache_size)
    if config.cache_policy not in ("none", "stream") and not cs.endswith("%") and int(cs) > rows:
        raise ConfigError("cache_size", f"{int(cs):,} rows is more than the embedding table's {rows:,} rows "
                                        f"({config.dataset}); use at most {rows} or a share such as 100%")
    if config.device_profile is not None:
        names = sorted(load_profiles())
        if config.device_profile not in names:
            raise ConfigError("device_profile", f"unknown {config.device_profile!r}; known: {', '.join(names)}")
    if force:
        return dram_footprint(config, counts)[0]
    v = memory_verdict(config, counts, memory_limit_bytes=memory_limit_bytes, available=available)
    if not v["fits"]:
        raise UserError(memory_refusal(v) + (", or pass --force to start anyway" if cli else ""))
    return v["dram_bytes"]


def footprint_error(config, *, memory_limit_bytes: Optional[int] = None) -> Optional[UserError]:
    """:func:`check_launch`'s refusal (one line), or None when the run may start (dashboard use)."""
    try:
        check_launch(config, memory_limit_bytes=memory_limit_bytes, cli=False)
    except UserError as e:
        return e
    return None
