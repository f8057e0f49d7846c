"""Screenshots of each dashboard page for the README (docs/img/*.png).

Prepares a throw-away store with a host calibration and two short ML-100K runs (one on DRAM,
one in Optane App Direct mode, modeled), serves the dashboard on loopback and photographs each
page in Debian's chromium through Playwright. Run: .venv/bin/python scripts/screenshots.py
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img"
CLI = [sys.executable, "-m", "gnnrec_lab.commands.cli"]
PAGES = ("Launch", "Live", "Breakdown", "Compare", "Cache")


def main() -> int:
    home = tempfile.mkdtemp(prefix="gnnrec-lab-shots-")
    env = dict(os.environ, GNNREC_LAB_HOME=home)
    run = lambda *a: subprocess.run(CLI + list(a), env=env, check=True, stdout=subprocess.DEVNULL)  # noqa: E731
    run("calibrate", "--quick")
    common = ["--dataset", "ml-100k", "--epochs", "3", "--max-steps-per-epoch", "20", "--no-progress"]
    run("run", *common)
    run("run", *common, "--memory-mode", "optane_app_direct")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(CLI + ["dashboard", "--port", str(port), "--no-show"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(150):
            try:
                if urllib.request.urlopen(url + "liveness", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        OUT.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                  args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.get_by_text("Launch a run").wait_for(timeout=60_000)
            for name in PAGES:
                page.get_by_text(name, exact=True).first.click()
                page.wait_for_timeout(6000)          # let the page's plots draw
                page.screenshot(path=str(OUT / f"{name.lower()}.png"), full_page=False)
                print("wrote", OUT / f"{name.lower()}.png")
            b.close()
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
