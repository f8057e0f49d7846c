"""Bytes, durations and rates as people read them: one spelling for the CLI and the dashboard.

A leaf module (it imports nothing from the package), so any layer may use it. Tables that
line numbers up in fixed-width columns (``analysis.format_breakdown``, the benchmark tables)
keep their own fixed units and digits; these are for numbers in sentences and cells.
"""
from __future__ import annotations

import math
from typing import Optional


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt_bytes(n: float) -> str:
    """``n`` bytes in binary units: '512 B', '1.5 KiB', '3.2 GiB', up to PiB."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def fmt_duration(s: Optional[float], missing: str = "-") -> str:
    """Seconds as '12.3 s', '4m 05s' or '2h 03m'; ``missing`` for None or NaN."""
    if _missing(s):
        return missing
    s = float(s)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"


def ms_value(s: float) -> float:
    """Seconds as milliseconds rounded as :func:`fmt_ms` prints them (a table cell then shows the
    digits a sentence does: 12.35 ms is 12.3 or 12.4 in both, never one of each)."""
    return float(f"{float(s) * 1e3:.1f}")


def fmt_ms(s: float) -> str:
    """Seconds as milliseconds, '12.3 ms' (step and phase times)."""
    return f"{float(s) * 1e3:.1f} ms"


def fmt_percent(fraction: float) -> str:
    """A fraction as a percentage, '12.3%' (hit and stall rates, shares)."""
    return f"{100 * float(fraction):.1f}%"


def significant(v, digits: int = 3) -> float:
    """``v`` rounded to ``digits`` significant digits, as the pages' tables hold it (NaN, inf and 0 as
    they are): ``0.896906`` -> ``0.897``, ``1234.5`` -> ``1230.0``."""
    v = float(v)
    return v if not math.isfinite(v) or v == 0 else float(f"{v:.{digits}g}")
