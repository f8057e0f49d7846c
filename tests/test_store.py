"""The run store: schema, migrations, reporter persistence, concurrent writer/readers, crash safety."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.runs.store import SCHEMA_VERSION, Store, connect, migrate
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.home import lab_home
from gnnrec_lab.util.proc import pid_alive, proc_start_ticks
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.recorder import KernelRecord

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rec(name, step, ns, layer=-1, phase="forward", pattern="stream", row_bytes=0):
    return KernelRecord(name, phase, layer, step, ns, 10, 20, 30, pattern, row_bytes, 5, "native")


def test_lab_home_env_and_arg(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "h"))
    assert lab_home() == tmp_path / "h"
    assert lab_home(tmp_path / "x") == tmp_path / "x"
    s = Store()
    assert s.path == tmp_path / "h" / "lab.sqlite" and s.path.exists()
    assert s._query("PRAGMA journal_mode")[0][0] == "wal"


def test_add_run_and_reporter_round_trip(tmp_path):
    s = Store(tmp_path)
    cfg = RunConfig(dataset="ml-100k", layers=2, dim=16, name="a")
    rid = s.add_run(cfg)
    run = s.get_run(rid)
    assert run["status"] == "queued" and run["measured"] == "measured" and run["name"] == "a"
    assert RunConfig.from_dict(run["config"]) == cfg
    rid2 = s.add_run(cfg.replace(memory_mode="cxl"), sweep="sw1")
    assert s.get_run(rid2)["measured"] == "modeled" and s.get_run(rid2)["sweep"] == "sw1"

    r = s.reporter(rid)
    r.on_start(cfg, {"host": {"hostname": "h"}, "footprint": {"graph": 100, "embeddings": 200}})
    # two spmm calls in layer 0 aggregate into one kernel row; different layer stays separate
    r.on_step(0, 0, 0.7, 0.01, [rec("spmm", 0, 100, 0, pattern="gather", row_bytes=64),
                                rec("spmm", 0, 50, 0, pattern="gather", row_bytes=64),
                                rec("spmm", 0, 70, 1, pattern="gather", row_bytes=64)])
    r.on_step(1, 0, 0.6, 0.02, [rec("adam", 1, 9, phase="optimizer")])
    r.on_epoch(0, 0.03, 2, 0.65)
    r.on_eval(0, 2, "valid", {"Recall@20": 0.2, "ndcg@20": 0.1, "note": "x"}, 1.5)
    r.on_eval(0, 2, "valid", {"recall@20": 0.3}, 2.5)
    r.on_eval(0, 2, "test", {"recall@20": 0.25}, 3.0)
    r.on_event("early_stop", "patience reached")

    class Res:
        status = "finished"

        def to_dict(self):
            return {"metrics": {"x": 1}, "footprint": {"measured": {"embeddings": 210}, "measured_peak_rss": 999}}
    r.on_finish(Res())
    s.set_status(rid, "running")
    s.set_status(rid, "finished")

    k = s.kernels_frame(rid)
    spmm0 = k[(k.name == "spmm") & (k.layer == 0)].iloc[0]
    assert (spmm0.calls, spmm0.ns, spmm0.bytes_read, spmm0.random_bytes, spmm0.row_bytes) == (2, 150, 20, 10, 64)
    assert len(k) == 3 and set(k.step) == {0, 1}
    tot = s.kernel_totals_frame(rid).set_index(["name", "layer"])
    assert tot.loc[("spmm", 0), "ns"] == 150 and tot.loc[("spmm", 0), "calls"] == 2
    assert list(s.kernel_totals_frame(rid, since_step=0).name) == ["adam"]
    assert list(s.steps_frame(rid).loss) == [0.7, 0.6]
    assert list(s.latest_steps(rid, since_step=0).step) == [1]
    assert s.epochs_frame(rid).iloc[0].steps == 2
    ev = s.evals_frame([rid])
    assert len(ev) == 4  # the non-numeric "note" is not stored
    fp = s.footprint_frame(rid)
    assert set(zip(fp.tensor_class, fp.bytes, fp.kind)) == {("graph", 100, Provenance.MODELED),
                                                           ("embeddings", 200, Provenance.MODELED),
                                                           ("embeddings", 210, "measured"),
                                                           ("peak_rss", 999, "measured")}
    assert list(s.events_frame(rid).kind) == ["early_stop"]
    run = s.get_run(rid)
    assert run["host"] == {"hostname": "h"} and run["result"]["metrics"] == {"x": 1}
    assert run["duration_s"] is not None and run["duration_s"] >= 0

    df = s.runs_frame()
    row = df[df.id == rid].iloc[0]
    assert row["best_valid_recall@20"] == pytest.approx(0.3)
    assert row["test_recall@20"] == pytest.approx(0.25)
    assert (row.dataset, row.layers, row.dim, row.measured) == ("ml-100k", 2, 16, "measured")
    assert list(s.runs_frame(status="queued").id) == [rid2]

    assert s.find_finished(cfg.to_json()) == rid
    assert s.find_finished(cfg.replace(dim=32).to_json()) is None
    with pytest.raises(UserError, match="no such run"):
        s.get_run(999)


def test_snapshot_reads_one_committed_state(tmp_path):
    reader, writer = Store(tmp_path), Store(tmp_path)   # two connections, as a page and a worker
    rid = writer.add_run(RunConfig(dataset="synth-tiny", layers=1, dim=8), status="running")
    writer.add_step(rid, 1, 1, 0.5, 0.01, [rec("spmm", 1, 100, 0)])
    with reader.snapshot() as snap:
        assert snap is reader
        assert list(reader.latest_steps(rid)["step"]) == [1]
        writer.add_step(rid, 2, 1, 0.4, 0.01, [rec("spmm", 2, 100, 0)])   # committed meanwhile
        assert list(reader.latest_steps(rid)["step"]) == [1]              # not seen by this snapshot
        assert set(reader.kernels_frame(rid)["step"]) == {1}
        with reader.snapshot():                                           # a nested one joins it
            assert list(reader.steps_frame(rid)["step"]) == [1]
        assert list(reader.latest_steps(rid)["step"]) == [1]
        with pytest.raises(sqlite3.OperationalError):                     # reads only
            reader.add_event(rid, "note", "inside a snapshot")
    assert list(reader.latest_steps(rid)["step"]) == [1, 2]               # the snapshot ended
    assert set(reader.kernels_frame(rid)["step"]) == {1, 2}
    with pytest.raises(KeyError), reader.snapshot():                       # an error still ends it
        raise KeyError("x")
    reader.add_event(rid, "note", "after the snapshots")
    assert list(reader.events_frame(rid)["message"]) == ["after the snapshots"]


def test_set_status_only_if_and_cancel_flag(tmp_path):
    s = Store(tmp_path)
    rid = s.add_run(RunConfig())
    assert s.claim_queued(1) == rid
    assert s.claim_queued(1) is None  # slot taken
    s.set_status(rid, "finished")
    assert not s.set_status(rid, "failed", error="late", only_if=("running",))
    assert s.get_run(rid)["status"] == "finished" and s.get_run(rid)["error"] is None

    q = s.add_run(RunConfig())
    assert s.request_cancel(q) == "cancelled"
    rep = s.reporter(s.add_run(RunConfig()), poll_s=0.0)
    assert not rep.should_stop()
    s.request_cancel(rep.run_id)
    assert rep.should_stop()

    slow = s.reporter(s.add_run(RunConfig()), poll_s=60)
    assert not slow.should_stop()
    s.request_cancel(slow.run_id)
    assert not slow.should_stop()  # flag is read at most every poll_s seconds


def test_migrates_v1_database(tmp_path):
    path = tmp_path / "lab.sqlite"
    con = connect(path)
    assert migrate(con, upto=1) == 1
    con.execute("INSERT INTO runs(name, config, status, created, measured) VALUES ('old', ?, 'finished', 1.0, "
                "'measured')", (RunConfig().to_json(),))
    con.execute("INSERT INTO steps(run_id, step, epoch, loss, seconds, wall) VALUES (1, 0, 0, 0.5, 0.1, 1.0)")
    con.close()

    s = Store(tmp_path)
    assert s.schema_version == SCHEMA_VERSION
    assert s._query("SELECT value FROM kv WHERE key='schema_version'")[0][0] == str(SCHEMA_VERSION)
    run = s.get_run(1)
    assert run["name"] == "old" and run["cancel_requested"] is False and run["sweep"] is None
    assert len(s.steps_frame(1)) == 1
    s.reporter(1).on_step(1, 0, 0.4, 0.1, [rec("spmm", 1, 5)])  # new tables work on the upgraded file
    assert len(s.kernels_frame(1)) == 1


def test_store_before_one_provenance_spelling_reads_the_same(tmp_path):
    """A store at schema 3 wrote footprint rows of predicted bytes as 'predicted'; opened by this
    code it is migrated once, and every reader sees the same runs, kernels and bytes, the predicted
    ones as modeled (Provenance). An old caller's 'predicted' still writes modeled rows."""
    path = tmp_path / "lab.sqlite"
    con = connect(path)
    assert migrate(con, upto=3) == 3
    for name, measured in (("dram", "measured"), ("cxl", "modeled")):
        con.execute("INSERT INTO runs(name, config, status, created, measured) VALUES (?, ?, 'finished', 1.0, ?)",
                    (name, RunConfig().to_json(), measured))
    con.executemany("INSERT INTO footprints(run_id, tensor_class, bytes, kind) VALUES (?,?,?,?)",
                    [(1, "graph", 100, "predicted"), (1, "embeddings", 200, "predicted"),
                     (1, "peak_rss", 999, "measured"), (2, "graph", 7, "predicted")])
    con.execute("INSERT INTO kernel_steps(run_id, step, name, phase, layer, calls, ns, bytes_read, bytes_written, "
                "flops, random_bytes, row_bytes, pattern) VALUES (1, 0, 'spmm', 'forward', 0, 2, 150, 20, 4, 8, "
                "10, 64, 'gather')")
    con.close()

    s = Store(tmp_path)
    assert s.schema_version == SCHEMA_VERSION
    fp = s.footprint_frame(1)
    assert list(zip(fp.tensor_class, fp.bytes, fp.kind)) == [("peak_rss", 999, Provenance.MEASURED),
                                                            ("graph", 100, Provenance.MODELED),
                                                            ("embeddings", 200, Provenance.MODELED)]
    assert set(s.footprint_frame(2).kind) == {"modeled"}
    assert [s.get_run(i)["measured"] for i in (1, 2)] == [Provenance.MEASURED, Provenance.MODELED]
    assert list(s.runs_frame().measured) == ["measured", "modeled"]
    k = s.kernels_frame(1).iloc[0]
    assert (k["name"], k.calls, k.ns, k.bytes_read, k.bytes_written, k.flops, k.random_bytes, k.row_bytes,
            k.pattern) == ("spmm", 2, 150, 20, 4, 8, 10, 64, "gather")
    from gnnrec_lab.services.projection import stored_run_records
    assert stored_run_records(s, 1)[2] == {"graph": 100, "embeddings": 200}   # the predicted bytes, as before
    s.add_footprint(2, {"graph": 8}, "predicted")
    assert list(zip(s.footprint_frame(2).bytes, s.footprint_frame(2).kind)) == [(8, "modeled")]
    with pytest.raises(ValueError, match="footprint kind"):
        s.add_footprint(2, {"graph": 8}, "guessed")


