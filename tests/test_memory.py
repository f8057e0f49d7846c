"""Footprint formulas against real objects, measured peak, topology, NUMA arguments and
file-backed (App Direct style) tensors."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import torch

from gnnrec_lab.config.places import parse_place
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.memory import footprint as fpmod
from gnnrec_lab.memory.footprint import footprint, footprint_phases, measure_peak, total
from gnnrec_lab.memory.placement import allocate, is_file_backed, numactl_args, place_array, place_tensor, probe_dax
from gnnrec_lab.memory.topology import Topology, detect, parse_cpulist, read_nodes
from gnnrec_lab.util.errors import UserError


def tiny(n_users=40, n_items=60, n=500, seed=0):
    rng = np.random.default_rng(seed)
    pairs = np.unique(np.stack([rng.integers(0, n_users, n), rng.integers(0, n_items, n)], 1), axis=0)
    return pairs, n_users, n_items


def test_graph_and_parameter_classes_match_the_real_objects():
    pairs, nu, ni = tiny()
    g = BipartiteGraph(pairs, nu, ni)
    counts = dict(n_users=nu, n_items=ni, n_train=len(pairs), n_interactions=len(pairs))
    train = footprint_phases(RunConfig(model="lightgcn", layers=2, dim=8), counts=counts, runtime_bytes=0)["train"]
    # the adjacency's row and column scales are one shared array (CSR.footprint counts it twice)
    arrays = {id(a): a.nbytes for a in (g.adj.indptr, g.adj.indices, g.adj.row_scale, g.adj.col_scale,
                                         g.user_items.indptr, g.user_items.indices, g.degree)}
    assert train["graph"] == sum(arrays.values()) + pairs.astype(np.int32).nbytes   # + the int32 splits
    from gnnrec_lab.models import build_model
    for cfg in (RunConfig(model="lightgcn", layers=2, dim=8), RunConfig(model="ngcf", layers=2, dim=8)):
        model = build_model(cfg, nu, ni)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        ph = footprint_phases(cfg, counts=counts, runtime_bytes=0)
        assert ph["train"]["embeddings"] == params == ph["train"]["gradients"]
        assert ph["eval"]["embeddings"] == 2 * params          # the best state's copy
        opt = torch.optim.Adam(model.parameters())
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        state = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if v.dim() > 0)
        assert ph["train"]["optimizer"] == state


def test_class_formulas_follow_the_configuration():
    counts = dict(n_users=1000, n_items=2000, n_train=50_000)
    edge = footprint(RunConfig(model="ngcf", ngcf_form="edge", layers=3, dim=16), counts, runtime_bytes=0)
    node = footprint(RunConfig(model="ngcf", ngcf_form="node", layers=3, dim=16), counts, runtime_bytes=0)
    # one layer's per-edge messages at a time (freed after aggregation), not all L
    assert edge["edge_intermediates"] == 4 * 2 * 50_000 * 16 and node["edge_intermediates"] == 0
    one = footprint(RunConfig(model="ngcf", ngcf_form="edge", layers=1, dim=16), counts, runtime_bytes=0)
    assert one["edge_intermediates"] == 4 * 2 * 50_000 * 16
    deep = footprint_phases(RunConfig(layers=6, dim=16), counts, runtime_bytes=0)["train"]
    shallow = footprint_phases(RunConfig(layers=2, dim=16), counts, runtime_bytes=0)["train"]
    # 4 f N d live whatever L (layer_mean saves nothing), plus (2L + 4) f N d retained by the
    # allocator (node tensors < 32 MiB): one forward output and one backward term per layer
    assert deep["activations"] - shallow["activations"] == 2 * 4 * 4 * 3000 * 16
    sgd = footprint(RunConfig(optimizer="sgd", momentum=0.0), counts, runtime_bytes=0)
    assert sgd["optimizer"] == 0
    assert set(edge) == {"graph", "embeddings", "optimizer", "gradients", "activations", "edge_intermediates",
                         "buffers", "runtime"}
    assert total(edge) == sum(edge.values())
    with pytest.raises(UserError, match="n_items"):
        footprint(RunConfig(), dict(n_users=3, n_train=5), runtime_bytes=0)


def test_peak_is_the_largest_phase_and_retention_stops_at_the_mmap_threshold():
    counts = dict(n_users=1000, n_items=2000, n_train=50_000)
    for cfg in (RunConfig(dim=16), RunConfig(model="ngcf", dim=16), RunConfig(model="mf", layers=0, dim=16)):
        ph = footprint_phases(cfg, counts, runtime_bytes=0)
        assert total(footprint(cfg, counts, runtime_bytes=0)) == max(total(p) for p in ph.values())
        assert all(v == 0 for k, v in ph["build"].items() if k not in ("graph", "runtime"))
    # since the graph-build transients were cut (20 B per interaction), the epoch's BPR arrays
    # (24 B) alone outweigh them: building the graph is never the peak now
    dense = dict(n_users=100, n_items=100, n_train=9_000)
    ph = footprint_phases(RunConfig(dim=1, batch_size=64), dense, runtime_bytes=0)
    assert total(ph["build"]) < total(ph["train"])
    # node tensors of 32 MiB or more get their own huge-page mapping: not glibc's heap, but up to
    # kernels.buffers.POOL_MAX released mappings are kept for reuse
    from gnnrec_lab.kernels.buffers import POOL_MAX
    big = dict(n_users=300_000, n_items=300_000, n_train=1_000_000)          # f N d = 146 MiB at d 64
    small = dict(n_users=30_000, n_items=30_000, n_train=1_000_000)          # 14.6 MiB
    L = 3
    # (600k nodes: the split carries a locality order, the layer mean holds one node tensor more)
    big_activations = footprint_phases(RunConfig(), big, runtime_bytes=0)["train"]["activations"]
    assert big_activations == (5 + POOL_MAX) * 4 * 600_000 * 64
    activations = footprint_phases(RunConfig(), small, runtime_bytes=0)["train"]["activations"]
    assert activations == (4 + (2 * L + 4)) * 4 * 60_000 * 64


@pytest.mark.slow
def test_runtime_baseline_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = fpmod.runtime_baseline_bytes()
    assert 50 * 2**20 < first < 4 * 2**30      # an interpreter with torch loaded
    assert (tmp_path / "gnnrec-lab" / "runtime_rss.json").exists()
    monkeypatch.setattr(fpmod.subprocess, "run", lambda *a, **k: pytest.fail("re-measured despite the cache"))
    assert fpmod.runtime_baseline_bytes() == first


def test_runtime_baseline_cache_is_per_environment(tmp_path, monkeypatch):
    """Two environments with the same package versions may differ by 100+ MiB: a value cached by
    one must not be handed to the other."""
    import json
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    class Done:
        returncode, stderr = 0, ""

        def __init__(self, rss):
            self.stdout = f"{rss}\n"

    def fake_run(*a, **k):
        calls.append(1)
        return Done(100 << 20 if fpmod.sys.prefix == "/env/a" else 200 << 20)
    monkeypatch.setattr(fpmod.subprocess, "run", fake_run)
    monkeypatch.setattr(fpmod.sys, "prefix", "/env/a")
    assert fpmod.runtime_baseline_bytes() == 100 << 20
    monkeypatch.setattr(fpmod.sys, "prefix", "/env/b")
    assert fpmod.runtime_baseline_bytes() == 200 << 20
    monkeypatch.setattr(fpmod.sys, "prefix", "/env/a")
    assert fpmod.runtime_baseline_bytes() == 100 << 20      # from the cache: no third measurement
    assert len(calls) == 4 and len(json.loads((tmp_path / "gnnrec-lab" / "runtime_rss.json").read_text())) == 2


def test_runtime_baseline_is_remeasured_for_an_environment_made_again_at_the_same_path(tmp_path, monkeypatch):
    """A fresh clone's `make` at the path of an older checkout builds a new environment there:
    the older environment's cached baseline must not be read for it."""
    import os
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = tmp_path / "venv"
    env.mkdir()
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    os.utime(env / "pyvenv.cfg", ns=(1, 1_000_000_000))
    values = iter([100 << 20, 100 << 20, 300 << 20, 300 << 20])

    class Done:
        returncode, stderr = 0, ""

        def __init__(self):
            self.stdout = f"{next(values)}\n"
    monkeypatch.setattr(fpmod.subprocess, "run", lambda *a, **k: Done())
    monkeypatch.setattr(fpmod.sys, "prefix", str(env))
    assert fpmod.runtime_baseline_bytes() == 100 << 20
    assert fpmod.runtime_baseline_bytes() == 100 << 20                  # cached
    os.utime(env / "pyvenv.cfg", ns=(2, 2_000_000_000))                 # made again
    assert fpmod.runtime_baseline_bytes() == 300 << 20


