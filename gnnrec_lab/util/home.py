"""Where the lab keeps its state: the run store, the host calibration, measured device profiles
and (unless a run names its own data directory) the prepared datasets.

Every command that creates or writes the home goes through :func:`ensure_home`; a file where the
home should be (:func:`home_is_file`), a read-only directory or mount (:func:`read_only`) and a full
disk (:func:`disk_full`) read the same whichever command met them."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Optional

from gnnrec_lab.util.errors import UserError

ENV = "GNNREC_LAB_HOME"


def lab_home(home: "str | os.PathLike | None" = None) -> Path:
    """The lab's state directory: ``home`` if given, else ``$GNNREC_LAB_HOME``, else ``~/.gnnrec_lab``."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else Path.home() / ".gnnrec_lab"


def no_space_left(where) -> str:
    """"no space left on DIR (N bytes free)": the one wording of a full disk, with what is free now."""
    try:
        free = f"{shutil.disk_usage(where).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    return f"no space left on {where} ({free})"


def is_full(e: BaseException) -> bool:
    """Whether ``e`` says the disk is full: SQLite's "database or disk is full" or the OS's ENOSPC."""
    return "disk is full" in str(e).lower() or getattr(e, "errno", None) == errno.ENOSPC


def is_read_only(e: BaseException) -> bool:
    """Whether ``e`` says a write was refused: SQLite's "readonly database" or EROFS/EACCES/EPERM."""
    text = str(e).lower()
    return ("readonly" in text or "read-only" in text
            or getattr(e, "errno", None) in (errno.EROFS, errno.EACCES, errno.EPERM))


def home_is_file(home: Path) -> str:
    return (f"{home} is a file, not a directory: point {ENV} at a directory (the lab keeps its run store and "
            f"calibration there)")


def disk_full(where: Path) -> str:
    return (f"the disk is full: {no_space_left(where)}; free space on it, or set {ENV} to a directory on "
            f"another disk")


def read_only(where: Path) -> str:
    return (f"{where} is read-only (no write permission, or a read-only mount); set {ENV} to a writable "
            f"directory")


def home_problem(e: BaseException, where: Path) -> Optional[str]:
    """The one wording of a write that failed under the home (``where``: the directory or file
    written): the full disk, the read-only directory or mount; None for anything else."""
    where = Path(where)
    if is_full(e):
        return disk_full(where if where.is_dir() else where.parent)
    if is_read_only(e):
        return read_only(where)
    return None


def refuse_a_file(home: "str | os.PathLike | None" = None) -> Path:
    """The home (see :func:`lab_home`); UserError when a file is there (for commands that only read)."""
    home = lab_home(home)
    if home.exists() and not home.is_dir():
        raise UserError(f"{ENV}: {home_is_file(home)}")
    return home


def ensure_home(home: "str | os.PathLike | None" = None, write: bool = False) -> Path:
    """The home (see :func:`lab_home`), created when missing; UserError naming ``GNNREC_LAB_HOME``
    when it is a file, cannot be created, or (``write=True``: for a command that will write there
    before anything else can fail, such as ``calibrate``) cannot take a small file now."""
    home = refuse_a_file(home)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except FileExistsError:   # a file somewhere above it
        raise UserError(f"{ENV}: cannot create {home}: a file is in its path") from None
    except OSError as e:
        above = next((p for p in home.parents if p.exists()), home)
        raise UserError(f"{ENV}: {home_problem(e, above) or f'cannot create {home} ({e.strerror})'}") from None
    if write:
        probe = home / f".write-probe.{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                f.write(b"\0" * 4096)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise UserError(f"{ENV}: {home_problem(e, home) or f'cannot write in {home} ({e.strerror})'}") from None
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
    return home
