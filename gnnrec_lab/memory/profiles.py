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

import copy
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import yaml

from gnnrec_lab.util.errors import UserError

KINDS = ("dram", "pmem", "pmem_memory_mode", "cxl", "dram_remote", "file", "host")
ENV_VAR = "GNNREC_LAB_DEVICES"
STORES = ("clwb", "ntstore")   # write columns: store+clwb (what the lab's kernels do) / non-temporal
_SHIPPED = Path(__file__).with_name("devices.yaml")
# bounds of the interference's shape exponent q (docs/tier_model.md 4b): a second point that shows no
# interference gives the steepest shape, one that shows more than the 1:1 point the flattest
Q_MIN, Q_MAX = 0.1, 20.0


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
    remote_socket_factor: dict = field(default_factory=dict)  # {"read": f, "write": f, "mixed_1to1": f}
    write_bw_ntstore_GBps: Optional[float] = None             # non-temporal stores (shown, not projected)
    random_write_ntstore_GBps: dict = field(default_factory=dict)
    mixed: dict = field(default_factory=dict)                 # {threads, read_GBps, write_GBps, points}
    dimms: Optional[int] = None
    platform: str = ""
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

    def _anchors(self, write: bool, store: str = "clwb") -> list[tuple[int, float]]:
        """(row width, ns per row) points measured or derived for random rows (``store``: the write
        column, store+clwb by default; ntstore only where the profile publishes it)."""
        g = int(self.access_granularity_bytes)
        if not write:
            table = self.random_read_GBps
        elif store == "ntstore":
            table = self.random_write_ntstore_GBps
        else:
            table = self.random_write_GBps
        pts = {int(w): float(bw) for w, bw in table.items()}
        if g not in pts:
            if write:
                # a granule-sized random write is bounded by both the write bandwidth and what random
                # reads of that size reach (min keeps the model monotone in every profile number)
                wbw = self.write_bw_ntstore_GBps if store == "ntstore" and self.write_bw_ntstore_GBps \
                    else self.write_bw_GBps
                rd = dict(self._anchors(False))
                pts[g] = min(wbw, g / rd[g])
            else:
                # a granule-sized random read is assumed to reach sequential bandwidth
                pts[g] = self.read_bw_GBps
        # a row narrower than the granule still moves a whole granule (Optane's XPLine: a 64 B or
        # 128 B write costs a 256 B media write): same time per row as a full granule
        if g > 64 and 64 not in pts:
            pts[64] = pts[g] * 64 / g
        return sorted((w, w / bw) for w, bw in pts.items())

    def random_ns_per_row(self, row_bytes: int, write: bool = False, threads: Optional[int] = None,
                          remote: bool = False, mlp: Optional[float] = None, store: str = "clwb") -> float:
        """Nanoseconds per randomly placed row of ``row_bytes`` bytes (throughput, all threads).

        Piecewise-linear in width between the profile's measured points; narrower than the
        smallest point costs that point (the media moves at least that much); wider than the
        largest costs whole granules (``row_bytes`` rounded up to ``access_granularity_bytes``).
        With ``threads`` and ``mlp`` (misses one thread keeps in flight, :func:`misses_in_flight`
        of the host calibration) given, and a profile that is not the measured host, the row also
        costs at least ``latency / (threads * mlp)`` (Little's law).
        """
        w = max(1, int(row_bytes))
        pts = self._anchors(write, store)
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
        if threads and mlp and not self.measured:
            lat = self.write_latency_ns if write else self.read_latency_ns
            t = max(t, lat / (threads * mlp))
        return t

    # ------------------------------------------------------------------
    def _mix_pure_ns_per_byte(self, x: float, remote: bool) -> float:
        """ns per byte of a mix with write share ``x`` if reads and writes did not interfere: the
        mixed series' own pure read and write (remote: times their ``remote_socket_factor``)."""
        m = self.mixed
        r = float(m["read_GBps"]) * self._remote("read", remote)
        w = float(m["write_GBps"]) * self._remote("write", remote)
        return (1 - x) / r + x / w

    def _mix_points(self, remote: bool) -> dict:
        """The measured mixes the interference is fitted on: ``remote_points`` on the other socket
        (a profile with only a ``mixed_1to1`` remote factor: the local 1:1 point times it; with
        neither, the local points: the mix interferes as it does locally)."""
        m = self.mixed
        if remote and m.get("remote_points"):
            return m["remote_points"]
        if remote and "mixed_1to1" in self.remote_socket_factor and 0.5 in m["points"]:
            return {0.5: m["points"][0.5] * float(self.remote_socket_factor["mixed_1to1"])}
        return m["points"]

    def mix_shape(self, remote: bool = False) -> Optional[tuple]:
        """``(a, q)`` of the interference ``I(x) = 1 + a * (4 x (1 - x))^q`` (docs/tier_model.md 4b):
        ``a = I(1/2) - 1`` from the 1:1 point, ``q`` from the one other point of the series (1 when
        there is none). None without a measured series."""
        if not self.mixed:
            return None
        pts = self._mix_points(remote)

        def excess(x, bw):   # I(x) - 1 at a measured point
            return (1.0 / bw) / self._mix_pure_ns_per_byte(x, remote) - 1.0
        a = max(0.0, excess(0.5, pts[0.5])) if 0.5 in pts else 0.0
        q = 1.0
        others = [(x, bw) for x, bw in pts.items() if x != 0.5]
        if a > 0 and others:
            x2, bw2 = others[0]
            e = excess(x2, bw2)
            q = math.log(e / a) / math.log(4 * x2 * (1 - x2)) if e > 0 else Q_MAX
            q = min(Q_MAX, max(Q_MIN, q))
        return a, q

    def mix_factor(self, write_share: float, remote: bool = False) -> float:
        """How much longer a read/write mix takes on the device than its reads and writes apart
        (>= 1; 1 without a measured series or for a pure read or pure write):
        ``I(x) = 1 + a * (4 x (1 - x))^q`` with :meth:`mix_shape`'s ``a`` and ``q``, so that
        ``1 / B_mix(x) = I(x) * ((1 - x) / B_read + x / B_write)``."""
        x = min(1.0, max(0.0, float(write_share)))
        shape = self.mix_shape(remote)
        if shape is None or x <= 0.0 or x >= 1.0:
            return 1.0
        a, q = shape
        return 1.0 + a * (4 * x * (1 - x)) ** q

    def mixed_bw_GBps(self, write_share: float, remote: bool = False) -> Optional[float]:
        """Bandwidth (GB/s) of a read/write mix with ``write_share`` of its bytes written, on the
        device's measured mixed series (``mixed``): the series' pure read and write bandwidths with
        the interference :meth:`mix_factor` on top. None without a series."""
        if not self.mixed:
            return None
        x = min(1.0, max(0.0, float(write_share)))
        return 1.0 / (self._mix_pure_ns_per_byte(x, remote) * self.mix_factor(x, remote))

    def stream_write_ns_per_byte(self, store: str = "clwb", threads: Optional[int] = None) -> float:
        """ns per byte of sequential writes in the ``store`` column (ntstore where published)."""
        if store == "ntstore" and self.write_bw_ntstore_GBps:
            return 1.0 / self.write_bw_ntstore_GBps
        return self.stream_ns_per_byte(write=True, threads=threads)

    def summary(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "kind", "platform", "read_bw_GBps", "write_bw_GBps",
                                           "read_latency_ns", "write_latency_ns", "access_granularity_bytes",
                                           "baseline", "conf")}
        d["sources"] = list(self.sources)
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
                     "many_threads", "dram_cache_bytes", "gemm_GFLOPs", "threads", "write_bw_ntstore_GBps", "dimms")