def test_footprint_adds_kernel_compilation_only_when_the_run_will_compile(monkeypatch):
    """Measured: a fresh environment's first run compiles the kernels and peaks 141 MiB higher
    than the next (which loads numba's disk cache); without the term it was predicted 22% low."""
    from gnnrec_lab import kernels
    monkeypatch.setattr(fpmod, "runtime_baseline_bytes", lambda refresh=False: 500 << 20)
    cfg = RunConfig(dataset="ml-100k")
    counts = dict(n_users=943, n_items=1682, n_train=80_000)
    monkeypatch.setattr(kernels, "uncached_kernels", lambda: [])
    assert footprint(cfg, counts=counts)["runtime"] == 500 << 20
    monkeypatch.setattr(kernels, "uncached_kernels", lambda: ["spmm"])
    assert footprint(cfg, counts=counts)["runtime"] == (500 << 20) + fpmod.JIT_COMPILE_BYTES
    assert footprint(cfg, counts=counts, runtime_bytes=0)["runtime"] == 0   # the caller's value wins


def test_measure_peak_reports_measured_bytes():
    m = measure_peak()
    assert m["kind"] == "measured" and m["peak_rss_bytes"] >= m["rss_bytes"] * 0.9 > 0
    before = m["peak_rss_bytes"]
    block = np.ones(64 * 2**20 // 8)          # 64 MiB touched
    assert measure_peak()["peak_rss_bytes"] >= before and block.sum() > 0


def _fake_sysfs(root):
    for nid, cpus, kb in ((0, "0-3", 8 * 2**20), (1, "", 64 * 2**20)):
        d = root / f"node{nid}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {nid} MemTotal:       {kb} kB\nNode {nid} MemFree: 1 kB\n")
        (d / "distance").write_text("10 20\n" if nid == 0 else "20 10\n")
    return root


