"""Live, Breakdown and Compare in a real browser, over a store this test writes itself.

The test process plays the run's worker: it writes steps, evaluations and the end of a run into
the store (the run's pid is the test's own, so the server's runner sees a live worker), while
chromium shows the served dashboard. Helpers and launch flags come from ``test_browser``.
"""
from __future__ import annotations

import math
import os
import re
import time

import pytest
from test_browser import ARTIFACTS, DRAWN_CANVASES, browser, open_page, run_chooser, serve, stop, sync_api  # noqa: F401
from test_browser_pages import DEEP_TEXT, deep_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Plots of the page's Bokeh document: title, id, y range, number of points of its first source.
PLOTS = """() => {
  const out = [];
  for (const doc of Bokeh.documents) {
    for (const m of doc.all_models) {
      if (!m.title || m.y_range === undefined || m.renderers === undefined) continue;
      const r = m.renderers.find(r => r.data_source !== undefined);
      const n = r ? r.data_source.get_length() : null;
      out.push({title: m.title.text === undefined ? String(m.title) : m.title.text, id: m.id,
                y0: m.y_range.start, y1: m.y_range.end, n: n});
    }
  }
  return out;
}"""


def drawn_range(plot: dict) -> bool:
    return all(isinstance(plot[k], (int, float)) and math.isfinite(plot[k]) for k in ("y0", "y1"))


def plots(page, prefix: str) -> list:
    return [p for p in page.evaluate(PLOTS) if (p["title"] or "").startswith(prefix)]


