"""One run in its own process: ``python -m gnnrec_lab.runs.worker RUN_ID``.

The worker loads the run's config from the store (``$GNNREC_LAB_HOME``), marks
it running with its pid, trains with a :class:`~gnnrec_lab.runs.store.StoreReporter`
and writes the final status itself:

* ``finished`` / ``cancelled`` / ``interrupted`` / ``diverged``: what the training function's
  result says (``diverged``: the loss left :class:`~gnnrec_lab.training.loop.DivergenceBound`; cancelled /
  interrupted: a cancel request, SIGTERM or SIGINT seen between steps, see :mod:`gnnrec_lab.util.signals`);
* ``oom``: a ``MemoryError`` (or torch's "can't allocate memory") escaped training;
* ``failed``: a :class:`~gnnrec_lab.util.errors.UserError` (its one-line message) or
  any other exception (the traceback);
* SIGTERM (sent by ``Runner.cancel`` after the grace period) ends it as ``cancelled``, the error
  naming the signal (outside the training loop, or a second SIGTERM, it stops the worker at once).

The training callable is ``gnnrec_lab.training.loop:train`` unless the run's request
(the run row's ``request``, stored by :meth:`~gnnrec_lab.runs.runner.Runner.launch` with the queued run) names
another with the keyword arguments it takes (a DistDGL run names
``gnnrec_lab.distributed.engine:train`` and its cluster's options), or
``GNNREC_LAB_TRAIN_FN=module:attr`` does (tests use fakes). It returns a RunResult or its dict.

Exit status: 0 finished/cancelled, 1 failed, 3 oom, 4 diverged, 130 interrupted.

:func:`finish_run` and :func:`failure` are shared with ``gnnrec-lab run`` in a terminal, which
records its in-process run in the store the same way.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import traceback

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.home import is_full, lab_home, no_space_left
from gnnrec_lab.util.proc import host_info, proc_start_ticks
from gnnrec_lab.util.signals import EXIT_INTERRUPTED, Terminated, signal_cause
from gnnrec_lab.util.status import RunStatus

TRAIN_FN_ENV = "GNNREC_LAB_TRAIN_FN"
DEFAULT_TRAIN_FN = "gnnrec_lab.training.loop:train"
# a run's own training callable ("train_fn"), its keyword arguments ("options") and interpreter ("python")
EXIT_OK, EXIT_FAILED, EXIT_OOM, EXIT_DIVERGED = 0, 1, 3, 4
STDERR_TAIL_LINES = 50


def resolve_train_fn(spec: str | None = None):
    """The callable named by ``spec`` ('module:attr' or 'module.attr'), default from the environment."""
    source = "the run's train_fn" if spec else TRAIN_FN_ENV
    spec = spec or os.environ.get(TRAIN_FN_ENV) or DEFAULT_TRAIN_FN
    mod, sep, attr = spec.partition(":")
    if not sep:
        mod, _, attr = spec.rpartition(".")
    if not mod or not attr:
        raise UserError(f"{source}: expected 'module:function', got {spec!r}")
    return getattr(importlib.import_module(mod), attr)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` means an allocation failed (Python's MemoryError or torch's CPU allocator)."""
    if isinstance(exc, MemoryError):
        return True
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in msg or "out of memory" in msg)


