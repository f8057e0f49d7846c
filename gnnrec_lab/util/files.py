"""Files written whole or not at all."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(path: "str | os.PathLike", text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` so that a reader, or a process killed mid-write, never leaves or
    sees a half-written file: a private temporary beside it (same filesystem), flushed to the disk,
    then renamed over ``path`` (atomic on POSIX). Concurrent writers each rename their own whole
    file; the last one wins. Returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(text):x}.tmp")
    try:
        with open(tmp, "w", encoding=encoding) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path
