"""The memory modes a run can be launched in, each declared once with its device.

``dram`` is measured here; for the others the kernels run on this host's DRAM and the tier model
projects their step time onto the mode's device profile (modeled). RunConfig validates
``memory_mode`` against this table (:data:`gnnrec_lab.config.run.MEMORY_MODES`), the tier model
reads each mode's device from it (:data:`gnnrec_lab.memory.tiermodel.MODE_DEVICES`), the advice
its placement, the Launch page its options and whether it is measured, and every view that colours
or labels a mode its ``color`` and ``short`` label (:func:`mode_look`). ``tests/test_models_registry.py``
checks that every device is a shipped profile of the kind its placement needs, and that the colours are
apart from each other for colour-blind readers too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple, Optional

from gnnrec_lab.util.errors import ConfigError

# How the advice places a mode's tensor classes (gnnrec_lab.memory.advise):
PLACEMENTS = {
    "dram": "every tensor class in DRAM",
    "cache": "every tensor class on the device, DRAM a hardware cache in front of it",
    "split": "the advised split: the classes it pays to keep in DRAM there, the others on the device",
}


@dataclass(frozen=True)
class MemoryMode:
    """A memory mode: its ``name``, the ``device`` profile (``gnnrec_lab/memory/devices.yaml``) its
    step time is modeled on (None: measured on this host's DRAM), its ``placement`` kind
    (:data:`PLACEMENTS`), how it reads in a sentence (``words``), in a legend or a table column
    (``short``), and its ``color`` (``#rrggbb``) on every chart. Colour says which mode a mark is;
    whether its number is measured or modeled is said by hatching (bars) or marker (points), never
    by colour."""

    name: str
    device: Optional[str]
    placement: str
    words: str
    short: str
    color: str

    def __post_init__(self):
        if not re.fullmatch(r"#[0-9a-fA-F]{6}", self.color):
            raise ValueError(f"memory mode {self.name}: color must be #rrggbb, got {self.color!r}")
        if not self.short:
            raise ValueError(f"memory mode {self.name}: short label is empty")

    @property
    def measured(self) -> bool:
        """Measured on this host (no device to model it on)."""
        return self.device is None


# name -> mode, in the order every view lists them (the measured one, dram, first: the default).
# The colours stay apart under deuteranopia, protanopia and tritanopia as well (the test measures
# it), and none is the grey of a mode the table does not hold (UNKNOWN_MODE_COLOR).
MEMORY_MODE_TABLE: dict[str, MemoryMode] = {m.name: m for m in (
    MemoryMode("dram", None, "dram", "DRAM", "DRAM", "#393b79"),
    MemoryMode("optane_memory_mode", "optane_pmem100_memory_mode", "cache", "Optane Memory Mode", "Optane MM",
               "#9467bd"),
    MemoryMode("optane_app_direct", "optane_pmem100_appdirect_6x", "split", "Optane App Direct", "Optane AD",
               "#2ca02c"),
    MemoryMode("cxl", "cxl_type3_ddr5_x8", "split", "CXL memory", "CXL", "#17becf"),
    MemoryMode("remote_numa", "remote_numa_ddr4", "split", "a remote NUMA node", "remote NUMA", "#8c564b"),
)}

# the mode a run without one is in (RunConfig's default; a stored row with none, a DistDGL run's)
DEFAULT_MEMORY_MODE: MemoryMode = next(iter(MEMORY_MODE_TABLE.values()))


def _mode_name(config) -> Optional[str]:
    """The memory mode's name ``config`` holds (see :func:`memory_mode_of`), None for none."""
    if config is None or isinstance(config, str):
        name = config
    elif isinstance(config, dict):
        name = config.get("memory_mode")
    else:
        name = getattr(config, "memory_mode", None)
    return name if isinstance(name, str) and name else None


def memory_mode_of(config) -> MemoryMode:
    """The :class:`MemoryMode` of ``config``: a RunConfig, a stored config or run row (a mapping with
    ``memory_mode``) or a mode's name. No mode (None, empty, a missing column's NaN) is
    :data:`DEFAULT_MEMORY_MODE`; a name the table does not hold is a ConfigError naming it. Every
    view asks this (and the mode's ``measured``) instead of comparing names."""
    name = _mode_name(config)
    if name is None:
        return DEFAULT_MEMORY_MODE
    try:
        return MEMORY_MODE_TABLE[name]
    except KeyError:
        raise ConfigError("memory_mode", f"got {name!r}, allowed: {', '.join(MEMORY_MODE_TABLE)}") from None


# How a view draws a memory mode the table does not hold (a store row from an older lab, or edited
# by hand): its raw name, in this neutral grey.
UNKNOWN_MODE_COLOR = "#999999"


class ModeLook(NamedTuple):
    """How a view shows a memory mode: ``short`` label, ``color`` and ``name``."""

    short: str
    color: str
    name: str


def mode_look(config) -> ModeLook:
    """How every view labels and colours the memory mode of ``config`` (anything
    :func:`memory_mode_of` takes): the table's ``short`` and ``color``. A name the table does not
    hold is shown, not refused: its raw name in :data:`UNKNOWN_MODE_COLOR`."""
    try:
        m = memory_mode_of(config)
    except ConfigError:
        name = str(_mode_name(config))
        return ModeLook(name, UNKNOWN_MODE_COLOR, name)
    return ModeLook(m.short, m.color, m.name)
