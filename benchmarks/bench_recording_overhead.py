"""Cost of kernel recording: a full LightGCN training step (propagation, BPR + L2, backward, Adam)
recorded vs unrecorded (same as ``gnnrec-lab bench recording``).

Usage: python benchmarks/bench_recording_overhead.py [--sizes medium] [--dims 64] [--repeats 10] [--json]
"""
import sys

# importing gnnrec_lab sets the OpenMP wait policy before torch loads OpenMP (gnnrec_lab/util/runtime.py)
from gnnrec_lab.commands.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "recording", *sys.argv[1:]]))
