"""``gnnrec-lab cache``: simulate embedding-row caches over a training access trace.

``cache sim`` prints one row per policy (hit rate, slow-tier GB read and
written, prefetch GB, peak occupancy, simulator seconds); ``cache skew``
prints how concentrated the trace's accesses are.
"""
from __future__ import annotations

import argparse
import json
import sys

from gnnrec_lab.commands.common import bounded, field_type
from gnnrec_lab.config.bounds import integers
from gnnrec_lab.config.run import (
    CACHE_TRACE_BATCH,
    CACHE_TRACE_KINDS,
    MAXIMA,
    OPTIMIZER_STATES,
    SIMULATED_CACHE_POLICIES,
    check_field,
)
from gnnrec_lab.models.registry import MODEL_SPECS, graph_models
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_percent
from gnnrec_lab.util.provenance import Provenance


def _trace_models() -> tuple:
    """The models a trace can be made for (gnnrec_lab.models.registry): those that propagate over no
    graph (mf, BPR batches) first, then the graph models (sampled sub-graphs)."""
    return tuple(m for m in MODEL_SPECS if m not in graph_models()) + graph_models()


def _add_trace_args(p: argparse.ArgumentParser) -> None:
    flat, graphs = ", ".join(m for m in MODEL_SPECS if m not in graph_models()), " and ".join(graph_models())
    p.add_argument("--dataset", required=True, help="dataset whose training interactions make the trace: a "
                                                     "built-in or prepared name (see `gnnrec-lab data list`)")
    p.add_argument("--trace", default=None, choices=CACHE_TRACE_KINDS,
                   help="what the trace's batches read, as the Cache page names it: mf reads each BPR batch's own "
                        "rows (a model without layers), sampled the rows of a sampled k-hop sub-graph around it "
                        "(default: mf, or what --model implies)")
    p.add_argument("--model", default=None, help=f"the same choice named by a model: {flat} is --trace mf, "
                                                 f"{graphs} --trace sampled (default: mf)")
    p.add_argument("--layers", type=field_type("layers"), default=None,
                   help=f"graph layers (hops) of the sampled sub-graphs for {graphs} "
                        f"(default: one per fan-out, else 2)")
    p.add_argument("--fanouts", type=bounded(integers, "--fanouts", -1, MAXIMA["fanouts"], max_len=MAXIMA["layers"]),
                   default=None, help="neighbours sampled per node at each layer, first hop first, "
                                                   "comma-separated, -1 = all neighbours (default: 10 per layer)")
    p.add_argument("--batch-size", type=field_type("batch_size"), default=str(CACHE_TRACE_BATCH),
                   help="training triples (user, positive item, sampled negative "
                        "item) per batch (default: %(default)s)")
    p.add_argument("--epochs", type=field_type("epochs"), default="1",
                   help="passes over the training interactions in the trace "
                        "(default: %(default)s)")
    p.add_argument("--seed", type=field_type("seed"), default="0",
                   help="seed of batch order, negative items and neighbour sampling "
                        "(default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def register(subparsers) -> None:
    p = subparsers.add_parser("cache", help="simulate embedding caches (LRU, LFU, static, look-ahead oracle, Belady)",
                              description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", parser_class=type(p))
    sim = sub.add_parser("sim", help="hit rate and slow-tier bytes per policy")
    _add_trace_args(sim)
    sim.add_argument("--cache-size", default="5%", help="cache capacity: a row count (50000) or a share of "
                                                        "the table's rows (5%%) (default: %(default)s)")
    sim.add_argument("--lookahead", type=field_type("lookahead"), default="200",
                     help="upcoming batches the oracle policy sees when it chooses "
                          "what to evict (default: %(default)s)")
    sim.add_argument("--policies", default=",".join(SIMULATED_CACHE_POLICIES),
                     help="replacement policies to simulate, a comma-separated subset of "
                          + ", ".join(SIMULATED_CACHE_POLICIES) + " (default: all)")
    sim.add_argument("--dim", type=field_type("dim"), default="64",
                     help="embedding dimension, which sets the bytes a row moves: dim x 4 "
                          "x (1 + optimizer states) (default: %(default)s)")
    sim.add_argument("--optimizer", default="adam", choices=tuple(OPTIMIZER_STATES),
                     help="optimizer whose per-row state moves with the row: "
                          + ", ".join(f"{k} ({n} state{'s' if n != 1 else ''})" for k, n in OPTIMIZER_STATES.items())
                          + " (default: %(default)s)")
    sim.set_defaults(func=_sim)
    sk = sub.add_parser("skew", help="share of accesses taken by the hottest rows")
    _add_trace_args(sk)
    sk.set_defaults(func=_skew)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


# the request's fields as this command's flags name them
FLAGS = {"cache_sizes": "--cache-size", "lookaheads": "--lookahead"}


def _flag(name: str) -> str:
    return FLAGS.get(name, f"--{name.replace('_', '-')}")


def _field(flag: str, name: str, value) -> int:
    """``value`` checked with RunConfig field ``name``'s bounds, the error naming ``flag`` (the parser
    has checked what the CLI gives; callers that build ``args`` themselves get the same check)."""
    return check_field(name, value, param=flag)


def _fanouts(args) -> list[int]:
    layers = None if args.layers is None else _field("--layers", "layers", args.layers)
    if layers == 0:
        raise UserError("--layers: must be at least 1 for sampled sub-graphs (--trace mf reads no neighbours)")
    if args.fanouts is None:
        return [10] * (layers or 2)
    # -1 (every neighbour) is this command's own value, else a run's fan-out bounds
    out = list(integers("--fanouts", args.fanouts, -1, MAXIMA["fanouts"], max_len=MAXIMA["layers"]))
    if 0 in out or any(f < -1 for f in out):
        raise UserError(f"--fanouts: entries must be from 1 to {MAXIMA['fanouts']:,} or -1 (all neighbours), "
                        f"got {args.fanouts!r}")
    if layers is not None and layers != len(out):
        raise UserError(f"--layers {layers} does not match --fanouts {args.fanouts!r} ({len(out)} layers)")
    return out


def trace_kind(args) -> str:
    """The trace ``--trace`` names, or ``--model`` implies (a model without layers: mf, a graph
    model: sampled); UserError for an unknown model or two that disagree."""
    implied = None
    if args.model is not None:
        model = str(args.model).lower()
        if model not in MODEL_SPECS:
            raise UserError(f"--model must be one of {', '.join(_trace_models())}, got {args.model!r}")
        implied = "sampled" if model in graph_models() else "mf"
    if args.trace is not None and implied is not None and implied != args.trace:
        raise UserError(f"--trace {args.trace}: --model {args.model} means --trace {implied}; give one of them")
    return args.trace or implied or "mf"


def _trace_request(args):
    """Validate the trace options and load the dataset's training graph. Returns (graph, the
    trace options of :func:`gnnrec_lab.cache.study.make_trace`)."""
    from gnnrec_lab.graph.bipartite import BipartiteGraph

    kind = trace_kind(args)
    graph_model = kind == "sampled"
    model = "--trace mf" if args.model is None else f"--model {args.model}"
    batch_size = _field("--batch-size", "batch_size", args.batch_size)
    epochs = _field("--epochs", "epochs", args.epochs)
    seed = _field("--seed", "seed", args.seed)
    fanouts = _fanouts(args) if graph_model else []
    if not graph_model and args.fanouts is not None:
        raise UserError(f"--fanouts applies to the sampled trace (--trace sampled, or a graph model: "
                        f"{', '.join(graph_models())}), not {model}")
    from gnnrec_lab.data import load
    ds = load(args.dataset, seed=seed)
    graph = BipartiteGraph(ds.train, ds.n_users, ds.n_items)
    return graph, {"kind": kind, "batch_size": batch_size, "fanouts": fanouts,
                   "epochs": epochs, "seed": seed}


def _trace_info(args, trace) -> dict:
    from gnnrec_lab.cache.study import trace_info
    return {"dataset": args.dataset, "trace": trace_kind(args), "model": args.model, **trace_info(trace), **trace.stats}


def _sim(args) -> int:
    from gnnrec_lab import cache
    from gnnrec_lab.cache.request import SimRequest  # numpy and numba (the cache package)
    from gnnrec_lab.cache.study import AUTO_CAPACITY, run_study

    # the Cache page's request, checked by the same table before the (slow) trace is built; the
    # errors name this command's flags. Its trace (model, fan-outs) is checked by _trace_request.
    names = tuple(s.strip() for s in str(args.policies).split(",") if s.strip())
    req = SimRequest(dataset=args.dataset, batch_size=args.batch_size, cache_sizes=(str(args.cache_size),),
                     lookaheads=(args.lookahead,), policies=names, dim=args.dim,
                     optimizer=str(args.optimizer).lower(), epochs=args.epochs, seed=args.seed).checked(_flag)
    if req.cache_sizes[0].lower() == AUTO_CAPACITY:
        raise UserError("--cache-size: give one size, a row count (50000) or a share of rows (5%); "
                        "'auto' (a range of sizes) is the Cache page's")
    lookahead, dim, opt = req.lookaheads[0], req.dim, req.optimizer
    rb = cache.row_bytes(dim, opt)
    graph, opts = _trace_request(args)
    capacity = cache.parse_capacity(args.cache_size, graph.n_nodes)
    if capacity > graph.n_nodes:   # the whole table fits: nothing to simulate, and a buffer that size may not
        raise UserError(f"--cache-size: {capacity:,} rows is more than the embedding table's {graph.n_nodes:,} "
                        f"rows; give at most {graph.n_nodes:,} (or 100%)")
    study = run_study(graph, **opts, capacities=[capacity], lookaheads=[lookahead], policies=list(names),
                      row_bytes=rb)
    trace = study.trace
    # a policy the cache is too small for has no hit rate (null in JSON, not NaN)
    results = [dict(r, hit_rate=None) if r["note"] else r for r in study.records]
    info = _trace_info(args, trace)
    info.update(capacity_rows=capacity, row_bytes=rb, bytes="modeled (rows x row_bytes)",
                sim_seconds=Provenance.MEASURED)
    if args.json:
        json.dump({"trace": info, "results": results}, sys.stdout, indent=1, default=float)
        print()
        return 0
    print(f"{trace}  cache={capacity:,} rows ({100 * capacity / trace.n_rows:.2f}%), "
          f"row={rb} B, look-ahead={lookahead} batches")
    print("bytes are modeled (rows x row bytes); sim s is measured")
    hdr = (f"{'policy':<18}{'hit rate':>9}{'stall':>8}{'read GB':>10}{'written GB':>12}{'prefetch GB':>13}"
           f"{'peak rows':>11}{'sim s':>8}")
    print(hdr)
    print("-" * len(hdr))
    notes = []
    for r in results:
        if r["note"]:
            print(f"{r['policy']:<18}{'n/a':>9}  (see note)")
            notes.append(f"{r['policy']}: {r['note']}")
            continue
        print(f"{r['policy']:<18}{fmt_percent(r['hit_rate']):>9}{fmt_percent(r['stall_rate']):>8}"
              f"{r['read_bytes'] / 1e9:>10.3f}{r['written_bytes'] / 1e9:>12.3f}{r['prefetch_bytes'] / 1e9:>13.3f}"
              f"{r['peak_occupancy_rows']:>11,}{r['sim_seconds']:>8.2f}")
    for n in notes:
        print("note: " + n)
    return 0


def _skew(args) -> int:
    from gnnrec_lab import cache
    from gnnrec_lab.cache.study import make_trace

    graph, opts = _trace_request(args)
    trace = make_trace(graph, **opts)
    s = cache.skew(trace)
    info = _trace_info(args, trace)
    if args.json:
        json.dump({"trace": info, "skew": s}, sys.stdout, indent=1, default=float)
        print()
        return 0
    print(trace)
    for k, v in s.items():
        if k.endswith("_share"):
            print(f"  {k:<22}{100 * v:8.2f}%")
        else:
            print(f"  {k:<22}{v:>12,.1f}" if isinstance(v, float) else f"  {k:<22}{v:>12,}")
    for k in ("redundancy_factor",):
        if k in trace.stats:
            print(f"  {k:<22}{trace.stats[k]:>12.2f}")
    return 0
