"""``gnnrec-lab advise``: footprint by class, whether it fits, and each memory mode's cost.

Footprint bytes are predicted (modeled). The DRAM kernel time per step (the training kernels' part
of a step) is the fastest stored DRAM run of the same shape's (measured; the run is named) when the
run store holds one, else a kernel-count model of one training step at the calibrated host's rates;
the tier model projects it onto each memory mode, so every other time printed is modeled and says
so, with the placement it assumes.
"""
from __future__ import annotations

import json

from gnnrec_lab.commands.common import add_field_argument, bounded
from gnnrec_lab.config.bounds import MAX_DRAM_GIB, number
from gnnrec_lab.config.memory_modes import memory_mode_of
from gnnrec_lab.config.run import RunConfig, mf_layers
from gnnrec_lab.memory.footprint import check_counts
from gnnrec_lab.memory.tiermodel import LOW, fmt_band
from gnnrec_lab.models.registry import model_options
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_ms


def register(subparsers):
    p = subparsers.add_parser("advise", help="memory guidance for a configuration (modeled)",
                              description=__doc__.splitlines()[0])
    add_field_argument(p, "dataset", required=True)
    add_field_argument(p, "model")
    for name in model_options():   # a model's own fields (NGCF's form)
        add_field_argument(p, name)
    add_field_argument(p, "layers")
    add_field_argument(p, "dim")
    add_field_argument(p, "batch_size")
    add_field_argument(p, "optimizer")
    add_field_argument(p, "precision")
    p.add_argument("--dram-gb", type=bounded(number, "--dram-gb", 0, MAX_DRAM_GIB, lo_open=True), required=True,
                   help=f"DRAM available to the run, in GiB (2**30 bytes), > 0 and at most {MAX_DRAM_GIB:,}")
    p.add_argument("--counts", help="dataset counts to use instead of looking the dataset up, e.g. "
                                    "n_users=943,n_items=1682,n_train=80000 (default: the prepared dataset's)")
    p.add_argument("--host-profile", help="host calibration JSON (default: gnnrec-lab calibrate's)")
    p.add_argument("--ignore-runs", action="store_true",
                   help="model the DRAM kernel time from kernel counts even when the run store holds a finished DRAM "
                        "run of this shape (default: start from the fastest such run, measured)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _reference(cfg, host):
    """The stored DRAM measurement of ``cfg``'s shape with its kernel records, or None."""
    from gnnrec_lab.services.projection import dram_reference, reference_records
    try:
        store = Store()
    except UserError:   # no readable store: the kernel-count model, as with --ignore-runs
        return None
    ref = dram_reference(store, cfg, host)
    if ref is None:
        return None
    return dict(ref, records=reference_records(store, ref["run_id"]))


def _counts(args) -> dict:
    if args.counts:
        out = {}
        for part in args.counts.split(","):
            k, eq, v = part.partition("=")
            if not eq or not k.strip():
                raise UserError(f"--counts: expected NAME=INTEGER pairs, got {part!r}")
            out[k.strip()] = v
        return check_counts(out, "--counts", strict=True)
    from gnnrec_lab.data import describe
    return describe(args.dataset)


def run(args) -> int:
    from gnnrec_lab.memory.advise import GiB, advise, assumption_text
    from gnnrec_lab.memory.calibrate import load_host_profile
    layers = mf_layers(args.model, args.layers)
    cfg = RunConfig(dataset=args.dataset, model=args.model, layers=layers, dim=args.dim,
                    batch_size=args.batch_size, optimizer=args.optimizer, precision=args.precision,
                    **{name: getattr(args, name) for name in model_options()})
    counts = _counts(args)
    host = load_host_profile(args.host_profile)
    ref = None if args.ignore_runs else _reference(cfg, host)
    a = advise(cfg, counts, host, args.dram_gb, reference=ref)
    if args.json:
        print(json.dumps(a, indent=2, default=str))
        return 0
    c = a["config"]
    print(f"advice for {c['model']} ({c['layers']} layers, dim {c['dim']}, batch {c['batch_size']}) on "
          f"{c['dataset']}: {counts['n_users']:,} users, {counts['n_items']:,} items, "
          f"{counts['n_train']:,} training interactions")
    print("footprint by tensor class (modeled, predicted before a run):")
    for cls, b in sorted(a["footprint"].items(), key=lambda kv: -kv[1]):
        print(f"  {cls:<20} {b / GiB:>10.3f} GiB  modeled")
    print(f"  {'total':<20} {a['footprint_total'] / GiB:>10.3f} GiB  modeled")
    fits = "fits" if a["fits_in_dram"] else "does NOT fit"
    print(f"DRAM {args.dram_gb:g} GiB: the run {fits} in DRAM (modeled)")
    src = a["step_source"]
    print(f"DRAM kernel time per step: {src['text']}")
    if ref is not None:
        spread = ", ".join(f"#{x['run_id']} {fmt_ms(x['measured_s'])}" + (" (load > cores)" if x["overloaded"]
                                                                           else "") for x in ref["runs"])
        print(f"  stored DRAM runs of this shape (kernel time per step, measured): {spread}")
    print("memory modes (kernel time per step modeled from the DRAM kernel time and the tier model; App Direct, "
          "CXL and remote NUMA keep the advised split in DRAM, 'all on device' puts every tensor class on the "
          "device, as whatif and the Launch page do):")
    print(f"  {'mode':<20} {'device':<30} {'kernel s':>16} {'vs dram':>8} {'all on device':>14}  placement / note")
    low = []
    for mode, r in a["modes"].items():
        t = r.get("modeled_kernel_s")
        band = r.get("band")
        ts = (f"{t:.4f}" + (f" {fmt_band(band['kernel'])}" if band else "")) if t else "-"
        if band and band["confidence"] == LOW:
            low.append(f"{mode}: low confidence: {'; '.join(band['reasons'])}")
        rr = f"{r['ratio_to_dram']:.2f}x" if r.get("ratio_to_dram") else "-"
        aod = f"{r['all_on_device_ratio']:.2f}x" if r.get("all_on_device_ratio") else "-"
        if "keep_in_dram" in r:
            how = f"keep in DRAM: {', '.join(r['keep_in_dram']) or 'nothing'}"
            if r.get("note"):
                how += f" ({r['note']})"
        else:
            how = r.get("note", "")
        if memory_mode_of(mode).measured and not r.get("fits"):
            how = r.get("note", "")
        print(f"  {mode:<20} {r['device']:<30} {ts:>16} {rr:>8} {aod:>14}  {how}  "
              f"{assumption_text(r['kind'], r['placement_assumption'])}")
    print("  ± on a modeled kernel time: the held-out error of the regimes its modeled traffic falls in "
          "(docs/tier_model.md)")
    for line in low:
        print(f"  {line}")
    if a["recommended_mode"]:
        print(f"recommended (modeled): {a['recommended_mode']}: {a['recommended_reason']}")
    return 0
