"""Whether a page served by ``panel serve dashboards/app.py`` may launch runs, read from the server.

``gnnrec-lab dashboard`` installs its own guard (:mod:`.security`); Panel's server has Bokeh's
protections only. Those suffice on this machine's loopback: Bokeh refuses a websocket whose
``Origin`` is another site unless ``--allow-websocket-origin`` widens its list, and a session
whose ``Host`` names loopback was not reached through DNS rebinding or a proxy. So launching is
**on** when all of these hold for the session (:func:`launch_verdict`):

* every socket the server listens on is a loopback address (``--address 127.0.0.1``);
* every websocket origin it accepts (``--allow-websocket-origin``, ``BOKEH_ALLOW_WS_ORIGIN``, or
  Bokeh's default ``localhost:PORT``) is a loopback name at the server's own port, without
  wildcards;
* the page's request names a loopback host and came through no proxy (no ``X-Forwarded-*`` or
  ``Forwarded`` header).

With authentication configured (``panel serve --basic-auth``, ``--oauth-provider`` not
``--oauth-optional``, or an ``--auth-module``), listening beyond loopback, other hosts and named
origins are allowed: every session then belongs to a user who logged in. A wildcard origin never
is: it lets a page of any site drive this one in a browser that holds the login. Otherwise
launching is **off** and the page says why and what to do.

The settings are read from the Bokeh server that made the session (its Tornado application,
found among live objects by the session's application context, and the sockets its HTTP server
listens on): nothing a browser sends decides them except the ``Host`` and forwarding headers of
the session's own request, and those can only turn launching off.
"""
from __future__ import annotations

import gc
import ipaddress
import threading
import weakref
from dataclasses import dataclass
from typing import Optional

from gnnrec_lab.dashboard.security import is_loopback

# headers a reverse proxy adds: a page reached through one is reached from wherever the proxy is
FORWARD_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip")



def _fix(port: Optional[int], login: bool = True) -> str:
    """What to do instead (the reason's end)."""
    at = f"http://localhost:{port}/app" if port else "http://localhost:PORT/app"
    return (f"to launch from the browser, serve it with `panel serve dashboards/app.py --address 127.0.0.1` (no "
            f"--allow-websocket-origin) and open {at} on this machine"
            + (", add `--basic-auth` (or an OAuth provider)" if login else "") + ", or use `gnnrec-lab dashboard`")


@dataclass(frozen=True)
class ServerSettings:
    """What decides whether one served session may launch runs (see the module docstring)."""

    listen: tuple = ()            # addresses the server's sockets are bound to ('unix:PATH' for a unix socket)
    port: Optional[int] = None    # the port they listen on
    origins: tuple = ()           # websocket origins accepted: host:port patterns, as Bokeh checks them
    auth: Optional[str] = None    # how users log in ('basic auth', 'OAuth (github)', ...), None: no login
    host: Optional[str] = None    # the Host header of the session's request
    forwarded: tuple = ()         # proxy headers present on that request
    unknown: Optional[str] = None  # why the server's settings could not be read (then: off)


@dataclass(frozen=True)
class Verdict:
    on: bool
    reason: str   # why on (a short note) or why off, with what to do ("read-only: ...")


def _host_part(netloc: str) -> tuple[str, Optional[str]]:
    """``host[:port]`` -> (host without brackets, port text or None)."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        return host, (rest[1:] if rest.startswith(":") else None)
    if netloc.count(":") == 1:
        host, _, port = netloc.partition(":")
        return host, port
    return netloc, None


def _loopback_literal(host: str) -> bool:
    """Whether ``host`` names loopback without asking a resolver (``localhost`` or a loopback IP):
    a name the browser resolves could resolve elsewhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin_is_own_loopback(pattern: str, port: Optional[int]) -> bool:
    host, p = _host_part(pattern)
    return "*" not in pattern and _loopback_literal(host) and p is not None and p.isdigit() and int(p) == port


