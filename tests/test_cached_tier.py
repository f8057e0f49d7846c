"""The real cached tier in sampled-mode training: every policy trains bit-identically to the
DRAM row store, the slow tier is really read (O_DIRECT) and counted, LRU matches the simulator,
and a cache too small for a batch is refused naming cache_size."""
import os
import types

import numpy as np
import pytest
import torch

import gnnrec_lab.training.loop as train_mod
from gnnrec_lab import RunConfig, run
from gnnrec_lab.cache import Trace, simulate
from gnnrec_lab.cache.cached_rows import CachedRows, make_cached_rows
from gnnrec_lab.cache.rows import RowStore
from gnnrec_lab.cache.slow_tier import SlowTier
from gnnrec_lab.util.errors import ConfigError

# synth-tiny (700 rows), 2 layers, fan-outs 5,5: a 32-triple batch touches up to ~590 rows, so a
# 90% cache (630 rows) holds one batch and still has to evict
BASE = RunConfig(dataset="synth-tiny", dim=16, layers=2, fanouts=(5, 5), batch_size=32, epochs=2, lr=5e-3,
                 patience=0, mode="sampled", max_steps_per_epoch=12, eval_users=100)
CACHE = "90%"


def _run(monkeypatch, config, policy_override=None, spy=None):
    """Train ``config``; return (result, final model embedding, the row store)."""
    got = {}
    real = train_mod.make_row_store

    def make(cfg, model, degrees):
        got["model"] = model
        store = make_cached_rows(cfg, model, degrees, policy=policy_override) if policy_override \
            else real(cfg, model, degrees)
        got["store"] = store
        if spy is not None:
            spy(store)
        return store

    monkeypatch.setattr(train_mod, "make_row_store", make)
    r = run(config)
    return r, got["model"].embedding.detach().clone(), got["store"]


@pytest.fixture(scope="module")
def dram_run():
    mp = pytest.MonkeyPatch()
    try:
        yield _run(mp, BASE)
    finally:
        mp.undo()


@pytest.mark.parametrize("policy,lookahead", [("lru", 200), ("lfu", 200), ("static", 200), ("oracle", 200),
                                              ("oracle", 2), ("none", 200)])
def test_every_policy_trains_bit_identically_to_dram(dram_run, monkeypatch, policy, lookahead):
    r0, e0, _ = dram_run
    cfg = BASE.replace(cache_policy="stream" if policy == "none" else policy, cache_size=CACHE, lookahead=lookahead)
    r, e, store = _run(monkeypatch, cfg)
    assert isinstance(store, CachedRows) and store.policy == policy
    assert isinstance(store, RowStore) and isinstance(dram_run[2], RowStore)   # one interface for both
    s = r.info["sampled"]["row_store"]
    # bit-identical final embeddings; a failure says how (a few rows off by an update points at the
    # slow tier's I/O, every row off by ulps at a floating-point order) - it was seen once, not reproduced
    assert torch.equal(e, e0), (f"{int((e != e0).any(1).sum())} of {len(e)} rows differ, max |diff| "
                                f"{float((e - e0).abs().max()):.3g}, io {s['io_mode']}/{s.get('io_engine')}")
    assert r.test == r0.test and r.best_valid == r0.best_valid
    assert s["kind"] == "measured" and s["io_mode"] in ("O_DIRECT", "buffered+fadvise")
    assert s["hits"] + s["misses"] == s["accesses"] > 0
    assert s["batches"] == r.steps
    # every row read is one record from the slow tier; the sync refresh is counted apart. Only the
    # oracle reads rows it then does not use (prefetched for batches the epoch cap cut off)
    assert s["bytes_read"] == s["rows_read"] * s["record_bytes"]
    assert s["rows_read"] == s["misses"] + (s["prefetch_wasted_rows"] if policy == "oracle" else 0) \
        or (policy == "oracle" and s["rows_read"] >= s["misses"])
    assert s["sync_bytes_read"] == 2 * 700 * s["record_bytes"]
    assert s["record_bytes"] % 512 == 0 and s["record_payload_bytes"] == 3 * 16 * 4
    assert s["fetch_seconds"] >= s["stall_seconds"] >= 0
    names = {k["name"] for k in r.kernels}
    assert {"row_fetch", "row_writeback", "sparse_adam"} <= names
    fetched = sum(k["bytes_read"] for k in r.kernels if k["name"] == "row_fetch")
    # the oracle's reads are recorded with the next fetch; ones after the last fetch are not in a step
    assert fetched == s["bytes_read"] if policy != "oracle" else 0 < fetched <= s["bytes_read"]
    if policy == "none":
        assert s["hits"] == 0 and s["evictions"] == s["misses"]
    else:
        assert s["hit_rate"] > 0.3
    if policy == "oracle":
        assert s["prefetched_rows"] > 0 and s["mean_window_batches"] > 0
        # the window is full whatever the thread timing: min(L, 64 sampled ahead, batches left) at
        # each of the 24 steps (the second epoch's windows stop at its end, the run's), so it
        # covers L=2, not L=200
        assert s["mean_window_batches"] == sum(min(lookahead, 64, 23 - i) for i in range(24)) / 24
        assert (s["eager_evictions"] > 0) == (lookahead == 2)
    if policy == "static":
        assert 0 < s["pinned_rows"] < s["capacity_rows"]


