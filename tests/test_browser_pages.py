"""Launch and Cache in a real browser (chromium via Playwright); `panel serve`: test_browser_serve.py.

Uses the servers and helpers of tests/test_browser.py; each test has its own store and data dir.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

from test_browser import ARTIFACTS, CHROMIUM, browser, fill_form, free_port, open_page, serve, stop, wait_serving  # noqa: E402,F401

sync_api = pytest.importorskip("playwright.sync_api")
REPO = Path(__file__).resolve().parents[1]


# The text of the elements matching a selector, shadow roots included (Panel renders its panes
# inside shadow roots, which inner_text does not read).
DEEP_TEXT = """(sel) => {
  const deep = (el) => { let t = ''; const rec = (n) => { if (n.nodeName === 'STYLE' || n.nodeName === 'SCRIPT') return;
    if (n.nodeType === 3) t += n.textContent;
    n.childNodes.forEach(rec); if (n.shadowRoot) rec(n.shadowRoot); }; rec(el); return t; };
  const out = [];
  const walk = (root) => root.querySelectorAll('*').forEach(el => {
    if (el.matches(sel)) out.push(deep(el));
    if (el.shadowRoot) walk(el.shadowRoot); });
  if (document.body.matches(sel)) return deep(document.body);
  walk(document);
  return out.join('\\n');
}"""


def deep_text(page, selector: str) -> str:
    return page.evaluate(DEEP_TEXT, selector)


def page_text(page) -> str:
    return deep_text(page, "body")


def wait_text(page, selector: str, needle: str, timeout: float = 30) -> str:
    """The deep text of ``selector`` once it contains ``needle`` (AssertionError with it after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        text = deep_text(page, selector)
        if needle in text or time.monotonic() > deadline:
            assert needle in text, f"{needle!r} not in {selector}: {text[-3000:]!r}"
            return text
        time.sleep(0.2)


def seed_store(home: Path) -> dict:
    """Three finished DRAM runs of one shape (one measured under load) and a host calibration."""
    os.environ["GNNREC_LAB_HOME"] = str(home)   # the helpers write where the server will read
    from test_dashboard_components import _calibrate
    from test_launch_page import _dram_run

    from gnnrec_lab.runs.store import Store
    home.mkdir(parents=True, exist_ok=True)
    _calibrate()
    store = Store(home)
    ids = {"slow": _dram_run(store, 6.0, load1=5.0), "fast": _dram_run(store, 1.0), "mid": _dram_run(store, 2.0)}
    store.close()
    return ids


def test_launch_page_memory_step_time_spread_and_form(tmp_path, browser, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    ids = seed_store(tmp_path / "home")
    ARTIFACTS.mkdir(exist_ok=True)
    proc, url = serve(tmp_path)
    try:
        page, errors = open_page(browser, url)
        fill_form(page, dataset="synth-tiny", layers=1, dim=8, batch_size=512)
        page.locator(".launch-memory_mode select").select_option("optane_app_direct")
        text = wait_text(page, ".launch-step-note", "fastest", timeout=60)
        assert f"run #{ids['fast']}" in text and "fastest" in text and "3 stored DRAM runs" in text, text
        assert f"#{ids['slow']} " in text and "load > cores" in text
        assert "all tensor classes on the device" in text
        # Optane 200 can be chosen; the prediction follows it
        profile = page.locator(".launch-device_profile select")
        profile.select_option("optane_pmem200_appdirect_8x")
        step = wait_text(page, ".launch-step-note", "modeled on optane_pmem200_appdirect_8x)")
        assert re.search(r"modeled on optane_pmem200_appdirect_8x\)\): [0-9.]+ ms kernel time per step \(modeled\)",
                         step), step
        memory = deep_text(page, ".launch-memory-note")
        assert len(re.findall(r"Predicted [0-9.]+ [KMG]iB in DRAM", memory)) == 1, memory
        assert "run's memory limit" in memory or "memory available now" in memory
        for name in ("eval_users", "patience", "seed"):
            sync_api.expect(page.locator(f".launch-{name} input")).to_be_visible()
        page.locator(".launch-mode select").select_option("sampled")
        sync_api.expect(page.locator(".launch-cache_policy select")).to_be_visible()
        page.locator(".launch-mode select").select_option("full")
        # DistDGL is an engine of the form: its machines show with it, its own checks inline
        page.locator(".launch-engine select").select_option(label="DistDGL (a local cluster of machines)")
        sync_api.expect(page.locator(".launch-partitions input")).to_be_visible()
        wait_text(page, ".launch-error-mode", "a DistDGL run samples each batch's neighbourhood")
        sync_api.expect(page.locator(".launch-button button")).to_be_disabled()
        page.locator(".launch-engine select").select_option(label="this machine (full graph or sampled)")
        sync_api.expect(page.locator(".launch-partitions input")).to_be_hidden()
        page.screenshot(path=str(ARTIFACTS / "launch-prediction.png"), full_page=True)
        # an impossible batch: refused inline, under its field, with the run's own words
        box = page.locator(".launch-batch_size input")
        box.fill("10000000")
        box.press("Enter")
        box.press("Tab")
        err = wait_text(page, ".launch-error-batch_size", "must be at most the number of")
        assert "10,000,000" in err
        sync_api.expect(page.locator(".launch-button button")).to_be_disabled()
        body = page_text(page)
        assert "--force" not in body and "form:" not in body
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)


def test_cache_page_says_simulating_while_it_does_and_uses_the_cli_batch(tmp_path, browser):
    from gnnrec_lab import data
    from gnnrec_lab.commands.cli import build_parser
    data.load("synth-tiny", data_dir=tmp_path / "data")   # prepared: the page simulates it at once
    cli_default = build_parser().parse_args(["cache", "skew", "--dataset", "x"]).batch_size
    proc, url = serve(tmp_path)
    try:
        page, errors = open_page(browser, url)
        page.get_by_text("Cache", exact=True).first.click()
        page.get_by_role("heading", name=re.compile(r"^Embedding cache")).wait_for(timeout=15_000)
        sync_api.expect(page.locator(".cache-batch_size input")).to_have_value(str(cli_default))
        # from the first moment to the end: a disabled button never sits beside "Press Simulate"
        deadline = time.monotonic() + 300     # the first simulation compiles its numba kernels
        # (a warm simulation can end before the first poll: the busy text itself is checked in
        # tests/test_pages_small.py, where the simulation is held)
        button = page.locator(".cache-simulate button")
        while time.monotonic() < deadline:
            disabled = button.is_disabled()
            press = page.get_by_text("Press Simulate").count()
            assert not (disabled and press), "the button is disabled while the plot area says Press Simulate"
            if not disabled and page.get_by_text(re.compile(r"top 1% of rows take")).count():
                break
            time.sleep(0.1)
        else:
            page.screenshot(path=str(ARTIFACTS / "cache-pending-failed.png"), full_page=True)
            raise AssertionError(f"the simulation did not end: button disabled {disabled}")
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)


def test_an_address_opens_one_run_s_live_page_and_a_bad_one_says_why(tmp_path, browser, monkeypatch):
    """``?page=Live&run=N`` (a bookmark of one run's Live page) opens on that run; a page or run
    that does not exist is named on the page (its characters reduced to letters and digits) and
    the app opens as usual."""
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    ids = seed_store(tmp_path / "home")
    proc, url = serve(tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}?page=live&run={ids['fast']}")
        text = wait_text(page, ".live-status", f"run #{ids['fast']} ")
        assert "finished" in text
        assert f"#{ids['fast']} " in page.locator(".live-select select").first.evaluate(
            "s => s.options[s.selectedIndex].text")
        page.goto(f"{url}?page=%3Cb%3Eboss%3C/b%3E&run=99")
        page.get_by_text("Launch a run").wait_for(timeout=30_000)
        note = wait_text(page, ".link-problem", "is not a page")
        assert "?page=?b?boss??b? is not a page" in note and "?run=99: no such run" in note
        assert page.locator("b", has_text="boss").count() == 0      # nothing of the address became markup
    finally:
        stop(proc)
