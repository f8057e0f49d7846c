"""The tier model: a kernel's measured DRAM time projected onto another memory tier.

Every number this module returns is **modeled** (rows carry ``kind`` MODELED, a
:class:`~gnnrec_lab.util.provenance.Provenance`);
only ``measured_s`` (the input) is measured. Equations and assumptions are in
``docs/tier_model.md``; in short, for each kernel group

1. its bytes are split into four components -- sequential reads, sequential
   writes, random-row reads, random-row writes -- and each component's bytes are
   attributed to tensor classes (:func:`attribute`);
2. on the host, component ``k`` of class ``c`` would take ``h_kc = bytes_kc * cost_host_k``;
3. on the target it takes ``h_kc * cost_dev_k / cost_base_k`` when class ``c`` is placed on
   the device, ``h_kc`` when it stays in DRAM; ``cost_base`` is the device's own platform DRAM
   (``baseline`` in its profile) or, with ``baseline="host"``, the host itself;
4. memory time ``M = sum h``; device memory time ``M' = sum_off h + I(x) * sum_on h * ratio``,
   where ``I(x)`` is the device's read/write interference at the write share ``x`` of the bytes
   the group moves on the device (:meth:`DeviceProfile.mix_factor`, 1 for a pure read or write);
   compute time ``C = flops / host GEMM rate``; ``f = max(M', C) / max(M, C)`` and
   ``modeled_s = measured_s * f``.

Memory Mode: ``cost_dev = h cost_hit + (1 - h) cost_miss`` with the hit rate of a
direct-mapped cache with random placement, ``h = (1 - exp(-F/C)) / (F/C)`` (:func:`mm_hit_rate`).
A file tier (``kind: file``, ``calibrate --tier``): its page cache serves ``h = min(1, C/F)`` of the
accesses of the classes placed there at host cost (:func:`page_cache_hit_rate`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE, memory_mode_of
from gnnrec_lab.memory.profiles import DeviceProfile, get_profile, host_device, misses_in_flight
from gnnrec_lab.memory.validation import HELD_OUT_TARGET, UNVALIDATED_BAND, access_of, regime_errors, regime_key
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_ms
from gnnrec_lab.util.provenance import Provenance, part, parts
from gnnrec_lab.util.recorder import records_frame

COMPONENTS = ("stream_read", "stream_write", "random_read", "random_write")
OPTIMIZER_KERNELS = ("adam", "adamw", "lamb", "sgd", "optimizer")
_NUM = ("ns", "bytes_read", "bytes_written", "flops", "random_bytes", "calls")


# ----------------------------------------------------------------------
def attribute(name: str, phase: str, layer: int, pattern: str) -> dict:
    """Which tensor classes a kernel's bytes belong to: ``{component: {class: fraction}}``.

    Rules (by kernel name first, then phase; fractions of one component sum to 1):

    * optimizer kernels (adam, adamw, lamb: reads p, g, m, v, writes p, m, v; sgd: reads p, g, buf,
      writes p, buf): reads split over embeddings / gradients / optimizer state, writes over
      embeddings / optimizer state;
    * ``sddmm*``: random reads of node rows (embeddings at layer 0 in forward, else activations),
      sequential reads of the graph, writes of per-edge intermediates;
    * ``spmm_edge*``/``edge_*``: sequential reads of per-edge intermediates, random/sequential
      writes and reads of node rows as activations;
    * ``spmm*``: sequential reads of the graph (indptr, indices, scales), random row reads of the
      layer input (embeddings at forward layer 0, else activations), writes of activations;
    * ``gather*`` / ``scatter*``: random rows of embeddings (layer 0) or the model output
      (activations, layer != 0); backward scatters write gradients; the dense side is buffers;
    * ``bpr_loss`` / ``l2_reg`` (fused loss terms): random row reads of the model output
      (activations) or of the embeddings (layer 0), as many of the gradient rows they update;
      their gradients, dense and scattered, are activations (bpr_loss) or gradients (l2_reg);
    * evaluation: reads activations (the final embeddings), writes score buffers;
    * loss: buffers; anything else (gemm, elementwise): activations.
    """
    n = (name or "").lower()
    node_rows = "embeddings" if (layer == 0 and phase != "backward") else "activations"
    if n in OPTIMIZER_KERNELS or n.split("_")[0] in OPTIMIZER_KERNELS or phase == "optimizer":
        if n.startswith("sgd"):
            rd = {"embeddings": 1 / 3, "gradients": 1 / 3, "optimizer": 1 / 3}
            wr = {"embeddings": 0.5, "optimizer": 0.5}
        else:
            rd = {"embeddings": 0.25, "gradients": 0.25, "optimizer": 0.5}
            wr = {"embeddings": 1 / 3, "optimizer": 2 / 3}
        return {"stream_read": rd, "stream_write": wr, "random_read": rd, "random_write": wr}
    if phase == "evaluation":
        return {"stream_read": {"activations": 1.0}, "stream_write": {"buffers": 1.0},
                "random_read": {"activations": 1.0}, "random_write": {"buffers": 1.0}}
    if n.startswith("sddmm"):
        return {"stream_read": {"graph": 1.0}, "stream_write": {"edge_intermediates": 1.0},
                "random_read": {node_rows: 1.0}, "random_write": {"activations": 1.0}}
    if n.startswith("spmm_edge") or n.startswith("edge_"):
        return {"stream_read": {"edge_intermediates": 1.0}, "stream_write": {"activations": 1.0},
                "random_read": {"activations": 1.0}, "random_write": {"activations": 1.0}}
    if n.startswith("spmm"):
        return {"stream_read": {"graph": 1.0}, "stream_write": {"activations": 1.0},
                "random_read": {node_rows: 1.0}, "random_write": {"activations": 1.0}}
    if n.startswith("bpr") or n.startswith("l2_reg"):
        rows = "embeddings" if layer == 0 else "activations"
        grads = "gradients" if layer == 0 else "activations"
        # the gradient rows are read-modify-written: half the random reads are theirs
        rd = {rows: 0.5, grads: 0.5} if rows != grads else {rows: 1.0}
        return {"stream_read": {rows: 1.0}, "stream_write": {grads: 1.0},
                "random_read": rd, "random_write": {grads: 1.0}}
    if n.startswith("gather") or n.startswith("scatter") or n.startswith("embedding"):
        rows = "embeddings" if layer == 0 else "activations"
        wrows = "gradients" if (phase == "backward" and layer == 0) else rows
        return {"stream_read": {"buffers": 1.0}, "stream_write": {"buffers": 1.0},
                "random_read": {rows: 1.0}, "random_write": {wrows: 1.0}}
    if phase == "loss":
        return {c: {"buffers": 1.0} for c in COMPONENTS}
    return {c: {"activations": 1.0} for c in COMPONENTS}


def split_bytes(bytes_read: int, bytes_written: int, random_bytes: int, pattern: str) -> dict:
    """Bytes per component. Random bytes are writes for ``scatter`` kernels, reads otherwise
    (any excess spills to the other direction); the rest of each direction is sequential."""
    rnd = max(0, int(random_bytes))
    if pattern == "scatter":
        rw = min(rnd, bytes_written)
        rr = min(rnd - rw, bytes_read)
    else:
        rr = min(rnd, bytes_read)
        rw = min(rnd - rr, bytes_written)
    return {"stream_read": bytes_read - rr, "stream_write": bytes_written - rw,
            "random_read": rr, "random_write": rw}


def mm_hit_rate(footprint_bytes: float, cache_bytes: float) -> float:
    """Expected hit rate of a direct-mapped DRAM cache of ``cache_bytes`` over a working set of
    ``footprint_bytes`` accessed uniformly, with lines placed at random physical addresses:
    the number of other lines sharing a set is Poisson(lambda = F/C) and a line with k rivals hits
    1/(k+1) of the time, so ``h = E[1/(K+1)] = (1 - exp(-lambda)) / lambda``."""
    if cache_bytes <= 0:
        return 0.0
    lam = max(0.0, float(footprint_bytes)) / float(cache_bytes)
    if lam < 1e-9:
        return 1.0
    return (1.0 - math.exp(-lam)) / lam


# ----------------------------------------------------------------------
def ns_per_byte(p: DeviceProfile, comp: str, row_bytes: int, threads, remote: bool, hit: Optional[float],
          mlp: Optional[float] = None) -> float:
    """ns per byte of component ``comp`` on profile ``p`` (memory mode mixes hit and miss);
    ``mlp``: misses in flight per thread for the latency floor of random rows."""
    if p.is_memory_mode:
        h = 1.0 if hit is None else hit
        return (h * ns_per_byte(p.hit_profile, comp, row_bytes, threads, remote, None, mlp)
                + (1 - h) * ns_per_byte(p.miss, comp, row_bytes, threads, remote, None, mlp))
    write = comp.endswith("write")
    if comp.startswith("stream"):
        return p.stream_ns_per_byte(write=write, threads=threads, remote=remote)
    w = row_bytes if row_bytes > 0 else 64
    return p.random_ns_per_row(w, write=write, threads=threads, remote=remote, mlp=mlp) / w


def _frame(records) -> pd.DataFrame:
    df = records_frame(records, columns=None,
                       require=("name", "phase", "ns", "bytes_read", "bytes_written", "pattern"))
    if df is records:   # the defaults below must not write into the caller's frame
        df = df.copy()
    for c, default in (("layer", -1), ("step", -1), ("flops", 0), ("random_bytes", 0), ("row_bytes", 0),
                       ("calls", 1)):
        if c not in df.columns:
            df[c] = default
    for c in ("name", "phase", "pattern"):
        if c not in df.columns:
            df[c] = ""
    for c in _NUM + ("layer", "step", "row_bytes"):
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce").fillna(0).astype("int64")
    return df


def _placement_on_device(placement: Optional[dict]):
    """class -> True when it sits on the device. None: everything on the device."""
    if placement is None:
        return lambda cls: True
    return lambda cls: str(placement.get(cls, "device")) != "dram"


def _resolve(device, host: dict, extra_paths=None) -> tuple:
    if host is None:
        raise UserError("tier model: a host profile is needed (run `gnnrec-lab calibrate`)")
    hostp = host_device(host) if isinstance(host, dict) else host
    dev = hostp if device == "host" else get_profile(device, host=host if isinstance(host, dict) else None,
                                                    extra_paths=extra_paths)
    return hostp, dev


class Projection:
    """A run's kernel groups with their host and device memory terms, ready to be evaluated
    for any placement (the placement search in :mod:`.advise` evaluates 2^7 of them).

    Build with :func:`prepare`; :meth:`modeled_ns` gives each group's modeled time (ns).
    """

    def __init__(self, groups: pd.DataFrame, terms: list, device: DeviceProfile, base: DeviceProfile,
                 threads, hit, remote: bool = False, mlp: Optional[float] = None):
        self.groups, self.terms, self.device, self.base, self.threads, self.hit = \
            groups, terms, device, base, threads, hit
        self.remote, self.mlp = remote, mlp
        self.footprint = None      # bytes, total or by class: the file tier's page-cache hit rate

    def cache_hit(self, on_dev) -> float:
        """File tier: the share of its accesses the page cache in front of it serves (0 for other
        devices, and for a file tier without a cache size). By class, only the classes on the
        file count; a total footprint counts whole."""
        cache = self.device.dram_cache_bytes if self.device.kind == "file" else None
        if not cache:
            return 0.0
        fp = self.footprint
        if fp is None:
            return 0.0          # nothing known about what is placed there: every access misses
        placed = sum(v for k, v in fp.items() if on_dev(k) and isinstance(v, (int, float))) \
            if isinstance(fp, dict) else float(fp)
        return page_cache_hit_rate(placed, cache)

    def mix(self, rd_bytes: dict, wr_bytes: dict, on_dev) -> float:
        """The device's interference factor ``I(x)`` for the bytes a group reads and writes on the
        device (classes ``on_dev``); the platform DRAM's reads and writes are taken as independent."""
        r = sum(v for k, v in rd_bytes.items() if on_dev(k))
        w = sum(v for k, v in wr_bytes.items() if on_dev(k))
        if r <= 0 or w <= 0:
            return 1.0
        return self.device.mix_factor(w / (r + w), remote=self.remote)

    def modeled_ns(self, placement: Optional[dict] = None) -> list:
        """Modeled ns per group with ``placement`` (see :func:`project`)."""
        on_dev = _placement_on_device(None if self.device.is_memory_mode else placement)
        h = self.cache_hit(on_dev)
        out = []
        for ns, c, pattern, host_by_cls, dev_by_cls, rd_by_cls, wr_by_cls, _ in self.terms:
            if pattern == "compute" and c == 0:
                f = 1.0      # compute-bound by declaration and no GEMM rate to weigh it: unchanged
            else:
                m_host = sum(host_by_cls.values())
                mix = self.mix(rd_by_cls, wr_by_cls, on_dev)
                # a page-cache hit costs what the host's DRAM costs; a miss goes to the file's storage
                m_dev = sum((h * v + (1 - h) * dev_by_cls[k] * mix) if on_dev(k) else v
                            for k, v in host_by_cls.items())
                denom = max(m_host, c)
                f = max(m_dev, c) / denom if denom > 0 else 1.0
            out.append(ns * f)
        return out

    def regime_traffic(self, placement: Optional[dict] = None) -> list:
        """Per group, the regimes (:func:`~gnnrec_lab.memory.validation.regime_key`) its modeled
        device traffic falls in: ``{regime: [bytes, modeled ns]}``, the ns being the part of the
        group's modeled time (:meth:`modeled_ns`) its device memory term in that regime accounts for
        (none when the group is compute-bound, or for the accesses a page cache serves). A group
        that reads and writes on a device with a measured mix is in the device's mixed regime (its
        interference term applies); otherwise each component is in its op's sequential or row-size
        regime. The band of every modeled number (:func:`model_band`) weighs each regime's held-out
        error by this."""
        on_dev = _placement_on_device(None if self.device.is_memory_mode else placement)
        h = self.cache_hit(on_dev)
        out = []
        for (_ns, c, pattern, host_by, dev_by, rd_by, wr_by, comps), mod in zip(self.terms,
                                                                              self.modeled_ns(placement)):
            traffic: dict = {}
            if pattern == "compute" and c == 0:
                out.append(traffic)
                continue
            mix = self.mix(rd_by, wr_by, on_dev)
            m_dev = sum((h * v + (1 - h) * dev_by[k] * mix) if on_dev(k) else v for k, v in host_by.items())
            share = mod / m_dev if m_dev > 0 and m_dev >= c else 0.0    # modeled ns per unit of m_dev
            for comp, row_bytes, cls, nbytes, dev_ns in comps:
                if not on_dev(cls):
                    continue
                if mix > 1.0:
                    reg = regime_key(self.device.name, self.remote, "mixed read+write", "all access sizes")
                else:
                    op = "write" if comp.endswith("write") else "read"
                    reg = regime_key(self.device.name, self.remote, op, access_of(comp, row_bytes))
                t = traffic.setdefault(reg, [0.0, 0.0])
                t[0] += (1 - h) * nbytes
                t[1] += (1 - h) * dev_ns * mix * share
            out.append(traffic)
        return out