def test_topology_reads_sysfs_and_flags_cpu_less_nodes(tmp_path):
    assert parse_cpulist("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]
    nodes = read_nodes(str(_fake_sysfs(tmp_path)))
    assert [n.id for n in nodes] == [0, 1]
    assert nodes[0].cpus == [0, 1, 2, 3] and not nodes[0].cpu_less
    assert nodes[1].cpu_less and nodes[1].mem_total_bytes == 64 * 2**30
    assert nodes[1].distances == [20, 10]
    real = detect()
    assert real.nodes and real.nodes[0].cpus           # this machine has at least node 0 with CPUs
    for tool in ("ndctl", "daxctl", "ipmctl"):
        assert set(real.tools[tool]) & {"absent", "devices", "error"}
    assert real.to_dict()["nodes"][0]["id"] == real.nodes[0].id


def test_numactl_args_and_clear_errors(tmp_path, monkeypatch):
    topo = Topology(read_nodes(str(_fake_sysfs(tmp_path))), {})
    assert numactl_args({"embeddings": "dram"}, topo) == []
    assert numactl_args({"embeddings": "numa:membind:1", "optimizer": "numa:membind:1"}, topo,
                        numactl="/usr/bin/numactl") == ["/usr/bin/numactl", "--membind=1"]
    assert numactl_args({"graph": "numa:interleave:0-1"}, topo, numactl="numactl")[1] == "--interleave=0,1"
    with pytest.raises(UserError, match="NUMA node 7 does not exist"):
        numactl_args({"embeddings": "numa:membind:7"}, topo, numactl="numactl")
    with pytest.raises(UserError, match="whole worker"):
        numactl_args({"embeddings": "numa:membind:1", "graph": "numa:preferred:0"}, topo, numactl="numactl")
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(UserError, match="numactl"):
        numactl_args({"embeddings": "numa:membind:1"}, topo)
    for bad in ("numa:bind:1", "numa:membind:", "file:", "pmem"):
        with pytest.raises(UserError, match="placement"):
            parse_place(bad, "embeddings")
    assert str(parse_place("numa:preferred:1")) == "numa:preferred:1"


def _ops(emb, w, idx):
    """A few torch ops a training step does: gather, GEMM, scatter-add, in-place update."""
    out = emb[idx] @ w
    g = torch.zeros_like(emb).index_add_(0, idx, out @ w.T)
    emb.sub_(0.1 * g)
    return out, emb.clone()


@pytest.mark.parametrize("where", ["/dev/shm", "tmp"])
def test_file_backed_tensors_are_bit_identical_to_dram(where, tmp_path):
    d = str(tmp_path) if where == "tmp" else where
    if not os.path.isdir(d):
        pytest.skip(f"{d} does not exist here")
    before = set(os.listdir(d))
    torch.manual_seed(0)
    src = torch.randn(300, 16)
    w = torch.randn(16, 16)
    idx = torch.randint(0, 300, (500,))
    ram = place_tensor(src.clone(), "dram", "embeddings")
    fil = place_tensor(src.clone(), f"file:{d}", "embeddings")
    assert is_file_backed(fil) and not is_file_backed(ram)
    for _ in range(3):
        a, b = _ops(ram, w, idx), _ops(fil, w, idx)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    z = allocate((7, 3), torch.float32, f"file:{d}", "optimizer")
    assert z.dtype == torch.float32 and z.shape == (7, 3) and is_file_backed(z) and float(z.abs().sum()) == 0
    arr = place_array(np.arange(10, dtype=np.int64), f"file:{d}", "graph")
    assert arr.dtype == np.int64 and int(arr.sum()) == 45 and is_file_backed(arr)
    assert set(os.listdir(d)) == before          # files are unlinked once mapped: nothing left behind
    with pytest.raises(UserError, match="no such directory"):
        allocate((2,), torch.float32, f"file:{tempfile.gettempdir()}/does-not-exist-gnnrec", "x")


def test_probe_dax_says_no_on_tmpfs_and_disk(tmp_path):
    for d in ("/dev/shm", str(tmp_path)):
        if os.path.isdir(d):
            r = probe_dax(d)
            assert r["dax"] is False and "MAP_SYNC" in r["reason"] and r["fs_type"]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".gnnrec-dax")]


