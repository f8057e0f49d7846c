"""The recorder-vs-torch.profiler machinery on tiny graphs: every recorded kernel call is paired
with the profiler's event of its autograd Function, and none of the profiler's kernel events is
left over. Timing ratios are noisy and checked by benchmarks/bench_profiler_agreement.py, not here."""
import math

import pytest

from gnnrec_lab import RunConfig
from gnnrec_lab.training import profiling as P

TINY = dict(dataset="synth-tiny", dim=16, layers=2, batch_size=512, lr=5e-3)


@pytest.mark.parametrize("model", ["lightgcn", "ngcf"])
def test_agreement_table_pairs_every_recorded_kernel(model):
    steps = 2
    df = P.profiler_agreement(RunConfig(**TINY | {"model": model}), steps=steps, warmup=1)
    assert list(df.columns) == list(P.AGREEMENT_COLUMNS)
    assert df.attrs["steps"] == steps and df.attrs["step_seconds"] > 0
    # no kernel event without a record, no Function-backed record without an event
    assert not (df["kernel"] == "(unrecorded)").any(), df
    plain = df["kernel"].isin(P.PLAIN_BLOCKS)
    assert (df.loc[plain, "profiler_event"] == "(none)").all()
    paired = df[~plain]
    assert (paired["profiler_event"] != "(none)").all(), df
    assert (paired["profiler_s"] > 0).all() and (paired["ours_s"] > 0).all()
    assert paired["ratio"].map(math.isfinite).all()
    # the kernels a full-graph step records, forward and backward, and the optimizer step
    keys = set(zip(df["kernel"], df["phase"]))
    assert {("spmm", "forward"), ("spmm", "backward"), ("bpr_loss", "loss"), ("l2_reg", "loss"),
            ("adam", "optimizer"), ("bpr_sample", "sampling")} <= keys
    spmm_events = {"_LayerMean", "_LayerMeanBackward"} if model == "lightgcn" else {"_SpMM", "_SpMMBackward"}
    assert set(df.loc[df["kernel"] == "spmm", "profiler_event"]) == spmm_events
    assert (df.loc[df["kernel"] == "adam", "profiler_event"] == "Optimizer.step#Adam.step").all()
    if model == "ngcf":
        assert {("sddmm_mul", "forward"), ("spmm_edge", "backward"), ("gemm", "forward")} <= keys
    # calls are per step: 2 layers -> 2 SpMMs forward per step
    assert df.set_index(["kernel", "phase"]).loc[("spmm", "forward"), "calls"] == 2


class _Rec:
    def __init__(self, name, phase, ns=1000, layer=-1):
        self.name, self.phase, self.ns, self.layer = name, phase, ns, layer


class _Range:
    def __init__(self, start, us):
        self.start, self._us = start, us

    def elapsed_us(self):
        return self._us


class _Ev:
    def __init__(self, name, start, us):
        self.name, self.time_range = name, _Range(start, us)


def test_matching_follows_call_order_and_reports_leftovers():
    classes = {"_SpMM", "_SDDMM", "_LinComb"}
    events = [_Ev("_SDDMM", 0, 4), _Ev("_SDDMM", 10, 6), _Ev("_LinComb", 20, 2), _Ev("_SpMM", 30, 3),
              _Ev("_SpMMBackward", 40, 5), _Ev("autograd::engine::evaluate_function: _SpMMBackward", 39, 9)]
    recs = [_Rec("sddmm_mul", "forward"), _Rec("sddmm_dot", "forward"), _Rec("bpr_loss", "loss"),
            _Rec("add", "forward"), _Rec("gather", "loss")]
    pairs, left = P.match_records(recs, events, classes)
    got = [(r.name, label, sec) for r, label, sec in pairs]
    assert got[:2] == [("sddmm_mul", "_SDDMM", 4e-6), ("sddmm_dot", "_SDDMM", 6e-6)]
    assert got[2][1] is None and math.isnan(got[2][2])      # a plain timed block has no event
    assert got[3][:2] == ("add", "_LinComb")
    assert got[4][1] is None                                 # gather must match _Gather, not _SpMM
    assert sorted(left) == [("_SpMM", 3e-6), ("_SpMMBackward", 5e-6)]
    df = P.agreement_table(pairs, left)
    assert set(df.loc[df["kernel"] == "(unrecorded)", "profiler_event"]) == {"_SpMM", "_SpMMBackward"}
    assert P.agreement_verdict(df.assign(ratio=[1.05] + [0.5] * (len(df) - 1)))[0] == "met"


