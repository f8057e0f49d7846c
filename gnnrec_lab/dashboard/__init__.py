"""Panel dashboards of the lab: Launch, Live, Breakdown, Compare, Cache.

Each page is a ``pn.viewable.Viewer`` driven by one shared :class:`Lab`
(store, runner, chosen run), so the same objects work in a notebook cell and on
a served page (``gnnrec-lab dashboard`` or ``panel serve dashboards/app.py``).
Notebooks call ``load_extensions(inline=True)`` first, so their plots draw offline.
"""
from gnnrec_lab.dashboard.common import Lab, load_extensions

__all__ = ["Lab", "build_app", "load_extensions"]


def build_app(lab=None):
    """The whole app (a FastListTemplate); see :func:`gnnrec_lab.dashboard.app.build_app`."""
    from gnnrec_lab.dashboard.app import build_app as _build
    return _build(lab)