def _bytes(footprint) -> float:
    """Total bytes of a footprint given as a number or a by-class dict (non-numbers ignored)."""
    if isinstance(footprint, dict):
        return float(sum(v for v in footprint.values() if isinstance(v, (int, float)) and not isinstance(v, bool)))
    return float(footprint)


def page_cache_hit_rate(placed_bytes: float, cache_bytes: float) -> float:
    """Share of accesses to file-backed tensors of ``placed_bytes`` that find their page in a page
    cache of ``cache_bytes`` (LRU over uniformly accessed pages: ``min(1, C / F)``)."""
    if placed_bytes <= 0:
        return 1.0
    return min(1.0, max(0.0, float(cache_bytes)) / float(placed_bytes))


def prepare(records, host, device, footprint=None, *, baseline: Optional[str] = None,
            threads: Optional[int] = None, remote: bool = False, dram_cache_bytes: Optional[int] = None,
            extra_paths=None) -> Projection:
    """Group ``records`` by kernel and compute their terms on ``device`` (arguments as in :func:`project`)."""
    hostp, dev = _resolve(device, host, extra_paths)
    df = _frame(records)
    threads = threads or hostp.threads
    if baseline == "host" or dev.name == "host":
        base = hostp
    else:
        base_name = dev.baseline or "ddr4_2666_6ch"
        base = hostp if base_name == "host" else get_profile(base_name, extra_paths=extra_paths)
    hit = None
    if dev.is_memory_mode:
        if footprint is None:
            raise UserError(f"device {dev.name}: Memory Mode needs the run's footprint (bytes) for its hit rate")
        fp = _bytes(footprint)
        cache = dram_cache_bytes or dev.dram_cache_bytes
        if not cache:
            raise UserError(f"device {dev.name}: dram_cache_bytes is not set")
        hit = mm_hit_rate(fp, cache)
    gemm_ns_per_flop = 1.0 / hostp.gemm_GFLOPs if hostp.gemm_GFLOPs else 0.0
    mlp = misses_in_flight(host if isinstance(host, dict) else hostp)
    keys = ["name", "phase", "layer", "pattern", "row_bytes"]
    g = df.groupby(keys, dropna=False, sort=False)[list(_NUM)].sum().reset_index()
    terms = []
    for r in g.itertuples(index=False):
        parts = split_bytes(r.bytes_read, r.bytes_written, r.random_bytes, r.pattern)
        owners = attribute(r.name, r.phase, r.layer, r.pattern)
        host_by, dev_by, rd_by, wr_by, comps = {}, {}, {}, {}, []
        for comp, nbytes in parts.items():
            if nbytes <= 0:
                continue
            h_ns = nbytes * ns_per_byte(hostp, comp, r.row_bytes, threads, False, None)
            ratio = (ns_per_byte(dev, comp, r.row_bytes, threads, remote, hit, mlp)
                     / ns_per_byte(base, comp, r.row_bytes, threads, False, None, mlp))
            moved = wr_by if comp.endswith("write") else rd_by
            for cls, frac in owners[comp].items():
                host_by[cls] = host_by.get(cls, 0.0) + frac * h_ns
                dev_by[cls] = dev_by.get(cls, 0.0) + frac * h_ns * ratio
                moved[cls] = moved.get(cls, 0.0) + frac * nbytes
                comps.append((comp, int(r.row_bytes), cls, frac * nbytes, frac * h_ns * ratio))
        terms.append((r.ns, r.flops * gemm_ns_per_flop, r.pattern, host_by, dev_by, rd_by, wr_by, comps))
    pr = Projection(g, terms, dev, base, threads, hit, remote=remote, mlp=mlp)
    pr.footprint = footprint if isinstance(footprint, dict) or footprint is None else float(footprint)
    return pr


