"""Configuration guidance: does it fit, what does each memory mode cost, what to keep in DRAM.

Before any run exists, :func:`step_records` builds the kernel records one
training step *would* produce (bytes, flops, access pattern per kernel and
layer, derived from the configuration and the dataset counts) and gives each a
host time from the calibrated host's rates (roofline: the larger of memory time
and compute time). Those times are **modeled**, and so is everything derived
from them: the tier model then projects them onto each memory mode, and
:func:`recommend_placement` searches which tensor classes to keep in DRAM.
"""
from __future__ import annotations

import itertools
from typing import Optional

from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE
from gnnrec_lab.config.run import TENSOR_CLASSES
from gnnrec_lab.kernels import costs
from gnnrec_lab.memory import tiermodel
from gnnrec_lab.memory.footprint import F32, optimizer_states, total
from gnnrec_lab.memory.footprint import footprint as predict_footprint
from gnnrec_lab.memory.profiles import host_device
from gnnrec_lab.memory.tiermodel import ALL_ON_DEVICE, TRAIN_PHASES, ns_per_byte, prepare, project_step, split_bytes
from gnnrec_lab.models.registry import Shape, kernel_work, model_spec, shape_keys
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.recorder import KernelRecord

# Every memory mode advise compares -> the device profile it is modeled with by default
# (a measured mode, dram, on the host's own profile; the others on their device,
# config.memory_modes).
ADVISED_MODE_DEVICES = {name: m.device or "host" for name, m in MEMORY_MODE_TABLE.items()}
GiB = 1 << 30


def step_kernels(config, counts: dict) -> list:
    """Kernel work of one training step (no times): dicts with KernelRecord fields but ``ns``, ``backend``
    and ``provenance`` (:func:`step_records` adds them).

    Approximations (documented in docs/tier_model.md): backward kernels mirror forward ones
    (the adjacency is symmetric; GEMM backward does twice the flops); elementwise work is
    counted as streams; gradients are dense; the optimizer touches every parameter.
    """
    nu, ni, nt = counts["n_users"], counts["n_items"], counts["n_train"]
    n, e, d, L = nu + ni, 2 * nt, config.dim, config.layers
    b = min(config.batch_size, max(nt, 1))
    # the model's kernel hooks (gnnrec_lab.models.registry): each layer's kernels, its output width
    spec, s = model_spec(config.model), Shape.of(config, n, e, d)
    out = []
    for phase in ("forward", "backward"):
        for k in range(L):
            out.extend(spec.layer_kernels(config, phase, k, s))
    d_out = spec.output_width(config)
    # the fused loss terms (kernels.bpr_l2_loss: BPR on the output rows, L2 on layer 0's); after
    # LightGCN's layer mean the L2 gradient is added in the mean's backward (value only in the loss)
    deferred = spec.deferred_l2(config)
    terms = [("bpr_loss", "loss", -1, costs.bpr_rows(b, n, d_out, F32, 8)),
             ("l2_reg", "loss", 0, costs.sq_norm_rows(3 * b, n, d, F32, 8, part="value" if deferred else "both"))]
    if deferred:
        terms.append(("l2_reg", "backward", 0, costs.sq_norm_rows(3 * b, n, d, F32, 8, part="grad")))
    for name, phase, layer, c in terms:
        out.append(kernel_work(name, phase, layer, c["bytes_read"], c["bytes_written"], c["flops"], c["pattern"],
                               c["row_bytes"], c["random_bytes"]))
    p = spec.parameters(config, s)
    st = optimizer_states(config.optimizer, config.momentum)
    name = "sgd" if config.optimizer == "sgd" else config.optimizer
    out.append(kernel_work("zero_grad", "optimizer", -1, 0, F32 * p, 0, "stream"))
    out.append(kernel_work(name, "optimizer", -1, F32 * p * (2 + st), F32 * p * (1 + st), 4 * p * (1 + st), "stream"))
    return out


def step_records(config, counts: dict, host: dict) -> list:
    """:func:`step_kernels` with a modeled host time each (ns): roofline of the host's measured
    stream/gather rates and GEMM rate at the config's threads (:func:`tiermodel.run_threads`, else
    the calibration's). The records' ``provenance`` is MODELED (no ``backend`` ran them)."""
    hp = host_device(host)
    threads = tiermodel.run_threads(config) or hp.threads
    gemm = 1.0 / hp.gemm_GFLOPs if hp.gemm_GFLOPs else 0.0
    recs = []
    for r in step_kernels(config, counts):
        parts = split_bytes(r["bytes_read"], r["bytes_written"], r["random_bytes"], r["pattern"])
        mem = sum(nb * ns_per_byte(hp, comp, r["row_bytes"], threads, False, None) for comp, nb in parts.items() if nb)
        ns = max(mem, r["flops"] * gemm)
        recs.append(KernelRecord(r["name"], r["phase"], r["layer"], r["step"], int(round(ns)), r["bytes_read"],
                                 r["bytes_written"], r["flops"], r["pattern"], r["row_bytes"], r["random_bytes"],
                                 "", Provenance.MODELED))
    return recs


