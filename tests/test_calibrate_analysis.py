"""Host calibration (shrunk sizes), its cache, the CLI, breakdown tables, roofline
points and the Chrome trace export."""
import json
import math

import numpy as np
import pytest
import torch

from gnnrec_lab import kernels
from gnnrec_lab.commands.cli import main
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.memory import analysis, calibrate
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.recorder import KernelRecord, Recorder, use_recorder


@pytest.fixture
def small(monkeypatch, tmp_path):
    """Tiny calibration sizes and a private lab home."""
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    for name, v in dict(STREAM_ELEMS=2**16, CHASE_ELEMS=2**14, GATHER_TABLE_BYTES=2**20,
                        GATHER_PASS_BYTES=2**18, CHASE_HOPS=50_000, GEMM_N=128).items():
        monkeypatch.setattr(calibrate, name, v)
    return tmp_path


def test_measure_returns_positive_numbers_with_spread(small):
    p = calibrate.measure(quick=True)
    for k in calibrate.REQUIRED:
        assert k in p
    for k in ("copy_GBps", "triad_GBps", "gather64_GBps", "gather256_GBps", "latency_ns", "gemm_GFLOPs"):
        assert p[k] > 0 and math.isfinite(p[k])
        s = p["spread"][k]
        if k == "latency_ns":
            assert s["best"] <= s["median"] <= s["worst"] and p[k] == s["best"]
        else:
            assert s["best"] >= s["median"] >= s["worst"] and p[k] == s["best"]
    assert p["kind"] == "host" and p["measured"] is True and p["threads"] >= 1
    assert "GB/s" in calibrate.format_profile(p)


def test_host_profile_caches_and_rejects_other_machines(small, monkeypatch):
    with pytest.raises(UserError, match="gnnrec-lab calibrate"):
        calibrate.host_profile(measure_if_missing=False)
    first = calibrate.host_profile()
    assert (small / "calibration.json").exists()

    def no_measure(quick=False):
        raise AssertionError("should have used the cache")
    monkeypatch.setattr(calibrate, "measure", no_measure)
    assert calibrate.host_profile() == first
    # a calibration from another CPU is not this host's
    other = dict(first, cpu="Some Other CPU")
    (small / "calibration.json").write_text(json.dumps(other))
    assert calibrate.load() is None
    with pytest.raises(UserError):
        calibrate.host_profile(measure_if_missing=False)
    assert "measured on 'Some Other CPU'" in calibrate.inspect()[1]


@pytest.mark.parametrize("text, why", [("{bad", "not JSON"), ("[1, 2]", "a JSON list, not an object"),
                                       ('{"copy_GBps": 1}', "no triad_GBps")])
def test_a_damaged_calibration_is_named_as_such_and_kept(small, text, why):
    """Not 'no host calibration': where it is, that it is damaged and how; the file stays until a
    calibration replaces it, and then it is moved aside, not overwritten."""
    path = small / "calibration.json"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        calibrate.host_profile(measure_if_missing=False)
    msg = str(e.value)
    assert str(path) in msg and "it is damaged" in msg and why in msg and "it is kept" in msg
    assert path.read_text() == text
    calibrate.save({"copy_GBps": 1.0})
    assert (small / "calibration.json.damaged").read_text() == text
    assert json.loads(path.read_text()) == {"copy_GBps": 1.0}


def test_cli_calibrate(small, capsys):
    assert main(["calibrate", "--show"]) == 2
    assert "no host calibration" in capsys.readouterr().err
    assert main(["calibrate", "--quick", "--json"]) == 0
    prof = json.loads(capsys.readouterr().out)
    assert prof["triad_GBps"] > 0
    assert main(["calibrate", "--show"]) == 0
    assert "STREAM triad" in capsys.readouterr().out


# -- analysis ----------------------------------------------------------------------
HOST = {"triad_GBps": 10.0, "gemm_GFLOPs": 100.0}


