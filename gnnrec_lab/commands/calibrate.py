"""``gnnrec-lab calibrate``: measure this machine's bandwidth, latency and GEMM rate.

Writes ``$GNNREC_LAB_HOME/calibration.json``, the measured "host" profile used as
the roofline's ceilings and the tier model's baseline.
"""
from __future__ import annotations

import json

from gnnrec_lab.util.cgroup import parse_size
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.home import ensure_home, refuse_a_file


def register(subparsers):
    p = subparsers.add_parser("calibrate", help="measure memory bandwidth/latency and GEMM rate of this host",
                              description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and smaller sizes (~10 s)")
    p.add_argument("--show", action="store_true", help="print the cached calibration without measuring")
    p.add_argument("--json", action="store_true", help="print the profile as one JSON object")
    p.add_argument("--verdict", action="store_true", help="print only the verdict (one or two lines): measured "
                   "on a quiet machine or under load, what that means, and how to fix a flagged one")
    p.add_argument("--tier", metavar="file:DIR", help="measure the storage under DIR (what --placement "
                   "CLASS=file:DIR reaches when a page is not cached) with direct I/O as a device profile; "
                   "writes $GNNREC_LAB_HOME/devices/NAME.yaml (use it with --devices-file); default: measure the host "
                   "instead")
    p.add_argument("--tier-name", default="file_tier", help="profile name for --tier (default file_tier)")
    p.add_argument("--tier-file-size", default="512M", help="size of the measured file for --tier (default 512M)")
    p.add_argument("--tier-cache", help="page cache in front of the tier for --tier (default: the memory "
                                        "available now; give a run's memory limit minus its own memory)")
    p.set_defaults(func=run)


def _tier(args) -> int:
    from gnnrec_lab.memory import calibrate
    kind, _, directory = args.tier.partition(":")
    if kind != "file" or not directory:
        raise UserError(f"--tier: expected file:DIR, got {args.tier!r}")
    if not args.tier_name.replace("_", "").replace("-", "").isalnum():
        raise UserError(f"--tier-name: letters, digits, '-' and '_' only, got {args.tier_name!r}")
    ensure_home(write=True)   # before measuring: the profile goes there
    m = calibrate.measure_file_tier(directory, file_bytes=parse_size(args.tier_file_size, "--tier-file-size"),
                                    quick=args.quick)
    prof = calibrate.file_tier_profile(m, args.tier_name, parse_size(args.tier_cache, "--tier-cache")
                                       if args.tier_cache else None)
    path = calibrate.save_file_profile(prof)
    if args.json:
        print(json.dumps({"measured": m, "profile": prof, "path": str(path)}, indent=2))
        return 0
    print(f"file tier {directory} (measured with direct I/O, {m['threads']} threads, "
          f"{m['file_bytes'] / 2**20:.0f} MiB file, load {m['loadavg']:.2f})")
    for key, label in (("seq_read_GBps", "sequential 1 MiB read"), ("seq_write_GBps", "sequential 1 MiB write"),
                       ("rand_read_4k_GBps", "random 4 KiB read"), ("rand_write_4k_GBps", "random 4 KiB write"),
                       ("mixed_1to1_4k_GBps", "random 4 KiB 1:1 read/write")):
        print(f"  {label:<30} {m[key]:>10.4f} GB/s  measured")
    print(f"  {'4 KiB read latency, 1 thread':<30} {m['read_latency_ns'] / 1e3:>10.1f} us    measured")
    print(f"  {'4 KiB write latency, 1 thread':<30} {m['write_latency_ns'] / 1e3:>10.1f} us    measured")
    cache = prof.get("dram_cache_bytes")
    if cache:
        print(f"  page cache in front of it: {cache / 2**30:.2f} GiB "
              f"({'given' if args.tier_cache else 'available now'})")
    print(f"saved as profile {prof['name']!r} in {path}")
    return 0


def run(args) -> int:
    from gnnrec_lab.memory import calibrate
    if args.tier:
        return _tier(args)
    if args.show:
        refuse_a_file()
        prof = calibrate.host_profile(measure_if_missing=False)
        path = calibrate.calibration_path()
    else:
        ensure_home(write=True)   # before measuring for a minute: the calibration goes there
        prof = calibrate.measure(quick=args.quick)
        path = calibrate.save(prof)
    if args.json:
        print(json.dumps(prof, indent=2, sort_keys=True))
    elif args.verdict:
        print(calibrate.calibration_verdict(prof))
    else:
        print(calibrate.format_profile(prof))
        print(f"saved in {path}" if not args.show else f"from {path}")
    return 0
