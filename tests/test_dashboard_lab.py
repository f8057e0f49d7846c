"""The pages' shared model, in-process: the run table and the selection as parameters of the one
Lab, one run selector, the launch form made from RunConfig's fields, one style for modeled bars."""
from __future__ import annotations

import dataclasses

import pandas as pd
import param
import pytest
from test_dashboard_components import RecordingRunner, _timed_run, texts

from gnnrec_lab.config.run import FIELD_DOCS, MODELS, RunConfig
from gnnrec_lab.dashboard.breakdown import BreakdownPage, newest_finished
from gnnrec_lab.dashboard.common import BAR_STYLES, Lab, bar_style, hatch_hook, run_options, run_selector
from gnnrec_lab.dashboard.compare import ComparePage
from gnnrec_lab.dashboard.launch import FORM_DEFAULTS, FORM_FIELDS, LaunchForm, LaunchPage
from gnnrec_lab.dashboard.live import LivePage, default_run
from gnnrec_lab.util.provenance import Provenance

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")


class CountingStore:
    """A store that counts how often the run table is read."""

    def __init__(self, store):
        self.store, self.reads = store, 0

    def runs_frame(self):
        self.reads += 1
        return self.store.runs_frame()

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_the_run_table_is_read_once_and_every_page_follows_a_refresh(store):
    first = _timed_run(store, 5.0)
    spy = CountingStore(store)
    lab = Lab(store=spy, runner=RecordingRunner(store))
    LaunchPage(lab)
    assert lab.runs is None and spy.reads == 0          # the Launch page opens without the table
    live, breakdown, compare = LivePage(lab), BreakdownPage(lab), ComparePage(lab)
    assert spy.reads == 1 and list(lab.runs["id"]) == [first]
    later = _timed_run(store, 5.0)                      # written elsewhere (the CLI)
    assert later not in live.selector.options.values()
    lab.refresh_runs()
    assert spy.reads == 2
    for selector in (live.selector, breakdown.selector):
        assert later in selector.options.values()
    assert later in compare.table.value.index
    lab.refresh_runs()                                  # an unchanged table is not set again
    assert spy.reads == 3


def test_one_selection_for_every_page(store):
    """Choosing a run on one page shows it on the others; a launch selects the new run everywhere."""
    old, new = _timed_run(store, 50.0), _timed_run(store, 5.0, status="running")
    runner = RecordingRunner(store)
    lab = Lab(store=store, runner=runner)
    live, breakdown = LivePage(lab), BreakdownPage(lab)
    assert (live.run_id, breakdown.run_id) == (new, old)   # each page's own choice until one is made
    assert lab.run_id is None
    breakdown.selector.value = new
    assert lab.run_id == new and breakdown.run_id == new and live.monitor.run_id == new
    live.selector.value = old
    assert lab.run_id == old and breakdown.run_id == old and f"Run #{old}" in texts(breakdown.body())
    rid = lab.launch(RunConfig(dataset="synth-tiny", layers=1, dim=8, epochs=1))
    assert runner.launched and lab.run_id == rid
    for page in (live, breakdown):
        assert rid in page.selector.options.values() and page.selector.value == rid
    assert live.monitor.run_id == rid and breakdown.run_id == rid


def test_a_run_chosen_before_it_is_listed_is_listed(store):
    lab = Lab(store=store, runner=RecordingRunner(store))
    live = LivePage(lab)
    assert live.selector.options == {} and live.run_id is None
    rid = _timed_run(store, 5.0)                        # launched elsewhere, then chosen
    lab.run_id = rid
    assert rid in live.selector.options.values() and live.selector.value == rid and live.monitor.run_id == rid


def test_run_selector_defaults_and_labels(store):
    fin, running = _timed_run(store, 5.0), _timed_run(store, 5.0, status="running")
    lab = Lab(store=store, runner=None)
    runs = lab.load_runs()
    assert default_run(runs) == running and newest_finished(runs) == fin
    assert default_run(runs.iloc[0:0]) is None and newest_finished(None) is None
    assert list(run_options(runs).values()) == [running, fin]       # newest first, by id

    class Page(param.Parameterized):
        run_id = param.Parameter(default=None)
    given = Page(run_id=fin)
    widget = run_selector(lab, given.param.run_id, default=default_run)
    assert given.run_id == fin and widget.value == fin and widget.name == "Run"   # a given run stays
    page = Page()
    run_selector(lab, page.param.run_id, default=default_run)
    assert page.run_id == running
    lab.run_id = fin
    assert page.run_id == fin and given.run_id == fin