def project(records, host, device, placement: Optional[dict] = None, footprint=None, *,
            baseline: Optional[str] = None, threads: Optional[int] = None, remote: bool = False,
            dram_cache_bytes: Optional[int] = None, extra_paths=None, by=("name", "phase")) -> pd.DataFrame:
    """Project measured kernel records onto ``device``; one row per ``by`` group.

    ``records``: KernelRecords, dicts or a DataFrame (``Store().kernels_frame`` columns work).
    ``host``: the calibration dict (``gnnrec_lab.memory.calibrate.host_profile()``) or a host DeviceProfile.
    ``device``: a profile name or :class:`DeviceProfile`; ``"host"`` projects onto the host itself.
    ``placement``: ``{tensor class: "dram" | anything else}``; classes not named, and every class
    when ``placement`` is None, sit on the device. ``footprint``: bytes (int or a by-class dict),
    required for Memory Mode. ``baseline``: None = the device's platform DRAM, or ``"host"``.
    ``threads``: threads the run used (default: the host calibration's). ``remote``: the device
    is on the other socket (its ``remote_socket_factor`` applies).

    Returns columns ``by`` + calls, bytes_read, bytes_written, random_bytes, flops,
    ``measured_s`` (measured), ``modeled_s`` (modeled), ``ratio`` = modeled/measured,
    ``device``, ``hit_rate`` (Memory Mode, else NaN) and ``kind`` (MODELED).
    """
    pr = prepare(records, host, device, footprint, baseline=baseline, threads=threads, remote=remote,
                 dram_cache_bytes=dram_cache_bytes, extra_paths=extra_paths)
    g = pr.groups.copy()
    g["modeled_ns"] = pr.modeled_ns(placement)
    traffic = pr.regime_traffic(placement)
    # per group: the modeled ns its regimes account for, each weighed by its regime's error
    g["band_ns"] = [sum(ns * regime_band(reg) for reg, (_, ns) in t.items()) for t in traffic]
    by = list(by)
    out = g.groupby(by, dropna=False, sort=False)[list(_NUM) + ["modeled_ns", "band_ns"]].sum().reset_index()
    out["measured_s"] = out["ns"] / 1e9
    out["modeled_s"] = out["modeled_ns"] / 1e9
    out["ratio"] = (out["modeled_s"] / out["measured_s"]).where(out["measured_s"] > 0)
    out["device"] = pr.device.name
    hit = pr.hit
    if pr.device.kind == "file":      # the page cache's share, for this placement
        hit = pr.cache_hit(_placement_on_device(placement))
    out["hit_rate"] = hit if hit is not None else float("nan")
    # +- fraction of each row's modeled time: its regimes' held-out errors (model_band's rule)
    out["band"] = (out["band_ns"] / out["modeled_ns"]).where(out["modeled_ns"] > 0, 0.0)
    out["kind"] = Provenance.MODELED
    out = out.drop(columns=["ns", "modeled_ns", "band_ns"])
    total: dict = {}
    for t in traffic:
        for reg, (nbytes, ns) in t.items():
            acc = total.setdefault(reg, [0.0, 0.0])
            acc[0] += nbytes
            acc[1] += ns
    out.attrs.update({"kind": Provenance.MODELED, "device": pr.device.name, "baseline": pr.base.name,
                      "threads": pr.threads, "hit_rate": hit, "measured_column": "measured_s",
                      "modeled_column": "modeled_s", "remote": bool(pr.remote),
                      "regimes": {reg: {"bytes": b, "modeled_s": ns / 1e9} for reg, (b, ns) in total.items()}})
    return out.sort_values("measured_s", ascending=False, ignore_index=True)


TRAIN_PHASES = ("forward", "backward", "optimizer", "loss", "sampling", "other")