def test_one_layer_mean_event_is_shared_by_its_per_layer_records():
    classes = {"_LayerMean", "_Gather"}
    events = [_Ev("_LayerMean", 0, 30), _Ev("_Gather", 40, 2), _Ev("_LayerMeanBackward", 50, 60)]
    recs = [_Rec("spmm", "forward", 1000, 0), _Rec("spmm", "forward", 2000, 1), _Rec("gather", "loss", 500),
            _Rec("spmm", "backward", 3000, 1), _Rec("spmm", "backward", 3000, 0)]
    pairs, left = P.match_records(recs, events, classes)
    got = [(r.name, r.layer, label, round(sec * 1e6, 6)) for r, label, sec in pairs]
    assert got == [("spmm", 0, "_LayerMean", 10.0), ("spmm", 1, "_LayerMean", 20.0), ("gather", -1, "_Gather", 2.0),
                   ("spmm", 1, "_LayerMeanBackward", 30.0), ("spmm", 0, "_LayerMeanBackward", 30.0)]
    assert left == []


def test_fused_loss_event_is_shared_by_its_terms_and_totals_sum_phases():
    classes = {"_LayerMean", "_RowsLoss"}
    events = [_Ev("_LayerMean", 0, 30), _Ev("_RowsLoss", 40, 10), _Ev("_RowsLossBackward", 60, 4),
              _Ev("_LayerMeanBackward", 70, 40)]
    recs = [_Rec("spmm", "forward", 3000, 0), _Rec("bpr_loss", "loss", 6000), _Rec("l2_reg", "loss", 2000, 0),
            _Rec("bpr_loss", "backward", 1000), _Rec("spmm", "backward", 3000, 0),
            _Rec("l2_reg", "backward", 1000, 0)]   # the L2 gradient the loss left to the layer mean
    pairs, left = P.match_records(recs, events, classes)
    got = [(r.name, r.phase, label, round(sec * 1e6, 6)) for r, label, sec in pairs]
    assert got == [("spmm", "forward", "_LayerMean", 30.0), ("bpr_loss", "loss", "_RowsLoss", 7.5),
                   ("l2_reg", "loss", "_RowsLoss", 2.5), ("bpr_loss", "backward", "_RowsLossBackward", 4.0),
                   ("spmm", "backward", "_LayerMeanBackward", 30.0), ("l2_reg", "backward", "_LayerMeanBackward", 10.0)]
    assert left == []
    tot = P.agreement_by_kernel(P.agreement_table(pairs, left)).set_index("kernel")
    assert (tot.loc["bpr_loss", "ours_s"] == pytest.approx(7e-6)
            and tot.loc["bpr_loss", "profiler_s"] == pytest.approx(11.5e-6))
    assert tot.loc["l2_reg", "ratio"] == pytest.approx(3e-6 / 12.5e-6)


def test_step_overhead_reports_each_measured_step():
    r = P.step_overhead(RunConfig(**TINY | {"model": "lightgcn"}), steps=3, warmup=1)
    assert [len(r[k]) for k in ("step_s", "loop_s", "recorded_s", "page_faults")] == [3] * 4
    assert all(0 < rec <= s * 1.001 for rec, s in zip(r["recorded_s"], r["step_s"]))   # records lie inside the step
    assert 0 < r["inside_share"] <= 1.001 and all(f >= 0 for f in r["page_faults"])


def test_malloc_tuning_applies_unless_the_environment_sets_it():
    import os
    import subprocess
    import sys
    code = "import gnnrec_lab.kernels as k; print(k.MALLOC_TUNED)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    tuned = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert tuned.stdout.strip() == ("True" if sys.platform.startswith("linux") else "False")
    mine = subprocess.run([sys.executable, "-c", code], env=env | {"MALLOC_TRIM_THRESHOLD_": "1000000"},
                          capture_output=True, text=True, check=True)
    assert mine.stdout.strip() == "False"


