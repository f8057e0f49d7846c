"""``panel serve dashboards/app.py`` launches when it is safe: the decision from the server's settings
(a table), the settings read from a real Bokeh server in this process, and the served policy (cap
and memory limit) every served page gets. The same pages in chromium under both servers:
tests/test_browser_serve.py."""
from __future__ import annotations

import asyncio
import threading
import urllib.request

import pytest

pn = pytest.importorskip("panel")
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")

from gnnrec_lab.dashboard import security  # noqa: E402
from gnnrec_lab.dashboard.serving import ServerSettings, launch_verdict, served_settings  # noqa: E402

LOOP = dict(listen=("127.0.0.1",), port=5006, origins=("localhost:5006",), host="127.0.0.1:5006")


def s(**kw) -> ServerSettings:
    return ServerSettings(**{**LOOP, **kw})


# (settings, launching on, words the reason must hold)
CASES = [
    ("panel serve --address 127.0.0.1 (Bokeh's default origin)", s(), True, "loopback only"),
    ("reached as localhost", s(host="localhost:5006"), True, "loopback"),
    ("IPv6 loopback", s(listen=("::1",), host="[::1]:5006"), True, "loopback"),
    ("both loopback names allowed", s(origins=("localhost:5006", "127.0.0.1:5006")), True, "127.0.0.1:5006"),
    ("--address 0.0.0.0", s(listen=("0.0.0.0",)), False, "0.0.0.0 (every interface) without authentication"),
    ("no --address: every interface", s(listen=("0.0.0.0", "::")), False, "every interface"),
    ("a LAN address", s(listen=("192.168.1.5",)), False, "listens on 192.168.1.5"),
    ("loopback and a LAN address", s(listen=("127.0.0.1", "10.0.0.2")), False, "10.0.0.2"),
    ("a unix socket", s(listen=("unix:/tmp/lab.sock",), port=None), False, "unix:/tmp/lab.sock"),
    ("no socket reported", s(listen=()), False, "listens on"),
    ("--allow-websocket-origin=*", s(origins=("*",)), False, "any origin matching *"),
    ("a wildcard port", s(origins=("localhost:*",)), False, "localhost:*"),
    ("a wildcard even with a login", s(origins=("*",), auth="basic auth"), False, "any origin"),
    ("another host's origin", s(origins=("localhost:5006", "lab.example.org:5006")), False,
     "lab.example.org:5006"),
    ("another local port's pages (a notebook server)", s(origins=("localhost:5006", "localhost:8888")), False,
     "localhost:8888"),
    ("an origin without a port (BOKEH_ALLOW_WS_ORIGIN=localhost)", s(origins=("localhost",)), False,
     "from localhost "),
    ("DNS rebinding: a page of another name", s(host="rebind.example.com:5006"), False,
     "reached as 'rebind.example.com:5006'"),
    ("no Host", s(host=None), False, "reached as"),
    ("markup in the Host is not echoed", s(host="<b>x</b>:5006"), False, "'?b?x??b?:5006'"),
    ("through a proxy", s(forwarded=("X-Forwarded-For",)), False, "proxy (X-Forwarded-For"),
    ("--address 0.0.0.0 --basic-auth", s(listen=("0.0.0.0",), auth="basic auth"), True, "basic auth"),
    ("a named origin with OAuth", s(listen=("0.0.0.0",), origins=("lab.example.org:443",), host="lab.example.org",
                                    auth="OAuth (github)"), True, "OAuth (github)"),
    ("settings not readable", ServerSettings(unknown="its Bokeh server was not found"), False,
     "could not be read (its Bokeh server was not found)"),
]