_KNOWN = set(_NUMBERS) | set(_OPTIONAL_NUMBERS) | {
    "name", "kind", "random_read_GBps", "random_write_GBps", "random_write_ntstore_GBps", "remote_socket_factor",
    "mixed", "baseline", "platform", "hit_profile", "miss", "conf", "sources", "notes", "measured", "__line__"}


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
    for f in ("random_read_GBps", "random_write_GBps", "random_write_ntstore_GBps", "remote_socket_factor"):
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
    for f in ("baseline", "conf", "notes", "platform"):
        if f in d:
            kw[f] = str(d[f])
    if "mixed" in d:
        kw["mixed"] = _parse_mixed(d["mixed"], loc)
    if "measured" in d:      # a profile measured on this machine (calibrate --tier): no latency floor
        kw["measured"] = bool(d["measured"])
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


def _parse_mixed(m, loc: str) -> dict:
    """``mixed: {threads, read_GBps, write_GBps, points: {write share: GB/s}, remote_points: {...}}``
    validated."""
    if not isinstance(m, dict):
        raise UserError(f"{loc}: field 'mixed' must be a mapping with read_GBps, write_GBps and points")
    out = {}
    for k in ("read_GBps", "write_GBps"):
        if not _positive(m.get(k)):
            raise UserError(f"{loc}: field 'mixed.{k}' must be a positive number, got {m.get(k)!r}")
        out[k] = float(m[k])
    if "threads" in m:
        if not _positive(m["threads"]):
            raise UserError(f"{loc}: field 'mixed.threads' must be a positive number, got {m['threads']!r}")
        out["threads"] = int(m["threads"])
    pts = m.get("points")
    pts = {k: v for k, v in pts.items() if k != "__line__"} if isinstance(pts, dict) else None
    if not pts or not all(isinstance(k, (int, float)) and not isinstance(k, bool) and 0 < k < 1 and _positive(v)
                          for k, v in pts.items()):
        raise UserError(f"{loc}: field 'mixed.points' must map write shares in (0, 1) to GB/s, got "
                        f"{m.get('points')!r}")
    out["points"] = {float(k): float(v) for k, v in pts.items()}
    if 0.5 not in out["points"] or len(out["points"]) > 2:
        raise UserError(f"{loc}: field 'mixed.points' must hold the 1:1 mix (0.5) and at most one other write "
                        f"share (the interference's shape), got {sorted(out['points'])}")
    if "remote_points" in m:
        rp = m["remote_points"]
        rp = {k: v for k, v in rp.items() if k != "__line__"} if isinstance(rp, dict) else None
        if (not rp or not all(isinstance(k, (int, float)) and not isinstance(k, bool) and 0 < k < 1
                              and _positive(v) for k, v in rp.items())
                or 0.5 not in rp or len(rp) > 2):
            raise UserError(f"{loc}: field 'mixed.remote_points' must map the 1:1 mix (0.5) and at most one "
                            f"other write share to GB/s on the other socket, got {m.get('remote_points')!r}")
        out["remote_points"] = {float(k): float(v) for k, v in rp.items()}
    return out