# ----------------------------------------------------------------------
# The robust base every projection starts from: one step of a run's kernels, robust to stalls
# ----------------------------------------------------------------------
#: A step is an outlier when its training-kernel time, or its wall seconds, exceed this many times
#: the run's median step. Load on a shared host stretches steps by up to about 2x for long stretches
#: (that is the run's spread, and it stays in the base); a step 3x its median is a stall (a page
#: fault storm, a preempted core, the first step's compilation), not the run's cost.
OUTLIER_FACTOR = 3.0
#: How the base reduces a kernel's per-step times to one number.
BASE_RULE = "median"
# median absolute deviation -> standard deviation of a normal distribution
_MAD_SIGMA = 1.4826


def _rel_spread(values) -> Optional[float]:
    """The relative spread of per-step values: 1.4826 x their median absolute deviation over their
    median (a standard deviation for normal noise, unmoved by a few outliers); None under 2 values."""
    s = pd.Series(values, dtype=float).dropna()
    if len(s) < 2:
        return None
    med = float(s.median())
    if med <= 0:
        return None
    return _MAD_SIGMA * float((s - med).abs().median()) / med


@dataclass(frozen=True)
class StepBase:
    """One step of a run's training kernels, robust to stalled steps (:func:`step_base`), *measured*:
    what the tier model projects, so a modeled number does not inherit a stall.

    ``records``: one row per kernel group (name, phase, layer, pattern, row_bytes), ``ns`` its
    **median** time per step over the kept steps (times the share of them it ran in), bytes, flops
    and calls their mean per kept step (``mean``: the totals over ``per`` steps); ``rule`` ``median``
    (per-step records) or ``mean`` (only totals were given: nothing to take a median of, nothing
    flagged); ``steps`` the steps with
    kernel records; ``outlier_steps`` the steps excluded (:data:`OUTLIER_FACTOR`; empty for
    ``mean``); ``kernel_s`` the base's kernel seconds per step; ``step_s`` the median wall step of the
    kept steps (None without step seconds); ``kernel_spread`` / ``step_spread`` the kept steps'
    relative spread (:func:`_rel_spread`; None when unknown)."""

    records: pd.DataFrame
    rule: str
    steps: int
    outlier_steps: tuple = ()
    kernel_s: float = part(Provenance.MEASURED, default=0.0)
    step_s: Optional[float] = part(Provenance.MEASURED, default=None)
    kernel_spread: Optional[float] = part(Provenance.MEASURED, default=None)
    step_spread: Optional[float] = part(Provenance.MEASURED, default=None)
    per: int = 1      # the steps ``records`` cover (``mean``: the totals of all of them)

    def to_dict(self) -> dict:
        """What a projection keeps of its base (``base`` of :func:`project_step`'s dict and of a
        stored ``result.modeled``): every number measured."""
        return {"rule": self.rule, "steps": self.steps, "outlier_steps": len(self.outlier_steps),
                "outlier_step_ids": [int(s) for s in self.outlier_steps[:20]], "outlier_factor": OUTLIER_FACTOR,
                "kernel_s": self.kernel_s, "step_s": self.step_s, "kernel_spread": self.kernel_spread,
                "step_spread": self.step_spread, "kind": Provenance.MEASURED}


def _step_series(step_seconds) -> Optional[pd.Series]:
    """Step seconds as a Series indexed by step: a Series (its index the steps), a ``{step: s}``
    dict, a frame with ``step`` and ``seconds`` (the store's steps), or a sequence (index: position)."""
    if step_seconds is None:
        return None
    if isinstance(step_seconds, pd.DataFrame):
        if "seconds" not in step_seconds or "step" not in step_seconds:
            return None
        s = pd.Series(step_seconds["seconds"].to_numpy(dtype=float), index=step_seconds["step"].to_numpy())
    elif isinstance(step_seconds, pd.Series):
        s = step_seconds.astype(float)
    elif isinstance(step_seconds, dict):
        s = pd.Series(step_seconds, dtype=float)
    else:
        s = pd.Series(list(step_seconds), dtype=float)
    s = s[s.notna()]
    return s if len(s) else None


_GROUP = ["name", "phase", "layer", "pattern"]


def step_base(records, step_seconds=None, *, steps: Optional[int] = None) -> StepBase:
    """**The** one step every modeled number of a run starts from (:func:`project_step`, hence
    :func:`run_step_time`, the stored projection and every view).

    With per-step records (a ``step`` >= 0 on the training rows: the store's ``kernel_steps``, a
    trace), each kernel group's base time is its **median** over the kept steps. Why the median and
    not a trimmed mean: a run of a few steps (a notebook's 4 to 6) trims nothing at any usual
    trimming share, while the median ignores one stalled step in three; the step's kernels are the
    same work every step, so their median is the cost of that work and the rest is the machine's
    load, which the band carries (:func:`model_band`). A kernel that ran in only some of the kept
    steps counts its median times the share of them it ran in.

    A step is an **outlier**, flagged and left out of the base (the medians, the bytes, the spread),
    when its training-kernel time or its wall seconds (``step_seconds``: per step, as the store's
    steps) exceed :data:`OUTLIER_FACTOR` times the run's median step. Bytes, flops and calls are the
    mean per kept step (they are the same every step).

    Without step numbers (totals, one row per kernel), the base is the mean: totals over ``steps``
    (default 1), ``rule`` ``mean``, and nothing can be flagged."""
    df = _frame(records)
    train = df[df["phase"].isin(TRAIN_PHASES)]
    wall = _step_series(step_seconds)
    stepped = train[train["step"] >= 0]
    cols = list(_NUM)
    if stepped.empty:
        n = max(int(steps or 1), 1)
        g = train.groupby(_GROUP, dropna=False, sort=False).agg(
            {**{c: "sum" for c in cols}, "row_bytes": "max"}).reset_index()
        # the totals stay whole (the tier model reads whole ns and bytes): they cover ``per`` steps
        return StepBase(records=g, rule="mean", steps=n, kernel_s=float(g["ns"].sum()) / 1e9 / n,
                        step_s=None if wall is None else float(wall.mean()), per=n)
    per = stepped.groupby(_GROUP + ["step"], dropna=False, sort=False).agg(
        {**{c: "sum" for c in cols}, "row_bytes": "max"}).reset_index()
    kernel_by_step = per.groupby("step")["ns"].sum().astype(float)
    out = set(kernel_by_step.index[kernel_by_step > OUTLIER_FACTOR * float(kernel_by_step.median())])
    if wall is not None:
        out |= set(wall.index[wall > OUTLIER_FACTOR * float(wall.median())])
    kept_steps = [s for s in kernel_by_step.index if s not in out] or list(kernel_by_step.index)
    kept = per[per["step"].isin(kept_steps)]
    n_kept = max(len(kept_steps), 1)
    g = kept.groupby(_GROUP, dropna=False, sort=False)
    base = g.agg({**{c: "sum" for c in cols if c != "ns"}, "row_bytes": "max"})
    for c in cols:
        if c != "ns":
            base[c] = base[c] / n_kept
    present = g["step"].nunique()
    base["ns"] = g["ns"].median() * present / n_kept
    for c in cols:       # whole ns and bytes, as the tier model reads them (_frame)
        base[c] = base[c].round().astype("int64")
    base = base.reset_index()
    kept_wall = None if wall is None else wall[~wall.index.isin(list(out))]
    return StepBase(records=base, rule=BASE_RULE, steps=int(len(kernel_by_step)),
                    outlier_steps=tuple(sorted(int(s) for s in out)),
                    kernel_s=float(base["ns"].sum()) / 1e9,
                    step_s=None if kept_wall is None or not len(kept_wall) else float(kept_wall.median()),
                    kernel_spread=_rel_spread(kernel_by_step[kernel_by_step.index.isin(kept_steps)]),
                    step_spread=None if kept_wall is None else _rel_spread(kept_wall))


