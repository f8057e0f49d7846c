"""Cache page (slot): hit rate vs cache size per policy, look-ahead sweep.

The embedding-row cache simulator (``gnnrec_lab.cache.simulate``) is being
built separately; until it is importable this page says so. When it lands this
page plots its results for a chosen run's access trace.
"""
from __future__ import annotations

import panel as pn
import param

from .common import Lab, not_available, optional


class CachePage(pn.viewable.Viewer):
    lab = param.ClassSelector(class_=Lab)

    def __init__(self, lab: Lab, **params):
        super().__init__(lab=lab, **params)

    def __panel__(self):
        simulate, why = optional("gnnrec_lab.cache", "simulate")
        if simulate is None:
            return pn.Column("## Embedding cache", not_available("Cache simulator (gnnrec_lab.cache.simulate)", why),
                             sizing_mode="stretch_width")
        return pn.Column("## Embedding cache", not_available(
            "Cache plots", "the simulator is importable but this page does not plot it yet"),
            sizing_mode="stretch_width")
