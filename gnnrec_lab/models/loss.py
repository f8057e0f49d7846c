"""The BPR loss every model trains with (LightGCN, NGCF, MF), full-graph or on sampled rows."""
from __future__ import annotations

import torch

from gnnrec_lab import kernels


def bpr_loss(model, out: torch.Tensor, users, pos, neg, l2: float, rows=None):
    """BPR loss with L2 on the batch's layer-0 embeddings (LightGCN's protocol).

    ``users`` are user ids, ``pos``/``neg`` item ids (0-based among items). ``rows``: the
    ``(rows, slot)`` that ``out`` was propagated at (``model.propagate(adj, rows=rows)``), so the
    triples' rows in ``out`` are their nodes' slots; None: ``out`` holds every node.
    Returns ``(loss, bpr_part)``; the L2 term is ``l2 * 0.5 * ||e0||^2 / batch``.
    """
    off = model.n_users
    out_rows = None if rows is None else (rows[1][users], rows[1][pos + off], rows[1][neg + off])
    return bpr_loss_rows(out, model.layer0, users, pos, neg, l2, item_offset=off, out_rows=out_rows)


def bpr_loss_rows(out: torch.Tensor, e0: torch.Tensor, u_rows, p_rows, n_rows, l2: float, item_offset: int = 0,
                  out_rows=None):
    """BPR + L2 given row indices into ``out`` (final) and ``e0`` (layer-0) tables; item rows
    are ``p_rows + item_offset`` and ``n_rows + item_offset`` (``out_rows``: the triples' own rows
    of ``out``, no offset, when ``out`` holds other rows than ``e0``).

    One autograd node (:func:`gnnrec_lab.kernels.bpr_l2_loss`) whose two kernels each compute
    their term and its gradient in one pass over the batch's rows (``bpr_loss`` on ``out``,
    ``l2_reg`` on ``e0``): no gathered copies, no index concatenation, no scatter in backward."""
    return kernels.bpr_l2_loss(out, e0, u_rows, p_rows, n_rows, l2 / u_rows.shape[0], item_offset=item_offset,
                               layers=(-1, 0), out_rows=out_rows)
