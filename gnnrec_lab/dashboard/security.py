"""Who may talk to the dashboard server, and what a browser may launch.

Two parts, both set up by ``gnnrec-lab dashboard`` (:mod:`gnnrec_lab.commands.dashboard`):

* :class:`RequestGuard` runs before Bokeh/Panel sees a request (HTTP or
  websocket). The ``Host`` header must name this server (so a DNS-rebinding page
  at ``evil.example.com`` that resolves to 127.0.0.1 is refused); a websocket
  upgrade must carry an ``Origin`` that names this server (a client with no
  ``Origin`` is refused: browsers always send one, scripts that omit it are not
  the dashboard); with a login token, every request but ``/liveness`` needs the
  token, given once as ``?token=...`` (then kept in an HttpOnly cookie named per port).
* :func:`component_allowed` is Panel's component resource route
  (``/components/<module>/<class>/<attribute>/<file>``) limited to what this app serves: Panel would
  import the module the URL names (any installed module, chosen by any page that can make the
  browser send a GET) before it looks for the resource. The guard answers 404 unless the module
  is one already loaded from the packages the dashboards are built of and the class is a component
  defined there, so the route never imports anything.
* Access-log lines name the path without its query (the login token travels as ``?token=``).
* :class:`LaunchPolicy` is what runs a browser may start: ``file:`` placements
  only under directories the operator allowed at start, at most ``max_active``
  runs queued or running from this dashboard at once, and a memory limit
  (cgroup) on each run's worker. A page served by a server that set no policy
  (``panel serve``) gets the cap and the memory limit anyway (:func:`served_launch_policy`).
"""
from __future__ import annotations

import hmac
import ipaddress
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Iterable, Optional
from urllib.parse import urlsplit

from gnnrec_lab.memory.placement import file_placed
from gnnrec_lab.util.cgroup import cgroup_usable, parse_size
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.status import RunStatus

TOKEN_COOKIE = "gnnrec_lab_token"
# paths that answer without the login token (they reveal nothing)
OPEN_PATHS = ("/liveness",)


