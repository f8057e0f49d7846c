"""One meaning per colour on every page, and the measured-vs-modeled chart's names readable, in chromium.

Issue 51: on one Breakdown page blue was the phase ``forward`` and the kernel ``spmm``; in Compare
orange was run #1 in one chart and ``optane_app_direct`` in the next; the measured-vs-modeled
chart's tick labels overlapped. This test serves the dashboard over two finished runs (DRAM and
a modeled memory mode), opens Launch, Live, Breakdown, Compare and Cache, reads the colour and
legend label of every glyph of every chart from the page's Bokeh document, and fails when one
colour carries two meanings; it measures the tick labels of the measured-vs-modeled chart as
BokehJS draws them (their bounding boxes). Helpers and launch flags come from ``test_browser``.
"""
from __future__ import annotations

import os
import re
import time

import pytest
from test_browser import ARTIFACTS, browser, fill_form, open_page, run_chooser, serve, stop, sync_api  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Every legend entry of every plot in the page's Bokeh documents: its colour(s) and label(s), per
# data row where the colour or the label is a column (a pie's wedges, stacked bars by phase).
LEGEND_COLOURS = """() => {
  const spec = (v) => {
    if (v === null || v === undefined) return {};
    if (typeof v !== 'object') return {value: v};
    if (v.value !== undefined) return {value: v.value};
    if (v.field !== undefined) return {field: v.field, transform: v.transform};
    return {};
  };
  const column = (src, name) => { try { return Array.from(src.get_column(name) || []); } catch (e) { return []; } };
  const mapped = (s, src, i) => {
    if (s.value !== undefined) return s.value;
    if (s.field === undefined) return null;
    const v = column(src, s.field)[i];
    const t = s.transform;
    if (t && t.factors && t.palette) {
      const k = Array.from(t.factors).indexOf(v);
      return k >= 0 ? t.palette[k] : t.nan_color;
    }
    return v;
  };
  const out = [];
  for (const doc of Bokeh.documents) {
    const titles = new Map();
    for (const m of doc.all_models) {
      if (m.renderers === undefined || m.title === undefined) continue;
      const t = m.title && m.title.text !== undefined ? m.title.text : String(m.title);
      for (const r of m.renderers) titles.set(r.id, t);
    }
    for (const m of doc.all_models) {
      if (!(m.items !== undefined && m.location !== undefined && m.orientation !== undefined)) continue;  // Legend
      for (const item of m.items) {
        const label = spec(item.label);
        for (const r of item.renderers || []) {
          const g = r.glyph; if (!g) continue;
          const colour = spec(g.fill_color !== undefined ? g.fill_color : g.line_color);
          const src = r.data_source;
          const n = src && src.get_length ? (src.get_length() || 0) : 0;
          const rows = (label.field !== undefined || colour.field !== undefined)
            ? (item.index !== null && item.index !== undefined ? [item.index] : [...Array(n).keys()]) : [0];
          for (const i of rows) {
            const l = label.value !== undefined ? label.value : column(src, label.field)[i];
            const c = mapped(colour, src, i);
            if (l !== undefined && l !== null && c) out.push({colour: String(c), label: String(l),
                                                               title: titles.get(r.id) || '', glyph: g.type});
          }
        }
      }
    }
  }
  return out;
}"""

# The bounding boxes of the tick labels of every axis of the plots titled ``prefix...`` as BokehJS
# draws them: each axis view's label drawing is wrapped to record its boxes, then the plot repainted.
TICK_BOXES_SETUP = """(prefix) => {
  window.__ticks = {};
  let n = 0;
  for (const view of Bokeh.index.all_views()) {
    const m = view.model;
    if (!m || m.title === undefined || m.renderers === undefined) continue;
    const title = m.title && m.title.text !== undefined ? m.title.text : '';
    if (!title.startsWith(prefix)) continue;
    try { view.el.scrollIntoView({block: 'center'}); } catch (e) { /* a screenshot shows it when it can */ }
    for (const axis of [...m.left, ...m.below]) {
      const av = Bokeh.index.find_one(axis);
      if (!av || av.__wrapped) continue;
      const orig = av._draw_oriented_labels.bind(av);
      av._draw_oriented_labels = function(ctx, labels, coords, orient, standoff, visuals) {
        orig(ctx, labels, coords, orient, standoff, visuals);
        const canvas = this.canvas.bbox;
        window.__ticks[axis.id + ':' + (this.dimension)] = {plot: title, dimension: this.dimension,
          width: canvas.width, height: canvas.height,
          boxes: labels.items.map(l => { const b = l.bbox(); return {left: b.left, right: b.right, top: b.top,
                                                                       bottom: b.bottom}; })};
      };
      av.__wrapped = true;
      n += 1;
      try { view.invalidate_painters(av); view.request_paint(av); } catch (e) { view.request_paint(); }
    }
  }
  window.dispatchEvent(new Event('resize'));
  return n;
}"""