@pytest.mark.parametrize("settings,on,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_launch_verdict(settings, on, words):
    v = launch_verdict(settings)
    assert v.on is on, v.reason
    assert words in v.reason, v.reason
    if not on:
        # off says so the way every page's read-only note reads it, and what to do instead
        assert v.reason.startswith("read-only: ") and "gnnrec-lab dashboard" in v.reason, v.reason
        assert "<" not in v.reason


def test_the_way_out_names_the_server_s_own_port():
    v = launch_verdict(s(listen=("0.0.0.0",), port=5207))
    assert "--address 127.0.0.1" in v.reason and "http://localhost:5207/app" in v.reason
    assert "--basic-auth" in v.reason
    # a login does not make a wildcard origin safe: not offered as the way out there
    assert "--basic-auth" not in launch_verdict(s(origins=("*",))).reason


# ---------------------------------------------------------------------------
# the settings, read from a real server
# ---------------------------------------------------------------------------
def serve_and_read(headers=None, **serve_kw) -> tuple[ServerSettings, int]:
    """Serve one app in a thread of this process (Panel's server, as ``panel serve`` makes it), open
    its page once and return what :func:`served_settings` read in that session."""
    seen = {}

    def app():
        seen["settings"] = served_settings()
        return pn.pane.Markdown("x")

    ready, box = threading.Event(), {}

    def main():
        asyncio.set_event_loop(asyncio.new_event_loop())
        box["server"] = pn.serve({"/app": app}, port=0, show=False, start=False, **serve_kw)
        box["server"].start()
        ready.set()
        box["server"].io_loop.start()

    t = threading.Thread(target=main, daemon=True)
    t.start()
    assert ready.wait(60)
    server = box["server"]
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/app", headers=headers or {})
        assert urllib.request.urlopen(req, timeout=60).status == 200
    finally:
        server.io_loop.add_callback(lambda: (server.stop(), server.io_loop.stop()))
        t.join(10)
    return seen["settings"], server.port


def test_settings_read_from_the_serving_server_loopback_default():
    got, port = serve_and_read(address="127.0.0.1")
    assert got.unknown is None
    assert got.listen == ("127.0.0.1",) and got.port == port
    assert set(got.origins) == {f"localhost:{port}"}         # Bokeh's default: its own loopback name
    assert got.auth is None and got.host == f"127.0.0.1:{port}" and got.forwarded == ()
    assert launch_verdict(got).on


def test_settings_read_from_the_serving_server_open_origins_and_a_proxy():
    got, port = serve_and_read(address="127.0.0.1", websocket_origin="*",
                               headers={"X-Forwarded-For": "203.0.113.9"})
    assert got.listen == ("127.0.0.1",) and got.origins == ("*",)
    assert got.forwarded == ("X-Forwarded-For",)
    v = launch_verdict(got)
    assert not v.on and "any origin matching *" in v.reason


def test_bokeh_allow_ws_origin_overrides_the_server_s_list(monkeypatch):
    monkeypatch.setenv("BOKEH_ALLOW_WS_ORIGIN", "lab.example.org:80")
    got, port = serve_and_read(address="127.0.0.1")
    assert got.origins == ("lab.example.org:80",)
    assert not launch_verdict(got).on


def test_outside_a_served_session_the_settings_are_unknown():
    got = served_settings()
    assert got.unknown and not launch_verdict(got).on


# ---------------------------------------------------------------------------
# the policy a served page launches under
# ---------------------------------------------------------------------------
@pytest.fixture
def no_policy():
    security.set_launch_policy(None)
    yield
    security.set_launch_policy(None)


def test_a_served_page_gets_the_cap_and_memory_limit_when_its_server_sets_none(no_policy):
    from gnnrec_lab.commands import dashboard as command
    from gnnrec_lab.util.cgroup import cgroup_usable
    assert security.launch_policy().max_active is None          # a notebook: no cap
    p = security.served_launch_policy()
    assert p.max_active == security.DEFAULT_MAX_RUNS == command.DEFAULT_MAX_RUNS
    if cgroup_usable() is None:
        assert p.memory_limit_bytes == security.default_memory_limit()
    else:
        assert p.memory_limit_bytes is None and p.memory_limit_note
    assert security.launch_policy() is p                       # what Lab.launch checks
    assert security.served_launch_policy() is p                # installed once per process


def test_gnnrec_lab_dashboard_s_own_policy_is_kept(no_policy):
    mine = security.LaunchPolicy(max_active=5)
    security.set_launch_policy(mine)
    assert security.served_launch_policy() is mine


def test_the_served_cap_refuses_with_its_own_words(no_policy, tmp_path):
    p = security.served_launch_policy()
    p.record(1)
    p.record(2)
    why = p.active_error(lambda rid: "running")
    assert "limit 2" in why and "--max-runs N" in why and "gnnrec-lab dashboard" in why


def test_the_panel_serve_app_launches_on_loopback_and_not_beyond(no_policy, tmp_path, monkeypatch):
    """The session's app follows the verdict: launching on (with the limits named) or read-only with
    the reason, on the sidebar and at the Launch button."""
    from gnnrec_lab.dashboard import app as app_mod
    from gnnrec_lab.dashboard import common, serving
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    monkeypatch.setattr(common, "_shared", {})      # this test's store and runner, dropped after it
    monkeypatch.setattr(serving, "served_settings", lambda: s())
    on = app_mod.panel_serve_app()
    assert on.lab.runner is not None and not on.lab.read_only
    side = "\n".join(str(o.object) for o in on.sidebar if hasattr(o, "object"))
    assert "Launching is on" in side and "loopback" in side
    monkeypatch.setattr(serving, "served_settings", lambda: s(origins=("*",)))
    off = app_mod.panel_serve_app()
    assert off.lab.runner is None and "any origin matching *" in off.lab.read_only
    from test_dashboard_components import texts
    assert "Launching is off here" in texts(off.tabs.page("Launch"))
    assert off.tabs.page("Launch").button.disabled
    on.lab.runner.close()


def test_dashboards_app_is_the_panel_serve_app():
    src = open("dashboards/app.py").read()
    assert "panel_serve_app().servable()" in src and "read_only" not in src.split('"""')[-1]


def test_a_login_is_read_from_the_server_s_auth_provider():
    import types

    from bokeh.server.auth_provider import AuthProvider, NullAuth

    from gnnrec_lab.dashboard.serving import _auth

    class Module(AuthProvider):     # what `--auth-module` gives Bokeh
        get_user = staticmethod(lambda handler: "someone")
        login_url = "/login"
    assert _auth(types.SimpleNamespace(auth_provider=NullAuth())) is None
    assert _auth(types.SimpleNamespace()) is None
    assert _auth(types.SimpleNamespace(auth_provider=Module())) == "Module"
    with pn.config.set(basic_auth="secret-password"):
        assert _auth(types.SimpleNamespace(auth_provider=Module())) == "basic auth"
    with pn.config.set(oauth_provider="github"):
        assert _auth(types.SimpleNamespace(auth_provider=Module())) == "OAuth (github)"
        with pn.config.set(oauth_optional=True):      # visitors who did not log in are served too
            assert _auth(types.SimpleNamespace(auth_provider=Module())) is None
