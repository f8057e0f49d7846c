"""The gnnrec-lab app: one FastListTemplate with a tab per page.

:func:`build_app` makes a fresh app for one browser session (``pn.serve``
calls it per session); tabs render lazily (``dynamic=True``), so the first
page load only builds the Launch page. A button or a launch that wants another
page sets ``lab.page`` and the tab follows.
"""
from __future__ import annotations

from typing import Optional

import panel as pn
from panel.theme.fast import Fast as _PanelFast

from gnnrec_lab.dashboard.breakdown import BreakdownPage
from gnnrec_lab.dashboard.cache import CachePage
from gnnrec_lab.dashboard.common import Lab, load_extensions, safe_call
from gnnrec_lab.dashboard.compare import ComparePage
from gnnrec_lab.dashboard.launch import LaunchPage
from gnnrec_lab.dashboard.live import LivePage
from gnnrec_lab.dashboard.security import launch_policy, served_launch_policy
from gnnrec_lab.dashboard.serving import served_verdict
from gnnrec_lab.util.formatting import fmt_bytes

TITLE = "gnnrec-lab"


class Fast(_PanelFast):
    """Panel's Fast design without its web font (fonts.googleapis.com): every resource the
    page loads is served by the dashboard itself, so it works on an offline machine.

    The class keeps the name ``Fast``: Panel finds a design's bundled files under the
    lower-cased class name (``fast/js/fast_design.js``)."""

    _resources = {k: v for k, v in _PanelFast._resources.items() if k != "font"}
PAGES = ("Launch", "Live", "Breakdown", "Compare", "Cache")

PAGE_CLASSES = {"Launch": LaunchPage, "Live": LivePage, "Breakdown": BreakdownPage, "Compare": ComparePage,
                "Cache": CachePage}


class LazyTabs:
    """Tabs whose pages are built the first time they are shown.

    ``pn.Tabs(dynamic=True)`` still builds every Viewer's view up front; here a
    page's component is only constructed (and its store queries run) when its
    tab is first opened, which keeps the first page load short.
    """

    def __init__(self, lab: Lab, pages=PAGES, active: str = "Launch"):
        self.lab = lab
        self.pages: dict = {}
        self.holders = {name: pn.Column(sizing_mode="stretch_width") for name in pages}
        self.names = list(pages)
        self.tabs = pn.Tabs(*[(n, self.holders[n]) for n in self.names], sizing_mode="stretch_width",
                            active=self.names.index(active))
        self.tabs.param.watch(lambda e: self.show(self.names[e.new]), "active")
        lab.param.watch(self._follow, "page")
        self.show(active)

    def page(self, name: str):
        """The component of page ``name`` (built now if it was not yet)."""
        if name not in self.pages:
            self.pages[name] = PAGE_CLASSES[name](self.lab)
            self.holders[name].objects = [self.pages[name]]
        return self.pages[name]

    def show(self, name: str) -> None:
        self.page(name)
        i = self.names.index(name)
        if self.tabs.active != i:
            self.tabs.active = i

    def _follow(self, event):
        if event.new in self.names:
            self.show(event.new)
            self.lab.page = ""  # a later request for the same page fires again


def deep_link(args: Optional[dict], run_ids=None) -> tuple[Optional[str], Optional[int], list]:
    """The page and run a URL asks for (``?page=Live&run=3``, e.g. a bookmark of one run's Live
    page): ``(page, run_id, problems)``. ``args``: the session's query arguments (name -> list of
    bytes, as ``pn.state.session_args``). A page is one of :data:`PAGES` (any case), a run an id in
    ``run_ids``; anything else is left out and named in ``problems`` (shown on the page). Nothing
    else in the URL is read."""
    args = args or {}

    def shown(v: str) -> str:    # echoed into the page: letters, digits, '-' and '_' only (no markup)
        return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "?" for c in v[:40])

    def one(name):
        vals = args.get(name) or []
        v = vals[-1] if vals else None
        return v.decode("utf-8", "replace").strip() if isinstance(v, bytes) else (None if v is None else str(v))
    page, run, problems = None, None, []
    want = one("page")
    if want:
        match = [n for n in PAGES if n.lower() == want.lower()]
        if match:
            page = match[0]
        else:
            problems.append(f"?page={shown(want)} is not a page ({', '.join(PAGES)})")
    want = one("run")
    if want:
        if not want.isdigit():
            problems.append(f"?run={shown(want)} is not a run id (a number, as in `gnnrec-lab runs`)")
        elif run_ids is not None and int(want) not in set(run_ids):
            problems.append(f"?run={int(want)}: no such run in this store")
        else:
            run = int(want)
    return page, run, problems


