"""``gnnrec-lab bench kernels|recording``: kernel speed against this host's bandwidth bound.

``kernels``: every kernel (SpMM, SDDMM dot/mul, edge aggregation, gather) forward
and backward, per backend (and PyG's SpMM when importable), on synthetic
power-law graphs; median time and spread (measured), GB/s and % of the bound
(ideal bytes / measured triad bandwidth). ``recording``: the cost of kernel
recording on a LightGCN-like step. ``--antagonist N`` runs N CPU-bound processes beside the
kernel benchmark (every backend under the same load, the count in the header and in each JSON
row); they are ended when the benchmark ends, however it ends.
"""
from __future__ import annotations

import argparse
import json
import sys

from gnnrec_lab.commands.common import bounded
from gnnrec_lab.config.bounds import MAX_ANTAGONISTS, MAX_REPEATS, integer, integers
from gnnrec_lab.config.run import MAXIMA
from gnnrec_lab.memory import preflight
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_bytes


def _csv(kind):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        return items
    parse.words = True      # a list of names (checked against their allowed values by the command), not numbers
    return parse


def _check_memory(args) -> None:
    """Refuse sizes x dims whose operands do not fit in the memory available now, before allocating:
    a kernel's inputs and outputs are node rows (n_nodes x dim) and, for the edge kernels, edge
    rows (nnz x dim), float32 (~4 node-row and 2 edge-row tensors alive at once, forward and backward)."""
    from gnnrec_lab.training.benchmarking import SIZES
    sizes = [s for s in (args.sizes if args.target == "kernels" else args.sizes[:1]) if s in SIZES]
    dims = args.dims if args.target == "kernels" else args.dims[:1]
    if not sizes:
        return
    users, items, nnz = max((SIZES[s] for s in sizes), key=lambda t: t[0] + t[1] + 2 * t[2])
    need = 4 * max(dims) * (4 * (users + items) + 2 * 2 * nnz)
    free = preflight.available_bytes()
    if need > free:
        raise UserError(f"--dims: {max(dims):,} on graph {sizes[-1]} needs about {fmt_bytes(need)} of operands, "
                        f"more than the {fmt_bytes(free)} available now; use smaller --dims or --sizes")


MIN_RECORDING_REPEATS = 3   # paired A/B ratios the recording overhead's median and quartiles need


def register(subparsers):
    p = subparsers.add_parser("bench", help="benchmark kernels against the host's bandwidth bound",
                              description=__doc__.splitlines()[0])
    p.add_argument("target", choices=("kernels", "recording"),
                   help="what to benchmark: kernels (each sparse kernel's speed against the bandwidth bound) or "
                        "recording (what kernel recording adds to a training step)")
    p.add_argument("--sizes", type=_csv("sizes"), default=["small", "medium"],
                   help="synthetic graphs to run on, comma-separated: small, medium, large (~200k nodes, 5M "
                        "non-zeros) (default: small,medium)")
    p.add_argument("--dims", type=bounded(integers, "--dims", 1, MAXIMA["dim"]), default=[16, 64, 256],
                   help="embedding dimensions to run at, comma-separated, each from 1 to the largest a run "
                        "accepts (default: 16,64,256)")
    p.add_argument("--backends", type=_csv("backends"), default=None,
                   help="kernel backends to compare, comma-separated (default: every backend installed here)")
    p.add_argument("--kernels", type=_csv("kernels"), default=None,
                   help="kernels to time, a comma-separated subset of spmm, sddmm_dot, sddmm_mul, spmm_edge, "
                        "gather (default: all)")
    p.add_argument("--repeats", type=bounded(integer, "--repeats", 1, MAX_REPEATS), default=None,
                   help=f"timed repeats after one warm-up, 1 to {MAX_REPEATS:,} (recording: at least "
                        f"{MIN_RECORDING_REPEATS} A/B pairs) (default: 5 for kernels, 30 A/B pairs for recording)")
    p.add_argument("--precision", type=_csv("precision"), default=["fp32"],
                   help="row storage to time, comma-separated: fp32 (every kernel and backend) and bf16 (SpMM on "
                        "bf16 rows, native backend, reported as native-bf16) (default: fp32)")
    p.add_argument("--no-pyg", action="store_true", help="skip PyG's SpMM")
    p.add_argument("--antagonist", type=bounded(integer, "--antagonist", 0, MAX_ANTAGONISTS), default=0,
                   metavar="N", help=f"run N CPU-bound processes (0 to {MAX_ANTAGONISTS}) beside the kernel benchmark, "
                                     "so every backend is timed under the same load as on a shared server "
                                     "(default: 0)")
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    p.set_defaults(func=run)


def run(args) -> int:
    from gnnrec_lab.memory.calibrate import host_profile
    from gnnrec_lab.training import benchmarking as bench
    _check_memory(args)
    if args.target == "recording":
        if args.repeats is not None and args.repeats < MIN_RECORDING_REPEATS:
            raise UserError(f"--repeats: bench recording needs at least {MIN_RECORDING_REPEATS} A/B pairs, "
                            f"got {args.repeats}")
        res = bench.recording_overhead(size=args.sizes[0], dim=args.dims[0],
                                       repeats=30 if args.repeats is None else args.repeats)
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            print(f"full LightGCN training step ({res['layers']} layers, BPR + L2 on 2048 triples, Adam) "
                  f"on {res['graph']} (nnz {res['nnz']:,}), D={res['dim']}, median of {res['repeats']} (measured):")
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
    bad = [p for p in args.precision if p not in bench.BENCH_PRECISIONS]
    if bad:
        raise UserError(f"--precision: got {bad[0]!r}, allowed: {', '.join(bench.BENCH_PRECISIONS)}")
    host = host_profile(measure_if_missing=True, quick=True)
    progress = None
    if not args.json:
        print(bench.machine_line(host))
        print(bench.pyg_note())
        print(bench.dgl_note())
        from gnnrec_lab.memory.analysis import BOUND_NOTE
        print(BOUND_NOTE)
        print(bench.antagonist_line(args.antagonist))
        print(bench.HEADER)
        progress = print
    results = bench.run_kernel_bench(sizes=args.sizes, dims=args.dims, backends=args.backends,
                                     kernels=args.kernels or bench.KERNELS,
                                     repeats=5 if args.repeats is None else args.repeats, host=host,
                                     include_pyg=not args.no_pyg, progress=progress,
                                     n_antagonists=args.antagonist, precisions=args.precision)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print("summary (reported, not asserted):")
        for line in bench.summary(results):
            print("  " + line)
    sys.stdout.flush()
    return 0