def test_bf16_rows_shrink_the_propagated_tensors_and_the_advised_kernels_rows():
    """precision bf16: the layers and the gathered rows count 2 bytes an element, the embeddings,
    gradients and optimizer state stay float32; advise's step kernels gather half the bytes."""
    from gnnrec_lab.memory.advise import step_kernels
    counts = dict(n_users=1000, n_items=2000, n_train=50_000)
    n, d = 3000, 16
    for model in ("lightgcn", "ngcf"):
        f32 = footprint_phases(RunConfig(model=model, dim=d), counts, runtime_bytes=0)["train"]
        b16 = footprint_phases(RunConfig(model=model, dim=d, precision="bf16"), counts, runtime_bytes=0)["train"]
        for cls in ("embeddings", "gradients", "optimizer"):
            assert b16[cls] == f32[cls]
        if model == "lightgcn":   # live: 4 f N d -> 3 f N d + 2 N d; retained: 2L of the (2L + 4) at 2 bytes (L = 3)
            assert f32["activations"] - b16["activations"] == (1 + 2 * 3) * (4 - 2) * n * d
        k32 = {(k["name"], k["phase"], k["layer"]): k for k in step_kernels(RunConfig(model=model, dim=d), counts)}
        k16 = {(k["name"], k["phase"], k["layer"]): k
               for k in step_kernels(RunConfig(model=model, dim=d, precision="bf16"), counts)}
        for key, k in k32.items():
            if key[0] == "spmm":
                assert k16[key]["row_bytes"] * 2 == k["row_bytes"] and k16[key]["random_bytes"] * 2 == k["random_bytes"]
        narrow = sorted(key for key in k16 if key[0] == "narrow")
        assert narrow and all(key not in k32 for key in narrow)
        if model == "lightgcn":   # narrowed once per phase: the embeddings, then the incoming gradient
            assert narrow == [("narrow", "backward", 2), ("narrow", "forward", 0)]
