"""Running the CLI in-process from tests."""
from __future__ import annotations

from gnnrec_lab.commands import cli


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr stripped)`` of ``gnnrec-lab ARGV`` (items made strings);
    argparse's own refusals exit from inside parse_args and count as their status."""
    try:
        rc = cli.main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err.strip()
