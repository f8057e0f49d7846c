"""``gnnrec-lab`` command line.

Each sub-command lives in ``gnnrec_lab/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed args and returning an exit status. User mistakes raise
:class:`~gnnrec_lab.util.errors.UserError`; they are printed as one line
(``gnnrec-lab: error: ...``) and exit with status 2, never with a traceback.
"""
from __future__ import annotations

import argparse
import sqlite3
import sys

from gnnrec_lab.commands import (
    advise,
    bench,
    cache,
    calibrate,
    dashboard,
    data,
    devices,
    distributed,
    run,
    runs,
    sweep,
    warmup,
    whatif,
)
from gnnrec_lab.runs.store import _damaged, describe_store_error
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.home import lab_home
from gnnrec_lab.util.signals import EXIT_INTERRUPTED, EXIT_TERMINATED, signal_cause

# Order is the order shown in --help.
COMMANDS = (data, run, runs, sweep, bench, calibrate, devices, whatif, advise, cache, distributed, dashboard, warmup)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        print(f"gnnrec-lab: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gnnrec-lab", description="Train GNN recommenders (LightGCN, NGCF) and see where time and "
                                                "bytes go on DRAM, Optane and CXL (measured here, modeled elsewhere).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.register(sub)
    return p


def describe_os_error(e: OSError) -> str:
    """One line for an OSError: the file(s) it names and the cause (no traceback)."""
    import errno
    what = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None)
    cause = e.strerror or str(e) or type(e).__name__
    code = errno.errorcode.get(e.errno, "") if e.errno else ""
    return f"{what + ': ' if what else ''}{cause}{f' ({code})' if code else ''}"


def _broken_pipe() -> int:  # output piped into `head` and closed early
    import os
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"gnnrec-lab: error: {e}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as e:
        path = lab_home() / "lab.sqlite"
        print(f"gnnrec-lab: error: {describe_store_error(e, path) or _damaged(path, str(e))}", file=sys.stderr)
        return 2
    except MemoryError as e:
        print(f"gnnrec-lab: error: out of memory ({e or 'an allocation failed'}); the configuration needs more "
              f"memory than this machine has (see `gnnrec-lab advise`)", file=sys.stderr)
        return 2
    except OSError as e:
        if isinstance(e, BrokenPipeError):
            return _broken_pipe()
        import errno
        full = " (the disk is full)" if e.errno == errno.ENOSPC else ""
        print(f"gnnrec-lab: error: {describe_os_error(e)}{full}", file=sys.stderr)
        return 2
    except BaseException as e:
        # Ctrl-C / SIGTERM outside a training loop (or a second one inside it), also when a
        # compiled kernel wrapped it in a SystemError
        sig = signal_cause(e)
        if sig is None:
            raise
        print(f"gnnrec-lab: {'interrupted' if isinstance(sig, KeyboardInterrupt) else 'terminated (SIGTERM)'}",
              file=sys.stderr)
        return EXIT_INTERRUPTED if isinstance(sig, KeyboardInterrupt) else EXIT_TERMINATED


if __name__ == "__main__":
    sys.exit(main())
