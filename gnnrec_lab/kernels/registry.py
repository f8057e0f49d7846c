"""Which kernel backends exist and which one kernel calls use: ``native`` (numba, the default),
``torch`` and ``dgl`` (only where ``import dgl`` works)."""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Iterator

from gnnrec_lab.kernels.backends import BACKEND_CLASSES
from gnnrec_lab.util.errors import UserError

_instances: dict = {}
_current = "native"


@functools.lru_cache(maxsize=1)
def dgl_importable() -> bool:
    os.environ.setdefault("DGLBACKEND", "pytorch")  # else DGL guesses, says so and writes ~/.dgl/config.json
    try:
        import dgl  # noqa: F401
    except Exception:  # a broken DGL install (wrong torch) raises more than ImportError
        return False
    return True


def available_backends() -> list[str]:
    """Backends usable in this environment, the default first."""
    return ["native", "torch"] + (["dgl"] if dgl_importable() else [])


def _check(name: str) -> str:
    allowed = available_backends()
    if name not in allowed:
        extra = " (dgl is not importable here)" if name == "dgl" else ""
        raise UserError(f"backend: got {name!r}{extra}, allowed: {', '.join(allowed)}")
    return name


def backend(name: str | None = None):
    """The backend object named ``name`` (default: the current one), made once per process."""
    name = name or _current
    b = _instances.get(name)
    if b is None:
        b = _instances[name] = BACKEND_CLASSES[name]()
    return b


def set_backend(name: str) -> None:
    """Make ``name`` the backend for later kernel calls (UserError if unavailable)."""
    global _current
    _current = _check(name)


def get_backend() -> str:
    return _current


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
    """Temporarily switch backend (restored on exit)."""
    global _current
    prev = _current
    _current = _check(name)
    try:
        yield name
    finally:
        _current = prev
