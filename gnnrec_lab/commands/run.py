"""``gnnrec-lab run``: train one configuration (in this process, or detached)."""
from __future__ import annotations

import json
import sys

from gnnrec_lab.commands.common import add_config_arguments, add_config_file_argument, config_from_args
from gnnrec_lab.config.run import save_config_file
from gnnrec_lab.memory.placement import numa_request
from gnnrec_lab.memory.preflight import check_launch
from gnnrec_lab.runs.runner import launch_detached
from gnnrec_lab.runs.store import Store
from gnnrec_lab.runs.worker import EXIT_DIVERGED, failure, finish_run
from gnnrec_lab.util.cgroup import parse_size
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_bytes
from gnnrec_lab.util.signals import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from gnnrec_lab.util.status import RunStatus


def register(sub):
    p = sub.add_parser("run", help="train one GNN recommender run",
                       description="Train a GNN recommender on one dataset; prints progress, validation "
                                   "metrics, test metrics and the per-kernel time table (measured).")
    add_config_arguments(p)
    add_config_file_argument(p)
    p.add_argument("--save-config", metavar="FILE",
                   help="write the run's configuration (the file, the flags and every default) to FILE as "
                        "YAML and exit without training; run it later with --config FILE "
                        "(default: train, write no file)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end (for scripts)")
    p.add_argument("--trace", metavar="PATH", help="write a Chrome/Perfetto trace (JSON) of one step's kernels to "
                                                  "PATH (default: no trace)")
    p.add_argument("--detach", action="store_true", help="launch through the runner and return the run id")
    p.add_argument("--memory-limit", metavar="SIZE", help="with --detach: run the worker under a cgroup memory "
                                                         "limit in bytes or with a binary unit (2G, 512M); a kill by "
                                                         "the limit is recorded as oom (default: no limit)")
    p.add_argument("--force", action="store_true", help="start even when the predicted footprint exceeds the "
                                                        "memory available (pre-flight check)")
    p.add_argument("--no-progress", action="store_true",
                   help="do not show progress bars and per-evaluation lines on stderr")
    p.add_argument("--no-store", action="store_true", help="do not record the run in the run store "
                                                            "(by default every run is stored, so Compare sees it)")
    p.set_defaults(func=main)


def _print_summary(result, out=None):
    out = out or sys.stdout   # looked up per call: a default bound at import keeps a stream that may be closed
    t = result.test
    from gnnrec_lab.training.evaluate import format_metrics
    ms = format_metrics(t)
    print(f"test metrics (best valid epoch {result.best_epoch}): {ms}", file=out)
    from gnnrec_lab.training.loop import modeled_line
    print(f"{result.steps} steps in {result.train_seconds:.2f} s measured; kernel JIT/warm-up "
          f"{result.jit_seconds:.2f} s not counted", file=out)
    from gnnrec_lab.memory.analysis import breakdown, format_breakdown
    print("per-kernel time (measured on this machine):", file=out)
    print(format_breakdown(breakdown(result.kernel_frame())), file=out)
    print(modeled_line(result), file=out)   # the step and kernel time (and modeled on the device)
    fp = result.footprint
    if fp.predicted:
        print(f"footprint: predicted {fmt_bytes(fp.predicted_total)} (modeled), peak RSS "
              f"{fmt_bytes(fp.peak_rss)} (measured)", file=out)


