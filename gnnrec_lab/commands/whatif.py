"""``gnnrec-lab whatif RUN_ID --device NAME``: a measured run's kernels projected onto a tier.

Measured seconds come from the run's kernel records; modeled seconds from the
tier model (docs/tier_model.md). Every modeled figure is labelled ``modeled``.
"""
from __future__ import annotations

import json
import math

from gnnrec_lab.commands.common import bounded, run_id
from gnnrec_lab.config.bounds import MAX_BYTES, MAX_DRAM_GIB, integer, number
from gnnrec_lab.config.run import TENSOR_CLASSES
from gnnrec_lab.runs.record import StoredConfig
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance


def register(subparsers):
    p = subparsers.add_parser("whatif", help="project a measured run onto another memory tier (modeled)",
                              description=__doc__.splitlines()[0])
    p.add_argument("run_id", nargs="?", type=run_id,
                   help="id of the measured run in the run store to project (or give --records)")
    p.add_argument("--device", required=True, help="device profile to project onto: a name from "
                                                   "gnnrec_lab/memory/devices.yaml or --devices-file, or 'host' "
                                                   "(this machine's calibration)")
    p.add_argument("--records", help="JSON file of raw kernel records to project instead of a stored run "
                                     "(default: the stored run's records)")
    p.add_argument("--placement", action="append", default=[], metavar="CLASS=dram",
                   help="keep a tensor class in DRAM, the others sitting on the device; repeatable (default: the "
                        "stored run's placement, else every class on the device)")
    p.add_argument("--footprint-bytes", type=bounded(integer, "--footprint-bytes", 1, MAX_BYTES),
                   help="run footprint in bytes, for Memory Mode's "
                        "DRAM-cache hit rate (default: from the run)")
    p.add_argument("--dram-gb", type=bounded(number, "--dram-gb", 0, MAX_DRAM_GIB, lo_open=True),
                   help="DRAM cache size for Memory Mode, in GiB (default: the "
                        "device profile's)")
    p.add_argument("--remote", action="store_true", help="the device sits on the other socket")
    p.add_argument("--host-profile", help="host calibration JSON (default: gnnrec-lab calibrate's)")
    p.add_argument("--devices-file", action="append", default=[],
                   help="extra device-profile YAML file; repeatable (default: only the shipped profiles and "
                        "$GNNREC_LAB_DEVICES)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _records(args):
    if args.records:
        try:
            with open(args.records) as fh:
                recs = json.load(fh)
        except OSError as e:
            raise UserError(f"--records: cannot read {args.records} ({e.strerror})") from None
        except ValueError as e:
            raise UserError(f"--records: {args.records} is not JSON ({e})") from None
        if isinstance(recs, dict):
            recs = recs.get("records", recs.get("kernels"))
        if not isinstance(recs, list) or not all(isinstance(r, dict) for r in recs):
            raise UserError(f"--records: {args.records} must hold a list of kernel-record objects")
        return recs, None, None, StoredConfig()
    if not args.run_id:
        raise UserError("whatif: give a RUN_ID or --records FILE")
    from gnnrec_lab.services.projection import stored_run_records
    store = Store()
    store.get_run(args.run_id, need=("config",))   # a damaged config is named, not projected as defaults
    frame, steps, fp, cfg = stored_run_records(store, args.run_id)   # what every view projects
    if frame is None or len(frame) == 0:
        raise UserError(f"whatif: run {args.run_id!r} has no kernel records")
    return frame, fp, steps, cfg


def run(args) -> int:
    from gnnrec_lab.memory.calibrate import load_host_profile
    from gnnrec_lab.memory.tiermodel import OUTLIER_FACTOR, fmt_band, project, run_step_time, run_threads, step_base
    placement = {}
    for item in args.placement:
        cls, _, where = item.partition("=")
        if cls not in TENSOR_CLASSES or where not in ("dram", "device"):
            raise UserError(f"--placement: expected CLASS=dram or CLASS=device with CLASS in "
                            f"{', '.join(TENSOR_CLASSES)}, got {item!r}")
        placement[cls] = where
    records, fp, steps, cfg = _records(args)
    # by class where the run has it: a file tier's page cache holds only the classes placed there
    footprint = args.footprint_bytes if args.footprint_bytes is not None else (dict(fp) if fp else None)
    host = load_host_profile(args.host_profile)
    # a stored run keeps its own placement unless --placement says otherwise
    place = placement or cfg.placement or None
    kw = dict(footprint=footprint, remote=args.remote,
              dram_cache_bytes=int(args.dram_gb * (1 << 30)) if args.dram_gb else None,
              extra_paths=args.devices_file, threads=run_threads(cfg))   # the table and the step alike
    # per kernel, the step the projection starts from (its median step, stalled steps left out)
    base = step_base(records, getattr(records, "attrs", {}).get("step_seconds"), steps=steps)
    table = project(base.records, host, args.device, place, **kw)
    kernel = run_step_time(records, host, cfg, device=args.device, placement=place, steps=steps, **kw)
    times = _step_times(args, records, kernel)
    if args.json:
        rows = json.loads(table.to_json(orient="records"))
        print(json.dumps({"run_id": args.run_id, "device": args.device, "kind": Provenance.MODELED,
                          "measured_column": "measured_s", "modeled_column": "modeled_s",
                          "kernels": rows, "kernel_time": kernel, "step_times": times.to_dict()}, indent=2))
        return 0
    step = kernel
    hit = step.get("hit_rate")
    title = f"what if on {args.device}: measured DRAM time vs modeled device time"
    if hit is not None:
        title += f" (modeled DRAM-cache hit rate {hit:.3f})"
    print(title)
    left = (f"; {len(base.outlier_steps)} of {base.steps} steps over {OUTLIER_FACTOR:g}x the median left out"
            if base.outlier_steps else "")
    print(f"per step: the run's {base.rule} step (measured{left}) and its modeled time")
    print(f"{'kernel':<16} {'phase':<11} {'measured s':>12} {'modeled s':>12} {'band':>6} {'ratio':>7}  kind")
    for r in table.itertuples():
        ratio = "" if r.ratio is None or (isinstance(r.ratio, float) and math.isnan(r.ratio)) else f"{r.ratio:.2f}x"
        print(f"{r.name:<16} {r.phase:<11} {r.measured_s:>12.6f} {r.modeled_s:>12.6f} {fmt_band(r.band):>6} "
              f"{ratio:>7}  modeled")
    print(f"per step ({step['steps']} steps): {times.text()}; placement: {step['placement_assumption']}")
    return 0


def _step_times(args, records, kernel: dict):
    """The run's step and kernel time (:func:`~gnnrec_lab.memory.tiermodel.step_times`, as every view
    shows them) with this projection's ratio: a stored run's wall step is its own; raw records
    (``--records``) have only their kernel time."""
    from gnnrec_lab.memory.tiermodel import step_times, training_kernel_ns
    if args.run_id and not args.records:
        steps = Store().steps_frame(args.run_id)
        wall, n = (float(steps["seconds"].sum()), len(steps)) if len(steps) else (None, 0)
    else:
        wall, n = None, 0
    return step_times(wall, n, training_kernel_ns(records), kernel["steps"], modeled=kernel, device=kernel["device"])
