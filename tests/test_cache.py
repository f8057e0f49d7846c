"""Access traces, cache policies, the simulator and the ``cache`` CLI."""
import collections
import json
import types

import numpy as np
import pytest
from _graphs import power_law_graph

import gnnrec_lab.data
from gnnrec_lab.cache import (
    Trace,
    make_policy,
    mf_trace,
    next_use,
    parse_capacity,
    row_bytes,
    sampled_trace,
    simulate,
    skew,
    sweep,
)
from gnnrec_lab.cache.policies import INF, LookAheadOracle, StaticTop
from gnnrec_lab.commands import cli
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.util.errors import UserError


def skewed_graph(n_users=200, n_items=150, n_inter=2500, seed=0) -> BipartiteGraph:
    return power_law_graph(n_users, n_items, n_inter, seed, user_exp=0.7, item_exp=1.0)


def T(batches, n_rows=None):
    n_rows = n_rows or (max(max(b) for b in batches if b) + 1)
    return Trace.from_batches([np.array(b, np.int64) for b in batches], n_rows)


def random_trace(rng, n_rows=30, n_batches=60, max_batch=5, zipf=1.2):
    p = 1.0 / np.arange(1, n_rows + 1) ** zipf
    p /= p.sum()
    return Trace.from_batches([rng.choice(n_rows, rng.integers(1, max_batch + 1), p=p)
                               for _ in range(n_batches)], n_rows)


# -- traces ----------------------------------------------------------------------------------

def test_trace_dedups_within_batch_and_validates():
    t = T([[3, 1, 3], [2]], 4)
    np.testing.assert_array_equal(t.rows, [1, 3, 2])
    np.testing.assert_array_equal(t.offsets, [0, 2, 3])
    assert t.n_batches == 2 and t.n_accesses == 3 and t.max_batch_rows() == 2
    with pytest.raises(ValueError):
        Trace(np.array([5]), np.array([0, 1]), 4)
    with pytest.raises(ValueError):
        Trace(np.array([1, 2]), np.array([0, 1]), 4)


def test_next_use_one_backwards_pass():
    t = T([[0, 1], [2], [0], [1, 2]])
    nu = next_use(t)
    # accesses: b0:0,1  b1:2  b2:0  b3:1,2
    np.testing.assert_array_equal(nu, [2, 3, 3, INF, INF, INF])


