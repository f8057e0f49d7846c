"""Synthetic user-item interactions with power-law skew and planted communities.

The model, chosen so that a graph recommender has something real to learn:

* **Users and items belong to communities.** Items are split into ``communities``
  equal groups at random; each user joins one community uniformly at random.
* **Item popularity is Zipf-like:** item of popularity rank ``r`` (a random
  permutation of items) has weight ``(r + 1) ** -item_exp``.
* **User activity is Zipf-like:** user of activity rank ``r`` wants
  ``min_degree + s * (r + 1) ** -user_exp`` items, capped at ``max_degree``, with
  ``s`` chosen so the degrees sum exactly to ``interactions``.
* **A user draws a fraction ``locality`` of its items from its community** (by
  popularity within the community) and the rest from all items (by global
  popularity). Very active users spill over: the community part never asks for more
  than 30% of the community's items, because beyond that the user could not be told
  apart from a global one anyway and sampling without replacement would crawl.
* Items of one user are distinct: draws are taken in order and the first
  ``degree`` distinct items are kept (successive sampling without replacement).

Everything is drawn from ``numpy.random.default_rng([seed, stream, chunk])``, so the
output depends only on the parameters. Users are generated in chunks of about
``CHUNK_DRAWS`` draws, so memory stays bounded (tens of MB of scratch) whatever the
size; the output is streamed, sorted by user then item, to a callback.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Callable, Optional

import numpy as np

from gnnrec_lab.util.errors import DataError

CHUNK_DRAWS = 4_000_000
# The community part of one user never asks for more than this share of the community's items.
COMMUNITY_SATURATION = 0.3
MAX_ROUNDS = 12


@dataclass(frozen=True)
class SynthParams:
    """Parameters of one synthetic dataset. Counts are exact for users and items;
    interactions are exact unless a user cannot find enough distinct items (reported
    in the dataset's meta as ``shortfall``)."""

    users: int
    items: int
    interactions: int
    seed: int = 2020
    user_exp: float = 0.6        # activity skew: 0 = everyone equally active
    item_exp: float = 1.0        # popularity skew: 1 = classic Zipf
    communities: int = 0         # 0 = about one community per 10 x mean user degree items
    locality: float = 0.8        # share of a user's items drawn from its community
    min_degree: int = 0          # 0 = min(5, interactions // users)
    max_degree: int = 0          # 0 = min(items // 2, 50 x mean degree)

    # --------------------------------------------------------------
    def resolved(self) -> "SynthParams":
        """Validate and replace the 0 ("automatic") defaults by the values used."""
        for f in ("users", "items", "interactions"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise DataError(f"synthetic {f} must be a positive integer, got {v!r}")
        for f in ("seed", "communities", "min_degree", "max_degree"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise DataError(f"synthetic {f} must be a non-negative integer, got {v!r}")
        for f in ("user_exp", "item_exp"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0 <= v <= 4):
                raise DataError(f"synthetic {f} must be a number in [0, 4], got {v!r}")
        if not isinstance(self.locality, (int, float)) or not (0 <= self.locality <= 1):
            raise DataError(f"synthetic locality must be in [0, 1], got {self.locality!r}")
        U, I, N = self.users, self.items, self.interactions
        for f, v in (("users", U), ("items", I), ("interactions", N)):
            if v > MAX_SYNTH[f]:
                raise DataError(f"dataset: synthetic {f} must be at most {MAX_SYNTH[f]:,}, got {v:,}")
        if I < 2:
            raise DataError(f"synthetic items must be at least 2, got {I}")
        mean = N / U
        if N < U:
            raise DataError(f"synthetic interactions ({N}) must be at least users ({U}): every user needs one")
        max_degree = self.max_degree or max(1, min(I // 2, int(50 * mean)))
        max_degree = min(max_degree, I)
        if N > U * max_degree:
            raise DataError(f"synthetic interactions ({N:,}) exceed users x max_degree "
                            f"({U:,} x {max_degree:,}); lower interactions or raise items/max_degree")
        min_degree = self.min_degree or max(1, min(5, N // U))
        if min_degree > max_degree or U * min_degree > N:
            raise DataError(f"synthetic min_degree ({min_degree}) is impossible: users x min_degree "
                            f"must be <= interactions and min_degree <= max_degree ({max_degree})")
        communities = self.communities or int(min(1000, max(2, round(I / (10 * mean)))))
        communities = min(communities, I)
        return SynthParams(U, I, N, self.seed, float(self.user_exp), float(self.item_exp),
                           communities, float(self.locality), min_degree, max_degree)

    def to_dict(self) -> dict:
        return asdict(self)


# Upper bounds that refuse a typo (``users=1e12``) before anything is generated: ids are int32,
# and 2**36 interactions would already be a 1 TiB file.
MAX_SYNTH = {"users": 2**31 - 1, "items": 2**31 - 1, "interactions": 2**36}
PARAM_NAMES = tuple(f.name for f in fields(SynthParams))
_INT_PARAMS = {"users", "items", "interactions", "seed", "communities", "min_degree", "max_degree"}


def parse_synth_name(name: str) -> SynthParams:
    """Parse ``synth:users=1000,items=2000,interactions=50000[,seed=3,...]``.

    Numbers may use ``_`` separators and ``k``/``m`` suffixes (``users=5m``).
    """
    body = name.split(":", 1)[1] if ":" in name else ""
    if not body.strip():
        raise DataError(f"dataset {name!r}: give parameters, e.g. synth:users=1000,items=2000,interactions=50000")
    values: dict = {}
    for part in body.split(","):
        if "=" not in part:
            raise DataError(f"dataset {name!r}: expected key=value, got {part!r}; keys: {', '.join(PARAM_NAMES)}")
        key, raw = (s.strip() for s in part.split("=", 1))
        if key not in PARAM_NAMES:
            raise DataError(f"dataset {name!r}: unknown key {key!r}; allowed: {', '.join(PARAM_NAMES)}")
        if key in values:
            raise DataError(f"dataset {name!r}: key {key!r} given twice")
        values[key] = _parse_number(name, key, raw, integer=key in _INT_PARAMS)
    missing = [k for k in ("users", "items", "interactions") if k not in values]
    if missing:
        raise DataError(f"dataset {name!r}: missing {', '.join(missing)}")
    return SynthParams(**values)


def _parse_number(name, key, raw, integer):
    s = raw.lower().replace("_", "")
    mult = 1
    if s and s[-1] in "km":
        mult = 1_000 if s[-1] == "k" else 1_000_000
        s = s[:-1]
    try:
        v = float(s) * mult
    except ValueError:
        raise DataError(f"dataset {name!r}: {key}={raw!r} is not a number") from None
    if integer:
        if v != int(v):
            raise DataError(f"dataset {name!r}: {key}={raw!r} must be an integer")
        return int(v)
    return v


def canonical_name(p: SynthParams) -> str:
    """The name that identifies these parameters: defaults left out, fixed key order."""
    default = SynthParams(1, 1, 1)
    parts = []
    for f in PARAM_NAMES:
        v = getattr(p, f)
        if f in ("users", "items", "interactions") or v != getattr(default, f):
            parts.append(f"{f}={v:g}" if isinstance(v, float) else f"{f}={v}")
    return "synth:" + ",".join(parts)


# ----------------------------------------------------------------------
def user_degrees(p: SynthParams) -> np.ndarray:
    """Wanted degree of every user (int64, length ``users``, sums to ``interactions``).

    Water-filling: find the scale ``s`` so that ``sum(clip(min + s * w, min, max)) = N``
    (bisection), then floor and hand the remaining units to the largest fractions.
    """
    U, N, lo, hi = p.users, p.interactions, p.min_degree, p.max_degree
    rng = np.random.default_rng([p.seed, 1])
    rank = rng.permutation(U).astype(np.float64)
    w = (rank + 1.0) ** -p.user_exp
    del rank
    extra = N - lo * U
    if extra == 0 or lo == hi:
        return np.full(U, lo, dtype=np.int64)
    s_lo, s_hi = 0.0, extra / w.min() + 1.0
    tmp = np.empty_like(w)
    for _ in range(100):
        s = 0.5 * (s_lo + s_hi)
        np.multiply(w, s, out=tmp)
        np.add(tmp, lo, out=tmp)
        np.minimum(tmp, hi, out=tmp)
        if tmp.sum() < N:
            s_lo = s
        else:
            s_hi = s
        if s_hi - s_lo <= 1e-12 * s_hi:
            break
    np.multiply(w, s_hi, out=tmp)
    np.add(tmp, lo, out=tmp)
    np.minimum(tmp, hi, out=tmp)
    deg = np.floor(tmp).astype(np.int64)
    short = N - int(deg.sum())
    if short > 0:
        frac = tmp - deg
        frac[deg >= hi] = -1.0
        top = np.argpartition(-frac, short - 1)[:short]
        deg[top] += 1
    elif short < 0:  # float rounding overshoot: take from the largest fractions above min
        frac = tmp - deg
        frac[deg <= lo] = 2.0
        bottom = np.argpartition(frac, -short - 1)[:-short]
        deg[bottom] -= 1
    return deg


class _Model:
    """Item communities and popularity, shared by every chunk."""

    def __init__(self, p: SynthParams):
        I, C = p.items, p.communities
        rng = np.random.default_rng([p.seed, 2])
        # item_order lists items community by community; community c owns positions [start[c], start[c+1])
        self.item_order = rng.permutation(I).astype(np.int32)
        self.start = (np.arange(C + 1, dtype=np.int64) * I) // C
        self.item_community = np.empty(I, dtype=np.int32)
        self.item_community[self.item_order] = np.repeat(np.arange(C, dtype=np.int32), np.diff(self.start))
        pop_rank = rng.permutation(I).astype(np.float64)
        weight = (pop_rank + 1.0) ** -p.item_exp               # by item id
        self.cum = np.cumsum(weight[self.item_order])           # by community position
        self.cum_start = np.concatenate([[0.0], self.cum])[self.start]   # C + 1 boundaries
        self.total = float(self.cum[-1])
        self.user_community = np.random.default_rng([p.seed, 3]).integers(0, C, p.users, dtype=np.int32)
        self.community_size = np.diff(self.start)

    def draw(self, rng, users: np.ndarray, local_share: np.ndarray) -> np.ndarray:
        """One item per entry of ``users`` (int32): from the user's community with
        probability ``local_share[entry]``, else from all items; by popularity."""
        c = self.user_community[users]
        local = rng.random(users.shape[0]) < local_share
        lo = np.where(local, self.cum_start[c], 0.0)
        hi = np.where(local, self.cum_start[c + 1], self.total)
        x = lo + rng.random(users.shape[0]) * (hi - lo)
        pos = np.searchsorted(self.cum, x, side="right")
        np.minimum(pos, self.cum.shape[0] - 1, out=pos)
        return self.item_order[pos]


def generate(p: SynthParams, emit: Callable[[np.ndarray], None],
             progress: Optional[Callable[[int], None]] = None) -> dict:
    """Generate the interactions of ``p`` (resolved) and pass them to ``emit`` in chunks.

    Each chunk is an ``(n, 2)`` int32 array ``[user, item]``; over all chunks rows are
    sorted by user then item and contain no duplicate. ``progress(n)`` is called with
    the number of interactions produced by each chunk. Returns statistics:
    ``{"interactions", "shortfall", "rounds_max", "seconds"?}``.
    """
    import time
    t0 = time.perf_counter()
    deg = user_degrees(p)
    model = _Model(p)
    # Community part limited to a share of the community: heavy users spill to global draws.
    cs = model.community_size[model.user_community].astype(np.float64)
    with np.errstate(divide="ignore"):
        share = np.minimum(p.locality, COMMUNITY_SATURATION * cs / np.maximum(deg, 1)).astype(np.float64)
    bounds = np.searchsorted(np.cumsum(deg), np.arange(CHUNK_DRAWS, p.interactions, CHUNK_DRAWS), side="left")
    bounds = np.unique(np.concatenate([[0], bounds + 1, [p.users]]))
    bounds = bounds[bounds <= p.users]
    total, shortfall, rounds_max = 0, 0, 0
    for ci in range(len(bounds) - 1):
        a, b = int(bounds[ci]), int(bounds[ci + 1])
        if a >= b:
            continue
        rng = np.random.default_rng([p.seed, 4, ci])
        rows, short, rounds = _chunk(rng, model, a, deg[a:b], share[a:b], p.items)
        emit(rows)
        total += rows.shape[0]
        shortfall += short
        rounds_max = max(rounds_max, rounds)
        if progress is not None:
            progress(rows.shape[0])
    return {"interactions": total, "shortfall": shortfall, "rounds_max": rounds_max,
            "seconds": time.perf_counter() - t0}


def _chunk(rng, model: _Model, first_user: int, deg: np.ndarray, share: np.ndarray, n_items: int):
    """Distinct items for users ``first_user .. first_user + len(deg) - 1``.

    Rounds of oversampled draws for the users still short of their degree; all draws
    of a user are kept in draw order, and the first ``deg`` distinct ones win.
    """
    n = deg.shape[0]
    need = deg.copy()
    kept_user = []    # local user id of each kept (distinct) pair, per round
    kept_item = []
    # pool of draws so far for users still short: (local user, item), in draw order
    pool_u = np.empty(0, dtype=np.int64)
    pool_i = np.empty(0, dtype=np.int32)
    active = np.arange(n, dtype=np.int64)
    factor = 1.2
    rounds = 0
    while active.size and rounds < MAX_ROUNDS:
        rounds += 1
        k = np.ceil(need[active] * factor).astype(np.int64) + 2
        du = np.repeat(active, k)
        di = model.draw(rng, du + first_user, share[du])
        # draws of a user are appended after its earlier ones: the stable sort below keeps draw order
        pu = np.concatenate([pool_u, du])
        pi = np.concatenate([pool_i, di])
        key = pu * n_items + pi
        _, first = np.unique(key, return_index=True)       # first draw of each distinct pair
        first.sort()                                        # back to draw order
        fu = pu[first]
        order = np.argsort(fu, kind="stable")               # group by user, draw order inside
        first = first[order]
        fu = fu[order]
        starts = np.searchsorted(fu, active)
        counts = np.diff(np.append(starts, fu.shape[0]))
        rank = np.arange(fu.shape[0]) - np.repeat(starts, counts)
        want = deg[fu]
        done_user = counts >= deg[active]
        done_row = np.repeat(done_user, counts)
        take = done_row & (rank < want)
        kept_user.append(fu[take])
        kept_item.append(pi[first[take]])
        # users still short carry their distinct draws into the next round
        carry = ~done_row
        pool_u, pool_i = fu[carry], pi[first[carry]]
        need_next = deg[active] - counts
        active = active[~done_user]
        need = np.zeros_like(deg)
        need[active] = need_next[~done_user]
        factor = min(factor * 2.0, 64.0)
    shortfall = 0
    if active.size:  # give up on the last few: keep what they have
        kept_user.append(pool_u)
        kept_item.append(pool_i)
        shortfall = int(need[active].sum())
    u = np.concatenate(kept_user)
    i = np.concatenate(kept_item).astype(np.int64)
    order = np.argsort(u * n_items + i)
    rows = np.empty((order.shape[0], 2), dtype=np.int32)
    rows[:, 0] = u[order] + first_user
    rows[:, 1] = i[order]
    return rows, shortfall, rounds


# ----------------------------------------------------------------------
PRESETS: dict[str, dict] = {
    # name: parameters (plus a one-line note shown by `data list`)
    "synth-tiny": dict(users=300, items=400, interactions=6_000, communities=4),
    "synth-small": dict(users=5_000, items=5_000, interactions=200_000),
    "synth-gowalla": dict(users=29_858, items=40_981, interactions=1_027_370),
    "synth-amazon-book": dict(users=52_643, items=91_599, interactions=2_984_108),
    "synth-ml10m": dict(users=69_878, items=10_677, interactions=10_000_054),
    "synth-xl": dict(users=5_000_000, items=1_000_000, interactions=100_000_000),
}


def preset_params(name: str) -> SynthParams:
    return SynthParams(**PRESETS[name])


def community_of(p: SynthParams):
    """(user_community, item_community) int32 arrays of a resolved parameter set: the planted structure."""
    m = _Model(p)
    return m.user_community, m.item_community