def is_loopback(address: Optional[str]) -> bool:
    """Whether ``address`` (an IP in any form the resolver takes, ``127.1`` included, or a name)
    only accepts connections from this machine: every address it resolves to is loopback."""
    if not address:
        return False  # None/'' means every interface to Tornado
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        pass
    try:   # 127.1, 0x7f.1, a name in /etc/hosts: what the socket will bind to
        infos = socket.getaddrinfo(address.strip("[]"), None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    addrs = {ai[4][0].split("%")[0] for ai in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)


# packages the dashboards are built of: the only modules whose components the resource route serves
COMPONENT_PACKAGES = ("panel", "bokeh", "holoviews", "gnnrec_lab")
COMPONENT_PREFIX = "/components/"


def component_allowed(path: str) -> bool:
    """Whether ``path`` (the request path, percent-encoded as it arrived) names a resource of a
    component this app serves: ``/components/MODULE/CLASS/ATTRIBUTE/...`` where MODULE is already
    imported (nothing is imported to answer), lies in :data:`COMPONENT_PACKAGES`, and CLASS is a
    Parameterized class defined in it. Decided from ``sys.modules`` alone, before any handler runs."""
    import sys
    from urllib.parse import unquote
    if not path.startswith(COMPONENT_PREFIX):
        return True
    parts = unquote(path[len(COMPONENT_PREFIX):]).split("/")
    if len(parts) < 4:
        return False
    mod, cls = parts[0], parts[1]
    if not all(p.isidentifier() for p in mod.split(".")) or mod.split(".")[0] not in COMPONENT_PACKAGES:
        return False
    module = sys.modules.get(mod)
    if module is None or not cls.isidentifier():
        return False
    component = module.__dict__.get(cls)
    try:
        import param
        return (isinstance(component, type) and issubclass(component, param.Parameterized)
                and component.__module__ == mod)
    except ImportError:
        return False


def _host_port(netloc: str) -> tuple[str, Optional[int]]:
    """``host[:port]`` (IPv6 in brackets) -> (lower-case host without brackets, port or None)."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = netloc.rpartition(":") if netloc.count(":") == 1 else (netloc, "", "")
    try:
        return host, (int(port) if port else None)
    except ValueError:
        return host, -1


def local_names(address: Optional[str]) -> set[str]:
    """Host names and addresses a browser may use to reach a server bound to ``address``."""
    names = {"localhost", "127.0.0.1", "::1"}
    if address and address not in ("0.0.0.0", "::"):
        names.add(address.strip("[]").lower())
        return names
    if address in (None, "", "0.0.0.0", "::"):
        # every interface: this machine's own names and addresses
        for n in {socket.gethostname(), socket.getfqdn()}:
            names.add(n.lower())
            try:
                names.update(ai[4][0].lower() for ai in socket.getaddrinfo(n, None))
            except OSError:
                pass
    return names


@dataclass
class RequestGuard:
    """Decides whether one request reaches the app. ``port`` may be set after binding (port 0)."""

    hosts: set = field(default_factory=set)   # allowed host names (no port), lower case
    port: Optional[int] = None
    token: Optional[str] = None
    extra: set = field(default_factory=set)   # extra "host[:port]" entries allowed as given

    def _host_ok(self, netloc: str) -> bool:
        if not netloc:
            return False
        if netloc.strip().lower() in self.extra:
            return True
        host, port = _host_port(netloc)
        return host in self.hosts and (port == self.port or (port is None and self.port == 80))

    def check(self, method: str, path: str, headers, query_token: Optional[str] = None,
              cookie_token: Optional[str] = None) -> Optional[tuple[int, str]]:
        """``None`` when the request may pass, else ``(HTTP status, one-line reason)``."""
        host = headers.get("Host", "")
        if not self._host_ok(host):
            return 403, f"Host {host!r} is not this dashboard (allowed: {self.describe()})"
        origin = headers.get("Origin")
        websocket = headers.get("Upgrade", "").lower() == "websocket" or path.rstrip("/").endswith("/ws")
        if websocket and not origin:
            return 403, "websocket without an Origin header refused (only the dashboard page may connect)"
        if origin is not None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not self._host_ok(parts.netloc):
                return 403, f"Origin {origin!r} is not this dashboard (allowed: {self.describe()})"
        if self.token and path not in OPEN_PATHS:
            given = query_token or cookie_token or ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return 401, ("this dashboard needs its login token: open the URL with ?token=... that "
                             "`gnnrec-lab dashboard` printed when it started")
        return None

    @property
    def cookie_name(self) -> str:
        """Cookies are not kept per port: each dashboard names its own."""
        return f"{TOKEN_COOKIE}_{self.port}"

    def describe(self) -> str:
        port = f":{self.port}" if self.port else ""
        return ", ".join(sorted(f"{h}{port}" for h in self.hosts) + sorted(self.extra))


def install_guard(tornado_app, guard: RequestGuard) -> None:
    """Route every request of ``tornado_app`` (a Tornado Application) through ``guard`` first."""
    import tornado.web

    class Refused(tornado.web.RequestHandler):
        def initialize(self, status: int, reason: str):
            self._code, self._why = status, reason

        def prepare(self):
            self.set_status(self._code)
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(f"gnnrec-lab: {self._why}\n")

    class SetTokenCookie(tornado.web.RequestHandler):
        """First visit with ``?token=``: keep it in a cookie, then reload without it in the URL."""

        def prepare(self):
            self.set_cookie(guard.cookie_name, guard.token, httponly=True, samesite="Strict")
            self.redirect(self.request.path or "/")

    original = tornado_app.find_handler

    def find_handler(request, **kwargs):
        qt = request.query_arguments.get("token", [b""])[0].decode("utf-8", "replace") or None
        cookie = request.cookies.get(guard.cookie_name)
        verdict = guard.check(request.method, request.path, request.headers, qt, cookie.value if cookie else None)
        if verdict is None and not component_allowed(request.path):
            verdict = (404, "not a component resource this dashboard serves")
        if verdict is not None:
            return tornado_app.get_handler_delegate(request, Refused, {"status": verdict[0], "reason": verdict[1]})
        host, port = _host_port(request.host or "")
        if ":" in host:
            # an IPv6 literal ([::1]:PORT, allowed above): Panel's location parsing splits the Host on
            # ':' and fails (500); the same loopback by name reaches the same server
            request.host = f"localhost:{port}" if port else "localhost"
            request.host_name = "localhost"
        if qt and guard.token and request.method == "GET" and request.headers.get("Upgrade", "").lower() != "websocket":
            return tornado_app.get_handler_delegate(request, SetTokenCookie)
        return original(request, **kwargs)

    tornado_app.find_handler = find_handler
    tornado_app.settings["log_function"] = log_request
    # the handlers' own warnings ("403 GET /components/...?token=...: Requested resource type not
    # valid") name the request the same way: path, not URI
    tornado.web.RequestHandler._request_summary = (
        lambda self: f"{self.request.method} {self.request.path} ({self.request.remote_ip})")


def log_request(handler) -> None:
    """Tornado's access-log line (status, method, path, client, time) with the path in place of the
    URI: a query may carry the login token (``?token=...``), which must not land in a log."""
    from tornado.log import access_log
    status = handler.get_status()
    log = access_log.info if status < 400 else access_log.warning if status < 500 else access_log.error
    r = handler.request
    log("%d %s %s (%s) %.2fms", status, r.method, r.path, r.remote_ip, 1000.0 * r.request_time())


# ---------------------------------------------------------------------------
# what a browser may launch
# ---------------------------------------------------------------------------
@dataclass
class LaunchPolicy:
    """Limits on runs launched from the dashboard (see module docstring)."""

    placement_dirs: tuple = ()                 # resolved directories file: placements may use
    max_active: Optional[int] = None           # queued + running runs launched from this dashboard (None: no cap)
    memory_limit_bytes: Optional[int] = None   # cgroup limit on each run's worker (None = none)
    memory_limit_note: Optional[str] = None    # why there is no limit, when there is none
    cap_source: str = "--max-runs"             # where the cap comes from (named when it refuses a run)
    launched: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def placement_error(self, placement: dict) -> Optional[ConfigError]:
        """Why ``placement`` may not be launched from the browser (an error naming the field), or None."""
        for cls, raw in sorted(file_placed(placement).items()):
            if not self.placement_dirs:
                return ConfigError("placement", f"{cls}: file: placements from the dashboard are off; the "
                                                f"operator allows directories with `gnnrec-lab dashboard "
                                                f"--allow-placement-dir DIR`")
            real = os.path.realpath(raw)
            if not any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in self.placement_dirs):
                return ConfigError("placement", f"{cls}: {raw!r} is not under a directory allowed for the dashboard "
                                                f"({', '.join(self.placement_dirs)})")
        return None

    def active_error(self, status_of) -> Optional[str]:
        """Why another run may not start now (``status_of(run_id)`` -> status), or None."""
        if self.max_active is None:
            return None
        with self.lock:
            active = []
            for rid in self.launched:
                try:
                    if RunStatus.active(status_of(rid)):
                        active.append(rid)
                except Exception:  # noqa: BLE001 - a run that vanished from the store is not active
                    continue
            self.launched[:] = active
            if len(active) >= self.max_active:
                return (f"this dashboard already has {len(active)} run(s) queued or running "
                        f"(limit {self.max_active}, {self.cap_source}); wait for one to end or cancel it")
        return None

    def record(self, run_id: int) -> None:
        with self.lock:
            self.launched.append(run_id)


def allowed_dirs(dirs: Iterable[str]) -> tuple:
    """Resolve ``--allow-placement-dir`` values; each must be an existing directory."""
    out = []
    for d in dirs or ():
        if not d or not os.path.isdir(d):
            raise UserError(f"--allow-placement-dir: {d!r} is not an existing directory")
        out.append(os.path.realpath(d))
    return tuple(out)


_policy: Optional[LaunchPolicy] = None
_policy_set = False          # whether a server (or a test) installed the policy, rather than a default
_policy_lock = threading.Lock()

# The cap on runs a served page may have queued or running at once, where the server sets none
# (``gnnrec-lab dashboard --max-runs``' default too).
DEFAULT_MAX_RUNS = 2
SERVED_CAP_SOURCE = "the cap of every served page; `gnnrec-lab dashboard --max-runs N` sets another"


def set_launch_policy(policy: Optional[LaunchPolicy]) -> None:
    """Install the process-wide policy (the dashboard command does; tests may; None: back to unset)."""
    global _policy, _policy_set
    with _policy_lock:
        _policy, _policy_set = policy, policy is not None


def launch_policy() -> LaunchPolicy:
    """The process-wide policy; if none was set (a notebook, a test), the defaults: no ``file:``
    directories, no cap on active runs, no memory limit. ``gnnrec-lab dashboard`` sets its own; a page
    any server serves uses :func:`served_launch_policy`."""
    global _policy
    if _policy is None:
        _policy = LaunchPolicy()
    return _policy


def served_launch_policy() -> LaunchPolicy:
    """The policy of a page some server serves (``gnnrec-lab dashboard``, ``panel serve``): the one
    the server installed, else the served defaults, installed now for every session of this
    process: at most :data:`DEFAULT_MAX_RUNS` runs queued or running, each under a memory cgroup of
    3/4 of this machine's memory where memory cgroups can be used, no ``file:`` directories. A
    notebook that builds pages without a server keeps :func:`launch_policy`'s (no cap)."""
    global _policy, _policy_set
    with _policy_lock:
        if not _policy_set:
            limit, note = memory_limit_setting("auto")
            _policy = LaunchPolicy(max_active=DEFAULT_MAX_RUNS, memory_limit_bytes=limit, memory_limit_note=note,
                                   cap_source=SERVED_CAP_SOURCE)
            _policy_set = True
        return _policy


def default_memory_limit() -> int:
    """Default cgroup limit for a browser-launched run: 3/4 of this machine's physical memory."""
    import psutil
    return int(psutil.virtual_memory().total * 3 // 4)


def memory_limit_setting(text, flag: str = "--run-memory-limit") -> tuple[Optional[int], Optional[str]]:
    """``(limit in bytes, None)`` or ``(None, why there is none)`` for a browser-launched run's memory
    limit given as ``text``: ``auto`` (3/4 of this machine's memory where memory cgroups can be
    used, else none and why), ``none``, or a size (``2G``; UserError naming ``flag`` where cgroups
    cannot be used or the size is not one)."""
    t = str(text).strip().lower()
    if t == "none":
        return None, f"{flag} none"
    why = cgroup_usable()
    if t == "auto":
        return (default_memory_limit(), None) if why is None else (None, why)
    limit = parse_size(text, flag)
    if why is not None:
        raise UserError(f"{flag}: {why}")
    return limit, None


__all__ = ["RequestGuard", "install_guard", "component_allowed", "log_request", "LaunchPolicy", "launch_policy",
           "set_launch_policy", "served_launch_policy", "DEFAULT_MAX_RUNS", "allowed_dirs", "is_loopback",
           "local_names", "default_memory_limit", "memory_limit_setting"]