def project_step(records, host, device, placement=None, footprint=None, *, steps: Optional[int] = None,
                 step_seconds=None, **kw) -> dict:
    """Per-training-step times of the run's robust one step (:func:`step_base`: per-kernel medians
    over its kept steps, outlier steps excluded): ``measured_s`` (measured) and ``modeled_s``
    (modeled) seconds per step over the training phases (evaluation excluded), ``ratio``, per-phase
    and per-kernel seconds, ``steps`` (the steps with kernel records; given, for totals), ``base``
    (:meth:`StepBase.to_dict`: the rule, the outlier steps, the measured spread), ``band``
    (:func:`model_band`), ``kind`` (MODELED) and ``measured_kind`` (MEASURED, of ``measured_s``).
    ``step_seconds``: the steps' wall seconds (flags stalled steps; gives the base's wall step);
    by default a frame's ``attrs["step_seconds"]`` (:func:`~gnnrec_lab.services.projection.stored_run_records`)."""
    if step_seconds is None and isinstance(records, pd.DataFrame):
        step_seconds = records.attrs.get("step_seconds")
    base = step_base(records, step_seconds, steps=steps)
    kern = project(base.records, host, device, placement, footprint, by=("name", "phase"), **kw)
    per = kern.groupby("phase", sort=False)[["measured_s", "modeled_s"]].sum().reset_index()
    n = base.per        # the steps base.records cover: 1, or all of them for totals
    meas = float(kern["measured_s"].sum()) / n
    mod = float(kern["modeled_s"].sum()) / n
    out = {"device": kern.attrs["device"], "steps": base.steps, "measured_s": meas, "modeled_s": mod,
           "ratio": mod / meas if meas > 0 else float("nan"),
           "phases_modeled_s": {r.phase: r.modeled_s / n for r in per.itertuples()},
           "phases_measured_s": {r.phase: r.measured_s / n for r in per.itertuples()},
           "kernels": [{"name": r.name, "phase": r.phase, "measured_s": r.measured_s / n,
                        "modeled_s": r.modeled_s / n, "band": float(r.band)} for r in kern.itertuples()],
           "hit_rate": kern.attrs["hit_rate"], "kind": Provenance.MODELED, "measured_kind": Provenance.MEASURED,
           "remote": kern.attrs["remote"], "base": base.to_dict(),
           "regimes": {reg: {"bytes": v["bytes"] / n, "modeled_s": v["modeled_s"] / n}
                       for reg, v in kern.attrs["regimes"].items()}}
    from gnnrec_lab.memory.calibrate import calibration_flags  # numba: the tier model itself stays light
    out["calibration_flags"] = calibration_flags(host) if isinstance(host, dict) else []
    out["band"] = model_band(out).to_dict()
    return out


# ----------------------------------------------------------------------
# A run's modeled step time: the one function every view shows
# ----------------------------------------------------------------------
# Modeled memory mode -> the device profile its modeled numbers use (a run's ``device_profile``
# overrides), as config.memory_modes declares them.
MODE_DEVICES = {name: m.device for name, m in MEMORY_MODE_TABLE.items() if not m.measured}


def mode_device(memory_mode: Optional[str], device_profile: Optional[str] = None) -> Optional[str]:
    """The device profile a run in ``memory_mode`` is modeled on (None for a measured mode, ``dram``,
    and for no mode: config.memory_modes.memory_mode_of)."""
    mode = memory_mode_of(memory_mode)
    return None if mode.measured else (device_profile or mode.device)


def mode_label(memory_mode: str, device_profile: Optional[str] = None) -> str:
    """How a run's memory mode reads everywhere it is shown, e.g.
    ``optane_app_direct (modeled on optane_pmem100_appdirect_6x)`` or ``dram (measured)``."""
    dev, name = mode_device(memory_mode, device_profile), memory_mode_of(memory_mode).name
    return f"{name} (measured)" if dev is None else f"{name} (modeled on {dev})"


def _get(config, key, default=None):
    return config.get(key, default) if isinstance(config, dict) else getattr(config, key, default)


ALL_ON_DEVICE = "all tensor classes on the device"


def run_threads(config) -> Optional[int]:
    """The compute threads a run's config sets: ``threads``, else one per pinned core (``cores``,
    a one-"machine" run of ``--cores C``), else None (the host calibration's threads, what an
    unpinned run uses). Every modeled step time of a stored run projects with this count."""
    return _get(config, "threads") or _get(config, "cores") or None


def placement_assumption(placement: Optional[dict]) -> str:
    """How every view names the placement a modeled step time assumes: classes placed ``dram``
    stay in DRAM, every other class sits on the device (``run_step_time``'s rule)."""
    keep = sorted(c for c, where in (placement or {}).items() if where == "dram")
    if not keep:
        return ALL_ON_DEVICE
    return f"{', '.join(keep)} kept in DRAM, the other tensor classes on the device"


#: The part of a run no placement moves: the Python interpreter, torch's and numba's libraries and
#: their allocations (the footprint's ``runtime`` class); the tier model does not model it.
INTERPRETER = "the interpreter (Python, torch, numba and their buffers)"


def dram_residency(memory_mode: Optional[str], placement: Optional[dict] = None,
                   device_profile: Optional[str] = None) -> str:
    """What a run keeps in DRAM, in the words Launch's memory note and Live's header both show.

    A run executes on this host, in a modeled memory mode too: there every tensor class not placed
    on ``file:`` is in DRAM with the interpreter (the predicted footprint counts them). A modeled
    mode's step time is then modeled on its device with :func:`placement_assumption`'s placement:
    the classes placed ``dram`` and the interpreter stay in DRAM, the rest sits on the device."""
    placement = placement or {}
    on_file = sorted(c for c, where in placement.items() if str(where).startswith("file:"))
    here = "every tensor class" + (f" but {', '.join(on_file)} (on file)" if on_file else "")
    host = f"on this host (where it runs): {here} and {INTERPRETER}"
    dev = mode_device(memory_mode, device_profile)
    if dev is None:
        return f"In DRAM {host}."
    keep = sorted(c for c, where in placement.items() if where == "dram")
    kept = (", ".join(keep) + " and " if keep else "no tensor class, only ") + INTERPRETER
    return (f"In DRAM {host}. On {dev} (modeled): {placement_assumption(placement)}; "
            f"in DRAM there: {kept}.")


def run_step_time(records, host, config, *, device: Optional[str] = None, placement: Optional[dict] = None,
                  footprint=None, steps: Optional[int] = None, **kw) -> dict:
    """**The** modeled kernel time per step of a run (the tier model's projection of its training
    kernels; :func:`step_times` scales the run's wall step by its ratio): the run summary, the stored
    result, ``whatif``, the Live page and the Breakdown page all show this function's value.

    ``records``: the run's training kernel records (any grouping: per step from the store, or
    totals; evaluation rows are ignored). ``config``: the run's RunConfig (or its dict): the device
    defaults to its memory mode's profile (:func:`mode_device`), the placement to its ``placement``
    (classes placed ``dram`` stay in DRAM, every other class sits on the device). ``footprint``:
    predicted bytes (total or by class; Memory Mode needs it). ``steps``: training steps the
    records cover (for totals; per-step records count their own). ``step_seconds`` (keyword): the
    steps' wall seconds. The projection starts from the run's robust step (:func:`step_base`).
    The baseline is the device's own platform DRAM (docs/tier_model.md), so a device no faster
    than that DRAM in every profile number is never modeled faster than measured.
    The device's thread-dependent rates take the run's own compute threads (:func:`run_threads`)
    unless ``threads`` is passed.

    Returns :func:`project_step`'s dict plus ``memory_mode``, ``device`` and
    ``placement_assumption`` (:func:`placement_assumption`, the words every view shows with it).
    """
    mode = memory_mode_of(config).name
    dev = device or mode_device(mode, _get(config, "device_profile")) or "host"
    if placement is None:
        placement = dict(_get(config, "placement") or {}) or None
    if isinstance(footprint, dict) and not _bytes(footprint):
        footprint = None
    kw.setdefault("threads", run_threads(config))
    out = project_step(records, host, dev, placement, footprint, steps=steps, **kw)
    out["memory_mode"] = mode
    out["placement_assumption"] = placement_assumption(placement)
    return out