def launch_verdict(s: ServerSettings) -> Verdict:
    """On or off, and why (a pure function of ``s``; the table of cases is in the tests)."""
    if s.unknown:
        return Verdict(False, f"read-only: the settings of the server serving this page could not be read "
                              f"({s.unknown}), so it is not known who can reach it; serve it with "
                              f"`gnnrec-lab dashboard` to launch from the browser")
    wild = sorted(o for o in s.origins if "*" in o)
    if wild:
        return Verdict(False, f"read-only: this server accepts websocket connections from any origin matching "
                              f"{', '.join(wild)} (--allow-websocket-origin or BOKEH_ALLOW_WS_ORIGIN), so a page "
                              f"of another site open in your browser could drive this one and launch runs as you; "
                              f"{_fix(s.port, login=False)}")
    if s.auth:
        return Verdict(True, f"users log in ({s.auth}) and websocket origins are limited to "
                             f"{', '.join(sorted(s.origins)) or 'none'}")
    remote = [a for a in s.listen if not (not a.startswith("unix:") and is_loopback(a))]
    if not s.listen or remote:
        where = ", ".join(remote) or "no address it reports"
        every = " (every interface)" if any(a in ("0.0.0.0", "::", "") for a in remote) else ""
        return Verdict(False, f"read-only: this server listens on {where}{every} without authentication, so "
                              f"whoever reaches it there could launch runs as you; {_fix(s.port)}")
    other = sorted(o for o in s.origins if not _origin_is_own_loopback(o, s.port))
    if other:
        return Verdict(False, f"read-only: this server accepts websocket connections from "
                              f"{', '.join(other)} (--allow-websocket-origin or BOKEH_ALLOW_WS_ORIGIN), beyond "
                              f"its own loopback address, without authentication, so a page served there could "
                              f"drive this one and launch runs as you; {_fix(s.port)}")
    if s.forwarded:
        return Verdict(False, f"read-only: this page came through a proxy ({', '.join(s.forwarded)} header), "
                              f"so it may be reached from other machines, and this server has no "
                              f"authentication; {_fix(s.port)}")
    host, _ = _host_part(s.host or "")
    if not _loopback_literal(host):
        shown = "".join(c if c.isascii() and (c.isalnum() or c in ".-:[]") else "?" for c in (s.host or "")[:60])
        return Verdict(False, f"read-only: this page was reached as {shown or 'no host'!r}, not as this "
                              f"machine's loopback (localhost, 127.0.0.1), and this server has no authentication; "
                              f"{_fix(s.port)}")
    return Verdict(True, "served on this machine's loopback only, websocket origins limited to "
                         f"{', '.join(sorted(s.origins))}")


# ---------------------------------------------------------------------------
# reading the serving server's settings
# ---------------------------------------------------------------------------
_found: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # application context -> (tornado, http)
_lock = threading.Lock()


def _server_of(app_context):
    """The Bokeh Tornado application that holds ``app_context`` and the HTTP server in front of it
    (one search of live objects per application; cached)."""
    from bokeh.server.tornado import BokehTornado
    from tornado.httpserver import HTTPServer
    with _lock:
        if app_context in _found:
            return _found[app_context]
        objs = [o for o in gc.get_objects() if isinstance(o, (BokehTornado, HTTPServer))]
        tornado = next((o for o in objs if isinstance(o, BokehTornado)
                        and any(c is app_context for c in o.applications.values())), None)
        http = next((o for o in objs if isinstance(o, HTTPServer) and tornado is not None
                     and o.request_callback is tornado), None)
        _found[app_context] = (tornado, http)
        return tornado, http


def _auth(tornado) -> Optional[str]:
    """How users of ``tornado`` log in, or None where anyone may open the page."""
    import panel as pn
    from bokeh.server.auth_provider import NullAuth
    provider = getattr(tornado, "auth_provider", None)
    if provider is None or isinstance(provider, NullAuth):
        return None
    if pn.config.oauth_provider and pn.config.oauth_optional:
        return None   # --oauth-optional: a visitor who did not log in is served too
    if pn.config.oauth_provider:   # first: Panel's config reads basic_auth as the OAuth provider then
        return f"OAuth ({pn.config.oauth_provider})"
    if pn.config.basic_auth:
        return "basic auth"
    return type(provider).__name__


def served_settings() -> ServerSettings:
    """The settings of the server serving the current session (``pn.state.curdoc``)."""
    import panel as pn
    doc = pn.state.curdoc
    ctx = getattr(doc, "session_context", None)
    if ctx is None:
        return ServerSettings(unknown="not a served session")
    try:
        tornado, http = _server_of(ctx.server_context.application_context)
    except Exception as e:  # noqa: BLE001 - another Bokeh's internals: off, saying why
        return ServerSettings(unknown=f"{type(e).__name__}: {e}")
    if tornado is None or http is None:
        return ServerSettings(unknown="its Bokeh server was not found")
    from bokeh.settings import settings
    origins = tuple(settings.allowed_ws_origin() or ()) or tuple(tornado.websocket_origins)
    listen, port = [], None
    for sock in list(getattr(http, "_sockets", {}).values()):
        name = sock.getsockname()
        if isinstance(name, tuple):
            listen.append(name[0])
            port = name[1]
        else:
            listen.append(f"unix:{name}")
    request = getattr(ctx, "request", None)
    headers = dict(getattr(request, "headers", None) or {})
    lower = {k.lower(): k for k in headers}
    return ServerSettings(listen=tuple(listen), port=port, origins=origins, auth=_auth(tornado),
                          host=headers.get(lower.get("host", "Host")),
                          forwarded=tuple(h for h in FORWARD_HEADERS if h.lower() in lower))


def served_verdict() -> Verdict:
    """:func:`launch_verdict` of the current session's server."""
    return launch_verdict(served_settings())


__all__ = ["ServerSettings", "Verdict", "launch_verdict", "served_settings", "served_verdict"]