MODELED_CHART = "kernel ms per step: measured"


def meaning(label: str) -> str:
    """What a legend label names, whatever view shows it: a memory mode's series is ``"CXL · ml-100k"``
    in Compare and ``"CXL (modeled)"`` on Live; measured or modeled is a dash or a hatch, not a meaning."""
    label = re.sub(r" \((modeled|measured)\)$", "", label.strip())
    return label.split(" · ")[0]


def one_meaning_per_colour(seen: list) -> dict:
    """``{colour: {meaning: [where]}}`` for every colour with two meanings or more (neutral marks skipped)."""
    from gnnrec_lab.dashboard.palettes import NEUTRAL_COLORS
    by: dict = {}
    for s in seen:
        colour = s["colour"].lower()
        if colour in NEUTRAL_COLORS:
            continue
        by.setdefault(colour, {}).setdefault(meaning(s["label"]), set()).add(f"{s['page']}: {s['title']}")
    return {c: {m: sorted(w) for m, w in ms.items()} for c, ms in by.items() if len(ms) > 1}


def test_one_meaning_per_colour_detects_a_shared_colour():
    """The rule itself: blue as both the phase forward and the kernel spmm is two meanings."""
    seen = [{"colour": "#1F77B4", "label": "forward", "page": "Breakdown", "title": "by phase"},
            {"colour": "#1f77b4", "label": "spmm", "page": "Breakdown", "title": "share"},
            {"colour": "#9467bd", "label": "Optane MM · ml-100k", "page": "Compare", "title": "epochs"},
            {"colour": "#9467bd", "label": "Optane MM (modeled)", "page": "Live", "title": "kernels"},
            {"colour": "#000000", "label": "roof", "page": "Breakdown", "title": "roofline"},
            {"colour": "#000000", "label": "▲ clipped", "page": "Live", "title": "kernels"}]
    assert list(one_meaning_per_colour(seen)) == ["#1f77b4"]


def _finished_run(store, mode: str, seed: int) -> int:
    import numpy as np

    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.dashboard.fake import fake_records
    cfg = RunConfig(dataset="synth-tiny", layers=2, dim=16, batch_size=512, epochs=2, memory_mode=mode)
    rid = store.add_run(cfg, status="running")
    store.record_start(rid, {"steps_per_epoch": 6, "footprint_predicted": {"graph": 2_000_000, "embeddings": 500_000,
                                                                           "optimizer": 400_000}})
    rng = np.random.default_rng(seed)
    for s in range(1, 13):
        store.add_step(rid, s, 1 + (s > 6), 1.0 / s, 0.01, fake_records(s, 2, 16, rng))
        if s in (6, 12):
            store.add_epoch(rid, 1 + (s > 6), 0.08, 6, 0.05)
            store.add_eval(rid, 1 + (s > 6), s, "valid", {"recall@20": 0.05 * s / 6, "ndcg@20": 0.03 * s / 6}, 1.0)
    store.add_eval(rid, 2, 12, "test", {"recall@20": 0.1, "ndcg@20": 0.06}, 2.0)
    store.set_status(rid, "finished")
    return rid


def _tick_overlaps(ticks: dict) -> list:
    """Overlapping or clipped tick labels, in words (empty: every label stands alone inside its canvas)."""
    bad = []
    for axis, t in ticks.items():
        boxes = t["boxes"]
        for i, a in enumerate(boxes):
            if a["left"] < -0.5 or a["top"] < -0.5 or a["right"] > t["width"] + 0.5 or a["bottom"] > t["height"] + 0.5:
                bad.append(f"{t['plot']} axis {axis}: label {i} clipped {a}")
            for j, b in enumerate(boxes[i + 1:], i + 1):
                apart_x = a["right"] <= b["left"] or b["right"] <= a["left"]
                apart_y = a["bottom"] <= b["top"] or b["bottom"] <= a["top"]
                if not (apart_x or apart_y):
                    bad.append(f"{t['plot']} axis {axis}: labels {i} and {j} overlap {a} {b}")
    return bad