def wait_plot(page, prefix: str, cond, timeout_s: float = 20.0):
    """The first plot titled ``prefix...`` once ``cond(plot)`` holds (polls the page's Bokeh document)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [p for p in plots(page, prefix) if cond(p)]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no plot {prefix!r} as wanted: {plots(page, prefix)}")
        time.sleep(0.25)


def _records(step, ms, phases=("forward",)):
    from gnnrec_lab.util.recorder import KernelRecord
    return [KernelRecord("spmm", ph, 0, step, int(ms * 1e6), 1, 1, 1, "gather", 32, 1, "native") for ph in phases]


def _run(store, ms, steps, *, mode="dram", status="finished", valid=True):
    """A run of ``steps`` steps of ``ms`` ms each (its worker: this process)."""
    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.util.proc import proc_start_ticks
    rid = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1, memory_mode=mode),
                        status="running")
    store.set_fields(rid, pid=os.getpid(), pid_start=proc_start_ticks(os.getpid()))
    store.record_start(rid, {"steps_per_epoch": max(steps, 4), "footprint_predicted": {"graph": 1000,
                                                                                    "embeddings": 2000}})
    for s in range(1, steps + 1):
        store.add_step(rid, s, 1, 2.0 / s, ms / 1e3, _records(s, ms))
    if valid and steps:
        store.add_eval(rid, 1, steps, "valid", {"recall@20": 0.05}, 1.0)
    if status != "running":
        store.set_status(rid, status)
    return rid


def _header(page) -> str:
    return " ".join(deep_text(page, ".live-status").split())


def test_live_follows_the_selected_run_patches_and_reads_the_end(tmp_path, browser):  # noqa: F811
    """Issue 22, items 2 and 10, as a user sees them."""
    ARTIFACTS.mkdir(exist_ok=True)
    from gnnrec_lab.runs.store import Store
    store = Store(tmp_path / "home")
    slow = _run(store, 1200.0, 30)
    # a newer run, no step yet, in a modeled memory mode
    new = _run(store, 10.0, 0, mode="cxl", status="running", valid=False)
    proc, url = serve(tmp_path)
    try:
        page, _ = open_page(browser, url)
        page.get_by_text("Live", exact=True).first.click()
        select = page.locator("select").filter(has_text=re.compile(r"#\d+ lightgcn")).first    # Live's run list

        def choose(rid):
            option = select.locator("option").filter(has_text=re.compile(rf"^#{rid} "))
            option.wait_for(state="attached", timeout=30_000)
            select.select_option(label=option.inner_text())
        choose(slow)
        page.get_by_text(re.compile(r"status\s+finished\s+·\s+steps\s+30\s*/\s*30")).wait_for(timeout=20_000)
        wait_plot(page, "Training loss", lambda p: p["n"] == 30)
        wait_plot(page, "Kernel time per step", lambda p: p["n"] == 30)
        page.wait_for_function(f"({DRAWN_CANVASES})() >= 3", timeout=30_000)   # loss, validation, kernels
        drawn = page.evaluate(f"({DRAWN_CANVASES})()")
        # the new run selected: everything is its own at once
        choose(new)
        page.get_by_text(f"Training loss of run #{new}: waiting for the first step.").wait_for(timeout=10_000)
        page.get_by_text(f"Kernel time per step of run #{new}: waiting for the first step.").wait_for(timeout=5_000)
        page.screenshot(path=str(ARTIFACTS / "live-waiting.png"), full_page=True)
        head = _header(page)
        assert f"#{new}" in head and "status running" in head and "steps 0 / 4" in head, head
        mode = " ".join(deep_text(page, ".live-mode").split())
        assert "memory mode ■ CXL (cxl)" in mode and "measured on this host" not in mode, mode
        # the three plots of the previous run are gone (other pages' plots may still count)
        assert page.evaluate(f"({DRAWN_CANVASES})()") <= drawn - 3, "the previous run's plots are still drawn"
        # steps arrive: the same plots take the new points (patched, not rebuilt), the header never blanks
        page.evaluate(f"""() => {{ window.__blank = 0; window.__seen = 0; const text = {DEEP_TEXT};
            window.__watch = setInterval(() => {{ window.__seen += 1;
              if (!(text('.live-status') || '').includes('status')) window.__blank += 1; }}, 50); }}""")
        for s in (1, 2):
            store.add_step(new, s, 1, 0.7 / s, 0.01, _records(s, 10.0))
        # (the axis ranges are computed once the browser has drawn the new points)
        first = wait_plot(page, "Training loss", lambda p: p["n"] == 2 and drawn_range(p))
        kern = wait_plot(page, "Kernel time per step", lambda p: p["n"] == 2 and drawn_range(p))
        assert first["y1"] < 1.0, first                      # its own axis, not the slow run's
        assert kern["y1"] < 20, kern                         # 10 ms steps, not 1,200
        for s in (3, 4):
            store.add_step(new, s, 1, 0.7 / s, 0.01, _records(s, 10.0))
            time.sleep(1.2)
        again = wait_plot(page, "Training loss", lambda p: p["n"] == 4)
        assert again["id"] == first["id"], "the loss plot was rebuilt instead of patched"
        assert wait_plot(page, "Kernel time per step", lambda p: p["n"] == 4)["id"] == kern["id"]
        # the last evaluations come after the last step, then the run ends
        store.add_eval(new, 1, 4, "valid", {"recall@20": 0.125, "ndcg@20": 0.07}, 2.0)
        store.add_eval(new, 1, 4, "test", {"recall@20": 0.11, "ndcg@20": 0.06, "users": 943}, 2.5)
        store.set_status(new, "finished")
        page.get_by_text(re.compile(r"test metrics \(measured, after training\):.*recall@20 0\.1100")).wait_for(
            timeout=10_000)
        wait_plot(page, "Validation metrics", lambda p: p["n"] == 1)
        assert "status finished" in _header(page)
        assert page.evaluate("window.__seen") > 50 and page.evaluate("window.__blank") == 0, \
            "the header blanked out during polls"
        page.screenshot(path=str(ARTIFACTS / "live-patched.png"), full_page=True)
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)


def test_breakdown_axes_follow_the_run_and_compare_shows_modeled_times(tmp_path, browser):  # noqa: F811
    """Issue 22, items 3 and 5: a 10 ms run after a 1.2 s one keeps its own axis; Compare has a
    modeled step time column beside the measured one."""
    ARTIFACTS.mkdir(exist_ok=True)
    from gnnrec_lab.runs.store import Store
    store = Store(tmp_path / "home")
    slow, fast = _run(store, 1200.0, 5), _run(store, 10.0, 5, mode="cxl", status="running")
    store.record_result(fast, {"modeled": {"device": "cxl_type3_ddr5_x8", "kind": "modeled", "memory_mode": "cxl",
                                           "measured_s_per_step": 0.01, "modeled_s_per_step": 0.03}})
    store.set_status(fast, "finished")
    proc, url = serve(tmp_path)
    try:
        page, _ = open_page(browser, url)
        # Live shows the slow run (a plot in ms), Breakdown follows it; then Breakdown alone switches
        page.get_by_text("Live", exact=True).first.click()
        live = page.locator("select").filter(has_text=re.compile(r"#\d+ lightgcn")).first
        option = live.locator("option").filter(has_text=re.compile(rf"^#{slow} "))
        option.wait_for(state="attached", timeout=30_000)
        live.select_option(label=option.inner_text())
        wait_plot(page, "Kernel time per step", lambda p: drawn_range(p) and p["y1"] > 1000, 30)
        page.get_by_text("Breakdown", exact=True).first.click()
        select = page.locator("select").filter(has_text=re.compile(r"#\d+ lightgcn")).last     # Breakdown's

        def choose(rid):
            option = select.locator("option").filter(has_text=re.compile(rf"^#{rid} "))
            option.wait_for(state="attached", timeout=30_000)
            select.select_option(label=option.inner_text())
        page.get_by_text(re.compile(rf"Run #{slow} . finished")).wait_for(timeout=30_000)
        wait_plot(page, "Kernel time by phase", lambda p: drawn_range(p) and p["y1"] > 1000, 30)
        choose(fast)
        page.get_by_text(re.compile(rf"Run #{fast} . finished")).wait_for(timeout=30_000)
        bars = wait_plot(page, "Kernel time by phase", lambda p: drawn_range(p) and p["y1"] < 100, 30)
        assert bars["y1"] == pytest.approx(10.0, rel=0.2), bars
        page.screenshot(path=str(ARTIFACTS / "breakdown-rescaled.png"), full_page=True)
        page.get_by_text("Compare", exact=True).first.click()
        page.get_by_text("Step ms (modeled)").first.wait_for(timeout=30_000)
        page.get_by_text("Training s (modeled)").first.wait_for(timeout=5_000)
        row = page.locator(".tabulator-row").filter(has_text="cxl").first

        def cell(field):
            return row.locator(f'.tabulator-cell[tabulator-field="{field}"]').inner_text().strip()
        assert float(cell("step_ms")) == 10.0 and float(cell("modeled_step_ms")) == 30.0   # measured, modeled
        page.screenshot(path=str(ARTIFACTS / "compare-modeled.png"), full_page=True)
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)


def test_live_breakdown_compare_and_runs_json_read_one_step_and_kernel_time(tmp_path, browser,  # noqa: F811
                                                                          monkeypatch):
    """Issue 35: Live, Breakdown and `runs show` said "32.7 ms modeled, 3.32x the 9.9 ms measured"
    (kernel time) where Compare and `runs` said 11.3 ms measured step (the wall step). Switching
    between a DRAM run and an App Direct run, every view reads the same step and kernel time:
    tiermodel.step_times, as services.projection.run_step_times gives it."""
    import json
    import subprocess
    import sys

    from test_dashboard_components import _calibrate

    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.runs.store import Store
    from gnnrec_lab.services.projection import run_step_times
    from gnnrec_lab.util.formatting import fmt_ms
    from gnnrec_lab.util.recorder import KernelRecord
    ARTIFACTS.mkdir(exist_ok=True)
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))   # restored after: later tests' stores
    (tmp_path / "home").mkdir()
    _calibrate()
    store = Store(tmp_path / "home")

    def run(mode, step_ms, kernel_ms):
        """Steps of ``step_ms`` wall time whose kernels take ``kernel_ms`` (forward 2/3, backward 1/3)."""
        rid = store.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1, memory_mode=mode),
                            status="running")
        store.record_start(rid, {"steps_per_epoch": 6, "footprint_predicted": {"graph": 1000, "embeddings": 2000}})
        for s in range(1, 7):
            recs = [KernelRecord("spmm", ph, 0, s, int(kernel_ms * share * 1e6), 4000, 1000, 2000, "gather", 32,
                                 1000, "native") for ph, share in (("forward", 2 / 3), ("backward", 1 / 3))]
            store.add_step(rid, s, 1, 1.0 / s, (step_ms + 0.1 * s) / 1e3, recs)
        store.add_eval(rid, 1, 6, "valid", {"recall@20": 0.05}, 1.0)
        return rid
    dram = run("dram", 11.3, 9.9)
    appd = run("optane_app_direct", 12.0, 10.0)
    store.record_result(appd, {"modeled": {"device": "optane_pmem100_appdirect_6x", "kind": "modeled",
                                           "memory_mode": "optane_app_direct", "measured_s_per_step": 0.01,
                                           "modeled_s_per_step": 0.033,
                                           "placement_assumption": "all tensor classes on the device"}})
    for rid in (dram, appd):
        store.set_status(rid, "finished")
    want = {rid: run_step_times(store, rid) for rid in (dram, appd)}
    assert want[appd].ratio == pytest.approx(3.3) and want[dram].ratio is None
    assert want[dram].step_s > want[dram].kernel_s > 0
    lines = {rid: st.text() for rid, st in want.items()}
    assert "modeled on optane_pmem100_appdirect_6x: step" in lines[appd] and "modeled" not in lines[dram]
    # issue 33: the modeled run's times carry their band (tiermodel.model_band) in every view; a DRAM run none
    band = want[appd].band
    assert band and band["step"] > 0 and band["kernel"] > 0 and want[dram].band is None
    assert f"±{band['step'] * 100:.0f}%" in lines[appd] and "±" not in lines[dram]
    # runs --json, as a script reads it
    env = dict(os.environ, GNNREC_LAB_HOME=str(tmp_path / "home"))
    out = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", "runs", "--json"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    rows = {r["id"]: r for r in json.loads(out)}
    for rid, st in want.items():
        for key in ("step_s", "kernel_s", "modeled_step_s", "modeled_kernel_s"):
            got, exp = rows[rid][key], getattr(st, key)
            assert (got is None and exp is None) or got == pytest.approx(exp, rel=1e-12), (rid, key, got, exp)
    assert rows[appd]["modeled_step_band"] == pytest.approx(band["step"], rel=1e-12)
    assert rows[appd]["modeled_kernel_band"] == pytest.approx(band["kernel"], rel=1e-12)
    proc, url = serve(tmp_path)
    try:
        page, _ = open_page(browser, url)

        def chooser():
            return run_chooser(page)[0]

        def wait_words(selector, words, timeout=30):
            deadline = time.monotonic() + timeout
            while True:
                text = " ".join(deep_text(page, selector).split())
                if words in text or time.monotonic() > deadline:
                    assert words in text, (words, text)
                    return text
                time.sleep(0.25)
        page.get_by_text("Live", exact=True).first.click()
        live = chooser()
        for rid in (dram, appd, dram, appd):            # switching back and forth
            live(rid)
            wait_words(".live-mode", lines[rid])
        page.screenshot(path=str(ARTIFACTS / "live-step-times.png"), full_page=True)
        page.get_by_text("Breakdown", exact=True).first.click()
        breakdown = chooser()
        for rid in (dram, appd, dram):
            breakdown(rid)
            wait_words(".breakdown-step-times", f"Run #{rid}")
            wait_words(".breakdown-step-times", lines[rid])
        page.get_by_text("Compare", exact=True).first.click()
        page.get_by_text("Kernel time ms (measured)").first.wait_for(timeout=30_000)
        for rid, st in want.items():
            row = page.locator(".tabulator-row").filter(
                has=page.locator('.tabulator-cell[tabulator-field="id"]', has_text=re.compile(rf"^{rid}$"))).first

            def cell(field, row=row):
                return row.locator(f'.tabulator-cell[tabulator-field="{field}"]').inner_text().strip()
            for field, v in (("step_ms", st.step_s), ("kernel_ms", st.kernel_s), ("modeled_step_ms", st.modeled_step_s),
                             ("modeled_kernel_ms", st.modeled_kernel_s)):
                if v is None:
                    assert cell(field) in ("", "NaN", "nan", "-"), (rid, field, cell(field))
                else:
                    # the digits Live's and Breakdown's sentence printed
                    assert f"{float(cell(field)):.1f} ms" == fmt_ms(v) and fmt_ms(v) in lines[rid], (rid, field)
        page.screenshot(path=str(ARTIFACTS / "compare-step-times.png"), full_page=True)
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)


def test_live_draws_without_bokeh_range_warnings(tmp_path, browser):  # noqa: F811
    """Issue 35: Live logged 15 Bokeh "could not set initial ranges" warnings (a plot drawn before
    it had data). Switching runs and a run's first steps and evaluations arriving log none; the
    finished run's Cancel button is hidden, a running run's shown."""
    ARTIFACTS.mkdir(exist_ok=True)
    from gnnrec_lab.runs.store import Store
    store = Store(tmp_path / "home")
    done = _run(store, 20.0, 8)
    new = _run(store, 10.0, 0, status="running", valid=False)
    proc, url = serve(tmp_path)
    try:
        page, _ = open_page(browser, url)
        warnings = []
        page.on("console", lambda m: warnings.append(m.text) if m.type in ("warning", "error") else None)
        page.get_by_text("Live", exact=True).first.click()
        select = page.locator("select:visible").filter(has_text=re.compile(r"#\d+ lightgcn")).first
        cancel = page.locator("button").filter(has_text="Cancel run")

        def choose(rid):
            option = select.locator("option").filter(has_text=re.compile(rf"^#{rid} "))
            option.wait_for(state="attached", timeout=30_000)
            select.select_option(label=option.inner_text())
        choose(done)
        wait_plot(page, "Kernel time per step", lambda p: p["n"] == 8 and drawn_range(p))
        sync_api.expect(cancel).to_be_hidden(timeout=10_000)
        choose(new)
        page.get_by_text(f"Training loss of run #{new}: waiting for the first step.").wait_for(timeout=10_000)
        sync_api.expect(cancel).to_be_visible(timeout=10_000)
        for s in range(1, 5):
            store.add_step(new, s, 1, 0.7 / s, 0.01, _records(s, 10.0))
            time.sleep(0.6)
        store.add_eval(new, 1, 4, "valid", {"recall@20": 0.1, "ndcg@20": 0.05, "recall@10": 0.07}, 2.0)
        wait_plot(page, "Training loss", lambda p: p["n"] == 4 and drawn_range(p))
        wait_plot(page, "Validation metrics", lambda p: p["n"] == 1)
        choose(done)
        wait_plot(page, "Training loss", lambda p: p["n"] == 8 and drawn_range(p))
        page.wait_for_timeout(2000)
        ranges = [w for w in warnings if "initial ranges" in w]
        assert ranges == [], ranges
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)
