"""``gnnrec-lab`` command line.

Each sub-command lives in ``gnnrec_lab/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed args and returning an exit status. User mistakes raise
:class:`~gnnrec_lab.errors.UserError`; they are printed as one line
(``gnnrec-lab: error: ...``) and exit with status 2, never with a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .errors import UserError

# Order is the order shown in --help.
COMMANDS = ("data", "run", "runs", "sweep", "bench", "calibrate", "whatif", "advise", "cache", "distributed",
            "dashboard")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        print(f"gnnrec-lab: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gnnrec-lab", description="Train GNN recommenders (LightGCN, NGCF) and see where time and "
                                                "bytes go on DRAM, Optane and CXL (measured here, modeled elsewhere).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"gnnrec_lab.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"gnnrec_lab.commands.{name}":
                continue  # command not built yet
            raise
        mod.register(sub)
    return p


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
    except BrokenPipeError:  # output piped into `head` and closed early
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("gnnrec-lab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
