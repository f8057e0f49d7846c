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
"""
from __future__ import annotations

from enum import StrEnum


class Provenance(StrEnum):
    MEASURED = "measured"
    MODELED = "modeled"
    COUNTED = "counted"