def test_refuses_newer_schema(tmp_path):
    Store(tmp_path)
    con = sqlite3.connect(tmp_path / "lab.sqlite")
    con.execute("UPDATE kv SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(UserError, match="newer"):
        Store(tmp_path)


WRITER = textwrap.dedent("""
    import sys, time
    from gnnrec_lab.runs.store import Store
    from gnnrec_lab.util.recorder import KernelRecord
    home, rid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rep = Store(home).reporter(rid)
    for step in range(n):
        recs = [KernelRecord(k, "forward", l, step, 100, 8, 8, 8, "gather", 64, 8, "native")
                for k in ("spmm", "sddmm") for l in range(2)]
        rep.on_step(step, step // 100, 1.0, 0.001, recs)
        if step == 0:
            print("started", flush=True)
""")


def test_concurrent_writer_and_readers(tmp_path):
    s = Store(tmp_path)
    rid = s.add_run(RunConfig())
    n = 3000
    errors, seen = [], [[], []]
    done = threading.Event()

    def reader(i):
        st = Store(tmp_path)  # its own connections, as a dashboard would have
        last = -1
        try:
            while not done.is_set():
                new = st.latest_steps(rid, last)
                if len(new):
                    assert list(new.step) == list(range(last + 1, last + 1 + len(new)))
                    last = int(new.step.iloc[-1])
                seen[i].append(last)
                st.runs_frame()
                if i == 1:
                    st.kernels_frame(rid)
                time.sleep(0.005)
        except Exception as e:  # noqa: BLE001 - collected and asserted on below
            errors.append(repr(e))

    readers = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in readers:
        t.start()
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path), str(rid), str(n)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    elapsed = time.perf_counter() - t0
    done.set()
    for t in readers:
        t.join()
    assert p.returncode == 0, p.stderr
    assert not errors, errors[:3]
    assert len(s.steps_frame(rid)) == n
    assert len(s.kernels_frame(rid)) == 4 * n
    # readers saw the run grow while it was being written
    assert any(0 <= v < n - 1 for v in seen[0] + seen[1])
    print(f"{n} steps x 4 kernel rows written in {elapsed:.2f} s with 2 readers polling")


