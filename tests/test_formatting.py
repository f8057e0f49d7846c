"""The one formatting module the CLI and the dashboard share."""
import ast
import math
from pathlib import Path

import pytest

import gnnrec_lab.util.formatting as F
from gnnrec_lab.util.formatting import fmt_bytes, fmt_duration, fmt_ms, fmt_percent


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                     (1 << 20, "1.0 MiB"), (3.25 * 2**30, "3.2 GiB"), (2 * 2**40, "2.0 TiB"),
                                     (5 * 2**50, "5.0 PiB"), (3 * 2**60, "3072.0 PiB")])
def test_bytes_in_binary_units(n, text):
    assert fmt_bytes(n) == text


@pytest.mark.parametrize("s, text", [(0.04, "0.0 s"), (12.34, "12.3 s"), (59.9, "59.9 s"), (60, "1m 00s"),
                                     (245, "4m 05s"), (3599, "59m 59s"), (3600, "1h 00m"), (7380, "2h 03m")])
def test_durations(s, text):
    assert fmt_duration(s) == text


def test_a_missing_duration_is_the_callers_placeholder():
    assert fmt_duration(None) == fmt_duration(math.nan) == "-"
    assert fmt_duration(None, missing="–") == "–"


def test_milliseconds_and_percentages():
    assert fmt_ms(0.0123) == "12.3 ms" and fmt_ms(2) == "2000.0 ms"
    assert fmt_percent(0.1234) == "12.3%" and fmt_percent(1) == "100.0%"


def test_formatting_is_a_leaf_module():
    tree = ast.parse(Path(F.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("gnnrec_lab"), ast.dump(node)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("gnnrec_lab") for a in node.names)
