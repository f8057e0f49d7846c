"""Device profiles: what a memory tier can do, in published numbers.

A :class:`DeviceProfile` holds bandwidths (GB/s, 1 GB/s = 1 byte/ns), latencies
(ns) and the media's access granularity (bytes) of one tier, and answers the
three costs the tier model needs, all in nanoseconds:

* :meth:`DeviceProfile.stream_ns_per_byte` -- sequential reads or writes,
* :meth:`DeviceProfile.random_ns_per_row` -- one randomly placed row of a given width,
* the write-bandwidth drop of Optane when more threads write than it can absorb.

Profiles come from ``devices.yaml`` shipped with the package, from files named
in ``GNNREC_LAB_DEVICES`` (``os.pathsep``-separated) and from ``extra_paths``;
a later file may add profiles or replace one of the same name. The measured
host (``gnnrec-lab calibrate``) becomes the profile ``host`` through
:func:`host_device`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import yaml

from ..errors import UserError

KINDS = ("dram", "pmem", "pmem_memory_mode", "cxl", "dram_remote", "host")
ENV_VAR = "GNNREC_LAB_DEVICES"
# Outstanding cache-line misses one core keeps in flight (line-fill buffers on Skylake/Cascade Lake
# class cores). With few threads a random-row kernel is bound by latency / (threads * MLP) rather
# than by bandwidth.
MISSES_IN_FLIGHT_PER_THREAD = 10
_SHIPPED = Path(__file__).with_name("devices.yaml")


@dataclass
class DeviceProfile:
    """One memory tier. Bandwidths in GB/s (= bytes/ns), latencies in ns, sizes in bytes."""

    name: str
    kind: str
    read_bw_GBps: float = 0.0
    write_bw_GBps: float = 0.0
    read_latency_ns: float = 0.0
    write_latency_ns: float = 0.0
    access_granularity_bytes: int = 64
    random_read_GBps: dict = field(default_factory=dict)    # row width (bytes) -> GB/s
    random_write_GBps: dict = field(default_factory=dict)
    write_threads_saturate: Optional[int] = None
    write_bw_many_threads_GBps: Optional[float] = None
    many_threads: Optional[int] = None
    remote_socket_factor: dict = field(default_factory=dict)  # {"read": f, "write": f}
    baseline: Optional[str] = None
    hit_profile: Optional["DeviceProfile"] = None             # memory mode: the DRAM cache
    miss: Optional["DeviceProfile"] = None                    # memory mode: the path to Optane
    dram_cache_bytes: Optional[int] = None
    gemm_GFLOPs: Optional[float] = None                       # host only (measured)
    threads: Optional[int] = None                             # host only: threads it was measured with
    measured: bool = False        # True only for the calibrated host
    conf: str = "low"
    sources: list = field(default_factory=list)
    notes: str = ""
    origin: str = ""              # file the profile came from

    # ------------------------------------------------------------------
    @property
    def is_memory_mode(self) -> bool:
        return self.kind == "pmem_memory_mode"

    def _remote(self, direction: str, remote: bool) -> float:
        return float(self.remote_socket_factor.get(direction, 1.0)) if remote else 1.0

    def write_bw_at(self, threads: Optional[int]) -> float:
        """Sequential write bandwidth (GB/s) with ``threads`` writers.

        Optane's write bandwidth peaks at ``write_threads_saturate`` threads and falls
        linearly to ``write_bw_many_threads_GBps`` at ``many_threads`` (FAST'20); other
        profiles are taken at their best thread count.
        """
        bw = self.write_bw_GBps
        sat, many, low = self.write_threads_saturate, self.many_threads, self.write_bw_many_threads_GBps
        if threads and sat and many and low and threads > sat:
            frac = min(1.0, (threads - sat) / max(1, many - sat))
            bw = bw + frac * (low - bw)
        return bw

    def stream_ns_per_byte(self, write: bool = False, threads: Optional[int] = None,
                           remote: bool = False) -> float:
        """Nanoseconds per byte of sequential traffic (reads, or writes with ``write``)."""
        if write:
            return 1.0 / (self.write_bw_at(threads) * self._remote("write", remote))
        return 1.0 / (self.read_bw_GBps * self._remote("read", remote))

    def _anchors(self, write: bool) -> list[tuple[int, float]]:
        """(row width, ns per row) points measured or derived for random rows."""
        g = int(self.access_granularity_bytes)
        pts = {int(w): float(bw) for w, bw in (self.random_write_GBps if write else self.random_read_GBps).items()}
        if g not in pts:
            if write:
                # a granule-sized random write is bounded by both the write bandwidth and what random
                # reads of that size reach (min keeps the model monotone in every profile number)
                rd = dict(self._anchors(False))
                pts[g] = min(self.write_bw_GBps, g / rd[g])
            else:
                # a granule-sized random read is assumed to reach sequential bandwidth
                pts[g] = self.read_bw_GBps
        if g > 64 and 64 not in pts:
            # a 64 B row still moves a whole granule: same time per row as a full granule
            pts[64] = pts[g] * 64 / g
        return sorted((w, w / bw) for w, bw in pts.items())

    def random_ns_per_row(self, row_bytes: int, write: bool = False, threads: Optional[int] = None,
                          remote: bool = False) -> float:
        """Nanoseconds per randomly placed row of ``row_bytes`` bytes (throughput, all threads).

        Piecewise-linear in width between the profile's measured points; narrower than the
        smallest point costs that point (the media moves at least that much); wider than the
        largest costs whole granules (``row_bytes`` rounded up to ``access_granularity_bytes``).
        With ``threads`` given (and a profile that is not the measured host), the row also costs
        at least ``latency / (threads * MISSES_IN_FLIGHT_PER_THREAD)``.
        """
        w = max(1, int(row_bytes))
        pts = self._anchors(write)
        if w <= pts[0][0]:
            t = pts[0][1]
        elif w >= pts[-1][0]:
            g = int(self.access_granularity_bytes)
            t = pts[-1][1] * (math.ceil(w / g) * g) / pts[-1][0]
        else:
            for (w0, t0), (w1, t1) in zip(pts, pts[1:]):
                if w0 <= w <= w1:
                    t = t0 + (t1 - t0) * (w - w0) / (w1 - w0)
                    break
        if write:
            t *= self.write_bw_GBps / self.write_bw_at(threads)
        t /= self._remote("write" if write else "read", remote)
        if threads and not self.measured:
            lat = self.write_latency_ns if write else self.read_latency_ns
            t = max(t, lat / (threads * MISSES_IN_FLIGHT_PER_THREAD))
        return t

    def summary(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "kind", "read_bw_GBps", "write_bw_GBps", "read_latency_ns",
                                           "write_latency_ns", "access_granularity_bytes", "conf")}
        d["measured"] = self.measured
        return d


# ----------------------------------------------------------------------
class _LineLoader(yaml.SafeLoader):
    """A safe YAML loader that remembers the line of every mapping (key ``__line__``)."""


def _construct_mapping(loader, node, deep=False):
    m = yaml.SafeLoader.construct_mapping(loader, node, deep=True)
    m["__line__"] = node.start_mark.line + 1
    return m


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

_NUMBERS = ("read_bw_GBps", "write_bw_GBps", "read_latency_ns", "write_latency_ns")
_OPTIONAL_NUMBERS = ("access_granularity_bytes", "write_threads_saturate", "write_bw_many_threads_GBps",
                     "many_threads", "dram_cache_bytes", "gemm_GFLOPs", "threads")
_KNOWN = set(_NUMBERS) | set(_OPTIONAL_NUMBERS) | {
    "name", "kind", "random_read_GBps", "random_write_GBps", "remote_socket_factor", "baseline",
    "hit_profile", "miss", "conf", "sources", "notes", "measured", "__line__"}


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)


def _parse_profile(d, where: str) -> DeviceProfile:
    """Validate one mapping into a DeviceProfile; errors name ``where`` (file:line) and the field."""
    if not isinstance(d, dict):
        raise UserError(f"{where}: a device profile must be a mapping, got {type(d).__name__}")
    line = d.get("__line__")
    loc = f"{where}:{line}" if line else where
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise UserError(f"{loc}: field 'name' is required (a non-empty string)")
    loc = f"{loc} ({name})"
    unknown = sorted(set(d) - _KNOWN)
    if unknown:
        raise UserError(f"{loc}: unknown field {unknown[0]!r}")
    kind = d.get("kind")
    if kind not in KINDS:
        raise UserError(f"{loc}: field 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    kw = {"name": name, "kind": kind}
    required = () if kind == "pmem_memory_mode" else _NUMBERS
    for f in _NUMBERS + _OPTIONAL_NUMBERS:
        if f in d:
            if not _positive(d[f]):
                raise UserError(f"{loc}: field {f!r} must be a positive number, got {d[f]!r}")
            kw[f] = d[f]
        elif f in required:
            raise UserError(f"{loc}: field {f!r} is required for kind {kind!r}")
    for f in ("random_read_GBps", "random_write_GBps", "remote_socket_factor"):
        if f in d:
            m = {k: v for k, v in (d[f] or {}).items() if k != "__line__"} if isinstance(d[f], dict) else None
            if m is None or not all(_positive(v) for v in m.values()):
                raise UserError(f"{loc}: field {f!r} must map keys to positive numbers, got {d[f]!r}")
            if f != "remote_socket_factor":
                if not all(isinstance(k, int) and k > 0 for k in m):
                    raise UserError(f"{loc}: field {f!r} keys must be row widths in bytes, got {list(m)!r}")
            elif not set(m) <= {"read", "write", "mixed_1to1"} or any(v > 1 for v in m.values()):
                raise UserError(f"{loc}: field 'remote_socket_factor' takes read/write fractions in (0, 1]")
            kw[f] = m
    for f in ("baseline", "conf", "notes"):
        if f in d:
            kw[f] = str(d[f])
    if "sources" in d:
        kw["sources"] = list(d["sources"]) if isinstance(d["sources"], list) else [str(d["sources"])]
    if kind == "pmem_memory_mode":
        if not isinstance(d.get("hit_profile"), str):
            raise UserError(f"{loc}: field 'hit_profile' (name of the DRAM-cache profile) is required for memory mode")
        if "miss" not in d:
            raise UserError(f"{loc}: field 'miss' (a nested profile for the Optane path) is required for memory mode")
        kw["miss"] = _parse_profile(d["miss"], where)
        kw["hit_profile"] = d["hit_profile"]     # resolved to a profile after all files are read
    return DeviceProfile(**kw, origin=where)


def _read_file(path: Path) -> list[DeviceProfile]:
    try:
        text = path.read_text()
    except OSError as e:
        raise UserError(f"{path}: cannot read device profiles ({e.strerror})") from None
    try:
        doc = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{at}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("device_profiles"), list):
        raise UserError(f"{path}: expected a top-level 'device_profiles:' list")
    return [_parse_profile(p, str(path)) for p in doc["device_profiles"]]


def host_device(host: dict) -> DeviceProfile:
    """The calibrated host (``gnnrec_lab.calibrate.host_profile()``) as a measured profile.

    Streams run at the host's triad bandwidth for reads and writes; random rows at its
    measured gather bandwidth for 64 B and 256 B rows.
    """
    need = ("triad_GBps", "gather64_GBps", "gather256_GBps", "latency_ns")
    for k in need:
        if not _positive(host.get(k)):
            raise UserError(f"host profile: field {k!r} must be a positive number, got {host.get(k)!r} "
                            f"(run `gnnrec-lab calibrate`)")
    triad = float(host["triad_GBps"])
    return DeviceProfile(
        name="host", kind="host", read_bw_GBps=triad, write_bw_GBps=triad,
        read_latency_ns=float(host["latency_ns"]), write_latency_ns=float(host["latency_ns"]),
        access_granularity_bytes=64,
        random_read_GBps={64: float(host["gather64_GBps"]), 256: float(host["gather256_GBps"])},
        baseline="host", gemm_GFLOPs=float(host["gemm_GFLOPs"]) if _positive(host.get("gemm_GFLOPs")) else None,
        threads=int(host["threads"]) if _positive(host.get("threads")) else None,
        measured=bool(host.get("measured", True)), conf="high",
        notes=f"measured on {host.get('cpu', 'this host')} at {host.get('measured_at', '?')}", origin="calibration")


def load_profiles(extra_paths: Optional[Iterable] = None, host: Optional[dict] = None) -> dict[str, DeviceProfile]:
    """All device profiles by name: shipped, then ``$GNNREC_LAB_DEVICES``, then ``extra_paths``.

    ``host``, a calibration dict, adds the measured profile ``host``.
    Raises :class:`UserError` naming the file, line and field of any invalid entry.
    """
    paths = [_SHIPPED]
    env = os.environ.get(ENV_VAR, "")
    paths += [Path(p) for p in env.split(os.pathsep) if p]
    paths += [Path(p) for p in (extra_paths or [])]
    out: dict[str, DeviceProfile] = {}
    for p in paths:
        for prof in _read_file(p):
            out[prof.name] = prof
    if host is not None:
        out["host"] = host_device(host)
    for prof in out.values():
        if prof.is_memory_mode and isinstance(prof.hit_profile, str):
            hit = out.get(prof.hit_profile)
            if hit is None or hit.is_memory_mode:
                raise UserError(f"{prof.origin} ({prof.name}): hit_profile {prof.hit_profile!r} is not a known "
                                f"non-memory-mode profile")
            prof.hit_profile = hit
        if prof.baseline and prof.baseline not in out and prof.baseline != "host":
            raise UserError(f"{prof.origin} ({prof.name}): baseline {prof.baseline!r} is not a known profile")
    return out


def get_profile(name, host: Optional[dict] = None, extra_paths=None) -> DeviceProfile:
    """The profile called ``name`` (a :class:`DeviceProfile` is returned unchanged)."""
    if isinstance(name, DeviceProfile):
        return name
    profiles = load_profiles(extra_paths, host=host)
    if name not in profiles:
        hint = " (pass a host calibration for 'host')" if name == "host" else ""
        raise UserError(f"device: unknown profile {name!r}{hint}; known: {', '.join(sorted(profiles))}")
    return profiles[name]


def load_host_profile(path=None) -> dict:
    """The host calibration: from a JSON file at ``path``, else ``gnnrec_lab.calibrate.host_profile``
    (measured quickly if missing). Raises :class:`UserError` when neither is available."""
    import json
    if path:
        try:
            d = json.loads(Path(path).read_text())
        except OSError as e:
            raise UserError(f"--host-profile: cannot read {path} ({e.strerror})") from None
        except ValueError as e:
            raise UserError(f"--host-profile: {path} is not JSON ({e})") from None
        if not isinstance(d, dict):
            raise UserError(f"--host-profile: {path} must hold one JSON object")
        return d
    try:
        from ..calibrate import host_profile
    except ImportError:
        raise UserError("no host calibration available: run `gnnrec-lab calibrate` or pass --host-profile FILE") \
            from None
    return host_profile(measure_if_missing=True, quick=True)
