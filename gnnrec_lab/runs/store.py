"""Where do runs live? One SQLite file in WAL mode, written by workers, read by everyone.

Layout: ``$GNNREC_LAB_HOME/lab.sqlite`` (``GNNREC_LAB_HOME`` defaults to
``~/.gnnrec_lab``); each run's stdout/stderr go to ``$GNNREC_LAB_HOME/runs/<id>/``.

Concurrency model: one writer process per run (its worker), plus the runner that
creates rows and flips statuses, plus any number of readers (CLI, notebooks,
dashboards). WAL lets readers see committed data while a writer appends; every
write is one short ``BEGIN IMMEDIATE`` transaction (one per training step), and
``busy_timeout`` makes concurrent writers queue instead of failing with
"database is locked". A worker that dies mid-transaction leaves the last
committed step intact: SQLite rolls the torn transaction back on next open.

Units: times are Unix seconds (float) in the tables, durations in seconds,
kernel times in nanoseconds, sizes in bytes.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from gnnrec_lab.config.run import check_run_name, expect_config
from gnnrec_lab.memory.footprint import Footprint
from gnnrec_lab.models.registry import shape_keys
from gnnrec_lab.runs.record import RunRecord
from gnnrec_lab.training.reporting import Reporter
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.home import disk_full, ensure_home, is_full, is_read_only, lab_home, read_only
from gnnrec_lab.util.proc import load_summary, pid_alive, proc_start_ticks
from gnnrec_lab.util.provenance import Provenance, parts
from gnnrec_lab.util.recorder import STORE_KEY, SUMMED_FIELDS, TOTAL_FIELDS, store_key, sum_records
from gnnrec_lab.util.status import RunStatus

FOOTPRINT_KINDS = tuple(parts(Footprint).values())   # predicted (from shapes), allocated
_KERNEL_STEP_COLS = ("run_id", "step") + STORE_KEY + TOTAL_FIELDS
_INSERT_KERNEL_STEPS = (f"INSERT INTO kernel_steps({', '.join(_KERNEL_STEP_COLS)}) "
                        f"VALUES ({','.join('?' * len(_KERNEL_STEP_COLS))})")
# Each SQLite call waits this long for another writer before giving up (ms).
BUSY_TIMEOUT_MS = 30_000


def _checked_status(status) -> RunStatus:
    """``status`` (a RunStatus or its plain value) as a RunStatus; ValueError naming the valid ones."""
    st = RunStatus.of(status)
    if st is None:
        raise ValueError(f"status must be one of {tuple(s.value for s in RunStatus)}, got {status!r}")
    return st


# ---------------------------------------------------------------------------
# schema: a list of migrations applied in order; schema_version = how many ran
# ---------------------------------------------------------------------------
def _m1_core(con: sqlite3.Connection) -> None:
    con.execute("""CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT, config TEXT NOT NULL, status TEXT NOT NULL, pid INTEGER, host TEXT,
        created REAL NOT NULL, started REAL, finished REAL,
        measured TEXT NOT NULL, error TEXT, result TEXT)""")
    con.execute("""CREATE TABLE steps (
        run_id INTEGER NOT NULL, step INTEGER NOT NULL, epoch INTEGER,
        loss REAL, seconds REAL, wall REAL)""")
    con.execute("""CREATE TABLE evals (
        run_id INTEGER NOT NULL, epoch INTEGER, step INTEGER, split TEXT,
        metric TEXT, value REAL, elapsed_s REAL)""")
    con.execute("""CREATE TABLE events (
        run_id INTEGER NOT NULL, time REAL, kind TEXT, message TEXT)""")


def _m2_breakdowns(con: sqlite3.Connection) -> None:
    con.execute("""CREATE TABLE kernel_steps (
        run_id INTEGER NOT NULL, step INTEGER NOT NULL, name TEXT, phase TEXT, layer INTEGER,
        calls INTEGER, ns INTEGER, bytes_read INTEGER, bytes_written INTEGER, flops INTEGER,
        random_bytes INTEGER, row_bytes INTEGER, pattern TEXT)""")
    con.execute("""CREATE TABLE epochs (
        run_id INTEGER NOT NULL, epoch INTEGER, seconds REAL, steps INTEGER, loss REAL)""")
    con.execute("""CREATE TABLE footprints (
        run_id INTEGER NOT NULL, tensor_class TEXT, bytes INTEGER, kind TEXT)""")


def _m3_control(con: sqlite3.Connection) -> None:
    # Cancellation, sweeps and crash evidence; indexes for live polling.
    for col in ("sweep TEXT", "cancel_requested INTEGER NOT NULL DEFAULT 0", "stderr_tail TEXT",
                "info TEXT", "pid_start INTEGER"):
        con.execute(f"ALTER TABLE runs ADD COLUMN {col}")
    con.execute("CREATE INDEX steps_run ON steps(run_id, step)")
    con.execute("CREATE INDEX kernel_steps_run ON kernel_steps(run_id, step)")
    con.execute("CREATE INDEX evals_run ON evals(run_id)")
    con.execute("CREATE INDEX events_run ON events(run_id)")
    con.execute("CREATE INDEX runs_status ON runs(status)")
    con.execute("CREATE INDEX runs_config ON runs(config)")


def _m4_provenance(con: sqlite3.Connection) -> None:
    # One spelling of where a number came from (provenance.Provenance): footprint rows said
    # 'predicted' for the bytes predicted from shapes, which are modeled. runs.measured already
    # holds 'measured' or 'modeled'. Literal values: a migration rewrites what was, once.
    con.execute("UPDATE footprints SET kind='modeled' WHERE kind='predicted'")


def _m5_request(con: sqlite3.Connection) -> None:
    # What trains a queued run other than the default loop (a DistDGL run: train_fn, options,
    # python), written by the INSERT that queues it: a runner claiming the run sees it with it.
    con.execute("ALTER TABLE runs ADD COLUMN request TEXT")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_m1_core, _m2_breakdowns, _m3_control, _m4_provenance,
                                                          _m5_request]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(con: sqlite3.Connection, upto: Optional[int] = None) -> int:
    """Apply pending migrations (up to version ``upto``, default latest) in one transaction.

    Returns the schema version afterwards. Refuses a database newer than this code.
    """
    target = SCHEMA_VERSION if upto is None else upto
    try:  # fast path without the write lock: readers open the store often
        row = con.execute("SELECT value FROM kv WHERE key='schema_version'").fetchone()
        if row and int(row[0]) == target:
            return target
    except sqlite3.OperationalError:
        pass  # no kv table yet: a new file
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT)")
        row = con.execute("SELECT value FROM kv WHERE key='schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise UserError(f"run store has schema version {version}, newer than this gnnrec-lab "
                            f"({SCHEMA_VERSION}); upgrade gnnrec-lab")
        for i in range(version, target):
            MIGRATIONS[i](con)
        version = max(version, target)
        con.execute("INSERT OR REPLACE INTO kv(key, value) VALUES ('schema_version', ?)", (str(version),))
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return version


class _Connection(sqlite3.Connection):
    """A store connection: a subclass only so that the store can hold weak references to them."""


def connect(path: "str | os.PathLike", create: bool = True) -> sqlite3.Connection:
    """An autocommit connection with WAL, NORMAL sync and a long busy timeout.

    ``create=False`` opens an existing file only: a store deleted under a running
    process is reported, never silently recreated empty.
    """
    if Path(path).is_dir():
        raise UserError(f"run store {path} is a directory, not a SQLite file: move it aside (a new store is "
                        f"then made there)")
    if create:
        con = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                              check_same_thread=False, factory=_Connection)
    else:
        from urllib.parse import quote
        try:
            con = sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=rw", uri=True,
                                  timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False,
                                  factory=_Connection)
        except sqlite3.OperationalError as e:
            raise UserError(f"run store {path} cannot be opened ({e}); was it deleted or moved? "
                            f"Restore it (runs recorded in it are only there), or move "
                            f"{Path(path).parent / 'runs'} aside to start a new store") from None
    con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # WAL: readers never block the writer; NORMAL: no fsync per commit in WAL mode. SQLite's
    # guarantee for WAL + NORMAL: a commit is atomic and survives the process being killed (the WAL
    # is in the OS's page cache); only a power loss or an OS crash can roll back the last commits,
    # never corrupt the file. A killed run is a process crash.
    _retry_busy(con, "PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    return con


def _retry_busy(con: sqlite3.Connection, sql: str) -> None:
    """Execute ``sql``, retrying while SQLite says the database is locked, up to the busy timeout.

    Switching a store to WAL needs an exclusive lock, and SQLite answers SQLITE_BUSY at once,
    without calling the busy handler, when another connection holds it (a process creating a new
    store at that moment): readers of a store being created saw "database is locked" there."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            con.execute(sql)
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


