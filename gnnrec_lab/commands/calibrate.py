"""``gnnrec-lab calibrate``: measure this machine's bandwidth, latency and GEMM rate.

Writes ``$GNNREC_LAB_HOME/calibration.json``, the measured "host" profile used as
the roofline's ceilings and the tier model's baseline.
"""
from __future__ import annotations

import json


def register(subparsers):
    p = subparsers.add_parser("calibrate", help="measure memory bandwidth/latency and GEMM rate of this host",
                              description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and smaller sizes (~10 s)")
    p.add_argument("--show", action="store_true", help="print the cached calibration without measuring")
    p.add_argument("--json", action="store_true", help="print the profile as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from .. import calibrate
    if args.show:
        prof = calibrate.host_profile(measure_if_missing=False)
        path = calibrate.calibration_path()
    else:
        prof = calibrate.measure(quick=args.quick)
        path = calibrate.save(prof)
    if args.json:
        print(json.dumps(prof, indent=2, sort_keys=True))
    else:
        print(calibrate.format_profile(prof))
        print(f"saved in {path}" if not args.show else f"from {path}")
    return 0
