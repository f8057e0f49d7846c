"""NGCF (Wang et al., SIGIR 2019) in two equivalent forms.

One layer, with :math:`\\hat A = D^{-1/2} A D^{-1/2}` the normalised adjacency (no self-loop):

.. math::
    S = (\\hat A + I) E, \\qquad
    B = \\textstyle\\sum_j \\hat A_{ij} (e_j \\odot e_i) = (\\hat A E) \\odot E, \\qquad
    E' = \\mathrm{LeakyReLU}_{0.2}(S W_1 + b_1 + B W_2 + b_2)

followed by row-wise L2 normalisation; the output concatenates all layers. This is the
paper's eq. 7 and RecBole 1.2.1's ``BiGNNLayer`` (``(L + I) E W_1 + (L E) * E W_2``): the
self-loop enters the sum term only. Initialisation also follows RecBole (Xavier-normal
embeddings per node type and weights): see ``init_std``. ``docs/accuracy.md`` has the
accuracy against RecBole's and how the model came to match it.

* ``form="edge"`` computes ``B`` the way DGL-based implementations do: a
  per-edge message ``e_j * e_i`` (SDDMM, ``nnz x dim`` kept for backward),
  then an aggregation over edges. Memory and bytes grow with the edge count.
* ``form="node"`` uses :math:`\\sum_j a_{ij} (e_j \\odot e_i) = e_i \\odot (\\hat A E)_i`:
  aggregate first, then multiply. Same result, no per-edge tensor.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from gnnrec_lab import kernels
from gnnrec_lab.kernels import buffers


class NGCF(nn.Module):
    """Neural Graph Collaborative Filtering.

    Args:
        n_users, n_items: node counts (users first).
        dim: embedding size and width of every layer (default 64).
        layers: depth (default 3).
        form: ``"edge"`` (per-edge messages) or ``"node"`` (aggregate first).
        init_std: ``None`` (default): RecBole 1.2.1's initialisation, Xavier-normal for the user
            and the item table separately (std ``sqrt(2 / (rows + dim))``, 0.045 / 0.034 on
            ML-100K) and for ``W1``, ``W2``; a number: embeddings N(0, init_std) instead
            (LightGCN's initialisation; weights stay Xavier-normal).
        precision: ``"fp32"`` or ``"bf16"``: bf16 rounds each layer's input to bf16 for its SpMM
            (forward and backward), which sums and returns float32; the rest of the layer (the
            per-edge messages, the transforms) stays float32.
    """

    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: int = 3, form: str = "edge",
                 init_std: Optional[float] = None, precision: str = "fp32"):
        super().__init__()
        self.precision = precision
        if form not in ("edge", "node"):
            raise ValueError(f"form must be 'edge' or 'node', got {form!r}")
        self.n_users, self.n_items, self.dim, self.layers, self.form = n_users, n_items, dim, layers, form
        self.init_std = init_std
        self.embedding = nn.Parameter(buffers.empty((n_users + n_items, dim)))  # huge pages when large
        self.W1 = nn.ParameterList([nn.Parameter(torch.empty(dim, dim)) for _ in range(layers)])
        self.W2 = nn.ParameterList([nn.Parameter(torch.empty(dim, dim)) for _ in range(layers)])
        self.b1 = nn.ParameterList([nn.Parameter(torch.zeros(dim)) for _ in range(layers)])
        self.b2 = nn.ParameterList([nn.Parameter(torch.zeros(dim)) for _ in range(layers)])
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            if self.init_std is None:   # xavier_normal_ of an (rows, dim) table, one per node type
                for lo, hi in ((0, self.n_users), (self.n_users, self.n_users + self.n_items)):
                    self.embedding[lo:hi].normal_(0.0, math.sqrt(2.0 / (hi - lo + self.dim)))
            else:
                self.embedding.normal_(0.0, self.init_std)
        for w in list(self.W1) + list(self.W2):
            nn.init.xavier_normal_(w)
        for b in list(self.b1) + list(self.b2):
            nn.init.zeros_(b)

    @property
    def layer0(self) -> torch.Tensor:
        return self.embedding

    def propagate(self, adj) -> torch.Tensor:
        """Final representations of all nodes (full graph)."""
        return self.propagate_blocks([adj] * self.layers, self.embedding)

    def propagate_blocks(self, blocks, x: torch.Tensor) -> torch.Tensor:
        """As :meth:`LightGCN.propagate_blocks`: ``blocks[-1]`` first, prefix destinations."""
        n_out = blocks[0].n_rows
        outs = [x[:n_out]]
        ew = kernels.elementwise

        def add(a, b, k):  # closed-form backward (the gradient passes to both), no inner autograd graph
            return kernels.lincomb("add", (1.0, 1.0), a, b, layer=k)
        for k, blk in enumerate(reversed(blocks)):
            xd = x[:blk.n_rows]                                             # destination rows
            ax = kernels.spmm(blk, x, layer=k, precision=self.precision)
            side = add(ax, xd, k)                                           # (A + I) x
            if self.form == "edge":
                msg = kernels.sddmm(blk, xd, x, op="mul", layer=k)          # per edge x_r * x_c
                bi = kernels.spmm_edge(blk, msg, layer=k)                   # sum_c a_rc x_r x_c
                del msg  # backward keeps no per-edge tensor: free it before the next layer's
            else:
                bi = ew("mul", torch.mul, ax, xd, layer=k)                  # x_r * (A x)_r
            h = add(kernels.gemm(side, self.W1[k], layer=k), kernels.gemm(bi, self.W2[k], layer=k), k)
            h = ew("bias_leaky_relu", lambda t, b: torch.nn.functional.leaky_relu(t + b, 0.2),
                   h, self.b1[k] + self.b2[k], layer=k)
            x = ew("l2_normalize", lambda t: torch.nn.functional.normalize(t, p=2, dim=1), h, layer=k)
            outs.append(x[:n_out])
        return ew("concat", lambda *ts: torch.cat(ts, dim=1), *outs, layer=self.layers)

    def __repr__(self):
        return (f"NGCF(users={self.n_users}, items={self.n_items}, dim={self.dim}, layers={self.layers}, "
                f"form={self.form!r})")