JSON_FIELDS = ("config", "host", "info", "result")   # runs columns that hold JSON objects


def parse_json_field(text, run_id, field: str) -> tuple:
    """``(value, damage)`` of run ``run_id``'s JSON column ``field``: the parsed object (None when
    empty) and None, or None and one line saying what is wrong ("config: not valid JSON (...)").
    One damaged row never takes the store down: readers list the run as damaged and go on."""
    if text is None or text == "" or (isinstance(text, float) and text != text):   # NULL read through pandas: NaN
        return None, None
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as e:   # JSONDecodeError, bytes that are not text
        return None, f"{field}: not valid JSON ({str(e).split(':')[0]})"
    if not isinstance(value, dict):
        return None, f"{field}: not a JSON object (a {type(value).__name__})"
    return value, None


def running_run_error(run_id) -> UserError:
    """Why a running run is not deleted (its worker still writes), and what to do."""
    return UserError(f"run {run_id} is running: cancel it first (`gnnrec-lab runs cancel {run_id}`), then delete it")


# A file of this size kept in the store's home, deleted when the disk fills so that a run's last
# words (its result and final status) still fit; made again when a store opens with room for it.
RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 256 * 1024
# a home with less free space than this is full (SQLite's WAL index alone takes 32 KiB)
FULL_DISK_BYTES = 1 << 20


def describe_store_error(e: BaseException, path) -> Optional[str]:
    """One line for a store failure that is not damage: a read-only file, directory or mount, or a
    full disk (None for anything else). SQLite says "attempt to write a readonly database" or "disk
    is full"; the OS says EROFS/EACCES/ENOSPC. The last two are worded as the home's own
    (:func:`gnnrec_lab.util.home.disk_full`, :func:`~gnnrec_lab.util.home.read_only`), the same for
    every command."""
    path = Path(path)
    text = str(e).lower()
    if is_full(e):
        return f"run store {path}: {disk_full(path.parent)} (the store was kept as it is)"
    if "database is locked" in text or "database is busy" in text:
        return (f"run store {path} is busy: another process held its lock for more than "
                f"{BUSY_TIMEOUT_MS / 1000:.0f} s (the store was kept as it is); try again, or look for a "
                f"process stuck writing to it (`fuser {path}`)")
    if is_read_only(e) or ("unable to open" in text and not os.access(path.parent, os.W_OK)):
        where = path if path.exists() and not os.access(path, os.W_OK) else path.parent
        return f"run store {path}: {read_only(where)} (the store needs to write its WAL and lock files)"
    return None


TIME_PARTS = ("startup_s", "jit_s", "train_s", "other_s")
# the test metrics runs_frame carries per run: evaluate.METRICS at K=20 (named here: evaluate imports torch)
TEST_METRICS = ("recall@20", "mrr@20", "ndcg@20", "hit@20", "precision@20")


def time_parts(started, end, info: Optional[dict], train_s) -> dict:
    """A run's wall time (``duration_s``, started -> finished or now) split into measured parts:

    * ``startup_s``: from the run's start to its training loop (interpreter, imports, data,
      graph and model), kernel compilation excluded;
    * ``jit_s``: kernel compilation / warm-up (numba; short once its disk cache is warm);
    * ``train_s``: the training steps (the sum of the steps' measured seconds);
    * ``other_s``: the rest (evaluation, recording, saving).

    Parts not known yet (a run that has not reached its training loop) are None. The parts
    add up to ``duration_s``. Compare and ``runs`` compare runs by ``train_s``.
    """
    def num(x):
        return None if x is None or x != x else float(x)   # None and NaN (pandas' missing) alike
    started, end, train_s = num(started), num(end), num(train_s)
    info = info or {}
    duration = (end - started) if (end and started) else None
    t_loop, jit = num(info.get("training_started")), num(info.get("jit_s"))
    startup = max(0.0, t_loop - started - (jit or 0.0)) if (t_loop and started) else None
    train = train_s if train_s is not None else (0.0 if startup is not None else None)
    other = (max(0.0, duration - startup - (jit or 0.0) - train)
             if None not in (duration, startup, train) else None)
    return {"duration_s": duration, "startup_s": startup, "jit_s": jit, "train_s": train, "other_s": other}


