"""The tier model held against published measurements it was, and was not, fitted on.

``published_points.yaml`` (shipped with the package) lists measurements from the literature, one
source per point, each marked ``held_out`` (no profile in ``devices.yaml`` was fitted on it) or not
(an input of a profile). :func:`validate` asks the model for each point's quantity and returns the
published value, the **modeled** one and the relative error. Fitted points must come back within
:data:`FIT_TOLERANCE` (a check that the profile says what its source says); held-out points are the
model's real test, target :data:`HELD_OUT_TARGET`.

Also :func:`device_curves`: a profile's modeled bandwidth against access size, threads and
read/write mix, and its latencies (``gnnrec-lab devices show``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from gnnrec_lab.memory.profiles import STORES, DeviceProfile, load_profiles
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance

POINTS_FILE = Path(__file__).with_name("published_points.yaml")
FIT_TOLERANCE = 0.01      # fitted points: reproduced to 1%
HELD_OUT_TARGET = 0.15    # held-out points: within 15%
UNITS = {"read_GBps": "GB/s", "write_GBps": "GB/s", "random_read_GBps": "GB/s", "random_write_GBps": "GB/s",
         "mixed_GBps": "GB/s", "read_latency_ns": "ns", "write_latency_ns": "ns", "latency_over_ns": "ns",
         "latency_ratio": "x"}
_PARAMS = ("row_bytes", "threads", "store", "dimms", "write_share", "remote", "over")


def load_points(path: Optional[Path] = None) -> list[dict]:
    """The published points (validated: known quantity, a number, a source, held_out true/false)."""
    path = Path(path) if path else POINTS_FILE
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise UserError(f"{path}: cannot read published points ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML ({e})") from None
    pts = doc.get("points") if isinstance(doc, dict) else None
    if not isinstance(pts, list):
        raise UserError(f"{path}: expected a top-level 'points:' list")
    for i, p in enumerate(pts):
        where = f"{path}: point {i + 1}"
        if not isinstance(p, dict):
            raise UserError(f"{where}: must be a mapping")
        if p.get("quantity") not in UNITS:
            raise UserError(f"{where}: quantity must be one of {', '.join(UNITS)}, got {p.get('quantity')!r}")
        if not isinstance(p.get("published"), (int, float)) or not p["published"] > 0:
            raise UserError(f"{where}: 'published' must be a positive number, got {p.get('published')!r}")
        if not isinstance(p.get("source"), str) or not p["source"].strip():
            raise UserError(f"{where}: 'source' is required (one source per point)")
        if not isinstance(p.get("held_out"), bool):
            raise UserError(f"{where}: 'held_out' must be true or false")
        if p.get("store", "clwb") not in STORES:
            raise UserError(f"{where}: store must be one of {', '.join(STORES)}, got {p.get('store')!r}")
        unknown = set(p) - {"device", "quantity", "published", "held_out", "source", *_PARAMS}
        if unknown:
            raise UserError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    return pts


def _latency(p: DeviceProfile) -> float:
    return p.miss.read_latency_ns if p.is_memory_mode else p.read_latency_ns


def modeled_value(point: dict, profiles: dict) -> float:
    """What the model gives for ``point``'s quantity on its device (modeled; units as UNITS)."""
    name = point.get("device")
    if name not in profiles:
        raise UserError(f"published point: unknown device {name!r}")
    p = profiles[name]
    q = point["quantity"]
    store = point.get("store", "clwb")
    threads = point.get("threads")
    # interleaving: bandwidth scales with the modules behind it (the rule the PMem 200 profile uses)
    share = float(point["dimms"]) / float(p.dimms) if point.get("dimms") and p.dimms else 1.0
    if q == "read_GBps":
        return p.read_bw_GBps * share
    if q == "write_GBps":
        return share / p.stream_write_ns_per_byte(store=store, threads=threads)
    if q in ("random_read_GBps", "random_write_GBps"):
        w = int(point["row_bytes"])
        return w / p.random_ns_per_row(w, write=q == "random_write_GBps", threads=threads, store=store)
    if q == "mixed_GBps":
        bw = p.mixed_bw_GBps(float(point["write_share"]), remote=bool(point.get("remote")))
        if bw is None:
            raise UserError(f"published point: device {name!r} has no measured mixed series")
        return bw
    if q == "read_latency_ns":
        return _latency(p)
    if q == "write_latency_ns":
        return p.miss.write_latency_ns if p.is_memory_mode else p.write_latency_ns
    over = profiles[point.get("over") or p.baseline]
    if q == "latency_over_ns":
        return _latency(p) - _latency(over)
    return _latency(p) / _latency(over)   # latency_ratio


