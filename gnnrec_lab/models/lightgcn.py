"""LightGCN (He et al., SIGIR 2020) and plain matrix factorisation."""
from __future__ import annotations

import torch
from torch import nn

from gnnrec_lab import kernels
from gnnrec_lab.kernels import buffers


class LightGCN(nn.Module):
    r"""LightGCN: linear propagation without transforms or non-linearities.

    .. math::
        E^{(k+1)} = \hat A E^{(k)}, \qquad
        E = \frac{1}{K+1} \sum_{k=0}^{K} E^{(k)}, \qquad
        \hat A = D^{-1/2} A D^{-1/2}

    Args:
        n_users: number of users (nodes ``0..n_users-1``).
        n_items: number of items (nodes ``n_users..``).
        dim: embedding size (default 64).
        layers: propagation depth K (default 3).
        init_std: std of the normal initialisation (0.1 as in the reference code).
        precision: ``"fp32"`` or ``"bf16"``: how the propagated layers are stored (the embedding
            table stays float32; see :func:`gnnrec_lab.kernels.layer_mean`).
    """

    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: int = 3, init_std: float = 0.1,
                 precision: str = "fp32"):
        super().__init__()
        self.n_users, self.n_items, self.dim, self.layers = n_users, n_items, dim, layers
        self.precision = precision
        self.init_std = init_std
        self.embedding = nn.Parameter(buffers.empty((n_users + n_items, dim)))  # huge pages when large
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.embedding, std=self.init_std)

    @property
    def layer0(self) -> torch.Tensor:
        return self.embedding

    def propagate(self, adj, rows=None) -> torch.Tensor:
        """Final representations of all nodes (full graph); with ``rows`` (``(rows, slot)`` from
        :func:`gnnrec_lab.kernels.batch_rows`) those rows only, in that order: the last layer is
        then propagated at those rows alone (see :func:`gnnrec_lab.kernels.layer_mean`)."""
        if rows is not None and self.layers:
            return kernels.layer_mean([adj] * self.layers, self.embedding, 1.0 / (self.layers + 1), self.precision,
                                      rows=rows)
        out = self.propagate_blocks([adj] * self.layers, self.embedding)
        return out if rows is None else kernels.gather(out, rows[0])

    def propagate_blocks(self, blocks, x: torch.Tensor) -> torch.Tensor:
        """Propagate through ``blocks`` (a sampled sub-graph's, or the full ``adj`` per layer).

        ``x`` holds layer-0 rows of every node the first block reads;
        ``blocks[-1]`` is applied first and ``blocks[0]`` last, each block's
        destination rows being a prefix of its source rows. Returns the
        representations of ``blocks[0]``'s destination rows.
        """
        if not blocks:
            return x
        # one autograd node: per layer a fused SpMM that also updates the running mean
        # (the 1/(K+1) folded into each term), no per-layer add pass
        return kernels.layer_mean(blocks, x, 1.0 / (self.layers + 1), self.precision)

    def __repr__(self):
        return (f"{type(self).__name__}(users={self.n_users}, items={self.n_items}, "
                f"dim={self.dim}, layers={self.layers})")


class MF(LightGCN):
    """Matrix factorisation: LightGCN with zero layers (no blocks to propagate through, so the
    embeddings are scored directly)."""

    def __init__(self, n_users: int, n_items: int, dim: int = 64, init_std: float = 0.1):
        super().__init__(n_users, n_items, dim=dim, layers=0, init_std=init_std)