def test_static_policy_ranks_rows_by_the_training_graphs_degrees(monkeypatch):
    """The static store takes the degrees of the graph the run trained on, not a second dataset load."""
    import gnnrec_lab.data as data
    from gnnrec_lab.cache.rows import make_row_store

    def no_load(*a, **k):
        raise AssertionError("the dataset was loaded again for the static policy's degrees")
    monkeypatch.setattr(data, "load", no_load)
    model = types.SimpleNamespace(embedding=torch.nn.Parameter(torch.zeros(700, 16)))
    degrees = (np.arange(700) * 7919) % 701                    # a permutation-like ranking, no ties
    store = make_row_store(BASE.replace(cache_policy="static", cache_size=CACHE), model, degrees)
    try:
        assert isinstance(store, CachedRows) and store.policy == "static"
        assert store.rank[np.argsort(-degrees, kind="stable")].tolist() == list(range(700))
    finally:
        store.close()


def test_lru_hits_match_the_simulator_on_the_same_trace(monkeypatch):
    batches = []

    def spy(store):
        real = store.fetch

        def fetch(b, rows):
            batches.append(rows.numpy().copy())
            return real(b, rows)
        store.fetch = fetch

    cfg = BASE.replace(cache_policy="lru", cache_size="600", epochs=1)
    r, _, _ = _run(monkeypatch, cfg, spy=spy)
    s = r.info["sampled"]["row_store"]
    sim = simulate(Trace.from_batches(batches, 700), "lru", 600, row_bytes=1)
    assert (s["hits"], s["misses"]) == (sim.hits, sim.misses)


def test_cache_smaller_than_a_batch_is_refused_naming_cache_size(monkeypatch):
    with pytest.raises(ConfigError, match=r"cache_size: .*use cache_size >= \d+"):
        _run(monkeypatch, BASE.replace(cache_policy="oracle", cache_size="50"))


def test_file_placement_holds_the_slow_tier_and_leaves_nothing(monkeypatch, tmp_path):
    cfg = BASE.replace(cache_policy="lru", cache_size=CACHE, epochs=1, max_steps_per_epoch=3,
                       placement={"embeddings": f"file:{tmp_path}"})
    r, _, _ = _run(monkeypatch, cfg)
    s = r.info["sampled"]["row_store"]
    assert str(tmp_path) in s["slow_tier"] and "placement" in s["slow_tier"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith("gnnrec-slow-tier-")]   # unlinked
    with pytest.raises(ConfigError, match="placement"):
        make_cached_rows(cfg.replace(placement={"embeddings": f"file:{tmp_path}/missing"}),
                         types.SimpleNamespace(embedding=torch.nn.Parameter(torch.zeros(700, 16))), None)


