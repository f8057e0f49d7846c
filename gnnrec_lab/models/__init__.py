"""GNN recommenders built only from :mod:`gnnrec_lab.kernels` and ``torch.nn``.

Every model exposes ``propagate(adj) -> Tensor`` (final node representations,
users first then items) and ``layer0`` (the trainable embedding table);
:func:`gnnrec_lab.models.loss.bpr_loss` scores a batch of (user, positive, negative)
triples on those representations. Each model is declared once in
:mod:`gnnrec_lab.models.registry` (its builder and cost hooks).

Importing this package loads no torch (the footprint and the CLI read the registry); the model
classes load it when first named.
"""
from __future__ import annotations

from gnnrec_lab.models.registry import build_model


def __getattr__(name: str):
    """``LightGCN``, ``NGCF`` and ``MF``, imported when first named (they load torch)."""
    if name in ("LightGCN", "MF"):
        from gnnrec_lab.models.lightgcn import MF, LightGCN
        return {"LightGCN": LightGCN, "MF": MF}[name]
    if name == "NGCF":
        from gnnrec_lab.models.ngcf import NGCF
        return NGCF
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LightGCN", "NGCF", "MF", "build_model"]
