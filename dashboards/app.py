"""Serve the lab's dashboards with Panel's server: ``panel serve dashboards/app.py`` (at ``/app``).

Runs are read from ``$GNNREC_LAB_HOME/lab.sqlite``. Launching (and cancelling) is on when the
server is reached on this machine's loopback with Bokeh's websocket origin check in force, as
``panel serve dashboards/app.py --address 127.0.0.1`` serves it, or when users log in
(``--basic-auth``, OAuth); otherwise (``--address 0.0.0.0``, ``--allow-websocket-origin=*``, ...)
the pages are read-only and say why (:mod:`gnnrec_lab.dashboard.serving`). Runs launched here get
the same cap and per-run memory limit as ``gnnrec-lab dashboard``'s defaults.
"""
import panel as pn

from gnnrec_lab.dashboard.app import panel_serve_app

if pn.state.served:
    panel_serve_app().servable()
