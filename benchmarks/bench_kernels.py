"""Kernel benchmark (same as ``gnnrec-lab bench kernels``): native vs torch (vs DGL, PyG).

Targets (reported, not asserted): SpMM D=64 on the large graph (~200k nodes, ~5M nnz)
>= 80% of the bandwidth bound and >= 3x torch.sparse.mm; SDDMM dot >= 70% of bound;
backward within 1.3x of forward.

Usage: python benchmarks/bench_kernels.py [--sizes small,medium,large] [--dims 16,64,256] [--json]
"""
import os
import sys

# before torch loads OpenMP (see gnnrec_lab/runtime.py)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from gnnrec_lab.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "kernels", *sys.argv[1:]]))
