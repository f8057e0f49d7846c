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