def test_killed_writer_leaves_store_readable(tmp_path):
    s = Store(tmp_path)
    rid = s.add_run(RunConfig())
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(rid), "1000000"],
                         stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.5)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    p.stdout.close()

    s2 = Store(tmp_path)
    assert s2.integrity_check() == "ok"
    steps = s2.steps_frame(rid)
    k = s2.kernels_frame(rid)
    assert len(steps) > 0
    # one transaction per step: no step lost its kernel rows, none is half-written
    assert list(steps.step) == list(range(len(steps)))
    assert len(k) == 4 * len(steps)
    s2.reporter(rid).on_step(len(steps), 0, 0.1, 0.1, [])  # and the store still takes writes
    assert len(s2.steps_frame(rid)) == len(steps) + 1


def test_pid_alive_checks_identity():
    me = os.getpid()
    start = proc_start_ticks(me)
    assert pid_alive(me) and not pid_alive(None)
    if start is not None:  # Linux: a reused pid with another start time is not our worker
        assert pid_alive(me, start) and not pid_alive(me, start + 1)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not pid_alive(p.pid)


# ---------------------------------------------------------------------------
# a damaged, empty or deleted lab.sqlite is reported and kept, never recreated over
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("content, needle", [
    (b"", "empty (0 bytes)"),
    (b"this is not a database at all, just some text" * 100, "not an SQLite database"),
    (b"SQLite format 3\x00" + b"\xff" * 4000, "damaged"),
])
def test_damaged_store_is_reported_and_kept(tmp_path, monkeypatch, content, needle):
    import gnnrec_lab.runs.store as store_mod
    monkeypatch.setattr(store_mod, "EMPTY_GRACE_S", 0.1)
    path = tmp_path / "lab.sqlite"
    path.write_bytes(content)
    with pytest.raises(UserError) as e:
        Store(tmp_path)
    assert needle in str(e.value) and "kept" in str(e.value) and "\n" not in str(e.value)
    assert path.read_bytes() == content            # the file is untouched


def test_deleted_store_with_runs_is_not_recreated(tmp_path):
    s = Store(tmp_path)
    rid = s.add_run(RunConfig())
    s.run_dir(rid)
    s.close()
    os.unlink(tmp_path / "lab.sqlite")
    with pytest.raises(UserError, match="missing"):
        Store(tmp_path)
    assert not (tmp_path / "lab.sqlite").exists()


def test_store_deleted_under_a_running_process_is_not_recreated(tmp_path):
    s = Store(tmp_path)
    s.add_run(RunConfig())
    os.unlink(tmp_path / "lab.sqlite")
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(tmp_path / "lab.sqlite") + suffix):
            os.unlink(str(tmp_path / "lab.sqlite") + suffix)
    out = {}

    def other_thread():  # a new thread opens its own connection: it must not create a new file
        try:
            s.run_ids()
        except UserError as e:
            out["error"] = str(e)
    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert "cannot be opened" in out.get("error", "")
    assert not (tmp_path / "lab.sqlite").exists()


