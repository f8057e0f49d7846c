"""Kernel benchmark (same as ``gnnrec-lab bench kernels``): native vs torch (vs DGL, PyG).

Targets (reported, not asserted): SpMM D=64 on the large graph (~200k nodes, ~5M nnz)
>= 80% of the bandwidth bound and >= 3x torch.sparse.mm; SDDMM dot >= 70% of bound;
backward within 1.3x of forward.

Usage: python benchmarks/bench_kernels.py [--sizes small,medium,large] [--dims 16,64,256] [--json]
"""
import sys

# importing gnnrec_lab sets the OpenMP wait policy before torch loads OpenMP (gnnrec_lab/util/runtime.py)
from gnnrec_lab.commands.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "kernels", *sys.argv[1:]]))
