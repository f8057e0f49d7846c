"""The tier model: reproduces the host, published Optane ratios, monotone in device speed,
Memory Mode limits, and no modeled number leaves the CLI unlabelled."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from gnnrec_lab.commands.cli import main
from gnnrec_lab.config.run import TENSOR_CLASSES
from gnnrec_lab.memory.profiles import get_profile, host_device, load_profiles
from gnnrec_lab.memory.tiermodel import mm_hit_rate, project, project_step
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.recorder import KernelRecord

HOST = dict(copy_GBps=9.0, triad_GBps=8.0, gather64_GBps=3.0, gather256_GBps=6.0, latency_ns=90.0,
            gemm_GFLOPs=50.0, threads=2, cpu="fixed test host", measured_at="fixed", kind="host", measured=True)
N, E, D = 100_000, 2_000_000, 64


def sample_records():
    return [
        KernelRecord("spmm", "forward", 0, 0, 20_000_000, 8 * N + 4 * E + E * D * 4, N * D * 4, 2 * E * D, "gather",
                     256, E * D * 4, "native"),
        KernelRecord("spmm", "backward", 1, 0, 21_000_000, 8 * N + 4 * E + E * D * 4, N * D * 4, 2 * E * D,
                     "gather", 256, E * D * 4, "native"),
        KernelRecord("gemm", "forward", 1, 0, 5_000_000, 2 * N * D * 4, N * D * 4, 2 * N * D * D, "compute", 0, 0,
                     "torch"),
        KernelRecord("scatter", "backward", 0, 0, 1_000_000, 3 * 2048 * 256, 3 * 2048 * 256, 0, "scatter", 256,
                     3 * 2048 * 256, "native"),
        KernelRecord("adam", "optimizer", -1, 0, 3_000_000, 16 * N * D, 12 * N * D, 10 * N * D, "stream", 0, 0,
                     "torch"),
        KernelRecord("topk", "evaluation", -1, 0, 4_000_000, N * D * 4, 1024 * 4000 * 4, 0, "stream", 0, 0, "torch"),
    ]


def test_projecting_onto_the_host_reproduces_measured_time():
    recs = sample_records()
    df = project(recs, HOST, "host")
    assert (df["modeled_s"] - df["measured_s"]).abs().max() <= 0.15 * df["measured_s"].max()
    assert df["ratio"].between(0.85, 1.15).all()
    step = project_step(recs, HOST, "host")
    assert step["ratio"] == pytest.approx(1.0, rel=1e-9)
    # evaluation is not part of a training step
    assert "evaluation" not in step["phases_modeled_s"]
    assert step["measured_s"] == pytest.approx(sum(r.ns for r in recs if r.phase != "evaluation") / 1e9)


def test_published_optane_random_read_ratio_for_64_vs_256_byte_rows():
    optane = get_profile("optane_pmem100_appdirect_6x")

    def per_byte(w):  # bandwidth-bound with many threads
        return optane.random_ns_per_row(w, threads=24) / w
    assert per_byte(64) / per_byte(256) == pytest.approx(33.7 / 9.67, rel=0.05)
    assert 1 / per_byte(64) == pytest.approx(9.67, rel=0.05)
    # with only the granularity known (gen 2), a 64 B row pays a whole 256 B XPLine: 4x per byte
    gen2 = get_profile("optane_pmem200_appdirect_8x")
    assert (gen2.random_ns_per_row(64, threads=64) / 64) / (gen2.random_ns_per_row(256, threads=64) / 256) \
        == pytest.approx(4.0)
    # DRAM moves 64 B lines: 64 B and 256 B rows cost the same per byte
    dram = get_profile("ddr4_2666_6ch")
    assert dram.random_ns_per_row(256, threads=64) / 256 == pytest.approx(dram.random_ns_per_row(64, threads=64) / 64)


def test_narrow_rows_are_projected_slower_per_byte_on_optane_than_wide_rows():
    def rec(width):
        nbytes = 64 * 2**20
        return [KernelRecord("spmm", "forward", 0, 0, 10_000_000, nbytes, 0, 0, "gather", width, nbytes, "native")]
    r64 = project(rec(64), HOST, "optane_pmem100_appdirect_6x", threads=24)["ratio"].iloc[0]
    r256 = project(rec(256), HOST, "optane_pmem100_appdirect_6x", threads=24)["ratio"].iloc[0]
    assert r64 > r256 > 1


def test_optane_writes_lose_bandwidth_beyond_four_threads():
    o = get_profile("optane_pmem100_appdirect_6x")
    assert o.write_bw_at(4) == 12.5 and o.write_bw_at(2) == 12.5   # FAST20 store+clwb peak
    assert o.write_bw_at(24) == pytest.approx(7.5)
    assert o.write_bw_at(4) > o.write_bw_at(12) > o.write_bw_at(24)


_rec_strategy = st.builds(
    lambda name, phase, layer, ns, rd, wr, fl, pattern, rb, rfrac: KernelRecord(
        name, phase, layer, 0, ns, rd, wr, fl, pattern, rb, int((rd + wr) * rfrac) if pattern != "stream" else 0,
        "native"),
    st.sampled_from(["spmm", "sddmm_mul", "spmm_edge", "gather", "scatter", "gemm", "add", "adam", "sgd", "bpr_loss"]),
    st.sampled_from(["forward", "backward", "optimizer", "loss"]),
    st.integers(-1, 3), st.integers(1, 10**9), st.integers(0, 10**10), st.integers(0, 10**10),
    st.integers(0, 10**11), st.sampled_from(["stream", "gather", "scatter", "compute"]),
    st.sampled_from([0, 4, 32, 64, 100, 256, 320, 1024]), st.floats(0, 1))


@settings(max_examples=25, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(recs=st.lists(_rec_strategy, min_size=1, max_size=6),
       slow=st.tuples(*[st.floats(1.0, 20.0)] * 5), threads=st.integers(1, 48),
       keep=st.sets(st.sampled_from(TENSOR_CLASSES)))
def test_slower_devices_never_predict_faster_kernels(recs, slow, threads, keep):
    profiles = load_profiles()
    fast = profiles["optane_pmem100_appdirect_6x"]
    slower = dataclasses.replace(
        fast, name="slower", read_bw_GBps=fast.read_bw_GBps / slow[0], write_bw_GBps=fast.write_bw_GBps / slow[1],
        write_bw_many_threads_GBps=fast.write_bw_many_threads_GBps / slow[1],
        read_latency_ns=fast.read_latency_ns * slow[2], write_latency_ns=fast.write_latency_ns * slow[3],
        random_read_GBps={w: v / slow[4] for w, v in fast.random_read_GBps.items()},
        random_write_GBps={w: v / slow[4] / slow[1] for w, v in fast.random_write_GBps.items()})
    placement = {c: "dram" for c in keep}
    a = project(recs, HOST, fast, placement, threads=threads).set_index(["name", "phase"])
    b = project(recs, HOST, slower, placement, threads=threads).set_index(["name", "phase"])
    assert (b["modeled_s"] >= a["modeled_s"] * (1 - 1e-9)).all()
    # every shipped tier is slower than its platform DRAM: never faster than measured
    for name in ("optane_pmem100_appdirect_6x", "optane_pmem200_appdirect_8x", "cxl_type3_ddr5_x8",
                 "remote_numa_ddr4"):
        df = project(recs, HOST, name, placement, threads=threads)
        assert (df["modeled_s"] >= df["measured_s"] * (1 - 1e-9)).all(), name


def test_placement_keeps_dram_classes_at_dram_speed():
    recs = sample_records()
    all_dram = {c: "dram" for c in TENSOR_CLASSES}
    s0 = project_step(recs, HOST, "optane_pmem100_appdirect_6x", all_dram)
    assert s0["ratio"] == pytest.approx(1.0)
    s_graph = project_step(recs, HOST, "optane_pmem100_appdirect_6x", {"graph": "dram"})
    s_all = project_step(recs, HOST, "optane_pmem100_appdirect_6x")
    assert 1.0 < s_graph["ratio"] < s_all["ratio"]


def test_memory_mode_hit_rate_and_limits():
    assert mm_hit_rate(0, 1) == 1.0
    assert mm_hit_rate(1, 1) == pytest.approx(1 - math.exp(-1))
    assert mm_hit_rate(100, 1) == pytest.approx(0.01, rel=0.01)
    hs = [mm_hit_rate(f, 10) for f in (1, 5, 10, 50, 500)]
    assert hs == sorted(hs, reverse=True)
    recs = sample_records()
    dram = project_step(recs, HOST, "ddr4_2666_6ch")
    small = project_step(recs, HOST, "optane_pmem100_memory_mode", footprint=10**6)   # << 192 GiB cache
    assert small["modeled_s"] == pytest.approx(dram["modeled_s"], rel=0.01)
    huge = project_step(recs, HOST, "optane_pmem100_memory_mode", footprint=10**6, dram_cache_bytes=10**3)
    assert huge["modeled_s"] > 3 * dram["modeled_s"]
    with pytest.raises(UserError, match="footprint"):
        project_step(recs, HOST, "optane_pmem100_memory_mode")


def test_profiles_validation_names_file_line_and_field(tmp_path, monkeypatch):
    bad = tmp_path / "mine.yaml"
    bad.write_text("device_profiles:\n  - name: slowmem\n    kind: cxl\n    read_bw_GBps: -3\n"
                   "    write_bw_GBps: 1\n    read_latency_ns: 1\n    write_latency_ns: 1\n")
    with pytest.raises(UserError, match=r"mine\.yaml:2 \(slowmem\): field 'read_bw_GBps'"):
        load_profiles([bad])
    good = tmp_path / "good.yaml"
    good.write_text("device_profiles:\n  - name: slowmem\n    kind: cxl\n    read_bw_GBps: 3\n"
                    "    write_bw_GBps: 1\n    read_latency_ns: 400\n    write_latency_ns: 400\n")
    monkeypatch.setenv("GNNREC_LAB_DEVICES", str(good))
    assert load_profiles()["slowmem"].read_bw_GBps == 3
    missing = tmp_path / "m.yaml"
    missing.write_text("device_profiles:\n  - name: x\n    kind: dram\n")
    with pytest.raises(UserError, match="m.yaml:2 \\(x\\): field 'read_bw_GBps' is required"):
        load_profiles([missing])
    with pytest.raises(UserError, match="unknown profile 'nope'"):
        get_profile("nope")
    with pytest.raises(UserError, match="gather64_GBps"):
        host_device({"triad_GBps": 1, "latency_ns": 1})


def test_an_edited_profile_file_is_read_again_and_loads_do_not_share_profiles(tmp_path):
    """Parsed files are kept by path and text: an edit is seen on the next load, and a profile
    one caller changes is not the one the next caller gets."""
    f = tmp_path / "mine.yaml"
    body = "device_profiles:\n  - name: slowmem\n    kind: cxl\n    read_bw_GBps: {}\n" \
           "    write_bw_GBps: 1\n    read_latency_ns: 400\n    write_latency_ns: 400\n"
    f.write_text(body.format(3))
    first = load_profiles([f])["slowmem"]
    assert first.read_bw_GBps == 3
    first.read_bw_GBps = 99
    first.random_read_GBps[64] = 99
    again = load_profiles([f])["slowmem"]
    assert again.read_bw_GBps == 3 and 64 not in again.random_read_GBps
    f.write_text(body.format(5))                      # same size, maybe the same mtime: the text decides
    assert load_profiles([f])["slowmem"].read_bw_GBps == 5
    shipped = load_profiles()["optane_pmem100_appdirect_6x"]
    shipped.mixed["points"][0.5] = 1.0
    assert load_profiles()["optane_pmem100_appdirect_6x"].mixed["points"][0.5] == pytest.approx(6.90)


def _modeled_unlabelled(obj, labelled=False):
    """Paths of numbers under keys naming 'modeled' that have no kind='modeled' above them."""
    bad = []
    if isinstance(obj, dict):
        here = labelled or obj.get("kind") == "modeled"
        for k, v in obj.items():
            if "modeled" in str(k) and not here and not (isinstance(v, str)):
                bad.append(k)
            bad += _modeled_unlabelled(v, here)
    elif isinstance(obj, list):
        for v in obj:
            bad += _modeled_unlabelled(v, labelled)
    return bad


@pytest.fixture
def files(tmp_path):
    host = tmp_path / "host.json"
    host.write_text(json.dumps(HOST))
    recs = tmp_path / "recs.json"
    recs.write_text(json.dumps([r.__dict__ for r in sample_records()]))
    return host, recs


def test_whatif_labels_every_modeled_number(files, capsys):
    host, recs = files
    assert main(["whatif", "--records", str(recs), "--device", "optane_pmem100_appdirect_6x",
                 "--host-profile", str(host), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kernels"] and all(r["kind"] == "modeled" for r in out["kernels"])
    assert not _modeled_unlabelled(out)
    assert out["kernel_time"]["ratio"] > 1
    assert main(["whatif", "--records", str(recs), "--device", "cxl_type3_ddr5_x8",
                 "--host-profile", str(host)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    numeric = [ln for ln in lines if any(ch.isdigit() for ch in ln) and "s" in ln]
    assert numeric and all("modeled" in ln for ln in numeric)


def test_whatif_user_errors_are_one_line(files, capsys):
    host, recs = files
    assert main(["whatif", "--records", str(recs), "--device", "nope", "--host-profile", str(host)]) == 2
    assert "unknown profile" in capsys.readouterr().err
    assert main(["whatif", "--records", str(recs), "--device", "optane_pmem100_memory_mode",
                 "--host-profile", str(host)]) == 2
    assert "footprint" in capsys.readouterr().err
    assert main(["whatif", "--records", str(recs), "--device", "optane_pmem100_memory_mode",
                 "--footprint-bytes", "1000000", "--host-profile", str(host)]) == 0


def test_advise_labels_and_recommends(files, capsys):
    host, _ = files
    args = ["advise", "--dataset", "gowalla", "--model", "ngcf", "--layers", "3", "--dim", "64",
            "--counts", "n_users=29858,n_items=40981,n_train=810128", "--host-profile", str(host)]
    assert main(args + ["--dram-gb", "2", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert not _modeled_unlabelled(a)
    assert a["footprint_kind"] == "modeled" and all(m["kind"] == "modeled" for m in a["modes"].values())
    assert a["fits_in_dram"] is False
    ad = a["modes"]["optane_app_direct"]
    kept = sum(a["footprint"][c] for c in ad["keep_in_dram"])
    assert kept + a["footprint"]["runtime"] <= a["dram_bytes"]
    # it does not fit, so something goes to the device and something stays; which classes stay
    # depends on the room the measured runtime leaves (exhaustive search: lowest modeled time)
    assert ad["on_device"] and ad["keep_in_dram"]
    assert set(ad["on_device"]).isdisjoint(ad["keep_in_dram"])
    assert ad["modeled_kernel_s"] >= a["modes"]["dram"]["modeled_kernel_s"]
    assert main(args + ["--dram-gb", "64", "--json"]) == 0
    big = json.loads(capsys.readouterr().out)
    assert big["fits_in_dram"] and big["recommended_mode"] == "dram"
    assert main(args + ["--dram-gb", "2"]) == 0
    text = capsys.readouterr().out.splitlines()
    rows = [ln for ln in text if "GiB" in ln or ln.strip().startswith(("dram ", "optane", "cxl", "remote"))]
    assert rows and all("modeled" in ln for ln in rows)


@pytest.mark.slow
def test_whatif_on_a_stored_run_uses_its_footprint_for_memory_mode(capsys):
    """A real tiny run persisted through the store, projected onto Optane Memory Mode."""
    import json as _json

    from gnnrec_lab import RunConfig, run
    from gnnrec_lab.commands.cli import main
    from gnnrec_lab.runs.store import Store
    cfg = RunConfig(dataset="synth-tiny", layers=1, dim=8, batch_size=1024, epochs=1, max_steps_per_epoch=2)
    store = Store()
    rid = store.add_run(cfg)
    run(cfg, reporter=store.reporter(rid))
    capsys.readouterr()
    assert main(["whatif", str(rid), "--device", "optane_pmem100_memory_mode", "--json"]) == 0
    out = _json.loads(capsys.readouterr().out)
    text = _json.dumps(out)
    assert "modeled" in text and "hit_rate" in text


@pytest.mark.parametrize("model", ["lightgcn", "ngcf"])
def test_advise_follows_from_its_own_numbers(files, capsys, model):
    """synth-gowalla fits in 16 GiB: DRAM is recommended, not a tier at 1.00x (a float tie the old
    code broke either way); when it does not fit, the recommendation is the fastest fitting mode."""
    host, _ = files
    args = ["advise", "--dataset", "synth-gowalla", "--model", model, "--host-profile", str(host), "--json"]
    need = a = None
    for dram_gb in (16, "part"):
        if dram_gb == "part":     # room for the runtime and a part of the rest: it does not fit
            dram_gb = (a["footprint"]["runtime"] + 0.5 * (need - a["footprint"]["runtime"])) / 2**30
        assert main(args + ["--dram-gb", str(dram_gb)]) == 0
        a = json.loads(capsys.readouterr().out)
        need = a["footprint_total"]
        fitting = {m: r["modeled_kernel_s"] for m, r in a["modes"].items() if r["fits"] and r["modeled_kernel_s"]}
        best = a["recommended_mode"]
        assert fitting[best] == pytest.approx(min(fitting.values()), rel=1e-9)
        if a["fits_in_dram"]:
            assert dram_gb == 16 and best == "dram", (best, fitting)
        else:
            assert dram_gb < 16 and best != "dram" and "dram" not in fitting
        for m in ("optane_app_direct", "cxl", "remote_numa"):
            r = a["modes"][m]
            if r["ratio_to_dram"] and r["ratio_to_dram"] <= 1 + 1e-9:
                assert "as fast as dram only because" in r["note"]


def _steps(n: int, scale=None, only_even=()):
    """``n`` steps of the same two kernels (spmm 1000 ns, adam 500 ns), step ``s`` scaled by
    ``scale.get(s, 1)``; kernels named in ``only_even`` run in the even steps only."""
    scale = scale or {}
    out = []
    for s in range(1, n + 1):
        f = scale.get(s, 1.0)
        for name, phase, ns in (("spmm", "forward", 1000), ("adam", "optimizer", 500)):
            if name in only_even and s % 2:
                continue
            out.append(KernelRecord(name, phase, 0, s, int(ns * f), 800, 400, 100, "gather", 256, 600, "native"))
    return out


def test_the_base_is_the_median_step_and_a_stall_is_flagged_out_of_it():
    """Issue 51 (tiermodel.step_base): each kernel's median per step, steps over OUTLIER_FACTOR x the
    median step left out and named, a step within it kept (its spread is the run's)."""
    from gnnrec_lab.memory.tiermodel import OUTLIER_FACTOR, step_base
    assert OUTLIER_FACTOR == 3.0
    b = step_base(_steps(10, {5: 3.5, 6: 2.5, 7: 20.0}))
    assert b.rule == "median" and b.steps == 10 and b.outlier_steps == (5, 7)
    assert b.kernel_s == pytest.approx(1500e-9) and b.per == 1
    assert b.to_dict()["outlier_steps"] == 2 and b.to_dict()["kind"] == "measured"
    assert b.kernel_spread is not None and b.kernel_spread >= 0
    # a stall only the wall clock saw (outside the kernels) is flagged too; the wall base is the median
    b = step_base(_steps(6), {s: (0.01 if s != 4 else 0.05) for s in range(1, 7)})
    assert b.outlier_steps == (4,) and b.step_s == pytest.approx(0.01)
    # a kernel that ran in half the steps counts half its median
    b = step_base(_steps(6, only_even=("adam",)))
    assert b.kernel_s == pytest.approx(1250e-9)
    # totals (no step numbers): the mean over the steps given, nothing to flag
    tot = [dataclasses.replace(r, step=-1) for r in _steps(4, {2: 20.0})]
    b = step_base(tot, steps=4)
    assert b.rule == "mean" and b.outlier_steps == () and b.per == 4
    assert b.kernel_s == pytest.approx((3 * 1500 + 20 * 1500) / 4 * 1e-9)


def test_a_stalled_step_does_not_move_the_projection():
    """project_step from per-step records: one step stalled 20x changes the modeled kernel time by
    under 5% (it was 1 + 19/10 = 2.9x with each kernel's mean); the band names the step left out."""
    host = dict(HOST)
    clean = project_step(_steps(10), host, "optane_pmem100_appdirect_6x")
    stalled = project_step(_steps(10, {4: 20.0}), host, "optane_pmem100_appdirect_6x")
    assert stalled["modeled_s"] == pytest.approx(clean["modeled_s"], rel=0.05)
    assert stalled["measured_s"] == pytest.approx(clean["measured_s"], rel=0.05)
    assert stalled["base"]["outlier_steps"] == 1 and clean["base"]["outlier_steps"] == 0
    assert stalled["band"]["outlier_steps"] == 1 and stalled["band"]["base_steps"] == 10
