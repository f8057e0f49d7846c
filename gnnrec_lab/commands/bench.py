"""``gnnrec-lab bench kernels|recording``: kernel speed against this host's bandwidth bound.

``kernels``: every kernel (SpMM, SDDMM dot/mul, edge aggregation, gather) forward
and backward, per backend (and PyG's SpMM when importable), on synthetic
power-law graphs; median time and spread (measured), GB/s and % of the bound
(ideal bytes / measured triad bandwidth). ``recording``: the cost of kernel
recording on a LightGCN-like step.
"""
from __future__ import annotations

import json
import sys

from ..errors import UserError


def _csv(kind):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise UserError(f"--{kind}: empty list")
        return items
    return parse


def _ints(text):
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"--dims: expected comma-separated integers, got {text!r}") from None


def register(subparsers):
    p = subparsers.add_parser("bench", help="benchmark kernels against the host's bandwidth bound",
                              description=__doc__.splitlines()[0])
    p.add_argument("target", choices=("kernels", "recording"),
                   help="what to benchmark: kernels (each sparse kernel's speed against the bandwidth bound) or "
                        "recording (what kernel recording adds to a training step)")
    p.add_argument("--sizes", type=_csv("sizes"), default=["small", "medium"],
                   help="synthetic graphs to run on, comma-separated: small, medium, large (~200k nodes, 5M "
                        "non-zeros) (default: small,medium)")
    p.add_argument("--dims", type=_ints, default=[16, 64, 256],
                   help="embedding dimensions to run at, comma-separated (default: 16,64,256)")
    p.add_argument("--backends", type=_csv("backends"), default=None,
                   help="kernel backends to compare, comma-separated (default: every backend installed here)")
    p.add_argument("--kernels", type=_csv("kernels"), default=None,
                   help="kernels to time, a comma-separated subset of spmm, sddmm_dot, sddmm_mul, spmm_edge, "
                        "gather (default: all)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed repeats after one warm-up (default: 5 for kernels, 30 A/B pairs for recording)")
    p.add_argument("--no-pyg", action="store_true", help="skip PyG's SpMM")
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..calibrate import host_profile
    from .. import benchmarking as bench
    if args.target == "recording":
        res = bench.recording_overhead(size=args.sizes[0], dim=args.dims[0],
                                       repeats=30 if args.repeats is None else max(args.repeats, 3))
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            print(f"full LightGCN training step ({res['layers']} layers, BPR + L2 on 2048 triples, Adam) on {res['graph']} "
                  f"(nnz {res['nnz']:,}), D={res['dim']}, median of {res['repeats']} (measured):")
            print(f"  recorded   {res['recorded_s'] * 1e3:9.2f} ms  (range {res['recorded_range_s'][0] * 1e3:.2f}.."
                  f"{res['recorded_range_s'][1] * 1e3:.2f})")
            print(f"  unrecorded {res['unrecorded_s'] * 1e3:9.2f} ms  (range {res['unrecorded_range_s'][0] * 1e3:.2f}.."
                  f"{res['unrecorded_range_s'][1] * 1e3:.2f})")
            lo, hi = res["overhead_iqr_pct"]
            print(f"  overhead   {res['overhead_pct']:+.2f}% (median of {res['repeats']} paired ratios, "
                  f"quartiles {lo:+.2f}..{hi:+.2f}%)")
            print(f"  per record {res['per_record_s'] * 1e6:.1f} us x {res['records_per_step']} records per step = "
                  f"{res['derived_overhead_pct']:.2f}% of the unrecorded step (target <= 3%: "
                  f"{'met' if res['derived_overhead_pct'] <= 3 else 'NOT met'})")
        return 0
    host = host_profile(measure_if_missing=True, quick=True)
    progress = None
    if not args.json:
        print(bench.machine_line(host))
        print(bench.pyg_note())
        print(bench.dgl_note())
        from ..analysis import BOUND_NOTE
        print(BOUND_NOTE)
        print(bench.HEADER)
        progress = print
    results = bench.run_kernel_bench(sizes=args.sizes, dims=args.dims, backends=args.backends,
                                     kernels=args.kernels or bench.KERNELS, repeats=args.repeats or 5, host=host,
                                     include_pyg=not args.no_pyg, progress=progress)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print("summary (reported, not asserted):")
        for line in bench.summary(results):
            print("  " + line)
    sys.stdout.flush()
    return 0
