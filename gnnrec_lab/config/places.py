"""How a run says where a tensor class lives: the place syntax and its parser.

A place is ``dram``, ``file:DIR`` or ``numa:POLICY:NODES`` (see :mod:`gnnrec_lab.memory.placement`
for what each does); a run's ``placement`` maps some of :data:`TENSOR_CLASSES` to places. Only
syntax here, no allocation and no look at the machine: :class:`~gnnrec_lab.config.run.RunConfig`
validates with it, and :mod:`gnnrec_lab.memory.placement` places tensors by what it parses.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from gnnrec_lab.util.errors import ConfigError, UserError

# Tensor classes whose placement can be chosen (see gnnrec_lab.memory).
TENSOR_CLASSES = ("graph", "embeddings", "optimizer", "gradients", "activations",
                  "edge_intermediates", "buffers")
NUMA_POLICIES = ("membind", "preferred", "interleave")
PLACES_HELP = "dram, file:DIR, numa:POLICY:NODES"
_NODES_RE = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


@dataclass(frozen=True)
class Place:
    """One tensor class's place, parsed: the only form the rest of the lab reads."""
    kind: str                     # "dram" | "file" | "numa"
    directory: Optional[str] = None
    policy: Optional[str] = None
    nodes: tuple = ()

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file:{self.directory}"
        if self.kind == "numa":
            return f"numa:{self.policy}:{','.join(map(str, self.nodes))}"
        return "dram"

    @property
    def is_file(self) -> bool:
        return self.kind == "file"


def parse_nodes(text: str) -> list[int]:
    """NUMA node list like ``"0,1"`` or ``"0-2,4"`` → sorted unique node ids."""
    nodes: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi or lo < 0:
                    raise ValueError
                nodes.update(range(lo, hi + 1))
            else:
                n = int(part)
                if n < 0:
                    raise ValueError
                nodes.add(n)
        except ValueError:
            raise UserError(f"placement: bad NUMA node list {text!r} (expected e.g. '0' or '0,1' or '0-2')") from None
    if not nodes:
        raise UserError(f"placement: empty NUMA node list {text!r}")
    return sorted(nodes)


def parse_place(where, cls: str = "placement") -> Place:
    """Parse a place string (``dram``, ``file:DIR``, ``numa:POLICY:NODES``); errors are
    :class:`ConfigError` on ``placement`` naming the tensor class ``cls``."""
    if isinstance(where, Place):
        return where
    if where in (None, "", "dram"):
        return Place("dram")
    if not isinstance(where, str):
        raise ConfigError("placement", f"{cls}: got {where!r}, allowed: {PLACES_HELP}")
    if where.startswith("file:"):
        d = where[5:]
        if not d.strip() or "\0" in d:
            raise ConfigError("placement", f"{cls}: file: needs a directory, e.g. file:/mnt/pmem, got {where!r}")
        return Place("file", directory=d)
    if where.startswith("numa:"):
        parts = where.split(":")
        bad = ConfigError("placement", f"{cls}: got {where!r}, expected numa:POLICY:NODES with POLICY in "
                                       f"{', '.join(NUMA_POLICIES)} and NODES like 0 or 0,1 or 0-2")
        if len(parts) != 3 or parts[1] not in NUMA_POLICIES or not _NODES_RE.fullmatch(parts[2]):
            raise bad
        try:
            nodes = tuple(parse_nodes(parts[2]))
        except UserError:
            raise bad from None
        return Place("numa", policy=parts[1], nodes=nodes)
    raise ConfigError("placement", f"{cls}: got {where!r}, allowed: {PLACES_HELP}")


def parse_placement(placement) -> dict:
    """``{tensor class: Place}`` for a RunConfig's ``placement`` mapping (validated: known
    classes, well-formed places). Classes not in the mapping are in DRAM."""
    if not isinstance(placement, dict):
        raise ConfigError("placement", f"must map tensor classes to places, got {placement!r}")
    out = {}
    for cls, where in placement.items():
        if cls not in TENSOR_CLASSES:
            raise ConfigError("placement", f"unknown tensor class {cls!r}, allowed: {', '.join(TENSOR_CLASSES)}")
        if not isinstance(where, str) or not where:
            raise ConfigError("placement", f"{cls}: got {where!r}, allowed: {PLACES_HELP}")
        out[cls] = parse_place(where, cls)
    return out