@dataclass
class RunProjection:
    """A finished run's step time on its memory mode's device, each part with its kind:
    ``measured_s_per_step`` is *measured* (its training kernels on this host's DRAM),
    ``modeled_s_per_step`` and ``kernels`` (per kernel and phase) are *modeled* on ``device``
    (:func:`run_step_time`). ``to_dict`` is the ``modeled`` part of a run's result."""
    device: str
    memory_mode: str
    measured_s_per_step: float = part(Provenance.MEASURED)
    modeled_s_per_step: float = part(Provenance.MODELED)
    ratio: Optional[float] = None
    steps: Optional[int] = None
    hit_rate: Optional[float] = None
    host_calibrated_at: Optional[str] = None
    kernels: list = part(Provenance.MODELED, default_factory=list)
    placement_assumption: Optional[str] = None
    regimes: dict = part(Provenance.MODELED, default_factory=dict)   # model_band's input
    calibration_flags: list = None
    band: Optional[dict] = part(Provenance.MODELED, default=None)     # the kernel time's (model_band)
    base: Optional[dict] = part(Provenance.MEASURED, default=None)    # StepBase.to_dict: what it starts from

    @classmethod
    def of_run(cls, records, host, config, *, footprint=None, steps: Optional[int] = None,
               step_seconds=None) -> "RunProjection":
        """:func:`run_step_time` of a run's kernel records (per step: its robust base,
        :func:`step_base`), kept with the calibration it used."""
        st = run_step_time(records, host, config, footprint=footprint, steps=steps, step_seconds=step_seconds)
        return cls(device=st["device"], memory_mode=st["memory_mode"], measured_s_per_step=st["measured_s"],
                   modeled_s_per_step=st["modeled_s"], ratio=st["ratio"], steps=st["steps"],
                   hit_rate=st["hit_rate"], host_calibrated_at=host.get("measured_at"),
                   kernels=[dict(k, kind=Provenance.MODELED) for k in st["kernels"]],
                   placement_assumption=st["placement_assumption"], regimes=st.get("regimes") or {},
                   calibration_flags=list(st.get("calibration_flags") or []), band=st.get("band"),
                   base=st.get("base"))

    def to_dict(self) -> dict:
        return {"device": self.device, "kind": Provenance.MODELED, "kinds": parts(self),
                "memory_mode": self.memory_mode,
                "measured_s_per_step": self.measured_s_per_step, "modeled_s_per_step": self.modeled_s_per_step,
                "ratio": self.ratio, "steps": self.steps, "hit_rate": self.hit_rate,
                "host_calibrated_at": self.host_calibrated_at, "kernels": self.kernels,
                "placement_assumption": self.placement_assumption, "regimes": self.regimes,
                "calibration_flags": list(self.calibration_flags or []), "band": self.band, "base": self.base}


def modeled_ratio(modeled: Optional[dict]) -> Optional[float]:
    """A run's modeled / measured step-time ratio from its projection (:func:`run_step_time`, stored
    as the run's ``result.modeled``): the "3.00x" that ``runs show``, Live, Breakdown and ``whatif``
    print. None for a DRAM run (nothing modeled) or a run without its projection yet (running).
    The stored form's ``..._per_step`` seconds decide where present; :func:`run_step_time`'s dict
    gives its ``ratio``, else its ``modeled_s`` / ``measured_s``."""
    if not modeled:
        return None
    if "modeled_s_per_step" in modeled:
        try:
            mod, meas = float(modeled.get("modeled_s_per_step")), float(modeled.get("measured_s_per_step"))
        except (TypeError, ValueError):   # absent, or not a number in a damaged result
            return None
        if not meas or mod != mod or meas != meas:
            return None
        return mod / meas
    ratio = _num(modeled.get("ratio"))
    if ratio is None and _num(modeled.get("modeled_s")) is not None and _num(modeled.get("measured_s")):
        ratio = float(modeled["modeled_s"]) / float(modeled["measured_s"])
    return ratio


def _num(v) -> Optional[float]:
    """``v`` as a finite float, None where it is missing, NaN or not a number."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def training_kernel_ns(records) -> float:
    """Nanoseconds of the training-phase kernels (:data:`TRAIN_PHASES`) in ``records`` (the store's
    kernel rows or totals, a run's ``kernels``, KernelRecords); evaluation is not a step's."""
    if records is None:
        return 0.0
    df = records if isinstance(records, pd.DataFrame) else records_frame(records, columns=None)
    if df.empty or "ns" not in df or "phase" not in df:
        return 0.0
    return float(df.loc[df["phase"].isin(TRAIN_PHASES), "ns"].astype(float).sum())


# ----------------------------------------------------------------------
# How far to trust a modeled number: the held-out error of the regimes its traffic falls in
# ----------------------------------------------------------------------
#: A run is marked low confidence when at least this share of its modeled device traffic (bytes)
#: falls in regimes that failed validation (a held-out point outside the 15% target).
LOW_CONFIDENCE_SHARE = 0.5
VALIDATED, UNVALIDATED, LOW = "validated", "unvalidated", "low"


def regime_band(regime: str) -> float:
    """The +- fraction of a modeled time spent in ``regime``: the largest time error its held-out
    points show (:func:`~gnnrec_lab.memory.validation.regime_table`), or the 15% validation target
    where no held-out point tests it."""
    reg = regime_errors().get(regime)
    return UNVALIDATED_BAND if reg is None else float(reg["error"])


def fmt_band(frac: Optional[float]) -> str:
    """``+-12%`` (the sign as the one character every view prints); empty without a band."""
    if frac is None or frac != frac:
        return ""
    return f"±{frac * 100:.0f}%" if frac >= 0.005 else f"±{frac * 100:.1f}%"


@dataclass(frozen=True)
class Band:
    """How far to trust a run's modeled numbers (:func:`model_band`): ``kernel`` (+- fraction of the
    modeled kernel time) and ``step`` (+- fraction of the modeled step, epoch and training time), each
    the device model's part and the run's measured part combined in quadrature,
    ``sqrt(model^2 + spread^2)`` (two independent relative errors):

    * the **device model's** part, ``model_kernel`` (from the regimes of its traffic, their held-out
      errors) and ``model_step`` (the kernels' part over their share of the step plus the part outside
      the kernels, scaled 1:1 with them, whose band is the gap between scaled and not);
    * the **run's own measured spread**, ``spread_kernel`` / ``spread_step``: how much its kept steps
      vary around the median the projection starts from (:func:`step_base`, :func:`_rel_spread`; 0
      where unknown);

    ``outside_share`` (measured share of the step outside the kernels; None when unknown),
    ``outlier_steps`` / ``base_steps`` (steps left out of the base, of how many; None when the base
    had no per-step records), ``regimes`` (the regimes its modeled device traffic falls in, by bytes),
    ``confidence`` (``validated``, ``unvalidated`` or ``low``) and ``reasons`` (why, in words)."""

    kernel: float
    step: float
    outside_share: Optional[float] = None
    regimes: tuple = ()
    confidence: str = VALIDATED
    reasons: tuple = ()
    model_kernel: Optional[float] = None
    model_step: Optional[float] = None
    spread_kernel: float = 0.0
    spread_step: float = 0.0
    outlier_steps: Optional[int] = None
    base_steps: Optional[int] = None

    def range(self, value: Optional[float], of: str = "step") -> Optional[tuple]:
        """``(low, high)`` of a modeled ``value`` (``of`` "step" for a step, epoch or training time,
        "kernel" for a kernel time)."""
        if value is None or value != value:
            return None
        f = self.kernel if of == "kernel" else self.step
        return (value * (1 - f), value * (1 + f))

    def words(self) -> str:
        """The clause every view prints after a run's modeled numbers."""
        out = "held-out error of its traffic's regimes"
        if self.outside_share is not None:
            out += (f", and for the step its {self.outside_share:.0%} outside the kernels, scaled 1:1 with them "
                    f"(not modeled)")
        if self.spread_kernel or self.spread_step:
            out = (f"±: the device model's ({out}: kernel {fmt_band(self.model_kernel)}, step "
                   f"{fmt_band(self.model_step)}) and, in quadrature, the run's step-to-step spread (measured: "
                   f"kernel {fmt_band(self.spread_kernel)}, step {fmt_band(self.spread_step)})")
        else:
            out = "±: " + out
        if self.outlier_steps:
            out += (f"; {self.outlier_steps} of {self.base_steps} steps over {OUTLIER_FACTOR:g}x the median step "
                    f"left out")
        if self.confidence == LOW:
            out += "; LOW CONFIDENCE: " + "; ".join(self.reasons)
        elif self.confidence == UNVALIDATED:
            out += "; unvalidated: " + "; ".join(self.reasons)
        return out

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "step": self.step, "outside_share": self.outside_share,
                "regimes": [dict(r) for r in self.regimes], "confidence": self.confidence,
                "reasons": list(self.reasons), "model_kernel": self.model_kernel, "model_step": self.model_step,
                "spread_kernel": self.spread_kernel, "spread_step": self.spread_step,
                "outlier_steps": self.outlier_steps, "base_steps": self.base_steps, "kind": Provenance.MODELED}