def _check_trace_path(path: str) -> None:
    """Refuse a --trace path that cannot be written, before training (not after)."""
    import os
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if not path.strip():
        raise UserError("--trace: empty path; give a file path such as trace.json (or leave --trace out)")
    if os.path.isdir(path):
        raise UserError(f"--trace: {path!r} is a directory; give a file path such as trace.json")
    if not os.path.isdir(parent):
        raise UserError(f"--trace: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"--trace: directory {parent} is not writable")


def _save_config(config, path: str) -> int:
    import os
    parent = os.path.dirname(os.path.abspath(path))
    if not path or os.path.isdir(path):
        raise UserError(f"--save-config: {path!r} is a directory; give a file path such as run.yaml")
    if not os.path.isdir(parent):
        raise UserError(f"--save-config: directory {parent} does not exist")
    try:
        save_config_file(config, path)
    except OSError as e:
        raise UserError(f"--save-config: {path}: {e.strerror}") from None
    print(f"wrote {path}; run it with `gnnrec-lab run --config {path}` (flags given then override it)")
    return 0


def main(args) -> int:
    config = config_from_args(args)
    if args.save_config:
        return _save_config(config, args.save_config)
    if args.memory_limit is not None and not args.detach:
        raise UserError("--memory-limit needs --detach (the limit applies to the run's worker process)")
    if args.no_store and args.detach:
        raise UserError("--no-store: a detached run is launched, watched and reported through the run store; "
                        "drop --no-store, or --detach to train in this terminal without storing")
    if args.trace is not None:   # '' is a path given empty, not "no trace"
        if args.detach:
            raise UserError("--trace: not available with --detach (the trace is written by this process)")
        _check_trace_path(args.trace)
    limit = None
    if args.memory_limit is not None:
        limit = parse_size(args.memory_limit, "--memory-limit")
    check_launch(config, force=args.force, memory_limit_bytes=limit)
    if not args.detach:
        if numa_request(config.placement) is not None:
            raise UserError("placement: numa: placements are applied by numactl around a worker process; "
                            "add --detach (a foreground run cannot change its own NUMA policy)")
    if args.detach:
        run_id = launch_detached(config, memory_limit_bytes=limit)
        print(json.dumps({"run_id": run_id}) if args.json else f"launched run {run_id}; "
              f"watch with `gnnrec-lab runs show {run_id}`")
        return 0
    result, run_id = train_stored(config, progress=not args.no_progress and not args.json,
                                  store_it=not args.no_store)
    if args.trace is not None:
        from gnnrec_lab.memory.analysis import export_chrome_trace
        export_chrome_trace(result.step_records, args.trace)
    if args.json:
        print(json.dumps(result.to_dict() | {"run_id": run_id}, default=str))
    elif result.status is RunStatus.FINISHED or (result.status is RunStatus.CANCELLED and result.test):
        _print_summary(result)
    if run_id is not None and not args.json:
        print(f"stored as run {run_id} (`gnnrec-lab runs show {run_id}`)")
    if result.status is RunStatus.DIVERGED:
        red = ("\033[31m", "\033[0m") if sys.stderr.isatty() else ("", "")
        print(f"{red[0]}gnnrec-lab: error: {result.info['diverged']}{red[1]}", file=sys.stderr)
        return EXIT_DIVERGED
    if result.status.is_stopped:
        print(f"gnnrec-lab: {result.info.get('stopped', result.status)}", file=sys.stderr)
        if result.status is RunStatus.INTERRUPTED:
            return EXIT_INTERRUPTED
        return EXIT_TERMINATED if "SIGTERM" in result.info.get("stopped", "") else 1
    return 0 if result.status is RunStatus.FINISHED else 1


def train_stored(config, progress: bool = False, store_it: bool = True, own_sigterm: bool = True, **train_kw):
    """Train in this process; unless ``store_it`` is False, record the run in the run store as a
    worker would (status running with this pid, every step, the result once, the final status).
    ``own_sigterm`` (the CLI) makes SIGTERM end the run with a status; a notebook kernel, whose
    signals are its own, passes False. ``train_kw`` go to :func:`~gnnrec_lab.training.loop.train`
    (``dataset=``). Returns ``(result, run_id or None)``."""
    import signal
    import threading

    from gnnrec_lab.training.loop import train
    if own_sigterm and threading.current_thread() is threading.main_thread():
        # SIGTERM outside the training loop (which turns it into a flag) still ends the run with a
        # status: the default action would kill the process and leave the run "running"
        def terminated(signum, frame):
            raise Terminated()
        signal.signal(signal.SIGTERM, terminated)
    if not store_it:
        return train(config, progress=progress, **train_kw), None
    import os
    store = Store()
    run_id = store.add_run(config, status=RunStatus.RUNNING, pid=os.getpid())
    reporter = store.reporter(run_id)
    try:
        result = train(config, reporter=reporter, progress=progress, **train_kw)
    except BaseException as e:
        status, error, _ = failure(e)
        store.set_status(run_id, status, error=error, only_if=(RunStatus.RUNNING,))
        raise
    finish_run(store, run_id, result, reporter)
    return result, run_id
