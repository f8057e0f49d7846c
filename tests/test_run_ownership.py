"""Runs as things a user owns: names (RunConfig, `runs rename`) and `runs delete`, which removes that
run's rows and files and nothing else."""
from __future__ import annotations

import hashlib
import io

import pytest

from gnnrec_lab.config.run import RUN_NAME_MAX, RunConfig
from gnnrec_lab.runs.store import Store
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.recorder import KernelRecord
from gnnrec_lab.util.status import RunStatus
from tests._cli import run_cli

BAD_NAMES = [("", "empty"), ("   ", "only spaces"), ("x" * (RUN_NAME_MAX + 1), "characters"),
             ("a\nb", "control character"), ("bell\x07", "control character"), ("red\x1b[31m", "control character")]


def _filled_run(s: Store, name: str, status=RunStatus.FINISHED) -> int:
    """A run with a row in every per-run table and a log directory."""
    cfg = RunConfig(dataset="ml-100k", layers=2, dim=16, name=name)
    rid = s.add_run(cfg)
    r = s.reporter(rid)
    r.on_start(cfg, {"host": {"hostname": "h"}, "footprint": {"graph": 100, "embeddings": 200}})
    for step in range(3):
        r.on_step(step, 0, 0.7 - step / 10, 0.01, [KernelRecord("spmm", "forward", 0, step, 100 + step, 10, 20, 30,
                                                                "gather", 64, 5, "native")])
    r.on_epoch(0, 0.03, 3, 0.65)
    r.on_eval(0, 3, "valid", {"recall@20": 0.2}, 1.5)
    r.on_event("note", f"run {name}")
    d = s.run_dir(rid)
    (d / "stdout.log").write_text(f"out of {name}\n")
    (d / "stderr.log").write_text(f"err of {name}\n")
    s.set_status(rid, RunStatus.RUNNING)
    if status is not RunStatus.RUNNING:
        s.set_status(rid, status)
    return rid


def _rows(s: Store, rid: int) -> dict:
    """Every row the store holds for run ``rid``, table by table, in rowid order."""
    out = {"runs": s._query("SELECT * FROM runs WHERE id=?", (rid,))}
    for t in Store.RUN_TABLES:
        out[t] = s._query(f"SELECT * FROM {t} WHERE run_id=? ORDER BY rowid", (rid,))
    return out


def _files(s: Store, rid: int) -> dict:
    d = s.home / "runs" / str(rid)
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_run_config_name_refuses_bad_names_naming_the_field():
    assert RunConfig(name="my run · 2").name == "my run · 2"
    assert RunConfig(name="").name == ""   # no name, as the form's empty box
    for bad, words in BAD_NAMES[1:]:
        with pytest.raises(ConfigError) as e:
            RunConfig(name=bad)
        assert e.value.param == "name" and words in str(e.value)


def test_rename_sets_the_name_and_the_stored_config(tmp_path):
    s = Store(tmp_path)
    a, b = _filled_run(s, "a"), _filled_run(s, "b")
    before_b = _rows(s, b)
    assert s.rename_run(a, "baseline, 3 layers") == "baseline, 3 layers"
    run = s.get_run(a)
    assert run["name"] == "baseline, 3 layers" and run["config"]["name"] == "baseline, 3 layers"
    assert s.run_ids(name="baseline, 3 layers") == [a]
    assert s.runs_frame().set_index("id").loc[a, "name"] == "baseline, 3 layers"
    assert _rows(s, b) == before_b
    for bad, words in BAD_NAMES:
        with pytest.raises(ConfigError) as e:
            s.rename_run(a, bad)
        assert e.value.param == "name" and words in str(e.value)
    assert s.get_run(a)["name"] == "baseline, 3 layers"   # a refused name changes nothing
    with pytest.raises(UserError, match="run 99: no such run"):
        s.rename_run(99, "x")


def test_delete_removes_that_run_only(tmp_path):
    s = Store(tmp_path)
    ids = [_filled_run(s, n) for n in ("a", "b", "c")]
    victim, others = ids[1], [ids[0], ids[2]]
    rows_before = {r: _rows(s, r) for r in others}
    files_before = {r: _files(s, r) for r in others}
    assert all(rows_before[r][t] for r in others for t in rows_before[r])   # every table has rows to keep
    gone = s.delete_run(victim)
    assert gone["runs"] == 1 and gone["steps"] == 3 and gone["kernel_steps"] == 3 and gone["evals"] == 1
    assert not (s.home / "runs" / str(victim)).exists()
    assert all(not rows for rows in _rows(s, victim).values())
    for r in others:   # byte-identical rows and files
        assert _rows(s, r) == rows_before[r]
        assert _files(s, r) == files_before[r] and files_before[r]
    assert s.run_ids() == others
    assert s.integrity_check() == "ok"
    with pytest.raises(UserError, match=f"run {victim}: no such run"):
        s.delete_run(victim)
    new = s.add_run(RunConfig(name="d"))
    assert new > max(ids)   # an id is never given again (its logs were another run's)