def misses_in_flight(host: Optional[dict]) -> Optional[float]:
    """Cache-line misses one thread of this host keeps in flight, from its calibration by Little's
    law: ``gather64_GBps * latency_ns / (64 B * threads)`` (bytes/ns x ns / bytes per miss / threads).
    None when the calibration lacks a number (no latency floor is applied then)."""
    if isinstance(host, DeviceProfile):    # the host as a measured profile (host_device)
        host = {"gather64_GBps": host.random_read_GBps.get(64), "latency_ns": host.read_latency_ns,
                "threads": host.threads}
    if not isinstance(host, dict):
        return None
    g, lat, th = host.get("gather64_GBps"), host.get("latency_ns"), host.get("threads")
    if not (_positive(g) and _positive(lat) and _positive(th)):
        return None
    return float(g) * float(lat) / (64.0 * float(th))


# the last parse of each profile file, by path, with its text: PyYAML's pure-Python parser takes
# ~80 ms for the shipped file, and every projection loads the profiles (tier model, whatif, pages)
_PARSED: dict = {}


def _parse_yaml(path: Path, text: str):
    hit = _PARSED.get(str(path))
    if hit is not None and hit[0] == text:
        return copy.deepcopy(hit[1])   # the caller's profiles must not share objects with the cache
    try:
        doc = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{at}: not valid YAML ({getattr(e, 'problem', e)})") from None
    _PARSED[str(path)] = (text, copy.deepcopy(doc))
    return doc


def _read_file(path: Path) -> list[DeviceProfile]:
    try:
        text = path.read_text()
    except OSError as e:
        raise UserError(f"{path}: cannot read device profiles ({e.strerror})") from None
    doc = _parse_yaml(path, text)
    if not isinstance(doc, dict) or not isinstance(doc.get("device_profiles"), list):
        raise UserError(f"{path}: expected a top-level 'device_profiles:' list")
    return [_parse_profile(p, str(path)) for p in doc["device_profiles"]]


def host_device(host: dict) -> DeviceProfile:
    """The calibrated host (``gnnrec_lab.memory.calibrate.host_profile()``) as a measured profile.

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
