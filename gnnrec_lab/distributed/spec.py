"""What a DistDGL run is: :class:`DistSpec`, the settings every process of a partitioned run
reads (its launcher, servers and trainers), and the constraints table that checks it.

A DistSpec is a :class:`~gnnrec_lab.config.run.RunConfig` in sampled mode plus the cluster's own
fields. The fields it shares with RunConfig are not restated here: they are RunConfig's fields
(:data:`RUN_FIELDS`: every one but those a DistDGL run cannot honour, :data:`NOT_DISTRIBUTED`),
with RunConfig's types, defaults and value constraints; only the checks a partitioned run adds
(:data:`DIST_RULES`) and the cluster's fields are declared here. A new RunConfig field or default
reaches DistSpec, its ``spec.json`` and :meth:`DistSpec.run_config` without an edit here.

Apart from :mod:`gnnrec_lab.distributed.engine` so that the CLI can check ``gnnrec-lab distributed``'s
flags against the same table without loading numpy, DGL or the training code.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from gnnrec_lab.config.bounds import INT64_MAX, integer, integers, number
from gnnrec_lab.config.checks import Interval, Kind, Options, Parsed, Rule, Text, alternatives, check
from gnnrec_lab.config.run import LAYERS, RUN_CONSTRAINTS, RunConfig, fanout_per_layer, model_option_values
from gnnrec_lab.models.registry import graph_models
from gnnrec_lab.util.errors import ConfigError
from gnnrec_lab.util.files import write_atomic


class _GraphModels(Mapping):
    """The models a partitioned run trains: the declared ones that sample neighbours
    (models.registry.graph_models; mf samples none), read when iterated or checked, so a model
    registered later counts."""

    def __getitem__(self, name):
        if name in graph_models():
            return True
        raise KeyError(name)

    def __iter__(self):
        return iter(graph_models())

    def __len__(self):
        return len(graph_models())


MODELS = _GraphModels()
CLUSTERS = ("local", "emulated")
MAX_PARTITIONS = 64               # simulated machines on one host

# RunConfig's fields a DistDGL run does not take, and why (every other RunConfig field is a DistSpec field).
NOT_DISTRIBUTED = {
    "mode": "always sampled: each trainer samples its batch's neighbourhood through DGL",
    "optimizer": "the embedding table is DGL's DistEmbedding, updated by DGL's SparseAdam; dense weights by Adam",
    "momentum": "SGD only, and the trainers run SparseAdam and Adam",
    "weight_decay": "AdamW / LAMB only, and the trainers run SparseAdam and Adam",
    "protocol": "trains the lab's protocol (train, validating on valid): the paper protocol is the full graph's",
    "cache_policy": "the table is DGL's DistEmbedding on the servers, not a slow tier behind a cache",
    "cache_size": "no cache (see cache_policy)",
    "lookahead": "no cache (see cache_policy)",
    "memory_mode": "measured on the machines' DRAM; the tier model projects full-graph runs only",
    "placement": "every tensor of a machine is in its DRAM (its server's shared memory, its trainer's heap)",
    "device_profile": "no modeled memory mode (see memory_mode)",
    "threads": "each server and trainer runs one thread (OMP_NUM_THREADS=1)",
    "precision": "the trainers propagate float32 rows through DGL's kernels (bf16 rows are the native kernels')",
    "cores": "a machine's cores are cores_per_machine (the emulated cluster pins them)",
    "name": "the store's label of the run, given to run_config(name=...)",
}
RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig) if f.name not in NOT_DISTRIBUTED)


def _batch_covers_partitions(s) -> Optional[str]:
    """Each trainer takes batch_size // partitions triples: at least one."""
    if s["batch_size"] < s["partitions"]:
        return f"must be at least partitions ({s['partitions']}), got {s['batch_size']}"
    return None


# What a partitioned run changes of RunConfig's constraints on the fields it shares: the models
# with neighbours to sample, at least one layer, one fan-out per layer (always sampled), a batch
# that gives every trainer a triple. Every other shared field is checked as RunConfig checks it.
DIST_RULES: dict[str, list] = {
    "model": [Options(MODELS)],
    "layers": [LAYERS],
    "fanouts": alternatives(RUN_CONSTRAINTS["fanouts"]) + [Rule(fanout_per_layer, dict(layers=2, fanouts=[10]))],
    "batch_size": alternatives(RUN_CONSTRAINTS["batch_size"])
    + [Rule(_batch_covers_partitions, dict(partitions=4, batch_size=2))],
    # the models' own options (ngcf_form), as RunConfig keeps them
    "model_options": [Parsed(model_option_values, breaks=("edge", {"no_such_option": 1}))],
}

