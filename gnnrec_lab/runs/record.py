"""A stored run, typed: what the run store holds, read back with every section in one shape.

The store keeps a run's config, host, info and result as JSON (:mod:`gnnrec_lab.runs.store`),
written by this version or an older one, or damaged since: a section may be absent, None, or (in
a damaged row) not an object at all. Readers used to guard each level of them with an ``or {}``;
here each section is read once into its type, an absent or unreadable one as that type's empty,
never a KeyError:

* :class:`StoredConfig`: the run's config (``RunConfig.to_dict()``), a plain dict (every reader's
  ``cfg.get(...)`` and the tier model's config lookups work on it) with ``placement`` typed;
* :class:`StoredResult`: the run's result (``RunResult.to_dict()``, or a DistDGL run's result
  dict), the inverse of what :meth:`Store.record_result` writes: its sections as dicts and lists,
  its footprint a :class:`~gnnrec_lab.memory.footprint.Footprint`, its status a
  :class:`~gnnrec_lab.util.status.RunStatus`; scalars as stored (None when absent);
* :class:`RunRecord`: the store's row (:meth:`Store.run_record`, or :meth:`RunRecord.of` a
  :meth:`Store.get_run` dict) with those typed sections.

Values are the stored ones, unchanged: a view that reads a record shows what it showed reading the
dicts. Nothing here loads torch or pandas.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from gnnrec_lab.memory.footprint import Footprint
from gnnrec_lab.util.status import RunStatus


def section(d: Any, key: str) -> dict:
    """``d[key]`` when ``d`` is a mapping holding a mapping there, else an empty dict (absent,
    None, or not an object in a damaged or older row). A copy: a record's sections are its own."""
    v = d.get(key) if isinstance(d, Mapping) else None
    return dict(v) if isinstance(v, Mapping) else {}


def _list(d: Mapping, key: str) -> list:
    v = d.get(key)
    return list(v) if isinstance(v, (list, tuple)) else []


class StoredConfig(dict):
    """A stored run's config: the dict ``RunConfig.to_dict()`` wrote (``{}`` when the run has none
    or it is damaged), with the parts readers need typed. Older versions' configs lack newer
    fields: ``get`` returns None (or the default given) for them, as on the stored dict."""

    @classmethod
    def of(cls, d: Any) -> "StoredConfig":
        if isinstance(d, cls):
            return d
        return cls(d) if isinstance(d, Mapping) else cls()

    @property
    def placement(self) -> dict:
        """``{tensor class: where}`` the run placed off DRAM (``{}``: every class in DRAM)."""
        return section(self, "placement")


@dataclass(frozen=True)
class StoredResult:
    """A run's stored result (:meth:`~gnnrec_lab.training.loop.RunResult.to_dict`'s shape, by this or
    an older version): each section typed, an absent one empty (dicts ``{}``, lists ``[]``, the
    footprint an empty :class:`Footprint`), each scalar as stored or None. ``raw`` is the dict as
    stored (``{}`` when the run has no result yet), for keys no section names."""

    raw: dict = field(default_factory=dict)
    config: StoredConfig = field(default_factory=StoredConfig)
    status: Optional[RunStatus] = None
    epochs: Optional[int] = None
    steps: Optional[int] = None
    train_seconds: Optional[float] = None         # measured
    epoch_seconds: list = field(default_factory=list)
    best_epoch: Optional[int] = None
    best_valid: dict = field(default_factory=dict)
    test: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    time_to_target_s: Optional[float] = None
    target: dict = field(default_factory=dict)
    kernels: list = field(default_factory=list)   # per (kernel, phase) totals, measured
    phases: dict = field(default_factory=dict)
    footprint: Footprint = field(default_factory=Footprint)
    info: dict = field(default_factory=dict)
    jit_seconds: Optional[float] = None
    modeled: dict = field(default_factory=dict)   # the tier model's projection (modeled memory modes)
    distributed: dict = field(default_factory=dict)   # a DistDGL run's own part

    @classmethod
    def from_dict(cls, d: Any) -> "StoredResult":
        """The typed view of a result dict (or of a RunResult, through its ``to_dict``); None, a
        damaged (non-object) result or one missing sections gives their empties."""
        if isinstance(d, cls):
            return d
        if hasattr(d, "to_dict") and not isinstance(d, Mapping):
            d = d.to_dict()
        d = dict(d) if isinstance(d, Mapping) else {}
        return cls(raw=d, config=StoredConfig.of(d.get("config")), status=RunStatus.of(d.get("status")),
                   epochs=d.get("epochs"), steps=d.get("steps"), train_seconds=d.get("train_seconds"),
                   epoch_seconds=_list(d, "epoch_seconds"), best_epoch=d.get("best_epoch"),
                   best_valid=section(d, "best_valid"), test=section(d, "test"), history=_list(d, "history"),
                   time_to_target_s=d.get("time_to_target_s"), target=section(d, "target"),
                   kernels=_list(d, "kernels"), phases=section(d, "phases"),
                   footprint=Footprint.from_dict(d.get("footprint")), info=section(d, "info"),
                   jit_seconds=d.get("jit_seconds"), modeled=section(d, "modeled"),
                   distributed=section(d, "distributed"))

    @property
    def row_store(self) -> dict:
        """A sampled run's row-store counters (``info.sampled.row_store``: hits, misses, bytes...,
        measured); ``{}`` for a full-graph run."""
        return section(section(self.info, "sampled"), "row_store")


@dataclass(frozen=True)
class RunRecord:
    """One run of the store with typed sections (:meth:`Store.run_record`). ``row`` is the
    :meth:`Store.get_run` dict it was read from (every column, ``duration_s`` and its parts)."""

    id: Optional[int]
    name: Optional[str] = None
    status: Optional[RunStatus] = None
    config: StoredConfig = field(default_factory=StoredConfig)
    host: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)     # host, dataset counts, steps_per_epoch, load, jit_s...
    result: StoredResult = field(default_factory=StoredResult)
    damaged: tuple = ()                          # one line per damaged JSON column
    row: dict = field(default_factory=dict)

    @classmethod
    def of(cls, run: Any) -> "RunRecord":
        """The record of a :meth:`Store.get_run` dict (a record is returned as it is; None or a
        partial dict, as a page holds for a run that vanished, gives empty sections)."""
        if isinstance(run, cls):
            return run
        run = dict(run) if isinstance(run, Mapping) else {}
        rid = run.get("id")
        return cls(id=None if rid is None else int(rid), name=run.get("name"), status=RunStatus.of(run.get("status")),
                   config=StoredConfig.of(run.get("config")), host=section(run, "host"), info=section(run, "info"),
                   result=StoredResult.from_dict(run.get("result")), damaged=tuple(run.get("damaged") or ()),
                   row=run)

    @property
    def load(self) -> Optional[dict]:
        """The run's load samples (``info.load``: ``{point: proc.load_sample()}``, measured), or None."""
        return self.info.get("load")
