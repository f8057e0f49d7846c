"""`make lab` as a user sees it, with a stand-in `gnnrec-lab` in a throw-away VENV (so nothing is
installed, calibrated or served): what it prints while it calibrates, calibrate's verdict, and that it
prints one URL."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

STUB = """#!/bin/sh
echo "$*" >> "$STUB_LOG"
case "$1 $2" in
  "calibrate --show") [ -n "$STUB_CALIBRATED" ] || exit 1; echo "host calibration of day 1: quiet ($3)" ;;
  "calibrate --quick") echo "host calibration of day 2: flagged ($2 $3)" ;;
  "data prepare") echo "prepared ml-100k" ;;
  "dashboard --port") echo "gnnrec-lab dashboards: http://127.0.0.1:$3/" ;;
esac
"""


def make_lab(tmp_path, calibrated: bool):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "gnnrec-lab").write_text(STUB)
    (venv / "bin" / "gnnrec-lab").chmod(0o755)
    (venv / ".installed").touch()   # newer than pyproject.toml and the Makefile: no install step
    log = tmp_path / "calls.log"
    env = dict(os.environ, STUB_LOG=str(log), STUB_CALIBRATED="1" if calibrated else "")
    out = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), f"VENV={venv}", "PORT=5123", "lab"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout, log.read_text().splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_says_it_calibrates_and_prints_one_url(tmp_path):
    out, calls = make_lab(tmp_path, calibrated=False)
    lines = out.splitlines()
    says = [i for i, line in enumerate(lines) if "gnnrec-lab calibrate --quick" in line and "about 40 s" in line]
    assert says and "calibrate --quick --verdict" in calls, (out, calls)
    assert out.count("http://") == 1 and lines[-1] == "gnnrec-lab dashboards: http://127.0.0.1:5123/", out
    assert says[0] < len(lines) - 1
    # calibrate's verdict is shown, not sent to /dev/null
    assert "host calibration of day 2: flagged (--quick --verdict)" in lines[says[0] + 1:-1], out


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_skips_calibration_once_cached(tmp_path):
    out, calls = make_lab(tmp_path / "again", calibrated=True)
    assert not any("--quick" in c for c in calls) and "calibrate --quick" not in out, (out, calls)
    assert "host calibration of day 1: quiet (--verdict)" in out.splitlines(), out   # the cached one's verdict
    assert out.count("http://") == 1, out
