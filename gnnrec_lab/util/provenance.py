"""Where a number came from: the lab's one spelling of measured vs modeled.

Every value that leaves the program (CLI tables, ``--json``, the run store, dashboards,
notebooks) carries one of these. A ``StrEnum`` so it is written to JSON and SQLite as
its plain value and compares equal to the strings older stores hold.

- ``MEASURED``: timed or read on this machine (a kernel's wall time, RSS, a link's
  interface counters).
- ``MODELED``: derived from a device profile instead of a measurement (Optane, CXL and
  file-tier projections, predicted footprints). Shown hatched in every plot.
- ``COUNTED``: computed exactly from the work's shape (bytes a kernel must move, flops,
  rows fetched), neither timed nor projected.

A dataclass says which of its fields is which with :func:`part`; :func:`parts` reads them
back (the ``kind`` maps a result's JSON carries).
"""
from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any

# The dataclass field metadata key :func:`part` sets.
METADATA_KEY = "provenance"


class Provenance(StrEnum):
    MEASURED = "measured"
    MODELED = "modeled"
    COUNTED = "counted"

    @classmethod
    def _missing_(cls, value):
        # an older spelling: footprint rows of stores before schema 4 say "predicted" for modeled bytes
        return {"predicted": cls.MODELED}.get(value)

    @classmethod
    def of(cls, measured: bool) -> "Provenance":
        """MEASURED when ``measured`` is true, else MODELED (a run's time on a modeled memory mode)."""
        return cls.MEASURED if measured else cls.MODELED


def part(provenance: Provenance, **field_kw) -> Any:
    """A dataclass field whose values have ``provenance`` (``field_kw`` as in ``dataclasses.field``)."""
    return dataclasses.field(metadata={METADATA_KEY: Provenance(provenance)}, **field_kw)


def parts(obj) -> dict:
    """``{field name: Provenance}`` of a dataclass (class or instance) for the fields declared with
    :func:`part`; an instance's field that holds such a dataclass maps to that one's own parts."""
    out: dict = {}
    for f in dataclasses.fields(obj):
        if METADATA_KEY in f.metadata:
            out[f.name] = f.metadata[METADATA_KEY]
            continue
        value = getattr(obj, f.name, None) if not isinstance(obj, type) else None
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            nested = parts(value)
            if nested:
                out[f.name] = nested
    return out