def _sentence(text: str) -> str:
    """``text`` with its first letter upper case (the rest as written: flags, names, paths)."""
    return text[:1].upper() + text[1:]


def policy_note(policy) -> str:
    """The limits a browser's runs get under ``policy``, in a sentence (the sidebar's)."""
    cap = f"at most {policy.max_active} run(s) queued or running at once" if policy.max_active else "no cap on runs"
    mem = (f"each under a memory limit of {fmt_bytes(policy.memory_limit_bytes)}" if policy.memory_limit_bytes
           else f"no memory limit on a run ({policy.memory_limit_note or 'none set'})")
    return f"{cap}, {mem}"


def build_app(lab: Optional[Lab] = None, read_only: Optional[str] = None,
              launch_note: Optional[str] = None) -> pn.template.FastListTemplate:
    """The whole app for one session (a new :class:`Lab` unless one is given; ``read_only``: why the
    new Lab may not launch runs, shown on every page's sidebar and at the Launch button;
    ``launch_note``: why it may, shown on the sidebar with the limits its runs get).

    A served session (any server) launches under :func:`~.security.served_launch_policy`: the
    server's policy, else the cap on runs and the memory limit every served page gets."""
    load_extensions()
    if getattr(pn.state.curdoc, "session_context", None) is not None:
        served_launch_policy()
    lab = lab or Lab(read_only=read_only)
    page, run, problems = None, None, []
    if pn.state.curdoc is not None and pn.state.session_args:   # a served session's URL
        ids = safe_call(lab.store.run_ids)[0] if lab.store is not None else None
        page, run, problems = deep_link(pn.state.session_args, ids)
    if run is not None:
        lab.run_id = run
    lazy = LazyTabs(lab, active=page or "Launch")
    tabs = lazy.tabs
    about = pn.pane.Markdown(
        "Train GNN recommenders and see where time and memory go on DRAM, Optane and CXL.\n\n"
        "**measured**: timed on this machine. **modeled**: projected from a device profile "
        "(hatched in plots).", sizing_mode="stretch_width")
    store = lab.store
    where = f"Store: `{store.path}`" if store is not None and hasattr(store, "path") else ""
    sidebar = [about, pn.pane.Markdown(where)]
    if lab.read_only:
        sidebar.insert(0, pn.pane.Alert(f"**Read-only.** {_sentence(lab.read_only[len('read-only: '):])}.",
                                        alert_type="warning", css_classes=["read-only-note"]))
    elif launch_note and lab.runner is not None:
        sidebar.insert(0, pn.pane.Alert(f"**Launching is on** ({launch_note}): {policy_note(launch_policy())}.",
                                        alert_type="info", css_classes=["launch-on-note"]))
    main = [tabs]
    if problems:
        main.insert(0, pn.pane.Alert("This page's address: " + "; ".join(problems) + ".", alert_type="warning",
                                     css_classes=["link-problem"], sizing_mode="stretch_width"))
    template = pn.template.FastListTemplate(title=TITLE, sidebar=sidebar,
                                            main=main, sidebar_width=260, accent="#1f77b4",
                                            font_url="", design=Fast)  # no web fonts: offline
    template.lab = lab  # for tests and notebooks
    template.tabs = lazy
    return template


def panel_serve_app() -> pn.template.FastListTemplate:
    """The app for one session of ``panel serve dashboards/app.py``: launching on where
    :func:`~.serving.served_verdict` finds the server safe for it (loopback, Bokeh's websocket
    origin check in force, or users who log in), else read-only with the reason and what to do. Its
    runs get the served policy's cap and memory limit (:func:`build_app`)."""
    verdict = served_verdict()
    if verdict.on:
        return build_app(launch_note=f"`panel serve`: {verdict.reason}")
    return build_app(read_only=verdict.reason)
