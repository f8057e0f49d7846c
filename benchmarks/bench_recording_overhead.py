"""Cost of kernel recording: a full LightGCN training step (propagation, BPR + L2, backward, Adam)
recorded vs unrecorded (same as ``gnnrec-lab bench recording``).

Usage: python benchmarks/bench_recording_overhead.py [--sizes medium] [--dims 64] [--repeats 10] [--json]
"""
import os
import sys

# before torch loads OpenMP (see gnnrec_lab/runtime.py)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from gnnrec_lab.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "recording", *sys.argv[1:]]))
