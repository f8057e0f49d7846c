"""Serve the lab's dashboards read-only: ``panel serve dashboards/app.py``.

Runs are read from ``$GNNREC_LAB_HOME/lab.sqlite``. Panel's server has none of the
protections ``gnnrec-lab dashboard`` installs (Host/Origin guard, run cap, memory
limit), so pages served this way cannot launch or cancel runs; ``gnnrec-lab dashboard``
serves the same pages with launching.
"""
import panel as pn

from gnnrec_lab.dashboard.app import PANEL_SERVE_READ_ONLY, build_app

if pn.state.served:
    build_app(read_only=PANEL_SERVE_READ_ONLY).servable()
