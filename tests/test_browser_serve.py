"""Launching from the page under both servers, in chromium (Playwright).

``panel serve dashboards/app.py`` on loopback with Bokeh's websocket origin check in force launches
real runs and holds the cap every served page gets; the same server told to accept websocket
connections from any origin (still on loopback, so no host interface is touched) is read-only
and says why; ``gnnrec-lab dashboard`` launches as before, under its own cap. Every server listens
on 127.0.0.1 on a free port and is killed in ``finally``. The decision itself, case by case:
tests/test_panel_serve.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

from test_browser import ARTIFACTS, browser, fill_form, free_port, open_page, serve, stop, wait_serving  # noqa: E402,F401
from test_browser_pages import deep_text, page_text, wait_text  # noqa: E402

sync_api = pytest.importorskip("playwright.sync_api")
REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def held_then_train(config, **kw):
    """Training for these tests (``GNNREC_LAB_TRAIN_FN=test_browser_serve:held_then_train``): the
    lab's own training of ``config``, after ``HOLD_S`` seconds in which the run counts as running,
    so the cap is met while a person (here: the test) clicks Launch again."""
    time.sleep(float(os.environ.get("HOLD_S", "0")))
    from gnnrec_lab.training.loop import train
    return train(config, **kw)


def served_here(page, url: str) -> list:
    """The page's errors, counting the server's own files (``/static/...``, beside the app's ``/app``) as
    its own: ``open_page`` takes every request outside the app's URL for another host's."""
    root = url.rsplit("/", 1)[0] + "/"
    return [e for e in page.errors() if not e.startswith(f"external request: {root}")]


def panel_serve(tmp_path, *flags, env=None):
    """``panel serve dashboards/app.py --address 127.0.0.1 --port FREE *flags`` in its own session;
    returns (process, the app's URL)."""
    port = free_port()
    full = dict(os.environ, GNNREC_LAB_HOME=str(tmp_path / "home"), GNNREC_LAB_DATA=str(tmp_path / "data"),
                PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")]), **(env or {}))
    full.pop("BOKEH_ALLOW_WS_ORIGIN", None)
    log = open(tmp_path / "panel.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "panel", "serve", str(REPO / "dashboards" / "app.py"),
                             "--port", str(port), "--address", "127.0.0.1", *flags], env=full, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=str(tmp_path))
    url = f"http://127.0.0.1:{port}/app"
    try:
        wait_serving(proc, url, tmp_path / "panel.log", "panel serve", 90, poll_s=0.5, get_timeout=30)
    except BaseException:
        stop(proc)
        raise
    return proc, url


STATUS = re.compile(r"Launched run #\d+|Not launched: [^\n]*")


def launch_status(page) -> str:
    """The Launch page's last status line ("Launched run #N ..." or "Not launched: why"), or ''."""
    found = STATUS.findall(page_text(page))
    return found[-1] if found else ""


def click_launch(page, old: str) -> str:
    """Back to Launch (a launch opens Live), press its button and return the status line that
    replaces ``old``."""
    tab = page.get_by_text("Launch", exact=True).first
    tab.click()
    button = page.locator(".launch-button button")
    sync_api.expect(button).to_be_enabled(timeout=30_000)
    button.click()
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        text = launch_status(page)
        if text and text != old:
            return text
        time.sleep(0.5)
        if not text:
            tab.click()      # the launch opened Live: the status line is on Launch
    raise AssertionError(f"no new launch status after the click: {launch_status(page)!r}")


def wait_ended(store, run_ids, timeout_s=180):
    deadline = time.monotonic() + timeout_s
    while not all(store.status(r).is_terminal for r in run_ids):
        if time.monotonic() > deadline:
            raise AssertionError(f"runs did not end: {store.runs_frame()[['id', 'status']]}")
        time.sleep(0.5)


def launch_up_to_the_cap(page, store, cap_words):
    """Launch #1 (held, then trains), #2 (queued behind it), then a third press is refused with the
    cap's words; once both end a launch is accepted again. Returns the run ids."""
    fill_form(page, dataset="synth-tiny", layers=1, dim=8, epochs=1, batch_size=512, max_steps_per_epoch=4)
    first = click_launch(page, "")
    assert first == "Launched run #1", first
    second = click_launch(page, first)
    assert second == "Launched run #2", second
    third = click_launch(page, second)
    assert third.startswith("Not launched") and "limit 2" in third and cap_words in third, third
    assert sorted(store.run_ids()) == [1, 2]
    wait_ended(store, [1, 2])
    assert [store.status(r) for r in (1, 2)] == ["finished", "finished"], store.get_run(1)["error"]
    again = click_launch(page, third)
    assert again == "Launched run #3", again
    wait_ended(store, [3])
    assert store.status(3) == "finished", store.get_run(3)["error"]
    return [1, 2, 3]


def test_panel_serve_on_loopback_launches_runs_and_holds_the_cap(tmp_path, browser):
    from gnnrec_lab.runs.store import Store
    proc, url = panel_serve(tmp_path, env={"GNNREC_LAB_TRAIN_FN": "test_browser_serve:held_then_train",
                                           "HOLD_S": "8"})
    try:
        page, errors = open_page(browser, url)
        note = wait_text(page, ".launch-on-note", "Launching is on")
        assert "loopback" in note and "at most 2 run(s) queued or running" in note, note
        assert "Launching is off here" not in page_text(page)
        store = Store(tmp_path / "home")
        launch_up_to_the_cap(page, store, "the cap of every served page; gnnrec-lab dashboard --max-runs N sets")
        assert len(store.runs_frame()) == 3
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "panel-serve-launch.png"), full_page=True)
        assert served_here(page, url) == [], served_here(page, url)
    finally:
        stop(proc)


def test_panel_serve_open_to_every_origin_is_read_only_and_says_why(tmp_path, browser):
    proc, url = panel_serve(tmp_path, "--allow-websocket-origin=*")
    try:
        page, errors = open_page(browser, url)
        note = wait_text(page, ".launch-read-only", "Launching is off here")
        assert "any origin matching *" in note and "launch runs as you" in note, note
        assert "--address 127.0.0.1" in note and "gnnrec-lab dashboard" in note, note
        assert "Read-only" in deep_text(page, ".read-only-note")
        page.locator(".launch-dataset select").select_option("synth-tiny")
        sync_api.expect(page.locator(".launch-button button")).to_be_disabled()
        assert "Run an example" not in page_text(page)
        assert page.locator(".launch-on-note").count() == 0
        from gnnrec_lab.runs.store import Store
        assert Store(tmp_path / "home").run_ids() == []
    finally:
        stop(proc)


def test_gnnrec_lab_dashboard_still_launches_under_its_own_cap(tmp_path, browser):
    from gnnrec_lab.runs.store import Store
    proc, url = serve(tmp_path, {"GNNREC_LAB_TRAIN_FN": "test_browser_serve:held_then_train", "HOLD_S": "8"})
    try:
        page, errors = open_page(browser, url)
        assert "Launching is off here" not in page_text(page)
        assert page.locator(".launch-on-note").count() == 0       # its guard is its own; nothing to explain
        launch_up_to_the_cap(page, Store(tmp_path / "home"), "--max-runs)")
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)