_PATH = Text("a directory path", strip=True, nul=False)
# What a DistSpec accepts (gnnrec_lab.config.checks), in its fields' order: where the run lives, the
# fields it shares with RunConfig as RunConfig takes them (its value constraints, DIST_RULES where a
# partitioned run differs), the cluster's own. `gnnrec-lab distributed` checks its flags with the same table.
DIST_CONSTRAINTS: dict[str, list] = {
    "workdir": [_PATH],
    "graph_name": [Text("a graph name", strip=True)],
    "partitions": [Interval(integer, lo=1, hi=MAX_PARTITIONS)],
    **{name: DIST_RULES.get(name) or alternatives(RUN_CONSTRAINTS[name]) for name in RUN_FIELDS},
    # where target_recall came from when stated as a fraction of a reference run's best (--target-of)
    "target_of": [None, Interval(integer, lo=1, hi=INT64_MAX)],
    "target_fraction": [None, Interval(number, lo=0, hi=1, lo_open=True)],
    "target_reference": [None, Interval(number, lo=0, hi=1, lo_open=True)],
    "run_id": [None, Interval(integer, lo=1, hi=INT64_MAX)],
    "home": [None, _PATH],
    "ports": [Interval(integers, lo=1, hi=65535, max_len=MAX_PARTITIONS), Options(([],))],
    "master_port": [Interval(integer, lo=0, hi=65535)],
    "ip_config": [Text("an ip_config file's path (empty: one made for this host)", empty=True, nul=False)],
    "isolate": [Kind(bool, "True or False")],
    "cluster": [Options(CLUSTERS)],
    "cores_per_machine": [Interval(integer, lo=1, hi=4096)],
    "link_gbit": [Interval(number, lo=0, hi=10000, unit="Gbit/s")],
    "timeout_s": [Interval(number, lo=1, hi=7 * 86400, unit="s")],
}


def _shared_field(f: dataclasses.Field) -> tuple:
    """RunConfig's field ``f`` as a DistSpec field: its name, type and default."""
    if f.default_factory is not dataclasses.MISSING:
        return f.name, f.type, field(default_factory=f.default_factory)
    return f.name, f.type, field(default=f.default)


@dataclass
class _Where:
    """Where a run lives: its work folder, DGL's graph name, the partitions (one machine each)."""

    workdir: str
    graph_name: str
    partitions: int


# RunConfig's fields a DistSpec takes (RUN_FIELDS), as RunConfig declares them
_RunFields = dataclasses.make_dataclass(
    "_RunFields", [_shared_field(f) for f in dataclasses.fields(RunConfig) if f.name in RUN_FIELDS],
    bases=(_Where,))


@dataclass
class DistSpec(_RunFields):
    """What every process of a run reads (written as ``spec.json`` in the work folder), checked
    against :data:`DIST_CONSTRAINTS` when built (and when each process loads it): ``workdir``,
    ``graph_name``, ``partitions``, then RunConfig's fields (:data:`RUN_FIELDS`, RunConfig's
    defaults; ``batch_size`` is global, each trainer takes ``batch_size // partitions``), then
    the cluster's own below. :meth:`of` builds one from a RunConfig."""

    target_of: Optional[int] = None           # target_recall = target_fraction x run target_of's best
    target_fraction: Optional[float] = None   # valid Recall@20 (target_reference)
    target_reference: Optional[float] = None
    run_id: Optional[int] = None
    home: Optional[str] = None
    ports: list = field(default_factory=list)
    master_port: int = 0
    ip_config: str = ""
    isolate: bool = True            # private /dev/shm per machine (off only to show the corruption)
    cluster: str = "local"          # "local": every machine a process group on 127.0.0.1; "emulated": netns
    cores_per_machine: int = 1      # emulated cluster: cores each machine (server + trainer) is pinned to
    link_gbit: float = 10.0         # emulated cluster: tbf rate of each link, Gbit/s (0: unshaped)
    timeout_s: float = 3600.0       # the launcher stops every machine after this long

    def __post_init__(self):
        # normalised as RunConfig normalises (ints, tuples), so a spec read back from spec.json is equal
        for name, value in check(DIST_CONSTRAINTS, self.__dict__).items():
            if value is not getattr(self, name) and not isinstance(value, float):
                setattr(self, name, value)

    @classmethod
    def of(cls, config: RunConfig, workdir: str, graph_name: str, partitions: int, **cluster) -> "DistSpec":
        """The spec of a run of ``config`` (sampled mode; its :data:`RUN_FIELDS`, a field of
        :data:`NOT_DISTRIBUTED` it sets is refused, naming the field) on ``partitions`` machines."""
        if config.mode != "sampled":
            raise ConfigError("mode", f"a DistDGL run samples each batch's neighbourhood: use 'sampled', "
                                      f"got {config.mode!r}")
        default = RunConfig()
        for name in NOT_DISTRIBUTED:
            if name not in ("mode", "name") and getattr(config, name) != getattr(default, name):
                raise ConfigError(name, f"a DistDGL run does not take it ({NOT_DISTRIBUTED[name]}); "
                                        f"got {getattr(config, name)!r}")
        return cls(workdir=workdir, graph_name=graph_name, partitions=partitions,
                   **{name: getattr(config, name) for name in RUN_FIELDS}, **cluster)

    def run_config(self, name: Optional[str] = None) -> RunConfig:
        """The run as a RunConfig (sampled mode): what the store records and the trainers' shared
        training loop (:func:`gnnrec_lab.training.loop.run_loop`) reads."""
        return RunConfig(**{n: getattr(self, n) for n in RUN_FIELDS}, mode="sampled", name=name)

    def target_about(self) -> dict:
        """Where the target came from, for :func:`gnnrec_lab.training.loop.target_outcome` (empty: stated as a
        value)."""
        if self.target_of is None:
            return {}
        return {"of_run": self.target_of, "fraction": self.target_fraction, "reference": self.target_reference}

    def path(self, name: str) -> Path:
        return Path(self.workdir) / name

    def save(self) -> Path:
        return write_atomic(self.path("spec.json"), json.dumps(self.__dict__, indent=1))

    @classmethod
    def load(cls, path) -> "DistSpec":
        return cls(**json.loads(Path(path).read_text()))