def test_footprint_has_one_stored_shape_and_old_results_stay_readable(tmp_path):
    """record_result stores every footprint as Footprint.to_dict (predicted: modeled, measured:
    measured); a result stored before that shape (measured_peak_rss, kind_* labels) reads the same."""
    from gnnrec_lab.memory.footprint import Footprint
    old = {"predicted": {"graph": 100}, "kind_predicted": "modeled", "measured_peak_rss": 999,
           "kind_measured": "measured"}
    fp = Footprint.from_dict(old)
    assert (fp.predicted, fp.measured, fp.peak_rss) == ({"graph": 100}, {"peak_rss": 999}, 999)
    assert Footprint.from_dict(fp.to_dict()) == fp and Footprint.from_dict(None) == Footprint()
    assert Footprint.from_dict({"embeddings": 5}).measured == {"embeddings": 5}   # flat: allocated bytes
    s = Store(tmp_path / "home")
    rid = s.add_run(RunConfig(), status="running")
    s.record_result(rid, {"footprint": old})
    stored = s.get_run(rid)["result"]["footprint"]
    assert stored == {"predicted": {"graph": 100}, "measured": {"peak_rss": 999},
                      "kind": {"predicted": "modeled", "measured": "measured"}}
    fpf = s.footprint_frame(rid)
    assert set(zip(fpf.tensor_class, fpf.bytes, fpf.kind)) == {("graph", 100, Provenance.MODELED),
                                                             ("peak_rss", 999, "measured")}


# ---------------------------------------------------------------------------
# one damaged row never takes the store down (issue 23 class 4)
# ---------------------------------------------------------------------------
DAMAGE = {"truncated": '{"dataset": "ml-1', "garbage": "\x00\xff not json", "a list": "[1, 2]",
          "a number": "5", "a string": '"x"'}