def test_slow_tier_parallel_io_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    init = rng.standard_normal((3000, 48)).astype(np.float32)
    tier = SlowTier.create(str(tmp_path / "t.bin"), init, io_threads=4)
    rows = rng.choice(3000, 700, replace=False)
    assert np.array_equal(tier.read(rows), init[rows])
    new = rng.standard_normal((700, 48)).astype(np.float32)
    tier.write(rows, new)
    init[rows] = new
    assert np.array_equal(tier.read_all(), init)               # one contiguous run, split into pieces
    assert tier.bytes_read == (700 + 3000) * tier.stride and tier.bytes_written == 700 * tier.stride
    tier.close()


@pytest.mark.parametrize("engine,direct", [("auto", True), ("threads", True), ("threads", False)])
def test_slow_tier_exchange_writes_and_reads_together(tmp_path, engine, direct):
    rng = np.random.default_rng(1)
    init = rng.standard_normal((4000, 24)).astype(np.float32)
    tier = SlowTier.create(str(tmp_path / "t.bin"), init, direct=direct, engine=engine, io_threads=3)
    assert tier.io_engine in ("aio", "threads") and (engine == "auto" or tier.io_engine == "threads")
    assert tier.merge_gap > 0                                  # reads may span unwanted rows
    w = rng.choice(4000, 900, replace=False)
    vals = rng.standard_normal((900, 24)).astype(np.float32)
    r = np.concatenate([w[:100], rng.choice(np.setdiff1d(np.arange(4000), w), 1500, replace=False)])
    rng.shuffle(r)
    got = tier.exchange(w, vals, r)                             # rows in both come back as written
    init[w] = vals
    assert np.array_equal(got, init[r])
    dst = np.zeros((3000, 24), dtype=np.float32)
    slots = rng.choice(3000, 1600, replace=False)
    assert tier.exchange(None, None, r, into=(dst, slots)) is dst
    assert np.array_equal(dst[slots], init[r])
    assert np.array_equal(tier.read_all(), init)
    # 1,600 of 4,000 rows are dense enough that merged reads need fewer calls than rows
    assert tier.read_calls < 1400 + 1600 and tier.device_bytes_read > tier.bytes_read
    assert tier.bytes_written == 900 * tier.stride and tier.write_calls <= 900
    with pytest.raises(ValueError, match="distinct"):
        tier.write(np.array([5, 5]), np.zeros((2, 24), np.float32))
    tier.close()


def test_oracle_ignores_batches_sampled_past_the_epoch_cap(tmp_path):
    tier = SlowTier.create(str(tmp_path / "t.bin"), np.zeros((100, 12), np.float32))
    store = CachedRows(tier, 60, lr=1e-2, policy="oracle", lookahead=50, epoch_steps=4)
    try:
        window = [np.array([i, i + 1]) for i in range(10)]       # batches 1..10 sampled ahead of batch 0
        store.lookahead(window)
        assert sorted(store.future) == [1, 2, 3]                  # an epoch has at most 4 steps: 0..3
    finally:
        store.close()


def test_prefer_runs_takes_whole_runs_of_consecutive_rows_first():
    from gnnrec_lab.cache.cached_rows import _prefer_runs
    rows = np.array([50, 7, 3, 8, 9, 20, 4, 100])
    assert _prefer_runs(rows, 3).tolist() == [7, 8, 9]
    assert _prefer_runs(rows, 5).tolist() == [7, 8, 9, 3, 4]
    assert sorted(_prefer_runs(rows, 8).tolist()) == sorted(rows.tolist())


def test_cached_run_leaves_a_core_to_io_and_restores_thread_counts():
    import os

    import numba
    import torch

    from gnnrec_lab import RunConfig, run
    before = torch.get_num_threads(), numba.get_num_threads()
    seen = []

    class Watch:
        def __getattr__(self, name):
            return lambda *a, **k: seen.append(torch.get_num_threads()) if name == "on_step" else None

        def should_stop(self):
            return False
    run(RunConfig(dataset="synth-tiny", model="mf", layers=0, dim=8, batch_size=128, epochs=1, mode="sampled",
                  max_steps_per_epoch=2, cache_policy="lru", cache_size="80%"), reporter=Watch())
    assert seen and set(seen) == {max(1, (os.cpu_count() or 1) - 1)}
    assert (torch.get_num_threads(), numba.get_num_threads()) == before