def _rec(name, phase, ns, read, written, flops, step=0):
    return KernelRecord(name, phase, 0, step, ns, read, written, flops, "gather", 256, read // 2, "native")


def test_breakdown_numbers():
    recs = [_rec("spmm", "forward", 1_000_000_000, 3_000_000_000, 1_000_000_000, 2_000_000_000),
            _rec("spmm", "forward", 1_000_000_000, 3_000_000_000, 1_000_000_000, 2_000_000_000),
            _rec("gemm", "forward", 500_000_000, 100_000_000, 0, 40_000_000_000),
            _rec("spmm", "backward", 500_000_000, 1_000_000_000, 0, 0)]
    df = analysis.breakdown(recs, host=HOST)
    assert list(df["kernel"]) == ["spmm", "gemm", "spmm"] and list(df["phase"]) == ["forward", "forward", "backward"]
    s = df.iloc[0]
    assert s["calls"] == 2 and s["seconds"] == pytest.approx(2.0) and s["share"] == pytest.approx(2 / 3)
    assert s["GBps"] == pytest.approx(4.0) and s["GFLOPs"] == pytest.approx(2.0)
    assert s["intensity"] == pytest.approx(0.5)
    # bound: 8 GB at 10 GB/s = 0.8 s (flops need only 0.04 s) -> 40% of bound
    assert s["bound_seconds"] == pytest.approx(0.8) and s["pct_of_bound"] == pytest.approx(40.0)
    g = df.iloc[1]  # compute bound: 40 GFLOP at 100 GFLOP/s = 0.4 s of 0.5 s
    assert g["bound_seconds"] == pytest.approx(0.4) and g["pct_of_bound"] == pytest.approx(80.0)
    text = analysis.format_breakdown(df)
    assert "spmm" in text and "backward" in text and "measured" in text
    # without any host calibration the bound is unknown, not invented
    nohost = analysis.breakdown(recs, host={})
    assert nohost["pct_of_bound"].isna().all()
    assert analysis.breakdown([], host=HOST).empty


def test_roofline_points_and_breakdown_of_real_kernel_records():
    adj = BipartiteGraph(np.array([[0, 0], [1, 1], [1, 0], [2, 1]]), 3, 2).adj
    rec = Recorder()
    rec.phase = "forward"
    with use_recorder(rec):
        kernels.spmm(adj, torch.randn(5, 4, requires_grad=True)).sum().backward()
    df = analysis.breakdown(rec.frame(), host=HOST)
    assert set(zip(df["kernel"], df["phase"])) == {("spmm", "forward"), ("spmm", "backward")}
    pts = analysis.roofline_points(rec.records, HOST)
    assert {p["name"] for p in pts} == {"spmm (forward)", "spmm (backward)"}
    for p in pts:
        assert p["roof_GFLOPs"] == pytest.approx(min(100.0, 10.0 * p["intensity"]))


def test_chrome_trace(tmp_path):
    recs = [_rec("spmm", "forward", 2000, 10, 10, 5, step=0),
            _rec("spmm", "forward", 3000, 10, 10, 5, step=1),
            _rec("gemm", "forward", 1000, 8, 8, 100, step=1),
            _rec("spmm", "backward", 4000, 16, 4, 5, step=1)]
    path = tmp_path / "trace.json"
    assert analysis.export_chrome_trace(recs, path) == 3  # the last step
    ev = json.loads(path.read_text())["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    assert [e["name"] for e in xs] == ["spmm", "gemm", "spmm"]
    assert [e["ts"] for e in xs] == [0.0, 3.0, 4.0] and [e["dur"] for e in xs] == [3.0, 1.0, 4.0]
    assert xs[2]["cat"] == "backward" and xs[2]["tid"] != xs[0]["tid"]
    assert xs[0]["args"]["bytes_read"] == 10 and xs[1]["args"]["flops"] == 100
    assert analysis.export_chrome_trace(recs, path, step=0) == 1
    with pytest.raises(ValueError):
        analysis.export_chrome_trace(recs, path, step=7)


def test_breakdown_sums_calls_of_pre_aggregated_rows():
    import pandas as pd

    from gnnrec_lab.memory.analysis import breakdown
    df = pd.DataFrame([dict(name="spmm", phase="forward", ns=3_000_000_000, bytes_read=30, bytes_written=3,
                            flops=6, calls=60),
                       dict(name="spmm", phase="forward", ns=1_000_000_000, bytes_read=10, bytes_written=1,
                            flops=2, calls=20)])
    b = breakdown(df, host={"triad_GBps": 1.0, "gemm_GFLOPs": 1.0})
    assert int(b.loc[0, "calls"]) == 80 and b.loc[0, "seconds"] == 4.0


def test_cli_bench_recording_reports_paired_overhead(capsys):
    assert main(["bench", "recording", "--sizes", "small", "--dims", "16", "--repeats", "4", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["repeats"] == 4 and res["records_per_step"] == 10
    assert res["recorded_s"] > 0 and res["unrecorded_s"] > 0
    # per_record_s is a measured difference (recorded minus unrecorded): on a loaded machine its
    # sign is noise, so the test holds its arithmetic, not its sign
    assert math.isfinite(res["per_record_s"])
    assert res["derived_overhead_pct"] == pytest.approx(
        100.0 * res["per_record_s"] * res["records_per_step"] / res["unrecorded_s"])
    lo, hi = res["overhead_iqr_pct"]
    assert lo <= res["overhead_pct"] <= hi
    assert main(["bench", "recording", "--sizes", "huge"]) == 2
