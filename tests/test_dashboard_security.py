"""The dashboard server on a shared machine: who may connect, and what a browser may launch.

One server per module runs in a thread of this process (``make_server``, the
function ``gnnrec-lab dashboard`` uses) and is probed with raw HTTP and
websocket-upgrade requests, the way a script on another machine or a page on
another origin would talk to it.
"""
from __future__ import annotations

import asyncio
import base64
import os
import re
import socket
import threading
import types

import pytest

pn = pytest.importorskip("panel")

from gnnrec_lab.commands.dashboard import make_server  # noqa: E402
from gnnrec_lab.config.run import RunConfig  # noqa: E402
from gnnrec_lab.dashboard.security import LaunchPolicy, RequestGuard, is_loopback  # noqa: E402
from gnnrec_lab.util.errors import UserError  # noqa: E402


def dash_args(**kw):
    d = dict(port=0, address="127.0.0.1", allow_remote=False, require_token=False, show=False,
             allow_websocket_origin=None, allow_placement_dir=[], max_runs=2, run_memory_limit="none")
    d.update(kw)
    return types.SimpleNamespace(**d)


class Served:
    def __init__(self, **kw):
        ready = threading.Event()
        self.error = None

        def main():
            asyncio.set_event_loop(asyncio.new_event_loop())
            try:
                self.server, self.url, self.guard = make_server(dash_args(**kw))
                self.server.start()
            except BaseException as e:  # noqa: BLE001
                self.error = e
                ready.set()
                return
            ready.set()
            self.server.io_loop.start()

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        assert ready.wait(60)
        if self.error:
            raise self.error
        self.port = self.server.port

    def stop(self):
        loop = self.server.io_loop
        loop.add_callback(lambda: (self.server.stop(), loop.stop()))
        self.thread.join(10)

    def raw(self, path="/", headers=None, method="GET") -> tuple[int, str]:
        """Send one request; return (status, head + a bit of body)."""
        h = {"Host": f"127.0.0.1:{self.port}"}
        h.update(headers or {})
        lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in h.items() if v is not None]
        with socket.create_connection(("127.0.0.1", self.port), timeout=15) as s:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            try:
                s.settimeout(0.5)
                data += s.recv(65536)
            except OSError:
                pass
        text = data.decode("latin-1")
        return int(text.split(" ", 2)[1]), text

    def ws(self, origin, token="x", host=None) -> int:
        key = base64.b64encode(os.urandom(16)).decode()
        status, _ = self.raw("/ws", {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": key,
                                     "Sec-WebSocket-Version": "13", "Origin": origin,
                                     "Sec-WebSocket-Protocol": f"bokeh, {token}",
                                     **({"Host": host} if host else {})})
        return status


@pytest.fixture(scope="module")
def served():
    s = Served()
    yield s
    s.stop()


def session_token(served) -> str:
    status, page = served.raw("/")
    assert status == 200
    m = re.search(r'"token":\s*"([^"]+)"', page) or re.search(r"token&quot;:\s*&quot;([^&]+)", page)
    if m is None:  # the page is long: fetch it whole
        import urllib.request
        html = urllib.request.urlopen(f"http://127.0.0.1:{served.port}/", timeout=30).read().decode()
        m = re.search(r'"token":\s*"([^"]+)"', html)
    assert m, "no session token in the page"
    return m.group(1)


def test_binds_loopback_only(served):
    assert served.url.startswith("http://127.0.0.1:")
    assert all(sock.getsockname()[0] == "127.0.0.1" for sock in served.server._http._sockets.values())


def test_page_offline_resources(served):
    import urllib.request
    html = urllib.request.urlopen(f"http://127.0.0.1:{served.port}/", timeout=30).read().decode()
    external = set(re.findall(r'(?:src|href)="((?:https?:)?//[^"]+)"', html))
    assert external == set(), external


def test_websocket_from_the_page_origin_is_accepted(served):
    # the control: the dashboard's own page, with a session token it was given, upgrades (101)
    assert served.ws(f"http://127.0.0.1:{served.port}", session_token(served)) == 101


@pytest.mark.parametrize("origin", [
    "http://192.168.1.23:{port}",         # a LAN browser's page
    "http://evil.example.com",            # another site
    "null",                               # a sandboxed frame / file: page
    None,                                 # a script that sends no Origin
])
def test_websocket_from_another_origin_or_none_is_refused(served, origin):
    origin = origin.format(port=served.port) if origin else None
    assert served.ws(origin, session_token(served)) == 403


def test_dns_rebinding_host_is_refused(served):
    evil = f"evil.example.com:{served.port}"
    assert served.ws(f"http://{evil}", session_token(served), host=evil) == 403
    status, body = served.raw("/", {"Host": evil})
    assert status == 403 and "is not this dashboard" in body