# a store an older gnnrec-lab (or one on a file system without hard links) is creating is 0 bytes for a
# moment; wait this long before calling it damaged (s)
EMPTY_GRACE_S = 1.0


def _damaged(path: Path, why: str) -> UserError:
    if why == "file is not a database":   # SQLite's words for a header that is not its own
        why = "not an SQLite database"
    return UserError(f"run store {path} is damaged ({why}); it was kept as it is. Recover what it holds with "
                     f"`sqlite3 {path} .recover > recovered.sql`, or move it aside (with its -wal file) to "
                     f"start a new store")


def check_store_file(path: Path) -> bool:
    """Whether a new store may be created at ``path``; raise UserError when the file that is
    there is empty, or it is missing while its run directories exist. A file that is there but not
    SQLite is reported when SQLite opens it (``_damaged``).

    This never opens the file itself: closing any descriptor of a file drops every POSIX lock this
    process holds on it (fcntl semantics), including the SHARED lock an open WAL connection keeps on
    the database for its whole life. With that lock gone, another process closing its last
    connection takes the EXCLUSIVE lock, checkpoints and deletes the WAL under this process's live
    connection, and the store reads as malformed afterwards (SQLite's "How To Corrupt", 2.2). So
    only ``stat`` here, which takes no descriptor; SQLite, which shares descriptors per file within
    a process, reads the header."""
    if path.exists():
        deadline = time.monotonic() + EMPTY_GRACE_S
        while True:
            try:
                size = path.stat().st_size
            except OSError as e:
                raise UserError(f"run store {path} cannot be read ({e.strerror})") from None
            if size or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not size:
            raise _damaged(path, "the file is empty (0 bytes)")
        return False
    runs = path.parent / "runs"
    if runs.is_dir() and any(p.name.isdigit() for p in runs.iterdir()):
        raise UserError(f"run store {path} is missing but {runs} holds the logs of earlier runs; restore "
                        f"lab.sqlite from a backup, or move {runs} aside to start a new, empty store")
    return True


NEW_STORE_SUFFIX = ".new"


