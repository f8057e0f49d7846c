"""``gnnrec-lab dashboard``: serve the Panel dashboards at http://127.0.0.1:PORT/.

Safe by default: it listens on loopback only; requests whose ``Host`` or
``Origin`` does not name this server are refused, and so are websocket clients
without an ``Origin``. Serving other machines needs ``--address ADDR
--allow-remote`` and then a login token (printed once). Runs launched from the
browser get a memory limit, at most ``--max-runs`` at a time, and ``file:``
placements only under ``--allow-placement-dir`` directories.
"""
from __future__ import annotations

import argparse
import secrets
import socket

from gnnrec_lab.commands.common import bounded
from gnnrec_lab.config.bounds import integer
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import UserError

MAX_RUNS = 64   # --max-runs' largest value
DEFAULT_MAX_RUNS = 2   # the same cap a page served by `panel serve` gets (dashboard.security.DEFAULT_MAX_RUNS)


def register(subparsers) -> None:
    p = subparsers.add_parser("dashboard", help="serve the dashboards (Launch, Live, Breakdown, Compare, Cache)",
                              description=__doc__)
    p.add_argument("--port", type=bounded(integer, "--port", 0, 65535), default=5006,
                   help="TCP port (default 5006; 0 picks a free one)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only); another address "
                        "needs --allow-remote")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --address; a login token is then required and printed once")
    p.add_argument("--require-token", action="store_true",
                   help="require the login token on loopback too (machines shared with other users)")
    p.add_argument("--show", action=argparse.BooleanOptionalAction, default=False,
                   help="open a browser tab (default: --no-show)")
    p.add_argument("--allow-websocket-origin", action="append", default=None, metavar="HOST[:PORT]",
                   help="extra host name the browser may use to reach this server; repeatable (default: only the "
                        "address served on)")
    p.add_argument("--allow-placement-dir", action="append", default=[], metavar="DIR",
                   help="directory under which browser-launched runs may place tensors (file:DIR); "
                        "repeatable (default: none, so file: placements are refused from the browser)")
    p.add_argument("--max-runs", type=bounded(integer, "--max-runs", 1, MAX_RUNS), default=DEFAULT_MAX_RUNS,
                   help=f"runs launched from this dashboard that may be queued or running at once, 1 to {MAX_RUNS} "
                        f"(default {DEFAULT_MAX_RUNS})")
    p.add_argument("--run-memory-limit", default="auto", metavar="SIZE|auto|none",
                   help="memory limit (cgroup) of each browser-launched run (default auto: 3/4 of this "
                        "machine's memory where memory cgroups can be used)")
    p.set_defaults(func=run)


def _check_address(address: str) -> str:
    if not address:
        raise UserError("--address: give an address to listen on (127.0.0.1, 0.0.0.0, a host name)")
    try:
        socket.getaddrinfo(address, None)
    except (OSError, UnicodeError) as e:
        raise UserError(f"--address: cannot resolve {address!r} ({getattr(e, 'strerror', None) or e})") from None
    return address


def launch_policy_from_args(args):
    """The :class:`~gnnrec_lab.dashboard.security.LaunchPolicy` the flags ask for."""
    from gnnrec_lab.dashboard.security import LaunchPolicy, allowed_dirs, memory_limit_setting
    integer("--max-runs", args.max_runs, 1, MAX_RUNS)   # callers that build args themselves
    dirs = allowed_dirs(args.allow_placement_dir)
    limit, note = memory_limit_setting(args.run_memory_limit, "--run-memory-limit")
    return LaunchPolicy(placement_dirs=dirs, max_active=args.max_runs, memory_limit_bytes=limit,
                        memory_limit_note=note)


def make_server(args):
    """Build (not start) the server for ``args``: returns ``(server, url, guard)``.

    Raises UserError for a bad address/port, a remote address without
    ``--allow-remote`` or a port that cannot be bound.
    """
    integer("--port", args.port, 0, 65535)
    from gnnrec_lab.dashboard.security import RequestGuard, install_guard, is_loopback, local_names, set_launch_policy
    address = _check_address(args.address)
    remote = not is_loopback(address)
    if remote and not args.allow_remote:
        raise UserError(f"--address: {address} serves other machines; add --allow-remote to do so "
                        f"(a login token is then required), or use the default 127.0.0.1")
    policy = launch_policy_from_args(args)
    Store().close()   # the home and its run store, opened as `run` opens them: a bad home fails now, not on a page
    try:
        import panel as pn

        from gnnrec_lab.dashboard.app import TITLE, build_app
    except ImportError as e:
        raise UserError(f"the dashboards need the 'dash' extras (pip install 'gnnrec-lab[dash]'): {e}") from e
    token = secrets.token_urlsafe(24) if (remote or args.require_token) else None
    extra = {o.strip().lower() for o in (args.allow_websocket_origin or []) if o.strip()}
    guard = RequestGuard(hosts=local_names(address) | {e for e in extra if ":" not in e},
                         token=token, extra={e for e in extra if ":" in e})
    try:
        server = pn.serve({"/": build_app}, port=args.port, address=address, show=False, start=False,
                          title=TITLE, websocket_origin=[f"127.0.0.1:{args.port}"], liveness=True, verbose=False,
                          sign_sessions=True, secret_key=secrets.token_urlsafe(32))
    except OSError as e:
        raise UserError(f"--port: cannot listen on {address}:{args.port} ({e.strerror or e})") from None
    guard.port = server.port
    # Bokeh's own websocket origin check (a second line behind the guard) with the bound port
    server._tornado._websocket_origins = {f"{h}:{server.port}" if ":" not in h else f"[{h}]:{server.port}"
                                          for h in guard.hosts} | set(guard.extra)
    install_guard(server._tornado, guard)
    set_launch_policy(policy)
    host = address if remote and address not in ("0.0.0.0", "::") else (
        socket.gethostname() if remote else "127.0.0.1")
    if ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{server.port}/" + (f"?token={token}" if token else "")
    return server, url, guard


def run(args) -> int:
    server, url, guard = make_server(args)
    from gnnrec_lab.dashboard.security import launch_policy
    policy = launch_policy()
    print(f"gnnrec-lab dashboards: {url}", flush=True)
    if guard.token:
        print("  the login token is in the URL above and is shown only now; anyone who has it can "
              "launch runs as you", flush=True)
    if policy.memory_limit_bytes is None:
        print(f"  runs launched from the browser have no memory limit ({policy.memory_limit_note})", flush=True)
    if args.show:
        import webbrowser
        webbrowser.open(url)
    try:
        server.start()
        server.io_loop.start()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