def test_mf_trace_rows_are_batch_users_and_items():
    g = skewed_graph()
    t = mf_trace(g, 64, epochs=2, seed=1)
    assert t.n_rows == g.n_nodes
    assert t.n_batches == 2 * -(-g.n_train // 64)
    assert t.rows.max() < g.n_nodes
    # each batch holds at most 3 x batch_size distinct rows, users below n_users
    assert t.max_batch_rows() <= 3 * 64
    np.testing.assert_array_equal(mf_trace(g, 64, 2, 1).rows, t.rows)   # seeded


def test_sampled_trace_stats():
    g = skewed_graph()
    t = sampled_trace(g, 128, [4, 3], epochs=1, seed=0)
    assert t.stats["redundancy_factor"] > 1
    assert len(t.stats["mean_nodes_per_hop"]) == 3 and len(t.stats["mean_edges_per_hop"]) == 2
    assert t.max_batch_rows() <= g.n_nodes
    with pytest.raises(UserError, match="fanouts"):
        sampled_trace(g, 128, [], 1, 0)


def test_skew_shares():
    # row 0 takes 90 of 100 accesses in a 100-row table: top 1% (1 row) share = 0.9
    batches = [[0]] * 90 + [[k] for k in range(1, 11)]
    s = skew(T(batches, 100))
    assert s["top1pct_share"] == pytest.approx(0.9)
    assert s["top10pct_share"] == pytest.approx(0.99)   # row 0 + 9 of the 10 singletons
    assert s["rows_touched_share"] == pytest.approx(0.11)
    assert s["accesses"] == 100 and s["batches"] == 100


# -- hand-computed policies --------------------------------------------------------------------

def run(policy, t, cap, **kw):
    return simulate(t, make_policy(policy, **kw) if isinstance(policy, str) else policy, cap, row_bytes=1)


def test_hand_trace_lru_belady():
    t = T([[0, 1], [2], [0], [1], [2], [0]])
    lru = run("lru", t, 2)
    assert (lru.hits, lru.misses) == (0, 7)   # LRU thrashes on the cycle
    bel = run("belady", t, 2)
    assert (bel.hits, bel.misses) == (2, 5)   # keeps 0 for b2, 2 for b4


def test_hand_trace_lfu_vs_lru():
    t = T([[0], [0], [1], [2], [0], [1]])
    assert run("lfu", t, 2).hits == 2   # evicts once-used 1, then 2; 0 (used 3x) stays
    assert run("lru", t, 2).hits == 1   # evicts 0 at b3, so only b1 hits
    assert run("belady", t, 2).hits == 2


def test_oracle_window_and_eager_eviction():
    t = T([[0], [1], [0]])
    short = run("oracle", t, 2, lookahead=1)    # 0's next use (b2) is outside a 1-batch window
    assert short.hits == 0 and short.misses == 3
    assert short.peak_occupancy_rows == 1       # evicted right after its last use in the window
    long = run("oracle", t, 2, lookahead=2)
    assert long.hits == 1 and long.stall_rate == 0 and long.prefetch_bytes == long.misses


def test_static_pins_top_rows():
    t = T([[0, 1], [0, 2], [0, 3], [1]])
    # 3 slots: pin 0 and 1 (most frequent) + 1 staging slot for the unpinned 2 and 3
    r = simulate(t, StaticTop(), 3, row_bytes=1)
    assert (r.hits, r.misses) == (3, 4)               # first touches of 0 and 1 are cold misses
    assert r.peak_occupancy_rows == 3
    # 2 slots: pinning 0 and 1 would leave no room to stage 2 and 3, so only 0 is pinned
    r = simulate(t, StaticTop(), 2, row_bytes=1)
    assert (r.hits, r.misses) == (2, 5)
    deg = np.array([0, 0, 5, 4])
    r = simulate(t, StaticTop(deg, "degree"), 3, row_bytes=1)   # pins 2: used once
    assert r.hits == 0 and r.policy == "static-degree"


def test_none_reads_and_writes_every_access():
    t = T([[0, 1], [0]])
    r = simulate(t, "none", 10, row_bytes=8)
    assert r.hits == 0 and r.read_bytes == 24 and r.written_bytes == 24 and r.peak_occupancy_rows == 0


def test_batch_must_fit_for_resident_policies():
    t = T([[0, 1, 2]])
    for name in ("lru", "lfu", "static", "oracle", "belady"):
        with pytest.raises(UserError, match="largest batch"):
            run(name, t, 2)


# -- properties on random traces ----------------------------------------------------------------

def lru_reference(t, cap):
    """Plain-Python LRU at batch granularity (ties by order inside the batch)."""
    od, hits = collections.OrderedDict(), 0
    for b in range(t.n_batches):
        rows = t.batch(b).tolist()
        hits += sum(r in od for r in rows)
        need = len(od) + sum(r not in od for r in rows) - cap
        for r in list(od):
            if need <= 0:
                break
            if r not in rows:
                del od[r]
                need -= 1
        for r in rows:
            od[r] = True
            od.move_to_end(r)
    return hits


def belady_reference(t, cap):
    """Plain-Python farthest-next-use replacement (any tie-break gives the optimum)."""
    cache, hits = set(), 0
    for b in range(t.n_batches):
        rows = set(t.batch(b).tolist())
        hits += len(rows & cache)
        need = len(cache | rows) - cap
        if need > 0:
            def nxt(r, b=b):
                for c in range(b + 1, t.n_batches):
                    if r in set(t.batch(c).tolist()):
                        return c
                return 10**9
            victims = sorted(cache - rows, key=nxt, reverse=True)[:need]
            cache -= set(victims)
        cache |= rows
    return hits


@pytest.mark.parametrize("seed", range(12))
def test_kernels_match_references_and_belady_is_the_ceiling(seed):
    rng = np.random.default_rng(seed)
    t = random_trace(rng)
    nu = next_use(t)
    for cap in (5, 8, 15):
        res = {p: simulate(t, p, cap, 4, nu) for p in ("none", "lru", "lfu", "static", "belady")}
        for la in (1, 3, 10, None):
            res[f"oracle{la}"] = simulate(t, LookAheadOracle(la), cap, 4, nu)
        assert res["lru"].hits == lru_reference(t, cap)
        assert res["belady"].hits == belady_reference(t, cap)
        for name, r in res.items():
            assert r.hits <= res["belady"].hits, name
            assert r.hits + r.misses == t.n_accesses, name
            # every fetched row is dirtied and written back exactly once (eviction or final flush)
            assert r.written_bytes == r.read_bytes, name
            assert r.peak_occupancy_rows <= cap, name
        assert res["oracleNone"].hits == res["belady"].hits   # infinite window = Belady
        assert res["oracle1"].hits <= res["oracleNone"].hits


def test_oracle_with_window_covering_the_trace_equals_belady():
    t = random_trace(np.random.default_rng(99), n_rows=50, n_batches=200, max_batch=8)
    for cap in (8, 20, 40):
        assert run("oracle", t, cap, lookahead=t.n_batches).hits == run("belady", t, cap).hits


def test_unlimited_capacity_only_cold_misses():
    t = random_trace(np.random.default_rng(3))
    distinct = np.unique(t.rows).size
    for name in ("lru", "lfu", "belady"):
        assert run(name, t, t.n_rows).misses == distinct


# -- capacity parsing, sweeps ----------------------------------------------------------------------

def test_parse_capacity():
    assert parse_capacity("5%", 1000) == 50
    assert parse_capacity("0.5%", 1000) == 5
    assert parse_capacity("1234", 10) == 1234
    assert parse_capacity(7, 10) == 7
    for bad in ("-5", "5x", "", "150%", "1.5", "%"):
        with pytest.raises(UserError, match="cache-size"):
            parse_capacity(bad, 1000)


def test_row_bytes():
    assert row_bytes(64) == 256 and row_bytes(64, "adam") == 768
    with pytest.raises(UserError, match="optimizer"):
        row_bytes(64, "rmsprop")


def test_one_policy_list_names_every_policy_and_derives_the_tier_and_run_sets():
    from gnnrec_lab.cache.policies import POLICIES, Policy
    from gnnrec_lab.config.run import CACHE_POLICIES, SIMULATED_CACHE_POLICIES, TIER_CACHE_POLICIES

    def subclasses(c):
        return [s for k in c.__subclasses__() for s in [k, *subclasses(k)]]
    assert {c.name for c in subclasses(Policy)} == set(SIMULATED_CACHE_POLICIES)   # no policy left unlisted
    assert tuple(POLICIES) == SIMULATED_CACHE_POLICIES
    # the real tier runs every policy but the offline Belady; a run names the tier's "none" stream
    assert TIER_CACHE_POLICIES == ("none", "lru", "lfu", "static", "oracle")
    assert CACHE_POLICIES == ("none", "stream", "lru", "lfu", "static", "oracle")


def test_sweep_frame():
    t = random_trace(np.random.default_rng(5), max_batch=4)
    df = sweep(t, ["10%", 10, 20], lookaheads=[2, 5], row_bytes=4)
    # 3 capacities x (5 policies + 2 oracle windows)
    assert len(df) == 3 * 7
    small = df[df.capacity_rows == 3]
    assert small[small.policy == "lru"].note.str.contains("largest batch").all()
    big = df[(df.capacity_rows == 20) & df.note.eq("")]
    assert big.hit_rate.notna().all() and set(big.policy) >= {"lru", "belady", "oracle(L=5)"}


# -- CLI ------------------------------------------------------------------------------------------

@pytest.fixture
def fake_data(monkeypatch):
    g = skewed_graph()
    ui = g.user_items
    train = np.stack([ui.row_ids(), ui.indices], 1).astype(np.int32)

    def load(name, seed=0, **kw):
        if name != "fake":
            raise UserError(f"unknown dataset {name!r}")
        return types.SimpleNamespace(n_users=g.n_users, n_items=g.n_items, train=train)

    monkeypatch.setattr(gnnrec_lab.data, "load", load, raising=False)
    return g


def test_cli_sim_json(fake_data, capsys):
    rc = cli.main(["cache", "sim", "--dataset", "fake", "--cache-size", "40%", "--lookahead", "5",
                   "--batch-size", "32", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    pols = [r["policy"] for r in out["results"]]
    assert pols == ["none", "lru", "lfu", "static-degree", "oracle(L=5)", "belady"]
    assert all(r["note"] == "" for r in out["results"])
    hit = {r["policy"]: r["hit_rate"] for r in out["results"]}
    assert all(hit[p] <= hit["belady"] for p in hit)
    assert out["trace"]["capacity_rows"] == int(0.4 * fake_data.n_nodes)


def test_cli_and_cache_page_run_one_study(fake_data, capsys):
    """``cache sim`` and the Cache page's simulation run the same pipeline, named in the same words
    (``--trace sampled``): equal results."""
    from gnnrec_lab.dashboard.cache import SimRequest, run_simulation
    assert cli.main(["cache", "sim", "--dataset", "fake", "--trace", "sampled", "--fanouts", "3,3",
                     "--cache-size", "80%", "--lookahead", "4", "--batch-size", "16", "--json"]) == 0
    cli_rows = json.loads(capsys.readouterr().out)["results"]
    page = run_simulation(SimRequest(dataset="fake", trace="sampled", batch_size=16, fanouts=(3, 3),
                                     cache_sizes=("80%",), lookaheads=(4,)), lambda name: fake_data)
    assert page.error is None and page.trace_info["batches"] > 1 and not any(r["note"] for r in cli_rows)
    cols = ["policy", "capacity_rows", "hits", "misses", "read_bytes", "written_bytes", "peak_occupancy_rows"]
    assert [{k: r[k] for k in cols} for r in cli_rows] == page.frame[cols].to_dict("records")


def test_cli_sim_table_and_small_cache_note(fake_data, capsys):
    rc = cli.main(["cache", "sim", "--dataset", "fake", "--cache-size", "10", "--batch-size", "64",
                   "--policies", "lru,static"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "modeled" in out and "static-degree" in out and "note: lru: cache-size" in out


def test_cli_skew(fake_data, capsys):
    assert cli.main(["cache", "skew", "--dataset", "fake", "--model", "lightgcn", "--fanouts", "3,2",
                     "--batch-size", "128"]) == 0
    out = capsys.readouterr().out
    assert "top1pct_share" in out and "redundancy_factor" in out


@pytest.mark.parametrize("argv,needle", [
    (["--cache-size", "5x"], "cache-size"),
    (["--cache-size", "-3"], "cache-size"),
    (["--cache-size", "101%"], "cache-size"),
    (["--lookahead", "0"], "--lookahead"),
    (["--batch-size", "abc"], "--batch-size"),
    (["--policies", "lru,fifo"], "--policies"),
    (["--model", "gcn"], "--model"),
    (["--trace", "sampled", "--model", "mf"], "--trace"),
    (["--trace", "mf", "--fanouts", "3,3"], "--fanouts"),
    (["--model", "lightgcn", "--fanouts", "10,x"], "--fanouts"),
    (["--model", "lightgcn", "--fanouts", "10,10", "--layers", "3"], "--layers"),
    (["--optimizer", "rmsprop"], "--optimizer"),
])
def test_cli_bad_input_exit_2_one_line(fake_data, capsys, argv, needle):
    try:
        rc = cli.main(["cache", "sim", "--dataset", "fake"] + argv)
    except SystemExit as e:   # refused by the option's bounded parser, inside argparse
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("gnnrec-lab: error:") and needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_unknown_dataset(fake_data, capsys):
    assert cli.main(["cache", "skew", "--dataset", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


# -- real cached tier ------------------------------------------------------------------------------

@pytest.mark.parametrize("cap,la", [(5, 1), (8, 3), (12, None)])
def test_cached_tier_bit_identical_and_matches_simulator(tmp_path, cap, la):
    from gnnrec_lab.cache.oracle_table import OracleCachedTable
    from gnnrec_lab.cache.slow_tier import SlowTier
    rng = np.random.default_rng(cap)
    t = random_trace(rng, n_rows=40, n_batches=50, max_batch=5)
    init = rng.standard_normal((40, 7)).astype(np.float32)
    tier = SlowTier.create(str(tmp_path / "emb.bin"), init)
    table = OracleCachedTable(tier, cap, t, la)
    ref = init.copy()
    for b in range(t.n_batches):
        rows = t.batch(b)
        upd = np.float32(0.01 * (b + 1)) * np.arange(7, dtype=np.float32)
        ref[rows] = ref[rows] * np.float32(0.9) - upd
        idx = table.fetch(b)
        table.data[idx] = table.data[idx] * np.float32(0.9) - upd
        table.release(b)
    table.flush()
    assert tier.bytes_read == table.misses * tier.stride and tier.io_mode in ("O_DIRECT", "buffered+fadvise")
    assert tier.bytes_written == (table.evictions) * tier.stride and table.evictions == table.misses
    got = tier.read_all()
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))   # bit-identical
    sim = simulate(t, LookAheadOracle(la), cap, row_bytes=1)
    assert (table.hits, table.misses) == (sim.hits, sim.misses)
    tier.close()


def test_cli_and_cache_page_offer_the_simulators_optimizers(fake_data, capsys):
    """One list: `cache sim` and the Cache page accept every optimizer row_bytes sizes (adagrad too)."""
    from gnnrec_lab.cache.request import SIM_CONSTRAINTS
    from gnnrec_lab.cache.simulate import row_bytes
    from gnnrec_lab.config.run import OPTIMIZER_STATES
    assert SIM_CONSTRAINTS["optimizer"][0].values == tuple(OPTIMIZER_STATES)
    assert "adagrad" in OPTIMIZER_STATES and row_bytes(8, "adagrad") == 8 * 4 * 2
    assert cli.main(["cache", "sim", "--dataset", "fake", "--optimizer", "adagrad", "--dim", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["row_bytes"] == 8 * 4 * 2