def model_band(modeled: Optional[dict], *, step_s: Optional[float] = None,
               kernel_s: Optional[float] = None) -> Optional[Band]:
    """**The** band of a run's modeled numbers, the one function every view formats: ``modeled`` is
    a projection (:func:`run_step_time`'s dict or a stored ``result.modeled``) with its
    ``regimes`` (bytes and modeled seconds per regime, :meth:`Projection.regime_traffic`) and
    ``calibration_flags``; ``step_s`` / ``kernel_s`` the measured step and kernel time (the part of
    the step outside the kernels joins the step's band); where the projection carries its ``base``
    (:func:`step_base`), the base's median step and kernel time are used instead, and its measured
    spread joins the band in quadrature (:class:`Band`). None without a projection.

    Kernel band = sum over regimes of (modeled seconds in it x its error, :func:`regime_band`) over
    the modeled kernel time. Confidence is ``low`` when at least :data:`LOW_CONFIDENCE_SHARE` of the
    device bytes is in regimes that failed validation, or the host calibration it used is flagged
    (:func:`~gnnrec_lab.memory.calibrate.calibration_flags`); ``unvalidated`` when that share of the
    bytes is in regimes no held-out point tests (band: the 15% target) or the projection carries no
    regimes (stored before they were kept: the device's widest held-out error); else ``validated``."""
    if not modeled:
        return None
    ratio = _num(modeled.get("ratio"))
    mod = _num(modeled.get("modeled_s_per_step", modeled.get("modeled_s")))
    if ratio is None:
        meas = _num(modeled.get("measured_s_per_step", modeled.get("measured_s")))
        ratio = mod / meas if mod is not None and meas else None
    errors = regime_errors()
    regs = modeled.get("regimes")
    reasons, confidence = [], VALIDATED
    rows = []
    if isinstance(regs, dict) and regs:
        total_b = sum(float(v.get("bytes") or 0) for v in regs.values()) or 1.0
        band_s = 0.0
        failed_b = untested_b = 0.0
        for reg, v in sorted(regs.items(), key=lambda kv: -float(kv[1].get("bytes") or 0)):
            e = errors.get(reg)
            err = regime_band(reg)
            band_s += float(v.get("modeled_s") or 0) * err
            b = float(v.get("bytes") or 0)
            if e is None:
                untested_b += b
            elif not e["ok"]:
                failed_b += b
            rows.append({"regime": reg, "bytes_share": b / total_b, "error": err,
                         "held_out_points": 0 if e is None else len(e["points"]),
                         "ok": None if e is None else bool(e["ok"])})
        kernel = band_s / mod if mod else 0.0
        if failed_b / total_b >= LOW_CONFIDENCE_SHARE:
            confidence = LOW
            bad = [r for r in rows if r["ok"] is False]
            reasons.append(f"{failed_b / total_b:.0%} of its modeled device traffic is in "
                           + ", ".join(f"{r['regime']} (held-out points missed by up to {r['error']:.0%})"
                                       for r in bad) + ", which failed validation")
        elif untested_b / total_b >= LOW_CONFIDENCE_SHARE:
            confidence = UNVALIDATED
            reasons.append(f"{untested_b / total_b:.0%} of its modeled device traffic is in regimes no held-out "
                           f"point tests (band: the {HELD_OUT_TARGET:.0%} target, not an error seen)")
    else:
        dev = modeled.get("device")
        seen = [e["error"] for e in errors.values() if e["device"] == dev and ": local socket" in e["regime"]]
        kernel = max(seen) if seen else HELD_OUT_TARGET
        confidence = UNVALIDATED
        reasons.append(f"the projection carries no traffic by regime; band: the widest held-out error of {dev}"
                       if seen else f"no held-out point tests {dev}; band: the {HELD_OUT_TARGET:.0%} target")
    from gnnrec_lab.memory.calibrate import with_remedy  # numba: the tier model itself stays light
    flags = with_remedy(modeled.get("calibration_flags") or [])   # a run stored before flags said how to fix them
    if flags:
        confidence = LOW
        reasons.extend(flags)
    outside = None
    step = kernel
    base = modeled.get("base") if isinstance(modeled.get("base"), dict) else {}
    st, ks = _num(step_s), _num(kernel_s)
    if _num(base.get("step_s")) and _num(base.get("kernel_s")) is not None:
        st, ks = _num(base["step_s"]), _num(base["kernel_s"])
    if st and ks is not None and st > 0:
        outside = min(1.0, max(0.0, 1.0 - ks / st))
        gap = abs(1.0 - 1.0 / ratio) if ratio else 0.0     # scaled by the ratio vs. not scaled at all
        step = (1 - outside) * kernel + outside * gap
    sk = _num(base.get("kernel_spread")) or 0.0
    ss = _num(base.get("step_spread"))
    ss = sk if ss is None else ss          # no wall steps: the kernels' spread stands for the step's
    rule = base.get("rule")
    return Band(kernel=float(math.hypot(kernel, sk)), step=float(math.hypot(step, ss)), outside_share=outside,
                regimes=tuple(rows), confidence=confidence, reasons=tuple(reasons), model_kernel=float(kernel),
                model_step=float(step), spread_kernel=float(sk), spread_step=float(ss),
                outlier_steps=int(base["outlier_steps"]) if rule == BASE_RULE and "outlier_steps" in base else None,
                base_steps=int(base["steps"]) if rule == BASE_RULE and "steps" in base else None)


