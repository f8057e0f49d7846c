"""Compare and Breakdown in chromium after two runs (issue 51, items 5-7): the column chooser keeps the ±
and confidence columns on screen, the time-to-accuracy chart draws measured solid and modeled dashed, and
both tables download as CSV files that read back (pandas) as the rows the tables show."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

from test_browser import ARTIFACTS, browser, open_page, serve, stop  # noqa: E402,F401

sync_api = pytest.importorskip("playwright.sync_api")

# Every Bokeh plot of the page titled "Time to accuracy...": its glyphs' dashes and its legend's labels.
TTA_PLOT = """() => {
  const out = [];
  for (const doc of Bokeh.documents) {
    for (const m of doc.all_models) {
      if (!m.title || m.renderers === undefined) continue;
      const title = m.title.text === undefined ? String(m.title) : m.title.text;
      if (!title.startsWith('Time to accuracy')) continue;
      const label = {};
      for (const l of [...(m.center || []), ...(m.right || [])]) {
        if (!l.items) continue;
        for (const it of l.items) {
          const text = it.label && it.label.value !== undefined ? it.label.value : String(it.label);
          for (const r of it.renderers || []) label[r.id] = text;
        }
      }
      const lines = [];
      for (const r of m.renderers) {
        if (r.glyph === undefined || r.glyph.line_dash === undefined || r.glyph.type !== 'Line') continue;
        const d = r.glyph.line_dash;
        lines.push({label: label[r.id] || null, dash: JSON.stringify(d && d.value !== undefined ? d.value : d)});
      }
      out.push({title: title, id: m.id, lines: lines});
    }
  }
  return out;
}"""


def seed(home: Path) -> list:
    """Two finished DRAM runs with kernel records, validation evaluations and a predicted footprint,
    and a host calibration (the modeled series need it)."""
    os.environ["GNNREC_LAB_HOME"] = str(home)
    from test_dashboard_components import _calibrate
    from test_time_to_accuracy import dram_run

    from gnnrec_lab.runs.store import Store
    home.mkdir(parents=True, exist_ok=True)
    _calibrate()
    store = Store(home)
    ids = [dram_run(store), dram_run(store, layers=3, evals=[(0.7, 0.123456), (1.9, 0.2)])]
    store.rename_run(ids[0], "baseline")
    store.close()
    return ids


def _download(page, button) -> "object":
    import pandas as pd
    with page.expect_download(timeout=30_000) as d:
        button.click()
    path = d.value.path()
    return pd.read_csv(path), d.value.suggested_filename


def test_compare_time_to_accuracy_and_csv_downloads(tmp_path, browser, monkeypatch):  # noqa: F811
    import pandas as pd
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    ids = seed(tmp_path / "home")
    ARTIFACTS.mkdir(exist_ok=True)
    proc, url = serve(tmp_path)
    try:
        page, _ = open_page(browser, url)
        page.get_by_text("Compare", exact=True).first.click()
        page.get_by_text("Compare runs").wait_for(timeout=30_000)
        page.locator(".tabulator-row").first.wait_for(timeout=30_000)
        # the ± and confidence columns are on screen without a horizontal scroll
        holder = page.locator(".tabulator-tableholder").first
        widths = holder.evaluate("el => [el.scrollWidth, el.clientWidth]")
        assert widths[0] <= widths[1] + 1, widths
        box = page.locator(".tabulator").first.bounding_box()
        for field in ("band", "confidence"):
            head = page.locator(f'.tabulator-col[tabulator-field="{field}"]').first
            hb = head.bounding_box()
            right = box["x"] + box["width"] + 1
            assert hb is not None and hb["x"] >= box["x"] - 1 and hb["x"] + hb["width"] <= right, (field, hb, box)
        assert page.locator('.tabulator-col[tabulator-field="startup_s"]').count() == 0 or \
            not page.locator('.tabulator-col[tabulator-field="startup_s"]').first.is_visible()
        page.locator(".tabulator").first.screenshot(path=str(ARTIFACTS / "compare-table.png"))
        # the table's rows as the page shows them
        rows = {}
        for rid in ids:
            row = page.locator(".tabulator-row").filter(
                has=page.locator('.tabulator-cell[tabulator-field="id"]', has_text=re.compile(rf"^{rid}$"))).first
            rows[rid] = {f: row.locator(f'.tabulator-cell[tabulator-field="{f}"]').inner_text().strip()
                         for f in ("name", "status", "best_valid_recall@20", "train_s")}
        assert rows[ids[0]]["name"] == "baseline" and rows[ids[1]]["best_valid_recall@20"] == "0.2"
        # select both runs: the time-to-accuracy chart draws measured solid and modeled dashed
        for rid in ids:
            row = page.locator(".tabulator-row").filter(
                has=page.locator('.tabulator-cell[tabulator-field="id"]', has_text=re.compile(rf"^{rid}$"))).first
            row.locator("input[type=checkbox]").first.click()
        page.get_by_text("Time to accuracy", exact=False).first.wait_for(timeout=60_000)
        # (a chart of each selection stays among the page's models: the one with both runs is the last)
        deadline, chart = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            charts = [c for c in page.evaluate(TTA_PLOT)
                      if all(any(ln["label"] == f"DRAM · #{rid} (measured)" for ln in c["lines"]) for rid in ids)]
            if charts:
                chart = charts[-1]
                break
            time.sleep(0.3)
        assert chart is not None, page.evaluate(TTA_PLOT)
        lines = [ln for ln in chart["lines"] if ln["label"]]
        for rid in ids:
            mine = [ln for ln in lines if f" · #{rid} (" in ln["label"]]
            measured = [ln for ln in mine if ln["label"] == f"DRAM · #{rid} (measured)"]
            modeled = [ln for ln in mine if ln["label"].endswith("(modeled)")]
            assert len(measured) == 1 and len(modeled) >= 1 and len(measured) + len(modeled) == len(mine), mine
            assert measured[0]["dash"] == "[]", measured                # solid
            assert all(ln["dash"] not in ("[]", '"solid"') for ln in modeled), modeled   # dashed
        tta = page.locator(".compare-time-to-accuracy").first
        tta.scroll_into_view_if_needed()
        tta.screenshot(path=str(ARTIFACTS / "compare-time-to-accuracy.png"))
        # the table's CSV: the rows and chosen columns the page shows, headers with units
        csv, name = _download(page, page.locator(".compare-download button, .compare-download a").first)
        assert name == "compare_runs.csv"
        from gnnrec_lab.dashboard.compare import DEFAULT_COLUMNS, TABLE_TITLES
        assert list(csv.columns) == [TABLE_TITLES["id"]] + [TABLE_TITLES[c] for c in DEFAULT_COLUMNS]
        csv = csv.set_index(TABLE_TITLES["id"])
        assert sorted(csv.index) == sorted(ids)
        for rid in ids:
            got = csv.loc[rid]
            assert str(got[TABLE_TITLES["status"]]) == rows[rid]["status"]
            assert float(got[TABLE_TITLES["best_valid_recall@20"]]) == float(rows[rid]["best_valid_recall@20"])
            assert float(got[TABLE_TITLES["train_s"]]) == float(rows[rid]["train_s"])
            name_cell = got[TABLE_TITLES["name"]]
            assert ("" if pd.isna(name_cell) else str(name_cell)) == rows[rid]["name"]
        # Breakdown's table downloads too
        page.get_by_text("Breakdown", exact=True).first.click()
        page.get_by_text(re.compile(r"Run #\d+ . finished")).first.wait_for(timeout=30_000)
        page.get_by_text("Breakdown table (measured)").first.click()   # the card opens
        button = page.locator(".breakdown-download button, .breakdown-download a").first
        button.wait_for(timeout=30_000)
        card = page.locator(".card").filter(has_text="Breakdown table (measured)").last
        card.locator(".tabulator-row").first.wait_for(timeout=30_000)
        shown = [t.strip() for t in card.locator(".tabulator-row").all_inner_texts()]
        csv, name = _download(page, button)
        assert re.fullmatch(r"breakdown_run_\d+\.csv", name)
        # the rows the table shows (a page of 15 at most), in its order: each holds its CSV row's values
        assert len(shown) == min(len(csv), 15) and len(shown) > 0, (shown, csv)
        for text, (_, row) in zip(shown, csv.iterrows()):
            cells = text.split()
            for v in row.values:
                if isinstance(v, str):
                    assert v in text, (v, text)
                elif v == v and isinstance(v, float) and v.is_integer():
                    assert any(c.replace(",", "") in (str(int(v)), f"{v:g}", str(v)) for c in cells), (v, text)
        assert page.errors() == [], page.errors()
    finally:
        stop(proc)
