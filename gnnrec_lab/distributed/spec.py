"""What a DistDGL run is: :class:`DistSpec`, the settings every process of a partitioned run
reads (its launcher, servers and trainers), and the constraints table that checks it.

Apart from :mod:`gnnrec_lab.distributed.engine` so that the CLI can check ``gnnrec-lab distributed``'s
flags against the same table without loading numpy, DGL or the training code.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from gnnrec_lab.config.bounds import INT64_MAX, integer, integers, number
from gnnrec_lab.config.checks import Interval, Kind, Options, Rule, Text, alternatives, check
from gnnrec_lab.config.run import LAYERS, RUN_CONSTRAINTS, RunConfig, fanout_per_layer

MODELS = ("lightgcn", "ngcf")     # the graph models a partitioned run trains (mf samples no neighbours)
CLUSTERS = ("local", "emulated")
MAX_PARTITIONS = 64               # simulated machines on one host


def _batch_covers_partitions(s) -> Optional[str]:
    """Each trainer takes batch_size // partitions triples: at least one."""
    if s["batch_size"] < s["partitions"]:
        return f"must be at least partitions ({s['partitions']}), got {s['batch_size']}"
    return None


def _run_field(name: str) -> list:
    """RunConfig's value constraints of field ``name`` (its rules read RunConfig's other fields)."""
    return alternatives(RUN_CONSTRAINTS[name])


_PATH = Text("a directory path", strip=True, nul=False)
# What a DistSpec accepts (gnnrec_lab.config.checks): the fields it shares with RunConfig as RunConfig
# takes them, the cluster's own below. `gnnrec-lab distributed` checks its flags with the same table.
DIST_CONSTRAINTS: dict[str, list] = {
    "workdir": [_PATH],
    "graph_name": [Text("a graph name", strip=True)],
    "partitions": [Interval(integer, lo=1, hi=MAX_PARTITIONS)],
    "dataset": _run_field("dataset"),
    "model": [Options(MODELS)],
    "layers": [LAYERS],
    "dim": _run_field("dim"),
    "fanouts": _run_field("fanouts") + [Rule(fanout_per_layer, dict(layers=2, fanouts=[10]))],
    "batch_size": _run_field("batch_size") + [Rule(_batch_covers_partitions, dict(partitions=4, batch_size=2))],
    "epochs": _run_field("epochs"),
    "lr": _run_field("lr"),
    "l2": _run_field("l2"),
    "seed": _run_field("seed"),
    "eval_every": _run_field("eval_every"),
    "patience": _run_field("patience"),
    "eval_users": _run_field("eval_users"),
    "target_recall": _run_field("target_recall"),
    # where target_recall came from when stated as a fraction of a reference run's best (--target-of)
    "target_of": [None, Interval(integer, lo=1, hi=INT64_MAX)],
    "target_fraction": [None, Interval(number, lo=0, hi=1, lo_open=True)],
    "target_reference": [None, Interval(number, lo=0, hi=1, lo_open=True)],
    "max_steps_per_epoch": _run_field("max_steps_per_epoch"),
    "data_dir": _run_field("data_dir"),
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
    "ngcf_form": _run_field("ngcf_form"),
}


@dataclass
class DistSpec:
    """What every process of a run reads (written as ``spec.json`` in the work folder), checked
    against :data:`DIST_CONSTRAINTS` when built (and when each process loads it)."""

    workdir: str
    graph_name: str
    partitions: int
    dataset: str
    model: str = "lightgcn"
    layers: int = 2
    dim: int = 64
    fanouts: list = field(default_factory=lambda: [10, 10])
    batch_size: int = 2048          # global: each trainer takes batch_size // partitions
    epochs: int = 1
    lr: float = 1e-3
    l2: float = 1e-4
    seed: int = 2020
    eval_every: int = 1
    patience: int = 0               # epochs without a new best validation Recall@20 before stopping (0: never)
    eval_users: Optional[int] = None
    target_recall: Optional[float] = None
    target_of: Optional[int] = None           # target_recall = target_fraction x run target_of's best
    target_fraction: Optional[float] = None   # valid Recall@20 (target_reference)
    target_reference: Optional[float] = None
    max_steps_per_epoch: Optional[int] = None
    data_dir: Optional[str] = None
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
    ngcf_form: str = "edge"

    def __post_init__(self):
        check(DIST_CONSTRAINTS, self.__dict__)

    def run_config(self, name: Optional[str] = None) -> RunConfig:
        """The run as a RunConfig (sampled mode): what the store records and the trainers' shared
        training loop (:func:`gnnrec_lab.training.loop.run_loop`) reads."""
        return RunConfig(dataset=self.dataset, model=self.model, layers=self.layers, dim=self.dim,
                         batch_size=self.batch_size, epochs=self.epochs, lr=self.lr, l2=self.l2, seed=self.seed,
                         mode="sampled", fanouts=tuple(self.fanouts), eval_every=self.eval_every,
                         patience=self.patience, target_recall=self.target_recall, eval_users=self.eval_users,
                         max_steps_per_epoch=self.max_steps_per_epoch, data_dir=self.data_dir,
                         ngcf_form=self.ngcf_form, name=name)

    def target_about(self) -> dict:
        """Where the target came from, for :func:`gnnrec_lab.training.loop.target_outcome` (empty: stated as a
        value)."""
        if self.target_of is None:
            return {}
        return {"of_run": self.target_of, "fraction": self.target_fraction, "reference": self.target_reference}

    def path(self, name: str) -> Path:
        return Path(self.workdir) / name

    def save(self) -> Path:
        p = self.path("spec.json")
        p.write_text(json.dumps(self.__dict__, indent=1))
        return p

    @classmethod
    def load(cls, path) -> "DistSpec":
        return cls(**json.loads(Path(path).read_text()))
