"""``gnnrec-lab devices list | show NAME | validate``: the device profiles, their modeled curves,
and the model held against published measurements (fitted and held out).

Every bandwidth and latency these commands derive from a profile is *modeled* (``kind`` MODELED
in JSON, the word ``modeled`` on every printed row); ``published`` values are the literature's.
"""
from __future__ import annotations

import json

from gnnrec_lab.memory.profiles import load_profiles, misses_in_flight
from gnnrec_lab.memory.validation import FIT_TOLERANCE, HELD_OUT_TARGET, device_curves, format_params, validate
from gnnrec_lab.util.errors import UserError


def register(subparsers):
    p = subparsers.add_parser("devices", help="device profiles: list, modeled curves, validation against "
                                              "published measurements", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="devices_command", metavar="ACTION")
    ls = sub.add_parser("list", help="profiles with platform, baseline, source and confidence")
    ls.add_argument("--json", action="store_true", help="print the profiles as one JSON list of objects")
    sh = sub.add_parser("show", help="a profile's modeled bandwidth against access size, threads and "
                                     "read/write mix, and its latencies")
    sh.add_argument("name", help="profile name (see `gnnrec-lab devices list`)")
    sh.add_argument("--json", action="store_true", help="print one JSON object")
    va = sub.add_parser("validate", help="every published point next to the model's value and the error")
    va.add_argument("--json", action="store_true", help="print a JSON list of objects")
    va.add_argument("--strict", action="store_true", help="exit 1 when a point misses its tolerance "
                                                          "(1%% fitted, 15%% held out)")
    for q in (ls, sh, va):
        q.add_argument("--devices-file", action="append", default=[],
                       help="extra device-profile YAML file; repeatable (default: only the shipped profiles and "
                            "$GNNREC_LAB_DEVICES)")
        q.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _host_mlp():
    """Misses in flight per thread from the cached host calibration (None when there is none)."""
    from gnnrec_lab.memory.calibrate import load
    return misses_in_flight(load())


def run(args) -> int:
    profiles = load_profiles(args.devices_file)
    if args.devices_command == "list":
        return _list(profiles, args.json)
    if args.devices_command == "show":
        if args.name not in profiles:
            raise UserError(f"devices show: unknown profile {args.name!r}; known: {', '.join(sorted(profiles))}")
        return _show(profiles[args.name], args.json)
    return _validate(profiles, args.json, args.strict)


def _list(profiles, as_json: bool) -> int:
    rows = [dict(p.summary(), notes=p.notes) for p in profiles.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'profile':<30} {'kind':<17} {'conf':<5} {'baseline':<16} {'sources':<26} platform")
    for r in rows:
        print(f"{r['name']:<30} {r['kind']:<17} {r['conf']:<5} {str(r['baseline'] or ''):<16} "
              f"{','.join(r['sources']):<26} {r['platform']}")
    print("published or derived numbers (devices.yaml); what the model makes of them is modeled")
    return 0


def _show(p, as_json: bool) -> int:
    c = device_curves(p, mlp=_host_mlp())
    if as_json:
        print(json.dumps(c, indent=2))
        return 0
    print(f"{p.name} ({p.kind}, conf {p.conf}): {p.platform}")
    print(f"  baseline {p.baseline}; sources {', '.join(p.sources)}")
    if p.is_memory_mode:
        print(f"  Memory Mode: hits run at {p.hit_profile.name}, misses on {c['curves_of']} (below); "
              f"DRAM cache {p.dram_cache_bytes / 2**30:.0f} GiB")
    print(f"  latency (modeled): read {c['latency_ns']['read']:.1f} ns, write {c['latency_ns']['write']:.1f} ns")
    nt = any("random_write_ntstore_GBps" in r for r in c["access_size"])
    print("\n  random rows against access size, best thread count (GB/s, modeled)")
    print(f"  {'bytes':>6} {'read':>8} {'write':>8}" + (f" {'ntstore':>8}" if nt else "") + "  kind")
    for r in c["access_size"]:
        extra = f" {r['random_write_ntstore_GBps']:>8.2f}" if nt else ""
        print(f"  {r['bytes']:>6} {r['random_read_GBps']:>8.2f} {r['random_write_GBps']:>8.2f}{extra}  modeled")
    if p.kind == "file" and p.dram_cache_bytes:
        print(f"  page cache in front of it: {p.dram_cache_bytes / 2**30:.2f} GiB (hits cost this host's DRAM time)")
    mlp = c["misses_in_flight_per_thread"]
    floor = ("no latency floor: a measured profile (its rates are this host's, at its thread count)" if p.measured
             else f"latency floor: {mlp:.1f} misses in flight per thread, from this host's calibration" if mlp
             else "no latency floor: no host calibration (run `gnnrec-lab calibrate`)")
    print(f"\n  against threads (GB/s, modeled; {floor})")
    print(f"  {'threads':>7} {'seq read':>9} {'seq write':>9} {'rand 64B':>9} {'rand 256B':>9}  kind")
    for r in c["threads"]:
        print(f"  {r['threads']:>7} {r['read_GBps']:>9.2f} {r['write_GBps']:>9.2f} {r['random_read_64B_GBps']:>9.2f} "
              f"{r['random_read_256B_GBps']:>9.2f}  modeled")
    if c["mixed"]:
        print(f"\n  read/write mix ({c['mixed_threads']} threads, the measured series; GB/s, modeled)")
        remote = "remote_GBps" in c["mixed"][0]
        print(f"  {'write share':>11} {'local':>8} {'interf.':>8}" + (f" {'remote':>8} {'interf.':>8}" if remote
                                                                       else "") + "  kind")
        for r in c["mixed"]:
            extra = f" {r['remote_GBps']:>8.2f} {r['remote_interference']:>7.2f}x" if remote else ""
            print(f"  {r['write_share']:>11.2f} {r['GBps']:>8.2f} {r['interference']:>7.2f}x{extra}  modeled")
    else:
        print("\n  read/write mix: no measured series; reads and writes are taken as independent (modeled)")
    return 0


def _validate(profiles, as_json: bool, strict: bool) -> int:
    rows = validate(profiles)
    misses = [r for r in rows if not r["ok"]]
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'device':<28} {'quantity':<18} {'params':<30} {'published':>9} {'modeled':>9} {'error':>8} "
              f"{'point':<8} result  source")
        for r in rows:
            print(f"{r['device']:<28} {r['quantity']:<18} {format_params(r['params']):<30} {r['published']:>9.3g} "
                  f"{r['modeled']:>9.3g} {r['error'] * 100:>+7.1f}% {'held out' if r['held_out'] else 'fitted':<8} "
                  f"{'ok' if r['ok'] else 'MISS':<6}  {r['source']}")
        held = [r for r in rows if r["held_out"]]
        print(f"{len(held) - sum(not r['ok'] for r in held)}/{len(held)} held-out points within "
              f"{HELD_OUT_TARGET:.0%}; {sum(r['ok'] for r in rows if not r['held_out'])}/{len(rows) - len(held)} "
              f"fitted points within {FIT_TOLERANCE:.0%} (modeled against published)")
    return 1 if (strict and misses) else 0
