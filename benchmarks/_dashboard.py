"""What the dashboard benchmarks share: serving `gnnrec-lab dashboard` on a free loopback port and
launching headless Debian chromium."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(env: dict, prefix: list | None = None, timeout_s: float = 90.0) -> tuple:
    """Start the dashboard (``prefix``: e.g. taskset's argv) and wait until it answers; ``(process, url)``."""
    port = free_port()
    proc = subprocess.Popen((prefix or []) + [sys.executable, "-m", "gnnrec_lab.commands.cli", "dashboard", "--port",
                                              str(port), "--no-show", "--address", "127.0.0.1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url + "liveness", timeout=2)
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("the dashboard did not start") from None
            time.sleep(0.2)


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


class ProtocolSessions:
    """Dashboard sessions opened over Bokeh's websocket protocol, without a browser: each GETs the
    page (the server builds the app for it, as for a browser), connects its websocket with the
    page's session token, pulls the document and then receives every change the server pushes
    (``PATCH-DOC``), exactly what a browser tab receives; it renders nothing. ``watch``: a phrase of
    the text whose changes are timed (``changes[i]``: the arrival times, s since the epoch, of the
    patches of session ``i`` that carry it). Runs its own event loop in a thread."""

    def __init__(self, url: str, watch: str):
        import asyncio
        import threading
        self.url, self.watch = url, watch
        self.changes: list = []
        self._ready: dict = {}       # session index -> its document has arrived
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="protocol-sessions", daemon=True)
        self.thread.start()

    def open(self, timeout: float = 120.0) -> int:
        """Open one more session; return its index once its document has arrived."""
        import asyncio
        i = len(self.changes)
        self.changes.append([])
        ready = asyncio.run_coroutine_threadsafe(self._session(i), self.loop)
        started = time.monotonic()
        while not self._ready.get(i) and time.monotonic() - started < timeout:
            if ready.done():
                ready.result()   # raises what ended it
            time.sleep(0.05)
        if not self._ready.get(i):
            raise SystemExit(f"protocol session {i} got no document in {timeout:.0f} s")
        return i

    async def _session(self, i: int) -> None:
        import json
        import re
        from urllib.parse import urlsplit

        from tornado.httpclient import AsyncHTTPClient, HTTPRequest
        from tornado.websocket import websocket_connect
        parts = urlsplit(self.url)
        origin = f"{parts.scheme}://{parts.netloc}"
        page = await AsyncHTTPClient().fetch(self.url, request_timeout=120)
        token = re.search(r'"token":"([^"]+)"', page.body.decode()).group(1)
        ws = await websocket_connect(HTTPRequest(f"ws://{parts.netloc}/ws", headers={"Origin": origin}),
                                     subprotocols=["bokeh", token], max_message_size=1 << 30)

        async def message():
            header = json.loads(await ws.read_message())
            await ws.read_message()                       # metadata
            content = await ws.read_message()
            for _ in range(2 * header.get("num_buffers", 0)):   # (buffer header, payload) pairs
                await ws.read_message()
            return header, content

        await message()                                   # ACK
        for frame in ({"msgid": "1", "msgtype": "PULL-DOC-REQ"}, {}, {}):
            await ws.write_message(json.dumps(frame))
        while True:
            try:
                header, content = await message()
            except TypeError:            # read_message() gave None: the server closed the socket
                return
            if header["msgtype"] == "PULL-DOC-REPLY":
                self._ready[i] = True
            elif header["msgtype"] == "PATCH-DOC" and self.watch in content:
                self.changes[i].append(time.time())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