def validate(profiles: Optional[dict] = None, points: Optional[list] = None) -> list[dict]:
    """Every published point next to the model: a list of dicts with ``device``, ``quantity``,
    ``params``, ``unit``, ``published`` (published), ``modeled`` (modeled), ``error`` (relative,
    modeled / published - 1), ``held_out``, ``within`` (the tolerance it is held to), ``ok``,
    ``source`` and ``kind`` (MODELED)."""
    profiles = profiles if profiles is not None else load_profiles()
    points = points if points is not None else load_points()
    rows = []
    for pt in points:
        mod = modeled_value(pt, profiles)
        err = mod / float(pt["published"]) - 1.0
        tol = HELD_OUT_TARGET if pt["held_out"] else FIT_TOLERANCE
        rows.append({"device": pt["device"], "quantity": pt["quantity"],
                     "params": {k: pt[k] for k in _PARAMS if k in pt}, "unit": UNITS[pt["quantity"]],
                     "published": float(pt["published"]), "modeled": float(mod), "error": float(err),
                     "held_out": bool(pt["held_out"]), "within": tol, "ok": bool(abs(err) <= tol),
                     "source": pt["source"], "kind": Provenance.MODELED, "published_kind": "published"})
    return rows


def format_params(params: dict) -> str:
    """``row_bytes=128 store=clwb`` style, for tables."""
    out = []
    for k, v in params.items():
        if k == "write_share":
            v = f"{v:.2f}"
        out.append(f"{k}={v}")
    return " ".join(out)


# ----------------------------------------------------------------------
SIZES = (64, 128, 256, 512, 1024, 4096)
THREADS = (1, 2, 4, 8, 16, 24, 32)
SHARES = (0.0, 0.25, 1 / 3, 0.5, 0.75, 1.0)


def device_curves(p: DeviceProfile, mlp: Optional[float] = None) -> dict:
    """Modeled curves of profile ``p`` (GB/s unless named ns): ``access_size`` rows (random read,
    store+clwb write and ntstore write where published, at the best thread count), ``threads``
    rows (sequential read and write, random 64 B and 256 B reads with the latency floor of ``mlp``
    misses in flight per thread -- none without a host calibration), ``mixed`` rows (the measured
    mixed series, local and remote, with the interference factor) and ``latency_ns``."""
    q = p.miss if p.is_memory_mode else p     # Memory Mode: the miss path (hits are its DRAM)
    size = []
    for w in SIZES:
        row = {"bytes": w, "random_read_GBps": w / q.random_ns_per_row(w),
               "random_write_GBps": w / q.random_ns_per_row(w, write=True)}
        if q.random_write_ntstore_GBps:
            row["random_write_ntstore_GBps"] = w / q.random_ns_per_row(w, write=True, store="ntstore")
        size.append(row)
    threads = []
    for t in THREADS:
        threads.append({"threads": t, "read_GBps": 1 / q.stream_ns_per_byte(threads=t),
                        "write_GBps": 1 / q.stream_ns_per_byte(write=True, threads=t),
                        "random_read_64B_GBps": 64 / q.random_ns_per_row(64, threads=t, mlp=mlp),
                        "random_read_256B_GBps": 256 / q.random_ns_per_row(256, threads=t, mlp=mlp)})
    mixed = []
    if q.mixed:
        for x in SHARES:
            row = {"write_share": x, "GBps": q.mixed_bw_GBps(x), "interference": q.mix_factor(x)}
            if q.remote_socket_factor:
                row["remote_GBps"] = q.mixed_bw_GBps(x, remote=True)
                row["remote_interference"] = q.mix_factor(x, remote=True)
            mixed.append(row)
    out = {"device": p.name, "kind": Provenance.MODELED, "platform": p.platform, "baseline": p.baseline, "conf": p.conf,
           "sources": list(p.sources), "misses_in_flight_per_thread": mlp,
           "latency_ns": {"read": q.read_latency_ns, "write": q.write_latency_ns},
           "access_size": size, "threads": threads, "mixed": mixed,
           "mixed_threads": q.mixed.get("threads") if q.mixed else None}
    if p.is_memory_mode:
        out["curves_of"] = q.name
        out["dram_cache_bytes"] = p.dram_cache_bytes
    return out


