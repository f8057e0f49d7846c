"""What a cache study simulates: one :class:`SimRequest`, checked here once.

The Cache page (gnnrec_lab.dashboard.cache) and ``gnnrec-lab cache sim`` both build one and check it
with :data:`SIM_CONSTRAINTS`, so the same values are refused with the same words; each names the
fields its own way (the page in words, the CLI by its flags).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
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
    field_label,
    option,
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


def _cache_sizes(param: str, value) -> tuple:
    """One or more cache sizes, each a row count or a share of rows (:func:`parse_cache_sizes`)."""
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(param, f"must be one or more sizes (5% of rows or 5000 rows), got {value!r}")
    try:
        return tuple(parse_cache_sizes(",".join(value)))
    except UserError as e:
        raise ConfigError(param, str(e).removeprefix("cache sizes: ")) from None


@dataclass(frozen=True)
class SimRequest:
    """What to simulate, each field declared once with its checks and words (an option record,
    :func:`gnnrec_lab.config.run.option`): :data:`SIM_CONSTRAINTS` and the Cache page's form are
    views of them. Hashable: equal requests share one result. The optimizers are the simulator's
    (config.OPTIMIZER_STATES, as `cache sim`): per-row state moves with the row."""

    dataset: str = option("synth-small", Text("a dataset name (choose a dataset)", strip=True),
        label=field_label("dataset"),
        help="dataset whose training interactions make the trace")
    trace: str = option("mf", Options(CACHE_TRACE_KINDS),
        label="Trace (what each batch reads)",
        help="one of {choices}: mf reads each BPR batch's own rows (a model without layers), sampled "
             "the rows of each batch's sampled k-hop sub-graph")
    batch_size: int = option(CACHE_TRACE_BATCH, Interval(integer, lo=1, hi=MAXIMA["batch_size"]),
        label="Batch size (interactions per batch)",
        help="training triples per batch of the trace (the CLI's default too)")
    fanouts: tuple = option((10, 10), Interval(integers, lo=1, hi=MAXIMA["fanouts"], max_len=MAXIMA["layers"]),
        label="Fan-outs per layer (sampled trace)",
        help="neighbours sampled per node at each layer, first hop first, comma-separated; sampled trace only")
    # chosen from the trace: fixed shares left every size below one batch on ml-100k (1,635 of its
    # 2,625 rows at batch 1024), where only "none" could be simulated
    cache_sizes: tuple = option((AUTO_CAPACITY,), Parsed(_cache_sizes, breaks=((), ("5%", "lots"), "5%")),
        label="Cache sizes (rows, % of rows, or auto)",
        help="comma-separated cache capacities, a row count (5000) or a share of rows (5%); auto: four sizes "
             "from one batch's distinct rows to 90% of the table, chosen from the trace")
    lookaheads: tuple = option((1, 10, 50, 200), Interval(integers, lo=1, hi=MAXIMA["lookahead"], max_len=1024),
        label="Oracle look-aheads (batches)",
        help="upcoming batches the oracle policy sees, comma-separated")
    policies: tuple = option(SIMULATED_CACHE_POLICIES, Subset(SIMULATED_CACHE_POLICIES),
        label="Replacement policies",
        help="the policies to simulate, one or more of {choices}")
    dim: int = option(64, Interval(integer, lo=1, hi=MAXIMA["dim"]),
        label=field_label("dim"),
        help="floats per embedding row: with the optimizer state, the bytes each row moves")
    optimizer: str = option("adam", Options(tuple(OPTIMIZER_STATES)),
        label="Optimizer (its state moves with each row)",
        help="whose per-row state moves with the row, one of {choices}")
    epochs: int = option(1, Interval(integer, lo=1, hi=MAXIMA["epochs"]),
        label="Epochs", help="passes over the training interactions the trace covers")
    seed: int = option(0, Interval(integer, lo=0, hi=MAX_SEED),
        label="Random seed", help="seed of the batch order, the negatives and the sampled neighbours")

    def checked(self, label: Optional[Callable[[str], str]] = None) -> "SimRequest":
        """This request if valid (:data:`SIM_CONSTRAINTS`); else ConfigError naming the field in the
        Cache page's words ("batch size"), or as ``label`` names it (the CLI's flags)."""
        check(SIM_CONSTRAINTS, {f: getattr(self, f) for f in SIM_CONSTRAINTS}, label=label or form_name)
        return self


def form_name(field_name: str) -> str:
    return field_name.replace("_", " ").replace("lookaheads", "look-aheads")


# What a simulation request accepts (gnnrec_lab.config.checks), a view of its fields' records; the form
# names the fields in its words (form_name), the CLI by its flags.
SIM_OPTIONS = {f.name: f.metadata["option"] for f in fields(SimRequest)}
SIM_CONSTRAINTS: dict[str, list] = {name: list(o.checks) for name, o in SIM_OPTIONS.items()}
