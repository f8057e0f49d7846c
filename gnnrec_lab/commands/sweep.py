"""``gnnrec-lab sweep``: run the product of comma-separated config values through the runner."""
from __future__ import annotations

import json
import statistics
import sys

from gnnrec_lab.commands.common import add_config_arguments, add_config_file_argument, bounded, config_overrides
from gnnrec_lab.config.bounds import MAX_SECONDS, integer, number
from gnnrec_lab.config.run import file_error, read_config_file
from gnnrec_lab.services.sweep import Sweep, SweepInterrupted, expand, format_table, progress_line
from gnnrec_lab.util.errors import ConfigError, UserError

MAX_CONCURRENT = 64   # runs a sweep starts at once


def register(sub):
    p = sub.add_parser(
        "sweep", help="run every combination of config values (resumable)",
        description="Run the product of comma-separated values, e.g. --batch-size 2048,8192 --layers 1,2, "
                    "each point as its own run (subprocess) in the run store, tagged with the sweep id. "
                    "Points whose exact config already finished are not run again. Ends with a summary: "
                    "steps per epoch, epoch time and time to target (measured), final metrics, peak RSS "
                    "(measured) and the predicted footprint (modeled). Ctrl-C cancels the rest.")
    add_config_arguments(p, multi=True, skip=("name",))
    add_config_file_argument(p, multi=True)
    p.add_argument("--name", metavar="NAME", help="sweep id stored with every run (default: a hash of the points)")
    p.add_argument("--max-concurrent", type=bounded(integer, "--max-concurrent", 1, MAX_CONCURRENT), default=1,
                   metavar="N", help=f"runs at a time, 1 to {MAX_CONCURRENT} (default 1; with more, runs share the "
                                     f"CPU and their times are not comparable)")
    p.add_argument("--timeout", type=bounded(number, "--timeout", 0, MAX_SECONDS, lo_open=True), default=None,
                   metavar="S", help="cancel what is left after S seconds, > 0 (default: no limit)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the points (and which are already finished); run nothing")
    p.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end instead of tables")
    p.set_defaults(func=main)


def _grid(args) -> tuple[dict, tuple]:
    """Field -> values of the sweep: ``--config FILE``'s, then the flags' (which replace a field's
    values from the file); with the file's path and lines, to name them in errors."""
    grid, lines = read_config_file(args.config, multi=True) if args.config else ({}, {})
    flags = config_overrides(args)
    from_file = set(grid) - set(flags)
    grid.update(flags)
    if "name" in from_file:
        raise UserError(f"{args.config}:{lines['name']}: name: a sweep names its runs with --name, not the file")
    return grid, (args.config, lines, from_file)


def main(args) -> int:
    if args.max_concurrent < 1:
        raise UserError(f"--max-concurrent must be >= 1, got {args.max_concurrent}")
    grid, (path, lines, from_file) = _grid(args)
    try:
        points = expand(None, grid)
    except ConfigError as e:
        raise file_error(e, path, lines, from_file) from None
    sw = Sweep(points, name=args.name, max_concurrent=args.max_concurrent)
    out = sys.stderr if args.json else sys.stdout
    sw.check_datasets()  # an unknown dataset is one error line, before any header
    if args.dry_run:
        print(f"sweep {sw.id}: {len(points)} point(s), varying {', '.join(sw.fields) or 'nothing'}", file=out)
        for i, c in enumerate(points):
            d = c.to_dict()
            done = sw.store.find_finished(c.to_json())
            print(f"  [{i + 1}/{len(points)}] " + " ".join(f"{f}={d[f]}" for f in sw.fields)
                  + (f"  (finished as run {done}: would be skipped)" if done else ""), file=out)
        return 0
    print(f"sweep {sw.id}: {len(points)} point(s), varying {', '.join(sw.fields) or 'nothing'}; "
          f"{args.max_concurrent} at a time; store {sw.store.path}", file=out, flush=True)
    interrupted = False
    try:
        outcome = sw.run(on_point=lambda p, n: print(progress_line(p, n, sw.fields), file=out, flush=True),
                         timeout=args.timeout)
    except SweepInterrupted as e:
        outcome, interrupted = e.outcome, True
        print("sweep interrupted: queued and running points cancelled; re-run the same command to resume",
              file=out, flush=True)
    df = outcome.frame()
    ov = outcome.overheads()
    reused = sum(p.reused for p in outcome.points)
    if args.json:
        print(json.dumps({"sweep": outcome.sweep, "fields": outcome.fields, "interrupted": interrupted,
                          "points": [{"run_id": p.run_id, "status": p.status, "reused": p.reused,
                                      "error": p.error, "run_s": p.run_s, "overhead_s": p.overhead_s,
                                      "config": p.config.to_dict()} for p in outcome.points],
                          "summary": json.loads(df.to_json(orient="records")),
                          "overhead_s_mean": statistics.fmean(ov) if ov else None}))
    else:
        print(f"\nsweep {outcome.sweep} summary (times measured on this machine; footprint modeled from shapes):")
        print(format_table(df, markdown=args.markdown))
        if reused:
            print(f"{reused} point(s) finished earlier and were not re-run.")
        if ov:
            print(f"sweep overhead per point beyond the run (process start, imports, store, polling; measured): "
                  f"mean {statistics.fmean(ov):.2f} s, max {max(ov):.2f} s over {len(ov)} point(s)")
    if interrupted:
        return 130
    return 0 if outcome.ok else 1
