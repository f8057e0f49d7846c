"""Serve the lab's dashboards: ``panel serve dashboards/app.py`` (or ``gnnrec-lab dashboard``).

Runs are read from ``$GNNREC_LAB_HOME/lab.sqlite`` and launched as subprocesses.
"""
import panel as pn

from gnnrec_lab.dashboard.app import build_app

if pn.state.served:
    build_app().servable()