def _cli(argv, capsys):
    from gnnrec_lab.commands import cli
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("field", ["config", "info", "result", "host"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_json_column_names_its_run_and_the_others_still_open(tmp_path, monkeypatch, capsys, field, damage):
    """Generated over every JSON column x kinds of damage: `runs`, `runs --json`, `runs show` of every
    run, `whatif` and the dashboards' table reader answer; the damaged run is named with its column."""
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    s = Store(tmp_path)
    good = s.add_run(RunConfig(dataset="ml-100k", name="good"))
    bad = s.add_run(RunConfig(dataset="ml-100k", name="bad"))
    s.record_start(good, {"host": {"hostname": "h"}})
    s.record_start(bad, {"host": {"hostname": "h"}})
    with s._write() as con:
        con.execute(f"UPDATE runs SET {field}=? WHERE id=?", (DAMAGE[damage], bad))
    s.record_load(bad, {"start": {}})                            # never overwrites what a damaged row holds
    if field == "info":
        assert s._query("SELECT info FROM runs WHERE id=?", (bad,))[0][0] == DAMAGE[damage]
    frame = s.runs_frame()
    assert list(frame.id) == [good, bad]
    damaged = dict(zip(frame.id, frame.damaged))
    assert damaged[good] is None and (damaged[bad] or "").startswith(field) == (field in ("config", "info"))
    run = s.get_run(bad)
    assert any(w.startswith(f"{field}: not") for w in run["damaged"]) and run[field] is None
    assert s.get_run(good)["damaged"] == [] and s.get_run(good)["config"]["name"] == "good"

    rc, out, err = _cli(["runs"], capsys)
    assert rc == 0 and "Traceback" not in err and "good" in out, err
    if field in ("config", "info"):
        assert f"run {bad} is damaged: {field}: not" in out
    rc, out, err = _cli(["runs", "--json"], capsys)
    assert rc == 0 and '"good"' in out, err
    for rid in (good, bad):
        rc, out, err = _cli(["runs", "show", str(rid)], capsys)
        assert rc == 0 and "Traceback" not in err, err
    assert f"damaged    {field}: not" in out
    rc, out, err = _cli(["whatif", str(bad), "--device", "cxl"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    if field == "config":
        assert f"run {bad} is damaged: config: not" in err
    pytest.importorskip("panel")
    from gnnrec_lab.dashboard.cache import cached_runs  # the Cache dashboard's table reader
    cached_runs(s)


@pytest.mark.parametrize("error, needle, not_needle", [
    (sqlite3.OperationalError("attempt to write a readonly database"), "read-only", "damaged"),
    (sqlite3.OperationalError("database or disk is full"), "the disk is full", "damaged"),
    (OSError(30, "Read-only file system"), "read-only", "recover"),
    (OSError(28, "No space left on device"), "the disk is full", "recover"),
    (sqlite3.DatabaseError("file is not a database"), "damaged", "read-only"),
])
def test_a_read_only_home_or_a_full_disk_is_named_not_called_damage(tmp_path, monkeypatch, capsys, error, needle,
                                                                    not_needle):
    """Opening a store, and the CLI's handler for a store error mid-command, say what is wrong."""
    import gnnrec_lab.runs.store as store_mod
    Store(tmp_path)   # a sound store is there

    def refuse(*a, **k):
        raise error
    monkeypatch.setattr(store_mod, "migrate", refuse)
    with pytest.raises(UserError) as e:
        Store(tmp_path)
    assert needle in str(e.value) and not_needle not in str(e.value), str(e.value)
    monkeypatch.undo()
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    from gnnrec_lab.commands import runs as runs_cmd
    monkeypatch.setattr(runs_cmd, "_list", refuse)
    rc, out, err = _cli(["runs"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle.split()[-1] in err.lower(), err


def test_a_worker_that_hits_a_full_disk_records_it(tmp_path):
    from gnnrec_lab.runs.worker import failure
    status, error, code = failure(sqlite3.OperationalError("database or disk is full"))
    assert status == "failed" and "disk is full" in error and code == 1
    status, error, _ = failure(OSError(28, "No space left on device", "/data/x.npy"))
    assert "disk is full" in error and "/data/x.npy" in error


@pytest.mark.parametrize("field", ["config", "info", "result"])
def test_dashboards_open_beside_a_damaged_row(tmp_path, monkeypatch, field):
    """The dashboards' tables and pages read the same store: a damaged row leaves them working."""
    pytest.importorskip("panel")
    import panel as pn

    from gnnrec_lab.dashboard.breakdown import BreakdownPage
    from gnnrec_lab.dashboard.common import Lab
    from gnnrec_lab.dashboard.compare import ComparePage, epoch_seconds, runs_table
    from gnnrec_lab.dashboard.fake import fill_store
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path))
    s = Store(tmp_path)
    ids = fill_store(s, n_runs=3, steps=4, epochs=2)
    with s._write() as con:
        con.execute(f"UPDATE runs SET {field}=? WHERE id=?", ('{"broken', ids[1]))
    from gnnrec_lab.services.projection import modeled_runs_frame
    runs = modeled_runs_frame(s)   # what the pages read
    assert set(runs.id) == set(ids)
    runs_table(runs)
    epoch_seconds(s, runs)
    lab = Lab(store=s, runner=None)
    for rid in ids:
        page = BreakdownPage(lab)
        page.run_id = rid
        pn.panel(page.body())
    compare = ComparePage(lab)
    compare.table.selection = [0, 1, 2]
    pn.panel(compare.overlays())


@pytest.fixture
def small_mount(tmpfs):
    """A 400 KiB tmpfs (needs the right to mount: root in a container); skipped elsewhere."""
    return tmpfs("400k")


def _fill(path) -> None:
    """Write ``path`` until its filesystem has no byte left (the step rows' sizes vary with their
    timings, so a store that filled the disk can leave a few blocks free)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)


def test_a_real_full_disk_and_read_only_mount(small_mount, monkeypatch, capsys):
    """On a real full filesystem a write names the full disk and `runs` still lists; remounted
    read-only, opening the store says read-only (not damaged, no advice to recover)."""
    home = small_mount / "h"
    monkeypatch.setenv("GNNREC_LAB_HOME", str(home))
    s = Store(home)
    rid = s.add_run(RunConfig(dataset="ml-100k"), status="running")
    s.set_fields(rid, pid=2**22 + 12345)   # a pid no process has: recover_dead will want to write
    with pytest.raises(sqlite3.OperationalError) as e:
        for i in range(200_000):
            s.add_step(rid, i, 0, 0.5, 0.01, [rec("spmm", i, 100, 0)])
    from gnnrec_lab.runs.store import describe_store_error
    assert "the disk is full" in describe_store_error(e.value, s.path)
    # the space reserve takes the dead run's final status: `runs` lists it failed, naming the disk
    s.close()
    rc, out, err = _cli(["runs"], capsys)
    assert rc == 0 and f"{rid} " in out and "Traceback" not in err, err
    failed = Store(home).get_run(rid)
    assert failed["status"] == "failed" and f"no space left on {home} (" in failed["error"], failed["error"]
    # no reserve left and the disk full again: a dead run stays running, and `runs` says why
    s = Store(home)
    s.release_reserve()     # (opening made one again where it fitted): the disk fills with none left
    with contextlib.suppress(sqlite3.OperationalError):
        dead2 = s.add_run(RunConfig(dataset="ml-100k"), status="running", pid=2**22 + 12346)
        for i in range(200_000):
            s.add_step(dead2, i, 0, 0.5, 0.01, [rec("spmm", i, 100, 0)])
    assert s.get_run(dead2)["status"] == "running"
    s.close()
    # every connection closed (the store closes them all when dropped), so SQLite deleted its WAL and
    # index: the free bytes are decided below, not by how much of a WAL a lingering connection keeps
    assert not [p.name for p in home.iterdir() if p.name.startswith("lab.sqlite-")]
    _fill(small_mount / "filler")
    assert shutil.disk_usage(home).free == 0
    # too full for SQLite's WAL index: `runs` opens the store read-only, lists, and says why the
    # dead run still shows running
    rc, out, err = _cli(["runs"], capsys)
    assert rc == 0 and f"{rid} " in out and f"{dead2} " in out and "Traceback" not in err, err
    assert "disk is full" in err and "still shown as running" in err, err
    with Store(home) as full:
        assert full.get_run(dead2)["status"] == "running"
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            full.add_run(RunConfig(dataset="ml-100k"))
    # the same files seen through a read-only bind mount (the store's open files keep the first busy)
    ro = small_mount.parent / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "--bind", str(small_mount), str(ro)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only here")
        # SQLite opens a WAL store read-only while its -shm file exists, and refuses otherwise (here:
        # no connection is open, so there is none); either way a write or the refusal says read-only
        try:
            ro_store = Store(ro / "h")
        except UserError as e:
            assert "read-only" in str(e) and "damaged" not in str(e) and "recover" not in str(e)
        else:
            with pytest.raises(sqlite3.OperationalError) as e:
                ro_store.add_run(RunConfig(dataset="ml-100k"))
            assert "read-only" in describe_store_error(e.value, ro_store.path)
            ro_store.close()
        monkeypatch.setenv("GNNREC_LAB_HOME", str(ro / "h"))
        rc, out, err = _cli(["runs"], capsys)
        assert (rc == 0 and f"{rid} " in out) or (rc == 2 and "read-only" in err), (rc, err)
        assert "damaged" not in err and "Traceback" not in err, err
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def _my_locks_on(path) -> list:
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return [ln for ln in f if f":{ino} " in ln and f" {os.getpid()} " in ln]


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux /proc/locks")
def test_opening_a_second_store_keeps_the_first_connections_lock(tmp_path):
    """A WAL connection holds a SHARED lock on the database for its life; a second Store() in the
    same process must not drop it (closing any descriptor of the file drops all the process's
    POSIX locks on it), or another process may checkpoint and delete the WAL under it."""
    first = Store(tmp_path)
    first.run_ids()
    held = _my_locks_on(tmp_path / "lab.sqlite")
    assert held
    second = Store(tmp_path)
    second.run_ids()
    assert _my_locks_on(tmp_path / "lab.sqlite") == held
    first.close()
    second.close()


def test_another_process_closing_does_not_pull_the_wal_from_under_a_live_store(tmp_path):
    """The sequence that damaged stores of distributed runs: this process has a store open, opens
    it again, another process writes and closes its last connection, this process writes on."""
    first = Store(tmp_path)
    a = first.add_run(RunConfig())
    Store(tmp_path).run_ids()                       # a second open in the same process
    code = ("import sys; from gnnrec_lab.runs.store import Store; from gnnrec_lab.config.run import RunConfig; "
            "s = Store(sys.argv[1]); s.add_run(RunConfig()); s.close()")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=120)
    b = first.add_run(RunConfig())
    first.close()
    con = sqlite3.connect(tmp_path / "lab.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    assert {a, b} <= set(Store(tmp_path).run_ids()) and len(Store(tmp_path).run_ids()) == 3


def test_run_ids_by_status_and_name(tmp_path):
    """``run_ids(status, name)``: the runs of that status and name only, oldest first (how
    ``comparison.finished_run`` finds a headline run without reading every run of the store)."""
    from gnnrec_lab.util.status import RunStatus
    s = Store(tmp_path)
    a = s.add_run(RunConfig(dataset="synth-tiny", name="headline full L1 b128"))
    b = s.add_run(RunConfig(dataset="synth-tiny", name="other"))
    c = s.add_run(RunConfig(dataset="synth-tiny", name="headline full L1 b128"))
    s.set_status(c, RunStatus.RUNNING)
    s.set_status(c, RunStatus.FINISHED)
    assert s.run_ids() == [a, b, c]
    assert s.run_ids(name="headline full L1 b128") == [a, c]
    assert s.run_ids(RunStatus.FINISHED, name="headline full L1 b128") == [c]
    assert s.run_ids(RunStatus.FINISHED, name="other") == [] and s.run_ids(RunStatus.QUEUED) == [a, b]


def test_the_store_runs_no_tier_model():
    """The store's run table is the store's data: the tier model's columns are added by
    services.projection.with_modeled, so runs/store.py imports nothing of memory/tiermodel (at its
    top or inside a function)."""
    import ast
    path = os.path.join(REPO, "gnnrec_lab", "runs", "store.py")
    tree = ast.parse(open(path).read(), filename=path)
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            named += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    assert named and not [n for n in named if "tiermodel" in n], [n for n in named if "tiermodel" in n]


def test_the_views_run_table_is_the_stores_with_the_modeled_columns(tmp_path):
    """modeled_runs_frame: the store's plain frame with ``device`` after ``backend`` and the modeled
    columns last, its projection inputs gone: the columns (and their order: ``runs --json``'s keys)
    every view showed when the store computed them."""
    import pandas as pd

    from gnnrec_lab.services.projection import PROJECTION_INPUTS, modeled_runs_frame, with_modeled
    s = Store(tmp_path)
    for frame in (modeled_runs_frame(s), None):   # an empty store, then one DRAM and one CXL run
        if frame is None:
            s.add_run(RunConfig(dataset="synth-tiny"))
            rid = s.add_run(RunConfig(dataset="synth-tiny", memory_mode="cxl"), status="running")
            s.add_step(rid, 1, 1, 0.5, 0.02)
            s.record_result(rid, {"modeled": {"measured_s_per_step": 0.02, "modeled_s_per_step": 0.05}})
            frame = modeled_runs_frame(s)
            plain = s.runs_frame()
            assert set(PROJECTION_INPUTS) <= set(plain.columns) and "device" not in plain.columns
            assert not {"modeled_ratio", "modeled_step_s", "modeled_train_s"} & set(plain.columns)
            assert list(with_modeled(plain).columns) == list(frame.columns) and "device" not in plain.columns
            row = frame.set_index("id").loc[rid]
            assert row["device"] == "cxl_type3_ddr5_x8" and row["modeled_ratio"] == pytest.approx(2.5)
            assert row["modeled_step_s"] == pytest.approx(0.05) and row["modeled_train_s"] == pytest.approx(0.05)
            assert pd.isna(frame.set_index("id").loc[rid - 1, "device"])   # a DRAM run: measured, no device
        cols = list(frame.columns)
        assert cols[cols.index("backend") + 1] == "device"
        # issue 51: outlier_steps (left out of the modeled base) and the band's two parts, the device
        # model's and the run's measured spread
        assert cols[-10:] == ["step_s", "modeled_ratio", "modeled_step_s", "modeled_train_s", "outlier_steps",
                              "modeled_step_band", "modeled_kernel_band", "model_step_band", "spread_step_band",
                              "confidence"]   # model_band's, last
        assert not set(PROJECTION_INPUTS) & set(cols)


def test_a_stored_run_reads_typed_whatever_version_wrote_it(tmp_path):
    """RunRecord / StoredResult: every section typed, an absent, None or damaged one its type's
    empty (never a KeyError or an AttributeError on ``None.get``), the stored values unchanged."""
    from gnnrec_lab.memory.footprint import Footprint
    from gnnrec_lab.runs.record import RunRecord, StoredConfig, StoredResult
    from gnnrec_lab.training.loop import RunResult
    from gnnrec_lab.util.status import RunStatus
    for old in (None, {}, [1, 2], {"epochs": 3}, {"modeled": "x", "info": None, "test": [0.1], "footprint": 7}):
        r = StoredResult.from_dict(old)
        assert (r.modeled, r.info, r.best_valid, r.test, r.target, r.phases, r.distributed) == ({},) * 7
        assert (r.kernels, r.history, r.epoch_seconds) == ([], [], []) and r.footprint == Footprint()
        assert r.config == {} and isinstance(r.config, StoredConfig) and r.config.placement == {}
        assert r.row_store == {} and r.status is None and r.train_seconds is None
        assert r.epochs == (3 if isinstance(old, dict) and "epochs" in old else None)
    cfg = RunConfig(dataset="synth-tiny", memory_mode="cxl", placement={"embeddings": "dram"})
    res = RunResult(cfg, epochs=2, steps=8, train_seconds=1.5, best_valid={"recall@20": 0.3},
                    info={"sampled": {"row_store": {"hits": 4}}}, modeled={"device": "d"})
    res.footprint.measured["peak_rss"] = 123
    for given in (res, res.to_dict()):
        r = StoredResult.from_dict(given)
        assert r.config == cfg.to_dict() and r.config.placement == {"embeddings": "dram"}
        assert (r.status, r.epochs, r.steps, r.train_seconds) == (RunStatus.FINISHED, 2, 8, 1.5)
        assert r.best_valid == {"recall@20": 0.3} and r.row_store == {"hits": 4} and r.modeled == {"device": "d"}
        assert r.footprint.peak_rss == 123 and r.raw["kind"] == res.to_dict()["kind"]

    s = Store(tmp_path)
    rid = s.add_run(cfg)
    s.record_start(rid, {"host": {"hostname": "h"}, "load": {"start": {"load1": 1.0}}})
    s.record_result(rid, res)
    rec = s.run_record(rid)
    assert (rec.id, rec.status, rec.config.placement, rec.host) == (rid, RunStatus.QUEUED, {"embeddings": "dram"},
                                                                     {"hostname": "h"})
    assert rec.load == {"start": {"load1": 1.0}} and rec.result.footprint.peak_rss == 123
    assert rec.row == s.get_run(rid) | {"duration_s": rec.row["duration_s"]} and RunRecord.of(rec) is rec
    with s._write() as con:
        con.execute("UPDATE runs SET config=?, result=?, info=NULL WHERE id=?", ('{"broken', "[1]", rid))
    rec = s.run_record(rid)
    assert rec.config == {} and rec.result == StoredResult() and rec.info == {} and rec.load is None
    assert [w.split(":")[0] for w in rec.damaged] == ["config", "result"]
    with pytest.raises(UserError, match="damaged: config"):
        s.run_record(rid, need=("config",))
    assert RunRecord.of(None).config == {} and RunRecord.of({"id": "4"}).id == 4   # a page's placeholder run


def test_a_home_that_is_a_file_and_a_store_that_is_a_directory_say_so(tmp_path, monkeypatch):
    """Not 'File exists' or 'cannot be opened': what the path is, and nothing is changed."""
    home = tmp_path / "home-file"
    home.write_text("x")
    with pytest.raises(UserError, match=r"GNNREC_LAB_HOME: .*home-file is a file, not a directory"):
        Store(home)
    assert home.read_text() == "x"
    (tmp_path / "h" / "lab.sqlite").mkdir(parents=True)
    with pytest.raises(UserError, match=r"run store .*lab.sqlite is a directory, not a SQLite file"):
        Store(tmp_path / "h")
    assert (tmp_path / "h" / "lab.sqlite").is_dir() and not any((tmp_path / "h" / "lab.sqlite").iterdir())


# every command that creates or writes the home, as a user types it (none gets past the home's check)
HOME_COMMANDS = {
    "run": ["run", "--dataset", "synth-tiny", "--epochs", "1"],
    "runs": ["runs"],
    "sweep": ["sweep", "--dataset", "synth-tiny", "--epochs", "1", "--layers", "1,2"],
    "calibrate": ["calibrate", "--quick"],
    "calibrate --tier": ["calibrate", "--tier", "file:{tier}", "--quick"],
    "dashboard": ["dashboard", "--port", "0"],
}


def _home_condition(kind, tmp_path, tmpfs):
    """``(home, the phrase every command must say)`` for a home that is a file, a read-only
    directory (a read-only mount: root ignores permission bits) or a directory on a full disk."""
    if kind == "file":
        home = tmp_path / "home-file"
        home.write_text("x")
        return home, f"GNNREC_LAB_HOME: {home} is a file, not a directory"
    home = tmpfs("64k")
    if kind == "read-only":
        if subprocess.run(["mount", "-o", "remount,ro", str(home)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only here")
        return home, f"{home} is read-only (no write permission, or a read-only mount)"
    _fill(home / "filler")
    return home, f"the disk is full: no space left on {home} ("


@pytest.mark.parametrize("kind", ["file", "read-only", "full disk"])
def test_every_command_that_makes_the_home_says_the_same_of_a_bad_one(kind, tmp_path, tmpfs, monkeypatch,
                                                                       capsys):
    """A file, a read-only directory or a full disk where the home is: each command that creates
    it exits 2 with one line saying the same thing (not 'File exists'), before doing any work."""
    home, phrase = _home_condition(kind, tmp_path, tmpfs)
    monkeypatch.setenv("GNNREC_LAB_HOME", str(home))
    said = {}
    for name, argv in HOME_COMMANDS.items():
        argv = [a.replace("{tier}", str(tmp_path)) for a in argv]
        if name == "dashboard":   # a server that got past the check would serve: run it apart, with a timeout
            res = subprocess.run([sys.executable, "-m", "gnnrec_lab.commands.cli", *argv], capture_output=True,
                                 text=True, timeout=120, env=os.environ | {"GNNREC_LAB_HOME": str(home)})
            rc, err = res.returncode, res.stderr.strip()
        else:
            rc, _, err = _cli(argv, capsys)
            err = err.strip()
        said[name] = (rc, err)
    bad = {n: v for n, v in said.items()
           if not (v[0] == 2 and phrase in v[1] and len(v[1].splitlines()) == 1 and "Traceback" not in v[1])}
    assert not bad, f"expected {phrase!r} from each; got {bad}"
    if kind == "file":
        assert home.read_text() == "x"
    else:
        assert {p.name for p in home.iterdir()} <= {"filler", "lab.sqlite"}


CREATOR = textwrap.dedent("""
    import sys, time
    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.runs.store import Store
    t = float(sys.argv[2])
    while time.time() < t:
        pass
    Store(sys.argv[1]).add_run(RunConfig())
""")
POLLER = textwrap.dedent("""
    import sys, time
    from gnnrec_lab.runs.store import Store
    t = float(sys.argv[2])
    while time.time() < t:
        pass
    errors, end = [], time.time() + 1.5
    while time.time() < end:
        try:
            s = Store(sys.argv[1])
            s.runs_frame(), s.steps_frame(1), s.kernels_frame(1)
            s.close()
        except Exception as e:
            errors.append(repr(e))
    print(len(errors), errors[:2])
""")


@pytest.mark.slow
def test_readers_of_a_store_being_created_see_all_of_it_or_wait(tmp_path):
    """Four processes create a fresh store while two poll it from the first moment: no reader sees
    a missing table, a locked database or damage (schema creation is one transaction; switching to
    WAL, which SQLite refuses at once while another process holds the lock, is retried)."""
    bad = []
    for trial in range(4):
        home = tmp_path / f"h{trial}"
        t = time.time() + 1.5
        procs = [subprocess.Popen([sys.executable, "-c", CREATOR, str(home), str(t)], cwd=REPO,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        polls = [subprocess.Popen([sys.executable, "-c", POLLER, str(home), str(t - 0.05)], cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            if p.returncode:
                bad.append(err.strip().splitlines()[-1])
        for p in polls:
            out, err = p.communicate(timeout=120)
            if p.returncode or not out.startswith("0 "):
                bad.append(out or err)
        assert len(Store(home).runs_frame()) == 4
    assert not bad, bad


def test_a_store_refusing_wal_for_a_moment_is_waited_for_and_a_lock_held_long_is_not_damage(tmp_path, monkeypatch):
    """SQLite answers "database is locked" at once to PRAGMA journal_mode=WAL while another process
    holds the lock (no busy handler there): opening retries it, and a lock that outlasts the busy
    timeout is reported as busy, not as a damaged store."""
    import gnnrec_lab.runs.store as store_mod
    real_connect = sqlite3.connect
    refusals = {"left": 3}

    class Flaky:
        def __init__(self, con):
            self._con = con

        def execute(self, sql, *args):
            if sql.startswith("PRAGMA journal_mode") and refusals["left"]:
                refusals["left"] -= 1
                raise sqlite3.OperationalError("database is locked")
            return self._con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._con, name)

    monkeypatch.setattr(store_mod.sqlite3, "connect", lambda *a, **k: Flaky(real_connect(*a, **k)))
    s = Store(tmp_path)
    assert refusals["left"] == 0 and s._query("PRAGMA journal_mode")[0][0] == "wal"
    s.close()
    refusals["left"] = 10**9
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_MS", 200)
    with pytest.raises(UserError) as e:
        Store(tmp_path)
    assert "is busy" in str(e.value) and "damaged" not in str(e.value), str(e.value)


def test_files_beside_the_store_are_written_whole_or_not_at_all(tmp_path):
    """write_atomic (the run's limit file, the calibration, spec.json, the trainers' reports, a run
    file): a writer killed with SIGKILL in mid-write leaves the old file whole, and no temporary."""
    from gnnrec_lab.util.files import write_atomic
    target = tmp_path / "report.json"
    write_atomic(target, '{"old": 1}')
    code = textwrap.dedent("""
        import sys
        from gnnrec_lab.util import files
        real = files.os.fsync
        def stall(fd):          # the bytes are in the temporary: die before the rename
            print("writing", flush=True)
            import time; time.sleep(60)
        files.os.fsync = stall
        files.write_atomic(sys.argv[1], '{"new": ' + "1" * 2_000_000 + '}')
    """)
    p = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert p.stdout.readline().strip() == "writing"
    p.kill()
    p.wait(10)
    p.stdout.close()
    assert target.read_text() == '{"old": 1}'
    # the dead writer's temporary stays (its pid is in the name, nobody reads it); a live one cleans up
    with pytest.raises(TypeError):
        write_atomic(target, None)
    assert target.read_text() == '{"old": 1}'
    assert write_atomic(target, '{"new": 2}').read_text() == '{"new": 2}'


def test_creator_killed_mid_creation_leaves_no_store_the_next_open_calls_damaged(tmp_path):
    """A process SIGKILLed while it creates the store (here: after SQLite opened the file, before
    it wrote a page) leaves no lab.sqlite, so the next open makes a new store and sweeps the dead
    creator's file; a 0-byte lab.sqlite would be reported damaged (the crash bench found it)."""
    code = ("import os, signal, gnnrec_lab.runs.store as m\n"
            "m._retry_busy = lambda con, sql: os.kill(os.getpid(), signal.SIGKILL)\n"
            f"m.Store({str(tmp_path)!r})\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert p.returncode == -9, p.stderr.decode()
    assert not (tmp_path / "lab.sqlite").exists()
    assert list(tmp_path.glob(".lab.sqlite.*.new*")), "the creator was killed before it made its file"
    s = Store(tmp_path)
    rid = s.add_run(RunConfig())
    assert s.get_run(rid) is not None
    assert not list(tmp_path.glob(".lab.sqlite.*.new*"))   # the dead creator's file is gone
    s.close()


def test_concurrent_creators_share_one_store(tmp_path):
    """Two processes creating the same store at once: both end up on one file, runs of both in it."""
    code = ("import sys, gnnrec_lab.runs.store as m\n"
            "from gnnrec_lab.config.run import RunConfig\n"
            f"s = m.Store({str(tmp_path)!r}); print(s.add_run(RunConfig()))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(3)]
    ids = sorted(int(p.communicate()[0]) for p in procs)
    assert all(p.returncode == 0 for p in procs)
    s = Store(tmp_path)
    assert sorted(r for r in ids if s.get_run(r) is not None) == ids and len(set(ids)) == 3
    assert not list(tmp_path.glob(".lab.sqlite.*.new*"))