def recommend_placement(records, host: dict, device: str, fp: dict, dram_bytes: int,
                        threads: Optional[int] = None) -> dict:
    """Which classes to keep in DRAM when the rest sits on ``device`` (App Direct, CXL, remote NUMA).

    Exhaustive search over subsets of the tensor classes (2^7): keep the subset whose bytes fit in
    ``dram_bytes`` minus the runtime and whose modeled kernel time per step is lowest (ties: fewer DRAM bytes).
    Returns ``{"dram": [...], "device": [...], "dram_bytes_used", "modeled_kernel_s", "kind"}`` (kind MODELED).
    """
    classes = [c for c in TENSOR_CLASSES if fp.get(c, 0) > 0]
    room = dram_bytes - fp.get("runtime", 0)
    best = None
    train = [r for r in records if r.phase in TRAIN_PHASES]
    steps = max(1, len({r.step for r in train if r.step >= 0}))
    pr = prepare(train, host, device, threads=threads)
    for k in range(len(classes) + 1):
        for keep in itertools.combinations(classes, k):
            used = sum(fp[c] for c in keep)
            if used > room:
                continue
            placement = {c: ("dram" if c in keep else "device") for c in TENSOR_CLASSES}
            t = sum(pr.modeled_ns(placement)) / 1e9 / steps
            key = (round(t, 12), used)
            if best is None or key < best[0]:
                best = (key, list(keep), used, t)
    if best is None:
        return {"dram": [], "device": classes, "dram_bytes_used": 0, "modeled_kernel_s": None,
                "kind": Provenance.MODELED,
                "note": "not even the runtime fits in DRAM"}
    _, keep, used, t = best
    return {"dram": keep, "device": [c for c in classes if c not in keep], "dram_bytes_used": int(used),
            "modeled_kernel_s": t, "kind": Provenance.MODELED}


# The placement each advise row assumes, in the words every view uses.
ADVISED_SPLIT = "the advised split"
ALL_IN_DRAM = "all tensor classes in DRAM"


def cached_placement(placement_words: str = tiermodel.ALL_ON_DEVICE) -> str:
    """A Memory Mode number's placement in words: the classes on the device, which DRAM caches."""
    return f"{placement_words} (DRAM caches Optane)"


def cache_note(dram_bytes: float, hit_rate: float) -> str:
    """What a Memory Mode number assumes of its DRAM cache: its size and the modeled hit rate (the
    words ``advise`` prints, and the Launch page beside each such number)."""
    return f"DRAM ({dram_bytes / GiB:g} GiB) caches Optane; modeled hit rate {hit_rate:.3f}"


def assumption_text(kind, placement_words: str) -> str:
    """``[modeled; placement: ...]``: what kind a number is and the placement it assumes, as ``advise``
    prints it beside each memory mode (and the Launch page beside each number)."""
    return f"[{kind}; placement: {placement_words}]"


# Step times within this relative difference are a tie (sums in another order differ in the last bits).
TIE = 1e-9


def recommend(modes: dict, fits_in_dram: bool) -> tuple:
    """``(mode, reason)``: the fitting mode with the lowest modeled kernel time per step; ties go to the mode
    listed first (``dram`` first: a tier is never faster than DRAM in the model, so a run that fits
    in DRAM gets DRAM)."""
    fitting = [(m, r["modeled_kernel_s"]) for m, r in modes.items() if r.get("fits") and r.get("modeled_kernel_s")]
    if not fitting:
        return None, "no memory mode fits"
    fastest = min(t for _, t in fitting)
    best = next(m for m, t in fitting if t <= fastest * (1 + TIE))
    if MEMORY_MODE_TABLE[best].measured:
        return best, "fits in DRAM, and no memory mode is modeled faster than DRAM"
    others = ", ".join(f"{m} {t:.4g} s" for m, t in fitting if m != best)
    why = "does not fit in DRAM; " if not fits_in_dram else ""
    return best, f"{why}lowest modeled kernel time per step among the modes that fit ({others or 'none other'})"


