"""The memory modes a run can be launched in, each declared once with its device.

``dram`` is measured here; for the others the kernels run on this host's DRAM and the tier model
projects their step time onto the mode's device profile (modeled). RunConfig validates
``memory_mode`` against this table (:data:`gnnrec_lab.config.run.MEMORY_MODES`), the tier model
reads each mode's device from it (:data:`gnnrec_lab.memory.tiermodel.MODE_DEVICES`), the advice
its placement, the Launch page its options and whether it is measured. ``tests/test_models_registry.py``
checks that every device is a shipped profile of the kind its placement needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

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
    (:data:`PLACEMENTS`) and how it reads in a sentence (``words``)."""

    name: str
    device: Optional[str]
    placement: str
    words: str = ""

    @property
    def measured(self) -> bool:
        """Measured on this host (no device to model it on)."""
        return self.device is None


# name -> mode, in the order every view lists them (the measured one, dram, first: the default)
MEMORY_MODE_TABLE: dict[str, MemoryMode] = {m.name: m for m in (
    MemoryMode("dram", None, "dram", "DRAM"),
    MemoryMode("optane_memory_mode", "optane_pmem100_memory_mode", "cache", "Optane Memory Mode"),
    MemoryMode("optane_app_direct", "optane_pmem100_appdirect_6x", "split", "Optane App Direct"),
    MemoryMode("cxl", "cxl_type3_ddr5_x8", "split", "CXL memory"),
    MemoryMode("remote_numa", "remote_numa_ddr4", "split", "a remote NUMA node"),
)}

# the mode a run without one is in (RunConfig's default; a stored row with none, a DistDGL run's)
DEFAULT_MEMORY_MODE: MemoryMode = next(iter(MEMORY_MODE_TABLE.values()))


def memory_mode_of(config) -> MemoryMode:
    """The :class:`MemoryMode` of ``config``: a RunConfig, a stored config or run row (a mapping with
    ``memory_mode``) or a mode's name. No mode (None, empty, a missing column's NaN) is
    :data:`DEFAULT_MEMORY_MODE`; a name the table does not hold is a ConfigError naming it. Every
    view asks this (and the mode's ``measured``) instead of comparing names."""
    if config is None or isinstance(config, str):
        name = config
    elif isinstance(config, dict):
        name = config.get("memory_mode")
    else:
        name = getattr(config, "memory_mode", None)
    if not isinstance(name, str) or not name:
        return DEFAULT_MEMORY_MODE
    try:
        return MEMORY_MODE_TABLE[name]
    except KeyError:
        raise ConfigError("memory_mode", f"got {name!r}, allowed: {', '.join(MEMORY_MODE_TABLE)}") from None