@pytest.mark.slow
def test_remote_address_needs_the_flag_and_then_a_token():
    with pytest.raises(UserError, match="--allow-remote"):
        make_server(dash_args(address="0.0.0.0"))
    with pytest.raises(UserError, match="--address: cannot resolve"):
        make_server(dash_args(address="bogus.invalid"))
    s = Served(address="127.0.0.1", require_token=True)
    try:
        token = s.url.split("?token=")[1]
        assert s.raw("/")[0] == 401
        assert s.raw("/?token=wrong")[0] == 401
        status, head = s.raw(f"/?token={token}")
        assert status == 302 and f"gnnrec_lab_token_{s.port}=" in head and "HttpOnly" in head
        assert s.raw("/", {"Cookie": f"gnnrec_lab_token_{s.port}={token}"})[0] == 200
        assert s.raw("/", {"Cookie": f"gnnrec_lab_token_{s.port}=wrong"})[0] == 401
        assert s.raw("/liveness")[0] == 200       # says nothing, needs no token
    finally:
        s.stop()


def test_guard_rules_without_a_server():
    g = RequestGuard(hosts={"localhost", "127.0.0.1", "::1"}, port=5006)
    ok = {"Host": "localhost:5006"}
    assert g.check("GET", "/", ok) is None
    assert g.check("GET", "/", {"Host": "[::1]:5006"}) is None
    assert g.check("GET", "/", {"Host": "localhost:5007"})[0] == 403
    assert g.check("GET", "/ws", dict(ok, Upgrade="websocket"))[0] == 403            # no Origin
    assert g.check("GET", "/ws", dict(ok, Upgrade="websocket", Origin="http://localhost:5006")) is None
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback(None) and not is_loopback("192.168.1.2")


def test_launch_policy_placement_dirs_and_active_cap(tmp_path):
    allowed = tmp_path / "pmem"
    allowed.mkdir()
    p = LaunchPolicy(placement_dirs=(os.path.realpath(allowed),), max_active=1)
    assert p.placement_error({"embeddings": f"file:{allowed}"}) is None
    assert p.placement_error({"embeddings": f"file:{allowed}/sub"}) is None
    assert "not under a directory allowed" in str(p.placement_error({"embeddings": f"file:{allowed}/../etc"}))
    err = p.placement_error({"embeddings": "file:/some/dir"})
    assert err.param == "placement" and "not under a directory allowed" in err.reason
    assert "--allow-placement-dir" in str(LaunchPolicy().placement_error({"optimizer": "file:/tmp"}))
    statuses = {1: "running"}
    p.record(1)
    assert "limit 1" in p.active_error(statuses.get)
    statuses[1] = "finished"
    assert p.active_error(statuses.get) is None


def test_lab_launch_refuses_outside_the_policy(tmp_path):
    """What a browser sends through the Launch page: a file: placement outside the allowed
    directories never reaches the runner."""
    from gnnrec_lab.dashboard.common import Lab
    from gnnrec_lab.dashboard.security import set_launch_policy

    class Runner:
        launched = []

        def launch(self, config, memory_limit_bytes=None):
            self.launched.append((config, memory_limit_bytes))
            return 1

    class Store:
        def status(self, rid):
            return "running"

    set_launch_policy(LaunchPolicy(placement_dirs=(), max_active=1, memory_limit_bytes=3 << 30))
    try:
        runner = Runner()
        lab = Lab(store=Store(), runner=runner)
        with pytest.raises(UserError, match="placement"):
            lab.launch(RunConfig(dataset="synth-tiny", placement={"embeddings": f"file:{tmp_path}"}))
        assert runner.launched == []
        assert lab.launch(RunConfig(dataset="synth-tiny", layers=1, dim=8)) == 1
        assert runner.launched[0][1] == 3 << 30                  # the default memory limit applies
        with pytest.raises(UserError, match="queued or running"):
            lab.launch(RunConfig(dataset="synth-tiny", layers=1, dim=8))
    finally:
        set_launch_policy(None)


def test_launch_button_disabled_with_the_reason(tmp_path, monkeypatch):
    """Issue 12 item 10 in the dashboard: a config predicted not to fit, or a file: placement the
    operator did not allow, keeps Launch disabled and says why next to the form."""
    from gnnrec_lab.dashboard.common import Lab
    from gnnrec_lab.dashboard.launch import LaunchPage
    from gnnrec_lab.memory import preflight
    from gnnrec_lab.runs.store import Store

    store = Store(tmp_path / "home")

    class Runner:
        def launch(self, config, **kw):
            raise AssertionError("must not be launched")

        def status(self, run_id):
            return store.status(run_id)

    page = LaunchPage(Lab(store=store, runner=Runner()))
    page.form.param.update(dataset="synth-tiny", layers=1, dim=8, epochs=1)
    assert not page.button.disabled
    monkeypatch.setattr(preflight, "available_bytes", lambda: 1 << 20)
    page.form.dim = 16
    assert page.button.disabled
    assert page.errors["form"].visible and "footprint: predicted" in page.errors["form"].object
    monkeypatch.undo()
    page.placement_inputs["embeddings"].value = f"file:{tmp_path}"
    assert page.button.disabled
    assert "--allow-placement-dir" in page.errors["placement"].object
    page.placement_inputs["embeddings"].value = ""
    assert not page.button.disabled


# ---------------------------------------------------------------------------
# issue 23 class 1: what a page on another site can make the server do with one GET
# ---------------------------------------------------------------------------
import sys  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gnnrec_lab.dashboard.security import component_allowed  # noqa: E402

