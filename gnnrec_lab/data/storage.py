"""On-disk cache of prepared datasets: streamed ``.npy`` files and atomic directories.

A prepared dataset is one directory under the data directory. It is always built
in a temporary sibling directory and renamed into place, so a crash mid-write
leaves at most a ``.tmp-*`` directory behind, never a half-written dataset. A
directory is trusted only when its ``meta.json`` parses and every array it lists
opens with the recorded shape (a truncated ``.npy`` fails to memory-map).
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

# Fixed-size .npy header (magic + version + length + dict, padded with spaces), so a
# file can be streamed chunk by chunk and its shape filled in at the end. 128 bytes
# keeps the data 64-byte aligned for memory mapping.
_HEADER_BYTES = 128
CACHE_VERSION = 1


class NpyWriter:
    """Append rows of a fixed-width integer array to ``path`` without holding them in memory.

    The file is a valid version-1.0 ``.npy`` once :meth:`close` has written the final
    row count into its header.
    """

    def __init__(self, path: Path, dtype=np.int32, ncols: int = 2):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.ncols = int(ncols)
        self.rows = 0
        self._f = open(self.path, "wb")
        self._f.write(b"\0" * _HEADER_BYTES)

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.ndim != 2 or rows.shape[1] != self.ncols:
            raise ValueError(f"expected rows of width {self.ncols}, got shape {rows.shape}")
        self._f.write(memoryview(rows).cast("B"))
        self.rows += rows.shape[0]

    def close(self) -> None:
        if self._f.closed:
            return
        header = "{'descr': %r, 'fortran_order': False, 'shape': (%d, %d), }" % (
            self.dtype.str, self.rows, self.ncols)
        body_len = _HEADER_BYTES - 10
        header = header.ljust(body_len - 1) + "\n"
        self._f.seek(0)
        self._f.write(b"\x93NUMPY\x01\x00" + body_len.to_bytes(2, "little") + header.encode("latin1"))
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def save_array(path: Path, arr: np.ndarray) -> None:
    """Write one array as ``.npy`` (no pickles: string ids are stored as fixed-width unicode)."""
    np.save(path, arr, allow_pickle=False)


def open_array(path: Path, mmap: bool) -> np.ndarray:
    """Open a cached array; memory-mapped read-only when ``mmap``, else read into memory."""
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def new_tmp_dir(parent: Path, name: str) -> Path:
    """A fresh private directory next to where ``name`` will live (same filesystem, so rename is atomic)."""
    parent.mkdir(parents=True, exist_ok=True)
    d = parent / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    return d


def write_meta(directory: Path, meta: dict) -> None:
    """Write ``meta.json`` last: its presence marks the directory complete."""
    meta = dict(meta, cache_version=CACHE_VERSION)
    (directory / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=_json_default))


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, (tuple, set)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_meta(directory: Path) -> dict | None:
    """The directory's meta, or None when it is missing, unreadable or from another cache version."""
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("cache_version") != CACHE_VERSION:
        return None
    return meta


def is_complete(directory: Path) -> bool:
    """True when ``meta.json`` is valid and every array in ``meta['arrays']`` opens with its recorded shape."""
    meta = read_meta(directory)
    if meta is None or not isinstance(meta.get("arrays"), dict):
        return False
    for fname, shape in meta["arrays"].items():
        try:
            a = np.load(directory / fname, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return False
        if list(a.shape) != list(shape):
            return False
        del a
    return True


def publish(tmp: Path, final: Path, replace: bool = False) -> Path:
    """Move a finished ``tmp`` directory to ``final`` atomically.

    If ``final`` already holds a complete copy (another process was faster), ours is
    discarded unless ``replace``; an incomplete or outdated ``final`` is replaced.
    Readers that memory-mapped the old files keep valid mappings (the files are only
    unlinked).
    """
    try:
        os.rename(tmp, final)
        return final
    except OSError:
        if not final.exists():
            raise
    if not replace and is_complete(final):
        shutil.rmtree(tmp, ignore_errors=True)
        return final
    trash = final.parent / f".trash-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(final, trash)
    except FileNotFoundError:
        trash = None
    try:
        os.rename(tmp, final)
    except OSError:
        # a concurrent writer got in between; keep theirs if it is good
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_complete(final):
            raise
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    return final


def remove_stale(parent: Path, name: str) -> None:
    """Remove leftovers (temporary and trash directories) of crashed writers of ``name`` whose process is gone."""
    if not parent.is_dir():
        return
    for d in parent.iterdir():
        for prefix in (f".tmp-{name}-", f".trash-{name}-"):
            if d.name.startswith(prefix):
                pid = d.name[len(prefix):].split("-")[0]
                if pid.isdigit() and not _alive(int(pid)):
                    shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