# ----------------------------------------------------------------------
# Regimes: what the held-out points say about each kind of access a run's modeled traffic makes
# ----------------------------------------------------------------------
#: Random rows up to this width are "small rows", wider ones "large rows" (one Optane XPLine is 256 B:
#: the fitted 256 B points leave the narrower rows to be interpolated, the held-out points test that).
SMALL_ROW_BYTES = 128
SEQUENTIAL = "sequential"
SMALL_ROWS = f"random rows <= {SMALL_ROW_BYTES} B"
LARGE_ROWS = f"random rows > {SMALL_ROW_BYTES} B"
ALL_SIZES = "all access sizes"
#: The band of a regime no held-out point tests: the validation target, not an error seen.
UNVALIDATED_BAND = HELD_OUT_TARGET
# quantities whose error is in a bandwidth (a time goes as 1 + error) rather than a latency
_BANDWIDTH = ("read_GBps", "write_GBps", "random_read_GBps", "random_write_GBps", "mixed_GBps")


def access_of(component: str, row_bytes: int) -> str:
    """The access-size part of a regime for a tier-model component (``stream_*`` / ``random_*``)."""
    if component.startswith("stream"):
        return SEQUENTIAL
    return SMALL_ROWS if (row_bytes or 64) <= SMALL_ROW_BYTES else LARGE_ROWS


def regime_key(device: str, remote: bool, op: str, access: str) -> str:
    """How a regime is named everywhere: ``optane_pmem100_appdirect_6x: remote socket, mixed
    read+write, all access sizes``."""
    return f"{device}: {'remote' if remote else 'local'} socket, {op}, {access}"


def regimes_of_point(point: dict) -> list[str]:
    """The regimes (:func:`regime_key`) a published point tests: a sequential bandwidth its op's
    sequential regime, a random-row one its op's row-size regime, a mix the device's mixed regime, a
    latency the random-row regimes (the rows' latency floor and cost follow the latency)."""
    dev, q, remote = point["device"], point["quantity"], bool(point.get("remote"))
    if q in ("read_GBps", "write_GBps"):
        return [regime_key(dev, remote, q.split("_")[0], SEQUENTIAL)]
    if q in ("random_read_GBps", "random_write_GBps"):
        op = "read" if q == "random_read_GBps" else "write"
        return [regime_key(dev, remote, op, access_of("random", int(point.get("row_bytes") or 64)))]
    if q == "mixed_GBps":
        return [regime_key(dev, remote, "mixed read+write", ALL_SIZES)]
    op = "write" if q == "write_latency_ns" else "read"
    return [regime_key(dev, remote, op, SMALL_ROWS), regime_key(dev, remote, op, LARGE_ROWS)]


def time_error(row: dict) -> float:
    """A validated point's error as the error of a modeled **time** (true / modeled - 1): a
    bandwidth modeled ``e`` too high makes the time ``e`` too short; a latency ``e`` too high, the
    time ``1/(1+e) - 1``."""
    e = float(row["error"])
    return e if row["quantity"] in _BANDWIDTH else 1.0 / (1.0 + e) - 1.0


def regime_table(rows: Optional[list] = None) -> dict:
    """Per regime the held-out points of :func:`validate` (``rows``; default: the shipped profiles
    and points): ``{regime: {"regime", "device", "points" (the held-out rows), "error" (the largest
    time error seen, :func:`time_error`, as a positive fraction), "ok" (every point within
    :data:`HELD_OUT_TARGET`), "sources"}}``. Fitted points are not in it: they are the model's inputs."""
    rows = rows if rows is not None else validate()
    out: dict = {}
    for r in rows:
        if not r["held_out"]:
            continue
        pt = dict(r["params"], device=r["device"], quantity=r["quantity"])
        for key in regimes_of_point(pt):
            reg = out.setdefault(key, {"regime": key, "device": r["device"], "points": [], "error": 0.0,
                                       "ok": True, "sources": []})
            reg["points"].append(r)
            reg["error"] = max(reg["error"], abs(time_error(r)))
            reg["ok"] = reg["ok"] and r["ok"]
            if r["source"] not in reg["sources"]:
                reg["sources"].append(r["source"])
    return out


_REGIMES: dict = {}


def regime_errors() -> dict:
    """:func:`regime_table` of the shipped profiles and points, computed once per process."""
    if not _REGIMES:
        _REGIMES.update(regime_table())
    return _REGIMES