def test_the_launch_form_is_made_from_runconfig_fields():
    form = LaunchForm()
    defaults = RunConfig()
    for name in FORM_FIELDS:
        p = LaunchForm.param[name]
        want = FORM_DEFAULTS.get(name, getattr(defaults, name))
        if isinstance(want, tuple):
            want = ",".join(map(str, want))
        assert p.default == ("" if want is None and isinstance(p, param.String) else want), name
        assert p.doc == FIELD_DOCS[name].help, name
    assert FORM_DEFAULTS == {"epochs": 5} and form.epochs == 5
    assert LaunchForm.param["model"].objects == list(MODELS)
    assert isinstance(LaunchForm.param["lr"], param.Number) and isinstance(LaunchForm.param["dim"], param.Integer)
    assert LaunchForm.param["eval_users"].allow_None and not LaunchForm.param["dim"].allow_None
    assert isinstance(LaunchForm.param["placement"], param.Dict) and form.placement == {}
    cfg, err = form.result()
    expected = dataclasses.replace(defaults, epochs=5)
    assert err is None and cfg == expected                 # the untouched form is RunConfig's defaults
    form.set_from(RunConfig(dataset="synth-tiny", device_profile="cxl_type3_ddr5_x8", fanouts=(5, 3)))
    assert form.device_profile == "cxl_type3_ddr5_x8" and form.fanouts == "5,3"
    form.device_profile = ""
    assert form.values()["device_profile"] is None and form.values()["fanouts"] == (5, 3)


def test_mode_note_follows_the_memory_mode(store):
    page = LaunchPage(Lab(store=store, runner=RecordingRunner(store)))
    assert "on this host" in page.mode_note.object
    page.form.memory_mode = "cxl"
    assert "modeled" in page.mode_note.object


def test_one_style_marks_modeled_bars():
    import holoviews as hv
    hv.extension("bokeh")
    assert bar_style(Provenance.MEASURED)["hatch_pattern"] == " " and bar_style("modeled")["hatch_pattern"] == "/"
    assert bar_style("modeled (predicted)") == BAR_STYLES[Provenance.MODELED]      # anything not measured
    assert BAR_STYLES[Provenance.MEASURED]["color"] == BAR_STYLES[Provenance.MODELED]["color"]  # hatching, not colour
    df = pd.DataFrame({"x": ["a", "b"], "y": [1.0, 2.0], "hatch": [" ", "/"]})
    by_column = hv.render(hv.Bars(df, "x", ["y", "hatch"]).opts(hooks=[hatch_hook()], tools=["hover"]))
    assert by_column.renderers[0].glyph.hatch_pattern.field == "hatch"
    whole = hv.render(hv.Bars(df, "x", "y").opts(hooks=[hatch_hook(Provenance.MODELED)])).renderers[0].glyph
    assert whole.hatch_pattern == "/"
    plain = hv.render(hv.Bars(df, "x", "y").opts(hooks=[hatch_hook()])).renderers[0].glyph
    assert plain.hatch_pattern is None                                         # no column: left solid


def test_live_default_run_skips_a_status_no_member_spells():
    """A hand-edited status in the run table does not take the Live page down."""
    import pandas as pd

    from gnnrec_lab.dashboard.live import default_run
    runs = pd.DataFrame({"id": [1, 2, 3], "status": ["finished", "weird", "running"]})
    assert default_run(runs) == 3
    assert default_run(runs.iloc[:2]) == 2


def test_deep_link_takes_a_known_page_and_run_and_names_the_rest():
    from gnnrec_lab.dashboard.app import deep_link
    assert deep_link({"page": [b"LIVE"], "run": [b"3"]}, [1, 3]) == ("Live", 3, [])
    assert deep_link({}, [1]) == (None, None, [])
    page, run, problems = deep_link({"page": [b"../etc"], "run": [b"1;rm"]}, [1])
    assert (page, run) == (None, None)
    assert problems == ["?page=???etc is not a page (Launch, Live, Breakdown, Compare, Cache)",
                        "?run=1?rm is not a run id (a number, as in `gnnrec-lab runs`)"]
    assert deep_link({"run": [b"7"]}, [1, 2])[2] == ["?run=7: no such run in this store"]
