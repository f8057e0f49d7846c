"""What a cache study simulates: one :class:`SimRequest`, checked here once.

The Cache page (gnnrec_lab.dashboard.cache) and ``gnnrec-lab cache sim`` both build one and check it
with :data:`SIM_CONSTRAINTS`, so the same values are refused with the same words; each names the
fields its own way (the page in words, the CLI by its flags).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from gnnrec_lab.cache.simulate import parse_capacity
from gnnrec_lab.cache.study import AUTO_CAPACITY
from gnnrec_lab.config.bounds import integer, integers
from gnnrec_lab.config.checks import Interval, Options, Parsed, Subset, Text, check
from gnnrec_lab.config.run import (
    CACHE_TRACE_BATCH,
    CACHE_TRACE_KINDS,
    MAX_SEED,
    MAXIMA,
    OPTIMIZER_STATES,
    SIMULATED_CACHE_POLICIES,
)
from gnnrec_lab.util.errors import ConfigError, UserError


def parse_cache_sizes(text: str) -> list[str]:
    """Comma-separated cache sizes (``"5%"`` of rows, ``"5000"`` rows, or ``"auto"``: sizes from one
    batch's rows to 90% of the table, chosen from the trace) -> list of size strings.

    Raises UserError naming "cache sizes" for an empty list or a bad entry.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise UserError("cache sizes: give at least one size, e.g. 5%,10%,20% (or auto)")
    for p in parts:
        if p.lower() == AUTO_CAPACITY:
            continue
        try:
            parse_capacity(p, 100)
        except UserError as e:
            raise UserError(f"cache sizes: {e}") from None
    return parts


def parse_positive_ints(text: str, what: str) -> list[int]:
    """Comma-separated positive integers (look-aheads in batches, fan-outs); UserError names ``what``."""
    out = []
    for p in (s.strip() for s in str(text).split(",")):
        if not p:
            continue
        try:
            v = int(p)
        except ValueError:
            raise UserError(f"{what}: {p!r} is not a whole number") from None
        if v < 1:
            raise UserError(f"{what}: must be positive, got {v}")
        out.append(v)
    if not out:
        raise UserError(f"{what}: give at least one value")
    return out


@dataclass(frozen=True)
class SimRequest:
    """What to simulate. Hashable: equal requests share one result."""

    dataset: str = "synth-small"
    trace: str = "mf"                 # "mf" (BPR batches, 0 layers) or "sampled" (k-hop sub-graphs)
    batch_size: int = CACHE_TRACE_BATCH   # BPR triples per batch (the CLI's default too)
    fanouts: tuple = (10, 10)         # sampled only, first hop first
    # chosen from the trace: fixed shares left every size below one batch on ml-100k (1,635 of its
    # 2,625 rows at batch 1024), where only "none" could be simulated
    cache_sizes: tuple = ("auto",)
    lookaheads: tuple = (1, 10, 50, 200)   # oracle look-ahead, batches
    policies: tuple = SIMULATED_CACHE_POLICIES
    dim: int = 64
    optimizer: str = "adam"           # per-row state moved with the row
    epochs: int = 1
    seed: int = 0

    def checked(self, label: Optional[Callable[[str], str]] = None) -> "SimRequest":
        """This request if valid (:data:`SIM_CONSTRAINTS`); else ConfigError naming the field in the
        Cache page's words ("batch size"), or as ``label`` names it (the CLI's flags)."""
        check(SIM_CONSTRAINTS, {f: getattr(self, f) for f in SIM_CONSTRAINTS}, label=label or form_name)
        return self


def form_name(field_name: str) -> str:
    return field_name.replace("_", " ").replace("lookaheads", "look-aheads")


def _cache_sizes(param: str, value) -> tuple:
    """One or more cache sizes, each a row count or a share of rows (:func:`parse_cache_sizes`)."""
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(param, f"must be one or more sizes (5% of rows or 5000 rows), got {value!r}")
    try:
        return tuple(parse_cache_sizes(",".join(value)))
    except UserError as e:
        raise ConfigError(param, str(e).removeprefix("cache sizes: ")) from None


# What a simulation request accepts (gnnrec_lab.config.checks; the form's fields, named in its words). The
# optimizers are the simulator's (config.OPTIMIZER_STATES, as `cache sim`): per-row state moves with the row.
SIM_CONSTRAINTS: dict[str, list] = {
    "dataset": [Text("a dataset name (choose a dataset)", strip=True)],
    "trace": [Options(CACHE_TRACE_KINDS)],
    "batch_size": [Interval(integer, lo=1, hi=MAXIMA["batch_size"])],
    "fanouts": [Interval(integers, lo=1, hi=MAXIMA["fanouts"], max_len=MAXIMA["layers"])],
    "cache_sizes": [Parsed(_cache_sizes, breaks=((), ("5%", "lots"), "5%"))],
    "lookaheads": [Interval(integers, lo=1, hi=MAXIMA["lookahead"], max_len=1024)],
    "policies": [Subset(SIMULATED_CACHE_POLICIES)],
    "dim": [Interval(integer, lo=1, hi=MAXIMA["dim"])],
    "optimizer": [Options(tuple(OPTIMIZER_STATES))],
    "epochs": [Interval(integer, lo=1, hi=MAXIMA["epochs"])],
    "seed": [Interval(integer, lo=0, hi=MAX_SEED)],
}
