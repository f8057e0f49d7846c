"""Which numbers are accepted at the door: the bounded parsers that :class:`~gnnrec_lab.config.run.RunConfig`
and every command's numeric option share.

Each checker takes the parameter's name, a value (a Python or numpy number, or the text a user
typed) and its bounds, and returns the value in its type or raises
:class:`~gnnrec_lab.util.errors.ConfigError` naming the parameter, the value given and what is allowed.
Text is read strictly: ``1e3`` is not an integer, ``nan`` and ``inf`` are not accepted as numbers,
``10,,10`` is not a list of integers (an empty item is refused, not dropped). The command line wraps
the same checkers as argparse types (:func:`gnnrec_lab.commands.common.bounded`), so a flag and the
RunConfig field it sets refuse the same values with the same words.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

from gnnrec_lab.util.errors import ConfigError

INT64_MAX = 2**63 - 1      # what SQLite and numpy's int64 hold
MAX_LIST = 64              # items a list-valued option may have
# Limits of options that are not RunConfig fields (RunConfig's are config.MAXIMA): far past any real
# use, small enough that a typo is refused at the door, not deep inside an allocation or a sleep.
MAX_SECONDS = 10**7        # a timeout or grace period (~116 days)
MAX_DRAM_GIB = 1 << 20     # DRAM a machine may be said to have (1 PiB)
MAX_BYTES = 1 << 60        # a byte count (1 EiB)
MAX_REPEATS = 100_000      # timed repeats of a benchmark
MAX_ANTAGONISTS = 64       # CPU-bound processes a benchmark may start beside itself
MAX_ROWS = 2**31 - 1       # users, items or rows of a table (int32 ids)
MAX_INTERACTIONS = 2**36   # interactions of a dataset


def _span(lo, hi, lo_open=False, hi_open=False, unit: str = "") -> str:
    u = f" {unit}" if unit else ""
    if lo is not None and hi is not None and not lo_open and not hi_open:
        return (f"from {lo:,}{u} to {hi:,}{u}" if isinstance(lo, int) and isinstance(hi, int)
                else f"from {lo:g} to {hi:g}{u}")
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo:,}" if isinstance(lo, int)
                     else f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi:,}" if isinstance(hi, int)
                     else f"{'<' if hi_open else '<='} {hi:g}")
    return " and ".join(parts) + u


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def integer(param: str, value, lo: Optional[int] = 1, hi: Optional[int] = INT64_MAX, unit: str = "", *,
            text: bool = True) -> int:
    """``value`` as an int in ``[lo, hi]`` (None: unbounded on that side); text (refused when
    ``text`` is False: the Python API takes numbers) must be an integer literal (``"12"``, not
    ``"12.0"`` or ``"1e3"``); bools and floats are refused."""
    what = f"must be an integer {_span(lo, hi, unit=unit)}".rstrip()
    if isinstance(value, str) and text:
        try:
            v = int(value.strip(), 10)
        except ValueError:   # also a literal past Python's digit limit
            raise ConfigError(param, f"{what}, got {_shown(value)}") from None
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        v = int(value)
    else:
        raise ConfigError(param, f"{what}, got {_shown(value)}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ConfigError(param, f"{what}, got {_shown(value)}")
    return v


def number(param: str, value, lo: Optional[float] = None, hi: Optional[float] = None, *,
           lo_open: bool = False, hi_open: bool = False, unit: str = "", text: bool = True) -> float:
    """``value`` as a finite float within the bounds (``lo_open``: ``> lo``, else ``>= lo``); text
    only when ``text``."""
    span = _span(lo, hi, lo_open, hi_open, unit)
    what = f"must be a finite number {span}".rstrip()
    if isinstance(value, str) and text:
        try:
            v = float(value.strip())
        except ValueError:
            raise ConfigError(param, f"{what}, got {_shown(value)}") from None
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            v = float(value)
        except OverflowError:   # an int past float's range
            raise ConfigError(param, f"{what}, got {_shown(value)}") from None
    else:
        raise ConfigError(param, f"{what}, got {_shown(value)}")
    if (not math.isfinite(v) or (lo is not None and (v <= lo if lo_open else v < lo))
            or (hi is not None and (v >= hi if hi_open else v > hi))):
        raise ConfigError(param, f"{what}, got {_shown(value)}")
    return v


def integers(param: str, value, lo: Optional[int] = 1, hi: Optional[int] = INT64_MAX,
             max_len: int = MAX_LIST, *, text: bool = True) -> tuple:
    """``value`` (comma-separated text when ``text``, or a sequence of numbers) as a tuple of 1 to
    ``max_len`` integers in ``[lo, hi]``; an empty item (``"10,,10"``) is refused."""
    what = f"must be 1 to {max_len} comma-separated integers {_span(lo, hi)}"
    if isinstance(value, str) and text:
        items = value.split(",")
    elif isinstance(value, (list, tuple)) or (hasattr(value, "__len__") and hasattr(value, "__iter__")
                                              and not isinstance(value, (dict, bytes, str))):
        items = list(value)
    else:
        raise ConfigError(param, f"{what}, got {_shown(value)}")
    if not 1 <= len(items) <= max_len:
        raise ConfigError(param, f"{what}, got {_shown(value)}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str) and not item.strip():
            raise ConfigError(param, f"{what}; item {i + 1} of {_shown(value)} is empty")
        try:
            out.append(integer(param, item, lo, hi, text=text))
        except ConfigError:
            raise ConfigError(param, f"{what}, got {_shown(value)} (item {i + 1}: {_shown(item)})") from None
    return tuple(out)


__all__ = ["INT64_MAX", "integer", "number", "integers"]
