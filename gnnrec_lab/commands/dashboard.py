"""``gnnrec-lab dashboard``: serve the Panel dashboards at http://localhost:PORT/."""
from __future__ import annotations

import argparse

from ..errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser("dashboard", help="serve the dashboards (Launch, Live, Breakdown, Compare, Cache)",
                              description=__doc__)
    p.add_argument("--port", type=int, default=5006, help="TCP port (default 5006; 0 picks a free one)")
    p.add_argument("--address", default=None, help="address to listen on (default: all interfaces)")
    p.add_argument("--show", action=argparse.BooleanOptionalAction, default=False,
                   help="open a browser tab (default: --no-show)")
    p.add_argument("--allow-websocket-origin", action="append", default=None, metavar="HOST[:PORT]",
                   help="extra origins allowed to connect (repeatable)")
    p.set_defaults(func=run)


def run(args) -> int:
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port: must be 0..65535, got {args.port}")
    try:
        import panel as pn
        from ..dashboard.app import TITLE, build_app
    except ImportError as e:
        raise UserError(f"the dashboards need the 'dash' extras (pip install 'gnnrec-lab[dash]'): {e}")
    origins = list(args.allow_websocket_origin or [])
    if args.address and args.address not in ("0.0.0.0", "::"):
        origins.append(f"{args.address}:{args.port}")
    origins += [f"localhost:{args.port}", f"127.0.0.1:{args.port}"]
    server = pn.serve({"/": build_app}, port=args.port, address=args.address, show=False, start=False,
                      title=TITLE, websocket_origin=origins, liveness=True)
    port = server.port
    host = args.address if args.address and args.address not in ("0.0.0.0", "::") else "localhost"
    print(f"gnnrec-lab dashboards: http://{host}:{port}/", flush=True)
    if args.show:
        import webbrowser
        webbrowser.open(f"http://{host}:{port}/")
    try:
        server.start()
        server.io_loop.start()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
