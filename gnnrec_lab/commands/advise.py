"""``gnnrec-lab advise``: footprint by class, whether it fits, and each memory mode's cost.

Footprint bytes are predicted (modeled); step times come from a kernel-count
model of one training step at the calibrated host's rates, projected by the
tier model, so every time printed is modeled and says so.
"""
from __future__ import annotations

import json

from ..errors import UserError
from .common import add_field_argument, positive_float


def register(subparsers):
    p = subparsers.add_parser("advise", help="memory guidance for a configuration (modeled)",
                              description=__doc__.splitlines()[0])
    add_field_argument(p, "dataset", required=True)
    add_field_argument(p, "model")
    add_field_argument(p, "ngcf_form")
    add_field_argument(p, "layers", type=int)
    add_field_argument(p, "dim", type=int)
    add_field_argument(p, "batch_size", type=int)
    add_field_argument(p, "optimizer")
    p.add_argument("--dram-gb", type=positive_float, required=True,
                   help="DRAM available to the run, in GiB (2**30 bytes)")
    p.add_argument("--counts", help="dataset counts to use instead of looking the dataset up, e.g. "
                                    "n_users=943,n_items=1682,n_train=80000 (default: the prepared dataset's)")
    p.add_argument("--host-profile", help="host calibration JSON (default: gnnrec-lab calibrate's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _counts(args) -> dict:
    if args.counts:
        out = {}
        for part in args.counts.split(","):
            k, _, v = part.partition("=")
            try:
                out[k.strip()] = int(v)
            except ValueError:
                raise UserError(f"--counts: expected NAME=INTEGER pairs, got {part!r}") from None
        return out
    try:
        from ..data import describe
    except ImportError:
        raise UserError("--counts is needed: the dataset registry is not available") from None
    return describe(args.dataset)


def run(args) -> int:
    from ..config import RunConfig
    from ..memory.advise import GiB, advise
    from ..memory.profiles import load_host_profile
    if args.dram_gb <= 0:
        raise UserError(f"--dram-gb: must be a positive number of GiB, got {args.dram_gb}")
    layers = 0 if args.model == "mf" else args.layers
    cfg = RunConfig(dataset=args.dataset, model=args.model, ngcf_form=args.ngcf_form, layers=layers,
                    dim=args.dim, batch_size=args.batch_size, optimizer=args.optimizer)
    counts = _counts(args)
    host = load_host_profile(args.host_profile)
    a = advise(cfg, counts, host, args.dram_gb)
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
    print("memory modes (step times modeled from the calibrated host and the tier model):")
    print(f"  {'mode':<20} {'device':<30} {'modeled step s':>15} {'vs dram':>8}  placement / note")
    for mode, r in a["modes"].items():
        t = r.get("modeled_step_s")
        ts = f"{t:.4f}" if t else "-"
        rr = f"{r['ratio_to_dram']:.2f}x" if r.get("ratio_to_dram") else "-"
        if "keep_in_dram" in r:
            how = f"keep in DRAM: {', '.join(r['keep_in_dram']) or 'nothing'}"
            if r.get("note"):
                how += f" ({r['note']})"
        else:
            how = r.get("note", "")
        if mode == "dram" and not r.get("fits"):
            how = r.get("note", "")
        print(f"  {mode:<20} {r['device']:<30} {ts:>15} {rr:>8}  {how}  [modeled]")
    if a["recommended_mode"]:
        print(f"recommended (modeled): {a['recommended_mode']}: {a['recommended_reason']}")
    return 0