def _sweep_unfinished_stores(path: Path) -> None:
    """Delete stores that creators killed before they were put in place (``.lab.sqlite.<pid>.new``
    whose pid is gone): they never held a run."""
    for tmp in path.parent.glob(f".{path.name}.*{NEW_STORE_SUFFIX}*"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()


def create_store_file(path: Path) -> None:
    """Make a new, migrated store at ``path`` atomically: a process killed at any moment leaves
    either no ``lab.sqlite`` or a complete one, never the 0-byte file SQLite opens first (which the
    next open must call damaged: it cannot tell it from a truncated store).

    The store is built under a private name next to ``path`` and linked into place; the link fails
    when another process put its store there first, and then that one is used. A file system without
    hard links gets the store made in place (the kill window is back there)."""
    _sweep_unfinished_stores(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}{NEW_STORE_SUFFIX}")
    try:
        con = connect(tmp, create=True)
        try:
            migrate(con)
        finally:
            con.close()      # the last connection: SQLite checkpoints and deletes the WAL
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass             # another process made the store meanwhile: theirs is the store
        except OSError:      # no hard links here: make it in place
            con = connect(path, create=True)
            con.close()
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            with contextlib.suppress(OSError):
                leftover.unlink()


class Store:
    """The run store. Safe to share across threads (one connection per thread).

    Opening never replaces a file that is there: a damaged, empty or deleted
    ``lab.sqlite`` is reported (UserError) and left as it is.
    """

    def __init__(self, home: "str | os.PathLike | None" = None):
        self.home = lab_home(home)
        ensure_home(self.home)
        # fixed name under home: workers find the same file from GNNREC_LAB_HOME alone
        self.path = self.home / "lab.sqlite"
        self._local = threading.local()
        # every connection opened, closed with the store (a sqlite3 connection is in a reference
        # cycle with its statement cache: dropped unclosed, it stays open until a garbage collection,
        # keeping the WAL and its space for a time nobody chose)
        self._cons = weakref.WeakSet()
        self._cons_lock = threading.Lock()
        self._no_writes: Optional[str] = None   # why every write fails at once (the read-only fallback)
        try:
            if check_store_file(self.path):
                create_store_file(self.path)
            self._local.con = self._open()
            self.schema_version = migrate(self._local.con)
        except (sqlite3.DatabaseError, OSError) as e:
            self.close()
            if not self._open_read_only(e):
                # a read-only home or a full disk is not damage: say which, and do not advise recovery
                raise UserError(describe_store_error(e, self.path) or str(_damaged(self.path, str(e)))) from None
        self._keep_reserve()

    def _open_read_only(self, e: BaseException) -> bool:
        """On a read-only mount, or a disk too full for SQLite to make its WAL index (``-shm``:
        "disk I/O error"), open the store read-only instead, so that runs are still listed; every
        write then fails as the mount or the full disk makes it fail. Safe only when no other process
        has the store open (else its ``-shm`` would hold its WAL index), so that its WAL was
        checkpointed into the file. Whether it was opened so."""
        try:
            st = os.statvfs(self.home)
        except OSError:
            return False
        full = st.f_bavail * st.f_frsize < FULL_DISK_BYTES   # (what shutil.disk_usage calls free)
        shm = self.path.with_name(self.path.name + "-shm")
        try:   # (the failed open may leave an empty one: no process has written it)
            in_use = shm.stat().st_blocks > 0
        except OSError:
            in_use = False
        if not self.path.exists() or in_use:
            return False
        if st.f_flag & os.ST_RDONLY:
            self._no_writes, why = "attempt to write a readonly database", read_only(self.home)
        elif full and (is_full(e) or "disk i/o error" in str(e).lower()):
            self._no_writes, why = "database or disk is full", disk_full(self.home)
        else:
            return False
        try:
            self._local.con = self._open()
            self.schema_version = migrate(self._local.con)   # (a store that needs a migration cannot be read so)
        except sqlite3.DatabaseError:
            self.close()
            raise UserError(f"run store {self.path}: {why} (the store was kept as it is)") from None
        return True

    # -- connections ------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if self._no_writes is None:
            con = connect(self.path, create=False)
        else:   # read-only and unchanging: no lock, no WAL index (nobody else has the store open)
            from urllib.parse import quote
            con = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}?mode=ro&immutable=1", uri=True,
                                  isolation_level=None, check_same_thread=False, factory=_Connection)
        with self._cons_lock:
            self._cons.add(con)
        return con

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = self._open()
        return con

    def close(self) -> None:
        """Close this thread's connection (another thread's closes with :meth:`close_all`, or when the
        store is dropped)."""
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

    def close_all(self) -> None:
        """Close every connection of this store, on every thread (none of them may be in use)."""
        with self._cons_lock:
            cons = list(self._cons)
            self._cons.clear()
        for con in cons:
            with contextlib.suppress(sqlite3.Error):
                con.close()
        self._local = threading.local()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close_all()

    def __del__(self):
        # no method of this store runs now (it would hold a reference): its connections are unused
        with contextlib.suppress(Exception):
            self.close_all()

    # -- the space reserve ---------------------------------------------------
    def _keep_reserve(self) -> None:
        """Make the space reserve (:data:`RESERVE_NAME`) when it is missing and fits; never fails."""
        path = self.home / RESERVE_NAME
        if path.exists():
            return
        tmp = path.with_name(f"{RESERVE_NAME}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(bytes(RESERVE_BYTES))
            os.replace(tmp, path)
        except OSError:   # no room (or a read-only home): the store works without it
            with contextlib.suppress(OSError):
                tmp.unlink()

    def release_reserve(self) -> bool:
        """Delete the space reserve; whether there was one to free."""
        try:
            (self.home / RESERVE_NAME).unlink()
            return True
        except OSError:
            return False

    def _last_write(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """``body(con)`` in one write transaction that must land even on a full disk (a run's result,
        its final status): when the disk is full, free the space reserve and try once more."""
        try:
            with self._write() as con:
                return body(con)
        except sqlite3.OperationalError as e:
            if not is_full(e) or not self.release_reserve():
                raise
        with self._write() as con:
            return body(con)

    @contextlib.contextmanager
    def _write(self):
        """One short write transaction; taken IMMEDIATE so it never has to upgrade a read lock."""
        if self._no_writes:
            raise sqlite3.OperationalError(self._no_writes)
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    @contextlib.contextmanager
    def snapshot(self):
        """Reads of this store inside the block see one committed state: one SQLite read
        transaction on this thread's connection, so a step a worker commits meanwhile (its step
        row and its kernel rows) is seen by every read of the block or by none.

        For reads only (a write inside raises ``sqlite3.OperationalError``). Inside another
        snapshot it joins that one. Yields the store.
        """
        con = self._con()
        if con.in_transaction:
            yield self
            return
        con.execute("BEGIN")
        try:
            yield self
        finally:
            con.execute("COMMIT")   # read-only: nothing to write, ends the snapshot

    def _query(self, sql: str, params: Sequence = ()) -> list[tuple]:
        return self._con().execute(sql, params).fetchall()

    def _frame(self, sql: str, params: Sequence = ()):
        import pandas as pd
        cur = self._con().execute(sql, params)
        cols = [d[0] for d in cur.description]
        return pd.DataFrame(cur.fetchall(), columns=cols)

    def run_dir(self, run_id: int) -> Path:
        """Directory for run ``run_id``'s stdout/stderr logs (created on demand)."""
        d = self.home / "runs" / str(int(run_id))
        d.mkdir(parents=True, exist_ok=True)
        return d

    # -- runs ---------------------------------------------------------------
    def add_run(self, config, status: RunStatus = RunStatus.QUEUED, sweep: Optional[str] = None,
                request: Optional[dict] = None, pid: Optional[int] = None) -> int:
        """Insert a run for ``config`` (a RunConfig) and return its id. ``request``: what trains it
        other than the default loop (:meth:`Runner.launch <gnnrec_lab.runs.runner.Runner.launch>`'s
        ``train_fn``, ``options``, ``python``), stored in the same row (:meth:`run_request`). ``pid``:
        the process that writes it (a run trained in this process), in the same row, so a process
        killed at any moment leaves no running row without the pid that tells it is gone."""
        status = _checked_status(status)
        expect_config(config, "Store.add_run")
        now = time.time()
        with self._write() as con:
            cur = con.execute(
                "INSERT INTO runs(name, config, status, created, started, measured, sweep, request, pid, pid_start) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (config.name, config.to_json(), status, now, now if status is RunStatus.RUNNING else None,
                 Provenance.of(config.measured), sweep, json.dumps(request) if request else None,
                 pid, proc_start_ticks(pid) if pid else None))
            return int(cur.lastrowid)

    def run_request(self, run_id: int) -> dict:
        """Run ``run_id``'s request (see :meth:`add_run`); ``{}`` for a run of the default loop."""
        row = self._query("SELECT request FROM runs WHERE id=?", (int(run_id),))
        if not row:
            raise UserError(f"run {run_id}: no such run in {self.path}")
        return json.loads(row[0][0]) if row[0][0] else {}

    def get_run(self, run_id: int, need: Sequence[str] = ()) -> dict:
        """One run as a dict; ``config``/``host``/``info``/``result`` parsed from JSON (a damaged one is
        None and named in ``damaged``, a list of one-line reasons); ``duration_s`` and its parts
        (:func:`time_parts`: ``startup_s``, ``jit_s``, ``train_s``, ``other_s``) added. ``need``: JSON
        columns the caller cannot do without; one of them damaged raises UserError naming it."""
        con = self._con()
        cur = con.execute("SELECT * FROM runs WHERE id=?", (int(run_id),))
        row = cur.fetchone()
        if row is None:
            raise UserError(f"run {run_id}: no such run in {self.path}")
        d = dict(zip([c[0] for c in cur.description], row))
        d["damaged"] = []   # one line per damaged JSON column (that column is None)
        for k in JSON_FIELDS:
            d[k], why = parse_json_field(d[k], run_id, k)
            if why:
                d["damaged"].append(why)
        bad = [w for w in d["damaged"] if w.split(":")[0] in need]
        if bad:
            raise UserError(f"run {run_id} is damaged: {bad[0]}; the row was kept as it is "
                            f"(`gnnrec-lab runs show {run_id}` shows what is readable)")
        d["cancel_requested"] = bool(d["cancel_requested"])
        d["status"] = RunStatus(d["status"])   # SQLite holds the plain value
        end = d["finished"] or (time.time() if d["status"] is RunStatus.RUNNING else None)
        train_s = con.execute("SELECT SUM(seconds) FROM steps WHERE run_id=?", (int(run_id),)).fetchone()[0]
        d.update(time_parts(d["started"], end, d["info"], train_s))
        return d

    def run_record(self, run_id: int, need: Sequence[str] = ()) -> RunRecord:
        """One run with typed sections (:class:`~gnnrec_lab.runs.record.RunRecord`): its config, host,
        info and result as read by :meth:`get_run` (``need`` as there), an absent or damaged one empty."""
        return RunRecord.of(self.get_run(run_id, need))

    def status(self, run_id: int) -> RunStatus:
        row = self._query("SELECT status FROM runs WHERE id=?", (int(run_id),))
        if not row:
            raise UserError(f"run {run_id}: no such run in {self.path}")
        return RunStatus(row[0][0])

    def set_status(self, run_id: int, status: RunStatus, *, error: Optional[str] = None,
                   only_if: Optional[Iterable[RunStatus]] = None, **fields) -> bool:
        """Set a run's status (and ``error``, ``pid``, ``pid_start``, ``stderr_tail``, ``result``...).

        Entering ``running`` stamps ``started``; entering a terminal status stamps
        ``finished``. With ``only_if``, change nothing unless the current status is
        one of those (so a runner never overwrites what the worker decided).
        Returns whether the row changed.
        """
        status = _checked_status(status)
        allowed = {"pid", "pid_start", "stderr_tail", "result", "host", "info"}
        bad = set(fields) - allowed
        if bad:
            raise TypeError(f"unknown run fields {sorted(bad)}")
        sets = {"status": status, **fields}
        if error is not None:
            sets["error"] = error
        if "result" in sets and not isinstance(sets["result"], (str, type(None))):
            sets["result"] = json.dumps(sets["result"])
        now = time.time()
        if status is RunStatus.RUNNING:
            sets["started"] = now
        if status.is_terminal:
            sets["finished"] = now
        sql = "UPDATE runs SET " + ", ".join(f"{k}=?" for k in sets) + " WHERE id=?"
        params = list(sets.values()) + [int(run_id)]
        if only_if is not None:
            only = tuple(only_if)
            sql += " AND status IN (" + ",".join("?" * len(only)) + ")"
            params += list(only)
        if status.is_terminal:
            return self._last_write(lambda con: con.execute(sql, params).rowcount) > 0
        with self._write() as con:
            return con.execute(sql, params).rowcount > 0

    def set_fields(self, run_id: int, **fields) -> None:
        """Update plain columns of a run (pid, pid_start, stderr_tail, host, info) without a status change."""
        allowed = {"pid", "pid_start", "stderr_tail", "host", "info", "error"}
        if not fields or set(fields) - allowed:
            raise TypeError(f"fields must be among {sorted(allowed)}, got {sorted(fields)}")
        with self._write() as con:
            con.execute("UPDATE runs SET " + ", ".join(f"{k}=?" for k in fields) + " WHERE id=?",
                        list(fields.values()) + [int(run_id)])

    def claim_queued(self, max_running: int) -> Optional[int]:
        """Atomically move the oldest queued run to ``running`` if fewer than ``max_running`` run.

        Returns the claimed run id, or None. Safe across processes: count and claim
        happen in one write transaction.
        """
        # read-only pre-check: pollers call this often, and the write lock would
        # make every call queue behind the workers' step transactions
        queued, running = RunStatus.QUEUED, RunStatus.RUNNING
        q, n = self._query("SELECT SUM(status=?), SUM(status=?) FROM runs WHERE status IN (?, ?)",
                           (queued, running, queued, running))[0]
        if not q or (n or 0) >= max_running:
            return None
        with self._write() as con:
            n = con.execute("SELECT COUNT(*) FROM runs WHERE status=?", (running,)).fetchone()[0]
            if n >= max_running:
                return None
            row = con.execute("SELECT id FROM runs WHERE status=? ORDER BY id LIMIT 1", (queued,)).fetchone()
            if row is None:
                return None
            # the claimer's pid until its worker's replaces it: a runner killed before it spawned
            # the worker leaves a run that the next open sees is gone
            me = os.getpid()
            con.execute("UPDATE runs SET status=?, started=?, pid=?, pid_start=? WHERE id=?",
                        (running, time.time(), me, proc_start_ticks(me), row[0]))
            return int(row[0])

    def request_cancel(self, run_id: int) -> RunStatus:
        """Raise the cancel flag; a queued run is cancelled at once. Returns the status afterwards."""
        with self._write() as con:
            con.execute("UPDATE runs SET cancel_requested=1 WHERE id=?", (int(run_id),))
            con.execute("UPDATE runs SET status=?, finished=?, error='cancelled before it started' "
                        "WHERE id=? AND status=?", (RunStatus.CANCELLED, time.time(), int(run_id), RunStatus.QUEUED))
        return self.status(run_id)

    def rename_run(self, run_id: int, name: str) -> str:
        """Give run ``run_id`` the name ``name`` (checked as RunConfig's ``name``: not empty, at most
        :data:`~gnnrec_lab.config.run.RUN_NAME_MAX` characters, no control characters; ConfigError
        naming ``name``). The stored config's ``name`` follows, so the run and its config agree. A run
        not in the store is a UserError naming its id. Returns the name."""
        name = check_run_name("name", name, empty=False)
        with self._write() as con:
            row = con.execute("SELECT config FROM runs WHERE id=?", (int(run_id),)).fetchone()
            if row is None:
                raise UserError(f"run {run_id}: no such run in {self.path}")
            cfg, damage = parse_json_field(row[0], run_id, "config")
            con.execute("UPDATE runs SET name=? WHERE id=?", (name, int(run_id)))
            if cfg is not None and damage is None:   # a damaged config is kept as it is
                cfg["name"] = name
                con.execute("UPDATE runs SET config=? WHERE id=?", (json.dumps(cfg), int(run_id)))
        return name

    # the tables that hold a run's rows, each keyed by its run_id (the runs row itself by id)
    RUN_TABLES = ("steps", "evals", "events", "kernel_steps", "epochs", "footprints")

    def delete_run(self, run_id: int) -> dict:
        """Delete run ``run_id``: its row, its rows in every table of :data:`RUN_TABLES` and its
        directory of logs (``$GNNREC_LAB_HOME/runs/<id>``), nothing else. A running run is refused
        (cancel it first: its worker still writes); a run not in the store is a UserError naming its
        id. The rows go in one transaction, the files after it. Returns ``{table: rows deleted}`` and
        ``"files"``, the directory removed (None when there was none)."""
        import shutil
        rid = int(run_id)
        deleted: dict = {}
        with self._write() as con:
            row = con.execute("SELECT status FROM runs WHERE id=?", (rid,)).fetchone()
            if row is None:
                raise UserError(f"run {run_id}: no such run in {self.path}")
            if RunStatus.of(row[0]) is RunStatus.RUNNING:
                raise running_run_error(run_id)
            for table in self.RUN_TABLES:
                deleted[table] = con.execute(f"DELETE FROM {table} WHERE run_id=?", (rid,)).rowcount
            deleted["runs"] = con.execute("DELETE FROM runs WHERE id=?", (rid,)).rowcount
        d = self.home / "runs" / str(rid)
        deleted["files"] = None
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d)
            deleted["files"] = str(d)
        elif d.is_symlink() or d.exists():   # not a directory the store made: only the name goes
            d.unlink()
            deleted["files"] = str(d)
        return deleted

    def cancel_requested(self, run_id: int) -> bool:
        row = self._query("SELECT cancel_requested FROM runs WHERE id=?", (int(run_id),))
        return bool(row and row[0][0])

    def find_finished(self, config_json: str) -> Optional[int]:
        """Id of the newest finished run whose config JSON equals ``config_json`` exactly, else None."""
        row = self._query("SELECT id FROM runs WHERE config=? AND status=? ORDER BY id DESC LIMIT 1",
                          (config_json, RunStatus.FINISHED))
        return int(row[0][0]) if row else None

    def run_ids(self, status: Optional[RunStatus] = None, name: Optional[str] = None) -> list[int]:
        """Ids of the runs (of ``status``, named ``name`` where given), oldest first."""
        where = [(c, v) for c, v in (("status", status), ("name", name)) if v is not None]
        sql = "SELECT id FROM runs" + (" WHERE " + " AND ".join(f"{c}=?" for c, _ in where) if where else "")
        return [r[0] for r in self._query(sql + " ORDER BY id", tuple(v for _, v in where))]

    # -- what the training loop reports ------------------------------------
    def record_start(self, run_id: int, info: dict) -> None:
        """Store ``info`` (host, dataset counts, predicted footprint by tensor class in bytes, ``jit_s``);
        ``training_started`` (Unix s) stamps when the run reached its training loop."""
        info = dict(info or {})
        info.setdefault("training_started", time.time())
        host = info.get("host")
        predicted = None
        for key in ("predicted_footprint", "footprint_predicted", "footprint"):
            if isinstance(info.get(key), dict):
                predicted = info[key]
                break
        with self._write() as con:
            con.execute("UPDATE runs SET info=?, host=COALESCE(?, host) WHERE id=?",
                        (json.dumps(info, default=str), json.dumps(host, default=str) if host else None,
                         int(run_id)))
            if predicted:
                self._insert_footprint(con, run_id, predicted, Provenance.MODELED)

    def record_load(self, run_id: int, load: dict) -> None:
        """Keep the run's load samples (``{point: proc.load_sample()}``, measured) in its info as ``load``."""
        with self._write() as con:
            row = con.execute("SELECT info FROM runs WHERE id=?", (int(run_id),)).fetchone()
            info, damage = parse_json_field(row[0] if row else None, run_id, "info")
            if damage:   # keep a damaged row as it is rather than overwrite what it holds
                return
            info = info or {}
            info["load"] = dict(load)
            con.execute("UPDATE runs SET info=? WHERE id=?", (json.dumps(info, default=str), int(run_id)))

    def add_step(self, run_id: int, step: int, epoch: int, loss: float, seconds: float,
                 records: Sequence = ()) -> None:
        """Persist one step and its kernel records (aggregated by name/phase/layer/pattern) in one transaction."""
        agg = sum_records(records, store_key)
        rows = [(run_id, step, *k, *t.values()) for k, t in agg.items()]
        with self._write() as con:
            con.execute("INSERT INTO steps(run_id, step, epoch, loss, seconds, wall) VALUES (?,?,?,?,?,?)",
                        (int(run_id), int(step), int(epoch), float(loss), float(seconds), time.time()))
            if rows:
                con.executemany(_INSERT_KERNEL_STEPS, rows)

    def add_epoch(self, run_id: int, epoch: int, seconds: float, steps: int, loss: float) -> None:
        with self._write() as con:
            con.execute("INSERT INTO epochs(run_id, epoch, seconds, steps, loss) VALUES (?,?,?,?,?)",
                        (int(run_id), int(epoch), float(seconds), int(steps), float(loss)))

    def add_eval(self, run_id: int, epoch: int, step: int, split: str, metrics: dict, elapsed_s: float) -> None:
        """One row per numeric metric (e.g. ``recall@20``) of one evaluation."""
        rows = [(int(run_id), int(epoch), int(step), split, str(k), float(v), float(elapsed_s))
                for k, v in (metrics or {}).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)]
        with self._write() as con:
            con.executemany("INSERT INTO evals(run_id, epoch, step, split, metric, value, elapsed_s) "
                            "VALUES (?,?,?,?,?,?,?)", rows)

    def add_event(self, run_id: int, kind: str, message: str) -> None:
        with self._write() as con:
            con.execute("INSERT INTO events(run_id, time, kind, message) VALUES (?,?,?,?)",
                        (int(run_id), time.time(), str(kind), str(message)))

    def add_footprint(self, run_id: int, footprint: dict, kind: str) -> None:
        """Bytes per tensor class; ``kind`` is MODELED (predicted from shapes; the older spelling
        predicted is read as that) or MEASURED (allocated), a :class:`Provenance`."""
        with self._write() as con:
            self._insert_footprint(con, run_id, footprint, kind)

    @staticmethod
    def _insert_footprint(con, run_id, footprint: dict, kind: str) -> None:
        try:
            kind = Provenance(kind)
        except ValueError:
            pass
        if kind not in FOOTPRINT_KINDS:
            raise ValueError(f"footprint kind must be one of {tuple(map(str, FOOTPRINT_KINDS))}, got {kind!r}")
        con.execute("DELETE FROM footprints WHERE run_id=? AND kind=?", (int(run_id), kind))
        con.executemany("INSERT INTO footprints(run_id, tensor_class, bytes, kind) VALUES (?,?,?,?)",
                        [(int(run_id), str(c), int(b), kind) for c, b in footprint.items()
                         if isinstance(b, (int, float)) and not isinstance(b, bool)])

    def record_result(self, run_id: int, result: Any) -> None:
        """Store a RunResult (or its dict). Its footprint is stored in one shape
        (:class:`~gnnrec_lab.memory.footprint.Footprint`, whatever shape a caller's dict had)
        and lands in the footprints table, each part as rows of its kind (:func:`~gnnrec_lab.util.provenance.parts`):
        predicted bytes as MODELED rows, measured ones (``peak_rss`` among them) as MEASURED rows."""
        d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
        fp = None
        if d.get("footprint") is not None:
            fp = Footprint.from_dict(d["footprint"])
            d["footprint"] = fp.to_dict()
        text = json.dumps(d, default=str)

        def write(con):
            con.execute("UPDATE runs SET result=? WHERE id=?", (text, int(run_id)))
            for name, kind in (parts(fp) if fp is not None else {}).items():
                if getattr(fp, name):
                    self._insert_footprint(con, run_id, getattr(fp, name), kind)
        self._last_write(write)

    def reporter(self, run_id: int, poll_s: float = 0.5) -> "StoreReporter":
        """A Reporter that persists everything the training loop reports for ``run_id``."""
        return StoreReporter(self, run_id, poll_s=poll_s)

    # -- readers (pandas) ------------------------------------------------
    def runs_frame(self, status: Optional[RunStatus] = None):
        """One row per run: identity, status, config essentials, timings (s) and headline metrics.

        ``measured`` is the :class:`~gnnrec_lab.util.provenance.Provenance` of the run's times on its
        memory mode: measured for ``dram`` (this host's memory), modeled for a modeled device (timed
        on this host's DRAM; the device's time is the tier model's projection, ``modeled_*``).
        ``status`` holds the stored value (a plain string, equal to its :class:`RunStatus`).

        ``best_valid_recall@20`` is the best validation Recall@20 seen;
        ``test_recall@20`` the last test Recall@20 recorded, and likewise ``test_ndcg@20``,
        ``test_mrr@20``, ``test_hit@20``, ``test_precision@20`` (:data:`TEST_METRICS`); ``duration_s`` and its parts
        ``startup_s``, ``jit_s``, ``train_s``, ``other_s`` as in :func:`time_parts`; ``load_max``
        (the highest 1-minute load average sampled during the run), ``cpus`` and ``overloaded``
        (that load exceeded the cores: :func:`~gnnrec_lab.util.proc.load_summary`); ``step_s`` the mean
        training step (measured).

        The frame is the store's own, with no tier model in it: ``device_profile`` (the config's) and
        ``modeled_s_per_step``, ``measured_s_per_step``, ``modeled_base`` (the run's stored projection,
        ``result.modeled``, and the robust step it starts from; NaN until it has one) are what
        :func:`gnnrec_lab.services.projection.with_modeled` turns into the columns every view shows:
        ``device`` and, for a modeled memory mode, ``modeled_ratio``,
        ``modeled_step_s``, ``modeled_train_s`` (*modeled*). Views read
        :func:`gnnrec_lab.services.projection.modeled_runs_frame`.
        """
        import pandas as pd
        sql = """SELECT r.id, r.name, r.status, r.measured, r.created, r.started, r.finished,
                   r.sweep, r.pid, r.error, r.config, r.info,
                   (SELECT SUM(seconds) FROM steps s WHERE s.run_id=r.id) AS train_s,
                   (SELECT MAX(value) FROM evals e WHERE e.run_id=r.id AND e.split='valid'
                      AND lower(e.metric)='recall@20') AS "best_valid_recall@20",
{test_metrics}
                   (SELECT MAX(step) FROM steps s WHERE s.run_id=r.id) AS last_step,
                   (SELECT COUNT(*) FROM steps s WHERE s.run_id=r.id) AS n_steps,
                   CASE WHEN json_valid(r.result) THEN json_extract(r.result, '$.modeled.modeled_s_per_step')
                   END AS modeled_s_per_step,
                   CASE WHEN json_valid(r.result) THEN json_extract(r.result, '$.modeled.measured_s_per_step')
                   END AS measured_s_per_step,
                   CASE WHEN json_valid(r.result) THEN json_extract(r.result, '$.modeled.regimes')
                   END AS modeled_regimes,
                   CASE WHEN json_valid(r.result) THEN json_extract(r.result, '$.modeled.calibration_flags')
                   END AS modeled_calibration_flags,
                   CASE WHEN json_valid(r.result) THEN json_extract(r.result, '$.modeled.base')
                   END AS modeled_base
                 FROM runs r""".replace("{test_metrics}", "\n".join(
            f"""                   (SELECT value FROM evals e WHERE e.run_id=r.id AND e.split='test'
                      AND lower(e.metric)='{m}' ORDER BY e.rowid DESC LIMIT 1) AS "test_{m}","""
            for m in TEST_METRICS))
        params: tuple = ()
        if status is not None:
            sql += " WHERE r.status=?"
            params = (status,)
        df = self._frame(sql + " ORDER BY r.id", params)
        # a damaged JSON column leaves its run listed, with ``damaged`` saying which column and why
        parsed = [(parse_json_field(c, r, "config"), parse_json_field(i, r, "info"))
                  for r, c, i in zip(df["id"], df["config"], df["info"])]
        cfgs = [c[0] or {} for c, _ in parsed]
        infos = [i[0] for _, i in parsed]
        df["damaged"] = pd.Series(["; ".join(w for w in (c[1], i[1]) if w) or None for c, i in parsed],
                                  index=df.index, dtype=object)
        for key in ("dataset", "model", "layers", "dim", "batch_size", "memory_mode", *shape_keys(), "mode",
                    "backend"):
            df[key] = [c.get(key) for c in cfgs]
        df["device_profile"] = [c.get("device_profile") for c in cfgs]   # services.projection's device
        df["precision"] = [c.get("precision") or "fp32" for c in cfgs]   # runs stored before the field: fp32
        now = time.time()
        end = df["finished"].where(df["finished"].notna(),
                                   df["status"].map(lambda s: now if s == RunStatus.RUNNING else None))
        parts = [time_parts(s, e, i, t) for s, e, i, t in zip(df["started"], end.astype(float), infos, df["train_s"])]
        for key in ("duration_s",) + TIME_PARTS:
            df[key] = pd.Series([p[key] for p in parts], index=df.index, dtype=float)
        loads = [load_summary((i or {}).get("load")) or {} for i in infos]
        df["load_max"] = pd.Series([s.get("max_load1") for s in loads], index=df.index, dtype=float)
        df["cpus"] = [s.get("cpus") for s in loads]
        df["overloaded"] = [s.get("overloaded") for s in loads]
        # measured mean training step; the stored projection's per-step seconds go last, as they were
        # stored (services.projection.with_modeled models the run's durations from them)
        df["step_s"] = (df["train_s"].astype(float) / df["n_steps"].where(df["n_steps"] > 0)).astype(float)
        for key in ("modeled_s_per_step", "measured_s_per_step", "modeled_regimes", "modeled_calibration_flags",
                    "modeled_base"):
            df[key] = df.pop(key)
        for col in ("created", "started", "finished"):
            df[col] = pd.to_datetime(df[col], unit="s", utc=True)
        return df.drop(columns=["config", "info"])

    def steps_frame(self, run_id: int):
        """Steps of a run: step, epoch, loss, seconds (training time of the step), wall (Unix s)."""
        return self._frame("SELECT step, epoch, loss, seconds, wall FROM steps WHERE run_id=? ORDER BY step, rowid",
                           (int(run_id),))

    def latest_steps(self, run_id: int, since_step: int = -1):
        """Steps with ``step > since_step`` (for live polling), as in :meth:`steps_frame`."""
        return self._frame("SELECT step, epoch, loss, seconds, wall FROM steps WHERE run_id=? AND step>? "
                           "ORDER BY step, rowid", (int(run_id), int(since_step)))

    def kernels_frame(self, run_id: int, since_step: int = -1):
        """Kernel records aggregated per step (ns, bytes, flops are sums over ``calls``); only steps
        ``> since_step`` (live polling reads what is new)."""
        return self._frame(f"SELECT step, name, phase, layer, {', '.join(TOTAL_FIELDS)}, pattern FROM kernel_steps "
                           "WHERE run_id=? AND step>? ORDER BY step, rowid", (int(run_id), int(since_step)))

    def kernel_step_count(self, run_id: int) -> int:
        """How many distinct steps of the run have kernel records."""
        return int(self._query("SELECT COUNT(DISTINCT step) FROM kernel_steps WHERE run_id=?", (int(run_id),))[0][0])

    def kernel_totals_frame(self, run_id: int, since_step: int = -1):
        """Kernel totals over steps ``> since_step``, one row per (name, phase, layer, pattern).

        Summed in SQL, so a breakdown of a long run does not load every step's rows.
        ``steps`` counts the steps the kernel appeared in; ns/bytes/flops are sums.
        """
        key = ", ".join(STORE_KEY)
        sums = ", ".join(f"SUM({c}) AS {c}" for c in SUMMED_FIELDS)
        return self._frame(
            f"SELECT {key}, COUNT(*) AS steps, {sums}, MAX(row_bytes) AS row_bytes FROM kernel_steps "
            f"WHERE run_id=? AND step>? GROUP BY {key} ORDER BY SUM(ns) DESC",
            (int(run_id), int(since_step)))

    def epochs_frame(self, run_id: int):
        return self._frame("SELECT epoch, seconds, steps, loss FROM epochs WHERE run_id=? ORDER BY epoch, rowid",
                           (int(run_id),))

    def evals_frame(self, run_ids: "int | Iterable[int]"):
        """Evaluations of one or several runs, long format: run_id, epoch, step, split, metric, value, elapsed_s."""
        ids = [int(run_ids)] if isinstance(run_ids, int) else [int(r) for r in run_ids]
        if not ids:
            ids = [-1]
        return self._frame("SELECT run_id, epoch, step, split, metric, value, elapsed_s FROM evals WHERE run_id IN ("
                           + ",".join("?" * len(ids)) + ") ORDER BY run_id, rowid", ids)

    def footprint_frame(self, run_id: int):
        """Bytes per tensor class; ``kind`` says modeled (predicted from shapes; spelled predicted in
        stores before schema 4, which opening migrates) or measured (allocated)."""
        return self._frame("SELECT tensor_class, bytes, kind FROM footprints WHERE run_id=? ORDER BY kind, rowid",
                           (int(run_id),))

    def events_frame(self, run_id: int):
        return self._frame("SELECT time, kind, message FROM events WHERE run_id=? ORDER BY rowid", (int(run_id),))

    def events_after(self, run_id: int, after: int = 0) -> list[tuple[int, str, str]]:
        """Run ``run_id``'s events recorded after the one numbered ``after`` (0: all), oldest first, as
        ``(number, kind, message)``: what a follower of a run has not shown yet (no pandas)."""
        return [(int(n), k, m) for n, k, m in self._query(
            "SELECT rowid, kind, message FROM events WHERE run_id=? AND rowid>? ORDER BY rowid",
            (int(run_id), int(after)))]

    def integrity_check(self) -> str:
        """SQLite's own consistency check: 'ok' when the file is sound."""
        return self._query("PRAGMA integrity_check")[0][0]