def test_every_page_gives_each_colour_one_meaning_and_readable_modeled_bars(tmp_path, browser):  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    home = tmp_path / "home"
    os.environ["GNNREC_LAB_HOME"] = str(home)      # the helpers write where the server will read
    from test_dashboard_components import _calibrate

    from gnnrec_lab import data
    from gnnrec_lab.runs.store import Store
    home.mkdir(parents=True, exist_ok=True)
    _calibrate()
    store = Store(home)
    dram, appd = _finished_run(store, "dram", 1), _finished_run(store, "optane_app_direct", 2)
    store.close()
    data.load("synth-tiny", data_dir=tmp_path / "data")   # prepared: the Cache page simulates it at once
    proc, url = serve(tmp_path)
    seen: list = []

    def collect(name: str) -> list:
        got = [dict(s, page=name) for s in page.evaluate(LEGEND_COLOURS)]
        seen.extend(got)
        return got

    def wait_legends(name: str, needle, timeout: float = 60.0) -> list:
        deadline = time.monotonic() + timeout
        while True:
            got = collect(name)
            if any(needle(s) for s in got) or time.monotonic() > deadline:
                assert any(needle(s) for s in got), (name, sorted({(s["title"], s["label"]) for s in got}))
                return got
            time.sleep(0.5)

    def chooser():
        return run_chooser(page)

    def tick_boxes(prefix: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            n = page.evaluate(TICK_BOXES_SETUP, prefix)
            time.sleep(1.0)
            ticks = page.evaluate("() => window.__ticks || {}")
            if (n and ticks) or time.monotonic() > deadline:
                assert ticks, f"no axis of a plot titled {prefix!r} drew its labels"
                return ticks
    try:
        page, _ = open_page(browser, url)
        # Launch: the form's shape has stored DRAM runs, so the modeled step time and its bars show
        fill_form(page, dataset="synth-tiny", layers=2, dim=16, batch_size=512)
        page.locator(".launch-memory_mode select").select_option("optane_app_direct")
        wait_legends("Launch", lambda s: "DRAM use" in s["title"])
        # Live: the modeled run draws its kernels, its modeled series and its validation metrics
        page.get_by_text("Live", exact=True).first.click()
        choose, select = chooser()
        choose(appd)
        wait_legends("Live", lambda s: s["label"] == "Optane AD (modeled)")
        wait_legends("Live", lambda s: s["label"].startswith("recall@"))
        page.screenshot(path=str(ARTIFACTS / "live-modeled-series.png"), full_page=True)
        # the selector shows the whole label (it was cut to "⚠ l")
        fits = select.evaluate("""(el) => { const c = document.createElement('canvas').getContext('2d');
            const st = getComputedStyle(el); c.font = st.font || `${st.fontSize} ${st.fontFamily}`;
            return [c.measureText(el.options[el.selectedIndex].text).width, el.clientWidth]; }""")
        assert fits[0] + 24 <= fits[1], f"the run label ({fits[0]:.0f} px) is cut by its selector ({fits[1]} px)"
        # Breakdown: phases, kernels (pie, roofline), the measured-vs-modeled bars
        page.get_by_text("Breakdown", exact=True).first.click()
        choose, _ = chooser()
        for rid in (dram, appd):
            choose(rid)
            page.get_by_text(re.compile(rf"Run #{rid} . finished")).wait_for(timeout=30_000)
            wait_legends("Breakdown", lambda s: "Kernel time by phase" in s["title"])
            wait_legends("Breakdown", lambda s: s["title"].startswith("Share of kernel time"))
        ticks = tick_boxes(MODELED_CHART)
        page.screenshot(path=str(ARTIFACTS / "breakdown-modeled-bars.png"), full_page=True)
        assert any(t["dimension"] == 1 and len(t["boxes"]) >= 3 for t in ticks.values()), ticks   # a name per mode
        assert _tick_overlaps(ticks) == []
        # Compare: the two runs selected, their loss and Recall@20 overlays, the scaling plots
        page.get_by_text("Compare", exact=True).first.click()
        page.locator(".tabulator-row").first.wait_for(timeout=30_000)
        for rid in (dram, appd):
            row = page.locator(".tabulator-row").filter(
                has=page.locator('.tabulator-cell[tabulator-field="id"]', has_text=re.compile(rf"^{rid}$"))).first
            row.locator("input[type=checkbox]").first.click()
        wait_legends("Compare", lambda s: s["label"] == f"#{appd}")
        wait_legends("Compare", lambda s: " · synth-tiny" in s["label"])
        # Cache: every policy's curve and the look-ahead chart
        page.get_by_text("Cache", exact=True).first.click()
        page.get_by_role("heading", name=re.compile(r"^Embedding cache")).wait_for(timeout=15_000)
        # synth-tiny's 700 rows: batches small enough to leave cache sizes between one batch and the table
        box = page.locator(".cache-batch_size input")
        box.fill("32")
        box.press("Enter")
        box.press("Tab")
        button = page.locator(".cache-simulate button")
        sync_api.expect(button).to_be_enabled(timeout=300_000)     # the first simulation compiles numba
        button.click()
        wait_legends("Cache", lambda s: s["label"] == "belady", timeout=300)
        wait_legends("Cache", lambda s: s["title"].startswith("Look-ahead oracle"))
        page.screenshot(path=str(ARTIFACTS / "colours-cache.png"), full_page=True)
        pages = {s["page"] for s in seen}
        assert pages == {"Launch", "Live", "Breakdown", "Compare", "Cache"}, pages
        clashes = one_meaning_per_colour(seen)
        assert clashes == {}, clashes
        # the kinds the issue names are all there, each in its own colour
        labels = {meaning(s["label"]) for s in seen}
        assert {"forward", "spmm", f"#{dram}", f"#{appd}", "Optane AD", "DRAM", "belady"} <= labels, labels
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)
