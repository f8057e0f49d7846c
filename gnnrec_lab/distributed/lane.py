"""Is DGL here? :func:`dgl_available` and :func:`require_dgl` answer for this interpreter (DGL lives
in the DGL lane, ``make dgl``: ``.venv-dgl``, not in the main venv), :func:`dgl_lane_python` says
where that lane's interpreter is, if it is built."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from gnnrec_lab.util.errors import UserError

DGL_MISSING = ("distributed: needs DGL, which is not importable here (DGL 2.1 needs torch <= 2.2.1); "
               "build the DGL lane with `make dgl` and run `.venv-dgl/bin/gnnrec-lab distributed ...`")


def dgl_available() -> bool:
    from gnnrec_lab.kernels import dgl_importable
    return dgl_importable()


def require_dgl() -> None:
    if not dgl_available():
        raise UserError(DGL_MISSING)


def dgl_lane_python() -> Optional[Path]:
    """The DGL lane's interpreter (``make dgl``: ``.venv-dgl`` beside the package), if built."""
    p = Path(__file__).resolve().parents[2] / ".venv-dgl" / "bin" / "python"
    return p if p.exists() else None