# ----------------------------------------------------------------------
# torch.profiler sees the lab's kernel names
AFTER_THE_FACT = {"sample_subgraph", "row_writeback"}   # timed on the sampler's or the I/O thread


@pytest.mark.parametrize("extra", [{"model": "lightgcn"}, {"model": "ngcf"},
                                   {"model": "lightgcn", "mode": "sampled", "fanouts": (5, 5)},
                                   {"model": "lightgcn", "mode": "sampled", "fanouts": (5, 5),
                                    "cache_policy": "lru", "cache_size": "100%"}])
def test_every_recorded_kernel_is_a_named_profiler_range(extra):
    prof = P._profiler()
    win = P._run_window(RunConfig(**TINY | extra), warmup=1, steps=1, profiler=prof)
    records = [r for step in win.records for r in step]
    names = [e.name for e in prof.events() if e.name.startswith("gnnrec_lab.")]
    want = {f"gnnrec_lab.{r.name}.{r.phase}" for r in records if r.name not in AFTER_THE_FACT}
    assert want and want <= set(names), sorted(want - set(names))
    # one range per recorded call (a kernel's range is not opened twice)
    from collections import Counter
    calls = Counter(f"gnnrec_lab.{r.name}.{r.phase}" for r in records if r.name not in AFTER_THE_FACT)
    got = Counter(names)
    assert all(got[k] == n for k, n in calls.items()), (calls, got)
    assert {"gnnrec_lab.spmm.forward", "gnnrec_lab.spmm.backward"} <= set(names)
    if extra.get("mode") != "sampled":   # sampled mode updates rows with sparse_adam instead
        assert "gnnrec_lab.adam.optimizer" in names


def test_no_profiler_range_without_a_profiler():
    import contextlib

    from gnnrec_lab.util.recorder import profiler_active, profiler_range
    assert not profiler_active()
    assert isinstance(profiler_range("spmm", "forward"), contextlib.nullcontext)
    import torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert profiler_active()
        assert not isinstance(profiler_range("spmm", "forward"), contextlib.nullcontext)
    assert not profiler_active()


@pytest.mark.slow
def test_importing_the_lab_after_torch_warns_that_the_wait_policy_came_too_late():
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = "import warnings; warnings.simplefilter('error'); {}; print('ok')"
    late = subprocess.run([sys.executable, "-c", code.format("import torch; import gnnrec_lab")], env=env,
                          capture_output=True, text=True)
    assert late.returncode != 0 and "imported after torch" in late.stderr
    for first in ("import gnnrec_lab; import torch",):
        assert subprocess.run([sys.executable, "-c", code.format(first)], env=env, capture_output=True,
                              text=True).stdout.strip() == "ok"
    # a policy the user chose is theirs: no warning
    mine = subprocess.run([sys.executable, "-c", code.format("import torch; import gnnrec_lab")],
                          env=env | {"OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True, text=True)
    assert mine.stdout.strip() == "ok"


def test_scripts_and_notebooks_import_the_lab_before_torch():
    """The benchmarks and notebooks import gnnrec_lab before torch, so their OpenMP threads wait
    passively (an import sorter once moved torch first in five benchmarks, unnoticed)."""
    import ast
    import json
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    sources = {p: p.read_text() for p in (root / "benchmarks").glob("*.py")}
    sources |= {p: "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"]
                             if c["cell_type"] == "code" and not "".join(c["source"]).lstrip().startswith(("%", "!")))
                for p in (root / "notebooks").glob("*.ipynb")}
    late = []
    for path, src in sources.items():
        first = {}
        for node in ast.walk(ast.parse(src)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                top = n.split(".")[0]
                if top in ("torch", "gnnrec_lab"):
                    first[top] = min(first.get(top, node.lineno), node.lineno)
        if "torch" in first and "gnnrec_lab" in first and first["torch"] < first["gnnrec_lab"]:
            late.append(path.name)
        if "torch" in first and "gnnrec_lab" not in first and path.name != "_recbole_eval.py":
            late.append(path.name)
    assert late == []
