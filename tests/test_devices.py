"""Device profiles against published measurements: fitted points reproduced, held-out points within
the target (and the misses named), the mixed read/write term, each profile on its own platform's
DRAM, and the `gnnrec-lab devices` command."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from test_modeled_step import calibrated_store
from test_tiermodel import HOST, _modeled_unlabelled

from gnnrec_lab.commands.cli import main
from gnnrec_lab.memory.profiles import load_profiles, misses_in_flight
from gnnrec_lab.memory.tiermodel import project
from gnnrec_lab.memory.validation import FIT_TOLERANCE, HELD_OUT_TARGET, load_points, validate
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.recorder import KernelRecord

OPTANE = "optane_pmem100_appdirect_6x"
# Held-out points the model misses, and why (docs/tier_model.md, measured vs modeled): on the remote socket
# FAST20's 3:1 and 2:1 mixes are slower than its 1:1 mix (the interference peaks near 2:1), which
# the bell-shaped interference fitted on the 1:1 and 4:1 points cannot give (+70% and +55%);
# Pond's remote/local latency ratio is larger than FAST20's, on which the profile is built.
KNOWN_MISSES = {(OPTANE, "mixed_GBps", True), ("remote_numa_ddr4", "latency_ratio", False)}


def test_fitted_points_are_reproduced_to_one_percent():
    rows = validate()
    fitted = [r for r in rows if not r["held_out"]]
    assert len(fitted) >= 20
    for r in fitted:
        assert abs(r["error"]) <= FIT_TOLERANCE, r


def test_held_out_points_are_within_the_target_except_the_named_misses():
    held = [r for r in validate() if r["held_out"]]
    assert len(held) >= 10
    misses = {(r["device"], r["quantity"], bool(r["params"].get("remote"))) for r in held
              if abs(r["error"]) > HELD_OUT_TARGET}
    assert misses == KNOWN_MISSES
    # the points the issue names are there, each with its own source
    two_five_six = [r for r in validate() if r["quantity"] == "random_write_GBps" and r["params"]["row_bytes"] == 256]
    assert {r["params"]["store"] for r in two_five_six} == {"clwb", "ntstore"}
    assert all("05-bandwidth_accesssize_optane.csv" in r["source"] for r in two_five_six)
    local_2to1 = [r for r in held if r["quantity"] == "mixed_GBps" and not r["params"].get("remote")]
    assert local_2to1 and abs(local_2to1[0]["error"]) <= HELD_OUT_TARGET


def test_no_held_out_point_is_an_input_of_its_profile():
    """A held-out value must not appear among its profile's numbers (else it was fitted)."""
    profiles = load_profiles()

    def numbers(obj):
        if isinstance(obj, dict):
            for v in obj.values():
                yield from numbers(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                yield from numbers(v)
        elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
            yield float(obj)

    for pt in load_points():
        if pt["held_out"]:
            p = profiles[pt["device"]]
            vals = list(numbers({f.name: getattr(p, f.name) for f in dataclasses.fields(p)
                                 if f.name not in ("hit_profile", "miss")}))
            assert all(abs(v - pt["published"]) > 1e-6 for v in vals), pt


def _rw(read_bytes, write_bytes, name="add"):
    host_ns = read_bytes / HOST["triad_GBps"] + write_bytes / HOST["triad_GBps"]
    return KernelRecord(name, "forward", 1, 0, int(host_ns), read_bytes, write_bytes, 0, "stream", 0, 0, "native")


def test_a_one_to_one_group_on_optane_costs_about_twice_its_parts():
    b = 512 * 2**20
    parts = project([_rw(b, 0)], HOST, OPTANE)["modeled_s"].iloc[0] \
        + project([_rw(0, b)], HOST, OPTANE)["modeled_s"].iloc[0]
    mixed = project([_rw(b, b)], HOST, OPTANE)["modeled_s"].iloc[0]
    # FAST20 17-numa.csv: 6.90 GB/s for 1:1 against 14.62 read / 13.51 write in the same series
    expected = (1 / 6.90) / (0.5 / 14.62 + 0.5 / 13.51)
    assert mixed / parts == pytest.approx(expected, rel=1e-6)
    assert 1.9 < mixed / parts < 2.1
    # on the other socket the measured 1:1 mix is worse still
    remote = project([_rw(b, b)], HOST, OPTANE, remote=True)["modeled_s"].iloc[0]
    remote_parts = project([_rw(b, 0)], HOST, OPTANE, remote=True)["modeled_s"].iloc[0] \
        + project([_rw(0, b)], HOST, OPTANE, remote=True)["modeled_s"].iloc[0]
    assert remote / remote_parts > 3.5
    # the DRAM side does not interfere: with the written class kept in DRAM the parts just add
    spmm = KernelRecord("spmm", "forward", 1, 0, 10**8, b, b, 0, "gather", 256, b, "native")
    kept = project([spmm], HOST, OPTANE, {"activations": "dram"})["modeled_s"].iloc[0]
    opt = load_profiles()[OPTANE]
    plain = project([spmm], HOST, dataclasses.replace(opt, mixed={}), {"activations": "dram"})["modeled_s"].iloc[0]
    assert kept == pytest.approx(plain, rel=1e-9)
    # a profile without a measured series adds its parts as before
    assert project([_rw(b, b)], HOST, dataclasses.replace(opt, mixed={}))["modeled_s"].iloc[0] \
        == pytest.approx(parts, rel=1e-6)


def test_every_profile_is_projected_against_its_own_platforms_dram():
    profiles = load_profiles()
    expected = {"optane_pmem100_appdirect_6x": "ddr4_2666_6ch", "optane_pmem100_memory_mode": "ddr4_2666_6ch",
                "remote_numa_ddr4": "ddr4_2666_6ch", "optane_pmem200_appdirect_8x": "ddr4_3200_8ch",
                "cxl_type3_ddr5_x8": "ddr5_4800_8ch", "cxl_type3_slow": "ddr5_4800_8ch"}
    for name, p in profiles.items():
        if p.kind == "dram":
            assert p.baseline == name, name          # a DRAM profile is its own platform's DRAM
            continue
        base = profiles[p.baseline]
        assert base.kind == "dram", name
        assert expected[name] == p.baseline, name
        # the platform generation in the baseline's description is the device's
        generation = base.platform.split(" (")[0].split(",")[0].split(" / ")[0]
        assert generation in p.platform, (name, generation, p.platform)
        assert p.platform and p.sources and p.conf in ("high", "med", "low"), name


def test_write_bandwidths_are_one_store_type_on_both_sides():
    p = load_profiles()
    dram, optane = p["ddr4_2666_6ch"], p[OPTANE]
    # store+clwb on both sides (FAST20): the like-for-like ratio of 0.35, not ntstore's DRAM 76.8
    assert optane.write_bw_GBps / dram.write_bw_GBps == pytest.approx(0.35, abs=0.01)
    assert dram.write_bw_ntstore_GBps == 76.8


def test_latency_floor_comes_from_the_host_calibration():
    assert misses_in_flight(HOST) == pytest.approx(3.0 * 90.0 / (64 * 2))
    assert misses_in_flight({"gather64_GBps": 3.0}) is None
    opt = load_profiles()[OPTANE]
    # with few threads, 64 B rows are latency-bound: latency / (threads * misses in flight)
    assert opt.random_ns_per_row(64, threads=1, mlp=2.0) == pytest.approx(305 / 2.0)
    assert opt.random_ns_per_row(64, threads=1) == pytest.approx(64 / 9.67)   # no floor without one


def test_devices_validate_json(capsys):
    assert main(["devices", "validate", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for r in rows:
        assert {"device", "quantity", "published", "modeled", "error", "held_out", "source"} <= set(r)
        assert r["kind"] == "modeled" and r["source"]
    assert any(r["quantity"] == "mixed_GBps" for r in rows)
    assert not _modeled_unlabelled(rows)
    assert main(["devices", "validate", "--strict"]) == 1        # the named misses
    text = capsys.readouterr().out
    assert "MISS" in text and "held out" in text


def test_devices_list_and_show(capsys):
    assert main(["devices", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in rows}
    assert {"cxl_type3_slow", "ddr5_4800_8ch", "ddr4_3200_8ch", OPTANE} <= names
    assert all(r["platform"] and "conf" in r and "sources" in r for r in rows)
    assert main(["devices", "show", OPTANE, "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["kind"] == "modeled" and c["mixed"] and c["access_size"] and c["threads"]
    half = [m for m in c["mixed"] if m["write_share"] == 0.5][0]
    assert half["GBps"] == pytest.approx(6.90) and half["interference"] > 1.9
    assert main(["devices", "show", OPTANE]) == 0
    lines = capsys.readouterr().out.splitlines()
    numeric = [ln for ln in lines if ln.strip() and ln.strip()[0].isdigit()]
    assert numeric and all(ln.rstrip().endswith("modeled") for ln in numeric)
    assert main(["devices", "show", "optane_pmem100_memory_mode"]) == 0
    capsys.readouterr()
    assert main(["devices", "show", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err


def test_bad_points_file_names_the_point(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("points:\n  - {device: x, quantity: read_GBps, published: 3, held_out: true}\n")
    with pytest.raises(UserError, match=r"p\.yaml: point 1: 'source' is required"):
        load_points(bad)
    bad.write_text("points:\n  - {device: x, quantity: speed, published: 3, held_out: true, source: s}\n")
    with pytest.raises(UserError, match="point 1: quantity must be one of"):
        load_points(bad)


# ----------------------------------------------------------------------
# The file tier: a measured profile, projected onto a recorded run
# ----------------------------------------------------------------------
FILE_MEASURED = {"seq_read_GBps": 0.8, "seq_write_GBps": 1.0, "rand_read_4k_GBps": 0.08, "rand_write_4k_GBps": 0.06,
                 "mixed_1to1_4k_GBps": 0.05, "read_latency_ns": 90_000.0, "write_latency_ns": 70_000.0, "threads": 2,
                 "directory": "/var/tmp/x", "cpu": "test", "measured_at": "fixed", "loadavg": 0.5,
                 "page_cache_bytes": 8 * 2**30}


@pytest.fixture(scope="module")
def recorded_dram_run(tmp_path_factory):
    """A real synth-tiny LightGCN run on DRAM, recorded in a fresh store."""
    from gnnrec_lab import RunConfig, run
    with calibrated_store(tmp_path_factory, HOST) as (store, host):
        cfg = RunConfig(dataset="synth-tiny", layers=2, dim=16, batch_size=512, epochs=1, max_steps_per_epoch=3)
        rid = store.add_run(cfg)
        run(cfg, reporter=store.reporter(rid))
        yield store, rid, host


def test_file_tier_profile_projects_a_recorded_run(recorded_dram_run, tmp_path):
    from gnnrec_lab.config.run import TENSOR_CLASSES
    from gnnrec_lab.memory import calibrate
    from gnnrec_lab.services.projection import stored_run_records, stored_run_step_time
    store, rid, host = recorded_dram_run
    warm = calibrate.save_file_profile(calibrate.file_tier_profile(FILE_MEASURED, "ft_warm"), tmp_path / "w.yaml")
    cold = calibrate.file_tier_profile(FILE_MEASURED, "ft_cold")
    cold.pop("dram_cache_bytes")
    cold = calibrate.save_file_profile(cold, tmp_path / "c.yaml")
    profiles = load_profiles([warm, cold])
    assert profiles["ft_warm"].kind == "file" and profiles["ft_warm"].measured
    assert profiles["ft_warm"].baseline == "host" and profiles["ft_warm"].mix_factor(0.5) > 1
    _, _, fp, _ = stored_run_records(store, rid)
    emb = {c: ("device" if c == "embeddings" else "dram") for c in TENSOR_CLASSES}
    both = {c: ("device" if c in ("embeddings", "optimizer") else "dram") for c in TENSOR_CLASSES}
    kw = dict(extra_paths=[warm, cold])
    # the page cache holds the placed tensors: every access is a hit, the DRAM time comes back
    w = stored_run_step_time(store, rid, host, device="ft_warm", placement=emb, **kw)
    assert w["hit_rate"] == 1.0 and w["modeled_s"] == pytest.approx(w["measured_s"], rel=1e-9)
    # no page cache: every row gathered from the embeddings is a 4 KiB read from the storage
    c_emb = stored_run_step_time(store, rid, host, device="ft_cold", placement=emb, **kw)
    c_both = stored_run_step_time(store, rid, host, device="ft_cold", placement=both, **kw)
    assert c_both["modeled_s"] > c_emb["modeled_s"] > 10 * c_emb["measured_s"]
    # a page cache of a quarter of the placed bytes serves a quarter of the accesses
    quarter = calibrate.file_tier_profile(FILE_MEASURED, "ft_q", page_cache_bytes=max(2**20, fp["embeddings"] // 4))
    q = calibrate.save_file_profile(quarter, tmp_path / "q.yaml")
    s_q = stored_run_step_time(store, rid, host, device="ft_q", placement=emb, extra_paths=[q])
    h = s_q["hit_rate"]
    assert 0 < h < 1
    assert s_q["modeled_s"] == pytest.approx(h * w["measured_s"] + (1 - h) * c_emb["modeled_s"], rel=1e-6)


def test_whatif_onto_a_file_tier_is_labelled_modeled(recorded_dram_run, tmp_path, capsys):
    from gnnrec_lab.memory import calibrate
    store, rid, host = recorded_dram_run      # the fixture's store is the default one while it lives
    prof = calibrate.save_file_profile(calibrate.file_tier_profile(FILE_MEASURED, "ft"), tmp_path / "f.yaml")
    hp = tmp_path / "host.json"
    hp.write_text(json.dumps(host))
    args = ["whatif", str(rid), "--device", "ft", "--devices-file", str(prof), "--host-profile", str(hp), "--json"]
    for c in ("graph", "optimizer", "gradients", "activations", "edge_intermediates", "buffers"):
        args += ["--placement", f"{c}=dram"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "modeled" and out["kernel_time"]["kind"] == "modeled" and not _modeled_unlabelled(out)
    assert out["kernel_time"]["hit_rate"] == 1.0


def test_calibrate_tier_measures_a_directory(tmp_path, capsys, monkeypatch):
    """The direct-I/O measurement on a small file (skipped where the filesystem has no O_DIRECT)."""
    import os

    from gnnrec_lab.memory import calibrate
    probe = tmp_path / "probe"
    probe.write_bytes(b"\0" * 4096)
    try:
        os.close(os.open(probe, os.O_RDWR | os.O_DIRECT))
    except OSError:
        pytest.skip("no direct I/O on this filesystem")
    monkeypatch.setattr(calibrate, "FILE_TIER_BYTES", 8 * 2**20)
    assert main(["calibrate", "--tier", f"file:{tmp_path}", "--tier-file-size", "8M", "--quick",
                 "--tier-cache", "16M", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    m, prof = out["measured"], out["profile"]
    assert m["kind"] == "measured" and m["rand_read_4k_GBps"] > 0 and m["read_latency_ns"] > 0
    assert prof["kind"] == "file" and prof["dram_cache_bytes"] == 16 * 2**20
    assert load_profiles([out["path"]])[prof["name"]].random_read_GBps[4096] > 0
    assert main(["calibrate", "--tier", "disk:/x"]) == 2
    assert main(["calibrate", "--tier", f"file:{tmp_path / 'missing'}"]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_breakdown_draws_the_device_curves_labelled_modeled():
    import holoviews as hv
    import holoviews.plotting.bokeh  # noqa: F401  (the dashboards' backend)

    from gnnrec_lab.dashboard.breakdown import device_curve_plots
    from gnnrec_lab.memory.validation import device_curves
    plots = device_curve_plots(device_curves(load_profiles()[OPTANE], mlp=6.0))
    assert len(plots) == 3          # access size, threads, read/write mix
    for p in plots:
        assert "(modeled)" in p.opts.get().kwargs["title"]
        hv.render(p, backend="bokeh")
    assert len(device_curve_plots(device_curves(load_profiles()["cxl_type3_slow"]))) == 2   # no mixed series


def test_the_interference_is_fitted_on_the_1to1_and_4to1_mixes_and_predicts_the_mixes_between():
    opt = load_profiles()[OPTANE]
    a, q = opt.mix_shape()
    assert a == pytest.approx((1 / 6.90) / (0.5 / 14.62 + 0.5 / 13.51) - 1, rel=1e-9)
    assert opt.mixed_bw_GBps(0.2) == pytest.approx(13.84, rel=1e-9)          # fitted
    # held out, FAST20 17-numa.csv -4 series: 3:1 12.75, 2:1 10.41 GB/s
    assert opt.mixed_bw_GBps(0.25) == pytest.approx(12.75, rel=0.02)
    assert opt.mixed_bw_GBps(1 / 3) == pytest.approx(10.41, rel=0.06)
    # the shape: no interference for pure reads or writes, the most at 1:1, symmetric
    assert opt.mix_factor(0.0) == opt.mix_factor(1.0) == 1.0
    assert opt.mix_factor(0.5) == pytest.approx(1 + a)
    assert opt.mix_factor(0.3) == pytest.approx(opt.mix_factor(0.7))
    assert 1 < opt.mix_factor(0.2) < opt.mix_factor(0.3) < opt.mix_factor(0.5)
    # the other socket has its own fit (its own 1:1 and 4:1 points)
    assert opt.mixed_bw_GBps(0.5, remote=True) == pytest.approx(1.95, rel=1e-9)
    assert opt.mixed_bw_GBps(0.2, remote=True) == pytest.approx(4.77, rel=1e-9)
    assert opt.mix_shape(remote=True)[0] > a


@pytest.mark.parametrize("mixed, needle", [
    ("points: {0.2: 5}", r"1:1 mix \(0.5\)"),
    ("points: {0.5: 5, 0.2: 6, 0.3: 7}", "at most one other"),
    ("points: {0.5: 5}\n      remote_points: {0.3: 2}", "remote_points"),
])
def test_mixed_series_needs_the_1to1_point_and_at_most_one_shape_point(tmp_path, mixed, needle):
    f = tmp_path / "mix.yaml"
    f.write_text("device_profiles:\n  - name: m\n    kind: pmem\n    read_bw_GBps: 10\n    write_bw_GBps: 5\n"
                 "    read_latency_ns: 300\n    write_latency_ns: 100\n"
                 f"    mixed:\n      read_GBps: 10\n      write_GBps: 5\n      {mixed}\n")
    with pytest.raises(UserError, match=needle):
        load_profiles([f])


def test_a_profile_with_only_a_remote_1to1_factor_still_models_the_remote_mix(tmp_path):
    """Profiles written before remote_points: the remote 1:1 point is the local one times mixed_1to1."""
    f = tmp_path / "old.yaml"
    f.write_text("device_profiles:\n  - name: old\n    kind: pmem\n    read_bw_GBps: 10\n    write_bw_GBps: 5\n"
                 "    read_latency_ns: 300\n    write_latency_ns: 100\n"
                 "    remote_socket_factor: {read: 0.9, write: 0.5, mixed_1to1: 0.25}\n"
                 "    mixed:\n      read_GBps: 10\n      write_GBps: 5\n      points: {0.5: 4}\n")
    p = load_profiles([f])["old"]
    assert p.mixed_bw_GBps(0.5, remote=True) == pytest.approx(1.0, rel=1e-9)
    assert p.mix_shape() == (pytest.approx((1 / 4) / (0.5 / 10 + 0.5 / 5) - 1), 1.0)   # no shape point: q = 1


# -- the band: each regime's held-out error, carried by every modeled number (issue 33) ----------
def test_the_regimes_that_failed_validation_are_exactly_the_named_misses():
    """regime_table groups the held-out points by regime; the regimes that fail are the ones the
    known misses fall in (nothing moved between fitted and held out), each with its largest error
    as a time error."""
    from gnnrec_lab.memory.validation import regime_table, regimes_of_point, time_error
    rows = validate()
    table = regime_table(rows)
    missed = [r for r in rows if r["held_out"] and not r["ok"]]
    failed = {k for k, v in table.items() if not v["ok"]}
    want = set()
    for r in missed:
        want |= set(regimes_of_point(dict(r["params"], device=r["device"], quantity=r["quantity"])))
    assert failed == want and len(failed) == 3      # remote Optane mixes; remote DRAM's two row-size regimes
    remote_mix = table[f"{OPTANE}: remote socket, mixed read+write, all access sizes"]
    assert remote_mix["error"] == pytest.approx(0.696, abs=0.001) and len(remote_mix["points"]) == 2
    # a latency modeled 15.8% low makes a time 18.8% short
    pond = [r for r in missed if r["device"] == "remote_numa_ddr4"][0]
    assert time_error(pond) == pytest.approx(1 / (1 - 0.158) - 1, abs=0.002)
    assert all(p["held_out"] for v in table.values() for p in v["points"])   # held-out points only
    local_mix = table[f"{OPTANE}: local socket, mixed read+write, all access sizes"]
    assert local_mix["ok"] and local_mix["error"] < HELD_OUT_TARGET


def test_a_remote_optane_mixed_run_is_low_confidence_in_whatif(recorded_dram_run, tmp_path, capsys):
    """whatif --remote onto App Direct: most of the modeled traffic is remote read+write mixes, the
    regime whose held-out points missed by +70%: low confidence, with the reason, in --json and the
    table; the same run on the local socket is not low confidence and has a narrower band."""
    from gnnrec_lab.memory.tiermodel import fmt_band, model_band
    store, rid, host = recorded_dram_run
    hp = tmp_path / "host.json"
    hp.write_text(json.dumps(host))
    out = {}
    for remote in (True, False):
        assert main(["whatif", str(rid), "--device", OPTANE, "--host-profile", str(hp), "--json"]
                    + (["--remote"] if remote else [])) == 0
        out[remote] = json.loads(capsys.readouterr().out)
    far, near = out[True], out[False]
    assert far["kernel_time"]["remote"] is True
    band = far["kernel_time"]["band"]
    assert band == json.loads(json.dumps(model_band(far["kernel_time"]).to_dict()))
    assert band["confidence"] == "low" and far["step_times"]["confidence"] == "low"
    assert "remote socket, mixed read+write" in band["reasons"][0] and "failed validation" in band["reasons"][0]
    assert band["kernel"] > 0.5 * 0.696           # most of the time in the regime that missed by 70%
    assert near["kernel_time"]["band"]["confidence"] != "low"
    assert near["kernel_time"]["band"]["kernel"] < band["kernel"]
    # per kernel: the rows carry their own band, weighed into the kernel time's
    rows = far["kernel_time"]["kernels"]
    total = sum(k["modeled_s"] for k in rows)
    # (the device model's part of the band: the run's measured spread joins it in quadrature, issue 51)
    assert sum(k["modeled_s"] * k["band"] for k in rows) / total == pytest.approx(band["model_kernel"], rel=1e-6)
    assert band["kernel"] == pytest.approx(math.hypot(band["model_kernel"], band["spread_kernel"]), rel=1e-9)
    assert main(["whatif", str(rid), "--device", OPTANE, "--host-profile", str(hp), "--remote"]) == 0
    text = capsys.readouterr().out
    assert "LOW CONFIDENCE" in text and f" {fmt_band(band['kernel'])} " in text


def test_a_calibration_under_load_or_far_below_the_best_triad_is_flagged(tmp_path, monkeypatch, capsys):
    """A calibration measured with the load above the cores, or with a triad more than 25% below the
    best stored one (26.5 against 44 GB/s), is flagged by calibrate, beside % bound, in the band of
    every modeled number (low confidence) and by runs show."""
    from gnnrec_lab.kernels import native as nk
    from gnnrec_lab.memory import calibrate
    from gnnrec_lab.memory.tiermodel import project_step
    from gnnrec_lab.training.benchmarking import machine_line
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    base = dict(HOST, cpu=calibrate.cpu_model(), threads=nk.threads(), cores_online=2)
    good = dict(base, triad_GBps=44.0, measured_at="day 1", loadavg={"start": 0.3, "end": 0.4, "max": 0.4})
    assert calibrate.calibration_flags(good, past=[]) == []
    calibrate.save(good)
    slow = dict(base, triad_GBps=26.5, measured_at="day 2", loadavg={"start": 0.5, "end": 0.6, "max": 0.6})
    loaded = dict(base, triad_GBps=43.0, measured_at="day 3", loadavg={"start": 3.5, "end": 2.9, "max": 3.5})
    fix = ("; to fix it, re-run `gnnrec-lab calibrate` when the machine is quiet (1-min load average below its "
           "2 cores: no runs, tests or builds going)")
    assert calibrate.calibration_flags(slow) == [
        f"host calibration of day 2 measured triad 26.5 GB/s, 40% below the best stored one (44.0 GB/s){fix}"]
    assert calibrate.calibration_flags(loaded) == [
        f"host calibration of day 3 was measured under load 3.50 on 2 cores{fix}"]
    calibrate.save(loaded)
    assert [h["triad_GBps"] for h in calibrate.history()] == [44.0, 43.0]
    assert main(["calibrate", "--show"]) == 0
    shown = capsys.readouterr().out
    assert "warning: host calibration of day 3 was measured under load 3.50 on 2 cores" in shown
    assert "best stored triad" in shown and "44.0 GB/s" in shown
    assert "measured under load 3.50" in machine_line(loaded)             # what % bound divides by
    recs = [KernelRecord("spmm", "forward", 0, s, 2_000_000, 4_000_000, 1_000_000, 0, "gather", 256, 3_000_000,
                         "native") for s in range(2)]
    band = project_step(recs, loaded, OPTANE)["band"]
    assert band["confidence"] == "low" and "measured under load 3.50" in band["reasons"][-1]
    assert project_step(recs, good, OPTANE)["band"]["confidence"] != "low"


def test_a_flagged_calibration_says_how_to_fix_it_wherever_it_is_shown(tmp_path, monkeypatch, capsys):
    """calibration_flags, the one source of the flag sentences, ends them with the remedy (re-run
    calibrate when quiet, with the load it needs), once, however many flags; a run stored with the
    flags of before gets it in its band too (model_band), so the words every view prints carry it;
    a quiet calibration has no flag and its verdict says quiet."""
    from gnnrec_lab.kernels import native as nk
    from gnnrec_lab.memory import calibrate
    from gnnrec_lab.memory.tiermodel import model_band
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    base = dict(HOST, cpu=calibrate.cpu_model(), threads=nk.threads(), cores_online=4)
    past = [dict(base, triad_GBps=50.0)]
    both = dict(base, triad_GBps=20.0, measured_at="day 5", loadavg={"start": 6.0, "end": 5.0, "max": 6.0})
    flags = calibrate.calibration_flags(both, past=past)
    assert len(flags) == 2 and "re-run `gnnrec-lab calibrate` when the machine is quiet" in flags[-1]
    assert "below its 4 cores" in flags[-1] and "gnnrec-lab calibrate" not in flags[0]
    quiet = dict(base, triad_GBps=49.0, measured_at="day 6", loadavg={"start": 0.2, "end": 0.3, "max": 0.3})
    assert calibrate.calibration_flags(quiet, past=past) == []
    assert ": quiet;" in calibrate.calibration_verdict(quiet, past=past)
    verdict = calibrate.calibration_verdict(both, past=past)
    assert "flagged" in verdict and "LOW CONFIDENCE" in verdict and "re-run `gnnrec-lab calibrate`" in verdict
    assert 1 <= len(verdict.splitlines()) <= 2
    # flags stored with a run before they said how to fix them: the band's reasons carry the remedy once
    old = {"modeled_s_per_step": 2.0, "measured_s_per_step": 1.0, "device": "optane_pmem_100",
           "calibration_flags": ["host calibration of day 3 was measured under load 3.72 on 2 cores"]}
    band = model_band(old)
    assert band.confidence == "low"
    assert band.reasons[-1].startswith("host calibration of day 3 was measured under load 3.72 on 2 cores; to fix it")
    assert "below its 2 cores" in band.reasons[-1]
    assert band.words().count("re-run `gnnrec-lab calibrate`") == 1
    again = model_band(dict(old, calibration_flags=list(band.reasons[-1:])))
    assert again.words().count("re-run `gnnrec-lab calibrate`") == 1
    # the command prints the verdict alone
    calibrate.save(both)
    assert main(["calibrate", "--show", "--verdict"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("host calibration flagged: host calibration of day 5")
    assert "re-run `gnnrec-lab calibrate`" in out