@dataclass(frozen=True)
class StepTimes:
    """A run's step time and kernel time, as every view shows them (:func:`step_times`).

    * ``step_s`` (*measured*): the **step**, the wall seconds of one training step on this host
      (the steps' recorded seconds over their count: sampling, kernels, the framework between them);
    * ``kernel_s`` (*measured*): the **kernel time** per step, the training-phase kernels' recorded
      seconds over the steps that recorded them, on this host's DRAM;
    * ``base_step_s`` / ``base_kernel_s`` (*measured*): the step and kernel time a projection starts
      from, the run's median step (:func:`step_base`; outlier steps, ``outlier_steps`` of them, left
      out); the means above where the projection has no per-step base;
    * for a modeled memory mode with a projection: ``ratio`` (the tier model's modeled / measured
      kernel time), ``modeled_kernel_s = base_kernel_s * ratio`` and ``modeled_step_s = base_step_s *
      ratio`` (the whole step scaled, as :func:`modeled_seconds` scales every duration), *modeled* on
      ``device`` under ``placement_assumption``.
    Missing parts are None (no steps yet, no kernel records, a DRAM run's modeled parts)."""

    step_s: Optional[float] = part(Provenance.MEASURED, default=None)
    kernel_s: Optional[float] = part(Provenance.MEASURED, default=None)
    steps: int = 0
    kernel_steps: int = 0
    device: Optional[str] = None
    ratio: Optional[float] = None
    modeled_step_s: Optional[float] = part(Provenance.MODELED, default=None)
    modeled_kernel_s: Optional[float] = part(Provenance.MODELED, default=None)
    placement_assumption: Optional[str] = None
    band: Optional[dict] = part(Provenance.MODELED, default=None)     # model_band's to_dict
    confidence: Optional[str] = None
    base_step_s: Optional[float] = part(Provenance.MEASURED, default=None)
    base_kernel_s: Optional[float] = part(Provenance.MEASURED, default=None)
    outlier_steps: Optional[int] = None

    @property
    def the_band(self) -> Optional[Band]:
        """``band`` as a :class:`Band`."""
        if not self.band:
            return None
        b = dict(self.band)
        b.pop("kind", None)
        return Band(kernel=b["kernel"], step=b["step"], outside_share=b.get("outside_share"),
                    regimes=tuple(b.get("regimes") or ()), confidence=b.get("confidence", VALIDATED),
                    reasons=tuple(b.get("reasons") or ()), model_kernel=b.get("model_kernel"),
                    model_step=b.get("model_step"), spread_kernel=b.get("spread_kernel") or 0.0,
                    spread_step=b.get("spread_step") or 0.0, outlier_steps=b.get("outlier_steps"),
                    base_steps=b.get("base_steps"))

    def to_dict(self) -> dict:
        return {"step_s": self.step_s, "kernel_s": self.kernel_s, "steps": self.steps,
                "kernel_steps": self.kernel_steps, "device": self.device, "ratio": self.ratio,
                "modeled_step_s": self.modeled_step_s, "modeled_kernel_s": self.modeled_kernel_s,
                "placement_assumption": self.placement_assumption, "band": self.band,
                "confidence": self.confidence, "base_step_s": self.base_step_s, "base_kernel_s": self.base_kernel_s,
                "outlier_steps": self.outlier_steps, "kinds": parts(self)}

    def text(self) -> str:
        """The one sentence every view prints: ``step 11.3 ms, kernel time 9.9 ms (measured on this
        host's DRAM); modeled on DEV: step 37.6 ms, kernel time 32.7 ms (3.32x)``."""
        ms = lambda v: "–" if v is None else fmt_ms(v)  # noqa: E731
        out = f"step {ms(self.step_s)}, kernel time {ms(self.kernel_s)} (measured on this host's DRAM)"
        if self.device is not None and self.ratio is not None:
            b = self.the_band
            sb = f" {fmt_band(b.step)}" if b and self.modeled_step_s is not None else ""
            kb = f" {fmt_band(b.kernel)}" if b and self.modeled_kernel_s is not None else ""
            of = ""
            if self.outlier_steps is not None and self.base_step_s is not None:
                of = (f"; from the median step, {ms(self.base_step_s)} with kernel time {ms(self.base_kernel_s)}, "
                      f"measured")
            out += (f"; modeled on {self.device}: step {ms(self.modeled_step_s)}{sb}, kernel time "
                    f"{ms(self.modeled_kernel_s)}{kb} ({self.ratio:.2f}x, modeled{of})")
            if b:
                out += f"; {b.words()}"
        return out


def step_times(step_seconds: Optional[float], steps: Optional[int], kernel_ns: Optional[float],
               kernel_steps: Optional[int], *, modeled: Optional[dict] = None,
               device: Optional[str] = None) -> StepTimes:
    """**The** step time and kernel time of a run, the one function behind every view (``runs``,
    ``runs show``, ``runs --json``, ``run``'s summary, ``whatif``, Live, Breakdown, Compare, the
    notebooks): ``step_seconds`` (measured wall seconds of ``steps`` training steps), ``kernel_ns``
    (training-phase kernel ns, :func:`training_kernel_ns`, over ``kernel_steps`` steps) and, for a
    modeled memory mode, ``modeled`` (a projection: :func:`run_step_time`'s dict or a stored
    ``result.modeled``, whose ratio scales both) on ``device`` (default: the projection's).

    The modeled step and kernel time scale the projection's robust base (``modeled["base"]``,
    :func:`step_base`: the median step, outlier steps left out), so one stalled step is not modeled
    as slow-tier cost; a projection without one (stored before it was kept) scales the means."""
    n, kn = int(steps or 0), int(kernel_steps or 0)
    wall, kns = _num(step_seconds), _num(kernel_ns)
    step_s = wall / n if n > 0 and wall is not None else None
    kernel_s = kns / 1e9 / kn if kn > 0 and kns is not None else None
    ratio, where = None, None
    if modeled:
        ratio = modeled_ratio(modeled)
        device = device or modeled.get("device")
        where = modeled.get("placement_assumption")
    if device is None:
        ratio = None
    base = (modeled or {}).get("base") if isinstance((modeled or {}).get("base"), dict) else {}
    robust = base.get("rule") == BASE_RULE
    base_step_s = (_num(base.get("step_s")) if robust else None) or step_s
    base_kernel_s = _num(base.get("kernel_s")) if robust else None
    base_kernel_s = kernel_s if base_kernel_s is None else base_kernel_s
    band = model_band(dict(modeled, ratio=ratio), step_s=step_s, kernel_s=kernel_s) if ratio is not None else None
    return StepTimes(step_s=step_s, kernel_s=kernel_s, steps=n, kernel_steps=kn, device=device, ratio=ratio,
                     modeled_step_s=modeled_seconds(base_step_s, ratio),
                     modeled_kernel_s=modeled_seconds(base_kernel_s, ratio),
                     placement_assumption=where, band=None if band is None else band.to_dict(),
                     confidence=None if band is None else band.confidence,
                     base_step_s=base_step_s if modeled else None, base_kernel_s=base_kernel_s if modeled else None,
                     outlier_steps=int(base["outlier_steps"]) if robust and "outlier_steps" in base else None)


def modeled_seconds(measured_s: Optional[float], ratio: Optional[float]) -> Optional[float]:
    """A measured duration (s: a mean step, an epoch, the whole training) of a run in a modeled
    memory mode, modeled on its device: ``measured_s`` times the run's :func:`modeled_ratio`. The
    whole duration is scaled, the part of a step outside the kernels too. None where there is no
    ratio (a DRAM run, a run still running) or no measurement."""
    if measured_s is None or ratio is None or measured_s != measured_s or ratio != ratio:
        return None
    return float(measured_s) * float(ratio)
