"""bench kernels --antagonist: the CPU-bound processes run during the benchmark, are counted in its
header and JSON rows, and never outlive it (normal end, an error inside, the benchmark killed)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gnnrec_lab.commands.cli import main
from gnnrec_lab.training import benchmarking as bench
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.proc import pid_alive


def _wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


def _cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])   # utime + stime


def test_antagonists_spin_while_the_block_runs_and_are_gone_after_it():
    with bench.antagonists(2) as pids:
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
        before = [_cpu_ticks(p) for p in pids]
        time.sleep(0.5)
        assert all(_cpu_ticks(p) > b for p, b in zip(pids, before))   # they burn CPU
    assert _wait_gone(pids, 0.1) == []     # ended and reaped before the block returns


def test_antagonists_are_ended_when_the_block_raises():
    with pytest.raises(RuntimeError):
        with bench.antagonists(1) as pids:
            raise RuntimeError("benchmark failed")
    assert _wait_gone(pids, 0.1) == []


def test_antagonists_end_by_themselves_when_the_benchmark_is_killed():
    code = ("import sys, time; from gnnrec_lab.training import benchmarking as b\n"
            "with b.antagonists(2) as pids:\n"
            "    print(*pids, flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        pids = [int(x) for x in p.stdout.readline().split()]
        assert len(pids) == 2 and all(pid_alive(x) for x in pids)
        p.send_signal(signal.SIGKILL)        # no finally runs: the parent-death signal must end them
        p.wait(10)
        assert _wait_gone(pids) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_antagonist_count_is_bounded(capsys):
    with pytest.raises(UserError, match="--antagonist"):
        with bench.antagonists(-1):
            pass
    for bad in ("-2", "100000", "x"):
        with pytest.raises(SystemExit) as e:
            main(["bench", "kernels", "--antagonist", bad])
        assert e.value.code == 2
        assert "--antagonist" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_kernels_rows_and_header_say_how_many_antagonists_ran(capsys, monkeypatch):
    started = []
    real = bench.antagonists

    def spy(n):
        started.append(n)
        return real(n)
    monkeypatch.setattr(bench, "antagonists", spy)
    args = ["bench", "kernels", "--sizes", "small", "--dims", "4", "--kernels", "gather", "--backends", "native",
            "--repeats", "1", "--no-pyg", "--antagonist", "1"]
    assert main(args + ["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["antagonists"] == 1 and r["load_avg"] >= 0 for r in rows)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "antagonists: 1 CPU-bound process running beside every timed kernel" in out
    assert "every row measured with 1 CPU-bound antagonist process beside it" in out.split("summary")[1]
    assert started == [1, 1]


@pytest.mark.slow
def test_bench_kernels_precision_bf16_times_spmm_on_bf16_rows_beside_fp32(capsys):
    args = ["bench", "kernels", "--sizes", "small", "--dims", "16", "--kernels", "spmm", "--backends", "native",
            "--repeats", "1", "--no-pyg", "--precision", "fp32,bf16"]
    assert main(args + ["--json"]) == 0
    rows = {(r["backend"], r["phase"]): r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {(b, p) for b in ("native", bench.BF16_BACKEND) for p in ("forward", "backward")}
    for phase in ("forward", "backward"):
        f32, b16 = rows[("native", phase)], rows[(bench.BF16_BACKEND, phase)]
        assert (f32["precision"], b16["precision"]) == ("fp32", "bf16")
        assert b16["bytes"] < f32["bytes"] and b16["seconds"] > 0
    assert main(args) == 0
    assert "spmm bf16 rows: forward" in capsys.readouterr().out.split("summary")[1]
    assert main(args[:-1] + ["fp16"]) == 2
    assert "--precision: got 'fp16', allowed: fp32, bf16" in capsys.readouterr().err
    with pytest.raises(UserError, match="bf16 rows exist for spmm only"):
        bench.run_kernel_bench(sizes=("small",), dims=(4,), kernels=("gather",), precisions=("bf16",), repeats=1)
