"""benchmarks/bench_headline.py (issue 20, item 5): its options are checked, its full-graph side runs
on synth-tiny and writes the page and the figure; the whole --quick run (DistDGL on the emulated
2-machine cluster and the link sweep too) only where the DGL lane is built and we are root."""
from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_headline", ROOT / "benchmarks" / "bench_headline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.mark.parametrize("argv, words", [
    (["--depths", "0"], "--depths"), (["--depths", "one"], "--depths"), (["--links", "-1"], "--links"),
    (["--links", "nan"], "--links"), (["--epochs", "0"], "--epochs"), (["--link", "-2"], "--link"),
    (["--full-batches", ""], "--full-batches"), (["--matched-batch", "-1"], "--matched-batch"),
    (["--precision", "bf16"], "--precision"), (["--precision", "fp32,fp8"], "--precision"),
])
def test_bad_options_exit_2_naming_the_option(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        _bench().parse_args(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_quick_sets_small_defaults_and_keeps_what_is_given():
    a = _bench().parse_args(["--quick", "--depths", "1", "--links", "1,0"])
    assert a.dataset == "synth-tiny" and a.depths == [1] and a.links == [1.0, 0.0] and a.epochs == 2
    full = _bench().parse_args([])
    assert full.dataset == "synth-gowalla" and full.depths == [1, 2, 3, 4] and full.links == [1.0, 10.0, 25.0, 0.0]
    assert full.cores == 1 and full.partitions == 2 and full.link == 10.0
    assert (full.epochs, full.lr, full.eval_users, full.sweep_depth) == (40, 5e-3, 1000, 1)
    # both sides try the same batch sizes, DistDGL with the full graph's learning-rate rule
    assert full.full_batches == full.dist_batches == [16384, 65536] and full.dist_rule == "large"
    assert _bench().dist_rule(full) == {"lr_rule": "sqrt", "ref_batch_size": 2048, "warmup_epochs": 0.5}
    old = _bench().parse_args(["--dist-rule", "none", "--dist-batches", "16384"])   # docs/headline_synth.md's protocol
    assert _bench().dist_rule(old) == {"lr_rule": "none"} and old.dist_batches == [16384]


def _check_page(md: str, img: pathlib.Path):
    assert img.is_file() and img.stat().st_size > 1000
    assert "## By depth" in md and "full graph, 1 machine x 1 core (measured)" in md
    assert "full graph on Optane App Direct (modeled)" in md and "full graph on Optane Memory Mode (modeled)" in md
    assert "--cores 1" in md and "commit " in md and "load average" in md and "batch sizes tried" in md


@pytest.mark.slow
def test_full_graph_side_on_synth_tiny_writes_the_page_and_figure(home):
    out, img = home / "h.md", home / "img" / "h.png"
    rc = _bench().main(["--quick", "--full-only", "--depths", "1", "--out", str(out), "--img", str(img)])
    md = out.read_text()
    assert rc == 0, md
    _check_page(md, img)
    assert "DistDGL was not run" in md and "Link sweep" not in md
    # the bf16 cell (issue 34, item 4): measured and modeled on both Optane modes, set against fp32
    half = md[md.index("## Half the bytes"):]
    assert "full graph bf16 on Optane App Direct (modeled)" in md and "full graph bf16 on Optane Memory Mode" in md
    assert half.count("(modeled) | 1024 |") == 2 and "this host's DRAM (measured) | 1024 |" in half
    # the matched cell: the full graph at the matched batch with lr fixed, its own table
    assert "## The matched cell (both sides at batch 512, lr 0.005 fixed" in md
    from gnnrec_lab.runs.store import Store
    store = Store()
    rid = store.run_ids(name="headline full L1 b512 matched")
    assert len(rid) == 1 and store.run_record(rid[0]).config["lr_rule"] == "none"
    assert store.run_record(store.run_ids(name="headline full L1 b1024")[0]).config["lr_rule"] == "sqrt"


@pytest.mark.slow
def test_resume_reuses_finished_runs_with_the_same_settings_and_trains_the_others(home):
    from gnnrec_lab.runs.store import Store
    bench = _bench()
    out, img = home / "h.md", home / "h.png"
    common = ["--quick", "--full-only", "--depths", "1", "--out", str(out), "--img", str(img)]
    assert bench.main(common + ["--resume"]) == 0           # nothing stored yet: trains (tuned and matched)
    first = Store().run_ids()
    assert len(first) == 3                                  # fp32, bf16 and the matched cell
    assert bench.main(common + ["--resume"]) == 0           # the same settings: reused
    assert Store().run_ids() == first and all(f"| {r} |" in out.read_text() for r in first)
    assert bench.main(common + ["--resume", "--epochs", "1"]) == 0   # other settings: trained anew
    assert len(Store().run_ids()) == 6
    assert bench.main(common + ["--resume", "--matched-batch", "0"]) == 0   # no matched cell: nothing new
    assert len(Store().run_ids()) == 6 and "matched cell" not in out.read_text()
    assert bench.main(common + ["--resume", "--precision", "fp32"]) == 0   # fp32 alone: no bf16 cell
    assert len(Store().run_ids()) == 6 and "Half the bytes" not in out.read_text()


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="the emulated cluster needs root")
def test_quick_run_with_distdgl_and_the_link_sweep(home):
    bench = _bench()
    if bench.can_run_distdgl() is not None:
        pytest.skip(bench.can_run_distdgl())
    out, img = home / "h.md", home / "h.png"
    rc = bench.main(["--quick", "--depths", "1", "--out", str(out), "--img", str(img)])
    md = out.read_text()
    assert rc == 0, md
    _check_page(md, img)
    assert "DistDGL, 2 machines x 1 core, 10 Gbit/s (measured)" in md
    assert "## Link sweep (DistDGL, 1 layers" in md and "unshaped" in md and "| 10 Gbit/s |" in md
    assert " MB" in md      # bytes over the links, measured
    # the matched cell: both sides at batch 512 with lr fixed, and DistDGL's ratios over the full graph
    cell = md[md.index("## The matched cell"):]
    assert "| 1 | full graph | 512 |" in cell and "| 1 | DistDGL | 512 |" in cell
    assert "| 1 | DistDGL / full graph |" in cell
    # the factors of the margin (DistDGL's time to target over the full graph's = epoch x epochs to target)
    factors = md[md.index("## What the margin is made of"):]
    assert "| 1 | 1024 | 512 |" in factors
    from gnnrec_lab.runs.store import Store
    store = Store()
    rid = store.run_ids(name="headline distdgl L1 b512 10G matched")
    assert len(rid) == 1 and store.run_record(rid[0]).config.get("lr_rule") == "none"


def test_resume_reuses_a_distdgl_run_only_on_the_same_machines(home):
    """A stored DistDGL run of the same name and settings is reused only where it ran on as many
    machines of as many cores behind the same link as asked."""
    from test_full_vs_distributed import dist_run

    from gnnrec_lab.runs.store import Store
    bench = _bench()
    store = Store()
    from gnnrec_lab.services.comparison import headline_name
    name = headline_name("distdgl", "lightgcn", 2, 512, 10.0)
    assert name == "headline distdgl L2 b512 10G"
    assert headline_name("full", "ngcf", 3, 65536) == "headline full ngcf L3 b65536"
    assert headline_name("full", "lightgcn", 2, 16384, variant="matched") == "headline full L2 b16384 matched"
    rid = dist_run(store, 2, link=10.0, name=name)
    cfg = store.get_run(rid)["config"]
    want = {k: cfg[k] for k in ("dataset", "model", "layers", "batch_size")}
    assert bench.stored_run(name, want, "distdgl", (2, 1, 10.0))["run_id"] == rid
    assert bench.stored_run(name, want, "distdgl", (4, 1, 10.0)) is None
    assert bench.stored_run(name, want, "distdgl", (2, 1, 1.0)) is None
    assert bench.stored_run(name, dict(want, layers=3), "distdgl", (2, 1, 10.0)) is None


@pytest.mark.slow
def test_seeds_give_each_cell_a_median_with_its_range_the_three_targets_and_curves(home):
    """Every headline cell is several seeds: the page shows the median with its range, the time to
    90 / 95 / 98% of the best validation Recall@20 and the validation curves of every seed."""
    out, img = home / "h.md", home / "img" / "h.png"
    rc = _bench().main(["--quick", "--full-only", "--depths", "1", "--seeds", "2020,7", "--matched-batch", "0",
                        "--precision", "fp32", "--out", str(out), "--img", str(img)])
    md = out.read_text()
    assert rc == 0, md
    from gnnrec_lab.runs.store import Store
    store = Store()
    names = {store.get_run(r)["name"] for r in store.run_ids()}
    assert names == {"headline full L1 b1024", "headline full L1 b1024 s7"}     # the default seed keeps its name
    assert {store.run_record(r).config["seed"] for r in store.run_ids()} == {2020, 7}
    assert "## Time to 90 / 95 / 98% of the best validation Recall@20" in md and "2 seed(s) (2020, 7)" in md
    by_depth = md[md.index("## By depth"):md.index("## Time to 90")]
    assert "/2 reached" in by_depth and "(" in by_depth                        # median (range), k/2 reached
    assert (img.parent / "h_curves.png").stat().st_size > 1000 and "h_curves.png" in md
    assert "| full graph | 1 | 1024 | - | 7 |" in md                              # every run, with its seed


def test_the_figure_draws_a_cell_that_never_reached_the_target_as_no_bar(tmp_path):
    """A DistDGL cell whose seeds never reached the target (median NaN, once None) broke the figure."""
    import pandas as pd
    best = pd.DataFrame([{"series": "full graph, 1 machine x 1 core (measured)", "kind": "measured", "engine": "full",
                          "layers": 1, "time_to_target_s": 2.0, "epoch_s": 1.0},
                         {"series": "DistDGL, 2 machines x 1 core, 10 Gbit/s (measured)", "kind": "measured",
                          "engine": "distdgl", "layers": 1, "time_to_target_s": None, "epoch_s": 3.0}])
    _bench().figure(best, tmp_path / "f.png", "t")
    assert (tmp_path / "f.png").stat().st_size > 1000


def _cells(rows):
    import pandas as pd
    base = {"kind": "measured", "seeds": 1}
    return pd.DataFrame([{**base, **r} for r in rows])


FULL = "full graph, 1 machine x 1 core (measured)"
DIST = "DistDGL, 2 machines x 1 core, 10 Gbit/s (measured)"


def test_where_distdgl_wins_is_computed_from_the_cells_and_says_so_where_it_wins_nowhere():
    """The page's 'where DistDGL wins' lines come from the runs: fewer epochs to target, a higher test
    Recall@20, a share of the best reached sooner or only by DistDGL; a line saying it wins nowhere else."""
    b = _bench()
    best = _cells([
        {"series": FULL, "engine": "full", "layers": 1, "batch_size": 65536, "time_to_target_s": 2.0, "epoch_s": 1.0,
         "test_recall@20": 0.12},
        {"series": DIST, "engine": "distdgl", "layers": 1, "batch_size": 65536, "time_to_target_s": 6.0,
         "epoch_s": 4.0, "test_recall@20": 0.13},
        {"series": FULL, "engine": "full", "layers": 2, "batch_size": 65536, "time_to_target_s": 2.0, "epoch_s": 1.0,
         "test_recall@20": 0.14},
        {"series": DIST, "engine": "distdgl", "layers": 2, "batch_size": 16384, "time_to_target_s": 20.0,
         "epoch_s": 5.0, "test_recall@20": 0.13}])
    at98 = best.assign(time_to_target_s=[float("nan"), 9.0, 3.0, 30.0])
    lines = b.distdgl_wins(best, {0.95: best, 0.98: at98})
    text = "\n".join(lines)
    assert "1 layer(s): DistDGL needs 0.75x the full graph's epochs" in text
    assert "1 layer(s): DistDGL's test Recall@20 is higher, 0.1300 vs 0.1200" in text
    assert "1 layer(s): DistDGL reaches 98% of the best in 9 s, the full graph never does." in text
    assert "2 layer(s)" not in text                                  # behind on every count at 2 layers
    behind = best[best["layers"] == 2]
    assert b.distdgl_wins(behind, {0.95: behind}) == [
        "- In these runs DistDGL is ahead on no depth: not on time or epochs to any of the targets, "
        "nor on test Recall@20."]


def test_the_bias_lines_name_the_cores_and_the_link_of_the_run():
    a = _bench().parse_args(["--partitions", "2", "--cores", "1", "--link", "25", "--epochs", "12"])
    text = "\n".join(_bench().bias_lines(a))
    assert "2 machines x 1 core(s) = 2 cores to the full graph's 1" in text and "25 Gbit/s" in text
    assert "within 12 epochs" in text and "modeled" in text