def test_delete_refuses_a_running_run(tmp_path):
    s = Store(tmp_path)
    rid = _filled_run(s, "live", status=RunStatus.RUNNING)
    before, files = _rows(s, rid), _files(s, rid)
    with pytest.raises(UserError, match="is running: cancel it first"):
        s.delete_run(rid)
    assert _rows(s, rid) == before and _files(s, rid) == files


def test_delete_leaves_a_symlinked_log_dir_target(tmp_path):
    s = Store(tmp_path)
    rid = _filled_run(s, "a")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    d = s.home / "runs" / str(rid)
    for p in d.iterdir():
        p.unlink()
    d.rmdir()
    d.symlink_to(outside, target_is_directory=True)
    s.delete_run(rid)
    assert not d.exists() and not d.is_symlink()
    assert (outside / "keep.txt").read_text() == "keep"


# -- the CLI -------------------------------------------------------------------------------------
def test_cli_rename(home, capsys):
    s = Store()
    rid = _filled_run(s, "a")
    rc, out, err = run_cli(["runs", "rename", rid, "tuned lr"], capsys)
    assert rc == 0 and "'a' -> 'tuned lr'" in out
    assert Store().get_run(rid)["name"] == "tuned lr"
    rc, out, err = run_cli(["runs"], capsys)
    assert "tuned lr" in out
    for bad, words in BAD_NAMES:
        rc, out, err = run_cli(["runs", "rename", rid, bad], capsys)
        assert rc != 0 and err.startswith("gnnrec-lab: error: name:") and words in err
        assert "Traceback" not in err and len(err.splitlines()) == 1
    rc, out, err = run_cli(["runs", "rename", 42, "x"], capsys)
    assert rc != 0 and "run 42: no such run" in err and "Traceback" not in err


def test_cli_delete_asks_for_the_id(home, capsys, monkeypatch):
    s = Store()
    keep, victim = _filled_run(s, "keep"), _filled_run(s, "victim")
    rows, files = _rows(s, keep), _files(s, keep)
    for answer in ("", "y", str(keep)):   # anything but the run's id deletes nothing
        monkeypatch.setattr("sys.stdin", io.StringIO(answer + "\n"))
        rc, out, err = run_cli(["runs", "delete", victim], capsys)
        assert rc == 1 and "was not deleted" in err and Store().run_ids() == [keep, victim]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))   # no answer at all (a closed stdin)
    rc, out, err = run_cli(["runs", "delete", victim], capsys)
    assert rc == 1 and "--yes" in err and Store().run_ids() == [keep, victim]
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{victim}\n"))
    rc, out, err = run_cli(["runs", "delete", victim], capsys)
    assert rc == 0 and f"run {victim}: deleted" in out
    assert Store().run_ids() == [keep]
    assert _rows(Store(), keep) == rows and _files(Store(), keep) == files


def test_cli_delete_yes_unknown_and_running(home, capsys):
    s = Store()
    done, live = _filled_run(s, "done"), _filled_run(s, "live", status=RunStatus.RUNNING)
    rc, out, err = run_cli(["runs", "delete", 77, "--yes"], capsys)
    assert rc != 0 and "run 77: no such run" in err and "Traceback" not in err
    rc, out, err = run_cli(["runs", "delete", live, "--yes"], capsys)
    assert rc != 0 and f"run {live} is running" in err and "runs cancel" in err
    assert Store().run_ids() == [done, live]
    rc, out, err = run_cli(["runs", "delete", done, "--yes"], capsys)
    assert rc == 0 and Store().run_ids() == [live]
    rc, out, err = run_cli(["runs", "delete", "abc", "--yes"], capsys)
    assert rc != 0 and "expected a run id" in err


def test_cli_delete_a_run_whose_worker_is_gone(home, capsys):
    """A row left 'running' by a worker that died is recovered first, then deleted like any other."""
    import subprocess
    import sys
    s = Store()
    rid = _filled_run(s, "orphan", status=RunStatus.RUNNING)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    s.set_fields(rid, pid=dead.pid, pid_start=None)
    rc, out, err = run_cli(["runs", "delete", rid, "--yes"], capsys)
    assert rc == 0 and Store().run_ids() == [], (out, err)