def tail_lines(path, n: int = STDERR_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    """The last ``n`` lines of a text file (reads at most ``max_bytes`` from its end); '' if absent."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-n:])


def finish_run(store, run_id: int, result, reporter=None) -> RunStatus:
    """Record a training function's ``result`` and its final status; return the status.

    The result is written once: a :class:`~gnnrec_lab.runs.store.StoreReporter` given as
    ``reporter`` has already written it from ``on_finish`` (a training function that never
    called it, e.g. a test fake, gets it written here)."""
    as_dict = isinstance(result, dict)   # a RunResult's dict (a DistDGL run's result)
    status = RunStatus.of(result.get("status", RunStatus.FINISHED) if as_dict
                          else getattr(result, "status", RunStatus.FINISHED))
    # a result says how its training loop ended; an active status or a crash is not one of those
    if status is None or status.is_active or status.is_crash:
        status = RunStatus.FINISHED
    if not getattr(reporter, "recorded", False):
        store.record_result(run_id, result)
    info = (result.get("info") if as_dict else getattr(result, "info", None)) or {}
    error = info.get("diverged") if status is RunStatus.DIVERGED else info.get("stopped")
    store.set_status(run_id, status, error=error, only_if=(RunStatus.RUNNING,))
    return status


def failure(exc: BaseException) -> tuple:
    """``(status, error, exit status)`` for an exception that escaped training (a signal behind it,
    even wrapped in a compiled kernel's SystemError, is the signal's ending, not a failure)."""
    sig = signal_cause(exc)
    if isinstance(sig, KeyboardInterrupt):
        return RunStatus.INTERRUPTED, "interrupted: stopped at once by a second SIGINT (Ctrl-C)", EXIT_INTERRUPTED
    if isinstance(sig, Terminated):
        return (RunStatus.CANCELLED,
                "cancelled: stopped at once by SIGTERM (outside the training loop, or a second one)", EXIT_OK)
    if isinstance(exc, UserError):
        return RunStatus.FAILED, str(exc), EXIT_FAILED
    if is_full(exc):
        # where: the file the OS names, else the run store's home (SQLite names no file)
        where = os.path.dirname(os.path.abspath(exc.filename)) if getattr(exc, "filename", None) else lab_home()
        return (RunStatus.FAILED, f"failed: the disk is full: {no_space_left(where)} ({type(exc).__name__}: {exc}); "
                                  f"what the run wrote before is kept", EXIT_FAILED)
    if is_out_of_memory(exc):
        return RunStatus.OOM, (f"out of memory: {type(exc).__name__}: {exc}".rstrip(": ")
                               + " (an allocation failed inside the run: lower batch_size or dim, or place "
                                 "tensors on a larger tier)"), EXIT_OOM
    return RunStatus.FAILED, traceback.format_exc(), EXIT_FAILED


def _on_sigterm(signum, frame):
    raise Terminated()


def exit_status(status: RunStatus) -> int:
    """The worker's exit status for a run's final ``status``."""
    return {RunStatus.DIVERGED: EXIT_DIVERGED, RunStatus.INTERRUPTED: EXIT_INTERRUPTED}.get(status, EXIT_OK)


def run_worker(run_id: int, store=None) -> int:
    """Train run ``run_id`` from the store and record its final status. Returns the exit status."""

    store = store or Store()
    run_dir = store.run_dir(run_id)
    stderr_path = run_dir / "stderr.log"

    def fail(status: RunStatus, error: str, code: int) -> int:
        with contextlib.suppress(OSError):   # a full disk: the log may not take it, the store still must
            sys.stderr.flush()
        store.set_status(run_id, status, error=error, stderr_tail=tail_lines(stderr_path) or None,
                         only_if=(RunStatus.QUEUED, RunStatus.RUNNING))
        return code

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        run = store.get_run(run_id, need=("config",))
        config = RunConfig.from_dict(run["config"])
        if not store.set_status(run_id, RunStatus.RUNNING, pid=os.getpid(),
                                pid_start=proc_start_ticks(os.getpid()), host=json.dumps(host_info()),
                                only_if=(RunStatus.QUEUED, RunStatus.RUNNING)):
            return EXIT_OK  # cancelled (or otherwise ended) before this process got going
        request = store.run_request(run_id)
        train_fn = resolve_train_fn(request.get("train_fn"))
        reporter = store.reporter(run_id)
        result = train_fn(config, reporter=reporter, progress=False, **(request.get("options") or {}))
        status = finish_run(store, run_id, result, reporter)
        return exit_status(status)
    except UserError as e:
        _log(f"gnnrec-lab: error: {e}")
        return fail(*failure(e))
    except BaseException as e:  # noqa: BLE001 - every other ending is recorded, then reported
        if signal_cause(e) is None:
            _log(traceback.format_exc())
        return fail(*failure(e))


def _log(text: str) -> None:
    """Write ``text`` to stderr (the run's stderr.log); on a full disk, go on without it, so the run's
    failure still reaches the store (its space reserve)."""
    with contextlib.suppress(OSError):
        print(text, file=sys.stderr)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m gnnrec_lab.runs.worker RUN_ID", file=sys.stderr)
        return 2
    return run_worker(int(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