class StoreReporter(Reporter):
    """Persists what ``train()`` reports; ``should_stop`` reads the cancel flag at most every ``poll_s`` s."""

    def __init__(self, store: Store, run_id: int, poll_s: float = 0.5):
        self.store = store
        self.run_id = int(run_id)
        self.poll_s = poll_s
        self._next_check = 0.0
        self._stop = False
        self.recorded = False   # on_finish wrote the result (the worker does not write it again)

    def on_start(self, config, info: dict) -> None:
        self.store.record_start(self.run_id, info)

    def on_step(self, step, epoch, loss, seconds, records) -> None:
        self.store.add_step(self.run_id, step, epoch, loss, seconds, records)

    def on_epoch(self, epoch, seconds, steps, loss) -> None:
        self.store.add_epoch(self.run_id, epoch, seconds, steps, loss)

    def on_eval(self, epoch, step, split, metrics, elapsed_s) -> None:
        self.store.add_eval(self.run_id, epoch, step, split, metrics, elapsed_s)

    def on_event(self, kind, message) -> None:
        self.store.add_event(self.run_id, kind, message)

    def on_load(self, load) -> None:
        self.store.record_load(self.run_id, load)

    def on_finish(self, result) -> None:
        self.store.record_result(self.run_id, result)
        self.recorded = True

    def should_stop(self) -> bool:
        if self._stop:
            return True
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.poll_s
            self._stop = self.store.cancel_requested(self.run_id)
        return self._stop
