"""Suite-wide isolation: runs, calibration and the store go to a temporary
GNNREC_LAB_HOME, never the user's ~/.gnnrec_lab. Prepared datasets are shared
through GNNREC_LAB_DATA (the repository's data/ unless the caller set it) so the
ML-100K wheel is fetched once per machine, not once per test."""
import os
import pathlib
import tempfile

_ROOT = pathlib.Path(__file__).resolve().parents[1]
os.environ.setdefault("GNNREC_LAB_DATA", str(_ROOT / "data"))
if "GNNREC_LAB_HOME" not in os.environ or os.environ.get("GNNREC_LAB_TEST_KEEP_HOME") != "1":
    os.environ["GNNREC_LAB_HOME"] = tempfile.mkdtemp(prefix="gnnrec-lab-test-home-")

import signal  # noqa: E402

import pytest  # noqa: E402

# A suite started as a background job ('cmd &' in a script, nohup) runs with SIGINT ignored, and an
# ignored signal stays ignored across exec: every `gnnrec-lab run` a test starts and then interrupts
# would train to its end. The tests send SIGINT as a terminal's Ctrl-C would, so the suite takes it
# back to Python's default here, in the controller and in each xdist worker, before any child starts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# the package's process settings before any test module imports torch (the OpenMP wait policy)
import gnnrec_lab.util.runtime  # noqa: E402,F401


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty run store in a home of the test's own (GNNREC_LAB_HOME points there); test files
    that need more (a calibration, a fake training function) define their own ``store``."""
    from gnnrec_lab.runs.store import Store
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    s = Store()
    yield s
    s.close()


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a fresh directory with a tmpfs of ``size`` ("2m") mounted on it, unmounted at
    the end. Needs the right to mount (root in a container); the test is skipped elsewhere."""
    import subprocess
    mounted = []

    def mount(size: str):
        d = tmp_path / f"mnt{len(mounted)}"
        d.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                          capture_output=True).returncode:
            pytest.skip("cannot mount a tmpfs here (not root)")
        mounted.append(d)
        return d
    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