# modules a hostile URL may name; none of them is imported by the dashboard (checked below)
NOT_SERVED = ["this", "antigravity", "turtle", "idlelib.idle", "http.server", "xmlrpc.server", "pydoc",
              "webbrowser", "tkinter", "lib2to3", "panel.tests.util", "gnnrec_lab.no_such_module",
              "..%2f..%2f..%2fetc%2fpasswd", "%2e%2e", "os", "subprocess", "builtins"]


@pytest.mark.parametrize("module", NOT_SERVED)
def test_component_route_imports_nothing_it_does_not_serve(served, module):
    """What a cross-site <img src> sends (no Origin, no token): refused with 404 before any handler,
    and the module it names is not imported (this process runs the server)."""
    name = module.replace("%2f", "/").replace("%2e", ".")
    before = name in sys.modules
    status, body = served.raw(f"/components/{module}/X/_css/a.css", {"Origin": None, "Connection": "close"})
    assert status == 404 and "not a component resource" in body, body[:300]
    assert (name in sys.modules) == before, f"{name} was imported by the request"


def test_component_route_still_serves_the_app_s_own_components(served):
    from panel.io.resources import component_resource_path
    from panel.template import FastListTemplate
    url = "/" + component_resource_path(FastListTemplate, "_css", FastListTemplate._css[0])
    assert component_allowed(url)
    status, body = served.raw(url)
    assert status == 200 and "text/css" in body.split("\r\n\r\n")[0], body[:300]


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._%2f0123456789", min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.lists(_SEGMENT, min_size=1, max_size=6))
def test_component_allow_list_never_imports(parts):
    """Generated paths: deciding never imports a module, and allows only loaded components of the
    dashboard's own packages."""
    loaded = set(sys.modules)
    path = "/components/" + "/".join(parts)
    ok = component_allowed(path)
    assert set(sys.modules) == loaded
    if ok:
        from urllib.parse import unquote
        mod = unquote(path[len("/components/"):]).split("/")[0]
        assert mod in sys.modules and mod.split(".")[0] in ("panel", "bokeh", "holoviews", "gnnrec_lab")


def test_ipv6_loopback_host_is_served_not_500(served):
    status, body = served.raw("/", {"Host": f"[::1]:{served.port}"})
    assert status == 200, body[:500]


def test_refused_requests_are_logged_without_the_token(served):
    import logging

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())
    keep = Keep()
    logs = [logging.getLogger(n) for n in ("tornado.access", "tornado.general", "tornado.application")]
    old = [log.level for log in logs]
    for log in logs:
        log.addHandler(keep)
        log.setLevel(logging.INFO)
    try:
        status, _ = served.raw("/?token=s3cret-token-value", {"Host": f"evil.example.com:{served.port}"})
        assert status == 403
        served.raw("/liveness?token=s3cret-token-value")
        # refused by Panel's own handler (an attribute it does not serve), which logs a warning too
        status, _ = served.raw("/components/panel.template.fast.list/FastListTemplate/nope/a?token=s3cret-token-value",
                               {"Connection": "close"})
        assert status == 403
    finally:
        for log, level in zip(logs, old):
            log.removeHandler(keep)
            log.setLevel(level)
    assert any("403 GET / (" in line for line in keep.lines), keep.lines
    assert any("FastListTemplate/nope/a (" in line and "Requested resource" in line for line in keep.lines), keep.lines
    assert not any("s3cret" in line for line in keep.lines), keep.lines


@pytest.mark.parametrize("address, loopback", [
    ("127.1", True), ("127.0.0.1", True), ("127.255.255.254", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0x7f.1", True), ("2130706433", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.1", False), ("10.0.0.1", False), ("", False)])
def test_loopback_in_every_spelling(address, loopback):
    assert is_loopback(address) is loopback


def test_short_loopback_address_needs_no_allow_remote():
    s = Served(address="127.1")
    try:
        assert s.guard.token is None
        status, _ = s.raw("/liveness")
        assert status == 200
    finally:
        s.stop()


def test_allowed_components_never_answer_500_or_leave_their_directory(served):
    """Generated over the app's components x every resource attribute Panel knows x traversal paths:
    4xx or the listed file, never a 500 and never a file outside the component's resources."""
    from panel.io.server import ComponentResourceHandler
    comps = [("panel.template.fast.list", "FastListTemplate"), ("panel.widgets.tables", "Tabulator"),
             ("gnnrec_lab.dashboard.launch", "LaunchPage")]
    for mod, cls in comps:
        assert component_allowed(f"/components/{mod}/{cls}/_css/a")
        for attr in ComponentResourceHandler._resource_attrs + ["__init__", "nope"]:
            for sub in ("a.css", "../../../../etc/passwd", "%2e%2e/%2e%2e/%2e%2e/etc/passwd", ".."):
                status, body = served.raw(f"/components/{mod}/{cls}/{attr}/{sub}", {"Connection": "close"})
                assert status < 500 and "root:x:" not in body, (mod, cls, attr, sub, status)
