"""GNN recommenders built only from :mod:`gnnrec_lab.kernels` and ``torch.nn``.

Every model exposes ``propagate(adj) -> Tensor`` (final node representations,
users first then items) and ``layer0`` (the trainable embedding table);
:func:`gnnrec_lab.models.loss.bpr_loss` scores a batch of (user, positive, negative)
triples on those representations.
"""
from __future__ import annotations

from gnnrec_lab.models.lightgcn import MF, LightGCN
from gnnrec_lab.models.ngcf import NGCF


def build_model(config, n_users: int, n_items: int):
    """The model named by ``config.model`` with its depth and embedding size."""
    if config.model == "lightgcn":
        return LightGCN(n_users, n_items, dim=config.dim, layers=config.layers)
    if config.model == "ngcf":
        return NGCF(n_users, n_items, dim=config.dim, layers=config.layers, form=config.ngcf_form)
    if config.model == "mf":
        return MF(n_users, n_items, dim=config.dim)
    raise ValueError(config.model)  # RunConfig validated it already


__all__ = ["LightGCN", "NGCF", "MF", "build_model"]