def advise(config, counts: dict, host: dict, dram_gb: float, runtime_bytes: Optional[int] = None,
           reference: Optional[dict] = None) -> dict:
    """Guidance for ``config`` on a machine with ``dram_gb`` GiB of DRAM (one JSON-ready dict).

    ``footprint`` (modeled bytes by class), ``fits_in_dram``, and per memory mode the modeled
    kernel time per step (the training kernels' part of a step; the wall step needs a run), its
    ratio to DRAM, the Memory Mode hit rate and the recommended placement.
    The DRAM kernel time is the stored measurement ``reference`` (:func:`dram_reference` plus its
    ``records``, :func:`reference_records`) when one is given, else modeled from the kernel
    counts (:func:`step_records`); ``step_source`` says which. Each mode names its
    ``placement_assumption``: App Direct, CXL and remote NUMA use the advised split (their
    ``modeled_kernel_s``) and also give ``all_on_device_kernel_s``, the kernel time with every tensor
    class on the device (what ``whatif`` and the Launch page show for a run without placement).
    """
    fp = predict_footprint(config, counts=counts, runtime_bytes=runtime_bytes)
    need = total(fp)
    dram_bytes = int(dram_gb * GiB)
    if reference is not None:
        recs = reference["records"]
        source = {"kind": Provenance.MEASURED, "run_id": reference["run_id"], "rule": reference.get("rule", "fastest"),
                  "text": f"measured in run #{reference['run_id']} (the {reference.get('rule', 'fastest')} of "
                          f"{len(reference.get('runs') or [1])} stored DRAM run(s) of this shape)"}
    else:
        recs = step_records(config, counts, host)
        source = {"kind": Provenance.MODELED, "run_id": None,
                  "text": "modeled from the configuration's kernel counts at the calibrated host's rates "
                          "(no stored DRAM run of this shape)"}
    th = tiermodel.run_threads(config)    # the thread count every modeled kernel time of a run uses
    base = project_step(recs, host, "host", threads=th)
    base_s = base["measured_s"] if reference is not None else base["modeled_s"]
    modes = {}
    for mode, dev in ADVISED_MODE_DEVICES.items():
        row = {"device": dev, "kind": Provenance.MODELED}
        placed = MEMORY_MODE_TABLE[mode].placement    # config.memory_modes.PLACEMENTS
        if placed == "dram":
            row.update(modeled_kernel_s=base_s, fits=need <= dram_bytes, kind=source["kind"],
                       placement={c: "dram" for c in TENSOR_CLASSES},
                       placement_assumption=ALL_IN_DRAM)
            if need > dram_bytes:
                row["note"] = f"needs {need / GiB:.2f} GiB, DRAM has {dram_gb:g} GiB: will not fit"
        elif placed == "cache":
            st = project_step(recs, host, dev, footprint=need, dram_cache_bytes=dram_bytes, threads=th)
            row.update(modeled_kernel_s=st["modeled_s"], hit_rate=st["hit_rate"], fits=True, band=st["band"],
                       placement={c: "memory_mode" for c in TENSOR_CLASSES},
                       placement_assumption=cached_placement(ALL_ON_DEVICE),
                       note=cache_note(dram_bytes, st["hit_rate"]))
        else:
            recommended = recommend_placement(recs, host, dev, fp, dram_bytes, threads=th)
            row.update(modeled_kernel_s=recommended["modeled_kernel_s"],
                       fits=recommended["modeled_kernel_s"] is not None,
                       keep_in_dram=recommended["dram"], on_device=recommended["device"],
                       placement={c: ("dram" if c in recommended["dram"] else "device") for c in TENSOR_CLASSES},
                       placement_assumption=ADVISED_SPLIT,
                       all_on_device_kernel_s=project_step(recs, host, dev, threads=th)["modeled_s"])
            if recommended.get("note"):
                row["note"] = recommended["note"]
            if recommended["modeled_kernel_s"] is not None:   # the band of the advised split (model_band)
                row["band"] = project_step(recs, host, dev, placement=row["placement"], threads=th)["band"]
        if row.get("band"):
            row["confidence"] = row["band"]["confidence"]
        t = row.get("modeled_kernel_s")
        row["ratio_to_dram"] = t / base_s if t and base_s else None
        if row.get("all_on_device_kernel_s") and base_s:
            row["all_on_device_ratio"] = row["all_on_device_kernel_s"] / base_s
        if "keep_in_dram" in row and row["ratio_to_dram"] and row["ratio_to_dram"] <= 1 + TIE and not row.get("note"):
            row["note"] = (f"as fast as dram only because the classes left on the device "
                           f"({', '.join(row['on_device']) or 'none'}) carry no modeled step traffic")
        modes[mode] = row
    best, reason = recommend(modes, need <= dram_bytes)
    return {"config": {k: getattr(config, k) for k in ("dataset", "model", *shape_keys(config.model), "layers", "dim",
                                                         "batch_size", "optimizer", "precision")},
            "counts": dict(counts), "dram_bytes": dram_bytes,
            "footprint": fp, "footprint_total": need, "footprint_kind": Provenance.MODELED,
            "fits_in_dram": need <= dram_bytes, "modes": modes, "recommended_mode": best,
            "recommended_reason": reason, "kind": Provenance.MODELED, "step_source": source,
            "host": {k: host.get(k) for k in ("cpu", "threads", "triad_GBps", "gather64_GBps", "measured_at")}}
